//! The node table's invariants under random operations, against a model that is
//! a plain restatement (owner per slot, master per node), plus Redis's rules one
//! by one.

use super::*;
use crate::cluster::nodes_conf;
use proptest::prelude::*;

fn name(i: u8) -> NodeName {
    let mut n = [b'0'; 40];
    n[39] = b'a' + i;
    NodeName(n)
}

fn table() -> NodeTable {
    NodeTable::new(name(0), flags::MASTER, 1000)
}

#[test]
fn slots_have_one_owner_and_counts_follow() {
    let mut t = table();
    let a = t.create(Some(name(1)), flags::MASTER, 0);
    assert!(t.add_slot(t.myself(), 0));
    assert!(t.add_slot(t.myself(), 16383));
    assert!(
        !t.add_slot(a, 0),
        "an assigned slot is not reassigned by add_slot"
    );
    assert!(!t.add_slot(a, SLOTS));
    assert_eq!(t.me().slot_count(), 2);
    assert_eq!(t.del_slot(0), Some(t.myself()));
    assert_eq!(t.del_slot(0), None);
    assert!(t.add_slot(a, 0));
    assert_eq!(
        (t.me().slot_count(), t.get(a).unwrap().slot_count()),
        (1, 1)
    );
    assert_eq!(t.del_node_slots(a), 1);
    assert_eq!(t.slot_owner(0), None);
}

#[test]
fn deleting_a_node_leaves_no_reference_to_it() {
    let mut t = table();
    let a = t.create(Some(name(1)), flags::MASTER, 0);
    let r = t.create(Some(name(2)), flags::REPLICA, 0);
    let b = t.create(Some(name(3)), flags::MASTER, 0);
    t.add_slot(a, 5);
    t.set_migrating(6, Some(a));
    t.set_importing(7, Some(a));
    assert!(t.add_replica(a, r));
    t.add_failure_report(b, a, 0);
    assert!(t.delete(a));
    assert_eq!(t.lookup(&name(1)), None);
    assert_eq!(
        (t.slot_owner(5), t.migrating_to(6), t.importing_from(7)),
        (None, None, None)
    );
    assert_eq!(t.get(r).unwrap().master(), None);
    assert_eq!(t.failure_report_count(b, 0, 15000), 0);
    assert!(!t.delete(t.myself()), "a node cannot forget itself");
    // The freed index goes to the next node, under its own name.
    let c = t.create(Some(name(4)), 0, 0);
    assert_eq!(c, a);
    assert_eq!(t.lookup(&name(4)), Some(c));
}

#[test]
fn replica_lists_and_master_pointers_agree() {
    let mut t = table();
    let a = t.create(Some(name(1)), flags::MASTER, 0);
    let b = t.create(Some(name(2)), flags::MASTER, 0);
    let r = t.create(Some(name(3)), flags::REPLICA, 0);
    assert!(t.add_replica(a, r));
    assert!(!t.add_replica(a, r));
    assert!(t.get(a).unwrap().flags & flags::MIGRATE_TO != 0);
    // Moving to another master leaves the first one's list.
    assert!(t.add_replica(b, r));
    assert_eq!(t.get(a).unwrap().replicas(), &[] as &[NodeId]);
    assert_eq!(t.get(a).unwrap().flags & flags::MIGRATE_TO, 0);
    assert_eq!(t.get(r).unwrap().master(), Some(b));
    // Promotion.
    assert!(t.set_as_master(r));
    let promoted = t.get(r).unwrap();
    assert!(promoted.is_master() && !promoted.is_replica() && promoted.master().is_none());
    assert!(promoted.flags & flags::MIGRATE_TO != 0);
    assert!(t.get(b).unwrap().replicas().is_empty());
    assert!(!t.set_as_master(r));
}

#[test]
fn a_first_slot_makes_a_migration_target_only_if_others_have_replicas() {
    let mut t = table();
    let a = t.create(Some(name(1)), flags::MASTER, 0);
    t.add_slot(a, 1);
    assert_eq!(t.get(a).unwrap().flags & flags::MIGRATE_TO, 0);
    let b = t.create(Some(name(2)), flags::MASTER, 0);
    let r = t.create(Some(name(3)), flags::REPLICA, 0);
    t.add_replica(b, r);
    let c = t.create(Some(name(4)), flags::MASTER, 0);
    t.add_slot(c, 2);
    assert!(t.get(c).unwrap().flags & flags::MIGRATE_TO != 0);
}

#[test]
fn failure_reports_expire_after_two_node_timeouts() {
    let mut t = table();
    let a = t.create(Some(name(1)), flags::MASTER, 0);
    let b = t.create(Some(name(2)), flags::MASTER, 0);
    let c = t.create(Some(name(3)), flags::MASTER, 0);
    assert!(t.add_failure_report(a, b, 1000));
    assert!(
        !t.add_failure_report(a, b, 5000),
        "a second report from b refreshes the first"
    );
    assert!(t.add_failure_report(a, c, 2000));
    // With a 2000 ms node timeout c's report, 3000 ms old, is still valid...
    assert_eq!(t.failure_report_count(a, 5000, 2000), 2);
    // ...with 1000 ms it is past 2 × 1000 and goes; b's, 1000 ms old, stays.
    assert_eq!(t.failure_report_count(a, 6000, 1000), 1);
    assert!(t.del_failure_report(a, b, 6000, 1000));
    assert!(!t.del_failure_report(a, b, 6000, 1000));
    assert_eq!(t.failure_report_count(a, 6000, 1000), 0);
}

#[test]
fn epochs_bump_and_collisions_resolve_toward_the_larger_name() {
    let mut t = table();
    assert_eq!(
        t.bump_epoch_without_consensus(),
        Some(1),
        "epoch 0 always bumps"
    );
    assert_eq!(
        t.bump_epoch_without_consensus(),
        None,
        "already the greatest"
    );
    let a = t.create(Some(name(1)), flags::MASTER, 0);
    t.get_mut(a).unwrap().config_epoch = 7;
    assert_eq!(t.max_epoch(), 7);
    assert_eq!(
        t.bump_epoch_without_consensus(),
        Some(2),
        "current epoch + 1, not max + 1"
    );
    t.current_epoch = 7;
    t.me_mut().config_epoch = 7;
    // name(1) > name(0): we are the smaller name, so we move.
    assert_eq!(t.resolve_epoch_collision(a), Some(8));
    let z = t.create(Some(NodeName([b'0'; 40])), flags::MASTER, 0);
    t.get_mut(z).unwrap().config_epoch = 8;
    assert_eq!(
        t.resolve_epoch_collision(z),
        None,
        "the other node has the smaller name: it moves"
    );
}

#[test]
fn rename_keeps_the_index_and_refuses_a_taken_name() {
    let mut t = table();
    let h = t.create(None, flags::HANDSHAKE, 0);
    let old = t.get(h).unwrap().name;
    assert!(!t.rename(h, name(0)));
    assert!(t.rename(h, name(5)));
    assert_eq!(t.lookup(&name(5)), Some(h));
    assert_eq!(t.lookup(&old), None);
}

#[test]
fn the_blacklist_forgets_after_a_minute() {
    let mut t = table();
    t.blacklist_add(name(9), 100);
    assert!(t.blacklisted(&name(9), 160));
    assert!(!t.blacklisted(&name(9), 161));
}

#[derive(Debug, Clone)]
enum Op {
    Create(u8),
    Delete(u8),
    AddSlot(u8, u16),
    DelSlot(u16),
    AddReplica(u8, u8),
    Promote(u8),
}

fn op() -> impl Strategy<Value = Op> {
    let node = 0u8..6;
    let slot = prop_oneof![0u16..4, 16380u16..16384];
    prop_oneof![
        node.clone().prop_map(Op::Create),
        node.clone().prop_map(Op::Delete),
        (node.clone(), slot.clone()).prop_map(|(n, s)| Op::AddSlot(n, s)),
        slot.prop_map(Op::DelSlot),
        (node.clone(), node.clone()).prop_map(|(m, r)| Op::AddReplica(m, r)),
        node.prop_map(Op::Promote),
    ]
}

/// The model: which node owns each slot and whom each node replicates.
#[derive(Default)]
struct Model {
    present: std::collections::BTreeSet<u8>,
    owner: std::collections::BTreeMap<u16, u8>,
    master: std::collections::BTreeMap<u8, u8>,
}

impl Model {
    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Create(n) => {
                self.present.insert(n);
            }
            Op::Delete(n) if n != 0 && self.present.remove(&n) => {
                self.owner.retain(|_, o| *o != n);
                self.master.remove(&n);
                self.master.retain(|_, m| *m != n);
            }
            Op::Delete(_) => {}
            Op::AddSlot(n, s) if self.present.contains(&n) => {
                self.owner.entry(s).or_insert(n);
            }
            Op::AddSlot(..) => {}
            Op::DelSlot(s) => {
                self.owner.remove(&s);
            }
            Op::AddReplica(m, r)
                if m != r && self.present.contains(&m) && self.present.contains(&r) =>
            {
                self.master.insert(r, m);
            }
            Op::AddReplica(..) => {}
            Op::Promote(n) => {
                self.master.remove(&n);
            }
        }
    }
}

proptest! {
    #[test]
    fn the_table_agrees_with_the_model(ops in prop::collection::vec(op(), 0..60)) {
        let mut t = table();
        let mut model = Model::default();
        model.present.insert(0);
        for op in &ops {
            let id = |t: &NodeTable, n: u8| t.lookup(&name(n));
            match *op {
                Op::Create(n) => {
                    if id(&t, n).is_none() {
                        t.create(Some(name(n)), flags::MASTER, 0);
                    }
                }
                Op::Delete(n) => {
                    if let Some(i) = id(&t, n) {
                        t.delete(i);
                    }
                }
                Op::AddSlot(n, s) => {
                    if let Some(i) = id(&t, n) {
                        t.add_slot(i, s as usize);
                    }
                }
                Op::DelSlot(s) => {
                    t.del_slot(s as usize);
                }
                Op::AddReplica(m, r) => {
                    if let (Some(mi), Some(ri)) = (id(&t, m), id(&t, r)) {
                        t.add_replica(mi, ri);
                    }
                }
                Op::Promote(n) => {
                    if let Some(i) = id(&t, n) {
                        // As Redis does on a replica's promotion: flags first.
                        if let Some(node) = t.get_mut(i) {
                            node.flags = (node.flags & !flags::MASTER) | flags::REPLICA;
                        }
                        t.set_as_master(i);
                    }
                }
            }
            if !matches!(op, Op::Create(n) if model.present.contains(n)) {
                model.apply(op);
            }
        }
        // Names and ids.
        let names: std::collections::BTreeSet<u8> = (0..6).filter(|&n| t.lookup(&name(n)).is_some()).collect();
        prop_assert_eq!(&names, &model.present);
        prop_assert_eq!(t.len(), model.present.len());
        // Slots: owner map, bitmaps and counts agree.
        for slot in (0..4).chain(16380..16384) {
            let owner = t.slot_owner(slot).map(|i| t.get(i).unwrap().name);
            prop_assert_eq!(owner, model.owner.get(&(slot as u16)).map(|&n| name(n)));
        }
        for (id, node) in t.iter() {
            let bits = (0..SLOTS).filter(|&s| node.serves(s)).count();
            prop_assert_eq!(bits, node.slot_count());
            for s in (0..SLOTS).filter(|&s| node.serves(s)) {
                prop_assert_eq!(t.slot_owner(s), Some(id));
            }
            // Master pointers and replica lists name each other.
            let expected_master = node.name.0[39].checked_sub(b'a').and_then(|n| model.master.get(&n)).map(|&m| name(m));
            prop_assert_eq!(node.master().map(|m| t.get(m).unwrap().name), expected_master);
            for &r in node.replicas() {
                prop_assert_eq!(t.get(r).unwrap().master(), Some(id));
            }
            if let Some(m) = node.master() {
                prop_assert!(t.get(m).unwrap().replicas().contains(&id));
            }
        }
    }
}

const CONF: &str = "\
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30002@40002 slave 67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 0 1426238316232 3 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30001@40001,host-a myself,master - 0 0 3 connected 0-5460 [5461-<-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f] [7000->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@40003 master,fail - 1426238316232 1426238317741 2 disconnected 5461-10922 12000
vars currentEpoch 6 lastVoteEpoch 4
";

#[test]
fn nodes_conf_loads_into_the_table_and_saves_back() {
    let conf = nodes_conf::parse(CONF.as_bytes()).unwrap();
    let t = NodeTable::from_conf(&conf, 99).unwrap();
    let me = t.me();
    assert_eq!(
        me.name.to_string(),
        "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1"
    );
    assert_eq!(
        (me.ip.as_str(), me.port, me.cport, me.hostname.as_str()),
        ("127.0.0.1", 30001, 40001, "host-a")
    );
    assert_eq!(me.slot_count(), 5461);
    let replica = t.get(t.lookup(&conf.nodes[0].name).unwrap()).unwrap();
    // The master was named before its own line: the placeholder became it.
    assert_eq!(replica.master(), Some(t.myself()));
    assert_eq!(t.me().replicas(), &[t.lookup(&conf.nodes[0].name).unwrap()]);
    assert_eq!(
        replica.config_epoch, 0,
        "a replica follows its master's epoch"
    );
    assert_eq!(
        replica.pong_received, 99,
        "a pong ever received counts from now"
    );
    let failed = t.get(t.lookup(&conf.nodes[2].name).unwrap()).unwrap();
    assert_eq!((failed.fail_time, failed.ping_sent), (99, 99));
    assert_eq!(t.importing_from(5461), t.lookup(&conf.nodes[2].name));
    assert_eq!(t.migrating_to(7000), t.lookup(&conf.nodes[2].name));
    assert_eq!(t.slot_owner(12000), t.lookup(&conf.nodes[2].name));
    assert_eq!((t.current_epoch, t.last_vote_epoch), (6, 4));

    // Saved again: the same file, but for the live times and the link states the
    // table does not own.
    let connected = |id: NodeId| id != t.lookup(&conf.nodes[2].name).unwrap();
    let text = nodes_conf::render(&t.to_conf(false, connected));
    let expected = CONF
        .replace("0 1426238316232 3", "0 99 3")
        .replace("1426238316232 1426238317741 2", "99 99 2");
    assert_eq!(text, expected);
}

#[test]
fn a_file_without_myself_loads_nothing() {
    let mut conf = nodes_conf::parse(CONF.as_bytes()).unwrap();
    conf.nodes.retain(|n| n.flags & flags::MYSELF == 0);
    assert!(NodeTable::from_conf(&conf, 0).is_none());
}
