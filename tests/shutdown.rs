//! Orderly shutdown as Redis 7.0 does it: SHUTDOWN and SIGTERM / SIGINT save the
//! dataset when save points are set (or SAVE asks), a failed save keeps the server
//! running unless FORCE, and FLUSHALL with save points saves the emptied dataset.
//! Every file is checked by loading it into a real redis-server 7.0.15 when one is
//! installed.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{q, ReferenceRedis, Server, KEY_SHARD0, KEY_SHARD1};

/// A fresh scratch directory for one test's `dir`.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-shutdown-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// `tessera --threads 2 --dir DIR` plus `extra`, logging to DIR/log.
fn start_in(dir: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["--dir", dir.to_str().expect("utf-8 dir")];
    args.extend_from_slice(extra);
    Server::start_logged_with(2, &args, &dir.join("log"))
}

/// Writes keys of several types on both shards; returns the string keys and values.
fn fill(s: &Server) -> Vec<(String, String)> {
    let mut c = s.client();
    let mut written = Vec::new();
    for i in 0..200 {
        let (k, v) = (format!("key:{i}"), format!("value-{i}"));
        let _: () = q(&mut c, &["SET", &k, &v]);
        written.push((k, v));
    }
    for k in [KEY_SHARD0, KEY_SHARD1] {
        let _: () = q(&mut c, &["SET", k, &format!("on-{k}")]);
        written.push((k.to_string(), format!("on-{k}")));
    }
    let _: i64 = q(&mut c, &["HSET", "hash", "f1", "v1", "f2", "v2"]);
    let _: i64 = q(&mut c, &["RPUSH", "list", "a", "b", "c"]);
    let _: () = q(&mut c, &["SET", "volatile", "v", "EX", "1000"]);
    written
}

/// Sends SHUTDOWN with `args`; the server must close the connection without a reply.
fn shutdown_and_exit(s: &mut Server, args: &[&str]) {
    let mut c = s.client();
    let mut cmd = redis::cmd("SHUTDOWN");
    for a in args {
        cmd.arg(*a);
    }
    let got = cmd.query::<redis::Value>(&mut c);
    assert!(got.is_err(), "SHUTDOWN {args:?} replied {got:?}");
    assert_eq!(s.wait_exit(Duration::from_secs(10)), Some(0), "exit code");
}

/// The first reply line to an inline command, on a fresh connection.
fn reply_line(s: &Server, line: &str) -> String {
    let mut conn = s.raw();
    conn.write_all(format!("{line}\r\n").as_bytes())
        .expect("write");
    let reply = common::read_until_contains(&mut conn, b"\r\n");
    String::from_utf8_lossy(&reply).into_owned()
}

fn log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("log")).unwrap_or_default()
}

/// The lines of the log that contain one of `wanted`, in order, must be `wanted`.
fn assert_log_order(dir: &Path, wanted: &[&str]) {
    let text = log(dir);
    let seen: Vec<&str> = text
        .lines()
        .filter_map(|l| wanted.iter().copied().find(|w| l.ends_with(w)))
        .collect();
    assert_eq!(seen, wanted, "{text}");
}

/// dump.rdb in `dir` is an RDB file that redis-server 7.0.15 loads with every key.
fn assert_redis_loads(dir: &Path, written: &[(String, String)]) {
    let bytes = std::fs::read(dir.join("dump.rdb")).expect("dump.rdb written");
    assert!(bytes.starts_with(b"REDIS0010"), "not an RDB v10 file");
    let d = dir.to_str().expect("utf-8 dir");
    let Some(redis) = ReferenceRedis::start_with(&["--dir", d, "--dbfilename", "dump.rdb"]) else {
        eprintln!("redis-server not installed: load check skipped");
        return;
    };
    let mut c = redis.client();
    for (k, v) in written {
        let got: Option<String> = q(&mut c, &["GET", k]);
        assert_eq!(got.as_deref(), Some(v.as_str()), "key {k}");
    }
    let hash: Vec<String> = q(&mut c, &["HMGET", "hash", "f1", "f2"]);
    assert_eq!(hash, ["v1", "v2"]);
    let list: Vec<String> = q(&mut c, &["LRANGE", "list", "0", "-1"]);
    assert_eq!(list, ["a", "b", "c"]);
    let ttl: i64 = q(&mut c, &["TTL", "volatile"]);
    assert!(ttl > 900 && ttl <= 1000, "ttl {ttl}");
    let size: usize = q(&mut c, &["DBSIZE"]);
    assert_eq!(size, written.len() + 3);
}

#[test]
fn shutdown_saves_both_shards_in_redis_order() {
    let dir = scratch_dir("command");
    let pidfile = dir.join("redis.pid");
    let mut s = start_in(&dir, &["--pidfile", pidfile.to_str().unwrap()]);
    let written = fill(&s);
    shutdown_and_exit(&mut s, &[]);
    assert_log_order(
        &dir,
        &[
            "User requested shutdown...",
            "Saving the final RDB snapshot before exiting.",
            "DB saved on disk",
            "Removing the pid file.",
            "Redis is now ready to exit, bye bye...",
        ],
    );
    assert!(!pidfile.exists(), "pid file removed");
    assert_redis_loads(&dir, &written);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_saves_and_exits() {
    let dir = scratch_dir("sigterm");
    let mut s = start_in(&dir, &[]);
    let written = fill(&s);
    s.signal(libc::SIGTERM);
    assert_eq!(s.wait_exit(Duration::from_secs(10)), Some(0), "exit code");
    assert_log_order(
        &dir,
        &[
            "Received SIGTERM scheduling shutdown...",
            "User requested shutdown...",
            "Saving the final RDB snapshot before exiting.",
            "DB saved on disk",
            "Redis is now ready to exit, bye bye...",
        ],
    );
    assert_redis_loads(&dir, &written);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shutdown_nosave_writes_nothing() {
    let dir = scratch_dir("nosave");
    let mut s = start_in(&dir, &[]);
    fill(&s);
    shutdown_and_exit(&mut s, &["NOSAVE"]);
    assert!(!dir.join("dump.rdb").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_without_save_points_writes_nothing() {
    let dir = scratch_dir("nosavepoints");
    let mut s = start_in(&dir, &["--save", ""]);
    fill(&s);
    s.signal(libc::SIGTERM);
    assert_eq!(s.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(!dir.join("dump.rdb").exists());
    assert!(!log(&dir).contains("Saving the final RDB snapshot"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shutdown_save_saves_without_save_points() {
    let dir = scratch_dir("save");
    let mut s = start_in(&dir, &["--save", ""]);
    let written = fill(&s);
    shutdown_and_exit(&mut s, &["SAVE", "NOW"]);
    assert_redis_loads(&dir, &written);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn signal_flags_come_from_shutdown_on_sig_config() {
    let dir = scratch_dir("sigflags");
    // No save points, but SIGINT is told to save.
    let mut s = start_in(&dir, &["--save", "", "--shutdown-on-sigint", "save"]);
    let written = fill(&s);
    s.signal(libc::SIGINT);
    assert_eq!(s.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(log(&dir).contains("Received SIGINT scheduling shutdown..."));
    assert_redis_loads(&dir, &written);
    std::fs::remove_file(dir.join("dump.rdb")).expect("rm");

    // Save points, but SIGTERM is told not to save (set at run time).
    let mut s = start_in(&dir, &[]);
    fill(&s);
    let mut c = s.client();
    let _: () = q(
        &mut c,
        &["CONFIG", "SET", "shutdown-on-sigterm", "nosave now"],
    );
    s.signal(libc::SIGTERM);
    assert_eq!(s.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(!dir.join("dump.rdb").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A save that cannot finish as root: `dump.rdb` is a non-empty directory, so the
/// rename of the temporary file onto it fails.
fn block_dump_rdb(dir: &Path) {
    std::fs::create_dir_all(dir.join("dump.rdb").join("inside")).expect("mkdir");
}

#[test]
fn failed_save_keeps_serving_until_force() {
    let dir = scratch_dir("failed");
    let mut s = start_in(&dir, &[]);
    fill(&s);
    block_dump_rdb(&dir);
    let mut c = s.client();
    assert_eq!(
        reply_line(&s, "SHUTDOWN"),
        "-ERR Errors trying to SHUTDOWN. Check logs.\r\n"
    );
    let pong: String = q(&mut c, &["PING"]);
    assert_eq!(pong, "PONG");
    assert!(log(&dir).contains("Error trying to save the DB, can't exit."));
    // The temporary file is gone, and no ABORT is pending.
    assert!(!dir.join(format!("temp-{}.rdb", s_pid(&dir))).exists());
    assert_eq!(
        reply_line(&s, "SHUTDOWN ABORT"),
        "-ERR No shutdown in progress.\r\n"
    );

    // A signal's shutdown fails the same way, and the server keeps running.
    s.signal(libc::SIGTERM);
    wait_log(
        &dir,
        "Errors trying to shut down the server. Check the logs",
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(s.is_running());
    let pong: String = q(&mut c, &["PING"]);
    assert_eq!(pong, "PONG");
    // The request was cancelled: a SIGINT now is a new request, not "You insist".
    s.signal(libc::SIGINT);
    wait_log(&dir, "Received SIGINT scheduling shutdown...");
    std::thread::sleep(Duration::from_millis(300));
    assert!(s.is_running(), "{}", log(&dir));
    assert!(!log(&dir).contains("You insist"));

    shutdown_and_exit(&mut s, &["FORCE"]);
    assert!(log(&dir).contains("Error trying to save the DB. Exit anyway."));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The pid in the log's lines ("PID:NN:M ...").
fn s_pid(dir: &Path) -> String {
    log(dir)
        .lines()
        .find_map(|l| l.split(':').next().map(str::to_string))
        .unwrap_or_default()
}

fn wait_log(dir: &Path, needle: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !log(dir).contains(needle) {
        assert!(
            std::time::Instant::now() < deadline,
            "no {needle:?} in {}",
            log(dir)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn second_sigint_exits_at_once_and_removes_the_temp_file() {
    let dir = scratch_dir("insist");
    let mut s = start_in(&dir, &[]);
    fill(&s);
    let mut c = s.client();
    // 100 ms per key: the final save takes tens of seconds.
    let _: () = q(&mut c, &["CONFIG", "SET", "rdb-key-save-delay", "100000"]);
    s.signal(libc::SIGINT);
    wait_log(&dir, "Saving the final RDB snapshot before exiting.");
    let temp = dir.join(format!("temp-{}.rdb", s_pid(&dir)));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !temp.exists() {
        assert!(std::time::Instant::now() < deadline, "no {temp:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    s.signal(libc::SIGINT);
    assert_eq!(s.wait_exit(Duration::from_secs(5)), Some(1), "exit code");
    assert!(log(&dir).contains("You insist... exiting now."));
    assert!(!temp.exists(), "temp file removed");
    assert!(!dir.join("dump.rdb").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shutdown_arguments_as_redis() {
    let dir = scratch_dir("syntax");
    let mut s = start_in(&dir, &["--save", ""]);
    let mut c = s.client();
    for line in [
        "SHUTDOWN NOSAVE SAVE",
        "SHUTDOWN ABORT NOW",
        "SHUTDOWN FORCE ABORT",
        "SHUTDOWN SOON",
    ] {
        assert_eq!(reply_line(&s, line), "-ERR syntax error\r\n", "{line}");
    }
    assert_eq!(
        reply_line(&s, "SHUTDOWN abort"),
        "-ERR No shutdown in progress.\r\n"
    );
    let pong: String = q(&mut c, &["PING"]);
    assert_eq!(pong, "PONG");
    shutdown_and_exit(&mut s, &["now", "force", "nosave"]);
    let _ = std::fs::remove_dir_all(&dir);
}

fn dirty(c: &mut redis::Connection) -> u64 {
    let info: String = q(c, &["INFO", "persistence"]);
    info.lines()
        .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("rdb_changes_since_last_save")
}

#[test]
fn flushall_saves_when_save_points_are_set() {
    let dir = scratch_dir("flushall");
    let s = start_in(&dir, &[]);
    fill(&s);
    let mut c = s.client();
    assert!(dirty(&mut c) > 0);
    let _: () = q(&mut c, &["FLUSHALL"]);
    assert_eq!(dirty(&mut c), 0);
    let bytes = std::fs::read(dir.join("dump.rdb")).expect("dump.rdb");
    assert!(bytes.starts_with(b"REDIS0010"));
    // Inside a transaction and a script, whose locks the save shares.
    let _: () = q(&mut c, &["SET", "a", "1"]);
    let _: () = q(&mut c, &["MULTI"]);
    let _: String = q(&mut c, &["SET", "b", "2"]);
    let _: String = q(&mut c, &["FLUSHALL"]);
    let _: Vec<String> = q(&mut c, &["EXEC"]);
    assert_eq!(dirty(&mut c), 0);
    let _: () = q(&mut c, &["SET", "a", "1"]);
    let _: String = q(&mut c, &["EVAL", "return redis.call('flushall')", "0"]);
    assert_eq!(dirty(&mut c), 0);
    let size: usize = q(&mut c, &["DBSIZE"]);
    assert_eq!(size, 0);
    if let Some(redis) =
        ReferenceRedis::start_with(&["--dir", dir.to_str().unwrap(), "--dbfilename", "dump.rdb"])
    {
        let size: usize = q(&mut redis.client(), &["DBSIZE"]);
        assert_eq!(size, 0);
    }
    drop(s);

    // Without save points it only empties: the removed keys stay counted.
    let _ = std::fs::remove_file(dir.join("dump.rdb"));
    let s = start_in(&dir, &["--save", ""]);
    fill(&s);
    let mut c = s.client();
    let _: () = q(&mut c, &["FLUSHALL"]);
    assert!(dirty(&mut c) > 0);
    assert!(!dir.join("dump.rdb").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
