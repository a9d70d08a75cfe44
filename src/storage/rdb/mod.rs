//! Redis 7.0 `DUMP` / `RESTORE` payload format (RDB version 10).
//!
//! A payload is `type byte | serialized value | RDB version (u16 LE) | CRC64 (u64 LE)`,
//! where the CRC64 (Redis's "Jones" polynomial, reflected) covers every byte before it.
//!
//! Writing follows what Redis 7.0's `rdb.c` produces for `DUMP`:
//! * strings: 32-bit integer encodings for canonical integers, LZF for strings longer
//!   than 20 bytes when it saves at least 4 bytes, raw otherwise;
//! * lists: `RDB_TYPE_LIST_QUICKLIST_2` with listpack nodes of at most 8 KiB;
//! * sets: `RDB_TYPE_SET_INTSET` when every member is an integer (at most 512 members),
//!   else `RDB_TYPE_SET`;
//! * hashes: `RDB_TYPE_HASH_LISTPACK` for up to 512 pairs with fields and values of at
//!   most 64 bytes, else `RDB_TYPE_HASH`;
//! * sorted sets: `RDB_TYPE_ZSET_LISTPACK` (sorted by score, then member) for up to 128
//!   members of at most 64 bytes, else `RDB_TYPE_ZSET_2`;
//! * streams: `RDB_TYPE_STREAM_LISTPACKS_2`, node by node as the stream holds them
//!   (tombstones included), each node re-encoded as the listpack Redis would hold.
//!
//! LZF compression makes the same choices as Redis's liblzf, so payloads are
//! byte-identical to Redis's.
//!
//! Reading accepts every encoding Redis 7.0 can load for strings, lists, sets, hashes,
//! sorted sets and streams (types 0-5 and 10-19), plus Redis 7.2's streams (type 21),
//! validates everything, and never
//! allocates more than a small multiple of the payload size. (Type 21 only arrives in
//! an RDB version 11 footer, which is refused as Redis 7.0 refuses it.) Like Redis,
//! `restore` rejects empty collections (streams may be empty), duplicate set members /
//! hash fields / zset members and NaN scores as `Corrupt`; unlike Redis it also rejects
//! trailing bytes after the value and streams whose counters contradict their entries.
//!
//! `dump` assumes the value came from a keyspace: collections are non-empty, members and
//! fields are distinct and scores are not NaN. Otherwise it still emits a well-formed
//! payload, which `restore` (like Redis's `RESTORE`) then refuses.

use std::collections::HashSet;
use std::fmt;

use super::stream::StreamValue;

/// The RDB version written in (and the highest accepted from) payload footers.
pub const RDB_VERSION: u16 = 10;

const TYPE_STRING: u8 = 0;
const TYPE_LIST: u8 = 1;
const TYPE_SET: u8 = 2;
const TYPE_ZSET: u8 = 3;
const TYPE_HASH: u8 = 4;
const TYPE_ZSET_2: u8 = 5;
const TYPE_LIST_ZIPLIST: u8 = 10;
const TYPE_SET_INTSET: u8 = 11;
const TYPE_ZSET_ZIPLIST: u8 = 12;
const TYPE_HASH_ZIPLIST: u8 = 13;
const TYPE_LIST_QUICKLIST: u8 = 14;
const TYPE_HASH_LISTPACK: u8 = 16;
const TYPE_ZSET_LISTPACK: u8 = 17;
const TYPE_LIST_QUICKLIST_2: u8 = 18;
/// Redis <= 6.2 streams: no first/max-deleted IDs, entries-added or entries-read.
const TYPE_STREAM_LISTPACKS: u8 = 15;
/// Redis 7.0 streams (what DUMP writes).
const TYPE_STREAM_LISTPACKS_2: u8 = 19;
/// Redis 7.2 streams: consumers also carry an active-time.
const TYPE_STREAM_LISTPACKS_3: u8 = 21;

const ENC_INT8: u8 = 0;
const ENC_INT16: u8 = 1;
const ENC_INT32: u8 = 2;
const ENC_LZF: u8 = 3;

const QUICKLIST_NODE_PLAIN: usize = 1;
const QUICKLIST_NODE_PACKED: usize = 2;

/// Largest listpack (in bytes) written per quicklist node (`list-max-listpack-size -2`).
const LIST_NODE_MAX_BYTES: usize = 8192;
/// Elements at least this large get their own plain quicklist node.
const LIST_PLAIN_THRESHOLD: usize = 1 << 30;
const SET_MAX_INTSET_ENTRIES: usize = 512;
const HASH_MAX_LISTPACK_ENTRIES: usize = 512;
const HASH_MAX_LISTPACK_VALUE: usize = 64;
const ZSET_MAX_LISTPACK_ENTRIES: usize = 128;
const ZSET_MAX_LISTPACK_VALUE: usize = 64;
/// Footer: 2-byte RDB version + 8-byte CRC64.
const FOOTER_LEN: usize = 10;

/// A value as carried by a DUMP payload.
#[derive(Debug, Clone, PartialEq)]
pub enum DumpValue {
    Str(Vec<u8>),
    List(Vec<Vec<u8>>),
    Set(Vec<Vec<u8>>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    ZSet(Vec<(Vec<u8>, f64)>),
    Stream(Box<StreamValue>),
}

/// Why a payload could not be restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreError {
    /// Footer missing, RDB version too new, or checksum mismatch.
    BadPayload,
    /// The checksum is fine but the value cannot be decoded.
    Corrupt,
}

impl RestoreError {
    /// The exact error reply Redis sends for this failure.
    pub fn message(&self) -> &'static str {
        match self {
            RestoreError::BadPayload => "ERR DUMP payload version or checksum are wrong",
            RestoreError::Corrupt => "ERR Bad data format",
        }
    }
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for RestoreError {}

type Res<T> = Result<T, RestoreError>;

// ---------------------------------------------------------------------------
// Public entry points
// ---------------------------------------------------------------------------

/// Serializes `value` into a complete DUMP payload.
pub fn dump(value: &DumpValue) -> Vec<u8> {
    let mut out = Vec::new();
    match value {
        DumpValue::Str(s) => {
            dump_string(s, &mut out);
            return out;
        }
        DumpValue::List(items) => write_list(&mut out, items),
        DumpValue::Set(members) => write_set(&mut out, members),
        DumpValue::Hash(pairs) => write_hash(&mut out, pairs),
        DumpValue::ZSet(entries) => write_zset(&mut out, entries),
        DumpValue::Stream(s) => {
            dump_stream(s, &mut out);
            return out;
        }
    }
    finish_payload(&mut out, 0);
    out
}

/// Appends a complete DUMP payload for the stream `s` to `out`
/// (`RDB_TYPE_STREAM_LISTPACKS_2`, as Redis 7.0 writes it).
pub fn dump_stream(s: &StreamValue, out: &mut Vec<u8>) {
    let start = out.len();
    out.push(TYPE_STREAM_LISTPACKS_2);
    stream::write(out, s);
    finish_payload(out, start);
}

/// Appends a complete DUMP payload for the string `bytes` to `out`.
pub fn dump_string(bytes: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.reserve(bytes.len() + 16);
    out.push(TYPE_STRING);
    write_string(out, bytes);
    finish_payload(out, start);
}

/// Verifies and decodes a DUMP payload.
pub fn restore(payload: &[u8]) -> Result<DumpValue, RestoreError> {
    let body = verify_footer(payload)?;
    let mut r = Reader::new(body);
    let ty = r.byte()?;
    let value = read_value(ty, &mut r)?;
    if r.remaining() != 0 {
        return Err(RestoreError::Corrupt);
    }
    Ok(value)
}

/// Redis's CRC64 (Jones polynomial, reflected, no final xor), continuing from `crc`.
pub fn crc64(crc: u64, data: &[u8]) -> u64 {
    crc::update(crc, data)
}

fn finish_payload(out: &mut Vec<u8>, start: usize) {
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(0, &out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

fn verify_footer(payload: &[u8]) -> Res<&[u8]> {
    let body_len = payload
        .len()
        .checked_sub(FOOTER_LEN)
        .ok_or(RestoreError::BadPayload)?;
    let (body, footer) = payload.split_at(body_len);
    let (version, crc) = footer.split_at(2);
    let version = u16::from_le_bytes([version[0], version[1]]);
    if version > RDB_VERSION {
        return Err(RestoreError::BadPayload);
    }
    let expected = crc64(0, &payload[..body_len + 2]);
    if crc != expected.to_le_bytes() {
        return Err(RestoreError::BadPayload);
    }
    Ok(body)
}

// ---------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------

/// Parses `s` as Redis's `string2ll` does: optional `-`, no leading zeros, no `+`,
/// no `-0`, no whitespace, must fit in an `i64`.
fn parse_canonical_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut magnitude: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude
            .checked_mul(10)?
            .checked_add(u64::from(d - b'0'))?;
    }
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

fn int_to_bytes(v: i64) -> Vec<u8> {
    v.to_string().into_bytes()
}

/// Parses a score stored as text (listpack/ziplist entries, old zset encoding).
fn parse_score(s: &[u8]) -> Res<f64> {
    let text = std::str::from_utf8(s).map_err(|_| RestoreError::Corrupt)?;
    let score: f64 = text.parse().map_err(|_| RestoreError::Corrupt)?;
    if score.is_nan() {
        return Err(RestoreError::Corrupt);
    }
    Ok(score)
}

fn ensure_unique<'a>(keys: impl Iterator<Item = &'a [u8]>, count: usize) -> Res<()> {
    let mut seen: HashSet<&[u8]> = HashSet::with_capacity(count);
    for key in keys {
        if !seen.insert(key) {
            return Err(RestoreError::Corrupt);
        }
    }
    Ok(())
}

fn ensure_non_empty(count: usize) -> Res<()> {
    if count == 0 {
        Err(RestoreError::Corrupt)
    } else {
        Ok(())
    }
}

/// A decoded listpack/ziplist element.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Elem<'a> {
    Int(i64),
    Bytes(&'a [u8]),
}

impl Elem<'_> {
    fn to_vec(self) -> Vec<u8> {
        match self {
            Elem::Int(v) => int_to_bytes(v),
            Elem::Bytes(b) => b.to_vec(),
        }
    }

    fn to_score(self) -> Res<f64> {
        match self {
            Elem::Int(v) => Ok(v as f64),
            Elem::Bytes(b) => parse_score(b),
        }
    }
}

// ---------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------

fn write_len(out: &mut Vec<u8>, len: usize) {
    write_len64(out, len as u64);
}

fn write_len64(out: &mut Vec<u8>, len: u64) {
    if len < 1 << 6 {
        out.push(len as u8);
    } else if len < 1 << 14 {
        out.push(0x40 | (len >> 8) as u8);
        out.push((len & 0xff) as u8);
    } else if let Ok(len32) = u32::try_from(len) {
        out.push(0x80);
        out.extend_from_slice(&len32.to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// Writes `v` with the RDB integer string encodings if it fits in 32 bits.
fn write_int_encoded(out: &mut Vec<u8>, v: i64) -> bool {
    if let Ok(v8) = i8::try_from(v) {
        out.push(0xC0 | ENC_INT8);
        out.extend_from_slice(&v8.to_le_bytes());
    } else if let Ok(v16) = i16::try_from(v) {
        out.push(0xC0 | ENC_INT16);
        out.extend_from_slice(&v16.to_le_bytes());
    } else if let Ok(v32) = i32::try_from(v) {
        out.push(0xC0 | ENC_INT32);
        out.extend_from_slice(&v32.to_le_bytes());
    } else {
        return false;
    }
    true
}

/// Writes a string as `rdbSaveRawString` does.
fn write_string(out: &mut Vec<u8>, s: &[u8]) {
    if s.len() <= 11 {
        if let Some(v) = parse_canonical_i64(s) {
            if write_int_encoded(out, v) {
                return;
            }
        }
    }
    if s.len() > 20 && write_lzf_string(out, s) {
        return;
    }
    write_len(out, s.len());
    out.extend_from_slice(s);
}

fn write_lzf_string(out: &mut Vec<u8>, s: &[u8]) -> bool {
    let Some(compressed) = lzf::compress(s, s.len() - 4) else {
        return false;
    };
    out.push(0xC0 | ENC_LZF);
    write_len(out, compressed.len());
    write_len(out, s.len());
    out.extend_from_slice(&compressed);
    true
}

enum ListNode<'a> {
    Plain(&'a [u8]),
    Packed(Vec<u8>),
}

fn write_list(out: &mut Vec<u8>, items: &[Vec<u8>]) {
    let nodes = build_list_nodes(items);
    out.push(TYPE_LIST_QUICKLIST_2);
    write_len(out, nodes.len());
    for node in &nodes {
        match node {
            ListNode::Plain(item) => {
                write_len(out, QUICKLIST_NODE_PLAIN);
                write_string(out, item);
            }
            ListNode::Packed(lp) => {
                write_len(out, QUICKLIST_NODE_PACKED);
                write_string(out, lp);
            }
        }
    }
}

fn build_list_nodes(items: &[Vec<u8>]) -> Vec<ListNode<'_>> {
    let mut nodes = Vec::new();
    let mut lp = listpack::Builder::new();
    for item in items {
        if item.len() >= LIST_PLAIN_THRESHOLD {
            flush_list_node(&mut nodes, &mut lp);
            nodes.push(ListNode::Plain(item));
            continue;
        }
        let entry = listpack::Entry::from_bytes(item);
        if !lp.is_empty() && lp.size_with(&entry) > LIST_NODE_MAX_BYTES {
            flush_list_node(&mut nodes, &mut lp);
        }
        lp.push(&entry);
    }
    flush_list_node(&mut nodes, &mut lp);
    nodes
}

fn flush_list_node(nodes: &mut Vec<ListNode<'_>>, lp: &mut listpack::Builder) {
    if !lp.is_empty() {
        let full = std::mem::replace(lp, listpack::Builder::new());
        nodes.push(ListNode::Packed(full.finish()));
    }
}

fn write_set(out: &mut Vec<u8>, members: &[Vec<u8>]) {
    if let Some(blob) = intset::encode(members, SET_MAX_INTSET_ENTRIES) {
        out.push(TYPE_SET_INTSET);
        write_string(out, &blob);
        return;
    }
    out.push(TYPE_SET);
    write_len(out, members.len());
    for member in members {
        write_string(out, member);
    }
}

fn write_hash(out: &mut Vec<u8>, pairs: &[(Vec<u8>, Vec<u8>)]) {
    let small = pairs.len() <= HASH_MAX_LISTPACK_ENTRIES
        && pairs
            .iter()
            .all(|(f, v)| f.len() <= HASH_MAX_LISTPACK_VALUE && v.len() <= HASH_MAX_LISTPACK_VALUE);
    if small {
        let mut lp = listpack::Builder::new();
        for (field, value) in pairs {
            lp.push(&listpack::Entry::from_bytes(field));
            lp.push(&listpack::Entry::from_bytes(value));
        }
        out.push(TYPE_HASH_LISTPACK);
        write_string(out, &lp.finish());
        return;
    }
    out.push(TYPE_HASH);
    write_len(out, pairs.len());
    for (field, value) in pairs {
        write_string(out, field);
        write_string(out, value);
    }
}

fn write_zset(out: &mut Vec<u8>, entries: &[(Vec<u8>, f64)]) {
    let small = entries.len() <= ZSET_MAX_LISTPACK_ENTRIES
        && entries
            .iter()
            .all(|(m, _)| m.len() <= ZSET_MAX_LISTPACK_VALUE);
    if small {
        out.push(TYPE_ZSET_LISTPACK);
        write_string(out, &zset_listpack(entries));
        return;
    }
    out.push(TYPE_ZSET_2);
    write_len(out, entries.len());
    for (member, score) in entries {
        write_string(out, member);
        out.extend_from_slice(&score.to_le_bytes());
    }
}

/// Builds a zset listpack, ordered by score then member as Redis requires.
fn zset_listpack(entries: &[(Vec<u8>, f64)]) -> Vec<u8> {
    let mut sorted: Vec<&(Vec<u8>, f64)> = entries.iter().collect();
    sorted.sort_by(|a, b| {
        a.1.partial_cmp(&b.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.0.cmp(&b.0))
    });
    let mut lp = listpack::Builder::new();
    for (member, score) in sorted {
        lp.push(&listpack::Entry::from_bytes(member));
        lp.push(&score_entry(*score));
    }
    lp.finish()
}

/// Mirrors Redis's `d2string` followed by listpack integer detection.
fn score_entry(score: f64) -> listpack::Entry<'static> {
    const MIN: f64 = -4_503_599_627_370_495.0;
    const MAX: f64 = 4_503_599_627_370_496.0;
    if score == 0.0 && score.is_sign_negative() {
        return listpack::Entry::Owned(b"-0".to_vec());
    }
    if score > MIN && score < MAX && score.trunc() == score {
        return listpack::Entry::Int(score as i64);
    }
    let text = if score.is_nan() {
        "nan".to_string()
    } else if score.is_infinite() {
        if score > 0.0 { "inf" } else { "-inf" }.to_string()
    } else {
        format!("{score:?}")
    };
    listpack::Entry::Owned(text.into_bytes())
}

// ---------------------------------------------------------------------------
// Reader
// ---------------------------------------------------------------------------

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

enum Len {
    Plain(usize),
    Encoded(u8),
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Res<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or(RestoreError::Corrupt)?;
        let slice = self.buf.get(self.pos..end).ok_or(RestoreError::Corrupt)?;
        self.pos = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Res<[u8; N]> {
        let mut arr = [0u8; N];
        arr.copy_from_slice(self.take(N)?);
        Ok(arr)
    }

    fn byte(&mut self) -> Res<u8> {
        Ok(self.array::<1>()?[0])
    }

    fn len_or_enc(&mut self) -> Res<Len> {
        let first = self.byte()?;
        let len: u64 = match first >> 6 {
            0 => u64::from(first & 0x3f),
            1 => (u64::from(first & 0x3f) << 8) | u64::from(self.byte()?),
            3 => return Ok(Len::Encoded(first & 0x3f)),
            _ => match first {
                0x80 => u64::from(u32::from_be_bytes(self.array()?)),
                0x81 => u64::from_be_bytes(self.array()?),
                _ => return Err(RestoreError::Corrupt),
            },
        };
        usize::try_from(len)
            .map(Len::Plain)
            .map_err(|_| RestoreError::Corrupt)
    }

    fn len(&mut self) -> Res<usize> {
        match self.len_or_enc()? {
            Len::Plain(n) => Ok(n),
            Len::Encoded(_) => Err(RestoreError::Corrupt),
        }
    }

    /// A collection count, also bounding a safe preallocation.
    fn count(&mut self) -> Res<(usize, usize)> {
        let n = self.len()?;
        Ok((n, n.min(self.remaining())))
    }

    fn string(&mut self) -> Res<Vec<u8>> {
        match self.len_or_enc()? {
            Len::Plain(n) => Ok(self.take(n)?.to_vec()),
            Len::Encoded(ENC_INT8) => Ok(int_to_bytes(i8::from_le_bytes(self.array()?).into())),
            Len::Encoded(ENC_INT16) => Ok(int_to_bytes(i16::from_le_bytes(self.array()?).into())),
            Len::Encoded(ENC_INT32) => Ok(int_to_bytes(i32::from_le_bytes(self.array()?).into())),
            Len::Encoded(ENC_LZF) => self.lzf_string(),
            Len::Encoded(_) => Err(RestoreError::Corrupt),
        }
    }

    fn lzf_string(&mut self) -> Res<Vec<u8>> {
        let compressed_len = self.len()?;
        let len = self.len()?;
        let data = self.take(compressed_len)?;
        lzf::decompress(data, len).ok_or(RestoreError::Corrupt)
    }

    fn binary_double(&mut self) -> Res<f64> {
        let score = f64::from_le_bytes(self.array()?);
        if score.is_nan() {
            return Err(RestoreError::Corrupt);
        }
        Ok(score)
    }

    /// `rdbLoadDoubleValue`: length byte with 253/254/255 for nan/+inf/-inf.
    fn text_double(&mut self) -> Res<f64> {
        match self.byte()? {
            253 => Err(RestoreError::Corrupt),
            254 => Ok(f64::INFINITY),
            255 => Ok(f64::NEG_INFINITY),
            n => parse_score(self.take(usize::from(n))?),
        }
    }
}

fn read_value(ty: u8, r: &mut Reader<'_>) -> Res<DumpValue> {
    match ty {
        TYPE_STRING => r.string().map(DumpValue::Str),
        TYPE_LIST => read_linked_list(r),
        TYPE_SET => read_set(r),
        TYPE_ZSET => read_zset_generic(r, Reader::text_double),
        TYPE_HASH => read_hash(r),
        TYPE_ZSET_2 => read_zset_generic(r, Reader::binary_double),
        TYPE_LIST_ZIPLIST => read_ziplist_list(r),
        TYPE_SET_INTSET => read_intset(r),
        TYPE_ZSET_ZIPLIST => read_zset_packed(&ziplist::decode(&r.string()?)?),
        TYPE_HASH_ZIPLIST => read_hash_packed(&ziplist::decode(&r.string()?)?),
        TYPE_LIST_QUICKLIST => read_quicklist(r),
        TYPE_HASH_LISTPACK => read_hash_packed(&listpack::decode(&r.string()?)?),
        TYPE_ZSET_LISTPACK => read_zset_packed(&listpack::decode(&r.string()?)?),
        TYPE_LIST_QUICKLIST_2 => read_quicklist_2(r),
        TYPE_STREAM_LISTPACKS | TYPE_STREAM_LISTPACKS_2 | TYPE_STREAM_LISTPACKS_3 => {
            stream::read(r, ty).map(|s| DumpValue::Stream(Box::new(s)))
        }
        _ => Err(RestoreError::Corrupt),
    }
}

fn read_strings(r: &mut Reader<'_>) -> Res<Vec<Vec<u8>>> {
    let (n, cap) = r.count()?;
    ensure_non_empty(n)?;
    let mut items = Vec::with_capacity(cap);
    for _ in 0..n {
        items.push(r.string()?);
    }
    Ok(items)
}

fn read_linked_list(r: &mut Reader<'_>) -> Res<DumpValue> {
    read_strings(r).map(DumpValue::List)
}

fn read_set(r: &mut Reader<'_>) -> Res<DumpValue> {
    let members = read_strings(r)?;
    ensure_unique(members.iter().map(Vec::as_slice), members.len())?;
    Ok(DumpValue::Set(members))
}

fn read_hash(r: &mut Reader<'_>) -> Res<DumpValue> {
    let (n, cap) = r.count()?;
    ensure_non_empty(n)?;
    let mut pairs = Vec::with_capacity(cap);
    for _ in 0..n {
        let field = r.string()?;
        let value = r.string()?;
        pairs.push((field, value));
    }
    ensure_unique(pairs.iter().map(|(f, _)| f.as_slice()), pairs.len())?;
    Ok(DumpValue::Hash(pairs))
}

fn read_zset_generic<'a>(
    r: &mut Reader<'a>,
    read_score: fn(&mut Reader<'a>) -> Res<f64>,
) -> Res<DumpValue> {
    let (n, cap) = r.count()?;
    ensure_non_empty(n)?;
    let mut entries = Vec::with_capacity(cap);
    for _ in 0..n {
        let member = r.string()?;
        let score = read_score(r)?;
        entries.push((member, score));
    }
    ensure_unique(entries.iter().map(|(m, _)| m.as_slice()), entries.len())?;
    Ok(DumpValue::ZSet(entries))
}

fn read_intset(r: &mut Reader<'_>) -> Res<DumpValue> {
    let members = intset::decode(&r.string()?)?;
    ensure_non_empty(members.len())?;
    Ok(DumpValue::Set(members))
}

fn pairs<'e, 'a>(elems: &'e [Elem<'a>]) -> Res<std::slice::ChunksExact<'e, Elem<'a>>> {
    if elems.is_empty() || !elems.len().is_multiple_of(2) {
        return Err(RestoreError::Corrupt);
    }
    Ok(elems.chunks_exact(2))
}

fn read_hash_packed(elems: &[Elem<'_>]) -> Res<DumpValue> {
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = pairs(elems)?
        .map(|p| (p[0].to_vec(), p[1].to_vec()))
        .collect();
    ensure_unique(pairs.iter().map(|(f, _)| f.as_slice()), pairs.len())?;
    Ok(DumpValue::Hash(pairs))
}

fn read_zset_packed(elems: &[Elem<'_>]) -> Res<DumpValue> {
    let mut entries = Vec::with_capacity(elems.len() / 2);
    for p in pairs(elems)? {
        entries.push((p[0].to_vec(), p[1].to_score()?));
    }
    ensure_unique(entries.iter().map(|(m, _)| m.as_slice()), entries.len())?;
    Ok(DumpValue::ZSet(entries))
}

fn read_ziplist_list(r: &mut Reader<'_>) -> Res<DumpValue> {
    let items: Vec<Vec<u8>> = ziplist::decode(&r.string()?)?
        .into_iter()
        .map(Elem::to_vec)
        .collect();
    ensure_non_empty(items.len())?;
    Ok(DumpValue::List(items))
}

/// Type 14: quicklist whose nodes are ziplists.
fn read_quicklist(r: &mut Reader<'_>) -> Res<DumpValue> {
    let (nodes, _) = r.count()?;
    let mut items = Vec::new();
    for _ in 0..nodes {
        let blob = r.string()?;
        items.extend(ziplist::decode(&blob)?.into_iter().map(Elem::to_vec));
    }
    ensure_non_empty(items.len())?;
    Ok(DumpValue::List(items))
}

/// Type 18: quicklist whose nodes are plain elements or listpacks.
fn read_quicklist_2(r: &mut Reader<'_>) -> Res<DumpValue> {
    let (nodes, _) = r.count()?;
    let mut items = Vec::new();
    for _ in 0..nodes {
        let container = r.len()?;
        let blob = r.string()?;
        match container {
            QUICKLIST_NODE_PLAIN => items.push(blob),
            QUICKLIST_NODE_PACKED => {
                items.extend(listpack::decode(&blob)?.into_iter().map(Elem::to_vec));
            }
            _ => return Err(RestoreError::Corrupt),
        }
    }
    ensure_non_empty(items.len())?;
    Ok(DumpValue::List(items))
}

// ---------------------------------------------------------------------------
// Streams (types 15, 19 and 21)
// ---------------------------------------------------------------------------

/// Streams as Redis's `rdb.c` stores them: the node count, then per node its master ID
/// (16 bytes, big-endian ms and seq) and its listpack; then length, last ID, (7.0+)
/// first ID, max deleted ID and entries added; then the consumer groups, each with
/// its last ID, (7.0+) entries-read, its PEL (raw ID, delivery time, delivery count)
/// and its consumers (name, seen time, (7.2) active time, PEL as raw IDs).
///
/// A node listpack starts with the master entry
/// `live | deleted | n | field_1 .. field_n | 0`, the fields being those of the
/// node's first entry. Each entry follows as `flags | ms delta | seq delta`, then
/// `n | field | value ...` or, with SAME_FIELDS (fields equal to the master's), just
/// the values, then `lp-count`: the entry's element count without itself.
mod stream {
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;

    use super::{
        listpack, write_len, write_len64, write_string, Elem, Reader, Res, RestoreError,
        TYPE_STREAM_LISTPACKS_2, TYPE_STREAM_LISTPACKS_3,
    };
    use crate::storage::stream::{
        Consumer, ConsumerGroup, EntryRef, NodeLoader, PendingEntry, RawNode, StreamId, StreamValue,
    };

    const FLAG_DELETED: i64 = 1;
    const FLAG_SAME_FIELDS: i64 = 2;
    /// flags, ms delta, seq delta.
    const ENTRY_HEADER_ELEMS: usize = 3;

    fn id_bytes(id: StreamId) -> [u8; 16] {
        let mut raw = [0u8; 16];
        raw[..8].copy_from_slice(&id.ms.to_be_bytes());
        raw[8..].copy_from_slice(&id.seq.to_be_bytes());
        raw
    }

    fn id_from_bytes(raw: &[u8]) -> Res<StreamId> {
        let raw: [u8; 16] = raw.try_into().map_err(|_| RestoreError::Corrupt)?;
        let (ms, seq) = raw.split_at(8);
        let ms = u64::from_be_bytes(ms.try_into().map_err(|_| RestoreError::Corrupt)?);
        let seq = u64::from_be_bytes(seq.try_into().map_err(|_| RestoreError::Corrupt)?);
        Ok(StreamId::new(ms, seq))
    }

    fn write_id(out: &mut Vec<u8>, id: StreamId) {
        write_len64(out, id.ms);
        write_len64(out, id.seq);
    }

    pub(super) fn write(out: &mut Vec<u8>, s: &StreamValue) {
        write_len(out, s.node_count());
        for node in s.raw_nodes() {
            write_string(out, &id_bytes(node.master));
            write_string(out, &node_listpack(&node));
        }
        write_len64(out, s.len());
        write_id(out, s.last_id);
        write_id(out, s.first_id);
        write_id(out, s.max_deleted_id);
        write_len64(out, s.entries_added);
        write_len(out, s.groups.len());
        for (name, g) in &s.groups {
            write_group(out, name, g);
        }
    }

    fn write_group(out: &mut Vec<u8>, name: &[u8], g: &ConsumerGroup) {
        write_string(out, name);
        write_id(out, g.last_id);
        // Redis stores the signed counter as a length: -1 (unknown) becomes 2^64-1.
        write_len64(out, g.entries_read as u64);
        write_len(out, g.pel.len());
        for (id, p) in &g.pel {
            out.extend_from_slice(&id_bytes(*id));
            out.extend_from_slice(&p.delivery_time.to_le_bytes());
            write_len64(out, p.delivery_count);
        }
        write_len(out, g.consumers.len());
        for (cname, c) in &g.consumers {
            write_string(out, cname);
            out.extend_from_slice(&c.seen_time.to_le_bytes());
            write_len(out, c.pel.len());
            for id in &c.pel {
                out.extend_from_slice(&id_bytes(*id));
            }
        }
    }

    fn int(v: usize) -> listpack::Entry<'static> {
        listpack::Entry::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }

    /// The node's listpack exactly as Redis's `streamAppendItem` would have built it.
    fn node_listpack(node: &RawNode<'_>) -> Vec<u8> {
        let mut lp = listpack::Builder::new();
        let master_fields: Vec<&[u8]> = node
            .entries()
            .next()
            .map(|(_, e)| e.fields().step_by(2).collect())
            .unwrap_or_default();
        lp.push(&int(node.live()));
        lp.push(&int(node.deleted()));
        lp.push(&int(master_fields.len()));
        for f in &master_fields {
            lp.push(&listpack::Entry::from_bytes(f));
        }
        lp.push(&int(0));
        for (deleted, e) in node.entries() {
            push_entry(&mut lp, node.master, &master_fields, deleted, &e);
        }
        lp.finish()
    }

    fn push_entry(
        lp: &mut listpack::Builder,
        master: StreamId,
        master_fields: &[&[u8]],
        deleted: bool,
        e: &EntryRef<'_>,
    ) {
        let same = e.nfields == master_fields.len()
            && e.fields()
                .step_by(2)
                .zip(master_fields)
                .all(|(a, b)| a == *b);
        let mut flags = if deleted { FLAG_DELETED } else { 0 };
        if same {
            flags |= FLAG_SAME_FIELDS;
        }
        lp.push(&listpack::Entry::Int(flags));
        lp.push(&listpack::Entry::Int(e.id.ms.wrapping_sub(master.ms) as i64));
        lp.push(&listpack::Entry::Int(
            e.id.seq.wrapping_sub(master.seq) as i64
        ));
        let elems = if same {
            for v in e.fields().skip(1).step_by(2) {
                lp.push(&listpack::Entry::from_bytes(v));
            }
            e.nfields
        } else {
            lp.push(&int(e.nfields));
            for f in e.fields() {
                lp.push(&listpack::Entry::from_bytes(f));
            }
            2 * e.nfields + 1
        };
        lp.push(&int(elems + ENTRY_HEADER_ELEMS));
    }

    /// Walks a decoded listpack.
    struct Elems<'e, 'a> {
        elems: &'e [Elem<'a>],
        pos: usize,
    }

    impl<'e, 'a> Elems<'e, 'a> {
        fn int(&mut self) -> Res<i64> {
            match self.elems.get(self.pos) {
                Some(Elem::Int(v)) => {
                    self.pos += 1;
                    Ok(*v)
                }
                _ => Err(RestoreError::Corrupt),
            }
        }

        /// A non-negative integer that is a count of following elements.
        fn count(&mut self) -> Res<usize> {
            let n = usize::try_from(self.int()?).map_err(|_| RestoreError::Corrupt)?;
            if n > self.elems.len() - self.pos {
                return Err(RestoreError::Corrupt);
            }
            Ok(n)
        }

        fn take(&mut self, n: usize) -> Res<&'e [Elem<'a>]> {
            let end = self.pos.checked_add(n).ok_or(RestoreError::Corrupt)?;
            let slice = self.elems.get(self.pos..end).ok_or(RestoreError::Corrupt)?;
            self.pos = end;
            Ok(slice)
        }
    }

    /// An element as bytes, integers formatted into `buf`.
    fn elem_bytes<'b>(e: Elem<'b>, buf: &'b mut [u8; 24]) -> &'b [u8] {
        match e {
            Elem::Bytes(b) => b,
            Elem::Int(v) => {
                use std::io::Write;
                let mut cur = std::io::Cursor::new(&mut buf[..]);
                // An i64 takes at most 20 bytes.
                let _ = write!(cur, "{v}");
                let n = cur.position() as usize;
                &buf[..n]
            }
        }
    }

    fn push_field(loader: &mut NodeLoader, e: Elem<'_>) {
        let mut buf = [0u8; 24];
        loader.field(elem_bytes(e, &mut buf));
    }

    /// Decodes and validates one node listpack as Redis's deep integrity check does,
    /// plus what this server relies on: ascending IDs and a live count that matches
    /// the entries' flags.
    fn read_node(master: StreamId, blob: &[u8]) -> Res<NodeLoader> {
        let elems = listpack::decode(blob)?;
        let mut it = Elems {
            elems: &elems,
            pos: 0,
        };
        let live = it.count()?;
        let deleted = it.count()?;
        let nmaster = it.count()?;
        let master_fields = it.take(nmaster)?;
        if it.int()? != 0 {
            return Err(RestoreError::Corrupt);
        }
        let total = live.checked_add(deleted).ok_or(RestoreError::Corrupt)?;
        let mut loader = NodeLoader::new(master);
        let mut seen_live = 0usize;
        for _ in 0..total {
            let flags = it.int()?;
            let ms = master.ms.wrapping_add(it.int()? as u64);
            let seq = master.seq.wrapping_add(it.int()? as u64);
            let is_deleted = flags & FLAG_DELETED != 0;
            if !is_deleted {
                seen_live += 1;
            }
            let elems = if flags & FLAG_SAME_FIELDS != 0 {
                let values = it.take(nmaster)?;
                loader.entry(StreamId::new(ms, seq), is_deleted, nmaster);
                for (f, v) in master_fields.iter().zip(values) {
                    push_field(&mut loader, *f);
                    push_field(&mut loader, *v);
                }
                nmaster
            } else {
                let n = it.count()?;
                let pairs = it.take(n.checked_mul(2).ok_or(RestoreError::Corrupt)?)?;
                loader.entry(StreamId::new(ms, seq), is_deleted, n);
                for e in pairs {
                    push_field(&mut loader, *e);
                }
                2 * n + 1
            };
            if usize::try_from(it.int()?) != Ok(elems + ENTRY_HEADER_ELEMS) {
                return Err(RestoreError::Corrupt);
            }
        }
        if it.pos != elems.len() || seen_live != live {
            return Err(RestoreError::Corrupt);
        }
        Ok(loader)
    }

    fn read_id(r: &mut Reader<'_>) -> Res<StreamId> {
        let ms = r.len()? as u64;
        let seq = r.len()? as u64;
        Ok(StreamId::new(ms, seq))
    }

    fn read_raw_id(r: &mut Reader<'_>) -> Res<StreamId> {
        id_from_bytes(r.take(16)?)
    }

    fn read_ms_time(r: &mut Reader<'_>) -> Res<u64> {
        Ok(u64::from_le_bytes(r.array()?))
    }

    pub(super) fn read(r: &mut Reader<'_>, ty: u8) -> Res<StreamValue> {
        let mut s = StreamValue::new();
        let (nodes, _) = r.count()?;
        for _ in 0..nodes {
            let master = id_from_bytes(&r.string()?)?;
            let loader = read_node(master, &r.string()?)?;
            if !s.push_loaded_node(loader) {
                return Err(RestoreError::Corrupt);
            }
        }
        let length = r.len()? as u64;
        s.last_id = read_id(r)?;
        if ty >= TYPE_STREAM_LISTPACKS_2 {
            s.first_id = read_id(r)?;
            s.max_deleted_id = read_id(r)?;
            s.entries_added = r.len()? as u64;
        } else {
            // As Redis loads a pre-7.0 stream: no tombstone is known, every entry
            // counts as added, and the first ID is the first live one (the largest ID
            // when there is none, as Redis's streamGetEdgeID reports).
            s.entries_added = length;
            s.first_id = match s.len() {
                0 => StreamId::MAX,
                _ => s.first_valid_id(),
            };
        }
        // Beyond Redis's checks: the counters must agree with the nodes, and no entry
        // may lie past the last ID (XADD would then break the ID order).
        if length != s.len() || s.entries_added < length || s.last_id < s.last_stored_id() {
            return Err(RestoreError::Corrupt);
        }
        let (groups, _) = r.count()?;
        for _ in 0..groups {
            let name = r.string()?;
            let group = read_group(r, ty, &s)?;
            if s.groups.insert(name, group).is_some() {
                return Err(RestoreError::Corrupt);
            }
        }
        Ok(s)
    }

    /// A global PEL entry while loading: its owner is known once consumers are read.
    struct Nack {
        delivery_time: u64,
        delivery_count: u64,
        owner: Option<Arc<[u8]>>,
    }

    fn read_group(r: &mut Reader<'_>, ty: u8, s: &StreamValue) -> Res<ConsumerGroup> {
        let last_id = read_id(r)?;
        let entries_read = if ty >= TYPE_STREAM_LISTPACKS_2 {
            r.len()? as u64 as i64
        } else {
            s.estimate_distance(last_id)
        };
        let mut group = ConsumerGroup::new(last_id, entries_read);
        let mut nacks: BTreeMap<StreamId, Nack> = BTreeMap::new();
        let (pel, _) = r.count()?;
        for _ in 0..pel {
            let id = read_raw_id(r)?;
            let nack = Nack {
                delivery_time: read_ms_time(r)?,
                delivery_count: r.len()? as u64,
                owner: None,
            };
            if nacks.insert(id, nack).is_some() {
                return Err(RestoreError::Corrupt);
            }
        }
        let (consumers, _) = r.count()?;
        for _ in 0..consumers {
            let name: Arc<[u8]> = Arc::from(r.string()?);
            let seen_time = read_ms_time(r)?;
            if ty >= TYPE_STREAM_LISTPACKS_3 {
                // Redis 7.2's active-time: 7.0 has no such field.
                read_ms_time(r)?;
            }
            let mut pel = BTreeSet::new();
            let (owned, _) = r.count()?;
            for _ in 0..owned {
                let id = read_raw_id(r)?;
                match nacks.get_mut(&id) {
                    Some(n) if n.owner.is_none() => n.owner = Some(name.clone()),
                    _ => return Err(RestoreError::Corrupt),
                }
                pel.insert(id);
            }
            let consumer = Consumer { seen_time, pel };
            if group.consumers.insert(name, consumer).is_some() {
                return Err(RestoreError::Corrupt);
            }
        }
        // Every pending entry must belong to a consumer.
        for (id, n) in nacks {
            let consumer = n.owner.ok_or(RestoreError::Corrupt)?;
            let entry = PendingEntry {
                consumer,
                delivery_time: n.delivery_time,
                delivery_count: n.delivery_count,
            };
            group.pel.insert(id, entry);
        }
        Ok(group)
    }
}

// ---------------------------------------------------------------------------
// Listpack
// ---------------------------------------------------------------------------

mod listpack {
    use super::{parse_canonical_i64, Elem, Res, RestoreError};

    const HEADER_LEN: usize = 6;
    const EOF: u8 = 0xFF;
    const UNKNOWN_COUNT: u16 = u16::MAX;

    /// An element to append to a listpack.
    pub(super) enum Entry<'a> {
        Int(i64),
        Str(&'a [u8]),
        Owned(Vec<u8>),
    }

    impl<'a> Entry<'a> {
        /// Stores canonical integers with integer encodings, as `lpAppend` does.
        pub(super) fn from_bytes(s: &'a [u8]) -> Self {
            match parse_canonical_i64(s) {
                Some(v) => Entry::Int(v),
                None => Entry::Str(s),
            }
        }

        fn encode(&self, out: &mut Vec<u8>) {
            let start = out.len();
            match self {
                Entry::Int(v) => encode_int(out, *v),
                Entry::Str(s) => encode_str(out, s),
                Entry::Owned(s) => encode_str(out, s),
            }
            let size = out.len() - start;
            encode_backlen(out, size);
        }

        fn encoded_size(&self) -> usize {
            let size = match self {
                Entry::Int(v) => int_size(*v),
                Entry::Str(s) => str_header_size(s.len()) + s.len(),
                Entry::Owned(s) => str_header_size(s.len()) + s.len(),
            };
            size + backlen_size(size)
        }
    }

    fn int_size(v: i64) -> usize {
        match v {
            0..=127 => 1,
            -4096..=4095 => 2,
            -32768..=32767 => 3,
            -8_388_608..=8_388_607 => 4,
            -2_147_483_648..=2_147_483_647 => 5,
            _ => 9,
        }
    }

    fn encode_int(out: &mut Vec<u8>, v: i64) {
        let bytes = v.to_le_bytes();
        match int_size(v) {
            1 => out.push(v as u8),
            2 => {
                let u = (v as u16) & 0x1fff;
                out.push(0xC0 | (u >> 8) as u8);
                out.push((u & 0xff) as u8);
            }
            3 => {
                out.push(0xF1);
                out.extend_from_slice(&bytes[..2]);
            }
            4 => {
                out.push(0xF2);
                out.extend_from_slice(&bytes[..3]);
            }
            5 => {
                out.push(0xF3);
                out.extend_from_slice(&bytes[..4]);
            }
            _ => {
                out.push(0xF4);
                out.extend_from_slice(&bytes);
            }
        }
    }

    fn str_header_size(len: usize) -> usize {
        if len < 64 {
            1
        } else if len < 4096 {
            2
        } else {
            5
        }
    }

    fn encode_str(out: &mut Vec<u8>, s: &[u8]) {
        let len = s.len();
        if len < 64 {
            out.push(0x80 | len as u8);
        } else if len < 4096 {
            out.push(0xE0 | (len >> 8) as u8);
            out.push((len & 0xff) as u8);
        } else {
            out.push(0xF0);
            out.extend_from_slice(&(len as u32).to_le_bytes());
        }
        out.extend_from_slice(s);
    }

    fn backlen_size(len: usize) -> usize {
        if len <= 127 {
            1
        } else if len < 16383 {
            2
        } else if len < 2_097_151 {
            3
        } else if len < 268_435_455 {
            4
        } else {
            5
        }
    }

    /// `lpEncodeBacklen`: big-endian 7-bit groups, all but the first flagged with 0x80.
    fn encode_backlen(out: &mut Vec<u8>, len: usize) {
        let n = backlen_size(len);
        for i in 0..n {
            let shift = 7 * (n - 1 - i);
            let group = ((len >> shift) & 0x7f) as u8;
            out.push(if i == 0 { group } else { group | 0x80 });
        }
    }

    /// Incrementally builds a listpack.
    pub(super) struct Builder {
        buf: Vec<u8>,
        count: usize,
    }

    impl Builder {
        pub(super) fn new() -> Self {
            Builder {
                buf: vec![0; HEADER_LEN],
                count: 0,
            }
        }

        pub(super) fn is_empty(&self) -> bool {
            self.count == 0
        }

        /// Total listpack size if `entry` were appended.
        pub(super) fn size_with(&self, entry: &Entry<'_>) -> usize {
            self.buf.len() + entry.encoded_size() + 1
        }

        pub(super) fn push(&mut self, entry: &Entry<'_>) {
            entry.encode(&mut self.buf);
            self.count += 1;
        }

        pub(super) fn finish(mut self) -> Vec<u8> {
            self.buf.push(EOF);
            let total = u32::try_from(self.buf.len()).unwrap_or(u32::MAX);
            let count = u16::try_from(self.count).unwrap_or(UNKNOWN_COUNT);
            self.buf[..4].copy_from_slice(&total.to_le_bytes());
            self.buf[4..6].copy_from_slice(&count.to_le_bytes());
            self.buf
        }
    }

    /// Decodes and fully validates a listpack.
    pub(super) fn decode(blob: &[u8]) -> Res<Vec<Elem<'_>>> {
        let declared = validate_header(blob)?;
        let end = blob.len() - 1;
        let mut elems = Vec::with_capacity(usize::from(declared).min(blob.len()));
        let mut pos = HEADER_LEN;
        while pos < end {
            let (elem, size) = decode_entry(blob, pos, end)?;
            pos += size;
            pos = check_backlen(blob, pos, end, size)?;
            elems.push(elem);
        }
        if declared != UNKNOWN_COUNT && usize::from(declared) != elems.len() {
            return Err(RestoreError::Corrupt);
        }
        Ok(elems)
    }

    fn validate_header(blob: &[u8]) -> Res<u16> {
        if blob.len() < HEADER_LEN + 1 || blob.last() != Some(&EOF) {
            return Err(RestoreError::Corrupt);
        }
        let total = u32::from_le_bytes([blob[0], blob[1], blob[2], blob[3]]);
        if usize::try_from(total).ok() != Some(blob.len()) {
            return Err(RestoreError::Corrupt);
        }
        Ok(u16::from_le_bytes([blob[4], blob[5]]))
    }

    /// Returns the position after the backlen, which must match `size`.
    fn check_backlen(blob: &[u8], pos: usize, end: usize, size: usize) -> Res<usize> {
        let mut expected = Vec::with_capacity(5);
        encode_backlen(&mut expected, size);
        let stop = pos + expected.len();
        if stop > end || blob.get(pos..stop) != Some(expected.as_slice()) {
            return Err(RestoreError::Corrupt);
        }
        Ok(stop)
    }

    fn bytes_at(blob: &[u8], start: usize, len: usize, end: usize) -> Res<&[u8]> {
        let stop = start.checked_add(len).ok_or(RestoreError::Corrupt)?;
        if stop > end {
            return Err(RestoreError::Corrupt);
        }
        blob.get(start..stop).ok_or(RestoreError::Corrupt)
    }

    fn le_int(bytes: &[u8]) -> i64 {
        let mut buf = [0u8; 8];
        buf[..bytes.len()].copy_from_slice(bytes);
        let shift = 64 - 8 * bytes.len() as u32;
        (i64::from_le_bytes(buf) << shift) >> shift
    }

    /// Decodes the entry at `pos`; returns it and its size without the backlen.
    fn decode_entry(blob: &[u8], pos: usize, end: usize) -> Res<(Elem<'_>, usize)> {
        let b0 = blob[pos];
        if b0 & 0x80 == 0 {
            return Ok((Elem::Int(i64::from(b0)), 1));
        }
        if b0 & 0xC0 == 0x80 {
            let len = usize::from(b0 & 0x3f);
            return Ok((Elem::Bytes(bytes_at(blob, pos + 1, len, end)?), 1 + len));
        }
        if b0 & 0xE0 == 0xC0 {
            let b1 = bytes_at(blob, pos + 1, 1, end)?[0];
            let raw = (i64::from(b0 & 0x1f) << 8) | i64::from(b1);
            let v = if raw >= 1 << 12 { raw - (1 << 13) } else { raw };
            return Ok((Elem::Int(v), 2));
        }
        if b0 & 0xF0 == 0xE0 {
            let b1 = bytes_at(blob, pos + 1, 1, end)?[0];
            let len = (usize::from(b0 & 0x0f) << 8) | usize::from(b1);
            return Ok((Elem::Bytes(bytes_at(blob, pos + 2, len, end)?), 2 + len));
        }
        decode_wide_entry(blob, pos, end, b0)
    }

    fn decode_wide_entry(blob: &[u8], pos: usize, end: usize, b0: u8) -> Res<(Elem<'_>, usize)> {
        let int_width = match b0 {
            0xF0 => {
                let raw = bytes_at(blob, pos + 1, 4, end)?;
                let len = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
                let len = usize::try_from(len).map_err(|_| RestoreError::Corrupt)?;
                let data = bytes_at(blob, pos + 5, len, end)?;
                return Ok((Elem::Bytes(data), 5 + len));
            }
            0xF1 => 2,
            0xF2 => 3,
            0xF3 => 4,
            0xF4 => 8,
            _ => return Err(RestoreError::Corrupt),
        };
        let raw = bytes_at(blob, pos + 1, int_width, end)?;
        Ok((Elem::Int(le_int(raw)), 1 + int_width))
    }
}

// ---------------------------------------------------------------------------
// Ziplist (read only: RDB types 10, 12, 13 and 14)
// ---------------------------------------------------------------------------

mod ziplist {
    use super::{Elem, Res, RestoreError};

    const HEADER_LEN: usize = 10;
    const END: u8 = 0xFF;
    const UNKNOWN_COUNT: u16 = u16::MAX;

    struct Header {
        tail: usize,
        count: u16,
    }

    /// Decodes and fully validates a ziplist.
    pub(super) fn decode(blob: &[u8]) -> Res<Vec<Elem<'_>>> {
        let header = validate_header(blob)?;
        let end = blob.len() - 1;
        let mut elems = Vec::with_capacity(usize::from(header.count).min(blob.len()));
        let mut pos = HEADER_LEN;
        let mut prev_size = 0;
        let mut last_start = HEADER_LEN;
        while pos < end {
            let (elem, size) = decode_entry(blob, pos, end, prev_size)?;
            last_start = pos;
            prev_size = size;
            pos += size;
            elems.push(elem);
        }
        if header.tail != last_start {
            return Err(RestoreError::Corrupt);
        }
        if header.count != UNKNOWN_COUNT && usize::from(header.count) != elems.len() {
            return Err(RestoreError::Corrupt);
        }
        Ok(elems)
    }

    fn validate_header(blob: &[u8]) -> Res<Header> {
        if blob.len() < HEADER_LEN + 1 || blob.last() != Some(&END) {
            return Err(RestoreError::Corrupt);
        }
        let total = u32::from_le_bytes([blob[0], blob[1], blob[2], blob[3]]);
        if usize::try_from(total).ok() != Some(blob.len()) {
            return Err(RestoreError::Corrupt);
        }
        let tail = u32::from_le_bytes([blob[4], blob[5], blob[6], blob[7]]);
        Ok(Header {
            tail: usize::try_from(tail).map_err(|_| RestoreError::Corrupt)?,
            count: u16::from_le_bytes([blob[8], blob[9]]),
        })
    }

    fn bytes_at(blob: &[u8], start: usize, len: usize, end: usize) -> Res<&[u8]> {
        let stop = start.checked_add(len).ok_or(RestoreError::Corrupt)?;
        if stop > end {
            return Err(RestoreError::Corrupt);
        }
        blob.get(start..stop).ok_or(RestoreError::Corrupt)
    }

    /// Reads the prevlen field; returns (prevlen, header size).
    fn prevlen(blob: &[u8], pos: usize, end: usize) -> Res<(usize, usize)> {
        let first = bytes_at(blob, pos, 1, end)?[0];
        match first {
            0..=253 => Ok((usize::from(first), 1)),
            254 => {
                let raw = bytes_at(blob, pos + 1, 4, end)?;
                let len = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
                Ok((usize::try_from(len).map_err(|_| RestoreError::Corrupt)?, 5))
            }
            _ => Err(RestoreError::Corrupt),
        }
    }

    /// Decodes the entry at `pos`; returns it and its total size.
    fn decode_entry(blob: &[u8], pos: usize, end: usize, prev: usize) -> Res<(Elem<'_>, usize)> {
        let (prev_len, prev_hdr) = prevlen(blob, pos, end)?;
        if prev_len != prev {
            return Err(RestoreError::Corrupt);
        }
        let enc_pos = pos + prev_hdr;
        let (elem, enc_size) = decode_payload(blob, enc_pos, end)?;
        Ok((elem, prev_hdr + enc_size))
    }

    /// Decodes encoding + data at `pos`; returns the element and their combined size.
    fn decode_payload(blob: &[u8], pos: usize, end: usize) -> Res<(Elem<'_>, usize)> {
        let enc = bytes_at(blob, pos, 1, end)?[0];
        let (hdr, str_len) = match enc >> 6 {
            0 => (1, usize::from(enc & 0x3f)),
            1 => {
                let b1 = bytes_at(blob, pos + 1, 1, end)?[0];
                (2, (usize::from(enc & 0x3f) << 8) | usize::from(b1))
            }
            2 if enc == 0x80 => {
                let raw = bytes_at(blob, pos + 1, 4, end)?;
                let len = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
                (5, usize::try_from(len).map_err(|_| RestoreError::Corrupt)?)
            }
            2 => return Err(RestoreError::Corrupt),
            _ => return decode_int(blob, pos, end, enc),
        };
        let data = bytes_at(blob, pos + hdr, str_len, end)?;
        Ok((Elem::Bytes(data), hdr + str_len))
    }

    fn decode_int(blob: &[u8], pos: usize, end: usize, enc: u8) -> Res<(Elem<'_>, usize)> {
        let width = match enc {
            0xC0 => 2,
            0xD0 => 4,
            0xE0 => 8,
            0xF0 => 3,
            0xFE => 1,
            0xF1..=0xFD => return Ok((Elem::Int(i64::from(enc & 0x0f) - 1), 1)),
            _ => return Err(RestoreError::Corrupt),
        };
        let raw = bytes_at(blob, pos + 1, width, end)?;
        let mut buf = [0u8; 8];
        buf[..width].copy_from_slice(raw);
        let shift = 64 - 8 * width as u32;
        let v = (i64::from_le_bytes(buf) << shift) >> shift;
        Ok((Elem::Int(v), 1 + width))
    }
}

// ---------------------------------------------------------------------------
// Intset
// ---------------------------------------------------------------------------

mod intset {
    use super::{int_to_bytes, parse_canonical_i64, Res, RestoreError};

    const HEADER_LEN: usize = 8;

    /// Encodes `members` as an intset if all are canonical integers, distinct, and
    /// there are at most `max_entries` of them.
    pub(super) fn encode(members: &[Vec<u8>], max_entries: usize) -> Option<Vec<u8>> {
        if members.is_empty() || members.len() > max_entries {
            return None;
        }
        let mut values = members
            .iter()
            .map(|m| parse_canonical_i64(m))
            .collect::<Option<Vec<i64>>>()?;
        values.sort_unstable();
        if values.windows(2).any(|w| w[0] == w[1]) {
            return None;
        }
        let width = values.iter().map(|&v| width_of(v)).max().unwrap_or(2);
        let mut out = Vec::with_capacity(HEADER_LEN + width * values.len());
        out.extend_from_slice(&(width as u32).to_le_bytes());
        out.extend_from_slice(&u32::try_from(values.len()).ok()?.to_le_bytes());
        for v in values {
            out.extend_from_slice(&v.to_le_bytes()[..width]);
        }
        Some(out)
    }

    fn width_of(v: i64) -> usize {
        if i16::try_from(v).is_ok() {
            2
        } else if i32::try_from(v).is_ok() {
            4
        } else {
            8
        }
    }

    /// Decodes an intset, requiring a consistent size and strictly ascending values.
    pub(super) fn decode(blob: &[u8]) -> Res<Vec<Vec<u8>>> {
        if blob.len() < HEADER_LEN {
            return Err(RestoreError::Corrupt);
        }
        let width = u32::from_le_bytes([blob[0], blob[1], blob[2], blob[3]]);
        let count = u32::from_le_bytes([blob[4], blob[5], blob[6], blob[7]]);
        let width = match width {
            2 | 4 | 8 => width as usize,
            _ => return Err(RestoreError::Corrupt),
        };
        let body = &blob[HEADER_LEN..];
        if u64::from(count) * width as u64 != body.len() as u64 {
            return Err(RestoreError::Corrupt);
        }
        let mut members = Vec::with_capacity(body.len() / width);
        let mut previous: Option<i64> = None;
        for chunk in body.chunks_exact(width) {
            let v = read_value(chunk);
            if previous.is_some_and(|p| p >= v) {
                return Err(RestoreError::Corrupt);
            }
            previous = Some(v);
            members.push(int_to_bytes(v));
        }
        Ok(members)
    }

    fn read_value(chunk: &[u8]) -> i64 {
        let mut buf = [0u8; 8];
        buf[..chunk.len()].copy_from_slice(chunk);
        let shift = 64 - 8 * chunk.len() as u32;
        (i64::from_le_bytes(buf) << shift) >> shift
    }
}

// ---------------------------------------------------------------------------
// LZF
// ---------------------------------------------------------------------------

mod lzf {
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
        if input.len() < 3 {
            return None;
        }
        let mut c = Compressor {
            input,
            out: Vec::with_capacity(max_out.min(input.len()) + 1),
            max_out,
            table: vec![0; 1 << HASH_BITS],
            lit: 0,
        };
        c.run()?;
        Some(c.out)
    }

    struct Compressor<'a> {
        input: &'a [u8],
        /// Output so far; while a literal run is open its header byte is a placeholder
        /// `lit + 1` bytes from the end.
        out: Vec<u8>,
        max_out: usize,
        /// Hash slot -> last position with that hash (0 = none: never referenced).
        table: Vec<usize>,
        /// Length of the open literal run.
        lit: usize,
    }

    /// liblzf's `IDX` under `VERY_FAST`: `hval` holds the last four bytes read.
    fn slot(hval: u32) -> usize {
        ((hval >> (24 - HASH_BITS)).wrapping_sub(hval.wrapping_mul(5)) & ((1 << HASH_BITS) - 1))
            as usize
    }

    impl Compressor<'_> {
        fn first(&self, pos: usize) -> u32 {
            (u32::from(self.input[pos]) << 8) | u32::from(self.input[pos + 1])
        }

        fn next(&self, hval: u32, pos: usize) -> u32 {
            (hval << 8) | u32::from(self.input[pos + 2])
        }

        fn run(&mut self) -> Option<()> {
            let input = self.input;
            let n = input.len();
            let mut ip = 0;
            let mut hval = self.first(0);
            self.out.push(0);
            while ip < n - 2 {
                hval = self.next(hval, ip);
                let h = slot(hval);
                let candidate = std::mem::replace(&mut self.table[h], ip);
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
                            self.table[slot(hval)] = ip;
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
            (self.out.len() <= self.max_out).then_some(())
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

    fn copy_literal(
        input: &[u8],
        i: usize,
        n: usize,
        out: &mut Vec<u8>,
        len: usize,
    ) -> Option<usize> {
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
}

// ---------------------------------------------------------------------------
// CRC64 (Jones polynomial, reflected), slicing-by-8
// ---------------------------------------------------------------------------

mod crc {
    const POLY: u64 = 0x95AC_9329_AC4B_C9B5;

    const fn make_tables() -> [[u64; 256]; 8] {
        let mut t = [[0u64; 256]; 8];
        let mut i = 0;
        while i < 256 {
            let mut crc = i as u64;
            let mut k = 0;
            while k < 8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ POLY
                } else {
                    crc >> 1
                };
                k += 1;
            }
            t[0][i] = crc;
            i += 1;
        }
        let mut i = 0;
        while i < 256 {
            let mut j = 1;
            while j < 8 {
                let prev = t[j - 1][i];
                t[j][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
                j += 1;
            }
            i += 1;
        }
        t
    }

    static TABLES: [[u64; 256]; 8] = make_tables();

    pub(super) fn update(mut crc: u64, data: &[u8]) -> u64 {
        let t = &TABLES;
        let mut chunks = data.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let v = crc ^ u64::from_le_bytes(word);
            crc = t[7][(v & 0xff) as usize]
                ^ t[6][((v >> 8) & 0xff) as usize]
                ^ t[5][((v >> 16) & 0xff) as usize]
                ^ t[4][((v >> 24) & 0xff) as usize]
                ^ t[3][((v >> 32) & 0xff) as usize]
                ^ t[2][((v >> 40) & 0xff) as usize]
                ^ t[1][((v >> 48) & 0xff) as usize]
                ^ t[0][(v >> 56) as usize];
        }
        for &b in chunks.remainder() {
            crc = t[0][((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8);
        }
        crc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Payloads captured with `DUMP` from redis-server 7.0.15 (default config unless
    // noted). The values they hold are rebuilt by the functions below.
    const S_HELLO: &str = "000568656c6c6f0a006372df766534200a";
    const S_EMPTY: &str = "00000a005d9b5c400f7fa2da";
    const S_INT00: &str = "00c07b0a0048e253e1007a67b9";
    const S_INT01: &str = "00c0ff0a000c937e2485089dc5";
    const S_INT02: &str = "00c0000a009840a778f8500308";
    const S_INT03: &str = "00c07f0a000db5eb315254c514";
    const S_INT04: &str = "00c180000a00eb7ab3b510cf4b65";
    const S_INT05: &str = "00c0800a009966326d2f0c5bd9";
    const S_INT06: &str = "00c17fff0a001760822854808480";
    const S_INT07: &str = "00c1ff000a00dcaf7b93bdf01337";
    const S_INT08: &str = "00c100010a000a5ed39cadb650eb";
    const S_INT09: &str = "00c1ff7f0a00495a37da17f4d52b";
    const S_INT10: &str = "00c2008000000a0045d82eedd5bda910";
    const S_INT11: &str = "00c100800a00b540064753bb1ace";
    const S_INT12: &str = "00c2ff7fffff0a00aee34c4d06c68536";
    const S_INT13: &str = "00c2ffffff7f0a002c74e59ee02eada1";
    const S_INT14: &str = "000a323134373438333634380a00e7b129a34c1d76ee";
    const S_INT15: &str = "00c2000000800a00c74f873e33558187";
    const S_INT16: &str = "000b2d323134373438333634390a00c261377908f2028c";
    const S_INT17: &str = "0004303132330a000ae40c929e3b6422";
    const S_INT18: &str = "00022b310a00c286f0d7439aee6f";
    const S_INT19: &str = "00022d300a00d5411fd9d6d050cc";
    const S_INT20: &str = "000b31323334353637383930310a00304e52d727176510";
    const S_INT21: &str = "000231200a0016fd33f0b380b43c";
    const S_REP20: &str = "001461616161616161616161616161616161616161610a0083b46b5e1b11acf1";
    const S_REP21: &str = "00c30615016161e00a000a00fd0cb36807413f68";
    const S_LZF: &str = "00c3094064016161e057000161610a00e8a3b507b06df271";
    const S_300RAND: &str = concat!(
        "00412c6c82a562cb808d10d632be89c8513ebf6c929f34ddfa8c9f63c9960ef6e348a3528c8a3fcc2f044e39",
        "a3fc5b94492f8f032e7549a20098f95befd61248a23cd7a8168839e91f803558fac9f6095d9c927919701323",
        "42aa04168bad0ae6dbb1855ddcb4749032b8fe38a6684b514a33dbbfe6476d5eeadf9e9a24b268ab923be928",
        "5bda9693c08fdb43ecc4699f455f0c891e9118b378c54b315ef26e3465a93f6127625c36a9e54d42ca5da87e",
        "07b03fcb76a87206397b81f3780420e5427a2084a0c14cf5d665d475ab6f50afbf0af92d8b45ebbfb95afa1a",
        "47e61756f9c1e2d24ec2ba071c80f8a69615be3b1548d6e25560f5cf002fdaa74a9d5ec200044323c67053f2",
        "65ec5bcbfd6aea47eb340f464e8a8f24a2328fc61768e4ff67c3b1388f16e7173114605b11457b0a00017ea1",
        "a517837d0b",
    );
    const S_300PAT: &str = concat!(
        "00c324412c1a61686f76636a7178656c737a676e7562697077646b7279666d7461e0ff19a11d01676e0a008a",
        "dcf384414c2264",
    );
    const S_70000PAT: &str = concat!(
        "00c3433d80000111701a61686f76636a7178656c737a676e7562697077646b7279666d7461e0ff19e1ff1de2",
        "ff21e3ff25e4ff29e5ff2de6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31",
        "e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff",
        "31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6",
        "ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31",
        "e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff",
        "31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6",
        "ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31",
        "e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff",
        "31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6",
        "ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31",
        "e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff",
        "31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6",
        "ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31",
        "e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff",
        "31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6",
        "ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31",
        "e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff",
        "31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6023101",
        "71780a00639de17f2098e789",
    );
    const L_SMALL: &str = concat!(
        "1201021f1f00000005008161028162027b01dff9028b68656c6c6f20776f726c640cff0a005eb1a8fa80b168",
        "74",
    );
    const L_ENC: &str = concat!(
        "120102c3413154db1fdb140000160000017f01c08002dfff02d00002cfff02f1001003f1008003f1ff117f03",
        "f200800004f200008004f2ffff7f04f32009030005f3ff200b0205f400400c2000000940094000028009f420",
        "194000087f098330303704bf78e035000340e04079e036001f42e0641c53bc589e61807b8db3f8e040c1e7da",
        "3fc471c93b70e87c31756a4bbe1f7544d0a448454a037509a983d38ad3b769faaeecd6c7e1fa138b56417d6e",
        "4dd31f43055fead9d2d1a340143eab3198bca6166d14acbf275b1214574156d1fbe0d01f2cc29f504c317866",
        "f0881300004144474a4d505356594245484b4e5154575a430646494c4f525558e0ff19e1ff1de2ff21e3ff25",
        "e4ff29e5ff2de6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6d5",
        "3102278dff0a00c0ee117271bb4b13",
    );
    const L_MULTI: &str = concat!(
        "12030213130000000300826530038265310382653203ff0213130000000300826533038265340382653503ff",
        "020f0f00000002008265360382653703ff0a00e1eef01989675ddb",
    );
    const L_PLAIN: &str = concat!(
        "1204020f0f000000010086736d616c6c3107ff01c3093c015050e02f00015050020f0f000000010086736d61",
        "6c6c3207ff014050cd23d24f714274e744343237b93290f511f6425f98e64459ff203e8985083ffdf6050055",
        "3abc0e05cd02184bdb89c4ccd67e187951267eb3280a07875ee4cfe72c9c1c6a5c60a846ff68688243ce3f96",
        "0a00cd3241894ed69ab1",
    );
    const SET_SMALL: &str = "020306636865727279056170706c650662616e616e610a003ec8a798171fc9d9";
    const SET_INT: &str =
        "0b1c04000000050000009cffffff010000000200000003000000701101000a009f4dd5a629d01743";
    const SET_INT64: &str =
        "0b180800000002000000000efad5feffffff01000000000000000a009c139e07ea35a37e";
    const SET_INT16: &str = "0b0c0200000002000000d4fe01000a000c5b1a134e1fcf0a";
    const H_SMALL: &str = concat!(
        "10242400000006008266310382763103826632031601846e616d6505877465737365726108ff0a00cc0c3084",
        "d242a19d",
    );
    const H_HT: &str = "04030163c0fd0161c00101620374776f0a000574ff29ef8e9d12";
    const Z_SMALL: &str = concat!(
        "112222000000060085746872656506dffd02836f6e650401018374776f0483322e3504ff0a00dd9062a681e0",
        "4f33",
    );
    const Z_SKIP: &str = concat!(
        "050603626967000000000000f07f0374776f0000000000000440036f6e65000000000000f03f0574656e7468",
        "9a9999999999b93f05746872656500000000000008c005736d616c6c000000000000f0ff0a000e1109587428",
        "2620",
    );

    /// Footer (version + CRC) of the DUMP of `prng(70000, 2)`, type byte and length
    /// prefix `00 80 00011170`: a 32-bit raw length.
    const S_70000RAND_HEAD: &str = "008000011170";
    const S_70000RAND_FOOTER: &str = "0a009948c13c615bcd60";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("valid hex"))
            .collect()
    }

    /// Same generator as the capture script: a 64-bit LCG, top byte of each step.
    fn prng(n: usize, seed: u64) -> Vec<u8> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (state >> 56) as u8
            })
            .collect()
    }

    /// `chr(ord(base) + (i * step) % 26)` for i in 0..n.
    fn pattern(n: usize, base: u8, step: usize) -> Vec<u8> {
        (0..n).map(|i| base + ((i * step) % 26) as u8).collect()
    }

    fn b(s: &str) -> Vec<u8> {
        s.as_bytes().to_vec()
    }

    fn strs(items: &[&str]) -> Vec<Vec<u8>> {
        items.iter().map(|s| b(s)).collect()
    }

    fn with_footer(body: &[u8]) -> Vec<u8> {
        let mut out = body.to_vec();
        finish_payload(&mut out, 0);
        out
    }

    fn restored(payload_hex: &str) -> DumpValue {
        restore(&hex(payload_hex)).expect("payload restores")
    }

    fn sorted_set(v: DumpValue) -> Vec<Vec<u8>> {
        match v {
            DumpValue::Set(mut m) => {
                m.sort();
                m
            }
            other => panic!("not a set: {other:?}"),
        }
    }

    fn sorted_hash(v: DumpValue) -> Vec<(Vec<u8>, Vec<u8>)> {
        match v {
            DumpValue::Hash(mut p) => {
                p.sort();
                p
            }
            other => panic!("not a hash: {other:?}"),
        }
    }

    fn sorted_zset(v: DumpValue) -> Vec<(Vec<u8>, u64)> {
        match v {
            DumpValue::ZSet(e) => {
                let mut e: Vec<_> = e.into_iter().map(|(m, s)| (m, s.to_bits())).collect();
                e.sort();
                e
            }
            other => panic!("not a zset: {other:?}"),
        }
    }

    fn zset(entries: &[(&str, f64)]) -> Vec<(Vec<u8>, u64)> {
        let mut e: Vec<_> = entries.iter().map(|(m, s)| (b(m), s.to_bits())).collect();
        e.sort();
        e
    }

    // ---- CRC64 ----------------------------------------------------------------

    #[test]
    fn crc64_check_value() {
        assert_eq!(crc64(0, b"123456789"), 0xe9c6_d914_c4b8_d9ca);
        assert_eq!(crc64(0, b""), 0);
    }

    #[test]
    fn crc64_chains() {
        let data = prng(1000, 9);
        for split in [0, 1, 7, 8, 9, 500, 1000] {
            let (a, rest) = data.split_at(split);
            assert_eq!(crc64(crc64(0, a), rest), crc64(0, &data));
        }
    }

    // ---- Strings: exact bytes and restore --------------------------------------

    const INT_CASES: [(&str, &str); 22] = [
        (S_INT00, "123"),
        (S_INT01, "-1"),
        (S_INT02, "0"),
        (S_INT03, "127"),
        (S_INT04, "128"),
        (S_INT05, "-128"),
        (S_INT06, "-129"),
        (S_INT07, "255"),
        (S_INT08, "256"),
        (S_INT09, "32767"),
        (S_INT10, "32768"),
        (S_INT11, "-32768"),
        (S_INT12, "-32769"),
        (S_INT13, "2147483647"),
        (S_INT14, "2147483648"),
        (S_INT15, "-2147483648"),
        (S_INT16, "-2147483649"),
        (S_INT17, "0123"),
        (S_INT18, "+1"),
        (S_INT19, "-0"),
        (S_INT20, "12345678901"),
        (S_INT21, "1 "),
    ];

    #[test]
    fn string_vectors_match_redis_exactly() {
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            (S_HELLO, b("hello")),
            (S_EMPTY, b("")),
            (S_REP20, vec![b'a'; 20]),
            (S_300RAND, prng(300, 1)),
        ];
        cases.extend(INT_CASES.iter().map(|(h, v)| (*h, b(v))));
        for (payload, value) in cases {
            assert_eq!(
                dump(&DumpValue::Str(value.clone())),
                hex(payload),
                "{value:?}"
            );
            assert_eq!(restored(payload), DumpValue::Str(value));
        }
    }

    #[test]
    fn dump_string_appends_a_payload() {
        let mut out = b"prefix".to_vec();
        dump_string(b"hello", &mut out);
        assert_eq!(&out[..6], b"prefix");
        assert_eq!(out[6..], hex(S_HELLO));
    }

    #[test]
    fn lzf_string_vectors_restore() {
        let cases = [
            (S_REP21, vec![b'a'; 21]),
            (S_LZF, vec![b'a'; 100]),
            (S_300PAT, pattern(300, b'a', 7)),
            (S_70000PAT, pattern(70000, b'a', 7)),
        ];
        for (payload, value) in cases {
            assert_eq!(restored(payload), DumpValue::Str(value.clone()));
            let ours = dump(&DumpValue::Str(value.clone()));
            assert_eq!(ours[1], 0xC3, "compressed like Redis");
            assert_eq!(restore(&ours), Ok(DumpValue::Str(value)));
        }
    }

    #[test]
    fn large_raw_string_matches_redis_exactly() {
        let value = prng(70000, 2);
        let mut expected = hex(S_70000RAND_HEAD);
        expected.extend_from_slice(&value);
        expected.extend(hex(S_70000RAND_FOOTER));
        assert_eq!(dump(&DumpValue::Str(value.clone())), expected);
        assert_eq!(restore(&expected), Ok(DumpValue::Str(value)));
    }

    // ---- Collections ------------------------------------------------------------

    fn l_enc_items() -> Vec<Vec<u8>> {
        let mut items = strs(&[
            "0",
            "127",
            "128",
            "-1",
            "-4096",
            "4095",
            "4096",
            "-32768",
            "32767",
            "32768",
            "-8388608",
            "8388607",
            "8388608",
            "2147483647",
            "2147483648",
            "-9223372036854775808",
            "9223372036854775807",
            "007",
        ]);
        items.push(vec![b'x'; 63]);
        items.push(vec![b'y'; 64]);
        items.push(prng(100, 3));
        items.push(pattern(5000, b'A', 3));
        items
    }

    #[test]
    fn list_vectors_restore() {
        let l_small = strs(&["a", "b", "123", "-7", "hello world"]);
        assert_eq!(restored(L_SMALL), DumpValue::List(l_small.clone()));
        assert_eq!(dump(&DumpValue::List(l_small)), hex(L_SMALL));
        assert_eq!(restored(L_ENC), DumpValue::List(l_enc_items()));
        let multi: Vec<Vec<u8>> = (0..8).map(|i| format!("e{i}").into_bytes()).collect();
        assert_eq!(restored(L_MULTI), DumpValue::List(multi));
        let plain = vec![b("small1"), vec![b'P'; 60], b("small2"), prng(80, 5)];
        assert_eq!(restored(L_PLAIN), DumpValue::List(plain));
    }

    /// Our listpack encoder produces Redis's exact bytes (the node inside `L_ENC`).
    #[test]
    fn listpack_encoding_matches_redis() {
        let DumpValue::List(items) = dump_then_restore(&DumpValue::List(l_enc_items())) else {
            panic!("list expected");
        };
        assert_eq!(items, l_enc_items());
        let payload = hex(L_ENC);
        let mut r = Reader::new(&payload[3..payload.len() - FOOTER_LEN]);
        let redis_lp = r.string().expect("node");
        let mut ours = listpack::Builder::new();
        for item in l_enc_items() {
            ours.push(&listpack::Entry::from_bytes(&item));
        }
        assert_eq!(ours.finish(), redis_lp);
    }

    fn dump_then_restore(v: &DumpValue) -> DumpValue {
        restore(&dump(v)).expect("round trip")
    }

    #[test]
    fn set_vectors_restore() {
        let expect = strs(&["apple", "banana", "cherry"]);
        assert_eq!(sorted_set(restored(SET_SMALL)), expect);
        let ints = strs(&["-100", "1", "2", "3", "70000"]);
        assert_eq!(restored(SET_INT), DumpValue::Set(ints.clone()));
        let shuffled = strs(&["3", "70000", "1", "-100", "2"]);
        assert_eq!(dump(&DumpValue::Set(shuffled)), hex(SET_INT));
        let int64 = strs(&["-5000000000", "1"]);
        assert_eq!(restored(SET_INT64), DumpValue::Set(int64.clone()));
        assert_eq!(dump(&DumpValue::Set(int64)), hex(SET_INT64));
        let int16 = strs(&["-300", "1"]);
        assert_eq!(restored(SET_INT16), DumpValue::Set(int16.clone()));
        assert_eq!(dump(&DumpValue::Set(int16)), hex(SET_INT16));
    }

    #[test]
    fn hash_vectors_restore() {
        let small = vec![
            (b("f1"), b("v1")),
            (b("f2"), b("22")),
            (b("name"), b("tessera")),
        ];
        assert_eq!(restored(H_SMALL), DumpValue::Hash(small.clone()));
        assert_eq!(dump(&DumpValue::Hash(small)), hex(H_SMALL));
        let ht = vec![(b("a"), b("1")), (b("b"), b("two")), (b("c"), b("-3"))];
        assert_eq!(sorted_hash(restored(H_HT)), ht);
    }

    #[test]
    fn zset_vectors_restore() {
        let small = [("three", -3.0), ("one", 1.0), ("two", 2.5)];
        assert_eq!(sorted_zset(restored(Z_SMALL)), zset(&small));
        let entries: Vec<(Vec<u8>, f64)> = small.iter().map(|(m, s)| (b(m), *s)).collect();
        // Listed out of order: the listpack must still come out sorted, as in Redis.
        let shuffled = vec![entries[2].clone(), entries[0].clone(), entries[1].clone()];
        assert_eq!(dump(&DumpValue::ZSet(shuffled)), hex(Z_SMALL));
        let skip = [
            ("big", f64::INFINITY),
            ("two", 2.5),
            ("one", 1.0),
            ("tenth", 0.1),
            ("three", -3.0),
            ("small", f64::NEG_INFINITY),
        ];
        assert_eq!(sorted_zset(restored(Z_SKIP)), zset(&skip));
    }

    #[test]
    fn zset_scores_survive_listpack_text_form() {
        let scores = [
            0.0,
            -0.0,
            0.1,
            -2.5,
            1e300,
            -1e-300,
            4_503_599_627_370_496.0,
            -4_503_599_627_370_495.0,
            123_456_789.0,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        let entries: Vec<(Vec<u8>, f64)> = scores
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("m{i}").into_bytes(), *s))
            .collect();
        let payload = dump(&DumpValue::ZSet(entries.clone()));
        assert_eq!(payload[0], TYPE_ZSET_LISTPACK);
        let expected: Vec<(Vec<u8>, u64)> = {
            let mut e: Vec<_> = entries
                .iter()
                .map(|(m, s)| (m.clone(), s.to_bits()))
                .collect();
            e.sort();
            e
        };
        assert_eq!(sorted_zset(restore(&payload).expect("restores")), expected);
    }

    #[test]
    fn large_collections_use_generic_encodings() {
        let members: Vec<Vec<u8>> = (0..600).map(|i| format!("{i}").into_bytes()).collect();
        let payload = dump(&DumpValue::Set(members.clone()));
        assert_eq!(payload[0], TYPE_SET);
        assert_eq!(sorted_set(restore(&payload).expect("set")), {
            let mut m = members.clone();
            m.sort();
            m
        });
        let pairs: Vec<_> = members.iter().map(|m| (m.clone(), m.clone())).collect();
        let payload = dump(&DumpValue::Hash(pairs.clone()));
        assert_eq!(payload[0], TYPE_HASH);
        assert_eq!(restore(&payload), Ok(DumpValue::Hash(pairs)));
        let entries: Vec<_> = members.iter().map(|m| (m.clone(), 1.5)).collect();
        let payload = dump(&DumpValue::ZSet(entries.clone()));
        assert_eq!(payload[0], TYPE_ZSET_2);
        assert_eq!(restore(&payload), Ok(DumpValue::ZSet(entries)));
    }

    #[test]
    fn long_lists_split_into_nodes() {
        let items: Vec<Vec<u8>> = (0..5000)
            .map(|i| format!("element-{i}-{}", "z".repeat(i % 40)).into_bytes())
            .collect();
        let nodes = build_list_nodes(&items);
        assert!(nodes.len() > 10);
        for node in &nodes {
            match node {
                ListNode::Packed(lp) => assert!(lp.len() <= LIST_NODE_MAX_BYTES),
                ListNode::Plain(_) => panic!("unexpected plain node"),
            }
        }
        let big = vec![vec![b'q'; 20000], b("x"), prng(9000, 4)];
        for list in [items, big] {
            let value = DumpValue::List(list);
            assert_eq!(dump_then_restore(&value), value);
        }
    }

    // ---- Legacy encodings (hand-built) ------------------------------------------

    /// Builds a ziplist with Redis's encodings.
    fn ziplist(entries: &[&[u8]]) -> Vec<u8> {
        let mut body = Vec::new();
        let mut prev = 0usize;
        let mut tail = 10usize;
        for e in entries {
            let start = body.len();
            tail = 10 + start;
            if prev < 254 {
                body.push(prev as u8);
            } else {
                body.push(254);
                body.extend_from_slice(&(prev as u32).to_le_bytes());
            }
            zip_payload(&mut body, e);
            prev = body.len() - start;
        }
        let mut out = Vec::new();
        out.extend_from_slice(&((body.len() + 11) as u32).to_le_bytes());
        out.extend_from_slice(&(tail as u32).to_le_bytes());
        out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        out.extend(body);
        out.push(0xFF);
        out
    }

    fn zip_payload(out: &mut Vec<u8>, e: &[u8]) {
        match parse_canonical_i64(e) {
            Some(v @ 0..=12) => out.push(0xF1 + v as u8),
            Some(v) if i8::try_from(v).is_ok() => {
                out.push(0xFE);
                out.push(v as u8);
            }
            Some(v) if i16::try_from(v).is_ok() => {
                out.push(0xC0);
                out.extend_from_slice(&(v as i16).to_le_bytes());
            }
            Some(v) if (-(1 << 23)..(1 << 23)).contains(&v) => {
                out.push(0xF0);
                out.extend_from_slice(&v.to_le_bytes()[..3]);
            }
            Some(v) if i32::try_from(v).is_ok() => {
                out.push(0xD0);
                out.extend_from_slice(&(v as i32).to_le_bytes());
            }
            Some(v) => {
                out.push(0xE0);
                out.extend_from_slice(&v.to_le_bytes());
            }
            None if e.len() < 64 => {
                out.push(e.len() as u8);
                out.extend_from_slice(e);
            }
            None if e.len() < 16384 => {
                out.push(0x40 | (e.len() >> 8) as u8);
                out.push(e.len() as u8);
                out.extend_from_slice(e);
            }
            None => {
                out.push(0x80);
                out.extend_from_slice(&(e.len() as u32).to_be_bytes());
                out.extend_from_slice(e);
            }
        }
    }

    fn raw_string(out: &mut Vec<u8>, s: &[u8]) {
        write_len(out, s.len());
        out.extend_from_slice(s);
    }

    fn zip_values() -> Vec<Vec<u8>> {
        let mut v = strs(&[
            "0",
            "12",
            "13",
            "-1",
            "127",
            "-128",
            "300",
            "-32768",
            "40000",
            "-8388608",
            "8388608",
            "2147483647",
            "-2147483649",
            "9223372036854775807",
            "abc",
            "",
        ]);
        v.push(vec![b'w'; 300]);
        v.push(b("after-big"));
        v
    }

    #[test]
    fn restores_ziplist_types() {
        let values = zip_values();
        let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        let zl = ziplist(&refs);
        let mut body = vec![TYPE_LIST_ZIPLIST];
        write_string(&mut body, &zl);
        assert_eq!(
            restore(&with_footer(&body)),
            Ok(DumpValue::List(values.clone()))
        );

        let mut body = vec![TYPE_LIST_QUICKLIST];
        write_len(&mut body, 2);
        write_string(&mut body, &zl);
        raw_string(&mut body, &ziplist(&[b"tail"]));
        let mut expected = values.clone();
        expected.push(b("tail"));
        assert_eq!(restore(&with_footer(&body)), Ok(DumpValue::List(expected)));

        let zl = ziplist(&[b"f", b"1", b"g", b"hello"]);
        let mut body = vec![TYPE_HASH_ZIPLIST];
        raw_string(&mut body, &zl);
        let pairs = vec![(b("f"), b("1")), (b("g"), b("hello"))];
        assert_eq!(restore(&with_footer(&body)), Ok(DumpValue::Hash(pairs)));

        let zl = ziplist(&[b"a", b"-5", b"b", b"2.5", b"c", b"inf"]);
        let mut body = vec![TYPE_ZSET_ZIPLIST];
        raw_string(&mut body, &zl);
        let entries = vec![(b("a"), -5.0), (b("b"), 2.5), (b("c"), f64::INFINITY)];
        assert_eq!(restore(&with_footer(&body)), Ok(DumpValue::ZSet(entries)));
    }

    #[test]
    fn restores_linked_list_and_old_zset() {
        let mut body = vec![TYPE_LIST];
        write_len(&mut body, 3);
        for s in [&b"x"[..], b"42", &[b'r'; 40]] {
            write_string(&mut body, s);
        }
        let expected = vec![b("x"), b("42"), vec![b'r'; 40]];
        assert_eq!(restore(&with_footer(&body)), Ok(DumpValue::List(expected)));

        let mut body = vec![TYPE_ZSET];
        write_len(&mut body, 3);
        for (m, score) in [(&b"a"[..], &b"1.5"[..]), (b"b", b"-2e3"), (b"c", b"")] {
            write_string(&mut body, m);
            if score.is_empty() {
                body.push(255);
            } else {
                body.push(score.len() as u8);
                body.extend_from_slice(score);
            }
        }
        let entries = vec![
            (b("a"), 1.5),
            (b("b"), -2000.0),
            (b("c"), f64::NEG_INFINITY),
        ];
        assert_eq!(restore(&with_footer(&body)), Ok(DumpValue::ZSet(entries)));
    }

    // ---- Errors -------------------------------------------------------------------

    #[test]
    fn footer_errors_are_bad_payload() {
        let good = hex(S_HELLO);
        assert_eq!(restore(&[]), Err(RestoreError::BadPayload));
        assert_eq!(restore(&good[..9]), Err(RestoreError::BadPayload));
        let mut bad_crc = good.clone();
        *bad_crc.last_mut().expect("non-empty") ^= 1;
        assert_eq!(restore(&bad_crc), Err(RestoreError::BadPayload));
        let mut bad_body = good.clone();
        bad_body[3] ^= 1;
        assert_eq!(restore(&bad_body), Err(RestoreError::BadPayload));

        let body = &good[..good.len() - FOOTER_LEN];
        let with_version = |v: u16| {
            let mut p = body.to_vec();
            p.extend_from_slice(&v.to_le_bytes());
            let crc = crc64(0, &p);
            p.extend_from_slice(&crc.to_le_bytes());
            p
        };
        assert_eq!(restore(&with_version(11)), Err(RestoreError::BadPayload));
        assert_eq!(restore(&with_version(9)), Ok(DumpValue::Str(b("hello"))));
        assert_eq!(
            RestoreError::BadPayload.message(),
            "ERR DUMP payload version or checksum are wrong"
        );
        assert_eq!(RestoreError::Corrupt.message(), "ERR Bad data format");
    }

    #[test]
    fn semantic_errors_are_corrupt() {
        let corrupt = |body: &[u8]| restore(&with_footer(body));
        assert_eq!(corrupt(&[]), Err(RestoreError::Corrupt));
        assert_eq!(corrupt(&[6, 0]), Err(RestoreError::Corrupt), "module type");
        assert_eq!(
            corrupt(&[0, 1, b'a', 0]),
            Err(RestoreError::Corrupt),
            "trailing"
        );
        assert_eq!(corrupt(&[0, 0xC4]), Err(RestoreError::Corrupt), "bad enc");
        assert_eq!(corrupt(&[TYPE_SET, 0]), Err(RestoreError::Corrupt), "empty");
        assert_eq!(
            corrupt(&[TYPE_SET, 2, 1, b'a', 1, b'a']),
            Err(RestoreError::Corrupt)
        );
        assert_eq!(
            corrupt(&[TYPE_HASH, 1, 0xC5, 1, b'v']),
            Err(RestoreError::Corrupt)
        );
        let mut nan = vec![TYPE_ZSET_2, 1, 1, b'm'];
        nan.extend_from_slice(&f64::NAN.to_le_bytes());
        assert_eq!(corrupt(&nan), Err(RestoreError::Corrupt));
        assert_eq!(
            corrupt(&[TYPE_ZSET, 1, 1, b'm', 253]),
            Err(RestoreError::Corrupt)
        );
        // Huge counts with no data must fail fast without allocating.
        let huge = [
            TYPE_LIST, 0x81, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ];
        assert_eq!(corrupt(&huge), Err(RestoreError::Corrupt));
        let huge_lzf = [TYPE_STRING, 0xC3, 2, 0x80, 0xff, 0xff, 0xff, 0xff, 0, b'a'];
        assert_eq!(corrupt(&huge_lzf), Err(RestoreError::Corrupt));
        let empty_lp = listpack::Builder::new().finish();
        let mut body = vec![TYPE_HASH_LISTPACK];
        raw_string(&mut body, &empty_lp);
        assert_eq!(corrupt(&body), Err(RestoreError::Corrupt));
        let mut body = vec![TYPE_LIST_QUICKLIST_2, 1, 2];
        raw_string(&mut body, &empty_lp);
        assert_eq!(corrupt(&body), Err(RestoreError::Corrupt));
    }

    #[test]
    fn canonical_integers() {
        for (s, v) in [
            ("0", Some(0)),
            ("-1", Some(-1)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-9223372036854775809", None),
            ("-0", None),
            ("+1", None),
            ("01", None),
            ("", None),
            ("-", None),
            (" 1", None),
            ("1a", None),
        ] {
            assert_eq!(parse_canonical_i64(s.as_bytes()), v, "{s:?}");
        }
    }

    // ---- LZF ------------------------------------------------------------------------

    #[test]
    fn lzf_rejects_bad_streams() {
        assert_eq!(lzf::decompress(&[0, b'a'], 1), Some(b("a")));
        assert_eq!(lzf::decompress(&[0, b'a'], 2), None, "too short");
        assert_eq!(lzf::decompress(&[1, b'a'], 2), None, "truncated literal");
        assert_eq!(
            lzf::decompress(&[0x20, 0], 3),
            None,
            "reference before start"
        );
        assert_eq!(lzf::decompress(&[0, b'a', 0x20, 0], 4), Some(b("aaaa")));
        assert_eq!(lzf::decompress(&[0, b'a', 0xE0], 10), None, "truncated ref");
        assert_eq!(lzf::decompress(&[], 0), None);
    }

    // ---- Property tests ----------------------------------------------------------

    fn element() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            any::<i64>().prop_map(|v| v.to_string().into_bytes()),
            (-200i64..200).prop_map(|v| v.to_string().into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..80),
            (1usize..200, any::<u8>()).prop_map(|(n, c)| vec![c; n]),
            proptest::collection::vec(any::<u8>(), 4000..5000),
            "[a-c]{0,300}".prop_map(String::into_bytes),
        ]
    }

    fn score() -> impl Strategy<Value = f64> {
        prop_oneof![
            any::<f64>().prop_filter("not NaN", |s| !s.is_nan()),
            (-1000i64..1000).prop_map(|v| v as f64),
            (-1000i64..1000).prop_map(|v| v as f64 / 8.0),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(-0.0),
        ]
    }

    fn unique(items: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let mut seen = HashSet::new();
        items
            .into_iter()
            .filter(|i| seen.insert(i.clone()))
            .collect()
    }

    fn value() -> impl Strategy<Value = DumpValue> {
        let elems = |max| proptest::collection::vec(element(), 1..max);
        let int_set = proptest::collection::vec(any::<i32>(), 1..600)
            .prop_map(|v| v.into_iter().map(|i| i.to_string().into_bytes()).collect());
        prop_oneof![
            element().prop_map(DumpValue::Str),
            elems(60).prop_map(DumpValue::List),
            elems(60).prop_map(|v| DumpValue::Set(unique(v))),
            int_set.prop_map(|v| DumpValue::Set(unique(v))),
            (elems(60), proptest::collection::vec(element(), 60))
                .prop_map(|(f, v)| { DumpValue::Hash(unique(f).into_iter().zip(v).collect()) }),
            (elems(150), proptest::collection::vec(score(), 150))
                .prop_map(|(m, s)| { DumpValue::ZSet(unique(m).into_iter().zip(s).collect()) }),
        ]
    }

    /// Sets come back sorted when stored as intsets; compare them as sets.
    fn normalized(v: DumpValue) -> DumpValue {
        match v {
            DumpValue::Set(mut m) => {
                m.sort();
                DumpValue::Set(m)
            }
            DumpValue::ZSet(e) => {
                let mut e: Vec<_> = e
                    .into_iter()
                    .map(|(m, s)| (m, s.to_bits() as f64))
                    .collect();
                e.sort_by(|a, b| a.0.cmp(&b.0));
                DumpValue::ZSet(e)
            }
            other => other,
        }
    }

    fn mutate(payload: &mut Vec<u8>, ops: &[(usize, u8, u8)]) {
        for &(pos, byte, op) in ops {
            if payload.is_empty() {
                payload.push(byte);
                continue;
            }
            let at = pos % payload.len();
            match op % 4 {
                0 => payload[at] ^= byte | 1,
                1 => payload[at] = byte,
                2 => payload.insert(at, byte),
                _ => {
                    payload.remove(at);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn prop_round_trip(v in value()) {
            let payload = dump(&v);
            let back = restore(&payload).expect("round trip");
            prop_assert_eq!(normalized(back), normalized(v));
        }

        #[test]
        fn prop_lzf_round_trip(data in element(), extra in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut input = data.clone();
            input.extend_from_slice(&extra);
            input.extend_from_slice(&data);
            if let Some(c) = lzf::compress(&input, input.len() + 64) {
                prop_assert_eq!(lzf::decompress(&c, input.len()), Some(input));
            } else {
                // With room for 64 bytes of growth only inputs too short to hold a
                // back-reference (liblzf's minimum is 3 bytes) are refused.
                prop_assert!(input.len() < 3);
            }
        }

        #[test]
        fn prop_truncation_never_panics(v in value(), cut in any::<usize>()) {
            let payload = dump(&v);
            let cut = cut % payload.len();
            prop_assert!(restore(&payload[..cut]).is_err());
            // Truncated body with a valid footer: must be rejected, not panic.
            let body = &payload[..payload.len() - FOOTER_LEN];
            let _ = restore(&with_footer(&body[..cut.min(body.len())]));
        }

        #[test]
        fn prop_mutations_never_panic(
            v in value(),
            ops in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..6),
        ) {
            let payload = dump(&v);
            let mut body = payload[..payload.len() - FOOTER_LEN].to_vec();
            let mut raw = payload.clone();
            mutate(&mut raw, &ops);
            if raw != payload {
                prop_assert!(restore(&raw).is_err());
            }
            // Re-checksummed mutations reach the decoder itself.
            mutate(&mut body, &ops);
            let _ = restore(&with_footer(&body));
        }

        #[test]
        fn prop_random_bodies_never_panic(
            ty in prop_oneof![0u8..20, any::<u8>()],
            body in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut full = vec![ty];
            full.extend(body);
            let _ = restore(&with_footer(&full));
        }

        #[test]
        fn prop_mutated_redis_vectors_never_panic(
            which in 0usize..10,
            ops in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..4),
        ) {
            let vectors = [
                L_SMALL, L_ENC, L_MULTI, L_PLAIN, SET_INT, H_SMALL, H_HT, Z_SMALL, Z_SKIP,
                S_300PAT,
            ];
            let payload = hex(vectors[which]);
            let mut body = payload[..payload.len() - FOOTER_LEN].to_vec();
            mutate(&mut body, &ops);
            let _ = restore(&with_footer(&body));
        }
    }
}

#[cfg(test)]
mod stream_tests {
    use super::*;
    use crate::storage::stream::{ConsumerGroup, NodeLimits, StreamId, Trim, ENTRIES_READ_INVALID};
    use proptest::prelude::*;
    use std::sync::Arc;

    /// DUMP from redis-server 7.0.15 (`stream-node-max-entries 3`) of the stream that
    /// `golden_stream` builds: three nodes, tombstones, integer-looking values, a value
    /// over 64 bytes, entries with and without the master fields, one group.
    const GOLDEN: &str = "13031000000000000000010000000000000001404f4f0000001900020101010201846e616d65058361676504000102010001000185616c696365061e01050103010001040183626f62042901050100010101dfff020101856f7468657206dff9020601ff1000000000000000050000000000000003c3405c409c179c0000001900020101010201846e616d6505836167650400200e0000200113856361726f6c06f4cb04fb711f01000009050103202b0cdffd02846461766505817802052026030201dffe204305816b02e04676e03c0003480601ff100000000000000009000000000000000929290000000c00010100010201846e616d650583616765040001020100010001836576650405010501ff05090901010600070103677270050381ffffffffffffffff00000a0038c8c396921f5f11";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn lim(n: usize) -> NodeLimits {
        NodeLimits {
            max_entries: n,
            max_bytes: 4096,
        }
    }

    fn golden_stream() -> StreamValue {
        let mut s = StreamValue::new();
        let long = "v".repeat(70);
        let adds: [(u64, u64, &[&str]); 7] = [
            (1, 1, &["name", "alice", "age", "30"]),
            (1, 5, &["name", "bob", "age", "41"]),
            (2, 0, &["other", "-7"]),
            (5, 3, &["name", "carol", "age", "1234567890123"]),
            (6, 0, &["name", "dave", "age", "x"]),
            (7, 1, &["k", &long]),
            (9, 9, &["name", "eve", "age", "5"]),
        ];
        for (ms, seq, fields) in adds {
            let f: Vec<&[u8]> = fields.iter().map(|f| f.as_bytes()).collect();
            s.append(StreamId::new(ms, seq), &f, lim(3));
        }
        s.delete(StreamId::new(1, 5));
        s.delete(StreamId::new(6, 0));
        s.groups.insert(
            b"grp".to_vec(),
            ConsumerGroup::new(StreamId::new(5, 3), ENTRIES_READ_INVALID),
        );
        s
    }

    fn stream_of(v: DumpValue) -> StreamValue {
        match v {
            DumpValue::Stream(s) => *s,
            other => panic!("not a stream: {other:?}"),
        }
    }

    #[test]
    fn golden_payload_matches_redis() {
        let s = golden_stream();
        let mut out = Vec::new();
        dump_stream(&s, &mut out);
        assert_eq!(out, hex(GOLDEN));
        let back = stream_of(restore(&hex(GOLDEN)).unwrap());
        assert_eq!(back, s);
    }

    /// The payload of Redis's "Loading from legacy (Redis <= v6.2.x, rdb_ver < 10)
    /// persistence" test (type 15, DUMPed by Redis 5 after six XADDs, an XDEL, two
    /// groups, a read of four entries by g1 and XTRIM MAXLEN = 2).
    const LEGACY: &str = "0f011000000000000000010000000000000000c3404a405716570000002300020104010101846461746105000103010020010381610204200a0001400a0062600a0002400a0063600a4022018164200a4039200a0065600a0005400a0066200a00ff02060002026731050004000000000000000100000000000000003ef783437a01000001000000000000000200000000000000003ef783437a01000001000000000000000400000000000000003ef783437a01000001000000000000000500000000000000003ef783437a0100000101036331313ef783437a01000004000000000000000100000000000000000000000000000002000000000000000000000000000000040000000000000000000000000000000500000000000000000267320000000009003d52ef6867521dfa";

    #[test]
    fn legacy_payload_computes_7_0_fields() {
        let s = stream_of(restore(&hex(LEGACY)).unwrap());
        assert_eq!(s.len(), 2);
        // As Redis 7.0 computes them on load (the Tcl test checks the same values).
        assert_eq!(s.entries_added, 2);
        assert_eq!(s.max_deleted_id, StreamId::ZERO);
        assert_eq!(s.first_id, StreamId::new(5, 0));
        let g1 = &s.groups[&b"g1"[..]];
        assert_eq!((g1.entries_read, s.group_lag(g1)), (1, Some(1)));
        assert_eq!(g1.pel.len(), 4);
        let g2 = &s.groups[&b"g2"[..]];
        assert_eq!((g2.entries_read, s.group_lag(g2)), (0, Some(2)));
        // Written back as a 7.0 payload, it loads to the same stream.
        let mut out = Vec::new();
        dump_stream(&s, &mut out);
        assert_eq!(stream_of(restore(&out).unwrap()), s);
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

    #[test]
    fn empty_stream_with_group_round_trips() {
        let mut s = StreamValue::new();
        s.last_id = StreamId::new(5, 0);
        s.groups
            .insert(b"g".to_vec(), ConsumerGroup::new(StreamId::new(5, 0), 0));
        let mut out = Vec::new();
        dump_stream(&s, &mut out);
        assert_eq!(stream_of(restore(&out).unwrap()), s);
    }

    #[test]
    fn huge_counts_are_refused_without_allocating() {
        // Node count, then a node key, claiming 2^62 nodes / groups / PEL entries.
        for body in [
            &b"\x13\x81\x40\x00\x00\x00\x00\x00\x00\x00"[..],
            b"\x13\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x81\x40\x00\x00\x00\x00\x00\x00\x00",
            b"\x13\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x01g\x00\x00\x00\x81\x40\x00\x00\x00\x00\x00\x00\x00",
        ] {
            let mut payload = body.to_vec();
            finish_payload(&mut payload, 0);
            assert_eq!(restore(&payload), Err(RestoreError::Corrupt));
        }
    }

    #[test]
    fn inconsistent_streams_are_refused() {
        let s = golden_stream();
        // Length that disagrees with the nodes, last ID below the last entry,
        // entries-added below the length.
        let mut bad = s.clone();
        bad.last_id = StreamId::new(9, 8);
        let mut too_few_added = s.clone();
        too_few_added.entries_added = 2;
        for v in [bad, too_few_added] {
            let mut out = Vec::new();
            dump_stream(&v, &mut out);
            assert_eq!(restore(&out), Err(RestoreError::Corrupt));
        }
        // A PEL entry no consumer owns.
        let mut orphan = s;
        if let Some(g) = orphan.groups.get_mut(&b"grp"[..]) {
            let who: Arc<[u8]> = Arc::from(&b"c"[..]);
            g.create_consumer(b"c", 1);
            g.deliver(StreamId::new(1, 1), &who, 2);
            g.delete_consumer(b"c");
            g.pel.insert(
                StreamId::new(1, 1),
                crate::storage::stream::PendingEntry {
                    consumer: who,
                    delivery_time: 2,
                    delivery_count: 1,
                },
            );
        }
        let mut out = Vec::new();
        dump_stream(&orphan, &mut out);
        assert_eq!(restore(&out), Err(RestoreError::Corrupt));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u64, u64, Vec<(u8, u8)>),
        Del(usize),
        Trim(u64, bool),
        Group(u8, usize),
        Read(u8, u8, usize),
        Ack(u8, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let fields = proptest::collection::vec((0u8..4, any::<u8>()), 0..4);
        prop_oneof![
            6 => (0u64..3, 0u64..3, fields).prop_map(|(d, s, f)| Op::Add(d, s, f)),
            2 => any::<usize>().prop_map(Op::Del),
            1 => (0u64..40, any::<bool>()).prop_map(|(n, a)| Op::Trim(n, a)),
            1 => (0u8..3, any::<usize>()).prop_map(|(g, i)| Op::Group(g, i)),
            2 => (0u8..3, 0u8..3, 1usize..5).prop_map(|(g, c, n)| Op::Read(g, c, n)),
            1 => (0u8..3, any::<usize>()).prop_map(|(g, i)| Op::Ack(g, i)),
        ]
    }

    fn field_bytes(f: u8, v: u8) -> [Vec<u8>; 2] {
        let field = [
            b"name".to_vec(),
            b"n".to_vec(),
            b"123".to_vec(),
            vec![b'x'; 70],
        ];
        let value = match v % 4 {
            0 => v.to_string().into_bytes(),
            1 => format!("-{v}").into_bytes(),
            2 => vec![v; usize::from(v)],
            _ => format!("0{v}").into_bytes(),
        };
        [field[usize::from(f)].clone(), value]
    }

    fn apply(s: &mut StreamValue, o: Op, per_node: usize, now: &mut u64) {
        *now += 1;
        match o {
            Op::Add(dms, seq, fields) => {
                let id = StreamId::new(s.last_id.ms + dms, s.last_id.seq + seq + 1);
                let owned: Vec<Vec<u8>> = fields
                    .iter()
                    .flat_map(|(f, v)| field_bytes(*f, *v))
                    .collect();
                let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
                s.append(id, &refs, lim(per_node));
            }
            Op::Del(i) => {
                let ids: Vec<StreamId> = s
                    .range(StreamId::ZERO, StreamId::MAX, false)
                    .map(|e| e.id)
                    .collect();
                if !ids.is_empty() {
                    s.delete(ids[i % ids.len()]);
                }
            }
            Op::Trim(n, approx) => {
                s.trim(Trim::MaxLen(n), approx, 0);
            }
            Op::Group(g, i) => {
                let name = vec![b'g', g];
                let ids: Vec<StreamId> = s
                    .range(StreamId::ZERO, StreamId::MAX, false)
                    .map(|e| e.id)
                    .collect();
                let at = ids
                    .get(i % ids.len().max(1))
                    .copied()
                    .unwrap_or(StreamId::ZERO);
                let read = s.estimate_distance(at);
                s.groups.entry(name).or_insert(ConsumerGroup::new(at, read));
            }
            Op::Read(g, c, n) => {
                let name = vec![b'g', g];
                let Some(last) = s.groups.get(&name).map(|g| g.last_id) else {
                    return;
                };
                let start = last.incr().unwrap_or(StreamId::MAX);
                let ids: Vec<StreamId> = s
                    .range(start, StreamId::MAX, false)
                    .take(n)
                    .map(|e| e.id)
                    .collect();
                for id in ids {
                    s.advance_group(&name, id);
                    if let Some(grp) = s.groups.get_mut(&name) {
                        let who = grp.touch_consumer(&[b'c', c], *now);
                        grp.deliver(id, &who, *now);
                    }
                }
            }
            Op::Ack(g, i) => {
                if let Some(grp) = s.groups.get_mut(&vec![b'g', g]) {
                    let ids: Vec<StreamId> = grp.pel.keys().copied().collect();
                    if !ids.is_empty() {
                        grp.ack(ids[i % ids.len()]);
                    }
                }
            }
        }
    }

    fn build(ops: &[Op], per_node: usize) -> StreamValue {
        let mut s = StreamValue::new();
        let mut now = 1_700_000_000_000;
        for o in ops {
            apply(&mut s, o.clone(), per_node, &mut now);
        }
        s
    }

    proptest! {
        #[test]
        fn stream_round_trips(ops in proptest::collection::vec(op(), 0..120), per_node in 1usize..6) {
            let s = build(&ops, per_node);
            let mut out = Vec::new();
            dump_stream(&s, &mut out);
            let back = stream_of(restore(&out).unwrap());
            prop_assert_eq!(&back, &s);
            let mut again = Vec::new();
            dump_stream(&back, &mut again);
            prop_assert_eq!(again, out);
        }

        /// Corrupted payloads (with a valid checksum, so the decoder sees them) are
        /// refused or decode to a stream that itself round-trips; never a panic.
        #[test]
        fn corrupt_streams_never_panic(
            ops in proptest::collection::vec(op(), 1..60),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..4), 1..4),
        ) {
            let s = build(&ops, 3);
            let mut body = Vec::new();
            dump_stream(&s, &mut body);
            body.truncate(body.len() - FOOTER_LEN);
            for (at, byte, kind) in edits {
                if body.is_empty() {
                    break;
                }
                let at = at % body.len();
                match kind {
                    0 => body[at] = byte,
                    1 => body[at] ^= 1 << (byte % 8),
                    2 => body.truncate(at),
                    _ => body.insert(at, byte),
                }
            }
            let mut payload = body.clone();
            finish_payload(&mut payload, 0);
            if let Ok(DumpValue::Stream(v)) = restore(&payload) {
                let mut out = Vec::new();
                dump_stream(&v, &mut out);
                prop_assert_eq!(stream_of(restore(&out).unwrap()), *v);
            }
        }
    }
}
