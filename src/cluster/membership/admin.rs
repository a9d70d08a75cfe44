//! What the CLUSTER commands change, as Redis 7.0.15's clusterCommand changes it:
//! slot assignment (ADDSLOTS, DELSLOTS and their RANGE forms, FLUSHSLOTS), slot
//! migration states (SETSLOT), FORGET with its blacklist, RESET, the config epoch
//! (SET-CONFIG-EPOCH, BUMPEPOCH), and what the replies read that the engine keeps
//! to itself (links, failure reports, our replication offset).
//!
//! Argument parsing and reply texts belong to `cluster::command`; here are the
//! rules about the cluster's state. Each operation checks everything before it
//! changes anything, so an error leaves the node as it was, and then asks
//! `before_sleep` for what Redis's clusterDoBeforeSleep would do (save the config,
//! update the state). Operations that move slots, open or close migrations or
//! drop nodes also emit `Effect::TopologyChanged`, since shards route by those.
//!
//! Not mirrored here: clusterDelSlot dropping the shard channels of a slot this
//! node served. The engine knows no channels; the layer above compares routing
//! tables on `TopologyChanged`.

use super::*;
use std::fmt;

/// Why a CLUSTER command left the cluster as it was. `Display` is Redis's reply
/// text without the "ERR " code, except for `UnknownNode`, whose text names the
/// node as the client wrote it (the command layer has those bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminError {
    /// A slot number of 16384 or more.
    InvalidSlot,
    /// A slot range whose start is past its end.
    BadRange(u16, u16),
    /// SETSLOT on a replica.
    NotMaster,
    /// SETSLOT MIGRATING of a slot another node (or nobody) serves.
    NotOwner(u16),
    /// SETSLOT IMPORTING of a slot we serve.
    AlreadyOwner(u16),
    /// A node ID the table does not have.
    UnknownNode,
    /// SETSLOT toward a replica.
    TargetNotMaster,
    /// SETSLOT NODE giving away a slot we still hold keys of.
    StillHoldsKeys(u16),
    ForgetMyself,
    ForgetMyMaster,
    /// DELSLOTS of a slot nobody serves.
    SlotUnassigned(u16),
    /// ADDSLOTS of a slot some node serves.
    SlotBusy(u16),
    /// A slot named twice in one ADDSLOTS / DELSLOTS.
    SlotRepeated(u16),
    /// FLUSHSLOTS with keys in the keyspace.
    FlushslotsWithKeys,
    /// RESET of a master holding keys.
    ResetMasterWithKeys,
    /// SET-CONFIG-EPOCH on a node that knows another node.
    EpochNotAlone,
    /// SET-CONFIG-EPOCH on a node whose config epoch is already set.
    EpochAlreadySet,
}

impl fmt::Display for AdminError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdminError::InvalidSlot => f.write_str("Invalid or out of range slot"),
            AdminError::BadRange(first, last) => write!(
                f,
                "start slot number {first} is greater than end slot number {last}"
            ),
            AdminError::NotMaster => f.write_str("Please use SETSLOT only with masters."),
            AdminError::NotOwner(slot) => write!(f, "I'm not the owner of hash slot {slot}"),
            AdminError::AlreadyOwner(slot) => {
                write!(f, "I'm already the owner of hash slot {slot}")
            }
            AdminError::UnknownNode => f.write_str("Unknown node"),
            AdminError::TargetNotMaster => f.write_str("Target node is not a master"),
            AdminError::StillHoldsKeys(slot) => write!(
                f,
                "Can't assign hashslot {slot} to a different node while I still hold keys for this hash slot."
            ),
            AdminError::ForgetMyself => f.write_str("I tried hard but I can't forget myself..."),
            AdminError::ForgetMyMaster => f.write_str("Can't forget my master!"),
            AdminError::SlotUnassigned(slot) => write!(f, "Slot {slot} is already unassigned"),
            AdminError::SlotBusy(slot) => write!(f, "Slot {slot} is already busy"),
            AdminError::SlotRepeated(slot) => write!(f, "Slot {slot} specified multiple times"),
            AdminError::FlushslotsWithKeys => {
                f.write_str("DB must be empty to perform CLUSTER FLUSHSLOTS.")
            }
            AdminError::ResetMasterWithKeys => {
                f.write_str("CLUSTER RESET can't be called with master nodes containing keys")
            }
            AdminError::EpochNotAlone => f.write_str(
                "The user can assign a config epoch only when the node does not know any other node.",
            ),
            AdminError::EpochAlreadySet => f.write_str("Node config epoch is already non-zero"),
        }
    }
}

impl std::error::Error for AdminError {}

/// CLUSTER SETSLOT's action. The target is `None` when the ID the client gave
/// names no node: Redis looks the node up between its other checks, so whether
/// that is the error depends on them (`AdminError::UnknownNode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetSlot {
    Migrating(Option<NodeId>),
    Importing(Option<NodeId>),
    Stable,
    Node(Option<NodeId>),
}

/// CLUSTER RESET's kind: HARD also takes a new node ID and zeroes the epochs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetMode {
    Soft,
    Hard,
}

/// What a reset leaves for the layer above beyond the effects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResetOutcome {
    /// The node was a replica: its whole dataset must go (Redis's emptyData),
    /// after the `StopReplicating` effect and before the next command runs.
    pub flush_data: bool,
}

/// CLUSTER BUMPEPOCH's outcome: the node's config epoch, new or kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bump {
    Bumped(u64),
    /// Already the greatest config epoch, and not 0.
    Still(u64),
}

/// One bus link attached to a node, as CLUSTER LINKS lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkInfo {
    pub link: LinkId,
    pub node: NodeId,
    /// Accepted from the node ("from"), as opposed to opened toward it ("to").
    pub inbound: bool,
    /// When the link was created (ms).
    pub ctime: u64,
}

/// The slots of one ADDSLOTS / DELSLOTS (or RANGE form) as they are checked:
/// `Membership::check_slots` takes each range in argument order, so the first
/// error is the one Redis reports, and `apply_slots` changes them all at once.
/// Apply right after checking, with nothing run on the engine in between; a
/// change whose check failed is dropped, never applied.
pub struct SlotChange {
    del: bool,
    seen: Box<wire::SlotBitmap>,
}

impl SlotChange {
    /// A change assigning slots to this node, or with `del` unassigning them.
    pub fn new(del: bool) -> SlotChange {
        SlotChange {
            del,
            seen: Box::new([0; wire::BITMAP_LEN]),
        }
    }
}

impl Membership {
    // ---- what the replies read ----

    /// Our replication offset as `set_replication` last gave it: the one CLUSTER
    /// SHARDS and SLOTS report for this node.
    pub fn repl_offset(&self) -> u64 {
        self.repl_offset
    }

    /// The links attached to nodes, each node's outbound one first, in table
    /// order (Redis walks its node dict: each `link`, then `inbound_link`).
    /// Accepted links whose node is not known yet are not listed, as in Redis.
    pub fn links(&self) -> Vec<LinkInfo> {
        let mut out = Vec::new();
        for (id, _) in self.table.iter() {
            let attached = [
                (self.outbound.get(&id), false),
                (self.inbound.get(&id), true),
            ];
            for (link, inbound) in attached {
                let Some(&link) = link else {
                    continue;
                };
                if let Some(l) = self.links.get(&link) {
                    out.push(LinkInfo {
                        link,
                        node: id,
                        inbound,
                        ctime: l.ctime,
                    });
                }
            }
        }
        out
    }

    /// CLUSTER COUNT-FAILURE-REPORTS: the reports still valid at `now`
    /// (clusterNodeFailureReportsCount drops the stale ones first).
    pub fn count_failure_reports(&mut self, node: NodeId, now: u64) -> usize {
        self.table
            .failure_report_count(node, now, self.settings.node_timeout)
    }

    // ---- slot assignment ----

    /// checkSlotAssignmentsOrReply for `first..=last`: each slot must be free
    /// (or, to delete, assigned) and not named before in this change.
    pub fn check_slots(
        &self,
        change: &mut SlotChange,
        first: u16,
        last: u16,
    ) -> Result<(), AdminError> {
        if usize::from(first) >= SLOTS || usize::from(last) >= SLOTS {
            return Err(AdminError::InvalidSlot);
        }
        if first > last {
            return Err(AdminError::BadRange(first, last));
        }
        for slot in first..=last {
            let assigned = self.table.slot_owner(slot as usize).is_some();
            if change.del && !assigned {
                return Err(AdminError::SlotUnassigned(slot));
            }
            if !change.del && assigned {
                return Err(AdminError::SlotBusy(slot));
            }
            if wire::slot_is_set(&change.seen, slot as usize) {
                return Err(AdminError::SlotRepeated(slot));
            }
            wire::set_slot(&mut change.seen, slot as usize);
        }
        Ok(())
    }

    /// clusterUpdateSlots: assigns the checked slots to this node (ending any
    /// import of them: we own them now) or unassigns them.
    pub fn apply_slots(&mut self, change: SlotChange) {
        let myself = self.table.myself();
        for slot in (0..SLOTS).filter(|&s| wire::slot_is_set(&change.seen, s)) {
            self.table.set_importing(slot, None);
            if change.del {
                self.table.del_slot(slot);
            } else {
                self.table.add_slot(myself, slot);
            }
        }
        self.todo |= todo::UPDATE_STATE | todo::SAVE_CONFIG;
        self.effects.push(Effect::TopologyChanged);
    }

    /// Check-then-apply over several inclusive ranges (the RANGE commands as an
    /// API): nothing changes unless every slot passes.
    pub fn change_slots(&mut self, del: bool, ranges: &[(u16, u16)]) -> Result<(), AdminError> {
        let mut change = SlotChange::new(del);
        for &(first, last) in ranges {
            self.check_slots(&mut change, first, last)?;
        }
        self.apply_slots(change);
        Ok(())
    }

    /// CLUSTER FLUSHSLOTS: this node gives up every slot, if it holds no keys.
    pub fn flush_slots(&mut self, keyspace_empty: bool) -> Result<(), AdminError> {
        if !keyspace_empty {
            return Err(AdminError::FlushslotsWithKeys);
        }
        let myself = self.table.myself();
        self.table.del_node_slots(myself);
        self.todo |= todo::UPDATE_STATE | todo::SAVE_CONFIG;
        self.effects.push(Effect::TopologyChanged);
        Ok(())
    }

    // ---- SETSLOT ----

    /// CLUSTER SETSLOT `slot` `action`, with Redis's checks in Redis's order.
    /// `keys_in_slot` is how many keys this node holds in the slot (only NODE
    /// reads it). NODE giving away our last slot makes us a replica of the new
    /// owner (with `cluster-allow-replica-migration`); NODE to ourselves of a
    /// slot we were importing closes the import under a new config epoch,
    /// announced to everyone at once, so the new owner wins any conflict.
    pub fn set_slot(
        &mut self,
        slot: u16,
        action: SetSlot,
        keys_in_slot: u64,
        now: u64,
    ) -> Result<(), AdminError> {
        if self.table.me().is_replica() {
            return Err(AdminError::NotMaster);
        }
        let s = usize::from(slot);
        if s >= SLOTS {
            return Err(AdminError::InvalidSlot);
        }
        let myself = self.table.myself();
        let owner = self.table.slot_owner(s);
        match action {
            SetSlot::Migrating(target) => {
                if owner != Some(myself) {
                    return Err(AdminError::NotOwner(slot));
                }
                let target = self.master_target(target)?;
                self.table.set_migrating(s, Some(target));
            }
            SetSlot::Importing(source) => {
                if owner == Some(myself) {
                    return Err(AdminError::AlreadyOwner(slot));
                }
                let source = self.master_target(source)?;
                self.table.set_importing(s, Some(source));
            }
            SetSlot::Stable => {
                self.table.set_importing(s, None);
                self.table.set_migrating(s, None);
            }
            SetSlot::Node(target) => {
                let target = self.master_target(target)?;
                self.assign_slot(s, target, keys_in_slot, now)?;
            }
        }
        self.todo |= todo::SAVE_CONFIG | todo::UPDATE_STATE;
        self.effects.push(Effect::TopologyChanged);
        Ok(())
    }

    /// A SETSLOT target: known, and not a replica.
    fn master_target(&self, node: Option<NodeId>) -> Result<NodeId, AdminError> {
        let node = node.ok_or(AdminError::UnknownNode)?;
        let n = self.table.get(node).ok_or(AdminError::UnknownNode)?;
        if n.is_replica() {
            return Err(AdminError::TargetNotMaster);
        }
        Ok(node)
    }

    /// SETSLOT NODE: `slot` belongs to `target` from now on.
    fn assign_slot(
        &mut self,
        slot: usize,
        target: NodeId,
        keys_in_slot: u64,
        now: u64,
    ) -> Result<(), AdminError> {
        let myself = self.table.myself();
        let was_mine = self.table.slot_owner(slot) == Some(myself);
        if was_mine && target != myself && keys_in_slot != 0 {
            return Err(AdminError::StillHoldsKeys(slot as u16));
        }
        // A migration whose keys have all moved ends with the slot's new owner.
        if keys_in_slot == 0 && self.table.migrating_to(slot).is_some() {
            self.table.set_migrating(slot, None);
        }
        self.table.del_slot(slot);
        self.table.add_slot(target, slot);
        let emptied = self.table.me().slot_count() == 0;
        if was_mine && target != myself && emptied && self.settings.allow_replica_migration {
            tracing::warn!(
                "Configuration change detected. Reconfiguring myself as a replica of {}",
                self.name_of(target)
            );
            self.set_my_master(target);
            self.todo |= todo::SAVE_CONFIG | todo::UPDATE_STATE | todo::FSYNC_CONFIG;
        }
        if target == myself && self.table.importing_from(slot).is_some() {
            if self.bump_epoch_without_consensus().is_some() {
                tracing::warn!("configEpoch updated after importing slot {slot}");
            }
            self.table.set_importing(slot, None);
            self.broadcast_pong(false, now);
        }
        Ok(())
    }

    // ---- nodes ----

    /// CLUSTER FORGET: the node goes, and gossip may not bring it back for
    /// `BLACKLIST_TTL_SECS`. Not ourselves, nor the master we replicate.
    pub fn forget(&mut self, node: NodeId, now: u64) -> Result<(), AdminError> {
        let myself = self.table.myself();
        if node == myself {
            return Err(AdminError::ForgetMyself);
        }
        let me = self.table.me();
        if me.is_replica() && me.master() == Some(node) {
            return Err(AdminError::ForgetMyMaster);
        }
        let name = self.table.get(node).ok_or(AdminError::UnknownNode)?.name;
        self.table.blacklist_add(name, now / 1000);
        self.delete_node(node);
        self.todo |= todo::UPDATE_STATE | todo::SAVE_CONFIG;
        self.effects.push(Effect::TopologyChanged);
        Ok(())
    }

    /// CLUSTER RESET (clusterReset): every other node forgotten, every slot
    /// unassigned and every migration closed, a replica turned into a master
    /// (its data flushed: see `ResetOutcome`); HARD also zeroes the epochs and
    /// takes a new node ID. A master holding keys may not be reset.
    pub fn reset(
        &mut self,
        mode: ResetMode,
        keyspace_empty: bool,
    ) -> Result<ResetOutcome, AdminError> {
        let myself = self.table.myself();
        if self.table.me().is_master() && !keyspace_empty {
            return Err(AdminError::ResetMasterWithKeys);
        }
        let flush_data = self.table.me().is_replica();
        if flush_data {
            self.table.set_as_master(myself);
            self.effects.push(Effect::StopReplicating);
        }
        self.table.close_all_slots();
        self.reset_manual_failover();
        for slot in 0..SLOTS {
            self.table.del_slot(slot);
        }
        let others: Vec<NodeId> = self
            .table
            .iter()
            .map(|(id, _)| id)
            .filter(|&id| id != myself)
            .collect();
        for id in others {
            self.delete_node(id);
        }
        if mode == ResetMode::Hard {
            self.hard_reset_identity();
        }
        self.todo |= todo::SAVE_CONFIG | todo::UPDATE_STATE | todo::FSYNC_CONFIG;
        self.effects.push(Effect::TopologyChanged);
        Ok(ResetOutcome { flush_data })
    }

    /// RESET HARD: epochs back to 0 and a new random node ID.
    fn hard_reset_identity(&mut self) {
        self.table.current_epoch = 0;
        self.table.last_vote_epoch = 0;
        self.table.me_mut().config_epoch = 0;
        tracing::warn!("configEpoch set to 0 via CLUSTER RESET HARD");
        let myself = self.table.myself();
        // A random name colliding with a known one is as unlikely as in Redis
        // (which asserts); try another rather than keep the old ID.
        while !self.table.rename(myself, NodeName::random()) {}
        tracing::info!("Node hard reset, now I'm {}", self.table.me().name);
    }

    // ---- epochs ----

    /// CLUSTER SET-CONFIG-EPOCH: only on a node that knows no other node and
    /// has no config epoch yet (cluster creation, before nodes meet).
    pub fn set_config_epoch(&mut self, epoch: u64) -> Result<(), AdminError> {
        if self.table.len() > 1 {
            return Err(AdminError::EpochNotAlone);
        }
        if self.table.me().config_epoch != 0 {
            return Err(AdminError::EpochAlreadySet);
        }
        self.table.me_mut().config_epoch = epoch;
        tracing::warn!("configEpoch set to {epoch} via CLUSTER SET-CONFIG-EPOCH");
        if self.table.current_epoch < epoch {
            self.table.current_epoch = epoch;
        }
        // No fsync: should the save be lost, collision resolution still gives
        // this node an epoch of its own.
        self.todo |= todo::UPDATE_STATE | todo::SAVE_CONFIG;
        Ok(())
    }

    /// CLUSTER BUMPEPOCH: a new config epoch without agreement, unless ours is
    /// already the greatest (and not 0).
    pub fn bump_epoch(&mut self) -> Bump {
        match self.bump_epoch_without_consensus() {
            Some(epoch) => Bump::Bumped(epoch),
            None => Bump::Still(self.table.me().config_epoch),
        }
    }

    /// clusterBumpConfigEpochWithoutConsensus, with its save.
    fn bump_epoch_without_consensus(&mut self) -> Option<u64> {
        let epoch = self.table.bump_epoch_without_consensus()?;
        self.todo |= todo::SAVE_CONFIG | todo::FSYNC_CONFIG;
        tracing::warn!("New configEpoch set to {epoch}");
        Some(epoch)
    }
}
