//! The effect stream: every write's effects, in the one order in which replicas (and,
//! later, the AOF and slot migration) must apply them (DESIGN.md §7).
//!
//! What goes in: each write states what it propagates where it writes
//! (`propagation.rs`: Redis 7.0's rewrites — relative TTLs made absolute, SPOP as SREM,
//! INCRBYFLOAT as SET KEEPTTL ...; unstated, the command itself, and nothing when it
//! changed nothing), preceded by the DELs of the keys it found expired. The executor
//! (shard/exec.rs) appends a keyed command's effects right after it ran; a
//! coordinator's go in when it releases its locks (`GlobalCtx::release`); a blocking
//! pop or group read served on its key's shard appends its own there.
//!
//! How it is kept: each shard thread appends to its own log (`ShardLog`: a mutex only
//! the readers' merge ever contends), every entry numbered from one process-wide
//! counter taken under that log's lock. Readers see one stream: `merge.rs` takes the
//! logs' entries and emits them in number order, never past a number not yet seen, so
//! the merged order is one in which every entry follows everything that happened
//! before it — what the contract below needs. The replicas' part is kept once, in
//! Redis 7.0's shared replication buffer (the backlog and every link's output in one
//! copy, each link a position in it); a log (the AOF) gets its own copy.
//!
//! The ordering contract a reader may rely on:
//! - **per key, execution order**: a key lives on one shard, a shard executes one
//!   command at a time and appends its effects, numbered in turn, before it runs the
//!   next;
//! - **atomic units whole**: a transaction, a script or a multi-shard command holds the
//!   locks of every key it touches until it ends; its effects are captured under its
//!   transaction id and appended as one entry, a `MULTI … EXEC` block (one effect
//!   alone as itself), before the locks go: any later write to those keys, on any
//!   shard, is numbered after it;
//! - **one database selection**: the stream carries a `SELECT` whenever the database
//!   changes (and first thing after a reader joins), counted in the offset;
//! - **one offset**: `offset()` counts every byte of the merged stream (SELECTs and
//!   keep-alive PINGs included) — Redis's master_repl_offset.
//!
//! With no reader all of this costs one relaxed atomic load per command.

mod merge;
mod propagation;

pub use merge::{
    backlog_create, backlog_free, backlog_info, backlog_resize, encode as encode_command,
    keepalive, link_usage, mark, offset, offset_epoch, offset_of, poll, poll_log, position, proxy,
    replica_mode, replicate_command, replication_memory, request_acks, reset_offset,
    set_replica_mode, subscribe, subscribe_from, subscribe_log, switch_point, take_log,
    trim_buffer, unsubscribe, Mark, Taken,
};
pub use propagation::{after_global, after_keyed, drain_expired, Propagation};

use std::cell::OnceCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;

use crate::storage::events::Listeners;

pub type Argv = Vec<Vec<u8>>;

/// The stream's readers (replica links today). Storage's listener count: while
/// non-zero it logs expired and evicted keys for their DELs.
static READERS: &Listeners = &crate::storage::events::STREAM_READERS;

/// Whether anyone reads the stream (checked once per command).
#[inline]
pub fn active() -> bool {
    READERS.any()
}

/// What one entry of a log holds. Commands are RESP, encoded on the thread that wrote
/// straight into its log's byte buffer: no allocation per command, and nothing the
/// merge on another thread has to free (the buffers go back and forth between a log
/// and its merge queue, keeping their capacity).
enum Effect {
    /// One command in database `db`: `len` bytes at `at` of the log's (or, once taken,
    /// its queue's) `bytes`.
    One { db: usize, at: usize, len: usize },
    /// An atomic unit's commands (database, `REPL_*` readers, RESP), emitted inside
    /// MULTI / EXEC; a unit of one command is emitted alone.
    Block(Vec<(usize, u8, Vec<u8>)>),
}

impl Effect {
    /// The same entry once its log's bytes are appended `by` bytes into a buffer.
    fn shifted(self, by: usize) -> Effect {
        match self {
            Effect::One { db, at, len } => Effect::One {
                db,
                at: at + by,
                len,
            },
            block => block,
        }
    }
}

/// One shard thread's appended entries, not yet merged, each with its number.
#[derive(Default)]
struct ShardLog {
    entries: Vec<(u64, Effect)>,
    /// The RESP of the entries' single commands, back to back.
    bytes: Vec<u8>,
    /// Readers waiting for an entry (woken by the next append).
    waiting: Vec<Waker>,
}

/// The number of the next entry, process-wide: the merge order.
static NEXT_SEQ: AtomicU64 = AtomicU64::new(0);

/// The number the next entry will get: every entry numbered below it has been
/// appended (a write's effects are, before its reply is made). The AOF's group commit
/// waits until its file holds everything below this.
#[inline]
pub fn next_seq() -> u64 {
    NEXT_SEQ.load(Ordering::Acquire)
}

/// Every thread's log, for the merge.
static LOGS: Mutex<Vec<Arc<Mutex<ShardLog>>>> = Mutex::new(Vec::new());

thread_local! {
    /// This thread's log, registered on its first append.
    static LOG: OnceCell<Arc<Mutex<ShardLog>>> = const { OnceCell::new() };
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Appends the entry `make` builds (writing any bytes it needs into the log's byte
/// buffer) to this thread's log, numbered under the log's lock (so the merge, which
/// drains a log under the same lock, never misses a number it already passed).
fn append(make: impl FnOnce(&mut Vec<u8>) -> Effect) {
    LOG.with(|cell| {
        let mut fresh = false;
        let log = cell.get_or_init(|| {
            fresh = true;
            let log = Arc::new(Mutex::new(ShardLog::default()));
            lock(&LOGS).push(log.clone());
            log
        });
        {
            let mut guard = lock(log);
            let log = &mut *guard;
            let effect = make(&mut log.bytes);
            let seq = NEXT_SEQ.fetch_add(1, Ordering::AcqRel);
            log.entries.push((seq, effect));
            for w in log.waiting.drain(..) {
                w.wake();
            }
        }
        // Readers waiting registered with the logs there were: a new one wakes them.
        if fresh {
            for w in lock(&NEW_LOG_WAITING).drain(..) {
                w.wake();
            }
        }
    });
}

/// Appends one command already in RESP.
fn append_one(db: usize, cmd: &[u8]) {
    append(|bytes| {
        let at = bytes.len();
        bytes.extend_from_slice(cmd);
        Effect::One {
            db,
            at,
            len: cmd.len(),
        }
    });
}

/// Readers waiting for an entry from a thread that has no log yet.
static NEW_LOG_WAITING: Mutex<Vec<Waker>> = Mutex::new(Vec::new());

/// Who a command's effect is for, as a script's `redis.set_repl` says (Redis's
/// PROPAGATE_AOF / PROPAGATE_REPL): the logs (the AOF), the replicas, both, neither.
pub const REPL_AOF: u8 = 1;
pub const REPL_REPLICAS: u8 = 2;
pub const REPL_ALL: u8 = REPL_AOF | REPL_REPLICAS;

/// A transaction's effects gathered until it ends.
struct Capture {
    txn: u64,
    cmds: Vec<(usize, u8, Vec<u8>)>,
    /// Who the commands captured from now on are for (`set_capture_repl`).
    repl: u8,
}

/// Transactions (EXEC, scripts, split commands) collecting their effects.
static CAPTURES: Mutex<Vec<Capture>> = Mutex::new(Vec::new());

/// Appends one effect, or adds it to `txn`'s capture when it has one.
pub fn propagate(txn: Option<u64>, db: usize, argv: Argv) {
    propagate_slice(txn, db, &argv);
}

/// `propagate` for every reader whatever a script's `redis.set_repl` says: the
/// deletion of a key found expired (Redis's propagateDeletion names both targets).
pub fn propagate_to_all(txn: Option<u64>, db: usize, argv: Argv) {
    propagate_vecs(txn, db, Some(REPL_ALL), &argv);
}

/// `propagate` for a command as it came (the common case): encoded straight from
/// its arguments.
pub fn propagate_args(txn: Option<u64>, db: usize, args: &crate::commands::Args) {
    let bytes = args.iter().map(<[u8]>::len).sum();
    propagate_parts(txn, db, None, args.len(), bytes, args.iter());
}

/// `propagate` for arguments held as a slice.
pub fn propagate_slice(txn: Option<u64>, db: usize, argv: &[Vec<u8>]) {
    propagate_vecs(txn, db, None, argv);
}

/// `propagate_parts` for arguments held as a slice.
fn propagate_vecs(txn: Option<u64>, db: usize, repl: Option<u8>, argv: &[Vec<u8>]) {
    let bytes = argv.iter().map(Vec::len).sum();
    let parts = argv.iter().map(Vec::as_slice);
    propagate_parts(txn, db, repl, argv.len(), bytes, parts);
}

/// `n` arguments (`bytes` bytes in all) as one effect: into `txn`'s capture (for
/// the readers `repl` names, else for those its script chose), or encoded straight
/// into this thread's log.
fn propagate_parts<'a>(
    txn: Option<u64>,
    db: usize,
    repl: Option<u8>,
    n: usize,
    bytes: usize,
    parts: impl Iterator<Item = &'a [u8]>,
) {
    let mut parts = Some(parts);
    let captured = capture(txn, db, repl, || {
        let mut cmd = Vec::with_capacity(merge::sized_bound(n, bytes));
        if let Some(parts) = parts.take() {
            merge::encode_sized(&mut cmd, n, bytes, parts);
        }
        cmd
    });
    // Not captured: the closure did not run and `parts` is still here.
    let (false, Some(parts)) = (captured, parts) else {
        return;
    };
    append(|log| {
        let at = log.len();
        merge::encode_sized(log, n, bytes, parts);
        Effect::One {
            db,
            at,
            len: log.len() - at,
        }
    });
}

/// Adds the command `encode` makes to `txn`'s capture, for the readers `repl` names
/// or else those the capture's script chose (nothing when that is nobody); false
/// when `txn` has none.
fn capture(
    txn: Option<u64>,
    db: usize,
    repl: Option<u8>,
    encode: impl FnOnce() -> Vec<u8>,
) -> bool {
    let Some(t) = txn else {
        return false;
    };
    let mut caps = lock(&CAPTURES);
    let Some(c) = caps.iter_mut().find(|c| c.txn == t) else {
        return false;
    };
    let repl = repl.unwrap_or(c.repl);
    if repl != 0 {
        c.cmds.push((db, repl, encode()));
    }
    true
}

/// A script's `redis.set_repl`: the commands `txn` captures from now on go to the
/// readers `repl` names (`REPL_*`; 0: to none, as Redis leaves them out entirely).
/// No effect when `txn` captures nothing (nobody reads the stream).
pub fn set_capture_repl(txn: u64, repl: u8) {
    if let Some(c) = lock(&CAPTURES).iter_mut().find(|c| c.txn == txn) {
        c.repl = repl;
    }
}

/// Starts collecting the effects of transaction `txn` (EXEC, a script). False when
/// nobody reads the stream or `txn` already collects (a script inside EXEC): then the
/// caller must not end it.
pub fn begin_capture(txn: u64) -> bool {
    if !active() {
        return false;
    }
    let mut caps = lock(&CAPTURES);
    if caps.iter().any(|c| c.txn == txn) {
        return false;
    }
    caps.push(Capture {
        txn,
        cmds: Vec::new(),
        repl: REPL_ALL,
    });
    true
}

/// Ends a capture, appending its effects as one unit unless `append` is false (the
/// transaction turned this server into a replica: Redis drops them then). The caller
/// still holds the unit's locks.
pub fn end_capture(txn: u64, append_it: bool) {
    let cap = {
        let mut caps = lock(&CAPTURES);
        let Some(pos) = caps.iter().position(|c| c.txn == txn) else {
            return;
        };
        caps.swap_remove(pos)
    };
    if !append_it {
        return;
    }
    let mut cmds = cap.cmds;
    match cmds.len() {
        0 => {}
        1 if cmds[0].1 == REPL_ALL => {
            if let Some((db, _, cmd)) = cmds.pop() {
                append_one(db, &cmd);
            }
        }
        _ => append(|_| Effect::Block(cmds)),
    }
}
