//! Replication (Redis's replication.c): the role (REPLICAOF, the read-only and
//! min-replicas gates), the replica links — each a reader of the effect stream
//! (`crate::effects`) with what INFO shows of it. A full sync's snapshot is
//! `full_sync`; the replica side, the link to a master, is `link`.

pub mod failover;
pub mod full_sync;
pub mod link;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::shard::blocking::BlockState;
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
    let size = config
        .int_param("repl-backlog-size")
        .unwrap_or(1 << 20)
        .max(1) as u64;
    if BACKLOG_SIZE.swap(size, Ordering::Relaxed) != size {
        crate::effects::backlog_resize(size as usize);
    }
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
    crate::effects::set_replica_mode(on);
    crate::storage::entry::set_replica_holds_expired(on);
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
        let max_lag = config.min_replicas_max_lag();
        if min > 0 && max_lag > 0 && (good_replicas(max_lag) as u64) < min {
            return Some("NOREPLICAS Not enough good replicas to write.");
        }
    }
    if write && replica && config.replica_read_only() {
        return Some("READONLY You can't write against a read only replica.");
    }
    if !stale_ok && running_stale(config) {
        return Some(
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        );
    }
    None
}

/// A replica whose link is down, with `replica-serve-stale-data no`: only commands
/// flagged stale may run (and scripts flagged allow-stale).
pub fn running_stale(config: &crate::config::Config) -> bool {
    is_replica() && !config.replica_serve_stale_data() && !link::is_up()
}

/// REPLICAOF NO ONE, a failover's target promoted, an aborted switch undone (Redis's
/// replicationUnsetMaster): the link ends (awaited unless `wait` is false: inside a
/// transaction), the history shifts to a new id, replicas reconnect to learn it.
/// False when this server was no replica.
pub async fn become_master(cell: &std::rc::Rc<crate::shard::ShardCell>, wait: bool) -> bool {
    if master_slot().take().is_none() {
        return false;
    }
    link::master_unset(wait).await;
    shift_replid();
    set_replica(false);
    disconnect_replicas(cell).await;
    crate::server::role_changed(&cell.data.borrow().config);
    true
}

/// REPLICAOF host port, a failover's switch (Redis's replicationSetMaster): the link
/// task connects to the new master; a master that becomes a replica asks to continue
/// its own history. This server's replicas stay connected, as in Redis: they go on
/// if the new master continues the history, and are disconnected when the history
/// changes (a new id on +CONTINUE) or a full sync's payload is about to load.
pub async fn become_replica_of(
    cell: &std::rc::Rc<crate::shard::ShardCell>,
    host: String,
    port: u16,
) {
    {
        let mut master = master_slot();
        let was_master = master.is_none();
        *master = Some((host, port));
        set_replica(true);
        link::master_changed(was_master);
    }
    unblock_blocked_clients(cell).await;
    crate::server::role_changed(&cell.data.borrow().config);
}

/// Clients blocked on this server's keys as a master get an error and are closed
/// (Redis's disconnectAllBlockedClients): as a replica, the master's stream would
/// serve them writes of another history.
async fn unblock_blocked_clients(cell: &std::rc::Rc<crate::shard::ShardCell>) {
    use crate::shard::blocking::UNBLOCK_ROLE_CHANGE;
    cell.call_all(|c| {
        for client in c.clients.borrow().iter() {
            if let Some(state) = client.blocked.borrow().as_ref() {
                if state.unblock_mode() == 0 {
                    state.unblock(UNBLOCK_ROLE_CHANGE);
                }
            }
        }
    })
    .await;
}

/// Whether a replica link announced `host`:`port` (FAILOVER TO).
pub fn has_replica(host: &str, port: u16) -> bool {
    links()
        .iter()
        .any(|l| l.peer.ip == host && l.peer.port == port)
}

/// Whether the replica at `host`:`port` acknowledged `offset`.
pub fn replica_acked(host: &str, port: u16, offset: u64) -> bool {
    links()
        .iter()
        .any(|l| l.peer.ip == host && l.peer.port == port && l.ack_offset == offset)
}

/// A replica that acknowledged exactly `offset` (FAILOVER without TO).
pub fn replica_with_ack(offset: u64) -> Option<(String, u16)> {
    links()
        .iter()
        .find(|l| l.ack_offset == offset)
        .map(|l| (l.peer.ip.clone(), l.peer.port))
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

/// The replication ids (Redis's replid / replid2 / second_replid_offset): the
/// history this server's stream belongs to, and the one it continued from (after a
/// promotion, replicas of the old master may continue with it up to that offset).
struct Ids {
    replid: String,
    replid2: String,
    /// The first offset that is no longer the old history's; -1 without one.
    second_offset: i64,
}

static IDS: Mutex<Option<Ids>> = Mutex::new(None);

fn ids() -> std::sync::MutexGuard<'static, Option<Ids>> {
    let mut ids = IDS.lock().unwrap_or_else(|e| e.into_inner());
    if ids.is_none() {
        *ids = Some(Ids {
            replid: random_id(),
            replid2: NO_ID.to_string(),
            second_offset: -1,
        });
    }
    ids
}

const NO_ID: &str = "0000000000000000000000000000000000000000";

/// 40 hex characters (Redis's getRandomHexChars for a replication id).
pub(crate) fn random_id() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seed = crate::util::now_ms()
        ^ ((std::process::id() as u64) << 32)
        ^ COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
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
}

/// The replication id this server's stream has (its master's, on a replica).
pub fn replid() -> String {
    ids().as_ref().map(|i| i.replid.clone()).unwrap_or_default()
}

/// The previous id and the offset up to which it holds (-1: none).
pub fn replid2() -> (String, i64) {
    ids()
        .as_ref()
        .map(|i| (i.replid2.clone(), i.second_offset))
        .unwrap_or_default()
}

/// A replica's full sync: the master's history is this server's now.
pub fn adopt_replid(id: &str) {
    if let Some(i) = ids().as_mut() {
        i.replid = id.to_string();
        i.replid2 = NO_ID.to_string();
        i.second_offset = -1;
    }
}

/// The master's id changed under a partial resync (it was promoted): the old one is
/// kept as the second id up to `offset`, so this server's replicas may continue.
pub fn continue_with_replid(id: &str, offset: u64) {
    if let Some(i) = ids().as_mut() {
        i.replid2 = std::mem::replace(&mut i.replid, id.to_string());
        i.second_offset = offset as i64 + 1;
    }
}

/// Redis's shiftReplicationId, on a promotion (REPLICAOF NO ONE, FAILOVER): a new
/// history starts here; the old one's replicas may continue up to this offset.
pub fn shift_replid() {
    let offset = crate::effects::offset();
    if let Some(i) = ids().as_mut() {
        i.replid2 = std::mem::replace(&mut i.replid, random_id());
        i.second_offset = offset as i64 + 1;
        tracing::info!(
            "Setting secondary replication ID to {}, valid up to offset: {}. New replication ID is {}",
            i.replid2,
            i.second_offset,
            i.replid
        );
    }
}

/// A new history and no second one (the backlog was freed: nobody can continue;
/// DEBUG CHANGE-REPL-ID).
pub fn change_replid() {
    if let Some(i) = ids().as_mut() {
        i.replid = random_id();
        i.replid2 = NO_ID.to_string();
        i.second_offset = -1;
    }
}

// ---- counters (INFO stats) ----

static SYNC_FULL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static SYNC_PARTIAL_OK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static SYNC_PARTIAL_ERR: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// sync_full, sync_partial_ok, sync_partial_err.
pub fn sync_stats() -> (u64, u64, u64) {
    (
        SYNC_FULL.load(Ordering::Relaxed),
        SYNC_PARTIAL_OK.load(Ordering::Relaxed),
        SYNC_PARTIAL_ERR.load(Ordering::Relaxed),
    )
}

/// CONFIG RESETSTAT.
pub fn reset_stats() {
    link::reset_unexpected_error_replies();
    SYNC_FULL.store(0, Ordering::Relaxed);
    SYNC_PARTIAL_OK.store(0, Ordering::Relaxed);
    SYNC_PARTIAL_ERR.store(0, Ordering::Relaxed);
}

/// A replica asked for a full sync (`asked_partial`: its PSYNC named a history we
/// could not continue, Redis's sync_partial_err).
pub fn count_full_sync(asked_partial: bool) {
    SYNC_FULL.fetch_add(1, Ordering::Relaxed);
    if asked_partial {
        SYNC_PARTIAL_ERR.fetch_add(1, Ordering::Relaxed);
    }
}

/// PSYNC <replid> <offset> (Redis's masterTryPartialResynchronization): a replica
/// link continuing from `offset` when this server's history is the one asked for (or
/// the previous one, up to where it ended) and the backlog still holds the bytes.
/// Returns the link's reader id; None (logged) means a full resync.
pub fn try_partial(asked_id: &str, offset: i64, peer: ReplicaPeer, who: &str) -> Option<u64> {
    let (id, id2, second) = {
        let g = ids();
        let i = g.as_ref()?;
        (i.replid.clone(), i.replid2.clone(), i.second_offset)
    };
    if asked_id != id {
        if asked_id != id2 {
            if asked_id != "?" {
                tracing::info!("Partial resynchronization not accepted: Replication ID mismatch (Replica asked for '{asked_id}', my replication IDs are '{id}' and '{id2}')");
            } else {
                tracing::info!("Full resync requested by replica {who}");
            }
            return None;
        }
        if offset > second {
            tracing::info!("Partial resynchronization not accepted: Requested offset for second ID was {offset}, but I can reply up to {second}");
            return None;
        }
    }
    let Some((reader, sent)) = u64::try_from(offset)
        .ok()
        .and_then(crate::effects::subscribe_from)
    else {
        tracing::info!("Unable to partial resync with replica {who} for lack of backlog (Replica request was: {offset}).");
        if offset > crate::effects::offset() as i64 {
            tracing::warn!("Warning: replica {who} tried to PSYNC with an offset that is greater than the master replication offset.");
        }
        return None;
    };
    register_link(reader, peer, SyncState::Online);
    SYNC_PARTIAL_OK.fetch_add(1, Ordering::Relaxed);
    tracing::info!("Partial resynchronization request from {who} accepted. Sending {sent} bytes of backlog starting from offset {offset}.");
    Some(reader)
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

/// The dataset as one RDB file, taken under every shard's lock as operation `txn`
/// (SAVE: a command inside EXEC or a script, FLUSHALL's save, takes them as the
/// transaction, which may already hold them), plus each shard's change counter at
/// that moment (what a SAVE of it makes clean).
pub async fn snapshot_as(
    cell: &std::rc::Rc<crate::shard::ShardCell>,
    txn: crate::shard::locks::TxnId,
) -> (Vec<u8>, Vec<u64>) {
    let owner = crate::shard::locks::LockOwner {
        id: txn,
        write: false,
        client: 0,
    };
    let op = crate::shard::multi::MultiShardOp::lock_all(owner, cell).await;
    let parts = op.on_each(cell, |d| (shard_records(d), d.dirty)).await;
    let replication = save_info();
    op.release(cell).await;
    let (parts, dirty): (Vec<_>, Vec<u64>) = parts.into_iter().unzip();
    let (_, libraries) = crate::scripting::functions::snapshot();
    let codes: Vec<&[u8]> = libraries.iter().map(|l| l.code.as_slice()).collect();
    (
        rdb::file::assemble(&parts, &codes, replication.as_ref()),
        dirty,
    )
}

/// Where this server's replication stands, for a save's AUX fields (Redis's
/// rdbPopulateSaveInfo): a master's own stream while it has a backlog (without one
/// no replica can continue anyway), a replica's master's stream while it has a
/// position; None otherwise. Called at the cut, every shard held (and on a replica
/// the master connection between batches, `link::hold_stream`), so the offset is the
/// one the dataset holds everything up to.
pub fn save_info() -> Option<rdb::file::ReplicationAux> {
    let (offset, selected) = crate::effects::position();
    let stream_db = if is_replica() {
        link::stream_db()?
    } else {
        crate::effects::backlog_info()?;
        // Nothing selected yet: the next write selects, any database will do.
        selected.unwrap_or(0)
    };
    Some(rdb::file::ReplicationAux {
        stream_db,
        id: replid(),
        offset,
    })
}

/// The replication AUX fields of the RDB file this server starts from (Redis's
/// loadDataFromDisk), before its keys load: a replica continues its master's
/// history from the file's offset (its first PSYNC asks for the next byte); a
/// master keeps the file's history as its second id, valid up to the next byte, and
/// its stream goes on from that offset into a fresh backlog, so that replicas that
/// followed it before the restart continue. Ignored when the file's database does
/// not exist here.
pub fn restore_from_rdb(
    config: &crate::config::Config,
    saved: &crate::persistence::load::SavedReplication,
) {
    let (Ok(offset), Ok(stream_db)) = (
        u64::try_from(saved.offset),
        usize::try_from(saved.stream_db),
    ) else {
        return;
    };
    if saved.id.len() != 40 || stream_db >= config.databases() {
        return;
    }
    sync_config(config);
    if is_replica() {
        adopt_replid(&saved.id);
        crate::effects::reset_offset(offset);
        link::cache_position(offset, stream_db);
        return;
    }
    if let Some(i) = ids().as_mut() {
        i.replid2 = saved.id.clone();
        i.second_offset = offset as i64 + 1;
    }
    crate::effects::backlog_create(backlog_size());
    crate::effects::reset_offset(offset);
    // repl-backlog-ttl counts from the start: no replica is attached yet.
    NO_REPLICAS_SINCE_MS.store(crate::util::now_ms(), Ordering::Relaxed);
    // Keys found expired while loading reach the backlog as DELs (Redis's
    // RDBFLAGS_FEED_REPL): replicas that continue hold them still.
    crate::persistence::load::feed_expired_to_stream(true);
}

/// Where a replica link stands in its sync (Redis's replstate), as INFO shows it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SyncState {
    /// Its snapshot is being taken (a diskless transfer counts here, as in Redis).
    WaitBgsave,
    /// A disk-based sync sends it the saved file.
    SendBulk,
    /// It has its snapshot and takes the stream.
    Online,
}

impl SyncState {
    pub fn name(self) -> &'static str {
        match self {
            SyncState::WaitBgsave => "wait_bgsave",
            SyncState::SendBulk => "send_bulk",
            SyncState::Online => "online",
        }
    }
}

/// What INFO replication shows of a replica link, kept beside its stream reader.
struct Link {
    id: u64,
    peer: ReplicaPeer,
    state: SyncState,
    /// The offset the replica last acknowledged (REPLCONF ACK) and when (unix ms);
    /// the time starts as the link's.
    ack_offset: u64,
    ack_ms: u64,
    /// The highest offset it reported fsynced to its AOF (REPLCONF ACK ... FACK,
    /// Redis 7.2's repl_aof_off; 0 from a replica that never reports one).
    aof_offset: u64,
}

static LINKS: Mutex<Vec<Link>> = Mutex::new(Vec::new());

fn links() -> std::sync::MutexGuard<'static, Vec<Link>> {
    LINKS.lock().unwrap_or_else(|e| e.into_inner())
}

/// INFO's connected_slaves, FAILOVER's "any replica": every replica from its SYNC
/// on, those still waiting for their snapshot to start included (Redis's slaves list).
pub fn link_count() -> usize {
    links().len() + full_sync::pending_count()
}

/// Registers a replica link as a reader of the effect stream; its stream starts with
/// the next propagated write. Returns the reader's id and the stream's offset at that
/// point (what +FULLRESYNC reports: the replica counts from it). The first replica
/// creates the backlog.
pub fn attach(peer: ReplicaPeer) -> (u64, u64) {
    crate::effects::backlog_create(BACKLOG_SIZE.load(Ordering::Relaxed) as usize);
    let (id, offset) = crate::effects::subscribe();
    register_link(id, peer, SyncState::WaitBgsave);
    (id, offset)
}

/// A link for a replica that shares a full sync whose snapshot ends at `offset`
/// (another replica's disk-based sync, still saving): its stream is the backlog's
/// from there on. None when the backlog no longer holds it.
pub fn attach_at(peer: ReplicaPeer, offset: u64) -> Option<u64> {
    let (id, _) = crate::effects::subscribe_from(offset + 1)?;
    register_link(id, peer, SyncState::WaitBgsave);
    Some(id)
}

/// A link moves on in its sync (INFO's state=).
pub fn set_state(id: u64, state: SyncState) {
    if let Some(l) = links().iter_mut().find(|l| l.id == id) {
        l.state = state;
    }
    if state == SyncState::Online {
        // WAIT / WAITAOF count online replicas only: one more may be enough now.
        wake_ack_waiters();
    }
}

/// Whether a link other than `except` waits for its snapshot (Redis's
/// anyOtherSlaveWaitRdb).
pub fn any_other_waits_for_snapshot(except: u64) -> bool {
    links()
        .iter()
        .any(|l| l.id != except && l.state == SyncState::WaitBgsave)
}

fn register_link(id: u64, peer: ReplicaPeer, state: SyncState) {
    links().push(Link {
        id,
        peer,
        state,
        ack_offset: 0,
        ack_ms: crate::util::now_ms(),
        aof_offset: 0,
    });
    NO_REPLICAS_SINCE_MS.store(0, Ordering::Relaxed);
}

pub fn detach(id: u64) {
    let mut links = links();
    links.retain(|l| l.id != id);
    if links.is_empty() {
        NO_REPLICAS_SINCE_MS.store(crate::util::now_ms(), Ordering::Relaxed);
    }
    crate::effects::unsubscribe(id);
}

/// REPLCONF ACK on a link: the replica has processed the stream up to `offset`,
/// and (FACK, from a Redis 7.2 replica with its AOF on) fsynced it to its AOF up to
/// `fsynced`, which only ever moves up (Redis's repl_aof_off).
pub fn ack(id: u64, offset: u64, fsynced: Option<u64>) {
    if let Some(l) = links().iter_mut().find(|l| l.id == id) {
        l.ack_offset = offset;
        l.ack_ms = crate::util::now_ms();
        if let Some(f) = fsynced {
            l.aof_offset = l.aof_offset.max(f);
        }
    }
    wake_ack_waiters();
}

/// Clients blocked in WAIT or WAITAOF (Redis's clients_waiting_acks): each looks at
/// its own condition again when woken — by every replica ACK, every move of the
/// AOF's fsynced offset, the AOF going on or off.
static ACK_WAITERS: Mutex<Vec<Arc<BlockState>>> = Mutex::new(Vec::new());
/// How many there are: the AOF writer, after each fsync, looks no further when none.
static ACK_WAITER_COUNT: AtomicUsize = AtomicUsize::new(0);

fn ack_waiters() -> std::sync::MutexGuard<'static, Vec<Arc<BlockState>>> {
    ACK_WAITERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A client starts waiting in WAIT / WAITAOF (it looks at its condition after this,
/// so a wake-up in between is not lost).
pub fn add_ack_waiter(state: Arc<BlockState>) {
    ack_waiters().push(state);
    ACK_WAITER_COUNT.fetch_add(1, Ordering::SeqCst);
}

pub fn remove_ack_waiter(state: &Arc<BlockState>) {
    let mut w = ack_waiters();
    let before = w.len();
    w.retain(|s| !Arc::ptr_eq(s, state));
    ACK_WAITER_COUNT.fetch_sub(before - w.len(), Ordering::SeqCst);
}

/// Something WAIT / WAITAOF clients wait for moved: they look again.
pub fn wake_ack_waiters() {
    if ACK_WAITER_COUNT.load(Ordering::SeqCst) == 0 {
        return;
    }
    for s in ack_waiters().iter() {
        s.wake();
    }
}

/// How many replicas acknowledged at least `offset` (Redis's
/// replicationCountAcksByOffset).
pub fn acked(offset: u64) -> usize {
    links()
        .iter()
        .filter(|l| l.state == SyncState::Online && l.ack_offset >= offset)
        .count()
}

/// How many replicas reported their AOF fsynced at least up to `offset` (Redis's
/// replicationCountAOFAcksByOffset): a replica that sends no FACK counts only for
/// offset 0, as in Redis.
pub fn aof_acked(offset: u64) -> usize {
    links()
        .iter()
        .filter(|l| l.state == SyncState::Online && l.aof_offset >= offset)
        .count()
}

/// The online replicas as ROLE lists them: address, listening port, and the
/// offset each last acknowledged, in attach order.
pub fn replica_acks() -> Vec<(String, u16, u64)> {
    links()
        .iter()
        .filter(|l| l.state == SyncState::Online)
        .map(|l| (l.peer.ip.clone(), l.peer.port, l.ack_offset))
        .collect()
}

/// Whether every attached replica acknowledged the whole stream (Redis's
/// isReadyToShutdown); true with none.
pub fn replicas_in_sync() -> bool {
    let links = links();
    if links.is_empty() {
        return true;
    }
    let offset = crate::effects::offset();
    links.iter().all(|l| l.ack_offset == offset)
}

/// A shutdown's account of its replicas (Redis's finishShutdown): a warning per
/// replica that has not acknowledged the whole stream, then how many have.
pub fn log_replicas_at_shutdown() {
    let offset = crate::effects::offset();
    let now = crate::util::now_ms();
    let links = links();
    let mut lagging = 0;
    for l in links.iter().filter(|l| l.ack_offset != offset) {
        lagging += 1;
        tracing::warn!(
            "Lagging replica {}:{} reported offset {} behind master, lag={}, state=online.",
            l.peer.ip,
            l.peer.port,
            offset.saturating_sub(l.ack_offset),
            now.saturating_sub(l.ack_ms) / 1000
        );
    }
    if !links.is_empty() {
        tracing::info!(
            "{} of {} replicas are in sync when shutting down.",
            links.len() - lagging,
            links.len()
        );
    }
}

/// Online replicas whose last ACK is at most `max_lag` seconds old (Redis's
/// refreshGoodSlavesCount, for min-replicas-to-write).
pub fn good_replicas(max_lag: u64) -> usize {
    let now = crate::util::now_ms();
    links()
        .iter()
        .filter(|l| l.state == SyncState::Online && now.saturating_sub(l.ack_ms) / 1000 <= max_lag)
        .count()
}

/// repl-backlog-size, as configured.
pub fn backlog_size() -> usize {
    BACKLOG_SIZE.load(Ordering::Relaxed) as usize
}

/// repl-backlog-size, cached for `attach` (which runs under the shards' locks).
static BACKLOG_SIZE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 20);
/// When the last replica left (unix ms; 0: some are attached), for repl-backlog-ttl.
static NO_REPLICAS_SINCE_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The master's part of Redis's replicationCron, on shard 0 for the server's life.
pub async fn run_cron(cell: std::rc::Rc<crate::shard::ShardCell>) {
    loop {
        crate::runtime::sleep(std::time::Duration::from_millis(100)).await;
        failover::cron(&cell).await;
        cron(&cell.data.borrow().config);
    }
}

/// The master's part of Redis's replicationCron (shard 0, every 100 ms): the backlog
/// takes in the stream, and is freed, the history given a new id, after
/// repl-backlog-ttl seconds without replicas (never on a replica: it may be promoted).
fn cron(config: &crate::config::Config) {
    // Asking merges the shards' logs into the backlog (with no replica attached
    // nobody else reads the stream, and the logs would only grow), and frees a
    // little of the replication buffer nobody needs any more.
    crate::effects::trim_buffer();
    if crate::effects::backlog_info().is_none() {
        return;
    }
    let since = NO_REPLICAS_SINCE_MS.load(Ordering::Relaxed);
    let ttl = config.int_param("repl-backlog-ttl").unwrap_or(3600).max(0) as u64;
    if since == 0 || ttl == 0 || is_replica() {
        return;
    }
    if crate::util::now_ms().saturating_sub(since) / 1000 >= ttl {
        change_replid();
        crate::effects::backlog_free();
        tracing::info!("Replication backlog freed after {ttl} seconds without connected replicas.");
    }
}

/// INFO replication's `slaveN:ip=...,port=...,state=...,offset=...,lag=...` lines:
/// the links in attach order, then the replicas whose snapshot has not started
/// (wait_bgsave, offset 0, as Redis shows them).
pub fn info_lines(out: &mut String) {
    use std::fmt::Write;
    let now = crate::util::now_ms();
    let links = links();
    for (i, l) in links.iter().enumerate() {
        let _ = write!(
            out,
            "slave{i}:ip={},port={},state={},offset={},lag={}\r\n",
            l.peer.ip,
            l.peer.port,
            l.state.name(),
            l.ack_offset,
            now.saturating_sub(l.ack_ms) / 1000
        );
    }
    for (i, (peer, since_ms)) in full_sync::pending_peers().iter().enumerate() {
        let _ = write!(
            out,
            "slave{}:ip={},port={},state=wait_bgsave,offset=0,lag={}\r\n",
            links.len() + i,
            peer.ip,
            peer.port,
            now.saturating_sub(*since_ms) / 1000
        );
    }
}
