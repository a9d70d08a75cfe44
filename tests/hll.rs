//! Black-box tests of the HyperLogLog commands on a 2-shard server, with keys on both
//! shards and the cross-shard PFCOUNT / PFMERGE; when `redis-server` is installed, the
//! same operations run against it and the HLL strings must be byte-identical.

mod common;
use common::*;

use redis::{cmd, Connection};

/// Keys on shard 0 ("bar" and its hash tag) and shard 1 ("foo").
const A: &str = "{bar}a";
const A2: &str = "{bar}b";
const B: &str = "{foo}a";
const B2: &str = "{foo}b";

fn pfadd(c: &mut Connection, key: &str, elements: impl IntoIterator<Item = String>) -> i64 {
    let mut command = cmd("PFADD");
    command.arg(key);
    for e in elements {
        command.arg(e);
    }
    command.query(c).expect("pfadd")
}

fn get_bytes(c: &mut Connection, key: &str) -> Vec<u8> {
    cmd("GET").arg(key).query(c).expect("get")
}

#[test]
fn pfadd_pfcount_on_both_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    for key in [A, B] {
        assert_eq!(q::<i64>(&mut c, &["PFADD", key]), 1);
        assert_eq!(q::<i64>(&mut c, &["EXISTS", key]), 1);
        assert_eq!(q::<i64>(&mut c, &["PFCOUNT", key]), 0);
        assert_eq!(q::<i64>(&mut c, &["PFADD", key, "a", "b", "c"]), 1);
        assert_eq!(q::<i64>(&mut c, &["PFADD", key, "a", "b", "c"]), 0);
        assert_eq!(q::<i64>(&mut c, &["PFCOUNT", key]), 3);
        assert_eq!(q::<String>(&mut c, &["PFDEBUG", "ENCODING", key]), "sparse");
        // The cached cardinality lives in the header; an update invalidates it.
        assert_eq!(get_bytes(&mut c, key)[15], 0x00);
        assert_eq!(q::<i64>(&mut c, &["PFADD", key, "1", "2", "3"]), 1);
        assert_eq!(get_bytes(&mut c, key)[15], 0x80);
        assert_eq!(q::<i64>(&mut c, &["PFCOUNT", key]), 6);
        assert_eq!(q::<i64>(&mut c, &["PFDEBUG", "TODENSE", key]), 1);
        assert_eq!(q::<i64>(&mut c, &["PFDEBUG", "TODENSE", key]), 0);
        assert_eq!(q::<String>(&mut c, &["PFDEBUG", "ENCODING", key]), "dense");
        assert_eq!(q::<i64>(&mut c, &["PFCOUNT", key]), 6);
        assert_eq!(
            q::<Vec<i64>>(&mut c, &["PFDEBUG", "GETREG", key]).len(),
            16384
        );
    }
    assert_eq!(q::<i64>(&mut c, &["PFCOUNT", "nokey"]), 0);
}

#[test]
fn multi_key_pfcount_and_pfmerge_across_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    pfadd(&mut c, A, (0..1000).map(|i| format!("x{i}")));
    pfadd(&mut c, B, (500..1500).map(|i| format!("x{i}")));
    q::<i64>(&mut c, &["PFDEBUG", "TODENSE", B]);
    pfadd(&mut c, A2, (0..3).map(|i| format!("y{i}")));
    let union: i64 = q(&mut c, &["PFCOUNT", A, B, A2, "{foo}missing"]);
    assert!((union - 1503).abs() < 1503 / 20, "{union}");
    assert_eq!(q::<String>(&mut c, &["PFMERGE", B2, A, B, A2]), "OK");
    assert_eq!(q::<i64>(&mut c, &["PFCOUNT", B2]), union);
    // A dense source makes the destination dense.
    assert_eq!(q::<String>(&mut c, &["PFDEBUG", "ENCODING", B2]), "dense");
    // The destination itself takes part in the merge, and keeps its TTL.
    assert_eq!(q::<String>(&mut c, &["PFMERGE", A2, B]), "OK");
    let merged: i64 = q(&mut c, &["PFCOUNT", A2]);
    assert!((merged - 1003).abs() < 60, "{merged}");
    q::<i64>(&mut c, &["EXPIRE", B2, "100"]);
    assert_eq!(q::<String>(&mut c, &["PFMERGE", B2, A]), "OK");
    assert!(q::<i64>(&mut c, &["TTL", B2]) > 0);
    // Merging nothing creates an empty HLL.
    assert_eq!(
        q::<String>(&mut c, &["PFMERGE", "{bar}new", "{foo}none"]),
        "OK"
    );
    assert_eq!(q::<i64>(&mut c, &["PFCOUNT", "{bar}new"]), 0);
}

#[test]
fn type_and_corruption_errors() {
    let s = Server::start(2);
    let mut c = s.client();
    q::<String>(&mut c, &["SET", B, "bar"]);
    pfadd(&mut c, A, ["a".to_string()]);
    assert!(err(&mut c, &["PFADD", B, "1"]).contains("Key is not a valid HyperLogLog"));
    assert!(err(&mut c, &["PFCOUNT", B]).contains("WRONGTYPE"));
    assert!(err(&mut c, &["PFCOUNT", A, B]).contains("WRONGTYPE"));
    assert!(err(&mut c, &["PFMERGE", A, B]).contains("WRONGTYPE"));
    assert!(err(&mut c, &["PFMERGE", B, A]).contains("WRONGTYPE"));
    q::<i64>(&mut c, &["LPUSH", B2, "x"]);
    assert!(err(&mut c, &["PFCOUNT", A, B2]).contains("Operation against"));
    // Extra bytes after the opcodes.
    q::<i64>(&mut c, &["APPEND", A, "hello"]);
    assert!(err(&mut c, &["PFCOUNT", A]).contains("Corrupted HLL object detected"));
    assert!(err(&mut c, &["PFCOUNT", A, "{foo}x"]).contains("INVALIDOBJ"));
    // Broken magic, encoding, dense length.
    for (off, byte) in [("0", "0123"), ("4", "x"), ("4", "\x00")] {
        q::<i64>(&mut c, &["DEL", A]);
        pfadd(&mut c, A, ["a".to_string()]);
        q::<i64>(&mut c, &["SETRANGE", A, off, byte]);
        assert!(err(&mut c, &["PFCOUNT", A]).contains("WRONGTYPE"), "{off}");
    }
    assert!(err(&mut c, &["PFDEBUG", "ENCODING", "nokey"]).contains("does not exist"));
    pfadd(&mut c, A2, ["a".to_string()]);
    assert!(err(&mut c, &["PFDEBUG", "NOPE", A2]).contains("Unknown PFDEBUG subcommand 'NOPE'"));
    assert_eq!(q::<String>(&mut c, &["PFSELFTEST"]), "OK");
}

#[test]
fn values_survive_get_set_and_dump_restore() {
    let s = Server::start(2);
    let mut c = s.client();
    pfadd(&mut c, A, (0..200).map(|i| i.to_string()));
    let bytes = get_bytes(&mut c, A);
    let _: () = cmd("SET").arg(B).arg(&bytes).query(&mut c).expect("set");
    assert_eq!(
        q::<i64>(&mut c, &["PFCOUNT", B]),
        q::<i64>(&mut c, &["PFCOUNT", A])
    );
    let dump: Vec<u8> = cmd("DUMP").arg(A).query(&mut c).expect("dump");
    let _: () = cmd("RESTORE")
        .arg(B2)
        .arg(0)
        .arg(&dump)
        .query(&mut c)
        .expect("restore");
    assert_eq!(q::<i64>(&mut c, &["PFADD", B2, "0"]), 0);
    assert_eq!(
        q::<i64>(&mut c, &["PFCOUNT", B2]),
        q::<i64>(&mut c, &["PFCOUNT", A])
    );
}

#[test]
fn sparse_promotes_to_dense_at_the_configured_size() {
    let s = Server::start(2);
    let mut c = s.client();
    q::<String>(&mut c, &["CONFIG", "SET", "hll-sparse-max-bytes", "3000"]);
    let mut n = 0;
    while n < 12_000 {
        pfadd(&mut c, B, (n..n + 200).map(|i| format!("e{i}")));
        n += 200;
        let card: i64 = q(&mut c, &["PFCOUNT", B]);
        assert!((card - n).abs() * 20 < card.max(1), "{n}: {card}");
        let enc: String = q(&mut c, &["PFDEBUG", "ENCODING", B]);
        if n < 1000 {
            assert_eq!(enc, "sparse");
        } else if n > 10_000 {
            assert_eq!(enc, "dense");
        }
    }
}

// ---------------------------------------------------------------------------
// Byte compatibility with a real redis-server, when one is installed
// ---------------------------------------------------------------------------

#[test]
fn byte_identical_to_redis() {
    let Some(redis) = ReferenceRedis::start() else {
        eprintln!("redis-server not available: comparison skipped");
        return;
    };
    let s = Server::start(2);
    let mut ours = s.client();
    let mut theirs = redis::Client::open(format!("redis://127.0.0.1:{}/", redis.port))
        .and_then(|c| c.get_connection())
        .expect("connect to redis-server");
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for (key, total, chunk, max_bytes) in [
        (A, 5, 1, "3000"),
        (B, 300, 7, "3000"),
        (A2, 2500, 100, "3000"),
        (B2, 20_000, 1000, "3000"),
        ("{bar}big", 3000, 50, "100000"),
    ] {
        for c in [&mut ours, &mut theirs] {
            q::<String>(c, &["CONFIG", "SET", "hll-sparse-max-bytes", max_bytes]);
        }
        let mut added = 0;
        while added < total {
            let elements: Vec<String> = (0..chunk)
                .map(|_| format!("{:x}", next() % 50_000))
                .collect();
            added += chunk;
            let a = pfadd(&mut ours, key, elements.clone());
            let b = pfadd(&mut theirs, key, elements);
            assert_eq!(a, b, "{key} pfadd reply after {added}");
            assert_eq!(
                get_bytes(&mut ours, key),
                get_bytes(&mut theirs, key),
                "{key} after {added}"
            );
        }
        let a: i64 = q(&mut ours, &["PFCOUNT", key]);
        let b: i64 = q(&mut theirs, &["PFCOUNT", key]);
        assert_eq!(a, b, "{key} count");
        assert_eq!(
            get_bytes(&mut ours, key),
            get_bytes(&mut theirs, key),
            "{key} cached"
        );
    }
    for c in [&mut ours, &mut theirs] {
        q::<String>(c, &["CONFIG", "SET", "hll-sparse-max-bytes", "3000"]);
        q::<String>(c, &["PFMERGE", "{foo}m1", A, B]);
        q::<String>(c, &["PFMERGE", "{bar}m2", B, B2, A2]);
    }
    for key in ["{foo}m1", "{bar}m2"] {
        assert_eq!(
            get_bytes(&mut ours, key),
            get_bytes(&mut theirs, key),
            "{key}"
        );
    }
    let a: i64 = q(&mut ours, &["PFCOUNT", A, B, A2, B2]);
    let b: i64 = q(&mut theirs, &["PFCOUNT", A, B, A2, B2]);
    assert_eq!(a, b);
}
