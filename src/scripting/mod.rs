//! Lua scripting (EVAL, FCALL): the script engine and the state every shard shares.
//!
//! Design (DESIGN.md §4): a script is atomic across shards. The connection's home shard
//! takes every shard's lock (as EXEC does) and runs the script on its own Lua VM, on
//! the shard thread, inside the EVAL's task (`vm.rs`). Each `redis.call` runs at once
//! like a command of a fake client inside EXEC — on the shard that owns its keys,
//! under the script's lock owner — and its RESP reply is parsed into Lua values
//! exactly as Redis parses its fake client's reply.
//!
//! Lua 5.1 cannot yield across pcall, so a script cannot be an ordinary future that
//! awaits its commands (`pcall(redis.call ...)` would break). Instead `redis.call` is
//! synchronous: a command that must wait (for another shard's reply) runs the shard's
//! other tasks in a nested loop until it is done (`runtime::block_on_nested`), and a
//! script past `busy-reply-threshold` does the same from its instruction hook, so every
//! shard answers -BUSY and SCRIPT KILL / FUNCTION KILL reach the script through an
//! atomic flag the hook polls (Redis's processEventsWhileBlocked). One script runs at a
//! time per shard VM; other jobs (SCRIPT LOAD ...) wait for it.
//!
//! Shared state: scripts and function libraries live in process-wide registries behind
//! a mutex that a VM only touches on a cache miss, a load or a flush; each VM keeps its
//! own compiled copies and notices a flush or a library change through an atomic
//! generation counter, so the per-call path takes no lock.

pub mod bit;
pub mod cjson;
pub mod cmsgpack;
pub mod convert;
pub mod functions;
pub mod sha1;
pub mod structlib;
pub mod vm;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Script flags (shebang `flags=` or `redis.register_function{flags=...}`).
pub mod flags {
    pub const NO_WRITES: u32 = 1;
    pub const ALLOW_OOM: u32 = 2;
    pub const ALLOW_STALE: u32 = 4;
    pub const NO_CLUSTER: u32 = 8;
    pub const ALLOW_CROSS_SLOT: u32 = 16;
    /// An EVAL script without a shebang: Redis's backwards-compatible mode.
    pub const EVAL_COMPAT: u32 = 32;

    pub const NAMES: &[(u32, &str)] = &[
        (NO_WRITES, "no-writes"),
        (ALLOW_OOM, "allow-oom"),
        (ALLOW_STALE, "allow-stale"),
        (NO_CLUSTER, "no-cluster"),
        (ALLOW_CROSS_SLOT, "allow-cross-slot-keys"),
    ];
}

/// The flags of the script or function a script command names (`target`: the
/// script, its sha, or the function): None when it is not known or its shebang does
/// not parse; `EVAL_COMPAT` for a script without a shebang.
pub fn declared_flags(command: &str, target: &[u8]) -> Option<u32> {
    match command {
        "eval" | "eval_ro" => vm::parse_shebang(target).ok().map(|(f, _)| f),
        "evalsha" | "evalsha_ro" => std::str::from_utf8(target)
            .ok()
            .filter(|sha| sha.len() == 40)
            .and_then(|sha| script_get(&sha.to_ascii_lowercase()))
            .and_then(|body| vm::parse_shebang(&body).ok().map(|(f, _)| f)),
        "fcall" | "fcall_ro" => functions::flags_of(target),
        _ => None,
    }
}

/// A script command's flags as Redis's getCommandFlags gives them (what MULTI
/// gathers for EXEC's checks): a script or function that declares its flags has
/// them replace the command's own write, deny-oom, stale and may-replicate flags
/// (scriptFlagsToCmdFlags); one without a shebang, not known, or whose shebang does
/// not parse keeps `cmd_flags`, as does any other command.
pub fn command_flags(command: &str, target: &[u8], cmd_flags: u32) -> u32 {
    use crate::commands::table::flags as cmd;
    let Some(declared) = declared_flags(command, target).filter(|f| f & flags::EVAL_COMPAT == 0)
    else {
        return cmd_flags;
    };
    let mut out = cmd_flags & !(cmd::STALE | cmd::DENYOOM | cmd::WRITE | cmd::MAY_REPLICATE);
    if declared & (flags::ALLOW_OOM | flags::NO_WRITES) == 0 {
        out |= cmd::DENYOOM;
    }
    if declared & flags::NO_WRITES == 0 {
        out |= cmd::WRITE;
    }
    if declared & flags::ALLOW_STALE != 0 {
        out |= cmd::STALE;
    }
    out
}

pub const BUSY_EVAL: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
pub const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";

/// Locks a registry mutex; a panic while holding it cannot leave it half-updated in a
/// way that matters (each update is a single insert/remove), so poisoning is ignored.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// EVAL / SCRIPT LOAD bodies by sha (lowercase hex).
static SCRIPTS: Mutex<Option<HashMap<String, Arc<Vec<u8>>>>> = Mutex::new(None);
/// Bumped by SCRIPT FLUSH: VMs drop their compiled scripts when they see it change.
pub static SCRIPT_EPOCH: AtomicU64 = AtomicU64::new(0);

/// DEBUG SET-DISABLE-DENY-SCRIPTS: scripts may call commands flagged `noscript`
/// (Redis's tests let a script run CLIENT LIST or DEBUG this way).
static DENY_SCRIPT_DISABLED: AtomicBool = AtomicBool::new(false);

pub fn set_deny_script_disabled(on: bool) {
    DENY_SCRIPT_DISABLED.store(on, Ordering::Relaxed);
}

/// Whether a script may call a `noscript` command.
pub fn deny_script_disabled() -> bool {
    DENY_SCRIPT_DISABLED.load(Ordering::Relaxed)
}

pub fn script_get(sha: &str) -> Option<Arc<Vec<u8>>> {
    lock(&SCRIPTS).as_ref()?.get(sha).cloned()
}

pub fn script_put(sha: String, body: Vec<u8>) {
    lock(&SCRIPTS)
        .get_or_insert_with(HashMap::new)
        .entry(sha)
        .or_insert_with(|| Arc::new(body));
}

pub fn script_exists(sha: &str) -> bool {
    lock(&SCRIPTS).as_ref().is_some_and(|m| m.contains_key(sha))
}

/// Bytes of the cached EVAL bodies (INFO used_memory_scripts_eval).
pub fn scripts_bytes() -> u64 {
    lock(&SCRIPTS).as_ref().map_or(0, |m| {
        m.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum()
    })
}

pub fn script_count() -> usize {
    lock(&SCRIPTS).as_ref().map_or(0, |m| m.len())
}

pub fn script_flush() {
    *lock(&SCRIPTS) = None;
    SCRIPT_EPOCH.fetch_add(1, Ordering::SeqCst);
}

/// Bytes every shard's Lua VM holds (mlua's count of its allocations), for INFO's
/// used_memory_lua; like Redis, this memory does not count toward maxmemory.
static LUA_MEMORY: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// What this shard last added to LUA_MEMORY.
    static LUA_MEMORY_MINE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Publishes this shard's VM size (after each job and each new VM).
pub fn publish_lua_memory(bytes: u64) {
    LUA_MEMORY_MINE.with(|m| {
        let old = m.replace(bytes);
        if bytes >= old {
            LUA_MEMORY.fetch_add(bytes - old, Ordering::Relaxed);
        } else {
            LUA_MEMORY.fetch_sub(old - bytes, Ordering::Relaxed);
        }
    });
}

/// Every shard's Lua VM memory, in bytes.
pub fn lua_memory() -> u64 {
    LUA_MEMORY.load(Ordering::Relaxed)
}

/// The script or function running now (one at a time: it holds every shard).
pub struct Running {
    pub start: Instant,
    pub is_eval: bool,
    /// The function's name (FUNCTION STATS); the sha for EVAL.
    pub name: String,
    pub command: Vec<Vec<u8>>,
    /// It ran a write command: SCRIPT KILL then refuses (UNKILLABLE).
    pub wrote: bool,
}

static RUNNING: Mutex<Option<Running>> = Mutex::new(None);
/// Set once the running script passes busy-reply-threshold; read on every command.
static BUSY: AtomicBool = AtomicBool::new(false);
static BUSY_IS_EVAL: AtomicBool = AtomicBool::new(true);
/// SCRIPT KILL / FUNCTION KILL asked the running script to stop.
pub static KILL: AtomicBool = AtomicBool::new(false);

pub fn running() -> MutexGuard<'static, Option<Running>> {
    lock(&RUNNING)
}

pub fn start_running(r: Running) {
    KILL.store(false, Ordering::SeqCst);
    *lock(&RUNNING) = Some(r);
}

pub fn stop_running() {
    *lock(&RUNNING) = None;
    BUSY.store(false, Ordering::SeqCst);
    KILL.store(false, Ordering::SeqCst);
}

/// Called by the VM's hook once the script has run too long.
pub fn set_busy(is_eval: bool) {
    BUSY_IS_EVAL.store(is_eval, Ordering::SeqCst);
    BUSY.store(true, Ordering::SeqCst);
}

/// Whether a script or function has run past busy-reply-threshold (one load).
#[inline]
pub fn is_busy() -> bool {
    BUSY.load(Ordering::Relaxed)
}

/// The -BUSY error other clients get while a slow script runs, if one does.
#[inline]
pub fn busy_error() -> Option<&'static str> {
    if !BUSY.load(Ordering::Relaxed) {
        return None;
    }
    Some(if BUSY_IS_EVAL.load(Ordering::Relaxed) {
        BUSY_EVAL
    } else {
        BUSY_FUNCTION
    })
}

/// Where Lua's luaL_error places an error raised by a library function: the line of
/// the Lua code that called it ("user_script:1: "), nothing when a C function (pcall)
/// called it. Redis's libraries are C and raise through luaL_error, so their errors
/// carry this prefix; ours are Rust and add it themselves (`lib_fn`).
pub fn caller_where(lua: &mlua::Lua) -> String {
    match lua.inspect_stack(1) {
        Some(d) if d.curr_line() > 0 => {
            let src = d.source();
            let name = src.short_src.as_deref().unwrap_or("?");
            format!("{name}:{}: ", d.curr_line())
        }
        _ => String::new(),
    }
}

/// A library function (cjson, cmsgpack, struct, bit) whose errors, argument
/// conversion included, read like luaL_error's: prefixed by `caller_where`.
pub fn lib_fn<A, R, F>(lua: &mlua::Lua, f: F) -> mlua::Result<mlua::Function>
where
    A: mlua::FromLuaMulti,
    R: mlua::IntoLuaMulti,
    F: Fn(&mlua::Lua, A) -> mlua::Result<R> + 'static,
{
    lua.create_function(move |lua, args: mlua::MultiValue| {
        A::from_lua_multi(args, lua)
            .and_then(|a| f(lua, a))
            .map_err(|e| {
                mlua::Error::RuntimeError(format!("{}{}", caller_where(lua), vm::error_text(&e)))
            })
    })
}

/// C's `%.<prec>g`: `prec` significant digits, trailing zeros dropped, exponent form
/// when the exponent is below -4 or at least `prec`.
pub fn format_g(v: f64, prec: usize) -> String {
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let prec = prec.max(1);
    let sci = format!("{:.*e}", prec - 1, v);
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= prec as i32 {
        let mant = trim_zeros(mant);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (prec as i32 - 1 - exp).max(0) as usize;
        trim_zeros(&format!("{:.*}", decimals, v)).to_string()
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::format_g;

    #[test]
    fn format_g_matches_c() {
        assert_eq!(format_g(100.0, 17), "100");
        assert_eq!(format_g(0.1, 17), "0.10000000000000001");
        assert_eq!(format_g(9007199254740991.0, 17), "9007199254740991");
        assert_eq!(format_g(1e20, 17), "1e+20");
        assert_eq!(format_g(0.0003, 14), "0.0003");
        assert_eq!(format_g(1023.2, 14), "1023.2");
        assert_eq!(format_g(-5000.0, 14), "-5000");
        assert_eq!(format_g(1e-5, 14), "1e-05");
        assert_eq!(format_g(1.25, 17), "1.25");
    }
}
