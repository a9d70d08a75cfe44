//! A shard: one pinned core, the only thread that touches the keys of its slots.

pub mod batch;
pub mod blocking;
pub mod exec;
pub mod fabric;
pub mod hops;
pub mod locks;
pub mod memory;
pub mod merge;
pub mod multi;
pub mod pause;
pub mod watch;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hashbrown::DefaultHashBuilder;

use crate::clients::ClientRegistry;
use crate::config::Config;
use crate::runtime::{self, MeshSenders};
use crate::server::ServerInfo;
use crate::slot::SlotTable;
use crate::stats::ShardStats;
use crate::storage::{Db, Rng};
use fabric::Job;
use locks::{KeyLocks, TxnId};

/// Everything a command may touch on its shard. Borrowed mutably for the duration of
/// one command or one batch, never across an await.
pub struct ShardData {
    pub id: usize,
    pub dbs: Vec<Db>,
    /// In cluster mode, the executor's copy of the node's routing table (its
    /// last look before a command runs, `exec::cluster_recheck`).
    pub routes: crate::cluster::service::RoutesCopy,
    /// A replica's diskless load with repl-diskless-load swapdb: the master's keys
    /// go here while `dbs` is still served, and replace it once the load succeeded
    /// (empty otherwise).
    pub loading_dbs: Vec<Db>,
    pub config: Config,
    pub stats: ShardStats,
    pub rng: Rng,
    /// Whether the active expiry cycle runs (DEBUG SET-ACTIVE-EXPIRE).
    pub active_expire: bool,
    /// Clients in CLIENT NO-TOUCH mode: their commands (but TOUCH) leave the keys'
    /// access clock and LFU counter alone. Empty unless someone asked.
    pub no_touch_clients: std::collections::HashSet<u64>,
    /// Clients' WATCHes on this shard's keys.
    pub watches: watch::Watches,
    /// Client tracking: the clients that read each key of this shard, BCAST prefixes.
    pub tracking: crate::tracking::TrackingTable,
    /// Clients blocked (BLPOP ...) on this shard's keys.
    pub blocked: blocking::Blocked,
    /// Collection encoding thresholds, refreshed on CONFIG SET.
    pub limits: crate::storage::limits::EncodingLimits,
    /// CLIENT PAUSE: commands wait, keys neither expire nor get evicted.
    pub client_pause: pause::ClientPause,
    /// maxmemory settings, eviction pool and counters.
    pub mem: crate::storage::evict::MemState,
    /// Big values waiting to be freed in the background.
    pub lazy: crate::storage::evict::LazyFree,
    /// Latency histograms, latency monitor events and the slow log of this shard.
    pub observe: crate::observe::Observer,
    /// Keys written on this shard since the last SAVE (Redis's server.dirty, counted
    /// once per key a write changed): INFO's rdb_changes_since_last_save.
    pub dirty: u64,
}

impl ShardData {
    pub fn db(&mut self, index: usize) -> &mut Db {
        &mut self.dbs[index]
    }

    /// Re-derives what the shard caches from its config (after CONFIG SET).
    pub fn refresh_config(&mut self) {
        self.limits = crate::storage::limits::EncodingLimits::from_config(&self.config);
        self.mem.refresh(&self.config);
        self.apply_db_settings();
        // CONFIG SET then refreshes the overhead from every shard's figure of now
        // (without a limit they publish only once per cron period).
        crate::storage::memory::publish_dataset(self.id, self.dataset_bytes());
        self.observe.refresh(&self.config);
        self.tracking
            .set_max_keys(self.config.tracking_table_max_keys());
    }

    /// lazyfree-lazy-server-del and the LFU parameters live in each database, for
    /// `Db::insert`'s overwrites.
    fn apply_db_settings(&mut self) {
        let hold = self.client_pause.is_set();
        for db in &mut self.dbs {
            db.lazy_overwrites = self.mem.lazy_server_del;
            db.lfu = self.mem.lfu;
            db.expiry_held = hold;
        }
    }

    /// A swapdb load begins: empty databases beside the served ones.
    pub fn begin_side_load(&mut self) {
        self.loading_dbs = self.dbs.iter().map(Db::empty_like).collect();
    }

    /// A swapdb load failed: what it loaded is freed later, the served dataset stays.
    pub fn discard_side_load(&mut self) {
        for mut db in std::mem::take(&mut self.loading_dbs) {
            let tables = db.detach();
            self.lazy.free_tables(tables);
        }
    }

    /// A swapdb load succeeded: its databases are served from now on (every WATCH
    /// of the old keys broken, blocked clients re-checked) and the old ones are
    /// freed later. Counts the keys now served.
    pub fn swap_in_side_load(&mut self) -> u64 {
        let loaded = std::mem::take(&mut self.loading_dbs);
        self.watches.touch_db(None);
        self.tracking.clear();
        let mut keys = 0;
        for (live, mut side) in self.dbs.iter_mut().zip(loaded) {
            let old = live.replace_with_loaded(&mut side);
            self.lazy.free_tables(old);
            keys += live.len() as u64;
        }
        self.blocked.signal_all();
        keys
    }

    /// CLIENT PAUSE on this shard: until `until_ms`, all commands or only writes.
    pub fn pause_clients(&mut self, until_ms: u64, writes_only: bool) {
        self.client_pause.pause(until_ms, writes_only);
        self.apply_db_settings();
    }

    /// CLIENT UNPAUSE on this shard: waiting clients go on, keys expire again.
    pub fn unpause_clients(&mut self) {
        self.client_pause.unpause();
        self.apply_db_settings();
    }

    /// A FAILOVER's or a shutdown's hold on writes on this shard, on or off.
    pub fn hold_writes(&mut self, hold: pause::WriteHold, on: bool) {
        self.client_pause.set_write_hold(hold, on);
        self.apply_db_settings();
    }

    /// Whether a client pause is in force at `now_ms` (expiry and eviction wait for
    /// its end, as Redis keeps the dataset static while clients are paused).
    pub fn paused(&mut self, now_ms: u64) -> bool {
        if !self.client_pause.is_set() {
            return false;
        }
        let on = self.client_pause.in_force(now_ms);
        if !on {
            self.apply_db_settings();
        }
        on
    }

    /// When a command must wait for the pause (see `ClientPause::holds`).
    pub fn pause_holds(&mut self, now_ms: u64, may_write: bool) -> Option<u64> {
        if !self.paused(now_ms) {
            return None;
        }
        self.client_pause.holds(now_ms, may_write)
    }

    /// `key` was modified (Redis's signalModifiedKey): its WATCHers' transactions
    /// fail and the clients tracking it get an invalidation. Every write hook goes
    /// through here (or through `signal_fields` where `dbs` is borrowed).
    #[inline]
    pub fn signal_modified(&mut self, db: usize, key: &[u8]) {
        signal_fields(&mut self.watches, &mut self.tracking, db, key);
    }

    /// Keys that reads found expired (and removed) while clients track keys: their
    /// invalidations, as Redis's lazy expiry signals them.
    #[cold]
    pub fn drain_lazy_expired(&mut self) {
        for i in 0..self.dbs.len() {
            if self.dbs[i].tracking_expired.is_empty() {
                continue;
            }
            let keys = std::mem::take(&mut self.dbs[i].tracking_expired);
            if self.tracking.active() {
                for k in &keys {
                    self.tracking.invalidate_by(k, crate::tracking::EXPIRY);
                }
            }
        }
    }

    /// Whether writes need no per-key signal at all (no WATCH, no blocked client,
    /// no tracking): the write path's one check.
    #[inline]
    pub fn write_hooks_idle(&self) -> bool {
        // `&`, not `&&`: three loads and one branch on the write path.
        self.watches.is_empty() & self.blocked.is_empty() & !self.tracking.active()
    }
}

/// `ShardData::signal_modified` on the two fields, for callers that hold `dbs`.
#[inline]
pub fn signal_fields(
    watches: &mut watch::Watches,
    tracking: &mut crate::tracking::TrackingTable,
    db: usize,
    key: &[u8],
) {
    watches.touch(db, key);
    if tracking.active() {
        tracking.invalidate(key);
    }
}

pub struct ShardCell {
    pub id: usize,
    pub slots: SlotTable,
    pub data: RefCell<ShardData>,
    pub locks: RefCell<KeyLocks>,
    pub mesh: MeshSenders<Job>,
    pub clients: RefCell<ClientRegistry>,
    pub info: Arc<ServerInfo>,
    /// Pipeline batches for other shards, sent once per round (`hops`).
    pub outbox: hops::ShardOutbox,
    /// In cluster mode, this shard's copy of the node's routing table.
    pub routes: RefCell<crate::cluster::service::RoutesCopy>,
    txn_counter: Cell<u64>,
}

/// Process-wide source of client ids: Redis's are increasing integers.
static NEXT_CLIENT_ID: AtomicU64 = AtomicU64::new(1);

pub fn next_client_id() -> u64 {
    NEXT_CLIENT_ID.fetch_add(1, Ordering::Relaxed)
}

impl ShardCell {
    pub fn shard_count(&self) -> usize {
        self.slots.shards()
    }

    /// A process-unique id for a multi-shard operation started here.
    pub fn next_txn_id(&self) -> TxnId {
        let n = self.txn_counter.get() + 1;
        self.txn_counter.set(n);
        (n << 16) | self.id as u64
    }

    #[inline]
    pub fn shard_of(&self, key: &[u8]) -> usize {
        self.slots.shard_of_key(key)
    }
}

pub fn new_shard_data(
    id: usize,
    slots: &SlotTable,
    config: Config,
    hasher: DefaultHashBuilder,
) -> ShardData {
    let range = slots.range(id);
    let dbs = (0..config.databases())
        .map(|i| Db::new(range.start, range.len(), hasher).with_index(i))
        .collect();
    let max_tracked = config.tracking_table_max_keys();
    let mut data = ShardData {
        id,
        dbs,
        routes: Default::default(),
        loading_dbs: Vec::new(),
        mem: crate::storage::evict::MemState::from_config(&config, slots.shards()),
        lazy: Default::default(),
        limits: crate::storage::limits::EncodingLimits::from_config(&config),
        observe: crate::observe::Observer::new(&config),
        config,
        stats: ShardStats::default(),
        rng: Rng::new(
            0x9E37_79B9_7F4A_7C15
                ^ ((id as u64 + 1) * 0x2545_F491_4F6C_DD1D)
                ^ crate::util::now_ms(),
        ),
        active_expire: true,
        no_touch_clients: Default::default(),
        client_pause: Default::default(),
        watches: watch::Watches::default(),
        tracking: Default::default(),
        blocked: blocking::Blocked::default(),
        dirty: 0,
    };
    data.tracking.set_max_keys(max_tracked);
    data.apply_db_settings();
    data
}

pub fn new_cell(
    id: usize,
    slots: SlotTable,
    data: ShardData,
    mesh: MeshSenders<Job>,
    info: Arc<ServerInfo>,
) -> Rc<ShardCell> {
    Rc::new(ShardCell {
        id,
        slots,
        data: RefCell::new(data),
        locks: RefCell::new(KeyLocks::default()),
        mesh,
        clients: RefCell::new(ClientRegistry::default()),
        info,
        outbox: hops::ShardOutbox::default(),
        routes: RefCell::default(),
        txn_counter: Cell::new(0),
    })
}

/// Redis's active expiry, per shard: `hz` times a second, sample 20 keys with a TTL per
/// database and delete the expired ones; repeat while more than 25% of a sample had
/// expired, within a time budget so a burst of expiries never stalls the shard.
pub async fn run_active_expiry(cell: Rc<ShardCell>) {
    const SAMPLES: usize = 20;
    // Redis's HFE_DB_BASE_ACTIVE_EXPIRE_FIELDS_PER_SEC.
    const FIELDS_PER_SECOND: usize = 10_000;
    loop {
        let hz = cell.data.borrow().config.hz().clamp(1, 500);
        runtime::sleep(Duration::from_millis(1000 / hz as u64)).await;
        // 25% of the cycle's period, as Redis's slow cycle allows.
        let budget = Duration::from_micros(250_000 / hz as u64);
        let start = std::time::Instant::now();
        loop {
            let mut more = false;
            let step_start = std::time::Instant::now();
            {
                let mut data = cell.data.borrow_mut();
                // Keys found expired outside commands (SCAN, RANDOMKEY ...) are
                // propagated and invalidated now.
                exec::after_deletions(&mut data, None);
                let now = crate::util::now_ms();
                // A client pause keeps the dataset still: nothing expires meanwhile.
                // A replica's keys go with its master's DELs.
                if !cell.locks.borrow().is_idle() || data.paused(now) {
                    break;
                }
                if crate::storage::entry::replica_holds_expired() {
                    // A replica's keys go with its master's DELs, but those its own
                    // clients gave a TTL (a writable replica) it expires itself.
                    for db in data.dbs.iter_mut() {
                        db.expire_replica_local(now);
                    }
                    break;
                }
                if !data.active_expire {
                    break;
                }
                let data = &mut *data;
                // Expiry is the server's write, never a client's (NOLOOP).
                data.tracking.writer = 0;
                let lazy = data.mem.lazy_expire;
                for (i, db) in data.dbs.iter_mut().enumerate() {
                    // Hash fields first, as Redis interleaves them before the keys:
                    // up to 10000 a second per database, more steps while that is
                    // not enough (within the same time budget).
                    let field_budget = (FIELDS_PER_SECOND / hz as usize).max(1);
                    let fields = db.expire_fields_some(now, field_budget, |key| {
                        signal_fields(&mut data.watches, &mut data.tracking, i, key);
                    });
                    more |= fields == field_budget;
                    for _ in 0..16 {
                        // Expiry is a write: WATCHers of the key must fail (Redis's
                        // signalModifiedKey), and big values may go to lazy free.
                        let st = db.expire_some_with(now, SAMPLES, |e| {
                            signal_fields(&mut data.watches, &mut data.tracking, i, e.key());
                            if lazy {
                                let charge = e.charge();
                                data.lazy.free(e.into_value(), charge);
                            }
                        });
                        if st.sampled == 0 || st.expired * 4 <= st.sampled {
                            break;
                        }
                        more = true;
                    }
                }
                exec::after_deletions(data, None);
                if data.tracking.has_pending() {
                    data.tracking.flush_bcast();
                }
                // The latency monitor's "expire-cycle" event: one uninterrupted step.
                let ms = step_start.elapsed().as_millis() as u64;
                data.observe.add_event_if_needed("expire-cycle", ms);
            }
            if !more || start.elapsed() >= budget {
                break;
            }
            runtime::yield_now().await;
        }
    }
}
