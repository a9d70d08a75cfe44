//! RDB files between Tessera and redis-server 7.0.15, black-box, both ways:
//!
//! 1. redis-server holds every type in its small and its large encodings, in several
//!    databases, with TTLs, binary names and values, streams with groups, consumers and
//!    pending entries, a function library; it SAVEs and stops.
//! 2. Tessera starts on that dump.rdb (`--dir D --dbfilename dump.rdb`) and must hold
//!    what a fresh redis-server started on a copy of the same file holds, key by key
//!    (common/dataset.rs), and run the library's function.
//! 3. Tessera SAVEs what it holds (what it loaded, or the same commands run on it when
//!    it could not load) and a fresh redis-server must load that file and hold the same.
//!
//! Then: keys whose TTL ran out before the load are dropped and counted; a file with a
//! wrong checksum, or cut short, makes the server exit with the reason in its log.
//!
//! Everything asserted of redis-server proves the test; what is asserted of Tessera is
//! collected and reported at the end, each line naming the step, database and key.
//! Skipped (with a note) when redis-server is not installed.

mod common;
#[path = "common/dataset.rs"]
mod dataset;

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use redis::Value;

// ---------------------------------------------------------------------------------
// Plumbing

/// Runs a command built from any mix of `&str`, `String`, `&[u8]`, `Vec<u8>` and
/// numbers; panics naming the command on an error reply.
macro_rules! r {
    ($c:expr, $name:expr $(, $arg:expr)* $(,)?) => {{
        #[allow(unused_mut)]
        let mut cmd = redis::cmd($name);
        $( cmd.arg($arg); )*
        run($c, &cmd)
    }};
}

/// As `r!`, the reply or the error's text.
macro_rules! try_r {
    ($c:expr, $name:expr $(, $arg:expr)* $(,)?) => {{
        #[allow(unused_mut)]
        let mut cmd = redis::cmd($name);
        $( cmd.arg($arg); )*
        cmd.query::<Value>($c).map_err(|e| e.to_string())
    }};
}

fn run(c: &mut redis::Connection, cmd: &redis::Cmd) -> Value {
    cmd.query::<Value>(c)
        .unwrap_or_else(|e| panic!("{}: {e}", describe(cmd)))
}

/// A command as readable text, shortened.
fn describe(cmd: &redis::Cmd) -> String {
    let packed = cmd.get_packed_command();
    let text = String::from_utf8_lossy(&packed).replace("\r\n", " ");
    if text.len() > 200 {
        let mut end = 200;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &text[..end])
    } else {
        text
    }
}

fn connect(port: u16) -> redis::Connection {
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(10)))
        .expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    c
}

fn info_field(c: &mut redis::Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(c).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A scratch directory, removed when the test passes and kept (its path printed) when
/// it fails, for the files and logs in it.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let p =
            std::env::temp_dir().join(format!("tessera-rdb-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("temp dir path is UTF-8")
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The arguments that make a server use `dir`/dump.rdb.
fn rdb_args(dir: &TempDir) -> [&str; 4] {
    ["--dir", dir.path(), "--dbfilename", "dump.rdb"]
}

/// The last `n` lines of a log.
fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n      ")
}

fn failure_text(f: &StartFailure) -> String {
    let how = match f.status {
        Some(s) => format!("exited ({s})"),
        None => "did not answer PING with PONG in time (killed)".into(),
    };
    format!("{how}; its log ends:\n      {}", tail(&f.log, 30))
}

/// A fresh redis-server on `dir`/dump.rdb, its log in `dir`/`log`; None when
/// redis-server is not installed.
fn reference_on(dir: &TempDir, log: &str) -> Option<Result<ReferenceRedis, StartFailure>> {
    ReferenceRedis::start_loading(&rdb_args(dir), &dir.file(log), Duration::from_secs(60))
}

/// The whole keyspace (every database) of `a` against `b`.
fn compare_all(
    a: &mut redis::Connection,
    b: &mut redis::Connection,
    names: [&str; 2],
) -> (usize, Vec<String>) {
    let dbs: Vec<u32> = (0..16).collect();
    let opts = dataset::Options {
        names,
        dbs: &dbs,
        stream_persisted_state: true,
        note: String::new(),
    };
    dataset::compare_with(a, b, &opts)
}

/// Keys per database as INFO keyspace reports them, e.g. "db0=45 db1=3".
fn keyspace(c: &mut redis::Connection) -> String {
    let info: String = redis::cmd("INFO").arg("keyspace").query(c).expect("INFO");
    let mut out: Vec<String> = info
        .lines()
        .filter_map(|l| {
            let (db, rest) = l.split_once(':')?;
            let keys = rest.split(',').find_map(|p| p.strip_prefix("keys="))?;
            Some(format!("{db}={keys}"))
        })
        .collect();
    out.sort_by_key(|d| d[2..].split('=').next().and_then(|n| n.parse::<u32>().ok()));
    if out.is_empty() {
        "no keys".into()
    } else {
        out.join(" ")
    }
}

const LIBRARY: &str = "#!lua name=mylib\n\
    redis.register_function('myfunc', function(keys, args) return args[1] end)";

/// `FCALL myfunc 0 hello`: Ok when it replies "hello", else what it replied.
fn fcall(c: &mut redis::Connection) -> Result<(), String> {
    match try_r!(c, "FCALL", "myfunc", 0, "hello") {
        Ok(Value::BulkString(b)) if b == b"hello" => Ok(()),
        Ok(v) => Err(format!("replied {v:?}, not \"hello\"")),
        Err(e) => Err(e),
    }
}

// ---------------------------------------------------------------------------------
// The dataset

/// splitmix64, for reproducible "random" bytes.
fn random_bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(n);
    out
}

const BINARY_KEY: &[u8] = b"bin\x00key\xff\xfe\r\n end";
const BINARY_KEY_15: &[u8] = b"\x00\x01\x02 db15 \xc3\x28";
/// Stream entry IDs: explicit, so any server given these commands holds the same IDs.
const MS: u64 = 1_700_000_000_000;

fn sid(seq: u64) -> String {
    format!("{MS}-{seq}")
}

/// Writes the dataset with commands: every type in its small and large encodings
/// (Redis 7.0 defaults), in databases 0, 1, 5 and 15.
fn populate(c: &mut redis::Connection) {
    r!(c, "SELECT", 0);
    // Strings: integer-encoded (RDB INT8/16/32), a 64-bit integer and other numbers
    // kept as text, LZF-compressible (> 20 bytes), random binary.
    r!(c, "SET", "str:short", "hello");
    r!(c, "SET", "str:int", "12345");
    r!(c, "SET", "str:neg", "-7");
    r!(c, "SET", "str:int16", "-30000");
    r!(c, "SET", "str:int32", "2000000000");
    r!(c, "SET", "str:int64", "4294967296");
    r!(
        c,
        "SET",
        "str:huge-number",
        "123456789012345678901234567890"
    );
    r!(c, "SET", "str:zero-padded", "007");
    r!(c, "SET", "str:float", "3.14");
    r!(c, "SET", "str:empty", "");
    r!(c, "SET", "str:compressible-21", "aaaaaaaaaaaaaaaaaaaaa");
    r!(c, "SET", "str:compressible", "abcdefghij".repeat(500));
    r!(c, "SET", "str:binary", random_bytes(1, 4096));
    r!(c, "SET", BINARY_KEY, b"\x00\xff value \r\n".as_slice());

    // Lists: a short listpack quicklist; 1000 items over several nodes, with items
    // past 8 KiB and 1 KiB (plain nodes where the packed threshold allows).
    r!(c, "RPUSH", "list:small", "a", "b", "c", "1", "-2", "");
    let big: Vec<Vec<u8>> = (0..1000)
        .map(|i| match i {
            500 => vec![b'L'; 9000],
            700 => random_bytes(2, 1500),
            i if i % 7 == 0 => i.to_string().into_bytes(),
            i => format!("item-{i}").into_bytes(),
        })
        .collect();
    r!(c, "RPUSH", "list:big", big);

    // Sets: intset (64-bit extremes included), large integer set, strings.
    r!(
        c,
        "SADD",
        "set:ints",
        "1",
        "2",
        "3",
        "-5",
        "100000",
        "9223372036854775807",
        "-9223372036854775808"
    );
    let ints: Vec<String> = (0..600).map(|i| (i * 3).to_string()).collect();
    r!(c, "SADD", "set:bigints", ints);
    r!(c, "SADD", "set:strings", "a", "b", "hello world", "12");

    // Hashes: listpack; > 128 fields; a value > 64 bytes.
    r!(
        c,
        "HSET",
        "hash:small",
        "f1",
        "v1",
        "f2",
        "2",
        "f3",
        "-3",
        "empty",
        ""
    );
    let fields: Vec<String> = (0..600)
        .flat_map(|i| [format!("field-{i}"), format!("value-{i}")])
        .collect();
    r!(c, "HSET", "hash:big", fields);
    r!(c, "HSET", "hash:bigval", "f", "V".repeat(100), "g", "1");

    // Sorted sets: listpack and skiplist, scores infinite, fractional, negative, tiny,
    // huge.
    r!(
        c,
        "ZADD",
        "zset:small",
        "1",
        "a",
        "2.5",
        "b",
        "-3",
        "c",
        "inf",
        "d",
        "-inf",
        "e",
        "0",
        "f",
        "0.1",
        "g"
    );
    let members: Vec<String> = (0..200)
        .flat_map(|i| [format!("{}", (i as f64 - 100.0) * 0.37), format!("m{i}")])
        .collect();
    r!(c, "ZADD", "zset:big", members);
    r!(
        c,
        "ZADD",
        "zset:big",
        "inf",
        "top",
        "-inf",
        "bottom",
        "1e300",
        "huge",
        "-1e-300",
        "tiny",
        "3.141592653589793",
        "pi"
    );

    // HyperLogLogs: sparse and dense.
    r!(c, "PFADD", "hll:sparse", "a", "b", "c");
    let elems: Vec<String> = (0..10_000).map(|i| format!("e{i}")).collect();
    r!(c, "PFADD", "hll:dense", elems);

    populate_streams(c);

    // TTLs far in the future, relative and absolute (to the millisecond).
    r!(c, "SET", "ttl:str", "v", "PX", 1_000_000_000u64);
    r!(c, "RPUSH", "ttl:list", "a", "b");
    r!(c, "PEXPIRE", "ttl:list", 2_000_000_000u64);
    r!(c, "HSET", "ttl:hash", "f", "v");
    r!(c, "PEXPIREAT", "ttl:hash", 4_102_444_800_123u64);
    r!(c, "ZADD", "ttl:zset", "1", "a");
    r!(c, "EXPIREAT", "ttl:zset", 4_102_444_800u64);
    r!(c, "SADD", "ttl:set", "1", "2");
    r!(c, "PEXPIRE", "ttl:set", 1_000_000_000u64);
    r!(c, "XADD", "ttl:stream", "1-1", "f", "v");
    r!(c, "PEXPIRE", "ttl:stream", 1_500_000_000u64);

    r!(c, "SELECT", 1);
    r!(c, "SET", "str:db1", "one");
    r!(c, "SET", "str:int-db1", "42");
    r!(c, "HSET", "hash:db1", "a", "1", "b", "2");
    r!(c, "RPUSH", "list:db1", "x", "y");

    r!(c, "SELECT", 5);
    r!(c, "SADD", "set:db5", "10", "20");
    r!(c, "ZADD", "zset:db5", "-inf", "lo", "1.5", "mid", "inf", "hi");
    for i in 1..=5 {
        r!(c, "XADD", "stream:db5", format!("2-{i}"), "n", i);
    }
    r!(c, "XGROUP", "CREATE", "stream:db5", "gg", "0");
    r!(
        c,
        "XREADGROUP",
        "GROUP",
        "gg",
        "x",
        "COUNT",
        2,
        "STREAMS",
        "stream:db5",
        ">"
    );

    r!(c, "SELECT", 15);
    r!(c, "SET", "str:db15", "fifteen");
    r!(c, "SET", BINARY_KEY_15, random_bytes(3, 64));
    r!(c, "SET", "ttl:db15", "x", "PX", 900_000_000u64);
    r!(c, "PFADD", "hll:db15", "a", "b", "c");

    r!(c, "SELECT", 0);
    r!(c, "FUNCTION", "LOAD", "REPLACE", LIBRARY);
}

fn populate_streams(c: &mut redis::Connection) {
    // 250 entries with three field sets (master-entry flags), over three nodes at the
    // default 100 entries a node; XDELs (first of a node, middle), an exact XTRIM.
    for i in 1..=250u64 {
        let mut cmd = redis::cmd("XADD");
        cmd.arg("stream:big").arg(sid(i));
        match i % 3 {
            0 => cmd.arg("a").arg(i).arg("b").arg(format!("text-{i}")),
            1 => cmd
                .arg("a")
                .arg(i)
                .arg("b")
                .arg(-(i as i64))
                .arg("c")
                .arg("x".repeat(30)),
            _ => cmd.arg("x").arg(format!("{}.5", i)),
        };
        run(c, &cmd);
    }
    r!(
        c,
        "XDEL",
        "stream:big",
        sid(10),
        sid(11),
        sid(50),
        sid(101),
        sid(120)
    );
    r!(c, "XTRIM", "stream:big", "MAXLEN", 230);
    // g1: two consumers reading, acks, claims (a delivery count of 2, one set to 7, one
    // at a fixed delivery time), a consumer with nothing pending.
    r!(c, "XGROUP", "CREATE", "stream:big", "g1", "0");
    let first = items(&r!(
        c,
        "XREADGROUP",
        "GROUP",
        "g1",
        "alice",
        "COUNT",
        10,
        "STREAMS",
        "stream:big",
        ">"
    ));
    r!(
        c,
        "XREADGROUP",
        "GROUP",
        "g1",
        "bob",
        "COUNT",
        5,
        "STREAMS",
        "stream:big",
        ">"
    );
    let ids: Vec<String> = first
        .first()
        .map(|s| items(&items(s)[1]))
        .unwrap_or_default()
        .iter()
        .map(|e| dataset::text(&items(e)[0]))
        .collect();
    assert!(ids.len() == 10, "XREADGROUP gave {ids:?}");
    r!(c, "XACK", "stream:big", "g1", &ids[0], &ids[1], &ids[2]);
    r!(c, "XCLAIM", "stream:big", "g1", "bob", 0, &ids[3]);
    r!(
        c,
        "XCLAIM",
        "stream:big",
        "g1",
        "bob",
        0,
        &ids[4],
        "RETRYCOUNT",
        7
    );
    r!(
        c,
        "XCLAIM",
        "stream:big",
        "g1",
        "carol",
        0,
        &ids[5],
        "TIME",
        MS
    );
    r!(c, "XGROUP", "CREATECONSUMER", "stream:big", "g1", "dave");
    // g2: created at the end, nothing read; g3: an explicit entries-read, then a read
    // past deleted entries (its lag unknown).
    r!(c, "XGROUP", "CREATE", "stream:big", "g2", "$");
    r!(
        c,
        "XGROUP",
        "CREATE",
        "stream:big",
        "g3",
        sid(90),
        "ENTRIESREAD",
        80
    );
    r!(
        c,
        "XREADGROUP",
        "GROUP",
        "g3",
        "erin",
        "COUNT",
        40,
        "STREAMS",
        "stream:big",
        ">"
    );

    r!(c, "XADD", "stream:small", "1-1", "name", "a");
    r!(c, "XADD", "stream:small", "1-2", "name", "b", "other", "c");
    r!(c, "XGROUP", "CREATE", "stream:small", "sg", "0");
    r!(
        c,
        "XREADGROUP",
        "GROUP",
        "sg",
        "c1",
        "COUNT",
        1,
        "STREAMS",
        "stream:small",
        ">"
    );

    // Empty streams: all deleted (with a group), trimmed to nothing, made by MKSTREAM,
    // and one whose counters XSETID set.
    r!(c, "XADD", "stream:empty", "5-1", "f", "v");
    r!(c, "XDEL", "stream:empty", "5-1");
    r!(c, "XGROUP", "CREATE", "stream:empty", "ge", "$");
    r!(c, "XADD", "stream:trimmed", "7-1", "f", "v");
    r!(c, "XADD", "stream:trimmed", "7-2", "f", "w");
    r!(c, "XTRIM", "stream:trimmed", "MAXLEN", 0);
    r!(c, "XGROUP", "CREATE", "stream:mk", "g", "$", "MKSTREAM");
    r!(c, "XADD", "stream:setid", "3-1", "a", "1");
    r!(
        c,
        "XSETID",
        "stream:setid",
        "99-0",
        "ENTRIESADDED",
        50,
        "MAXDELETEDID",
        "50-0"
    );
}

fn items(v: &Value) -> Vec<Value> {
    dataset::items(v)
}

/// Proves on the redis-server that wrote the file that the dataset covers what it
/// should: each encoding, sparse and dense HyperLogLogs, a list of several nodes, the
/// TTLs.
fn check_source(c: &mut redis::Connection) {
    let expect: &[(&[u8], &str)] = &[
        (b"str:int", "int"),
        (b"str:neg", "int"),
        (b"str:int64", "int"),
        (b"str:short", "embstr"),
        (b"str:compressible", "raw"),
        (b"str:binary", "raw"),
        (b"list:small", "quicklist"),
        (b"list:big", "quicklist"),
        (b"set:ints", "intset"),
        (b"set:bigints", "hashtable"),
        (b"set:strings", "hashtable"),
        (b"hash:small", "listpack"),
        (b"hash:big", "hashtable"),
        (b"hash:bigval", "hashtable"),
        (b"zset:small", "listpack"),
        (b"zset:big", "skiplist"),
        (b"stream:big", "stream"),
    ];
    for (key, enc) in expect {
        let got = dataset::text(&r!(c, "OBJECT", "ENCODING", *key));
        assert_eq!(
            &got,
            enc,
            "redis-server: encoding of {}",
            dataset::show(key)
        );
    }
    // HyperLogLog header: "HYLL", then 0 dense / 1 sparse.
    for (key, enc) in [("hll:sparse", 1u8), ("hll:dense", 0u8)] {
        match r!(c, "GET", key) {
            Value::BulkString(b) => assert!(
                b.starts_with(b"HYLL") && b[4] == enc,
                "redis-server: {key} is not {}",
                if enc == 0 { "dense" } else { "sparse" }
            ),
            v => panic!("GET {key}: {v:?}"),
        }
    }
    let debug = dataset::text(&r!(c, "DEBUG", "OBJECT", "list:big"));
    let nodes: u64 = debug
        .split_whitespace()
        .find_map(|w| w.strip_prefix("ql_nodes:"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no ql_nodes in {debug}"));
    assert!(nodes > 2, "list:big has {nodes} quicklist nodes: {debug}");
    let pttl: i64 = redis::cmd("PTTL").arg("ttl:str").query(c).unwrap();
    assert!(
        (999_000_000..=1_000_000_000).contains(&pttl),
        "ttl:str PTTL {pttl}"
    );
    let at: i64 = redis::cmd("PEXPIRETIME").arg("ttl:hash").query(c).unwrap();
    assert_eq!(at, 4_102_444_800_123);
}

// ---------------------------------------------------------------------------------
// The tests

/// Steps 1 to 3 of the module comment.
#[test]
fn rdb_files_pass_both_ways_between_redis_and_tessera() {
    let started = Instant::now();
    let src_dir = TempDir::new("src");
    let ref_dir = TempDir::new("ref");
    let back_dir = TempDir::new("back");

    // 1: redis-server writes the file.
    let mut extra = rdb_args(&src_dir).to_vec();
    extra.extend(["--enable-debug-command", "yes"]);
    let Some(source) = ReferenceRedis::start_with(&extra) else {
        eprintln!("redis-server not installed: rdb_interop skipped");
        return;
    };
    let mut sc = connect(source.port);
    // Items of 1000 bytes and more go into plain quicklist nodes (default 1 GiB).
    r!(&mut sc, "DEBUG", "QUICKLIST-PACKED-THRESHOLD", 1000);
    populate(&mut sc);
    check_source(&mut sc);
    fcall(&mut sc).expect("redis-server: FCALL myfunc");
    let source_keyspace = keyspace(&mut sc);
    r!(&mut sc, "SAVE");
    let file = std::fs::read(src_dir.file("dump.rdb")).expect("redis-server's dump.rdb");
    std::fs::write(ref_dir.file("dump.rdb"), &file).expect("copy dump.rdb");
    eprintln!(
        "step 1: redis-server saved {} bytes ({source_keyspace}), {:?}",
        file.len(),
        started.elapsed()
    );

    // 2: Tessera loads it; a redis-server on a copy is the reference, which must hold
    // what the writer holds (the comparison finds nothing a real load changes).
    let reference = reference_on(&ref_dir, "redis.log")
        .expect("redis-server")
        .unwrap_or_else(|f| panic!("redis-server refused its own file: {}", failure_text(&f)));
    let mut rc = connect(reference.port);
    let (n, diffs) = compare_all(&mut sc, &mut rc, ["writer", "reader"]);
    assert!(
        diffs.is_empty(),
        "redis-server loading its own file ({n} keys):\n{}",
        diffs.join("\n")
    );
    fcall(&mut rc).expect("redis-server loaded from its file: FCALL myfunc");
    drop(sc);
    drop(source);

    let mut step2 = Vec::new();
    let tessera_log = src_dir.file("tessera.log");
    let loaded = Server::start_loading(
        2,
        &rdb_args(&src_dir),
        &tessera_log,
        Duration::from_secs(60),
    );
    let tessera = match loaded {
        Ok(t) => {
            let mut tc = connect(t.port);
            let tessera_keyspace = keyspace(&mut tc);
            if tessera_keyspace != source_keyspace {
                step2.push(format!(
                    "keys per database: tessera {tessera_keyspace}, \
                     redis-server {source_keyspace}"
                ));
            }
            let (n, diffs) = compare_all(&mut tc, &mut rc, ["tessera", "redis-server"]);
            eprintln!("step 2: compared {n} keys, {} mismatches", diffs.len());
            step2.extend(diffs);
            if let Err(e) = fcall(&mut tc) {
                step2.push(format!("FCALL myfunc 0 hello on tessera: {e}"));
            }
            Some(t)
        }
        Err(f) => {
            step2.push(format!(
                "tessera did not start on redis-server's dump.rdb: {}",
                failure_text(&f)
            ));
            None
        }
    };
    drop(rc);
    drop(reference);

    // 3: Tessera writes the file, redis-server loads it. Tessera holds the dataset as
    // loaded when step 2 found it whole; otherwise it gets the same commands.
    let (tessera, saved_dir, how) = match tessera {
        Some(t) if step2.is_empty() => (t, &src_dir, "as loaded"),
        Some(t) => {
            let mut tc = connect(t.port);
            r!(&mut tc, "FLUSHALL");
            r!(&mut tc, "FUNCTION", "FLUSH");
            let _ = try_r!(&mut tc, "DEBUG", "QUICKLIST-PACKED-THRESHOLD", 1000);
            populate(&mut tc);
            (
                t,
                &src_dir,
                "populated by commands (after FLUSHALL: step 2 failed)",
            )
        }
        None => {
            let t = Server::start_with(2, &rdb_args(&back_dir));
            let mut tc = connect(t.port);
            let _ = try_r!(&mut tc, "DEBUG", "QUICKLIST-PACKED-THRESHOLD", 1000);
            populate(&mut tc);
            (
                t,
                &back_dir,
                "populated by commands (a fresh tessera: step 2 could not start one)",
            )
        }
    };
    let mut tc = connect(tessera.port);
    let mut step3 = Vec::new();
    if let Err(e) = try_r!(&mut tc, "SAVE") {
        step3.push(format!("SAVE on tessera: {e}"));
    }
    let back_file = std::fs::read(saved_dir.file("dump.rdb")).unwrap_or_default();
    let check_dir = TempDir::new("check");
    std::fs::write(check_dir.file("dump.rdb"), &back_file).expect("copy dump.rdb");
    match reference_on(&check_dir, "redis.log").expect("redis-server") {
        Ok(back) => {
            let mut bc = connect(back.port);
            let (n, diffs) = compare_all(&mut tc, &mut bc, ["tessera", "redis-server"]);
            eprintln!(
                "step 3: tessera ({how}) saved {} bytes; redis-server loaded {}; \
                 compared {n} keys, {} mismatches",
                back_file.len(),
                keyspace(&mut bc),
                diffs.len()
            );
            step3.extend(diffs);
            if let Err(e) = fcall(&mut bc) {
                step3.push(format!(
                    "FCALL myfunc 0 hello on redis-server loaded from tessera's file: {e}"
                ));
            }
        }
        Err(f) => step3.push(format!(
            "redis-server refused tessera's dump.rdb ({} bytes): {}",
            back_file.len(),
            failure_text(&f)
        )),
    }
    eprintln!("steps 1-3 in {:?}", started.elapsed());

    let mut report = Vec::new();
    for (name, problems) in [
        ("step 2, tessera loading redis-server's dump.rdb", &step2),
        ("step 3, redis-server loading tessera's dump.rdb", &step3),
    ] {
        report.push(format!("{name}: {} problems", problems.len()));
        report.extend(problems.iter().map(|p| format!("- {p}")));
    }
    assert!(
        step2.is_empty() && step3.is_empty(),
        "{}\n(redis-server's file: {}; tessera's log: {})",
        report.join("\n"),
        ref_dir.file("dump.rdb").display(),
        tessera_log.display()
    );
}

/// Keys whose TTL ran out before the file is loaded are not loaded, and INFO
/// persistence counts them (rdb_last_load_keys_expired) apart from the others
/// (rdb_last_load_keys_loaded).
#[test]
fn keys_expired_before_the_load_are_dropped_and_counted() {
    let src_dir = TempDir::new("exp-src");
    let ref_dir = TempDir::new("exp-ref");
    let Some(source) = ReferenceRedis::start_with(&rdb_args(&src_dir)) else {
        eprintln!("redis-server not installed: rdb_interop skipped");
        return;
    };
    let mut sc = connect(source.port);
    // 7 keys that stay (one with a far TTL, two in db 3), 5 that run out in 200 ms.
    for k in ["live:1", "live:2", "live:3", "live:4"] {
        r!(&mut sc, "SET", k, "v");
    }
    r!(&mut sc, "SET", "live:ttl", "v", "PX", 1_000_000_000u64);
    r!(&mut sc, "SET", "gone:str", "v");
    r!(&mut sc, "RPUSH", "gone:list", "a");
    r!(&mut sc, "HSET", "gone:hash", "f", "v");
    r!(&mut sc, "XADD", "gone:stream", "1-1", "f", "v");
    r!(&mut sc, "SELECT", 3);
    r!(&mut sc, "SET", "live:db3", "v");
    r!(&mut sc, "ZADD", "live:zset-db3", "1", "a");
    r!(&mut sc, "SADD", "gone:set-db3", "1");
    let expired_at = now_ms() + 200;
    r!(&mut sc, "PEXPIREAT", "gone:set-db3", expired_at);
    r!(&mut sc, "SELECT", 0);
    for k in ["gone:str", "gone:list", "gone:hash", "gone:stream"] {
        r!(&mut sc, "PEXPIREAT", k, expired_at);
    }
    r!(&mut sc, "SAVE");
    assert!(
        now_ms() < expired_at,
        "the keys expired before SAVE: too slow"
    );
    drop(sc);
    drop(source);
    while now_ms() < expired_at + 100 {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::copy(src_dir.file("dump.rdb"), ref_dir.file("dump.rdb")).expect("copy");

    let reference = reference_on(&ref_dir, "redis.log")
        .expect("redis-server")
        .unwrap_or_else(|f| panic!("redis-server refused its own file: {}", failure_text(&f)));
    let mut rc = connect(reference.port);
    let counts = |c: &mut redis::Connection| {
        (
            info_field(c, "persistence", "rdb_last_load_keys_expired"),
            info_field(c, "persistence", "rdb_last_load_keys_loaded"),
        )
    };
    let want = (Some("5".to_string()), Some("7".to_string()));
    assert_eq!(counts(&mut rc), want, "redis-server (expired, loaded)");
    assert_eq!(keyspace(&mut rc), "db0=5 db3=2", "redis-server");

    let mut problems = Vec::new();
    match Server::start_loading(
        2,
        &rdb_args(&src_dir),
        &src_dir.file("tessera.log"),
        Duration::from_secs(60),
    ) {
        Ok(t) => {
            let mut tc = connect(t.port);
            let got = counts(&mut tc);
            if got != want {
                problems.push(format!(
                    "INFO persistence rdb_last_load_keys_expired / rdb_last_load_keys_loaded: \
                     tessera {:?} / {:?}, redis-server 5 / 7",
                    got.0, got.1
                ));
            }
            let ks = keyspace(&mut tc);
            if ks != "db0=5 db3=2" {
                problems.push(format!(
                    "keys per database: tessera {ks}, redis-server db0=5 db3=2"
                ));
            }
            let (_, diffs) = compare_all(&mut tc, &mut rc, ["tessera", "redis-server"]);
            problems.extend(diffs);
        }
        Err(f) => problems.push(format!(
            "tessera did not start on the file: {}",
            failure_text(&f)
        )),
    }
    assert!(
        problems.is_empty(),
        "tessera loading a file with 5 keys expired (4 in db 0, 1 in db 3) and 7 live:\n- {}",
        problems.join("\n- ")
    );
}

/// What a server does when started on `dir`/dump.rdb that it must refuse: Ok(log) when
/// it exits with a failure status and `needle` in its log, else what happened instead.
fn refused(outcome: Result<impl Sized, StartFailure>, needle: &str) -> Result<String, String> {
    match outcome {
        Ok(_) => Err("started serving (answered PING with PONG) instead of refusing it".into()),
        Err(f) => match f.status {
            Some(s) if !s.success() && f.log.contains(needle) => Ok(f.log),
            Some(s) if !s.success() => Err(format!(
                "exited ({s}) without {needle:?} in its log, which ends:\n      {}",
                tail(&f.log, 30)
            )),
            _ => Err(failure_text(&f)),
        },
    }
}

/// A file whose checksum does not match is refused ("CRC error"), so is a file cut
/// short ("Short read"): the server exits with a failure status, saying why in its log.
#[test]
fn a_corrupt_or_truncated_file_is_refused() {
    let src_dir = TempDir::new("bad-src");
    let Some(source) = ReferenceRedis::start_with(&rdb_args(&src_dir)) else {
        eprintln!("redis-server not installed: rdb_interop skipped");
        return;
    };
    let mut sc = connect(source.port);
    for i in 0..50 {
        r!(&mut sc, "SET", format!("key:{i}"), format!("value-{i}"));
    }
    r!(&mut sc, "RPUSH", "list", "a", "b", "c");
    r!(&mut sc, "HSET", "hash", "f", "v");
    r!(&mut sc, "SET", "blob", random_bytes(4, 2000));
    r!(&mut sc, "SAVE");
    drop(sc);
    drop(source);
    let good = std::fs::read(src_dir.file("dump.rdb")).expect("dump.rdb");

    let mut crc = good.clone();
    let n = crc.len();
    for b in &mut crc[n - 8..] {
        *b ^= 0xff;
    }
    let truncated = good[..good.len() / 2].to_vec();

    let mut problems = Vec::new();
    for (what, bytes, needle) in [
        ("its last 8 bytes (the CRC64) flipped", crc, "CRC error"),
        ("its second half cut off", truncated, "Short read"),
    ] {
        let dir = TempDir::new("bad");
        std::fs::write(dir.file("dump.rdb"), &bytes).expect("write dump.rdb");
        let within = Duration::from_secs(20);
        let redis = ReferenceRedis::start_loading(&rdb_args(&dir), &dir.file("redis.log"), within)
            .expect("redis-server");
        if let Err(e) = refused(redis, needle) {
            panic!("redis-server on a dump.rdb with {what}: {e}");
        }
        let tessera = Server::start_loading(2, &rdb_args(&dir), &dir.file("tessera.log"), within);
        if let Err(e) = refused(tessera, needle) {
            problems.push(format!(
                "tessera on a dump.rdb ({} bytes) with {what}: {e}; redis-server exits \
                 non-zero with {needle:?} in its log",
                bytes.len()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
