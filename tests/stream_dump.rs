//! DUMP / RESTORE of streams against a real redis-server 7.0 (skipped when none is
//! installed): a stream DUMPed by Tessera RESTOREs in Redis with the same XRANGE,
//! XINFO STREAM FULL and XPENDING replies, and the reverse; keys on both shards.

mod common;
use common::*;

use redis::Value;

/// Builds the same stream on any server: several nodes, tombstones, entries with and
/// without the master fields, two groups with pending entries and consumers.
fn build(c: &mut redis::Connection, key: &str) {
    q::<()>(c, &["CONFIG", "SET", "stream-node-max-entries", "3"]);
    let long = "v".repeat(80);
    let adds: [(&str, &[&str]); 9] = [
        ("1-1", &["name", "alice", "age", "30"]),
        ("1-5", &["name", "bob", "age", "41"]),
        ("2-0", &["other", "-7"]),
        ("5-3", &["name", "carol", "age", "1234567890123"]),
        ("6-0", &["name", "dave", "age", "x"]),
        ("7-1", &["k", &long]),
        ("9-9", &["name", "eve", "age", "5"]),
        ("10-0", &["name", "frank", "age", "007"]),
        ("12-0", &["123", "456"]),
    ];
    for (id, fields) in adds {
        let mut args = vec!["XADD", key, id];
        args.extend_from_slice(fields);
        q::<String>(c, &args);
    }
    q::<i64>(c, &["XDEL", key, "1-5", "6-0"]);
    q::<()>(c, &["XGROUP", "CREATE", key, "g1", "0"]);
    q::<()>(c, &["XGROUP", "CREATE", key, "g2", "5-3"]);
    q::<()>(c, &["XGROUP", "CREATE", key, "777", "$"]);
    q::<Value>(
        c,
        &[
            "XREADGROUP",
            "GROUP",
            "g1",
            "alice",
            "COUNT",
            "3",
            "STREAMS",
            key,
            ">",
        ],
    );
    q::<Value>(
        c,
        &[
            "XREADGROUP",
            "GROUP",
            "g1",
            "bob",
            "COUNT",
            "2",
            "STREAMS",
            key,
            ">",
        ],
    );
    q::<Value>(
        c,
        &["XREADGROUP", "GROUP", "g2", "carol", "STREAMS", key, ">"],
    );
    q::<i64>(c, &["XACK", key, "g1", "2-0"]);
    q::<Value>(
        c,
        &["XCLAIM", key, "g1", "bob", "0", "1-1", "RETRYCOUNT", "5"],
    );
    q::<i64>(c, &["XGROUP", "CREATECONSUMER", key, "g2", "idle"]);
    q::<()>(c, &["CONFIG", "SET", "stream-node-max-entries", "100"]);
}

/// Replies that must agree between a stream and its restored copy (delivery and seen
/// times travel in the payload). Redis's radix-tree-nodes counts inner rax nodes,
/// which Tessera only approximates.
fn views(c: &mut redis::Connection, key: &str) -> Vec<Value> {
    let mut full: Vec<Value> = q(c, &["XINFO", "STREAM", key, "FULL"]);
    if let Some(i) = full
        .iter()
        .position(|v| *v == Value::BulkString(b"radix-tree-nodes".to_vec()))
    {
        full.drain(i..i + 2);
    }
    let mut out = vec![
        q(c, &["XRANGE", key, "-", "+"]),
        Value::Array(full),
        q(c, &["XPENDING", key, "g1"]),
    ];
    for g in ["g1", "g2"] {
        let pending: Vec<Vec<Value>> = q(c, &["XPENDING", key, g, "-", "+", "10"]);
        // Idle times depend on when each server is asked: keep ID, owner, count.
        for mut p in pending {
            p.remove(2);
            out.push(Value::Array(p));
        }
    }
    out
}

fn dump(c: &mut redis::Connection, key: &str) -> Vec<u8> {
    redis::cmd("DUMP").arg(key).query(c).expect("DUMP")
}

fn restore(c: &mut redis::Connection, key: &str, payload: &[u8]) {
    let r: redis::RedisResult<()> = redis::cmd("RESTORE")
        .arg(key)
        .arg(0)
        .arg(payload)
        .arg("REPLACE")
        .query(c);
    r.expect("RESTORE");
}

#[test]
fn streams_move_between_tessera_and_redis() {
    let Some(reference) = ReferenceRedis::start() else {
        eprintln!("redis-server not installed: skipped");
        return;
    };
    let mut r = redis::Client::open(format!("redis://127.0.0.1:{}/", reference.port))
        .and_then(|c| c.get_connection())
        .expect("connect to redis-server");
    let s = Server::start(2);
    let mut c = s.client();
    for key in [KEY_SHARD0, KEY_SHARD1] {
        // Tessera -> Redis: same replies, and Redis's DUMP of it is byte-identical.
        build(&mut c, key);
        let payload = dump(&mut c, key);
        restore(&mut r, "copy", &payload);
        assert_eq!(views(&mut r, "copy"), views(&mut c, key));
        assert_eq!(dump(&mut r, "copy"), payload);

        // Redis -> Tessera, restored on the other shard's key too.
        build(&mut r, "orig");
        let payload = dump(&mut r, "orig");
        for target in [KEY_SHARD0, KEY_SHARD1] {
            restore(&mut c, target, &payload);
            assert_eq!(views(&mut c, target), views(&mut r, "orig"));
            assert_eq!(dump(&mut c, target), payload);
        }
        q::<i64>(&mut r, &["DEL", "orig", "copy"]);
        q::<i64>(&mut c, &["DEL", KEY_SHARD0, KEY_SHARD1]);
    }
}

#[test]
fn restored_streams_keep_working() {
    let s = Server::start(2);
    let mut c = s.client();
    build(&mut c, KEY_SHARD0);
    let payload = dump(&mut c, KEY_SHARD0);
    restore(&mut c, KEY_SHARD1, &payload);
    // The copy accepts new entries after the old last ID and serves its groups.
    assert!(err(&mut c, &["XADD", KEY_SHARD1, "12-0", "a", "b"]).contains("equal or smaller"));
    q::<String>(&mut c, &["XADD", KEY_SHARD1, "13-0", "a", "b"]);
    let r: Value = q(
        &mut c,
        &[
            "XREADGROUP",
            "GROUP",
            "777",
            "zed",
            "STREAMS",
            KEY_SHARD1,
            ">",
        ],
    );
    assert!(format!("{r:?}").contains("13-0"));
    assert_eq!(q::<i64>(&mut c, &["XLEN", KEY_SHARD1]), 8);
    // An empty stream (all entries deleted) with a group survives a round trip.
    q::<String>(&mut c, &["XADD", "e", "1-0", "a", "b"]);
    q::<()>(&mut c, &["XGROUP", "CREATE", "e", "g", "$"]);
    q::<i64>(&mut c, &["XDEL", "e", "1-0"]);
    let payload = dump(&mut c, "e");
    restore(&mut c, "e2", &payload);
    assert_eq!(q::<i64>(&mut c, &["XLEN", "e2"]), 0);
    assert_eq!(dump(&mut c, "e2"), payload);
}

#[test]
fn corrupt_stream_payloads_are_refused() {
    let s = Server::start(2);
    let mut c = s.client();
    build(&mut c, KEY_SHARD0);
    let payload = dump(&mut c, KEY_SHARD0);
    // A damaged body fails the checksum; a truncated one is not even a payload.
    let mut bad = payload.clone();
    bad[20] ^= 0x55;
    for p in [bad, payload[..payload.len() / 2].to_vec()] {
        let e = redis::cmd("RESTORE")
            .arg("x")
            .arg(0)
            .arg(p)
            .query::<()>(&mut c)
            .unwrap_err();
        assert!(e.to_string().contains("payload version or checksum"), "{e}");
    }
    assert_eq!(q::<i64>(&mut c, &["EXISTS", "x"]), 0);
}
