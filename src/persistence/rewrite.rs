//! AOF rewrites without fork (Redis's rewriteAppendOnlyFileBackground and its done
//! handler): BGREWRITEAOF, `auto-aof-rewrite-percentage`, and turning the AOF on at
//! run time (CONFIG SET appendonly yes), which is a rewrite whose incr file becomes
//! the AOF when the base is in place.
//!
//! A rewrite is a background save (`bgsave.rs`) of kind `AofBase`: its walk writes
//! the new base file, and at its cut — every shard held — the stream switches to a
//! new incr file (`effects::switch_point`). Before the cut the new incr file is
//! created and listed in the manifest; when the base is written the manifest is
//! switched atomically to base + incr files since the cut, and the files it no
//! longer lists become history and are removed.

use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::aof::{self, manifest};
use super::bgsave::{self, Kind, Outcome};
use super::manifest::write_atomically;
use crate::shard::ShardCell;

/// BGREWRITEAOF asked while another job ran (Redis's aof_rewrite_scheduled).
static SCHEDULED: AtomicBool = AtomicBool::new(false);
/// CONFIG SET appendonly yes is waiting for its rewrite (Redis's AOF_WAIT_REWRITE).
static WAITING_TO_TURN_ON: AtomicBool = AtomicBool::new(false);
static LAST_OK: AtomicBool = AtomicBool::new(true);
static REWRITES: AtomicU64 = AtomicU64::new(0);
static CONSECUTIVE_FAILURES: AtomicU64 = AtomicU64::new(0);
static LAST_TIME_SEC: AtomicI64 = AtomicI64::new(-1);
static LAST_COW: AtomicU64 = AtomicU64::new(0);
/// After repeated failures, no automatic rewrite before this unix time (Redis's
/// aofRewriteLimited), and the delay that got it.
static LIMITED: Mutex<(u64, u64)> = Mutex::new((0, 0));

/// The temporary incr file of a rewrite that turns the AOF on.
fn temp_incr_name(filename: &str) -> String {
    format!("temp-{filename}.incr")
}

/// What INFO shows of rewrites.
pub struct Info {
    pub in_progress: bool,
    pub scheduled: bool,
    pub last_time_sec: i64,
    pub current_time_sec: i64,
    pub last_ok: bool,
    pub rewrites: u64,
    pub consecutive_failures: u64,
    pub last_cow_size: u64,
}

pub fn info() -> Info {
    let running = bgsave::rewrite_running();
    Info {
        in_progress: running.is_some(),
        scheduled: SCHEDULED.load(Ordering::Relaxed),
        last_time_sec: LAST_TIME_SEC.load(Ordering::Relaxed),
        current_time_sec: running.map_or(-1, |(t, _, _)| t.elapsed().as_secs() as i64),
        last_ok: LAST_OK.load(Ordering::Relaxed),
        rewrites: REWRITES.load(Ordering::Relaxed),
        consecutive_failures: CONSECUTIVE_FAILURES.load(Ordering::Relaxed),
        last_cow_size: LAST_COW.load(Ordering::Relaxed),
    }
}

/// Whether a rewrite runs (BGREWRITEAOF's "already in progress").
pub fn in_progress() -> bool {
    bgsave::rewrite_running().is_some()
}

/// BGREWRITEAOF while another job runs, or inside EXEC: once possible.
pub fn schedule() {
    SCHEDULED.store(true, Ordering::Relaxed);
    // A manual request is not held back by earlier failures.
    CONSECUTIVE_FAILURES.store(0, Ordering::Relaxed);
}

/// Why a rewrite did not start.
#[derive(Debug)]
pub enum StartError {
    /// Another background job runs.
    Busy,
    /// Logged: the directory, the incr file or the manifest could not be written, or
    /// the writer could not start.
    Failed,
}

/// Starts a rewrite (Redis's rewriteAppendOnlyFileBackground).
pub async fn start(cell: &Rc<ShardCell>) -> Result<(), StartError> {
    if bgsave::busy() {
        return Err(StartError::Busy);
    }
    let (dir, filename, appenddirname, rdb) = {
        let d = cell.data.borrow();
        (
            aof::dir_of(&d.config),
            d.config.appendfilename().to_string(),
            d.config.appenddirname().to_string(),
            d.config.bool_param("aof-use-rdb-preamble").unwrap_or(true),
        )
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::warn!(
            "Can't open or create append-only dir {}: {}",
            appenddirname,
            crate::util::io_error_text(&e)
        );
        return failed_to_start();
    }
    let at_cut = match prepare_incr(&dir, &filename) {
        Ok(hook) => hook,
        Err(msg) => {
            tracing::warn!("{msg}");
            return failed_to_start();
        }
    };
    // The base's name: the next base seq, which nothing else takes meanwhile.
    let base = manifest().clone().new_base(&filename, rdb);
    let kind = Kind::AofBase {
        path: format!("{appenddirname}/{base}"),
        commands: !rdb,
    };
    match bgsave::start_job(cell, kind, at_cut).await {
        Ok(_) => {
            REWRITES.fetch_add(1, Ordering::Relaxed);
            SCHEDULED.store(false, Ordering::Relaxed);
            Ok(())
        }
        Err(bgsave::StartError::InProgress) => Err(StartError::Busy),
        Err(bgsave::StartError::Spawn) => failed_to_start(),
    }
}

fn failed_to_start() -> Result<(), StartError> {
    LAST_OK.store(false, Ordering::Relaxed);
    Err(StartError::Failed)
}

/// Opens the file the stream switches to at the cut and returns what the cut does:
/// with the AOF on, a new incr file listed in the manifest right away
/// (openNewIncrAofForAppend); while turning it on, a temporary incr file the AOF
/// starts on at the cut; with the AOF off, nothing.
fn prepare_incr(dir: &Path, filename: &str) -> Result<bgsave::AtCut, String> {
    if WAITING_TO_TURN_ON.load(Ordering::Relaxed) {
        let name = temp_incr_name(filename);
        let file = aof::open_incr(dir, &name, true)?;
        tracing::info!("Creating AOF incr file {name} on background rewrite");
        return Ok(Box::new(move || match aof::turn_on(file) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("{e}");
                false
            }
        }));
    }
    let Some(reader) = aof::state().as_ref().map(|a| a.reader) else {
        return Ok(Box::new(|| true));
    };
    let mut m = manifest().clone();
    let name = m.new_incr(filename);
    let file = aof::open_incr(dir, &name, true)?;
    write_atomically(dir, filename, &m.render())?;
    tracing::info!("Creating AOF incr file {name} on background rewrite");
    *manifest() = m;
    let next_files = aof::state().as_ref().map(|a| a.next_files.clone());
    Ok(Box::new(move || {
        let Some(next) = next_files else {
            return false;
        };
        next.lock().unwrap_or_else(|e| e.into_inner()).push(file);
        crate::effects::switch_point(reader);
        true
    }))
}

/// The rewrite's job ended (Redis's backgroundRewriteDoneHandler): on success the
/// manifest is switched to the new base and the incr files since the cut.
pub async fn done(cell: &Rc<ShardCell>, kind: &Kind, outcome: Outcome, pid: u32, started: Instant) {
    let rdb = !matches!(kind, Kind::AofBase { commands: true, .. });
    let (dir, filename, gc) = {
        let d = cell.data.borrow();
        (
            aof::dir_of(&d.config),
            d.config.appendfilename().to_string(),
            !d.config.bool_param("aof-disable-auto-gc").unwrap_or(false),
        )
    };
    let waiting = WAITING_TO_TURN_ON.load(Ordering::Relaxed);
    let ok = match outcome {
        Outcome::Saved => {
            tracing::info!("Background AOF rewrite terminated with success");
            switch_manifest(&dir, &filename, pid, waiting, gc, rdb)
        }
        Outcome::Failed => {
            tracing::warn!("Background AOF rewrite terminated with error");
            false
        }
        Outcome::Killed(sig) => {
            tracing::warn!("Background AOF rewrite terminated by signal {sig}");
            sig == libc::SIGUSR1
        }
    };
    let succeeded = ok && outcome == Outcome::Saved;
    if succeeded {
        LAST_OK.store(true, Ordering::Relaxed);
        CONSECUTIVE_FAILURES.store(0, Ordering::Relaxed);
        WAITING_TO_TURN_ON.store(false, Ordering::Relaxed);
        tracing::info!("Background AOF rewrite finished successfully");
        // A first rewrite's file now counts as fsynced (WAITAOF's local count).
        crate::replication::wake_ack_waiters();
    } else if !ok {
        LAST_OK.store(false, Ordering::Relaxed);
        CONSECUTIVE_FAILURES.fetch_add(1, Ordering::Relaxed);
    }
    if !succeeded && waiting {
        // Turning on waits for a base: this one failed, so another is tried.
        aof::turn_off();
        let temp = temp_incr_name(&filename);
        tracing::info!("Removing the temp incr aof file {temp} in the background");
        let _ = std::fs::remove_file(dir.join(temp));
        SCHEDULED.store(true, Ordering::Relaxed);
    }
    LAST_TIME_SEC.store(started.elapsed().as_secs() as i64, Ordering::Relaxed);
    if let Some((_, _, cow)) = bgsave::rewrite_running() {
        LAST_COW.store(cow, Ordering::Relaxed);
    }
}

/// The base is in place: the manifest now lists it and the incr files written since
/// the cut; what it listed before becomes history (and is removed).
fn switch_manifest(
    dir: &Path,
    filename: &str,
    pid: u32,
    waiting: bool,
    gc: bool,
    rdb: bool,
) -> bool {
    let mut m = manifest().clone();
    let base = m.new_base(filename, rdb);
    tracing::info!("Successfully renamed the temporary AOF base file temp-{pid}.rdb into {base}");
    let mut new_incr = None;
    if waiting {
        let temp = temp_incr_name(filename);
        let name = m.new_incr(filename);
        if let Err(e) = std::fs::rename(dir.join(&temp), dir.join(&name)) {
            tracing::warn!(
                "Error trying to rename the temporary AOF incr file {} into {}: {}",
                temp,
                name,
                crate::util::io_error_text(&e)
            );
            let _ = std::fs::remove_file(dir.join(&base));
            return false;
        }
        tracing::info!("Successfully renamed the temporary AOF incr file {temp} into {name}");
        new_incr = Some(name);
    }
    m.mark_rewritten_incrs_as_history(aof::enabled());
    if let Err(msg) = write_atomically(dir, filename, &m.render()) {
        tracing::warn!("{msg}");
        let _ = std::fs::remove_file(dir.join(&base));
        if let Some(name) = new_incr {
            let _ = std::fs::remove_file(dir.join(name));
        }
        return false;
    }
    let base_size = file_size(dir, &base);
    let incr_size = m.incrs.last().map_or(0, |f| file_size(dir, &f.name));
    *manifest() = m;
    aof::CURRENT_SIZE.store(base_size + incr_size, Ordering::Relaxed);
    aof::BASE_SIZE.store(base_size + incr_size, Ordering::Relaxed);
    if gc {
        remove_history(dir, filename);
    }
    true
}

fn file_size(dir: &Path, name: &str) -> u64 {
    std::fs::metadata(dir.join(name)).map_or(0, |m| m.len())
}

/// Removes the files the manifest lists as history and persists it without them
/// (Redis's aofDelHistoryFiles).
pub fn remove_history(dir: &Path, filename: &str) {
    let mut m = manifest().clone();
    let history = m.take_history();
    if history.is_empty() {
        return;
    }
    for f in &history {
        tracing::info!("Removing the history file {} in the background", f.name);
        let _ = std::fs::remove_file(dir.join(&f.name));
    }
    match write_atomically(dir, filename, &m.render()) {
        Ok(()) => *manifest() = m,
        Err(msg) => tracing::warn!("{msg}"),
    }
}

/// CONFIG SET appendonly yes (Redis's startAppendOnly): a rewrite whose incr file
/// becomes the AOF once its base is written. Err: Redis's reply.
pub async fn turn_on_at_run_time(cell: &Rc<ShardCell>) -> Result<(), &'static str> {
    if aof::enabled() || WAITING_TO_TURN_ON.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    if bgsave::busy() {
        tracing::warn!("AOF was enabled but there is already another background operation. An AOF background was scheduled to start when possible.");
        SCHEDULED.store(true, Ordering::Relaxed);
        return Ok(());
    }
    match start(cell).await {
        Ok(()) => Ok(()),
        Err(StartError::Busy) => {
            SCHEDULED.store(true, Ordering::Relaxed);
            Ok(())
        }
        Err(StartError::Failed) => {
            WAITING_TO_TURN_ON.store(false, Ordering::SeqCst);
            tracing::warn!("Redis needs to enable the AOF but can't trigger a background AOF rewrite operation. Check the above logs for more info about the error.");
            Err("Unable to turn on AOF. Check server logs.")
        }
    }
}

/// CONFIG SET appendonly yes inside MULTI/EXEC: the first rewrite is scheduled, the
/// transaction holding the shards its cut needs.
pub fn schedule_turn_on() {
    if aof::enabled() || WAITING_TO_TURN_ON.swap(true, Ordering::SeqCst) {
        return;
    }
    tracing::warn!("AOF was enabled during a transaction. An AOF background was scheduled to start when possible.");
    SCHEDULED.store(true, Ordering::Relaxed);
}

/// CONFIG SET appendonly no (Redis's stopAppendOnly): the file is flushed and
/// closed, a rewrite in progress given up (and the temporary incr file of a first
/// one removed: nothing lists it).
pub fn turn_off_at_run_time(config: &crate::config::Config) {
    aof::turn_off();
    let was_waiting = WAITING_TO_TURN_ON.swap(false, Ordering::SeqCst);
    SCHEDULED.store(false, Ordering::Relaxed);
    // WAITAOF clients that wait for the local file get their error now.
    crate::replication::wake_ack_waiters();
    bgsave::abandon_rewrite();
    if was_waiting {
        let temp = temp_incr_name(config.appendfilename());
        let _ = std::fs::remove_file(aof::dir_of(config).join(temp));
    }
}

/// Whether the first rewrite after CONFIG SET appendonly yes is running (Redis's
/// AOF_WAIT_REWRITE with an AOF child): SHUTDOWN waits for it.
pub fn writing_initial_aof() -> bool {
    WAITING_TO_TURN_ON.load(Ordering::Relaxed) && in_progress()
}

/// Whether CONFIG SET appendonly yes waits for its first rewrite's base (Redis's
/// AOF_WAIT_REWRITE): the file is not yet counted as fsynced (`aof::fsynced_offset`).
pub fn turning_on() -> bool {
    WAITING_TO_TURN_ON.load(Ordering::Relaxed)
}

/// Whether the AOF is on or waiting for its first rewrite (Redis's aof_state !=
/// AOF_OFF).
pub fn wanted() -> bool {
    aof::enabled() || WAITING_TO_TURN_ON.load(Ordering::Relaxed)
}

/// Shard 0's cron, when no job runs: a scheduled rewrite, or an automatic one on
/// `auto-aof-rewrite-percentage` growth past `auto-aof-rewrite-min-size`. True when
/// one is being started (nothing else starts this round).
pub fn cron(cell: &Rc<ShardCell>) -> bool {
    if crate::server::shutdown::in_progress() {
        return false;
    }
    let scheduled = SCHEDULED.load(Ordering::Relaxed);
    let growth = if aof::enabled() && !scheduled {
        auto_rewrite_growth(cell)
    } else {
        None
    };
    if !scheduled && growth.is_none() {
        return false;
    }
    if rewrite_limited() {
        return false;
    }
    if let Some(g) = growth {
        tracing::info!("Starting automatic rewriting of AOF on {g}% growth");
    }
    let cell = cell.clone();
    crate::runtime::spawn_detached(async move {
        let _ = start(&cell).await;
    });
    true
}

/// The growth that calls for an automatic rewrite, if it does.
fn auto_rewrite_growth(cell: &ShardCell) -> Option<u64> {
    let (perc, min) = {
        let d = cell.data.borrow();
        (
            d.config
                .int_param("auto-aof-rewrite-percentage")
                .unwrap_or(0),
            d.config.int_param("auto-aof-rewrite-min-size").unwrap_or(0),
        )
    };
    let current = aof::CURRENT_SIZE.load(Ordering::Relaxed);
    if perc <= 0 || current <= min.max(0) as u64 {
        return None;
    }
    let base = aof::BASE_SIZE.load(Ordering::Relaxed).max(1);
    let growth = (current * 100 / base).saturating_sub(100);
    (growth >= perc as u64).then_some(growth)
}

/// After 3 failures in a row, automatic rewrites wait 1, 2, 4 ... 60 minutes.
fn rewrite_limited() -> bool {
    if CONSECUTIVE_FAILURES.load(Ordering::Relaxed) < 3 {
        *LIMITED.lock().unwrap_or_else(|e| e.into_inner()) = (0, 0);
        return false;
    }
    let now = crate::util::now_ms() / 1000;
    let mut limited = LIMITED.lock().unwrap_or_else(|e| e.into_inner());
    let (next_time, delay) = *limited;
    if next_time != 0 {
        if now < next_time {
            return true;
        }
        limited.0 = 0;
        return false;
    }
    let delay = if delay == 0 { 1 } else { (delay * 2).min(60) };
    *limited = (now + delay * 60, delay);
    tracing::warn!(
        "Background AOF rewrite has repeatedly failed and triggered the limit, will retry in {delay} minutes"
    );
    true
}

/// CONFIG SET aof-disable-auto-gc no (Redis's updateAofAutoGCEnabled): history the
/// manifest still lists is removed now.
pub fn config_changed(config: &crate::config::Config) {
    if !config.bool_param("aof-disable-auto-gc").unwrap_or(false) {
        remove_history(&aof::dir_of(config), config.appendfilename());
    }
}
