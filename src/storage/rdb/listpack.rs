//! Listpacks: what Redis 7.0 packs small lists (as quicklist nodes), hashes, sorted
//! sets and stream nodes into. Written byte for byte as Redis's `lpAppend` would,
//! decoded with every check of Redis's deep integrity validation.

use super::elem::Elem;
use super::{Res, RestoreError};
use crate::util::string2ll;

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
        match string2ll(s) {
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
