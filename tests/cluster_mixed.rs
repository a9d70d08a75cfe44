//! Real redis-server 7.0.15 nodes and Tessera nodes (`--cluster-enabled yes`) in one
//! cluster, seen from the outside only: CLUSTER commands, redirects, redis-cli
//! --cluster, pub/sub and replication.
//! - Two redis-server and two Tessera masters, met in both directions, agree on one
//!   configuration; `redis-cli --cluster check` is clean from either kind; each kind
//!   redirects to the other with MOVED; PUBLISH crosses the bus both ways; a
//!   redis-server replica of a Tessera master and a Tessera replica of a
//!   redis-server master join and sync.
//! - `redis-cli --cluster reshard` moves 500 slots from a redis-server to a Tessera
//!   node and 500 from a Tessera node to a redis-server (Tessera's MIGRATE sending
//!   RESTORE-ASKING) while a small cluster client writes, following MOVED, ASK and
//!   TRYAGAIN; no acknowledged write is lost.
//! - A Tessera replica of a redis-server master takes over with CLUSTER FAILOVER:
//!   the old master follows it, and writes flow from Tessera to redis-server.
//! - The other way round: a redis-server replica of a Tessera master takes over with
//!   CLUSTER FAILOVER (the paused Tessera master announces the offset to reach), and
//!   when that redis-server is killed, the Tessera node, now its replica, is elected
//!   by the redis-server masters.

mod common;

use common::{
    eventually, free_cluster_port, q, read_until_contains, scratch_dir, ReferenceRedis, Server,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera::slot::key_slot;

const SUITE: &str = "cluster_mixed";
const NODE_TIMEOUT: &str = "2000";
const SLOTS: u16 = 16384;

/// redis-server and redis-cli are both needed; without them every test is skipped.
fn redis_tools_installed() -> bool {
    let runs = |bin: &str| {
        Command::new(bin)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    runs("redis-server") && runs("redis-cli")
}

/// Ports handed out in this process: two tests of this file never get the same one.
static USED_PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

fn cluster_port() -> u16 {
    loop {
        let port = free_cluster_port();
        if USED_PORTS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(port)
        {
            return port;
        }
    }
}

/// A connection to 127.0.0.1:`port` whose reads and writes give up after `limit`.
fn connect(port: u16, limit: Duration) -> Result<redis::Connection, String> {
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection_with_timeout(limit))
        .map_err(|e| format!("connect to :{port}: {e}"))?;
    c.set_read_timeout(Some(limit))
        .and_then(|_| c.set_write_timeout(Some(limit)))
        .map_err(|e| format!("timeouts on :{port}: {e}"))?;
    Ok(c)
}

/// An error reply as the server wrote it (`MOVED 12182 127.0.0.1:7000`).
fn error_text(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => e.to_string(),
    }
}

fn run(c: &mut redis::Connection, args: &[&str]) -> Result<redis::Value, String> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query::<redis::Value>(c).map_err(|e| error_text(&e))
}

/// The last `n` lines of a log file.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("(no log: {e})\n"));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

enum Proc {
    Tessera(#[allow(dead_code)] Server),
    Redis(#[allow(dead_code)] ReferenceRedis),
}

/// One cluster node of either kind; dropping it kills the process.
struct Node {
    _proc: Proc,
    tessera: bool,
    port: u16,
    log: PathBuf,
    id: String,
}

impl Node {
    /// `tessera --cluster-enabled yes` on a port whose bus port is free, its
    /// nodes.conf in a directory of its own under `dir`.
    fn tessera(dir: &Path) -> Node {
        for _ in 0..5 {
            let port = cluster_port();
            let data = dir.join(format!("tessera-{port}"));
            std::fs::create_dir_all(&data).expect("node dir");
            let log = dir.join(format!("tessera-{port}.log"));
            let data_arg = data.display().to_string();
            let args = [
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                NODE_TIMEOUT,
                "--dir",
                &data_arg,
            ];
            if let Some(server) = Server::start_on(port, 2, &args, &log) {
                return Node::identify(Proc::Tessera(server), true, port, log);
            }
        }
        panic!(
            "tessera did not start in cluster mode (logs under {})",
            dir.display()
        );
    }

    /// `redis-server --cluster-enabled yes`, logging to a file under `dir`.
    fn redis(dir: &Path) -> Node {
        for _ in 0..5 {
            let port = cluster_port();
            let log = dir.join(format!("redis-{port}.log"));
            let log_arg = log.display().to_string();
            let args = [
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                NODE_TIMEOUT,
                "--logfile",
                &log_arg,
            ];
            if let Some(server) = ReferenceRedis::start_on(port, &args) {
                return Node::identify(Proc::Redis(server), false, port, log);
            }
        }
        panic!("redis-server did not start in cluster mode");
    }

    fn identify(proc: Proc, tessera: bool, port: u16, log: PathBuf) -> Node {
        let mut c = connect(port, Duration::from_secs(5)).expect("connect to a fresh node");
        let id: String = q(&mut c, &["CLUSTER", "MYID"]);
        assert_eq!(id.len(), 40, "CLUSTER MYID of :{port}: {id:?}");
        Node {
            _proc: proc,
            tessera,
            port,
            log,
            id,
        }
    }

    fn label(&self) -> String {
        let kind = if self.tessera {
            "tessera"
        } else {
            "redis-server"
        };
        format!("{kind} :{} ({})", self.port, &self.id[..8])
    }

    fn conn(&self) -> redis::Connection {
        connect(self.port, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{}: {e}", self.label()))
    }

    /// Runs a command on a fresh connection; panics naming the node on error.
    fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut c = self.conn();
        let v = run(&mut c, args).unwrap_or_else(|e| panic!("{} {args:?}: {e}", self.label()));
        redis::from_redis_value(&v).unwrap_or_else(|e| panic!("{} {args:?}: {e}", self.label()))
    }

    /// CLUSTER NODES, or why it could not be had.
    fn nodes(&self) -> Result<String, String> {
        let mut c = connect(self.port, Duration::from_secs(2))?;
        let v = run(&mut c, &["CLUSTER", "NODES"])?;
        redis::from_redis_value(&v).map_err(|e| e.to_string())
    }

    /// One field of INFO `section`, empty when absent or unreachable.
    fn info(&self, section: &str, field: &str) -> String {
        let Ok(mut c) = connect(self.port, Duration::from_secs(2)) else {
            return String::new();
        };
        let Ok(v) = run(&mut c, &["INFO", section]) else {
            return String::new();
        };
        let text: String = redis::from_redis_value(&v).unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .unwrap_or("")
            .trim()
            .to_string()
    }

    fn cluster_info(&self, field: &str) -> String {
        let Ok(mut c) = connect(self.port, Duration::from_secs(2)) else {
            return String::new();
        };
        let Ok(v) = run(&mut c, &["CLUSTER", "INFO"]) else {
            return String::new();
        };
        let text: String = redis::from_redis_value(&v).unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .unwrap_or("")
            .trim()
            .to_string()
    }

    fn meet(&self, other: &Node) {
        let ok: String = self.cmd(&["CLUSTER", "MEET", "127.0.0.1", &other.port.to_string()]);
        assert_eq!(ok, "OK");
    }

    fn add_slots(&self, first: u16, last: u16) {
        let ok: String = self.cmd(&[
            "CLUSTER",
            "ADDSLOTSRANGE",
            &first.to_string(),
            &last.to_string(),
        ]);
        assert_eq!(ok, "OK");
    }
}

/// One node as a CLUSTER NODES line describes it, without what only its author
/// knows (`myself`, ping and pong times, the link).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Described {
    id: String,
    addr: String,
    role: String,
    master: String,
    epoch: String,
    slots: String,
}

/// A CLUSTER NODES reply, parsed; Err names what keeps it from being a settled view
/// (a node in handshake, failing, without address, or a link down).
fn settled_view(text: &str) -> Result<BTreeSet<Described>, String> {
    let mut view = BTreeSet::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() < 8 {
            return Err(format!("short line: {line}"));
        }
        let flags: Vec<&str> = f[2].split(',').collect();
        if flags
            .iter()
            .any(|fl| matches!(*fl, "handshake" | "fail" | "fail?" | "noaddr"))
        {
            return Err(format!("unsettled: {line}"));
        }
        if f[7] != "connected" {
            return Err(format!("link down: {line}"));
        }
        let role = if flags.contains(&"master") {
            "master"
        } else if flags.contains(&"slave") {
            "slave"
        } else {
            return Err(format!("no role: {line}"));
        };
        // Open slots ([slot->-id]) are the author's own business.
        let slots: Vec<&str> = f[8..]
            .iter()
            .copied()
            .filter(|s| !s.starts_with('['))
            .collect();
        view.insert(Described {
            id: f[0].to_string(),
            addr: f[1].to_string(),
            role: role.to_string(),
            master: f[3].to_string(),
            epoch: f[6].to_string(),
            slots: slots.join(" "),
        });
    }
    Ok(view)
}

/// How many slots `node` serves in `view`.
fn slot_count(view: &BTreeSet<Described>, node: &Node) -> usize {
    let Some(d) = view.iter().find(|d| d.id == node.id) else {
        return 0;
    };
    d.slots
        .split(' ')
        .filter(|r| !r.is_empty())
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap_or(0) + 1 - a.parse::<usize>().unwrap_or(0),
            None => 1,
        })
        .sum()
}

/// The line of node `id` in a CLUSTER NODES reply.
fn line_of<'a>(text: &'a str, id: &str) -> Option<&'a str> {
    text.lines().find(|l| l.starts_with(id))
}

struct Cluster {
    nodes: Vec<Node>,
    dir: PathBuf,
}

impl Cluster {
    fn new(name: &str) -> Cluster {
        Cluster {
            nodes: Vec::new(),
            dir: scratch_dir(SUITE, name),
        }
    }

    fn add_tessera(&mut self) -> usize {
        self.nodes.push(Node::tessera(&self.dir));
        self.nodes.len() - 1
    }

    fn add_redis(&mut self) -> usize {
        self.nodes.push(Node::redis(&self.dir));
        self.nodes.len() - 1
    }

    /// What a failure message shows: every node's CLUSTER NODES and replication
    /// role, the tail of each Tessera log and of each redis-server log.
    fn report(&self) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            out += &format!(
                "\n===== {} id {} role:{} master_port:{} link:{} master_repl_offset:{} slave_repl_offset:{} cluster_state:{}\n",
                n.label(),
                n.id,
                n.info("replication", "role"),
                n.info("replication", "master_port"),
                n.info("replication", "master_link_status"),
                n.info("replication", "master_repl_offset"),
                n.info("replication", "slave_repl_offset"),
                n.cluster_info("cluster_state"),
            );
            match n.nodes() {
                Ok(text) => out += &text,
                Err(e) => out += &format!("CLUSTER NODES failed: {e}\n"),
            }
        }
        for n in &self.nodes {
            let lines = if n.tessera { 60 } else { 25 };
            out += &format!(
                "\n----- last lines of {} log {}\n{}\n",
                n.label(),
                n.log.display(),
                tail(&n.log, lines)
            );
        }
        out
    }

    /// Waits up to `limit` for `f`; panics with `what` and the report when it never held.
    fn wait(&self, what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
        let start = Instant::now();
        if !eventually(limit, &mut f) {
            panic!("{what}: not within {:?}{}", start.elapsed(), self.report());
        }
    }

    /// Every node answers cluster_state:ok and all describe the same `count` nodes,
    /// settled, with the same roles, masters, config epochs and slots.
    fn agreed(&self, count: usize) -> Result<BTreeSet<Described>, String> {
        let mut first: Option<(String, BTreeSet<Described>)> = None;
        for n in &self.nodes {
            if n.cluster_info("cluster_state") != "ok" {
                return Err(format!("{} is not ok", n.label()));
            }
            let view = settled_view(&n.nodes()?)?;
            if view.len() != count {
                return Err(format!("{} knows {} nodes", n.label(), view.len()));
            }
            match &first {
                None => first = Some((n.label(), view)),
                Some((who, v)) if *v != view => {
                    return Err(format!("{who} and {} disagree", n.label()));
                }
                Some(_) => {}
            }
        }
        Ok(first.map(|(_, v)| v).unwrap_or_default())
    }

    fn wait_agreed(&self, count: usize, limit: Duration) -> BTreeSet<Described> {
        let mut last = String::new();
        let mut view = BTreeSet::new();
        let ok = eventually(limit, || match self.agreed(count) {
            Ok(v) => {
                view = v;
                true
            }
            Err(e) => {
                last = e;
                false
            }
        });
        assert!(
            ok,
            "the {count} nodes never agreed within {limit:?} (last: {last}){}",
            self.report()
        );
        view
    }

    /// Runs redis-cli with `args`, its output in a file of the test's directory;
    /// killed after `limit`. (exit code, output)
    fn redis_cli(&self, tag: &str, args: &[&str], limit: Duration) -> (Option<i32>, String) {
        let path = self.dir.join(format!("redis-cli-{tag}.out"));
        let out = std::fs::File::create(&path).expect("redis-cli output file");
        let err = out.try_clone().expect("clone");
        let mut child = Command::new("redis-cli")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("spawn redis-cli");
        let deadline = Instant::now() + limit;
        let code = loop {
            if let Ok(Some(status)) = child.try_wait() {
                break status.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        (code, std::fs::read_to_string(&path).unwrap_or_default())
    }

    /// `redis-cli --cluster check` through node `i`: exit 0, slots agreed and all
    /// covered, no warning or error.
    fn assert_check_clean(&self, i: usize, tag: &str) {
        let addr = format!("127.0.0.1:{}", self.nodes[i].port);
        let (code, out) =
            self.redis_cli(tag, &["--cluster", "check", &addr], Duration::from_secs(30));
        let clean = code == Some(0)
            && out.contains("[OK] All nodes agree about slots configuration.")
            && out.contains("[OK] All 16384 slots covered.")
            && !out.contains("[WARNING]")
            && !out.contains("[ERR]");
        assert!(
            clean,
            "redis-cli --cluster check {addr} ({}) exited {code:?}:\n{out}{}",
            self.nodes[i].label(),
            self.report()
        );
    }
}

/// A key `prefix…` whose slot lies in `first..=last`.
fn key_in(prefix: &str, first: u16, last: u16) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| (first..=last).contains(&key_slot(k.as_bytes())))
        .expect("a key")
}

/// Four masters with a quarter of the slots each, in this order: redis-server,
/// Tessera, redis-server, Tessera. Met in both directions (redis-server to Tessera
/// and Tessera to redis-server) and agreed.
fn four_masters(name: &str) -> Cluster {
    let mut cl = Cluster::new(name);
    let r1 = cl.add_redis();
    let t1 = cl.add_tessera();
    let r2 = cl.add_redis();
    let t2 = cl.add_tessera();
    for (i, n) in [r1, t1, r2, t2].into_iter().enumerate() {
        let first = i as u16 * (SLOTS / 4);
        cl.nodes[n].add_slots(first, first + SLOTS / 4 - 1);
    }
    let n = &cl.nodes;
    n[r1].meet(&n[t1]); // redis-server -> Tessera
    n[t1].meet(&n[r2]); // Tessera -> redis-server
    n[t2].meet(&n[r1]); // Tessera -> redis-server
    n[r2].meet(&n[t2]); // redis-server -> Tessera
    cl.wait_agreed(4, Duration::from_secs(30));
    cl
}

/// A subscriber on a raw connection: SUBSCRIBE confirmed before it is returned.
fn subscriber(node: &Node, channel: &str) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", node.port)).expect("connect subscriber");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let cmd = format!(
        "*2\r\n$9\r\nSUBSCRIBE\r\n${}\r\n{channel}\r\n",
        channel.len()
    );
    s.write_all(cmd.as_bytes()).expect("SUBSCRIBE");
    let got = read_until_contains(&mut s, channel.as_bytes());
    assert!(
        String::from_utf8_lossy(&got).contains("subscribe"),
        "SUBSCRIBE on {}: {:?}",
        node.label(),
        String::from_utf8_lossy(&got)
    );
    s
}

#[test]
fn mixed_meet_both_ways_and_check() {
    if !redis_tools_installed() {
        eprintln!("redis-server / redis-cli are not installed: skipping");
        return;
    }
    let mut cl = four_masters("meet");
    let (r1, t1, r2, t2) = (0, 1, 2, 3);
    let quarter = SLOTS / 4;

    // Each kind describes the same four nodes, with the slots given.
    let from_redis = settled_view(&cl.nodes[r1].nodes().expect("NODES")).expect("settled");
    let from_tessera = settled_view(&cl.nodes[t1].nodes().expect("NODES")).expect("settled");
    assert_eq!(from_redis, from_tessera, "{}", cl.report());
    for (i, n) in cl.nodes.iter().enumerate() {
        let first = i as u16 * quarter;
        let want = format!("{first}-{}", first + quarter - 1);
        let d = from_tessera.iter().find(|d| d.id == n.id);
        assert!(
            d.is_some_and(|d| d.role == "master"
                && d.slots == want
                && d.addr == format!("127.0.0.1:{}@{}", n.port, n.port + 10000)),
            "{} should serve {want}: {d:?}{}",
            n.label(),
            cl.report()
        );
    }
    for n in &cl.nodes {
        let counts = [
            "cluster_known_nodes",
            "cluster_size",
            "cluster_slots_assigned",
        ]
        .map(|f| n.cluster_info(f));
        assert_eq!(counts, ["4", "4", "16384"], "{}{}", n.label(), cl.report());
    }
    // Masters that all started at config epoch 0 move apart through collisions,
    // whichever kind each is, and everyone learns the result.
    cl.wait(
        "the four masters' config epochs become distinct in every view",
        Duration::from_secs(15),
        || {
            cl.agreed(4)
                .is_ok_and(|view| view.iter().map(|d| &d.epoch).collect::<BTreeSet<_>>().len() == 4)
        },
    );

    // redis-cli --cluster check through each kind.
    cl.assert_check_clean(r1, "check-redis");
    cl.assert_check_clean(t1, "check-tessera");

    // MOVED both ways: each node sends a key it does not serve to its owner.
    for (asked, owner) in [(t1, r1), (r1, t1), (t2, r2), (r2, t2), (t1, t2), (r1, r2)] {
        let first = owner as u16 * quarter;
        let key = key_in("moved:", first, first + quarter - 1);
        let slot = key_slot(key.as_bytes());
        let mut c = cl.nodes[asked].conn();
        let got = run(&mut c, &["SET", &key, "x"]);
        let want = format!("MOVED {slot} 127.0.0.1:{}", cl.nodes[owner].port);
        assert_eq!(
            got,
            Err(want),
            "SET {key} on {} (owner {})",
            cl.nodes[asked].label(),
            cl.nodes[owner].label()
        );
        let mut c = cl.nodes[owner].conn();
        assert_eq!(run(&mut c, &["SET", &key, "x"]), Ok(redis::Value::Okay));
        assert_eq!(
            run(&mut c, &["GET", &key]),
            Ok(redis::Value::BulkString(b"x".to_vec()))
        );
    }

    // PUBLISH crosses the bus: from a Tessera node and from a redis-server node, it
    // reaches subscribers on every node.
    let mut subs: Vec<TcpStream> = cl
        .nodes
        .iter()
        .map(|n| subscriber(n, "mixed-news"))
        .collect();
    for (from, payload) in [(t1, "from-tessera-1234"), (r2, "from-redis-5678")] {
        let _: i64 = cl.nodes[from].cmd(&["PUBLISH", "mixed-news", payload]);
        for (i, s) in subs.iter_mut().enumerate() {
            let got = read_until_contains(s, payload.as_bytes());
            assert!(
                String::from_utf8_lossy(&got).contains(payload),
                "PUBLISH on {} never reached the subscriber on {}: {:?}{}",
                cl.nodes[from].label(),
                cl.nodes[i].label(),
                String::from_utf8_lossy(&got),
                cl.report()
            );
        }
    }
    drop(subs);

    // Replicas of each kind: a redis-server replica of a Tessera master and a
    // Tessera replica of a redis-server master.
    let r3 = cl.add_redis();
    let t3 = cl.add_tessera();
    cl.nodes[r1].meet(&cl.nodes[t3]);
    cl.nodes[t1].meet(&cl.nodes[r3]);
    cl.wait("the six nodes meet", Duration::from_secs(20), || {
        [r3, t3].iter().all(|&i| {
            cl.nodes[i]
                .nodes()
                .is_ok_and(|t| t.lines().count() == 6 && !t.contains("handshake"))
        })
    });
    let ok: String = cl.nodes[r3].cmd(&["CLUSTER", "REPLICATE", &cl.nodes[t1].id]);
    assert_eq!(ok, "OK");
    let ok: String = cl.nodes[t3].cmd(&["CLUSTER", "REPLICATE", &cl.nodes[r2].id]);
    assert_eq!(ok, "OK");
    let view = cl.wait_agreed(6, Duration::from_secs(30));
    for (replica, master) in [(r3, t1), (t3, r2)] {
        let d = view.iter().find(|d| d.id == cl.nodes[replica].id);
        assert!(
            d.is_some_and(|d| d.role == "slave" && d.master == cl.nodes[master].id),
            "{} should replicate {}: {d:?}{}",
            cl.nodes[replica].label(),
            cl.nodes[master].label(),
            cl.report()
        );
        let (rn, mn) = (&cl.nodes[replica], &cl.nodes[master]);
        cl.wait(
            &format!("{} syncs from {}", rn.label(), mn.label()),
            Duration::from_secs(20),
            || {
                rn.info("replication", "master_link_status") == "up"
                    && rn.info("replication", "master_port") == mn.port.to_string()
            },
        );
        // A write on the master reaches the replica (READONLY read).
        let first = master as u16 * quarter;
        let key = key_in("replicated:", first, first + quarter - 1);
        let _: () = mn.cmd(&["SET", &key, "copied"]);
        let mut c = rn.conn();
        let _: () = q(&mut c, &["READONLY"]);
        cl.wait(
            &format!("{key} written on {} read on {}", mn.label(), rn.label()),
            Duration::from_secs(10),
            || run(&mut c, &["GET", &key]) == Ok(redis::Value::BulkString(b"copied".to_vec())),
        );
        // Without READONLY the replica redirects to its master.
        let mut plain = rn.conn();
        assert_eq!(
            run(&mut plain, &["GET", &key]),
            Err(format!(
                "MOVED {} 127.0.0.1:{}",
                key_slot(key.as_bytes()),
                mn.port
            )),
            "GET on {} without READONLY",
            rn.label()
        );
    }
    cl.assert_check_clean(r3, "check-redis-replica");
    cl.assert_check_clean(t3, "check-tessera-replica");
}

/// How often the cluster client was redirected.
#[derive(Debug, Default, Clone, Copy)]
struct Redirects {
    moved: u64,
    ask: u64,
    tryagain: u64,
}

/// A minimal cluster client: one connection per node, the slot map from CLUSTER
/// SLOTS, -MOVED updating the map, -ASK answered with ASKING plus the command on the
/// node named, -TRYAGAIN retried after a short sleep. Any other error is returned.
struct ClusterClient {
    owner: Vec<u16>,
    conns: HashMap<u16, redis::Connection>,
    redirects: Redirects,
}

/// `127.0.0.1:7000` → 7000.
fn port_of(addr: &str) -> Result<u16, String> {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("bad address {addr:?}"))
}

impl ClusterClient {
    fn new(seed: u16) -> Result<ClusterClient, String> {
        let mut c = ClusterClient {
            owner: vec![0; SLOTS as usize],
            conns: HashMap::new(),
            redirects: Redirects::default(),
        };
        let slots = run(c.conn(seed)?, &["CLUSTER", "SLOTS"])?;
        let redis::Value::Array(ranges) = slots else {
            return Err(format!("CLUSTER SLOTS: {slots:?}"));
        };
        for r in ranges {
            let parsed = (|| {
                let redis::Value::Array(f) = &r else {
                    return None;
                };
                let (redis::Value::Int(a), redis::Value::Int(b), redis::Value::Array(m)) =
                    (f.first()?, f.get(1)?, f.get(2)?)
                else {
                    return None;
                };
                let redis::Value::Int(port) = m.get(1)? else {
                    return None;
                };
                Some((*a as usize, *b as usize, *port as u16))
            })();
            let (a, b, port) = parsed.ok_or_else(|| format!("CLUSTER SLOTS entry {r:?}"))?;
            c.owner[a..=b].iter_mut().for_each(|o| *o = port);
        }
        if let Some(s) = c.owner.iter().position(|&p| p == 0) {
            return Err(format!(
                "CLUSTER SLOTS of :{seed} leaves slot {s} uncovered"
            ));
        }
        Ok(c)
    }

    fn conn(&mut self, port: u16) -> Result<&mut redis::Connection, String> {
        match self.conns.entry(port) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(v) => {
                Ok(v.insert(connect(port, Duration::from_secs(10))?))
            }
        }
    }

    /// Runs a single-key command (the key is `args[1]`) where the cluster says.
    fn run(&mut self, args: &[&str]) -> Result<redis::Value, String> {
        let slot = key_slot(args[1].as_bytes()) as usize;
        let mut port = self.owner[slot];
        let mut asking = false;
        let mut trail = Vec::new();
        for _ in 0..100 {
            let c = self.conn(port)?;
            if asking {
                run(c, &["ASKING"]).map_err(|e| format!("ASKING on :{port}: {e}"))?;
            }
            match run(c, args) {
                Ok(v) => return Ok(v),
                Err(e) => {
                    trail.push(format!(":{port} {e}"));
                    let mut words = e.split(' ');
                    match words.next() {
                        Some("MOVED") => {
                            let _slot = words.next();
                            port = port_of(words.next().unwrap_or(""))?;
                            self.owner[slot] = port;
                            asking = false;
                            self.redirects.moved += 1;
                        }
                        Some("ASK") => {
                            let _slot = words.next();
                            port = port_of(words.next().unwrap_or(""))?;
                            asking = true;
                            self.redirects.ask += 1;
                        }
                        Some("TRYAGAIN") => {
                            std::thread::sleep(Duration::from_millis(20));
                            port = self.owner[slot];
                            asking = false;
                            self.redirects.tryagain += 1;
                        }
                        _ => return Err(format!("{args:?}: {}", trail.join(" / "))),
                    }
                }
            }
        }
        Err(format!(
            "{args:?}: redirected in circles: {}",
            trail.join(" / ")
        ))
    }
}

/// What the writer was acknowledged: each key's last value.
type Acked = BTreeMap<String, String>;

const WRITER_KEYS: u64 = 5000;

/// The writer's `i`th key: `key:<k>` for k = i % WRITER_KEYS, except that every
/// fifth one carries a hash tag from `hot` (slots the reshards move), so those slots
/// hold hundreds of keys and take many MIGRATE calls each: writes meet them half
/// moved (-ASK).
fn writer_key(i: u64, hot: &[String]) -> String {
    let k = i % WRITER_KEYS;
    if k.is_multiple_of(5) && !hot.is_empty() {
        format!("{{{}}}:{k}", hot[(k / 5) as usize % hot.len()])
    } else {
        format!("key:{k}")
    }
}

/// Hash tags whose slots lie in `first..=last`, `n` of them.
fn tags_in(first: u16, last: u16, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("hot{i}"))
        .filter(|t| (first..=last).contains(&key_slot(t.as_bytes())))
        .take(n)
        .collect()
}

/// Writes `writer_key(i)` = `v<i>` from `next` on, one acknowledged SET at a time,
/// until `stop`; `count` follows its progress.
fn writer(
    seed: u16,
    hot: Vec<String>,
    mut acked: Acked,
    next: u64,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
) -> std::thread::JoinHandle<Result<(Acked, u64, Redirects), String>> {
    std::thread::spawn(move || {
        let mut client = ClusterClient::new(seed)?;
        let mut i = next;
        while !stop.load(Ordering::Relaxed) {
            let key = writer_key(i, &hot);
            let value = format!("v{i}");
            match client.run(&["SET", &key, &value])? {
                redis::Value::Okay => {}
                other => return Err(format!("SET {key}: {other:?}")),
            }
            acked.insert(key, value);
            i += 1;
            count.fetch_add(1, Ordering::Relaxed);
        }
        Ok((acked, i, client.redirects))
    })
}

/// Every acknowledged write reads back with its last acknowledged value.
fn assert_all_readable(cl: &Cluster, seed: u16, acked: &Acked) {
    let mut client = ClusterClient::new(seed).unwrap_or_else(|e| panic!("{e}{}", cl.report()));
    let mut wrong = Vec::new();
    for (key, value) in acked {
        match client.run(&["GET", key]) {
            Ok(redis::Value::BulkString(v)) if v == value.as_bytes() => {}
            other => wrong.push(format!(
                "{key} (slot {}): want {value}, got {other:?}",
                key_slot(key.as_bytes())
            )),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} acknowledged writes lost or stale, e.g.:\n{}{}",
        wrong.len(),
        acked.len(),
        wrong
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
        cl.report()
    );
}

/// `redis-cli --cluster reshard` of 500 slots from node `from` to node `to` (through
/// node `via`) while the writer writes; then the check, and every write read back.
#[allow(clippy::too_many_arguments)]
fn reshard_under_load(
    cl: &Cluster,
    tag: &str,
    via: usize,
    from: usize,
    to: usize,
    expect: (usize, usize),
    hot: Vec<String>,
    acked: Acked,
    next: u64,
) -> (Acked, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let seed = cl.nodes[via].port;
    let h = writer(seed, hot, acked, next, stop.clone(), count.clone());
    // Under way before the reshard starts.
    let started = eventually(Duration::from_secs(10), || {
        count.load(Ordering::Relaxed) >= 1000 || h.is_finished()
    });
    if !started || h.is_finished() {
        stop.store(true, Ordering::Relaxed);
        let r = h.join().expect("writer thread");
        panic!("the writer did not get going: {:?}{}", r.err(), cl.report());
    }
    let before = count.load(Ordering::Relaxed);
    let addr = format!("127.0.0.1:{}", cl.nodes[via].port);
    let (code, out) = cl.redis_cli(
        tag,
        &[
            "--cluster",
            "reshard",
            &addr,
            "--cluster-from",
            &cl.nodes[from].id,
            "--cluster-to",
            &cl.nodes[to].id,
            "--cluster-slots",
            "500",
            "--cluster-yes",
        ],
        Duration::from_secs(60),
    );
    let during = count.load(Ordering::Relaxed) - before;
    // A little more traffic on the stale slot map, then stop.
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let result = h.join().expect("writer thread");
    let tail_of = |s: &str| {
        s.lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        code == Some(0),
        "redis-cli --cluster reshard {} -> {} exited {code:?} ({during} writes meanwhile; writer: {:?}):\n{}{}",
        cl.nodes[from].label(),
        cl.nodes[to].label(),
        result.as_ref().err(),
        tail_of(&out),
        cl.report()
    );
    let (acked, next, redirects) = result.unwrap_or_else(|e| {
        panic!(
            "the writer failed during the reshard {} -> {}: {e}{}",
            cl.nodes[from].label(),
            cl.nodes[to].label(),
            cl.report()
        )
    });
    eprintln!(
        "{tag}: {} -> {}: {during} writes during the reshard, {redirects:?}",
        cl.nodes[from].label(),
        cl.nodes[to].label()
    );
    assert!(
        during > 0 && redirects.moved + redirects.ask > 0,
        "{during} writes while the reshard ran, {redirects:?}: the writer never met a moved slot{}",
        cl.report()
    );
    // The moved slots are the target's in everyone's view.
    let view = cl.wait_agreed(cl.nodes.len(), Duration::from_secs(20));
    let counts = (
        slot_count(&view, &cl.nodes[from]),
        slot_count(&view, &cl.nodes[to]),
    );
    assert_eq!(
        counts,
        expect,
        "slots of {} and {} after the reshard{}",
        cl.nodes[from].label(),
        cl.nodes[to].label(),
        cl.report()
    );
    cl.assert_check_clean(via, &format!("{tag}-check"));
    cl.assert_check_clean(to, &format!("{tag}-check-target"));
    assert_all_readable(cl, cl.nodes[to].port, &acked);
    // And nothing was left behind: the masters hold exactly the keys written.
    let held: Vec<i64> = cl.nodes.iter().map(|n| n.cmd(&["DBSIZE"])).collect();
    assert_eq!(
        held.iter().sum::<i64>(),
        acked.len() as i64,
        "keys per master {held:?} after the reshard {} -> {}{}",
        cl.nodes[from].label(),
        cl.nodes[to].label(),
        cl.report()
    );
    (acked, next)
}

#[test]
fn reshard_redis_to_tessera_under_load() {
    if !redis_tools_installed() {
        eprintln!("redis-server / redis-cli are not installed: skipping");
        return;
    }
    let cl = four_masters("reshard");
    let (r1, t1, r2, t2) = (0, 1, 2, 3);
    // redis-cli moves the source's first 500 slots: 0-499 of the first redis-server,
    // then 12288-12787 of the second Tessera node. Hot keys live in two of each.
    let mut hot = tags_in(0, 499, 2);
    hot.extend(tags_in(12288, 12787, 2));
    // redis-server -> Tessera: redis-server's MIGRATE sends RESTORE-ASKING to Tessera.
    let (acked, next) = reshard_under_load(
        &cl,
        "to-tessera",
        t2,
        r1,
        t1,
        (4096 - 500, 4096 + 500),
        hot.clone(),
        Acked::new(),
        0,
    );
    // Tessera -> redis-server: Tessera's MIGRATE sends RESTORE-ASKING to redis-server.
    let (acked, _) = reshard_under_load(
        &cl,
        "to-redis",
        r2,
        t2,
        r1,
        (4096 - 500, 4096),
        hot,
        acked,
        next,
    );
    assert!(
        acked.len() as u64 >= WRITER_KEYS.min(2000),
        "{} keys written",
        acked.len()
    );
}

#[test]
fn tessera_replica_takes_over_redis_master() {
    if !redis_tools_installed() {
        eprintln!("redis-server / redis-cli are not installed: skipping");
        return;
    }
    let mut cl = Cluster::new("failover");
    let r1 = cl.add_redis();
    let r2 = cl.add_redis();
    let r3 = cl.add_redis();
    let t1 = cl.add_tessera();
    cl.nodes[r1].add_slots(0, 5460);
    cl.nodes[r2].add_slots(5461, 10922);
    cl.nodes[r3].add_slots(10923, 16383);
    cl.nodes[r1].meet(&cl.nodes[r2]);
    cl.nodes[r1].meet(&cl.nodes[r3]);
    cl.nodes[t1].meet(&cl.nodes[r1]); // Tessera -> redis-server
    cl.wait(
        "the Tessera node learns the three masters",
        Duration::from_secs(20),
        || {
            cl.nodes[t1].nodes().is_ok_and(|t| {
                t.lines().count() == 4 && !t.contains("handshake") && !t.contains("noaddr")
            })
        },
    );
    let ok: String = cl.nodes[t1].cmd(&["CLUSTER", "REPLICATE", &cl.nodes[r1].id]);
    assert_eq!(ok, "OK");
    let view = cl.wait_agreed(4, Duration::from_secs(30));
    assert!(
        view.iter()
            .any(|d| d.id == cl.nodes[t1].id && d.role == "slave" && d.master == cl.nodes[r1].id),
        "{}",
        cl.report()
    );
    let (tn, rn) = (&cl.nodes[t1], &cl.nodes[r1]);
    cl.wait(
        "the Tessera replica's link to its redis-server master is up",
        Duration::from_secs(20),
        || {
            tn.info("replication", "master_link_status") == "up"
                && tn.info("replication", "master_port") == rn.port.to_string()
        },
    );

    // Keys written to the redis-server master reach the Tessera replica.
    let keys: Vec<String> = (0..)
        .map(|i| format!("before:{i}"))
        .filter(|k| key_slot(k.as_bytes()) <= 5460)
        .take(300)
        .collect();
    let mut cr = rn.conn();
    for k in &keys {
        let _: () = q(&mut cr, &["SET", k, &format!("{k}-value")]);
    }
    let mut ct = tn.conn();
    let _: () = q(&mut ct, &["READONLY"]);
    cl.wait(
        "the Tessera replica has the keys written on its master",
        Duration::from_secs(15),
        || {
            keys.iter().all(|k| {
                run(&mut ct, &["GET", k])
                    == Ok(redis::Value::BulkString(format!("{k}-value").into_bytes()))
            })
        },
    );
    cl.wait(
        "the replica caught up with the master's offset",
        Duration::from_secs(10),
        || {
            let m = rn.info("replication", "master_repl_offset");
            !m.is_empty() && tn.info("replication", "slave_repl_offset") == m
        },
    );

    // CLUSTER FAILOVER on the Tessera replica.
    let ok: String = tn.cmd(&["CLUSTER", "FAILOVER"]);
    assert_eq!(ok, "OK");
    let t_id = tn.id.clone();
    let r_id = rn.id.clone();
    cl.wait("every node sees the Tessera node as the master of 0-5460 and the redis-server as its replica", Duration::from_secs(10), || {
        cl.nodes.iter().all(|n| {
            n.nodes().is_ok_and(|text| {
                let t = line_of(&text, &t_id).unwrap_or("");
                let r = line_of(&text, &r_id).unwrap_or("");
                let f: Vec<&str> = t.split(' ').collect();
                let g: Vec<&str> = r.split(' ').collect();
                f.len() == 9
                    && f[2].split(',').any(|x| x == "master")
                    && f[8] == "0-5460"
                    && g.len() == 8
                    && g[2].split(',').any(|x| x == "slave")
                    && g[3] == t_id
            })
        })
    });
    let own = rn.nodes().expect("NODES");
    assert!(
        line_of(&own, &r_id).is_some_and(|l| l.contains(&format!("myself,slave {t_id}"))),
        "{}",
        cl.report()
    );
    cl.wait(
        "the old master replicates from the Tessera node",
        Duration::from_secs(10),
        || {
            rn.info("replication", "role") == "slave"
                && rn.info("replication", "master_port") == tn.port.to_string()
                && rn.info("replication", "master_link_status") == "up"
        },
    );
    cl.wait(
        "cluster_state:ok everywhere after the failover",
        Duration::from_secs(10),
        || {
            cl.nodes
                .iter()
                .all(|n| n.cluster_info("cluster_state") == "ok")
        },
    );

    // The keys are served by Tessera as a master (no READONLY needed).
    let mut ct = tn.conn();
    for k in &keys {
        assert_eq!(
            run(&mut ct, &["GET", k]),
            Ok(redis::Value::BulkString(format!("{k}-value").into_bytes())),
            "GET {k} on the promoted Tessera node{}",
            cl.report()
        );
    }
    // The old master now redirects writes to the Tessera node.
    let mut plain = rn.conn();
    assert_eq!(
        run(&mut plain, &["SET", &keys[0], "x"]),
        Err(format!(
            "MOVED {} 127.0.0.1:{}",
            key_slot(keys[0].as_bytes()),
            tn.port
        )),
        "{}",
        cl.report()
    );
    // New writes on Tessera replicate to the redis-server node.
    let after: Vec<String> = (0..)
        .map(|i| format!("after:{i}"))
        .filter(|k| key_slot(k.as_bytes()) <= 5460)
        .take(200)
        .collect();
    for k in &after {
        assert_eq!(
            run(&mut ct, &["SET", k, "new"]),
            Ok(redis::Value::Okay),
            "SET {k} on Tessera"
        );
    }
    let _: () = q(&mut ct, &["DEL", &keys[1]]);
    let mut cr = rn.conn();
    let _: () = q(&mut cr, &["READONLY"]);
    cl.wait(
        "writes on the Tessera master reach the redis-server replica",
        Duration::from_secs(10),
        || {
            after
                .iter()
                .all(|k| run(&mut cr, &["GET", k]) == Ok(redis::Value::BulkString(b"new".to_vec())))
                && run(&mut cr, &["EXISTS", &keys[1]]) == Ok(redis::Value::Int(0))
        },
    );
    cl.assert_check_clean(r2, "check-after-failover");
    cl.assert_check_clean(t1, "check-after-failover-tessera");
}

/// In every live node's CLUSTER NODES: `master` serves exactly `slots` as a master
/// and `replica` (if given) is its replica.
fn serves_as_master(
    cl: &Cluster,
    alive: &[usize],
    master: &str,
    slots: &str,
    replica: Option<&str>,
) -> bool {
    alive.iter().all(|&i| {
        cl.nodes[i].nodes().is_ok_and(|text| {
            let m: Vec<&str> = line_of(&text, master).unwrap_or("").split(' ').collect();
            let master_ok = m.len() == 9 && m[2].split(',').any(|x| x == "master") && m[8] == slots;
            let replica_ok = replica.is_none_or(|r| {
                let l: Vec<&str> = line_of(&text, r).unwrap_or("").split(' ').collect();
                l.len() == 8 && l[2].split(',').any(|x| x == "slave") && l[3] == master
            });
            master_ok && replica_ok
        })
    })
}

#[test]
fn redis_replica_takes_over_tessera_master_and_gives_it_back_when_killed() {
    if !redis_tools_installed() {
        eprintln!("redis-server / redis-cli are not installed: skipping");
        return;
    }
    let mut cl = Cluster::new("handback");
    let t1 = cl.add_tessera();
    let r1 = cl.add_redis();
    let r2 = cl.add_redis();
    let r3 = cl.add_redis();
    cl.nodes[t1].add_slots(0, 5460);
    cl.nodes[r1].add_slots(5461, 10922);
    cl.nodes[r2].add_slots(10923, 16383);
    cl.nodes[t1].meet(&cl.nodes[r1]);
    cl.nodes[t1].meet(&cl.nodes[r2]);
    cl.nodes[r3].meet(&cl.nodes[t1]); // redis-server -> Tessera
    cl.wait(
        "the redis-server node learns the three masters",
        Duration::from_secs(20),
        || {
            cl.nodes[r3].nodes().is_ok_and(|t| {
                t.lines().count() == 4 && !t.contains("handshake") && !t.contains("noaddr")
            })
        },
    );
    let (t_id, r_id) = (cl.nodes[t1].id.clone(), cl.nodes[r3].id.clone());
    let ok: String = cl.nodes[r3].cmd(&["CLUSTER", "REPLICATE", &t_id]);
    assert_eq!(ok, "OK");
    cl.wait_agreed(4, Duration::from_secs(30));
    let (tn, rn) = (&cl.nodes[t1], &cl.nodes[r3]);
    cl.wait(
        "the redis-server replica's link to its Tessera master is up",
        Duration::from_secs(20),
        || {
            rn.info("replication", "master_link_status") == "up"
                && rn.info("replication", "master_port") == tn.port.to_string()
        },
    );
    let keys: Vec<String> = (0..)
        .map(|i| format!("tessera-first:{i}"))
        .filter(|k| key_slot(k.as_bytes()) <= 5460)
        .take(300)
        .collect();
    let mut ct = tn.conn();
    for k in &keys {
        assert_eq!(
            run(&mut ct, &["SET", k, "t"]),
            Ok(redis::Value::Okay),
            "SET {k} on Tessera"
        );
    }
    let mut cr = rn.conn();
    let _: () = q(&mut cr, &["READONLY"]);
    cl.wait(
        "the redis-server replica has the keys written on Tessera",
        Duration::from_secs(15),
        || {
            keys.iter()
                .all(|k| run(&mut cr, &["GET", k]) == Ok(redis::Value::BulkString(b"t".to_vec())))
        },
    );

    // CLUSTER FAILOVER on the redis-server replica: the Tessera master pauses its
    // clients, lets the replica catch up, and follows it once it is elected.
    let ok: String = rn.cmd(&["CLUSTER", "FAILOVER"]);
    assert_eq!(ok, "OK");
    let all = [t1, r1, r2, r3];
    cl.wait(
        "every node sees the redis-server node as the master of 0-5460 and Tessera as its replica",
        Duration::from_secs(10),
        || serves_as_master(&cl, &all, &r_id, "0-5460", Some(&t_id)),
    );
    let own = tn.nodes().expect("NODES");
    assert!(
        line_of(&own, &t_id).is_some_and(|l| l.contains(&format!("myself,slave {r_id}"))),
        "{}",
        cl.report()
    );
    cl.wait(
        "Tessera replicates from its former replica",
        Duration::from_secs(10),
        || {
            tn.info("replication", "role") == "slave"
                && tn.info("replication", "master_port") == rn.port.to_string()
                && tn.info("replication", "master_link_status") == "up"
        },
    );
    let mut cr = rn.conn();
    for k in &keys {
        assert_eq!(
            run(&mut cr, &["GET", k]),
            Ok(redis::Value::BulkString(b"t".to_vec())),
            "GET {k} on the promoted redis-server{}",
            cl.report()
        );
        assert_eq!(run(&mut cr, &["SET", k, "r"]), Ok(redis::Value::Okay));
    }
    let mut ct = tn.conn();
    let _: () = q(&mut ct, &["READONLY"]);
    cl.wait(
        "writes on the redis-server master reach the Tessera replica",
        Duration::from_secs(10),
        || {
            keys.iter()
                .all(|k| run(&mut ct, &["GET", k]) == Ok(redis::Value::BulkString(b"r".to_vec())))
        },
    );
    cl.assert_check_clean(t1, "check-tessera-replica");

    // The redis-server master dies: its Tessera replica is elected by the two
    // other masters and serves the keys it replicated.
    let dead = cl.nodes.remove(r3);
    let dead_port = dead.port;
    drop(dead);
    let alive = [t1, r1, r2];
    cl.wait(
        &format!("the Tessera replica of the killed redis-server :{dead_port} is elected"),
        Duration::from_secs(30),
        || {
            serves_as_master(&cl, &alive, &t_id, "0-5460", None)
                && alive
                    .iter()
                    .all(|&i| cl.nodes[i].cluster_info("cluster_state") == "ok")
        },
    );
    let tn = &cl.nodes[t1];
    cl.wait(
        "Tessera leaves replica mode",
        Duration::from_secs(10),
        || tn.info("replication", "role") == "master",
    );
    let mut ct = tn.conn();
    for k in &keys {
        assert_eq!(
            run(&mut ct, &["GET", k]),
            Ok(redis::Value::BulkString(b"r".to_vec())),
            "GET {k} on the elected Tessera node{}",
            cl.report()
        );
    }
    assert_eq!(
        run(&mut ct, &["SET", &keys[0], "again"]),
        Ok(redis::Value::Okay),
        "{}",
        cl.report()
    );
}

/// `bind-source-addr` on a Tessera node: its bus links leave from that address, so a
/// redis-server it meets records it there (Redis takes a MEETing node's address from
/// the link the MEET came on).
#[test]
fn bus_links_leave_from_bind_source_addr() {
    if !redis_tools_installed() {
        eprintln!("redis-server / redis-cli are not installed: skipping");
        return;
    }
    let mut cl = Cluster::new("bind-source");
    let t = cl.add_tessera();
    let r = cl.add_redis();
    let ok: String = cl.nodes[t].cmd(&["CONFIG", "SET", "bind-source-addr", "127.0.0.2"]);
    assert_eq!(ok, "OK");
    cl.nodes[t].meet(&cl.nodes[r]);
    let (tessera, redis) = (&cl.nodes[t], &cl.nodes[r]);
    let seen = eventually(Duration::from_secs(10), || {
        redis
            .nodes()
            .ok()
            .and_then(|text| line_of(&text, &tessera.id).map(|l| l.contains(" 127.0.0.2:")))
            .unwrap_or(false)
    });
    assert!(seen, "{}", cl.report());
}
