//! What the clock drives (clusterCron and clusterUpdateState): reconnecting
//! links, pinging, suspecting silent nodes, the round's deferred work, and the
//! cluster state.

use super::*;

impl Membership {
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
    pub(super) fn reconnect_if_needed(&mut self, id: NodeId, handshake_timeout: u64, now: u64) {
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
    pub(super) fn ping_a_random_node(&mut self, now: u64) {
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
    pub(super) fn check_node(&mut self, id: NodeId, now: u64) -> bool {
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
    pub(super) fn update_state(&mut self, now: u64) {
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
