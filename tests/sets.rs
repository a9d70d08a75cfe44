//! Set commands over TCP against a real 2-shard server: single-key semantics and
//! encodings, the set algebra with keys on one shard and on both, SMOVE across shards
//! (atomic under concurrent clients), SSCAN's guarantee, RESP3 reply types and
//! DUMP/RESTORE.

mod common;
use common::*;

use std::collections::BTreeSet;
use std::io::Write;

use redis::{Connection, RedisResult, Value};

// "bar" lives on shard 0 and "foo" on shard 1; `{bar}x` shares bar's slot.
const A0: &str = "{bar}a";
const B0: &str = "{bar}b";
const D0: &str = "{bar}dst";
const A1: &str = "{foo}a";
const D1: &str = "{foo}dst";

fn sadd(c: &mut Connection, key: &str, members: &[&str]) -> i64 {
    redis::cmd("SADD").arg(key).arg(members).query(c).unwrap()
}

fn members(c: &mut Connection, key: &str) -> BTreeSet<String> {
    redis::cmd("SMEMBERS").arg(key).query(c).unwrap()
}

fn set_of(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn encoding(c: &mut Connection, key: &str) -> String {
    redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(key)
        .query(c)
        .unwrap()
}

fn err_of<T: redis::FromRedisValue + std::fmt::Debug>(r: RedisResult<T>) -> String {
    let e = r.expect_err("expected an error");
    format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
        .trim()
        .to_string()
}

#[test]
fn membership_and_encodings() {
    let s = Server::start(2);
    let mut c = s.client();
    for key in [KEY_SHARD0, KEY_SHARD1] {
        assert_eq!(sadd(&mut c, key, &["3", "1", "2", "2"]), 3);
        assert_eq!(encoding(&mut c, key), "intset");
        let v: Vec<String> = redis::cmd("SMEMBERS").arg(key).query(&mut c).unwrap();
        assert_eq!(v, ["1", "2", "3"], "intsets iterate in order");
        assert_eq!(sadd(&mut c, key, &["a"]), 1);
        assert_eq!(encoding(&mut c, key), "hashtable");
        let card: i64 = redis::cmd("SCARD").arg(key).query(&mut c).unwrap();
        assert_eq!(card, 4);
        let is: i64 = redis::cmd("SISMEMBER")
            .arg(key)
            .arg("a")
            .query(&mut c)
            .unwrap();
        assert_eq!(is, 1);
        let mis: Vec<i64> = redis::cmd("SMISMEMBER")
            .arg(key)
            .arg("1")
            .arg("z")
            .arg("a")
            .query(&mut c)
            .unwrap();
        assert_eq!(mis, [1, 0, 1]);
        let removed: i64 = redis::cmd("SREM")
            .arg(key)
            .arg(&["1", "2", "3", "a", "x"])
            .query(&mut c)
            .unwrap();
        assert_eq!(removed, 4);
        let exists: i64 = redis::cmd("EXISTS").arg(key).query(&mut c).unwrap();
        assert_eq!(exists, 0, "an emptied set is deleted");
    }
    // Non-canonical integers and out-of-range numbers are strings.
    sadd(&mut c, "n1", &["01"]);
    sadd(&mut c, "n2", &["9223372036854775808"]);
    sadd(&mut c, "n3", &["-9223372036854775808"]);
    assert_eq!(encoding(&mut c, "n1"), "hashtable");
    assert_eq!(encoding(&mut c, "n2"), "hashtable");
    assert_eq!(encoding(&mut c, "n3"), "intset");
    // The intset limit follows CONFIG SET.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("set-max-intset-entries")
        .arg("4")
        .query(&mut c)
        .unwrap();
    sadd(&mut c, "lim", &["1", "2", "3", "4"]);
    assert_eq!(encoding(&mut c, "lim"), "intset");
    sadd(&mut c, "lim", &["5"]);
    assert_eq!(encoding(&mut c, "lim"), "hashtable");
    // Wrong types.
    let _: () = redis::cmd("SET").arg("str").arg("x").query(&mut c).unwrap();
    for cmd in ["SADD", "SREM", "SISMEMBER", "SMISMEMBER"] {
        let e = err_of(redis::cmd(cmd).arg("str").arg("a").query::<Value>(&mut c));
        assert!(e.starts_with("WRONGTYPE"), "{cmd}: {e}");
    }
    for cmd in ["SCARD", "SMEMBERS", "SPOP", "SRANDMEMBER"] {
        let e = err_of(redis::cmd(cmd).arg("str").query::<Value>(&mut c));
        assert!(e.starts_with("WRONGTYPE"), "{cmd}: {e}");
    }
}

#[test]
fn random_members_and_pop() {
    let s = Server::start(2);
    let mut c = s.client();
    let all: Vec<String> = (0..50).map(|i| format!("m{i}")).collect();
    let refs: Vec<&str> = all.iter().map(|s| s.as_str()).collect();
    sadd(&mut c, KEY_SHARD1, &refs);
    let everything = set_of(&refs);
    for count in [1, 5, 20, 40, 49] {
        let v: Vec<String> = redis::cmd("SRANDMEMBER")
            .arg(KEY_SHARD1)
            .arg(count)
            .query(&mut c)
            .unwrap();
        let distinct: BTreeSet<String> = v.iter().cloned().collect();
        assert_eq!(v.len(), count);
        assert_eq!(distinct.len(), count, "positive count: distinct members");
        assert!(distinct.is_subset(&everything));
    }
    let v: Vec<String> = redis::cmd("SRANDMEMBER")
        .arg(KEY_SHARD1)
        .arg(100)
        .query(&mut c)
        .unwrap();
    assert_eq!(v.iter().cloned().collect::<BTreeSet<_>>(), everything);
    let v: Vec<String> = redis::cmd("SRANDMEMBER")
        .arg(KEY_SHARD1)
        .arg(-200)
        .query(&mut c)
        .unwrap();
    assert_eq!(
        v.len(),
        200,
        "negative count: that many draws, repeats allowed"
    );
    assert!(v.iter().all(|m| everything.contains(m)));
    let e = err_of(
        redis::cmd("SRANDMEMBER")
            .arg(KEY_SHARD1)
            .arg(i64::MIN)
            .query::<Value>(&mut c),
    );
    assert!(e.contains("value is out of range"), "{e}");

    // SPOP with counts takes everything exactly once.
    let mut popped = BTreeSet::new();
    for n in [11, 9, 0, 4, 1, 0, 30] {
        let v: Vec<String> = redis::cmd("SPOP")
            .arg(KEY_SHARD1)
            .arg(n)
            .query(&mut c)
            .unwrap();
        assert!(v.len() <= n);
        for m in v {
            assert!(popped.insert(m), "popped twice");
        }
    }
    assert_eq!(popped, everything);
    let exists: i64 = redis::cmd("EXISTS").arg(KEY_SHARD1).query(&mut c).unwrap();
    assert_eq!(exists, 0);
    let e = err_of(
        redis::cmd("SPOP")
            .arg(KEY_SHARD1)
            .arg(-1)
            .query::<Value>(&mut c),
    );
    assert_eq!(e, "ERR value is out of range, must be positive");
    let none: Option<String> = redis::cmd("SPOP").arg(KEY_SHARD1).query(&mut c).unwrap();
    assert_eq!(none, None);
    sadd(&mut c, KEY_SHARD0, &["1", "2", "3"]);
    let mut seen = BTreeSet::new();
    while let Some(m) = redis::cmd("SPOP")
        .arg(KEY_SHARD0)
        .query::<Option<String>>(&mut c)
        .unwrap()
    {
        seen.insert(m);
    }
    assert_eq!(seen, set_of(&["1", "2", "3"]));
}

/// Runs the same algebra with all keys on one shard and with keys spread over both.
#[test]
fn algebra_on_one_shard_and_across() {
    let s = Server::start(2);
    let mut c = s.client();
    for (a, b, dst) in [(A0, B0, D0), (A0, A1, D0), (A0, A1, D1)] {
        let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
        sadd(&mut c, a, &["1", "2", "3", "x"]);
        sadd(&mut c, b, &["3", "4", "x", "y"]);
        let inter: BTreeSet<String> = redis::cmd("SINTER").arg(a).arg(b).query(&mut c).unwrap();
        assert_eq!(inter, set_of(&["3", "x"]));
        let union: BTreeSet<String> = redis::cmd("SUNION")
            .arg(a)
            .arg(b)
            .arg("{foo}none")
            .query(&mut c)
            .unwrap();
        assert_eq!(union, set_of(&["1", "2", "3", "4", "x", "y"]));
        let diff: BTreeSet<String> = redis::cmd("SDIFF").arg(a).arg(b).query(&mut c).unwrap();
        assert_eq!(diff, set_of(&["1", "2"]));
        let same: BTreeSet<String> = redis::cmd("SINTER")
            .arg(a)
            .arg(a)
            .arg(b)
            .query(&mut c)
            .unwrap();
        assert_eq!(same, set_of(&["3", "x"]));
        let card: i64 = redis::cmd("SINTERCARD")
            .arg(2)
            .arg(a)
            .arg(b)
            .query(&mut c)
            .unwrap();
        assert_eq!(card, 2);
        let card: i64 = redis::cmd("SINTERCARD")
            .arg(2)
            .arg(a)
            .arg(b)
            .arg("LIMIT")
            .arg(1)
            .query(&mut c)
            .unwrap();
        assert_eq!(card, 1);

        let n: i64 = redis::cmd("SDIFFSTORE")
            .arg(dst)
            .arg(a)
            .arg(b)
            .query(&mut c)
            .unwrap();
        assert_eq!(n, 2);
        assert_eq!(members(&mut c, dst), set_of(&["1", "2"]));
        assert_eq!(
            encoding(&mut c, dst),
            "intset",
            "an all-integer result is an intset"
        );
        let n: i64 = redis::cmd("SUNIONSTORE")
            .arg(dst)
            .arg(a)
            .arg(b)
            .query(&mut c)
            .unwrap();
        assert_eq!(n, 6);
        assert_eq!(encoding(&mut c, dst), "hashtable");
        let n: i64 = redis::cmd("SINTERSTORE")
            .arg(dst)
            .arg(a)
            .arg(b)
            .query(&mut c)
            .unwrap();
        assert_eq!(n, 2);
        assert_eq!(members(&mut c, dst), set_of(&["3", "x"]));
        // The destination may be a source, and a TTL on it is dropped.
        let _: i64 = redis::cmd("EXPIRE")
            .arg(dst)
            .arg(100)
            .query(&mut c)
            .unwrap();
        let n: i64 = redis::cmd("SUNIONSTORE")
            .arg(dst)
            .arg(dst)
            .arg(a)
            .query(&mut c)
            .unwrap();
        assert_eq!(n, 4);
        let ttl: i64 = redis::cmd("TTL").arg(dst).query(&mut c).unwrap();
        assert_eq!(ttl, -1);
        // An empty result deletes the destination, whatever it held.
        let _: () = redis::cmd("SET")
            .arg(dst)
            .arg("string")
            .query(&mut c)
            .unwrap();
        let n: i64 = redis::cmd("SINTERSTORE")
            .arg(dst)
            .arg(a)
            .arg("{foo}none")
            .query(&mut c)
            .unwrap();
        assert_eq!(n, 0);
        let exists: i64 = redis::cmd("EXISTS").arg(dst).query(&mut c).unwrap();
        assert_eq!(exists, 0);

        // Any non-set source is an error, even after a missing key; nothing is stored.
        let _: () = redis::cmd("SET")
            .arg(b)
            .arg("string")
            .query(&mut c)
            .unwrap();
        for cmd in ["SINTER", "SUNION", "SDIFF"] {
            let e = err_of(
                redis::cmd(cmd)
                    .arg("{foo}none")
                    .arg(b)
                    .query::<Value>(&mut c),
            );
            assert!(e.starts_with("WRONGTYPE"), "{cmd}: {e}");
        }
        sadd(&mut c, dst, &["keep"]);
        for cmd in ["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"] {
            let e = err_of(
                redis::cmd(cmd)
                    .arg(dst)
                    .arg(a)
                    .arg(b)
                    .query::<Value>(&mut c),
            );
            assert!(e.starts_with("WRONGTYPE"), "{cmd}: {e}");
            assert_eq!(members(&mut c, dst), set_of(&["keep"]));
        }
        let e = err_of(
            redis::cmd("SINTERCARD")
                .arg(2)
                .arg(a)
                .arg(b)
                .query::<Value>(&mut c),
        );
        assert!(e.starts_with("WRONGTYPE"), "{e}");
    }
}

#[test]
fn sintercard_argument_errors() {
    let s = Server::start(2);
    let mut c = s.client();
    sadd(&mut c, A0, &["a"]);
    let cases: &[(&[&str], &str)] = &[
        (&["0", A0], "ERR numkeys should be greater than 0"),
        (&["x", A0], "ERR numkeys should be greater than 0"),
        (
            &["3", A0, A1],
            "ERR Number of keys can't be greater than number of args",
        ),
        (&["1", A0, A1], "ERR syntax error"),
        (&["1", A0, "LIMIT"], "ERR syntax error"),
        (&["1", A0, "LIMIT", "-1"], "ERR LIMIT can't be negative"),
        (&["2", A0, A1, "LIMIT", "x"], "ERR LIMIT can't be negative"),
    ];
    for (args, want) in cases {
        let e = err_of(redis::cmd("SINTERCARD").arg(*args).query::<Value>(&mut c));
        assert_eq!(&e, want, "{args:?}");
    }
    let n: i64 = redis::cmd("SINTERCARD")
        .arg(1)
        .arg("nokey")
        .arg("LIMIT")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 0);
}

#[test]
fn smove_on_one_shard_and_across() {
    let s = Server::start(2);
    let mut c = s.client();
    for (src, dst) in [(A0, B0), (A0, A1), (A1, A0)] {
        let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
        sadd(&mut c, src, &["1", "a"]);
        sadd(&mut c, dst, &["2"]);
        let moved: i64 = redis::cmd("SMOVE")
            .arg(src)
            .arg(dst)
            .arg("1")
            .query(&mut c)
            .unwrap();
        assert_eq!(moved, 1);
        assert_eq!(encoding(&mut c, dst), "intset");
        let moved: i64 = redis::cmd("SMOVE")
            .arg(src)
            .arg(dst)
            .arg("a")
            .query(&mut c)
            .unwrap();
        assert_eq!(moved, 1);
        assert_eq!(members(&mut c, dst), set_of(&["1", "2", "a"]));
        assert_eq!(encoding(&mut c, dst), "hashtable");
        let exists: i64 = redis::cmd("EXISTS").arg(src).query(&mut c).unwrap();
        assert_eq!(exists, 0, "an emptied source is deleted");
        let moved: i64 = redis::cmd("SMOVE")
            .arg(src)
            .arg(dst)
            .arg("a")
            .query(&mut c)
            .unwrap();
        assert_eq!(moved, 0);
        // Missing source answers 0 before the destination's type is checked.
        let _: () = redis::cmd("SET").arg(src).arg("x").query(&mut c).unwrap();
        let e = err_of(
            redis::cmd("SMOVE")
                .arg(src)
                .arg(dst)
                .arg("a")
                .query::<Value>(&mut c),
        );
        assert!(e.starts_with("WRONGTYPE"));
        let e = err_of(
            redis::cmd("SMOVE")
                .arg(dst)
                .arg(src)
                .arg("a")
                .query::<Value>(&mut c),
        );
        assert!(e.starts_with("WRONGTYPE"));
        assert_eq!(
            members(&mut c, dst),
            set_of(&["1", "2", "a"]),
            "nothing moved on error"
        );
        let _: i64 = redis::cmd("DEL").arg(src).query(&mut c).unwrap();
        let _: () = redis::cmd("SET").arg(dst).arg("x").query(&mut c).unwrap();
        let moved: i64 = redis::cmd("SMOVE")
            .arg(src)
            .arg(dst)
            .arg("a")
            .query(&mut c)
            .unwrap();
        assert_eq!(moved, 0);
    }
    sadd(&mut c, "same", &["a", "b"]);
    let r: i64 = redis::cmd("SMOVE")
        .arg("same")
        .arg("same")
        .arg("a")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, 1);
    let r: i64 = redis::cmd("SMOVE")
        .arg("same")
        .arg("same")
        .arg("z")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, 0);
    assert_eq!(members(&mut c, "same"), set_of(&["a", "b"]));
}

/// Movers shuffle members between two sets on different shards while an observer
/// reads both through cross-shard commands: no observation may catch a member in
/// flight (missing from both, or in both).
#[test]
fn cross_shard_smove_is_atomic() {
    let s = Server::start(2);
    let mut c = s.client();
    let all: Vec<String> = (0..60).map(|i| format!("m{i}")).collect();
    let refs: Vec<&str> = all.iter().map(|s| s.as_str()).collect();
    sadd(&mut c, A0, &refs[..30]);
    sadd(&mut c, A1, &refs[30..]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let movers: Vec<_> = (0..3)
        .map(|t| {
            let mut mc = s.client();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut i = t;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let m = format!("m{}", i % 60);
                    let (from, to) = if i % 2 == 0 { (A0, A1) } else { (A1, A0) };
                    let _: i64 = redis::cmd("SMOVE")
                        .arg(from)
                        .arg(to)
                        .arg(&m)
                        .query(&mut mc)
                        .unwrap();
                    i += 7;
                }
            })
        })
        .collect();
    for _ in 0..300 {
        let union: Vec<String> = redis::cmd("SUNION").arg(A0).arg(A1).query(&mut c).unwrap();
        assert_eq!(union.len(), 60, "a member was in flight");
        let both: i64 = redis::cmd("SINTERCARD")
            .arg(2)
            .arg(A0)
            .arg(A1)
            .query(&mut c)
            .unwrap();
        assert_eq!(both, 0, "a member was in both sets");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for m in movers {
        m.join().unwrap();
    }
}

fn full_sscan(
    c: &mut Connection,
    key: &str,
    count: usize,
    mut between: impl FnMut(&mut Connection),
) -> Vec<String> {
    let mut cursor = "0".to_string();
    let mut seen = Vec::new();
    loop {
        let (next, page): (String, Vec<String>) = redis::cmd("SSCAN")
            .arg(key)
            .arg(&cursor)
            .arg("COUNT")
            .arg(count)
            .query(c)
            .unwrap();
        seen.extend(page);
        if next == "0" {
            return seen;
        }
        cursor = next;
        between(c);
    }
}

#[test]
fn sscan_returns_every_stable_member() {
    let s = Server::start(2);
    let mut c = s.client();
    // Intsets come back whole with cursor 0.
    sadd(&mut c, KEY_SHARD0, &["3", "1", "2"]);
    let (cursor, page): (String, Vec<String>) = redis::cmd("SSCAN")
        .arg(KEY_SHARD0)
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(
        (cursor.as_str(), page),
        ("0", vec!["1".to_string(), "2".into(), "3".into()])
    );
    // A big hashtable: pages of about COUNT members, each exactly once when nothing changes.
    let stable: Vec<String> = (0..3000).map(|i| format!("s{i}")).collect();
    for chunk in stable.chunks(500) {
        let refs: Vec<&str> = chunk.iter().map(|s| s.as_str()).collect();
        sadd(&mut c, KEY_SHARD1, &refs);
    }
    let seen = full_sscan(&mut c, KEY_SHARD1, 20, |_| {});
    assert_eq!(seen.len(), 3000);
    assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), 3000);
    // With members added and removed between calls, the stable ones all come back.
    let mut round = 0;
    let seen = full_sscan(&mut c, KEY_SHARD1, 15, |c| {
        round += 1;
        let added: Vec<String> = (0..40).map(|j| format!("t{round}_{j}")).collect();
        let refs: Vec<&str> = added.iter().map(|s| s.as_str()).collect();
        sadd(c, KEY_SHARD1, &refs);
        if round % 3 == 0 {
            let _: i64 = redis::cmd("SREM")
                .arg(KEY_SHARD1)
                .arg(&refs)
                .query(c)
                .unwrap();
        }
    });
    let seen: BTreeSet<String> = seen.into_iter().collect();
    assert!(stable.iter().all(|m| seen.contains(m)));
    // MATCH filters the page; errors as Redis reports them.
    let (_, page): (String, Vec<String>) = redis::cmd("SSCAN")
        .arg(KEY_SHARD0)
        .arg(0)
        .arg("MATCH")
        .arg("[12]")
        .query(&mut c)
        .unwrap();
    assert_eq!(page, ["1", "2"]);
    assert_eq!(
        err_of(
            redis::cmd("SSCAN")
                .arg(KEY_SHARD0)
                .arg("x")
                .query::<Value>(&mut c)
        ),
        "ERR invalid cursor"
    );
    let e = err_of(
        redis::cmd("SSCAN")
            .arg(KEY_SHARD0)
            .arg(0)
            .arg("COUNT")
            .arg(0)
            .query::<Value>(&mut c),
    );
    assert_eq!(e, "ERR syntax error");
    let (cursor, page): (String, Vec<String>) = redis::cmd("SSCAN")
        .arg("nokey")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!((cursor.as_str(), page.len()), ("0", 0));
}

#[test]
fn resp3_reply_types() {
    let s = Server::start(2);
    let mut c = s.client();
    sadd(&mut c, KEY_SHARD0, &["1"]);
    sadd(&mut c, KEY_SHARD1, &["1"]);
    let script: &[(&str, &[u8])] = &[
        ("SMEMBERS bar", b"~1\r\n$1\r\n1\r\n"),
        ("SMEMBERS nokey", b"~0\r\n"),
        ("SRANDMEMBER bar 1", b"*1\r\n$1\r\n1\r\n"),
        ("SRANDMEMBER bar -2", b"*2\r\n$1\r\n1\r\n$1\r\n1\r\n"),
        ("SRANDMEMBER nokey 2", b"*0\r\n"),
        ("SRANDMEMBER nokey", b"_\r\n"),
        ("SINTER bar foo", b"~1\r\n$1\r\n1\r\n"),
        ("SUNION bar foo", b"~1\r\n$1\r\n1\r\n"),
        ("SDIFF bar nokey", b"~1\r\n$1\r\n1\r\n"),
        ("SINTER nokey foo", b"~0\r\n"),
        ("SMISMEMBER bar 1 2", b"*2\r\n:1\r\n:0\r\n"),
        ("SPOP nokey 2", b"~0\r\n"),
        ("SPOP bar 5", b"~1\r\n$1\r\n1\r\n"),
        ("SPOP nokey", b"_\r\n"),
    ];
    let mut conn = s.raw();
    conn.write_all(b"HELLO 3\r\n").unwrap();
    let hello = read_at_least(&mut conn, 10);
    assert!(hello.starts_with(b"%"));
    for (cmd, want) in script {
        conn.write_all(format!("{cmd}\r\n").as_bytes()).unwrap();
        let got = read_at_least(&mut conn, want.len());
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want),
            "{cmd}"
        );
    }
}

#[test]
fn dump_restore_round_trip() {
    let s = Server::start(2);
    let mut c = s.client();
    sadd(&mut c, KEY_SHARD0, &["1", "2", "3"]);
    let big: Vec<String> = (0..1000).map(|i| format!("member-{i}")).collect();
    let refs: Vec<&str> = big.iter().map(|s| s.as_str()).collect();
    sadd(&mut c, KEY_SHARD1, &refs);
    for (src, dst, enc) in [
        (KEY_SHARD0, "{foo}copy", "intset"),
        (KEY_SHARD1, "{bar}copy", "hashtable"),
    ] {
        let payload: Vec<u8> = redis::cmd("DUMP").arg(src).query(&mut c).unwrap();
        let _: () = redis::cmd("RESTORE")
            .arg(dst)
            .arg(0)
            .arg(payload)
            .query(&mut c)
            .unwrap();
        assert_eq!(members(&mut c, dst), members(&mut c, src));
        assert_eq!(encoding(&mut c, dst), enc);
    }
    // COPY and RENAME across shards keep a working set (hashes are process-wide).
    let _: i64 = redis::cmd("COPY")
        .arg(KEY_SHARD1)
        .arg("{bar}c2")
        .query(&mut c)
        .unwrap();
    let has: i64 = redis::cmd("SISMEMBER")
        .arg("{bar}c2")
        .arg("member-7")
        .query(&mut c)
        .unwrap();
    assert_eq!(has, 1);
    let seen = full_sscan(&mut c, "{bar}c2", 50, |_| {});
    assert_eq!(seen.len(), 1000);
}
