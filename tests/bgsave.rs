//! BGSAVE without fork, black-box: the file a background save writes is the dataset
//! at the instant of its cut, whatever clients write meanwhile on every shard; a
//! transaction or multi-key command across shards is in it whole or not at all; a
//! save point fires while the server runs; a failed save refuses writes with -MISCONF
//! until a save succeeds. Files are checked by loading them in redis-server 7.0.15
//! where it is installed (DEBUG DIGEST equal), else in a fresh Tessera.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;

fn scratch(name: &str) -> PathBuf {
    scratch_dir("bgsave", name)
}

fn info_field(c: &mut redis::Connection, field: &str) -> String {
    persistence_field(c, field)
}

fn wait_for_bgsave(c: &mut redis::Connection, within: Duration) {
    let deadline = Instant::now() + within;
    while info_field(c, "rdb_bgsave_in_progress") == "1" {
        assert!(
            Instant::now() < deadline,
            "BGSAVE did not finish in {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The DEBUG DIGEST of `dir/dump.rdb` loaded by redis-server (or by Tessera when
/// redis-server is not installed), and a client to it.
fn load_elsewhere(dir: &Path, name: &str) -> (String, Box<dyn std::any::Any>, redis::Connection) {
    let copy = scratch(name);
    std::fs::copy(dir.join("dump.rdb"), copy.join("dump.rdb")).expect("copy dump.rdb");
    let d = copy.display().to_string();
    let args = [
        "--dir",
        d.as_str(),
        "--save",
        "",
        "--enable-debug-command",
        "yes",
    ];
    let log = copy.join("log");
    if let Some(started) = ReferenceRedis::start_loading(&args, &log, Duration::from_secs(30)) {
        let r = started.unwrap_or_else(|f| panic!("redis-server refused the file: {}", f.log));
        let mut c = r.client();
        let digest: String = q(&mut c, &["DEBUG", "DIGEST"]);
        return (digest, Box::new(r), c);
    }
    let s = Server::start_loading(2, &args, &log, Duration::from_secs(30))
        .unwrap_or_else(|f| panic!("tessera refused the file: {}", f.log));
    let mut c = s.client();
    let digest: String = q(&mut c, &["DEBUG", "DIGEST"]);
    (digest, Box::new(s), c)
}

/// Clients keep writing to keys the walk has and has not reached — overwrites,
/// deletes, new keys, in-place changes, TTLs, on both shards — while a slow walk runs;
/// the file holds exactly what was there at the cut.
#[test]
fn file_is_the_dataset_at_the_cut() {
    let dir = scratch("cut");
    let d = dir.display().to_string();
    let s = Server::start_with(2, &["--dir", &d, "--save", ""]);
    let mut c = s.client();
    let _: () = q(&mut c, &["DEBUG", "POPULATE", "20000", "key", "12"]);
    for i in 0..200 {
        let list = format!("list:{i}");
        let _: i64 = q(&mut c, &["RPUSH", &list, "a", "b", "c"]);
        let hash = format!("hash:{i}");
        let _: i64 = q(&mut c, &["HSET", &hash, "f", "1", "g", "2"]);
    }
    let _: bool = q(&mut c, &["EXPIRE", "key:7", "1000"]);
    let at_cut: String = q(&mut c, &["DEBUG", "DIGEST"]);
    // 20 µs a key: the walks take ~0.2 s, the writers below run through them.
    let _: () = q(&mut c, &["CONFIG", "SET", "rdb-key-save-delay", "20"]);
    let started: String = q(&mut c, &["BGSAVE"]);
    assert_eq!(started, "Background saving started");
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let mut c = s.client();
            std::thread::spawn(move || {
                let mut n = 0u64;
                let deadline = Instant::now() + Duration::from_secs(20);
                while Instant::now() < deadline {
                    let i = (n * 7919 + w * 104_729) % 20_000;
                    let key = format!("key:{i}");
                    match n % 6 {
                        0 => {
                            let _: () = q(&mut c, &["SET", &key, "changed"]);
                        }
                        1 => {
                            let _: i64 = q(&mut c, &["DEL", &key]);
                        }
                        2 => {
                            let _: i64 = q(&mut c, &["APPEND", &key, "+"]);
                        }
                        3 => {
                            let _: () = q(&mut c, &["SET", &format!("new:{w}:{n}"), "x"]);
                        }
                        4 => {
                            let _: i64 = q(&mut c, &["RPUSH", &format!("list:{}", i % 200), "d"]);
                        }
                        _ => {
                            let _: bool = q(&mut c, &["EXPIRE", &key, "500"]);
                        }
                    }
                    n += 1;
                    if n.is_multiple_of(64) && info_field(&mut c, "rdb_bgsave_in_progress") == "0" {
                        break;
                    }
                }
                n
            })
        })
        .collect();
    wait_for_bgsave(&mut c, Duration::from_secs(30));
    let writes: u64 = writers.into_iter().map(|t| t.join().expect("writer")).sum();
    assert!(writes > 500, "only {writes} writes ran during the save");
    assert_eq!(info_field(&mut c, "rdb_last_bgsave_status"), "ok");
    let ahead: u64 = info_field(&mut c, "rdb_last_cow_size")
        .parse()
        .expect("number");
    assert!(ahead > 0, "no write saved a key ahead of the walk");
    let (loaded, _server, _c) = load_elsewhere(&dir, "cut-load");
    assert_eq!(loaded, at_cut, "the file is not the dataset at the cut");
}

/// MULTI/EXEC and MSET across both shards, running while BGSAVE cuts: in the file,
/// every pair written together holds the same number.
#[test]
fn transactions_across_shards_are_whole_in_the_file() {
    let dir = scratch("atomic");
    let d = dir.display().to_string();
    let s = Server::start_with(2, &["--dir", &d, "--save", ""]);
    let mut c = s.client();
    // {a} and {b} hash to slots 15495 and 3300: one on each of the two shards.
    let pairs: Vec<(String, String)> = (0..20)
        .map(|i| (format!("{{a}}x{i}"), format!("{{b}}y{i}")))
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let mut c = s.client();
            let pairs = pairs.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let (x, y) = &pairs[((n + w) % 20) as usize];
                    let v = format!("{w}:{n}");
                    if n.is_multiple_of(2) {
                        let _: () = redis::pipe()
                            .atomic()
                            .cmd("SET")
                            .arg(x)
                            .arg(&v)
                            .ignore()
                            .cmd("SET")
                            .arg(y)
                            .arg(&v)
                            .ignore()
                            .query(&mut c)
                            .expect("EXEC");
                    } else {
                        let _: () = q(&mut c, &["MSET", x, &v, y, &v]);
                    }
                    n += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    for _ in 0..5 {
        let _: String = q(&mut c, &["BGSAVE"]);
        wait_for_bgsave(&mut c, Duration::from_secs(30));
        assert_eq!(info_field(&mut c, "rdb_last_bgsave_status"), "ok");
        let (_, _server, mut loaded) = load_elsewhere(&dir, "atomic-load");
        for (x, y) in &pairs {
            let vx: Option<String> = q(&mut loaded, &["GET", x]);
            let vy: Option<String> = q(&mut loaded, &["GET", y]);
            assert_eq!(vx, vy, "{x} and {y} were written together");
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in writers {
        t.join().expect("writer");
    }
}

/// `save 1 3`: three changes and more than a second since the last save start a
/// background save on their own, logged as Redis logs it; the counter goes back to 0.
#[test]
fn save_point_fires_while_running() {
    let dir = scratch("points");
    let d = dir.display().to_string();
    let log = dir.join("log");
    let s = Server::start_logged_with(1, &["--dir", &d, "--save", "1 3"], &log);
    let mut c = s.client();
    for k in ["a", "b", "c"] {
        let _: () = q(&mut c, &["SET", k, "1"]);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dir.join("dump.rdb").exists() || info_field(&mut c, "rdb_changes_since_last_save") != "0"
    {
        assert!(Instant::now() < deadline, "no save point fired");
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(text.contains("3 changes in 1 seconds. Saving..."), "{text}");
    assert!(
        text.contains("Background saving terminated with success"),
        "{text}"
    );
    let (_, _server, mut loaded) = load_elsewhere(&dir, "points-load");
    let v: String = q(&mut loaded, &["GET", "b"]);
    assert_eq!(v, "1");
}

/// The writer process killed (as Redis's test kills the fork child): the save fails,
/// writes and PING are refused with -MISCONF while reads go on, and a save that
/// succeeds lifts it.
#[test]
fn failed_save_refuses_writes_until_one_succeeds() {
    let dir = scratch("misconf");
    let d = dir.display().to_string();
    let s = Server::start_with(2, &["--dir", &d, "--save", "3600 1"]);
    let mut c = s.client();
    let _: () = q(&mut c, &["DEBUG", "POPULATE", "100"]);
    let _: () = q(&mut c, &["SET", "x", "x"]);
    let _: () = q(&mut c, &["CONFIG", "SET", "rdb-key-save-delay", "10000000"]);
    let _: String = q(&mut c, &["BGSAVE"]);
    let child = writer_child(s.pid());
    let temp = wait_for_temp_file(&dir, child);
    // SAFETY: kill(2) on the server's writer child, as Redis's test kills its fork.
    unsafe { libc::kill(child as i32, libc::SIGKILL) };
    wait_for_bgsave(&mut c, Duration::from_secs(5));
    assert_eq!(info_field(&mut c, "rdb_last_bgsave_status"), "err");
    assert!(!temp.exists(), "the killed save's temp file is left");
    let v: String = q(&mut c, &["GET", "x"]);
    assert_eq!(v, "x");
    let e = err(&mut c, &["SET", "x", "y"]);
    assert!(e.contains("MISCONF"), "{e}");
    assert!(
        e.contains("Redis is configured to save RDB snapshots"),
        "{e}"
    );
    assert!(err(&mut c, &["PING"]).contains("MISCONF"));
    let e = err(
        &mut c,
        &["EVAL", "return redis.call('set','x',1)", "1", "x"],
    );
    assert!(e.contains("MISCONF"), "{e}");
    let _: () = q(&mut c, &["CONFIG", "SET", "rdb-key-save-delay", "0"]);
    let _: String = q(&mut c, &["BGSAVE"]);
    wait_for_bgsave(&mut c, Duration::from_secs(10));
    assert_eq!(info_field(&mut c, "rdb_last_bgsave_status"), "ok");
    let _: () = q(&mut c, &["SET", "x", "y"]);
}

/// The writer child's `temp-<pid>.rdb` in `dir`, once the child has created it.
fn wait_for_temp_file(dir: &Path, child: u32) -> PathBuf {
    let temp = dir.join(format!("temp-{child}.rdb"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !temp.exists() {
        assert!(Instant::now() < deadline, "no {}", temp.display());
        std::thread::sleep(Duration::from_millis(10));
    }
    temp
}

/// The pid of the server's writer child, waiting for it to appear.
fn writer_child(server: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{server}/task/{server}/children"))
            .unwrap_or_default();
        // The children file lists those of one thread: look in every thread's.
        let all: Vec<u32> = std::fs::read_dir(format!("/proc/{server}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .chain(std::iter::once(children))
            .flat_map(|s| {
                s.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect();
        if let Some(&pid) = all.first() {
            return pid;
        }
        assert!(Instant::now() < deadline, "no writer child appeared");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// BGSAVE's syntax and its refusals, as Redis words them.
#[test]
fn bgsave_replies_as_redis() {
    let dir = scratch("replies");
    let d = dir.display().to_string();
    let s = Server::start_with(1, &["--dir", &d, "--save", ""]);
    let mut c = s.client();
    let _: () = q(&mut c, &["DEBUG", "POPULATE", "50"]);
    // The redis crate renders errors its own way: the texts are matched inside.
    assert!(err(&mut c, &["BGSAVE", "now"]).contains("syntax error"));
    let _: () = q(&mut c, &["CONFIG", "SET", "rdb-key-save-delay", "20000"]);
    let _: String = q(&mut c, &["BGSAVE"]);
    assert_eq!(info_field(&mut c, "rdb_bgsave_in_progress"), "1");
    let busy = "Background save already in progress";
    assert!(err(&mut c, &["BGSAVE"]).contains(busy));
    assert!(err(&mut c, &["SAVE"]).contains(busy));
    // SCHEDULE waits for another kind of job (an AOF rewrite), not for a BGSAVE.
    assert!(err(&mut c, &["BGSAVE", "SCHEDULE"]).contains(busy));
    let _: () = q(&mut c, &["CONFIG", "SET", "rdb-key-save-delay", "0"]);
    wait_for_bgsave(&mut c, Duration::from_secs(10));
    // Inside EXEC it is scheduled, and runs once the transaction is over.
    let replies: Vec<String> = redis::pipe()
        .atomic()
        .cmd("BGSAVE")
        .query(&mut c)
        .expect("MULTI BGSAVE EXEC");
    assert_eq!(replies, ["Background saving scheduled"]);
    let saves = |c: &mut redis::Connection| info_field(c, "rdb_saves");
    let deadline = Instant::now() + Duration::from_secs(5);
    while saves(&mut c) != "2" {
        assert!(
            Instant::now() < deadline,
            "the scheduled BGSAVE did not run"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_for_bgsave(&mut c, Duration::from_secs(10));
    assert!(dir.join("dump.rdb").exists());
}

/// A disk that takes no more (the writer child past RLIMIT_FSIZE, whose writes then
/// fail with EFBIG as on a full disk with ENOSPC): the save fails with Redis's log
/// lines, the old file and no temporary file are left, writes are refused with
/// -MISCONF; once the disk has room again a save succeeds and writes are back.
#[test]
fn full_disk_fails_the_save_and_recovers() {
    let dir = scratch("full");
    let d = dir.display().to_string();
    let log = dir.join("log");
    let s = Server::start_logged_with(2, &["--dir", &d, "--save", "3600 1"], &log);
    let mut c = s.client();
    let _: () = q(&mut c, &["SET", "before", "1"]);
    let _: () = q(&mut c, &["SAVE"]);
    let old = std::fs::read(dir.join("dump.rdb")).expect("first dump.rdb");
    let _: () = q(&mut c, &["DEBUG", "POPULATE", "20000", "key", "100"]);
    let set_fsize = |bytes: u64| set_file_size_limit(s.pid(), bytes);
    set_fsize(64 * 1024);
    let _: String = q(&mut c, &["BGSAVE"]);
    wait_for_bgsave(&mut c, Duration::from_secs(10));
    assert_eq!(info_field(&mut c, "rdb_last_bgsave_status"), "err");
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(
        text.contains("Write error saving DB on disk: File too large"),
        "{text}"
    );
    assert!(text.contains("Background saving error"), "{text}");
    assert_eq!(std::fs::read(dir.join("dump.rdb")).expect("dump.rdb"), old);
    let temps = std::fs::read_dir(&dir)
        .expect("dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("temp-"))
        .count();
    assert_eq!(temps, 0, "a temporary file is left");
    assert!(err(&mut c, &["SET", "x", "1"]).contains("MISCONF"));
    set_fsize(libc::RLIM_INFINITY);
    let _: String = q(&mut c, &["BGSAVE"]);
    wait_for_bgsave(&mut c, Duration::from_secs(10));
    assert_eq!(info_field(&mut c, "rdb_last_bgsave_status"), "ok");
    let _: () = q(&mut c, &["SET", "x", "1"]);
    let (_, _server, mut loaded) = load_elsewhere(&dir, "full-load");
    let n: i64 = q(&mut loaded, &["DBSIZE"]);
    assert_eq!(n, 20001);
}

/// `rdbchecksum no`: the file ends with a zero checksum, which both servers load.
#[test]
fn rdbchecksum_no_writes_a_zero_checksum() {
    let dir = scratch("nocrc");
    let d = dir.display().to_string();
    let s = Server::start_with(2, &["--dir", &d, "--save", "", "--rdbchecksum", "no"]);
    let mut c = s.client();
    let _: () = q(&mut c, &["DEBUG", "POPULATE", "1000"]);
    let _: String = q(&mut c, &["BGSAVE"]);
    wait_for_bgsave(&mut c, Duration::from_secs(10));
    let file = std::fs::read(dir.join("dump.rdb")).expect("dump.rdb");
    assert_eq!(&file[file.len() - 9..], &[0xFF, 0, 0, 0, 0, 0, 0, 0, 0]);
    let (_, _server, mut loaded) = load_elsewhere(&dir, "nocrc-load");
    let n: i64 = q(&mut loaded, &["DBSIZE"]);
    assert_eq!(n, 1000);
}

/// The server killed (SIGKILL) in the middle of a save: its writer child sees the
/// pipe close before the commit, removes its temporary file and exits; the last
/// complete dump.rdb is untouched and loads.
#[test]
fn server_killed_mid_save_leaves_the_last_file() {
    let dir = scratch("killed");
    let d = dir.display().to_string();
    let mut s = Server::start_with(2, &["--dir", &d, "--save", ""]);
    let mut c = s.client();
    let _: () = q(&mut c, &["SET", "saved", "yes"]);
    let _: () = q(&mut c, &["SAVE"]);
    let old = std::fs::read(dir.join("dump.rdb")).expect("dump.rdb");
    let _: () = q(&mut c, &["DEBUG", "POPULATE", "2000"]);
    let _: () = q(&mut c, &["CONFIG", "SET", "rdb-key-save-delay", "1000"]);
    let _: String = q(&mut c, &["BGSAVE"]);
    let child = writer_child(s.pid());
    let temp = wait_for_temp_file(&dir, child);
    s.signal(libc::SIGKILL);
    s.wait_exit(Duration::from_secs(5));
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::path::Path::new(&format!("/proc/{child}")).exists() || temp.exists() {
        assert!(
            Instant::now() < deadline,
            "the writer or its temp file outlived the server"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(std::fs::read(dir.join("dump.rdb")).expect("dump.rdb"), old);
    let (_, _server, mut loaded) = load_elsewhere(&dir, "killed-load");
    let v: String = q(&mut loaded, &["GET", "saved"]);
    assert_eq!(v, "yes");
}
