//! Black-box tests of read-ahead: a client streaming a long pipeline over two shards
//! has the commands bound for the other shard sent while the connection parses the
//! input that follows (src/connection/pipeline.rs, `launch`). Replies must still come
//! in request order, with every earlier write visible to the commands after it, and a
//! client that waits for its replies must get them whatever its input's size.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;

fn command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

fn bulk(s: &str) -> String {
    format!("${}\r\n{s}\r\n", s.len())
}

/// A pipeline of `n` commands mixing local and remote single-key writes and reads,
/// split multi-key writes (which lock their shards) and DBSIZE (which needs every
/// earlier write done), with the replies a Redis server gives, computed from a model.
fn mixed_pipeline(n: usize) -> (Vec<u8>, Vec<u8>) {
    let mut input = Vec::new();
    let mut expected = String::new();
    let mut keys: HashSet<String> = HashSet::new();
    let mut counters: HashMap<String, i64> = HashMap::new();
    let mut lists: HashMap<String, i64> = HashMap::new();
    for i in 0..n {
        match i % 10 {
            0..=5 => {
                let (k, v) = (format!("key:{i}"), format!("val:{i}"));
                input.extend(command(&["SET", &k, &v]));
                expected.push_str("+OK\r\n");
                keys.insert(k);
            }
            6 => {
                input.extend(command(&["GET", &format!("key:{}", i - 6)]));
                expected.push_str(&bulk(&format!("val:{}", i - 6)));
            }
            7 => {
                let k = format!("counter:{}", i % 3);
                input.extend(command(&["INCR", &k]));
                let c = counters.entry(k.clone()).or_insert(0);
                *c += 1;
                expected.push_str(&format!(":{c}\r\n"));
                keys.insert(k);
            }
            8 if i % 500 == 8 => {
                let (a, b) = (format!("a{i}"), format!("b{i}"));
                input.extend(command(&["MSET", &a, "x", &b, "y"]));
                expected.push_str("+OK\r\n");
                keys.insert(a);
                keys.insert(b);
            }
            8 => {
                let k = format!("list:{}", i % 5);
                input.extend(command(&["RPUSH", &k, &i.to_string()]));
                let len = lists.entry(k.clone()).or_insert(0);
                *len += 1;
                expected.push_str(&format!(":{len}\r\n"));
                keys.insert(k);
            }
            _ if i % 1000 == 9 => {
                input.extend(command(&["DBSIZE"]));
                expected.push_str(&format!(":{}\r\n", keys.len()));
            }
            _ => {
                input.extend(command(&["PING"]));
                expected.push_str("+PONG\r\n");
            }
        }
    }
    (input, expected.into_bytes())
}

/// Writes `input` from a thread of its own (the client does not wait for replies
/// while it writes, as `redis-cli --pipe`) and reads `expect_len` reply bytes.
fn stream(port: u16, input: Vec<u8>, expect_len: usize) -> Vec<u8> {
    let mut reader = TcpStream::connect(("127.0.0.1", port)).unwrap();
    reader
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut writer = reader.try_clone().unwrap();
    let sender = std::thread::spawn(move || writer.write_all(&input).unwrap());
    let mut got = vec![0u8; expect_len];
    reader
        .read_exact(&mut got)
        .expect("every reply within 30 s");
    sender.join().unwrap();
    got
}

#[test]
fn streamed_pipeline_keeps_request_order() {
    let s = Server::start(2);
    let (input, expected) = mixed_pipeline(120_000);
    let got = stream(s.port, input, expected.len());
    // Compared reply by reply so that a failure names the first one out of place.
    let (got, want) = (
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&expected),
    );
    let first_bad = got
        .split_inclusive("\r\n")
        .zip(want.split_inclusive("\r\n"))
        .position(|(g, w)| g != w);
    assert_eq!(first_bad, None, "replies differ from the model");
    let mut c = s.client();
    let keys: i64 = q(&mut c, &["DBSIZE"]);
    assert!(keys > 70_000, "{keys} keys");
}

#[test]
fn pipeline_that_fills_reads_exactly_is_answered() {
    let s = Server::start(2);
    // 64-byte SETs: 256 fill one 16 KB read exactly, and a read that fills its buffer
    // leaves the socket marked readable with nothing more to come.
    for reads in [1usize, 3, 8] {
        let mut input = Vec::new();
        let mut i = 0;
        while input.len() < reads * 16 * 1024 {
            let key = format!("k{reads}:{i:05}");
            let mut cmd = command(&["SET", &key, ""]);
            let pad = 64 - cmd.len();
            cmd = command(&["SET", &key, &"v".repeat(pad - 1)]);
            assert_eq!(cmd.len(), 64);
            input.extend(cmd);
            i += 1;
        }
        assert_eq!(input.len(), reads * 16 * 1024);
        // The client waits for its replies before it sends anything else.
        let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(&input).unwrap();
        let mut got = vec![0u8; i * 5];
        c.read_exact(&mut got)
            .unwrap_or_else(|e| panic!("{reads} full reads: replies did not come: {e}"));
        assert!(got.chunks(5).all(|r| r == b"+OK\r\n"));
    }
}

#[test]
fn client_leaving_mid_stream_leaves_server_serving() {
    let s = Server::start(2);
    let (input, _) = mixed_pipeline(50_000);
    {
        let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        c.write_all(&input).unwrap();
        // Gone without reading a reply.
    }
    // What the server read before the close ran (Redis drops the rest too).
    let mut c = s.client();
    assert_eq!(q::<String>(&mut c, &["PING"]), "PONG");
    let (input, expected) = mixed_pipeline(20_000);
    q::<()>(&mut c, &["FLUSHALL"]);
    assert_eq!(stream(s.port, input, expected.len()), expected);
}
