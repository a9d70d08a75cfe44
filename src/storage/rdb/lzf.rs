//! LZF, as Redis's bundled liblzf 3.6 compresses and decompresses: RDB strings
//! longer than 20 bytes are stored compressed when that saves at least 4 bytes.

/// Longest back-reference: 7 + 255 + 2.
const MAX_REF: usize = 264;
/// Back-references reach at most this far (offset field is 13 bits).
const MAX_OFF: usize = 1 << 13;
const MAX_LITERAL: usize = 32;
/// Most output bytes one input byte can produce (a 3-byte reference yields 264).
const MAX_EXPANSION: usize = MAX_REF / 3;

/// Hash table size of Redis's build of liblzf (`HLOG` 16).
const HASH_BITS: u32 = 16;
/// Bytes liblzf keeps in hand after the main loop (see `Compressor::run`).
const TAIL_RESERVE: usize = 3;

/// Compresses `input`; `None` if the result would exceed `max_out` bytes.
///
/// This reproduces the choices of liblzf 3.6 as Redis builds it (`VERY_FAST`,
/// 64 K hash slots, position 0 never referenced, the same output-space checks), so
/// that DUMP payloads are byte-identical to Redis's.
pub(super) fn compress(input: &[u8], max_out: usize) -> Option<Vec<u8>> {
    // Positions are kept in 32 bits; a string that long goes uncompressed.
    if input.len() < 3 || u32::try_from(input.len()).is_err() {
        return None;
    }
    if cannot_fit(input, max_out) {
        return None;
    }
    let out = Vec::with_capacity(max_out.min(input.len()) + 1);
    if input.len() <= SMALL_INPUT {
        SMALL.with(|small| {
            let mut small = small.borrow_mut();
            let slots = small.start(input.len());
            Compressor::new(input, out, max_out, slots).run()
        })
    } else {
        TABLE.with(|table| {
            let mut table = table.borrow_mut();
            table.start();
            Compressor::new(input, out, max_out, &mut *table).run()
        })
    }
}

/// Inputs up to this long are first counted for repeated 3-byte sequences.
const PREFILTER_INPUT: usize = 256;

/// Whether `input` certainly compresses to more than `max_out` bytes, told without
/// compressing it: most short values (ids, counters, JSON fragments) do not compress,
/// and a snapshot tries every string longer than 20 bytes.
///
/// Why it is exact: the first byte is always a literal (nothing precedes it), so the
/// output has at least one literal header; a back-reference of length L >= 3 costs at
/// least 2 bytes. The output is therefore at least n + 1 - sum(L - 2) bytes. A
/// reference of length L starting at p repeats the 3-byte sequences that start at
/// p .. p + L - 3, each seen earlier in the input, and references do not overlap: so
/// sum(L - 2) is at most R, the number of positions whose 3-byte sequence occurred
/// before. R < n + 1 - max_out means no compression can fit. The filter counts R with
/// a 1024-bit set of hashed sequences, which can only count too many (a collision
/// says "seen"), and then it only lets liblzf's loop decide.
fn cannot_fit(input: &[u8], max_out: usize) -> bool {
    let need = (input.len() + 1).saturating_sub(max_out);
    if need == 0 || input.len() > PREFILTER_INPUT {
        return false;
    }
    let mut seen = [0u64; 16];
    let mut repeats = 0;
    // Branch-free: the count's outcome is unpredictable per byte.
    let mut seq = (u32::from(input[0]) << 8) | u32::from(input[1]);
    for &b in &input[2..] {
        seq = ((seq << 8) | u32::from(b)) & 0xFF_FFFF;
        let h = seq.wrapping_mul(0x9E37_79B1) >> 22;
        let word = &mut seen[(h >> 6) as usize];
        let bit = h & 63;
        repeats += ((*word >> bit) & 1) as usize;
        *word |= 1 << bit;
    }
    repeats < need
}

/// liblzf's hash table: slot -> the last position stored under it during this call
/// (0 when none: position 0 is never referenced).
trait Slots {
    /// Stores `pos` under `slot` and returns what was there for this call.
    fn replace(&mut self, slot: usize, pos: usize) -> usize;
}

/// Hash slot -> last position with that hash, as liblzf's table, reused by every
/// call on a thread: each entry carries the number of the call that wrote it, so a
/// fresh (all-empty) table costs a counter bump rather than 512 KiB zeroed for every
/// string (which made saving small values six times slower than Redis).
struct Table {
    slots: Vec<u64>,
    call: u32,
}

thread_local! {
    static TABLE: std::cell::RefCell<Table> = std::cell::RefCell::new(Table {
        slots: vec![0; 1 << HASH_BITS],
        call: 0,
    });
    static SMALL: std::cell::RefCell<SmallTable> = std::cell::RefCell::new(SmallTable {
        entries: vec![0; 2 * SMALL_INPUT.next_power_of_two()],
        mask: 0,
    });
}

impl Table {
    /// Empties the table for a new call.
    fn start(&mut self) {
        self.call = self.call.wrapping_add(1);
        if self.call == 0 {
            // Once in 2^32 calls: entries of the call numbered 0 would look current.
            self.slots.fill(0);
            self.call = 1;
        }
    }
}

impl Slots for &mut Table {
    fn replace(&mut self, slot: usize, pos: usize) -> usize {
        let old = std::mem::replace(
            &mut self.slots[slot],
            (u64::from(self.call) << 32) | pos as u64,
        );
        if (old >> 32) as u32 == self.call {
            (old & u64::from(u32::MAX)) as usize
        } else {
            0
        }
    }
}

/// Inputs up to this long use `SmallTable`.
const SMALL_INPUT: usize = 1024;

/// The same mapping as `Table` for a short input, kept in a few cache lines: an
/// input of n bytes stores at most n slots, so an open-addressed table of 2n entries
/// holds them. The 64 K-slot table's 512 KiB do not stay in L2 when the values
/// differ, so its lookups can miss, and a snapshot compresses every value longer
/// than 20 bytes. (Measured on identical 32-byte values, where the big table stays
/// cached: 110 ns a call against 150.)
struct SmallTable {
    /// `(slot + 1) << 32 | pos`, 0 when empty.
    entries: Vec<u64>,
    mask: usize,
}

impl SmallTable {
    /// Empties the part of the table an input of `len` bytes uses, and returns it.
    fn start(&mut self, len: usize) -> &mut SmallTable {
        let size = (2 * len).next_power_of_two();
        self.entries[..size].fill(0);
        self.mask = size - 1;
        self
    }
}

impl Slots for &mut SmallTable {
    fn replace(&mut self, slot: usize, pos: usize) -> usize {
        let key = (slot as u64 + 1) << 32;
        let mut i = slot & self.mask;
        loop {
            let e = self.entries[i];
            if e == 0 || e & !u64::from(u32::MAX) == key {
                self.entries[i] = key | pos as u64;
                return (e & u64::from(u32::MAX)) as usize;
            }
            i = (i + 1) & self.mask;
        }
    }
}

struct Compressor<'a, S: Slots> {
    input: &'a [u8],
    /// Output so far; while a literal run is open its header byte is a placeholder
    /// `lit + 1` bytes from the end.
    out: Vec<u8>,
    max_out: usize,
    table: S,
    /// Length of the open literal run.
    lit: usize,
}

/// liblzf's `IDX` under `VERY_FAST`: `hval` holds the last four bytes read.
fn slot(hval: u32) -> usize {
    ((hval >> (24 - HASH_BITS)).wrapping_sub(hval.wrapping_mul(5)) & ((1 << HASH_BITS) - 1))
        as usize
}

impl<'a, S: Slots> Compressor<'a, S> {
    fn new(input: &'a [u8], out: Vec<u8>, max_out: usize, table: S) -> Self {
        Compressor {
            input,
            out,
            max_out,
            table,
            lit: 0,
        }
    }

    fn first(&self, pos: usize) -> u32 {
        (u32::from(self.input[pos]) << 8) | u32::from(self.input[pos + 1])
    }

    fn next(&self, hval: u32, pos: usize) -> u32 {
        (hval << 8) | u32::from(self.input[pos + 2])
    }

    fn run(mut self) -> Option<Vec<u8>> {
        let input = self.input;
        let n = input.len();
        let mut ip = 0;
        let mut hval = self.first(0);
        self.out.push(0);
        while ip < n - 2 {
            hval = self.next(hval, ip);
            let h = slot(hval);
            let candidate = self.table.replace(h, ip);
            match self.match_at(candidate, ip) {
                Some(off) => {
                    ip = self.emit_match(candidate, ip, off)?;
                    if ip >= n - 2 {
                        break;
                    }
                    // VERY_FAST: index the two positions before the resume point.
                    ip -= 2;
                    hval = self.first(ip);
                    for _ in 0..2 {
                        hval = self.next(hval, ip);
                        self.table.replace(slot(hval), ip);
                        ip += 1;
                    }
                }
                None => {
                    if self.out.len() >= self.max_out {
                        return None;
                    }
                    self.literal(input[ip]);
                    ip += 1;
                }
            }
        }
        if self.out.len() + TAIL_RESERVE > self.max_out {
            return None;
        }
        for &b in &input[ip..] {
            self.literal(b);
        }
        self.close_run();
        (self.out.len() <= self.max_out).then_some(self.out)
    }

    /// The offset field of a back-reference from `ip` to `candidate`, if usable.
    fn match_at(&self, candidate: usize, ip: usize) -> Option<usize> {
        if candidate == 0 || candidate >= ip {
            return None;
        }
        let off = ip - candidate - 1;
        let i = self.input;
        let same = i[candidate..candidate + 3] == i[ip..ip + 3];
        (off < MAX_OFF && same).then_some(off)
    }

    /// Emits a back-reference found at `ip`; returns the position after it.
    fn emit_match(&mut self, candidate: usize, ip: usize, off: usize) -> Option<usize> {
        let i = self.input;
        let n = i.len();
        let maxlen = (n - ip - 2).min(MAX_REF);
        let undo = usize::from(self.lit == 0);
        if self.out.len() - undo + 4 >= self.max_out {
            return None;
        }
        self.close_run();
        // liblzf compares 16 bytes unrolled before honouring `maxlen`.
        let mut len = 2;
        let mut done = false;
        if maxlen > 16 {
            for _ in 0..16 {
                len += 1;
                if i[candidate + len] != i[ip + len] {
                    done = true;
                    break;
                }
            }
        }
        if !done {
            loop {
                len += 1;
                if !(len < maxlen && i[candidate + len] == i[ip + len]) {
                    break;
                }
            }
        }
        let code = len - 2;
        let hi = (off >> 8) as u8;
        if code < 7 {
            self.out.push(hi + ((code as u8) << 5));
        } else {
            self.out.push(hi + (7 << 5));
            self.out.push((code - 7) as u8);
        }
        self.out.push((off & 0xff) as u8);
        self.out.push(0);
        self.lit = 0;
        Some(ip + len)
    }

    fn literal(&mut self, b: u8) {
        self.lit += 1;
        self.out.push(b);
        if self.lit == MAX_LITERAL {
            self.close_run();
            self.out.push(0);
        }
    }

    /// Writes the open run's header, or drops the placeholder of an empty run.
    fn close_run(&mut self) {
        if self.lit == 0 {
            self.out.pop();
        } else {
            let at = self.out.len() - self.lit - 1;
            self.out[at] = (self.lit - 1) as u8;
            self.lit = 0;
        }
    }
}

/// Decompresses `input`, which must expand to exactly `len` bytes.
pub(super) fn decompress(input: &[u8], len: usize) -> Option<Vec<u8>> {
    if len == 0 || len > input.len().saturating_mul(MAX_EXPANSION) {
        return None;
    }
    let mut out = Vec::with_capacity(len);
    let mut i = 0;
    while i < input.len() {
        let ctrl = usize::from(input[i]);
        i += 1;
        i = if ctrl < 32 {
            copy_literal(input, i, ctrl + 1, &mut out, len)?
        } else {
            copy_reference(input, i, ctrl, &mut out, len)?
        };
    }
    (out.len() == len).then_some(out)
}

fn copy_literal(input: &[u8], i: usize, n: usize, out: &mut Vec<u8>, len: usize) -> Option<usize> {
    let bytes = input.get(i..i + n)?;
    if out.len() + n > len {
        return None;
    }
    out.extend_from_slice(bytes);
    Some(i + n)
}

fn copy_reference(
    input: &[u8],
    mut i: usize,
    ctrl: usize,
    out: &mut Vec<u8>,
    len: usize,
) -> Option<usize> {
    let mut n = ctrl >> 5;
    if n == 7 {
        n += usize::from(*input.get(i)?);
        i += 1;
    }
    n += 2;
    let back = ((ctrl & 0x1f) << 8) + usize::from(*input.get(i)?) + 1;
    i += 1;
    let start = out.len().checked_sub(back)?;
    if out.len() + n > len {
        return None;
    }
    for k in 0..n {
        let b = out[start + k];
        out.push(b);
    }
    Some(i)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{b, hex};
    use super::super::{dump_string, restore, DumpValue};
    use super::*;
    use proptest::prelude::*;

    /// `compress` with the 64 K-slot table whatever the input's length.
    fn compress_with_full_table(input: &[u8], max_out: usize) -> Option<Vec<u8>> {
        TABLE.with(|table| {
            let mut table = table.borrow_mut();
            table.start();
            let out = Vec::with_capacity(max_out.min(input.len()) + 1);
            Compressor::new(input, out, max_out, &mut *table).run()
        })
    }

    proptest! {
        /// The small table is only a smaller home for the same mapping, and the
        /// prefilter only refuses what would not fit: every output (and every refusal)
        /// is liblzf's with its full table, so payloads stay Redis's.
        #[test]
        fn prop_small_table_matches_full_table(
            input in prop_oneof![
                proptest::collection::vec(any::<u8>(), 3..=SMALL_INPUT),
                // Short values near the prefilter's bound: a few repeats or none.
                (3usize..=PREFILTER_INPUT, 1usize..64).prop_map(|(n, period)| (0..n).map(|i| b'a' + ((i % period) % 26) as u8).collect()),
                proptest::collection::vec(prop_oneof![Just(b'x'), Just(b'y'), any::<u8>()], 3..64),
                proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'c')], 3..=SMALL_INPUT),
                (1usize..40, 3usize..=SMALL_INPUT).prop_map(|(period, n)| (0..n).map(|i| (i % period) as u8).collect()),
            ],
            slack in 0usize..8,
        ) {
            let max_out = (input.len() + slack).saturating_sub(4);
            prop_assert_eq!(compress(&input, max_out), compress_with_full_table(&input, max_out));
        }
    }

    #[test]
    fn lzf_rejects_bad_streams() {
        assert_eq!(decompress(&[0, b'a'], 1), Some(b("a")));
        assert_eq!(decompress(&[0, b'a'], 2), None, "too short");
        assert_eq!(decompress(&[1, b'a'], 2), None, "truncated literal");
        assert_eq!(decompress(&[0x20, 0], 3), None, "reference before start");
        assert_eq!(decompress(&[0, b'a', 0x20, 0], 4), Some(b("aaaa")));
        assert_eq!(decompress(&[0, b'a', 0xE0], 10), None, "truncated ref");
        assert_eq!(decompress(&[], 0), None);
    }

    /// Strings DUMPed by Redis 7.0.15: LZF output identical to liblzf's.
    #[test]
    fn lzf_output_matches_redis() {
        let cases: [(Vec<u8>, &str); 4] = [
            (b"abcdefgh".repeat(40), "00c313414008616263646566676861e0ff07e124070167680a007628fd45fe339d11"),
            ((0..300u32).map(|i| ((i * i + 7 * i) % 13 + 97) as u8).collect(), "00c318412c0d6169666566696168646262646861e0ff0ce10b100168610a00a537fddff6ca57bb"),
            ((0..2000u32).map(|i| ((i / 3) % 7 + 48) as u8).collect(), "00c33247d01530303031313132323233333334343435353536363630e0ff14e1ff10e2ff21e3ff1de4ff2ee5ff2ae6ff3be777370131310a0096501641042405aa"),
            ([vec![b'x'; 500], vec![b'y'; 300], b"xy".repeat(100)].concat(), "00c31943e8017878e0ff00e0e1000079e0ff00e01a000078e0bc010178790a00d2223f7c56720bc8"),
        ];
        for (value, want) in cases {
            let mut out = Vec::new();
            dump_string(&value, &mut out);
            assert_eq!(out, hex(want));
            assert_eq!(restore(&out), Ok(DumpValue::Str(value)));
        }
    }
}
