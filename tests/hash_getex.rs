//! Black-box tests of Redis 8.0's HGETDEL, HGETEX and HSETEX on a 2-shard server:
//! replies, error texts and keyspace events as Redis 8.0's t_hash.c and its
//! tests/unit/type/hash-field-expire.tcl and tests/unit/pubsub.tcl give them, lazy and
//! active expiry, the key going with its last field, and what the AOF replays.
//!
//! There is no Redis 8 binary on this machine (redis-server is 7.0.15, without these
//! commands), so nothing here runs against a real Redis: the expectations are read
//! from Redis 8.0's source and its own tests. The propagated commands themselves are
//! checked in tests/replication_stream.rs, a replica's copy in tests/replica.rs.

mod common;
#[path = "common/resp.rs"]
mod resp;

use common::*;
use resp::{arr, b, bulks, e, i, now_ms, ok, setup, Raw, R};

use std::time::Duration;

/// A hash with `n` fields `f0..` valued `v0..` (a listpack up to 128, a table beyond).
fn fill(c: &mut Raw, key: &str, n: usize) {
    let mut args: Vec<Vec<u8>> = vec![b"HSET".to_vec(), key.as_bytes().to_vec()];
    for i in 0..n {
        args.push(format!("f{i}").into_bytes());
        args.push(format!("v{i}").into_bytes());
    }
    let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    assert_eq!(c.cmd(&args), i(n as i64));
}

fn nils(n: usize) -> R {
    arr(vec![R::Nil; n])
}

/// The integers of an array reply.
fn ints(r: R) -> Vec<i64> {
    r.items().iter().map(R::int).collect()
}

/// Every validation case of Redis 8.0's tests, with the exact error texts of its
/// source; WRONGTYPE comes first for HGETDEL / HGETEX (they look the key up before
/// parsing) and after the options for HSETEX (it parses first).
#[test]
fn argument_errors_as_redis_8_0() {
    let (_s, mut c) = setup();
    assert_eq!(c.c("SET str x"), ok());
    fill(&mut c, "h", 3);
    let wrongtype = e("WRONGTYPE Operation against a key holding the wrong kind of value");
    for cmd in [
        "HGETDEL str FIELDS 1 a",
        "HGETDEL str NOFIELDS 1 a",
        "HGETEX str FIELDS 1 a",
        "HGETEX str EX -1 FIELDS 1 a",
        "HSETEX str FIELDS 1 a b",
        "HSETEX str FNX EX 10 FIELDS 1 a b",
    ] {
        assert_eq!(c.c(cmd), wrongtype, "{cmd}");
    }
    assert_eq!(
        c.c("HSETEX str BOGUS FIELDS 1 a b"),
        e("ERR unknown argument: BOGUS")
    );
    let arity = |name: &str| {
        e(&format!(
            "ERR wrong number of arguments for '{name}' command"
        ))
    };
    let fields_missing = e("ERR Mandatory argument FIELDS is missing or not at the right position");
    let mismatch = e("ERR The `numfields` parameter must match the number of arguments");
    let not_positive = e("ERR Number of fields must be a positive integer");
    let not_int = e("ERR value is not an integer or out of range");
    let negative = e("ERR invalid expire time, must be >= 0");
    let too_big = |name: &str| e(&format!("ERR invalid expire time in '{name}' command"));
    let one_ttl = e("ERR Only one of EX, PX, EXAT, PXAT or KEEPTTL arguments can be specified");
    let one_cond = e("ERR Only one of FXX or FNX arguments can be specified");
    let bad_count = e("ERR invalid number of fields");
    // 2^46 ms is past the latest deadline (Redis's HFE_MAX_ABS_TIME_MSEC).
    let far_ms = (1i64 << 46).to_string();
    let far_s = ((1i64 << 46) / 1000 + 1).to_string();
    let cases: Vec<(String, R)> = vec![
        ("HGETDEL h".into(), arity("hgetdel")),
        ("HGETDEL h FIELDS 1".into(), arity("hgetdel")),
        ("HGETDEL h FIELD 1 f0".into(), fields_missing.clone()),
        ("HGETDEL h FIELDS 0 f0".into(), not_positive.clone()),
        ("HGETDEL h FIELDS -1 f0".into(), not_positive.clone()),
        ("HGETDEL h FIELDS x f0".into(), not_positive.clone()),
        ("HGETDEL h FIELDS 2 f0".into(), mismatch.clone()),
        ("HGETDEL h FIELDS 1 f0 f1".into(), mismatch.clone()),
        ("HGETEX h FIELDS 1".into(), arity("hgetex")),
        ("HGETEX h FIELDS 0".into(), arity("hgetex")),
        ("HGETEX h XFIELDX 1 a".into(), fields_missing.clone()),
        ("HGETEX h PXAT 1 1".into(), fields_missing.clone()),
        (
            "HGETEX h PERSIST 1 FIELDS 1 a".into(),
            fields_missing.clone(),
        ),
        ("HGETEX h FIELDS 2 a".into(), mismatch.clone()),
        ("HGETEX h FIELDS 0 a".into(), not_positive.clone()),
        ("HGETEX h FIELDS -1 a".into(), not_positive.clone()),
        (
            "HGETEX h FIELDS 9223372036854775808 a".into(),
            not_positive.clone(),
        ),
        ("HGETEX h PERSIST FIELDS 2 a".into(), mismatch.clone()),
        // No count after FIELDS at all: Redis reads past its argv; Tessera calls it
        // what it is.
        ("HGETEX h EX 10 FIELDS".into(), arity("hgetex")),
        ("HGETEX h EX bla FIELDS 1 a".into(), not_int.clone()),
        (
            "HGETEX h EX 9223372036854775808 FIELDS 1 a".into(),
            not_int.clone(),
        ),
        ("HGETEX h PX -1 FIELDS 1 a".into(), negative.clone()),
        ("HGETEX h PXAT -1 FIELDS 1 a".into(), negative.clone()),
        ("HGETEX h EX -1 FIELDS 1 a".into(), negative.clone()),
        (
            format!("HGETEX h EXAT {far_s} FIELDS 1 a"),
            too_big("hgetex"),
        ),
        (
            format!("HGETEX h PXAT {far_ms} FIELDS 1 a"),
            too_big("hgetex"),
        ),
        (
            format!("HGETEX h PX {far_ms} FIELDS 1 a"),
            too_big("hgetex"),
        ),
        // The time is checked before FIELDS.
        ("HGETEX h EX x NOFIELDS 1 a".into(), not_int.clone()),
        ("HSETEX h".into(), arity("hsetex")),
        ("HSETEX h fields 1".into(), arity("hsetex")),
        ("HSETEX h fields 2 a b".into(), arity("hsetex")),
        ("HSETEX h fields 2 a b c".into(), arity("hsetex")),
        ("HSETEX h fields 2 a b c d e".into(), arity("hsetex")),
        ("HSETEX h fields 3 a b c d".into(), arity("hsetex")),
        ("HSETEX h fields 3 a b c d e".into(), arity("hsetex")),
        ("HSETEX h fields 3 a b c d e f g".into(), arity("hsetex")),
        ("HSETEX h fields 3 a b".into(), arity("hsetex")),
        ("HSETEX h fields 1 a b unknown".into(), arity("hsetex")),
        ("HSETEX h KEEPTTL FNX FIELDS".into(), arity("hsetex")),
        (
            "HSETEX h nx fields 1 a b".into(),
            e("ERR unknown argument: nx"),
        ),
        (
            "HSETEX h 1 fields 1 a b".into(),
            e("ERR unknown argument: 1"),
        ),
        (
            "HSETEX h fxx fxx EX 100 fields 1 a b".into(),
            one_cond.clone(),
        ),
        (
            "HSETEX h fxx fnx EX 100 fields 1 a b".into(),
            one_cond.clone(),
        ),
        (
            "HSETEX h fnx fxx EX 100 fields 1 a b".into(),
            one_cond.clone(),
        ),
        (
            "HSETEX h fnx fnx EX 100 fields 1 a b".into(),
            one_cond.clone(),
        ),
        (
            "HSETEX h EX 100 PX 1000 fields 1 a b".into(),
            one_ttl.clone(),
        ),
        (
            "HSETEX h EXAT 100 EX 1000 fields 1 a b".into(),
            one_ttl.clone(),
        ),
        (
            "HSETEX h PXAT 100 EXAT 100 fields 1 a b".into(),
            one_ttl.clone(),
        ),
        (
            "HSETEX h EX 100 KEEPTTL fields 1 a b".into(),
            one_ttl.clone(),
        ),
        (
            "HSETEX h KEEPTTL EX 100 fields 1 a b".into(),
            one_ttl.clone(),
        ),
        (
            "HSETEX h KEEPTTL KEEPTTL fields 1 a b".into(),
            one_ttl.clone(),
        ),
        ("HSETEX h PX 10 PX 10 fields 1 a b".into(), one_ttl.clone()),
        // The time option swallows FIELDS as its time.
        ("HSETEX h ex fields 1 a b".into(), not_int.clone()),
        ("HSETEX h pxat fields 1 a b".into(), not_int.clone()),
        // Redis's "missing expire time" needs a time option last, which HSETEX's
        // arity (-6) and the checks before it never let through.
        ("HSETEX h FNX KEEPTTL PX".into(), arity("hsetex")),
        (format!("HSETEX h EXAT {far_s} 1 a b"), too_big("hsetex")),
        (format!("HSETEX h PXAT {far_ms} 1 a b"), too_big("hsetex")),
        ("HSETEX h EXAT -1 1 a b".into(), negative.clone()),
        ("HSETEX h EXAT x 1 a b".into(), not_int.clone()),
        ("HSETEX h fields x a b".into(), bad_count.clone()),
        (
            "HSETEX h fields 9223372036854775808 a b".into(),
            bad_count.clone(),
        ),
        ("HSETEX h fields 2147483648 a b".into(), bad_count.clone()),
        ("HSETEX h fields 0 a b".into(), bad_count.clone()),
        ("HSETEX h fields -1 a b".into(), bad_count.clone()),
    ];
    for (cmd, want) in &cases {
        assert_eq!(&c.c(cmd), want, "{cmd}");
    }
    // Errors changed nothing.
    assert_eq!(
        c.c("HGETALL h"),
        bulks(&["f0", "v0", "f1", "v1", "f2", "v2"])
    );
    assert_eq!(ints(c.c("HTTL h FIELDS 3 f0 f1 f2")), vec![-1; 3]);
    // Options are case-insensitive and HSETEX takes them in any order before FIELDS.
    assert_eq!(c.c("hsetex h px 5000 fxx FIELDS 1 f0 x"), i(1));
    assert_eq!(c.c("HSETEX h keepttl FnX fields 1 new y"), i(1));
    assert_eq!(c.c("hgetex h Persist fields 1 f0"), bulks(&["x"]));
}

/// HGETDEL on both encodings: values in order, nil for a missing field (and for a
/// field given twice, the second time), the fields gone, the key with the last one.
#[test]
fn hgetdel_returns_and_deletes_fields() {
    let (_s, mut c) = setup();
    assert_eq!(c.c("HGETDEL nokey FIELDS 2 a b"), nils(2));
    assert_eq!(c.c("EXISTS nokey"), i(0));
    for (key, n) in [(KEY_SHARD0, 5), (KEY_SHARD1, 300)] {
        fill(&mut c, key, n);
        let want_enc = if n > 128 { "hashtable" } else { "listpack" };
        assert_eq!(c.c(&format!("OBJECT ENCODING {key}")), b(want_enc));
        assert_eq!(
            c.c(&format!("HGETDEL {key} FIELDS 4 f1 nope f3 f1")),
            arr(vec![b("v1"), R::Nil, b("v3"), R::Nil])
        );
        assert_eq!(c.c(&format!("HLEN {key}")), i(n as i64 - 2));
        assert_eq!(
            c.c(&format!("HMGET {key} f1 f3 f0")),
            arr(vec![R::Nil, R::Nil, b("v0")])
        );
        // A field with a deadline goes with it.
        assert_eq!(
            ints(c.c(&format!("HEXPIRE {key} 100 FIELDS 1 f2"))),
            vec![1]
        );
        assert_eq!(c.c(&format!("HGETDEL {key} FIELDS 1 f2")), bulks(&["v2"]));
        assert_eq!(ints(c.c(&format!("HTTL {key} FIELDS 1 f2"))), vec![-2]);
        // Nothing found: nothing changes.
        assert_eq!(c.c(&format!("HGETDEL {key} FIELDS 1 nope")), nils(1));
        // The last fields take the key.
        let rest: Vec<String> = (0..n)
            .filter(|i| ![1, 2, 3].contains(i))
            .map(|i| format!("f{i}"))
            .collect();
        let got = c.c(&format!(
            "HGETDEL {key} FIELDS {} {}",
            rest.len(),
            rest.join(" ")
        ));
        assert_eq!(got.items().len(), rest.len());
        assert!(got.items().iter().all(|v| matches!(v, R::Bulk(_))));
        assert_eq!(c.c(&format!("EXISTS {key}")), i(0));
    }
    // RESP3: nulls are `_`.
    assert_eq!(c.c("HSET h3 a 1"), i(1));
    c.c("HELLO 3");
    assert_eq!(
        c.c_raw("HGETDEL h3 FIELDS 2 a b"),
        b"*2\r\n$1\r\n1\r\n_\r\n"
    );
}

/// HGETEX's options on both encodings: a plain read; EX / PX / EXAT / PXAT set the
/// deadline of the fields found; PERSIST drops it; a time already past deletes them
/// (counted as expired subkeys), the key with its last field.
#[test]
fn hgetex_reads_and_sets_or_drops_deadlines() {
    let (_s, mut c) = setup();
    assert_eq!(c.c("HGETEX nokey EX 100 FIELDS 2 a b"), nils(2));
    assert_eq!(c.c("HGETEX nokey PERSIST FIELDS 1 a"), nils(1));
    assert_eq!(c.c("EXISTS nokey"), i(0));
    for (key, n) in [(KEY_SHARD0, 5), (KEY_SHARD1, 300)] {
        fill(&mut c, key, n);
        let cmd = |c: &mut Raw, rest: &str| c.c(&format!("{} {key} {}", "HGETEX", rest));
        assert_eq!(
            cmd(&mut c, "FIELDS 3 f0 nope f1"),
            arr(vec![b("v0"), R::Nil, b("v1")])
        );
        assert_eq!(
            ints(c.c(&format!("HTTL {key} FIELDS 2 f0 f1"))),
            vec![-1, -1]
        );
        assert_eq!(
            cmd(&mut c, "EX 1000 FIELDS 2 f0 nope"),
            arr(vec![b("v0"), R::Nil])
        );
        let ttl = ints(c.c(&format!("HTTL {key} FIELDS 2 f0 nope")));
        assert!((999..=1000).contains(&ttl[0]) && ttl[1] == -2, "{ttl:?}");
        if n <= 128 {
            assert_eq!(c.c(&format!("OBJECT ENCODING {key}")), b("listpackex"));
        }
        assert_eq!(cmd(&mut c, "PX 500000 FIELDS 1 f1"), bulks(&["v1"]));
        let pttl = ints(c.c(&format!("HPTTL {key} FIELDS 1 f1")))[0];
        assert!((498_000..=500_000).contains(&pttl), "{pttl}");
        let secs = now_ms() / 1000 + 2000;
        assert_eq!(
            cmd(&mut c, &format!("EXAT {secs} FIELDS 1 f2")),
            bulks(&["v2"])
        );
        assert_eq!(
            ints(c.c(&format!("HEXPIRETIME {key} FIELDS 1 f2"))),
            vec![secs]
        );
        let ms = now_ms() + 3_000_000;
        assert_eq!(
            cmd(&mut c, &format!("pxat {ms} FIELDS 1 f3")),
            bulks(&["v3"])
        );
        assert_eq!(
            ints(c.c(&format!("HPEXPIRETIME {key} FIELDS 1 f3"))),
            vec![ms]
        );
        // PERSIST: a field with a deadline loses it; one without is left as it is.
        assert_eq!(
            cmd(&mut c, "PERSIST FIELDS 3 f0 f4 nope"),
            arr(vec![b("v0"), b("v4"), R::Nil])
        );
        assert_eq!(
            ints(c.c(&format!("HTTL {key} FIELDS 2 f0 f4"))),
            vec![-1, -1]
        );
        // A time already past deletes what it finds, and the value still comes back.
        let expired = info_u64(&mut c, "expired_subkeys");
        assert_eq!(
            cmd(&mut c, "PXAT 1 FIELDS 3 f1 nope f1"),
            arr(vec![b("v1"), R::Nil, R::Nil])
        );
        assert_eq!(cmd(&mut c, "PX 0 FIELDS 1 f2"), bulks(&["v2"]));
        assert_eq!(c.c(&format!("HLEN {key}")), i(n as i64 - 2));
        assert_eq!(info_u64(&mut c, "expired_subkeys"), expired + 2);
        let rest: Vec<String> = (0..n)
            .filter(|i| ![1, 2].contains(i))
            .map(|i| format!("f{i}"))
            .collect();
        let got = cmd(
            &mut c,
            &format!("EXAT 1 FIELDS {} {}", rest.len(), rest.join(" ")),
        );
        assert_eq!(got.items().len(), n - 2);
        assert_eq!(c.c(&format!("EXISTS {key}")), i(0));
    }
}

/// `INFO stats` field as a number.
fn info_u64(c: &mut Raw, field: &str) -> u64 {
    let info = c.c("INFO stats").text();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in INFO"))
}

/// HSETEX: 1 when it set the fields; FNX / FXX make it all or nothing (0, nothing
/// changed, a missing key left missing); without an option an overwritten field loses
/// its deadline, KEEPTTL keeps it, a time option sets it, a time already past
/// deletes the fields it set.
#[test]
fn hsetex_sets_fields_all_or_none_with_deadlines() {
    let (_s, mut c) = setup();
    for key in [KEY_SHARD0, KEY_SHARD1] {
        let cmd = |c: &mut Raw, rest: &str| c.c(&format!("HSETEX {key} {rest}"));
        let all = |c: &mut Raw| c.c(&format!("HGETALL {key}"));
        let ttls = |c: &mut Raw, fields: &str| {
            let n = fields.split_whitespace().count();
            ints(c.c(&format!("HTTL {key} FIELDS {n} {fields}")))
        };
        assert_eq!(cmd(&mut c, "FXX FIELDS 2 f1 v1 f2 v2"), i(0));
        assert_eq!(c.c(&format!("EXISTS {key}")), i(0));
        assert_eq!(cmd(&mut c, "FIELDS 1 f1 v1"), i(1));
        assert_eq!(cmd(&mut c, "FIELDS 1 f1 v11"), i(1));
        assert_eq!(all(&mut c), bulks(&["f1", "v11"]));
        // FXX: all must exist; FNX: none may.
        assert_eq!(cmd(&mut c, "FXX FIELDS 2 f1 x f2 x"), i(0));
        assert_eq!(cmd(&mut c, "FNX FIELDS 2 f2 x f1 x"), i(0));
        assert_eq!(all(&mut c), bulks(&["f1", "v11"]));
        assert_eq!(cmd(&mut c, "FNX EX 100 FIELDS 2 f2 v2 f3 v3"), i(1));
        assert_eq!(ttls(&mut c, "f1 f2 f3"), vec![-1, 100, 100]);
        assert_eq!(cmd(&mut c, "PX 5000 FXX FIELDS 2 f1 v1 f2 v22"), i(1));
        let pttl = ints(c.c(&format!("HPTTL {key} FIELDS 2 f1 f2")));
        assert!(pttl.iter().all(|t| (4000..=5000).contains(t)), "{pttl:?}");
        // KEEPTTL keeps the deadline of what it overwrites; no option drops it.
        assert_eq!(cmd(&mut c, "KEEPTTL FIELDS 2 f1 k1 f4 k4"), i(1));
        assert_eq!(ttls(&mut c, "f1 f4")[1], -1);
        assert!(ttls(&mut c, "f1")[0] > 0);
        assert_eq!(cmd(&mut c, "FIELDS 2 f1 n1 f2 n2"), i(1));
        assert_eq!(ttls(&mut c, "f1 f2 f3"), vec![-1, -1, 100]);
        let secs = now_ms() / 1000 + 2000;
        assert_eq!(cmd(&mut c, &format!("EXAT {secs} FIELDS 1 f4 v4")), i(1));
        assert_eq!(
            ints(c.c(&format!("HEXPIRETIME {key} FIELDS 1 f4"))),
            vec![secs]
        );
        let ms = now_ms() + 3_000_000;
        assert_eq!(cmd(&mut c, &format!("PXAT {ms} FIELDS 1 f5 v5")), i(1));
        assert_eq!(
            ints(c.c(&format!("HPEXPIRETIME {key} FIELDS 1 f5"))),
            vec![ms]
        );
        // A time already past: set, then deleted at once (a new field and an old one).
        let expired = info_u64(&mut c, "expired_subkeys");
        let past = now_ms() / 1000 - 1;
        assert_eq!(
            cmd(&mut c, &format!("EXAT {past} FIELDS 2 f6 v6 f1 v1")),
            i(1)
        );
        assert_eq!(
            c.c(&format!("HMGET {key} f6 f1 f2")),
            arr(vec![R::Nil, R::Nil, b("n2")])
        );
        assert_eq!(info_u64(&mut c, "expired_subkeys"), expired + 2);
        // With every field: the key goes; on a missing key nothing is left either.
        assert_eq!(cmd(&mut c, "PXAT 1 FIELDS 4 f2 x f3 x f4 x f5 x"), i(1));
        assert_eq!(c.c(&format!("EXISTS {key}")), i(0));
        assert_eq!(cmd(&mut c, "PX 0 FNX FIELDS 1 a b"), i(1));
        assert_eq!(c.c(&format!("EXISTS {key}")), i(0));
    }
    // Past the listpack's limits the hash converts, as HSET converts it.
    let mut args = vec!["HSETEX", "big", "EX", "100", "FIELDS", "200"];
    let pairs: Vec<String> = (0..200)
        .flat_map(|i| [format!("f{i}"), format!("v{i}")])
        .collect();
    args.extend(pairs.iter().map(String::as_str));
    assert_eq!(c.c(&args.join(" ")), i(1));
    assert_eq!(c.c("OBJECT ENCODING big"), b("hashtable"));
    assert_eq!(c.c("HLEN big"), i(200));
    assert_eq!(ints(c.c("HTTL big FIELDS 1 f199")), vec![100]);
}

/// Fields past their deadline that the commands meet (active expiry off): gone before
/// the command looks, so HGETDEL / HGETEX read nil, FXX counts them missing and FNX
/// absent; a hash whose fields all expired is gone. With active expiry on, the
/// deadlines HSETEX and HGETEX set expire on their own.
#[test]
fn lazy_and_active_expiry() {
    let (_s, mut c) = setup();
    assert_eq!(c.c("DEBUG SET-ACTIVE-EXPIRE 0"), ok());
    assert_eq!(c.c("HSETEX h1 PX 5 FIELDS 1 f1 10"), i(1));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(c.c("HGETDEL h1 FIELDS 1 f1"), nils(1));
    assert_eq!(c.c("EXISTS h1"), i(0));
    assert_eq!(c.c("HSETEX h1 FIELDS 3 f1 10 f2 20 f3 value3"), i(1));
    assert_eq!(ints(c.c("HPEXPIRE h1 5 FIELDS 1 f2")), vec![1]);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        c.c("HGETDEL h1 FIELDS 2 f2 f3"),
        arr(vec![R::Nil, b("value3")])
    );
    assert_eq!(c.c("HGETALL h1"), bulks(&["f1", "10"]));
    assert_eq!(
        c.c("HGETDEL h1 FIELDS 4 f1 f2 f3 f4"),
        arr(vec![b("10"), R::Nil, R::Nil, R::Nil])
    );
    assert_eq!(c.c("EXISTS h1"), i(0));

    assert_eq!(c.c("HSETEX h2 PX 1 FIELDS 2 f1 v1 f2 v2"), i(1));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(c.c("HGETEX h2 EX 100 FIELDS 2 f1 f2"), nils(2));
    assert_eq!(c.c("EXISTS h2"), i(0));

    assert_eq!(c.c("HSETEX h3 PX 10 FIELDS 1 f1 v1"), i(1));
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(c.c("HSETEX h3 FXX FIELDS 1 f1 v11"), i(0));
    assert_eq!(c.c("EXISTS h3"), i(0));
    assert_eq!(c.c("HSET h3 f v f2 v"), i(2));
    assert_eq!(ints(c.c("HPEXPIRE h3 10 FIELDS 1 f")), vec![1]);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(c.c("HSETEX h3 FNX PX 100000 FIELDS 1 f new"), i(1));
    assert_eq!(c.c("HGET h3 f"), b("new"));

    // Active expiry: what HSETEX and HGETEX set expires nobody touching it.
    assert_eq!(
        c.c("HSETEX h4 PX 10 FIELDS 5 f1 v1 f2 v2 f3 v3 f4 v4 f5 v5"),
        i(1)
    );
    assert_eq!(c.c("HSET h5 f1 v1 f2 v2"), i(2));
    assert_eq!(c.c("HGETEX h5 PX 10 FIELDS 2 f1 f2"), bulks(&["v1", "v2"]));
    assert_eq!(c.c("DEBUG SET-ACTIVE-EXPIRE 1"), ok());
    assert!(
        eventually(Duration::from_secs(5), || c.c("DBSIZE") == i(1)),
        "active expiry took h4 and h5"
    );
    assert_eq!(c.c("EXISTS h3"), i(1));
}

/// Keyspace events in Redis 8.0's order (its pubsub.tcl "hash events" and "FXX/FNX
/// with HSETEX" tests): HSETEX `hset` then `hexpire` or `hdel`, HGETEX `hexpire` /
/// `hpersist` / `hdel`, HGETDEL `hdel`, fields found expired first `hexpired`, and
/// `del` when the key goes. Commands that change nothing are silent.
#[test]
fn keyspace_events_as_redis_8_0() {
    let (s, mut c) = setup();
    assert_eq!(c.c("CONFIG SET notify-keyspace-events Khg"), ok());
    let mut sub = Raw::connect(s.port);
    sub.c("PSUBSCRIBE __keyspace@0__:*");
    let mut events = |want: &[&str]| {
        for w in want {
            assert_eq!(sub.event(), ("__keyspace@0__:h".to_string(), w.to_string()));
        }
    };
    let secs = now_ms() / 1000 + 999_999;
    let past = now_ms() / 1000 - 2;
    let steps: Vec<(String, &[&str])> = vec![
        ("HSETEX h FIELDS 3 f4 v4 f5 v5 f6 v6".into(), &["hset"]),
        ("HGETEX h PX 0 FIELDS 1 f4".into(), &["hdel"]),
        (format!("HGETEX h EXAT {secs} FIELDS 1 f5"), &["hexpire"]),
        ("HGETEX h PERSIST FIELDS 1 f5".into(), &["hpersist"]),
        // Silent: a read, a PERSIST of fields without a deadline, nothing found.
        ("HGETEX h FIELDS 1 f5".into(), &[]),
        ("HGETEX h PERSIST FIELDS 1 f5".into(), &[]),
        ("HGETEX h EX 10 FIELDS 1 nope".into(), &[]),
        ("HGETDEL h FIELDS 1 nope".into(), &[]),
        ("HSETEX h FNX FIELDS 1 f5 x".into(), &[]),
        ("HGETDEL h FIELDS 1 f5".into(), &["hdel"]),
        (
            format!("HSETEX h EXAT {secs} FIELDS 1 f6 v6"),
            &["hset", "hexpire"],
        ),
        ("HSETEX h KEEPTTL FIELDS 1 f6 v6".into(), &["hset"]),
        (
            "HSETEX h PX 0 FIELDS 1 f6 v6".into(),
            &["hset", "hdel", "del"],
        ),
        ("HSET h f1 v1".into(), &["hset"]),
        (
            format!("HSETEX h FXX EXAT {past} FIELDS 1 f1 v1"),
            &["hset", "hdel", "del"],
        ),
        ("HSETEX h FIELDS 1 f1 v1".into(), &["hset"]),
        (
            format!("HSETEX h FNX EXAT {past} FIELDS 1 f2 v2"),
            &["hset", "hdel"],
        ),
        ("HGETEX h PXAT 1 FIELDS 1 f1".into(), &["hdel", "del"]),
    ];
    for (cmd, want) in &steps {
        c.c(cmd);
        events(want);
    }
    // Fields found expired: `hexpired` first. (Tessera deletes every due field of
    // a hash its hash commands look up, Redis only those they read: so a field
    // expires just before the command meant to meet it, never earlier.)
    c.c("DEBUG SET-ACTIVE-EXPIRE 0");
    let lazy: Vec<(&str, &[&str], bool)> = vec![
        ("HSETEX h FIELDS 1 f6 v6", &["hset"], false),
        ("HSETEX h PX 1 FIELDS 1 f5 v5", &["hset", "hexpire"], true),
        (
            "HGETEX h EX 100 FIELDS 2 f5 f6",
            &["hexpired", "hexpire"],
            false,
        ),
        (
            "HSETEX h PX 1 FIELDS 2 f5 v5 f6 v6",
            &["hset", "hexpire"],
            true,
        ),
        ("HGETEX h FIELDS 2 f5 f6", &["hexpired", "del"], false),
        ("HSETEX h FIELDS 2 f1 v1 f2 v2", &["hset"], false),
        ("HSETEX h PX 1 FIELDS 1 f3 v3", &["hset", "hexpire"], true),
        ("HGETDEL h FIELDS 2 f1 f3", &["hexpired", "hdel"], false),
        ("HSETEX h PX 1 FIELDS 1 f3 v3", &["hset", "hexpire"], true),
        (
            "HGETDEL h FIELDS 2 f2 f3",
            &["hexpired", "hdel", "del"],
            false,
        ),
        ("HSETEX h FIELDS 2 f v f2 v", &["hset"], false),
        ("HPEXPIRE h 1 FIELDS 1 f", &["hexpire"], true),
        ("HSETEX h FXX PX 10 FIELDS 1 f v", &["hexpired"], false),
        ("HDEL h f2", &["hdel", "del"], false),
    ];
    for (cmd, want, wait) in lazy {
        assert!(!c.c(cmd).is_err(), "{cmd}");
        if wait {
            std::thread::sleep(Duration::from_millis(20));
        }
        events(want);
    }
    c.c("DEBUG SET-ACTIVE-EXPIRE 1");
    // Nothing else came: the next event is this one.
    c.c("HSET end x 1");
    assert_eq!(
        sub.event(),
        ("__keyspace@0__:end".to_string(), "hset".to_string())
    );
}

/// A write that changed nothing leaves WATCH alone (HGETEX without an option, HGETDEL
/// of missing fields, a refused FNX); one that did aborts it.
#[test]
fn watch_sees_only_real_changes() {
    let (_s, mut c) = setup();
    fill(&mut c, "w", 2);
    let tries: &[(&str, bool)] = &[
        ("HGETEX w FIELDS 1 f0", false),
        ("HGETEX w PERSIST FIELDS 1 f0", false),
        ("HGETDEL w FIELDS 1 nope", false),
        ("HSETEX w FNX FIELDS 1 f0 x", false),
        ("HSETEX w FXX FIELDS 1 nope x", false),
        ("HGETEX w EX 100 FIELDS 1 f0", true),
        ("HGETEX w PERSIST FIELDS 1 f0", true),
        ("HSETEX w KEEPTTL FIELDS 1 f0 y", true),
        ("HGETDEL w FIELDS 1 f1", true),
    ];
    for (cmd, aborts) in tries {
        assert_eq!(c.c("WATCH w"), ok());
        c.c(cmd);
        c.c("MULTI");
        c.c("PING");
        let got = c.c("EXEC");
        assert_eq!(got == R::Nil, *aborts, "{cmd}: {got:?}");
    }
}

/// What the AOF logged replays to the same fields and deadlines: HSETEX with relative
/// times logged as PXAT, HGETEX as HPEXPIREAT / HPERSIST / HDEL, HGETDEL as HDEL.
#[test]
fn the_aof_replays_to_the_same_hashes() {
    let s = Server::start_with(2, &["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = Raw::connect(s.port);
    let writes = [
        "HSETEX bar EX 1000 FIELDS 3 a 1 b 2 c 3",
        "HSETEX foo PX 2000000 FNX FIELDS 2 x 1 y 2",
        "HSETEX foo KEEPTTL FIELDS 1 x 10",
        "HSETEX foo FIELDS 1 y 20",
        "HSETEX bar PXAT 1 FIELDS 1 gone 1",
        "HGETEX bar PX 3000000 FIELDS 1 a",
        "HGETEX bar PERSIST FIELDS 1 b",
        "HGETEX bar EXAT 1 FIELDS 1 c",
        "HGETDEL foo FIELDS 2 y nope",
        "HSETEX both EX 10 FIELDS 1 a 1",
        "HGETDEL both FIELDS 1 a",
    ];
    for w in writes {
        assert!(!c.c(w).is_err(), "{w}");
    }
    let state = |c: &mut Raw| {
        let mut out = Vec::new();
        for (key, fields) in [("bar", "a b c gone"), ("foo", "x y")] {
            let n = fields.split_whitespace().count();
            out.push(c.c(&format!("HGETALL {key}")));
            out.push(c.c(&format!("HPEXPIRETIME {key} FIELDS {n} {fields}")));
        }
        out.push(c.c("DBSIZE"));
        out
    };
    let before = state(&mut c);
    assert_eq!(before[4], i(2), "bar and foo");
    assert_eq!(c.c("DEBUG LOADAOF"), ok());
    assert_eq!(state(&mut c), before);
}

/// The table rows as Redis 8.0's command JSON has them: COMMAND INFO (arity, flags,
/// key positions, categories), COMMAND DOCS, the `@hash` category, GETKEYSANDFLAGS,
/// and the key permissions ACL checks from those flags (HSETEX writes only; HGETEX
/// and HGETDEL read and write).
#[test]
fn command_table_and_acl_as_redis_8_0() {
    let (s, mut c) = setup();
    let rows = [
        ("hgetdel", -5, vec!["write", "fast"]),
        ("hgetex", -5, vec!["write", "fast"]),
        ("hsetex", -6, vec!["write", "denyoom", "fast"]),
    ];
    for (name, arity, flags) in &rows {
        let info = c.c(&format!("COMMAND INFO {name}"));
        let row = info.items()[0].items();
        assert_eq!(row[0], b(name));
        assert_eq!(row[1], i(*arity));
        let got: Vec<String> = row[2].items().iter().map(R::text).collect();
        assert_eq!(&got, flags, "{name}");
        assert_eq!(&row[3..6], &[i(1), i(1), i(1)]);
        let cats: Vec<String> = row[6].items().iter().map(R::text).collect();
        assert_eq!(cats, ["@write", "@hash", "@fast"], "{name}");
        let docs = c.c(&format!("COMMAND DOCS {name}"));
        let doc = docs.items()[1].items();
        assert_eq!(doc[2..6], [b("since"), b("8.0.0"), b("group"), b("hash")]);
    }
    let hash_cat: Vec<String> = c.c("ACL CAT hash").items().iter().map(R::text).collect();
    for (name, _, _) in &rows {
        assert!(hash_cat.iter().any(|n| n == name), "{name}");
    }
    let flags_of = |c: &mut Raw, cmd: &str| -> String {
        let r = c.c(&format!("COMMAND GETKEYSANDFLAGS {cmd}"));
        r.items()[0].items()[1]
            .items()
            .iter()
            .map(R::text)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(flags_of(&mut c, "HGETDEL k FIELDS 1 a"), "RW access delete");
    assert_eq!(flags_of(&mut c, "HGETEX k FIELDS 1 a"), "RW access update");
    assert_eq!(flags_of(&mut c, "HSETEX k FIELDS 1 a b"), "RW update");
    assert_eq!(c.c("ACL SETUSER w on nopass +@all %W~*"), ok());
    assert_eq!(c.c("ACL SETUSER rw on nopass +@all ~*"), ok());
    let mut w = Raw::connect(s.port);
    assert_eq!(w.c("AUTH w x"), ok());
    assert_eq!(w.c("HSETEX k FIELDS 1 a b"), i(1));
    for cmd in ["HGETEX k FIELDS 1 a", "HGETDEL k FIELDS 1 a"] {
        let got = w.c(cmd);
        assert!(got.text().starts_with("NOPERM"), "{cmd}: {got:?}");
    }
    let mut rw = Raw::connect(s.port);
    assert_eq!(rw.c("AUTH rw x"), ok());
    assert_eq!(rw.c("HGETDEL k FIELDS 1 a"), bulks(&["b"]));
}
