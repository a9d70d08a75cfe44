//! Black-box tests of the hash commands against a real 2-shard server.

mod common;
use common::*;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

fn encoding(c: &mut redis::Connection, key: &str) -> String {
    q(c, &["OBJECT", "ENCODING", key])
}

#[test]
fn basic_commands_on_both_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    for key in [KEY_SHARD0, KEY_SHARD1] {
        assert_eq!(q::<i64>(&mut c, &["HSET", key, "a", "1", "b", "2"]), 2);
        assert_eq!(q::<i64>(&mut c, &["HSET", key, "a", "10", "c", "3"]), 1);
        assert_eq!(
            q::<Option<String>>(&mut c, &["HGET", key, "a"]),
            Some("10".into())
        );
        assert_eq!(q::<Option<String>>(&mut c, &["HGET", key, "zz"]), None);
        assert_eq!(
            q::<Vec<Option<String>>>(&mut c, &["HMGET", key, "a", "zz", "c"]),
            vec![Some("10".into()), None, Some("3".into())]
        );
        assert_eq!(q::<i64>(&mut c, &["HLEN", key]), 3);
        assert_eq!(q::<i64>(&mut c, &["HEXISTS", key, "b"]), 1);
        assert_eq!(q::<i64>(&mut c, &["HEXISTS", key, "zz"]), 0);
        assert_eq!(q::<i64>(&mut c, &["HSTRLEN", key, "a"]), 2);
        assert_eq!(q::<i64>(&mut c, &["HSTRLEN", key, "zz"]), 0);
        assert_eq!(q::<i64>(&mut c, &["HSETNX", key, "a", "x"]), 0);
        assert_eq!(q::<i64>(&mut c, &["HSETNX", key, "d", "4"]), 1);
        assert_eq!(q::<String>(&mut c, &["HMSET", key, "e", "5"]), "OK");
        // A listpack lists fields in insertion order, as Redis does.
        assert_eq!(
            q::<Vec<String>>(&mut c, &["HKEYS", key]),
            vec!["a", "b", "c", "d", "e"]
        );
        assert_eq!(
            q::<Vec<String>>(&mut c, &["HVALS", key]),
            vec!["10", "2", "3", "4", "5"]
        );
        assert_eq!(
            q::<Vec<String>>(&mut c, &["HGETALL", key]),
            vec!["a", "10", "b", "2", "c", "3", "d", "4", "e", "5"]
        );
        assert_eq!(q::<i64>(&mut c, &["HDEL", key, "a", "zz", "b"]), 2);
        assert_eq!(q::<i64>(&mut c, &["HDEL", key, "c", "d", "e"]), 3);
        // The last field gone, the key is gone.
        assert_eq!(q::<i64>(&mut c, &["EXISTS", key]), 0);
    }
    assert_eq!(
        q::<Vec<String>>(&mut c, &["HGETALL", "nokey"]),
        Vec::<String>::new()
    );
    assert_eq!(q::<i64>(&mut c, &["HLEN", "nokey"]), 0);
    assert_eq!(q::<i64>(&mut c, &["HDEL", "nokey", "a"]), 0);
    assert_eq!(
        q::<Vec<Option<String>>>(&mut c, &["HMGET", "nokey", "a", "b"]),
        vec![None, None]
    );
}

#[test]
fn errors() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = q(&mut c, &["SET", "str", "x"]);
    for cmd in [
        &["HSET", "str", "a", "1"][..],
        &["HGET", "str", "a"],
        &["HMGET", "str", "a"],
        &["HGETALL", "str"],
        &["HDEL", "str", "a"],
        &["HLEN", "str"],
        &["HINCRBY", "str", "a", "1"],
        &["HINCRBYFLOAT", "str", "a", "1"],
        &["HRANDFIELD", "str"],
        &["HRANDFIELD", "str", "2"],
        &["HSCAN", "str", "0"],
    ] {
        assert!(err(&mut c, cmd).contains("WRONGTYPE"), "{cmd:?}");
    }
    assert!(
        err(&mut c, &["HSET", "h", "a", "1", "b"]).contains("wrong number of arguments for 'hset'")
    );
    assert!(err(&mut c, &["HMSET", "h", "a"]).contains("wrong number of arguments"));
    assert_eq!(q::<i64>(&mut c, &["EXISTS", "h"]), 0);
    let _: i64 = q(
        &mut c,
        &[
            "HSET",
            "h",
            "s",
            "abc",
            "n",
            "9223372036854775807",
            "sp",
            " 1",
        ],
    );
    assert!(err(&mut c, &["HINCRBY", "h", "s", "1"]).contains("hash value is not an integer"));
    assert!(err(&mut c, &["HINCRBY", "h", "sp", "1"]).contains("hash value is not an integer"));
    assert!(
        err(&mut c, &["HINCRBY", "h", "n", "1"]).contains("increment or decrement would overflow")
    );
    assert!(err(&mut c, &["HINCRBY", "h", "n", "x"])
        .contains("value is not an integer or out of range"));
    assert!(err(&mut c, &["HINCRBYFLOAT", "h", "s", "1"]).contains("hash value is not a float"));
    assert!(err(&mut c, &["HINCRBYFLOAT", "h", "sp", "1"]).contains("hash value is not a float"));
    assert!(err(&mut c, &["HINCRBYFLOAT", "h", "s", "x"]).contains("value is not a valid float"));
    assert!(err(&mut c, &["HINCRBYFLOAT", "h2", "f", "inf"]).contains("value is NaN or Infinity"));
    assert_eq!(q::<i64>(&mut c, &["EXISTS", "h2"]), 0);
    // Redis adds in long double: 2 x 1.7e308 is fine, 2 x 1.1e4932 overflows.
    let _: String = q(&mut c, &["HINCRBYFLOAT", "h", "big", "1.7e308"]);
    let twice: String = q(&mut c, &["HINCRBYFLOAT", "h", "big", "1.7e308"]);
    assert!(twice.starts_with("34000000000000000000627") && twice.len() == 309);
    let _: String = q(&mut c, &["HINCRBYFLOAT", "h", "huge", "1.1e4932"]);
    assert!(err(&mut c, &["HINCRBYFLOAT", "h", "huge", "1.1e4932"])
        .contains("increment would produce NaN or Infinity"));
    assert!(err(&mut c, &["HRANDFIELD", "h", "1", "foo"]).contains("syntax error"));
    assert!(err(&mut c, &["HRANDFIELD", "h", "x"]).contains("value is not an integer"));
    assert!(
        err(&mut c, &["HRANDFIELD", "h", "-9223372036854775808"]).contains("value is out of range")
    );
    assert!(err(
        &mut c,
        &["HRANDFIELD", "h", "-9223372036854770000", "WITHVALUES"]
    )
    .contains("value is out of range"));
    assert!(err(&mut c, &["HSCAN", "h", "x"]).contains("invalid cursor"));
    assert!(err(&mut c, &["HSCAN", "h", "0", "COUNT", "0"]).contains("syntax error"));
    assert!(err(&mut c, &["HSCAN", "h", "0", "COUNT", "x"]).contains("not an integer"));
    assert!(err(&mut c, &["HSCAN", "h", "0", "TYPE", "string"]).contains("syntax error"));
    // As in Redis, a missing key answers an empty scan before the options are read.
    let (cur, items): (String, Vec<String>) = q(&mut c, &["HSCAN", "nokey", "0", "COUNT", "0"]);
    assert_eq!((cur.as_str(), items.len()), ("0", 0));
}

#[test]
fn counters() {
    let s = Server::start(2);
    let mut c = s.client();
    for key in [KEY_SHARD0, KEY_SHARD1] {
        assert_eq!(q::<i64>(&mut c, &["HINCRBY", key, "n", "5"]), 5);
        assert_eq!(q::<i64>(&mut c, &["HINCRBY", key, "n", "-7"]), -2);
        assert_eq!(
            q::<i64>(&mut c, &["HINCRBY", key, "n", "17179869184"]),
            17179869182
        );
        assert_eq!(
            q::<String>(&mut c, &["HINCRBYFLOAT", key, "f", "1.23"]),
            "1.23"
        );
        assert_eq!(
            q::<String>(&mut c, &["HINCRBYFLOAT", key, "f", "0.77"]),
            "2"
        );
        assert_eq!(
            q::<String>(&mut c, &["HINCRBYFLOAT", key, "f", "-0.1"]),
            "1.9"
        );
        assert_eq!(
            q::<String>(&mut c, &["HINCRBYFLOAT", key, "n", "1.5"]),
            "17179869183.5"
        );
        assert_eq!(
            q::<String>(&mut c, &["HINCRBYFLOAT", key, "e", "1e3"]),
            "1000"
        );
        assert_eq!(q::<String>(&mut c, &["HGET", key, "f"]), "1.9");
    }
    // Counters keep the key's TTL.
    let _: i64 = q(&mut c, &["EXPIRE", KEY_SHARD0, "100"]);
    let _: i64 = q(&mut c, &["HINCRBY", KEY_SHARD0, "i", "1"]);
    let _: String = q(&mut c, &["HINCRBYFLOAT", KEY_SHARD0, "i", "1"]);
    let _: i64 = q(&mut c, &["HSET", KEY_SHARD0, "x", "1"]);
    assert!(q::<i64>(&mut c, &["TTL", KEY_SHARD0]) > 0);
}

#[test]
fn encodings_convert_past_thresholds_and_never_back() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = q(&mut c, &["CONFIG", "SET", "hash-max-listpack-entries", "4"]);
    let _: () = q(&mut c, &["CONFIG", "SET", "hash-max-listpack-value", "8"]);
    let _: i64 = q(
        &mut c,
        &["HSET", "h", "a", "1", "b", "2", "c", "3", "d", "4"],
    );
    assert_eq!(encoding(&mut c, "h"), "listpack");
    let _: i64 = q(&mut c, &["HSET", "h", "e", "5"]);
    assert_eq!(encoding(&mut c, "h"), "hashtable");
    let _: i64 = q(&mut c, &["HDEL", "h", "a", "b", "c", "d"]);
    assert_eq!(encoding(&mut c, "h"), "hashtable");

    let _: i64 = q(&mut c, &["HSET", "v", "f", "12345678"]);
    assert_eq!(encoding(&mut c, "v"), "listpack");
    let _: i64 = q(&mut c, &["HSET", "v", "f", "123456789"]);
    assert_eq!(encoding(&mut c, "v"), "hashtable");

    // HINCRBYFLOAT can grow a value past the limit.
    let _: String = q(&mut c, &["HINCRBYFLOAT", "small", "tmp", "0.000005"]);
    let _: String = q(&mut c, &["HINCRBYFLOAT", "big", "tmp", "0.0000005"]);
    assert_eq!(encoding(&mut c, "small"), "listpack");
    assert_eq!(encoding(&mut c, "big"), "hashtable");
    // A long field converts too.
    let _: i64 = q(&mut c, &["HSETNX", "lf", "abcdefghi", "1"]);
    assert_eq!(encoding(&mut c, "lf"), "hashtable");
}

#[test]
fn hrandfield_shapes() {
    let s = Server::start(2);
    let mut c = s.client();
    let fields: Vec<String> = (0..10).map(|i| format!("f{i}")).collect();
    let mut args = vec!["HSET", KEY_SHARD1];
    for f in &fields {
        args.push(f);
        args.push("v");
    }
    let _: i64 = q(&mut c, &args);
    let all: BTreeSet<String> = fields.iter().cloned().collect();

    let one: String = q(&mut c, &["HRANDFIELD", KEY_SHARD1]);
    assert!(all.contains(&one));
    assert_eq!(q::<Option<String>>(&mut c, &["HRANDFIELD", "nokey"]), None);
    assert_eq!(
        q::<Vec<String>>(&mut c, &["HRANDFIELD", "nokey", "5"]).len(),
        0
    );
    assert_eq!(
        q::<Vec<String>>(&mut c, &["HRANDFIELD", KEY_SHARD1, "0"]).len(),
        0
    );

    let many: Vec<String> = q(&mut c, &["HRANDFIELD", KEY_SHARD1, "-1000"]);
    assert_eq!(many.len(), 1000);
    let seen: BTreeSet<String> = many.into_iter().collect();
    assert_eq!(seen, all, "1000 picks of 10 fields show every field");

    for count in ["3", "9", "10", "20"] {
        let got: Vec<String> = q(&mut c, &["HRANDFIELD", KEY_SHARD1, count]);
        let n: usize = count.parse::<usize>().unwrap_or(0).min(10);
        assert_eq!(got.len(), n);
        let distinct: BTreeSet<&String> = got.iter().collect();
        assert_eq!(distinct.len(), n);
        let pairs: Vec<String> = q(&mut c, &["HRANDFIELD", KEY_SHARD1, count, "WITHVALUES"]);
        assert_eq!(pairs.len(), 2 * n);
        assert!(pairs.chunks(2).all(|p| all.contains(&p[0]) && p[1] == "v"));
    }
    let neg: Vec<String> = q(&mut c, &["HRANDFIELD", KEY_SHARD1, "-5", "WITHVALUES"]);
    assert_eq!(neg.len(), 10);
}

#[test]
fn resp3_shapes() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: i64 = q(&mut c, &["HSET", "one", "f", "v"]);
    let mut conn = s.raw();
    conn.write_all(b"HELLO 3\r\n").expect("write");
    let hello = read_at_least(&mut conn, 10);
    assert!(hello.starts_with(b"%"));
    let cases: &[(&[u8], &[u8])] = &[
        (b"HGETALL one\r\n", b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n"),
        (b"HGETALL nokey\r\n", b"%0\r\n"),
        (
            b"HRANDFIELD one 2 WITHVALUES\r\n",
            b"*1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
        ),
        (
            b"HRANDFIELD one -2 WITHVALUES\r\n",
            b"*2\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
        ),
        (b"HRANDFIELD one -2\r\n", b"*2\r\n$1\r\nf\r\n$1\r\nf\r\n"),
        (b"HRANDFIELD nokey 3\r\n", b"*0\r\n"),
        (b"HRANDFIELD nokey\r\n", b"_\r\n"),
        (b"HGET one x\r\n", b"_\r\n"),
        (
            b"HSCAN one 0\r\n",
            b"*2\r\n$1\r\n0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
        ),
    ];
    for (cmd, want) in cases {
        conn.write_all(cmd).expect("write");
        let got = read_at_least(&mut conn, want.len());
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want),
            "{}",
            String::from_utf8_lossy(cmd)
        );
    }
}

/// Runs a whole HSCAN, calling `between` after each step.
fn full_scan(
    c: &mut redis::Connection,
    key: &str,
    extra: &[&str],
    mut between: impl FnMut(&mut redis::Connection),
) -> Vec<(String, String)> {
    let mut cursor = "0".to_string();
    let mut out = Vec::new();
    for _ in 0..100_000 {
        let mut args = vec!["HSCAN", key, &cursor];
        args.extend_from_slice(extra);
        let (next, items): (String, Vec<String>) = q(c, &args);
        out.extend(items.chunks(2).map(|p| (p[0].clone(), p[1].clone())));
        cursor = next;
        if cursor == "0" {
            return out;
        }
        between(c);
    }
    panic!("HSCAN did not terminate");
}

#[test]
fn hscan_returns_every_field_under_writes() {
    let s = Server::start(2);
    let mut c = s.client();
    // Small: one call, cursor 0.
    let _: i64 = q(&mut c, &["HSET", KEY_SHARD0, "a", "1", "b", "2"]);
    let (cur, items): (String, Vec<String>) = q(&mut c, &["HSCAN", KEY_SHARD0, "0"]);
    assert_eq!(cur, "0");
    assert_eq!(items, vec!["a", "1", "b", "2"]);

    // Big: the table grows and then shrinks while the scan runs.
    let key = KEY_SHARD1;
    for chunk in (0..2000).collect::<Vec<_>>().chunks(200) {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(key);
        for i in chunk {
            cmd.arg(format!("f{i}")).arg(i);
        }
        let _: i64 = cmd.query(&mut c).expect("hset");
    }
    assert_eq!(encoding(&mut c, key), "hashtable");
    let mut next = 2000;
    let seen = full_scan(&mut c, key, &[], |c| {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(key);
        for _ in 0..100 {
            cmd.arg(format!("g{next}")).arg(next);
            next += 1;
        }
        let _: i64 = cmd.query(c).expect("hset");
    });
    let seen: BTreeMap<String, String> = seen.into_iter().collect();
    assert!((0..2000).all(|i| seen.get(&format!("f{i}")) == Some(&i.to_string())));

    let mut gone = 2000;
    let seen = full_scan(&mut c, key, &["COUNT", "50"], |c| {
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(key);
        for _ in 0..300 {
            cmd.arg(format!("g{gone}"));
            gone += 1;
        }
        let _: i64 = cmd.query(c).expect("hdel");
    });
    let seen: BTreeSet<String> = seen.into_iter().map(|p| p.0).collect();
    assert!((0..2000).all(|i| seen.contains(&format!("f{i}"))));

    let matched = full_scan(&mut c, key, &["MATCH", "f1?", "COUNT", "1000"], |_| {});
    let names: BTreeSet<String> = matched.into_iter().map(|p| p.0).collect();
    let want: BTreeSet<String> = (10..20).map(|i| format!("f{i}")).collect();
    assert_eq!(names, want);
}

#[test]
fn dump_restore_and_moves_across_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: i64 = q(&mut c, &["HSET", KEY_SHARD0, "a", "1", "b", "2", "c", "3"]);
    let payload: Vec<u8> = redis::cmd("DUMP")
        .arg(KEY_SHARD0)
        .query(&mut c)
        .expect("dump");
    let _: () = redis::cmd("RESTORE")
        .arg(KEY_SHARD1)
        .arg(0)
        .arg(&payload)
        .query(&mut c)
        .expect("restore");
    assert_eq!(encoding(&mut c, KEY_SHARD1), "listpack");
    assert_eq!(
        q::<Vec<String>>(&mut c, &["HGETALL", KEY_SHARD1]),
        vec!["a", "1", "b", "2", "c", "3"]
    );

    // A restore under a small limit converts.
    let _: () = q(&mut c, &["CONFIG", "SET", "hash-max-listpack-entries", "2"]);
    let _: () = redis::cmd("RESTORE")
        .arg(KEY_SHARD1)
        .arg(0)
        .arg(&payload)
        .arg("REPLACE")
        .query(&mut c)
        .expect("restore");
    assert_eq!(encoding(&mut c, KEY_SHARD1), "hashtable");
    assert_eq!(q::<i64>(&mut c, &["HLEN", KEY_SHARD1]), 3);
    // And a hashtable dumps and restores too.
    let payload: Vec<u8> = redis::cmd("DUMP")
        .arg(KEY_SHARD1)
        .query(&mut c)
        .expect("dump");
    let _: () = redis::cmd("RESTORE")
        .arg("r")
        .arg(0)
        .arg(&payload)
        .query(&mut c)
        .expect("restore");
    let got: BTreeMap<String, String> = q(&mut c, &["HGETALL", "r"]);
    assert_eq!(got.len(), 3);
    assert_eq!(got.get("b").map(String::as_str), Some("2"));

    // RENAME and COPY move hashes between shards.
    let _: () = q(&mut c, &["RENAME", KEY_SHARD0, "moved{x}"]);
    let _: i64 = q(&mut c, &["COPY", "moved{x}", KEY_SHARD0]);
    let _: i64 = q(&mut c, &["HSET", KEY_SHARD0, "d", "4"]);
    assert_eq!(q::<i64>(&mut c, &["HLEN", "moved{x}"]), 3);
    assert_eq!(q::<i64>(&mut c, &["HLEN", KEY_SHARD0]), 4);
    assert_eq!(q::<String>(&mut c, &["TYPE", KEY_SHARD0]), "hash");
}

#[test]
fn fuzz_against_a_model() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = q(
        &mut c,
        &["CONFIG", "SET", "hash-max-listpack-entries", "16"],
    );
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut rnd = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for _ in 0..2000 {
        let f = format!("f{}", rnd(40));
        match rnd(3) {
            0 | 1 => {
                let v = "v".repeat(rnd(80) as usize);
                let new: i64 = q(&mut c, &["HSET", "fz", &f, &v]);
                assert_eq!(new == 1, model.insert(f, v).is_none());
            }
            _ => {
                let n: i64 = q(&mut c, &["HDEL", "fz", &f]);
                assert_eq!(n == 1, model.remove(&f).is_some());
            }
        }
    }
    let got: BTreeMap<String, String> = q(&mut c, &["HGETALL", "fz"]);
    assert_eq!(got, model);
    assert_eq!(q::<usize>(&mut c, &["HLEN", "fz"]), model.len());
}
