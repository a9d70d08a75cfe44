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
//! Replica elections, manual failover and replica migration are in
//! `membership/failover.rs`.

use super::nodes::{NodeId, NodeTable};
use super::wire::{self, kind, Body, Extension, Gossip, Header, Message, PingBody};
use super::{flags, NodeName, SLOTS};
use bytes::Bytes;
use std::collections::HashMap;

pub mod admin;
mod failover;
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

impl Membership {
    /// The engine for `table` (freshly created or loaded from nodes.conf). `seed`
    /// drives the random choices (gossip entries, which node to ping).
    pub fn new(mut table: NodeTable, settings: Settings, seed: u64) -> Membership {
        let me = table.me_mut();
        me.port = settings.port;
        me.pport = settings.pport;
        me.cport = settings.cport;
        me.hostname = settings.hostname.clone();
        if let Some(ip) = &settings.announce_ip {
            me.ip = ip.clone();
        }
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
        if me.is_master() && self.manual_failover_in_progress() {
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

    // ---- receiving ----

    /// One message decoded off `link` (clusterProcessPacket). `peer_ip` is the
    /// link's remote address, `local_ip` our end of it: a MEET tells us which of
    /// our addresses peers use. Returns false when the link was closed.
    pub fn on_message(
        &mut self,
        link: LinkId,
        message: Message,
        peer_ip: &str,
        local_ip: &str,
        now: u64,
    ) -> bool {
        let Some(l) = self.links.get(&link) else {
            return false;
        };
        let (link_node, inbound) = (l.node, l.inbound);
        let kind = message.body.kind();
        if let Some(count) = self.messages_received.get_mut(kind as usize) {
            *count += 1;
        }
        let h = &message.header;
        let sender = self.sender_of(link, link_node, &h.sender);
        let mut sender_config_epoch = 0;
        if let Some(s) = sender {
            if let Some(n) = self.table.get_mut(s) {
                n.data_received = now;
                if !n.in_handshake() {
                    sender_config_epoch = h.config_epoch;
                    if sender_config_epoch > n.config_epoch {
                        n.config_epoch = sender_config_epoch;
                        self.todo |= todo::SAVE_CONFIG | todo::FSYNC_CONFIG;
                    }
                    n.repl_offset = h.offset;
                    n.repl_offset_time = now;
                    if h.current_epoch > self.table.current_epoch {
                        self.table.current_epoch = h.current_epoch;
                    }
                    self.note_paused_master_offset(s, h);
                }
            }
        }
        let ping_like = matches!(kind, kind::PING | kind::PONG | kind::MEET);
        if matches!(kind, kind::PING | kind::MEET) {
            self.answer_ping(link, &message, sender, peer_ip, local_ip, now);
        }
        if ping_like {
            return self.ping_config(
                link,
                link_node,
                inbound,
                &message,
                sender,
                sender_config_epoch,
                peer_ip,
                now,
            );
        }
        let Message { header, body } = message;
        match body {
            Body::Fail { about } => self.on_fail(sender, &header.sender, &about, now),
            Body::Publish { channel, message } if sender.is_some() => {
                self.effects.push(Effect::Publish {
                    channel,
                    message,
                    shard: false,
                });
            }
            Body::PublishShard { channel, message } if sender.is_some() => {
                self.effects.push(Effect::Publish {
                    channel,
                    message,
                    shard: true,
                });
            }
            Body::Update {
                config_epoch,
                node,
                slots,
            } if sender.is_some() => self.on_update(config_epoch, &node, &slots),
            Body::FailoverAuthRequest => {
                if let Some(s) = sender {
                    self.vote_if_allowed(s, &header, now);
                }
            }
            Body::FailoverAuthAck => {
                if let Some(s) = sender {
                    self.on_vote(s, header.current_epoch);
                }
            }
            Body::MfStart => {
                if let Some(s) = sender {
                    self.on_mfstart(s, link, now);
                }
            }
            Body::Unknown { kind, .. } => tracing::warn!("Received unknown packet type: {kind}"),
            _ => {}
        }
        true
    }

    /// getNodeFromLinkAndMsg: the link's node once known, else the node the
    /// message names, which an accepted link then belongs to.
    fn sender_of(
        &mut self,
        link: LinkId,
        link_node: Option<NodeId>,
        name: &NodeName,
    ) -> Option<NodeId> {
        if let Some(node) =
            link_node.filter(|&n| self.table.get(n).is_some_and(|n| !n.in_handshake()))
        {
            return Some(node);
        }
        let sender = self.table.lookup(name)?;
        if link_node.is_none() {
            self.set_inbound_link(sender, link);
        }
        Some(sender)
    }

    /// A PING or MEET gets a PONG; a MEET from a stranger adds it in handshake.
    fn answer_ping(
        &mut self,
        link: LinkId,
        m: &Message,
        sender: Option<NodeId>,
        peer_ip: &str,
        local_ip: &str,
        now: u64,
    ) {
        let is_meet = matches!(m.body, Body::Meet(_));
        if (is_meet || self.table.me().ip.is_empty())
            && self.settings.announce_ip.is_none()
            && !local_ip.is_empty()
            && self.table.me().ip != local_ip
        {
            self.table.me_mut().ip = local_ip.to_string();
            tracing::warn!("IP address for this node updated to {local_ip}");
            self.todo |= todo::SAVE_CONFIG;
        }
        if sender.is_none() && is_meet {
            let id = self.table.create(None, flags::HANDSHAKE, now);
            if let Some(n) = self.table.get_mut(id) {
                n.ip = announced_or_peer_ip(&m.header, peer_ip);
                n.port = m.header.port;
                n.pport = m.header.pport;
                n.cport = m.header.cport;
            }
            self.todo |= todo::SAVE_CONFIG;
            // The sender said MEET: trust its gossip before we know it.
            self.process_gossip(m, None, now);
        }
        self.send_ping(link, kind::PONG, now);
    }

    /// The configuration part of a PING, PONG or MEET.
    #[allow(clippy::too_many_arguments)]
    fn ping_config(
        &mut self,
        link: LinkId,
        link_node: Option<NodeId>,
        inbound: bool,
        m: &Message,
        sender: Option<NodeId>,
        sender_config_epoch: u64,
        peer_ip: &str,
        now: u64,
    ) -> bool {
        let h = &m.header;
        if !inbound {
            let Some(node) = link_node else {
                return true;
            };
            if self.table.get(node).is_some_and(|n| n.in_handshake()) {
                if let Some(known) = sender {
                    // We met an address that turns out to be a node we know.
                    if self.update_address_if_needed(known, link, h, peer_ip) {
                        self.todo |= todo::SAVE_CONFIG | todo::UPDATE_STATE;
                    }
                    self.delete_node(node);
                    return false;
                }
                self.table.rename(node, h.sender);
                if let Some(n) = self.table.get_mut(node) {
                    n.flags &= !flags::HANDSHAKE;
                    n.flags |= h.flags & (flags::MASTER | flags::REPLICA);
                }
                tracing::debug!("Handshake with node {} completed.", h.sender);
                self.todo |= todo::SAVE_CONFIG;
            } else if self.name_of(node) != h.sender {
                // Someone else answers at that address now.
                if let Some(n) = self.table.get_mut(node) {
                    n.flags |= flags::NOADDR;
                    n.ip.clear();
                    n.port = 0;
                    n.pport = 0;
                    n.cport = 0;
                }
                self.free_link(link);
                self.todo |= todo::SAVE_CONFIG;
                return false;
            }
        }
        if let Some(s) = sender.and_then(|s| self.table.get_mut(s)) {
            s.flags = (s.flags & !flags::NOFAILOVER) | (h.flags & flags::NOFAILOVER);
        }
        if let Some(s) = sender {
            let known = self.table.get(s).is_some_and(|n| !n.in_handshake());
            if matches!(m.body, Body::Ping(_))
                && known
                && self.update_address_if_needed(s, link, h, peer_ip)
            {
                self.todo |= todo::SAVE_CONFIG | todo::UPDATE_STATE;
            }
        }
        if !inbound && matches!(m.body, Body::Pong(_)) {
            if let Some(node) = link_node {
                self.on_pong(node, now);
            }
        }
        let Some(sender) = sender else {
            return true;
        };
        self.update_role(sender, h);
        self.check_slot_claims(sender, h, sender_config_epoch);
        let me = self.table.me();
        let collides = self
            .table
            .get(sender)
            .is_some_and(|s| s.is_master() && sender_config_epoch == me.config_epoch);
        if me.is_master() && collides {
            if let Some(epoch) = self.table.resolve_epoch_collision(sender) {
                tracing::debug!(
                    "WARNING: configEpoch collision with node {}. configEpoch set to {epoch}",
                    h.sender
                );
                self.effects.push(Effect::SaveConfig { fsync: true });
            }
        }
        self.process_gossip(m, Some(sender), now);
        self.process_extensions(m, sender);
        true
    }

    /// A PONG on our own link: the node is alive; PFAIL goes, FAIL maybe.
    fn on_pong(&mut self, node: NodeId, now: u64) {
        let Some(n) = self.table.get_mut(node) else {
            return;
        };
        n.pong_received = now;
        n.ping_sent = 0;
        if n.timed_out() {
            n.flags &= !flags::PFAIL;
            self.todo |= todo::SAVE_CONFIG | todo::UPDATE_STATE;
        } else if n.failed() {
            self.clear_failure_if_needed(node, now);
        }
    }

    /// The sender says whether it is a master or whose replica it is.
    fn update_role(&mut self, sender: NodeId, h: &Header) {
        if h.master.is_null() {
            if self.table.set_as_master(sender) {
                self.todo |= todo::SAVE_CONFIG | todo::UPDATE_STATE;
            }
            return;
        }
        let master = self.table.lookup(&h.master);
        if self.table.get(sender).is_some_and(|s| s.is_master()) {
            // A master turned into a replica.
            self.table.del_node_slots(sender);
            if let Some(s) = self.table.get_mut(sender) {
                s.flags &= !(flags::MASTER | flags::MIGRATE_TO);
                s.flags |= flags::REPLICA;
            }
            self.todo |= todo::SAVE_CONFIG | todo::UPDATE_STATE;
        }
        if let Some(master) = master {
            if self.table.get(sender).and_then(|s| s.master()) != Some(master)
                && self.table.add_replica(master, sender)
            {
                self.todo |= todo::SAVE_CONFIG;
            }
        }
    }

    /// Compares the slots the sender (or its master) claims with ours for it:
    /// a newer claim rebinds slots; a claim older than a slot's owner's gets the
    /// sender an UPDATE.
    fn check_slot_claims(&mut self, sender: NodeId, h: &Header, sender_config_epoch: u64) {
        let Some(s) = self.table.get(sender) else {
            return;
        };
        let claimer = if s.is_master() {
            Some(sender)
        } else {
            s.master()
        };
        let dirty = claimer
            .and_then(|c| self.table.get(c))
            .is_some_and(|c| c.slots() != &*h.slots);
        if !dirty {
            return;
        }
        if s.is_master() {
            self.update_slots_config_with(sender, sender_config_epoch, &h.slots);
        }
        for slot in (0..SLOTS).filter(|&slot| wire::slot_is_set(&h.slots, slot)) {
            let Some(owner) = self.table.slot_owner(slot) else {
                continue;
            };
            if owner == sender || self.slot_unclaimed(slot) {
                continue;
            }
            if self
                .table
                .get(owner)
                .is_some_and(|o| o.config_epoch > sender_config_epoch)
            {
                tracing::debug!(
                    "Node {} has old slots configuration, sending an UPDATE message about {}",
                    h.sender,
                    self.name_of(owner)
                );
                let link = self.outbound.get(&sender).copied();
                self.send_update(link, owner);
                break;
            }
        }
    }

    fn slot_unclaimed(&self, slot: usize) -> bool {
        self.table.slot_owner(slot).is_none() || wire::slot_is_set(&self.owner_not_claiming, slot)
    }

    /// clusterUpdateSlotsConfigWith: `sender` claims `slots` under `epoch`. Each
    /// slot that is unassigned, unclaimed or held under an older epoch moves to
    /// it, unless we are importing it (only the admin closes an import). If that
    /// leaves us (or our master) without slots, we follow the new owner as its
    /// replica; a master that only lost some slots drops their keys.
    fn update_slots_config_with(&mut self, sender: NodeId, epoch: u64, slots: &wire::SlotBitmap) {
        let myself = self.table.myself();
        if sender == myself {
            tracing::warn!("Discarding UPDATE message about myself.");
            return;
        }
        let me = self.table.me();
        let current_master = if me.is_master() {
            Some(myself)
        } else {
            me.master()
        };
        let mut lost_mine = Vec::new();
        let (mut claimed, mut taken_from_us, mut new_master) = (0, 0, None);
        let mut rebound = false;
        for slot in 0..SLOTS {
            if !wire::slot_is_set(slots, slot) {
                if self.table.slot_owner(slot) == Some(sender) {
                    wire::set_slot(&mut self.owner_not_claiming, slot);
                }
                continue;
            }
            claimed += 1;
            let owner = self.table.slot_owner(slot);
            if owner == Some(sender) {
                clear_slot(&mut self.owner_not_claiming, slot);
                continue;
            }
            if self.table.importing_from(slot).is_some() {
                continue;
            }
            let owner_epoch = owner
                .and_then(|o| self.table.get(o))
                .map_or(0, |o| o.config_epoch);
            if self.slot_unclaimed(slot) || owner_epoch < epoch {
                if owner == Some(myself) {
                    lost_mine.push(slot as u16);
                }
                if owner.is_some() && owner == current_master {
                    new_master = Some(sender);
                    taken_from_us += 1;
                }
                self.table.del_slot(slot);
                self.table.add_slot(sender, slot);
                clear_slot(&mut self.owner_not_claiming, slot);
                self.todo |= todo::SAVE_CONFIG | todo::UPDATE_STATE | todo::FSYNC_CONFIG;
                rebound = true;
            }
        }
        if rebound {
            self.effects.push(Effect::TopologyChanged);
        }
        let master_left_empty = current_master
            .and_then(|m| self.table.get(m))
            .is_some_and(|m| m.slot_count() == 0);
        let grandmaster = self
            .table
            .me()
            .master()
            .and_then(|m| self.table.get(m))
            .and_then(|m| m.master());
        if new_master.is_some()
            && master_left_empty
            && (self.settings.allow_replica_migration || claimed == taken_from_us)
        {
            tracing::warn!(
                "Configuration change detected. Reconfiguring myself as a replica of {}",
                self.name_of(sender)
            );
            self.set_my_master(sender);
            self.todo |= todo::SAVE_CONFIG | todo::UPDATE_STATE | todo::FSYNC_CONFIG;
        } else if let Some(grandmaster) = grandmaster.filter(|&g| g != myself) {
            tracing::warn!(
                "I'm a sub-replica! Reconfiguring myself as a replica of grandmaster {}",
                self.name_of(grandmaster)
            );
            self.set_my_master(grandmaster);
            self.todo |= todo::SAVE_CONFIG | todo::UPDATE_STATE | todo::FSYNC_CONFIG;
        } else if !lost_mine.is_empty() {
            self.effects.push(Effect::DeleteKeysInSlots(lost_mine));
        }
    }

    /// clusterSetMaster: this node becomes a replica of `master`.
    fn set_my_master(&mut self, master: NodeId) {
        let myself = self.table.myself();
        if self.table.me().is_master() {
            let me = self.table.me_mut();
            me.flags &= !(flags::MASTER | flags::MIGRATE_TO);
            me.flags |= flags::REPLICA;
            self.table.close_all_slots();
        }
        self.table.add_replica(master, myself);
        if let Some(m) = self.table.get(master) {
            self.effects.push(Effect::ReplicateFrom {
                ip: m.ip.clone(),
                port: m.port,
            });
        }
        self.reset_manual_failover();
        self.effects.push(Effect::TopologyChanged);
    }

    /// nodeUpdateAddressIfNeeded: a node pinging us from a new address (or
    /// announcing one) gets it, and our link to the old one goes.
    fn update_address_if_needed(
        &mut self,
        node: NodeId,
        link: LinkId,
        h: &Header,
        peer_ip: &str,
    ) -> bool {
        if self.outbound.get(&node) == Some(&link) {
            return false;
        }
        let ip = announced_or_peer_ip(h, peer_ip);
        let Some(n) = self.table.get_mut(node) else {
            return false;
        };
        if n.port == h.port && n.cport == h.cport && n.pport == h.pport && n.ip == ip {
            return false;
        }
        n.ip = ip;
        n.port = h.port;
        n.pport = h.pport;
        n.cport = h.cport;
        n.flags &= !flags::NOADDR;
        tracing::warn!(
            "Address updated for node {}, now {}:{}",
            n.name,
            n.ip,
            n.port
        );
        let (ip, port) = (n.ip.clone(), n.port);
        if let Some(old) = self.outbound.get(&node).copied() {
            self.free_link(old);
        }
        let me = self.table.me();
        if me.is_replica() && me.master() == Some(node) {
            self.effects.push(Effect::ReplicateFrom { ip, port });
        }
        true
    }

    /// clusterProcessGossipSection.
    fn process_gossip(&mut self, m: &Message, sender: Option<NodeId>, now: u64) {
        let (Body::Ping(p) | Body::Pong(p) | Body::Meet(p)) = &m.body else {
            return;
        };
        let sender_is_master = sender
            .and_then(|s| self.table.get(s))
            .is_some_and(|s| s.is_master());
        for g in &p.gossip {
            match self.table.lookup(&g.name) {
                Some(node) => {
                    self.gossip_about_known(node, g, sender.filter(|_| sender_is_master), now)
                }
                None => self.gossip_about_new(g, sender, now),
            }
        }
    }

    fn gossip_about_known(
        &mut self,
        node: NodeId,
        g: &Gossip,
        master_sender: Option<NodeId>,
        now: u64,
    ) {
        let says_failing = g.flags & (flags::FAIL | flags::PFAIL) != 0;
        if let Some(sender) = master_sender.filter(|_| node != self.table.myself()) {
            if says_failing {
                if self.table.add_failure_report(node, sender, now) {
                    tracing::debug!(
                        "Node {} reported node {} as not reachable.",
                        self.name_of(sender),
                        self.name_of(node)
                    );
                }
                self.mark_failing_if_needed(node, now);
            } else if self
                .table
                .del_failure_report(node, sender, now, self.settings.node_timeout)
            {
                tracing::debug!(
                    "Node {} reported node {} is back online.",
                    self.name_of(sender),
                    self.name_of(node)
                );
            }
        }
        let timeout = self.settings.node_timeout;
        let quiet = self.table.get(node).is_some_and(|n| n.ping_sent == 0)
            && self.table.failure_report_count(node, now, timeout) == 0;
        let connected = self.outbound.get(&node).copied();
        let Some(n) = self.table.get_mut(node) else {
            return;
        };
        // Another node heard from it more recently than we did: take its word,
        // unless it is in the future by our clock.
        if !says_failing && quiet {
            let pong = u64::from(g.pong_received) * 1000;
            if pong <= now + 500 && pong > n.pong_received {
                n.pong_received = pong;
            }
        }
        // We cannot reach it, a node that can sees it elsewhere: follow.
        let ip = wire::ip_text(&g.ip);
        let moved = !n.ip.eq_ignore_ascii_case(&ip) || n.port != g.port || n.cport != g.cport;
        if n.flags & (flags::FAIL | flags::PFAIL) != 0
            && g.flags & flags::NOADDR == 0
            && !says_failing
            && moved
        {
            n.ip = ip;
            n.port = g.port;
            n.pport = g.pport;
            n.cport = g.cport;
            n.flags &= !flags::NOADDR;
            if let Some(link) = connected {
                self.free_link(link);
            }
        }
    }

    /// A node we have not heard of: added with its name and flags when a node we
    /// know tells us (never from a stranger's gossip: the address might belong to
    /// another cluster), unless CLUSTER FORGET blacklisted it.
    fn gossip_about_new(&mut self, g: &Gossip, sender: Option<NodeId>, now: u64) {
        if sender.is_none()
            || g.flags & flags::NOADDR != 0
            || self.table.blacklisted(&g.name, now / 1000)
        {
            return;
        }
        let id = self.table.create(Some(g.name), g.flags, now);
        if let Some(n) = self.table.get_mut(id) {
            n.ip = wire::ip_text(&g.ip);
            n.port = g.port;
            n.pport = g.pport;
            n.cport = g.cport;
        }
    }

    /// clusterProcessPingExtensions: the hostname, or none if not sent.
    fn process_extensions(&mut self, m: &Message, sender: NodeId) {
        let (Body::Ping(p) | Body::Pong(p) | Body::Meet(p)) = &m.body else {
            return;
        };
        let mut hostname = String::new();
        for ext in &p.extensions {
            match ext {
                Extension::Hostname(name) => hostname = String::from_utf8_lossy(name).into_owned(),
                Extension::Unknown { kind, .. } => {
                    tracing::warn!("Received unknown extension type {kind}")
                }
            }
        }
        if let Some(n) = self.table.get_mut(sender) {
            n.hostname = hostname;
        }
    }

    /// markNodeAsFailingIfNeeded: PFAIL becomes FAIL when a majority of the
    /// masters serving slots (ourselves included, if we are one) report it.
    fn mark_failing_if_needed(&mut self, node: NodeId, now: u64) {
        let quorum = self.size / 2 + 1;
        let Some(n) = self.table.get(node) else {
            return;
        };
        if !n.timed_out() || n.failed() {
            return;
        }
        let mut failures = self
            .table
            .failure_report_count(node, now, self.settings.node_timeout);
        if self.table.me().is_master() {
            failures += 1;
        }
        if failures < quorum {
            return;
        }
        let name = self.name_of(node);
        tracing::info!("Marking node {name} as failing (quorum reached).");
        if let Some(n) = self.table.get_mut(node) {
            n.flags &= !flags::PFAIL;
            n.flags |= flags::FAIL;
            n.fail_time = now;
        }
        self.broadcast(Body::Fail { about: name });
        self.todo |= todo::UPDATE_STATE | todo::SAVE_CONFIG;
    }

    /// clearNodeFailureIfNeeded: a FAIL node answers again. A replica or a master
    /// without slots is simply back; a master with slots only once nobody took
    /// them over for a while.
    fn clear_failure_if_needed(&mut self, node: NodeId, now: u64) {
        let timeout = self.settings.node_timeout;
        let Some(n) = self.table.get_mut(node) else {
            return;
        };
        if n.is_replica() || n.slot_count() == 0 {
            let what = if n.is_replica() {
                "replica"
            } else {
                "master without slots"
            };
            tracing::info!(
                "Clear FAIL state for node {}: {what} is reachable again.",
                n.name
            );
            n.flags &= !flags::FAIL;
            self.todo |= todo::UPDATE_STATE | todo::SAVE_CONFIG;
        }
        if n.is_master()
            && n.slot_count() > 0
            && now.saturating_sub(n.fail_time) > timeout * FAIL_UNDO_TIME_MULT
        {
            tracing::info!(
                "Clear FAIL state for node {}: is reachable again and nobody is serving its slots after some time.",
                n.name
            );
            n.flags &= !flags::FAIL;
            self.todo |= todo::UPDATE_STATE | todo::SAVE_CONFIG;
        }
    }

    fn on_fail(
        &mut self,
        sender: Option<NodeId>,
        sender_name: &NodeName,
        about: &NodeName,
        now: u64,
    ) {
        if sender.is_none() {
            tracing::info!("Ignoring FAIL message from unknown node {sender_name} about {about}");
            return;
        }
        let Some(failing) = self.table.lookup(about) else {
            return;
        };
        let Some(n) = self.table.get_mut(failing) else {
            return;
        };
        if n.flags & (flags::FAIL | flags::MYSELF) != 0 {
            return;
        }
        tracing::info!("FAIL message received from {sender_name} about {about}");
        n.flags |= flags::FAIL;
        n.fail_time = now;
        n.flags &= !flags::PFAIL;
        self.todo |= todo::SAVE_CONFIG | todo::UPDATE_STATE;
    }

    /// An UPDATE: a node's newer configuration, relayed by a node that knows it.
    fn on_update(&mut self, config_epoch: u64, about: &NodeName, slots: &wire::SlotBitmap) {
        let Some(node) = self.table.lookup(about) else {
            return;
        };
        if self
            .table
            .get(node)
            .is_some_and(|n| n.config_epoch >= config_epoch)
        {
            return;
        }
        if self.table.get(node).is_some_and(|n| n.is_replica()) {
            self.table.set_as_master(node);
        }
        if let Some(n) = self.table.get_mut(node) {
            n.config_epoch = config_epoch;
        }
        self.todo |= todo::SAVE_CONFIG | todo::FSYNC_CONFIG;
        self.update_slots_config_with(node, config_epoch, slots);
    }

    // ---- time ----

    /// clusterCron, every `CRON_PERIOD_MS`: reconnect links, ping, detect
    /// unreachable nodes.
    pub fn cron(&mut self, now: u64) {
        self.iteration += 1;
        let handshake_timeout = self.settings.node_timeout.max(1000);
        self.pfail_nodes = 0;
        let ids: Vec<NodeId> = self.table.iter().map(|(id, _)| id).collect();
        for &id in &ids {
            self.reconnect_if_needed(id, handshake_timeout, now);
        }
        if self.iteration.is_multiple_of(10) {
            self.ping_a_random_node(now);
        }
        let mut update_state = false;
        for &id in &ids {
            update_state |= self.check_node(id, now);
        }
        self.replica_cron(now);
        if update_state || !self.state_ok {
            self.update_state(now);
        }
    }

    /// clusterNodeCronHandleReconnect.
    fn reconnect_if_needed(&mut self, id: NodeId, handshake_timeout: u64, now: u64) {
        let Some(n) = self.table.get(id) else {
            return;
        };
        if n.flags & (flags::MYSELF | flags::NOADDR) != 0 {
            return;
        }
        if n.timed_out() {
            self.pfail_nodes += 1;
        }
        if n.in_handshake() && now.saturating_sub(n.ctime) > handshake_timeout {
            self.delete_node(id);
            return;
        }
        if !self.outbound.contains_key(&id) {
            let (ip, cport) = (n.ip.clone(), n.cport);
            let link = self.new_link(Some(id), now);
            self.effects.push(Effect::Connect { link, ip, cport });
        }
    }

    /// Once a second: of five random nodes, ping the one we heard from last.
    fn ping_a_random_node(&mut self, now: u64) {
        let ids: Vec<NodeId> = self.table.iter().map(|(id, _)| id).collect();
        let mut oldest: Option<(NodeId, u64)> = None;
        for _ in 0..5 {
            let id = ids[(self.random() % ids.len() as u64) as usize];
            let Some(n) = self.table.get(id) else {
                continue;
            };
            if !self.outbound.contains_key(&id)
                || n.ping_sent != 0
                || n.flags & (flags::MYSELF | flags::HANDSHAKE) != 0
            {
                continue;
            }
            if oldest.is_none_or(|(_, pong)| pong > n.pong_received) {
                oldest = Some((id, n.pong_received));
            }
        }
        if let Some(link) = oldest.and_then(|(id, _)| self.outbound.get(&id).copied()) {
            self.send_ping(link, kind::PING, now);
        }
    }

    /// The per-node part of clusterCron; true when the node turned PFAIL.
    fn check_node(&mut self, id: NodeId, now: u64) -> bool {
        let timeout = self.settings.node_timeout;
        let Some(n) = self.table.get(id) else {
            return false;
        };
        if n.flags & (flags::MYSELF | flags::NOADDR | flags::HANDSHAKE) != 0 {
            return false;
        }
        let (ping_sent, pong_received, name) = (n.ping_sent, n.pong_received, n.name);
        let ping_delay = now.saturating_sub(ping_sent);
        let data_delay = now.saturating_sub(n.data_received);
        // A link that carries nothing for half the timeout while a ping waits
        // may be stuck: drop it, the next cron reconnects.
        if let Some(l) = self.outbound.get(&id).copied() {
            let old = self
                .links
                .get(&l)
                .is_some_and(|l| now.saturating_sub(l.ctime) > timeout);
            if old && ping_sent != 0 && ping_delay > timeout / 2 && data_delay > timeout / 2 {
                self.free_link(l);
            }
        }
        if let Some(l) = self.outbound.get(&id).copied() {
            if ping_sent == 0 && now.saturating_sub(pong_received) > timeout / 2 {
                self.send_ping(l, kind::PING, now);
                return false;
            }
        }
        // The replica of our manual failover hears from us continuously.
        let mf_link = self
            .outbound
            .get(&id)
            .copied()
            .filter(|_| self.manual_failover_replica() == Some(id));
        if let Some(l) = mf_link {
            self.send_ping(l, kind::PING, now);
            return false;
        }
        if ping_sent == 0 {
            return false;
        }
        // Any data from the node counts as a sign of life.
        let Some(n) = self.table.get_mut(id) else {
            return false;
        };
        if ping_delay.min(data_delay) > timeout && n.flags & (flags::PFAIL | flags::FAIL) == 0 {
            tracing::debug!("*** NODE {name} possibly failing");
            n.flags |= flags::PFAIL;
            return true;
        }
        false
    }

    /// clusterBeforeSleep: the state update and the config save events asked for.
    pub fn before_sleep(&mut self, now: u64) {
        if self.todo & todo::HANDLE_MANUAL_FAILOVER != 0 {
            if self.table.me().is_replica() {
                self.handle_manual_failover();
                self.handle_replica_failover(now);
            }
        } else if self.todo & todo::HANDLE_FAILOVER != 0 {
            self.handle_replica_failover(now);
        }
        if self.todo & todo::UPDATE_STATE != 0 {
            self.update_state(now);
        }
        if self.todo & todo::SAVE_CONFIG != 0 {
            let fsync = self.todo & todo::FSYNC_CONFIG != 0;
            self.effects.push(Effect::SaveConfig { fsync });
        }
        self.todo = 0;
    }

    /// clusterUpdateState: ok when every slot is served by a node not failing
    /// (if `cluster-require-full-coverage`) and a majority of the masters with
    /// slots is reachable. A master waits before first saying ok, and after
    /// being in the minority, so it can hear of a newer configuration first.
    fn update_state(&mut self, now: u64) {
        self.todo &= !todo::UPDATE_STATE;
        let first = *self.first_update_state.get_or_insert(now);
        let me_master = self.table.me().is_master();
        if me_master && !self.state_ok && now.saturating_sub(first) < WRITABLE_DELAY_MS {
            return;
        }
        let mut ok = true;
        if self.settings.require_full_coverage {
            ok = (0..SLOTS).all(|slot| {
                self.table
                    .slot_owner(slot)
                    .and_then(|o| self.table.get(o))
                    .is_some_and(|o| !o.failed())
            });
        }
        let masters = self
            .table
            .iter()
            .filter(|(_, n)| n.is_master() && n.slot_count() > 0);
        let (mut size, mut reachable) = (0, 0);
        for (_, n) in masters {
            size += 1;
            if n.flags & (flags::FAIL | flags::PFAIL) == 0 {
                reachable += 1;
            }
        }
        self.size = size;
        if reachable < size / 2 + 1 {
            ok = false;
            self.among_minority_since = now;
        }
        if ok == self.state_ok {
            return;
        }
        let rejoin_delay = self
            .settings
            .node_timeout
            .clamp(MIN_REJOIN_DELAY_MS, MAX_REJOIN_DELAY_MS);
        if ok && me_master && now.saturating_sub(self.among_minority_since) < rejoin_delay {
            return;
        }
        tracing::warn!("Cluster state changed: {}", if ok { "ok" } else { "fail" });
        self.state_ok = ok;
        self.effects.push(Effect::TopologyChanged);
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

fn clear_slot(bitmap: &mut wire::SlotBitmap, slot: usize) {
    bitmap[slot / 8] &= !(1 << (slot & 7));
}

#[cfg(test)]
mod tests;
