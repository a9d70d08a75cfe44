//! Black-box tests of the server commands (CONFIG, INFO, COMMAND, TIME, DEBUG) and
//! of startup from a config file, on a 2-shard server.

mod common;
#[path = "common/resp.rs"]
mod resp;

use std::path::PathBuf;
use std::process::Command;

use common::*;
use resp::*;
use tessera::slot::SlotTable;

fn setup() -> (Server, Raw) {
    let s = Server::start(2);
    let c = Raw::connect(s.port);
    (s, c)
}

/// The `field:value` lines of an INFO reply as (field, value) pairs.
fn info_field(text: &str, field: &str) -> Option<String> {
    text.split("\r\n")
        .find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_string))
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("tessera-test-{}-{name}", std::process::id()));
    std::fs::write(&path, text).expect("write temp config");
    path
}

/// Writes the config file `name` (its text built from a free port) and starts
/// `tessera FILE --threads 2` on it; returns the server and the file.
fn start_from_config_file(name: &str, conf: impl Fn(u16) -> String) -> (Proc, PathBuf) {
    let port = free_port();
    let path = temp_file(name, &conf(port));
    let args = vec![
        path.to_string_lossy().into_owned(),
        "--threads".into(),
        "2".into(),
    ];
    (Proc::start(&args, port), path)
}

fn pairs(r: R) -> Vec<(String, String)> {
    let items = r.items().to_vec();
    let mut v: Vec<(String, String)> = items
        .chunks(2)
        .map(|c| (c[0].text(), c[1].text()))
        .collect();
    v.sort();
    v
}

#[test]
fn config_get_globs_and_several_patterns() {
    let (s, mut c) = setup();
    assert_eq!(
        c.c("CONFIG GET port"),
        bulks(&["port", &s.port.to_string()])
    );
    assert_eq!(c.c("CONFIG GET databases"), bulks(&["databases", "16"]));
    let max = pairs(c.c("CONFIG GET maxmemory*"));
    let names: Vec<&str> = max.iter().map(|p| p.0.as_str()).collect();
    for want in ["maxmemory", "maxmemory-policy", "maxmemory-samples"] {
        assert!(names.contains(&want), "{names:?}");
    }
    assert!(names.iter().all(|n| n.starts_with("maxmemory")));
    assert!(max.contains(&("maxmemory-policy".into(), "noeviction".into())));
    // Several patterns in one call (Redis 7.0), each parameter once.
    let got = pairs(c.c("CONFIG GET port databases port"));
    assert_eq!(
        got,
        [
            ("databases".to_string(), "16".to_string()),
            ("port".to_string(), s.port.to_string())
        ]
    );
    // Glob syntax, case-insensitive names, no match.
    let got = pairs(c.c("CONFIG GET m?xclients"));
    assert_eq!(got, [("maxclients".to_string(), "10000".to_string())]);
    // An exact (glob-free) name is matched case-insensitively and echoed as given.
    let got = pairs(c.c("CONFIG GET HZ"));
    assert_eq!(got, [("HZ".to_string(), "10".to_string())]);
    assert_eq!(c.c("CONFIG GET nosuchparam"), arr(vec![]));
    assert!(c.c("CONFIG GET *").items().len() > 100);
    assert_eq!(
        c.c("CONFIG GET"),
        e("ERR wrong number of arguments for 'config|get' command")
    );
}

#[test]
fn config_set_several_pairs_and_errors() {
    let (_s, mut c) = setup();
    assert_eq!(
        c.c("CONFIG SET maxmemory 10mb maxmemory-policy allkeys-lru"),
        ok()
    );
    assert_eq!(
        c.c("CONFIG GET maxmemory"),
        bulks(&["maxmemory", "10485760"])
    );
    assert_eq!(
        c.c("CONFIG GET maxmemory-policy"),
        bulks(&["maxmemory-policy", "allkeys-lru"])
    );
    // Seen by connections on every shard: open a few so both shards host one.
    for _ in 0..4 {
        let mut other = Raw::connect(_s.port);
        assert_eq!(
            other.c("CONFIG GET maxmemory-policy"),
            bulks(&["maxmemory-policy", "allkeys-lru"])
        );
    }
    let failed = |arg: &str, why: &str| {
        e(&format!(
            "ERR CONFIG SET failed (possibly related to argument '{arg}') - {why}"
        ))
    };
    assert_eq!(
        c.c("CONFIG SET nosuch 1"),
        e("ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'")
    );
    assert_eq!(
        c.c("CONFIG SET maxmemory 1mb maxmemory 2mb"),
        failed("maxmemory", "duplicate parameter")
    );
    assert_eq!(
        c.c("CONFIG SET daemonize yes"),
        failed("daemonize", "can't set immutable config")
    );
    assert_eq!(
        c.c("CONFIG SET maxmemory lots"),
        failed("maxmemory", "argument must be a memory value")
    );
    assert_eq!(
        c.c("CONFIG SET appendonly maybe"),
        failed("appendonly", "argument must be 'yes' or 'no'")
    );
    assert_eq!(
        c.c("CONFIG SET maxmemory-samples 0"),
        failed(
            "maxmemory-samples",
            "argument must be between 1 and 64 inclusive"
        )
    );
    assert_eq!(
        c.c("CONFIG SET maxmemory-policy sometimes"),
        failed(
            "maxmemory-policy",
            "argument(s) must be one of the following: volatile-lru, volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction"
        )
    );
    // All or nothing: a bad pair leaves the good one unapplied.
    assert!(c
        .c("CONFIG SET maxmemory 20mb maxmemory-policy sometimes")
        .is_err());
    assert_eq!(
        c.c("CONFIG GET maxmemory"),
        bulks(&["maxmemory", "10485760"])
    );
    assert_eq!(
        c.c("CONFIG SET maxmemory 1mb hz"),
        e("ERR wrong number of arguments for 'config|set' command")
    );
    assert_eq!(
        c.c("CONFIG SET maxmemory"),
        e("ERR wrong number of arguments for 'config|set' command")
    );
    assert_eq!(
        c.c("CONFIG SET maxmemory 0 maxmemory-policy noeviction"),
        ok()
    );
    let help = c.c("CONFIG HELP");
    assert_eq!(
        help.items()[0],
        st("CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")
    );
}

#[test]
fn config_resetstat_clears_stats() {
    let (_s, mut c) = setup();
    c.c("SET a 1");
    c.c("GET a");
    c.c("GET missing");
    c.c("NOSUCHCMD");
    c.c("SET k");
    // A key and a hash field that expire (found on access).
    c.c("SET gone 1 PX 1");
    c.c("HSET h f 1 g 2");
    c.c("HPEXPIRE h 1 FIELDS 1 f");
    std::thread::sleep(std::time::Duration::from_millis(10));
    c.c("EXISTS gone");
    c.c("HLEN h");
    let stats = c.c("INFO stats").text();
    assert_eq!(info_field(&stats, "expired_keys").as_deref(), Some("1"));
    assert_eq!(info_field(&stats, "expired_subkeys").as_deref(), Some("1"));
    // GET a and HLEN h hit; GET missing and EXISTS of the expired key miss.
    assert_eq!(info_field(&stats, "keyspace_hits").as_deref(), Some("2"));
    assert_eq!(info_field(&stats, "keyspace_misses").as_deref(), Some("2"));
    assert_eq!(
        info_field(&stats, "total_error_replies").as_deref(),
        Some("2")
    );
    let errs = c.c("INFO errorstats").text();
    assert!(errs.contains("errorstat_ERR:count=2\r\n"), "{errs}");
    assert_eq!(c.c("CONFIG RESETSTAT"), ok());
    let stats = c.c("INFO stats").text();
    assert_eq!(info_field(&stats, "keyspace_hits").as_deref(), Some("0"));
    assert_eq!(info_field(&stats, "keyspace_misses").as_deref(), Some("0"));
    assert_eq!(info_field(&stats, "expired_keys").as_deref(), Some("0"));
    assert_eq!(info_field(&stats, "expired_subkeys").as_deref(), Some("0"));
    assert_eq!(
        info_field(&stats, "total_error_replies").as_deref(),
        Some("0")
    );
    assert_eq!(c.c("INFO errorstats").text(), "# Errorstats\r\n");
    // Only the RESETSTAT call itself (and the INFO calls) are counted since.
    let cmds = c.c("INFO commandstats").text();
    assert!(
        !cmds.contains("cmdstat_set:") && !cmds.contains("cmdstat_get:"),
        "{cmds}"
    );
    assert!(cmds.contains("cmdstat_config|resetstat:calls=1,"), "{cmds}");
    assert_eq!(
        c.c("CONFIG RESETSTAT x"),
        e("ERR wrong number of arguments for 'config|resetstat' command")
    );
}

#[test]
fn info_sections() {
    let (s, mut c) = setup();
    let server = c.c("INFO server").text();
    assert!(server.starts_with("# Server\r\n"), "{server}");
    assert_eq!(
        info_field(&server, "redis_version").as_deref(),
        Some("7.0.15")
    );
    assert_eq!(
        info_field(&server, "redis_mode").as_deref(),
        Some("standalone")
    );
    assert_eq!(info_field(&server, "tcp_port"), Some(s.port.to_string()));
    assert!(info_field(&server, "process_id").is_some());
    assert!(!server.contains("# Clients"));
    // The default set, "all" and several sections at once.
    let default = c.c("INFO").text();
    for sec in [
        "# Server",
        "# Clients",
        "# Memory",
        "# Persistence",
        "# Stats",
        "# Replication",
        "# CPU",
        "# Keyspace",
    ] {
        assert!(default.contains(sec), "{sec} missing");
    }
    assert!(!default.contains("# Commandstats"));
    assert!(c.c("INFO all").text().contains("# Commandstats"));
    assert!(c.c("INFO everything").text().contains("# Commandstats"));
    let two = c.c("INFO server clients").text();
    assert!(two.contains("# Server") && two.contains("# Clients") && !two.contains("# Memory"));
    assert_eq!(c.c("INFO nosuchsection").text(), "");
    let clients = c.c("INFO CLIENTS").text();
    let connected: i64 = info_field(&clients, "connected_clients")
        .unwrap()
        .parse()
        .unwrap();
    assert!(connected >= 1);
}

#[test]
fn info_keyspace_counts_both_shards() {
    let (_s, mut c) = setup();
    assert_eq!(c.c("INFO keyspace").text(), "# Keyspace\r\n");
    let table = SlotTable::new(2);
    let keys: Vec<String> = (0..100).map(|i| format!("key:{i}")).collect();
    let on0 = keys
        .iter()
        .filter(|k| table.shard_of_key(k.as_bytes()) == 0)
        .count();
    assert!(on0 > 0 && on0 < 100);
    for (n, k) in keys.iter().enumerate() {
        if n % 4 == 0 {
            c.cmd(&[b"SET", k.as_bytes(), b"v", b"EX", b"1000"]);
        } else {
            c.cmd(&[b"SET", k.as_bytes(), b"v"]);
        }
    }
    c.c("SELECT 3");
    c.c("MSET {bar}a 1 {foo}b 2");
    let ks = c.c("INFO keyspace").text();
    assert!(ks.contains("\r\ndb0:keys=100,expires=25,avg_ttl="), "{ks}");
    assert!(ks.contains("\r\ndb3:keys=2,expires=0,avg_ttl="), "{ks}");
    assert!(!ks.contains("db1:"));
}

#[test]
fn info_commandstats_after_commands() {
    let (_s, mut c) = setup();
    c.c("CONFIG RESETSTAT");
    c.cmd(&[b"SET", KEY_SHARD0.as_bytes(), b"1"]);
    c.cmd(&[b"SET", KEY_SHARD1.as_bytes(), b"2"]);
    c.cmd(&[b"SET", b"other", b"3"]);
    c.cmd(&[b"GET", KEY_SHARD1.as_bytes()]);
    c.c("SADD s m");
    c.c("GET s");
    c.c("GET a b");
    let cmds = c.c("INFO commandstats").text();
    assert!(cmds.starts_with("# Commandstats\r\n"), "{cmds}");
    assert!(cmds.contains("\r\ncmdstat_set:calls=3,usec="), "{cmds}");
    let get = info_field(&cmds, "cmdstat_get").expect("cmdstat_get");
    assert!(get.starts_with("calls=2,"), "{get}");
    assert!(get.ends_with(",rejected_calls=1,failed_calls=1"), "{get}");
    let errs = c.c("INFO errorstats").text();
    assert!(errs.contains("errorstat_WRONGTYPE:count=1\r\n"), "{errs}");
    assert!(errs.contains("errorstat_ERR:count=1\r\n"), "{errs}");
    let stats = c.c("INFO stats").text();
    let total: i64 = info_field(&stats, "total_commands_processed")
        .unwrap()
        .parse()
        .unwrap();
    assert!(total >= 7, "{total}");
}

#[test]
fn command_count_info_docs_getkeys() {
    let (_s, mut c) = setup();
    let count = c.c("COMMAND COUNT").int();
    assert!(count > 50, "{count}");
    assert_eq!(c.c("COMMAND").items().len() as i64, count);
    // COMMAND LIST names subcommands too (client|list ...); COUNT does not.
    let list = c.c("COMMAND LIST").items().len() as i64;
    assert!(list > count, "{list} {count}");
    let info = c.c("COMMAND INFO get nosuch set");
    let items = info.items();
    assert_eq!(items.len(), 3);
    let get = items[0].items();
    assert_eq!(get.len(), 10);
    assert_eq!(get[0], b("get"));
    assert_eq!(get[1], i(2));
    assert_eq!(get[2], arr(vec![st("readonly"), st("fast")]));
    assert_eq!(&get[3..6], &[i(1), i(1), i(1)]);
    assert_eq!(items[1], R::Nil);
    assert_eq!(items[2].items()[0], b("set"));
    assert_eq!(items[2].items()[1], i(-3));
    let mset = c.c("COMMAND INFO mset");
    assert_eq!(&mset.items()[0].items()[3..6], &[i(1), i(-1), i(2)]);
    // As redis-server 7.0.15 lists them: may_replicate is hidden.
    let eval = c.c("COMMAND INFO eval");
    let flags = [
        "noscript",
        "stale",
        "skip_monitor",
        "no_mandatory_keys",
        "movablekeys",
    ];
    assert_eq!(
        eval.items()[0].items()[2],
        arr(flags.into_iter().map(st).collect())
    );

    let docs = c.c("COMMAND DOCS get");
    let d = docs.items();
    assert_eq!(d[0], b("get"));
    let fields = pairs(d[1].clone());
    assert!(
        fields.contains(&("summary".into(), "Get the value of a key".into())),
        "{fields:?}"
    );
    assert!(fields.contains(&("since".into(), "1.0.0".into())));
    assert!(fields.contains(&("group".into(), "string".into())));
    assert_eq!(c.c("COMMAND DOCS nosuch"), arr(vec![]));

    assert_eq!(c.c("COMMAND GETKEYS SET a b"), bulks(&["a"]));
    assert_eq!(c.c("COMMAND GETKEYS MSET a 1 b 2"), bulks(&["a", "b"]));
    assert_eq!(
        c.c("COMMAND GETKEYS RENAME {bar}x {foo}y"),
        bulks(&["{bar}x", "{foo}y"])
    );
    assert_eq!(
        c.c("COMMAND GETKEYS get a b"),
        e("ERR Invalid number of arguments specified for command")
    );
    // command|getkeys itself needs the command and at least one argument.
    assert_eq!(
        c.c("COMMAND GETKEYS get"),
        e("ERR wrong number of arguments for 'command|getkeys' command")
    );
    assert_eq!(
        c.c("COMMAND GETKEYS nosuch a"),
        e("ERR Invalid command specified")
    );
    assert_eq!(
        c.c("COMMAND GETKEYS PING x"),
        e("ERR The command has no key arguments")
    );
    // A shard channel routes like a key but is none (its key spec is NOT_KEY), as
    // redis-server 7.0.15 answers.
    for cmd in ["SPUBLISH ch msg", "SSUBSCRIBE a b", "SUNSUBSCRIBE a"] {
        for sub in ["GETKEYS", "GETKEYSANDFLAGS"] {
            assert_eq!(
                c.c(&format!("COMMAND {sub} {cmd}")),
                e("ERR The command has no key arguments"),
                "{sub} {cmd}"
            );
        }
    }
    assert_eq!(
        c.c("COMMAND GETKEYS"),
        e("ERR wrong number of arguments for 'command|getkeys' command")
    );
    let list = c.c("COMMAND LIST FILTERBY PATTERN get*");
    let mut names: Vec<String> = list.items().iter().map(R::text).collect();
    names.sort();
    for want in ["get", "getdel", "getex", "getrange", "getset"] {
        assert!(names.contains(&want.to_string()), "{names:?}");
    }
    assert_eq!(
        c.c("COMMAND FOO"),
        e("ERR unknown subcommand 'FOO'. Try COMMAND HELP.")
    );
}

#[test]
fn time_and_debug_sleep() {
    let (_s, mut c) = setup();
    let t = c.c("TIME");
    let parts = t.items();
    assert_eq!(parts.len(), 2);
    let secs: u64 = parts[0].text().parse().unwrap();
    let micros: u64 = parts[1].text().parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(secs.abs_diff(now) <= 2, "{secs} vs {now}");
    assert!(micros < 1_000_000);
    assert!(matches!(parts[0], R::Bulk(_)) && matches!(parts[1], R::Bulk(_)));
    assert_eq!(
        c.c("TIME x"),
        e("ERR wrong number of arguments for 'time' command")
    );
    assert_eq!(c.c("DEBUG SLEEP 0"), ok());
    let start = std::time::Instant::now();
    assert_eq!(c.c("DEBUG SLEEP 0.1"), ok());
    assert!(start.elapsed() >= std::time::Duration::from_millis(100));
    assert_eq!(c.c("PING"), st("PONG"));
}

#[test]
fn config_file_as_first_argument() {
    let (p, path) = start_from_config_file("ok.conf", |port| {
        format!("# a comment\n\nport {port}\ndatabases 4\nmaxmemory-policy allkeys-lru\n")
    });
    let port = p.port;
    let mut c = Raw::connect(p.port);
    assert_eq!(c.c("CONFIG GET databases"), bulks(&["databases", "4"]));
    assert_eq!(c.c("CONFIG GET port"), bulks(&["port", &port.to_string()]));
    assert_eq!(
        c.c("CONFIG GET maxmemory-policy"),
        bulks(&["maxmemory-policy", "allkeys-lru"])
    );
    assert_eq!(c.c("SELECT 3"), ok());
    assert_eq!(c.c("SELECT 4"), e("ERR DB index is out of range"));
    assert_eq!(c.c("MOVE k 4"), e("ERR DB index is out of range"));
    let server = c.c("INFO server").text();
    let file = info_field(&server, "config_file").unwrap();
    assert!(file.ends_with("ok.conf"), "{file}");
    // Command-line options after the file override it.
    drop(c);
    drop(p);
    let port2 = free_port();
    let args = vec![
        path.to_string_lossy().into_owned(),
        "--port".into(),
        port2.to_string(),
        "--databases".into(),
        "2".into(),
        "--threads".into(),
        "2".into(),
    ];
    let p = Proc::start(&args, port2);
    let mut c = Raw::connect(p.port);
    assert_eq!(c.c("CONFIG GET databases"), bulks(&["databases", "2"]));
    assert_eq!(c.c("SELECT 2"), e("ERR DB index is out of range"));
    let _ = std::fs::remove_file(path);
}

#[test]
fn bad_config_file_directive_exits_with_line_number() {
    let path = temp_file("bad.conf", "port 0\n# comment\nnosuchdirective yes\n");
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg(&path)
        .args(["--threads", "1"])
        .output()
        .expect("run tessera");
    let _ = std::fs::remove_file(&path);
    assert!(!out.status.success(), "exit status {:?}", out.status);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***"),
        "{err}"
    );
    assert!(
        err.contains("Reading the configuration file, at line 3"),
        "{err}"
    );
    assert!(err.contains(">>> 'nosuchdirective yes'"), "{err}");
    assert!(
        err.contains("Bad directive or wrong number of arguments"),
        "{err}"
    );
    // A bad value names its line too.
    let path = temp_file("badval.conf", "databases many\n");
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg(&path)
        .output()
        .expect("run tessera");
    let _ = std::fs::remove_file(&path);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("at line 1") && err.contains(">>> 'databases many'"),
        "{err}"
    );
    // A missing file fails too.
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("/nonexistent/tessera.conf")
        .output()
        .expect("run tessera");
    assert!(!out.status.success());
}

/// RESET: the connection's state as a new one's: transaction and WATCHes discarded,
/// db 0, no name (Redis's clearClientConnectionState).
#[test]
fn reset_discards_transaction_watch_db_and_name() {
    let s = Server::start(2);
    let mut c = s.client();
    let mut other = s.client();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut c).expect("select");
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("n")
        .query(&mut c)
        .expect("setname");
    let _: () = redis::cmd("WATCH").arg("w").query(&mut c).expect("watch");
    let _: () = redis::cmd("MULTI").query(&mut c).expect("multi");
    let q: String = redis::cmd("SET")
        .arg("a")
        .arg(1)
        .query(&mut c)
        .expect("queued");
    assert_eq!(q, "QUEUED");
    let r: String = redis::cmd("RESET").query(&mut c).expect("reset");
    assert_eq!(r, "RESET");
    let e = redis::cmd("EXEC")
        .query::<()>(&mut c)
        .expect_err("no multi");
    assert!(e.to_string().contains("EXEC without MULTI"), "{e}");
    let name: Option<String> = redis::cmd("CLIENT")
        .arg("GETNAME")
        .query(&mut c)
        .expect("name");
    assert_eq!(name, None);
    // Back in db 0, and the queued SET never ran.
    let _: () = redis::cmd("SET")
        .arg("in0")
        .arg(1)
        .query(&mut c)
        .expect("set");
    let v: Option<String> = redis::cmd("GET").arg("in0").query(&mut other).expect("get");
    assert_eq!(v.as_deref(), Some("1"));
    let a: Option<String> = redis::cmd("GET").arg("a").query(&mut c).expect("get a");
    assert_eq!(a, None);
    // The WATCH went with it: a write to `w` no longer aborts a transaction.
    let _: () = redis::cmd("SET")
        .arg("w")
        .arg(1)
        .query(&mut other)
        .expect("set w");
    let r: Option<Vec<String>> = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("w")
        .arg(2)
        .query(&mut c)
        .expect("exec");
    assert!(
        r.is_some(),
        "EXEC aborted by a WATCH that RESET should have dropped"
    );
}

#[test]
fn replicaof_is_a_config_parameter_too() {
    // REPLICAOF at run time shows in CONFIG GET replicaof / slaveof; CONFIG SET may not
    // change it (immutable in Redis 7.0), the config file may.
    let s = Server::start(2);
    let mut c = Raw::connect(s.port);
    assert_eq!(c.c("CONFIG GET replicaof"), bulks(&["replicaof", ""]));
    assert_eq!(c.c("REPLICAOF 127.0.0.1 9"), ok());
    assert_eq!(
        c.c("CONFIG GET replicaof"),
        bulks(&["replicaof", "127.0.0.1 9"])
    );
    assert_eq!(
        c.c("CONFIG GET slaveof"),
        bulks(&["slaveof", "127.0.0.1 9"])
    );
    let all = pairs(c.c("CONFIG GET *of"));
    assert!(
        all.contains(&("replicaof".into(), "127.0.0.1 9".into())),
        "{all:?}"
    );
    assert!(
        all.contains(&("slaveof".into(), "127.0.0.1 9".into())),
        "{all:?}"
    );
    assert_eq!(
        c.cmd(&[b"CONFIG", b"SET", b"replicaof", b"no one"]),
        e("ERR CONFIG SET failed (possibly related to argument 'replicaof') - can't set immutable config")
    );
    assert_eq!(c.c("REPLICAOF NO ONE"), ok());
    assert_eq!(c.c("CONFIG GET replicaof"), bulks(&["replicaof", ""]));
    drop(c);
    drop(s);

    let (p, path) = start_from_config_file("replica.conf", |port| {
        format!("port {port}\nreplicaof 127.0.0.1 9\n")
    });
    let mut c = Raw::connect(p.port);
    assert_eq!(
        c.c("CONFIG GET replicaof"),
        bulks(&["replicaof", "127.0.0.1 9"])
    );
    assert_eq!(c.c("ROLE").items()[0], b("slave"));
    assert_eq!(
        c.c("SET k v"),
        e("READONLY You can't write against a read only replica.")
    );
    drop(c);
    drop(p);
    let _ = std::fs::remove_file(path);

    let path = temp_file("badreplica.conf", "replicaof 127.0.0.1 99999\n");
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg(&path)
        .output()
        .expect("run tessera");
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Invalid master port"), "{text}");
    let _ = std::fs::remove_file(path);
}

/// INFO's rdb_changes_since_last_save counts the keys writes changed, on every shard
/// (writes that changed nothing count nothing); SAVE brings it back to 0, counts in
/// rdb_saves and moves LASTSAVE.
#[test]
fn dirty_counter_counts_changes_and_save_resets_it() {
    let dir = std::env::temp_dir().join(format!("tessera-test-{}-save", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let s = Server::start_with(2, &["--dir", dir.to_str().expect("utf-8 path")]);
    let mut c = s.client();
    let field = |c: &mut redis::Connection, name: &str| -> u64 {
        let text: String = q(c, &["INFO", "persistence"]);
        info_field(&text, name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {text}"))
    };
    let d0 = field(&mut c, "rdb_changes_since_last_save");
    let _: () = q(&mut c, &["SET", KEY_SHARD0, "1"]);
    let _: () = q(&mut c, &["SET", KEY_SHARD1, "1"]);
    let _: i64 = q(&mut c, &["SADD", "s{t}", "a"]);
    let _: i64 = q(&mut c, &["SADD", "s{t}", "a"]);
    let _: i64 = q(&mut c, &["DEL", "missing"]);
    let _: () = q(&mut c, &["MSET", KEY_SHARD0, "2", KEY_SHARD1, "2"]);
    assert_eq!(field(&mut c, "rdb_changes_since_last_save"), d0 + 5);
    let before: i64 = q(&mut c, &["LASTSAVE"]);
    let _: () = q(&mut c, &["SAVE"]);
    assert_eq!(field(&mut c, "rdb_changes_since_last_save"), 0);
    assert_eq!(field(&mut c, "rdb_saves"), 1);
    let after: i64 = q(&mut c, &["LASTSAVE"]);
    assert!(after >= before, "LASTSAVE went from {before} to {after}");
    assert_eq!(field(&mut c, "rdb_last_save_time"), after as u64);
    assert!(dir.join("dump.rdb").exists(), "SAVE wrote no dump.rdb");
    let _ = std::fs::remove_dir_all(&dir);
}

/// LOLWUT as Redis 7.0: the bare command (and any version but 5 and 6) is the version
/// banner, byte for byte; VERSION 5 and 6 draw pictures of the size asked (random,
/// as in Redis, so only their shape and texts are compared).
#[test]
fn lolwut_banner_and_drawings() {
    let server = Server::start(2);
    let mut c = server.client();
    let text = |c: &mut redis::Connection, args: &[&str]| -> String {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(c).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    };
    assert_eq!(text(&mut c, &["LOLWUT"]), "Redis ver. 7.0.15\n");
    assert_eq!(text(&mut c, &["LOLWUT", "abc"]), "Redis ver. 7.0.15\n");
    assert_eq!(
        text(&mut c, &["LOLWUT", "VERSION", "7"]),
        "Redis ver. 7.0.15\n"
    );
    let five = text(&mut c, &["LOLWUT", "VERSION", "5", "40", "4", "2"]);
    let lines: Vec<&str> = five.lines().collect();
    // 80 x (76 / 4 = 19 per square, 2 rows, + 4) = 42 pixels tall: 11 text rows,
    // each ended by a newline (42 - 1 is not a row start), then the caption's.
    assert_eq!(lines.len(), 13, "{five}");
    assert!(lines[..11].iter().all(|l| l.chars().count() == 40));
    assert_eq!(lines[11], "");
    assert_eq!(
        lines[12],
        "Georg Nees - schotter, plotter on paper, 1968. Redis ver. 7.0.15"
    );
    let six = text(&mut c, &["LOLWUT", "VERSION", "6", "30", "10"]);
    let lines: Vec<&str> = six.lines().collect();
    assert_eq!(lines.len(), 12);
    assert!(lines[..10]
        .iter()
        .all(|l| l.matches("\x1b[0m").count() == 30));
    assert_eq!(
        lines[11],
        "Original 8 bit image from Plaguemon by hikikomori. Redis ver. 7.0.15"
    );
    assert!(err(&mut c, &["LOLWUT", "VERSION", "x"]).contains("not an integer"));
    assert!(err(&mut c, &["LOLWUT", "VERSION", "5", "wide"]).contains("not an integer"));
    if let Some(reference) = ReferenceRedis::start() {
        let mut r = reference.client();
        for args in [
            &["LOLWUT"][..],
            &["LOLWUT", "abc"],
            &["LOLWUT", "VERSION", "7"],
        ] {
            assert_eq!(text(&mut c, args), text(&mut r, args));
        }
        let theirs = text(&mut r, &["LOLWUT", "VERSION", "5", "40", "4", "2"]);
        assert_eq!(theirs.lines().count(), five.lines().count());
        let theirs = text(&mut r, &["LOLWUT", "VERSION", "6", "30", "10"]);
        assert_eq!(theirs.lines().count(), six.lines().count());
    }
}
