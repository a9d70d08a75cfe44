//! Protections Redis users rely on, checked side by side with a real redis-server
//! 7.0.15 wherever Redis has an answer: protected mode (a client from a non-loopback
//! address, reproduced on one host by binding the client socket to 127.0.0.2, which
//! Redis does not count as local), the gating of DEBUG and MODULE and of protected
//! configs, protocol limits and argument parsing where Tessera used to differ.

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::os::fd::FromRawFd;
use std::time::{Duration, Instant};

/// A TCP connection to 127.0.0.1:`port` whose local address is `from`.
fn connect_from(from: Ipv4Addr, port: u16) -> TcpStream {
    // SAFETY: plain socket calls on a descriptor this function owns until it is
    // handed to TcpStream, which then closes it.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket");
        let stream = TcpStream::from_raw_fd(fd);
        let sockaddr = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(ip).to_be(),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let local = sockaddr(from, 0);
        let rc = libc::bind(fd, &local as *const _ as *const libc::sockaddr, len);
        assert_eq!(rc, 0, "bind to {from}");
        let remote = sockaddr(Ipv4Addr::LOCALHOST, port);
        let rc = libc::connect(fd, &remote as *const _ as *const libc::sockaddr, len);
        assert_eq!(rc, 0, "connect to port {port}");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        stream
    }
}

/// Sends `req` and reads one line-terminated reply (or what came before a close).
fn one_line(s: &mut TcpStream, req: &[u8]) -> String {
    s.write_all(req).expect("write");
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while !out.ends_with(b"\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn from_127_0_0_2(port: u16, req: &[u8]) -> String {
    one_line(&mut connect_from(Ipv4Addr::new(127, 0, 0, 2), port), req)
}

fn from_loopback(port: u16, req: &[u8]) -> String {
    one_line(&mut connect_from(Ipv4Addr::LOCALHOST, port), req)
}

/// Sends each request on its own connection to both servers: the replies are equal.
fn same_replies(tessera: u16, redis: u16, reqs: &[&[u8]]) {
    for req in reqs {
        assert_eq!(
            from_loopback(tessera, req),
            from_loopback(redis, req),
            "{}",
            String::from_utf8_lossy(req)
        );
    }
}

fn reference(extra: &[&str]) -> ReferenceRedis {
    ReferenceRedis::start_with(extra).expect("redis-server 7.0.15 must be installed")
}

fn info_field(c: &mut redis::Connection, name: &str) -> u64 {
    let info: String = q(c, &["INFO", "stats"]);
    let tag = format!("{name}:");
    info.lines()
        .find_map(|l| l.strip_prefix(&tag))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in INFO"))
}

#[test]
fn protected_mode_refuses_non_local_peers_as_redis() {
    let redis = reference(&[]);
    let tessera = Server::start(2);
    // Protected mode is on by default, and the default user has no password.
    let want = from_127_0_0_2(redis.port, b"PING\r\n");
    assert!(
        want.starts_with("-DENIED Redis is running in protected mode"),
        "{want}"
    );
    for _ in 0..4 {
        // Several connections, so that both shards' listeners are exercised.
        assert_eq!(from_127_0_0_2(tessera.port, b"PING\r\n"), want);
    }
    let mut c = tessera.client();
    assert_eq!(info_field(&mut c, "rejected_connections"), 4);
    assert_eq!(from_loopback(tessera.port, b"PING\r\n"), "+PONG\r\n");
    // SET and CONFIG are refused just the same: nothing is read before the refusal.
    let set = from_127_0_0_2(tessera.port, b"SET k v\r\n");
    assert!(set.starts_with("-DENIED"), "{set}");
    let exists: i64 = q(&mut c, &["EXISTS", "k"]);
    assert_eq!(exists, 0);

    // Turning it off at run time lets the same peer in.
    let _: () = q(&mut c, &["CONFIG", "SET", "protected-mode", "no"]);
    assert_eq!(from_127_0_0_2(tessera.port, b"PING\r\n"), "+PONG\r\n");
    // A password for the default user lifts it too: the peer must authenticate.
    let _: () = q(&mut c, &["CONFIG", "SET", "protected-mode", "yes"]);
    let _: () = q(&mut c, &["CONFIG", "SET", "requirepass", "pw"]);
    let mut r = redis.client();
    let _: () = q(&mut r, &["CONFIG", "SET", "requirepass", "pw"]);
    let want = from_127_0_0_2(redis.port, b"PING\r\n");
    assert_eq!(want, "-NOAUTH Authentication required.\r\n");
    assert_eq!(from_127_0_0_2(tessera.port, b"PING\r\n"), want);
}

#[test]
fn protected_mode_ignores_bind_and_can_be_off() {
    // Redis 7.0 protects whatever `bind` says.
    let tessera = Server::start_with(1, &["--bind", "127.0.0.1", "--protected-mode", "yes"]);
    let got = from_127_0_0_2(tessera.port, b"PING\r\n");
    assert!(got.starts_with("-DENIED"), "{got}");
    let open = Server::start_with(1, &["--protected-mode", "no"]);
    assert_eq!(from_127_0_0_2(open.port, b"PING\r\n"), "+PONG\r\n");
}

/// The three settings `no`, `local` and `yes` of enable-debug-command, for a local
/// peer and one from 127.0.0.2 (protected mode off so that it may connect at all).
#[test]
fn debug_and_module_run_only_as_their_settings_allow() {
    let redis = reference(&["--protected-mode", "no"]);
    let denied = from_loopback(redis.port, b"DEBUG SLEEP 0\r\n");
    assert!(
        denied.starts_with("-ERR DEBUG command not allowed."),
        "{denied}"
    );
    // MODULE LIST and HELP are not protected in Redis 7.0; LOAD, LOADEX, UNLOAD are.
    assert_eq!(from_loopback(redis.port, b"MODULE LIST\r\n"), "*0\r\n");
    let module_denied = from_loopback(redis.port, b"MODULE UNLOAD x\r\n");
    assert!(
        module_denied.starts_with("-ERR MODULE command not allowed."),
        "{module_denied}"
    );

    let no = Server::start_with(
        2,
        &["--enable-debug-command", "no", "--protected-mode", "no"],
    );
    let t0 = Instant::now();
    assert_eq!(from_loopback(no.port, b"DEBUG SLEEP 2\r\n"), denied);
    assert_eq!(from_loopback(no.port, b"DEBUG SLEEP abc\r\n"), denied);
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "DEBUG SLEEP must not run"
    );
    assert_eq!(
        from_loopback(no.port, b"MODULE UNLOAD x\r\n"),
        module_denied
    );
    assert_eq!(
        from_loopback(no.port, b"MODULE LOAD /x.so\r\n"),
        module_denied
    );
    assert_eq!(from_loopback(no.port, b"MODULE LIST\r\n"), "*0\r\n");
    // Arity comes first, as in Redis.
    assert_eq!(
        from_loopback(no.port, b"DEBUG\r\n"),
        from_loopback(redis.port, b"DEBUG\r\n")
    );

    let local = Server::start_with(
        2,
        &[
            "--enable-debug-command",
            "local",
            "--enable-module-command",
            "local",
            "--protected-mode",
            "no",
        ],
    );
    assert_eq!(from_loopback(local.port, b"DEBUG SLEEP 0\r\n"), "+OK\r\n");
    assert_eq!(from_127_0_0_2(local.port, b"DEBUG SLEEP 0\r\n"), denied);
    assert_eq!(from_127_0_0_2(local.port, b"MODULE LIST\r\n"), "*0\r\n");
    let unload = from_loopback(local.port, b"MODULE UNLOAD x\r\n");
    assert!(
        unload.starts_with("-ERR Error unloading module"),
        "{unload}"
    );
    assert_eq!(
        from_127_0_0_2(local.port, b"MODULE UNLOAD x\r\n"),
        module_denied
    );

    let yes = Server::start_with(
        1,
        &[
            "--enable-debug-command",
            "yes",
            "--enable-module-command",
            "yes",
            "--protected-mode",
            "no",
        ],
    );
    assert_eq!(from_127_0_0_2(yes.port, b"DEBUG SLEEP 0\r\n"), "+OK\r\n");
    let open_redis = reference(&["--enable-module-command", "yes"]);
    same_replies(
        yes.port,
        open_redis.port,
        &[
            &b"MODULE LIST\r\n"[..],
            b"MODULE LOAD /nonexistent/module.so\r\n",
            b"MODULE LOADEX /nonexistent/module.so CONFIG a b ARGS x\r\n",
            b"MODULE UNLOAD nosuchmodule\r\n",
            b"MODULE NOSUCH\r\n",
        ],
    );
}

#[test]
fn protected_configs_local_means_a_local_peer() {
    let tessera = Server::start_with(
        1,
        &[
            "--enable-protected-configs",
            "local",
            "--protected-mode",
            "no",
        ],
    );
    let dir = std::env::temp_dir();
    let req = format!(
        "*4\r\n$6\r\nCONFIG\r\n$3\r\nSET\r\n$3\r\ndir\r\n${}\r\n{}\r\n",
        dir.to_string_lossy().len(),
        dir.to_string_lossy()
    );
    assert_eq!(from_loopback(tessera.port, req.as_bytes()), "+OK\r\n");
    let remote = from_127_0_0_2(tessera.port, req.as_bytes());
    assert!(
        remote.contains("can't set protected config"),
        "a non-local peer must be refused: {remote}"
    );
}

#[test]
fn protocol_limits_match_redis() {
    let redis = reference(&[]);
    let tessera = Server::start(2);

    // An inline command whose terminator is already buffered is run however long.
    let mut ping = b"PING".to_vec();
    ping.resize(70_004, b' ');
    ping.extend_from_slice(b"\r\n");
    assert_eq!(from_loopback(redis.port, &ping), "+PONG\r\n");
    assert_eq!(from_loopback(tessera.port, &ping), "+PONG\r\n");

    // More than 1,048,576 arguments are allowed, as in Redis (up to INT_MAX).
    let n = 1_048_577usize;
    let mut del = format!("*{n}\r\n$3\r\nDEL\r\n").into_bytes();
    for i in 1..n {
        let key = format!("k{i}");
        del.extend_from_slice(format!("${}\r\n{key}\r\n", key.len()).as_bytes());
    }
    assert_eq!(from_loopback(redis.port, &del), ":0\r\n");
    assert_eq!(from_loopback(tessera.port, &del), ":0\r\n");
    same_replies(
        tessera.port,
        redis.port,
        &[&b"*2147483648\r\n"[..], b"*-\r\n"],
    );
}

/// Commands that used to answer differently from Redis: the reply of each, on a
/// dataset written identically to both servers.
#[test]
fn scan_cursors_and_lpos_rank_as_redis() {
    let redis = reference(&[]);
    let tessera = Server::start(2);
    let mut r = redis.client();
    let mut t = tessera.client();
    for c in [&mut r, &mut t] {
        let _: i64 = q(c, &["RPUSH", "l", "a", "b", "a", "c", "a"]);
        // An intset: Redis answers a small encoding whole, whatever the cursor. (A
        // hashtable set answers a cursor past its end with the bucket the cursor
        // masks to, which depends on Redis's random hash seed: checked below.)
        let _: i64 = q(c, &["SADD", "s", "1"]);
        let _: i64 = q(c, &["SADD", "hs", "x"]);
        let _: i64 = q(c, &["HSET", "h", "f", "v"]);
        let _: i64 = q(c, &["ZADD", "z", "1", "m"]);
    }
    let min = "-9223372036854775808";
    let cases: Vec<Vec<&str>> = vec![
        vec!["LPOS", "l", "a", "RANK", min],
        vec!["LPOS", "l", "a", "RANK", min, "COUNT", "0"],
        vec!["LPOS", "l", "a", "RANK", min, "COUNT", "1"],
        vec!["LPOS", "l", "a", "RANK", min, "COUNT", "2"],
        vec!["LPOS", "l", "a", "RANK", min, "MAXLEN", "2"],
        vec!["LPOS", "l", "z", "RANK", min],
        vec!["LPOS", "l", "a", "RANK", "-9223372036854775807"],
        vec!["LPOS", "l", "a", "RANK", "0"],
        vec!["SSCAN", "s", "-1"],
        vec!["HSCAN", "h", "-1"],
        vec!["ZSCAN", "z", "-1"],
        vec!["SSCAN", "s", ""],
        vec!["SCAN", "-18446744073709551616"],
        vec!["SCAN", "18446744073709551616"],
        vec!["SCAN", " 1"],
        vec!["SCAN", "-"],
    ];
    for args in cases {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        let want: redis::RedisResult<redis::Value> = cmd.query(&mut r);
        let got: redis::RedisResult<redis::Value> = cmd.query(&mut t);
        assert_eq!(format!("{got:?}"), format!("{want:?}"), "{args:?}");
    }
    // SCAN -1 is a valid cursor (strtoul wraps it): a reply, not an error. The keys
    // a cursor past the end returns depend on each server's table layout; both end
    // the iteration.
    for c in [&mut r, &mut t] {
        let (cursor, _keys): (String, Vec<String>) = q(c, &["SCAN", "-1"]);
        assert_eq!(cursor, "0");
        let (cursor, _members): (String, Vec<String>) = q(c, &["SSCAN", "hs", "-1"]);
        assert_eq!(cursor, "0");
    }
}

/// Before AUTH, Redis reports an unknown subcommand, a wrong argument count and a
/// protected command before NOAUTH.
#[test]
fn unauthenticated_errors_come_in_redis_order() {
    let redis = reference(&["--requirepass", "pw"]);
    let tessera = Server::start_with(2, &["--requirepass", "pw", "--enable-debug-command", "no"]);
    same_replies(
        tessera.port,
        redis.port,
        &[
            &b"CONFIG FOO\r\n"[..],
            b"CONFIG\r\n",
            b"CLIENT FOO BAR\r\n",
            b"XINFO FOO\r\n",
            b"OBJECT\r\n",
            b"GET\r\n",
            b"GET a b\r\n",
            b"DEBUG SLEEP 0\r\n",
            b"NOSUCHCOMMAND x\r\n",
            b"GET a\r\n",
            b"CONFIG GET port\r\n",
        ],
    );
}
