//! WAITAOF numlocal numreplicas timeout (Redis 7.2), black-box: its refusals and
//! argument errors, the local count under each `appendfsync` policy, blocking until
//! the file is fsynced (and CLIENT UNBLOCK, CONFIG SET appendonly no, a role change
//! ending the wait), Tessera replicas reporting their fsynced offset with
//! `REPLCONF ACK ... FACK`, a redis-server 7.0.15 replica that reports none (it
//! counts only for a client that never wrote), and a Tessera replica's FACK leaving
//! a redis-server 7.0.15 master undisturbed.

mod common;

use std::time::{Duration, Instant};

use common::*;

const NO_AOF: &str = "WAITAOF cannot be used when numlocal is set but appendonly is disabled.";

/// WAITAOF's reply: [local, replicas].
fn waitaof(c: &mut redis::Connection, local: u32, replicas: u32, timeout_ms: u64) -> (i64, i64) {
    let reply: Vec<i64> = redis::cmd("WAITAOF")
        .arg(local)
        .arg(replicas)
        .arg(timeout_ms)
        .query(c)
        .unwrap_or_else(|e| panic!("WAITAOF {local} {replicas} {timeout_ms}: {e}"));
    assert_eq!(reply.len(), 2, "{reply:?}");
    (reply[0], reply[1])
}

/// WAITAOF that must wait out its timeout (and not much longer): its reply.
fn waitaof_timing_out(
    c: &mut redis::Connection,
    local: u32,
    replicas: u32,
    timeout_ms: u64,
) -> (i64, i64) {
    let t0 = Instant::now();
    let reply = waitaof(c, local, replicas, timeout_ms);
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(timeout_ms - 10) && waited < Duration::from_secs(5),
        "{waited:?} for a timeout of {timeout_ms} ms"
    );
    reply
}

/// Tessera (2 shards) with the AOF on in a directory of its own, then `extra`.
fn aof_server(name: &str, extra: &[&str]) -> Server {
    let dir = scratch_dir("waitaof", name).display().to_string();
    let mut args = vec!["--dir", dir.as_str(), "--appendonly", "yes"];
    args.extend_from_slice(extra);
    Server::start_with(2, &args)
}

fn wait_until(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_online(m: &mut redis::Connection, n: usize) {
    wait_until("replicas online", Duration::from_secs(20), || {
        let info: String = q(m, &["INFO", "replication"]);
        info.matches("state=online").count() == n
    });
}

/// A first rewrite (at start, after a full sync, after CONFIG SET appendonly yes)
/// has put its base in place.
fn wait_rewritten(c: &mut redis::Connection) {
    wait_until("AOF rewrite done", Duration::from_secs(20), || {
        persistence_field(c, "aof_rewrite_in_progress") == "0"
            && persistence_field(c, "aof_rewrite_scheduled") == "0"
    });
}

#[test]
fn refusals_argument_errors_and_the_command_table() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = q(&mut c, &["SET", "k", "v"]);
    let got = err(&mut c, &["WAITAOF", "1", "0", "0"]);
    assert!(got.contains(NO_AOF), "{got}");
    // numlocal 0 with the AOF off: the local count is 0, nothing is waited for.
    assert_eq!(waitaof(&mut c, 0, 0, 0), (0, 0));
    let cases: &[(&[&str], &str)] = &[
        (
            &["2", "0", "0"],
            "value is out of range, value must between 0 and 1",
        ),
        (
            &["-1", "0", "0"],
            "value is out of range, value must between 0 and 1",
        ),
        (&["x", "0", "0"], "value is not an integer or out of range"),
        (&["0", "-1", "0"], "value is out of range, must be positive"),
        (
            &["0", "1.5", "0"],
            "value is not an integer or out of range",
        ),
        (&["0", "0", "-1"], "timeout is negative"),
        (
            &["0", "0", "1.5"],
            "timeout is not an integer or out of range",
        ),
        (
            &["0", "0", "9223372036854775000"],
            "timeout is out of range",
        ),
        // The numbers are read before the AOF is looked at (Redis 7.2's order).
        (&["1", "-1", "0"], "value is out of range, must be positive"),
    ];
    for (args, want) in cases {
        let mut cmd = vec!["WAITAOF"];
        cmd.extend_from_slice(args);
        let got = err(&mut c, &cmd);
        assert!(got.contains(want), "{cmd:?}: {got}");
    }
    assert!(err(&mut c, &["WAITAOF", "0", "0"]).contains("wrong number of arguments"));
    let got = err(
        &mut c,
        &["EVAL", "return redis.call('waitaof', 0, 0, 0)", "0"],
    );
    assert!(got.contains("not allowed from script"), "{got}");
    // COMMAND INFO: arity 4, noscript, no keys, @slow @connection (Redis 7.2's row).
    let info: redis::Value = q(&mut c, &["COMMAND", "INFO", "waitaof"]);
    let text = format!("{info:?}");
    for want in ["waitaof", "noscript", "@slow", "@connection"] {
        assert!(text.contains(want), "{text}");
    }
    let rows = match info {
        redis::Value::Array(rows) => rows,
        other => panic!("{other:?}"),
    };
    match &rows[0] {
        redis::Value::Array(row) => assert_eq!(row[1], redis::Value::Int(4), "{row:?}"),
        other => panic!("{other:?}"),
    }
    let docs: String = format!(
        "{:?}",
        q::<redis::Value>(&mut c, &["COMMAND", "DOCS", "waitaof"])
    );
    assert!(docs.contains("7.2.0"), "{docs}");
}

#[test]
fn on_a_replica_it_is_refused() {
    let master = Server::start(2);
    let replica = Server::start_with(2, &["--replicaof", "127.0.0.1", &master.port.to_string()]);
    let mut r = replica.client();
    for args in [["0", "0", "0"], ["1", "1", "0"]] {
        let mut cmd = vec!["WAITAOF"];
        cmd.extend_from_slice(&args);
        let got = err(&mut r, &cmd);
        assert!(got.contains("WAITAOF cannot be used with replica instances. Please also note that writes to replicas are just local and are not propagated."), "{got}");
    }
}

#[test]
fn the_local_count_follows_each_fsync_policy() {
    let s = aof_server("policies", &[]);
    let mut c = s.client();
    // A client that never wrote has nothing to wait for.
    assert_eq!(waitaof(&mut c, 1, 0, 0), (1, 0));
    for policy in ["everysec", "always"] {
        let _: () = q(&mut c, &["CONFIG", "SET", "appendfsync", policy]);
        let _: () = q(&mut c, &["SET", "k", policy]);
        assert_eq!(waitaof(&mut c, 1, 0, 0), (1, 0), "{policy}");
    }
    // `no`: the kernel's choice, never fsynced: the timeout ends it with 0.
    let _: () = q(&mut c, &["CONFIG", "SET", "appendfsync", "no"]);
    let _: () = q(&mut c, &["SET", "k", "no"]);
    assert_eq!(waitaof_timing_out(&mut c, 1, 0, 300), (0, 0));
    // Inside MULTI it never waits: the counts as they are.
    let mut p = redis::pipe();
    p.atomic()
        .cmd("SET")
        .arg("k")
        .arg("m")
        .cmd("WAITAOF")
        .arg(1)
        .arg(0)
        .arg(0);
    let (_, acks): (String, Vec<i64>) = p.query(&mut c).expect("MULTI");
    assert_eq!(acks, vec![0, 0]);
    // Another client's writes are not this one's to wait for.
    let mut other = s.client();
    let _: () = q(&mut other, &["SELECT", "0"]);
    let (local, _) = waitaof(&mut other, 1, 0, 0);
    assert_eq!(local, 1);
}

#[test]
fn it_blocks_until_the_file_is_fsynced_and_can_be_unblocked() {
    let s = aof_server("blocking", &["--appendfsync", "no"]);
    let mut c = s.client();
    let blocked_on_write = |s: &Server| {
        let mut w = s.client();
        let _: () = q(&mut w, &["SET", "k", "v"]);
        let id: u64 = q(&mut w, &["CLIENT", "ID"]);
        let h = std::thread::spawn(move || {
            redis::cmd("WAITAOF")
                .arg(1)
                .arg(0)
                .arg(0)
                .query::<redis::Value>(&mut w)
        });
        (id, h)
    };
    // Blocked (INFO counts it) until an fsync: the policy made everysec.
    let (_, h) = blocked_on_write(&s);
    wait_blocked(&mut c, 1);
    let _: () = q(&mut c, &["CONFIG", "SET", "appendfsync", "everysec"]);
    let got = h.join().expect("thread").expect("WAITAOF");
    assert_eq!(
        got,
        redis::Value::Array(vec![redis::Value::Int(1), redis::Value::Int(0)])
    );
    wait_blocked(&mut c, 0);
    let _: () = q(&mut c, &["CONFIG", "SET", "appendfsync", "no"]);
    // CLIENT UNBLOCK: as at the timeout, or with the error.
    let (id, h) = blocked_on_write(&s);
    wait_blocked(&mut c, 1);
    let n: i64 = q(&mut c, &["CLIENT", "UNBLOCK", &id.to_string()]);
    assert_eq!(n, 1);
    let got = h.join().expect("thread").expect("WAITAOF");
    assert_eq!(
        got,
        redis::Value::Array(vec![redis::Value::Int(0), redis::Value::Int(0)])
    );
    let (id, h) = blocked_on_write(&s);
    wait_blocked(&mut c, 1);
    assert_unblock_error(&mut c, id, h);
    // The AOF turned off under a waiting client: its error.
    let (_, h) = blocked_on_write(&s);
    wait_blocked(&mut c, 1);
    let _: () = q(&mut c, &["CONFIG", "SET", "appendonly", "no"]);
    let e = h.join().expect("thread").expect_err("AOF off");
    assert!(e.to_string().contains(NO_AOF), "{e}");
    wait_blocked(&mut c, 0);
    // Waiting for a replica that is not there, the master becomes a replica: the
    // blocked client gets -UNBLOCKED.
    assert_demotion_unblocks(&s, &mut c, &["WAITAOF", "0", "1", "0"]);
}

#[test]
fn a_tessera_replica_reports_what_its_aof_fsynced() {
    let master = aof_server("master", &["--appendfsync", "always"]);
    let mut m = master.client();
    let port = master.port.to_string();
    let replica = aof_server("replica", &["--replicaof", "127.0.0.1", &port]);
    let mut r = replica.client();
    wait_online(&mut m, 1);
    let _: () = q(&mut m, &["SET", "k", "1"]);
    // The replica's AOF is rewritten after its full sync, then fsynced each second.
    assert_eq!(waitaof(&mut m, 1, 1, 20_000), (1, 1));
    // A replica whose AOF is never fsynced: the timeout ends the wait with 0.
    wait_rewritten(&mut r);
    let _: () = q(&mut r, &["CONFIG", "SET", "appendfsync", "no"]);
    let _: () = q(&mut m, &["SET", "k", "2"]);
    assert_eq!(waitaof_timing_out(&mut m, 1, 1, 500), (1, 0));
    // Its AOF fsynced again (WAITAOF asks the replicas for an ACK; they send one
    // every second besides).
    let _: () = q(&mut r, &["CONFIG", "SET", "appendfsync", "always"]);
    let _: () = q(&mut m, &["SET", "k", "3"]);
    assert_eq!(waitaof(&mut m, 1, 1, 10_000), (1, 1));
    // A stopped replica acknowledges nothing.
    replica.signal(libc::SIGSTOP);
    let _: () = q(&mut m, &["SET", "k", "4"]);
    assert_eq!(waitaof(&mut m, 1, 1, 300), (1, 0));
    replica.signal(libc::SIGCONT);
    assert_eq!(waitaof(&mut m, 1, 1, 10_000), (1, 1));
    // Its AOF off: it reports no fsynced offset, and new writes never count.
    let _: () = q(&mut r, &["CONFIG", "SET", "appendonly", "no"]);
    let _: () = q(&mut m, &["SET", "k", "5"]);
    assert_eq!(waitaof(&mut m, 1, 1, 1500), (1, 0));
    // Turned on at run time: it counts once its first rewrite is done.
    let _: () = q(&mut r, &["CONFIG", "SET", "appendonly", "yes"]);
    let _: () = q(&mut m, &["SET", "k", "6"]);
    assert_eq!(waitaof(&mut m, 1, 1, 20_000), (1, 1));
    // The master's own AOF off: the local count is 0, the replica's still counts.
    let _: () = q(&mut m, &["CONFIG", "SET", "appendonly", "no"]);
    let _: () = q(&mut m, &["SET", "k", "7"]);
    assert_eq!(waitaof(&mut m, 0, 1, 20_000), (0, 1));
}

#[test]
fn a_redis_7_0_replica_sends_no_fack_and_counts_only_without_writes() {
    // `always`: the local count is 1 at once (everysec may take a second).
    let master = aof_server(
        "redis-replica",
        &["--repl-diskless-sync-delay", "0", "--appendfsync", "always"],
    );
    let mut m = master.client();
    let dir = scratch_dir("waitaof", "redis-replica-dir")
        .display()
        .to_string();
    let Some(redis) = ReferenceRedis::start_with(&[
        "--dir",
        &dir,
        "--appendonly",
        "yes",
        "--replicaof",
        "127.0.0.1",
        &master.port.to_string(),
    ]) else {
        eprintln!("redis-server not installed");
        return;
    };
    wait_online(&mut m, 1);
    // A client that never wrote waits for offset 0, which every online replica has
    // (Redis's repl_aof_off starts at 0).
    let mut fresh = master.client();
    assert_eq!(waitaof(&mut fresh, 1, 1, 0), (1, 1));
    let _: () = q(&mut m, &["SET", "k", "v"]);
    let n: i64 = q(&mut m, &["WAIT", "1", "5000"]);
    assert_eq!(n, 1);
    assert_eq!(waitaof_timing_out(&mut m, 1, 1, 700), (1, 0));
    let mut r = redis.client();
    let v: String = q(&mut r, &["GET", "k"]);
    assert_eq!(v, "v");
}

#[test]
fn a_tessera_replica_with_fack_follows_a_redis_7_0_master() {
    let Some(redis) = ReferenceRedis::start_with(&["--repl-diskless-sync-delay", "0"]) else {
        eprintln!("redis-server not installed");
        return;
    };
    let mut m = redis.client();
    let port = redis.port.to_string();
    let replica = aof_server("of-redis", &["--replicaof", "127.0.0.1", &port]);
    let mut r = replica.client();
    wait_online(&mut m, 1);
    wait_rewritten(&mut r);
    // Several once-a-second ACKs, each with FACK, go by: the link stays up and the
    // master keeps reading the offsets.
    for i in 0..3 {
        let _: () = q(&mut m, &["SET", &format!("k{i}"), &i.to_string()]);
        let n: i64 = q(&mut m, &["WAIT", "1", "5000"]);
        assert_eq!(n, 1, "round {i}");
        std::thread::sleep(Duration::from_millis(1100));
    }
    let offset: String = info_field(&mut m, "replication", "master_repl_offset");
    wait_until(
        "the replica acknowledges the whole stream",
        Duration::from_secs(5),
        || {
            let info: String = q(&mut m, &["INFO", "replication"]);
            info.contains(&format!("state=online,offset={offset},"))
        },
    );
    assert_eq!(
        info_field(&mut r, "replication", "master_link_status"),
        "up"
    );
    let v: String = q(&mut r, &["GET", "k2"]);
    assert_eq!(v, "2");
}

#[test]
fn a_replica_moved_to_a_master_with_a_lower_offset_reports_the_new_one() {
    let high = Server::start(2);
    let mut h = high.client();
    let low = Server::start(2);
    let mut l = low.client();
    let replica = aof_server(
        "mover",
        &["--replicaof", "127.0.0.1", &high.port.to_string()],
    );
    let mut r = replica.client();
    wait_online(&mut h, 1);
    let mut p = redis::pipe();
    for i in 0..3000 {
        p.cmd("SET")
            .arg(format!("k{i}"))
            .arg("x".repeat(50))
            .ignore();
    }
    p.query::<()>(&mut h).expect("fill");
    assert_eq!(waitaof(&mut h, 0, 1, 20_000), (0, 1));
    // Its AOF never fsyncs again: whatever it reports after the move is the new
    // master's, from the rewrite that follows the full sync, never the old one's.
    let _: () = q(&mut r, &["CONFIG", "SET", "appendfsync", "no"]);
    let _: () = q(&mut l, &["SET", "low", "1"]);
    let _: () = q(&mut r, &["REPLICAOF", "127.0.0.1", &low.port.to_string()]);
    wait_online(&mut l, 1);
    wait_rewritten(&mut r);
    let _: () = q(&mut l, &["SET", "low", "2"]);
    let n: i64 = q(&mut l, &["WAIT", "1", "5000"]);
    assert_eq!(n, 1);
    assert_eq!(waitaof(&mut l, 0, 1, 1500), (0, 0));
    let _: () = q(&mut r, &["CONFIG", "SET", "appendfsync", "always"]);
    let _: () = q(&mut l, &["SET", "low", "3"]);
    assert_eq!(waitaof(&mut l, 0, 1, 10_000), (0, 1));
}
