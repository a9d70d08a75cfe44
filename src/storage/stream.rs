//! The stream value type (Redis's t_stream.c data structure).
//!
//! Entries live in *nodes*, as Redis's radix tree of listpacks: an ordered map from a
//! node's first ("master") ID to one packed byte block holding up to
//! `stream-node-max-entries` entries (or `stream-node-max-bytes` bytes). Each entry is
//! `flags | ms - master.ms | seq | field count | (len, bytes)*`, lengths and numbers as
//! LEB128 varints, so an entry costs one small run of bytes rather than a heap block
//! per field. Deleting an entry only flags it (a tombstone, as in Redis); a node whose
//! entries are all deleted is dropped. Node boundaries matter to users: `MAXLEN ~` /
//! `MINID ~` only ever remove whole nodes, and XINFO reports the node count.
//!
//! Consumer groups keep Redis 7.0's state: the last delivered ID, the logical read
//! counter (`entries-read`), the group PEL (ID -> owner, delivery time, deliveries)
//! and one PEL (a set of IDs) per consumer.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

/// A stream entry ID: milliseconds and a sequence number, ordered as a pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const ZERO: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    pub const fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    pub fn is_zero(&self) -> bool {
        *self == StreamId::ZERO
    }

    /// The next ID, or None past the largest.
    pub fn incr(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (u64::MAX, u64::MAX) => None,
            (ms, u64::MAX) => Some(StreamId::new(ms + 1, 0)),
            (ms, seq) => Some(StreamId::new(ms, seq + 1)),
        }
    }

    /// The previous ID, or None below 0-0.
    pub fn decr(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (0, 0) => None,
            (ms, 0) => Some(StreamId::new(ms - 1, u64::MAX)),
            (ms, seq) => Some(StreamId::new(ms, seq - 1)),
        }
    }

    /// Formats as `ms-seq` into `buf`.
    pub fn format<'a>(&self, buf: &'a mut [u8; 48]) -> &'a [u8] {
        use std::io::Write;
        let mut cur = std::io::Cursor::new(&mut buf[..]);
        // 20 + 1 + 20 digits always fit in 48 bytes.
        let _ = write!(cur, "{}-{}", self.ms, self.seq);
        let n = cur.position() as usize;
        &buf[..n]
    }
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// Node size limits (stream-node-max-entries / stream-node-max-bytes); 0 = no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLimits {
    pub max_entries: usize,
    pub max_bytes: usize,
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits {
            max_entries: 100,
            max_bytes: 4096,
        }
    }
}

/// Redis caps a listpack at 1 GiB whatever stream-node-max-bytes says.
const NODE_MAX_BYTES_CAP: usize = 1 << 30;
const FLAG_DELETED: u8 = 1;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint at `*pos`. Node bytes are only ever written by this module, so a
/// malformed varint cannot occur; it decodes as 0 rather than panicking.
fn get_varint(data: &[u8], pos: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    while let Some(&b) = data.get(*pos) {
        *pos += 1;
        if shift < 64 {
            v |= ((b & 0x7f) as u64) << shift;
        }
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    v
}

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// One packed block of consecutive entries.
#[derive(Clone, Debug, PartialEq)]
struct Node {
    data: Vec<u8>,
    /// Start of each entry (live or deleted) in `data`, in ID order.
    offs: Vec<u32>,
    /// Entries not flagged deleted.
    live: u32,
}

/// A decoded entry header.
struct Header {
    id: StreamId,
    deleted: bool,
    nfields: usize,
    fields_at: usize,
}

impl Node {
    fn header(&self, master: StreamId, i: usize) -> Header {
        let mut pos = self.offs[i] as usize;
        let deleted = self.data[pos] & FLAG_DELETED != 0;
        pos += 1;
        let ms = master.ms.wrapping_add(get_varint(&self.data, &mut pos));
        let seq = get_varint(&self.data, &mut pos);
        let nfields = get_varint(&self.data, &mut pos) as usize;
        Header {
            id: StreamId::new(ms, seq),
            deleted,
            nfields,
            fields_at: pos,
        }
    }

    fn id_at(&self, master: StreamId, i: usize) -> StreamId {
        self.header(master, i).id
    }

    fn last_id(&self, master: StreamId) -> StreamId {
        self.id_at(master, self.offs.len() - 1)
    }

    /// Index of `id` among the node's entries (live or deleted).
    fn find(&self, master: StreamId, id: StreamId) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.offs.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.id_at(master, mid).cmp(&id) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    fn entry(&self, master: StreamId, i: usize) -> Option<EntryRef<'_>> {
        let h = self.header(master, i);
        (!h.deleted).then_some(EntryRef {
            id: h.id,
            nfields: h.nfields,
            data: &self.data[h.fields_at..],
        })
    }

    fn mark_deleted(&mut self, i: usize) {
        let at = self.offs[i] as usize;
        self.data[at] |= FLAG_DELETED;
        self.live -= 1;
    }
}

/// A live entry, borrowed from its node.
#[derive(Clone, Copy, Debug)]
pub struct EntryRef<'a> {
    pub id: StreamId,
    /// Number of field/value pairs.
    pub nfields: usize,
    data: &'a [u8],
}

impl<'a> EntryRef<'a> {
    /// Field, value, field, value ...
    pub fn fields(&self) -> FieldIter<'a> {
        FieldIter {
            data: self.data,
            pos: 0,
            left: self.nfields * 2,
        }
    }
}

pub struct FieldIter<'a> {
    data: &'a [u8],
    pos: usize,
    left: usize,
}

impl<'a> Iterator for FieldIter<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let len = get_varint(self.data, &mut self.pos);
        let start = self.pos.min(self.data.len());
        let end = start.saturating_add(len as usize).min(self.data.len());
        self.pos = end;
        Some(&self.data[start..end])
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

/// Iterates live entries between two IDs (inclusive), forward or backward.
pub struct RangeIter<'a> {
    nodes: std::collections::btree_map::Range<'a, StreamId, Node>,
    cur: Option<(StreamId, &'a Node)>,
    /// Next index to look at in `cur` (forward: counts up; backward: one past it).
    idx: usize,
    start: StreamId,
    end: StreamId,
    rev: bool,
    done: bool,
}

impl<'a> Iterator for RangeIter<'a> {
    type Item = EntryRef<'a>;

    fn next(&mut self) -> Option<EntryRef<'a>> {
        while !self.done {
            let Some((master, node)) = self.cur else {
                let next = if self.rev {
                    self.nodes.next_back()
                } else {
                    self.nodes.next()
                };
                match next {
                    Some((k, n)) => {
                        self.cur = Some((*k, n));
                        self.idx = if self.rev { n.offs.len() } else { 0 };
                    }
                    None => self.done = true,
                }
                continue;
            };
            let i = if self.rev {
                if self.idx == 0 {
                    self.cur = None;
                    continue;
                }
                self.idx -= 1;
                self.idx
            } else {
                if self.idx >= node.offs.len() {
                    self.cur = None;
                    continue;
                }
                self.idx += 1;
                self.idx - 1
            };
            let h = node.header(master, i);
            if self.rev {
                if h.id < self.start {
                    self.done = true;
                    break;
                }
                if h.id > self.end {
                    continue;
                }
            } else {
                if h.id > self.end {
                    self.done = true;
                    break;
                }
                if h.id < self.start {
                    continue;
                }
            }
            if let Some(e) = node.entry(master, i) {
                return Some(e);
            }
        }
        None
    }
}

/// A node as stored, tombstones included: what DUMP serialises (Redis keeps deleted
/// entries in its listpacks until the whole node goes, and DUMP writes them).
#[derive(Clone, Copy, Debug)]
pub struct RawNode<'a> {
    pub master: StreamId,
    node: &'a Node,
}

impl<'a> RawNode<'a> {
    /// Entries not flagged deleted.
    pub fn live(&self) -> usize {
        self.node.live as usize
    }

    /// Entries flagged deleted.
    pub fn deleted(&self) -> usize {
        self.node.offs.len() - self.node.live as usize
    }

    /// Every entry in ID order as (deleted, entry).
    pub fn entries(&self) -> impl Iterator<Item = (bool, EntryRef<'a>)> + 'a {
        let (master, node) = (self.master, self.node);
        (0..node.offs.len()).map(move |i| {
            let h = node.header(master, i);
            let entry = EntryRef {
                id: h.id,
                nfields: h.nfields,
                data: &node.data[h.fields_at..],
            };
            (h.deleted, entry)
        })
    }
}

/// Builds one node from a RESTORE payload, checking the ordering invariants the
/// rest of this module relies on (the payload is untrusted).
#[derive(Debug)]
pub struct NodeLoader {
    master: StreamId,
    node: Node,
    last: Option<StreamId>,
    /// Field/value strings the current entry still expects.
    pending: usize,
    ok: bool,
}

impl NodeLoader {
    pub fn new(master: StreamId) -> NodeLoader {
        NodeLoader {
            master,
            node: Node {
                data: Vec::new(),
                offs: Vec::new(),
                live: 0,
            },
            last: None,
            pending: 0,
            ok: true,
        }
    }

    /// Starts an entry of `nfields` pairs; its strings follow through `field`.
    /// IDs must ascend and not precede the master ID.
    pub fn entry(&mut self, id: StreamId, deleted: bool, nfields: usize) {
        let ordered = match self.last {
            Some(prev) => id > prev,
            None => id >= self.master,
        };
        let fits = u32::try_from(self.node.data.len()).is_ok();
        if !ordered || !fits || self.pending != 0 {
            self.ok = false;
            return;
        }
        self.last = Some(id);
        self.node.offs.push(self.node.data.len() as u32);
        self.node.data.push(if deleted { FLAG_DELETED } else { 0 });
        put_varint(&mut self.node.data, id.ms - self.master.ms);
        put_varint(&mut self.node.data, id.seq);
        put_varint(&mut self.node.data, nfields as u64);
        self.pending = nfields.saturating_mul(2);
        if !deleted {
            self.node.live += 1;
        }
    }

    /// One field or value string of the current entry.
    pub fn field(&mut self, bytes: &[u8]) {
        if self.pending == 0 {
            self.ok = false;
            return;
        }
        self.pending -= 1;
        put_varint(&mut self.node.data, bytes.len() as u64);
        self.node.data.extend_from_slice(bytes);
    }
}

/// An entry of a group's PEL: delivered, not yet acknowledged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingEntry {
    pub consumer: Arc<[u8]>,
    /// Unix ms of the last delivery.
    pub delivery_time: u64,
    pub delivery_count: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Consumer {
    /// Unix ms of the consumer's last interaction.
    pub seen_time: u64,
    pub pel: BTreeSet<StreamId>,
}

/// Redis's SCG_INVALID_ENTRIES_READ: the read counter is unknown.
pub const ENTRIES_READ_INVALID: i64 = -1;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerGroup {
    pub last_id: StreamId,
    pub entries_read: i64,
    pub pel: BTreeMap<StreamId, PendingEntry>,
    pub consumers: BTreeMap<Arc<[u8]>, Consumer>,
}

impl ConsumerGroup {
    pub fn new(last_id: StreamId, entries_read: i64) -> ConsumerGroup {
        ConsumerGroup {
            last_id,
            entries_read,
            pel: BTreeMap::new(),
            consumers: BTreeMap::new(),
        }
    }

    /// Creates a consumer; false if it already existed.
    pub fn create_consumer(&mut self, name: &[u8], now: u64) -> bool {
        if self.consumers.contains_key(name) {
            return false;
        }
        self.consumers.insert(
            Arc::from(name),
            Consumer {
                seen_time: now,
                pel: BTreeSet::new(),
            },
        );
        true
    }

    /// The consumer's shared name, creating it if needed, with its seen-time refreshed.
    pub fn touch_consumer(&mut self, name: &[u8], now: u64) -> Arc<[u8]> {
        self.create_consumer(name, now);
        match self.consumers.get_key_value(name) {
            Some((k, _)) => {
                let k = k.clone();
                if let Some(c) = self.consumers.get_mut(name) {
                    c.seen_time = now;
                }
                k
            }
            None => Arc::from(name),
        }
    }

    /// Deletes a consumer and its pending entries; returns how many it had.
    pub fn delete_consumer(&mut self, name: &[u8]) -> Option<usize> {
        let c = self.consumers.remove(name)?;
        for id in &c.pel {
            self.pel.remove(id);
        }
        Some(c.pel.len())
    }

    /// Acknowledges `id`: removes it from the group's and its owner's PEL.
    pub fn ack(&mut self, id: StreamId) -> bool {
        match self.pel.remove(&id) {
            Some(p) => {
                if let Some(c) = self.consumers.get_mut(&p.consumer) {
                    c.pel.remove(&id);
                }
                true
            }
            None => false,
        }
    }

    /// Records a delivery of `id` to `consumer` as XREADGROUP does: a fresh NACK, or
    /// an existing one (after XGROUP SETID) reassigned with its counter reset.
    pub fn deliver(&mut self, id: StreamId, consumer: &Arc<[u8]>, now: u64) {
        let fresh = PendingEntry {
            consumer: consumer.clone(),
            delivery_time: now,
            delivery_count: 1,
        };
        if let Some(old) = self.pel.insert(id, fresh) {
            if let Some(c) = self.consumers.get_mut(&old.consumer) {
                c.pel.remove(&id);
            }
        }
        if let Some(c) = self.consumers.get_mut(consumer) {
            c.pel.insert(id);
        }
    }

    /// Moves a pending entry to `consumer` (XCLAIM / XAUTOCLAIM).
    pub fn transfer(&mut self, id: StreamId, consumer: &Arc<[u8]>) {
        let Some(p) = self.pel.get_mut(&id) else {
            return;
        };
        if p.consumer != *consumer {
            let old = std::mem::replace(&mut p.consumer, consumer.clone());
            if let Some(c) = self.consumers.get_mut(&old) {
                c.pel.remove(&id);
            }
            if let Some(c) = self.consumers.get_mut(consumer) {
                c.pel.insert(id);
            }
        }
    }
}

/// A trimming rule (XADD / XTRIM's MAXLEN or MINID).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trim {
    MaxLen(u64),
    MinId(StreamId),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamValue {
    nodes: BTreeMap<StreamId, Node>,
    len: u64,
    /// The ID of the last entry ever added (or set by XSETID).
    pub last_id: StreamId,
    /// The first live entry's ID (0-0 when empty): XINFO's recorded-first-entry-id.
    pub first_id: StreamId,
    pub max_deleted_id: StreamId,
    pub entries_added: u64,
    pub groups: BTreeMap<Vec<u8>, ConsumerGroup>,
}

impl StreamValue {
    pub fn new() -> StreamValue {
        StreamValue::default()
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of nodes (XINFO's radix-tree-keys).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn encoding(&self) -> &'static str {
        "stream"
    }

    /// Heap bytes, exact for a few nodes and estimated from a sample beyond: every
    /// XADD re-measures its key, so this must not walk a long stream's nodes.
    pub fn heap_size(&self) -> usize {
        const EXACT: usize = 16;
        let node = |n: &Node| n.data.capacity() + n.offs.capacity() * 4 + 64;
        let sample: usize = self.nodes.values().take(EXACT).map(node).sum();
        let nodes = if self.nodes.len() <= EXACT {
            sample
        } else {
            sample / EXACT * self.nodes.len()
        };
        let groups: usize = self
            .groups
            .iter()
            .map(|(k, g)| k.len() + 64 + g.pel.len() * 64 + g.consumers.len() * 64)
            .sum();
        nodes + groups
    }

    /// Appends an entry with a caller-checked `id` greater than `last_id`. `fields`
    /// alternates field and value.
    pub fn append(&mut self, id: StreamId, fields: &[&[u8]], limits: NodeLimits) {
        let nfields = fields.len() / 2;
        let mut size = 1 + varint_len(nfields as u64) + 20;
        for f in &fields[..nfields * 2] {
            size += varint_len(f.len() as u64) + f.len();
        }
        let max_bytes = match limits.max_bytes {
            0 => NODE_MAX_BYTES_CAP,
            b => b.min(NODE_MAX_BYTES_CAP),
        };
        let tail = self.nodes.iter_mut().next_back().filter(|(_, n)| {
            let bytes_ok = n.data.len() + size < max_bytes;
            let count_ok = limits.max_entries == 0 || n.offs.len() < limits.max_entries;
            bytes_ok && count_ok
        });
        let (master, node) = match tail {
            Some((k, n)) => (*k, n),
            None => {
                self.nodes.insert(
                    id,
                    Node {
                        data: Vec::with_capacity(size),
                        offs: Vec::new(),
                        live: 0,
                    },
                );
                match self.nodes.get_mut(&id) {
                    Some(n) => (id, n),
                    None => return,
                }
            }
        };
        node.offs.push(node.data.len() as u32);
        node.data.push(0);
        put_varint(&mut node.data, id.ms - master.ms);
        put_varint(&mut node.data, id.seq);
        put_varint(&mut node.data, nfields as u64);
        for f in &fields[..nfields * 2] {
            put_varint(&mut node.data, f.len() as u64);
            node.data.extend_from_slice(f);
        }
        node.live += 1;
        self.len += 1;
        self.entries_added += 1;
        self.last_id = id;
        if self.len == 1 {
            self.first_id = id;
        }
    }

    /// The nodes as stored, in ID order (for DUMP).
    pub fn raw_nodes(&self) -> impl Iterator<Item = RawNode<'_>> {
        self.nodes.iter().map(|(k, n)| RawNode {
            master: *k,
            node: n,
        })
    }

    /// Appends a node loaded by RESTORE after the existing ones (one holding only
    /// tombstones is dropped). False (the payload is corrupt) if it is incomplete or
    /// does not follow the last node: every entry of a node must precede the next
    /// node's master ID.
    pub fn push_loaded_node(&mut self, loader: NodeLoader) -> bool {
        let NodeLoader {
            master,
            node,
            last,
            pending,
            ok,
        } = loader;
        if !ok || pending != 0 || last.is_none() {
            return false;
        }
        if let Some((&prev, prev_node)) = self.nodes.iter().next_back() {
            if prev_node.last_id(prev) >= master {
                return false;
            }
        }
        if node.live == 0 {
            // Only tombstones (Redis leaves such a node after some trims and writes
            // it as it is): nothing of it is visible, so it is not kept.
            return true;
        }
        self.len += u64::from(node.live);
        self.nodes.insert(master, node);
        true
    }

    /// The ID of the last entry stored, tombstones included (0-0 if none).
    pub fn last_stored_id(&self) -> StreamId {
        self.nodes
            .iter()
            .next_back()
            .map_or(StreamId::ZERO, |(k, n)| n.last_id(*k))
    }

    /// The ID XADD `*` would give now, or None when the stream is exhausted.
    pub fn next_auto_id(&self, now_ms: u64) -> Option<StreamId> {
        if now_ms > self.last_id.ms {
            Some(StreamId::new(now_ms, 0))
        } else {
            self.last_id.incr()
        }
    }

    /// Live entries with `start <= id <= end`, ascending (or descending if `rev`).
    pub fn range(&self, start: StreamId, end: StreamId, rev: bool) -> RangeIter<'_> {
        let empty = start > end;
        // The node holding `start` begins at or before it.
        let from = self
            .nodes
            .range(..=start)
            .next_back()
            .map(|(k, _)| *k)
            .unwrap_or(start);
        let (from, to) = if empty {
            (StreamId::ZERO, StreamId::ZERO)
        } else {
            (from, end)
        };
        RangeIter {
            nodes: self
                .nodes
                .range((Bound::Included(from), Bound::Included(to))),
            cur: None,
            idx: 0,
            start,
            end,
            rev,
            done: empty,
        }
    }

    fn locate(&self, id: StreamId) -> Option<(StreamId, usize)> {
        let (master, node) = self.nodes.range(..=id).next_back()?;
        node.find(*master, id).ok().map(|i| (*master, i))
    }

    /// The live entry `id`, if any.
    pub fn get(&self, id: StreamId) -> Option<EntryRef<'_>> {
        let (master, i) = self.locate(id)?;
        self.nodes.get(&master)?.entry(master, i)
    }

    pub fn contains(&self, id: StreamId) -> bool {
        self.get(id).is_some()
    }

    /// XDEL of one ID: flags it deleted and keeps first-entry and max-deleted IDs.
    pub fn delete(&mut self, id: StreamId) -> bool {
        let Some((master, i)) = self.locate(id) else {
            return false;
        };
        let Some(node) = self.nodes.get_mut(&master) else {
            return false;
        };
        if node.header(master, i).deleted {
            return false;
        }
        node.mark_deleted(i);
        if node.live == 0 {
            self.nodes.remove(&master);
        }
        self.len -= 1;
        if id > self.max_deleted_id {
            self.max_deleted_id = id;
        }
        if self.len == 0 {
            self.first_id = StreamId::ZERO;
        } else if id == self.first_id {
            self.first_id = self.first_valid_id();
        }
        true
    }

    /// The first live entry's ID (0-0 if none).
    pub fn first_valid_id(&self) -> StreamId {
        self.range(StreamId::ZERO, StreamId::MAX, false)
            .next()
            .map_or(StreamId::ZERO, |e| e.id)
    }

    /// The last live entry's ID (0-0 if none).
    pub fn last_valid_id(&self) -> StreamId {
        self.range(StreamId::ZERO, StreamId::MAX, true)
            .next()
            .map_or(StreamId::ZERO, |e| e.id)
    }

    /// Redis's streamTrim: whole nodes go first; `approx` stops at the first node
    /// that cannot go whole, otherwise entries of that node are flagged deleted.
    /// `limit` (0 = none) caps the entries removed. Returns how many were removed.
    pub fn trim(&mut self, rule: Trim, approx: bool, limit: u64) -> u64 {
        let mut deleted = 0u64;
        while let Some((&master, node)) = self.nodes.iter_mut().next() {
            if let Trim::MaxLen(max) = rule {
                if self.len <= max {
                    break;
                }
            }
            let entries = node.live as u64;
            if limit > 0 && deleted + entries > limit {
                break;
            }
            let whole = match rule {
                Trim::MaxLen(max) => self.len - entries >= max,
                Trim::MinId(min) => node.last_id(master) < min,
            };
            if whole {
                self.nodes.remove(&master);
                self.len -= entries;
                deleted += entries;
                continue;
            }
            if approx {
                break;
            }
            for i in 0..node.offs.len() {
                let h = node.header(master, i);
                if h.deleted {
                    continue;
                }
                let done = match rule {
                    Trim::MaxLen(max) => self.len <= max,
                    Trim::MinId(min) => h.id >= min,
                };
                if done {
                    break;
                }
                node.mark_deleted(i);
                deleted += 1;
                self.len -= 1;
            }
            if node.live == 0 {
                self.nodes.remove(&master);
            }
            break;
        }
        self.first_id = if self.len == 0 {
            StreamId::ZERO
        } else {
            self.first_valid_id()
        };
        deleted
    }

    /// Redis's streamRangeHasTombstones: may a deleted entry lie in [start, end]?
    pub fn range_has_tombstones(&self, start: StreamId, end: StreamId) -> bool {
        if self.len == 0 || self.max_deleted_id.is_zero() {
            return false;
        }
        if self.first_id > self.max_deleted_id {
            return false;
        }
        start <= self.max_deleted_id && self.max_deleted_id <= end
    }

    /// Redis's streamEstimateDistanceFromFirstEverEntry: the logical read counter of
    /// `id`, or ENTRIES_READ_INVALID when it cannot be known.
    pub fn estimate_distance(&self, id: StreamId) -> i64 {
        if self.entries_added == 0 {
            return 0;
        }
        if self.len == 0 && id <= self.last_id {
            return self.entries_added as i64;
        }
        if id == self.last_id {
            return self.entries_added as i64;
        } else if id > self.last_id {
            return ENTRIES_READ_INVALID;
        }
        let no_frag = self.max_deleted_id.is_zero() || self.max_deleted_id < self.first_id;
        if no_frag {
            if id < self.first_id {
                return (self.entries_added - self.len) as i64;
            } else if id == self.first_id {
                return (self.entries_added - self.len + 1) as i64;
            }
        }
        ENTRIES_READ_INVALID
    }

    /// A group's lag (None when unknown), as XINFO reports it.
    pub fn group_lag(&self, g: &ConsumerGroup) -> Option<i64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if g.entries_read != ENTRIES_READ_INVALID
            && !self.range_has_tombstones(g.last_id, StreamId::MAX)
        {
            return Some((self.entries_added as i64).wrapping_sub(g.entries_read));
        }
        let read = self.estimate_distance(g.last_id);
        (read != ENTRIES_READ_INVALID).then(|| (self.entries_added as i64).wrapping_sub(read))
    }

    /// Advances a group past `id` (delivered by XREADGROUP), keeping its read counter.
    pub fn advance_group(&mut self, group: &[u8], id: StreamId) {
        let tomb = self.range_has_tombstones(id, StreamId::MAX);
        let est = self.estimate_distance(id);
        let entries_added = self.entries_added;
        if let Some(g) = self.groups.get_mut(group) {
            if id <= g.last_id {
                return;
            }
            if g.entries_read != ENTRIES_READ_INVALID && !tomb {
                g.entries_read = g.entries_read.wrapping_add(1);
            } else if entries_added > 0 {
                g.entries_read = est;
            }
            g.last_id = id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lim(n: usize) -> NodeLimits {
        NodeLimits {
            max_entries: n,
            max_bytes: 4096,
        }
    }

    fn ids(s: &StreamValue) -> Vec<u64> {
        s.range(StreamId::ZERO, StreamId::MAX, false)
            .map(|e| e.id.ms)
            .collect()
    }

    #[test]
    fn append_range_and_fields() {
        let mut s = StreamValue::new();
        for i in 1..=25u64 {
            let v = i.to_string();
            s.append(StreamId::new(i, 0), &[b"f", v.as_bytes()], lim(10));
        }
        assert_eq!(s.len(), 25);
        assert_eq!(s.node_count(), 3);
        let e = s.get(StreamId::new(7, 0)).unwrap();
        assert_eq!(e.fields().collect::<Vec<_>>(), vec![&b"f"[..], b"7"]);
        let r: Vec<u64> = s
            .range(StreamId::new(9, 0), StreamId::new(12, 0), true)
            .map(|e| e.id.ms)
            .collect();
        assert_eq!(r, vec![12, 11, 10, 9]);
        assert!(s
            .range(StreamId::new(5, 0), StreamId::new(4, 0), false)
            .next()
            .is_none());
    }

    #[test]
    fn approximate_trim_removes_whole_nodes() {
        let mut s = StreamValue::new();
        for i in 1..=100u64 {
            s.append(StreamId::new(i, 0), &[b"f", b"v"], lim(10));
        }
        s.append(StreamId::new(101, 0), &[b"f", b"v"], lim(10));
        assert_eq!(s.trim(Trim::MaxLen(55), true, 30), 30);
        assert_eq!(s.len(), 71);
        assert_eq!(s.first_id, StreamId::new(31, 0));
        assert_eq!(s.trim(Trim::MaxLen(2), false, 0), 69);
        assert_eq!(ids(&s), vec![100, 101]);
    }

    #[test]
    fn delete_tracks_first_and_max_deleted() {
        let mut s = StreamValue::new();
        for i in 1..=5u64 {
            s.append(StreamId::new(i, 0), &[b"f", b"v"], lim(100));
        }
        assert!(s.delete(StreamId::new(2, 0)));
        assert!(!s.delete(StreamId::new(2, 0)));
        assert_eq!(s.first_id, StreamId::new(1, 0));
        assert!(s.delete(StreamId::new(1, 0)));
        assert_eq!(s.first_id, StreamId::new(3, 0));
        assert_eq!(s.max_deleted_id, StreamId::new(2, 0));
        assert_eq!(s.len(), 3);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u64, u8),
        Del(u64),
        TrimLen(u64, bool),
        TrimMin(u64, bool),
        Range(u64, u64, bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u64..4, 0u8..4).prop_map(|(d, n)| Op::Add(d, n)),
            2 => (0u64..200).prop_map(Op::Del),
            1 => (0u64..60, any::<bool>()).prop_map(|(n, a)| Op::TrimLen(n, a)),
            1 => (0u64..200, any::<bool>()).prop_map(|(n, a)| Op::TrimMin(n, a)),
            2 => (0u64..200, 0u64..200, any::<bool>()).prop_map(|(a, b, r)| Op::Range(a, b, r)),
        ]
    }

    proptest! {
        #[test]
        fn stream_matches_model(ops in proptest::collection::vec(op(), 1..300), per_node in 1usize..8) {
            let mut s = StreamValue::new();
            let mut model: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
            let mut next = 0u64;
            for o in ops {
                match o {
                    Op::Add(d, n) => {
                        next += d;
                        let fields: Vec<Vec<u8>> = (0..n as u64 * 2).map(|i| format!("x{i}-{next}").into_bytes()).collect();
                        let refs: Vec<&[u8]> = fields.iter().map(|f| f.as_slice()).collect();
                        s.append(StreamId::new(next, 0), &refs, lim(per_node));
                        model.insert(next, fields);
                    }
                    Op::Del(k) => {
                        prop_assert_eq!(s.delete(StreamId::new(k, 0)), model.remove(&k).is_some());
                    }
                    Op::TrimLen(n, approx) => {
                        let before = model.len() as u64;
                        let removed = s.trim(Trim::MaxLen(n), approx, 0);
                        for _ in 0..removed {
                            let k = *model.keys().next().unwrap();
                            model.remove(&k);
                        }
                        prop_assert_eq!(model.len() as u64, before - removed);
                        if !approx {
                            prop_assert_eq!(model.len() as u64, before.min(n));
                        }
                    }
                    Op::TrimMin(m, approx) => {
                        let removed = s.trim(Trim::MinId(StreamId::new(m, 0)), approx, 0);
                        let below: Vec<u64> = model.range(..m).map(|(k, _)| *k).collect();
                        if !approx {
                            prop_assert_eq!(removed as usize, below.len());
                        }
                        for k in below.iter().take(removed as usize) {
                            model.remove(k);
                        }
                    }
                    Op::Range(a, b, rev) => {
                        let got: Vec<(u64, Vec<Vec<u8>>)> = s
                            .range(StreamId::new(a, 0), StreamId::new(b, 0), rev)
                            .map(|e| (e.id.ms, e.fields().map(|f| f.to_vec()).collect()))
                            .collect();
                        let mut want: Vec<(u64, Vec<Vec<u8>>)> = if a <= b {
                            model.range(a..=b).map(|(k, v)| (*k, v.clone())).collect()
                        } else {
                            Vec::new()
                        };
                        if rev {
                            want.reverse();
                        }
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(s.len(), model.len() as u64);
                let first = model.keys().next().map_or(StreamId::ZERO, |k| StreamId::new(*k, 0));
                prop_assert_eq!(s.first_id, first);
            }
        }
    }
}
