//! The output side of a BGSAVE: a thread that frames the shards' records into one RDB
//! file, and the process that writes it.
//!
//! The shards serialize (bgsave.rs); this thread puts the pieces in file order —
//! header, a SELECTDB (with RESIZEDB, the sizes at the cut) whenever the database
//! changes, the records, EOF and the CRC64 — and pipes them to a child process,
//! `tessera --rdb-writer DIR DBFILENAME`, which writes `DIR/temp-<its pid>.rdb`,
//! flushes it to disk and renames it into place, as Redis's fork child does. The child
//! holds nothing but the bytes in flight: it is spawned with posix_spawn, so no page
//! of the dataset is shared or copied. Why a process and not this thread alone: a
//! writer stuck on a slow or failing disk stalls no thread of the server, and
//! operators and Redis's tooling find the save where Redis has it (a child of the
//! server, `temp-<child pid>.rdb`, killed with a signal to abort it).
//!
//! A diskless full sync uses the same thread and a child of its own,
//! `tessera --rdb-writer --sockets TIMEOUT_MS FD...` (`tessera-rdb-to-replicas` in
//! `ps`), which inherits the replicas' sockets and writes every frame to each (Redis's
//! rdbSaveToSlavesSockets child), dropping a replica whose socket fails or does not
//! drain for the timeout; at the end it reports a verdict per socket on stdout.
//!
//! The pipe carries frames: an 8-byte little-endian length, then that many bytes;
//! length 0 commits. A child that reads end-of-file before the commit (the server
//! died or gave the save up) removes its temporary file and exits 1.

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use super::bgsave::{Job, Outcome, Piece};
use crate::storage::rdb::{crc64, file};

/// The first argument that makes the binary the writer child, not a server.
pub const CHILD_FLAG: &str = "--rdb-writer";

/// The argument after `CHILD_FLAG` that makes the child write to replica sockets.
const SOCKETS_FLAG: &str = "--sockets";

/// Where the writer child puts the bytes.
pub enum Target<'a> {
    /// `dir`/`dbfilename`, through a temporary file renamed into place.
    File { dir: &'a Path, dbfilename: &'a str },
    /// The sockets of the replicas of one diskless full sync (Redis's
    /// rdbSaveToSlavesSockets), each given up after `timeout_ms` without progress.
    Sockets {
        sockets: &'a [std::os::fd::OwnedFd],
        timeout_ms: u64,
    },
}

/// Starts the writer process for `target`.
pub fn spawn_child(target: Target<'_>) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt as _;
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg(CHILD_FLAG)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    match target {
        Target::File { dir, dbfilename } => {
            // What `ps` shows, as Redis's child is "redis-rdb-bgsave".
            cmd.arg0("tessera-rdb-bgsave").arg(dir).arg(dbfilename);
            let child = cmd.spawn()?;
            if let Some(pipe) = &child.stdin {
                widen_pipe(pipe);
            }
            Ok(child)
        }
        Target::Sockets {
            sockets,
            timeout_ms,
        } => {
            // The child inherits copies of the sockets (dup(2) leaves close-on-exec
            // off), which are closed here once it runs: posix_spawn stays usable (no
            // pre_exec hook, which would fork the whole server first).
            let inherited = sockets
                .iter()
                .map(Inheritable::copy)
                .collect::<std::io::Result<Vec<_>>>()?;
            cmd.arg0("tessera-rdb-to-replicas")
                .arg(SOCKETS_FLAG)
                .arg(timeout_ms.to_string())
                .args(inherited.iter().map(|fd| fd.0.to_string()))
                .stdout(Stdio::piped());
            let child = cmd.spawn();
            drop(inherited);
            child
        }
    }
}

/// Gives the pipe to a file-writing child room for a whole batch of records (1 MiB,
/// Linux's default ceiling for unprivileged processes, instead of 64 KiB): the child
/// then wakes once per batch, not once per 64 KiB. Best effort: a smaller pipe only
/// means more wake-ups.
fn widen_pipe(pipe: &std::process::ChildStdin) {
    use std::os::fd::AsRawFd as _;
    // SAFETY: fcntl(2) F_SETPIPE_SZ on a pipe descriptor this process holds.
    unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20) };
}

/// A copy of a descriptor that a spawned process inherits (dup(2) leaves
/// close-on-exec off), closed when dropped.
struct Inheritable(i32);

impl Inheritable {
    fn copy(fd: &std::os::fd::OwnedFd) -> std::io::Result<Self> {
        use std::os::fd::AsRawFd as _;
        // SAFETY: dup(2) of a descriptor we own.
        let copy = unsafe { libc::dup(fd.as_raw_fd()) };
        if copy < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self(copy))
    }
}

impl Drop for Inheritable {
    fn drop(&mut self) {
        // SAFETY: closing the copy made by `copy`, which nothing else holds.
        unsafe { libc::close(self.0) };
    }
}

/// Makes the calling thread (the framing thread, the child) yield the CPU to the
/// shards and to anything else busier: a save is background work, and on a host
/// whose cores are all busy serving it should take the time that is left over.
pub fn lower_priority() {
    // SAFETY: setpriority on the calling thread (tid 0 would be the process).
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, SAVE_NICE);
    }
}

/// The niceness of a save's threads: well below the shards, not starved.
const SAVE_NICE: i32 = 19;

/// The temporary file the writer child `pid` writes in `dir`.
pub fn temp_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("temp-{pid}.rdb"))
}

/// What the framing thread starts from.
pub struct Framing {
    /// An AOF base of commands (aof-use-rdb-preamble no): the records are turned into
    /// the commands that rebuild them, with SELECTs, and the file has no trailer.
    pub commands: bool,
    /// Bytes before the file, outside its checksum (a diskless full sync's
    /// +FULLRESYNC line and `$EOF:<mark>`).
    pub preamble: Vec<u8>,
    pub header: Vec<u8>,
    /// Keys and keys with a TTL per database at the cut.
    pub db_sizes: Vec<(u64, u64)>,
    pub shards: usize,
    /// `rdbchecksum`: off, the file ends with a zero checksum, as Redis writes it
    /// then (loaders skip the check on a zero).
    pub checksum: bool,
    /// Bytes after the file (a diskless full sync's EOF mark).
    pub suffix: Vec<u8>,
}

/// The framing thread's body: returns when the file is committed, or the save failed
/// or was given up; `job`'s outcome says which.
pub fn run(job: Arc<Job>, pieces: Receiver<Piece>, mut child: Child, framing: Framing) {
    let outcome = match child.stdin.take() {
        Some(pipe) => frame(&job, &pieces, pipe, &mut child, framing),
        None => Err(()),
    };
    let status = match outcome {
        // Commit sent: the child finishes the file whatever happens to us now.
        Ok(()) => child.wait(),
        Err(()) => {
            // Given up or broken: the child is ended if it still runs (SIGUSR1 is what
            // Redis's killRDBChild sends, and what keeps the save's status "ok").
            if matches!(child.try_wait(), Ok(None)) {
                // SAFETY: kill(2) on the pid of our own unreaped child.
                unsafe { libc::kill(child.id() as i32, libc::SIGUSR1) };
            }
            child.wait()
        }
    };
    if let Some(mut results) = child.stdout.take() {
        // A sockets child's verdict per replica: a '1' or a '0' each, in order.
        let mut verdicts = Vec::new();
        let _ = results.read_to_end(&mut verdicts);
        job.set_socket_results(verdicts.iter().map(|&v| v == b'1').collect());
    }
    let mut report = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut report);
    }
    for line in report.lines().filter(|l| !l.is_empty()) {
        // The child reports failures, and one notice (as Redis's levels are).
        if line.starts_with("Diskless rdb transfer, done reading from pipe") {
            tracing::info!("{line}");
        } else {
            tracing::warn!("{line}");
        }
    }
    let outcome = match status {
        Ok(s) if s.success() => Outcome::Saved,
        Ok(s) => match s.signal() {
            Some(sig) => Outcome::Killed(sig),
            None => Outcome::Failed,
        },
        Err(_) => Outcome::Failed,
    };
    if !matches!(outcome, Outcome::Saved) {
        job.abandon();
        // A child ended by a signal could not remove its file (rdbRemoveTempFile).
        let _ = std::fs::remove_file(temp_path(&job.dir, child.id()));
    }
    job.finish(outcome);
}

/// Sends the file to the child: Ok once the commit frame is written.
fn frame(
    job: &Job,
    pieces: &Receiver<Piece>,
    pipe: std::process::ChildStdin,
    child: &mut Child,
    framing: Framing,
) -> Result<(), ()> {
    let mut out = Frames {
        pipe,
        crc: 0,
        checksum: framing.checksum,
    };
    out.send_raw(&framing.preamble)?;
    out.send(&framing.header)?;
    let mut selected = None;
    let mut seen = vec![false; framing.db_sizes.len()];
    let mut done = 0;
    while done < framing.shards {
        if job.abandoned() {
            return Err(());
        }
        match pieces.recv_timeout(Duration::from_millis(50)) {
            Ok(Piece::Records { db, bytes }) if framing.commands => {
                job.in_flight.fetch_sub(bytes.len(), Ordering::Relaxed);
                let mut cmds = Vec::with_capacity(bytes.len() + 64);
                if selected != Some(db) {
                    super::aof_base::select(&mut cmds, db);
                    selected = Some(db);
                }
                if let Err(e) = super::aof_base::records_to_commands(&bytes, &mut cmds) {
                    tracing::warn!("Write error writing append only file on disk: {e}");
                    return Err(());
                }
                out.send(&cmds)?;
            }
            Ok(Piece::Records { db, bytes }) => {
                job.in_flight.fetch_sub(bytes.len(), Ordering::Relaxed);
                if selected != Some(db) {
                    let mut select = Vec::with_capacity(16);
                    let first = !std::mem::replace(&mut seen[db], true);
                    file::select_db(&mut select, db, first.then(|| framing.db_sizes[db]));
                    out.send(&select)?;
                    selected = Some(db);
                }
                out.send(&bytes)?;
            }
            Ok(Piece::ShardDone) => done += 1,
            Err(RecvTimeoutError::Timeout) => {
                // A child killed while nothing was to be written is noticed here.
                if !matches!(child.try_wait(), Ok(None)) {
                    return Err(());
                }
            }
            Err(RecvTimeoutError::Disconnected) => return Err(()),
        }
    }
    if !framing.commands {
        let trailer = match out.checksum {
            true => file::trailer(out.crc),
            false => file::trailer_without_checksum(),
        };
        out.send(&trailer)?;
    }
    out.send_raw(&framing.suffix)?;
    out.pipe.write_all(&0u64.to_le_bytes()).map_err(|_| ())
}

/// The pipe to the child, and the CRC64 of the file's bytes sent so far.
struct Frames {
    pipe: std::process::ChildStdin,
    crc: u64,
    checksum: bool,
}

impl Frames {
    fn send(&mut self, bytes: &[u8]) -> Result<(), ()> {
        if self.checksum {
            self.crc = crc64(self.crc, bytes);
        }
        self.send_raw(bytes)
    }

    /// Sends bytes that are not part of the file's checksum.
    fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ()> {
        if bytes.is_empty() {
            return Ok(()); // a zero length is the commit
        }
        let len = (bytes.len() as u64).to_le_bytes();
        self.pipe
            .write_all(&len)
            .and_then(|_| self.pipe.write_all(bytes))
            .map_err(|_| ())
    }
}

/// The writer child's main: `args` are DIR and DBFILENAME, or `--sockets`, the
/// timeout in ms and the inherited socket descriptors. Returns the exit code.
pub fn child_main(args: &[String]) -> i32 {
    if args.first().map(String::as_str) == Some(SOCKETS_FLAG) {
        return sockets_child_main(&args[1..]);
    }
    let [dir, dbfilename] = args else {
        eprintln!("usage: {CHILD_FLAG} DIR DBFILENAME");
        return 2;
    };
    lower_priority();
    // Past RLIMIT_FSIZE a write then fails with EFBIG, reported like any write error
    // (a full disk), instead of the signal's core dump.
    // SAFETY: setting a signal's disposition to ignore.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let dir = Path::new(dir);
    let tmp = temp_path(dir, std::process::id());
    let cwd = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    let mut out = match std::fs::File::create(&tmp) {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "Failed opening the temp RDB file {} (in server root dir {cwd}) for saving: {}",
                tmp.display(),
                strerror(&e)
            );
            return 1;
        }
    };
    let written = copy_frames(&mut std::io::stdin().lock(), &mut out);
    let result = match written {
        Ok(true) => commit(out, &tmp, &dir.join(dbfilename), &cwd),
        Ok(false) => Err(String::new()),
        Err(e) => Err(format!("Write error saving DB on disk: {}", strerror(&e))),
    };
    match result {
        Ok(()) => 0,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("{msg}");
            }
            let _ = std::fs::remove_file(&tmp);
            1
        }
    }
}

/// Copies frames to `out` until the commit (true) or end-of-file (false).
fn copy_frames(input: &mut impl Read, out: &mut std::fs::File) -> std::io::Result<bool> {
    let mut len = [0u8; 8];
    loop {
        if input.read_exact(&mut len).is_err() {
            return Ok(false);
        }
        let n = u64::from_le_bytes(len);
        if n == 0 {
            return Ok(true);
        }
        let copied = std::io::copy(&mut input.take(n), out)?;
        if copied < n {
            return Ok(false);
        }
    }
}

/// Flushes the file to disk and renames it into place (rdbSave's last steps).
fn commit(out: std::fs::File, tmp: &Path, path: &Path, cwd: &str) -> Result<(), String> {
    out.sync_all()
        .map_err(|e| format!("Write error saving DB on disk: {}", strerror(&e)))?;
    drop(out);
    std::fs::rename(tmp, path).map_err(|e| {
        format!(
            "Error moving temp DB file {} on the final destination {} (in server root dir {cwd}): {}",
            tmp.display(),
            path.display(),
            strerror(&e)
        )
    })?;
    // The rename itself is durable only once the directory is.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// An I/O error as strerror(3) words it, which Redis's log lines quote ("No space
/// left on device"), without Rust's " (os error N)".
fn strerror(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// The sockets child (Redis's rdbSaveToSlavesSockets child): every frame goes to
/// every replica still up; at the commit it prints a verdict per socket ('1' ok, '0'
/// dropped) on stdout. Exits 0 when at least one replica got the whole file.
fn sockets_child_main(args: &[String]) -> i32 {
    let parsed = args.first().and_then(|t| t.parse::<u64>().ok()).zip(
        args[1..]
            .iter()
            .map(|a| a.parse::<i32>().ok())
            .collect::<Option<Vec<_>>>(),
    );
    let Some((timeout_ms, fds)) = parsed.filter(|(_, fds)| !fds.is_empty()) else {
        eprintln!("usage: {CHILD_FLAG} {SOCKETS_FLAG} TIMEOUT_MS FD...");
        return 2;
    };
    lower_priority();
    let mut replicas: Vec<Option<i32>> = fds.into_iter().map(Some).collect();
    let mut input = std::io::stdin().lock();
    let mut frame = Vec::new();
    let mut len = [0u8; 8];
    let committed = loop {
        if input.read_exact(&mut len).is_err() {
            break false;
        }
        let n = u64::from_le_bytes(len);
        if n == 0 {
            break true;
        }
        frame.clear();
        match (&mut input).take(n).read_to_end(&mut frame) {
            Ok(got) if got as u64 == n => {}
            _ => break false,
        }
        for slot in replicas.iter_mut() {
            if let Some(fd) = *slot {
                if let Err(e) = write_socket(fd, &frame, timeout_ms) {
                    eprintln!("Diskless rdb transfer, replica dropped: {e}");
                    *slot = None;
                }
            }
        }
        if replicas.iter().all(Option::is_none) {
            eprintln!("Diskless rdb transfer, last replica dropped, killing fork child.");
            break false;
        }
    };
    if committed {
        // The whole file is written to the replicas still up (Redis's parent logs
        // this when its child's pipe ends; here the child is the one writing).
        let up = replicas.iter().filter(|r| r.is_some()).count();
        eprintln!("Diskless rdb transfer, done reading from pipe, {up} replicas still up.");
    }
    let verdicts: Vec<u8> = replicas
        .iter()
        .map(|r| if committed && r.is_some() { b'1' } else { b'0' })
        .collect();
    let _ = std::io::stdout().write_all(&verdicts);
    i32::from(!committed)
}

/// Writes all of `bytes` to the (non-blocking) socket `fd`, waiting for it to drain;
/// an error when it fails or makes no progress for `timeout_ms`.
fn write_socket(fd: i32, mut bytes: &[u8], timeout_ms: u64) -> std::io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: send(2) from a live buffer to a descriptor this process holds;
        // MSG_NOSIGNAL: a gone replica is an EPIPE error, not a signal.
        let n = unsafe { libc::send(fd, bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL) };
        if n >= 0 {
            bytes = &bytes[n as usize..];
            continue;
        }
        let err = std::io::Error::last_os_error();
        match err.kind() {
            std::io::ErrorKind::Interrupted => {}
            std::io::ErrorKind::WouldBlock => {
                let mut pfd = libc::pollfd {
                    fd,
                    events: libc::POLLOUT,
                    revents: 0,
                };
                let wait = timeout_ms.min(i32::MAX as u64) as i32;
                // SAFETY: poll(2) on one pollfd that lives on this stack.
                let ready = unsafe { libc::poll(&mut pfd, 1, wait) };
                if ready == 0 {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "timeout writing to the replica",
                    ));
                }
            }
            _ => return Err(err),
        }
    }
    Ok(())
}
