//! Replication commands: SYNC / PSYNC (a client becomes a replica link; the connection
//! intercepts them, see connection.rs), REPLCONF, REPLICAOF / SLAVEOF, ROLE, WAIT,
//! Redis 7.2's WAITAOF, FAILOVER.
//!
//! REPLICAOF records the master; the link task (replication/link.rs) connects to it.

use super::strings::cmd;
use super::table::{flags::*, CommandSpec, KeySpec, Kind};
use super::{ClientCtx, GlobalCtx};

type Fut<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>;
use crate::replication;

macro_rules! rcmd {
    ($name:expr, $arity:expr, $flags:expr, $kind:expr, $since:expr, $summary:expr) => {
        CommandSpec {
            group: "server",
            acl: &["@admin", "@slow", "@dangerous"],
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
pub(super) use rcmd;

#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    rcmd!("sync", 1, ADMIN | NOSCRIPT | NO_MULTI | NO_ASYNC_LOADING, Kind::Client(sync_elsewhere), "1.0.0", "Internal command used for replication"),
    rcmd!("psync", -3, ADMIN | NOSCRIPT | NO_MULTI | NO_ASYNC_LOADING, Kind::Client(sync_elsewhere), "2.8.0", "Internal command used for replication"),
    rcmd!("replconf", -1, ADMIN | NOSCRIPT | LOADING | STALE | ALLOW_BUSY, Kind::Client(replconf), "3.0.0", "An internal command for configuring the replication stream"),
    rcmd!("replicaof", 3, ADMIN | NOSCRIPT | STALE | NO_ASYNC_LOADING, Kind::Global(replicaof), "5.0.0", "Make the server a replica of another instance, or promote it as master."),
    rcmd!("slaveof", 3, ADMIN | NOSCRIPT | STALE | NO_ASYNC_LOADING, Kind::Global(replicaof), "1.0.0", "Make the server a replica of another instance, or promote it as master."),
    CommandSpec {
        group: "generic",
        acl: &["@slow", "@connection"],
        ..cmd!("wait", 3, NOSCRIPT | WAITS, KeySpec::None, Kind::Global(wait), "3.0.0", "Wait for the synchronous replication of all the write commands sent in the context of the current connection")
    },
    CommandSpec {
        group: "generic",
        acl: &["@slow", "@connection"],
        ..cmd!("waitaof", 4, NOSCRIPT | WAITS, KeySpec::None, Kind::Global(waitaof), "7.2.0", "Blocks until all of the preceding write commands sent by the connection are written to the append-only file of the master and/or replicas.")
    },
    rcmd!("failover", -1, ADMIN | NOSCRIPT | STALE, Kind::Global(failover), "6.2.0", "Start a coordinated failover between this server and one of its replicas."),
    CommandSpec { acl: &["@admin", "@dangerous"], ..rcmd!("role", 1, NOSCRIPT | LOADING | STALE | FAST, Kind::Client(role), "2.8.12", "Return the role of the instance in the context of replication") },
];

/// SYNC / PSYNC reach here only where a connection cannot become a link (a script).
fn sync_elsewhere(ctx: &mut ClientCtx) {
    ctx.out
        .error("ERR Replica can't interact with the keyspace");
}

/// REPLCONF option value pairs a replica sends before SYNC / PSYNC: listening-port
/// and ip-address are kept for INFO's `slaveN:` line, `capa eof` allows a diskless
/// full sync (psync2 is implied by PSYNC itself).
/// ACK reaches a link's own loop (connection.rs); here, from a client that is no
/// replica, it is ignored without a reply. GETACK from this replica's master asks for
/// a REPLCONF ACK (the master connection sends it); from anyone else it is ignored.
fn replconf(ctx: &mut ClientCtx) {
    if ctx.args.len().is_multiple_of(2) {
        return ctx.out.error(super::SYNTAX_ERR);
    }
    let mut i = 1;
    while i < ctx.args.len() {
        let value = ctx.args.get(i + 1);
        if ctx.args.is(i, "listening-port") {
            match super::parse_i64(value).and_then(|p| u16::try_from(p).ok()) {
                Some(port) => ctx.session.shared.replica_port.set(port),
                None => return ctx.out.error(super::NOT_INT),
            }
        } else if ctx.args.is(i, "ip-address") {
            // NET_HOST_STR_LEN (256) including the terminator.
            if value.len() >= 256 {
                let msg = format!(
                    "ERR REPLCONF ip-address provided by replica instance is too long: {} bytes",
                    value.len()
                );
                return ctx.out.error(&msg);
            }
            *ctx.session.shared.replica_ip.borrow_mut() =
                Some(String::from_utf8_lossy(value).into_owned());
        } else if ctx.args.is(i, "getack") {
            if ctx.session.shared.role.get() == crate::clients::ClientRole::Master {
                ctx.session
                    .shared
                    .ack_asked
                    .set(Some(crate::clients::ACK_ASKED));
            }
            return;
        } else if ctx.args.is(i, "ack") {
            return;
        } else if ctx.args.is(i, "rdb-only") {
            let on = match super::parse_i64(value) {
                Some(n @ 0..=1) => n == 1,
                Some(_) => {
                    return ctx
                        .out
                        .error("ERR value is out of range, value must between 0 and 1")
                }
                None => return ctx.out.error(super::NOT_INT),
            };
            ctx.session.shared.replica_rdb_only.set(on);
        } else if ctx.args.is(i, "rdb-filter-only") {
            // Include filters; none at all (`""`) leaves the file empty.
            let mut functions = false;
            for filter in value
                .split(u8::is_ascii_whitespace)
                .filter(|f| !f.is_empty())
            {
                if filter.eq_ignore_ascii_case(b"functions") {
                    functions = true;
                } else {
                    let msg = format!(
                        "ERR Unsupported rdb-filter-only option: {}",
                        String::from_utf8_lossy(filter)
                    );
                    return ctx.out.error(&msg);
                }
            }
            ctx.session.shared.replica_filter.set(Some(functions));
        } else if ctx.args.is(i, "capa") {
            if value.eq_ignore_ascii_case(b"eof") {
                ctx.session.shared.replica_capa_eof.set(true);
            }
        } else {
            let msg = format!(
                "ERR Unrecognized REPLCONF option: {}",
                String::from_utf8_lossy(ctx.args.get(i))
            );
            return ctx.out.error(&msg);
        }
        i += 2;
    }
    ctx.out.ok();
}

fn replicaof<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(replicaof_async(g))
}

/// REPLICAOF host port / NO ONE (Redis's replicaofCommand).
async fn replicaof_async(g: &mut GlobalCtx<'_>) {
    // In a cluster the cluster chooses masters (CLUSTER REPLICATE, failover).
    if crate::cluster::enabled() {
        return g.w().error("ERR REPLICAOF not allowed in cluster mode.");
    }
    if replication::failover::state() != replication::failover::State::None {
        return g.w().error("ERR REPLICAOF not allowed while failing over.");
    }
    let arg = |i: usize| g.args.get(i).map_or(&[][..], |a| a.as_slice());
    let no_one = arg(1).eq_ignore_ascii_case(b"no") && arg(2).eq_ignore_ascii_case(b"one");
    if no_one {
        let cell = g.session.cell.clone();
        // Inside a transaction the link may wait for what the transaction holds.
        if replication::become_master(&cell, g.session.exec_owner.is_none()).await {
            tracing::info!("MASTER MODE enabled (user request)");
        }
        return g.w().ok();
    }
    if g.session.shared.role.get() == crate::clients::ClientRole::Replica {
        return g
            .w()
            .error("ERR Command is not valid when client is a replica.");
    }
    let Some(port) = super::parse_i64(arg(2)).filter(|p| (0..=65535).contains(p)) else {
        return g.w().error("ERR Invalid master port");
    };
    let host = String::from_utf8_lossy(arg(1)).into_owned();
    if replication::master().as_ref() == Some(&(host.clone(), port as u16)) {
        tracing::info!("REPLICAOF would result into synchronization with the master we are already connected with. No operation performed.");
        return g.w().simple("OK Already connected to specified master");
    }
    let cell = g.session.cell.clone();
    replication::become_replica_of(&cell, host.clone(), port as u16).await;
    tracing::info!("REPLICAOF {host}:{port} enabled (user request)");
    g.w().ok();
}

fn failover<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(failover_async(g))
}

/// FAILOVER [TO host port [FORCE]] [ABORT] [TIMEOUT ms] (Redis's failoverCommand).
async fn failover_async(g: &mut GlobalCtx<'_>) {
    if crate::cluster::enabled() {
        return g.w().error(
            "ERR FAILOVER not allowed in cluster mode. Use CLUSTER FAILOVER command instead.",
        );
    }
    let cell = g.session.cell.clone();
    let argc = g.args.len();
    let arg = |i: usize| g.args.get(i).map_or(&[][..], |a| a.as_slice());
    if argc == 2 && arg(1).eq_ignore_ascii_case(b"abort") {
        return match replication::failover::abort_by_user(&cell).await {
            Ok(()) => g.w().ok(),
            Err(e) => g.w().error(&e),
        };
    }
    let mut req = replication::failover::Request {
        target: None,
        timeout_ms: 0,
        force: false,
    };
    let mut j = 1;
    while j < argc {
        let a = arg(j);
        if a.eq_ignore_ascii_case(b"timeout") && j + 1 < argc && req.timeout_ms == 0 {
            let Some(ms) = super::parse_i64(arg(j + 1)) else {
                return g.w().error(super::NOT_INT);
            };
            if ms <= 0 {
                return g.w().error("ERR FAILOVER timeout must be greater than 0");
            }
            req.timeout_ms = ms as u64;
            j += 2;
        } else if a.eq_ignore_ascii_case(b"to") && j + 2 < argc && req.target.is_none() {
            let Some(port) = super::parse_i64(arg(j + 2)) else {
                return g.w().error(super::NOT_INT);
            };
            let host = String::from_utf8_lossy(arg(j + 1)).into_owned();
            req.target = Some((host, port.clamp(0, 65535) as u16));
            j += 3;
        } else if a.eq_ignore_ascii_case(b"force") && !req.force {
            req.force = true;
            j += 1;
        } else {
            return g.w().error(super::SYNTAX_ERR);
        }
    }
    match replication::failover::start(&cell, req).await {
        Ok(()) => g.w().ok(),
        Err(e) => g.w().error(&e),
    }
}

fn wait<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(wait_async(g))
}

/// WAIT numreplicas timeout (Redis's waitCommand): how many replicas acknowledged
/// the stream up to the client's last write, waiting (a GETACK asked of them) until
/// `numreplicas` did or the timeout (ms, 0: none) passed. Inside MULTI or a script it
/// never waits.
async fn wait_async(g: &mut GlobalCtx<'_>) {
    if replication::is_replica() {
        return g.w().error("ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated.");
    }
    let Some(wanted) = super::parse_i64(g.arg(1)) else {
        return g.w().error(super::NOT_INT);
    };
    let timeout = match parse_ms_timeout(g.arg(2)) {
        Ok(t) => t,
        Err(e) => return g.w().error(e),
    };
    // Where this client's last write ends: other clients' later writes are not
    // waited for (Redis's c->woff).
    let offset = g.session.last_write.offset();
    let wanted = wanted.max(0) as usize;
    let count = replication::acked(offset);
    if count >= wanted || denies_blocking(g) {
        return g.w().integer(count as i64);
    }
    crate::effects::request_acks();
    let ready = || Some(replication::acked(offset)).filter(|&n| n >= wanted);
    match block_for_acks(g, timeout, ready).await {
        AckWaitEnd::Ready(n) => g.w().integer(n as i64),
        AckWaitEnd::TimedOut => g.w().integer(replication::acked(offset) as i64),
        AckWaitEnd::Answered => {}
    }
}

fn waitaof<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(waitaof_async(g))
}

/// WAITAOF numlocal numreplicas timeout (Redis 7.2's waitaofCommand): whether this
/// server's AOF, and how many replicas' AOFs, hold on disk the stream up to the
/// client's last write — waiting (a GETACK asked of the replicas) until `numlocal`
/// (0 or 1) and `numreplicas` are reached or the timeout (ms, 0: none) passed.
/// Replies [local, replicas]. Inside MULTI it never waits.
async fn waitaof_async(g: &mut GlobalCtx<'_>) {
    let Some(want) = parse_waitaof(g) else {
        return;
    };
    let offset = g.session.last_write.offset();
    let (local, replicas) = aof_acks(offset);
    if (replicas >= want.replicas && local >= want.local) || denies_blocking(g) {
        return aof_acks_reply(g, (local, replicas));
    }
    crate::effects::request_acks();
    let ready = || {
        // The AOF turned off while waiting for it: the error (Redis's
        // processClientsWaitingReplicas).
        if want.local && !crate::persistence::rewrite::wanted() {
            return Some(Err(WAITAOF_NO_AOF));
        }
        let (local, replicas) = aof_acks(offset);
        (replicas >= want.replicas && local >= want.local).then_some(Ok((local, replicas)))
    };
    match block_for_acks(g, want.timeout, ready).await {
        AckWaitEnd::Ready(Ok(acks)) => aof_acks_reply(g, acks),
        AckWaitEnd::Ready(Err(e)) => g.w().error(e),
        AckWaitEnd::TimedOut => aof_acks_reply(g, aof_acks(offset)),
        AckWaitEnd::Answered => {}
    }
}

const WAITAOF_NO_AOF: &str =
    "ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.";

/// What WAITAOF waits for.
struct AofWanted {
    local: bool,
    replicas: usize,
    timeout: Option<std::time::Duration>,
}

/// WAITAOF's arguments and refusals, in Redis 7.2's order (the numbers, then the
/// role, then the AOF); None once the error is written.
fn parse_waitaof(g: &mut GlobalCtx<'_>) -> Option<AofWanted> {
    let parsed = (|| {
        let local = super::parse_i64(g.arg(1)).ok_or(super::NOT_INT)?;
        if !(0..=1).contains(&local) {
            return Err("ERR value is out of range, value must between 0 and 1");
        }
        let replicas = super::parse_i64(g.arg(2)).ok_or(super::NOT_INT)?;
        if replicas < 0 {
            return Err("ERR value is out of range, must be positive");
        }
        let timeout = parse_ms_timeout(g.arg(3))?;
        if replication::is_replica() {
            return Err("ERR WAITAOF cannot be used with replica instances. Please also note that writes to replicas are just local and are not propagated.");
        }
        if local == 1 && !crate::persistence::rewrite::wanted() {
            return Err(WAITAOF_NO_AOF);
        }
        Ok(AofWanted {
            local: local == 1,
            replicas: replicas as usize,
            timeout,
        })
    })();
    parsed.map_err(|e| g.w().error(e)).ok()
}

/// Whether this server's AOF (0 or 1) and how many replicas' AOFs are fsynced up to
/// `offset` (Redis: fsynced_reploff >= woff, replicationCountAOFAcksByOffset).
fn aof_acks(offset: u64) -> (bool, usize) {
    let local = crate::persistence::aof::fsynced_offset() >= offset as i64;
    (local, replication::aof_acked(offset))
}

fn aof_acks_reply(g: &mut GlobalCtx<'_>, (local, replicas): (bool, usize)) {
    let mut w = g.w();
    w.array_len(2);
    w.integer(local as i64);
    w.integer(replicas as i64);
}

/// A client that may not block (Redis's CLIENT_DENY_BLOCKING): inside MULTI / EXEC
/// or a script WAIT and WAITAOF answer with the counts they have.
fn denies_blocking(g: &GlobalCtx<'_>) -> bool {
    g.session.exec_owner.is_some() || g.session.in_script
}

/// A timeout in milliseconds as Redis's getTimeoutFromObjectOrReply reads it (0:
/// none): an integer, not negative, that does not overflow added to the clock.
fn parse_ms_timeout(arg: &[u8]) -> Result<Option<std::time::Duration>, &'static str> {
    let ms = super::parse_i64(arg).ok_or("ERR timeout is not an integer or out of range")?;
    if ms < 0 {
        return Err("ERR timeout is negative");
    }
    if ms > i64::MAX - crate::util::now_ms() as i64 {
        return Err("ERR timeout is out of range");
    }
    Ok((ms > 0).then(|| std::time::Duration::from_millis(ms as u64)))
}

/// A client blocked in WAIT / WAITAOF: woken with the others by what they wait for
/// (`replication::wake_ack_waiters`), counted in blocked_clients and reachable by
/// CLIENT UNBLOCK and a role change (its `blocked` state) while it lives.
struct AckWait {
    state: std::sync::Arc<crate::shard::blocking::BlockState>,
    shared: std::rc::Rc<crate::clients::ClientShared>,
}

impl AckWait {
    fn new(shared: &std::rc::Rc<crate::clients::ClientShared>) -> AckWait {
        let state = crate::shard::blocking::BlockState::new(shared.id);
        replication::add_ack_waiter(state.clone());
        *shared.blocked.borrow_mut() = Some(state.clone());
        AckWait {
            state,
            shared: shared.clone(),
        }
    }
}

impl Drop for AckWait {
    fn drop(&mut self) {
        *self.shared.blocked.borrow_mut() = None;
        self.state.finish();
        replication::remove_ack_waiter(&self.state);
    }
}

/// How a WAIT / WAITAOF block ended.
enum AckWaitEnd<T> {
    /// What the client waited for is there.
    Ready(T),
    /// The timeout passed, or CLIENT UNBLOCK ... TIMEOUT came: the caller replies
    /// with the counts it has then.
    TimedOut,
    /// Nothing more to write: the error is written (CLIENT UNBLOCK ... ERROR, a role
    /// change), or the client went away.
    Answered,
}

/// Blocks the client (Redis's blockForReplication / blockForAofFsync) until `ready`
/// gives a value, the timeout passes or something else ends the wait.
async fn block_for_acks<T>(
    g: &mut GlobalCtx<'_>,
    timeout: Option<std::time::Duration>,
    mut ready: impl FnMut() -> Option<T>,
) -> AckWaitEnd<T> {
    use super::blocking::WaitEnd;
    use crate::shard::blocking::{unblocked_error, UNBLOCK_ROLE_CHANGE};
    let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
    let shared = g.session.shared.clone();
    let reg = AckWait::new(&shared);
    loop {
        if let Some(v) = ready() {
            return AckWaitEnd::Ready(v);
        }
        match super::blocking::wait(&reg.state, deadline).await {
            WaitEnd::Woken | WaitEnd::Served(_) => continue,
            WaitEnd::TimedOut => return AckWaitEnd::TimedOut,
            WaitEnd::Unblocked(_) if shared.killed.get() => return AckWaitEnd::Answered,
            WaitEnd::Unblocked(mode) => {
                let Some(msg) = unblocked_error(mode) else {
                    return AckWaitEnd::TimedOut;
                };
                g.error(msg);
                g.session.close_after_reply |= mode == UNBLOCK_ROLE_CHANGE;
                return AckWaitEnd::Answered;
            }
        }
    }
}

/// `replicaof host port` in the config file: the same role REPLICAOF records.
pub fn follow_at_start(host: String, port: u16) {
    tracing::info!("REPLICAOF {host}:{port} enabled (config file)");
    *replication::master_slot() = Some((host, port));
    replication::set_replica(true);
    replication::link::master_changed(false);
}

fn role(ctx: &mut ClientCtx) {
    match replication::master() {
        Some((host, port)) => {
            ctx.out.array_len(5);
            ctx.out.bulk(b"slave");
            ctx.out.bulk(host.as_bytes());
            ctx.out.integer(port as i64);
            ctx.out
                .bulk(replication::link::state().role_name().as_bytes());
            ctx.out.integer(replication::link::applied_offset());
        }
        None => {
            ctx.out.array_len(3);
            ctx.out.bulk(b"master");
            ctx.out.integer(crate::effects::offset() as i64);
            let replicas = replication::replica_acks();
            ctx.out.array_len(replicas.len());
            for (ip, port, acked) in replicas {
                ctx.out.array_len(3);
                ctx.out.bulk(ip.as_bytes());
                ctx.out.bulk(port.to_string().as_bytes());
                ctx.out.bulk(acked.to_string().as_bytes());
            }
        }
    }
}
