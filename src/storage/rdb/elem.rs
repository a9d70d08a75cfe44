//! Elements as the packed encodings (listpack, ziplist, intset) hold them, and the
//! text rules RDB strings share with them: a string that is the canonical form of an
//! integer is stored as that integer, and integers read back as their decimal text.

use super::{Res, RestoreError};

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
