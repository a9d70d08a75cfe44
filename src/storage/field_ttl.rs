//! Deadlines of hash fields (Redis 7.4's hash field expiration). A hash that never had
//! a field TTL carries none of this: `HashValue` holds it behind an `Option<Box<_>>`,
//! so plain hashes pay one empty pointer and one branch on writes that may drop a TTL.
//!
//! Two views of the same (field, deadline) pairs: by field, for HTTL / HEXPIRE and the
//! TTL a write drops; and by deadline, so expiring the due fields and finding a hash's
//! next deadline cost O(log n) however many fields have a TTL.

use std::collections::BTreeSet;

use hashbrown::HashMap;

use super::short_bytes::ShortBytes;

/// Most bytes a B-tree entry costs, node headers and slack at typical fill included
/// (nodes hold up to 11 entries and run about two thirds full).
const TREE_ENTRY_COST: usize = std::mem::size_of::<(u64, ShortBytes)>() * 3 / 2;

#[derive(Clone, Default)]
pub struct FieldTtls {
    by_field: HashMap<ShortBytes, u64>,
    by_time: BTreeSet<(u64, ShortBytes)>,
}

impl FieldTtls {
    pub fn len(&self) -> usize {
        self.by_field.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_field.is_empty()
    }

    /// The field's deadline (unix ms), None when it has none.
    #[inline]
    pub fn get(&self, field: &[u8]) -> Option<u64> {
        self.by_field.get(field).copied()
    }

    /// Sets or moves the field's deadline.
    pub fn set(&mut self, field: &[u8], at: u64) {
        let key = ShortBytes::new(field);
        if let Some(old) = self.by_field.insert(key.clone(), at) {
            self.by_time.remove(&(old, key.clone()));
        }
        self.by_time.insert((at, key));
    }

    /// Drops the field's deadline; returns it if it had one.
    pub fn remove(&mut self, field: &[u8]) -> Option<u64> {
        let (key, at) = self.by_field.remove_entry(field)?;
        self.by_time.remove(&(at, key));
        Some(at)
    }

    /// The earliest deadline.
    #[inline]
    pub fn min(&self) -> Option<u64> {
        self.by_time.first().map(|(at, _)| *at)
    }

    /// Takes out the field with the earliest deadline if that deadline is `<= now`.
    pub fn pop_due(&mut self, now: u64) -> Option<ShortBytes> {
        if self.min()? > now {
            return None;
        }
        let (_, field) = self.by_time.pop_first()?;
        self.by_field.remove(field.as_bytes());
        Some(field)
    }

    /// Heap bytes held (each field is stored twice, once per view).
    pub fn heap_size(&self) -> usize {
        let strings: usize = self.by_field.keys().map(|f| f.heap_size()).sum();
        self.by_field.allocation_size() + self.by_time.len() * TREE_ENTRY_COST + strings * 2
    }

    /// Both views agree (tests only).
    #[cfg(test)]
    pub fn check(&self) {
        assert_eq!(self.by_field.len(), self.by_time.len());
        for (at, f) in &self.by_time {
            assert_eq!(self.by_field.get(f.as_bytes()), Some(at));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn deadlines_by_field_and_by_time() {
        let mut t = FieldTtls::default();
        t.set(b"a", 30);
        t.set(b"b", 10);
        t.set(b"c", 20);
        assert_eq!(t.min(), Some(10));
        t.set(b"b", 40);
        assert_eq!(t.min(), Some(20));
        assert_eq!(t.get(b"b"), Some(40));
        assert_eq!(t.remove(b"c"), Some(20));
        assert_eq!(t.remove(b"c"), None);
        assert_eq!(t.pop_due(29), None);
        assert_eq!(t.pop_due(30).as_deref(), Some(&b"a"[..]));
        assert_eq!(t.len(), 1);
        t.check();
    }

    proptest! {
        /// The two views always agree with a plain map, and due fields come out in
        /// deadline order.
        #[test]
        fn matches_a_map(ops in proptest::collection::vec((0u8..3, 0u8..16, 0u64..50), 1..300)) {
            let mut t = FieldTtls::default();
            let mut model: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
            for (op, f, at) in ops {
                let f = vec![b'f', f];
                match op {
                    0 => { t.set(&f, at); model.insert(f, at); }
                    1 => prop_assert_eq!(t.remove(&f), model.remove(&f)),
                    _ => {
                        let mut last = 0;
                        while let Some(g) = t.pop_due(at) {
                            let was = model.remove(g.as_bytes()).expect("in model");
                            prop_assert!(was <= at && was >= last);
                            last = was;
                        }
                        prop_assert!(model.values().all(|&v| v > at));
                    }
                }
                t.check();
                prop_assert_eq!(t.len(), model.len());
                prop_assert_eq!(t.min(), model.values().min().copied());
            }
        }
    }
}
