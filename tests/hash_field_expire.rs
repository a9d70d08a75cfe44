//! Black-box tests of hash field expiration (Redis 7.4's HEXPIRE family, HTTL family,
//! HPERSIST) on a 2-shard server: replies and errors as Redis 7.4's
//! tests/unit/type/hash-field-expire.tcl and command docs give them, lazy and active
//! expiry, keyspace events, DUMP/RESTORE and DEBUG RELOAD.

mod common;
#[path = "common/resp.rs"]
mod resp;

use common::*;
use resp::{arr, b, Raw};

use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

fn ints(c: &mut redis::Connection, args: &[&str]) -> Vec<i64> {
    q(c, args)
}

/// A hash with `n` fields `f0..` (a listpack up to 128 fields, a table beyond).
fn fill(c: &mut redis::Connection, key: &str, n: usize) {
    let mut args = vec!["HSET".to_string(), key.to_string()];
    for i in 0..n {
        args.push(format!("f{i}"));
        args.push(format!("v{i}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _: i64 = q(c, &args);
}

fn encoding(c: &mut redis::Connection, key: &str) -> String {
    q(c, &["OBJECT", "ENCODING", key])
}

#[test]
fn argument_errors_as_redis_7_4() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = q(&mut c, &["SET", "str", "x"]);
    fill(&mut c, "h", 3);
    for cmd in [
        &["HEXPIRE", "str", "10", "FIELDS", "1", "a"][..],
        &["HPEXPIREAT", "str", "10", "FIELDS", "1", "a"],
        &["HTTL", "str", "FIELDS", "1", "a"],
        &["HPEXPIRETIME", "str", "FIELDS", "1", "a"],
        &["HPERSIST", "str", "FIELDS", "1", "a"],
        // The type is checked before any other argument.
        &["HEXPIRE", "str", "-1", "FIELDS", "1", "a"],
        &["HTTL", "str", "NOFIELDS", "1", "a"],
    ] {
        assert!(err(&mut c, cmd).starts_with("WRONGTYPE"), "{cmd:?}");
    }
    let cases: &[(&[&str], &str)] = &[
        (
            &["HEXPIRE", "h", "-1", "FIELDS", "1", "f1"],
            "invalid expire time, must be >= 0",
        ),
        (
            &["HEXPIRE", "h", "-9223372036854775808", "FIELDS", "1", "f1"],
            "invalid expire time, must be >= 0",
        ),
        (
            &["HEXPIRE", "h", "abc", "FIELDS", "1", "f1"],
            "value is not an integer or out of range",
        ),
        (
            &["HEXPIRE", "h", "281474976710", "FIELDS", "1", "f1"],
            "invalid expire time in 'hexpire' command",
        ),
        (
            &["HPEXPIRE", "h", "281474976710656", "FIELDS", "1", "f1"],
            "invalid expire time in 'hpexpire' command",
        ),
        (
            &["HEXPIREAT", "h", "70368744178", "FIELDS", "1", "f1"],
            "invalid expire time in 'hexpireat' command",
        ),
        (
            &["HPEXPIREAT", "h", "70368744177664", "FIELDS", "1", "f1"],
            "invalid expire time in 'hpexpireat' command",
        ),
        (
            &["HPEXPIRE", "h", "1000", "NX", "FIELDS", "0", "f1"],
            "Parameter `numFields` should be greater than 0",
        ),
        (
            &["HPEXPIRE", "h", "1000", "FIELDS", "x", "f1"],
            "Parameter `numFields` should be greater than 0",
        ),
        (
            &[
                "HPEXPIRE", "h", "1000", "NX", "FIELDS", "4", "f1", "f2", "f3",
            ],
            "The `numfields` parameter must match the number of arguments",
        ),
        (
            &[
                "HPEXPIRE", "h", "1000", "NX", "FIELDS", "2", "f1", "f2", "f3",
            ],
            "The `numfields` parameter must match the number of arguments",
        ),
        (
            &["HPEXPIRE", "h", "1000", "BOGUS", "FIELDS", "1", "f1"],
            "Mandatory argument FIELDS is missing or not at the right position",
        ),
        (
            &["HPEXPIRE", "h", "1000", "1", "f1", "f2"],
            "Mandatory argument FIELDS is missing or not at the right position",
        ),
        (
            &["HTTL", "h", "FIELDS", "0", "f1"],
            "Number of fields must be a positive integer",
        ),
        (
            &["HTTL", "h", "FIELDS", "-1", "f1"],
            "Number of fields must be a positive integer",
        ),
        (
            &["HTTL", "h", "FIELDS", "1", "f1", "f2"],
            "The `numfields` parameter must match the number of arguments",
        ),
        (
            &["HTTL", "h", "FIELD", "1", "f1"],
            "Mandatory argument FIELDS is missing or not at the right position",
        ),
        (
            &["HPERSIST", "h", "FIELDS", "2", "f1", "f2", "f3"],
            "The `numfields` parameter must match the number of arguments",
        ),
        (
            &["HPERSIST", "h", "FIELDS", "0", "f1"],
            "Number of fields must be a positive integer",
        ),
        (
            &["HPERSIST", "h", "FIELDS", "1"],
            "wrong number of arguments for 'hpersist' command",
        ),
        (
            &["HEXPIRE", "h", "10", "FIELDS", "1"],
            "wrong number of arguments for 'hexpire' command",
        ),
        (
            &["HPEXPIRETIME", "h", "FIELDS", "1"],
            "wrong number of arguments for 'hpexpiretime' command",
        ),
    ];
    for (cmd, want) in cases {
        let got = err(&mut c, cmd);
        assert!(got.contains(want), "{cmd:?}: {got}");
    }
    // Errors leave the fields as they were.
    assert_eq!(ints(&mut c, &["HTTL", "h", "FIELDS", "1", "f1"]), vec![-1]);
}

#[test]
fn hexpire_codes_conditions_and_reads_on_both_encodings() {
    let s = Server::start(2);
    let mut c = s.client();
    for (key, n) in [(KEY_SHARD0, 5), (KEY_SHARD1, 300)] {
        fill(&mut c, key, n);
        let want_enc = if n > 128 { "hashtable" } else { "listpack" };
        assert_eq!(encoding(&mut c, key), want_enc);
        let e = |c: &mut redis::Connection, args: &[&str]| -> Vec<i64> {
            let mut full = vec![args[0], key];
            full.extend_from_slice(&args[1..]);
            ints(c, &full)
        };
        // Missing key: -2 for every field, and nothing is created.
        assert_eq!(
            ints(&mut c, &["HEXPIRE", "nokey", "10", "FIELDS", "2", "a", "b"]),
            vec![-2, -2]
        );
        assert_eq!(
            ints(&mut c, &["HTTL", "nokey", "FIELDS", "1", "a"]),
            vec![-2]
        );
        assert_eq!(
            ints(&mut c, &["HPERSIST", "nokey", "FIELDS", "1", "a"]),
            vec![-2]
        );
        assert_eq!(q::<i64>(&mut c, &["EXISTS", "nokey"]), 0);

        assert_eq!(
            e(&mut c, &["HTTL", "FIELDS", "2", "f0", "nope"]),
            vec![-1, -2]
        );
        assert_eq!(
            e(&mut c, &["HEXPIRE", "100", "FIELDS", "2", "f0", "nope"]),
            vec![1, -2]
        );
        if n <= 128 {
            assert_eq!(encoding(&mut c, key), "listpackex");
        }
        let ttl = e(&mut c, &["HTTL", "FIELDS", "1", "f0"])[0];
        assert!((99..=100).contains(&ttl), "{ttl}");
        let pttl = e(&mut c, &["HPTTL", "FIELDS", "1", "f0"])[0];
        assert!((98_000..=100_000).contains(&pttl), "{pttl}");
        let at = e(&mut c, &["HPEXPIRETIME", "FIELDS", "1", "f0"])[0];
        assert!((at - now_ms() - 100_000).abs() < 2000, "{at}");
        assert_eq!(
            e(&mut c, &["HEXPIRETIME", "FIELDS", "1", "f0"])[0],
            (at + 999) / 1000
        );

        // NX: only fields without a deadline; XX: only those with one.
        assert_eq!(
            e(&mut c, &["HEXPIRE", "200", "NX", "FIELDS", "2", "f0", "f1"]),
            vec![0, 1]
        );
        assert_eq!(
            e(&mut c, &["HEXPIRE", "300", "XX", "FIELDS", "2", "f1", "f2"]),
            vec![1, 0]
        );
        // GT / LT: no deadline is infinite, so GT never and LT always applies to it.
        assert_eq!(
            e(&mut c, &["HEXPIRE", "50", "GT", "FIELDS", "2", "f1", "f2"]),
            vec![0, 0]
        );
        assert_eq!(
            e(&mut c, &["HEXPIRE", "400", "gt", "FIELDS", "1", "f1"]),
            vec![1]
        );
        assert_eq!(
            e(&mut c, &["HEXPIRE", "500", "LT", "FIELDS", "2", "f1", "f2"]),
            vec![0, 1]
        );
        assert_eq!(
            e(&mut c, &["HEXPIRE", "10", "lt", "FIELDS", "1", "f1"]),
            vec![1]
        );
        assert_eq!(
            e(&mut c, &["HTTL", "FIELDS", "3", "f0", "f1", "f2"]),
            vec![100, 10, 500]
        );
        // The AT forms take absolute times.
        let at = now_ms() + 50_000;
        assert_eq!(
            e(
                &mut c,
                &["HPEXPIREAT", &at.to_string(), "FIELDS", "1", "f0"]
            ),
            vec![1]
        );
        assert_eq!(e(&mut c, &["HPEXPIRETIME", "FIELDS", "1", "f0"]), vec![at]);
        let secs = now_ms() / 1000 + 70;
        assert_eq!(
            e(
                &mut c,
                &["HEXPIREAT", &secs.to_string(), "FIELDS", "1", "f0"]
            ),
            vec![1]
        );
        assert_eq!(e(&mut c, &["HEXPIRETIME", "FIELDS", "1", "f0"]), vec![secs]);

        // HPERSIST: 1 dropped, -1 had none, -2 no such field.
        assert_eq!(
            e(&mut c, &["HPERSIST", "FIELDS", "3", "f0", "f3", "nope"]),
            vec![1, -1, -2]
        );
        assert_eq!(e(&mut c, &["HTTL", "FIELDS", "1", "f0"]), vec![-1]);

        // A time already past deletes the field (2), and the key with its last field.
        assert_eq!(
            e(&mut c, &["HEXPIREAT", "1", "FIELDS", "2", "f1", "nope"]),
            vec![2, -2]
        );
        assert_eq!(e(&mut c, &["HPEXPIRE", "0", "FIELDS", "1", "f2"]), vec![2]);
        assert_eq!(q::<i64>(&mut c, &["HLEN", key]), n as i64 - 2);
        assert_eq!(q::<Option<String>>(&mut c, &["HGET", key, "f1"]), None);
        let rest: Vec<String> = (0..n)
            .filter(|i| ![1, 2].contains(i))
            .map(|i| format!("f{i}"))
            .collect();
        let mut args = vec!["HPEXPIRE", key, "0", "FIELDS"];
        let count = rest.len().to_string();
        args.push(&count);
        args.extend(rest.iter().map(String::as_str));
        assert!(ints(&mut c, &args).iter().all(|&r| r == 2));
        assert_eq!(q::<i64>(&mut c, &["EXISTS", key]), 0);
    }
}

#[test]
fn writes_keep_or_clear_field_ttls_as_redis_7_4() {
    let s = Server::start(2);
    let mut c = s.client();
    fill(&mut c, "h", 4);
    let _: i64 = q(&mut c, &["HSET", "h", "n", "1", "x", "1.5"]);
    assert_eq!(
        ints(
            &mut c,
            &["HEXPIRE", "h", "100", "FIELDS", "5", "f0", "f1", "f2", "n", "x"]
        ),
        vec![1; 5]
    );
    // HSET / HMSET overwriting a field drop its deadline; HSETNX leaves it.
    let _: i64 = q(&mut c, &["HSET", "h", "f0", "new"]);
    let _: () = q(&mut c, &["HMSET", "h", "f1", "new"]);
    let _: i64 = q(&mut c, &["HSETNX", "h", "f2", "new"]);
    // HINCRBY / HINCRBYFLOAT keep it.
    let _: i64 = q(&mut c, &["HINCRBY", "h", "n", "5"]);
    let _: String = q(&mut c, &["HINCRBYFLOAT", "h", "x", "1"]);
    assert_eq!(
        ints(
            &mut c,
            &["HTTL", "h", "FIELDS", "5", "f0", "f1", "f2", "n", "x"]
        ),
        vec![-1, -1, 100, 100, 100]
    );
    // HDEL drops the field and its deadline; a field set again starts without one.
    assert_eq!(q::<i64>(&mut c, &["HDEL", "h", "f2"]), 1);
    let _: i64 = q(&mut c, &["HSET", "h", "f2", "again"]);
    assert_eq!(ints(&mut c, &["HTTL", "h", "FIELDS", "1", "f2"]), vec![-1]);
    // RENAME and COPY carry the deadlines along.
    let _: () = q(&mut c, &["RENAME", "h", "h2"]);
    assert_eq!(ints(&mut c, &["HTTL", "h2", "FIELDS", "1", "n"]), vec![100]);
    let _: i64 = q(&mut c, &["COPY", "h2", "h3"]);
    assert_eq!(ints(&mut c, &["HTTL", "h3", "FIELDS", "1", "x"]), vec![100]);
}

#[test]
fn listpackex_orders_fields_by_deadline() {
    let s = Server::start(1);
    let mut c = s.client();
    fill(&mut c, "h", 4);
    let keys = |c: &mut redis::Connection| -> Vec<String> { q(c, &["HKEYS", "h"]) };
    assert_eq!(keys(&mut c), vec!["f0", "f1", "f2", "f3"]);
    let _: Vec<i64> = q(&mut c, &["HEXPIRE", "h", "300", "FIELDS", "1", "f2"]);
    let _: Vec<i64> = q(&mut c, &["HEXPIRE", "h", "200", "FIELDS", "1", "f3"]);
    // Fields with a deadline come first, earliest first, as Redis's listpackex keeps them.
    assert_eq!(keys(&mut c), vec!["f3", "f2", "f0", "f1"]);
    let _: Vec<i64> = q(&mut c, &["HPERSIST", "h", "FIELDS", "1", "f3"]);
    assert_eq!(keys(&mut c), vec!["f2", "f0", "f1", "f3"]);
    let _: i64 = q(&mut c, &["HSET", "h", "f2", "x"]);
    assert_eq!(keys(&mut c), vec!["f0", "f1", "f3", "f2"]);
    // Once listpackex, always (until it converts to a table).
    assert_eq!(encoding(&mut c, "h"), "listpackex");
}

#[test]
fn lazy_expiry_hides_and_deletes_fields_on_access() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = q(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    for (key, n) in [(KEY_SHARD0, 5), (KEY_SHARD1, 200)] {
        fill(&mut c, key, n);
        let _: Vec<i64> = q(&mut c, &["HPEXPIRE", key, "30", "FIELDS", "2", "f0", "f1"]);
        std::thread::sleep(Duration::from_millis(60));
        // Nothing expires actively, and EXISTS / DBSIZE do not look at fields.
        assert_eq!(q::<i64>(&mut c, &["EXISTS", key]), 1);
        assert_eq!(q::<i64>(&mut c, &["HLEN", key]), n as i64 - 2);
        assert_eq!(q::<Option<String>>(&mut c, &["HGET", key, "f0"]), None);
        assert_eq!(q::<i64>(&mut c, &["HEXISTS", key, "f1"]), 0);
        let all: Vec<String> = q(&mut c, &["HKEYS", key]);
        assert!(!all.contains(&"f0".to_string()) && all.len() == n - 2);
        let (_, scanned): (String, Vec<String>) = q(&mut c, &["HSCAN", key, "0", "COUNT", "1000"]);
        assert!(!scanned.contains(&"f1".to_string()));
        assert_eq!(ints(&mut c, &["HTTL", key, "FIELDS", "1", "f0"]), vec![-2]);
    }
    // The last field expiring takes the key; a write meets a clean hash.
    fill(&mut c, "one", 1);
    let _: Vec<i64> = q(&mut c, &["HPEXPIRE", "one", "20", "FIELDS", "1", "f0"]);
    fill(&mut c, "w", 2);
    let _: Vec<i64> = q(&mut c, &["HPEXPIRE", "w", "20", "FIELDS", "2", "f0", "f1"]);
    std::thread::sleep(Duration::from_millis(50));
    let rnd: Vec<String> = q(&mut c, &["HRANDFIELD", "one", "5"]);
    assert!(rnd.is_empty());
    assert_eq!(q::<i64>(&mut c, &["EXISTS", "one"]), 0);
    assert_eq!(
        q::<i64>(&mut c, &["HSET", "w", "f0", "x"]),
        1,
        "f0 had expired: new"
    );
    assert_eq!(q::<i64>(&mut c, &["HLEN", "w"]), 1);
    assert_eq!(q::<i64>(&mut c, &["DBSIZE"]), 3);
    assert_eq!(info_field(&mut c, "stats", "expired_subkeys"), "7");
}

#[test]
fn active_expiry_deletes_fields_nobody_touches_and_frees_memory() {
    let s = Server::start(2);
    let mut c = s.client();
    fill(&mut c, KEY_SHARD0, 2000);
    fill(&mut c, KEY_SHARD1, 10);
    let before: i64 = info_field(&mut c, "memory", "used_memory").parse().unwrap();
    // All but one field of the big hash, and every field of the small one, expire.
    let fields: Vec<String> = (1..2000).map(|i| format!("f{i}")).collect();
    let count = fields.len().to_string();
    let mut args = vec!["HPEXPIRE", KEY_SHARD0, "100", "FIELDS", &count];
    args.extend(fields.iter().map(String::as_str));
    assert_eq!(ints(&mut c, &args).len(), 1999);
    let small: Vec<String> = (0..10).map(|i| format!("f{i}")).collect();
    let mut args = vec!["HPEXPIRE", KEY_SHARD1, "100", "FIELDS", "10"];
    args.extend(small.iter().map(String::as_str));
    let _: Vec<i64> = q(&mut c, &args);
    assert!(
        eventually(Duration::from_secs(5), || info_field(
            &mut c,
            "stats",
            "expired_subkeys"
        ) == "2009"),
        "fields expired actively: {}",
        info_field(&mut c, "stats", "expired_subkeys")
    );
    // Checked without touching the hashes: the small one is gone, the big one shrank.
    assert_eq!(q::<i64>(&mut c, &["DBSIZE"]), 1);
    let after: i64 = info_field(&mut c, "memory", "used_memory").parse().unwrap();
    assert!(after < before - 50_000, "used_memory {before} -> {after}");
    assert_eq!(q::<i64>(&mut c, &["HLEN", KEY_SHARD0]), 1);
}

#[test]
fn keyspace_events() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = q(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "Egh"]);
    let mut sub = Raw::connect(s.port);
    assert_eq!(
        sub.c("psubscribe __keyevent@0__:*"),
        arr(vec![b("psubscribe"), b("__keyevent@0__:*"), resp::i(1)])
    );
    let _: i64 = q(&mut c, &["HSET", "h", "a", "1", "b", "2"]);
    let _: Vec<i64> = q(&mut c, &["HEXPIRE", "h", "100", "FIELDS", "1", "a"]);
    let _: Vec<i64> = q(&mut c, &["HEXPIRE", "h", "100", "NX", "FIELDS", "1", "a"]);
    let _: Vec<i64> = q(&mut c, &["HPERSIST", "h", "FIELDS", "1", "a"]);
    let _: Vec<i64> = q(&mut c, &["HPERSIST", "h", "FIELDS", "1", "a"]);
    let _: Vec<i64> = q(&mut c, &["HPEXPIRE", "h", "0", "FIELDS", "1", "a"]);
    let _: Vec<i64> = q(&mut c, &["HPEXPIRE", "h", "20", "FIELDS", "1", "b"]);
    std::thread::sleep(Duration::from_millis(40));
    let _: Option<String> = q(&mut c, &["HGET", "h", "b"]);
    let want = [
        ("hset", "h"),
        ("hexpire", "h"),
        // The NX that set nothing and the HPERSIST of nothing are silent.
        ("hpersist", "h"),
        ("hdel", "h"),
        ("hexpire", "h"),
        ("hexpired", "h"),
        ("del", "h"),
    ];
    for (ev, key) in want {
        assert_eq!(
            sub.event(),
            (format!("__keyevent@0__:{ev}"), key.to_string())
        );
    }
    // Active expiry: hexpired, and del with the last field.
    let _: i64 = q(&mut c, &["HSET", "h2", "a", "1"]);
    let _: Vec<i64> = q(&mut c, &["HPEXPIRE", "h2", "10", "FIELDS", "1", "a"]);
    assert_eq!(sub.event().0, "__keyevent@0__:hset");
    assert_eq!(sub.event().0, "__keyevent@0__:hexpire");
    assert_eq!(sub.event(), ("__keyevent@0__:hexpired".into(), "h2".into()));
    assert_eq!(sub.event(), ("__keyevent@0__:del".into(), "h2".into()));
}

/// The payload's RDB type byte.
fn dump_type(c: &mut redis::Connection, key: &str) -> u8 {
    let payload: Vec<u8> = q(c, &["DUMP", key]);
    payload[0]
}

#[test]
fn dump_restore_and_reload_keep_field_ttls() {
    let s = Server::start(2);
    let mut c = s.client();
    // Payloads pick listpack types up to 512 fields, as Redis 7.0's defaults do.
    for (key, n) in [(KEY_SHARD0, 4), (KEY_SHARD1, 600)] {
        fill(&mut c, key, n);
        let plain = dump_type(&mut c, key);
        assert_eq!(
            plain,
            if n > 512 { 4 } else { 16 },
            "no TTLs: Redis 7.0's types"
        );
        let at = now_ms() + 100_000;
        let _: Vec<i64> = q(
            &mut c,
            &[
                "HPEXPIREAT",
                key,
                &at.to_string(),
                "FIELDS",
                "2",
                "f1",
                "f3",
            ],
        );
        let _: Vec<i64> = q(
            &mut c,
            &[
                "HPEXPIREAT",
                key,
                &(at + 5).to_string(),
                "FIELDS",
                "1",
                "f2",
            ],
        );
        // RDB_TYPE_HASH_LISTPACK_EX (25) and RDB_TYPE_HASH_METADATA (24).
        assert_eq!(dump_type(&mut c, key), if n > 512 { 24 } else { 25 });
        let payload: Vec<u8> = q(&mut c, &["DUMP", key]);
        let copy = format!("{key}:copy");
        let _: () = redis::cmd("RESTORE")
            .arg(&copy)
            .arg(0)
            .arg(&payload)
            .query(&mut c)
            .unwrap();
        let want = vec![at, at + 5, at, -1];
        let got = ints(
            &mut c,
            &["HPEXPIRETIME", &copy, "FIELDS", "4", "f1", "f2", "f3", "f0"],
        );
        assert_eq!(got, want);
        let all: Vec<String> = q(&mut c, &["HGETALL", &copy]);
        assert_eq!(all.len(), n * 2);
        if n <= 128 {
            assert_eq!(encoding(&mut c, &copy), "listpackex");
            // Redis 7.4's order (a field goes before those with the same deadline),
            // kept through the payload.
            let order: Vec<String> = q(&mut c, &["HKEYS", &copy]);
            assert_eq!(order, vec!["f3", "f1", "f2", "f0"]);
            assert_eq!(q::<Vec<String>>(&mut c, &["HKEYS", key]), order);
        }
        // Persisting every field brings back the plain encoding's payload type.
        let _: Vec<i64> = q(
            &mut c,
            &["HPERSIST", &copy, "FIELDS", "3", "f1", "f2", "f3"],
        );
        assert_eq!(dump_type(&mut c, &copy), plain);
    }
    assert_eq!(q::<String>(&mut c, &["DEBUG", "RELOAD"]), "OK");
    for key in [KEY_SHARD0, KEY_SHARD1] {
        let got = ints(&mut c, &["HTTL", key, "FIELDS", "2", "f1", "f0"]);
        assert!(
            (99..=100).contains(&got[0]) && got[1] == -1,
            "{key}: {got:?}"
        );
    }
    // A field loaded past its deadline expires after the load.
    let _: Vec<i64> = q(&mut c, &["HPEXPIRE", KEY_SHARD0, "30", "FIELDS", "1", "f0"]);
    let _: () = q(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    assert_eq!(q::<String>(&mut c, &["DEBUG", "RELOAD"]), "OK");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(q::<i64>(&mut c, &["HEXISTS", KEY_SHARD0, "f0"]), 0);
    assert_eq!(q::<i64>(&mut c, &["HLEN", KEY_SHARD0]), 3);
}

#[test]
fn restore_rejects_bad_field_ttl_payloads() {
    let s = Server::start(1);
    let mut c = s.client();
    fill(&mut c, "h", 3);
    let _: Vec<i64> = q(&mut c, &["HPEXPIRE", "h", "100000", "FIELDS", "1", "f1"]);
    let payload: Vec<u8> = q(&mut c, &["DUMP", "h"]);
    // A truncated body (checksum redone) is refused, not half-loaded.
    let _: () = q(&mut c, &["DEBUG", "SET-SKIP-CHECKSUM-VALIDATION", "1"]);
    let body = payload.len() - 10;
    let mut cut = payload[..body - 3].to_vec();
    cut.extend_from_slice(&payload[body..]);
    let e = redis::cmd("RESTORE")
        .arg("bad")
        .arg(0)
        .arg(&cut)
        .query::<()>(&mut c);
    assert!(e.is_err());
    assert_eq!(q::<i64>(&mut c, &["EXISTS", "bad"]), 0);
}

/// A field expiring is a change of its key: an EXEC watching it fails, whether the
/// field went by the active cycle or by a read that found it due.
#[test]
fn field_expiry_aborts_watchers() {
    let s = Server::start(2);
    let mut c = s.client();
    for active in [true, false] {
        let _: () = q(
            &mut c,
            &["DEBUG", "SET-ACTIVE-EXPIRE", if active { "1" } else { "0" }],
        );
        let _: i64 = q(&mut c, &["HSET", "w", "a", "1", "b", "2"]);
        let _: Vec<i64> = q(&mut c, &["HPEXPIRE", "w", "30", "FIELDS", "1", "a"]);
        let _: () = q(&mut c, &["WATCH", "w"]);
        if active {
            assert!(eventually(Duration::from_secs(3), || {
                info_field(&mut c, "stats", "expired_subkeys") == "1"
            }));
        } else {
            std::thread::sleep(Duration::from_millis(50));
            let mut other = s.client();
            assert_eq!(q::<i64>(&mut other, &["HLEN", "w"]), 1);
        }
        let _: () = q(&mut c, &["MULTI"]);
        let _: String = q(&mut c, &["SET", "x", "1"]);
        assert_eq!(
            q::<redis::Value>(&mut c, &["EXEC"]),
            redis::Value::Nil,
            "active: {active}"
        );
        let _: i64 = q(&mut c, &["DEL", "w"]);
    }
}

/// SORT's `key->field` lookups do not see a field past its deadline.
#[test]
fn sort_lookups_skip_expired_fields() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = q(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    let _: i64 = q(&mut c, &["RPUSH", "l", "1", "2"]);
    let _: i64 = q(&mut c, &["HSET", "o_1", "v", "a"]);
    let _: i64 = q(&mut c, &["HSET", "o_2", "v", "b", "w", "c"]);
    let _: Vec<i64> = q(&mut c, &["HPEXPIRE", "o_2", "20", "FIELDS", "1", "v"]);
    std::thread::sleep(Duration::from_millis(50));
    let got: Vec<Option<String>> = q(&mut c, &["SORT", "l", "GET", "o_*->v"]);
    assert_eq!(got, vec![Some("a".to_string()), None]);
}
