//! Every CLUSTER subcommand on an engine built in process: its success replies
//! and each of Redis 7.0.15's error texts, byte for byte where the bytes are
//! known, decoded where the shape is the point. Links come from two engines
//! passing messages to each other, as in the membership tests.

use super::*;
use crate::cluster::flags;
use crate::cluster::membership::admin::LinkInfo;
use crate::cluster::membership::{Effect, Settings};
use crate::cluster::wire::kind;
use crate::protocol::reply::Protocol;
use std::collections::BTreeMap;

const NOW: u64 = 1_000_000;

/// A keyspace of named keys, each in its slot.
#[derive(Default)]
struct Keys(BTreeMap<u16, Vec<Vec<u8>>>);

impl Keys {
    fn with(keys: &[&str]) -> Keys {
        let mut k = Keys::default();
        for key in keys {
            let slot = crate::slot::key_slot(key.as_bytes());
            k.0.entry(slot).or_default().push(key.as_bytes().to_vec());
        }
        k
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

fn name(c: char) -> NodeName {
    NodeName::parse(c.to_string().repeat(NAME_LEN).as_bytes()).unwrap()
}

fn settings(port: u16) -> Settings {
    Settings {
        node_timeout: 2000,
        port,
        cport: port + 10000,
        ..Settings::default()
    }
}

/// A fresh master named "aaaa...", port 7000.
fn engine() -> Membership {
    Membership::new(
        NodeTable::new(name('a'), flags::MASTER, NOW),
        settings(7000),
        1,
    )
}

/// Adds a known node to `e`'s table (as gossip would).
fn add_node(e: &mut Membership, c: char, flags: u16, port: u16) -> NodeId {
    let id = e.table.create(Some(name(c)), flags, NOW);
    let n = e.table.get_mut(id).unwrap();
    n.ip = "127.0.0.1".into();
    n.port = port;
    n.cport = port + 10000;
    id
}

struct Run<'k> {
    keys: &'k Keys,
    client: ClientInfo,
    proto: Protocol,
    now: u64,
}

impl Default for Run<'_> {
    fn default() -> Self {
        static EMPTY: std::sync::OnceLock<Keys> = std::sync::OnceLock::new();
        Run {
            keys: EMPTY.get_or_init(Keys::default),
            client: ClientInfo::default(),
            proto: Protocol::Resp2,
            now: NOW,
        }
    }
}

impl Run<'_> {
    fn call(&self, e: &mut Membership, words: &[&[u8]]) -> (Vec<u8>, After) {
        let mut buf = Vec::new();
        let mut out = ReplyWriter::new(&mut buf, self.proto);
        let after = cluster_command(
            e,
            words,
            self.keys,
            &self.client,
            &BusStats::default(),
            self.now,
            &mut out,
        );
        (buf, after)
    }

    fn raw(&self, e: &mut Membership, line: &str) -> Vec<u8> {
        let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let (buf, after) = self.call(e, &words);
        assert_eq!(after, After::Nothing, "{line}");
        buf
    }

    fn text(&self, e: &mut Membership, line: &str) -> String {
        String::from_utf8(self.raw(e, line)).unwrap()
    }

    fn value(&self, e: &mut Membership, line: &str) -> V {
        decode(&self.raw(e, line))
    }
}

fn run(e: &mut Membership, line: &str) -> String {
    Run::default().text(e, line)
}

fn err(text: &str) -> String {
    format!("-ERR {text}\r\n")
}

const OK: &str = "+OK\r\n";

/// A decoded reply; maps keep their order.
#[derive(Debug, Clone, PartialEq)]
enum V {
    Simple(String),
    Err(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<V>),
    Map(Vec<(V, V)>),
    Verbatim(Vec<u8>),
}

impl V {
    fn items(&self) -> &[V] {
        match self {
            V::Array(v) => v,
            other => panic!("not an array: {other:?}"),
        }
    }
    fn text(&self) -> String {
        match self {
            V::Bulk(b) | V::Verbatim(b) => String::from_utf8_lossy(b).into_owned(),
            V::Simple(s) | V::Err(s) => s.clone(),
            V::Int(n) => n.to_string(),
            other => panic!("not a scalar: {other:?}"),
        }
    }
    /// A map's value (a RESP2 flattened map too).
    fn get(&self, key: &str) -> Option<&V> {
        match self {
            V::Map(pairs) => pairs.iter().find(|(k, _)| k.text() == key).map(|(_, v)| v),
            V::Array(items) => items
                .chunks(2)
                .find(|kv| kv[0].text() == key)
                .map(|kv| &kv[1]),
            _ => None,
        }
    }
}

fn decode(buf: &[u8]) -> V {
    let (v, end) = parse(buf, 0);
    assert_eq!(end, buf.len(), "one reply, nothing after it");
    v
}

fn parse(buf: &[u8], at: usize) -> (V, usize) {
    let eol = at + buf[at..].windows(2).position(|w| w == b"\r\n").unwrap();
    let head = std::str::from_utf8(&buf[at + 1..eol]).unwrap();
    let next = eol + 2;
    let n = || head.parse::<i64>().unwrap();
    match buf[at] {
        b'+' => (V::Simple(head.into()), next),
        b'-' => (V::Err(head.into()), next),
        b':' => (V::Int(n()), next),
        b'_' => (V::Nil, next),
        b'$' if n() < 0 => (V::Nil, next),
        b'$' => {
            let len = n() as usize;
            (V::Bulk(buf[next..next + len].to_vec()), next + len + 2)
        }
        b'=' => {
            let len = n() as usize;
            (
                V::Verbatim(buf[next + 4..next + len].to_vec()),
                next + len + 2,
            )
        }
        b'*' | b'%' => {
            let count = n() as usize * if buf[at] == b'%' { 2 } else { 1 };
            let mut items = Vec::new();
            let mut pos = next;
            for _ in 0..count {
                let (v, p) = parse(buf, pos);
                items.push(v);
                pos = p;
            }
            if buf[at] == b'*' {
                return (V::Array(items), pos);
            }
            let mut pairs = Vec::new();
            let mut it = items.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((k, v));
            }
            (V::Map(pairs), pos)
        }
        other => panic!("unexpected type byte {:?}", other as char),
    }
}

fn owner(e: &Membership, slot: usize) -> Option<NodeName> {
    e.table
        .slot_owner(slot)
        .and_then(|o| e.table.get(o))
        .map(|n| n.name)
}

fn topology_changed(e: &mut Membership) -> bool {
    e.take_effects().contains(&Effect::TopologyChanged)
}

// ---------------------------------------------------------------------------------
// Dispatch

#[test]
fn unknown_subcommands_and_wrong_arities_get_the_lookups_texts() {
    let mut e = engine();
    assert_eq!(
        run(&mut e, "foo"),
        err("unknown subcommand 'foo'. Try CLUSTER HELP.")
    );
    let long = "x".repeat(200);
    assert_eq!(
        run(&mut e, &long),
        err(&format!(
            "unknown subcommand '{}'. Try CLUSTER HELP.",
            "x".repeat(128)
        ))
    );
    let (buf, _) = Run::default().call(&mut e, &[b"fo\r\no"]);
    assert_eq!(
        buf,
        err("unknown subcommand 'fo  o'. Try CLUSTER HELP.").as_bytes()
    );
    let (buf, _) = Run::default().call(&mut e, &[]);
    assert_eq!(
        buf,
        err("wrong number of arguments for 'cluster' command").as_bytes()
    );
    for (line, name) in [
        ("ADDSLOTS", "addslots"),
        ("addslotsrange 1", "addslotsrange"),
        ("help x", "help"),
        ("INFO x", "info"),
        ("myid x", "myid"),
        ("forget", "forget"),
        ("getkeysinslot 1", "getkeysinslot"),
        ("setslot 1", "setslot"),
        ("meet 1.2.3.4", "meet"),
        ("count-failure-reports", "count-failure-reports"),
    ] {
        assert_eq!(
            run(&mut e, line),
            err(&format!(
                "wrong number of arguments for 'cluster|{name}' command"
            )),
            "{line}"
        );
    }
    // The table's arity passes; the subcommand's own forms do not.
    for (line, sub) in [
        ("MEET 1.2.3.4 1 2 3", "MEET"),
        ("failover force x", "failover"),
        ("reset hard x", "reset"),
    ] {
        assert_eq!(
            run(&mut e, line),
            err(&format!(
                "unknown subcommand or wrong number of arguments for '{sub}'. Try CLUSTER HELP."
            ))
        );
    }
}

#[test]
fn help_lists_every_subcommand_then_help_itself() {
    let mut e = engine();
    let v = Run::default().value(&mut e, "HELP");
    let lines: Vec<String> = v.items().iter().map(V::text).collect();
    assert_eq!(lines.len(), HELP.len() + 3);
    assert_eq!(
        lines[0],
        "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    );
    assert_eq!(lines[1], "ADDSLOTS <slot> [<slot> ...]");
    assert_eq!(lines[lines.len() - 2], "HELP");
    assert_eq!(lines[lines.len() - 1], "    Prints this help.");
    assert!(matches!(v.items()[5], V::Simple(_)));
}

// ---------------------------------------------------------------------------------
// Slot assignment

#[test]
fn addslots_and_delslots_check_every_slot_before_changing_any() {
    let mut e = engine();
    assert_eq!(run(&mut e, "addslots 0 1 5"), OK);
    assert_eq!(owner(&e, 5), Some(name('a')));
    assert!(topology_changed(&mut e));
    assert_eq!(owner(&e, 2), None);
    assert_eq!(
        run(&mut e, "addslots 99999"),
        err("Invalid or out of range slot")
    );
    assert_eq!(
        run(&mut e, "addslots -1"),
        err("Invalid or out of range slot")
    );
    assert_eq!(
        run(&mut e, "addslots 16384"),
        err("Invalid or out of range slot")
    );
    assert_eq!(
        run(&mut e, "addslots 01"),
        err("Invalid or out of range slot")
    );
    // Every argument is parsed before any is checked.
    assert_eq!(
        run(&mut e, "addslots 1 x"),
        err("Invalid or out of range slot")
    );
    assert_eq!(run(&mut e, "addslots 2 1"), err("Slot 1 is already busy"));
    assert_eq!(
        run(&mut e, "addslots 2 3 2"),
        err("Slot 2 specified multiple times")
    );
    assert_eq!(owner(&e, 2), None, "nothing changes on error");
    assert!(!topology_changed(&mut e));
    assert_eq!(run(&mut e, "addslots 16383"), OK);
    assert_eq!(
        run(&mut e, "delslots 7"),
        err("Slot 7 is already unassigned")
    );
    assert_eq!(
        run(&mut e, "delslots 0 0"),
        err("Slot 0 specified multiple times")
    );
    assert_eq!(owner(&e, 0), Some(name('a')));
    assert_eq!(run(&mut e, "DELSLOTS 0 16383"), OK);
    assert_eq!((owner(&e, 0), owner(&e, 16383)), (None, None));
    assert_eq!(e.table.me().slot_count(), 2);
}

#[test]
fn the_range_forms_check_pair_by_pair_in_argument_order() {
    let mut e = engine();
    assert_eq!(run(&mut e, "addslotsrange 0 99 200 200"), OK);
    assert_eq!(e.table.me().slot_count(), 101);
    assert_eq!(
        run(&mut e, "addslotsrange 1 2 3"),
        err("wrong number of arguments for 'cluster|addslotsrange' command")
    );
    assert_eq!(
        run(&mut e, "DELSLOTSRANGE 1 2 3"),
        err("wrong number of arguments for 'cluster|delslotsrange' command")
    );
    assert_eq!(
        run(&mut e, "addslotsrange 300 310 5 1"),
        err("start slot number 5 is greater than end slot number 1")
    );
    assert_eq!(
        run(&mut e, "addslotsrange 300 310 aaa 1"),
        err("Invalid or out of range slot")
    );
    assert_eq!(
        run(&mut e, "addslotsrange 300 310 1 70000"),
        err("Invalid or out of range slot")
    );
    // The busy pair comes before the unparsable one: its error wins.
    assert_eq!(
        run(&mut e, "addslotsrange 50 60 aaa 1"),
        err("Slot 50 is already busy")
    );
    assert_eq!(
        run(&mut e, "addslotsrange 300 310 305 320"),
        err("Slot 305 specified multiple times")
    );
    assert_eq!(owner(&e, 300), None);
    assert_eq!(
        run(&mut e, "delslotsrange 0 10 150 160"),
        err("Slot 150 is already unassigned")
    );
    assert_eq!(owner(&e, 0), Some(name('a')));
    assert_eq!(run(&mut e, "delslotsrange 0 10 90 99"), OK);
    assert_eq!(e.table.me().slot_count(), 101 - 21);
}

#[test]
fn adding_a_slot_we_were_importing_ends_the_import() {
    let mut e = engine();
    let b = add_node(&mut e, 'b', flags::MASTER, 7001);
    assert_eq!(
        run(&mut e, &format!("setslot 9 importing {}", name('b'))),
        OK
    );
    assert_eq!(e.table.importing_from(9), Some(b));
    assert_eq!(run(&mut e, "addslots 9"), OK);
    assert_eq!(e.table.importing_from(9), None);
}

#[test]
fn flushslots_needs_an_empty_keyspace() {
    let mut e = engine();
    run(&mut e, "addslotsrange 0 16383");
    let keys = Keys::with(&["k"]);
    let with_keys = Run {
        keys: &keys,
        ..Run::default()
    };
    assert_eq!(
        with_keys.text(&mut e, "flushslots"),
        err("DB must be empty to perform CLUSTER FLUSHSLOTS.")
    );
    assert_eq!(e.table.me().slot_count(), SLOTS);
    assert_eq!(run(&mut e, "FLUSHSLOTS"), OK);
    assert_eq!(e.table.me().slot_count(), 0);
}

// ---------------------------------------------------------------------------------
// SETSLOT

#[test]
fn setslot_migrating_importing_and_stable() {
    let mut e = engine();
    let b = add_node(&mut e, 'b', flags::MASTER, 7001);
    add_node(&mut e, 'c', flags::REPLICA, 7002);
    let (nb, nc, unknown) = (name('b'), name('c'), name('d'));
    run(&mut e, "addslots 1");
    assert_eq!(
        run(&mut e, "setslot x stable"),
        err("Invalid or out of range slot")
    );
    assert_eq!(
        run(&mut e, "setslot 16384 stable"),
        err("Invalid or out of range slot")
    );
    for bad in [
        "setslot 1 foo",
        "setslot 1 stable x",
        "setslot 1 migrating",
        "setslot 1 node a b",
    ] {
        assert_eq!(
            run(&mut e, bad),
            err("Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP"),
            "{bad}"
        );
    }
    assert_eq!(
        run(&mut e, &format!("setslot 2 migrating {nb}")),
        err("I'm not the owner of hash slot 2")
    );
    // The owner check comes before the lookup.
    assert_eq!(
        run(&mut e, &format!("setslot 2 migrating {unknown}")),
        err("I'm not the owner of hash slot 2")
    );
    assert_eq!(
        run(&mut e, &format!("setslot 1 migrating {unknown}")),
        err(&format!("I don't know about node {unknown}"))
    );
    assert_eq!(
        run(&mut e, "setslot 1 migrating xyz"),
        err("I don't know about node xyz")
    );
    assert_eq!(
        run(&mut e, &format!("setslot 1 migrating {nc}")),
        err("Target node is not a master")
    );
    assert_eq!(run(&mut e, &format!("SETSLOT 1 MIGRATING {nb}")), OK);
    assert_eq!(e.table.migrating_to(1), Some(b));
    assert!(topology_changed(&mut e));
    assert_eq!(
        run(&mut e, &format!("setslot 1 importing {nb}")),
        err("I'm already the owner of hash slot 1")
    );
    assert_eq!(
        run(&mut e, &format!("setslot 3 importing {unknown}")),
        err(&format!("I don't know about node {unknown}"))
    );
    assert_eq!(
        run(&mut e, &format!("setslot 3 importing {nc}")),
        err("Target node is not a master")
    );
    assert_eq!(run(&mut e, &format!("setslot 3 importing {nb}")), OK);
    assert_eq!(e.table.importing_from(3), Some(b));
    assert_eq!(run(&mut e, "setslot 1 stable"), OK);
    assert_eq!(run(&mut e, "setslot 3 STABLE"), OK);
    assert_eq!(
        (e.table.migrating_to(1), e.table.importing_from(3)),
        (None, None)
    );
}

#[test]
fn setslot_node_hands_a_slot_over_once_its_keys_are_gone() {
    let mut e = engine();
    let b = add_node(&mut e, 'b', flags::MASTER, 7001);
    add_node(&mut e, 'c', flags::REPLICA, 7002);
    let (nb, nc, unknown) = (name('b'), name('c'), name('d'));
    run(&mut e, "addslots 1 2");
    let slot = crate::slot::key_slot(b"k");
    run(&mut e, &format!("addslots {slot}"));
    assert_eq!(
        run(&mut e, &format!("setslot 1 node {unknown}")),
        err(&format!("Unknown node {unknown}"))
    );
    assert_eq!(
        run(&mut e, &format!("setslot 1 node {nc}")),
        err("Target node is not a master")
    );
    let keys = Keys::with(&["k"]);
    let with_keys = Run {
        keys: &keys,
        ..Run::default()
    };
    run(&mut e, &format!("setslot {slot} migrating {nb}"));
    assert_eq!(
        with_keys.text(&mut e, &format!("setslot {slot} node {nb}")),
        err(&format!(
            "Can't assign hashslot {slot} to a different node while I still hold keys for this hash slot."
        ))
    );
    assert_eq!(e.table.migrating_to(slot as usize), Some(b), "unchanged");
    // Assigning it to ourselves keeps a migration that still has keys.
    assert_eq!(
        with_keys.text(&mut e, &format!("setslot {slot} node {}", name('a'))),
        OK
    );
    assert_eq!(e.table.migrating_to(slot as usize), Some(b));
    // Without keys, the migration ends with the hand-over.
    assert_eq!(run(&mut e, &format!("setslot {slot} node {nb}")), OK);
    assert_eq!(owner(&e, slot as usize), Some(nb));
    assert_eq!(e.table.migrating_to(slot as usize), None);
    // A slot nobody serves can be given to anyone.
    assert_eq!(run(&mut e, &format!("setslot 500 node {nb}")), OK);
    assert_eq!(owner(&e, 500), Some(nb));
    assert!(e.table.me().is_master());
}

#[test]
fn giving_away_the_last_slot_makes_us_a_replica_of_its_new_owner() {
    let mut e = engine();
    let b = add_node(&mut e, 'b', flags::MASTER, 7001);
    run(&mut e, "addslots 1");
    e.take_effects();
    assert_eq!(run(&mut e, &format!("setslot 1 node {}", name('b'))), OK);
    assert!(e.table.me().is_replica());
    assert_eq!(e.table.me().master(), Some(b));
    let effects = e.take_effects();
    assert!(effects.contains(&Effect::ReplicateFrom {
        ip: "127.0.0.1".into(),
        port: 7001
    }));
    assert_eq!(
        run(&mut e, "setslot 1 stable"),
        err("Please use SETSLOT only with masters.")
    );
    // Not with cluster-allow-replica-migration off.
    let mut e = engine();
    e.settings.allow_replica_migration = false;
    add_node(&mut e, 'b', flags::MASTER, 7001);
    run(&mut e, "addslots 1");
    assert_eq!(run(&mut e, &format!("setslot 1 node {}", name('b'))), OK);
    assert!(e.table.me().is_master());
}

#[test]
fn closing_an_import_on_the_importing_node_takes_a_new_epoch() {
    let mut e = engine();
    let b = add_node(&mut e, 'b', flags::MASTER, 7001);
    e.table.get_mut(b).unwrap().config_epoch = 5;
    e.table.current_epoch = 5;
    e.table.add_slot(b, 7);
    run(&mut e, &format!("setslot 7 importing {}", name('b')));
    assert_eq!(run(&mut e, &format!("setslot 7 node {}", name('a'))), OK);
    assert_eq!(owner(&e, 7), Some(name('a')));
    assert_eq!(e.table.importing_from(7), None);
    assert_eq!(e.table.me().config_epoch, 6);
    assert_eq!(e.table.current_epoch, 6);
    // Without an import to close, no new epoch.
    run(&mut e, &format!("setslot 8 node {}", name('a')));
    assert_eq!(e.table.me().config_epoch, 6);
}

// ---------------------------------------------------------------------------------
// MEET

fn handshake_addresses(e: &Membership) -> Vec<(String, u16, u16)> {
    e.table
        .iter()
        .filter(|(_, n)| n.in_handshake())
        .map(|(_, n)| (n.ip.clone(), n.port, n.cport))
        .collect()
}

#[test]
fn meet_normalizes_the_address_and_checks_the_ports() {
    let mut e = engine();
    assert_eq!(run(&mut e, "meet 127.0.0.1 7001"), OK);
    assert_eq!(
        run(&mut e, "MEET 127.0.0.1 7001"),
        OK,
        "already in progress"
    );
    assert_eq!(run(&mut e, "meet 127.0.0.1 7002 20000"), OK);
    assert_eq!(run(&mut e, "meet 0:0:0:0:0:0:0:1 7003"), OK);
    assert_eq!(run(&mut e, "meet ::ffff:1.2.3.4 7004"), OK);
    assert_eq!(run(&mut e, "meet ::1.2.3.4 7005"), OK);
    assert_eq!(run(&mut e, "meet 1:0:0:2:0:0:0:3 7006"), OK);
    assert_eq!(run(&mut e, "meet FE80:0:0:0:0:0:0:1 7007"), OK);
    let mut seen = handshake_addresses(&e);
    seen.sort_by_key(|(_, port, _)| *port);
    let expected = [
        ("127.0.0.1", 7001, 17001),
        ("127.0.0.1", 7002, 20000),
        ("::1", 7003, 17003),
        ("::ffff:1.2.3.4", 7004, 17004),
        ("::1.2.3.4", 7005, 17005),
        ("1:0:0:2::3", 7006, 17006),
        ("fe80::1", 7007, 17007),
    ];
    let expected: Vec<(String, u16, u16)> = expected
        .iter()
        .map(|&(ip, p, c)| (ip.to_string(), p, c))
        .collect();
    assert_eq!(seen, expected);
    for (line, text) in [
        (
            "meet 01.2.3.4 7001",
            "Invalid node address specified: 01.2.3.4:7001",
        ),
        (
            "meet 1.2.3 7001",
            "Invalid node address specified: 1.2.3:7001",
        ),
        (
            "meet host 7001",
            "Invalid node address specified: host:7001",
        ),
        (
            "meet 1.2.3.4 0",
            "Invalid node address specified: 1.2.3.4:0",
        ),
        (
            "meet 1.2.3.4 -5",
            "Invalid node address specified: 1.2.3.4:-5",
        ),
        (
            "meet 1.2.3.4 65535",
            "Invalid node address specified: 1.2.3.4:65535",
        ),
        (
            "meet 1.2.3.4 1 65536",
            "Invalid node address specified: 1.2.3.4:1",
        ),
        (
            "meet 1.2.3.4 1 0",
            "Invalid node address specified: 1.2.3.4:1",
        ),
        ("meet 1.2.3.4 x", "Invalid TCP base port specified: x"),
        ("meet 1.2.3.4 +1", "Invalid TCP base port specified: +1"),
        ("meet 1.2.3.4 1 y", "Invalid TCP bus port specified: y"),
    ] {
        assert_eq!(run(&mut e, line), err(text), "{line}");
    }
    assert_eq!(handshake_addresses(&e).len(), 7);
    // A C string ends at its first NUL: Redis reads the address up to it.
    let (buf, _) = Run::default().call(&mut e, &[b"meet", b"10.0.0.1\0junk", b"7010"]);
    assert_eq!(buf, OK.as_bytes());
    let (buf, _) = Run::default().call(&mut e, &[b"meet", b"bad\r\n", b"1"]);
    assert_eq!(
        buf,
        err("Invalid node address specified: bad  :1").as_bytes()
    );
}

#[test]
fn ipv6_text_is_what_glibc_writes() {
    let cases = [
        ("::", "::"),
        ("::1", "::1"),
        ("1::", "1::"),
        ("::2:3", "::0.2.0.3"),
        ("1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:0"),
        ("0::ffff:0:1", "::ffff:0.0.0.1"),
        ("0:0:1:0:0:0:0:1", "0:0:1::1"),
        ("1:0:0:1:0:0:1:1", "1::1:0:0:1:1"),
        ("1:0:1:1:1:1:1:1", "1:0:1:1:1:1:1:1"),
        ("::0.0.0.2", "::2"),
        ("::ffff:0.0.0.0", "::ffff:0.0.0.0"),
        ("::1:ffff:1.2.3.4", "::1:ffff:102:304"),
        ("0:0:0:0:0:ffff:10.0.0.1", "::ffff:10.0.0.1"),
        ("ABCD::EF", "abcd::ef"),
    ];
    for (input, text) in cases {
        assert_eq!(
            normalize_ip(input.as_bytes()).as_deref(),
            Some(text),
            "{input}"
        );
    }
    let bad = [
        "",
        "1.2.3.4.5",
        "256.1.1.1",
        ":::",
        "1::2::3",
        "fe80::1%eth0",
        "1.2.3.04",
        "::1.2.3.04",
        "00001::1",
        "::ffff:1.2.3",
    ];
    for bad in bad {
        assert_eq!(normalize_ip(bad.as_bytes()), None, "{bad}");
    }
}

// ---------------------------------------------------------------------------------
// Nodes and roles

#[test]
fn forget_drops_the_node_and_keeps_gossip_from_bringing_it_back() {
    let mut e = engine();
    let b = add_node(&mut e, 'b', flags::MASTER, 7001);
    add_node(&mut e, 'c', flags::MASTER, 7002);
    e.table.add_slot(b, 10);
    assert_eq!(
        run(&mut e, &format!("forget {}", name('a'))),
        err("I tried hard but I can't forget myself...")
    );
    assert_eq!(
        run(&mut e, &format!("forget {}", name('d'))),
        err(&format!("Unknown node {}", name('d')))
    );
    assert_eq!(run(&mut e, "forget abc"), err("Unknown node abc"));
    // Upper case is not a node ID.
    let upper = name('b').to_string().to_uppercase();
    assert_eq!(
        run(&mut e, &format!("forget {upper}")),
        err(&format!("Unknown node {upper}"))
    );
    assert_eq!(run(&mut e, &format!("FORGET {}", name('b'))), OK);
    assert_eq!(e.table.lookup(&name('b')), None);
    assert_eq!(owner(&e, 10), None, "its slots are unassigned");
    assert!(e.table.blacklisted(&name('b'), NOW / 1000 + 59));
    assert!(!e.table.blacklisted(&name('b'), NOW / 1000 + 61));
    assert!(topology_changed(&mut e));
    // A replica may not forget its master.
    let c = e.table.lookup(&name('c')).unwrap();
    assert_eq!(run(&mut e, &format!("replicate {}", name('c'))), OK);
    assert_eq!(e.table.me().master(), Some(c));
    assert_eq!(
        run(&mut e, &format!("forget {}", name('c'))),
        err("Can't forget my master!")
    );
}

#[test]
fn unknown_node_texts_keep_the_clients_bytes_safely() {
    let mut e = engine();
    let (buf, _) = Run::default().call(&mut e, &[b"forget", b"\r\nab\r\ncd\r\n"]);
    assert_eq!(buf, err("Unknown node   ab  cd").as_bytes());
    let (buf, _) = Run::default().call(&mut e, &[b"forget", b"ab\0cd"]);
    assert_eq!(buf, err("Unknown node ab").as_bytes());
    let (buf, _) = Run::default().call(&mut e, &[b"replicas", b"\xff\xfe"]);
    assert_eq!(buf, b"-ERR Unknown node \xff\xfe\r\n");
}

#[test]
fn replicate_follows_a_master_and_says_why_not() {
    let mut e = engine();
    let b = add_node(&mut e, 'b', flags::MASTER, 7001);
    let c = add_node(&mut e, 'c', flags::REPLICA, 7002);
    e.table.add_replica(b, c);
    assert_eq!(
        run(&mut e, &format!("replicate {}", name('d'))),
        err(&format!("Unknown node {}", name('d')))
    );
    assert_eq!(
        run(&mut e, &format!("replicate {}", name('a'))),
        err("Can't replicate myself")
    );
    assert_eq!(
        run(&mut e, &format!("replicate {}", name('c'))),
        err("I can only replicate a master, not a replica.")
    );
    let keys = Keys::with(&["k"]);
    let with_keys = Run {
        keys: &keys,
        ..Run::default()
    };
    let refusal = err("To set a master the node must be empty and without assigned slots.");
    assert_eq!(
        with_keys.text(&mut e, &format!("replicate {}", name('b'))),
        refusal
    );
    run(&mut e, "addslots 1");
    assert_eq!(run(&mut e, &format!("replicate {}", name('b'))), refusal);
    run(&mut e, "delslots 1");
    assert_eq!(run(&mut e, &format!("REPLICATE {}", name('b'))), OK);
    assert!(e.table.me().is_replica());
    // A replica may switch masters, keys or not.
    let d = add_node(&mut e, 'd', flags::MASTER, 7003);
    assert_eq!(
        with_keys.text(&mut e, &format!("replicate {}", name('d'))),
        OK
    );
    assert_eq!(e.table.me().master(), Some(d));
}

#[test]
fn replicas_lists_the_lines_of_a_masters_replicas() {
    let mut e = engine();
    let b = add_node(&mut e, 'b', flags::MASTER, 7001);
    let c = add_node(&mut e, 'c', flags::REPLICA, 7002);
    e.table.add_replica(b, c);
    e.table.get_mut(b).unwrap().config_epoch = 4;
    let v = Run::default().value(&mut e, &format!("replicas {}", name('b')));
    assert_eq!(
        v,
        V::Array(vec![V::Bulk(
            format!(
                "{} 127.0.0.1:7002@17002 slave {} 0 0 4 disconnected",
                name('c'),
                name('b')
            )
            .into_bytes()
        )])
    );
    let same = Run::default().value(&mut e, &format!("SLAVES {}", name('b')));
    assert_eq!(same, v);
    assert_eq!(
        Run::default().value(&mut e, &format!("replicas {}", name('a'))),
        V::Array(vec![])
    );
    assert_eq!(
        run(&mut e, &format!("replicas {}", name('c'))),
        err("The specified node is not a master")
    );
    assert_eq!(
        run(&mut e, &format!("slaves {}", name('d'))),
        err(&format!("Unknown node {}", name('d')))
    );
    // A plaintext client of a TLS cluster sees plaintext ports.
    e.settings.tls_cluster = true;
    e.table.get_mut(c).unwrap().pport = 6002;
    let plain = Run::default().value(&mut e, &format!("replicas {}", name('b')));
    assert!(plain.items()[0].text().contains(":6002@17002"));
    let tls = Run {
        client: ClientInfo { tls: true },
        ..Run::default()
    };
    let v = tls.value(&mut e, &format!("replicas {}", name('b')));
    assert!(v.items()[0].text().contains(":7002@17002"));
}

#[test]
fn count_failure_reports_counts_the_valid_ones() {
    let mut e = engine();
    let b = add_node(&mut e, 'b', flags::MASTER, 7001);
    let c = add_node(&mut e, 'c', flags::MASTER, 7002);
    assert_eq!(
        run(&mut e, &format!("count-failure-reports {}", name('b'))),
        ":0\r\n"
    );
    e.table.add_failure_report(b, c, NOW);
    assert_eq!(
        run(&mut e, &format!("COUNT-FAILURE-REPORTS {}", name('b'))),
        ":1\r\n"
    );
    // Reports live two node timeouts.
    let later = Run {
        now: NOW + 4001,
        ..Run::default()
    };
    assert_eq!(
        later.text(&mut e, &format!("count-failure-reports {}", name('b'))),
        ":0\r\n"
    );
    assert_eq!(
        run(&mut e, "count-failure-reports x"),
        err("Unknown node x")
    );
}

#[test]
fn failover_is_for_replicas() {
    let mut e = engine();
    assert_eq!(run(&mut e, "failover x"), err("syntax error"));
    assert_eq!(
        run(&mut e, "failover"),
        err("You should send CLUSTER FAILOVER to a replica")
    );
    assert_eq!(
        run(&mut e, "failover FORCE"),
        err("You should send CLUSTER FAILOVER to a replica")
    );
    add_node(&mut e, 'b', flags::MASTER, 7001);
    run(&mut e, &format!("replicate {}", name('b')));
    // No link to the master: only the forced forms.
    assert_eq!(
        run(&mut e, "failover"),
        err("Master is down or failed, please use CLUSTER FAILOVER FORCE")
    );
    assert_eq!(run(&mut e, "failover force"), OK);
    assert_eq!(run(&mut e, "FAILOVER TAKEOVER"), OK);
    assert!(e.table.me().is_master());
}

// ---------------------------------------------------------------------------------
// RESET, SAVECONFIG, epochs

#[test]
fn reset_forgets_everything_and_hard_takes_a_new_identity() {
    let mut e = engine();
    add_node(&mut e, 'b', flags::MASTER, 7001);
    run(&mut e, "addslots 1 2");
    run(&mut e, "bumpepoch");
    assert_eq!(run(&mut e, "reset x"), err("syntax error"));
    let keys = Keys::with(&["k"]);
    let with_keys = Run {
        keys: &keys,
        ..Run::default()
    };
    assert_eq!(
        with_keys.text(&mut e, "reset"),
        err("CLUSTER RESET can't be called with master nodes containing keys")
    );
    assert_eq!(e.table.len(), 2);
    assert_eq!(run(&mut e, "RESET SOFT"), OK);
    assert_eq!(e.table.len(), 1);
    assert_eq!(e.table.me().slot_count(), 0);
    assert_eq!(e.table.me().name, name('a'));
    assert_eq!(e.table.me().config_epoch, 1, "soft keeps the epochs");
    assert!(topology_changed(&mut e));
    assert_eq!(run(&mut e, "reset hard"), OK);
    assert_ne!(e.table.me().name, name('a'));
    assert_eq!(e.table.lookup(&e.table.me().name), Some(e.table.myself()));
    assert_eq!((e.table.me().config_epoch, e.table.current_epoch), (0, 0));
}

#[test]
fn resetting_a_replica_turns_it_into_a_master_without_data() {
    let mut e = engine();
    add_node(&mut e, 'b', flags::MASTER, 7001);
    run(&mut e, &format!("replicate {}", name('b')));
    e.take_effects();
    let keys = Keys::with(&["k"]);
    let with_keys = Run {
        keys: &keys,
        ..Run::default()
    };
    let (buf, after) = with_keys.call(&mut e, &[b"reset"]);
    assert_eq!(buf, OK.as_bytes());
    assert_eq!(after, After::FlushData);
    assert!(e.table.me().is_master());
    assert_eq!(e.table.me().master(), None);
    assert!(e.take_effects().contains(&Effect::StopReplicating));
}

#[test]
fn saveconfig_leaves_the_reply_to_the_save() {
    let mut e = engine();
    let (buf, after) = Run::default().call(&mut e, &[b"SAVECONFIG"]);
    assert_eq!((buf.as_slice(), after), (&b""[..], After::SaveConfigNow));
    let mut buf = Vec::new();
    saveconfig_reply(&Ok(()), &mut ReplyWriter::new(&mut buf, Protocol::Resp2));
    assert_eq!(buf, OK.as_bytes());
    let mut buf = Vec::new();
    let failure = Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
    saveconfig_reply(&failure, &mut ReplyWriter::new(&mut buf, Protocol::Resp2));
    assert_eq!(
        buf,
        err("error saving the cluster node config: No space left on device").as_bytes()
    );
}

#[test]
fn bumpepoch_and_set_config_epoch() {
    let mut e = engine();
    assert_eq!(
        run(&mut e, "set-config-epoch x"),
        err("value is not an integer or out of range")
    );
    assert_eq!(
        run(&mut e, "set-config-epoch -1"),
        err("Invalid config epoch specified: -1")
    );
    assert_eq!(run(&mut e, "SET-CONFIG-EPOCH 7"), OK);
    assert_eq!((e.table.me().config_epoch, e.table.current_epoch), (7, 7));
    assert_eq!(
        run(&mut e, "set-config-epoch 8"),
        err("Node config epoch is already non-zero")
    );
    assert_eq!(run(&mut e, "bumpepoch"), "+STILL 7\r\n");
    let b = add_node(&mut e, 'b', flags::MASTER, 7001);
    e.table.get_mut(b).unwrap().config_epoch = 9;
    assert_eq!(run(&mut e, "BUMPEPOCH"), "+BUMPED 8\r\n");
    assert_eq!(
        run(&mut e, "bumpepoch"),
        "+BUMPED 9\r\n",
        "8 is not the greatest"
    );
    assert_eq!(run(&mut e, "bumpepoch"), "+STILL 9\r\n");
    let mut e = engine();
    assert_eq!(run(&mut e, "bumpepoch"), "+BUMPED 1\r\n");
    let mut e = engine();
    run(&mut e, "meet 127.0.0.1 7001");
    assert_eq!(
        run(&mut e, "set-config-epoch 1"),
        err("The user can assign a config epoch only when the node does not know any other node.")
    );
}

// ---------------------------------------------------------------------------------
// Keys

#[test]
fn keyslot_countkeysinslot_and_getkeysinslot() {
    let mut e = engine();
    assert_eq!(run(&mut e, "keyslot foo"), ":12182\r\n");
    assert_eq!(
        run(&mut e, "KEYSLOT {user1}:a"),
        run(&mut e, "keyslot user1")
    );
    let keys = Keys::with(&["{t}1", "{t}2", "{t}3", "other"]);
    let r = Run {
        keys: &keys,
        ..Run::default()
    };
    let slot = crate::slot::key_slot(b"t");
    assert_eq!(r.text(&mut e, &format!("countkeysinslot {slot}")), ":3\r\n");
    assert_eq!(r.text(&mut e, "countkeysinslot 0"), ":0\r\n");
    assert_eq!(r.text(&mut e, "countkeysinslot -1"), err("Invalid slot"));
    assert_eq!(r.text(&mut e, "countkeysinslot 16384"), err("Invalid slot"));
    assert_eq!(
        r.text(&mut e, "countkeysinslot x"),
        err("value is not an integer or out of range")
    );
    assert_eq!(
        r.value(&mut e, &format!("getkeysinslot {slot} 2")),
        V::Array(vec![V::Bulk(b"{t}1".to_vec()), V::Bulk(b"{t}2".to_vec())])
    );
    assert_eq!(
        r.value(&mut e, &format!("getkeysinslot {slot} 10"))
            .items()
            .len(),
        3
    );
    assert_eq!(r.text(&mut e, &format!("getkeysinslot {slot} 0")), "*0\r\n");
    for bad in [
        "getkeysinslot 1 -1",
        "getkeysinslot -1 1",
        "getkeysinslot 16384 1",
    ] {
        assert_eq!(
            r.text(&mut e, bad),
            err("Invalid slot or number of keys"),
            "{bad}"
        );
    }
    for bad in [
        "getkeysinslot x 1",
        "getkeysinslot 1 x",
        "getkeysinslot x -1",
    ] {
        assert_eq!(
            r.text(&mut e, bad),
            err("value is not an integer or out of range"),
            "{bad}"
        );
    }
}

// ---------------------------------------------------------------------------------
// INFO, MYID, NODES

#[test]
fn info_of_a_fresh_node_field_by_field() {
    let mut e = engine();
    let expected = "cluster_state:fail\r\ncluster_slots_assigned:0\r\ncluster_slots_ok:0\r\n\
        cluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:1\r\n\
        cluster_size:0\r\ncluster_current_epoch:0\r\ncluster_my_epoch:0\r\n\
        cluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\n\
        total_cluster_links_buffer_limit_exceeded:0\r\n";
    assert_eq!(
        run(&mut e, "info"),
        format!("${}\r\n{expected}\r\n", expected.len())
    );
    let resp3 = Run {
        proto: Protocol::Resp3,
        ..Run::default()
    };
    assert_eq!(
        resp3.text(&mut e, "INFO"),
        format!("={}\r\ntxt:{expected}\r\n", expected.len() + 4)
    );
}

#[test]
fn info_counts_slots_by_their_owners_health_and_messages_by_type() {
    let mut e = engine();
    let b = add_node(&mut e, 'b', flags::MASTER | flags::PFAIL, 7001);
    let c = add_node(&mut e, 'c', flags::MASTER | flags::FAIL, 7002);
    run(&mut e, "addslotsrange 0 99");
    e.table.add_slot(b, 100);
    e.table.add_slot(c, 101);
    e.table.add_slot(c, 102);
    e.table.current_epoch = 3;
    e.messages_sent[kind::PONG as usize] = 4;
    e.messages_sent[kind::PING as usize] = 2;
    e.messages_sent[kind::PUBLISHSHARD as usize] = 1;
    e.messages_received[kind::UPDATE as usize] = 5;
    let info = Run::default().value(&mut e, "info").text();
    let lines: Vec<&str> = info.lines().collect();
    assert_eq!(
        lines,
        [
            "cluster_state:fail",
            "cluster_slots_assigned:103",
            "cluster_slots_ok:100",
            "cluster_slots_pfail:1",
            "cluster_slots_fail:2",
            "cluster_known_nodes:3",
            "cluster_size:0",
            "cluster_current_epoch:3",
            "cluster_my_epoch:0",
            "cluster_stats_messages_ping_sent:2",
            "cluster_stats_messages_pong_sent:4",
            "cluster_stats_messages_publishshard_sent:1",
            "cluster_stats_messages_sent:7",
            "cluster_stats_messages_update_received:5",
            "cluster_stats_messages_received:5",
            "total_cluster_links_buffer_limit_exceeded:0",
        ]
    );
    // A replica reports its master's epoch.
    e.table.get_mut(b).unwrap().config_epoch = 2;
    run(&mut e, "delslotsrange 0 99");
    run(&mut e, &format!("replicate {}", name('b')));
    let info = Run::default().value(&mut e, "info").text();
    assert!(info.contains("\r\ncluster_my_epoch:2\r\n"), "{info}");
    // The buffer-limit counter is the I/O layer's.
    let mut buf = Vec::new();
    let stats = BusStats {
        links_buffer_limit_exceeded: 9,
        link_io: None,
    };
    let r = cluster_command(
        &mut e,
        &[b"info"],
        &Keys::default(),
        &ClientInfo::default(),
        &stats,
        NOW,
        &mut ReplyWriter::new(&mut buf, Protocol::Resp2),
    );
    assert_eq!(r, After::Nothing);
    assert!(decode(&buf)
        .text()
        .ends_with("total_cluster_links_buffer_limit_exceeded:9\r\n"));
}

#[test]
fn myid_is_the_node_name() {
    let mut e = engine();
    assert_eq!(run(&mut e, "myid"), format!("$40\r\n{}\r\n", name('a')));
}

/// A table with something of everything a node line can show.
fn varied() -> Membership {
    let mut e = engine();
    e.settings.hostname = "host-a".into();
    e.table.me_mut().hostname = "host-a".into();
    e.table.me_mut().ip = "10.0.0.1".into();
    let b = add_node(&mut e, 'b', flags::MASTER, 7001);
    let c = add_node(&mut e, 'c', flags::REPLICA, 7002);
    let d = add_node(&mut e, 'd', flags::MASTER | flags::FAIL, 7003);
    e.table.add_replica(b, c);
    e.table.get_mut(b).unwrap().config_epoch = 3;
    e.table.get_mut(b).unwrap().ping_sent = 123;
    e.table.get_mut(b).unwrap().pong_received = 456;
    e.table.get_mut(c).unwrap().pport = 6002;
    e.table.get_mut(d).unwrap().hostname = "host-d".into();
    e.meet("127.0.0.1", 7009, 17009, NOW).unwrap();
    for slot in (0..100).chain(200..300).chain([16383]) {
        e.table.add_slot(e.table.myself(), slot);
    }
    for slot in (100..200).chain(300..=16382) {
        e.table.add_slot(b, slot);
    }
    e.table.del_slot(5000);
    e.table.add_slot(d, 5000);
    e.table.set_migrating(16383, Some(b));
    e.table.set_importing(7000, Some(b));
    e
}

#[test]
fn nodes_lists_every_node_as_nodes_conf_lines_do() {
    let mut e = varied();
    let text = Run::default().value(&mut e, "nodes").text();
    // The same lines as the node table renders for nodes.conf, handshake nodes
    // included (nodes.conf leaves them out).
    let conf = e.table.to_conf(false, |id| e.connected(id));
    let mut expected = String::new();
    for line in &conf.nodes {
        nodes_conf::render_line(line, &mut expected);
        expected.push('\n');
    }
    assert_eq!(text, expected);
    assert_eq!(text.lines().count(), 5);
    assert!(text.lines().any(|l| l.contains(" handshake ")));
    let mine = text.lines().find(|l| l.contains("myself")).unwrap();
    assert_eq!(
        mine,
        format!(
            "{} 10.0.0.1:7000@17000,host-a myself,master - 0 0 0 connected 0-99 200-299 16383 [7000-<-{}] [16383->-{}]",
            name('a'),
            name('b'),
            name('b')
        )
    );
    // Plaintext ports for a plaintext client of a TLS cluster.
    e.settings.tls_cluster = true;
    let text = Run::default().value(&mut e, "nodes").text();
    let conf = e.table.to_conf(true, |id| e.connected(id));
    let mut expected = String::new();
    for line in &conf.nodes {
        nodes_conf::render_line(line, &mut expected);
        expected.push('\n');
    }
    assert_eq!(text, expected);
    assert!(text.contains(":6002@17002"));
    let resp3 = Run {
        proto: Protocol::Resp3,
        ..Run::default()
    };
    assert!(resp3
        .text(&mut e, "nodes")
        .starts_with(&format!("={}\r\ntxt:", text.len() + 4)));
}

// ---------------------------------------------------------------------------------
// SLOTS, SHARDS, LINKS

#[test]
fn slots_names_each_run_its_owner_and_available_replicas() {
    let mut e = engine();
    let b = add_node(&mut e, 'b', flags::MASTER, 7001);
    let c = add_node(&mut e, 'c', flags::REPLICA, 7002);
    let d = add_node(&mut e, 'd', flags::REPLICA, 7003);
    e.table.add_replica(b, c);
    e.table.add_replica(b, d);
    e.table.get_mut(c).unwrap().repl_offset = 10;
    e.table.get_mut(c).unwrap().hostname = "host-c".into();
    // d has no data yet: not listed.
    run(&mut e, "addslotsrange 0 9");
    for slot in 10..20 {
        e.table.add_slot(b, slot);
    }
    run(&mut e, "addslots 20");
    let (na, nb, nc) = (name('a'), name('b'), name('c'));
    let expected = format!(
        "*3\r\n\
         *3\r\n:0\r\n:9\r\n*4\r\n$0\r\n\r\n:7000\r\n$40\r\n{na}\r\n*0\r\n\
         *4\r\n:10\r\n:19\r\n*4\r\n$9\r\n127.0.0.1\r\n:7001\r\n$40\r\n{nb}\r\n*0\r\n\
         *4\r\n$9\r\n127.0.0.1\r\n:7002\r\n$40\r\n{nc}\r\n*2\r\n$8\r\nhostname\r\n$6\r\nhost-c\r\n\
         *3\r\n:20\r\n:20\r\n*4\r\n$0\r\n\r\n:7000\r\n$40\r\n{na}\r\n*0\r\n"
    );
    assert_eq!(run(&mut e, "slots"), expected);
    let resp3 = Run {
        proto: Protocol::Resp3,
        ..Run::default()
    };
    let v = resp3.value(&mut e, "slots");
    let replica = &v.items()[1].items()[3].items()[3];
    assert_eq!(
        replica,
        &V::Map(vec![(
            V::Bulk(b"hostname".to_vec()),
            V::Bulk(b"host-c".to_vec())
        )])
    );
    // A failing replica is not available either.
    e.table.get_mut(c).unwrap().flags |= flags::FAIL;
    assert_eq!(run(&mut e, "slots").matches(&nc.to_string()).count(), 0);
}

#[test]
fn slots_follows_the_preferred_endpoint_and_plaintext_ports() {
    use crate::cluster::redirect::EndpointType;
    let mut e = engine();
    let b = add_node(&mut e, 'b', flags::MASTER, 7001);
    e.table.get_mut(b).unwrap().hostname = "host-b".into();
    e.table.get_mut(b).unwrap().pport = 6001;
    e.table.add_slot(b, 0);
    e.settings.preferred_endpoint = EndpointType::Hostname;
    let node = |e: &mut Membership| Run::default().value(e, "slots").items()[0].items()[2].clone();
    assert_eq!(
        node(&mut e),
        V::Array(vec![
            V::Bulk(b"host-b".to_vec()),
            V::Int(7001),
            V::Bulk(name('b').as_bytes().to_vec()),
            V::Array(vec![
                V::Bulk(b"ip".to_vec()),
                V::Bulk(b"127.0.0.1".to_vec())
            ]),
        ])
    );
    e.table.get_mut(b).unwrap().hostname.clear();
    assert_eq!(node(&mut e).items()[0], V::Bulk(b"?".to_vec()));
    e.settings.preferred_endpoint = EndpointType::UnknownEndpoint;
    e.settings.tls_cluster = true;
    let v = node(&mut e);
    assert_eq!((&v.items()[0], &v.items()[1]), (&V::Nil, &V::Int(6001)));
    let tls = Run {
        client: ClientInfo { tls: true },
        ..Run::default()
    };
    assert_eq!(
        tls.value(&mut e, "slots").items()[0].items()[2].items()[1],
        V::Int(7001)
    );
}

#[test]
fn shards_lists_each_master_with_its_ranges_and_nodes() {
    let mut e = engine();
    let b = add_node(&mut e, 'b', flags::MASTER, 7001);
    let c = add_node(&mut e, 'c', flags::REPLICA, 7002);
    let d = add_node(&mut e, 'd', flags::MASTER | flags::FAIL, 7003);
    e.table.add_replica(b, c);
    e.table.get_mut(b).unwrap().repl_offset = 77;
    e.table.get_mut(d).unwrap().hostname = "host-d".into();
    e.meet("127.0.0.1", 7009, 17009, NOW).unwrap();
    e.set_replication(55, 0);
    run(&mut e, "addslotsrange 0 9 20 29");
    for slot in 10..20 {
        e.table.add_slot(b, slot);
    }
    let resp3 = Run {
        proto: Protocol::Resp3,
        ..Run::default()
    };
    let v = resp3.value(&mut e, "shards");
    // Masters only: the handshake node and the replica are not shards.
    assert_eq!(v.items().len(), 3);
    let shard = |who: char| {
        v.items()
            .iter()
            .find(|s| {
                s.get("nodes").unwrap().items()[0].get("id").unwrap().text()
                    == name(who).to_string()
            })
            .unwrap()
            .clone()
    };
    let ints = |v: &V| {
        v.items()
            .iter()
            .map(|i| i.text())
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(ints(shard('a').get("slots").unwrap()), "0 9 20 29");
    assert_eq!(ints(shard('b').get("slots").unwrap()), "10 19");
    assert_eq!(ints(shard('d').get("slots").unwrap()), "");
    let a_shard = shard('a');
    let me = &a_shard.get("nodes").unwrap().items()[0];
    let fields = |n: &V| match n {
        V::Map(pairs) => pairs
            .iter()
            .map(|(k, v)| format!("{}={}", k.text(), v.text()))
            .collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        fields(me),
        [
            format!("id={}", name('a')),
            "port=7000".into(),
            "ip=".into(),
            "endpoint=".into(),
            "role=master".into(),
            "replication-offset=55".into(),
            "health=online".into(),
        ]
    );
    let b_nodes = shard('b').get("nodes").unwrap().clone();
    assert_eq!(b_nodes.items().len(), 2);
    let replica = fields(&b_nodes.items()[1]);
    assert!(replica.contains(&"role=replica".to_string()));
    assert!(
        replica.contains(&"health=loading".to_string()),
        "{replica:?}"
    );
    let failing = fields(&shard('d').get("nodes").unwrap().items()[0]);
    assert!(failing.contains(&"health=fail".to_string()));
    assert!(failing.contains(&"hostname=host-d".to_string()));
    // In a TLS cluster, the plaintext port (if any) and the TLS one.
    e.settings.tls_cluster = true;
    e.table.get_mut(b).unwrap().pport = 6001;
    let v = resp3.value(&mut e, "shards");
    let b_shard = v
        .items()
        .iter()
        .find(|s| {
            s.get("slots").unwrap().items().len() == 2
                && s.get("slots").unwrap().items()[0] == V::Int(10)
        })
        .unwrap();
    let b_node = fields(&b_shard.get("nodes").unwrap().items()[0]);
    assert_eq!(&b_node[1..3], ["port=6001", "tls-port=7001"]);
    let c_node = fields(&b_shard.get("nodes").unwrap().items()[1]);
    assert_eq!(c_node[1], "tls-port=7002", "no plaintext port: none shown");
    // RESP2 flattens the maps.
    assert!(Run::default()
        .raw(&mut e, "shards")
        .starts_with(b"*3\r\n*4\r\n$5\r\nslots\r\n"));
}

/// Two engines that met and pinged each other: each has a link to and one
/// from the other.
fn linked_pair() -> (Membership, Membership) {
    let mut a = engine();
    let b = Membership::new(
        NodeTable::new(name('b'), flags::MASTER, NOW),
        settings(7001),
        2,
    );
    a.meet("127.0.0.1", 7001, 17001, NOW).unwrap();
    let mut nodes = [a, b];
    let mut wires: Vec<((usize, LinkId), (usize, LinkId))> = Vec::new();
    let mut now = NOW;
    for _ in 0..30 {
        now += 100;
        for e in nodes.iter_mut() {
            e.cron(now);
            e.before_sleep(now);
        }
        let mut moved = true;
        while moved {
            moved = false;
            for i in 0..2 {
                for effect in nodes[i].take_effects() {
                    moved = true;
                    match effect {
                        Effect::Connect { link, .. } => {
                            let accepted = nodes[1 - i].on_accept(now);
                            wires.push(((i, link), (1 - i, accepted)));
                            nodes[i].on_connected(link, now);
                        }
                        Effect::Send { link, bytes } => {
                            let peer = wires.iter().find_map(|&(x, y)| {
                                if x == (i, link) {
                                    Some(y)
                                } else if y == (i, link) {
                                    Some(x)
                                } else {
                                    None
                                }
                            });
                            if let Some((j, l)) = peer {
                                let m = wire::decode(&bytes).unwrap();
                                nodes[j].on_message(l, m, "127.0.0.1", "127.0.0.1", now);
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    let [a, b] = nodes;
    (a, b)
}

#[test]
fn links_describes_each_link_attached_to_a_node() {
    let (mut a, _b) = linked_pair();
    let links: Vec<LinkInfo> = a.links();
    assert_eq!(links.len(), 2, "{links:?}");
    let v = Run::default().value(&mut a, "links");
    let mut directions: Vec<String> = v
        .items()
        .iter()
        .map(|l| l.get("direction").unwrap().text())
        .collect();
    directions.sort();
    assert_eq!(directions, ["from", "to"]);
    for l in v.items() {
        let keys: Vec<String> = l.items().chunks(2).map(|kv| kv[0].text()).collect();
        assert_eq!(
            keys,
            [
                "direction",
                "node",
                "create-time",
                "events",
                "send-buffer-allocated",
                "send-buffer-used"
            ]
        );
        assert_eq!(l.get("node").unwrap().text(), name('b').to_string());
        assert!(l.get("create-time").unwrap().text().parse::<u64>().unwrap() > NOW);
        assert_eq!(l.get("events").unwrap().text(), "r");
    }
    // What the I/O layer knows of a link, when it says.
    let io = |_: LinkId| LinkIo {
        events: "rw",
        send_buffer_allocated: 1024,
        send_buffer_used: 10,
    };
    let stats = BusStats {
        links_buffer_limit_exceeded: 0,
        link_io: Some(&io),
    };
    let mut buf = Vec::new();
    let _ = cluster_command(
        &mut a,
        &[b"LINKS"],
        &Keys::default(),
        &ClientInfo::default(),
        &stats,
        NOW,
        &mut ReplyWriter::new(&mut buf, Protocol::Resp3),
    );
    let v = decode(&buf);
    let first = &v.items()[0];
    assert!(matches!(first, V::Map(_)));
    assert_eq!(first.get("events").unwrap().text(), "rw");
    assert_eq!(first.get("send-buffer-allocated"), Some(&V::Int(1024)));
    assert_eq!(first.get("send-buffer-used"), Some(&V::Int(10)));
    // A fresh node has none.
    assert_eq!(run(&mut engine(), "links"), "*0\r\n");
}

#[test]
fn the_engines_slot_api_checks_every_range_before_applying() {
    use crate::cluster::membership::admin::AdminError;
    let mut e = engine();
    assert_eq!(e.change_slots(false, &[(0, 9), (20, 29)]), Ok(()));
    assert_eq!(e.table.me().slot_count(), 20);
    assert_eq!(
        e.change_slots(false, &[(30, 39), (5, 5)]),
        Err(AdminError::SlotBusy(5))
    );
    assert_eq!(
        e.change_slots(false, &[(30, 39), (40, 35)]),
        Err(AdminError::BadRange(40, 35))
    );
    assert_eq!(
        e.change_slots(false, &[(30, 39), (16383, 16384)]),
        Err(AdminError::InvalidSlot)
    );
    assert_eq!(owner(&e, 30), None, "nothing applied");
    assert_eq!(
        e.change_slots(true, &[(0, 9), (10, 10)]),
        Err(AdminError::SlotUnassigned(10))
    );
    assert_eq!(e.change_slots(true, &[(0, 9)]), Ok(()));
    assert_eq!(e.table.me().slot_count(), 10);
}

#[test]
fn changes_ask_for_the_saves_and_state_updates_redis_asks_for() {
    let mut e = engine();
    add_node(&mut e, 'b', flags::MASTER, 7001);
    for (line, fsync) in [
        ("addslots 1", false),
        ("setslot 1 stable", false),
        (&*format!("forget {}", name('b')), false),
        ("set-config-epoch 3", false),
        ("reset hard", true),
        ("bumpepoch", true),
    ] {
        e.take_effects();
        assert_eq!(
            run(&mut e, line),
            if line == "bumpepoch" {
                "+BUMPED 1\r\n"
            } else {
                OK
            }
        );
        e.before_sleep(NOW);
        let saves: Vec<Effect> = e
            .take_effects()
            .into_iter()
            .filter(|x| matches!(x, Effect::SaveConfig { .. }))
            .collect();
        assert_eq!(saves, [Effect::SaveConfig { fsync }], "{line}");
    }
    // Read-only subcommands ask for nothing.
    for line in [
        "info",
        "nodes",
        "slots",
        "shards",
        "links",
        "myid",
        "keyslot a",
    ] {
        run(&mut e, line);
        e.before_sleep(NOW);
        assert_eq!(e.take_effects(), [], "{line}");
    }
}

#[test]
fn closing_an_import_tells_every_node_at_once() {
    let (mut a, _b) = linked_pair();
    let b = a.table.lookup(&name('b')).unwrap();
    a.table.add_slot(b, 7);
    run(&mut a, &format!("setslot 7 importing {}", name('b')));
    a.take_effects();
    let pongs = a.messages_sent[kind::PONG as usize];
    assert_eq!(run(&mut a, &format!("setslot 7 node {}", name('a'))), OK);
    assert_eq!(a.messages_sent[kind::PONG as usize], pongs + 1);
    let sent: Vec<Effect> = a
        .take_effects()
        .into_iter()
        .filter(|x| matches!(x, Effect::Send { .. }))
        .collect();
    assert_eq!(sent.len(), 1, "a PONG to the one other node");
}
