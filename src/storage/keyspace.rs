//! A shard's keyspace: one `Db` per logical database, each made of one small hash table
//! per owned slot (DESIGN.md §5). Growth rehashes one slot's table at a time, so a big
//! dataset never stalls on a whole-table resize, and SCAN, KEYS and slot queries walk
//! slots in order.

use hashbrown::{DefaultHashBuilder, HashTable};
use std::cell::Cell;
use std::hash::BuildHasher;

use super::entry::block_size;
use super::events::{notify, STREAM_READERS, TRACKING_CLIENTS};
use super::memory;
use super::snapshot::{save_before_change, Cut, SKIPS_PER_SAVE};
use super::value::Value;
use crate::config::notify as class;
use crate::slot::key_slot;

pub use super::entry::{Entry, NO_EXPIRE};

/// What a slot-table bucket costs: the entry's pointer and its control byte, at the
/// tables' typical load (hashbrown runs between 7/16 and 7/8 full).
pub const SLOT_COST: usize = (std::mem::size_of::<Entry>() + 1) * 3 / 2;

/// Bytes charged for an entry block of `block` bytes holding `value`: its bucket, the
/// block and the value's heap blocks, at the allocator's size classes.
pub fn entry_cost(block: usize, value: &Value) -> usize {
    use std::mem::size_of;
    let boxed = |n: usize, heap: usize| memory::alloc_size(n) + heap;
    SLOT_COST
        + memory::alloc_size(block)
        + match value {
            Value::Str(s) => memory::alloc_size(s.heap_size()),
            Value::List(v) => boxed(size_of::<super::list::ListValue>(), v.heap_size()),
            Value::Hash(v) => boxed(size_of::<super::hash::HashValue>(), v.heap_size()),
            Value::Set(v) => boxed(size_of::<super::set::SetValue>(), v.heap_size()),
            Value::ZSet(v) => boxed(size_of::<super::zset::ZSetValue>(), v.heap_size()),
            Value::Stream(v) => boxed(size_of::<super::stream::StreamValue>(), v.heap_size()),
        }
}

/// The earliest field deadline of a hash value (None for other types).
#[inline]
fn hash_field_deadline(v: &Value) -> Option<u64> {
    match v {
        Value::Hash(h) => h.min_field_expire(),
        _ => None,
    }
}

/// Re-derives an entry's charge from its block and value, keeping its LFU counter.
/// Returns the charges before and after.
fn remeasure(e: &mut Entry) -> (usize, usize) {
    let old = e.charge();
    let meta = memory::encode_charge(entry_cost(e.block_size(), e.value()));
    e.set_meta((e.meta() & 0xFF00_0000) | meta);
    (old, memory::decode_charge(meta))
}

/// Slot tables taken out of a database by FLUSHALL/FLUSHDB ASYNC, freed by the
/// shard's lazy-free task a slice at a time.
#[derive(Default)]
pub struct Detached {
    slots: SlotTables,
    /// Big values met while draining (with their charges), shed in slices of their
    /// own; still counted in `bytes` and `keys` until done.
    big: Vec<(Value, usize)>,
    /// Charged bytes still held.
    pub bytes: usize,
    /// Keys still held.
    pub keys: usize,
}

impl Detached {
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.big.is_empty()
    }

    /// Frees about `budget` elements (keys, or members of big values). Returns the
    /// keys whose memory was fully released.
    pub fn free_some(&mut self, budget: usize, big_threshold: usize) -> usize {
        let mut work = 0;
        let mut released = 0;
        while work < budget {
            if let Some((v, charge)) = self.big.last_mut() {
                if shed_value(v, budget - work) {
                    self.bytes = self.bytes.saturating_sub(*charge);
                    self.keys = self.keys.saturating_sub(1);
                    self.big.pop();
                    released += 1;
                }
                work += budget / 2 + 1;
                continue;
            }
            let Some(mut slot) = self.slots.pop() else {
                break;
            };
            for e in slot.table.drain() {
                work += 1;
                let charge = e.charge();
                if value_elements(e.value()) > big_threshold {
                    self.big.push((e.into_value(), charge));
                } else {
                    self.bytes = self.bytes.saturating_sub(charge);
                    self.keys = self.keys.saturating_sub(1);
                    released += 1;
                }
            }
        }
        released
    }
}

/// Elements a value holds: what freeing it costs (Redis's lazyfreeGetFreeEffort).
pub fn value_elements(v: &Value) -> usize {
    match v {
        Value::Str(_) => 1,
        Value::List(l) => l.len(),
        Value::Hash(h) => h.len(),
        Value::Set(s) => s.len(),
        Value::ZSet(z) => z.len(),
        Value::Stream(s) => s.len() as usize,
    }
}

/// Frees about `budget` elements of a big value in place; true when it is done (what
/// is left is cheap to drop).
pub fn shed_value(v: &mut Value, budget: usize) -> bool {
    match v {
        Value::Str(_) | Value::Stream(_) => true,
        Value::List(l) => l.shed(budget),
        Value::Hash(h) => h.shed(budget),
        Value::Set(s) => s.shed(budget),
        Value::ZSet(z) => z.shed(budget),
    }
}

/// Gives back what deletions left unused: an emptied slot's table entirely, and a
/// table down to a third of its capacity is rebuilt at half the size. hashbrown never
/// shrinks on its own, so a slot that once held more keys (churn under eviction, a
/// burst of writes later deleted) would keep its peak size: under a Zipf load with
/// eviction that was ~1 MB of 32 (benches/hit-ratio.sh). The gap between a third and
/// the 7/8 growth point keeps a slot hovering near a boundary from rebuilding back
/// and forth; the rebuild rehashes at most a third of a table's capacity.
/// A TTL set on a replica by one of its own clients (a writable replica): the key
/// joins the ones the replica expires itself. The master's commands never do.
#[inline]
fn note_replica_local_expire(keys: &mut hashbrown::HashSet<Vec<u8>>, key: &[u8]) {
    if super::entry::replica_holds_expired() && !super::entry::replaying() && !keys.contains(key) {
        keys.insert(key.to_vec());
    }
}

fn shrink_if_sparse(table: &mut HashTable<Entry>, hasher: &DefaultHashBuilder) {
    if table.is_empty() {
        *table = HashTable::new();
    } else if table.len() * 3 < table.capacity() {
        table.shrink_to(table.len(), |e| hasher.hash_one(e.key()));
    }
}

#[derive(Default)]
struct SlotKeys {
    table: HashTable<Entry>,
    /// Entries in this slot with a TTL: the active expiry cycle skips slots without any.
    ttl_count: u32,
}

/// Slot tables per chunk: a chunk is allocated on the first write to one of its
/// slots, so a database written in a few slots (the test suite's db 9, a rarely used
/// SELECT) costs a few KB, not 40 bytes for each of the shard's thousands of slots.
const CHUNK: usize = 64;

/// Most keys `Db::prefetch` warms at once: enough to cover a redis-benchmark -P 16
/// batch, few enough that the first are still cached when the last run.
pub const PREFETCH_BATCH: usize = 16;

/// A database's slot tables, indexed by slot (0-based within the shard's range).
/// Lookups pay one load more than a flat vector, into a pointer array small enough to
/// stay in L1 (a shard of 8192 slots has 128 chunks).
#[derive(Default)]
struct SlotTables {
    chunks: Vec<Option<Box<[SlotKeys; CHUNK]>>>,
}

impl SlotTables {
    /// Nothing was ever written (or everything was flushed).
    fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    #[inline]
    fn get(&self, idx: usize) -> Option<&SlotKeys> {
        let chunk = self.chunks.get(idx / CHUNK)?.as_deref()?;
        Some(&chunk[idx % CHUNK])
    }

    #[inline]
    fn get_mut(&mut self, idx: usize) -> Option<&mut SlotKeys> {
        let chunk = self.chunks.get_mut(idx / CHUNK)?.as_deref_mut()?;
        Some(&mut chunk[idx % CHUNK])
    }

    /// The slot's table, allocating its chunk (and the chunk array for `slot_count`
    /// slots) on first use.
    fn get_or_alloc(&mut self, idx: usize, slot_count: usize) -> &mut SlotKeys {
        if self.chunks.is_empty() {
            self.chunks.resize_with(slot_count.div_ceil(CHUNK), || None);
        }
        let chunk = self.chunks[idx / CHUNK]
            .get_or_insert_with(|| Box::new(std::array::from_fn(|_| SlotKeys::default())));
        &mut chunk[idx % CHUNK]
    }

    /// Takes one non-empty slot table out, from the end (lazy freeing of a detached
    /// database); chunks are released as they empty.
    fn pop(&mut self) -> Option<SlotKeys> {
        loop {
            let last = self.chunks.last_mut()?;
            if let Some(chunk) = last.as_deref_mut() {
                if let Some(s) = chunk.iter_mut().rev().find(|s| !s.table.is_empty()) {
                    return Some(std::mem::take(s));
                }
            }
            self.chunks.pop();
        }
    }
}

/// Result of one active-expiry pass over a database.
#[derive(Default, Debug, Clone, Copy)]
pub struct ExpireCycleStats {
    pub sampled: usize,
    pub expired: usize,
}

pub struct Db {
    /// One table per owned slot, in chunks allocated when one of their slots is first
    /// written (most of the 16 databases are never used), each table empty until its
    /// slot gets a key.
    slots: SlotTables,
    slot_count: usize,
    first_slot: usize,
    keys: usize,
    expires: usize,
    hasher: DefaultHashBuilder,
    /// Where the active expiry cycle resumes (index into `slots`).
    expire_cursor: usize,
    /// Keys removed because their TTL passed (INFO stats expired_keys).
    pub expired_count: u64,
    /// The database number, for keyspace notifications.
    index: usize,
    /// Keys expired while a replica is attached, for their propagated DEL (drained by
    /// the shard after each command; see `events::STREAM_READERS`).
    pub expired_log: Vec<Vec<u8>>,
    /// Keys expired on access while some client tracks keys, for their invalidation
    /// (drained by the shard after each command; see `events::TRACKING_CLIENTS`).
    pub tracking_expired: Vec<Vec<u8>>,
    /// lazyfree-lazy-server-del: big values that writes replaced go to the shard's
    /// lazy-free task (through `overwritten`) instead of being freed in the command.
    pub lazy_overwrites: bool,
    /// While clients are paused keys do not expire: a read finds a key whose TTL
    /// passed missing, but leaves it in place (Redis's expireIfNeeded under a pause).
    pub expiry_held: bool,
    /// On a writable replica, keys its own clients gave a TTL (never its master's
    /// stream): the replica expires these itself (Redis's slaveKeysWithExpire).
    replica_local_expires: hashbrown::HashSet<Vec<u8>>,
    /// Replaced big values with their charges, already counted as pending lazy frees,
    /// waiting for the shard's memory task (`ShardData::adopt_overwritten`).
    pub overwritten: Vec<(Value, usize)>,
    /// (lfu-log-factor, lfu-decay-time) under an LFU policy: an overwritten key keeps
    /// its access counter, bumped for the write's access, as Redis's dbOverwrite
    /// carries the old object's LFU over to the new one.
    pub lfu: Option<(u64, u64)>,
    /// Random numbers for those LFU bumps.
    rng: Rng,
    /// Sum of the entries' charges (memory accounting).
    used: usize,
    /// The last key located, with its slot index and hash (see `locate`).
    located: Cell<LocateMemo>,
    /// Keys whose charge is current (see `ExactCharges`).
    exact: ExactCharges,
    /// The snapshot mark entries carry once the running snapshot has them, or all
    /// carry while none runs (see `storage::snapshot`).
    mark: bool,
    /// The running snapshot's state here, while one runs.
    cut: Option<Box<Cut>>,
    /// Hashes whose fields have deadlines, by the earliest one: hints for the active
    /// expiry of fields. An entry may be stale (its key gone, its deadline moved);
    /// its turn comes, the hash is looked at and the entry dropped or renewed, so
    /// nothing but the writes that set deadlines needs to keep it exact.
    field_deadlines: std::collections::BTreeSet<(u64, Vec<u8>)>,
    /// (key, field) of hash fields deleted because their deadline passed, while a
    /// replica or the AOF reads the stream: their HDELs (drained with `expired_log`).
    pub expired_fields_log: Vec<(Vec<u8>, Vec<u8>)>,
    /// Hash fields removed because their deadline passed (INFO expired_subkeys).
    pub expired_fields_count: u64,
}

/// What expiring the due fields of one hash did.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldsExpired {
    pub fields: usize,
    /// The hash lost its last field and the key is gone.
    pub key_deleted: bool,
}

/// Most keys `ExactCharges` remembers: MSET's ten keys in redis-benchmark fit.
const EXACT_MAX: usize = 16;

/// Hashes of keys whose charge is known to be current. Every write command is
/// re-measured under its keys afterwards (`recharge`, for values changed in place),
/// but `insert` has just measured what it stored: SET would probe the table a third
/// time for nothing, where Redis probes twice. `get` forgets them all, since its caller
/// may change the value in place; nothing else hands out an entry to change. A hash
/// shared by two keys only skips a re-measure the memo's rule already made exact.
#[derive(Clone, Copy, Default)]
struct ExactCharges {
    hashes: [u64; EXACT_MAX],
    len: u8,
}

impl ExactCharges {
    #[inline]
    fn note(&mut self, hash: u64) {
        if let Some(h) = self.hashes.get_mut(usize::from(self.len)) {
            *h = hash;
            self.len += 1;
        }
    }

    #[inline]
    fn forget(&mut self) {
        self.len = 0;
    }

    #[inline]
    fn holds(&self, hash: u64) -> bool {
        self.hashes[..usize::from(self.len)].contains(&hash)
    }
}

/// Keys up to this long are remembered by [`Db::locate`].
const LOCATE_MEMO_BYTES: usize = 32;

/// A key's slot index and table hash, computed once. A write looks its key up and is
/// then re-measured under the same key (`recharge`), and the slot's CRC16, the hash
/// tag scan and the table hash are most of a lookup's instructions once the tables
/// are in cache. Both are pure functions of the key's bytes, so the memo can never be
/// stale: it is matched by content, not by address.
#[derive(Clone, Copy)]
struct LocateMemo {
    len: u8,
    key: [u8; LOCATE_MEMO_BYTES],
    idx: usize,
    hash: u64,
}

/// Byte-slice equality for keys, inline: words loaded from both ends for up to 32
/// bytes (keys are mostly short), memcmp beyond. A slice `==` always calls memcmp,
/// which cost ~4% of SET -P 16 for the three key comparisons of a write and 3% of
/// LPUSH -P 16 on a 6-byte key (perf), though the bytes were in cache.
#[inline(always)]
fn key_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let w8 = |s: &[u8], at: usize| u64::from_ne_bytes(s[at..at + 8].try_into().unwrap_or([0; 8]));
    let w4 = |s: &[u8], at: usize| u32::from_ne_bytes(s[at..at + 4].try_into().unwrap_or([0; 4]));
    match n {
        0..=3 => a.iter().zip(b).all(|(x, y)| x == y),
        4..=7 => w4(a, 0) == w4(b, 0) && w4(a, n - 4) == w4(b, n - 4),
        8..=32 => {
            let mut at = 0;
            while at + 8 < n {
                if w8(a, at) != w8(b, at) {
                    return false;
                }
                at += 8;
            }
            w8(a, n - 8) == w8(b, n - 8)
        }
        _ => a == b,
    }
}

impl LocateMemo {
    const EMPTY: LocateMemo = LocateMemo {
        // Longer than any remembered key: matches nothing.
        len: u8::MAX,
        key: [0; LOCATE_MEMO_BYTES],
        idx: 0,
        hash: 0,
    };
}

impl Db {
    /// A database holding the slots `[first_slot, first_slot + count)`.
    pub fn new(first_slot: usize, count: usize, hasher: DefaultHashBuilder) -> Db {
        Db {
            slots: SlotTables::default(),
            slot_count: count,
            first_slot,
            keys: 0,
            expires: 0,
            hasher,
            expire_cursor: 0,
            expired_count: 0,
            index: 0,
            expired_log: Vec::new(),
            tracking_expired: Vec::new(),
            lazy_overwrites: false,
            expiry_held: false,
            replica_local_expires: Default::default(),
            overwritten: Vec::new(),
            lfu: None,
            rng: Rng::new(first_slot as u64 ^ 0x9E37_79B9_7F4A_7C15),
            used: 0,
            located: Cell::new(LocateMemo::EMPTY),
            exact: ExactCharges::default(),
            mark: false,
            cut: None,
            field_deadlines: Default::default(),
            expired_fields_log: Vec::new(),
            expired_fields_count: 0,
        }
    }

    /// An empty database for the same slots, hasher and number, with the same
    /// settings: where a replica's diskless load (swapdb) puts the master's keys while
    /// this one is still served.
    pub fn empty_like(&self) -> Db {
        let mut db = Db::new(self.first_slot, self.slot_count, self.hasher).with_index(self.index);
        db.lazy_overwrites = self.lazy_overwrites;
        db.lfu = self.lfu;
        db
    }

    /// The end of a swapdb load: `loaded`'s keys become this database's, and what
    /// this one held is handed back to be freed later. A writable replica's own TTLs
    /// were on keys that are gone.
    pub fn replace_with_loaded(&mut self, loaded: &mut Db) -> Detached {
        self.swap(loaded);
        self.replica_local_expires = Default::default();
        loaded.detach()
    }

    /// Numbers the database (its keyspace notifications name it).
    pub fn with_index(mut self, index: usize) -> Db {
        self.index = index;
        self
    }

    pub fn index(&self) -> usize {
        self.index
    }

    pub fn len(&self) -> usize {
        self.keys
    }

    pub fn is_empty(&self) -> bool {
        self.keys == 0
    }

    pub fn expires_len(&self) -> usize {
        self.expires
    }

    /// Keys a writable replica's clients gave a TTL, which it expires itself (INFO's
    /// slave_expires_tracked_keys).
    pub fn replica_local_expires_len(&self) -> usize {
        self.replica_local_expires.len()
    }

    /// Bytes charged to this database's keys (see `entry_cost`).
    #[inline]
    pub fn used_bytes(&self) -> usize {
        self.used
    }

    pub fn slot_count(&self) -> usize {
        self.slot_count
    }

    pub fn first_slot(&self) -> usize {
        self.first_slot
    }

    #[inline]
    /// Whether `key`'s slot is one of this database's (this shard's) slots.
    pub fn holds_slot_of(&self, key: &[u8]) -> bool {
        (key_slot(key) as usize).wrapping_sub(self.first_slot) < self.slot_count
    }

    fn locate(&self, key: &[u8]) -> (usize, u64) {
        // SAFETY: the memo is only written by `set` below, never while this reference
        // lives (a Db belongs to one shard thread).
        let memo = unsafe { &*self.located.as_ptr() };
        let remembered = memo.key.get(..usize::from(memo.len));
        if remembered.is_some_and(|m| key_eq(m, key)) {
            return (memo.idx, memo.hash);
        }
        let idx = (key_slot(key) as usize).wrapping_sub(self.first_slot);
        debug_assert!(
            idx < self.slot_count,
            "key routed to a shard that does not own its slot"
        );
        let hash = self.hasher.hash_one(key);
        if key.len() <= LOCATE_MEMO_BYTES {
            let mut memo = LocateMemo {
                len: key.len() as u8,
                idx,
                hash,
                ..LocateMemo::EMPTY
            };
            memo.key[..key.len()].copy_from_slice(key);
            self.located.set(memo);
        }
        (idx, hash)
    }

    /// Warms the cache for the lookups of a pipelined batch before it runs. A lookup
    /// misses up to three times (slot table header, control bytes, entry block), each
    /// waiting on the one before; one command's misses cannot overlap, but a batch's
    /// can. First every slot header is requested, then each table is probed (the
    /// headers have arrived by then, and the probes are independent, so their
    /// control-byte misses overlap) and every candidate block is requested without
    /// being read. Keys of slots this shard does not own are skipped. Only a hint: it
    /// changes nothing, and a key that is absent costs one probe.
    pub fn prefetch<'a>(&self, keys: impl Iterator<Item = &'a [u8]>) {
        let mut found = [(0usize, 0u64, 0usize); PREFETCH_BATCH];
        let mut n = 0;
        let mut last: &[u8] = &[];
        for key in keys.take(PREFETCH_BATCH) {
            // A run of commands on one key (LPUSH mylist ...) needs it warmed once.
            if std::mem::replace(&mut last, key) == key {
                continue;
            }
            let idx = (key_slot(key) as usize).wrapping_sub(self.first_slot);
            if let Some(slot) = self.slots.get(idx).filter(|_| idx < self.slot_count) {
                crate::util::prefetch::read(slot as *const SlotKeys);
                found[n] = (idx, self.hasher.hash_one(key), key.len());
                n += 1;
            }
        }
        // Two probes per key: the first waits only for the control bytes and requests
        // the matching bucket's line without reading it, so the keys' bucket misses
        // overlap; the second reads the buckets (arrived by then) and requests each
        // candidate's block. One probe doing both waited for each bucket in turn.
        for &(idx, hash, _) in &found[..n] {
            if let Some(slot) = self.slots.get(idx) {
                let _ = slot.table.find(hash, |e| {
                    crate::util::prefetch::read(e as *const Entry);
                    false
                });
            }
        }
        for &(idx, hash, key_len) in &found[..n] {
            if let Some(slot) = self.slots.get(idx) {
                // The probe's comparison requests the block and rejects it, so the
                // probe reads only the table.
                let _ = slot.table.find(hash, |e| {
                    e.prefetch(key_len);
                    false
                });
            }
        }
    }

    /// Whether a key whose TTL passed stays in place (reads find it missing): during a
    /// client pause, and on a replica, which waits for its master's DEL (Redis 7.0's
    /// expireIfNeeded on a replica).
    #[inline]
    fn holds_expired(&self) -> bool {
        self.expiry_held || super::entry::replica_holds_expired()
    }

    /// Looks a key up, deleting it first if its TTL has passed (Redis's passive expiry).
    /// One probe of the slot's table either way.
    #[inline]
    pub fn get(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        self.lookup::<false>(key, now_ms)
    }

    /// `get`; with `FORCE_EXPIRE` a key whose TTL passed is deleted even where
    /// expired keys are held (a writable replica's own keys).
    #[inline]
    fn lookup<const FORCE_EXPIRE: bool>(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        self.exact.forget();
        let (idx, hash) = self.locate(key);
        let slot = self.slots.get_mut(idx)?;
        let mut occupied = slot.table.find_entry(hash, |e| key_eq(e.key(), key)).ok()?;
        // The caller may change the value: a running snapshot takes it first.
        save_before_change(&mut self.cut, occupied.get_mut(), self.mark);
        if !occupied.get().is_expired(now_ms) {
            return Some(occupied.into_mut());
        }
        if !FORCE_EXPIRE && (self.expiry_held || super::entry::replica_holds_expired()) {
            return None;
        }
        if STREAM_READERS.any() {
            self.expired_log.push(occupied.get().key().to_vec());
            super::events::note_stream_logged();
        }
        let (gone, _) = occupied.remove();
        self.used -= gone.charge();
        slot.ttl_count -= 1;
        self.expires -= 1;
        self.keys -= 1;
        self.expired_count += 1;
        if TRACKING_CLIENTS.any() {
            self.tracking_expired.push(key.to_vec());
        }
        notify(class::EXPIRED, "expired", key, self.index);
        None
    }

    /// A writable replica's active expiry (Redis's expireSlaveKeys): its own keys
    /// whose TTL passed are deleted; those gone or made persistent are forgotten.
    /// Returns how many expired.
    pub fn expire_replica_local(&mut self, now_ms: u64) -> usize {
        if self.replica_local_expires.is_empty() {
            return 0;
        }
        let mut expired = 0;
        for key in std::mem::take(&mut self.replica_local_expires) {
            let at = self.peek(&key).map_or(NO_EXPIRE, |e| e.expire_at());
            if at == NO_EXPIRE {
                continue;
            }
            if at > now_ms {
                self.replica_local_expires.insert(key);
            } else if self.lookup::<true>(&key, now_ms).is_none() {
                expired += 1;
            }
        }
        expired
    }

    /// Looks a key up without expiring it or touching anything (for introspection).
    pub fn peek(&self, key: &[u8]) -> Option<&Entry> {
        let (idx, hash) = self.locate(key);
        self.slots
            .get(idx)?
            .table
            .find(hash, |e| key_eq(e.key(), key))
    }

    /// Whether a key exists and has not expired, without deleting anything.
    pub fn peek_live(&self, key: &[u8], now_ms: u64) -> bool {
        self.peek_expired(key, now_ms) == Some(false)
    }

    /// Whether a key is there expired (Some(true)) or live (Some(false)), without
    /// deleting anything; None when it is not there at all.
    pub fn peek_expired(&self, key: &[u8], now_ms: u64) -> Option<bool> {
        self.peek(key).map(|e| e.is_expired(now_ms))
    }

    pub fn contains(&mut self, key: &[u8], now_ms: u64) -> bool {
        self.get(key, now_ms).is_some()
    }

    /// Stores `value` under `key` with the given deadline, replacing any old entry,
    /// whose value is returned. An existing entry is overwritten where it is (one
    /// probe, no table churn) and takes the given access clock and deadline; under an
    /// LFU policy it keeps its counter, counted as accessed (Redis's SET looks the key
    /// up for writing, then dbOverwrite copies the LFU field), else the counter starts
    /// over.
    pub fn insert(&mut self, key: &[u8], value: Value, expire_at: u64, lru: u32) -> Option<Value> {
        let (idx, hash) = self.locate(key);
        let found = self
            .slots
            .get_mut(idx)
            .and_then(|slot| slot.table.find_mut(hash, |e| key_eq(e.key(), key)));
        let Some(e) = found else {
            notify(class::NEW, "new", key, self.index);
            self.add(key, value, expire_at, lru);
            return None;
        };
        if let Some(at) = hash_field_deadline(&value) {
            self.field_deadlines.insert((at, key.to_vec()));
        }
        save_before_change(&mut self.cut, e, self.mark);
        let ttl_delta = (expire_at != NO_EXPIRE) as i64 - (e.expire_at() != NO_EXPIRE) as i64;
        let old = e.replace_value(value);
        e.set_expire_at(expire_at);
        match self.lfu {
            Some((factor, decay)) => e.touch(lru, Some((factor, decay, self.rng.next_u64()))),
            None => {
                e.set_lfu_counter(memory::LFU_INIT_VAL);
                e.set_lru(lru);
            }
        }
        let (old_charge, new_charge) = remeasure(e);
        self.used = self.used - old_charge + new_charge;
        self.exact.note(hash);
        if ttl_delta != 0 {
            if let Some(slot) = self.slots.get_mut(idx) {
                slot.ttl_count = (slot.ttl_count as i64 + ttl_delta) as _;
            }
            self.expires = (self.expires as i64 + ttl_delta) as _;
        }
        if self.lazy_overwrites && value_elements(&old) > super::evict::LAZYFREE_THRESHOLD {
            memory::LAZYFREE_PENDING.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            memory::LAZYFREE_PENDING_BYTES
                .fetch_add(old_charge as u64, std::sync::atomic::Ordering::Relaxed);
            self.overwritten.push((old, old_charge));
            return None;
        }
        Some(old)
    }

    /// Stores an entry taken from another key or database (RENAME, MOVE) as Redis moves
    /// the object itself: its deadline, access clock and LFU counter come along. An
    /// entry already under `key` is replaced; its value is returned.
    pub fn insert_moved(&mut self, key: &[u8], from: Entry) -> Option<Value> {
        let (at, lru, freq) = (from.expire_at(), from.lru(), from.lfu_counter());
        self.insert_with_access(key, from.into_value(), at, lru, freq)
    }

    /// `insert` with a given access clock and LFU counter (a value moved here from
    /// another key, possibly on another shard).
    pub fn insert_with_access(
        &mut self,
        key: &[u8],
        value: Value,
        expire_at: u64,
        lru: u32,
        freq: u8,
    ) -> Option<Value> {
        let old = self.insert(key, value, expire_at, lru);
        let (idx, hash) = self.locate(key);
        if let Some(e) = self
            .slots
            .get_mut(idx)
            .and_then(|slot| slot.table.find_mut(hash, |e| key_eq(e.key(), key)))
        {
            e.set_lru(lru);
            e.set_lfu_counter(freq);
        }
        old
    }

    /// Inserts a key known to be absent.
    pub fn insert_new(&mut self, key: &[u8], value: Value, expire_at: u64, lru: u32) {
        if self.holds_expired() {
            // During a client pause an expired key stays in place though `get` calls
            // it missing: a write that runs anyway (inside the EXEC that paused)
            // replaces it rather than adding a second entry.
            self.insert(key, value, expire_at, lru);
            return;
        }
        notify(class::NEW, "new", key, self.index);
        self.add(key, value, expire_at, lru);
    }

    fn add(&mut self, key: &[u8], value: Value, expire_at: u64, lru: u32) {
        if let Some(at) = hash_field_deadline(&value) {
            self.field_deadlines.insert((at, key.to_vec()));
        }
        let (idx, hash) = self.locate(key);
        let block = block_size(key.len(), expire_at != NO_EXPIRE);
        let meta = memory::encode_charge(entry_cost(block, &value))
            | ((memory::LFU_INIT_VAL as u32) << 24);
        self.used += memory::decode_charge(meta);
        let hasher = &self.hasher;
        let slot = self.slots.get_or_alloc(idx, self.slot_count);
        if expire_at != NO_EXPIRE {
            slot.ttl_count += 1;
            self.expires += 1;
            note_replica_local_expire(&mut self.replica_local_expires, key);
        }
        let mut entry = Entry::new(key, value, expire_at, lru, meta);
        if self.mark {
            // Born after any running snapshot's cut: no snapshot ever saves it.
            entry.set_snapshot_mark(true);
        }
        slot.table
            .insert_unique(hash, entry, |e| hasher.hash_one(e.key()));
        self.keys += 1;
        self.exact.note(hash);
    }

    /// Removes a key (expired or not) and returns its entry.
    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let (idx, hash) = self.locate(key);
        self.remove_at(idx, hash, key)
    }

    fn remove_at(&mut self, idx: usize, hash: u64, key: &[u8]) -> Option<Entry> {
        let slot = self.slots.get_mut(idx)?;
        let mut found = slot.table.find_entry(hash, |e| key_eq(e.key(), key)).ok()?;
        save_before_change(&mut self.cut, found.get_mut(), self.mark);
        let (entry, _) = found.remove();
        if entry.expire_at() != NO_EXPIRE {
            slot.ttl_count -= 1;
            self.expires -= 1;
        }
        self.used -= entry.charge();
        self.keys -= 1;
        shrink_if_sparse(&mut slot.table, &self.hasher);
        Some(entry)
    }

    /// Sets or clears (`NO_EXPIRE`) a live key's deadline. Returns false if absent.
    pub fn set_expire(&mut self, key: &[u8], expire_at: u64) -> bool {
        let (idx, hash) = self.locate(key);
        let Some(slot) = self.slots.get_mut(idx) else {
            return false;
        };
        let Some(entry) = slot.table.find_mut(hash, |e| key_eq(e.key(), key)) else {
            return false;
        };
        save_before_change(&mut self.cut, entry, self.mark);
        if expire_at != NO_EXPIRE {
            note_replica_local_expire(&mut self.replica_local_expires, key);
        }
        match (entry.expire_at() != NO_EXPIRE, expire_at != NO_EXPIRE) {
            (false, true) => {
                slot.ttl_count += 1;
                self.expires += 1;
            }
            (true, false) => {
                slot.ttl_count -= 1;
                self.expires -= 1;
            }
            _ => {}
        }
        entry.set_expire_at(expire_at);
        // A first deadline moves the key to a bigger block.
        let (old, new) = remeasure(entry);
        self.used = self.used - old + new;
        true
    }

    pub fn clear(&mut self) {
        self.save_rest_of_snapshot(false);
        self.replica_local_expires = Default::default();
        self.field_deadlines = Default::default();
        self.slots = SlotTables::default();
        self.keys = 0;
        self.expires = 0;
        self.used = 0;
    }

    /// Empties the database at once, handing its tables back to be freed later
    /// (FLUSHALL/FLUSHDB ASYNC).
    pub fn detach(&mut self) -> Detached {
        self.save_rest_of_snapshot(false);
        let d = Detached {
            slots: std::mem::take(&mut self.slots),
            big: Vec::new(),
            bytes: self.used,
            keys: self.keys,
        };
        self.clear();
        d
    }

    /// Records that `key`'s value was just changed in place to one of the same size
    /// (an integer for an integer), so the write's `recharge` may skip it.
    pub fn charge_unchanged(&mut self, key: &[u8]) {
        let (_, hash) = self.locate(key);
        self.exact.note(hash);
    }

    /// Re-measures a key after a write changed its value in place, so the charge
    /// follows the value's growth. One probe; O(1) for strings.
    pub fn recharge(&mut self, key: &[u8]) {
        let (idx, hash) = self.locate(key);
        if self.exact.holds(hash) {
            return;
        }
        let Some(slot) = self.slots.get_mut(idx) else {
            return;
        };
        let Some(e) = slot.table.find_mut(hash, |e| key_eq(e.key(), key)) else {
            return;
        };
        let (old, new) = remeasure(e);
        self.used = self.used - old + new;
    }

    /// Calls `f` for up to `n` entries of one randomly chosen slot (only entries with a
    /// TTL if `volatile`), starting at a random position: the eviction pool's sample,
    /// like Redis's dictGetSomeKeys. Returns how many were offered.
    pub fn sample(
        &self,
        rng: &mut Rng,
        volatile: bool,
        n: usize,
        mut f: impl FnMut(&Entry),
    ) -> usize {
        let total = self.slot_span();
        if total == 0 || (volatile && self.expires == 0) || self.keys == 0 {
            return 0;
        }
        let wanted = |s: &SlotKeys| {
            if volatile {
                s.ttl_count > 0
            } else {
                !s.table.is_empty()
            }
        };
        // A few random probes, then a scan from a random start (sparse keyspaces).
        let mut idx = None;
        for _ in 0..8 {
            let i = rng.below(total);
            if self.slots.get(i).is_some_and(wanted) {
                idx = Some(i);
                break;
            }
        }
        let idx = match idx {
            Some(i) => i,
            None => {
                let start = rng.below(total);
                match (0..total)
                    .map(|k| (start + k) % total)
                    .find(|&i| self.slots.get(i).is_some_and(wanted))
                {
                    Some(i) => i,
                    None => return 0,
                }
            }
        };
        let Some(slot) = self.slots.get(idx) else {
            return 0;
        };
        let table = &slot.table;
        let len = table.len();
        let skip = rng.below(len);
        let mut offered = 0;
        for e in table.iter().skip(skip).chain(table.iter().take(skip)) {
            if offered >= n {
                break;
            }
            if volatile && e.expire_at() == NO_EXPIRE {
                continue;
            }
            f(e);
            offered += 1;
        }
        offered
    }

    /// Calls `f` for every live key of one slot index (0-based within this Db).
    pub fn for_each_in_slot(&self, idx: usize, now_ms: u64, mut f: impl FnMut(&Entry)) {
        if let Some(slot) = self.slots.get(idx) {
            for e in slot.table.iter() {
                if !e.is_expired(now_ms) {
                    f(e);
                }
            }
        }
    }

    /// Every entry of a slot index, expired ones included (SCAN deletes those it
    /// meets, as Redis's scanGenericCommand does).
    pub fn slot_entries(&self, idx: usize) -> impl Iterator<Item = &Entry> {
        self.slots.get(idx).into_iter().flat_map(|s| s.table.iter())
    }

    #[cfg(test)]
    fn slot_capacity(&self, idx: usize) -> usize {
        self.slots.get(idx).map_or(0, |s| s.table.capacity())
    }

    /// Deletes every key of a slot index (a cluster master's slot taken over by
    /// another node) and returns them. Each is logged for the effect stream and
    /// for tracking clients as a key storage deleted on its own, so replicas and
    /// the AOF see its DEL.
    pub fn delete_slot(&mut self, idx: usize) -> Vec<Vec<u8>> {
        let keys: Vec<Vec<u8>> = self.slot_entries(idx).map(|e| e.key().to_vec()).collect();
        for key in &keys {
            let hash = self.hasher.hash_one(&key[..]);
            self.remove_at(idx, hash, key);
            if STREAM_READERS.any() {
                self.expired_log.push(key.clone());
                super::events::note_stream_logged();
            }
            if TRACKING_CLIENTS.any() {
                self.tracking_expired.push(key.clone());
            }
        }
        keys
    }

    /// Number of entries (expired or not) in a slot index.
    pub fn slot_len(&self, idx: usize) -> usize {
        self.slots.get(idx).map_or(0, |s| s.table.len())
    }

    /// A uniformly chosen non-empty slot, then a uniformly chosen entry in it: close
    /// enough to Redis's RANDOMKEY for slots of similar size. Expired keys found on the
    /// way are deleted, as Redis does.
    pub fn random_key(&mut self, now_ms: u64, rng: &mut Rng) -> Option<Vec<u8>> {
        for _ in 0..100 {
            if self.keys == 0 {
                return None;
            }
            let n = self.slot_span();
            if n == 0 {
                return None;
            }
            let start = rng.below(n);
            let idx = (0..n)
                .map(|i| (start + i) % n)
                .find(|&i| self.slots.get(i).is_some_and(|s| !s.table.is_empty()))?;
            let slot = self.slots.get(idx)?;
            let pick = rng.below(slot.table.len());
            let entry = slot.table.iter().nth(pick)?;
            if entry.is_expired(now_ms) {
                if self.holds_expired() {
                    continue;
                }
                let key = entry.key().to_vec();
                let hash = self.hasher.hash_one(&key[..]);
                self.remove_at(idx, hash, &key);
                self.expired_count += 1;
                // Replicas and the AOF must see the deletion (Redis propagates the
                // DEL of every key it finds expired); without it a replica keeps
                // the key, TTL and all, for good.
                if STREAM_READERS.any() {
                    self.expired_log.push(key.clone());
                    super::events::note_stream_logged();
                }
                if TRACKING_CLIENTS.any() {
                    self.tracking_expired.push(key.clone());
                }
                notify(class::EXPIRED, "expired", &key, self.index);
                continue;
            }
            return Some(entry.key().to_vec());
        }
        None
    }

    /// One slice of Redis's active expiry: visit slots holding keys with a TTL, from
    /// where the last pass stopped, deleting expired ones, until `max_samples` TTL keys
    /// were looked at. Returns how many were looked at and how many expired.
    pub fn expire_some(&mut self, now_ms: u64, max_samples: usize) -> ExpireCycleStats {
        self.expire_some_with(now_ms, max_samples, |_| {})
    }

    /// `expire_some`, handing every expired entry to `gone` (to touch WATCHes, or to
    /// free big values lazily).
    pub fn expire_some_with(
        &mut self,
        now_ms: u64,
        max_samples: usize,
        mut gone: impl FnMut(Entry),
    ) -> ExpireCycleStats {
        let mut stats = ExpireCycleStats::default();
        if self.expires == 0 {
            return stats;
        }
        let n = self.slot_span();
        for _ in 0..n {
            if stats.sampled >= max_samples {
                break;
            }
            let idx = self.expire_cursor % n;
            self.expire_cursor = (idx + 1) % n;
            let Some(slot) = self.slots.get_mut(idx) else {
                continue;
            };
            if slot.ttl_count == 0 {
                continue;
            }
            let mut removed = 0usize;
            let mut removed_ttl = 0u32;
            let db = self.index;
            let log = STREAM_READERS.any();
            let expired_log = &mut self.expired_log;
            let (cut, mark) = (&mut self.cut, self.mark);
            let mut freed = 0usize;
            for mut e in slot.table.extract_if(|e| {
                let at = e.expire_at();
                if at == NO_EXPIRE {
                    return false;
                }
                stats.sampled += 1;
                at <= now_ms
            }) {
                save_before_change(cut, &mut e, mark);
                if log {
                    expired_log.push(e.key().to_vec());
                    super::events::note_stream_logged();
                }
                notify(class::EXPIRED, "expired", e.key(), db);
                removed += 1;
                removed_ttl += 1;
                freed += e.charge();
                gone(e);
            }
            self.used -= freed;
            slot.ttl_count -= removed_ttl;
            self.expires -= removed_ttl as usize;
            self.keys -= removed;
            stats.expired += removed;
            shrink_if_sparse(&mut slot.table, &self.hasher);
        }
        self.expired_count += stats.expired as u64;
        stats
    }

    /// Whether hash fields whose deadline passed may be deleted here: not while the
    /// dataset loads, clients are paused or on a replica (which waits for its
    /// master's HDELs and only hides them from its own clients).
    pub fn fields_expire_here(&self) -> bool {
        !self.holds_expired() && !super::entry::expiry_paused()
    }

    /// A hash at `key` has a field deadline at `at`: the active expiry will look at
    /// it then (call when a write gives a hash an earlier deadline than it had).
    pub fn note_field_deadline(&mut self, key: &[u8], at: u64) {
        self.field_deadlines.insert((at, key.to_vec()));
    }

    /// Lazy expiry of fields: deletes every field of the hash at `key` whose deadline
    /// is `<= now` (the key too if none is left), as Redis deletes the expired fields
    /// a command meets. Callers check `fields_expire_here` first.
    pub fn expire_due_fields(&mut self, key: &[u8], now_ms: u64) -> FieldsExpired {
        self.expire_fields_of(key, now_ms, usize::MAX)
    }

    /// One slice of the active expiry of hash fields (Redis's
    /// activeExpireHashFieldCycle): the hashes whose earliest deadline passed, earliest
    /// first, until `max` fields went; `touched` hears of each hash changed. Returns
    /// how many fields went.
    pub fn expire_fields_some(
        &mut self,
        now_ms: u64,
        max: usize,
        mut touched: impl FnMut(&[u8]),
    ) -> usize {
        let mut done = 0;
        while done < max {
            let Some((at, _)) = self.field_deadlines.first() else {
                break;
            };
            if *at > now_ms {
                break;
            }
            let Some((_, key)) = self.field_deadlines.pop_first() else {
                break;
            };
            let gone = self.expire_fields_of(&key, now_ms, max - done);
            if gone.fields > 0 {
                touched(&key);
            }
            done += gone.fields;
        }
        done
    }

    /// Deletes up to `max` due fields of the hash at `key` and renews its hint; a key
    /// whose own TTL passed is left to the expiry of keys.
    fn expire_fields_of(&mut self, key: &[u8], now_ms: u64, max: usize) -> FieldsExpired {
        let (idx, hash) = self.locate(key);
        let Some(slot) = self.slots.get_mut(idx) else {
            return FieldsExpired::default();
        };
        let Some(e) = slot.table.find_mut(hash, |e| key_eq(e.key(), key)) else {
            return FieldsExpired::default();
        };
        if e.is_expired(now_ms) {
            return FieldsExpired::default();
        }
        let Value::Hash(h) = e.value() else {
            return FieldsExpired::default();
        };
        if !h.fields_due(now_ms) {
            if let Some(at) = h.min_field_expire() {
                self.field_deadlines.insert((at, key.to_vec()));
            }
            return FieldsExpired::default();
        }
        save_before_change(&mut self.cut, e, self.mark);
        let Value::Hash(h) = e.value_mut() else {
            return FieldsExpired::default();
        };
        let log = STREAM_READERS.any();
        let log_to = &mut self.expired_fields_log;
        let fields = h.expire_due_fields(now_ms, max, |f| {
            if log {
                log_to.push((key.to_vec(), f.to_vec()));
                super::events::note_stream_logged();
            }
        });
        let (empty, next) = (h.is_empty(), h.min_field_expire());
        self.expired_fields_count += fields as u64;
        notify(class::HASH, "hexpired", key, self.index);
        if empty {
            self.remove_at(idx, hash, key);
            notify(class::GENERIC, "del", key, self.index);
        } else {
            let (old, new) = remeasure(e);
            self.used = self.used - old + new;
            if let Some(at) = next {
                self.field_deadlines.insert((at, key.to_vec()));
            }
        }
        FieldsExpired {
            fields,
            key_deleted: empty,
        }
    }

    /// Cuts a snapshot here (see `storage::snapshot`): from this instant on, the walk
    /// and the writes save every entry as it is now. No snapshot may be running.
    pub fn begin_snapshot(&mut self) {
        debug_assert!(self.cut.is_none(), "a snapshot is already running");
        self.mark = !self.mark;
        self.cut = Some(Box::default());
    }

    /// The running snapshot's state here, if one runs.
    pub fn snapshot(&self) -> Option<&Cut> {
        self.cut.as_deref()
    }

    /// Bytes of records written since the last `take_snapshot_records`.
    pub fn snapshot_records_len(&self) -> usize {
        self.cut.as_deref().map_or(0, |c| c.out.len())
    }

    /// Takes the records written since the last call.
    pub fn take_snapshot_records(&mut self) -> Vec<u8> {
        self.cut
            .as_deref_mut()
            .map(|c| std::mem::take(&mut c.out))
            .unwrap_or_default()
    }

    /// Walks the running snapshot on: writes the entries it still lacks, whole slots
    /// at a time, until about `budget` entries' worth of work is done (`one_key`:
    /// stop after one entry written). Returns true once every slot was walked.
    pub fn snapshot_step(&mut self, budget: usize, one_key: bool) -> bool {
        let span = self.slot_span();
        let mark = self.mark;
        let Some(cut) = self.cut.as_deref_mut() else {
            return true;
        };
        let mut spent = 0;
        while cut.walk < span {
            if let Some(slot) = self.slots.get_mut(cut.walk) {
                // Every block is a cache miss of its own: requested all at once
                // first, they arrive together (a slot's blocks fit in L2), instead of
                // one after the other as the walk reaches them.
                if !one_key {
                    slot.table.iter().for_each(|e| e.prefetch(0));
                }
                for e in slot.table.iter_mut() {
                    spent += 1;
                    if e.snapshot_mark() != mark {
                        cut.save(e, mark);
                        spent += SKIPS_PER_SAVE;
                        if one_key {
                            // The slot is walked again from its start next time:
                            // what was saved is skipped at the cost of a load.
                            return false;
                        }
                    }
                }
            }
            cut.walk += 1;
            if spent >= budget {
                break;
            }
        }
        if cut.walk < span {
            return false;
        }
        // Done: past every slot, also those of tables a later write allocates (a
        // walk of an empty database ends at once, with no table to walk).
        cut.walk = self.slot_count;
        true
    }

    /// Gives the running snapshot up here: nothing more is written, but the walk
    /// must still go on to bring the marks back into agreement.
    pub fn abandon_snapshot(&mut self) {
        if let Some(cut) = self.cut.as_deref_mut() {
            cut.abandon();
        }
    }

    /// Ends the running snapshot here (its walk is done).
    pub fn end_snapshot(&mut self) {
        debug_assert!(self.cut.as_ref().is_none_or(|c| c.walk >= self.slot_span()));
        self.cut = None;
    }

    /// Saves every entry the running snapshot still lacks, before a change to the
    /// whole database. `keep_marks`: the entries stay (SWAPDB), so even a snapshot
    /// given up marks them; otherwise they are about to go and need nothing then.
    fn save_rest_of_snapshot(&mut self, keep_marks: bool) {
        let span = self.slot_span();
        let mark = self.mark;
        let Some(cut) = self.cut.as_deref_mut() else {
            return;
        };
        if cut.abandoned && !keep_marks {
            return;
        }
        for idx in 0..span {
            if let Some(slot) = self.slots.get_mut(idx) {
                for e in slot.table.iter_mut() {
                    cut.save_ahead(e, mark);
                }
            }
        }
    }

    /// Slot indexes to visit when walking the tables: none before the first write.
    fn slot_span(&self) -> usize {
        if self.slots.is_empty() {
            0
        } else {
            self.slot_count
        }
    }

    /// Moves every entry of `other` into `self` (both must cover the same slots).
    pub fn swap(&mut self, other: &mut Db) {
        // A running snapshot saves each database's entries under its own number, and
        // the walk of each must find every mark agreeing afterwards: both are
        // finished here first (SWAPDB while a BGSAVE runs costs that walk at once).
        self.save_rest_of_snapshot(true);
        other.save_rest_of_snapshot(true);
        std::mem::swap(&mut self.slots, &mut other.slots);
        std::mem::swap(&mut self.keys, &mut other.keys);
        std::mem::swap(&mut self.expires, &mut other.expires);
        std::mem::swap(&mut self.used, &mut other.used);
        std::mem::swap(&mut self.field_deadlines, &mut other.field_deadlines);
        self.exact.forget();
        other.exact.forget();
        // The hashers differ per Db only if created with different seeds; Tessera
        // creates every Db of a shard with the same hasher, so tables stay valid.
    }
}

/// A small xorshift generator: shard-local, no locking, good enough for sampling.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `[0, n)`; `n` must be > 0.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::value::StrValue;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn db() -> Db {
        Db::new(0, crate::slot::SLOT_COUNT, DefaultHashBuilder::default())
    }

    fn s(v: &[u8]) -> Value {
        Value::Str(StrValue::from_bytes(v))
    }

    #[test]
    fn key_eq_agrees_with_slice_equality() {
        let base: Vec<u8> = (0..40u8).map(|i| b'a' + i).collect();
        for n in 0..=base.len() {
            let a = &base[..n];
            let copy = a.to_vec();
            assert!(key_eq(a, &copy), "len {n}");
            if n > 0 {
                assert!(!key_eq(a, &base[..n - 1]), "len {n} vs {}", n - 1);
            }
            for at in 0..n {
                let mut other = a.to_vec();
                other[at] ^= 0x20;
                assert!(!key_eq(a, &other), "len {n}, byte {at} differs");
            }
        }
    }

    #[test]
    fn keys_of_every_length_around_the_memo_are_found() {
        // Lengths that the locate memo holds, does not hold, and its empty marker's.
        let mut d = db();
        let keys: Vec<Vec<u8>> = [0, 1, 7, 8, 31, 32, 33, 254, 255, 256]
            .iter()
            .map(|&n| vec![b'k'; n])
            .collect();
        for (i, k) in keys.iter().enumerate() {
            d.insert(k, s(i.to_string().as_bytes()), NO_EXPIRE, 0);
        }
        for (i, k) in keys.iter().enumerate() {
            let got = match d.get(k, 0).map(|e| e.value()) {
                Some(Value::Str(v)) => Some(v.to_vec()),
                _ => None,
            };
            assert_eq!(
                got,
                Some(i.to_string().into_bytes()),
                "key of {} bytes",
                k.len()
            );
        }
        assert!(d.get(&[b'k'; 9], 0).is_none());
    }

    #[test]
    fn prefetch_skips_slots_the_shard_does_not_own() {
        // A shard owning slots [100, 150), and keys both inside and outside it.
        let mut d = Db::new(100, 50, DefaultHashBuilder::default());
        let keys: Vec<Vec<u8>> = (0..20_000u32)
            .map(|i| format!("k{i}").into_bytes())
            .filter(|k| (100..150).contains(&(key_slot(k) as usize)))
            .take(8)
            .collect();
        for k in &keys {
            d.insert(k, s(b"v"), NO_EXPIRE, 0);
        }
        let foreign: &[u8] = b"foo"; // slot 12182
        assert!(!(100..150).contains(&(key_slot(foreign) as usize)));
        let batch = keys.iter().map(|k| k.as_slice()).chain([foreign; 20]);
        d.prefetch(batch);
        Db::new(0, 10, DefaultHashBuilder::default()).prefetch(keys.iter().map(|k| &k[..]));
        assert_eq!(d.len(), 8);
        for k in &keys {
            assert!(d.get(k, 0).is_some());
        }
    }

    #[test]
    fn recharge_follows_in_place_growth_after_an_insert() {
        // The charge of a value grown in place through `get` must be re-measured
        // even though an `insert` of the same key just measured it exactly.
        let grow = |d: &mut Db| {
            if let Some(Value::Str(v)) = d.get(b"k", 0).map(|e| e.value_mut()) {
                *v = StrValue::from_bytes(&[b'x'; 4096]);
            }
        };
        let mut d = db();
        d.insert(b"k", s(b"short"), NO_EXPIRE, 0);
        let small = d.used_bytes();
        d.recharge(b"k");
        assert_eq!(d.used_bytes(), small, "an exact charge is kept");
        grow(&mut d);
        d.recharge(b"k");
        let mut fresh = db();
        fresh.insert(b"k", s(&[b'x'; 4096]), NO_EXPIRE, 0);
        assert_eq!(d.used_bytes(), fresh.used_bytes());
        assert!(d.used_bytes() > small + 4000);
        // Several keys inserted (MSET), then one of them grown: only it changes.
        let mut d = db();
        for k in [&b"a"[..], b"b", b"k", b"c"] {
            d.insert(k, s(b"short"), NO_EXPIRE, 0);
        }
        grow(&mut d);
        d.insert(b"d", s(b"short"), NO_EXPIRE, 0);
        for k in [&b"a"[..], b"b", b"k", b"c", b"d"] {
            d.recharge(k);
        }
        let mut fresh = db();
        for k in [&b"a"[..], b"b", b"c", b"d"] {
            fresh.insert(k, s(b"short"), NO_EXPIRE, 0);
        }
        fresh.insert(b"k", s(&[b'x'; 4096]), NO_EXPIRE, 0);
        assert_eq!(d.used_bytes(), fresh.used_bytes());
    }

    #[test]
    fn passive_and_active_expiry() {
        let mut d = db();
        d.insert(b"a", s(b"1"), 100, 0);
        d.insert(b"b", s(b"2"), NO_EXPIRE, 0);
        d.insert(b"c", s(b"3"), 300, 0);
        assert_eq!(d.expires_len(), 2);
        assert!(d.get(b"a", 99).is_some());
        assert!(d.get(b"a", 100).is_none());
        assert_eq!(d.len(), 2);
        let st = d.expire_some(1000, 20);
        assert_eq!(st.expired, 1);
        assert_eq!(d.len(), 1);
        assert_eq!(d.expires_len(), 0);
        assert_eq!(d.expired_count, 2);
    }

    #[test]
    fn deletions_shrink_a_sparse_slot_table() {
        let mut d = db();
        let keys: Vec<Vec<u8>> = (0..200)
            .map(|i| format!("{{tag}}{i}").into_bytes())
            .collect();
        let idx = key_slot(&keys[0]) as usize;
        for k in &keys {
            d.insert(k, s(b"v"), NO_EXPIRE, 0);
        }
        let full = d.slot_capacity(idx);
        assert!(full >= 200, "{full}");
        for k in &keys[10..] {
            d.remove(k);
        }
        let after = d.slot_capacity(idx);
        assert!((10..=full / 4).contains(&after), "{full} -> {after}");
        for k in &keys[..10] {
            assert!(d.get(k, 0).is_some());
        }
        for k in &keys[..10] {
            d.remove(k);
        }
        assert_eq!(d.slot_capacity(idx), 0);
    }

    #[test]
    fn overwrites_keep_the_lfu_counter_only_under_lfu() {
        let mut d = db();
        d.insert(b"k", s(b"1"), NO_EXPIRE, 100);
        d.insert(b"k", s(b"2"), NO_EXPIRE, 100);
        assert_eq!(
            d.peek(b"k").map(|e| e.lfu_counter()),
            Some(memory::LFU_INIT_VAL)
        );
        d.lfu = Some((10, 1));
        // From the initial value an access always counts (probability 1).
        d.insert(b"k", s(b"3"), NO_EXPIRE, 100);
        assert_eq!(
            d.peek(b"k").map(|e| e.lfu_counter()),
            Some(memory::LFU_INIT_VAL + 1)
        );
        d.insert(b"k", s(b"4"), 5_000, 100);
        let e = d.peek(b"k").expect("present");
        assert!(e.lfu_counter() > memory::LFU_INIT_VAL);
        assert_eq!((e.expire_at(), e.lru()), (5_000, 100));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Set(u8, u8, Option<u16>),
        Del(u8),
        Expire(u8, Option<u16>),
        Get(u8, u16),
        Cycle(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (any::<u8>(), any::<u8>(), proptest::option::of(1u16..500))
                .prop_map(|(k, v, t)| Op::Set(k, v, t)),
            any::<u8>().prop_map(Op::Del),
            (any::<u8>(), proptest::option::of(1u16..500)).prop_map(|(k, t)| Op::Expire(k, t)),
            (any::<u8>(), 0u16..600).prop_map(|(k, t)| Op::Get(k, t)),
            (0u16..600).prop_map(Op::Cycle),
        ]
    }

    proptest! {
        /// The keyspace behaves like a plain map of key -> (value, deadline), where a
        /// key whose deadline passed is simply absent.
        #[test]
        fn keyspace_matches_model(ops in proptest::collection::vec(op(), 1..200)) {
            let mut d = db();
            let mut model: HashMap<Vec<u8>, (Vec<u8>, u64)> = HashMap::new();
            let mut now = 0u64;
            for o in ops {
                match o {
                    Op::Set(k, v, t) => {
                        let key = vec![k % 40];
                        let at = t.map(|t| now + t as u64).unwrap_or(NO_EXPIRE);
                        d.insert(&key, s(&[v]), at, 0);
                        model.insert(key, (vec![v], at));
                    }
                    Op::Del(k) => {
                        let key = vec![k % 40];
                        let live = model.get(&key).is_some_and(|(_, at)| *at == NO_EXPIRE || *at > now);
                        let got = d.get(&key, now).is_some();
                        prop_assert_eq!(got, live);
                        d.remove(&key);
                        model.remove(&key);
                    }
                    Op::Expire(k, t) => {
                        let key = vec![k % 40];
                        let at = t.map(|t| now + t as u64).unwrap_or(NO_EXPIRE);
                        let live = model.get(&key).is_some_and(|(_, a)| *a == NO_EXPIRE || *a > now);
                        if d.get(&key, now).is_some() {
                            prop_assert!(d.set_expire(&key, at));
                            if let Some(m) = model.get_mut(&key) { m.1 = at; }
                        } else {
                            prop_assert!(!live);
                            model.remove(&key);
                        }
                    }
                    Op::Get(k, dt) => {
                        now += dt as u64 / 4;
                        let key = vec![k % 40];
                        let want = model.get(&key).filter(|(_, at)| *at == NO_EXPIRE || *at > now).map(|(v, _)| v.clone());
                        let mut sc = [0u8; 24];
                        // A batch prefetch before the lookup is only a hint.
                        d.prefetch([key.as_slice(), &[k % 40 + 1], b"absent"].into_iter());
                        let got = d.get(&key, now).map(|e| match e.value() { Value::Str(sv) => sv.bytes(&mut sc).to_vec(), other => panic!("unexpected {other:?}") });
                        prop_assert_eq!(got, want);
                    }
                    Op::Cycle(dt) => {
                        now += dt as u64;
                        d.expire_some(now, 1_000_000);
                        model.retain(|_, (_, at)| *at == NO_EXPIRE || *at > now);
                        prop_assert_eq!(d.len(), model.len());
                    }
                }
                prop_assert!(d.len() >= model.values().filter(|(_, at)| *at == NO_EXPIRE || *at > now).count());
                prop_assert_eq!(d.expires_len() <= d.len(), true);
            }
        }
    }
}

/// The snapshot (serialize-before-mutate) against a model: whatever the writes do
/// while the walk goes on, the records it writes are exactly the dataset at the cut.
#[cfg(test)]
mod snapshot_tests {
    use super::*;
    use crate::storage::rdb::records::{RdbReader, Record};
    use crate::storage::rdb::DumpValue;
    use crate::storage::value::StrValue;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    type Model = BTreeMap<Vec<u8>, (Vec<u8>, u64)>;

    #[derive(Debug, Clone)]
    enum Op {
        Set(u8, u8),
        Expire(u8, u64),
        Del(u8),
        Append(u8),
        Step(usize),
        ExpireCycle,
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<u8>(), any::<u8>()).prop_map(|(k, v)| Op::Set(k, v)),
            1 => (any::<u8>(), 1u64..3).prop_map(|(k, t)| Op::Expire(k, t)),
            2 => any::<u8>().prop_map(Op::Del),
            2 => any::<u8>().prop_map(Op::Append),
            3 => (1usize..40).prop_map(Op::Step),
            1 => Just(Op::ExpireCycle),
            1 => Just(Op::Clear),
        ]
    }

    fn key(k: u8) -> Vec<u8> {
        format!("key:{}", k % 64).into_bytes()
    }

    fn text(v: &Value) -> Vec<u8> {
        match v {
            Value::Str(s) => s.to_vec(),
            _ => unreachable!("the model only writes strings"),
        }
    }

    fn apply(db: &mut Db, model: &mut Model, op: &Op) {
        match *op {
            Op::Set(k, v) => {
                let value = vec![v; 1 + v as usize % 40];
                db.insert(
                    &key(k),
                    Value::Str(StrValue::from_bytes(&value)),
                    NO_EXPIRE,
                    0,
                );
                model.insert(key(k), (value, NO_EXPIRE));
            }
            Op::Expire(k, at) => {
                if db.set_expire(&key(k), at) {
                    if let Some(e) = model.get_mut(&key(k)) {
                        e.1 = at;
                    }
                }
            }
            Op::Del(k) => {
                db.remove(&key(k));
                model.remove(&key(k));
            }
            Op::Append(k) => {
                // A read-modify-write through `get`, as APPEND does (clock 0: nothing
                // expires on access, so the model need not know the time).
                if let Some(e) = db.get(&key(k), 0) {
                    let mut v = text(e.value());
                    v.push(b'+');
                    *e.value_mut() = Value::Str(StrValue::from_bytes(&v));
                    if let Some(m) = model.get_mut(&key(k)) {
                        m.0 = v;
                    }
                }
            }
            Op::ExpireCycle => {
                // Deadlines are 1 or 2 ms since the epoch: all long past.
                db.expire_some(u64::MAX, 1000);
                model.retain(|_, (_, at)| *at == NO_EXPIRE);
            }
            Op::Clear => {
                db.clear();
                model.clear();
            }
            Op::Step(_) => {}
        }
    }

    /// The records as key -> (value, deadline).
    fn decode(records: &[u8]) -> Model {
        let file = crate::storage::rdb::file::assemble(&[vec![records.to_vec()]], &[], None);
        let mut r = RdbReader::new(&file).expect("header");
        let mut out = Model::new();
        loop {
            match r.next_record().expect("record") {
                Record::Key(h) => {
                    let DumpValue::Str(v) = r.value(&h).expect("value") else {
                        panic!("not a string");
                    };
                    let fresh = out.insert(h.key.clone(), (v, h.expire_at.unwrap_or(NO_EXPIRE)));
                    assert!(fresh.is_none(), "{:?} written twice", h.key);
                }
                Record::Eof { .. } => return out,
                _ => {}
            }
        }
    }

    fn run(before: &[Op], during: &[Op], second: bool) -> Result<(), TestCaseError> {
        let mut db = Db::new(0, crate::slot::SLOT_COUNT, DefaultHashBuilder::default());
        let mut model = Model::new();
        for op in before {
            apply(&mut db, &mut model, op);
        }
        if second {
            // A first snapshot run to its end leaves the marks ready for the next.
            db.begin_snapshot();
            while !db.snapshot_step(7, false) {}
            db.end_snapshot();
        }
        db.begin_snapshot();
        let at_cut = model.clone();
        let mut records = Vec::new();
        let mut done = false;
        for op in during {
            if let Op::Step(budget) = *op {
                done = done || db.snapshot_step(budget, budget % 5 == 0);
            } else {
                apply(&mut db, &mut model, op);
            }
            records.extend(db.take_snapshot_records());
        }
        while !done {
            done = db.snapshot_step(3, false);
        }
        records.extend(db.take_snapshot_records());
        db.end_snapshot();
        prop_assert_eq!(decode(&records), at_cut);
        Ok(())
    }

    proptest! {
        #[test]
        fn snapshot_is_the_dataset_at_the_cut(
            before in proptest::collection::vec(op(), 0..120),
            during in proptest::collection::vec(op(), 0..200),
            second in any::<bool>(),
        ) {
            run(&before, &during, second)?;
        }
    }

    #[test]
    fn abandoned_snapshot_leaves_marks_for_the_next() {
        let mut db = Db::new(0, crate::slot::SLOT_COUNT, DefaultHashBuilder::default());
        let mut model = Model::new();
        for k in 0..200u8 {
            apply(&mut db, &mut model, &Op::Set(k, k));
        }
        db.begin_snapshot();
        db.snapshot_step(10, false);
        db.abandon_snapshot();
        assert!(db.take_snapshot_records().is_empty());
        apply(&mut db, &mut model, &Op::Set(3, 9));
        while !db.snapshot_step(10, false) {}
        assert!(db.take_snapshot_records().is_empty());
        db.end_snapshot();
        db.begin_snapshot();
        while !db.snapshot_step(10, false) {}
        let records = db.take_snapshot_records();
        db.end_snapshot();
        assert_eq!(decode(&records), model);
    }

    #[test]
    fn swap_saves_both_databases_under_their_own_numbers() {
        let hasher = DefaultHashBuilder::default();
        let mut a = Db::new(0, crate::slot::SLOT_COUNT, hasher);
        let mut b = Db::new(0, crate::slot::SLOT_COUNT, hasher);
        let (mut ma, mut mb) = (Model::new(), Model::new());
        for k in 0..50u8 {
            apply(&mut a, &mut ma, &Op::Set(k, 1));
            apply(&mut b, &mut mb, &Op::Set(k + 100, 2));
        }
        a.begin_snapshot();
        b.begin_snapshot();
        a.snapshot_step(5, false);
        a.swap(&mut b);
        apply(&mut a, &mut Model::new(), &Op::Set(1, 7));
        for (db, want) in [(&mut a, &ma), (&mut b, &mb)] {
            while !db.snapshot_step(5, false) {}
            let records = db.take_snapshot_records();
            db.end_snapshot();
            assert_eq!(&decode(&records), want);
        }
    }
}
