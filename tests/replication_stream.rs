//! The replication stream, seen as a replica sees it: SYNC / PSYNC over a raw socket,
//! the RDB snapshot, then the propagated commands (Redis 7.0's rewrites, MULTI/EXEC
//! blocks, expiry DELs), on a 2-shard server with keys on both shards.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;

struct Replica {
    r: BufReader<TcpStream>,
}

impl Replica {
    /// Attaches with SYNC (or PSYNC ? -1); returns the link and the RDB payload.
    fn attach(server: &Server, psync: bool) -> (Replica, Vec<u8>) {
        let mut s = server.raw();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let req: &[u8] = if psync {
            b"PSYNC ? -1\r\n"
        } else {
            b"SYNC\r\n"
        };
        s.write_all(req).unwrap();
        let mut r = BufReader::new(s);
        if psync {
            let line = read_line(&mut r);
            assert!(line.starts_with("+FULLRESYNC "), "{line}");
            assert_eq!(line.split(' ').nth(1).map(str::len), Some(40));
        }
        let len = read_line(&mut r);
        let len: usize = len.strip_prefix('$').unwrap().parse().unwrap();
        let mut rdb = vec![0; len];
        r.read_exact(&mut rdb).unwrap();
        (Replica { r }, rdb)
    }

    /// The next propagated command, its name lowercased.
    fn next(&mut self) -> Vec<String> {
        let head = read_line(&mut self.r);
        let n: usize = head.strip_prefix('*').expect("array").parse().unwrap();
        (0..n)
            .map(|i| {
                let len = read_line(&mut self.r);
                let len: usize = len.strip_prefix('$').unwrap().parse().unwrap();
                let mut b = vec![0; len + 2];
                self.r.read_exact(&mut b).unwrap();
                b.truncate(len);
                let s = String::from_utf8(b).unwrap();
                if i == 0 {
                    s.to_ascii_lowercase()
                } else {
                    s
                }
            })
            .collect()
    }

    /// Checks that the stream's next bytes are `want`.
    fn exact(&mut self, want: &[u8]) {
        let mut got = vec![0; want.len()];
        self.r.read_exact(&mut got).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
    }

    /// Checks the next commands against patterns (`*` matches any one argument).
    fn expect(&mut self, want: &[&str]) {
        for w in want {
            let got = self.next();
            let pat: Vec<&str> = w.split(' ').collect();
            let ok =
                got.len() == pat.len() && got.iter().zip(&pat).all(|(g, p)| *p == "*" || g == p);
            assert!(ok, "expected `{w}`, got {got:?}");
        }
    }
}

fn read_line(r: &mut BufReader<TcpStream>) -> String {
    let mut line = String::new();
    r.read_line(&mut line).expect("read");
    line.trim_end().to_string()
}

fn cmd(c: &mut redis::Connection, args: &[&str]) -> redis::Value {
    let mut q = redis::cmd(args[0]);
    for a in &args[1..] {
        q.arg(*a);
    }
    q.query(c).unwrap()
}

#[test]
fn writes_on_both_shards_and_transactions_reach_the_stream() {
    let server = Server::start(2);
    let mut c = server.client();
    cmd(&mut c, &["SET", "before", "snap"]);
    let (mut repl, rdb) = Replica::attach(&server, false);
    assert!(rdb.starts_with(b"REDIS0010"));
    assert!(
        rdb.windows(6).any(|w| w == b"before"),
        "snapshot holds the key"
    );

    cmd(&mut c, &["SET", KEY_SHARD0, "1"]);
    cmd(&mut c, &["SET", KEY_SHARD1, "2"]);
    cmd(&mut c, &["DEL", "missing"]);
    cmd(&mut c, &["INCR", KEY_SHARD1]);
    repl.expect(&["select 0", "set bar 1", "set foo 2", "incr foo"]);

    // A transaction over both shards: one MULTI/EXEC block, reads left out.
    cmd(&mut c, &["MULTI"]);
    cmd(&mut c, &["SET", KEY_SHARD0, "a"]);
    cmd(&mut c, &["GET", KEY_SHARD1]);
    cmd(&mut c, &["SET", KEY_SHARD1, "b"]);
    cmd(&mut c, &["EXEC"]);
    repl.expect(&["multi", "set bar a", "set foo b", "exec"]);

    // Read-only and single-write transactions: nothing, then the write alone.
    cmd(&mut c, &["MULTI"]);
    cmd(&mut c, &["GET", KEY_SHARD0]);
    cmd(&mut c, &["EXEC"]);
    cmd(&mut c, &["MULTI"]);
    cmd(&mut c, &["SELECT", "3"]);
    cmd(&mut c, &["LPUSH", "l", "x"]);
    cmd(&mut c, &["EXEC"]);
    repl.expect(&["select 3", "lpush l x"]);
}

#[test]
fn ttls_become_absolute_and_expiry_propagates_del() {
    let server = Server::start(2);
    let mut c = server.client();
    let (mut repl, _) = Replica::attach(&server, true);
    cmd(&mut c, &["SET", KEY_SHARD0, "v", "EX", "100"]);
    cmd(&mut c, &["EXPIRE", KEY_SHARD0, "200"]);
    cmd(&mut c, &["SET", KEY_SHARD1, "v", "PX", "30"]);
    cmd(&mut c, &["INCRBYFLOAT", "f", "1.5"]);
    cmd(&mut c, &["SADD", "s", "m"]);
    cmd(&mut c, &["SPOP", "s"]);
    repl.expect(&[
        "select 0",
        "set bar v PXAT *",
        "pexpireat bar *",
        "set foo v PXAT *",
        "set f 1.5 KEEPTTL",
        "sadd s m",
        "srem s m",
    ]);
    std::thread::sleep(Duration::from_millis(100));
    // Looking the expired key up deletes it: the replica gets the DEL.
    assert_eq!(cmd(&mut c, &["GET", KEY_SHARD1]), redis::Value::Nil);
    repl.expect(&["del foo"]);
}

/// Commands Redis propagates under another name: GETSET as SET, BLMOVE as LMOVE
/// (whatever its sides), BRPOPLPUSH as RPOPLPUSH (a replica's INFO commandstats
/// counts them so).
#[test]
fn rewritten_command_names() {
    let server = Server::start(2);
    let mut c = server.client();
    let (mut repl, _) = Replica::attach(&server, true);
    cmd(&mut c, &["GETSET", "g", "1"]);
    cmd(&mut c, &["RPUSH", "{l}src", "a", "b"]);
    cmd(
        &mut c,
        &["BLMOVE", "{l}src", "{l}dst", "RIGHT", "LEFT", "0"],
    );
    cmd(&mut c, &["BRPOPLPUSH", "{l}src", "{l}dst", "0"]);
    repl.expect(&[
        "select 0",
        "set g 1",
        "rpush {l}src a b",
        "lmove {l}src {l}dst RIGHT LEFT",
        "rpoplpush {l}src {l}dst",
    ]);
}

#[test]
fn multi_key_command_across_shards_is_one_block() {
    let server = Server::start(2);
    let mut c = server.client();
    let (mut repl, _) = Replica::attach(&server, false);
    cmd(&mut c, &["MSET", KEY_SHARD0, "1", KEY_SHARD1, "2"]);
    repl.expect(&["select 0", "multi"]);
    let mut parts = vec![repl.next(), repl.next()];
    parts.sort();
    assert_eq!(parts, [["mset", "bar", "1"], ["mset", "foo", "2"]]);
    repl.expect(&["exec"]);
    // A script's writes: one block too.
    cmd(
        &mut c,
        &[
            "EVAL",
            "redis.call('set', KEYS[1], 'x') redis.call('set', KEYS[2], 'y')",
            "2",
            KEY_SHARD0,
            KEY_SHARD1,
        ],
    );
    repl.expect(&["multi", "set bar x", "set foo y", "exec"]);
}

#[test]
fn replicaof_makes_writes_readonly() {
    let server = Server::start(2);
    let mut c = server.client();
    cmd(&mut c, &["REPLICAOF", "localhost", "9999"]);
    let err = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(err.to_string().contains("read only replica"), "{err}");
    cmd(&mut c, &["REPLICAOF", "NO", "ONE"]);
    cmd(&mut c, &["SET", "k", "v"]);
}

/// min-replicas-to-write with a lag set refuses writes (no link reports a lag, so
/// none counts as good) on the fast path and inside a pipeline alike, reads still
/// run, and setting it back lets writes through again.
#[test]
fn min_replicas_refuses_writes_until_unset() {
    let server = Server::start(2);
    let mut c = server.client();
    cmd(&mut c, &["SET", "k", "v"]);
    cmd(&mut c, &["CONFIG", "SET", "min-replicas-to-write", "1"]);
    cmd(&mut c, &["CONFIG", "SET", "min-replicas-max-lag", "10"]);
    let err = redis::cmd("SET")
        .arg("k")
        .arg("w")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(err.to_string().contains("NOREPLICAS"), "{err}");
    let replies: Vec<redis::RedisResult<redis::Value>> = (0..4)
        .map(|i| {
            redis::cmd("INCR")
                .arg(format!("n{i}"))
                .query::<redis::Value>(&mut c)
        })
        .collect();
    assert!(replies.iter().all(|r| r.is_err()), "{replies:?}");
    assert_eq!(
        cmd(&mut c, &["GET", "k"]),
        redis::Value::BulkString(b"v".to_vec())
    );
    cmd(&mut c, &["CONFIG", "SET", "min-replicas-to-write", "0"]);
    cmd(&mut c, &["SET", "k", "w"]);
    assert_eq!(
        cmd(&mut c, &["GET", "k"]),
        redis::Value::BulkString(b"w".to_vec())
    );
}

/// Writes a handler states beyond its own keys reach the stream: COPY into another
/// database counts as a change (it propagates), MOVE too, and a no-op COPY does not;
/// XCLAIM goes out as the claims it made.
#[test]
fn copy_and_move_between_databases_and_claims_propagate() {
    let server = Server::start(2);
    let mut c = server.client();
    let (mut repl, _) = Replica::attach(&server, true);
    cmd(&mut c, &["SET", "k", "v"]);
    cmd(&mut c, &["COPY", "k", "k2", "DB", "1"]);
    cmd(&mut c, &["COPY", "k", "k2", "DB", "1"]);
    cmd(&mut c, &["MOVE", "k", "2"]);
    cmd(&mut c, &["XADD", "st", "1-1", "f", "v"]);
    cmd(&mut c, &["XGROUP", "CREATE", "st", "g", "0"]);
    cmd(
        &mut c,
        &["XREADGROUP", "GROUP", "g", "a", "STREAMS", "st", ">"],
    );
    cmd(&mut c, &["XCLAIM", "st", "g", "b", "0", "1-1"]);
    cmd(&mut c, &["SET", "end", "1"]);
    repl.expect(&[
        "select 0",
        "set k v",
        "copy k k2 DB 1",
        "move k 2",
        "xadd st 1-1 f v",
        "xgroup CREATE st g 0",
        "xclaim st g a 0 1-1 TIME * RETRYCOUNT 1 FORCE JUSTID LASTID 1-1",
        "xclaim st g b 0 1-1 TIME * RETRYCOUNT 2 FORCE JUSTID LASTID 1-1",
        "set end 1",
    ]);
}

/// Hash field expiration as Redis 7.4 propagates it: every HEXPIRE form as HPEXPIREAT
/// with the absolute time and only the fields it set, fields deleted by a past time
/// and fields that expired as one HDEL each, HPERSIST as it came.
#[test]
fn hash_field_ttls_propagate_as_hpexpireat_and_hdel() {
    let server = Server::start(2);
    let mut c = server.client();
    let (mut repl, _) = Replica::attach(&server, true);
    let (bar, foo) = (KEY_SHARD0, KEY_SHARD1);
    let writes: &[&[&str]] = &[
        &["HSET", bar, "f1", "v1"],
        &["HEXPIRE", bar, "100", "NX", "FIELDS", "1", "f1"],
        &["HSET", foo, "f3", "v3", "f4", "v4", "f5", "v5"],
        &["HPEXPIRE", foo, "100000", "FIELDS", "3", "f3", "nope", "f4"],
        &["HPERSIST", foo, "FIELDS", "1", "f3"],
        // Nothing set, nothing propagated.
        &["HEXPIRE", foo, "100", "XX", "FIELDS", "1", "f5"],
        &["HPERSIST", foo, "FIELDS", "1", "f5"],
        &["HPEXPIREAT", foo, "1", "FIELDS", "2", "f5", "f4"],
        &["HPEXPIREAT", foo, "9999999999999", "FIELDS", "1", "f3"],
        &["HPEXPIRE", bar, "20", "FIELDS", "1", "f1"],
    ];
    for w in writes {
        cmd(&mut c, w);
    }
    repl.expect(&[
        "select 0",
        "hset bar f1 v1",
        "hpexpireat bar * NX FIELDS 1 f1",
        "hset foo f3 v3 f4 v4 f5 v5",
        "hpexpireat foo * FIELDS 2 f3 f4",
        "hpersist foo FIELDS 1 f3",
        "hdel foo f5",
        "hdel foo f4",
        "hpexpireat foo 9999999999999 FIELDS 1 f3",
    ]);
    let got = repl.next();
    assert_eq!(got[..2], ["hpexpireat", "bar"]);
    let at: i64 = got[2].parse().unwrap();
    let on_master: Vec<i64> = redis::cmd("HPEXPIRETIME")
        .arg(KEY_SHARD0)
        .arg("FIELDS")
        .arg(1)
        .arg("f1")
        .query(&mut c)
        .unwrap();
    assert_eq!(on_master, vec![at], "the absolute time the master set");
    // The field expires (lazily or actively): its HDEL, the key with it.
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(cmd(&mut c, &["HGET", KEY_SHARD0, "f1"]), redis::Value::Nil);
    repl.expect(&["hdel bar f1"]);
}

/// A NOACK group read propagates the consumer's creation and the group's new last ID
/// with its read counter (Redis's streamPropagateGroupID: XGROUP SETID ... ENTRIESREAD),
/// so a replica's or a reloaded AOF's XINFO GROUPS shows entries-read as the master's.
#[test]
fn noack_group_reads_propagate_setid_with_entriesread() {
    let server = Server::start(2);
    let mut c = server.client();
    let (mut repl, _) = Replica::attach(&server, true);
    let writes: &[&[&str]] = &[
        &["XGROUP", "CREATE", KEY_SHARD0, "g", "$", "MKSTREAM"],
        &["XADD", KEY_SHARD0, "1-1", "f", "v"],
        &["XADD", KEY_SHARD0, "1-2", "f", "v"],
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "alice",
            "NOACK",
            "STREAMS",
            KEY_SHARD0,
            ">",
        ],
    ];
    for w in writes {
        cmd(&mut c, w);
    }
    repl.expect(&[
        "select 0",
        "xgroup CREATE bar g $ MKSTREAM",
        "xadd bar 1-1 f v",
        "xadd bar 1-2 f v",
        "xgroup CREATECONSUMER bar g alice",
        "xgroup SETID bar g 1-2 ENTRIESREAD 2",
    ]);
}

/// HINCRBYFLOAT keeps a field's TTL; it propagates as HSET (its result), which drops
/// one, so a field with a deadline is followed by an HPEXPIREAT restoring it.
#[test]
fn hincrbyfloat_on_a_field_with_a_ttl_keeps_it_on_replicas() {
    let server = Server::start(2);
    let mut c = server.client();
    let (mut repl, _) = Replica::attach(&server, true);
    let writes: &[&[&str]] = &[
        &["HSET", KEY_SHARD0, "n", "1.5", "plain", "2"],
        &[
            "HPEXPIREAT",
            KEY_SHARD0,
            "9999999999999",
            "FIELDS",
            "1",
            "n",
        ],
        &["HINCRBYFLOAT", KEY_SHARD0, "n", "1"],
        &["HINCRBYFLOAT", KEY_SHARD0, "plain", "0.5"],
    ];
    for w in writes {
        cmd(&mut c, w);
    }
    repl.expect(&[
        "select 0",
        "hset bar n 1.5 plain 2",
        "hpexpireat bar 9999999999999 FIELDS 1 n",
        "hset bar n 2.5",
        "hpexpireat bar 9999999999999 FIELDS 1 n",
        "hset bar plain 2.5",
    ]);
}

/// Redis 8.0's HGETDEL / HGETEX / HSETEX as its t_hash.c propagates them: HGETDEL as
/// HDEL of every field given, HGETEX as HPEXPIREAT (absolute ms) / HPERSIST, HSETEX
/// with EX / PX / EXAT as HSETEX ... PXAT, and a time already past as one HDEL per
/// field it deleted; a command that changed nothing sends nothing.
#[test]
fn hash_getex_commands_propagate_as_redis_8_0() {
    let server = Server::start(2);
    let mut c = server.client();
    let (mut repl, _) = Replica::attach(&server, true);
    let (bar, foo) = (KEY_SHARD0, KEY_SHARD1);
    let writes: &[&[&str]] = &[
        &["HSETEX", bar, "FIELDS", "2", "a", "1", "b", "2"],
        &["HSETEX", bar, "FNX", "EX", "100", "FIELDS", "1", "c", "3"],
        // Refused by FNX / FXX: nothing.
        &["HSETEX", bar, "FNX", "FIELDS", "1", "a", "x"],
        &["HSETEX", foo, "FXX", "FIELDS", "1", "x", "1"],
        &["HSETEX", foo, "KEEPTTL", "FIELDS", "1", "x", "1"],
        &[
            "HSETEX",
            foo,
            "PXAT",
            "9999999999999",
            "FIELDS",
            "1",
            "y",
            "2",
        ],
        &["HSETEX", foo, "PX", "0", "FIELDS", "2", "y", "3", "z", "4"],
        // A plain read, a PERSIST of nothing, HGETDEL of nothing: nothing.
        &["HGETEX", bar, "FIELDS", "1", "a"],
        &["HGETEX", bar, "PERSIST", "FIELDS", "1", "a"],
        &["HGETDEL", bar, "FIELDS", "1", "nope"],
        &["HGETEX", bar, "PX", "100000", "FIELDS", "2", "a", "nope"],
        &["HGETEX", bar, "PXAT", "9999999999999", "FIELDS", "1", "b"],
        &["HGETEX", bar, "PERSIST", "FIELDS", "1", "b"],
        &["HGETEX", bar, "EXAT", "1", "FIELDS", "2", "c", "nope"],
        &["HGETDEL", bar, "FIELDS", "3", "a", "nope", "b"],
        &["HSETEX", foo, "PX", "20", "FIELDS", "1", "t", "1"],
    ];
    for w in writes {
        cmd(&mut c, w);
    }
    repl.expect(&[
        "select 0",
        "hsetex bar FIELDS 2 a 1 b 2",
        "hsetex bar FNX PXAT * FIELDS 1 c 3",
        "hsetex foo KEEPTTL FIELDS 1 x 1",
        "hsetex foo PXAT 9999999999999 FIELDS 1 y 2",
        "hdel foo y",
        "hdel foo z",
    ]);
    let got = repl.next();
    assert_eq!(got[..2], ["hpexpireat", "bar"]);
    assert_eq!(got[3..], ["FIELDS", "2", "a", "nope"]);
    let at: i64 = got[2].parse().unwrap();
    let on_master: Vec<i64> = redis::cmd("HPEXPIRETIME")
        .arg(KEY_SHARD1)
        .arg("FIELDS")
        .arg(1)
        .arg("y")
        .query(&mut c)
        .unwrap();
    assert_eq!(on_master, vec![-2], "y went with the past time");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    assert!((at - now - 100_000).abs() < 5_000, "{at}");
    repl.expect(&[
        "hpexpireat bar 9999999999999 FIELDS 1 b",
        "hpersist bar FIELDS 1 b",
        "hdel bar c",
        // The last fields take the key: no DEL of its own.
        "hdel bar a nope b",
        "hsetex foo PXAT * FIELDS 1 t 1",
    ]);
    // A field HGETEX finds expired: its HDEL, and the read sends nothing.
    cmd(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    std::thread::sleep(Duration::from_millis(60));
    let got = cmd(&mut c, &["HGETEX", foo, "EX", "10", "FIELDS", "1", "t"]);
    assert_eq!(got, redis::Value::Array(vec![redis::Value::Nil]));
    cmd(&mut c, &["SET", "end", "1"]);
    repl.expect(&["hdel foo t", "set end 1"]);
}

/// SCAN deletes the keys matching its pattern whose TTL passed, on both shards, and
/// each DEL reaches replicas at once, on its own (Redis's expire.tcl "SCAN: Lazy-expire
/// should not be wrapped in MULTI/EXEC"). Keys outside the pattern are left for later.
#[test]
fn scan_deletes_the_expired_keys_it_meets() {
    let server = Server::start(2);
    let mut c = server.client();
    cmd(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    let (mut repl, _) = Replica::attach(&server, true);
    cmd(&mut c, &["SET", KEY_SHARD0, "v", "PX", "1"]);
    cmd(&mut c, &["SET", KEY_SHARD1, "v", "PX", "1"]);
    cmd(&mut c, &["SET", "other", "v", "PX", "1"]);
    repl.expect(&[
        "select 0",
        "set bar v PXAT *",
        "set foo v PXAT *",
        "set other v PXAT *",
    ]);
    std::thread::sleep(Duration::from_millis(20));
    let found = cmd(&mut c, &["SCAN", "0", "MATCH", "[bf]*", "COUNT", "1000"]);
    let want = redis::Value::Array(vec![
        redis::Value::BulkString(b"0".to_vec()),
        redis::Value::Array(vec![]),
    ]);
    assert_eq!(found, want);
    let mut dels = vec![repl.next(), repl.next()];
    dels.sort();
    assert_eq!(dels, [["del", "bar"], ["del", "foo"]]);
    let info = match cmd(&mut c, &["INFO", "keyspace"]) {
        redis::Value::BulkString(b) => String::from_utf8(b).unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(info.contains("db0:keys=1,"), "{info}");
}

/// redis-cli --functions-rdb (REPLCONF rdb-only 1, rdb-filter-only functions) gets a
/// file with the libraries and no keys, whether syncs go to disk or to sockets, and
/// --rdb gets everything; the connection closes after the file (rdb-only). A filter
/// without `capa eof` and an unknown filter are refused as Redis refuses them.
#[test]
fn rdb_filter_only_functions_and_rdb_only() {
    let dir = scratch_dir("replication-stream", "filter");
    let d = dir.display().to_string();
    let server = Server::start_with(2, &["--dir", &d, "--save", ""]);
    let mut c = server.client();
    cmd(&mut c, &["SET", KEY_SHARD0, "v"]);
    cmd(&mut c, &["SET", KEY_SHARD1, "v"]);
    let lib = "#!lua name=lib1\nredis.register_function('func1', function() return 123 end)";
    cmd(&mut c, &["FUNCTION", "LOAD", lib]);
    let port = server.port.to_string();
    for diskless in ["no", "yes"] {
        cmd(&mut c, &["CONFIG", "SET", "repl-diskless-sync", diskless]);
        cmd(&mut c, &["CONFIG", "SET", "repl-diskless-sync-delay", "0"]);
        for (opt, name) in [("--functions-rdb", "functions.rdb"), ("--rdb", "all.rdb")] {
            let path = dir.join(format!("{diskless}-{name}"));
            let out = std::process::Command::new("redis-cli")
                .args(["-p", &port, opt])
                .arg(&path)
                .output()
                .expect("redis-cli");
            let text = String::from_utf8_lossy(&out.stderr).into_owned()
                + &String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("Transfer finished with success"), "{text}");
            let file = std::fs::read(&path).expect("rdb");
            let has = |needle: &[u8]| file.windows(needle.len()).any(|w| w == needle);
            assert!(has(b"func1"), "{opt}: the library is in the file");
            let keys = has(KEY_SHARD0.as_bytes()) && has(KEY_SHARD1.as_bytes());
            assert_eq!(keys, opt == "--rdb", "{opt} (diskless {diskless}): keys");
        }
    }
    // The functions-only file loads as an empty dataset with the library.
    let loaded = Server::start_with(
        2,
        &[
            "--dir",
            &d,
            "--dbfilename",
            "yes-functions.rdb",
            "--save",
            "",
        ],
    );
    let mut l = loaded.client();
    assert_eq!(cmd(&mut l, &["DBSIZE"]), redis::Value::Int(0));
    let v = cmd(&mut l, &["FCALL", "func1", "0"]);
    assert_eq!(v, redis::Value::Int(123));
    // No EOF capability: refused. An unknown filter: refused.
    let mut raw = server.raw();
    raw.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    raw.write_all(b"REPLCONF rdb-filter-only functions\r\nSYNC\r\nREPLCONF rdb-filter-only \"functions keys\"\r\n")
        .unwrap();
    let mut r = BufReader::new(raw);
    assert_eq!(read_line(&mut r), "+OK");
    assert_eq!(
        read_line(&mut r),
        "-ERR Filtered replica requires EOF capability"
    );
    assert_eq!(
        read_line(&mut r),
        "-ERR Unsupported rdb-filter-only option: keys"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A write that propagates as it came reaches the stream as the client sent it (the
/// name's case, a value holding CRLF), on the connection's shard and on the other
/// one; an inline command is encoded as RESP and a rewritten one as its rewrite.
#[test]
fn writes_as_sent_reach_the_stream_byte_for_byte() {
    let server = Server::start(2);
    let (mut repl, _) = Replica::attach(&server, false);
    let mut c = server.raw();
    let sent: [&[u8]; 5] = [
        b"*3\r\n$3\r\nset\r\n$3\r\nbar\r\n$4\r\na\r\nb\r\n",
        b"*3\r\n$3\r\nSeT\r\n$3\r\nfoo\r\n$1\r\nx\r\n",
        b"set bar inline\r\n",
        b"*5\r\n$3\r\nSET\r\n$3\r\nfoo\r\n$1\r\ny\r\n$2\r\nEX\r\n$3\r\n100\r\n",
        b"*3\r\n$6\r\nappend\r\n$3\r\nbar\r\n$1\r\nz\r\n",
    ];
    for req in sent {
        c.write_all(req).unwrap();
        let reply = read_at_least(&mut c, 3);
        assert!(
            reply.starts_with(b"+OK") || reply.starts_with(b":"),
            "{reply:?}"
        );
    }
    repl.expect(&["select 0"]);
    repl.exact(sent[0]);
    repl.exact(sent[1]);
    repl.exact(b"*3\r\n$3\r\nset\r\n$3\r\nbar\r\n$6\r\ninline\r\n");
    repl.expect(&["set foo y PXAT *"]);
    repl.exact(sent[4]);
}

/// redis.set_repl sends a script's following commands to the AOF, the replicas,
/// both or neither (Redis's "Test selective replication of certain Redis commands
/// from Lua"); MULTI and EXEC go to both, and the flags end with the script.
#[test]
fn set_repl_chooses_who_gets_a_scripts_commands() {
    let server = Server::start_with(2, &["--appendonly", "yes"]);
    let mut c = server.client();
    let (mut repl, _) = Replica::attach(&server, false);
    let script = "redis.call('set','a','1'); \
                  redis.set_repl(redis.REPL_NONE); redis.call('set','b','2'); \
                  redis.set_repl(redis.REPL_AOF); redis.call('set','c','3'); \
                  redis.set_repl(redis.REPL_ALL); redis.call('set','d','4')";
    cmd(&mut c, &["EVAL", script, "0"]);
    repl.expect(&["select 0", "multi", "set a 1", "set d 4", "exec"]);

    // Replicas only, then nothing: one command, unwrapped.
    let script = "redis.set_repl(redis.REPL_REPLICA); redis.call('set','e','5'); \
                  redis.set_repl(redis.REPL_NONE); redis.call('set','f','6')";
    cmd(&mut c, &["EVAL", script, "0"]);
    repl.expect(&["set e 5"]);

    // Inside a transaction the flags end with the script.
    cmd(&mut c, &["MULTI"]);
    cmd(
        &mut c,
        &[
            "EVAL",
            "redis.set_repl(redis.REPL_NONE); redis.call('set','g','7')",
            "0",
        ],
    );
    cmd(&mut c, &["SET", "h", "8"]);
    cmd(&mut c, &["EXEC"]);
    repl.expect(&["set h 8"]);

    // A key a REPL_NONE script finds expired is deleted on replicas too (Redis's
    // propagateDeletion names both targets whatever the script chose).
    cmd(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    cmd(&mut c, &["SET", "gone", "x", "PX", "1"]);
    repl.expect(&["set gone x PXAT *"]);
    std::thread::sleep(Duration::from_millis(20));
    let script = "redis.set_repl(redis.REPL_NONE); return redis.call('get','gone')";
    assert_eq!(cmd(&mut c, &["EVAL", script, "0"]), redis::Value::Nil);
    repl.expect(&["del gone"]);

    // The master has everything; the AOF has a, c and d (and h), not b, e, f, g.
    let all = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let got: Vec<Option<String>> = q(&mut c, &[&["MGET"][..], &all].concat());
    assert!(got.iter().all(Option::is_some), "{got:?}");
    cmd(&mut c, &["DEBUG", "LOADAOF"]);
    let got: Vec<Option<String>> = q(&mut c, &[&["MGET"][..], &all].concat());
    let kept: Vec<&str> = all
        .iter()
        .zip(&got)
        .filter(|(_, v)| v.is_some())
        .map(|(k, _)| *k)
        .collect();
    assert_eq!(kept, ["a", "c", "d", "h"]);
}
