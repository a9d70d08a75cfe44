//! The cluster bus protocol as one node plays it, without I/O: Redis 7.0's
//! clusterProcessPacket, clusterCron and clusterUpdateState over the node table.
//!
//! The layer above owns the sockets. It tells this engine what happened — a link
//! accepted (`on_accept`), an outbound link connected (`on_connected`) or lost
//! (`on_link_error`), a message decoded off a link (`on_message`), a clock tick
//! every 100 ms (`cron`), the end of an event-loop round (`before_sleep`) — and
//! carries out what the engine asks for, in order, from `take_effects`: send these
//! bytes on that link, connect that link to this address, close a link, save
//! nodes.conf, deliver a PUBLISH, replicate another node, drop the keys of slots
//! this node lost, republish the routing table. Times are milliseconds of the
//! wall clock, passed in, so tests run a whole cluster on a simulated clock.
//!
//! What this covers: the handshake (MEET, the PONG that names a node), gossip
//! (learning nodes, failure reports, pong times, addresses), failure detection
//! (PFAIL after `cluster-node-timeout` without a PONG, FAIL when a majority of
//! masters agree, broadcast as a FAIL message, cleared when the node is back),
//! slot ownership by config epoch (claims in every PING and PONG, UPDATE for
//! stale claimers, a master left without slots becoming a replica of the node
//! that took them), config epoch collisions, PUBLISH, and the cluster state.
//! The engine's parts: this file holds its state, links and what it sends;
//! `membership/receive.rs` what it does with each message, `membership/cron.rs`
//! what the clock drives, `membership/failover.rs` replica elections, manual
//! failover and replica migration, `membership/admin.rs` what CLUSTER commands
//! change, `membership/routing.rs` the routing table it publishes.

use super::nodes::{NodeId, NodeTable};
use super::wire::{self, kind, Body, Extension, Gossip, Header, Message, PingBody};
use super::{flags, NodeName, SLOTS};
use bytes::Bytes;
use std::collections::HashMap;

pub mod admin;
mod cron;
mod failover;
mod receive;
mod routing;
use failover::Election;
pub use failover::{CantFailover, FailoverOption, MANUAL_FAILOVER_TIMEOUT_MS};

/// How often `cron` is expected to run (clusterCron runs ten times a second).
pub const CRON_PERIOD_MS: u64 = 100;
/// A master that comes back from the minority side waits at least this long
/// (and at most `MAX_REJOIN_DELAY_MS`) before saying the cluster is ok again.
const MIN_REJOIN_DELAY_MS: u64 = 500;
const MAX_REJOIN_DELAY_MS: u64 = 5000;
/// After start a master waits this long before first saying the cluster is ok.
const WRITABLE_DELAY_MS: u64 = 2000;
/// A FAIL flag on a master still serving slots is dropped after this many node
/// timeouts if the node is reachable again (nobody failed it over).
const FAIL_UNDO_TIME_MULT: u64 = 2;

/// One bus connection, as Redis's clusterLink.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct LinkId(pub u64);

#[derive(Debug)]
struct Link {
    node: Option<NodeId>,
    /// Accepted from a peer (we learn who it is from its messages), as opposed
    /// to opened by us toward a known node.
    inbound: bool,
    ctime: u64,
}

/// The settings the protocol reads (the `cluster-*` parameters and the ports this
/// node announces: deriveAnnouncedPorts).
#[derive(Clone, Debug)]
pub struct Settings {
    pub node_timeout: u64,
    /// `cluster-announce-ip`: sent in every header; None lets peers use the
    /// address they see.
    pub announce_ip: Option<String>,
    /// `cluster-announce-hostname`, empty for none.
    pub hostname: String,
    pub port: u16,
    pub pport: u16,
    pub cport: u16,
    pub require_full_coverage: bool,
    pub allow_replica_migration: bool,
    /// `cluster-replica-no-failover`: never run an election (manual ones aside).
    pub replica_no_failover: bool,
    /// `cluster-replica-validity-factor`: 0 lets any replica run, however stale.
    pub replica_validity_factor: u64,
    /// `repl-ping-replica-period`, in milliseconds.
    pub repl_ping_period_ms: u64,
    /// `cluster-migration-barrier`.
    pub migration_barrier: usize,
    /// `cluster-allow-reads-when-down`.
    pub allow_reads_when_down: bool,
    /// `cluster-allow-pubsubshard-when-down`.
    pub allow_pubsubshard_when_down: bool,
    /// `tls-cluster`: `port` is the TLS port, `pport` the plaintext one.
    pub tls_cluster: bool,
    /// `cluster-preferred-endpoint-type`: how redirects name nodes.
    pub preferred_endpoint: super::redirect::EndpointType,
}

impl Default for Settings {
    /// Redis's defaults (ports aside, which come from the server's).
    fn default() -> Settings {
        Settings {
            node_timeout: 15000,
            announce_ip: None,
            hostname: String::new(),
            port: 0,
            pport: 0,
            cport: 0,
            require_full_coverage: true,
            allow_replica_migration: true,
            replica_no_failover: false,
            replica_validity_factor: 10,
            repl_ping_period_ms: 10_000,
            migration_barrier: 1,
            allow_reads_when_down: false,
            allow_pubsubshard_when_down: true,
            tls_cluster: false,
            preferred_endpoint: super::redirect::EndpointType::Ip,
        }
    }
}

/// What the engine asks the layer above to do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    Send {
        link: LinkId,
        bytes: Bytes,
    },
    /// Open `link` toward a node's bus port, then call `on_connected` (or
    /// `on_link_error` if it fails).
    Connect {
        link: LinkId,
        ip: String,
        cport: u16,
    },
    Close {
        link: LinkId,
    },
    SaveConfig {
        fsync: bool,
    },
    /// A PUBLISH (or SPUBLISH when `shard`) another node relayed, for this
    /// node's subscribers.
    Publish {
        channel: Vec<u8>,
        message: Vec<u8>,
        shard: bool,
    },
    /// This node is now a replica of the node at that address (replicationSetMaster).
    ReplicateFrom {
        ip: String,
        port: u16,
    },
    /// This node won its master's slots: stop replicating (replicationUnsetMaster).
    StopReplicating,
    /// A replica asked for a manual failover: refuse writes until `until` (or
    /// `Unpause`), so it can catch up with our offset.
    PauseWrites {
        until: u64,
    },
    Unpause,
    /// Slots this master lost to a newer configuration while staying a master:
    /// their keys must go (Redis's dirty slots).
    DeleteKeysInSlots(Vec<u16>),
    /// Slot owners, migrations or the cluster state changed: shards need a new
    /// routing table.
    TopologyChanged,
}

/// What `before_sleep` has to do (`CLUSTER_TODO_*`).
mod todo {
    pub const UPDATE_STATE: u8 = 1;
    pub const SAVE_CONFIG: u8 = 2;
    pub const FSYNC_CONFIG: u8 = 4;
    pub const HANDLE_FAILOVER: u8 = 8;
    pub const HANDLE_MANUAL_FAILOVER: u8 = 16;
}

pub struct Membership {
    pub table: NodeTable,
    pub settings: Settings,
    links: HashMap<LinkId, Link>,
    /// Each node's outbound link (`node->link`) and accepted link (`inbound_link`).
    outbound: HashMap<NodeId, LinkId>,
    inbound: HashMap<NodeId, LinkId>,
    next_link: u64,
    state_ok: bool,
    /// Masters serving at least one slot.
    size: usize,
    /// Slots whose owner stopped claiming them (a migration handed them over):
    /// they count as unclaimed, and UPDATE messages leave them out.
    owner_not_claiming: Box<wire::SlotBitmap>,
    /// This node's replication offset, for the headers it sends.
    repl_offset: u64,
    /// A replica: how long (ms) since it last heard from its master.
    repl_data_age: u64,
    election: Election,
    pings_sent: u64,
    iteration: u64,
    pfail_nodes: usize,
    first_update_state: Option<u64>,
    among_minority_since: u64,
    todo: u8,
    rng: u64,
    pub messages_sent: [u64; kind::COUNT],
    pub messages_received: [u64; kind::COUNT],
    effects: Vec<Effect>,
}

/// This node's own entry as `settings` announce it: ports, hostname and, when
/// set, `cluster-announce-ip`.
fn announce_as(table: &mut NodeTable, settings: &Settings) {
    let me = table.me_mut();
    me.port = settings.port;
    me.pport = settings.pport;
    me.cport = settings.cport;
    me.hostname = settings.hostname.clone();
    if let Some(ip) = &settings.announce_ip {
        me.ip = ip.clone();
    }
}

impl Membership {
    /// The engine for `table` (freshly created or loaded from nodes.conf). `seed`
    /// drives the random choices (gossip entries, which node to ping).
    pub fn new(mut table: NodeTable, settings: Settings, seed: u64) -> Membership {
        announce_as(&mut table, &settings);
        Membership {
            table,
            settings,
            links: HashMap::new(),
            outbound: HashMap::new(),
            inbound: HashMap::new(),
            next_link: 1,
            state_ok: false,
            // Redis starts at one and counts at the first state update, which a
            // master makes two seconds after start; quorums come out the same
            // (size / 2 + 1 is 1 either way), only CLUSTER INFO differs then.
            size: 0,
            owner_not_claiming: Box::new([0; wire::BITMAP_LEN]),
            repl_offset: 0,
            repl_data_age: 0,
            election: Election::default(),
            pings_sent: 0,
            iteration: 0,
            pfail_nodes: 0,
            first_update_state: None,
            among_minority_since: 0,
            todo: 0,
            rng: seed | 1,
            messages_sent: [0; kind::COUNT],
            messages_received: [0; kind::COUNT],
            effects: Vec::new(),
        }
    }

    /// Whether an effect not yet taken asks for new routes: a client command that
    /// changed them republishes before it replies (`Service::with_engine`).
    pub fn topology_pending(&self) -> bool {
        self.effects
            .iter()
            .any(|e| matches!(e, Effect::TopologyChanged))
    }

    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    pub fn state_ok(&self) -> bool {
        self.state_ok
    }

    /// Masters serving at least one slot (CLUSTER INFO's cluster_size).
    pub fn size(&self) -> usize {
        self.size
    }

    /// Replication as the server lives it: our offset (a master's stream
    /// offset, or what a replica has processed) and, on a replica, how long ago
    /// (ms) it last heard from its master, or since the link went down.
    /// CONFIG SET of `cluster-*` parameters: the new settings, this node's
    /// announced ports, hostname and address with them (gossiped from the next
    /// ping on, as Redis's apply functions do), and routes republished (the
    /// down-state and endpoint settings are part of them).
    pub fn apply_settings(&mut self, settings: Settings) {
        announce_as(&mut self.table, &settings);
        self.settings = settings;
        self.effects.push(Effect::TopologyChanged);
    }

    pub fn set_replication(&mut self, offset: u64, data_age_ms: u64) {
        self.repl_offset = offset;
        self.repl_data_age = data_age_ms;
    }

    /// Whether `node`'s outbound link exists (CLUSTER NODES' connected).
    pub fn connected(&self, node: NodeId) -> bool {
        node == self.table.myself() || self.outbound.contains_key(&node)
    }

    fn random(&mut self) -> u64 {
        // xorshift64*: plenty for picking gossip entries.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn name_of(&self, id: NodeId) -> NodeName {
        self.table.get(id).map_or(NodeName::NULL, |n| n.name)
    }

    // ---- links ----

    fn new_link(&mut self, node: Option<NodeId>, now: u64) -> LinkId {
        let id = LinkId(self.next_link);
        self.next_link += 1;
        self.links.insert(
            id,
            Link {
                node,
                inbound: node.is_none(),
                ctime: now,
            },
        );
        if let Some(node) = node {
            self.outbound.insert(node, id);
        }
        id
    }

    /// A peer connected to our bus port (clusterAcceptHandler).
    pub fn on_accept(&mut self, now: u64) -> LinkId {
        self.new_link(None, now)
    }

    /// DEBUG CLUSTERLINK KILL: drops the link to `node` (`to`), the one from it
    /// (`from`), or both; the cron connects again as after a link error.
    pub fn kill_links(&mut self, node: NodeId, to: bool, from: bool) {
        if to {
            if let Some(link) = self.outbound.get(&node).copied() {
                self.free_link(link);
            }
        }
        if from {
            if let Some(link) = self.inbound.get(&node).copied() {
                self.free_link(link);
            }
        }
    }

    /// A link failed or the peer closed it (handleLinkIOError): forget it; the
    /// cron reconnects outbound links.
    pub fn on_link_error(&mut self, link: LinkId) {
        self.free_link(link);
    }

    /// freeClusterLink: the link goes, and so does the node's reference to it.
    fn free_link(&mut self, link: LinkId) {
        let Some(l) = self.links.remove(&link) else {
            return;
        };
        if let Some(node) = l.node {
            let map = if l.inbound {
                &mut self.inbound
            } else {
                &mut self.outbound
            };
            if map.get(&node) == Some(&link) {
                map.remove(&node);
            }
        }
        self.effects.push(Effect::Close { link });
    }

    /// Associates an accepted link with the node it turned out to come from
    /// (setClusterNodeToInboundClusterLink); an older inbound link from the same
    /// node goes, since a peer that reconnected no longer uses it.
    fn set_inbound_link(&mut self, node: NodeId, link: LinkId) {
        if let Some(old) = self.inbound.get(&node).copied() {
            if old != link {
                self.free_link(old);
            }
        }
        self.inbound.insert(node, link);
        if let Some(l) = self.links.get_mut(&link) {
            l.node = Some(node);
        }
    }

    /// Deletes a node and its links (clusterDelNode).
    fn delete_node(&mut self, id: NodeId) {
        for link in [
            self.outbound.get(&id).copied(),
            self.inbound.get(&id).copied(),
        ]
        .into_iter()
        .flatten()
        {
            self.free_link(link);
        }
        self.table.delete(id);
    }

    /// Our outbound link toward `id` connected (clusterLinkConnectHandler): say
    /// MEET to a node we were asked to meet, PING otherwise, at once.
    pub fn on_connected(&mut self, link: LinkId, now: u64) {
        let Some(node) = self.links.get(&link).and_then(|l| l.node) else {
            return;
        };
        let Some(n) = self.table.get(node) else {
            return;
        };
        let old_ping_sent = n.ping_sent;
        let kind = if n.flags & flags::MEET != 0 {
            kind::MEET
        } else {
            kind::PING
        };
        self.send_ping(link, kind, now);
        if let Some(n) = self.table.get_mut(node) {
            // A ping outstanding before the reconnection still counts from then.
            if old_ping_sent != 0 {
                n.ping_sent = old_ping_sent;
            }
            n.flags &= !flags::MEET;
        }
    }

    // ---- commands ----

    /// CLUSTER MEET (clusterStartHandshake): a handshake node for the address,
    /// unless one is already in progress. `ip` must already be a normalized
    /// address; ports are checked here.
    pub fn meet(&mut self, ip: &str, port: u16, cport: u16, now: u64) -> Result<(), MeetError> {
        if port == 0 || cport == 0 {
            return Err(MeetError::Invalid);
        }
        let in_progress = self.table.iter().any(|(_, n)| {
            n.in_handshake() && n.ip.eq_ignore_ascii_case(ip) && n.port == port && n.cport == cport
        });
        if in_progress {
            return Err(MeetError::InProgress);
        }
        let id = self.table.create(None, flags::HANDSHAKE | flags::MEET, now);
        if let Some(n) = self.table.get_mut(id) {
            n.ip = ip.to_string();
            n.port = port;
            n.cport = cport;
        }
        Ok(())
    }

    /// Assigns slots to this node (CLUSTER ADDSLOTS once checked by the command).
    pub fn add_my_slot(&mut self, slot: usize) -> bool {
        let me = self.table.myself();
        let added = self.table.add_slot(me, slot);
        if added {
            self.todo |= todo::SAVE_CONFIG | todo::UPDATE_STATE;
        }
        added
    }

    // ---- sending ----

    /// clusterBuildMessageHdr: who we are, our slots (or our master's), epochs.
    fn header(&self) -> Header {
        let me = self.table.me();
        let master = me
            .master()
            .filter(|_| me.is_replica())
            .and_then(|m| self.table.get(m));
        let claimer = master.unwrap_or(me);
        let mut mflags = [0; 3];
        if me.is_master() && self.manual_failover_in_progress() && self.election.mf_paused {
            mflags[0] |= wire::mflags0::PAUSED;
        }
        Header {
            port: self.settings.port,
            current_epoch: self.table.current_epoch,
            config_epoch: claimer.config_epoch,
            offset: self.repl_offset,
            sender: me.name,
            slots: Box::new(*claimer.slots()),
            master: master.map_or(NodeName::NULL, |m| m.name),
            ip: self
                .settings
                .announce_ip
                .as_deref()
                .map_or([0; wire::IP_LEN], wire::ip_field),
            pport: self.settings.pport,
            cport: self.settings.cport,
            flags: me.flags,
            state: if self.state_ok { 0 } else { 1 },
            mflags,
        }
    }

    fn manual_failover_in_progress(&self) -> bool {
        self.election.mf_end != 0
    }

    fn encode(&mut self, body: Body) -> Bytes {
        let kind = body.kind() as usize;
        let mut out = Vec::new();
        wire::encode(
            &Message {
                header: self.header(),
                body,
            },
            &mut out,
        );
        if let Some(count) = self.messages_sent.get_mut(kind) {
            *count += 1;
        }
        Bytes::from(out)
    }

    fn send(&mut self, link: LinkId, bytes: Bytes) {
        self.effects.push(Effect::Send { link, bytes });
    }

    /// clusterBroadcastMessage: every known node but us and those in handshake,
    /// over our links to them.
    fn broadcast(&mut self, body: Body) {
        let bytes = self.encode(body);
        self.broadcast_bytes(bytes);
    }

    /// Sends an encoded message as `broadcast` does.
    fn broadcast_bytes(&mut self, bytes: Bytes) {
        let targets: Vec<LinkId> = self
            .table
            .iter()
            .filter(|(_, n)| n.flags & (flags::MYSELF | flags::HANDSHAKE) == 0)
            .filter_map(|(id, _)| self.outbound.get(&id).copied())
            .collect();
        for link in targets {
            self.send(link, bytes.clone());
        }
    }

    /// clusterSendPing: a PING, PONG or MEET with a gossip section about a tenth
    /// of the nodes (at least 3) chosen at random, plus every node in PFAIL so
    /// failure reports spread fast.
    fn send_ping(&mut self, link: LinkId, kind: u16, now: u64) {
        self.pings_sent += 1;
        let round = self.pings_sent;
        let total = self.table.len();
        let mut fresh = total.saturating_sub(2);
        let wanted = (total / 10).max(3).min(fresh);
        let Some(l) = self.links.get(&link) else {
            return;
        };
        if !l.inbound && kind == wire::kind::PING {
            if let Some(n) = l.node.and_then(|n| self.table.get_mut(n)) {
                n.ping_sent = now;
            }
        }
        let ids: Vec<NodeId> = self.table.iter().map(|(id, _)| id).collect();
        let mut gossip = Vec::with_capacity(wanted + self.pfail_nodes);
        let mut iterations = wanted * 3;
        while fresh > 0 && gossip.len() < wanted && iterations > 0 {
            iterations -= 1;
            let id = ids[(self.random() % ids.len() as u64) as usize];
            let connected = self.outbound.contains_key(&id);
            let Some(n) = self.table.get_mut(id) else {
                continue;
            };
            if n.flags & (flags::MYSELF | flags::PFAIL) != 0 {
                continue;
            }
            if n.flags & (flags::HANDSHAKE | flags::NOADDR) != 0
                || (!connected && n.slot_count() == 0)
            {
                fresh -= 1;
                continue;
            }
            if n.last_in_ping_gossip == round {
                continue;
            }
            n.last_in_ping_gossip = round;
            gossip.push(gossip_entry(n));
            fresh -= 1;
        }
        let pfail = self
            .table
            .iter()
            .filter(|(_, n)| n.flags & (flags::HANDSHAKE | flags::NOADDR) == 0 && n.timed_out());
        gossip.extend(pfail.take(self.pfail_nodes).map(|(_, n)| gossip_entry(n)));
        let mut extensions = Vec::new();
        if !self.settings.hostname.is_empty() {
            extensions.push(Extension::Hostname(
                self.settings.hostname.as_bytes().to_vec(),
            ));
        }
        let ping = PingBody { gossip, extensions };
        let body = match kind {
            wire::kind::MEET => Body::Meet(ping),
            wire::kind::PONG => Body::Pong(ping),
            _ => Body::Ping(ping),
        };
        let bytes = self.encode(body);
        self.send(link, bytes);
    }

    /// clusterSendUpdate: tell a node with a stale claim who serves `about`'s
    /// slots now (leaving out those whose owner stopped claiming them).
    fn send_update(&mut self, link: Option<LinkId>, about: NodeId) {
        let (Some(link), Some(node)) = (link, self.table.get(about)) else {
            return;
        };
        let mut slots = Box::new(*node.slots());
        for (byte, not_claimed) in slots.iter_mut().zip(self.owner_not_claiming.iter()) {
            *byte &= !not_claimed;
        }
        let body = Body::Update {
            config_epoch: node.config_epoch,
            node: node.name,
            slots,
        };
        let bytes = self.encode(body);
        self.send(link, bytes);
    }

    /// A PUBLISH for every other node (clusterPropagatePublish).
    pub fn publish(&mut self, channel: &[u8], message: &[u8], shard: bool) {
        let (channel, message) = (channel.to_vec(), message.to_vec());
        if shard {
            self.broadcast(Body::PublishShard { channel, message });
        } else {
            self.broadcast(Body::Publish { channel, message });
        }
    }
}

/// Why CLUSTER MEET did not start a handshake.
#[derive(Debug, PartialEq, Eq)]
pub enum MeetError {
    Invalid,
    InProgress,
}

fn gossip_entry(n: &super::nodes::Node) -> Gossip {
    Gossip {
        name: n.name,
        ping_sent: (n.ping_sent / 1000) as u32,
        pong_received: (n.pong_received / 1000) as u32,
        ip: wire::ip_field(&n.ip),
        port: n.port,
        cport: n.cport,
        flags: n.flags,
        pport: n.pport,
    }
}

/// nodeIp2String: the address the node announces, else the one we see.
fn announced_or_peer_ip(h: &Header, peer_ip: &str) -> String {
    let announced = wire::ip_text(&h.ip);
    if announced.is_empty() {
        peer_ip.to_string()
    } else {
        announced
    }
}

#[cfg(test)]
mod tests;
