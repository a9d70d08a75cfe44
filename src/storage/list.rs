//! The list value type, after Redis's quicklist: a deque of packed nodes. Each node is
//! one byte buffer of length-framed entries, kept under `list-max-listpack-size`
//! (a positive value caps the entries per node, -1..-5 the node's bytes at 4..64 KiB),
//! so a list costs a couple of bytes of framing per element instead of a pointer and
//! an allocation, pushes and pops at either end touch only the end node, and index
//! lookups skip whole nodes by their counts.
//!
//! Entry framing: `varint(len) bytes reversed-varint(len)`. The leading LEB128 length
//! lets a node be walked forwards; the same bytes mirrored at the end let it be walked
//! backwards from any entry boundary, as listpack's back-length does.
//!
//! Redis 7.0 reports every list as `quicklist` (the `listpack` list encoding arrived in
//! 7.2), and so does this type, whatever number of nodes it holds.
//!
//! An element of at least the packed threshold (1 GB unless DEBUG
//! QUICKLIST-PACKED-THRESHOLD says otherwise) is stored alone in a *plain* node, as
//! quicklist.c does: nothing is packed beside it, and such a node is never merged.
//!
//! With `list-compress-depth` N > 0 (taken when the list is created, as Redis does),
//! every node but the N at each end is kept LZF-compressed when that saves at least
//! 8 bytes of a node of 48 or more (quicklist.c's rules). The ends, where pushes and
//! pops work, stay plain bytes; a read of an inner node decompresses a copy (so
//! iterators and `get` yield `Cow`s), and a write decompresses the node, changes it
//! and compresses it again (`settle`).

use std::borrow::Cow;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::limits::EncodingLimits;

/// quicklist.c's SIZE_SAFETY_LIMIT: a count-limited node never grows past this.
const SIZE_SAFETY_LIMIT: usize = 8192;
/// Node byte limits for list-max-listpack-size -1 .. -5.
const SIZE_CLASSES: [usize; 5] = [4096, 8192, 16384, 32768, 65536];
/// quicklist.c's FILL_MAX: the largest per-node entry count honoured.
const FILL_MAX: i64 = (1 << 15) - 1;
/// quicklist.c's COMPRESS_MAX: the largest compress depth honoured.
const COMPRESS_MAX: i64 = (1 << 16) - 1;
/// quicklist.c: nodes smaller than this are not worth compressing...
const MIN_COMPRESS_BYTES: usize = 48;
/// ...and a compression must save at least this much to be kept.
const MIN_COMPRESS_IMPROVE: usize = 8;

/// quicklist.c's default packed_threshold: elements from 1 GB up get a plain node.
const DEFAULT_PACKED_THRESHOLD: usize = 1 << 30;
/// The largest threshold DEBUG QUICKLIST-PACKED-THRESHOLD takes (quicklist.c's
/// `(1ull << 32) - (1 << 20)`: a packed entry must stay below 4 GB).
const MAX_PACKED_THRESHOLD: u64 = (1 << 32) - (1 << 20);

/// Process-wide, as in Redis (a DEBUG knob for tests, read with a relaxed load).
#[cfg(not(test))]
static PACKED_THRESHOLD: AtomicUsize = AtomicUsize::new(DEFAULT_PACKED_THRESHOLD);

// Unit tests run in parallel threads of one process: each gets its own threshold, so
// a test of plain nodes does not change the node layout another test checks.
#[cfg(test)]
thread_local! {
    static PACKED_THRESHOLD_OF_TEST: AtomicUsize =
        const { AtomicUsize::new(DEFAULT_PACKED_THRESHOLD) };
}

fn with_threshold<R>(f: impl FnOnce(&AtomicUsize) -> R) -> R {
    #[cfg(not(test))]
    return f(&PACKED_THRESHOLD);
    #[cfg(test)]
    PACKED_THRESHOLD_OF_TEST.with(f)
}

/// DEBUG QUICKLIST-PACKED-THRESHOLD: 0 restores the default; false (and nothing
/// changes) above the largest threshold a packed entry allows.
pub fn set_packed_threshold(bytes: u64) -> bool {
    if bytes > MAX_PACKED_THRESHOLD {
        return false;
    }
    let bytes = if bytes == 0 {
        DEFAULT_PACKED_THRESHOLD
    } else {
        bytes as usize
    };
    with_threshold(|t| t.store(bytes, Ordering::Relaxed));
    true
}

/// The current threshold, for the RDB encoder's nodes.
pub fn packed_threshold() -> usize {
    with_threshold(|t| t.load(Ordering::Relaxed))
}

/// Whether `data` must be stored in a plain node of its own.
#[inline]
fn is_large(data: &[u8]) -> bool {
    data.len() >= packed_threshold()
}

/// Bytes taken by the LEB128 encoding of `n`.
#[inline]
fn varint_len(n: usize) -> usize {
    let mut k = 1;
    let mut v = n >> 7;
    while v != 0 {
        k += 1;
        v >>= 7;
    }
    k
}

/// Bytes one element of `len` bytes takes in a node, framing included.
#[inline]
fn entry_size(len: usize) -> usize {
    len + 2 * varint_len(len)
}

/// Frames `data` into `dst`, which must be exactly `entry_size(data.len())` long.
fn write_entry(dst: &mut [u8], data: &[u8]) {
    let h = varint_len(data.len());
    let total = dst.len();
    let mut v = data.len();
    for i in 0..h {
        let mut b = (v & 0x7f) as u8;
        v >>= 7;
        if i + 1 < h {
            b |= 0x80;
        }
        dst[i] = b;
        dst[total - 1 - i] = b;
    }
    dst[h..h + data.len()].copy_from_slice(data);
}

/// Decodes the entry starting at `off`: (data range, offset of the next entry).
#[inline]
fn read_fwd(buf: &[u8], off: usize) -> (Range<usize>, usize) {
    let mut len = 0usize;
    let mut shift = 0;
    let mut i = off;
    loop {
        let b = buf[i];
        i += 1;
        len |= ((b & 0x7f) as usize) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    let h = i - off;
    (i..i + len, i + len + h)
}

/// Decodes the entry ending at `end`: (data range, offset where the entry starts).
#[inline]
fn read_back(buf: &[u8], end: usize) -> (Range<usize>, usize) {
    let mut len = 0usize;
    let mut shift = 0;
    let mut i = end;
    loop {
        i -= 1;
        let b = buf[i];
        len |= ((b & 0x7f) as usize) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    let h = end - i;
    let start = end - 2 * h - len;
    (start + h..start + h + len, start)
}

/// A node's bytes, with room kept in front of them. LPUSH adds at a node's head:
/// in a plain vector every push there moves the whole node (up to 8 KiB by default;
/// memmove was 6% of LPUSH -P 16), as listpack's does in Redis. Here a push at the
/// head takes bytes from the gap in front, and when there is none the node is copied
/// once behind a new gap as large as its contents (so front pushes cost amortised
/// O(1) per byte, as back pushes do with the vector's doubling); popping from the
/// head just widens the gap. The gap is part of the node's capacity, so it is charged
/// as memory; a node that fills up gives it back (`shrink_to_fit`).
#[derive(Debug, Clone, Default)]
struct NodeBuf {
    /// `bytes[..head]` is the gap, `bytes[head..]` the node's entries.
    bytes: Vec<u8>,
    head: usize,
}

impl std::ops::Deref for NodeBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[self.head..]
    }
}

impl From<Vec<u8>> for NodeBuf {
    fn from(bytes: Vec<u8>) -> NodeBuf {
        NodeBuf { bytes, head: 0 }
    }
}

impl NodeBuf {
    /// Heap bytes held, gap included.
    fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    fn truncate(&mut self, len: usize) {
        self.bytes.truncate(self.head + len);
    }

    /// Drops the first `n` bytes (whole entries): they become gap.
    fn drop_front(&mut self, n: usize) {
        self.head = (self.head + n).min(self.bytes.len());
    }

    fn extend_from_slice(&mut self, more: &[u8]) {
        self.bytes.extend_from_slice(more);
    }

    /// Gives back the gap and any spare capacity.
    fn shrink_to_fit(&mut self) {
        if self.head > 0 {
            self.bytes.drain(..self.head);
            self.head = 0;
        }
        self.bytes.shrink_to_fit();
    }

    /// Resizes `self[range]` to `new_len` bytes, moving what follows (or, at the
    /// front, taking from the gap), and returns the new slot.
    fn resize_range(&mut self, range: Range<usize>, new_len: usize) -> &mut [u8] {
        let old_len = range.end - range.start;
        if range.start == 0 && new_len > old_len {
            let grow = new_len - old_len;
            if self.head < grow {
                self.regap(grow);
            }
            // The old bytes of the range stay where they were and the new
            // ones are written over them whole, so only the start moves.
            self.head -= grow;
            return &mut self.bytes[self.head..self.head + new_len];
        }
        let start = self.head + range.start;
        resize_vec_range(&mut self.bytes, start..self.head + range.end, new_len)
    }

    /// Moves the entries behind a gap of at least `need` bytes, and as many as the
    /// entries take (amortising the copy over the pushes that fill it).
    fn regap(&mut self, need: usize) {
        let live = &self.bytes[self.head..];
        let gap = need.max(live.len());
        let mut bytes = Vec::with_capacity(gap + live.len());
        bytes.resize(gap, 0);
        bytes.extend_from_slice(live);
        self.bytes = bytes;
        self.head = gap;
    }
}

/// Resizes `buf[range]` to `new_len` bytes, moving the tail, and returns the new slot.
fn resize_vec_range(buf: &mut Vec<u8>, range: Range<usize>, new_len: usize) -> &mut [u8] {
    let old_len = range.end - range.start;
    let tail = buf.len();
    if new_len > old_len {
        let grow = new_len - old_len;
        buf.resize(tail + grow, 0);
        buf.copy_within(range.end..tail, range.end + grow);
    } else if new_len < old_len {
        let shrink = old_len - new_len;
        buf.copy_within(range.end..tail, range.end - shrink);
        buf.truncate(tail - shrink);
    }
    &mut buf[range.start..range.start + new_len]
}

/// Whether a node of `bytes` bytes and `count` entries respects the fill setting
/// (quicklist.c's _quicklistNodeAllowInsert rule).
#[inline]
fn fits(fill: i32, bytes: usize, count: usize) -> bool {
    if fill < 0 {
        let class = ((-fill) as usize - 1).min(SIZE_CLASSES.len() - 1);
        bytes <= SIZE_CLASSES[class]
    } else {
        bytes <= SIZE_SAFETY_LIMIT && count <= fill as usize
    }
}

/// One node: packed entries, or one plain (large) element; LZF-compressed while
/// it is an inner node of a list with a compress depth.
#[derive(Debug, Clone, Default)]
struct Node {
    buf: NodeBuf,
    count: u32,
    /// Holds one element stored alone because of its size: nothing joins it.
    plain: bool,
    /// While `buf` holds the LZF form of the entries: their size. 0 while `buf`
    /// holds the entries themselves.
    lzf_of: u32,
    /// The size of the entries when compressing them last failed to save enough:
    /// a node that did not shrink is not tried again until its size changes.
    incompressible_at: u32,
}

/// Byte offset where entry `i` (< `count`) of `buf` starts, walking from the nearer
/// end.
fn offset_in(buf: &[u8], count: usize, i: usize) -> usize {
    if i <= count / 2 {
        let mut off = 0;
        for _ in 0..i {
            off = read_fwd(buf, off).1;
        }
        off
    } else {
        let mut end = buf.len();
        for _ in 0..count - 1 - i {
            end = read_back(buf, end).1;
        }
        read_back(buf, end).1
    }
}

impl Node {
    /// A node holding just `data`, in an exactly sized buffer; plain if `data` is
    /// at least the packed threshold.
    fn single(data: &[u8]) -> Node {
        let mut buf = vec![0; entry_size(data.len())];
        write_entry(&mut buf, data);
        Node {
            buf: buf.into(),
            count: 1,
            plain: is_large(data),
            ..Node::default()
        }
    }

    #[inline]
    fn is_compressed(&self) -> bool {
        self.lzf_of != 0
    }

    /// The entries' bytes: borrowed, or decompressed into a copy.
    fn entries(&self) -> Cow<'_, [u8]> {
        if !self.is_compressed() {
            return Cow::Borrowed(&self.buf);
        }
        // Our own compressor's output of exactly this size: it always decompresses.
        let raw = crate::storage::rdb::lzf_decompress(&self.buf, self.lzf_of as usize);
        Cow::Owned(raw.expect("a list node's LZF bytes decompress to their recorded size"))
    }

    /// Size of the entries, compressed or not.
    fn entries_len(&self) -> usize {
        if self.is_compressed() {
            self.lzf_of as usize
        } else {
            self.buf.len()
        }
    }

    /// Makes `buf` hold the entries again (before any change to them).
    fn decompress(&mut self) {
        if self.is_compressed() {
            let raw = self.entries().into_owned();
            self.buf = raw.into();
            self.lzf_of = 0;
        }
    }

    /// Compresses the entries if that saves enough (quicklist.c's rule).
    fn compress(&mut self) {
        let len = self.buf.len();
        if self.is_compressed()
            || len < MIN_COMPRESS_BYTES
            || u32::try_from(len).is_err()
            || self.incompressible_at == len as u32
        {
            return;
        }
        match crate::storage::rdb::lzf_compress(&self.buf, len - MIN_COMPRESS_IMPROVE - 1) {
            Some(mut lzf) => {
                // The compressor allocates for the worst case: keep what it used.
                lzf.shrink_to_fit();
                self.buf = lzf.into();
                self.lzf_of = len as u32;
            }
            None => self.incompressible_at = len as u32,
        }
    }

    /// Whether two neighbours may become one node.
    fn can_merge(&self, next: &Node, fill: i32) -> bool {
        !self.plain
            && !next.plain
            && !self.is_compressed()
            && !next.is_compressed()
            && fits(
                fill,
                self.buf.len() + next.buf.len(),
                (self.count + next.count) as usize,
            )
    }

    /// Entries before byte offset `off` (an entry boundary).
    fn index_of(&self, off: usize) -> usize {
        let (mut at, mut i) = (0, 0);
        while at < off {
            at = read_fwd(&self.buf, at).1;
            i += 1;
        }
        i
    }

    /// Inserts `data` as a new entry at byte offset `off` (an entry boundary).
    fn insert_at(&mut self, off: usize, data: &[u8]) {
        let slot = self.buf.resize_range(off..off, entry_size(data.len()));
        write_entry(slot, data);
        self.count += 1;
    }

    /// Replaces the entry starting at `off` with `data`.
    fn replace_at(&mut self, off: usize, data: &[u8]) {
        let (_, next) = read_fwd(&self.buf, off);
        let slot = self.buf.resize_range(off..next, entry_size(data.len()));
        write_entry(slot, data);
    }

    /// Byte offset where entry `i` (< count) starts (the node holds its entries).
    fn offset_of(&self, i: usize) -> usize {
        offset_in(&self.buf, self.count as usize, i)
    }

    /// Moves entries `i..` into a new node.
    fn split_off(&mut self, i: usize) -> Node {
        let off = self.offset_of(i);
        let tail = self.buf[off..].to_vec();
        self.buf.truncate(off);
        self.buf.shrink_to_fit();
        let moved = self.count - i as u32;
        self.count = i as u32;
        Node {
            buf: tail.into(),
            count: moved,
            ..Node::default()
        }
    }
}

/// One node as DEBUG OBJECT / QUICKLIST show it.
pub struct NodeSummary {
    pub count: usize,
    /// Bytes of its entries (uncompressed).
    pub bytes: usize,
    /// Bytes held while compressed.
    pub compressed_bytes: Option<usize>,
    pub plain: bool,
}

/// An element read from a list: borrowed from its node, or copied out of a
/// compressed one.
pub type Elem<'a> = Cow<'a, [u8]>;

#[derive(Debug, Clone)]
pub struct ListValue {
    nodes: VecDeque<Node>,
    len: usize,
    /// list-max-listpack-size when the list was created (Redis keeps it per list too).
    fill: i32,
    /// list-compress-depth when the list was created: nodes this far from both ends
    /// stay uncompressed (0: none is compressed).
    depth: u16,
    /// Sum of the nodes' buffer capacities: every write re-measures its key, and
    /// walking a long list's nodes for it (or even a sample of 16, as before) was
    /// 3% of LPUSH -P 16. Pushes and pops keep it by difference; the operations that
    /// walk the list anyway (LSET, LINSERT, LREM) count it again.
    buf_bytes: usize,
}

impl Default for ListValue {
    fn default() -> Self {
        ListValue::with_fill(-2)
    }
}

impl ListValue {
    /// An empty list whose nodes follow the current `list-max-listpack-size` and
    /// `list-compress-depth`.
    pub fn new(limits: &EncodingLimits) -> ListValue {
        let mut l = ListValue::with_fill(limits.list_max_listpack_size);
        l.depth = limits.list_compress_depth.clamp(0, COMPRESS_MAX) as u16;
        l
    }

    /// An empty list with an explicit fill factor (clamped as quicklistSetFill does).
    pub fn with_fill(fill: i64) -> ListValue {
        ListValue {
            nodes: VecDeque::new(),
            len: 0,
            fill: fill.clamp(-(SIZE_CLASSES.len() as i64), FILL_MAX) as i32,
            depth: 0,
            buf_bytes: 0,
        }
    }

    /// The compress depth this list keeps (0: none).
    pub fn compress_depth(&self) -> u16 {
        self.depth
    }

    /// Whether node `i` of `count` is within the compress depth of an end.
    #[inline]
    fn near_an_end(&self, i: usize, count: usize) -> bool {
        let d = self.depth as usize;
        i < d || i + d >= count
    }

    /// Puts every node in the state the compress depth asks: the ends' nodes
    /// uncompressed, the others compressed where that pays. After a change in the
    /// middle (LSET, LINSERT, LREM), which may have moved nodes across the depth.
    fn settle(&mut self) {
        if self.depth != 0 {
            let count = self.nodes.len();
            for i in 0..count {
                self.settle_node(i, count);
            }
        }
        self.recount();
    }

    /// Node `i` of `count` as the depth asks: uncompressed near an end, else
    /// compressed where that pays.
    fn settle_node(&mut self, i: usize, count: usize) {
        let near = self.near_an_end(i, count);
        let n = &mut self.nodes[i];
        if near {
            n.decompress();
        } else {
            n.compress();
        }
    }

    /// `settle` for a change at the ends (a push or pop moves at most two nodes
    /// across the depth at each end), keeping `buf_bytes` by difference.
    fn settle_ends(&mut self) {
        if self.depth == 0 {
            return;
        }
        let count = self.nodes.len();
        let reach = (self.depth as usize + 2).min(count);
        let head = 0..reach;
        let tail = count.saturating_sub(reach).max(reach)..count;
        for i in head.chain(tail) {
            let before = self.nodes[i].buf.capacity();
            self.settle_node(i, count);
            self.buf_bytes = self.buf_bytes + self.nodes[i].buf.capacity() - before;
        }
    }

    /// OBJECT ENCODING's name for the current representation.
    pub fn encoding(&self) -> &'static str {
        "quicklist"
    }

    /// Lazy free: drops whole nodes from the tail until about `budget` elements went.
    /// True once none is left; the list is then only fit for dropping.
    pub fn shed(&mut self, budget: usize) -> bool {
        let mut freed = 0;
        while freed < budget {
            match self.nodes.pop_back() {
                Some(n) => {
                    freed += n.count as usize;
                    self.buf_bytes -= n.buf.capacity();
                }
                None => return true,
            }
        }
        self.nodes.is_empty()
    }

    /// Heap bytes held, for memory accounting. O(1): see `buf_bytes`.
    pub fn heap_size(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node>() + self.buf_bytes
    }

    /// Counts `buf_bytes` again from the nodes.
    fn recount(&mut self) {
        self.buf_bytes = self.nodes.iter().map(|n| n.buf.capacity()).sum();
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of nodes (for tests and introspection).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// list-max-listpack-size as this list applies it (DEBUG OBJECT's ql_listpack_max).
    pub fn fill(&self) -> i32 {
        self.fill
    }

    /// Each node's shape, head to tail: DEBUG OBJECT and DEBUG QUICKLIST report
    /// from it.
    pub fn node_summaries(&self) -> impl Iterator<Item = NodeSummary> + '_ {
        self.nodes.iter().map(|n| NodeSummary {
            count: n.count as usize,
            bytes: n.entries_len(),
            compressed_bytes: n.is_compressed().then(|| n.buf.len()),
            plain: n.plain,
        })
    }

    /// Whether `data` may join `node` (None: there is no node). A plain node takes
    /// nothing beside its element, and a large element joins no node.
    fn allows(&self, node: Option<&Node>, data: &[u8]) -> bool {
        node.is_some_and(|n| {
            !n.plain
                && !n.is_compressed()
                && !is_large(data)
                && fits(
                    self.fill,
                    n.buf.len() + entry_size(data.len()),
                    n.count as usize + 1,
                )
        })
    }

    pub fn push_back(&mut self, data: &[u8]) {
        if self.allows(self.nodes.back(), data) {
            if let Some(n) = self.nodes.back_mut() {
                let (end, before) = (n.buf.len(), n.buf.capacity());
                n.insert_at(end, data);
                self.buf_bytes = self.buf_bytes + n.buf.capacity() - before;
            }
        } else {
            // The old tail is full now: give back its spare capacity.
            if let Some(n) = self.nodes.back_mut() {
                let before = n.buf.capacity();
                n.buf.shrink_to_fit();
                self.buf_bytes = self.buf_bytes + n.buf.capacity() - before;
            }
            let n = Node::single(data);
            self.buf_bytes += n.buf.capacity();
            self.nodes.push_back(n);
            self.settle_ends();
        }
        self.len += 1;
    }

    pub fn push_front(&mut self, data: &[u8]) {
        if self.allows(self.nodes.front(), data) {
            if let Some(n) = self.nodes.front_mut() {
                let before = n.buf.capacity();
                n.insert_at(0, data);
                self.buf_bytes = self.buf_bytes + n.buf.capacity() - before;
            }
        } else {
            if let Some(n) = self.nodes.front_mut() {
                let before = n.buf.capacity();
                n.buf.shrink_to_fit();
                self.buf_bytes = self.buf_bytes + n.buf.capacity() - before;
            }
            let n = Node::single(data);
            self.buf_bytes += n.buf.capacity();
            self.nodes.push_front(n);
            self.settle_ends();
        }
        self.len += 1;
    }

    pub fn push(&mut self, data: &[u8], front: bool) {
        if front {
            self.push_front(data)
        } else {
            self.push_back(data)
        }
    }

    /// The first element, if any. (The end nodes are never compressed: the
    /// compress depth is at least 1 when it is not 0.)
    pub fn front(&self) -> Option<&[u8]> {
        let n = self.nodes.front()?;
        debug_assert!(!n.is_compressed());
        Some(&n.buf[read_fwd(&n.buf, 0).0])
    }

    /// The last element, if any.
    pub fn back(&self) -> Option<&[u8]> {
        let n = self.nodes.back()?;
        debug_assert!(!n.is_compressed());
        Some(&n.buf[read_back(&n.buf, n.buf.len()).0])
    }

    pub fn pop_front(&mut self) -> Option<Vec<u8>> {
        let v = self.front()?.to_vec();
        self.remove_front(1);
        Some(v)
    }

    pub fn pop_back(&mut self) -> Option<Vec<u8>> {
        let v = self.back()?.to_vec();
        self.remove_back(1);
        Some(v)
    }

    pub fn pop(&mut self, front: bool) -> Option<Vec<u8>> {
        if front {
            self.pop_front()
        } else {
            self.pop_back()
        }
    }

    /// Removes the first `n` elements (all of them if `n` >= len).
    pub fn remove_front(&mut self, n: usize) {
        let mut n = n.min(self.len);
        self.len -= n;
        while n > 0 {
            let Some(node) = self.nodes.front_mut() else {
                break;
            };
            let c = node.count as usize;
            if c <= n {
                n -= c;
                if let Some(gone) = self.nodes.pop_front() {
                    self.buf_bytes -= gone.buf.capacity();
                }
            } else {
                // LTRIM may cut into an inner node.
                let before = node.buf.capacity();
                node.decompress();
                let off = node.offset_of(n);
                node.buf.drop_front(off);
                node.count -= n as u32;
                self.buf_bytes = self.buf_bytes + node.buf.capacity() - before;
                n = 0;
            }
        }
        self.settle_ends();
    }

    /// Removes the last `n` elements (all of them if `n` >= len).
    pub fn remove_back(&mut self, n: usize) {
        let mut n = n.min(self.len);
        self.len -= n;
        while n > 0 {
            let Some(node) = self.nodes.back_mut() else {
                break;
            };
            let c = node.count as usize;
            if c <= n {
                n -= c;
                if let Some(gone) = self.nodes.pop_back() {
                    self.buf_bytes -= gone.buf.capacity();
                }
            } else {
                let keep = c - n;
                let before = node.buf.capacity();
                node.decompress();
                let off = node.offset_of(keep);
                node.buf.truncate(off);
                node.count = keep as u32;
                self.buf_bytes = self.buf_bytes + node.buf.capacity() - before;
                n = 0;
            }
        }
        self.settle_ends();
    }

    /// Converts a Redis index (negative counts from the tail) to a position.
    pub fn resolve(&self, index: i64) -> Option<usize> {
        let len = self.len as i64;
        let i = if index < 0 {
            index.checked_add(len)?
        } else {
            index
        };
        (0..len).contains(&i).then_some(i as usize)
    }

    /// (node, position in that node) of element `idx` < len, walking from the
    /// nearer end of the list.
    fn locate(&self, idx: usize) -> (usize, usize) {
        if idx < self.len / 2 {
            let mut i = idx;
            for (ni, n) in self.nodes.iter().enumerate() {
                let c = n.count as usize;
                if i < c {
                    return (ni, i);
                }
                i -= c;
            }
        } else {
            let mut r = self.len - 1 - idx;
            for ni in (0..self.nodes.len()).rev() {
                let n = &self.nodes[ni];
                let c = n.count as usize;
                if r < c {
                    return (ni, c - 1 - r);
                }
                r -= c;
            }
        }
        // Unreachable while len matches the node counts; an empty position is safe.
        (self.nodes.len(), 0)
    }

    /// Element at a Redis index (negative counts from the tail).
    pub fn get(&self, index: i64) -> Option<Elem<'_>> {
        let (ni, inflated, off) = self.position(self.resolve(index)?);
        Some(match inflated {
            Some(buf) => Cow::Owned(buf[read_fwd(&buf, off).0].to_vec()),
            None => {
                let buf: &[u8] = &self.nodes.get(ni)?.buf;
                Cow::Borrowed(&buf[read_fwd(buf, off).0])
            }
        })
    }

    /// Replaces the element at a Redis index; false if out of range.
    pub fn set(&mut self, index: i64, data: &[u8]) -> bool {
        let Some(idx) = self.resolve(index) else {
            return false;
        };
        let (ni, i) = self.locate(idx);
        let Some(n) = self.nodes.get_mut(ni) else {
            return false;
        };
        n.decompress();
        let off = n.offset_of(i);
        if n.plain == is_large(data) {
            n.replace_at(off, data);
            self.fix_node(ni);
        } else {
            // Plain becomes packed or the other way round: the element gets a node
            // of its own, as quicklistReplaceEntry inserts a new one and deletes
            // the old.
            let ni = self.isolate(ni, off);
            self.nodes[ni] = Node::single(data);
        }
        self.settle();
        true
    }

    /// Splits node `ni` so that the entry at byte offset `off` is alone in its node,
    /// and returns that node's index.
    fn isolate(&mut self, ni: usize, off: usize) -> usize {
        let ni = self.split_at(ni, off);
        let next = read_fwd(&self.nodes[ni].buf, 0).1;
        self.split_at(ni, next);
        ni
    }

    /// Splits node `ni` before byte offset `off` (an entry boundary) and returns the
    /// index of the node that now starts with the entry at `off` (`ni` itself when
    /// `off` is 0; a past-the-end `off` splits nothing).
    fn split_at(&mut self, ni: usize, off: usize) -> usize {
        let n = &mut self.nodes[ni];
        if off == 0 {
            return ni;
        }
        if off >= n.buf.len() {
            return ni + 1;
        }
        let i = n.index_of(off);
        let tail = n.split_off(i);
        self.nodes.insert(ni + 1, tail);
        ni + 1
    }

    /// LINSERT: puts `data` before or after the first element equal to `pivot`.
    /// False if there is no such element.
    pub fn insert_by_pivot(&mut self, pivot: &[u8], data: &[u8], after: bool) -> bool {
        let mut found = None;
        'scan: for (ni, n) in self.nodes.iter().enumerate() {
            let buf = n.entries();
            let mut off = 0;
            while off < buf.len() {
                let (r, next) = read_fwd(&buf, off);
                if &buf[r] == pivot {
                    found = Some((ni, if after { next } else { off }));
                    break 'scan;
                }
                off = next;
            }
        }
        let Some((ni, at)) = found else {
            return false;
        };
        // The offsets are the entries' own: the node holds them again.
        self.nodes[ni].decompress();
        if self.nodes[ni].plain || is_large(data) {
            self.insert_beside_plain(ni, at, data);
        } else {
            self.nodes[ni].insert_at(at, data);
            self.fix_node(ni);
        }
        self.len += 1;
        self.settle();
        true
    }

    /// LINSERT where a plain node is involved (the pivot's node is plain or the new
    /// element is large): a small element joins the neighbour it touches if that
    /// node takes it, else (and a large one always) gets a node of its own, the
    /// pivot's packed node split around it (quicklist.c's _quicklistInsert).
    fn insert_beside_plain(&mut self, ni: usize, at: usize, data: &[u8]) {
        let node_len = self.nodes[ni].buf.len();
        if self.nodes[ni].plain && !is_large(data) {
            if at == 0 && ni > 0 && self.allows(self.nodes.get(ni - 1), data) {
                let prev = &mut self.nodes[ni - 1];
                let end = prev.buf.len();
                prev.insert_at(end, data);
                return;
            }
            if at == node_len && self.allows(self.nodes.get(ni + 1), data) {
                self.nodes[ni + 1].insert_at(0, data);
                return;
            }
        }
        let slot = self.split_at(ni, at);
        self.nodes.insert(slot, Node::single(data));
    }

    /// Splits node `ni` until every part respects the fill setting (a node of one
    /// element may exceed it: a big element gets a node of its own).
    fn fix_node(&mut self, ni: usize) {
        let Some(n) = self.nodes.get(ni) else {
            return;
        };
        if n.count <= 1 || fits(self.fill, n.buf.len(), n.count as usize) {
            return;
        }
        let half = n.count as usize / 2;
        let tail = self.nodes[ni].split_off(half);
        self.nodes.insert(ni + 1, tail);
        self.fix_node(ni + 1);
        self.fix_node(ni);
    }

    /// LREM: removes up to `limit` elements equal to `value` (0 = all), scanning from
    /// the tail when `from_tail`. Returns how many went.
    pub fn remove_matching(&mut self, value: &[u8], limit: usize, from_tail: bool) -> usize {
        let limit = if limit == 0 { usize::MAX } else { limit };
        let mut removed = 0;
        let mut hits: Vec<Range<usize>> = Vec::new();
        let count = self.nodes.len();
        for k in 0..count {
            if removed == limit {
                break;
            }
            let ni = if from_tail { count - 1 - k } else { k };
            let n = &mut self.nodes[ni];
            hits.clear();
            let buf = n.entries();
            let mut off = 0;
            while off < buf.len() {
                let (r, next) = read_fwd(&buf, off);
                if &buf[r] == value {
                    hits.push(off..next);
                }
                off = next;
            }
            drop(buf);
            let budget = limit - removed;
            if hits.len() > budget {
                if from_tail {
                    hits.drain(..hits.len() - budget);
                } else {
                    hits.truncate(budget);
                }
            }
            if hits.is_empty() {
                continue;
            }
            n.decompress();
            let cut: usize = hits.iter().map(|r| r.len()).sum();
            let mut kept = Vec::with_capacity(n.buf.len() - cut);
            let mut from = 0;
            for r in &hits {
                kept.extend_from_slice(&n.buf[from..r.start]);
                from = r.end;
            }
            kept.extend_from_slice(&n.buf[from..]);
            n.buf = kept.into();
            n.count -= hits.len() as u32;
            removed += hits.len();
        }
        if removed > 0 {
            self.len -= removed;
            self.compact();
            self.settle();
        }
        removed
    }

    /// Drops empty nodes and merges neighbours that fit together, after removals
    /// in the middle left nodes part-empty.
    fn compact(&mut self) {
        let fill = self.fill;
        let mut out: VecDeque<Node> = VecDeque::with_capacity(self.nodes.len());
        for n in self.nodes.drain(..) {
            if n.count == 0 {
                continue;
            }
            if let Some(last) = out.back_mut() {
                if last.can_merge(&n, fill) {
                    last.buf.extend_from_slice(&n.buf);
                    last.count += n.count;
                    continue;
                }
            }
            out.push_back(n);
        }
        self.nodes = out;
    }

    /// All elements, head to tail.
    pub fn iter(&self) -> Iter<'_> {
        self.iter_from(0, self.len)
    }

    /// Where element `idx` (< len) is: its node, that node's entries when they are
    /// compressed, and the element's byte offset in the entries.
    fn position(&self, idx: usize) -> (usize, Option<Vec<u8>>, usize) {
        let (node, i) = self.locate(idx);
        let inflated = inflate(self.nodes.get(node));
        let (count, raw) = self
            .nodes
            .get(node)
            .map_or((0, &[][..]), |n| (n.count as usize, &n.buf[..]));
        let off = offset_in(inflated.as_deref().unwrap_or(raw), count, i);
        (node, inflated, off)
    }

    /// Up to `n` elements from position `start` towards the tail.
    pub fn iter_from(&self, start: usize, n: usize) -> Iter<'_> {
        let (node, inflated, off, left) = if start < self.len {
            let (node, inflated, off) = self.position(start);
            (node, inflated, off, n.min(self.len - start))
        } else {
            (0, None, 0, 0)
        };
        Iter {
            nodes: &self.nodes,
            node,
            off,
            left,
            inflated,
        }
    }

    /// Up to `n` elements from position `start` towards the head.
    pub fn iter_rev_from(&self, start: usize, n: usize) -> RevIter<'_> {
        let mut it = RevIter {
            nodes: &self.nodes,
            node: 0,
            end: 0,
            left: 0,
            inflated: None,
        };
        if start < self.len {
            let (node, inflated, off) = self.position(start);
            (it.node, it.inflated) = (node, inflated);
            it.end = read_fwd(it.bytes(), off).1;
            it.left = n.min(start + 1);
        }
        it
    }

    /// Every element, from the head or from the tail.
    pub fn scan(&self, from_tail: bool) -> Scan<'_> {
        if from_tail {
            Scan::Rev(self.iter_rev_from(self.len.saturating_sub(1), self.len))
        } else {
            Scan::Fwd(self.iter())
        }
    }
}

/// A compressed node's entries, decompressed for an iterator to walk.
fn inflate(node: Option<&Node>) -> Option<Vec<u8>> {
    node.filter(|n| n.is_compressed())
        .map(|n| n.entries().into_owned())
}

/// Head-to-tail iterator.
pub struct Iter<'a> {
    nodes: &'a VecDeque<Node>,
    node: usize,
    off: usize,
    left: usize,
    /// The current node's entries while that node is compressed.
    inflated: Option<Vec<u8>>,
}

impl<'a> Iter<'a> {
    fn enter(&mut self) {
        self.inflated = inflate(self.nodes.get(self.node));
    }

    /// The current node's entries.
    fn bytes(&self) -> &[u8] {
        match (&self.inflated, self.nodes.get(self.node)) {
            (Some(b), _) => b,
            (None, Some(n)) => &n.buf,
            (None, None) => &[],
        }
    }
}

impl<'a> Iterator for Iter<'a> {
    type Item = Elem<'a>;

    #[inline]
    fn next(&mut self) -> Option<Elem<'a>> {
        if self.left == 0 {
            return None;
        }
        let nodes: &'a VecDeque<Node> = self.nodes;
        nodes.get(self.node)?;
        while self.off >= self.bytes().len() {
            self.node += 1;
            self.off = 0;
            nodes.get(self.node)?;
            self.enter();
        }
        self.left -= 1;
        match &self.inflated {
            None => {
                let buf: &'a [u8] = &nodes[self.node].buf;
                let (r, next) = read_fwd(buf, self.off);
                self.off = next;
                Some(Cow::Borrowed(&buf[r]))
            }
            Some(buf) => {
                let (r, next) = read_fwd(buf, self.off);
                self.off = next;
                Some(Cow::Owned(buf[r].to_vec()))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

/// Tail-to-head iterator.
pub struct RevIter<'a> {
    nodes: &'a VecDeque<Node>,
    node: usize,
    end: usize,
    left: usize,
    /// The current node's entries while that node is compressed.
    inflated: Option<Vec<u8>>,
}

impl RevIter<'_> {
    fn bytes(&self) -> &[u8] {
        match (&self.inflated, self.nodes.get(self.node)) {
            (Some(b), _) => b,
            (None, Some(n)) => &n.buf,
            (None, None) => &[],
        }
    }
}

impl<'a> Iterator for RevIter<'a> {
    type Item = Elem<'a>;

    #[inline]
    fn next(&mut self) -> Option<Elem<'a>> {
        if self.left == 0 {
            return None;
        }
        let nodes: &'a VecDeque<Node> = self.nodes;
        while self.end == 0 {
            self.node = self.node.checked_sub(1)?;
            self.inflated = inflate(nodes.get(self.node));
            self.end = self.bytes().len();
        }
        self.left -= 1;
        match &self.inflated {
            None => {
                let buf: &'a [u8] = &nodes.get(self.node)?.buf;
                let (r, start) = read_back(buf, self.end);
                self.end = start;
                Some(Cow::Borrowed(&buf[r]))
            }
            Some(buf) => {
                let (r, start) = read_back(buf, self.end);
                self.end = start;
                Some(Cow::Owned(buf[r].to_vec()))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for RevIter<'_> {}

/// A whole-list walk in either direction.
pub enum Scan<'a> {
    Fwd(Iter<'a>),
    Rev(RevIter<'a>),
}

impl<'a> Iterator for Scan<'a> {
    type Item = Elem<'a>;

    #[inline]
    fn next(&mut self) -> Option<Elem<'a>> {
        match self {
            Scan::Fwd(i) => i.next(),
            Scan::Rev(i) => i.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn items(l: &ListValue) -> Vec<Vec<u8>> {
        l.iter().map(|e| e.to_vec()).collect()
    }

    /// Every node respects the fill rule unless it holds a single element, the counts
    /// add up, no node is empty, a plain node holds one element of at least the
    /// packed threshold and a packed node none; the nodes within the compress depth
    /// of an end are uncompressed and the others compressed unless that does not pay.
    fn check_invariants(l: &ListValue) {
        let mut total = 0;
        let nodes = l.nodes.len();
        for (ni, n) in l.nodes.iter().enumerate() {
            assert!(n.count > 0, "empty node");
            let buf = n.entries();
            let mut large = Vec::new();
            let mut at = 0;
            while at < buf.len() {
                let (r, next) = read_fwd(&buf, at);
                large.push(is_large(&buf[r]));
                at = next;
            }
            assert_eq!(at, buf.len());
            assert_eq!(large.len(), n.count as usize);
            if n.plain {
                assert_eq!(n.count, 1, "plain node with more than one element");
                assert!(large.iter().all(|&x| x), "small element in a plain node");
            } else {
                assert!(!large.iter().any(|&x| x), "large element in a packed node");
            }
            assert!(
                n.count == 1 || fits(l.fill, buf.len(), n.count as usize),
                "oversized node"
            );
            if l.depth == 0 || l.near_an_end(ni, nodes) {
                assert!(
                    !n.is_compressed(),
                    "compressed node {ni} of {nodes} near an end"
                );
            } else {
                assert!(
                    n.is_compressed()
                        || buf.len() < MIN_COMPRESS_BYTES
                        || n.incompressible_at == buf.len() as u32,
                    "inner node {ni} of {nodes} left uncompressed"
                );
            }
            total += n.count as usize;
        }
        assert_eq!(total, l.len);
        let bytes: usize = l.nodes.iter().map(|n| n.buf.capacity()).sum();
        assert_eq!(l.buf_bytes, bytes, "buf_bytes out of step");
    }

    #[test]
    fn framing_round_trips_across_varint_sizes() {
        for len in [0usize, 1, 127, 128, 300, 16383, 16384, 70000] {
            let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut buf = vec![0; entry_size(len)];
            write_entry(&mut buf, &data);
            let (r, next) = read_fwd(&buf, 0);
            assert_eq!(&buf[r], &data[..]);
            assert_eq!(next, buf.len());
            let (r, start) = read_back(&buf, buf.len());
            assert_eq!(&buf[r], &data[..]);
            assert_eq!(start, 0);
        }
    }

    #[test]
    fn nodes_split_by_count_and_by_size() {
        let mut l = ListValue::with_fill(4);
        for i in 0..10u8 {
            l.push_back(&[i]);
        }
        assert_eq!(l.node_count(), 3);
        let mut l = ListValue::with_fill(-1);
        for _ in 0..10 {
            l.push_back(&[b'x'; 1000]);
        }
        assert_eq!(l.node_count(), 3);
        check_invariants(&l);
        // A big element gets a node of its own.
        l.push_front(&[b'y'; 10000]);
        assert_eq!(l.node_count(), 4);
        assert_eq!(l.encoding(), "quicklist");
    }

    #[test]
    fn large_elements_get_plain_nodes_that_nothing_joins() {
        set_packed_threshold(5);
        let mut l = ListValue::with_fill(-2);
        for e in ["aa", "bb", "xxxxxxxx", "cc", "dd"] {
            l.push_back(e.as_bytes());
        }
        // [aa bb] [xxxxxxxx] [cc dd]
        assert_eq!(l.node_count(), 3);
        // A large element set in the middle of a packed node splits it around itself.
        assert!(l.set(3, b"yyyyyyyy"));
        assert_eq!(l.node_count(), 4);
        // A small one set over a plain element stays in a node of its own.
        assert!(l.set(2, b"s"));
        assert_eq!(items(&l), [&b"aa"[..], b"bb", b"s", b"yyyyyyyy", b"dd"]);
        // LINSERT of a large element before a packed node's second entry splits it.
        assert!(l.insert_by_pivot(b"bb", b"zzzzzzzz", false));
        assert_eq!(l.get(1).as_deref(), Some(&b"zzzzzzzz"[..]));
        check_invariants(&l);
        // Removing the plain nodes merges the packed neighbours again.
        l.remove_matching(b"zzzzzzzz", 0, false);
        l.remove_matching(b"yyyyyyyy", 0, false);
        check_invariants(&l);
        assert_eq!(items(&l), [&b"aa"[..], b"bb", b"s", b"dd"]);
        assert!(l.node_count() <= 2);
        assert!(set_packed_threshold(0));
        assert_eq!(packed_threshold(), DEFAULT_PACKED_THRESHOLD);
        assert!(!set_packed_threshold(MAX_PACKED_THRESHOLD + 1));
        assert!(set_packed_threshold(MAX_PACKED_THRESHOLD));
    }

    #[test]
    fn inner_nodes_compress_and_read_back() {
        let limits = EncodingLimits {
            list_compress_depth: 1,
            ..EncodingLimits::default()
        };
        let mut l = ListValue::new(&limits);
        let mut plain = ListValue::with_fill(-2);
        for i in 0..5000 {
            let e = format!("element number {i} of a compressible list");
            l.push_back(e.as_bytes());
            plain.push_back(e.as_bytes());
        }
        check_invariants(&l);
        let compressed = l
            .node_summaries()
            .filter(|n| n.compressed_bytes.is_some())
            .count();
        assert_eq!(compressed, l.node_count() - 2, "all but the two ends");
        assert!(
            l.heap_size() * 2 < plain.heap_size(),
            "{} vs {}",
            l.heap_size(),
            plain.heap_size()
        );
        assert_eq!(l.get(2500).as_deref(), plain.get(2500).as_deref());
        assert!(l.iter().eq(plain.iter()));
        assert!(l.scan(true).eq(plain.scan(true)));
        // Writes in the middle and trims into inner nodes keep them compressed.
        assert!(l.set(1234, b"changed"));
        assert!(l.insert_by_pivot(b"changed", b"inserted", true));
        l.remove_front(1000);
        l.remove_back(1000);
        check_invariants(&l);
        assert_eq!(l.get(234).as_deref(), Some(&b"changed"[..]));
        assert_eq!(l.get(235).as_deref(), Some(&b"inserted"[..]));
        assert_eq!(
            l.front(),
            Some(&b"element number 1000 of a compressible list"[..])
        );
    }

    #[test]
    fn head_pushes_use_a_bounded_gap() {
        // LPUSH-only list: every node but the head is exact, and the head holds at
        // most its entries again as gap (plus the vector's own rounding).
        let mut l = ListValue::with_fill(-2);
        for i in 0..20_000u32 {
            l.push_front(format!("element:{i}").as_bytes());
        }
        check_invariants(&l);
        assert_eq!(l.get(0).as_deref(), Some(&b"element:19999"[..]));
        assert_eq!(l.get(-1).as_deref(), Some(&b"element:0"[..]));
        for (i, n) in l.nodes.iter().enumerate() {
            if i == 0 {
                assert!(n.buf.capacity() <= 2 * n.buf.len() + 64, "head node");
            } else {
                assert_eq!(n.buf.capacity(), n.buf.len(), "node {i} kept a gap");
            }
        }
        // Pops from the head widen the gap; pushes there take it back.
        let before = l.nodes[0].buf.capacity();
        for _ in 0..10 {
            l.pop_front();
        }
        for i in 0..10u32 {
            l.push_front(format!("again:{i}").as_bytes());
        }
        assert_eq!(l.nodes[0].buf.capacity(), before);
        assert_eq!(l.get(0).as_deref(), Some(&b"again:9"[..]));
        check_invariants(&l);
    }

    #[test]
    fn negative_and_out_of_range_indexes() {
        let mut l = ListValue::default();
        for s in ["a", "b", "c"] {
            l.push_back(s.as_bytes());
        }
        assert_eq!(l.get(-1).as_deref(), Some(&b"c"[..]));
        assert_eq!(l.get(-3).as_deref(), Some(&b"a"[..]));
        assert_eq!(l.get(-4), None);
        assert_eq!(l.get(3), None);
        assert_eq!(l.get(i64::MIN), None);
        assert!(!l.set(5, b"x"));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(bool, Vec<u8>),
        Pop(bool),
        Set(i64, Vec<u8>),
        Insert(u8, Vec<u8>, bool),
        Rem(u8, i8),
        RemoveEnds(bool, u8),
        Get(i64),
        Range(u8, u8),
    }

    fn elem() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            4 => (0u8..6).prop_map(|b| vec![b'a' + b]),
            1 => (0usize..300).prop_map(|n| vec![b'z'; n]),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<bool>(), elem()).prop_map(|(f, e)| Op::Push(f, e)),
            2 => any::<bool>().prop_map(Op::Pop),
            1 => (-40i64..40, elem()).prop_map(|(i, e)| Op::Set(i, e)),
            1 => (0u8..6, elem(), any::<bool>()).prop_map(|(p, e, a)| Op::Insert(p, e, a)),
            1 => (0u8..6, -3i8..3).prop_map(|(v, c)| Op::Rem(v, c)),
            1 => (any::<bool>(), 0u8..5).prop_map(|(f, n)| Op::RemoveEnds(f, n)),
            1 => (-40i64..40).prop_map(Op::Get),
            1 => (0u8..40, 0u8..40).prop_map(|(s, n)| Op::Range(s, n)),
        ]
    }

    proptest! {
        /// The packed list behaves like a Vec under every command-level operation,
        /// for count- and size-limited nodes alike.
        #[test]
        fn list_matches_vec_model(fill in prop_oneof![Just(-1i64), Just(-2), Just(0), Just(1), Just(2), Just(5)],
                                  plain_from in prop_oneof![3 => Just(0u64), 1 => Just(1), 1 => Just(2), 1 => Just(100)],
                                  depth in prop_oneof![2 => Just(0u16), 1 => Just(1), 1 => Just(2)],
                                  ops in proptest::collection::vec(op(), 1..150)) {
            set_packed_threshold(plain_from);
            let mut l = ListValue::with_fill(fill);
            l.depth = depth;
            let mut m: Vec<Vec<u8>> = Vec::new();
            for o in ops {
                match o {
                    Op::Push(front, e) => {
                        l.push(&e, front);
                        if front { m.insert(0, e) } else { m.push(e) }
                    }
                    Op::Pop(front) => {
                        let want = if m.is_empty() { None } else if front { Some(m.remove(0)) } else { m.pop() };
                        prop_assert_eq!(l.pop(front), want);
                    }
                    Op::Set(i, e) => {
                        let idx = if i < 0 { i + m.len() as i64 } else { i };
                        let ok = (0..m.len() as i64).contains(&idx);
                        prop_assert_eq!(l.set(i, &e), ok);
                        if ok { m[idx as usize] = e; }
                    }
                    Op::Insert(p, e, after) => {
                        let pivot = vec![b'a' + p];
                        let pos = m.iter().position(|x| *x == pivot);
                        prop_assert_eq!(l.insert_by_pivot(&pivot, &e, after), pos.is_some());
                        if let Some(p) = pos { m.insert(if after { p + 1 } else { p }, e); }
                    }
                    Op::Rem(v, c) => {
                        let value = vec![b'a' + v];
                        let limit = c.unsigned_abs() as usize;
                        let got = l.remove_matching(&value, limit, c < 0);
                        let want_limit = if limit == 0 { usize::MAX } else { limit };
                        let mut removed = 0;
                        if c < 0 {
                            let mut i = m.len();
                            while i > 0 && removed < want_limit {
                                i -= 1;
                                if m[i] == value { m.remove(i); removed += 1; }
                            }
                        } else {
                            let mut i = 0;
                            while i < m.len() && removed < want_limit {
                                if m[i] == value { m.remove(i); removed += 1; } else { i += 1; }
                            }
                        }
                        prop_assert_eq!(got, removed);
                    }
                    Op::RemoveEnds(front, n) => {
                        let n = (n as usize).min(m.len());
                        if front { l.remove_front(n); m.drain(..n); } else { l.remove_back(n); m.truncate(m.len() - n); }
                    }
                    Op::Get(i) => {
                        let idx = if i < 0 { i + m.len() as i64 } else { i };
                        let want = (0..m.len() as i64).contains(&idx).then(|| m[idx as usize].as_slice());
                        let got = l.get(i);
                        prop_assert_eq!(got.as_deref(), want);
                    }
                    Op::Range(s, n) => {
                        let (s, n) = (s as usize, n as usize);
                        let got: Vec<Vec<u8>> = l.iter_from(s, n).map(|e| e.into_owned()).collect();
                        let want: Vec<&[u8]> = m.iter().skip(s).take(n).map(|v| v.as_slice()).collect();
                        prop_assert_eq!(got, want);
                        let got: Vec<Vec<u8>> = l.iter_rev_from(s, n).map(|e| e.into_owned()).collect();
                        let want: Vec<&[u8]> = if s < m.len() {
                            m[..=s].iter().rev().take(n).map(|v| v.as_slice()).collect()
                        } else { Vec::new() };
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(l.len(), m.len());
                check_invariants(&l);
            }
            prop_assert_eq!(items(&l), m.clone());
            let back: Vec<Vec<u8>> = l.scan(true).map(|e| e.to_vec()).collect();
            prop_assert_eq!(back, m.iter().rev().cloned().collect::<Vec<_>>());
            if !m.is_empty() {
                let mut r = ListValue::new(&EncodingLimits::default());
                for e in l.iter() {
                    r.push_back(&e);
                }
                prop_assert_eq!(items(&r), m);
            }
        }
    }
}
