//! Whole clusters on a simulated clock: each node is a `Membership`, links are
//! pairs of link ids, every message goes through the wire codec, and the clock
//! moves in cron periods. Nodes meet, learn each other by gossip, agree on slot
//! owners and epochs, and detect a dead node by majority.

use super::*;
use crate::cluster::nodes::NodeTable;
use std::collections::{BTreeMap, VecDeque};

const TIMEOUT: u64 = 2000;

struct SimNode {
    engine: Membership,
    alive: bool,
    port: u16,
}

/// One end of a simulated TCP connection: (node index, link id there).
type End = (usize, LinkId);

struct Sim {
    nodes: Vec<SimNode>,
    /// Each connected link end and the end it talks to.
    peers: BTreeMap<End, End>,
    in_flight: VecDeque<(End, Bytes)>,
    /// Pairs of nodes that cannot reach each other (a partition).
    cut: Vec<(usize, usize)>,
    now: u64,
    published: Vec<(usize, Vec<u8>)>,
}

impl Sim {
    fn new(count: usize) -> Sim {
        let nodes = (0..count)
            .map(|i| {
                let port = 7000 + i as u16;
                let settings = Settings {
                    node_timeout: TIMEOUT,
                    announce_ip: None,
                    hostname: format!("node-{i}"),
                    port,
                    pport: 0,
                    cport: port + 10000,
                    ..Settings::default()
                };
                let table = NodeTable::new(NodeName::random(), flags::MASTER, 1_000_000);
                SimNode {
                    engine: Membership::new(table, settings, i as u64 + 1),
                    alive: true,
                    port,
                }
            })
            .collect();
        Sim {
            nodes,
            peers: BTreeMap::new(),
            in_flight: VecDeque::new(),
            cut: Vec::new(),
            now: 1_000_000,
            published: Vec::new(),
        }
    }

    fn node(&self, i: usize) -> &Membership {
        &self.nodes[i].engine
    }

    fn name(&self, i: usize) -> NodeName {
        self.node(i).table.me().name
    }

    fn meet(&mut self, from: usize, to: usize) {
        let port = self.nodes[to].port;
        let now = self.now;
        self.nodes[from]
            .engine
            .meet("127.0.0.1", port, port + 10000, now)
            .unwrap();
    }

    /// Carries out every node's effects until nothing is left to do.
    fn settle(&mut self) {
        loop {
            let mut progressed = false;
            for i in 0..self.nodes.len() {
                let effects = self.nodes[i].engine.take_effects();
                progressed |= !effects.is_empty();
                for effect in effects {
                    self.apply(i, effect);
                }
            }
            while let Some(((to, link), bytes)) = self.in_flight.pop_front() {
                progressed = true;
                if !self.nodes[to].alive {
                    continue;
                }
                let message = wire::decode(&bytes).expect("what a node sends decodes");
                let now = self.now;
                self.nodes[to]
                    .engine
                    .on_message(link, message, "127.0.0.1", "127.0.0.1", now);
            }
            if !progressed {
                return;
            }
        }
    }

    fn apply(&mut self, i: usize, effect: Effect) {
        let now = self.now;
        match effect {
            Effect::Send { link, bytes } => {
                if let Some(&peer) = self.peers.get(&(i, link)) {
                    self.in_flight.push_back((peer, bytes));
                }
            }
            Effect::Connect { link, cport, .. } => {
                let target = self
                    .nodes
                    .iter()
                    .position(|n| n.port + 10000 == cport && n.alive);
                match target {
                    Some(t) if self.nodes[i].alive && !self.is_cut(i, t) => {
                        let accepted = self.nodes[t].engine.on_accept(now);
                        self.peers.insert((i, link), (t, accepted));
                        self.peers.insert((t, accepted), (i, link));
                        self.nodes[i].engine.on_connected(link, now);
                    }
                    _ => self.nodes[i].engine.on_link_error(link),
                }
            }
            Effect::Close { link } => {
                if let Some(peer) = self.peers.remove(&(i, link)) {
                    self.peers.remove(&peer);
                    self.nodes[peer.0].engine.on_link_error(peer.1);
                }
            }
            Effect::Publish { message, .. } => self.published.push((i, message)),
            // A server holds writes at once here: nothing is written in the sim.
            Effect::PauseWrites { .. } => self.nodes[i].engine.writes_paused(0, now),
            _ => {}
        }
    }

    /// Runs the cluster for `ms` of simulated time.
    fn run(&mut self, ms: u64) {
        let end = self.now + ms;
        while self.now < end {
            self.now += CRON_PERIOD_MS;
            for i in 0..self.nodes.len() {
                if self.nodes[i].alive {
                    let now = self.now;
                    self.nodes[i].engine.cron(now);
                    self.nodes[i].engine.before_sleep(now);
                }
            }
            self.settle();
        }
    }

    fn is_cut(&self, a: usize, b: usize) -> bool {
        self.cut.contains(&(a, b)) || self.cut.contains(&(b, a))
    }

    /// Nodes `a` and `b` can no longer reach each other: their links drop.
    fn partition(&mut self, a: usize, b: usize) {
        self.cut.push((a, b));
        let ends: Vec<(End, End)> = self
            .peers
            .iter()
            .filter(|(x, y)| self.is_cut(x.0, y.0))
            .map(|(x, y)| (*x, *y))
            .collect();
        for (end, peer) in ends {
            if self.peers.remove(&end).is_some() {
                self.peers.remove(&peer);
                self.nodes[end.0].engine.on_link_error(end.1);
                self.nodes[peer.0].engine.on_link_error(peer.1);
            }
        }
    }

    /// A node stops: its connections drop (the peers see the links fail).
    fn kill(&mut self, i: usize) {
        self.nodes[i].alive = false;
        let ends: Vec<End> = self
            .peers
            .keys()
            .filter(|(n, _)| *n == i)
            .copied()
            .collect();
        for end in ends {
            if let Some(peer) = self.peers.remove(&end) {
                self.peers.remove(&peer);
                self.nodes[peer.0].engine.on_link_error(peer.1);
            }
        }
    }

    /// What node `i` thinks of node `j`.
    fn view(&self, i: usize, j: usize) -> Option<&crate::cluster::nodes::Node> {
        let table = &self.node(i).table;
        table.lookup(&self.name(j)).and_then(|id| table.get(id))
    }

    fn knows_everyone(&self, i: usize) -> bool {
        (0..self.nodes.len()).all(|j| self.view(i, j).is_some_and(|n| !n.in_handshake()))
            && self.node(i).table.len() == self.nodes.len()
    }

    /// Gives each node an equal share of the slots.
    fn split_slots(&mut self) {
        let share = SLOTS / self.nodes.len();
        for i in 0..self.nodes.len() {
            let last = if i + 1 == self.nodes.len() {
                SLOTS
            } else {
                (i + 1) * share
            };
            for slot in i * share..last {
                self.nodes[i].engine.add_my_slot(slot);
            }
        }
    }
}

fn joined(count: usize) -> Sim {
    let mut sim = Sim::new(count);
    for j in 1..count {
        sim.meet(0, j);
    }
    sim.run(3000);
    sim
}

#[test]
fn met_nodes_learn_the_others_by_gossip() {
    let sim = joined(4);
    for i in 0..4 {
        assert!(
            sim.knows_everyone(i),
            "node {i} knows {} nodes",
            sim.node(i).table.len()
        );
        for j in 0..4 {
            let n = sim.view(i, j).unwrap();
            assert_eq!(n.port, 7000 + j as u16);
            assert_eq!(n.ip, "127.0.0.1");
            assert!(n.is_master());
            if i != j {
                assert_eq!(n.hostname, format!("node-{j}"), "hostname extension");
            }
        }
    }
}

#[test]
fn slot_claims_spread_and_epoch_collisions_resolve() {
    let mut sim = joined(3);
    sim.split_slots();
    sim.run(5000);
    for i in 0..3 {
        for j in 0..3 {
            let owner = sim
                .node(i)
                .table
                .slot_owner(j * 5461)
                .map(|o| sim.node(i).table.get(o).unwrap().name);
            assert_eq!(
                owner,
                Some(sim.name(j)),
                "node {i}'s owner of slot {}",
                j * 5461
            );
        }
        assert!(sim.node(i).state_ok(), "node {i}: every slot served");
        assert_eq!(sim.node(i).size(), 3);
    }
    // Every master started at config epoch 0: collisions moved all but one apart.
    let mut epochs: Vec<u64> = (0..3)
        .map(|i| sim.node(i).table.me().config_epoch)
        .collect();
    epochs.sort();
    epochs.dedup();
    assert_eq!(epochs.len(), 3, "distinct config epochs: {epochs:?}");
}

#[test]
fn a_dead_master_is_marked_failing_by_the_majority() {
    let mut sim = joined(3);
    sim.split_slots();
    sim.run(5000);
    sim.kill(2);
    sim.run(TIMEOUT + 3000);
    for i in 0..2 {
        let dead = sim.view(i, 2).unwrap();
        assert!(dead.failed(), "node {i} flags {:#x}", dead.flags);
        assert!(
            !sim.node(i).state_ok(),
            "slots of a failed master: the cluster is down"
        );
    }
}

#[test]
fn a_node_marked_failing_comes_back() {
    let mut sim = joined(3);
    sim.run(2000);
    sim.kill(2);
    sim.run(TIMEOUT + 3000);
    assert!(
        sim.view(0, 2).unwrap().failed(),
        "a master without slots fails too"
    );
    sim.nodes[2].alive = true;
    sim.run(3000);
    assert!(
        !sim.view(0, 2).unwrap().failed(),
        "a master without slots is back at once"
    );
    assert!(!sim.view(0, 2).unwrap().timed_out());
}

#[test]
fn publish_reaches_every_other_node() {
    let mut sim = joined(3);
    sim.nodes[1].engine.publish(b"news", b"hello", false);
    sim.settle();
    let mut who: Vec<usize> = sim.published.iter().map(|(i, _)| *i).collect();
    who.sort();
    assert_eq!(who, vec![0, 2]);
}

#[test]
fn a_newer_claim_takes_slots_and_an_emptied_master_follows_it() {
    let mut sim = joined(2);
    for slot in 0..100 {
        sim.nodes[0].engine.add_my_slot(slot);
    }
    sim.run(3000);
    // Node 1 claims node 0's slots under a newer epoch, as a promoted replica
    // would: node 0, left with none, becomes its replica.
    let now = sim.now;
    let engine = &mut sim.nodes[1].engine;
    let me = engine.table.myself();
    for slot in 0..100 {
        engine.table.del_slot(slot);
        engine.table.add_slot(me, slot);
    }
    engine.table.current_epoch += 10;
    engine.table.me_mut().config_epoch = engine.table.current_epoch;
    engine.before_sleep(now);
    sim.run(3000);
    let zero = sim.node(0);
    assert_eq!(zero.table.me().slot_count(), 0);
    assert!(zero.table.me().is_replica());
    assert_eq!(
        zero.table
            .me()
            .master()
            .map(|m| zero.table.get(m).unwrap().name),
        Some(sim.name(1))
    );
}

#[test]
fn a_stale_claimer_gets_an_update() {
    // Cluster.c's example: node 0 serves slots 0-9; partitioned from node 1,
    // it misses that node 1 took them under a newer epoch (as a promoted replica
    // would). Node 2 heard node 1, so when node 0 claims the slots it sends node 0
    // an UPDATE, and node 0, left without slots, follows node 1.
    let mut sim = joined(3);
    for slot in 0..10 {
        sim.nodes[0].engine.add_my_slot(slot);
    }
    sim.run(3000);
    sim.partition(0, 1);
    let now = sim.now;
    {
        let engine = &mut sim.nodes[1].engine;
        let me = engine.table.myself();
        for slot in 0..10 {
            engine.table.del_slot(slot);
            engine.table.add_slot(me, slot);
        }
        engine.table.current_epoch += 50;
        engine.table.me_mut().config_epoch = engine.table.current_epoch;
        engine.before_sleep(now);
    }
    sim.run(3000);
    let one = sim.name(1);
    for i in [0, 2] {
        let t = &sim.node(i).table;
        let owner = t.slot_owner(0).map(|o| t.get(o).unwrap().name);
        assert_eq!(owner, Some(one), "node {i}'s owner of slot 0");
    }
    let zero = &sim.node(0).table;
    assert_eq!(zero.me().slot_count(), 0);
    assert!(zero.me().is_replica());
    assert!(
        sim.node(0).messages_received[kind::UPDATE as usize] > 0,
        "it learned by UPDATE"
    );
}

#[test]
fn handshakes_that_never_complete_expire() {
    let mut sim = Sim::new(1);
    let now = sim.now;
    sim.nodes[0]
        .engine
        .meet("127.0.0.1", 9999, 19999, now)
        .unwrap();
    assert_eq!(
        sim.nodes[0].engine.meet("127.0.0.1", 9999, 19999, now),
        Err(MeetError::InProgress)
    );
    assert_eq!(sim.node(0).table.len(), 2);
    sim.run(TIMEOUT + 500);
    assert_eq!(
        sim.node(0).table.len(),
        1,
        "nobody answers at 9999: the handshake node goes"
    );
}

/// Three masters with the slots split, then replicas `count - 3` of them: node
/// 3 + k replicates master k % 3.
fn with_replicas(count: usize) -> Sim {
    let mut sim = joined(count);
    let share = SLOTS / 3;
    for i in 0..3 {
        let last = if i == 2 { SLOTS } else { (i + 1) * share };
        for slot in i * share..last {
            sim.nodes[i].engine.add_my_slot(slot);
        }
    }
    sim.run(3000);
    for r in 3..count {
        let master = sim.name(r % 3).to_string();
        sim.nodes[r]
            .engine
            .replicate(master.as_bytes(), true)
            .unwrap();
    }
    sim.run(3000);
    sim
}

fn owner_of(sim: &Sim, viewer: usize, slot: usize) -> Option<NodeName> {
    let t = &sim.node(viewer).table;
    t.slot_owner(slot).and_then(|o| t.get(o)).map(|n| n.name)
}

#[test]
fn replicas_are_known_as_replicas_everywhere() {
    let sim = with_replicas(6);
    for viewer in 0..6 {
        for r in 3..6 {
            let n = sim.view(viewer, r).unwrap();
            assert!(n.is_replica(), "node {viewer} sees {r} as {:#x}", n.flags);
            let master = n
                .master()
                .and_then(|m| sim.node(viewer).table.get(m))
                .map(|m| m.name);
            assert_eq!(master, Some(sim.name(r % 3)));
        }
        assert!(sim.node(viewer).state_ok());
    }
}

#[test]
fn a_replica_is_elected_when_its_master_fails() {
    let mut sim = with_replicas(6);
    let slot = 0; // master 0's
    sim.kill(0);
    sim.run(TIMEOUT + 8000);
    let three = sim.node(3);
    assert!(three.table.me().is_master(), "the replica took over");
    assert!(
        three.messages_received[kind::FAILOVER_AUTH_ACK as usize] >= 2,
        "with a majority of votes"
    );
    for viewer in 1..6 {
        assert_eq!(
            owner_of(&sim, viewer, slot),
            Some(sim.name(3)),
            "node {viewer}"
        );
        assert!(
            sim.node(viewer).state_ok(),
            "node {viewer}: the cluster is whole again"
        );
    }
    // The new master's epoch is the election's, above every other.
    let epoch = three.table.me().config_epoch;
    assert!((1..6).filter(|&i| i != 3).all(
        |i| sim.node(i).table.me().config_epoch < epoch || sim.node(i).table.me().is_replica()
    ));
}

#[test]
fn the_old_master_comes_back_as_a_replica() {
    let mut sim = with_replicas(6);
    sim.kill(0);
    sim.run(TIMEOUT + 8000);
    sim.nodes[0].alive = true;
    sim.run(TIMEOUT + 6000);
    let zero = &sim.node(0).table;
    assert!(zero.me().is_replica(), "flags {:#x}", zero.me().flags);
    assert_eq!(
        zero.me().master().map(|m| zero.get(m).unwrap().name),
        Some(sim.name(3))
    );
    assert_eq!(zero.me().slot_count(), 0);
}

#[test]
fn manual_failover_swaps_a_master_and_its_replica() {
    let mut sim = with_replicas(6);
    let now = sim.now;
    assert_eq!(
        sim.nodes[1].engine.failover(FailoverOption::Default, now),
        Err("You should send CLUSTER FAILOVER to a replica")
    );
    sim.nodes[4]
        .engine
        .failover(FailoverOption::Default, now)
        .unwrap();
    sim.run(3000);
    assert!(sim.node(4).table.me().is_master(), "replica 4 took over");
    assert!(sim.node(1).table.me().is_replica(), "master 1 follows it");
    assert_eq!(owner_of(&sim, 2, SLOTS / 3), Some(sim.name(4)));
    assert!(sim.node(1).messages_received[kind::MFSTART as usize] == 1);
}

#[test]
fn takeover_needs_no_votes() {
    let mut sim = with_replicas(6);
    // Cut replica 5 off from the other masters: no election could win.
    sim.partition(5, 0);
    sim.partition(5, 1);
    let now = sim.now;
    sim.nodes[5]
        .engine
        .failover(FailoverOption::Takeover, now)
        .unwrap();
    sim.settle();
    let five = sim.node(5);
    assert!(five.table.me().is_master());
    assert_eq!(five.messages_sent[kind::FAILOVER_AUTH_REQUEST as usize], 0);
    assert_eq!(owner_of(&sim, 5, SLOTS - 1), Some(sim.name(5)));
}

#[test]
fn a_master_votes_once_per_epoch_and_not_for_a_replica_of_a_live_master() {
    let mut sim = with_replicas(6);
    // Replica 3 asks without a failed master and without FORCEACK: denied.
    let mut request = sim.node(3).header();
    request.current_epoch = sim.node(1).table.current_epoch;
    let now = sim.now;
    let three = sim.node(1).table.lookup(&sim.name(3)).unwrap();
    sim.nodes[1].engine.vote_if_allowed(three, &request, now);
    assert_eq!(
        sim.node(1).messages_sent[kind::FAILOVER_AUTH_ACK as usize],
        0
    );
    // With FORCEACK it is granted, once for the epoch.
    request.mflags[0] |= wire::mflags0::FORCEACK;
    sim.nodes[1].engine.vote_if_allowed(three, &request, now);
    sim.nodes[1].engine.vote_if_allowed(three, &request, now);
    assert_eq!(
        sim.node(1).messages_sent[kind::FAILOVER_AUTH_ACK as usize],
        1
    );
}

#[test]
fn a_replica_migrates_to_an_orphaned_master() {
    // Masters 0, 1, 2; replicas 3 and 6 of master 0, 4 of 1, 5 of 2.
    let mut sim = with_replicas(7);
    sim.kill(5);
    sim.run(TIMEOUT + 12000);
    let migrated: Vec<usize> = [3, 6]
        .into_iter()
        .filter(|&r| {
            sim.node(r)
                .table
                .me()
                .master()
                .map(|m| sim.node(r).table.get(m).unwrap().name)
                == Some(sim.name(2))
        })
        .collect();
    assert_eq!(
        migrated.len(),
        1,
        "exactly one of master 0's two replicas moved to master 2"
    );
    let expected = if sim.name(3) < sim.name(6) { 3 } else { 6 };
    assert_eq!(migrated, vec![expected], "the one with the smaller name");
}

#[test]
fn the_routing_table_sends_clients_to_the_slot_owner() {
    use crate::cluster::redirect::{error_text, route, Query, Route};
    let mut sim = joined(3);
    sim.split_slots();
    sim.run(5000);
    let table = sim.node(0).routing_table();
    assert!(table.state_ok);
    let mut exists = |_: &[u8]| true;
    let query = Query::default();
    assert_eq!(
        route(&table, &query, [(0u16, &b"k"[..])], &mut exists),
        Route::Local
    );
    let theirs = route(&table, &query, [(16383u16, &b"k"[..])], &mut exists);
    assert_eq!(
        error_text(&table, &theirs, false).as_deref(),
        Some("MOVED 16383 127.0.0.1:7002")
    );
    // A replica's table routes by its master's slots, and knows who it follows.
    let mut sim = with_replicas(4);
    let master = sim.name(0).to_string();
    sim.nodes[3]
        .engine
        .replicate(master.as_bytes(), true)
        .unwrap();
    sim.run(1000);
    let table = sim.node(3).routing_table();
    let me = table.node(table.myself()).unwrap();
    assert_eq!(
        me.replica_of.and_then(|m| table.node(m)).map(|m| m.port),
        Some(7000)
    );
    let moved = route(&table, &query, [(0u16, &b"k"[..])], &mut exists);
    assert_eq!(
        error_text(&table, &moved, false).as_deref(),
        Some("MOVED 0 127.0.0.1:7000")
    );
}

/// A small deterministic generator for the chaos schedule.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Kills, restarts, partitions and manual failovers at random, then heals
/// everything and checks that the cluster converges: every live node agrees on every slot's owner, the
/// owners are live masters with distinct config epochs, and the state is ok.
fn chaos(seed: u64) {
    let mut sim = with_replicas(6);
    let mut dice = Dice(seed | 1);
    for _ in 0..12 {
        match dice.roll(5) {
            0 => {
                let victim = dice.roll(6) as usize;
                // Never more than one node down: a majority of masters must
                // survive for the cluster to heal without an operator.
                if sim.nodes.iter().all(|n| n.alive) {
                    sim.kill(victim);
                }
            }
            1 => {
                if let Some(dead) = sim.nodes.iter().position(|n| !n.alive) {
                    sim.nodes[dead].alive = true;
                }
            }
            2 => {
                let (a, b) = (dice.roll(6) as usize, dice.roll(6) as usize);
                if a != b {
                    sim.partition(a, b);
                }
            }
            3 => sim.cut.clear(),
            _ => {
                // CLUSTER FAILOVER on whichever node is a replica now (it may be
                // refused: a master, a master down).
                let node = dice.roll(6) as usize;
                let now = sim.now;
                if sim.nodes[node].alive {
                    let _ = sim.nodes[node]
                        .engine
                        .failover(FailoverOption::Default, now);
                }
            }
        }
        sim.run(500 + dice.roll(4000));
    }
    sim.cut.clear();
    for n in &mut sim.nodes {
        n.alive = true;
    }
    sim.run(TIMEOUT * 8);
    let owners: Vec<Vec<Option<NodeName>>> = (0..6)
        .map(|i| {
            (0..SLOTS)
                .step_by(97)
                .map(|s| owner_of(&sim, i, s))
                .collect()
        })
        .collect();
    for i in 1..6 {
        assert_eq!(
            owners[i], owners[0],
            "seed {seed}: nodes 0 and {i} disagree on slot owners"
        );
    }
    let mut epochs = Vec::new();
    for owner in owners[0]
        .iter()
        .flatten()
        .collect::<std::collections::BTreeSet<_>>()
    {
        let i = (0..6)
            .find(|&i| sim.name(i) == *owner)
            .expect("an owner is a node");
        let me = sim.node(i).table.me();
        assert!(
            me.is_master(),
            "seed {seed}: slot owner {i} is not a master"
        );
        epochs.push(me.config_epoch);
    }
    let distinct: std::collections::BTreeSet<_> = epochs.iter().collect();
    assert_eq!(
        distinct.len(),
        epochs.len(),
        "seed {seed}: masters share a config epoch {epochs:?}"
    );
    assert!(
        owners[0].iter().all(Option::is_some),
        "seed {seed}: a slot lost its owner"
    );
    for i in 0..6 {
        assert!(
            sim.node(i).state_ok(),
            "seed {seed}: node {i} says the cluster is down"
        );
    }
}

#[test]
fn the_cluster_converges_after_random_failures_and_partitions() {
    for seed in 1u64..=50 {
        chaos(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }
}
