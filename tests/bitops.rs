//! Black-box tests of the bitmap and bitfield commands against a 2-shard server.

mod common;
use common::*;

use redis::{Connection, RedisResult};

fn int(c: &mut Connection, args: &[&[u8]]) -> i64 {
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(c).unwrap()
}

fn err<T: redis::FromRedisValue + std::fmt::Debug>(r: RedisResult<T>) -> String {
    let e = r.expect_err("expected an error");
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

fn get(c: &mut Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(c).unwrap()
}

/// Makes `key` a list, for WRONGTYPE checks; false while this build has no lists.
fn make_list(c: &mut Connection, key: &str) -> bool {
    match redis::cmd("LPUSH").arg(key).arg("x").query::<i64>(c) {
        Ok(_) => true,
        Err(e) if e.to_string().contains("unknown command") => false,
        Err(e) => panic!("LPUSH: {e}"),
    }
}

fn set(c: &mut Connection, key: &str, v: &[u8]) {
    let _: () = redis::cmd("SET").arg(key).arg(v).query(c).unwrap();
}

#[test]
fn setbit_getbit_use_redis_layout() {
    let s = Server::start(2);
    let mut c = s.client();
    for key in [KEY_SHARD0, KEY_SHARD1] {
        assert_eq!(int(&mut c, &[b"SETBIT", key.as_bytes(), b"1", b"1"]), 0);
        assert_eq!(int(&mut c, &[b"SETBIT", key.as_bytes(), b"15", b"1"]), 0);
        assert_eq!(get(&mut c, key), Some(vec![0x40, 0x01]));
        assert_eq!(int(&mut c, &[b"SETBIT", key.as_bytes(), b"1", b"0"]), 1);
        assert_eq!(int(&mut c, &[b"GETBIT", key.as_bytes(), b"15"]), 1);
        assert_eq!(int(&mut c, &[b"GETBIT", key.as_bytes(), b"1"]), 0);
        assert_eq!(int(&mut c, &[b"GETBIT", key.as_bytes(), b"100000"]), 0);
    }
    // A new key with a 0 bit is still created, zero-filled up to the offset.
    assert_eq!(int(&mut c, &[b"SETBIT", b"z", b"23", b"0"]), 0);
    assert_eq!(get(&mut c, "z"), Some(vec![0, 0, 0]));
    // Integer-encoded strings are their decimal text: "1" is 0x31.
    let _: () = redis::cmd("SET").arg("n").arg(1).query(&mut c).unwrap();
    assert_eq!(int(&mut c, &[b"GETBIT", b"n", b"2"]), 1);
    assert_eq!(int(&mut c, &[b"SETBIT", b"n", b"6", b"1"]), 0);
    assert_eq!(get(&mut c, "n"), Some(b"3".to_vec()));
    assert_eq!(int(&mut c, &[b"GETBIT", b"missing", b"0"]), 0);
}

#[test]
fn setbit_keeps_ttl_and_checks_arguments() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("a")
        .arg("EX")
        .arg(100)
        .query(&mut c)
        .unwrap();
    int(&mut c, &[b"SETBIT", b"k", b"100", b"1"]);
    assert!(int(&mut c, &[b"TTL", b"k"]) > 0);

    let off = "ERR bit offset is not an integer or out of range";
    let bit = "ERR bit is not an integer or out of range";
    let q = |c: &mut Connection, o: &str, v: &str| {
        err(redis::cmd("SETBIT").arg("k").arg(o).arg(v).query::<i64>(c))
    };
    assert_eq!(q(&mut c, "4294967296", "1"), off);
    assert_eq!(q(&mut c, "-1", "1"), off);
    assert_eq!(q(&mut c, "x", "1"), off);
    assert_eq!(q(&mut c, "0", "2"), bit);
    assert_eq!(q(&mut c, "0", "-1"), bit);
    assert_eq!(q(&mut c, "0", "x"), bit);
    assert_eq!(
        err(redis::cmd("GETBIT")
            .arg("k")
            .arg("4294967296")
            .query::<i64>(&mut c)),
        off
    );

    if make_list(&mut c, "l") {
        assert!(err(redis::cmd("SETBIT")
            .arg("l")
            .arg(0)
            .arg(1)
            .query::<i64>(&mut c))
        .starts_with("WRONGTYPE"));
        assert!(
            err(redis::cmd("GETBIT").arg("l").arg(0).query::<i64>(&mut c)).starts_with("WRONGTYPE")
        );
        for cmd in ["BITCOUNT", "BITPOS"] {
            let r = redis::cmd(cmd)
                .arg("l")
                .arg(1)
                .arg(0)
                .arg(1)
                .arg("nounit")
                .query::<i64>(&mut c);
            assert!(err(r).starts_with("WRONGTYPE"), "{cmd}");
        }
        // Offset errors come before the type check, as in Redis.
        assert_eq!(
            err(redis::cmd("SETBIT")
                .arg("l")
                .arg(-1)
                .arg(1)
                .query::<i64>(&mut c)),
            off
        );
    }

    // The largest offset proto-max-bulk-len allows is rejected once the limit shrinks.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("proto-max-bulk-len")
        .arg("1mb")
        .query(&mut c)
        .unwrap();
    assert_eq!(q(&mut c, &(8 * 1024 * 1024).to_string(), "1"), off);
    assert_eq!(int(&mut c, &[b"SETBIT", b"big", b"8388607", b"1"]), 0);
    assert_eq!(int(&mut c, &[b"STRLEN", b"big"]), 1024 * 1024);
}

#[test]
fn bitcount_byte_and_bit_ranges() {
    let s = Server::start(2);
    let mut c = s.client();
    set(&mut c, "s", b"foobar");
    let n = |c: &mut Connection, a: &[&str]| {
        let mut cmd = redis::cmd("BITCOUNT");
        cmd.arg("s").arg(a);
        cmd.query::<i64>(c).unwrap()
    };
    assert_eq!(n(&mut c, &[]), 26);
    assert_eq!(n(&mut c, &["1", "1"]), 6);
    assert_eq!(n(&mut c, &["1", "-2"]), 18);
    assert_eq!(n(&mut c, &["-2", "1"]), 0);
    assert_eq!(n(&mut c, &["0", "1000"]), 26);
    assert_eq!(n(&mut c, &["5", "30", "BIT"]), 17);
    assert_eq!(n(&mut c, &["10", "-34", "bit"]), 4);
    assert_eq!(n(&mut c, &["-6", "-15", "bit"]), 0);
    assert_eq!(n(&mut c, &["0", "-1", "byte"]), 26);
    assert_eq!(n(&mut c, &["0", "4294967296"]), 26);
    assert_eq!(
        err(redis::cmd("BITCOUNT").arg("s").arg(0).query::<i64>(&mut c)),
        "ERR syntax error"
    );
    assert_eq!(
        err(redis::cmd("BITCOUNT")
            .arg("s")
            .arg(0)
            .arg(1)
            .arg("x")
            .query::<i64>(&mut c)),
        "ERR syntax error"
    );
    assert_eq!(
        err(redis::cmd("BITCOUNT")
            .arg("s")
            .arg("a")
            .arg(1)
            .query::<i64>(&mut c)),
        "ERR value is not an integer or out of range"
    );
    // Redis 7.0 answers 0 for a missing key before looking at the arguments.
    assert_eq!(int(&mut c, &[b"BITCOUNT", b"nokey", b"0"]), 0);
    set(&mut c, "e", b"");
    assert_eq!(int(&mut c, &[b"BITCOUNT", b"e"]), 0);
    assert_eq!(int(&mut c, &[b"BITCOUNT", b"e", b"0", b"-1", b"bit"]), 0);
}

#[test]
fn bitpos_semantics() {
    let s = Server::start(2);
    let mut c = s.client();
    let p = |c: &mut Connection, key: &str, a: &[&str]| {
        let mut cmd = redis::cmd("BITPOS");
        cmd.arg(key).arg(a);
        cmd.query::<i64>(c).unwrap()
    };
    assert_eq!(p(&mut c, "nokey", &["0"]), 0);
    assert_eq!(p(&mut c, "nokey", &["1"]), -1);
    set(&mut c, "s", b"\xff\xf0\x00");
    assert_eq!(p(&mut c, "s", &["0"]), 12);
    assert_eq!(p(&mut c, "s", &["0", "1", "-1", "bit"]), 12);
    set(&mut c, "s", b"\xff\xff\xff");
    // Past the end the string reads as zeros only while no end is given.
    assert_eq!(p(&mut c, "s", &["0"]), 24);
    assert_eq!(p(&mut c, "s", &["0", "0"]), 24);
    assert_eq!(p(&mut c, "s", &["0", "0", "-1"]), -1);
    assert_eq!(p(&mut c, "s", &["0", "0", "-1", "bit"]), -1);
    set(&mut c, "s", b"\x00\xff\x00");
    assert_eq!(p(&mut c, "s", &["1", "0", "-1"]), 8);
    assert_eq!(p(&mut c, "s", &["1", "2", "200"]), -1);
    assert_eq!(p(&mut c, "s", &["0", "2", "200"]), 16);
    assert_eq!(p(&mut c, "s", &["1", "8", "8", "bit"]), 8);
    assert_eq!(p(&mut c, "s", &["0", "8", "8", "bit"]), -1);
    assert_eq!(p(&mut c, "s", &["1", "9", "20", "BIT"]), 9);
    set(&mut c, "e", b"");
    assert_eq!(p(&mut c, "e", &["0"]), -1);
    assert_eq!(
        err(redis::cmd("BITPOS").arg("s").arg(2).query::<i64>(&mut c)),
        "ERR The bit argument must be 1 or 0."
    );
    assert_eq!(
        err(redis::cmd("BITPOS")
            .arg("s")
            .arg(1)
            .arg(0)
            .arg(1)
            .arg("bits")
            .query::<i64>(&mut c)),
        "ERR syntax error"
    );
    assert_eq!(
        err(redis::cmd("BITPOS")
            .arg("s")
            .arg(1)
            .arg(0)
            .arg(1)
            .arg("bit")
            .arg(1)
            .query::<i64>(&mut c)),
        "ERR syntax error"
    );
}

#[test]
fn bitop_on_one_shard_and_across_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    // Sources and destination on both shards: the coordinator path.
    set(&mut c, KEY_SHARD0, b"\x01\x02\xff\xff");
    set(&mut c, KEY_SHARD1, b"\x01\x02\xff");
    let dst = "{bar}dst";
    let cases: [(&str, &[u8]); 3] = [
        ("AND", b"\x01\x02\xff\x00"),
        ("or", b"\x01\x02\xff\xff"),
        ("Xor", b"\x00\x00\x00\xff"),
    ];
    for (op, want) in cases {
        for d in [dst, "{foo}dst"] {
            assert_eq!(
                int(
                    &mut c,
                    &[
                        b"BITOP",
                        op.as_bytes(),
                        d.as_bytes(),
                        KEY_SHARD0.as_bytes(),
                        KEY_SHARD1.as_bytes()
                    ]
                ),
                4
            );
            assert_eq!(get(&mut c, d).as_deref(), Some(want));
        }
    }
    // Missing keys are streams of zeros; AND with one is all zeros.
    assert_eq!(
        int(
            &mut c,
            &[b"BITOP", b"AND", b"{foo}r", b"nokey", KEY_SHARD0.as_bytes()]
        ),
        4
    );
    assert_eq!(get(&mut c, "{foo}r"), Some(vec![0, 0, 0, 0]));
    // NOT, destination overwriting its own source, on one shard and across.
    assert_eq!(
        int(
            &mut c,
            &[
                b"BITOP",
                b"NOT",
                KEY_SHARD0.as_bytes(),
                KEY_SHARD0.as_bytes()
            ]
        ),
        4
    );
    assert_eq!(get(&mut c, KEY_SHARD0), Some(vec![0xfe, 0xfd, 0, 0]));
    assert_eq!(
        int(
            &mut c,
            &[
                b"BITOP",
                b"NOT",
                KEY_SHARD0.as_bytes(),
                KEY_SHARD1.as_bytes()
            ]
        ),
        3
    );
    assert_eq!(get(&mut c, KEY_SHARD0), Some(vec![0xfe, 0xfd, 0]));
    // An all-empty result deletes the destination (and the TTL never survives).
    let _: () = redis::cmd("SET")
        .arg("{foo}t")
        .arg("x")
        .arg("EX")
        .arg(100)
        .query(&mut c)
        .unwrap();
    assert_eq!(
        int(&mut c, &[b"BITOP", b"OR", b"{foo}t", b"nokey", b"nokey2"]),
        0
    );
    assert_eq!(get(&mut c, "{foo}t"), None);
    let _: () = redis::cmd("SET")
        .arg("{foo}t")
        .arg("x")
        .arg("EX")
        .arg(100)
        .query(&mut c)
        .unwrap();
    int(&mut c, &[b"BITOP", b"OR", b"{foo}t", KEY_SHARD0.as_bytes()]);
    assert_eq!(int(&mut c, &[b"TTL", b"{foo}t"]), -1);
    // Integer-encoded sources.
    set(&mut c, "{bar}a", b"1");
    set(&mut c, "{foo}b", b"2");
    int(
        &mut c,
        &[b"BITOP", b"XOR", b"{bar}d", b"{bar}a", b"{foo}b", b"{bar}a"],
    );
    assert_eq!(get(&mut c, "{bar}d"), Some(b"2".to_vec()));
    // Errors.
    if make_list(&mut c, "{foo}l") {
        let r = redis::cmd("BITOP")
            .arg("OR")
            .arg("{bar}d")
            .arg("{bar}a")
            .arg("{foo}l")
            .query::<i64>(&mut c);
        assert!(err(r).starts_with("WRONGTYPE"));
        let r = redis::cmd("BITOP")
            .arg("OR")
            .arg("{foo}d")
            .arg("{foo}l")
            .query::<i64>(&mut c);
        assert!(err(r).starts_with("WRONGTYPE"));
        assert_eq!(get(&mut c, "{bar}d"), Some(b"2".to_vec()));
    }
    assert_eq!(
        err(redis::cmd("BITOP")
            .arg("NOT")
            .arg("{bar}d")
            .arg("{bar}a")
            .arg("{foo}b")
            .query::<i64>(&mut c)),
        "ERR BITOP NOT must be called with a single source key."
    );
    assert_eq!(
        err(redis::cmd("BITOP")
            .arg("NAND")
            .arg("{bar}d")
            .arg("{foo}b")
            .query::<i64>(&mut c)),
        "ERR syntax error"
    );
}

#[test]
fn bitop_across_shards_is_atomic_under_concurrent_writers() {
    let s = Server::start(2);
    let mut c = s.client();
    set(&mut c, KEY_SHARD0, b"\x00");
    set(&mut c, KEY_SHARD1, b"\x00");
    // A writer flips both sources together with MSET (atomic across shards); BITOP XOR
    // of the two must therefore always be zero.
    let port = s.port;
    let writer = std::thread::spawn(move || {
        let mut w = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .unwrap()
            .get_connection()
            .unwrap();
        for i in 0..300u32 {
            let v = [(i % 256) as u8];
            let _: () = redis::cmd("MSET")
                .arg(KEY_SHARD0)
                .arg(&v[..])
                .arg(KEY_SHARD1)
                .arg(&v[..])
                .query(&mut w)
                .unwrap();
        }
    });
    for _ in 0..300 {
        int(
            &mut c,
            &[
                b"BITOP",
                b"XOR",
                b"{foo}x",
                KEY_SHARD0.as_bytes(),
                KEY_SHARD1.as_bytes(),
            ],
        );
        assert_eq!(get(&mut c, "{foo}x"), Some(vec![0]));
    }
    writer.join().unwrap();
}

#[test]
fn bitfield_operations() {
    let s = Server::start(2);
    let mut c = s.client();
    let bf = |c: &mut Connection, a: &[&str]| {
        let mut cmd = redis::cmd("BITFIELD");
        cmd.arg(a);
        cmd.query::<Vec<Option<i64>>>(c).unwrap()
    };
    for key in [KEY_SHARD0, KEY_SHARD1] {
        assert_eq!(bf(&mut c, &[key, "set", "i8", "0", "-100"]), vec![Some(0)]);
        assert_eq!(
            bf(&mut c, &[key, "set", "i8", "0", "101", "get", "i8", "0"]),
            vec![Some(-100), Some(101)]
        );
        assert_eq!(get(&mut c, key), Some(vec![101]));
    }
    assert_eq!(
        bf(
            &mut c,
            &["b", "set", "u8", "0", "255", "incrby", "u8", "0", "100", "get", "u8", "0"]
        ),
        vec![Some(0), Some(99), Some(99)]
    );
    bf(
        &mut c,
        &[
            "abc", "set", "u8", "#0", "65", "set", "u8", "#1", "66", "SET", "u8", "#2", "67",
        ],
    );
    assert_eq!(get(&mut c, "abc"), Some(b"ABC".to_vec()));
    // Overflow policies apply to the operations after them.
    bf(&mut c, &["o", "set", "u8", "#0", "100"]);
    assert_eq!(
        bf(
            &mut c,
            &[
                "o", "overflow", "sat", "incrby", "u8", "#0", "257", "overflow", "fail", "incrby",
                "u8", "#0", "1", "overflow", "wrap", "incrby", "u8", "#0", "1"
            ]
        ),
        vec![Some(255), None, Some(0)]
    );
    assert_eq!(
        bf(
            &mut c,
            &["o2", "overflow", "sat", "set", "u8", "0", "-1", "get", "u8", "0"]
        ),
        vec![Some(0), Some(255)]
    );
    assert_eq!(
        bf(&mut c, &["o3", "overflow", "fail", "set", "i8", "0", "128"]),
        vec![None]
    );
    assert_eq!(get(&mut c, "o3"), Some(vec![0]));
    assert_eq!(
        bf(
            &mut c,
            &[
                "w",
                "set",
                "i64",
                "0",
                "9223372036854775807",
                "incrby",
                "i64",
                "0",
                "1"
            ]
        ),
        vec![Some(0), Some(i64::MIN)]
    );
    assert_eq!(
        bf(
            &mut c,
            &["w", "get", "u63", "1", "get", "i1", "0", "get", "u1", "0"]
        ),
        vec![Some(0), Some(-1), Some(1)]
    );
    // Regression #3564: fields at unaligned offsets beyond the end.
    assert_eq!(
        bf(
            &mut c,
            &["m", "SET", "i8", "0", "10", "SET", "i8", "64", "10", "INCRBY", "i8", "10", "99900"]
        ),
        vec![Some(0), Some(0), Some(60)]
    );
    assert_eq!(bf(&mut c, &["nokey"]), Vec::<Option<i64>>::new());
    assert_eq!(bf(&mut c, &["nokey", "get", "u8", "100"]), vec![Some(0)]);
    assert_eq!(int(&mut c, &[b"EXISTS", b"nokey"]), 0);
    set(&mut c, "one", b"1");
    assert_eq!(
        bf(&mut c, &["one", "get", "u1", "0", "get", "u8", "0"]),
        vec![Some(0), Some(49)]
    );

    let ty = "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";
    let e = |c: &mut Connection, a: &[&str]| {
        let mut cmd = redis::cmd("BITFIELD");
        cmd.arg(a);
        err(cmd.query::<Vec<Option<i64>>>(c))
    };
    assert_eq!(e(&mut c, &["x", "get", "u64", "0"]), ty);
    assert_eq!(e(&mut c, &["x", "get", "i65", "0"]), ty);
    assert_eq!(e(&mut c, &["x", "get", "x8", "0"]), ty);
    assert_eq!(
        e(&mut c, &["x", "get", "u8", "-1"]),
        "ERR bit offset is not an integer or out of range"
    );
    assert_eq!(
        e(&mut c, &["x", "get", "u8", "#x"]),
        "ERR bit offset is not an integer or out of range"
    );
    assert_eq!(e(&mut c, &["x", "get", "u8"]), "ERR syntax error");
    assert_eq!(
        e(&mut c, &["x", "set", "u8", "0", "a"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        e(&mut c, &["x", "overflow", "boom"]),
        "ERR Invalid OVERFLOW type specified"
    );
    assert_eq!(int(&mut c, &[b"EXISTS", b"x"]), 0);
    if make_list(&mut c, "l") {
        assert!(e(&mut c, &["l", "get", "u8", "0"]).starts_with("WRONGTYPE"));
        assert!(e(&mut c, &["l", "set", "u8", "0", "1"]).starts_with("WRONGTYPE"));
    }
}

#[test]
fn bitfield_ro_only_reads() {
    let s = Server::start(2);
    let mut c = s.client();
    set(&mut c, "k", b"\xff");
    let v: Vec<i64> = redis::cmd("BITFIELD_RO")
        .arg("k")
        .arg("get")
        .arg("i8")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(v, vec![-1]);
    let v: Vec<i64> = redis::cmd("BITFIELD_RO").arg("k").query(&mut c).unwrap();
    assert!(v.is_empty());
    let r = redis::cmd("BITFIELD_RO")
        .arg("k")
        .arg("set")
        .arg("u8")
        .arg(0)
        .arg(1)
        .arg("get")
        .arg("u8")
        .arg(0)
        .query::<Vec<i64>>(&mut c);
    assert_eq!(err(r), "ERR BITFIELD_RO only supports the GET subcommand");
    assert_eq!(get(&mut c, "k"), Some(vec![0xff]));
}
