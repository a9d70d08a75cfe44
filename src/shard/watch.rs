//! WATCH on a shard: the flags of the clients watching each key. Any write to a
//! watched key sets its watchers' flags; EXEC then fails for them. A flag is an atomic
//! because its client may live on another shard.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hashbrown::HashMap;

#[derive(Default)]
pub struct Watches {
    by_key: HashMap<(usize, Vec<u8>), Vec<Watcher>>,
}

/// One client watching a key.
struct Watcher {
    dirty: Arc<AtomicBool>,
    /// The key was there but expired (Redis's watchedKey.expired): a SWAPDB that
    /// leaves it missing or expired is no change for this client.
    expired: bool,
}

impl Watches {
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// `expired`: the key is there with its TTL passed (kept while expiry is held).
    pub fn add(&mut self, db: usize, key: Vec<u8>, flag: Arc<AtomicBool>, expired: bool) {
        self.by_key.entry((db, key)).or_default().push(Watcher {
            dirty: flag,
            expired,
        });
    }

    pub fn remove(&mut self, db: usize, key: &[u8], flag: &Arc<AtomicBool>) {
        let k = (db, key.to_vec());
        if let Some(v) = self.by_key.get_mut(&k) {
            v.retain(|w| !Arc::ptr_eq(&w.dirty, flag));
            if v.is_empty() {
                self.by_key.remove(&k);
            }
        }
    }

    /// A write to `key`: its watchers' transactions will fail. They need no further
    /// notice, so the entry goes.
    pub fn touch(&mut self, db: usize, key: &[u8]) {
        if self.by_key.is_empty() {
            return;
        }
        if let Some(v) = self.by_key.remove(&(db, key.to_vec())) {
            for w in v {
                w.dirty.store(true, Ordering::SeqCst);
            }
        }
    }

    /// FLUSHDB / FLUSHALL: the watched keys of `db` (all dbs when None) that exist
    /// (live) in `dbs` before they are emptied; watching a missing key survives it.
    pub fn touch_flushed(&mut self, db: Option<usize>, dbs: &[crate::storage::Db], now: u64) {
        self.by_key.retain(|(d, k), v| {
            let hit =
                db.is_none_or(|x| x == *d) && dbs.get(*d).is_some_and(|x| x.peek_live(k, now));
            if hit {
                for w in v.iter() {
                    w.dirty.store(true, Ordering::SeqCst);
                }
            }
            !hit
        });
    }

    /// Every watched key of `db` (all dbs when None): a swapdb load replaced them.
    pub fn touch_db(&mut self, db: Option<usize>) {
        self.by_key.retain(|(d, _), v| {
            if db.is_none_or(|x| x == *d) {
                for w in v.iter() {
                    w.dirty.store(true, Ordering::SeqCst);
                }
                false
            } else {
                true
            }
        });
    }

    /// SWAPDB of `a` and `b`, called before `dbs` are swapped: each watched key of
    /// either database changes only if it, or what replaces it, is there: a missing or
    /// expired key replaced with a missing or expired one is no change (Redis 7.0's
    /// touchAllWatchedKeysInDb).
    pub fn touch_swapped(&mut self, a: usize, b: usize, dbs: &[crate::storage::Db], now: u64) {
        // What each key is in a database: None missing, Some(expired) there.
        let state = |db: usize, key: &[u8]| dbs.get(db).and_then(|d| d.peek_expired(key, now));
        self.by_key.retain(|(d, key), watchers| {
            let other = match *d {
                d if d == a => b,
                d if d == b => a,
                _ => return true,
            };
            let (emptied, replaced_with) = (state(*d, key), state(other, key));
            if emptied.is_none() && replaced_with.is_none() {
                return true;
            }
            watchers.retain_mut(|w| {
                let unchanged = if w.expired {
                    match replaced_with {
                        None => {
                            w.expired = false;
                            true
                        }
                        Some(expired) => expired,
                    }
                } else if emptied.is_none() && replaced_with == Some(true) {
                    w.expired = true;
                    true
                } else {
                    false
                };
                if !unchanged {
                    w.dirty.store(true, Ordering::SeqCst);
                }
                unchanged
            });
            !watchers.is_empty()
        });
    }
}
