//! Black-box tests of the generic key commands (DEL, RENAME, COPY, MOVE, SCAN,
//! OBJECT, DUMP/RESTORE ...) and the database commands, on a 2-shard server.

mod common;
#[path = "common/resp.rs"]
mod resp;

use std::collections::{BTreeSet, HashMap};

use common::*;
use resp::*;

const NOT_INT: &str = "ERR value is not an integer or out of range";
const SYNTAX: &str = "ERR syntax error";
const DB_RANGE: &str = "ERR DB index is out of range";
const SAME: &str = "ERR source and destination objects are the same";

fn sorted(r: R) -> Vec<String> {
    let mut v: Vec<String> = r.items().iter().map(R::text).collect();
    v.sort();
    v
}

/// `n` keys named `prefix:i`, which spread over both shards.
fn populate(c: &mut Raw, prefix: &str, n: usize) -> Vec<String> {
    let keys: Vec<String> = (0..n).map(|i| format!("{prefix}:{i}")).collect();
    let mut pipe = Vec::new();
    for k in &keys {
        pipe.extend(encode(&[b"SET", k.as_bytes(), b"v"]));
    }
    c.send(&pipe);
    for _ in &keys {
        assert_eq!(c.read(), ok());
    }
    let shards: BTreeSet<usize> = keys.iter().map(|k| shard(k)).collect();
    assert_eq!(shards.len(), 2.min(n));
    keys
}

#[test]
fn del_unlink_exists_touch_count_across_shards() {
    let (_s, mut c) = setup();
    let (a, b2) = ("{bar}a", "{foo}b");
    assert_ne!(shard(a), shard(b2));
    c.c("MSET {bar}a 1 {foo}b 2 {bar}c 3 {foo}d 4");
    // Duplicates count once per argument for EXISTS / TOUCH, once per key for DEL.
    assert_eq!(c.c("EXISTS {bar}a {foo}b {bar}a {foo}b missing"), i(4));
    assert_eq!(c.c("TOUCH {bar}a {foo}b {foo}b missing"), i(3));
    assert_eq!(c.c("EXISTS missing"), i(0));
    assert_eq!(c.c("DEL {bar}a {foo}b {bar}a {foo}b missing"), i(2));
    assert_eq!(c.c("EXISTS {bar}a {foo}b"), i(0));
    assert_eq!(c.c("UNLINK {bar}c {foo}d {foo}d"), i(2));
    assert_eq!(c.c("DBSIZE"), i(0));
    assert_eq!(c.c("DEL x"), i(0));
    c.c("SET x 1");
    assert_eq!(c.c("DEL x x"), i(1));
    // Keys of any type.
    c.c("SADD {bar}s m");
    c.c("SET {foo}s v");
    assert_eq!(c.c("EXISTS {bar}s {foo}s"), i(2));
    assert_eq!(c.c("DEL {bar}s {foo}s"), i(2));
    // An expired key does not count.
    c.c("SET e v PX 1");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(c.c("EXISTS e"), i(0));
    assert_eq!(c.c("DEL e"), i(0));
    assert_eq!(
        c.c("DEL"),
        e("ERR wrong number of arguments for 'del' command")
    );
    assert_eq!(
        c.c("EXISTS"),
        e("ERR wrong number of arguments for 'exists' command")
    );
}

#[test]
fn type_command() {
    let (_s, mut c) = setup();
    c.c("SET str v");
    c.c("SET int 10");
    c.c("SADD set m");
    assert_eq!(c.c_raw("TYPE str"), b"+string\r\n");
    assert_eq!(c.c("TYPE int"), st("string"));
    assert_eq!(c.c("TYPE set"), st("set"));
    assert_eq!(c.c_raw("TYPE missing"), b"+none\r\n");
}

#[test]
fn rename_and_renamenx() {
    let (_s, mut c) = setup();
    // Same shard.
    c.c("SET {t}a hello");
    assert_eq!(c.c("RENAME {t}a {t}b"), ok());
    assert_eq!(c.c("GET {t}b"), b("hello"));
    assert_eq!(c.c("EXISTS {t}a"), i(0));
    c.c("SET {t}c world");
    assert_eq!(c.c("RENAME {t}b {t}c"), ok());
    assert_eq!(c.c("GET {t}c"), b("hello"));
    assert_eq!(c.c("RENAME {t}nokey {t}x"), e("ERR no such key"));
    assert_eq!(c.c("RENAME {t}c {t}c"), ok());
    assert_eq!(c.c("GET {t}c"), b("hello"));
    assert_eq!(c.c("RENAMENX {t}c {t}c"), i(0));
    assert_eq!(c.c("RENAME {t}nokey {t}nokey"), e("ERR no such key"));
    c.c("SET {t}d other");
    assert_eq!(c.c("RENAMENX {t}c {t}d"), i(0));
    assert_eq!(c.c("GET {t}d"), b("other"));
    assert_eq!(c.c("RENAMENX {t}c {t}e"), i(1));
    assert_eq!(c.c("GET {t}e"), b("hello"));
    assert_eq!(c.c("RENAMENX {t}nokey {t}e"), e("ERR no such key"));
    // TTL moves with the key; the target's TTL is not inherited.
    c.c("SET {t}v x EX 100");
    c.c("SET {t}w y EX 1000");
    c.c("RENAME {t}v {t}w");
    assert!((99..=100).contains(&c.c("TTL {t}w").int()));
    c.c("SET {t}p x");
    c.c("SET {t}q y EX 100");
    c.c("RENAME {t}p {t}q");
    assert_eq!(c.c("TTL {t}q"), i(-1));
    // Other types move too.
    c.c("SADD {t}set a b");
    assert_eq!(c.c("RENAME {t}set {t}set2"), ok());
    assert_eq!(c.c("SCARD {t}set2"), i(2));
}

#[test]
fn rename_across_shards_carries_ttl() {
    let (_s, mut c) = setup();
    let (src, dst) = ("{bar}src", "{foo}dst");
    assert_ne!(shard(src), shard(dst));
    c.c("SET {bar}src hello PX 100000");
    assert_eq!(c.c("RENAME {bar}src {foo}dst"), ok());
    assert_eq!(c.c("GET {foo}dst"), b("hello"));
    assert_eq!(c.c("EXISTS {bar}src"), i(0));
    assert!((90_000..=100_000).contains(&c.c("PTTL {foo}dst").int()));
    // Back again, onto an existing key with its own TTL.
    c.c("SET {bar}src other EX 5000");
    assert_eq!(c.c("RENAME {foo}dst {bar}src"), ok());
    assert_eq!(c.c("GET {bar}src"), b("hello"));
    assert!((90..=100).contains(&c.c("TTL {bar}src").int()));
    assert_eq!(c.c("RENAME {foo}none {bar}src"), e("ERR no such key"));
    // RENAMENX across shards.
    c.c("SET {foo}x 1");
    assert_eq!(c.c("RENAMENX {bar}src {foo}x"), i(0));
    assert_eq!(c.c("GET {foo}x"), b("1"));
    assert_eq!(c.c("RENAMENX {bar}src {foo}y"), i(1));
    assert_eq!(c.c("GET {foo}y"), b("hello"));
    assert_eq!(c.c("EXISTS {bar}src"), i(0));
    assert_eq!(c.c("RENAMENX {bar}none {foo}z"), e("ERR no such key"));
    // A set across shards, with no TTL.
    c.c("SADD {bar}set a b c");
    assert_eq!(c.c("RENAME {bar}set {foo}set"), ok());
    assert_eq!(c.c("SCARD {foo}set"), i(3));
    assert_eq!(c.c("TTL {foo}set"), i(-1));
    assert_eq!(c.c("DBSIZE"), i(3));
}

#[test]
fn copy_within_and_across_shards_and_dbs() {
    let (_s, mut c) = setup();
    for (src, dst) in [("{t}a", "{t}b"), ("{bar}a", "{foo}b")] {
        c.cmd(&[b"SET", src.as_bytes(), b"v1"]);
        assert_eq!(
            c.cmd(&[b"COPY", src.as_bytes(), dst.as_bytes()]),
            i(1),
            "{src}"
        );
        assert_eq!(c.cmd(&[b"GET", dst.as_bytes()]), b("v1"));
        // The copy is independent of the original.
        c.cmd(&[b"APPEND", src.as_bytes(), b"x"]);
        assert_eq!(c.cmd(&[b"GET", dst.as_bytes()]), b("v1"));
        // No REPLACE: an existing destination stays.
        assert_eq!(c.cmd(&[b"COPY", src.as_bytes(), dst.as_bytes()]), i(0));
        assert_eq!(
            c.cmd(&[b"COPY", src.as_bytes(), dst.as_bytes(), b"REPLACE"]),
            i(1)
        );
        assert_eq!(c.cmd(&[b"GET", dst.as_bytes()]), b("v1x"));
        // Expire metadata is copied; no expire is not invented.
        c.cmd(&[b"EXPIRE", src.as_bytes(), b"100"]);
        c.cmd(&[b"COPY", src.as_bytes(), dst.as_bytes(), b"REPLACE"]);
        assert!((99..=100).contains(&c.cmd(&[b"TTL", dst.as_bytes()]).int()));
        c.cmd(&[b"PERSIST", src.as_bytes()]);
        c.cmd(&[b"COPY", src.as_bytes(), dst.as_bytes(), b"REPLACE"]);
        assert_eq!(c.cmd(&[b"TTL", dst.as_bytes()]), i(-1));
        assert_eq!(c.cmd(&[b"COPY", b"{t}missing", dst.as_bytes()]), i(0));
        // Sets are copied deeply.
        c.cmd(&[b"DEL", src.as_bytes()]);
        c.cmd(&[b"SADD", src.as_bytes(), b"a", b"b"]);
        assert_eq!(
            c.cmd(&[b"COPY", src.as_bytes(), dst.as_bytes(), b"REPLACE"]),
            i(1)
        );
        c.cmd(&[b"SADD", src.as_bytes(), b"c"]);
        assert_eq!(c.cmd(&[b"SCARD", dst.as_bytes()]), i(2));
    }
    // To another database, same name allowed there.
    c.c("SET k v EX 100");
    assert_eq!(c.c("COPY k k DB 1"), i(1));
    assert_eq!(c.c("COPY k k DB 1"), i(0));
    assert_eq!(c.c("COPY k k2 db 2 replace"), i(1));
    c.c("SELECT 1");
    assert_eq!(c.c("GET k"), b("v"));
    assert!(c.c("TTL k").int() > 0);
    c.c("SELECT 2");
    assert_eq!(c.c("GET k2"), b("v"));
    c.c("SELECT 0");
    // Cross-shard copy into another DB.
    c.c("SET {bar}z zz");
    assert_eq!(c.c("COPY {bar}z {foo}z DB 3"), i(1));
    c.c("SELECT 3");
    assert_eq!(c.c("GET {foo}z"), b("zz"));
    c.c("SELECT 0");
    assert_eq!(c.c("EXISTS {foo}z"), i(0));
    // Errors.
    assert_eq!(c.c("COPY k k"), e(SAME));
    assert_eq!(c.c("COPY k k DB 0"), e(SAME));
    assert_eq!(c.c("COPY k x DB notanumber"), e(NOT_INT));
    assert_eq!(c.c("COPY k x DB 16"), e(DB_RANGE));
    assert_eq!(c.c("COPY k x DB -1"), e(DB_RANGE));
    assert_eq!(c.c("COPY k x BADOPT"), e(SYNTAX));
    assert_eq!(c.c("COPY k x DB"), e(SYNTAX));
    assert_eq!(c.c("COPY {bar}z {foo}q DB 99"), e(DB_RANGE));
}

#[test]
fn move_select_swapdb() {
    let (_s, mut c) = setup();
    c.c("SET mykey foo");
    assert_eq!(c.c("MOVE mykey 9"), i(1));
    assert_eq!(c.c("EXISTS mykey"), i(0));
    c.c("SELECT 9");
    assert_eq!(c.c("GET mykey"), b("foo"));
    c.c("SELECT 0");
    c.c("SET mykey bar");
    assert_eq!(c.c("MOVE mykey 9"), i(0));
    assert_eq!(c.c("GET mykey"), b("bar"));
    assert_eq!(c.c("MOVE nokey 9"), i(0));
    assert_eq!(c.c("MOVE mykey notanumber"), e(NOT_INT));
    assert_eq!(c.c("MOVE mykey 16"), e(DB_RANGE));
    assert_eq!(c.c("MOVE mykey 0"), e(SAME));
    // TTL travels; no TTL is not invented.
    c.c("SET {foo}t v EX 100");
    assert_eq!(c.c("MOVE {foo}t 1"), i(1));
    c.c("SET {bar}p v");
    assert_eq!(c.c("MOVE {bar}p 1"), i(1));
    c.c("SELECT 1");
    assert!((99..=100).contains(&c.c("TTL {foo}t").int()));
    assert_eq!(c.c("TTL {bar}p"), i(-1));

    // SELECT.
    assert_eq!(c.c("SELECT 15"), ok());
    assert_eq!(c.c("SELECT 16"), e(DB_RANGE));
    assert_eq!(c.c("SELECT -1"), e(DB_RANGE));
    assert_eq!(c.c("SELECT x"), e(NOT_INT));
    assert_eq!(
        c.c("SELECT"),
        e("ERR wrong number of arguments for 'select' command")
    );

    // SWAPDB, with keys on both shards.
    c.c("FLUSHALL");
    c.c("SELECT 0");
    c.c("MSET {bar}a 0 {foo}b 0");
    c.c("SELECT 1");
    c.c("MSET {bar}a 1 {foo}c 1 x 1");
    assert_eq!(c.c("SWAPDB 0 1"), ok());
    assert_eq!(c.c("DBSIZE"), i(2));
    assert_eq!(
        c.c("MGET {bar}a {foo}b {foo}c"),
        arr(vec![b("0"), b("0"), R::Nil])
    );
    c.c("SELECT 0");
    assert_eq!(c.c("DBSIZE"), i(3));
    assert_eq!(
        c.c("MGET {bar}a {foo}c x"),
        arr(vec![b("1"), b("1"), b("1")])
    );
    assert_eq!(c.c("SWAPDB 0 0"), ok());
    assert_eq!(c.c("DBSIZE"), i(3));
    assert_eq!(c.c("SWAPDB 0 16"), e(DB_RANGE));
    assert_eq!(c.c("SWAPDB -1 0"), e(DB_RANGE));
    assert_eq!(c.c("SWAPDB x 0"), e("ERR invalid first DB index"));
    assert_eq!(c.c("SWAPDB 0 x"), e("ERR invalid second DB index"));
}

#[test]
fn flushdb_flushall_dbsize() {
    let (_s, mut c) = setup();
    populate(&mut c, "k", 100);
    assert_eq!(c.c("DBSIZE"), i(100));
    c.c("SELECT 1");
    populate(&mut c, "j", 10);
    assert_eq!(c.c("DBSIZE"), i(10));
    assert_eq!(c.c("FLUSHDB"), ok());
    assert_eq!(c.c("DBSIZE"), i(0));
    c.c("SELECT 0");
    assert_eq!(c.c("DBSIZE"), i(100));
    c.c("SELECT 2");
    populate(&mut c, "m", 5);
    assert_eq!(c.c("FLUSHALL"), ok());
    assert_eq!(c.c("DBSIZE"), i(0));
    c.c("SELECT 0");
    assert_eq!(c.c("DBSIZE"), i(0));
    assert_eq!(c.c("FLUSHDB ASYNC"), ok());
    assert_eq!(c.c("FLUSHDB sync"), ok());
    assert_eq!(c.c("FLUSHALL ASYNC"), ok());
    assert_eq!(c.c("FLUSHALL SYNC"), ok());
    assert_eq!(c.c("FLUSHALL foo"), e(SYNTAX));
    assert_eq!(c.c("FLUSHDB SYNC ASYNC"), e(SYNTAX));
    assert_eq!(
        c.c("DBSIZE x"),
        e("ERR wrong number of arguments for 'dbsize' command")
    );
}

#[test]
fn keys_with_patterns() {
    let (_s, mut c) = setup();
    for k in [
        "hello", "hallo", "hxllo", "hllo", "heeeello", "foo_a", "foo_b", "key_x",
    ] {
        c.cmd(&[b"SET", k.as_bytes(), b"1"]);
    }
    assert_eq!(sorted(c.c("KEYS h?llo")), ["hallo", "hello", "hxllo"]);
    assert_eq!(
        sorted(c.c("KEYS h*llo")),
        ["hallo", "heeeello", "hello", "hllo", "hxllo"]
    );
    assert_eq!(sorted(c.c("KEYS h[ae]llo")), ["hallo", "hello"]);
    assert_eq!(sorted(c.c("KEYS h[^e]llo")), ["hallo", "hxllo"]);
    assert_eq!(sorted(c.c("KEYS h[a-b]llo")), ["hallo"]);
    assert_eq!(sorted(c.c("KEYS foo*")), ["foo_a", "foo_b"]);
    assert_eq!(c.c("KEYS *").items().len(), 8);
    assert_eq!(c.c("KEYS nomatch*"), arr(vec![]));
    let shards: BTreeSet<usize> = ["hello", "hallo", "hxllo", "hllo", "heeeello"]
        .iter()
        .map(|k| shard(k))
        .collect();
    assert_eq!(shards.len(), 2);
    // Escapes and a pathological pattern.
    c.cmd(&[b"SET", b"a*b", b"1"]);
    assert_eq!(sorted(c.cmd(&[b"KEYS", b"a\\*b"])), ["a*b"]);
    c.c("SET aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 1");
    assert_eq!(
        c.c("KEYS a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b"),
        arr(vec![])
    );
    // Expired keys are not listed.
    c.c("SET gone v PX 1");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(c.c("KEYS gone"), arr(vec![]));
}

/// Runs a full SCAN with the given extra arguments, checking the cursor ends at 0.
fn scan_all(c: &mut Raw, extra: &str) -> Vec<String> {
    let mut cursor = "0".to_string();
    let mut out = Vec::new();
    let mut calls = 0;
    loop {
        let r = c.c(&format!("SCAN {cursor} {extra}"));
        let items = r.items();
        assert_eq!(items.len(), 2);
        cursor = items[0].text();
        out.extend(items[1].items().iter().map(R::text));
        calls += 1;
        assert!(calls < 100_000, "SCAN does not terminate");
        if cursor == "0" {
            return out;
        }
    }
}

/// One SCAN call goes on into the next shard's slots: a small keyspace spread over
/// both shards comes back whole with cursor 0, as from Redis. A MATCH that finds
/// nothing stops after looking at ten times COUNT keys, mid-keyspace.
#[test]
fn scan_crosses_shards_in_one_call() {
    let (_s, mut c) = setup();
    let keys = populate(&mut c, "few", 3);
    let r = c.c("SCAN 0");
    let items = r.items();
    assert_eq!(items[0].text(), "0");
    assert_eq!(sorted(items[1].clone()), keys);
    populate(&mut c, "many", 2000);
    let r = c.c("SCAN 0 MATCH nothing:* COUNT 10");
    let items = r.items();
    let cursor: usize = items[0].text().parse().expect("cursor");
    assert!(cursor > 0 && cursor < 8192, "stopped early, at {cursor}");
    assert!(items[1].items().is_empty());
}

#[test]
fn scan_full_iteration() {
    let (_s, mut c) = setup();
    let keys: BTreeSet<String> = populate(&mut c, "key", 1000).into_iter().collect();
    c.c("SADD set:0 m");
    c.c("SADD set:a m");
    c.c("SADD set:b m");
    for extra in ["", "COUNT 5", "count 1000"] {
        let got = scan_all(&mut c, extra);
        let unique: BTreeSet<String> = got.iter().cloned().collect();
        assert_eq!(unique.len(), 1003, "{extra}");
        assert!(keys.is_subset(&unique));
    }
    let got: BTreeSet<String> = scan_all(&mut c, "MATCH key:1??").into_iter().collect();
    assert_eq!(got.len(), 100);
    assert!(got.iter().all(|k| k.starts_with("key:1") && k.len() == 7));
    let strings: BTreeSet<String> = scan_all(&mut c, "TYPE string").into_iter().collect();
    assert_eq!(strings, keys);
    let sets: BTreeSet<String> = scan_all(&mut c, "TYPE SET COUNT 3").into_iter().collect();
    assert_eq!(sets.len(), 3);
    assert!(scan_all(&mut c, "TYPE list").is_empty());
    let all3: BTreeSet<String> = scan_all(&mut c, "TYPE string MATCH key:* COUNT 10")
        .into_iter()
        .collect();
    assert_eq!(all3, keys);
    // Errors.
    assert_eq!(c.c("SCAN abc"), e("ERR invalid cursor"));
    assert_eq!(c.c("SCAN 1x"), e("ERR invalid cursor"));
    assert_eq!(c.cmd(&[b"SCAN", b" 1"]), e("ERR invalid cursor"));
    assert_eq!(c.c("SCAN 0 COUNT 0"), e(SYNTAX));
    assert_eq!(c.c("SCAN 0 COUNT x"), e(NOT_INT));
    assert_eq!(c.c("SCAN 0 COUNT"), e(SYNTAX));
    assert_eq!(c.c("SCAN 0 BADOPT 1"), e(SYNTAX));
    // An empty database: one call, cursor 0.
    c.c("FLUSHALL");
    assert_eq!(scan_all(&mut c, ""), Vec::<String>::new());
}

#[test]
fn scan_returns_keys_present_throughout_under_writes() {
    let (_s, mut c) = setup();
    let keys: BTreeSet<String> = populate(&mut c, "stable", 500).into_iter().collect();
    let mut cursor = "0".to_string();
    let mut seen = BTreeSet::new();
    let mut n = 0;
    loop {
        let r = c.c(&format!("SCAN {cursor} COUNT 20"));
        cursor = r.items()[0].text();
        seen.extend(r.items()[1].items().iter().map(R::text));
        // Writes between calls add and remove other keys.
        for j in 0..20 {
            c.c(&format!("SET churn:{n}:{j} x"));
            c.c(&format!("DEL churn:{}:{j}", n.max(1) - 1));
        }
        n += 1;
        if cursor == "0" {
            break;
        }
    }
    assert!(keys.is_subset(&seen));
}

/// Three keys, one per shard where there are several: whatever the shard count, one
/// `SCAN 0` returns them all with cursor 0, and so does each MATCH / TYPE filter
/// (with what it selects), as from a single-table Redis.
#[test]
fn scan_of_three_keys_is_one_call_on_1_2_and_8_shards() {
    for shards in [1, 2, 8] {
        let s = Server::start(shards);
        let mut c = Raw::connect(s.port);
        let keys = three_keys_on_distinct_shards(shards);
        c.cmd(&[b"SET", keys[0].as_bytes(), b"v"]);
        c.cmd(&[b"SET", keys[1].as_bytes(), b"v"]);
        c.cmd(&[b"HSET", keys[2].as_bytes(), b"f", b"v"]);
        let one_call = |c: &mut Raw, extra: &str| -> Vec<String> {
            let r = c.c(&format!("SCAN 0 {extra}"));
            let items = r.items();
            assert_eq!(items[0].text(), "0", "{shards} shards, SCAN 0 {extra}");
            sorted(items[1].clone())
        };
        let mut all = keys.clone();
        all.sort();
        assert_eq!(one_call(&mut c, ""), all, "{shards} shards");
        assert_eq!(
            one_call(&mut c, "MATCH k:*"),
            vec![keys[0].clone(), keys[1].clone()]
        );
        assert_eq!(one_call(&mut c, "TYPE hash"), vec![keys[2].clone()]);
        assert_eq!(
            one_call(&mut c, "MATCH k:* TYPE hash"),
            Vec::<String>::new()
        );
        let mut strings = vec![keys[0].clone(), keys[1].clone()];
        strings.sort();
        assert_eq!(one_call(&mut c, "TYPE string"), strings);
        assert_eq!(one_call(&mut c, "TYPE string MATCH * COUNT 3"), strings);
    }
}

/// `k:<i>`, `k:<j>` and `h:<l>`, on as many different shards as there are, up to
/// three (each new key takes a shard not used yet while there is one).
fn three_keys_on_distinct_shards(shards: usize) -> Vec<String> {
    let table = tessera::slot::SlotTable::new(shards);
    let mut used = BTreeSet::new();
    let mut keys = Vec::new();
    for (prefix, want) in [("k", 2), ("h", 3)] {
        for i in 0..100_000 {
            let key = format!("{prefix}:{i}");
            let shard = table.shard_of_key(key.as_bytes());
            if used.len() >= shards || used.insert(shard) {
                keys.push(key);
                if keys.len() == want {
                    break;
                }
            }
        }
    }
    assert_eq!(keys.len(), 3, "no keys found for {shards} shards");
    keys
}

/// SCAN's guarantees while another connection writes: on 2 and 8 shards, for
/// several seeds, every key present for the whole iteration comes back at least once
/// (also under TYPE and MATCH), each call answers a cursor and a list (no error), and
/// the iteration ends at cursor 0 in a bounded number of calls. The writer adds,
/// deletes and expires other keys in the same slots as the stable ones (hash tags),
/// so their tables grow and shrink between the calls.
#[test]
fn scan_guarantees_hold_under_concurrent_writes() {
    for shards in [2, 8] {
        for seed in [1u64, 0x9e37_79b9_7f4a_7c15, 0xdead_beef_cafe_f00d] {
            scan_under_churn(shards, seed);
        }
    }
}

fn xorshift(seed: &mut u64, n: u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed % n
}

fn scan_under_churn(shards: usize, seed: u64) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let s = Server::start(shards);
    let mut c = Raw::connect(s.port);
    let mut rnd = seed;
    let tags = 1 + xorshift(&mut rnd, 300);
    let n = 200 + xorshift(&mut rnd, 1800) as usize;
    let mut strings = BTreeSet::new();
    let mut sets = BTreeSet::new();
    let mut pipe = Vec::new();
    for i in 0..n {
        let key = format!("{{t{}}}stable:{i}", xorshift(&mut rnd, tags));
        if i % 5 == 0 {
            pipe.extend(encode(&[b"SADD", key.as_bytes(), b"m"]));
            sets.insert(key);
        } else {
            pipe.extend(encode(&[b"SET", key.as_bytes(), b"v"]));
            strings.insert(key);
        }
    }
    c.send(&pipe);
    for _ in 0..n {
        assert!(!c.read().is_err());
    }
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let writes = std::sync::Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, writes, port) = (stop.clone(), writes.clone(), s.port);
        std::thread::spawn(move || churn(port, tags, seed, &stop, &writes))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while writes.load(Ordering::Relaxed) == 0 {
        assert!(!writer.is_finished(), "the writer stopped");
        assert!(
            std::time::Instant::now() < deadline,
            "the writer never wrote"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let all: BTreeSet<String> = strings.union(&sets).cloned().collect();
    let sevens: BTreeSet<String> = all
        .iter()
        .filter(|k| k.contains("}stable:7"))
        .cloned()
        .collect();
    let modes: [(String, BTreeSet<String>); 4] = [
        (String::new(), all.clone()),
        (format!("COUNT {}", 1 + xorshift(&mut rnd, 40)), all.clone()),
        ("TYPE string COUNT 7".into(), strings.clone()),
        ("MATCH *stable:7*".into(), sevens),
    ];
    for (extra, expected) in &modes {
        let before = writes.load(Ordering::Relaxed);
        let seen: BTreeSet<String> = scan_all(&mut c, extra).into_iter().collect();
        let missing: Vec<&String> = expected.difference(&seen).take(5).collect();
        assert!(
            missing.is_empty(),
            "{shards} shards, seed {seed:#x}, SCAN … {extra}: missed {missing:?}"
        );
        assert!(
            seen.iter()
                .all(|k| !k.contains("stable:") || all.contains(k)),
            "an unknown stable key"
        );
        // The guarantee was tested against writes, not a quiet server.
        assert!(
            writes.load(Ordering::Relaxed) > before,
            "no writes during the scan"
        );
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
}

/// The concurrent writer: pipelines of SET / DEL / SADD / PEXPIRE on `{t<n>}churn:<i>`
/// keys (the stable keys' slots), until `stop`.
fn churn(
    port: u16,
    tags: u64,
    seed: u64,
    stop: &std::sync::atomic::AtomicBool,
    writes: &std::sync::atomic::AtomicU64,
) {
    use std::sync::atomic::Ordering;
    let mut c = Raw::connect(port);
    let mut rnd = seed ^ 0x5555_5555_5555_5555;
    while !stop.load(Ordering::Relaxed) {
        let mut pipe = Vec::new();
        for _ in 0..100 {
            let key = format!(
                "{{t{}}}churn:{}",
                xorshift(&mut rnd, tags),
                xorshift(&mut rnd, 4000)
            );
            let k = key.as_bytes();
            pipe.extend(match xorshift(&mut rnd, 4) {
                0 => encode(&[b"SET", k, b"x"]),
                1 => encode(&[b"DEL", k]),
                2 => encode(&[b"SADD", k, b"m"]),
                _ => encode(&[b"PEXPIRE", k, b"3"]),
            });
        }
        c.send(&pipe);
        for _ in 0..100 {
            // SADD on a string is WRONGTYPE: expected, and still a write attempt.
            c.read();
        }
        writes.fetch_add(100, Ordering::Relaxed);
    }
}

#[test]
fn randomkey() {
    let (_s, mut c) = setup();
    assert_eq!(c.c_raw("RANDOMKEY"), b"$-1\r\n");
    c.c("SET x 10");
    c.c("DEL x");
    assert_eq!(c.c("RANDOMKEY"), R::Nil);
    c.cmd(&[b"SET", KEY_SHARD0.as_bytes(), b"x"]);
    c.cmd(&[b"SET", KEY_SHARD1.as_bytes(), b"y"]);
    let mut seen: HashMap<String, usize> = HashMap::new();
    for _ in 0..200 {
        *seen.entry(c.c("RANDOMKEY").text()).or_default() += 1;
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.contains_key(KEY_SHARD0) && seen.contains_key(KEY_SHARD1));
    // Only live keys are returned.
    c.cmd(&[b"DEL", KEY_SHARD0.as_bytes()]);
    for _ in 0..20 {
        assert_eq!(c.c("RANDOMKEY"), b(KEY_SHARD1));
    }
}

#[test]
fn object_subcommands() {
    let (_s, mut c) = setup();
    c.c("SET int 12345");
    c.c("SET short hello");
    c.cmd(&[b"SET", b"long", &[b'x'; 100]]);
    c.c("SET shared 100");
    c.c("SADD iset 1 2 3");
    c.c("SADD lset a b c");
    assert_eq!(c.c("OBJECT ENCODING int"), b("int"));
    assert_eq!(c.c("OBJECT ENCODING short"), b("embstr"));
    assert_eq!(c.c("OBJECT ENCODING long"), b("raw"));
    assert_eq!(c.c("OBJECT ENCODING iset"), b("intset"));
    // Redis 7.0 has no listpack sets (that came in 7.2).
    assert_eq!(c.c("OBJECT ENCODING lset"), b("hashtable"));
    assert_eq!(c.c("object encoding missing"), R::Nil);
    // Shared integers report INT_MAX references, as in Redis.
    assert_eq!(c.c("OBJECT REFCOUNT shared"), i(2147483647));
    assert_eq!(c.c("OBJECT REFCOUNT short"), i(1));
    assert_eq!(c.c("OBJECT REFCOUNT int"), i(1));
    assert_eq!(c.c("OBJECT REFCOUNT missing"), R::Nil);
    let idle = c.c("OBJECT IDLETIME short").int();
    assert!((0..=1).contains(&idle), "{idle}");
    assert_eq!(c.c("OBJECT IDLETIME missing"), R::Nil);
    assert_eq!(
        c.c("OBJECT FREQ short"),
        e("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.")
    );
    assert_eq!(c.c("CONFIG SET maxmemory-policy allkeys-lfu"), ok());
    assert!(c.c("OBJECT FREQ short").int() >= 0);
    assert!(c
        .c("OBJECT IDLETIME short")
        .text()
        .starts_with("ERR An LFU maxmemory policy is selected"));
    c.c("CONFIG SET maxmemory-policy noeviction");

    let help = c.c("OBJECT HELP");
    let lines = help.items();
    assert_eq!(
        lines[0],
        st("OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")
    );
    assert_eq!(lines[lines.len() - 2], st("HELP"));
    assert_eq!(lines[lines.len() - 1], st("    Prints this help."));
    assert!(lines.contains(&st("ENCODING <key>")));
    assert_eq!(
        c.c("OBJECT FOO x"),
        e("ERR unknown subcommand 'FOO'. Try OBJECT HELP.")
    );
    assert_eq!(
        c.c("OBJECT ENCODING"),
        e("ERR wrong number of arguments for 'object|encoding' command")
    );
    assert_eq!(
        c.c("OBJECT ENCODING a b"),
        e("ERR wrong number of arguments for 'object|encoding' command")
    );
    assert_eq!(
        c.c("OBJECT"),
        e("ERR wrong number of arguments for 'object' command")
    );
}

#[test]
fn dump_restore_round_trip() {
    let (_s, mut c) = setup();
    assert_eq!(c.c("DUMP missing"), R::Nil);
    let cases: [(&str, &[u8]); 4] = [
        ("{bar}str", b"hello world"),
        ("{foo}int", b"-12345"),
        ("{bar}bin", b"a\r\n\x00\xffb"),
        ("{foo}empty", b""),
    ];
    for (k, v) in cases {
        c.cmd(&[b"SET", k.as_bytes(), v]);
        let payload = match c.cmd(&[b"DUMP", k.as_bytes()]) {
            R::Bulk(p) => p,
            other => panic!("DUMP {k}: {other:?}"),
        };
        // Redis 7.0's trailer: RDB version 10, then an 8-byte CRC64.
        assert_eq!(&payload[payload.len() - 10..payload.len() - 8], &[10, 0]);
        assert_eq!(payload[0], 0, "string type byte");
        c.cmd(&[b"DEL", k.as_bytes()]);
        assert_eq!(c.cmd(&[b"RESTORE", k.as_bytes(), b"0", &payload]), ok());
        assert_eq!(c.cmd(&[b"GET", k.as_bytes()]), R::Bulk(v.to_vec()));
        assert_eq!(c.cmd(&[b"TTL", k.as_bytes()]), i(-1));
        // Restoring under another name, on the other shard.
        let other = if k.starts_with("{bar}") {
            "{foo}copy"
        } else {
            "{bar}copy"
        };
        assert_eq!(
            c.cmd(&[b"RESTORE", other.as_bytes(), b"0", &payload, b"REPLACE"]),
            ok()
        );
        assert_eq!(c.cmd(&[b"GET", other.as_bytes()]), R::Bulk(v.to_vec()));
    }
    // A set survives the round trip.
    c.c("SADD s a b c 1");
    let R::Bulk(sp) = c.c("DUMP s") else { panic!() };
    c.c("DEL s");
    assert_eq!(c.cmd(&[b"RESTORE", b"s", b"0", &sp]), ok());
    assert_eq!(sorted(c.c("SMEMBERS s")), ["1", "a", "b", "c"]);
    let R::Bulk(ip) = c.c("DUMP {foo}int") else {
        panic!()
    };
    assert_eq!(c.c("OBJECT ENCODING {foo}int"), b("int"));

    // TTL (relative, above 32 bits, absolute, absolute in the past).
    c.c("DEL t");
    assert_eq!(c.cmd(&[b"RESTORE", b"t", b"5000", &ip]), ok());
    assert!((3000..=5000).contains(&c.c("PTTL t").int()));
    c.c("DEL t");
    assert_eq!(c.cmd(&[b"RESTORE", b"t", b"2569591501", &ip]), ok());
    assert!((2569591501 - 3000..=2569591501).contains(&c.c("PTTL t").int()));
    let at = (now_ms() + 3000).to_string();
    assert_eq!(
        c.cmd(&[b"RESTORE", b"t", at.as_bytes(), &ip, b"ABSTTL", b"REPLACE"]),
        ok()
    );
    assert!((2000..=3100).contains(&c.c("PTTL t").int()));
    let past = (now_ms() - 3000).to_string();
    assert_eq!(
        c.cmd(&[
            b"RESTORE",
            b"t",
            past.as_bytes(),
            &ip,
            b"absttl",
            b"replace"
        ]),
        ok()
    );
    assert_eq!(c.c("EXISTS t"), i(0));
    // IDLETIME sets the LRU clock.
    assert_eq!(
        c.cmd(&[b"RESTORE", b"idle", b"0", &ip, b"IDLETIME", b"1000"]),
        ok()
    );
    let idle = c.c("OBJECT IDLETIME idle").int();
    assert!((1000..=1010).contains(&idle), "{idle}");
    assert_eq!(
        c.cmd(&[b"RESTORE", b"freq", b"0", &ip, b"FREQ", b"100"]),
        ok()
    );
    // FREQ counts under an LFU policy (and IDLETIME is then ignored).
    c.c("CONFIG SET maxmemory-policy allkeys-lfu");
    assert_eq!(
        c.cmd(&[b"RESTORE", b"freq2", b"0", &ip, b"FREQ", b"100"]),
        ok()
    );
    assert_eq!(c.c("OBJECT FREQ freq2"), i(100));
    c.c("CONFIG SET maxmemory-policy noeviction");

    // Errors.
    assert_eq!(
        c.cmd(&[b"RESTORE", b"{foo}int", b"0", &ip]),
        e("BUSYKEY Target key name already exists.")
    );
    assert_eq!(
        c.cmd(&[b"RESTORE", b"new", b"0", b"..."]),
        e("ERR DUMP payload version or checksum are wrong")
    );
    let mut corrupt = ip.clone();
    corrupt[1] ^= 0x55;
    assert_eq!(
        c.cmd(&[b"RESTORE", b"new", b"0", &corrupt]),
        e("ERR DUMP payload version or checksum are wrong")
    );
    assert_eq!(
        c.cmd(&[b"RESTORE", b"new", b"0", &ip, b"invalid-option"]),
        e(SYNTAX)
    );
    assert_eq!(
        c.cmd(&[b"RESTORE", b"new", b"-1", &ip]),
        e("ERR Invalid TTL value, must be >= 0")
    );
    assert_eq!(c.cmd(&[b"RESTORE", b"new", b"x", &ip]), e(NOT_INT));
    assert_eq!(
        c.cmd(&[b"RESTORE", b"new", b"0", &ip, b"IDLETIME", b"-1"]),
        e("ERR Invalid IDLETIME value, must be >= 0")
    );
    assert_eq!(
        c.cmd(&[b"RESTORE", b"new", b"0", &ip, b"FREQ", b"256"]),
        e("ERR Invalid FREQ value, must be >= 0 and <= 255")
    );
    // IDLETIME and FREQ exclude each other.
    assert_eq!(
        c.cmd(&[
            b"RESTORE",
            b"new",
            b"0",
            &ip,
            b"IDLETIME",
            b"1",
            b"FREQ",
            b"1"
        ]),
        e(SYNTAX)
    );
    // Redis parses options, then checks BUSYKEY, then the TTL, then the payload.
    assert_eq!(
        c.cmd(&[b"RESTORE", b"new", b"x", &ip, b"invalid-option"]),
        e(SYNTAX)
    );
    assert_eq!(
        c.cmd(&[b"RESTORE", b"{foo}int", b"x", &ip]),
        e("BUSYKEY Target key name already exists.")
    );
    assert_eq!(
        c.cmd(&[b"RESTORE", b"{foo}int", b"-1", b"..."]),
        e("BUSYKEY Target key name already exists.")
    );
    assert_eq!(
        c.cmd(&[b"RESTORE", b"new", b"-1", b"..."]),
        e("ERR Invalid TTL value, must be >= 0")
    );
    assert_eq!(c.c("EXISTS new"), i(0));
}

#[test]
fn restore_freq_sets_the_lfu_counter() {
    let (_s, mut c) = setup();
    assert_eq!(c.c("CONFIG SET maxmemory-policy allkeys-lfu"), ok());
    c.c("SET foo bar");
    let R::Bulk(p) = c.c("DUMP foo") else {
        panic!()
    };
    c.c("DEL foo");
    assert_eq!(
        c.cmd(&[b"RESTORE", b"foo", b"0", &p, b"FREQ", b"100"]),
        ok()
    );
    assert_eq!(c.c("OBJECT FREQ foo"), i(100));
}

#[test]
fn rename_and_move_keep_the_lfu_counter() {
    // Redis moves the object itself: RENAME and MOVE keep its access counter (COPY
    // makes a new object, which starts over).
    let (_s, mut c) = setup();
    assert_eq!(c.c("CONFIG SET maxmemory-policy allkeys-lfu"), ok());
    for (from, to) in [("a{t}", "b{t}"), ("bar", "foo"), ("b{t}", "bar")] {
        c.c(&format!("SET {from} v"));
        let payload = dump(&mut c, from);
        let restore: [&[u8]; 7] = [
            b"RESTORE",
            from.as_bytes(),
            b"0",
            &payload,
            b"REPLACE",
            b"FREQ",
            b"100",
        ];
        assert_eq!(c.cmd(&restore), ok());
        assert_eq!(c.c(&format!("OBJECT FREQ {from}")), i(100));
        assert_eq!(c.c(&format!("RENAME {from} {to}")), ok(), "{from} -> {to}");
        let R::Int(f) = c.c(&format!("OBJECT FREQ {to}")) else {
            panic!()
        };
        assert!((99..=101).contains(&f), "{from} -> {to}: {f}");
    }
    assert_eq!(c.c("MOVE bar 3"), i(1));
    c.c("SELECT 3");
    let R::Int(f) = c.c("OBJECT FREQ bar") else {
        panic!()
    };
    assert!((99..=101).contains(&f), "after MOVE: {f}");
}

fn dump(c: &mut Raw, key: &str) -> Vec<u8> {
    match c.c(&format!("DUMP {key}")) {
        R::Bulk(p) => p,
        other => panic!("DUMP {key}: {other:?}"),
    }
}
