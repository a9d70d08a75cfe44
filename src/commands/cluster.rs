//! The cluster commands of a server that is not in cluster mode: Redis 7.0 with
//! `cluster-enabled no` (Tessera's only mode until cluster mode exists, issue 27)
//! knows CLUSTER, READONLY, READWRITE and ASKING and answers every one of them with
//! the same error; scripts and ACL rules (`+cluster`, `+readonly`) name them as they
//! name any command.

use super::strings::cmd;
use super::table::{flags::*, CommandSpec, KeySpec, Kind};
use super::ClientCtx;

macro_rules! ccmd {
    ($name:expr, $arity:expr, $flags:expr, $acl:expr, $since:expr, $summary:expr) => {
        CommandSpec {
            group: "cluster",
            acl: $acl,
            ..cmd!(
                $name,
                $arity,
                $flags,
                KeySpec::None,
                Kind::Client(disabled),
                $since,
                $summary
            )
        }
    };
}

#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    ccmd!("cluster", -2, 0, &[], "3.0.0", "A container for cluster commands"),
    ccmd!("readonly", 1, LOADING | STALE | FAST, &["@connection"], "3.0.0", "Enables read queries for a connection to a cluster replica node"),
    ccmd!("readwrite", 1, LOADING | STALE | FAST, &["@connection"], "3.0.0", "Disables read queries for a connection to a cluster replica node"),
    ccmd!("asking", 1, FAST, &["@connection"], "3.0.0", "Sent by cluster clients after an -ASK redirect"),
];

/// Redis's reply to every cluster command (its subcommands and HELP included) while
/// `cluster-enabled` is no.
fn disabled(ctx: &mut ClientCtx) {
    ctx.out
        .error("ERR This instance has cluster support disabled");
}
