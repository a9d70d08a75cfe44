//! What a write propagates. The handler states it where it writes, as Redis 7.0's
//! `rewriteClientCommandVector` / `alsoPropagate` / `preventCommandPropagation` do (SPOP
//! as SREM, SET EX as SET PXAT, XREADGROUP as XCLAIMs ...); a write that states nothing
//! propagates as it came, and only when it changed something (Redis's `server.dirty`
//! rule in `call()`). The executor and the coordinators' callers turn that into
//! effects, after the DELs of the keys the command found expired.

use super::{propagate, propagate_args, propagate_slice, propagate_to_all, Argv};
use crate::commands::table::flags;
use crate::commands::{Args, CommandSpec};
use crate::shard::ShardData;

/// What one command propagates, as its handler stated it.
#[derive(Default)]
pub struct Propagation {
    /// Whether anyone reads the stream: statements are only built then.
    on: bool,
    /// What the handler stated instead of the command itself; None: the command.
    stated: Option<Vec<Argv>>,
    /// What a coordinator's multi-shard operations added to the change counter;
    /// None when it ran none (a keyless command: it propagates as it came).
    changes: Option<u64>,
}

impl Propagation {
    /// For a keyed command: statements are built while the stream has readers (checked
    /// once, before the handler runs; a reader that joins later gets the shard's data
    /// in its snapshot instead).
    #[inline]
    pub fn keyed() -> Propagation {
        Propagation {
            on: super::active(),
            stated: None,
            changes: None,
        }
    }

    /// For a coordinator or keyless command, which may wait: always built, since a
    /// reader may join while it runs.
    pub fn global() -> Propagation {
        Propagation {
            on: true,
            stated: None,
            changes: None,
        }
    }

    /// Whether statements are recorded (a handler may skip work that only feeds them).
    #[inline]
    pub fn on(&self) -> bool {
        self.on
    }

    /// The command reaches replicas (and the AOF) as `argv` instead of as itself.
    #[inline]
    pub fn rewrite(&mut self, argv: impl FnOnce() -> Argv) {
        if self.on {
            self.stated = Some(vec![argv()]);
        }
    }

    /// Adds `argv` to what the command propagates instead of itself (in order).
    #[inline]
    pub fn also(&mut self, argv: impl FnOnce() -> Argv) {
        if self.on {
            self.stated.get_or_insert_with(Vec::new).push(argv());
        }
    }

    /// The command propagates nothing of its own: it changed nothing a replica would
    /// see, or what it did reaches replicas by other statements.
    #[inline]
    pub fn nothing(&mut self) {
        self.stated = Some(Vec::new());
    }

    /// A coordinator's multi-shard operation added `n` to the change counter.
    pub fn changed(&mut self, n: u64) {
        self.changes = Some(self.changes.unwrap_or(0) + n);
    }

    /// Appends the statements, or the command itself when there are none.
    fn emit(self, txn: Option<u64>, db: usize, args: &Args) {
        match self.stated {
            None => propagate_args(txn, db, args),
            Some(list) => {
                for argv in list {
                    propagate(txn, db, argv);
                }
            }
        }
    }

    /// A coordinator is about to release the locks of the operation it reported last
    /// (`GlobalCtx::release`): appends what is due now — the statements so far, or
    /// the command itself if its operations changed anything — and leaves nothing for
    /// `after_global` but what is stated later.
    pub fn flush(&mut self, txn: Option<u64>, db: usize, args: &[Vec<u8>]) {
        match self.stated.as_mut() {
            Some(list) => {
                for argv in list.drain(..) {
                    propagate(txn, db, argv);
                }
            }
            None if self.changes.unwrap_or(0) > 0 => {
                propagate_slice(txn, db, args);
                self.stated = Some(Vec::new());
            }
            None => {}
        }
    }
}

/// After a keyed command ran on its shard (only called while its `Propagation` is on,
/// after the DELs of the keys it found expired): its own effect, if it changed
/// anything (`changes`: what it added to the change counter).
pub fn after_keyed(
    (txn, db): (Option<u64>, usize),
    spec: &CommandSpec,
    args: &Args,
    changes: u64,
    propagation: Propagation,
) {
    if spec.has(flags::WRITE) && changes > 0 {
        propagation.emit(txn, db, args);
    }
}

/// After a keyless or multi-shard (coordinator) command ran at home. `idx` is the
/// command's index in the table; `failed`: it replied an error.
pub fn after_global(
    txn: Option<u64>,
    db: usize,
    idx: u16,
    args: &Args,
    failed: bool,
    propagation: Propagation,
) {
    // A container's flags are its subcommand's (FUNCTION LOAD writes, FUNCTION LIST
    // does not).
    let t = crate::commands::table();
    let spec = &t.specs[idx as usize];
    let cmd_flags = t.stat_flags(t.stat_id(idx, args));
    let replicates = cmd_flags & (flags::WRITE | flags::MAY_REPLICATE) != 0;
    if !replicates || failed || self_propagating(spec.name) {
        return;
    }
    if propagation.stated.is_none() && propagation.changes == Some(0) {
        return;
    }
    propagation.emit(txn, db, args);
}

/// Commands whose effects are propagated by what they run, not as themselves.
fn self_propagating(name: &str) -> bool {
    matches!(
        name,
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" | "exec" | "script"
    )
}

/// DELs (or UNLINKs, with lazyfree-lazy-expire) for the keys found expired on this
/// shard since the last call, and an HDEL for each hash field that expired (Redis
/// 7.4's propagateHashFieldDeletion: one field per HDEL).
pub fn drain_expired(data: &mut ShardData, txn: Option<u64>) {
    // Most commands find nothing expired: one thread-local flag says so, instead of
    // a look at every database's logs.
    if !crate::storage::events::take_stream_logged() {
        return;
    }
    for (i, db) in data.dbs.iter_mut().enumerate() {
        for (key, field) in std::mem::take(&mut db.expired_fields_log) {
            propagate_to_all(txn, i, vec![b"HDEL".to_vec(), key, field]);
        }
    }
    if data.dbs.iter().all(|d| d.expired_log.is_empty()) {
        return;
    }
    let unlink = data.config.bool_param("lazyfree-lazy-expire") == Some(true);
    let cmd: &[u8] = if unlink { b"UNLINK" } else { b"DEL" };
    for (i, db) in data.dbs.iter_mut().enumerate() {
        for key in std::mem::take(&mut db.expired_log) {
            propagate_to_all(txn, i, vec![cmd.to_vec(), key]);
        }
    }
}
