//! Tessera as a replica, black-box, against a real redis-server 7.0.15 master: the
//! link's life (handshake, full sync, the stream, partial resync after a cut, a full
//! one when the backlog no longer covers the gap), what ROLE and INFO show of it,
//! REPLICAOF NO ONE, masterauth, and the AOF after a full sync. The data a seeded
//! write load leaves on both sides is compared in propagation.rs.

mod common;
#[path = "common/dataset.rs"]
mod dataset;

use std::time::{Duration, Instant};

use common::*;

fn info_u64(c: &mut redis::Connection, section: &str, field: &str) -> u64 {
    info_field(c, section, field)
        .parse()
        .unwrap_or_else(|_| panic!("no numeric {field} in INFO {section}"))
}

/// A redis-server master that starts a sync at once (no diskless delay).
fn master(extra: &[&str]) -> Option<ReferenceRedis> {
    let mut args = vec!["--repl-diskless-sync-delay", "0"];
    args.extend_from_slice(extra);
    ReferenceRedis::start_with(&args)
}

fn replica_of(master_port: u16, extra: &[&str]) -> Server {
    let port = master_port.to_string();
    let mut args = vec!["--replicaof", "127.0.0.1", &port];
    args.extend_from_slice(extra);
    Server::start_with(2, &args)
}

/// Waits until the replica's link is up and it applied all the master wrote.
fn wait_in_sync(m: &mut redis::Connection, r: &mut redis::Connection) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let up = info_field(r, "replication", "master_link_status") == "up";
        if up {
            let mo = info_u64(m, "replication", "master_repl_offset");
            let ro = info_u64(r, "replication", "slave_repl_offset");
            if mo == ro {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the replica did not catch up: {}",
            info_field(r, "replication", "master_link_status")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn fill(c: &mut redis::Connection, prefix: &str, n: usize) {
    let mut p = redis::pipe();
    for i in 0..n {
        p.cmd("SET").arg(format!("{prefix}:{i}")).arg(i).ignore();
        p.cmd("HSET")
            .arg(format!("{prefix}:h{}", i % 50))
            .arg(i)
            .arg("v")
            .ignore();
        p.cmd("RPUSH")
            .arg(format!("{prefix}:l{}", i % 7))
            .arg(i)
            .ignore();
    }
    p.query::<()>(c).expect("fill");
}

fn assert_same(m: &mut redis::Connection, r: &mut redis::Connection) {
    let diffs = dataset::compare(m, r, &[0]);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

#[test]
fn a_cut_link_resumes_with_a_partial_resync() {
    let Some(redis) = master(&[]) else {
        eprintln!("redis-server not installed");
        return;
    };
    let mut m = redis.client();
    fill(&mut m, "before", 2000);
    let replica = replica_of(redis.port, &[]);
    let mut r = replica.client();
    wait_in_sync(&mut m, &mut r);
    assert_eq!(info_u64(&mut m, "stats", "sync_full"), 1);

    // The replica drops its master: it reconnects and continues where it was.
    let killed: i64 = q(&mut r, &["CLIENT", "KILL", "TYPE", "master"]);
    assert_eq!(killed, 1);
    fill(&mut m, "during", 500);
    wait_in_sync(&mut m, &mut r);
    assert_eq!(info_u64(&mut m, "stats", "sync_partial_ok"), 1);

    // The master drops its replica: the same.
    let killed: i64 = q(&mut m, &["CLIENT", "KILL", "TYPE", "replica"]);
    assert_eq!(killed, 1);
    fill(&mut m, "after", 500);
    wait_in_sync(&mut m, &mut r);
    assert_eq!(info_u64(&mut m, "stats", "sync_partial_ok"), 2);
    assert_eq!(info_u64(&mut m, "stats", "sync_full"), 1);
    assert_eq!(info_u64(&mut m, "stats", "sync_partial_err"), 0);
    assert_same(&mut m, &mut r);
}

#[test]
fn a_gap_the_backlog_lost_means_a_full_resync() {
    let Some(redis) = master(&["--repl-backlog-size", "16kb"]) else {
        eprintln!("redis-server not installed");
        return;
    };
    let mut m = redis.client();
    let replica = replica_of(redis.port, &[]);
    let mut r = replica.client();
    fill(&mut m, "a", 200);
    wait_in_sync(&mut m, &mut r);
    let _: i64 = q(&mut r, &["CLIENT", "KILL", "TYPE", "master"]);
    // More than the backlog holds, before the replica is back (it retries after a
    // second): its offset is gone from the master's backlog.
    let big = "x".repeat(64 * 1024);
    for i in 0..4 {
        let _: () = q(&mut m, &["SET", &format!("big:{i}"), &big]);
    }
    wait_in_sync(&mut m, &mut r);
    assert_eq!(info_u64(&mut m, "stats", "sync_full"), 2);
    assert_eq!(info_u64(&mut m, "stats", "sync_partial_err"), 1);
    assert_same(&mut m, &mut r);
}

#[test]
fn role_info_read_only_and_replicaof_no_one() {
    let Some(redis) = master(&[]) else {
        eprintln!("redis-server not installed");
        return;
    };
    let mut m = redis.client();
    fill(&mut m, "k", 100);
    let replica = replica_of(redis.port, &[]);
    let mut r = replica.client();
    wait_in_sync(&mut m, &mut r);

    let role: redis::Value = redis::cmd("ROLE").query(&mut r).expect("ROLE");
    let items = dataset::items(&role);
    assert_eq!(dataset::text(&items[0]), "slave");
    assert_eq!(dataset::text(&items[1]), "127.0.0.1");
    assert_eq!(dataset::text(&items[3]), "connected");
    let offset = info_u64(&mut m, "replication", "master_repl_offset");
    assert_eq!(dataset::text(&items[4]), offset.to_string());
    assert_eq!(
        info_field(&mut r, "replication", "master_replid"),
        info_field(&mut m, "replication", "master_replid")
    );
    assert_eq!(
        info_field(&mut r, "replication", "master_sync_in_progress"),
        "0"
    );
    let io: i64 = info_field(&mut r, "replication", "master_last_io_seconds_ago")
        .parse()
        .expect("last io");
    assert!((0..=11).contains(&io), "master_last_io_seconds_ago:{io}");
    // The master sees the replica at the port it announced, online once it
    // acknowledged.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !info_field(&mut m, "replication", "slave0").contains("state=online") {
        assert!(Instant::now() < deadline, "the replica never went online");
        std::thread::sleep(Duration::from_millis(20));
    }
    let line = info_field(&mut m, "replication", "slave0");
    assert!(line.contains(&format!("port={}", replica.port)), "{line}");
    assert!(line.contains("state=online"), "{line}");
    // CLIENT LIST flags the link M.
    let list: String = q(&mut r, &["CLIENT", "LIST", "TYPE", "master"]);
    assert!(list.contains("flags=M"), "{list}");

    let refused = err(&mut r, &["SET", "x", "1"]);
    assert!(
        refused.contains("You can't write against a read only replica."),
        "{refused}"
    );
    let v: String = q(&mut r, &["GET", "k:7"]);
    assert_eq!(v, "7");

    let _: () = q(&mut r, &["REPLICAOF", "NO", "ONE"]);
    let role: redis::Value = redis::cmd("ROLE").query(&mut r).expect("ROLE");
    assert_eq!(dataset::text(&dataset::items(&role)[0]), "master");
    let _: () = q(&mut r, &["SET", "x", "1"]);
    let v: String = q(&mut r, &["GET", "k:99"]);
    assert_eq!(v, "99");
    // The master sees its replica go.
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_u64(&mut m, "replication", "connected_slaves") != 0 {
        assert!(
            Instant::now() < deadline,
            "the master still lists the replica"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Writes on the old master no longer arrive.
    let _: () = q(&mut m, &["SET", "k:7", "changed"]);
    std::thread::sleep(Duration::from_millis(300));
    let v: String = q(&mut r, &["GET", "k:7"]);
    assert_eq!(v, "7");
}

#[test]
fn masterauth_opens_a_password_protected_master() {
    let Some(redis) = master(&["--requirepass", "s3cret"]) else {
        eprintln!("redis-server not installed");
        return;
    };
    let mut m = redis::Client::open(format!("redis://:s3cret@127.0.0.1:{}/", redis.port))
        .and_then(|c| c.get_connection())
        .expect("connect");
    fill(&mut m, "p", 100);

    // Without the password the link stays down.
    let dir = scratch_dir("replica", "noauth");
    let log = dir.join("tessera.log");
    let port = redis.port.to_string();
    let dir_arg = dir.display().to_string();
    let lost = Server::start_logged_with(
        2,
        &["--replicaof", "127.0.0.1", &port, "--dir", &dir_arg],
        &log,
    );
    let mut l = lost.client();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        info_field(&mut l, "replication", "master_link_status"),
        "down"
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("NOAUTH"), "{text}");

    let replica = replica_of(redis.port, &["--masterauth", "s3cret"]);
    let mut r = replica.client();
    wait_in_sync(&mut m, &mut r);
    assert_same(&mut m, &mut r);
}

#[test]
fn a_full_sync_rewrites_the_replicas_aof() {
    let Some(redis) = master(&[]) else {
        eprintln!("redis-server not installed");
        return;
    };
    let mut m = redis.client();
    fill(&mut m, "aof", 300);
    let dir = scratch_dir("replica", "aof");
    let dir_arg = dir.display().to_string();
    let replica = replica_of(
        redis.port,
        &[
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--dir",
            &dir_arg,
        ],
    );
    let mut r = replica.client();
    wait_in_sync(&mut m, &mut r);
    let _: () = q(&mut m, &["SET", "streamed", "yes"]);
    wait_in_sync(&mut m, &mut r);
    // The rewrite after the sync ends; then the AOF holds the synced data and the
    // stream.
    let deadline = Instant::now() + Duration::from_secs(20);
    while persistence_field(&mut r, "aof_rewrite_in_progress") != "0"
        || persistence_field(&mut r, "aof_rewrite_scheduled") != "0"
    {
        assert!(Instant::now() < deadline, "the AOF rewrite did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(replica);
    // SIGKILL (Server's drop): only what the AOF holds comes back, without a master.
    let back = Server::start_with(2, &["--appendonly", "yes", "--dir", &dir_arg]);
    let mut b = back.client();
    assert_same(&mut m, &mut b);
}

/// A Tessera replica (2 shards) of the master on `master_port`.
fn tessera_replica(master_port: u16) -> Server {
    replica_of(master_port, &[])
}

#[test]
fn wait_counts_acknowledging_replicas_and_times_out() {
    let master = Server::start(2);
    let mut m = master.client();
    let replica = tessera_replica(master.port);
    let mut r = replica.client();
    let _: () = q(&mut m, &["SET", "k", "1"]);
    let n: i64 = q(&mut m, &["WAIT", "1", "0"]);
    assert_eq!(n, 1);
    wait_in_sync(&mut m, &mut r);
    wait_online(&mut m, 1);
    // ROLE on the master lists the replica: address, listening port, and the offset
    // it acknowledged (its next once-a-second ACK reaches the master's offset).
    let role_entry = |m: &mut redis::Connection| -> Vec<String> {
        let role: redis::Value = redis::cmd("ROLE").query(m).expect("ROLE");
        let items = dataset::items(&role);
        assert_eq!(dataset::text(&items[0]), "master");
        let replicas = dataset::items(&items[2]);
        assert_eq!(replicas.len(), 1);
        dataset::items(&replicas[0])
            .iter()
            .map(dataset::text)
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let entry = role_entry(&mut m);
        assert_eq!(
            entry[..2],
            ["127.0.0.1".to_string(), replica.port.to_string()]
        );
        let offset = info_u64(&mut m, "replication", "master_repl_offset");
        if entry[2] == offset.to_string() {
            break;
        }
        assert!(Instant::now() < deadline, "{entry:?} at offset {offset}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A stopped replica acknowledges nothing: WAIT gives up at its timeout.
    replica.signal(libc::SIGSTOP);
    let _: () = q(&mut m, &["SET", "k", "2"]);
    let t0 = Instant::now();
    let n: i64 = q(&mut m, &["WAIT", "1", "500"]);
    assert_eq!(n, 0);
    assert!(
        t0.elapsed() >= Duration::from_millis(450),
        "{:?}",
        t0.elapsed()
    );
    replica.signal(libc::SIGCONT);
    let n: i64 = q(&mut m, &["WAIT", "1", "0"]);
    assert_eq!(n, 1);
    // Asking for more replicas than there are waits out the timeout with the count.
    let n: i64 = q(&mut m, &["WAIT", "2", "200"]);
    assert_eq!(n, 1);
    // Inside MULTI it never waits.
    let mut p = redis::pipe();
    p.atomic()
        .cmd("SET")
        .arg("k")
        .arg("3")
        .cmd("WAIT")
        .arg(5)
        .arg(0);
    let (_, n): (String, i64) = p.query(&mut m).expect("MULTI");
    assert!(n <= 1);
    assert!(err(&mut m, &["WAIT", "1", "-1"]).contains("timeout is negative"));
    assert!(err(&mut r, &["WAIT", "1", "0"]).contains("WAIT cannot be used with replica instances"));
}

#[test]
fn wait_works_with_a_redis_replica() {
    let master = Server::start(2);
    let mut m = master.client();
    let Some(redis) =
        ReferenceRedis::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()])
    else {
        eprintln!("redis-server not installed");
        return;
    };
    let mut r = redis.client();
    fill(&mut m, "w", 200);
    let n: i64 = q(&mut m, &["WAIT", "1", "5000"]);
    assert_eq!(n, 1);
    let v: String = q(&mut r, &["GET", "w:199"]);
    assert_eq!(v, "199");
}

#[test]
fn min_replicas_to_write_counts_replicas_that_acknowledge() {
    let master = Server::start_with(
        2,
        &[
            "--min-replicas-to-write",
            "1",
            "--min-replicas-max-lag",
            "2",
        ],
    );
    let mut m = master.client();
    assert!(err(&mut m, &["SET", "k", "1"]).contains("Not enough good replicas to write."));
    let replica = tessera_replica(master.port);
    let mut r = replica.client();
    wait_in_sync(&mut m, &mut r);
    wait_online(&mut m, 1);
    let _: () = q(&mut m, &["SET", "k", "1"]);
    assert_eq!(info_u64(&mut m, "replication", "min_slaves_good_slaves"), 1);
    // A replica that stops acknowledging stops counting after the lag allowed.
    replica.signal(libc::SIGSTOP);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let refused = redis::cmd("SET")
            .arg("k")
            .arg("2")
            .query::<()>(&mut m)
            .is_err();
        if refused {
            break;
        }
        assert!(Instant::now() < deadline, "writes still accepted");
        std::thread::sleep(Duration::from_millis(100));
    }
    replica.signal(libc::SIGCONT);
    let deadline = Instant::now() + Duration::from_secs(10);
    while redis::cmd("SET")
        .arg("k")
        .arg("3")
        .query::<()>(&mut m)
        .is_err()
    {
        assert!(Instant::now() < deadline, "writes still refused");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Two replicas of one master; one is promoted and the other follows it: PSYNC2
/// lets it continue (the promoted one keeps the old history as its second id).
fn promotion(
    m: &mut redis::Connection,
    promoted: &mut redis::Connection,
    promoted_port: u16,
    other: &mut redis::Connection,
) {
    fill(m, "before", 300);
    wait_in_sync(m, promoted);
    wait_in_sync(m, other);
    let _: () = q(promoted, &["REPLICAOF", "NO", "ONE"]);
    let _: () = q(
        other,
        &["REPLICAOF", "127.0.0.1", &promoted_port.to_string()],
    );
    fill(promoted, "after", 300);
    wait_in_sync(promoted, other);
    assert_eq!(info_u64(promoted, "stats", "sync_partial_ok"), 1);
    assert_eq!(info_u64(promoted, "stats", "sync_full"), 0);
    assert_eq!(
        info_field(promoted, "replication", "master_replid2"),
        info_field(m, "replication", "master_replid")
    );
    assert_same(promoted, other);
}

#[test]
fn a_promoted_tessera_replica_continues_a_redis_replica() {
    let master = Server::start(2);
    let mut m = master.client();
    let promoted = tessera_replica(master.port);
    let Some(redis) =
        ReferenceRedis::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()])
    else {
        eprintln!("redis-server not installed");
        return;
    };
    let mut p = promoted.client();
    let mut o = redis.client();
    promotion(&mut m, &mut p, promoted.port, &mut o);
}

#[test]
fn a_promoted_redis_replica_continues_a_tessera_replica() {
    let Some(redis) = master(&[]) else {
        eprintln!("redis-server not installed");
        return;
    };
    let mut m = redis.client();
    let Some(promoted) =
        ReferenceRedis::start_with(&["--replicaof", "127.0.0.1", &redis.port.to_string()])
    else {
        return;
    };
    let other = tessera_replica(redis.port);
    let mut p = promoted.client();
    let mut o = other.client();
    promotion(&mut m, &mut p, promoted.port, &mut o);
}

#[test]
fn failover_to_a_replica_loses_no_acknowledged_write() {
    let master = Server::start(2);
    let mut m = master.client();
    let replica = tessera_replica(master.port);
    let mut r = replica.client();
    fill(&mut m, "f", 200);
    wait_in_sync(&mut m, &mut r);
    assert!(err(&mut r, &["FAILOVER"]).contains("FAILOVER is not valid when server is a replica."));
    assert!(err(&mut m, &["FAILOVER", "ABORT"]).contains("No failover in progress."));
    assert!(err(&mut m, &["FAILOVER", "TO", "127.0.0.1", "1"])
        .contains("FAILOVER target HOST and PORT is not a replica."));
    assert!(err(&mut m, &["FAILOVER", "TIMEOUT", "0"])
        .contains("FAILOVER timeout must be greater than 0"));
    assert!(err(&mut m, &["FAILOVER", "FORCE"]).contains("requires both a timeout and target"));

    // A writer keeps going through the switch; what was acknowledged must be there.
    let port = master.port;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopping = stop.clone();
    let writer = std::thread::spawn(move || {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .and_then(|c| c.get_connection())
            .expect("connect");
        let mut acked = Vec::new();
        let mut i = 0u64;
        while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
            let key = format!("w:{i}");
            match redis::cmd("SET").arg(&key).arg(i).query::<()>(&mut c) {
                Ok(()) => acked.push(key),
                Err(e) => assert!(e.to_string().contains("read only replica"), "{e}"),
            }
            i += 1;
        }
        acked
    });
    std::thread::sleep(Duration::from_millis(200));
    let target = replica.port.to_string();
    let _: () = q(
        &mut m,
        &["FAILOVER", "TO", "127.0.0.1", &target, "TIMEOUT", "5000"],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(&mut m, "replication", "role") != "slave"
        || info_field(&mut m, "replication", "master_failover_state") != "no-failover"
    {
        assert!(Instant::now() < deadline, "the failover did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = writer.join().expect("writer");
    assert!(!acked.is_empty());
    assert_eq!(info_field(&mut r, "replication", "role"), "master");
    assert_eq!(info_u64(&mut r, "stats", "sync_partial_ok"), 1);
    assert_eq!(info_u64(&mut r, "stats", "sync_full"), 0);
    for key in &acked {
        let v: Option<String> = q(&mut r, &["GET", key]);
        assert!(v.is_some(), "{key} was acknowledged and is lost");
    }
    // The old master follows the new one.
    let _: () = q(&mut r, &["SET", "after", "1"]);
    wait_in_sync(&mut r, &mut m);
    assert_same(&mut r, &mut m);
}

#[test]
fn a_replica_hides_expired_keys_until_its_master_deletes_them() {
    let Some(redis) = master(&["--enable-debug-command", "yes"]) else {
        eprintln!("redis-server not installed");
        return;
    };
    let mut m = redis.client();
    let replica = replica_of(redis.port, &[]);
    let mut r = replica.client();
    wait_in_sync(&mut m, &mut r);
    // The master deletes only when asked: its DEL comes when a read finds the key.
    let _: () = q(&mut m, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    let _: () = q(&mut m, &["SET", "short", "v", "PX", "100"]);
    let _: () = q(&mut m, &["SET", "counter", "5", "PX", "100"]);
    wait_in_sync(&mut m, &mut r);
    std::thread::sleep(Duration::from_millis(300));
    // Hidden from reads, still held (not deleted by the replica itself).
    let v: Option<String> = q(&mut r, &["GET", "short"]);
    assert_eq!(v, None);
    let n: i64 = q(&mut r, &["DBSIZE"]);
    assert_eq!(n, 2);
    // The master's lazy expiry sends the DEL: gone on the replica too.
    let v: Option<String> = q(&mut m, &["GET", "short"]);
    assert_eq!(v, None);
    wait_in_sync(&mut m, &mut r);
    let n: i64 = q(&mut r, &["DBSIZE"]);
    assert_eq!(n, 1);
    // Promoted, it expires keys itself again.
    let _: () = q(&mut r, &["REPLICAOF", "NO", "ONE"]);
    let v: Option<String> = q(&mut r, &["GET", "counter"]);
    assert_eq!(v, None);
    let n: i64 = q(&mut r, &["DBSIZE"]);
    assert_eq!(n, 0);
}

/// RANDOMKEY deletes the expired keys it comes across, and the replica learns of it:
/// before, the DEL went nowhere and the replica kept the key, TTL and all, for good
/// (Redis's replication-3 "consistency with expire" caught it under load).
#[test]
fn expired_keys_randomkey_deletes_are_deleted_on_the_replica_too() {
    let master = Server::start(2);
    let mut m = master.client();
    let replica = tessera_replica(master.port);
    let mut r = replica.client();
    wait_in_sync(&mut m, &mut r);
    let _: () = q(&mut m, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    for i in 0..20 {
        let _: () = q(&mut m, &["SET", &format!("k{i}"), "v", "PX", "50"]);
    }
    wait_in_sync(&mut m, &mut r);
    std::thread::sleep(Duration::from_millis(150));
    let n: i64 = q(&mut r, &["DBSIZE"]);
    assert_eq!(n, 20, "the replica holds its master's expired keys");
    // Each call deletes the expired keys it samples; nil once none is left.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let k: Option<String> = q(&mut m, &["RANDOMKEY"]);
        if k.is_none() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "RANDOMKEY keeps returning expired keys"
        );
    }
    let _: () = q(&mut m, &["SET", "marker", "1"]);
    wait_in_sync(&mut m, &mut r);
    let deadline = Instant::now() + Duration::from_secs(5);
    while q::<i64>(&mut r, &["DBSIZE"]) != 1 {
        assert!(
            Instant::now() < deadline,
            "the replica kept keys its master deleted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A replica that applies its master's stream late (here: stopped while the master
/// gave keys a near deadline, then kept them) applies each deadline as given, even
/// one already past on its clock, and keeps the key: the master's PERSIST, SET or
/// GETEX PERSIST that came before the deadline follows. Deleting at the late EXPIRE
/// lost keys the master kept (Redis's checkAlreadyExpired is off on a replica).
#[test]
fn a_late_replica_keeps_keys_its_master_saved_before_their_deadline() {
    let Some(redis) = master(&[]) else {
        eprintln!("redis-server not installed");
        return;
    };
    let mut m = redis.client();
    let replica = replica_of(redis.port, &[]);
    let mut r = replica.client();
    for k in ["persisted", "overwritten", "getex", "restored"] {
        let _: () = q(&mut m, &["SET", k, "old"]);
    }
    let dump: Vec<u8> = q(&mut m, &["DUMP", "restored"]);
    wait_in_sync(&mut m, &mut r);
    replica.signal(libc::SIGSTOP);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    let at = (now_ms + 150).to_string();
    for k in ["persisted", "overwritten", "getex"] {
        let n: i64 = q(&mut m, &["PEXPIREAT", k, &at]);
        assert_eq!(n, 1);
    }
    let _: () = redis::cmd("RESTORE")
        .arg("restored")
        .arg(&at)
        .arg(&dump)
        .arg("REPLACE")
        .arg("ABSTTL")
        .query(&mut m)
        .expect("RESTORE");
    let n: i64 = q(&mut m, &["PERSIST", "persisted"]);
    assert_eq!(n, 1);
    let _: () = q(&mut m, &["SET", "overwritten", "new", "KEEPTTL"]);
    let _: () = q(&mut m, &["PERSIST", "overwritten"]);
    let _: Option<String> = q(&mut m, &["GETEX", "getex", "PERSIST"]);
    let n: i64 = q(&mut m, &["PERSIST", "restored"]);
    assert_eq!(n, 1);
    // The deadlines pass while the replica is stopped; the master kept every key.
    std::thread::sleep(Duration::from_millis(400));
    replica.signal(libc::SIGCONT);
    wait_in_sync(&mut m, &mut r);
    for (k, v) in [
        ("persisted", "old"),
        ("overwritten", "new"),
        ("getex", "old"),
        ("restored", "old"),
    ] {
        let got: Option<String> = q(&mut r, &["GET", k]);
        assert_eq!(got.as_deref(), Some(v), "{k} on the replica");
        let ttl: i64 = q(&mut r, &["PTTL", k]);
        assert_eq!(ttl, -1, "{k} on the replica");
    }
}

/// SHUTDOWN waits for a replica that has not acknowledged the whole stream (up to
/// `shutdown-timeout`), holding writes meanwhile: INFO shows shutdown_in_milliseconds
/// and the caller is blocked; SHUTDOWN ABORT lets the writes go and the caller gets
/// Redis's error; once the replica catches up, the master exits and the replica has
/// every write.
#[test]
fn shutdown_waits_for_a_lagging_replica_and_can_be_aborted() {
    use std::io::{Read, Write};
    let mut master = Server::start(2);
    let mut m = master.client();
    let replica = tessera_replica(master.port);
    let mut r = replica.client();
    let _: () = q(&mut m, &["SET", "k", "1"]);
    wait_in_sync(&mut m, &mut r);
    replica.signal(libc::SIGSTOP);
    // Once the socket's buffers are full, the stream the replica has not read shows
    // as replication buffers (what Redis's own shutdown test waits for).
    let chunk = "x".repeat(1 << 20);
    for i in 0.. {
        assert!(i < 64, "no replication buffers after 64 MB");
        let _: () = q(&mut m, &["SET", &format!("junk{i}"), &chunk]);
        // The backlog alone can pass 2 MB of buffers; what matters is the replica's part.
        // Both read from one INFO: between two readings the kernel may take more of the
        // stream into the socket and the buffer shrink (seen once in CI).
        let memory: String = q(&mut m, &["INFO", "memory"]);
        let field = |name: &str| -> u64 {
            memory
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
                .unwrap_or(0)
        };
        if field("mem_clients_slaves") > 1 << 20 && field("mem_total_replication_buffers") > 2 << 20
        {
            break;
        }
    }
    let _: () = q(&mut m, &["SET", "k", "2"]);
    let shutdown = |port: u16| {
        std::thread::spawn(move || {
            let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .and_then(|c| c.get_connection())
                .expect("connect");
            redis::cmd("SHUTDOWN").query::<()>(&mut c)
        })
    };
    let first = shutdown(master.port);
    let deadline = Instant::now() + Duration::from_secs(5);
    while info_field(&mut m, "server", "shutdown_in_milliseconds").is_empty() {
        assert!(Instant::now() < deadline, "no shutdown waits");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(info_u64(&mut m, "clients", "blocked_clients"), 1);
    // Writes wait while the shutdown does; reads go on.
    let mut writer = std::net::TcpStream::connect(("127.0.0.1", master.port)).expect("connect");
    writer.write_all(b"SET during 1\r\n").expect("write");
    writer
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let mut buf = [0u8; 5];
    assert!(writer.read_exact(&mut buf).is_err(), "a write ran");
    let v: Option<String> = q(&mut m, &["GET", "k"]);
    assert_eq!(v.as_deref(), Some("2"));
    let _: () = q(&mut m, &["SHUTDOWN", "ABORT"]);
    let e = first
        .join()
        .expect("thread")
        .expect_err("SHUTDOWN was aborted");
    assert!(e.to_string().contains("Errors trying to SHUTDOWN"), "{e}");
    writer
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    writer.read_exact(&mut buf).expect("the held write's reply");
    assert_eq!(&buf, b"+OK\r\n");
    assert!(err(&mut m, &["SHUTDOWN", "ABORT"]).contains("No shutdown in progress"));
    // Again, and this time the replica wakes up: the master exits once it caught up.
    let second = shutdown(master.port);
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        master.is_running(),
        "the master did not wait for its replica"
    );
    replica.signal(libc::SIGCONT);
    assert_eq!(master.wait_exit(Duration::from_secs(10)), Some(0));
    let _ = second.join();
    let v: Option<String> = q(&mut r, &["GET", "during"]);
    assert_eq!(v.as_deref(), Some("1"));
    let v: Option<String> = q(&mut r, &["GET", "k"]);
    assert_eq!(v.as_deref(), Some("2"));
}

fn link_up(c: &mut redis::Connection) -> bool {
    info_field(c, "replication", "master_link_status") == "up"
}

#[test]
fn diskless_sync_delay_gathers_replicas_and_max_replicas_starts_early() {
    let master = Server::start_with(
        2,
        &[
            "--repl-diskless-sync-delay",
            "3",
            "--repl-diskless-sync-max-replicas",
            "2",
        ],
    );
    let mut m = master.client();
    fill(&mut m, "d", 100);
    let a = tessera_replica(master.port);
    let mut ac = a.client();
    std::thread::sleep(Duration::from_millis(800));
    assert!(!link_up(&mut ac), "the sync did not wait for the delay");
    // The second replica fills the round: both sync at once, well before 3 s.
    let t0 = Instant::now();
    let b = tessera_replica(master.port);
    let mut bc = b.client();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(link_up(&mut ac) && link_up(&mut bc)) {
        assert!(Instant::now() < deadline, "the replicas never synced");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        t0.elapsed() < Duration::from_millis(1800),
        "{:?}",
        t0.elapsed()
    );
    wait_in_sync(&mut m, &mut ac);
    assert_same(&mut m, &mut bc);
}

#[test]
fn disk_based_sync_writes_the_rdb_first() {
    let dir = scratch_dir("replica", "disk-sync");
    let dir_arg = dir.display().to_string();
    let master = Server::start_with(2, &["--repl-diskless-sync", "no", "--dir", &dir_arg]);
    let mut m = master.client();
    fill(&mut m, "disk", 100);
    let before: i64 = q(&mut m, &["LASTSAVE"]);
    std::thread::sleep(Duration::from_millis(1100));
    let replica = tessera_replica(master.port);
    let mut r = replica.client();
    wait_in_sync(&mut m, &mut r);
    assert!(dir.join("dump.rdb").exists(), "no dump.rdb in {dir_arg}");
    let after: i64 = q(&mut m, &["LASTSAVE"]);
    assert!(after > before, "LASTSAVE did not move");
    assert_same(&mut m, &mut r);
}

/// Waits up to 10 s for `what` to hold, failing with `why`.
fn wait_until(why: &str, mut what: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !what() {
        assert!(Instant::now() < deadline, "{why}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the master lists `n` replicas online: a replica whose link is up has
/// its snapshot, but its master counts it online (ROLE, min-replicas-to-write) only
/// once the transfer's end is seen there too, as in Redis.
fn wait_online(m: &mut redis::Connection, n: usize) {
    wait_until("the master does not list its replicas online", || {
        let info: String = q(m, &["INFO", "replication"]);
        info.matches("state=online").count() == n
    });
}

/// A master that syncs replicas through a disk BGSAVE of its 10 keys, each key's
/// save delayed by `key_delay_us` microseconds, with no save point.
fn slow_disk_sync_master(key_delay_us: &str) -> Server {
    let master = Server::start_with(
        2,
        &[
            "--repl-diskless-sync",
            "no",
            "--save",
            "",
            "--rdb-key-save-delay",
            key_delay_us,
        ],
    );
    let mut m = master.client();
    for i in 0..10 {
        let _: () = q(&mut m, &["SET", &format!("k{i}"), "v"]);
    }
    master
}

/// Two replicas that ask for a disk-based sync while its BGSAVE runs share it, as
/// Redis's replicas do: one save (rdb_saves counts 1), INFO shows both waiting for
/// it (wait_bgsave) and then online, and the writes made during the save reach both
/// (the second link starts at the first one's cut, from the backlog).
#[test]
fn disk_based_sync_replicas_share_one_bgsave() {
    let master = slow_disk_sync_master("300000");
    let mut m = master.client();
    let saves_before = persistence_field(&mut m, "rdb_saves");
    let a = tessera_replica(master.port);
    wait_until("the first replica's BGSAVE did not start", || {
        persistence_field(&mut m, "rdb_bgsave_in_progress") == "1"
    });
    let b = tessera_replica(master.port);
    let (mut ac, mut bc) = (a.client(), b.client());
    wait_until(
        "INFO does not show both replicas waiting for the BGSAVE",
        || {
            info_field(&mut m, "replication", "connected_slaves") == "2"
                && info_field(&mut m, "replication", "slave0").contains("state=wait_bgsave")
                && info_field(&mut m, "replication", "slave1").contains("state=wait_bgsave")
        },
    );
    let _: () = q(&mut m, &["SET", "during", "the save"]);
    let _: () = q(&mut m, &["INCR", "k0-counter"]);
    wait_in_sync(&mut m, &mut ac);
    wait_in_sync(&mut m, &mut bc);
    assert_same(&mut m, &mut ac);
    assert_same(&mut m, &mut bc);
    let saves_after = persistence_field(&mut m, "rdb_saves");
    assert_eq!(
        saves_after.parse::<u64>().unwrap_or(0),
        saves_before.parse::<u64>().unwrap_or(0) + 1,
        "the replicas did not share one BGSAVE"
    );
    wait_online(&mut m, 2);
}

/// The BGSAVE of a disk-based sync is given up once no replica waits for it and no
/// `save` point wants the file (Redis's "Kill rdb child process if its dumping RDB is
/// not useful"); with a save point it goes on.
#[test]
fn a_disk_sync_bgsave_nobody_waits_for_is_given_up() {
    let master = slow_disk_sync_master("1000000");
    let mut m = master.client();
    let (a, b) = (tessera_replica(master.port), tessera_replica(master.port));
    let (mut ac, mut bc) = (a.client(), b.client());
    let both_wait = |m: &mut redis::Connection| {
        persistence_field(m, "rdb_bgsave_in_progress") == "1"
            && info_field(m, "replication", "slave0").contains("state=wait_bgsave")
            && info_field(m, "replication", "slave1").contains("state=wait_bgsave")
    };
    wait_until("the BGSAVE did not start for both", || both_wait(&mut m));
    let _: () = q(&mut ac, &["REPLICAOF", "NO", "ONE"]);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        persistence_field(&mut m, "rdb_bgsave_in_progress"),
        "1",
        "given up while a replica still waited for it"
    );
    let _: () = q(&mut bc, &["REPLICAOF", "NO", "ONE"]);
    // Within a second, as Redis's test asks (the save itself would take ten): the
    // replica closes its link at REPLICAOF NO ONE, and the master notices at once.
    let t0 = Instant::now();
    wait_until("the unwanted BGSAVE went on", || {
        persistence_field(&mut m, "rdb_bgsave_in_progress") == "0"
    });
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(persistence_field(&mut m, "rdb_last_bgsave_status"), "ok");
    // A save point wants the file: it is saved to the end.
    let _: () = q(&mut m, &["CONFIG", "SET", "save", "900 1"]);
    let port = master.port.to_string();
    let _: () = q(&mut ac, &["REPLICAOF", "127.0.0.1", &port]);
    let _: () = q(&mut bc, &["REPLICAOF", "127.0.0.1", &port]);
    wait_until("the BGSAVE did not start again", || both_wait(&mut m));
    let _: () = q(&mut ac, &["REPLICAOF", "NO", "ONE"]);
    let _: () = q(&mut bc, &["REPLICAOF", "NO", "ONE"]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(persistence_field(&mut m, "rdb_bgsave_in_progress"), "1");
    let _: () = q(&mut m, &["CONFIG", "SET", "rdb-key-save-delay", "0"]);
}

#[test]
fn a_silent_replica_is_dropped_after_repl_timeout_and_comes_back() {
    let master = Server::start_with(2, &["--repl-timeout", "2"]);
    let mut m = master.client();
    fill(&mut m, "t", 100);
    let replica = tessera_replica(master.port);
    let mut r = replica.client();
    wait_in_sync(&mut m, &mut r);
    replica.signal(libc::SIGSTOP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_u64(&mut m, "replication", "connected_slaves") != 0 {
        assert!(
            Instant::now() < deadline,
            "the silent replica was never dropped"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    fill(&mut m, "t2", 100);
    replica.signal(libc::SIGCONT);
    wait_in_sync(&mut m, &mut r);
    assert_eq!(info_u64(&mut m, "stats", "sync_partial_ok"), 1);
    assert_same(&mut m, &mut r);
}

/// Waits until the master's INFO says a transfer (an RDB child) runs.
fn wait_transfer_running(m: &mut redis::Connection) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(m, "persistence", "rdb_bgsave_in_progress") != "1" {
        assert!(Instant::now() < deadline, "no transfer started");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_diskless_sync_walks_the_dataset_while_the_master_serves() {
    let master = Server::start(2);
    let mut m = master.client();
    fill(&mut m, "w", 2000);
    // A millisecond per key saved: the walk takes about a second per shard.
    let _: () = q(&mut m, &["CONFIG", "SET", "rdb-key-save-delay", "1000"]);
    let replica = tessera_replica(master.port);
    wait_transfer_running(&mut m);
    // The master is not held by the snapshot: it answers and takes writes at once,
    // on keys the walk has and has not reached.
    for i in 0..200 {
        let t0 = Instant::now();
        let _: () = q(&mut m, &["SET", &format!("w:{}", i * 10), "changed"]);
        let _: () = q(&mut m, &["DEL", &format!("w:{}", i * 10 + 1)]);
        let _: () = q(&mut m, &["RPUSH", &format!("w:l{}", i % 7), "late"]);
        assert!(
            t0.elapsed() < Duration::from_millis(300),
            "{:?}",
            t0.elapsed()
        );
    }
    assert_eq!(
        info_field(&mut m, "persistence", "rdb_bgsave_in_progress"),
        "1"
    );
    assert!(err(&mut m, &["BGSAVE"]).contains("Background save already in progress"));
    let _: () = q(&mut m, &["CONFIG", "SET", "rdb-key-save-delay", "0"]);
    let mut r = replica.client();
    wait_in_sync(&mut m, &mut r);
    assert_same(&mut m, &mut r);
    let changed: String = q(&mut r, &["GET", "w:10"]);
    assert_eq!(changed, "changed");
}

#[test]
fn a_replica_dropped_mid_transfer_leaves_the_others_syncing() {
    let master = Server::start_with(
        2,
        &[
            "--repl-diskless-sync-delay",
            "5",
            "--repl-diskless-sync-max-replicas",
            "2",
        ],
    );
    let mut m = master.client();
    fill(&mut m, "x", 2000);
    let _: () = q(&mut m, &["CONFIG", "SET", "rdb-key-save-delay", "500"]);
    let dropped = tessera_replica(master.port);
    let kept = tessera_replica(master.port);
    wait_transfer_running(&mut m);
    dropped.signal(libc::SIGKILL);
    drop(dropped);
    let _: () = q(&mut m, &["SET", "x:after", "1"]);
    let _: () = q(&mut m, &["CONFIG", "SET", "rdb-key-save-delay", "0"]);
    let mut r = kept.client();
    wait_in_sync(&mut m, &mut r);
    assert_same(&mut m, &mut r);
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_u64(&mut m, "replication", "connected_slaves") != 1 {
        assert!(
            Instant::now() < deadline,
            "the dropped replica's link stayed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_replica_answers_loading_while_it_loads_its_masters_file() {
    let master = Server::start(2);
    let mut m = master.client();
    fill(&mut m, "ld", 1500);
    // A millisecond per key loaded: the load takes a few seconds.
    let replica = replica_of(master.port, &["--key-load-delay", "1000"]);
    let mut r = replica.client();
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(&mut r, "persistence", "loading") != "1" {
        assert!(Instant::now() < deadline, "the replica never loaded");
        std::thread::sleep(Duration::from_millis(5));
    }
    let refused = err(&mut r, &["GET", "ld:1"]);
    assert!(refused.to_lowercase().contains("loading"), "{refused}");
    // Commands flagged `loading` (INFO above, CONFIG) still run.
    let _: () = q(&mut r, &["CONFIG", "SET", "key-load-delay", "0"]);
    wait_in_sync(&mut m, &mut r);
    assert_same(&mut m, &mut r);
}

/// A client of database `db` on the server at `port`.
fn client_of_db(port: u16, db: u32) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/{db}"))
        .and_then(|c| c.get_connection())
        .expect("connect")
}

/// SHUTDOWN `how` (the connection closes under it) and the process's end.
fn shut_down(server: &mut Server, how: &str) {
    let mut c = server.client();
    let _ = redis::cmd("SHUTDOWN").arg(how).query::<()>(&mut c);
    assert_eq!(server.wait_exit(Duration::from_secs(20)), Some(0));
}

/// A replica of the master on `master_port` saves at SHUTDOWN and starts again
/// from that file while the master writes on: the file's replication fields let it
/// continue with a partial resync, in the database the stream had selected last
/// (the master's stream goes on without selecting it again).
fn replica_restart_continues(master_port: u16) {
    let mut m = client_of_db(master_port, 0);
    let mut m3 = client_of_db(master_port, 3);
    let dir = scratch_dir("replica", &format!("restart-{master_port}"));
    let dir_arg = dir.display().to_string();
    let port = master_port.to_string();
    let replica_args = ["--replicaof", "127.0.0.1", &port, "--dir", &dir_arg];
    let mut replica = Server::start_with(2, &replica_args);
    fill(&mut m, "before", 500);
    // The stream's last SELECT is of database 3.
    let _: () = q(&mut m3, &["SET", "in3", "a"]);
    let mut r = replica.client();
    wait_in_sync(&mut m, &mut r);
    let acked: i64 = q(&mut m, &["WAIT", "1", "5000"]);
    assert_eq!(acked, 1);
    let (full, partial) = (
        info_u64(&mut m, "stats", "sync_full"),
        info_u64(&mut m, "stats", "sync_partial_ok"),
    );
    drop(r);
    shut_down(&mut replica, "SAVE");

    // Database 3 first: these reach the replica with no SELECT before them.
    let _: () = q(&mut m3, &["SET", "in3", "b"]);
    let _: i64 = q(&mut m3, &["RPUSH", "list3", "x", "y"]);
    fill(&mut m, "during", 300);
    let replica = Server::start_with(2, &replica_args);
    let mut r = replica.client();
    wait_in_sync(&mut m, &mut r);
    fill(&mut m, "after", 100);
    wait_in_sync(&mut m, &mut r);
    assert_eq!(info_u64(&mut m, "stats", "sync_partial_ok"), partial + 1);
    assert_eq!(info_u64(&mut m, "stats", "sync_full"), full);
    let diffs = dataset::compare(&mut m, &mut r, &[0, 3]);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

#[test]
fn a_restarted_tessera_replica_continues_from_its_rdb() {
    let master = Server::start(2);
    replica_restart_continues(master.port);
}

#[test]
fn a_restarted_replica_of_redis_continues_from_its_rdb() {
    let Some(redis) = master(&[]) else {
        eprintln!("redis-server not installed");
        return;
    };
    replica_restart_continues(redis.port);
}

/// A master saves at SHUTDOWN and starts again from that file on its port: the
/// file's replication fields become its second id, and its replica continues with
/// +CONTINUE. A key that expired meanwhile reaches the replica as a DEL.
#[test]
fn a_restarted_master_continues_its_replica_from_its_rdb() {
    let dir = scratch_dir("replica", "master-restart");
    let dir_arg = dir.display().to_string();
    let log = dir.join("master.log");
    let master_args = ["--dir", &dir_arg, "--save", ""];
    let port = free_port();
    let mut master = Server::start_on(port, 2, &master_args, &log).expect("master starts");
    let mut m = master.client();
    let replica = tessera_replica(port);
    let mut r = replica.client();
    fill(&mut m, "before", 500);
    let _: () = q(&mut m, &["SET", "short-lived", "x", "PX", "1500"]);
    let expires = Instant::now() + Duration::from_millis(1600);
    wait_in_sync(&mut m, &mut r);
    let old_id = info_field(&mut m, "replication", "master_replid");
    let old_offset = info_u64(&mut m, "replication", "master_repl_offset");
    drop(m);
    shut_down(&mut master, "SAVE");
    // The key expires while the master is down: the file still holds it.
    std::thread::sleep(expires.saturating_duration_since(Instant::now()));

    let master = Server::start_on(port, 2, &master_args, &log).expect("master restarts");
    let mut m = master.client();
    assert_eq!(info_field(&mut m, "replication", "master_replid2"), old_id);
    assert_eq!(
        info_u64(&mut m, "replication", "second_repl_offset"),
        old_offset + 1
    );
    wait_in_sync(&mut m, &mut r);
    fill(&mut m, "after", 200);
    wait_in_sync(&mut m, &mut r);
    assert_eq!(info_u64(&mut m, "stats", "sync_partial_ok"), 1);
    assert_eq!(info_u64(&mut m, "stats", "sync_full"), 0);
    assert_eq!(
        info_field(&mut r, "replication", "master_replid"),
        info_field(&mut m, "replication", "master_replid")
    );
    let sizes: (i64, i64) = (q(&mut m, &["DBSIZE"]), q(&mut r, &["DBSIZE"]));
    assert_eq!(
        sizes.0, sizes.1,
        "the expired key's DEL reached the replica"
    );
    assert_same(&mut m, &mut r);
}

#[test]
fn a_writable_replica_expires_the_keys_its_clients_gave_a_ttl() {
    let master = Server::start(2);
    let mut m = master.client();
    let _: () = q(&mut m, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    let replica = tessera_replica(master.port);
    let mut r = replica.client();
    wait_in_sync(&mut m, &mut r);
    let _: () = q(&mut m, &["SET", "from-master", "1", "PX", "50"]);
    wait_in_sync(&mut m, &mut r);
    let _: () = q(&mut r, &["CONFIG", "SET", "replica-read-only", "no"]);
    let _: () = q(&mut r, &["SET", "local", "1", "PX", "50"]);
    let _: () = q(&mut r, &["SET", "made-persistent", "1", "PX", "50"]);
    let _: i64 = q(&mut r, &["PERSIST", "made-persistent"]);
    let _: () = q(&mut r, &["SET", "plain", "1"]);
    let _: () = q(&mut r, &["SET", "later", "1", "PX", "60000"]);
    std::thread::sleep(Duration::from_millis(600));
    // The replica's own expired key is deleted by the replica; the master's waits
    // for the master's DEL (its active expiry is off), hidden from reads meanwhile.
    let size: i64 = q(&mut r, &["DBSIZE"]);
    assert_eq!(size, 4);
    // Only the local key whose TTL has not run out is still tracked.
    assert_eq!(info_u64(&mut r, "stats", "slave_expires_tracked_keys"), 1);
    let exists: i64 = q(&mut r, &["EXISTS", "from-master", "local"]);
    assert_eq!(exists, 0);
    // A write finds the master's expired key gone and starts it afresh (Redis's
    // expireIfNeeded with EXPIRE_FORCE_DELETE_EXPIRED on a writable replica).
    let n: i64 = q(&mut r, &["INCR", "from-master"]);
    assert_eq!(n, 1);
    let ttl: i64 = q(&mut r, &["TTL", "from-master"]);
    assert_eq!(ttl, -1);
}

#[test]
fn errors_on_the_masters_commands_are_logged_and_may_stop_the_replica() {
    let dir = scratch_dir("replica", "critical");
    let log = dir.join("replica.log");
    let master = Server::start(2);
    let mut m = master.client();
    let port = master.port.to_string();
    let mut replica = Server::start_logged_with(2, &["--replicaof", "127.0.0.1", &port], &log);
    let mut r = replica.client();
    wait_in_sync(&mut m, &mut r);
    // A writable replica's own write makes the master's INCRBY fail here.
    let _: () = q(&mut r, &["CONFIG", "SET", "replica-read-only", "no"]);
    let _: () = q(&mut r, &["SET", "number", "foo"]);
    let _: i64 = q(&mut m, &["INCRBY", "number", "1"]);
    let _: () = q(&mut m, &["DEBUG", "REPLICATE", "fake-command-1"]);
    wait_in_sync(&mut m, &mut r);
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(
        text.contains("== CRITICAL == This replica is sending an error to its master: 'ERR value is not an integer or out of range' after processing the command 'incrby'"),
        "{text}"
    );
    assert!(
        text.contains("unknown command 'fake-command-1'")
            && text.contains("after processing the command '<unknown>'"),
        "{text}"
    );
    assert_eq!(info_u64(&mut r, "stats", "unexpected_error_replies"), 2);
    let value: String = q(&mut r, &["GET", "number"]);
    assert_eq!(value, "foo");
    // Read-only again, told to panic: the next error ends the replica.
    let _: () = q(&mut r, &["CONFIG", "SET", "replica-read-only", "yes"]);
    let _: () = q(
        &mut r,
        &[
            "CONFIG",
            "SET",
            "propagation-error-behavior",
            "panic-on-replicas",
        ],
    );
    let _: () = q(&mut m, &["DEBUG", "REPLICATE", "fake-command-2"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while replica.is_running() {
        assert!(Instant::now() < deadline, "the replica went on");
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(
        text.contains("This replica panicked sending an error to its master after processing the command '<unknown>'"),
        "{text}"
    );
}

#[test]
fn a_master_turned_replica_unblocks_its_blocked_clients_with_an_error() {
    let old_master = Server::start(2);
    let new_master = Server::start(2);
    let (_, blpop) = spawn_blocked(&old_master, &["BLPOP", "foo", "0"]);
    let (_, xread) = spawn_blocked(&old_master, &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]);
    let mut c = old_master.client();
    wait_blocked(&mut c, 2);
    let port = new_master.port.to_string();
    let _: () = q(&mut c, &["REPLICAOF", "127.0.0.1", &port]);
    // Served by the new master's stream instead, they would pop its data here.
    for h in [blpop, xread] {
        let e = h.join().expect("thread").expect_err("an error");
        assert!(
            e.to_string().contains(
                "force unblock from blocking operation, instance state changed (master -> replica?)"
            ),
            "{e}"
        );
    }
    let mut m = new_master.client();
    let _: () = q(&mut m, &["RPUSH", "foo", "a", "b", "c"]);
    wait_in_sync(&mut m, &mut c);
    let list: Vec<String> = q(&mut c, &["LRANGE", "foo", "0", "-1"]);
    assert_eq!(list, ["a", "b", "c"]);
}

#[test]
fn a_busy_script_on_the_replica_holds_the_stream_without_losing_it() {
    let master = Server::start(2);
    let replica = tessera_replica(master.port);
    let (mut m, mut r) = (master.client(), replica.client());
    wait_in_sync(&mut m, &mut r);
    let _: () = q(&mut r, &["CONFIG", "SET", "busy-reply-threshold", "100"]);
    let (_, script) = spawn_blocked(&replica, &["EVAL", "while true do end", "0"]);
    std::thread::sleep(Duration::from_millis(300));
    // The stream meanwhile: applied now, its commands would get -BUSY.
    fill(&mut m, "busy", 300);
    std::thread::sleep(Duration::from_millis(300));
    let _: () = q(&mut r, &["SCRIPT", "KILL"]);
    let killed = script.join().expect("thread").expect_err("killed");
    assert!(killed.to_string().contains("Script killed"), "{killed}");
    wait_in_sync(&mut m, &mut r);
    assert_same(&mut m, &mut r);
    assert_eq!(info_u64(&mut r, "stats", "unexpected_error_replies"), 0);
}

/// Redis 7.0's shared replication buffer: two replicas cost one copy of the stream;
/// a stopped replica keeps the buffer beyond repl-backlog-size, so that another
/// replica that comes back continues from anywhere in it with a partial resync; the
/// stopped one is dropped at its output buffer limit (raised to the backlog's size,
/// as Redis does), and the buffer shrinks back to the backlog.
#[test]
fn replicas_share_one_buffer_that_a_slow_replica_makes_outgrow_the_backlog() {
    let master = Server::start_with(2, &["--repl-backlog-size", "16kb"]);
    let mut m = master.client();
    let fast = tessera_replica(master.port);
    let slow = tessera_replica(master.port);
    let (mut f, mut s) = (fast.client(), slow.client());
    let _: () = q(&mut m, &["SET", "k", "0"]);
    wait_in_sync(&mut m, &mut f);
    wait_in_sync(&mut m, &mut s);
    wait_online(&mut m, 2);
    slow.signal(libc::SIGSTOP);
    // 48 MB of stream, more than the stopped replica's socket buffers take.
    let value = "v".repeat(64 * 1024);
    let write = |m: &mut redis::Connection, prefix: &str, n: usize| {
        for i in 0..n {
            let _: () = q(m, &["SET", &format!("{prefix}:{i}"), &value]);
        }
    };
    write(&mut m, "a", 768);
    wait_in_sync(&mut m, &mut f);
    let histlen = info_u64(&mut m, "replication", "repl_backlog_histlen");
    assert!(
        histlen > 16 << 20,
        "the slow replica's part went: {histlen}"
    );
    let total = info_u64(&mut m, "memory", "mem_total_replication_buffers");
    assert!(
        total < 64 << 20,
        "more than one copy for two replicas: {total}"
    );
    assert!(info_u64(&mut m, "memory", "mem_clients_slaves") > 16 << 20);
    // The fast replica leaves for a while; it comes back far behind the last 16 KB,
    // but inside what the buffer holds for the slow one.
    let nobody = free_port().to_string();
    let _: () = q(&mut f, &["REPLICAOF", "127.0.0.1", &nobody]);
    write(&mut m, "b", 32);
    let port = master.port.to_string();
    let _: () = q(&mut f, &["REPLICAOF", "127.0.0.1", &port]);
    wait_in_sync(&mut m, &mut f);
    assert_eq!(info_u64(&mut m, "stats", "sync_partial_ok"), 1);
    assert_same(&mut m, &mut f);
    // The stopped replica breaks a 128 KB limit: dropped, and its part of the
    // buffer freed.
    let _: () = q(
        &mut m,
        &[
            "CONFIG",
            "SET",
            "client-output-buffer-limit",
            "replica 128kb 0 0",
        ],
    );
    wait_until("the stopped replica was not dropped", || {
        info_u64(&mut m, "replication", "connected_slaves") == 1
    });
    wait_until("the buffer did not shrink", || {
        info_u64(&mut m, "replication", "repl_backlog_histlen") < 1 << 20
            && info_u64(&mut m, "memory", "mem_total_replication_buffers") < 1 << 20
    });
    slow.signal(libc::SIGCONT);
    wait_in_sync(&mut m, &mut s);
    assert_same(&mut m, &mut s);
}

/// WAIT counts the replicas that acknowledged the client's own last write (Redis's
/// c->woff), not the stream's end: a stopped replica that got one client's write
/// before it stopped still counts for that client; a client that wrote nothing is
/// answered at once with the replicas online.
#[test]
fn wait_counts_from_the_clients_own_last_write() {
    let master = Server::start(2);
    let (mut a, mut b, mut idle) = (master.client(), master.client(), master.client());
    let replica = tessera_replica(master.port);
    let mut r = replica.client();
    let _: () = q(&mut a, &["SET", "a", "1"]);
    let n: i64 = q(&mut a, &["WAIT", "1", "0"]);
    assert_eq!(n, 1);
    wait_in_sync(&mut a, &mut r);
    wait_online(&mut a, 1);
    replica.signal(libc::SIGSTOP);
    let _: () = q(&mut b, &["SET", "b", "1"]);
    let t0 = Instant::now();
    let n: i64 = q(&mut a, &["WAIT", "1", "2000"]);
    assert_eq!(n, 1, "the replica acknowledged a's write before it stopped");
    let n: i64 = q(&mut idle, &["WAIT", "1", "2000"]);
    assert_eq!(n, 1, "a client without writes waits for nothing");
    assert!(
        t0.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t0.elapsed()
    );
    let n: i64 = q(&mut b, &["WAIT", "1", "300"]);
    assert_eq!(n, 0, "b's write never reached the stopped replica");
    // A transaction's writes count from its EXEC, not from when they were queued.
    let _: () = q(&mut idle, &["MULTI"]);
    let _: String = q(&mut idle, &["INCR", "c"]);
    let _: Vec<i64> = q(&mut idle, &["EXEC"]);
    let n: i64 = q(&mut idle, &["WAIT", "1", "300"]);
    assert_eq!(n, 0, "the EXEC's write never reached the stopped replica");
    replica.signal(libc::SIGCONT);
    let n: i64 = q(&mut b, &["WAIT", "1", "0"]);
    assert_eq!(n, 1);
}

/// Hash field TTLs on a Tessera replica: the full sync carries them (RDB types 24 and
/// 25), and a field past its deadline is hidden from the replica's clients but left
/// for the master's HDEL, as Redis 7.4 replicas do.
#[test]
fn a_replica_keeps_field_ttls_and_waits_for_the_masters_hdel() {
    let master = Server::start(2);
    let mut m = master.client();
    let _: () = q(&mut m, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    let _: i64 = q(&mut m, &["HSET", "small", "a", "1", "b", "2", "c", "3"]);
    let mut big = redis::cmd("HSET");
    big.arg("big");
    for i in 0..600 {
        big.arg(format!("f{i}")).arg(i);
    }
    let _: i64 = big.query(&mut m).unwrap();
    let _: Vec<i64> = q(&mut m, &["HEXPIRE", "small", "1000", "FIELDS", "1", "b"]);
    let _: Vec<i64> = q(&mut m, &["HEXPIRE", "big", "1000", "FIELDS", "1", "f1"]);
    let replica = tessera_replica(master.port);
    let mut r = replica.client();
    wait_in_sync(&mut m, &mut r);
    for (key, field) in [("small", "b"), ("big", "f1")] {
        let on_master: Vec<i64> = q(&mut m, &["HPEXPIRETIME", key, "FIELDS", "1", field]);
        let on_replica: Vec<i64> = q(&mut r, &["HPEXPIRETIME", key, "FIELDS", "1", field]);
        assert_eq!(on_master, on_replica, "{key}");
    }
    // Past its deadline on both, deleted on neither (no active expiry on the master).
    let _: Vec<i64> = q(&mut m, &["HPEXPIRE", "small", "30", "FIELDS", "1", "a"]);
    wait_in_sync(&mut m, &mut r);
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(q::<Option<String>>(&mut r, &["HGET", "small", "a"]), None);
    assert_eq!(q::<i64>(&mut r, &["HLEN", "small"]), 2);
    let picks: Vec<String> = q(&mut r, &["HRANDFIELD", "small", "-50"]);
    assert!(picks.iter().all(|f| f != "a"), "{picks:?}");
    assert_eq!(info_field(&mut r, "stats", "expired_subkeys"), "0");
    // The master's read deletes it and sends the HDEL.
    assert_eq!(q::<i64>(&mut m, &["HLEN", "small"]), 2);
    wait_in_sync(&mut m, &mut r);
    let fields: Vec<String> = q(&mut r, &["HKEYS", "small"]);
    assert_eq!(fields, vec!["b", "c"]);
    let _: () = q(&mut m, &["DEBUG", "SET-ACTIVE-EXPIRE", "1"]);
}

/// Redis 8.0's HGETDEL / HGETEX / HSETEX reach a Tessera replica as the commands they
/// propagate as (HDEL, HPEXPIREAT, HPERSIST, HSETEX ... PXAT): it ends with the
/// master's fields and deadlines, on small and big hashes.
#[test]
fn a_replica_follows_hgetex_hsetex_and_hgetdel() {
    let master = Server::start(2);
    let mut m = master.client();
    let replica = tessera_replica(master.port);
    let mut r = replica.client();
    wait_in_sync(&mut m, &mut r);
    let big: Vec<String> = (0..300)
        .flat_map(|i| [format!("f{i}"), i.to_string()])
        .collect();
    let mut hsetex_big = vec!["HSETEX", "big", "EX", "1000", "FIELDS", "300"];
    hsetex_big.extend(big.iter().map(String::as_str));
    let writes: &[&[&str]] = &[
        &hsetex_big,
        &[
            "HSETEX", "small", "PX", "500000", "FIELDS", "3", "a", "1", "b", "2", "c", "3",
        ],
        &[
            "HSETEX", "small", "KEEPTTL", "FXX", "FIELDS", "1", "a", "10",
        ],
        &["HSETEX", "small", "FIELDS", "1", "b", "20"],
        &["HSETEX", "small", "EXAT", "1", "FIELDS", "1", "gone", "x"],
        &["HGETEX", "small", "EX", "2000", "FIELDS", "1", "c"],
        &["HGETEX", "big", "PERSIST", "FIELDS", "2", "f1", "f2"],
        &["HGETEX", "big", "PXAT", "1", "FIELDS", "2", "f3", "f4"],
        &["HGETDEL", "big", "FIELDS", "2", "f5", "nope"],
        &["HGETDEL", "small", "FIELDS", "1", "b"],
    ];
    for w in writes {
        let _: redis::Value = q(&mut m, w);
    }
    wait_in_sync(&mut m, &mut r);
    for (key, fields) in [("small", "a b c gone"), ("big", "f0 f1 f2 f3 f4 f5 f6")] {
        let n = fields.split(' ').count().to_string();
        let mut args = vec!["HPEXPIRETIME", key, "FIELDS", &n];
        args.extend(fields.split(' '));
        let on_master: Vec<i64> = q(&mut m, &args);
        let on_replica: Vec<i64> = q(&mut r, &args);
        assert_eq!(on_master, on_replica, "{key}");
        let mut all_m: Vec<String> = q(&mut m, &["HGETALL", key]);
        let mut all_r: Vec<String> = q(&mut r, &["HGETALL", key]);
        all_m.sort();
        all_r.sort();
        assert_eq!(all_m, all_r, "{key}");
    }
    let small: Vec<i64> = q(
        &mut m,
        &["HPEXPIRETIME", "small", "FIELDS", "3", "a", "b", "c"],
    );
    assert!(
        small[0] > 0 && small[1] == -2 && small[2] > small[0],
        "{small:?}"
    );
    assert_eq!(q::<i64>(&mut r, &["HLEN", "big"]), 297);
}

#[test]
fn wait_blocks_as_a_blocked_client() {
    let master = Server::start(2);
    let mut m = master.client();
    let _: () = q(&mut m, &["SET", "k", "1"]);
    // Counted in blocked_clients; CLIENT UNBLOCK ends it as its timeout would.
    let (id, h) = spawn_blocked(&master, &["WAIT", "1", "0"]);
    wait_blocked(&mut m, 1);
    let n: i64 = q(&mut m, &["CLIENT", "UNBLOCK", &id.to_string()]);
    assert_eq!(n, 1);
    assert_eq!(
        h.join().expect("thread").expect("WAIT"),
        redis::Value::Int(0)
    );
    let (id, h) = spawn_blocked(&master, &["WAIT", "1", "0"]);
    wait_blocked(&mut m, 1);
    assert_unblock_error(&mut m, id, h);
    // The master becomes a replica: -UNBLOCKED, as Redis's disconnectAllBlockedClients.
    assert_demotion_unblocks(&master, &mut m, &["WAIT", "1", "0"]);
    // A timeout that would overflow the clock (Redis's getTimeoutFromObjectOrReply).
    let e = err(&mut m, &["WAIT", "1", "9223372036854775000"]);
    assert!(e.contains("timeout is out of range"), "{e}");
}

/// Sends one command as RESP on a raw connection and returns the reply's bytes once
/// they contain `until`.
fn raw_command(s: &mut std::net::TcpStream, args: &[&str], until: &str) -> String {
    use std::io::Write as _;
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(req.as_bytes()).expect("send");
    String::from_utf8_lossy(&read_until_contains(s, until.as_bytes())).into_owned()
}

/// EXEC on a read-only replica refuses a transaction whose queued scripts declare
/// that they write (a shebang without no-writes), as Redis's getCommandFlags counts
/// them when they queue; a script without a shebang runs and meets the refusal at
/// its write; a no-writes one runs (Redis's "no-writes shebang flag on replica").
#[test]
fn exec_on_a_replica_counts_what_queued_scripts_declare() {
    let master = Server::start(2);
    let mut m = master.client();
    let replica = tessera_replica(master.port);
    let mut r = replica.client();
    let _: () = q(&mut m, &["SET", "x", "v"]);
    wait_in_sync(&mut m, &mut r);
    // Queued while the server is a master, so queueing is not refused.
    let _: () = q(&mut r, &["REPLICAOF", "NO", "ONE"]);
    let queue = |script: &str, keys: &[&str]| {
        let mut c = replica.raw();
        assert!(raw_command(&mut c, &["MULTI"], "\r\n").starts_with("+OK"));
        let n = keys.len().to_string();
        let mut args = vec!["EVAL", script, &n];
        args.extend_from_slice(keys);
        let queued = raw_command(&mut c, &args, "\r\n");
        assert!(queued.starts_with("+QUEUED"), "{queued}");
        c
    };
    let mut declared_write = queue("#!lua\nreturn 1", &[]);
    let mut undeclared = queue("redis.call('set','x','1') return 1", &["x"]);
    let mut no_writes = queue(
        "#!lua flags=no-writes\nredis.call('get','x') return 1",
        &["x"],
    );
    let port = master.port.to_string();
    let _: () = q(&mut r, &["REPLICAOF", "127.0.0.1", &port]);
    // (A loading replica would answer -LOADING instead: wait out the full sync.)
    wait_in_sync(&mut m, &mut r);

    let reply = raw_command(&mut declared_write, &["EXEC"], "\r\n");
    assert_eq!(
        reply,
        "-EXECABORT Transaction discarded because of: READONLY You can't write against a read only replica.\r\n"
    );
    let reply = raw_command(&mut undeclared, &["EXEC"], "script:");
    assert!(
        reply.starts_with("*1\r\n-READONLY You can't write against a read only replica. script:"),
        "{reply}"
    );
    let reply = raw_command(&mut no_writes, &["EXEC"], ":1\r\n");
    assert_eq!(reply, "*1\r\n:1\r\n");
}

/// The master's INFO line of its only replica (`slave0:ip=...`), once the link is up.
fn replica_line_once_online(m: &mut redis::Connection) -> String {
    let mut line = String::new();
    let online = eventually(Duration::from_secs(20), || {
        line = info_field(m, "replication", "slave0");
        line.contains("state=online")
    });
    assert!(online, "no online replica: {line:?}");
    line
}

/// Sets the replica's bind-source-addr to `source`, drops its link and makes a new
/// one to the master on `port`: the master's line for it once online.
fn relink_from(
    r: &mut redis::Connection,
    m: &mut redis::Connection,
    source: &str,
    port: &str,
) -> String {
    let _: () = q(r, &["CONFIG", "SET", "bind-source-addr", source]);
    let _: () = q(r, &["REPLICAOF", "NO", "ONE"]);
    assert!(eventually(Duration::from_secs(10), || {
        info_field(m, "replication", "connected_slaves") == "0"
    }));
    let _: () = q(r, &["REPLICAOF", "127.0.0.1", port]);
    replica_line_once_online(m)
}

#[test]
fn bind_source_addr_is_where_the_link_to_the_master_leaves_from() {
    // Protected mode would refuse a client from 127.0.0.2 (it trusts only 127.0.0.1
    // and ::1), as the suite's networking test also turns it off.
    let Some(master) = master(&["--protected-mode", "no"]) else {
        return;
    };
    let mut m = master.client();
    let port = master.port.to_string();
    // From the command line, at start.
    let replica = replica_of(master.port, &["--bind-source-addr", "127.0.0.2"]);
    let mut r = replica.client();
    let line = replica_line_once_online(&mut m);
    assert!(line.contains("ip=127.0.0.2,"), "{line}");
    // CONFIG SET back to the default: the next link leaves from wherever the system
    // chooses (127.0.0.1 for a loopback master).
    let line = relink_from(&mut r, &mut m, "", &port);
    assert!(line.contains("ip=127.0.0.1,"), "{line}");
    // An address this host does not have is bound best effort, as Redis's
    // anetTcpNonBlockBestEffortBindConnect: the link still comes up, unbound.
    let line = relink_from(&mut r, &mut m, "192.0.2.1", &port);
    assert!(line.contains("ip=127.0.0.1,"), "{line}");
    assert_eq!(
        q::<Vec<String>>(&mut r, &["CONFIG", "GET", "bind-source-addr"]),
        vec!["bind-source-addr".to_string(), "192.0.2.1".to_string()]
    );
}
