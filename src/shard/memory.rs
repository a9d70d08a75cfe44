//! maxmemory as a shard lives it (the policies and the eviction pool are storage's,
//! in storage/evict.rs): the check before each command, evictions with what they
//! entail above storage (keyspace event, tracking invalidation, the replicas' DEL),
//! evictions asked of the other shards, and the background memory task.

use std::rc::Rc;
use std::time::{Duration, Instant};

use super::{ShardCell, ShardData};
use crate::config::MaxmemoryPolicy;
use crate::storage::evict::{self, Evict, OomCheck};
use crate::storage::memory::{self, LAZYFREE_PENDING};
use std::sync::atomic::Ordering::Relaxed;

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
        // While the dataset loads (only the AOF's commands run then) nothing is
        // evicted or refused: Redis's isSafeToPerformEvictions.
        if crate::storage::entry::expiry_paused() {
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
        let Some((db, key)) = evict::pick_victim(&mut self.mem, &self.dbs, &mut self.rng) else {
            return false;
        };
        let Some(e) = self.dbs[db].remove(&key) else {
            return false;
        };
        super::exec::after_server_delete(self, db, &key);
        self.mem.evicted_keys += 1;
        crate::pubsub::notify(crate::config::notify::EVICTED, "evicted", &key, db);
        if crate::effects::active() {
            // Replicas learn of it where it happens, as a DEL, or an UNLINK under
            // lazyfree-lazy-eviction (Redis's propagateDeletion).
            let del: &[u8] = if self.mem.lazy_eviction {
                b"UNLINK"
            } else {
                b"DEL"
            };
            crate::effects::propagate(None, db, vec![del.to_vec(), key.clone()]);
        }
        if self.mem.lazy_eviction {
            let charge = e.charge();
            self.lazy.free(e.into_value(), charge);
        }
        true
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
