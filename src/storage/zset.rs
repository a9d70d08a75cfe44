//! The sorted set value (Redis's t_zset.c encodings).
//!
//! Two representations, switched at the `zset-max-listpack-*` thresholds as Redis 7.0
//! does (and, like Redis, never switched back for a live key):
//! * `listpack`: one Vec of (member, score) kept sorted by (score, member). Small, and
//!   a member lookup is a linear scan, exactly the trade-off of Redis's listpack.
//! * `skiplist`: a hash index member → slot, plus an order-statistic B+-tree of slots
//!   ordered by (score, member) whose inner nodes carry subtree counts, so insert,
//!   delete, rank, select-by-rank and range bounds are all O(log n).
//!
//! Ranks are 0-based in ascending (score, member) order throughout.

use std::cmp::Ordering;
use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use super::limits::EncodingLimits;

pub type Member = Box<[u8]>;

/// Orders two (score, member) pairs as Redis does: by score, then bytewise by member.
/// Scores are never NaN; -0 and 0 compare equal, as with C's `<`.
#[inline]
pub fn cmp_entries(s1: f64, m1: &[u8], s2: f64, m2: &[u8]) -> Ordering {
    match s1.partial_cmp(&s2) {
        Some(Ordering::Equal) | None => m1.cmp(m2),
        Some(o) => o,
    }
}

/// A score interval (ZRANGEBYSCORE's `min max`, `(` marking an exclusive end).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreRange {
    pub min: f64,
    pub minex: bool,
    pub max: f64,
    pub maxex: bool,
}

impl ScoreRange {
    /// True for scores before the interval's lower end.
    #[inline]
    pub fn below_min(&self, s: f64) -> bool {
        if self.minex {
            s <= self.min
        } else {
            s < self.min
        }
    }

    /// True for scores not past the interval's upper end.
    #[inline]
    pub fn within_max(&self, s: f64) -> bool {
        if self.maxex {
            s < self.max
        } else {
            s <= self.max
        }
    }
}

/// One end of a lexicographic range: `-`, `+`, `[member` or `(member`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LexBound {
    NegInf,
    PosInf,
    Incl(Vec<u8>),
    Excl(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LexRange {
    pub min: LexBound,
    pub max: LexBound,
}

impl LexRange {
    /// True for members before the range's lower end.
    #[inline]
    pub fn below_min(&self, m: &[u8]) -> bool {
        match &self.min {
            LexBound::NegInf => false,
            LexBound::PosInf => true,
            LexBound::Incl(v) => m < v.as_slice(),
            LexBound::Excl(v) => m <= v.as_slice(),
        }
    }

    /// True for members not past the range's upper end.
    #[inline]
    pub fn within_max(&self, m: &[u8]) -> bool {
        match &self.max {
            LexBound::NegInf => false,
            LexBound::PosInf => true,
            LexBound::Incl(v) => m <= v.as_slice(),
            LexBound::Excl(v) => m < v.as_slice(),
        }
    }
}

/// ZADD's option flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddFlags {
    pub nx: bool,
    pub xx: bool,
    pub gt: bool,
    pub lt: bool,
    pub incr: bool,
}

/// What one ZADD pair did (Redis's zsetAdd out-flags).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AddOutcome {
    /// The resulting score would be NaN; nothing changed.
    Nan,
    /// Skipped by NX / XX / GT / LT.
    Nop,
    /// A new member, with this score.
    Added(f64),
    /// An existing member whose score changed to this.
    Updated(f64),
    /// An existing member whose score stayed the same.
    Unchanged(f64),
}

/// Whether a sorted set of `len` members, the longest `max_member` bytes, fits the
/// listpack encoding.
#[inline]
fn fits_listpack(limits: &EncodingLimits, len: usize, max_member: usize) -> bool {
    (len as u64) <= limits.zset_max_listpack_entries.max(0) as u64
        && (max_member as u64) <= limits.zset_max_listpack_value.max(0) as u64
}

/// The listpack encoding keeps scores as text where -0 reads back as 0; Redis replies
/// show that, so the listpack form stores it the same way.
#[inline]
fn listpack_score(s: f64) -> f64 {
    if s == 0.0 {
        0.0
    } else {
        s
    }
}

#[derive(Debug, Clone)]
enum Repr {
    Listpack(Vec<(Member, f64)>),
    Skiplist(Box<SkipSet>),
}

#[derive(Debug, Clone)]
pub struct ZSetValue {
    repr: Repr,
}

impl Default for ZSetValue {
    fn default() -> Self {
        ZSetValue {
            repr: Repr::Listpack(Vec::new()),
        }
    }
}

impl ZSetValue {
    /// An empty set in the encoding Redis's zsetTypeCreate picks for `size_hint`
    /// members, the first `member_len` bytes long.
    pub fn with_hint(size_hint: usize, member_len: usize, limits: &EncodingLimits) -> ZSetValue {
        if fits_listpack(limits, size_hint, member_len) {
            ZSetValue {
                repr: Repr::Listpack(Vec::with_capacity(size_hint.min(16))),
            }
        } else {
            ZSetValue {
                repr: Repr::Skiplist(Box::default()),
            }
        }
    }

    /// Redis's zsetTypeMaybeConvert: a listpack about to receive more than the entry
    /// limit worth of pairs becomes a skiplist up front.
    pub fn maybe_convert(&mut self, size_hint: usize, limits: &EncodingLimits) {
        if matches!(self.repr, Repr::Listpack(_)) && !fits_listpack(limits, size_hint, 0) {
            self.convert_to_skiplist();
        }
    }

    /// Builds a set from entries sorted by (score, member) with distinct members,
    /// choosing the encoding as Redis does for a freshly computed destination.
    pub fn from_sorted(items: Vec<(Member, f64)>, limits: &EncodingLimits) -> ZSetValue {
        let max_member = items.iter().map(|(m, _)| m.len()).max().unwrap_or(0);
        if fits_listpack(limits, items.len(), max_member) {
            let mut items = items;
            for (_, s) in items.iter_mut() {
                *s = listpack_score(*s);
            }
            ZSetValue {
                repr: Repr::Listpack(items),
            }
        } else {
            ZSetValue {
                repr: Repr::Skiplist(Box::new(SkipSet::from_sorted(items))),
            }
        }
    }

    fn convert_to_skiplist(&mut self) {
        if let Repr::Listpack(v) = &mut self.repr {
            let items = std::mem::take(v);
            self.repr = Repr::Skiplist(Box::new(SkipSet::from_sorted(items)));
        }
    }

    /// OBJECT ENCODING's name for the current representation.
    pub fn encoding(&self) -> &'static str {
        match self.repr {
            Repr::Listpack(_) => "listpack",
            Repr::Skiplist(_) => "skiplist",
        }
    }

    /// Heap bytes held, for memory accounting.
    /// Lazy free: drops members from the slab's end until about `budget` went. True
    /// once none is left; the sorted set is then only fit for dropping.
    pub fn shed(&mut self, budget: usize) -> bool {
        let Repr::Skiplist(s) = &mut self.repr else {
            return true;
        };
        let keep = s.slots.len().saturating_sub(budget.max(1));
        s.slots.truncate(keep);
        s.slots.is_empty()
    }

    pub fn heap_size(&self) -> usize {
        match &self.repr {
            Repr::Listpack(v) => {
                v.capacity() * std::mem::size_of::<(Member, f64)>()
                    + v.iter().map(|(m, _)| m.len()).sum::<usize>()
            }
            Repr::Skiplist(s) => std::mem::size_of::<SkipSet>() + s.heap_size(),
        }
    }

    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Listpack(v) => v.len(),
            Repr::Skiplist(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The score of `member`.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        match &self.repr {
            Repr::Listpack(v) => v.iter().find(|(m, _)| **m == *member).map(|&(_, s)| s),
            Repr::Skiplist(s) => s.score(member),
        }
    }

    /// The ascending rank of `member`.
    pub fn rank(&self, member: &[u8]) -> Option<usize> {
        match &self.repr {
            Repr::Listpack(v) => v.iter().position(|(m, _)| **m == *member),
            Repr::Skiplist(s) => s.rank(member),
        }
    }

    /// The entry at ascending rank `rank`.
    pub fn get(&self, rank: usize) -> Option<(&[u8], f64)> {
        match &self.repr {
            Repr::Listpack(v) => v.get(rank).map(|(m, s)| (&**m, *s)),
            Repr::Skiplist(s) => s.get(rank),
        }
    }

    /// Adds or updates one member with ZADD's semantics (Redis's zsetAdd), converting
    /// to the skiplist encoding first when a new member would not fit the listpack.
    pub fn add(
        &mut self,
        member: &[u8],
        score: f64,
        flags: AddFlags,
        limits: &EncodingLimits,
    ) -> AddOutcome {
        if score.is_nan() {
            return AddOutcome::Nan;
        }
        match self.score(member) {
            Some(cur) => {
                if flags.nx {
                    return AddOutcome::Nop;
                }
                let new = if flags.incr { score + cur } else { score };
                if new.is_nan() {
                    return AddOutcome::Nan;
                }
                if (flags.lt && new >= cur) || (flags.gt && new <= cur) {
                    return AddOutcome::Nop;
                }
                if new == cur {
                    return AddOutcome::Unchanged(new);
                }
                self.set_score(member, new);
                AddOutcome::Updated(new)
            }
            None if flags.xx => AddOutcome::Nop,
            None => {
                self.insert_new(member, score, limits);
                AddOutcome::Added(score)
            }
        }
    }

    /// Inserts a member known to be absent.
    pub fn insert_new(&mut self, member: &[u8], score: f64, limits: &EncodingLimits) {
        if let Repr::Listpack(v) = &self.repr {
            if !fits_listpack(limits, v.len() + 1, member.len()) {
                self.convert_to_skiplist();
            }
        }
        match &mut self.repr {
            Repr::Listpack(v) => {
                let score = listpack_score(score);
                let pos =
                    v.partition_point(|(m, s)| cmp_entries(*s, m, score, member) == Ordering::Less);
                v.insert(pos, (member.into(), score));
            }
            Repr::Skiplist(s) => s.insert_new(member.into(), score),
        }
    }

    /// Changes the score of a member known to be present.
    fn set_score(&mut self, member: &[u8], score: f64) {
        match &mut self.repr {
            Repr::Listpack(v) => {
                let Some(old) = v.iter().position(|(m, _)| **m == *member) else {
                    return;
                };
                let (m, _) = v.remove(old);
                let score = listpack_score(score);
                let pos =
                    v.partition_point(|(x, s)| cmp_entries(*s, x, score, member) == Ordering::Less);
                v.insert(pos, (m, score));
            }
            Repr::Skiplist(s) => s.set_score(member, score),
        }
    }

    /// Removes `member`, returning its score.
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        match &mut self.repr {
            Repr::Listpack(v) => {
                let pos = v.iter().position(|(m, _)| **m == *member)?;
                Some(v.remove(pos).1)
            }
            Repr::Skiplist(s) => s.remove(member),
        }
    }

    /// How many leading entries (in ascending order) satisfy `pred`, which must hold
    /// for a prefix of the order and fail for the rest.
    fn count_while(&self, pred: impl Fn(f64, &[u8]) -> bool) -> usize {
        match &self.repr {
            Repr::Listpack(v) => v.partition_point(|(m, s)| pred(*s, m)),
            Repr::Skiplist(s) => s.count_while(pred),
        }
    }

    /// The ranks `[lo, hi)` of the entries whose scores fall in `r`.
    pub fn score_window(&self, r: &ScoreRange) -> (usize, usize) {
        let lo = self.count_while(|s, _| r.below_min(s));
        let hi = self.count_while(|s, _| r.within_max(s));
        (lo, hi.max(lo))
    }

    /// The ranks `[lo, hi)` of the entries whose members fall in `r` (meaningful when
    /// all scores are equal, as in Redis).
    pub fn lex_window(&self, r: &LexRange) -> (usize, usize) {
        let lo = self.count_while(|_, m| r.below_min(m));
        let hi = self.count_while(|_, m| r.within_max(m));
        (lo, hi.max(lo))
    }

    /// Entries from rank `rank` on: ascending, or descending towards rank 0 when `rev`.
    pub fn iter_from(&self, rank: usize, rev: bool) -> Iter<'_> {
        let inner = match &self.repr {
            Repr::Listpack(v) if rev => {
                let end = if rank < v.len() { rank + 1 } else { 0 };
                IterInner::LpRev(v[..end].iter().rev())
            }
            Repr::Listpack(v) => IterInner::Lp(v[rank.min(v.len())..].iter()),
            Repr::Skiplist(s) => IterInner::Tree(s.iter_from(rank, rev), &s.slots),
        };
        Iter { inner }
    }

    /// All entries in ascending order.
    pub fn iter(&self) -> Iter<'_> {
        self.iter_from(0, false)
    }

    /// Removes the entries of ranks `[lo, hi)`, returning how many went.
    pub fn remove_ranks(&mut self, lo: usize, hi: usize) -> usize {
        let hi = hi.min(self.len());
        if lo >= hi {
            return 0;
        }
        match &mut self.repr {
            Repr::Listpack(v) => {
                v.drain(lo..hi);
            }
            Repr::Skiplist(s) => s.remove_ranks(lo, hi),
        }
        hi - lo
    }

    /// Removes and returns up to `count` entries from the low end (or the high end
    /// when `max`), in pop order.
    pub fn pop(&mut self, max: bool, count: usize) -> Vec<(Member, f64)> {
        let n = count.min(self.len());
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let rank = if max { self.len() - 1 } else { 0 };
            let Some((m, _)) = self.get(rank) else {
                break;
            };
            let m: Member = m.into();
            if let Some(s) = self.remove(&m) {
                out.push((m, s));
            }
        }
        out
    }

    /// Builds a set from (member, score) entries in any order, choosing the encoding
    /// by `limits`. None if a score is NaN or a member repeats: entries from outside
    /// (a RESTOREd payload) are not trusted to be a valid set.
    pub fn from_entries(
        entries: Vec<(Vec<u8>, f64)>,
        limits: &EncodingLimits,
    ) -> Option<ZSetValue> {
        let mut items: Vec<(Member, f64)> = Vec::with_capacity(entries.len());
        for (m, s) in entries {
            if s.is_nan() {
                return None;
            }
            items.push((m.into_boxed_slice(), s));
        }
        items.sort_by(|a, b| cmp_entries(a.1, &a.0, b.1, &b.0));
        // A repeated member makes the entries no set at all.
        let mut seen: hashbrown::HashSet<&[u8]> = hashbrown::HashSet::with_capacity(items.len());
        if !items.iter().all(|(m, _)| seen.insert(m)) {
            return None;
        }
        drop(seen);
        Some(ZSetValue::from_sorted(items, limits))
    }

    /// One step of ZSCAN: members whose scan hash is at or past `cursor`, about
    /// `count` of them, and the cursor to continue from (0 when done). A listpack is
    /// returned whole, as Redis does.
    pub fn scan<'a>(&'a self, cursor: u64, count: usize, mut f: impl FnMut(&'a [u8], f64)) -> u64 {
        match &self.repr {
            Repr::Listpack(v) => {
                for (m, s) in v {
                    f(m, *s);
                }
                0
            }
            Repr::Skiplist(s) => s.scan(cursor, count, f),
        }
    }
}

/// Iterator over (member, score) entries in rank order.
pub struct Iter<'a> {
    inner: IterInner<'a>,
}

enum IterInner<'a> {
    Lp(std::slice::Iter<'a, (Member, f64)>),
    LpRev(std::iter::Rev<std::slice::Iter<'a, (Member, f64)>>),
    Tree(TreeIter<'a>, &'a [Slot]),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], f64);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            IterInner::Lp(it) => it.next().map(|(m, s)| (&**m, *s)),
            IterInner::LpRev(it) => it.next().map(|(m, s)| (&**m, *s)),
            IterInner::Tree(it, slots) => {
                let item = it.next()?;
                Some((&*slots[item.slot as usize].member, item.score))
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The skiplist encoding: slab of members, hash index, order-statistic B+-tree.
// ---------------------------------------------------------------------------

/// A member and its score, stored once; the index and the tree refer to it by slot.
#[derive(Debug, Clone, Default)]
struct Slot {
    member: Member,
    score: f64,
}

#[derive(Clone, Default)]
struct SkipSet {
    slots: Vec<Slot>,
    /// Slots freed by removals, reused before the slab grows.
    free: Vec<u32>,
    index: HashTable<u32>,
    tree: OrderTree,
    hasher: DefaultHashBuilder,
    /// Bytes of all members, kept so heap_size() is O(1).
    member_bytes: usize,
}

impl std::fmt::Debug for SkipSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkipSet").field("len", &self.len()).finish()
    }
}

impl SkipSet {
    fn from_sorted(items: Vec<(Member, f64)>) -> SkipSet {
        let mut s = SkipSet {
            slots: Vec::with_capacity(items.len()),
            ..SkipSet::default()
        };
        let mut order = Vec::with_capacity(items.len());
        for (member, score) in items {
            s.member_bytes += member.len();
            let slot = s.slots.len() as u32;
            let h = s.hasher.hash_one(&*member);
            s.slots.push(Slot { member, score });
            let slots = &s.slots;
            let hasher = &s.hasher;
            s.index
                .insert_unique(h, slot, |&i| hasher.hash_one(&*slots[i as usize].member));
            order.push(Item { score, slot });
        }
        s.tree = OrderTree::from_sorted(order);
        s
    }

    fn len(&self) -> usize {
        self.index.len()
    }

    fn heap_size(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.member_bytes
            + self.free.capacity() * 4
            + self.index.capacity() * 5
            + self.tree.approx_heap_size()
    }

    fn find(&self, member: &[u8]) -> Option<u32> {
        let h = self.hasher.hash_one(member);
        self.index
            .find(h, |&i| *self.slots[i as usize].member == *member)
            .copied()
    }

    fn score(&self, member: &[u8]) -> Option<f64> {
        self.find(member).map(|i| self.slots[i as usize].score)
    }

    fn rank(&self, member: &[u8]) -> Option<usize> {
        let i = self.find(member)?;
        let item = Item {
            score: self.slots[i as usize].score,
            slot: i,
        };
        Some(self.tree.rank_of(&self.slots, item))
    }

    fn get(&self, rank: usize) -> Option<(&[u8], f64)> {
        let item = self.tree.get(rank)?;
        Some((&self.slots[item.slot as usize].member, item.score))
    }

    fn insert_new(&mut self, member: Member, score: f64) {
        self.member_bytes += member.len();
        let h = self.hasher.hash_one(&*member);
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Slot { member, score };
                i
            }
            None => {
                self.slots.push(Slot { member, score });
                (self.slots.len() - 1) as u32
            }
        };
        let slots = &self.slots;
        let hasher = &self.hasher;
        self.index
            .insert_unique(h, slot, |&i| hasher.hash_one(&*slots[i as usize].member));
        self.tree.insert(&self.slots, Item { score, slot });
    }

    fn set_score(&mut self, member: &[u8], score: f64) {
        let Some(i) = self.find(member) else {
            return;
        };
        let old = Item {
            score: self.slots[i as usize].score,
            slot: i,
        };
        self.tree.remove(&self.slots, old);
        self.slots[i as usize].score = score;
        self.tree.insert(&self.slots, Item { score, slot: i });
    }

    fn remove(&mut self, member: &[u8]) -> Option<f64> {
        let h = self.hasher.hash_one(member);
        let slots = &self.slots;
        let (i, _) = self
            .index
            .find_entry(h, |&i| *slots[i as usize].member == *member)
            .ok()?
            .remove();
        let score = self.slots[i as usize].score;
        self.tree.remove(&self.slots, Item { score, slot: i });
        self.member_bytes -= self.slots[i as usize].member.len();
        self.release_slot(i);
        Some(score)
    }

    fn release_slot(&mut self, i: u32) {
        self.slots[i as usize] = Slot::default();
        if i as usize + 1 == self.slots.len() {
            self.slots.pop();
        } else {
            self.free.push(i);
        }
        if self.index.is_empty() {
            self.slots.clear();
            self.free.clear();
        }
    }

    fn count_while(&self, pred: impl Fn(f64, &[u8]) -> bool) -> usize {
        let slots = &self.slots;
        self.tree
            .count_prefix(|it| pred(it.score, &slots[it.slot as usize].member))
    }

    fn iter_from(&self, rank: usize, rev: bool) -> TreeIter<'_> {
        self.tree.iter_from(rank, rev)
    }

    fn remove_ranks(&mut self, lo: usize, hi: usize) {
        let doomed: Vec<Item> = self.tree.iter_from(lo, false).take(hi - lo).collect();
        for item in doomed {
            self.tree.remove(&self.slots, item);
            let member = std::mem::take(&mut self.slots[item.slot as usize].member);
            self.member_bytes -= member.len();
            let h = self.hasher.hash_one(&*member);
            if let Ok(e) = self.index.find_entry(h, |&i| i == item.slot) {
                e.remove();
            }
            self.release_slot(item.slot);
        }
    }

    /// Hash-ordered scan: each call returns the members whose hash lies in a window
    /// starting at `cursor`, sized for about `count` members. Members present for the
    /// whole scan are returned exactly once, whatever changes in between.
    fn scan<'a>(&'a self, cursor: u64, count: usize, mut f: impl FnMut(&'a [u8], f64)) -> u64 {
        let n = self.len() as u128;
        let span = if n <= count as u128 {
            u128::MAX
        } else {
            ((1u128 << 64) * count.max(1) as u128 / n).max(1)
        };
        let end = cursor as u128 + span;
        for &i in self.index.iter() {
            let s = &self.slots[i as usize];
            let h = self.hasher.hash_one(&*s.member) as u128;
            if h >= cursor as u128 && h < end {
                f(&s.member, s.score);
            }
        }
        if end >= 1u128 << 64 {
            0
        } else {
            end as u64
        }
    }
}

/// A tree entry: the score (so most comparisons need no slab access) and the slot.
#[derive(Debug, Clone, Copy)]
struct Item {
    score: f64,
    slot: u32,
}

/// Widest node: leaf entries or inner children. Small in tests so the proptests reach
/// several levels with few entries.
const NODE_MAX: usize = if cfg!(test) { 6 } else { 64 };
/// Nodes under this are merged with or refilled from a sibling.
const NODE_MIN: usize = NODE_MAX / 3;

#[derive(Debug, Clone)]
enum Node {
    Leaf(Vec<Item>),
    Inner(Vec<Child>),
}

#[derive(Debug, Clone)]
struct Child {
    /// The smallest entry of the subtree (kept exact, it is the search separator).
    min: Item,
    /// Entries in the subtree.
    count: usize,
    node: Box<Node>,
}

impl Node {
    fn width(&self) -> usize {
        match self {
            Node::Leaf(v) => v.len(),
            Node::Inner(c) => c.len(),
        }
    }

    fn min(&self) -> Option<Item> {
        match self {
            Node::Leaf(v) => v.first().copied(),
            Node::Inner(c) => c.first().map(|c| c.min),
        }
    }
}

/// An order-statistic B+-tree of items ordered by (score, member).
#[derive(Debug, Clone)]
struct OrderTree {
    root: Node,
    len: usize,
}

impl Default for OrderTree {
    fn default() -> Self {
        OrderTree {
            root: Node::Leaf(Vec::new()),
            len: 0,
        }
    }
}

#[inline]
fn item_cmp(slots: &[Slot], a: Item, b: Item) -> Ordering {
    if a.slot == b.slot {
        return Ordering::Equal;
    }
    cmp_entries(
        a.score,
        &slots[a.slot as usize].member,
        b.score,
        &slots[b.slot as usize].member,
    )
}

impl OrderTree {
    /// Builds a tree from items already in order, packing nodes three-quarters full.
    fn from_sorted(items: Vec<Item>) -> OrderTree {
        let len = items.len();
        let fill = (NODE_MAX * 3 / 4).max(2);
        if len <= fill {
            return OrderTree {
                root: Node::Leaf(items),
                len,
            };
        }
        let mut level: Vec<Child> = chunks_even(items, fill)
            .into_iter()
            .filter_map(|leaf| {
                Some(Child {
                    min: *leaf.first()?,
                    count: leaf.len(),
                    node: Box::new(Node::Leaf(leaf)),
                })
            })
            .collect();
        while level.len() > fill {
            level = chunks_even(level, fill)
                .into_iter()
                .filter_map(|children| {
                    Some(Child {
                        min: children.first()?.min,
                        count: children.iter().map(|c| c.count).sum(),
                        node: Box::new(Node::Inner(children)),
                    })
                })
                .collect();
        }
        OrderTree {
            root: Node::Inner(level),
            len,
        }
    }

    /// Leaves run between half and fully packed; inner nodes add a few percent.
    fn approx_heap_size(&self) -> usize {
        self.len * std::mem::size_of::<Item>() * 3 / 2
            + self.len / (NODE_MAX / 2).max(1)
                * (std::mem::size_of::<Child>() + std::mem::size_of::<Node>())
    }

    fn insert(&mut self, slots: &[Slot], item: Item) {
        self.len += 1;
        if let Some(right) = insert_rec(&mut self.root, slots, item) {
            let left = std::mem::replace(&mut self.root, Node::Leaf(Vec::new()));
            let Some(left_min) = left.min() else {
                return;
            };
            self.root = Node::Inner(vec![
                Child {
                    min: left_min,
                    count: self.len - right.count,
                    node: Box::new(left),
                },
                right,
            ]);
        }
    }

    fn remove(&mut self, slots: &[Slot], item: Item) -> bool {
        if !remove_rec(&mut self.root, slots, item) {
            return false;
        }
        self.len -= 1;
        // Drop levels left with a single child.
        while let Node::Inner(children) = &mut self.root {
            match children.len() {
                0 => self.root = Node::Leaf(Vec::new()),
                1 => {
                    let only = children.pop().map(|c| *c.node);
                    self.root = only.unwrap_or(Node::Leaf(Vec::new()));
                }
                _ => break,
            }
        }
        true
    }

    /// How many leading items satisfy `pred` (true on a prefix of the order).
    fn count_prefix(&self, pred: impl Fn(Item) -> bool) -> usize {
        let mut acc = 0;
        let mut node = &self.root;
        loop {
            match node {
                Node::Leaf(items) => return acc + items.partition_point(|&x| pred(x)),
                Node::Inner(children) => {
                    // Children whose minimum satisfies `pred` are a prefix; all but the
                    // last of them lie wholly inside the prefix of the order.
                    let k = children.partition_point(|c| pred(c.min));
                    if k == 0 {
                        return acc;
                    }
                    acc += children[..k - 1].iter().map(|c| c.count).sum::<usize>();
                    node = &children[k - 1].node;
                }
            }
        }
    }

    fn rank_of(&self, slots: &[Slot], item: Item) -> usize {
        self.count_prefix(|x| item_cmp(slots, x, item) == Ordering::Less)
    }

    fn get(&self, mut rank: usize) -> Option<Item> {
        if rank >= self.len {
            return None;
        }
        let mut node = &self.root;
        loop {
            match node {
                Node::Leaf(items) => return items.get(rank).copied(),
                Node::Inner(children) => {
                    let mut next = None;
                    for c in children {
                        if rank < c.count {
                            next = Some(&c.node);
                            break;
                        }
                        rank -= c.count;
                    }
                    node = next?;
                }
            }
        }
    }

    /// Iterates from rank `rank`: ascending, or descending when `rev`.
    fn iter_from(&self, rank: usize, rev: bool) -> TreeIter<'_> {
        let mut it = TreeIter {
            stack: Vec::new(),
            leaf: &[],
            pos: 0,
            rev,
            done: rank >= self.len,
        };
        if it.done {
            return it;
        }
        let mut r = rank;
        let mut node = &self.root;
        loop {
            match node {
                Node::Leaf(items) => {
                    it.leaf = items;
                    it.pos = if rev { r + 1 } else { r };
                    return it;
                }
                Node::Inner(children) => {
                    let mut idx = children.len().saturating_sub(1);
                    for (i, c) in children.iter().enumerate() {
                        if r < c.count {
                            idx = i;
                            break;
                        }
                        r -= c.count;
                    }
                    it.stack.push((children, idx));
                    node = &children[idx].node;
                }
            }
        }
    }
}

/// Splits `v` into consecutive chunks of at most `max` with sizes as even as possible.
fn chunks_even<T>(v: Vec<T>, max: usize) -> Vec<Vec<T>> {
    let n = v.len();
    let k = n.div_ceil(max).max(1);
    let (base, extra) = (n / k, n % k);
    let mut out = Vec::with_capacity(k);
    let mut it = v.into_iter();
    for i in 0..k {
        let size = base + usize::from(i < extra);
        out.push(it.by_ref().take(size).collect());
    }
    out
}

/// Inserts into the subtree; returns a new right sibling when the node split.
fn insert_rec(node: &mut Node, slots: &[Slot], item: Item) -> Option<Child> {
    match node {
        Node::Leaf(items) => {
            let pos = items.partition_point(|&x| item_cmp(slots, x, item) == Ordering::Less);
            items.insert(pos, item);
            if items.len() <= NODE_MAX {
                return None;
            }
            let right = items.split_off(items.len() / 2);
            Some(Child {
                min: right[0],
                count: right.len(),
                node: Box::new(Node::Leaf(right)),
            })
        }
        Node::Inner(children) => {
            let idx = children
                .partition_point(|c| item_cmp(slots, c.min, item) != Ordering::Greater)
                .saturating_sub(1);
            let c = &mut children[idx];
            c.count += 1;
            if item_cmp(slots, item, c.min) == Ordering::Less {
                c.min = item;
            }
            let split = insert_rec(&mut c.node, slots, item)?;
            c.count -= split.count;
            children.insert(idx + 1, split);
            if children.len() <= NODE_MAX {
                return None;
            }
            let right = children.split_off(children.len() / 2);
            Some(Child {
                min: right[0].min,
                count: right.iter().map(|c| c.count).sum(),
                node: Box::new(Node::Inner(right)),
            })
        }
    }
}

/// Removes `item` from the subtree; false if it was not there.
fn remove_rec(node: &mut Node, slots: &[Slot], item: Item) -> bool {
    match node {
        Node::Leaf(items) => {
            let pos = items.partition_point(|&x| item_cmp(slots, x, item) == Ordering::Less);
            if items.get(pos).is_some_and(|x| x.slot == item.slot) {
                items.remove(pos);
                true
            } else {
                false
            }
        }
        Node::Inner(children) => {
            let idx =
                children.partition_point(|c| item_cmp(slots, c.min, item) != Ordering::Greater);
            let Some(idx) = idx.checked_sub(1) else {
                return false;
            };
            if !remove_rec(&mut children[idx].node, slots, item) {
                return false;
            }
            let c = &mut children[idx];
            c.count -= 1;
            match c.node.min() {
                None => {
                    children.remove(idx);
                }
                Some(m) => {
                    c.min = m;
                    if c.node.width() < NODE_MIN {
                        rebalance(children, idx);
                    }
                }
            }
            true
        }
    }
}

/// Merges an underfull child with a neighbour, or evens the two out when together
/// they would overflow one node.
fn rebalance(children: &mut Vec<Child>, i: usize) {
    if children.len() < 2 {
        return;
    }
    let a = if i + 1 < children.len() { i } else { i - 1 };
    let b = a + 1;
    let total = children[a].node.width() + children[b].node.width();
    if total <= NODE_MAX {
        let right = children.remove(b);
        let left = &mut children[a];
        left.count += right.count;
        match (&mut *left.node, *right.node) {
            (Node::Leaf(l), Node::Leaf(r)) => l.extend(r),
            (Node::Inner(l), Node::Inner(r)) => l.extend(r),
            // Siblings always share a depth; nothing sensible to do otherwise.
            _ => {}
        }
        return;
    }
    let (head, tail) = children.split_at_mut(b);
    let (left, right) = (&mut head[a], &mut tail[0]);
    let want_left = total / 2;
    match (&mut *left.node, &mut *right.node) {
        (Node::Leaf(l), Node::Leaf(r)) => {
            if l.len() > want_left {
                let moved = l.split_off(want_left);
                r.splice(0..0, moved);
            } else {
                let take = want_left - l.len();
                l.extend(r.drain(..take));
            }
            left.count = l.len();
            right.count = r.len();
        }
        (Node::Inner(l), Node::Inner(r)) => {
            if l.len() > want_left {
                let moved = l.split_off(want_left);
                r.splice(0..0, moved);
            } else {
                let take = want_left - l.len();
                l.extend(r.drain(..take));
            }
            left.count = l.iter().map(|c| c.count).sum();
            right.count = r.iter().map(|c| c.count).sum();
        }
        _ => return,
    }
    if let Some(m) = right.node.min() {
        right.min = m;
    }
}

/// Walks leaves in either direction from a starting rank.
struct TreeIter<'a> {
    /// Inner nodes on the path to the current leaf, with the child index taken.
    stack: Vec<(&'a [Child], usize)>,
    leaf: &'a [Item],
    /// Forward: next index to yield. Reverse: one past it.
    pos: usize,
    rev: bool,
    done: bool,
}

impl TreeIter<'_> {
    /// Moves to the next leaf in the walk's direction; false at the end.
    fn next_leaf(&mut self) -> bool {
        while let Some((children, i)) = self.stack.pop() {
            let next = if self.rev {
                i.checked_sub(1)
            } else {
                Some(i + 1)
            };
            let Some(ni) = next.filter(|&ni| ni < children.len()) else {
                continue;
            };
            self.stack.push((children, ni));
            let mut node: &Node = &children[ni].node;
            loop {
                match node {
                    Node::Leaf(items) => {
                        self.leaf = items;
                        self.pos = if self.rev { items.len() } else { 0 };
                        return true;
                    }
                    Node::Inner(ch) => {
                        let idx = if self.rev {
                            ch.len().saturating_sub(1)
                        } else {
                            0
                        };
                        self.stack.push((ch, idx));
                        let Some(c) = ch.get(idx) else {
                            return false;
                        };
                        node = &c.node;
                    }
                }
            }
        }
        false
    }
}

impl Iterator for TreeIter<'_> {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        while !self.done {
            if self.rev {
                if self.pos > 0 && self.pos <= self.leaf.len() {
                    self.pos -= 1;
                    return Some(self.leaf[self.pos]);
                }
            } else if self.pos < self.leaf.len() {
                self.pos += 1;
                return Some(self.leaf[self.pos - 1]);
            }
            if !self.next_leaf() {
                self.done = true;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits(entries: i64) -> EncodingLimits {
        EncodingLimits {
            zset_max_listpack_entries: entries,
            ..EncodingLimits::default()
        }
    }

    /// The model: entries sorted by (score, member).
    fn model_sorted(m: &std::collections::BTreeMap<Vec<u8>, f64>) -> Vec<(Vec<u8>, f64)> {
        let mut v: Vec<(Vec<u8>, f64)> = m.iter().map(|(k, s)| (k.clone(), *s)).collect();
        v.sort_by(|a, b| cmp_entries(a.1, &a.0, b.1, &b.0));
        v
    }

    fn contents(z: &ZSetValue) -> Vec<(Vec<u8>, f64)> {
        z.iter().map(|(m, s)| (m.to_vec(), s)).collect()
    }

    /// Checks the tree's structural invariants: counts, minimums, uniform depth.
    fn check_tree(t: &OrderTree, slots: &[Slot]) {
        fn walk(n: &Node, slots: &[Slot], depth: usize, leaf_depth: &mut Option<usize>) -> usize {
            match n {
                Node::Leaf(v) => {
                    assert!(v.len() <= NODE_MAX);
                    match leaf_depth {
                        Some(d) => assert_eq!(*d, depth),
                        None => *leaf_depth = Some(depth),
                    }
                    for w in v.windows(2) {
                        assert_eq!(item_cmp(slots, w[0], w[1]), Ordering::Less);
                    }
                    v.len()
                }
                Node::Inner(c) => {
                    assert!(!c.is_empty() && c.len() <= NODE_MAX);
                    let mut total = 0;
                    for ch in c {
                        let n = walk(&ch.node, slots, depth + 1, leaf_depth);
                        assert_eq!(n, ch.count);
                        assert_eq!(ch.node.min().map(|m| m.slot), Some(ch.min.slot));
                        total += n;
                    }
                    total
                }
            }
        }
        let mut d = None;
        assert_eq!(walk(&t.root, slots, 0, &mut d), t.len);
    }

    fn check(z: &ZSetValue, model: &std::collections::BTreeMap<Vec<u8>, f64>) {
        let want = model_sorted(model);
        assert_eq!(z.len(), want.len());
        assert_eq!(contents(z), want);
        if let Repr::Skiplist(s) = &z.repr {
            check_tree(&s.tree, &s.slots);
            let bytes: usize = want.iter().map(|(m, _)| m.len()).sum();
            assert_eq!(s.member_bytes, bytes);
        }
        for (i, (m, sc)) in want.iter().enumerate() {
            assert_eq!(z.rank(m), Some(i));
            assert_eq!(z.score(m), Some(*sc));
            assert_eq!(
                z.get(i).map(|(m, s)| (m.to_vec(), s)),
                Some((m.clone(), *sc))
            );
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u8, i8),
        Incr(u8, i8),
        Remove(u8),
        RemoveRanks(u8, u8),
        Pop(bool, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<u8>(), any::<i8>()).prop_map(|(m, s)| Op::Add(m, s)),
            1 => (any::<u8>(), any::<i8>()).prop_map(|(m, s)| Op::Incr(m, s)),
            2 => any::<u8>().prop_map(Op::Remove),
            1 => (any::<u8>(), 0u8..8).prop_map(|(a, n)| Op::RemoveRanks(a, n)),
            1 => (any::<bool>(), 0u8..4).prop_map(|(m, n)| Op::Pop(m, n)),
        ]
    }

    fn member(m: u8) -> Vec<u8> {
        // Some members share prefixes so byte order matters.
        format!("m{}", m % 97).into_bytes()
    }

    fn run_ops(ops: &[Op], lim: &EncodingLimits) {
        let mut z = ZSetValue::with_hint(1, 1, lim);
        let mut model = std::collections::BTreeMap::new();
        for op in ops {
            match *op {
                Op::Add(m, s) => {
                    let m = member(m);
                    let s = f64::from(s % 16);
                    z.add(&m, s, AddFlags::default(), lim);
                    model.insert(m, s);
                }
                Op::Incr(m, s) => {
                    let m = member(m);
                    let flags = AddFlags {
                        incr: true,
                        ..AddFlags::default()
                    };
                    let out = z.add(&m, f64::from(s % 4), flags, lim);
                    let new = model.get(&m).copied().unwrap_or(0.0) + f64::from(s % 4);
                    model.insert(m, new);
                    assert!(
                        matches!(out, AddOutcome::Added(x) | AddOutcome::Updated(x) | AddOutcome::Unchanged(x) if x == new)
                    );
                }
                Op::Remove(m) => {
                    let m = member(m);
                    assert_eq!(z.remove(&m), model.remove(&m));
                }
                Op::RemoveRanks(a, n) => {
                    let sorted = model_sorted(&model);
                    let lo = (a as usize).min(sorted.len());
                    let hi = (lo + n as usize).min(sorted.len());
                    assert_eq!(z.remove_ranks(lo, hi), hi - lo);
                    for (m, _) in &sorted[lo..hi] {
                        model.remove(m);
                    }
                }
                Op::Pop(max, n) => {
                    let sorted = model_sorted(&model);
                    let got = z.pop(max, n as usize);
                    let want: Vec<(Vec<u8>, f64)> = if max {
                        sorted.iter().rev().take(n as usize).cloned().collect()
                    } else {
                        sorted.iter().take(n as usize).cloned().collect()
                    };
                    let got: Vec<(Vec<u8>, f64)> =
                        got.into_iter().map(|(m, s)| (m.to_vec(), s)).collect();
                    assert_eq!(got, want);
                    for (m, _) in want {
                        model.remove(&m);
                    }
                }
            }
        }
        check(&z, &model);
        check_ranges(&z, &model);
    }

    fn check_ranges(z: &ZSetValue, model: &std::collections::BTreeMap<Vec<u8>, f64>) {
        let sorted = model_sorted(model);
        let n = sorted.len();
        // Iteration from every rank, both ways.
        for r in 0..n {
            let fwd: Vec<_> = z
                .iter_from(r, false)
                .map(|(m, s)| (m.to_vec(), s))
                .collect();
            assert_eq!(fwd, sorted[r..].to_vec());
            let rev: Vec<_> = z.iter_from(r, true).map(|(m, s)| (m.to_vec(), s)).collect();
            let want: Vec<_> = sorted[..=r].iter().rev().cloned().collect();
            assert_eq!(rev, want);
        }
        assert_eq!(z.iter_from(n, false).count(), 0);
        // Score windows.
        for min in -17..17 {
            for (minex, maxex) in [(false, false), (true, false), (false, true), (true, true)] {
                let max = min + 3;
                let r = ScoreRange {
                    min: f64::from(min),
                    minex,
                    max: f64::from(max),
                    maxex,
                };
                let (lo, hi) = z.score_window(&r);
                let want: Vec<_> = sorted
                    .iter()
                    .filter(|(_, s)| !r.below_min(*s) && r.within_max(*s))
                    .cloned()
                    .collect();
                assert_eq!(sorted[lo..hi].to_vec(), want);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn skiplist_matches_model(ops in proptest::collection::vec(op(), 0..300)) {
            run_ops(&ops, &limits(0));
        }

        #[test]
        fn listpack_and_conversion_match_model(ops in proptest::collection::vec(op(), 0..120)) {
            run_ops(&ops, &limits(16));
        }

        #[test]
        fn lex_windows_match_model(members in proptest::collection::btree_set("[a-d]{0,3}", 0..60),
                                   a in "[a-e]{0,2}", b in "[a-e]{0,2}", ea in any::<bool>(), eb in any::<bool>()) {
            for lim in [limits(0), limits(128)] {
                let mut z = ZSetValue::with_hint(1, 1, &lim);
                for m in &members {
                    z.add(m.as_bytes(), 0.0, AddFlags::default(), &lim);
                }
                let bound = |s: &str, ex: bool| if ex { LexBound::Excl(s.as_bytes().to_vec()) } else { LexBound::Incl(s.as_bytes().to_vec()) };
                let ranges = [
                    LexRange { min: bound(&a, ea), max: bound(&b, eb) },
                    LexRange { min: LexBound::NegInf, max: bound(&b, eb) },
                    LexRange { min: bound(&a, ea), max: LexBound::PosInf },
                    LexRange { min: LexBound::PosInf, max: LexBound::NegInf },
                ];
                for r in &ranges {
                    let (lo, hi) = z.lex_window(r);
                    let got: Vec<Vec<u8>> = z.iter_from(lo, false).take(hi - lo).map(|(m, _)| m.to_vec()).collect();
                    let want: Vec<Vec<u8>> = members.iter().map(|m| m.as_bytes().to_vec())
                        .filter(|m| !r.below_min(m) && r.within_max(m)).collect();
                    prop_assert_eq!(got, want);
                }
            }
        }

        #[test]
        fn bulk_build_matches_inserts(n in 0usize..500) {
            let items: Vec<(Member, f64)> = (0..n).map(|i| (format!("{i:05}").into_bytes().into_boxed_slice(), (i / 3) as f64)).collect();
            let z = ZSetValue::from_sorted(items.clone(), &limits(0));
            if let Repr::Skiplist(s) = &z.repr { check_tree(&s.tree, &s.slots); }
            let got: Vec<(Member, f64)> = z.iter().map(|(m, s)| (m.into(), s)).collect();
            prop_assert_eq!(got, items);
        }
    }

    #[test]
    fn encodings_follow_limits() {
        let lim = limits(2);
        let mut z = ZSetValue::with_hint(1, 1, &lim);
        assert_eq!(z.encoding(), "listpack");
        z.add(b"a", 1.0, AddFlags::default(), &lim);
        z.add(b"b", 2.0, AddFlags::default(), &lim);
        assert_eq!(z.encoding(), "listpack");
        z.add(b"c", 3.0, AddFlags::default(), &lim);
        assert_eq!(z.encoding(), "skiplist");
        let long = vec![b'x'; 65];
        let mut z = ZSetValue::with_hint(1, 1, &limits(128));
        z.add(&long, 1.0, AddFlags::default(), &limits(128));
        assert_eq!(z.encoding(), "skiplist");
    }

    #[test]
    fn add_flags() {
        let lim = limits(128);
        let mut z = ZSetValue::default();
        let f = |nx, xx, gt, lt| AddFlags {
            nx,
            xx,
            gt,
            lt,
            incr: false,
        };
        assert_eq!(
            z.add(b"a", 1.0, f(false, true, false, false), &lim),
            AddOutcome::Nop
        );
        assert_eq!(
            z.add(b"a", 1.0, f(false, false, false, false), &lim),
            AddOutcome::Added(1.0)
        );
        assert_eq!(
            z.add(b"a", 2.0, f(true, false, false, false), &lim),
            AddOutcome::Nop
        );
        assert_eq!(
            z.add(b"a", 0.0, f(false, false, true, false), &lim),
            AddOutcome::Nop
        );
        assert_eq!(
            z.add(b"a", 5.0, f(false, false, true, false), &lim),
            AddOutcome::Updated(5.0)
        );
        assert_eq!(
            z.add(b"a", 5.0, f(false, false, false, false), &lim),
            AddOutcome::Unchanged(5.0)
        );
        let incr = AddFlags {
            incr: true,
            ..AddFlags::default()
        };
        z.add(b"i", f64::INFINITY, AddFlags::default(), &lim);
        assert_eq!(z.add(b"i", f64::NEG_INFINITY, incr, &lim), AddOutcome::Nan);
        assert_eq!(
            z.add(b"a", f64::NAN, AddFlags::default(), &lim),
            AddOutcome::Nan
        );
    }

    #[test]
    fn from_entries_round_trip() {
        let lim = limits(128);
        let mut z = ZSetValue::default();
        for (i, m) in ["c", "a", "b"].iter().enumerate() {
            z.add(m.as_bytes(), i as f64, AddFlags::default(), &lim);
        }
        let entries = |z: &ZSetValue| -> Vec<(Vec<u8>, f64)> {
            z.iter_from(z.len().saturating_sub(1), true)
                .map(|(m, s)| (m.to_vec(), s))
                .collect()
        };
        let d = entries(&z);
        let back = ZSetValue::from_entries(d.clone(), &limits(0)).expect("restores");
        assert_eq!(back.encoding(), "skiplist");
        assert_eq!(entries(&back), d);
        let dup = vec![
            (b"a".to_vec(), 1.0),
            (b"b".to_vec(), 0.0),
            (b"a".to_vec(), 2.0),
        ];
        assert!(ZSetValue::from_entries(dup, &lim).is_none());
        assert!(ZSetValue::from_entries(vec![(b"n".to_vec(), f64::NAN)], &lim).is_none());
    }

    #[test]
    fn scan_visits_everything_once() {
        let lim = limits(0);
        let mut z = ZSetValue::default();
        for i in 0..1000 {
            z.add(
                format!("m{i}").as_bytes(),
                i as f64,
                AddFlags::default(),
                &lim,
            );
        }
        let mut seen = std::collections::HashSet::new();
        let mut cursor = 0;
        let mut calls = 0;
        loop {
            cursor = z.scan(cursor, 10, |m, _| assert!(seen.insert(m.to_vec())));
            calls += 1;
            if cursor == 0 {
                break;
            }
        }
        assert_eq!(seen.len(), 1000);
        assert!(calls > 10);
    }
}
