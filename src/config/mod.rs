//! Tessera configuration: the command line, redis.conf parsing and the runtime
//! parameter store behind CONFIG GET / CONFIG SET.
//!
//! The parameters are data (`PARAMS`): each entry names its type, default and
//! flags, and one generic parser/renderer serves the config file, the command
//! line and CONFIG SET, so the three can never disagree.  Behaviour and error
//! strings follow Redis 7.0 (`config.c`), because clients and test suites
//! match on them.
//!
//! Precedence is Redis's: defaults, then the config file (with `include`s),
//! then stdin (`-`), then every `--name value...` command-line option, which
//! is turned into a config line and appended after the file.
//!
//! Layout, by responsibility: `params` is the parameter table (names, types,
//! defaults, flags and the refusals of what Tessera cannot honour yet),
//! `values` parses and renders values, `file` reads redis.conf (directives and
//! includes), `cli` reads the command line, `accessors` is the typed view the
//! server reads and `rewrite` is CONFIG REWRITE. This file keeps the `Config`
//! store with CONFIG GET / SET and the types handed to the rest of the server.

use std::path::{Path, PathBuf};

use clap::ValueEnum;

use crate::util::glob::glob_match;
use crate::util::io_error_text;

mod accessors;
mod cli;
mod file;
mod params;
mod rewrite;
mod values;

pub use cli::{parse_args, Cli, ParsedArgs};
pub use file::set_user_check;
pub use params::{
    lookup_param, ConfigParam, ParamFlags, ParamKind, Special, OOM_SCORE_ADJ_NAMES, PARAMS,
};
pub use values::{parse_cpu_list, MAX_CPU_ID, PROC_TITLE_PLACEHOLDERS};

use params::*;
use values::*;

/// Redis version reported in fatal config errors (and by INFO elsewhere).
pub const REDIS_VERSION: &str = "7.0.15";
/// Redis clamps `hz` into this range instead of rejecting it.
const HZ_MIN: i64 = 1;
const HZ_MAX: i64 = 500;

/* ------------------------------------------------------------------------ */
/* Typed enums and value types handed to the rest of the server.            */
/* ------------------------------------------------------------------------ */

/// `loglevel` values, in Redis's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    Debug,
    Verbose,
    Notice,
    Warning,
}

const LOGLEVEL_NAMES: &[&str] = &["debug", "verbose", "notice", "warning"];

impl LogLevel {
    const ALL: [LogLevel; 4] = [Self::Debug, Self::Verbose, Self::Notice, Self::Warning];

    pub fn as_str(self) -> &'static str {
        LOGLEVEL_NAMES[self as usize]
    }
}

/// `maxmemory-policy` values, in Redis's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxmemoryPolicy {
    VolatileLru,
    VolatileLfu,
    VolatileRandom,
    VolatileTtl,
    AllkeysLru,
    AllkeysLfu,
    AllkeysRandom,
    NoEviction,
}

const MAXMEMORY_POLICY_NAMES: &[&str] = &[
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "noeviction",
];

impl MaxmemoryPolicy {
    const ALL: [MaxmemoryPolicy; 8] = [
        Self::VolatileLru,
        Self::VolatileLfu,
        Self::VolatileRandom,
        Self::VolatileTtl,
        Self::AllkeysLru,
        Self::AllkeysLfu,
        Self::AllkeysRandom,
        Self::NoEviction,
    ];

    pub fn as_str(self) -> &'static str {
        MAXMEMORY_POLICY_NAMES[self as usize]
    }
}

/// `appendfsync` values, in Redis's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendFsync {
    EverySec,
    Always,
    No,
}

const APPENDFSYNC_NAMES: &[&str] = &["everysec", "always", "no"];

impl AppendFsync {
    const ALL: [AppendFsync; 3] = [Self::EverySec, Self::Always, Self::No];
}

/// `enable-debug-command` / `enable-protected-configs` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtectedAction {
    No,
    Yes,
    Local,
}

const PROTECTED_ACTION_NAMES: &[&str] = &["no", "yes", "local"];

impl ProtectedAction {
    const ALL: [ProtectedAction; 3] = [Self::No, Self::Yes, Self::Local];

    /// Whether a client may use the protected feature (local: see
    /// `ClientShared::is_local`).
    pub fn allows(self, client_is_local: bool) -> bool {
        match self {
            Self::No => false,
            Self::Yes => true,
            Self::Local => client_is_local,
        }
    }
}

/// Keyspace-notification class bits (`notify-keyspace-events`), same values
/// as Redis's NOTIFY_* so module-style code ports directly.
pub mod notify {
    pub const KEYSPACE: u32 = 1 << 0;
    pub const KEYEVENT: u32 = 1 << 1;
    pub const GENERIC: u32 = 1 << 2;
    pub const STRING: u32 = 1 << 3;
    pub const LIST: u32 = 1 << 4;
    pub const SET: u32 = 1 << 5;
    pub const HASH: u32 = 1 << 6;
    pub const ZSET: u32 = 1 << 7;
    pub const EXPIRED: u32 = 1 << 8;
    pub const EVICTED: u32 = 1 << 9;
    pub const STREAM: u32 = 1 << 10;
    /// Excluded from `ALL` on purpose, as in Redis.
    pub const KEY_MISS: u32 = 1 << 11;
    pub const MODULE: u32 = 1 << 13;
    /// Excluded from `ALL` on purpose, as in Redis.
    pub const NEW: u32 = 1 << 14;
    pub const ALL: u32 =
        GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;
}

/// One `save <seconds> <changes>` point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SavePoint {
    pub seconds: i64,
    pub changes: i64,
}

/// Client classes that have an output-buffer limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientClass {
    Normal = 0,
    Replica = 1,
    Pubsub = 2,
}

/// One class's `client-output-buffer-limit` (0 means no limit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObufLimit {
    pub hard_limit_bytes: u64,
    pub soft_limit_bytes: u64,
    pub soft_limit_seconds: i64,
}

/* ------------------------------------------------------------------------ */
/* The runtime store.                                                       */
/* ------------------------------------------------------------------------ */

/// One resolved CONFIG SET pair.
struct SetTarget<'a> {
    idx: usize,
    /// The registry entry (canonical name or alias) the client addressed.
    entry: &'static str,
    value: &'a [u8],
}

/// Current values of every parameter.
#[derive(Clone, Debug)]
pub struct Config {
    /// Parallel to `PARAMS`.
    values: Vec<Value>,
    /// Bumped on every successful change so other threads can notice.
    version: u64,
    /// Redis's "first `save` line in the file replaces the defaults, later
    /// ones append" rule needs to remember whether one was seen.
    save_loaded: bool,
    config_file: Option<PathBuf>,
    /// The `user` directives (name and rules), in file order: the ACL users made
    /// at start.
    acl_users: Vec<Vec<String>>,
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}

/// CONFIG SET port / tls-port: fails with Redis's text when another process has
/// the new port (the move itself is server/listeners.rs's).
fn port_available(value: &[u8]) -> Result<(), String> {
    let port: u16 = std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("argument couldn't be parsed into an integer")?;
    if port == 0 {
        return Ok(());
    }
    match std::net::TcpListener::bind(("127.0.0.1", port)) {
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "Unable to listen on this port: {}",
            io_error_text(&e)
        )),
    }
}

fn set_failed(arg: &str, err: &str) -> String {
    format!("ERR CONFIG SET failed (possibly related to argument '{arg}') - {err}")
}

impl Config {
    /// All parameters at their defaults.
    pub fn new() -> Self {
        Config {
            values: PARAMS.iter().map(default_value).collect(),
            version: 0,
            save_loaded: false,
            config_file: None,
            acl_users: Vec::new(),
        }
    }

    /// The `user` directives: each the user's name followed by its rules.
    pub fn acl_users(&self) -> &[Vec<String>] {
        &self.acl_users
    }

    /// CONFIG GET for one pattern (see `get_many`).
    pub fn get(&self, pattern: &[u8]) -> Vec<(String, String)> {
        self.get_many(&[pattern])
    }

    /// CONFIG GET with several patterns, as Redis 7.0 does it: a pattern
    /// without `[*?` is an exact (case-insensitive) lookup answered under the
    /// name as the client typed it; a glob is matched case-insensitively
    /// against every name and alias, each listed under its own name.  A name
    /// is reported once even if several patterns hit it.
    pub fn get_many(&self, patterns: &[&[u8]]) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        let seen = |out: &[(String, String)], name: &str| {
            out.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
        };
        for pattern in patterns {
            if !pattern.iter().any(|b| matches!(b, b'[' | b'*' | b'?')) {
                let name = String::from_utf8_lossy(pattern).into_owned();
                if !seen(&out, &name) {
                    if let Some((idx, _)) = lookup_entry(pattern) {
                        out.push((name, self.render_at(idx)));
                    }
                }
                continue;
            }
            for (idx, entry) in entries() {
                let hidden = PARAMS
                    .get(idx)
                    .is_some_and(|p| p.flags.contains(ParamFlags::HIDDEN));
                if !hidden && !seen(&out, entry) && glob_match(pattern, entry.as_bytes(), true) {
                    out.push((entry.to_string(), self.render_at(idx)));
                }
            }
        }
        out
    }

    /// The rendered value of one parameter (name or alias), if it exists.
    pub fn get_value(&self, name: &str) -> Option<String> {
        lookup_entry(name.as_bytes()).map(|(idx, _)| self.render_at(idx))
    }

    fn render_at(&self, idx: usize) -> String {
        if idx == IDX_REPLICAOF {
            // REPLICAOF changes the master at run time without touching the config.
            return crate::replication::master()
                .map(|(host, port)| format!("{host} {port}"))
                .unwrap_or_default();
        }
        match (PARAMS.get(idx), self.values.get(idx)) {
            (Some(p), Some(v)) => render(p, v),
            _ => String::new(),
        }
    }

    /// CONFIG SET name value [name value ...] from a client that is not
    /// local (see `set_many_as`).
    pub fn set_many(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<(), String> {
        self.set_many_as(pairs, false)
    }

    /// CONFIG SET, all or nothing, with Redis 7.0's checks and error
    /// strings (including the "ERR " prefix).  `client_is_local` matters only
    /// for protected parameters (dir, dbfilename) when
    /// `enable-protected-configs` is `local`.
    pub fn set_many_as(
        &mut self,
        pairs: &[(&[u8], &[u8])],
        client_is_local: bool,
    ) -> Result<(), String> {
        let targets = self.resolve_targets(pairs, client_is_local)?;
        // Work on a copy so a failure part-way leaves nothing applied.
        let mut staged = self.values.clone();
        for t in &targets {
            let p = PARAMS
                .get(t.idx)
                .ok_or_else(|| set_failed(t.entry, "unknown error"))?;
            let text = String::from_utf8_lossy(t.value).into_owned();
            let args = if p.kind.is_multi_arg() {
                split_spaces(&text)
            } else {
                vec![text]
            };
            let value =
                parse_value(p, &args, staged.get(t.idx)).map_err(|e| set_failed(t.entry, &e))?;
            store(&mut staged, t.idx, value);
        }
        if !targets.is_empty() {
            self.values = staged;
            self.version += 1;
        }
        Ok(())
    }

    /// Name resolution and the pre-checks Redis runs before parsing any
    /// value; the first problem in argument order is the one reported.
    fn resolve_targets<'a>(
        &self,
        pairs: &[(&'a [u8], &'a [u8])],
        client_is_local: bool,
    ) -> Result<Vec<SetTarget<'a>>, String> {
        let mut targets: Vec<SetTarget<'a>> = Vec::with_capacity(pairs.len());
        for &(name, value) in pairs {
            let shown = String::from_utf8_lossy(name);
            let Some((idx, entry)) = lookup_entry(name) else {
                return Err(format!(
                    "ERR Unknown option or number of arguments for CONFIG SET - '{shown}'"
                ));
            };
            let flags = PARAMS.get(idx).map_or(ParamFlags::NONE, |p| p.flags);
            if flags.contains(ParamFlags::FIXED_AT_START) && self.render_at(idx).as_bytes() == value
            {
                continue;
            }
            if flags.contains(ParamFlags::LISTENER)
                && (entry == "port" || entry == "tls-port")
                && self.render_at(idx).as_bytes() != value
            {
                port_available(value).map_err(|e| set_failed(&shown, &e))?;
            }
            if flags.contains(ParamFlags::IMMUTABLE) {
                return Err(set_failed(&shown, "can't set immutable config"));
            }
            if flags.contains(ParamFlags::PROTECTED)
                && !self.enable_protected_configs().allows(client_is_local)
            {
                return Err(set_failed(&shown, "can't set protected config"));
            }
            // Redis compares registry entries, so an alias and its canonical
            // name in one call are not duplicates (the later one wins).
            if targets.iter().any(|t| t.entry == entry) {
                return Err(set_failed(&shown, "duplicate parameter"));
            }
            targets.push(SetTarget { idx, entry, value });
        }
        Ok(targets)
    }

    /// Counter bumped by every successful change (CONFIG SET or directive).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Absolute path of the config file given on the command line.
    pub fn config_file(&self) -> Option<&Path> {
        self.config_file.as_deref()
    }
}

/// Stores a parsed value, applying Redis's post-set normalisation.
fn store(values: &mut [Value], idx: usize, value: Value) {
    let value = match value {
        // Redis accepts any non-negative hz but clamps it.
        Value::Int(hz) if idx == IDX_HZ => Value::Int(hz.clamp(HZ_MIN, HZ_MAX)),
        other => other,
    };
    if let Some(slot) = values.get_mut(idx) {
        *slot = value;
    }
}

#[cfg(test)]
mod tests;
