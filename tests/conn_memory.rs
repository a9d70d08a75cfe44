//! Memory of idle connections, black box: 10,000 connections opened and closed
//! against `tessera --threads 2` and, for comparison, redis-server in the same run.
//! The server's RSS (VmRSS of /proc/<pid>/status) with them open is within 2x of
//! redis-server's, and within 10 s of the last close it is back within 20% of its
//! value before them, without MEMORY PURGE.

mod common;
use common::{free_port, scratch_dir};

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CONNECTIONS: usize = 10_000;

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// VmRSS in KiB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Raises this process's open-file limit (connections here, inherited by the
/// servers) to `want`, or as far as the hard limit allows; returns the limit.
fn raise_nofile(want: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a pointer to a live rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        let target = want.min(lim.rlim_max);
        if lim.rlim_cur < target {
            lim.rlim_cur = target;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    lim.rlim_cur
}

fn ping(port: u16) -> bool {
    let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(1)));
    let mut pong = [0u8; 7];
    c.write_all(b"PING\r\n").is_ok() && c.read_exact(&mut pong).is_ok() && &pong == b"+PONG\r\n"
}

/// Connected clients as INFO reports them.
fn connected(port: u16) -> usize {
    let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
    if c.write_all(b"INFO clients\r\n").is_err() {
        return 0;
    }
    let mut buf = vec![0u8; 4096];
    let n = c.read(&mut buf).unwrap_or(0);
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map_or(0, |n| n.saturating_sub(1))
}

struct Run {
    start_kb: u64,
    open_kb: u64,
    /// RSS when it settled within 20% of the start, and how long after the close.
    back: Option<(u64, Duration)>,
    /// RSS 10 s after the close (or when it came back).
    end_kb: u64,
}

/// Opens `CONNECTIONS` idle connections, closes them and follows RSS for 10 s.
fn run(mut cmd: Command) -> Option<Run> {
    let port = free_port();
    let child = cmd
        .args(["--port", &port.to_string(), "--maxclients", "20000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let pid = child.id();
    let _guard = Proc(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ping(port) {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // A client has come and gone, as before any real use.
    std::thread::sleep(Duration::from_millis(300));
    let start_kb = rss_kb(pid);
    let mut conns = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        conns.push(TcpStream::connect(("127.0.0.1", port)).expect("connect"));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while connected(port) < CONNECTIONS && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    let open_kb = rss_kb(pid);
    drop(conns);
    let closed = Instant::now();
    let mut back = None;
    let mut end_kb = open_kb;
    while closed.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(250));
        end_kb = rss_kb(pid);
        if end_kb * 10 <= start_kb * 12 {
            back = Some((end_kb, closed.elapsed()));
            break;
        }
    }
    Some(Run {
        start_kb,
        open_kb,
        back,
        end_kb,
    })
}

#[test]
fn idle_connections_cost_little_and_give_memory_back() {
    let limit = raise_nofile(25_000);
    assert!(
        limit as usize > CONNECTIONS + 200,
        "open-file limit {limit} too low for {CONNECTIONS} connections"
    );
    let mut tessera = Command::new(env!("CARGO_BIN_EXE_tessera"));
    // No save points and a directory of its own: a dump.rdb left in the working
    // directory (by a benchmark's server) was loaded at start and measured.
    let dir = scratch_dir("conn_memory", "idle");
    tessera
        .args(["--threads", "2", "--save", ""])
        .arg("--dir")
        .arg(&dir)
        .env("RUST_LOG", "warn");
    let t = run(tessera).expect("tessera did not start");
    eprintln!(
        "tessera: start {} KB, {} open {} KB ({:.2} KB each), 10 s after close {} KB, back within 20% {:?}",
        t.start_kb,
        CONNECTIONS,
        t.open_kb,
        (t.open_kb.saturating_sub(t.start_kb)) as f64 / CONNECTIONS as f64,
        t.end_kb,
        t.back
    );
    let mut redis = Command::new("redis-server");
    redis.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]);
    if let Some(r) = run(redis) {
        eprintln!(
            "redis-server: start {} KB, open {} KB ({:.2} KB each), after close {} KB",
            r.start_kb,
            r.open_kb,
            (r.open_kb.saturating_sub(r.start_kb)) as f64 / CONNECTIONS as f64,
            r.end_kb
        );
        assert!(
            t.open_kb <= 2 * r.open_kb,
            "open: tessera {} KB vs redis-server {} KB",
            t.open_kb,
            r.open_kb
        );
        let t_after = t.back.map_or(t.end_kb, |b| b.0);
        assert!(
            t_after <= 2 * r.end_kb.max(r.start_kb),
            "after close: tessera {t_after} KB vs redis-server {} KB",
            r.end_kb
        );
    }
    assert!(
        t.back.is_some(),
        "RSS {} KB 10 s after the close, start {} KB",
        t.end_kb,
        t.start_kb
    );
}
