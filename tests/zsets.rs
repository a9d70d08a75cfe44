//! Black-box tests of the sorted set commands over TCP, on a 2-shard server, with keys
//! on both shards and the cross-shard multi-key commands.

mod common;
use common::*;

use redis::{cmd, Connection, Value};
use std::io::Write;

/// Keys on shard 0 ("bar" and its hash tag) and shard 1 ("foo").
const A: &str = "{bar}a";
const A2: &str = "{bar}b";
const B: &str = "{foo}a";
const B2: &str = "{foo}b";
const A3: &str = "{bar}c";

fn strs(c: &mut Connection, args: &[&str]) -> Vec<String> {
    q(c, args)
}

/// Sends raw RESP and returns what came back once `expect` bytes arrived.
fn raw(s: &Server, conn: &mut std::net::TcpStream, cmd_bytes: &str, expect: &str) {
    conn.write_all(cmd_bytes.as_bytes()).expect("write");
    let got = read_at_least(conn, expect.len());
    assert_eq!(String::from_utf8_lossy(&got), expect, "port {}", s.port);
}

#[test]
fn zadd_options_and_errors() {
    let s = Server::start(2);
    let mut c = s.client();
    for key in [A, B] {
        assert_eq!(
            q::<i64>(&mut c, &["ZADD", key, "1", "a", "2", "b", "3", "c"]),
            3
        );
        assert!(err(&mut c, &["ZADD", key, "NX", "XX", "1", "a"])
            .contains("XX and NX options at the same time are not compatible"));
        assert!(err(&mut c, &["ZADD", key, "GT", "LT", "1", "a"])
            .contains("GT, LT, and/or NX options at the same time are not compatible"));
        assert!(err(&mut c, &["ZADD", key, "NX", "GT", "1", "a"]).contains("GT, LT, and/or NX"));
        assert!(err(&mut c, &["ZADD", key, "INCR", "1", "a", "2", "b"])
            .contains("INCR option supports a single increment-element pair"));
        assert!(err(&mut c, &["ZADD", key, "x", "a"]).contains("not a valid float"));
        assert!(err(&mut c, &["ZADD", key, "1", "a", "2"]).contains("syntax error"));
        assert!(err(&mut c, &["ZADD", key, "", "a"]).contains("not a valid float"));
        // A parse error in any pair leaves the set untouched.
        assert!(err(&mut c, &["ZADD", key, "5", "z", "nan", "y"]).contains("not a valid float"));
        assert_eq!(q::<Option<f64>>(&mut c, &["ZSCORE", key, "z"]), None);
        assert_eq!(
            q::<i64>(&mut c, &["ZADD", key, "XX", "CH", "10", "a", "10", "new"]),
            1
        );
        assert_eq!(
            q::<i64>(&mut c, &["ZADD", key, "NX", "CH", "0", "a", "4", "d"]),
            1
        );
        assert_eq!(
            q::<i64>(&mut c, &["ZADD", key, "GT", "CH", "1", "a", "5", "b"]),
            1
        );
        assert_eq!(
            q::<i64>(&mut c, &["ZADD", key, "LT", "CH", "1", "a", "9", "b"]),
            1
        );
        assert_eq!(
            q::<Option<String>>(&mut c, &["ZADD", key, "INCR", "GT", "-1", "a"]),
            None
        );
        assert_eq!(
            q::<String>(&mut c, &["ZADD", key, "INCR", "2.5", "a"]),
            "3.5"
        );
        assert_eq!(
            q::<String>(&mut c, &["ZINCRBY", key, "0.1", "a"]),
            "3.6000000000000001"
        );
        assert_eq!(q::<String>(&mut c, &["ZINCRBY", key, "+inf", "a"]), "inf");
        assert!(err(&mut c, &["ZINCRBY", key, "-inf", "a"])
            .contains("resulting score is not a number (NaN)"));
        assert_eq!(q::<i64>(&mut c, &["ZCARD", key]), 4);
    }
    assert_eq!(q::<i64>(&mut c, &["ZADD", "nokey", "XX", "1", "a"]), 0);
    assert_eq!(q::<i64>(&mut c, &["EXISTS", "nokey"]), 0);
    let _: () = q(&mut c, &["SET", "str", "x"]);
    assert!(err(&mut c, &["ZADD", "str", "1", "a"]).contains("WRONGTYPE"));
    assert!(err(&mut c, &["ZRANGE", "str", "0", "-1"]).contains("WRONGTYPE"));
}

#[test]
fn point_reads() {
    let s = Server::start(2);
    let mut c = s.client();
    for key in [A, B] {
        let _: i64 = q(
            &mut c,
            &[
                "ZADD", key, "1", "a", "2", "b", "0.1", "c", "-inf", "d", "1e20", "e",
            ],
        );
        assert_eq!(
            q::<String>(&mut c, &["ZSCORE", key, "c"]),
            "0.10000000000000001"
        );
        assert_eq!(q::<String>(&mut c, &["ZSCORE", key, "d"]), "-inf");
        assert_eq!(q::<String>(&mut c, &["ZSCORE", key, "e"]), "1e+20");
        assert_eq!(
            q::<Vec<Option<String>>>(&mut c, &["ZMSCORE", key, "a", "zz", "b"]),
            vec![Some("1".to_string()), None, Some("2".to_string())]
        );
        assert_eq!(q::<Option<i64>>(&mut c, &["ZRANK", key, "a"]), Some(2));
        assert_eq!(q::<Option<i64>>(&mut c, &["ZREVRANK", key, "a"]), Some(2));
        assert_eq!(q::<Option<i64>>(&mut c, &["ZREVRANK", key, "e"]), Some(0));
        assert_eq!(q::<Option<i64>>(&mut c, &["ZRANK", key, "zz"]), None);
        assert_eq!(q::<i64>(&mut c, &["ZCOUNT", key, "(0.1", "2"]), 2);
        assert_eq!(q::<i64>(&mut c, &["ZCOUNT", key, "-inf", "+inf"]), 5);
        assert!(err(&mut c, &["ZCOUNT", key, "a", "1"]).contains("min or max is not a float"));
    }
    assert_eq!(
        q::<Vec<Option<String>>>(&mut c, &["ZMSCORE", "nokey", "a"]),
        vec![None]
    );
    assert_eq!(q::<i64>(&mut c, &["ZCARD", "nokey"]), 0);
}

#[test]
fn ranges() {
    let s = Server::start(2);
    let mut c = s.client();
    for key in [A, B] {
        let _: i64 = q(
            &mut c,
            &[
                "ZADD", key, "1", "a", "2", "b", "3", "c", "4", "d", "5", "e",
            ],
        );
        assert_eq!(
            strs(&mut c, &["ZRANGE", key, "0", "-1"]),
            ["a", "b", "c", "d", "e"]
        );
        assert_eq!(
            strs(&mut c, &["ZRANGE", key, "-2", "-1", "WITHSCORES"]),
            ["d", "4", "e", "5"]
        );
        assert_eq!(strs(&mut c, &["ZRANGE", key, "0", "1", "REV"]), ["e", "d"]);
        assert_eq!(strs(&mut c, &["ZREVRANGE", key, "1", "2"]), ["d", "c"]);
        assert_eq!(
            strs(
                &mut c,
                &["ZRANGE", key, "(1", "4", "BYSCORE", "LIMIT", "1", "2"]
            ),
            ["c", "d"]
        );
        assert_eq!(
            strs(
                &mut c,
                &[
                    "ZRANGE",
                    key,
                    "+inf",
                    "-inf",
                    "BYSCORE",
                    "REV",
                    "LIMIT",
                    "0",
                    "2",
                    "WITHSCORES"
                ]
            ),
            ["e", "5", "d", "4"]
        );
        assert_eq!(strs(&mut c, &["ZRANGEBYSCORE", key, "2", "(4"]), ["b", "c"]);
        assert_eq!(
            strs(&mut c, &["ZREVRANGEBYSCORE", key, "(4", "2"]),
            ["c", "b"]
        );
        assert_eq!(
            strs(
                &mut c,
                &["ZRANGEBYSCORE", key, "-inf", "+inf", "LIMIT", "-1", "2"]
            ),
            Vec::<String>::new()
        );
        assert_eq!(
            strs(
                &mut c,
                &["ZRANGEBYSCORE", key, "-inf", "+inf", "LIMIT", "3", "-1"]
            ),
            ["d", "e"]
        );
        assert_eq!(
            strs(&mut c, &["ZRANGE", key, "[b", "(d", "BYLEX"]),
            ["b", "c"]
        );
        assert!(err(&mut c, &["ZRANGE", key, "0", "-1", "LIMIT", "1", "2"])
            .contains("LIMIT is only supported"));
        assert!(
            err(&mut c, &["ZRANGE", key, "-", "+", "BYLEX", "WITHSCORES"])
                .contains("WITHSCORES not supported")
        );
        assert!(err(&mut c, &["ZREVRANGE", key, "0", "-1", "BYSCORE"]).contains("syntax error"));
        assert!(err(&mut c, &["ZRANGEBYSCORE", key, "0", "1", "REV"]).contains("syntax error"));
        assert!(err(&mut c, &["ZRANGEBYLEX", key, "a", "+"])
            .contains("min or max not valid string range item"));
    }
    let _: i64 = q(
        &mut c,
        &["ZADD", "lex", "0", "a", "0", "b", "0", "c", "0", "d"],
    );
    assert_eq!(
        strs(&mut c, &["ZRANGEBYLEX", "lex", "-", "+", "LIMIT", "1", "2"]),
        ["b", "c"]
    );
    assert_eq!(
        strs(&mut c, &["ZREVRANGEBYLEX", "lex", "[c", "-"]),
        ["c", "b", "a"]
    );
    assert_eq!(q::<i64>(&mut c, &["ZLEXCOUNT", "lex", "(a", "[c"]), 2);
    assert_eq!(
        strs(&mut c, &["ZRANGE", "nokey", "0", "-1"]),
        Vec::<String>::new()
    );
}

#[test]
fn removals_pops_and_empty_keys() {
    let s = Server::start(2);
    let mut c = s.client();
    for key in [A, B] {
        let _: i64 = q(
            &mut c,
            &[
                "ZADD", key, "1", "a", "2", "b", "3", "c", "4", "d", "5", "e", "6", "f",
            ],
        );
        assert_eq!(q::<i64>(&mut c, &["ZREMRANGEBYRANK", key, "0", "0"]), 1);
        assert_eq!(q::<i64>(&mut c, &["ZREMRANGEBYSCORE", key, "(2", "3"]), 1);
        assert_eq!(q::<i64>(&mut c, &["ZREMRANGEBYLEX", key, "[e", "[e"]), 1);
        assert_eq!(strs(&mut c, &["ZRANGE", key, "0", "-1"]), ["b", "d", "f"]);
        assert_eq!(strs(&mut c, &["ZPOPMIN", key]), ["b", "2"]);
        assert_eq!(strs(&mut c, &["ZPOPMAX", key, "5"]), ["f", "6", "d", "4"]);
        assert_eq!(q::<i64>(&mut c, &["EXISTS", key]), 0);
        assert!(err(&mut c, &["ZPOPMIN", key, "-1"]).contains("must be positive"));
        let _: i64 = q(&mut c, &["ZADD", key, "1", "a"]);
        assert_eq!(q::<i64>(&mut c, &["ZREM", key, "a", "b"]), 1);
        assert_eq!(q::<i64>(&mut c, &["EXISTS", key]), 0);
    }
}

#[test]
fn zmpop_same_and_across_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: i64 = q(&mut c, &["ZADD", B, "1", "a", "2", "b", "3", "c"]);
    // A is missing, B (other shard) has members.
    let v: (String, Vec<(String, f64)>) = q(&mut c, &["ZMPOP", "2", A, B, "MAX", "COUNT", "2"]);
    assert_eq!(
        v,
        (
            B.to_string(),
            vec![("c".to_string(), 3.0), ("b".to_string(), 2.0)]
        )
    );
    let v: (String, Vec<(String, f64)>) = q(&mut c, &["ZMPOP", "1", B, "MIN"]);
    assert_eq!(v.1, vec![("a".to_string(), 1.0)]);
    assert_eq!(q::<i64>(&mut c, &["EXISTS", B]), 0);
    assert_eq!(q::<Value>(&mut c, &["ZMPOP", "2", A, B, "MIN"]), Value::Nil);
    let _: () = q(&mut c, &["SET", B, "x"]);
    assert!(err(&mut c, &["ZMPOP", "2", A, B, "MIN"]).contains("WRONGTYPE"));
    assert!(err(&mut c, &["ZMPOP", "0", A, "MIN"]).contains("numkeys should be greater than 0"));
    assert!(err(&mut c, &["ZMPOP", "1", A, "MIN", "COUNT", "0"])
        .contains("count should be greater than 0"));
    assert!(err(&mut c, &["ZMPOP", "2", A, "MIN"]).contains("syntax error"));
}

#[test]
fn combining_commands_across_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: i64 = q(&mut c, &["ZADD", A, "1", "a", "2", "b", "3", "c"]);
    let _: i64 = q(&mut c, &["ZADD", B, "1", "b", "2", "c", "3", "d"]);
    for (x, y) in [(A, B), (A, A2)] {
        if y == A2 {
            let _: i64 = q(&mut c, &["ZADD", A2, "1", "b", "2", "c", "3", "d"]);
        }
        assert_eq!(
            strs(&mut c, &["ZUNION", "2", x, y, "WITHSCORES"]),
            ["a", "1", "b", "3", "d", "3", "c", "5"]
        );
        assert_eq!(
            strs(
                &mut c,
                &["ZINTER", "2", x, y, "WEIGHTS", "2", "3", "WITHSCORES"]
            ),
            ["b", "7", "c", "12"]
        );
        assert_eq!(
            strs(
                &mut c,
                &["ZINTER", "2", x, y, "AGGREGATE", "MAX", "WITHSCORES"]
            ),
            ["b", "2", "c", "3"]
        );
        assert_eq!(
            strs(&mut c, &["ZDIFF", "2", x, y, "WITHSCORES"]),
            ["a", "1"]
        );
        assert_eq!(q::<i64>(&mut c, &["ZINTERCARD", "2", x, y]), 2);
        assert_eq!(
            q::<i64>(&mut c, &["ZINTERCARD", "2", x, y, "LIMIT", "1"]),
            1
        );
        // Destinations on either shard, replacing a value with a TTL.
        for dst in [B2, A3] {
            let _: () = q(&mut c, &["SET", dst, "old", "EX", "100"]);
            assert_eq!(q::<i64>(&mut c, &["ZUNIONSTORE", dst, "2", x, y]), 4);
            assert_eq!(q::<i64>(&mut c, &["TTL", dst]), -1);
            assert_eq!(
                strs(&mut c, &["ZRANGE", dst, "0", "-1", "WITHSCORES"]),
                ["a", "1", "b", "3", "d", "3", "c", "5"]
            );
            assert_eq!(
                q::<i64>(&mut c, &["ZINTERSTORE", dst, "2", x, y, "AGGREGATE", "MIN"]),
                2
            );
            assert_eq!(
                strs(&mut c, &["ZRANGE", dst, "0", "-1", "WITHSCORES"]),
                ["b", "1", "c", "2"]
            );
            assert_eq!(q::<i64>(&mut c, &["ZDIFFSTORE", dst, "2", x, y]), 1);
            assert_eq!(q::<i64>(&mut c, &["ZINTERSTORE", dst, "2", x, "nokey"]), 0);
            assert_eq!(q::<i64>(&mut c, &["EXISTS", dst]), 0);
        }
    }
    assert!(err(&mut c, &["ZUNION", "0", A])
        .contains("at least 1 input key is needed for 'zunion' command"));
    assert!(err(&mut c, &["ZUNIONSTORE", B2, "0", A])
        .contains("at least 1 input key is needed for 'zunionstore' command"));
    assert!(err(&mut c, &["ZUNION", "3", A, B]).contains("syntax error"));
    assert!(err(&mut c, &["ZUNION", "2", A, B, "WEIGHTS", "1", "x"])
        .contains("weight value is not a float"));
    assert!(err(&mut c, &["ZUNIONSTORE", B2, "2", A, B, "WITHSCORES"]).contains("syntax error"));
    assert!(
        err(&mut c, &["ZINTERCARD", "2", A, B, "LIMIT", "-1"]).contains("LIMIT can't be negative")
    );
    let _: () = q(&mut c, &["SET", "{foo}str", "x"]);
    // WRONGTYPE comes before option errors, across shards too.
    assert!(err(&mut c, &["ZUNION", "2", A, "{foo}str", "AGGREGATE", "bad"]).contains("WRONGTYPE"));
    assert!(err(&mut c, &["ZUNION", "2", A, B, "AGGREGATE", "bad"]).contains("syntax error"));
}

#[test]
fn zrangestore_across_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: i64 = q(&mut c, &["ZADD", A, "1", "a", "2", "b", "3", "c", "4", "d"]);
    for dst in [B, A2] {
        assert_eq!(q::<i64>(&mut c, &["ZRANGESTORE", dst, A, "1", "2"]), 2);
        assert_eq!(
            strs(&mut c, &["ZRANGE", dst, "0", "-1", "WITHSCORES"]),
            ["b", "2", "c", "3"]
        );
        assert_eq!(
            q::<i64>(
                &mut c,
                &[
                    "ZRANGESTORE",
                    dst,
                    A,
                    "5",
                    "0",
                    "BYSCORE",
                    "REV",
                    "LIMIT",
                    "0",
                    "2"
                ]
            ),
            2
        );
        assert_eq!(strs(&mut c, &["ZRANGE", dst, "0", "-1"]), ["c", "d"]);
        assert_eq!(
            q::<i64>(&mut c, &["ZRANGESTORE", dst, A, "[f", "[g", "BYLEX"]),
            0
        );
        assert_eq!(q::<i64>(&mut c, &["EXISTS", dst]), 0);
        assert!(
            err(&mut c, &["ZRANGESTORE", dst, A, "0", "-1", "WITHSCORES"]).contains("syntax error")
        );
    }
    let _: () = q(&mut c, &["SET", B2, "x"]);
    let _: i64 = q(&mut c, &["ZADD", A2, "1", "keep"]);
    assert!(err(&mut c, &["ZRANGESTORE", A2, B2, "0", "-1"]).contains("WRONGTYPE"));
    assert_eq!(strs(&mut c, &["ZRANGE", A2, "0", "-1"]), ["keep"]);
}

#[test]
fn encodings_and_dump_restore() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: i64 = q(&mut c, &["ZADD", A, "1", "a"]);
    assert_eq!(q::<String>(&mut c, &["OBJECT", "ENCODING", A]), "listpack");
    let _: () = q(&mut c, &["CONFIG", "SET", "zset-max-listpack-entries", "2"]);
    let _: i64 = q(&mut c, &["ZADD", A, "2", "b", "3", "c"]);
    assert_eq!(q::<String>(&mut c, &["OBJECT", "ENCODING", A]), "skiplist");
    let long = "x".repeat(65);
    let _: i64 = q(&mut c, &["ZADD", B, "1", &long]);
    assert_eq!(q::<String>(&mut c, &["OBJECT", "ENCODING", B]), "skiplist");
    let payload: Vec<u8> = q(&mut c, &["DUMP", A]);
    let _: () = cmd("RESTORE")
        .arg(B2)
        .arg(0)
        .arg(payload)
        .query(&mut c)
        .unwrap();
    assert_eq!(
        strs(&mut c, &["ZRANGE", B2, "0", "-1", "WITHSCORES"]),
        ["a", "1", "b", "2", "c", "3"]
    );
    assert_eq!(q::<String>(&mut c, &["OBJECT", "ENCODING", B2]), "skiplist");
}

#[test]
fn resp3_replies() {
    let s = Server::start(2);
    let mut conn = s.raw();
    raw(&s, &mut conn, "ZADD {foo}z 1.5 a 2 b\r\n", ":2\r\n");
    let mut hello = b"HELLO 3\r\n".to_vec();
    conn.write_all(&hello).unwrap();
    hello.clear();
    // Drain the HELLO map; the next replies are checked byte for byte.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut buf = [0u8; 4096];
    let _ = std::io::Read::read(&mut conn, &mut buf);
    raw(&s, &mut conn, "ZSCORE {foo}z a\r\n", ",1.5\r\n");
    raw(
        &s,
        &mut conn,
        "ZRANGE {foo}z 0 -1 WITHSCORES\r\n",
        "*2\r\n*2\r\n$1\r\na\r\n,1.5\r\n*2\r\n$1\r\nb\r\n,2\r\n",
    );
    raw(&s, &mut conn, "ZRANGE {foo}z 0 0\r\n", "*1\r\n$1\r\na\r\n");
    raw(
        &s,
        &mut conn,
        "ZPOPMIN {foo}z\r\n",
        "*2\r\n$1\r\na\r\n,1.5\r\n",
    );
    raw(
        &s,
        &mut conn,
        "ZPOPMIN {foo}z 1\r\n",
        "*1\r\n*2\r\n$1\r\nb\r\n,2\r\n",
    );
    raw(&s, &mut conn, "ZMPOP 1 {foo}z MIN\r\n", "_\r\n");
    raw(&s, &mut conn, "ZSCORE {foo}z a\r\n", "_\r\n");
}

#[test]
fn zscan_and_zrandmember() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = q(&mut c, &["CONFIG", "SET", "zset-max-listpack-entries", "0"]);
    let mut args: Vec<String> = vec!["ZADD".into(), B.into()];
    for i in 0..500 {
        args.push(i.to_string());
        args.push(format!("m{i}"));
    }
    let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let _: i64 = q(&mut c, &refs);
    let mut seen = std::collections::HashMap::new();
    let mut cursor = "0".to_string();
    loop {
        let (next, items): (String, Vec<String>) = q(&mut c, &["ZSCAN", B, &cursor, "COUNT", "20"]);
        for pair in items.chunks(2) {
            seen.insert(pair[0].clone(), pair[1].clone());
        }
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), 500);
    assert_eq!(seen["m42"], "42");
    let (_, items): (String, Vec<String>) =
        q(&mut c, &["ZSCAN", B, "0", "MATCH", "m49*", "COUNT", "1000"]);
    assert_eq!(items.len(), 22);
    assert!(err(&mut c, &["ZSCAN", B, "x"]).contains("invalid cursor"));

    let picked = strs(&mut c, &["ZRANDMEMBER", B, "10"]);
    assert_eq!(picked.len(), 10);
    assert_eq!(
        picked
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .len(),
        10
    );
    assert_eq!(strs(&mut c, &["ZRANDMEMBER", B, "-600"]).len(), 600);
    assert_eq!(
        strs(&mut c, &["ZRANDMEMBER", B, "400", "WITHSCORES"]).len(),
        800
    );
    assert_eq!(strs(&mut c, &["ZRANDMEMBER", B, "0"]).len(), 0);
    assert!(q::<String>(&mut c, &["ZRANDMEMBER", B]).starts_with('m'));
    assert_eq!(q::<Option<String>>(&mut c, &["ZRANDMEMBER", "nokey"]), None);
}

/// Random operations against a model, in both encodings, checked through ZRANGE.
#[test]
fn random_operations_match_a_model() {
    let s = Server::start(2);
    let mut c = s.client();
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for entries in ["128", "0"] {
        let _: () = q(
            &mut c,
            &["CONFIG", "SET", "zset-max-listpack-entries", entries],
        );
        let _: i64 = q(&mut c, &["DEL", A]);
        let mut model: std::collections::BTreeMap<String, i64> = Default::default();
        for _ in 0..1500 {
            let m = format!("m{}", rnd(200));
            match rnd(4) {
                0 | 1 => {
                    let sc = rnd(50) as i64 - 25;
                    let _: i64 = q(&mut c, &["ZADD", A, &sc.to_string(), &m]);
                    model.insert(m, sc);
                }
                2 => {
                    let _: i64 = q(&mut c, &["ZREM", A, &m]);
                    model.remove(&m);
                }
                _ => {
                    let want = {
                        let mut v: Vec<(&String, &i64)> = model.iter().collect();
                        v.sort_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(b.0)));
                        v.iter().position(|(k, _)| **k == m).map(|p| p as i64)
                    };
                    assert_eq!(q::<Option<i64>>(&mut c, &["ZRANK", A, &m]), want);
                }
            }
        }
        let mut want: Vec<(String, i64)> = model.into_iter().collect();
        want.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
        let got: Vec<(String, i64)> = q(&mut c, &["ZRANGE", A, "0", "-1", "WITHSCORES"]);
        assert_eq!(got, want);
        let n = want.len() as i64;
        if n >= 10 {
            let mid: Vec<String> = strs(&mut c, &["ZRANGE", A, "5", "-5", "REV"]);
            let rev: Vec<String> = want.iter().rev().map(|(m, _)| m.clone()).collect();
            assert_eq!(mid, rev[5..(n - 4) as usize].to_vec());
        }
        let cnt: i64 = q(&mut c, &["ZCOUNT", A, "(-10", "10"]);
        assert_eq!(
            cnt,
            want.iter().filter(|(_, s)| *s > -10 && *s <= 10).count() as i64
        );
    }
}

/// ZRANK / ZREVRANK WITHSCORE (Redis 7.2): [rank, score], a null array for a missing
/// member or key under WITHSCORE, RESP3's double; arity and syntax errors first.
#[test]
fn zrank_withscore() {
    let s = Server::start(2);
    let mut c = s.client();
    for key in [A, B] {
        q::<i64>(&mut c, &["ZADD", key, "1.5", "a", "2", "b", "10", "c"]);
        assert_eq!(
            q::<Value>(&mut c, &["ZRANK", key, "b", "WITHSCORE"]),
            Value::Array(vec![Value::Int(1), Value::BulkString(b"2".to_vec())])
        );
        assert_eq!(
            q::<Value>(&mut c, &["ZREVRANK", key, "a", "withscore"]),
            Value::Array(vec![Value::Int(2), Value::BulkString(b"1.5".to_vec())])
        );
        assert_eq!(q::<i64>(&mut c, &["ZRANK", key, "c"]), 2);
        assert!(err(&mut c, &["ZRANK", key, "a", "WITHSCORES"]).contains("syntax error"));
        assert!(err(&mut c, &["ZRANK", key, "a", "WITHSCORE", "x"])
            .contains("wrong number of arguments for 'zrank' command"));
    }
    let mut conn = s.raw();
    raw(
        &s,
        &mut conn,
        "*4\r\n$5\r\nZRANK\r\n$6\r\n{bar}a\r\n$1\r\nz\r\n$9\r\nWITHSCORE\r\n",
        "*-1\r\n",
    );
    raw(
        &s,
        &mut conn,
        "*4\r\n$5\r\nZRANK\r\n$7\r\nmissing\r\n$1\r\nz\r\n$9\r\nWITHSCORE\r\n",
        "*-1\r\n",
    );
    raw(
        &s,
        &mut conn,
        "*3\r\n$5\r\nZRANK\r\n$6\r\n{bar}a\r\n$1\r\nz\r\n",
        "$-1\r\n",
    );
    let mut conn = s.raw();
    conn.write_all(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n")
        .expect("hello");
    let hello = read_until_contains(&mut conn, b"modules\r\n*0\r\n");
    assert!(
        hello.starts_with(b"%"),
        "{}",
        String::from_utf8_lossy(&hello)
    );
    raw(
        &s,
        &mut conn,
        "*4\r\n$5\r\nZRANK\r\n$6\r\n{bar}a\r\n$1\r\na\r\n$9\r\nWITHSCORE\r\n",
        "*2\r\n:0\r\n,1.5\r\n",
    );
    raw(
        &s,
        &mut conn,
        "*4\r\n$5\r\nZRANK\r\n$6\r\n{bar}a\r\n$1\r\nz\r\n$9\r\nWITHSCORE\r\n",
        "_\r\n",
    );
}
