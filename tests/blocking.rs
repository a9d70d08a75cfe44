//! Black-box tests of the blocking pops against a 2-shard server: a client blocked on
//! keys of both shards is woken by a push from another client, timeouts, BLMOVE
//! across shards, fairness, CLIENT UNBLOCK, and MULTI never blocking.

mod common;
use common::*;

use std::time::{Duration, Instant};

use redis::Value;

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

#[test]
fn blpop_woken_by_push_on_either_shard() {
    let s = Server::start(2);
    let mut c = s.client();
    for target in [KEY_SHARD0, KEY_SHARD1] {
        let (_, h) = spawn_blocked(&s, &["BLPOP", KEY_SHARD0, KEY_SHARD1, "0"]);
        wait_blocked(&mut c, 1);
        let _: i64 = q(&mut c, &["RPUSH", target, "v"]);
        let got = h.join().unwrap().unwrap();
        assert_eq!(got, Value::Array(vec![bulk(target), bulk("v")]));
        wait_blocked(&mut c, 0);
    }
    // Served at once when a key already holds elements: the first non-empty key wins.
    let _: i64 = q(&mut c, &["RPUSH", KEY_SHARD1, "a", "b"]);
    let v: Vec<String> = q(&mut c, &["BRPOP", KEY_SHARD0, KEY_SHARD1, "1"]);
    assert_eq!(v, vec![KEY_SHARD1.to_string(), "b".into()]);
}

#[test]
fn timeouts_and_argument_errors() {
    let s = Server::start(2);
    let mut c = s.client();
    let start = Instant::now();
    let v: Value = q(&mut c, &["BLPOP", KEY_SHARD0, KEY_SHARD1, "0.2"]);
    assert_eq!(v, Value::Nil);
    assert!(start.elapsed() >= Duration::from_millis(150));
    let v: Value = q(&mut c, &["BZPOPMIN", KEY_SHARD0, "0.05"]);
    assert_eq!(v, Value::Nil);
    for (t, msg) in [
        ("-1", "timeout is negative"),
        ("x", "timeout is not a float"),
    ] {
        let e = redis::cmd("BLPOP")
            .arg("k")
            .arg(t)
            .query::<Value>(&mut c)
            .unwrap_err();
        assert!(e.to_string().contains(msg), "{e}");
    }
    let _: () = q(&mut c, &["SET", KEY_SHARD1, "str"]);
    let e = redis::cmd("BLPOP")
        .arg(KEY_SHARD0)
        .arg(KEY_SHARD1)
        .arg(0)
        .query::<Value>(&mut c)
        .unwrap_err();
    assert_eq!(e.code(), Some("WRONGTYPE"));
}

#[test]
fn blmove_across_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    let (_, h) = spawn_blocked(
        &s,
        &["BLMOVE", KEY_SHARD0, KEY_SHARD1, "LEFT", "RIGHT", "0"],
    );
    wait_blocked(&mut c, 1);
    let _: i64 = q(&mut c, &["RPUSH", KEY_SHARD0, "x"]);
    assert_eq!(h.join().unwrap().unwrap(), bulk("x"));
    let l: Vec<String> = q(&mut c, &["LRANGE", KEY_SHARD1, "0", "-1"]);
    assert_eq!(l, vec!["x"]);
    let n: i64 = q(&mut c, &["EXISTS", KEY_SHARD0]);
    assert_eq!(n, 0);
    let v: Value = q(&mut c, &["BRPOPLPUSH", KEY_SHARD0, KEY_SHARD1, "0.05"]);
    assert_eq!(v, Value::Nil);
}

#[test]
fn longest_blocked_client_is_served_first() {
    let s = Server::start(2);
    let mut c = s.client();
    let (_, first) = spawn_blocked(&s, &["BLPOP", KEY_SHARD1, "0"]);
    wait_blocked(&mut c, 1);
    let (_, second) = spawn_blocked(&s, &["BLPOP", KEY_SHARD1, "0"]);
    wait_blocked(&mut c, 2);
    let _: i64 = q(&mut c, &["RPUSH", KEY_SHARD1, "1"]);
    let got = first.join().unwrap().unwrap();
    assert_eq!(got, Value::Array(vec![bulk(KEY_SHARD1), bulk("1")]));
    wait_blocked(&mut c, 1);
    let _: i64 = q(&mut c, &["RPUSH", KEY_SHARD1, "2"]);
    let got = second.join().unwrap().unwrap();
    assert_eq!(got, Value::Array(vec![bulk(KEY_SHARD1), bulk("2")]));
}

#[test]
fn sorted_set_pops() {
    let s = Server::start(2);
    let mut c = s.client();
    let (_, h) = spawn_blocked(
        &s,
        &[
            "BZMPOP", "0", "2", KEY_SHARD0, KEY_SHARD1, "MAX", "COUNT", "5",
        ],
    );
    wait_blocked(&mut c, 1);
    let _: i64 = q(&mut c, &["ZADD", KEY_SHARD1, "1", "a", "2", "b"]);
    let got = h.join().unwrap().unwrap();
    let pair = |m: &str, s: &str| Value::Array(vec![bulk(m), bulk(s)]);
    assert_eq!(
        got,
        Value::Array(vec![
            bulk(KEY_SHARD1),
            Value::Array(vec![pair("b", "2"), pair("a", "1")])
        ])
    );
    let _: i64 = q(&mut c, &["ZADD", KEY_SHARD0, "3", "m"]);
    let v: Vec<String> = q(&mut c, &["BZPOPMIN", KEY_SHARD1, KEY_SHARD0, "0"]);
    assert_eq!(v, vec![KEY_SHARD0.to_string(), "m".into(), "3".into()]);
}

#[test]
fn client_unblock_and_disconnect() {
    let s = Server::start(2);
    let mut c = s.client();
    let (id, h) = spawn_blocked(&s, &["BLPOP", KEY_SHARD0, KEY_SHARD1, "0"]);
    wait_blocked(&mut c, 1);
    let n: i64 = q(&mut c, &["CLIENT", "UNBLOCK", &id.to_string(), "ERROR"]);
    assert_eq!(n, 1);
    let e = h.join().unwrap().unwrap_err();
    assert_eq!(e.code(), Some("UNBLOCKED"));
    let n: i64 = q(&mut c, &["CLIENT", "UNBLOCK", &id.to_string()]);
    assert_eq!(n, 0);

    let (id, h) = spawn_blocked(&s, &["BLPOP", KEY_SHARD0, "0"]);
    wait_blocked(&mut c, 1);
    let n: i64 = q(&mut c, &["CLIENT", "UNBLOCK", &id.to_string(), "TIMEOUT"]);
    assert_eq!(n, 1);
    assert_eq!(h.join().unwrap().unwrap(), Value::Nil);

    // A blocked client that disconnects leaves no waiter to swallow a push.
    let mut raw = s.raw();
    use std::io::Write;
    raw.write_all(b"*3\r\n$5\r\nBLPOP\r\n$3\r\nbar\r\n$1\r\n0\r\n")
        .unwrap();
    wait_blocked(&mut c, 1);
    drop(raw);
    wait_blocked(&mut c, 0);
    let _: i64 = q(&mut c, &["RPUSH", KEY_SHARD0, "kept"]);
    let l: Vec<String> = q(&mut c, &["LRANGE", KEY_SHARD0, "0", "-1"]);
    assert_eq!(l, vec!["kept"]);
}

#[test]
fn multi_never_blocks() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = q(&mut c, &["MULTI"]);
    let _: String = q(&mut c, &["BLPOP", KEY_SHARD0, KEY_SHARD1, "0"]);
    let _: String = q(
        &mut c,
        &["BLMOVE", KEY_SHARD0, KEY_SHARD1, "LEFT", "LEFT", "0"],
    );
    let v: Value = q(&mut c, &["EXEC"]);
    assert_eq!(v, Value::Array(vec![Value::Nil, Value::Nil]));
}

/// Redis serves blocked clients right after the command that fed their key, before
/// its reply: once RPUSH returns, a chain of BLMOVEs (and a circle of BRPOPLPUSHes)
/// has run to the end. Both shards' keys are tried.
#[test]
fn chained_moves_finish_before_the_push_replies() {
    let s = Server::start(2);
    let mut c = s.client();
    for tag in ["{a}", "{b}", "{c}", "{d}"] {
        let (l1, l2, l3) = (format!("l1{tag}"), format!("l2{tag}"), format!("l3{tag}"));
        let (_, h1) = spawn_blocked(&s, &["BLMOVE", &l1, &l2, "RIGHT", "LEFT", "0"]);
        wait_blocked(&mut c, 1);
        let (_, h2) = spawn_blocked(&s, &["BLMOVE", &l2, &l3, "LEFT", "RIGHT", "0"]);
        wait_blocked(&mut c, 2);
        let _: i64 = q(&mut c, &["RPUSH", &l1, "foo"]);
        let empty: Vec<String> = Vec::new();
        assert_eq!(q::<Vec<String>>(&mut c, &["LRANGE", &l1, "0", "-1"]), empty);
        assert_eq!(q::<Vec<String>>(&mut c, &["LRANGE", &l2, "0", "-1"]), empty);
        assert_eq!(
            q::<Vec<String>>(&mut c, &["LRANGE", &l3, "0", "-1"]),
            ["foo"]
        );
        assert_eq!(h1.join().unwrap().unwrap(), bulk("foo"));
        assert_eq!(h2.join().unwrap().unwrap(), bulk("foo"));

        let (_, h1) = spawn_blocked(&s, &["BRPOPLPUSH", &l1, &l2, "0"]);
        wait_blocked(&mut c, 1);
        let (_, h2) = spawn_blocked(&s, &["BRPOPLPUSH", &l2, &l1, "0"]);
        wait_blocked(&mut c, 2);
        let _: i64 = q(&mut c, &["DEL", &l3]);
        let _: i64 = q(&mut c, &["RPUSH", &l1, "bar"]);
        assert_eq!(
            q::<Vec<String>>(&mut c, &["LRANGE", &l1, "0", "-1"]),
            ["bar"]
        );
        assert_eq!(q::<Vec<String>>(&mut c, &["LRANGE", &l2, "0", "-1"]), empty);
        assert_eq!(h1.join().unwrap().unwrap(), bulk("bar"));
        assert_eq!(h2.join().unwrap().unwrap(), bulk("bar"));
        let _: i64 = q(&mut c, &["DEL", &l1]);
    }
}
