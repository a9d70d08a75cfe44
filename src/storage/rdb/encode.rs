//! Writing values in the encodings Redis 7.0's `rdb.c` chooses for them (the
//! choices are listed in the `rdb` module comment).

use super::{
    intset, listpack, lzf, ENC_INT16, ENC_INT32, ENC_INT8, ENC_LZF, QUICKLIST_NODE_PACKED,
    QUICKLIST_NODE_PLAIN, TYPE_HASH, TYPE_HASH_LISTPACK, TYPE_HASH_LISTPACK_EX, TYPE_HASH_METADATA,
    TYPE_LIST_QUICKLIST_2, TYPE_SET, TYPE_SET_INTSET, TYPE_ZSET_2, TYPE_ZSET_LISTPACK,
};
use crate::util::string2ll;

/// Largest listpack (in bytes) written per quicklist node (`list-max-listpack-size -2`).
pub(super) const LIST_NODE_MAX_BYTES: usize = 8192;
const SET_MAX_INTSET_ENTRIES: usize = 512;
const HASH_MAX_LISTPACK_ENTRIES: usize = 512;
const HASH_MAX_LISTPACK_VALUE: usize = 64;
const ZSET_MAX_LISTPACK_ENTRIES: usize = 128;
const ZSET_MAX_LISTPACK_VALUE: usize = 64;

pub(super) fn write_len(out: &mut Vec<u8>, len: usize) {
    write_len64(out, len as u64);
}

pub(super) fn write_len64(out: &mut Vec<u8>, len: u64) {
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
pub(super) fn write_string(out: &mut Vec<u8>, s: &[u8]) {
    if s.len() <= 11 {
        if let Some(v) = string2ll(s) {
            if write_int_encoded(out, v) {
                return;
            }
        }
    }
    if s.len() > 20 && super::compression() && write_lzf_string(out, s) {
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

pub(super) enum ListNode<'a> {
    Plain(&'a [u8]),
    Packed(Vec<u8>),
}

pub(super) fn write_list(out: &mut Vec<u8>, items: &[Vec<u8>]) {
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

pub(super) fn build_list_nodes(items: &[Vec<u8>]) -> Vec<ListNode<'_>> {
    let mut nodes = Vec::new();
    let mut lp = listpack::Builder::new();
    // Elements of at least the packed threshold get their own plain node, as they
    // have in the list itself.
    let plain_from = crate::storage::list::packed_threshold();
    for item in items {
        if item.len() >= plain_from {
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

pub(super) fn write_set(out: &mut Vec<u8>, members: &[Vec<u8>]) {
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

/// Whether a hash of `len` pairs whose fields and values are `pairs` is written as a
/// listpack.
fn hash_fits_listpack<'a>(
    len: usize,
    mut pairs: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> bool {
    len <= HASH_MAX_LISTPACK_ENTRIES
        && pairs
            .all(|(f, v)| f.len() <= HASH_MAX_LISTPACK_VALUE && v.len() <= HASH_MAX_LISTPACK_VALUE)
}

pub(super) fn write_hash(out: &mut Vec<u8>, pairs: &[(Vec<u8>, Vec<u8>)]) {
    let small = hash_fits_listpack(pairs.len(), pairs.iter().map(|(f, v)| (&f[..], &v[..])));
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

/// A hash with field deadlines (`DumpValue::HashEx`), as Redis 7.4 writes it: both
/// types start with the earliest deadline (8 bytes, little endian).
pub(super) fn write_hash_ex(out: &mut Vec<u8>, fields: &[(Vec<u8>, Vec<u8>, u64)]) {
    // Redis's listpackex keeps fields by deadline, those without one last, and its
    // expiry relies on that order: a loaded listpack is used as it is.
    let mut sorted: Vec<&(Vec<u8>, Vec<u8>, u64)> = fields.iter().collect();
    sorted.sort_by_key(|(_, _, at)| if *at == 0 { u64::MAX } else { *at });
    let min = sorted.first().map_or(0, |(_, _, at)| *at);
    let small = hash_fits_listpack(
        fields.len(),
        fields.iter().map(|(f, v, _)| (&f[..], &v[..])),
    );
    if small {
        let mut lp = listpack::Builder::new();
        for (field, value, at) in sorted {
            lp.push(&listpack::Entry::from_bytes(field));
            lp.push(&listpack::Entry::from_bytes(value));
            lp.push(&listpack::Entry::Int(*at as i64));
        }
        out.push(TYPE_HASH_LISTPACK_EX);
        out.extend_from_slice(&min.to_le_bytes());
        write_string(out, &lp.finish());
        return;
    }
    out.push(TYPE_HASH_METADATA);
    out.extend_from_slice(&min.to_le_bytes());
    write_len(out, fields.len());
    for (field, value, at) in fields {
        // Relative to the earliest, plus one: 0 stays "no deadline" and small.
        write_len64(out, if *at == 0 { 0 } else { at - min + 1 });
        write_string(out, field);
        write_string(out, value);
    }
}

pub(super) fn write_zset(out: &mut Vec<u8>, entries: &[(Vec<u8>, f64)]) {
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
