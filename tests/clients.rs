//! The clients cron and client classes over TCP: `timeout` closes idle clients (but
//! not subscribers, blocked clients, MONITORs or replica links), query buffers are given
//! back as Redis's clientsCron gives them back (CLIENT LIST's qbuf / qbuf-free), and
//! replica links show up as replicas (CLIENT LIST / KILL TYPE, INFO's `slaveN:` line).

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The CLIENT LIST line of the client named `name`.
fn client_line(c: &mut redis::Connection, name: &str) -> Option<String> {
    let list: String = q(c, &["CLIENT", "LIST"]);
    let tag = format!(" name={name} ");
    list.lines().find(|l| l.contains(&tag)).map(str::to_string)
}

fn field(line: &str, name: &str) -> u64 {
    let tag = format!(" {name}=");
    let at = line.find(&tag).map(|i| i + tag.len());
    let v = at.map(|i| &line[i..]).and_then(|r| r.split(' ').next());
    v.and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {line}"))
}

/// A numeric field of an INFO reply.
fn info_field(info: &str, name: &str) -> u64 {
    let tag = format!("{name}:");
    info.lines()
        .find_map(|l| l.strip_prefix(&tag))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {info}"))
}

/// qbuf + qbuf-free: the query buffer's allocated size, as Redis's own test sums it.
fn query_buffer(c: &mut redis::Connection, name: &str) -> u64 {
    let line = client_line(c, name).expect("client listed");
    field(&line, "qbuf") + field(&line, "qbuf-free")
}

/// Waits up to `secs` for `cond`, checking every 50 ms.
fn eventually(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// True when the peer closed `s` (read returns end of file within the timeout).
fn closed(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(200))).ok();
    let mut b = [0u8; 64];
    matches!(s.read(&mut b), Ok(0))
}

#[test]
fn timeout_closes_idle_clients_only() {
    let s = Server::start(2);
    let mut admin = s.client();
    // Clients on both shards: connections are spread over them.
    let mut idle: Vec<TcpStream> = (0..4).map(|_| s.raw()).collect();
    let mut sub = s.raw();
    sub.write_all(b"SUBSCRIBE news\r\n").unwrap();
    read_at_least(&mut sub, 10);
    let mut monitor = s.raw();
    monitor.write_all(b"MONITOR\r\n").unwrap();
    read_at_least(&mut monitor, 5);
    let (_, blocked) = spawn_blocked(&s, &["BLPOP", "queue", "0"]);
    wait_blocked(&mut admin, 1);
    let _: () = q(&mut admin, &["CONFIG", "SET", "timeout", "1"]);

    // Idle for over a second: closed within the next cron passes. (The admin client
    // stays busy meanwhile, or it would be closed too.)
    let start = Instant::now();
    for c in idle.iter_mut() {
        assert!(
            eventually(5, || {
                let _: String = q(&mut admin, &["PING"]);
                closed(c)
            }),
            "idle client still open after {:?}",
            start.elapsed()
        );
    }
    assert!(start.elapsed() >= Duration::from_millis(900));
    // The others are still there and still served.
    let _: i64 = q(&mut admin, &["LPUSH", "queue", "job"]);
    let got = blocked.join().unwrap().unwrap();
    assert_eq!(
        got,
        redis::Value::Array(vec![
            redis::Value::BulkString(b"queue".to_vec()),
            redis::Value::BulkString(b"job".to_vec()),
        ])
    );
    let receivers: i64 = q(&mut admin, &["PUBLISH", "news", "hello"]);
    assert_eq!(receivers, 1);
    let msg = String::from_utf8_lossy(&read_until_contains(&mut sub, b"hello")).into_owned();
    assert!(msg.contains("hello"), "{msg}");
    let feed = String::from_utf8_lossy(&read_until_contains(&mut monitor, b"\"LPUSH\" \"queue\""))
        .into_owned();
    assert!(feed.contains("\"LPUSH\" \"queue\""), "{feed}");

    // timeout 0 (the default) never closes anyone.
    let _: () = q(&mut admin, &["CONFIG", "SET", "timeout", "0"]);
    let mut quiet = s.raw();
    std::thread::sleep(Duration::from_millis(2500));
    quiet.write_all(b"PING\r\n").unwrap();
    assert_eq!(read_at_least(&mut quiet, 7), b"+PONG\r\n");
}

#[test]
fn query_buffer_is_given_back_when_idle_or_oversized() {
    let s = Server::start(2);
    let mut admin = s.client();
    let mut c = s.client();
    let _: () = q(&mut c, &["CLIENT", "SETNAME", "probe"]);
    // A fresh client reads into one 16 KiB chunk.
    let fresh = query_buffer(&mut admin, "probe");
    assert!((16384..32768).contains(&fresh), "{fresh}");

    // A 400 KB request grows it; later small requests let the cron shrink it back
    // to what they need, not to nothing (the client is not idle).
    let big = "A".repeat(400_000);
    let _: () = q(&mut c, &["SET", "x", &big]);
    let grown = query_buffer(&mut admin, "probe");
    assert!(grown > 32768, "{grown}");
    // The cron's next pass (hz 10) records the big buffer for INFO clients.
    assert!(
        eventually(3, || {
            let info: String = q(&mut admin, &["INFO", "clients"]);
            info_field(&info, "client_recent_max_input_buffer") >= 400_000
        }),
        "INFO never showed the big query buffer"
    );
    assert!(
        eventually(3, || {
            let _: () = q(&mut c, &["SET", "x", "small"]);
            let now = query_buffer(&mut admin, "probe");
            now > 0 && now < grown
        }),
        "buffer never shrank below {grown}"
    );

    // rbs is the reply buffer it holds, rbp the biggest write since the cron's last
    // look: a 400 KB reply grows both.
    let _: String = q(&mut c, &["GET", "x"]);
    let _: String = q(&mut c, &["SET", "x", &big]);
    let _: String = q(&mut c, &["GET", "x"]);
    let line = client_line(&mut admin, "probe").expect("client listed");
    assert!(field(&line, "rbs") >= 400_000, "{line}");
    assert!(field(&line, "rbp") >= 400_000, "{line}");

    // Idle for over two seconds: all of it is freed (query and reply buffers), and the
    // next request still works.
    assert!(
        eventually(6, || query_buffer(&mut admin, "probe") == 0),
        "idle buffer kept: {:?}",
        client_line(&mut admin, "probe")
    );
    // rbp forgets the big write after its 5 s period, as Redis's buf_peak.
    assert!(
        eventually(8, || {
            let line = client_line(&mut admin, "probe").expect("client listed");
            (field(&line, "rbs"), field(&line, "rbp")) == (0, 0)
        }),
        "reply buffer kept: {:?}",
        client_line(&mut admin, "probe")
    );
    let _: () = q(&mut c, &["SET", "y", &big]);
    let back: String = q(&mut c, &["GET", "y"]);
    assert_eq!(back.len(), big.len());
}

#[test]
fn replica_links_are_replicas() {
    let s = Server::start(2);
    let mut admin = s.client();
    // REPLCONF's options as a replica sends them, and what Redis refuses.
    assert!(err(&mut admin, &["REPLCONF", "bogus", "1"])
        .contains("Unrecognized REPLCONF option: bogus"));
    assert!(err(&mut admin, &["REPLCONF", "listening-port", "x"]).contains("not an integer"));

    let mut link = s.raw();
    link.write_all(b"REPLCONF listening-port 6390\r\nREPLCONF capa eof\r\nSYNC\r\n")
        .unwrap();
    // +OK, +OK, then the snapshot's $<len>.
    let head = String::from_utf8_lossy(&read_at_least(&mut link, 20)).into_owned();
    assert!(head.starts_with("+OK\r\n+OK\r\n$"), "{head}");
    link.write_all(b"*3\r\n$8\r\nREPLCONF\r\n$3\r\nACK\r\n$2\r\n42\r\n")
        .unwrap();
    let mut sub = s.raw();
    sub.write_all(b"SUBSCRIBE news\r\n").unwrap();
    read_at_least(&mut sub, 10);

    let line = "slave0:ip=127.0.0.1,port=6390,state=online,offset=42,lag=";
    assert!(
        eventually(3, || {
            let info: String = q(&mut admin, &["INFO", "replication"]);
            info.contains("connected_slaves:1\r\n") && info.contains(line)
        }),
        "{}",
        q::<String>(&mut admin, &["INFO", "replication"])
    );
    let replicas: String = q(&mut admin, &["CLIENT", "LIST", "TYPE", "replica"]);
    assert_eq!(replicas.lines().count(), 1, "{replicas}");
    assert!(replicas.contains(" flags=S ") && replicas.contains(" cmd=sync "));
    let subscribers: String = q(&mut admin, &["CLIENT", "LIST", "TYPE", "pubsub"]);
    assert_eq!(subscribers.lines().count(), 1, "{subscribers}");
    assert!(subscribers.contains(" flags=P "));
    let normal: String = q(&mut admin, &["CLIENT", "LIST", "TYPE", "normal"]);
    assert_eq!(normal.lines().count(), 1, "{normal}");
    let all: String = q(&mut admin, &["CLIENT", "LIST"]);
    assert_eq!(all.lines().count(), 3, "{all}");
    let masters: String = q(&mut admin, &["CLIENT", "LIST", "TYPE", "master"]);
    assert!(masters.is_empty(), "{masters}");

    // CLIENT KILL TYPE slave ends the link and nothing else.
    let killed: i64 = q(&mut admin, &["CLIENT", "KILL", "TYPE", "slave"]);
    assert_eq!(killed, 1);
    assert!(eventually(3, || closed(&mut link)));
    let info: String = q(&mut admin, &["INFO", "replication"]);
    assert!(info.contains("connected_slaves:0\r\n") && !info.contains("slave0:"));
    let receivers: i64 = q(&mut admin, &["PUBLISH", "news", "still"]);
    assert_eq!(receivers, 1);
}

/// CLIENT SETINFO (Redis 7.2): lib-name / lib-ver shown at the end of CLIENT LIST and
/// CLIENT INFO, refused with spaces or control characters, cleared by an empty value,
/// kept by RESET.
#[test]
fn client_setinfo_names_the_library() {
    let server = Server::start(2);
    let mut c = server.client();
    q::<String>(&mut c, &["CLIENT", "SETNAME", "lib-user"]);
    assert_eq!(
        q::<String>(&mut c, &["CLIENT", "SETINFO", "LIB-NAME", "redis-py"]),
        "OK"
    );
    assert_eq!(
        q::<String>(&mut c, &["CLIENT", "SETINFO", "lib-ver", "5.2.1"]),
        "OK"
    );
    let line = client_line(&mut c, "lib-user").expect("listed");
    assert!(
        line.ends_with(" resp=2 lib-name=redis-py lib-ver=5.2.1"),
        "{line}"
    );
    let info: String = q(&mut c, &["CLIENT", "INFO"]);
    assert!(
        info.trim_end().ends_with("lib-name=redis-py lib-ver=5.2.1"),
        "{info}"
    );
    assert!(err(&mut c, &["CLIENT", "SETINFO", "lib-name", "two words"])
        .contains("lib-name cannot contain spaces, newlines or special characters."));
    assert!(err(&mut c, &["CLIENT", "SETINFO", "lib-color", "x"])
        .contains("Unrecognized option 'lib-color'"));
    assert!(err(&mut c, &["CLIENT", "SETINFO", "lib-name"])
        .contains("wrong number of arguments for 'client|setinfo' command"));
    q::<String>(&mut c, &["RESET"]);
    q::<String>(&mut c, &["CLIENT", "SETNAME", "lib-user"]);
    q::<String>(&mut c, &["CLIENT", "SETINFO", "lib-ver", ""]);
    let line = client_line(&mut c, "lib-user").expect("listed");
    assert!(line.ends_with(" lib-name=redis-py lib-ver="), "{line}");
}

/// CLIENT NO-TOUCH (Redis 7.2): the client's reads leave the keys' idle time alone,
/// on both shards, except TOUCH; another client's read still resets it; the mode
/// shows as flag T and ends with RESET.
#[test]
fn client_no_touch_leaves_idle_time_alone() {
    let server = Server::start(2);
    let mut quiet = server.client();
    let mut normal = server.client();
    let keys = ["{a}k", "{b}k"];
    for k in keys {
        q::<String>(&mut normal, &["SET", k, "v"]);
    }
    assert_eq!(q::<String>(&mut quiet, &["CLIENT", "NO-TOUCH", "ON"]), "OK");
    q::<String>(&mut quiet, &["CLIENT", "SETNAME", "quiet"]);
    let line = client_line(&mut normal, "quiet").expect("listed");
    assert!(line.contains(" flags=T "), "{line}");
    std::thread::sleep(Duration::from_millis(2100));
    let idle = |c: &mut redis::Connection, k: &str| q::<i64>(c, &["OBJECT", "IDLETIME", k]);
    for k in keys {
        assert_eq!(q::<String>(&mut quiet, &["GET", k]), "v");
        q::<i64>(&mut quiet, &["STRLEN", k]);
        assert!(idle(&mut normal, k) >= 2, "{k} touched by a NO-TOUCH read");
    }
    assert_eq!(q::<i64>(&mut quiet, &["TOUCH", keys[0]]), 1);
    assert_eq!(idle(&mut normal, keys[0]), 0);
    q::<String>(&mut normal, &["GET", keys[1]]);
    assert_eq!(idle(&mut normal, keys[1]), 0);
    assert!(err(&mut quiet, &["CLIENT", "NO-TOUCH", "maybe"]).contains("syntax error"));
    q::<String>(&mut quiet, &["RESET"]);
    q::<String>(&mut quiet, &["CLIENT", "SETNAME", "quiet"]);
    let line = client_line(&mut normal, "quiet").expect("listed");
    assert!(line.contains(" flags=N "), "{line}");
}

/// Sends one command as RESP on `s` and returns its one-line reply, bytes as sent.
fn raw_line(s: &mut TcpStream, args: &[&[u8]]) -> Vec<u8> {
    let mut req = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        req.extend_from_slice(a);
        req.extend_from_slice(b"\r\n");
    }
    s.write_all(&req).expect("write");
    read_until_contains(s, b"\r\n")
}

/// CLIENT SETINFO's and NO-TOUCH's refusals, byte for byte as Redis 7.2.4's
/// networking.c words them: the option as the client spelled it, any byte outside
/// '!'..='~' refused (space, newline, DEL, UTF-8), a NUL ending the value (Redis
/// checks and prints it as a C string), arity errors named by subcommand.
#[test]
fn client_setinfo_and_no_touch_refusals_are_exact() {
    let server = Server::start(2);
    let mut s = server.raw();
    let bad = |attr: &str| {
        format!("-ERR {attr} cannot contain spaces, newlines or special characters.\r\n")
            .into_bytes()
    };
    let cases: &[(&[&[u8]], Vec<u8>)] = &[
        (
            &[b"CLIENT", b"SETINFO", b"lib-color", b"x"],
            b"-ERR Unrecognized option 'lib-color'\r\n".to_vec(),
        ),
        (
            &[b"CLIENT", b"SETINFO", b"LIB-NAME", b"two words"],
            bad("LIB-NAME"),
        ),
        (
            &[b"CLIENT", b"SETINFO", b"lib-ver", b"1\n2"],
            bad("lib-ver"),
        ),
        (
            &[b"CLIENT", b"SETINFO", b"lib-name", b"del\x7f"],
            bad("lib-name"),
        ),
        (
            &[b"CLIENT", b"SETINFO", b"Lib-Name", "é".as_bytes()],
            bad("Lib-Name"),
        ),
        (
            &[b"CLIENT", b"SETINFO", b"lib-name"],
            b"-ERR wrong number of arguments for 'client|setinfo' command\r\n".to_vec(),
        ),
        (
            &[b"CLIENT", b"SETINFO", b"lib-name", b"a", b"b"],
            b"-ERR wrong number of arguments for 'client|setinfo' command\r\n".to_vec(),
        ),
        (
            &[b"CLIENT", b"NO-TOUCH", b"maybe"],
            b"-ERR syntax error\r\n".to_vec(),
        ),
        (
            &[b"CLIENT", b"NO-TOUCH"],
            b"-ERR wrong number of arguments for 'client|no-touch' command\r\n".to_vec(),
        ),
        (
            &[b"CLIENT", b"SETINFO", b"lib-name", b"ok\0 after nul"],
            b"+OK\r\n".to_vec(),
        ),
        (
            &[b"CLIENT", b"SETINFO", b"lib-ver", b"7.2-rc~1!"],
            b"+OK\r\n".to_vec(),
        ),
    ];
    for (args, want) in cases {
        let got = raw_line(&mut s, args);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want),
            "{:?}",
            args.iter()
                .map(|a| String::from_utf8_lossy(a))
                .collect::<Vec<_>>()
        );
    }
    // The refusals left nothing behind; the NUL cut the name where Redis's %s does.
    let info = raw_line(&mut s, &[b"CLIENT", b"INFO"]);
    let info = String::from_utf8_lossy(&info);
    let info = read_rest(&mut s, info.into_owned());
    assert!(info.contains(" lib-name=ok lib-ver=7.2-rc~1!"), "{info}");
}

/// CLIENT INFO's bulk reply may come in more than one read.
fn read_rest(s: &mut TcpStream, mut got: String) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !got.ends_with("\n\r\n") && Instant::now() < deadline {
        let more = read_until_contains(s, b"\r\n");
        got.push_str(&String::from_utf8_lossy(&more));
    }
    got
}

/// True once the server closed `s` (EOF or reset), past whatever it still had to
/// read; false if it stays open for 2 s.
fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(2))).ok();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => {
                return !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )
            }
        }
    }
}

/// CLIENT KILL MAXAGE (Redis 7.4): kills the clients connected at least that many
/// seconds ago, on every shard, ANDed with the other filters; 7.4.1's refusals.
#[test]
fn client_kill_maxage_kills_only_old_clients() {
    let server = Server::start(2);
    // Old ones: plain clients and subscribers, spread over both shards.
    let mut old: Vec<TcpStream> = (0..6).map(|_| server.raw()).collect();
    let mut old_subs: Vec<TcpStream> = (0..4).map(|_| server.raw()).collect();
    for s in &mut old_subs {
        let reply = raw_line(s, &[b"SUBSCRIBE", b"news"]);
        assert!(reply.starts_with(b"*3\r\n"), "{reply:?}");
    }
    std::thread::sleep(Duration::from_millis(2100));
    let mut young: Vec<TcpStream> = (0..6).map(|_| server.raw()).collect();
    for s in &mut young {
        assert_eq!(raw_line(s, &[b"PING"]), b"+PONG\r\n");
    }
    let mut admin = server.client();
    let refusals = [
        ("str", "ERR maxage is not an integer or out of range"),
        (
            "9999999999999999999",
            "ERR maxage is not an integer or out of range",
        ),
        ("0", "ERR maxage should be greater than 0"),
        ("-1", "ERR maxage should be greater than 0"),
    ];
    let mut raw_admin = server.raw();
    for (arg, text) in refusals {
        let got = raw_line(
            &mut raw_admin,
            &[b"CLIENT", b"KILL", b"MAXAGE", arg.as_bytes()],
        );
        assert_eq!(String::from_utf8_lossy(&got), format!("-{text}\r\n"));
    }
    // A young client's id with MAXAGE: both filters must hold, so nobody goes.
    let young_id: i64 = {
        let got = raw_line(&mut young[0], &[b"CLIENT", b"ID"]);
        let text = String::from_utf8_lossy(&got);
        text.trim_start_matches(':').trim().parse().expect("id")
    };
    let none: i64 = q(
        &mut admin,
        &["CLIENT", "KILL", "ID", &young_id.to_string(), "MAXAGE", "2"],
    );
    assert_eq!(none, 0);
    // TYPE pubsub MAXAGE 2: the old subscribers only.
    let subs: i64 = q(
        &mut admin,
        &["CLIENT", "KILL", "TYPE", "pubsub", "MAXAGE", "2"],
    );
    assert_eq!(subs, 4);
    for s in &mut old_subs {
        assert!(closed_by_server(s), "an old subscriber survived");
    }
    // MAXAGE 2 alone: the old plain clients; the young ones and the caller stay.
    let plain: i64 = q(&mut admin, &["CLIENT", "KILL", "MAXAGE", "2"]);
    assert_eq!(plain, 6);
    for s in &mut old {
        assert!(closed_by_server(s), "an old client survived");
    }
    for s in &mut young {
        assert_eq!(raw_line(s, &[b"PING"]), b"+PONG\r\n");
    }
    let n: i64 = q(&mut admin, &["CLIENT", "KILL", "MAXAGE", "1000"]);
    assert_eq!(n, 0);
}
