//! CLUSTER, ASKING, READONLY and READWRITE. In cluster mode CLUSTER runs on the
//! node's engine (`cluster::command`), with what it needs of the keys gathered from
//! the shards first; ASKING and READONLY set the client state routing reads
//! (`connection/redirect.rs`). With `cluster-enabled no`, Redis 7.0 answers every
//! one of them with the same error, and so does Tessera; scripts and ACL rules
//! (`+cluster`, `+readonly`) name them as they name any command.

use super::strings::cmd;
use super::table::{flags::*, CommandSpec, KeySpec, Kind};
use super::{ClientCtx, GlobalCtx};
use crate::cluster::command::{self as cluster_cmd, After, BusStats, ClientInfo, Keyspace};
use crate::shard::multi::MultiShardOp;
use std::future::Future;
use std::pin::Pin;

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

macro_rules! ccmd {
    ($name:expr, $arity:expr, $flags:expr, $kind:expr, $acl:expr, $since:expr, $summary:expr) => {
        CommandSpec {
            group: "cluster",
            acl: $acl,
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
    ccmd!("cluster", -2, LOADING | STALE, Kind::Global(cluster), &[], "3.0.0", "A container for cluster commands"),
    ccmd!("readonly", 1, LOADING | STALE | FAST, Kind::Client(readonly), &["@connection"], "3.0.0", "Enables read queries for a connection to a cluster replica node"),
    ccmd!("readwrite", 1, LOADING | STALE | FAST, Kind::Client(readwrite), &["@connection"], "3.0.0", "Disables read queries for a connection to a cluster replica node"),
    ccmd!("asking", 1, FAST, Kind::Client(asking), &["@connection"], "3.0.0", "Sent by cluster clients after an -ASK redirect"),
];

/// Redis's reply to every cluster command (its subcommands and HELP included) while
/// `cluster-enabled` is no.
const DISABLED: &str = "ERR This instance has cluster support disabled";

fn readonly(ctx: &mut ClientCtx) {
    if !crate::cluster::enabled() {
        return ctx.out.error(DISABLED);
    }
    ctx.session.cluster.readonly = true;
    ctx.out.ok();
}

fn readwrite(ctx: &mut ClientCtx) {
    if !crate::cluster::enabled() {
        return ctx.out.error(DISABLED);
    }
    ctx.session.cluster.readonly = false;
    ctx.out.ok();
}

fn asking(ctx: &mut ClientCtx) {
    if !crate::cluster::enabled() {
        return ctx.out.error(DISABLED);
    }
    ctx.session.cluster.ask();
    ctx.out.ok();
}

fn cluster<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(cluster_async(g))
}

async fn cluster_async(g: &mut GlobalCtx<'_>) {
    let Some(node) = crate::cluster::node() else {
        return g.w().error(DISABLED);
    };
    let args: Vec<Vec<u8>> = g.args[1..].to_vec();
    let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let keys = gather(g, &argv).await;
    let client = ClientInfo::default();
    let now = crate::util::now_ms();
    let after = {
        let mut out = g.w();
        node.with_engine(|engine| {
            cluster_cmd::cluster_command(
                engine,
                &argv,
                &keys,
                &client,
                &BusStats::default(),
                now,
                &mut out,
            )
        })
    };
    match after {
        After::Nothing => {}
        After::SaveConfigNow => {
            let result = node.save_config();
            cluster_cmd::saveconfig_reply(&result, &mut g.w());
        }
        After::FlushData => empty_data(g).await,
    }
}

/// What the CLUSTER subcommand about to run needs of the keys, read from the
/// shards before the engine is locked (a shard never waits on the engine while
/// holding what another command waits for).
#[derive(Default)]
struct Gathered {
    slot_count: u64,
    slot_keys: Vec<Vec<u8>>,
    empty: bool,
}

impl Keyspace for Gathered {
    fn count_keys_in_slot(&self, _slot: u16) -> u64 {
        self.slot_count
    }

    fn keys_in_slot(&self, _slot: u16, count: usize) -> Vec<Vec<u8>> {
        self.slot_keys.iter().take(count).cloned().collect()
    }

    fn is_empty(&self) -> bool {
        self.empty
    }
}

/// The slot an argument names, if it is one (the engine replies to a bad one).
fn slot_arg(argv: &[&[u8]], i: usize) -> Option<u16> {
    let n = super::parse_i64(argv.get(i)?)?;
    u16::try_from(n)
        .ok()
        .filter(|s| (*s as usize) < crate::slot::SLOT_COUNT)
}

async fn gather(g: &mut GlobalCtx<'_>, argv: &[&[u8]]) -> Gathered {
    let cell = g.session.cell.clone();
    let sub = argv
        .first()
        .map(|s| s.to_ascii_lowercase())
        .unwrap_or_default();
    let mut out = Gathered::default();
    match sub.as_slice() {
        b"countkeysinslot" | b"getkeysinslot" | b"setslot" => {
            let Some(slot) = slot_arg(argv, 1) else {
                return out;
            };
            let wanted = if sub == b"getkeysinslot" {
                argv.get(2)
                    .and_then(|c| super::parse_i64(c))
                    .and_then(|c| usize::try_from(c).ok())
                    .unwrap_or(0)
            } else {
                0
            };
            let shard = cell.slots.owner(slot);
            let (count, keys) = cell
                .call(shard, move |c| {
                    let d = c.data.borrow();
                    let db = &d.dbs[0];
                    let idx = (slot as usize).saturating_sub(db.first_slot());
                    let keys: Vec<Vec<u8>> = db
                        .slot_entries(idx)
                        .take(wanted)
                        .map(|e| e.key().to_vec())
                        .collect();
                    (db.slot_len(idx) as u64, keys)
                })
                .await;
            out.slot_count = count;
            out.slot_keys = keys;
        }
        b"flushslots" | b"replicate" | b"reset" => {
            let sizes = cell.call_all(|c| c.data.borrow().dbs[0].len()).await;
            out.empty = sizes.iter().all(|n| *n == 0);
        }
        _ => {}
    }
    out
}

/// CLUSTER RESET of a replica: the dataset is emptied (Redis's emptyData), not
/// propagated: the node starts over as a master with no slots.
async fn empty_data(g: &mut GlobalCtx<'_>) {
    let cell = g.session.cell.clone();
    let op = MultiShardOp::lock_all(g.owner(), &cell).await;
    op.on_each(&cell, |d| {
        for db in d.dbs.iter_mut() {
            db.clear();
        }
        d.blocked.signal_all();
    })
    .await;
    op.release(&cell).await;
}
