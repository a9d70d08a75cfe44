//! Clients blocked on this shard's keys (BLPOP, BZPOPMIN ...): for each (db, key), the
//! blocked clients in the order they blocked. A write to such a key wakes them; each
//! then retries its pop under the keys' locks, and blocks again if it got nothing.
//!
//! A client blocked on several keys is registered on every shard that owns one of
//! them, so its state is shared between threads: atomics and a mutex-held waker.
//!
//! Serving order is Redis's (handleClientsBlockedOnKeys): a client whose whole serve
//! runs on the shard that received the push is served right there, before the
//! writing command's reply leaves, so `RPUSH` followed by `LRANGE` sees every chained
//! BLMOVE done. A serve that needs another shard (BLMOVE across shards) or keys that
//! another operation holds falls back to waking the client, which retries under locks.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;

use hashbrown::HashMap;

use super::locks::KeyLocks;
use super::ShardData;

/// What a served client gets: its reply, and the key its serve pushed to (BLMOVE's
/// destination), which may in turn serve the clients blocked on it.
pub struct ServedReply {
    pub reply: Vec<u8>,
    pub pushed: Option<Vec<u8>>,
}

/// A blocked command that can be served on the shard that owns the ready key.
pub trait LocalServe: Send + Sync + Debug {
    /// Another key the serve writes (BLMOVE's destination): it must not be locked.
    fn also_writes(&self) -> Option<&[u8]>;
    /// Serves from `key`, or None if `key` holds nothing this client takes (missing,
    /// or another type: Redis leaves such clients blocked).
    fn serve(&self, data: &mut ShardData, db: usize, key: &[u8]) -> Option<ServedReply>;
}

/// Why a blocked client stopped waiting, other than a write or its timeout.
pub const UNBLOCK_NONE: u8 = 0;
/// CLIENT UNBLOCK ... TIMEOUT: reply as on timeout.
pub const UNBLOCK_TIMEOUT: u8 = 1;
/// CLIENT UNBLOCK ... ERROR: reply with -UNBLOCKED.
pub const UNBLOCK_ERROR: u8 = 2;
/// This master became a replica (Redis's disconnectAllBlockedClients): -UNBLOCKED,
/// and the connection closes after it.
pub const UNBLOCK_ROLE_CHANGE: u8 = 3;

/// Cluster mode: the slot of its keys is no longer served here, or the cluster
/// failed; the client works out its redirect (`connection::redirect::
/// blocked_redirect`) and keeps waiting if there is none after all.
pub const UNBLOCK_CLUSTER_REDIRECT: u8 = 4;

/// The error a client unblocked with `mode` gets (None: the timeout's reply).
pub fn unblocked_error(mode: u8) -> Option<&'static str> {
    match mode {
        UNBLOCK_ERROR => Some("UNBLOCKED client unblocked via CLIENT UNBLOCK"),
        UNBLOCK_ROLE_CHANGE => Some(
            "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)",
        ),
        _ => None,
    }
}

/// One blocked client's wake-up state, shared by every shard it waits on.
#[derive(Debug)]
pub struct BlockState {
    pub client_id: u64,
    woken: AtomicBool,
    /// Served, timed out or gone: wake-ups go to the next client in line.
    done: AtomicBool,
    unblock: AtomicU8,
    waker: Mutex<Option<Waker>>,
    /// Held by whoever acts for the client now: a shard serving it, or the client
    /// itself while it retries or stops. Only the holder may pop for it.
    claimed: AtomicBool,
    /// How a shard serves it in place; None: always wake it to retry.
    local: Option<Box<dyn LocalServe>>,
    /// The reply a shard served it with.
    served: Mutex<Option<Vec<u8>>>,
    /// Woken by every write to its keys, not in turn: stream readers (XREAD) each
    /// wait for their own IDs, so one being served does not serve the others.
    broadcast: bool,
}

impl BlockState {
    pub fn new(client_id: u64) -> Arc<BlockState> {
        BlockState::build(client_id, false, None)
    }

    /// A state that every write to its keys wakes (see `broadcast`).
    pub fn with_mode(client_id: u64, broadcast: bool) -> Arc<BlockState> {
        BlockState::build(client_id, broadcast, None)
    }

    /// A state a shard can serve in place (see `LocalServe`).
    pub fn with_local_serve(client_id: u64, local: Option<Box<dyn LocalServe>>) -> Arc<BlockState> {
        BlockState::build(client_id, false, local)
    }

    fn build(
        client_id: u64,
        broadcast: bool,
        local: Option<Box<dyn LocalServe>>,
    ) -> Arc<BlockState> {
        Arc::new(BlockState {
            client_id,
            woken: AtomicBool::new(false),
            done: AtomicBool::new(false),
            unblock: AtomicU8::new(UNBLOCK_NONE),
            waker: Mutex::new(None),
            claimed: AtomicBool::new(false),
            local,
            served: Mutex::new(None),
            broadcast,
        })
    }

    /// Takes the right to act for the client; false if someone else has it. Only a
    /// client that shards serve in place needs one.
    pub fn try_claim(&self) -> bool {
        self.local.is_none()
            || self
                .claimed
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
    }

    /// Gives the claim back (the serve or retry found nothing) and lets the client
    /// look at its state again.
    pub fn unclaim(&self) {
        self.claimed.store(false, Ordering::SeqCst);
        self.wake_task();
    }

    /// Hands the client its reply; it stops waiting.
    fn deliver(&self, reply: Vec<u8>) {
        if let Ok(mut g) = self.served.lock() {
            *g = Some(reply);
        }
        self.finish();
        self.wake_task();
    }

    /// The reply a shard served it with, if any.
    pub fn take_served(&self) -> Option<Vec<u8>> {
        self.served.lock().ok().and_then(|mut g| g.take())
    }

    fn wake_task(&self) {
        let w = self.waker.lock().ok().and_then(|mut g| g.take());
        if let Some(w) = w {
            w.wake();
        }
    }

    /// A key it waits on was written: it should retry.
    pub fn wake(&self) {
        self.woken.store(true, Ordering::SeqCst);
        self.wake_task();
    }

    /// CLIENT UNBLOCK: stop waiting with `mode` (UNBLOCK_TIMEOUT or UNBLOCK_ERROR).
    pub fn unblock(&self, mode: u8) {
        self.unblock.store(mode, Ordering::SeqCst);
        self.wake_task();
    }

    /// Back to waiting after an unblock that turned out not to apply.
    pub fn clear_unblock(&self) {
        self.unblock.store(UNBLOCK_NONE, Ordering::SeqCst);
    }

    /// It stops waiting: later wake-ups pass it over.
    pub fn finish(&self) {
        self.done.store(true, Ordering::SeqCst);
    }

    /// Woken by every write rather than in turn (see `broadcast`).
    pub fn is_broadcast(&self) -> bool {
        self.broadcast
    }

    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }

    pub fn unblock_mode(&self) -> u8 {
        self.unblock.load(Ordering::SeqCst)
    }

    /// Whether it was woken since the last call (and clears the flag).
    pub fn take_woken(&self) -> bool {
        self.woken.swap(false, Ordering::SeqCst)
    }

    /// Whether it was woken, leaving the flag set.
    pub fn is_woken(&self) -> bool {
        self.woken.load(Ordering::SeqCst)
    }

    /// Records the task to wake. Callers re-check the flags afterwards, so a wake
    /// racing with this is never lost.
    pub fn set_waker(&self, w: &Waker) {
        if let Ok(mut g) = self.waker.lock() {
            match g.as_ref() {
                Some(old) if old.will_wake(w) => {}
                _ => *g = Some(w.clone()),
            }
        }
    }
}

#[derive(Default)]
pub struct Blocked {
    by_key: HashMap<(usize, Vec<u8>), VecDeque<Arc<BlockState>>>,
}

impl Blocked {
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// How many (key, client) registrations there are.
    pub fn len(&self) -> usize {
        self.by_key.values().map(|v| v.len()).sum()
    }

    pub fn add(&mut self, db: usize, key: Vec<u8>, state: Arc<BlockState>) {
        let q = self.by_key.entry((db, key)).or_default();
        if !q.iter().any(|s| Arc::ptr_eq(s, &state)) {
            q.push_back(state);
        }
    }

    pub fn remove(&mut self, db: usize, key: &[u8], state: &Arc<BlockState>) {
        let k = (db, key.to_vec());
        if let Some(q) = self.by_key.get_mut(&k) {
            q.retain(|s| !Arc::ptr_eq(s, state));
            if q.is_empty() {
                self.by_key.remove(&k);
            }
        }
    }

    /// A write to `key`: wake the longest-blocked client still waiting on it. It
    /// retries; once it is served (or stops waiting) its release signals the key
    /// again, which wakes the next one, so clients are served in the order they
    /// blocked. Clients stay registered (keeping their place) until they stop.
    pub fn signal(&mut self, db: usize, key: &[u8]) {
        if self.by_key.is_empty() {
            return;
        }
        if let Some(q) = self.by_key.get(&(db, key.to_vec())) {
            let mut woke_one = false;
            for s in q.iter().filter(|s| !s.is_done()) {
                if s.broadcast {
                    s.wake();
                } else if !woke_one {
                    s.wake();
                    woke_one = true;
                }
            }
        }
    }

    /// The clients still waiting on `key`, in the order they blocked.
    fn waiting(&self, db: usize, key: &[u8]) -> Vec<Arc<BlockState>> {
        match self.by_key.get(&(db, key.to_vec())) {
            Some(q) => q.iter().filter(|s| !s.is_done()).cloned().collect(),
            None => Vec::new(),
        }
    }

    /// Unblocks with `mode` every client waiting on a key `pick` chooses (a slot
    /// that moved away: Redis's clusterRedirectBlockedClientIfNeeded).
    pub fn unblock_where(&self, mut pick: impl FnMut(usize, &[u8]) -> bool, mode: u8) {
        for ((db, key), q) in &self.by_key {
            if pick(*db, key) {
                for s in q.iter().filter(|s| !s.is_done()) {
                    s.unblock(mode);
                }
            }
        }
    }

    /// FLUSHDB / FLUSHALL / SWAPDB and the like: wake everyone (they retry and find
    /// out for themselves).
    pub fn signal_all(&mut self) {
        for q in self.by_key.values() {
            for s in q {
                s.wake();
            }
        }
    }
}

/// A write to `key` on this shard: serve its blocked clients in the order they
/// blocked, in place where possible, and follow the keys those serves push to.
pub fn signal_key(locks: &RefCell<KeyLocks>, data: &mut ShardData, db: usize, key: &[u8]) {
    if data.blocked.is_empty() {
        return;
    }
    let mut ready: VecDeque<Vec<u8>> = VecDeque::new();
    ready.push_back(key.to_vec());
    while let Some(key) = ready.pop_front() {
        // Clients are served in turn until one must be woken to retry (it passes the
        // turn on when it is done); broadcast waiters are all woken regardless.
        let mut in_turn = true;
        for st in data.blocked.waiting(db, &key) {
            if st.broadcast {
                st.wake();
                continue;
            }
            if !in_turn {
                continue;
            }
            let Some(local) = st.local.as_deref() else {
                st.wake();
                in_turn = false;
                continue;
            };
            if !data.dbs[db].contains(&key, crate::util::now_ms()) {
                in_turn = false;
                continue;
            }
            let held = {
                let l = locks.borrow();
                !l.is_idle()
                    && (l.blocks(db as u8, &key, None)
                        || local
                            .also_writes()
                            .is_some_and(|k| l.blocks(db as u8, k, None)))
            };
            if held {
                // Whoever holds the keys releases them with a signal; the client
                // retries then, under the locks.
                st.wake();
                in_turn = false;
                continue;
            }
            if !st.try_claim() {
                // Another shard serves it, or it retries or stops by itself right now.
                // The flag makes it look again should that come to nothing.
                st.wake();
                continue;
            }
            match local.serve(data, db, &key) {
                Some(served) => {
                    data.signal_modified(db, &key);
                    if let Some(p) = served.pushed {
                        data.signal_modified(db, &p);
                        ready.push_back(p);
                    }
                    st.deliver(served.reply);
                }
                None => st.unclaim(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_wakes_and_keeps_order() {
        let mut b = Blocked::default();
        let a = BlockState::new(1);
        let c = BlockState::new(2);
        b.add(0, b"k".to_vec(), a.clone());
        b.add(0, b"k".to_vec(), c.clone());
        b.add(0, b"k".to_vec(), a.clone());
        assert_eq!(b.len(), 2);
        b.signal(0, b"other");
        assert!(!a.take_woken());
        b.signal(0, b"k");
        assert!(a.take_woken());
        assert!(!c.take_woken());
        a.finish();
        b.signal(0, b"k");
        assert!(!a.take_woken());
        assert!(c.take_woken());
        b.remove(0, b"k", &a);
        b.remove(0, b"k", &c);
        assert!(b.is_empty());
    }
}
