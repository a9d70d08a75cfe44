//! What happens when Tessera hits a bug (a Rust panic), as redis-server does on an
//! assertion: the report goes to the log ("Guru Meditation", the message and where,
//! then the stack trace unless `crash-log-enabled no`), the pid file is removed, and
//! the whole process ends: abort() (a core dump where enabled), or exit(1) with
//! `use-exit-on-panic yes`. A panic must never leave a process with one dead shard,
//! whose peers would wait for its replies forever.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::Config;

static EXIT_ON_PANIC: AtomicBool = AtomicBool::new(false);
static CRASH_LOG: AtomicBool = AtomicBool::new(true);

/// Reads `use-exit-on-panic` and `crash-log-enabled` (at start and on CONFIG SET).
pub fn configure(config: &Config) {
    EXIT_ON_PANIC.store(config.use_exit_on_panic(), Ordering::Relaxed);
    CRASH_LOG.store(config.crash_log_enabled(), Ordering::Relaxed);
}

/// Installs the panic hook; call once at start, after the log.
pub fn install(config: &Config) {
    configure(config);
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".to_string());
        let place = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let thread = std::thread::current();
        let thread = thread.name().unwrap_or("unnamed");
        tracing::warn!("------------------------------------------------");
        tracing::warn!("!!! Software Failure. Press left mouse button to continue");
        tracing::warn!("Guru Meditation: {message} #{place} (thread {thread})");
        if CRASH_LOG.load(Ordering::Relaxed) {
            tracing::warn!("------ STACK TRACE ------");
            let trace = std::backtrace::Backtrace::force_capture().to_string();
            super::log::raw(&format!("{trace}\n"));
        }
        tracing::warn!("------------------------------------------------");
        super::remove_created_files();
        if EXIT_ON_PANIC.load(Ordering::Relaxed) {
            std::process::exit(1);
        }
        std::process::abort();
    }));
}
