//! Replication (Redis's replication.c): the role (REPLICAOF, the read-only and
//! min-replicas gates), the replica links — each a reader of the effect stream
//! (`crate::effects`) with what INFO shows of it — and the snapshot a replica starts
//! from. The replica side, the link to a master, is `link`.

pub mod link;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::shard::ShardData;
use crate::storage::rdb;

/// REPLICAOF host port is in force (this server is a replica whose link is down).
static IS_REPLICA: AtomicBool = AtomicBool::new(false);

/// Whether REPLICAOF made this server a replica.
#[inline]
pub fn is_replica() -> bool {
    IS_REPLICA.load(Ordering::Relaxed)
}

/// min-replicas-to-write and min-replicas-max-lag are both set: a write on a master
/// must count its good replicas (cached from the configuration for the gate).
static WRITES_NEED_REPLICAS: AtomicBool = AtomicBool::new(false);

/// Copies what `check` needs of the configuration into the process-wide cache. Called
/// at startup and after every CONFIG SET (the configuration is the same on all shards).
pub fn sync_config(config: &crate::config::Config) {
    let need = config.min_replicas_to_write() > 0 && config.min_replicas_max_lag() > 0;
    WRITES_NEED_REPLICAS.store(need, Ordering::Relaxed);
}

/// Whether `check` can refuse anything: only on a replica, on a master whose writes
/// need good replicas, or after a failed background save.
#[inline]
pub fn may_refuse() -> bool {
    IS_REPLICA.load(Ordering::Relaxed)
        || WRITES_NEED_REPLICAS.load(Ordering::Relaxed)
        || crate::persistence::bgsave::last_failed()
        || crate::persistence::aof::may_refuse()
}

pub fn set_replica(on: bool) {
    let was = IS_REPLICA.swap(on, Ordering::Relaxed);
    if on && !was {
        BECAME_REPLICA.fetch_add(1, Ordering::Relaxed);
    }
}

/// How many times this server went from master to replica.
static BECAME_REPLICA: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A mark to pass to `became_replica_since` (taken when a transaction or script
/// starts).
pub fn role_mark() -> u64 {
    BECAME_REPLICA.load(Ordering::Relaxed)
}

/// Whether this master became a replica since `mark`: what a transaction or script
/// did then is not propagated (Redis drops it: the new master's stream rules).
pub fn became_replica_since(mark: u64) -> bool {
    BECAME_REPLICA.load(Ordering::Relaxed) != mark
}

/// The master REPLICAOF (or the config file's `replicaof`) named, while one is
/// set. It lives here, below the commands, because the config (CONFIG GET and
/// CONFIG REWRITE of `replicaof`) and the server read it as well as REPLICAOF.
static MASTER: Mutex<Option<(String, u16)>> = Mutex::new(None);

/// The master REPLICAOF set, if any (for ROLE, INFO replication and the config).
pub fn master() -> Option<(String, u16)> {
    master_slot().clone()
}

/// The master, locked, for REPLICAOF's compare-and-change.
pub fn master_slot() -> std::sync::MutexGuard<'static, Option<(String, u16)>> {
    MASTER.lock().unwrap_or_else(|e| e.into_inner())
}

/// The error a command with these traits gets under the replication settings, in
/// Redis's processCommand order: first -MISCONF, the refusal of writes after a failed
/// background save (persistence's rule, checked wherever these are).
pub fn check(config: &crate::config::Config, write: bool, stale_ok: bool) -> Option<&'static str> {
    if write {
        if let Some(e) = crate::persistence::bgsave::write_refusal(config) {
            return Some(e);
        }
        if let Some(e) = crate::persistence::aof::write_refusal() {
            return Some(e);
        }
    }
    let replica = is_replica();
    if write && !replica {
        let min = config.min_replicas_to_write();
        // Links never report a lag (no REPLCONF ACK handling), so none counts as good.
        if min > 0 && config.min_replicas_max_lag() > 0 {
            return Some("NOREPLICAS Not enough good replicas to write.");
        }
    }
    if write && replica && config.replica_read_only() {
        return Some("READONLY You can't write against a read only replica.");
    }
    if replica && !stale_ok && !config.replica_serve_stale_data() && !link::is_up() {
        return Some(
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        );
    }
    None
}

/// Closes every replica link (Redis's disconnectSlaves): after a full sync from a
/// master their data is from before it.
pub async fn disconnect_replicas(cell: &std::rc::Rc<crate::shard::ShardCell>) {
    cell.call_all(|c| {
        for cl in c.clients.borrow().iter() {
            if cl.role.get() == crate::clients::ClientRole::Replica {
                cl.kill();
            }
        }
    })
    .await;
}

/// Who a replica link is, for INFO replication's `slaveN:` line.
#[derive(Clone, Debug)]
pub struct ReplicaPeer {
    /// The replica's address (or the one it announced with REPLCONF ip-address).
    pub ip: String,
    /// What it announced with REPLCONF listening-port (0: nothing).
    pub port: u16,
}

/// The replication id this process reports (fixed per process, 40 hex chars).
pub fn replid() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let seed = crate::util::now_ms() ^ ((std::process::id() as u64) << 32);
        let mut x = seed | 1;
        let mut s = String::with_capacity(40);
        while s.len() < 40 {
            // xorshift: only needs to look random, never to be secure.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.push_str(&format!("{:016x}", x));
        }
        s.truncate(40);
        s
    })
}

/// One shard's keys as RDB records, per database index: every key it holds, those
/// whose TTL ran out but are not deleted yet included, as Redis 7.0's rdbSave writes
/// them (a loading master drops and counts them; a replica gets their DELs later).
pub fn shard_records(data: &ShardData) -> Vec<Vec<u8>> {
    data.dbs
        .iter()
        .map(|db| {
            let mut out = Vec::new();
            if db.is_empty() {
                return out;
            }
            for idx in 0..db.slot_count() {
                // A clock at 0: nothing counts as expired.
                db.for_each_in_slot(idx, 0, |e| {
                    rdb::file::write_record(&mut out, e.key(), e.value(), e.expire_at());
                });
            }
            out
        })
        .collect()
}

/// The dataset as one RDB file, taken under every shard's lock, plus each shard's
/// change counter at that moment (what a SAVE of it makes clean).
pub async fn snapshot(
    cell: &std::rc::Rc<crate::shard::ShardCell>,
    attach_link: Option<ReplicaPeer>,
) -> (Vec<u8>, Option<(u64, u64)>, Vec<u64>) {
    snapshot_as(cell, cell.next_txn_id(), attach_link).await
}

/// `snapshot`, its locks taken as operation `txn`: a command inside EXEC or a script
/// (FLUSHALL's save) takes them as the transaction, which may already hold them.
pub async fn snapshot_as(
    cell: &std::rc::Rc<crate::shard::ShardCell>,
    txn: crate::shard::locks::TxnId,
    attach_link: Option<ReplicaPeer>,
) -> (Vec<u8>, Option<(u64, u64)>, Vec<u64>) {
    let owner = crate::shard::locks::LockOwner {
        id: txn,
        write: false,
        client: 0,
    };
    let op = crate::shard::multi::MultiShardOp::lock_all(owner, cell).await;
    let parts = op.on_each(cell, |d| (shard_records(d), d.dirty)).await;
    let id = attach_link.map(attach);
    op.release(cell).await;
    let (parts, dirty): (Vec<_>, Vec<u64>) = parts.into_iter().unzip();
    let (_, libraries) = crate::scripting::functions::snapshot();
    let codes: Vec<&[u8]> = libraries.iter().map(|l| l.code.as_slice()).collect();
    (rdb::file::assemble(&parts, &codes), id, dirty)
}

/// What INFO replication shows of a replica link, kept beside its stream reader.
struct Link {
    id: u64,
    peer: ReplicaPeer,
    /// The offset the replica last acknowledged (REPLCONF ACK) and when (unix ms);
    /// the time starts as the link's.
    ack_offset: u64,
    ack_ms: u64,
}

static LINKS: Mutex<Vec<Link>> = Mutex::new(Vec::new());

fn links() -> std::sync::MutexGuard<'static, Vec<Link>> {
    LINKS.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn link_count() -> usize {
    links().len()
}

/// Registers a replica link as a reader of the effect stream; its stream starts with
/// the next propagated write. Returns the reader's id and the stream's offset at that
/// point (what +FULLRESYNC reports: the replica counts from it).
pub fn attach(peer: ReplicaPeer) -> (u64, u64) {
    let mut links = links();
    let (id, offset) = crate::effects::subscribe();
    links.push(Link {
        id,
        peer,
        ack_offset: 0,
        ack_ms: crate::util::now_ms(),
    });
    (id, offset)
}

pub fn detach(id: u64) {
    let mut links = links();
    links.retain(|l| l.id != id);
    crate::effects::unsubscribe(id);
}

/// REPLCONF ACK on a link: the replica has processed the stream up to `offset`.
pub fn ack(id: u64, offset: u64) {
    if let Some(l) = links().iter_mut().find(|l| l.id == id) {
        l.ack_offset = offset;
        l.ack_ms = crate::util::now_ms();
    }
}

/// INFO replication's `slaveN:ip=...,port=...,state=online,offset=...,lag=...` lines,
/// in attach order. A link is online from its attach: the snapshot it starts with
/// is already queued to it.
pub fn info_lines(out: &mut String) {
    use std::fmt::Write;
    let now = crate::util::now_ms();
    for (i, l) in links().iter().enumerate() {
        let _ = write!(
            out,
            "slave{i}:ip={},port={},state=online,offset={},lag={}\r\n",
            l.peer.ip,
            l.peer.port,
            l.ack_offset,
            now.saturating_sub(l.ack_ms) / 1000
        );
    }
}
