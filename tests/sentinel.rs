//! Sentinel end to end, black-box: three real redis-sentinel 7.0.15 processes monitor
//! a Tessera master with two Tessera replicas. The master is killed (SIGKILL); a
//! replica must be promoted within down-after-milliseconds plus the failover timeout,
//! the other replica must follow it, and the old master, restarted, must rejoin as a
//! replica. Meanwhile a client using redis-py's Sentinel support writes with WAIT 1:
//! no write it saw acknowledged (SET OK, WAIT >= 1) may be missing afterwards.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const DOWN_AFTER_MS: u64 = 1000;
const FAILOVER_TIMEOUT_MS: u64 = 5000;
/// Sentinel converts a returning old master only after it has been reachable and
/// reported role:master for 4 publish periods (8 s), seen through INFO, which it polls
/// every 10 s for a replica: up to ~20 s by design before the sync even starts.
const REJOIN_LIMIT: Duration = Duration::from_secs(45);

/// A process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tessera_on(port: u16, dir: &Path, extra: &[&str]) -> Proc {
    let log = std::fs::File::create(dir.join(format!("tessera-{port}.log"))).expect("log");
    let child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--threads",
            "2",
        ])
        .args(["--save", "", "--dir", &dir.display().to_string()])
        .args(["--repl-diskless-sync-delay", "0"])
        .args(["--dbfilename", &format!("dump-{port}.rdb")])
        .args(extra)
        .stdout(Stdio::from(log.try_clone().expect("log")))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawn tessera");
    wait_for_pong(port);
    Proc(child)
}

fn wait_for_pong(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut c) = connect(port) {
            if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                return;
            }
        }
        assert!(Instant::now() < deadline, "nothing answers on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn connect(port: u16) -> redis::RedisResult<redis::Connection> {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))?
        .get_connection_with_timeout(Duration::from_secs(1))
}

fn sentinel(port: u16, master_port: u16, dir: &Path) -> Proc {
    let conf = dir.join(format!("sentinel-{port}.conf"));
    std::fs::write(
        &conf,
        format!(
            "port {port}\nbind 127.0.0.1\ndir {}\n\
             sentinel monitor mymaster 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds mymaster {DOWN_AFTER_MS}\n\
             sentinel failover-timeout mymaster {FAILOVER_TIMEOUT_MS}\n\
             sentinel parallel-syncs mymaster 1\n",
            dir.display()
        ),
    )
    .expect("sentinel config");
    let log = std::fs::File::create(dir.join(format!("sentinel-{port}.log"))).expect("log");
    let child = Command::new("redis-sentinel")
        .arg(&conf)
        .stdout(Stdio::from(log.try_clone().expect("log")))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawn redis-sentinel");
    wait_for_pong(port);
    Proc(child)
}

fn role(port: u16) -> Vec<String> {
    let Ok(mut c) = connect(port) else {
        return Vec::new();
    };
    let v: redis::RedisResult<redis::Value> = redis::cmd("ROLE").query(&mut c);
    match v {
        Ok(redis::Value::Array(items)) => items
            .iter()
            .map(|i| match i {
                redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                redis::Value::Int(n) => n.to_string(),
                _ => String::new(),
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn master_addr(sentinel_port: u16) -> Option<u16> {
    let mut c = connect(sentinel_port).ok()?;
    let addr: Vec<String> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg("mymaster")
        .query(&mut c)
        .ok()?;
    addr.get(1)?.parse().ok()
}

fn sentinel_field(sentinel_port: u16, field: &str) -> String {
    let Ok(mut c) = connect(sentinel_port) else {
        return String::new();
    };
    let kv: Vec<String> = redis::cmd("SENTINEL")
        .arg("master")
        .arg("mymaster")
        .query(&mut c)
        .unwrap_or_default();
    kv.chunks(2)
        .find(|p| p[0] == field)
        .map(|p| p[1].clone())
        .unwrap_or_default()
}

fn wait_until(what: &str, limit: Duration, ok: impl FnMut() -> bool) -> Duration {
    try_wait_until(limit, ok).unwrap_or_else(|| panic!("{what}: not within {limit:?}"))
}

fn try_wait_until(limit: Duration, mut ok: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    while !ok() {
        if t0.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(t0.elapsed())
}

/// Every server's and sentinel's log in `dir`, for a failure message.
fn logs_of(dir: &Path) -> String {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    names.retain(|p| p.extension().is_some_and(|e| e == "log"));
    names.sort();
    names
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            format!("==== {}\n{text}", p.display())
        })
        .collect()
}

/// The writer: redis-py's Sentinel client, SET then WAIT 1 in a loop; prints each key
/// whose SET was OK and whose WAIT counted a replica.
const WRITER: &str = r#"
import sys, time
from redis.sentinel import Sentinel
ports = [int(p) for p in sys.argv[1].split(',')]
stop_file = sys.argv[2]
import os
s = Sentinel([('127.0.0.1', p) for p in ports], socket_timeout=0.5)
i = 0
while not os.path.exists(stop_file):
    key = 'py:%d' % i
    i += 1
    try:
        m = s.master_for('mymaster', socket_timeout=0.5)
        if m.set(key, i) and m.execute_command('WAIT', 1, 1000) >= 1:
            print(key, flush=True)
    except Exception:
        time.sleep(0.05)
"#;

/// The system's python with Debian's python3-redis (tests/run-all.sh installs it).
fn python() -> Option<&'static str> {
    ["/usr/bin/python3", "python3"].into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import redis.sentinel"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

#[test]
fn sentinel_fails_over_a_tessera_master_without_losing_acknowledged_writes() {
    if Command::new("redis-sentinel")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("redis-sentinel not installed");
        return;
    }
    let py = python()
        .expect("python3 with redis-py (python3-redis) is needed: tests/run-all.sh installs it");
    let dir = scratch_dir("sentinel", "failover");
    let (mp, r1p, r2p) = (free_port(), free_port(), free_port());
    let master = tessera_on(mp, &dir, &[]);
    let replicaof = ["--replicaof", "127.0.0.1", &mp.to_string()].map(String::from);
    let replicaof: Vec<&str> = replicaof.iter().map(String::as_str).collect();
    let _r1 = tessera_on(r1p, &dir, &replicaof);
    let _r2 = tessera_on(r2p, &dir, &replicaof);
    wait_until("replicas synced", Duration::from_secs(20), || {
        role(r1p).get(3).map(String::as_str) == Some("connected")
            && role(r2p).get(3).map(String::as_str) == Some("connected")
    });
    let sports = [free_port(), free_port(), free_port()];
    let _sentinels: Vec<Proc> = sports.iter().map(|&p| sentinel(p, mp, &dir)).collect();
    wait_until(
        "sentinels see both replicas and each other",
        Duration::from_secs(20),
        || {
            sports.iter().all(|&s| {
                sentinel_field(s, "num-slaves") == "2"
                    && sentinel_field(s, "num-other-sentinels") == "2"
            })
        },
    );

    let stop = dir.join("stop-writer");
    let ports = sports.map(|p| p.to_string()).join(",");
    let writer = Command::new(py)
        .args(["-c", WRITER, &ports, &stop.display().to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::from(
            std::fs::File::create(dir.join("writer.err")).expect("log"),
        ))
        .spawn()
        .expect("spawn the writer");
    std::thread::sleep(Duration::from_secs(2));

    // The master dies.
    drop(master);
    let took = wait_until(
        "a replica promoted",
        Duration::from_millis(DOWN_AFTER_MS + FAILOVER_TIMEOUT_MS + 5000),
        || master_addr(sports[0]).is_some_and(|p| p != mp),
    );
    eprintln!("promoted after {took:?}");
    let new = master_addr(sports[0]).expect("new master");
    let other = if new == r1p { r2p } else { r1p };
    assert_eq!(role(new).first().map(String::as_str), Some("master"));
    wait_until(
        "the other replica follows the new master",
        Duration::from_secs(20),
        || {
            let r = role(other);
            r.first().map(String::as_str) == Some("slave") && r.get(2) == Some(&new.to_string())
        },
    );

    // The old master comes back: Sentinel makes it a replica of the master it knows
    // now (on a loaded host Sentinel may have failed over once more meanwhile: a
    // promoted replica that misses down-after-milliseconds of PINGs is failed over
    // in turn, as Redis's Sentinel does).
    let _back = tessera_on(mp, &dir, &[]);
    let rejoined = try_wait_until(REJOIN_LIMIT, || {
        let r = role(mp);
        let current = master_addr(sports[0]).map(|p| p.to_string());
        r.first().map(String::as_str) == Some("slave")
            && current.is_some()
            && r.get(2) == current.as_ref()
            && r.get(3).map(String::as_str) == Some("connected")
    });
    match rejoined {
        Some(took) => eprintln!("the old master rejoined after {took:?}"),
        None => panic!(
            "the old master rejoins as a replica: not within {REJOIN_LIMIT:?}; ROLE {:?}\n{}",
            role(mp),
            logs_of(&dir)
        ),
    }
    std::thread::sleep(Duration::from_secs(1));
    std::fs::write(&stop, b"").expect("stop file");
    let out = writer.wait_with_output().expect("writer");
    let acked: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert!(
        acked.len() > 50,
        "the writer got only {} writes acknowledged",
        acked.len()
    );
    let now_master = master_addr(sports[0]).unwrap_or(new);
    let mut c = connect(now_master).expect("the current master");
    let mut lost = Vec::new();
    for k in &acked {
        let v: Option<String> = redis::cmd("GET").arg(k).query(&mut c).expect("GET");
        if v.is_none() {
            lost.push(k.clone());
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost: {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(10)]
    );
}
