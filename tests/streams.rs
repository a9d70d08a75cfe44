//! Black-box tests of the stream commands against a 2-shard server: XADD / XRANGE /
//! trimming on keys of both shards, consumer groups, XREAD over keys of both shards
//! (blocking, woken by an XADD from another client on either shard), XREADGROUP
//! BLOCK, CLIENT UNBLOCK, MULTI never blocking, and COPY / RENAME of streams.

mod common;
use common::*;

use std::time::{Duration, Instant};

use redis::Value;

type Entry = (String, Vec<String>);

#[test]
fn add_range_trim_on_both_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    for key in [KEY_SHARD0, KEY_SHARD1] {
        for i in 1..=10 {
            let id: String = q(
                &mut c,
                &["XADD", key, &format!("{i}-0"), "n", &i.to_string()],
            );
            assert_eq!(id, format!("{i}-0"));
        }
        let id: String = q(&mut c, &["XADD", key, "10-*", "n", "x"]);
        assert_eq!(id, "10-1");
        assert!(err(&mut c, &["XADD", key, "5-0", "a", "b"]).contains("equal or smaller"));
        assert!(err(&mut c, &["XADD", key, "0-0", "a", "b"]).contains("greater than 0-0"));
        assert_eq!(q::<i64>(&mut c, &["XLEN", key]), 11);
        let r: Vec<Entry> = q(&mut c, &["XRANGE", key, "(3-0", "5", "COUNT", "5"]);
        let ids: Vec<&str> = r.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(ids, ["4-0", "5-0"]);
        assert_eq!(r[0].1, ["n", "4"]);
        let r: Vec<Entry> = q(&mut c, &["XREVRANGE", key, "+", "-", "COUNT", "2"]);
        assert_eq!(r[0].0, "10-1");
        assert_eq!(q::<i64>(&mut c, &["XDEL", key, "2-0", "99-0"]), 1);
        assert_eq!(q::<i64>(&mut c, &["XTRIM", key, "MINID", "4"]), 2);
        assert_eq!(q::<i64>(&mut c, &["XTRIM", key, "MAXLEN", "=", "3"]), 5);
        let r: Vec<Entry> = q(&mut c, &["XRANGE", key, "-", "+"]);
        assert_eq!(r.len(), 3);
        assert_eq!(q::<String>(&mut c, &["TYPE", key]), "stream");
        assert_eq!(q::<String>(&mut c, &["OBJECT", "ENCODING", key]), "stream");
    }
    let none: Value = q(&mut c, &["XADD", "nokey", "NOMKSTREAM", "*", "a", "b"]);
    assert_eq!(none, Value::Nil);
    assert_eq!(q::<i64>(&mut c, &["EXISTS", "nokey"]), 0);
    q::<()>(&mut c, &["SET", "str", "x"]);
    assert!(err(&mut c, &["XADD", "str", "*", "a", "b"]).starts_with("WRONGTYPE"));
}

#[test]
fn consumer_groups_pending_and_claims() {
    let s = Server::start(2);
    let mut c = s.client();
    for key in [KEY_SHARD0, KEY_SHARD1] {
        q::<()>(&mut c, &["XGROUP", "CREATE", key, "g", "$", "MKSTREAM"]);
        assert!(err(&mut c, &["XGROUP", "CREATE", key, "g", "$"]).starts_with("BUSYGROUP"));
        for i in 1..=3 {
            q::<String>(&mut c, &["XADD", key, &format!("{i}-0"), "f", "v"]);
        }
        let r: Vec<(String, Vec<Entry>)> = q(
            &mut c,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "alice",
                "COUNT",
                "2",
                "STREAMS",
                key,
                ">",
            ],
        );
        assert_eq!(r[0].0, key);
        assert_eq!(r[0].1.len(), 2);
        let summary: (i64, String, String, Vec<(String, String)>) =
            q(&mut c, &["XPENDING", key, "g"]);
        assert_eq!(summary.0, 2);
        assert_eq!(summary.3, [("alice".to_string(), "2".to_string())]);
        let claimed: Vec<String> = q(&mut c, &["XCLAIM", key, "g", "bob", "0", "1-0", "JUSTID"]);
        assert_eq!(claimed, ["1-0"]);
        let (cursor, got, deleted): (String, Vec<Entry>, Vec<String>) =
            q(&mut c, &["XAUTOCLAIM", key, "g", "carol", "0", "0-0"]);
        assert_eq!((cursor.as_str(), got.len(), deleted.len()), ("0-0", 2, 0));
        assert_eq!(
            q::<i64>(&mut c, &["XACK", key, "g", "1-0", "2-0", "3-0"]),
            2
        );
        let info: Vec<Value> = q(&mut c, &["XINFO", "GROUPS", key]);
        assert_eq!(info.len(), 1);
        assert_eq!(
            q::<i64>(&mut c, &["XGROUP", "DELCONSUMER", key, "g", "alice"]),
            0
        );
        assert_eq!(q::<i64>(&mut c, &["XGROUP", "DESTROY", key, "g"]), 1);
    }
    assert!(err(&mut c, &["XGROUP", "HELP", "x"]).contains("'xgroup|help'"));
}

#[test]
fn xread_over_both_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    q::<String>(&mut c, &["XADD", KEY_SHARD0, "1-0", "a", "0"]);
    q::<String>(&mut c, &["XADD", KEY_SHARD1, "1-0", "a", "1"]);
    let r: Vec<(String, Vec<Entry>)> = q(
        &mut c,
        &[
            "XREAD", "COUNT", "5", "STREAMS", KEY_SHARD0, KEY_SHARD1, "0", "0",
        ],
    );
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].0, KEY_SHARD0);
    assert_eq!(r[1].1[0].1, ["a", "1"]);
    let none: Value = q(
        &mut c,
        &["XREAD", "STREAMS", KEY_SHARD0, KEY_SHARD1, "$", "$"],
    );
    assert_eq!(none, Value::Nil);
}

#[test]
fn xread_block_woken_by_xadd_on_either_shard() {
    let s = Server::start(2);
    let mut c = s.client();
    for target in [KEY_SHARD0, KEY_SHARD1] {
        let (_, h) = spawn_blocked(
            &s,
            &[
                "XREAD", "BLOCK", "0", "STREAMS", KEY_SHARD0, KEY_SHARD1, "$", "$",
            ],
        );
        wait_blocked(&mut c, 1);
        let id: String = q(&mut c, &["XADD", target, "*", "k", target]);
        let v = h.join().unwrap().unwrap();
        let r: Vec<(String, Vec<Entry>)> = redis::from_redis_value(&v).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].0, target);
        assert_eq!(r[0].1, [(id, vec!["k".to_string(), target.to_string()])]);
    }
}

#[test]
fn xread_block_times_out_and_unblocks() {
    let s = Server::start(2);
    let mut c = s.client();
    let t = Instant::now();
    let v: Value = q(
        &mut c,
        &[
            "XREAD", "BLOCK", "100", "STREAMS", KEY_SHARD0, KEY_SHARD1, "$", "$",
        ],
    );
    assert_eq!(v, Value::Nil);
    assert!(t.elapsed() >= Duration::from_millis(90));
    let (id, h) = spawn_blocked(&s, &["XREAD", "BLOCK", "0", "STREAMS", KEY_SHARD1, "$"]);
    wait_blocked(&mut c, 1);
    let n: i64 = q(&mut c, &["CLIENT", "UNBLOCK", &id.to_string(), "ERROR"]);
    assert_eq!(n, 1);
    let e = h.join().unwrap().unwrap_err();
    assert!(e.to_string().contains("UNBLOCKED"), "{e}");
    // Inside MULTI nothing blocks.
    q::<()>(&mut c, &["MULTI"]);
    q::<()>(&mut c, &["XREAD", "BLOCK", "0", "STREAMS", KEY_SHARD0, "$"]);
    let r: Vec<Value> = q(&mut c, &["EXEC"]);
    assert_eq!(r, [Value::Nil]);
}

#[test]
fn xreadgroup_block_and_group_destroy() {
    let s = Server::start(2);
    let mut c = s.client();
    for key in [KEY_SHARD0, KEY_SHARD1] {
        q::<()>(&mut c, &["XGROUP", "CREATE", key, "g", "$", "MKSTREAM"]);
    }
    let (_, h) = spawn_blocked(
        &s,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "alice",
            "BLOCK",
            "0",
            "STREAMS",
            KEY_SHARD0,
            KEY_SHARD1,
            ">",
            ">",
        ],
    );
    wait_blocked(&mut c, 1);
    q::<String>(&mut c, &["XADD", KEY_SHARD1, "5-0", "f", "v"]);
    let v = h.join().unwrap().unwrap();
    let r: Vec<(String, Vec<Entry>)> = redis::from_redis_value(&v).unwrap();
    assert_eq!(r[0].0, KEY_SHARD1);
    let pending: Vec<(String, String, i64, i64)> =
        q(&mut c, &["XPENDING", KEY_SHARD1, "g", "-", "+", "10"]);
    assert_eq!(pending[0].0, "5-0");
    assert_eq!(pending[0].1, "alice");

    let (_, h) = spawn_blocked(
        &s,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "bob",
            "BLOCK",
            "0",
            "STREAMS",
            KEY_SHARD0,
            ">",
        ],
    );
    wait_blocked(&mut c, 1);
    assert_eq!(q::<i64>(&mut c, &["XGROUP", "DESTROY", KEY_SHARD0, "g"]), 1);
    let e = h.join().unwrap().unwrap_err();
    assert!(e.to_string().contains("NOGROUP"), "{e}");
}

#[test]
fn copy_and_rename_streams_across_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    q::<String>(&mut c, &["XADD", KEY_SHARD0, "1-0", "a", "b"]);
    q::<()>(&mut c, &["XGROUP", "CREATE", KEY_SHARD0, "g", "0"]);
    q::<Value>(
        &mut c,
        &["XREADGROUP", "GROUP", "g", "c", "STREAMS", KEY_SHARD0, ">"],
    );
    assert_eq!(q::<i64>(&mut c, &["COPY", KEY_SHARD0, KEY_SHARD1]), 1);
    let a: Value = q(&mut c, &["XINFO", "STREAM", KEY_SHARD0, "FULL"]);
    let b: Value = q(&mut c, &["XINFO", "STREAM", KEY_SHARD1, "FULL"]);
    assert_eq!(a, b);
    q::<()>(&mut c, &["RENAME", KEY_SHARD1, "other"]);
    let r: Vec<Entry> = q(&mut c, &["XRANGE", "other", "-", "+"]);
    assert_eq!(
        r,
        [("1-0".to_string(), vec!["a".to_string(), "b".to_string()])]
    );
}

/// XREAD's `+` ID (Redis 7.4): each stream's last entry at once, on both shards in one
/// call; a missing key reads from 0-0 (so BLOCK waits for its first entry); an empty
/// stream whose last ID is 0-0 is an error; XREADGROUP refuses `+`.
#[test]
fn xread_plus_reads_the_last_entry() {
    let s = Server::start(2);
    let mut c = s.client();
    for key in [KEY_SHARD0, KEY_SHARD1] {
        for i in 1..=3 {
            q::<String>(
                &mut c,
                &["XADD", key, &format!("{i}-0"), "n", &i.to_string()],
            );
        }
    }
    let r: Vec<(String, Vec<Entry>)> = q(
        &mut c,
        &["XREAD", "STREAMS", KEY_SHARD0, KEY_SHARD1, "+", "+"],
    );
    assert_eq!(r.len(), 2);
    for (key, (name, entries)) in [KEY_SHARD0, KEY_SHARD1].iter().zip(&r) {
        assert_eq!(name, key);
        assert_eq!(entries.len(), 1);
        assert_eq!(
            entries[0],
            ("3-0".to_string(), vec!["n".into(), "3".into()])
        );
    }
    // Deleting the last entry leaves nothing after "last ID - 1": nil at once.
    q::<i64>(&mut c, &["XDEL", KEY_SHARD0, "3-0"]);
    assert_eq!(
        q::<Value>(&mut c, &["XREAD", "STREAMS", KEY_SHARD0, "+"]),
        Value::Nil
    );
    q::<String>(&mut c, &["XGROUP", "CREATE", "empty", "g", "$", "MKSTREAM"]);
    assert!(err(&mut c, &["XREAD", "STREAMS", "empty", "+"])
        .contains("the stream last element ID is 0-0"));
    assert!(err(
        &mut c,
        &["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "empty", "+"]
    )
    .contains("The + ID is meaningless in the context of XREADGROUP"));
    // A missing key: from 0-0, so a blocked read takes the first entry added.
    let url = s.url();
    let reader = std::thread::spawn(move || {
        let mut c = redis::Client::open(url)
            .expect("client")
            .get_connection()
            .expect("connect");
        q::<Vec<(String, Vec<Entry>)>>(&mut c, &["XREAD", "BLOCK", "5000", "STREAMS", "fresh", "+"])
    });
    wait_blocked(&mut c, 1);
    q::<String>(&mut c, &["XADD", "fresh", "7-0", "f", "v"]);
    let got = reader.join().expect("reader");
    assert_eq!(got[0].1[0].0, "7-0");
}
