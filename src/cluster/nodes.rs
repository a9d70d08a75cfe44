//! The cluster as one node knows it: every node it has heard of, who serves each
//! slot, which slots are moving, the epochs, and the nodes it will not re-add for a
//! while. This is the data half of Redis's `clusterState` and `clusterNode`, with
//! the invariants Redis keeps by hand kept here by construction:
//!
//! - `slot_owner(s) == Some(n)` exactly when `s` is set in `n`'s bitmap, and each
//!   node's slot count is the number of bits set;
//! - a replica's `master` and its master's `replicas` list name each other;
//! - deleting a node leaves no reference to it: its slots are unassigned, the slots
//!   moving to or from it stop moving, its replicas forget their master, and the
//!   failure reports it sent about other nodes are dropped.
//!
//! Nodes are addressed by `NodeId`, an index that stays valid while the node is in
//! the table; a deleted node's index may be given to a node created later. Links,
//! timers and messages belong to the layers above: nothing here does I/O or reads
//! the clock (times are passed in, in milliseconds).

use super::nodes_conf::{NodeLine, NodesConf};
use super::wire::{self, SlotBitmap, BITMAP_LEN};
use super::{flags, NodeName, SLOTS};
use std::collections::HashMap;

/// How long CLUSTER FORGET keeps a node from being re-added by gossip
/// (`CLUSTER_BLACKLIST_TTL`, seconds).
pub const BLACKLIST_TTL_SECS: u64 = 60;

/// A failure report stays valid for this many node timeouts
/// (`CLUSTER_FAIL_REPORT_VALIDITY_MULT`).
pub const FAIL_REPORT_VALIDITY_MULT: u64 = 2;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct NodeId(u32);

/// One node of the cluster, as this node knows it (`clusterNode`).
#[derive(Clone, Debug)]
pub struct Node {
    pub name: NodeName,
    /// When this node was created in the table (ms).
    pub ctime: u64,
    /// `super::flags` bits.
    pub flags: u16,
    pub config_epoch: u64,
    slots: Box<SlotBitmap>,
    slot_count: usize,
    replicas: Vec<NodeId>,
    master: Option<NodeId>,
    /// The ping round that last carried this node in its gossip section.
    pub last_in_ping_gossip: u64,
    /// When we sent the PING still unanswered (ms), 0 when none is.
    pub ping_sent: u64,
    pub pong_received: u64,
    pub data_received: u64,
    pub fail_time: u64,
    /// When we last voted for a replica of this master.
    pub voted_time: u64,
    pub repl_offset_time: u64,
    /// Since when this master has had no working replica (replica migration).
    pub orphaned_time: u64,
    pub repl_offset: u64,
    pub ip: String,
    pub hostname: String,
    /// The client port (the TLS one when the node serves TLS).
    pub port: u16,
    /// The plaintext client port when `port` is the TLS one.
    pub pport: u16,
    /// The bus port.
    pub cport: u16,
    /// Nodes that told us this one is failing, and when they last did (ms).
    fail_reports: Vec<(NodeId, u64)>,
}

impl Node {
    fn new(name: NodeName, flags: u16, now: u64) -> Node {
        Node {
            name,
            ctime: now,
            flags,
            config_epoch: 0,
            slots: Box::new([0; BITMAP_LEN]),
            slot_count: 0,
            replicas: Vec::new(),
            master: None,
            last_in_ping_gossip: 0,
            ping_sent: 0,
            pong_received: 0,
            data_received: 0,
            fail_time: 0,
            voted_time: 0,
            repl_offset_time: 0,
            orphaned_time: 0,
            repl_offset: 0,
            ip: String::new(),
            hostname: String::new(),
            port: 0,
            pport: 0,
            cport: 0,
            fail_reports: Vec::new(),
        }
    }

    pub fn is_master(&self) -> bool {
        self.flags & flags::MASTER != 0
    }
    pub fn is_replica(&self) -> bool {
        self.flags & flags::REPLICA != 0
    }
    pub fn in_handshake(&self) -> bool {
        self.flags & flags::HANDSHAKE != 0
    }
    pub fn has_addr(&self) -> bool {
        self.flags & flags::NOADDR == 0
    }
    /// PFAIL: this node's own suspicion.
    pub fn timed_out(&self) -> bool {
        self.flags & flags::PFAIL != 0
    }
    pub fn failed(&self) -> bool {
        self.flags & flags::FAIL != 0
    }
    pub fn serves(&self, slot: usize) -> bool {
        wire::slot_is_set(&self.slots, slot)
    }
    /// The slots this node serves, as the bus carries them.
    pub fn slots(&self) -> &SlotBitmap {
        &self.slots
    }
    pub fn slot_count(&self) -> usize {
        self.slot_count
    }
    pub fn master(&self) -> Option<NodeId> {
        self.master
    }
    pub fn replicas(&self) -> &[NodeId] {
        &self.replicas
    }
}

/// Every node this node knows, the slot map, and the epochs.
pub struct NodeTable {
    nodes: Vec<Option<Node>>,
    free: Vec<NodeId>,
    by_name: HashMap<NodeName, NodeId>,
    myself: NodeId,
    pub current_epoch: u64,
    /// The epoch of the last vote this node (as a master) granted.
    pub last_vote_epoch: u64,
    owners: Box<[Option<NodeId>]>,
    migrating_to: Box<[Option<NodeId>]>,
    importing_from: Box<[Option<NodeId>]>,
    /// Node name -> Unix second after which gossip may re-add it.
    blacklist: HashMap<NodeName, u64>,
}

impl NodeTable {
    /// A table holding only this node, `myself`.
    pub fn new(myself: NodeName, flags: u16, now: u64) -> NodeTable {
        let mut table = NodeTable::empty();
        table.myself = table.create(Some(myself), flags | flags::MYSELF, now);
        table
    }

    fn empty() -> NodeTable {
        NodeTable {
            nodes: Vec::new(),
            free: Vec::new(),
            by_name: HashMap::new(),
            myself: NodeId(0),
            current_epoch: 0,
            last_vote_epoch: 0,
            owners: vec![None; SLOTS].into_boxed_slice(),
            migrating_to: vec![None; SLOTS].into_boxed_slice(),
            importing_from: vec![None; SLOTS].into_boxed_slice(),
            blacklist: HashMap::new(),
        }
    }

    /// The table a node starts with from its nodes.conf (clusterLoadConfig, after
    /// `nodes_conf::parse` checked the text): a node named only as a master or a
    /// migration peer is added without address until its own line or gossip says
    /// more; a ping in flight or a pong ever received counts from `now`; a replica
    /// follows its master's epoch, so its own loads as 0.
    pub fn from_conf(conf: &NodesConf, now: u64) -> Option<NodeTable> {
        let mut table = NodeTable::empty();
        let mut myself = None;
        for line in &conf.nodes {
            let id = table.lookup_or_create(line.name, now);
            table.load_line(id, line, now);
            if line.flags & flags::MYSELF != 0 {
                myself = Some(id);
            }
        }
        table.myself = myself?;
        table.current_epoch = conf.loaded_current_epoch();
        table.last_vote_epoch = conf.last_vote_epoch;
        Some(table)
    }

    fn lookup_or_create(&mut self, name: NodeName, now: u64) -> NodeId {
        match self.lookup(&name) {
            Some(id) => id,
            None => self.create(Some(name), 0, now),
        }
    }

    fn load_line(&mut self, id: NodeId, line: &NodeLine, now: u64) {
        let master = line.master.map(|m| self.lookup_or_create(m, now));
        let peers: Vec<(usize, NodeId, bool)> = line
            .migrating
            .iter()
            .map(|&(slot, peer)| (slot as usize, peer, true))
            .chain(
                line.importing
                    .iter()
                    .map(|&(slot, peer)| (slot as usize, peer, false)),
            )
            .map(|(slot, peer, out)| (slot, self.lookup_or_create(peer, now), out))
            .collect();
        if let Some(node) = self.get_mut(id) {
            node.ip = line.ip.clone();
            node.hostname = line.hostname.clone().unwrap_or_default();
            node.port = line.port;
            node.cport = line.cport;
            node.flags |= line.flags;
            if line.flags & flags::FAIL != 0 {
                node.fail_time = now;
            }
            node.ping_sent = if line.ping_sent != 0 { now } else { 0 };
            node.pong_received = if line.pong_received != 0 { now } else { 0 };
            node.config_epoch = line.loaded_config_epoch();
        }
        if let Some(master) = master {
            self.add_replica(master, id);
        }
        for &(first, last) in &line.slots {
            for slot in first as usize..=last as usize {
                self.add_slot(id, slot);
            }
        }
        for (slot, peer, out) in peers {
            if out {
                self.set_migrating(slot, Some(peer));
            } else {
                self.set_importing(slot, Some(peer));
            }
        }
    }

    /// What nodes.conf says of this table (`nodes_conf::render` leaves out nodes
    /// still in handshake, as clusterSaveConfig), and with `use_pport` in a TLS
    /// cluster the plaintext ports, CLUSTER NODES' text. `connected` says whether
    /// a node's bus link is up: links belong to the layer above.
    pub fn to_conf(&self, use_pport: bool, connected: impl Fn(NodeId) -> bool) -> NodesConf {
        let mut ranges = self.slot_ranges_by_node();
        let nodes = self
            .iter()
            .map(|(id, node)| {
                let slots = ranges.remove(&id).unwrap_or_default();
                self.line_of(id, node, slots, use_pport, &connected)
            })
            .collect();
        NodesConf {
            nodes,
            current_epoch: self.current_epoch,
            last_vote_epoch: self.last_vote_epoch,
        }
    }

    /// One node's line (clusterGenNodeDescription), its `slots` taken from
    /// `slot_ranges_by_node` so a whole table's lines walk the slot map once
    /// (clusterGenNodesSlotsInfo) rather than once per node.
    pub fn line_of(
        &self,
        id: NodeId,
        node: &Node,
        slots: Vec<(u16, u16)>,
        use_pport: bool,
        connected: &impl Fn(NodeId) -> bool,
    ) -> NodeLine {
        let master = node.master.and_then(|m| self.get(m));
        // A replica shows its master's epoch: the configuration it serves.
        let config_epoch = match master {
            Some(m) if node.is_replica() => m.config_epoch,
            _ => node.config_epoch,
        };
        let mut line = NodeLine {
            name: node.name,
            ip: node.ip.clone(),
            port: if use_pport && node.pport != 0 {
                node.pport
            } else {
                node.port
            },
            cport: node.cport,
            hostname: (!node.hostname.is_empty()).then(|| node.hostname.clone()),
            flags: node.flags,
            master: master.map(|m| m.name),
            ping_sent: node.ping_sent,
            pong_received: node.pong_received,
            config_epoch,
            connected: connected(id),
            slots,
            migrating: Vec::new(),
            importing: Vec::new(),
        };
        if id == self.myself {
            for slot in 0..SLOTS {
                if let Some(peer) = self.migrating_to(slot).and_then(|p| self.get(p)) {
                    line.migrating.push((slot as u16, peer.name));
                } else if let Some(peer) = self.importing_from(slot).and_then(|p| self.get(p)) {
                    line.importing.push((slot as u16, peer.name));
                }
            }
        }
        line
    }

    pub fn myself(&self) -> NodeId {
        self.myself
    }

    /// Adds a node (createClusterNode + clusterAddNode); a random name when None.
    /// Adding a name already present is refused (Redis asserts).
    pub fn create(&mut self, name: Option<NodeName>, flags: u16, now: u64) -> NodeId {
        let mut name = name.unwrap_or_else(NodeName::random);
        while self.by_name.contains_key(&name) {
            // Only a random name can collide by chance; a caller naming an existing
            // node is a bug the caller's lookup prevents.
            debug_assert!(false, "node {name} added twice");
            name = NodeName::random();
        }
        let node = Node::new(name, flags, now);
        let id = match self.free.pop() {
            Some(id) => {
                self.nodes[id.0 as usize] = Some(node);
                id
            }
            None => {
                self.nodes.push(Some(node));
                NodeId((self.nodes.len() - 1) as u32)
            }
        };
        self.by_name.insert(name, id);
        id
    }

    pub fn lookup(&self, name: &NodeName) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    pub fn get(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id.0 as usize).and_then(Option::as_ref)
    }

    pub fn get_mut(&mut self, id: NodeId) -> Option<&mut Node> {
        self.nodes.get_mut(id.0 as usize).and_then(Option::as_mut)
    }

    /// This node. It is never deleted, so it is always there.
    pub fn me(&self) -> &Node {
        self.nodes[self.myself.0 as usize]
            .as_ref()
            .expect("myself is never deleted")
    }

    pub fn me_mut(&mut self) -> &mut Node {
        let id = self.myself;
        self.nodes[id.0 as usize]
            .as_mut()
            .expect("myself is never deleted")
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Every node with its id, in table order.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, &Node)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.as_ref().map(|n| (NodeId(i as u32), n)))
    }

    /// Gives a node found by handshake its real name (clusterRenameNode).
    /// False when another node already has that name.
    pub fn rename(&mut self, id: NodeId, name: NodeName) -> bool {
        if self.by_name.contains_key(&name) {
            return false;
        }
        let Some(node) = self.get_mut(id) else {
            return false;
        };
        let old = std::mem::replace(&mut node.name, name);
        self.by_name.remove(&old);
        self.by_name.insert(name, id);
        true
    }

    /// Removes a node and every reference to it (clusterDelNode). This node itself
    /// cannot be deleted.
    pub fn delete(&mut self, id: NodeId) -> bool {
        if id == self.myself || self.get(id).is_none() {
            return false;
        }
        for slot in 0..SLOTS {
            if self.importing_from[slot] == Some(id) {
                self.importing_from[slot] = None;
            }
            if self.migrating_to[slot] == Some(id) {
                self.migrating_to[slot] = None;
            }
            if self.owners[slot] == Some(id) {
                self.del_slot(slot);
            }
        }
        for node in self.nodes.iter_mut().flatten() {
            node.fail_reports.retain(|&(sender, _)| sender != id);
        }
        let Some(node) = self.nodes[id.0 as usize].take() else {
            return false;
        };
        for replica in &node.replicas {
            if let Some(r) = self.get_mut(*replica) {
                r.master = None;
            }
        }
        if let Some(master) = node.master {
            self.remove_replica(master, id);
        }
        self.by_name.remove(&node.name);
        self.free.push(id);
        true
    }

    /// The maximal runs of slots with one owner, in slot order: (first, last, owner).
    pub fn slot_runs(&self) -> Vec<(u16, u16, NodeId)> {
        let mut runs: Vec<(u16, u16, NodeId)> = Vec::new();
        for slot in 0..SLOTS {
            let Some(owner) = self.slot_owner(slot) else {
                continue;
            };
            match runs.last_mut() {
                Some((_, last, o)) if *o == owner && usize::from(*last) + 1 == slot => {
                    *last = slot as u16
                }
                _ => runs.push((slot as u16, slot as u16, owner)),
            }
        }
        runs
    }

    /// Each node's slot ranges, ascending, from one walk of the slot map.
    pub fn slot_ranges_by_node(&self) -> HashMap<NodeId, Vec<(u16, u16)>> {
        let mut ranges: HashMap<NodeId, Vec<(u16, u16)>> = HashMap::new();
        for (first, last, owner) in self.slot_runs() {
            ranges.entry(owner).or_default().push((first, last));
        }
        ranges
    }

    // ---- replicas ----

    /// Makes `replica` a replica of `master` in both directions; false when it
    /// already was one (clusterNodeAddSlave, plus the `slaveof` pointer Redis sets
    /// beside every call).
    pub fn add_replica(&mut self, master: NodeId, replica: NodeId) -> bool {
        if master == replica || self.get(replica).is_none() {
            return false;
        }
        let Some(m) = self.get_mut(master) else {
            return false;
        };
        if m.replicas.contains(&replica) {
            return false;
        }
        m.replicas.push(replica);
        m.flags |= flags::MIGRATE_TO;
        if let Some(old) = self.get(replica).and_then(|r| r.master) {
            if old != master {
                self.remove_replica(old, replica);
            }
        }
        if let Some(r) = self.get_mut(replica) {
            r.master = Some(master);
        }
        true
    }

    /// Takes `replica` off `master`'s list (clusterNodeRemoveSlave); a master left
    /// with none is no longer a replica-migration target. The replica's own
    /// `master` is cleared only if it pointed there.
    pub fn remove_replica(&mut self, master: NodeId, replica: NodeId) -> bool {
        let Some(m) = self.get_mut(master) else {
            return false;
        };
        let Some(at) = m.replicas.iter().position(|&r| r == replica) else {
            return false;
        };
        m.replicas.remove(at);
        if m.replicas.is_empty() {
            m.flags &= !flags::MIGRATE_TO;
        }
        if let Some(r) = self.get_mut(replica) {
            if r.master == Some(master) {
                r.master = None;
            }
        }
        true
    }

    /// Records that `replica` replicates `master` without touching `master`'s
    /// list: a replica whose master is not in the table yet (nodes.conf names it
    /// later) or, as Redis, a master pointer set before the master knows.
    pub fn set_master_pointer(&mut self, replica: NodeId, master: Option<NodeId>) {
        if let Some(r) = self.get_mut(replica) {
            r.master = master;
        }
    }

    pub fn count_non_failing_replicas(&self, master: NodeId) -> usize {
        self.get(master).map_or(0, |m| {
            m.replicas
                .iter()
                .filter(|&&r| self.get(r).is_some_and(|r| !r.failed()))
                .count()
        })
    }

    /// Whether any master has a replica (clusterMastersHaveSlaves).
    pub fn masters_have_replicas(&self) -> bool {
        self.iter()
            .any(|(_, n)| !n.is_replica() && !n.replicas.is_empty())
    }

    /// Turns a node into a master (clusterSetNodeAsMaster): off its master's list,
    /// REPLICA flag off, MASTER on. False when it already was a master. Another
    /// node that used to be a replica becomes a replica-migration target.
    pub fn set_as_master(&mut self, id: NodeId) -> bool {
        let Some(node) = self.get(id) else {
            return false;
        };
        if node.is_master() {
            return false;
        }
        let was_replica_of = node.master;
        if let Some(master) = was_replica_of {
            self.remove_replica(master, id);
        }
        let myself = self.myself;
        if let Some(node) = self.get_mut(id) {
            // Another node that took over from a master is a migration target;
            // whether we are one is for the others to judge.
            if was_replica_of.is_some() && id != myself {
                node.flags |= flags::MIGRATE_TO;
            }
            node.flags &= !flags::REPLICA;
            node.flags |= flags::MASTER;
            node.master = None;
        }
        true
    }

    // ---- slots ----

    pub fn slot_owner(&self, slot: usize) -> Option<NodeId> {
        self.owners.get(slot).copied().flatten()
    }

    /// Assigns an unassigned slot (clusterAddSlot); false when it is assigned.
    pub fn add_slot(&mut self, id: NodeId, slot: usize) -> bool {
        if slot >= SLOTS || self.owners[slot].is_some() || self.get(id).is_none() {
            return false;
        }
        self.set_slot_bit(id, slot);
        self.owners[slot] = Some(id);
        true
    }

    /// Unassigns a slot (clusterDelSlot) and returns who served it. When that was
    /// this node or its master, the caller drops the slot's shard channels.
    pub fn del_slot(&mut self, slot: usize) -> Option<NodeId> {
        let owner = self.owners.get(slot).copied().flatten()?;
        self.owners[slot] = None;
        if let Some(node) = self.get_mut(owner) {
            if wire::slot_is_set(&node.slots, slot) {
                wire::clear_slot(&mut node.slots, slot);
                node.slot_count -= 1;
            }
        }
        Some(owner)
    }

    /// Unassigns every slot `id` serves (clusterDelNodeSlots); returns how many.
    pub fn del_node_slots(&mut self, id: NodeId) -> usize {
        let mut deleted = 0;
        for slot in 0..SLOTS {
            if self.get(id).is_some_and(|n| n.serves(slot)) {
                self.del_slot(slot);
                deleted += 1;
            }
        }
        deleted
    }

    /// Sets a slot's bit in a node's bitmap (clusterNodeSetSlotBit): a master
    /// getting its first slot becomes a replica-migration target when some other
    /// master has replicas.
    fn set_slot_bit(&mut self, id: NodeId, slot: usize) {
        let first_with_others_replicated =
            self.get(id).is_some_and(|n| n.slot_count == 0) && self.masters_have_replicas();
        let Some(node) = self.get_mut(id) else {
            return;
        };
        if wire::slot_is_set(&node.slots, slot) {
            return;
        }
        wire::set_slot(&mut node.slots, slot);
        node.slot_count += 1;
        if first_with_others_replicated {
            node.flags |= flags::MIGRATE_TO;
        }
    }

    pub fn migrating_to(&self, slot: usize) -> Option<NodeId> {
        self.migrating_to.get(slot).copied().flatten()
    }

    pub fn importing_from(&self, slot: usize) -> Option<NodeId> {
        self.importing_from.get(slot).copied().flatten()
    }

    pub fn set_migrating(&mut self, slot: usize, to: Option<NodeId>) {
        if let Some(entry) = self.migrating_to.get_mut(slot) {
            *entry = to;
        }
    }

    pub fn set_importing(&mut self, slot: usize, from: Option<NodeId>) {
        if let Some(entry) = self.importing_from.get_mut(slot) {
            *entry = from;
        }
    }

    /// Stops every slot migration (clusterCloseAllSlots).
    pub fn close_all_slots(&mut self) {
        self.migrating_to.fill(None);
        self.importing_from.fill(None);
    }

    // ---- failure reports ----

    /// `sender` says `failing` is failing (clusterNodeAddFailureReport): true for a
    /// new report, false when it only refreshed one.
    pub fn add_failure_report(&mut self, failing: NodeId, sender: NodeId, now: u64) -> bool {
        let Some(node) = self.get_mut(failing) else {
            return false;
        };
        if let Some(report) = node.fail_reports.iter_mut().find(|(s, _)| *s == sender) {
            report.1 = now;
            return false;
        }
        node.fail_reports.push((sender, now));
        true
    }

    /// `sender` now says `node` is fine (clusterNodeDelFailureReport): true when
    /// it had reported it.
    pub fn del_failure_report(
        &mut self,
        node: NodeId,
        sender: NodeId,
        now: u64,
        node_timeout: u64,
    ) -> bool {
        let Some(n) = self.get_mut(node) else {
            return false;
        };
        let Some(at) = n.fail_reports.iter().position(|(s, _)| *s == sender) else {
            return false;
        };
        n.fail_reports.remove(at);
        self.cleanup_failure_reports(node, now, node_timeout);
        true
    }

    /// Drops reports older than two node timeouts, then counts the rest
    /// (clusterNodeFailureReportsCount).
    pub fn failure_report_count(&mut self, node: NodeId, now: u64, node_timeout: u64) -> usize {
        self.cleanup_failure_reports(node, now, node_timeout);
        self.get(node).map_or(0, |n| n.fail_reports.len())
    }

    fn cleanup_failure_reports(&mut self, node: NodeId, now: u64, node_timeout: u64) {
        let max_age = node_timeout.saturating_mul(FAIL_REPORT_VALIDITY_MULT);
        if let Some(n) = self.get_mut(node) {
            n.fail_reports
                .retain(|&(_, at)| now.saturating_sub(at) <= max_age);
        }
    }

    // ---- epochs ----

    /// The greatest config epoch known, or the current epoch if greater
    /// (clusterGetMaxEpoch).
    pub fn max_epoch(&self) -> u64 {
        self.iter()
            .map(|(_, n)| n.config_epoch)
            .max()
            .unwrap_or(0)
            .max(self.current_epoch)
    }

    /// Gives this node a new config epoch without agreement
    /// (clusterBumpConfigEpochWithoutConsensus) unless it already has the greatest
    /// non-zero one; returns the new epoch. Used when a slot import closes and by
    /// CLUSTER FAILOVER TAKEOVER; collisions are resolved by
    /// `resolve_epoch_collision`.
    pub fn bump_epoch_without_consensus(&mut self) -> Option<u64> {
        let max = self.max_epoch();
        let mine = self.me().config_epoch;
        if mine != 0 && mine == max {
            return None;
        }
        self.current_epoch += 1;
        let epoch = self.current_epoch;
        self.me_mut().config_epoch = epoch;
        Some(epoch)
    }

    /// Another master announced our config epoch (clusterHandleConfigEpochCollision):
    /// of the two, the node with the smaller name moves to a new epoch, so colliding
    /// masters always end up apart. Returns our new epoch when we moved.
    pub fn resolve_epoch_collision(&mut self, sender: NodeId) -> Option<u64> {
        let other = self.get(sender)?;
        let me = self.me();
        if other.config_epoch != me.config_epoch || !other.is_master() || !me.is_master() {
            return None;
        }
        if other.name <= me.name {
            return None;
        }
        self.current_epoch += 1;
        let epoch = self.current_epoch;
        self.me_mut().config_epoch = epoch;
        Some(epoch)
    }

    // ---- the FORGET blacklist ----

    /// Keeps `name` from being re-added for a minute (clusterBlacklistAddNode).
    pub fn blacklist_add(&mut self, name: NodeName, now_secs: u64) {
        self.blacklist.retain(|_, until| *until >= now_secs);
        self.blacklist.insert(name, now_secs + BLACKLIST_TTL_SECS);
    }

    pub fn blacklisted(&mut self, name: &NodeName, now_secs: u64) -> bool {
        self.blacklist.retain(|_, until| *until >= now_secs);
        self.blacklist.contains_key(name)
    }
}

#[cfg(test)]
mod tests;
