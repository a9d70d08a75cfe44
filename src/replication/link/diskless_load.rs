//! A replica's diskless load (`repl-diskless-load swapdb`, or `on-empty-db` when the
//! dataset is empty): the master's RDB is parsed as it arrives on the link, without a
//! file, and each key is stored on the shard that owns its slot, in batches per shard.
//!
//! `swapdb` loads beside the served dataset (`ShardData::loading_dbs`) and swaps it
//! in at the end, every shard at once under one multi-shard lock; a transfer that
//! breaks drops what it loaded and the old dataset is still there. When the master's
//! history is this replica's own (a full sync from the master it followed), the old
//! dataset is even served meanwhile (Redis's async_loading); otherwise clients get
//! -LOADING. `on-empty-db` loads straight into the (empty) served dataset.
//!
//! The parser works on the bytes received so far: a record that is not whole yet
//! runs short and is parsed again once more has come — at least what the short read
//! needed, and twice what was buffered unless the payload ends first, so a huge
//! record is re-parsed a logarithmic number of times.

use std::rc::Rc;
use std::time::{Duration, Instant};

use super::{detail, Body, Lines};
use crate::persistence::load::{self as rdb_load, ShardLoaded};
use crate::shard::{ShardCell, ShardData};
use crate::storage::rdb::records::{KeyHeader, LoadError, LoadErrorKind, RdbReader, Record};
use crate::storage::rdb::{DumpValue, RestoreError};

/// How a full sync's payload is loaded.
pub(super) struct Plan {
    /// swapdb: beside the served dataset, swapped in at the end.
    pub side: bool,
    /// The old dataset is served meanwhile (swapdb, and the master's history is
    /// this replica's).
    pub serve_old: bool,
}

/// Keys sent to a shard at once, and the bytes that also close a batch.
const BATCH_KEYS: usize = 512;
const BATCH_BYTES: usize = 1 << 20;

/// A turn of serving clients at least this often while the payload is parsed.
const TURN_TIME: Duration = Duration::from_millis(50);

/// One key read from the payload, for the shard that owns it.
struct LoadedKey {
    db: usize,
    header: KeyHeader,
    value: DumpValue,
    offset: usize,
}

/// Why a diskless load failed: the RDB's own error (logged as Redis logs it), and
/// the reason for "Failed trying to load the MASTER synchronization DB from socket".
struct Failure {
    rdb: Option<LoadError>,
    why: String,
}

impl Failure {
    fn plain(why: impl Into<String>) -> Failure {
        Failure {
            rdb: None,
            why: why.into(),
        }
    }

    /// Redis's lines for an RDB that failed to load from a socket: a short read is
    /// taken for a broken connection, anything else for a corrupt payload.
    fn log(&self) {
        let Some(e) = &self.rdb else {
            return;
        };
        let lines = e.log_lines();
        let last = lines.len().saturating_sub(1);
        for (i, line) in lines.into_iter().enumerate() {
            if i != last || !line.starts_with("Internal error in RDB") {
                tracing::warn!("{line}");
            } else if e.kind == LoadErrorKind::ShortRead {
                tracing::warn!(
                    "{line}. Failure loading rdb format from socket, assuming connection error, resuming operation."
                );
            } else {
                tracing::warn!("{line}. Failure loading rdb format");
            }
        }
    }
}

/// The payload as it arrives: what is buffered past the last whole record.
struct Payload<'a> {
    link: &'a mut Lines,
    /// Bytes of a `$<len>` payload still to take from the link (None: EOF-marked).
    left: Option<u64>,
    mark: Option<Vec<u8>>,
    /// Bytes received; those before `start` are parsed already (dropped now and
    /// then, not per record: a big buffer must not be moved for every small key).
    buf: Vec<u8>,
    start: usize,
    /// Where `start` is in the payload.
    base: usize,
}

impl Payload<'_> {
    /// Nothing more will come: a sized payload is all read, or the EOF mark is in.
    fn complete(&self) -> bool {
        match (&self.left, &self.mark) {
            (Some(left), _) => *left == 0,
            (None, Some(mark)) => self.buf.ends_with(mark),
            (None, None) => true,
        }
    }

    /// What is received and not parsed yet.
    fn data(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    async fn more(&mut self) -> Result<(), Failure> {
        let max = self.left.map_or(usize::MAX, |n| n as usize);
        let chunk = match self.link.chunk(max).await {
            Ok(c) => c,
            Err(why) => {
                return Err(Failure {
                    rdb: Some(LoadError {
                        offset: self.base + self.data().len(),
                        kind: LoadErrorKind::ShortRead,
                    }),
                    why,
                })
            }
        };
        if let Some(left) = &mut self.left {
            *left -= chunk.len() as u64;
        }
        detail().transfer_read += chunk.len() as u64;
        self.buf.extend_from_slice(&chunk);
        Ok(())
    }

    /// After a short read: waits for `needed` unparsed bytes in all and, unless the
    /// payload ends first, twice what there was. Err when it ends before `needed`.
    async fn grow(&mut self, needed: usize, offset: usize) -> Result<(), Failure> {
        let wanted = needed.max(self.data().len().saturating_mul(2));
        while self.data().len() < wanted {
            if self.complete() {
                if self.data().len() >= needed {
                    return Ok(());
                }
                return Err(Failure {
                    rdb: Some(LoadError {
                        offset,
                        kind: LoadErrorKind::ShortRead,
                    }),
                    why: "Unexpected EOF reading RDB file".into(),
                });
            }
            self.more().await?;
        }
        Ok(())
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        self.base += n;
        if self.start >= 1 << 16 && self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }
}

/// Loads the payload `body` from `link` as `plan` says. Err with the line the link
/// logs; the dataset is then as it was (swapdb) or empty.
pub(super) async fn load(
    cell: &Rc<ShardCell>,
    link: &mut Lines,
    body: Body,
    plan: Plan,
    generation: u64,
) -> Result<(), String> {
    let config = cell.data.borrow().config.clone();
    let aof_was_on = crate::persistence::aof::enabled();
    if aof_was_on {
        crate::persistence::rewrite::turn_off_at_run_time(&config);
    }
    if plan.side {
        cell.call_all(|c| c.data.borrow_mut().begin_side_load())
            .await;
    } else {
        crate::replication::disconnect_replicas(cell).await;
        tracing::info!("MASTER <-> REPLICA sync: Flushing old data");
        rdb_load::clear_all(cell).await;
    }
    tracing::info!("MASTER <-> REPLICA sync: Loading DB in memory");
    set_loading(&plan, true);
    let (left, mark) = match body {
        Body::Sized(n) => (Some(n), None),
        Body::Marked(mark) => (None, Some(mark)),
    };
    // INFO's loading_* fields; an EOF-marked payload has no known size (0, as Redis).
    crate::persistence::load::begin_socket_load(left.unwrap_or(0));
    let mut payload = Payload {
        link,
        left,
        mark,
        buf: Vec::new(),
        start: 0,
        base: 0,
    };
    let parsed = parse(
        cell,
        &mut payload,
        plan.side,
        crate::storage::rdb::validate_checksum(config.rdbchecksum()),
    )
    .await;
    let result = match parsed {
        Ok(_) if !super::current(generation) => Err(Failure::plain("REPLICAOF changed")),
        Ok(parsed) => finish(cell, parsed, &plan).await,
        Err(f) => Err(f),
    };
    crate::persistence::load::end_socket_load();
    set_loading(&plan, false);
    if let Err(f) = result {
        f.log();
        if plan.side {
            cell.call_all(|c| c.data.borrow_mut().discard_side_load())
                .await;
            tracing::info!("MASTER <-> REPLICA sync: Discarding temporary DB in background");
        } else {
            // A replica that started empty is left empty, not half-loaded.
            rdb_load::clear_all(cell).await;
        }
        return Err(format!(
            "Failed trying to load the MASTER synchronization DB from socket: {}",
            f.why
        ));
    }
    // Loaded without a save: a change the save points count (Redis's dirty++).
    cell.call_all(|c| c.data.borrow_mut().dirty = 0).await;
    cell.data.borrow_mut().dirty = 1;
    if aof_was_on {
        if let Err(e) = crate::persistence::rewrite::turn_on_at_run_time(cell).await {
            tracing::warn!("Failed enabling the AOF after successful master synchronization! Trying it again in one second. ({e})");
        }
    }
    Ok(())
}

fn set_loading(plan: &Plan, on: bool) {
    if plan.serve_old {
        crate::persistence::set_async_loading(on);
    } else {
        crate::persistence::set_loading(on);
    }
}

/// What the payload held besides the keys the shards stored.
struct Parsed {
    libraries: Vec<Vec<u8>>,
    counts: ShardLoaded,
}

/// Reads the payload record by record, sending each key to its shard, up to EOF,
/// its checksum and (EOF-marked payloads) the mark.
async fn parse(
    cell: &Rc<ShardCell>,
    payload: &mut Payload<'_>,
    side: bool,
    check: bool,
) -> Result<Parsed, Failure> {
    let (interval, databases, key_load_delay) = {
        let data = cell.data.borrow();
        let c = &data.config;
        let interval = c.loading_events_interval_bytes().max(1024) as usize;
        (interval, c.databases(), c.key_load_delay())
    };
    let version = read_header(payload).await?;
    let mut crc = crate::storage::rdb::crc64(0, &payload.data()[..9]);
    payload.consume(9);
    let mut batches = Batches::new(cell.shard_count());
    let mut parsed = Parsed {
        libraries: Vec::new(),
        counts: ShardLoaded::default(),
    };
    let (mut db, mut since_turn, mut turn_started) = (0usize, 0usize, Instant::now());
    loop {
        let step = {
            let mut reader = RdbReader::resume(payload.data(), version);
            match read_one(&mut reader) {
                Ok(step) => Ok((step, reader.offset())),
                Err(e) if e.kind == LoadErrorKind::ShortRead => Err(reader.needed()),
                Err(e) => {
                    return Err(Failure {
                        why: "Bad data format".into(),
                        rdb: Some(LoadError {
                            offset: payload.base + e.offset,
                            kind: e.kind,
                        }),
                    })
                }
            }
        };
        let (step, used) = match step {
            Ok(done) => done,
            Err(needed) => {
                let offset = payload.base + payload.data().len();
                payload.grow(needed, offset).await?;
                continue;
            }
        };
        let offset = payload.base;
        match step {
            Step::Record(Record::Eof { stored, .. }) => {
                let body = used - if stored.is_some() { 8 } else { 0 };
                crc = crate::storage::rdb::crc64(crc, &payload.data()[..body]);
                payload.consume(used);
                verify(stored, crc, check, payload.base)?;
                break;
            }
            Step::Record(Record::Aux(key, value)) => {
                let key = String::from_utf8_lossy(&key);
                rdb_load::log_aux_field(&key, &String::from_utf8_lossy(&value));
            }
            Step::Record(Record::Function(code)) => parsed.libraries.push(code),
            Step::Record(Record::SelectDb(n)) => {
                if n >= databases {
                    return Err(Failure {
                        why: "Bad data format".into(),
                        rdb: Some(LoadError {
                            offset,
                            kind: LoadErrorKind::Fatal(format!(
                                "FATAL: Data file was created with a Redis server configured to handle more than {databases} databases. Exiting\n"
                            )),
                        }),
                    });
                }
                db = n;
            }
            Step::Record(Record::Key(_)) => {}
            Step::Empty(header) => rdb_load::note_empty_key(&mut parsed.counts, &header.key),
            Step::Key(header, value) => {
                rdb_load::key_load_delay(key_load_delay);
                let shard = cell.slots.shard_of_key(&header.key);
                let key = LoadedKey {
                    db,
                    header,
                    value,
                    offset,
                };
                if batches.add(shard, key, used) {
                    parsed.counts.loaded += batches.send(cell, shard, side).await?;
                }
            }
        }
        crc = crate::storage::rdb::crc64(crc, &payload.data()[..used]);
        payload.consume(used);
        since_turn += used;
        if since_turn >= interval || turn_started.elapsed() >= TURN_TIME {
            crate::runtime::yield_now().await;
            (since_turn, turn_started) = (0, Instant::now());
        }
    }
    parsed.counts.loaded += batches.send_all(cell, side).await?;
    read_mark(payload).await?;
    Ok(parsed)
}

/// One step of the walk: a record, or a key record with its value read.
enum Step {
    Record(Record),
    Key(KeyHeader, DumpValue),
    /// An empty collection, skipped.
    Empty(KeyHeader),
}

fn read_one(reader: &mut RdbReader<'_>) -> Result<Step, LoadError> {
    match reader.next_record()? {
        Record::Key(header) => match reader.value(&header) {
            Ok(value) => Ok(Step::Key(header, value)),
            Err((_, RestoreError::Empty)) => Ok(Step::Empty(header)),
            Err((e, _)) => Err(e),
        },
        other => Ok(Step::Record(other)),
    }
}

/// The magic and version; the version the rest is read with.
async fn read_header(payload: &mut Payload<'_>) -> Result<u16, Failure> {
    loop {
        match RdbReader::new(payload.data()) {
            Ok(reader) => return Ok(reader.version()),
            Err(e) if e.kind == LoadErrorKind::ShortRead => payload.grow(9, 0).await?,
            Err(e) => {
                return Err(Failure {
                    why: "Bad data format".into(),
                    rdb: Some(e),
                })
            }
        }
    }
}

/// The CRC64 after EOF against the one summed, when `rdbchecksum` is yes.
fn verify(stored: Option<u64>, summed: u64, check: bool, offset: usize) -> Result<(), Failure> {
    match stored {
        Some(0) if check => {
            tracing::info!("RDB file was saved with checksum disabled: no check performed.");
            Ok(())
        }
        Some(stored) if check && stored != summed => {
            tracing::warn!(
                "Wrong RDB checksum expected: ({summed:x}) but got ({stored:x}). Aborting now."
            );
            Err(Failure {
                why: "Bad data format".into(),
                rdb: Some(LoadError {
                    offset,
                    kind: LoadErrorKind::Corrupt("RDB CRC error".into()),
                }),
            })
        }
        _ => Ok(()),
    }
}

/// An EOF-marked payload ends with its 40-byte mark right after the RDB; a sized
/// one has nothing after it.
async fn read_mark(payload: &mut Payload<'_>) -> Result<(), Failure> {
    let Some(mark) = payload.mark.clone() else {
        return if payload.data().is_empty() && payload.complete() {
            Ok(())
        } else {
            Err(Failure::plain("bytes after the RDB in the payload"))
        };
    };
    while payload.data().len() < mark.len() {
        if let Err(f) = payload.more().await {
            return Err(Failure::plain(f.why));
        }
    }
    if payload.data()[..mark.len()] != mark[..] {
        tracing::warn!("Replication stream EOF marker is broken");
        return Err(Failure::plain("the EOF marker is broken"));
    }
    // The master sends nothing more until this replica's first ACK; were there
    // more, it is the stream's start and stays in the link's buffer.
    let rest = payload.data()[mark.len()..].to_vec();
    payload.link.unread(rest);
    Ok(())
}

/// Keys waiting to be sent, one batch per shard.
struct Batches {
    keys: Vec<Vec<LoadedKey>>,
    bytes: Vec<usize>,
}

impl Batches {
    fn new(shards: usize) -> Batches {
        Batches {
            keys: (0..shards).map(|_| Vec::new()).collect(),
            bytes: vec![0; shards],
        }
    }

    /// Adds a key of `size` payload bytes; true when `shard`'s batch is full.
    fn add(&mut self, shard: usize, key: LoadedKey, size: usize) -> bool {
        self.keys[shard].push(key);
        self.bytes[shard] += size;
        self.keys[shard].len() >= BATCH_KEYS || self.bytes[shard] >= BATCH_BYTES
    }

    /// Stores `shard`'s batch on its shard; the keys stored.
    async fn send(
        &mut self,
        cell: &Rc<ShardCell>,
        shard: usize,
        side: bool,
    ) -> Result<u64, Failure> {
        let batch = std::mem::take(&mut self.keys[shard]);
        self.bytes[shard] = 0;
        if batch.is_empty() {
            return Ok(0);
        }
        let stored = if shard == cell.id {
            store(&mut cell.data.borrow_mut(), batch, side)
        } else {
            cell.call(shard, move |c| store(&mut c.data.borrow_mut(), batch, side))
                .await
        };
        stored.map_err(|e| Failure {
            why: "Bad data format".into(),
            rdb: Some(e),
        })
    }

    async fn send_all(&mut self, cell: &Rc<ShardCell>, side: bool) -> Result<u64, Failure> {
        let mut stored = 0;
        for shard in 0..self.keys.len() {
            stored += self.send(cell, shard, side).await?;
        }
        Ok(stored)
    }
}

/// A batch into this shard's databases (the side ones for swapdb).
fn store(data: &mut ShardData, batch: Vec<LoadedKey>, side: bool) -> Result<u64, LoadError> {
    let lru = crate::util::lru_clock();
    let ShardData {
        dbs,
        loading_dbs,
        limits,
        ..
    } = data;
    let target = if side { loading_dbs } else { dbs };
    let mut stored = 0;
    for key in batch {
        let Some(keyspace) = target.get_mut(key.db) else {
            return Err(LoadError {
                offset: key.offset,
                kind: LoadErrorKind::Fatal("the load was abandoned".into()),
            });
        };
        match rdb_load::store_value(keyspace, limits, &key.header, key.value, lru, false) {
            Ok(true) => stored += 1,
            Ok(false) => {}
            Err(duplicate) => return Err(duplicate.at(key.offset, key.db)),
        }
    }
    Ok(stored)
}

/// The load succeeded: swapdb swaps the loaded dataset in (every shard at once) with
/// the payload's function libraries; on-empty-db installs the libraries.
async fn finish(cell: &Rc<ShardCell>, parsed: Parsed, plan: &Plan) -> Result<(), Failure> {
    use crate::scripting::functions::Policy;
    let broken = |e: LoadError| Failure {
        why: "Bad data format".into(),
        rdb: Some(e),
    };
    if !plan.side {
        if !parsed.libraries.is_empty() {
            rdb_load::install_libraries_as(parsed.libraries, Policy::Append)
                .await
                .map_err(broken)?;
        }
        rdb_load::log_done(std::slice::from_ref(&parsed.counts));
        return Ok(());
    }
    // The replicas of this one follow the new history from scratch.
    crate::replication::disconnect_replicas(cell).await;
    tracing::info!("MASTER <-> REPLICA sync: Swapping active DB with loaded DB");
    let owner = crate::shard::locks::LockOwner {
        id: cell.next_txn_id(),
        write: true,
        client: 0,
    };
    let op = crate::shard::multi::MultiShardOp::lock_all(owner, cell).await;
    if let Err(e) = rdb_load::install_libraries_as(parsed.libraries, Policy::Flush).await {
        op.release(cell).await;
        return Err(broken(e));
    }
    op.on_each(cell, |d| d.swap_in_side_load()).await;
    op.release(cell).await;
    crate::tracking::notify_flush(cell).await;
    tracing::info!("MASTER <-> REPLICA sync: Discarding old DB in background");
    rdb_load::log_done(std::slice::from_ref(&parsed.counts));
    Ok(())
}
