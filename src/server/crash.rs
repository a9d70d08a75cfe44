//! What happens when Tessera hits a bug (a Rust panic), as redis-server does on an
//! assertion: the report goes to the log ("Guru Meditation", the message and where,
//! then the stack trace unless `crash-log-enabled no`), the pid file is removed, and
//! the whole process ends: abort() (a core dump where enabled), or exit(1) with
//! `use-exit-on-panic yes`. A panic must never leave a process with one dead shard,
//! whose peers would wait for its replies forever.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::Config;
use crate::server::REDIS_VERSION;

static EXIT_ON_PANIC: AtomicBool = AtomicBool::new(false);
static CRASH_LOG: AtomicBool = AtomicBool::new(true);

/// Reads `use-exit-on-panic` and `crash-log-enabled` (at start and on CONFIG SET).
pub fn configure(config: &Config) {
    EXIT_ON_PANIC.store(config.use_exit_on_panic(), Ordering::Relaxed);
    CRASH_LOG.store(config.crash_log_enabled(), Ordering::Relaxed);
}

/// Installs the panic hook and the fatal-signal handlers; call once at start.
pub fn install(config: &Config) {
    configure(config);
    install_signal_handlers();
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
        log_stack_trace();
        tracing::warn!("------------------------------------------------");
        super::remove_created_files();
        if EXIT_ON_PANIC.load(Ordering::Relaxed) {
            std::process::exit(1);
        }
        // SAFETY: restoring SIGABRT's default action, so abort() is not reported twice.
        unsafe {
            libc::signal(libc::SIGABRT, libc::SIG_DFL);
        }
        std::process::abort();
    }));
}

/// The signals a bug (or an operator asking for a core) ends the process with.
const FATAL_SIGNALS: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGABRT,
];

/// Redis's sigsegvHandler: log what happened, then die of the same signal. The
/// handler runs once (SA_RESETHAND), on the crashing thread's own stack: symbolizing
/// a stack trace needs far more than a signal stack's few KiB (a stack overflow,
/// which leaves no stack to run on, is then ended by the kernel unreported).
fn install_signal_handlers() {
    for sig in FATAL_SIGNALS {
        // SAFETY: a zeroed sigaction with a valid handler address and flags.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_fatal_signal as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_RESETHAND;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut());
        }
    }
}

extern "C" fn on_fatal_signal(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    _ctx: *mut libc::c_void,
) {
    // Logging allocates, which a crash inside the allocator could deadlock: the
    // alarm ends the process then (SIGALRM's default action) instead of hanging.
    // SAFETY: alarm(2) is async-signal-safe; `info` is the kernel's siginfo or null.
    let code = unsafe {
        libc::alarm(5);
        if info.is_null() {
            0
        } else {
            (*info).si_code
        }
    };
    tracing::warn!("");
    tracing::warn!("=== TESSERA BUG REPORT START: Cut & paste starting from here ===");
    tracing::warn!("Redis {REDIS_VERSION} crashed by signal: {sig}, si_code: {code}");
    log_stack_trace();
    tracing::warn!("=== TESSERA BUG REPORT END. Make sure to include from START to END. ===");
    super::remove_created_files();
    // SAFETY: restore the default action and raise the signal again, so the process
    // ends as the signal says (and dumps core where that is enabled).
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::kill(libc::getpid(), sig);
    }
}

/// The stack trace of the crashing thread, unless `crash-log-enabled no`.
fn log_stack_trace() {
    if CRASH_LOG.load(Ordering::Relaxed) {
        tracing::warn!("------ STACK TRACE ------");
        let trace = std::backtrace::Backtrace::force_capture().to_string();
        super::log::raw(&format!("{trace}\n"));
    }
}
