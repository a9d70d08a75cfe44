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

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use clap::{ArgAction, CommandFactory, Parser, ValueEnum};

use crate::util::cstr::{memtoull, repr, split_args_lossy, string2ll, strtoll};
use crate::util::glob::glob_match;

mod rewrite;

/// Redis version reported in fatal config errors (and by INFO elsewhere).
pub const REDIS_VERSION: &str = "7.0.15";

/// Nested `include` limit; Redis has none and overflows its stack on cycles.
const MAX_INCLUDE_DEPTH: usize = 16;
/// Redis's CONFIG_BINDADDR_MAX.
const CONFIG_BINDADDR_MAX: usize = 16;
/// Highest CPU id accepted by `--cpus`; bounds the work a CPU list can cause.
pub const MAX_CPU_ID: usize = 65_535;
/// Redis clamps `hz` into this range instead of rejecting it.
const HZ_MIN: i64 = 1;
const HZ_MAX: i64 = 500;

const INT_MAX: i64 = i32::MAX as i64;
const INT_MIN: i64 = i32::MIN as i64;
const UINT_MAX: i64 = u32::MAX as i64;
const LONG_MAX: i64 = i64::MAX;
const MB: u64 = 1024 * 1024;

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

/// `oom-score-adj` values, in Redis's order.
pub const OOM_SCORE_ADJ_NAMES: &[&str] = &["no", "yes", "relative", "absolute"];
const SYSLOG_FACILITY_NAMES: &[&str] = &[
    "user", "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7",
];
const SUPERVISED_NAMES: &[&str] = &["upstart", "systemd", "auto", "no"];
const PROPAGATION_ERROR_NAMES: &[&str] = &["ignore", "panic", "panic-on-replicas"];
const SANITIZE_PAYLOAD_NAMES: &[&str] = &["no", "yes", "clients"];
const ACL_PUBSUB_NAMES: &[&str] = &["allchannels", "resetchannels"];
const REPL_DISKLESS_LOAD_NAMES: &[&str] = &["disabled", "on-empty-db", "swapdb"];
const CLUSTER_ENDPOINT_NAMES: &[&str] = &["ip", "hostname", "unknown-endpoint"];
const TLS_AUTH_CLIENTS_NAMES: &[&str] = &["no", "yes", "optional"];

/// Why parameters of features still to come accept only their defaults.
const CLUSTER_NOT_YET: &str =
    "Tessera does not run in Redis Cluster mode yet: cluster-* settings other than the defaults are refused";
const TLS_NOT_YET: &str =
    "Tessera does not support TLS yet: tls-* settings other than the defaults are refused";
const ACL_NOT_YET: &str =
    "Tessera does not support ACL users yet (only the default user with requirepass)";
const REPLICA_NOT_YET: &str =
    "Tessera cannot act as a replica yet: replica-side settings other than the defaults are refused";
const DEFRAG_NOT_YET: &str = "Tessera does not do active defragmentation";
const CPULIST_NOT_YET: &str =
    "Tessera pins its shard threads with `cpus`; Redis's *_cpulist settings are not supported";

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
/* The parameter table.                                                     */
/* ------------------------------------------------------------------------ */

/// Per-parameter flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamFlags(u8);

impl ParamFlags {
    pub const NONE: ParamFlags = ParamFlags(0);
    /// Only settable at startup (file / command line); CONFIG SET refuses.
    pub const IMMUTABLE: ParamFlags = ParamFlags(1);
    /// Value must be redacted from SLOWLOG / MONITOR / logs.
    pub const SENSITIVE: ParamFlags = ParamFlags(2);
    /// CONFIG SET allowed only as `enable-protected-configs` permits.
    pub const PROTECTED: ParamFlags = ParamFlags(4);
    /// Left out of CONFIG GET globs; only an exact name finds it (Redis's
    /// HIDDEN_CONFIG: debugging knobs).
    pub const HIDDEN: ParamFlags = ParamFlags(8);
    /// Immutable in Tessera although Redis can change it at run time (listeners
    /// are created once per shard): CONFIG SET to the current value is a no-op.
    pub const FIXED_AT_START: ParamFlags = ParamFlags(16);

    pub const fn contains(self, other: ParamFlags) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn union(self, other: ParamFlags) -> ParamFlags {
        ParamFlags(self.0 | other.0)
    }
}

/// Parameters whose parsing or rendering is bespoke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    /// `bind addr...` (multi-argument).
    Bind,
    /// `save [seconds changes]...` (multi-argument).
    Save,
    /// `client-output-buffer-limit class hard soft secs...` (multi-argument).
    ClientOutputBufferLimit,
    /// `notify-keyspace-events` class letters.
    NotifyKeyspaceEvents,
    /// `latency-tracking-info-percentiles p...` (multi-argument).
    LatencyPercentiles,
    /// `dir`: must exist; stored and rendered as an absolute path.
    Dir,
    /// A file name that must not contain `/` (dbfilename, appendfilename).
    FileName,
    /// Tessera's `cpus` list (`0-3,8`), empty for "no pinning".
    CpuList,
    /// `appendonly`: a yes/no that refuses `yes` until Tessera writes an AOF, so
    /// that nobody runs believing their writes are logged.
    AppendOnly,
    /// `replicaof host port` (or `no one`): the master, set in the config file or
    /// by REPLICAOF; CONFIG GET shows the one in force.
    ReplicaOf,
    /// An octal integer 0..=0777 (`unixsocketperm`), rendered in octal.
    Octal,
    /// `proc-title-template`: `{name}` placeholders Redis knows, validated.
    ProcTitleTemplate,
    /// `oom-score-adj-values master replica bgchild`, each -2000..=2000.
    OomScoreAdjValues,
    /// `shutdown-on-sigint` / `shutdown-on-sigterm`: `default` or some of
    /// save / nosave / now / force.
    ShutdownFlags,
}

/// How a parameter's value is parsed and rendered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// `yes` / `no`.
    Bool,
    /// Plain integer (Redis's string2ll: no spaces, `+` or leading zeros).
    Int {
        min: i64,
        max: i64,
    },
    /// Byte count with optional unit (b, k, kb, m, mb, g, gb); rendered as a
    /// plain integer.  `percent` also accepts `N%` (N <= 100).
    Memory {
        min: u64,
        max: u64,
        percent: bool,
    },
    /// One of the listed names (case-insensitive), rendered as the name.
    Enum(&'static [&'static str]),
    /// Free-form string.
    String,
    Special(Special),
}

impl ParamKind {
    /// Multi-argument parameters take several words on a config line and a
    /// space-separated value in CONFIG SET.
    pub fn is_multi_arg(&self) -> bool {
        matches!(
            self,
            ParamKind::Special(
                Special::Bind
                    | Special::Save
                    | Special::ClientOutputBufferLimit
                    | Special::LatencyPercentiles
                    | Special::ReplicaOf
                    | Special::OomScoreAdjValues
                    | Special::ShutdownFlags
            )
        )
    }
}

/// One configuration parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigParam {
    pub name: &'static str,
    /// Old names that address the same value (both are listed by CONFIG GET).
    pub aliases: &'static [&'static str],
    pub kind: ParamKind,
    /// Default, written exactly as it would appear in redis.conf.
    pub default: &'static str,
    pub flags: ParamFlags,
    /// Set for a parameter Redis has and Tessera cannot honour yet: only its default
    /// is accepted (so configs written for Redis that leave it alone still load), any
    /// other value is refused with this reason, never accepted and ignored.
    pub not_yet: Option<&'static str>,
}

impl ConfigParam {
    const fn new(name: &'static str, kind: ParamKind, default: &'static str) -> Self {
        ConfigParam {
            name,
            aliases: &[],
            kind,
            default,
            flags: ParamFlags::NONE,
            not_yet: None,
        }
    }

    /// Only the default is accepted until Tessera can honour other values (`why`).
    const fn only_default(mut self, why: &'static str) -> Self {
        self.not_yet = Some(why);
        self
    }

    const fn alias(mut self, aliases: &'static [&'static str]) -> Self {
        self.aliases = aliases;
        self
    }

    const fn flag(mut self, flag: ParamFlags) -> Self {
        self.flags = self.flags.union(flag);
        self
    }

    pub fn is_immutable(&self) -> bool {
        self.flags.contains(ParamFlags::IMMUTABLE)
    }

    pub fn is_sensitive(&self) -> bool {
        self.flags.contains(ParamFlags::SENSITIVE)
    }
}

const fn boolean(name: &'static str, default: &'static str) -> ConfigParam {
    ConfigParam::new(name, ParamKind::Bool, default)
}

const fn int(name: &'static str, min: i64, max: i64, default: &'static str) -> ConfigParam {
    ConfigParam::new(name, ParamKind::Int { min, max }, default)
}

const fn memory(name: &'static str, min: u64, max: u64, default: &'static str) -> ConfigParam {
    let kind = ParamKind::Memory {
        min,
        max,
        percent: false,
    };
    ConfigParam::new(name, kind, default)
}

const fn enumeration(
    name: &'static str,
    names: &'static [&'static str],
    default: &'static str,
) -> ConfigParam {
    ConfigParam::new(name, ParamKind::Enum(names), default)
}

const fn string(name: &'static str, default: &'static str) -> ConfigParam {
    ConfigParam::new(name, ParamKind::String, default)
}

const fn special(name: &'static str, kind: Special, default: &'static str) -> ConfigParam {
    ConfigParam::new(name, ParamKind::Special(kind), default)
}

const IMMUTABLE: ParamFlags = ParamFlags::IMMUTABLE;
const FIXED: ParamFlags = ParamFlags::IMMUTABLE.union(ParamFlags::FIXED_AT_START);
const LONG_MAX_U: u64 = i64::MAX as u64;

const TABLE: &[ConfigParam] = &[
    // Networking.  `bind` is immutable (unlike Redis 7.0) because listeners
    // are created once per shard thread and never rebound, same as `port`.
    // Redis's default: every IPv4 address and, where the host has IPv6, every IPv6
    // one; protected mode keeps clients that are not local out until a password is
    // set.
    special("bind", Special::Bind, "* -::*").flag(FIXED),
    int("port", 0, 65535, "6379").flag(FIXED),
    int("tcp-backlog", 0, INT_MAX, "511").flag(IMMUTABLE),
    string("unixsocket", "").flag(IMMUTABLE),
    int("timeout", 0, INT_MAX, "0"),
    int("tcp-keepalive", 0, INT_MAX, "300"),
    boolean("protected-mode", "yes"),
    int("maxclients", 1, UINT_MAX, "10000"),
    // General.
    int("databases", 1, INT_MAX, "16").flag(IMMUTABLE),
    boolean("daemonize", "no")
        .flag(IMMUTABLE)
        .only_default("daemonize yes is not supported by Tessera: run it in the foreground under a supervisor (systemd, runit, docker)"),
    string("pidfile", "").flag(IMMUTABLE),
    enumeration("loglevel", LOGLEVEL_NAMES, "notice"),
    string("logfile", "").flag(IMMUTABLE),
    boolean("always-show-logo", "no").flag(IMMUTABLE),
    string("requirepass", "").flag(ParamFlags::SENSITIVE),
    int("hz", 0, INT_MAX, "10"),
    boolean("dynamic-hz", "yes"),
    int("io-threads", 1, 128, "1").flag(IMMUTABLE),
    boolean("io-threads-do-reads", "no").flag(IMMUTABLE),
    enumeration("enable-debug-command", PROTECTED_ACTION_NAMES, "no").flag(IMMUTABLE),
    enumeration("enable-protected-configs", PROTECTED_ACTION_NAMES, "no").flag(IMMUTABLE),
    enumeration("enable-module-command", PROTECTED_ACTION_NAMES, "no").flag(IMMUTABLE),
    boolean("jemalloc-bg-thread", "yes"),
    special("unixsocketperm", Special::Octal, "0").flag(IMMUTABLE),
    boolean("syslog-enabled", "no").flag(IMMUTABLE),
    string("syslog-ident", "redis").flag(IMMUTABLE),
    enumeration("syslog-facility", SYSLOG_FACILITY_NAMES, "local0").flag(IMMUTABLE),
    enumeration("supervised", SUPERVISED_NAMES, "no")
        .flag(IMMUTABLE)
        .only_default("supervised mode is not supported by Tessera yet: run it as a simple service"),
    boolean("set-proc-title", "yes").flag(IMMUTABLE),
    special(
        "proc-title-template",
        Special::ProcTitleTemplate,
        "{title} {listen-addr} {server-mode}",
    ),
    enumeration("oom-score-adj", OOM_SCORE_ADJ_NAMES, "no"),
    special("oom-score-adj-values", Special::OomScoreAdjValues, "0 200 800"),
    boolean("disable-thp", "yes").flag(IMMUTABLE),
    string("ignore-warnings", ""),
    boolean("crash-log-enabled", "yes"),
    // Tessera runs no memory test after a crash: it behaves as `no`.
    boolean("crash-memcheck-enabled", "no")
        .only_default("Tessera has no memory test to run after a crash"),
    boolean("use-exit-on-panic", "no").flag(ParamFlags::HIDDEN),
    enumeration("propagation-error-behavior", PROPAGATION_ERROR_NAMES, "ignore"),
    special("shutdown-on-sigint", Special::ShutdownFlags, "default"),
    special("shutdown-on-sigterm", Special::ShutdownFlags, "default"),
    int("shutdown-timeout", 0, INT_MAX, "10")
        .only_default("Tessera does not wait for lagging replicas at shutdown yet"),
    string("bind-source-addr", "").only_default(REPLICA_NOT_YET),
    int("socket-mark-id", 0, UINT_MAX, "0")
        .only_default("socket-mark-id is not supported by Tessera yet"),
    string("server_cpulist", "").flag(IMMUTABLE).only_default(CPULIST_NOT_YET),
    string("bio_cpulist", "").flag(IMMUTABLE).only_default(CPULIST_NOT_YET),
    string("aof_rewrite_cpulist", "").flag(IMMUTABLE).only_default(CPULIST_NOT_YET),
    string("bgsave_cpulist", "").flag(IMMUTABLE).only_default(CPULIST_NOT_YET),
    // ACL: only the default user exists (requirepass).
    string("aclfile", "").flag(IMMUTABLE).only_default(ACL_NOT_YET),
    int("acllog-max-len", 0, LONG_MAX, "128").only_default(ACL_NOT_YET),
    enumeration("acl-pubsub-default", ACL_PUBSUB_NAMES, "resetchannels"),
    // TLS.
    int("tls-port", 0, 65535, "0").flag(IMMUTABLE).only_default(TLS_NOT_YET),
    string("tls-cert-file", "").only_default(TLS_NOT_YET),
    string("tls-key-file", "").only_default(TLS_NOT_YET),
    string("tls-key-file-pass", "").flag(ParamFlags::SENSITIVE).only_default(TLS_NOT_YET),
    string("tls-client-cert-file", "").only_default(TLS_NOT_YET),
    string("tls-client-key-file", "").only_default(TLS_NOT_YET),
    string("tls-client-key-file-pass", "").flag(ParamFlags::SENSITIVE).only_default(TLS_NOT_YET),
    string("tls-dh-params-file", "").only_default(TLS_NOT_YET),
    string("tls-ca-cert-file", "").only_default(TLS_NOT_YET),
    string("tls-ca-cert-dir", "").only_default(TLS_NOT_YET),
    string("tls-protocols", "").only_default(TLS_NOT_YET),
    string("tls-ciphers", "").only_default(TLS_NOT_YET),
    string("tls-ciphersuites", "").only_default(TLS_NOT_YET),
    boolean("tls-prefer-server-ciphers", "no").only_default(TLS_NOT_YET),
    boolean("tls-session-caching", "yes").only_default(TLS_NOT_YET),
    int("tls-session-cache-size", 0, INT_MAX, "20480").only_default(TLS_NOT_YET),
    int("tls-session-cache-timeout", 0, INT_MAX, "300").only_default(TLS_NOT_YET),
    boolean("tls-cluster", "no").only_default(TLS_NOT_YET),
    boolean("tls-replication", "no").only_default(TLS_NOT_YET),
    enumeration("tls-auth-clients", TLS_AUTH_CLIENTS_NAMES, "yes").only_default(TLS_NOT_YET),
    // Active defragmentation.
    boolean("activedefrag", "no").only_default(DEFRAG_NOT_YET),
    memory("active-defrag-ignore-bytes", 1, LONG_MAX_U, "100mb").only_default(DEFRAG_NOT_YET),
    int("active-defrag-threshold-lower", 0, 1000, "10").only_default(DEFRAG_NOT_YET),
    int("active-defrag-threshold-upper", 0, 1000, "100").only_default(DEFRAG_NOT_YET),
    int("active-defrag-cycle-min", 1, 99, "1").only_default(DEFRAG_NOT_YET),
    int("active-defrag-cycle-max", 1, 99, "25").only_default(DEFRAG_NOT_YET),
    int("active-defrag-max-scan-fields", 1, LONG_MAX, "1000").only_default(DEFRAG_NOT_YET),
    // Cluster mode.
    boolean("cluster-enabled", "no").flag(IMMUTABLE).only_default(CLUSTER_NOT_YET),
    string("cluster-config-file", "nodes.conf").flag(IMMUTABLE).only_default(CLUSTER_NOT_YET),
    int("cluster-port", 0, 65535, "0").flag(IMMUTABLE).only_default(CLUSTER_NOT_YET),
    int("cluster-node-timeout", 0, LONG_MAX, "15000").only_default(CLUSTER_NOT_YET),
    string("cluster-announce-ip", "").only_default(CLUSTER_NOT_YET),
    int("cluster-announce-port", 0, 65535, "0").only_default(CLUSTER_NOT_YET),
    int("cluster-announce-bus-port", 0, 65535, "0").only_default(CLUSTER_NOT_YET),
    int("cluster-announce-tls-port", 0, 65535, "0").only_default(CLUSTER_NOT_YET),
    string("cluster-announce-hostname", "").only_default(CLUSTER_NOT_YET),
    enumeration("cluster-preferred-endpoint-type", CLUSTER_ENDPOINT_NAMES, "ip")
        .only_default(CLUSTER_NOT_YET),
    boolean("cluster-require-full-coverage", "yes").only_default(CLUSTER_NOT_YET),
    boolean("cluster-replica-no-failover", "no")
        .alias(&["cluster-slave-no-failover"])
        .only_default(CLUSTER_NOT_YET),
    int("cluster-replica-validity-factor", 0, INT_MAX, "10")
        .alias(&["cluster-slave-validity-factor"])
        .only_default(CLUSTER_NOT_YET),
    int("cluster-migration-barrier", 0, INT_MAX, "1").only_default(CLUSTER_NOT_YET),
    boolean("cluster-allow-replica-migration", "yes").only_default(CLUSTER_NOT_YET),
    boolean("cluster-allow-reads-when-down", "no").only_default(CLUSTER_NOT_YET),
    boolean("cluster-allow-pubsubshard-when-down", "yes").only_default(CLUSTER_NOT_YET),
    memory("cluster-link-sendbuf-limit", 0, LONG_MAX_U, "0").only_default(CLUSTER_NOT_YET),
    // Tessera's own: shard threads (0 = one per CPU) and CPU pinning.
    int("threads", 0, 4096, "0").flag(FIXED),
    special("cpus", Special::CpuList, "").flag(FIXED),
    // Client limits.
    memory("proto-max-bulk-len", MB, LONG_MAX_U, "512mb"),
    memory("client-query-buffer-limit", MB, LONG_MAX_U, "1gb"),
    special(
        "client-output-buffer-limit",
        Special::ClientOutputBufferLimit,
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
    ),
    int("tracking-table-max-keys", 0, LONG_MAX, "1000000"),
    // Memory management and eviction.
    memory("maxmemory", 0, u64::MAX, "0"),
    enumeration("maxmemory-policy", MAXMEMORY_POLICY_NAMES, "noeviction"),
    int("maxmemory-samples", 1, 64, "5"),
    int("maxmemory-eviction-tenacity", 0, 100, "10"),
    // Client eviction is not implemented: the limit is refused rather than ignored.
    ConfigParam::new(
        "maxmemory-clients",
        ParamKind::Memory {
            min: 0,
            max: LONG_MAX_U,
            percent: true,
        },
        "0",
    )
    .only_default("client eviction (maxmemory-clients) is not implemented by Tessera yet"),
    int("lfu-log-factor", 0, INT_MAX, "10"),
    int("lfu-decay-time", 0, INT_MAX, "1"),
    boolean("lazyfree-lazy-eviction", "no"),
    boolean("lazyfree-lazy-expire", "no"),
    boolean("lazyfree-lazy-server-del", "no"),
    boolean("lazyfree-lazy-user-del", "no"),
    boolean("lazyfree-lazy-user-flush", "no"),
    boolean("replica-lazy-flush", "no").alias(&["slave-lazy-flush"]),
    int("active-expire-effort", 1, 10, "1"),
    boolean("activerehashing", "yes"),
    // Persistence.
    special("save", Special::Save, "3600 1 300 100 60 10000"),
    boolean("stop-writes-on-bgsave-error", "yes"),
    boolean("rdbcompression", "yes"),
    boolean("rdbchecksum", "yes"),
    special("dbfilename", Special::FileName, "dump.rdb").flag(ParamFlags::PROTECTED),
    special("dir", Special::Dir, ".").flag(ParamFlags::PROTECTED),
    special("appendonly", Special::AppendOnly, "no"),
    special("appendfilename", Special::FileName, "appendonly.aof").flag(IMMUTABLE),
    // Read only when an AOF is written (appendonly yes is refused until then).
    special("appenddirname", Special::FileName, "appendonlydir").flag(IMMUTABLE),
    boolean("aof-load-truncated", "yes"),
    boolean("aof-timestamp-enabled", "no"),
    boolean("aof-rewrite-incremental-fsync", "yes"),
    boolean("aof-disable-auto-gc", "no"),
    boolean("rdb-save-incremental-fsync", "yes"),
    boolean("rdb-del-sync-files", "no").only_default(REPLICA_NOT_YET),
    // Tessera decodes every RESTORE payload into its own structures, validating all of
    // it, so each mode gets at least what `yes` promises.
    enumeration("sanitize-dump-payload", SANITIZE_PAYLOAD_NAMES, "no"),
    int("loading-process-events-interval-bytes", 1024, INT_MAX, "2097152")
        .flag(ParamFlags::HIDDEN),
    enumeration("appendfsync", APPENDFSYNC_NAMES, "everysec"),
    boolean("no-appendfsync-on-rewrite", "no"),
    boolean("aof-use-rdb-preamble", "yes"),
    int("auto-aof-rewrite-percentage", 0, INT_MAX, "100"),
    memory("auto-aof-rewrite-min-size", 0, LONG_MAX_U, "64mb"),
    // Events and monitoring.
    special("notify-keyspace-events", Special::NotifyKeyspaceEvents, ""),
    int("slowlog-log-slower-than", -1, LONG_MAX, "10000"),
    int("slowlog-max-len", 0, LONG_MAX, "128"),
    int("latency-monitor-threshold", 0, LONG_MAX, "0"),
    // Redis's hidden debugging delays (accepted, reported on exact request only).
    int("key-load-delay", INT_MIN, INT_MAX, "0").flag(ParamFlags::HIDDEN),
    int("rdb-key-save-delay", INT_MIN, INT_MAX, "0").flag(ParamFlags::HIDDEN),
    boolean("latency-tracking", "yes"),
    special(
        "latency-tracking-info-percentiles",
        Special::LatencyPercentiles,
        "50 99 99.9",
    ),
    int("busy-reply-threshold", 0, LONG_MAX, "5000").alias(&["lua-time-limit"]),
    // Replication (master side: replica links via SYNC/PSYNC; REPLICAOF only records
    // the role, as no master connection is made).
    int("repl-ping-replica-period", 1, INT_MAX, "10").alias(&["repl-ping-slave-period"]),
    int("repl-timeout", 1, INT_MAX, "60"),
    memory("repl-backlog-size", 1, LONG_MAX_U, "1mb"),
    int("repl-backlog-ttl", 0, INT_MAX, "3600"),
    boolean("repl-diskless-sync", "yes"),
    int("repl-diskless-sync-delay", 0, INT_MAX, "5"),
    int("repl-diskless-sync-max-replicas", 0, INT_MAX, "0"),
    boolean("repl-disable-tcp-nodelay", "no"),
    int("min-replicas-to-write", 0, INT_MAX, "0").alias(&["min-slaves-to-write"]),
    int("min-replicas-max-lag", 0, INT_MAX, "10").alias(&["min-slaves-max-lag"]),
    special("replicaof", Special::ReplicaOf, "")
        .alias(&["slaveof"])
        .flag(IMMUTABLE),
    boolean("replica-serve-stale-data", "yes").alias(&["slave-serve-stale-data"]),
    string("masterauth", "")
        .flag(ParamFlags::SENSITIVE)
        .only_default(REPLICA_NOT_YET),
    string("masteruser", "").only_default(REPLICA_NOT_YET),
    string("replica-announce-ip", "")
        .alias(&["slave-announce-ip"])
        .only_default(REPLICA_NOT_YET),
    int("replica-announce-port", 0, 65535, "0")
        .alias(&["slave-announce-port"])
        .only_default(REPLICA_NOT_YET),
    boolean("replica-announced", "yes").only_default(REPLICA_NOT_YET),
    boolean("replica-ignore-maxmemory", "yes")
        .alias(&["slave-ignore-maxmemory"])
        .only_default(REPLICA_NOT_YET),
    enumeration("repl-diskless-load", REPL_DISKLESS_LOAD_NAMES, "disabled")
        .only_default(REPLICA_NOT_YET),
    boolean("replica-ignore-disk-write-errors", "no").only_default(REPLICA_NOT_YET),
    boolean("replica-read-only", "yes").alias(&["slave-read-only"]),
    int("replica-priority", 0, INT_MAX, "100").alias(&["slave-priority"]),
    // Encoding thresholds.
    int("list-max-listpack-size", INT_MIN, INT_MAX, "-2").alias(&["list-max-ziplist-size"]),
    int("list-compress-depth", 0, INT_MAX, "0"),
    int("hash-max-listpack-entries", 0, LONG_MAX, "128").alias(&["hash-max-ziplist-entries"]),
    int("hash-max-listpack-value", 0, LONG_MAX, "64").alias(&["hash-max-ziplist-value"]),
    int("set-max-intset-entries", 0, LONG_MAX, "512"),
    int("set-max-listpack-entries", 0, LONG_MAX, "128"),
    int("set-max-listpack-value", 0, LONG_MAX, "64"),
    int("zset-max-listpack-entries", 0, LONG_MAX, "128").alias(&["zset-max-ziplist-entries"]),
    int("zset-max-listpack-value", 0, LONG_MAX, "64").alias(&["zset-max-ziplist-value"]),
    memory("hll-sparse-max-bytes", 0, LONG_MAX_U, "3000"),
    memory("stream-node-max-bytes", 0, LONG_MAX_U, "4096"),
    int("stream-node-max-entries", 0, LONG_MAX, "100"),
];

/// Every known parameter, in a stable order (the order CONFIG GET lists them).
pub static PARAMS: &[ConfigParam] = TABLE;

/// Directives Redis 7.0 still accepts in a config file and silently ignores:
/// (name, min argc, max argc) where argc includes the directive itself.
const DEPRECATED: &[(&str, usize, usize)] = &[
    ("list-max-ziplist-entries", 2, 2),
    ("list-max-ziplist-value", 2, 2),
    ("lua-replicate-commands", 2, 2),
];

const fn const_str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Position of a parameter in `TABLE`, resolved at compile time so the typed
/// accessors cost an index, not a name search.  A typo fails the build.
const fn param_index(name: &str) -> usize {
    let mut i = 0;
    while i < TABLE.len() {
        if const_str_eq(TABLE[i].name, name) {
            return i;
        }
        i += 1;
    }
    panic!("config parameter missing from TABLE")
}

const IDX_BIND: usize = param_index("bind");
const IDX_REPLICAOF: usize = param_index("replicaof");
const IDX_PORT: usize = param_index("port");
const IDX_TCP_BACKLOG: usize = param_index("tcp-backlog");
const IDX_UNIXSOCKET: usize = param_index("unixsocket");
const IDX_UNIXSOCKETPERM: usize = param_index("unixsocketperm");
const IDX_TIMEOUT: usize = param_index("timeout");
const IDX_TCP_KEEPALIVE: usize = param_index("tcp-keepalive");
const IDX_PROTECTED_MODE: usize = param_index("protected-mode");
const IDX_MAXCLIENTS: usize = param_index("maxclients");
const IDX_TRACKING_MAX_KEYS: usize = param_index("tracking-table-max-keys");
const IDX_DATABASES: usize = param_index("databases");
const IDX_DAEMONIZE: usize = param_index("daemonize");
const IDX_PIDFILE: usize = param_index("pidfile");
const IDX_LOGLEVEL: usize = param_index("loglevel");
const IDX_LOGFILE: usize = param_index("logfile");
const IDX_REQUIREPASS: usize = param_index("requirepass");
const IDX_HZ: usize = param_index("hz");
const IDX_DYNAMIC_HZ: usize = param_index("dynamic-hz");
const IDX_ENABLE_DEBUG: usize = param_index("enable-debug-command");
const IDX_ENABLE_PROTECTED: usize = param_index("enable-protected-configs");
const IDX_ENABLE_MODULE: usize = param_index("enable-module-command");
const IDX_THREADS: usize = param_index("threads");
const IDX_CPUS: usize = param_index("cpus");
const IDX_PROTO_MAX_BULK_LEN: usize = param_index("proto-max-bulk-len");
const IDX_QUERY_BUF_LIMIT: usize = param_index("client-query-buffer-limit");
const IDX_OBUF_LIMIT: usize = param_index("client-output-buffer-limit");
const IDX_MAXMEMORY: usize = param_index("maxmemory");
const IDX_MAXMEMORY_POLICY: usize = param_index("maxmemory-policy");
const IDX_MAXMEMORY_SAMPLES: usize = param_index("maxmemory-samples");
const IDX_LFU_LOG_FACTOR: usize = param_index("lfu-log-factor");
const IDX_LFU_DECAY_TIME: usize = param_index("lfu-decay-time");
const IDX_ACTIVE_EXPIRE_EFFORT: usize = param_index("active-expire-effort");
const IDX_SAVE: usize = param_index("save");
const IDX_DBFILENAME: usize = param_index("dbfilename");
const IDX_DIR: usize = param_index("dir");
const IDX_APPENDONLY: usize = param_index("appendonly");
const IDX_APPENDFILENAME: usize = param_index("appendfilename");
const IDX_APPENDFSYNC: usize = param_index("appendfsync");
const IDX_NOTIFY: usize = param_index("notify-keyspace-events");
const IDX_SLOWLOG_SLOWER: usize = param_index("slowlog-log-slower-than");
const IDX_SLOWLOG_LEN: usize = param_index("slowlog-max-len");
const IDX_LATENCY_THRESHOLD: usize = param_index("latency-monitor-threshold");
const IDX_LATENCY_TRACKING: usize = param_index("latency-tracking");
const IDX_PERCENTILES: usize = param_index("latency-tracking-info-percentiles");
const IDX_BUSY_REPLY: usize = param_index("busy-reply-threshold");
const IDX_MIN_REPLICAS: usize = param_index("min-replicas-to-write");
const IDX_MIN_REPLICAS_LAG: usize = param_index("min-replicas-max-lag");
const IDX_SERVE_STALE: usize = param_index("replica-serve-stale-data");
const IDX_REPLICA_RO: usize = param_index("replica-read-only");

/// Looks a parameter up by name or alias, case-insensitively.
pub fn lookup_param(name: &[u8]) -> Option<&'static ConfigParam> {
    lookup_entry(name).and_then(|(idx, _)| PARAMS.get(idx))
}

/// Every addressable name (canonical names followed by their aliases).
fn entries() -> impl Iterator<Item = (usize, &'static str)> {
    PARAMS.iter().enumerate().flat_map(|(idx, p)| {
        std::iter::once(p.name)
            .chain(p.aliases.iter().copied())
            .map(move |n| (idx, n))
    })
}

/// Resolves a user-supplied name to (parameter index, the entry name it hit).
/// Redis registers aliases as entries of their own, and error messages and
/// duplicate detection work on the entry, so both are returned.
fn lookup_entry(name: &[u8]) -> Option<(usize, &'static str)> {
    entries().find(|(_, entry)| entry.as_bytes().eq_ignore_ascii_case(name))
}

/* ------------------------------------------------------------------------ */
/* Values: parsing and rendering.                                           */
/* ------------------------------------------------------------------------ */

#[derive(Clone, Debug, PartialEq)]
enum Value {
    Bool(bool),
    Int(i64),
    Mem(u64),
    Percent(u64),
    Enum(usize),
    Str(String),
    List(Vec<String>),
    Save(Vec<SavePoint>),
    Obuf([ObufLimit; 3]),
    Flags(u32),
    Floats(Vec<f64>),
    Cpus(Vec<usize>),
    Octal(i64),
}

/// Parses already-split arguments for `p`.  `current` is needed only by
/// client-output-buffer-limit, which updates just the classes it names.
fn parse_value(p: &ConfigParam, args: &[String], current: Option<&Value>) -> Result<Value, String> {
    let value = parse_value_of_kind(p, args, current)?;
    match p.not_yet {
        Some(why) if value != default_value(p) => Err(why.to_string()),
        _ => Ok(value),
    }
}

fn parse_value_of_kind(
    p: &ConfigParam,
    args: &[String],
    current: Option<&Value>,
) -> Result<Value, String> {
    match p.kind {
        ParamKind::Bool => parse_bool(single(args)?),
        ParamKind::Int { min, max } => parse_int(single(args)?, min, max),
        ParamKind::Memory { min, max, percent } => parse_memory(single(args)?, min, max, percent),
        ParamKind::Enum(names) => parse_enum(single(args)?, names),
        ParamKind::String => Ok(Value::Str(single(args)?.to_string())),
        ParamKind::Special(kind) => parse_special(p, kind, args, current),
    }
}

fn single(args: &[String]) -> Result<&str, String> {
    match args {
        [one] => Ok(one),
        _ => Err("wrong number of arguments".to_string()),
    }
}

fn parse_bool(s: &str) -> Result<Value, String> {
    if s.eq_ignore_ascii_case("yes") {
        Ok(Value::Bool(true))
    } else if s.eq_ignore_ascii_case("no") {
        Ok(Value::Bool(false))
    } else {
        Err("argument must be 'yes' or 'no'".to_string())
    }
}

fn parse_int(s: &str, min: i64, max: i64) -> Result<Value, String> {
    let v = string2ll(s.as_bytes()).ok_or("argument couldn't be parsed into an integer")?;
    if v < min || v > max {
        return Err(format!(
            "argument must be between {min} and {max} inclusive"
        ));
    }
    Ok(Value::Int(v))
}

fn parse_memory(s: &str, min: u64, max: u64, percent: bool) -> Result<Value, String> {
    if let Some(v) = memtoull(s.as_bytes()) {
        if v < min || v > max {
            return Err(format!(
                "argument must be between {min} and {max} inclusive"
            ));
        }
        return Ok(Value::Mem(v));
    }
    if percent {
        if let Some(pct) = parse_percent(s) {
            if pct > 100 {
                return Err("percentage argument must be less or equal to 100".to_string());
            }
            return Ok(Value::Percent(pct));
        }
        return Err("argument must be a memory or percent value".to_string());
    }
    Err("argument must be a memory value".to_string())
}

/// `N%` with N a non-negative string2ll integer.
fn parse_percent(s: &str) -> Option<u64> {
    let digits = s.strip_suffix('%')?;
    let v = string2ll(digits.as_bytes())?;
    u64::try_from(v).ok()
}

fn parse_enum(s: &str, names: &[&str]) -> Result<Value, String> {
    names
        .iter()
        .position(|n| n.eq_ignore_ascii_case(s))
        .map(Value::Enum)
        .ok_or_else(|| {
            format!(
                "argument(s) must be one of the following: {}",
                names.join(", ")
            )
        })
}

fn parse_special(
    p: &ConfigParam,
    kind: Special,
    args: &[String],
    current: Option<&Value>,
) -> Result<Value, String> {
    match kind {
        Special::Bind => parse_bind(args),
        Special::Save => parse_save(args).map(Value::Save),
        Special::ClientOutputBufferLimit => parse_obuf(args, current),
        Special::NotifyKeyspaceEvents => parse_notify(single(args)?),
        Special::LatencyPercentiles => parse_percentiles(args),
        Special::Dir => parse_dir(single(args)?),
        Special::FileName => parse_file_name(p.name, single(args)?),
        Special::CpuList => parse_cpus_value(single(args)?),
        Special::ReplicaOf => parse_replicaof(args),
        Special::Octal => parse_octal(single(args)?),
        Special::ProcTitleTemplate => parse_proc_title_template(single(args)?),
        Special::OomScoreAdjValues => parse_oom_values(args),
        Special::ShutdownFlags => parse_shutdown_flags(args),
        Special::AppendOnly => match parse_bool(single(args)?)? {
            Value::Bool(true) => Err(APPENDONLY_NOT_YET.to_string()),
            v => Ok(v),
        },
    }
}

fn parse_octal(s: &str) -> Result<Value, String> {
    match i64::from_str_radix(s, 8) {
        Ok(v) if (0..=0o777).contains(&v) && !s.starts_with(['+', '-']) => Ok(Value::Octal(v)),
        Ok(_) => Err("argument must be between 0 and 777 inclusive".to_string()),
        Err(_) => Err("argument couldn't be parsed as an octal number".to_string()),
    }
}

/// The placeholders Redis 7.0 expands in `proc-title-template`.
pub const PROC_TITLE_PLACEHOLDERS: &[&str] = &[
    "title",
    "listen-addr",
    "server-mode",
    "port",
    "tls-port",
    "unixsocket",
    "config-file",
];

/// Redis's validateProcTitleTemplate: every `{` opens a known placeholder that is
/// closed, and the expanded title is not empty.
fn parse_proc_title_template(s: &str) -> Result<Value, String> {
    let invalid = || "template format is invalid or contains unknown variables".to_string();
    let mut rest = s;
    let mut literal = String::new();
    while let Some(open) = rest.find('{') {
        literal.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or_else(invalid)?;
        if !PROC_TITLE_PLACEHOLDERS.contains(&&after[..close]) {
            return Err(invalid());
        }
        literal.push('x');
        rest = &after[close + 1..];
    }
    if rest.contains('}') {
        return Err(invalid());
    }
    literal.push_str(rest);
    if literal.trim().is_empty() {
        return Err(invalid());
    }
    Ok(Value::Str(s.to_string()))
}

fn parse_oom_values(args: &[String]) -> Result<Value, String> {
    let [a, b, c] = args else {
        return Err("wrong number of arguments".to_string());
    };
    let mut out = Vec::with_capacity(3);
    for v in [a, b, c] {
        match string2ll(v.as_bytes()) {
            Some(n) if (-2000..=2000).contains(&n) => out.push(n.to_string()),
            _ => {
                return Err(
                    "Invalid oom-score-adj-values, elements must be between -2000 and 2000."
                        .to_string(),
                )
            }
        }
    }
    Ok(Value::List(out))
}

/// The words of `shutdown-on-sig*`, in the order CONFIG GET lists them.
const SHUTDOWN_FLAG_NAMES: &[&str] = &["save", "nosave", "now", "force"];

/// Tessera does not save on shutdown yet (the persistence issue), so asking a
/// signal to save is refused; `default` (which saves when save points are set in
/// Redis) is accepted and logged at start as not saving.
fn parse_shutdown_flags(args: &[String]) -> Result<Value, String> {
    const ONE_OF: &str =
        "argument(s) must be one of the following: default, save, nosave, now, force";
    if args.is_empty() {
        return Err(ONE_OF.to_string());
    }
    let mut seen = [false; 4];
    for a in args {
        if a.eq_ignore_ascii_case("default") && args.len() == 1 {
            return Ok(Value::List(vec!["default".to_string()]));
        }
        match SHUTDOWN_FLAG_NAMES
            .iter()
            .position(|n| n.eq_ignore_ascii_case(a))
        {
            Some(i) => seen[i] = true,
            None => {
                return Err(
                    "argument(s) must be one of the following: default, save, nosave, now, force"
                        .to_string(),
                )
            }
        }
    }
    if seen[0] && seen[1] {
        return Err("shutdown options SAVE and NOSAVE can't be used simultaneously".to_string());
    }
    if seen[0] {
        return Err("Tessera does not save on shutdown yet: `save` is refused".to_string());
    }
    let words: Vec<String> = SHUTDOWN_FLAG_NAMES
        .iter()
        .zip(seen)
        .filter(|(_, on)| *on)
        .map(|(n, _)| n.to_string())
        .collect();
    if words.is_empty() {
        return Ok(Value::List(vec!["default".to_string()]));
    }
    Ok(Value::List(words))
}

/// Directives Redis 7.0 has that are not parameters and that Tessera cannot honour
/// yet: refused with the reason rather than "Bad directive", so a config written for
/// Redis says what is missing.
fn directive_not_yet(name: &str) -> Option<&'static str> {
    const DIRECTIVES: &[(&str, &str)] = &[
        ("user", ACL_NOT_YET),
        (
            "rename-command",
            "rename-command is not supported by Tessera yet",
        ),
        ("loadmodule", "Tessera does not load Redis modules"),
        ("sentinel", "Tessera does not run as Redis Sentinel"),
    ];
    DIRECTIVES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, why)| *why)
}

/// Why `appendonly yes` is refused, in the config file, on the command line and
/// in CONFIG SET.
const APPENDONLY_NOT_YET: &str =
    "appendonly yes is not available yet: Tessera does not write an append-only file (AOF)";

/// `replicaof host port` / `replicaof no one`, with Redis's errors.
fn parse_replicaof(args: &[String]) -> Result<Value, String> {
    if is_single_empty(args) {
        return Ok(Value::List(Vec::new()));
    }
    let [host, port] = args else {
        return Err("wrong number of arguments".to_string());
    };
    if host.eq_ignore_ascii_case("no") && port.eq_ignore_ascii_case("one") {
        return Ok(Value::List(Vec::new()));
    }
    match port.parse::<u16>() {
        Ok(n) => Ok(Value::List(vec![host.clone(), n.to_string()])),
        Err(_) => Err("Invalid master port".to_string()),
    }
}

/// A lone empty argument means "none" for several multi-arg parameters, so
/// that `--save ""` / `CONFIG SET bind ""` clear them.
fn is_single_empty(args: &[String]) -> bool {
    matches!(args, [one] if one.is_empty())
}

fn parse_bind(args: &[String]) -> Result<Value, String> {
    if args.len() > CONFIG_BINDADDR_MAX {
        return Err("Too many bind addresses specified.".to_string());
    }
    if is_single_empty(args) {
        return Ok(Value::List(Vec::new()));
    }
    Ok(Value::List(args.to_vec()))
}

fn parse_save(args: &[String]) -> Result<Vec<SavePoint>, String> {
    const ERR: &str = "Invalid save parameters";
    let args = if is_single_empty(args) { &[] } else { args };
    if !args.len().is_multiple_of(2) {
        return Err(ERR.to_string());
    }
    let mut points = Vec::with_capacity(args.len() / 2);
    for pair in args.chunks(2) {
        let (seconds, seconds_ok) = strtoll(pair[0].as_bytes());
        let (changes, changes_ok) = strtoll(pair[1].as_bytes());
        if !seconds_ok || !changes_ok || seconds < 1 || changes < 0 {
            return Err(ERR.to_string());
        }
        // Redis keeps `changes` in a C int.
        let changes = i64::from(changes as i32);
        points.push(SavePoint { seconds, changes });
    }
    Ok(points)
}

fn client_class(name: &str) -> Option<ClientClass> {
    match name.to_ascii_lowercase().as_str() {
        "normal" => Some(ClientClass::Normal),
        "slave" | "replica" => Some(ClientClass::Replica),
        "pubsub" => Some(ClientClass::Pubsub),
        // "master" is a known class in Redis but has no configurable limit.
        _ => None,
    }
}

fn parse_obuf(args: &[String], current: Option<&Value>) -> Result<Value, String> {
    if !args.len().is_multiple_of(4) {
        return Err("Wrong number of arguments in buffer limit configuration.".to_string());
    }
    let mut limits = match current {
        Some(Value::Obuf(l)) => *l,
        _ => [ObufLimit::default(); 3],
    };
    for spec in args.chunks(4) {
        let class = client_class(&spec[0])
            .ok_or("Invalid client class specified in buffer limit configuration.")?;
        limits[class as usize] = parse_obuf_limit(&spec[1], &spec[2], &spec[3])?;
    }
    Ok(Value::Obuf(limits))
}

fn parse_obuf_limit(hard: &str, soft: &str, secs: &str) -> Result<ObufLimit, String> {
    const ERR: &str = "Error in hard, soft or soft_seconds setting in buffer limit configuration.";
    let (seconds, full) = strtoll(secs.as_bytes());
    // Redis stores soft_seconds in a C int before the sign check.
    let seconds = seconds as i32;
    match (memtoull(hard.as_bytes()), memtoull(soft.as_bytes())) {
        (Some(h), Some(s)) if full && seconds >= 0 => Ok(ObufLimit {
            hard_limit_bytes: h,
            soft_limit_bytes: s,
            soft_limit_seconds: i64::from(seconds),
        }),
        _ => Err(ERR.to_string()),
    }
}

/// Notification class letters in Redis's order.
const NOTIFY_LETTERS: &[(char, u32)] = &[
    ('g', notify::GENERIC),
    ('$', notify::STRING),
    ('l', notify::LIST),
    ('s', notify::SET),
    ('h', notify::HASH),
    ('z', notify::ZSET),
    ('x', notify::EXPIRED),
    ('e', notify::EVICTED),
    ('t', notify::STREAM),
    ('d', notify::MODULE),
    ('n', notify::NEW),
];

fn parse_notify(s: &str) -> Result<Value, String> {
    let mut flags = 0;
    for c in s.chars() {
        flags |= match c {
            'A' => notify::ALL,
            'K' => notify::KEYSPACE,
            'E' => notify::KEYEVENT,
            'm' => notify::KEY_MISS,
            _ => NOTIFY_LETTERS
                .iter()
                .find(|(l, _)| *l == c)
                .map(|(_, f)| *f)
                .ok_or("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.")?,
        };
    }
    Ok(Value::Flags(flags))
}

fn render_notify(flags: u32) -> String {
    let mut out = String::new();
    if flags & notify::ALL == notify::ALL {
        out.push('A');
    } else {
        for (letter, bit) in NOTIFY_LETTERS {
            if flags & bit != 0 {
                out.push(*letter);
            }
        }
    }
    for (letter, bit) in [
        ('K', notify::KEYSPACE),
        ('E', notify::KEYEVENT),
        ('m', notify::KEY_MISS),
    ] {
        if flags & bit != 0 {
            out.push(letter);
        }
    }
    // Like Redis 7.0, `n` is not shown next to `A` (it is not part of `A`
    // but the renderer only emits it in the per-class branch); the flag
    // itself is kept.
    out
}

fn parse_percentiles(args: &[String]) -> Result<Value, String> {
    if is_single_empty(args) {
        return Ok(Value::Floats(Vec::new()));
    }
    let mut out = Vec::with_capacity(args.len());
    for a in args {
        let v = string2d(a).ok_or("Invalid latency-tracking-info-percentiles parameters")?;
        if !(0.0..=100.0).contains(&v) {
            return Err(
                "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
                    .to_string(),
            );
        }
        out.push(v);
    }
    Ok(Value::Floats(out))
}

/// Renders like Redis: printf("%f") with trailing zeros (and dot) removed.
fn render_double(v: f64) -> String {
    let s = format!("{v:.6}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Redis chdir()s on `dir`; Tessera keeps the process cwd and stores the
/// absolute path instead (shard threads share the cwd, and tests run in
/// parallel), so persistence code must join paths onto `Config::dir()`.
fn parse_dir(s: &str) -> Result<Value, String> {
    let path = fs::canonicalize(s).map_err(|e| io_error_text(&e))?;
    if !path.is_dir() {
        return Err("Not a directory".to_string());
    }
    Ok(Value::Str(path.to_string_lossy().into_owned()))
}

fn parse_file_name(name: &str, s: &str) -> Result<Value, String> {
    if s.contains('/') {
        return Err(format!("{name} can't be a path, just a filename"));
    }
    Ok(Value::Str(s.to_string()))
}

fn parse_cpus_value(s: &str) -> Result<Value, String> {
    if s.trim().is_empty() {
        return Ok(Value::Cpus(Vec::new()));
    }
    parse_cpu_list(s).map(Value::Cpus)
}

/// Parses a CPU list such as `0-3,8` into sorted, de-duplicated CPU ids.
/// Reversed ranges, empty elements and ids above `MAX_CPU_ID` are errors.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let invalid = |why: String| format!("invalid CPU list '{s}': {why}");
    let trimmed = s.trim();
    if trimmed.is_empty() {
        return Err(invalid("empty list".to_string()));
    }
    // A bitmap rather than expanding ranges into a Vec keeps `0-65535`
    // repeated many times cheap.
    let mut seen = vec![false; MAX_CPU_ID + 1];
    for part in trimmed.split(',') {
        let (lo, hi) = parse_cpu_range(part.trim()).map_err(invalid)?;
        for slot in &mut seen[lo..=hi] {
            *slot = true;
        }
    }
    Ok(seen
        .iter()
        .enumerate()
        .filter_map(|(cpu, &on)| on.then_some(cpu))
        .collect())
}

fn parse_cpu_range(part: &str) -> Result<(usize, usize), String> {
    if part.is_empty() {
        return Err("empty element".to_string());
    }
    let (lo, hi) = match part.split_once('-') {
        Some((a, b)) => (parse_cpu_id(a.trim())?, parse_cpu_id(b.trim())?),
        None => {
            let id = parse_cpu_id(part)?;
            (id, id)
        }
    };
    if lo > hi {
        return Err(format!("range '{part}' is reversed"));
    }
    Ok((lo, hi))
}

fn parse_cpu_id(t: &str) -> Result<usize, String> {
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("'{t}' is not a CPU number"));
    }
    match t.parse::<usize>() {
        Ok(id) if id <= MAX_CPU_ID => Ok(id),
        _ => Err(format!("CPU '{t}' exceeds the maximum of {MAX_CPU_ID}")),
    }
}

/// `0,1,2,3,8` -> `0-3,8`.
fn render_cpus(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

/// CONFIG GET rendering.
fn render(p: &ConfigParam, v: &Value) -> String {
    match v {
        Value::Bool(b) => if *b { "yes" } else { "no" }.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Mem(m) => m.to_string(),
        Value::Percent(pct) => format!("{pct}%"),
        Value::Enum(i) => match p.kind {
            ParamKind::Enum(names) => names.get(*i).copied().unwrap_or("unknown").to_string(),
            _ => "unknown".to_string(),
        },
        Value::Str(s) => s.clone(),
        Value::List(items) => items.join(" "),
        Value::Save(points) => render_save(points),
        Value::Obuf(limits) => render_obuf(limits),
        Value::Flags(f) => render_notify(*f),
        Value::Floats(fs) => fs
            .iter()
            .map(|f| render_double(*f))
            .collect::<Vec<_>>()
            .join(" "),
        Value::Cpus(c) => render_cpus(c),
        Value::Octal(v) => format!("{v:o}"),
    }
}

fn render_save(points: &[SavePoint]) -> String {
    points
        .iter()
        .map(|p| format!("{} {}", p.seconds, p.changes))
        .collect::<Vec<_>>()
        .join(" ")
}

fn render_obuf(limits: &[ObufLimit; 3]) -> String {
    ["normal", "slave", "pubsub"]
        .iter()
        .zip(limits.iter())
        .map(|(name, l)| {
            format!(
                "{name} {} {} {}",
                l.hard_limit_bytes, l.soft_limit_bytes, l.soft_limit_seconds
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Arguments for parsing a default: multi-arg defaults are written as one
/// config line, single-arg ones are the literal value.
fn default_args(p: &ConfigParam) -> Vec<String> {
    if p.kind.is_multi_arg() && !p.default.is_empty() {
        split_args_lossy(p.default).unwrap_or_default()
    } else {
        vec![p.default.to_string()]
    }
}

fn default_value(p: &ConfigParam) -> Value {
    // The table is covered by a unit test that every default parses; the
    // fallback only keeps a broken entry from taking the server down.
    parse_value_of_kind(p, &default_args(p), None)
        .unwrap_or_else(|_| Value::Str(p.default.to_string()))
}

/* ------------------------------------------------------------------------ */
/* Low-level parsers mirroring Redis's C helpers.                           */
/* ------------------------------------------------------------------------ */

/// Redis's `string2d` (strtod that must consume everything, no leading
/// space, no NaN).  Rust's float grammar differs only in exotic corners
/// (hex floats), which the 0..100 range check rejects anyway.
fn string2d(s: &str) -> Option<f64> {
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    s.parse::<f64>().ok().filter(|v| !v.is_nan())
}

/// Redis's `sdssplitlen(value, " ")` as used by CONFIG SET for multi-arg
/// parameters: an empty value gives no arguments, and repeated spaces give
/// empty arguments (which then fail validation, as in Redis).
fn split_spaces(value: &str) -> Vec<String> {
    if value.is_empty() {
        Vec::new()
    } else {
        value.split(' ').map(str::to_string).collect()
    }
}

use crate::util::io_error_text;

/* ------------------------------------------------------------------------ */
/* The runtime store.                                                       */
/* ------------------------------------------------------------------------ */

/// Error from one directive: plain errors get the caller's line context,
/// fatal ones (from an included file) already carry their own.
enum DirectiveError {
    Plain(String),
    Fatal(String),
}

impl From<String> for DirectiveError {
    fn from(e: String) -> Self {
        DirectiveError::Plain(e)
    }
}

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
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}

fn fatal_at(line_number: usize, line: &str, err: &str) -> String {
    format!(
        "*** FATAL CONFIG FILE ERROR (Redis {REDIS_VERSION}) ***\n\
         Reading the configuration file, at line {line_number}\n\
         >>> '{line}'\n\
         {err}"
    )
}

fn fatal(err: &str) -> String {
    format!("*** FATAL CONFIG FILE ERROR (Redis {REDIS_VERSION}) ***\n{err}")
}

/// CONFIG SET port: Redis rebinds, and fails with this when the port is taken.
/// Tessera cannot move its listeners, so a free port still ends as immutable.
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
        }
    }

    /// Startup entry point: `cli_args` is argv without argv[0].  Loads the
    /// config file named by the first positional argument (if any), stdin
    /// when an argument is `-`, then the command-line options.  The error is
    /// the complete message for stderr (the caller exits with status 1).
    /// `--help`/`-h` and `--version`/`-v` print and exit the process, like
    /// redis-server and clap-based tools do.
    pub fn load(cli_args: impl Iterator<Item = String>) -> Result<Config, String> {
        let args: Vec<String> = cli_args.collect();
        exit_on_help_or_version(&args);
        // Values are judged by the config loader alone, so a bad one gets redis-server's
        // exact error text (clap's view is for --help and would word it its own way).
        let parsed = split_command_line(&args);
        let mut config = Config::new();
        let mut text = String::new();
        if let Some(path) = parsed.config_file.as_deref().map(PathBuf::from) {
            text.push_str(&read_config_source(&path.to_string_lossy())?);
            config.config_file = Some(std::path::absolute(&path).unwrap_or(path));
        }
        if parsed.from_stdin {
            let mut stdin = String::new();
            io::stdin()
                .read_to_string(&mut stdin)
                .map_err(|e| format!("Can't read config from stdin: {}", io_error_text(&e)))?;
            text.push_str(&stdin);
        }
        text.push('\n');
        text.push_str(&parsed.options);
        config.load_str(&text)?;
        config.check_logfile()?;
        Ok(config)
    }

    /// Applies redis.conf-formatted text (the same path as a config file;
    /// `include` paths are relative to the process cwd).  Errors are the
    /// full "FATAL CONFIG FILE ERROR" text with line number and line.
    pub fn load_str(&mut self, text: &str) -> Result<(), String> {
        self.load_text(text, 0)
    }

    fn load_text(&mut self, text: &str, depth: usize) -> Result<(), String> {
        for (i, raw) in text.split('\n').enumerate() {
            let line = raw.trim_matches([' ', '\t', '\r', '\n']);
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some(mut argv) = split_args_lossy(line) else {
                return Err(fatal_at(
                    i + 1,
                    line,
                    "Unbalanced quotes in configuration line",
                ));
            };
            if argv.is_empty() {
                continue;
            }
            let name = argv.remove(0).to_ascii_lowercase();
            match self.apply_directive_at(&name, &argv, depth) {
                Ok(()) => {}
                Err(DirectiveError::Plain(e)) => return Err(fatal_at(i + 1, line, &e)),
                Err(DirectiveError::Fatal(e)) => return Err(e),
            }
        }
        Ok(())
    }

    /// Applies one config-file directive (`name` is case-insensitive, `args`
    /// are the words after it).  File semantics apply: immutable parameters
    /// may be set, the first `save` line replaces the default and later ones
    /// append, and a multi-arg parameter given one argument has it split
    /// (`--save "900 1 300 10"`).  Errors are Redis's bare messages, e.g.
    /// "Bad directive or wrong number of arguments".
    pub fn apply_directive(&mut self, name: &str, args: &[String]) -> Result<(), String> {
        match self.apply_directive_at(name, args, 0) {
            Ok(()) => Ok(()),
            Err(DirectiveError::Plain(e) | DirectiveError::Fatal(e)) => Err(e),
        }
    }

    fn apply_directive_at(
        &mut self,
        name: &str,
        args: &[String],
        depth: usize,
    ) -> Result<(), DirectiveError> {
        if let Some((idx, _)) = lookup_entry(name.as_bytes()) {
            return self
                .apply_param_directive(idx, args)
                .map_err(DirectiveError::Plain);
        }
        let argc = args.len() + 1;
        let deprecated = DEPRECATED
            .iter()
            .any(|(n, lo, hi)| n.eq_ignore_ascii_case(name) && (*lo..=*hi).contains(&argc));
        if deprecated {
            return Ok(());
        }
        if let Some(why) = directive_not_yet(name) {
            return Err(why.to_string().into());
        }
        match args {
            [path] if name.eq_ignore_ascii_case("include") => self.include(path, depth),
            _ => Err("Bad directive or wrong number of arguments"
                .to_string()
                .into()),
        }
    }

    fn apply_param_directive(&mut self, idx: usize, args: &[String]) -> Result<(), String> {
        let p = PARAMS
            .get(idx)
            .ok_or("Bad directive or wrong number of arguments")?;
        let multi = p.kind.is_multi_arg();
        if !multi && args.len() != 1 {
            return Err("wrong number of arguments".to_string());
        }
        let split;
        let args = match args {
            // Redis treats a failed re-split as "no arguments".
            [one] if multi && !one.is_empty() => {
                split = split_args_lossy(one).unwrap_or_default();
                &split[..]
            }
            _ => args,
        };
        let value = parse_value(p, args, self.values.get(idx))?;
        self.store_from_file(idx, value);
        self.version += 1;
        Ok(())
    }

    fn store_from_file(&mut self, idx: usize, value: Value) {
        if let (true, Value::Save(points)) = (idx == IDX_SAVE, &value) {
            // `save ""` clears every point, wherever it comes; other lines append.
            if self.save_loaded && !points.is_empty() {
                if let Some(Value::Save(current)) = self.values.get_mut(idx) {
                    current.extend_from_slice(points);
                }
                return;
            }
            self.save_loaded = true;
        }
        store(&mut self.values, idx, value);
    }

    fn include(&mut self, path: &str, depth: usize) -> Result<(), DirectiveError> {
        if depth >= MAX_INCLUDE_DEPTH {
            return Err(DirectiveError::Plain(format!(
                "Too many nested include directives (limit {MAX_INCLUDE_DEPTH})"
            )));
        }
        let text = read_config_source(path).map_err(DirectiveError::Fatal)?;
        self.load_text(&text, depth + 1)
            .map_err(DirectiveError::Fatal)
    }

    /// Redis refuses to start when the log file cannot be opened.
    fn check_logfile(&self) -> Result<(), String> {
        let logfile = self.logfile();
        if logfile.is_empty() {
            return Ok(());
        }
        fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(logfile)
            .map(drop)
            .map_err(|e| fatal(&format!("Can't open the log file: {}", io_error_text(&e))))
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
            if flags.contains(ParamFlags::FIXED_AT_START) {
                if self.render_at(idx).as_bytes() == value {
                    continue;
                }
                if entry == "port" {
                    port_available(value).map_err(|e| set_failed(&shown, &e))?;
                }
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

    /* -- typed accessors --------------------------------------------------- */

    fn value(&self, idx: usize) -> Option<&Value> {
        self.values.get(idx)
    }

    fn int_at(&self, idx: usize) -> i64 {
        match self.value(idx) {
            Some(Value::Int(v)) => *v,
            _ => 0,
        }
    }

    fn uint_at(&self, idx: usize) -> u64 {
        u64::try_from(self.int_at(idx)).unwrap_or(0)
    }

    fn mem_at(&self, idx: usize) -> u64 {
        match self.value(idx) {
            Some(Value::Mem(v)) => *v,
            _ => 0,
        }
    }

    fn bool_at(&self, idx: usize) -> bool {
        matches!(self.value(idx), Some(Value::Bool(true)))
    }

    fn enum_at(&self, idx: usize) -> usize {
        match self.value(idx) {
            Some(Value::Enum(i)) => *i,
            _ => 0,
        }
    }

    fn str_at(&self, idx: usize) -> &str {
        match self.value(idx) {
            Some(Value::Str(s)) => s,
            _ => "",
        }
    }

    pub fn port(&self) -> u16 {
        u16::try_from(self.int_at(IDX_PORT)).unwrap_or(6379)
    }

    /// Addresses to listen on (may be empty: no TCP listener).
    /// The master the config file names (`replicaof host port`), if any.
    pub fn replicaof(&self) -> Option<(String, u16)> {
        match self.value(IDX_REPLICAOF) {
            Some(Value::List(l)) => match l.as_slice() {
                [host, port] => port.parse().ok().map(|p| (host.clone(), p)),
                _ => None,
            },
            _ => None,
        }
    }

    pub fn bind(&self) -> &[String] {
        match self.value(IDX_BIND) {
            Some(Value::List(l)) => l,
            _ => &[],
        }
    }

    pub fn tcp_backlog(&self) -> u32 {
        u32::try_from(self.int_at(IDX_TCP_BACKLOG)).unwrap_or(511)
    }

    /// Unix socket path, if configured.
    pub fn unixsocket(&self) -> Option<&str> {
        Some(self.str_at(IDX_UNIXSOCKET)).filter(|s| !s.is_empty())
    }

    /// Idle client timeout in seconds (0 = never).
    pub fn timeout(&self) -> u64 {
        self.uint_at(IDX_TIMEOUT)
    }

    pub fn tcp_keepalive(&self) -> u64 {
        self.uint_at(IDX_TCP_KEEPALIVE)
    }

    pub fn protected_mode(&self) -> bool {
        self.bool_at(IDX_PROTECTED_MODE)
    }

    pub fn tracking_table_max_keys(&self) -> u64 {
        u64::try_from(self.int_at(IDX_TRACKING_MAX_KEYS)).unwrap_or(0)
    }

    pub fn maxclients(&self) -> usize {
        usize::try_from(self.int_at(IDX_MAXCLIENTS)).unwrap_or(10_000)
    }

    pub fn databases(&self) -> usize {
        usize::try_from(self.int_at(IDX_DATABASES)).unwrap_or(16)
    }

    pub fn daemonize(&self) -> bool {
        self.bool_at(IDX_DAEMONIZE)
    }

    /// `unixsocketperm`: the socket file's mode (0 = leave the umask's).
    pub fn unixsocketperm(&self) -> u32 {
        match self.value(IDX_UNIXSOCKETPERM) {
            Some(Value::Octal(v)) => *v as u32,
            _ => 0,
        }
    }

    pub fn always_show_logo(&self) -> bool {
        self.bool_at(const { param_index("always-show-logo") })
    }

    pub fn syslog_enabled(&self) -> bool {
        self.bool_at(const { param_index("syslog-enabled") })
    }

    /// `syslog-ident` and `syslog-facility`.
    pub fn syslog(&self) -> (&str, &str) {
        let facility = SYSLOG_FACILITY_NAMES
            .get(self.enum_at(const { param_index("syslog-facility") }))
            .copied()
            .unwrap_or("local0");
        (self.str_at(const { param_index("syslog-ident") }), facility)
    }

    pub fn set_proc_title(&self) -> bool {
        self.bool_at(const { param_index("set-proc-title") })
    }

    pub fn proc_title_template(&self) -> &str {
        self.str_at(const { param_index("proc-title-template") })
    }

    pub fn disable_thp(&self) -> bool {
        self.bool_at(const { param_index("disable-thp") })
    }

    pub fn crash_log_enabled(&self) -> bool {
        self.bool_at(const { param_index("crash-log-enabled") })
    }

    pub fn use_exit_on_panic(&self) -> bool {
        self.bool_at(const { param_index("use-exit-on-panic") })
    }

    /// `oom-score-adj` (index into OOM_SCORE_ADJ_NAMES) and the three values
    /// (master, replica, background child).
    pub fn oom_score_adj(&self) -> (usize, [i64; 3]) {
        let mut values = [0, 200, 800];
        if let Some(Value::List(items)) = self.value(const { param_index("oom-score-adj-values") })
        {
            for (slot, v) in values.iter_mut().zip(items) {
                *slot = v.parse().unwrap_or(0);
            }
        }
        (self.enum_at(const { param_index("oom-score-adj") }), values)
    }

    pub fn pidfile(&self) -> Option<&str> {
        Some(self.str_at(IDX_PIDFILE)).filter(|s| !s.is_empty())
    }

    pub fn loglevel(&self) -> LogLevel {
        LogLevel::ALL
            .get(self.enum_at(IDX_LOGLEVEL))
            .copied()
            .unwrap_or(LogLevel::Notice)
    }

    /// Log file path; empty means standard output.
    pub fn logfile(&self) -> &str {
        self.str_at(IDX_LOGFILE)
    }

    /// None when no password is set (empty `requirepass`).
    pub fn requirepass(&self) -> Option<&str> {
        Some(self.str_at(IDX_REQUIREPASS)).filter(|s| !s.is_empty())
    }

    /// Server cron frequency, already clamped to 1..=500 like Redis.
    pub fn hz(&self) -> u32 {
        u32::try_from(self.int_at(IDX_HZ)).unwrap_or(10)
    }

    pub fn dynamic_hz(&self) -> bool {
        self.bool_at(IDX_DYNAMIC_HZ)
    }

    pub fn enable_debug_command(&self) -> ProtectedAction {
        ProtectedAction::ALL
            .get(self.enum_at(IDX_ENABLE_DEBUG))
            .copied()
            .unwrap_or(ProtectedAction::No)
    }

    pub fn enable_module_command(&self) -> ProtectedAction {
        ProtectedAction::ALL
            .get(self.enum_at(IDX_ENABLE_MODULE))
            .copied()
            .unwrap_or(ProtectedAction::No)
    }

    pub fn enable_protected_configs(&self) -> ProtectedAction {
        ProtectedAction::ALL
            .get(self.enum_at(IDX_ENABLE_PROTECTED))
            .copied()
            .unwrap_or(ProtectedAction::No)
    }

    /// Shard thread count; None means "decide automatically".
    pub fn threads(&self) -> Option<usize> {
        usize::try_from(self.int_at(IDX_THREADS))
            .ok()
            .filter(|&n| n > 0)
    }

    /// CPUs to pin shard threads to; empty means no pinning.
    pub fn cpus(&self) -> &[usize] {
        match self.value(IDX_CPUS) {
            Some(Value::Cpus(c)) => c,
            _ => &[],
        }
    }

    pub fn proto_max_bulk_len(&self) -> u64 {
        self.mem_at(IDX_PROTO_MAX_BULK_LEN)
    }

    pub fn client_query_buffer_limit(&self) -> u64 {
        self.mem_at(IDX_QUERY_BUF_LIMIT)
    }

    pub fn client_output_buffer_limit(&self, class: ClientClass) -> ObufLimit {
        match self.value(IDX_OBUF_LIMIT) {
            Some(Value::Obuf(l)) => l[class as usize],
            _ => ObufLimit::default(),
        }
    }

    /// Memory limit in bytes (0 = unlimited).
    pub fn maxmemory(&self) -> u64 {
        self.mem_at(IDX_MAXMEMORY)
    }

    pub fn maxmemory_policy(&self) -> MaxmemoryPolicy {
        MaxmemoryPolicy::ALL
            .get(self.enum_at(IDX_MAXMEMORY_POLICY))
            .copied()
            .unwrap_or(MaxmemoryPolicy::NoEviction)
    }

    pub fn maxmemory_samples(&self) -> usize {
        usize::try_from(self.int_at(IDX_MAXMEMORY_SAMPLES)).unwrap_or(5)
    }

    pub fn lfu_log_factor(&self) -> u64 {
        self.uint_at(IDX_LFU_LOG_FACTOR)
    }

    pub fn lfu_decay_time(&self) -> u64 {
        self.uint_at(IDX_LFU_DECAY_TIME)
    }

    pub fn active_expire_effort(&self) -> u32 {
        u32::try_from(self.int_at(IDX_ACTIVE_EXPIRE_EFFORT)).unwrap_or(1)
    }

    /// RDB snapshot points; empty means snapshotting is disabled.
    pub fn save_points(&self) -> &[SavePoint] {
        match self.value(IDX_SAVE) {
            Some(Value::Save(p)) => p,
            _ => &[],
        }
    }

    pub fn dbfilename(&self) -> &str {
        self.str_at(IDX_DBFILENAME)
    }

    /// Absolute working directory for persistence files.
    pub fn dir(&self) -> &str {
        self.str_at(IDX_DIR)
    }

    pub fn appendonly(&self) -> bool {
        self.bool_at(IDX_APPENDONLY)
    }

    pub fn appendfilename(&self) -> &str {
        self.str_at(IDX_APPENDFILENAME)
    }

    pub fn appendfsync(&self) -> AppendFsync {
        AppendFsync::ALL
            .get(self.enum_at(IDX_APPENDFSYNC))
            .copied()
            .unwrap_or(AppendFsync::EverySec)
    }

    /// `notify::*` bits.
    pub fn notify_keyspace_events(&self) -> u32 {
        match self.value(IDX_NOTIFY) {
            Some(Value::Flags(f)) => *f,
            _ => 0,
        }
    }

    /// Microseconds; negative disables the slow log.
    pub fn slowlog_log_slower_than(&self) -> i64 {
        self.int_at(IDX_SLOWLOG_SLOWER)
    }

    pub fn slowlog_max_len(&self) -> u64 {
        self.uint_at(IDX_SLOWLOG_LEN)
    }

    /// Milliseconds; 0 disables the latency monitor.
    pub fn latency_monitor_threshold(&self) -> u64 {
        self.uint_at(IDX_LATENCY_THRESHOLD)
    }

    pub fn latency_tracking(&self) -> bool {
        self.bool_at(IDX_LATENCY_TRACKING)
    }

    pub fn latency_tracking_info_percentiles(&self) -> &[f64] {
        match self.value(IDX_PERCENTILES) {
            Some(Value::Floats(f)) => f,
            _ => &[],
        }
    }

    /// Milliseconds (alias `lua-time-limit`).
    pub fn busy_reply_threshold(&self) -> u64 {
        self.uint_at(IDX_BUSY_REPLY)
    }

    /// Writes need this many good replicas (0: no check); with `min_replicas_max_lag`.
    pub fn min_replicas_to_write(&self) -> u64 {
        self.uint_at(IDX_MIN_REPLICAS)
    }

    pub fn min_replicas_max_lag(&self) -> u64 {
        self.uint_at(IDX_MIN_REPLICAS_LAG)
    }

    pub fn replica_serve_stale_data(&self) -> bool {
        self.bool_at(IDX_SERVE_STALE)
    }

    pub fn replica_read_only(&self) -> bool {
        self.bool_at(IDX_REPLICA_RO)
    }

    /// Any yes/no parameter by name or alias (None if unknown or not bool).
    pub fn bool_param(&self, name: &str) -> Option<bool> {
        let (idx, _) = lookup_entry(name.as_bytes())?;
        match self.value(idx)? {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// Any integer or memory parameter by name or alias, as i64 (memory
    /// values above i64::MAX saturate; percentages are not integers).
    pub fn int_param(&self, name: &str) -> Option<i64> {
        let (idx, _) = lookup_entry(name.as_bytes())?;
        match self.value(idx)? {
            Value::Int(v) => Some(*v),
            Value::Mem(m) => Some(i64::try_from(*m).unwrap_or(i64::MAX)),
            _ => None,
        }
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

/* ------------------------------------------------------------------------ */
/* Config file reading (with Redis 7.0's wildcard includes).                */
/* ------------------------------------------------------------------------ */

/// Reads a config file, or every file matching a wildcard in its last path
/// component (sorted, hidden files skipped, no match = nothing), as Redis
/// 7.0's `loadServerConfig` does with glob(3).
fn read_config_source(path: &str) -> Result<String, String> {
    if !path.contains(['*', '?', '[']) {
        return read_config_file(path);
    }
    let mut text = String::new();
    for file in expand_wildcard(path)? {
        text.push_str(&read_config_file(&file)?);
    }
    Ok(text)
}

fn read_config_file(path: &str) -> Result<String, String> {
    fs::read(path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .map_err(|e| {
            format!(
                "Fatal error, can't open config file '{path}': {}",
                io_error_text(&e)
            )
        })
}

fn expand_wildcard(path: &str) -> Result<Vec<String>, String> {
    let (dir, pattern) = match path.rfind('/') {
        Some(i) => (&path[..=i], &path[i + 1..]),
        None => ("", path),
    };
    if dir.contains(['*', '?', '[']) {
        return Err(format!(
            "Fatal error, can't open config file '{path}': wildcards are only supported in the file name"
        ));
    }
    let Ok(listing) = fs::read_dir(if dir.is_empty() { "." } else { dir }) else {
        return Ok(Vec::new());
    };
    let mut names: Vec<String> = listing
        .filter_map(Result::ok)
        .filter(|e| e.file_type().map(|t| !t.is_dir()).unwrap_or(false))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.') || pattern.starts_with('.'))
        .filter(|n| glob_match(pattern.as_bytes(), n.as_bytes(), false))
        .collect();
    names.sort();
    Ok(names.into_iter().map(|n| format!("{dir}{n}")).collect())
}

/* ------------------------------------------------------------------------ */
/* Command line.                                                            */
/* ------------------------------------------------------------------------ */

/// The options Tessera documents on its command line.  Any other
/// `--directive value...` is accepted too and applied as a config line, as
/// redis-server does; `Config` (not this struct) is the source of truth.
#[derive(Parser, Debug, Clone, PartialEq, Eq)]
#[command(
    name = "tessera",
    version,
    about = "Redis-compatible, shared-nothing, thread-per-core in-memory data server",
    after_help = "Any redis.conf directive may also be given as --<directive> <value...>, \
                  e.g. --save \"\" --appendonly no.",
    args_override_self = true
)]
pub struct Cli {
    /// Path to a redis.conf-style configuration file.
    pub config_file: Option<PathBuf>,
    /// TCP port to listen on.
    #[arg(long, default_value_t = 6379)]
    pub port: u16,
    /// Addresses to listen on (several may follow one --bind).
    #[arg(
        long,
        num_args = 1..,
        allow_hyphen_values = true,
        action = ArgAction::Set,
        default_values = ["*", "-::*"]
    )]
    pub bind: Vec<String>,
    /// Number of shard threads (default: one per CPU).
    #[arg(long)]
    pub threads: Option<usize>,
    /// CPUs to pin shard threads to, e.g. 0-3,8.
    #[arg(long, value_parser = cpu_list_arg)]
    pub cpus: Option<String>,
    /// Number of logical databases.
    #[arg(long, default_value_t = 16)]
    pub databases: usize,
    /// Password required by AUTH.
    #[arg(long)]
    pub requirepass: Option<String>,
    /// Maximum number of connected clients.
    #[arg(long, default_value_t = 10_000)]
    pub maxclients: u32,
    /// Log verbosity.
    #[arg(long, value_enum, ignore_case = true, default_value_t = LogLevel::Notice)]
    pub loglevel: LogLevel,
}

fn cpu_list_arg(s: &str) -> Result<String, String> {
    if !s.trim().is_empty() {
        parse_cpu_list(s)?;
    }
    Ok(s.to_string())
}

/// The command line, split the way redis-server splits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedArgs {
    /// Typed view of the documented flags (validated by clap).
    pub cli: Cli,
    /// An argument was `-`: read more config from stdin.
    pub config_from_stdin: bool,
    /// Every `--name value...` option rendered as config lines, to be
    /// appended after the config file.
    pub options: String,
}

/// Flags clap knows, with whether they take exactly one value.
const CLAP_SINGLE: &[&str] = &[
    "port",
    "threads",
    "cpus",
    "databases",
    "requirepass",
    "maxclients",
    "loglevel",
];

/// Splits argv (without argv[0]) into the config file, stdin marker and
/// config-line options exactly like redis-server's `main`, and validates the
/// documented flags with clap.
pub fn parse_args(args: &[String]) -> Result<ParsedArgs, String> {
    let split = split_command_line(args);
    let mut cli = clap_view(&split.groups)?;
    cli.config_file = split.config_file.map(PathBuf::from);
    Ok(ParsedArgs {
        cli,
        config_from_stdin: split.from_stdin,
        options: split.options,
    })
}

struct CommandLine {
    config_file: Option<String>,
    from_stdin: bool,
    options: String,
    /// `[name, values...]` per option, for clap.
    groups: Vec<Vec<String>>,
}

fn split_command_line(args: &[String]) -> CommandLine {
    let mut out = CommandLine {
        config_file: None,
        from_stdin: false,
        options: String::new(),
        groups: Vec::new(),
    };
    let mut j = 0;
    if let Some(first) = args.first() {
        if !first.starts_with('-') {
            out.config_file = Some(first.clone());
            j = 1;
        }
    }
    // After a bare `--name`, the next argument is its value even if it
    // starts with `--` (Redis 7.0.1+), so `--requirepass --x` works.
    let mut expecting_option = true;
    let last = args.len().saturating_sub(1);
    while let Some(arg) = args.get(j) {
        if arg == "-" && (j == 0 || j == last) {
            out.from_stdin = true;
        } else if expecting_option && arg.starts_with("--") {
            expecting_option = start_option(&mut out, args, j);
        } else {
            out.options.push_str(&repr(arg.as_bytes()));
            out.options.push(' ');
            if let Some(group) = out.groups.last_mut() {
                group.push(arg.clone());
            }
            expecting_option = true;
        }
        j += 1;
    }
    out
}

/// Starts a new option line for `args[j]` (which begins with `--`); returns
/// whether the following argument may start another option.
fn start_option(out: &mut CommandLine, args: &[String], j: usize) -> bool {
    let arg = &args[j];
    if !out.options.is_empty() {
        out.options.push('\n');
    }
    out.options.push_str(&arg[2..]);
    out.options.push(' ');
    let mut tokens = split_args_lossy(arg).unwrap_or_default();
    if let Some(first) = tokens.first_mut() {
        *first = first.trim_start_matches('-').to_string();
    }
    let bare_name = tokens.len() == 1;
    out.groups.push(tokens);
    if !bare_name {
        // `"--port 6380"` in one argument already carries its value.
        return true;
    }
    if !arg.eq_ignore_ascii_case("--save") {
        return false;
    }
    // `--save` followed by another option or by nothing means `save ""`,
    // which pre-7.0 scripts generate from an empty list.
    let next_is_option = args.get(j + 1).is_some_and(|a| a.starts_with("--"));
    if next_is_option || j + 1 == args.len() {
        out.options.push_str("\"\"");
        if let Some(group) = out.groups.last_mut() {
            group.push(String::new());
        }
    }
    next_is_option
}

/// Feeds the documented flags to clap for validation and the typed view.
/// Groups clap cannot represent (wrong value count) are left to the config
/// loader, which reports them Redis-style.
fn clap_view(groups: &[Vec<String>]) -> Result<Cli, String> {
    let mut argv = vec!["tessera".to_string()];
    let mut bind_args = Vec::new();
    for group in groups {
        let Some((name, values)) = group.split_first() else {
            continue;
        };
        let name = name.to_ascii_lowercase();
        match values {
            [value] if CLAP_SINGLE.contains(&name.as_str()) => {
                // `--name=value` keeps values that start with `-` intact.
                argv.push(format!("--{name}={value}"));
            }
            [_, ..] if name == "bind" => {
                // One argument holding several addresses is split, exactly as
                // the config loader does; the last --bind wins.
                let addresses = match values {
                    [one] if !one.is_empty() => split_args_lossy(one).unwrap_or_default(),
                    _ => values.to_vec(),
                };
                if !addresses.is_empty() {
                    bind_args = std::iter::once("--bind".to_string())
                        .chain(addresses)
                        .collect();
                }
            }
            _ => {}
        }
    }
    // Bind goes last so its open-ended value list cannot swallow a flag.
    argv.extend(bind_args);
    Cli::try_parse_from(argv).map_err(|e| e.to_string())
}

/// redis-server answers `-v`/`--version` and `-h`/`--help` (as the first
/// argument) by printing and exiting before anything else happens.
fn exit_on_help_or_version(args: &[String]) {
    let Some(first) = args.first() else {
        return;
    };
    match first.as_str() {
        "-h" | "--help" => {
            let _ = Cli::command().print_long_help();
            std::process::exit(0);
        }
        "-v" | "-V" | "--version" => {
            print!("{}", Cli::command().render_version());
            std::process::exit(0);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn load(list: &[&str]) -> Result<Config, String> {
        Config::load(args(list).into_iter())
    }

    fn get1(c: &Config, name: &str) -> String {
        c.get_value(name)
            .unwrap_or_else(|| format!("<missing {name}>"))
    }

    fn set(c: &mut Config, pairs: &[(&str, &str)]) -> Result<(), String> {
        let pairs: Vec<(&[u8], &[u8])> = pairs
            .iter()
            .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
            .collect();
        c.set_many(&pairs)
    }

    /// A unique scratch file path (tests run in parallel).
    fn temp_path(tag: &str) -> PathBuf {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        std::env::temp_dir().join(format!("tessera-config-{}-{tag}-{n}", std::process::id()))
    }

    fn write_temp(tag: &str, text: &str) -> PathBuf {
        let path = temp_path(tag);
        fs::write(&path, text).expect("write temp config");
        path
    }

    #[test]
    fn all_defaults_parse_and_render() {
        for p in PARAMS {
            let value = parse_value(p, &default_args(p), None);
            assert!(value.is_ok(), "default of {} fails: {:?}", p.name, value);
        }
        let c = Config::new();
        assert_eq!(get1(&c, "save"), "3600 1 300 100 60 10000");
        assert_eq!(get1(&c, "maxmemory"), "0");
        assert_eq!(get1(&c, "proto-max-bulk-len"), "536870912");
        assert_eq!(get1(&c, "client-query-buffer-limit"), "1073741824");
        assert_eq!(
            get1(&c, "client-output-buffer-limit"),
            "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
        );
        assert_eq!(get1(&c, "latency-tracking-info-percentiles"), "50 99 99.9");
        assert_eq!(get1(&c, "list-max-listpack-size"), "-2");
        assert_eq!(get1(&c, "loglevel"), "notice");
        assert_eq!(get1(&c, "bind"), "* -::*");
        assert_eq!(get1(&c, "notify-keyspace-events"), "");
        assert_eq!(get1(&c, "cpus"), "");
        let cwd = fs::canonicalize(".").expect("cwd");
        assert_eq!(get1(&c, "dir"), cwd.to_string_lossy());
    }

    #[test]
    fn names_are_unique() {
        let names: Vec<&str> = entries().map(|(_, n)| n).collect();
        for (i, n) in names.iter().enumerate() {
            assert!(!names[i + 1..].contains(n), "duplicate entry {n}");
            assert_eq!(n.to_ascii_lowercase(), *n);
        }
    }

    #[test]
    fn typed_accessors_defaults() {
        let c = Config::new();
        assert_eq!(c.port(), 6379);
        assert_eq!(c.bind(), ["*".to_string(), "-::*".to_string()]);
        assert_eq!(c.databases(), 16);
        assert_eq!(c.requirepass(), None);
        assert_eq!(c.maxclients(), 10_000);
        assert_eq!(c.proto_max_bulk_len(), 512 * 1024 * 1024);
        assert_eq!(c.client_query_buffer_limit(), 1024 * 1024 * 1024);
        assert_eq!(c.maxmemory(), 0);
        assert_eq!(c.maxmemory_policy(), MaxmemoryPolicy::NoEviction);
        assert_eq!(c.loglevel(), LogLevel::Notice);
        assert_eq!(c.hz(), 10);
        assert_eq!(c.timeout(), 0);
        assert_eq!(c.tcp_keepalive(), 300);
        assert_eq!(c.threads(), None);
        assert!(c.cpus().is_empty());
        assert_eq!(c.save_points().len(), 3);
        assert_eq!(c.appendfsync(), AppendFsync::EverySec);
        assert_eq!(c.busy_reply_threshold(), 5000);
        assert_eq!(
            c.client_output_buffer_limit(ClientClass::Pubsub),
            ObufLimit {
                hard_limit_bytes: 33_554_432,
                soft_limit_bytes: 8_388_608,
                soft_limit_seconds: 60
            }
        );
        assert_eq!(c.latency_tracking_info_percentiles(), [50.0, 99.0, 99.9]);
        assert_eq!(c.bool_param("lazyfree-lazy-user-del"), Some(false));
        assert_eq!(c.int_param("hash-max-ziplist-entries"), Some(128));
        assert_eq!(c.version(), 0);
    }

    #[test]
    fn config_text_parsing() {
        let mut c = Config::new();
        let text = "# comment\n\n   \n  Port 7000\r\nMAXMEMORY 1gb\n\
                    requirepass \"p a\\\"ss\"\nlogLevel WARNING\n  # indented comment\n\
                    notify-keyspace-events 'KEA'\nhash-max-ziplist-entries 256\n";
        c.load_str(text).expect("load");
        assert_eq!(c.port(), 7000);
        assert_eq!(c.maxmemory(), 1 << 30);
        assert_eq!(c.requirepass(), Some("p a\"ss"));
        assert_eq!(c.loglevel(), LogLevel::Warning);
        assert_eq!(get1(&c, "notify-keyspace-events"), "AKE");
        assert_eq!(get1(&c, "hash-max-listpack-entries"), "256");
    }

    #[test]
    fn unknown_directive_error_text() {
        let mut c = Config::new();
        let err = c.load_str("port 6380\n# x\nfoo bar\n").unwrap_err();
        assert_eq!(
            err,
            "*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\n\
             Reading the configuration file, at line 3\n\
             >>> 'foo bar'\n\
             Bad directive or wrong number of arguments"
        );
    }

    #[test]
    fn file_errors() {
        let mut c = Config::new();
        let err = c.load_str("port 1 2").unwrap_err();
        assert!(
            err.ends_with(">>> 'port 1 2'\nwrong number of arguments"),
            "{err}"
        );
        let err = c.load_str("\n  maxmemory lots  \n").unwrap_err();
        assert!(err.contains("at line 2\n>>> 'maxmemory lots'\nargument must be a memory value"));
        let err = c.load_str("requirepass \"abc").unwrap_err();
        assert!(
            err.ends_with("Unbalanced quotes in configuration line"),
            "{err}"
        );
        let err = c
            .load_str("port 6379 # trailing comments are not comments")
            .unwrap_err();
        assert!(err.ends_with("wrong number of arguments"));
        // Immutable parameters are settable from the file.
        c.load_str("databases 4\nlist-max-ziplist-entries 5")
            .expect("ok");
        assert_eq!(c.databases(), 4);
    }

    #[test]
    fn save_lines_accumulate_in_files() {
        let mut c = Config::new();
        c.load_str("save 900 1\nsave 300 10\n").expect("load");
        assert_eq!(get1(&c, "save"), "900 1 300 10");
        let mut c = Config::new();
        c.load_str("save \"\"\n").expect("load");
        assert_eq!(get1(&c, "save"), "");
        let mut c = Config::new();
        c.load_str("save \"\"\nsave 60 5\n").expect("load");
        assert_eq!(get1(&c, "save"), "60 5");
        let mut c = Config::new();
        c.load_str("save \"900 1 300 10\"").expect("load");
        assert_eq!(c.save_points().len(), 2);
        let err = Config::new().load_str("save 900").unwrap_err();
        assert!(err.ends_with("Invalid save parameters"));
        let err = Config::new().load_str("save 0 1").unwrap_err();
        assert!(err.ends_with("Invalid save parameters"));
    }

    #[test]
    fn include_files() {
        let inner = write_temp("inner", "maxclients 77\ninclude-not-a-thing\n");
        let outer = write_temp(
            "outer",
            &format!("port 7001\ninclude {}\n", inner.display()),
        );
        let err = Config::new()
            .load_str(&format!("include {}", outer.display()))
            .unwrap_err();
        // The error points inside the included file.
        assert!(
            err.contains("at line 2\n>>> 'include-not-a-thing'"),
            "{err}"
        );

        fs::write(&inner, "maxclients 77\n").expect("rewrite");
        let mut c = Config::new();
        c.load_str(&format!("include {}\ntimeout 5", outer.display()))
            .expect("load");
        assert_eq!((c.port(), c.maxclients(), c.timeout()), (7001, 77, 5));

        let missing = Config::new()
            .load_str("include /nonexistent/tessera.conf")
            .unwrap_err();
        assert_eq!(
            missing,
            "Fatal error, can't open config file '/nonexistent/tessera.conf': No such file or directory"
        );
        for p in [inner, outer] {
            let _ = fs::remove_file(p);
        }
    }

    #[test]
    fn include_cycles_are_stopped() {
        let path = temp_path("cycle");
        fs::write(&path, format!("include {}\n", path.display())).expect("write");
        let err = Config::new()
            .load_str(&format!("include {}", path.display()))
            .unwrap_err();
        assert!(err.contains("Too many nested include directives"), "{err}");
        let _ = fs::remove_file(path);
    }

    #[test]
    fn include_wildcards() {
        let dir = temp_path("confd");
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(dir.join("a.conf"), "port 7100\n").expect("write");
        fs::write(dir.join("b.conf"), "port 7200\n").expect("write");
        fs::write(dir.join("c.txt"), "port 7300\n").expect("write");
        let mut c = Config::new();
        c.load_str(&format!("include {}/*.conf", dir.display()))
            .expect("load");
        assert_eq!(c.port(), 7200, "files are applied in sorted order");
        c.load_str(&format!("include {}/*.none", dir.display()))
            .expect("no match is fine");
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn appendonly_yes_is_refused_until_there_is_an_aof() {
        let err = load(&["--appendonly", "yes"]).expect_err("appendonly yes must be refused");
        assert!(err.contains(APPENDONLY_NOT_YET), "{err}");
        let mut c = load(&["--appendonly", "no"]).expect("appendonly no is fine");
        assert!(!c.appendonly());
        let err = set(&mut c, &[("appendonly", "yes")]).expect_err("CONFIG SET refuses it");
        assert_eq!(
            err,
            format!("ERR CONFIG SET failed (possibly related to argument 'appendonly') - {APPENDONLY_NOT_YET}")
        );
        assert_eq!(get1(&c, "appendonly"), "no");
    }

    #[test]
    fn cli_passthrough() {
        let c = load(&["--save", "", "--activerehashing", "no", "--port", "7002"]).expect("load");
        assert_eq!(get1(&c, "save"), "");
        assert_eq!(get1(&c, "activerehashing"), "no");
        assert_eq!(c.port(), 7002);

        // `--save` followed by another option means `save ""`.
        let c = load(&["--save", "--activerehashing", "no"]).expect("load");
        assert!(c.save_points().is_empty());
        assert_eq!(get1(&c, "activerehashing"), "no");
        let c = load(&["--activerehashing", "no", "--save"]).expect("load");
        assert!(c.save_points().is_empty());

        // Multi-word values, either as separate args or one quoted arg.
        let c = load(&["--save", "900", "1", "300", "10"]).expect("load");
        assert_eq!(get1(&c, "save"), "900 1 300 10");
        let c = load(&["--save", "900 1 300 10", "--bind", "127.0.0.1", "::1"]).expect("load");
        assert_eq!(get1(&c, "save"), "900 1 300 10");
        assert_eq!(c.bind(), ["127.0.0.1".to_string(), "::1".to_string()]);

        // A value that looks like an option.
        let c = load(&["--requirepass", "--secret", "--MAXCLIENTS", "5"]).expect("load");
        assert_eq!(c.requirepass(), Some("--secret"));
        assert_eq!(c.maxclients(), 5);

        // Name and value in one argument.
        let c = load(&["--port 7003", "--threads", "4", "--cpus", "0-3,8"]).expect("load");
        assert_eq!(c.port(), 7003);
        assert_eq!(c.threads(), Some(4));
        assert_eq!(c.cpus(), [0, 1, 2, 3, 8]);
        assert_eq!(get1(&c, "cpus"), "0-3,8");
    }

    #[test]
    fn cli_errors() {
        let err = load(&["--foo", "bar"]).unwrap_err();
        assert_eq!(
            err,
            "*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\n\
             Reading the configuration file, at line 2\n\
             >>> 'foo \"bar\"'\n\
             Bad directive or wrong number of arguments"
        );
        // Values are judged by the loader: redis-server's text, naming the line.
        assert!(load(&["--port", "notaport"])
            .unwrap_err()
            .contains(">>> 'port \"notaport\"'"));
        assert!(load(&["--cpus", "3-1"]).unwrap_err().contains("reversed"));
        assert!(load(&["--loglevel", "loud"]).is_err());
        let err = load(&["--port", "1", "2"]).unwrap_err();
        assert!(err.ends_with("wrong number of arguments"), "{err}");
        let err = load(&["/nonexistent/tessera.conf"]).unwrap_err();
        assert!(
            err.starts_with("Fatal error, can't open config file"),
            "{err}"
        );
    }

    #[test]
    fn cli_struct_view() {
        let parsed = parse_args(&args(&[
            "redis.conf",
            "--port",
            "7004",
            "--bind",
            "10.0.0.1",
            "-::1",
            "--loglevel",
            "DEBUG",
            "--save",
            "",
        ]))
        .expect("parse");
        assert_eq!(parsed.cli.config_file, Some(PathBuf::from("redis.conf")));
        assert_eq!(parsed.cli.port, 7004);
        assert_eq!(parsed.cli.bind, ["10.0.0.1", "-::1"]);
        let quoted = parse_args(&args(&["--bind", "10.0.0.1 ::1"])).expect("parse");
        assert_eq!(quoted.cli.bind, ["10.0.0.1", "::1"]);
        let default = parse_args(&args(&[])).expect("parse");
        assert_eq!(default.cli.bind, ["*", "-::*"]);
        assert_eq!(default.cli.port, 6379);
        assert_eq!(parsed.cli.loglevel, LogLevel::Debug);
        assert_eq!(parsed.cli.databases, 16);
        assert_eq!(
            parsed.options,
            "port \"7004\" \nbind \"10.0.0.1\" \"-::1\" \nloglevel \"DEBUG\" \nsave \"\" "
        );
        assert!(!parsed.config_from_stdin);
        let parsed = parse_args(&args(&["-", "--port", "1"])).expect("parse");
        assert!(parsed.config_from_stdin);
        assert_eq!(parsed.cli.config_file, None);
    }

    #[test]
    fn config_file_then_cli_overrides() {
        let path = write_temp("main", "port 7005\nmaxclients 50\nsave 10 1\n");
        let c = load(&[&path.to_string_lossy(), "--port", "7006", "--save", "20 2"]).expect("load");
        assert_eq!(c.port(), 7006);
        assert_eq!(c.maxclients(), 50);
        // CLI lines are still "file" lines: the save appends.
        assert_eq!(get1(&c, "save"), "10 1 20 2");
        assert!(c.config_file().is_some_and(Path::is_absolute));
        let _ = fs::remove_file(path);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,8"), Ok(vec![0, 1, 2, 3, 8]));
        assert_eq!(parse_cpu_list(" 8 , 2-3,3,0 "), Ok(vec![0, 2, 3, 8]));
        assert_eq!(parse_cpu_list("5-5"), Ok(vec![5]));
        for bad in ["", "a", "1-", "-1", "3-1", "1,,2", "1-2-3", "70000", "0x1"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad:?}");
        }
        assert_eq!(render_cpus(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
    }

    #[test]
    fn config_get_globbing() {
        let c = Config::new();
        let names = |pat: &str| -> Vec<String> {
            c.get(pat.as_bytes()).into_iter().map(|(n, _)| n).collect()
        };
        assert_eq!(
            c.get(b"maxmemory"),
            [("maxmemory".to_string(), "0".to_string())]
        );
        // Exact lookups echo the name as typed.
        assert_eq!(
            c.get(b"MaxMemory"),
            [("MaxMemory".to_string(), "0".to_string())]
        );
        assert!(c.get(b"nosuchthing").is_empty());
        assert!(c.get(b"nosuch*").is_empty());
        let mm = names("maxmemory*");
        for n in [
            "maxmemory",
            "maxmemory-policy",
            "maxmemory-samples",
            "maxmemory-eviction-tenacity",
            "maxmemory-clients",
        ] {
            assert!(mm.contains(&n.to_string()), "{n} missing from {mm:?}");
        }
        // Globs list both names and aliases that match.
        let hash = names("hash-max-*-entries");
        assert_eq!(
            hash,
            ["hash-max-listpack-entries", "hash-max-ziplist-entries"]
        );
        assert_eq!(names("*ziplist*").len(), 5);
        assert_eq!(names("LUA-TIME-*"), ["lua-time-limit"]);
        assert_eq!(get1(&c, "lua-time-limit"), "5000");
        // Every name but the hidden ones, which need their exact name.
        let all = c.get(b"*");
        let hidden: Vec<&str> = PARAMS
            .iter()
            .filter(|p| p.flags.contains(ParamFlags::HIDDEN))
            .map(|p| p.name)
            .collect();
        assert!(hidden.contains(&"key-load-delay") && hidden.contains(&"rdb-key-save-delay"));
        assert_eq!(all.len(), entries().count() - hidden.len());
        for h in hidden {
            assert!(all.iter().all(|(n, _)| n != h));
            assert!(!get1(&c, h).is_empty());
        }
        // Several patterns: each name once.
        let many = c.get_many(&[b"port", b"po*", b"PORT"]);
        assert_eq!(many, [("port".to_string(), "6379".to_string())]);
    }

    #[test]
    fn config_set_values() {
        let mut c = Config::new();
        set(
            &mut c,
            &[("maxmemory", "100mb"), ("maxmemory-policy", "ALLKEYS-LRU")],
        )
        .expect("set");
        assert_eq!(c.maxmemory(), 100 * 1024 * 1024);
        assert_eq!(get1(&c, "maxmemory"), "104857600");
        assert_eq!(c.maxmemory_policy(), MaxmemoryPolicy::AllkeysLru);
        assert_eq!(get1(&c, "maxmemory-policy"), "allkeys-lru");
        assert_eq!(c.version(), 1);
        set(
            &mut c,
            &[("requirepass", "s3cret"), ("activerehashing", "NO")],
        )
        .expect("set");
        assert_eq!(c.requirepass(), Some("s3cret"));
        assert_eq!(get1(&c, "activerehashing"), "no");
        set(&mut c, &[("save", ""), ("hz", "1000")]).expect("set");
        assert!(c.save_points().is_empty());
        assert_eq!(get1(&c, "hz"), "500", "hz is clamped like Redis");
        set(&mut c, &[("save", "100 2 50 3")]).expect("set");
        assert_eq!(
            get1(&c, "save"),
            "100 2 50 3",
            "CONFIG SET replaces save points"
        );
        set(
            &mut c,
            &[("client-output-buffer-limit", "pubsub 1mb 2kb 9")],
        )
        .expect("set");
        assert_eq!(
            get1(&c, "client-output-buffer-limit"),
            "normal 0 0 0 slave 268435456 67108864 60 pubsub 1048576 2048 9"
        );
        set(&mut c, &[("notify-keyspace-events", "Exn")]).expect("set");
        assert_eq!(get1(&c, "notify-keyspace-events"), "xnE");
        assert_eq!(
            c.notify_keyspace_events(),
            notify::EXPIRED | notify::NEW | notify::KEYEVENT
        );
        set(&mut c, &[("notify-keyspace-events", "gA$K")]).expect("set");
        assert_eq!(get1(&c, "notify-keyspace-events"), "AK");
        set(&mut c, &[("latency-tracking-info-percentiles", "99.99 50")]).expect("set");
        assert_eq!(get1(&c, "latency-tracking-info-percentiles"), "99.99 50");
        // Parsed as Redis parses it, then refused: client eviction is not implemented.
        let err = set(&mut c, &[("maxmemory-clients", "10%")]).unwrap_err();
        assert!(err.contains("not implemented"), "{err}");
        set(&mut c, &[("maxmemory-clients", "0")]).expect("the default is accepted");
        set(&mut c, &[("list-max-ziplist-size", "-3")]).expect("set");
        assert_eq!(get1(&c, "list-max-listpack-size"), "-3");
        set(&mut c, &[("maxmemory", "")]).expect("Redis quirk: empty memory is 0");
        assert_eq!(c.maxmemory(), 0);
    }

    #[test]
    fn config_set_error_strings() {
        let mut c = Config::new();
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("foo", "1")],
                "ERR Unknown option or number of arguments for CONFIG SET - 'foo'",
            ),
            (
                &[("maxmemory", "lots")],
                "ERR CONFIG SET failed (possibly related to argument 'maxmemory') - argument must be a memory value",
            ),
            (
                &[("hz", "10x")],
                "ERR CONFIG SET failed (possibly related to argument 'hz') - argument couldn't be parsed into an integer",
            ),
            (
                &[("maxmemory-samples", "65")],
                "ERR CONFIG SET failed (possibly related to argument 'maxmemory-samples') - argument must be between 1 and 64 inclusive",
            ),
            (
                &[("appendonly", "maybe")],
                "ERR CONFIG SET failed (possibly related to argument 'appendonly') - argument must be 'yes' or 'no'",
            ),
            (
                &[("loglevel", "loud")],
                "ERR CONFIG SET failed (possibly related to argument 'loglevel') - argument(s) must be one of the following: debug, verbose, notice, warning",
            ),
            (
                &[("maxmemory-policy", "lru")],
                "ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy') - argument(s) must be one of the following: volatile-lru, volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction",
            ),
            (
                &[("PORT", "1")],
                "ERR CONFIG SET failed (possibly related to argument 'PORT') - can't set immutable config",
            ),
            (
                &[("timeout", "1"), ("TIMEOUT", "2")],
                "ERR CONFIG SET failed (possibly related to argument 'TIMEOUT') - duplicate parameter",
            ),
            (
                &[("dir", "/tmp")],
                "ERR CONFIG SET failed (possibly related to argument 'dir') - can't set protected config",
            ),
            (
                &[("hash-max-ziplist-entries", "x")],
                "ERR CONFIG SET failed (possibly related to argument 'hash-max-ziplist-entries') - argument couldn't be parsed into an integer",
            ),
            (
                &[("maxmemory-clients", "101%")],
                "ERR CONFIG SET failed (possibly related to argument 'maxmemory-clients') - percentage argument must be less or equal to 100",
            ),
            (
                &[("maxmemory-clients", "x")],
                "ERR CONFIG SET failed (possibly related to argument 'maxmemory-clients') - argument must be a memory or percent value",
            ),
            (
                &[("save", "100")],
                "ERR CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters",
            ),
            (
                &[("save", "100  1")],
                "ERR CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters",
            ),
            (
                &[("notify-keyspace-events", "KEQ")],
                "ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - Invalid event class character. Use 'Ag$lshzxeKEtmdn'.",
            ),
            (
                &[("client-output-buffer-limit", "master 0 0 0")],
                "ERR CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - Invalid client class specified in buffer limit configuration.",
            ),
            (
                &[("client-output-buffer-limit", "normal 1 2")],
                "ERR CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - Wrong number of arguments in buffer limit configuration.",
            ),
            (
                &[("client-output-buffer-limit", "normal 1x 2 3")],
                "ERR CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - Error in hard, soft or soft_seconds setting in buffer limit configuration.",
            ),
            (
                &[("latency-tracking-info-percentiles", "101")],
                "ERR CONFIG SET failed (possibly related to argument 'latency-tracking-info-percentiles') - latency-tracking-info-percentiles parameters should sit between [0.0,100.0]",
            ),
            (
                &[("latency-tracking-info-percentiles", "abc")],
                "ERR CONFIG SET failed (possibly related to argument 'latency-tracking-info-percentiles') - Invalid latency-tracking-info-percentiles parameters",
            ),
            (
                // The first problem in argument order wins.
                &[("timeout", "1"), ("daemonize", "yes"), ("foo", "1")],
                "ERR CONFIG SET failed (possibly related to argument 'daemonize') - can't set immutable config",
            ),
            (
                &[("foo", "1"), ("daemonize", "yes")],
                "ERR Unknown option or number of arguments for CONFIG SET - 'foo'",
            ),
        ];
        for (pairs, expected) in cases {
            assert_eq!(set(&mut c, pairs).unwrap_err(), *expected, "{pairs:?}");
        }
        assert_eq!(c.version(), 0, "failed sets change nothing");
    }

    #[test]
    fn config_set_is_atomic() {
        let mut c = Config::new();
        let err = set(
            &mut c,
            &[("maxmemory", "1mb"), ("timeout", "30"), ("hz", "nope")],
        )
        .unwrap_err();
        assert!(err.contains("'hz'"), "{err}");
        assert_eq!(c.maxmemory(), 0);
        assert_eq!(c.timeout(), 0);
        assert_eq!(c.version(), 0);
        // An alias and its canonical name are distinct entries: later wins.
        set(
            &mut c,
            &[
                ("hash-max-ziplist-entries", "1"),
                ("hash-max-listpack-entries", "2"),
            ],
        )
        .expect("set");
        assert_eq!(c.int_param("hash-max-listpack-entries"), Some(2));
        set(&mut c, &[]).expect("empty set is a no-op");
        assert_eq!(c.version(), 1);
    }

    #[test]
    fn protected_configs() {
        let mut c = Config::new();
        c.load_str("enable-protected-configs local").expect("load");
        let tmp = std::env::temp_dir();
        let tmp_text = tmp.to_string_lossy();
        let pair: &[(&[u8], &[u8])] = &[(b"dir", tmp_text.as_bytes())];
        assert!(c.set_many_as(pair, false).is_err());
        c.set_many_as(pair, true).expect("local client may set dir");
        let expected = fs::canonicalize(&tmp).expect("canonical tmp");
        assert_eq!(c.dir(), expected.to_string_lossy());
        let bad: &[(&[u8], &[u8])] = &[(b"dir", b"/nonexistent/dir")];
        assert_eq!(
            c.set_many_as(bad, true).unwrap_err(),
            "ERR CONFIG SET failed (possibly related to argument 'dir') - No such file or directory"
        );
        let path: &[(&[u8], &[u8])] = &[(b"dbfilename", b"a/b.rdb")];
        assert_eq!(
            c.set_many_as(path, true).unwrap_err(),
            "ERR CONFIG SET failed (possibly related to argument 'dbfilename') - dbfilename can't be a path, just a filename"
        );
    }

    #[test]
    fn bind_handling() {
        let mut c = Config::new();
        c.load_str("bind 127.0.0.1 ::1 -::*").expect("load");
        assert_eq!(get1(&c, "bind"), "127.0.0.1 ::1 -::*");
        c.load_str("bind \"\"").expect("load");
        assert!(c.bind().is_empty());
        let many = vec!["1.1.1.1"; 17].join(" ");
        let err = Config::new().load_str(&format!("bind {many}")).unwrap_err();
        assert!(err.ends_with("Too many bind addresses specified."));
    }

    #[test]
    fn directive_api() {
        let mut c = Config::new();
        c.apply_directive("MAXMEMORY", &args(&["2gb"]))
            .expect("apply");
        assert_eq!(c.maxmemory(), 2 << 30);
        assert_eq!(
            c.apply_directive("nope", &args(&["1"])),
            Err("Bad directive or wrong number of arguments".to_string())
        );
        assert_eq!(
            c.apply_directive("port", &args(&[])),
            Err("wrong number of arguments".to_string())
        );
        assert_eq!(
            c.apply_directive("include", &args(&["a", "b"])),
            Err("Bad directive or wrong number of arguments".to_string())
        );
    }

    #[test]
    fn logfile_must_be_openable() {
        let err = load(&["--logfile", "/nonexistent/dir/tessera.log"]).unwrap_err();
        assert_eq!(
            err,
            "*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\nCan't open the log file: No such file or directory"
        );
    }

    #[test]
    fn double_rendering() {
        assert_eq!(render_double(50.0), "50");
        assert_eq!(render_double(99.9), "99.9");
        assert_eq!(render_double(0.0), "0");
        assert_eq!(render_double(99.999_999_9), "100");
        assert_eq!(render_double(12.5), "12.5");
    }
}
