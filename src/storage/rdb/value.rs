//! The keyspace's values in RDB form and back. The value types know nothing of the
//! format: this file reads them through their ordinary accessors (iterators) for
//! DUMP and snapshots, and builds them with their ordinary constructors on RESTORE.

use super::encode::write_string;
use super::{
    finish_payload, stream, write_dump_value, DumpValue, TYPE_STREAM_LISTPACKS_2, TYPE_STRING,
};
use crate::storage::hash::HashValue;
use crate::storage::limits::EncodingLimits;
use crate::storage::list::ListValue;
use crate::storage::set::SetValue;
use crate::storage::zset::ZSetValue;
use crate::storage::{StrValue, Value};

impl DumpValue {
    /// A copy of `v` in payload form. Sorted sets come highest score first, the
    /// order Redis writes a skiplist-encoded set in (a listpack payload is sorted by
    /// the writer anyway).
    pub fn from_value(v: &Value) -> DumpValue {
        match v {
            Value::Str(s) => DumpValue::Str(s.to_vec()),
            Value::List(l) => DumpValue::List(l.iter().map(|e| e.to_vec()).collect()),
            Value::Hash(h) if h.has_field_ttls() => DumpValue::HashEx(
                h.iter()
                    .map(|(f, v)| (f.to_vec(), v.to_vec(), h.field_expire(f).unwrap_or(0)))
                    .collect(),
            ),
            Value::Hash(h) => {
                DumpValue::Hash(h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect())
            }
            Value::Set(s) => {
                DumpValue::Set(s.iter().map(|m| m.with_bytes(|b| b.to_vec())).collect())
            }
            Value::ZSet(z) => {
                let top = z.len().saturating_sub(1);
                DumpValue::ZSet(
                    z.iter_from(top, true)
                        .map(|(m, s)| (m.to_vec(), s))
                        .collect(),
                )
            }
            Value::Stream(s) => DumpValue::Stream(s.clone()),
        }
    }

    /// The value a RESTOREd payload holds, in the encoding `limits` call for. None
    /// for what the keyspace cannot hold and Redis rejects as a bad payload: an empty
    /// list or hash, a NaN score or a repeated sorted-set member (`restore` already
    /// refuses these; this does not rely on it).
    pub fn into_value(self, limits: &EncodingLimits) -> Option<Value> {
        Some(match self {
            DumpValue::Str(s) => Value::Str(StrValue::from_vec(s)),
            DumpValue::List(items) => {
                if items.is_empty() {
                    return None;
                }
                let mut l = ListValue::new(limits);
                for item in &items {
                    l.push_back(item);
                }
                Value::List(Box::new(l))
            }
            DumpValue::Hash(pairs) => {
                if pairs.is_empty() {
                    return None;
                }
                // `restore` rejected duplicate fields, as `from_pairs` requires.
                Value::Hash(Box::new(HashValue::from_pairs(&pairs, limits)))
            }
            DumpValue::HashEx(fields) => {
                if fields.is_empty() {
                    return None;
                }
                let pairs: Vec<(Vec<u8>, Vec<u8>)> = fields
                    .iter()
                    .map(|(f, v, _)| (f.clone(), v.clone()))
                    .collect();
                let mut h = HashValue::from_pairs(&pairs, limits);
                h.load_field_deadlines(fields.iter().map(|(f, _, at)| (&f[..], *at)));
                Value::Hash(Box::new(h))
            }
            DumpValue::Set(members) => {
                let mut s = SetValue::default();
                for m in &members {
                    s.insert(m, limits);
                }
                Value::Set(Box::new(s))
            }
            DumpValue::ZSet(entries) => {
                Value::ZSet(Box::new(ZSetValue::from_entries(entries, limits)?))
            }
            DumpValue::Stream(s) => Value::Stream(s),
        })
    }
}

/// Writes `v`'s type byte and serialized value: a DUMP payload without its footer,
/// an RDB file record without its key. Strings and streams are written straight from
/// the value; collections go through their `DumpValue` copy.
pub(super) fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Str(s) => {
            let mut buf = [0u8; 24];
            let bytes = s.bytes(&mut buf);
            out.reserve(bytes.len() + 16);
            out.push(TYPE_STRING);
            write_string(out, bytes);
        }
        Value::Stream(s) => {
            out.push(TYPE_STREAM_LISTPACKS_2);
            stream::write(out, s);
        }
        other => write_dump_value(out, &DumpValue::from_value(other)),
    }
}

/// Appends the complete DUMP payload of `v` to `out`.
pub fn dump_value(v: &Value, out: &mut Vec<u8>) {
    let start = out.len();
    write_value(out, v);
    finish_payload(out, start);
}

#[cfg(test)]
mod tests {
    use super::super::{dump, restore};
    use super::*;
    use crate::storage::stream::{NodeLimits, StreamId};

    fn limits() -> EncodingLimits {
        EncodingLimits::default()
    }

    fn values() -> Vec<Value> {
        let lim = limits();
        let mut list = ListValue::new(&lim);
        let mut hash = HashValue::new();
        let mut set = SetValue::default();
        let mut zset = ZSetValue::default();
        for i in 0..300 {
            let m = format!("m{i}").into_bytes();
            list.push_back(&m);
            hash.set(&m, b"v", &lim);
            set.insert(&m, &lim);
            zset.add(&m, f64::from(i % 7), Default::default(), &lim);
        }
        let mut stream = crate::storage::stream::StreamValue::new();
        let nodes = NodeLimits {
            max_entries: 100,
            max_bytes: 4096,
        };
        stream.append(StreamId::new(1, 1), &[&b"f"[..], b"v"], nodes);
        // Field deadlines: a big hash (type 24) and a small one (type 25).
        let mut big_ex = hash.clone();
        big_ex.set_field_expire(b"m7", 1_700_000_000_000);
        big_ex.set_field_expire(b"m9", 1_700_000_000_500);
        let mut small_ex = HashValue::new();
        small_ex.set(b"a", b"1", &lim);
        small_ex.set(b"b", b"x", &lim);
        small_ex.set_field_expire(b"b", 0xFFFF_FFFF_FFFF);
        vec![
            Value::Hash(Box::new(big_ex)),
            Value::Hash(Box::new(small_ex)),
            Value::Str(StrValue::from_bytes(b"12345")),
            Value::Str(StrValue::from_bytes(&[b'a'; 100])),
            Value::List(Box::new(list)),
            Value::Hash(Box::new(hash)),
            Value::Set(Box::new(set)),
            Value::ZSet(Box::new(zset)),
            Value::Stream(Box::new(stream)),
        ]
    }

    /// Hash tables and sets iterate in no fixed order: compare them sorted.
    fn unordered(d: DumpValue) -> DumpValue {
        match d {
            DumpValue::Hash(mut p) => {
                p.sort();
                DumpValue::Hash(p)
            }
            DumpValue::Set(mut m) => {
                m.sort();
                DumpValue::Set(m)
            }
            DumpValue::HashEx(mut p) => {
                p.sort();
                DumpValue::HashEx(p)
            }
            other => other,
        }
    }

    /// Writing straight from the value gives the bytes of the `DumpValue` copy, and
    /// every value comes back from its payload.
    #[test]
    fn values_round_trip_through_payloads() {
        for v in values() {
            let mut payload = b"prefix".to_vec();
            dump_value(&v, &mut payload);
            let copy = DumpValue::from_value(&v);
            assert_eq!(payload[6..], dump(&copy));
            if let DumpValue::HashEx(_) = copy {
                assert!([24, 25].contains(&payload[6]), "type {}", payload[6]);
            }
            let back = restore(&payload[6..]).expect("restores");
            // A listpackex payload lists fields by deadline, whatever the table's order.
            assert_eq!(unordered(back.clone()), unordered(copy.clone()));
            let back = back.into_value(&limits()).expect("a value");
            assert_eq!(unordered(DumpValue::from_value(&back)), unordered(copy));
        }
    }

    #[test]
    fn values_the_keyspace_cannot_hold_are_refused() {
        let lim = limits();
        assert!(DumpValue::List(vec![]).into_value(&lim).is_none());
        assert!(DumpValue::Hash(vec![]).into_value(&lim).is_none());
        let nan = DumpValue::ZSet(vec![(b"m".to_vec(), f64::NAN)]);
        assert!(nan.into_value(&lim).is_none());
        let dup = DumpValue::ZSet(vec![(b"m".to_vec(), 1.0), (b"m".to_vec(), 2.0)]);
        assert!(dup.into_value(&lim).is_none());
    }
}
