//! A minimal RESP2/RESP3 client over a raw TCP stream, for tests that compare
//! replies exactly (error texts, reply types, RESP3 shapes) or need to see the
//! connection close. Included by test files with
//! `#[path = "common/resp.rs"] mod resp;`.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One decoded reply. Doubles and big numbers keep their wire text.
#[derive(Debug, Clone, PartialEq)]
pub enum R {
    Simple(String),
    Err(String),
    Int(i64),
    Bulk(Vec<u8>),
    /// RESP2 null bulk / null array, RESP3 `_`.
    Nil,
    Array(Vec<R>),
    Map(Vec<(R, R)>),
    Set(Vec<R>),
    Double(String),
    Bool(bool),
    Verbatim(String, Vec<u8>),
    Push(Vec<R>),
    BigNum(String),
}

impl R {
    pub fn text(&self) -> String {
        match self {
            R::Simple(s) | R::Err(s) | R::Double(s) | R::BigNum(s) => s.clone(),
            R::Bulk(b) | R::Verbatim(_, b) => String::from_utf8_lossy(b).into_owned(),
            R::Int(n) => n.to_string(),
            other => panic!("not a scalar reply: {other:?}"),
        }
    }

    pub fn int(&self) -> i64 {
        match self {
            R::Int(n) => *n,
            other => panic!("not an integer reply: {other:?}"),
        }
    }

    pub fn items(&self) -> &[R] {
        match self {
            R::Array(v) | R::Set(v) | R::Push(v) => v,
            other => panic!("not an array reply: {other:?}"),
        }
    }

    pub fn is_err(&self) -> bool {
        matches!(self, R::Err(_))
    }
}

pub fn ok() -> R {
    R::Simple("OK".into())
}

pub fn st(s: &str) -> R {
    R::Simple(s.into())
}

pub fn e(s: &str) -> R {
    R::Err(s.into())
}

pub fn b(s: impl AsRef<[u8]>) -> R {
    R::Bulk(s.as_ref().to_vec())
}

pub fn i(n: i64) -> R {
    R::Int(n)
}

pub fn arr(v: Vec<R>) -> R {
    R::Array(v)
}

/// An array of bulk strings.
pub fn bulks(v: &[&str]) -> R {
    R::Array(v.iter().map(b).collect())
}

/// Encodes one command as a RESP multibulk.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn line(buf: &[u8], at: usize) -> Option<(&str, usize)> {
    let rest = buf.get(at..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    let s = std::str::from_utf8(&rest[..end]).expect("header line is utf-8");
    Some((s, at + end + 2))
}

/// Parses one reply at `at`: the value and the offset just past it, or None
/// when more bytes are needed.
pub fn parse(buf: &[u8], at: usize) -> Option<(R, usize)> {
    let kind = *buf.get(at)?;
    let (head, mut pos) = line(buf, at + 1)?;
    let count = |h: &str| h.parse::<i64>().expect("length");
    let blob = |pos: usize, n: usize| -> Option<(Vec<u8>, usize)> {
        let body = buf.get(pos..pos + n + 2)?;
        Some((body[..n].to_vec(), pos + n + 2))
    };
    let r = match kind {
        b'+' => R::Simple(head.into()),
        b'-' => R::Err(head.into()),
        b':' => R::Int(count(head)),
        b',' => R::Double(head.into()),
        b'(' => R::BigNum(head.into()),
        b'#' => R::Bool(head == "t"),
        b'_' => R::Nil,
        b'$' | b'!' | b'=' => {
            let n = count(head);
            if n < 0 {
                R::Nil
            } else {
                let (data, next) = blob(pos, n as usize)?;
                pos = next;
                match kind {
                    b'$' => R::Bulk(data),
                    b'!' => R::Err(String::from_utf8_lossy(&data).into_owned()),
                    _ => {
                        let fmt = String::from_utf8_lossy(&data[..3.min(data.len())]).into_owned();
                        R::Verbatim(fmt, data.get(4..).unwrap_or_default().to_vec())
                    }
                }
            }
        }
        b'*' | b'~' | b'>' | b'%' => {
            let n = count(head);
            if n < 0 {
                return Some((R::Nil, pos));
            }
            let per = if kind == b'%' { 2 } else { 1 };
            let mut items = Vec::new();
            for _ in 0..n * per {
                let (v, next) = parse(buf, pos)?;
                items.push(v);
                pos = next;
            }
            match kind {
                b'*' => R::Array(items),
                b'~' => R::Set(items),
                b'>' => R::Push(items),
                _ => {
                    let mut pairs = Vec::new();
                    let mut it = items.into_iter();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        pairs.push((k, v));
                    }
                    R::Map(pairs)
                }
            }
        }
        other => panic!("unexpected reply type byte {:?}", other as char),
    };
    Some((r, pos))
}

/// A raw connection that reads replies one at a time.
pub struct Raw {
    pub s: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    pub fn connect(port: u16) -> Raw {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        Raw { s, buf: Vec::new() }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).expect("write");
    }

    /// Reads more bytes; false when the peer closed the connection.
    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 65536];
        match self.s.read(&mut chunk) {
            Ok(0) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Err(e) => panic!("read failed (no reply?): {e}"),
        }
    }

    /// The bytes of the next complete reply.
    pub fn read_raw(&mut self) -> Vec<u8> {
        loop {
            if let Some((_, end)) = parse(&self.buf, 0) {
                return self.buf.drain(..end).collect();
            }
            assert!(
                self.fill(),
                "connection closed; partial input {:?}",
                String::from_utf8_lossy(&self.buf)
            );
        }
    }

    pub fn read(&mut self) -> R {
        let raw = self.read_raw();
        parse(&raw, 0).expect("complete").0
    }

    /// Reads the next pub/sub message and returns its last two elements (channel,
    /// payload): a keyspace event's channel and key, or event name.
    pub fn event(&mut self) -> (String, String) {
        let r = self.read();
        let items = r.items();
        let n = items.len();
        (items[n - 2].text(), items[n - 1].text())
    }

    /// Sends a command given as separate arguments and reads its reply.
    pub fn cmd(&mut self, args: &[&[u8]]) -> R {
        self.send(&encode(args));
        self.read()
    }

    /// Sends a command written as space-separated words (no quoting).
    pub fn c(&mut self, words: &str) -> R {
        let args: Vec<&[u8]> = words.split_whitespace().map(|w| w.as_bytes()).collect();
        self.cmd(&args)
    }

    /// Like `c` but returns the reply's exact bytes.
    pub fn c_raw(&mut self, words: &str) -> Vec<u8> {
        let args: Vec<&[u8]> = words.split_whitespace().map(|w| w.as_bytes()).collect();
        self.send(&encode(&args));
        self.read_raw()
    }

    /// True once the server has closed the connection (after any pending bytes).
    pub fn is_closed(&mut self) -> bool {
        self.buf.clear();
        self.s
            .set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let mut chunk = [0u8; 1024];
        loop {
            match self.s.read(&mut chunk) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) => return e.kind() == std::io::ErrorKind::ConnectionReset,
            }
        }
    }
}

/// A server process started with exactly the given arguments (for tests the
/// harness cannot start: a config file as the first argument, --requirepass).
pub struct Proc {
    pub child: std::process::Child,
    pub port: u16,
}

impl Proc {
    /// Starts `tessera ARGS` and waits until `port` answers PING with anything
    /// (+PONG, or -NOAUTH when a password is required).
    pub fn start(args: &[String], port: u16) -> Proc {
        // A directory of its own unless the test names one: a server that saves on
        // shutdown must not leave dump.rdb in the checkout for the next one to load.
        // After the test's arguments: the first may be a config file.
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"));
        cmd.args(args);
        if !args.iter().any(|a| a == "--dir") {
            let dir =
                std::env::temp_dir().join(format!("tessera-proc-{}-{port}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let _ = std::fs::create_dir_all(&dir);
            cmd.arg("--dir").arg(&dir);
        }
        let child = cmd
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn tessera");
        let mut p = Proc { child, port };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("tessera exited early: {status}");
            }
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                let mut buf = [0u8; 64];
                if s.write_all(b"PING\r\n").is_ok() && matches!(s.read(&mut buf), Ok(n) if n > 0) {
                    return p;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("tessera did not start on port {port}");
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shard of `key` on a 2-shard server.
pub fn shard(key: &str) -> usize {
    tessera::slot::SlotTable::new(2).shard_of_key(key.as_bytes())
}

/// A 2-shard server and a raw client connected to it.
pub fn setup() -> (crate::common::Server, Raw) {
    let s = crate::common::Server::start(2);
    let c = Raw::connect(s.port);
    (s, c)
}

/// Wall-clock unix milliseconds, to compare with EXPIRETIME-style replies.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
