//! Intsets (`RDB_TYPE_SET_INTSET`): a width, a count and the sorted integers,
//! little-endian, all of that width.

use super::elem::int_to_bytes;
use super::{Res, RestoreError};
use crate::util::string2ll;

const HEADER_LEN: usize = 8;

/// Encodes `members` as an intset if all are canonical integers, distinct, and
/// there are at most `max_entries` of them.
pub(super) fn encode(members: &[Vec<u8>], max_entries: usize) -> Option<Vec<u8>> {
    if members.is_empty() || members.len() > max_entries {
        return None;
    }
    let mut values = members
        .iter()
        .map(|m| string2ll(m))
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
