//! Key-level locks for multi-shard operations (DESIGN.md §4).
//!
//! A multi-shard operation takes locks on every shard it touches, one shard at a time
//! in ascending shard order — a total order, so no two operations can wait on each
//! other in a cycle — executes its part on each shard as soon as that shard's locks are
//! held (strict two-phase locking: nothing it wrote is visible until it releases), and
//! releases everything at the end. A plain single-shard command on a locked key waits;
//! all other keys of the shard keep flowing.

use std::cell::RefCell;
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use hashbrown::HashMap;

/// Identifies one multi-shard operation: unique across the process.
pub type TxnId = u64;

/// Who takes a set of locks, and whether the operation writes (then a WATCH on its
/// keys is invalidated when it releases them).
#[derive(Debug, Clone, Copy)]
pub struct LockOwner {
    pub id: TxnId,
    pub write: bool,
    /// The client the operation runs for (0: the server itself). Its writes are that
    /// client's for client tracking (NOLOOP skips a client's own writes).
    pub client: u64,
}

/// What one operation locks on one shard.
#[derive(Debug, Clone)]
pub enum LockSet {
    /// These keys, as (db, key).
    Keys(Vec<(u8, Vec<u8>)>),
    /// These keys, already turned into lock ids by the owning shard's `KeyLocks::id`
    /// (a pipeline batch: no copy of the keys).
    Ids(Vec<LockId>),
    /// Every key of every database on the shard (FLUSHALL, SWAPDB, KEYS ...).
    Whole,
}

/// A locked key as (db, hash of the key). Two keys whose hashes collide share a lock:
/// an operation may then wait for an unrelated one, which is slower but still correct
/// (it can never deadlock: an operation takes all its ids on a shard at once). Hashes
/// make taking and checking a lock copy-free.
pub type LockId = (u8, u64);

#[derive(Default)]
pub struct KeyLocks {
    keys: HashMap<LockId, TxnId>,
    held: HashMap<TxnId, Vec<LockId>>,
    /// Emptied `held` vectors, reused by the next operations.
    spare: Vec<Vec<LockId>>,
    /// How many acquisitions each owner made here: a coordinator running inside EXEC
    /// takes (and releases) locks EXEC already holds, under the same owner.
    depth: HashMap<TxnId, u32>,
    whole: Option<TxnId>,
    waiters: Vec<Waker>,
    hasher: hashbrown::DefaultHashBuilder,
}

impl KeyLocks {
    /// True when no lock is held: the fast path of every single-shard command.
    #[inline]
    pub fn is_idle(&self) -> bool {
        self.whole.is_none() && self.keys.is_empty()
    }

    /// The lock id of `key` in `db` on this shard.
    #[inline]
    pub fn id(&self, db: u8, key: &[u8]) -> LockId {
        (db, self.hasher.hash_one(key))
    }

    /// Whether `key` in `db` is held by an operation other than `me`.
    pub fn blocks(&self, db: u8, key: &[u8], me: Option<TxnId>) -> bool {
        if let Some(owner) = self.whole {
            return Some(owner) != me;
        }
        if self.keys.is_empty() {
            return false;
        }
        self.keys
            .get(&self.id(db, key))
            .is_some_and(|&owner| Some(owner) != me)
    }

    fn free_for(&self, id: &LockId, me: TxnId) -> bool {
        self.keys.get(id).is_none_or(|&o| o == me)
    }

    fn can_take(&self, set: &LockSet, me: TxnId) -> bool {
        if self.whole.is_some_and(|o| o != me) {
            return false;
        }
        if self.whole == Some(me) {
            return true;
        }
        match set {
            LockSet::Whole => self.keys.values().all(|&o| o == me),
            LockSet::Keys(keys) => keys
                .iter()
                .all(|(db, k)| self.free_for(&self.id(*db, k), me)),
            LockSet::Ids(ids) => ids.iter().all(|id| self.free_for(id, me)),
        }
    }

    fn take(&mut self, set: LockSet, me: TxnId) {
        *self.depth.entry(me).or_insert(0) += 1;
        let ids = match set {
            LockSet::Whole => {
                self.whole = Some(me);
                return;
            }
            LockSet::Ids(ids) => ids,
            LockSet::Keys(keys) => keys.iter().map(|(db, k)| self.id(*db, k)).collect(),
        };
        let spare = &mut self.spare;
        let held = self
            .held
            .entry(me)
            .or_insert_with(|| spare.pop().unwrap_or_default());
        for id in ids {
            if self.keys.insert(id, me).is_none() {
                held.push(id);
            }
        }
    }

    /// Ends one acquisition by `me`; with the last one, releases everything `me` holds
    /// and wakes every waiter to re-check.
    pub fn release(&mut self, me: TxnId) {
        match self.depth.get_mut(&me) {
            Some(d) if *d > 1 => {
                *d -= 1;
                return;
            }
            _ => {
                self.depth.remove(&me);
            }
        }
        if self.whole == Some(me) {
            self.whole = None;
        }
        if let Some(mut ids) = self.held.remove(&me) {
            for id in ids.drain(..) {
                self.keys.remove(&id);
            }
            // Keep small vectors only: one huge operation must not pin its memory.
            if ids.capacity() <= 1024 && self.spare.len() < 64 {
                self.spare.push(ids);
            }
        }
        for w in self.waiters.drain(..) {
            w.wake();
        }
    }
}

/// Waits until `set` can be taken by `me` on this shard, then takes it.
pub fn acquire<'a>(locks: &'a RefCell<KeyLocks>, set: LockSet, me: TxnId) -> Acquire<'a> {
    Acquire {
        locks,
        set: Some(set),
        me,
        check_only: false,
    }
}

pub struct Acquire<'a> {
    locks: &'a RefCell<KeyLocks>,
    set: Option<LockSet>,
    me: TxnId,
    /// Only wait until the set could be taken, without taking it.
    check_only: bool,
}

/// Waits until `set` could be taken by `me`, but takes nothing: for the last shard of
/// a multi-shard operation that then runs its part there at once (in the same poll)
/// and would release right after. Nobody can observe that shard between the check
/// and the end of the part, and the shards before it stay locked until the operation
/// releases them, so the locks here would protect nothing.
pub fn wait_free<'a>(locks: &'a RefCell<KeyLocks>, set: LockSet, me: TxnId) -> Acquire<'a> {
    Acquire {
        locks,
        set: Some(set),
        me,
        check_only: true,
    }
}

impl Future for Acquire<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut locks = self.locks.borrow_mut();
        let ready = match &self.set {
            Some(set) => locks.can_take(set, self.me),
            None => return Poll::Ready(()),
        };
        if ready {
            let me = self.me;
            drop(locks);
            if let Some(set) = self.set.take() {
                if !self.check_only {
                    self.locks.borrow_mut().take(set, me);
                }
            }
            Poll::Ready(())
        } else {
            locks.waiters.push(cx.waker().clone());
            Poll::Pending
        }
    }
}

/// Waits until none of `keys` (in `db`) is locked by another operation. Used by
/// single-shard commands, which take no locks themselves.
pub fn wait_unlocked<'a>(locks: &'a RefCell<KeyLocks>, db: u8, keys: Vec<Vec<u8>>) -> Unlocked<'a> {
    Unlocked { locks, db, keys }
}

pub struct Unlocked<'a> {
    locks: &'a RefCell<KeyLocks>,
    db: u8,
    keys: Vec<Vec<u8>>,
}

impl Future for Unlocked<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut locks = self.locks.borrow_mut();
        if self.keys.iter().any(|k| locks.blocks(self.db, k, None))
            || (self.keys.is_empty() && locks.whole.is_some())
        {
            locks.waiters.push(cx.waker().clone());
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_whole_conflict() {
        let mut l = KeyLocks::default();
        assert!(l.is_idle());
        let a = LockSet::Keys(vec![(0, b"a".to_vec())]);
        assert!(l.can_take(&a, 1));
        l.take(a.clone(), 1);
        assert!(l.blocks(0, b"a", None));
        assert!(!l.blocks(0, b"a", Some(1)));
        assert!(!l.blocks(1, b"a", None));
        assert!(!l.can_take(&a, 2));
        assert!(!l.can_take(&LockSet::Whole, 2));
        l.release(1);
        assert!(l.is_idle());
        l.take(LockSet::Whole, 3);
        assert!(l.blocks(5, b"zzz", None));
        assert!(!l.can_take(&a, 4));
        l.release(3);
        assert!(l.can_take(&a, 4));
    }
}
