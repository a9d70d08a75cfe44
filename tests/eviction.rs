//! maxmemory, the eight eviction policies, OOM refusals, LFU/LRU introspection and
//! lazy free, black-box over TCP against a 2-shard server.

mod common;
use common::*;

use std::time::{Duration, Instant};

const MB: u64 = 1024 * 1024;

fn info_field(c: &mut redis::Connection, section: &str, field: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg(section).query(c).expect("info");
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in INFO {section}"))
}

fn used(c: &mut redis::Connection) -> u64 {
    info_field(c, "memory", "used_memory")
}

/// Empties the server and sets `policy` with a limit `room` bytes above what it uses
/// empty; returns the limit.
fn fresh_limit(c: &mut redis::Connection, policy: &str, room: u64) -> u64 {
    let _: () = redis::cmd("FLUSHALL").query(c).expect("flushall");
    config(c, "maxmemory", "0");
    let limit = used(c) + room;
    config(c, "maxmemory-policy", policy);
    config(c, "maxmemory", &limit.to_string());
    limit
}

fn config(c: &mut redis::Connection, k: &str, v: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(k)
        .arg(v)
        .query(c)
        .expect("config set");
}

/// Writes `n` keys `prefix:i` (values of `size` bytes, with a TTL if `ttl`) in
/// pipelines of 500; returns how many writes failed.
fn fill(c: &mut redis::Connection, prefix: &str, n: usize, size: usize, ttl: bool) -> usize {
    let val = "v".repeat(size);
    let mut failed = 0;
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut p = redis::pipe();
        for i in chunk {
            let key = format!("{prefix}:{i}");
            if ttl {
                p.cmd("SET").arg(&key).arg(&val).arg("EX").arg(10_000);
            } else {
                p.cmd("SET").arg(&key).arg(&val);
            }
        }
        let replies: Vec<redis::Value> = p.query(c).expect("pipeline");
        failed += replies
            .iter()
            .filter(|r| matches!(r, redis::Value::ServerError(_)))
            .count();
    }
    failed
}

#[test]
fn every_policy_keeps_used_memory_near_the_limit() {
    let _cpu = shared_cpu();
    let s = Server::start(2);
    let mut c = s.client();
    for policy in [
        "allkeys-lru",
        "allkeys-lfu",
        "allkeys-random",
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
        "volatile-ttl",
    ] {
        let limit = fresh_limit(&mut c, policy, 12 * MB);
        // ~30 MB of keys, all with a TTL so volatile policies can evict them too.
        let failed = fill(&mut c, policy, 150_000, 100, true);
        assert_eq!(failed, 0, "{policy}: writes failed");
        std::thread::sleep(Duration::from_millis(100));
        let u = used(&mut c);
        assert!(
            u <= limit + limit / 20,
            "{policy}: used {u} over limit {limit}"
        );
        assert!(info_field(&mut c, "stats", "evicted_keys") > 0, "{policy}");
        let keys: u64 = redis::cmd("DBSIZE").query(&mut c).expect("dbsize");
        assert!(keys > 10_000 && keys < 150_000, "{policy}: {keys} keys");
    }
}

/// maxmemory is the server's, not each shard's: keys all on one shard may take more
/// than half of it without evictions while the total stays under the limit; once the
/// total is over, evictions bring it back.
#[test]
fn uneven_shards_evict_by_the_total() {
    let _cpu = shared_cpu();
    let s = Server::start(2);
    let mut c = s.client();
    let limit = fresh_limit(&mut c, "allkeys-lru", 8 * MB);
    // ~5 MB on the shard of {a}: more than its half of the limit.
    let n = 5_000;
    assert_eq!(fill(&mut c, "{a}", n, 1000, false), 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(info_field(&mut c, "stats", "evicted_keys"), 0);
    let keys: u64 = redis::cmd("DBSIZE").query(&mut c).expect("dbsize");
    assert_eq!(keys, n as u64);
    // ~6 MB more on the other shard: now the total is over.
    assert_eq!(fill(&mut c, "{bar}", 6_000, 1000, false), 0);
    std::thread::sleep(Duration::from_millis(100));
    assert!(info_field(&mut c, "stats", "evicted_keys") > 0);
    let u = used(&mut c);
    assert!(u <= limit + limit / 20, "used {u} over limit {limit}");
}

#[test]
fn volatile_policies_evict_only_keys_with_a_ttl() {
    let _cpu = shared_cpu();
    let s = Server::start(2);
    let mut c = s.client();
    for policy in [
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
        "volatile-ttl",
    ] {
        fresh_limit(&mut c, policy, 10 * MB);
        assert_eq!(fill(&mut c, "keep", 2_000, 100, false), 0);
        fill(&mut c, "ttl", 120_000, 100, true);
        for i in 0..2_000 {
            let e: bool = redis::cmd("EXISTS")
                .arg(format!("keep:{i}"))
                .query(&mut c)
                .expect("exists");
            assert!(e, "{policy}: keep:{i} was evicted");
        }
        assert!(info_field(&mut c, "stats", "evicted_keys") > 0);
    }
}

/// Redis's unit/tracking sets maxmemory 100 KB above used_memory and expects a 200 KB
/// write to evict. Every shard whose clients ran a script holds a Lua VM (~65 KB),
/// which Redis 7.0 keeps out of used_memory; while INFO counted the VMs and eviction
/// did not, four of them put the limit out of reach and nothing was evicted.
#[test]
fn limit_set_from_used_memory_holds_with_lua_vms_loaded() {
    let _cpu = shared_cpu();
    let s = Server::start(4);
    // Connections land on shards by the kernel's hash of their ports: 32 of them
    // leave no shard without a VM but once in ~10^4 runs.
    for _ in 0..32 {
        let mut c = s.client();
        let _: i64 = redis::cmd("EVAL")
            .arg("return 1")
            .arg(0)
            .query(&mut c)
            .expect("eval");
    }
    let mut c = s.client();
    let lua = info_field(&mut c, "memory", "used_memory_lua");
    assert!(lua > 150 * 1024, "Lua VMs hold only {lua} bytes");
    fresh_limit(&mut c, "volatile-random", 100 * 1024);
    let _: () = redis::cmd("SETEX")
        .arg("volatile-key")
        .arg(10_000)
        .arg("x")
        .query(&mut c)
        .expect("setex");
    // 200 KB, as the Tcl test writes it: over the limit by about 100 KB.
    let _: i64 = redis::cmd("SETBIT")
        .arg("big-key")
        .arg(1_600_000)
        .arg(0)
        .query(&mut c)
        .expect("setbit");
    let _: i64 = redis::cmd("GETBIT")
        .arg("big-key")
        .arg(0)
        .query(&mut c)
        .expect("getbit");
    let exists: bool = redis::cmd("EXISTS")
        .arg("volatile-key")
        .query(&mut c)
        .expect("exists");
    assert!(!exists, "volatile-key survived (Lua VMs: {lua} bytes)");
    assert_eq!(info_field(&mut c, "stats", "evicted_keys"), 1);
}

#[test]
fn noeviction_refuses_writes_but_serves_reads_and_deletes() {
    let _cpu = shared_cpu();
    let s = Server::start(2);
    let mut c = s.client();
    assert_eq!(fill(&mut c, "k", 20_000, 100, false), 0);
    let u = used(&mut c);
    config(&mut c, "maxmemory-policy", "noeviction");
    config(&mut c, "maxmemory", &(u / 2).to_string());
    for key in [KEY_SHARD0, KEY_SHARD1, "{bar}x", "{foo}x"] {
        let err = redis::cmd("SET")
            .arg(key)
            .arg("v")
            .query::<()>(&mut c)
            .expect_err("OOM");
        assert_eq!(err.code(), Some("OOM"));
        assert!(err
            .to_string()
            .contains("command not allowed when used memory"));
    }
    // Cross-shard writes are refused too; reads and deletes are served.
    let err = redis::cmd("MSET")
        .arg("{bar}a")
        .arg(1)
        .arg("{foo}a")
        .arg(2)
        .query::<()>(&mut c)
        .expect_err("OOM");
    assert_eq!(err.code(), Some("OOM"));
    let v: String = redis::cmd("GET").arg("k:1").query(&mut c).expect("get");
    assert_eq!(v.len(), 100);
    let n: u64 = redis::cmd("DEL")
        .arg("k:1")
        .arg("k:2")
        .query(&mut c)
        .expect("del");
    assert_eq!(n, 2);
    // MULTI: a DENYOOM command is refused when queued and dooms the EXEC.
    let _: () = redis::cmd("MULTI").query(&mut c).expect("multi");
    let _ = redis::cmd("SET").arg("a").arg("b").query::<()>(&mut c);
    let err = redis::cmd("EXEC")
        .query::<()>(&mut c)
        .expect_err("execabort");
    assert_eq!(err.code(), Some("EXECABORT"));
    // Raising the limit lets writes through again.
    config(&mut c, "maxmemory", "0");
    let _: () = redis::cmd("SET")
        .arg("a")
        .arg("b")
        .query(&mut c)
        .expect("set");
}

#[test]
fn three_times_maxmemory_under_allkeys_lru() {
    let _cpu = shared_cpu();
    let s = Server::start(2);
    let mut c = s.client();
    let mut probe = s.client();
    let base = used(&mut c);
    let limit = base + 16 * MB;
    config(&mut c, "maxmemory-policy", "allkeys-lru");
    config(&mut c, "maxmemory", &limit.to_string());
    // About 48 MB of writes in rounds, sampling used_memory after each round.
    let mut worst = 0;
    for round in 0..12 {
        // The LRU clock has Redis's one-second resolution: keys written within the
        // same second are equally old to the eviction pool. A new second per round
        // makes each round's keys the freshest there are.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let prefix = format!("r{round}");
        assert_eq!(
            fill(&mut c, &prefix, 20_000, 150, false),
            0,
            "a write failed"
        );
        worst = worst.max(used(&mut probe));
        for i in (19_900..20_000).step_by(7) {
            let e: bool = redis::cmd("EXISTS")
                .arg(format!("{prefix}:{i}"))
                .query(&mut c)
                .expect("exists");
            assert!(e, "{prefix}:{i} just written is gone");
        }
    }
    assert!(
        worst <= limit + limit / 20,
        "used_memory reached {worst}, limit {limit}"
    );
    assert!(info_field(&mut c, "stats", "evicted_keys") > 100_000);
}

#[test]
fn lfu_and_lru_introspection() {
    let _cpu = shared_cpu();
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut c)
        .expect("set");
    let err = redis::cmd("OBJECT")
        .arg("FREQ")
        .arg("k")
        .query::<i64>(&mut c)
        .expect_err("not lfu");
    assert!(err
        .to_string()
        .contains("An LFU maxmemory policy is not selected"));
    let idle: i64 = redis::cmd("OBJECT")
        .arg("IDLETIME")
        .arg("k")
        .query(&mut c)
        .expect("idletime");
    assert!(idle <= 1);
    config(&mut c, "maxmemory-policy", "allkeys-lfu");
    let _: () = redis::cmd("SET")
        .arg("hot")
        .arg("v")
        .query(&mut c)
        .expect("set");
    for _ in 0..200 {
        let _: String = redis::cmd("GET").arg("hot").query(&mut c).expect("get");
    }
    let f: i64 = redis::cmd("OBJECT")
        .arg("FREQ")
        .arg("hot")
        .query(&mut c)
        .expect("freq");
    assert!(f > 5 && f < 255, "freq {f}");
    let err = redis::cmd("OBJECT")
        .arg("IDLETIME")
        .arg("hot")
        .query::<i64>(&mut c)
        .expect_err("lfu");
    assert!(err
        .to_string()
        .contains("An LFU maxmemory policy is selected"));
    // MEMORY USAGE grows with the value; MEMORY STATS/DOCTOR/MALLOC-STATS/PURGE answer.
    let small: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("hot")
        .query(&mut c)
        .expect("usage");
    let _: () = redis::cmd("SET")
        .arg("big")
        .arg("x".repeat(10_000))
        .query(&mut c)
        .expect("set");
    let big: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("big")
        .query(&mut c)
        .expect("usage");
    assert!(big > small + 10_000, "{small} {big}");
    let _: redis::Value = redis::cmd("MEMORY")
        .arg("STATS")
        .query(&mut c)
        .expect("stats");
    let _: String = redis::cmd("MEMORY")
        .arg("MALLOC-STATS")
        .query(&mut c)
        .expect("malloc");
    let _: () = redis::cmd("MEMORY")
        .arg("PURGE")
        .query(&mut c)
        .expect("purge");
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query(&mut c)
        .expect("info");
    assert!(info.contains("mem_allocator:jemalloc-5."), "{info}");
    assert!(info.contains("maxmemory_policy:allkeys-lfu"));
}

/// Serialises the latency test against the others in this file: they fill memory flat
/// out, and on a 2-core machine that alone delays a GET by several milliseconds.
static CPU_HEAVY: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared_cpu() -> std::sync::RwLockReadGuard<'static, ()> {
    CPU_HEAVY.read().unwrap_or_else(|e| e.into_inner())
}

/// Waits until the lazy-free tasks hold nothing (10 s at most).
fn wait_lazyfree_done(c: &mut redis::Connection) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(c, "memory", "lazyfree_pending_objects") > 0 {
        assert!(Instant::now() < deadline, "lazy free never finished");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One go of the check: fills `{bar}big` with `members` members, UNLINKs it
/// while another connection runs GETs on a key of the same shard, and returns that
/// client's worst GET latency from the UNLINK until the set is freed.
fn worst_get_while_unlinking(port: u16, c: &mut redis::Connection, members: usize) -> Duration {
    for chunk in (0..members).collect::<Vec<_>>().chunks(50_000) {
        let mut cmd = redis::cmd("SADD");
        cmd.arg("{bar}big");
        for i in chunk {
            cmd.arg(format!("member-{i:012}"));
        }
        let _: i64 = cmd.query(c).expect("sadd");
    }
    let _: () = redis::cmd("SET")
        .arg("{bar}k")
        .arg("v")
        .query(c)
        .expect("set");
    let freeing = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(0));
    let state = freeing.clone();
    let reader = std::thread::spawn(move || {
        use std::sync::atomic::Ordering::SeqCst;
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("url");
        let mut g = client.get_connection().expect("connect");
        let mut worst = Duration::ZERO;
        // 0: warming up, 1: the set is being freed, 2: done.
        while state.load(SeqCst) < 2 {
            let during = state.load(SeqCst) == 1;
            let t = Instant::now();
            let _: String = redis::cmd("GET").arg("{bar}k").query(&mut g).expect("get");
            if during {
                worst = worst.max(t.elapsed());
            }
        }
        worst
    });
    std::thread::sleep(Duration::from_millis(100));
    freeing.store(1, std::sync::atomic::Ordering::SeqCst);
    let n: i64 = redis::cmd("UNLINK")
        .arg("{bar}big")
        .query(c)
        .expect("unlink");
    assert_eq!(n, 1);
    wait_lazyfree_done(c);
    freeing.store(2, std::sync::atomic::Ordering::SeqCst);
    reader.join().expect("reader")
}

#[test]
fn unlink_of_a_big_set_does_not_stall_its_shard() {
    let _alone = CPU_HEAVY.write().unwrap_or_else(|e| e.into_inner());
    let s = Server::start(2);
    let mut c = s.client();
    // The figures: 5 million members, worst GET under 5 ms (a debug build frees
    // and serves several times slower).
    let (members, allowed) = if cfg!(debug_assertions) {
        (300_000, Duration::from_millis(60))
    } else {
        (5_000_000, Duration::from_millis(5))
    };
    // A shared 2-core machine delays a GET by 4-6 ms now and then on its own (seen with
    // an idle Tessera and an idle redis-server alike), so one clean go out of three
    // passes; a shard that stalls while freeing fails all three.
    let mut worst = Vec::new();
    for _ in 0..3 {
        let w = worst_get_while_unlinking(s.port, &mut c, members);
        worst.push(w);
        if w < allowed {
            break;
        }
    }
    eprintln!("worst GET while freeing, per go: {worst:?}");
    assert!(
        worst.last().is_some_and(|w| *w < allowed),
        "a GET waited {worst:?} while the set was freed (allowed {allowed:?})"
    );
    assert!(info_field(&mut c, "memory", "lazyfreed_objects") >= 1);
    // FLUSHALL ASYNC empties at once and frees in the background.
    let _: () = redis::cmd("FLUSHALL")
        .arg("ASYNC")
        .query(&mut c)
        .expect("flush");
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).expect("dbsize");
    assert_eq!(n, 0);
}

/// lazyfree-lazy-server-del: a big value that a write replaces (SET over a set,
/// RENAME onto it) goes to the lazy-free task; without it, it is freed in the command.
#[test]
fn lazy_server_del_frees_replaced_values_in_the_background() {
    let _cpu = shared_cpu();
    let s = Server::start(2);
    let mut c = s.client();
    // Writes a 1000-member set at `key`, replaces it with a string by `replace`, waits
    // for lazy frees to finish; returns lazyfreed_objects.
    let replace_big = |c: &mut redis::Connection, key: &str, replace: &redis::Cmd| {
        let mut sadd = redis::cmd("SADD");
        sadd.arg(key);
        for i in 0..1000 {
            sadd.arg(format!("m{i}"));
        }
        let _: i64 = sadd.query(c).expect("sadd");
        let _: () = replace.query(c).expect("replace");
        wait_lazyfree_done(c);
        info_field(c, "memory", "lazyfreed_objects")
    };
    let mut set_x = redis::cmd("SET");
    set_x.arg("{bar}s").arg("x");
    // Off (the default): replaced values are freed at once.
    assert_eq!(replace_big(&mut c, "{bar}s", &set_x), 0);
    config(&mut c, "lazyfree-lazy-server-del", "yes");
    let _: i64 = redis::cmd("DEL").arg("{bar}s").query(&mut c).expect("del");
    assert_eq!(replace_big(&mut c, "{bar}s", &set_x), 1);
    // RENAME onto a big value; a small one replaced stays synchronous.
    let mut rename = redis::cmd("RENAME");
    rename.arg("{bar}s").arg("{bar}dst");
    assert_eq!(replace_big(&mut c, "{bar}dst", &rename), 2);
    let _: () = redis::cmd("SET")
        .arg("{bar}dst")
        .arg("y")
        .query(&mut c)
        .expect("set");
    wait_lazyfree_done(&mut c);
    assert_eq!(info_field(&mut c, "memory", "lazyfreed_objects"), 2);
    let v: String = redis::cmd("GET")
        .arg("{bar}dst")
        .query(&mut c)
        .expect("get");
    assert_eq!(v, "y");
}
