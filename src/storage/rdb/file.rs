//! RDB files: the snapshot a replica receives on SYNC / PSYNC (and SAVE writes). The
//! `REDIS0010` magic and AUX fields, then per database a SELECTDB opcode and its key
//! records (an optional EXPIRETIME_MS, the value's type byte, the key, the value in
//! the encoding DUMP uses), then EOF and the CRC64 of every byte before it. The
//! snapshot a replica gets carries no RESIZEDB (only a loading hint); BGSAVE's file,
//! which knows the sizes at its cut, does.

use super::crc64;
use super::encode::{write_len, write_string};
use super::value::write_value;
use crate::storage::{Value, NO_EXPIRE};

/// "REDIS" and the RDB version as four digits (`RDB_VERSION`).
const MAGIC: &[u8] = b"REDIS0010";
pub(super) const OPCODE_AUX: u8 = 0xFA;
/// A function library's code (Redis 7.0's RDB_OPCODE_FUNCTION2).
pub(super) const OPCODE_FUNCTION2: u8 = 0xF5;
pub(super) const OPCODE_EXPIRETIME_MS: u8 = 0xFC;
pub(super) const OPCODE_SELECTDB: u8 = 0xFE;
pub(super) const OPCODE_EOF: u8 = 0xFF;
/// What a Redis 7.0 replica checks it can load.
const AUX_FIELDS: [(&str, &str); 2] = [("redis-ver", "7.0.15"), ("redis-bits", "64")];

/// An RDB file with no keys.
pub fn empty() -> Vec<u8> {
    assemble(&[], &[], None)
}

/// Appends one key's record (`expire_at` is a unix time in ms, or `NO_EXPIRE`).
pub fn write_record(out: &mut Vec<u8>, key: &[u8], value: &Value, expire_at: u64) {
    if expire_at != NO_EXPIRE {
        out.push(OPCODE_EXPIRETIME_MS);
        out.extend_from_slice(&expire_at.to_le_bytes());
    }
    if let Value::Str(s) = value {
        // The common record, whose type is known before its value is encoded.
        let mut buf = [0u8; 24];
        let bytes = s.bytes(&mut buf);
        out.reserve(key.len() + bytes.len() + 18);
        out.push(super::TYPE_STRING);
        write_string(out, key);
        write_string(out, bytes);
        return;
    }
    let at = out.len();
    write_value(out, value);
    // A record is type, key, value, but the type is chosen while the value is
    // encoded: the key goes in right after the type byte.
    let mut encoded_key = Vec::with_capacity(key.len() + 9);
    write_string(&mut encoded_key, key);
    let after_type = (at + 1).min(out.len());
    out.splice(after_type..after_type, encoded_key);
}

/// RESIZEDB: the number of keys and of keys with a TTL in the database just
/// selected, a hint that lets the loader size its tables once.
pub(super) const OPCODE_RESIZEDB: u8 = 0xFB;

/// Where the replication stream stood at a save's cut (Redis's rdbSaveInfo): the
/// AUX `repl-stream-db`, `repl-id` and `repl-offset` a server restarted from the
/// file continues its replication from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationAux {
    /// The database the stream last selected (0 when it selected none yet).
    pub stream_db: usize,
    /// The replication id of the history the dataset belongs to.
    pub id: String,
    /// The stream offset the dataset holds everything up to (master_repl_offset).
    pub offset: u64,
}

/// The start of an RDB file: the magic, the AUX fields and the function libraries'
/// codes, which go before the keys as in Redis's rdbSaveFunctions. `replication`
/// adds the replication AUX fields (Redis writes them whenever it has them).
pub fn header(libraries: &[&[u8]], replication: Option<&ReplicationAux>) -> Vec<u8> {
    header_for(libraries, false, replication)
}

/// `header`, for an AOF's base file when `aof_base` (AUX `aof-base` 1, which Redis
/// writes there and logs as "RDB is base AOF" when it loads one).
pub fn header_for(
    libraries: &[&[u8]],
    aof_base: bool,
    replication: Option<&ReplicationAux>,
) -> Vec<u8> {
    let mut rdb = MAGIC.to_vec();
    for (k, v) in AUX_FIELDS {
        write_aux_raw(&mut rdb, k, v);
    }
    if let Some(r) = replication {
        // As rdbSaveAuxFieldStrInt: numbers as strings, which the RDB string
        // encoding stores as integers.
        write_aux(
            &mut rdb,
            "repl-stream-db",
            r.stream_db.to_string().as_bytes(),
        );
        write_aux(&mut rdb, "repl-id", r.id.as_bytes());
        write_aux(&mut rdb, "repl-offset", r.offset.to_string().as_bytes());
    }
    if aof_base {
        write_aux_raw(&mut rdb, "aof-base", "1");
    }
    for code in libraries {
        // As rdbSaveFunctions: the code is an RDB string, so LZF-compressed when
        // that pays, like any other string.
        rdb.push(OPCODE_FUNCTION2);
        write_string(&mut rdb, code);
    }
    rdb
}

/// An AUX field whose key and value are short and written as they are (the bytes
/// of the fields every file has stay what they always were).
fn write_aux_raw(out: &mut Vec<u8>, key: &str, value: &str) {
    out.push(OPCODE_AUX);
    out.push(key.len() as u8);
    out.extend_from_slice(key.as_bytes());
    out.push(value.len() as u8);
    out.extend_from_slice(value.as_bytes());
}

/// An AUX field with both strings in the RDB string encoding (Redis's
/// rdbSaveAuxField).
fn write_aux(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    out.push(OPCODE_AUX);
    write_string(out, key.as_bytes());
    write_string(out, value);
}

/// Selects database `db` for the records that follow; `sizes` (keys, keys with a
/// TTL) adds the RESIZEDB hint, as Redis writes after each SELECTDB.
pub fn select_db(out: &mut Vec<u8>, db: usize, sizes: Option<(u64, u64)>) {
    out.push(OPCODE_SELECTDB);
    write_len(out, db);
    if let Some((keys, expires)) = sizes {
        out.push(OPCODE_RESIZEDB);
        write_len(out, keys as usize);
        write_len(out, expires as usize);
    }
}

/// The end of a file whose bytes so far have the CRC64 `crc`: EOF and the checksum
/// of every byte before the checksum itself.
pub fn trailer(crc: u64) -> [u8; 9] {
    let crc = crc64::update(crc, &[OPCODE_EOF]);
    let mut out = [OPCODE_EOF; 9];
    out[1..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// The end of a file saved with `rdbchecksum no`: EOF and a zero checksum, which
/// loaders take as "not computed".
pub fn trailer_without_checksum() -> [u8; 9] {
    let mut out = [0; 9];
    out[0] = OPCODE_EOF;
    out
}

/// A whole RDB file from records grouped by shard and database (`parts[shard][db]`,
/// each the concatenation of `write_record`s): one SELECTDB per database that has
/// records in any shard. `libraries` are the function libraries' codes;
/// `replication` the replication AUX fields, if the file carries them.
pub fn assemble(
    parts: &[Vec<Vec<u8>>],
    libraries: &[&[u8]],
    replication: Option<&ReplicationAux>,
) -> Vec<u8> {
    let mut rdb = header(libraries, replication);
    let dbs = parts.iter().map(|p| p.len()).max().unwrap_or(0);
    for db in 0..dbs {
        let mut selected = false;
        for shard in parts {
            let Some(records) = shard.get(db).filter(|r| !r.is_empty()) else {
                continue;
            };
            if !selected {
                select_db(&mut rdb, db, None);
                selected = true;
            }
            rdb.extend_from_slice(records);
        }
    }
    let crc = crc64::update(0, &rdb);
    rdb.extend_from_slice(&trailer(crc));
    rdb
}

#[cfg(test)]
mod tests {
    use super::super::RDB_VERSION;
    use super::*;
    use crate::storage::limits::EncodingLimits;
    use crate::storage::list::ListValue;
    use crate::storage::StrValue;

    #[test]
    fn magic_names_the_rdb_version() {
        assert_eq!(MAGIC, format!("REDIS{RDB_VERSION:04}").as_bytes());
    }

    #[test]
    fn empty_rdb_has_header_eof_and_crc() {
        let rdb = empty();
        assert!(rdb.starts_with(b"REDIS0010"));
        let body = &rdb[..rdb.len() - 8];
        assert_eq!(body.last(), Some(&0xFF));
        let crc = u64::from_le_bytes(rdb[rdb.len() - 8..].try_into().unwrap());
        assert_eq!(crc, crate::storage::rdb::crc64(0, body));
    }

    /// The AUX fields a header carries, decoded as a loader reads them.
    fn aux_fields(rdb: &[u8]) -> Vec<(String, String)> {
        use super::super::records::{RdbReader, Record};
        let mut reader = RdbReader::new(rdb).expect("header");
        let mut out = Vec::new();
        while let Ok(Record::Aux(k, v)) = reader.next_record() {
            let text = |b: Vec<u8>| String::from_utf8(b).expect("utf8");
            out.push((text(k), text(v)));
        }
        out
    }

    #[test]
    fn header_carries_replication_fields_only_when_given() {
        let names =
            |rdb: &[u8]| -> Vec<String> { aux_fields(rdb).into_iter().map(|(k, _)| k).collect() };
        assert_eq!(names(&header(&[], None)), ["redis-ver", "redis-bits"]);
        assert_eq!(
            names(&header_for(&[], true, None)),
            ["redis-ver", "redis-bits", "aof-base"]
        );
        let repl = ReplicationAux {
            stream_db: 9,
            id: "0123456789abcdef0123456789abcdef01234567".into(),
            offset: 1_234_567_890_123,
        };
        let fields = aux_fields(&assemble(&[], &[], Some(&repl)));
        let want = [
            ("redis-ver", "7.0.15"),
            ("redis-bits", "64"),
            ("repl-stream-db", "9"),
            ("repl-id", repl.id.as_str()),
            ("repl-offset", "1234567890123"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(fields, want);
    }

    /// The exact bytes of a snapshot: records with and without an expiry, a string
    /// key long enough for LZF, a collection, two shards sharing a database and a
    /// database only one shard has. (Captured before the framing moved here from
    /// replication.rs.)
    #[test]
    fn snapshot_bytes_are_stable() {
        let record = |key: &[u8], value: Value, expire_at: u64| {
            let mut out = Vec::new();
            write_record(&mut out, key, &value, expire_at);
            out
        };
        let s = |b: &[u8]| Value::Str(StrValue::from_bytes(b));
        let mut list = ListValue::new(&EncodingLimits::default());
        for item in [&b"a"[..], b"12", &[b'z'; 30]] {
            list.push_back(item);
        }
        let shard0 = vec![
            [
                record(b"k1", s(b"v1"), NO_EXPIRE),
                record(b"n", s(b"-7"), 1_700_000_000_123),
            ]
            .concat(),
            Vec::new(),
            record(&[b'q'; 40], s(&[b'x'; 50]), NO_EXPIRE),
        ];
        let shard1 = vec![record(b"l", Value::List(Box::new(list)), 5)];
        let rdb = assemble(&[shard0, shard1], &[], None);
        let hex: String = rdb.iter().map(|b| format!("{b:02x}")).collect();
        let want = concat!(
            "524544495330303130fa0972656469732d76657206372e302e3135fa0a72656469732d6269",
            "7473023634fe0000026b31027631fc7b68e5cf8b01000000016ec0f9fc0500000000000000",
            "12016c0102c3142c0c2c00000003008161020c019e7ae01400011ffffe0200c30928017171",
            "e01b00017171c30932017878e02500017878ff8c48fbcbf17284d2",
        );
        assert_eq!(hex, want);
    }
}
