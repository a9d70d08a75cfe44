//! Elements as the packed encodings (listpack, ziplist, intset) hold them, and the
//! text rules RDB strings share with them: a string that is the canonical form of an
//! integer is stored as that integer, and integers read back as their decimal text.

use super::{Res, RestoreError};

/// Parses `s` as Redis's `string2ll` does: optional `-`, no leading zeros, no `+`,
/// no `-0`, no whitespace, must fit in an `i64`.
pub(super) fn parse_canonical_i64(s: &[u8]) -> Option<i64> {
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

pub(super) fn int_to_bytes(v: i64) -> Vec<u8> {
    v.to_string().into_bytes()
}

/// Parses a score stored as text (listpack/ziplist entries, old zset encoding).
pub(super) fn parse_score(s: &[u8]) -> Res<f64> {
    let text = std::str::from_utf8(s).map_err(|_| RestoreError::Corrupt)?;
    let score: f64 = text.parse().map_err(|_| RestoreError::Corrupt)?;
    if score.is_nan() {
        return Err(RestoreError::Corrupt);
    }
    Ok(score)
}

/// A decoded listpack/ziplist element.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Elem<'a> {
    Int(i64),
    Bytes(&'a [u8]),
}

impl Elem<'_> {
    pub(super) fn to_vec(self) -> Vec<u8> {
        match self {
            Elem::Int(v) => int_to_bytes(v),
            Elem::Bytes(b) => b.to_vec(),
        }
    }

    pub(super) fn to_score(self) -> Res<f64> {
        match self {
            Elem::Int(v) => Ok(v as f64),
            Elem::Bytes(b) => parse_score(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
