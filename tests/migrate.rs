//! MIGRATE from a 2-shard Tessera to a real redis-server 7.0.15 and to another
//! Tessera: keys on both shards move (or are copied) with their TTLs, the target's
//! errors and a dead target come back as Redis words them, AUTH / AUTH2 reach the
//! target, and the source's replicas see the moved keys deleted (one DEL).

mod common;
use common::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

fn migrate(c: &mut redis::Connection, args: &[&str]) -> Result<String, String> {
    let mut cmd = redis::cmd("MIGRATE");
    for a in args {
        cmd.arg(*a);
    }
    cmd.query::<String>(c).map_err(|e| e.to_string())
}

fn exists(c: &mut redis::Connection, key: &str) -> bool {
    q::<i64>(c, &["EXISTS", key]) == 1
}

/// Moves, copies, REPLACE and the KEYS form, to `target`'s database 3.
fn moves_and_copies(src: &mut redis::Connection, target: &mut redis::Connection, port: &str) {
    let _: () = q(src, &["SET", KEY_SHARD0, "v0"]);
    let _: i64 = q(src, &["RPUSH", KEY_SHARD1, "a", "b"]);
    let _: i64 = q(src, &["PEXPIRE", KEY_SHARD1, "100000"]);
    let _: i64 = q(src, &["HSET", "h", "f", "v"]);
    let m = |c: &mut redis::Connection, args: &[&str]| {
        let mut all = vec!["127.0.0.1", port];
        all.extend_from_slice(args);
        migrate(c, &all)
    };
    assert_eq!(m(src, &["missing", "3", "1000"]), Ok("NOKEY".into()));
    assert_eq!(m(src, &[KEY_SHARD0, "3", "1000"]), Ok("OK".into()));
    assert!(!exists(src, KEY_SHARD0));
    let _: () = q(target, &["SELECT", "3"]);
    assert_eq!(q::<String>(target, &["GET", KEY_SHARD0]), "v0");
    let keys = ["", "3", "1000", "COPY", "KEYS", KEY_SHARD1, "h", "missing"];
    assert_eq!(m(src, &keys), Ok("OK".into()));
    assert!(exists(src, KEY_SHARD1) && exists(src, "h"));
    let ttl: i64 = q(target, &["PTTL", KEY_SHARD1]);
    assert!(ttl > 90_000 && ttl <= 100_000, "ttl {ttl}");
    assert_eq!(
        q::<Vec<String>>(target, &["LRANGE", KEY_SHARD1, "0", "-1"]),
        ["a", "b"]
    );
    // Both keys exist there now: each RESTORE fails, nothing is deleted here.
    let e = m(src, &["", "3", "1000", "KEYS", KEY_SHARD1, "h"]).unwrap_err();
    assert!(
        e.contains("Target instance replied with error: BUSYKEY"),
        "{e}"
    );
    assert!(exists(src, KEY_SHARD1) && exists(src, "h"));
    assert_eq!(
        m(src, &["", "3", "1000", "REPLACE", "KEYS", KEY_SHARD1, "h"]),
        Ok("OK".into())
    );
    assert!(!exists(src, KEY_SHARD1) && !exists(src, "h"));
}

#[test]
fn migrate_to_redis_and_to_tessera() {
    let src = Server::start(2);
    let mut c = src.client();
    if let Some(redis) = ReferenceRedis::start() {
        moves_and_copies(&mut c, &mut redis.client(), &redis.port.to_string());
    }
    let other = Server::start(2);
    moves_and_copies(&mut c, &mut other.client(), &other.port.to_string());
}

#[test]
fn errors_and_authentication() {
    let src = Server::start(2);
    let mut c = src.client();
    let _: () = q(&mut c, &["SET", "k", "v"]);
    let err = |c: &mut redis::Connection, args: &[&str]| migrate(c, args).unwrap_err();
    let e = err(&mut c, &["127.0.0.1", "1", "k", "0", "1000", "KEYS", "x"]);
    assert!(
        e.contains("the key argument must be set to the empty string"),
        "{e}"
    );
    assert!(err(&mut c, &["127.0.0.1", "1", "k", "0", "1000", "AUTH"]).contains("syntax error"));
    assert!(err(&mut c, &["127.0.0.1", "1", "k", "x", "1000"]).contains("not an integer"));
    // Nothing listens on a port just freed.
    let dead = free_port().to_string();
    let e = err(&mut c, &["127.0.0.1", &dead, "k", "0", "200"]);
    assert!(
        e.starts_with("IOERR") && e.contains("error or timeout connecting to the client"),
        "{e}"
    );
    assert!(exists(&mut c, "k"));

    let target = Server::start_with(2, &["--requirepass", "secret"]);
    let port = target.port.to_string();
    let e = err(&mut c, &["127.0.0.1", &port, "k", "0", "1000"]);
    assert!(
        e.contains("Target instance replied with error: NOAUTH"),
        "{e}"
    );
    let e = err(
        &mut c,
        &["127.0.0.1", &port, "k", "0", "1000", "AUTH", "wrong"],
    );
    assert!(
        e.contains("Target instance replied with error: WRONGPASS"),
        "{e}"
    );
    assert!(exists(&mut c, "k"));
    assert_eq!(
        migrate(
            &mut c,
            &[
                "127.0.0.1",
                &port,
                "k",
                "0",
                "1000",
                "AUTH2",
                "default",
                "secret"
            ]
        ),
        Ok("OK".into())
    );
    assert!(!exists(&mut c, "k"));
    // The credentials never reach the slowlog.
    let _: () = q(&mut c, &["SET", "k2", "v"]);
    let _: () = q(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    let _ = migrate(
        &mut c,
        &["127.0.0.1", &port, "k2", "0", "1000", "AUTH", "secret"],
    );
    let log: redis::Value = q(&mut c, &["SLOWLOG", "GET", "1"]);
    let text = format!("{log:?}");
    assert!(
        text.contains("(redacted)") && !text.contains("secret"),
        "{text}"
    );
    // COMMAND GETKEYS finds the keys as Redis's migrateGetKeys does.
    let keys: Vec<String> = q(
        &mut c,
        &[
            "COMMAND", "GETKEYS", "MIGRATE", "h", "1", "", "0", "5", "AUTH2", "u", "p", "KEYS",
            "a", "b",
        ],
    );
    assert_eq!(keys, ["a", "b"]);
}

/// What the source's replicas receive: one DEL of the keys that moved; nothing for
/// a COPY.
#[test]
fn moved_keys_propagate_as_one_del() {
    let src = Server::start(2);
    let target = Server::start(2);
    let port = target.port.to_string();
    let mut c = src.client();
    let mut s = src.raw();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.write_all(b"SYNC\r\n").unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let len: usize = line.trim_end().trim_start_matches('$').parse().unwrap();
    let mut rdb = vec![0; len];
    r.read_exact(&mut rdb).unwrap();
    let _: () = q(&mut c, &["MSET", KEY_SHARD0, "1", "other", "2"]);
    let _: () = q(&mut c, &["SET", KEY_SHARD1, "3"]);
    let copy = [
        "127.0.0.1",
        &port,
        "",
        "0",
        "1000",
        "COPY",
        "KEYS",
        KEY_SHARD1,
    ];
    assert_eq!(migrate(&mut c, &copy), Ok("OK".into()));
    let both = [
        "127.0.0.1",
        &port,
        "",
        "0",
        "1000",
        "REPLACE",
        "KEYS",
        KEY_SHARD0,
        KEY_SHARD1,
    ];
    assert_eq!(migrate(&mut c, &both), Ok("OK".into()));
    let mut stream = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let want = format!(
        "*3\r\n$3\r\nDEL\r\n${}\r\n{KEY_SHARD0}\r\n${}\r\n{KEY_SHARD1}\r\n",
        KEY_SHARD0.len(),
        KEY_SHARD1.len()
    );
    while !String::from_utf8_lossy(&stream).contains(&want) {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            String::from_utf8_lossy(&stream)
        );
        let mut buf = [0u8; 4096];
        match r.read(&mut buf) {
            Ok(n) if n > 0 => stream.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&stream);
    assert!(text.contains(&want), "{text}");
    assert!(
        !text.contains("MIGRATE") && !text.to_lowercase().contains("migrate"),
        "{text}"
    );
}
