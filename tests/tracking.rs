//! CLIENT TRACKING (server-assisted client-side caching), black-box over raw RESP so
//! the push messages (RESP3 `>` frames, RESP2 `__redis__:invalidate` messages) are
//! checked byte for byte. Keys live on both shards of a 2-shard server, and several
//! connections are opened so readers, writers and redirection clients sit on
//! different shards.

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A raw connection that reads replies by expected byte patterns.
struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn new(server: &Server) -> Conn {
        let s = server.raw();
        s.set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
        Conn { s, buf: Vec::new() }
    }

    fn send(&mut self, args: &[&str]) {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n{}\r\n", a.len(), a).as_bytes());
        }
        self.s.write_all(&out).expect("write");
    }

    fn fill(&mut self) {
        let mut tmp = [0u8; 65536];
        if let Ok(n) = self.s.read(&mut tmp) {
            self.buf.extend_from_slice(&tmp[..n]);
        }
    }

    /// Waits until the input starts with `want`, consumes it.
    fn expect(&mut self, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.buf.starts_with(want.as_bytes()) {
            if Instant::now() > deadline || self.buf.len() >= want.len() {
                panic!(
                    "expected {:?}, got {:?}",
                    want,
                    String::from_utf8_lossy(&self.buf)
                );
            }
            self.fill();
        }
        self.buf.drain(..want.len());
    }

    /// Sends a command and expects exactly `reply`.
    fn call(&mut self, args: &[&str], reply: &str) {
        self.send(args);
        self.expect(reply);
    }

    /// Nothing more arrives within a short while.
    fn quiet(&mut self) {
        std::thread::sleep(Duration::from_millis(150));
        self.fill();
        assert!(
            self.buf.is_empty(),
            "unexpected input {:?}",
            String::from_utf8_lossy(&self.buf)
        );
    }

    fn id(&mut self) -> String {
        self.send(&["CLIENT", "ID"]);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let id = String::from_utf8_lossy(&self.buf[1..end]).into_owned();
                self.buf.drain(..end + 2);
                return id;
            }
            assert!(Instant::now() < deadline, "no CLIENT ID reply");
            self.fill();
        }
    }

    fn resp3(&mut self) {
        self.send(&["HELLO", "3"]);
        std::thread::sleep(Duration::from_millis(50));
        self.fill();
        self.buf.clear();
    }
}

fn push(keys: &[&str]) -> String {
    let mut s = format!(">2\r\n$10\r\ninvalidate\r\n*{}\r\n", keys.len());
    for k in keys {
        s.push_str(&format!("${}\r\n{}\r\n", k.len(), k));
    }
    s
}

fn message(keys: &[&str]) -> String {
    let mut s = format!(
        "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*{}\r\n",
        keys.len()
    );
    for k in keys {
        s.push_str(&format!("${}\r\n{}\r\n", k.len(), k));
    }
    s
}

fn bulk(v: &str) -> String {
    format!("${}\r\n{}\r\n", v.len(), v)
}

/// A RESP3 reader with tracking on (with `opts`) and a writer, on their own
/// connections.
fn reader_writer(server: &Server, opts: &[&str]) -> (Conn, Conn) {
    let mut r = Conn::new(server);
    let w = Conn::new(server);
    r.resp3();
    let mut args = vec!["CLIENT", "TRACKING", "on"];
    args.extend_from_slice(opts);
    r.call(&args, "+OK\r\n");
    (r, w)
}

/// Several connections, so that they spread over both shards.
fn conns(server: &Server, n: usize) -> Vec<Conn> {
    (0..n).map(|_| Conn::new(server)).collect()
}

#[test]
fn default_mode_invalidates_keys_read_on_both_shards() {
    let server = Server::start(2);
    let mut c = conns(&server, 3);
    let (r, rest) = c.split_first_mut().expect("conns");
    let w = &mut rest[0];
    r.resp3();
    r.call(&["CLIENT", "TRACKING", "on"], "+OK\r\n");
    for k in [KEY_SHARD0, KEY_SHARD1] {
        w.call(&["SET", k, "1"], "+OK\r\n");
        r.call(&["GET", k], &bulk("1"));
        w.call(&["SET", k, "2"], "+OK\r\n");
        r.expect(&push(&[k]));
        // Invalidated once: the key is forgotten until read again.
        w.call(&["SET", k, "3"], "+OK\r\n");
        r.quiet();
    }
    // A multi-key read across shards tracks every key.
    r.call(
        &["MGET", KEY_SHARD0, KEY_SHARD1],
        &format!("*2\r\n{}{}", bulk("3"), bulk("3")),
    );
    w.call(&["DEL", KEY_SHARD0, KEY_SHARD1], ":2\r\n");
    let mut got = Vec::new();
    for _ in 0..2 {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !r.buf.starts_with(push(&[KEY_SHARD0]).as_bytes())
            && !r.buf.starts_with(push(&[KEY_SHARD1]).as_bytes())
        {
            assert!(Instant::now() < deadline, "missing invalidation");
            r.fill();
        }
        let k = if r.buf.starts_with(push(&[KEY_SHARD0]).as_bytes()) {
            KEY_SHARD0
        } else {
            KEY_SHARD1
        };
        r.expect(&push(&[k]));
        got.push(k);
    }
    got.sort();
    let mut want = vec![KEY_SHARD0, KEY_SHARD1];
    want.sort();
    assert_eq!(got, want);
    // The client's own write invalidates too (after its reply).
    r.call(&["GET", KEY_SHARD1], "_\r\n");
    r.call(&["SET", KEY_SHARD1, "x"], "+OK\r\n");
    r.expect(&push(&[KEY_SHARD1]));
    r.call(&["CLIENT", "TRACKING", "off"], "+OK\r\n");
    w.call(&["SET", KEY_SHARD1, "y"], "+OK\r\n");
    r.quiet();
}

#[test]
fn redirect_to_resp2_subscriber_and_broken_redirect() {
    let server = Server::start(2);
    let mut c = conns(&server, 4);
    let id = c[2].id();
    c[2].call(
        &["SUBSCRIBE", "__redis__:invalidate"],
        "*3\r\n$9\r\nsubscribe\r\n$20\r\n__redis__:invalidate\r\n:1\r\n",
    );
    c[0].call(&["CLIENT", "TRACKING", "on", "REDIRECT", &id], "+OK\r\n");
    c[0].call(&["CLIENT", "GETREDIR"], &format!(":{id}\r\n"));
    for k in [KEY_SHARD0, KEY_SHARD1] {
        c[0].call(&["GET", k], "$-1\r\n");
        c[1].call(&["SET", k, "v"], "+OK\r\n");
        c[2].expect(&message(&[k]));
    }
    // FLUSHALL: a null invalidation.
    c[0].call(&["GET", KEY_SHARD0], &bulk("v"));
    c[1].call(&["FLUSHALL"], "+OK\r\n");
    c[2].expect("*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n$-1\r\n");
    // Redirection to a missing client is refused.
    c[3].call(
        &["CLIENT", "TRACKING", "on", "REDIRECT", "999999"],
        "-ERR The client ID you want redirect to does not exist\r\n",
    );
    // The redirection client leaves: a RESP3 tracker learns it on the next change.
    c[3].resp3();
    c[3].call(&["CLIENT", "TRACKING", "on", "REDIRECT", &id], "+OK\r\n");
    c[3].call(&["GET", KEY_SHARD1], "_\r\n");
    c[2].call(&["QUIT"], "+OK\r\n");
    std::thread::sleep(Duration::from_millis(100));
    c[1].call(&["SET", KEY_SHARD1, "w"], "+OK\r\n");
    c[3].expect(&format!(">2\r\n$21\r\ntracking-redir-broken\r\n:{id}\r\n"));
    c[3].send(&["CLIENT", "TRACKINGINFO"]);
    c[3].expect("%3\r\n$5\r\nflags\r\n~2\r\n$2\r\non\r\n$15\r\nbroken_redirect\r\n");
    c[3].expect(&format!(
        "$8\r\nredirect\r\n:{id}\r\n$8\r\nprefixes\r\n*0\r\n"
    ));
    c[3].send(&["CLIENT", "INFO"]);
    std::thread::sleep(Duration::from_millis(100));
    c[3].fill();
    let info = String::from_utf8_lossy(&c[3].buf).into_owned();
    assert!(info.contains("flags=tR "), "{info}");
    assert!(info.contains(&format!("redir={id} ")), "{info}");
}

#[test]
fn bcast_prefixes_and_noloop() {
    let server = Server::start(2);
    let mut c = conns(&server, 3);
    c[0].resp3();
    c[0].call(
        &[
            "CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "user:", "NOLOOP",
        ],
        "+OK\r\n",
    );
    // Keys under the prefix on both shards, written by another client.
    for k in ["user:1", "user:2", "user:3", "user:4"] {
        c[1].call(&["SET", k, "v"], "+OK\r\n");
        c[0].expect(&push(&[k]));
    }
    c[1].call(&["SET", "other", "v"], "+OK\r\n");
    // Its own writes are not reported (NOLOOP).
    c[0].call(&["SET", "user:9", "v"], "+OK\r\n");
    c[0].quiet();
    // A transaction's keys under one prefix on one shard: one message.
    c[1].call(&["MULTI"], "+OK\r\n");
    c[1].call(&["SET", "user:{t}a", "1"], "+QUEUED\r\n");
    c[1].call(&["SET", "user:{t}b", "1"], "+QUEUED\r\n");
    c[1].call(&["EXEC"], "*2\r\n+OK\r\n+OK\r\n");
    c[0].expect(&push(&["user:{t}a", "user:{t}b"]));
    // Overlapping prefixes and mixed modes are refused with Redis's texts.
    c[2].call(
        &["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "FOOBAR", "PREFIX", "FOO"],
        "-ERR Prefix 'FOOBAR' overlaps with another provided prefix 'FOO'. Prefixes for a single client must not overlap.\r\n",
    );
    c[2].call(
        &["CLIENT", "TRACKING", "on", "PREFIX", "x"],
        "-ERR PREFIX option requires BCAST mode to be enabled\r\n",
    );
    c[2].call(
        &["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "FOO"],
        "+OK\r\n",
    );
    c[2].call(
        &["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "FO"],
        "-ERR Prefix 'FO' overlaps with an existing prefix 'FOO'. Prefixes for a single client must not overlap.\r\n",
    );
    c[2].call(
        &["CLIENT", "TRACKING", "on"],
        "-ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.\r\n",
    );
    c[2].call(&["CLIENT", "TRACKING", "off"], "+OK\r\n");
    c[2].call(
        &["CLIENT", "TRACKING", "on", "OPTIN", "OPTOUT"],
        "-ERR You can't use both OPTIN and OPTOUT\r\n",
    );
}

#[test]
fn optin_optout_and_caching() {
    let server = Server::start(2);
    let mut c = conns(&server, 2);
    let (r, rest) = c.split_first_mut().expect("conns");
    let w = &mut rest[0];
    r.resp3();
    r.call(
        &["CLIENT", "CACHING", "yes"],
        "-ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled\r\n",
    );
    r.call(&["CLIENT", "TRACKING", "on", "OPTIN"], "+OK\r\n");
    r.call(
        &["CLIENT", "CACHING", "no"],
        "-ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.\r\n",
    );
    // Not cached without CLIENT CACHING yes.
    r.call(&["GET", KEY_SHARD0], "_\r\n");
    w.call(&["SET", KEY_SHARD0, "1"], "+OK\r\n");
    r.quiet();
    // Cached for the one command after it.
    r.call(&["CLIENT", "CACHING", "yes"], "+OK\r\n");
    r.call(&["GET", KEY_SHARD1], "_\r\n");
    r.call(&["GET", KEY_SHARD0], &bulk("1"));
    w.call(&["SET", KEY_SHARD1, "1"], "+OK\r\n");
    r.expect(&push(&[KEY_SHARD1]));
    w.call(&["SET", KEY_SHARD0, "2"], "+OK\r\n");
    r.quiet();
    r.call(
        &["CLIENT", "TRACKING", "on", "OPTOUT"],
        "-ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.\r\n",
    );
    r.call(&["CLIENT", "TRACKING", "off"], "+OK\r\n");
    r.call(&["CLIENT", "TRACKING", "on", "OPTOUT"], "+OK\r\n");
    r.call(&["CLIENT", "CACHING", "no"], "+OK\r\n");
    r.send(&["CLIENT", "TRACKINGINFO"]);
    r.expect("%3\r\n$5\r\nflags\r\n~3\r\n$2\r\non\r\n$6\r\noptout\r\n$10\r\ncaching-no\r\n");
    r.expect("$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n");
    r.call(&["GET", KEY_SHARD0], &bulk("2"));
    w.call(&["SET", KEY_SHARD0, "3"], "+OK\r\n");
    r.quiet();
    r.call(&["GET", KEY_SHARD0], &bulk("3"));
    w.call(&["SET", KEY_SHARD0, "4"], "+OK\r\n");
    r.expect(&push(&[KEY_SHARD0]));
}

#[test]
fn expiry_and_transactions_invalidate_after_the_reply() {
    let server = Server::start(2);
    let (mut r, mut w) = reader_writer(&server, &[]);
    // Active expiry invalidates, on both shards.
    for k in [KEY_SHARD0, KEY_SHARD1] {
        w.call(&["SET", k, "v", "PX", "50"], "+OK\r\n");
        r.call(&["GET", k], &bulk("v"));
        std::thread::sleep(Duration::from_millis(300));
        r.expect(&push(&[k]));
    }
    // Inside EXEC, the client's own invalidation follows the EXEC reply.
    r.call(&["SET", "a{t}", "1"], "+OK\r\n");
    r.call(&["GET", "a{t}"], &bulk("1"));
    r.call(&["MULTI"], "+OK\r\n");
    r.call(&["INCR", "a{t}"], "+QUEUED\r\n");
    r.call(&["GET", "a{t}"], "+QUEUED\r\n");
    r.call(&["EXEC"], &format!("*2\r\n:2\r\n{}", bulk("2")));
    r.expect(&push(&["a{t}"]));
    // INFO counts tracked keys and clients.
    r.call(&["GET", KEY_SHARD0], "_\r\n");
    r.call(&["GET", KEY_SHARD1], "_\r\n");
    let mut i = server.client();
    let info: String = q(&mut i, &["INFO"]);
    assert!(info.contains("tracking_clients:1\r\n"), "{info}");
    assert!(info.contains("tracking_total_keys:3\r\n"), "{info}");
    // FLUSHDB: the keys are forgotten and the client gets a null.
    w.call(&["FLUSHDB"], "+OK\r\n");
    r.expect(">2\r\n$10\r\ninvalidate\r\n_\r\n");
    let info: String = q(&mut i, &["INFO"]);
    assert!(info.contains("tracking_total_keys:0\r\n"), "{info}");
}

/// A key the client's own read finds expired is invalidated after that read's reply,
/// wherever the client and the key live (Redis 7.0 holds it in tracking_pending_keys
/// while the command runs); Redis's tracking.tcl "not interleaved with multiple keys
/// response". Four readers, so both shards hold a reader's home.
#[test]
fn lazy_expiry_found_by_the_readers_own_command_follows_its_reply() {
    let server = Server::start(2);
    let mut admin = server.client();
    let _: () = q(&mut admin, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    for (n, mut r) in conns(&server, 4).into_iter().enumerate() {
        r.resp3();
        r.call(&["CLIENT", "TRACKING", "on"], "+OK\r\n");
        for k in [KEY_SHARD0, KEY_SHARD1] {
            let (x, y) = (format!("{k}-x{n}"), format!("{k}-y{n}"));
            let (x, y) = (format!("{{{k}}}{x}"), format!("{{{k}}}{y}"));
            r.call(&["MSET", &x, "1", &y, "2"], "+OK\r\n");
            r.call(&["PEXPIRE", &y, "20"], ":1\r\n");
            r.call(&["GET", &y], &bulk("2"));
            std::thread::sleep(Duration::from_millis(40));
            r.call(&["MGET", &x, &y], &format!("*2\r\n{}_\r\n", bulk("1")));
            r.expect(&push(&[&y]));
        }
        r.quiet();
    }
}

#[test]
fn tracking_table_max_keys_evicts_down_to_the_limit() {
    let server = Server::start(2);
    let (mut r, mut w) = reader_writer(&server, &[]);
    for i in 0..20 {
        r.call(&["GET", &format!("k{i}")], "_\r\n");
    }
    w.call(
        &["CONFIG", "SET", "tracking-table-max-keys", "5"],
        "+OK\r\n",
    );
    let mut n = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while n < 15 {
        assert!(Instant::now() < deadline, "only {n} evictions");
        r.fill();
        while let Some(p) = r.buf.windows(10).position(|x| x == b"invalidate") {
            r.buf.drain(..p + 10);
            n += 1;
        }
    }
    let mut i = server.client();
    let info: String = q(&mut i, &["INFO", "stats"]);
    assert!(info.contains("tracking_total_keys:5\r\n"), "{info}");
}

/// NOLOOP hides only the client's own writes: a cross-shard RENAME by another client
/// (a coordinator, whose writes are signalled when it releases its keys) must reach a
/// NOLOOP reader even when that reader's command was the last one run on the shard.
#[test]
fn noloop_keeps_other_clients_cross_shard_writes() {
    let server = Server::start(2);
    let (mut r, mut w) = reader_writer(&server, &["NOLOOP"]);
    for (src, dst) in [(KEY_SHARD0, KEY_SHARD1), (KEY_SHARD1, KEY_SHARD0)] {
        w.call(&["SET", dst, "old"], "+OK\r\n");
        w.call(&["SET", src, "new"], "+OK\r\n");
        // The reader's GET is the last command run on dst's shard.
        r.call(&["GET", dst], &bulk("old"));
        w.call(&["RENAME", src, dst], "+OK\r\n");
        r.expect(&push(&[dst]));
        // Its own cross-shard RENAME stays silent for it.
        r.call(&["GET", dst], &bulk("new"));
        r.call(&["RENAME", dst, src], "+OK\r\n");
        r.quiet();
    }
}

fn used_memory(admin: &mut redis::Connection) -> u64 {
    let info: String = q(admin, &["INFO", "memory"]);
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory")
}

/// Redis's "invalidation message of eviction keys should be before response", with the
/// evicted key and the big one on different shards: the big key's shard is over its
/// share with nothing it may evict (volatile-random, no TTL there), so the other shard
/// evicts the volatile key before GETBIT runs, and its invalidation comes first. Six
/// connections, so the client sits on either shard.
#[test]
fn eviction_on_another_shard_invalidates_before_the_reply() {
    let server = Server::start(2);
    let mut admin = server.client();
    // Both shards' key tables exist before memory is measured (a shard's first write
    // allocates them, which would count as overhead shared by both).
    let _: () = q(&mut admin, &["MSET", KEY_SHARD0, "1", KEY_SHARD1, "1"]);
    for mut c in conns(&server, 6) {
        let _: i64 = q(&mut admin, &["DEL", KEY_SHARD0, KEY_SHARD1]);
        c.resp3();
        c.call(&["CLIENT", "TRACKING", "on"], "+OK\r\n");
        // The previous connection's buffers go when the server notices it closed.
        let mut used = used_memory(&mut admin);
        loop {
            std::thread::sleep(Duration::from_millis(30));
            let now = used_memory(&mut admin);
            if now == used {
                break;
            }
            used = now;
        }
        let limit = used + 100 * 1024;
        let _: () = q(
            &mut admin,
            &["CONFIG", "SET", "maxmemory-policy", "volatile-random"],
        );
        let _: () = q(
            &mut admin,
            &["CONFIG", "SET", "maxmemory", &limit.to_string()],
        );
        c.call(&["SETEX", KEY_SHARD1, "10000", "x"], "+OK\r\n");
        c.call(&["GET", KEY_SHARD1], &bulk("x"));
        // 200 KB on the other shard: the server is now over its limit.
        c.call(&["SETBIT", KEY_SHARD0, "1600000", "0"], ":0\r\n");
        c.send(&["GETBIT", KEY_SHARD0, "0"]);
        c.expect(&push(&[KEY_SHARD1]));
        c.expect(":0\r\n");
        let _: () = q(&mut admin, &["CONFIG", "SET", "maxmemory", "0"]);
        let n: i64 = q(&mut admin, &["EXISTS", KEY_SHARD1]);
        assert_eq!(n, 0);
    }
}

/// Invalidations for one redirection client arrive in write order even when the
/// tracking clients live on different shards (Redis's "Different clients can
/// redirect to the same connection"). When every note went through its tracker's
/// home, a pipeline of writes on the redirection client's shard let the notes of
/// trackers on that shard overtake those of trackers on the other one. Keys of both
/// shards are written, so that one group shares the redirection client's shard.
#[test]
fn redirected_invalidations_keep_write_order_across_shards() {
    let server = Server::start(2);
    let mut redir = Conn::new(&server);
    let id = redir.id();
    redir.call(
        &["SUBSCRIBE", "__redis__:invalidate"],
        "*3\r\n$9\r\nsubscribe\r\n$20\r\n__redis__:invalidate\r\n:1\r\n",
    );
    // Eight trackers (spread over both shards), each reading one key of each shard.
    let mut trackers = conns(&server, 8);
    for t in trackers.iter_mut() {
        t.call(&["CLIENT", "TRACKING", "on", "REDIRECT", &id], "+OK\r\n");
    }
    let mut w = Conn::new(&server);
    for tag in [KEY_SHARD0, KEY_SHARD1] {
        let keys: Vec<String> = (0..8).map(|i| format!("k{i}{{{tag}}}")).collect();
        for round in 1..=5 {
            for (t, k) in trackers.iter_mut().zip(&keys) {
                let was = if round == 1 {
                    "$-1\r\n".to_string()
                } else {
                    bulk(&(round - 1).to_string())
                };
                t.call(&["GET", k], &was);
            }
            // All eight writes in one pipeline: one batch on the keys' shard.
            let mut out = Vec::new();
            for k in &keys {
                out.extend_from_slice(
                    format!("*2\r\n$4\r\nINCR\r\n${}\r\n{k}\r\n", k.len()).as_bytes(),
                );
            }
            w.s.write_all(&out).expect("write");
            for _ in &keys {
                w.expect(&format!(":{round}\r\n"));
            }
            for k in &keys {
                redir.expect(&message(&[k]));
            }
        }
    }
    redir.quiet();
}
