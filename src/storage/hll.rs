//! HyperLogLog in Redis's exact byte format, so the strings move through GET / SET /
//! DUMP / RESTORE between Tessera and Redis unchanged.
//!
//! Layout: a 16-byte header — the magic `HYLL`, the encoding (0 dense, 1 sparse), three
//! unused bytes and the cached cardinality as 8 little-endian bytes whose last byte's
//! top bit marks the cache invalid — then the registers. P = 14 gives 16384 registers
//! of 6 bits. Dense: the registers packed LSB first. Sparse: a run-length code of
//! opcodes, `00xxxxxx` (ZERO: 1..64 zero registers), `01xxxxxx yyyyyyyy` (XZERO:
//! 1..16384 zero registers) and `1vvvvvxx` (VAL: 1..4 registers of value 1..32).
//! The estimator is Ertl's "new" one that Redis 7.0 uses (tau / sigma corrections).

/// Registers index bits.
const P: u32 = 14;
/// Bits of the hash left to count the run of zeros in.
const Q: u32 = 50;
pub const REGISTERS: usize = 1 << P;
const P_MASK: u64 = REGISTERS as u64 - 1;
const REG_BITS: usize = 6;
const REG_MAX: u32 = (1 << REG_BITS) - 1;
pub const HDR: usize = 16;
/// The byte length of a dense HLL.
pub const DENSE_SIZE: usize = HDR + (REGISTERS * REG_BITS).div_ceil(8);
pub const ENC_DENSE: u8 = 0;
pub const ENC_SPARSE: u8 = 1;
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;

const ZERO_MAX_LEN: usize = 64;
const XZERO_MAX_LEN: usize = 16384;
const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
/// How many opcodes after the changed one are looked at for merging equal VALs.
const MERGE_SCAN: usize = 5;

/// The HLL's registers or opcodes do not add up: Redis's INVALIDOBJ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

pub const INVALID_ERR: &str = "INVALIDOBJ Corrupted HLL object detected";
pub const NOT_HLL_ERR: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";

// ---------------------------------------------------------------------------
// Hashing
// ---------------------------------------------------------------------------

/// MurmurHash64A (Austin Appleby), blocks read little-endian, as Redis hashes elements.
pub fn murmur64a(data: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (data.len() as u64).wrapping_mul(M);
    let mut blocks = data.chunks_exact(8);
    for b in &mut blocks {
        let mut k = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            h ^= (b as u64) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element falls in and the length of the run of zeros (plus one) in
/// the rest of its hash, counted from the least significant bit.
pub fn pattern(ele: &[u8]) -> (usize, u8) {
    let hash = murmur64a(ele, 0xadc8_3b19);
    let index = (hash & P_MASK) as usize;
    // A sentinel bit bounds the count to Q + 1.
    let rest = (hash >> P) | (1u64 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

// ---------------------------------------------------------------------------
// Header
// ---------------------------------------------------------------------------

/// Whether `b` passes Redis's isHLLObject checks (magic, encoding, dense length).
pub fn is_hll(b: &[u8]) -> bool {
    b.len() >= HDR
        && &b[..4] == b"HYLL"
        && b[4] <= ENC_SPARSE
        && (b[4] != ENC_DENSE || b.len() == DENSE_SIZE)
}

/// A new, empty HLL: sparse, one XZERO run over every register.
pub fn new_sparse() -> Vec<u8> {
    let mut v = Vec::with_capacity(64);
    v.extend_from_slice(b"HYLL");
    v.extend_from_slice(&[ENC_SPARSE, 0, 0, 0]);
    v.extend_from_slice(&[0; 8]);
    let mut left = REGISTERS;
    while left > 0 {
        let n = left.min(XZERO_MAX_LEN);
        v.extend_from_slice(&xzero(n));
        left -= n;
    }
    v
}

pub fn is_sparse(h: &[u8]) -> bool {
    h[4] == ENC_SPARSE
}

/// The cached cardinality, if the cache is valid.
pub fn cached(h: &[u8]) -> Option<u64> {
    (h[15] & 0x80 == 0).then(|| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&h[8..16]);
        u64::from_le_bytes(b)
    })
}

pub fn set_cached(h: &mut [u8], card: u64) {
    h[8..16].copy_from_slice(&card.to_le_bytes());
}

pub fn invalidate(h: &mut [u8]) {
    h[15] |= 0x80;
}

// ---------------------------------------------------------------------------
// Dense registers
// ---------------------------------------------------------------------------

/// Register `i` of a dense register area (the byte after the area reads as zero, as
/// the string terminator does in Redis).
fn dense_get(regs: &[u8], i: usize) -> u8 {
    let bit = i * REG_BITS;
    let (byte, fb) = (bit / 8, bit & 7);
    let b0 = regs[byte] as u32;
    let b1 = regs.get(byte + 1).copied().unwrap_or(0) as u32;
    (((b0 >> fb) | (b1 << (8 - fb))) & REG_MAX) as u8
}

fn dense_put(regs: &mut [u8], i: usize, val: u8) {
    let bit = i * REG_BITS;
    let (byte, fb) = (bit / 8, bit & 7);
    let fb8 = 8 - fb;
    let v = val as u32;
    regs[byte] &= !((REG_MAX << fb) as u8);
    regs[byte] |= (v << fb) as u8;
    if let Some(b) = regs.get_mut(byte + 1) {
        *b &= !((REG_MAX >> fb8) as u8);
        *b |= (v >> fb8) as u8;
    }
}

/// Raises register `i` to `count`; whether it changed.
fn dense_set(regs: &mut [u8], i: usize, count: u8) -> bool {
    if count > dense_get(regs, i) {
        dense_put(regs, i, count);
        true
    } else {
        false
    }
}

// ---------------------------------------------------------------------------
// Sparse opcodes
// ---------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Op {
    Zero(usize),
    XZero(usize),
    Val(u8, usize),
}

impl Op {
    fn bytes(self) -> usize {
        if matches!(self, Op::XZero(_)) {
            2
        } else {
            1
        }
    }

    fn span(self) -> usize {
        match self {
            Op::Zero(n) | Op::XZero(n) | Op::Val(_, n) => n,
        }
    }
}

/// Decodes the opcode at `p` (the byte after the end reads as zero).
fn op_at(s: &[u8], p: usize) -> Op {
    let b = s[p];
    if b & 0x80 != 0 {
        Op::Val(((b >> 2) & 0x1f) + 1, (b & 3) as usize + 1)
    } else if b & 0x40 == 0 {
        Op::Zero((b & 0x3f) as usize + 1)
    } else {
        let lo = s.get(p + 1).copied().unwrap_or(0) as usize;
        Op::XZero((((b & 0x3f) as usize) << 8 | lo) + 1)
    }
}

fn val(v: u8, len: usize) -> u8 {
    0x80 | ((v - 1) << 2) | (len - 1) as u8
}

fn xzero(len: usize) -> [u8; 2] {
    let l = len - 1;
    [0x40 | (l >> 8) as u8, (l & 0xff) as u8]
}

/// Appends a run of `len` zero registers as ZERO or XZERO.
fn push_zeros(seq: &mut [u8; 5], n: &mut usize, len: usize) {
    if len > ZERO_MAX_LEN {
        seq[*n..*n + 2].copy_from_slice(&xzero(len));
        *n += 2;
    } else {
        seq[*n] = (len - 1) as u8;
        *n += 1;
    }
}

/// Walks the opcodes of a sparse HLL, calling `f(first_register, op)`; the number of
/// registers covered, or None when a VAL run overflows the register count.
fn walk_sparse(h: &[u8], mut f: impl FnMut(usize, Op)) -> Option<usize> {
    let mut p = HDR;
    let mut idx = 0usize;
    while p < h.len() {
        let op = op_at(h, p);
        if let Op::Val(..) = op {
            if idx + op.span() > REGISTERS {
                return None;
            }
        }
        f(idx, op);
        idx += op.span();
        p += op.bytes();
    }
    Some(idx)
}

/// Converts a sparse HLL to dense in place (the header, cached cardinality included,
/// is kept). A dense one is left alone.
pub fn to_dense(h: &mut Vec<u8>) -> Result<bool, Corrupt> {
    if !is_sparse(h) {
        return Ok(false);
    }
    let mut dense = vec![0u8; DENSE_SIZE];
    dense[..HDR].copy_from_slice(&h[..HDR]);
    dense[4] = ENC_DENSE;
    let total = walk_sparse(h, |first, op| {
        if let Op::Val(v, n) = op {
            for i in first..first + n {
                dense_put(&mut dense[HDR..], i, v);
            }
        }
    });
    if total != Some(REGISTERS) {
        return Err(Corrupt);
    }
    *h = dense;
    Ok(true)
}

/// Raises register `index` of a sparse HLL to `count`, rewriting the opcode that
/// covers it; promotes to dense when the value does not fit a VAL opcode or the
/// string would outgrow `sparse_max` bytes. Whether the register changed.
fn sparse_set(
    h: &mut Vec<u8>,
    index: usize,
    count: u8,
    sparse_max: usize,
) -> Result<bool, Corrupt> {
    if count > VAL_MAX_VALUE {
        return promote(h, index, count);
    }
    // Find the opcode covering `index`, and the one before it.
    let (mut p, mut first, mut prev) = (HDR, 0usize, None);
    let mut op = Op::Zero(0);
    while p < h.len() {
        op = op_at(h, p);
        if index < first + op.span() {
            break;
        }
        prev = Some(p);
        p += op.bytes();
        first += op.span();
    }
    if op.span() == 0 || p >= h.len() || p + op.bytes() > h.len() {
        return Err(Corrupt);
    }
    // The cheap cases: a one-register opcode just changes value.
    match op {
        Op::Val(old, _) if old >= count => return Ok(false),
        Op::Val(_, 1) | Op::Zero(1) => {
            h[p] = val(count, 1);
            merge_vals(h, prev);
            return Ok(true);
        }
        _ => {}
    }
    // Split the run into (before, the register, after), up to five bytes.
    let last = first + op.span() - 1;
    let mut seq = [0u8; 5];
    let mut n = 0;
    match op {
        Op::Val(cur, _) => {
            if index != first {
                seq[n] = val(cur, index - first);
                n += 1;
            }
            seq[n] = val(count, 1);
            n += 1;
            if index != last {
                seq[n] = val(cur, last - index);
                n += 1;
            }
        }
        Op::Zero(_) | Op::XZero(_) => {
            if index != first {
                push_zeros(&mut seq, &mut n, index - first);
            }
            seq[n] = val(count, 1);
            n += 1;
            if index != last {
                push_zeros(&mut seq, &mut n, last - index);
            }
        }
    }
    if n > op.bytes() && h.len() + n - op.bytes() > sparse_max {
        return promote(h, index, count);
    }
    h.splice(p..p + op.bytes(), seq[..n].iter().copied());
    merge_vals(h, prev);
    Ok(true)
}

/// After an update, joins adjacent VAL opcodes of equal value whose runs fit one
/// opcode, looking at a few opcodes from the one before the change.
fn merge_vals(h: &mut Vec<u8>, prev: Option<usize>) {
    let mut p = prev.unwrap_or(HDR);
    let mut scan = MERGE_SCAN;
    while p < h.len() && scan > 0 {
        scan -= 1;
        match op_at(h, p) {
            Op::XZero(_) => p += 2,
            Op::Zero(_) => p += 1,
            Op::Val(v1, l1) => {
                if p + 1 < h.len() {
                    if let Op::Val(v2, l2) = op_at(h, p + 1) {
                        if v1 == v2 && l1 + l2 <= VAL_MAX_LEN {
                            h[p + 1] = val(v1, l1 + l2);
                            h.remove(p);
                            continue;
                        }
                    }
                }
                p += 1;
            }
        }
    }
    invalidate(h);
}

fn promote(h: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, Corrupt> {
    to_dense(h)?;
    Ok(dense_set(&mut h[HDR..], index, count))
}

/// Raises register `index` to `count` in either encoding.
pub fn set_register(
    h: &mut Vec<u8>,
    index: usize,
    count: u8,
    sparse_max: usize,
) -> Result<bool, Corrupt> {
    if is_sparse(h) {
        sparse_set(h, index, count, sparse_max)
    } else {
        Ok(dense_set(&mut h[HDR..], index, count))
    }
}

/// Adds an element; whether a register changed.
pub fn add(h: &mut Vec<u8>, ele: &[u8], sparse_max: usize) -> Result<bool, Corrupt> {
    let (index, count) = pattern(ele);
    set_register(h, index, count, sparse_max)
}

// ---------------------------------------------------------------------------
// Estimation and merging
// ---------------------------------------------------------------------------

/// How many registers hold each value (0..=63).
type Histo = [u32; 64];

fn histogram(h: &[u8]) -> Result<Histo, Corrupt> {
    let mut histo = [0u32; 64];
    if is_sparse(h) {
        let total = walk_sparse(h, |_, op| match op {
            Op::Zero(n) | Op::XZero(n) => histo[0] += n as u32,
            Op::Val(v, n) => histo[v as usize] += n as u32,
        });
        if total != Some(REGISTERS) {
            return Err(Corrupt);
        }
    } else {
        for i in 0..REGISTERS {
            histo[dense_get(&h[HDR..], i) as usize] += 1;
        }
    }
    Ok(histo)
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    loop {
        x *= x;
        let before = z;
        z += x * y;
        y += y;
        if before == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let before = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if before == z {
            return z / 3.0;
        }
    }
}

/// Ertl's improved raw estimator over a register histogram.
fn estimate(histo: &Histo) -> u64 {
    let m = REGISTERS as f64;
    let q = Q as usize;
    let mut z = m * tau((m - histo[q + 1] as f64) / m);
    for j in (1..=q).rev() {
        z += histo[j] as f64;
        z *= 0.5;
    }
    z += m * sigma(histo[0] as f64 / m);
    (ALPHA_INF * m * m / z).round() as u64
}

/// The estimated cardinality of a (valid-looking) HLL string.
pub fn count(h: &[u8]) -> Result<u64, Corrupt> {
    Ok(estimate(&histogram(h)?))
}

/// Takes the per-register maximum of `max` (one byte per register) and the HLL `h`.
pub fn merge_into(max: &mut [u8], h: &[u8]) -> Result<(), Corrupt> {
    if is_sparse(h) {
        let total = walk_sparse(h, |first, op| {
            if let Op::Val(v, n) = op {
                for m in &mut max[first..first + n] {
                    *m = (*m).max(v);
                }
            }
        });
        if total != Some(REGISTERS) {
            return Err(Corrupt);
        }
    } else {
        for (i, m) in max.iter_mut().enumerate() {
            *m = (*m).max(dense_get(&h[HDR..], i));
        }
    }
    Ok(())
}

/// The estimate of a merged register array (one byte per register).
pub fn count_registers(max: &[u8]) -> u64 {
    let mut histo = [0u32; 64];
    for &r in max {
        histo[(r as usize).min(63)] += 1;
    }
    estimate(&histo)
}

/// Writes merged registers into `h` (PFMERGE's destination side): dense first when any
/// source was dense, then each non-zero register raised in register order.
pub fn store_registers(
    h: &mut Vec<u8>,
    max: &[u8],
    dense: bool,
    sparse_max: usize,
) -> Result<(), Corrupt> {
    if dense {
        to_dense(h)?;
    }
    for (i, &r) in max.iter().enumerate() {
        if r != 0 {
            // Redis ignores a failure here: the destination was validated already.
            let _ = set_register(h, i, r, sparse_max);
        }
    }
    invalidate(h);
    Ok(())
}

/// Every register's value (PFDEBUG GETREG), from a dense HLL.
pub fn registers(h: &[u8]) -> Vec<u8> {
    (0..REGISTERS).map(|i| dense_get(&h[HDR..], i)).collect()
}

/// PFDEBUG DECODE's text for a sparse HLL: `z:len`, `Z:len`, `v:value,len`.
pub fn decode(h: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let mut p = HDR;
    while p < h.len() {
        let op = op_at(h, p);
        let _ = match op {
            Op::Zero(n) => write!(s, "z:{n} "),
            Op::XZero(n) => write!(s, "Z:{n} "),
            Op::Val(v, n) => write!(s, "v:{v},{n} "),
        };
        p += op.bytes();
    }
    s.trim_matches(' ').to_string()
}

/// PFSELFTEST: register packing, sparse/dense agreement and estimate error bounds.
pub fn self_test() -> Result<(), String> {
    let mut regs = vec![0u8; DENSE_SIZE - HDR];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let expect: Vec<u8> = (0..REGISTERS).map(|_| (rnd() % 64) as u8).collect();
    for (i, &v) in expect.iter().enumerate() {
        dense_put(&mut regs, i, v);
    }
    for (i, &v) in expect.iter().enumerate() {
        if dense_get(&regs, i) != v {
            return Err(format!("TESTFAILED Register error at {i}"));
        }
    }
    let mut sparse = new_sparse();
    let mut dense = new_sparse();
    to_dense(&mut dense).map_err(|_| "TESTFAILED dense conversion".to_string())?;
    // Sparse and dense agree while the sparse form lasts; then the dense estimate
    // stays within a generous multiple of the standard error 1.04/sqrt(m).
    let n = 100_000u64;
    let sparse_until = 2_000;
    let mut buf = [0u8; 8];
    for i in 1..=n {
        buf.copy_from_slice(&rnd().to_le_bytes());
        if i <= sparse_until {
            let _ = add(&mut sparse, &buf, usize::MAX);
        }
        let _ = add(&mut dense, &buf, 0);
        if !(i.is_power_of_two() || i == n) {
            continue;
        }
        let est = count(&dense).unwrap_or(0);
        if i <= sparse_until && count(&sparse) != Ok(est) {
            return Err(format!("TESTFAILED sparse/dense mismatch at {i}"));
        }
        let err = (est as f64 - i as f64).abs() / i as f64;
        if i >= 256 && err > 5.0 * 1.04 / (REGISTERS as f64).sqrt() {
            return Err(format!("TESTFAILED too big error. card:{i} est:{est}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn empty_sparse_layout() {
        let h = new_sparse();
        assert_eq!(h.len(), 18);
        assert_eq!(&h[16..], &[0x7f, 0xff]);
        assert!(is_hll(&h));
        assert_eq!(count(&h), Ok(0));
        assert_eq!(decode(&h), "Z:16384");
    }

    #[test]
    fn patterns_match_redis() {
        // Register and run length Redis 7.0 gives these elements (PFDEBUG DECODE).
        assert_eq!(pattern(b"a"), (12711, 2));
        assert_eq!(pattern(b"hello-world-12345"), (14578, 1));
        let mut h = new_sparse();
        add(&mut h, b"a", 3000).unwrap();
        assert_eq!(decode(&h), "Z:12711 v:2,1 Z:3672");
    }

    #[test]
    fn self_test_passes() {
        assert_eq!(self_test(), Ok(()));
    }

    #[test]
    fn sparse_promotes_on_size() {
        let mut h = new_sparse();
        for i in 0..5000u32 {
            let _ = add(&mut h, &i.to_le_bytes(), 3000);
        }
        assert!(!is_sparse(&h));
        assert_eq!(h.len(), DENSE_SIZE);
    }

    #[test]
    fn corruption_is_detected() {
        let mut h = new_sparse();
        let _ = add(&mut h, b"a", 3000);
        h.extend_from_slice(b"hello");
        assert_eq!(count(&h), Err(Corrupt));
        let mut max = vec![0u8; REGISTERS];
        assert_eq!(merge_into(&mut max, &h), Err(Corrupt));
        assert_eq!(to_dense(&mut h), Err(Corrupt));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Sparse and dense encodings of the same elements hold the same registers and
        /// give the same estimate; the estimate is within 5% of the true count.
        #[test]
        fn sparse_dense_equivalence(n in 1usize..4_000, salt in any::<u64>()) {
            let mut sparse = new_sparse();
            let mut dense = new_sparse();
            to_dense(&mut dense).unwrap();
            for i in 0..n as u64 {
                let e = (i ^ salt.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes();
                add(&mut sparse, &e, usize::MAX).unwrap();
                add(&mut dense, &e, 0).unwrap();
            }
            prop_assert!(is_sparse(&sparse));
            let mut converted = sparse.clone();
            to_dense(&mut converted).unwrap();
            prop_assert_eq!(&converted[HDR..], &dense[HDR..]);
            let (a, b) = (count(&sparse).unwrap(), count(&dense).unwrap());
            prop_assert_eq!(a, b);
            let err = (a as f64 - n as f64).abs() / n as f64;
            prop_assert!(err < 0.05, "n={} est={}", n, a);
        }

        #[test]
        fn estimate_error_large(n in 20_000usize..100_000, salt in any::<u64>()) {
            let mut h = new_sparse();
            for i in 0..n as u64 {
                let e = format!("{salt}:{i}");
                add(&mut h, e.as_bytes(), 3000).unwrap();
            }
            let est = count(&h).unwrap();
            let err = (est as f64 - n as f64).abs() / n as f64;
            prop_assert!(err < 0.05, "n={} est={}", n, est);
        }
    }
}
