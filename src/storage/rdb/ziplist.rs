//! Ziplists, read only: Redis before 7.0 stored small lists (RDB types 10 and 14),
//! hashes (13) and sorted sets (12) in them, and RESTORE still accepts those payloads.

use super::elem::Elem;
use super::{Res, RestoreError};

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
