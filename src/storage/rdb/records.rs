//! Reading an RDB file record by record, as Redis 7.0's rdbLoadRio walks it: the
//! `REDIS` magic and a version Redis 7.0 can load (1 to 10), then opcodes (AUX,
//! FUNCTION2, SELECTDB, RESIZEDB, EXPIRETIME / EXPIRETIME_MS, IDLE, FREQ) and key
//! records up to EOF and the CRC64 of everything before it.
//!
//! The reader works on the whole file as one slice and never allocates more than a
//! small multiple of the record it is on. A key record is read in two steps: `next_record`
//! reads the key, then the caller either decodes its value (`value`) or steps over it
//! (`skip_value`), so that every shard can walk the file and decode only its own keys.
//! Errors carry the offset they were found at and Redis's wording.

use super::decode::{read_value, skip_value, Reader};
use super::file::{
    OPCODE_AUX, OPCODE_EOF, OPCODE_EXPIRETIME_MS, OPCODE_FUNCTION2, OPCODE_RESIZEDB,
    OPCODE_SELECTDB,
};
use super::{DumpValue, RestoreError, RDB_VERSION, TYPE_MODULE_2, TYPE_MODULE_PRE_GA};

const OPCODE_FUNCTION_PRE_GA: u8 = 0xF6;
const OPCODE_MODULE_AUX: u8 = 0xF7;
const OPCODE_IDLE: u8 = 0xF8;
const OPCODE_FREQ: u8 = 0xF9;
const OPCODE_EXPIRETIME: u8 = 0xFD;
/// The first RDB version with a CRC64 after EOF.
const FIRST_CHECKSUMMED_VERSION: u16 = 5;

/// Why a file cannot be loaded, at which byte.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadError {
    pub offset: usize,
    pub kind: LoadErrorKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum LoadErrorKind {
    /// Not an RDB file at all (Redis: "Wrong signature trying to load DB from file").
    Signature,
    /// A version Redis 7.0 cannot load.
    Version(u16),
    /// The file ends inside a record.
    ShortRead,
    /// A record that cannot be read (Redis's corruption report, this reason).
    Corrupt(String),
    /// A refusal whose message is whole as it stands (module data Tessera cannot
    /// load, more databases than configured, a duplicated key ...).
    Fatal(String),
}

impl LoadError {
    /// The lines Redis logs for this failure, in order.
    pub fn log_lines(&self) -> Vec<String> {
        let internal = |reason: &str| {
            format!(
                "Internal error in RDB reading offset {}, function at rdb loader -> {reason}",
                self.offset
            )
        };
        match &self.kind {
            LoadErrorKind::Signature => vec!["Wrong signature trying to load DB from file".into()],
            LoadErrorKind::Version(v) => vec![format!("Can't handle RDB format version {v}")],
            LoadErrorKind::ShortRead => vec![
                "Short read or OOM loading DB. Unrecoverable error, aborting now.".into(),
                internal("Unexpected EOF reading RDB file"),
            ],
            LoadErrorKind::Corrupt(reason) => vec![internal(reason)],
            LoadErrorKind::Fatal(msg) => vec![msg.clone()],
        }
    }
}

/// One step through the file.
#[derive(Debug)]
pub enum Record {
    /// An AUX field (`redis-ver`, `ctime`, `repl-id`, `%`-prefixed info fields ...).
    Aux(Vec<u8>, Vec<u8>),
    /// A function library's code.
    Function(Vec<u8>),
    /// The database the following keys belong to.
    SelectDb(usize),
    /// A key: its value comes next and must be read with `value` or `skip_value`.
    Key(KeyHeader),
    /// The end: the checksum stored in the file (None before RDB version 5), which
    /// covers the `body_len` bytes before it.
    Eof {
        stored: Option<u64>,
        body_len: usize,
    },
}

/// A key record's header: what came before its value.
#[derive(Debug)]
pub struct KeyHeader {
    pub value_type: u8,
    pub key: Vec<u8>,
    /// Unix ms, from EXPIRETIME_MS (or EXPIRETIME in seconds).
    pub expire_at: Option<u64>,
    /// From IDLE: seconds since the last access.
    pub idle_secs: Option<u64>,
    /// From FREQ: the LFU counter.
    pub freq: Option<u8>,
}

/// An RDB file being walked.
pub struct RdbReader<'a> {
    r: Reader<'a>,
    version: u16,
}

impl<'a> RdbReader<'a> {
    /// Checks the magic and version.
    pub fn new(file: &'a [u8]) -> Result<RdbReader<'a>, LoadError> {
        let mut r = Reader::new(file);
        let at = |kind| LoadError { offset: 0, kind };
        let magic = r.take(9).map_err(|_| at(LoadErrorKind::ShortRead))?;
        if &magic[..5] != b"REDIS" {
            return Err(at(LoadErrorKind::Signature));
        }
        let version = std::str::from_utf8(&magic[5..])
            .ok()
            .and_then(|v| v.parse::<u16>().ok())
            .unwrap_or(0);
        if !(1..=RDB_VERSION).contains(&version) {
            return Err(at(LoadErrorKind::Version(version)));
        }
        Ok(RdbReader { r, version })
    }

    /// A reader over bytes that continue a file of RDB `version` at a record
    /// boundary (its header already read): a socket's payload, read as it arrives.
    pub fn resume(bytes: &'a [u8], version: u16) -> RdbReader<'a> {
        RdbReader {
            r: Reader::new(bytes),
            version,
        }
    }

    pub fn version(&self) -> u16 {
        self.version
    }

    /// After a `ShortRead`: how many bytes the reader must have for the read that
    /// ran short to succeed (a retry with more may run short further on).
    pub fn needed(&self) -> usize {
        self.r.needed()
    }

    /// Bytes read so far (loading progress, error offsets).
    pub fn offset(&self) -> usize {
        self.r.pos()
    }

    /// The next record. After a `Record::Key`, call `value` or `skip_value` first.
    pub fn next_record(&mut self) -> Result<Record, LoadError> {
        let mut header = KeyHeader {
            value_type: 0,
            key: Vec::new(),
            expire_at: None,
            idle_secs: None,
            freq: None,
        };
        loop {
            let opcode = self.r.byte().map_err(|e| self.error(e))?;
            match opcode {
                OPCODE_EXPIRETIME => {
                    let secs = i32::from_le_bytes(self.read_array()?);
                    header.expire_at = Some((i64::from(secs) * 1000).max(0) as u64);
                }
                OPCODE_EXPIRETIME_MS => {
                    let ms = i64::from_le_bytes(self.read_array()?);
                    header.expire_at = Some(ms.max(0) as u64);
                }
                OPCODE_FREQ => header.freq = Some(self.read_array::<1>()?[0]),
                OPCODE_IDLE => header.idle_secs = Some(self.len()? as u64),
                OPCODE_EOF => return self.eof(),
                OPCODE_SELECTDB => return Ok(Record::SelectDb(self.len()?)),
                OPCODE_RESIZEDB => {
                    // A sizing hint: the tables grow as keys arrive anyway.
                    self.len()?;
                    self.len()?;
                }
                OPCODE_AUX => {
                    let key = self.string()?;
                    return Ok(Record::Aux(key, self.string()?));
                }
                OPCODE_MODULE_AUX => return Err(self.module_aux()),
                OPCODE_FUNCTION_PRE_GA => {
                    return Err(self.corrupt("Pre-release function format not supported."));
                }
                OPCODE_FUNCTION2 => return Ok(Record::Function(self.string()?)),
                TYPE_MODULE_PRE_GA => {
                    return Err(self.corrupt("Pre-release module format not supported"));
                }
                TYPE_MODULE_2 => return Err(self.module_value()),
                value_type if is_value_type(value_type) => {
                    header.value_type = value_type;
                    header.key = self.string()?;
                    return Ok(Record::Key(header));
                }
                other => {
                    return Err(self.corrupt(&format!("Unknown RDB encoding type {other}")));
                }
            }
        }
    }

    /// Decodes the value of the key `next_record` returned. `RestoreError::Empty` is a
    /// collection with no elements, which the caller skips as Redis does.
    pub fn value(&mut self, header: &KeyHeader) -> Result<DumpValue, (LoadError, RestoreError)> {
        let start = self.r.pos();
        read_value(header.value_type, &mut self.r).map_err(|e| (self.value_error(e, start), e))
    }

    /// Steps over the value of the key `next_record` returned.
    pub fn skip_value(&mut self, header: &KeyHeader) -> Result<(), LoadError> {
        let start = self.r.pos();
        skip_value(header.value_type, &mut self.r).map_err(|e| self.value_error(e, start))
    }

    fn eof(&mut self) -> Result<Record, LoadError> {
        let body_len = self.r.pos();
        if self.version < FIRST_CHECKSUMMED_VERSION {
            return Ok(Record::Eof {
                stored: None,
                body_len,
            });
        }
        let stored = u64::from_le_bytes(self.read_array()?);
        Ok(Record::Eof {
            stored: Some(stored),
            body_len,
        })
    }

    fn value_error(&self, e: RestoreError, start: usize) -> LoadError {
        match e {
            RestoreError::Empty => LoadError {
                offset: start,
                kind: LoadErrorKind::Corrupt("Empty keys are not allowed".into()),
            },
            _ => self.error(e),
        }
    }

    fn error(&self, _: RestoreError) -> LoadError {
        if self.r.ran_short() {
            LoadError {
                offset: self.r.pos(),
                kind: LoadErrorKind::ShortRead,
            }
        } else {
            self.corrupt("Bad data format")
        }
    }

    fn corrupt(&self, reason: &str) -> LoadError {
        LoadError {
            offset: self.r.pos(),
            kind: LoadErrorKind::Corrupt(reason.into()),
        }
    }

    fn read_array<const N: usize>(&mut self) -> Result<[u8; N], LoadError> {
        self.r.array().map_err(|e| self.error(e))
    }

    fn len(&mut self) -> Result<usize, LoadError> {
        self.r.len().map_err(|e| self.error(e))
    }

    fn string(&mut self) -> Result<Vec<u8>, LoadError> {
        self.r.string().map_err(|e| self.error(e))
    }

    /// MODULE_AUX: module id, then the data only the module can read.
    fn module_aux(&mut self) -> LoadError {
        let name = match self.r.len() {
            Ok(id) => module_type_name(id as u64),
            Err(e) => return self.error(e),
        };
        LoadError {
            offset: self.r.pos(),
            kind: LoadErrorKind::Fatal(format!(
                "The RDB file contains AUX module data I can't load: no matching module '{name}'"
            )),
        }
    }

    /// A module type's value: its 64-bit id names the type.
    fn module_value(&mut self) -> LoadError {
        if let Err(e) = self.r.string() {
            return self.error(e);
        }
        let name = match self.r.len() {
            Ok(id) => module_type_name(id as u64),
            Err(e) => return self.error(e),
        };
        self.corrupt(&format!(
            "The RDB file contains module data I can't load: no matching module type '{name}'"
        ))
    }
}

/// Whether `t` is a value type Redis 7.0 can load (module types are refused apart).
fn is_value_type(t: u8) -> bool {
    // 22..=25: Redis 7.4's hashes with field TTLs.
    matches!(t, 0..=5 | 9..=19 | 22..=25)
}

/// A module type's 9-character name, from the top 54 bits of its id (6 bits a
/// character), as Redis's moduleTypeNameByID spells it.
fn module_type_name(id: u64) -> String {
    const CHARSET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut id = id >> 10;
    let mut name = [0u8; 9];
    for c in name.iter_mut().rev() {
        *c = CHARSET[(id & 63) as usize];
        id >>= 6;
    }
    String::from_utf8_lossy(&name).into_owned()
}

/// Walks `file` twice in lock-step, one reader decoding every value and the other
/// stepping over them, and panics if they disagree: wherever a value decodes, skipping
/// it must succeed and end at the same byte (shards that skip a key must land where
/// its owner does). For the fuzz target and the mutation test; never panics otherwise.
#[doc(hidden)]
pub fn walk_both_ways(file: &[u8]) {
    let (Ok(mut decoding), Ok(mut skipping)) = (RdbReader::new(file), RdbReader::new(file)) else {
        return;
    };
    for _ in 0..file.len() + 1 {
        let (a, b) = (decoding.next_record(), skipping.next_record());
        assert_eq!(decoding.offset(), skipping.offset(), "records frame alike");
        let (Ok(Record::Key(ka)), Ok(Record::Key(kb))) = (&a, &b) else {
            assert_eq!(a.is_ok(), b.is_ok());
            if matches!(a, Ok(Record::Eof { .. }) | Err(_)) {
                return;
            }
            continue;
        };
        if decoding.value(ka).is_err() {
            return;
        }
        assert!(
            skipping.skip_value(kb).is_ok(),
            "a decodable value can be skipped"
        );
        assert_eq!(
            decoding.offset(),
            skipping.offset(),
            "skipping ends where decoding does"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::rdb::{dump, DumpValue};

    /// A file with one key of every kind `dump` writes, in two databases.
    fn sample_file() -> Vec<u8> {
        let values = [
            DumpValue::Str(b"12345".to_vec()),
            DumpValue::Str(vec![b'x'; 100]),
            DumpValue::List((0..300).map(|i| format!("item{i}").into_bytes()).collect()),
            DumpValue::Set((0..20).map(|i| i.to_string().into_bytes()).collect()),
            DumpValue::Set(vec![b"a".to_vec(), b"b".to_vec()]),
            DumpValue::Hash(vec![(b"f".to_vec(), b"v".to_vec())]),
            DumpValue::Hash(
                (0..600)
                    .map(|i| (format!("f{i}").into_bytes(), b"v".to_vec()))
                    .collect(),
            ),
            DumpValue::ZSet(vec![(b"m".to_vec(), 1.5), (b"n".to_vec(), f64::INFINITY)]),
            DumpValue::ZSet(
                (0..200)
                    .map(|i| (format!("m{i}").into_bytes(), f64::from(i)))
                    .collect(),
            ),
        ];
        let mut file = b"REDIS0010".to_vec();
        for db in [0u8, 3] {
            file.extend_from_slice(&[super::OPCODE_SELECTDB, db]);
            for (i, v) in values.iter().enumerate() {
                let payload = dump(v);
                file.extend_from_slice(&[super::OPCODE_EXPIRETIME_MS]);
                file.extend_from_slice(&(1_900_000_000_000u64 + i as u64).to_le_bytes());
                file.push(payload[0]);
                file.extend_from_slice(&[2, b'k', b'0' + i as u8]);
                file.extend_from_slice(&payload[1..payload.len() - 10]);
            }
        }
        file.push(super::OPCODE_EOF);
        let crc = crate::storage::rdb::crc64(0, &file);
        file.extend_from_slice(&crc.to_le_bytes());
        file
    }

    #[test]
    fn a_whole_file_reads_back_record_by_record() {
        let file = sample_file();
        let mut r = RdbReader::new(&file).expect("header");
        let (mut keys, mut dbs) = (0, Vec::new());
        loop {
            match r.next_record().expect("record") {
                Record::SelectDb(n) => dbs.push(n),
                Record::Key(h) => {
                    assert!(h.expire_at.is_some());
                    r.value(&h).expect("value");
                    keys += 1;
                }
                Record::Eof { stored, body_len } => {
                    assert_eq!(
                        stored,
                        Some(crate::storage::rdb::crc64(0, &file[..body_len]))
                    );
                    break;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!((keys, dbs), (18, vec![0, 3]));
        walk_both_ways(&file);
    }

    /// Seeded mutations of a valid file (flipped bytes, cut short, bytes inserted):
    /// no panic, and skipping always lands where decoding does.
    #[test]
    fn mutated_files_never_panic_and_skip_where_they_decode() {
        let file = sample_file();
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..3000 {
            let mut m = file.clone();
            let at = 9 + (next() as usize) % (m.len() - 9);
            match round % 3 {
                0 => m[at] ^= (next() as u8) | 1,
                1 => m.truncate(at),
                _ => m.insert(at, next() as u8),
            }
            walk_both_ways(&m);
        }
    }

    #[test]
    fn truncation_is_a_short_read_and_garbage_is_corrupt() {
        let file = sample_file();
        let cut = &file[..file.len() / 2];
        let mut r = RdbReader::new(cut).expect("header");
        let err = loop {
            match r.next_record() {
                Ok(Record::Key(h)) => {
                    if let Err((e, _)) = r.value(&h) {
                        break e;
                    }
                }
                Ok(_) => {}
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind, LoadErrorKind::ShortRead);
        let mut garbage = b"REDIS0010".to_vec();
        garbage.push(0x42);
        let err = RdbReader::new(&garbage).and_then(|mut r| r.next_record().map(drop));
        assert_eq!(
            err.map_err(|e| e.kind),
            Err(LoadErrorKind::Corrupt(
                "Unknown RDB encoding type 66".into()
            ))
        );
        assert_eq!(module_type_name(0), "AAAAAAAAA");
    }

    /// A reader fed a file in pieces, as a replica's diskless load is: every prefix
    /// that ends inside a record is a short read that names how many bytes it
    /// needs, more than it had and no more than the record's end; resuming from each
    /// record boundary reads the same records as one pass over the whole file.
    #[test]
    fn a_file_read_in_pieces_reads_as_the_whole() {
        let file = sample_file();
        let mut whole = RdbReader::new(&file).expect("header");
        let mut bounds = vec![whole.offset()];
        let mut keys = Vec::new();
        loop {
            match whole.next_record().expect("record") {
                Record::Key(h) => {
                    whole.value(&h).map_err(|(e, _)| e).expect("value");
                    keys.push(h.key);
                }
                Record::Eof { .. } => break,
                _ => {}
            }
            bounds.push(whole.offset());
        }
        let version = whole.version();
        for pair in bounds.windows(2) {
            let (start, end) = (pair[0], pair[1]);
            for cut in start..end {
                let mut r = RdbReader::resume(&file[start..cut], version);
                let err = match r.next_record() {
                    Ok(Record::Key(h)) => r.value(&h).map(drop).map_err(|(e, _)| e),
                    Ok(other) => panic!("a whole record from a cut one: {other:?}"),
                    Err(e) => Err(e),
                };
                assert_eq!(err.map_err(|e| e.kind), Err(LoadErrorKind::ShortRead));
                let needed = r.needed();
                assert!(needed > cut - start && needed <= end - start, "{needed}");
            }
        }
        let mut resumed = Vec::new();
        for pair in bounds.windows(2) {
            let mut r = RdbReader::resume(&file[pair[0]..], version);
            if let Ok(Record::Key(h)) = r.next_record() {
                r.value(&h).map_err(|(e, _)| e).expect("value");
                assert_eq!(r.offset(), pair[1] - pair[0]);
                resumed.push(h.key);
            }
        }
        assert_eq!(resumed, keys);
    }
}
