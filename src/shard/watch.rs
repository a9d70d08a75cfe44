//! WATCH on a shard: the flags of the clients watching each key. Any write to a
//! watched key sets its watchers' flags; EXEC then fails for them. A flag is an atomic
//! because its client may live on another shard.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hashbrown::HashMap;

#[derive(Default)]
pub struct Watches {
    by_key: HashMap<(usize, Vec<u8>), Vec<Arc<AtomicBool>>>,
}

impl Watches {
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    pub fn add(&mut self, db: usize, key: Vec<u8>, flag: Arc<AtomicBool>) {
        self.by_key.entry((db, key)).or_default().push(flag);
    }

    pub fn remove(&mut self, db: usize, key: &[u8], flag: &Arc<AtomicBool>) {
        let k = (db, key.to_vec());
        if let Some(v) = self.by_key.get_mut(&k) {
            v.retain(|f| !Arc::ptr_eq(f, flag));
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
            for f in v {
                f.store(true, Ordering::SeqCst);
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
                for f in v.iter() {
                    f.store(true, Ordering::SeqCst);
                }
            }
            !hit
        });
    }

    /// SWAPDB: every watched key of `db` (all dbs when None).
    pub fn touch_db(&mut self, db: Option<usize>) {
        self.by_key.retain(|(d, _), v| {
            if db.is_none_or(|x| x == *d) {
                for f in v.iter() {
                    f.store(true, Ordering::SeqCst);
                }
                false
            } else {
                true
            }
        });
    }
}
