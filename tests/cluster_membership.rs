//! The membership engine (`tessera::cluster::membership`) as a member of a real
//! Redis 7.0.15 cluster: a small threaded driver gives it TCP links.
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
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tessera::cluster::membership::{Effect, LinkId, Membership, Settings, CRON_PERIOD_MS};
use tessera::cluster::nodes::NodeTable;
use tessera::cluster::{flags, wire, NodeName};

enum Event {
    Accepted(TcpStream),
    Connected(LinkId, TcpStream),
    ConnectFailed(LinkId),
    Frame(LinkId, Vec<u8>),
    Closed(LinkId),
}

/// The engine on real sockets: one thread runs it, one per link reads frames.
struct EngineNode {
    engine: Arc<Mutex<Membership>>,
    port: u16,
    name: NodeName,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl EngineNode {
    fn start(node_timeout: u64) -> EngineNode {
        let port = free_cluster_port();
        let listener = TcpListener::bind(("127.0.0.1", port + 10000)).expect("bind the bus port");
        let name = NodeName::random();
        let settings = Settings {
            node_timeout,
            announce_ip: None,
            hostname: String::new(),
            port,
            pport: 0,
            cport: port + 10000,
            ..Settings::default()
        };
        let table = NodeTable::new(name, flags::MASTER, now_ms());
        let engine = Arc::new(Mutex::new(Membership::new(
            table,
            settings,
            u64::from(port),
        )));
        let (events, inbox) = channel();
        let accepted = events.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                if accepted.send(Event::Accepted(stream)).is_err() {
                    return;
                }
            }
        });
        let shared = engine.clone();
        std::thread::spawn(move || {
            let mut links: std::collections::HashMap<LinkId, TcpStream> = Default::default();
            let mut next_cron = Instant::now();
            loop {
                let wait = next_cron.saturating_duration_since(Instant::now());
                let event = inbox.recv_timeout(wait);
                let mut engine = shared.lock().expect("engine");
                let now = now_ms();
                match event {
                    Ok(Event::Accepted(stream)) => {
                        let link = engine.on_accept(now);
                        read_frames(link, stream.try_clone().expect("clone"), events.clone());
                        links.insert(link, stream);
                    }
                    Ok(Event::Connected(link, stream)) => {
                        read_frames(link, stream.try_clone().expect("clone"), events.clone());
                        links.insert(link, stream);
                        engine.on_connected(link, now);
                    }
                    Ok(Event::ConnectFailed(link)) | Ok(Event::Closed(link)) => {
                        links.remove(&link);
                        engine.on_link_error(link);
                    }
                    Ok(Event::Frame(link, bytes)) => {
                        let Some(stream) = links.get(&link) else {
                            continue;
                        };
                        let peer = stream
                            .peer_addr()
                            .map(|a| a.ip().to_string())
                            .unwrap_or_default();
                        let local = stream
                            .local_addr()
                            .map(|a| a.ip().to_string())
                            .unwrap_or_default();
                        match wire::decode(&bytes) {
                            Ok(message) => {
                                engine.on_message(link, message, &peer, &local, now);
                            }
                            Err(e) => panic!("redis-server sent a message we refuse: {e}"),
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        engine.cron(now);
                        next_cron += Duration::from_millis(CRON_PERIOD_MS);
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                }
                engine.before_sleep(now);
                for effect in engine.take_effects() {
                    match effect {
                        Effect::Send { link, bytes } => {
                            if let Some(stream) = links.get_mut(&link) {
                                let _ = stream.write_all(&bytes);
                            }
                        }
                        Effect::Connect { link, ip, cport } => {
                            connect(link, ip, cport, events.clone())
                        }
                        Effect::Close { link } => {
                            if let Some(stream) = links.remove(&link) {
                                let _ = stream.shutdown(Shutdown::Both);
                            }
                        }
                        _ => {}
                    }
                }
            }
        });
        EngineNode { engine, port, name }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Membership) -> T) -> T {
        f(&mut self.engine.lock().expect("engine"))
    }
}

fn connect(link: LinkId, ip: String, cport: u16, events: Sender<Event>) {
    std::thread::spawn(move || {
        let addr = format!("{ip}:{cport}");
        let stream = addr
            .parse()
            .ok()
            .and_then(|a| TcpStream::connect_timeout(&a, Duration::from_secs(1)).ok());
        let _ = events.send(match stream {
            Some(s) => Event::Connected(link, s),
            None => Event::ConnectFailed(link),
        });
    });
}

fn read_frames(link: LinkId, mut stream: TcpStream, events: Sender<Event>) {
    std::thread::spawn(move || loop {
        let mut frame = vec![0u8; 8];
        if stream.read_exact(&mut frame).is_err() {
            let _ = events.send(Event::Closed(link));
            return;
        }
        let Ok(Some(len)) = wire::frame_len(&frame) else {
            let _ = events.send(Event::Closed(link));
            return;
        };
        frame.resize(len, 0);
        if stream.read_exact(&mut frame[8..]).is_err()
            || events.send(Event::Frame(link, frame)).is_err()
        {
            let _ = events.send(Event::Closed(link));
            return;
        }
    });
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
