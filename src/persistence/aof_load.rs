//! Loading the AOF at start (Redis 7.0's aofLoadManifestFromDisk, loadAppendOnlyFiles
//! and aofOpenIfNeededOnServerStart), when `appendonly yes`.
//!
//! * `prepare` (main thread, before the shards start): the manifest, or the upgrade
//!   of an old single-file `appendonly.aof` into the directory; the files to load.
//! * The base, when it is an RDB (or an old file's RDB preamble), loads as `dbfilename`
//!   does: every shard its own slots, in parallel (`load.rs`).
//! * The commands (a `.base.aof`, an old file's tail, the incr files) run through a
//!   connection of their own on shard 0 — Redis's fake AOF client — fed over a socket
//!   pair by `feed`, which parses and checks every command first (unknown commands,
//!   format errors, a truncated tail, a MULTI left open) so the server only ever
//!   runs whole, known commands. Running them as a client's commands means they take
//!   exactly the paths a client's would: routing, multi-shard locking, MULTI/EXEC.
//! * `open_at_start`: the base of an empty start, the last incr file opened for
//!   appending, the manifest persisted, the AOF turned on.

use std::io::{BufReader, Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::aof;
use super::aof_reader::{CommandReader, Next, ReadError};
use super::manifest::{manifest_name, write_atomically, Manifest};
use crate::config::Config;

/// What to load.
pub struct Plan {
    pub dir: PathBuf,
    pub filename: String,
    /// The base file's name, if there is one, and whether it starts as an RDB.
    pub base: Option<(String, bool)>,
    pub incrs: Vec<String>,
    pub load_truncated: bool,
}

impl Plan {
    /// The base's path when it is an RDB (loaded by the shards).
    pub fn rdb_base(&self) -> Option<PathBuf> {
        match &self.base {
            Some((name, true)) => Some(self.dir.join(name)),
            _ => None,
        }
    }

    /// Whether commands may have to run (anything but a lone RDB base).
    pub fn has_commands(&self) -> bool {
        !self.incrs.is_empty() || self.base.is_some()
    }
}

/// Reads the manifest (upgrading an old single file first) and returns what to load;
/// None when the AOF is off. Err: the lines Redis logs before it exits.
pub fn prepare(config: &Config) -> Result<Option<Plan>, Vec<String>> {
    aof::sync_config(config);
    if !config.appendonly() {
        return Ok(None);
    }
    plan(config).map(Some)
}

/// `prepare`, whether the AOF is on or not (DEBUG LOADAOF loads what the manifest
/// lists either way).
fn plan(config: &Config) -> Result<Plan, Vec<String>> {
    let dir = aof::dir_of(config);
    let filename = config.appendfilename().to_string();
    let mut m = read_manifest(&dir, &filename)?;
    let old = Path::new(config.dir()).join(&filename);
    if old.is_file() && needs_upgrade(&dir, &filename, &m) {
        m = upgrade(&dir, &filename, &old, config.appenddirname())?;
    }
    *aof::manifest() = m.clone();
    let mut plan = Plan {
        dir: dir.clone(),
        filename,
        base: None,
        incrs: m.incrs.iter().map(|f| f.name.clone()).collect(),
        load_truncated: config.bool_param("aof-load-truncated").unwrap_or(true),
    };
    let mut total = 0;
    let mut names: Vec<&str> = m.base.iter().map(|b| b.name.as_str()).collect();
    names.extend(plan.incrs.iter().map(String::as_str));
    for name in &names {
        match std::fs::metadata(dir.join(name)) {
            Ok(md) => total += md.len(),
            Err(e) => {
                return Err(vec![format!(
                    "Unable to obtain the AOF file {name} length. stat: {}",
                    crate::util::io_error_text(&e)
                )])
            }
        }
    }
    if total == 0 {
        // Nothing to load (AOF_EMPTY / AOF_NOT_EXIST); the files are still written on.
        plan.incrs.clear();
        return Ok(plan);
    }
    if let Some(b) = &m.base {
        let rdb = starts_as_rdb(&dir.join(&b.name));
        plan.base = Some((b.name.clone(), rdb));
    }
    Ok(plan)
}

fn read_manifest(dir: &Path, filename: &str) -> Result<Manifest, Vec<String>> {
    let path = dir.join(manifest_name(filename));
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Manifest::default()),
        Err(e) => {
            return Err(vec![format!(
                "Fatal error: can't open the AOF manifest file {} for reading: {}",
                path.display(),
                crate::util::io_error_text(&e)
            )])
        }
    };
    Manifest::parse(&text).map_err(|e| {
        let mut lines = vec!["*** FATAL AOF MANIFEST FILE ERROR ***".to_string()];
        if let Some((n, line)) = &e.line {
            lines.push(format!("Reading the manifest file, at line {n}"));
            lines.push(format!(">>> '{line}'"));
        }
        lines.push(e.reason.to_string());
        lines
    })
}

/// Redis's three cases for upgrading from a single `appendonly.aof` in `dir`.
fn needs_upgrade(dir: &Path, filename: &str, m: &Manifest) -> bool {
    if !dir.is_dir() || (m.base.is_none() && m.incrs.is_empty()) {
        return true;
    }
    matches!(&m.base, Some(b) if m.incrs.is_empty() && b.name == filename && !dir.join(filename).exists())
}

/// aofUpgradePrepare: the old file becomes the base of a manifest in the directory.
fn upgrade(dir: &Path, filename: &str, old: &Path, dirname: &str) -> Result<Manifest, Vec<String>> {
    let io = |e: std::io::Error| crate::util::io_error_text(&e);
    std::fs::create_dir_all(dir).map_err(|e| {
        vec![format!(
            "Can't open or create append-only dir {dirname}: {}",
            io(e)
        )]
    })?;
    let m = Manifest::upgrade_from_old(filename);
    write_atomically(dir, filename, &m.render()).map_err(|e| vec![e])?;
    std::fs::rename(old, dir.join(filename)).map_err(|e| {
        vec![format!(
            "Error trying to move the old AOF file {filename} into dir {dirname}: {}",
            io(e)
        )]
    })?;
    tracing::info!(
        "Successfully migrated an old-style AOF file ({filename}) into the AOF directory ({dirname})."
    );
    Ok(m)
}

fn starts_as_rdb(path: &Path) -> bool {
    let mut sig = [0u8; 5];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut sig))
        .is_ok()
        && super::aof_reader::is_rdb_preamble(&sig)
}

/// How one file's commands loaded.
#[derive(Debug, PartialEq)]
enum FileLoad {
    Ok,
    /// Cut at a short read and loaded anyway (`aof-load-truncated yes`).
    Truncated,
}

/// Feeds the commands of every file of `plan` to the AOF client's socket and waits
/// until it ran them all. `rdb_end`: where the base's RDB part ended (its command
/// tail, if any, starts there). False when loading failed (logged).
pub fn feed(plan: &Plan, rdb_end: Option<u64>, socket: UnixStream) -> bool {
    let Ok(replies) = socket.try_clone() else {
        tracing::warn!("Can't start the AOF loader's connection");
        return false;
    };
    // The client's replies are of no interest (Redis's fake client has none): read
    // and dropped, so its output never fills up.
    let drain = std::thread::spawn(move || {
        let mut sink = [0u8; 64 * 1024];
        let mut r = replies;
        while matches!(r.read(&mut sink), Ok(n) if n > 0) {}
    });
    let mut out = std::io::BufWriter::with_capacity(256 * 1024, &socket);
    let mut files: Vec<(&str, bool, u64)> = Vec::new();
    if let Some((name, rdb)) = &plan.base {
        let start = if *rdb { rdb_end.unwrap_or(0) } else { 0 };
        files.push((name, true, start));
    }
    for name in &plan.incrs {
        files.push((name, false, 0));
    }
    let total = files.len();
    let mut ok = true;
    for (i, (name, is_base, start)) in files.into_iter().enumerate() {
        let last = i + 1 == total;
        let t0 = Instant::now();
        let loaded = feed_file(plan, name, start, &mut out);
        match loaded {
            Ok(FileLoad::Truncated) if !last => {
                tracing::warn!("Fatal error: the truncated file is not the last file");
                ok = false;
            }
            Ok(_) => {
                let what = if is_base { "base" } else { "incr" };
                tracing::info!(
                    "DB loaded from {what} file {name}: {:.3} seconds",
                    t0.elapsed().as_secs_f64()
                );
            }
            Err(()) => ok = false,
        }
        if !ok {
            break;
        }
    }
    // Redis's fake client runs commands without counting them: the statistics the
    // load moved are reset, by the AOF client itself, after its last command.
    let _ = out.write_all(b"*2\r\n$6\r\nCONFIG\r\n$9\r\nRESETSTAT\r\n");
    // The end of input: the client runs what it has, then closes its side.
    let flushed = out.flush().is_ok();
    drop(out);
    let _ = socket.shutdown(std::net::Shutdown::Write);
    let _ = drain.join();
    ok && flushed
}

/// One file's commands, from `start`. Err when loading must stop (logged).
fn feed_file(
    plan: &Plan,
    name: &str,
    start: u64,
    out: &mut impl std::io::Write,
) -> Result<FileLoad, ()> {
    let path = plan.dir.join(name);
    let mut file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(
                "Fatal error: can't open the append log file {name} for reading: {}",
                crate::util::io_error_text(&e)
            );
            return Err(());
        }
    };
    if start > 0 {
        if name == plan.filename {
            tracing::info!("Reading the remaining AOF tail...");
        }
        if file.seek(SeekFrom::Start(start)).is_err() {
            tracing::warn!("Unrecoverable error reading the append only file {name}");
            return Err(());
        }
    }
    let mut reader = CommandReader::new(BufReader::with_capacity(256 * 1024, file), start);
    // Each file starts in database 0, as each of Redis's fake clients does.
    let _ = out.write_all(b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n");
    let mut unit: Option<(Vec<u8>, u64)> = None;
    let mut valid_up_to = start;
    let end = loop {
        match reader.next() {
            Ok(Next::Command(argv)) => {
                if crate::commands::table::lookup(&argv[0]).is_none() {
                    tracing::warn!(
                        "Unknown command '{}' reading the append only file {name}",
                        String::from_utf8_lossy(&argv[0])
                    );
                    return Err(());
                }
                let cmd = argv[0].to_ascii_uppercase();
                let mut bytes = Vec::new();
                crate::effects::encode_command(&mut bytes, &argv);
                if cmd == b"MULTI" && unit.is_none() {
                    unit = Some((bytes, valid_up_to));
                } else if let Some((buf, _)) = unit.as_mut() {
                    buf.extend_from_slice(&bytes);
                    if cmd == b"EXEC" {
                        if let Some((buf, _)) = unit.take() {
                            let _ = out.write_all(&buf);
                        }
                    }
                } else {
                    let _ = out.write_all(&bytes);
                }
                if unit.is_none() {
                    valid_up_to = reader.offset();
                }
            }
            Ok(Next::End) => break None,
            Err(e) => break Some(e),
        }
    };
    let short = match end {
        None => match unit {
            // A transaction the file does not close is dropped, as a short read.
            Some((_, before)) => {
                tracing::warn!("Revert incomplete MULTI/EXEC transaction in AOF file {name}");
                valid_up_to = before;
                true
            }
            None => false,
        },
        Some(ReadError::Truncated) => true,
        Some(ReadError::Format) => {
            tracing::warn!("Bad file format reading the append only file {name}: make a backup of your AOF file, then use ./redis-check-aof --fix <filename.manifest>");
            return Err(());
        }
        Some(ReadError::Io(e)) => {
            tracing::warn!("Unrecoverable error reading the append only file {name}: {e}");
            return Err(());
        }
    };
    if !short {
        return Ok(FileLoad::Ok);
    }
    truncated(plan, &path, name, valid_up_to)
}

/// A short read: cut the file at its last whole command and go on, or refuse.
fn truncated(plan: &Plan, path: &Path, name: &str, valid_up_to: u64) -> Result<FileLoad, ()> {
    if plan.load_truncated {
        tracing::warn!("!!! Warning: short read while loading the AOF file {name}!!!");
        tracing::warn!("!!! Truncating the AOF {name} at offset {valid_up_to} !!!");
        let cut = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.set_len(valid_up_to));
        match cut {
            Ok(()) => {
                tracing::warn!("AOF {name} loaded anyway because aof-load-truncated is enabled");
                return Ok(FileLoad::Truncated);
            }
            Err(e) => tracing::warn!(
                "Error truncating the AOF file {name}: {}",
                crate::util::io_error_text(&e)
            ),
        }
    }
    tracing::warn!("Unexpected end of file reading the append only file {name}. You can: 1) Make a backup of your AOF file, then use ./redis-check-aof --fix <filename.manifest>. 2) Alternatively you can set the 'aof-load-truncated' configuration option to yes and restart the server.");
    Err(())
}

/// After loading (Redis's aofOpenIfNeededOnServerStart and aofDelHistoryFiles): a
/// base for an empty start, the last incr file opened for appending, the manifest
/// persisted, the AOF on. Err: the line Redis logs before it exits.
pub fn open_at_start(config: &Config) -> Result<(), String> {
    let dir = aof::dir_of(config);
    let filename = config.appendfilename().to_string();
    std::fs::create_dir_all(&dir).map_err(|e| {
        format!(
            "Can't open or create append-only dir {}: {}",
            config.appenddirname(),
            crate::util::io_error_text(&e)
        )
    })?;
    let mut m = aof::manifest().clone();
    let had_incr = !m.incrs.is_empty();
    if m.base.is_none() && !had_incr {
        let rdb = config.bool_param("aof-use-rdb-preamble").unwrap_or(true);
        let base = m.new_base(&filename, rdb);
        write_empty_base(&dir, &base, rdb)?;
        tracing::info!("Creating AOF base file {base} on server start");
    }
    let incr = m.last_incr_or_new(&filename);
    let file = aof::open_incr(&dir, &incr, false)?;
    write_atomically(&dir, &filename, &m.render())?;
    let size = |name: &str| std::fs::metadata(dir.join(name)).map_or(0, |md| md.len());
    let mut current = m.base.as_ref().map_or(0, |b| size(&b.name));
    aof::BASE_SIZE.store(current, Ordering::Relaxed);
    current += m.incrs.iter().map(|f| size(&f.name)).sum::<u64>();
    aof::CURRENT_SIZE.store(current, Ordering::Relaxed);
    *aof::manifest() = m;
    if had_incr {
        tracing::info!("Opening AOF incr file {incr} on server start");
    } else {
        tracing::info!("Creating AOF incr file {incr} on server start");
    }
    aof::turn_on(file)?;
    if !config.bool_param("aof-disable-auto-gc").unwrap_or(false) {
        super::rewrite::remove_history(&dir, &filename);
    }
    Ok(())
}

/// The base of an empty dataset (Redis's rewriteAppendOnlyFile at start): an RDB with
/// no keys, written to a temporary file, fsynced, renamed.
fn write_empty_base(dir: &Path, base: &str, as_rdb: bool) -> Result<(), String> {
    let tmp = dir.join(format!("temp-rewriteaof-{}.aof", std::process::id()));
    let mut rdb = Vec::new();
    if as_rdb {
        rdb = crate::storage::rdb::file::header_for(&[], true, None);
        let crc = crate::storage::rdb::crc64(0, &rdb);
        rdb.extend_from_slice(&crate::storage::rdb::file::trailer(crc));
    } else if aof::timestamps() {
        let now = crate::util::now_ms() / 1000;
        rdb.extend_from_slice(format!("#TS:{now}\r\n").as_bytes());
    }
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(&rdb).and_then(|_| f.sync_all()))
        .and_then(|_| std::fs::rename(&tmp, dir.join(base)));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!(
            "Write error writing append only file on disk: {}",
            crate::util::io_error_text(&e)
        )
    })
}

/// Starts the AOF client's task on a shard, given the stream it reads: set by the
/// server at start (the connection layer sits above persistence and is not
/// imported from here).
pub type SpawnClient = fn(std::rc::Rc<crate::shard::ShardCell>, crate::runtime::TcpStream);
static CLIENT: std::sync::OnceLock<SpawnClient> = std::sync::OnceLock::new();

pub fn set_client_spawner(spawn: SpawnClient) {
    let _ = CLIENT.set(spawn);
}

/// DEBUG LOADAOF (Redis's debug.c): what the AOF holds so far flushed, the dataset
/// emptied and loaded again from the files the manifest lists, clients answered
/// -LOADING meanwhile; the AOF then goes on in its last incr file.
pub async fn debug_loadaof(cell: &std::rc::Rc<crate::shard::ShardCell>) -> Result<(), String> {
    let was_on = aof::enabled();
    if was_on {
        aof::flush_for_shutdown().await;
        aof::turn_off();
    }
    let config = cell.data.borrow().config.clone();
    let plan = match plan(&config) {
        Ok(p) => p,
        Err(lines) => {
            lines.iter().for_each(|l| tracing::warn!("{l}"));
            std::process::exit(1);
        }
    };
    super::set_loading(true);
    let rdb_end = match plan.rdb_base() {
        Some(path) => match super::load::load_into(cell, &path, true, false).await {
            Ok(end) => Some(end),
            Err(_) => std::process::exit(1),
        },
        None => {
            super::load::clear_all(cell).await;
            None
        }
    };
    if plan.has_commands() && !feed_here(cell, plan, rdb_end).await {
        std::process::exit(1);
    }
    super::set_loading(false);
    // What was loaded is not a change to save or propagate (Redis: dirty = 0).
    cell.call_all(|c| c.data.borrow_mut().dirty = 0).await;
    if was_on {
        open_at_start(&config)?;
    }
    tracing::warn!("Append Only File loaded by DEBUG LOADAOF");
    Ok(())
}

/// `feed`, with the AOF client on this shard and the feeding on a thread of its own.
async fn feed_here(
    cell: &std::rc::Rc<crate::shard::ShardCell>,
    plan: Plan,
    rdb_end: Option<u64>,
) -> bool {
    let Ok((feed_end, client_end)) = UnixStream::pair() else {
        return false;
    };
    let Some(spawn) = CLIENT.get() else {
        return false;
    };
    match crate::runtime::TcpStream::from_unix(client_end, "aof") {
        Ok(stream) => spawn(cell.clone(), stream),
        Err(_) => return false,
    }
    let (tx, rx) = futures_channel::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("aof-load".into())
        .spawn(move || {
            let _ = tx.send(feed(&plan, rdb_end, feed_end));
        });
    spawned.is_ok() && rx.await.unwrap_or(false)
}
