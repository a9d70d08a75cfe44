//! An orderly shutdown, as Redis 7.0's prepareForShutdown / finishShutdown: save the
//! dataset when save points are set (or SAVE asks), then remove the pid file and the
//! Unix socket and exit. A save that fails stops it, unless FORCE: the server logs
//! why and keeps running.
//!
//! SHUTDOWN runs it where it was called. SIGTERM / SIGINT only schedule it (the main
//! thread waits for them, `signal_received`): shard 0's cron picks the request up
//! (`cron`, as Redis's serverCron picks up shutdown_asap) and runs it with the flags
//! of `shutdown-on-sigterm` / `shutdown-on-sigint`, since a save needs a shard. A
//! second SIGINT while the first is pending or saving exits at once.
//!
//! Before anything is saved, a shutdown without NOW waits up to `shutdown-timeout`
//! seconds (0: not at all) for replicas that have not acknowledged the whole stream,
//! writes held meanwhile (Redis's PAUSE_DURING_SHUTDOWN), so that a planned restart
//! loses nothing its replicas should have. INFO shows `shutdown_in_milliseconds` while
//! it waits. SHUTDOWN ABORT cancels a wait (or a signal's request no shard has picked
//! up yet); the SHUTDOWN callers then get "Errors trying to SHUTDOWN".

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

use crate::shard::ShardCell;

/// SHUTDOWN's flags (and `shutdown-on-sig*`'s).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    pub save: bool,
    pub nosave: bool,
    /// Do not wait for lagging replicas.
    pub now: bool,
    /// Exit even if the save fails.
    pub force: bool,
}

impl Flags {
    /// Turns on the flag `word` names (case-insensitive); false if it names none.
    pub fn set(&mut self, word: &[u8]) -> bool {
        let flag = match word.to_ascii_lowercase().as_slice() {
            b"save" => &mut self.save,
            b"nosave" => &mut self.nosave,
            b"now" => &mut self.now,
            b"force" => &mut self.force,
            _ => return false,
        };
        *flag = true;
        true
    }

    /// The flags `shutdown-on-sigint` / `shutdown-on-sigterm` hold (`default`: none).
    pub fn from_config(words: &[String]) -> Flags {
        let mut flags = Flags::default();
        for w in words {
            flags.set(w.as_bytes());
        }
        flags
    }
}

/// The signal that asked for a shutdown, while its request stands (Redis's
/// shutdown_asap and last_sig_received); 0: none.
static REQUESTED: AtomicI32 = AtomicI32::new(0);

/// A shutdown is running (waiting for replicas, or saving): from SHUTDOWN or from a
/// signal's request.
static RUNNING: AtomicBool = AtomicBool::new(false);

/// While a shutdown waits for lagging replicas: the unix ms at which it stops
/// waiting (Redis's shutdown_mstime); 0 otherwise.
static WAITING_UNTIL_MS: AtomicU64 = AtomicU64::new(0);

/// SHUTDOWN ABORT came while the shutdown waited for replicas.
static ABORTED: AtomicBool = AtomicBool::new(false);

/// The main thread got SIGTERM or SIGINT: schedule the shutdown, or, on a SIGINT
/// while one is already requested, exit now without saving (Redis: "You insist").
pub fn signal_received(sig: i32) {
    if sig == libc::SIGINT && REQUESTED.load(Ordering::SeqCst) != 0 {
        tracing::warn!("You insist... exiting now.");
        crate::persistence::save::remove_temp_file();
        // Not a clean shutdown: exit with an error, as Redis does.
        std::process::exit(1);
    }
    if crate::persistence::loading() {
        tracing::warn!("Received shutdown signal during loading, scheduling shutdown.");
    } else if sig == libc::SIGINT {
        tracing::warn!("Received SIGINT scheduling shutdown...");
    } else {
        tracing::warn!("Received SIGTERM scheduling shutdown...");
    }
    REQUESTED.store(sig, Ordering::SeqCst);
}

/// Shard 0's periodic check (every 1/hz s): runs the shutdown a signal requested.
pub fn cron(cell: &Rc<ShardCell>) {
    if cell.id != 0 {
        return;
    }
    let sig = REQUESTED.load(Ordering::SeqCst);
    if sig == 0 || !begin() {
        return;
    }
    let flags = Flags::from_config(
        cell.data
            .borrow()
            .config
            .shutdown_on_signal(sig == libc::SIGINT),
    );
    let cell = cell.clone();
    crate::runtime::spawn_detached(async move { finish(&cell, flags).await });
}

/// SHUTDOWN: runs the shutdown here. Returns only if it failed (the reason is
/// logged); a SHUTDOWN that came while another shutdown was saving waits for that
/// one, which either exits the process or failed as well.
pub async fn shutdown_command(cell: &Rc<ShardCell>, flags: Flags) {
    if begin() {
        return finish(cell, flags).await;
    }
    while RUNNING.load(Ordering::SeqCst) {
        crate::runtime::sleep(Duration::from_millis(10)).await;
    }
}

/// SHUTDOWN ABORT: cancels a shutdown waiting for its replicas, or a signal's
/// request no shard has started on. False if there is neither.
pub fn abort() -> bool {
    if WAITING_UNTIL_MS.load(Ordering::SeqCst) != 0 {
        // The waiting shutdown sees it within a turn and lets the writes go.
        ABORTED.store(true, Ordering::SeqCst);
        REQUESTED.store(0, Ordering::SeqCst);
        tracing::info!("Shutdown manually aborted.");
        return true;
    }
    if !begin() {
        // Already saving: nothing Redis could abort either (its save blocks it).
        return false;
    }
    let requested = REQUESTED.swap(0, Ordering::SeqCst) != 0;
    RUNNING.store(false, Ordering::SeqCst);
    if requested {
        tracing::info!("Shutdown manually aborted.");
    }
    requested
}

/// Whether a shutdown is on its way out (it saves itself: the save points and the
/// scheduled rewrites wait). Not while it waits for replicas: the server serves and
/// its cron runs meanwhile, as Redis's does.
pub fn in_progress() -> bool {
    RUNNING.load(Ordering::SeqCst) && WAITING_UNTIL_MS.load(Ordering::SeqCst) == 0
}

/// INFO's shutdown_in_milliseconds: how long a shutdown waiting for its replicas
/// still waits, while it does.
pub fn waiting_ms() -> Option<u64> {
    match WAITING_UNTIL_MS.load(Ordering::SeqCst) {
        0 => None,
        until => Some(until.saturating_sub(crate::util::now_ms())),
    }
}

/// Takes the right to run the shutdown: false if one is running.
fn begin() -> bool {
    RUNNING
        .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
}

/// A shutdown that cannot go on (Redis's "error:" path): logged, and the server
/// serves on, writes let go (a signal's request is dropped with it).
async fn cancel(cell: &Rc<ShardCell>) {
    tracing::warn!("Errors trying to shut down the server. Check the logs for more information.");
    end_without_exit(cell).await;
}

/// The shutdown ends and the server serves on (Redis's cancelShutdown).
async fn end_without_exit(cell: &Rc<ShardCell>) {
    hold_writes(cell, false).await;
    REQUESTED.store(0, Ordering::SeqCst);
    RUNNING.store(false, Ordering::SeqCst);
}

async fn hold_writes(cell: &Rc<ShardCell>, on: bool) {
    crate::shard::pause::hold_writes(cell, crate::shard::pause::WriteHold::Shutdown, on).await;
}

/// Why a shutdown stopped waiting for its replicas.
enum Waited {
    /// They caught up, or the timeout passed: go on.
    Done,
    /// SHUTDOWN ABORT.
    Aborted,
}

/// Redis's prepareForShutdown's wait: writes held, the replicas asked for an ACK,
/// then checked every 10 ms (Redis's cron at hz 100) until every replica
/// acknowledged the whole stream, `timeout_s` passed, or SHUTDOWN ABORT came.
async fn wait_for_replicas(cell: &Rc<ShardCell>, timeout_s: u64) -> Waited {
    let until = crate::util::now_ms().saturating_add(timeout_s.saturating_mul(1000));
    ABORTED.store(false, Ordering::SeqCst);
    WAITING_UNTIL_MS.store(until, Ordering::SeqCst);
    hold_writes(cell, true).await;
    crate::effects::request_acks();
    tracing::info!("Waiting for replicas before shutting down.");
    let waited = loop {
        if ABORTED.swap(false, Ordering::SeqCst) {
            break Waited::Aborted;
        }
        if crate::util::now_ms() >= until || crate::replication::replicas_in_sync() {
            break Waited::Done;
        }
        crate::runtime::sleep(Duration::from_millis(10)).await;
    };
    WAITING_UNTIL_MS.store(0, Ordering::SeqCst);
    waited
}

/// Redis's prepareForShutdown and finishShutdown, for the one holding `RUNNING`:
/// save as the flags and the save points say, then exit. On a failed save without
/// FORCE the shutdown is cancelled (a signal's request with it) and this returns.
async fn finish(cell: &Rc<ShardCell>, mut flags: Flags) {
    // A half-loaded dataset must not overwrite the file it comes from.
    if crate::persistence::loading() {
        flags.save = false;
        flags.nosave = true;
    }
    tracing::warn!("User requested shutdown...");
    let timeout_s = cell
        .data
        .borrow()
        .config
        .int_param("shutdown-timeout")
        .unwrap_or(10)
        .max(0) as u64;
    if !flags.now && timeout_s != 0 && !crate::replication::replicas_in_sync() {
        if let Waited::Aborted = wait_for_replicas(cell, timeout_s).await {
            return end_without_exit(cell).await;
        }
    }
    crate::replication::log_replicas_at_shutdown();
    // The first rewrite after CONFIG SET appendonly yes holds the only copy of what
    // was written since: Redis will not exit before it ends, unless forced.
    if crate::persistence::rewrite::writing_initial_aof() {
        if flags.force {
            tracing::warn!("Writing initial AOF. Exit anyway.");
        } else {
            tracing::warn!("Writing initial AOF, can't exit.");
            return cancel(cell).await;
        }
    }
    crate::persistence::bgsave::abandon_for_shutdown().await;
    crate::persistence::aof::flush_for_shutdown().await;
    let save_points = !cell.data.borrow().config.save_points().is_empty();
    if (save_points && !flags.nosave) || flags.save {
        tracing::info!("Saving the final RDB snapshot before exiting.");
        if crate::persistence::save::save(cell).await.is_err() {
            if flags.force {
                tracing::warn!("Error trying to save the DB. Exit anyway.");
            } else {
                tracing::warn!("Error trying to save the DB, can't exit.");
                return cancel(cell).await;
            }
        }
    }
    super::shutdown(0);
}
