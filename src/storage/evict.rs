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
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::keyspace::{value_elements, Detached, NO_EXPIRE};
use super::memory::{self, LAZYFREED, LAZYFREE_PENDING, LAZYFREE_PENDING_BYTES};
use super::value::Value;
use super::{Db, Rng};
use crate::config::{Config, MaxmemoryPolicy};

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
    /// How many shards split maxmemory.
    pub shards: u64,
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

    pub fn peers_dry(&self) -> bool {
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
    pub fn time_limit(&self) -> Option<Duration> {
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
    pub fn adopt(&mut self, value: Value, charge: usize) {
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

/// The key the policy evicts next, if there is one: Redis's random pick, or its
/// eviction pool (approximate LRU / LFU / TTL) refilled from samples of every database.
pub fn pick_victim(mem: &mut MemState, dbs: &[Db], rng: &mut Rng) -> Option<(usize, Vec<u8>)> {
    use MaxmemoryPolicy::*;
    match mem.policy {
        NoEviction => None,
        AllkeysRandom | VolatileRandom => random_victim(dbs, rng, mem.policy == VolatileRandom),
        _ => pool_victim(mem, dbs, rng),
    }
}

fn random_victim(dbs: &[Db], rng: &mut Rng, volatile: bool) -> Option<(usize, Vec<u8>)> {
    let ndb = dbs.len();
    let start = rng.below(ndb);
    for i in 0..ndb {
        let db = (start + i) % ndb;
        let mut key = None;
        dbs[db].sample(rng, volatile, 1, |e| key = Some(e.key().to_vec()));
        if let Some(k) = key {
            return Some((db, k));
        }
    }
    None
}

/// Redis's evictionPoolPopulate + pick: sample every database, keep the best 16
/// candidates across calls, evict the best one that still exists.
fn pool_victim(mem: &mut MemState, dbs: &[Db], rng: &mut Rng) -> Option<(usize, Vec<u8>)> {
    use MaxmemoryPolicy::*;
    let policy = mem.policy;
    let volatile = matches!(policy, VolatileLru | VolatileLfu | VolatileTtl);
    let now_s = crate::util::lru_clock();
    let decay = mem.lfu.map_or(1, |l| l.1);
    for _attempt in 0..4 {
        for (db, keys) in dbs.iter().enumerate() {
            let pool = &mut mem.pool;
            let samples = mem.samples;
            keys.sample(rng, volatile, samples, |e| {
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
        while let Some(c) = mem.pool.pop() {
            let ok = dbs[c.db]
                .peek(&c.key)
                .is_some_and(|e| !volatile || e.expire_at() != NO_EXPIRE);
            if ok {
                return Some((c.db, c.key));
            }
        }
        if dbs.iter().all(|d| {
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
