//! The RDB format (version 10, as Redis 7.0 writes it): `DUMP` / `RESTORE` payloads
//! and the snapshot files sent to replicas. This folder owns every byte of it; the
//! value types in `storage` know nothing of it.
//!
//! * `mod.rs` (here): the payload API (`dump`, `dump_value`, `restore`, `crc64`), the
//!   `DumpValue` a payload decodes to, the type and string-encoding constants and the
//!   payload footer;
//! * `value.rs`: keyspace values to `DumpValue` and back;
//! * `encode.rs` / `decode.rs`: the value encodings, written and read;
//! * `listpack.rs`, `ziplist.rs`, `intset.rs`, `stream.rs`: the packed and stream
//!   encodings; `elem.rs`: the integer-as-text rules they share;
//! * `lzf.rs`, `crc64.rs`: string compression and the checksum;
//! * `file.rs`: RDB file framing (magic, AUX, SELECTDB, EXPIRETIME_MS, EOF + CRC64);
//!   `records.rs`: reading a whole file back, record by record.
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

use std::fmt;

use super::stream::StreamValue;

mod crc64;
mod decode;
mod elem;
mod encode;
pub mod file;
mod intset;
mod listpack;
mod lzf;

/// LZF with Redis's choices, for list nodes kept compressed (`list-compress-depth`):
/// `None` when the result would exceed `max_out` bytes.
pub fn lzf_compress(input: &[u8], max_out: usize) -> Option<Vec<u8>> {
    lzf::compress(input, max_out)
}

/// The inverse of `lzf_compress`; `None` unless `input` expands to exactly `len`.
pub fn lzf_decompress(input: &[u8], len: usize) -> Option<Vec<u8>> {
    lzf::decompress(input, len)
}
pub mod records;
mod stream;
mod value;
mod ziplist;

use decode::{read_value, Reader};
use encode::{write_hash, write_hash_ex, write_list, write_set, write_string, write_zset};
pub use value::dump_value;

/// The RDB version written in (and the highest accepted from) payload footers.
pub const RDB_VERSION: u16 = 10;

const TYPE_STRING: u8 = 0;
const TYPE_LIST: u8 = 1;
const TYPE_SET: u8 = 2;
const TYPE_ZSET: u8 = 3;
const TYPE_HASH: u8 = 4;
const TYPE_ZSET_2: u8 = 5;
/// Module values: Tessera loads no modules, so a file holding one is refused.
const TYPE_MODULE_PRE_GA: u8 = 6;
const TYPE_MODULE_2: u8 = 7;
/// Redis <= 2.4 hashes.
const TYPE_HASH_ZIPMAP: u8 = 9;
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
/// Redis 7.4 release candidates' hashes with field TTLs: absolute deadlines, no
/// leading earliest deadline (read only).
const TYPE_HASH_METADATA_PRE_GA: u8 = 22;
const TYPE_HASH_LISTPACK_EX_PRE_GA: u8 = 23;
/// Redis 7.4's hashes with field TTLs: the earliest deadline, then per field its
/// deadline relative to it (+1; 0 for none), the field and the value.
const TYPE_HASH_METADATA: u8 = 24;
/// Redis 7.4's listpack hash with field TTLs: the earliest deadline, then a listpack
/// of (field, value, deadline or 0) triplets, earliest deadline first.
const TYPE_HASH_LISTPACK_EX: u8 = 25;
/// Latest deadline a field may carry (Redis's EB_EXPIRE_TIME_MAX, 48 bits).
const FIELD_DEADLINE_MAX: u64 = 0xFFFF_FFFF_FFFF;

const ENC_INT8: u8 = 0;
const ENC_INT16: u8 = 1;
const ENC_INT32: u8 = 2;
const ENC_LZF: u8 = 3;

const QUICKLIST_NODE_PLAIN: usize = 1;
const QUICKLIST_NODE_PACKED: usize = 2;

/// Footer: 2-byte RDB version + 8-byte CRC64.
const FOOTER_LEN: usize = 10;

/// A value as carried by a DUMP payload.
#[derive(Debug, Clone, PartialEq)]
pub enum DumpValue {
    Str(Vec<u8>),
    List(Vec<Vec<u8>>),
    Set(Vec<Vec<u8>>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// A hash some of whose fields have deadlines: (field, value, deadline in unix
    /// ms, 0 for none), written in Redis 7.4's types (24, 25).
    HashEx(Vec<(Vec<u8>, Vec<u8>, u64)>),
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
    /// A well-formed collection with no elements: Redis refuses it in a payload, and
    /// skips it (with a log line) in an RDB file, where old versions could write one.
    Empty,
}

impl RestoreError {
    /// The exact error reply Redis sends for this failure.
    pub fn message(&self) -> &'static str {
        match self {
            RestoreError::BadPayload => "ERR DUMP payload version or checksum are wrong",
            RestoreError::Corrupt | RestoreError::Empty => "ERR Bad data format",
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
    write_dump_value(&mut out, value);
    finish_payload(&mut out, 0);
    out
}

/// Writes `value`'s type byte and serialized value (a payload without its footer).
fn write_dump_value(out: &mut Vec<u8>, value: &DumpValue) {
    match value {
        DumpValue::Str(s) => {
            out.reserve(s.len() + 16);
            out.push(TYPE_STRING);
            write_string(out, s);
        }
        DumpValue::List(items) => write_list(out, items),
        DumpValue::Set(members) => write_set(out, members),
        DumpValue::Hash(pairs) => write_hash(out, pairs),
        DumpValue::HashEx(fields) => write_hash_ex(out, fields),
        DumpValue::ZSet(entries) => write_zset(out, entries),
        DumpValue::Stream(s) => {
            out.push(TYPE_STREAM_LISTPACKS_2);
            stream::write(out, s);
        }
    }
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

/// `rdbcompression`: strings longer than 20 bytes are LZF-compressed in DUMP payloads
/// and RDB files (when that saves 4 bytes). A process-wide copy of the setting, kept
/// by `set_compression` at start and on CONFIG SET.
static COMPRESSION: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

pub fn set_compression(on: bool) {
    COMPRESSION.store(on, std::sync::atomic::Ordering::Relaxed);
}

fn compression() -> bool {
    COMPRESSION.load(std::sync::atomic::Ordering::Relaxed)
}

/// Redis's CRC64 (Jones polynomial, reflected, no final xor), continuing from `crc`.
pub fn crc64(crc: u64, data: &[u8]) -> u64 {
    crc64::update(crc, data)
}

/// Appends `s` as an RDB string, encoded as Redis's `rdbSaveRawString` encodes it
/// (integer, LZF or verbatim). For records other than keys' values: FUNCTION DUMP's
/// and snapshots' function libraries.
pub fn write_rdb_string(out: &mut Vec<u8>, s: &[u8]) {
    write_string(out, s);
}

/// Reads the RDB string (verbatim, integer or LZF) at the start of `buf`: its bytes
/// and how many bytes of `buf` it took. None when it is malformed or runs past `buf`.
pub fn read_rdb_string(buf: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut r = Reader::new(buf);
    let s = r.string().ok()?;
    Some((s, r.pos()))
}

/// Reads the RDB length (`rdbLoadLen`, not an encoded string) at the start of `buf`:
/// its value and how many bytes of `buf` it took.
pub fn read_rdb_len(buf: &[u8]) -> Option<(usize, usize)> {
    let mut r = Reader::new(buf);
    let n = r.len().ok()?;
    Some((n, r.pos()))
}

fn finish_payload(out: &mut Vec<u8>, start: usize) {
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(0, &out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// DEBUG SET-SKIP-CHECKSUM-VALIDATION: RESTORE and RDB loading accept a wrong
/// checksum (Redis's tests feed corrupt payloads to the decoder this way).
static SKIP_CHECKSUM_VALIDATION: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

pub fn set_skip_checksum_validation(on: bool) {
    SKIP_CHECKSUM_VALIDATION.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether a load should check the file's CRC64, given `rdbchecksum`.
pub fn validate_checksum(rdbchecksum: bool) -> bool {
    rdbchecksum && !SKIP_CHECKSUM_VALIDATION.load(std::sync::atomic::Ordering::Relaxed)
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
    if validate_checksum(true) && crc != expected.to_le_bytes() {
        return Err(RestoreError::BadPayload);
    }
    Ok(body)
}

#[cfg(test)]
mod tests;
