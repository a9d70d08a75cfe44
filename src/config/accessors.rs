//! Typed accessors: the values the rest of the server reads, by index into
//! the parameter table.

use super::*;

impl Config {
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

    /// `cluster-enabled` (immutable: read once at start).
    pub fn cluster_enabled(&self) -> bool {
        self.bool_param("cluster-enabled").unwrap_or(false)
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

    /// The ACL file (`aclfile`); None when unset.
    pub fn aclfile(&self) -> Option<&str> {
        Some(self.str_at(IDX_ACLFILE)).filter(|s| !s.is_empty())
    }

    pub fn acllog_max_len(&self) -> usize {
        usize::try_from(self.int_at(IDX_ACLLOG_MAX_LEN)).unwrap_or(128)
    }

    /// `acl-pubsub-default allchannels`.
    pub fn acl_pubsub_all(&self) -> bool {
        self.enum_at(IDX_ACL_PUBSUB_DEFAULT) == 0
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

    /// repl-timeout in seconds (at least 1): how long a replication link may stay
    /// silent, on either side.
    pub fn repl_timeout_s(&self) -> u64 {
        self.int_param("repl-timeout").unwrap_or(60).max(1) as u64
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

    /// `rdbcompression`: LZF for long strings in RDB files and DUMP payloads.
    pub fn rdbcompression(&self) -> bool {
        self.bool_at(IDX_RDBCOMPRESSION)
    }

    /// `rdbchecksum`: verify the CRC64 of RDB files loaded (and write one).
    pub fn rdbchecksum(&self) -> bool {
        self.bool_at(IDX_RDBCHECKSUM)
    }

    /// `key-load-delay` (hidden, for tests): microseconds to sleep per key loaded; a
    /// negative -N sleeps 1 us for one key in N.
    pub fn key_load_delay(&self) -> i64 {
        self.int_at(IDX_KEY_LOAD_DELAY)
    }

    /// `loading-process-events-interval-bytes`: how much of a file is loaded between
    /// two turns of serving clients (with -LOADING).
    pub fn loading_events_interval_bytes(&self) -> u64 {
        self.uint_at(IDX_LOADING_EVENTS_BYTES)
    }

    pub fn dbfilename(&self) -> &str {
        self.str_at(IDX_DBFILENAME)
    }

    /// Absolute working directory for persistence files.
    pub fn dir(&self) -> &str {
        self.str_at(IDX_DIR)
    }

    /// The flags a SIGINT / SIGTERM shutdown runs with (`shutdown-on-sigint` /
    /// `shutdown-on-sigterm`): `["default"]` or some of save, nosave, now, force.
    pub fn shutdown_on_signal(&self, sigint: bool) -> &[String] {
        let idx = if sigint {
            IDX_SHUTDOWN_ON_SIGINT
        } else {
            IDX_SHUTDOWN_ON_SIGTERM
        };
        match self.value(idx) {
            Some(Value::List(l)) => l,
            _ => &[],
        }
    }

    /// `rdb-key-save-delay` (a debugging knob of Redis's test suite): microseconds a
    /// save spends per key, so tests can catch a save in progress.
    pub fn rdb_key_save_delay(&self) -> i64 {
        self.int_at(IDX_RDB_KEY_SAVE_DELAY)
    }

    pub fn stop_writes_on_bgsave_error(&self) -> bool {
        self.bool_at(IDX_STOP_WRITES_ON_BGSAVE_ERROR)
    }

    pub fn appendonly(&self) -> bool {
        self.bool_at(IDX_APPENDONLY)
    }

    pub fn appendfilename(&self) -> &str {
        self.str_at(IDX_APPENDFILENAME)
    }

    pub fn appenddirname(&self) -> &str {
        self.str_at(IDX_APPENDDIRNAME)
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

    /// Any enumerated parameter's value name by name or alias (None if unknown or
    /// not an enumeration).
    pub fn enum_param(&self, name: &str) -> Option<&'static str> {
        let (idx, _) = lookup_entry(name.as_bytes())?;
        match (self.value(idx)?, &PARAMS.get(idx)?.kind) {
            (Value::Enum(i), ParamKind::Enum(names)) => names.get(*i).copied(),
            _ => None,
        }
    }

    /// Any string parameter by name or alias ("" if unknown or not a string).
    pub fn str_param(&self, name: &str) -> &str {
        lookup_entry(name.as_bytes()).map_or("", |(idx, _)| self.str_at(idx))
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
