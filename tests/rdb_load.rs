//! Loading at start, black-box, on `tessera --threads 2`: a restart keeps the data;
//! while a file loads clients get -LOADING and INFO shows the progress; DEBUG RELOAD
//! saves and loads back; what Tessera cannot load (module data, more databases than
//! configured, a file that is not an RDB) stops it with Redis's message; and
//! `rdbcompression no` writes strings as they are. (Files moving between Tessera and
//! redis-server are tests/rdb_interop.rs's; the shutdown saves tests/shutdown.rs's.)

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-rdb-load-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn dir_args(dir: &Path) -> Vec<String> {
    vec![
        "--dir".into(),
        dir.display().to_string(),
        "--dbfilename".into(),
        "dump.rdb".into(),
    ]
}

fn start_in(dir: &Path, extra: &[&str]) -> Server {
    let mut args = dir_args(dir);
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let log = dir.join("tessera.log");
    Server::start_loading(2, &args, &log, Duration::from_secs(30))
        .unwrap_or_else(|f| panic!("tessera did not serve: {:?}\n{}", f.status, f.log))
}

/// Keys on both shards (and in two databases), written by a Tessera that SAVEs them.
fn write_dataset(dir: &Path, keys: usize) {
    let server = start_in(dir, &["--save", ""]);
    let mut c = server.client();
    let mut pipe = redis::pipe();
    for i in 0..keys {
        pipe.cmd("SET")
            .arg(format!("key:{i}"))
            .arg(format!("value:{i}"))
            .ignore();
    }
    pipe.query::<()>(&mut c).expect("populate");
    let _: () = redis::cmd("SELECT").arg(7).query(&mut c).expect("select");
    let _: () = redis::cmd("RPUSH")
        .arg("list")
        .arg(&["a", "b", "c"])
        .query(&mut c)
        .expect("rpush");
    let _: () = redis::cmd("SET")
        .arg("ttl")
        .arg("v")
        .arg("EX")
        .arg(1000)
        .query(&mut c)
        .expect("set");
    let _: () = redis::cmd("SAVE").query(&mut c).expect("save");
}

#[test]
fn a_restart_keeps_the_data() {
    let dir = temp_dir("restart");
    write_dataset(&dir, 1000);
    // Default save points: SIGTERM saves, the next start loads.
    let mut server = start_in(&dir, &[]);
    let mut c = server.client();
    let _: () = redis::cmd("SET")
        .arg("after")
        .arg("restart")
        .query(&mut c)
        .expect("set");
    server.signal(libc::SIGTERM);
    assert!(
        server.wait_exit(Duration::from_secs(10)).is_some(),
        "SIGTERM stops it"
    );

    let server = start_in(&dir, &[]);
    let mut c = server.client();
    assert_eq!(q::<usize>(&mut c, &["DBSIZE"]), 1001);
    assert_eq!(q::<String>(&mut c, &["GET", "key:17"]), "value:17");
    assert_eq!(q::<String>(&mut c, &["GET", "after"]), "restart");
    let _: () = redis::cmd("SELECT").arg(7).query(&mut c).expect("select");
    assert_eq!(
        q::<Vec<String>>(&mut c, &["LRANGE", "list", "0", "-1"]),
        ["a", "b", "c"]
    );
    let ttl: i64 = q(&mut c, &["TTL", "ttl"]);
    assert!((990..=1000).contains(&ttl), "the TTL survives: {ttl}");
    let info: String = q(&mut c, &["INFO", "persistence"]);
    assert!(
        info.contains("rdb_last_load_keys_loaded:1003\r\n"),
        "{info}"
    );
    assert!(info.contains("rdb_last_load_keys_expired:0\r\n"), "{info}");
    let log = std::fs::read_to_string(dir.join("tessera.log")).unwrap_or_default();
    for line in [
        "Done loading RDB, keys loaded: 1003, keys expired: 0.",
        "DB loaded from disk: ",
    ] {
        assert!(log.contains(line), "log lacks {line:?}:\n{log}");
    }
}

/// Sends one inline command on a fresh connection and returns the first reply line.
fn ask(port: u16, command: &str) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.write_all(format!("{command}\r\n").as_bytes());
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if command.starts_with("INFO") {
            // A bulk reply: read until the announced length has arrived.
            let text = String::from_utf8_lossy(&out);
            if let Some(len) = text.strip_prefix('$').and_then(|t| t.split("\r\n").next()) {
                let len: usize = len.parse().unwrap_or(0);
                if out.len() >= len + len.to_string().len() + 5 {
                    break;
                }
            }
        } else if out.ends_with(b"\r\n") {
            break;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn spawn_raw(dir: &Path, extra: &[&str]) -> (Child, u16) {
    let port = free_port();
    let log = std::fs::File::create(dir.join("raw.log")).expect("log");
    let child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["--port", &port.to_string(), "--threads", "2"])
        .args(dir_args(dir))
        .args(extra)
        .stdout(Stdio::from(log.try_clone().expect("log")))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawn tessera");
    (child, port)
}

#[test]
fn clients_get_loading_while_the_file_loads() {
    let dir = temp_dir("loading");
    write_dataset(&dir, 20_000);
    // 200 us a key of the file, in every shard: about four seconds of loading.
    let (mut child, port) = spawn_raw(
        &dir,
        &[
            "--key-load-delay",
            "200",
            "--loading-process-events-interval-bytes",
            "1024",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut reply = String::new();
    while Instant::now() < deadline && !reply.starts_with('-') {
        reply = ask(port, "GET key:1");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(reply, "-LOADING Redis is loading the dataset in memory\r\n");
    let info = ask(port, "INFO persistence");
    for field in [
        "loading:1\r\n",
        "loading_start_time:",
        "loading_total_bytes:",
        "loading_loaded_bytes:",
        "loading_loaded_perc:",
        "loading_eta_seconds:",
    ] {
        assert!(
            info.contains(field),
            "INFO while loading lacks {field:?}: {info}"
        );
    }
    // Commands flagged `loading` still run.
    assert!(ask(port, "LASTSAVE").starts_with(':'));
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && ask(port, "GET key:1") != "$7\r\nvalue:1\r\n" {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        ask(port, "GET key:1"),
        "$7\r\nvalue:1\r\n",
        "served once loaded"
    );
    assert!(ask(port, "INFO persistence").contains("loading:0\r\n"));
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_signal_during_loading_stops_the_server_without_saving() {
    let dir = temp_dir("signal");
    write_dataset(&dir, 20_000);
    let before = std::fs::read(dir.join("dump.rdb")).expect("dump");
    let (mut child, port) = spawn_raw(&dir, &["--key-load-delay", "500"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && !ask(port, "PING").starts_with("-LOADING") {
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut status = None;
    while Instant::now() < deadline && status.is_none() {
        status = child.try_wait().expect("wait");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(status.is_some(), "SIGTERM during loading stops the server");
    let after = std::fs::read(dir.join("dump.rdb")).expect("dump");
    assert!(
        before == after,
        "a half-loaded dataset must not overwrite its file"
    );
}

#[test]
fn debug_reload_saves_and_loads_back() {
    let dir = temp_dir("reload");
    let server = start_in(&dir, &["--save", ""]);
    let mut c = server.client();
    for i in 0..100 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(i)
            .query(&mut c)
            .expect("set");
    }
    let _: () = redis::cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("v")
        .query(&mut c)
        .expect("hset");
    assert_eq!(q::<String>(&mut c, &["DEBUG", "RELOAD"]), "OK");
    assert_eq!(q::<usize>(&mut c, &["DBSIZE"]), 101);
    assert_eq!(q::<String>(&mut c, &["HGET", "h", "f"]), "v");
    // NOSAVE: what the file holds replaces what is in memory.
    let _: () = redis::cmd("SET")
        .arg("unsaved")
        .arg(1)
        .query(&mut c)
        .expect("set");
    assert_eq!(q::<String>(&mut c, &["DEBUG", "RELOAD", "NOSAVE"]), "OK");
    assert_eq!(q::<usize>(&mut c, &["EXISTS", "unsaved"]), 0);
    // NOFLUSH MERGE: the file's keys join (and replace) those in memory.
    let _: () = redis::cmd("SET")
        .arg("k1")
        .arg("changed")
        .query(&mut c)
        .expect("set");
    let _: () = redis::cmd("SET")
        .arg("extra")
        .arg(1)
        .query(&mut c)
        .expect("set");
    assert_eq!(
        q::<String>(&mut c, &["DEBUG", "RELOAD", "NOSAVE", "NOFLUSH", "MERGE"]),
        "OK"
    );
    assert_eq!(q::<String>(&mut c, &["GET", "k1"]), "1");
    assert_eq!(q::<usize>(&mut c, &["DBSIZE"]), 102);
    let refused = err(&mut c, &["DEBUG", "RELOAD", "BOGUS"]);
    assert!(
        refused.contains("DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options."),
        "{refused}"
    );
}

/// DEBUG RELOAD NOFLUSH of a file holding a library that is loaded: Redis answers an
/// error and goes on, its dataset untouched (it reads libraries before keys); with
/// MERGE the file's library replaces it.
#[test]
fn debug_reload_noflush_refuses_a_library_already_loaded() {
    let dir = temp_dir("reload-lib");
    let server = start_in(&dir, &["--save", ""]);
    let mut c = server.client();
    let code = "#!lua name=test\nredis.register_function('test', function() return 'hello' end)";
    assert_eq!(q::<String>(&mut c, &["FUNCTION", "LOAD", code]), "test");
    let refused = err(&mut c, &["DEBUG", "RELOAD", "NOFLUSH"]);
    assert!(
        refused.contains("Error trying to load the RDB dump"),
        "{refused}"
    );
    assert_eq!(q::<String>(&mut c, &["PING"]), "PONG");
    assert_eq!(q::<String>(&mut c, &["FCALL", "test", "0"]), "hello");
    assert_eq!(
        q::<String>(&mut c, &["DEBUG", "RELOAD", "NOFLUSH", "MERGE"]),
        "OK"
    );
    assert_eq!(q::<String>(&mut c, &["FCALL", "test", "0"]), "hello");
}

/// An RDB file (version 10) of `body` records, with EOF and a correct CRC64.
fn rdb_file(body: &[u8]) -> Vec<u8> {
    let mut out = b"REDIS0010".to_vec();
    out.extend_from_slice(body);
    out.push(0xFF);
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Starts Tessera on `file` and expects it to exit non-zero with `line` in its log.
fn refused_with(name: &str, file: &[u8], line: &str) {
    let dir = temp_dir(name);
    std::fs::write(dir.join("dump.rdb"), file).expect("write rdb");
    let (mut child, _) = spawn_raw(&dir, &[]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut status = None;
    while Instant::now() < deadline && status.is_none() {
        status = child.try_wait().expect("wait");
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = std::fs::read_to_string(dir.join("raw.log")).unwrap_or_default();
    let Some(status) = status else {
        let _ = child.kill();
        panic!("{name}: tessera kept running on a file it cannot load:\n{log}");
    };
    assert!(!status.success(), "{name}: exit status {status}");
    assert!(log.contains(line), "{name}: log lacks {line:?}:\n{log}");
    assert!(
        !log.contains("Ready to accept"),
        "{name}: it must not serve:\n{log}"
    );
}

#[test]
fn files_it_cannot_load_stop_it_with_redis_messages() {
    // A module value (type 7): key "m", module id of type "mytype123" version 0.
    let id: u64 = {
        const CHARSET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut id = 0u64;
        for c in b"mytype123" {
            let pos = CHARSET.iter().position(|x| x == c).expect("charset") as u64;
            id = (id << 6) | pos;
        }
        id << 10
    };
    let mut module = vec![0xFE, 0, 7, 1, b'm', 0x81];
    module.extend_from_slice(&id.to_be_bytes());
    refused_with(
        "module",
        &rdb_file(&module),
        "The RDB file contains module data I can't load: no matching module type 'mytype123'",
    );
    refused_with(
        "databases",
        &rdb_file(&[0xFE, 20, 0, 1, b'k', 1, b'v']),
        "FATAL: Data file was created with a Redis server configured to handle more than 16 databases. Exiting",
    );
    refused_with(
        "signature",
        b"NOTREDIS0010\xff",
        "Wrong signature trying to load DB from file",
    );
    let mut version_99 = rdb_file(b"");
    version_99[7..9].copy_from_slice(b"99");
    refused_with("version", &version_99, "Can't handle RDB format version 99");
    refused_with(
        "duplicate",
        &rdb_file(&[0xFE, 0, 0, 1, b'k', 1, b'v', 0, 1, b'k', 1, b'w']),
        "RDB has duplicated key 'k' in DB 0",
    );
}

#[test]
fn rdbcompression_no_writes_strings_as_they_are() {
    let server = Server::start(2);
    let mut c = server.client();
    let long = "a".repeat(100);
    let _: () = redis::cmd("SET")
        .arg("s")
        .arg(&long)
        .query(&mut c)
        .expect("set");
    let compressed: Vec<u8> = redis::cmd("DUMP").arg("s").query(&mut c).expect("dump");
    assert_eq!(compressed[1], 0xC3, "LZF by default: {compressed:?}");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("rdbcompression")
        .arg("no")
        .query(&mut c)
        .expect("config");
    let plain: Vec<u8> = redis::cmd("DUMP").arg("s").query(&mut c).expect("dump");
    assert_eq!(
        plain[1..3],
        [0x40, 100],
        "raw length then the bytes: {plain:?}"
    );
    assert_eq!(&plain[3..103], long.as_bytes());
}

#[test]
fn debug_populate_creates_the_missing_keys_on_every_shard() {
    let server = Server::start(2);
    let mut c = server.client();
    let _: () = redis::cmd("SET")
        .arg("key:3")
        .arg("mine")
        .query(&mut c)
        .expect("set");
    assert_eq!(q::<String>(&mut c, &["DEBUG", "POPULATE", "1000"]), "OK");
    assert_eq!(q::<usize>(&mut c, &["DBSIZE"]), 1000);
    assert_eq!(
        q::<String>(&mut c, &["GET", "key:3"]),
        "mine",
        "existing keys are kept"
    );
    assert_eq!(q::<String>(&mut c, &["GET", "key:999"]), "value:999");
    assert_eq!(
        q::<String>(&mut c, &["DEBUG", "POPULATE", "2", "p", "10"]),
        "OK"
    );
    let padded: Vec<u8> = redis::cmd("GET").arg("p:1").query(&mut c).expect("get");
    assert_eq!(padded, b"value:1\0\0\0");
    assert_eq!(
        q::<String>(&mut c, &["DEBUG", "POPULATE", "2", "q", "3"]),
        "OK"
    );
    assert_eq!(q::<String>(&mut c, &["GET", "q:0"]), "val");
    let refused = err(&mut c, &["DEBUG", "POPULATE", "-1"]);
    assert!(
        refused.contains("value is out of range, must be positive"),
        "{refused}"
    );
}
