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

pub mod topology;

/// The Redis version Tessera reports: clients and test suites choose features by it.
pub const REDIS_VERSION: &str = "7.0.15";

/// Facts about the process that never change after start, shared read-only.
pub struct ServerInfo {
    pub run_id: String,
    pub pid: u32,
    pub port: u16,
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

/// Runs the server until SIGTERM/SIGINT or SHUTDOWN. Returns the exit code.
pub fn run(config: Config) -> i32 {
    block_signals();
    let placement = match plan_placement(&config) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!("{e}");
            return 1;
        }
    };
    // Before any shard starts: command timing stamps must all come from one clock.
    crate::util::clock::calibrate(std::time::Duration::from_millis(10));
    if let Some((host, port)) = config.replicaof() {
        crate::commands::replication::follow_at_start(host, port);
    }
    let n = placement.len();
    let slots = SlotTable::new(n);
    let info = Arc::new(ServerInfo {
        run_id: random_run_id(),
        pid: std::process::id(),
        port: config.port(),
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
    // Every shard binds with SO_REUSEPORT, which would let a second Tessera on the same
    // port start silently and take a share of its connections. A plain bind first
    // fails the way redis-server does when the port is taken.
    for a in config.bind() {
        let addr = format_addr(a, config.port());
        if let Err(e) = std::net::TcpListener::bind(&addr) {
            tracing::error!("Could not create server TCP listening socket {addr}: {e}");
            return 1;
        }
    }
    let hasher = DefaultHashBuilder::default();
    let mesh = runtime::build_mesh::<Job>(n);
    let bind_addrs = config.bind().to_vec();
    let port = config.port();
    // Startup errors (a port in use) come back here so the process exits non-zero.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<usize, String>>();
    let mut threads = Vec::new();
    for (i, ends) in mesh.into_iter().enumerate() {
        let cfg = config.clone();
        let info = info.clone();
        let addrs = bind_addrs.clone();
        let ready = ready_tx.clone();
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
                runtime::spawn_detached(crate::storage::evict::run_memory_task(cell.clone()));
                let mut listeners = Vec::new();
                for a in &addrs {
                    let addr = format_addr(a, port);
                    match runtime::bind_reuseport(&addr) {
                        Ok(l) => listeners.push(l),
                        Err(e) => {
                            let _ = ready.send(Err(format!(
                                "Could not create server TCP listening socket {addr}: {e}"
                            )));
                            return;
                        }
                    }
                }
                let _ = ready.send(Ok(i));
                let mut accepting = Vec::new();
                for l in listeners {
                    let cell = cell.clone();
                    accepting.push(runtime::spawn(async move {
                        loop {
                            match l.accept().await {
                                Ok(stream) => {
                                    if SHUTTING_DOWN.load(Ordering::Relaxed) {
                                        break;
                                    }
                                    runtime::spawn_detached(crate::connection::serve(
                                        cell.clone(),
                                        stream,
                                    ));
                                }
                                Err(e) => {
                                    tracing::warn!("accept failed: {e}");
                                    runtime::sleep(Duration::from_millis(10)).await;
                                }
                            }
                        }
                    }));
                }
                for a in accepting {
                    a.await;
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
    crate::storage::memory::record_startup(n);
    warn_save_points_not_loaded(&config);
    tracing::info!(port, shards = n, "Ready to accept connections tcp");
    let sig = wait_for_signal();
    tracing::info!("Received {sig}, scheduling shutdown...");
    shutdown(0)
}

/// `save` points make Redis users expect their data back after a restart; until
/// Tessera loads an RDB at start, say plainly that it does not.
fn warn_save_points_not_loaded(config: &Config) {
    if !config.save_points().is_empty() {
        tracing::warn!(
            "save points are set, but Tessera does not load {} from disk at start yet: \
             the dataset starts empty, and SIGTERM/SHUTDOWN do not save",
            config.dbfilename()
        );
    }
}

fn format_addr(a: &str, port: u16) -> String {
    if a.contains(':') {
        format!("[{a}]:{port}")
    } else {
        format!("{a}:{port}")
    }
}

/// Stops the process: nothing to persist yet (see README: persistence not implemented),
/// so an orderly shutdown is to stop accepting, log, and exit.
pub fn shutdown(code: i32) -> i32 {
    static ONCE: Mutex<()> = Mutex::new(());
    let _guard = ONCE.lock();
    SHUTTING_DOWN.store(true, Ordering::SeqCst);
    tracing::info!("Tessera is now ready to exit, bye bye...");
    std::process::exit(code)
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

fn wait_for_signal() -> &'static str {
    // SAFETY: sigwait on the set blocked in `block_signals`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        let mut sig: libc::c_int = 0;
        libc::sigwait(&set, &mut sig);
        if sig == libc::SIGINT {
            "SIGINT"
        } else {
            "SIGTERM"
        }
    }
}
