//! Bitmap and bitfield commands (Redis's bitops.c): SETBIT, GETBIT, BITCOUNT, BITPOS,
//! BITOP, BITFIELD and BITFIELD_RO. They work on string values with Redis's layout —
//! bit 0 is the most significant bit of byte 0 — so GET returns the same bytes a
//! Redis server would hold.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use super::table::K1;
use super::table::{flags::*, CommandSpec, Cross, KeySpec, Kind};
use super::{
    notify, parse_i64, read_str, ExecCtx, GlobalCtx, WrongType, NOT_INT, SYNTAX_ERR, WRONGTYPE,
};
use crate::protocol::reply::ReplyWriter;
use crate::shard::multi::MultiShardOp;
use crate::shard::ShardData;
use crate::storage::{StrValue, Value, NO_EXPIRE};

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// BITOP's destination and source keys (argument 1 is the operation).
const K_BITOP: KeySpec = KeySpec::Range {
    first: 2,
    last: -1,
    step: 1,
};

const ACL_WRITE: &[&str] = &["@write", "@bitmap", "@slow"];
const ACL_READ: &[&str] = &["@read", "@bitmap", "@slow"];
const ACL_READ_FAST: &[&str] = &["@read", "@bitmap", "@fast"];

macro_rules! bcmd {
    ($name:expr, $arity:expr, $flags:expr, $keys:expr, $kind:expr, $since:expr, $summary:expr, $acl:expr) => {
        CommandSpec {
            name: $name,
            arity: $arity,
            flags: $flags,
            keys: $keys,
            kind: $kind,
            group: "bitmap",
            since: $since,
            summary: $summary,
            acl: $acl,
        }
    };
}

const fn keyed(f: super::KeyedFn) -> Kind {
    Kind::Keyed(f, Cross::Never)
}

/// One row per command, kept on one line each so the table reads as data.
#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    bcmd!("setbit", 4, WRITE | DENYOOM, K1, keyed(setbit), "2.2.0", "Sets or clears the bit at offset in the string value stored at key", ACL_WRITE),
    bcmd!("getbit", 3, READONLY | FAST, K1, keyed(getbit), "2.2.0", "Returns the bit value at offset in the string value stored at key", ACL_READ_FAST),
    bcmd!("bitcount", -2, READONLY, K1, keyed(bitcount), "2.6.0", "Count set bits in a string", ACL_READ),
    bcmd!("bitpos", -3, READONLY, K1, keyed(bitpos), "2.8.7", "Find first bit set or clear in a string", ACL_READ),
    bcmd!("bitop", -4, WRITE | DENYOOM, K_BITOP, Kind::Keyed(bitop, Cross::Coordinator(bitop_across)), "2.6.0", "Perform bitwise operations between strings", ACL_WRITE),
    bcmd!("bitfield", -2, WRITE | DENYOOM, K1, keyed(bitfield), "3.2.0", "Perform arbitrary bitfield integer operations on strings", ACL_WRITE),
    bcmd!("bitfield_ro", -2, READONLY | FAST, K1, keyed(bitfield_ro), "6.0.0", "Perform arbitrary bitfield integer operations on strings. Read-only variant of BITFIELD", ACL_READ_FAST),
];

const BAD_OFFSET: &str = "ERR bit offset is not an integer or out of range";
const BAD_BIT: &str = "ERR bit is not an integer or out of range";
const BAD_FIELD_TYPE: &str =
    "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";
const BAD_OVERFLOW: &str = "ERR Invalid OVERFLOW type specified";
const RO_ONLY_GET: &str = "ERR BITFIELD_RO only supports the GET subcommand";
const BITPOS_BIT: &str = "ERR The bit argument must be 1 or 0.";
const NOT_ONE_KEY: &str = "ERR BITOP NOT must be called with a single source key.";

fn max_bulk(ctx: &ExecCtx) -> u64 {
    ctx.data.config.proto_max_bulk_len()
}

// ---------------------------------------------------------------------------
// Bit-level helpers, free of any keyspace concern (property-tested below).
// ---------------------------------------------------------------------------

/// The bit at `offset`; bits past the end read as 0.
fn get_bit(buf: &[u8], offset: u64) -> bool {
    let byte = usize::try_from(offset >> 3).ok().and_then(|i| buf.get(i));
    byte.is_some_and(|b| b & (0x80 >> (offset & 7)) != 0)
}

/// Sets the bit at `offset`, which the caller has made sure is inside `buf`.
fn set_bit(buf: &mut [u8], offset: u64, on: bool) {
    let mask = 0x80u8 >> (offset & 7);
    if let Some(b) = usize::try_from(offset >> 3)
        .ok()
        .and_then(|i| buf.get_mut(i))
    {
        if on {
            *b |= mask;
        } else {
            *b &= !mask;
        }
    }
}

/// A mask of the low `bits` bits (1..=64).
fn low_mask(bits: u32) -> u64 {
    u64::MAX >> (64 - bits)
}

/// The 9 bytes from `first` on as one big-endian number (missing bytes are 0): any
/// field of up to 64 bits starting in byte `first` lies inside it.
fn window(buf: &[u8], first: usize) -> u128 {
    (0..9).fold(0u128, |w, i| {
        let b = buf.get(first.saturating_add(i)).copied().unwrap_or(0);
        (w << 8) | u128::from(b)
    })
}

/// Where a field sits in its window: the first byte and the shift of its low bit.
fn field_place(offset: u64, bits: u32) -> (usize, u32) {
    let first = usize::try_from(offset >> 3).unwrap_or(usize::MAX);
    (first, 72 - (offset & 7) as u32 - bits)
}

/// Reads `bits` (1..=64) bits at bit `offset`, most significant first, as unsigned.
fn read_field(buf: &[u8], offset: u64, bits: u32) -> u64 {
    let (first, shift) = field_place(offset, bits);
    (window(buf, first) >> shift) as u64 & low_mask(bits)
}

/// Writes the low `bits` bits of `value` at bit `offset`; bytes past the end of `buf`
/// are not written (the caller grows `buf` to cover the field first).
fn write_field(buf: &mut [u8], offset: u64, bits: u32, value: u64) {
    let (first, shift) = field_place(offset, bits);
    let mask = u128::from(low_mask(bits)) << shift;
    let w = (window(buf, first) & !mask) | (u128::from(value & low_mask(bits)) << shift);
    for i in 0..9 {
        if let Some(b) = buf.get_mut(first.saturating_add(i)) {
            *b = (w >> (8 * (8 - i))) as u8;
        }
    }
}

/// Sign-extends the low `bits` bits of `v`.
fn sign_extend(v: u64, bits: u32) -> i64 {
    let unused = 64 - bits;
    ((v << unused) as i64) >> unused
}

/// Counts the set bits of a byte slice, eight bytes at a time.
fn popcount(bytes: &[u8]) -> u64 {
    let mut chunks = bytes.chunks_exact(8);
    let mut n: u64 = 0;
    for c in chunks.by_ref() {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        n += u64::from(u64::from_ne_bytes(w).count_ones());
    }
    n + chunks
        .remainder()
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum::<u64>()
}

/// Bits of a byte that come before bit `i & 7` (the high ones).
fn high_bits_before(i: u64) -> u8 {
    !(0xFFu8 >> (i & 7))
}

/// Bits of a byte that come after bit `i & 7` (the low ones).
fn low_bits_after(i: u64) -> u8 {
    0xFFu8.checked_shr((i & 7) as u32 + 1).unwrap_or(0)
}

/// The bytes holding bits `sbit..=ebit`, if they are inside `buf`.
fn span(buf: &[u8], sbit: u64, ebit: u64) -> Option<&[u8]> {
    let sb = usize::try_from(sbit >> 3).ok()?;
    let eb = usize::try_from(ebit >> 3).ok()?;
    buf.get(sb..=eb)
}

/// Set bits among bits `sbit..=ebit` (inclusive, inside `buf`).
fn count_bits(buf: &[u8], sbit: u64, ebit: u64) -> u64 {
    let Some(bytes) = span(buf, sbit, ebit) else {
        return 0;
    };
    let (Some(&head), Some(&tail)) = (bytes.first(), bytes.last()) else {
        return 0;
    };
    let outside =
        (head & high_bits_before(sbit)).count_ones() + (tail & low_bits_after(ebit)).count_ones();
    popcount(bytes) - u64::from(outside)
}

/// Index of the first byte of `bytes` that is not `skip`, comparing eight at a time.
fn first_byte_not(bytes: &[u8], skip: u8) -> Option<usize> {
    let word = [skip; 8];
    let mut done = 0;
    for c in bytes.chunks_exact(8) {
        if c != word {
            break;
        }
        done += 8;
    }
    bytes
        .get(done..)?
        .iter()
        .position(|&b| b != skip)
        .map(|p| done + p)
}

/// Position of the first bit equal to `bit` among bits `sbit..=ebit` of `buf`.
fn first_bit(buf: &[u8], sbit: u64, ebit: u64, bit: bool) -> Option<u64> {
    let bytes = span(buf, sbit, ebit)?;
    let last = bytes.len().checked_sub(1)?;
    // Turn the search into one for a set bit, with bits outside the range cleared.
    let norm = |i: usize, b: u8| -> u8 {
        let mut v = if bit { b } else { !b };
        if i == 0 {
            v &= !high_bits_before(sbit);
        }
        if i == last {
            v &= !low_bits_after(ebit);
        }
        v
    };
    let base = sbit & !7;
    let at = |i: usize, v: u8| base + 8 * i as u64 + u64::from(v.leading_zeros());
    let v = norm(0, bytes[0]);
    if v != 0 {
        return Some(at(0, v));
    }
    if last == 0 {
        return None;
    }
    let skip = if bit { 0x00 } else { 0xFF };
    if let Some(p) = first_byte_not(&bytes[1..last], skip) {
        let i = p + 1;
        return Some(at(i, norm(i, bytes[i])));
    }
    let v = norm(last, bytes[last]);
    (v != 0).then(|| at(last, v))
}

/// Redis's range rules for BITCOUNT/BITPOS over `total` units (bytes or bits):
/// negative indexes count from the end, then both are clamped into the string.
/// None when the range is empty.
fn clamp_units(start: i64, end: i64, total: i64) -> Option<(i64, i64)> {
    let s = if start < 0 {
        (total + start).max(0)
    } else {
        start
    };
    let mut e = if end < 0 { (total + end).max(0) } else { end };
    if e >= total {
        e = total - 1;
    }
    (s <= e).then_some((s, e))
}

/// The inclusive bit range a BITCOUNT/BITPOS range selects in a string of `len` bytes.
fn bit_range(start: i64, end: i64, len: usize, in_bits: bool) -> Option<(u64, u64)> {
    let len = len as i64;
    if in_bits {
        let (s, e) = clamp_units(start, end, len.saturating_mul(8))?;
        Some((s as u64, e as u64))
    } else {
        let (s, e) = clamp_units(start, end, len)?;
        Some((s as u64 * 8, e as u64 * 8 + 7))
    }
}

// ---------------------------------------------------------------------------
// Argument parsing shared by the commands.
// ---------------------------------------------------------------------------

/// Redis's getBitOffsetFromArgument: a non-negative integer whose byte lies below
/// proto-max-bulk-len; with `field_bits`, `#N` means the N-th field of that width.
fn parse_offset(arg: &[u8], field_bits: Option<u32>, max_bulk: u64) -> Option<u64> {
    let (digits, scale) = match (arg.first(), field_bits) {
        (Some(b'#'), Some(bits)) => (&arg[1..], i64::from(bits)),
        _ => (arg, 1),
    };
    let n = parse_i64(digits)?.checked_mul(scale)?;
    let n = u64::try_from(n).ok()?;
    ((n >> 3) < max_bulk).then_some(n)
}

/// Parses "0"/"1" as the bit of SETBIT or BITPOS.
fn parse_bit(arg: &[u8]) -> Option<bool> {
    match parse_i64(arg)? {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

/// Parses BYTE | BIT (case-insensitive): true for BIT.
fn parse_unit(arg: &[u8]) -> Option<bool> {
    if arg.eq_ignore_ascii_case(b"bit") {
        Some(true)
    } else if arg.eq_ignore_ascii_case(b"byte") {
        Some(false)
    } else {
        None
    }
}

// ---------------------------------------------------------------------------
// SETBIT / GETBIT / BITCOUNT / BITPOS
// ---------------------------------------------------------------------------

/// Runs `f` on the bytes of the string at `key`, grown with zeros to at least `len`
/// bytes (created if missing, as Redis's lookupStringForBitCommand does); replies
/// WRONGTYPE for another type. An existing key keeps its TTL. Emits "setbit" after
/// `f` ran.
fn with_grown_string(
    ctx: &mut ExecCtx,
    key: &[u8],
    len: usize,
    f: impl FnOnce(&mut [u8], &mut ReplyWriter) -> bool,
) {
    let now = ctx.now;
    let lru = crate::util::lru_clock();
    let dbi = ctx.db;
    let db = &mut ctx.data.dbs[dbi];
    // A key created or grown changed whatever `f` wrote; otherwise `f` says.
    let changed = match db.get(key, now) {
        Some(e) => {
            e.set_lru(lru);
            let Value::Str(s) = e.value_mut() else {
                return ctx.out.error(WRONGTYPE);
            };
            let raw = s.make_raw();
            let grew = raw.len() < len;
            if grew {
                raw.resize(len, 0);
            }
            f(raw, &mut ctx.out) | grew
        }
        None => {
            let mut raw = vec![0u8; len];
            f(&mut raw, &mut ctx.out);
            db.insert(key, Value::Str(StrValue::raw(raw)), NO_EXPIRE, lru);
            true
        }
    };
    // As Redis 7.0: writing the bits a key already had is no write (no event, no
    // WATCH or tracking signal).
    if changed {
        crate::pubsub::notify(notify::STRING, "setbit", key, dbi);
    } else {
        ctx.nothing_changed();
    }
}

/// The byte length needed to hold bit `offset` (offset < proto-max-bulk-len * 8).
fn bytes_for_bit(offset: u64) -> usize {
    usize::try_from(offset >> 3).map_or(usize::MAX, |b| b.saturating_add(1))
}

fn setbit(ctx: &mut ExecCtx) {
    let Some(offset) = parse_offset(ctx.args.get(2), None, max_bulk(ctx)) else {
        return ctx.error(BAD_OFFSET);
    };
    let Some(on) = parse_bit(ctx.args.get(3)) else {
        return ctx.error(BAD_BIT);
    };
    let key = ctx.args.get(1);
    with_grown_string(ctx, key, bytes_for_bit(offset), |buf, out| {
        let old = get_bit(buf, offset);
        set_bit(buf, offset, on);
        out.integer(i64::from(old));
        old != on
    });
}

fn getbit(ctx: &mut ExecCtx) {
    let Some(offset) = parse_offset(ctx.args.get(2), None, max_bulk(ctx)) else {
        return ctx.error(BAD_OFFSET);
    };
    let key = ctx.args.get(1);
    let (entry, out) = ctx.read_with_out(key);
    match read_str(entry) {
        Err(WrongType) => out.error(WRONGTYPE),
        Ok(None) => out.integer(0),
        Ok(Some(v)) => {
            let mut scratch = [0u8; 24];
            out.integer(i64::from(get_bit(v.bytes(&mut scratch), offset)))
        }
    }
}

/// BITCOUNT key [start end [BYTE|BIT]]. As in Redis 7.0, a missing key counts 0
/// before the arguments are looked at.
fn bitcount(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let (entry, out) = ctx.read_with_out(args.get(1));
    let v = match read_str(entry) {
        Err(WrongType) => return out.error(WRONGTYPE),
        Ok(None) => return out.integer(0),
        Ok(Some(v)) => v,
    };
    let mut scratch = [0u8; 24];
    let buf = v.bytes(&mut scratch);
    let range = match args.len() {
        2 => bit_range(0, -1, buf.len(), false),
        4 | 5 => {
            let (Some(start), Some(end)) = (parse_i64(args.get(2)), parse_i64(args.get(3))) else {
                return out.error(NOT_INT);
            };
            if start < 0 && end < 0 && start > end {
                return out.integer(0);
            }
            let in_bits = if args.len() == 5 {
                match parse_unit(args.get(4)) {
                    Some(b) => b,
                    None => return out.error(SYNTAX_ERR),
                }
            } else {
                false
            };
            bit_range(start, end, buf.len(), in_bits)
        }
        _ => return out.error(SYNTAX_ERR),
    };
    let n = range.map_or(0, |(s, e)| count_bits(buf, s, e));
    out.integer(n as i64)
}

/// BITPOS key bit [start [end [BYTE|BIT]]]. A missing key is an endless run of zeros.
/// Without an explicit end, a search for a clear bit in an all-ones range answers
/// the first bit past the string (the zero padding); with one, it answers -1.
fn bitpos(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let bit = match parse_i64(args.get(2)) {
        None => return ctx.error(NOT_INT),
        Some(0) => false,
        Some(1) => true,
        Some(_) => return ctx.error(BITPOS_BIT),
    };
    let (entry, out) = ctx.read_with_out(args.get(1));
    let v = match read_str(entry) {
        Err(WrongType) => return out.error(WRONGTYPE),
        Ok(None) => return out.integer(if bit { -1 } else { 0 }),
        Ok(Some(v)) => v,
    };
    let mut scratch = [0u8; 24];
    let buf = v.bytes(&mut scratch);
    let len = buf.len() as i64;
    let argc = args.len();
    let (range, end_given) = match argc {
        3 => (bit_range(0, len - 1, buf.len(), false), false),
        4..=6 => {
            let Some(start) = parse_i64(args.get(3)) else {
                return out.error(NOT_INT);
            };
            let in_bits = if argc == 6 {
                match parse_unit(args.get(5)) {
                    Some(b) => b,
                    None => return out.error(SYNTAX_ERR),
                }
            } else {
                false
            };
            let end = if argc >= 5 {
                match parse_i64(args.get(4)) {
                    Some(e) => e,
                    None => return out.error(NOT_INT),
                }
            } else {
                len - 1
            };
            (bit_range(start, end, buf.len(), in_bits), argc >= 5)
        }
        _ => return out.error(SYNTAX_ERR),
    };
    let Some((s, e)) = range else {
        return out.integer(-1);
    };
    let pos = match first_bit(buf, s, e, bit) {
        Some(p) => p as i64,
        None if bit || end_given => -1,
        None => e as i64 + 1,
    };
    out.integer(pos)
}

// ---------------------------------------------------------------------------
// BITOP
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum BitOp {
    And,
    Or,
    Xor,
    Not,
}

/// The operation name and Redis's check that NOT has exactly one source.
fn parse_bitop(name: &[u8], argc: usize) -> Result<BitOp, &'static str> {
    let op = if name.eq_ignore_ascii_case(b"and") {
        BitOp::And
    } else if name.eq_ignore_ascii_case(b"or") {
        BitOp::Or
    } else if name.eq_ignore_ascii_case(b"xor") {
        BitOp::Xor
    } else if name.eq_ignore_ascii_case(b"not") {
        BitOp::Not
    } else {
        return Err(SYNTAX_ERR);
    };
    if op == BitOp::Not && argc != 4 {
        return Err(NOT_ONE_KEY);
    }
    Ok(op)
}

/// Folds one source into the result (which is as long as the longest source and
/// starts zeroed). Shorter sources are zero-padded, missing keys are empty.
fn bitop_apply(op: BitOp, res: &mut [u8], src: &[u8], first: bool) {
    if first {
        for (r, s) in res.iter_mut().zip(src) {
            *r = *s;
        }
        if op == BitOp::Not {
            res.iter_mut().for_each(|r| *r = !*r);
        }
        return;
    }
    let n = src.len().min(res.len());
    let (head, tail) = res.split_at_mut(n);
    let pairs = head.iter_mut().zip(src);
    match op {
        BitOp::And => {
            pairs.for_each(|(r, s)| *r &= s);
            tail.fill(0);
        }
        BitOp::Or => pairs.for_each(|(r, s)| *r |= s),
        BitOp::Xor => pairs.for_each(|(r, s)| *r ^= s),
        BitOp::Not => {}
    }
}

/// Stores BITOP's result: a raw string without TTL, or no key for an empty result.
fn store_bitop_result(data: &mut ShardData, db: usize, dest: &[u8], res: Vec<u8>) -> bool {
    let dbi = db;
    let db = &mut data.dbs[db];
    if res.is_empty() {
        let existed = db.remove(dest).is_some();
        if existed {
            crate::pubsub::notify(notify::GENERIC, "del", dest, dbi);
        }
        existed
    } else {
        db.insert(
            dest,
            Value::Str(StrValue::raw(res)),
            NO_EXPIRE,
            crate::util::lru_clock(),
        );
        crate::pubsub::notify(notify::STRING, "set", dest, dbi);
        true
    }
}

/// BITOP with every key on this shard: check and measure the sources, then fold
/// them into the result without copying them.
fn bitop(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let op = match parse_bitop(args.get(1), args.len()) {
        Ok(op) => op,
        Err(e) => return ctx.error(e),
    };
    let mut maxlen = 0;
    for i in 3..args.len() {
        match read_str(ctx.lookup_read(args.get(i))) {
            Err(WrongType) => return ctx.error(WRONGTYPE),
            Ok(v) => maxlen = maxlen.max(v.map_or(0, |v| v.len())),
        }
    }
    let mut res = vec![0u8; maxlen];
    if maxlen > 0 {
        let db = ctx.db();
        for (j, i) in (3..args.len()).enumerate() {
            let mut scratch = [0u8; 24];
            let src = match db.peek(args.get(i)).map(|e| e.value()) {
                Some(Value::Str(v)) => v.bytes(&mut scratch),
                _ => &[],
            };
            bitop_apply(op, &mut res, src, j == 0);
        }
    }
    let dbi = ctx.db;
    let changed = store_bitop_result(ctx.data, dbi, args.get(2), res);
    // The destination is the first key; the sources were only read.
    ctx.only_changed(0, changed);
    ctx.out.integer(maxlen as i64);
}

type SourceRead = Result<Option<Vec<u8>>, ()>;

/// Reads BITOP's sources under the locks, one hop per owning shard: Ok(None) for a
/// missing key, Err(()) for one of another type.
async fn read_sources(
    op: &MultiShardOp,
    cell: &std::rc::Rc<crate::shard::ShardCell>,
    db: usize,
    keys: &[Vec<u8>],
) -> Vec<SourceRead> {
    let mut by_shard: BTreeMap<usize, Vec<(usize, Vec<u8>)>> = BTreeMap::new();
    for (i, k) in keys.iter().enumerate() {
        by_shard
            .entry(cell.shard_of(k))
            .or_default()
            .push((i, k.clone()));
    }
    let mut out: Vec<SourceRead> = vec![Ok(None); keys.len()];
    for (shard, ks) in by_shard {
        let got = op
            .on(cell, shard, move |d| {
                let now = crate::util::now_ms();
                ks.into_iter()
                    .map(|(i, k)| (i, read_source(d, db, &k, now)))
                    .collect::<Vec<_>>()
            })
            .await;
        for (i, r) in got {
            out[i] = r;
        }
    }
    out
}

/// One source on its own shard, counted as a keyspace hit or miss as Redis does.
fn read_source(d: &mut ShardData, db: usize, key: &[u8], now: u64) -> SourceRead {
    match d.dbs[db].get(key, now) {
        None => {
            d.stats.keyspace_misses += 1;
            Ok(None)
        }
        Some(e) => {
            d.stats.keyspace_hits += 1;
            match e.value() {
                Value::Str(v) => Ok(Some(v.to_vec())),
                _ => Err(()),
            }
        }
    }
}

/// BITOP over several shards: lock the destination and sources, read the sources
/// from their shards, compute here, write the destination on its shard.
fn bitop_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let op = match parse_bitop(g.arg(1), g.args.len()) {
            Ok(op) => op,
            Err(e) => return g.error(e),
        };
        let db = g.session.db;
        let cell = g.session.cell.clone();
        let dest = g.args[2].clone();
        let mut lock = MultiShardOp::lock_keys(g.owner(), &cell, db, &g.args[2..]).await;
        let sources = read_sources(&lock, &cell, db, &g.args[3..]).await;
        let result = match sources.into_iter().collect::<Result<Vec<_>, _>>() {
            Err(()) => Err(WRONGTYPE),
            Ok(values) => {
                let srcs: Vec<&[u8]> = values.iter().map(|v| v.as_deref().unwrap_or(&[])).collect();
                let maxlen = srcs.iter().map(|s| s.len()).max().unwrap_or(0);
                let mut res = vec![0u8; maxlen];
                for (j, s) in srcs.iter().enumerate() {
                    bitop_apply(op, &mut res, s, j == 0);
                }
                let shard = cell.shard_of(&dest);
                let k = dest.clone();
                let changed = lock
                    .on(&cell, shard, move |d| store_bitop_result(d, db, &k, res))
                    .await;
                // The sources were only read.
                let written: &[(usize, &[u8])] = &[(db, &dest)];
                lock.written_only(if changed { written } else { &[] });
                Ok(maxlen)
            }
        };
        if result.is_err() {
            lock.set_read_only();
        }
        g.release(lock).await;
        match result {
            Ok(n) => g.w().integer(n as i64),
            Err(e) => g.error(e),
        }
    })
}

// ---------------------------------------------------------------------------
// BITFIELD / BITFIELD_RO
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FieldType {
    signed: bool,
    /// 1..=64 signed, 1..=63 unsigned.
    bits: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FieldOp {
    Get,
    Set(i64),
    Incr(i64),
}

#[derive(Clone, Copy, Debug)]
struct Field {
    op: FieldOp,
    ty: FieldType,
    offset: u64,
    overflow: Overflow,
}

/// `i1`..`i64` or `u1`..`u63` (the letter is case-sensitive in Redis).
fn parse_field_type(arg: &[u8]) -> Option<FieldType> {
    let (&kind, width) = arg.split_first()?;
    let signed = match kind {
        b'i' => true,
        b'u' => false,
        _ => return None,
    };
    let bits = parse_i64(width)?;
    let max = if signed { 64 } else { 63 };
    (1..=max).contains(&bits).then_some(FieldType {
        signed,
        bits: bits as u32,
    })
}

fn parse_overflow(arg: &[u8]) -> Option<Overflow> {
    if arg.eq_ignore_ascii_case(b"wrap") {
        Some(Overflow::Wrap)
    } else if arg.eq_ignore_ascii_case(b"sat") {
        Some(Overflow::Sat)
    } else if arg.eq_ignore_ascii_case(b"fail") {
        Some(Overflow::Fail)
    } else {
        None
    }
}

/// Parses BITFIELD's subcommands; OVERFLOW applies to the operations after it.
fn parse_fields(args: super::Args, max_bulk: u64) -> Result<Vec<Field>, &'static str> {
    let mut fields = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < args.len() {
        let rest = args.len() - j - 1;
        let sub = args.get(j);
        let is = |w: &str| sub.eq_ignore_ascii_case(w.as_bytes());
        let get = is("get") && rest >= 2;
        if !get && !((is("set") || is("incrby")) && rest >= 3) {
            if is("overflow") && rest >= 1 {
                overflow = parse_overflow(args.get(j + 1)).ok_or(BAD_OVERFLOW)?;
                j += 2;
                continue;
            }
            return Err(SYNTAX_ERR);
        }
        let ty = parse_field_type(args.get(j + 1)).ok_or(BAD_FIELD_TYPE)?;
        let offset = parse_offset(args.get(j + 2), Some(ty.bits), max_bulk).ok_or(BAD_OFFSET)?;
        let op = if get {
            FieldOp::Get
        } else {
            let n = parse_i64(args.get(j + 3)).ok_or(NOT_INT)?;
            if is("set") {
                FieldOp::Set(n)
            } else {
                FieldOp::Incr(n)
            }
        };
        fields.push(Field {
            op,
            ty,
            offset,
            overflow,
        });
        j += if get { 3 } else { 4 };
    }
    Ok(fields)
}

/// A field's value as an integer of its type.
fn read_typed(buf: &[u8], offset: u64, ty: FieldType) -> i64 {
    let raw = read_field(buf, offset, ty.bits);
    if ty.signed {
        sign_extend(raw, ty.bits)
    } else {
        raw as i64
    }
}

/// Fits the exact result `v` into the type under the overflow policy, as Redis's
/// check{Signed,Unsigned}BitfieldOverflow: None when FAIL refuses it.
fn fit(v: i128, ty: FieldType, overflow: Overflow) -> Option<i64> {
    let (min, max) = if ty.signed {
        let half = 1i128 << (ty.bits - 1);
        (-half, half - 1)
    } else {
        (0, (1i128 << ty.bits) - 1)
    };
    if (min..=max).contains(&v) {
        return Some(v as i64);
    }
    match overflow {
        Overflow::Fail => None,
        Overflow::Sat => Some(if v > max { max as i64 } else { min as i64 }),
        Overflow::Wrap => {
            // Two's complement truncation to the field width.
            let low = (v as u64) & low_mask(ty.bits);
            Some(if ty.signed {
                sign_extend(low, ty.bits)
            } else {
                low as i64
            })
        }
    }
}

/// Runs one SET/INCRBY on `buf` and replies with the old value (SET), the new one
/// (INCRBY) or nil when OVERFLOW FAIL refused it. True if the field's bits changed.
fn run_write(buf: &mut [u8], f: &Field, out: &mut ReplyWriter) -> bool {
    let old = read_typed(buf, f.offset, f.ty);
    let wanted: i128 = match f.op {
        // An unsigned SET takes the argument's 64-bit pattern, so negative values
        // overflow above the maximum (Redis casts to uint64_t).
        FieldOp::Set(n) if !f.ty.signed => i128::from(n as u64),
        FieldOp::Set(n) => i128::from(n),
        FieldOp::Incr(n) => i128::from(old) + i128::from(n),
        FieldOp::Get => i128::from(old),
    };
    match fit(wanted, f.ty, f.overflow) {
        None => {
            out.null();
            false
        }
        Some(new) => {
            write_field(buf, f.offset, f.ty.bits, new as u64);
            out.integer(if matches!(f.op, FieldOp::Set(_)) {
                old
            } else {
                new
            });
            new != old
        }
    }
}

fn bitfield(ctx: &mut ExecCtx) {
    bitfield_generic(ctx, false)
}

fn bitfield_ro(ctx: &mut ExecCtx) {
    bitfield_generic(ctx, true)
}

/// BITFIELD and BITFIELD_RO: all subcommands are parsed (and rejected) before the key
/// is touched; only GETs read the key without creating it.
fn bitfield_generic(ctx: &mut ExecCtx, read_only: bool) {
    let fields = match parse_fields(ctx.args, max_bulk(ctx)) {
        Ok(f) => f,
        Err(e) => return ctx.error(e),
    };
    let needed = fields
        .iter()
        .filter(|f| f.op != FieldOp::Get)
        .map(|f| bytes_for_bit(f.offset.saturating_add(u64::from(f.ty.bits) - 1)))
        .max();
    let key = ctx.args.get(1);
    match needed {
        None => bitfield_read(ctx, key, &fields),
        Some(_) if read_only => ctx.error(RO_ONLY_GET),
        Some(len) => with_grown_string(ctx, key, len, |buf, out| {
            out.array_len(fields.len());
            let mut changed = false;
            for f in &fields {
                match f.op {
                    FieldOp::Get => out.integer(read_typed(buf, f.offset, f.ty)),
                    _ => changed |= run_write(buf, f, out),
                }
            }
            changed
        }),
    }
}

/// Only GETs: a missing key reads as zeros and is not created.
fn bitfield_read(ctx: &mut ExecCtx, key: &[u8], fields: &[Field]) {
    let (entry, out) = ctx.read_with_out(key);
    let mut scratch = [0u8; 24];
    let buf: &[u8] = match read_str(entry) {
        Err(WrongType) => return out.error(WRONGTYPE),
        Ok(None) => &[],
        Ok(Some(v)) => v.bytes(&mut scratch),
    };
    out.array_len(fields.len());
    for f in fields {
        out.integer(read_typed(buf, f.offset, f.ty));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bit-by-bit model of a field read.
    fn model_read(buf: &[u8], offset: u64, bits: u32) -> u64 {
        (0..bits as u64).fold(0u64, |v, i| (v << 1) | u64::from(get_bit(buf, offset + i)))
    }

    fn model_count(buf: &[u8], s: u64, e: u64) -> u64 {
        (s..=e).filter(|&i| get_bit(buf, i)).count() as u64
    }

    fn model_first(buf: &[u8], s: u64, e: u64, bit: bool) -> Option<u64> {
        (s..=e).find(|&i| get_bit(buf, i) == bit)
    }

    #[test]
    fn layout_is_msb_first() {
        let mut b = vec![0u8; 2];
        set_bit(&mut b, 1, true);
        set_bit(&mut b, 15, true);
        assert_eq!(b, vec![0x40, 0x01]);
        write_field(&mut b, 0, 8, 0x41);
        assert_eq!(b[0], b'A');
        assert_eq!(read_field(b"\xff\xf0", 4, 8), 0xff);
    }

    #[test]
    fn field_types() {
        assert_eq!(
            parse_field_type(b"i64"),
            Some(FieldType {
                signed: true,
                bits: 64
            })
        );
        assert_eq!(
            parse_field_type(b"u63"),
            Some(FieldType {
                signed: false,
                bits: 63
            })
        );
        assert_eq!(parse_field_type(b"u64"), None);
        assert_eq!(parse_field_type(b"i0"), None);
        assert_eq!(parse_field_type(b"I8"), None);
        assert_eq!(parse_field_type(b"i08"), None);
        assert_eq!(parse_field_type(b""), None);
    }

    #[test]
    fn offsets() {
        let max = 512 * 1024 * 1024;
        assert_eq!(parse_offset(b"#3", Some(8), max), Some(24));
        assert_eq!(parse_offset(b"#3", None, max), None);
        assert_eq!(parse_offset(b"-1", None, max), None);
        assert_eq!(parse_offset(b"4294967295", None, max), Some(4294967295));
        assert_eq!(parse_offset(b"4294967296", None, max), None);
        assert_eq!(parse_offset(b"#9223372036854775807", Some(2), max), None);
    }

    #[test]
    fn overflow_policies() {
        let u8t = FieldType {
            signed: false,
            bits: 8,
        };
        let i8t = FieldType {
            signed: true,
            bits: 8,
        };
        assert_eq!(fit(357, u8t, Overflow::Wrap), Some(101));
        assert_eq!(fit(357, u8t, Overflow::Sat), Some(255));
        assert_eq!(fit(-155, u8t, Overflow::Sat), Some(0));
        assert_eq!(fit(357, i8t, Overflow::Wrap), Some(101));
        assert_eq!(fit(-300, i8t, Overflow::Sat), Some(-128));
        assert_eq!(fit(128, i8t, Overflow::Fail), None);
        let i64t = FieldType {
            signed: true,
            bits: 64,
        };
        assert_eq!(
            fit(i128::from(i64::MAX) + 1, i64t, Overflow::Wrap),
            Some(i64::MIN)
        );
    }

    #[test]
    fn clamp_rules() {
        assert_eq!(bit_range(0, -1, 6, false), Some((0, 47)));
        assert_eq!(bit_range(1, -2, 6, false), Some((8, 39)));
        assert_eq!(bit_range(-2, 1, 6, false), None);
        assert_eq!(bit_range(10, -34, 6, true), Some((10, 14)));
        assert_eq!(bit_range(0, -1, 0, false), None);
    }

    proptest! {
        #[test]
        fn fields_match_bitwise_model(
            mut buf in proptest::collection::vec(any::<u8>(), 0..24),
            offset in 0u64..200,
            bits in 1u32..=64,
            value in any::<u64>(),
        ) {
            prop_assert_eq!(read_field(&buf, offset, bits), model_read(&buf, offset, bits));
            let before = buf.clone();
            write_field(&mut buf, offset, bits, value);
            // Bits inside the buffer and the field take the value, others are untouched.
            for i in 0..buf.len() as u64 * 8 {
                let expect = if i >= offset && i < offset + u64::from(bits) {
                    (value >> (u64::from(bits) - 1 - (i - offset))) & 1 == 1
                } else {
                    get_bit(&before, i)
                };
                prop_assert_eq!(get_bit(&buf, i), expect);
            }
        }

        #[test]
        fn count_and_search_match_model(
            buf in proptest::collection::vec(prop_oneof![Just(0u8), Just(0xFF), any::<u8>()], 1..40),
            a in 0u64..320,
            b in 0u64..320,
            bit in any::<bool>(),
        ) {
            let total = buf.len() as u64 * 8;
            let (s, e) = (a.min(b) % total, a.max(b) % total);
            let (s, e) = (s.min(e), s.max(e));
            prop_assert_eq!(count_bits(&buf, s, e), model_count(&buf, s, e));
            prop_assert_eq!(first_bit(&buf, s, e, bit), model_first(&buf, s, e, bit));
        }

        #[test]
        fn bitop_matches_model(
            a in proptest::collection::vec(any::<u8>(), 0..20),
            b in proptest::collection::vec(any::<u8>(), 0..20),
        ) {
            let n = a.len().max(b.len());
            let at = |v: &Vec<u8>, i: usize| v.get(i).copied().unwrap_or(0);
            for (op, f) in [
                (BitOp::And, (|x, y| x & y) as fn(u8, u8) -> u8),
                (BitOp::Or, |x, y| x | y),
                (BitOp::Xor, |x, y| x ^ y),
            ] {
                let mut res = vec![0u8; n];
                bitop_apply(op, &mut res, &a, true);
                bitop_apply(op, &mut res, &b, false);
                let model: Vec<u8> = (0..n).map(|i| f(at(&a, i), at(&b, i))).collect();
                prop_assert_eq!(res, model);
            }
        }
    }
}
