//! Replication commands: SYNC / PSYNC (a client becomes a replica link; the connection
//! intercepts them, see connection.rs), REPLCONF, REPLICAOF / SLAVEOF, ROLE.
//!
//! REPLICAOF records the master; the link task (replication/link.rs) connects to it.

use super::strings::cmd;
use super::table::{flags::*, CommandSpec, KeySpec, Kind};
use super::ClientCtx;
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
    rcmd!("sync", 1, ADMIN | NOSCRIPT | NO_MULTI, Kind::Client(sync_elsewhere), "1.0.0", "Internal command used for replication"),
    rcmd!("psync", -3, ADMIN | NOSCRIPT | NO_MULTI, Kind::Client(sync_elsewhere), "2.8.0", "Internal command used for replication"),
    rcmd!("replconf", -1, ADMIN | NOSCRIPT | LOADING | STALE | ALLOW_BUSY, Kind::Client(replconf), "3.0.0", "An internal command for configuring the replication stream"),
    rcmd!("replicaof", 3, ADMIN | NOSCRIPT | STALE, Kind::Client(replicaof), "5.0.0", "Make the server a replica of another instance, or promote it as master."),
    rcmd!("slaveof", 3, ADMIN | NOSCRIPT | STALE, Kind::Client(replicaof), "1.0.0", "Make the server a replica of another instance, or promote it as master."),
    rcmd!("role", 1, NOSCRIPT | LOADING | STALE | FAST, Kind::Client(role), "2.8.12", "Return the role of the instance in the context of replication"),
];

/// SYNC / PSYNC reach here only where a connection cannot become a link (a script).
fn sync_elsewhere(ctx: &mut ClientCtx) {
    ctx.out
        .error("ERR Replica can't interact with the keyspace");
}

/// REPLCONF option value pairs a replica sends before SYNC / PSYNC: listening-port
/// and ip-address are kept for INFO's `slaveN:` line, capabilities are accepted.
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
        } else if ctx.args.is(i, "rdb-only") || ctx.args.is(i, "rdb-filter-only") {
            if ctx.args.is(i, "rdb-only") && !matches!(value, b"0" | b"1") {
                return ctx.out.error("ERR value is out of range, must be positive");
            }
        } else if !ctx.args.is(i, "capa") {
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

fn replicaof(ctx: &mut ClientCtx) {
    let mut master = replication::master_slot();
    if ctx.args.is(1, "no") && ctx.args.is(2, "one") {
        if master.take().is_some() {
            replication::set_replica(false);
            replication::link::master_unset();
            drop(master);
            tracing::info!("MASTER MODE enabled (user request)");
            crate::server::role_changed(&ctx.session.cell.data.borrow().config);
        }
        return ctx.out.ok();
    }
    if ctx.session.shared.role.get() == crate::clients::ClientRole::Replica {
        return ctx
            .out
            .error("ERR Command is not valid when client is a replica.");
    }
    let Some(port) = super::parse_i64(ctx.args.get(2)).filter(|p| (0..=65535).contains(p)) else {
        return ctx.out.error("ERR Invalid master port");
    };
    let host = String::from_utf8_lossy(ctx.args.get(1)).into_owned();
    if master.as_ref() == Some(&(host.clone(), port as u16)) {
        tracing::info!("REPLICAOF would result into synchronization with the master we are already connected with. No operation performed.");
        return ctx.out.simple("OK Already connected to specified master");
    }
    tracing::info!("REPLICAOF {host}:{port} enabled (user request)");
    *master = Some((host, port as u16));
    replication::set_replica(true);
    replication::link::master_changed();
    drop(master);
    crate::server::role_changed(&ctx.session.cell.data.borrow().config);
    ctx.out.ok();
}

/// `replicaof host port` in the config file: the same role REPLICAOF records.
pub fn follow_at_start(host: String, port: u16) {
    tracing::info!("REPLICAOF {host}:{port} enabled (config file)");
    *replication::master_slot() = Some((host, port));
    replication::set_replica(true);
    replication::link::master_changed();
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
            ctx.out.array_len(0);
        }
    }
}
