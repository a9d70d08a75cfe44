//! `MultiShardOp`: the coordinator side of a multi-shard operation whose steps depend
//! on each other (MSETNX checks before it writes, RENAME moves a value between shards,
//! FLUSHALL clears every shard). It takes the locks on each shard in ascending shard
//! order, runs closures on the owning shards while holding them, and releases them.

use std::collections::BTreeMap;
use std::rc::Rc;

use super::exec::{Wake, Written};
use super::locks::{self, LockOwner, LockSet, TxnId};
use super::{ShardCell, ShardData};
use crate::storage::{StrValue, Value, NO_EXPIRE};

/// Runs one step of operation `txn` on a shard's data. Afterwards the keys the step
/// found expired are propagated (their DELs go before the operation's own effect,
/// which its coordinator propagates at the end, and into its transaction's block when
/// it has one) and invalidated for tracking.
fn step<R>(cell: &ShardCell, txn: TxnId, f: impl FnOnce(&mut ShardData) -> R) -> R {
    let d = &mut cell.data.borrow_mut();
    let r = f(d);
    super::exec::after_deletions(d, Some(txn));
    r
}

/// A key and its string value.
type KeyValue = (Vec<u8>, Vec<u8>);

/// A key's value as `MultiShardOp::take` removed it, with what moves along with it.
pub struct Taken {
    pub value: Value,
    pub expire_at: u64,
    pub lru: u32,
    pub freq: u8,
}

pub struct MultiShardOp {
    txn: TxnId,
    write: bool,
    /// `LockOwner::client`: whose writes the release signals.
    client: u64,
    shards: Vec<usize>,
    /// The keys locked on each shard of `shards` (empty for whole-shard locks).
    keys: Vec<Vec<(u8, Vec<u8>)>>,
    /// What the operation adds to the change counter in all, when it says so
    /// (`count_dirty`); None: one per key written, on each key's shard.
    dirty: Option<u64>,
}

impl MultiShardOp {
    /// Locks `keys` of `db`, shard by shard in ascending order, for `owner` (from
    /// `GlobalCtx::owner`: inside EXEC, the transaction's own owner).
    pub async fn lock_keys(
        owner: LockOwner,
        cell: &Rc<ShardCell>,
        db: usize,
        keys: &[Vec<u8>],
    ) -> MultiShardOp {
        let mut by_shard: BTreeMap<usize, Vec<(u8, Vec<u8>)>> = BTreeMap::new();
        for k in keys {
            by_shard
                .entry(cell.shard_of(k))
                .or_default()
                .push((db as u8, k.clone()));
        }
        let sets = by_shard
            .into_iter()
            .map(|(s, ks)| (s, LockSet::Keys(ks)))
            .collect();
        Self::lock(owner, cell, sets).await
    }

    /// Locks keys in several databases (MOVE, COPY ... DB): (db, key) pairs.
    pub async fn lock_db_keys(
        owner: LockOwner,
        cell: &Rc<ShardCell>,
        keys: &[(usize, Vec<u8>)],
    ) -> MultiShardOp {
        let mut by_shard: BTreeMap<usize, Vec<(u8, Vec<u8>)>> = BTreeMap::new();
        for (db, k) in keys {
            by_shard
                .entry(cell.shard_of(k))
                .or_default()
                .push((*db as u8, k.clone()));
        }
        let sets = by_shard
            .into_iter()
            .map(|(s, ks)| (s, LockSet::Keys(ks)))
            .collect();
        Self::lock(owner, cell, sets).await
    }

    /// Locks every shard whole (FLUSHALL, SWAPDB, a consistent DBSIZE or KEYS).
    pub async fn lock_all(owner: LockOwner, cell: &Rc<ShardCell>) -> MultiShardOp {
        let sets = (0..cell.shard_count())
            .map(|s| (s, LockSet::Whole))
            .collect();
        Self::lock(owner, cell, sets).await
    }

    async fn lock(
        owner: LockOwner,
        cell: &Rc<ShardCell>,
        sets: Vec<(usize, LockSet)>,
    ) -> MultiShardOp {
        let txn = owner.id;
        let mut shards = Vec::with_capacity(sets.len());
        let mut keys = Vec::with_capacity(sets.len());
        for (s, set) in sets {
            keys.push(match &set {
                LockSet::Keys(k) => k.clone(),
                LockSet::Ids(_) | LockSet::Whole => Vec::new(),
            });
            cell.call_async(s, move |c| {
                Box::pin(async move { locks::acquire(&c.locks, set, txn).await })
            })
            .await;
            shards.push(s);
        }
        MultiShardOp {
            txn,
            write: owner.write,
            client: owner.client,
            shards,
            keys,
            dirty: None,
        }
    }

    /// The operation turned out not to write (a blocking pop that found nothing):
    /// its release then wakes nobody.
    pub fn set_read_only(&mut self) {
        self.write = false;
    }

    /// Of the keys it locked, the operation changed only `written` ((db, key) pairs):
    /// its release signals and counts only those, as Redis signals only the keys a
    /// write changed (a STORE's destination, not its sources).
    pub fn written_only(&mut self, written: &[(usize, &[u8])]) {
        for keys in &mut self.keys {
            keys.retain(|(db, k)| written.iter().any(|(d, w)| *d == *db as usize && *w == k));
        }
    }

    /// The operation adds `n` to the change counter in all, as Redis's server.dirty
    /// counts it (RENAME is one change, though it writes two keys), instead of one per
    /// key written. The count goes to the first shard locked.
    pub fn count_dirty(&mut self, n: u64) {
        self.dirty = Some(n);
    }

    pub fn shards(&self) -> &[usize] {
        &self.shards
    }

    /// Runs `f` on `shard`'s data under this operation's locks.
    pub async fn on<R, F>(&self, cell: &Rc<ShardCell>, shard: usize, f: F) -> R
    where
        R: Send + 'static,
        F: FnOnce(&mut ShardData) -> R + Send + 'static,
    {
        let txn = self.txn;
        cell.call(shard, move |c| step(c, txn, f)).await
    }

    /// Runs `f` on every locked shard, concurrently; results in ascending shard order.
    pub async fn on_each<R, F>(&self, cell: &Rc<ShardCell>, f: F) -> Vec<R>
    where
        R: Send + 'static,
        F: Fn(&mut ShardData) -> R + Send + Clone + 'static,
    {
        let mut waits = Vec::with_capacity(self.shards.len());
        let mut local = None;
        for &s in &self.shards {
            if s == cell.id {
                local = Some(s);
                continue;
            }
            let (tx, rx) = futures_channel::oneshot::channel();
            let g = f.clone();
            let txn = self.txn;
            cell.tell(s, move |c| {
                let _ = tx.send(step(c, txn, g));
            })
            .await;
            waits.push((s, rx));
        }
        let mut out: Vec<(usize, R)> = Vec::with_capacity(self.shards.len());
        if let Some(s) = local {
            out.push((s, step(cell, self.txn, f)));
        }
        for (s, rx) in waits {
            if let Ok(r) = rx.await {
                out.push((s, r));
            }
        }
        out.sort_by_key(|(s, _)| *s);
        out.into_iter().map(|(_, r)| r).collect()
    }

    /// What the operation adds to the change counter when it is released: a write
    /// that changed nothing propagates nothing (see `GlobalCtx::release`).
    pub fn changes(&self) -> u64 {
        match (self.write, self.dirty) {
            (false, _) => 0,
            (true, Some(n)) => n,
            (true, None) => self.keys.iter().map(|k| k.len() as u64).sum(),
        }
    }

    /// Ends the operation: a writing one first invalidates WATCHes on its keys, then
    /// every shard's locks are released. A command's coordinator ends it with
    /// `GlobalCtx::release`, which propagates the command first.
    pub async fn release(self, cell: &Rc<ShardCell>) {
        let (txn, write, client) = (self.txn, self.write, self.client);
        let dirty = self.dirty;
        for (i, (s, keys)) in self.shards.into_iter().zip(self.keys).enumerate() {
            let counted = match dirty {
                Some(n) if i == 0 => n,
                Some(_) => 0,
                None => keys.len() as u64,
            };
            cell.tell(s, move |c| {
                // Locks go first: the clients the signals serve in place need the keys.
                c.locks.borrow_mut().release(txn);
                let mut d = c.data.borrow_mut();
                // The writes are the operation's client's (tracking's NOLOOP),
                // whatever command ran last on this shard. BCAST keys written under
                // the operation (a transaction, a script) go out now, as one message
                // per prefix.
                let keys = keys.iter().map(|(db, k)| (*db as usize, k.as_slice()));
                let written = Written {
                    keys: keys.filter(|_| write),
                    changes: if write { counted } else { 0 },
                    client,
                    wake: Wake::Serve,
                };
                super::exec::after_write(&c.locks, &mut d, written);
            })
            .await;
        }
    }

    /// How many of `keys` exist (counting repeats, as EXISTS does).
    pub async fn count_existing(&self, cell: &Rc<ShardCell>, db: usize, keys: &[Vec<u8>]) -> usize {
        let mut n = 0;
        for k in keys {
            let k2 = k.clone();
            let s = cell.shard_of(k);
            if self
                .on(cell, s, move |d| {
                    d.dbs[db].contains(&k2, crate::util::now_ms())
                })
                .await
            {
                n += 1;
            }
        }
        n
    }

    /// Stores plain strings (MSETNX's write), clearing any TTL.
    pub async fn write_strings(
        &self,
        cell: &Rc<ShardCell>,
        db: usize,
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
    ) {
        let mut by_shard: BTreeMap<usize, Vec<KeyValue>> = BTreeMap::new();
        for p in pairs {
            by_shard.entry(cell.shard_of(&p.0)).or_default().push(p);
        }
        for (s, ps) in by_shard {
            self.on(cell, s, move |d| {
                let lru = crate::util::lru_clock();
                for (k, v) in ps {
                    d.dbs[db].insert(&k, Value::Str(StrValue::from_vec(v)), NO_EXPIRE, lru);
                    crate::pubsub::notify(crate::config::notify::STRING, "set", &k, db);
                }
            })
            .await;
        }
    }

    /// Reads string values: Ok(None) if missing, Err(()) if another type.
    pub async fn read_strings(
        &self,
        cell: &Rc<ShardCell>,
        db: usize,
        keys: &[Vec<u8>],
    ) -> Vec<Result<Option<Vec<u8>>, ()>> {
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            let k2 = k.clone();
            let s = cell.shard_of(k);
            out.push(
                self.on(cell, s, move |d| {
                    match d.dbs[db].get(&k2, crate::util::now_ms()) {
                        None => Ok(None),
                        Some(e) => match e.value() {
                            Value::Str(v) => Ok(Some(v.to_vec())),
                            _ => Err(()),
                        },
                    }
                })
                .await,
            );
        }
        out
    }

    /// Removes a key and returns its value and deadline (RENAME / MOVE's source side).
    pub async fn take(&self, cell: &Rc<ShardCell>, db: usize, key: &[u8]) -> Option<Taken> {
        let k = key.to_vec();
        let s = cell.shard_of(key);
        self.on(cell, s, move |d| {
            let now = crate::util::now_ms();
            d.dbs[db].get(&k, now)?;
            d.dbs[db].remove(&k).map(|e| Taken {
                expire_at: e.expire_at(),
                lru: e.lru(),
                freq: e.lfu_counter(),
                value: e.into_value(),
            })
        })
        .await
    }

    /// Stores a value `take` removed (RENAME across shards): as Redis moves the object
    /// itself, its deadline, access clock and LFU counter come along.
    pub async fn put_taken(&self, cell: &Rc<ShardCell>, db: usize, key: &[u8], t: Taken) {
        let k = key.to_vec();
        let s = cell.shard_of(key);
        self.on(cell, s, move |d| {
            d.dbs[db].insert_with_access(&k, t.value, t.expire_at, t.lru, t.freq);
        })
        .await
    }

    /// Copies a key's value and deadline without removing it (COPY's source side).
    pub async fn peek_clone(
        &self,
        cell: &Rc<ShardCell>,
        db: usize,
        key: &[u8],
    ) -> Option<(Value, u64)> {
        let k = key.to_vec();
        let s = cell.shard_of(key);
        self.on(cell, s, move |d| {
            let now = crate::util::now_ms();
            d.dbs[db]
                .get(&k, now)
                .map(|e| (e.value().clone(), e.expire_at()))
        })
        .await
    }

    pub async fn exists(&self, cell: &Rc<ShardCell>, db: usize, key: &[u8]) -> bool {
        let k = key.to_vec();
        let s = cell.shard_of(key);
        self.on(cell, s, move |d| {
            d.dbs[db].contains(&k, crate::util::now_ms())
        })
        .await
    }

    /// Stores a value with a deadline, replacing what was there.
    pub async fn put(
        &self,
        cell: &Rc<ShardCell>,
        db: usize,
        key: &[u8],
        value: Value,
        expire_at: u64,
    ) {
        let k = key.to_vec();
        let s = cell.shard_of(key);
        self.on(cell, s, move |d| {
            d.dbs[db].insert(&k, value, expire_at, crate::util::lru_clock());
        })
        .await
    }
}
