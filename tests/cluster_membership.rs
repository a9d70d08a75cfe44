//! The membership engine (`tessera::cluster::membership`) as a member of a real
//! Redis 7.0.15 cluster, on the bus thread the server runs it on (`cluster::bus`).
//! - It joins two redis-server nodes: the three agree on who serves which slot,
//!   Redis says `cluster_state:ok` with the engine serving a third of the slots,
//!   and when one redis-server is killed, the engine and the other redis-server
//!   mark it failing together (neither is a majority alone).
//! - As the replica of a redis-server master that dies, it asks the other
//!   redis-server masters for their votes, gets them, and takes the slots.
//! - CLUSTER FAILOVER on it pauses its redis-server master, which then follows
//!   it as a replica.

mod common;

use common::{eventually, free_cluster_port, q, ReferenceRedis};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera::cluster::bus::{Bus, Host};
use tessera::cluster::membership::{Effect, Membership, Settings};
use tessera::cluster::nodes::NodeTable;
use tessera::cluster::redirect::RoutingTable;
use tessera::cluster::{flags, wire, NodeName};
use tessera::util::now_ms;

/// The engine on real sockets, run by the server's own bus thread
/// (`cluster::bus`); the effects it leaves to the server are only recorded.
struct EngineNode {
    bus: Bus,
    port: u16,
    name: NodeName,
    /// The routing table the bus published last (as the server will to shards).
    routes: Arc<Mutex<Option<RoutingTable>>>,
}

/// Publishes routing tables as the server will; the other effects are the
/// server's business.
struct RecordingHost {
    routes: Arc<Mutex<Option<RoutingTable>>>,
}

impl Host for RecordingHost {
    fn effect(&mut self, effect: Effect, engine: &Membership) {
        if effect == Effect::TopologyChanged {
            *self.routes.lock().expect("routes") = Some(engine.routing_table());
        }
    }
    fn replication(&mut self) -> (u64, u64) {
        (0, 0)
    }
}

impl EngineNode {
    fn start(node_timeout: u64) -> EngineNode {
        let port = free_cluster_port();
        let listener = TcpListener::bind(("127.0.0.1", port + 10000)).expect("bind the bus port");
        let name = NodeName::random();
        let settings = Settings {
            node_timeout,
            port,
            cport: port + 10000,
            ..Settings::default()
        };
        let table = NodeTable::new(name, flags::MASTER, now_ms());
        let engine = Membership::new(table, settings, u64::from(port));
        let routes = Arc::new(Mutex::new(None));
        let host = RecordingHost {
            routes: routes.clone(),
        };
        let bus = Bus::start(engine, vec![listener], Box::new(host)).expect("start the bus");
        EngineNode {
            bus,
            port,
            name,
            routes,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Membership) -> T) -> T {
        self.bus.with_engine(f)
    }
}

fn cluster_info(c: &mut redis::Connection, field: &str) -> String {
    let info: String = q(c, &["CLUSTER", "INFO"]);
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or("")
        .trim()
        .to_string()
}

#[test]
fn the_engine_joins_a_redis_cluster_and_agrees_on_failures() {
    let timeout = "2000";
    let args = ["--cluster-node-timeout", timeout];
    let (Some(a), Some(b)) = (
        ReferenceRedis::start_cluster_node(&args),
        ReferenceRedis::start_cluster_node(&args),
    ) else {
        eprintln!("redis-server is not installed: skipping");
        return;
    };
    let engine = EngineNode::start(2000);
    let (mut ca, mut cb) = (a.client(), b.client());
    let _: () = q(&mut ca, &["CLUSTER", "ADDSLOTSRANGE", "0", "5460"]);
    let _: () = q(&mut cb, &["CLUSTER", "ADDSLOTSRANGE", "5461", "10922"]);
    engine.with(|e| (10923..16384).for_each(|s| assert!(e.add_my_slot(s))));

    // Redis A meets the engine, the engine meets Redis B: gossip does the rest.
    let _: () = q(
        &mut ca,
        &["CLUSTER", "MEET", "127.0.0.1", &engine.port.to_string()],
    );
    engine
        .with(|e| e.meet("127.0.0.1", b.port, b.port + 10000, now_ms()))
        .expect("meet");

    let ok = eventually(Duration::from_secs(20), || {
        cluster_info(&mut ca, "cluster_state") == "ok"
            && cluster_info(&mut cb, "cluster_state") == "ok"
            && engine.with(|e| e.state_ok())
    });
    let nodes: String = q(&mut ca, &["CLUSTER", "NODES"]);
    assert!(
        ok,
        "the three never agreed the cluster is ok; A's view:\n{nodes}"
    );
    let ours = nodes
        .lines()
        .find(|l| l.starts_with(&engine.name.to_string()))
        .expect("A knows the engine");
    assert!(ours.ends_with(" 10923-16383"), "{ours}");
    assert_eq!(cluster_info(&mut ca, "cluster_known_nodes"), "3");
    assert_eq!(cluster_info(&mut cb, "cluster_known_nodes"), "3");
    engine.with(|e| {
        assert_eq!(e.table.len(), 3);
        assert_eq!(e.size(), 3);
        let owner = |slot| {
            e.table
                .slot_owner(slot)
                .map(|o| e.table.get(o).expect("owner").port)
        };
        assert_eq!(
            (owner(0), owner(5461), owner(16383)),
            (Some(a.port), Some(b.port), Some(engine.port))
        );
    });
    // The routes the bus published say the same.
    {
        let routes = engine.routes.lock().expect("routes");
        let table = routes.as_ref().expect("a routing table was published");
        let port = |slot| {
            table
                .owner(slot)
                .and_then(|o| table.node(o))
                .map(|n| n.port)
        };
        assert!(table.state_ok);
        assert_eq!((port(0), port(16383)), (Some(a.port), Some(engine.port)));
    }
    // Masters that started at epoch 0 move apart through collisions (each
    // collision moves one node per ping round, so it may take a few rounds).
    let mut epochs = Vec::new();
    let apart = eventually(Duration::from_secs(10), || {
        epochs = engine.with(|e| e.table.iter().map(|(_, n)| n.config_epoch).collect());
        let mut distinct = epochs.clone();
        distinct.sort();
        distinct.dedup();
        distinct.len() == 3
    });
    assert!(apart, "config epochs never moved apart: {epochs:?}");

    // Kill B: the engine's PFAIL plus A's report, or A's PFAIL plus the engine's
    // report, make the majority; whoever gets there first broadcasts FAIL.
    let b_port = b.port;
    drop(b);
    let failed = eventually(Duration::from_secs(20), || {
        let nodes: String = q(&mut ca, &["CLUSTER", "NODES"]);
        let b_line = nodes
            .lines()
            .find(|l| l.contains(&format!(":{b_port}@")))
            .unwrap_or("")
            .to_string();
        let engine_sees =
            engine.with(|e| e.table.iter().any(|(_, n)| n.port == b_port && n.failed()));
        b_line.contains(",fail ") && engine_sees
    });
    assert!(
        failed,
        "B was not marked failing by both; A's view:\n{}",
        q::<String>(&mut ca, &["CLUSTER", "NODES"])
    );
    assert!(eventually(Duration::from_secs(5), || cluster_info(
        &mut ca,
        "cluster_state"
    ) == "fail"));
    assert!(eventually(Duration::from_secs(5), || !engine.with(|e| e.state_ok())));
}

/// Three redis-server masters splitting the slots, and the engine as a replica
/// of the first, all met and agreed.
fn three_masters_and_an_engine_replica() -> Option<(Vec<ReferenceRedis>, EngineNode)> {
    let args = ["--cluster-node-timeout", "2000"];
    let masters: Vec<ReferenceRedis> = (0..3)
        .map(|_| ReferenceRedis::start_cluster_node(&args))
        .collect::<Option<_>>()?;
    let engine = EngineNode::start(2000);
    let ranges = [("0", "5460"), ("5461", "10922"), ("10923", "16383")];
    for (m, (first, last)) in masters.iter().zip(ranges) {
        let _: () = q(&mut m.client(), &["CLUSTER", "ADDSLOTSRANGE", first, last]);
    }
    let mut c0 = masters[0].client();
    for m in &masters[1..] {
        let _: () = q(
            &mut c0,
            &["CLUSTER", "MEET", "127.0.0.1", &m.port.to_string()],
        );
    }
    let _: () = q(
        &mut c0,
        &["CLUSTER", "MEET", "127.0.0.1", &engine.port.to_string()],
    );
    let master_id: String = q(&mut c0, &["CLUSTER", "MYID"]);
    let knows_master = eventually(Duration::from_secs(15), || {
        engine.with(|e| e.table.len() == 4 && e.table.iter().all(|(_, n)| !n.in_handshake()))
    });
    assert!(knows_master, "the engine never learned the three masters");
    engine
        .with(|e| e.replicate(master_id.as_bytes(), true))
        .expect("CLUSTER REPLICATE");
    let agreed = eventually(Duration::from_secs(15), || {
        masters.iter().all(|m| {
            let mut c = m.client();
            let nodes: String = q(&mut c, &["CLUSTER", "NODES"]);
            cluster_info(&mut c, "cluster_state") == "ok"
                && nodes.lines().any(|l| {
                    l.starts_with(&engine.name.to_string())
                        && l.contains(&format!("slave {master_id}"))
                })
        })
    });
    assert!(
        agreed,
        "the masters never saw the engine as a replica of {master_id}"
    );
    Some((masters, engine))
}

/// Every live master's view: does the engine serve `slot`, as a master?
fn masters_follow_the_engine(masters: &[ReferenceRedis], engine: &EngineNode, slot: &str) -> bool {
    masters.iter().all(|m| {
        let mut c = m.client();
        let nodes: String = q(&mut c, &["CLUSTER", "NODES"]);
        let line = nodes
            .lines()
            .find(|l| l.starts_with(&engine.name.to_string()))
            .unwrap_or("")
            .to_string();
        let serves = line.contains("master")
            && line
                .split(' ')
                .skip(8)
                .any(|r| r.split('-').next() == Some(slot));
        serves && cluster_info(&mut c, "cluster_state") == "ok"
    })
}

#[test]
fn redis_masters_elect_the_engine_when_its_master_dies() {
    let Some((mut masters, engine)) = three_masters_and_an_engine_replica() else {
        eprintln!("redis-server is not installed: skipping");
        return;
    };
    drop(masters.remove(0));
    let elected = eventually(Duration::from_secs(30), || {
        engine.with(|e| e.table.me().is_master())
            && masters_follow_the_engine(&masters, &engine, "0")
    });
    let (acks, flags) = engine.with(|e| {
        (
            e.messages_received[wire::kind::FAILOVER_AUTH_ACK as usize],
            e.table.me().flags,
        )
    });
    assert!(elected, "not elected: {acks} votes, flags {flags:#x}");
    assert!(acks >= 2, "a majority of the three masters voted: {acks}");
}

#[test]
fn cluster_failover_on_the_engine_demotes_its_redis_master() {
    let Some((masters, engine)) = three_masters_and_an_engine_replica() else {
        eprintln!("redis-server is not installed: skipping");
        return;
    };
    engine
        .with(|e| {
            e.failover(
                tessera::cluster::membership::FailoverOption::Default,
                now_ms(),
            )
        })
        .expect("CLUSTER FAILOVER");
    let swapped = eventually(Duration::from_secs(15), || {
        let nodes: String = q(&mut masters[0].client(), &["CLUSTER", "NODES"]);
        let me = nodes
            .lines()
            .find(|l| l.contains("myself"))
            .unwrap_or("")
            .to_string();
        me.contains(&format!("myself,slave {}", engine.name))
            && masters_follow_the_engine(&masters[1..], &engine, "0")
    });
    let nodes: String = q(&mut masters[0].client(), &["CLUSTER", "NODES"]);
    assert!(swapped, "the old master's view:\n{nodes}");
    assert_eq!(
        engine.with(|e| e.messages_sent[wire::kind::MFSTART as usize]),
        1
    );
}

#[test]
fn garbage_on_the_bus_port_closes_only_that_connection() {
    use std::io::{Read, Write};
    let engine = EngineNode::start(2000);
    let mut junk =
        std::net::TcpStream::connect(("127.0.0.1", engine.port + 10000)).expect("connect");
    junk.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    junk.write_all(b"*1\r\n$4\r\nPING\r\n").expect("write");
    let mut buf = [0u8; 16];
    assert_eq!(junk.read(&mut buf).expect("the bus closes the link"), 0);
    // A message announcing more than the bus accepts is refused the same way,
    // before anything is buffered.
    let mut huge =
        std::net::TcpStream::connect(("127.0.0.1", engine.port + 10000)).expect("connect");
    huge.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    huge.write_all(b"RCmb\xff\xff\xff\xff").expect("write");
    assert_eq!(huge.read(&mut buf).expect("the bus closes the link"), 0);
    // The bus still serves: a MEET from a real node completes.
    let Some(redis) = ReferenceRedis::start_cluster_node(&[]) else {
        return;
    };
    let _: () = q(
        &mut redis.client(),
        &["CLUSTER", "MEET", "127.0.0.1", &engine.port.to_string()],
    );
    assert!(eventually(Duration::from_secs(10), || engine.with(|e| e
        .table
        .len()
        == 2
        && e.table.iter().all(|(_, n)| !n.in_handshake()))));
}
