//! The effect stream: every write's effects, in the one order in which replicas (and,
//! later, the AOF and slot migration) must apply them (DESIGN.md §7).
//!
//! What goes in: each write states what it propagates where it writes
//! (`propagation.rs`: Redis 7.0's rewrites — relative TTLs made absolute, SPOP as SREM,
//! INCRBYFLOAT as SET KEEPTTL ...; unstated, the command itself, and nothing when it
//! changed nothing), preceded by the DELs of the keys it found expired. The executor
//! (shard/exec.rs) appends a keyed command's effects right after it ran; a
//! coordinator's go in when it releases its locks (`GlobalCtx::release`); a blocking
//! pop or group read served on its key's shard appends its own there. Each effect is
//! appended, under one process-wide mutex, on the thread of the shard that executed
//! it.
//!
//! The ordering contract a reader may rely on:
//! - **per key, execution order**: a key lives on one shard, a shard executes one
//!   command at a time and appends its effects before it runs the next;
//! - **atomic units whole**: a transaction, a script or a multi-shard command holds the
//!   locks of every key it touches until it ends; its effects are captured under its
//!   transaction id and appended as one `MULTI … EXEC` block (one effect alone as
//!   itself) before the locks go, so no effect on those keys can come in between;
//! - **one database selection**: the stream carries a `SELECT` whenever the database
//!   changes (and first thing after a reader joins), counted in the offset;
//! - **one offset**: `offset()` counts every byte appended (SELECTs and keep-alive
//!   PINGs included) — Redis's master_repl_offset.
//!
//! With no reader all of this costs one relaxed atomic load per command.

mod propagation;

pub use propagation::{after_global, after_keyed, drain_expired, Propagation};

use std::sync::Mutex;
use std::task::{Poll, Waker};

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

/// One reader's part of the stream not yet taken.
struct Reader {
    id: u64,
    out: Vec<u8>,
    waker: Option<Waker>,
}

struct Capture {
    txn: u64,
    cmds: Vec<(usize, Argv)>,
}

struct Stream {
    readers: Vec<Reader>,
    captures: Vec<Capture>,
    next_id: u64,
    /// master_repl_offset: bytes of stream produced so far, SELECTs and PINGs
    /// included (what a replica counts in its own offset).
    offset: u64,
    /// The database the stream last selected (Redis's slaveseldb); None after a
    /// reader joined, whose part must begin with a SELECT.
    selected: Option<usize>,
    /// When the stream last carried a keep-alive PING (unix ms).
    last_ping_ms: u64,
}

static STREAM: Mutex<Stream> = Mutex::new(Stream {
    readers: Vec::new(),
    captures: Vec::new(),
    next_id: 1,
    offset: 0,
    selected: None,
    last_ping_ms: 0,
});

fn stream() -> std::sync::MutexGuard<'static, Stream> {
    STREAM.lock().unwrap_or_else(|e| e.into_inner())
}

/// Bytes of stream produced so far (master_repl_offset).
pub fn offset() -> u64 {
    stream().offset
}

/// Adds a reader; its part starts with the next effect, after a SELECT.
pub fn subscribe() -> u64 {
    let mut st = stream();
    let id = st.next_id;
    st.next_id += 1;
    st.readers.push(Reader {
        id,
        out: Vec::new(),
        waker: None,
    });
    // Every reader reads one stream: the new one's starts with a SELECT, so the next
    // effect selects again for all (Redis resets slaveseldb on a full resync).
    st.selected = None;
    READERS.join();
    id
}

pub fn unsubscribe(id: u64) {
    let mut st = stream();
    let before = st.readers.len();
    st.readers.retain(|l| l.id != id);
    if st.readers.len() < before {
        READERS.leave();
    }
}

/// Bytes of stream queued for the reader and not yet taken (for a replica link, part
/// of its client's output: `client-output-buffer-limit replica`).
pub fn pending(id: u64) -> usize {
    let st = stream();
    st.readers
        .iter()
        .find(|l| l.id == id)
        .map_or(0, |l| l.out.len())
}

/// The reader's pending stream bytes, or Pending (waking `waker` when there are
/// some); None once the reader is gone.
pub fn poll(id: u64, waker: &Waker) -> Poll<Option<Vec<u8>>> {
    let mut st = stream();
    let Some(l) = st.readers.iter_mut().find(|l| l.id == id) else {
        return Poll::Ready(None);
    };
    if l.out.is_empty() {
        l.waker = Some(waker.clone());
        Poll::Pending
    } else {
        Poll::Ready(Some(std::mem::take(&mut l.out)))
    }
}

/// The master's keep-alive PING, into the stream every reader reads (each replica
/// link asks every repl-ping-replica-period): one per half period at most however
/// many ask, and never skipped for a link whose timer runs a little early.
pub fn keepalive(period_ms: u64) {
    let mut st = stream();
    let now = crate::util::now_ms();
    if now.saturating_sub(st.last_ping_ms) < period_ms / 2 {
        return;
    }
    st.last_ping_ms = now;
    append(&mut st, b"*1\r\n$4\r\nPING\r\n");
}

/// Appends bytes of the stream to every reader and counts them in the offset.
fn append(st: &mut Stream, bytes: &[u8]) {
    st.offset += bytes.len() as u64;
    for l in &mut st.readers {
        l.out.extend_from_slice(bytes);
        if let Some(w) = l.waker.take() {
            w.wake();
        }
    }
}

fn encode(out: &mut Vec<u8>, argv: &[Vec<u8>]) {
    out.extend_from_slice(format!("*{}\r\n", argv.len()).as_bytes());
    for a in argv {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn emit(st: &mut Stream, db: usize, argv: &[Vec<u8>]) {
    let mut bytes = Vec::with_capacity(64);
    if st.selected != Some(db) {
        encode(
            &mut bytes,
            &[b"SELECT".to_vec(), db.to_string().into_bytes()],
        );
        st.selected = Some(db);
    }
    encode(&mut bytes, argv);
    append(st, &bytes);
}

/// A transaction's effects: one alone goes out as is, several inside MULTI/EXEC
/// (Redis 7.0's propagatePendingCommands).
fn emit_block(st: &mut Stream, cmds: &[(usize, Argv)]) {
    match cmds {
        [] => {}
        [(db, argv)] => emit(st, *db, argv),
        [(first, _), ..] => {
            emit(st, *first, &[b"MULTI".to_vec()]);
            let mut last = *first;
            for (db, argv) in cmds {
                emit(st, *db, argv);
                last = *db;
            }
            emit(st, last, &[b"EXEC".to_vec()]);
        }
    }
}

/// Appends one effect, or adds it to `txn`'s capture when it has one.
pub fn propagate(txn: Option<u64>, db: usize, argv: Argv) {
    let mut st = stream();
    if let Some(t) = txn {
        if let Some(c) = st.captures.iter_mut().find(|c| c.txn == t) {
            c.cmds.push((db, argv));
            return;
        }
    }
    emit(&mut st, db, &argv);
}

/// Starts collecting the effects of transaction `txn` (EXEC, a script). False when
/// nobody reads the stream or `txn` already collects (a script inside EXEC): then the
/// caller must not end it.
pub fn begin_capture(txn: u64) -> bool {
    if !active() {
        return false;
    }
    let mut st = stream();
    if st.captures.iter().any(|c| c.txn == txn) {
        return false;
    }
    st.captures.push(Capture {
        txn,
        cmds: Vec::new(),
    });
    true
}

/// Ends a capture, appending its effects as one block unless `append` is false (the
/// transaction turned this server into a replica: Redis drops them then).
pub fn end_capture(txn: u64, append: bool) {
    let mut st = stream();
    let Some(pos) = st.captures.iter().position(|c| c.txn == txn) else {
        return;
    };
    let cap = st.captures.swap_remove(pos);
    if append {
        emit_block(&mut st, &cap.cmds);
    }
}
