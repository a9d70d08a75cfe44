//! The append-only file, black-box: with `appendfsync always` nothing acknowledged is
//! lost to SIGKILL at any moment (writers on both shards, MULTI/EXEC and MSET across
//! shards, rewrites running), and no atomic unit comes back half applied; a truncated
//! last incr file loads under `aof-load-truncated yes` and is refused under `no`;
//! Tessera's appendonlydir passes redis-check-aof and loads in redis-server 7.0.15,
//! and Redis's loads in Tessera (same DEBUG DIGEST); an old single-file
//! appendonly.aof is migrated; CONFIG SET appendonly works at run time; a failing
//! disk refuses writes with -MISCONF until it has room.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

fn scratch(name: &str) -> PathBuf {
    scratch_dir("aof", name)
}

fn info_field(c: &mut redis::Connection, field: &str) -> String {
    persistence_field(c, field)
}

fn wait_until(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_rewrite(c: &mut redis::Connection) {
    wait_until("AOF rewrite done", Duration::from_secs(30), || {
        info_field(c, "aof_rewrite_in_progress") == "0"
            && info_field(c, "aof_rewrite_scheduled") == "0"
    });
}

/// Starts tessera (2 shards) on `dir` with the AOF on and `extra`, which must come up.
fn start_aof(dir: &Path, extra: &[&str]) -> Server {
    let d = dir.display().to_string();
    let mut args = vec!["--dir", d.as_str(), "--save", "", "--appendonly", "yes"];
    args.extend_from_slice(extra);
    let log = dir.join(format!("log-{}", free_port()));
    Server::start_loading(2, &args, &log, Duration::from_secs(30))
        .unwrap_or_else(|f| panic!("tessera did not start: {:?}\n{}", f.status, f.log))
}

/// Tessera started on `dir`'s AOF: the DEBUG DIGEST of what it loaded, the server
/// and a client to it.
fn tessera_digest(dir: &Path) -> (String, Server, redis::Connection) {
    let s = start_aof(dir, &["--enable-debug-command", "yes"]);
    let mut c = s.client();
    let digest: String = q(&mut c, &["DEBUG", "DIGEST"]);
    (digest, s, c)
}

/// What writers were told, per writer: the last acknowledged value of each of their
/// three kinds of write.
#[derive(Default, Clone, Copy, Debug)]
struct Acked {
    counter: i64,
    pair: i64,
    mset: i64,
}

/// One writer: INCR of its counter, MULTI/EXEC of INCRs of two keys (on different
/// shards: `{x}`/`{y}` hash tags land on both), MSET of eight keys; records each
/// acknowledgement, until the connection breaks or `stop`.
fn writer(url: String, w: usize, acked: Arc<Mutex<Acked>>, stop: Arc<AtomicBool>) {
    let Ok(mut c) = redis::Client::open(url).and_then(|c| c.get_connection()) else {
        return;
    };
    let mut n = acked.lock().expect("acked").mset;
    while !stop.load(Ordering::Relaxed) {
        let Ok(v) = redis::cmd("INCR")
            .arg(format!("ctr:{w}"))
            .query::<i64>(&mut c)
        else {
            return;
        };
        acked.lock().expect("acked").counter = v;
        let r: redis::RedisResult<(i64, i64)> = redis::pipe()
            .atomic()
            .cmd("INCR")
            .arg(format!("pair:{w}:{{x}}"))
            .cmd("INCR")
            .arg(format!("pair:{w}:{{y}}"))
            .query(&mut c);
        let Ok((a, b)) = r else { return };
        assert_eq!(a, b, "a transaction's INCRs differ");
        acked.lock().expect("acked").pair = a;
        n += 1;
        let mut mset = redis::cmd("MSET");
        for i in 0..8 {
            mset.arg(format!("m:{w}:{i}")).arg(n);
        }
        if mset.query::<()>(&mut c).is_err() {
            return;
        }
        acked.lock().expect("acked").mset = n;
    }
}

/// Checks a restarted server against what was acknowledged before the kill: nothing
/// acknowledged missing (at most the one write in flight beyond it), and every
/// atomic unit whole.
fn check_acked(c: &mut redis::Connection, w: usize, a: Acked, round: usize) {
    let get = |c: &mut redis::Connection, k: String| -> i64 {
        let v: Option<i64> = q(c, &["GET", &k]);
        v.unwrap_or(0)
    };
    let ctr = get(c, format!("ctr:{w}"));
    assert!(
        ctr == a.counter || ctr == a.counter + 1,
        "round {round} writer {w}: counter {ctr}, acknowledged {}",
        a.counter
    );
    let x = get(c, format!("pair:{w}:{{x}}"));
    let y = get(c, format!("pair:{w}:{{y}}"));
    assert_eq!(
        x, y,
        "round {round} writer {w}: a MULTI/EXEC came back half applied"
    );
    assert!(
        x == a.pair || x == a.pair + 1,
        "round {round} writer {w}: pair {x}, acknowledged {}",
        a.pair
    );
    let values: Vec<i64> = (0..8).map(|i| get(c, format!("m:{w}:{i}"))).collect();
    assert!(
        values.iter().all(|v| *v == values[0]),
        "round {round} writer {w}: an MSET came back half applied: {values:?}"
    );
    assert!(
        values[0] == a.mset || values[0] == a.mset + 1,
        "round {round} writer {w}: mset {}, acknowledged {}",
        values[0],
        a.mset
    );
}

/// 20 SIGKILLs at random moments under write load with `appendfsync always`, with
/// BGREWRITEAOF running now and then: after every restart each acknowledged write is
/// there and no transaction or MSET is half applied.
#[test]
fn crash_loop_loses_nothing_acknowledged_under_always() {
    const WRITERS: usize = 4;
    let dir = scratch("crash");
    let acked: Vec<Arc<Mutex<Acked>>> = (0..WRITERS).map(|_| Arc::default()).collect();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ std::process::id() as u64;
    for round in 0..20 {
        let s = start_aof(&dir, &["--appendfsync", "always"]);
        let mut c = s.client();
        for (w, a) in acked.iter().enumerate() {
            let a = *a.lock().expect("acked");
            check_acked(&mut c, w, a, round);
            // Carry on from what the server has (an unacknowledged write may be in).
            let ctr: Option<i64> = q(&mut c, &["GET", &format!("ctr:{w}")]);
            let pair: Option<i64> = q(&mut c, &["GET", &format!("pair:{w}:{{x}}")]);
            let m: Option<i64> = q(&mut c, &["GET", &format!("m:{w}:0")]);
            *acked[w].lock().expect("acked") = Acked {
                counter: ctr.unwrap_or(0),
                pair: pair.unwrap_or(0),
                mset: m.unwrap_or(0),
            };
        }
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (url, a, stop) = (s.url(), acked[w].clone(), stop.clone());
                std::thread::spawn(move || writer(url, w, a, stop))
            })
            .collect();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let run_for = Duration::from_millis(100 + seed % 500);
        let started = Instant::now();
        while started.elapsed() < run_for {
            if seed.is_multiple_of(3) {
                let _: redis::RedisResult<String> = redis::cmd("BGREWRITEAOF").query(&mut c);
            }
            std::thread::sleep(Duration::from_millis(60));
        }
        s.signal(libc::SIGKILL);
        for t in threads {
            t.join().expect("writer");
        }
        drop(s);
    }
    let s = start_aof(&dir, &["--appendfsync", "always"]);
    let mut c = s.client();
    for (w, a) in acked.iter().enumerate() {
        check_acked(&mut c, w, *a.lock().expect("acked"), 20);
    }
    let out = redis_check_aof(&dir);
    if let Some((ok, text)) = out {
        assert!(ok, "redis-check-aof refused the AOF:\n{text}");
    }
}

/// `appendfsync everysec`: a SIGKILL loses at most the last ~2 seconds of
/// acknowledged writes (here, with the kernel's page cache surviving the process,
/// none that the writer thread had written).
#[test]
fn everysec_loses_at_most_two_seconds() {
    let dir = scratch("everysec");
    let s = start_aof(&dir, &["--appendfsync", "everysec"]);
    let acked: Arc<Mutex<Acked>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let (url, a, st) = (s.url(), acked.clone(), stop.clone());
    let t = std::thread::spawn(move || writer(url, 0, a, st));
    std::thread::sleep(Duration::from_millis(2500));
    let old = *acked.lock().expect("acked");
    std::thread::sleep(Duration::from_millis(2100));
    s.signal(libc::SIGKILL);
    t.join().expect("writer");
    drop(s);
    let s = start_aof(&dir, &[]);
    let mut c = s.client();
    let ctr: Option<i64> = q(&mut c, &["GET", "ctr:0"]);
    assert!(
        ctr.unwrap_or(0) >= old.counter,
        "more than 2 s lost: {ctr:?} < {}",
        old.counter
    );
    let x: Option<i64> = q(&mut c, &["GET", "pair:0:{x}"]);
    let y: Option<i64> = q(&mut c, &["GET", "pair:0:{y}"]);
    assert_eq!(x, y, "a transaction came back half applied");
}

/// A restart with default save points (SIGTERM) keeps what was set, with the AOF on.
#[test]
fn restart_keeps_data() {
    let dir = scratch("restart");
    let mut s = start_aof(&dir, &[]);
    let mut c = s.client();
    let _: () = q(&mut c, &["SET", "k", "v"]);
    let _: () = q(&mut c, &["SELECT", "3"]);
    let _: () = q(&mut c, &["RPUSH", "l", "a", "b"]);
    let _: () = q(&mut c, &["PEXPIRE", "l", "100000"]);
    s.signal(libc::SIGTERM);
    assert_eq!(s.wait_exit(Duration::from_secs(10)), Some(0));
    let s = start_aof(&dir, &[]);
    let mut c = s.client();
    let v: String = q(&mut c, &["GET", "k"]);
    assert_eq!(v, "v");
    let _: () = q(&mut c, &["SELECT", "3"]);
    let l: Vec<String> = q(&mut c, &["LRANGE", "l", "0", "-1"]);
    assert_eq!(l, ["a", "b"]);
    let ttl: i64 = q(&mut c, &["PTTL", "l"]);
    assert!(ttl > 90_000 && ttl <= 100_000, "ttl {ttl}");
}

/// The manifest's incr file, for tests that edit it.
fn last_incr(dir: &Path) -> PathBuf {
    let m = std::fs::read_to_string(dir.join("appendonlydir/appendonly.aof.manifest"))
        .expect("manifest");
    let name = m
        .lines()
        .rfind(|l| l.ends_with("type i"))
        .and_then(|l| l.split(' ').nth(1))
        .expect("an incr file")
        .to_string();
    dir.join("appendonlydir").join(name)
}

/// Appends `bytes` to the manifest's incr file (a test's edit of the AOF).
fn append_to_last_incr(dir: &Path, bytes: &[u8]) {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(last_incr(dir))
        .and_then(|mut f| f.write_all(bytes))
        .expect("append to the incr file");
}

/// A last incr file cut in the middle of a command: loaded up to it (and cut there)
/// with aof-load-truncated yes, refused with no, with Redis's log lines; an open
/// MULTI at the end is dropped; garbage is a format error.
#[test]
fn truncated_incr_file() {
    let dir = scratch("truncated");
    let s = start_aof(&dir, &["--appendfsync", "always"]);
    let mut c = s.client();
    let _: () = q(&mut c, &["SET", "a", "1"]);
    let _: () = q(&mut c, &["SET", "b", "2"]);
    s.signal(libc::SIGKILL);
    drop(s);
    let incr = last_incr(&dir);
    let whole = std::fs::metadata(&incr).expect("incr").len();
    append_to_last_incr(&dir, b"*3\r\n$3\r\nSET\r\n$1\r\nc\r\n$1");

    let d = dir.display().to_string();
    let args = [
        "--dir",
        d.as_str(),
        "--appendonly",
        "yes",
        "--aof-load-truncated",
        "no",
    ];
    let log = dir.join("log-refused");
    let refused = Server::start_loading(2, &args, &log, Duration::from_secs(20));
    let f = refused
        .err()
        .expect("a truncated AOF must be refused with aof-load-truncated no");
    assert!(
        f.log
            .contains("Unexpected end of file reading the append only file"),
        "{}",
        f.log
    );

    let s = start_aof(&dir, &["--aof-load-truncated", "yes"]);
    let mut c = s.client();
    let b: String = q(&mut c, &["GET", "b"]);
    assert_eq!(b, "2");
    let none: Option<String> = q(&mut c, &["GET", "c"]);
    assert_eq!(none, None);
    drop(c);
    drop(s);
    assert_eq!(std::fs::metadata(&incr).expect("incr").len(), whole);
    let logs = all_logs(&dir);
    assert!(
        logs.contains("!!! Warning: short read while loading the AOF file"),
        "{logs}"
    );
    assert!(
        logs.contains("loaded anyway because aof-load-truncated is enabled"),
        "{logs}"
    );

    // An open MULTI at the end is a short read too.
    append_to_last_incr(
        &dir,
        b"*1\r\n$5\r\nMULTI\r\n*3\r\n$3\r\nSET\r\n$1\r\nz\r\n$1\r\n9\r\n",
    );
    let s = start_aof(&dir, &[]);
    let mut c = s.client();
    let none: Option<String> = q(&mut c, &["GET", "z"]);
    assert_eq!(none, None, "a MULTI without EXEC must not apply");
    drop(c);
    drop(s);
    assert!(all_logs(&dir).contains("Revert incomplete MULTI/EXEC transaction in AOF file"));

    // Not RESP at all: refused whatever aof-load-truncated says.
    append_to_last_incr(&dir, b"+garbage\r\n");
    let log = dir.join("log-garbage");
    let f = Server::start_loading(2, &args[..4], &log, Duration::from_secs(20))
        .err()
        .expect("garbage must be refused");
    assert!(
        f.log
            .contains("Bad file format reading the append only file"),
        "{}",
        f.log
    );
}

fn all_logs(dir: &Path) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(dir).expect("dir").flatten() {
        if e.file_name().to_string_lossy().starts_with("log") {
            out += &std::fs::read_to_string(e.path()).unwrap_or_default();
        }
    }
    out
}

/// `redis-check-aof` 7.0.15 on the directory's manifest: (valid, its output); None
/// when it is not installed.
fn redis_check_aof(dir: &Path) -> Option<(bool, String)> {
    let manifest = dir.join("appendonlydir/appendonly.aof.manifest");
    let out = std::process::Command::new("redis-check-aof")
        .arg(&manifest)
        .output()
        .ok()?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Some((
        out.status.success() && text.contains("All AOF files and manifest are valid"),
        text,
    ))
}

/// Every type in small and large encodings, TTLs, several databases, a stream with a
/// group and pending entries, a function library.
fn write_dataset(c: &mut redis::Connection) {
    let _: () = q(c, &["DEBUG", "POPULATE", "2000", "key", "10"]);
    for db in ["0", "5"] {
        let _: () = q(c, &["SELECT", db]);
        let _: () = q(c, &["RPUSH", "list", "a", "b", "c"]);
        let big: Vec<String> = (0..300).map(|i| format!("e{i}")).collect();
        let mut args = vec!["RPUSH", "biglist"];
        args.extend(big.iter().map(String::as_str));
        let _: () = q(c, &args);
        let _: () = q(c, &["SADD", "set", "1", "2", "3"]);
        args[0] = "SADD";
        args[1] = "bigset";
        let _: () = q(c, &args);
        let _: () = q(c, &["ZADD", "zset", "1", "a", "2.5", "b"]);
        let mut zargs = vec!["ZADD".to_string(), "bigzset".to_string()];
        for i in 0..300 {
            zargs.push(i.to_string());
            zargs.push(format!("m{i}"));
        }
        let zrefs: Vec<&str> = zargs.iter().map(String::as_str).collect();
        let _: () = q(c, &zrefs);
        let _: () = q(c, &["HSET", "hash", "f", "v", "g", "w"]);
        let _: () = q(c, &["SET", "ttl", "x", "PX", "500000"]);
        let _: () = q(c, &["PFADD", "hll", "a", "b", "c"]);
        let _: String = q(c, &["XADD", "stream", "1-1", "f", "v"]);
        let _: String = q(c, &["XADD", "stream", "2-1", "f", "w"]);
        let _: () = q(c, &["XGROUP", "CREATE", "stream", "g", "0"]);
        let _: redis::Value = q(
            c,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "alice",
                "COUNT",
                "1",
                "STREAMS",
                "stream",
                ">",
            ],
        );
        let _: String = q(c, &["INCRBYFLOAT", "float", "1.5"]);
    }
    let _: () = q(c, &["SELECT", "0"]);
    let _: String = q(
        c,
        &[
            "FUNCTION",
            "LOAD",
            "#!lua name=aoflib\nredis.register_function('aofget', function(keys) return redis.call('GET', keys[1]) end)",
        ],
    );
}

/// Tessera's directory (a rewrite in the middle of the writes; its base an RDB, or
/// commands with aof-use-rdb-preamble no) passes redis-check-aof and loads in
/// redis-server 7.0.15 with the same DEBUG DIGEST.
#[test]
fn tessera_aof_loads_in_redis() {
    for preamble in ["yes", "no"] {
        let dir = scratch(&format!("to-redis-{preamble}"));
        // always: the digest taken before the SIGKILL is all in the files.
        let s = start_aof(
            &dir,
            &[
                "--enable-debug-command",
                "yes",
                "--aof-use-rdb-preamble",
                preamble,
                "--appendfsync",
                "always",
            ],
        );
        let mut c = s.client();
        write_dataset(&mut c);
        let _: String = q(&mut c, &["BGREWRITEAOF"]);
        wait_rewrite(&mut c);
        let base = if preamble == "yes" {
            "base.rdb"
        } else {
            "base.aof"
        };
        let m = std::fs::read_to_string(dir.join("appendonlydir/appendonly.aof.manifest"))
            .expect("manifest");
        assert!(m.contains(base), "{m}");
        let _: () = q(&mut c, &["SET", "after-rewrite", "1"]);
        let _: () = q(&mut c, &["SELECT", "5"]);
        let _: () = q(&mut c, &["DEL", "set"]);
        let _: () = q(&mut c, &["SELECT", "0"]);
        let digest: String = q(&mut c, &["DEBUG", "DIGEST"]);
        s.signal(libc::SIGKILL);
        drop(c);
        drop(s);
        // Tessera loads its own directory back.
        let (ours, _, _) = tessera_digest(&dir);
        assert_eq!(
            ours, digest,
            "preamble {preamble}: Tessera reloads another dataset"
        );
        let Some((ok, text)) = redis_check_aof(&dir) else {
            continue;
        };
        assert!(ok, "redis-check-aof refused Tessera's AOF:\n{text}");
        let d = dir.display().to_string();
        let args = [
            "--dir",
            d.as_str(),
            "--appendonly",
            "yes",
            "--save",
            "",
            "--enable-debug-command",
            "yes",
        ];
        let log = dir.join("redis-log");
        let Some(r) = ReferenceRedis::start_loading(&args, &log, Duration::from_secs(30)) else {
            continue;
        };
        let r = r.unwrap_or_else(|f| panic!("redis-server refused Tessera's AOF: {}", f.log));
        let mut rc = r.client();
        let theirs: String = q(&mut rc, &["DEBUG", "DIGEST"]);
        assert_eq!(
            theirs, digest,
            "preamble {preamble}: redis-server holds another dataset"
        );
    }
}

/// redis-server's directory — a base of commands (aof-use-rdb-preamble no) and one
/// of RDB — loads in Tessera with the same DEBUG DIGEST.
#[test]
fn redis_aof_loads_in_tessera() {
    for preamble in ["no", "yes"] {
        let dir = scratch(&format!("from-redis-{preamble}"));
        let d = dir.display().to_string();
        let args = [
            "--dir",
            d.as_str(),
            "--appendonly",
            "yes",
            "--aof-use-rdb-preamble",
            preamble,
            "--save",
            "",
            "--enable-debug-command",
            "yes",
        ];
        let Some(r) = ReferenceRedis::start_with(&args) else {
            return;
        };
        let mut rc = r.client();
        write_dataset(&mut rc);
        let _: String = q(&mut rc, &["BGREWRITEAOF"]);
        wait_rewrite(&mut rc);
        let _: () = q(&mut rc, &["SET", "after-rewrite", "1"]);
        let _: () = q(&mut rc, &["EXPIRE", "hash", "1000"]);
        let digest: String = q(&mut rc, &["DEBUG", "DIGEST"]);
        let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").query(&mut rc);
        drop(rc);
        drop(r);
        let (ours, _s, mut c) = tessera_digest(&dir);
        assert_eq!(
            ours, digest,
            "preamble {preamble}: Tessera holds another dataset"
        );
        let v: String = q(&mut c, &["FCALL", "aofget", "1", "after-rewrite"]);
        assert_eq!(v, "1");
    }
}

/// An old single appendonly.aof in `dir` (with and without an RDB preamble) is moved
/// into the directory as its base and loaded, as Redis 7.0 upgrades it.
#[test]
fn old_single_file_is_migrated() {
    for preamble in [false, true] {
        let dir = scratch(&format!("old-{preamble}"));
        let mut file = Vec::new();
        if preamble {
            // Tessera's own SAVE makes the RDB part.
            let d = dir.display().to_string();
            let s = Server::start_with(2, &["--dir", &d, "--save", ""]);
            let mut c = s.client();
            let _: () = q(&mut c, &["SET", "from-rdb", "r"]);
            let _: () = q(&mut c, &["SAVE"]);
            drop(c);
            drop(s);
            file = std::fs::read(dir.join("dump.rdb")).expect("dump.rdb");
            std::fs::remove_file(dir.join("dump.rdb")).expect("rm dump.rdb");
        }
        file.extend_from_slice(
            b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*3\r\n$3\r\nSET\r\n$3\r\nold\r\n$1\r\n1\r\n",
        );
        std::fs::write(dir.join("appendonly.aof"), &file).expect("old file");
        let s = start_aof(&dir, &[]);
        let mut c = s.client();
        let v: String = q(&mut c, &["GET", "old"]);
        assert_eq!(v, "1");
        if preamble {
            let v: String = q(&mut c, &["GET", "from-rdb"]);
            assert_eq!(v, "r");
        }
        drop(c);
        drop(s);
        assert!(!dir.join("appendonly.aof").exists());
        assert!(dir.join("appendonlydir/appendonly.aof").exists());
        let logs = all_logs(&dir);
        assert!(
            logs.contains("Successfully migrated an old-style AOF file (appendonly.aof) into the AOF directory (appendonlydir)."),
            "{logs}"
        );
    }
}

/// CONFIG SET appendonly yes at run time writes a base of what is there and logs from
/// then on; no stops it; the files are what a restart loads.
#[test]
fn appendonly_at_run_time() {
    let dir = scratch("runtime");
    let d = dir.display().to_string();
    let s = Server::start_with(2, &["--dir", &d, "--save", ""]);
    let mut c = s.client();
    let _: () = q(&mut c, &["SET", "before", "1"]);
    assert_eq!(info_field(&mut c, "aof_enabled"), "0");
    let _: () = q(&mut c, &["CONFIG", "SET", "appendonly", "yes"]);
    assert_eq!(info_field(&mut c, "aof_enabled"), "1");
    wait_rewrite(&mut c);
    let _: () = q(&mut c, &["SET", "after", "2"]);
    let _: () = q(&mut c, &["CONFIG", "SET", "appendonly", "no"]);
    assert_eq!(info_field(&mut c, "aof_enabled"), "0");
    let _: () = q(&mut c, &["SET", "not-logged", "3"]);
    s.signal(libc::SIGKILL);
    drop(c);
    drop(s);
    let s = start_aof(&dir, &[]);
    let mut c = s.client();
    let got: Vec<Option<String>> = q(&mut c, &["MGET", "before", "after", "not-logged"]);
    assert_eq!(got, [Some("1".into()), Some("2".into()), None]);
}

/// SHUTDOWN while the first rewrite after CONFIG SET appendonly yes runs is refused
/// (what was written since is only in that rewrite's files), unless FORCE, as Redis.
#[test]
fn shutdown_waits_for_the_initial_aof() {
    let dir = scratch("initial");
    let d = dir.display().to_string();
    let log = dir.join("log-initial");
    let args = [
        "--dir",
        d.as_str(),
        "--save",
        "",
        "--rdb-key-save-delay",
        "100000",
    ];
    let mut s = Server::start_logged_with(2, &args, &log);
    let mut c = s.client();
    let _: () = q(&mut c, &["SET", "k", "v"]);
    let _: () = q(&mut c, &["CONFIG", "SET", "appendonly", "yes"]);
    assert_eq!(info_field(&mut c, "aof_rewrite_in_progress"), "1");
    let e = err(&mut c, &["SHUTDOWN", "NOSAVE"]);
    assert!(e.contains("Errors trying to SHUTDOWN"), "{e}");
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(text.contains("Writing initial AOF, can't exit."), "{text}");
    // appendonly no gives the first rewrite up and removes its temporary file.
    let _: () = q(&mut c, &["CONFIG", "SET", "appendonly", "no"]);
    wait_until("the rewrite given up", Duration::from_secs(10), || {
        info_field(&mut c, "aof_rewrite_in_progress") == "0"
    });
    assert!(!dir.join("appendonlydir/temp-appendonly.aof.incr").exists());
    let _: () = q(&mut c, &["CONFIG", "SET", "appendonly", "yes"]);
    let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").arg("FORCE").query(&mut c);
    assert!(
        s.wait_exit(Duration::from_secs(10)).is_some(),
        "SHUTDOWN FORCE exits"
    );
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(text.contains("Writing initial AOF. Exit anyway."), "{text}");
}

/// Automatic rewrites: past auto-aof-rewrite-min-size and the growth percentage the
/// AOF is rewritten without being asked, and the dataset survives a kill after it.
#[test]
fn automatic_rewrite() {
    let dir = scratch("auto");
    let s = start_aof(
        &dir,
        &[
            "--auto-aof-rewrite-min-size",
            "65536",
            "--auto-aof-rewrite-percentage",
            "50",
        ],
    );
    let mut c = s.client();
    let value = "v".repeat(200);
    let rewrites = |c: &mut redis::Connection| -> u64 {
        info_field(c, "aof_rewrites").parse().expect("aof_rewrites")
    };
    // Each round logs ~460 KB; the base it grows from is what the AOF held when the
    // last rewrite ended (Redis's aof_rewrite_base_size), so each round triggers one.
    for round in 1..=2u64 {
        for i in 0..2000 {
            let _: () = q(&mut c, &["SET", &format!("k{}", i % 100), &value]);
        }
        wait_until("an automatic rewrite", Duration::from_secs(20), || {
            rewrites(&mut c) >= round && info_field(&mut c, "aof_rewrite_in_progress") == "0"
        });
    }
    s.signal(libc::SIGKILL);
    drop(c);
    drop(s);
    let s = start_aof(&dir, &[]);
    let mut c = s.client();
    let n: i64 = q(&mut c, &["DBSIZE"]);
    assert_eq!(n, 100);
}

/// A disk that refuses the AOF's writes (RLIMIT_FSIZE via prlimit) makes writes fail
/// with Redis's -MISCONF and INFO say so; once it has room again writes go on, and
/// nothing acknowledged is lost.
#[test]
fn write_error_refuses_writes_until_the_disk_has_room() {
    let dir = scratch("full");
    let s = start_aof(&dir, &["--appendfsync", "everysec"]);
    let mut c = s.client();
    let _: () = q(&mut c, &["SET", "first", "1"]);
    let set_fsize = |bytes: u64| set_file_size_limit(s.pid(), bytes);
    let size = std::fs::metadata(last_incr(&dir)).expect("incr").len();
    set_fsize(size + 4096);
    let value = "x".repeat(1024);
    let mut refused = None;
    for i in 0..200 {
        match redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(&value)
            .query::<()>(&mut c)
        {
            Ok(()) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => {
                refused = Some(e.to_string());
                break;
            }
        }
    }
    let refused = refused.expect("writes must be refused once the AOF cannot be written");
    assert!(
        refused.contains("Errors writing to the AOF file: File too large"),
        "{refused}"
    );
    assert_eq!(info_field(&mut c, "aof_last_write_status"), "err");
    set_fsize(libc::RLIM_INFINITY);
    wait_until("writes accepted again", Duration::from_secs(5), || {
        redis::cmd("SET")
            .arg("again")
            .arg("1")
            .query::<()>(&mut c)
            .is_ok()
    });
    assert_eq!(info_field(&mut c, "aof_last_write_status"), "ok");
    let written: i64 = q(&mut c, &["DBSIZE"]);
    // everysec writes what the stream has every millisecond: a SIGKILL right after a
    // reply may lose that millisecond (README, "The append-only file").
    std::thread::sleep(Duration::from_millis(300));
    s.signal(libc::SIGKILL);
    drop(c);
    drop(s);
    let s = start_aof(&dir, &[]);
    let mut c = s.client();
    let n: i64 = q(&mut c, &["DBSIZE"]);
    assert_eq!(n, written, "acknowledged writes were lost");
}

/// BGREWRITEAOF's replies and INFO as Redis has them.
#[test]
fn bgrewriteaof_replies() {
    let dir = scratch("replies");
    let d = dir.display().to_string();
    let s = Server::start_with(
        2,
        &["--dir", &d, "--save", "", "--rdb-key-save-delay", "1000"],
    );
    let mut c = s.client();
    let _: () = q(&mut c, &["DEBUG", "POPULATE", "1000"]);
    let started: String = q(&mut c, &["BGREWRITEAOF"]);
    assert_eq!(started, "Background append only file rewriting started");
    assert_eq!(info_field(&mut c, "aof_rewrite_in_progress"), "1");
    assert_eq!(info_field(&mut c, "rdb_bgsave_in_progress"), "0");
    let e = err(&mut c, &["BGREWRITEAOF"]);
    assert!(
        e.contains("Background append only file rewriting already in progress"),
        "{e}"
    );
    let e = err(&mut c, &["BGSAVE"]);
    assert!(e.contains("Another child process is active (AOF?): can't BGSAVE right now. Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible."), "{e}");
    let sched: String = q(&mut c, &["BGSAVE", "SCHEDULE"]);
    assert_eq!(sched, "Background saving scheduled");
    let _: () = q(&mut c, &["CONFIG", "SET", "rdb-key-save-delay", "0"]);
    wait_rewrite(&mut c);
    assert_eq!(info_field(&mut c, "aof_last_bgrewrite_status"), "ok");
    assert_eq!(info_field(&mut c, "aof_rewrites"), "1");
    // With the AOF off the rewrite leaves a base and a manifest (Redis 7.0 does too).
    let m = std::fs::read_to_string(dir.join("appendonlydir/appendonly.aof.manifest"))
        .expect("manifest");
    assert_eq!(m, "file appendonly.aof.1.base.rdb seq 1 type b\n");
}

/// A command of the file that fails when replayed (here an INCR of a string the
/// file never had: edited in) is logged as Redis logs it; with
/// propagation-error-behavior panic the server stops instead of diverging.
#[test]
fn a_command_failing_at_load_is_logged_and_may_stop_the_server() {
    let dir = scratch("load-error");
    let s = start_aof(&dir, &["--appendfsync", "always"]);
    let mut c = s.client();
    let _: () = q(&mut c, &["SET", "k", "text"]);
    s.signal(libc::SIGKILL);
    drop(s);
    append_to_last_incr(&dir, b"*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n");
    let s = start_aof(&dir, &[]);
    let mut c = s.client();
    let v: String = q(&mut c, &["GET", "k"]);
    assert_eq!(v, "text");
    assert!(
        all_logs(&dir).contains("== CRITICAL == This server is sending an error to its AOF-loading-client: 'ERR value is not an integer or out of range' after processing the command 'incr'"),
        "{}",
        all_logs(&dir)
    );
    s.signal(libc::SIGKILL);
    drop(s);
    let d = dir.display().to_string();
    let args = [
        "--dir",
        d.as_str(),
        "--appendonly",
        "yes",
        "--propagation-error-behavior",
        "panic",
    ];
    let log = dir.join("log-panic");
    let refused = Server::start_loading(2, &args, &log, Duration::from_secs(20));
    assert!(refused.is_err(), "the server started");
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(
        text.contains("This server panicked sending an error to its AOF-loading-client after processing the command 'incr'"),
        "{text}"
    );
}

#[test]
fn appendonly_turned_on_inside_a_transaction_starts_after_it() {
    let dir = scratch("multi-on");
    let d = dir.display().to_string();
    let s = Server::start_with(2, &["--dir", &d, "--save", ""]);
    let mut c = s.client();
    let t0 = Instant::now();
    let replies: Vec<redis::Value> = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("k")
        .arg("v")
        .cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut c)
        .expect("EXEC");
    // The first rewrite's cut needs the shards this EXEC holds: it must not wait.
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(replies.len(), 2);
    wait_until("the AOF on", Duration::from_secs(30), || {
        info_field(&mut c, "aof_enabled") == "1"
            && info_field(&mut c, "aof_rewrite_in_progress") == "0"
    });
    drop(s);
    let s = start_aof(&dir, &[]);
    let mut c = s.client();
    let v: String = q(&mut c, &["GET", "k"]);
    assert_eq!(v, "v");
}

/// A write sent the moment a fresh server with the AOF on accepts connections is
/// either refused (-LOADING, while the AOF is still being created) or in the AOF:
/// after kill -9 and a restart it is there. (Once, shards answered before the AOF was
/// open, and such a write was acknowledged and lost.)
#[test]
fn a_write_acknowledged_at_start_is_in_the_aof() {
    use std::io::{Read, Write};
    for round in 0..5 {
        let dir = scratch(&format!("first-write-{round}"));
        let port = free_port();
        let d = dir.display().to_string();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["--port", &port.to_string(), "--threads", "2", "--dir", &d])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn tessera");
        let started = Instant::now();
        let acknowledged = loop {
            assert!(started.elapsed() < Duration::from_secs(20), "no +OK to SET");
            let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
                continue;
            };
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            if s.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n")
                .is_err()
            {
                continue;
            }
            let mut reply = [0u8; 64];
            match s.read(&mut reply) {
                Ok(n) if reply[..n].starts_with(b"+OK") => break true,
                Ok(n) if reply[..n].starts_with(b"-LOADING") => continue,
                other => panic!("unexpected reply to SET at start: {other:?}"),
            }
        };
        assert!(acknowledged);
        let _ = child.kill();
        let _ = child.wait();
        let s = start_aof(&dir, &[]);
        let mut c = s.client();
        let v: Option<String> = q(&mut c, &["GET", "k"]);
        assert_eq!(
            v.as_deref(),
            Some("v"),
            "round {round}: the acknowledged SET is lost"
        );
    }
}

/// An approximate trim that LIMIT stopped is logged as the exact trim it amounted to
/// (`MAXLEN = 71 LIMIT 30`, `MINID = <first id> LIMIT 30`), which the loader obeys
/// in full: Redis's stream.tcl "XADD with ~ MAXLEN / MINID and LIMIT can propagate
/// correctly". A client sending LIMIT without `~` still gets the syntax error.
#[test]
fn limited_approximate_trim_reloads_to_the_same_length() {
    let dir = scratch("xadd-limit");
    let s = start_aof(
        &dir,
        &[
            "--enable-debug-command",
            "yes",
            "--stream-node-max-entries",
            "10",
        ],
    );
    let mut c = s.client();
    for (key, rule) in [("byLen", "MAXLEN"), ("byId", "MINID")] {
        let _: () = q(&mut c, &["CONFIG", "SET", "stream-node-max-entries", "10"]);
        for j in 1..=100 {
            let id = format!("{j}-0");
            let _: String = q(&mut c, &["XADD", key, &id, "f", "v"]);
        }
        let _: String = q(
            &mut c,
            &["XADD", key, rule, "~", "55", "LIMIT", "30", "*", "f", "v"],
        );
        let len: i64 = q(&mut c, &["XLEN", key]);
        assert_eq!(len, 71, "{rule}");
        let _: () = q(&mut c, &["CONFIG", "SET", "stream-node-max-entries", "1"]);
        let _: () = q(&mut c, &["DEBUG", "LOADAOF"]);
        let len: i64 = q(&mut c, &["XLEN", key]);
        assert_eq!(len, 71, "{rule} after DEBUG LOADAOF");
        let err: redis::RedisResult<i64> = redis::cmd("XTRIM")
            .arg(&[key, rule, "=", "1", "LIMIT", "30"])
            .query(&mut c);
        let msg = format!("{:?}", err.expect_err("LIMIT without ~"));
        assert!(
            msg.contains("LIMIT cannot be used without the special ~ option"),
            "{msg}"
        );
    }
}
