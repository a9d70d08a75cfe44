//! Pub/Sub commands: (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PUBLISH, SPUBLISH and the
//! PUBSUB container. The machinery (per-shard registries, delivery, the outbox) is in
//! `crate::pubsub`.
//!
//! Shard channels are a namespace of their own, as in Redis; in standalone mode they
//! behave like channels, so they are registered at the subscriber's home shard like
//! the others and SPUBLISH reaches every shard with shard-channel subscribers.

use std::future::Future;
use std::pin::Pin;

use hashbrown::HashSet;

use super::keys::reply_help;
use super::strings::cmd;
use super::table::{flags::*, CommandSpec, KeySpec, Kind, K1, K_ALL};
use super::{ClientCtx, GlobalCtx};
use crate::pubsub::{self as ps, SubKind};

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

const ACL: &[&str] = &["@pubsub"];

macro_rules! pcmd {
    ($name:expr, $arity:expr, $flags:expr, $keys:expr, $kind:expr, $since:expr, $summary:expr) => {
        CommandSpec {
            group: "pubsub",
            acl: ACL,
            ..cmd!($name, $arity, $flags, $keys, $kind, $since, $summary)
        }
    };
}

#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    pcmd!("subscribe", -2, PUBSUB | NOSCRIPT | LOADING | STALE, KeySpec::None, Kind::Client(subscribe), "2.0.0", "Listen for messages published to the given channels"),
    pcmd!("unsubscribe", -1, PUBSUB | NOSCRIPT | LOADING | STALE, KeySpec::None, Kind::Client(unsubscribe), "2.0.0", "Stop listening for messages posted to the given channels"),
    pcmd!("psubscribe", -2, PUBSUB | NOSCRIPT | LOADING | STALE, KeySpec::None, Kind::Client(psubscribe), "2.0.0", "Listen for messages published to channels matching the given patterns"),
    pcmd!("punsubscribe", -1, PUBSUB | NOSCRIPT | LOADING | STALE, KeySpec::None, Kind::Client(punsubscribe), "2.0.0", "Stop listening for messages posted to channels matching the given patterns"),
    pcmd!("ssubscribe", -2, PUBSUB | NOSCRIPT | LOADING | STALE, K_ALL, Kind::Client(ssubscribe), "7.0.0", "Listen for messages published to the given shard channels"),
    pcmd!("sunsubscribe", -1, PUBSUB | NOSCRIPT | LOADING | STALE, K_ALL, Kind::Client(sunsubscribe), "7.0.0", "Stop listening for messages posted to the given shard channels"),
    pcmd!("publish", 3, PUBSUB | LOADING | STALE | FAST | MAY_REPLICATE, KeySpec::None, Kind::Global(publish), "2.0.0", "Post a message to a channel"),
    pcmd!("spublish", 3, PUBSUB | LOADING | STALE | FAST | MAY_REPLICATE, K1, Kind::Global(spublish), "7.0.0", "Post a message to a shard channel"),
    CommandSpec { acl: &[], ..pcmd!("pubsub", -2, 0, KeySpec::None, Kind::Global(pubsub), "2.8.0", "A container for Pub/Sub commands") },
];

/// Commands a RESP2 client may send while subscribed (Redis's processCommand check).
pub fn allowed_while_subscribed(name: &str) -> bool {
    matches!(
        name,
        "ping"
            | "subscribe"
            | "ssubscribe"
            | "unsubscribe"
            | "sunsubscribe"
            | "psubscribe"
            | "punsubscribe"
            | "quit"
            | "reset"
    )
}

/// The error a RESP2 subscribed client gets for any other command.
pub fn subscribed_context_error(name: &str) -> String {
    format!(
        "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
    )
}

fn subscribe_each(ctx: &mut ClientCtx, kind: SubKind) {
    let shared = ctx.session.shared.clone();
    for i in 1..ctx.args.len() {
        ps::subscribe(&shared, kind, ctx.args.get(i));
    }
}

fn unsubscribe_each(ctx: &mut ClientCtx, kind: SubKind) {
    let shared = ctx.session.shared.clone();
    let names: Vec<&[u8]> = (1..ctx.args.len()).map(|i| ctx.args.get(i)).collect();
    ps::unsubscribe(&shared, kind, &names);
}

fn subscribe(ctx: &mut ClientCtx) {
    subscribe_each(ctx, SubKind::Channel)
}

fn psubscribe(ctx: &mut ClientCtx) {
    subscribe_each(ctx, SubKind::Pattern)
}

fn ssubscribe(ctx: &mut ClientCtx) {
    // Inside EXEC a client expects one reply per command (Redis's DENY_BLOCKING);
    // SUBSCRIBE is let through there for backward compatibility, SSUBSCRIBE is not.
    if ctx.session.exec_owner.is_some() {
        return ctx
            .out
            .error("ERR SSUBSCRIBE isn't allowed for a DENY BLOCKING client");
    }
    subscribe_each(ctx, SubKind::Shard)
}

fn unsubscribe(ctx: &mut ClientCtx) {
    unsubscribe_each(ctx, SubKind::Channel)
}

fn punsubscribe(ctx: &mut ClientCtx) {
    unsubscribe_each(ctx, SubKind::Pattern)
}

fn sunsubscribe(ctx: &mut ClientCtx) {
    unsubscribe_each(ctx, SubKind::Shard)
}

fn publish<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(publish_to(g, false))
}

fn spublish<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(publish_to(g, true))
}

async fn publish_to(g: &mut GlobalCtx<'_>, shard: bool) {
    let cell = g.session.cell.clone();
    let n = ps::publish(&cell, shard, g.arg(1), g.arg(2)).await;
    // In a cluster the message reaches the other nodes (SPUBLISH: those of this
    // shard) over the bus, and replicas that way too, not by the replication
    // stream (Redis's clusterPropagatePublish).
    if let Some(node) = crate::cluster::node() {
        let (channel, message) = (g.arg(1), g.arg(2));
        node.with_engine(|engine| engine.publish(channel, message, shard));
        g.propagation.nothing();
    }
    g.w().integer(n as i64);
}

const PUBSUB_HELP: &[&str] = &[
    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CHANNELS [<pattern>]",
    "    Return the currently active channels matching a <pattern> (default: '*').",
    "NUMPAT",
    "    Return number of subscriptions to patterns.",
    "NUMSUB [<channel> ...]",
    "    Return the number of subscribers for the specified channels, excluding",
    "    pattern subscriptions(default: no channels).",
    "SHARDCHANNELS [<pattern>]",
    "    Return the currently active shard level channels matching a <pattern> (default: '*').",
    "SHARDNUMSUB [<shardchannel> ...]",
    "    Return the number of subscribers for the specified shard level channel(s)",
    "HELP",
    "    Prints this help.",
];

fn pubsub<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let sub = String::from_utf8_lossy(g.arg(1)).to_ascii_lowercase();
        let argc = g.args.len();
        match sub.as_str() {
            "help" if argc == 2 => reply_help(&mut g.w(), PUBSUB_HELP),
            "channels" | "shardchannels" if argc <= 3 => channels(g, sub == "shardchannels").await,
            "numsub" | "shardnumsub" => numsub(g, sub == "shardnumsub").await,
            "numpat" if argc == 2 => {
                let cell = g.session.cell.clone();
                let all = cell.call_all(|_| ps::local_patterns()).await;
                let unique: HashSet<Vec<u8>> = all.into_iter().flatten().collect();
                g.w().integer(unique.len() as i64)
            }
            "help" | "numpat" => g.error(&format!(
                "ERR wrong number of arguments for 'pubsub|{sub}' command"
            )),
            "channels" | "shardchannels" => {
                let msg = format!(
                    "ERR unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
                    String::from_utf8_lossy(g.arg(1))
                );
                g.error(&msg)
            }
            _ => g.unknown_subcommand("PUBSUB"),
        }
    })
}

/// PUBSUB CHANNELS / SHARDCHANNELS [pattern]: the union over all shards.
async fn channels(g: &mut GlobalCtx<'_>, shard: bool) {
    let pattern = (g.args.len() == 3).then(|| g.args[2].clone());
    let cell = g.session.cell.clone();
    let all = cell
        .call_all(move |_| ps::local_channels(shard, pattern.as_deref()))
        .await;
    let unique: HashSet<Vec<u8>> = all.into_iter().flatten().collect();
    let mut w = g.w();
    w.array_len(unique.len());
    for c in &unique {
        w.bulk(c);
    }
}

/// PUBSUB NUMSUB / SHARDNUMSUB channel...: subscribers summed over all shards.
async fn numsub(g: &mut GlobalCtx<'_>, shard: bool) {
    let names: Vec<Vec<u8>> = g.args[2..].to_vec();
    let cell = g.session.cell.clone();
    let query = names.clone();
    let per_shard = cell
        .call_all(move |_| ps::local_numsub(shard, &query))
        .await;
    let mut w = g.w();
    w.array_len(names.len() * 2);
    for (i, n) in names.iter().enumerate() {
        w.bulk(n);
        let total: usize = per_shard.iter().filter_map(|v| v.get(i)).sum();
        w.integer(total as i64);
    }
}
