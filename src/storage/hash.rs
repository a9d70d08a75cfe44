//! The hash value type, in Redis's two encodings:
//!
//! * `listpack`: a compact vector of (field, value) pairs in insertion order, searched
//!   linearly, while the hash has at most `hash-max-listpack-entries` fields and no field
//!   or value longer than `hash-max-listpack-value`. HGETALL/HKEYS/HVALS then list the
//!   fields in insertion order, as Redis's listpack does.
//! * `hashtable`: past either threshold the hash converts (never back, as in Redis) to an
//!   extendible hash table: small hashbrown segments under a directory indexed by the top
//!   bits of each field's *position*, a fixed bijection of its 64-bit hash. A segment of
//!   depth `d` holds the positions that share its top `d` bits.
//!
//! Segments split one at a time when they pass `SEG_MAX` pairs and merge with their
//! buddy when both get small, so the table never rehashes everything at once: a write
//! costs at most one segment's worth of moves (plus a directory doubling, which copies
//! one small index per segment), keeping latency flat as a hash grows.
//!
//! HSCAN's cursor is a position: "every field whose position is below the cursor has
//! been returned". A call returns whole segments starting at the cursor, and the next
//! cursor is where the last segment returned ends. Positions never change while a field
//! exists and segments always cover aligned position ranges, so however segments split
//! or merge between calls, a field present for the whole scan is returned exactly once,
//! and a scan ends after at most one call per segment. Fields and values are
//! [`ShortBytes`](super::short_bytes::ShortBytes): up to 22 bytes cost no allocation.

use std::hash::BuildHasher;

use hashbrown::hash_table::{self, Entry};
use hashbrown::{DefaultHashBuilder, HashTable};

use super::field_ttl::FieldTtls;
use super::keyspace::Rng;
use super::limits::EncodingLimits;

use super::short_bytes::{heap_len, ShortBytes as Bytes};

type Pair = (Bytes, Bytes);

fn pair_heap(p: &Pair) -> usize {
    p.0.heap_size() + p.1.heap_size()
}

/// A segment splits when it holds more pairs than this (tests use tiny segments so that
/// small hashes exercise splits, merges and directory changes).
const SEG_MAX: usize = if cfg!(test) { 4 } else { 64 };
/// Buddy segments merge when together they hold no more than this.
const SEG_MERGE: usize = if cfg!(test) { 2 } else { 16 };
/// Segments are never split deeper: only a flood of 64-bit hash collisions gets here.
const MAX_DEPTH: u32 = 56;
/// Odd constant of the hash → position bijection (Fibonacci hashing): the top bits of
/// the product mix every bit of the hash, so segments fill evenly, while hashbrown
/// inside a segment still sees the full-entropy hash.
const POS_MUL: u64 = 0x9E37_79B9_7F4A_7C15;

#[inline]
fn position(hash: u64) -> u64 {
    hash.wrapping_mul(POS_MUL)
}

/// Index of `pos` in a directory of `2^depth` slots.
#[inline]
fn slot_of(pos: u64, depth: u32) -> usize {
    pos.checked_shr(64 - depth).unwrap_or(0) as usize
}

/// Number of positions a segment of `depth` covers, as u128 (2^64 at depth 0).
#[inline]
fn span(depth: u32) -> u128 {
    1u128 << (64 - depth)
}

/// Fewest directory bits that give `n` fields about half a full segment each.
fn depth_for(n: usize) -> u32 {
    let mut depth = 0;
    while depth < MAX_DEPTH && n > (SEG_MAX / 2) << depth {
        depth += 1;
    }
    depth
}

/// One segment: the pairs whose positions start with the top `depth` bits of `start`.
#[derive(Clone)]
struct Seg {
    table: HashTable<Pair>,
    depth: u32,
    start: u64,
}

impl Seg {
    /// Where the next segment in position order starts; None after the last one.
    fn end(&self) -> Option<u64> {
        u64::try_from(self.start as u128 + span(self.depth)).ok()
    }
}

/// The `hashtable` encoding (extendible hashing). Invariants: `dir.len() == 1 << global`;
/// segment `s` of depth `d` fills the `2^(global - d)` directory slots from
/// `slot_of(s.start, global)`; `at_global` counts the segments whose depth is `global`.
#[derive(Clone)]
struct Table {
    dir: Vec<u32>,
    global: u32,
    segs: Vec<Seg>,
    /// u32 (a directory never holds 2^32 segments) so that `HashValue`, field TTL
    /// pointer included, stays in the allocator's 96-byte class.
    at_global: u32,
    len: usize,
    /// An upper bound of every segment's length, for fair random picks.
    max_seg: usize,
    hasher: DefaultHashBuilder,
}

impl Table {
    /// An empty table of `2^depth` segments of that depth, each sized for `per_seg`.
    fn with_depth(depth: u32, per_seg: usize) -> Table {
        let n = 1usize << depth;
        let segs = (0..n)
            .map(|i| Seg {
                table: HashTable::with_capacity(per_seg),
                depth,
                start: (i as u64).checked_shl(64 - depth).unwrap_or(0),
            })
            .collect();
        Table {
            dir: (0..n as u32).collect(),
            global: depth,
            segs,
            at_global: n as u32,
            len: 0,
            max_seg: 0,
            hasher: DefaultHashBuilder::default(),
        }
    }

    /// A table sized for `n` pairs.
    fn for_len(n: usize) -> Table {
        let depth = depth_for(n);
        Table::with_depth(depth, n >> depth)
    }

    /// A table holding `pairs`, whose fields must be distinct.
    fn from_unique(pairs: Vec<Pair>) -> Table {
        let mut t = Table::for_len(pairs.len());
        for p in pairs {
            let h = t.hash(p.0.as_bytes());
            let s = t.seg_index(h);
            let hasher = t.hasher;
            t.segs[s]
                .table
                .insert_unique(h, p, |q| hasher.hash_one(q.0.as_bytes()));
            t.added(s);
        }
        t
    }

    #[inline]
    fn hash(&self, field: &[u8]) -> u64 {
        self.hasher.hash_one(field)
    }

    #[inline]
    fn seg_index(&self, hash: u64) -> usize {
        self.dir[slot_of(position(hash), self.global)] as usize
    }

    /// The directory slots of a segment.
    fn slots(&self, start: u64, depth: u32) -> std::ops::Range<usize> {
        let first = slot_of(start, self.global);
        first..first + (1usize << (self.global - depth))
    }

    fn get(&self, field: &[u8]) -> Option<&Pair> {
        let h = self.hash(field);
        self.segs[self.seg_index(h)]
            .table
            .find(h, |p| p.0.as_bytes() == field)
    }

    /// Sets `field` to `value`; returns the old value if the field existed.
    fn insert(&mut self, field: &[u8], value: Bytes) -> Option<Bytes> {
        let h = self.hash(field);
        let s = self.seg_index(h);
        let hasher = self.hasher;
        let entry = self.segs[s].table.entry(
            h,
            |p| p.0.as_bytes() == field,
            |q| hasher.hash_one(q.0.as_bytes()),
        );
        match entry {
            Entry::Occupied(mut e) => return Some(std::mem::replace(&mut e.get_mut().1, value)),
            Entry::Vacant(e) => {
                e.insert((Bytes::new(field), value));
            }
        }
        self.added(s);
        None
    }

    /// Bookkeeping after a pair went into segment `s`: split it if it got too big.
    fn added(&mut self, s: usize) {
        self.len += 1;
        let n = self.segs[s].table.len();
        self.max_seg = self.max_seg.max(n);
        if n > SEG_MAX && self.segs[s].depth < MAX_DEPTH {
            self.split(s);
        }
    }

    /// Splits segment `s` in two by the next position bit, doubling the directory
    /// first if the segment is as deep as it.
    fn split(&mut self, s: usize) {
        let depth = self.segs[s].depth;
        if depth == self.global {
            self.dir = self.dir.iter().flat_map(|&i| [i, i]).collect();
            self.global += 1;
            self.at_global = 0;
        }
        let start = self.segs[s].start;
        let half = start | (1u64 << (63 - depth));
        let hasher = self.hasher;
        let mut upper = HashTable::with_capacity(self.segs[s].table.len());
        let moved = self.segs[s]
            .table
            .extract_if(|p| position(hasher.hash_one(p.0.as_bytes())) >= half);
        for p in moved {
            let h = hasher.hash_one(p.0.as_bytes());
            upper.insert_unique(h, p, |q| hasher.hash_one(q.0.as_bytes()));
        }
        self.segs[s].depth = depth + 1;
        let new = self.segs.len();
        self.segs.push(Seg {
            table: upper,
            depth: depth + 1,
            start: half,
        });
        for slot in self.slots(half, depth + 1) {
            self.dir[slot] = new as u32;
        }
        if depth + 1 == self.global {
            self.at_global += 2;
        }
    }

    fn remove(&mut self, field: &[u8]) -> Option<Pair> {
        let h = self.hash(field);
        let s = self.seg_index(h);
        let (p, _) = self.segs[s]
            .table
            .find_entry(h, |p| p.0.as_bytes() == field)
            .ok()?
            .remove();
        self.len -= 1;
        // A merged segment may now be small enough to merge with its own buddy.
        let mut s = s;
        while let Some(merged) = self.try_merge(s) {
            s = merged;
        }
        Some(p)
    }

    /// Merges segment `s` with its buddy (the other half of their parent's range) when
    /// both have the same depth and together hold at most `SEG_MERGE` pairs, then
    /// halves the directory if no segment needs its last bit any more. Returns the
    /// merged segment's index.
    fn try_merge(&mut self, s: usize) -> Option<usize> {
        let (depth, start) = (self.segs[s].depth, self.segs[s].start);
        if depth == 0 {
            return None;
        }
        let buddy_start = start ^ (1u64 << (64 - depth));
        let b = self.dir[slot_of(buddy_start, self.global)] as usize;
        let together = self.segs[s].table.len() + self.segs[b].table.len();
        if self.segs[b].depth != depth || together > SEG_MERGE {
            return None;
        }
        let (lo, hi) = if start < buddy_start { (s, b) } else { (b, s) };
        let hasher = self.hasher;
        for p in std::mem::take(&mut self.segs[hi].table) {
            let h = hasher.hash_one(p.0.as_bytes());
            self.segs[lo]
                .table
                .insert_unique(h, p, |q| hasher.hash_one(q.0.as_bytes()));
        }
        self.segs[lo].depth = depth - 1;
        for slot in self.slots(self.segs[lo].start, depth - 1) {
            self.dir[slot] = lo as u32;
        }
        if depth == self.global {
            self.at_global -= 2;
        }
        // Drop the emptied segment; the last one takes its index.
        let last = self.segs.len() - 1;
        self.segs.swap_remove(hi);
        if let Some(moved) = self.segs.get(hi) {
            for slot in self.slots(moved.start, moved.depth) {
                self.dir[slot] = hi as u32;
            }
        }
        if self.at_global == 0 && self.global > 0 {
            self.dir = self.dir.iter().step_by(2).copied().collect();
            self.global -= 1;
            let global = self.global;
            self.at_global = self.segs.iter().filter(|s| s.depth == global).count() as u32;
        }
        Some(if lo == last { hi } else { lo })
    }

    /// A uniformly chosen pair: a random segment and a random rank below `max_seg`,
    /// retried when the rank is past the segment's end, so every pair is equally
    /// likely whatever the segment sizes.
    fn random(&self, rng: &mut Rng) -> Option<&Pair> {
        if self.len == 0 {
            return None;
        }
        let bound = self.max_seg.max(1);
        for _ in 0..64 {
            let seg = &self.segs[rng.below(self.segs.len())].table;
            let k = rng.below(bound);
            if k < seg.len() {
                return seg.iter().nth(k);
            }
        }
        // Unlucky: pick by global rank instead (uniform too, only slower).
        let mut k = rng.below(self.len);
        for seg in &self.segs {
            if k < seg.table.len() {
                return seg.table.iter().nth(k);
            }
            k -= seg.table.len();
        }
        None
    }

    /// Calls `f` on the pairs of whole segments in position order from `cursor` on,
    /// until `count` pairs were visited or `10 * count` segments were looked at (Redis's
    /// bound on empty buckets). Returns the next cursor, 0 when the scan is complete.
    fn scan<'a>(
        &'a self,
        cursor: u64,
        count: usize,
        f: &mut impl FnMut(&'a [u8], &'a [u8]),
    ) -> u64 {
        let mut pos = cursor;
        let (mut visited, mut segs) = (0usize, 0usize);
        let max_segs = count.saturating_mul(10);
        loop {
            let seg = &self.segs[self.dir[slot_of(pos, self.global)] as usize];
            // After a merge the cursor may fall inside a segment: skip what was returned.
            let partial = pos != seg.start;
            for p in &seg.table {
                if !partial || position(self.hash(p.0.as_bytes())) >= pos {
                    f(p.0.as_bytes(), p.1.as_bytes());
                    visited += 1;
                }
            }
            segs += 1;
            let Some(end) = seg.end() else {
                return 0;
            };
            pos = end;
            if visited >= count || segs >= max_segs {
                return pos;
            }
        }
    }

    /// Heap bytes, exact for a few segments and estimated from a sample beyond: every
    /// write re-measures its key, so this must not walk a million-field hash.
    fn heap_size(&self) -> usize {
        const EXACT: usize = 16;
        let sample: usize = self
            .segs
            .iter()
            .take(EXACT)
            .map(|s| s.table.allocation_size())
            .sum();
        let tables = if self.segs.len() <= EXACT {
            sample
        } else {
            let sampled_len: usize = self.segs.iter().take(EXACT).map(|s| s.table.len()).sum();
            sample * self.len / sampled_len.max(1)
        };
        tables
            + self.segs.capacity() * std::mem::size_of::<Seg>()
            + self.dir.capacity() * std::mem::size_of::<u32>()
    }

    /// Checks every structural invariant (tests only).
    #[cfg(test)]
    fn check(&self) {
        assert_eq!(self.dir.len(), 1 << self.global);
        assert_eq!(
            self.len,
            self.segs.iter().map(|s| s.table.len()).sum::<usize>()
        );
        let at_global = self.segs.iter().filter(|s| s.depth == self.global).count();
        assert_eq!(self.at_global as usize, at_global);
        assert!(self.global == 0 || at_global > 0, "directory could shrink");
        let mut slots = 0;
        for (i, seg) in self.segs.iter().enumerate() {
            assert!(seg.depth <= self.global);
            assert_eq!(seg.start as u128 % span(seg.depth), 0, "aligned start");
            for slot in self.slots(seg.start, seg.depth) {
                assert_eq!(self.dir[slot] as usize, i);
                slots += 1;
            }
            for p in &seg.table {
                let pos = position(self.hash(p.0.as_bytes())) as u128;
                assert!(pos >= seg.start as u128 && pos < seg.start as u128 + span(seg.depth));
            }
            assert!(seg.table.len() <= self.max_seg);
        }
        assert_eq!(slots, self.dir.len());
    }
}

#[derive(Clone)]
enum Enc {
    Listpack(Vec<Pair>),
    Table(Table),
}

impl Default for Enc {
    fn default() -> Self {
        Enc::Listpack(Vec::new())
    }
}

/// A hash: field → value.
#[derive(Clone, Default)]
pub struct HashValue {
    enc: Enc,
    /// Heap bytes of the field and value strings, kept current so `heap_size` is cheap.
    str_heap: usize,
    /// Field deadlines, from the first HEXPIRE on (None for a hash that never had
    /// one, so TTL bookkeeping costs plain hashes nothing). A listpack keeps it even
    /// when empty: it stays `listpackex`, as in Redis, and orders its fields by
    /// deadline (earliest first, fields without one after, in insertion order).
    ttls: Option<Box<FieldTtls>>,
}

impl std::fmt::Debug for HashValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(
                self.iter()
                    .map(|(k, v)| (String::from_utf8_lossy(k), String::from_utf8_lossy(v))),
            )
            .finish()
    }
}

/// Iterates a hash's pairs: in insertion order for a listpack, segment order for a table.
pub struct Iter<'a> {
    packed: std::slice::Iter<'a, Pair>,
    segs: std::slice::Iter<'a, Seg>,
    seg: Option<hash_table::Iter<'a, Pair>>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(p) = self.packed.next() {
            return Some((p.0.as_bytes(), p.1.as_bytes()));
        }
        loop {
            if let Some(p) = self.seg.as_mut().and_then(|s| s.next()) {
                return Some((p.0.as_bytes(), p.1.as_bytes()));
            }
            self.seg = Some(self.segs.next()?.table.iter());
        }
    }
}

fn too_long(b: &[u8], limits: &EncodingLimits) -> bool {
    b.len() as i64 > limits.hash_max_listpack_value
}

impl HashValue {
    pub fn new() -> HashValue {
        HashValue::default()
    }

    /// OBJECT ENCODING's name for the current representation.
    pub fn encoding(&self) -> &'static str {
        match (&self.enc, &self.ttls) {
            (Enc::Listpack(_), None) => "listpack",
            (Enc::Listpack(_), Some(_)) => "listpackex",
            (Enc::Table(_), _) => "hashtable",
        }
    }

    /// Lazy free: drops whole table segments until about `budget` pairs went. True
    /// once nothing big is left; the hash is then only fit for dropping.
    pub fn shed(&mut self, budget: usize) -> bool {
        let Enc::Table(t) = &mut self.enc else {
            return true;
        };
        let mut freed = 0;
        while freed < budget {
            match t.segs.pop() {
                Some(seg) => freed += seg.table.len(),
                None => return true,
            }
        }
        t.segs.is_empty()
    }

    /// Heap bytes held, for memory accounting.
    pub fn heap_size(&self) -> usize {
        let structure = match &self.enc {
            Enc::Listpack(v) => v.capacity() * std::mem::size_of::<Pair>(),
            Enc::Table(t) => t.heap_size(),
        };
        let ttls = self.ttls.as_ref().map_or(0, |t| {
            super::memory::alloc_size(std::mem::size_of::<FieldTtls>()) + t.heap_size()
        });
        structure + self.str_heap + ttls
    }

    pub fn len(&self) -> usize {
        match &self.enc {
            Enc::Listpack(v) => v.len(),
            Enc::Table(t) => t.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        match &self.enc {
            Enc::Listpack(v) => v.iter().find(|p| p.0.as_bytes() == field),
            Enc::Table(t) => t.get(field),
        }
        .map(|p| p.1.as_bytes())
    }

    pub fn contains(&self, field: &[u8]) -> bool {
        self.get(field).is_some()
    }

    /// Sets `field` to `value`, converting to a hashtable when `limits` say so (before
    /// adding a too-long string, after passing the entry count). True if the field is new.
    /// An overwritten field loses its deadline (Redis 7.4's HSET).
    pub fn set(&mut self, field: &[u8], value: &[u8], limits: &EncodingLimits) -> bool {
        let new = self.store(field, value, limits);
        if !new && self.ttls.is_some() {
            self.persist_field(field);
        }
        new
    }

    /// `set`, but an overwritten field keeps its deadline (HINCRBY, HINCRBYFLOAT).
    pub fn set_keep_ttl(&mut self, field: &[u8], value: &[u8], limits: &EncodingLimits) -> bool {
        self.store(field, value, limits)
    }

    fn store(&mut self, field: &[u8], value: &[u8], limits: &EncodingLimits) -> bool {
        if matches!(self.enc, Enc::Listpack(_))
            && (too_long(field, limits) || too_long(value, limits))
        {
            self.convert();
        }
        let value = Bytes::new(value);
        let added_heap = value.heap_size();
        let (old, convert) = match &mut self.enc {
            Enc::Listpack(v) => match v.iter_mut().find(|p| p.0.as_bytes() == field) {
                Some(p) => (Some(std::mem::replace(&mut p.1, value)), false),
                None => {
                    v.push((Bytes::new(field), value));
                    (None, v.len() as i64 > limits.hash_max_listpack_entries)
                }
            },
            Enc::Table(t) => (t.insert(field, value), false),
        };
        self.str_heap += added_heap;
        match old {
            Some(ref old) => self.str_heap -= old.heap_size(),
            None => self.str_heap += heap_len(field),
        }
        if convert {
            self.convert();
        }
        old.is_none()
    }

    /// Removes a field; true if it existed.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        let removed = match &mut self.enc {
            Enc::Listpack(v) => v
                .iter()
                .position(|p| p.0.as_bytes() == field)
                .map(|i| v.remove(i)),
            Enc::Table(t) => t.remove(field),
        };
        match removed {
            Some(p) => {
                self.str_heap -= pair_heap(&p);
                if let Some(t) = self.ttls.as_deref_mut() {
                    t.remove(field);
                }
                true
            }
            None => false,
        }
    }

    /// Whether some field has a deadline.
    #[inline]
    pub fn has_field_ttls(&self) -> bool {
        self.ttls.as_ref().is_some_and(|t| !t.is_empty())
    }

    /// The earliest field deadline (unix ms).
    #[inline]
    pub fn min_field_expire(&self) -> Option<u64> {
        self.ttls.as_ref()?.min()
    }

    /// Whether some field's deadline is `<= now`.
    #[inline]
    pub fn fields_due(&self, now: u64) -> bool {
        self.min_field_expire().is_some_and(|at| at <= now)
    }

    /// The field's deadline; None when it has none (or does not exist).
    pub fn field_expire(&self, field: &[u8]) -> Option<u64> {
        self.ttls.as_ref()?.get(field)
    }

    /// Gives an existing field the deadline `at` (unix ms). False if no such field.
    pub fn set_field_expire(&mut self, field: &[u8], at: u64) -> bool {
        if !self.contains(field) {
            return false;
        }
        self.ttls.get_or_insert_with(Box::default).set(field, at);
        self.place_by_deadline(field, Some(at));
        true
    }

    /// Drops a field's deadline; true if it had one.
    pub fn persist_field(&mut self, field: &[u8]) -> bool {
        let Some(t) = self.ttls.as_deref_mut() else {
            return false;
        };
        if t.remove(field).is_none() {
            return false;
        }
        if t.is_empty() && matches!(self.enc, Enc::Table(_)) {
            self.ttls = None;
        }
        self.place_by_deadline(field, None);
        true
    }

    /// Gives the fields the deadlines a payload or file carries (0: none), keeping the
    /// fields in the order they came in, as Redis uses a loaded listpackex as it is
    /// (a listpack is only sorted by deadline, stably, in case the source was not).
    pub fn load_field_deadlines<'a>(&mut self, deadlines: impl Iterator<Item = (&'a [u8], u64)>) {
        let ttls = self.ttls.get_or_insert_with(Box::default);
        for (field, at) in deadlines.filter(|(_, at)| *at != 0) {
            ttls.set(field, at);
        }
        match &mut self.enc {
            Enc::Listpack(v) => v.sort_by_key(|p| ttls.get(p.0.as_bytes()).unwrap_or(u64::MAX)),
            Enc::Table(_) if ttls.is_empty() => self.ttls = None,
            Enc::Table(_) => {}
        }
    }

    /// Deletes up to `max` fields whose deadline is `<= now`, earliest first, calling
    /// `gone` with each. Returns how many went.
    pub fn expire_due_fields(
        &mut self,
        now: u64,
        max: usize,
        mut gone: impl FnMut(&[u8]),
    ) -> usize {
        let mut n = 0;
        while n < max {
            let Some(field) = self.ttls.as_deref_mut().and_then(|t| t.pop_due(now)) else {
                break;
            };
            self.remove(&field);
            gone(&field);
            n += 1;
        }
        if n > 0 && matches!(self.enc, Enc::Table(_)) && !self.has_field_ttls() {
            self.ttls = None;
        }
        n
    }

    /// Moves a listpack's field to where Redis's listpackex keeps it: fields with a
    /// deadline first, earliest first (before those with the same one, as Redis's
    /// listpackExAddInternal inserts); the others after them, the field last of all.
    /// A table has no order to keep.
    fn place_by_deadline(&mut self, field: &[u8], at: Option<u64>) {
        let (Enc::Listpack(v), Some(ttls)) = (&mut self.enc, self.ttls.as_deref()) else {
            return;
        };
        let Some(i) = v.iter().position(|p| p.0.as_bytes() == field) else {
            return;
        };
        let pair = v.remove(i);
        let to = match at {
            None => v.len(),
            Some(at) => v
                .iter()
                .position(|p| ttls.get(p.0.as_bytes()).is_none_or(|t| t >= at))
                .unwrap_or(v.len()),
        };
        v.insert(to, pair);
    }

    /// Switches a listpack to the hashtable encoding.
    fn convert(&mut self) {
        if let Enc::Listpack(v) = &mut self.enc {
            let pairs = std::mem::take(v);
            self.enc = Enc::Table(Table::from_unique(pairs));
        }
    }

    pub fn iter(&self) -> Iter<'_> {
        match &self.enc {
            Enc::Listpack(v) => Iter {
                packed: v.iter(),
                segs: [].iter(),
                seg: None,
            },
            Enc::Table(t) => Iter {
                packed: [].iter(),
                segs: t.segs.iter(),
                seg: None,
            },
        }
    }

    /// A uniformly chosen pair, None if empty.
    pub fn random_pair(&self, rng: &mut Rng) -> Option<(&[u8], &[u8])> {
        let p = match &self.enc {
            Enc::Listpack(v) => v.get(rng.below(v.len()))?,
            Enc::Table(t) => t.random(rng)?,
        };
        Some((p.0.as_bytes(), p.1.as_bytes()))
    }

    /// `count` distinct pairs chosen uniformly (the whole hash if it has no more).
    /// A listpack answers in its own order, as Redis's lpRandomPairsUnique does.
    pub fn random_distinct(&self, count: usize, rng: &mut Rng) -> Vec<(&[u8], &[u8])> {
        let n = self.len();
        if count >= n {
            return self.iter().collect();
        }
        match &self.enc {
            Enc::Listpack(_) => selection_sample(self.iter(), n, count, rng),
            Enc::Table(_) if count * 3 > n => {
                // Many wanted: a partial shuffle of everything.
                let mut all: Vec<(&[u8], &[u8])> = self.iter().collect();
                for i in 0..count {
                    let j = i + rng.below(n - i);
                    all.swap(i, j);
                }
                all.truncate(count);
                all
            }
            Enc::Table(t) => {
                // Few wanted: random picks, skipping repeats.
                let mut seen = hashbrown::HashSet::with_capacity(count);
                let mut out = Vec::with_capacity(count);
                while out.len() < count {
                    let Some(p) = t.random(rng) else { break };
                    if seen.insert(p.0.as_bytes()) {
                        out.push((p.0.as_bytes(), p.1.as_bytes()));
                    }
                }
                out
            }
        }
    }

    /// One HSCAN step from `cursor`: calls `f` for the pairs returned and gives the
    /// next cursor (0 = done). A listpack is returned whole, as Redis does.
    pub fn scan<'a>(
        &'a self,
        cursor: u64,
        count: usize,
        mut f: impl FnMut(&'a [u8], &'a [u8]),
    ) -> u64 {
        match &self.enc {
            Enc::Listpack(v) => {
                for p in v {
                    f(p.0.as_bytes(), p.1.as_bytes());
                }
                0
            }
            Enc::Table(t) => t.scan(cursor, count.max(1), &mut f),
        }
    }

    /// Builds a hash from `pairs`, choosing the encoding by `limits`, in one pass:
    /// a listpack is filled as is and a table is sized for all pairs up front (what
    /// RESTORE needs for a large hash). The fields must be distinct: a caller with
    /// untrusted pairs checks that first (the RDB reader rejects duplicates).
    pub fn from_pairs(pairs: &[(Vec<u8>, Vec<u8>)], limits: &EncodingLimits) -> HashValue {
        let small = pairs.len() as i64 <= limits.hash_max_listpack_entries
            && pairs
                .iter()
                .all(|(f, v)| !too_long(f, limits) && !too_long(v, limits));
        let mut h = HashValue::new();
        if small {
            // Distinct fields are the caller's promise (see above).
            let packed: Vec<Pair> = pairs
                .iter()
                .map(|(f, v)| (Bytes::new(f), Bytes::new(v)))
                .collect();
            h.str_heap = packed.iter().map(pair_heap).sum();
            h.enc = Enc::Listpack(packed);
        } else {
            h.enc = Enc::Table(Table::for_len(pairs.len()));
            for (f, v) in pairs {
                h.set(f, v, limits);
            }
        }
        h
    }
}

/// Knuth's selection sampling: `k` of the `n` items of `it`, uniformly, in order.
fn selection_sample<T>(it: impl Iterator<Item = T>, n: usize, k: usize, rng: &mut Rng) -> Vec<T> {
    let mut out = Vec::with_capacity(k);
    for (seen, item) in it.enumerate() {
        if out.len() == k {
            break;
        }
        if rng.below(n - seen) < k - out.len() {
            out.push(item);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Rng;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn limits(entries: i64, value: i64) -> EncodingLimits {
        EncodingLimits {
            hash_max_listpack_entries: entries,
            hash_max_listpack_value: value,
            ..EncodingLimits::default()
        }
    }

    fn field(i: usize) -> Vec<u8> {
        format!("field:{i}").into_bytes()
    }

    #[test]
    fn converts_past_either_threshold_and_never_back() {
        let l = limits(4, 8);
        let mut h = HashValue::new();
        for i in 0..4 {
            assert!(h.set(&field(i), b"v", &l));
        }
        assert_eq!(h.encoding(), "listpack");
        assert!(h.set(&field(4), b"v", &l));
        assert_eq!(h.encoding(), "hashtable");
        for i in 0..5 {
            assert!(h.remove(&field(i)));
        }
        assert!(h.is_empty());
        assert_eq!(h.encoding(), "hashtable");

        let mut h = HashValue::new();
        h.set(b"a", b"12345678", &l);
        assert_eq!(h.encoding(), "listpack");
        h.set(b"a", b"123456789", &l);
        assert_eq!(h.encoding(), "hashtable");
        assert_eq!(h.get(b"a"), Some(&b"123456789"[..]));
    }

    #[test]
    fn listpack_keeps_insertion_order() {
        let l = limits(128, 64);
        let mut h = HashValue::new();
        for f in ["c", "a", "b"] {
            h.set(f.as_bytes(), b"1", &l);
        }
        h.set(b"a", b"2", &l);
        h.remove(b"c");
        h.set(b"c", b"3", &l);
        let order: Vec<&[u8]> = h.iter().map(|(f, _)| f).collect();
        assert_eq!(order, vec![&b"a"[..], b"b", b"c"]);
    }

    fn table(h: &HashValue) -> &Table {
        match &h.enc {
            Enc::Table(t) => t,
            Enc::Listpack(_) => panic!("not a table"),
        }
    }

    #[test]
    fn tables_split_and_merge_segments() {
        let l = limits(0, 64);
        let mut h = HashValue::new();
        for i in 0..5000 {
            h.set(&field(i), &field(i), &l);
            if i % 97 == 0 {
                table(&h).check();
            }
        }
        let t = table(&h);
        t.check();
        assert!(t.global >= 10, "global depth {}", t.global);
        assert!(t.segs.len() >= 5000 / SEG_MAX);
        for i in 0..4990 {
            assert!(h.remove(&field(i)));
            if i % 89 == 0 {
                table(&h).check();
            }
        }
        let t = table(&h);
        t.check();
        // Merges leave at most a few segments per remaining pair.
        assert!(
            t.segs.len() <= 10 * (t.global as usize + 1),
            "segments {}",
            t.segs.len()
        );
        assert_eq!(h.len(), 10);
        for i in 4990..5000 {
            assert_eq!(h.get(&field(i)), Some(&field(i)[..]));
        }
        for i in 0..4990 {
            assert_eq!(h.get(&field(i)), None);
        }
    }

    #[test]
    fn conversion_and_restore_presize_the_directory() {
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..1000).map(|i| (field(i), field(i))).collect();
        let h = HashValue::from_pairs(&pairs, &limits(128, 64));
        let t = table(&h);
        t.check();
        assert_eq!(t.len, 1000);
        assert!(t.global >= depth_for(1000));
    }

    #[test]
    fn heap_size_tracks_strings() {
        let l = limits(128, 1000);
        let mut h = HashValue::new();
        h.set(b"f", &[b'x'; 100], &l);
        let with_big = h.heap_size();
        h.set(b"f", b"small", &l);
        assert_eq!(h.str_heap, 0);
        assert!(h.heap_size() < with_big);
        h.set(&[b'k'; 30], &[b'y'; 40], &l);
        assert_eq!(h.str_heap, 70);
        h.remove(&[b'k'; 30]);
        assert_eq!(h.str_heap, 0);
    }

    #[test]
    fn random_picks_are_fair_on_tables() {
        let l = limits(0, 64);
        let mut h = HashValue::new();
        for i in 0..200 {
            h.set(&field(i), b"v", &l);
        }
        let mut rng = Rng::new(42);
        let mut counts: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
        for _ in 0..200_000 {
            let (f, _) = h.random_pair(&mut rng).expect("non-empty");
            *counts.entry(f.to_vec()).or_default() += 1;
        }
        assert_eq!(counts.len(), 200);
        // Expected 1000 each; a fair picker stays well within ±25%.
        assert!(
            counts.values().all(|&c| (750..1250).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn distinct_picks() {
        let mut rng = Rng::new(7);
        for (entries, n) in [(128, 10), (0, 10), (0, 300)] {
            let l = limits(entries, 64);
            let mut h = HashValue::new();
            for i in 0..n {
                h.set(&field(i), b"v", &l);
            }
            for count in [1, 2, n / 3, n / 2, n - 1, n, n + 5] {
                let got = h.random_distinct(count, &mut rng);
                let set: BTreeSet<&[u8]> = got.iter().map(|p| p.0).collect();
                assert_eq!(got.len(), count.min(n));
                assert_eq!(set.len(), got.len());
            }
        }
    }

    /// Runs a whole HSCAN, applying `between` after every call.
    fn full_scan(
        h: &mut HashValue,
        count: usize,
        mut between: impl FnMut(&mut HashValue),
    ) -> Vec<Vec<u8>> {
        let mut seen = Vec::new();
        let mut cursor = 0;
        for _ in 0..100_000 {
            cursor = h.scan(cursor, count, |f, _| seen.push(f.to_vec()));
            if cursor == 0 {
                return seen;
            }
            between(h);
        }
        panic!("scan did not terminate");
    }

    #[test]
    fn scan_survives_growth_and_shrinking() {
        let l = limits(0, 64);
        let mut h = HashValue::new();
        for i in 0..1000 {
            h.set(&field(i), b"v", &l);
        }
        // Grow a lot during the scan: the original fields are all returned, once.
        let mut next = 1000;
        let seen = full_scan(&mut h, 10, |h| {
            for _ in 0..50 {
                h.set(&field(next), b"v", &l);
                next += 1;
            }
        });
        let set: BTreeSet<Vec<u8>> = seen.iter().cloned().collect();
        assert_eq!(set.len(), seen.len(), "no duplicates");
        assert!((0..1000).all(|i| set.contains(&field(i))));

        // Shrink a lot during the scan: the fields that stay are all returned.
        let total = h.len();
        let mut gone = 1000;
        let seen: BTreeSet<Vec<u8>> = full_scan(&mut h, 10, |h| {
            for _ in 0..200 {
                if gone < next {
                    h.remove(&field(gone));
                    gone += 1;
                }
            }
        })
        .into_iter()
        .collect();
        assert!(total > 1000);
        assert!((0..1000).all(|i| seen.contains(&field(i))));
    }

    /// Every hash value is boxed: adding field TTLs must not move the box to a bigger
    /// size class (jemalloc's classes run 80, 96, 112).
    #[test]
    fn a_hash_stays_in_its_size_class() {
        assert!(std::mem::size_of::<HashValue>() <= 96);
    }

    #[test]
    fn field_deadlines_follow_writes() {
        for entries in [128, 0] {
            let l = limits(entries, 64);
            let mut h = HashValue::new();
            for i in 0..5 {
                h.set(&field(i), b"v", &l);
            }
            assert!(!h.has_field_ttls() && h.ttls.is_none());
            assert!(!h.set_field_expire(b"nope", 10));
            assert!(h.set_field_expire(&field(1), 30));
            assert!(h.set_field_expire(&field(2), 20));
            assert!(h.set_field_expire(&field(3), 40));
            assert_eq!(h.min_field_expire(), Some(20));
            // Overwriting drops the deadline, keep-TTL writes and HDEL as Redis 7.4.
            h.set(&field(3), b"w", &l);
            assert_eq!(h.field_expire(&field(3)), None);
            h.set_keep_ttl(&field(1), b"w", &l);
            assert_eq!(h.field_expire(&field(1)), Some(30));
            assert!(h.persist_field(&field(1)));
            assert!(!h.persist_field(&field(1)));
            assert!(h.set_field_expire(&field(4), 25));
            // Due fields go earliest first, up to the limit.
            let mut gone = Vec::new();
            assert_eq!(h.expire_due_fields(30, 1, |f| gone.push(f.to_vec())), 1);
            assert_eq!(h.expire_due_fields(30, 9, |f| gone.push(f.to_vec())), 1);
            assert_eq!(gone, vec![field(2), field(4)]);
            assert_eq!(h.len(), 3);
            assert!(!h.fields_due(u64::MAX));
            if entries == 0 {
                assert!(h.ttls.is_none(), "a table drops empty bookkeeping");
            } else {
                assert_eq!(h.encoding(), "listpackex");
            }
        }
    }

    #[test]
    fn listpackex_orders_by_deadline_and_survives_conversion() {
        let l = limits(4, 64);
        let mut h = HashValue::new();
        for i in 0..4 {
            h.set(&field(i), b"v", &l);
        }
        h.set_field_expire(&field(2), 50);
        h.set_field_expire(&field(0), 60);
        h.set_field_expire(&field(3), 50);
        let order: Vec<Vec<u8>> = h.iter().map(|(f, _)| f.to_vec()).collect();
        // Equal deadlines: the later one goes first, as in Redis.
        assert_eq!(order, vec![field(3), field(2), field(0), field(1)]);
        // A loaded listpack keeps its order.
        let pairs: Vec<(Vec<u8>, Vec<u8>)> =
            order.iter().map(|f| (f.clone(), b"v".to_vec())).collect();
        let mut loaded = HashValue::from_pairs(&pairs, &l);
        let deadlines = [
            (field(3), 50),
            (field(2), 50),
            (field(0), 60),
            (field(1), 0),
        ];
        loaded.load_field_deadlines(deadlines.iter().map(|(f, at)| (&f[..], *at)));
        let again: Vec<Vec<u8>> = loaded.iter().map(|(f, _)| f.to_vec()).collect();
        assert_eq!(again, order);
        assert_eq!(loaded.field_expire(&field(0)), Some(60));
        assert_eq!(loaded.encoding(), "listpackex");
        let with_ttls = h.heap_size();
        h.set(&field(9), b"v", &l);
        assert_eq!(h.encoding(), "hashtable");
        assert_eq!(h.field_expire(&field(0)), Some(60));
        assert!(with_ttls > 0);
        h.remove(&field(0));
        assert_eq!(h.field_expire(&field(0)), None);
        assert_eq!(h.min_field_expire(), Some(50));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Set(u8, u8, u8),
        Del(u8),
        Scan(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<u8>(), any::<u8>(), 0u8..12).prop_map(|(f, v, n)| Op::Set(f, v, n)),
            2 => any::<u8>().prop_map(Op::Del),
            1 => (1u8..20).prop_map(Op::Scan),
        ]
    }

    proptest! {
        /// A hash behaves like an insertion-ordered map; a listpack keeps that order, the
        /// encoding only ever moves to hashtable, and a full HSCAN returns every field.
        #[test]
        fn hash_matches_model(ops in proptest::collection::vec(op(), 1..400), entries in 0i64..40) {
            let l = limits(entries, 8);
            let mut h = HashValue::new();
            let mut model: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            let mut converted = false;
            for o in ops {
                match o {
                    Op::Set(f, v, n) => {
                        let f = vec![b'f', f % 64];
                        let v = vec![v; n as usize];
                        let new = h.set(&f, &v, &l);
                        match model.iter_mut().find(|p| p.0 == f) {
                            Some(p) => { prop_assert!(!new); p.1 = v; }
                            None => { prop_assert!(new); model.push((f, v)); }
                        }
                    }
                    Op::Del(f) => {
                        let f = vec![b'f', f % 64];
                        let had = model.iter().position(|p| p.0 == f);
                        prop_assert_eq!(h.remove(&f), had.is_some());
                        if let Some(i) = had { model.remove(i); }
                    }
                    Op::Scan(count) => {
                        let mut seen = BTreeSet::new();
                        let mut cursor = 0;
                        loop {
                            cursor = h.scan(cursor, count as usize, |f, _| { seen.insert(f.to_vec()); });
                            if cursor == 0 { break; }
                        }
                        let want: BTreeSet<Vec<u8>> = model.iter().map(|p| p.0.clone()).collect();
                        prop_assert_eq!(seen, want);
                    }
                }
                prop_assert_eq!(h.len(), model.len());
                if let Enc::Table(t) = &h.enc {
                    t.check();
                }
                if converted {
                    prop_assert_eq!(h.encoding(), "hashtable");
                }
                converted = h.encoding() == "hashtable";
                if !converted {
                    prop_assert!(model.len() as i64 <= entries);
                    let got: Vec<(Vec<u8>, Vec<u8>)> = h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
                    prop_assert_eq!(&got, &model);
                } else {
                    let got: BTreeMap<Vec<u8>, Vec<u8>> = h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
                    let want: BTreeMap<Vec<u8>, Vec<u8>> = model.iter().cloned().collect();
                    prop_assert_eq!(got, want);
                }
                for (f, v) in &model {
                    prop_assert_eq!(h.get(f), Some(v.as_slice()));
                }
                let heap: usize = model.iter().map(|(f, v)| Bytes::new(f).heap_size() + Bytes::new(v).heap_size()).sum();
                prop_assert_eq!(h.str_heap, heap);
            }
            let pairs: Vec<(Vec<u8>, Vec<u8>)> = h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
            {
                let r = HashValue::from_pairs(&pairs, &l);
                let got: BTreeMap<Vec<u8>, Vec<u8>> = r.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
                let want: BTreeMap<Vec<u8>, Vec<u8>> = model.iter().cloned().collect();
                prop_assert_eq!(got, want);
            }
        }
    }
}
