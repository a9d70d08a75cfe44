//! Streams as Redis's `rdb.c` stores them: the node count, then per node its master ID
//! (16 bytes, big-endian ms and seq) and its listpack; then length, last ID, (7.0+)
//! first ID, max deleted ID and entries added; then the consumer groups, each with
//! its last ID, (7.0+) entries-read, its PEL (raw ID, delivery time, delivery count)
//! and its consumers (name, seen time, (7.2) active time, PEL as raw IDs).
//!
//! A node listpack starts with the master entry
//! `live | deleted | n | field_1 .. field_n | 0`, the fields being those of the
//! node's first entry. Each entry follows as `flags | ms delta | seq delta`, then
//! `n | field | value ...` or, with SAME_FIELDS (fields equal to the master's), just
//! the values, then `lp-count`: the entry's element count without itself.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::decode::Reader;
use super::elem::Elem;
use super::encode::{write_len, write_len64, write_string};
use super::{listpack, Res, RestoreError, TYPE_STREAM_LISTPACKS_2, TYPE_STREAM_LISTPACKS_3};
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

#[cfg(test)]
mod tests {
    use super::super::{dump_stream, finish_payload, restore, DumpValue, RestoreError, FOOTER_LEN};
    use crate::storage::stream::{
        ConsumerGroup, NodeLimits, StreamId, StreamValue, Trim, ENTRIES_READ_INVALID,
    };
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
