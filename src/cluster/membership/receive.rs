//! What arrives on the bus (clusterProcessPacket): the handshake, the
//! configuration every PING, PONG and MEET carries (role, slots, epochs), gossip
//! about other nodes with its failure reports, FAIL, UPDATE and PUBLISH. The
//! votes and MFSTART are `failover.rs`'s.

use super::*;

impl Membership {
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
    pub(super) fn sender_of(
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
    pub(super) fn answer_ping(
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
    pub(super) fn ping_config(
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
    pub(super) fn on_pong(&mut self, node: NodeId, now: u64) {
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
    pub(super) fn update_role(&mut self, sender: NodeId, h: &Header) {
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
    pub(super) fn check_slot_claims(
        &mut self,
        sender: NodeId,
        h: &Header,
        sender_config_epoch: u64,
    ) {
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

    pub(super) fn slot_unclaimed(&self, slot: usize) -> bool {
        self.table.slot_owner(slot).is_none() || wire::slot_is_set(&self.owner_not_claiming, slot)
    }

    /// clusterUpdateSlotsConfigWith: `sender` claims `slots` under `epoch`. Each
    /// slot that is unassigned, unclaimed or held under an older epoch moves to
    /// it, unless we are importing it (only the admin closes an import). If that
    /// leaves us (or our master) without slots, we follow the new owner as its
    /// replica; a master that only lost some slots drops their keys.
    pub(super) fn update_slots_config_with(
        &mut self,
        sender: NodeId,
        epoch: u64,
        slots: &wire::SlotBitmap,
    ) {
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
                wire::clear_slot(&mut self.owner_not_claiming, slot);
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
                wire::clear_slot(&mut self.owner_not_claiming, slot);
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
    pub(super) fn set_my_master(&mut self, master: NodeId) {
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
    pub(super) fn update_address_if_needed(
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
    pub(super) fn process_gossip(&mut self, m: &Message, sender: Option<NodeId>, now: u64) {
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

    pub(super) fn gossip_about_known(
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
    pub(super) fn gossip_about_new(&mut self, g: &Gossip, sender: Option<NodeId>, now: u64) {
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
    pub(super) fn process_extensions(&mut self, m: &Message, sender: NodeId) {
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
    pub(super) fn mark_failing_if_needed(&mut self, node: NodeId, now: u64) {
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
    pub(super) fn clear_failure_if_needed(&mut self, node: NodeId, now: u64) {
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

    pub(super) fn on_fail(
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
    pub(super) fn on_update(
        &mut self,
        config_epoch: u64,
        about: &NodeName,
        slots: &wire::SlotBitmap,
    ) {
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
}
