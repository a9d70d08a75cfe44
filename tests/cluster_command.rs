//! `tessera::cluster::command` against real redis-server 7.0.15 nodes: the same
//! CLUSTER commands go to a redis-server and to an in-process engine put in the
//! same situation (the node's own ID and port, or its CLUSTER NODES loaded as
//! the node table), and the replies are compared byte for byte where their
//! content is deterministic.
//! - A fresh node: HELP, INFO, NODES, SLOTS, SHARDS, the error texts of a long
//!   list of bad inputs, then the same state changes on both (slots, epochs,
//!   migrations, a key) and the replies again; MEET's address normalization.
//! - A master with a replica, seen from each: INFO with message counters,
//!   SLOTS, SHARDS, NODES, REPLICAS, and the errors that need other nodes.
//! - An engine on the bus thread met by a redis-server: both list their two
//!   links with the same fields.

mod common;
#[path = "common/resp.rs"]
mod resp;

use common::{eventually, free_cluster_port, q, ReferenceRedis};
use resp::{encode, parse, Raw, R};
use std::collections::BTreeMap;
use std::net::TcpListener;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tessera::cluster::bus::{Bus, Host};
use tessera::cluster::command::{
    cluster_command, saveconfig_reply, After, BusStats, ClientInfo, Keyspace,
};
use tessera::cluster::membership::{Effect, Membership, Settings};
use tessera::cluster::nodes::NodeTable;
use tessera::cluster::wire::kind;
use tessera::cluster::{flags, nodes_conf, NodeName};
use tessera::protocol::reply::{Protocol, ReplyWriter};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The keys the redis-server holds, mirrored for the engine.
#[derive(Default)]
struct Keys(BTreeMap<u16, Vec<Vec<u8>>>);

impl Keys {
    fn add(&mut self, key: &str) {
        let slot = tessera::slot::key_slot(key.as_bytes());
        self.0
            .entry(slot)
            .or_default()
            .push(key.as_bytes().to_vec());
    }
}

impl Keyspace for Keys {
    fn count_keys_in_slot(&self, slot: u16) -> u64 {
        self.0.get(&slot).map_or(0, |k| k.len() as u64)
    }
    fn keys_in_slot(&self, slot: u16, count: usize) -> Vec<Vec<u8>> {
        self.0
            .get(&slot)
            .map(|k| k.iter().take(count).cloned().collect())
            .unwrap_or_default()
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A redis-server (one RESP2 and one RESP3 connection) and the engine that
/// stands for it.
struct Twin {
    resp2: Raw,
    resp3: Raw,
    engine: Membership,
    keys: Keys,
}

impl Twin {
    fn new(redis: &ReferenceRedis, engine: Membership) -> Twin {
        let mut resp3 = Raw::connect(redis.port);
        assert!(matches!(resp3.c("HELLO 3"), R::Map(_)));
        Twin {
            resp2: Raw::connect(redis.port),
            resp3,
            engine,
            keys: Keys::default(),
        }
    }

    /// `args` (starting with CLUSTER) on both: (redis-server's bytes, ours).
    fn both(&mut self, args: &[&[u8]], proto: Protocol) -> (Vec<u8>, Vec<u8>) {
        let raw = match proto {
            Protocol::Resp2 => &mut self.resp2,
            Protocol::Resp3 => &mut self.resp3,
        };
        raw.send(&encode(args));
        let theirs = raw.read_raw();
        let mut ours = Vec::new();
        let mut out = ReplyWriter::new(&mut ours, proto);
        let after = cluster_command(
            &mut self.engine,
            &args[1..],
            &self.keys,
            &ClientInfo::default(),
            &BusStats::default(),
            now_ms(),
            &mut out,
        );
        match after {
            After::Nothing => {}
            After::SaveConfigNow => saveconfig_reply(&Ok(()), &mut out),
            After::FlushData => self.keys = Keys::default(),
        }
        // What the bus does after a command: the end of an event-loop round.
        self.engine.before_sleep(now_ms());
        self.engine.take_effects();
        (theirs, ours)
    }

    /// The same bytes from both, in RESP2 and RESP3.
    fn same(&mut self, line: &str) {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        self.same_args(&args);
    }

    fn same_args(&mut self, args: &[&[u8]]) {
        for proto in [Protocol::Resp2, Protocol::Resp3] {
            let (theirs, ours) = self.both(args, proto);
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&theirs),
                "{:?} ({proto:?})",
                args.iter()
                    .map(|a| String::from_utf8_lossy(a))
                    .collect::<Vec<_>>()
            );
        }
    }

    /// A state change both must accept.
    fn ok(&mut self, line: &str) {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let (theirs, ours) = self.both(&args, Protocol::Resp2);
        assert_eq!(
            (theirs.as_slice(), ours.as_slice()),
            (&b"+OK\r\n"[..], &b"+OK\r\n"[..]),
            "{line}"
        );
    }

    /// Both replies decoded, for comparisons that mask live values.
    fn decoded(&mut self, line: &str, proto: Protocol) -> (R, R) {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let (theirs, ours) = self.both(&args, proto);
        (decode(&theirs), decode(&ours))
    }

    /// A redis-server command outside CLUSTER.
    fn redis(&mut self, line: &str) -> R {
        self.resp2.c(line)
    }
}

/// The engine's reply to `CLUSTER <args>` alone.
fn engine_reply(engine: &mut Membership, keys: &Keys, args: &[&[u8]], proto: Protocol) -> Vec<u8> {
    let mut out = Vec::new();
    let after = cluster_command(
        engine,
        args,
        keys,
        &ClientInfo::default(),
        &BusStats::default(),
        now_ms(),
        &mut ReplyWriter::new(&mut out, proto),
    );
    assert_eq!(after, After::Nothing);
    out
}

fn decode(bytes: &[u8]) -> R {
    let (r, end) = parse(bytes, 0).expect("a whole reply");
    assert_eq!(end, bytes.len());
    r
}

fn info_field(info: &str, field: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or("")
        .to_string()
}

fn cluster_info(raw: &mut Raw) -> String {
    raw.c("CLUSTER INFO").text()
}

fn settings(port: u16) -> Settings {
    Settings {
        port,
        cport: port + 10000,
        ..Settings::default()
    }
}

/// The engine as a fresh node: the redis-server's own ID and ports.
fn fresh_engine(redis: &ReferenceRedis) -> Membership {
    let id: String = q(&mut redis.client(), &["CLUSTER", "MYID"]);
    let name = NodeName::parse(id.as_bytes()).expect("a node ID");
    let mut engine = Membership::new(
        NodeTable::new(name, flags::MASTER, now_ms()),
        settings(redis.port),
        1,
    );
    // Up for a few seconds already, as the redis-server is by now: its first
    // state update is behind it.
    let started = now_ms() - 3000;
    engine.cron(started);
    engine.before_sleep(started);
    engine.take_effects();
    engine
}

/// Runs the engine's state update as its clock would a few seconds on: a
/// master waits 2 s after its first update, and 5 s after it last was in the
/// minority, before saying the cluster is ok.
fn settle_state(engine: &mut Membership) {
    let now = now_ms();
    engine.cron(now);
    engine.before_sleep(now);
    engine.cron(now + 5100);
    engine.before_sleep(now + 5100);
    engine.take_effects();
}

const UNKNOWN: &str = "0123456789abcdef0123456789abcdef01234567";

#[test]
fn a_fresh_node_answers_as_redis_does() {
    let Some(redis) = ReferenceRedis::start_cluster_node(&[]) else {
        eprintln!("redis-server is not installed: skipping");
        return;
    };
    let mut t = Twin::new(&redis, fresh_engine(&redis));
    let me = t.engine.table.me().name.to_string();
    // A fresh redis-server says cluster_size:1 until its first state update,
    // 2 s after start; the engine starts at 0 (see the report).
    assert!(eventually(Duration::from_secs(5), || info_field(
        &cluster_info(&mut t.resp2),
        "cluster_size"
    ) == "0"));
    for line in [
        "CLUSTER HELP",
        "CLUSTER INFO",
        "CLUSTER MYID",
        "CLUSTER NODES",
        "CLUSTER SLOTS",
        "CLUSTER SHARDS",
        "CLUSTER LINKS",
        "CLUSTER SAVECONFIG",
    ] {
        t.same(line);
    }
    let bad = [
        "CLUSTER FOO".to_string(),
        "CLUSTER foo bar".into(),
        "CLUSTER ADDSLOTS".into(),
        "CLUSTER HELP x".into(),
        "CLUSTER INFO x".into(),
        "CLUSTER ADDSLOTS 99999".into(),
        "CLUSTER ADDSLOTS -1".into(),
        "CLUSTER ADDSLOTS abc".into(),
        "CLUSTER ADDSLOTS 01".into(),
        "CLUSTER ADDSLOTS 1 1".into(),
        "CLUSTER ADDSLOTS 1 2 x".into(),
        "CLUSTER ADDSLOTSRANGE 5 1".into(),
        "CLUSTER ADDSLOTSRANGE 1 2 3".into(),
        "CLUSTER ADDSLOTSRANGE 1".into(),
        "CLUSTER ADDSLOTSRANGE 1 10 5 20".into(),
        "CLUSTER ADDSLOTSRANGE 1 10 x 20".into(),
        "CLUSTER DELSLOTS 5".into(),
        "CLUSTER DELSLOTSRANGE 1 2".into(),
        "CLUSTER DELSLOTSRANGE 1 2 3".into(),
        "CLUSTER SETSLOT 99999 STABLE".into(),
        "CLUSTER SETSLOT x STABLE".into(),
        "CLUSTER SETSLOT 1".into(),
        "CLUSTER SETSLOT 1 FOO".into(),
        "CLUSTER SETSLOT 1 STABLE x".into(),
        "CLUSTER SETSLOT 1 NODE".into(),
        format!("CLUSTER SETSLOT 1 MIGRATING {UNKNOWN}"),
        format!("CLUSTER SETSLOT 1 IMPORTING {UNKNOWN}"),
        "CLUSTER SETSLOT 1 IMPORTING xyz".into(),
        format!("CLUSTER SETSLOT 1 NODE {UNKNOWN}"),
        "CLUSTER MEET 1.2.3 6379".into(),
        "CLUSTER MEET 01.2.3.4 6379".into(),
        "CLUSTER MEET host 6379".into(),
        "CLUSTER MEET 127.0.0.1 abc".into(),
        "CLUSTER MEET 127.0.0.1 +1".into(),
        "CLUSTER MEET 127.0.0.1 1 abc".into(),
        "CLUSTER MEET 127.0.0.1 0".into(),
        "CLUSTER MEET 127.0.0.1 -1".into(),
        "CLUSTER MEET 127.0.0.1 65535".into(),
        "CLUSTER MEET 127.0.0.1 1 65536".into(),
        "CLUSTER MEET 127.0.0.1 99999999999999999999".into(),
        "CLUSTER MEET 127.0.0.1".into(),
        "CLUSTER MEET a b c d".into(),
        format!("CLUSTER FORGET {me}"),
        format!("CLUSTER FORGET {UNKNOWN}"),
        "CLUSTER FORGET abc".into(),
        format!("CLUSTER FORGET {}", me.to_uppercase()),
        format!("CLUSTER REPLICATE {UNKNOWN}"),
        format!("CLUSTER REPLICATE {me}"),
        format!("CLUSTER SLAVES {UNKNOWN}"),
        "CLUSTER REPLICAS abc".into(),
        format!("CLUSTER REPLICAS {me}"),
        format!("CLUSTER COUNT-FAILURE-REPORTS {me}"),
        "CLUSTER COUNT-FAILURE-REPORTS abc".into(),
        "CLUSTER COUNTKEYSINSLOT -1".into(),
        "CLUSTER COUNTKEYSINSLOT 16384".into(),
        "CLUSTER COUNTKEYSINSLOT x".into(),
        "CLUSTER COUNTKEYSINSLOT 5".into(),
        "CLUSTER GETKEYSINSLOT 1 -1".into(),
        "CLUSTER GETKEYSINSLOT -1 1".into(),
        "CLUSTER GETKEYSINSLOT x 1".into(),
        "CLUSTER GETKEYSINSLOT 1 x".into(),
        "CLUSTER GETKEYSINSLOT 5 10".into(),
        "CLUSTER KEYSLOT foo".into(),
        "CLUSTER KEYSLOT {user1}:a".into(),
        "CLUSTER KEYSLOT {}a".into(),
        "CLUSTER KEYSLOT".into(),
        "CLUSTER FAILOVER".into(),
        "CLUSTER FAILOVER FORCE".into(),
        "CLUSTER FAILOVER TAKEOVER".into(),
        "CLUSTER FAILOVER x".into(),
        "CLUSTER FAILOVER a b".into(),
        "CLUSTER RESET x".into(),
        "CLUSTER RESET a b".into(),
        "CLUSTER SET-CONFIG-EPOCH x".into(),
        "CLUSTER SET-CONFIG-EPOCH -1".into(),
        "CLUSTER BUMPEPOCH x".into(),
        "CLUSTER MYID x".into(),
    ];
    for line in &bad {
        t.same(line);
    }
    // Client bytes in error texts: CR/LF, NUL, an empty key.
    t.same_args(&[b"CLUSTER", b"FORGET", b"\r\nab\r\ncd\r\n"]);
    t.same_args(&[b"CLUSTER", b"FORGET", b"ab\0cd"]);
    t.same_args(&[b"CLUSTER", b"fo\r\no"]);
    t.same_args(&[b"CLUSTER", b"MEET", b"bad\r\n", b"1"]);
    t.same_args(&[b"CLUSTER", b"KEYSLOT", b""]);

    // The same changes on both, and the replies after them.
    t.ok("CLUSTER SET-CONFIG-EPOCH 5");
    t.same("CLUSTER SET-CONFIG-EPOCH 6");
    t.same("CLUSTER BUMPEPOCH");
    t.ok("CLUSTER ADDSLOTS 0 1 2 100");
    for line in [
        "CLUSTER ADDSLOTS 1",
        "CLUSTER ADDSLOTSRANGE 10 20 15 30",
        "CLUSTER ADDSLOTSRANGE 200 300 50 aaa",
        "CLUSTER ADDSLOTSRANGE 0 5 x y",
        "CLUSTER DELSLOTS 2 3",
        "CLUSTER DELSLOTS 2 2",
        "CLUSTER NODES",
        "CLUSTER SLOTS",
        "CLUSTER SHARDS",
        "CLUSTER INFO",
    ] {
        t.same(line);
    }
    t.ok("CLUSTER DELSLOTSRANGE 0 2");
    t.ok("CLUSTER ADDSLOTSRANGE 0 99 101 16383");
    t.ok(&format!("CLUSTER SETSLOT 1 MIGRATING {me}"));
    t.same(&format!("CLUSTER SETSLOT 2 IMPORTING {me}"));
    t.same(&format!("CLUSTER SETSLOT 1 MIGRATING {UNKNOWN}"));
    t.same("CLUSTER NODES");
    t.ok("CLUSTER SETSLOT 1 STABLE");
    // A master that was in the minority (alone without slots counts) waits
    // `min(node timeout, 5 s)` before saying ok.
    let up = eventually(Duration::from_secs(10), || {
        info_field(&cluster_info(&mut t.resp2), "cluster_state") == "ok"
    });
    assert!(
        up,
        "{}\n{}",
        cluster_info(&mut t.resp2),
        t.resp2.c("CLUSTER NODES").text()
    );
    settle_state(&mut t.engine);
    for line in [
        "CLUSTER INFO",
        "CLUSTER NODES",
        "CLUSTER SLOTS",
        "CLUSTER SHARDS",
    ] {
        t.same(line);
    }
    // A key, in the engine's keyspace too.
    assert_eq!(t.redis("SET foo bar"), resp::ok());
    t.keys.add("foo");
    for line in [
        "CLUSTER COUNTKEYSINSLOT 12182",
        "CLUSTER GETKEYSINSLOT 12182 5",
        "CLUSTER GETKEYSINSLOT 12182 0",
        "CLUSTER FLUSHSLOTS",
        "CLUSTER RESET",
        "CLUSTER RESET HARD",
        &format!("CLUSTER SETSLOT 12182 NODE {UNKNOWN}"),
        &format!("CLUSTER SETSLOT 12182 NODE {me}"),
        "CLUSTER DELSLOTS 12182 12182",
        &format!("CLUSTER REPLICATE {me}"),
        "CLUSTER SHARDS",
    ] {
        t.same(line);
    }

    // MEET keeps the address as inet_ntop writes it back.
    for ip in [
        "::ffff:1.2.3.4",
        "0:0:0:0:0:0:0:1",
        "1:0:0:2:0:0:0:3",
        "::2:3",
        "FE80::0:1",
        "10.0.0.1",
    ] {
        t.ok(&format!("CLUSTER MEET {ip} 7000"));
    }
    t.same_args(&[b"CLUSTER", b"MEET", b"10.0.0.2\0junk", b"7000"]);
    t.same("CLUSTER MEET 10.0.0.1 7000");
    t.same("CLUSTER SET-CONFIG-EPOCH 1");
    let (theirs, ours) = t.decoded("CLUSTER NODES", Protocol::Resp2);
    let handshakes = |r: &R| {
        let mut lines: Vec<String> = r
            .text()
            .lines()
            .filter(|l| l.contains(" handshake "))
            .map(|l| l.split_once(' ').map_or("", |(_, rest)| rest).to_string())
            .collect();
        lines.sort();
        lines
    };
    assert_eq!(handshakes(&ours), handshakes(&theirs));
    assert_eq!(handshakes(&ours).len(), 7);
    // The node count in INFO includes nodes in handshake.
    let known = |r: &R| info_field(&r.text(), "cluster_known_nodes");
    let (theirs, ours) = t.decoded("CLUSTER INFO", Protocol::Resp2);
    assert_eq!((known(&theirs), known(&ours)), ("8".into(), "8".into()));
}

/// A redis-server master A serving every slot with a replica B, both agreed.
fn master_and_replica() -> Option<(ReferenceRedis, ReferenceRedis, String, String)> {
    let a = ReferenceRedis::start_cluster_node(&["--cluster-announce-hostname", "host-a"])?;
    let b = ReferenceRedis::start_cluster_node(&[])?;
    let (mut ca, mut cb) = (a.client(), b.client());
    let id_a: String = q(&mut ca, &["CLUSTER", "MYID"]);
    let id_b: String = q(&mut cb, &["CLUSTER", "MYID"]);
    let _: () = q(&mut ca, &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
    let _: () = q(
        &mut ca,
        &["CLUSTER", "MEET", "127.0.0.1", &b.port.to_string()],
    );
    let met = eventually(Duration::from_secs(10), || {
        let nodes: String = q(&mut cb, &["CLUSTER", "NODES"]);
        nodes.contains(&id_a) && !nodes.contains("handshake")
    });
    assert!(met, "B never learned A");
    let _: () = q(&mut cb, &["CLUSTER", "REPLICATE", &id_a]);
    // A lists B in CLUSTER SLOTS once B has data: synced, and said so.
    let synced = eventually(Duration::from_secs(20), || {
        let slots = Raw::connect(a.port).c("CLUSTER SLOTS");
        let info: String = q(&mut ca, &["CLUSTER", "INFO"]);
        slots.items().first().is_some_and(|r| r.items().len() == 4)
            && info_field(&info, "cluster_state") == "ok"
    });
    assert!(synced, "A never listed B as an available replica");
    Some((a, b, id_a, id_b))
}

/// The engine standing for `redis`: its CLUSTER NODES as the node table, its
/// epoch and message counters, its state settled.
fn engine_from(redis: &ReferenceRedis, info: &str) -> Membership {
    let nodes: String = q(&mut redis.client(), &["CLUSTER", "NODES"]);
    let conf = nodes_conf::parse(nodes.as_bytes()).expect("CLUSTER NODES parses");
    let table = NodeTable::from_conf(&conf, now_ms()).expect("a myself line");
    let hostname = conf.myself().and_then(|m| m.hostname.clone());
    let mut engine = Membership::new(
        table,
        Settings {
            hostname: hostname.unwrap_or_default(),
            ..settings(redis.port)
        },
        1,
    );
    engine.table.current_epoch = info_field(info, "cluster_current_epoch")
        .parse()
        .expect("an epoch");
    for k in 0..kind::COUNT {
        let name = kind::name(k as u16);
        let count = |way: &str| {
            info_field(info, &format!("cluster_stats_messages_{name}_{way}"))
                .parse()
                .unwrap_or(0)
        };
        engine.messages_sent[k] = count("sent");
        engine.messages_received[k] = count("received");
    }
    settle_state(&mut engine);
    engine
}

/// A map's pairs, RESP3 or flattened into a RESP2 array.
fn pairs(r: &R) -> Vec<(String, R)> {
    match r {
        R::Map(pairs) => pairs.iter().map(|(k, v)| (k.text(), v.clone())).collect(),
        R::Array(items) => items
            .chunks(2)
            .map(|kv| (kv[0].text(), kv[1].clone()))
            .collect(),
        other => panic!("not a map: {other:?}"),
    }
}

fn field(r: &R, key: &str) -> R {
    pairs(r)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no {key} in {r:?}"))
}

/// Gives the engine the replication offsets a redis-server's CLUSTER SHARDS
/// reports: its own and the other nodes' as it heard them.
fn copy_offsets(engine: &mut Membership, shards: &R) {
    for shard in shards.items() {
        for node in field(shard, "nodes").items() {
            let id = field(node, "id").text();
            let offset = field(node, "replication-offset").int() as u64;
            let name = NodeName::parse(id.as_bytes()).expect("a node ID");
            let node = engine.table.lookup(&name).expect("a known node");
            if node == engine.table.myself() {
                engine.set_replication(offset, 0);
            } else if let Some(n) = engine.table.get_mut(node) {
                n.repl_offset = offset;
            }
        }
    }
}

/// CLUSTER NODES' lines without what is live (ping and pong times, link
/// state), sorted: the table's order is Redis's hash order.
fn masked_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .map(|l| {
            let mut f: Vec<&str> = l.split(' ').collect();
            for i in [4, 5, 7] {
                if let Some(field) = f.get_mut(i) {
                    *field = "_";
                }
            }
            f.join(" ")
        })
        .collect();
    lines.sort();
    lines
}

#[test]
fn a_master_and_its_replica_answer_as_redis_does() {
    let Some((a, b, id_a, id_b)) = master_and_replica() else {
        eprintln!("redis-server is not installed: skipping");
        return;
    };
    // The master's view.
    let mut ra = Raw::connect(a.port);
    assert_eq!(ra.c("SET foo bar"), resp::ok());
    let info = cluster_info(&mut ra);
    let mut t = Twin::new(&a, engine_from(&a, &info));
    t.keys.add("foo");
    // INFO with the counters the redis-server reported in that same reply.
    let ours = engine_reply(&mut t.engine, &t.keys, &[b"INFO"], Protocol::Resp2);
    assert_eq!(decode(&ours).text(), info);
    assert!(info.contains("cluster_stats_messages_ping_sent:"), "{info}");
    // SLOTS and SHARDS with the offsets of the very reply compared (they move).
    for (sub, proto) in [
        (&b"SLOTS"[..], Protocol::Resp2),
        (b"SLOTS", Protocol::Resp3),
        (b"SHARDS", Protocol::Resp2),
        (b"SHARDS", Protocol::Resp3),
    ] {
        let raw = match proto {
            Protocol::Resp2 => &mut t.resp2,
            Protocol::Resp3 => &mut t.resp3,
        };
        raw.send(&encode(&[b"CLUSTER", b"SHARDS"]));
        copy_offsets(&mut t.engine, &decode(&raw.read_raw()));
        raw.send(&encode(&[b"CLUSTER", sub]));
        let theirs = raw.read_raw();
        if sub == b"SHARDS" {
            copy_offsets(&mut t.engine, &decode(&theirs));
        }
        let ours = engine_reply(&mut t.engine, &t.keys, &[sub], proto);
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs),
            "{proto:?}"
        );
    }
    let (theirs, ours) = t.decoded("CLUSTER NODES", Protocol::Resp2);
    assert_eq!(masked_lines(&ours.text()), masked_lines(&theirs.text()));
    let (theirs, ours) = t.decoded(&format!("CLUSTER REPLICAS {id_a}"), Protocol::Resp2);
    let lines = |r: &R| {
        r.items()
            .iter()
            .map(|l| masked_lines(&l.text()))
            .collect::<Vec<_>>()
    };
    assert_eq!(lines(&ours), lines(&theirs));
    for line in [
        format!("CLUSTER SETSLOT 5 NODE {id_b}"),
        format!("CLUSTER SETSLOT 5 MIGRATING {id_b}"),
        format!("CLUSTER SETSLOT 5 IMPORTING {id_b}"),
        format!("CLUSTER REPLICATE {id_b}"),
        format!("CLUSTER REPLICAS {id_b}"),
        format!("CLUSTER SLAVES {id_b}"),
        format!("CLUSTER FORGET {id_a}"),
        format!("CLUSTER COUNT-FAILURE-REPORTS {id_b}"),
        "CLUSTER FAILOVER".into(),
        "CLUSTER SET-CONFIG-EPOCH 9".into(),
        "CLUSTER FLUSHSLOTS".into(),
        "CLUSTER RESET".into(),
        "CLUSTER ADDSLOTS 5".into(),
        format!("CLUSTER SETSLOT 12182 NODE {UNKNOWN}"),
        "CLUSTER BUMPEPOCH".into(),
    ] {
        t.same(&line);
    }

    // The replica's view, with its offset (a replica with none is not listed).
    let info = cluster_info(&mut Raw::connect(b.port));
    let mut t = Twin::new(&b, engine_from(&b, &info));
    let shards = t.resp3.c("CLUSTER SHARDS");
    copy_offsets(&mut t.engine, &shards);
    for line in [
        "CLUSTER SETSLOT 1 STABLE".to_string(),
        "CLUSTER SETSLOT x STABLE".into(),
        format!("CLUSTER FORGET {id_a}"),
        format!("CLUSTER FORGET {id_b}"),
        format!("CLUSTER REPLICATE {id_b}"),
        "CLUSTER FAILOVER x".into(),
        "CLUSTER RESET x".into(),
        "CLUSTER ADDSLOTS 5".into(),
        "CLUSTER DELSLOTS 16384".into(),
        "CLUSTER SET-CONFIG-EPOCH 1".into(),
        "CLUSTER SLOTS".into(),
    ] {
        t.same(&line);
    }
    let (theirs, ours) = t.decoded("CLUSTER NODES", Protocol::Resp2);
    assert_eq!(masked_lines(&ours.text()), masked_lines(&theirs.text()));
}

/// The engine on the bus thread; the effects the server would carry out are
/// dropped.
struct NoHost;

impl Host for NoHost {
    fn effect(&mut self, _: Effect, _: &Membership) {}
    fn replication(&mut self) -> (u64, u64) {
        (0, 0)
    }
}

/// What a CLUSTER LINKS entry says, without its times and buffer sizes:
/// direction, peer, field names, and each value's RESP type.
fn link_shape(link: &R) -> (String, String, Vec<String>) {
    let R::Map(fields) = link else {
        panic!("a link is a map: {link:?}")
    };
    let get = |key: &str| {
        fields
            .iter()
            .find(|(k, _)| k.text() == key)
            .map(|(_, v)| v.text())
            .unwrap_or_default()
    };
    let kinds = fields
        .iter()
        .map(|(k, v)| {
            let kind = match v {
                R::Int(_) => "int",
                R::Bulk(_) => "bulk",
                _ => "other",
            };
            format!("{}:{kind}", k.text())
        })
        .collect();
    (get("direction"), get("node"), kinds)
}

#[test]
fn links_are_listed_as_redis_lists_them() {
    let Some(redis) = ReferenceRedis::start_cluster_node(&["--cluster-node-timeout", "2000"])
    else {
        eprintln!("redis-server is not installed: skipping");
        return;
    };
    let port = free_cluster_port();
    let listener = TcpListener::bind(("127.0.0.1", port + 10000)).expect("bind the bus port");
    let name = NodeName::random();
    let engine = Membership::new(
        NodeTable::new(name, flags::MASTER, now_ms()),
        Settings {
            node_timeout: 2000,
            ..settings(port)
        },
        7,
    );
    let bus = Bus::start(engine, vec![listener], Box::new(NoHost)).expect("start the bus");
    let mut r3 = Raw::connect(redis.port);
    r3.c("HELLO 3");
    let redis_id = r3.c("CLUSTER MYID").text();
    assert_eq!(r3.c(&format!("CLUSTER MEET 127.0.0.1 {port}")), resp::ok());
    let links = |bus: &Bus| {
        let mut out = Vec::new();
        let _ = bus.with_engine(|e| {
            cluster_command(
                e,
                &[b"LINKS"],
                &Keys::default(),
                &ClientInfo::default(),
                &BusStats::default(),
                now_ms(),
                &mut ReplyWriter::new(&mut out, Protocol::Resp3),
            )
        });
        decode(&out)
    };
    let linked = eventually(Duration::from_secs(10), || {
        r3.c("CLUSTER LINKS").items().len() == 2 && links(&bus).items().len() == 2
    });
    assert!(linked, "two links each way never came up");
    let shapes = |r: &R, peer: &str| {
        let mut shapes: Vec<(String, Vec<String>)> = r
            .items()
            .iter()
            .map(|l| {
                let (direction, node, kinds) = link_shape(l);
                assert_eq!(node, peer);
                (direction, kinds)
            })
            .collect();
        shapes.sort();
        shapes
    };
    let theirs = shapes(&r3.c("CLUSTER LINKS"), &name.to_string());
    let ours = shapes(&links(&bus), &redis_id);
    assert_eq!(ours, theirs);
    assert_eq!(theirs[0].0, "from");
    assert_eq!(theirs[1].0, "to");
}
