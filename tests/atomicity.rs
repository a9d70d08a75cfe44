//! Multi-key commands whose keys live on different shards must be atomic and
//! isolated: no client may ever observe half of an MSET, a half-done DEL, or a value
//! in flight during a cross-shard RENAME.

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use tessera::slot::{key_slot, SlotTable};

/// `n` keys covering every shard of an `shards`-shard server.
fn keys_on_all_shards(shards: usize, n: usize) -> Vec<String> {
    let table = SlotTable::new(shards);
    let mut keys = Vec::new();
    let mut seen = vec![0usize; shards];
    let mut i = 0;
    while keys.len() < n {
        let k = format!("atom:{i}");
        let s = table.owner(key_slot(k.as_bytes()));
        if seen[s] <= n / shards {
            seen[s] += 1;
            keys.push(k);
        }
        i += 1;
    }
    assert!(seen.iter().all(|&c| c > 0), "keys do not cover every shard");
    keys
}

fn run_for<F: FnMut() + Send + 'static>(stop: Arc<AtomicBool>, mut f: F) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            f();
        }
    })
}

/// Lets the writer and reader threads run for two seconds, stops and joins them (a
/// panicked reader fails the test with `failure`), and checks enough reads happened
/// to mean anything.
fn run_two_seconds(
    stop: &AtomicBool,
    threads: Vec<thread::JoinHandle<()>>,
    reads: &AtomicU64,
    failure: &str,
) {
    thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect(failure);
    }
    assert!(
        reads.load(Ordering::Relaxed) > 100,
        "too few reads to mean anything"
    );
}

fn assert_all_equal<T: PartialEq + std::fmt::Debug>(vals: &[T], what: &str) {
    assert!(vals.iter().all(|v| *v == vals[0]), "{what}: {vals:?}");
}

#[test]
fn mget_never_sees_half_an_mset() {
    let server = Server::start(4);
    let keys = keys_on_all_shards(4, 8);
    let stop = Arc::new(AtomicBool::new(false));
    let version = Arc::new(AtomicU64::new(1));
    let reads = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for _ in 0..2 {
        let mut c = server.client();
        let (keys, version) = (keys.clone(), version.clone());
        threads.push(run_for(stop.clone(), move || {
            let v = version.fetch_add(1, Ordering::Relaxed).to_string();
            let mut cmd = redis::cmd("MSET");
            for k in &keys {
                cmd.arg(k).arg(&v);
            }
            let _: () = cmd.query(&mut c).expect("mset");
        }));
    }
    for _ in 0..2 {
        let mut c = server.client();
        let (keys, reads) = (keys.clone(), reads.clone());
        threads.push(run_for(stop.clone(), move || {
            // A pipeline of MGETs also exercises the batched path.
            let mut p = redis::pipe();
            for _ in 0..4 {
                p.cmd("MGET").arg(&keys);
            }
            let rows: Vec<Vec<Option<String>>> = p.query(&mut c).expect("mget");
            for vals in rows {
                assert_all_equal(&vals, "torn read across shards");
                reads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    run_two_seconds(&stop, threads, &reads, "a reader saw a torn MSET");
}

#[test]
fn exists_sees_all_or_none_of_a_cross_shard_del() {
    let server = Server::start(4);
    let keys = keys_on_all_shards(4, 6);
    let stop = Arc::new(AtomicBool::new(false));
    let mut writer = server.client();
    let wkeys = keys.clone();
    let w = run_for(stop.clone(), move || {
        let mut m = redis::cmd("MSET");
        for k in &wkeys {
            m.arg(k).arg("x");
        }
        let _: () = m.query(&mut writer).expect("mset");
        let n: usize = redis::cmd("DEL")
            .arg(&wkeys)
            .query(&mut writer)
            .expect("del");
        assert_eq!(n, wkeys.len());
    });
    let mut reader = server.client();
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut samples = 0;
    while Instant::now() < deadline {
        let n: usize = redis::cmd("EXISTS")
            .arg(&keys)
            .query(&mut reader)
            .expect("exists");
        assert!(n == 0 || n == keys.len(), "saw {n} of {} keys", keys.len());
        samples += 1;
    }
    stop.store(true, Ordering::Relaxed);
    w.join().expect("writer");
    assert!(samples > 100);
}

#[test]
fn cross_shard_rename_never_loses_or_duplicates_the_value() {
    let server = Server::start(2);
    let (a, b) = (KEY_SHARD0, KEY_SHARD1);
    let mut c = server.client();
    let _: () = redis::cmd("SET")
        .arg(a)
        .arg("v")
        .query(&mut c)
        .expect("set");
    let stop = Arc::new(AtomicBool::new(false));
    let mut mover = server.client();
    let m = run_for(stop.clone(), move || {
        let _: () = redis::cmd("RENAME")
            .arg(a)
            .arg(b)
            .query(&mut mover)
            .expect("rename a->b");
        let _: () = redis::cmd("RENAME")
            .arg(b)
            .arg(a)
            .query(&mut mover)
            .expect("rename b->a");
    });
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        let n: usize = redis::cmd("EXISTS")
            .arg(a)
            .arg(b)
            .query(&mut c)
            .expect("exists");
        assert_eq!(n, 1, "the value must be under exactly one of the two names");
    }
    stop.store(true, Ordering::Relaxed);
    m.join().expect("mover");
}

/// MULTI/EXEC over keys on every shard is atomic and isolated: writers' transactions
/// INCR every key; readers see all keys equal, whether they read with MGET or with a
/// transaction of GETs.
#[test]
fn exec_across_shards_is_never_seen_half_done() {
    let server = Server::start(4);
    let keys = keys_on_all_shards(4, 8);
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for _ in 0..2 {
        let mut c = server.client();
        let keys = keys.clone();
        threads.push(run_for(stop.clone(), move || {
            let mut p = redis::pipe();
            p.atomic();
            for k in &keys {
                p.cmd("INCR").arg(k);
            }
            let _: Vec<i64> = p.query(&mut c).expect("exec");
        }));
    }
    for reader in 0..2 {
        let mut c = server.client();
        let (keys, reads) = (keys.clone(), reads.clone());
        threads.push(run_for(stop.clone(), move || {
            let vals: Vec<Option<i64>> = if reader == 0 {
                redis::cmd("MGET").arg(&keys).query(&mut c).expect("mget")
            } else {
                let mut p = redis::pipe();
                p.atomic();
                for k in &keys {
                    p.cmd("GET").arg(k);
                }
                p.query(&mut c).expect("exec of gets")
            };
            assert_all_equal(&vals, "a transaction seen half done");
            reads.fetch_add(1, Ordering::Relaxed);
        }));
    }
    run_two_seconds(&stop, threads, &reads, "a reader saw half a transaction");
}

/// WATCH over keys on different shards: concurrent check-and-set transactions (read
/// both, write both +1, retry when EXEC returns nil) lose no increment.
#[test]
fn watch_across_shards_loses_no_update() {
    let server = Server::start(2);
    let keys = [KEY_SHARD0, KEY_SHARD1];
    let per_client = 200;
    let mut threads = Vec::new();
    for _ in 0..3 {
        let mut c = server.client();
        threads.push(thread::spawn(move || {
            let mut done = 0;
            while done < per_client {
                let _: () = redis::cmd("WATCH").arg(&keys).query(&mut c).expect("watch");
                let vals: Vec<Option<i64>> =
                    redis::cmd("MGET").arg(&keys).query(&mut c).expect("mget");
                let (a, b) = (vals[0].unwrap_or(0), vals[1].unwrap_or(0));
                let r: Option<()> = redis::pipe()
                    .atomic()
                    .cmd("SET")
                    .arg(keys[0])
                    .arg(a + 1)
                    .ignore()
                    .cmd("SET")
                    .arg(keys[1])
                    .arg(b + 1)
                    .ignore()
                    .query(&mut c)
                    .expect("exec");
                if r.is_some() {
                    done += 1;
                }
            }
        }));
    }
    for t in threads {
        t.join().expect("writer");
    }
    let mut c = server.client();
    let vals: Vec<i64> = redis::cmd("MGET").arg(&keys).query(&mut c).expect("mget");
    assert_eq!(vals, vec![3 * per_client, 3 * per_client]);
}

/// Pipelined single-shard commands of many connections travel to the other shards
/// gathered per round (`shard::hops`), and a batch that meets a key locked by a
/// cross-shard MSET waits on the peer and comes home alone. Neither may reorder one
/// connection's commands or let a read go back in time: each reader's INCRs answer
/// consecutive values, and the values it reads of each MSET key never decrease.
#[test]
fn pipelined_hops_keep_order_while_multi_shard_writes_hold_their_keys() {
    let server = Server::start(4);
    let keys = keys_on_all_shards(4, 8);
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    let mut writer = server.client();
    let wkeys = keys.clone();
    let mut version = 0u64;
    threads.push(run_for(stop.clone(), move || {
        version += 1;
        let mut m = redis::cmd("MSET");
        for k in &wkeys {
            m.arg(k).arg(version);
        }
        let _: () = m.query(&mut writer).expect("mset");
    }));
    for reader in 0..8 {
        let mut c = server.client();
        let (keys, reads) = (keys.clone(), reads.clone());
        // Counters on every shard, so each reader's pipeline hops whatever its home.
        let counters: Vec<String> = keys_on_all_shards(4, 4)
            .iter()
            .map(|k| format!("{{{k}}}:ctr{reader}"))
            .collect();
        let mut expected = vec![0i64; counters.len()];
        let mut last_seen = vec![0u64; keys.len()];
        threads.push(run_for(stop.clone(), move || {
            let mut p = redis::pipe();
            for round in 0..3 {
                for ctr in &counters {
                    p.cmd("INCR").arg(ctr);
                }
                for k in &keys {
                    p.cmd("GET").arg(k);
                }
                p.cmd("INCR").arg(&counters[round % counters.len()]);
            }
            let replies: Vec<redis::Value> = p.query(&mut c).expect("pipeline");
            let mut it = replies.into_iter();
            for round in 0..3 {
                for (i, e) in expected.iter_mut().enumerate() {
                    *e += 1;
                    let got: i64 =
                        redis::from_redis_value(&it.next().expect("reply")).expect("incr reply");
                    assert_eq!(got, *e, "counter {i} out of order");
                }
                for (i, seen) in last_seen.iter_mut().enumerate() {
                    let got: Option<u64> =
                        redis::from_redis_value(&it.next().expect("reply")).expect("get reply");
                    let got = got.unwrap_or(0);
                    assert!(got >= *seen, "key {i} went back from {seen} to {got}");
                    *seen = got;
                    reads.fetch_add(1, Ordering::Relaxed);
                }
                let j = round % expected.len();
                expected[j] += 1;
                let got: i64 =
                    redis::from_redis_value(&it.next().expect("reply")).expect("incr reply");
                assert_eq!(got, expected[j], "counter {j} out of order");
            }
        }));
    }
    run_two_seconds(&stop, threads, &reads, "a reader saw reordered replies");
}

/// EXEC sends its keyed commands to their shards in one batch per shard; replies stay
/// in the queued order, a shard's commands see the ones queued before them, and a
/// server-wide or connection command sees every earlier write of the transaction.
#[test]
fn exec_batches_per_shard_and_keeps_order() {
    let srv = Server::start(2);
    let mut c = srv.client();
    let keys = keys_on_all_shards(2, 6);
    let mut pipe = redis::pipe();
    pipe.atomic();
    for (i, k) in keys.iter().enumerate() {
        pipe.cmd("SET").arg(k).arg(i);
        pipe.cmd("INCR").arg(k);
    }
    pipe.cmd("DBSIZE");
    pipe.cmd("SELECT").arg(1);
    pipe.cmd("SET").arg(&keys[0]).arg("db1");
    pipe.cmd("SELECT").arg(0);
    pipe.cmd("MGET").arg(&keys);
    let replies: Vec<redis::Value> = pipe.query(&mut c).expect("EXEC");
    let mut want = Vec::new();
    for i in 0..keys.len() {
        want.push(redis::Value::Okay);
        want.push(redis::Value::Int(i as i64 + 1));
    }
    want.push(redis::Value::Int(keys.len() as i64));
    want.push(redis::Value::Okay);
    want.push(redis::Value::Okay);
    want.push(redis::Value::Okay);
    let mget = (1..=keys.len())
        .map(|v| redis::Value::BulkString(v.to_string().into_bytes()))
        .collect();
    want.push(redis::Value::Array(mget));
    assert_eq!(replies, want);
    let _: () = redis::cmd("SELECT").arg(1).query(&mut c).expect("SELECT");
    assert_eq!(q::<String>(&mut c, &["GET", &keys[0]]), "db1");
}
