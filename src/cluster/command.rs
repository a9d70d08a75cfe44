//! The CLUSTER command family over the membership engine, with Redis 7.0.15's
//! replies and error texts (clusterCommand in cluster.c), as pure code: the
//! caller hands in the engine, the arguments, what the keyspace and the client
//! say, and a reply writer, and carries out what the engine asks afterwards.
//!
//! `args[0]` is the subcommand (what follows `CLUSTER`). The function checks it
//! and its arity against the subcommand table (`commands::subcommands`) with the
//! texts Redis's command lookup gives, so it answers correctly whether or not the
//! connection's gate checked first.
//!
//! What a command changes goes through `Membership` (its CLUSTER operations are
//! in `membership/admin.rs`). Effects the engine emits while a command runs —
//! `SaveConfig` from `before_sleep`, `TopologyChanged`, `Close`, `ReplicateFrom`
//! ... — stay in the engine for the caller's `take_effects`, as they would after
//! any event. Two things cannot wait for that, and the return value (`After`)
//! says so: CLUSTER SAVECONFIG saves synchronously and its reply depends on the
//! outcome, and CLUSTER RESET on a replica flushes the dataset.
//!
//! Deliberately not mirrored:
//! - MEET's port arguments are range-checked as the 64-bit numbers the client
//!   sent; Redis passes them through a C `int`, so 4294973675 would meet port 6379.
//! - The order of nodes in NODES, SHARDS and LINKS is the node table's, where
//!   Redis's is its hash table's (random per process); clients must not rely on
//!   either.
//! - CLUSTER LINKS' `events` and send-buffer sizes, and INFO's
//!   `total_cluster_links_buffer_limit_exceeded`, are the I/O layer's to report
//!   (`BusStats`); without it they read "r", 0 and 0.

use super::membership::admin::{AdminError, Bump, ResetMode, SetSlot, SlotChange};
use super::membership::{FailoverOption, LinkId, MeetError, Membership};
use super::nodes::{Node, NodeId, NodeTable};
use super::nodes_conf;
use super::redirect::EndpointType;
use super::{wire, NodeName, NAME_LEN, SLOTS};
use crate::commands::subcommands::{SubSpec, SUBS};
use crate::protocol::reply::ReplyWriter;
use crate::util::string2ll;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The keys this node holds, as the slot commands need them.
pub trait Keyspace {
    fn count_keys_in_slot(&self, slot: u16) -> u64;
    /// Up to `count` key names of `slot`.
    fn keys_in_slot(&self, slot: u16, count: usize) -> Vec<Vec<u8>>;
    /// No key at all (FLUSHSLOTS, REPLICATE and RESET want an empty node).
    fn is_empty(&self) -> bool;
}

/// The client asking.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientInfo {
    /// The client's connection is TLS. A plaintext client of a TLS cluster is
    /// given nodes' plaintext ports where they have one, as in Redis.
    pub tls: bool,
}

/// What only the bus's I/O layer knows, for CLUSTER INFO and LINKS. The engine
/// holds everything else (the TLS and endpoint settings are in its `Settings`).
#[derive(Clone, Copy, Default)]
pub struct BusStats<'a> {
    /// CLUSTER INFO's `total_cluster_links_buffer_limit_exceeded`.
    pub links_buffer_limit_exceeded: u64,
    /// CLUSTER LINKS' events and send-buffer sizes of a link; `None` reports
    /// `LinkIo::default()` for every link.
    pub link_io: Option<&'a dyn Fn(LinkId) -> LinkIo>,
}

/// A link as the I/O layer sees it (CLUSTER LINKS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkIo {
    /// "r" while the link waits for input, "rw" while output is also pending,
    /// "" while it is still connecting.
    pub events: &'static str,
    pub send_buffer_allocated: u64,
    pub send_buffer_used: u64,
}

impl Default for LinkIo {
    /// An established link with nothing queued.
    fn default() -> Self {
        LinkIo {
            events: "r",
            send_buffer_allocated: 0,
            send_buffer_used: 0,
        }
    }
}

/// What the caller must do before the client's next command, beyond taking the
/// engine's effects.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum After {
    /// The reply is written.
    Nothing,
    /// CLUSTER SAVECONFIG: nothing is written yet. Save nodes.conf now, with
    /// fsync, and reply with `saveconfig_reply(&result, out)`.
    SaveConfigNow,
    /// CLUSTER RESET of a replica: OK is written; empty the whole dataset now
    /// (after carrying out the engine's `StopReplicating`), as Redis's emptyData.
    FlushData,
}

/// The reply to CLUSTER SAVECONFIG once the caller saved (or failed to).
pub fn saveconfig_reply(result: &std::io::Result<()>, out: &mut ReplyWriter<'_>) {
    match result {
        Ok(()) => out.ok(),
        Err(e) => out.error(&format!(
            "ERR error saving the cluster node config: {}",
            crate::util::io_error_text(e)
        )),
    }
}

/// Runs `CLUSTER <args...>` (`args[0]` is the subcommand) on `engine`, writing
/// the reply to `out` (except for SAVECONFIG: see `After`). `now` is the wall
/// clock in milliseconds.
pub fn cluster_command(
    engine: &mut Membership,
    args: &[&[u8]],
    keyspace: &dyn Keyspace,
    client: &ClientInfo,
    bus: &BusStats<'_>,
    now: u64,
    out: &mut ReplyWriter<'_>,
) -> After {
    let Some(&sub) = args.first() else {
        out.error("ERR wrong number of arguments for 'cluster' command");
        return After::Nothing;
    };
    let Some(spec) = subcommand(sub) else {
        let mut msg = b"ERR unknown subcommand '".to_vec();
        msg.extend_from_slice(c_str(sub, 128));
        msg.extend_from_slice(b"'. Try CLUSTER HELP.");
        error_bytes(out, &msg);
        return After::Nothing;
    };
    // The container counts as an argument, as in Redis's arity.
    if !spec.arity_ok(args.len() + 1) {
        out.error(&format!(
            "ERR wrong number of arguments for '{}' command",
            spec.name
        ));
        return After::Nothing;
    }
    let use_pport = engine.settings.tls_cluster && !client.tls;
    match spec.short() {
        "help" => help(out),
        "meet" => meet(engine, args, now, out),
        "nodes" => out.verbatim("txt", nodes_text(engine, use_pport).as_bytes()),
        "myid" => out.bulk(engine.table.me().name.as_bytes()),
        "slots" => slots(engine, use_pport, out),
        "shards" => shards(engine, out),
        "flushslots" => reply_unit(engine.flush_slots(keyspace.is_empty()), out),
        "addslots" | "delslots" => slot_list(engine, args, out),
        "addslotsrange" | "delslotsrange" => slot_ranges(engine, args, out),
        "setslot" => setslot(engine, args, keyspace, now, out),
        "bumpepoch" => bump_epoch(engine, out),
        "info" => out.verbatim("txt", info_text(engine, bus).as_bytes()),
        "saveconfig" => return After::SaveConfigNow,
        "keyslot" => out.integer(i64::from(crate::slot::key_slot(args[1]))),
        "countkeysinslot" => count_keys_in_slot(args, keyspace, out),
        "getkeysinslot" => get_keys_in_slot(args, keyspace, out),
        "forget" => forget(engine, args, now, out),
        "replicate" => replicate(engine, args, keyspace, out),
        "slaves" | "replicas" => replicas(engine, args, use_pport, out),
        "count-failure-reports" => count_failure_reports(engine, args, now, out),
        "failover" => failover(engine, args, now, out),
        "set-config-epoch" => set_config_epoch(engine, args, out),
        "reset" => return reset(engine, args, keyspace, out),
        "links" => links(engine, bus, out),
        _ => subcommand_syntax_error(sub, out),
    }
    After::Nothing
}

/// The table's entry for `cluster|<sub>`, any case.
fn subcommand(sub: &[u8]) -> Option<&'static SubSpec> {
    SUBS.iter()
        .find(|s| s.parent() == "cluster" && s.short().as_bytes().eq_ignore_ascii_case(sub))
}

// ---------------------------------------------------------------------------------
// Replies shared by the subcommands

/// addReplyErrorFormat with client bytes in the text: "-" + `msg` with CR and
/// LF trimmed off the ends and turned into spaces inside (so the client's bytes
/// cannot break the protocol), kept as bytes where `ReplyWriter::error` takes
/// text.
fn error_bytes(out: &mut ReplyWriter<'_>, msg: &[u8]) {
    let is_eol = |b: &u8| *b == b'\r' || *b == b'\n';
    let start = msg.iter().position(|b| !is_eol(b)).unwrap_or(msg.len());
    let end = msg
        .iter()
        .rposition(|b| !is_eol(b))
        .map_or(start, |i| i + 1);
    out.out.push(b'-');
    out.out.extend(
        msg[start..end]
            .iter()
            .map(|&b| if is_eol(&b) { b' ' } else { b }),
    );
    out.out.extend_from_slice(b"\r\n");
}

/// `ERR <prefix><arg>`, `arg` being client bytes printed with `%s`.
fn error_with(out: &mut ReplyWriter<'_>, prefix: &str, arg: &[u8]) {
    let mut msg = format!("ERR {prefix}").into_bytes();
    msg.extend_from_slice(c_str(arg, usize::MAX));
    error_bytes(out, &msg);
}

/// What C's `%.<max>s` prints of an argument: up to its first NUL, at most
/// `max` bytes.
fn c_str(arg: &[u8], max: usize) -> &[u8] {
    let end = arg.iter().position(|&b| b == 0).unwrap_or(arg.len());
    &arg[..end.min(max)]
}

/// addReplySubcommandSyntaxError: the subcommand exists, its arguments do not
/// fit any of its forms.
fn subcommand_syntax_error(sub: &[u8], out: &mut ReplyWriter<'_>) {
    let mut msg = b"ERR unknown subcommand or wrong number of arguments for '".to_vec();
    msg.extend_from_slice(c_str(sub, 128));
    msg.extend_from_slice(b"'. Try CLUSTER HELP.");
    error_bytes(out, &msg);
}

/// OK, or the operation's refusal.
fn reply_unit(result: Result<(), AdminError>, out: &mut ReplyWriter<'_>) {
    match result {
        Ok(()) => out.ok(),
        Err(e) => out.error(&format!("ERR {e}")),
    }
}

/// getSlotOrReply.
fn parse_slot(arg: &[u8]) -> Result<u16, AdminError> {
    string2ll(arg)
        .filter(|slot| (0..SLOTS as i64).contains(slot))
        .map(|slot| slot as u16)
        .ok_or(AdminError::InvalidSlot)
}

/// getLongLongFromObjectOrReply with Redis's default message.
fn parse_integer(arg: &[u8], out: &mut ReplyWriter<'_>) -> Option<i64> {
    let value = string2ll(arg);
    if value.is_none() {
        out.error("ERR value is not an integer or out of range");
    }
    value
}

/// DEBUG CLUSTERLINK KILL <to|from|all> <node-id> (debug.c): drops this node's
/// bus links with that node; the cron reconnects them.
pub fn debug_clusterlink_kill(
    engine: &mut Membership,
    direction: &[u8],
    node: &[u8],
    out: &mut ReplyWriter<'_>,
) {
    let Some(id) = lookup(&engine.table, node) else {
        return error_with(out, "Unknown node ", node);
    };
    let (to, from) = match direction.to_ascii_lowercase().as_slice() {
        b"to" => (true, false),
        b"from" => (false, true),
        b"all" => (true, true),
        _ => return error_with(out, "Unknown direction ", direction),
    };
    engine.kill_links(id, to, from);
    out.ok();
}

/// clusterLookupNode: a node ID is 40 characters of a-z and 0-9
/// (verifyClusterNodeId), anything else names no node.
fn lookup(table: &NodeTable, text: &[u8]) -> Option<NodeId> {
    let valid = text.len() == NAME_LEN
        && text
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !valid {
        return None;
    }
    let mut name = [0u8; NAME_LEN];
    name.copy_from_slice(text);
    table.lookup(&NodeName(name))
}

/// A node the client named, or `Unknown node <id>` written.
fn lookup_or_reply(table: &NodeTable, text: &[u8], out: &mut ReplyWriter<'_>) -> Option<NodeId> {
    let node = lookup(table, text);
    if node.is_none() {
        error_with(out, "Unknown node ", text);
    }
    node
}

// ---------------------------------------------------------------------------------
// HELP

const HELP: &[&str] = &[
    "ADDSLOTS <slot> [<slot> ...]",
    "    Assign slots to current node.",
    "ADDSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
    "    Assign slots which are between <start-slot> and <end-slot> to current node.",
    "BUMPEPOCH",
    "    Advance the cluster config epoch.",
    "COUNT-FAILURE-REPORTS <node-id>",
    "    Return number of failure reports for <node-id>.",
    "COUNTKEYSINSLOT <slot>",
    "    Return the number of keys in <slot>.",
    "DELSLOTS <slot> [<slot> ...]",
    "    Delete slots information from current node.",
    "DELSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
    "    Delete slots information which are between <start-slot> and <end-slot> from current node.",
    "FAILOVER [FORCE|TAKEOVER]",
    "    Promote current replica node to being a master.",
    "FORGET <node-id>",
    "    Remove a node from the cluster.",
    "GETKEYSINSLOT <slot> <count>",
    "    Return key names stored by current node in a slot.",
    "FLUSHSLOTS",
    "    Delete current node own slots information.",
    "INFO",
    "    Return information about the cluster.",
    "KEYSLOT <key>",
    "    Return the hash slot for <key>.",
    "MEET <ip> <port> [<bus-port>]",
    "    Connect nodes into a working cluster.",
    "MYID",
    "    Return the node id.",
    "NODES",
    "    Return cluster configuration seen by node. Output format:",
    "    <id> <ip:port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
    "REPLICATE <node-id>",
    "    Configure current node as replica to <node-id>.",
    "RESET [HARD|SOFT]",
    "    Reset current node (default: soft).",
    "SET-CONFIG-EPOCH <epoch>",
    "    Set config epoch of current node.",
    "SETSLOT <slot> (IMPORTING <node-id>|MIGRATING <node-id>|STABLE|NODE <node-id>)",
    "    Set slot state.",
    "REPLICAS <node-id>",
    "    Return <node-id> replicas.",
    "SAVECONFIG",
    "    Force saving cluster configuration on disk.",
    "SLOTS",
    "    Return information about slots range mappings. Each range is made of:",
    "    start, end, master and replicas IP addresses, ports and ids",
    "SHARDS",
    "    Return information about slot range mappings and the nodes associated with them.",
    "LINKS",
    "    Return information about all network links between this node and its peers.",
    "    Output format is an array where each array element is a map containing attributes of a link",
];

/// addReplyHelp: a header, the lines, and HELP's own entry.
fn help(out: &mut ReplyWriter<'_>) {
    out.array_len(HELP.len() + 3);
    out.simple("CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:");
    for line in HELP {
        out.simple(line);
    }
    out.simple("HELP");
    out.simple("    Prints this help.");
}

// ---------------------------------------------------------------------------------
// MEET

/// CLUSTER MEET <ip> <port> [<bus-port>]: a handshake with that address. A
/// handshake already in progress for it is not an error.
fn meet(engine: &mut Membership, args: &[&[u8]], now: u64, out: &mut ReplyWriter<'_>) {
    if args.len() > 4 {
        return subcommand_syntax_error(args[0], out);
    }
    let Some(port) = string2ll(args[2]) else {
        return error_with(out, "Invalid TCP base port specified: ", args[2]);
    };
    let cport = match args.get(3) {
        Some(arg) => match string2ll(arg) {
            Some(cport) => cport,
            None => return error_with(out, "Invalid TCP bus port specified: ", arg),
        },
        None => port.saturating_add(10_000),
    };
    let valid_port = |p: i64| u16::try_from(p).ok().filter(|&p| p != 0);
    let target = normalize_ip(c_str(args[1], usize::MAX))
        .zip(valid_port(port))
        .zip(valid_port(cport));
    let started = match target {
        Some(((ip, port), cport)) => engine.meet(&ip, port, cport, now),
        None => Err(MeetError::Invalid),
    };
    match started {
        Ok(()) | Err(MeetError::InProgress) => out.ok(),
        Err(MeetError::Invalid) => {
            let mut msg = b"ERR Invalid node address specified: ".to_vec();
            msg.extend_from_slice(c_str(args[1], usize::MAX));
            msg.push(b':');
            msg.extend_from_slice(c_str(args[2], usize::MAX));
            error_bytes(out, &msg);
        }
    }
}

/// An IPv4 or IPv6 address as inet_pton reads it and inet_ntop writes it back
/// (clusterStartHandshake keeps the normalized text).
fn normalize_ip(text: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(text).ok()?;
    if let Ok(v4) = text.parse::<Ipv4Addr>() {
        return Some(v4.to_string());
    }
    text.parse::<Ipv6Addr>().ok().map(|v6| ntop6(&v6))
}

/// glibc's inet_ntop for IPv6: the first longest run of two or more zero
/// groups becomes "::", and an IPv4-compatible or IPv4-mapped address ends in
/// dotted form. (Rust's Display prints IPv4-compatible ones in hex.)
fn ntop6(addr: &Ipv6Addr) -> String {
    let words = addr.segments();
    let (mut best, mut run): ((usize, usize), Option<(usize, usize)>) = ((0, 0), None);
    for (i, &w) in words.iter().enumerate() {
        run = match (w, run) {
            (0, Some((base, len))) => Some((base, len + 1)),
            (0, None) => Some((i, 1)),
            _ => None,
        };
        if let Some((base, len)) = run {
            if len > best.1 {
                best = (base, len);
            }
        }
    }
    let (base, len) = if best.1 >= 2 { best } else { (usize::MAX, 0) };
    let mut text = String::with_capacity(46);
    for (i, &w) in words.iter().enumerate() {
        if (base..base + len).contains(&i) {
            if i == base {
                text.push(':');
            }
            continue;
        }
        if i != 0 {
            text.push(':');
        }
        let embeds_v4 = base == 0 && (len == 6 || (len == 5 && words[5] == 0xffff));
        if i == 6 && embeds_v4 {
            let o = addr.octets();
            let _ = write!(text, "{}.{}.{}.{}", o[12], o[13], o[14], o[15]);
            return text;
        }
        let _ = write!(text, "{w:x}");
    }
    if base + len == 8 {
        text.push(':');
    }
    text
}

// ---------------------------------------------------------------------------------
// NODES and REPLICAS

/// CLUSTER NODES: every node's line (handshake nodes too, which nodes.conf
/// leaves out), each ending in a newline.
fn nodes_text(engine: &Membership, use_pport: bool) -> String {
    let conf = engine.table.to_conf(use_pport, |id| engine.connected(id));
    let mut text = String::with_capacity(conf.nodes.len() * 160);
    for line in &conf.nodes {
        nodes_conf::render_line(line, &mut text);
        text.push('\n');
    }
    text
}

/// CLUSTER REPLICAS <node-id>: the lines of a master's replicas.
fn replicas(engine: &Membership, args: &[&[u8]], use_pport: bool, out: &mut ReplyWriter<'_>) {
    let table = &engine.table;
    let Some(id) = lookup_or_reply(table, args[1], out) else {
        return;
    };
    let Some(master) = table.get(id) else {
        return error_with(out, "Unknown node ", args[1]);
    };
    if master.is_replica() {
        return out.error("ERR The specified node is not a master");
    }
    let replicas: Vec<(NodeId, &Node)> = master
        .replicas()
        .iter()
        .filter_map(|&r| table.get(r).map(|n| (r, n)))
        .collect();
    out.array_len(replicas.len());
    let mut text = String::new();
    for (r, n) in replicas {
        text.clear();
        // A replica serves no slots (a configuration in flux aside).
        let slots = if n.slot_count() == 0 {
            Vec::new()
        } else {
            nodes_conf::ranges_of(n.slots())
        };
        nodes_conf::render_line(
            &table.line_of(r, n, slots, use_pport, &|i| engine.connected(i)),
            &mut text,
        );
        out.bulk(text.as_bytes());
    }
}

// ---------------------------------------------------------------------------------
// SLOTS, SHARDS, LINKS

/// CLUSTER SLOTS: per run of slots with one owner, the range, the owner and
/// its replicas that serve reads (not failing, with data).
fn slots(engine: &Membership, use_pport: bool, out: &mut ReplyWriter<'_>) {
    let preferred = engine.settings.preferred_endpoint;
    let table = &engine.table;
    // The slot map names only nodes in the table; the filter is for the types.
    let runs: Vec<(u16, u16, &Node)> = table
        .slot_runs()
        .into_iter()
        .filter_map(|(first, last, owner)| table.get(owner).map(|m| (first, last, m)))
        .collect();
    out.array_len(runs.len());
    for (first, last, master) in runs {
        let available: Vec<&Node> = master
            .replicas()
            .iter()
            .filter(|&&r| replica_available(engine, r))
            .filter_map(|&r| table.get(r))
            .collect();
        out.array_len(3 + available.len());
        out.integer(i64::from(first));
        out.integer(i64::from(last));
        node_endpoint(master, preferred, use_pport, out);
        for replica in available {
            node_endpoint(replica, preferred, use_pport, out);
        }
    }
}

/// isReplicaAvailable: not failing, and holding data (a replication offset).
fn replica_available(engine: &Membership, id: NodeId) -> bool {
    let Some(node) = engine.table.get(id) else {
        return false;
    };
    !node.failed() && node_offset(engine, id, node) != 0
}

/// A node's replication offset: ours as the server gave it, others' as they
/// announced it.
fn node_offset(engine: &Membership, id: NodeId, node: &Node) -> u64 {
    if id == engine.table.myself() {
        engine.repl_offset()
    } else {
        node.repl_offset
    }
}

/// addNodeToNodeReply: preferred endpoint, port, ID, then a map of the other
/// endpoints known.
fn node_endpoint(node: &Node, preferred: EndpointType, use_pport: bool, out: &mut ReplyWriter<'_>) {
    out.array_len(4);
    match preferred {
        EndpointType::Ip => out.bulk(node.ip.as_bytes()),
        EndpointType::Hostname if node.hostname.is_empty() => out.bulk(b"?"),
        EndpointType::Hostname => out.bulk(node.hostname.as_bytes()),
        EndpointType::UnknownEndpoint => out.null(),
    }
    let port = if use_pport && node.pport != 0 {
        node.pport
    } else {
        node.port
    };
    out.integer(i64::from(port));
    out.bulk(node.name.as_bytes());
    let ip = preferred != EndpointType::Ip;
    let hostname = preferred != EndpointType::Hostname && !node.hostname.is_empty();
    out.map_len(usize::from(ip) + usize::from(hostname));
    if ip {
        out.bulk(b"ip");
        out.bulk(node.ip.as_bytes());
    }
    if hostname {
        out.bulk(b"hostname");
        out.bulk(node.hostname.as_bytes());
    }
}

/// CLUSTER SHARDS: each master (with or without slots) with its slot ranges
/// and the nodes serving them, itself first.
fn shards(engine: &Membership, out: &mut ReplyWriter<'_>) {
    let table = &engine.table;
    let mut ranges = table.slot_ranges_by_node();
    let masters: Vec<(NodeId, &Node)> = table.iter().filter(|(_, n)| n.is_master()).collect();
    out.array_len(masters.len());
    for (id, master) in masters {
        out.map_len(2);
        out.bulk(b"slots");
        let pairs = ranges.remove(&id).unwrap_or_default();
        out.array_len(pairs.len() * 2);
        for (first, last) in pairs {
            out.integer(i64::from(first));
            out.integer(i64::from(last));
        }
        out.bulk(b"nodes");
        let replicas: Vec<(NodeId, &Node)> = master
            .replicas()
            .iter()
            .filter_map(|&r| table.get(r).map(|n| (r, n)))
            .collect();
        out.array_len(1 + replicas.len());
        shard_node(engine, id, master, out);
        for (r, replica) in replicas {
            shard_node(engine, r, replica, out);
        }
    }
}

/// addNodeDetailsToShardReply.
fn shard_node(engine: &Membership, id: NodeId, node: &Node, out: &mut ReplyWriter<'_>) {
    // With tls-cluster, `port` is the TLS one and `pport` the plaintext one.
    let (plain, tls) = if engine.settings.tls_cluster {
        (node.pport, node.port)
    } else {
        (node.port, 0)
    };
    let hostname = !node.hostname.is_empty();
    let fields = 6 + usize::from(plain != 0) + usize::from(tls != 0) + usize::from(hostname);
    out.map_len(fields);
    out.bulk(b"id");
    out.bulk(node.name.as_bytes());
    if plain != 0 {
        out.bulk(b"port");
        out.integer(i64::from(plain));
    }
    if tls != 0 {
        out.bulk(b"tls-port");
        out.integer(i64::from(tls));
    }
    out.bulk(b"ip");
    out.bulk(node.ip.as_bytes());
    out.bulk(b"endpoint");
    out.bulk(match engine.settings.preferred_endpoint {
        EndpointType::Ip => node.ip.as_bytes(),
        EndpointType::Hostname if hostname => node.hostname.as_bytes(),
        EndpointType::Hostname => b"?",
        EndpointType::UnknownEndpoint => b"",
    });
    if hostname {
        out.bulk(b"hostname");
        out.bulk(node.hostname.as_bytes());
    }
    let offset = node_offset(engine, id, node);
    out.bulk(b"role");
    out.bulk(if node.is_replica() {
        b"replica"
    } else {
        b"master"
    });
    out.bulk(b"replication-offset");
    out.integer(i64::try_from(offset).unwrap_or(i64::MAX));
    out.bulk(b"health");
    out.bulk(if node.failed() {
        b"fail"
    } else if node.is_replica() && offset == 0 {
        b"loading"
    } else {
        b"online"
    });
}

/// CLUSTER LINKS: each link attached to a node, as a map.
fn links(engine: &Membership, bus: &BusStats<'_>, out: &mut ReplyWriter<'_>) {
    let links = engine.links();
    out.array_len(links.len());
    for link in links {
        let io = bus.link_io.map_or_else(LinkIo::default, |f| f(link.link));
        let name = engine
            .table
            .get(link.node)
            .map_or(NodeName::NULL, |n| n.name);
        out.map_len(6);
        out.bulk(b"direction");
        out.bulk(if link.inbound { b"from" } else { b"to" });
        out.bulk(b"node");
        out.bulk(name.as_bytes());
        out.bulk(b"create-time");
        out.integer(i64::try_from(link.ctime).unwrap_or(i64::MAX));
        out.bulk(b"events");
        out.bulk(io.events.as_bytes());
        out.bulk(b"send-buffer-allocated");
        out.integer(i64::try_from(io.send_buffer_allocated).unwrap_or(i64::MAX));
        out.bulk(b"send-buffer-used");
        out.integer(i64::try_from(io.send_buffer_used).unwrap_or(i64::MAX));
    }
}

// ---------------------------------------------------------------------------------
// INFO

/// CLUSTER INFO's text, field for field as Redis 7.0.15 writes it: message
/// counters appear only for the types with a non-zero count.
fn info_text(engine: &Membership, bus: &BusStats<'_>) -> String {
    let table = &engine.table;
    let (mut assigned, mut ok, mut pfail, mut fail) = (0, 0, 0, 0);
    for slot in 0..SLOTS {
        let Some(owner) = table.slot_owner(slot).and_then(|o| table.get(o)) else {
            continue;
        };
        assigned += 1;
        if owner.failed() {
            fail += 1;
        } else if owner.timed_out() {
            pfail += 1;
        } else {
            ok += 1;
        }
    }
    let me = table.me();
    let my_epoch = match me.master().and_then(|m| table.get(m)) {
        Some(master) if me.is_replica() => master.config_epoch,
        _ => me.config_epoch,
    };
    let mut text = String::with_capacity(1024);
    let state = if engine.state_ok() { "ok" } else { "fail" };
    let _ = write!(
        text,
        "cluster_state:{state}\r\ncluster_slots_assigned:{assigned}\r\n\
         cluster_slots_ok:{ok}\r\ncluster_slots_pfail:{pfail}\r\n\
         cluster_slots_fail:{fail}\r\ncluster_known_nodes:{}\r\n\
         cluster_size:{}\r\ncluster_current_epoch:{}\r\ncluster_my_epoch:{my_epoch}\r\n",
        table.len(),
        engine.size(),
        table.current_epoch,
    );
    message_stats(&mut text, &engine.messages_sent, "sent");
    message_stats(&mut text, &engine.messages_received, "received");
    let _ = write!(
        text,
        "total_cluster_links_buffer_limit_exceeded:{}\r\n",
        bus.links_buffer_limit_exceeded
    );
    text
}

/// `cluster_stats_messages_<type>_<way>` for each type seen, then the total.
fn message_stats(text: &mut String, counts: &[u64], way: &str) {
    let mut total = 0u64;
    for (kind, &count) in counts.iter().enumerate().filter(|(_, &c)| c != 0) {
        total = total.saturating_add(count);
        let name = wire::kind::name(kind as u16);
        let _ = write!(text, "cluster_stats_messages_{name}_{way}:{count}\r\n");
    }
    let _ = write!(text, "cluster_stats_messages_{way}:{total}\r\n");
}

// ---------------------------------------------------------------------------------
// Slot assignment

/// ADDSLOTS / DELSLOTS <slot>...: every argument parsed first, then each slot
/// checked, then all changed.
fn slot_list(engine: &mut Membership, args: &[&[u8]], out: &mut ReplyWriter<'_>) {
    let del = args[0].eq_ignore_ascii_case(b"delslots");
    let mut slots = Vec::with_capacity(args.len() - 1);
    for arg in &args[1..] {
        match parse_slot(arg) {
            Ok(slot) => slots.push(slot),
            Err(e) => return out.error(&format!("ERR {e}")),
        }
    }
    let mut change = SlotChange::new(del);
    for slot in slots {
        if let Err(e) = engine.check_slots(&mut change, slot, slot) {
            return out.error(&format!("ERR {e}"));
        }
    }
    engine.apply_slots(change);
    out.ok();
}

/// ADDSLOTSRANGE / DELSLOTSRANGE (<first> <last>)...: each pair parsed and
/// checked in turn (so the first error in argument order wins), then all
/// changed.
fn slot_ranges(engine: &mut Membership, args: &[&[u8]], out: &mut ReplyWriter<'_>) {
    // Pairs after the subcommand: an odd count of arguments here (an even
    // argc to Redis, which counts CLUSTER too).
    if args.len().is_multiple_of(2) {
        let name = String::from_utf8_lossy(args[0]).to_ascii_lowercase();
        return out.error(&format!(
            "ERR wrong number of arguments for 'cluster|{name}' command"
        ));
    }
    let del = args[0].eq_ignore_ascii_case(b"delslotsrange");
    let mut change = SlotChange::new(del);
    for pair in args[1..].chunks_exact(2) {
        let checked = parse_slot(pair[0]).and_then(|first| {
            let last = parse_slot(pair[1])?;
            engine.check_slots(&mut change, first, last)
        });
        if let Err(e) = checked {
            return out.error(&format!("ERR {e}"));
        }
    }
    engine.apply_slots(change);
    out.ok();
}

/// CLUSTER SETSLOT <slot> IMPORTING|MIGRATING|NODE <node-id> | STABLE.
fn setslot(
    engine: &mut Membership,
    args: &[&[u8]],
    keyspace: &dyn Keyspace,
    now: u64,
    out: &mut ReplyWriter<'_>,
) {
    if engine.table.me().is_replica() {
        return out.error(&format!("ERR {}", AdminError::NotMaster));
    }
    let slot = match parse_slot(args[1]) {
        Ok(slot) => slot,
        Err(e) => return out.error(&format!("ERR {e}")),
    };
    let target = args.get(3).and_then(|id| lookup(&engine.table, id));
    let action = args[2].to_ascii_lowercase();
    let action = match (action.as_slice(), args.len()) {
        (b"migrating", 4) => SetSlot::Migrating(target),
        (b"importing", 4) => SetSlot::Importing(target),
        (b"stable", 3) => SetSlot::Stable,
        (b"node", 4) => SetSlot::Node(target),
        _ => {
            return out.error(
                "ERR Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP",
            )
        }
    };
    let keys = match action {
        SetSlot::Node(_) => keyspace.count_keys_in_slot(slot),
        _ => 0,
    };
    match engine.set_slot(slot, action, keys, now) {
        Ok(()) => out.ok(),
        Err(AdminError::UnknownNode) => {
            let prefix = match action {
                SetSlot::Node(_) => "Unknown node ",
                _ => "I don't know about node ",
            };
            error_with(out, prefix, args[3]);
        }
        Err(e) => out.error(&format!("ERR {e}")),
    }
}

// ---------------------------------------------------------------------------------
// Keys

/// CLUSTER COUNTKEYSINSLOT <slot>.
fn count_keys_in_slot(args: &[&[u8]], keyspace: &dyn Keyspace, out: &mut ReplyWriter<'_>) {
    let Some(slot) = parse_integer(args[1], out) else {
        return;
    };
    if !(0..SLOTS as i64).contains(&slot) {
        return out.error("ERR Invalid slot");
    }
    let count = keyspace.count_keys_in_slot(slot as u16);
    out.integer(i64::try_from(count).unwrap_or(i64::MAX));
}

/// CLUSTER GETKEYSINSLOT <slot> <count>.
fn get_keys_in_slot(args: &[&[u8]], keyspace: &dyn Keyspace, out: &mut ReplyWriter<'_>) {
    let Some(slot) = parse_integer(args[1], out) else {
        return;
    };
    let Some(count) = parse_integer(args[2], out) else {
        return;
    };
    if !(0..SLOTS as i64).contains(&slot) || count < 0 {
        return out.error("ERR Invalid slot or number of keys");
    }
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    let mut keys = keyspace.keys_in_slot(slot as u16, count);
    keys.truncate(count);
    out.array_len(keys.len());
    for key in &keys {
        out.bulk(key);
    }
}

// ---------------------------------------------------------------------------------
// Nodes and roles

/// CLUSTER FORGET <node-id>.
fn forget(engine: &mut Membership, args: &[&[u8]], now: u64, out: &mut ReplyWriter<'_>) {
    let Some(node) = lookup_or_reply(&engine.table, args[1], out) else {
        return;
    };
    match engine.forget(node, now) {
        Err(AdminError::UnknownNode) => error_with(out, "Unknown node ", args[1]),
        result => reply_unit(result, out),
    }
}

/// CLUSTER REPLICATE <node-id>.
fn replicate(
    engine: &mut Membership,
    args: &[&[u8]],
    keyspace: &dyn Keyspace,
    out: &mut ReplyWriter<'_>,
) {
    let Some(node) = lookup_or_reply(&engine.table, args[1], out) else {
        return;
    };
    let Some(name) = engine.table.get(node).map(|n| n.name) else {
        return error_with(out, "Unknown node ", args[1]);
    };
    match engine.replicate(name.as_bytes(), keyspace.is_empty()) {
        Ok(()) => out.ok(),
        Err(text) => out.error(&format!("ERR {text}")),
    }
}

/// CLUSTER COUNT-FAILURE-REPORTS <node-id>.
fn count_failure_reports(
    engine: &mut Membership,
    args: &[&[u8]],
    now: u64,
    out: &mut ReplyWriter<'_>,
) {
    let Some(node) = lookup_or_reply(&engine.table, args[1], out) else {
        return;
    };
    let count = engine.count_failure_reports(node, now);
    out.integer(i64::try_from(count).unwrap_or(i64::MAX));
}

/// CLUSTER FAILOVER [FORCE|TAKEOVER].
fn failover(engine: &mut Membership, args: &[&[u8]], now: u64, out: &mut ReplyWriter<'_>) {
    if args.len() > 2 {
        return subcommand_syntax_error(args[0], out);
    }
    let option = match args.get(1) {
        None => FailoverOption::Default,
        Some(o) if o.eq_ignore_ascii_case(b"force") => FailoverOption::Force,
        Some(o) if o.eq_ignore_ascii_case(b"takeover") => FailoverOption::Takeover,
        Some(_) => return out.error("ERR syntax error"),
    };
    match engine.failover(option, now) {
        Ok(()) => out.ok(),
        Err(text) => out.error(&format!("ERR {text}")),
    }
}

/// CLUSTER RESET [HARD|SOFT].
fn reset(
    engine: &mut Membership,
    args: &[&[u8]],
    keyspace: &dyn Keyspace,
    out: &mut ReplyWriter<'_>,
) -> After {
    if args.len() > 2 {
        subcommand_syntax_error(args[0], out);
        return After::Nothing;
    }
    let mode = match args.get(1) {
        None => ResetMode::Soft,
        Some(m) if m.eq_ignore_ascii_case(b"hard") => ResetMode::Hard,
        Some(m) if m.eq_ignore_ascii_case(b"soft") => ResetMode::Soft,
        Some(_) => {
            out.error("ERR syntax error");
            return After::Nothing;
        }
    };
    match engine.reset(mode, keyspace.is_empty()) {
        Ok(outcome) => {
            out.ok();
            if outcome.flush_data {
                After::FlushData
            } else {
                After::Nothing
            }
        }
        Err(e) => {
            out.error(&format!("ERR {e}"));
            After::Nothing
        }
    }
}

// ---------------------------------------------------------------------------------
// Epochs

/// CLUSTER SET-CONFIG-EPOCH <epoch>.
fn set_config_epoch(engine: &mut Membership, args: &[&[u8]], out: &mut ReplyWriter<'_>) {
    let Some(epoch) = parse_integer(args[1], out) else {
        return;
    };
    let Ok(epoch) = u64::try_from(epoch) else {
        return out.error(&format!("ERR Invalid config epoch specified: {epoch}"));
    };
    reply_unit(engine.set_config_epoch(epoch), out);
}

/// CLUSTER BUMPEPOCH: `BUMPED <epoch>` or `STILL <epoch>`.
fn bump_epoch(engine: &mut Membership, out: &mut ReplyWriter<'_>) {
    match engine.bump_epoch() {
        Bump::Bumped(epoch) => out.simple(&format!("BUMPED {epoch}")),
        Bump::Still(epoch) => out.simple(&format!("STILL {epoch}")),
    }
}

#[cfg(test)]
mod tests;
