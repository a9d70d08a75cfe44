//! The append-only file, as Redis 7.0's aof.c keeps it: a directory (`appenddirname`)
//! of a base file (an RDB snapshot, `aof-use-rdb-preamble yes`), the incr files of
//! every write since, and the manifest that lists them (`manifest.rs`).
//!
//! * **What goes in** is the effect stream (`crate::effects`): the AOF is one of its
//!   readers, so it holds exactly what a replica receives — Redis 7.0's rewrites,
//!   atomic units inside MULTI / EXEC, a SELECT whenever the database changes.
//! * **Who writes it**: one thread, `aof-writer`, takes what the stream has, writes
//!   it with one write(2), and fsyncs per `appendfsync`: after every write
//!   (`always`), once a second (`everysec`) or never (`no`, the kernel's choice).
//! * **Group commit** (`always`): a connection holds its replies until the file holds,
//!   on disk, every effect numbered before its replies were made (`wait_durable`);
//!   the thread fsyncs once for everything that accumulated meanwhile, whatever the
//!   shard, so one fsync acknowledges a whole round of every core's writes.
//! * **Rewrites** (`rewrite.rs`) take a BGSAVE cut: the base is the snapshot at the
//!   cut, and the stream switches to a new incr file at exactly that cut
//!   (`effects::switch_point`), so base + new incr is the dataset with nothing twice.
//! * **Write errors**: with `everysec` / `no` the bytes stay buffered, writes are
//!   refused with -MISCONF and the write is retried every second until the disk has
//!   room; with `always` the server exits, as Redis does (a reply may already have
//!   been made from a state the file does not hold).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Wake, Waker};
use std::time::{Duration, Instant};

use super::manifest::Manifest;
use crate::config::{AppendFsync, Config};

/// Whether the AOF is on (Redis's aof_state != AOF_OFF): the writer thread runs and
/// reads the stream.
static ON: AtomicBool = AtomicBool::new(false);
/// `appendfsync` as the writer and the connections read it.
static FSYNC: AtomicU8 = AtomicU8::new(FSYNC_EVERYSEC);
const FSYNC_EVERYSEC: u8 = 0;
const FSYNC_ALWAYS: u8 = 1;
const FSYNC_NO: u8 = 2;
static TIMESTAMPS: AtomicBool = AtomicBool::new(false);
static NO_FSYNC_ON_REWRITE: AtomicBool = AtomicBool::new(false);

/// Every effect numbered below this is in the file (and on disk, under `always`).
static DURABLE: AtomicU64 = AtomicU64::new(0);
/// Connections waiting for `DURABLE` to pass a number.
static WAITERS: Mutex<Vec<(u64, Waker)>> = Mutex::new(Vec::new());

/// The stream offset (master_repl_offset) up to which the file is on disk (Redis's
/// fsynced_reploff_pending), with the offset's epoch then: moved by the writer after
/// an fsync, and when it has nothing unsynced and has caught up with the stream.
/// WAITAOF and a replica's REPLCONF ACK ... FACK read it through `fsynced_offset`.
static FSYNCED: Mutex<crate::effects::Mark> = Mutex::new(crate::effects::Mark {
    seq: 0,
    offset: 0,
    epoch: 0,
});

/// The errno of the last failed write or fsync (0: the last one succeeded).
static WRITE_ERRNO: AtomicI32 = AtomicI32::new(0);
/// Bytes of the files the manifest lists (INFO aof_current_size), of the base when
/// the last rewrite ended (aof_base_size, what auto-aof-rewrite-percentage grows
/// from), and of the incr file being written.
pub(super) static CURRENT_SIZE: AtomicU64 = AtomicU64::new(0);
pub(super) static BASE_SIZE: AtomicU64 = AtomicU64::new(0);
/// Bytes taken from the stream and not yet written (INFO aof_buffer_length).
static BUFFERED: AtomicU64 = AtomicU64::new(0);
/// DEBUG AOF-FLUSH-SLEEP: microseconds the writer sleeps before each write.
static FLUSH_SLEEP_US: AtomicU64 = AtomicU64::new(0);

pub fn set_flush_sleep(us: u64) {
    FLUSH_SLEEP_US.store(us, Ordering::Relaxed);
}

/// Times an everysec fsync ran late (INFO aof_delayed_fsync).
static DELAYED_FSYNC: AtomicU64 = AtomicU64::new(0);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the server keeps of the AOF while it is on.
pub(super) struct Aof {
    /// The AOF's reader id in the effect stream.
    pub(super) reader: u64,
    /// Asks the writer thread to finish (flush, fsync, close) and stop.
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Incr files opened for the writer's next switch point (a rewrite's cut).
    pub(super) next_files: Arc<Mutex<Vec<std::fs::File>>>,
}

static STATE: Mutex<Option<Aof>> = Mutex::new(None);

/// The manifest as last persisted (kept while the AOF is off too: BGREWRITEAOF
/// writes a base and a manifest then, as Redis 7.0 does).
static MANIFEST: std::sync::LazyLock<Mutex<Manifest>> =
    std::sync::LazyLock::new(|| Mutex::new(Manifest::default()));

pub(super) fn manifest() -> std::sync::MutexGuard<'static, Manifest> {
    lock(&MANIFEST)
}

pub(super) fn state() -> std::sync::MutexGuard<'static, Option<Aof>> {
    lock(&STATE)
}

/// Whether the AOF is on (INFO aof_enabled).
#[inline]
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The AOF directory of `config`.
pub fn dir_of(config: &Config) -> PathBuf {
    Path::new(config.dir()).join(config.appenddirname())
}

/// Copies the AOF settings the writer thread and the connections read into the
/// process-wide cache (at start and after every CONFIG SET).
pub fn sync_config(config: &Config) {
    let fsync = match config.appendfsync() {
        AppendFsync::Always => FSYNC_ALWAYS,
        AppendFsync::EverySec => FSYNC_EVERYSEC,
        AppendFsync::No => FSYNC_NO,
    };
    FSYNC.store(fsync, Ordering::Relaxed);
    TIMESTAMPS.store(
        config.bool_param("aof-timestamp-enabled").unwrap_or(false),
        Ordering::Relaxed,
    );
    NO_FSYNC_ON_REWRITE.store(
        config
            .bool_param("no-appendfsync-on-rewrite")
            .unwrap_or(false),
        Ordering::Relaxed,
    );
}

/// `aof-timestamp-enabled`.
pub fn timestamps() -> bool {
    TIMESTAMPS.load(Ordering::Relaxed)
}

/// The errno text, as strerror(3) (Redis's log lines and -MISCONF quote it).
pub(super) fn strerror(errno: i32) -> String {
    crate::util::io_error_text(&std::io::Error::from_raw_os_error(errno))
}

/// -MISCONF for writes while the last AOF write failed (Redis's
/// writeCommandsGetDiskErrorMessage), or None. The text is made once per errno.
pub fn write_refusal() -> Option<&'static str> {
    if !enabled() {
        return None;
    }
    let errno = WRITE_ERRNO.load(Ordering::Relaxed);
    if errno == 0 {
        return None;
    }
    static TEXTS: Mutex<Vec<(i32, &'static str)>> = Mutex::new(Vec::new());
    let mut texts = lock(&TEXTS);
    if let Some((_, t)) = texts.iter().find(|(e, _)| *e == errno) {
        return Some(t);
    }
    let text: &'static str = Box::leak(
        format!(
            "MISCONF Errors writing to the AOF file: {}",
            strerror(errno)
        )
        .into_boxed_str(),
    );
    texts.push((errno, text));
    Some(text)
}

/// Whether writes may be refused for an AOF write error (checked on the fast path).
#[inline]
pub fn may_refuse() -> bool {
    WRITE_ERRNO.load(Ordering::Relaxed) != 0 && enabled()
}

// ---------------------------------------------------------------------------------
// Group commit.

/// Whether replies must wait for the file (`appendfsync always` with the AOF on).
#[inline]
pub fn replies_wait() -> bool {
    FSYNC.load(Ordering::Relaxed) == FSYNC_ALWAYS && enabled()
}

/// Under `appendfsync always`: waits until every effect made so far is on disk, so
/// that a reply about to go out acknowledges nothing the file could lose (Redis
/// writes and fsyncs before it writes any reply of the event-loop round). Returns at
/// once when nothing is outstanding.
pub async fn wait_durable() {
    if !replies_wait() {
        return;
    }
    let target = crate::effects::next_seq();
    if DURABLE.load(Ordering::Acquire) >= target {
        return;
    }
    std::future::poll_fn(|cx| {
        if DURABLE.load(Ordering::Acquire) >= target || !replies_wait() {
            return Poll::Ready(());
        }
        let mut waiters = lock(&WAITERS);
        // Checked again under the lock the writer wakes under.
        if DURABLE.load(Ordering::Acquire) >= target {
            return Poll::Ready(());
        }
        waiters.push((target, cx.waker().clone()));
        Poll::Pending
    })
    .await
}

/// Everything numbered below `upto` is in the file: wakes who waited for it.
fn made_durable(upto: u64) {
    DURABLE.fetch_max(upto, Ordering::AcqRel);
    let mut waiters = lock(&WAITERS);
    let durable = DURABLE.load(Ordering::Acquire);
    waiters.retain(|(target, w)| {
        if *target <= durable {
            w.wake_by_ref();
            false
        } else {
            true
        }
    });
}

/// Releases every waiter (the AOF went off: nothing is waited for any more).
fn release_all_waiters() {
    for (_, w) in lock(&WAITERS).drain(..) {
        w.wake();
    }
}

/// Redis's fsynced_reploff: the stream offset up to which the AOF is on disk; -1
/// while the AOF is off, 0 while the first rewrite after CONFIG SET appendonly yes
/// has not put its base in place (the file is no AOF to load yet). WAITAOF's local
/// count compares a client's offset with it; a replica reports it as FACK. 0 also
/// after a replica's full sync moved the offset, until the writer has taken the
/// stream since (an offset of the old history could claim writes of the new one).
pub fn fsynced_offset() -> i64 {
    if !enabled() {
        return -1;
    }
    if super::rewrite::turning_on() {
        return 0;
    }
    let fsynced = *lock(&FSYNCED);
    if fsynced.epoch != crate::effects::offset_epoch() {
        return 0;
    }
    fsynced.offset as i64
}

// ---------------------------------------------------------------------------------
// The writer thread.

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// The incr file being written.
struct IncrFile {
    file: std::fs::File,
    /// Bytes in it (Redis's aof_last_incr_size), and up to which it is fsynced.
    size: u64,
    synced: u64,
}

/// Starts the writer thread on `file` (opened for append), reading the stream as
/// reader `reader`. Returns the stop flag and the thread.
pub(super) fn spawn_writer(
    file: std::fs::File,
    reader: u64,
    next_files: Arc<Mutex<Vec<std::fs::File>>>,
) -> std::io::Result<(Arc<AtomicBool>, std::thread::JoinHandle<()>)> {
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    // Past RLIMIT_FSIZE a write then fails with EFBIG, handled as any write error (a
    // full disk), instead of the signal killing the server.
    // SAFETY: setting a signal's disposition to ignore.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    DURABLE.store(crate::effects::next_seq(), Ordering::Release);
    // The caller holds every shard: what the stream carried so far is in the base
    // (or, at start, in the files just loaded), on disk.
    let covers = crate::effects::mark();
    *lock(&FSYNCED) = covers;
    let thread = std::thread::Builder::new()
        .name("aof-writer".into())
        .spawn(move || {
            let incr = IncrFile {
                file,
                size,
                synced: size,
            };
            Writer {
                incr,
                reader,
                next_files,
                stop: stopping,
                buf: Vec::new(),
                upto: 0,
                covers,
                published: covers,
                closed_unsynced: false,
                last_fsync: Instant::now(),
                last_ts: 0,
                last_error_log: None,
            }
            .run()
        })?;
    Ok((stop, thread))
}

struct Writer {
    incr: IncrFile,
    reader: u64,
    next_files: Arc<Mutex<Vec<std::fs::File>>>,
    stop: Arc<AtomicBool>,
    /// Taken from the stream, not yet written (kept across a failed write), the
    /// number every entry below which it completes, and the stream offset up to
    /// which it completes the stream (once it is empty: up to which the file does).
    buf: Vec<u8>,
    upto: u64,
    covers: crate::effects::Mark,
    /// What `FSYNCED` says (the writer is the only one that moves it).
    published: crate::effects::Mark,
    /// An earlier incr file was closed with bytes not fsynced (`appendfsync no`):
    /// nothing counts as fsynced until the next fsync (Redis counts that one).
    closed_unsynced: bool,
    last_fsync: Instant,
    /// The unix second of the last `#TS:` annotation.
    last_ts: u64,
    last_error_log: Option<Instant>,
}

/// How long the thread sleeps when the stream has nothing under `always` (it is
/// woken by appends).
const IDLE_PARK: Duration = Duration::from_millis(100);
/// Under `everysec` and `no`: how often the thread takes what the stream has and
/// writes it. A SIGKILL loses at most this much of acknowledged writes (Redis: none,
/// its write(2) precedes the reply); a machine crash loses up to a second either way.
const POLL_EVERY: Duration = Duration::from_millis(1);

impl Writer {
    fn run(mut self) {
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        loop {
            let stopping = self.stop.load(Ordering::Acquire);
            let switch = self.gather(&waker);
            if !self.buf.is_empty() {
                self.flush();
            }
            if self.buf.is_empty() && switch {
                self.switch_file();
                continue;
            }
            if stopping {
                // Stopping gives a failing disk one try, not a wait.
                self.sync_now();
                return;
            }
            self.fsync_if_due();
            if self.buf.is_empty() && SYNC_REQUESTED.load(Ordering::Acquire) {
                self.sync_now();
                SYNC_REQUESTED.store(false, Ordering::Release);
            }
            self.publish_fsynced();
            if !switch && self.buf.is_empty() {
                if FSYNC.load(Ordering::Relaxed) == FSYNC_ALWAYS {
                    std::thread::park_timeout(IDLE_PARK);
                } else {
                    std::thread::park_timeout(POLL_EVERY);
                }
            } else if !self.buf.is_empty() {
                // A failed write is retried once a second (Redis's serverCron).
                std::thread::park_timeout(Duration::from_secs(1));
            }
        }
    }

    /// Takes what the stream has into `buf`; true when a switch point is next (after
    /// `buf`).
    fn gather(&mut self, waker: &Waker) -> bool {
        // Under `always` every append wakes the thread (a reply waits for it); else it
        // looks every POLL_EVERY, sparing the shards a wake-up per write.
        let woken = FSYNC.load(Ordering::Relaxed) == FSYNC_ALWAYS;
        use crate::effects::Taken;
        loop {
            let next = if woken {
                crate::effects::poll_log(self.reader, waker)
            } else {
                crate::effects::take_log(self.reader)
            };
            match next {
                Some(Taken::Bytes(bytes, mark)) => {
                    self.annotate();
                    if self.buf.is_empty() {
                        self.buf = bytes;
                    } else {
                        self.buf.extend_from_slice(&bytes);
                    }
                    self.upto = mark.seq;
                    self.covers = mark;
                    BUFFERED.store(self.buf.len() as u64, Ordering::Relaxed);
                }
                Some(Taken::Switch) => return true,
                Some(Taken::CaughtUp(_)) | None => {
                    if let Some(Taken::CaughtUp(mark)) = next {
                        // Nothing came since: what was taken covers the stream so
                        // far (keep-alive PINGs, a master's stream passed on).
                        self.covers = mark;
                    }
                    if self.buf.is_empty() {
                        // Nothing is owed: whatever the stream had is written.
                        made_durable(self.upto.max(DURABLE.load(Ordering::Acquire)));
                    }
                    return false;
                }
            }
        }
    }

    /// `aof-timestamp-enabled`: a `#TS:<unix time>` line before the first command of
    /// each second (Redis's genAofTimestampAnnotationIfNeeded).
    fn annotate(&mut self) {
        if !TIMESTAMPS.load(Ordering::Relaxed) {
            return;
        }
        let now = crate::util::now_ms() / 1000;
        if now > self.last_ts {
            self.last_ts = now;
            self.buf
                .extend_from_slice(format!("#TS:{now}\r\n").as_bytes());
        }
    }

    /// Writes `buf` with one write(2) (retried on a short one), then fsyncs under
    /// `always`. DEBUG AOF-FLUSH-SLEEP's delay comes first (Redis's test knob). On an error the file is cut back to before the write, `buf` kept,
    /// and writes refused until a retry succeeds.
    fn flush(&mut self) {
        let sleep = FLUSH_SLEEP_US.load(Ordering::Relaxed);
        if sleep > 0 {
            std::thread::sleep(Duration::from_micros(sleep));
        }
        match self.incr.file.write_all(&self.buf) {
            Ok(()) => {
                self.incr.size += self.buf.len() as u64;
                CURRENT_SIZE.fetch_add(self.buf.len() as u64, Ordering::Relaxed);
                self.buf.clear();
                BUFFERED.store(0, Ordering::Relaxed);
                if WRITE_ERRNO.swap(0, Ordering::Relaxed) != 0 {
                    tracing::warn!("AOF write error looks solved, Redis can write again.");
                }
            }
            Err(e) => {
                self.write_failed(&e);
                return;
            }
        }
        if FSYNC.load(Ordering::Relaxed) == FSYNC_ALWAYS && !self.fsync_paused() {
            if let Err(e) = self.incr.file.sync_data() {
                tracing::warn!(
                    "Can't persist AOF for fsync error when the AOF fsync policy is 'always': {}. Exiting...",
                    crate::util::io_error_text(&e)
                );
                std::process::exit(1);
            }
            self.incr.synced = self.incr.size;
            self.closed_unsynced = false;
            self.last_fsync = Instant::now();
        }
        made_durable(self.upto);
    }

    /// Everything taken is written and on disk: the stream is fsynced as far as it
    /// covers (Redis sets fsynced_reploff_pending after each fsync; with nothing left
    /// unsynced, what the stream carried since without a write is covered too), and
    /// WAIT / WAITAOF clients look again.
    fn publish_fsynced(&mut self) {
        let synced =
            self.buf.is_empty() && !self.closed_unsynced && self.incr.synced == self.incr.size;
        if !synced || self.published == self.covers {
            return;
        }
        self.published = self.covers;
        *lock(&FSYNCED) = self.covers;
        crate::replication::wake_ack_waiters();
    }

    fn write_failed(&mut self, e: &std::io::Error) {
        let errno = e.raw_os_error().unwrap_or(libc::EIO);
        let can_log = self
            .last_error_log
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(30));
        if can_log {
            self.last_error_log = Some(Instant::now());
            tracing::warn!(
                "Error writing to the AOF file: {}",
                crate::util::io_error_text(e)
            );
        }
        // A partial write is removed, so the file never holds half a command.
        if let Err(te) = self.incr.file.set_len(self.incr.size) {
            if can_log {
                tracing::warn!(
                    "Could not remove short write from the append-only file.  Redis may refuse to load the AOF the next time it starts.  ftruncate: {}",
                    crate::util::io_error_text(&te)
                );
            }
        }
        if FSYNC.load(Ordering::Relaxed) == FSYNC_ALWAYS {
            tracing::warn!(
                "Can't recover from AOF write error when the AOF fsync policy is 'always'. Exiting..."
            );
            std::process::exit(1);
        }
        WRITE_ERRNO.store(errno, Ordering::Relaxed);
    }

    /// `no-appendfsync-on-rewrite yes` while a rewrite (or a save) writes.
    fn fsync_paused(&self) -> bool {
        NO_FSYNC_ON_REWRITE.load(Ordering::Relaxed) && super::bgsave::in_progress()
    }

    /// `everysec`: an fsync when a second has passed and something is not synced
    /// (`always` syncs in `flush`; a policy changed to always syncs here too).
    fn fsync_if_due(&mut self) {
        if self.incr.synced == self.incr.size || self.fsync_paused() {
            return;
        }
        match FSYNC.load(Ordering::Relaxed) {
            FSYNC_NO => {}
            FSYNC_ALWAYS => self.sync_now(),
            _ => {
                let since = self.last_fsync.elapsed();
                if since >= Duration::from_secs(1) {
                    if since >= Duration::from_secs(3) {
                        DELAYED_FSYNC.fetch_add(1, Ordering::Relaxed);
                    }
                    self.sync_now();
                }
            }
        }
    }

    fn sync_now(&mut self) {
        if self.incr.synced == self.incr.size {
            return;
        }
        match self.incr.file.sync_data() {
            Ok(()) => {
                self.incr.synced = self.incr.size;
                self.closed_unsynced = false;
                self.last_fsync = Instant::now();
            }
            Err(e) => {
                tracing::warn!(
                    "Error syncing the AOF file: {}",
                    crate::util::io_error_text(&e)
                );
                WRITE_ERRNO.store(e.raw_os_error().unwrap_or(libc::EIO), Ordering::Relaxed);
            }
        }
    }

    /// A switch point: the current incr file is synced and closed, the next one (a
    /// rewrite opened it before its cut) takes over.
    fn switch_file(&mut self) {
        let next = lock(&self.next_files).pop();
        let Some(file) = next else {
            // Not possible (a switch point is set only with a file ready); the old
            // file keeps everything, which loses nothing.
            tracing::warn!("AOF switch point without a new incr file");
            return;
        };
        if FSYNC.load(Ordering::Relaxed) != FSYNC_NO {
            self.sync_now();
        }
        self.closed_unsynced |= self.incr.synced != self.incr.size;
        self.incr = IncrFile {
            file,
            size: 0,
            synced: 0,
        };
    }
}

// ---------------------------------------------------------------------------------
// Turning it on and off.

/// Opens `name` in the AOF directory for appending (created if missing).
pub(super) fn open_incr(dir: &Path, name: &str, truncate: bool) -> Result<std::fs::File, String> {
    let mut opts = std::fs::OpenOptions::new();
    opts.create(true);
    if truncate {
        opts.write(true).truncate(true);
    } else {
        opts.append(true);
    }
    opts.open(dir.join(name)).map_err(|e| {
        format!(
            "Can't open the append-only file {name}: {}",
            crate::util::io_error_text(&e)
        )
    })
}

/// Turns the AOF on for `file` (the last incr file, open), reading the stream from
/// now on. The caller holds every shard (or nothing runs yet), so no write falls
/// between the file's content and the stream.
pub(super) fn turn_on(file: std::fs::File) -> Result<(), String> {
    let reader = crate::effects::subscribe_log();
    let next_files = Arc::new(Mutex::new(Vec::new()));
    let (stop, thread) = match spawn_writer(file, reader, next_files.clone()) {
        Ok(t) => t,
        Err(e) => {
            crate::effects::unsubscribe(reader);
            return Err(format!("Can't start the AOF writer thread: {e}"));
        }
    };
    WRITE_ERRNO.store(0, Ordering::Relaxed);
    *state() = Some(Aof {
        reader,
        stop,
        thread: Some(thread),
        next_files,
    });
    ON.store(true, Ordering::Release);
    // WAITAOF's local count is no longer -1.
    crate::replication::wake_ack_waiters();
    Ok(())
}

/// Turns the AOF off (CONFIG SET appendonly no, shutdown): what the stream gave it is
/// written and fsynced, the file closed (Redis's stopAppendOnly).
pub fn turn_off() {
    let taken = state().take();
    let Some(mut aof) = taken else {
        return;
    };
    aof.stop.store(true, Ordering::Release);
    if let Some(t) = aof.thread.take() {
        t.thread().unpark();
        let _ = t.join();
    }
    crate::effects::unsubscribe(aof.reader);
    ON.store(false, Ordering::Release);
    WRITE_ERRNO.store(0, Ordering::Relaxed);
    release_all_waiters();
    // WAITAOF clients waiting for the file get their error (or count 0).
    crate::replication::wake_ack_waiters();
}

/// Asks the writer for an fsync of everything written (cleared when done).
static SYNC_REQUESTED: AtomicBool = AtomicBool::new(false);

/// SHUTDOWN (Redis's prepareForShutdown): every effect made so far written and the
/// file fsynced, the AOF left on (a shutdown that fails goes on serving).
pub async fn flush_for_shutdown() {
    if !enabled() {
        return;
    }
    tracing::info!("Calling fsync() on the AOF file.");
    let target = crate::effects::next_seq();
    SYNC_REQUESTED.store(true, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(5);
    if let Some(t) = state().as_ref().and_then(|a| a.thread.as_ref()) {
        t.thread().unpark();
    }
    while (DURABLE.load(Ordering::Acquire) < target || SYNC_REQUESTED.load(Ordering::Acquire))
        && Instant::now() < deadline
        && enabled()
    {
        crate::runtime::sleep(Duration::from_millis(1)).await;
    }
}

/// INFO persistence's aof_* fields after rdb_last_load_keys_loaded (the first
/// block), as Redis 7.0 prints them.
pub fn info_fields(out: &mut String) {
    use std::fmt::Write as _;
    let rw = super::rewrite::info();
    let write_ok = WRITE_ERRNO.load(Ordering::Relaxed) == 0;
    let _ = write!(
        out,
        "aof_enabled:{}\r\naof_rewrite_in_progress:{}\r\naof_rewrite_scheduled:{}\r\naof_last_rewrite_time_sec:{}\r\naof_current_rewrite_time_sec:{}\r\naof_last_bgrewrite_status:{}\r\naof_rewrites:{}\r\naof_rewrites_consecutive_failures:{}\r\naof_last_write_status:{}\r\naof_last_cow_size:{}\r\nmodule_fork_in_progress:0\r\nmodule_fork_last_cow_size:0\r\n",
        enabled() as u8,
        rw.in_progress as u8,
        rw.scheduled as u8,
        rw.last_time_sec,
        rw.current_time_sec,
        if rw.last_ok { "ok" } else { "err" },
        rw.rewrites,
        rw.consecutive_failures,
        if write_ok { "ok" } else { "err" },
        rw.last_cow_size,
    );
    if enabled() {
        let _ = write!(
            out,
            "aof_current_size:{}\r\naof_base_size:{}\r\naof_pending_rewrite:{}\r\naof_buffer_length:{}\r\naof_pending_bio_fsync:0\r\naof_delayed_fsync:{}\r\n",
            CURRENT_SIZE.load(Ordering::Relaxed),
            BASE_SIZE.load(Ordering::Relaxed),
            rw.scheduled as u8,
            BUFFERED.load(Ordering::Relaxed),
            DELAYED_FSYNC.load(Ordering::Relaxed),
        );
    }
}
