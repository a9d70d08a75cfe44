//! Server commands (Redis's server.c / db.c / debug.c parts): DBSIZE, FLUSHDB,
//! FLUSHALL, SWAPDB, INFO, TIME, COMMAND, DEBUG, SHUTDOWN.

use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;

use super::keys::reply_help;
use super::strings::cmd;
use super::subcommands::SubSpec;
use super::table::{self, flags, flags::*, CommandSpec, KeySpec, Kind};
use super::{parse_i64, ClientCtx, GlobalCtx, DB_INDEX_OUT_OF_RANGE, SYNTAX_ERR};
use crate::shard::multi::MultiShardOp;
use crate::stats::ShardStats;
use crate::storage::memory;

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

macro_rules! scmd {
    ($name:expr, $arity:expr, $flags:expr, $kind:expr, $since:expr, $summary:expr) => {
        CommandSpec {
            group: "server",
            acl: &["@admin"],
            ..cmd!(
                $name,
                $arity,
                $flags,
                KeySpec::None,
                $kind,
                $since,
                $summary
            )
        }
    };
}

#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec { acl: &["@keyspace"], ..scmd!("dbsize", 1, READONLY | FAST, Kind::Global(dbsize), "1.0.0", "Return the number of keys in the selected database") },
    CommandSpec { acl: &["@keyspace", "@dangerous"], ..scmd!("flushdb", -1, WRITE, Kind::Global(flushdb), "1.0.0", "Remove all keys from the current database") },
    CommandSpec { acl: &["@keyspace", "@dangerous"], ..scmd!("flushall", -1, WRITE, Kind::Global(flushall), "1.0.0", "Remove all keys from all databases") },
    CommandSpec { acl: &["@keyspace", "@dangerous"], ..scmd!("swapdb", 3, WRITE | FAST, Kind::Global(swapdb), "4.0.0", "Swaps two Redis databases") },
    CommandSpec { acl: &["@dangerous"], ..scmd!("info", -1, LOADING | STALE, Kind::Global(info), "1.0.0", "Get information and statistics about the server") },
    CommandSpec { acl: &[], ..scmd!("time", 1, LOADING | STALE | FAST, Kind::Client(time), "2.6.0", "Return the current server time") },
    CommandSpec { acl: &["@connection"], ..scmd!("command", -1, LOADING | STALE, Kind::Client(command), "2.8.13", "Get array of Redis command details") },
    scmd!("debug", -2, ADMIN | NOSCRIPT | LOADING | STALE, Kind::Global(super::debug::debug), "1.0.0", "A container for debugging commands"),
    CommandSpec { acl: &[], ..scmd!("module", -2, ADMIN | NOSCRIPT, Kind::Global(module), "4.0.0", "A container for module commands") },
    CommandSpec { acl: &[], ..scmd!("memory", -2, READONLY, Kind::Global(memory), "4.0.0", "A container for memory diagnostics commands") },
    scmd!("shutdown", -1, ADMIN | NOSCRIPT | LOADING | STALE | NO_MULTI | ALLOW_BUSY, Kind::Global(shutdown), "1.0.0", "Synchronously save the dataset to disk and then shut down the server"),
];

fn dbsize<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let db = g.session.db;
        let cell = g.session.cell.clone();
        let op = MultiShardOp::lock_all(g.owner(), &cell).await;
        let n: usize = op
            .on_each(&cell, move |d| d.dbs[db].len())
            .await
            .into_iter()
            .sum();
        g.release(op).await;
        g.w().integer(n as i64);
    })
}

/// FLUSHDB / FLUSHALL take SYNC or ASYNC. Some(async) if the arguments are valid:
/// ASYNC, or no argument under lazyfree-lazy-user-flush, frees in the background.
fn flush_mode(g: &mut GlobalCtx) -> Option<bool> {
    match g.args.len() {
        1 => Some(g.session.cell.data.borrow().mem.lazy_user_flush),
        2 if g.is(1, "sync") => Some(false),
        2 if g.is(1, "async") => Some(true),
        _ => {
            g.w().error(SYNTAX_ERR);
            None
        }
    }
}

/// Empties one database of a shard, freeing now or through the lazy-free task.
/// Returns how many keys it removed: each is a change, as Redis adds emptyData's
/// count to its dirty.
fn flush_db(d: &mut crate::shard::ShardData, db: usize, lazy: bool) -> u64 {
    let removed = d.dbs[db].len() as u64;
    if lazy {
        let tables = d.dbs[db].detach();
        d.lazy.free_tables(tables);
    } else {
        d.dbs[db].clear();
    }
    removed
}

fn flushdb<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let db = g.session.db;
        flush(g, Some(db)).await
    })
}

fn flushall<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(flush(g, None))
}

/// FLUSHDB (`only`: the client's database) and FLUSHALL (None: every database), on
/// every shard at once.
async fn flush(g: &mut GlobalCtx<'_>, only: Option<usize>) {
    let Some(lazy) = flush_mode(g) else {
        return;
    };
    let cell = g.session.cell.clone();
    // FLUSHALL ends a background save (Redis's flushAllDataAndResetRDB kills the
    // child): what it would write is gone, and the save points save anew below.
    let abandon = only.is_none() && crate::persistence::bgsave::abandon();
    let mut op = MultiShardOp::lock_all(g.owner(), &cell).await;
    let removed = op
        .on_each(&cell, move |d| {
            if abandon {
                d.dbs.iter_mut().for_each(|db| db.abandon_snapshot());
            }
            d.watches.touch_flushed(only, &d.dbs, crate::util::now_ms());
            d.tracking.clear();
            let dbs = match only {
                Some(db) => db..db + 1,
                None => 0..d.dbs.len(),
            };
            let removed = dbs.map(|db| flush_db(d, db, lazy)).sum::<u64>();
            // Blocked XREADGROUP clients learn that their stream is gone.
            d.blocked.signal_all();
            removed
        })
        .await;
    op.count_dirty(removed.into_iter().sum());
    // Propagated even when it removed nothing (Redis forces FLUSHDB and FLUSHALL).
    let argv = g.args.clone();
    g.propagation.rewrite(|| argv);
    g.release(op).await;
    // Every tracking client learns that all it cached is gone (a null).
    crate::tracking::notify_flush(&cell).await;
    // FLUSHALL with save points saves the empty dataset at once (Redis's
    // flushAllDataAndResetRDB), so the counter ends clean; a failure is only logged.
    let save_points = !cell.data.borrow().config.save_points().is_empty();
    if only.is_none() && save_points {
        let _ = crate::persistence::save::save_as(&cell, g.owner().id).await;
    }
    g.w().ok();
}

fn swapdb<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        // Not allowed in cluster mode: there is only db 0.
        if crate::cluster::enabled() {
            return g.w().error("ERR SWAPDB is not allowed in cluster mode");
        }
        let dbs = g.session.cell.data.borrow().dbs.len();
        let Some(a) = parse_i64(&g.args[1]) else {
            return g.w().error("ERR invalid first DB index");
        };
        let Some(b) = parse_i64(&g.args[2]) else {
            return g.w().error("ERR invalid second DB index");
        };
        if a < 0 || b < 0 || a as usize >= dbs || b as usize >= dbs {
            return g.w().error(DB_INDEX_OUT_OF_RANGE);
        }
        let (a, b) = (a as usize, b as usize);
        let cell = g.session.cell.clone();
        let op = MultiShardOp::lock_all(g.owner(), &cell).await;
        if a != b {
            op.on_each(&cell, move |d| {
                let now = crate::util::now_ms();
                let d = &mut *d;
                d.watches.touch_swapped(a, b, &d.dbs, now);
                let (lo, hi) = (a.min(b), a.max(b));
                let (left, right) = d.dbs.split_at_mut(hi);
                left[lo].swap(&mut right[0]);
                // Keys of the swapped dbs may now hold what blocked clients wait for.
                d.blocked.signal_all();
            })
            .await;
        }
        // Propagated always: Redis counts SWAPDB as a change whatever it swapped.
        let argv = g.args.clone();
        g.propagation.rewrite(|| argv);
        g.release(op).await;
        g.w().ok();
    })
}

fn time(ctx: &mut ClientCtx) {
    let us = crate::util::now_us();
    ctx.out.array_len(2);
    ctx.out.bulk((us / 1_000_000).to_string().as_bytes());
    ctx.out.bulk((us % 1_000_000).to_string().as_bytes());
}

/// Everything INFO needs from one shard.
struct ShardReport {
    stats: ShardStats,
    keyspace: Vec<(usize, usize, usize)>,
    expired: u64,
    /// Hash fields expired (Redis 7.4's expired_subkeys).
    expired_subkeys: u64,
    /// Keys a writable replica expires itself.
    replica_local_expires: usize,
    clients: usize,
    blocked_clients: usize,
    /// The shard's client_recent_max_input_buffer / _output_buffer.
    buffer_peaks: (usize, usize),
    evicted: u64,
    eviction_us: u64,
    dataset: u64,
    /// Changes since the last SAVE.
    dirty: u64,
    /// Latency histograms, only when INFO latencystats is asked for.
    hists: Vec<(u16, hdrhistogram::Histogram<u64>)>,
}

const DEFAULT_SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "module_list",
    "errorstats",
    "cluster",
    "keyspace",
];
const ALL_EXTRA: &[&str] = &["commandstats", "latencystats"];

fn info<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let mut sections: Vec<String> = Vec::new();
        let requested: Vec<String> = g.args[1..]
            .iter()
            .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
            .collect();
        if requested.is_empty() {
            sections.extend(DEFAULT_SECTIONS.iter().map(|s| s.to_string()));
        }
        for r in &requested {
            match r.as_str() {
                "default" => sections.extend(DEFAULT_SECTIONS.iter().map(|s| s.to_string())),
                "all" | "everything" => {
                    sections.extend(DEFAULT_SECTIONS.iter().map(|s| s.to_string()));
                    sections.extend(ALL_EXTRA.iter().map(|s| s.to_string()));
                }
                other => sections.push(other.to_string()),
            }
        }
        let cell = g.session.cell.clone();
        let want_hists = sections.iter().any(|s| s == "latencystats");
        let reports = cell
            .call_all(move |c| {
                let d = c.data.borrow();
                ShardReport {
                    hists: if want_hists {
                        d.observe.histograms(None)
                    } else {
                        Vec::new()
                    },
                    stats: d.stats.clone(),
                    keyspace: d
                        .dbs
                        .iter()
                        .enumerate()
                        .map(|(i, db)| (i, db.len(), db.expires_len()))
                        .collect(),
                    expired: d.dbs.iter().map(|db| db.expired_count).sum(),
                    expired_subkeys: d.dbs.iter().map(|db| db.expired_fields_count).sum(),
                    replica_local_expires: d
                        .dbs
                        .iter()
                        .map(|db| db.replica_local_expires_len())
                        .sum(),
                    evicted: d.mem.evicted_keys,
                    eviction_us: d.mem.eviction_us,
                    dataset: d.dataset_bytes(),
                    dirty: d.dirty,
                    // Replica links are not clients to INFO (Redis: clients less
                    // slaves).
                    clients: c
                        .clients
                        .borrow()
                        .iter()
                        .filter(|x| x.role.get() != crate::clients::ClientRole::Replica)
                        .count(),
                    blocked_clients: c.clients.borrow().iter().filter(|x| x.is_blocked()).count(),
                    buffer_peaks: c.clients.borrow().recent_buffer_peaks(),
                }
            })
            .await;
        let text = render_info(&cell, &sections, &reports);
        g.w().verbatim("txt", text.as_bytes());
    })
}

fn render_info(
    cell: &crate::shard::ShardCell,
    sections: &[String],
    reports: &[ShardReport],
) -> String {
    let mut stats = ShardStats::default();
    for r in reports {
        stats.merge(&r.stats);
    }
    let mut out = String::new();
    let mut seen = Vec::new();
    for s in sections {
        if seen.contains(s) {
            continue;
        }
        seen.push(s.clone());
        if !out.is_empty() && section_known(s) {
            out.push_str("\r\n");
        }
        match s.as_str() {
            "server" => info_server(cell, &mut out),
            "clients" => info_clients(reports, cell.data.borrow().config.maxclients(), &mut out),
            "memory" => info_memory(cell, reports, &mut out),
            "persistence" => info_persistence(cell, reports, &mut out),
            "stats" => info_stats(&stats, reports, &mut out),
            "replication" => info_replication(&mut out, &cell.data.borrow().config),
            "cpu" => info_cpu(&mut out),
            "module_list" | "modules" => out.push_str("# Modules\r\n"),
            "errorstats" => {
                out.push_str("# Errorstats\r\n");
                let mut errs: Vec<_> = stats.errors.iter().collect();
                errs.sort();
                for (k, v) in errs {
                    let _ = write!(out, "errorstat_{k}:count={v}\r\n");
                }
            }
            "cluster" => {
                let on = u8::from(crate::cluster::enabled());
                let _ = write!(out, "# Cluster\r\ncluster_enabled:{on}\r\n");
            }
            "keyspace" => info_keyspace(reports, &mut out),
            "commandstats" => {
                out.push_str("# Commandstats\r\n");
                let t = table::table();
                for (i, c) in stats.commands.iter().enumerate() {
                    if c.calls == 0 && c.rejected_calls == 0 && c.failed_calls == 0 {
                        continue;
                    }
                    let name = t.stat_name(i as u16);
                    if name.is_empty() {
                        continue;
                    }
                    let per_call = if c.calls == 0 {
                        0.0
                    } else {
                        c.usec as f64 / c.calls as f64
                    };
                    let _ = write!(
                        out,
                        "cmdstat_{}:calls={},usec={},usec_per_call={:.2},rejected_calls={},failed_calls={}\r\n",
                        name, c.calls, c.usec, per_call, c.rejected_calls, c.failed_calls
                    );
                }
            }
            "latencystats" => {
                out.push_str("# Latencystats\r\n");
                let mut all = Vec::new();
                for r in reports {
                    crate::observe::merge_histograms(&mut all, r.hists.clone());
                }
                let pct = cell
                    .data
                    .borrow()
                    .config
                    .latency_tracking_info_percentiles()
                    .to_vec();
                super::latency::render_latencystats(&mut out, &all, &pct);
            }
            _ => {}
        }
    }
    out
}

fn section_known(s: &str) -> bool {
    DEFAULT_SECTIONS.contains(&s) || ALL_EXTRA.contains(&s) || s == "modules"
}

fn info_persistence(cell: &crate::shard::ShardCell, reports: &[ShardReport], out: &mut String) {
    let dirty: u64 = reports.iter().map(|r| r.dirty).sum();
    crate::persistence::info_section(cell.info.started_unix_ms, dirty, out);
}

fn info_server(cell: &crate::shard::ShardCell, out: &mut String) {
    let i = &cell.info;
    let uptime = i.started.elapsed().as_secs();
    let hz = cell.data.borrow().config.hz();
    let _ = write!(
        out,
        "# Server\r\nredis_version:{}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\nredis_build_id:0\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:64\r\nmonotonic_clock:POSIX clock_gettime\r\nmultiplexing_api:epoll\r\natomicvar_api:c11-builtin\r\ngcc_version:0.0.0\r\nprocess_id:{}\r\nprocess_supervised:no\r\nrun_id:{}\r\ntcp_port:{}\r\nserver_time_usec:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\nhz:{}\r\nconfigured_hz:{}\r\nlru_clock:{}\r\nexecutable:{}\r\nconfig_file:{}\r\nio_threads_active:0\r\ntessera_version:{}\r\ntessera_shards:{}\r\n",
        crate::server::REDIS_VERSION,
        std::env::consts::OS,
        std::env::consts::ARCH,
        i.pid,
        i.run_id,
        cell.data.borrow().config.port(),
        crate::util::now_us(),
        uptime,
        uptime / 86400,
        hz,
        hz,
        crate::util::lru_clock() & 0xFF_FFFF,
        i.executable,
        i.config_file,
        env!("CARGO_PKG_VERSION"),
        i.shards,
    );
    if let Some(ms) = crate::server::shutdown::waiting_ms() {
        let _ = write!(out, "shutdown_in_milliseconds:{ms}\r\n");
    }
}

fn info_clients(reports: &[ShardReport], maxclients: usize, out: &mut String) {
    let n: usize = reports.iter().map(|r| r.clients).sum();
    let blocked: usize = reports.iter().map(|r| r.blocked_clients).sum();
    let (tc, ..) = crate::tracking::info_counts();
    let max_in = reports.iter().map(|r| r.buffer_peaks.0).max().unwrap_or(0);
    let max_out = reports.iter().map(|r| r.buffer_peaks.1).max().unwrap_or(0);
    // getClusterConnectionsCount: a link each way to every other known node.
    let bus = crate::cluster::node().map_or(0, |node| {
        node.with_engine(|engine| engine.table.len().saturating_sub(1) * 2)
    });
    let _ = write!(
        out,
        "# Clients\r\nconnected_clients:{n}\r\ncluster_connections:{bus}\r\nmaxclients:{}\r\nclient_recent_max_input_buffer:{max_in}\r\nclient_recent_max_output_buffer:{max_out}\r\nblocked_clients:{blocked}\r\ntracking_clients:{tc}\r\nclients_in_timeout_table:0\r\n",
        maxclients
    );
}

fn rss_bytes() -> u64 {
    memory::rss_bytes()
}

/// `a / b` as Redis prints ratios (two decimals), 0 when `b` is 0.
fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

fn total_system_memory() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// INFO memory in Redis 7.0's shape. used_memory is jemalloc's allocated bytes less the Lua VMs; the
/// dataset is what the shards' keyspaces account for, the overhead the rest.
fn info_memory(cell: &crate::shard::ShardCell, reports: &[ShardReport], out: &mut String) {
    let a = memory::alloc_stats();
    let used = memory::used_memory();
    let rss = rss_bytes();
    let peak = memory::peak().max(used);
    let startup = memory::startup().min(used);
    let dataset_keys: u64 = reports.iter().map(|r| r.dataset).sum();
    let overhead = used.saturating_sub(dataset_keys).max(startup).min(used);
    let dataset = used - overhead;
    let d = cell.data.borrow();
    let maxmemory = d.config.maxmemory();
    let policy = d.config.maxmemory_policy().as_str();
    drop(d);
    let h = crate::util::bytes_human;
    let scripts = crate::scripting::script_count();
    let (libraries, functions) = crate::scripting::functions::counts();
    let sysmem = total_system_memory();
    let lua = crate::scripting::lua_memory();
    let lua_human = h(lua);
    let lua_scripts = crate::scripting::scripts_bytes();
    let pending = memory::LAZYFREE_PENDING.load(std::sync::atomic::Ordering::Relaxed);
    let freed = memory::LAZYFREED.load(std::sync::atomic::Ordering::Relaxed);
    // Redis 7.0's one replication buffer, split as Redis splits it: the backlog's
    // part and what the replicas hold beyond it (not counted for eviction;
    // Tessera's eviction counts only the dataset's bytes anyway).
    let (repl_backlog, repl_replicas) = crate::effects::replication_memory();
    let _ = write!(
        out,
        "# Memory\r\nused_memory:{used}\r\nused_memory_human:{}\r\nused_memory_rss:{rss}\r\nused_memory_rss_human:{}\r\nused_memory_peak:{peak}\r\nused_memory_peak_human:{}\r\nused_memory_peak_perc:{:.2}%\r\nused_memory_overhead:{overhead}\r\nused_memory_startup:{startup}\r\nused_memory_dataset:{dataset}\r\nused_memory_dataset_perc:{:.2}%\r\nallocator_allocated:{}\r\nallocator_active:{}\r\nallocator_resident:{}\r\ntotal_system_memory:{sysmem}\r\ntotal_system_memory_human:{}\r\nused_memory_lua:{lua}\r\nused_memory_vm_eval:{lua}\r\nused_memory_lua_human:{lua_human}\r\nused_memory_scripts_eval:{lua_scripts}\r\nnumber_of_cached_scripts:{scripts}\r\nnumber_of_functions:{functions}\r\nnumber_of_libraries:{libraries}\r\nused_memory_vm_functions:0\r\nused_memory_vm_total:{lua}\r\nused_memory_vm_total_human:{lua_human}\r\nused_memory_functions:0\r\nused_memory_scripts:0\r\nused_memory_scripts_human:0B\r\nmaxmemory:{maxmemory}\r\nmaxmemory_human:{}\r\nmaxmemory_policy:{policy}\r\nallocator_frag_ratio:{:.2}\r\nallocator_frag_bytes:{}\r\nallocator_rss_ratio:{:.2}\r\nallocator_rss_bytes:{}\r\nrss_overhead_ratio:{:.2}\r\nrss_overhead_bytes:{}\r\nmem_fragmentation_ratio:{:.2}\r\nmem_fragmentation_bytes:{}\r\nmem_not_counted_for_evict:{}\r\nmem_replication_backlog:{}\r\nmem_total_replication_buffers:{}\r\nmem_clients_slaves:{}\r\nmem_clients_normal:0\r\nmem_cluster_links:0\r\nmem_aof_buffer:0\r\nmem_allocator:{}\r\nactive_defrag_running:0\r\nlazyfree_pending_objects:{pending}\r\nlazyfreed_objects:{freed}\r\n",
        h(used),
        h(rss),
        h(peak),
        ratio(used * 100, peak),
        ratio(dataset * 100, used.saturating_sub(startup)),
        a.allocated,
        a.active,
        a.resident,
        h(sysmem),
        h(maxmemory),
        ratio(a.active, a.allocated),
        a.active as i64 - a.allocated as i64,
        ratio(a.resident, a.active),
        a.resident as i64 - a.active as i64,
        ratio(rss, a.resident),
        rss as i64 - a.resident as i64,
        ratio(rss, used),
        rss as i64 - used as i64,
        repl_replicas,
        repl_backlog,
        repl_backlog + repl_replicas,
        repl_replicas,
        memory::allocator_name(),
    );
}

fn info_stats(s: &ShardStats, reports: &[ShardReport], out: &mut String) {
    let expired: u64 = reports.iter().map(|r| r.expired).sum();
    let expired_subkeys: u64 = reports.iter().map(|r| r.expired_subkeys).sum();
    let tracked_expires: usize = reports.iter().map(|r| r.replica_local_expires).sum();
    let evicted: u64 = reports.iter().map(|r| r.evicted).sum();
    let eviction_ms: u64 = reports.iter().map(|r| r.eviction_us).sum::<u64>() / 1000;
    let (_, tk, ti, tp) = crate::tracking::info_counts();
    let (forks, fork_usec) = crate::persistence::bgsave::fork_stats();
    let (sync_full, sync_partial_ok, sync_partial_err) = crate::replication::sync_stats();
    let unexpected = crate::replication::link::unexpected_error_replies();
    let _ = write!(
        out,
        "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ninstantaneous_ops_per_sec:0\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\ntotal_net_repl_input_bytes:0\r\ntotal_net_repl_output_bytes:0\r\ninstantaneous_input_kbps:0.00\r\ninstantaneous_output_kbps:0.00\r\ninstantaneous_input_repl_kbps:0.00\r\ninstantaneous_output_repl_kbps:0.00\r\nrejected_connections:{}\r\nsync_full:{sync_full}\r\nsync_partial_ok:{sync_partial_ok}\r\nsync_partial_err:{sync_partial_err}\r\nexpired_keys:{expired}\r\nexpired_subkeys:{expired_subkeys}\r\nexpired_stale_perc:0.00\r\nexpired_time_cap_reached_count:0\r\nexpire_cycle_cpu_milliseconds:0\r\nevicted_keys:{evicted}\r\nevicted_clients:0\r\ntotal_eviction_exceeded_time:{eviction_ms}\r\ncurrent_eviction_exceeded_time:0\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\npubsub_channels:0\r\npubsub_patterns:0\r\npubsubshard_channels:0\r\nlatest_fork_usec:{fork_usec}\r\ntotal_forks:{forks}\r\nmigrate_cached_sockets:0\r\nslave_expires_tracked_keys:{tracked_expires}\r\nactive_defrag_hits:0\r\nactive_defrag_misses:0\r\nactive_defrag_key_hits:0\r\nactive_defrag_key_misses:0\r\ntotal_active_defrag_time:0\r\ncurrent_active_defrag_time:0\r\ntracking_total_keys:{tk}\r\ntracking_total_items:{ti}\r\ntracking_total_prefixes:{tp}\r\nunexpected_error_replies:{unexpected}\r\ntotal_error_replies:{}\r\ndump_payload_sanitizations:0\r\ntotal_reads_processed:0\r\ntotal_writes_processed:0\r\nio_threaded_reads_processed:0\r\nio_threaded_writes_processed:0\r\nreply_buffer_shrinks:0\r\nreply_buffer_expands:0\r\n",
        s.total_connections,
        s.total_commands,
        s.net_input_bytes,
        s.net_output_bytes,
        s.rejected_connections,
        s.keyspace_hits,
        s.keyspace_misses,
        s.total_error_replies,
    );
}

fn info_cpu(out: &mut String) {
    // SAFETY: getrusage fills a zeroed struct for this process.
    let (user, sys) = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        (
            ru.ru_utime.tv_sec as f64 + ru.ru_utime.tv_usec as f64 / 1e6,
            ru.ru_stime.tv_sec as f64 + ru.ru_stime.tv_usec as f64 / 1e6,
        )
    };
    let _ = write!(
        out,
        "# CPU\r\nused_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\nused_cpu_sys_children:0.000000\r\nused_cpu_user_children:0.000000\r\nused_cpu_sys_main_thread:{sys:.6}\r\nused_cpu_user_main_thread:{user:.6}\r\n"
    );
}

fn info_keyspace(reports: &[ShardReport], out: &mut String) {
    out.push_str("# Keyspace\r\n");
    let ndb = reports.first().map(|r| r.keyspace.len()).unwrap_or(0);
    for db in 0..ndb {
        let (keys, expires) = reports.iter().fold((0, 0), |(k, e), r| {
            (k + r.keyspace[db].1, e + r.keyspace[db].2)
        });
        if keys > 0 {
            let _ = write!(out, "db{db}:keys={keys},expires={expires},avg_ttl=0\r\n");
        }
    }
}

/// What COMMAND INFO / DOCS show of a command or a subcommand.
struct Meta {
    name: &'static str,
    arity: i16,
    flags: u32,
    triple: (i64, i64, i64),
    group: &'static str,
    since: &'static str,
    summary: &'static str,
    /// The command's index, for its subcommands (None for a subcommand).
    idx: Option<u16>,
}

impl Meta {
    fn of_command(idx: u16, spec: &'static CommandSpec) -> Meta {
        Meta {
            name: spec.name,
            arity: spec.arity,
            flags: spec.flags,
            triple: spec.keys.triple(),
            group: spec.group,
            since: spec.since,
            summary: spec.summary,
            idx: Some(idx),
        }
    }

    fn of_sub(sub: &'static SubSpec, group: &'static str) -> Meta {
        Meta {
            name: sub.name,
            arity: sub.arity,
            flags: sub.flags,
            triple: (sub.keys.0 as i64, sub.keys.1 as i64, sub.keys.2 as i64),
            group,
            since: sub.since,
            summary: sub.summary,
            idx: None,
        }
    }

    /// A command or subcommand by full name (`get`, `config|get`).
    fn lookup(name: &[u8]) -> Option<Meta> {
        let t = table::table();
        let id = t.lookup_full(name)?;
        Some(match t.stat_sub(id) {
            Some(sub) => {
                let group =
                    table::lookup(sub.parent().as_bytes()).map_or("server", |(_, s)| s.group);
                Meta::of_sub(sub, group)
            }
            None => Meta::of_command(id, t.specs[id as usize]),
        })
    }

    fn subs(&self) -> Vec<Meta> {
        match self.idx {
            Some(i) => table::table()
                .subcommands(i)
                .iter()
                .map(|s| Meta::of_sub(s, self.group))
                .collect(),
            None => Vec::new(),
        }
    }
}

/// One COMMAND INFO entry in Redis 7.0's shape (subcommands nested in the last field).
fn command_entry(out: &mut crate::protocol::reply::ReplyWriter, m: &Meta) {
    out.array_len(10);
    out.bulk(m.name.as_bytes());
    out.integer(m.arity as i64);
    let names: Vec<&str> = flags::NAMES
        .iter()
        .filter(|(f, _)| m.flags & f != 0)
        .map(|(_, n)| *n)
        .collect();
    out.set_len(names.len());
    for n in names {
        out.simple(n);
    }
    let (first, last, step) = m.triple;
    out.integer(first);
    out.integer(last);
    out.integer(step);
    // Redis's categories: the table's and those the flags imply, in Redis's order.
    let id = table::table().lookup_full(m.name.as_bytes()).unwrap_or(0);
    let cats: Vec<&str> = crate::acl::categories::names_of(id).collect();
    out.set_len(cats.len());
    for c in cats {
        out.simple(&format!("@{c}"));
    }
    out.set_len(0);
    out.array_len(0);
    let subs = m.subs();
    out.array_len(subs.len());
    for s in &subs {
        command_entry(out, s);
    }
}

fn command_doc(out: &mut crate::protocol::reply::ReplyWriter, m: &Meta) {
    out.bulk(m.name.as_bytes());
    let subs = m.subs();
    out.map_len(if subs.is_empty() { 4 } else { 5 });
    out.bulk(b"summary");
    out.bulk(m.summary.as_bytes());
    out.bulk(b"since");
    out.bulk(m.since.as_bytes());
    out.bulk(b"group");
    out.bulk(m.group.as_bytes());
    out.bulk(b"complexity");
    out.bulk(b"");
    if !subs.is_empty() {
        out.bulk(b"subcommands");
        out.map_len(subs.len());
        for s in &subs {
            command_doc(out, s);
        }
    }
}

const COMMAND_HELP: &[&str] = &[
    "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "(no subcommand)",
    "    Return details about all Redis commands.",
    "COUNT",
    "    Return the total number of commands in this Redis server.",
    "LIST",
    "    Return a list of all commands in this Redis server.",
    "INFO [<command-name> ...]",
    "    Return details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "DOCS [<command-name> ...]",
    "    Return documentation details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "GETKEYS <full-command>",
    "    Return the keys from a full Redis command.",
    "GETKEYSANDFLAGS <full-command>",
    "    Return the keys and the access flags from a full Redis command.",
    "HELP",
    "    Prints this help.",
];

fn all_commands() -> Vec<Meta> {
    table::table()
        .specs
        .iter()
        .enumerate()
        .map(|(i, s)| Meta::of_command(i as u16, s))
        .collect()
}

fn command(ctx: &mut ClientCtx) {
    let t = table::table();
    let argc = ctx.args.len();
    if argc == 1 {
        let all = all_commands();
        ctx.out.array_len(all.len());
        for m in &all {
            command_entry(&mut ctx.out, m);
        }
        return;
    }
    let sub = String::from_utf8_lossy(ctx.args.get(1)).to_ascii_lowercase();
    match sub.as_str() {
        "help" if argc == 2 => reply_help(&mut ctx.out, COMMAND_HELP),
        "count" if argc == 2 => ctx.out.integer(t.specs.len() as i64),
        "list" => command_list(ctx),
        "info" => {
            if argc == 2 {
                let all = all_commands();
                ctx.out.array_len(all.len());
                for m in &all {
                    command_entry(&mut ctx.out, m);
                }
                return;
            }
            ctx.out.array_len(argc - 2);
            for i in 2..argc {
                match Meta::lookup(ctx.args.get(i)) {
                    Some(m) => command_entry(&mut ctx.out, &m),
                    None => ctx.out.null_array(),
                }
            }
        }
        "docs" => {
            let metas: Vec<Meta> = if argc == 2 {
                all_commands()
            } else {
                (2..argc)
                    .filter_map(|i| Meta::lookup(ctx.args.get(i)))
                    .collect()
            };
            ctx.out.map_len(metas.len());
            for m in &metas {
                command_doc(&mut ctx.out, m);
            }
        }
        "getkeys" | "getkeysandflags" if argc >= 3 => {
            command_getkeys(ctx, sub == "getkeysandflags")
        }
        "count" | "help" | "getkeys" | "getkeysandflags" => ctx.out.error(&format!(
            "ERR wrong number of arguments for 'command|{sub}' command"
        )),
        _ => ctx.out.error(&format!(
            "ERR unknown subcommand '{}'. Try COMMAND HELP.",
            String::from_utf8_lossy(ctx.args.get(1))
        )),
    }
}

/// COMMAND LIST [FILTERBY MODULE name | ACLCAT cat | PATTERN glob]: every command
/// followed by its subcommands (full names).
fn command_list(ctx: &mut ClientCtx) {
    let t = table::table();
    let argc = ctx.args.len();
    let mut names: Vec<(&'static str, &'static [&'static str])> = Vec::new();
    for (i, s) in t.specs.iter().enumerate() {
        names.push((s.name, s.acl));
        names.extend(t.subcommands(i as u16).iter().map(|x| (x.name, x.acl)));
    }
    if argc == 5 && ctx.args.is(2, "filterby") {
        let arg = ctx.args.get(4).to_vec();
        if ctx.args.is(3, "pattern") {
            names.retain(|(n, _)| crate::util::glob::glob_match(&arg, n.as_bytes(), true));
        } else if ctx.args.is(3, "aclcat") {
            let flag = crate::acl::categories::flag_of(&String::from_utf8_lossy(&arg));
            names.retain(|(n, _)| {
                let id = t.lookup_full(n.as_bytes()).unwrap_or(0);
                flag.is_some_and(|f| crate::acl::categories::categories_of(id) & f != 0)
            });
        } else if ctx.args.is(3, "module") {
            names.clear();
        } else {
            return ctx.out.error(SYNTAX_ERR);
        }
    } else if argc != 2 {
        return ctx.out.error(SYNTAX_ERR);
    }
    ctx.out.array_len(names.len());
    for (n, _) in names {
        ctx.out.bulk(n.as_bytes());
    }
}

/// The keys of a command (`args` from its name on) with what ACL permission each
/// needs (Redis's key-spec flags: ACCESS reads; INSERT, DELETE and UPDATE write).
pub(crate) fn key_permissions(args: &super::Args) -> Vec<(usize, u8)> {
    let Some((_, keyspec, name, _)) = getkeys_target(args) else {
        return Vec::new();
    };
    keyspec
        .positions(args)
        .enumerate()
        .filter_map(|(n, pos)| {
            let flags = key_flags(name, args, n);
            if flags.contains("not_key") {
                // A shard channel (SPUBLISH, SSUBSCRIBE): routed as a key, checked
                // as a channel.
                return None;
            }
            let mut perm = 0;
            for word in flags.split(' ') {
                match word {
                    "access" => perm |= crate::acl::READ,
                    "insert" | "delete" | "update" => perm |= crate::acl::WRITE,
                    _ => {}
                }
            }
            Some((pos, perm))
        })
        .collect()
}

/// The command (or, for a container, the subcommand) an argv names, with its flags,
/// key positions and full name.
fn getkeys_target(args: &super::Args) -> Option<(u32, KeySpec, &'static str, i16)> {
    let t = table::table();
    let (idx, spec) = table::lookup(args.get(0))?;
    if t.subcommands(idx).is_empty() {
        return Some((spec.flags, spec.keys, spec.name, spec.arity));
    }
    let id = t.stat_id(idx, args);
    let sub = t.stat_sub(id)?;
    let (first, last, step) = sub.keys;
    let keys = if first == 0 {
        KeySpec::None
    } else {
        KeySpec::Range {
            first: first as u8,
            last,
            step: step as u8,
        }
    };
    Some((sub.flags, keys, sub.name, sub.arity))
}

/// COMMAND GETKEYSANDFLAGS's flags for the `n`-th key found: Redis's key-spec flags
/// (the `n`-th spec, the last one for any further keys), with SET's and BITFIELD's
/// argument-dependent variants.
fn key_flags(name: &str, args: &super::Args, n: usize) -> String {
    if name == "set" {
        let get = (3..args.len()).any(|i| args.is(i, "get"));
        return if get { "RW access update" } else { "OW update" }.to_string();
    }
    if name == "sort" && n > 0 {
        // SORT's middle spec (BY / GET patterns) never yields a key here.
        return "OW update".to_string();
    }
    if name == "bitfield" {
        let write = (2..args.len()).any(|i| args.is(i, "set") || args.is(i, "incrby"));
        return if write {
            "RW access update"
        } else {
            "RO access"
        }
        .to_string();
    }
    let specs = super::subcommands::KEY_FLAGS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(&[][..], |(_, f)| *f);
    specs
        .get(n.min(specs.len().saturating_sub(1)))
        .unwrap_or(&"RW")
        .to_string()
}

/// Whether every key spec of the command `name` is flagged `not_key`: positions
/// that route like keys but name something else.
fn only_channel_specs(name: &str) -> bool {
    super::subcommands::KEY_FLAGS
        .iter()
        .find(|(n, _)| *n == name)
        .is_some_and(|(_, specs)| !specs.is_empty() && specs.iter().all(|f| f.contains("not_key")))
}

fn command_getkeys(ctx: &mut ClientCtx, with_flags: bool) {
    let cmd_args = ctx.args.tail(2);
    let Some((cmd_flags, keyspec, name, arity)) = getkeys_target(&cmd_args) else {
        return ctx.out.error("ERR Invalid command specified");
    };
    // Redis's doesCommandHaveKeys: a command whose every key spec is a NOT_KEY
    // (SPUBLISH's and SSUBSCRIBE's shard channels) has none to report.
    if matches!(keyspec, KeySpec::None) || only_channel_specs(name) {
        return ctx.out.error("ERR The command has no key arguments");
    }
    let argc = cmd_args.len() as isize;
    let arity_ok = if arity >= 0 {
        argc == arity as isize
    } else {
        argc >= -(arity as isize)
    };
    if !arity_ok {
        return ctx
            .out
            .error("ERR Invalid number of arguments specified for command");
    }
    let keys: Vec<usize> = keyspec.positions(&cmd_args).collect();
    if keys.is_empty() {
        if cmd_flags & flags::NO_MANDATORY_KEYS != 0 {
            return ctx.out.array_len(0);
        }
        return ctx.out.error("ERR Invalid arguments specified for command");
    }
    ctx.out.array_len(keys.len());
    for (n, p) in keys.into_iter().enumerate() {
        if with_flags {
            ctx.out.array_len(2);
            ctx.out.bulk(cmd_args.get(p));
            let f = key_flags(name, &cmd_args, n);
            let words: Vec<&str> = f.split(' ').collect();
            ctx.out.set_len(words.len());
            for w in words {
                ctx.out.simple(w);
            }
        } else {
            ctx.out.bulk(cmd_args.get(p));
        }
    }
}

const MODULE_HELP: &[&str] = &[
    "MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LIST",
    "    Return a list of loaded modules.",
    "LOAD <path> [<arg> ...]",
    "    Load a module library from <path>, passing to it any optional arguments.",
    "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
    "    Load a module library from <path>, while passing it module configurations and optional arguments.",
    "UNLOAD <name>",
    "    Unload a module.",
    "HELP",
    "    Prints this help.",
];

/// MODULE, once `enable-module-command` lets it run: Tessera loads no Redis
/// modules (they are C code written against redis-server's internals), so the
/// list is always empty and a load fails as a failed dlopen does in Redis, with
/// the reason in the log.
fn module<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let argc = g.args.len();
        if g.is(1, "help") && argc == 2 {
            reply_help(&mut g.w(), MODULE_HELP);
        } else if g.is(1, "list") && argc == 2 {
            g.w().array_len(0);
        } else if (g.is(1, "load") || g.is(1, "loadex")) && argc >= 3 {
            tracing::warn!(
                "Module {} failed to load: Tessera does not load Redis modules",
                String::from_utf8_lossy(g.arg(2))
            );
            g.error("ERR Error loading the extension. Please check the server logs.");
        } else if g.is(1, "unload") && argc == 3 {
            g.error("ERR Error unloading module: no such module with that name");
        } else {
            g.unknown_subcommand("MODULE");
        }
    })
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT] (`server::shutdown`): replies only
/// when the server does not exit.
fn shutdown<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let mut flags = crate::server::shutdown::Flags::default();
        let mut abort = false;
        for i in 1..g.args.len() {
            if g.is(i, "abort") {
                abort = true;
            } else if !flags.set(&g.args[i]) {
                return g.w().error(SYNTAX_ERR);
            }
        }
        let any_flag = flags != crate::server::shutdown::Flags::default();
        if (abort && any_flag) || (flags.save && flags.nosave) {
            return g.w().error(SYNTAX_ERR);
        }
        if abort {
            return match crate::server::shutdown::abort() {
                true => g.w().ok(),
                false => g.w().error("ERR No shutdown in progress."),
            };
        }
        // A script past busy-reply-threshold holds its keys: only NOSAVE may stop it.
        if !flags.nosave {
            if let Some(busy) = crate::scripting::busy_error() {
                return g.w().error(busy);
            }
        }
        let cell = g.session.cell.clone();
        // Counted in blocked_clients while it waits (for replicas, or for another
        // SHUTDOWN), as Redis blocks the caller.
        let shared = g.session.shared.clone();
        shared.paused.set(true);
        crate::server::shutdown::shutdown_command(&cell, flags).await;
        shared.paused.set(false);
        g.w().error("ERR Errors trying to SHUTDOWN. Check logs.");
    })
}

const MEMORY_HELP: &[&str] = &[
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
    "HELP",
    "    Prints this help.",
];

fn memory<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let sub = String::from_utf8_lossy(&g.args[1]).to_ascii_lowercase();
        let argc = g.args.len();
        match sub.as_str() {
            "usage" if argc == 3 || argc == 5 => {
                if argc == 5 && (!g.is(3, "samples") || parse_i64(&g.args[4]).is_none_or(|n| n < 0))
                {
                    let msg = if g.is(3, "samples") {
                        super::NOT_INT
                    } else {
                        SYNTAX_ERR
                    };
                    return g.error(msg);
                }
                let key = g.args[2].clone();
                let db = g.session.db;
                let cell = g.session.cell.clone();
                let shard = cell.shard_of(&key);
                // Tessera measures collections from their structure (segment and
                // node sizes), so SAMPLES needs no sampling: the figure is exact.
                let size = cell
                    .call(shard, move |c| {
                        let mut d = c.data.borrow_mut();
                        d.dbs[db].get(&key, crate::util::now_ms()).map(|e| {
                            crate::storage::keyspace::entry_cost(e.block_size(), e.value()) as i64
                        })
                    })
                    .await;
                match size {
                    Some(n) => g.w().integer(n),
                    None => g.w().null(),
                }
            }
            "doctor" if argc == 2 => {
                let text = memory_doctor();
                g.w().verbatim("txt", text.as_bytes())
            }
            "malloc-stats" if argc == 2 => {
                let text = memory::malloc_stats_text();
                g.w().verbatim("txt", text.as_bytes())
            }
            "purge" if argc == 2 => {
                memory::purge();
                g.w().ok()
            }
            "stats" if argc == 2 => memory_stats(g).await,
            "help" if argc == 2 => reply_help(&mut g.w(), MEMORY_HELP),
            "usage" | "doctor" | "malloc-stats" | "purge" | "stats" | "help" => {
                let msg = format!("ERR wrong number of arguments for 'memory|{sub}' command");
                g.error(&msg)
            }
            _ => g.unknown_subcommand("MEMORY"),
        }
    })
}

/// Redis's MEMORY DOCTOR: the same diagnoses, from the same figures.
fn memory_doctor() -> String {
    let used = memory::used_memory();
    let peak = memory::peak().max(used);
    let rss = rss_bytes();
    let a = memory::alloc_stats();
    if used < 5 * 1024 * 1024 {
        return "Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I will be back to our programming as soon as I finished rebooting.".to_string();
    }
    let mut issues = Vec::new();
    if peak as f64 / used as f64 > 1.5 {
        issues.push(" * Peak memory: In the past this instance used more than 150% the memory that is currently using. The allocator is normally not able to release memory after a peak, so you can expect to see a big fragmentation ratio, however this is actually harmless and is only due to the memory peak, and if the Redis instance Resident Set Size (RSS) is currently bigger than expected, the memory will be used as soon as you fill the Redis instance with more data. If the memory peak was only occasional and you want to try to reclaim memory, please try the MEMORY PURGE command, otherwise the only other option is to shutdown and restart the instance.\n\n");
    }
    if ratio(a.active, a.allocated) > 1.1 && a.active - a.allocated > 10 << 20 {
        issues.push(" * High allocator fragmentation: This instance has an allocator external fragmentation greater than 1.1. This problem is usually due either to a large peak memory (check if there is a peak memory entry above in the report) or may result from a workload that causes the allocator to fragment memory a lot. You can try enabling 'activedefrag' config option.\n\n");
    }
    if ratio(rss, a.resident) > 1.1 && rss.saturating_sub(a.resident) > 10 << 20 {
        issues.push(" * High process RSS overhead: This instance has non-allocator RSS overhead greater than 1.1 (this means that the Resident Set Size of the Redis process is much larger than the RSS the allocator holds). This problem may be due to Lua scripts or Modules.\n\n");
    }
    if issues.is_empty() {
        return "Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.".to_string();
    }
    let mut s =
        "Sam, I detected a few issues in this Redis instance memory implants:\n\n".to_string();
    for i in issues {
        s.push_str(i);
    }
    s.push_str("I'm here to keep you safe, Sam. I want to help you.\n");
    s
}

/// MEMORY STATS in Redis 7.0's order: allocator figures, per-database key counts,
/// and the keyspace's own accounting for the dataset.
async fn memory_stats(g: &mut GlobalCtx<'_>) {
    let cell = g.session.cell.clone();
    let per_shard: Vec<(Vec<(usize, usize)>, u64)> = cell
        .call_all(|c| {
            let d = c.data.borrow();
            (
                d.dbs
                    .iter()
                    .map(|db| (db.len(), db.expires_len()))
                    .collect(),
                d.dataset_bytes(),
            )
        })
        .await;
    let ndb = per_shard.first().map_or(0, |v| v.0.len());
    let totals: Vec<(usize, usize, usize)> = (0..ndb)
        .map(|i| {
            per_shard
                .iter()
                .fold((i, 0, 0), |(i, k, e), s| (i, k + s.0[i].0, e + s.0[i].1))
        })
        .filter(|t| t.1 > 0)
        .collect();
    let keys: u64 = totals.iter().map(|t| t.1 as u64).sum();
    let dataset_keys: u64 = per_shard.iter().map(|s| s.1).sum();
    let a = memory::alloc_stats();
    let used = memory::used_memory();
    let peak = memory::peak().max(used);
    let startup = memory::startup().min(used);
    let overhead = used.saturating_sub(dataset_keys).max(startup).min(used);
    let dataset = used - overhead;
    let rss = rss_bytes();
    let entry = crate::storage::keyspace::SLOT_COST as u64;
    let mut w = g.w();
    w.map_len(27 + totals.len());
    let int = |w: &mut crate::protocol::reply::ReplyWriter, k: &str, v: i64| {
        w.bulk(k.as_bytes());
        w.integer(v);
    };
    let dbl = |w: &mut crate::protocol::reply::ReplyWriter, k: &str, v: f64| {
        w.bulk(k.as_bytes());
        w.double(v);
    };
    int(&mut w, "peak.allocated", peak as i64);
    int(&mut w, "total.allocated", used as i64);
    int(&mut w, "startup.allocated", startup as i64);
    for k in [
        "replication.backlog",
        "clients.slaves",
        "clients.normal",
        "cluster.links",
        "aof.buffer",
        "lua.caches",
        "functions.caches",
    ] {
        int(&mut w, k, 0);
    }
    for (i, k, e) in &totals {
        w.bulk(format!("db.{i}").as_bytes());
        w.map_len(2);
        int(
            &mut w,
            "overhead.hashtable.main",
            (*k as u64 * entry) as i64,
        );
        int(&mut w, "overhead.hashtable.expires", (*e as u64 * 8) as i64);
    }
    int(&mut w, "overhead.total", overhead as i64);
    int(&mut w, "keys.count", keys as i64);
    let per_key = used.saturating_sub(startup).checked_div(keys).unwrap_or(0);
    int(&mut w, "keys.bytes-per-key", per_key as i64);
    int(&mut w, "dataset.bytes", dataset as i64);
    dbl(
        &mut w,
        "dataset.percentage",
        ratio(dataset * 100, used.saturating_sub(startup)),
    );
    dbl(&mut w, "peak.percentage", ratio(used * 100, peak));
    int(&mut w, "allocator.allocated", a.allocated as i64);
    int(&mut w, "allocator.active", a.active as i64);
    int(&mut w, "allocator.resident", a.resident as i64);
    dbl(
        &mut w,
        "allocator-fragmentation.ratio",
        ratio(a.active, a.allocated),
    );
    int(
        &mut w,
        "allocator-fragmentation.bytes",
        a.active as i64 - a.allocated as i64,
    );
    dbl(&mut w, "allocator.rss-ratio", ratio(a.resident, a.active));
    int(
        &mut w,
        "allocator.rss-bytes",
        a.resident as i64 - a.active as i64,
    );
    dbl(&mut w, "rss-overhead.ratio", ratio(rss, a.resident));
    int(&mut w, "rss-overhead.bytes", rss as i64 - a.resident as i64);
    dbl(&mut w, "fragmentation", ratio(rss, used));
    int(&mut w, "fragmentation.bytes", rss as i64 - used as i64);
}

/// INFO replication: the role (REPLICAOF) and the link to the master, attached
/// replica links and the stream offset. A replica that synced reports its master's
/// replication id and the offset it applied, as Redis's replicas do.
fn info_replication(out: &mut String, config: &crate::config::Config) {
    let replid = crate::replication::replid();
    let offset = crate::effects::offset();
    out.push_str("# Replication\r\n");
    match crate::replication::master() {
        Some((host, port)) => {
            let _ = write!(
                out,
                "role:slave\r\nmaster_host:{host}\r\nmaster_port:{port}\r\n"
            );
            crate::replication::link::info_fields(out);
            let _ = write!(
                out,
                "slave_priority:{}\r\nslave_read_only:{}\r\nreplica_announced:{}\r\n",
                config.int_param("replica-priority").unwrap_or(100),
                u8::from(config.replica_read_only()),
                u8::from(config.bool_param("replica-announced").unwrap_or(true)),
            );
        }
        None => out.push_str("role:master\r\n"),
    }
    let _ = write!(
        out,
        "connected_slaves:{}\r\n",
        crate::replication::link_count()
    );
    let max_lag = config.min_replicas_max_lag();
    if config.min_replicas_to_write() > 0 && max_lag > 0 {
        let good = crate::replication::good_replicas(max_lag);
        let _ = write!(out, "min_slaves_good_slaves:{good}\r\n");
    }
    crate::replication::info_lines(out);
    let (replid2, second) = crate::replication::replid2();
    let (active, size, first, histlen) = match crate::effects::backlog_info() {
        Some((size, first, len)) => (1, size, first, len),
        None => (
            0,
            config.int_param("repl-backlog-size").unwrap_or(1 << 20) as usize,
            0,
            0,
        ),
    };
    let _ = write!(
        out,
        "master_failover_state:{}\r\nmaster_replid:{replid}\r\nmaster_replid2:{replid2}\r\nmaster_repl_offset:{offset}\r\nsecond_repl_offset:{second}\r\nrepl_backlog_active:{active}\r\nrepl_backlog_size:{size}\r\nrepl_backlog_first_byte_offset:{first}\r\nrepl_backlog_histlen:{histlen}\r\n",
        crate::replication::failover::state_name(),
    );
}
