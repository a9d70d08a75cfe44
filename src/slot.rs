//! Redis Cluster hash slots: `slot(key) = crc16(hashtag(key)) % 16384`, and the
//! static assignment of slot ranges to shards.

pub const SLOT_COUNT: usize = 16384;

/// The part of the key that is hashed: the first non-empty `{...}` section, as
/// Redis Cluster defines it, so `{user1}:a` and `{user1}:b` share a slot (and a core).
#[inline]
pub fn hashtag(key: &[u8]) -> &[u8] {
    if let Some(open) = find_byte(key, b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// Index of the first `needle` in `hay`, eight bytes at a time: every key access
/// scans its key for `{` (routing, prefetch, lookup), and the byte-at-a-time loop was
/// a third of the routing cost in profiles. A byte of `word ^ pattern` is zero where
/// `needle` is; `(x - 0x01..) & !x & 0x80..` marks the first zero byte exactly (a
/// borrow only runs upward from a zero byte, so the bytes below it read true).
#[inline]
fn find_byte(hay: &[u8], needle: u8) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let pattern = LO * u64::from(needle);
    let mut chunks = hay.chunks_exact(8);
    let mut base = 0;
    for c in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(c);
        let x = u64::from_le_bytes(word) ^ pattern;
        let found = x.wrapping_sub(LO) & !x & HI;
        if found != 0 {
            return Some(base + (found.trailing_zeros() / 8) as usize);
        }
        base += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == needle)
        .map(|i| base + i)
}

#[inline]
pub fn key_slot(key: &[u8]) -> u16 {
    (crate::util::crc16::crc16(hashtag(key)) as usize % SLOT_COUNT) as u16
}

/// Which shard owns which slots: shard `i` of `n` owns `[i*16384/n, (i+1)*16384/n)`.
#[derive(Debug, Clone, Copy)]
pub struct SlotTable {
    shards: usize,
}

impl SlotTable {
    pub fn new(shards: usize) -> Self {
        assert!(
            (1..=SLOT_COUNT).contains(&shards),
            "shard count out of range"
        );
        SlotTable { shards }
    }

    pub fn shards(&self) -> usize {
        self.shards
    }

    /// First slot owned by `shard`.
    pub fn first_slot(&self, shard: usize) -> usize {
        shard * SLOT_COUNT / self.shards
    }

    /// The half-open slot range owned by `shard`.
    pub fn range(&self, shard: usize) -> std::ops::Range<usize> {
        self.first_slot(shard)..self.first_slot(shard + 1)
    }

    /// The shard owning `slot`. The inverse of `range`, computed without a loop.
    #[inline]
    pub fn owner(&self, slot: u16) -> usize {
        // The largest i with i*SLOTS/n <= slot is floor(((slot+1)*n - 1) / SLOTS).
        ((slot as usize + 1) * self.shards - 1) / SLOT_COUNT
    }

    #[inline]
    pub fn shard_of_key(&self, key: &[u8]) -> usize {
        self.owner(key_slot(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_slots_match_redis_cluster() {
        // Values from `CLUSTER KEYSLOT` on a real Redis.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_eq!(hashtag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hashtag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hashtag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(key_slot(b""), 0);
    }

    proptest::proptest! {
        #[test]
        fn find_byte_matches_a_byte_loop(
            hay in proptest::collection::vec(proptest::sample::select(
                vec![b'{', b'}', b'a', 0u8, 0x7a, 0x7c, 0xfb, 0x80, 0xff]), 0..40),
            needle in proptest::sample::select(vec![b'{', b'}', 0u8, 0xff]),
        ) {
            let expected = hay.iter().position(|&b| b == needle);
            proptest::prop_assert_eq!(find_byte(&hay, needle), expected);
        }
    }

    #[test]
    fn owner_inverts_ranges() {
        for n in [1usize, 2, 3, 7, 16, 64, 100] {
            let t = SlotTable::new(n);
            let mut covered = 0;
            for s in 0..n {
                for slot in t.range(s) {
                    assert_eq!(t.owner(slot as u16), s, "n={n} slot={slot}");
                    covered += 1;
                }
            }
            assert_eq!(covered, SLOT_COUNT);
        }
    }
}
