//! Where a command may run in cluster mode, and the error a client gets when it may
//! not run here: Redis 7.0's `getNodeByQuery`, `clusterRedirectClient` and
//! `clusterRedirectBlockedClientIfNeeded` (cluster.c), with no I/O and no state.
//!
//! The cluster thread publishes a `RoutingTable` (who serves each slot, which of
//! this node's slots are migrating or importing, the cluster state and the settings
//! that bend the rules) whenever any of it changes; a connection calls `route` on
//! the current snapshot before it runs a command, and `error_text` when the answer
//! is not `Route::Local`. `redirect_blocked` is the check Redis runs on blocked
//! clients so one blocked on a slot that moved away, or in a cluster that went
//! down, gets an error instead of waiting for a write that will never come here.
//!
//! The common case — every key in one slot this node serves, nothing migrating,
//! state ok — is a few array and map reads: `route` takes the keys as an iterator
//! and never allocates (no `Vec`, no `String`, no boxing), and looks keys up only
//! while the slot is migrating or importing. Keep it that way.

use super::SLOTS;
use std::collections::BTreeMap;
use std::fmt;

/// A node's position in `RoutingTable::nodes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeIndex(pub u16);

/// The owner table's "no node" (an unassigned slot). `RoutingTable::new` refuses
/// more nodes than indexes below it, so no node can be mistaken for it.
const NO_NODE: u16 = u16::MAX;

/// What a redirect names about a node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeEndpoint {
    pub ip: String,
    /// The port clients reach it on: its TLS port when the cluster runs over TLS
    /// (`tls-cluster yes`), its plaintext port otherwise (Redis's `node->port`).
    pub port: u16,
    /// Its plaintext port in a TLS cluster, 0 when it has none (`node->pport`).
    pub pport: u16,
    /// The announced hostname; empty when none (Redis keeps an empty sds).
    pub hostname: String,
    /// The master this node replicates, if it is a replica.
    pub replica_of: Option<NodeIndex>,
}

/// `cluster-preferred-endpoint-type`: how a redirect names the node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EndpointType {
    #[default]
    Ip,
    Hostname,
    UnknownEndpoint,
}

/// Why a table update was refused: every index the table hands out must name a
/// node it has, so `error_text` never meets a dangling one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableError {
    /// More nodes than `NodeIndex` can name (65535, one value being "no node").
    TooManyNodes,
    /// A `NodeIndex` past the end of the node list.
    NoSuchNode(NodeIndex),
    /// A slot number of 16384 or more.
    NoSuchSlot(u16),
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableError::TooManyNodes => write!(f, "too many nodes for a routing table"),
            TableError::NoSuchNode(n) => write!(f, "no node at index {}", n.0),
            TableError::NoSuchSlot(s) => write!(f, "slot {s} is out of range"),
        }
    }
}

impl std::error::Error for TableError {}

/// What a shard needs to know to route: built and published by the cluster thread,
/// read-only to the connections that consult it.
#[derive(Clone, Debug)]
pub struct RoutingTable {
    myself: NodeIndex,
    nodes: Vec<NodeEndpoint>,
    /// slot -> index of the master serving it, or `NO_NODE`: two bytes a slot,
    /// 32 KiB in all (`server.cluster->slots`).
    owners: Box<[u16; SLOTS]>,
    /// This node's slots being handed to another node (`migrating_slots_to`).
    /// Sparse: a resharding opens a few slots at a time, and an empty map is one
    /// length check on the hot path.
    migrating_to: BTreeMap<u16, NodeIndex>,
    /// Slots this node is receiving (`importing_slots_from`).
    importing_from: BTreeMap<u16, NodeIndex>,
    /// `cluster_state:ok`. It already folds in `cluster-require-full-coverage`,
    /// which decides the state and nothing here.
    pub state_ok: bool,
    /// `cluster-allow-reads-when-down`.
    pub allow_reads_when_down: bool,
    /// `cluster-allow-pubsubshard-when-down`.
    pub allow_pubsubshard_when_down: bool,
    /// `tls-cluster`: then node ports are TLS ports, and a plaintext client is
    /// redirected to the plaintext port.
    pub tls_cluster: bool,
    /// `cluster-preferred-endpoint-type`.
    pub preferred_endpoint: EndpointType,
}

impl RoutingTable {
    /// A table with no slot assigned, nothing open, and Redis's defaults: state
    /// fail (a node starts so until its slots are covered), reads refused when
    /// down, shard pub/sub allowed when down, no TLS, redirects naming the IP.
    pub fn new(nodes: Vec<NodeEndpoint>, myself: NodeIndex) -> Result<Self, TableError> {
        if nodes.len() > usize::from(NO_NODE) {
            return Err(TableError::TooManyNodes);
        }
        let table = RoutingTable {
            myself,
            nodes,
            owners: Box::new([NO_NODE; SLOTS]),
            migrating_to: BTreeMap::new(),
            importing_from: BTreeMap::new(),
            state_ok: false,
            allow_reads_when_down: false,
            allow_pubsubshard_when_down: true,
            tls_cluster: false,
            preferred_endpoint: EndpointType::Ip,
        };
        table.check_node(myself)?;
        Ok(table)
    }

    pub fn myself(&self) -> NodeIndex {
        self.myself
    }

    pub fn nodes(&self) -> &[NodeEndpoint] {
        &self.nodes
    }

    pub fn node(&self, node: NodeIndex) -> Option<&NodeEndpoint> {
        self.nodes.get(usize::from(node.0))
    }

    /// The master serving `slot`; `None` when unassigned or past the last slot.
    #[inline]
    pub fn owner(&self, slot: u16) -> Option<NodeIndex> {
        match self.owners.get(usize::from(slot)) {
            Some(&n) if n != NO_NODE => Some(NodeIndex(n)),
            _ => None,
        }
    }

    pub fn set_owner(&mut self, slot: u16, node: Option<NodeIndex>) -> Result<(), TableError> {
        if let Some(n) = node {
            self.check_node(n)?;
        }
        let entry = self
            .owners
            .get_mut(usize::from(slot))
            .ok_or(TableError::NoSuchSlot(slot))?;
        *entry = node.map_or(NO_NODE, |n| n.0);
        Ok(())
    }

    /// Where this node is migrating `slot` to, if it is.
    #[inline]
    pub fn migrating_to(&self, slot: u16) -> Option<NodeIndex> {
        lookup(&self.migrating_to, slot)
    }

    /// CLUSTER SETSLOT MIGRATING (`Some`) or STABLE / NODE (`None`).
    pub fn set_migrating(&mut self, slot: u16, to: Option<NodeIndex>) -> Result<(), TableError> {
        self.check_open(slot, to)?;
        set_open(&mut self.migrating_to, slot, to);
        Ok(())
    }

    /// Where this node is importing `slot` from, if it is.
    #[inline]
    pub fn importing_from(&self, slot: u16) -> Option<NodeIndex> {
        lookup(&self.importing_from, slot)
    }

    /// CLUSTER SETSLOT IMPORTING (`Some`) or STABLE / NODE (`None`).
    pub fn set_importing(&mut self, slot: u16, from: Option<NodeIndex>) -> Result<(), TableError> {
        self.check_open(slot, from)?;
        set_open(&mut self.importing_from, slot, from);
        Ok(())
    }

    fn check_node(&self, node: NodeIndex) -> Result<(), TableError> {
        match self.node(node) {
            Some(_) => Ok(()),
            None => Err(TableError::NoSuchNode(node)),
        }
    }

    fn check_open(&self, slot: u16, node: Option<NodeIndex>) -> Result<(), TableError> {
        if usize::from(slot) >= SLOTS {
            return Err(TableError::NoSuchSlot(slot));
        }
        node.map_or(Ok(()), |n| self.check_node(n))
    }

    /// Whether this node is a replica of `master` (`nodeIsSlave(myself) &&
    /// myself->slaveof == n`).
    #[inline]
    fn replicates(&self, master: NodeIndex) -> bool {
        self.node(self.myself)
            .is_some_and(|me| me.replica_of == Some(master))
    }

    /// Whether the slot is open, and how: decided on the first key, as Redis does
    /// (cluster.c:6744-6749). Migrating counts only for a slot this node serves;
    /// importing whoever serves it.
    #[inline]
    fn open_state(&self, slot: u16, owner: NodeIndex) -> Open {
        if owner == self.myself {
            if let Some(to) = self.migrating_to(slot) {
                return Open::Migrating(to);
            }
        }
        match self.importing_from(slot) {
            Some(_) => Open::Importing,
            None => Open::Stable,
        }
    }
}

#[inline]
fn lookup(map: &BTreeMap<u16, NodeIndex>, slot: u16) -> Option<NodeIndex> {
    // An empty map answers without a search: the usual state outside a resharding.
    if map.is_empty() {
        return None;
    }
    map.get(&slot).copied()
}

fn set_open(map: &mut BTreeMap<u16, NodeIndex>, slot: u16, node: Option<NodeIndex>) {
    match node {
        Some(n) => {
            map.insert(slot, n);
        }
        None => {
            map.remove(&slot);
        }
    }
}

/// The commands `getNodeByQuery` treats apart from the rest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CommandKind {
    /// Any command not named below.
    #[default]
    Other,
    /// EXEC: the keys given are those of every queued command, in order.
    /// `queued_write` is whether any queued command is a write (Redis's
    /// `mstate.cmd_flags & CMD_WRITE`).
    Exec { queued_write: bool },
    /// MIGRATE: runs here whatever its keys while their slot is open, so keys can
    /// move freely during a resharding.
    Migrate,
    /// SPUBLISH, SSUBSCRIBE, SUNSUBSCRIBE: the keys given are shard channels.
    ShardPubSub,
}

/// The client's state as routing sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientFlags {
    /// ASKING was its previous command (`CLIENT_ASKING`).
    pub asking: bool,
    /// READONLY mode (`CLIENT_READONLY`).
    pub readonly: bool,
    /// Inside MULTI (`CLIENT_MULTI`): an EXEC without it only errors, here.
    pub in_multi: bool,
    /// The link from our master, or a script it called: a replica applies what its
    /// master sends whatever it thinks of the slots (processCommand's exemption).
    pub master_link: bool,
    /// The client replaying the AOF at start-up: what was accepted once is
    /// replayed as it was (Redis's AOF client never goes through the check, and
    /// scriptVerifyClusterState exempts it too).
    pub aof_loading: bool,
}

/// One command about to run, as routing needs it; the keys come separately.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Query {
    pub kind: CommandKind,
    /// The command's own effective flags (Redis's `getCommandFlags`: a script's
    /// shebang flags applied to EVAL / FCALL, so `#!lua flags=no-writes` is not a
    /// write and EVAL_RO never is). For EXEC this is EXEC's own flag, false:
    /// Redis refuses a write in a down cluster by the flags of the command it
    /// routes, and EXEC is not a write; the queued writes are `queued_write`.
    pub write: bool,
    /// The command carries `CMD_ASKING` (RESTORE-ASKING): as if ASKING preceded it.
    pub asking_command: bool,
    pub client: ClientFlags,
}

/// Where a command goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Run it here.
    Local,
    /// The slot is served by `node`: the client should update its map.
    Moved { slot: u16, node: NodeIndex },
    /// The slot is migrating to `node` and the keys are not here: ask there, once.
    Ask { slot: u16, node: NodeIndex },
    /// Keys in different slots.
    CrossSlot,
    /// Several keys in an open slot, some of them here and some not.
    TryAgain,
    /// The cluster is down.
    DownState,
    /// The cluster is down and only reads are served.
    DownReadOnlyState,
    /// The first key's slot is served by no node.
    DownUnbound,
}

impl Route {
    pub fn is_local(&self) -> bool {
        matches!(self, Route::Local)
    }
}

/// Whether and how the first key's slot is open (`migrating_slot` /
/// `importing_slot` in Redis).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Open {
    Stable,
    Migrating(NodeIndex),
    Importing,
}

/// What one pass over the keys learned (getNodeByQuery's loop, cluster.c:6701-6784).
struct Scan {
    slot: u16,
    owner: NodeIndex,
    open: Open,
    /// Two different keys (the same key repeated is one key).
    multiple_keys: bool,
    missing: usize,
    existing: usize,
}

/// Where the command described by `query`, with `keys`, may run: Redis 7.0's
/// getNodeByQuery as processCommand calls it (cluster.c:6656-6867).
///
/// `keys` are `(slot, key)` pairs: the command's keys, or for EXEC every queued
/// command's keys in order; shard channels for `CommandKind::ShardPubSub`. A slot
/// is `key_slot(key)`; a value of 16384 or more is a caller bug, treated as a slot
/// no node serves (`DownUnbound` when it is the first key's, else `CrossSlot`).
///
/// `key_exists` is called only while the first key's slot is migrating or
/// importing, for every key in order (repeats included), to count the keys that
/// are not here: it must answer as a read that neither touches the key, counts
/// hits, notifies nor deletes it, and that reports a logically expired key missing
/// (Redis's `LOOKUP_NOTOUCH | NOSTATS | NONOTIFY | NOEXPIRE` lookup in db 0).
///
/// Never allocates: see the module comment.
pub fn route<'k, I>(
    table: &RoutingTable,
    query: &Query,
    keys: I,
    key_exists: &mut dyn FnMut(&[u8]) -> bool,
) -> Route
where
    I: IntoIterator<Item = (u16, &'k [u8])>,
{
    // Exempt clients: processCommand skips the check for them (server.c).
    if query.client.master_link || query.client.aof_loading {
        return Route::Local;
    }
    // EXEC outside MULTI is only going to reply with an error (cluster.c:6678-6682).
    if matches!(query.kind, CommandKind::Exec { .. }) && !query.client.in_multi {
        return Route::Local;
    }
    // Shard channels are not looked up: a channel is served by the source node
    // until the migration completes (cluster.c:6767-6772).
    let count_keys = query.kind != CommandKind::ShardPubSub;
    match scan_keys(table, keys, count_keys, key_exists) {
        Err(refusal) => refusal,
        // No key at all: served here in every case (cluster.c:6786).
        Ok(None) => Route::Local,
        Ok(Some(scan)) => decide(table, query, &scan),
    }
}

/// The key loop: the first key fixes the slot, its owner and whether it is open;
/// every other key must be the same key or in the same slot. Missing keys are
/// counted while the slot is open. `Ok(None)`: no keys.
fn scan_keys<'k, I>(
    table: &RoutingTable,
    keys: I,
    count_keys: bool,
    key_exists: &mut dyn FnMut(&[u8]) -> bool,
) -> Result<Option<Scan>, Route>
where
    I: IntoIterator<Item = (u16, &'k [u8])>,
{
    let mut keys = keys.into_iter();
    let Some((slot, first)) = keys.next() else {
        return Ok(None);
    };
    // Unserved slot: the state may not say "down" yet, so say it here
    // (cluster.c:6727-6737). Checked before the other keys, as Redis does.
    let owner = table.owner(slot).ok_or(Route::DownUnbound)?;
    let open = table.open_state(slot, owner);
    let count = count_keys && open != Open::Stable;
    let mut scan = Scan {
        slot,
        owner,
        open,
        multiple_keys: false,
        missing: 0,
        existing: 0,
    };
    scan.count(count, first, key_exists);
    for (this_slot, key) in keys {
        if key != first {
            if this_slot != slot {
                return Err(Route::CrossSlot);
            }
            scan.multiple_keys = true;
        }
        scan.count(count, key, key_exists);
    }
    Ok(Some(scan))
}

impl Scan {
    #[inline]
    fn count(&mut self, count: bool, key: &[u8], key_exists: &mut dyn FnMut(&[u8]) -> bool) {
        if !count {
            return;
        }
        if key_exists(key) {
            self.existing += 1;
        } else {
            self.missing += 1;
        }
    }
}

/// The rules after the key loop, in Redis's order (cluster.c:6788-6866).
fn decide(table: &RoutingTable, query: &Query, scan: &Scan) -> Route {
    if !table.state_ok {
        if let Some(refusal) = down_refusal(table, query) {
            return refusal;
        }
    }
    // MIGRATE moves keys of an open slot wherever they are (cluster.c:6819).
    if scan.open != Open::Stable && query.kind == CommandKind::Migrate {
        return Route::Local;
    }
    // Migrating away and some keys already gone: all gone, the target has what
    // there is, ASK there; some gone, no node has them all, TRYAGAIN later.
    if let Open::Migrating(to) = scan.open {
        if scan.missing > 0 {
            return if scan.existing > 0 {
                Route::TryAgain
            } else {
                Route::Ask {
                    slot: scan.slot,
                    node: to,
                }
            };
        }
    }
    // Importing, and the client was sent here by an ASK: serve it, unless it needs
    // several keys and some have not arrived (cluster.c:6839-6848). Without
    // ASKING the client is MOVED to the owner below, like any other.
    if scan.open == Open::Importing && (query.client.asking || query.asking_command) {
        return if scan.multiple_keys && scan.missing > 0 {
            Route::TryAgain
        } else {
            Route::Local
        };
    }
    if replica_may_serve(table, query, scan.owner) {
        return Route::Local;
    }
    // Base case, including a write sent to a replica: MOVED to the master.
    if scan.owner == table.myself {
        Route::Local
    } else {
        Route::Moved {
            slot: scan.slot,
            node: scan.owner,
        }
    }
}

/// A down cluster refuses keyed commands (cluster.c:6791-6811): shard pub/sub by
/// its own setting; the rest unless reads are allowed, and then only writes.
fn down_refusal(table: &RoutingTable, query: &Query) -> Option<Route> {
    if query.kind == CommandKind::ShardPubSub {
        return (!table.allow_pubsubshard_when_down).then_some(Route::DownState);
    }
    if !table.allow_reads_when_down {
        return Some(Route::DownState);
    }
    query.write.then_some(Route::DownReadOnlyState)
}

/// A replica answers reads of its master's slots to a READONLY client, and shard
/// pub/sub of them to anyone (cluster.c:6850-6861). For EXEC a queued write makes
/// it a write.
fn replica_may_serve(table: &RoutingTable, query: &Query, owner: NodeIndex) -> bool {
    let shard_pubsub = query.kind == CommandKind::ShardPubSub;
    let queued_write = matches!(query.kind, CommandKind::Exec { queued_write: true });
    let is_write = query.write || queued_write;
    (query.client.readonly || shard_pubsub) && !is_write && table.replicates(owner)
}

/// How a client is blocked, as `clusterRedirectBlockedClientIfNeeded` sorts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockedOn {
    /// A blocking list, sorted-set or stream command, or a module command blocked
    /// on keys, waiting on keys in `slot` (they share one: the command was routed
    /// before it blocked, so Redis looks at one key only).
    Keys { slot: u16 },
    /// A module command blocked on no key: only a failed cluster unblocks it.
    ModuleWithoutKeys,
    /// WAIT, CLIENT PAUSE and the like: not about keys, never redirected.
    Other,
}

/// A blocked client, as the check needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockedClient {
    pub on: BlockedOn,
    /// READONLY mode (`CLIENT_READONLY`).
    pub readonly: bool,
    /// The command it blocked in is a write (`c->lastcmd->flags & CMD_WRITE`).
    pub last_command_write: bool,
}

/// The error to unblock a blocked client with, if it must be (Redis's
/// clusterRedirectBlockedClientIfNeeded, cluster.c:6918-6975): `DownState` when the
/// cluster failed, even if reads are allowed while down (only a write could
/// unblock it, and none will come); `DownUnbound` or `Moved` when its keys' slot is
/// no longer served here (nor, for a READONLY reader on a replica, by our master)
/// and not being imported here. `None`: leave it blocked. A slot of 16384 or more
/// is treated as unserved.
pub fn redirect_blocked(table: &RoutingTable, client: &BlockedClient) -> Option<Route> {
    if client.on == BlockedOn::Other {
        return None;
    }
    if !table.state_ok {
        return Some(Route::DownState);
    }
    let BlockedOn::Keys { slot } = client.on else {
        return None;
    };
    let mut node = table.owner(slot);
    // A READONLY reader on a replica may keep waiting on our master's slot.
    if let Some(owner) = node {
        if client.readonly && !client.last_command_write && table.replicates(owner) {
            node = Some(table.myself);
        }
    }
    if node == Some(table.myself) || table.importing_from(slot).is_some() {
        return None;
    }
    Some(match node {
        None => Route::DownUnbound,
        Some(node) => Route::Moved { slot, node },
    })
}

/// The second look a command gets where it runs, under its keys' locks: the gate
/// routed it on the table of a moment ago, and since then its slot may have begun
/// migrating (a key MIGRATE moved away meanwhile must now be asked for on the
/// target, not recreated here) or been handed to another node. `None`: run it.
///
/// Clients the gate let through for a slot this node does not serve are a READONLY
/// reader of our master's slot and an ASKING client of a slot we import; both
/// still pass. MIGRATE is not keyed, so it never comes here. `keys` are the
/// command's keys (all of one slot, the gate saw to it); `key_exists` as for
/// `route`.
pub fn recheck<'k, I>(
    table: &RoutingTable,
    keys: I,
    key_exists: &mut dyn FnMut(&[u8]) -> bool,
) -> Option<Route>
where
    I: IntoIterator<Item = &'k [u8]>,
{
    let mut keys = keys.into_iter().peekable();
    let slot = crate::slot::key_slot(keys.peek()?);
    let owner = table.owner(slot)?;
    if owner != table.myself {
        if table.replicates(owner) || table.importing_from(slot).is_some() {
            return None;
        }
        return Some(Route::Moved { slot, node: owner });
    }
    let to = table.migrating_to(slot)?;
    keys.any(|k| !key_exists(k))
        .then_some(Route::Ask { slot, node: to })
}

pub const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";
pub const TRYAGAIN: &str = "TRYAGAIN Multiple keys request during rehashing of slot";
pub const CLUSTERDOWN: &str = "CLUSTERDOWN The cluster is down";
pub const CLUSTERDOWN_READ_ONLY: &str =
    "CLUSTERDOWN The cluster is down and only accepts read commands";
pub const CLUSTERDOWN_UNBOUND: &str = "CLUSTERDOWN Hash slot not served";

/// The error Redis replies with for `route` (clusterRedirectClient,
/// cluster.c:6876-6905), without the leading '-' and the CRLF; `None` for
/// `Route::Local`. Redirects name the node by `preferred_endpoint` and give the
/// plaintext port to a plaintext client of a TLS cluster when the node has one.
/// A route naming a node the table does not have (only a hand-made one can) gets
/// an empty endpoint and port 0 rather than a panic.
pub fn error_text(table: &RoutingTable, route: &Route, client_is_tls: bool) -> Option<String> {
    let text = match *route {
        Route::Local => return None,
        Route::CrossSlot => CROSSSLOT,
        Route::TryAgain => TRYAGAIN,
        Route::DownState => CLUSTERDOWN,
        Route::DownReadOnlyState => CLUSTERDOWN_READ_ONLY,
        Route::DownUnbound => CLUSTERDOWN_UNBOUND,
        Route::Moved { slot, node } => {
            return Some(redirect_text(table, "MOVED", slot, node, client_is_tls))
        }
        Route::Ask { slot, node } => {
            return Some(redirect_text(table, "ASK", slot, node, client_is_tls))
        }
    };
    Some(text.to_owned())
}

/// `MOVED <slot> <endpoint>:<port>` / `ASK ...`.
fn redirect_text(
    table: &RoutingTable,
    kind: &str,
    slot: u16,
    node: NodeIndex,
    client_is_tls: bool,
) -> String {
    let Some(n) = table.node(node) else {
        return format!("{kind} {slot} :0");
    };
    let use_pport = table.tls_cluster && !client_is_tls;
    let port = if use_pport && n.pport != 0 {
        n.pport
    } else {
        n.port
    };
    let endpoint = preferred_endpoint(table.preferred_endpoint, n);
    format!("{kind} {slot} {endpoint}:{port}")
}

/// getPreferredEndpoint (cluster.c:4908-4915): a node with no hostname is "?"
/// when hostnames are preferred; "unknown-endpoint" names no endpoint at all,
/// leaving the client to use the address it already talks to.
fn preferred_endpoint(kind: EndpointType, n: &NodeEndpoint) -> &str {
    match kind {
        EndpointType::Ip => &n.ip,
        EndpointType::Hostname if n.hostname.is_empty() => "?",
        EndpointType::Hostname => &n.hostname,
        EndpointType::UnknownEndpoint => "",
    }
}

#[cfg(test)]
mod tests;
