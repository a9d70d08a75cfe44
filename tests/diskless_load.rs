//! A Tessera replica's diskless load (`repl-diskless-load swapdb | on-empty-db`),
//! black-box: the master's payload is parsed as it arrives. swapdb keeps the old
//! dataset until the new one is whole — served meanwhile when the master's history
//! is the replica's (async_loading), behind -LOADING otherwise — and keeps it when
//! the transfer breaks; on-empty-db parses the payload only into an empty dataset.
//! Masters are Tessera and a real redis-server 7.0.15.

mod common;
#[path = "common/dataset.rs"]
mod dataset;

use std::time::{Duration, Instant};

use common::*;

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until the replica's link is up and it applied all the master wrote.
fn wait_in_sync(m: &mut redis::Connection, r: &mut redis::Connection) {
    wait_for("the replica in sync", Duration::from_secs(30), || {
        info_field(r, "replication", "master_link_status") == "up"
            && info_field(m, "replication", "master_repl_offset")
                == info_field(r, "replication", "slave_repl_offset")
    });
}

fn assert_same(m: &mut redis::Connection, r: &mut redis::Connection) {
    let diffs = dataset::compare(m, r, &[0, 1]);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// Keys of every type in databases 0 and 1, some with TTLs, some big enough to
/// arrive in many reads.
fn fill(c: &mut redis::Connection, n: usize) {
    let mut p = redis::pipe();
    for db in [1, 0] {
        p.cmd("SELECT").arg(db).ignore();
        for i in 0..n {
            p.cmd("SET").arg(format!("s:{i}")).arg(i).ignore();
            p.cmd("HSET")
                .arg(format!("h:{}", i % 40))
                .arg(i)
                .arg("v".repeat(i % 90))
                .ignore();
            p.cmd("RPUSH").arg(format!("l:{}", i % 9)).arg(i).ignore();
            p.cmd("SADD").arg(format!("set:{}", i % 11)).arg(i).ignore();
            p.cmd("ZADD")
                .arg(format!("z:{}", i % 13))
                .arg(i)
                .arg(i)
                .ignore();
            p.cmd("XADD").arg("x").arg("*").arg("f").arg(i).ignore();
        }
        p.cmd("SET")
            .arg("big")
            .arg("b".repeat(3 << 20))
            .arg("EX")
            .arg(1000)
            .ignore();
    }
    p.query::<()>(c).expect("fill");
}

fn log_has(log: &std::path::Path, needle: &str) -> bool {
    std::fs::read_to_string(log).is_ok_and(|t| t.contains(needle))
}

fn tessera_master() -> Server {
    Server::start_with(
        2,
        &[
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
        ],
    )
}

/// Forces a full sync from the same master (its history stays the replica's): the
/// replica's link is cut and the backlog overwritten past its position.
fn force_full_resync(m: &mut redis::Connection) {
    let _: () = q(m, &["CONFIG", "SET", "repl-backlog-size", "16384"]);
    let mut p = redis::pipe();
    p.cmd("MULTI").ignore();
    p.cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .ignore();
    for i in 0..10 {
        p.cmd("SET")
            .arg(format!("fill:{i}"))
            .arg("A".repeat(16384))
            .ignore();
    }
    p.cmd("EXEC").ignore();
    p.query::<()>(m).expect("MULTI");
}

#[test]
fn swapdb_serves_the_old_dataset_while_loading_and_keeps_it_when_the_transfer_breaks() {
    let dir = scratch_dir("diskless", "async");
    let log = dir.join("replica.log");
    let master = tessera_master();
    let mut m = master.client();
    fill(&mut m, 3000);
    let port = master.port.to_string();
    let replica = Server::start_logged_with(
        2,
        &[
            "--repl-diskless-load",
            "swapdb",
            "--replica-read-only",
            "no",
            "--replicaof",
            "127.0.0.1",
            &port,
        ],
        &log,
    );
    let mut r = replica.client();
    wait_in_sync(&mut m, &mut r);
    assert_same(&mut m, &mut r);
    assert!(log_has(
        &log,
        "receiving streamed RDB from master with EOF to parser"
    ));
    // A key of the replica's own, which only the old dataset has.
    let _: () = q(&mut r, &["SET", "mine", "old"]);
    let before: u64 = q(&mut r, &["DBSIZE"]);

    // A slow payload from the same history: the old dataset stays served.
    let _: () = q(&mut m, &["CONFIG", "SET", "rdb-key-save-delay", "2000"]);
    force_full_resync(&mut m);
    wait_for("async_loading", Duration::from_secs(10), || {
        info_field(&mut r, "persistence", "async_loading") == "1"
    });
    assert_eq!(info_field(&mut r, "persistence", "loading"), "0");
    let mine: String = q(&mut r, &["GET", "mine"]);
    assert_eq!(mine, "old");
    let size: u64 = q(&mut r, &["DBSIZE"]);
    assert_eq!(size, before);
    // What would fight the load is refused meanwhile.
    assert!(err(&mut r, &["REPLICAOF", "NO", "ONE"]).contains("loading the dataset"));
    assert!(err(&mut r, &["CONFIG", "SET", "appendonly", "yes"]).contains("loading the dataset"));
    assert!(err(&mut r, &["BGSAVE"]).contains("loading the dataset"));

    // The transfer breaks: what was loaded is dropped, the old dataset stays.
    let _: () = q(&mut m, &["CONFIG", "SET", "repl-diskless-sync-delay", "5"]);
    let _: i64 = q(&mut m, &["CLIENT", "KILL", "TYPE", "replica"]);
    wait_for("the load to stop", Duration::from_secs(10), || {
        info_field(&mut r, "persistence", "async_loading") == "0"
    });
    let mine: String = q(&mut r, &["GET", "mine"]);
    assert_eq!(mine, "old");
    let size: u64 = q(&mut r, &["DBSIZE"]);
    assert_eq!(size, before);
    wait_for("the failure logged", Duration::from_secs(5), || {
        log_has(&log, "Discarding temporary DB in background")
    });
    assert!(log_has(
        &log,
        "Failure loading rdb format from socket, assuming connection error, resuming operation."
    ));

    // The next sync completes: the master's dataset replaces the replica's.
    let _: () = q(&mut m, &["CONFIG", "SET", "rdb-key-save-delay", "0"]);
    let _: () = q(&mut m, &["CONFIG", "SET", "repl-diskless-sync-delay", "0"]);
    wait_in_sync(&mut m, &mut r);
    let mine: Option<String> = q(&mut r, &["GET", "mine"]);
    assert_eq!(mine, None);
    assert_same(&mut m, &mut r);
    assert!(log_has(&log, "Swapping active DB with loaded DB"));
}

#[test]
fn swapdb_from_another_history_answers_loading_and_swaps_functions_too() {
    let Some(master) = ReferenceRedis::start_with(&[
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
    ]) else {
        eprintln!("redis-server not installed");
        return;
    };
    let mut m = master.client();
    fill(&mut m, 2000);
    let _: String = q(
        &mut m,
        &[
            "FUNCTION",
            "LOAD",
            "#!lua name=lib\nredis.register_function{function_name='f', callback=function() return 'master' end, flags={'no-writes'}}",
        ],
    );
    let dir = scratch_dir("diskless", "swapdb");
    let log = dir.join("replica.log");
    let replica = Server::start_logged_with(2, &["--repl-diskless-load", "swapdb"], &log);
    let mut r = replica.client();
    let _: () = q(&mut r, &["SET", "mine", "old"]);
    let _: String = q(
        &mut r,
        &[
            "FUNCTION",
            "LOAD",
            "#!lua name=lib\nredis.register_function{function_name='f', callback=function() return 'replica' end, flags={'no-writes'}}",
        ],
    );
    // Slow, so that the load is seen.
    let _: () = q(&mut m, &["CONFIG", "SET", "rdb-key-save-delay", "1000"]);
    let _: () = q(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    );
    wait_for("loading", Duration::from_secs(10), || {
        info_field(&mut r, "persistence", "loading") == "1"
    });
    assert_eq!(info_field(&mut r, "persistence", "async_loading"), "0");
    assert!(err(&mut r, &["GET", "mine"]).contains("loading the dataset"));
    // Redis's loading_* fields while the payload loads: an EOF-marked payload has
    // no known size; the bytes read so far grow.
    assert_eq!(
        info_field(&mut r, "persistence", "loading_total_bytes"),
        "0"
    );
    assert_ne!(info_field(&mut r, "persistence", "loading_start_time"), "");
    wait_for("loading_loaded_bytes", Duration::from_secs(10), || {
        let read = info_field(&mut r, "persistence", "loading_loaded_bytes");
        read.parse::<u64>().unwrap_or(0) > 0
    });
    let _: () = q(&mut m, &["CONFIG", "SET", "rdb-key-save-delay", "0"]);
    wait_in_sync(&mut m, &mut r);
    assert_same(&mut m, &mut r);
    let mine: Option<String> = q(&mut r, &["GET", "mine"]);
    assert_eq!(mine, None);
    let f: String = q(&mut r, &["FCALL_RO", "f", "0"]);
    assert_eq!(f, "master");
}

#[test]
fn on_empty_db_parses_into_an_empty_replica_and_saves_first_otherwise() {
    let master = tessera_master();
    let mut m = master.client();
    fill(&mut m, 1500);
    let dir = scratch_dir("diskless", "empty");
    let empty_log = dir.join("empty.log");
    let empty = Server::start_logged_with(2, &["--repl-diskless-load", "on-empty-db"], &empty_log);
    let busy_log = dir.join("busy.log");
    let busy = Server::start_logged_with(
        2,
        &[
            "--repl-diskless-load",
            "on-empty-db",
            "--dir",
            &dir.display().to_string(),
        ],
        &busy_log,
    );
    let mut b = busy.client();
    let _: () = q(&mut b, &["SET", "mine", "old"]);
    let port = master.port.to_string();
    for replica in [&empty, &busy] {
        let mut r = replica.client();
        let _: () = q(&mut r, &["REPLICAOF", "127.0.0.1", &port]);
        wait_in_sync(&mut m, &mut r);
        assert_same(&mut m, &mut r);
    }
    assert!(log_has(&empty_log, "EOF to parser"));
    assert!(log_has(&busy_log, "EOF to disk"));
    let mine: Option<String> = q(&mut b, &["GET", "mine"]);
    assert_eq!(mine, None);
}

#[test]
fn a_broken_payload_leaves_an_on_empty_db_replica_empty_and_it_syncs_again() {
    let master = tessera_master();
    let mut m = master.client();
    fill(&mut m, 2000);
    let dir = scratch_dir("diskless", "broken");
    let log = dir.join("replica.log");
    let replica = Server::start_logged_with(2, &["--repl-diskless-load", "on-empty-db"], &log);
    let mut r = replica.client();
    let _: () = q(&mut m, &["CONFIG", "SET", "rdb-key-save-delay", "1000"]);
    let _: () = q(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    );
    wait_for("loading", Duration::from_secs(10), || {
        info_field(&mut r, "persistence", "loading") == "1"
    });
    std::thread::sleep(Duration::from_millis(300));
    let _: () = q(&mut m, &["CONFIG", "SET", "repl-diskless-sync-delay", "3"]);
    let _: i64 = q(&mut m, &["CLIENT", "KILL", "TYPE", "replica"]);
    wait_for("the load to stop", Duration::from_secs(10), || {
        info_field(&mut r, "persistence", "loading") == "0"
    });
    let size: u64 = q(&mut r, &["DBSIZE"]);
    assert_eq!(size, 0, "half a payload stayed loaded");
    assert!(log_has(&log, "Internal error in RDB reading offset"));
    let _: () = q(&mut m, &["CONFIG", "SET", "rdb-key-save-delay", "0"]);
    wait_in_sync(&mut m, &mut r);
    assert_same(&mut m, &mut r);
}
