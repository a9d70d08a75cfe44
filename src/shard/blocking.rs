//! Clients blocked on this shard's keys (BLPOP, BZPOPMIN ...): for each (db, key), the
//! blocked clients in the order they blocked. A write to such a key wakes them; each
//! then retries its pop under the keys' locks, and blocks again if it got nothing.
//!
//! A client blocked on several keys is registered on every shard that owns one of
//! them, so its state is shared between threads: atomics and a mutex-held waker.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;

use hashbrown::HashMap;

/// Why a blocked client stopped waiting, other than a write or its timeout.
pub const UNBLOCK_NONE: u8 = 0;
/// CLIENT UNBLOCK ... TIMEOUT: reply as on timeout.
pub const UNBLOCK_TIMEOUT: u8 = 1;
/// CLIENT UNBLOCK ... ERROR: reply with -UNBLOCKED.
pub const UNBLOCK_ERROR: u8 = 2;

/// One blocked client's wake-up state, shared by every shard it waits on.
#[derive(Debug)]
pub struct BlockState {
    pub client_id: u64,
    woken: AtomicBool,
    /// Served, timed out or gone: wake-ups go to the next client in line.
    done: AtomicBool,
    unblock: AtomicU8,
    waker: Mutex<Option<Waker>>,
    /// Woken by every write to its keys, not in turn: stream readers (XREAD) each
    /// wait for their own IDs, so one being served does not serve the others.
    broadcast: bool,
}

impl BlockState {
    pub fn new(client_id: u64) -> Arc<BlockState> {
        Self::with_mode(client_id, false)
    }

    /// A state that every write to its keys wakes (see `broadcast`).
    pub fn with_mode(client_id: u64, broadcast: bool) -> Arc<BlockState> {
        Arc::new(BlockState {
            client_id,
            woken: AtomicBool::new(false),
            done: AtomicBool::new(false),
            unblock: AtomicU8::new(UNBLOCK_NONE),
            waker: Mutex::new(None),
            broadcast,
        })
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
