//! An AOF base of commands (`aof-use-rdb-preamble no`, `appendonly.aof.N.base.aof`),
//! as Redis 7.0's rewriteAppendOnlyFileRio writes it: FUNCTION LOAD per library, then
//! per database a SELECT and, per key, the commands that rebuild it — SET, RPUSH /
//! SADD / ZADD / HMSET with at most 64 items each, XADD ... XSETID, XGROUP CREATE,
//! XGROUP CREATECONSUMER and XCLAIM for a stream's groups — and PEXPIREAT for a TTL.
//!
//! The walk of a rewrite produces RDB records (the same walk as BGSAVE's); the framing
//! thread turns each piece of records into these commands (`records_to_commands`), so
//! the shards do no more work for one format than for the other.

use crate::storage::rdb::records::{RdbReader, Record};
use crate::storage::rdb::DumpValue;
use crate::storage::stream::StreamId;

/// Redis's AOF_REWRITE_ITEMS_PER_CMD.
const ITEMS_PER_CMD: usize = 64;

/// The commands that rebuild every key of `records` (a piece of the walk: records as
/// `storage::rdb::file::write_record` writes them). Err: the records do not decode
/// (a bug, not bad input: they were written by this process).
pub fn records_to_commands(records: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    let mut framed = Vec::with_capacity(records.len() + 18);
    framed.extend_from_slice(b"REDIS0010");
    framed.extend_from_slice(records);
    // EOF and a (zero: not computed) checksum, so the reader stops cleanly.
    framed.extend_from_slice(&crate::storage::rdb::file::trailer_without_checksum());
    let mut reader = RdbReader::new(&framed).map_err(|e| e.log_lines().join(" "))?;
    loop {
        match reader.next_record().map_err(|e| e.log_lines().join(" "))? {
            Record::Key(header) => {
                let value = reader
                    .value(&header)
                    .map_err(|(e, _)| e.log_lines().join(" "))?;
                key_commands(out, &header.key, &value, header.expire_at);
            }
            Record::Eof { .. } => return Ok(()),
            _ => {}
        }
    }
}

/// `*3 FUNCTION LOAD <code>` for each library (Redis's rewriteFunctions).
pub fn function_loads(out: &mut Vec<u8>, codes: &[&[u8]]) {
    for code in codes {
        command(out, &[b"FUNCTION", b"LOAD", code]);
    }
}

/// `SELECT <db>`.
pub fn select(out: &mut Vec<u8>, db: usize) {
    command(out, &[b"SELECT", db.to_string().as_bytes()]);
}

/// The commands that rebuild one key, then its PEXPIREAT.
pub fn key_commands(out: &mut Vec<u8>, key: &[u8], value: &DumpValue, expire_at: Option<u64>) {
    match value {
        DumpValue::Str(v) => command(out, &[b"SET", key, v]),
        DumpValue::List(items) => {
            batched(out, b"RPUSH", key, items.iter().map(|i| vec![i.as_slice()]))
        }
        DumpValue::Set(items) => {
            batched(out, b"SADD", key, items.iter().map(|i| vec![i.as_slice()]))
        }
        DumpValue::Hash(pairs) => batched(
            out,
            b"HMSET",
            key,
            pairs.iter().map(|(f, v)| vec![f.as_slice(), v.as_slice()]),
        ),
        DumpValue::HashEx(fields) => {
            batched(
                out,
                b"HMSET",
                key,
                fields
                    .iter()
                    .map(|(f, v, _)| vec![f.as_slice(), v.as_slice()]),
            );
            field_deadlines(out, key, fields);
        }
        DumpValue::ZSet(members) => {
            let scores: Vec<Vec<u8>> = members
                .iter()
                .map(|(_, s)| {
                    let mut b = Vec::new();
                    crate::protocol::reply::format_double_g17(*s, &mut b);
                    b
                })
                .collect();
            let items = members
                .iter()
                .zip(&scores)
                .map(|((m, _), s)| vec![s.as_slice(), m.as_slice()]);
            batched(out, b"ZADD", key, items)
        }
        DumpValue::Stream(s) => stream_commands(out, key, s),
    }
    if let Some(at) = expire_at {
        command(out, &[b"PEXPIREAT", key, at.to_string().as_bytes()]);
    }
}

/// `HPEXPIREAT key at FIELDS 1 field` for each field with a deadline (Redis 7.4's
/// rewriteHashObject).
fn field_deadlines(out: &mut Vec<u8>, key: &[u8], fields: &[(Vec<u8>, Vec<u8>, u64)]) {
    for (field, _, at) in fields.iter().filter(|(_, _, at)| *at != 0) {
        let at = at.to_string();
        command(
            out,
            &[b"HPEXPIREAT", key, at.as_bytes(), b"FIELDS", b"1", field],
        );
    }
}

/// `cmd key item...` commands of at most `ITEMS_PER_CMD` items each (an item is one
/// element, or a field and its value, or a score and its member).
fn batched<'a>(
    out: &mut Vec<u8>,
    cmd: &[u8],
    key: &[u8],
    items: impl ExactSizeIterator<Item = Vec<&'a [u8]>>,
) {
    let mut left = items.len();
    let mut args: Vec<&[u8]> = Vec::with_capacity(2 + 2 * ITEMS_PER_CMD);
    for item in items {
        if args.is_empty() {
            args.push(cmd);
            args.push(key);
        }
        args.extend(item);
        left -= 1;
        let in_cmd = (args.len() - 2) / per_item(cmd);
        if in_cmd == ITEMS_PER_CMD || left == 0 {
            command(out, &args);
            args.clear();
        }
    }
}

fn per_item(cmd: &[u8]) -> usize {
    if cmd == b"HMSET" || cmd == b"ZADD" {
        2
    } else {
        1
    }
}

fn id(i: StreamId) -> Vec<u8> {
    i.to_string().into_bytes()
}

/// Redis's rewriteStreamObject.
fn stream_commands(out: &mut Vec<u8>, key: &[u8], s: &crate::storage::stream::StreamValue) {
    if s.is_empty() {
        // The XADD MAXLEN 0 trick makes an empty stream.
        command(out, &[b"XADD", key, b"MAXLEN", b"0", b"0-1", b"x", b"y"]);
    } else {
        for e in s.range(StreamId::ZERO, StreamId::MAX, false) {
            let entry_id = id(e.id);
            let mut args: Vec<&[u8]> = vec![b"XADD", key, &entry_id];
            args.extend(e.fields());
            command(out, &args);
        }
    }
    let (last, added, max_del) = (
        id(s.last_id),
        s.entries_added.to_string(),
        id(s.max_deleted_id),
    );
    command(
        out,
        &[
            b"XSETID",
            key,
            &last,
            b"ENTRIESADDED",
            added.as_bytes(),
            b"MAXDELETEDID",
            &max_del,
        ],
    );
    for (name, group) in &s.groups {
        let (last, read) = (id(group.last_id), group.entries_read.to_string());
        command(
            out,
            &[
                b"XGROUP",
                b"CREATE",
                key,
                name,
                &last,
                b"ENTRIESREAD",
                read.as_bytes(),
            ],
        );
        for (consumer, c) in &group.consumers {
            if c.pel.is_empty() {
                command(out, &[b"XGROUP", b"CREATECONSUMER", key, name, consumer]);
                continue;
            }
            for pending_id in &c.pel {
                let Some(p) = group.pel.get(pending_id) else {
                    continue;
                };
                let (pid, time, count) = (
                    id(*pending_id),
                    p.delivery_time.to_string(),
                    p.delivery_count.to_string(),
                );
                command(
                    out,
                    &[
                        b"XCLAIM",
                        key,
                        name,
                        consumer,
                        b"0",
                        &pid,
                        b"TIME",
                        time.as_bytes(),
                        b"RETRYCOUNT",
                        count.as_bytes(),
                        b"JUSTID",
                        b"FORCE",
                    ],
                );
            }
        }
    }
}

/// One command in RESP, as the AOF holds it.
fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    crate::effects::encode_command(out, args);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(out: &[u8]) -> String {
        String::from_utf8_lossy(out).replace("\r\n", " ")
    }

    #[test]
    fn collections_are_split_in_commands_of_64_items() {
        let items: Vec<Vec<u8>> = (0..130).map(|i| i.to_string().into_bytes()).collect();
        let mut out = Vec::new();
        key_commands(&mut out, b"l", &DumpValue::List(items), Some(1234));
        let t = text(&out);
        assert_eq!(t.matches("RPUSH").count(), 3);
        assert!(t.starts_with("*66 $5 RPUSH $1 l $1 0 "), "{t}");
        assert!(t.contains("*4 $5 RPUSH $1 l $3 128 $3 129 "), "{t}");
        assert!(t.ends_with("*3 $9 PEXPIREAT $1 l $4 1234 "), "{t}");
    }

    #[test]
    fn hashes_and_zsets_count_pairs() {
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..65)
            .map(|i| (format!("f{i}").into_bytes(), b"v".to_vec()))
            .collect();
        let mut out = Vec::new();
        key_commands(&mut out, b"h", &DumpValue::Hash(pairs), None);
        let t = text(&out);
        assert!(t.starts_with("*130 $5 HMSET $1 h "), "{t}");
        assert!(t.contains("*4 $5 HMSET $1 h $3 f64 $1 v "), "{t}");
        let mut out = Vec::new();
        key_commands(
            &mut out,
            b"z",
            &DumpValue::ZSet(vec![(b"m".to_vec(), 1.5)]),
            None,
        );
        assert_eq!(text(&out), "*4 $4 ZADD $1 z $3 1.5 $1 m ");
    }

    #[test]
    fn every_type_round_trips_through_records() {
        let limits = crate::storage::limits::EncodingLimits::default();
        let values = [
            DumpValue::List(vec![b"a".to_vec(), b"b".to_vec()]),
            DumpValue::Set(vec![b"1".to_vec(), b"x".to_vec()]),
            DumpValue::Hash(vec![(b"f".to_vec(), b"v".to_vec())]),
            DumpValue::ZSet(vec![(b"m".to_vec(), 2.0)]),
        ];
        let mut records = Vec::new();
        for (i, v) in values.into_iter().enumerate() {
            let value = v.into_value(&limits).expect("value");
            crate::storage::rdb::file::write_record(
                &mut records,
                &[b'k', b'0' + i as u8],
                &value,
                crate::storage::NO_EXPIRE,
            );
        }
        let mut out = Vec::new();
        records_to_commands(&records, &mut out).expect("records");
        let t = text(&out);
        assert!(t.contains("RPUSH $2 k0 $1 a $1 b"), "{t}");
        assert!(t.contains("HMSET $2 k2 $1 f $1 v"), "{t}");
        assert!(t.contains("ZADD $2 k3 $1 2 $1 m"), "{t}");
    }

    #[test]
    fn records_of_the_walk_become_commands() {
        let mut records = Vec::new();
        let value = crate::storage::Value::Str(crate::storage::StrValue::from_bytes(b"hello"));
        crate::storage::rdb::file::write_record(&mut records, b"k", &value, 99);
        let mut out = Vec::new();
        records_to_commands(&records, &mut out).expect("records");
        assert_eq!(
            text(&out),
            "*3 $3 SET $1 k $5 hello *3 $9 PEXPIREAT $1 k $2 99 "
        );
    }
}
