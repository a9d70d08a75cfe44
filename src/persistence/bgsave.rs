//! BGSAVE without fork (Redis's rdbSaveBackground, its done handler and serverCron's
//! save points), as DESIGN.md's "snapshots without fork()" has it.
//!
//! * **The cut.** Every shard is locked whole (`MultiShardOp::lock_all`: in-flight
//!   multi-shard operations finish first, new ones wait), and while all are held each
//!   database cuts its snapshot (`Db::begin_snapshot`, a flip of one bit). A multi-key
//!   MSET or an EXEC is therefore in the file whole or not at all, and no write is in
//!   the file whose cause is not.
//! * **The walk.** Each shard then walks its slots between its other tasks, a few
//!   slots per step, writing the entries as RDB records; a write to an entry the walk
//!   has not reached saves it first (`storage::snapshot`). Records go to the framing
//!   thread (`writer.rs`) in pieces; above `MAX_IN_FLIGHT` bytes not yet written the
//!   walk waits, so a slow disk bounds the memory held, not the dataset.
//! * **The end.** The writer child renames the file into place; shard 0's cron
//!   (`cron`) then does what Redis's backgroundSaveDoneHandler does: the log line, the
//!   change counter minus what it was at the cut, LASTSAVE, the status that
//!   `stop-writes-on-bgsave-error` reads.
//!
//! Giving a save up (FLUSHALL, SHUTDOWN, the writer killed or failing) makes the walks
//! go on without writing, only to leave every entry's mark agreeing again; a new cut
//! waits for that.

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::writer;
use crate::shard::locks::LockOwner;
use crate::shard::multi::MultiShardOp;
use crate::shard::ShardCell;

/// What a shard hands the framing thread.
pub enum Piece {
    /// Records of database `db`.
    Records { db: usize, bytes: Vec<u8> },
    /// The shard's walk is over: it sends nothing more.
    ShardDone,
}

/// How a save ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    Saved,
    /// The writer failed (its message is in the log).
    Failed,
    /// The writer was ended by this signal.
    Killed(i32),
}

/// What a background job writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// BGSAVE: `dir`/`dbfilename`.
    Rdb,
    /// An AOF rewrite's new base: this path under `dir` (`appenddirname`/name), an
    /// RDB or (`commands`, aof-use-rdb-preamble no) the commands that rebuild it.
    AofBase { path: String, commands: bool },
    /// A diskless full sync: the file goes to the sockets of the replicas of one
    /// sync round (Redis's RDB_CHILD_TYPE_SOCKET).
    Replicas,
}

impl Kind {
    /// An RDB child as Redis counts one (BGSAVE refused, INFO's
    /// rdb_bgsave_in_progress, killed by FLUSHALL): a save to disk or to replicas.
    fn is_rdb_child(&self) -> bool {
        matches!(self, Kind::Rdb | Kind::Replicas)
    }
}

/// A diskless full sync's target: the replicas' sockets, what precedes the file on
/// them (filled in by the job's `AtCut`, which attaches the links and so learns the
/// offset that +FULLRESYNC reports) and what follows it (the EOF mark).
pub struct Transfer {
    pub sockets: Vec<std::os::fd::OwnedFd>,
    /// A replica not draining its socket for this long is dropped (repl-timeout).
    pub timeout_ms: u64,
    pub preamble: Rc<std::cell::RefCell<Vec<u8>>>,
    pub suffix: Vec<u8>,
}

/// One background save.
pub struct Job {
    pub(super) kind: Kind,
    pieces: Sender<Piece>,
    /// Bytes sent to the framing thread and not yet written.
    pub(super) in_flight: AtomicUsize,
    abandoned: AtomicBool,
    outcome: Mutex<Option<Outcome>>,
    pub(super) dir: std::path::PathBuf,
    child_pid: u32,
    /// A pidfd of the child (Linux 5.3+): signals sent through it can never reach
    /// another process that got the pid after the child was reaped.
    child_fd: Option<std::os::fd::OwnedFd>,
    started: Instant,
    keys_total: u64,
    keys_saved: AtomicU64,
    /// Bytes of records saved ahead of the walk (INFO's current_cow_size).
    ahead_bytes: AtomicU64,
    /// Each shard's change counter at the cut.
    dirty_at_cut: Vec<u64>,
    /// A transfer's verdict per replica socket, in order (true: got the whole file),
    /// set before the outcome.
    socket_results: Mutex<Vec<bool>>,
    /// The done handler ran (LASTSAVE and the change counter are updated).
    handled: AtomicBool,
}

impl Job {
    pub fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed)
    }

    pub(super) fn abandon(&self) {
        self.abandoned.store(true, Ordering::Relaxed);
    }

    pub(super) fn finish(&self, outcome: Outcome) {
        *lock(&self.outcome) = Some(outcome);
    }

    /// How the job ended; None while it runs.
    pub fn outcome(&self) -> Option<Outcome> {
        *lock(&self.outcome)
    }

    /// How the job ended, once its done handler ran (Redis sends a disk-based sync's
    /// file from there, after LASTSAVE moved).
    pub fn handled_outcome(&self) -> Option<Outcome> {
        self.handled
            .load(Ordering::SeqCst)
            .then(|| self.outcome())
            .flatten()
    }

    pub(super) fn set_socket_results(&self, results: Vec<bool>) {
        *lock(&self.socket_results) = results;
    }

    /// Whether the replica on socket `i` of a transfer got the whole file (asked once
    /// `outcome` is in).
    pub fn socket_ok(&self, i: usize) -> bool {
        lock(&self.socket_results).get(i).copied().unwrap_or(false)
    }

    /// Signals the writer child, if it is still ours to signal.
    fn signal_child(&self, sig: i32) {
        use std::os::fd::AsRawFd as _;
        match &self.child_fd {
            // SAFETY: pidfd_send_signal(2) on our pidfd, no siginfo.
            Some(fd) => unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    sig,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                );
            },
            // Without pidfds: once the outcome is in the child is reaped and its pid
            // may be anyone's; before, a reap between the check and the kill is the
            // (microseconds) window left.
            None if self.outcome().is_none() => {
                // SAFETY: kill(2) on the writer child's pid.
                unsafe { libc::kill(self.child_pid as i32, sig) };
            }
            None => {}
        }
    }

    fn send(&self, piece: Piece) {
        if let Piece::Records { bytes, .. } = &piece {
            self.in_flight.fetch_add(bytes.len(), Ordering::Relaxed);
        }
        // A framing thread that is gone has given the save up already.
        let _ = self.pieces.send(piece);
    }
}

/// The save in progress, from its cut until the done handler has run.
static JOB: Mutex<Option<Arc<Job>>> = Mutex::new(None);
/// Shards whose walk is not over (of a save in progress or given up).
static WALKING: AtomicUsize = AtomicUsize::new(0);
/// A BGSAVE is being started (between the checks and the cut).
static STARTING: AtomicBool = AtomicBool::new(false);
/// The done handler is running.
static FINISHING: AtomicBool = AtomicBool::new(false);
/// BGSAVE SCHEDULE (or BGSAVE inside EXEC) asked for one once possible.
static SCHEDULED: AtomicBool = AtomicBool::new(false);
/// Whether the last background save succeeded (INFO rdb_last_bgsave_status).
static LAST_OK: AtomicBool = AtomicBool::new(true);
/// When the last one was tried (unix s), its duration (s; -1: none yet) and the bytes
/// saved ahead of its walk.
static LAST_TRY_UNIX: AtomicU64 = AtomicU64::new(0);
static LAST_TIME_SEC: AtomicI64 = AtomicI64::new(-1);
static LAST_AHEAD_BYTES: AtomicU64 = AtomicU64::new(0);

/// Background jobs started, and how long the last one held every shard for its cut:
/// INFO's total_forks and latest_fork_usec (what a fork is and costs in Redis).
static JOBS_STARTED: AtomicU64 = AtomicU64::new(0);
static LAST_CUT_US: AtomicU64 = AtomicU64::new(0);

/// INFO stats' (total_forks, latest_fork_usec).
pub fn fork_stats() -> (u64, u64) {
    (
        JOBS_STARTED.load(Ordering::Relaxed),
        LAST_CUT_US.load(Ordering::Relaxed),
    )
}

/// Bytes of records the walks may have in flight to the writer before they wait.
const MAX_IN_FLIGHT: usize = 16 << 20;
/// Bytes of records a shard's database gathers before it hands them to the framing
/// thread (all that is left goes at the walk's end).
const HAND_OVER_AT: usize = 256 << 10;
/// How long one step of a walk may run before the shard serves its clients again.
const STEP: Duration = Duration::from_micros(200);
/// The least time between two steps (the reactor's timers round it up to 1 ms).
const STEP_GAP: Duration = Duration::from_micros(500);
/// A walk steps when its shard has nothing else to do, and at least this often
/// under full load (a 200 us step per 3 ms: 7% of the shard).
const FORCED_STEP_EVERY: Duration = Duration::from_millis(2);
/// A failed save is retried by the save points only after this many seconds
/// (Redis's CONFIG_BGSAVE_RETRY_DELAY).
const RETRY_DELAY_S: u64 = 5;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn job() -> Option<Arc<Job>> {
    lock(&JOB).clone()
}

/// Whether a BGSAVE is in progress (INFO rdb_bgsave_in_progress).
pub fn in_progress() -> bool {
    lock(&JOB).as_ref().is_some_and(|j| j.kind.is_rdb_child())
}

/// Whether any background job (a BGSAVE or an AOF rewrite) runs: Redis has one child
/// at a time (hasActiveChildProcess).
pub fn busy() -> bool {
    lock(&JOB).is_some() || STARTING.load(Ordering::SeqCst)
}

/// The job in progress, if it is an AOF rewrite: when it started and its writer's pid.
pub fn rewrite_running() -> Option<(Instant, u32, u64)> {
    lock(&JOB)
        .as_ref()
        .filter(|j| matches!(j.kind, Kind::AofBase { .. }))
        .map(|j| {
            (
                j.started,
                j.child_pid,
                j.ahead_bytes.load(Ordering::Relaxed),
            )
        })
}

/// Why a BGSAVE could not start.
#[derive(Debug)]
pub enum StartError {
    /// One is in progress already.
    InProgress,
    /// The writer process could not be started (logged).
    Spawn,
}

/// Starts a background save: the cut, the walks, the writer. Returns once the cut is
/// taken (what BGSAVE's "Background saving started" means).
pub async fn start(cell: &Rc<ShardCell>) -> Result<(), StartError> {
    start_job(cell, Kind::Rdb, Box::new(|| true))
        .await
        .map(drop)
}

/// What runs at the cut, while every shard is held (an AOF rewrite switches the
/// stream to its new incr file there); false gives the job up.
pub type AtCut = Box<dyn FnOnce() -> bool>;

/// Starts a background job of `kind` (not `Kind::Replicas`): `start`, for BGSAVE and
/// AOF rewrites alike. Returns the job once its cut is taken.
pub async fn start_job(
    cell: &Rc<ShardCell>,
    kind: Kind,
    at_cut: AtCut,
) -> Result<Arc<Job>, StartError> {
    start_any(cell, kind, None, at_cut).await
}

/// Starts a diskless full sync's transfer to `transfer`'s sockets (Redis's
/// rdbSaveToSlavesSockets); `at_cut` attaches the replicas' links.
pub async fn start_transfer(
    cell: &Rc<ShardCell>,
    transfer: Transfer,
    at_cut: AtCut,
) -> Result<Arc<Job>, StartError> {
    start_any(cell, Kind::Replicas, Some(transfer), at_cut).await
}

async fn start_any(
    cell: &Rc<ShardCell>,
    kind: Kind,
    transfer: Option<Transfer>,
    at_cut: AtCut,
) -> Result<Arc<Job>, StartError> {
    if STARTING.swap(true, Ordering::SeqCst) {
        return Err(StartError::InProgress);
    }
    let started = begin(cell, kind, transfer, at_cut).await;
    STARTING.store(false, Ordering::SeqCst);
    started
}

async fn begin(
    cell: &Rc<ShardCell>,
    kind: Kind,
    transfer: Option<Transfer>,
    at_cut: AtCut,
) -> Result<Arc<Job>, StartError> {
    if lock(&JOB).is_some() {
        return Err(StartError::InProgress);
    }
    // A save given up is still restoring its marks: a matter of milliseconds.
    while WALKING.load(Ordering::SeqCst) > 0 {
        crate::runtime::sleep(Duration::from_millis(1)).await;
    }
    if kind == Kind::Rdb {
        super::SAVES.fetch_add(1, Ordering::Relaxed);
        LAST_TRY_UNIX.store(crate::util::now_ms() / 1000, Ordering::Relaxed);
    }
    let (dir, dbfilename, checksum) = {
        let data = cell.data.borrow();
        let target = match &kind {
            Kind::Rdb | Kind::Replicas => data.config.dbfilename().to_string(),
            Kind::AofBase { path, .. } => path.clone(),
        };
        (
            std::path::PathBuf::from(data.config.dir()),
            target,
            data.config.rdbchecksum(),
        )
    };
    let target = match &transfer {
        Some(t) => writer::Target::Sockets {
            sockets: &t.sockets,
            timeout_ms: t.timeout_ms,
        },
        None => writer::Target::File {
            dir: &dir,
            dbfilename: &dbfilename,
        },
    };
    let child = match writer::spawn_child(target) {
        Ok(c) => c,
        Err(e) => {
            if kind == Kind::Rdb {
                LAST_OK.store(false, Ordering::Relaxed);
                tracing::warn!("Can't save in background: fork: {e}");
            } else if kind == Kind::Replicas {
                tracing::warn!("Can't save in background: fork: {e}");
            } else {
                tracing::warn!("Can't rewrite append only file in background: fork: {e}");
            }
            return Err(StartError::Spawn);
        }
    };
    let owner = LockOwner {
        id: cell.next_txn_id(),
        write: false,
        client: 0,
    };
    // A replica's cut falls between two batches of its master's stream, so that the
    // offset it records is exactly what the file holds (an AOF base records none).
    let held_stream = match kind {
        Kind::Rdb | Kind::Replicas => Some(crate::replication::link::hold_stream().await),
        Kind::AofBase { .. } => None,
    };
    let cut_started = Instant::now();
    let op = MultiShardOp::lock_all(owner, cell).await;
    let cuts = op
        .on_each(cell, |d| {
            let sizes: Vec<(u64, u64)> = d
                .dbs
                .iter_mut()
                .map(|db| {
                    db.begin_snapshot();
                    (db.len() as u64, db.expires_len() as u64)
                })
                .collect();
            (sizes, d.dirty)
        })
        .await;
    let (_, libraries) = crate::scripting::functions::snapshot();
    // Redis's rdbPopulateSaveInfo for BGSAVE and the save points; an AOF rewrite
    // passes none (its base is loaded as an AOF, whose replication is not restored).
    let replication = held_stream
        .as_ref()
        .and_then(|_| crate::replication::save_info());
    let cut_taken = at_cut();
    op.release(cell).await;
    drop(held_stream);
    JOBS_STARTED.fetch_add(1, Ordering::Relaxed);
    LAST_CUT_US.store(cut_started.elapsed().as_micros() as u64, Ordering::Relaxed);

    let mut db_sizes = vec![(0u64, 0u64); cuts.first().map_or(0, |(s, _)| s.len())];
    for (sizes, _) in &cuts {
        for (total, s) in db_sizes.iter_mut().zip(sizes) {
            total.0 += s.0;
            total.1 += s.1;
        }
    }
    let keys_total = db_sizes.iter().map(|s| s.0).sum();
    let codes: Vec<&[u8]> = libraries.iter().map(|l| l.code.as_slice()).collect();
    let aof_base = matches!(kind, Kind::AofBase { .. });
    let commands = matches!(kind, Kind::AofBase { commands: true, .. });
    let header = if commands {
        let mut h = Vec::new();
        if super::aof::timestamps() {
            let now = crate::util::now_ms() / 1000;
            h.extend_from_slice(format!("#TS:{now}\r\n").as_bytes());
        }
        super::aof_base::function_loads(&mut h, &codes);
        h
    } else {
        crate::storage::rdb::file::header_for(&codes, aof_base, replication.as_ref())
    };
    let (preamble, suffix) = match &transfer {
        Some(t) => (t.preamble.take(), t.suffix.clone()),
        None => (Vec::new(), Vec::new()),
    };
    // The replicas' sockets are the child's now: this process's copies close here
    // (their connections keep their own).
    drop(transfer);
    let framing = writer::Framing {
        commands,
        preamble,
        header,
        db_sizes,
        shards: cuts.len(),
        checksum,
        suffix,
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let job = Arc::new(Job {
        kind,
        pieces: tx,
        in_flight: AtomicUsize::new(0),
        abandoned: AtomicBool::new(false),
        outcome: Mutex::new(None),
        dir,
        child_pid: child.id(),
        child_fd: pidfd(child.id()),
        started: Instant::now(),
        keys_total,
        keys_saved: AtomicU64::new(0),
        ahead_bytes: AtomicU64::new(0),
        dirty_at_cut: cuts.iter().map(|(_, dirty)| *dirty).collect(),
        socket_results: Mutex::new(Vec::new()),
        handled: AtomicBool::new(false),
    });
    let pid = child.id();
    WALKING.store(cuts.len(), Ordering::SeqCst);
    *lock(&JOB) = Some(job.clone());
    let framer = job.clone();
    let spawned = std::thread::Builder::new()
        .name("rdb-writer".into())
        .spawn(move || {
            unpin_current_thread();
            writer::lower_priority();
            writer::run(framer, rx, child, framing)
        });
    if spawned.is_err() || !cut_taken {
        // The child, left without a pipe writer, sees end-of-file and gives up.
        job.abandon();
        job.finish(Outcome::Failed);
    }
    let walked = job.clone();
    cell.call_all(move |c| {
        let (c, job) = (c.clone(), walked.clone());
        crate::runtime::spawn_detached(async move { walk(c, job).await });
    })
    .await;
    match job.kind {
        Kind::AofBase { .. } => {
            tracing::info!("Background append only file rewriting started by pid {pid}")
        }
        Kind::Rdb => tracing::info!("Background saving started by pid {pid}"),
        Kind::Replicas => tracing::info!("Background RDB transfer started by pid {pid}"),
    }
    Ok(job)
}

/// A pidfd for the child `pid`, not reaped yet (None on kernels before 5.3).
fn pidfd(pid: u32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd as _;
    // SAFETY: pidfd_open(2) with no flags; a non-negative result is a new fd we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    // SAFETY: the fd was just opened for us and is owned by nothing else.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// The framing thread is spawned from a shard's thread, whose CPU it would inherit:
/// it may run anywhere instead (Redis's bgsave_cpulist defaults to no binding).
fn unpin_current_thread() {
    // SAFETY: a zeroed cpu_set_t is valid; sched_setaffinity reads it only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// One shard's walk of a save: steps of at most `STEP` when the shard is otherwise
/// idle (one key per `rdb-key-save-delay` microseconds when that is set, Redis's test
/// knob), records handed to the framing thread after each step.
async fn walk(cell: Rc<ShardCell>, job: Arc<Job>) {
    let mut counted = (0u64, 0u64);
    let mut served = u64::MAX;
    // Keys the delay knob has paused for.
    let mut paid = 0u64;
    loop {
        let abandoned = job.abandoned();
        if !abandoned && job.in_flight.load(Ordering::Relaxed) > MAX_IN_FLIGHT {
            crate::runtime::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let key_delay = cell.data.borrow().config.rdb_key_save_delay();
        if key_delay > 0 && !abandoned && keys_saved(&cell) > paid {
            // Every key the file gets costs the delay, those a write saved ahead of
            // the walk too (a fork's child would still have them to write): the walk
            // goes on, and ends, only once each is paid for.
            paid += 1;
            pause(&job, Duration::from_micros(key_delay as u64)).await;
            continue;
        }
        let done = step(&cell, &job, abandoned, key_delay > 0, &mut counted);
        if done {
            break;
        }
        if abandoned {
            crate::runtime::yield_now().await;
        } else if key_delay == 0 {
            // While the shard serves clients its thread also sleeps between steps,
            // even when it has nothing else to do: on a host whose cores are shared
            // (clients, the writer) the walk then takes about a sixth of a core, not
            // all the time the others leave. A shard nobody talks to walks flat out.
            let now_served = cell.data.borrow().stats.total_commands;
            if std::mem::replace(&mut served, now_served) != now_served {
                crate::runtime::sleep(STEP_GAP).await;
            }
            crate::runtime::idle_or_after(FORCED_STEP_EVERY).await;
        }
        // With the delay knob, the key just written is paid for at the loop's top.
    }
    WALKING.fetch_sub(1, Ordering::SeqCst);
}

/// Keys the shard's snapshot has written so far, by the walk and ahead of it.
fn keys_saved(cell: &ShardCell) -> u64 {
    let data = cell.data.borrow();
    data.dbs
        .iter()
        .filter_map(|db| db.snapshot().map(|cut| cut.keys_saved))
        .sum()
}

/// Sleeps `d`, waking early if the save is given up.
async fn pause(job: &Job, d: Duration) {
    let until = Instant::now() + d;
    while !job.abandoned() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        crate::runtime::sleep(left.min(Duration::from_millis(20))).await;
    }
}

/// One step of a shard's walk; true when the walk is over (the shard's snapshot is
/// ended and its last records sent).
fn step(
    cell: &ShardCell,
    job: &Job,
    abandoned: bool,
    one_key: bool,
    counted: &mut (u64, u64),
) -> bool {
    let mut data = cell.data.borrow_mut();
    let dbs = &mut data.dbs;
    if abandoned {
        dbs.iter_mut().for_each(|db| db.abandon_snapshot());
    }
    let start = Instant::now();
    let mut done = true;
    // Given up, the walk only restores marks: bigger steps.
    let budget = if abandoned { 1 << 16 } else { 4096 };
    for db in dbs.iter_mut() {
        let walked = db.snapshot_step(budget, one_key && !abandoned);
        if !walked {
            done = false;
            if one_key || start.elapsed() >= STEP {
                break;
            }
        }
    }
    let (mut keys, mut ahead) = (0, 0);
    for (i, db) in dbs.iter_mut().enumerate() {
        if let Some(cut) = db.snapshot() {
            keys += cut.keys_saved;
            ahead += cut.ahead_bytes;
        }
        // Records go to the framing thread in batches: each hand-over wakes it and,
        // through the pipe, the child, and on a host whose cores are busy serving
        // every such wake-up is a chance to delay a shard. With the delay knob
        // (`one_key`) each key goes at once, as a slow fork child writes it.
        if done || abandoned || one_key || db.snapshot_records_len() >= HAND_OVER_AT {
            let bytes = db.take_snapshot_records();
            if !bytes.is_empty() && !abandoned {
                job.send(Piece::Records { db: i, bytes });
            }
        }
        if done {
            db.end_snapshot();
        }
    }
    job.keys_saved
        .fetch_add(keys.saturating_sub(counted.0), Ordering::Relaxed);
    job.ahead_bytes
        .fetch_add(ahead.saturating_sub(counted.1), Ordering::Relaxed);
    *counted = (keys, ahead);
    if done && !abandoned {
        job.send(Piece::ShardDone);
    }
    done
}

/// Gives the save in progress up, as Redis's killRDBChild: its writer is ended with
/// SIGUSR1 (the save's status stays "ok") and its shards stop writing. Returns whether
/// one was in progress.
pub fn abandon() -> bool {
    match job() {
        Some(job) if job.kind.is_rdb_child() => abandon_job(&job),
        _ => false,
    }
}

/// Whether `job` is the background job in progress.
pub fn is_running(job: &Arc<Job>) -> bool {
    self::job().is_some_and(|j| Arc::ptr_eq(&j, job))
}

/// Whether the background job in progress is a diskless transfer (a replica that
/// asks then waits for the next one: Redis's "Current BGSAVE has socket target").
pub fn transfer_running() -> bool {
    self::job().is_some_and(|j| matches!(j.kind, Kind::Replicas))
}

/// Gives up `job`, a disk BGSAVE, if it still runs: the replicas it was for left
/// (Redis's killRDBChild from freeClient). Returns whether it did.
pub fn abandon_disk_save(job: &Arc<Job>) -> bool {
    if !matches!(job.kind, Kind::Rdb) || job.outcome().is_some() || !is_running(job) {
        return false;
    }
    abandon_job(job)
}

/// Gives the AOF rewrite in progress up (Redis's killAppendOnlyChild).
pub fn abandon_rewrite() -> bool {
    match job() {
        Some(job) if matches!(job.kind, Kind::AofBase { .. }) => {
            tracing::info!("Killing running AOF rewrite child: {}", job.child_pid);
            abandon_job(&job)
        }
        _ => false,
    }
}

fn abandon_job(job: &Job) -> bool {
    job.abandon();
    // The framing thread reaps the child (and removes its temporary file).
    job.signal_child(libc::SIGUSR1);
    true
}

/// SHUTDOWN while a save runs (Redis's prepareForShutdown): the save is given up and
/// its temporary file removed before the process goes.
pub async fn abandon_for_shutdown() {
    let Some(job) = job() else {
        return;
    };
    if job.kind.is_rdb_child() {
        tracing::warn!("There is a child saving an .rdb. Killing it!");
    } else {
        tracing::warn!("There is a child rewriting the AOF. Killing it!");
    }
    abandon_job(&job);
    let deadline = Instant::now() + Duration::from_secs(2);
    while job.outcome().is_none() && Instant::now() < deadline {
        crate::runtime::sleep(Duration::from_millis(5)).await;
    }
    let _ = std::fs::remove_file(writer::temp_path(&job.dir, job.child_pid));
}

/// The process is about to exit at once (a second SIGINT): the writer child is ended
/// and its temporary file removed.
pub fn kill_writer_now() {
    if let Some(job) = job() {
        job.abandon();
        job.signal_child(libc::SIGKILL);
        let _ = std::fs::remove_file(writer::temp_path(&job.dir, job.child_pid));
    }
}

/// Shard 0's part of Redis's serverCron, every 1/hz s: the done handler of a save
/// that ended, a BGSAVE scheduled, or the save points.
pub fn cron(cell: &Rc<ShardCell>) {
    if cell.id != 0 || STARTING.load(Ordering::SeqCst) {
        return;
    }
    if let Some(job) = job() {
        if let Some(outcome) = job.outcome() {
            if !FINISHING.swap(true, Ordering::SeqCst) {
                let cell = cell.clone();
                crate::runtime::spawn_detached(async move {
                    if job.kind == Kind::Rdb {
                        done(&cell, &job, outcome).await;
                    } else if job.kind == Kind::Replicas {
                        transfer_done(&job, outcome);
                    } else {
                        let pid = job.child_pid;
                        super::rewrite::done(&cell, &job.kind, outcome, pid, job.started).await;
                        *lock(&JOB) = None;
                    }
                    job.handled.store(true, Ordering::SeqCst);
                    FINISHING.store(false, Ordering::SeqCst);
                });
            }
        }
        return;
    }
    let now = crate::util::now_ms() / 1000;
    let may_retry = LAST_OK.load(Ordering::Relaxed)
        || now.saturating_sub(LAST_TRY_UNIX.load(Ordering::Relaxed)) > RETRY_DELAY_S;
    if !may_retry || WALKING.load(Ordering::SeqCst) > 0 {
        return;
    }
    if super::rewrite::cron(cell) {
        return;
    }
    if SCHEDULED.load(Ordering::Relaxed) {
        let cell = cell.clone();
        crate::runtime::spawn_detached(async move {
            if start(&cell).await.is_ok() {
                SCHEDULED.store(false, Ordering::Relaxed);
            }
        });
        return;
    }
    let points = cell.data.borrow().config.save_points().to_vec();
    if points.is_empty() || crate::server::shutdown::in_progress() {
        return;
    }
    let cell = cell.clone();
    crate::runtime::spawn_detached(async move { check_save_points(&cell, &points).await });
}

/// Starts a save if a save point is reached: that many changes, and more than that
/// many seconds since the last save.
async fn check_save_points(cell: &Rc<ShardCell>, points: &[crate::config::SavePoint]) {
    if STARTING.load(Ordering::SeqCst) {
        return;
    }
    let dirty: u64 = cell
        .call_all(|c| c.data.borrow().dirty)
        .await
        .into_iter()
        .sum();
    let now = crate::util::now_ms() / 1000;
    let since = now.saturating_sub(super::last_save_unix(cell.info.started_unix_ms));
    let reached = points
        .iter()
        .find(|p| dirty >= p.changes as u64 && since > p.seconds as u64);
    if let Some(p) = reached {
        tracing::info!("{} changes in {} seconds. Saving...", p.changes, p.seconds);
        let _ = start(cell).await;
    }
}

/// Redis's backgroundSaveDoneHandlerDisk.
async fn done(cell: &Rc<ShardCell>, job: &Arc<Job>, outcome: Outcome) {
    match outcome {
        Outcome::Saved => {
            tracing::info!("Background saving terminated with success");
            super::saved(cell, job.dirty_at_cut.clone()).await;
            LAST_OK.store(true, Ordering::Relaxed);
        }
        Outcome::Failed => {
            tracing::warn!("Background saving error");
            LAST_OK.store(false, Ordering::Relaxed);
        }
        Outcome::Killed(sig) => {
            tracing::warn!("Background saving terminated by signal {sig}");
            // SIGUSR1 is how the server itself ends a save: not an error.
            if sig != libc::SIGUSR1 {
                LAST_OK.store(false, Ordering::Relaxed);
            }
        }
    }
    LAST_TIME_SEC.store(job.started.elapsed().as_secs() as i64, Ordering::Relaxed);
    LAST_AHEAD_BYTES.store(job.ahead_bytes.load(Ordering::Relaxed), Ordering::Relaxed);
    *lock(&JOB) = None;
}

/// Redis's backgroundSaveDoneHandlerSocket: the replicas' connections read their
/// own verdicts from the job.
fn transfer_done(job: &Arc<Job>, outcome: Outcome) {
    match outcome {
        Outcome::Saved => tracing::info!("Background RDB transfer terminated with success"),
        Outcome::Failed => tracing::warn!("Background transfer error"),
        Outcome::Killed(sig) => tracing::warn!("Background transfer terminated by signal {sig}"),
    }
    LAST_TIME_SEC.store(job.started.elapsed().as_secs() as i64, Ordering::Relaxed);
    *lock(&JOB) = None;
}

/// BGSAVE SCHEDULE: a save once the one in progress is over.
pub fn schedule() {
    SCHEDULED.store(true, Ordering::Relaxed);
}

/// The last background save failed: with `stop-writes-on-bgsave-error` and save
/// points set, writes are refused (checked cheaply first by the gate's fast path).
#[inline]
pub fn last_failed() -> bool {
    !LAST_OK.load(Ordering::Relaxed)
}

/// The MISCONF refusal, if writes are refused (Redis's writeCommandsDeniedByDiskError
/// for the RDB).
pub fn write_refusal(config: &crate::config::Config) -> Option<&'static str> {
    (last_failed() && config.stop_writes_on_bgsave_error() && !config.save_points().is_empty())
        .then_some(MISCONF_ERR)
}

/// Redis's shared.bgsaveerr.
pub const MISCONF_ERR: &str = "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check the Redis logs for details about the RDB error.";

/// INFO persistence's background-save fields, in Redis's order, from
/// `current_cow_peak` to `rdb_last_cow_size` (`dirty` and `last_save` go between).
pub fn info_fields(out: &mut String, dirty: u64, last_save: u64, saves: u64) {
    use std::fmt::Write as _;
    let job = job();
    let (ahead, processed, total, perc, current) = match &job {
        Some(j) => {
            let processed = j.keys_saved.load(Ordering::Relaxed);
            let perc = if j.keys_total == 0 {
                0.0
            } else {
                processed as f64 * 100.0 / j.keys_total as f64
            };
            let ahead = j.ahead_bytes.load(Ordering::Relaxed);
            let current = if j.kind.is_rdb_child() {
                j.started.elapsed().as_secs() as i64
            } else {
                -1
            };
            (ahead, processed, j.keys_total, perc, current)
        }
        None => (0, 0, 0, 0.0, -1),
    };
    let _ = write!(
        out,
        "current_cow_peak:{ahead}\r\ncurrent_cow_size:{ahead}\r\ncurrent_cow_size_age:0\r\ncurrent_fork_perc:{perc:.2}\r\ncurrent_save_keys_processed:{processed}\r\ncurrent_save_keys_total:{total}\r\nrdb_changes_since_last_save:{dirty}\r\nrdb_bgsave_in_progress:{}\r\nrdb_last_save_time:{last_save}\r\nrdb_last_bgsave_status:{}\r\nrdb_last_bgsave_time_sec:{}\r\nrdb_current_bgsave_time_sec:{current}\r\nrdb_saves:{saves}\r\nrdb_last_cow_size:{}\r\n",
        in_progress() as u8,
        if last_failed() { "err" } else { "ok" },
        LAST_TIME_SEC.load(Ordering::Relaxed),
        LAST_AHEAD_BYTES.load(Ordering::Relaxed),
    );
}
