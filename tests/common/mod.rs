//! Black-box test harness: starts the real `tessera` binary on a free loopback port
//! and hands out clients. Each test gets its own server process.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    child: Child,
    pub port: u16,
}

/// `tessera --port P --threads N`, DEBUG enabled as Redis's own test suite runs its
/// servers (the tests use OBJECT, SLEEP, SET-ACTIVE-EXPIRE ...), a replica's full
/// sync started at once (no 5 s diskless delay, as Redis's suite sets for most
/// tests), in a directory of its own, then `extra`, which may say otherwise.
fn tessera_command(port: u16, threads: usize, extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessera"));
    cmd.args([
        "--port",
        &port.to_string(),
        "--threads",
        &threads.to_string(),
    ])
    .args(["--enable-debug-command", "yes"])
    .args(["--repl-diskless-sync-delay", "0"])
    .args(private_dir_args(port))
    .args(extra)
    .env("RUST_LOG", "warn");
    cmd
}

/// Redis's CRC64 (Jones polynomial, reflected), bit by bit: slow and obviously right,
/// for tests that build RDB files and payloads by hand.
pub fn crc64(data: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc = 0u64;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// `redis-server` on loopback port `port`, no save points, no AOF, then `extra`.
fn redis_server_command(port: u16, extra: &[&str]) -> Command {
    let mut cmd = Command::new("redis-server");
    // A directory of its own: a replica writes the RDB its master sent there.
    cmd.args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no"])
        .args(private_dir_args(port))
        .args(extra);
    cmd
}

/// Every test server gets a directory of its own (`extra` may name another): one
/// that saves at SHUTDOWN or loads at start must not meet another test's dump.rdb.
fn private_dir_args(port: u16) -> [String; 2] {
    let dir = private_dir(port);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::create_dir_all(&dir);
    ["--dir".into(), dir.display().to_string()]
}

fn private_dir(port: u16) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("tessera-test-{}-{port}", std::process::id()))
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

/// A loopback port that is free and whose cluster bus port (port + 10000) is free
/// too. Both are taken from below the kernel's ephemeral range (32768 up), so no
/// outgoing connection and no `free_port()` of another test lands on them. A port is
/// handed out once per test process: tests run in parallel threads, and two of them
/// could otherwise both find a port free before either binds it.
pub fn free_cluster_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
        ^ std::process::id();
    loop {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let port = 20000 + (seed >> 8) as u16 % 2700;
        if !handed_out.contains(&port)
            && TcpListener::bind(("127.0.0.1", port)).is_ok()
            && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok()
        {
            handed_out.push(port);
            return port;
        }
    }
}

impl Server {
    /// Starts `tessera --threads N` plus any extra arguments and waits for PING.
    pub fn start_with(threads: usize, extra: &[&str]) -> Server {
        Server::spawn(threads, extra, None)
    }

    /// Like `start_with`, with the server's stdout and stderr written to `log`.
    pub fn start_logged(threads: usize, log: &std::path::Path) -> Server {
        Server::spawn(threads, &[], Some(log))
    }

    /// `start_with`, with the server's stdout and stderr written to `log`.
    pub fn start_logged_with(threads: usize, extra: &[&str], log: &std::path::Path) -> Server {
        Server::spawn(threads, extra, Some(log))
    }

    fn spawn(threads: usize, extra: &[&str], log: Option<&std::path::Path>) -> Server {
        for _ in 0..5 {
            let port = free_port();
            let (out, err) = match log {
                Some(path) => {
                    let out = std::fs::File::create(path).expect("create log");
                    let err = out.try_clone().expect("clone log");
                    (Stdio::from(out), Stdio::from(err))
                }
                None => (Stdio::null(), Stdio::null()),
            };
            let child = tessera_command(port, threads, extra)
                .stdout(out)
                .stderr(err)
                .spawn()
                .expect("spawn tessera");
            let mut s = Server { child, port };
            if s.wait_ready() {
                return s;
            }
            let _ = s.child.kill();
        }
        panic!("tessera did not start");
    }

    /// Starts `tessera --threads N` plus `extra` once, stdout and stderr to `log`, for a
    /// server that may load a file first or refuse to start: waits up to `within` until
    /// it answers PING with PONG (`-LOADING` means it is still loading). Err if it exits
    /// first (with its status and log) or does not serve in time (killed, status None).
    pub fn start_loading(
        threads: usize,
        extra: &[&str],
        log: &std::path::Path,
        within: Duration,
    ) -> Result<Server, StartFailure> {
        loop {
            let port = free_port();
            let out = std::fs::File::create(log).expect("create log");
            let err = out.try_clone().expect("clone log");
            let child = tessera_command(port, threads, extra)
                .stdout(Stdio::from(out))
                .stderr(Stdio::from(err))
                .spawn()
                .expect("spawn tessera");
            let mut s = Server { child, port };
            match wait_serving(&mut s.child, port, within) {
                Ok(()) => return Ok(s),
                Err(status) => {
                    let text = std::fs::read_to_string(log).unwrap_or_default();
                    // Another process took the free port first: try another one.
                    if status.is_some() && text.contains("Address already in use") {
                        continue;
                    }
                    return Err(StartFailure { status, log: text });
                }
            }
        }
    }

    pub fn start(threads: usize) -> Server {
        Server::start_with(threads, &[])
    }

    /// `start_with` on `port` (a master restarted where its replicas look for it),
    /// its log in `log`; None when it did not serve within 10 s. Give it a `--dir`
    /// of its own in `extra`: the default one of a port is emptied at each start.
    pub fn start_on(
        port: u16,
        threads: usize,
        extra: &[&str],
        log: &std::path::Path,
    ) -> Option<Server> {
        let out = std::fs::File::create(log).expect("create log");
        let err = out.try_clone().expect("clone log");
        let child = tessera_command(port, threads, extra)
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("spawn tessera");
        let mut s = Server { child, port };
        s.wait_ready().then_some(s)
    }

    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok(mut c) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = c.set_read_timeout(Some(Duration::from_secs(1)));
                if c.write_all(b"PING\r\n").is_ok() {
                    let mut buf = [0u8; 16];
                    if let Ok(n) = c.read(&mut buf) {
                        // -NOAUTH: started with a password, serving all the same.
                        if buf[..n].starts_with(b"+PONG") || buf[..n].starts_with(b"-NOAUTH") {
                            return true;
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A synchronous client from the `redis` crate.
    pub fn client(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .expect("connect")
    }

    /// A raw TCP connection, for protocol-level tests.
    pub fn raw(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s
    }

    /// Sends `bytes` and reads until `expect_len` bytes arrived or the peer closed.
    pub fn roundtrip(&self, bytes: &[u8], expect_len: usize) -> Vec<u8> {
        let mut s = self.raw();
        s.write_all(bytes).expect("write");
        read_at_least(&mut s, expect_len)
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `sig` (libc::SIGTERM, ...) to the server process.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on the pid of a child this harness spawned and has not reaped.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    /// Waits up to `limit` for the server to exit; its exit code (None: still running,
    /// or killed by a signal).
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

/// A server that did not come to serve: how it exited (None: still running when time
/// ran out, then killed) and what it logged.
#[derive(Debug)]
pub struct StartFailure {
    pub status: Option<std::process::ExitStatus>,
    pub log: String,
}

/// Waits up to `within` until the process answers PING on `port` with PONG, while it
/// may answer `-LOADING` first. Err(exit status) if it exits; Err(None) after killing
/// it when time runs out.
fn wait_serving(
    child: &mut Child,
    port: u16,
    within: Duration,
) -> Result<(), Option<std::process::ExitStatus>> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Some(status));
        }
        if let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = c.set_read_timeout(Some(Duration::from_secs(1)));
            if c.write_all(b"PING\r\n").is_ok() {
                let mut buf = [0u8; 16];
                if let Ok(n) = c.read(&mut buf) {
                    if buf[..n].starts_with(b"+PONG") {
                        return Ok(());
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(None)
}

pub fn read_at_least(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while out.len() < n {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(k) => out.extend_from_slice(&buf[..k]),
        }
    }
    out
}

/// Reads from `s` until what arrived contains `needle`, the peer closes, or 5 s pass;
/// returns all that arrived. For feeds (MONITOR, pub/sub) where earlier lines may come
/// first and a fixed byte count could stop short of the line a test waits for.
pub fn read_until_contains(s: &mut TcpStream, needle: &[u8]) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    s.set_read_timeout(Some(Duration::from_millis(100))).ok();
    while Instant::now() < deadline && !out.windows(needle.len()).any(|w| w == needle) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => out.extend_from_slice(&buf[..k]),
            Err(_) => continue,
        }
    }
    out
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Keys guaranteed to live on different shards of a 2-shard server (slots 5061 and
/// 12182 fall in different halves of the slot space).
pub const KEY_SHARD0: &str = "bar";
pub const KEY_SHARD1: &str = "foo";

/// Waits until `f` holds, polling every 20 ms, up to `limit`; false if it never did.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Runs a command and returns its reply as `T`; panics (naming the command) on error.
pub fn q<T: redis::FromRedisValue>(c: &mut redis::Connection, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(c).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Runs a command that must fail and returns the error's text.
pub fn err(c: &mut redis::Connection, args: &[&str]) -> String {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    match cmd.query::<redis::Value>(c) {
        Err(e) => e.to_string(),
        Ok(v) => panic!("{args:?}: expected an error, got {v:?}"),
    }
}

/// Runs a command on a fresh connection in a thread (a client that blocks); returns
/// that connection's CLIENT ID and the thread.
pub fn spawn_blocked(
    s: &Server,
    args: &[&str],
) -> (
    u64,
    std::thread::JoinHandle<redis::RedisResult<redis::Value>>,
) {
    let mut c = s.client();
    let id: u64 = q(&mut c, &["CLIENT", "ID"]);
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let h = std::thread::spawn(move || {
        let mut cmd = redis::cmd(&args[0]);
        for a in &args[1..] {
            cmd.arg(a);
        }
        cmd.query::<redis::Value>(&mut c)
    });
    (id, h)
}

/// CLIENT UNBLOCK `id` ERROR: the blocked client `h` runs for gets -UNBLOCKED.
pub fn assert_unblock_error(
    c: &mut redis::Connection,
    id: u64,
    h: std::thread::JoinHandle<redis::RedisResult<redis::Value>>,
) {
    let n: i64 = q(c, &["CLIENT", "UNBLOCK", &id.to_string(), "ERROR"]);
    assert_eq!(n, 1);
    let e = h.join().expect("thread").expect_err("unblocked");
    assert!(
        e.to_string()
            .contains("client unblocked via CLIENT UNBLOCK"),
        "{e}"
    );
}

/// Blocks a client of master `s` in `args`, then makes `s` a replica (of a port
/// nothing listens on): the client must get Redis's -UNBLOCKED for a role change
/// (disconnectAllBlockedClients). `s` is a master again afterwards.
pub fn assert_demotion_unblocks(s: &Server, c: &mut redis::Connection, args: &[&str]) {
    let (_, h) = spawn_blocked(s, args);
    wait_blocked(c, 1);
    let _: () = q(c, &["REPLICAOF", "127.0.0.1", &free_port().to_string()]);
    let e = h.join().expect("thread").expect_err("demoted");
    assert!(
        e.to_string()
            .contains("force unblock from blocking operation"),
        "{args:?}: {e}"
    );
    let _: () = q(c, &["REPLICAOF", "NO", "ONE"]);
    wait_blocked(c, 0);
}

/// Waits until INFO reports `n` blocked clients.
pub fn wait_blocked(c: &mut redis::Connection, n: usize) {
    let start = Instant::now();
    loop {
        let info: String = q(c, &["INFO", "clients"]);
        if info.contains(&format!("blocked_clients:{n}\r\n")) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{info}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A real redis-server on a free port, for byte-for-byte comparisons. None when
/// redis-server is not installed (the comparison is then skipped).
pub struct ReferenceRedis {
    child: Child,
    pub port: u16,
}

impl ReferenceRedis {
    pub fn start() -> Option<ReferenceRedis> {
        ReferenceRedis::start_with(&[])
    }

    /// redis-server with extra `--directive value` arguments after the defaults.
    pub fn start_with(extra: &[&str]) -> Option<ReferenceRedis> {
        ReferenceRedis::start_on(free_port(), extra)
    }

    /// A redis-server with `--cluster-enabled yes` on a port whose bus port (port +
    /// 10000) is free too, its nodes.conf in its own directory, then `extra`.
    pub fn start_cluster_node(extra: &[&str]) -> Option<ReferenceRedis> {
        let mut args = vec!["--cluster-enabled", "yes"];
        args.extend_from_slice(extra);
        ReferenceRedis::start_on(free_cluster_port(), &args)
    }

    pub fn start_on(port: u16, extra: &[&str]) -> Option<ReferenceRedis> {
        let child = redis_server_command(port, extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let r = ReferenceRedis { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            // Answering PING, not just accepting: a fresh redis-server can accept
            // before it serves.
            if let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) {
                let _ = c.set_read_timeout(Some(Duration::from_secs(1)));
                // -NOAUTH when started with a password: serving all the same.
                let mut pong = [0u8; 7];
                if c.write_all(b"PING\r\n").is_ok()
                    && c.read_exact(&mut pong).is_ok()
                    && (&pong == b"+PONG\r\n" || &pong == b"-NOAUTH")
                {
                    return Some(r);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl ReferenceRedis {
    /// redis-server with extra arguments, its log (stdout, stderr) in `log`, started
    /// once and given `within` to serve (it may load a file first, or refuse it and
    /// exit). None when redis-server is not installed.
    pub fn start_loading(
        extra: &[&str],
        log: &std::path::Path,
        within: Duration,
    ) -> Option<Result<ReferenceRedis, StartFailure>> {
        let port = free_port();
        let out = std::fs::File::create(log).expect("create log");
        let err = out.try_clone().expect("clone log");
        let child = redis_server_command(port, extra)
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .ok()?;
        let mut r = ReferenceRedis { child, port };
        Some(match wait_serving(&mut r.child, port, within) {
            Ok(()) => Ok(r),
            Err(status) => Err(StartFailure {
                status,
                log: std::fs::read_to_string(log).unwrap_or_default(),
            }),
        })
    }
}

impl ReferenceRedis {
    /// A synchronous client from the `redis` crate.
    pub fn client(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .and_then(|c| c.get_connection())
            .expect("connect to redis-server")
    }
}

impl ReferenceRedis {
    /// The directory it runs in (`--dir`): its dump.rdb, its nodes.conf.
    pub fn dir(&self) -> std::path::PathBuf {
        private_dir(self.port)
    }
}

impl Drop for ReferenceRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sets the soft RLIMIT_FSIZE of process `pid` (a server under test) to `bytes`
/// (libc::RLIM_INFINITY lifts it): past it writes fail with EFBIG, a full disk as far
/// as the server can tell.
pub fn set_file_size_limit(pid: u32, bytes: u64) {
    let lim = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: prlimit(2) on a child process of the test, setting one limit.
    let rc = unsafe { libc::prlimit(pid as i32, libc::RLIMIT_FSIZE, &lim, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit");
}

/// A fresh, empty directory for one test's files (`tessera-<suite>-<pid>-<name>`).
pub fn scratch_dir(suite: &str, name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-{suite}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// One field of an INFO section, empty when absent.
pub fn info_field(c: &mut redis::Connection, section: &str, field: &str) -> String {
    let info: String = redis::cmd("INFO").arg(section).query(c).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(str::to_string)
        .unwrap_or_default()
}

/// One field of INFO persistence.
pub fn persistence_field(c: &mut redis::Connection, field: &str) -> String {
    let info: String = q(c, &["INFO", "persistence"]);
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in INFO"))
        .trim()
        .to_string()
}
