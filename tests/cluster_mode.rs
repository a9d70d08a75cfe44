//! Cluster mode end to end: Tessera nodes started with `--cluster-enabled yes`,
//! driven by the real Redis 7.0.15 tools the way operators drive a cluster.
//! - `redis-cli --cluster create` makes 3 masters + 3 replicas; `--cluster check`
//!   is clean; a key asked of the wrong node is answered `-MOVED`, two slots in
//!   one command `-CROSSSLOT`; `redis-cli -c` follows the redirects; a replica
//!   serves reads after READONLY only; SELECT is refused; INFO says so.
//! - `--cluster reshard` moves 1000 slots while a cluster client of our own
//!   (MOVED / ASK / TRYAGAIN, nothing else tolerated) writes thousands of keys and
//!   `redis-benchmark --cluster` runs: every acknowledged write survives.
//! - `--cluster add-node`, `rebalance --cluster-use-empty-masters`, add-node as a
//!   replica, emptying a master and `del-node`, then a slot left half-open by hand
//!   that `check` warns about and `fix` closes.
//! - A master SIGKILLed: its replica takes over, writes go on, and the old master
//!   restarted from its nodes.conf comes back as the new master's replica and
//!   receives what was written meanwhile.
//!
//! Every node is a child process owned by a `Node`; dropping the test's `Cluster`
//! (also on panic) kills them all.

mod common;
#[path = "common/resp.rs"]
mod resp;

use common::{free_cluster_port, q, scratch_dir, Server};
use resp::{Raw, R};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SUITE: &str = "cluster_mode";
const NODE_TIMEOUT: &str = "2000";

/// Whether redis-cli (and so the rest of the Redis tools) is installed.
fn tools_installed() -> bool {
    Command::new("redis-cli")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

// ---------------------------------------------------------------------------
// Nodes and clusters
// ---------------------------------------------------------------------------

/// One Tessera cluster node: its port, its directory (nodes.conf lives there, so
/// a restart keeps its identity), and the running process, if any.
struct Node {
    server: Option<Server>,
    port: u16,
    dir: PathBuf,
    log: PathBuf,
    starts: usize,
}

impl Node {
    /// A fresh node on a free port (whose bus port is free too) under `root`.
    fn start(root: &Path) -> Node {
        for _ in 0..8 {
            let port = free_cluster_port();
            let dir = root.join(format!("node-{port}"));
            std::fs::create_dir_all(&dir).expect("node dir");
            let mut node = Node {
                server: None,
                port,
                dir,
                log: PathBuf::new(),
                starts: 0,
            };
            if node.launch() {
                return node;
            }
            // Another test took the port first: try another one.
            let log = node.log_tail(30);
            if !log.contains("in use") {
                panic!("node on {port} did not start; log:\n{log}");
            }
        }
        panic!("no node could start on a free port");
    }

    /// (Re)starts the process on the node's port and directory.
    fn launch(&mut self) -> bool {
        self.starts += 1;
        self.log = self
            .dir
            .parent()
            .expect("root")
            .join(format!("node-{}.{}.log", self.port, self.starts));
        let dir = self.dir.display().to_string();
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            NODE_TIMEOUT,
            "--dir",
            &dir,
        ];
        self.server = Server::start_on(self.port, 2, &args, &self.log);
        self.server.is_some()
    }

    fn restart(&mut self) {
        assert!(self.server.is_none(), "restart of a running node");
        assert!(
            self.launch(),
            "node {} did not restart; log:\n{}",
            self.port,
            self.log_tail(40)
        );
    }

    /// SIGKILL, and reaped.
    fn kill(&mut self) {
        if let Some(s) = self.server.take() {
            s.signal(libc::SIGKILL);
            drop(s);
        }
    }

    fn alive(&self) -> bool {
        self.server.is_some()
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn client(&self) -> redis::Connection {
        let c = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.port));
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        c
    }

    fn raw(&self) -> Raw {
        Raw::connect(self.port)
    }

    /// The node's ID, from its CLUSTER NODES (which waits out -LOADING).
    fn id(&self) -> String {
        let text = self.nodes_text();
        parse_nodes(&text)
            .into_iter()
            .find(|l| l.has_flag("myself"))
            .map(|l| l.id)
            .unwrap_or_else(|| panic!("node {}: no myself line in\n{text}", self.port))
    }

    /// This node's CLUSTER NODES, or the error that kept it from answering. A
    /// replica loading its master's RDB answers -LOADING (CLUSTER NODES has no
    /// `loading` flag in Redis 7.0 either): asked again for up to 10 s.
    fn nodes_text(&self) -> String {
        let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)) else {
            return "(bad url)".into();
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = match client.get_connection_with_timeout(Duration::from_secs(2)) {
                Ok(mut c) => {
                    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
                    match redis::cmd("CLUSTER").arg("NODES").query::<String>(&mut c) {
                        Ok(text) => return text,
                        Err(e) if e.kind() == redis::ErrorKind::BusyLoadingError => {
                            format!("(CLUSTER NODES failed: {e})")
                        }
                        Err(e) => return format!("(CLUSTER NODES failed: {e})"),
                    }
                }
                Err(e) => return format!("(unreachable: {e})"),
            };
            if Instant::now() >= deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn nodes(&self) -> Vec<NodeLine> {
        parse_nodes(&self.nodes_text())
    }

    fn cluster_info(&self, field: &str) -> String {
        let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)) else {
            return String::new();
        };
        let Ok(mut c) = client.get_connection_with_timeout(Duration::from_secs(2)) else {
            return String::new();
        };
        let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut c)
            .unwrap_or_default();
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .unwrap_or("")
            .trim()
            .to_string()
    }

    /// The last `n` lines of the current log.
    fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// The nodes of one test, in a scratch directory of its own. Dropping it kills
/// every node.
struct Cluster {
    root: PathBuf,
    nodes: Vec<Node>,
    cli_runs: AtomicUsize,
}

impl Cluster {
    fn start(name: &str, n: usize) -> Cluster {
        let root = scratch_dir(SUITE, name);
        let nodes = (0..n).map(|_| Node::start(&root)).collect();
        Cluster {
            root,
            nodes,
            cli_runs: AtomicUsize::new(0),
        }
    }

    fn add_node(&mut self) -> usize {
        self.nodes.push(Node::start(&self.root));
        self.nodes.len() - 1
    }

    fn live(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(|n| n.alive())
    }

    fn live_ports(&self) -> Vec<u16> {
        self.live().map(|n| n.port).collect()
    }

    /// Every live node's CLUSTER NODES and CLUSTER INFO state, and each node's log
    /// tail: what a failure message shows.
    fn dump(&self) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            if n.alive() {
                out += &format!(
                    "--- node {} (cluster_state:{}) CLUSTER NODES:\n{}\n",
                    n.port,
                    n.cluster_info("cluster_state"),
                    n.nodes_text().trim_end()
                );
            } else {
                out += &format!("--- node {} is down\n", n.port);
            }
            out += &format!(
                "--- node {} log tail ({}):\n{}\n",
                n.port,
                n.log.display(),
                n.log_tail(15)
            );
        }
        out
    }

    /// Runs redis-cli (or another tool) with `args`, its output to a file; gives it
    /// `limit` before killing it.
    fn tool(&self, program: &str, args: &[&str], limit: Duration) -> ToolRun {
        let n = self.cli_runs.fetch_add(1, Ordering::SeqCst);
        let run = run_tool(&self.root, n, program, args, limit, None);
        eprintln!("[{:.1?}] {}: exit {:?}", run.took, run.command, run.code);
        run
    }

    fn cli(&self, args: &[&str], limit: Duration) -> ToolRun {
        self.tool("redis-cli", args, limit)
    }

    /// `redis-cli --cluster create` of all nodes with `replicas` replicas each.
    fn create(&self, replicas: usize) {
        let addrs: Vec<String> = self.nodes.iter().map(Node::addr).collect();
        let replicas = replicas.to_string();
        let mut args = vec!["--cluster", "create"];
        args.extend(addrs.iter().map(String::as_str));
        args.extend(["--cluster-replicas", &replicas, "--cluster-yes"]);
        let run = self.cli(&args, Duration::from_secs(60));
        assert!(
            run.code == Some(0) && run.out.contains("[OK] All 16384 slots covered."),
            "--cluster create failed: {run}\n{}",
            self.dump()
        );
    }

    /// Waits until every live node says cluster_state:ok.
    fn wait_state_ok(&self, limit: Duration, what: &str) {
        let ok = wait_for(limit, Duration::from_millis(100), || {
            self.live().all(|n| n.cluster_info("cluster_state") == "ok")
        });
        assert!(
            ok,
            "{what}: cluster_state never became ok everywhere within {limit:?}\n{}",
            self.dump()
        );
    }

    /// Waits until every live node lists `nodes` nodes, none in handshake or
    /// failing, `masters` of them masters serving slots and every other one the
    /// replica of one of those: the views agree on the topology.
    fn wait_agreed(&self, nodes: usize, masters: usize, what: &str) {
        let ok = wait_for(Duration::from_secs(20), Duration::from_millis(100), || {
            self.live().all(|n| {
                let lines = n.nodes();
                let serving: Vec<&NodeLine> = lines
                    .iter()
                    .filter(|l| l.is_master() && l.slot_count() > 0)
                    .collect();
                lines.len() == nodes
                    && serving.len() == masters
                    && lines.iter().all(|l| {
                        !l.has_flag("handshake")
                            && !l.has_flag("fail")
                            && !l.has_flag("fail?")
                            && !l.has_flag("noaddr")
                    })
                    && lines
                        .iter()
                        .filter(|l| !(l.is_master() && l.slot_count() > 0))
                        .all(|l| l.has_flag("slave") && serving.iter().any(|m| m.id == l.master))
            })
        });
        assert!(
            ok,
            "{what}: the nodes never agreed on {masters} masters among {nodes} nodes\n{}",
            self.dump()
        );
    }

    /// `redis-cli --cluster check` via `entry`: exit status and output.
    fn check(&self, entry: &Node) -> ToolRun {
        self.cli(
            &["--cluster", "check", &entry.addr()],
            Duration::from_secs(30),
        )
    }

    /// Waits until `--cluster check` is clean (nodes may still be agreeing on the
    /// configuration), then asserts it is.
    fn assert_check_clean(&self, entry: &Node, what: &str) {
        let mut last = None;
        wait_for(Duration::from_secs(20), Duration::from_millis(300), || {
            let run = self.check(entry);
            let clean = run.is_clean_check();
            last = Some(run);
            clean
        });
        let run = last.expect("ran once");
        assert!(
            run.is_clean_check(),
            "{what}: --cluster check is not clean: {run}\n{}",
            self.dump()
        );
    }

    /// The master serving `slot` according to `entry`, and that master's replicas.
    fn owner_of(&self, entry: &Node, slot: u16) -> (NodeLine, Vec<NodeLine>) {
        let lines = entry.nodes();
        let owner = lines
            .iter()
            .find(|l| l.is_master() && l.serves(slot))
            .cloned()
            .unwrap_or_else(|| panic!("nobody serves slot {slot}\n{}", self.dump()));
        let replicas = lines
            .iter()
            .filter(|l| l.master == owner.id)
            .cloned()
            .collect();
        (owner, replicas)
    }

    fn node_on(&self, port: u16) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node of ours on {port}"))
    }

    fn node_on_mut(&mut self, port: u16) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node of ours on {port}"))
    }
}

impl Drop for Cluster {
    /// Kills every node; keeps the directory (logs, nodes.conf, tool output) of a
    /// test that failed.
    fn drop(&mut self) {
        self.nodes.clear();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// Polls `f` every `every` until it holds or `limit` passes.
fn wait_for(limit: Duration, every: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(every);
    }
}

// ---------------------------------------------------------------------------
// Running the Redis tools
// ---------------------------------------------------------------------------

/// One run of a tool: its exit code (None: killed after its time ran out) and
/// what it printed.
struct ToolRun {
    command: String,
    code: Option<i32>,
    out: String,
    took: Duration,
}

impl ToolRun {
    fn is_clean_check(&self) -> bool {
        self.code == Some(0)
            && self
                .out
                .contains("[OK] All nodes agree about slots configuration.")
            && self.out.contains("[OK] All 16384 slots covered.")
            && !self.out.contains("[WARNING]")
            && !self.out.contains("[ERR]")
    }
}

impl std::fmt::Display for ToolRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The end of a long output is where the tools say what went wrong.
        let lines: Vec<&str> = self.out.lines().collect();
        let shown = if lines.len() > 80 {
            format!(
                "[... {} lines ...]\n{}",
                lines.len() - 80,
                lines[lines.len() - 80..].join("\n")
            )
        } else {
            self.out.clone()
        };
        write!(
            f,
            "`{}` exited {:?} after {:.1?}; output:\n{}",
            self.command, self.code, self.took, shown
        )
    }
}

/// Sets its flag when dropped: a thread running a tool (or writing) for a test
/// that panicked stops.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Kills the tool's process if the test panics while it runs.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `program` with `args`, its output to `root`/tool-`n`.out, and kills it
/// when `limit` passes or `abort` is set (the test that waits for it failed).
fn run_tool(
    root: &Path,
    n: usize,
    program: &str,
    args: &[&str],
    limit: Duration,
    abort: Option<&AtomicBool>,
) -> ToolRun {
    let path = root.join(format!("tool-{n}.out"));
    let out = std::fs::File::create(&path).expect("tool output file");
    let err = out.try_clone().expect("clone");
    let started = Instant::now();
    let command = format!("{program} {}", args.join(" "));
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {command}: {e}"));
    let mut guard = ChildGuard(child);
    let deadline = started + limit;
    let code = loop {
        match guard.0.try_wait() {
            Ok(Some(status)) => break status.code(),
            Ok(None)
                if Instant::now() < deadline
                    && !abort.is_some_and(|a| a.load(Ordering::SeqCst)) =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => break None,
        }
    };
    drop(guard);
    ToolRun {
        command,
        code,
        out: std::fs::read_to_string(&path).unwrap_or_default(),
        took: started.elapsed(),
    }
}

// ---------------------------------------------------------------------------
// CLUSTER NODES
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct NodeLine {
    id: String,
    port: u16,
    flags: Vec<String>,
    /// The master's ID for a replica, "-" for a master.
    master: String,
    slots: Vec<(u16, u16)>,
}

impl NodeLine {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    fn is_master(&self) -> bool {
        self.has_flag("master")
    }

    fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }

    fn slot_count(&self) -> usize {
        self.slots
            .iter()
            .map(|&(a, b)| usize::from(b - a) + 1)
            .sum()
    }
}

/// CLUSTER NODES, line by line (migration entries `[s->-id]` left out).
fn parse_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() < 8 {
                return None;
            }
            let addr = f[1].split(',').next()?;
            let port = addr.split('@').next()?.rsplit(':').next()?.parse().ok()?;
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|a| (a, a)),
                })
                .collect();
            Some(NodeLine {
                id: f[0].to_string(),
                port,
                flags: f[2].split(',').map(str::to_string).collect(),
                master: f[3].to_string(),
                slots,
            })
        })
        .collect()
}

// ---------------------------------------------------------------------------
// A minimal cluster client
// ---------------------------------------------------------------------------

/// What the client met on the way.
#[derive(Default, Debug, Clone, Copy)]
struct Redirects {
    moved: usize,
    ask: usize,
    tryagain: usize,
    reconnects: usize,
}

/// A cluster client as the Redis ones work: a slot map from CLUSTER SLOTS, one
/// connection per node, -MOVED updates the map, -ASK sends ASKING then the
/// command to the node named, -TRYAGAIN retries after a pause. Any other error
/// is the caller's (Err). With `tolerate_down`, a node that does not answer makes
/// the client reload its map from another seed (used after a node was killed).
struct ClusterClient {
    seeds: Vec<u16>,
    slots: Vec<u16>,
    conns: HashMap<u16, redis::Connection>,
    tolerate_down: bool,
    stats: Redirects,
}

/// Redis's keyHashSlot, written out here (not the server's) so that the test
/// routes as an independent client would: CRC16/XMODEM of the key, or of the
/// part between the first `{` and the next `}` when that part is not empty.
fn slot_of(key: &str) -> u16 {
    let k = key.as_bytes();
    let hashed = match k.iter().position(|&b| b == b'{') {
        Some(open) => match k[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &k[open + 1..open + 1 + len],
            _ => k,
        },
        None => k,
    };
    let mut crc: u16 = 0;
    for &b in hashed {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc & 0x3fff
}

fn connect(port: u16) -> redis::RedisResult<redis::Connection> {
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?
        .get_connection_with_timeout(Duration::from_secs(3))?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    c.set_write_timeout(Some(Duration::from_secs(10)))?;
    Ok(c)
}

impl ClusterClient {
    fn new(seeds: Vec<u16>, tolerate_down: bool) -> ClusterClient {
        let mut c = ClusterClient {
            seeds,
            slots: vec![0; 16384],
            conns: HashMap::new(),
            tolerate_down,
            stats: Redirects::default(),
        };
        c.refresh().expect("CLUSTER SLOTS from a seed");
        c
    }

    /// Loads the slot map from the first seed that answers CLUSTER SLOTS.
    fn refresh(&mut self) -> Result<(), String> {
        let mut errors = Vec::new();
        for &port in &self.seeds.clone() {
            let reply = self.conn(port).and_then(|c| {
                redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query::<redis::Value>(c)
                    .map_err(|e| e.to_string())
            });
            match reply {
                Ok(v) => {
                    self.load_slots(&v)?;
                    return Ok(());
                }
                Err(e) => {
                    self.conns.remove(&port);
                    errors.push(format!("{port}: {e}"));
                }
            }
        }
        Err(format!("no seed answered CLUSTER SLOTS: {errors:?}"))
    }

    fn load_slots(&mut self, v: &redis::Value) -> Result<(), String> {
        let redis::Value::Array(ranges) = v else {
            return Err(format!("CLUSTER SLOTS: {v:?}"));
        };
        for range in ranges {
            let redis::Value::Array(f) = range else {
                return Err(format!("CLUSTER SLOTS entry: {range:?}"));
            };
            let (
                Some(redis::Value::Int(a)),
                Some(redis::Value::Int(b)),
                Some(redis::Value::Array(m)),
            ) = (f.first(), f.get(1), f.get(2))
            else {
                return Err(format!("CLUSTER SLOTS entry: {range:?}"));
            };
            let Some(redis::Value::Int(port)) = m.get(1) else {
                return Err(format!("CLUSTER SLOTS master: {m:?}"));
            };
            for s in *a..=*b {
                self.slots[s as usize] = *port as u16;
            }
        }
        Ok(())
    }

    fn conn(&mut self, port: u16) -> Result<&mut redis::Connection, String> {
        Ok(match self.conns.entry(port) {
            Entry::Occupied(c) => c.into_mut(),
            Entry::Vacant(slot) => {
                slot.insert(connect(port).map_err(|e| format!("connect to {port}: {e}"))?)
            }
        })
    }

    /// Runs `args` (whose first key is `args[1]`) where the cluster says it
    /// runs.
    fn run(&mut self, args: &[&str]) -> Result<redis::Value, String> {
        let slot = slot_of(args[1]);
        let mut port = self.slots[slot as usize];
        let mut asking = false;
        let mut last = String::new();
        let tolerate_down = self.tolerate_down;
        for _ in 0..300 {
            let reply = match self.conn(port) {
                Ok(c) => {
                    let mut ask_reply = Ok(redis::Value::Okay);
                    if asking {
                        ask_reply = redis::cmd("ASKING").query::<redis::Value>(c);
                    }
                    ask_reply.and_then(|_| {
                        let mut cmd = redis::cmd(args[0]);
                        for a in &args[1..] {
                            cmd.arg(*a);
                        }
                        cmd.query::<redis::Value>(c)
                    })
                }
                Err(e) if tolerate_down => {
                    last = e;
                    self.stats.reconnects += 1;
                    std::thread::sleep(Duration::from_millis(100));
                    let _ = self.refresh();
                    port = self.slots[slot as usize];
                    asking = false;
                    continue;
                }
                Err(e) => return Err(format!("{args:?}: {e}")),
            };
            asking = false;
            let e = match reply {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            last = format!("{e}");
            match e.kind() {
                redis::ErrorKind::Moved => {
                    self.stats.moved += 1;
                    let (addr, s) = e.redirect_node().ok_or(format!("bad MOVED: {e}"))?;
                    let to = parse_port(addr)?;
                    self.slots[s as usize] = to;
                    port = to;
                }
                redis::ErrorKind::Ask => {
                    self.stats.ask += 1;
                    let (addr, _) = e.redirect_node().ok_or(format!("bad ASK: {e}"))?;
                    port = parse_port(addr)?;
                    asking = true;
                }
                redis::ErrorKind::TryAgain => {
                    self.stats.tryagain += 1;
                    std::thread::sleep(Duration::from_millis(10));
                    port = self.slots[slot as usize];
                }
                _ if tolerate_down && (e.is_io_error() || e.is_connection_dropped()) => {
                    self.conns.remove(&port);
                    self.stats.reconnects += 1;
                    std::thread::sleep(Duration::from_millis(100));
                    let _ = self.refresh();
                    port = self.slots[slot as usize];
                }
                _ => return Err(format!("{args:?} on node {port}: {e}")),
            }
        }
        Err(format!(
            "{args:?}: still redirected after 300 tries: {last}"
        ))
    }

    fn get(&mut self, key: &str) -> Result<Option<String>, String> {
        match self.run(&["GET", key])? {
            redis::Value::Nil => Ok(None),
            redis::Value::BulkString(b) => Ok(Some(String::from_utf8_lossy(&b).into_owned())),
            other => Err(format!("GET {key}: {other:?}")),
        }
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match self.run(&["SET", key, value])? {
            redis::Value::Okay => Ok(()),
            redis::Value::SimpleString(s) if s == "OK" => Ok(()),
            other => Err(format!("SET {key}: {other:?}")),
        }
    }

    fn incr(&mut self, key: &str) -> Result<i64, String> {
        match self.run(&["INCR", key])? {
            redis::Value::Int(n) => Ok(n),
            other => Err(format!("INCR {key}: {other:?}")),
        }
    }
}

fn parse_port(addr: &str) -> Result<u16, String> {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or(format!("bad address {addr}"))
}

// ---------------------------------------------------------------------------
// 1. create, check, redirects
// ---------------------------------------------------------------------------

#[test]
fn create_check_and_redirects() {
    if !tools_installed() {
        eprintln!("redis-cli is not installed: skipping");
        return;
    }
    let cluster = Cluster::start("create", 6);
    cluster.create(1);
    cluster.wait_state_ok(Duration::from_secs(20), "after create");
    cluster.wait_agreed(6, 3, "after create");
    let entry = &cluster.nodes[0];
    cluster.assert_check_clean(entry, "after create");

    // Three masters with one replica each, every node agreeing.
    for n in &cluster.nodes {
        let lines = n.nodes();
        assert_eq!(lines.len(), 6, "{}\n{}", n.port, cluster.dump());
        assert_eq!(lines.iter().filter(|l| l.is_master()).count(), 3);
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.has_flag("slave"))
                .filter(|l| lines.iter().any(|m| m.id == l.master && m.is_master()))
                .count(),
            3,
            "{}",
            cluster.dump()
        );
        assert_eq!(n.cluster_info("cluster_slots_assigned"), "16384");
        assert_eq!(n.cluster_info("cluster_known_nodes"), "6");
        assert_eq!(n.cluster_info("cluster_size"), "3");
    }

    // MOVED from a master that does not serve the key, exactly as Redis says it.
    let key = "user:1000";
    let slot: i64 = q(&mut entry.client(), &["CLUSTER", "KEYSLOT", key]);
    let slot = slot as u16;
    assert_eq!(slot, slot_of(key));
    for k in [
        "foo",
        "bar",
        "{a}x",
        "{}x",
        "a{}b{c}",
        "{{a}}",
        "x{y",
        "{user1000}.following",
    ] {
        let s: i64 = q(&mut entry.client(), &["CLUSTER", "KEYSLOT", k]);
        assert_eq!(s as u16, slot_of(k), "CLUSTER KEYSLOT {k}");
    }
    let (owner, replicas) = cluster.owner_of(entry, slot);
    let lines = entry.nodes();
    let other = lines
        .iter()
        .find(|l| l.is_master() && l.id != owner.id)
        .expect("another master");
    let moved = format!("MOVED {slot} 127.0.0.1:{}", owner.port);
    let mut raw = Raw::connect(other.port);
    assert_eq!(raw.c(&format!("GET {key}")), R::Err(moved.clone()));
    assert_eq!(raw.c(&format!("SET {key} x")), R::Err(moved.clone()));
    // The owner itself serves it.
    let mut on_owner = Raw::connect(owner.port);
    assert_eq!(on_owner.c(&format!("GET {key}")), R::Nil);

    // Two slots in one command: CROSSSLOT, on the owner of either as anywhere.
    let (k1, k2) = ("{a}x", "{b}x");
    assert_ne!(slot_of(k1), slot_of(k2));
    let crossslot = R::Err("CROSSSLOT Keys in request don't hash to the same slot".into());
    for l in lines.iter().filter(|l| l.is_master()) {
        assert_eq!(
            Raw::connect(l.port).c(&format!("MSET {k1} 1 {k2} 2")),
            crossslot,
            "on {}",
            l.port
        );
    }
    // One hash tag, one slot: fine on its owner.
    let tagged_owner = cluster.owner_of(entry, slot_of("{a}")).0;
    assert_eq!(
        Raw::connect(tagged_owner.port).c("MSET {a}x 1 {a}y 2"),
        R::Simple("OK".into())
    );

    // redis-cli -c follows MOVED: SET through one node, GET through another.
    let mut via = lines
        .iter()
        .filter(|l| l.is_master())
        .map(|l| l.port)
        .cycle();
    for i in 0..20 {
        let k = format!("cli:{i}");
        let v = format!("value-{i}");
        let p = via.next().expect("port").to_string();
        let set = cluster.cli(&["-c", "-p", &p, "SET", &k, &v], Duration::from_secs(10));
        assert!(set.code == Some(0) && set.out.trim() == "OK", "{set}");
        let p = via.next().expect("port").to_string();
        let get = cluster.cli(&["-c", "-p", &p, "GET", &k], Duration::from_secs(10));
        assert!(get.code == Some(0) && get.out.trim() == v, "{get}");
    }

    // The replica of the owner: MOVED until READONLY, then it serves the read
    // once replication brought the key.
    assert_eq!(
        on_owner.c(&format!("SET {key} on-master")),
        R::Simple("OK".into())
    );
    let replica = replicas
        .first()
        .unwrap_or_else(|| panic!("slot {slot}'s master has no replica\n{}", cluster.dump()));
    let mut r = Raw::connect(replica.port);
    assert_eq!(r.c(&format!("GET {key}")), R::Err(moved.clone()));
    assert_eq!(r.c("READONLY"), R::Simple("OK".into()));
    let mut seen = R::Nil;
    let replicated = wait_for(Duration::from_secs(10), Duration::from_millis(50), || {
        seen = r.c(&format!("GET {key}"));
        seen == R::Bulk(b"on-master".to_vec())
    });
    assert!(
        replicated,
        "the replica never served the read after READONLY: last {seen:?}\n{}",
        cluster.dump()
    );
    // Writes still go to the master; READWRITE ends the reads.
    assert_eq!(r.c(&format!("SET {key} on-replica")), R::Err(moved.clone()));
    assert_eq!(r.c("READWRITE"), R::Simple("OK".into()));
    assert_eq!(r.c(&format!("GET {key}")), R::Err(moved));

    // One database only.
    assert_eq!(
        raw.c("SELECT 1"),
        R::Err("ERR SELECT is not allowed in cluster mode".into())
    );
    assert_eq!(raw.c("SELECT 0"), R::Simple("OK".into()));
    for n in &cluster.nodes {
        let info: String = q(&mut n.client(), &["INFO", "cluster"]);
        assert!(info.contains("cluster_enabled:1"), "{}: {info}", n.port);
    }
}

// ---------------------------------------------------------------------------
// 2. reshard under load
// ---------------------------------------------------------------------------

/// What the writer had acknowledged: each key's last value, each counter's
/// last INCR reply.
#[derive(Default)]
struct Acked {
    values: HashMap<String, String>,
    counters: HashMap<String, i64>,
    writes: usize,
    passes: usize,
    stats: Redirects,
}

const KEYS: usize = 4000;
const COUNTERS: usize = 200;
/// Groups of keys sharing a hash tag whose slot is among those the reshard
/// moves (the source's first 1000): while such a slot migrates, some of its
/// keys are on the target already (-ASK) and an MSET of one moved and one
/// unmoved key gets -TRYAGAIN.
const HOT_TAGS: usize = 10;
const HOT_KEYS: usize = 100;

fn hot_groups() -> Vec<Vec<String>> {
    (0..)
        .map(|j| format!("{{h{j}}}"))
        .filter(|tag| slot_of(tag) < 1000)
        .take(HOT_TAGS)
        .map(|tag| (0..HOT_KEYS).map(|i| format!("{tag}:m{i}")).collect())
        .collect()
}

/// Which keys a writer writes.
#[derive(Clone, Copy)]
enum Keys {
    /// SET k{i} and INCR c{j}, all over the slot space.
    Spread,
    /// SET and two-key MSET in the hot groups, the groups interleaved.
    Hot,
}

/// Writes over and over, through `client`, until `stop` is set and a full pass
/// ended after that. Any error the client does not handle stops it: what was
/// acknowledged until then, and that error.
fn writer(
    mut client: ClusterClient,
    keys: Keys,
    stop: Arc<AtomicBool>,
    first_pass: Arc<AtomicBool>,
) -> (Acked, Option<String>) {
    let mut acked = Acked::default();
    let result = write_passes(&mut client, keys, &stop, &first_pass, &mut acked);
    acked.stats = client.stats;
    (acked, result.err())
}

fn write_passes(
    client: &mut ClusterClient,
    keys: Keys,
    stop: &AtomicBool,
    first_pass: &AtomicBool,
    acked: &mut Acked,
) -> Result<(), String> {
    let hot = hot_groups();
    for round in 0.. {
        let stopping = stop.load(Ordering::SeqCst);
        match keys {
            Keys::Spread => {
                for i in 0..KEYS {
                    let k = format!("k{i}");
                    let v = format!("v{i}.{round}");
                    client.set(&k, &v)?;
                    acked.values.insert(k, v);
                    acked.writes += 1;
                    if i % 10 == 0 {
                        let c = format!("c{}", (i / 10) % COUNTERS);
                        let n = client.incr(&c)?;
                        let before = acked.counters.insert(c.clone(), n).unwrap_or(0);
                        if n != before + 1 {
                            return Err(format!("INCR {c}: {n} after {before}"));
                        }
                        acked.writes += 1;
                    }
                }
            }
            Keys::Hot => {
                for i in 0..HOT_KEYS {
                    for group in &hot {
                        let k = &group[i];
                        let v = format!("{k}.{round}");
                        client.set(k, &v)?;
                        acked.values.insert(k.clone(), v);
                        acked.writes += 1;
                        if i % 4 == 0 {
                            let other = &group[(i + HOT_KEYS / 2) % HOT_KEYS];
                            let v1 = format!("{k}.{round}.m");
                            let v2 = format!("{other}.{round}.m");
                            match client.run(&["MSET", k, &v1, other, &v2])? {
                                redis::Value::Okay => {}
                                reply => return Err(format!("MSET: {reply:?}")),
                            }
                            acked.values.insert(k.clone(), v1);
                            acked.values.insert(other.clone(), v2);
                            acked.writes += 1;
                        }
                    }
                }
            }
        }
        acked.passes += 1;
        first_pass.store(true, Ordering::SeqCst);
        if stopping {
            return Ok(());
        }
    }
    Ok(())
}

#[test]
fn reshard_under_load_loses_nothing() {
    if !tools_installed() {
        eprintln!("redis-cli is not installed: skipping");
        return;
    }
    let cluster = Cluster::start("reshard", 3);
    cluster.create(0);
    cluster.wait_state_ok(Duration::from_secs(20), "after create");
    cluster.wait_agreed(3, 3, "after create");
    let entry = &cluster.nodes[0];
    cluster.assert_check_clean(entry, "after create");
    let ports = cluster.live_ports();
    let lines = entry.nodes();
    let from = lines
        .iter()
        .find(|l| l.is_master() && l.serves(0))
        .expect("slot 0's owner")
        .clone();
    let to = lines
        .iter()
        .find(|l| l.is_master() && l.id != from.id)
        .expect("another master")
        .clone();

    // Two writers, each of which writes all its keys once before resharding
    // starts.
    let stop = Arc::new(AtomicBool::new(false));
    // Should the test fail, the writers and redis-benchmark stop with it.
    let aborted = Arc::new(AtomicBool::new(false));
    let _stop_on_panic = SetOnDrop(stop.clone());
    let _abort_on_panic = SetOnDrop(aborted.clone());
    let writers: Vec<_> = [Keys::Spread, Keys::Hot]
        .into_iter()
        .map(|keys| {
            let client = ClusterClient::new(ports.clone(), false);
            let first_pass = Arc::new(AtomicBool::new(false));
            let (stop, done) = (stop.clone(), first_pass.clone());
            let w = std::thread::spawn(move || writer(client, keys, stop, done));
            (w, first_pass)
        })
        .collect();
    let filled = wait_for(Duration::from_secs(30), Duration::from_millis(20), || {
        writers
            .iter()
            .all(|(w, first)| first.load(Ordering::SeqCst) || w.is_finished())
    });
    assert!(filled, "the writers did not write all their keys in 30 s");

    // redis-benchmark in cluster mode alongside.
    let bench_port = ports[1].to_string();
    let root = cluster.root.clone();
    let abort = aborted.clone();
    let bench = std::thread::spawn(move || {
        run_tool(
            &root,
            1000,
            "redis-benchmark",
            &[
                "--cluster",
                "-h",
                "127.0.0.1",
                "-p",
                &bench_port,
                "-n",
                "50000",
                "-r",
                "10000",
                "-t",
                "set,get",
                "-q",
            ],
            Duration::from_secs(90),
            Some(&abort),
        )
    });

    let reshard = cluster.cli(
        &[
            "--cluster",
            "reshard",
            &entry.addr(),
            "--cluster-from",
            &from.id,
            "--cluster-to",
            &to.id,
            "--cluster-slots",
            "1000",
            "--cluster-yes",
        ],
        Duration::from_secs(90),
    );
    stop.store(true, Ordering::SeqCst);
    let written: Vec<_> = writers
        .into_iter()
        .map(|(w, _)| w.join().expect("writer thread"))
        .collect();
    let bench = bench.join().expect("benchmark thread");
    assert!(
        reshard.code == Some(0),
        "reshard failed: {reshard}\n{}",
        cluster.dump()
    );
    let mut acked = Acked::default();
    for (a, failure) in written {
        if let Some(e) = failure {
            panic!(
                "a writer failed after {} acknowledged writes ({:?}): {e}\n{}",
                a.writes,
                a.stats,
                cluster.dump()
            );
        }
        eprintln!(
            "writer: {} writes in {} passes, {:?}",
            a.writes, a.passes, a.stats
        );
        acked.values.extend(a.values);
        acked.counters.extend(a.counters);
        acked.writes += a.writes;
        acked.stats.moved += a.stats.moved;
        acked.stats.ask += a.stats.ask;
        acked.stats.tryagain += a.stats.tryagain;
    }
    eprintln!(
        "reshard took {:.1?}; benchmark:\n{}",
        reshard.took,
        bench.out.replace(
            "WARNING: Cluster slots configuration changed, fetching new one...\n",
            ""
        )
    );
    assert!(
        bench.code == Some(0),
        "redis-benchmark --cluster failed: {bench}\n{}",
        cluster.dump()
    );
    // Keys of moved slots were written after the move: the old owner said MOVED.
    // The hot groups' slots moved while their keys were written: some keys had
    // gone to the target already, the source said ASK.
    assert!(acked.stats.moved > 0, "{:?}", acked.stats);
    assert!(
        acked.stats.ask > 0,
        "never redirected by ASK: {:?}",
        acked.stats
    );

    cluster.assert_check_clean(entry, "after reshard");
    let moved_to = cluster.owner_of(entry, 0).0;
    assert_eq!(moved_to.id, to.id, "slot 0 moved");
    let from_now = entry
        .nodes()
        .into_iter()
        .find(|l| l.id == from.id)
        .expect("the source");
    assert_eq!(
        from_now.slot_count(),
        from.slot_count() - 1000,
        "{}",
        cluster.dump()
    );

    // Every acknowledged write, with its last value, from a fresh client.
    let mut reader = ClusterClient::new(ports, false);
    let mut wrong = Vec::new();
    for (k, v) in &acked.values {
        match reader.get(k) {
            Ok(Some(got)) if &got == v => {}
            other => wrong.push(format!(
                "{k} (slot {}): want {v}, got {other:?}",
                slot_of(k)
            )),
        }
    }
    for (k, n) in &acked.counters {
        let want = n.to_string();
        match reader.get(k) {
            Ok(Some(got)) if got == want => {}
            other => wrong.push(format!(
                "{k} (slot {}): want {n}, got {other:?}",
                slot_of(k)
            )),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} acknowledged keys lost or stale, e.g.:\n{}\n{}",
        wrong.len(),
        acked.values.len() + acked.counters.len(),
        wrong[..wrong.len().min(20)].join("\n"),
        cluster.dump()
    );
}

// ---------------------------------------------------------------------------
// 3. add-node, rebalance, del-node, fix
// ---------------------------------------------------------------------------

#[test]
fn add_node_rebalance_del_node_fix() {
    if !tools_installed() {
        eprintln!("redis-cli is not installed: skipping");
        return;
    }
    let mut cluster = Cluster::start("addnode", 3);
    cluster.create(0);
    cluster.wait_state_ok(Duration::from_secs(20), "after create");
    cluster.wait_agreed(3, 3, "after create");
    cluster.assert_check_clean(&cluster.nodes[0], "after create");
    // Some data, so that moving slots moves keys.
    let mut client = ClusterClient::new(cluster.live_ports(), false);
    for i in 0..500 {
        client
            .set(&format!("data{i}"), &format!("d{i}"))
            .expect("SET");
    }
    let entry_addr = cluster.nodes[0].addr();

    // A new empty master.
    let new = cluster.add_node();
    let run = cluster.cli(
        &[
            "--cluster",
            "add-node",
            &cluster.nodes[new].addr(),
            &entry_addr,
        ],
        Duration::from_secs(30),
    );
    assert!(
        run.code == Some(0) && run.out.contains("[OK] New node added correctly."),
        "add-node: {run}\n{}",
        cluster.dump()
    );
    let new_id = cluster.nodes[new].id();
    let joined = wait_for(Duration::from_secs(15), Duration::from_millis(100), || {
        cluster.live().all(|n| {
            let lines = n.nodes();
            lines.len() == 4
                && lines.iter().all(|l| !l.has_flag("handshake"))
                && lines.iter().any(|l| l.id == new_id)
        })
    });
    assert!(joined, "the new node never joined\n{}", cluster.dump());
    // A fresh master holds cluster_state:fail for its first 2 s (Redis's
    // CLUSTER_WRITABLE_DELAY) and refuses RESTORE-ASKING with CLUSTERDOWN
    // until then, as redis-server does.
    cluster.wait_state_ok(Duration::from_secs(10), "after add-node");
    cluster.assert_check_clean(&cluster.nodes[0], "after add-node");

    let run = cluster.cli(
        &[
            "--cluster",
            "rebalance",
            &entry_addr,
            "--cluster-use-empty-masters",
        ],
        Duration::from_secs(120),
    );
    assert!(run.code == Some(0), "rebalance: {run}\n{}", cluster.dump());
    let new_slots = cluster.nodes[0]
        .nodes()
        .into_iter()
        .find(|l| l.id == new_id)
        .map(|l| l.slot_count())
        .unwrap_or(0);
    assert!(
        new_slots > 3000,
        "the new master got {new_slots} slots\n{run}\n{}",
        cluster.dump()
    );
    cluster.assert_check_clean(&cluster.nodes[0], "after rebalance");

    // A replica for the new master.
    let replica = cluster.add_node();
    let run = cluster.cli(
        &[
            "--cluster",
            "add-node",
            &cluster.nodes[replica].addr(),
            &entry_addr,
            "--cluster-slave",
            "--cluster-master-id",
            &new_id,
        ],
        Duration::from_secs(30),
    );
    assert!(
        run.code == Some(0),
        "add-node --cluster-slave: {run}\n{}",
        cluster.dump()
    );
    let replica_id = cluster.nodes[replica].id();
    let follows = wait_for(Duration::from_secs(20), Duration::from_millis(100), || {
        cluster.live().all(|n| {
            n.nodes()
                .iter()
                .any(|l| l.id == replica_id && l.has_flag("slave") && l.master == new_id)
        })
    });
    assert!(
        follows,
        "the added replica is not seen as {new_id}'s replica\n{}",
        cluster.dump()
    );
    let role: String = q(
        &mut cluster.nodes[replica].client(),
        &["INFO", "replication"],
    );
    assert!(role.contains("role:slave"), "{role}");
    cluster.assert_check_clean(&cluster.nodes[0], "after adding a replica");

    // Empty one of the first masters (not the entry) and delete it.
    let victim_port = cluster.nodes[1].port;
    let victim_id = cluster.nodes[1].id();
    let keeper_id = cluster.nodes[0].id();
    let victim_slots = cluster.nodes[0]
        .nodes()
        .into_iter()
        .find(|l| l.id == victim_id)
        .map(|l| l.slot_count())
        .expect("the victim is known");
    assert!(victim_slots > 0);
    let run = cluster.cli(
        &[
            "--cluster",
            "reshard",
            &entry_addr,
            "--cluster-from",
            &victim_id,
            "--cluster-to",
            &keeper_id,
            "--cluster-slots",
            &victim_slots.to_string(),
            "--cluster-yes",
        ],
        Duration::from_secs(120),
    );
    assert!(run.code == Some(0), "reshard: {run}\n{}", cluster.dump());
    // A master left without slots follows the node that took its last one, as
    // Redis 7.0 does (cluster-allow-replica-migration yes).
    let follows_keeper = wait_for(Duration::from_secs(10), Duration::from_millis(100), || {
        cluster.live().all(|n| {
            n.nodes().iter().any(|l| {
                l.id == victim_id
                    && l.slot_count() == 0
                    && l.has_flag("slave")
                    && l.master == keeper_id
            })
        })
    });
    assert!(
        follows_keeper,
        "the emptied master is not {keeper_id}'s replica\n{}",
        cluster.dump()
    );
    cluster.assert_check_clean(&cluster.nodes[0], "after emptying a master");

    let run = cluster.cli(
        &["--cluster", "del-node", &entry_addr, &victim_id],
        Duration::from_secs(30),
    );
    assert!(run.code == Some(0), "del-node: {run}\n{}", cluster.dump());
    let forgotten = wait_for(Duration::from_secs(15), Duration::from_millis(100), || {
        cluster
            .live()
            .filter(|n| n.port != victim_port)
            .all(|n| !n.nodes_text().contains(&victim_id))
    });
    assert!(
        forgotten,
        "the deleted node is still listed\n{}",
        cluster.dump()
    );
    // Gone for good (FORGET's ban outlives a few gossip rounds).
    std::thread::sleep(Duration::from_secs(3));
    for n in cluster.live().filter(|n| n.port != victim_port) {
        let text = n.nodes_text();
        assert!(!text.contains(&victim_id), "{}: {text}", n.port);
        assert_eq!(n.nodes().len(), 4, "{}: {text}", n.port);
    }
    cluster.node_on_mut(victim_port).kill();
    cluster.wait_state_ok(Duration::from_secs(10), "after del-node");
    cluster.assert_check_clean(&cluster.nodes[0], "after del-node");

    // Every key is still there.
    let mut reader = ClusterClient::new(cluster.live_ports(), false);
    for i in 0..500 {
        assert_eq!(
            reader.get(&format!("data{i}")).expect("GET"),
            Some(format!("d{i}")),
            "data{i}"
        );
    }

    // A slot left half-open by hand: MIGRATING on its owner, IMPORTING on another.
    let entry = &cluster.nodes[0];
    let lines = entry.nodes();
    let owner = lines
        .iter()
        .find(|l| l.is_master() && l.slot_count() > 0 && l.id != keeper_id)
        .expect("another master with slots")
        .clone();
    let target = lines
        .iter()
        .find(|l| l.is_master() && l.slot_count() > 0 && l.id != owner.id)
        .expect("a target master")
        .clone();
    let slot = owner.slots[0].0;
    let key = (0..)
        .map(|i| format!("open{i}"))
        .find(|k| slot_of(k) == slot)
        .expect("a key of the slot");
    let owner_node = cluster.node_on(owner.port);
    let target_node = cluster.node_on(target.port);
    let _: () = q(&mut owner_node.client(), &["SET", &key, "half-open"]);
    let s = slot.to_string();
    let _: () = q(
        &mut target_node.client(),
        &["CLUSTER", "SETSLOT", &s, "IMPORTING", &owner.id],
    );
    let _: () = q(
        &mut owner_node.client(),
        &["CLUSTER", "SETSLOT", &s, "MIGRATING", &target.id],
    );
    let check = cluster.check(entry);
    assert!(
        check.out.contains("[WARNING]") && check.out.contains(&format!("slots are open: {s}")),
        "check does not warn about the open slot: {check}"
    );
    assert_ne!(check.code, Some(0), "check with an open slot: {check}");
    let run = cluster.cli(
        &["--cluster", "fix", &entry.addr(), "--cluster-yes"],
        Duration::from_secs(60),
    );
    assert!(run.code == Some(0), "fix: {run}\n{}", cluster.dump());
    cluster.assert_check_clean(entry, "after fix");
    let mut reader = ClusterClient::new(cluster.live_ports(), false);
    assert_eq!(
        reader.get(&key).expect("GET"),
        Some("half-open".to_string())
    );
}

// ---------------------------------------------------------------------------
// 4. failover after SIGKILL, and the old master rejoining
// ---------------------------------------------------------------------------

#[test]
fn sigkill_failover_and_rejoin() {
    if !tools_installed() {
        eprintln!("redis-cli is not installed: skipping");
        return;
    }
    let mut cluster = Cluster::start("failover", 6);
    cluster.create(1);
    cluster.wait_state_ok(Duration::from_secs(20), "after create");
    cluster.wait_agreed(6, 3, "after create");
    cluster.assert_check_clean(&cluster.nodes[0], "after create");

    // The victim: the master of slot 0's... of the slot of `probe`.
    let probe = "failover:probe";
    let slot = slot_of(probe);
    let (victim, replicas) = cluster.owner_of(&cluster.nodes[0], slot);
    assert_eq!(replicas.len(), 1, "{}", cluster.dump());
    let heir = replicas[0].clone();
    let mut client = ClusterClient::new(cluster.live_ports(), false);
    let before: Vec<String> = (0..200).map(|i| format!("{{{probe}}}:before{i}")).collect();
    for k in &before {
        client.set(k, "old").expect("SET before the kill");
    }
    // The replica has them before its master dies.
    let copied = wait_for(Duration::from_secs(10), Duration::from_millis(50), || {
        let mut c = cluster.node_on(heir.port).raw();
        c.c("READONLY");
        c.c(&format!("GET {}", before[199])) == R::Bulk(b"old".to_vec())
    });
    assert!(
        copied,
        "the replica never got the writes\n{}",
        cluster.dump()
    );

    let killed_at = Instant::now();
    cluster.node_on_mut(victim.port).kill();

    // Its replica takes over, as every live node sees it.
    let promoted = wait_for(Duration::from_secs(15), Duration::from_millis(100), || {
        cluster.live().all(|n| {
            n.nodes()
                .iter()
                .any(|l| l.id == heir.id && l.is_master() && !l.has_flag("slave") && l.serves(slot))
                && n.cluster_info("cluster_state") == "ok"
        })
    });
    assert!(
        promoted,
        "the replica {} was not promoted within 15 s\n{}",
        heir.port,
        cluster.dump()
    );
    eprintln!("failover took {:.1?}", killed_at.elapsed());
    for n in cluster.live() {
        let line = n
            .nodes()
            .into_iter()
            .find(|l| l.id == victim.id)
            .expect("the dead master is still known");
        assert!(line.has_flag("fail"), "{}: {line:?}", n.port);
    }

    // Writes to that slot go on, through the new master: a client whose map
    // still sends the slot elsewhere is told MOVED to it.
    let mut client = ClusterClient::new(cluster.live_ports(), true);
    let elsewhere = cluster
        .live_ports()
        .into_iter()
        .find(|&p| p != heir.port)
        .expect("another live node");
    client.slots[slot as usize] = elsewhere;
    let after: Vec<String> = (0..200).map(|i| format!("{{{probe}}}:after{i}")).collect();
    for k in &after {
        client
            .set(k, "new")
            .unwrap_or_else(|e| panic!("write after failover: {e}\n{}", cluster.dump()));
    }
    for k in &before {
        assert_eq!(client.get(k).expect("GET"), Some("old".into()), "{k}");
    }
    assert_eq!(client.slots[slot as usize], heir.port);
    assert!(client.stats.moved > 0, "{:?}", client.stats);

    // The old master comes back from its nodes.conf, on its port: it follows the
    // node that took its slots, and gets what was written meanwhile.
    cluster.node_on_mut(victim.port).restart();
    let old = cluster.node_on(victim.port);
    let rejoined = wait_for(Duration::from_secs(20), Duration::from_millis(100), || {
        cluster.live().all(|n| {
            n.nodes().iter().any(|l| {
                l.id == victim.id
                    && l.has_flag("slave")
                    && !l.has_flag("fail")
                    && l.master == heir.id
            })
        })
    });
    assert!(
        rejoined,
        "the old master did not come back as {}'s replica\n{}",
        heir.id,
        cluster.dump()
    );
    let text = old.nodes_text();
    let mine = parse_nodes(&text)
        .into_iter()
        .find(|l| l.has_flag("myself"))
        .unwrap_or_else(|| panic!("no myself line in the rejoined node's view:\n{text}"));
    assert_eq!(mine.id, victim.id, "restarted with its identity");
    assert!(mine.has_flag("slave") && mine.master == heir.id, "{mine:?}");
    assert_eq!(mine.slot_count(), 0);
    let mut r = old.raw();
    assert_eq!(r.c("READONLY"), R::Simple("OK".into()));
    let mut last = R::Nil;
    let synced = wait_for(Duration::from_secs(15), Duration::from_millis(100), || {
        last = r.c(&format!("GET {}", after[199]));
        last == R::Bulk(b"new".to_vec())
    });
    assert!(
        synced,
        "the rejoined node never got the writes made meanwhile: {last:?}\n{}",
        cluster.dump()
    );
    for k in after.iter().chain(&before) {
        let want = if k.contains(":after") { "new" } else { "old" };
        assert_eq!(
            r.c(&format!("GET {k}")),
            R::Bulk(want.as_bytes().to_vec()),
            "{k}"
        );
    }
    // It answers MOVED to the new master without READONLY.
    let mut plain = old.raw();
    assert_eq!(
        plain.c(&format!("GET {probe}")),
        R::Err(format!("MOVED {slot} 127.0.0.1:{}", heir.port))
    );
    cluster.wait_state_ok(Duration::from_secs(10), "after the rejoin");
    cluster.assert_check_clean(&cluster.nodes[0], "after the rejoin");
}
