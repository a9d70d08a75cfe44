//! The server's TLS session cache (`tls-session-caching`, `-cache-size`,
//! `-cache-timeout`): sessions a returning client may resume instead of a full
//! handshake. One cache serves every shard, as OpenSSL's serves every connection
//! of Redis: SO_REUSEPORT may hand a returning client to any shard. It is touched
//! only during handshakes, never per command, so a lock is cheap here.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hashbrown::HashMap;

#[derive(Debug)]
pub struct SessionCache {
    capacity: usize,
    timeout: Duration,
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    by_id: HashMap<Vec<u8>, (Vec<u8>, Instant)>,
    /// Ids oldest first: the first to go when the cache is full.
    order: VecDeque<Vec<u8>>,
}

impl SessionCache {
    /// A cache of at most `capacity` sessions (0 = unlimited, as OpenSSL's) that
    /// each live `timeout`.
    pub fn new(capacity: usize, timeout: Duration) -> SessionCache {
        SessionCache {
            capacity,
            timeout,
            inner: Mutex::new(Entries::default()),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn live(&self, stored: Instant) -> bool {
        stored.elapsed() < self.timeout
    }
}

impl rustls::server::StoresServerSessions for SessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let mut e = self.entries();
        if e.by_id
            .insert(key.clone(), (value, Instant::now()))
            .is_none()
        {
            e.order.push_back(key);
        }
        while self.capacity > 0 && e.by_id.len() > self.capacity {
            match e.order.pop_front() {
                Some(old) => {
                    e.by_id.remove(&old);
                }
                None => break,
            }
        }
        true
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let e = self.entries();
        let (value, stored) = e.by_id.get(key)?;
        self.live(*stored).then(|| value.clone())
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let mut e = self.entries();
        let (value, stored) = e.by_id.remove(key)?;
        if let Some(at) = e.order.iter().position(|k| k == key) {
            e.order.remove(at);
        }
        self.live(stored).then_some(value)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::server::StoresServerSessions;

    #[test]
    fn oldest_sessions_go_first_and_expired_ones_are_not_resumed() {
        let c = SessionCache::new(2, Duration::from_secs(60));
        c.put(b"a".to_vec(), b"1".to_vec());
        c.put(b"b".to_vec(), b"2".to_vec());
        c.put(b"c".to_vec(), b"3".to_vec());
        assert_eq!(c.get(b"a"), None);
        assert_eq!(c.get(b"b"), Some(b"2".to_vec()));
        assert_eq!(c.take(b"c"), Some(b"3".to_vec()));
        assert_eq!(c.get(b"c"), None);
        let stale = SessionCache::new(0, Duration::ZERO);
        stale.put(b"a".to_vec(), b"1".to_vec());
        assert_eq!(stale.get(b"a"), None);
    }
}
