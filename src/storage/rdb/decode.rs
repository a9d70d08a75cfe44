//! Reading every value encoding Redis 7.0 can load (and Redis 7.2's streams),
//! validating as it goes and never allocating more than a small multiple of the
//! input's size.

use std::collections::HashSet;

use super::elem::{int_to_bytes, parse_score, Elem};
use super::{
    intset, listpack, lzf, stream, ziplist, DumpValue, Res, RestoreError, ENC_INT16, ENC_INT32,
    ENC_INT8, ENC_LZF, FIELD_DEADLINE_MAX, QUICKLIST_NODE_PACKED, QUICKLIST_NODE_PLAIN, TYPE_HASH,
    TYPE_HASH_LISTPACK, TYPE_HASH_LISTPACK_EX, TYPE_HASH_LISTPACK_EX_PRE_GA, TYPE_HASH_METADATA,
    TYPE_HASH_METADATA_PRE_GA, TYPE_HASH_ZIPLIST, TYPE_HASH_ZIPMAP, TYPE_LIST, TYPE_LIST_QUICKLIST,
    TYPE_LIST_QUICKLIST_2, TYPE_LIST_ZIPLIST, TYPE_SET, TYPE_SET_INTSET, TYPE_STREAM_LISTPACKS,
    TYPE_STREAM_LISTPACKS_2, TYPE_STREAM_LISTPACKS_3, TYPE_STRING, TYPE_ZSET, TYPE_ZSET_2,
    TYPE_ZSET_LISTPACK, TYPE_ZSET_ZIPLIST,
};

pub(super) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// A read ran past the end of `buf` (a truncated file, not a malformed one).
    short: bool,
    /// After a short read: how long `buf` must at least be for that read to succeed
    /// (a loader reading from a socket waits for that many bytes).
    needed: usize,
}

enum Len {
    Plain(usize),
    Encoded(u8),
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            pos: 0,
            short: false,
            needed: 0,
        }
    }

    /// How many bytes have been read.
    pub(super) fn pos(&self) -> usize {
        self.pos
    }

    /// Whether a read failed for want of bytes.
    pub(super) fn ran_short(&self) -> bool {
        self.short
    }

    /// The length `buf` needed for the read that ran short.
    pub(super) fn needed(&self) -> usize {
        self.needed
    }

    pub(super) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(super) fn take(&mut self, n: usize) -> Res<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or(RestoreError::Corrupt)?;
        let Some(slice) = self.buf.get(self.pos..end) else {
            self.short = true;
            self.needed = end;
            return Err(RestoreError::Corrupt);
        };
        self.pos = end;
        Ok(slice)
    }

    pub(super) fn array<const N: usize>(&mut self) -> Res<[u8; N]> {
        let mut arr = [0u8; N];
        arr.copy_from_slice(self.take(N)?);
        Ok(arr)
    }

    pub(super) fn byte(&mut self) -> Res<u8> {
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

    pub(super) fn len(&mut self) -> Res<usize> {
        match self.len_or_enc()? {
            Len::Plain(n) => Ok(n),
            Len::Encoded(_) => Err(RestoreError::Corrupt),
        }
    }

    /// A collection count, also bounding a safe preallocation.
    pub(super) fn count(&mut self) -> Res<(usize, usize)> {
        let n = self.len()?;
        Ok((n, n.min(self.remaining())))
    }

    pub(super) fn string(&mut self) -> Res<Vec<u8>> {
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

    /// Steps over a string in any encoding without decoding it.
    fn skip_string(&mut self) -> Res<()> {
        let n = match self.len_or_enc()? {
            Len::Plain(n) => n,
            Len::Encoded(ENC_INT8) => 1,
            Len::Encoded(ENC_INT16) => 2,
            Len::Encoded(ENC_INT32) => 4,
            Len::Encoded(ENC_LZF) => {
                let compressed_len = self.len()?;
                self.len()?;
                compressed_len
            }
            Len::Encoded(_) => return Err(RestoreError::Corrupt),
        };
        self.take(n).map(drop)
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

pub(super) fn read_value(ty: u8, r: &mut Reader<'_>) -> Res<DumpValue> {
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
        TYPE_HASH_ZIPMAP => read_zipmap(&r.string()?),
        TYPE_HASH_METADATA | TYPE_HASH_METADATA_PRE_GA => read_hash_metadata(r, ty),
        TYPE_HASH_LISTPACK_EX | TYPE_HASH_LISTPACK_EX_PRE_GA => {
            if ty == TYPE_HASH_LISTPACK_EX {
                // The earliest deadline: the fields carry their own.
                r.take(8)?;
            }
            read_hash_packed_ex(&listpack::decode(&r.string()?)?)
        }
        _ => Err(RestoreError::Corrupt),
    }
}

/// Steps over a value of type `ty` (one another shard loads), checking only its
/// framing: far cheaper than decoding it, which its own shard does.
pub(super) fn skip_value(ty: u8, r: &mut Reader<'_>) -> Res<()> {
    let strings = |r: &mut Reader<'_>, per_element: usize| -> Res<()> {
        let n = r.len()?;
        for _ in 0..n.saturating_mul(per_element) {
            r.skip_string()?;
        }
        Ok(())
    };
    match ty {
        TYPE_STRING | TYPE_LIST_ZIPLIST | TYPE_SET_INTSET | TYPE_ZSET_ZIPLIST
        | TYPE_HASH_ZIPLIST | TYPE_HASH_LISTPACK | TYPE_ZSET_LISTPACK | TYPE_HASH_ZIPMAP => {
            r.skip_string()
        }
        TYPE_LIST | TYPE_SET | TYPE_LIST_QUICKLIST => strings(r, 1),
        TYPE_HASH => strings(r, 2),
        TYPE_ZSET | TYPE_ZSET_2 => {
            let n = r.len()?;
            for _ in 0..n {
                r.skip_string()?;
                match (ty, r.byte()?) {
                    (TYPE_ZSET, len @ 0..=252) => r.take(usize::from(len)).map(drop)?,
                    (TYPE_ZSET, _) => {}
                    // The byte just read is the first of the double's eight.
                    _ => r.take(7).map(drop)?,
                }
            }
            Ok(())
        }
        TYPE_LIST_QUICKLIST_2 => {
            let nodes = r.len()?;
            for _ in 0..nodes {
                r.len()?;
                r.skip_string()?;
            }
            Ok(())
        }
        // Streams are rare and intricate: decoding is the one sure way to frame them.
        _ => read_value(ty, r).map(drop),
    }
}

/// Type 9: Redis 2.4's zipmap, a hash of `len field len free value` entries ending
/// in 0xFF (lengths are one byte below 254, else 254 and four bytes).
fn read_zipmap(blob: &[u8]) -> Res<DumpValue> {
    let mut r = Reader::new(blob);
    r.byte()?; // the entry count, a hint that saturates at 254
    let len = |r: &mut Reader<'_>| -> Res<Option<usize>> {
        Ok(match r.byte()? {
            0xFF => None,
            254 => Some(u32::from_le_bytes(r.array()?) as usize),
            n => Some(usize::from(n)),
        })
    };
    let mut pairs = Vec::new();
    while let Some(field_len) = len(&mut r)? {
        let field = r.take(field_len)?.to_vec();
        let value_len = len(&mut r)?.ok_or(RestoreError::Corrupt)?;
        let free = usize::from(r.byte()?);
        let value = r.take(value_len)?.to_vec();
        r.take(free)?;
        pairs.push((field, value));
    }
    if r.remaining() != 0 {
        return Err(RestoreError::Corrupt);
    }
    ensure_non_empty(pairs.len())?;
    ensure_unique(pairs.iter().map(|(f, _)| f.as_slice()), pairs.len())?;
    Ok(DumpValue::Hash(pairs))
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

/// Types 24 and 22: per field its deadline (relative to the leading earliest one
/// plus one in 24, absolute in 22; 0 for none), the field and the value.
fn read_hash_metadata(r: &mut Reader<'_>, ty: u8) -> Res<DumpValue> {
    let min = if ty == TYPE_HASH_METADATA {
        let min = u64::from_le_bytes(r.array()?);
        if min > FIELD_DEADLINE_MAX + 1 {
            return Err(RestoreError::Corrupt);
        }
        Some(min)
    } else {
        None
    };
    let (n, cap) = r.count()?;
    ensure_non_empty(n)?;
    let mut fields = Vec::with_capacity(cap);
    for _ in 0..n {
        let ttl = r.len()? as u64;
        let at = match (ttl, min) {
            (0, _) => 0,
            (ttl, Some(min)) => (ttl - 1).checked_add(min).ok_or(RestoreError::Corrupt)?,
            (ttl, None) => ttl,
        };
        if at > FIELD_DEADLINE_MAX {
            return Err(RestoreError::Corrupt);
        }
        let field = r.string()?;
        let value = r.string()?;
        fields.push((field, value, at));
    }
    ensure_unique(fields.iter().map(|(f, _, _)| f.as_slice()), fields.len())?;
    Ok(DumpValue::HashEx(fields))
}

/// Types 25 and 23: a listpack of (field, value, deadline or 0) triplets.
fn read_hash_packed_ex(elems: &[Elem<'_>]) -> Res<DumpValue> {
    ensure_non_empty(elems.len())?;
    if !elems.len().is_multiple_of(3) {
        return Err(RestoreError::Corrupt);
    }
    let mut fields = Vec::with_capacity(elems.len() / 3);
    for t in elems.chunks_exact(3) {
        let at = match t[2] {
            Elem::Int(at) if (0..=FIELD_DEADLINE_MAX as i64).contains(&at) => at as u64,
            _ => return Err(RestoreError::Corrupt),
        };
        fields.push((t[0].to_vec(), t[1].to_vec(), at));
    }
    ensure_unique(fields.iter().map(|(f, _, _)| f.as_slice()), fields.len())?;
    Ok(DumpValue::HashEx(fields))
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
    ensure_non_empty(elems.len())?;
    if !elems.len().is_multiple_of(2) {
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
        Err(RestoreError::Empty)
    } else {
        Ok(())
    }
}
