//! Black-box tests of CLIENT PAUSE / UNPAUSE against a 2-shard server: which commands
//! wait in WRITE and ALL mode (scripts by their declared flags, EXEC by what it
//! queued), replies staying in order around a held command, keys neither expiring
//! nor being evicted meanwhile, and waiting clients counted as blocked.

mod common;
#[path = "common/resp.rs"]
mod resp;
use common::*;
use resp::*;

use std::io::Read;
use std::time::{Duration, Instant};

use redis::Value;

/// Whether `raw` has a reply ready within `ms` (without consuming it).
fn has_reply_within(raw: &mut Raw, ms: u64) -> bool {
    raw.s
        .set_read_timeout(Some(Duration::from_millis(ms)))
        .expect("timeout");
    let mut one = [0u8; 1];
    let ready = raw.s.peek(&mut one).is_ok_and(|n| n > 0);
    raw.s
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    ready
}

/// How long `c` took to run `args` (whose reply is not looked at).
fn time_of(c: &mut redis::Connection, args: &[&str]) -> Duration {
    let t = Instant::now();
    let _: Value = q(c, args);
    t.elapsed()
}

#[test]
fn write_pause_holds_writes_on_every_shard_and_lets_reads_through() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = q(&mut c, &["CLIENT", "PAUSE", "60000", "WRITE"]);
    let held0 = spawn_blocked(&s, &["SET", KEY_SHARD0, "v0"]).1;
    let held1 = spawn_blocked(&s, &["INCR", KEY_SHARD1]).1;
    let pub_held = spawn_blocked(&s, &["PUBLISH", "ch", "m"]).1;
    wait_blocked(&mut c, 3);
    // Reads (on either shard), PING, INFO and CLIENT itself go on.
    let got: Option<String> = q(&mut c, &["GET", KEY_SHARD0]);
    assert_eq!(got, None);
    let got: Vec<Option<String>> = q(&mut c, &["MGET", KEY_SHARD0, KEY_SHARD1]);
    assert_eq!(got, vec![None, None]);
    let list: String = q(&mut c, &["CLIENT", "LIST"]);
    assert_eq!(list.matches("flags=b").count(), 3, "{list}");
    let _: () = q(&mut c, &["CLIENT", "UNPAUSE"]);
    assert_eq!(held0.join().unwrap().unwrap(), Value::Okay);
    assert_eq!(held1.join().unwrap().unwrap(), Value::Int(1));
    assert_eq!(pub_held.join().unwrap().unwrap(), Value::Int(0));
    wait_blocked(&mut c, 0);
    let got: Vec<Option<String>> = q(&mut c, &["MGET", KEY_SHARD0, KEY_SHARD1]);
    assert_eq!(got, vec![Some("v0".into()), Some("1".into())]);
}

#[test]
fn all_pause_holds_every_command_until_it_runs_out() {
    let s = Server::start(2);
    let mut c = s.client();
    let mut other = s.client();
    let _: () = q(&mut c, &["CLIENT", "PAUSE", "400"]);
    let d = time_of(&mut other, &["PING"]);
    assert!(d >= Duration::from_millis(300), "{d:?}");
    // The pause is over: nothing waits any more.
    let d = time_of(&mut c, &["SET", "k", "v"]);
    assert!(d < Duration::from_millis(200), "{d:?}");
    // A later, shorter pause never cuts one in force short.
    let _: () = q(&mut c, &["CLIENT", "PAUSE", "400", "WRITE"]);
    let _: () = q(&mut other, &["CLIENT", "PAUSE", "1", "WRITE"]);
    let d = time_of(&mut c, &["SET", "k", "w"]);
    assert!(d >= Duration::from_millis(250), "{d:?}");
}

#[test]
fn replies_before_a_held_command_go_out_and_reply_modes_still_apply() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = q(&mut c, &["CLIENT", "PAUSE", "60000", "WRITE"]);
    let mut raw = Raw::connect(s.port);
    let mut batch = Vec::new();
    for args in [
        &[&b"GET"[..], b"a"][..],
        &[b"CLIENT", b"REPLY", b"SKIP"],
        &[b"SET", b"a", b"1"],
        &[b"PING"],
    ] {
        batch.extend_from_slice(&encode(args));
    }
    raw.send(&batch);
    // GET's reply arrives while SET waits; SET's (skipped) and PING's do not.
    assert_eq!(raw.read(), R::Nil);
    wait_blocked(&mut c, 1);
    assert!(!has_reply_within(&mut raw, 200));
    let _: () = q(&mut c, &["CLIENT", "UNPAUSE"]);
    assert_eq!(raw.read(), st("PONG"));
    let got: String = q(&mut c, &["GET", "a"]);
    assert_eq!(got, "1");
}

#[test]
fn scripts_wait_unless_they_declare_no_writes() {
    let s = Server::start(2);
    let mut c = s.client();
    let lib = "#!lua name=lib\nredis.register_function{function_name='ro', \
               callback=function() return 'ro' end, flags={'no-writes'}}\n\
               redis.register_function('rw', function() return 'rw' end)";
    let _: String = q(&mut c, &["FUNCTION", "LOAD", lib]);
    let _: () = q(&mut c, &["CLIENT", "PAUSE", "60000", "WRITE"]);
    let ro = "#!lua flags=no-writes\nreturn 1";
    let n: i64 = q(&mut c, &["EVAL", ro, "0"]);
    assert_eq!(n, 1);
    let sha: String = q(&mut c, &["SCRIPT", "LOAD", ro]);
    let n: i64 = q(&mut c, &["EVALSHA", &sha, "0"]);
    assert_eq!(n, 1);
    let n: i64 = q(&mut c, &["EVAL_RO", "return 2", "0"]);
    assert_eq!(n, 2);
    let got: String = q(&mut c, &["FCALL", "ro", "0"]);
    assert_eq!(got, "ro");
    // A read-only script may not publish: that would wait for the pause too.
    let e = err(
        &mut c,
        &[
            "EVAL",
            "#!lua flags=no-writes\nreturn redis.call('publish','ch','m')",
            "0",
        ],
    );
    assert!(
        e.contains("Write commands are not allowed from read-only scripts"),
        "{e}"
    );
    let plain = spawn_blocked(&s, &["EVAL", "return 3", "0"]).1;
    let shebang = spawn_blocked(&s, &["EVAL", "#!lua\nreturn 4", "0"]).1;
    let rw = spawn_blocked(&s, &["FCALL", "rw", "0"]).1;
    let counted = spawn_blocked(&s, &["PFCOUNT", "hll"]).1;
    wait_blocked(&mut c, 4);
    let _: () = q(&mut c, &["CLIENT", "UNPAUSE"]);
    assert_eq!(plain.join().unwrap().unwrap(), Value::Int(3));
    assert_eq!(shebang.join().unwrap().unwrap(), Value::Int(4));
    assert_eq!(
        rw.join().unwrap().unwrap(),
        Value::BulkString(b"rw".to_vec())
    );
    assert_eq!(counted.join().unwrap().unwrap(), Value::Int(0));
}

#[test]
fn exec_waits_only_for_queued_writes_and_the_pause_starts_after_it() {
    let s = Server::start(2);
    let mut c = s.client();
    let mut raw = Raw::connect(s.port);
    // CLIENT PAUSE inside a transaction: the rest of the transaction still runs.
    assert_eq!(raw.c("MULTI"), ok());
    assert_eq!(raw.c("SET bar 1"), st("QUEUED"));
    assert_eq!(raw.c("CLIENT PAUSE 60000 WRITE"), st("QUEUED"));
    assert_eq!(raw.c("SET foo 2"), st("QUEUED"));
    assert_eq!(raw.c("EXEC"), arr(vec![ok(), ok(), ok()]));
    // A read-only transaction runs at once.
    assert_eq!(raw.c("MULTI"), ok());
    assert_eq!(raw.c("MGET bar foo"), st("QUEUED"));
    assert_eq!(raw.c("EXEC"), arr(vec![arr(vec![b("1"), b("2")])]));
    // One that queued a write waits.
    assert_eq!(raw.c("MULTI"), ok());
    assert_eq!(raw.c("GET bar"), st("QUEUED"));
    let _: () = q(&mut c, &["CLIENT", "UNPAUSE"]);
    assert_eq!(raw.c("INCR bar"), st("QUEUED"));
    let _: () = q(&mut c, &["CLIENT", "PAUSE", "60000", "WRITE"]);
    raw.send(&encode(&[b"EXEC"]));
    wait_blocked(&mut c, 1);
    assert!(!has_reply_within(&mut raw, 200));
    let _: () = q(&mut c, &["CLIENT", "UNPAUSE"]);
    assert_eq!(raw.read(), arr(vec![b("1"), i(2)]));
}

#[test]
fn keys_do_not_expire_while_clients_are_paused() {
    let s = Server::start(2);
    let mut c = s.client();
    for k in [KEY_SHARD0, KEY_SHARD1] {
        let _: () = q(&mut c, &["SET", k, "v", "PX", "30"]);
    }
    let _: () = q(&mut c, &["CLIENT", "PAUSE", "60000", "WRITE"]);
    std::thread::sleep(Duration::from_millis(300));
    // Logically gone, physically still there: the active cycle and reads leave them.
    let got: Vec<Option<String>> = q(&mut c, &["MGET", KEY_SHARD0, KEY_SHARD1]);
    assert_eq!(got, vec![None, None]);
    let n: i64 = q(&mut c, &["DBSIZE"]);
    assert_eq!(n, 2);
    let info: String = q(&mut c, &["INFO", "stats"]);
    assert!(info.contains("expired_keys:0\r\n"), "{info}");
    let _: () = q(&mut c, &["CLIENT", "UNPAUSE"]);
    let got: Vec<Option<String>> = q(&mut c, &["MGET", KEY_SHARD0, KEY_SHARD1]);
    assert_eq!(got, vec![None, None]);
    let n: i64 = q(&mut c, &["DBSIZE"]);
    assert_eq!(n, 0);
    let info: String = q(&mut c, &["INFO", "stats"]);
    assert!(info.contains("expired_keys:2\r\n"), "{info}");
}

#[test]
fn a_waiting_client_that_leaves_stops_waiting() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = q(&mut c, &["CLIENT", "PAUSE", "60000", "WRITE"]);
    let mut raw = Raw::connect(s.port);
    raw.send(&encode(&[b"SET", b"gone", b"1"]));
    wait_blocked(&mut c, 1);
    drop(raw);
    wait_blocked(&mut c, 0);
    let list: String = q(&mut c, &["CLIENT", "LIST"]);
    assert_eq!(list.lines().count(), 1, "{list}");
    // A killed one too.
    let mut raw = Raw::connect(s.port);
    raw.send(&encode(&[b"SET", b"gone", b"2"]));
    wait_blocked(&mut c, 1);
    let n: i64 = q(&mut c, &["CLIENT", "KILL", "SKIPME", "yes"]);
    assert_eq!(n, 1);
    wait_blocked(&mut c, 0);
    let mut rest = Vec::new();
    let _ = raw.s.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{rest:?}");
    let _: () = q(&mut c, &["CLIENT", "UNPAUSE"]);
    let got: Option<String> = q(&mut c, &["GET", "gone"]);
    assert_eq!(got, None);
}

#[test]
fn pause_arguments_are_checked_as_redis_does() {
    let s = Server::start(2);
    let mut c = s.client();
    // The mode is checked before the timeout.
    let e = err(&mut c, &["CLIENT", "PAUSE", "abc", "sometimes"]);
    assert!(e.contains("CLIENT PAUSE mode must be WRITE or ALL"), "{e}");
    let e = err(&mut c, &["CLIENT", "PAUSE", "abc"]);
    assert!(
        e.contains("timeout is not an integer or out of range"),
        "{e}"
    );
    let e = err(&mut c, &["CLIENT", "PAUSE", "-1"]);
    assert!(e.contains("timeout is negative"), "{e}");
    let e = err(&mut c, &["CLIENT", "PAUSE", "9223372036854775807"]);
    assert!(e.contains("timeout is out of range"), "{e}");
    let e = err(&mut c, &["CLIENT", "UNPAUSE", "now"]);
    assert!(e.contains("wrong number of arguments"), "{e}");
    // A syntax error is answered at once, even for a write under a pause.
    let _: () = q(&mut c, &["CLIENT", "PAUSE", "60000", "WRITE"]);
    let e = err(&mut c, &["SET", "k"]);
    assert!(
        e.contains("wrong number of arguments for 'set' command"),
        "{e}"
    );
    // CLIENT PAUSE 0 pauses nothing.
    let _: () = q(&mut c, &["CLIENT", "UNPAUSE"]);
    let _: () = q(&mut c, &["CLIENT", "PAUSE", "0"]);
    let d = time_of(&mut c, &["SET", "k", "v"]);
    assert!(d < Duration::from_millis(200), "{d:?}");
}
