//! DEBUG subcommands that clients' and Redis's own test suites use, black-box: their
//! replies and errors byte for byte against a real redis-server 7.0 where one is
//! installed, and the effect each has (replication ids, plain list nodes, checksum
//! validation, scripts calling no-script commands).

mod common;
use common::*;

use redis::Value;

/// The raw reply of one command sent as RESP, read until `expect_len` bytes came.
fn raw_reply(port: u16, args: &[&[u8]]) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("timeout");
    let mut req = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        req.extend_from_slice(a);
        req.extend_from_slice(b"\r\n");
    }
    s.write_all(&req).expect("write");
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while !out.ends_with(b"\r\n") {
        let n = s.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

#[test]
fn error_and_unknown_subcommands_reply_as_redis() {
    let server = Server::start(2);
    let cases: [&[&[u8]]; 5] = [
        &[b"DEBUG", b"ERROR", b"MYERR something went wrong"],
        &[b"DEBUG", b"ERROR", b"two\r\nlines\rand\nmore"],
        &[b"DEBUG", b"ERROR"],
        &[b"DEBUG", b"no-such-thing"],
        &[b"DEBUG", b"QUICKLIST-PACKED-THRESHOLD", b"5gb"],
    ];
    let want: [&[u8]; 5] = [
        b"-MYERR something went wrong\r\n",
        b"-two  lines and more\r\n",
        b"-ERR unknown subcommand or wrong number of arguments for 'ERROR'. Try DEBUG HELP.\r\n",
        b"-ERR unknown subcommand or wrong number of arguments for 'no-such-thing'. Try DEBUG HELP.\r\n",
        b"-ERR argument must be a memory value bigger than 1 and smaller than 4gb\r\n",
    ];
    for (args, want) in cases.iter().zip(want) {
        assert_eq!(
            String::from_utf8_lossy(&raw_reply(server.port, args)),
            String::from_utf8_lossy(want)
        );
    }
    if let Some(reference) = ReferenceRedis::start_with(&["--enable-debug-command", "yes"]) {
        for args in cases {
            assert_eq!(
                String::from_utf8_lossy(&raw_reply(server.port, args)),
                String::from_utf8_lossy(&raw_reply(reference.port, args)),
                "{args:?}"
            );
        }
    }
}

#[test]
fn change_repl_id_starts_a_new_history_without_a_second_one() {
    let server = Server::start(2);
    let mut c = server.client();
    let before = info_field(&mut c, "replication", "master_replid");
    assert_eq!(before.len(), 40);
    assert_eq!(q::<String>(&mut c, &["DEBUG", "CHANGE-REPL-ID"]), "OK");
    let after = info_field(&mut c, "replication", "master_replid");
    assert_eq!(after.len(), 40);
    assert_ne!(after, before);
    assert_eq!(
        info_field(&mut c, "replication", "master_replid2"),
        "0000000000000000000000000000000000000000"
    );
    assert_eq!(
        info_field(&mut c, "replication", "second_repl_offset"),
        "-1"
    );
}

/// The quicklist fields of DEBUG OBJECT: (ql_nodes, ql_avg_node).
fn ql_shape(c: &mut redis::Connection, key: &str) -> (String, String) {
    let line: String = q(c, &["DEBUG", "OBJECT", key]);
    let field = |name: &str| {
        line.split(' ')
            .find_map(|f| f.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} missing in {line}"))
            .to_string()
    };
    (field("ql_nodes:"), field("ql_avg_node:"))
}

/// Elements from the packed threshold up get a node each, as in Redis: the same
/// commands give the same node counts on both, and every list operation across
/// plain and packed nodes gives Redis's results (the Tcl suite's plain-node cases).
#[test]
fn packed_threshold_puts_large_elements_in_plain_nodes() {
    let dir = scratch_dir("debug", "plain-nodes");
    let dir_arg = dir.to_string_lossy().to_string();
    let server = Server::start_with(2, &["--dir", &dir_arg]);
    let reference = ReferenceRedis::start_with(&["--enable-debug-command", "yes"]);
    let mut clients = vec![server.client()];
    if let Some(r) = &reference {
        clients.push(r.client());
    }
    let script: &[&[&str]] = &[
        &["DEBUG", "QUICKLIST-PACKED-THRESHOLD", "5b"],
        &["RPUSH", "l", "aa", "bb", "cc", "dd", "ee"],
        &["LSET", "l", "2", "xxxxxxxxxx"],
        &["LINSERT", "l", "BEFORE", "bb", "yyyyyyyy"],
        &["LINSERT", "l", "AFTER", "xxxxxxxxxx", "s"],
        &["LSET", "l", "0", "zzzzzzzzzzzz"],
        &["LSET", "l", "0", "t"],
        &["RPUSH", "l", "wwwwwwwwww", "u"],
        &["LMOVE", "l", "l", "RIGHT", "LEFT"],
    ];
    let mut results: Vec<Vec<String>> = Vec::new();
    for c in clients.iter_mut() {
        let mut seen = Vec::new();
        for cmd in script {
            let v: Value = q(c, cmd);
            seen.push(format!("{v:?}"));
            seen.push(format!(
                "{:?}",
                q::<Vec<String>>(c, &["LRANGE", "l", "0", "-1"])
            ));
            if q::<i64>(c, &["EXISTS", "l"]) == 1 {
                seen.push(format!("{:?}", ql_shape(c, "l")));
            }
        }
        results.push(seen);
    }
    if let [tessera, redis] = &results[..] {
        assert_eq!(tessera, redis);
    }
    // LREM of a plain node: Redis leaves its packed neighbours apart, Tessera merges
    // them when they fit (fewer nodes, same elements).
    for c in clients.iter_mut() {
        assert_eq!(q::<i64>(c, &["LREM", "l", "0", "xxxxxxxxxx"]), 1);
        assert_eq!(
            q::<Vec<String>>(c, &["LRANGE", "l", "0", "-1"]),
            ["u", "t", "yyyyyyyy", "bb", "s", "dd", "ee", "wwwwwwwwww"]
        );
    }
    let mut c = server.client();
    let (nodes, _) = ql_shape(&mut c, "l");
    assert!(nodes.parse::<usize>().expect("ql_nodes") >= 4, "{nodes}");
    // The file keeps the plain nodes' elements; back to the default, the list reads
    // the same after a reload.
    let before: Vec<String> = q(&mut c, &["LRANGE", "l", "0", "-1"]);
    assert_eq!(q::<String>(&mut c, &["DEBUG", "RELOAD"]), "OK");
    assert_eq!(
        q::<Vec<String>>(&mut c, &["LRANGE", "l", "0", "-1"]),
        before
    );
    assert_eq!(
        q::<String>(&mut c, &["DEBUG", "QUICKLIST-PACKED-THRESHOLD", "0"]),
        "OK"
    );
    q::<Value>(&mut c, &["DEL", "m"]);
    q::<Value>(&mut c, &["RPUSH", "m", "aa", "xxxxxxxxxx", "bb"]);
    assert_eq!(ql_shape(&mut c, "m").0, "1");
    assert!(err(&mut c, &["DEBUG", "QUICKLIST-PACKED-THRESHOLD", "abc"]).contains("4gb"));
}

#[test]
fn checksum_validation_can_be_skipped_for_restore() {
    let server = Server::start(2);
    let mut c = server.client();
    q::<Value>(&mut c, &["SET", "k", "hello"]);
    let mut payload: Vec<u8> = redis::cmd("DUMP").arg("k").query(&mut c).expect("dump");
    let last = payload.len() - 1;
    payload[last] ^= 0xFF;
    let restore = |c: &mut redis::Connection| -> redis::RedisResult<String> {
        redis::cmd("RESTORE")
            .arg("k2")
            .arg(0)
            .arg(payload.clone())
            .arg("REPLACE")
            .query(c)
    };
    let e = restore(&mut c).expect_err("bad checksum refused");
    assert!(
        e.to_string()
            .contains("DUMP payload version or checksum are wrong"),
        "{e}"
    );
    assert_eq!(
        q::<String>(&mut c, &["DEBUG", "SET-SKIP-CHECKSUM-VALIDATION", "1"]),
        "OK"
    );
    assert_eq!(restore(&mut c).expect("accepted"), "OK");
    assert_eq!(q::<String>(&mut c, &["GET", "k2"]), "hello");
    q::<String>(&mut c, &["DEBUG", "SET-SKIP-CHECKSUM-VALIDATION", "0"]);
    assert!(restore(&mut c).is_err());
}

#[test]
fn scripts_call_no_script_commands_only_when_allowed() {
    let server = Server::start(2);
    let mut c = server.client();
    let script = "return redis.call('debug', 'protocol', 'integer')";
    let e = err(&mut c, &["EVAL", script, "0"]);
    assert!(
        e.contains("This Redis command is not allowed from script"),
        "{e}"
    );
    assert_eq!(
        q::<String>(&mut c, &["DEBUG", "SET-DISABLE-DENY-SCRIPTS", "1"]),
        "OK"
    );
    assert_eq!(q::<i64>(&mut c, &["EVAL", script, "0"]), 12345);
    q::<String>(&mut c, &["DEBUG", "SET-DISABLE-DENY-SCRIPTS", "0"]);
    assert!(err(&mut c, &["EVAL", script, "0"]).contains("not allowed from script"));
}

#[test]
fn encoding_dumps_and_the_matcher_fuzz() {
    let server = Server::start(2);
    let mut c = server.client();
    q::<Value>(&mut c, &["HSET", "h", "f", "v"]);
    q::<Value>(&mut c, &["RPUSH", "l", "a", "b"]);
    q::<Value>(&mut c, &["ZADD", "z", "1.5", "m"]);
    for key in ["h", "z"] {
        assert_eq!(
            q::<String>(&mut c, &["DEBUG", "LISTPACK", key]),
            "Listpack structure printed on stdout"
        );
    }
    assert_eq!(
        q::<String>(&mut c, &["DEBUG", "QUICKLIST", "l", "1"]),
        "Quicklist structure printed on stdout"
    );
    assert!(err(&mut c, &["DEBUG", "LISTPACK", "l"]).contains("Not a listpack encoded object."));
    assert!(err(&mut c, &["DEBUG", "QUICKLIST", "h"]).contains("Not a quicklist encoded object."));
    assert!(err(&mut c, &["DEBUG", "LISTPACK", "nokey"]).contains("no such key"));
    assert_eq!(
        q::<String>(&mut c, &["DEBUG", "STRINGMATCH-TEST"]),
        "Apparently Redis did not crash: test passed"
    );
    // The server is still there, and DEBUG OBJECT shows a list's quicklist fields.
    let line: String = q(&mut c, &["DEBUG", "OBJECT", "l"]);
    assert!(
        line.contains(" ql_nodes:1 ql_avg_node:2.00 ql_listpack_max:-2 "),
        "{line}"
    );
}
