//! The executor: the one function that runs a keyed command on the shard that owns
//! its keys (Redis's `call()`). The inline path of a connection, a batch sent by
//! another core and a script's `redis.call` all come here, so what happens after a
//! write is written once and happens in one order:
//!
//! 1. the handler runs, with the caller as tracking's writer (NOLOOP);
//! 2. keys it found expired (`after_deletions`): their DELs into the effect stream and
//!    their invalidations; then the keys a tracked read touched are remembered
//!    (Redis's lazy expiry comes before the read it served);
//! 3. the change counter and memory: each changed key is re-measured, the dataset
//!    published when maxmemory needs it; what the counter got says whether the
//!    command changed anything;
//! 4. propagation: the command's own effect as its handler stated it
//!    (`ExecCtx::propagation`), or as it came — only if the change counter moved
//!    (before anything a wake-up below serves, which Redis propagates after the
//!    write that fed it);
//! 5. WATCH and tracking invalidations, then blocked clients, for the keys changed;
//!    BCAST invalidations go out with the command (a transaction's at its end);
//! 6. stats: commandstats, errorstats, the latency histogram; the slowlog entry is
//!    returned to the caller, who knows the client's name and address.
//!
//! What happens before (routing, key locks, maxmemory refusals) is the caller's: it
//! may have to wait, and the executor never does. Writes that are not one command on
//! its shard (multi-shard steps and releases, pops served in place, the expiry and
//! eviction cycles) call this module's `after_deletions`, `after_write` and
//! `after_server_delete`: the same steps, in the same order.

use std::cell::RefCell;

use super::locks::KeyLocks;
use super::ShardData;
use crate::commands::table::flags;
use crate::commands::{table, AlsoSignal, Args, ExecCtx, KeyedFn};
use crate::effects::Propagation;
use crate::observe::SlowRecord;
use crate::protocol::reply::{Protocol, ReplyWriter};
use crate::util::clock::Stamp;

/// How blocked clients waiting on a written key are woken.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Served now, in Redis's fairness order (`blocking::signal_key`).
    Serve,
    /// Marked ready and served when the caller's locks go: a script holds its keys
    /// until it ends, and a popper must not see its intermediate states.
    WhenReleased,
}

/// One command to execute, with what the executor needs to know about its caller.
pub struct Call<'a, K> {
    /// The command's index in the table.
    pub cmd: u16,
    pub run: KeyedFn,
    pub db: usize,
    pub args: Args<'a>,
    /// Gives the command's keys, in argument order (`ExecCtx::unchanged` indexes
    /// them); called only by a step that needs them (a plain read needs none).
    pub keys: K,
    pub proto: Protocol,
    pub now: u64,
    /// The client on whose behalf it runs (tracking's NOLOOP).
    pub client: u64,
    /// The transaction or script it is part of: its effects join that unit, and its
    /// BCAST invalidations wait for the unit's end.
    pub txn: Option<u64>,
    /// Remember the keys read for `client`, whose home is this shard index.
    pub track_home: Option<usize>,
    pub wake: Wake,
    /// When the previous command ended, if commands are timed.
    pub clock: Option<Stamp>,
    /// Whether it counts in the command statistics (a split command counts once).
    pub counted: bool,
    /// Its error reply was already counted in errorstats (by a script).
    pub error_counted: bool,
    /// Whether a slow run is a slowlog candidate (not for a part of a split command,
    /// nor for a command a script runs: the script is what the slowlog shows).
    pub slowlog: bool,
}

/// What the caller needs after the command ran.
pub struct Executed {
    pub failed: bool,
    /// When it ended (the next command's start), if timed.
    pub end: Option<Stamp>,
    pub usec: u64,
    /// The slowlog entry, when it was slow.
    pub slow: Option<SlowRecord>,
}

/// Runs `call` on this shard's data and does its post-write steps (see the module
/// comment); appends the reply to `out`.
#[inline]
pub fn execute<'k, K, I>(
    locks: &RefCell<KeyLocks>,
    data: &mut ShardData,
    call: Call<'_, K>,
    out: &mut Vec<u8>,
) -> Executed
where
    K: Fn() -> I,
    I: Iterator<Item = &'k [u8]>,
{
    let before = out.len();
    let spec = &table().specs[call.cmd as usize];
    if let Some(node) = crate::cluster::node() {
        if let Some(refused) = cluster_recheck(node, data, &call) {
            ReplyWriter::new(out, call.proto).error(&refused);
            return record_stats(data, &call, Some(&out[before..]));
        }
    }
    data.tracking.writer = call.client;
    // A replica applying its master's command sees the keys the master saw.
    crate::storage::entry::set_replaying(
        crate::replication::is_replica()
            && call.client == crate::replication::link::master_client(),
    );
    let no_touch = !data.no_touch_clients.is_empty()
        && data.no_touch_clients.contains(&call.client)
        && spec.name != "touch";
    let mut ctx = ExecCtx {
        no_touch,
        data,
        db: call.db,
        args: call.args,
        out: ReplyWriter::new(out, call.proto),
        now: call.now,
        unchanged: 0,
        dirty: None,
        propagation: Propagation::keyed(),
        also: Vec::new(),
    };
    (call.run)(&mut ctx);
    let ExecCtx {
        unchanged,
        dirty,
        propagation,
        also,
        ..
    } = ctx;
    let failed = out.get(before) == Some(&b'-');
    // The keys it found expired: DELs before its own effect, invalidations before a
    // tracked read is remembered (Redis's lazy expiry comes before the read it served).
    if propagation.on() | data.tracking.active() | call.track_home.is_some() {
        after_deletions(data, call.txn);
    }
    if let Some(home) = call.track_home {
        for k in (call.keys)() {
            data.tracking.remember(k, call.client, home);
        }
    }
    let wrote = !failed && spec.has(flags::WRITE);
    let changes = if wrote {
        account_write(data, call.db, (call.keys)(), unchanged, dirty)
    } else {
        0
    };
    if propagation.on() {
        let unit = (call.txn, call.db);
        crate::effects::after_keyed(unit, spec, &call.args, changes, propagation);
    }
    if !data.write_hooks_idle() {
        if wrote {
            signal_written(locks, data, &call, unchanged);
        }
        signal_also(locks, data, also, call.wake);
        if data.tracking.has_pending() && call.txn.is_none() {
            data.tracking.flush_bcast();
        }
    }
    record_stats(data, &call, failed.then(|| &out[before..]))
}

/// Cluster mode: the command's slot as the node sees it now, under the keys'
/// locks (`cluster::redirect::recheck`). The master's stream and the AOF are
/// applied whatever the slots say. Some: the redirect to reply instead.
#[inline(never)]
fn cluster_recheck<'k, K, I>(
    node: &crate::cluster::service::Service,
    data: &mut ShardData,
    call: &Call<'_, K>,
) -> Option<String>
where
    K: Fn() -> I,
    I: Iterator<Item = &'k [u8]>,
{
    if crate::persistence::loading()
        || (crate::replication::is_replica()
            && call.client == crate::replication::link::master_client())
    {
        return None;
    }
    let table = data.routes.get(node.routes());
    let db = &data.dbs[call.db];
    let now = call.now;
    let route =
        crate::cluster::redirect::recheck(table, (call.keys)(), &mut |k| db.peek_live(k, now))?;
    crate::cluster::redirect::error_text(table, &route, false)
}

/// The change counter (what the handler counted, else one per key changed) and the
/// memory charge of the keys written. Returns what it added to the counter: whether
/// the command changed anything.
fn account_write<'k>(
    data: &mut ShardData,
    db: usize,
    keys: impl Iterator<Item = &'k [u8]>,
    unchanged: u64,
    dirty: Option<u64>,
) -> u64 {
    let mut n = 0;
    for k in keys {
        data.dbs[db].recharge(k);
        n += 1;
    }
    let changes = dirty.unwrap_or_else(|| crate::commands::changed_keys(unchanged, n));
    data.dirty += changes;
    data.publish_if_limited();
    changes
}

/// WATCH, tracking and blocked clients learn of each key the command changed.
fn signal_written<'k, K, I>(
    locks: &RefCell<KeyLocks>,
    data: &mut ShardData,
    call: &Call<'_, K>,
    unchanged: u64,
) where
    K: Fn() -> I,
    I: Iterator<Item = &'k [u8]>,
{
    let written = (call.keys)()
        .enumerate()
        .filter(|(n, _)| crate::commands::key_changed(unchanged, *n))
        .map(|(_, k)| (call.db, k));
    signal_keys(locks, data, written, call.wake);
}

/// The signals a handler asked for beyond its own keys (`ExecCtx::signal_also`).
fn signal_also(locks: &RefCell<KeyLocks>, data: &mut ShardData, also: Vec<AlsoSignal>, wake: Wake) {
    for s in also {
        if s.modified {
            data.signal_modified(s.db, &s.key);
        }
        if s.wake {
            wake_key(locks, data, s.db, &s.key, wake);
        }
    }
}

/// WATCH and tracking learn of each key, then the clients blocked on it.
fn signal_keys<'k>(
    locks: &RefCell<KeyLocks>,
    data: &mut ShardData,
    keys: impl Iterator<Item = (usize, &'k [u8])>,
    wake: Wake,
) {
    for (db, k) in keys {
        data.signal_modified(db, k);
        wake_key(locks, data, db, k, wake);
    }
}

/// The clients blocked on `key` learn of a write to it, as `wake` says.
fn wake_key(locks: &RefCell<KeyLocks>, data: &mut ShardData, db: usize, key: &[u8], wake: Wake) {
    match wake {
        Wake::Serve => super::blocking::signal_key(locks, data, db, key),
        Wake::WhenReleased => data.blocked.signal(db, key),
    }
}

// ---------------------------------------------------------------------------------
// Writes that are not one command on its shard. A multi-shard operation's steps and
// release, a blocking pop or group read served on its key's shard, the expiry and
// eviction cycles: they report here, so their post-write steps are the executor's
// own, in its order.

/// The keys storage deleted by itself since the last call (found expired by a
/// command or the expiry cycle, evicted): their DELs into the effect stream (inside
/// `txn`'s unit when there is one), their invalidations to tracking clients. Steps
/// 2 and 4's first half.
pub fn after_deletions(data: &mut ShardData, txn: Option<u64>) {
    if crate::effects::active() {
        crate::effects::drain_expired(data, txn);
    }
    // Logged while any client tracks (on any shard): drained even where none does.
    if crate::tracking::any_client() {
        data.drain_lazy_expired();
    }
}

/// A write done outside `execute()` on this shard changed `keys` ((db, key)) and
/// adds `changes` to the change counter, on behalf of `client` (0: the server):
/// steps 3 and 5; BCAST invalidations pending on the shard go out with it.
pub fn after_write<'k>(
    locks: &RefCell<KeyLocks>,
    data: &mut ShardData,
    written: Written<'k, impl Iterator<Item = (usize, &'k [u8])> + Clone>,
) {
    data.tracking.writer = written.client;
    data.dirty += written.changes;
    for (db, k) in written.keys.clone() {
        data.dbs[db].recharge(k);
    }
    data.publish_if_limited();
    if !data.write_hooks_idle() {
        signal_keys(locks, data, written.keys, written.wake);
        if data.tracking.has_pending() {
            data.tracking.flush_bcast();
        }
    }
}

/// The server deleted `key` by itself (eviction): WATCH and tracking learn of it as
/// the server's write, which no client's NOLOOP hides (the writer left from the
/// shard's last command is not its). No change counter, no wake-up (a key that
/// existed had nobody blocked on it). Eviction propagates its DEL itself.
pub fn after_server_delete(data: &mut ShardData, db: usize, key: &[u8]) {
    data.tracking.writer = 0;
    data.signal_modified(db, key);
}

/// What a write outside `execute()` did, for `after_write`.
pub struct Written<'k, K: Iterator<Item = (usize, &'k [u8])> + Clone> {
    pub keys: K,
    pub changes: u64,
    pub client: u64,
    pub wake: Wake,
}

/// commandstats, errorstats and latency of the command that just ran; its slowlog
/// entry if it was slow. `error` is its reply when it failed.
fn record_stats<K>(data: &mut ShardData, call: &Call<'_, K>, error: Option<&[u8]>) -> Executed {
    let t = table();
    let stat = t.stat_id(call.cmd, &call.args);
    let cmd_flags = t.stat_flags(stat);
    let mut executed = Executed {
        failed: error.is_some(),
        end: None,
        usec: 0,
        slow: None,
    };
    if let Some(t0) = call.clock {
        let t1 = Stamp::now();
        let ns = t1.ns_since(t0);
        executed.end = Some(t1);
        executed.usec = ns / 1000;
        if call.counted {
            data.observe.record(stat, cmd_flags, ns);
        }
        let slow = call.slowlog
            && data.observe.is_slow(executed.usec)
            && cmd_flags & flags::SKIP_SLOWLOG == 0;
        if slow {
            executed.slow = Some(SlowRecord {
                time: call.now / 1000,
                usec: executed.usec,
                argv: crate::observe::slow_argv(&call.args),
            });
        }
    }
    if call.counted {
        data.stats
            .record_timed(stat, executed.failed, executed.usec);
    }
    if let Some(reply) = error.filter(|_| !call.error_counted) {
        data.stats.record_error(error_prefix(reply));
    }
    executed
}

/// The error code of an error reply ("-WRONGTYPE ..." → "WRONGTYPE"), as INFO
/// errorstats names it.
pub fn error_prefix(msg: &[u8]) -> &str {
    let msg = msg.strip_prefix(b"-").unwrap_or(msg);
    let end = msg
        .iter()
        .position(|&b| b == b' ' || b == b'\r')
        .unwrap_or(msg.len());
    std::str::from_utf8(&msg[..end]).unwrap_or("ERR")
}
