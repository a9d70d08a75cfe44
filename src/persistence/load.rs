//! Loading `dir`/`dbfilename` at start, as Redis 7.0's loadDataFromDisk does, with
//! every shard loading its own slots in parallel.
//!
//! The main thread opens and maps the file and logs its AUX fields (`open`); every
//! shard then walks the whole file (`load_shard`), decoding the keys whose slots it
//! owns and stepping over the others' (framing them is far cheaper than decoding),
//! and yields to its reactor every `loading-process-events-interval-bytes` so that
//! clients get `-LOADING` rather than silence. Meanwhile the main thread checks the
//! CRC64 and logs progress every 2 seconds (`finish`). Nothing is served until every
//! shard and the checksum agree: a file that fails anywhere stops the server before
//! any client sees a key of it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::shard::{ShardCell, ShardData};
use crate::storage::rdb::records::{KeyHeader, LoadError, LoadErrorKind, RdbReader, Record};
use crate::storage::rdb::{crc64, RestoreError};
use crate::storage::NO_EXPIRE;

/// A file being loaded: its bytes (mapped), and how far each shard has got.
pub struct RdbFile {
    path: String,
    map: Mapped,
    /// Bytes each shard has walked (INFO's loading_loaded_bytes is the least).
    walked: Vec<AtomicU64>,
    started: Instant,
    started_unix: u64,
    /// The `used-mem` AUX field (INFO's loading_rdb_used_mem).
    used_mem: u64,
}

impl RdbFile {
    fn new(path: &std::path::Path, map: Mapped, shards: usize) -> RdbFile {
        RdbFile {
            path: path.display().to_string(),
            map,
            walked: (0..shards).map(|_| AtomicU64::new(0)).collect(),
            started: Instant::now(),
            started_unix: crate::util::now_ms() / 1000,
            used_mem: 0,
        }
    }
}

/// What one shard loaded.
#[derive(Default)]
pub struct ShardLoaded {
    pub loaded: u64,
    pub expired: u64,
    pub empty_skipped: u64,
    /// Where EOF was and the checksum after it (None before RDB version 5).
    eof: (usize, Option<u64>),
}

/// How a load ends for one shard: what it loaded, or why the file is refused.
pub type ShardResult = Result<ShardLoaded, LoadError>;

/// The replication id and offset a file recorded (AUX `repl-id`, `repl-offset`,
/// `repl-stream-db`), kept for partial resynchronization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedReplication {
    pub id: String,
    pub offset: i64,
    pub stream_db: i64,
}

static SAVED_REPLICATION: Mutex<Option<SavedReplication>> = Mutex::new(None);

/// What the loaded file said of replication, if it said it all.
pub fn saved_replication() -> Option<SavedReplication> {
    SAVED_REPLICATION
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// A master starting from a file that recorded its replication: keys the load finds
/// expired go into the effect stream as DELs (Redis's RDBFLAGS_FEED_REPL), for the
/// replicas that continue from the backlog. Set only for the load at start.
static FEED_EXPIRED: AtomicBool = AtomicBool::new(false);

/// Turns the DELs of keys found expired at start on (before the shards load) or
/// off (once they loaded).
pub fn feed_expired_to_stream(on: bool) {
    FEED_EXPIRED.store(on, Ordering::Relaxed);
}

/// The file being loaded, for INFO's loading_* fields.
static CURRENT: Mutex<Option<Arc<RdbFile>>> = Mutex::new(None);

/// Keys the last load added and dropped as expired (INFO rdb_last_load_keys_*).
pub static LAST_LOAD_KEYS_LOADED: AtomicU64 = AtomicU64::new(0);
pub static LAST_LOAD_KEYS_EXPIRED: AtomicU64 = AtomicU64::new(0);

/// Opens `dir`/`dbfilename` for loading: None when there is none (an empty dataset,
/// as Redis starts), Redis's fatal line when it cannot be read.
pub fn open(config: &crate::config::Config, shards: usize) -> Result<Option<Arc<RdbFile>>, String> {
    let path = std::path::Path::new(config.dir()).join(config.dbfilename());
    open_path(&path, shards)
}

/// `open`, for the file at `path` (an AOF's RDB base).
pub fn open_path(path: &std::path::Path, shards: usize) -> Result<Option<Arc<RdbFile>>, String> {
    let path = path.to_path_buf();
    let map = match Mapped::open(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            let text = crate::util::io_error_text(&e);
            return Err(format!("Fatal error loading the DB: {text}. Exiting."));
        }
    };
    let mut file = RdbFile::new(&path, map, shards);
    file.used_mem = log_aux_fields(file.map.bytes());
    let file = Arc::new(file);
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = Some(file.clone());
    super::set_loading(true);
    Ok(Some(file))
}

/// Logs one AUX field as Redis does while it reads it.
pub fn log_aux_field(key: &str, value: &str) {
    let number = || value.trim().parse::<i64>().unwrap_or(0);
    match key.to_ascii_lowercase().as_str() {
        k if k.starts_with('%') => tracing::info!("RDB '{key}': {value}"),
        "redis-ver" => tracing::info!("Loading RDB produced by version {value}"),
        "ctime" => {
            let age = (crate::util::now_ms() / 1000) as i64 - number();
            tracing::info!("RDB age {} seconds", age.max(0));
        }
        "used-mem" => {
            if let Some(load) = socket_load().as_mut() {
                load.used_mem = number().max(0) as u64;
            }
            let mb = number().max(0) as f64 / (1024.0 * 1024.0);
            tracing::info!("RDB memory usage when created {mb:.2} Mb");
        }
        "aof-preamble" if number() != 0 => tracing::info!("RDB has an AOF tail"),
        "aof-base" if number() != 0 => tracing::info!("RDB is base AOF"),
        "redis-bits" | "lua" | "aof-preamble" | "aof-base" | "repl-id" | "repl-offset"
        | "repl-stream-db" => {}
        _ => tracing::debug!("Unrecognized RDB AUX field: '{key}'"),
    }
}

/// Logs the AUX fields before the first key, as Redis logs them while it reads them,
/// and keeps the replication ones. Returns `used-mem`.
fn log_aux_fields(bytes: &[u8]) -> u64 {
    let Ok(mut reader) = RdbReader::new(bytes) else {
        return 0; // every shard reports the bad header
    };
    let (mut used_mem, mut repl) = (0, (None, None, None));
    while let Ok(Record::Aux(key, value)) = reader.next_record() {
        let key = String::from_utf8_lossy(&key).into_owned();
        let value = String::from_utf8_lossy(&value).into_owned();
        log_aux_field(&key, &value);
        let number = || value.trim().parse::<i64>().unwrap_or(0);
        match key.to_ascii_lowercase().as_str() {
            "used-mem" => used_mem = number().max(0) as u64,
            "repl-id" if value.len() == 40 => repl.0 = Some(value),
            "repl-offset" => repl.1 = Some(number()),
            "repl-stream-db" => repl.2 = Some(number()),
            _ => {}
        }
    }
    let mut saved_replication = None;
    if let (Some(id), Some(offset), Some(stream_db)) = repl {
        if offset != -1 && stream_db != -1 {
            saved_replication = Some(SavedReplication {
                id,
                offset,
                stream_db,
            });
        }
    }
    // A file without them says nothing of replication, whatever an earlier one said.
    *SAVED_REPLICATION.lock().unwrap_or_else(|e| e.into_inner()) = saved_replication;
    used_mem
}

/// One shard's walk through the file at start: its own keys into its databases, a
/// turn of serving clients every `loading-process-events-interval-bytes`.
pub async fn load_shard(
    cell: std::rc::Rc<ShardCell>,
    file: Arc<RdbFile>,
    done: Sender<ShardResult>,
) {
    let result = walk_serving(&cell, &file).await;
    let result = match result {
        Ok(walk) if !walk.libraries.is_empty() => install_libraries(walk.libraries, false)
            .await
            .map(|()| walk.out),
        other => other.map(|walk| walk.out),
    };
    let _ = done.send(result);
}

async fn walk_serving<'a>(cell: &ShardCell, file: &'a RdbFile) -> Result<Walk<'a>, LoadError> {
    let (mut walk, interval) = {
        let data = cell.data.borrow();
        let interval = data.config.loading_events_interval_bytes().max(1024) as usize;
        let mut walk = Walk::new(file.map.bytes(), &data, false)?;
        if FEED_EXPIRED.load(Ordering::Relaxed) {
            let unlink = data.config.bool_param("lazyfree-lazy-expire") == Some(true);
            walk.expired_dels = Some(if unlink { &b"UNLINK"[..] } else { b"DEL" });
        }
        (walk, interval)
    };
    loop {
        let done = walk.run(&mut cell.data.borrow_mut(), interval, true)?;
        let walked = if done {
            file.map.len()
        } else {
            walk.reader.offset()
        };
        file.walked[cell.id].store(walked as u64, Ordering::Relaxed);
        if done {
            return Ok(walk);
        }
        crate::runtime::yield_now().await;
    }
}

/// One shard's walk through a file: where it is, what it has loaded.
struct Walk<'a> {
    reader: RdbReader<'a>,
    db: usize,
    /// Keys that expired before this moment are dropped (on a master).
    now: u64,
    lru: u32,
    keep_expired: bool,
    /// The command a dropped expired key propagates as (`feed_expired_to_stream`).
    expired_dels: Option<&'static [u8]>,
    /// DEBUG RELOAD MERGE: a key already present is replaced, not a corrupt file.
    replace_existing: bool,
    key_load_delay: i64,
    databases: usize,
    out: ShardLoaded,
    /// Function libraries' codes, collected by shard 0 only.
    libraries: Vec<Vec<u8>>,
}

impl<'a> Walk<'a> {
    fn new(bytes: &'a [u8], data: &ShardData, replace_existing: bool) -> Result<Self, LoadError> {
        Ok(Walk {
            reader: RdbReader::new(bytes)?,
            db: 0,
            now: crate::util::now_ms(),
            lru: crate::util::lru_clock(),
            keep_expired: crate::replication::is_replica(),
            expired_dels: None,
            replace_existing,
            key_load_delay: data.config.key_load_delay(),
            databases: data.config.databases(),
            out: ShardLoaded {
                loaded: 0,
                expired: 0,
                empty_skipped: 0,
                eof: (0, None),
            },
            libraries: Vec::new(),
        })
    }

    /// Walks on for about `budget` bytes, or (checked every 64 records) `TURN_TIME`
    /// when `timed`: slow keys (`key-load-delay`, huge values) must not keep the
    /// shard's clients, INFO and a shutdown waiting. True once EOF is reached.
    fn run(&mut self, data: &mut ShardData, budget: usize, timed: bool) -> Result<bool, LoadError> {
        const TURN_TIME: Duration = Duration::from_millis(50);
        let stop_at = self.reader.offset().saturating_add(budget);
        let started = Instant::now();
        let mut records = 0u32;
        while self.reader.offset() < stop_at {
            records = records.wrapping_add(1);
            if timed && records.is_multiple_of(64) && started.elapsed() >= TURN_TIME {
                break;
            }
            match self.reader.next_record()? {
                Record::Aux(..) => {}
                Record::Function(code) => {
                    if data.id == 0 {
                        self.libraries.push(code);
                    }
                }
                Record::SelectDb(n) => self.select(n)?,
                Record::Key(header) => self.key(data, &header)?,
                Record::Eof { stored, body_len } => {
                    self.out.eof = (body_len, stored);
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    fn select(&mut self, db: usize) -> Result<(), LoadError> {
        if db >= self.databases {
            return Err(LoadError {
                offset: self.reader.offset(),
                kind: LoadErrorKind::Fatal(format!(
                    "FATAL: Data file was created with a Redis server configured to handle \
                     more than {} databases. Exiting\n",
                    self.databases
                )),
            });
        }
        self.db = db;
        Ok(())
    }

    /// A key record: stored if this shard owns its slot, stepped over if not.
    fn key(&mut self, data: &mut ShardData, header: &KeyHeader) -> Result<(), LoadError> {
        // key-load-delay slows every shard by every key of the file, so a load takes
        // as long as Redis's would (tests rely on it to catch a server loading).
        key_load_delay(self.key_load_delay);
        if !data.dbs[self.db].holds_slot_of(&header.key) {
            return self.reader.skip_value(header);
        }
        if !self.keep_expired && header.expire_at.is_some_and(|at| at < self.now) {
            // A master drops what expired while the file sat on disk (a replica keeps
            // it: its master decides); the value need not be decoded to be dropped.
            self.reader.skip_value(header)?;
            self.out.expired += 1;
            if let Some(del) = self.expired_dels {
                crate::effects::propagate(None, self.db, vec![del.to_vec(), header.key.to_vec()]);
            }
        } else {
            self.store(data, header)?;
        }
        Ok(())
    }

    /// Decodes one key's value and stores it.
    fn store(&mut self, data: &mut ShardData, header: &KeyHeader) -> Result<(), LoadError> {
        let offset = self.reader.offset();
        let value = match self.reader.value(header) {
            Ok(v) => v,
            Err((_, RestoreError::Empty)) => {
                note_empty_key(&mut self.out, &header.key);
                return Ok(());
            }
            Err((e, _)) => return Err(e),
        };
        let ShardData { dbs, limits, .. } = data;
        let keyspace = &mut dbs[self.db];
        let stored = store_value(
            keyspace,
            limits,
            header,
            value,
            self.lru,
            self.replace_existing,
        );
        match stored {
            Ok(true) => self.out.loaded += 1,
            Ok(false) => note_empty_key(&mut self.out, &header.key),
            Err(duplicate) => return Err(duplicate.at(offset, self.db)),
        }
        Ok(())
    }
}

/// Old versions could write empty collections: Redis skips them (logging the first
/// ten), and so do we.
pub fn note_empty_key(out: &mut ShardLoaded, key: &[u8]) {
    out.empty_skipped += 1;
    if out.empty_skipped <= 10 {
        let key = String::from_utf8_lossy(key);
        tracing::info!("rdbLoadObject skipping empty key: {key}");
    }
}

/// A key the file holds twice (Redis refuses such a file).
pub struct DuplicateKey(Vec<u8>);

impl DuplicateKey {
    pub fn at(self, offset: usize, db: usize) -> LoadError {
        let key = String::from_utf8_lossy(&self.0);
        LoadError {
            offset,
            kind: LoadErrorKind::Fatal(format!(
                "RDB has duplicated key '{key}' in DB {db}: duplicated key found in RDB file"
            )),
        }
    }
}

/// Stores one loaded key in `keyspace` with its TTL and access data: Ok(false) when
/// the value is an empty collection (skipped). A key already present is replaced
/// when `replace_existing` (DEBUG RELOAD MERGE), a duplicate otherwise.
pub fn store_value(
    keyspace: &mut crate::storage::Db,
    limits: &crate::storage::limits::EncodingLimits,
    header: &KeyHeader,
    value: crate::storage::rdb::DumpValue,
    lru_now: u32,
    replace_existing: bool,
) -> Result<bool, DuplicateKey> {
    let Some(value) = value.into_value(limits) else {
        return Ok(false);
    };
    let at = header.expire_at.unwrap_or(NO_EXPIRE);
    let lru = lru_now - header.idle_secs.unwrap_or(0).min(u64::from(lru_now)) as u32;
    let before = keyspace.len();
    match header.freq {
        Some(freq) => keyspace.insert_with_access(&header.key, value, at, lru, freq),
        None => keyspace.insert(&header.key, value, at, lru),
    };
    if keyspace.len() == before && !replace_existing {
        return Err(DuplicateKey(header.key.clone()));
    }
    Ok(true)
}

/// `key-load-delay`: Redis's debugDelay, to make loading slow in tests.
pub fn key_load_delay(delay: i64) {
    let micros = match delay {
        0 => return,
        d if d < 0 => u64::from(crate::util::now_us().is_multiple_of(d.unsigned_abs())),
        d => d as u64,
    };
    if micros > 0 {
        std::thread::sleep(Duration::from_micros(micros));
    }
}

/// The function libraries the file holds, compiled and installed (all or none);
/// `replace`: one of the same name is replaced (DEBUG RELOAD MERGE).
async fn install_libraries(codes: Vec<Vec<u8>>, replace: bool) -> Result<(), LoadError> {
    use crate::scripting::functions::Policy;
    let policy = if replace {
        Policy::Replace
    } else {
        Policy::Append
    };
    install_libraries_as(codes, policy).await
}

/// `install_libraries` with FUNCTION RESTORE's `policy` (Flush: the libraries replace
/// every one present, as a replica's swapdb load ends).
pub async fn install_libraries_as(
    codes: Vec<Vec<u8>>,
    policy: crate::scripting::functions::Policy,
) -> Result<(), LoadError> {
    use crate::scripting::vm;
    let (done, rx) = futures_channel::oneshot::channel();
    vm::run(vm::Job::FunctionRestore {
        payload: crate::scripting::functions::Restored { codes, error: None },
        policy,
        done,
    })
    .await;
    let failed = |why: String| LoadError {
        offset: 0,
        kind: LoadErrorKind::Fatal(format!("Failed loading library, {why}")),
    };
    match rx.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(failed(e.trim_start_matches("ERR ").to_string())),
        Err(_) => Err(failed("the script engine failed".into())),
    }
}

/// DEBUG RELOAD [MERGE] [NOFLUSH] [NOSAVE]: save (unless NOSAVE), empty the dataset
/// (unless NOFLUSH) and load the file back, every shard at once while all are locked,
/// as Redis does it synchronously. MERGE lets the file's keys replace those present.
/// A file that fails to load ends the server, as it does in Redis: the dataset is
/// already gone.
pub async fn reload(
    cell: &std::rc::Rc<ShardCell>,
    save: bool,
    flush: bool,
    merge: bool,
) -> Result<(), &'static str> {
    if save && super::save::save(cell).await.is_err() {
        return Err("ERR");
    }
    let path = {
        let data = cell.data.borrow();
        std::path::Path::new(data.config.dir()).join(data.config.dbfilename())
    };
    load_into(cell, &path, flush, merge).await?;
    tracing::warn!("DB reloaded by DEBUG RELOAD");
    Ok(())
}

/// Loads the RDB file at `path` into the running server with every shard held
/// (emptied first when `flush`), as DEBUG RELOAD and DEBUG LOADAOF do. Returns where
/// the RDB ended in the file.
pub async fn load_into(
    cell: &std::rc::Rc<ShardCell>,
    path: &std::path::Path,
    flush: bool,
    merge: bool,
) -> Result<u64, &'static str> {
    match load_held(cell, path, flush, merge).await {
        Ok(end) => Ok(end),
        Err(Failed::Refused) => Err(RELOAD_FAILED),
        Err(Failed::Broken(e)) => exit_refusing(&e),
    }
}

/// A full sync's file, loaded as the startup file is: every shard emptied, then each
/// walks the file between turns of serving its clients, who get -LOADING meanwhile
/// (Redis's replica with repl-diskless-load disabled), the checksum summed as they
/// go. A file that breaks leaves the dataset empty (the link retries).
pub async fn load_from_master(
    cell: &std::rc::Rc<ShardCell>,
    path: &std::path::Path,
) -> Result<(), String> {
    let shards = cell.shard_count();
    let file = match open_path(path, shards) {
        Ok(Some(file)) => file,
        Ok(None) => return Err("the file is gone".into()),
        Err(e) => return Err(e),
    };
    clear_all(cell).await;
    let check = crate::storage::rdb::validate_checksum(cell.data.borrow().config.rdbchecksum());
    let (tx, rx) = std::sync::mpsc::channel();
    let walked = file.clone();
    cell.call_all(move |c| {
        let (c, file, done) = (c.clone(), walked.clone(), tx.clone());
        crate::runtime::spawn_detached(load_shard(c, file, done));
    })
    .await;
    let result = collect_serving(&file, rx, shards, check).await;
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = None;
    if let Err(e) = result {
        // The reason only: the server goes on (empty) and the link retries.
        for line in e.log_lines() {
            tracing::warn!("{line}");
        }
        clear_all(cell).await;
        return Err("the file is corrupt".into());
    }
    Ok(())
}

/// `finish` for a load on a running server: waits for every shard's walk without
/// blocking this shard, summing the checksum a slice per turn.
async fn collect_serving(
    file: &RdbFile,
    results: Receiver<ShardResult>,
    shards: usize,
    check: bool,
) -> Result<(), LoadError> {
    let bytes = file.map.bytes();
    let mut crc = Checksum::default();
    let mut done = Vec::with_capacity(shards);
    let mut failed = None;
    let mut last_progress = Instant::now();
    // Every walk sends one result, and each must end before the dataset is touched.
    for _ in 0..shards {
        let result = loop {
            match results.try_recv() {
                Ok(r) => break r,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    return Err(failed.unwrap_or(LoadError {
                        offset: 0,
                        kind: LoadErrorKind::Fatal("A shard stopped while loading".into()),
                    }));
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => {}
            }
            let summed = check
                && failed.is_none()
                && crc.advance_by(bytes, bytes.len().saturating_sub(8), SERVING_SLICE);
            if summed {
                crate::runtime::yield_now().await;
            } else {
                crate::runtime::sleep(Duration::from_millis(1)).await;
            }
            if last_progress.elapsed() >= Duration::from_secs(2) {
                last_progress = Instant::now();
                log_progress(file);
            }
        };
        match result {
            Ok(loaded) => done.push(loaded),
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    verify_checksum(file, &done, check, &mut crc)?;
    log_done(&done);
    Ok(())
}

/// How much of the file a running server's load sums per turn of its shard.
const SERVING_SLICE: usize = 1 << 20;

/// Why `load_held` did not load: the file is no RDB at all (refused, logged, the
/// dataset as it was), or it broke mid-way (the dataset is partly loaded).
enum Failed {
    Refused,
    Broken(LoadError),
}

async fn load_held(
    cell: &std::rc::Rc<ShardCell>,
    path: &std::path::Path,
    flush: bool,
    merge: bool,
) -> Result<u64, Failed> {
    let check = crate::storage::rdb::validate_checksum(cell.data.borrow().config.rdbchecksum());
    let Ok(map) = Mapped::open(path) else {
        return Err(Failed::Refused);
    };
    // Nobody watches a reload's progress: no per-shard counters.
    let file = Arc::new(RdbFile::new(path, map, 0));
    let owner = crate::shard::locks::LockOwner {
        id: cell.next_txn_id(),
        write: true,
        client: 0,
    };
    let op = crate::shard::multi::MultiShardOp::lock_all(owner, cell).await;
    if !flush && !merge {
        if let Some(name) = library_already_present(file.map.bytes()) {
            // Redis reads the libraries before any key, fails on the first one present
            // and answers an error, the dataset untouched.
            tracing::warn!("Failed loading library, Library '{name}' already exists");
            tracing::warn!("Short read or OOM loading DB. Unrecoverable error, aborting now.");
            op.release(cell).await;
            return Err(Failed::Refused);
        }
    }
    if flush {
        op.on_each(cell, |d| d.dbs.iter_mut().for_each(|db| db.clear()))
            .await;
        crate::scripting::functions::flush();
    }
    let shared = file.clone();
    let walked: Vec<Result<_, LoadError>> = op
        .on_each(cell, move |d| {
            let mut walk = Walk::new(shared.map.bytes(), d, merge)?;
            walk.run(d, usize::MAX, false)?;
            Ok((walk.out, walk.libraries))
        })
        .await;
    let mut done = Vec::with_capacity(walked.len());
    let mut libraries = Vec::new();
    for result in walked {
        match result {
            Ok((out, libs)) => {
                done.push(out);
                libraries.extend(libs);
            }
            // A file that is no RDB at all is refused with an error, as Redis does;
            // one that breaks mid-way ends the server.
            Err(e) if matches!(e.kind, LoadErrorKind::Signature | LoadErrorKind::Version(_)) => {
                refuse(&e);
                op.release(cell).await;
                return Err(Failed::Refused);
            }
            Err(e) => {
                op.release(cell).await;
                return Err(Failed::Broken(e));
            }
        }
    }
    if let Err(e) = verify_checksum(&file, &done, check, &mut Checksum::default()) {
        op.release(cell).await;
        return Err(Failed::Broken(e));
    }
    if !libraries.is_empty() {
        if let Err(e) = install_libraries(libraries, merge).await {
            op.release(cell).await;
            return Err(Failed::Broken(e));
        }
    }
    op.release(cell).await;
    log_done(&done);
    let (body_len, stored) = done.first().map_or((0, None), |d| d.eof);
    Ok((body_len + if stored.is_some() { 8 } else { 0 }) as u64)
}

/// The name of a function library the file holds (they come before its first
/// database) that is already loaded, if any: DEBUG RELOAD NOFLUSH without MERGE
/// refuses such a file before it touches the dataset.
fn library_already_present(bytes: &[u8]) -> Option<String> {
    let (_, present) = crate::scripting::functions::snapshot();
    if present.is_empty() {
        return None;
    }
    let mut reader = RdbReader::new(bytes).ok()?;
    loop {
        match reader.next_record().ok()? {
            Record::Aux(..) => {}
            Record::Function(code) => {
                let (name, _) = crate::scripting::functions::parse_metadata(&code).ok()?;
                if present.iter().any(|l| l.name == name) {
                    return Some(name);
                }
            }
            Record::SelectDb(_) | Record::Key(_) | Record::Eof { .. } => return None,
        }
    }
}

/// Empties every database and the function libraries with every shard held, without
/// propagating anything (DEBUG LOADAOF before it loads).
pub async fn clear_all(cell: &std::rc::Rc<ShardCell>) {
    let owner = crate::shard::locks::LockOwner {
        id: cell.next_txn_id(),
        write: true,
        client: 0,
    };
    let op = crate::shard::multi::MultiShardOp::lock_all(owner, cell).await;
    op.on_each(cell, |d| d.dbs.iter_mut().for_each(|db| db.clear()))
        .await;
    crate::scripting::functions::flush();
    op.release(cell).await;
}

const RELOAD_FAILED: &str = "ERR Error trying to load the RDB dump";

/// A file failed to load into a dataset already emptied: log why and stop.
fn exit_refusing(e: &LoadError) -> ! {
    refuse(e);
    std::process::exit(1)
}

/// Waits for every shard, checks the CRC64 meanwhile and logs progress every 2 s.
/// `on_tick` runs every 100 ms or so (the server polls its signals there). Returns
/// where the RDB ended in the file (an old AOF's command tail starts there) once the
/// dataset is loaded; None when the file was refused (logged). The caller ends the
/// loading state (an AOF may have more to load).
pub fn finish(
    file: &RdbFile,
    results: Receiver<ShardResult>,
    shards: usize,
    check: bool,
    mut on_tick: impl FnMut(),
) -> Option<u64> {
    let bytes = file.map.bytes();
    let mut crc = Checksum::default();
    let mut done = Vec::with_capacity(shards);
    let mut last_progress = Instant::now();
    while done.len() < shards {
        // The checksum in slices, so the progress line and the results are not held up.
        let timeout = if check && crc.advance(bytes, bytes.len().saturating_sub(8)) {
            Duration::ZERO
        } else {
            Duration::from_millis(100)
        };
        match results.recv_timeout(timeout) {
            Ok(Ok(loaded)) => done.push(loaded),
            Ok(Err(e)) => {
                refuse(&e);
                return None;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                tracing::warn!("A shard stopped while loading the DB. Exiting.");
                return None;
            }
        }
        on_tick();
        if last_progress.elapsed() >= Duration::from_secs(2) {
            last_progress = Instant::now();
            log_progress(file);
        }
    }
    if let Err(e) = verify_checksum(file, &done, check, &mut crc) {
        refuse(&e);
        return None;
    }
    log_done(&done);
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let (body_len, stored) = done.first().map_or((0, None), |d| d.eof);
    Some((body_len + if stored.is_some() { 8 } else { 0 }) as u64)
}

/// Checks the file's CRC64 against the one after EOF (`crc` holds what was summed
/// while the shards loaded), as Redis does when `rdbchecksum` is yes.
fn verify_checksum(
    file: &RdbFile,
    done: &[ShardLoaded],
    check: bool,
    crc: &mut Checksum,
) -> Result<(), LoadError> {
    let Some(&(body_len, Some(stored))) = done.first().map(|d| &d.eof) else {
        return Ok(());
    };
    if !check {
        return Ok(());
    }
    if stored == 0 {
        tracing::info!("RDB file was saved with checksum disabled: no check performed.");
        return Ok(());
    }
    let expected = crc.finish(file.map.bytes(), body_len);
    if stored != expected {
        tracing::warn!(
            "Wrong RDB checksum expected: ({expected:x}) but got ({stored:x}). Aborting now."
        );
        return Err(LoadError {
            offset: body_len + 8,
            kind: LoadErrorKind::Corrupt("RDB CRC error".into()),
        });
    }
    Ok(())
}

/// The counts INFO shows and Redis's "Done loading RDB" line.
pub fn log_done(done: &[ShardLoaded]) {
    let sum = |f: fn(&ShardLoaded) -> u64| done.iter().map(f).sum::<u64>();
    let (loaded, expired, empty) = (
        sum(|d| d.loaded),
        sum(|d| d.expired),
        sum(|d| d.empty_skipped),
    );
    LAST_LOAD_KEYS_LOADED.store(loaded, Ordering::Relaxed);
    LAST_LOAD_KEYS_EXPIRED.store(expired, Ordering::Relaxed);
    if empty > 0 {
        tracing::info!(
            "Done loading RDB, keys loaded: {loaded}, keys expired: {expired}, empty keys skipped: {empty}."
        );
    } else {
        tracing::info!("Done loading RDB, keys loaded: {loaded}, keys expired: {expired}.");
    }
}

/// Logs why the file is refused, as Redis does before it exits.
fn refuse(e: &LoadError) -> bool {
    for line in e.log_lines() {
        tracing::warn!("{line}");
    }
    if !matches!(e.kind, LoadErrorKind::Fatal(_)) {
        tracing::warn!("Terminating server after rdb file reading failure.");
    }
    false
}

fn log_progress(file: &RdbFile) {
    let p = progress(file);
    tracing::info!(
        "Loading {}: {:.2}% ({} of {} bytes), about {} seconds left",
        file.path,
        p.perc,
        p.loaded,
        p.total,
        p.eta
    );
}

struct Progress {
    loaded: u64,
    total: u64,
    perc: f64,
    eta: u64,
}

/// As Redis computes INFO's loading_loaded_perc and loading_eta_seconds; the bytes
/// loaded are the slowest shard's.
fn progress(file: &RdbFile) -> Progress {
    let total = file.map.len() as u64;
    let loaded = file
        .walked
        .iter()
        .map(|w| w.load(Ordering::Relaxed))
        .min()
        .unwrap_or(0);
    let perc = if total == 0 {
        0.0
    } else {
        loaded as f64 * 100.0 / total as f64
    };
    let elapsed = file.started.elapsed().as_secs();
    let eta = if elapsed == 0 {
        1
    } else {
        elapsed * total.saturating_sub(loaded).max(1) / (loaded + 1)
    };
    Progress {
        loaded,
        total,
        perc,
        eta,
    }
}

/// A replica's diskless load of its master's payload, for INFO's loading_* fields.
#[derive(Clone, Copy)]
struct SocketLoad {
    started_unix: u64,
    started: Instant,
    /// The payload's size; 0 with an EOF mark, as Redis shows it.
    total: u64,
    /// The payload's `used-mem` AUX field, once read.
    used_mem: u64,
}

static SOCKET_LOAD: Mutex<Option<SocketLoad>> = Mutex::new(None);

fn socket_load() -> std::sync::MutexGuard<'static, Option<SocketLoad>> {
    SOCKET_LOAD.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn begin_socket_load(total: u64) {
    *socket_load() = Some(SocketLoad {
        started_unix: crate::util::now_ms() / 1000,
        started: Instant::now(),
        total,
        used_mem: 0,
    });
}

pub fn end_socket_load() {
    *socket_load() = None;
}

/// The loading_* lines of a diskless load: its bytes are those read from the link.
fn info_socket_loading_fields(out: &mut String) {
    use std::fmt::Write as _;
    let Some(SocketLoad {
        started_unix,
        started,
        total,
        used_mem,
    }) = *socket_load()
    else {
        return;
    };
    let loaded = crate::replication::link::transfer_read();
    let perc = if total == 0 {
        0.0
    } else {
        loaded as f64 * 100.0 / total as f64
    };
    let elapsed = started.elapsed().as_secs();
    let eta = if elapsed == 0 || total == 0 {
        1
    } else {
        elapsed * total.saturating_sub(loaded) / (loaded + 1)
    };
    let _ = write!(
        out,
        "loading_start_time:{started_unix}\r\nloading_total_bytes:{total}\r\nloading_rdb_used_mem:{used_mem}\r\n\
         loading_loaded_bytes:{loaded}\r\nloading_loaded_perc:{perc:.2}\r\nloading_eta_seconds:{eta}\r\n"
    );
}

/// INFO persistence's loading_* lines, while a file or a master's payload loads.
pub fn info_loading_fields(out: &mut String) {
    use std::fmt::Write as _;
    let Some(file) = CURRENT.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
        return info_socket_loading_fields(out);
    };
    let p = progress(&file);
    let _ = write!(
        out,
        "loading_start_time:{}\r\nloading_total_bytes:{}\r\nloading_rdb_used_mem:{}\r\n\
         loading_loaded_bytes:{}\r\nloading_loaded_perc:{:.2}\r\nloading_eta_seconds:{}\r\n",
        file.started_unix, p.total, file.used_mem, p.loaded, p.perc, p.eta
    );
}

/// The CRC64 of a file's first bytes, computed a slice at a time.
#[derive(Default)]
struct Checksum {
    crc: u64,
    upto: usize,
}

impl Checksum {
    const SLICE: usize = 16 << 20;

    /// Takes in the next slice below `limit`; false when there is nothing left.
    fn advance(&mut self, bytes: &[u8], limit: usize) -> bool {
        self.advance_by(bytes, limit, Self::SLICE)
    }

    /// `advance` by at most `slice` bytes.
    fn advance_by(&mut self, bytes: &[u8], limit: usize, slice: usize) -> bool {
        if self.upto >= limit {
            return false;
        }
        let end = (self.upto + slice).min(limit);
        self.crc = crc64(self.crc, &bytes[self.upto..end]);
        self.upto = end;
        true
    }

    /// The CRC64 of `bytes[..len]`.
    fn finish(&mut self, bytes: &[u8], len: usize) -> u64 {
        if self.upto > len {
            *self = Checksum::default();
        }
        while self.advance(bytes, len) {}
        self.crc
    }
}

/// A file mapped read-only: the loaders read it as one slice without copying it.
struct Mapped {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is read-only and lives until drop; sharing &[u8] views of it
// between threads is sound.
unsafe impl Send for Mapped {}
unsafe impl Sync for Mapped {}

impl Mapped {
    fn open(path: &std::path::Path) -> std::io::Result<Mapped> {
        use std::os::unix::io::AsRawFd;
        let file = std::fs::File::open(path)?;
        let len = file.metadata()?.len() as usize;
        if len == 0 {
            return Ok(Mapped {
                ptr: std::ptr::null_mut(),
                len: 0,
            });
        }
        // SAFETY: a fresh read-only private mapping of a file we opened; checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: advice on the mapping just made.
        unsafe { libc::madvise(ptr, len, libc::MADV_SEQUENTIAL) };
        Ok(Mapped { ptr, len })
    }

    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` maps `len` readable bytes for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }

    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: unmapping the mapping this value owns.
            unsafe { libc::munmap(self.ptr, self.len) };
        }
    }
}
