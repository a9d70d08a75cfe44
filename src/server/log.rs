//! The server log, written as redis-server writes it, because supervisors, scripts and
//! Redis's own test suite read it: one line per event,
//! `<pid>:<role> <dd Mon yyyy HH:MM:SS.mmm> <level> <message>`, to stdout when `logfile`
//! is empty, else appended to that file (opened per line, as Redis does, so a rotated
//! file is picked up without a signal).
//!
//! Every `tracing` event in the process comes here. Levels map onto Redis's four:
//! `warn!`/`error!` are warning (`#`), `info!` is notice (`*`), `debug!` is verbose
//! (`-`), `trace!` is debug (`.`). The verbosity is read on every event, so CONFIG SET
//! loglevel takes effect at once.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

use crate::config::LogLevel;

/// Redis's level characters, by verbosity (debug, verbose, notice, warning).
const LEVEL_CHARS: [char; 4] = ['.', '-', '*', '#'];

/// The lowest verbosity written (index into `LEVEL_CHARS`).
static VERBOSITY: AtomicU8 = AtomicU8::new(LogLevel::Notice as u8);

/// `C` until the configuration is loaded (Redis logs its first lines as the "child"
/// that has no role yet), then `M` for a master or `S` for a replica.
static ROLE: AtomicU8 = AtomicU8::new(b'C');

/// Where lines go: empty = stdout. Set once at start (`logfile` is immutable).
static LOGFILE: OnceLock<String> = OnceLock::new();

/// Installs the log as the process's `tracing` subscriber. Before this, nothing logs.
pub fn init(config: &crate::config::Config) {
    let _ = LOGFILE.set(config.logfile().to_string());
    let level = config.loglevel();
    if config.syslog_enabled() {
        let (ident, facility) = config.syslog();
        open_syslog(ident, facility);
    }
    set_verbosity(level);
    let _ = tracing_subscriber::registry().with(RedisLog).try_init();
}

/// CONFIG SET loglevel.
pub fn set_verbosity(level: LogLevel) {
    VERBOSITY.store(level as u8, Ordering::Relaxed);
}

/// The role letter of later lines: `M` (master) or `S` (replica).
pub fn set_role(replica: bool) {
    ROLE.store(if replica { b'S' } else { b'M' }, Ordering::Relaxed);
}

/// Whether a line at `level` would be written (to skip building costly messages).
pub fn enabled(level: LogLevel) -> bool {
    level as u8 >= VERBOSITY.load(Ordering::Relaxed)
}

/// Text written as it is, without the line prefix (the start-up banner).
pub fn raw(text: &str) {
    write_out(text.as_bytes());
}

fn redis_level(level: &Level) -> LogLevel {
    match *level {
        Level::ERROR | Level::WARN => LogLevel::Warning,
        Level::INFO => LogLevel::Notice,
        Level::DEBUG => LogLevel::Verbose,
        Level::TRACE => LogLevel::Debug,
    }
}

struct RedisLog;

impl<S: Subscriber> Layer<S> for RedisLog {
    fn register_callsite(
        &self,
        _meta: &'static Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        // The verbosity changes at run time, so no callsite is decided once and for all.
        tracing::subscriber::Interest::sometimes()
    }

    fn enabled(&self, meta: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        enabled(redis_level(meta.level()))
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let level = redis_level(event.metadata().level());
        let mut fields = Fields::default();
        event.record(&mut fields);
        write_line(level, &fields.text());
    }
}

/// An event's message followed by its other fields as ` name=value`.
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Fields {
    fn text(self) -> String {
        let mut s = self.message;
        s.push_str(&self.rest);
        s
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.rest, " {}={}", field.name(), value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, " {}={:?}", field.name(), value);
        }
    }
}

/// One log line with Redis's prefix, if `level` is at or above the verbosity.
pub fn write_line(level: LogLevel, message: &str) {
    if !enabled(level) {
        return;
    }
    let mut line = String::with_capacity(48 + message.len());
    let role = ROLE.load(Ordering::Relaxed) as char;
    let _ = write!(
        line,
        "{}:{} {} {} ",
        std::process::id(),
        role,
        timestamp(),
        LEVEL_CHARS[level as usize]
    );
    line.push_str(message);
    line.push('\n');
    write_out(line.as_bytes());
    write_syslog(level, message);
}

/// Set once syslog is open (`syslog-enabled yes`): lines go there too.
static SYSLOG: OnceLock<()> = OnceLock::new();

fn open_syslog(ident: &str, facility: &str) {
    let facility = match facility {
        "user" => libc::LOG_USER,
        "local1" => libc::LOG_LOCAL1,
        "local2" => libc::LOG_LOCAL2,
        "local3" => libc::LOG_LOCAL3,
        "local4" => libc::LOG_LOCAL4,
        "local5" => libc::LOG_LOCAL5,
        "local6" => libc::LOG_LOCAL6,
        "local7" => libc::LOG_LOCAL7,
        _ => libc::LOG_LOCAL0,
    };
    let Ok(ident) = std::ffi::CString::new(ident) else {
        return;
    };
    // openlog keeps the pointer: the identity lives for the rest of the process.
    let ident: &'static std::ffi::CStr = Box::leak(ident.into_boxed_c_str());
    // SAFETY: a static NUL-terminated identity and integer flags.
    unsafe {
        libc::openlog(
            ident.as_ptr(),
            libc::LOG_PID | libc::LOG_NDELAY | libc::LOG_NOWAIT,
            facility,
        );
    }
    let _ = SYSLOG.set(());
}

fn write_syslog(level: LogLevel, message: &str) {
    if SYSLOG.get().is_none() {
        return;
    }
    let priority = match level {
        LogLevel::Debug => libc::LOG_DEBUG,
        LogLevel::Verbose => libc::LOG_INFO,
        LogLevel::Notice => libc::LOG_NOTICE,
        LogLevel::Warning => libc::LOG_WARNING,
    };
    let Ok(text) = std::ffi::CString::new(message) else {
        return;
    };
    // SAFETY: a constant "%s" format with one NUL-terminated argument.
    unsafe {
        libc::syslog(priority, c"%s".as_ptr(), text.as_ptr());
    }
}

fn write_out(bytes: &[u8]) {
    let file = LOGFILE.get().map(String::as_str).unwrap_or("");
    if file.is_empty() {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(bytes);
        let _ = out.flush();
        return;
    }
    let opened = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(file);
    if let Ok(mut f) = opened {
        let _ = f.write_all(bytes);
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// `26 Nov 2026 18:06:01.235` in local time, as Redis's `%d %b %Y %H:%M:%S.%03d`.
fn timestamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as libc::time_t;
    // SAFETY: localtime_r fills the zeroed tm we own from a valid time_t.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&secs, &mut tm);
        tm
    };
    format!(
        "{:02} {} {} {:02}:{:02}:{:02}.{:03}",
        tm.tm_mday,
        MONTHS[tm.tm_mon.clamp(0, 11) as usize],
        tm.tm_year + 1900,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        now.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_has_redis_shape() {
        let t = timestamp();
        // "dd Mon yyyy HH:MM:SS.mmm"
        assert_eq!(t.len(), 24, "{t}");
        let parts: Vec<&str> = t.split(' ').collect();
        assert_eq!(parts.len(), 4);
        assert!(MONTHS.contains(&parts[1]));
        assert_eq!(parts[3].len(), 12);
    }

    #[test]
    fn levels_map_onto_redis_verbosity() {
        assert_eq!(redis_level(&Level::WARN), LogLevel::Warning);
        assert_eq!(redis_level(&Level::INFO), LogLevel::Notice);
        assert_eq!(redis_level(&Level::DEBUG), LogLevel::Verbose);
        assert_eq!(redis_level(&Level::TRACE), LogLevel::Debug);
    }
}
