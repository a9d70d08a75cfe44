//! The parameter table: every parameter's name, aliases, type, default and
//! flags, and the refusals of what Tessera cannot honour yet (`only_default`
//! parameters and directives), so that one place says what the config accepts.

use super::*;

const INT_MAX: i64 = i32::MAX as i64;
const INT_MIN: i64 = i32::MIN as i64;
const UINT_MAX: i64 = u32::MAX as i64;
const LONG_MAX: i64 = i64::MAX;
pub(super) const MB: u64 = 1024 * 1024;

/// `oom-score-adj` values, in Redis's order.
pub const OOM_SCORE_ADJ_NAMES: &[&str] = &["no", "yes", "relative", "absolute"];
pub(super) const SYSLOG_FACILITY_NAMES: &[&str] = &[
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
const TLS_DH_PARAMS: &str =
    "Tessera's TLS (rustls) offers ECDHE key exchange only: DH parameters would not be used, so tls-dh-params-file is refused";
const REPLICA_NOT_YET: &str =
    "Tessera's replica side does not support this setting yet: only its default is accepted";
const DEFRAG_NOT_YET: &str = "Tessera does not do active defragmentation";
const CPULIST_NOT_YET: &str =
    "Tessera pins its shard threads with `cpus`; Redis's *_cpulist settings are not supported";

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
    /// Fixed once the shards run (their number and CPUs): CONFIG SET to the
    /// current value is a no-op, any other value is refused as immutable.
    pub const FIXED_AT_START: ParamFlags = ParamFlags(16);
    /// Moves the listeners when changed (server/listeners.rs): `port`, `tls-port`,
    /// `bind`. A new port is tried before anything is set, as Redis's error wants.
    pub const LISTENER: ParamFlags = ParamFlags(32);

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

pub(super) const fn int(
    name: &'static str,
    min: i64,
    max: i64,
    default: &'static str,
) -> ConfigParam {
    ConfigParam::new(name, ParamKind::Int { min, max }, default)
}

pub(super) const fn memory(
    name: &'static str,
    min: u64,
    max: u64,
    default: &'static str,
) -> ConfigParam {
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

pub(super) const fn special(
    name: &'static str,
    kind: Special,
    default: &'static str,
) -> ConfigParam {
    ConfigParam::new(name, ParamKind::Special(kind), default)
}

pub(super) const IMMUTABLE: ParamFlags = ParamFlags::IMMUTABLE;
const FIXED: ParamFlags = ParamFlags::IMMUTABLE.union(ParamFlags::FIXED_AT_START);
const LONG_MAX_U: u64 = i64::MAX as u64;

const TABLE: &[ConfigParam] = &[
    // Networking.  `bind` is immutable (unlike Redis 7.0) because listeners
    // are created once per shard thread and never rebound, same as `port`.
    // Redis's default: every IPv4 address and, where the host has IPv6, every IPv6
    // one; protected mode keeps clients that are not local out until a password is
    // set.
    special("bind", Special::Bind, "* -::*").flag(ParamFlags::LISTENER),
    int("port", 0, 65535, "6379").flag(ParamFlags::LISTENER),
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
    int("shutdown-timeout", 0, INT_MAX, "10"),
    string("bind-source-addr", ""),
    int("socket-mark-id", 0, UINT_MAX, "0")
        .only_default("socket-mark-id is not supported by Tessera yet"),
    string("server_cpulist", "").flag(IMMUTABLE).only_default(CPULIST_NOT_YET),
    string("bio_cpulist", "").flag(IMMUTABLE).only_default(CPULIST_NOT_YET),
    string("aof_rewrite_cpulist", "").flag(IMMUTABLE).only_default(CPULIST_NOT_YET),
    string("bgsave_cpulist", "").flag(IMMUTABLE).only_default(CPULIST_NOT_YET),
    // ACL: only the default user exists (requirepass).
    string("aclfile", "").flag(IMMUTABLE),
    int("acllog-max-len", 0, LONG_MAX, "128"),
    enumeration("acl-pubsub-default", ACL_PUBSUB_NAMES, "resetchannels"),
    // TLS (src/tls): every setting takes effect; CONFIG SET rebuilds the contexts.
    int("tls-port", 0, 65535, "0").flag(ParamFlags::LISTENER),
    string("tls-cert-file", ""),
    string("tls-key-file", ""),
    string("tls-key-file-pass", "").flag(ParamFlags::SENSITIVE),
    string("tls-client-cert-file", ""),
    string("tls-client-key-file", ""),
    string("tls-client-key-file-pass", "").flag(ParamFlags::SENSITIVE),
    string("tls-dh-params-file", "").only_default(TLS_DH_PARAMS),
    string("tls-ca-cert-file", ""),
    string("tls-ca-cert-dir", ""),
    string("tls-protocols", ""),
    string("tls-ciphers", ""),
    string("tls-ciphersuites", ""),
    boolean("tls-prefer-server-ciphers", "no"),
    boolean("tls-session-caching", "yes"),
    int("tls-session-cache-size", 0, INT_MAX, "20480"),
    int("tls-session-cache-timeout", 0, INT_MAX, "300"),
    boolean("tls-cluster", "no"),
    boolean("tls-replication", "no"),
    enumeration("tls-auth-clients", TLS_AUTH_CLIENTS_NAMES, "yes"),
    // Active defragmentation.
    boolean("activedefrag", "no").only_default(DEFRAG_NOT_YET),
    memory("active-defrag-ignore-bytes", 1, LONG_MAX_U, "100mb").only_default(DEFRAG_NOT_YET),
    int("active-defrag-threshold-lower", 0, 1000, "10").only_default(DEFRAG_NOT_YET),
    int("active-defrag-threshold-upper", 0, 1000, "100").only_default(DEFRAG_NOT_YET),
    int("active-defrag-cycle-min", 1, 99, "1").only_default(DEFRAG_NOT_YET),
    int("active-defrag-cycle-max", 1, 99, "25").only_default(DEFRAG_NOT_YET),
    int("active-defrag-max-scan-fields", 1, LONG_MAX, "1000").only_default(DEFRAG_NOT_YET),
    // Cluster mode.
    boolean("cluster-enabled", "no").flag(IMMUTABLE),
    string("cluster-config-file", "nodes.conf").flag(IMMUTABLE),
    int("cluster-port", 0, 65535, "0").flag(IMMUTABLE),
    int("cluster-node-timeout", 0, LONG_MAX, "15000"),
    string("cluster-announce-ip", ""),
    int("cluster-announce-port", 0, 65535, "0"),
    int("cluster-announce-bus-port", 0, 65535, "0"),
    int("cluster-announce-tls-port", 0, 65535, "0"),
    string("cluster-announce-hostname", ""),
    enumeration("cluster-preferred-endpoint-type", CLUSTER_ENDPOINT_NAMES, "ip")
        ,
    boolean("cluster-require-full-coverage", "yes"),
    boolean("cluster-replica-no-failover", "no")
        .alias(&["cluster-slave-no-failover"])
        ,
    int("cluster-replica-validity-factor", 0, INT_MAX, "10")
        .alias(&["cluster-slave-validity-factor"])
        ,
    int("cluster-migration-barrier", 0, INT_MAX, "1"),
    boolean("cluster-allow-replica-migration", "yes"),
    boolean("cluster-allow-reads-when-down", "no"),
    boolean("cluster-allow-pubsubshard-when-down", "yes"),
    memory("cluster-link-sendbuf-limit", 0, LONG_MAX_U, "0").only_default(
        "Tessera does not limit cluster bus send buffers yet: cluster-link-sendbuf-limit must stay 0",
    ),
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
    boolean("appendonly", "no"),
    special("appendfilename", Special::FileName, "appendonly.aof").flag(IMMUTABLE),
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
    // Replication: replica links via SYNC/PSYNC on the master side, the link to a
    // master (replication/link.rs) on the replica side.
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
    string("masterauth", "").flag(ParamFlags::SENSITIVE),
    string("masteruser", ""),
    string("replica-announce-ip", "").alias(&["slave-announce-ip"]),
    int("replica-announce-port", 0, 65535, "0").alias(&["slave-announce-port"]),
    boolean("replica-announced", "yes"),
    boolean("replica-ignore-maxmemory", "yes")
        .alias(&["slave-ignore-maxmemory"])
        .only_default(REPLICA_NOT_YET),
    enumeration("repl-diskless-load", REPL_DISKLESS_LOAD_NAMES, "disabled"),
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
pub(super) const DEPRECATED: &[(&str, usize, usize)] = &[
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
pub(super) const fn param_index(name: &str) -> usize {
    let mut i = 0;
    while i < TABLE.len() {
        if const_str_eq(TABLE[i].name, name) {
            return i;
        }
        i += 1;
    }
    panic!("config parameter missing from TABLE")
}

pub(super) const IDX_BIND: usize = param_index("bind");
pub(super) const IDX_REPLICAOF: usize = param_index("replicaof");
pub(super) const IDX_PORT: usize = param_index("port");
pub(super) const IDX_RDBCHECKSUM: usize = param_index("rdbchecksum");
pub(super) const IDX_RDBCOMPRESSION: usize = param_index("rdbcompression");
pub(super) const IDX_KEY_LOAD_DELAY: usize = param_index("key-load-delay");
pub(super) const IDX_LOADING_EVENTS_BYTES: usize =
    param_index("loading-process-events-interval-bytes");
pub(super) const IDX_TCP_BACKLOG: usize = param_index("tcp-backlog");
pub(super) const IDX_UNIXSOCKET: usize = param_index("unixsocket");
pub(super) const IDX_UNIXSOCKETPERM: usize = param_index("unixsocketperm");
pub(super) const IDX_TIMEOUT: usize = param_index("timeout");
pub(super) const IDX_TCP_KEEPALIVE: usize = param_index("tcp-keepalive");
pub(super) const IDX_PROTECTED_MODE: usize = param_index("protected-mode");
pub(super) const IDX_MAXCLIENTS: usize = param_index("maxclients");
pub(super) const IDX_TRACKING_MAX_KEYS: usize = param_index("tracking-table-max-keys");
pub(super) const IDX_DATABASES: usize = param_index("databases");
pub(super) const IDX_DAEMONIZE: usize = param_index("daemonize");
pub(super) const IDX_PIDFILE: usize = param_index("pidfile");
pub(super) const IDX_LOGLEVEL: usize = param_index("loglevel");
pub(super) const IDX_LOGFILE: usize = param_index("logfile");
pub(super) const IDX_REQUIREPASS: usize = param_index("requirepass");
pub(super) const IDX_ACLFILE: usize = param_index("aclfile");
pub(super) const IDX_ACLLOG_MAX_LEN: usize = param_index("acllog-max-len");
pub(super) const IDX_ACL_PUBSUB_DEFAULT: usize = param_index("acl-pubsub-default");
pub(super) const IDX_HZ: usize = param_index("hz");
pub(super) const IDX_DYNAMIC_HZ: usize = param_index("dynamic-hz");
pub(super) const IDX_ENABLE_DEBUG: usize = param_index("enable-debug-command");
pub(super) const IDX_ENABLE_PROTECTED: usize = param_index("enable-protected-configs");
pub(super) const IDX_ENABLE_MODULE: usize = param_index("enable-module-command");
pub(super) const IDX_THREADS: usize = param_index("threads");
pub(super) const IDX_CPUS: usize = param_index("cpus");
pub(super) const IDX_PROTO_MAX_BULK_LEN: usize = param_index("proto-max-bulk-len");
pub(super) const IDX_QUERY_BUF_LIMIT: usize = param_index("client-query-buffer-limit");
pub(super) const IDX_OBUF_LIMIT: usize = param_index("client-output-buffer-limit");
pub(super) const IDX_MAXMEMORY: usize = param_index("maxmemory");
pub(super) const IDX_MAXMEMORY_POLICY: usize = param_index("maxmemory-policy");
pub(super) const IDX_MAXMEMORY_SAMPLES: usize = param_index("maxmemory-samples");
pub(super) const IDX_LFU_LOG_FACTOR: usize = param_index("lfu-log-factor");
pub(super) const IDX_LFU_DECAY_TIME: usize = param_index("lfu-decay-time");
pub(super) const IDX_ACTIVE_EXPIRE_EFFORT: usize = param_index("active-expire-effort");
pub(super) const IDX_SAVE: usize = param_index("save");
pub(super) const IDX_DBFILENAME: usize = param_index("dbfilename");
pub(super) const IDX_DIR: usize = param_index("dir");
pub(super) const IDX_SHUTDOWN_ON_SIGINT: usize = param_index("shutdown-on-sigint");
pub(super) const IDX_SHUTDOWN_ON_SIGTERM: usize = param_index("shutdown-on-sigterm");
pub(super) const IDX_RDB_KEY_SAVE_DELAY: usize = param_index("rdb-key-save-delay");
pub(super) const IDX_STOP_WRITES_ON_BGSAVE_ERROR: usize =
    param_index("stop-writes-on-bgsave-error");
pub(super) const IDX_APPENDONLY: usize = param_index("appendonly");
pub(super) const IDX_APPENDDIRNAME: usize = param_index("appenddirname");
pub(super) const IDX_APPENDFILENAME: usize = param_index("appendfilename");
pub(super) const IDX_APPENDFSYNC: usize = param_index("appendfsync");
pub(super) const IDX_NOTIFY: usize = param_index("notify-keyspace-events");
pub(super) const IDX_SLOWLOG_SLOWER: usize = param_index("slowlog-log-slower-than");
pub(super) const IDX_SLOWLOG_LEN: usize = param_index("slowlog-max-len");
pub(super) const IDX_LATENCY_THRESHOLD: usize = param_index("latency-monitor-threshold");
pub(super) const IDX_LATENCY_TRACKING: usize = param_index("latency-tracking");
pub(super) const IDX_PERCENTILES: usize = param_index("latency-tracking-info-percentiles");
pub(super) const IDX_BUSY_REPLY: usize = param_index("busy-reply-threshold");
pub(super) const IDX_MIN_REPLICAS: usize = param_index("min-replicas-to-write");
pub(super) const IDX_MIN_REPLICAS_LAG: usize = param_index("min-replicas-max-lag");
pub(super) const IDX_SERVE_STALE: usize = param_index("replica-serve-stale-data");
pub(super) const IDX_REPLICA_RO: usize = param_index("replica-read-only");

/// Looks a parameter up by name or alias, case-insensitively.
pub fn lookup_param(name: &[u8]) -> Option<&'static ConfigParam> {
    lookup_entry(name).and_then(|(idx, _)| PARAMS.get(idx))
}

/// Every addressable name (canonical names followed by their aliases).
pub(super) fn entries() -> impl Iterator<Item = (usize, &'static str)> {
    PARAMS.iter().enumerate().flat_map(|(idx, p)| {
        std::iter::once(p.name)
            .chain(p.aliases.iter().copied())
            .map(move |n| (idx, n))
    })
}

/// Resolves a user-supplied name to (parameter index, the entry name it hit).
/// Redis registers aliases as entries of their own, and error messages and
/// duplicate detection work on the entry, so both are returned.
pub(super) fn lookup_entry(name: &[u8]) -> Option<(usize, &'static str)> {
    entries().find(|(_, entry)| entry.as_bytes().eq_ignore_ascii_case(name))
}

/// Directives Redis 7.0 has that are not parameters and that Tessera cannot honour
/// yet: refused with the reason rather than "Bad directive", so a config written for
/// Redis says what is missing.
pub(super) fn directive_not_yet(name: &str) -> Option<&'static str> {
    const DIRECTIVES: &[(&str, &str)] = &[
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
