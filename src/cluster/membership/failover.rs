//! Replicas taking over: Redis 7.0's automatic failover (a replica of a FAIL
//! master asks the masters for votes and takes the slots when a majority grants
//! them), manual failover (CLUSTER FAILOVER and its FORCE and TAKEOVER forms,
//! the master pausing writes until its replica has caught up), the masters' side
//! of the vote, and replica migration (a replica of a well-covered master moving
//! to one left without working replicas).
//!
//! The rules, as cluster.c states them:
//! - an election starts 500-1000 ms after the master's FAIL, plus one second per
//!   replica with a better replication offset (the rank), so the most up-to-date
//!   replica usually asks first; it lasts `max(2 × node timeout, 2 s)` and is
//!   retried after twice that;
//! - a master votes at most once per epoch, only for a replica whose master is
//!   FAIL (or that says FORCEACK, in a manual failover), at most once per two node
//!   timeouts for the same master, and never for a claim older than a slot's
//!   current owner's;
//! - the winner takes its master's slots under the election's epoch and tells
//!   everyone with a PONG; a replica whose data is older than
//!   `repl-ping-replica-period + node timeout × cluster-replica-validity-factor`
//!   does not run, except in a manual failover.

use super::*;

/// A manual failover must finish within this long (`CLUSTER_MF_TIMEOUT`).
pub const MANUAL_FAILOVER_TIMEOUT_MS: u64 = 5000;
/// A master pauses writes for this many manual-failover timeouts.
const MANUAL_FAILOVER_PAUSE_MULT: u64 = 2;
/// A master must stay orphaned this long before a replica migrates to it.
const REPLICA_MIGRATION_DELAY_MS: u64 = 5000;
/// The same reason for not failing over is logged again after this long.
const CANT_FAILOVER_RELOG_PERIOD_MS: u64 = 300_000;

/// Why a replica is not failing over (`CLUSTER_CANT_FAILOVER_*`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum CantFailover {
    #[default]
    None,
    DataAge,
    WaitingDelay,
    Expired,
    WaitingVotes,
}

/// CLUSTER FAILOVER's option.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FailoverOption {
    /// Coordinate with the master: it pauses writes, we catch up, then we run.
    Default,
    /// The master is unreachable: run an election without it.
    Force,
    /// No election: take a new epoch without agreement and the slots with it.
    Takeover,
}

/// The election and manual failover state (the failover_auth_* and mf_* fields
/// of clusterState).
#[derive(Debug, Default)]
pub(super) struct Election {
    /// When the current or next election starts.
    auth_time: u64,
    auth_count: usize,
    auth_sent: bool,
    auth_rank: usize,
    auth_epoch: u64,
    cant_reason: CantFailover,
    last_cant_log: Option<u64>,
    /// When the manual failover in progress gives up; 0 when none is.
    pub(super) mf_end: u64,
    /// On a master: the replica that asked for the manual failover.
    mf_replica: Option<NodeId>,
    /// On a master: the server confirmed that writes are held (`writes_paused`),
    /// so the offset we announce is final and pings may say PAUSED.
    pub(super) mf_paused: bool,
    /// On a replica: the offset the paused master announced.
    mf_master_offset: Option<u64>,
    mf_can_start: bool,
}

impl Membership {
    /// CLUSTER FAILOVER [FORCE|TAKEOVER]; the error is Redis's reply text.
    pub fn failover(&mut self, option: FailoverOption, now: u64) -> Result<(), &'static str> {
        let me = self.table.me();
        if me.is_master() {
            return Err("You should send CLUSTER FAILOVER to a replica");
        }
        let Some(master) = me.master() else {
            return Err("I'm a replica but my master is unknown to me");
        };
        let master_down = self.table.get(master).is_none_or(|m| m.failed())
            || !self.outbound.contains_key(&master);
        if option == FailoverOption::Default && master_down {
            return Err("Master is down or failed, please use CLUSTER FAILOVER FORCE");
        }
        self.reset_manual_failover();
        self.election.mf_end = now + MANUAL_FAILOVER_TIMEOUT_MS;
        match option {
            FailoverOption::Takeover => {
                tracing::warn!("Taking over the master (user request).");
                if let Some(epoch) = self.table.bump_epoch_without_consensus() {
                    tracing::warn!("New configEpoch set to {epoch}");
                }
                self.replace_my_master(now);
            }
            FailoverOption::Force => {
                tracing::warn!("Forced failover user request accepted.");
                self.election.mf_can_start = true;
            }
            FailoverOption::Default => {
                tracing::warn!("Manual failover user request accepted.");
                if let Some(link) = self.outbound.get(&master).copied() {
                    let bytes = self.encode(Body::MfStart);
                    self.send(link, bytes);
                }
            }
        }
        Ok(())
    }

    /// CLUSTER REPLICATE: this node follows `master`. `keyspace_empty` says
    /// whether this node holds no keys (a master with data may not).
    pub fn replicate(&mut self, master: &[u8], keyspace_empty: bool) -> Result<(), String> {
        let Some(id) = NodeName::parse(master).and_then(|n| self.table.lookup(&n)) else {
            return Err(format!("Unknown node {}", String::from_utf8_lossy(master)));
        };
        if id == self.table.myself() {
            return Err("Can't replicate myself".into());
        }
        if self.table.get(id).is_some_and(|n| n.is_replica()) {
            return Err("I can only replicate a master, not a replica.".into());
        }
        let me = self.table.me();
        if me.is_master() && (me.slot_count() != 0 || !keyspace_empty) {
            return Err(
                "To set a master the node must be empty and without assigned slots.".into(),
            );
        }
        self.set_my_master(id);
        self.todo |= todo::UPDATE_STATE | todo::SAVE_CONFIG;
        Ok(())
    }

    /// resetManualFailover: a master that paused writes for it resumes them.
    pub(super) fn reset_manual_failover(&mut self) {
        if self.election.mf_replica.is_some() {
            self.effects.push(Effect::Unpause);
        }
        self.election.mf_end = 0;
        self.election.mf_can_start = false;
        self.election.mf_replica = None;
        self.election.mf_paused = false;
        self.election.mf_master_offset = None;
    }

    pub(super) fn manual_failover_check_timeout(&mut self, now: u64) {
        if self.election.mf_end != 0 && self.election.mf_end < now {
            tracing::warn!("Manual failover timed out.");
            self.reset_manual_failover();
        }
    }

    /// A replica's manual failover may start once it has processed everything
    /// its paused master had.
    pub(super) fn handle_manual_failover(&mut self) {
        let e = &self.election;
        if e.mf_end == 0 || e.mf_can_start {
            return;
        }
        if e.mf_master_offset == Some(self.repl_offset) {
            self.election.mf_can_start = true;
            tracing::warn!("All master replication stream processed, manual failover can start.");
            self.todo |= todo::HANDLE_FAILOVER;
        }
    }

    /// A paused master's header carries the offset its replica must reach.
    pub(super) fn note_paused_master_offset(&mut self, sender: NodeId, h: &Header) {
        let me = self.table.me();
        let from_my_master = me.is_replica() && me.master() == Some(sender);
        if self.election.mf_end != 0
            && from_my_master
            && h.mflags[0] & wire::mflags0::PAUSED != 0
            && self.election.mf_master_offset.is_none()
        {
            self.election.mf_master_offset = Some(h.offset);
            self.todo |= todo::HANDLE_MANUAL_FAILOVER;
            tracing::warn!(
                "Received replication offset for paused master manual failover: {}",
                h.offset
            );
        }
    }

    /// MFSTART from one of our replicas: pause writes. Redis pings the replica
    /// at once with its offset, read after its (single-threaded) pause took
    /// hold; here the shards pause asynchronously and writes may still be on
    /// their way, so the PAUSED ping waits for `writes_paused` with the offset
    /// of then. A replica takes the first PAUSED offset it hears as final.
    pub(super) fn on_mfstart(&mut self, sender: NodeId, _link: LinkId, now: u64) {
        let myself = self.table.myself();
        if self.table.get(sender).and_then(|s| s.master()) != Some(myself) {
            return;
        }
        self.reset_manual_failover();
        self.election.mf_end = now + MANUAL_FAILOVER_TIMEOUT_MS;
        self.election.mf_replica = Some(sender);
        let until = now + MANUAL_FAILOVER_TIMEOUT_MS * MANUAL_FAILOVER_PAUSE_MULT;
        self.effects.push(Effect::PauseWrites { until });
        tracing::warn!(
            "Manual failover requested by replica {}.",
            self.name_of(sender)
        );
    }

    /// The server held writes for the manual failover a replica asked for, and
    /// `offset` is where its stream stands now: announce it to the replica
    /// (with PAUSED from now on).
    pub fn writes_paused(&mut self, offset: u64, now: u64) {
        let Some(replica) = self.manual_failover_replica() else {
            return;
        };
        if self.election.mf_paused {
            return;
        }
        self.election.mf_paused = true;
        self.repl_offset = offset;
        if let Some(link) = self.outbound.get(&replica).copied() {
            self.send_ping(link, kind::PING, now);
        }
    }

    /// Whether this master is pinging `node` continuously for its manual failover.
    pub(super) fn manual_failover_replica(&self) -> Option<NodeId> {
        self.election
            .mf_replica
            .filter(|_| self.election.mf_end != 0 && self.table.me().is_master())
    }

    /// clusterGetSlaveRank: how many replicas of our master that may fail over
    /// have processed more of its stream than we have.
    fn replica_rank(&self) -> usize {
        let me = self.table.me();
        let Some(master) = me.master().and_then(|m| self.table.get(m)) else {
            return 0;
        };
        let myself = self.table.myself();
        master
            .replicas()
            .iter()
            .filter(|&&r| r != myself)
            .filter_map(|&r| self.table.get(r))
            .filter(|r| r.flags & flags::NOFAILOVER == 0 && r.repl_offset > self.repl_offset)
            .count()
    }

    /// clusterLogCantFailover: say why, but not over and over, and not while
    /// the master failed only a little while ago.
    fn log_cant_failover(&mut self, reason: CantFailover, now: u64) {
        let recently = self
            .election
            .last_cant_log
            .is_some_and(|at| now.saturating_sub(at) < CANT_FAILOVER_RELOG_PERIOD_MS);
        if reason == self.election.cant_reason && recently {
            return;
        }
        self.election.cant_reason = reason;
        let quiet_for = self.settings.node_timeout + 5000;
        let master = self.table.me().master().and_then(|m| self.table.get(m));
        if master.is_some_and(|m| m.failed() && now.saturating_sub(m.fail_time) < quiet_for) {
            return;
        }
        let message = match reason {
            CantFailover::DataAge => {
                "Disconnected from master for longer than allowed. Please check the 'cluster-replica-validity-factor' configuration option."
            }
            CantFailover::WaitingDelay => "Waiting the delay before I can start a new failover.",
            CantFailover::Expired => "Failover attempt expired.",
            CantFailover::WaitingVotes => "Waiting for votes, but majority still not reached.",
            CantFailover::None => "Unknown reason code.",
        };
        self.election.last_cant_log = Some(now);
        tracing::warn!("Currently unable to failover: {message}");
    }

    /// clusterHandleSlaveFailover: schedule, run and win (or not) an election.
    pub(super) fn handle_replica_failover(&mut self, now: u64) {
        let quorum = self.size / 2 + 1;
        let manual = self.election.mf_end != 0 && self.election.mf_can_start;
        let auth_timeout = (self.settings.node_timeout * 2).max(2000);
        let auth_retry = auth_timeout * 2;
        let auth_age = now.saturating_sub(self.election.auth_time);
        let me = self.table.me();
        let master = me.master().and_then(|m| self.table.get(m));
        let runs = me.is_replica()
            && master.is_some_and(|m| (m.failed() || manual) && m.slot_count() > 0)
            && (!self.settings.replica_no_failover || manual);
        if !runs {
            self.election.cant_reason = CantFailover::None;
            return;
        }
        // Being cut off while the master was failing is expected: only the
        // time beyond the node timeout counts against us.
        let mut data_age = self.repl_data_age;
        if data_age > self.settings.node_timeout {
            data_age -= self.settings.node_timeout;
        }
        let max_age = self.settings.repl_ping_period_ms
            + self.settings.node_timeout * self.settings.replica_validity_factor;
        if self.settings.replica_validity_factor != 0 && data_age > max_age && !manual {
            self.log_cant_failover(CantFailover::DataAge, now);
            return;
        }
        if auth_age > auth_retry {
            self.schedule_election(now);
            return;
        }
        if !self.election.auth_sent && self.election.mf_end == 0 {
            let rank = self.replica_rank();
            if rank > self.election.auth_rank {
                let added = (rank - self.election.auth_rank) as u64 * 1000;
                self.election.auth_time += added;
                self.election.auth_rank = rank;
                tracing::warn!(
                    "Replica rank updated to #{rank}, added {added} milliseconds of delay."
                );
            }
        }
        if now < self.election.auth_time {
            self.log_cant_failover(CantFailover::WaitingDelay, now);
            return;
        }
        if auth_age > auth_timeout {
            self.log_cant_failover(CantFailover::Expired, now);
            return;
        }
        if !self.election.auth_sent {
            self.table.current_epoch += 1;
            self.election.auth_epoch = self.table.current_epoch;
            tracing::warn!(
                "Starting a failover election for epoch {}.",
                self.table.current_epoch
            );
            self.request_failover_auth();
            self.election.auth_sent = true;
            self.todo |= todo::SAVE_CONFIG | todo::UPDATE_STATE | todo::FSYNC_CONFIG;
            return;
        }
        if self.election.auth_count >= quorum {
            tracing::warn!("Failover election won: I'm the new master.");
            if self.table.me().config_epoch < self.election.auth_epoch {
                self.table.me_mut().config_epoch = self.election.auth_epoch;
                tracing::warn!(
                    "configEpoch set to {} after successful failover",
                    self.election.auth_epoch
                );
            }
            self.replace_my_master(now);
        } else {
            self.log_cant_failover(CantFailover::WaitingVotes, now);
        }
    }

    /// The next election: after the FAIL has had time to spread, a random
    /// jitter, and a second per better-placed replica (none in a manual
    /// failover).
    fn schedule_election(&mut self, now: u64) {
        let jitter = self.random() % 500;
        let rank = self.replica_rank();
        let e = &mut self.election;
        e.auth_time = now + 500 + jitter + rank as u64 * 1000;
        e.auth_count = 0;
        e.auth_sent = false;
        e.auth_rank = rank;
        if e.mf_end != 0 {
            e.auth_time = now;
            e.auth_rank = 0;
            self.todo |= todo::HANDLE_FAILOVER;
        }
        let delay = self.election.auth_time.saturating_sub(now);
        tracing::warn!(
            "Start of election delayed for {delay} milliseconds (rank #{}, offset {}).",
            self.election.auth_rank,
            self.repl_offset
        );
        // Our offset, so the other replicas can rank themselves against it.
        self.broadcast_pong(true, now);
    }

    /// clusterRequestFailoverAuth: ask every master for its vote; in a manual
    /// failover, tell them to vote although our master is up.
    fn request_failover_auth(&mut self) {
        let mut header = self.header();
        if self.election.mf_end != 0 {
            header.mflags[0] |= wire::mflags0::FORCEACK;
        }
        self.messages_sent[kind::FAILOVER_AUTH_REQUEST as usize] += 1;
        let mut out = Vec::new();
        wire::encode(
            &Message {
                header,
                body: Body::FailoverAuthRequest,
            },
            &mut out,
        );
        self.broadcast_bytes(Bytes::from(out));
    }

    /// clusterSendFailoverAuthIfNeeded: a master's vote.
    pub(super) fn vote_if_allowed(&mut self, candidate: NodeId, request: &Header, now: u64) {
        let me = self.table.me();
        if me.is_replica() || me.slot_count() == 0 {
            return;
        }
        let name = self.name_of(candidate);
        let current = self.table.current_epoch;
        if request.current_epoch < current {
            tracing::warn!(
                "Failover auth denied to {name}: reqEpoch ({}) < curEpoch({current})",
                request.current_epoch
            );
            return;
        }
        if self.table.last_vote_epoch == current {
            tracing::warn!("Failover auth denied to {name}: already voted for epoch {current}");
            return;
        }
        let force = request.mflags[0] & wire::mflags0::FORCEACK != 0;
        let Some(node) = self.table.get(candidate) else {
            return;
        };
        let master = node.master().and_then(|m| self.table.get(m));
        if node.is_master() {
            tracing::warn!("Failover auth denied to {name}: it is a master node");
            return;
        }
        let Some(master) = master else {
            tracing::warn!("Failover auth denied to {name}: I don't know its master");
            return;
        };
        if !master.failed() && !force {
            tracing::warn!("Failover auth denied to {name}: its master is up");
            return;
        }
        let since_vote = now.saturating_sub(master.voted_time);
        if since_vote < self.settings.node_timeout * 2 {
            let wait = self.settings.node_timeout * 2 - since_vote;
            tracing::warn!("Failover auth denied to {name}: can't vote about this master before {wait} milliseconds");
            return;
        }
        for slot in (0..SLOTS).filter(|&s| wire::slot_is_set(&request.slots, s)) {
            if self.slot_unclaimed(slot) {
                continue;
            }
            let owner_epoch = self
                .table
                .slot_owner(slot)
                .and_then(|o| self.table.get(o))
                .map_or(0, |o| o.config_epoch);
            if owner_epoch > request.config_epoch {
                tracing::warn!(
                    "Failover auth denied to {name}: slot {slot} epoch ({owner_epoch}) > reqEpoch ({})",
                    request.config_epoch
                );
                return;
            }
        }
        let master_id = node.master();
        self.table.last_vote_epoch = current;
        if let Some(m) = master_id.and_then(|m| self.table.get_mut(m)) {
            m.voted_time = now;
        }
        self.todo |= todo::SAVE_CONFIG | todo::FSYNC_CONFIG;
        if let Some(link) = self.outbound.get(&candidate).copied() {
            let bytes = self.encode(Body::FailoverAuthAck);
            self.send(link, bytes);
        }
        tracing::warn!("Failover auth granted to {name} for epoch {current}");
    }

    /// A vote counts if it comes from a master serving slots, in this election.
    pub(super) fn on_vote(&mut self, sender: NodeId, sender_current_epoch: u64) {
        let counts = self
            .table
            .get(sender)
            .is_some_and(|s| s.is_master() && s.slot_count() > 0);
        if counts && sender_current_epoch >= self.election.auth_epoch {
            self.election.auth_count += 1;
            self.todo |= todo::HANDLE_FAILOVER;
        }
    }

    /// clusterFailoverReplaceYourMaster: become a master, take the old master's
    /// slots, and tell everyone at once.
    pub(super) fn replace_my_master(&mut self, now: u64) {
        let myself = self.table.myself();
        let Some(old) = self
            .table
            .me()
            .master()
            .filter(|_| self.table.me().is_replica())
        else {
            return;
        };
        self.table.set_as_master(myself);
        self.effects.push(Effect::StopReplicating);
        for slot in 0..SLOTS {
            if self.table.get(old).is_some_and(|o| o.serves(slot)) {
                self.table.del_slot(slot);
                self.table.add_slot(myself, slot);
            }
        }
        self.effects.push(Effect::TopologyChanged);
        self.update_state(now);
        self.effects.push(Effect::SaveConfig { fsync: true });
        self.broadcast_pong(false, now);
        self.reset_manual_failover();
    }

    /// clusterBroadcastPong: every connected node, or only the replicas of our
    /// master (or of us).
    pub(super) fn broadcast_pong(&mut self, local_replicas_only: bool, now: u64) {
        let myself = self.table.myself();
        let my_master = self.table.me().master();
        let targets: Vec<LinkId> = self
            .table
            .iter()
            .filter(|(id, n)| *id != myself && !n.in_handshake())
            .filter(|(_, n)| {
                !local_replicas_only
                    || (n.is_replica()
                        && n.master()
                            .is_some_and(|m| m == myself || Some(m) == my_master))
            })
            .filter_map(|(id, _)| self.outbound.get(&id).copied())
            .collect();
        for link in targets {
            self.send_ping(link, kind::PONG, now);
        }
    }

    /// The cron's replica duties: the manual failover's progress, the election,
    /// and migrating to an orphaned master.
    pub(super) fn replica_cron(&mut self, now: u64) {
        self.manual_failover_check_timeout(now);
        if !self.table.me().is_replica() {
            return;
        }
        self.handle_manual_failover();
        self.handle_replica_failover(now);
        let (orphaned, max_replicas, mine) = self.replica_counts();
        if orphaned > 0
            && max_replicas >= 2
            && mine == max_replicas
            && self.settings.allow_replica_migration
        {
            self.handle_replica_migration(max_replicas, now);
        }
    }

    /// Masters serving slots with no working replica though they used to have
    /// some, the most working replicas any master has, and how many ours has.
    fn replica_counts(&self) -> (usize, usize, usize) {
        let my_master = self.table.me().master();
        let (mut orphaned, mut max, mut mine) = (0, 0, 0);
        for (id, n) in self.table.iter() {
            if n.flags & (flags::MYSELF | flags::NOADDR | flags::HANDSHAKE) != 0
                || !n.is_master()
                || n.failed()
            {
                continue;
            }
            let ok = self.table.count_non_failing_replicas(id);
            if ok == 0 && n.slot_count() > 0 && n.flags & flags::MIGRATE_TO != 0 {
                orphaned += 1;
            }
            max = max.max(ok);
            if my_master == Some(id) {
                mine = ok;
            }
        }
        (orphaned, max, mine)
    }

    /// clusterHandleSlaveMigration: of the replicas of the best-covered masters,
    /// the one with the smallest name moves to an orphaned master, once it has
    /// been orphaned a while and ours keeps more than `cluster-migration-barrier`
    /// working replicas.
    fn handle_replica_migration(&mut self, max_replicas: usize, now: u64) {
        if !self.state_ok {
            return;
        }
        let Some(my_master) = self.table.me().master() else {
            return;
        };
        let ok_replicas = self.table.get(my_master).map_or(0, |m| {
            m.replicas()
                .iter()
                .filter_map(|&r| self.table.get(r))
                .filter(|r| !r.failed() && !r.timed_out())
                .count()
        });
        if ok_replicas <= self.settings.migration_barrier {
            return;
        }
        let myself = self.table.myself();
        let mut candidate = (self.table.me().name, myself);
        let mut target = None;
        let ids: Vec<NodeId> = self.table.iter().map(|(id, _)| id).collect();
        for id in ids {
            let Some(n) = self.table.get(id) else {
                continue;
            };
            let ok = if n.is_master() {
                self.table.count_non_failing_replicas(id)
            } else {
                0
            };
            let orphaned =
                !n.is_replica() && !n.failed() && n.flags & flags::MIGRATE_TO != 0 && ok == 0;
            if ok == max_replicas {
                for &r in n.replicas() {
                    if let Some(replica) = self.table.get(r) {
                        if replica.name < candidate.0 {
                            candidate = (replica.name, r);
                        }
                    }
                }
            }
            let has_slots = n.slot_count() > 0;
            if let Some(n) = self.table.get_mut(id) {
                if orphaned {
                    if target.is_none() && has_slots {
                        target = Some(id);
                    }
                    if n.orphaned_time == 0 {
                        n.orphaned_time = now;
                    }
                } else {
                    n.orphaned_time = 0;
                }
            }
        }
        let Some(target) = target else {
            return;
        };
        let orphaned_for = self
            .table
            .get(target)
            .map_or(0, |t| now.saturating_sub(t.orphaned_time));
        if candidate.1 == myself && orphaned_for > REPLICA_MIGRATION_DELAY_MS {
            tracing::warn!("Migrating to orphaned master {}", self.name_of(target));
            self.set_my_master(target);
        }
    }
}
