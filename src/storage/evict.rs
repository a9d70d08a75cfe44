//! maxmemory on a shard: Redis's eight policies with its approximate LRU/LFU/TTL
//! eviction pool, and lazy free (big values dropped in slices by a background task).
//!
//! `maxmemory` is split evenly: each shard keeps `dataset + overhead share` (see
//! `memory`) under `maxmemory / shards`, so no shard ever asks another for room.
//! Before each command on a shard one comparison (`limit != 0`) guards the slow path;
//! over the limit, keys are evicted for a bounded time (maxmemory-eviction-tenacity)
//! and the shard's memory task carries on in the background if that was not enough,
//! so a shard never stalls on a big eviction.

use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::keyspace::{value_elements, Detached, NO_EXPIRE};
use super::memory::{self, LAZYFREED, LAZYFREE_PENDING, LAZYFREE_PENDING_BYTES};
use super::value::Value;
use crate::config::{Config, MaxmemoryPolicy};
use crate::shard::{ShardCell, ShardData};

/// Redis's EVPOOL_SIZE.
const POOL_SIZE: usize = 16;
/// Values with more elements than this are freed by the lazy-free task (Redis's
/// LAZYFREE_THRESHOLD).
pub const LAZYFREE_THRESHOLD: usize = 64;
/// Elements freed per lazy-free slice before yielding to the shard's other work.
const LAZYFREE_SLICE: usize = 1000;
/// How long a shard that found the other shards with nothing to evict refuses
/// DENYOOM commands on its own before asking them again (a memory task's period).
const PEERS_DRY_PAUSE: Duration = Duration::from_millis(10);

/// The maxmemory settings a shard consults on the hot path, refreshed on CONFIG SET.
#[derive(Debug, Clone)]
pub struct MemState {
    /// This shard's part of maxmemory (0 = no limit).
    pub limit: u64,
    pub policy: MaxmemoryPolicy,
    pub samples: usize,
    pub tenacity: u64,
    /// (lfu-log-factor, lfu-decay-time) when an LFU policy is set.
    pub lfu: Option<(u64, u64)>,
    pub lazy_eviction: bool,
    pub lazy_expire: bool,
    pub lazy_user_del: bool,
    pub lazy_server_del: bool,
    pub lazy_user_flush: bool,
    /// Keys evicted here (INFO stats evicted_keys).
    pub evicted_keys: u64,
    /// Microseconds spent evicting (INFO stats total_eviction_exceeded_time is close).
    pub eviction_us: u64,
    pool: Vec<Candidate>,
    shards: u64,
    /// Until when asking other shards to evict is pointless: the last ask freed
    /// nothing (saves a round trip per command while the server is stuck over).
    peers_dry_until: Option<Instant>,
}

#[derive(Debug, Clone)]
struct Candidate {
    /// Higher is evicted first: idle seconds, 255 - LFU counter, or time to deadline
    /// inverted.
    score: u64,
    db: usize,
    key: Vec<u8>,
}

/// What the pre-command memory check decided (`ShardData::oom_check`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OomCheck {
    Run,
    /// A DENYOOM command over the limit with nothing to evict: -OOM.
    Refuse,
    /// Over the limit by this many bytes server-wide, with nothing to evict here: the
    /// other shards should evict, then the command is checked again without asking.
    AskPeers(u64),
}

/// Outcome of an eviction attempt, as Redis's performEvictions reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evict {
    /// Under the limit (now or already).
    Ok,
    /// Still over, but keys are going (time budget spent, or lazy frees pending).
    Running,
    /// Over, and nothing can be evicted: DENYOOM commands are refused.
    Fail,
}

impl MemState {
    pub fn from_config(c: &Config, shards: usize) -> MemState {
        let mut m = MemState {
            limit: 0,
            policy: MaxmemoryPolicy::NoEviction,
            samples: 5,
            tenacity: 10,
            lfu: None,
            lazy_eviction: false,
            lazy_expire: false,
            lazy_user_del: false,
            lazy_server_del: false,
            lazy_user_flush: false,
            evicted_keys: 0,
            eviction_us: 0,
            pool: Vec::with_capacity(POOL_SIZE + 1),
            shards: shards.max(1) as u64,
            peers_dry_until: None,
        };
        m.refresh(c);
        m
    }

    pub fn refresh(&mut self, c: &Config) {
        let max = c.maxmemory();
        self.limit = if max == 0 {
            0
        } else {
            (max / self.shards).max(1)
        };
        if c.maxmemory_policy() != self.policy {
            self.pool.clear();
        }
        self.policy = c.maxmemory_policy();
        self.samples = c.maxmemory_samples().max(1);
        self.tenacity = c.int_param("maxmemory-eviction-tenacity").unwrap_or(10) as u64;
        self.lfu = matches!(
            self.policy,
            MaxmemoryPolicy::AllkeysLfu | MaxmemoryPolicy::VolatileLfu
        )
        .then(|| (c.lfu_log_factor(), c.lfu_decay_time()));
        let b = |n: &str| c.bool_param(n).unwrap_or(false);
        self.lazy_eviction = b("lazyfree-lazy-eviction");
        self.lazy_expire = b("lazyfree-lazy-expire");
        self.lazy_user_del = b("lazyfree-lazy-user-del");
        self.lazy_server_del = b("lazyfree-lazy-server-del");
        self.lazy_user_flush = b("lazyfree-lazy-user-flush");
        self.peers_dry_until = None;
    }

    fn peers_dry(&self) -> bool {
        self.peers_dry_until.is_some_and(|t| Instant::now() < t)
    }

    /// Records what asking the other shards to evict freed.
    pub fn peers_answered(&mut self, freed: u64) {
        self.peers_dry_until = (freed == 0).then(|| Instant::now() + PEERS_DRY_PAUSE);
    }

    /// CONFIG RESETSTAT.
    pub fn reset_stats(&mut self) {
        self.evicted_keys = 0;
        self.eviction_us = 0;
        LAZYFREED.store(0, Relaxed);
    }

    /// Redis's evictionTimeLimitUs: 50 µs per tenacity point up to 10, then growing
    /// 15% a point; 100 means no limit.
    fn time_limit(&self) -> Option<Duration> {
        match self.tenacity {
            100.. => None,
            t @ 0..=10 => Some(Duration::from_micros(50 * t.max(1))),
            t => Some(Duration::from_micros(
                (500.0 * 1.15f64.powi((t - 10) as i32)) as u64,
            )),
        }
    }
}

/// Values and flushed databases waiting for the shard's lazy-free task.
#[derive(Default)]
pub struct LazyFree {
    values: VecDeque<(Value, usize)>,
    tables: VecDeque<Detached>,
}

impl LazyFree {
    pub fn is_empty(&self) -> bool {
        self.values.is_empty() && self.tables.is_empty()
    }

    /// Frees `value` now if it is small, else queues it for the background task.
    pub fn free(&mut self, value: Value, charge: usize) {
        if value_elements(&value) <= LAZYFREE_THRESHOLD {
            return;
        }
        LAZYFREE_PENDING.fetch_add(1, Relaxed);
        LAZYFREE_PENDING_BYTES.fetch_add(charge as u64, Relaxed);
        self.values.push_back((value, charge));
    }

    /// Queues a value already counted as pending (a replaced one, see
    /// `Db::overwritten`).
    fn adopt(&mut self, value: Value, charge: usize) {
        self.values.push_back((value, charge));
    }

    /// Queues a flushed database's tables.
    pub fn free_tables(&mut self, d: Detached) {
        if d.is_empty() {
            return;
        }
        LAZYFREE_PENDING.fetch_add(d.keys as u64, Relaxed);
        LAZYFREE_PENDING_BYTES.fetch_add(d.bytes as u64, Relaxed);
        self.tables.push_back(d);
    }

    /// One bounded slice of freeing. True if work remains.
    pub fn step(&mut self) -> bool {
        if let Some((v, charge)) = self.values.front_mut() {
            if super::keyspace::shed_value(v, LAZYFREE_SLICE) {
                let charge = *charge;
                self.values.pop_front();
                LAZYFREE_PENDING.fetch_sub(1, Relaxed);
                LAZYFREE_PENDING_BYTES.fetch_sub(charge as u64, Relaxed);
                LAZYFREED.fetch_add(1, Relaxed);
            }
        } else if let Some(d) = self.tables.front_mut() {
            let (bytes, keys) = (d.bytes, d.keys);
            let released = d.free_some(LAZYFREE_SLICE, LAZYFREE_THRESHOLD);
            let done = d.is_empty();
            let (freed_bytes, freed_keys) = if done {
                (bytes, keys)
            } else {
                (bytes - d.bytes, keys - d.keys)
            };
            LAZYFREE_PENDING_BYTES.fetch_sub(freed_bytes as u64, Relaxed);
            LAZYFREE_PENDING.fetch_sub(freed_keys as u64, Relaxed);
            LAZYFREED.fetch_add(released as u64, Relaxed);
            if done {
                self.tables.pop_front();
            }
        }
        !self.is_empty()
    }
}

impl ShardData {
    /// Bytes this shard holds as maxmemory sees them: its keys plus its share of the
    /// process overhead.
    pub fn mem_used(&self) -> u64 {
        let data: usize = self.dbs.iter().map(|d| d.used_bytes()).sum();
        data as u64 + memory::overhead_share()
    }

    /// Hands the values writes replaced under lazyfree-lazy-server-del to the
    /// lazy-free task.
    pub fn adopt_overwritten(&mut self) {
        for db in &mut self.dbs {
            for (value, charge) in db.overwritten.drain(..) {
                self.lazy.adopt(value, charge);
            }
        }
    }

    /// After a write, with a limit set: the other shards judge the server's total
    /// from what this one published, so it publishes at once (a stale figure makes
    /// them count a big write twice, once in it and once in the overhead).
    #[inline]
    pub fn publish_if_limited(&self) {
        if self.mem.limit != 0 {
            memory::publish_dataset(self.id, self.dataset_bytes());
        }
    }

    pub fn dataset_bytes(&self) -> u64 {
        self.dbs.iter().map(|d| d.used_bytes() as u64).sum()
    }

    /// Called before a command runs when maxmemory is set: evicts if over the limit
    /// and says whether a DENYOOM command must be refused. `may_evict` is false while
    /// a multi-shard operation holds keys here (their owner must not see them vanish).
    /// For callers that cannot wait for other shards (scripts, EXEC's checks).
    pub fn oom_refuses(&mut self, denyoom: bool, may_evict: bool) -> bool {
        self.oom_check(denyoom, may_evict, false) == OomCheck::Refuse
    }

    /// The pre-command memory check. maxmemory is the server's: a shard judges itself
    /// against its share (`mem.limit`) and evicts its own keys first; when it has
    /// nothing it may evict (a volatile policy and no TTLs here), it may still use what
    /// the other shards leave free, and if the server as a whole is over the limit,
    /// the others evict for it (`AskPeers`, only when `may_ask`: the caller can wait
    /// for them, so that their evictions, with their invalidations, come first, as
    /// Redis evicts before running the command).
    pub fn oom_check(&mut self, denyoom: bool, may_evict: bool, may_ask: bool) -> OomCheck {
        if self.mem.limit == 0 || self.mem_used() <= self.mem.limit {
            return OomCheck::Run;
        }
        let noeviction = self.mem.policy == MaxmemoryPolicy::NoEviction;
        // Under noeviction nothing is evicted, so locks held here do not matter.
        if !may_evict && !noeviction {
            return OomCheck::Run;
        }
        if self.perform_evictions(self.mem.time_limit()) != Evict::Fail {
            return OomCheck::Run;
        }
        let excess = self.global_excess();
        if excess == 0 {
            return OomCheck::Run;
        }
        if may_ask && !noeviction && self.mem.shards > 1 && !self.mem.peers_dry() {
            return OomCheck::AskPeers(excess);
        }
        if denyoom {
            OomCheck::Refuse
        } else {
            OomCheck::Run
        }
    }

    /// Bytes by which the whole server is over maxmemory: this shard's exact figure
    /// plus what the others last published, each with its share of the overhead.
    fn global_excess(&self) -> u64 {
        let others = memory::dataset_total().saturating_sub(memory::dataset_of(self.id));
        let n = self.mem.shards;
        let used = self.dataset_bytes() + others + memory::overhead_share() * n;
        used.saturating_sub(self.mem.limit * n)
    }

    /// Evicts on behalf of another shard that is over its share with nothing it may
    /// evict: keys of this shard go, under the policy, even below this shard's own
    /// share, until `bytes` are freed, nothing is left to evict, or the eviction time
    /// budget is spent. Returns the bytes freed.
    pub fn evict_for_peer(&mut self, bytes: u64, may_evict: bool) -> u64 {
        if self.mem.limit == 0
            || !may_evict
            || self.mem.policy == MaxmemoryPolicy::NoEviction
            || self.paused(crate::util::now_ms())
        {
            return 0;
        }
        let before = self.dataset_bytes();
        self.evict_until(self.mem.time_limit(), |s| {
            before.saturating_sub(s.dataset_bytes()) >= bytes
        });
        before.saturating_sub(self.dataset_bytes())
    }

    /// Redis's performEvictions: evict until under the limit or the time budget runs
    /// out (`None`: no budget).
    pub fn perform_evictions(&mut self, budget: Option<Duration>) -> Evict {
        if self.mem.limit == 0 || self.mem_used() <= self.mem.limit {
            return Evict::Ok;
        }
        // While clients are paused the dataset holds still (Redis's
        // isSafeToPerformEvictions): as if nothing needed evicting.
        if self.paused(crate::util::now_ms()) {
            return Evict::Ok;
        }
        // Over its share, a shard evicts only while the server as a whole is over:
        // shares are uneven whenever the keys are, and Redis evicts by the total.
        let r = self.evict_until(budget, |s| {
            s.mem_used() <= s.mem.limit || s.global_excess() == 0
        });
        match r {
            // Memory is on its way back: don't refuse writes meanwhile.
            Evict::Fail if LAZYFREE_PENDING.load(Relaxed) > 0 => Evict::Running,
            r => r,
        }
    }

    /// Evicts keys one by one under the policy until `done` holds (Ok), the budget
    /// is spent (Running, checked every 16 keys) or nothing is left to evict (Fail);
    /// then accounts the time and publishes the dataset.
    fn evict_until(&mut self, budget: Option<Duration>, done: impl Fn(&Self) -> bool) -> Evict {
        let start = Instant::now();
        let mut n = 0u32;
        let result = loop {
            if done(self) {
                break Evict::Ok;
            }
            if !self.evict_one() {
                break Evict::Fail;
            }
            n += 1;
            if n.is_multiple_of(16) && budget.is_some_and(|b| start.elapsed() >= b) {
                break Evict::Running;
            }
        };
        self.mem.eviction_us += start.elapsed().as_micros() as u64;
        memory::publish_dataset(self.id, self.dataset_bytes());
        result
    }

    /// Evicts one key chosen by the policy. False if there is none to evict.
    fn evict_one(&mut self) -> bool {
        use MaxmemoryPolicy::*;
        let victim = match self.mem.policy {
            NoEviction => return false,
            AllkeysRandom | VolatileRandom => self.random_victim(self.mem.policy == VolatileRandom),
            _ => self.pool_victim(),
        };
        let Some((db, key)) = victim else {
            return false;
        };
        let Some(e) = self.dbs[db].remove(&key) else {
            return false;
        };
        // Evictions are the server's: no client's NOLOOP may hide them (the writer
        // left from the shard's last command is not theirs).
        self.tracking.writer = 0;
        self.signal_modified(db, &key);
        self.mem.evicted_keys += 1;
        crate::pubsub::notify(crate::config::notify::EVICTED, "evicted", &key, db);
        if crate::replication::active() {
            // Replicas learn of it as a DEL, like an expired key.
            self.dbs[db].expired_log.push(key.clone());
        }
        if self.mem.lazy_eviction {
            let charge = e.charge();
            self.lazy.free(e.into_value(), charge);
        }
        true
    }

    fn random_victim(&mut self, volatile: bool) -> Option<(usize, Vec<u8>)> {
        let ndb = self.dbs.len();
        let start = self.rng.below(ndb);
        for i in 0..ndb {
            let db = (start + i) % ndb;
            let mut key = None;
            self.dbs[db].sample(&mut self.rng, volatile, 1, |e| key = Some(e.key().to_vec()));
            if let Some(k) = key {
                return Some((db, k));
            }
        }
        None
    }

    /// Redis's evictionPoolPopulate + pick: sample every database, keep the best 16
    /// candidates across calls, evict the best one that still exists.
    fn pool_victim(&mut self) -> Option<(usize, Vec<u8>)> {
        use MaxmemoryPolicy::*;
        let policy = self.mem.policy;
        let volatile = matches!(policy, VolatileLru | VolatileLfu | VolatileTtl);
        let now_s = crate::util::lru_clock();
        let decay = self.mem.lfu.map_or(1, |l| l.1);
        for _attempt in 0..4 {
            for db in 0..self.dbs.len() {
                let pool = &mut self.mem.pool;
                let samples = self.mem.samples;
                self.dbs[db].sample(&mut self.rng, volatile, samples, |e| {
                    let score = match policy {
                        VolatileTtl => u64::MAX - e.expire_at(),
                        AllkeysLfu | VolatileLfu => {
                            255 - memory::lfu_decayed(e.lfu_counter(), e.lru(), now_s, decay) as u64
                        }
                        _ => now_s.wrapping_sub(e.lru()) as u64,
                    };
                    pool_insert(pool, score, db, e.key());
                });
            }
            while let Some(c) = self.mem.pool.pop() {
                let ok = self.dbs[c.db]
                    .peek(&c.key)
                    .is_some_and(|e| !volatile || e.expire_at() != NO_EXPIRE);
                if ok {
                    return Some((c.db, c.key));
                }
            }
            if self.dbs.iter().all(|d| {
                if volatile {
                    d.expires_len() == 0
                } else {
                    d.is_empty()
                }
            }) {
                return None;
            }
        }
        None
    }
}

/// Inserts a candidate keeping the pool sorted by score (best last) and at most
/// POOL_SIZE long; a key already pooled is not added twice.
fn pool_insert(pool: &mut Vec<Candidate>, score: u64, db: usize, key: &[u8]) {
    if pool.len() == POOL_SIZE && pool.first().is_some_and(|c| c.score >= score) {
        return;
    }
    if pool.iter().any(|c| c.db == db && c.key == key) {
        return;
    }
    let at = pool.partition_point(|c| c.score < score);
    pool.insert(
        at,
        Candidate {
            score,
            db,
            key: key.to_vec(),
        },
    );
    if pool.len() > POOL_SIZE {
        pool.remove(0);
    }
}

/// Asks every other shard to evict `bytes` between them for this one (after
/// `OomCheck::AskPeers`) and waits for them: their evictions, and the invalidations
/// they send, come before the command that asked (hence `call_all_in_order`). Each is asked for an even part;
/// whatever falls short is asked for again by the next command.
pub async fn evict_on_peers(cell: &Rc<ShardCell>, bytes: u64) {
    let n = cell.shard_count();
    let part = bytes.div_ceil(n.saturating_sub(1).max(1) as u64);
    let asker = cell.id;
    let freed: u64 = cell
        .call_all_in_order(move |c| {
            if c.id == asker {
                return 0;
            }
            let idle = c.locks.borrow().is_idle();
            c.data.borrow_mut().evict_for_peer(part, idle)
        })
        .await
        .into_iter()
        .sum();
    cell.data.borrow_mut().mem.peers_answered(freed);
}

/// The shard's memory task: refreshes the accounting, carries on evicting while the
/// shard is over its limit and frees lazily deleted values, each in small slices
/// with a yield between them so clients of the shard keep being served.
pub async fn run_memory_task(cell: Rc<ShardCell>) {
    let mut last_refresh = Instant::now() - Duration::from_secs(1);
    loop {
        let (busy, period) = {
            let mut d = cell.data.borrow_mut();
            let period = Duration::from_millis(1000 / d.config.hz().clamp(1, 500) as u64);
            if last_refresh.elapsed() >= period.min(Duration::from_millis(10)) {
                last_refresh = Instant::now();
                memory::publish_dataset(d.id, d.dataset_bytes());
                memory::refresh_overhead();
            }
            d.adopt_overwritten();
            let lazy_more = d.lazy.step();
            let idle = cell.locks.borrow().is_idle();
            let evicting =
                idle && d.perform_evictions(Some(Duration::from_micros(500))) == Evict::Running;
            (lazy_more || evicting, period)
        };
        if busy {
            crate::runtime::yield_now().await;
        } else {
            let limit = cell.data.borrow().mem.limit;
            // With a limit, react quickly to shards filling up between commands.
            let pause = if limit > 0 {
                Duration::from_millis(10)
            } else {
                period
            };
            crate::runtime::sleep(pause).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_keeps_the_best() {
        let mut pool = Vec::new();
        for i in 0..100u64 {
            pool_insert(&mut pool, (i * 37) % 101, 0, format!("k{i}").as_bytes());
        }
        assert_eq!(pool.len(), POOL_SIZE);
        assert!(pool.windows(2).all(|w| w[0].score <= w[1].score));
        assert_eq!(pool.last().map(|c| c.score), Some(100));
    }
}
