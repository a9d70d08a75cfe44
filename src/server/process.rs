//! What the process shows the operating system, as redis-server does: the pid file,
//! the process title (`proc-title-template`, read by ps and /proc/<pid>/cmdline), the
//! OOM killer's score (`oom-score-adj`), transparent huge pages (`disable-thp`).

use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::config::Config;

/// Redis's createPidFile: a failure is a warning, not a reason to stop.
pub fn write_pidfile(config: &Config) {
    let Some(path) = config.pidfile() else {
        return;
    };
    if let Err(e) = std::fs::write(path, format!("{}\n", std::process::id())) {
        tracing::warn!(
            "Failed to write PID file: {}",
            crate::util::io_error_text(&e)
        );
    }
}

/// Redis turns transparent huge pages off for itself (`disable-thp yes`): with THP a
/// copy-on-write or a small write can cost a 2 MB page copy and latency spikes.
pub fn disable_thp(config: &Config) {
    if config.disable_thp() {
        // SAFETY: prctl with integer arguments only.
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* OOM score.                                                               */
/* ------------------------------------------------------------------------ */

/// The score the process had before Tessera first changed it (Redis's
/// oom_score_adj_base), so `relative` adds to it and `no` restores it.
static OOM_BASE: Mutex<Option<i64>> = Mutex::new(None);

const OOM_SCORE_ADJ_PATH: &str = "/proc/self/oom_score_adj";

/// Applies `oom-score-adj` / `oom-score-adj-values` for this process's role (master
/// or replica). Returns the error text when the kernel refuses the value.
pub fn apply_oom_score_adj(config: &Config) -> Result<(), String> {
    let (mode, values) = config.oom_score_adj();
    // The role in force (REPLICAOF changes it at run time), not the config file's.
    let role = usize::from(crate::replication::master().is_some());
    let mut base = OOM_BASE.lock().unwrap_or_else(|e| e.into_inner());
    let mode = crate::config::OOM_SCORE_ADJ_NAMES
        .get(mode)
        .copied()
        .unwrap_or("no");
    let target = match mode {
        "no" => match *base {
            Some(b) => b,
            None => return Ok(()),
        },
        _ => {
            let current = match *base {
                Some(b) => b,
                None => read_oom_score_adj()?,
            };
            *base = Some(current);
            if mode == "absolute" {
                values[role]
            } else {
                current + values[role]
            }
        }
    };
    let target = target.clamp(-1000, 1000);
    let result = std::fs::write(OOM_SCORE_ADJ_PATH, target.to_string()).map_err(|e| {
        let text = format!(
            "Unable to write oom_score_adj: {}",
            crate::util::io_error_text(&e)
        );
        tracing::warn!("{text}");
        text
    });
    if mode == "no" {
        *base = None;
    }
    result
}

fn read_oom_score_adj() -> Result<i64, String> {
    let text = std::fs::read_to_string(OOM_SCORE_ADJ_PATH).map_err(|e| {
        format!(
            "Unable to read oom_score_adj: {}",
            crate::util::io_error_text(&e)
        )
    })?;
    text.trim()
        .parse()
        .map_err(|_| "Unable to read oom_score_adj".to_string())
}

/* ------------------------------------------------------------------------ */
/* Process title.                                                           */
/* ------------------------------------------------------------------------ */

// The kernel shows /proc/<pid>/cmdline from the memory that held argv (and, when a
// title outgrows it, the environment strings right after it), so a new title is
// written there. Rust does not hand out argv's address; glibc passes
// (argc, argv, envp) to every `.init_array` function, as it does to std's own.

static ARGV: AtomicPtr<*mut c_char> = AtomicPtr::new(std::ptr::null_mut());
static ARGC: AtomicUsize = AtomicUsize::new(0);

extern "C" fn capture_argv(argc: c_int, argv: *mut *mut c_char, _envp: *mut *mut c_char) {
    ARGC.store(argc.max(0) as usize, Ordering::Relaxed);
    ARGV.store(argv, Ordering::Relaxed);
}

#[used]
#[link_section = ".init_array"]
static CAPTURE_ARGV: extern "C" fn(c_int, *mut *mut c_char, *mut *mut c_char) = capture_argv;

/// The memory a title may be written to: [start, end).
struct TitleArea {
    start: usize,
    end: usize,
}

static TITLE_AREA: Mutex<Option<TitleArea>> = Mutex::new(None);

/// argv[0] as the process was started (the template's `{title}`), read before the
/// first title overwrites argv's memory.
fn exec_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| std::env::args().next().unwrap_or_else(|| "tessera".into()))
}

/// Finds the argv area and, so a long title has room, moves the environment strings
/// that follow it to the heap (what Redis's setproctitle.c does at start). Must run
/// before other threads read the environment.
fn title_area() -> Option<TitleArea> {
    let argv = ARGV.load(Ordering::Relaxed);
    let argc = ARGC.load(Ordering::Relaxed);
    if argv.is_null() || argc == 0 {
        return None;
    }
    // SAFETY: argv holds argc valid NUL-terminated strings laid out by the kernel
    // (captured before main); environ is the process's environment array. The
    // environment strings are copied (and leaked: environ points at them for the
    // rest of the process) before their memory is reused.
    unsafe {
        let start = *argv as usize;
        let mut end = start;
        for i in 0..argc {
            let p = *argv.add(i);
            if p.is_null() || p as usize != end {
                break;
            }
            end = p as usize + CStr::from_ptr(p).to_bytes().len() + 1;
        }
        extern "C" {
            static mut environ: *mut *mut c_char;
        }
        let env = environ;
        if env.is_null() {
            return Some(TitleArea { start, end });
        }
        let mut count = 0;
        while !(*env.add(count)).is_null() {
            count += 1;
        }
        let mut copies: Vec<*mut c_char> = Vec::with_capacity(count + 1);
        for i in 0..count {
            let p = *env.add(i);
            if p as usize == end {
                end = p as usize + CStr::from_ptr(p).to_bytes().len() + 1;
            }
            copies.push(libc::strdup(p));
        }
        copies.push(std::ptr::null_mut());
        environ = Box::leak(copies.into_boxed_slice()).as_mut_ptr();
        Some(TitleArea { start, end })
    }
}

/// Sets the title from `proc-title-template` (at start and on CONFIG SET).
pub fn set_proc_title(config: &Config) {
    if !config.set_proc_title() {
        return;
    }
    let title = expand_title(config, config.proc_title_template());
    let mut area = TITLE_AREA.lock().unwrap_or_else(|e| e.into_inner());
    if area.is_none() {
        *area = title_area();
    }
    let Some(a) = area.as_ref() else {
        return;
    };
    let room = a.end - a.start;
    if room < 2 {
        return;
    }
    let bytes = title.as_bytes();
    let n = bytes.len().min(room - 1);
    // SAFETY: [start, end) is the argv (and relocated environment) memory this
    // process owns and no longer reads through the old pointers; n < room.
    unsafe {
        let base = a.start as *mut u8;
        std::ptr::write_bytes(base, 0, room);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), base, n);
    }
}

/// Redis's expandProcTitleTemplate, trimmed of surrounding spaces.
pub fn expand_title(config: &Config, template: &str) -> String {
    let listen = match config.bind().first() {
        Some(a) if a != "*" && !a.is_empty() => format!("{a}:{}", config.port()),
        _ => format!("*:{}", config.port()),
    };
    let config_file = config
        .config_file()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            rest = "";
            break;
        };
        match &after[..close] {
            "title" => out.push_str(exec_name()),
            "listen-addr" => out.push_str(&listen),
            "server-mode" => {}
            "port" => out.push_str(&config.port().to_string()),
            "tls-port" => out.push_str(&config.int_param("tls-port").unwrap_or(0).to_string()),
            "unixsocket" => out.push_str(config.unixsocket().unwrap_or("")),
            "config-file" => out.push_str(&config_file),
            other => {
                out.push('{');
                out.push_str(other);
                out.push('}');
            }
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out.trim_matches(' ').to_string()
}
