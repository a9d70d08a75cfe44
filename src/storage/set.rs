//! The set value type, with Redis 7.0's two encodings.
//!
//! * `intset`: a sorted `Vec<i64>` while every member is the canonical decimal form of
//!   an i64 and there are at most `set-max-intset-entries` of them. Lookups are binary
//!   searches and iteration is in ascending order, as Redis's intset iterates.
//! * `hashtable`: byte-string members in a segmented hash set ([`HashMembers`]). As in
//!   Redis, a set never goes back from `hashtable` to `intset`.
//!
//! The hashtable is split by hash prefix (extendible hashing): a directory indexed by
//! the top `depth` bits of a member's 64-bit hash points at segments of at most
//! `SEG_MAX` members, each a small hashbrown table. That buys three things a single
//! table cannot give:
//! 1. SSCAN's cursor is a position in hash order. A call returns the members whose hash
//!    lies in `[cursor, next)`, sorted within the one or few segments it visits, so
//!    every member present for the whole scan is returned exactly once however the set
//!    grows, shrinks or is reorganised between calls, and a call costs O(COUNT +
//!    segment size), not O(set size).
//! 2. Growth splits one small segment at a time: no whole-set rehash stall on big sets
//!    (the same reason the keyspace has one table per slot).
//! 3. Fair random members (SRANDMEMBER, SPOP) by rejection sampling over segments.

use std::hash::BuildHasher;
use std::sync::OnceLock;

use hashbrown::hash_table::{Entry, HashTable};
use hashbrown::DefaultHashBuilder;

use super::keyspace::Rng;
use super::limits::EncodingLimits;
use super::short_bytes::{heap_len, ShortBytes};
use super::value::format_i64;
use crate::util::string2ll;

/// A segment splits once it holds more members than this: 7/8 of 512 buckets, so a
/// full segment never grows its table past 512 buckets.
const SEG_MAX: usize = 448;
/// Bound on the directory (2^depth entries). Reaching it needs hundreds of members
/// sharing a 26-bit hash prefix; if it ever happens segments simply grow past SEG_MAX.
const MAX_DEPTH: u8 = 26;

/// The hasher of set members. One per process, so a set value cloned to another shard
/// (RENAME, COPY, SINTERSTORE across shards) keeps valid hashes and scan cursors; its
/// seed is random per process, so members cannot be chosen to collide.
fn hasher() -> &'static DefaultHashBuilder {
    static HASHER: OnceLock<DefaultHashBuilder> = OnceLock::new();
    HASHER.get_or_init(DefaultHashBuilder::default)
}

#[inline]
fn hash_of(member: &[u8]) -> u64 {
    hasher().hash_one(member)
}

/// The top `depth` bits of `hash`.
#[inline]
fn prefix(hash: u64, depth: u8) -> u64 {
    if depth == 0 {
        0
    } else {
        hash >> (64 - depth)
    }
}

/// The first hash of the range whose top `depth` bits are `p`.
#[inline]
fn range_start(p: u64, depth: u8) -> u64 {
    if depth == 0 {
        0
    } else {
        p << (64 - depth)
    }
}

/// One past the last hash of the range of depth `depth` starting at `start`; `None`
/// when the range reaches the end of the hash space.
#[inline]
fn range_end(start: u64, depth: u8) -> Option<u64> {
    if depth == 0 {
        None
    } else {
        start.checked_add(1u64 << (64 - depth))
    }
}

/// A set member as stored: either an integer of an intset or the bytes of a
/// hashtable member. The same member is always represented the same way within one
/// set, so equality and hashing of `MemberRef`s from one set are meaningful.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemberRef<'a> {
    Int(i64),
    Bytes(&'a [u8]),
}

impl MemberRef<'_> {
    /// Calls `f` with the member's bytes (integers formatted on the stack).
    #[inline]
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        match *self {
            MemberRef::Int(n) => {
                let mut buf = [0u8; 24];
                f(format_i64(n, &mut buf))
            }
            MemberRef::Bytes(b) => f(b),
        }
    }

    pub fn to_owned(&self) -> Member {
        match *self {
            MemberRef::Int(n) => Member::Int(n),
            MemberRef::Bytes(b) => Member::Bytes(b.into()),
        }
    }

    /// The member's bytes, owned (an integer formatted).
    pub fn to_vec(&self) -> Vec<u8> {
        self.with_bytes(|b| b.to_vec())
    }
}

/// An owned member, for taking members out of a set while it changes (SPOP).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Member {
    Int(i64),
    Bytes(Box<[u8]>),
}

impl Member {
    pub fn as_ref(&self) -> MemberRef<'_> {
        match self {
            Member::Int(n) => MemberRef::Int(*n),
            Member::Bytes(b) => MemberRef::Bytes(b),
        }
    }
}

/// A hashtable member with its hash, kept so splits and scans never rehash.
#[derive(Debug, Clone)]
struct Slot {
    hash: u64,
    /// Short members sit in the slot itself: a lookup reads the hash and the bytes it
    /// compares from one place instead of following a pointer to a block of their own.
    member: ShortBytes,
}

#[derive(Debug, Clone)]
struct Segment {
    /// How many leading hash bits every member of this segment shares.
    depth: u8,
    table: HashTable<Slot>,
}

impl Segment {
    fn new(depth: u8) -> Segment {
        Segment {
            depth,
            table: HashTable::new(),
        }
    }
}

/// The `hashtable` encoding: an extendible-hashing directory over small tables.
#[derive(Debug, Clone)]
struct HashMembers {
    /// Segment index for each `depth`-bit hash prefix; a segment of depth `d` appears
    /// in `2^(depth - d)` consecutive entries.
    dir: Vec<u32>,
    depth: u8,
    segs: Vec<Segment>,
    len: usize,
    /// Heap bytes of the members too long to sit in their slots, for memory accounting.
    bytes: usize,
}

impl HashMembers {
    fn new() -> HashMembers {
        HashMembers {
            dir: vec![0],
            depth: 0,
            segs: vec![Segment::new(0)],
            len: 0,
            bytes: 0,
        }
    }

    #[inline]
    fn seg_index(&self, hash: u64) -> usize {
        self.dir[prefix(hash, self.depth) as usize] as usize
    }

    fn contains(&self, member: &[u8]) -> bool {
        let hash = hash_of(member);
        self.segs[self.seg_index(hash)]
            .table
            .find(hash, |s| s.hash == hash && *s.member == *member)
            .is_some()
    }

    fn insert(&mut self, member: &[u8]) -> bool {
        let hash = hash_of(member);
        let si = self.seg_index(hash);
        match self.segs[si].table.entry(
            hash,
            |s| s.hash == hash && *s.member == *member,
            |s| s.hash,
        ) {
            Entry::Occupied(_) => return false,
            Entry::Vacant(v) => {
                v.insert(Slot {
                    hash,
                    member: ShortBytes::new(member),
                });
            }
        }
        self.added(si, hash, heap_len(member));
        true
    }

    /// Inserts a slot known not to be present (rebuilds, conversions).
    fn insert_new(&mut self, slot: Slot) {
        let (hash, n) = (slot.hash, slot.member.heap_size());
        let si = self.seg_index(hash);
        self.segs[si].table.insert_unique(hash, slot, |s| s.hash);
        self.added(si, hash, n);
    }

    fn added(&mut self, si: usize, hash: u64, member_heap: usize) {
        self.len += 1;
        self.bytes += member_heap;
        if self.segs[si].table.len() > SEG_MAX {
            self.split(si, hash);
        }
    }

    /// Splits segment `si` (which holds `hash`) in two by its next hash bit, repeating
    /// on a half that is still too big.
    fn split(&mut self, mut si: usize, mut hash: u64) {
        loop {
            let d = self.segs[si].depth;
            if d >= MAX_DEPTH || self.segs[si].table.len() <= SEG_MAX {
                return;
            }
            if d == self.depth {
                // Every directory entry doubles into two neighbours with the same target.
                self.dir = self.dir.iter().flat_map(|&s| [s, s]).collect();
                self.depth += 1;
            }
            let bit = 1u64 << (63 - d);
            let mut upper = HashTable::with_capacity(self.segs[si].table.len() / 2 + 1);
            for s in self.segs[si].table.extract_if(|s| s.hash & bit != 0) {
                upper.insert_unique(s.hash, s, |s| s.hash);
            }
            self.segs[si].table.shrink_to_fit(|s| s.hash);
            self.segs[si].depth = d + 1;
            let ni = self.segs.len();
            self.segs.push(Segment {
                depth: d + 1,
                table: upper,
            });
            // The old segment's directory range: its upper half now points at the new one.
            let p = prefix(hash, d);
            let span = 1usize << (self.depth - d);
            let start = (p as usize) << (self.depth - d);
            for e in &mut self.dir[start + span / 2..start + span] {
                *e = ni as u32;
            }
            let (lo, hi) = (range_start(p << 1, d + 1), range_start((p << 1) | 1, d + 1));
            if self.segs[si].table.len() > SEG_MAX {
                hash = lo;
            } else if self.segs[ni].table.len() > SEG_MAX {
                (si, hash) = (ni, hi);
            } else {
                return;
            }
        }
    }

    fn remove(&mut self, member: &[u8]) -> bool {
        let hash = hash_of(member);
        let si = self.seg_index(hash);
        let table = &mut self.segs[si].table;
        match table.find_entry(hash, |s| s.hash == hash && *s.member == *member) {
            Ok(e) => {
                e.remove();
            }
            Err(_) => return false,
        }
        self.len -= 1;
        self.bytes -= heap_len(member);
        // Give memory back as Redis's dict does when it falls under 1/8 full.
        if table.capacity() > 64 && table.len() * 8 < table.capacity() {
            table.shrink_to_fit(|s| s.hash);
        }
        if self.segs.len() > 1 && self.len * 8 < self.segs.len() * SEG_MAX {
            self.rebuild();
        }
        true
    }

    /// Re-packs a set that shrank to a fraction of its segments' capacity.
    fn rebuild(&mut self) {
        let old = std::mem::replace(self, HashMembers::new());
        for seg in old.segs {
            for slot in seg.table {
                self.insert_new(slot);
            }
        }
    }

    /// A uniformly chosen member: pick a segment, then a position below SEG_MAX, and
    /// retry when that position is empty, so every member has the same chance.
    fn random(&self, rng: &mut Rng) -> Option<&[u8]> {
        if self.len == 0 {
            return None;
        }
        if self.segs.len() > 1 {
            for _ in 0..64 {
                let seg = &self.segs[rng.below(self.segs.len())];
                let k = rng.below(SEG_MAX.max(seg.table.len()));
                if k < seg.table.len() {
                    return seg.table.iter().nth(k).map(|s| &*s.member);
                }
            }
        }
        // One segment (or an unlucky run): walk to a uniformly chosen position.
        let mut k = rng.below(self.len);
        for seg in &self.segs {
            if k < seg.table.len() {
                return seg.table.iter().nth(k).map(|s| &*s.member);
            }
            k -= seg.table.len();
        }
        None
    }

    /// Visits members in hash order from `cursor`; returns the next cursor (0 = done).
    /// Members with equal hashes are never split between calls, and at most
    /// 10 × `count` segments are visited so sparse sets still answer quickly.
    fn scan<'a>(&'a self, mut cursor: u64, count: usize, f: &mut impl FnMut(&'a [u8])) -> u64 {
        let mut emitted = 0usize;
        let mut visited = 0usize;
        let mut batch: Vec<&Slot> = Vec::new();
        loop {
            let seg = &self.segs[self.seg_index(cursor)];
            let end = range_end(range_start(prefix(cursor, seg.depth), seg.depth), seg.depth);
            batch.clear();
            batch.extend(seg.table.iter().filter(|s| s.hash >= cursor));
            batch.sort_unstable_by_key(|s| s.hash);
            for (i, s) in batch.iter().enumerate() {
                if emitted >= count && i > 0 && s.hash != batch[i - 1].hash {
                    return s.hash;
                }
                f(&s.member);
                emitted += 1;
            }
            match end {
                None => return 0,
                Some(e) => cursor = e,
            }
            visited += 1;
            if emitted >= count || visited >= count.saturating_mul(10) {
                return cursor;
            }
        }
    }

    fn iter(&self) -> HashIter<'_> {
        HashIter {
            segs: self.segs.iter(),
            cur: None,
        }
    }

    /// Heap bytes, exact for a few segments and estimated from a sample beyond: every
    /// write re-measures its key, so this must not walk a huge set's segments.
    fn heap_size(&self) -> usize {
        const EXACT: usize = 16;
        let per_slot = std::mem::size_of::<Slot>() + 1;
        let sample: usize = self
            .segs
            .iter()
            .take(EXACT)
            .map(|s| s.table.capacity() * per_slot)
            .sum();
        let tables = if self.segs.len() <= EXACT {
            sample
        } else {
            sample / EXACT * self.segs.len()
        };
        tables
            + self.bytes
            + self.dir.capacity() * 4
            + self.segs.capacity() * std::mem::size_of::<Segment>()
    }
}

struct HashIter<'a> {
    segs: std::slice::Iter<'a, Segment>,
    cur: Option<hashbrown::hash_table::Iter<'a, Slot>>,
}

impl<'a> Iterator for HashIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        loop {
            if let Some(s) = self.cur.as_mut().and_then(|it| it.next()) {
                return Some(&s.member);
            }
            self.cur = Some(self.segs.next()?.table.iter());
        }
    }
}

/// Iterates a set's members.
pub struct SetIter<'a>(IterRepr<'a>);

enum IterRepr<'a> {
    Ints(std::slice::Iter<'a, i64>),
    Hash(HashIter<'a>),
}

impl<'a> Iterator for SetIter<'a> {
    type Item = MemberRef<'a>;

    #[inline]
    fn next(&mut self) -> Option<MemberRef<'a>> {
        match &mut self.0 {
            IterRepr::Ints(it) => it.next().map(|&n| MemberRef::Int(n)),
            IterRepr::Hash(it) => it.next().map(MemberRef::Bytes),
        }
    }
}

#[derive(Debug, Clone)]
enum Repr {
    Ints(Vec<i64>),
    Hash(HashMembers),
}

/// A set value. A new, empty one is an intset (Redis's `createIntsetObject`); the
/// first non-integer member or one member too many converts it.
#[derive(Debug, Clone)]
pub struct SetValue {
    repr: Repr,
}

impl Default for SetValue {
    fn default() -> Self {
        SetValue {
            repr: Repr::Ints(Vec::new()),
        }
    }
}

fn max_intset(limits: &EncodingLimits) -> usize {
    limits.set_max_intset_entries.max(0) as usize
}

impl SetValue {
    /// A set of `members` (duplicates ignored), encoded as `limits` say.
    pub fn from_members<'a>(
        members: impl IntoIterator<Item = MemberRef<'a>>,
        limits: &EncodingLimits,
    ) -> SetValue {
        let mut s = SetValue::default();
        for m in members {
            s.insert_ref(m, limits);
        }
        s
    }

    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Ints(v) => v.len(),
            Repr::Hash(h) => h.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// OBJECT ENCODING's name for the current representation.
    pub fn encoding(&self) -> &'static str {
        match &self.repr {
            Repr::Ints(_) => "intset",
            Repr::Hash(_) => "hashtable",
        }
    }

    /// Lazy free: drops whole segments (at most SEG_MAX members each) until about
    /// `budget` members went. True once nothing big is left; the set is then only fit
    /// for dropping.
    pub fn shed(&mut self, budget: usize) -> bool {
        let Repr::Hash(h) = &mut self.repr else {
            return true;
        };
        let mut freed = 0;
        while freed < budget {
            match h.segs.pop() {
                Some(seg) => freed += seg.table.len(),
                None => return true,
            }
        }
        h.segs.is_empty()
    }

    /// Heap bytes held, for memory accounting.
    pub fn heap_size(&self) -> usize {
        match &self.repr {
            Repr::Ints(v) => v.capacity() * 8,
            Repr::Hash(h) => h.heap_size(),
        }
    }

    pub fn iter(&self) -> SetIter<'_> {
        SetIter(match &self.repr {
            Repr::Ints(v) => IterRepr::Ints(v.iter()),
            Repr::Hash(h) => IterRepr::Hash(h.iter()),
        })
    }

    pub fn contains(&self, member: &[u8]) -> bool {
        match &self.repr {
            Repr::Ints(v) => string2ll(member).is_some_and(|n| v.binary_search(&n).is_ok()),
            Repr::Hash(h) => h.contains(member),
        }
    }

    /// Membership of a member taken from another set (whatever its encoding).
    pub fn contains_ref(&self, m: MemberRef) -> bool {
        match (&self.repr, m) {
            (Repr::Ints(v), MemberRef::Int(n)) => v.binary_search(&n).is_ok(),
            _ => m.with_bytes(|b| self.contains(b)),
        }
    }

    /// Adds a member; false if it was already there.
    pub fn insert(&mut self, member: &[u8], limits: &EncodingLimits) -> bool {
        if let Repr::Ints(_) = self.repr {
            match string2ll(member) {
                Some(n) => return self.insert_int(n, limits),
                None => self.convert(),
            }
        }
        match &mut self.repr {
            Repr::Hash(h) => h.insert(member),
            Repr::Ints(_) => unreachable!("converted to a hashtable above"),
        }
    }

    pub fn insert_ref(&mut self, m: MemberRef, limits: &EncodingLimits) -> bool {
        match m {
            MemberRef::Int(n) => self.insert_int(n, limits),
            MemberRef::Bytes(b) => self.insert(b, limits),
        }
    }

    fn insert_int(&mut self, n: i64, limits: &EncodingLimits) -> bool {
        match &mut self.repr {
            Repr::Ints(v) => {
                let Err(at) = v.binary_search(&n) else {
                    return false;
                };
                v.insert(at, n);
                if v.len() > max_intset(limits) {
                    self.convert();
                }
                true
            }
            Repr::Hash(h) => {
                let mut buf = [0u8; 24];
                h.insert(format_i64(n, &mut buf))
            }
        }
    }

    /// intset → hashtable.
    fn convert(&mut self) {
        if let Repr::Ints(v) = &self.repr {
            let mut h = HashMembers::new();
            let mut buf = [0u8; 24];
            for &n in v {
                let b = format_i64(n, &mut buf);
                h.insert_new(Slot {
                    hash: hash_of(b),
                    member: ShortBytes::new(b),
                });
            }
            self.repr = Repr::Hash(h);
        }
    }

    /// Removes a member; false if it was not there.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        match &mut self.repr {
            Repr::Ints(v) => match string2ll(member).map(|n| v.binary_search(&n)) {
                Some(Ok(at)) => {
                    v.remove(at);
                    true
                }
                _ => false,
            },
            Repr::Hash(h) => h.remove(member),
        }
    }

    pub fn remove_ref(&mut self, m: MemberRef) -> bool {
        match (&mut self.repr, m) {
            (Repr::Ints(v), MemberRef::Int(n)) => match v.binary_search(&n) {
                Ok(at) => {
                    v.remove(at);
                    true
                }
                Err(_) => false,
            },
            _ => m.with_bytes(|b| self.remove(b)),
        }
    }

    /// A uniformly random member, or None if empty.
    pub fn random(&self, rng: &mut Rng) -> Option<MemberRef<'_>> {
        match &self.repr {
            Repr::Ints(v) if v.is_empty() => None,
            Repr::Ints(v) => Some(MemberRef::Int(v[rng.below(v.len())])),
            Repr::Hash(h) => h.random(rng).map(MemberRef::Bytes),
        }
    }

    /// One SSCAN step from `cursor`, calling `f` on each member returned; the result
    /// is the next cursor, 0 when the scan is complete. An intset is returned whole
    /// (as Redis does for its compact encodings); a hashtable is walked in hash order,
    /// about `count` members per call (see the module comment).
    pub fn scan<'a>(&'a self, cursor: u64, count: usize, mut f: impl FnMut(MemberRef<'a>)) -> u64 {
        match &self.repr {
            Repr::Ints(v) => {
                v.iter().for_each(|&n| f(MemberRef::Int(n)));
                0
            }
            Repr::Hash(h) => h.scan(cursor, count.max(1), &mut |b| f(MemberRef::Bytes(b))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Rng;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn limits(max: i64) -> EncodingLimits {
        EncodingLimits {
            set_max_intset_entries: max,
            ..EncodingLimits::default()
        }
    }

    fn members(s: &SetValue) -> BTreeSet<Vec<u8>> {
        s.iter().map(|m| m.with_bytes(|b| b.to_vec())).collect()
    }

    /// Runs a whole SSCAN, applying `between` after each call; returns what it saw.
    fn full_scan(
        s: &mut SetValue,
        count: usize,
        mut between: impl FnMut(&mut SetValue, usize),
    ) -> Vec<Vec<u8>> {
        let mut seen = Vec::new();
        let mut cursor = 0;
        let mut calls = 0;
        loop {
            cursor = s.scan(cursor, count, |m| seen.push(m.with_bytes(|b| b.to_vec())));
            calls += 1;
            assert!(calls < 1_000_000, "scan does not terminate");
            if cursor == 0 {
                return seen;
            }
            between(s, calls);
        }
    }

    #[test]
    fn encodings_follow_redis() {
        let l = limits(4);
        let mut s = SetValue::default();
        for m in [&b"3"[..], b"1", b"2", b"-7"] {
            assert!(s.insert(m, &l));
        }
        assert!(!s.insert(b"2", &l));
        assert_eq!(s.encoding(), "intset");
        let order: Vec<_> = s.iter().collect();
        assert_eq!(order, [-7, 1, 2, 3].map(MemberRef::Int));
        // Non-canonical integers are strings.
        let mut t = s.clone();
        assert!(t.insert(b"01", &l));
        assert_eq!(t.encoding(), "hashtable");
        assert!(t.contains(b"01") && t.contains(b"3") && !t.contains(b"1 "));
        // One member too many.
        assert!(s.insert(b"9", &l));
        assert_eq!(s.encoding(), "hashtable");
        assert_eq!(s.len(), 5);
        // Never back to intset.
        for m in [&b"-7"[..], b"1", b"2", b"3"] {
            assert!(s.remove(m));
        }
        assert_eq!(s.encoding(), "hashtable");
        assert!(s.contains_ref(MemberRef::Int(9)));
        // set-max-intset-entries 0: even one integer makes a hashtable.
        let mut z = SetValue::default();
        z.insert(b"1", &limits(0));
        assert_eq!(z.encoding(), "hashtable");
    }

    #[test]
    fn big_sets_split_scan_and_shrink() {
        let l = limits(512);
        let mut s = SetValue::default();
        let n = 20_000;
        for i in 0..n {
            s.insert(format!("m:{i}").as_bytes(), &l);
        }
        assert_eq!(s.len(), n);
        let Repr::Hash(h) = &s.repr else {
            panic!("not a hashtable")
        };
        assert!(h.segs.len() > 40);
        assert!(h.segs.iter().all(|seg| seg.table.len() <= SEG_MAX));
        let seen = full_scan(&mut s, 10, |_, _| {});
        assert_eq!(seen.len(), n, "each member exactly once");
        assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), n);
        for i in 0..n - 10 {
            assert!(s.remove(format!("m:{i}").as_bytes()));
        }
        let Repr::Hash(h) = &s.repr else {
            panic!("not a hashtable")
        };
        assert_eq!(h.segs.len(), 1, "shrunk back to one segment");
        assert_eq!(members(&s).len(), 10);
    }

    #[test]
    fn scan_survives_a_rebuild_mid_way() {
        let l = limits(512);
        let mut s = SetValue::default();
        let n = 20_000;
        for i in 0..n {
            s.insert(format!("m:{i}").as_bytes(), &l);
        }
        // After a few calls delete 95% of the set: the directory collapses and every
        // member moves, yet the survivors must all still come back.
        let seen = full_scan(&mut s, 50, |s, call| {
            if call == 5 {
                for i in (0..n).filter(|i| i % 20 != 0) {
                    s.remove(format!("m:{i}").as_bytes());
                }
                let Repr::Hash(h) = &s.repr else {
                    panic!("not a hashtable")
                };
                assert!(
                    h.segs.len() <= 16,
                    "rebuilt into few segments: {}",
                    h.segs.len()
                );
            }
        });
        let seen: BTreeSet<Vec<u8>> = seen.into_iter().collect();
        for i in (0..n).step_by(20) {
            assert!(seen.contains(format!("m:{i}").as_bytes()), "missed m:{i}");
        }
    }

    #[test]
    fn random_members_are_fair() {
        let l = limits(512);
        let mut s = SetValue::default();
        for i in 0..2000 {
            s.insert(format!("k{i}").as_bytes(), &l);
        }
        let mut rng = Rng::new(42);
        let mut hits = std::collections::HashMap::new();
        for _ in 0..200_000 {
            let m = s.random(&mut rng).map(|m| m.with_bytes(|b| b.to_vec()));
            *hits.entry(m).or_insert(0u32) += 1;
        }
        assert_eq!(hits.len(), 2000);
        // Expected 100 each; a fair sampler stays well inside these bounds.
        assert!(
            hits.values().all(|&c| (40..200).contains(&c)),
            "{:?}",
            hits.values().max()
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(Vec<u8>),
        Rem(Vec<u8>),
    }

    fn member() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            (-50i64..50).prop_map(|n| n.to_string().into_bytes()),
            any::<i64>().prop_map(|n| n.to_string().into_bytes()),
            "[a-c0-9]{0,3}".prop_map(|s| s.into_bytes()),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![3 => member().prop_map(Op::Add), 1 => member().prop_map(Op::Rem)]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn behaves_like_a_btreeset(ops in prop::collection::vec(op(), 0..400), max in 0i64..40) {
            let l = limits(max);
            let mut s = SetValue::default();
            let mut model = BTreeSet::new();
            let mut converted = false;
            for o in ops {
                match o {
                    Op::Add(m) => prop_assert_eq!(s.insert(&m, &l), model.insert(m.clone())),
                    Op::Rem(m) => prop_assert_eq!(s.remove(&m), model.remove(&m)),
                }
                let all_ints = model.iter().all(|m| string2ll(m).is_some());
                converted |= !all_ints || model.len() > max as usize;
                prop_assert_eq!(s.encoding(), if converted { "hashtable" } else { "intset" });
                prop_assert_eq!(s.len(), model.len());
            }
            prop_assert_eq!(members(&s), model.clone());
            for m in &model {
                prop_assert!(s.contains(m));
            }
            let mut restored = SetValue::default();
            for m in &model {
                restored.insert(m, &l);
            }
            prop_assert_eq!(members(&restored), model);
        }

        /// Members present for the whole scan come back; nothing that never existed does.
        #[test]
        fn scan_survives_changes(initial in 0usize..3000, count in 5usize..60, seed in any::<u64>()) {
            let l = limits(0);
            let mut s = SetValue::default();
            for i in 0..initial {
                s.insert(format!("a{i}").as_bytes(), &l);
            }
            let mut rng = Rng::new(seed);
            let mut removed = BTreeSet::new();
            let seen = full_scan(&mut s, count, |s, call| {
                // Grow and shrink the set between calls: splits and rebuilds happen.
                for j in 0..3 {
                    s.insert(format!("b{call}_{j}").as_bytes(), &l);
                }
                if initial > 0 {
                    let victim = format!("a{}", rng.below(initial));
                    if s.remove(victim.as_bytes()) {
                        removed.insert(victim.into_bytes());
                    }
                }
            });
            let seen: BTreeSet<Vec<u8>> = seen.into_iter().collect();
            for i in 0..initial {
                let m = format!("a{i}").into_bytes();
                prop_assert!(removed.contains(&m) || seen.contains(&m), "missed a{}", i);
            }
            prop_assert!(seen.iter().all(|m| m[0] == b'a' || m[0] == b'b'));
        }
    }
}
