//! Process startup: choose CPUs, build the mesh, start one pinned shard per CPU, each
//! with its own SO_REUSEPORT listener, then wait for a signal or SHUTDOWN.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hashbrown::DefaultHashBuilder;

use crate::config::Config;
use crate::runtime;
use crate::shard::{self, fabric::Job};
use crate::slot::SlotTable;

pub mod cluster;
pub mod crash;
pub mod listeners;
pub mod log;
pub mod process;
pub mod shutdown;
pub mod topology;

/// The Redis version Tessera reports: clients and test suites choose features by it.
pub const REDIS_VERSION: &str = "7.0.15";

/// Facts about the process that never change after start, shared read-only.
pub struct ServerInfo {
    pub run_id: String,
    pub pid: u32,
    pub started: Instant,
    pub started_unix_ms: u64,
    pub executable: String,
    pub config_file: String,
    pub shards: usize,
    pub cpus: Vec<Option<usize>>,
}

/// Set when the process is stopping; listeners stop accepting.
pub static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);

/// Which CPUs the process may run on, in order.
pub fn allowed_cpus() -> Vec<usize> {
    match core_affinity::get_core_ids() {
        Some(ids) if !ids.is_empty() => ids.into_iter().map(|c| c.id).collect(),
        _ => vec![0],
    }
}

/// The CPU for each shard. Without `--cpus`: one shard per physical core on one NUMA
/// node (see topology.rs), `--threads` of them; asking for more spills onto other
/// nodes, then SMT siblings, then shares CPUs round-robin. With `--cpus` the list is
/// used as given, with warnings for siblings, nodes, sockets and oversubscription.
pub fn plan_placement(config: &Config) -> Result<Vec<Option<usize>>, String> {
    let allowed = allowed_cpus();
    let topo = topology::Topology::detect(&allowed);
    // The generic oversubscription warning below is skipped when a sharper one fired.
    let mut warned = false;
    let cpus = match config.cpus() {
        [] => {
            let choice = topo.choose(&allowed);
            let n = config.threads().unwrap_or(choice.preferred.len());
            tracing::info!(
                "placement: one shard per physical core on NUMA node {}: CPUs {} (allowed: {})",
                choice.node,
                topology::render_cpu_list(&choice.preferred),
                topology::render_cpu_list(&allowed)
            );
            if n > choice.preferred.len() {
                warned = true;
                tracing::warn!(
                    "{n} shards asked for, but NUMA node {} has {} usable physical core(s): \
                     the rest go to other nodes' cores, then SMT siblings",
                    choice.node,
                    choice.preferred.len()
                );
            }
            let mut order = choice.preferred;
            order.extend(choice.spill);
            order
        }
        list => {
            let n = config.threads().unwrap_or(list.len());
            for w in topo.check(list, n, &allowed) {
                warned = true;
                tracing::warn!("{w}");
            }
            list.to_vec()
        }
    };
    if cpus.is_empty() {
        return Err("no CPUs to run on".into());
    }
    let n = config.threads().unwrap_or(cpus.len());
    if n == 0 || n > 1024 {
        return Err(format!("--threads must be between 1 and 1024, got {n}"));
    }
    if n > cpus.len() && !warned {
        tracing::warn!(
            shards = n,
            cpus = cpus.len(),
            "more shards than CPUs: shards will share CPUs"
        );
    }
    Ok((0..n).map(|i| Some(cpus[i % cpus.len()])).collect())
}

fn random_run_id() -> String {
    let mut seed = crate::util::now_us() ^ ((std::process::id() as u64) << 32);
    (0..40)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            char::from_digit((seed % 16) as u32, 16).unwrap_or('0')
        })
        .collect()
}

/// Work every shard starts once it serves, set before `run`.
type ShardStartHook = Box<dyn Fn(&std::rc::Rc<shard::ShardCell>) + Send + Sync>;

static SHARD_START_HOOK: std::sync::OnceLock<ShardStartHook> = std::sync::OnceLock::new();

/// Has `hook` run on every shard's thread once the shard serves, in a server started
/// afterwards by `run` in this process: how the hop lab (benches/hop_lab.rs) puts its
/// in-process clients on a shard. False if a hook was set already.
pub fn on_shard_start(
    hook: impl Fn(&std::rc::Rc<shard::ShardCell>) + Send + Sync + 'static,
) -> bool {
    SHARD_START_HOOK.set(Box::new(hook)).is_ok()
}

/// Runs the server until SIGTERM/SIGINT or SHUTDOWN. Returns the exit code.
pub fn run(config: Config) -> i32 {
    block_signals();
    crash::install(&config);
    log_starting(&config);
    log::set_role(config.replicaof().is_some());
    process::disable_thp(&config);
    let placement = match plan_placement(&config) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!("{e}");
            return 1;
        }
    };
    // Before any shard starts: command timing stamps must all come from one clock.
    crate::util::clock::calibrate(std::time::Duration::from_millis(10));
    crate::util::outbound::set_source(config.str_param("bind-source-addr"));
    if let Some((host, port)) = config.replicaof() {
        crate::commands::replication::follow_at_start(host, port);
    }
    let n = placement.len();
    let slots = SlotTable::new(n);
    let info = Arc::new(ServerInfo {
        run_id: random_run_id(),
        pid: std::process::id(),
        started: Instant::now(),
        started_unix_ms: crate::util::now_ms(),
        executable: std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        config_file: config
            .config_file()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        shards: n,
        cpus: placement.clone(),
    });
    for (i, cpu) in placement.iter().enumerate() {
        let r = slots.range(i);
        let cpu = cpu
            .map(|c| c.to_string())
            .unwrap_or_else(|| "unpinned".into());
        tracing::info!("shard {i} -> cpu {cpu} -> slots {}-{}", r.start, r.end - 1);
    }
    if let Err(e) = crate::tls::configure(&config) {
        tracing::warn!("{e}");
        tracing::warn!("Failed to configure TLS. Check logs for more info.");
        return 1;
    }
    let Some(plain) = listen_addrs(&config, config.port(), "TCP") else {
        return 1;
    };
    let tls_port = config.int_param("tls-port").unwrap_or(0) as u16;
    let Some(tls) = listen_addrs(&config, tls_port, "TLS") else {
        return 1;
    };
    if plain.is_empty() && tls.is_empty() && config.unixsocket().is_none() {
        tracing::warn!("Configured to not listen anywhere, exiting.");
        return 1;
    }
    // Each address with whether its connections speak TLS.
    let listen: Vec<(runtime::BindAddr, bool)> = plain
        .into_iter()
        .map(|a| (a, false))
        .chain(tls.into_iter().map(|a| (a, true)))
        .collect();
    // clusterInit: the node (its nodes.conf and bus port) exists before any data
    // loads or any client is served.
    if config.cluster_enabled() {
        let mut ips: Vec<std::net::IpAddr> = Vec::new();
        for (a, _) in &listen {
            if !ips.contains(&a.addr.ip()) {
                ips.push(a.addr.ip());
            }
        }
        if let Err(e) = cluster::start(&config, &ips) {
            tracing::warn!("{e}");
            return 1;
        }
    }
    process::write_pidfile(&config);
    process::set_proc_title(&config);
    let _ = process::apply_oom_score_adj(&config);
    show_banner(&config, n);
    tracing::warn!("Server initialized");
    if let Err(e) = crate::acl::load_at_startup(&config) {
        for line in e.lines() {
            tracing::warn!("{line}");
        }
        return 1;
    }
    // The file is opened and mapped here; every shard loads its slots of it once it
    // listens, answering -LOADING meanwhile, and `finish` below waits for them all.
    // With appendonly yes the AOF is the dataset (Redis ignores the RDB then): its
    // base loads as an RDB would, its commands through the AOF client on shard 0.
    crate::persistence::aof_load::set_client_spawner(spawn_aof_client);
    crate::replication::link::set_master_server(spawn_master_client);
    let aof = match crate::persistence::aof_load::prepare(&config) {
        Ok(plan) => plan,
        Err(lines) => {
            lines.iter().for_each(|l| tracing::warn!("{l}"));
            return 1;
        }
    };
    let opened = match &aof {
        Some(plan) => match plan.rdb_base() {
            Some(path) => {
                if path
                    .file_name()
                    .is_some_and(|f| *f == *config.appendfilename())
                {
                    tracing::info!("Reading RDB preamble from AOF file...");
                } else {
                    tracing::info!("Reading RDB base file on AOF loading...");
                }
                crate::persistence::load::open_path(&path, n)
            }
            None => Ok(None),
        },
        None => crate::persistence::load::open(&config, n),
    };
    let rdb = match opened {
        Ok(file) => file,
        Err(fatal) => {
            tracing::warn!("{fatal}");
            return 1;
        }
    };
    // A file that recorded where replication stood (never an AOF's: Redis ignores it
    // there) lets this server continue that history, taken up before its keys load.
    if aof.is_none() && rdb.is_some() {
        if let Some(saved) = crate::persistence::load::saved_replication() {
            crate::replication::restore_from_rdb(&config, &saved);
        }
    }
    let load_started = std::time::Instant::now();
    // With the AOF on, the shards serve before the AOF is opened (created, on a fresh
    // dir) below: until then a write would be acknowledged outside any file and lost
    // to a kill -9 under `appendfsync always`. Clients get -LOADING until it is open,
    // as they do while a dataset loads (the RDB's open sets the flag itself).
    if aof.is_some() {
        crate::persistence::set_loading(true);
    }
    let (aof_feed, mut aof_client) = match aof.as_ref().filter(|p| p.has_commands()) {
        Some(_) => match std::os::unix::net::UnixStream::pair() {
            Ok((feed, client)) => (Some(feed), Some(client)),
            Err(e) => {
                tracing::warn!("Can't start the AOF loader's connection: {e}");
                return 1;
            }
        },
        None => (None, None),
    };
    let (loaded_tx, loaded_rx) = std::sync::mpsc::channel();
    let hasher = DefaultHashBuilder::default();
    let mesh = runtime::build_mesh::<Job>(n);
    let unixsocket = config
        .unixsocket()
        .map(|s| (s.to_string(), config.unixsocketperm()));
    // Startup errors (a port in use) come back here so the process exits non-zero.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<usize, String>>();
    let mut threads = Vec::new();
    for (i, ends) in mesh.into_iter().enumerate() {
        let cfg = config.clone();
        let info = info.clone();
        let addrs = listen.clone();
        let ready = ready_tx.clone();
        let load = rdb.clone().map(|file| (file, loaded_tx.clone()));
        let aof_client = if i == 0 { aof_client.take() } else { None };
        // The Unix socket cannot be shared with SO_REUSEPORT: the first shard accepts
        // on it, and its commands reach other shards as any connection's do.
        let unix = if i == 0 { unixsocket.clone() } else { None };
        let spawned =
            runtime::start_executor(&format!("shard-{i}"), placement[i], move || async move {
                let (senders, receivers) = ends.split();
                let data = shard::new_shard_data(i, &slots, cfg, hasher);
                let cell = shard::new_cell(i, slots, data, senders, info);
                crate::pubsub::install(&cell);
                for (_, rx) in receivers {
                    runtime::spawn_detached(shard::fabric::run_mailbox(cell.clone(), rx));
                }
                if cell.shard_count() > 1 {
                    runtime::spawn_detached(shard::hops::run_outbox(cell.clone()));
                }
                runtime::spawn_detached(shard::run_active_expiry(cell.clone()));
                runtime::spawn_detached(crate::clients::run_cron(cell.clone()));
                runtime::spawn_detached(crate::shard::memory::run_memory_task(cell.clone()));
                if i == 0 {
                    runtime::spawn_detached(crate::replication::link::run(cell.clone()));
                    runtime::spawn_detached(crate::replication::run_cron(cell.clone()));
                    if crate::cluster::enabled() {
                        runtime::spawn_detached(cluster::run_effects(cell.clone()));
                    }
                }
                let mut listeners = Vec::new();
                for (a, tls) in &addrs {
                    let kind = if *tls {
                        listeners::Kind::Tls
                    } else {
                        listeners::Kind::Plain
                    };
                    match runtime::bind_reuseport(a.addr) {
                        Ok(l) => listeners.push((runtime::Listener::Tcp(l), kind)),
                        Err(e) => {
                            let _ = ready.send(Err(format!(
                                "Could not create server TCP listening socket {}: {e}",
                                a.addr
                            )));
                            return;
                        }
                    }
                }
                if let Some((path, perm)) = &unix {
                    match runtime::UnixListener::bind(path, *perm) {
                        Ok(l) => {
                            listeners.push((runtime::Listener::Unix(l), listeners::Kind::Unix))
                        }
                        Err(e) => {
                            let _ = ready.send(Err(format!(
                                "Failed opening Unix socket: unix socket error: {}",
                                crate::util::io_error_text(&e)
                            )));
                            return;
                        }
                    }
                }
                let _ = ready.send(Ok(i));
                if let Some((file, done)) = load {
                    let loading = crate::persistence::load::load_shard(cell.clone(), file, done);
                    runtime::spawn_detached(loading);
                }
                if let Some(sock) = aof_client {
                    match runtime::TcpStream::from_unix(sock, "aof") {
                        Ok(stream) => spawn_aof_client(cell.clone(), stream),
                        Err(e) => tracing::warn!("Can't start the AOF loader's connection: {e}"),
                    }
                }
                for (l, kind) in listeners {
                    listeners::serve(&cell, l, kind);
                }
                if let Some(hook) = SHARD_START_HOOK.get() {
                    hook(&cell);
                }
            });
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => {
                tracing::error!("could not start shard {i}: {e}");
                return 1;
            }
        }
    }
    drop(ready_tx);
    for _ in 0..n {
        match ready_rx.recv() {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::error!("{e}");
                return 1;
            }
            Err(_) => {
                tracing::error!("a shard failed to start");
                return 1;
            }
        }
    }
    drop(loaded_tx);
    let mut rdb_end = None;
    if let Some(file) = rdb {
        // A signal while loading schedules the shutdown as at any other time (shard 0
        // runs it between its loading turns, without saving a half-loaded dataset).
        let poll_signals = || {
            if let Some(sig) = pending_signal() {
                shutdown::signal_received(sig);
            }
        };
        let check = crate::storage::rdb::validate_checksum(config.rdbchecksum());
        match crate::persistence::load::finish(&file, loaded_rx, n, check, poll_signals) {
            Some(end) => rdb_end = Some(end),
            None => return 1,
        }
        crate::persistence::load::feed_expired_to_stream(false);
        if aof.is_none() {
            let secs = load_started.elapsed().as_secs_f64();
            tracing::info!("DB loaded from disk: {secs:.3} seconds");
        }
    }
    if let Some(plan) = &aof {
        if let Some(feed) = aof_feed {
            if !crate::persistence::aof_load::feed(plan, rdb_end, feed) {
                return 1;
            }
            let secs = load_started.elapsed().as_secs_f64();
            tracing::info!("DB loaded from append only file: {secs:.3} seconds");
        }
        if let Err(e) = crate::persistence::aof_load::open_at_start(&config) {
            tracing::warn!("{e}");
            return 1;
        }
    }
    crate::persistence::set_loading(false);
    crate::storage::memory::record_startup(n);
    tracing::info!("Ready to accept connections");
    if let Some((path, _)) = &unixsocket {
        tracing::info!("The server is now ready to accept connections at {path}");
    }
    let _ = SHUTDOWN_FILES.set(ShutdownFiles {
        pidfile: config.pidfile().map(str::to_string),
        unixsocket: unixsocket.map(|(path, _)| path),
    });
    // Signals only schedule the shutdown: shard 0 runs it (it may save).
    loop {
        shutdown::signal_received(wait_for_signal());
    }
}

/// The AOF's client (at start and for DEBUG LOADAOF) as a connection task.
fn spawn_aof_client(cell: std::rc::Rc<shard::ShardCell>, stream: runtime::TcpStream) {
    runtime::spawn_detached(crate::connection::serve_aof_client(cell, stream));
}

/// The link to the master, once synced, as a connection task (replication/link.rs).
fn spawn_master_client(
    cell: std::rc::Rc<shard::ShardCell>,
    stream: runtime::TcpStream,
    initial: Vec<u8>,
) -> runtime::JoinHandle<()> {
    runtime::spawn(crate::connection::serve_master(cell, stream, initial))
}

/// Hands an accepted connection to its own task. False when the server is stopping.
async fn serve_accepted(
    cell: &std::rc::Rc<shard::ShardCell>,
    accepted: std::io::Result<runtime::TcpStream>,
) -> bool {
    match accepted {
        Ok(stream) => {
            if SHUTTING_DOWN.load(Ordering::Relaxed) {
                return false;
            }
            runtime::spawn_detached(crate::connection::serve(cell.clone(), stream));
        }
        Err(e) => {
            tracing::warn!("accept failed: {e}");
            runtime::sleep(Duration::from_millis(10)).await;
        }
    }
    true
}

/// A connection accepted on the TLS port, its handshake to run in its first reads
/// with the TLS settings of now.
fn start_server_tls(mut stream: runtime::TcpStream) -> std::io::Result<runtime::TcpStream> {
    let config =
        crate::tls::acceptor().ok_or_else(|| std::io::Error::other("TLS is not configured"))?;
    stream.start_tls(runtime::TlsSession::server(config)?);
    Ok(stream)
}

/// What a CONFIG SET changes outside the shards' copies of the config: the log's
/// verbosity, the process title, the OOM score (whose failure fails the CONFIG SET,
/// as in Redis).
pub fn config_changed(config: &Config, names: &[&[u8]]) -> Result<(), String> {
    log::set_verbosity(config.loglevel());
    crash::configure(config);
    let named = |prefix: &[u8]| {
        names
            .iter()
            .any(|n| n.len() >= prefix.len() && n[..prefix.len()].eq_ignore_ascii_case(prefix))
    };
    // The title is rewritten, and /proc written, only when their settings changed.
    if named(b"proc-title-template") || named(b"port") || named(b"tls-port") || named(b"bind") {
        process::set_proc_title(config);
    }
    if named(b"bind-source-addr") {
        crate::util::outbound::set_source(config.str_param("bind-source-addr"));
    }
    if named(b"oom-score-adj") {
        process::apply_oom_score_adj(config)?;
    }
    if named(b"tls-cluster")
        && crate::cluster::enabled()
        && config.bool_param("tls-cluster") == Some(true)
    {
        return Err(cluster::TLS_BUS_REFUSED.into());
    }
    if named(b"cluster-") || named(b"tls-cluster") {
        cluster::config_changed(config);
    }
    Ok(())
}

/// The server became a master or a replica: the log's role letter and the OOM score
/// follow (Redis's oom-score-adj-values has a value per role).
pub fn role_changed(config: &Config) {
    log::set_role(crate::replication::master().is_some());
    let _ = process::apply_oom_score_adj(config);
}

/// Redis's first lines, logged before the role is known.
fn log_starting(config: &Config) {
    let pid = std::process::id();
    tracing::warn!("oO0OoO0OoO0Oo Tessera is starting oO0OoO0OoO0Oo");
    tracing::warn!(
        "Redis version={REDIS_VERSION}, bits=64, commit=00000000, modified=0, pid={pid}, just started (Tessera {})",
        env!("CARGO_PKG_VERSION")
    );
    if config.config_file().is_some() {
        tracing::warn!("Configuration loaded");
    } else {
        tracing::warn!(
            "Warning: no config file specified, using the default config. In order to specify a config file use tessera /path/to/redis.conf"
        );
    }
}

/// The addresses every shard listens on, from `bind` (Redis's syntax: `*`, `::*`,
/// optional `-addr`) and `port` (0: no TCP listener, as in Redis). Every shard binds
/// with SO_REUSEPORT, which would let a second Tessera on the same port start
/// silently and take a share of its connections, so each address is first bound
/// plainly: a taken port fails the way redis-server does, with the line Redis's tools
/// look for ("Failed listening on port"), and an optional address the host lacks is
/// left out. None: the server must not start.
fn listen_addrs(config: &Config, port: u16, kind: &str) -> Option<Vec<runtime::BindAddr>> {
    if port == 0 {
        return Some(Vec::new());
    }
    let mut out = Vec::new();
    for spec in config.bind() {
        let error = match runtime::BindAddr::parse(spec, port) {
            Ok(b) => match runtime::probe_bind(b.addr) {
                Ok(()) => {
                    out.push(b);
                    continue;
                }
                // An optional address the host does not have is left out.
                Err(e) if b.may_skip(&e) => continue,
                Err(e) => e,
            },
            Err(e) => e,
        };
        tracing::warn!(
            "Warning: Could not create server TCP listening socket {}:{port}: bind: {}",
            spec.trim_start_matches('-'),
            crate::util::io_error_text(&error)
        );
        tracing::warn!("Failed listening on port {port} ({kind}), aborting.");
        return None;
    }
    Some(out)
}

/// The start-up banner: shown as Redis shows its logo (`always-show-logo yes`, or
/// logging to a terminal), else the one-line summary Redis prints instead.
fn show_banner(config: &Config, shards: usize) {
    let to_tty = config.logfile().is_empty()
        && !config.syslog_enabled()
        && std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mode = if config.cluster_enabled() {
        "cluster"
    } else {
        "standalone"
    };
    if !(config.always_show_logo() || to_tty) {
        tracing::info!("Running mode={mode}, port={}.", config.port());
        return;
    }
    let pid = std::process::id();
    let port = config.port();
    let version = env!("CARGO_PKG_VERSION");
    log::raw(&format!(
        "\n\
         \x20   +---+---+---+---+     Tessera {version} (Redis {REDIS_VERSION} compatible) 64 bit\n\
         \x20   |   |###|   |###|\n\
         \x20   +---+---+---+---+     Running in {mode} mode\n\
         \x20   |###|   |###|   |     Port: {port}\n\
         \x20   +---+---+---+---+     PID: {pid}\n\
         \x20   |   |###|   |###|     Shards: {shards}\n\
         \x20   +---+---+---+---+\n\n"
    ));
}

/// Files the server created and removes when it exits.
struct ShutdownFiles {
    pidfile: Option<String>,
    unixsocket: Option<String>,
}

static SHUTDOWN_FILES: std::sync::OnceLock<ShutdownFiles> = std::sync::OnceLock::new();

/// Stops the process, the last step of an orderly shutdown (`shutdown.rs` saved
/// first if it had to): stop accepting, remove the pid file and the Unix socket, log
/// Redis's last line, and exit.
pub fn shutdown(code: i32) -> i32 {
    static ONCE: Mutex<()> = Mutex::new(());
    let _guard = ONCE.lock();
    SHUTTING_DOWN.store(true, Ordering::SeqCst);
    remove_created_files();
    tracing::warn!("Redis is now ready to exit, bye bye...");
    std::process::exit(code)
}

/// Removes the pid file and the Unix socket (at shutdown, and after a crash).
fn remove_created_files() {
    if let Some(files) = SHUTDOWN_FILES.get() {
        if let Some(p) = &files.pidfile {
            tracing::info!("Removing the pid file.");
            let _ = std::fs::remove_file(p);
        }
        if let Some(p) = &files.unixsocket {
            tracing::info!("Removing the unix socket file.");
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Blocks SIGTERM/SIGINT in this thread and every thread it starts, so only
/// `wait_for_signal` ever receives them.
fn block_signals() {
    // SAFETY: plain libc signal-mask calls on a zeroed sigset_t.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Waits for SIGTERM or SIGINT; returns which.
/// SIGTERM or SIGINT, if one is pending (without waiting).
fn pending_signal() -> Option<i32> {
    // SAFETY: sigtimedwait with a zero timeout on the set blocked in `block_signals`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let sig = libc::sigtimedwait(&set, std::ptr::null_mut(), &zero);
        (sig > 0).then_some(sig)
    }
}

fn wait_for_signal() -> i32 {
    // SAFETY: sigwait on the set blocked in `block_signals`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        let mut sig: libc::c_int = 0;
        libc::sigwait(&set, &mut sig);
        sig
    }
}
