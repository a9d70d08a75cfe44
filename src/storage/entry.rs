//! A keyspace entry: one heap block per key, reached through an 8-byte pointer that is
//! all the slot table stores.
//!
//! Why a block and not the entry in the table itself: hashbrown keeps its tables
//! between 7/16 and 7/8 full, so an entry stored inline costs its size one and a half
//! to two times over. With the tables holding pointers, that slack is 8 bytes a bucket,
//! and the block is sized to what the key needs: a 16-byte key with a 10-byte value and
//! no TTL is a 41-byte block (jemalloc's 48-byte class), where the inline 64-byte entry
//! cost ~136 bytes of table per key at 1M keys (benches/RESULTS.md, memory per key).
//!
//! Block layout (8-aligned):
//!
//! ```text
//! 0   value: Value (16)       the only part commands touch by reference
//! 16  lru: u32                access clock (LRU, OBJECT IDLETIME, LFU decay)
//! 20  meta: u32               LFU counter (top 8 bits) | charge (low 24 bits)
//! 24  tag: u8                 bit 0: a deadline follows; bits 1..6: key length,
//!                             or 63: the length follows as a u64; bit 7: the
//!                             snapshot mark (see `Db`'s running snapshot)
//! 25  [deadline: u64]         unix ms, only if bit 0 (0 there means none)
//!     [key length: u64]       only if the tag says 127
//!     key bytes
//! ```
//!
//! Keys without a TTL carry no deadline bytes (most cache keys); giving a key its first
//! TTL moves it to a block with room for one (as Redis adds an `expires` dict entry).

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::{self, NonNull};

use super::memory;
use super::value::{StrValue, Value};

/// No expiry.
pub const NO_EXPIRE: u64 = 0;

#[repr(C)]
struct Head {
    value: Value,
    lru: u32,
    meta: u32,
}

const HEAD: usize = std::mem::size_of::<Head>();
const HAS_DEADLINE: u8 = 1;
/// Longest key length held in the tag byte itself.
const SHORT_KEY_MAX: usize = 62;
const LONG_KEY: u8 = 63;
/// The tag bit a snapshot (BGSAVE) compares with its database's mark to tell the
/// entries it still has to write from those it wrote or that came after its cut.
const SNAPSHOT_MARK: u8 = 0x80;
/// The tag bits of the key length.
const KEY_LEN_BITS: u8 = 0x3F;

pub struct Entry {
    block: NonNull<Head>,
}

// What makes the two impls below sound: the block's only owned contents are the Value.
const _: () = {
    const fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<Value>();
};

// SAFETY: an Entry uniquely owns its block, like a Box<Head> (Value is Send and Sync).
unsafe impl Send for Entry {}
// SAFETY: shared references only read the block.
unsafe impl Sync for Entry {}

/// Bytes of the block for a key of `key_len` bytes, with or without a deadline.
pub fn block_size(key_len: usize, deadline: bool) -> usize {
    let len_bytes = if key_len > SHORT_KEY_MAX { 8 } else { 0 };
    HEAD + 1 + if deadline { 8 } else { 0 } + len_bytes + key_len
}

fn layout(size: usize) -> Layout {
    // Keys are bounded by proto-max-bulk-len, far below isize::MAX.
    Layout::from_size_align(size, std::mem::align_of::<Head>())
        .unwrap_or_else(|_| handle_alloc_error(Layout::new::<Head>()))
}

impl Entry {
    pub fn new(key: &[u8], value: Value, expire_at: u64, lru: u32, meta: u32) -> Entry {
        let deadline = expire_at != NO_EXPIRE;
        let size = block_size(key.len(), deadline);
        let lay = layout(size);
        // SAFETY: `lay` has a non-zero size (HEAD alone is 24 bytes).
        let raw = unsafe { alloc(lay) };
        let Some(block) = NonNull::new(raw.cast::<Head>()) else {
            handle_alloc_error(lay)
        };
        // SAFETY: the block is `size` bytes, 8-aligned: the head fits at its start and
        // the tail written below ends exactly at `size` (see `block_size`).
        unsafe {
            ptr::write(block.as_ptr(), Head { value, lru, meta });
            let mut tail = raw.add(HEAD);
            let short = key.len() <= SHORT_KEY_MAX;
            let len_tag = if short { key.len() as u8 } else { LONG_KEY };
            *tail = (len_tag << 1) | if deadline { HAS_DEADLINE } else { 0 };
            tail = tail.add(1);
            if deadline {
                ptr::write_unaligned(tail.cast::<u64>(), expire_at);
                tail = tail.add(8);
            }
            if !short {
                ptr::write_unaligned(tail.cast::<u64>(), key.len() as u64);
                tail = tail.add(8);
            }
            ptr::copy_nonoverlapping(key.as_ptr(), tail, key.len());
        }
        Entry { block }
    }

    #[inline]
    fn head(&self) -> &Head {
        // SAFETY: the block is live and its head initialised for the Entry's life.
        unsafe { self.block.as_ref() }
    }

    #[inline]
    fn head_mut(&mut self) -> &mut Head {
        // SAFETY: as `head`, and `&mut self` makes the access unique.
        unsafe { self.block.as_mut() }
    }

    #[inline]
    fn tag(&self) -> u8 {
        // SAFETY: every block has its tag byte right after the head.
        unsafe { *self.block.as_ptr().cast::<u8>().add(HEAD) }
    }

    /// Asks the CPU to start loading the block (head, tag and a short key share its
    /// first cache line) without reading it: a pipelined batch's lookups overlap
    /// their cache misses this way (see `Db::prefetch`).
    #[inline]
    pub fn prefetch(&self, key_len: usize) {
        let start = self.block.as_ptr().cast::<u8>();
        crate::util::prefetch::read(start);
        // Blocks are 16-aligned, so one that starts in the second half of a cache line
        // has its key in the next line, where a probe's comparison would still miss.
        // The line of the key's last byte (were the block to carry a deadline) is
        // requested as well; prefetching never faults, whatever the block's real size.
        let key_end = HEAD + 1 + 8 + key_len.min(SHORT_KEY_MAX);
        crate::util::prefetch::read(start.wrapping_add(key_end - 1));
    }

    /// The snapshot mark: equal to the database's mark when no running snapshot has
    /// to write this entry any more (or none runs).
    #[inline]
    pub fn snapshot_mark(&self) -> bool {
        self.tag() & SNAPSHOT_MARK != 0
    }

    #[inline]
    pub fn set_snapshot_mark(&mut self, mark: bool) {
        // SAFETY: every block has its tag byte right after the head; `&mut self`
        // makes the write unique.
        unsafe {
            let tag = self.block.as_ptr().cast::<u8>().add(HEAD);
            *tag = (*tag & !SNAPSHOT_MARK) | if mark { SNAPSHOT_MARK } else { 0 };
        }
    }

    #[inline]
    fn has_deadline_room(&self) -> bool {
        self.tag() & HAS_DEADLINE != 0
    }

    /// The key's length and where its bytes start.
    #[inline]
    fn key_span(&self) -> (*const u8, usize) {
        let tag = self.tag();
        let deadline = if tag & HAS_DEADLINE != 0 { 8 } else { 0 };
        // SAFETY: offsets follow the layout written by `new`.
        unsafe {
            let p = self.block.as_ptr().cast::<u8>().add(HEAD + 1 + deadline);
            match ((tag >> 1) & KEY_LEN_BITS) as usize {
                n if n <= SHORT_KEY_MAX => (p, n),
                _ => (p.add(8), ptr::read_unaligned(p.cast::<u64>()) as usize),
            }
        }
    }

    #[inline]
    pub fn key(&self) -> &[u8] {
        let (p, n) = self.key_span();
        // SAFETY: the key bytes were copied in by `new` and live as long as the block.
        unsafe { std::slice::from_raw_parts(p, n) }
    }

    #[inline]
    pub fn value(&self) -> &Value {
        &self.head().value
    }

    #[inline]
    pub fn value_mut(&mut self) -> &mut Value {
        &mut self.head_mut().value
    }

    /// Replaces the value, returning the old one.
    #[inline]
    pub fn replace_value(&mut self, value: Value) -> Value {
        std::mem::replace(self.value_mut(), value)
    }

    #[inline]
    pub fn lru(&self) -> u32 {
        self.head().lru
    }

    #[inline]
    pub fn set_lru(&mut self, lru: u32) {
        self.head_mut().lru = lru;
    }

    #[inline]
    pub(super) fn meta(&self) -> u32 {
        self.head().meta
    }

    #[inline]
    pub(super) fn set_meta(&mut self, meta: u32) {
        self.head_mut().meta = meta;
    }

    /// Absolute deadline in unix milliseconds, or `NO_EXPIRE`.
    #[inline]
    pub fn expire_at(&self) -> u64 {
        if !self.has_deadline_room() {
            return NO_EXPIRE;
        }
        // SAFETY: a block with the deadline bit has 8 deadline bytes after the tag.
        unsafe { ptr::read_unaligned(self.block.as_ptr().cast::<u8>().add(HEAD + 1).cast()) }
    }

    /// Sets or clears the deadline. A key's first deadline moves it to a bigger block
    /// (the table's pointer is updated through `&mut self`); clearing one keeps the
    /// room, as keys that had a TTL tend to get one again.
    pub fn set_expire_at(&mut self, at: u64) {
        if self.has_deadline_room() {
            // SAFETY: as in `expire_at`; `&mut self` makes the write unique.
            unsafe {
                let p = self.block.as_ptr().cast::<u8>().add(HEAD + 1);
                ptr::write_unaligned(p.cast::<u64>(), at);
            }
        } else if at != NO_EXPIRE {
            let head = self.head();
            let placeholder = Value::Str(StrValue::Int(0));
            let mut moved = Entry::new(self.key(), placeholder, at, head.lru, head.meta);
            moved.set_snapshot_mark(self.snapshot_mark());
            let old = std::mem::replace(self, moved);
            let value = old.into_value();
            *self.value_mut() = value;
        }
    }

    /// Whether the TTL has passed — never while the dataset loads (`expiry_paused`):
    /// the flag is read only for a key whose time is up.
    #[inline]
    pub fn is_expired(&self, now_ms: u64) -> bool {
        let at = self.expire_at();
        at != NO_EXPIRE && at <= now_ms && !expiry_paused() && !replaying()
    }

    /// Bytes this entry is accounted for in its database's `used_bytes`.
    #[inline]
    pub fn charge(&self) -> usize {
        memory::decode_charge(self.meta())
    }

    /// The raw LFU counter (Redis's 8-bit Morris counter), without decay.
    #[inline]
    pub fn lfu_counter(&self) -> u8 {
        (self.meta() >> 24) as u8
    }

    #[inline]
    pub fn set_lfu_counter(&mut self, c: u8) {
        let meta = (self.meta() & 0xFF_FFFF) | ((c as u32) << 24);
        self.set_meta(meta);
    }

    /// Records an access: the LRU clock always, the LFU counter (decayed for the time
    /// since the last access, then bumped logarithmically) when `lfu` holds
    /// (log factor, decay minutes, a random number).
    #[inline]
    pub fn touch(&mut self, now_s: u32, lfu: Option<(u64, u64, u64)>) {
        if let Some((factor, decay, rnd)) = lfu {
            let c = memory::lfu_decayed(self.lfu_counter(), self.lru(), now_s, decay);
            self.set_lfu_counter(memory::lfu_log_incr(c, factor, rnd));
        }
        self.set_lru(now_s);
    }

    /// Bytes of this entry's block.
    pub fn block_size(&self) -> usize {
        block_size(self.key().len(), self.has_deadline_room())
    }

    /// Frees the block, keeping the value.
    pub fn into_value(self) -> Value {
        let size = self.block_size();
        let block = self.block;
        std::mem::forget(self);
        // SAFETY: the value is moved out exactly once, then the block is freed without
        // dropping it again (`self` was forgotten).
        unsafe {
            let value = ptr::read(&block.as_ref().value);
            dealloc(block.as_ptr().cast(), layout(size));
            value
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let size = self.block_size();
        // SAFETY: the block is live until here; its value is dropped once, then the
        // block is freed with the layout it was allocated with.
        unsafe {
            ptr::drop_in_place(&mut self.block.as_mut().value);
            dealloc(self.block.as_ptr().cast(), layout(size));
        }
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("key", &String::from_utf8_lossy(self.key()))
            .field("value", self.value())
            .field("expire_at", &self.expire_at())
            .finish()
    }
}

/// While the dataset loads nothing expires and nothing is evicted (Redis's
/// keyIsExpired, checkAlreadyExpired and isSafeToPerformEvictions during loading): an
/// AOF replays `PEXPIREAT k <past>` followed by writes to `k` as they happened, and
/// the key expires once loading is over. Persistence sets it with its loading state.
static DATASET_LOADING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn set_dataset_loading(on: bool) {
    DATASET_LOADING.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// This server is a replica: keys are not deleted by their TTL here, the master's
/// DEL does it (set by replication with the role).
static REPLICA_HOLDS_EXPIRED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

pub fn set_replica_holds_expired(on: bool) {
    REPLICA_HOLDS_EXPIRED.store(on, std::sync::atomic::Ordering::Relaxed);
}

#[inline]
pub fn replica_holds_expired() -> bool {
    REPLICA_HOLDS_EXPIRED.load(std::sync::atomic::Ordering::Relaxed)
}

thread_local! {
    /// The command running on this thread is the master's (a replica applying its
    /// stream): to it no key has expired — the master decided, its DELs will come.
    static REPLAYING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the commands about to run on this thread as the master's, or not.
#[inline]
pub fn set_replaying(on: bool) {
    REPLAYING.with(|r| r.set(on));
}

#[inline]
pub fn replaying() -> bool {
    REPLAYING.with(|r| r.get())
}

/// Whether the dataset is loading (no expiry, no eviction).
#[inline]
pub fn expiry_paused() -> bool {
    DATASET_LOADING.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether a deadline a command gives (EXPIRE, GETEX/SET ... PXAT, RESTORE) has
/// passed, so the command deletes the key instead of setting it (Redis's
/// checkAlreadyExpired). Never while loading nor on a replica: a replica applies its
/// master's deadline as given, however late it applies it, and waits for the
/// master's DEL; deleting here would lose a key the master kept (a PERSIST or a SET
/// that reached the master before the deadline).
#[inline]
pub fn deadline_passed(at: u64, now_ms: u64) -> bool {
    at <= now_ms && !expiry_paused() && !replica_holds_expired()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s(v: &[u8]) -> Value {
        Value::Str(StrValue::from_bytes(v))
    }

    fn text(v: &Value) -> Vec<u8> {
        match v {
            Value::Str(sv) => sv.to_vec(),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn value_is_16_bytes_and_typical_block_48() {
        assert_eq!(std::mem::size_of::<Value>(), 16);
        assert_eq!(std::mem::size_of::<Entry>(), 8);
        assert_eq!(std::mem::size_of::<Option<Entry>>(), 8);
        // key:NNNNNNNNNNNN, no TTL: jemalloc's 48-byte class.
        assert_eq!(block_size(16, false), 41);
        assert_eq!(
            crate::storage::memory::alloc_size(block_size(16, false)),
            48
        );
    }

    #[test]
    fn keys_of_every_length_class_round_trip() {
        for n in [0usize, 1, 15, 16, 62, 63, 64, 126, 127, 128, 1000, 70_000] {
            let key: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            for at in [NO_EXPIRE, 1_700_000_000_000] {
                let mut e = Entry::new(&key, s(b"hello"), at, 7, 9);
                assert_eq!(e.key(), &key[..]);
                assert_eq!(e.expire_at(), at);
                assert_eq!((e.lru(), e.meta()), (7, 9));
                assert_eq!(text(e.value()), b"hello");
                e.set_expire_at(42);
                assert_eq!(e.expire_at(), 42);
                assert_eq!(e.key(), &key[..]);
                assert_eq!(text(e.value()), b"hello");
                e.set_expire_at(NO_EXPIRE);
                assert_eq!(e.expire_at(), NO_EXPIRE);
                e.set_lru(11);
                let old = e.replace_value(s(&[b'x'; 300]));
                assert_eq!(text(&old), b"hello");
                assert_eq!(e.lru(), 11);
                assert_eq!(text(&e.into_value()), vec![b'x'; 300]);
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Expire(u64),
        Persist,
        Value(Vec<u8>),
        Lru(u32),
        Lfu(u8),
        Touch(u32),
        Mark(bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1u64..u64::MAX).prop_map(Op::Expire),
            Just(Op::Persist),
            proptest::collection::vec(any::<u8>(), 0..64).prop_map(Op::Value),
            any::<u32>().prop_map(Op::Lru),
            any::<u8>().prop_map(Op::Lfu),
            any::<u32>().prop_map(Op::Touch),
            any::<bool>().prop_map(Op::Mark),
        ]
    }

    proptest! {
        /// An entry reads back exactly what a plain struct would hold after the same
        /// writes, whatever the key length and however often its block moves.
        #[test]
        fn entry_matches_a_plain_struct(
            key in proptest::collection::vec(any::<u8>(), 0..300),
            first in proptest::collection::vec(any::<u8>(), 0..64),
            at in prop_oneof![Just(NO_EXPIRE), 1u64..u64::MAX],
            ops in proptest::collection::vec(op(), 0..40),
        ) {
            let mut e = Entry::new(&key, s(&first), at, 1, 0x0500_0000);
            let (mut value, mut deadline, mut lru, mut lfu) = (first, at, 1u32, 5u8);
            let mut mark = false;
            for o in ops {
                match o {
                    Op::Expire(t) => { e.set_expire_at(t); deadline = t; }
                    Op::Persist => { e.set_expire_at(NO_EXPIRE); deadline = NO_EXPIRE; }
                    Op::Value(v) => {
                        let old = e.replace_value(s(&v));
                        prop_assert_eq!(text(&old), std::mem::replace(&mut value, v));
                    }
                    Op::Lru(l) => { e.set_lru(l); lru = l; }
                    Op::Lfu(c) => { e.set_lfu_counter(c); lfu = c; }
                    Op::Touch(now) => { e.touch(now, None); lru = now; }
                    Op::Mark(m) => { e.set_snapshot_mark(m); mark = m; }
                }
                prop_assert_eq!(e.snapshot_mark(), mark);
                prop_assert_eq!(e.key(), &key[..]);
                prop_assert_eq!(e.expire_at(), deadline);
                prop_assert_eq!((e.lru(), e.lfu_counter()), (lru, lfu));
                prop_assert_eq!(text(e.value()), value.clone());
            }
            prop_assert_eq!(text(&e.into_value()), value);
        }
    }

    #[test]
    fn first_deadline_keeps_everything_else() {
        let mut e = Entry::new(b"k", s(&[b'v'; 100]), NO_EXPIRE, 3, 0xAB00_0010);
        assert_eq!(e.block_size(), block_size(1, false));
        e.set_expire_at(1234);
        assert_eq!(e.block_size(), block_size(1, true));
        assert_eq!((e.lru(), e.meta(), e.expire_at()), (3, 0xAB00_0010, 1234));
        assert_eq!(text(e.value()), vec![b'v'; 100]);
    }
}
