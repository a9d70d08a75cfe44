//! Independent application scenarios, built from Redis's well-known example
//! applications (Retwis, a reliable queue, leaderboards, secondary indexes,
//! autocomplete, rate limiting and sessions, a social graph), run unchanged against a
//! 2-shard Tessera and against a real redis-server.
//!
//! Every scenario is ordinary application code written for Redis with the `redis`
//! crate. It records each command it sends and the reply it got as one line of a
//! transcript (replies whose order Redis leaves unspecified are sorted, TTLs are
//! recorded as ranges), and it asserts a few application-level facts of its own. Each
//! test runs its scenario twice against redis-server (proving the transcript is
//! deterministic) and once against Tessera, and requires the transcripts to be equal.
//! Without redis-server the scenarios still run against Tessera alone and check their
//! own assertions, unless `CI` is set, in which case the missing server is an error.

mod common;
use common::*;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::{Connection, Value};

// ---------------------------------------------------------------------------------
// Servers
// ---------------------------------------------------------------------------------

/// Where a scenario runs: the scenario opens extra connections (concurrent workers,
/// a second client that interferes with a WATCH) through this.
struct Target {
    port: u16,
}

impl Target {
    fn connect(&self) -> Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .and_then(|c| c.get_connection())
            .expect("connect")
    }
}

/// The reference redis-server; a missing one is a failure when `CI` is set (CI
/// installs it, so the comparison must not be skipped there).
fn reference_redis() -> Option<ReferenceRedis> {
    let reference = ReferenceRedis::start();
    if reference.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "redis-server did not start, and CI is set: the comparison must run"
        );
        eprintln!("redis-server not found: scenarios run against Tessera alone");
    }
    reference
}

// ---------------------------------------------------------------------------------
// Transcripts
// ---------------------------------------------------------------------------------

/// How a reply is written into the transcript.
#[derive(Clone, Copy)]
enum Order {
    /// As the server sent it.
    AsIs,
    /// An array whose order is unspecified (SMEMBERS, SUNION...): sorted.
    Sorted,
    /// A flat field/value array whose pair order is unspecified (HGETALL): pairs sorted.
    Pairs,
}

/// A connection that records every command and its reply.
struct Rec<'a> {
    con: &'a mut Connection,
    lines: Vec<String>,
}

/// Records a command, written like redis-cli input: `c!(r, "HSET user:{id} name {name}")`
/// is formatted (with `format!`'s captures and arguments) and split on whitespace. An
/// argument that may contain spaces goes in a list instead: `c!(r, ["SET", key, text])`.
macro_rules! c {
    ($($t:tt)+) => { record!(Order::AsIs, $($t)+) };
}

/// Records a command whose array reply has no specified order (sorted).
macro_rules! cs {
    ($($t:tt)+) => { record!(Order::Sorted, $($t)+) };
}

/// Records a command whose reply is field/value pairs in no specified order.
macro_rules! cp {
    ($($t:tt)+) => { record!(Order::Pairs, $($t)+) };
}

macro_rules! record {
    ($order:expr, $r:expr, [$($a:expr),+ $(,)?]) => {
        $r.run(vec![$(($a).to_string().into_bytes()),+], $order)
    };
    ($order:expr, $r:expr, $($fmt:tt)+) => {
        $r.run(
            format!($($fmt)+)
                .split_ascii_whitespace()
                .map(|a| a.as_bytes().to_vec())
                .collect(),
            $order,
        )
    };
}

/// Builds a pipeline from redis-cli-like lines (formatted like `c!`); `atomic;` first
/// makes it a MULTI/EXEC transaction.
macro_rules! pipe {
    (atomic; $($line:literal),+ $(,)?) => {{
        let mut p = pipe!($($line),+);
        p.atomic();
        p
    }};
    ($($line:literal),+ $(,)?) => {{
        let mut p = redis::pipe();
        $(p.add_command(cmd_of(&format!($line)));)+
        p
    }};
}

/// A command from a redis-cli-like line (no argument may contain spaces).
fn cmd_of(line: &str) -> redis::Cmd {
    let mut words = line.split_ascii_whitespace();
    let mut cmd = redis::cmd(words.next().expect("command name"));
    for w in words {
        cmd.arg(w);
    }
    cmd
}

impl<'a> Rec<'a> {
    /// Starts a scenario on an empty server.
    fn new(con: &'a mut Connection) -> Rec<'a> {
        let mut r = Rec {
            con,
            lines: Vec::new(),
        };
        c!(r, "FLUSHALL");
        r
    }

    fn run(&mut self, args: Vec<Vec<u8>>, order: Order) -> Value {
        let mut cmd = redis::cmd(std::str::from_utf8(&args[0]).expect("command name"));
        for a in &args[1..] {
            cmd.arg(&a[..]);
        }
        // req_command, unlike query, keeps an error inside an array (an EXEC reply).
        let value = match redis::ConnectionLike::req_command(self.con, &cmd) {
            Ok(v) => v,
            Err(e) => {
                let line = format!(
                    "(error) {} {}",
                    e.code().unwrap_or("?"),
                    e.detail().unwrap_or("")
                );
                self.lines.push(format!("{} => {line}", show_args(&args)));
                return Value::Nil;
            }
        };
        let shown = show_ordered(&value, order);
        self.lines.push(format!("{} => {shown}", show_args(&args)));
        value
    }

    /// Records a command built as a list of arguments.
    fn argv(&mut self, args: Vec<String>) -> Value {
        self.run(
            args.into_iter().map(String::into_bytes).collect(),
            Order::AsIs,
        )
    }

    /// Records a command with binary arguments.
    fn bin(&mut self, args: Vec<Vec<u8>>) -> Value {
        self.run(args, Order::AsIs)
    }

    /// Runs a command without recording it (its reply is not deterministic, e.g. a SCAN
    /// cursor); the scenario records what it derives from it instead.
    fn quiet(&mut self, args: &[&str]) -> Value {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(self.con)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// Runs a pipeline (a MULTI/EXEC block when atomic) and records its replies.
    fn pipe(&mut self, label: &str, p: &redis::Pipeline) -> Value {
        let (value, shown) = match p.query::<Value>(self.con) {
            Ok(v) => {
                let shown = show(&v);
                (v, shown)
            }
            Err(e) => (Value::Nil, format!("(error) {e}")),
        };
        self.lines.push(format!("pipeline {label} => {shown}"));
        value
    }

    /// Runs a pipeline without recording its replies (the scenario records a summary).
    fn pipe_quiet(&mut self, p: &redis::Pipeline) -> Value {
        p.query(self.con).expect("pipeline")
    }

    /// An application-level observation.
    fn note(&mut self, line: impl Into<String>) {
        self.lines.push(format!("# {}", line.into()));
    }

    fn done(self) -> Vec<String> {
        self.lines
    }
}

fn show_bytes(b: &[u8]) -> String {
    b.iter()
        .flat_map(|&c| std::ascii::escape_default(c))
        .map(char::from)
        .collect()
}

fn show_arg(a: &[u8]) -> String {
    if !a.is_empty() && a.iter().all(|c| c.is_ascii_graphic() && *c != b'"') {
        String::from_utf8_lossy(a).into_owned()
    } else {
        format!("\"{}\"", show_bytes(a))
    }
}

fn show_args(args: &[Vec<u8>]) -> String {
    let args: Vec<String> = args.iter().map(|a| show_arg(a)).collect();
    args.join(" ")
}

fn show(v: &Value) -> String {
    match v {
        Value::Nil => "nil".into(),
        Value::Int(i) => i.to_string(),
        Value::BulkString(b) => format!("\"{}\"", show_bytes(b)),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(show).collect();
            format!("[{}]", items.join(", "))
        }
        Value::SimpleString(s) => s.clone(),
        Value::Okay => "OK".into(),
        Value::ServerError(e) => format!("(error) {} {}", e.code(), e.details().unwrap_or("")),
        other => format!("{other:?}"),
    }
}

fn show_ordered(v: &Value, order: Order) -> String {
    match (order, v) {
        (Order::Sorted, Value::Array(items)) => {
            let mut items: Vec<String> = items.iter().map(show).collect();
            items.sort();
            format!("sorted[{}]", items.join(", "))
        }
        (Order::Pairs, Value::Array(items)) => {
            let mut pairs: Vec<String> = items
                .chunks(2)
                .map(|p| p.iter().map(show).collect::<Vec<_>>().join(": "))
                .collect();
            pairs.sort();
            format!("pairs{{{}}}", pairs.join(", "))
        }
        _ => show(v),
    }
}

/// An integer reply (or a bulk string holding one).
fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not an integer: {v:?}")),
        other => panic!("not an integer: {other:?}"),
    }
}

/// A bulk string reply; None for nil.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::Nil => None,
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".into()),
        Value::Int(i) => Some(i.to_string()),
        other => panic!("not a string: {other:?}"),
    }
}

/// An array reply as strings (nil elements become "(nil)"); nil is empty.
fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Nil => Vec::new(),
        Value::Array(items) => items
            .iter()
            .map(|i| text(i).unwrap_or_else(|| "(nil)".into()))
            .collect(),
        other => panic!("not an array: {other:?}"),
    }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// A TTL as the application would judge it, never the raw number.
fn ttl_range(ttl: i64, max: i64) -> String {
    match ttl {
        -2 => "no such key".into(),
        -1 => "no expiry".into(),
        t if t > 0 && t <= max => format!("0 < ttl <= {max}"),
        t => format!("out of range ({t})"),
    }
}

// ---------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------

type Scenario = fn(&mut Connection, &Target) -> Vec<String>;

/// Redis Cluster's key slot (CRC16/XMODEM of the hash tag or the key, mod 16384).
fn key_slot(key: &[u8]) -> u16 {
    let mut k = key;
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                k = &key[open + 1..open + 1 + len];
            }
        }
    }
    let mut crc: u16 = 0;
    for &b in k {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc & 16383
}

fn diff_report(name: &str, a_name: &str, a: &[String], b_name: &str, b: &[String]) -> String {
    let first = (0..a.len().max(b.len()))
        .find(|&i| a.get(i) != b.get(i))
        .unwrap_or(0);
    let none = "<end of transcript>".to_string();
    let mut out = format!(
        "scenario `{name}`: transcripts differ at line {}\n  {a_name:>18}: {}\n  {b_name:>18}: {}\n",
        first + 1,
        a.get(first).unwrap_or(&none),
        b.get(first).unwrap_or(&none),
    );
    for (label, lines) in [(a_name, a), (b_name, b)] {
        out.push_str(&format!("\n--- {label} ({} lines)\n", lines.len()));
        for (i, l) in lines.iter().enumerate() {
            let mark = if i == first { ">>" } else { "  " };
            out.push_str(&format!("{mark}{:4} {l}\n", i + 1));
        }
    }
    out
}

/// Runs a scenario against a 2-shard Tessera and (twice) against redis-server, and
/// requires identical transcripts.
fn compare(name: &str, scenario: Scenario) {
    let reference = reference_redis();
    let tessera = Server::start(2);
    let ours_target = Target { port: tessera.port };
    let ours = scenario(&mut ours_target.connect(), &ours_target);
    assert!(ours.len() > 20, "scenario `{name}` recorded too little");

    // The scenario's data must have landed on both shards (slots 0-8191 and 8192-16383).
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut ours_target.connect())
        .expect("KEYS");
    let low = keys.iter().filter(|k| key_slot(k) < 8192).count();
    assert!(
        low > 0 && low < keys.len(),
        "scenario `{name}` left {} keys, {low} of them on shard 0: it does not span both shards",
        keys.len()
    );

    // SCENARIO_TRANSCRIPTS=DIR keeps each transcript as DIR/<scenario>.<server>.txt.
    let keep = |server: &str, lines: &[String]| {
        if let Some(dir) = std::env::var_os("SCENARIO_TRANSCRIPTS") {
            let path = std::path::Path::new(&dir).join(format!("{name}.{server}.txt"));
            std::fs::write(path, lines.join("\n") + "\n").expect("write transcript");
        }
    };
    keep("tessera", &ours);
    let Some(redis) = reference else { return };
    let theirs_target = Target { port: redis.port };
    let theirs = scenario(&mut theirs_target.connect(), &theirs_target);
    let again = scenario(&mut theirs_target.connect(), &theirs_target);
    keep("redis", &theirs);
    if theirs != again {
        panic!(
            "scenario is not deterministic on redis-server itself\n{}",
            diff_report(name, "redis-server #1", &theirs, "redis-server #2", &again)
        );
    }
    if theirs != ours {
        panic!(
            "{}",
            diff_report(name, "redis-server", &theirs, "tessera", &ours)
        );
    }
}

#[test]
fn retwis_twitter_clone() {
    compare("retwis", retwis);
}

#[test]
fn reliable_work_queue() {
    compare("work_queue", work_queue);
}

#[test]
fn game_leaderboard() {
    compare("leaderboard", leaderboard);
}

#[test]
fn faceted_product_search() {
    compare("faceted_search", faceted_search);
}

#[test]
fn autocomplete_lex_index() {
    compare("autocomplete", autocomplete);
}

#[test]
fn rate_limiter_sessions_cache() {
    compare("rate_limit_sessions_cache", rate_limit_sessions_cache);
}

#[test]
fn social_graph_recommendations() {
    compare("social_graph", social_graph);
}

#[test]
fn key_slot_matches_redis_cluster() {
    assert_eq!(key_slot(KEY_SHARD0.as_bytes()), 5061);
    assert_eq!(key_slot(KEY_SHARD1.as_bytes()), 12182);
    assert_eq!(key_slot(b"{foo}bar"), 12182);
    assert_eq!(
        key_slot(b"{user1000}.following"),
        key_slot(b"{user1000}.followers")
    );
    assert_eq!(key_slot(b"123456789"), 0x31C3 & 16383);
}

// ---------------------------------------------------------------------------------
// 1. Retwis, Redis's Twitter clone
// ---------------------------------------------------------------------------------

const TIMELINE_MAX: i64 = 1000;

/// Registers a user the way Retwis does; None when the name is taken.
fn retwis_register(r: &mut Rec, name: &str) -> Option<i64> {
    if text(&c!(r, "HGET users {name}")).is_some() {
        r.note(format!("register {name}: username already taken"));
        return None;
    }
    let id = int(&c!(r, "INCR next_user_id"));
    let auth = format!("auth-{name}-{id}");
    let pw = format!("pw-{name}");
    c!(
        r,
        "HSET user:{id} username {name} password {pw} auth {auth}"
    );
    c!(r, "HSET users {name} {id}");
    c!(r, "HSET auths {auth} {id}");
    Some(id)
}

/// Returns the auth secret on success.
fn retwis_login(r: &mut Rec, name: &str, password: &str) -> Option<String> {
    let Some(id) = text(&c!(r, "HGET users {name}")) else {
        r.note(format!("login {name}: no such user"));
        return None;
    };
    let real = text(&c!(r, "HGET user:{id} password"));
    if real.as_deref() != Some(password) {
        r.note(format!("login {name}: wrong password"));
        return None;
    }
    text(&c!(r, "HGET user:{id} auth"))
}

/// Retwis's isLoggedIn(): the auth cookie maps to a user whose secret matches.
fn retwis_authenticate(r: &mut Rec, auth: &str) -> Option<i64> {
    let id = text(&c!(r, "HGET auths {auth}"))?;
    let stored = text(&c!(r, "HGET user:{id} auth"));
    (stored.as_deref() == Some(auth)).then(|| id.parse().unwrap())
}

fn retwis_logout(r: &mut Rec, id: i64) {
    let old = text(&c!(r, "HGET user:{id} auth")).unwrap();
    let new = format!("auth-rotated-{id}");
    c!(r, "HSET user:{id} auth {new}");
    c!(r, "HSET auths {new} {id}");
    c!(r, "HDEL auths {old}");
}

/// Follows with sets (classic Retwis) and with time-scored zsets (the newer variant),
/// all in one MULTI/EXEC.
fn retwis_follow(r: &mut Rec, me: i64, other: i64, ts: i64) {
    let p = pipe!(atomic;
        "SADD followers:{other} {me}",
        "SADD following:{me} {other}",
        "ZADD zfollowers:{other} {ts} {me}",
        "ZADD zfollowing:{me} {ts} {other}",
    );
    r.pipe(&format!("follow {me} -> {other}"), &p);
}

fn retwis_unfollow(r: &mut Rec, me: i64, other: i64) {
    c!(r, "MULTI");
    c!(r, "SREM followers:{other} {me}");
    c!(r, "SREM following:{me} {other}");
    c!(r, "ZREM zfollowers:{other} {me}");
    c!(r, "ZREM zfollowing:{me} {other}");
    c!(r, "EXEC");
}

fn retwis_post(r: &mut Rec, uid: i64, body: &str, ts: i64) -> i64 {
    let pid = int(&c!(r, "INCR next_post_id"));
    let post = format!("post:{pid}");
    c!(r, ["HSET", post, "user_id", uid, "time", ts, "body", body]);
    let mut fans = strings(&cs!(r, "SMEMBERS followers:{uid}"));
    fans.push(uid.to_string());
    fans.sort();
    let mut p = redis::pipe();
    for f in &fans {
        p.cmd("LPUSH").arg(format!("posts:{f}")).arg(pid);
    }
    p.cmd("LPUSH").arg("timeline").arg(pid);
    p.cmd("LTRIM").arg("timeline").arg(0).arg(TIMELINE_MAX - 1);
    r.pipe(&format!("fan out post {pid}"), &p);
    pid
}

/// One page of a timeline, rendered as "username: body".
fn retwis_page(r: &mut Rec, key: &str, start: i64, count: i64) -> Vec<String> {
    let pids = strings(&c!(r, "LRANGE {key} {start} {}", start + count - 1));
    let mut out = Vec::new();
    for pid in pids {
        let f = strings(&c!(r, "HMGET post:{pid} user_id time body"));
        let name = text(&c!(r, "HGET user:{} username", f[0])).unwrap_or_default();
        out.push(format!("{name}: {}", f[2]));
    }
    r.note(format!("{key} page at {start}: {out:?}"));
    out
}

fn retwis(con: &mut Connection, _t: &Target) -> Vec<String> {
    let mut r = Rec::new(con);
    let names = [
        "antirez", "pieter", "jdoe", "alice", "bob", "carol", "dave", "erin", "frank", "grace",
    ];
    let mut id = BTreeMap::new();
    for name in names {
        id.insert(name, retwis_register(&mut r, name).expect("fresh name"));
    }
    assert_eq!(retwis_register(&mut r, "alice"), None);
    c!(r, "HSETNX users alice 999");
    c!(r, "GET users"); // a bug in the app: wrong type
    c!(r, "HLEN users");
    cp!(r, "HGETALL user:{}", id["carol"]);

    // Login, authentication and logout (which rotates the secret).
    let auth = retwis_login(&mut r, "alice", "pw-alice").expect("alice logs in");
    assert_eq!(retwis_login(&mut r, "bob", "guess"), None);
    assert_eq!(retwis_login(&mut r, "mallory", "x"), None);
    assert_eq!(retwis_authenticate(&mut r, &auth), Some(id["alice"]));
    assert_eq!(retwis_authenticate(&mut r, "forged"), None);
    retwis_logout(&mut r, id["alice"]);
    assert_eq!(retwis_authenticate(&mut r, &auth), None);
    let auth = retwis_login(&mut r, "alice", "pw-alice").unwrap();
    assert_eq!(auth, format!("auth-rotated-{}", id["alice"]));

    // The follow graph: everyone follows antirez; a few mutual pairs.
    let mut ts = 1_700_000_000;
    for name in names.iter().skip(1) {
        ts += 7;
        retwis_follow(&mut r, id[name], id["antirez"], ts);
    }
    for (a, b) in [
        ("antirez", "pieter"),
        ("alice", "bob"),
        ("bob", "alice"),
        ("alice", "carol"),
        ("carol", "alice"),
        ("dave", "alice"),
        ("erin", "alice"),
        ("alice", "dave"),
        ("grace", "frank"),
        ("jdoe", "carol"),
    ] {
        ts += 13;
        retwis_follow(&mut r, id[a], id[b], ts);
    }
    // Following twice changes nothing.
    retwis_follow(&mut r, id["alice"], id["bob"], ts + 1);
    retwis_unfollow(&mut r, id["grace"], id["antirez"]);
    retwis_unfollow(&mut r, id["grace"], id["antirez"]);

    // Posting fans out to every follower's list and the global timeline.
    let posts = [
        ("antirez", "Redis 7.0 is out"),
        ("alice", "hello world"),
        ("bob", "first post!"),
        ("alice", "lunch: ramen"),
        ("carol", "reading the Retwis source"),
        ("antirez", "streams are fun"),
        ("dave", "anyone up for chess?"),
        ("alice", "ramen was great"),
        ("pieter", "hiredis release"),
        ("erin", "on vacation"),
        ("alice", "back to work"),
    ];
    for (who, body) in posts {
        ts += 60;
        retwis_post(&mut r, id[who], body, ts);
    }
    // Alice's home timeline, three posts a page, newest first.
    let alice_posts = format!("posts:{}", id["alice"]);
    let page1 = retwis_page(&mut r, &alice_posts, 0, 3);
    assert_eq!(page1[0], "alice: back to work");
    retwis_page(&mut r, &alice_posts, 3, 3);
    retwis_page(&mut r, &alice_posts, 6, 3);
    let last = retwis_page(&mut r, &alice_posts, 30, 3);
    assert!(last.is_empty());
    c!(r, "LLEN {alice_posts}");
    retwis_page(&mut r, &format!("posts:{}", id["grace"]), 0, 10);
    retwis_page(&mut r, "timeline", 0, 5);

    // Counts and relationships.
    for name in ["antirez", "alice", "grace", "jdoe"] {
        let n = id[name];
        c!(r, "SCARD followers:{n}");
        c!(r, "SCARD following:{n}");
        c!(r, "ZCARD zfollowers:{n}");
    }
    let [antirez, alice, bob, carol, dave, erin] =
        ["antirez", "alice", "bob", "carol", "dave", "erin"].map(|n| id[n]);
    let antirez_fans = int(&c!(r, "SCARD followers:{antirez}"));
    assert_eq!(antirez_fans, names.len() as i64 - 2);
    c!(r, "ZREVRANGE zfollowers:{antirez} 0 2 WITHSCORES");
    c!(r, "ZRANGE zfollowing:{alice} 0 -1");
    c!(r, "ZSCORE zfollowing:{alice} {bob}");
    // Mutual follows: whom alice follows who follow her back.
    let mutual = strings(&cs!(r, "SINTER following:{alice} followers:{alice}"));
    assert_eq!(
        sorted(mutual),
        sorted([bob, carol, dave].iter().map(i64::to_string).collect())
    );
    cs!(r, "SDIFF following:{alice} following:{bob}");
    c!(r, "SISMEMBER followers:{alice} {erin}");

    // A busy bot fills the global timeline past its cap; LTRIM keeps the newest 1000.
    let bot = retwis_register(&mut r, "newsbot").unwrap();
    let first = int(&c!(r, "INCRBY next_post_id 1005")) - 1004;
    let mut p = redis::pipe();
    for pid in first..first + 1005 {
        let time = ts + pid;
        p.add_command(cmd_of(&format!(
            "HSET post:{pid} user_id {bot} time {time} body #{pid}"
        )));
        p.add_command(cmd_of(&format!("LPUSH timeline {pid}")));
        p.add_command(cmd_of(&format!("LTRIM timeline 0 {}", TIMELINE_MAX - 1)));
    }
    let replies = strings(&r.pipe_quiet(&p));
    r.note(format!(
        "newsbot posts 1005 headlines: {} replies",
        replies.len()
    ));
    assert_eq!(int(&c!(r, "LLEN timeline")), TIMELINE_MAX);
    c!(r, "LINDEX timeline 0");
    c!(r, "LINDEX timeline -1");
    c!(r, "LRANGE timeline 997 1005");
    retwis_page(&mut r, "timeline", 0, 2);
    c!(r, "GET next_post_id");
    r.done()
}

// ---------------------------------------------------------------------------------
// 2. Reliable work queue
// ---------------------------------------------------------------------------------

/// A worker takes the next job into its processing list, in one of the three ways
/// Redis offers, and takes a lease on it.
fn queue_take(r: &mut Rec, worker: &str, how: usize, lease_ms: i64) -> Option<String> {
    let processing = format!("jobs:processing:{worker}");
    let job = text(&match how {
        0 => c!(r, "LMOVE jobs:pending {processing} RIGHT LEFT"),
        1 => c!(r, "RPOPLPUSH jobs:pending {processing}"),
        _ => c!(r, "BLMOVE jobs:pending {processing} RIGHT LEFT 0.1"),
    })?;
    c!(r, "SET lease:{job} {worker} PX {lease_ms}");
    c!(r, "HINCRBY {job} attempts 1");
    Some(job)
}

fn queue_ack(r: &mut Rec, worker: &str, job: &str) {
    let p = pipe!(atomic;
        "LREM jobs:processing:{worker} 1 {job}",
        "HSET {job} status done",
        "DEL lease:{job}",
        "INCR stats:jobs:done",
    );
    r.pipe(&format!("{worker} acks {job}"), &p);
}

/// The reaper puts every job whose lease expired back at the head of the queue.
fn queue_reap(r: &mut Rec) -> usize {
    let mut lists = BTreeSet::new();
    let mut cursor = "0".to_string();
    loop {
        let v = r.quiet(&["SCAN", &cursor, "MATCH", "jobs:processing:*", "COUNT", "5"]);
        let Value::Array(parts) = v else {
            panic!("SCAN reply")
        };
        cursor = text(&parts[0]).unwrap();
        lists.extend(strings(&parts[1]));
        if cursor == "0" {
            break;
        }
    }
    r.note(format!("processing lists: {lists:?}"));
    let mut reaped = 0;
    for list in lists {
        for job in strings(&c!(r, "LRANGE {list} 0 -1")) {
            if int(&c!(r, "EXISTS lease:{job}")) == 0 {
                let p = pipe!(atomic; "LREM {list} 1 {job}", "RPUSH jobs:pending {job}");
                r.pipe(&format!("requeue {job}"), &p);
                reaped += 1;
            }
        }
    }
    reaped
}

fn work_queue(con: &mut Connection, t: &Target) -> Vec<String> {
    let mut r = Rec::new(con);
    for n in 1..=12 {
        let (job, payload) = (format!("job:{n}"), format!("resize img{n}.png"));
        c!(r, ["HSET", job, "payload", payload, "attempts", 0]);
    }
    c!(r, "LPUSH jobs:pending job:1 job:2 job:3 job:4");
    c!(r, "LPUSH jobs:pending job:5 job:6 job:7 job:8");
    c!(r, "LLEN jobs:pending");
    c!(r, "LRANGE jobs:pending 0 -1");

    let a = queue_take(&mut r, "alpha", 0, 60_000).unwrap();
    assert_eq!(a, "job:1");
    queue_ack(&mut r, "alpha", &a);
    // beta takes a job with a short lease and crashes.
    let lost = queue_take(&mut r, "beta", 1, 30).unwrap();
    let g = queue_take(&mut r, "gamma", 2, 60_000).unwrap();
    c!(r, "LPUSH jobs:pending job:9 job:10 job:11 job:12");
    let a1 = queue_take(&mut r, "alpha", 0, 60_000).unwrap();
    let a2 = queue_take(&mut r, "alpha", 2, 60_000).unwrap();
    c!(r, "LRANGE jobs:processing:alpha 0 -1");
    queue_ack(&mut r, "alpha", &a1); // not the head of alpha's list
    queue_ack(&mut r, "alpha", &a2);
    queue_ack(&mut r, "gamma", &g);
    c!(r, "EXISTS jobs:processing:alpha jobs:processing:gamma");
    c!(r, "LRANGE jobs:processing:beta 0 -1");

    std::thread::sleep(Duration::from_millis(80));
    let reaped = queue_reap(&mut r);
    assert_eq!(reaped, 1);
    c!(r, "LINDEX jobs:pending -1");
    c!(r, "LLEN jobs:processing:beta");

    // gamma drains the queue, the re-queued job first.
    let mut order = Vec::new();
    for i in 0.. {
        let Some(job) = queue_take(&mut r, "gamma", i % 3, 60_000) else {
            break;
        };
        queue_ack(&mut r, "gamma", &job);
        order.push(job);
    }
    assert_eq!(order[0], lost);
    r.note(format!("gamma drained {order:?}"));
    // Blocking pops on the empty queue time out with nil.
    c!(r, "BLPOP jobs:pending 0.1");
    c!(r, "BRPOPLPUSH jobs:pending jobs:processing:gamma 0.05");
    c!(r, "BLMPOP 0.05 2 jobs:pending jobs:urgent LEFT");
    c!(r, "LMPOP 2 jobs:pending jobs:urgent RIGHT COUNT 3");
    c!(r, "EXISTS jobs:pending jobs:processing:gamma");
    // A worker blocked on an empty queue is woken by a producer's push.
    let mut delta = t.connect();
    let blocked = std::thread::spawn(move || {
        let take = "BLMOVE jobs:urgent jobs:processing:delta LEFT LEFT 5";
        q::<Option<String>>(&mut delta, &take.split(' ').collect::<Vec<_>>())
    });
    wait_blocked(r.con, 1);
    c!(r, "RPUSH jobs:urgent job:13 job:14");
    let woke = blocked.join().unwrap();
    r.note(format!("blocked worker delta got {woke:?}"));
    assert_eq!(woke.as_deref(), Some("job:13"));
    c!(r, "LRANGE jobs:urgent 0 -1");
    c!(r, "LRANGE jobs:processing:delta 0 -1");
    assert_eq!(int(&c!(r, "GET stats:jobs:done")), 12);
    for n in 1..=12 {
        c!(r, "HMGET job:{n} status attempts");
    }
    let attempts = text(&c!(r, "HGET {lost} attempts"));
    assert_eq!(attempts.as_deref(), Some("2"), "the lost job ran twice");

    // Concurrent workers with their own connections; one crashes mid-job. The
    // transcript records only the end state, which is deterministic.
    concurrent_workers(t);
    c!(r, "HLEN cq:seen");
    c!(r, "LLEN cq:queue");
    c!(
        r,
        "EXISTS cq:processing:w1 cq:processing:w2 cq:processing:w3"
    );
    c!(r, "HGET cq:seen cq:job:0");
    c!(r, "HGET cq:seen cq:job:{}", CQ_JOBS - 1);
    let counts = sorted(strings(&r.quiet(&["HVALS", "cq:seen"])));
    r.note(format!(
        "times each job was processed: {:?}",
        counts.first()..=counts.last()
    ));
    r.done()
}

const CQ_JOBS: usize = 240;

/// One producer and three workers on their own connections (BLMOVE into a processing
/// list, process, LREM to ack); worker 3 crashes holding a job, which the reaper
/// re-queues. Asserts that every job was processed exactly once.
fn concurrent_workers(t: &Target) {
    let produced = Arc::new(AtomicBool::new(false));
    let producer = {
        let mut con = t.connect();
        let produced = produced.clone();
        std::thread::spawn(move || {
            for batch in 0..CQ_JOBS / 10 {
                let jobs: Vec<String> = (batch * 10..batch * 10 + 10)
                    .map(|j| format!("cq:job:{j}"))
                    .collect();
                let _: i64 = redis::cmd("LPUSH")
                    .arg("cq:queue")
                    .arg(jobs)
                    .query(&mut con)
                    .unwrap();
            }
            produced.store(true, Ordering::SeqCst);
        })
    };
    let workers: Vec<_> = (1..=3)
        .map(|w| {
            let mut con = t.connect();
            let produced = produced.clone();
            std::thread::spawn(move || {
                let processing = format!("cq:processing:w{w}");
                let mut handled = 0;
                loop {
                    let job: Option<String> = q(
                        &mut con,
                        &["BLMOVE", "cq:queue", &processing, "RIGHT", "LEFT", "0.05"],
                    );
                    let Some(job) = job else {
                        // Done once the producer has finished and the queue is empty.
                        let done = produced.load(Ordering::SeqCst);
                        if done && q::<i64>(&mut con, &["LLEN", "cq:queue"]) == 0 {
                            break;
                        }
                        continue;
                    };
                    if w == 3 && handled == 5 {
                        break; // crashes with the job still in its processing list
                    }
                    let by = format!("cq:by:w{w}");
                    pipe!(atomic;
                        "HINCRBY cq:seen {job} 1",
                        "SADD {by} {job}",
                        "LREM {processing} 1 {job}",
                    )
                    .query::<()>(&mut con)
                    .unwrap();
                    handled += 1;
                }
                handled
            })
        })
        .collect();
    producer.join().unwrap();
    let handled: Vec<usize> = workers.into_iter().map(|h| h.join().unwrap()).collect();
    // The reaper re-queues the crashed worker's job (if it got that far); it is drained.
    let mut con = t.connect();
    let mut leftover = 0;
    let requeue = ["LMOVE", "cq:processing:w3", "cq:queue", "RIGHT", "RIGHT"];
    while q::<Option<String>>(&mut con, &requeue).is_some() {
        leftover += 1;
    }
    while let Some(job) = q::<Option<String>>(&mut con, &["RPOP", "cq:queue"]) {
        q::<i64>(&mut con, &["HINCRBY", "cq:seen", &job, "1"]);
    }
    assert!(leftover <= 1);
    let seen: BTreeMap<String, i64> = q(&mut con, &["HGETALL", "cq:seen"]);
    assert_eq!(seen.len(), CQ_JOBS, "every job processed");
    assert!(seen.values().all(|&n| n == 1), "a job was processed twice");
    assert_eq!(
        handled.iter().sum::<usize>() + leftover,
        CQ_JOBS,
        "{handled:?}"
    );
    let by_worker: i64 = (1..=3)
        .map(|w| q::<i64>(&mut con, &["SCARD", &format!("cq:by:w{w}")]))
        .sum();
    assert_eq!(by_worker as usize, handled.iter().sum::<usize>());
}

// ---------------------------------------------------------------------------------
// 3. Leaderboard
// ---------------------------------------------------------------------------------

fn leaderboard(con: &mut Connection, _t: &Target) -> Vec<String> {
    let mut r = Rec::new(con);
    let players = [
        ("alice", "1200"),
        ("bob", "1350"),
        ("carol", "980.5"),
        ("dave", "1350"),
        ("erin", "2010.25"),
        ("frank", "0"),
        ("grace", "-15.75"),
        ("heidi", "1999.999"),
        ("ivan", "1200"),
        ("judy", "875"),
        ("mallory", "+inf"),
        ("oscar", "-inf"),
    ];
    for chunk in players.chunks(4) {
        let pairs: Vec<String> = chunk.iter().map(|(n, s)| format!("{s} {n}")).collect();
        c!(r, "ZADD lb:global {}", pairs.join(" "));
    }
    c!(r, "ZCARD lb:global");
    c!(r, "ZADD lb:global NX 5000 alice");
    c!(r, "ZADD lb:global GT CH 1100 alice");
    c!(r, "ZADD lb:global GT CH 1250 alice");
    c!(r, "ZADD lb:global LT CH 900 judy");
    c!(r, "ZADD lb:global XX INCR 50 bob");
    c!(r, "ZADD lb:global XX INCR 50 nobody");
    c!(r, "ZADD lb:global 12k3 typo");
    c!(r, "ZINCRBY lb:global 0.1 carol");
    c!(r, "ZINCRBY lb:global 25 peggy");
    c!(r, "ZINCRBY lb:global -inf mallory");
    c!(r, "ZSCORE lb:global mallory");
    c!(r, "ZSCORE lb:global oscar");
    c!(r, "ZSCORE lb:global carol");

    // Cheaters are removed before the board is published.
    c!(r, "ZREM lb:global mallory oscar nobody");
    c!(r, "ZREMRANGEBYSCORE lb:global -inf (0");
    let top = strings(&c!(r, "ZREVRANGE lb:global 0 4 WITHSCORES"));
    assert_eq!(top[0], "erin");
    assert_eq!(top[2], "heidi");
    c!(r, "ZRANGE lb:global 0 2 REV WITHSCORES");
    c!(r, "ZRANGE lb:global 0 -1");
    for who in ["erin", "alice", "frank", "nobody"] {
        c!(r, "ZREVRANK lb:global {who}");
        c!(r, "ZRANK lb:global {who}");
    }
    // The "my position" widget: rank, score, neighbours.
    let rank = int(&c!(r, "ZREVRANK lb:global ivan"));
    let (from, to) = ((rank - 1).max(0), rank + 1);
    c!(r, "ZREVRANGE lb:global {from} {to} WITHSCORES");
    r.note(format!("ivan is #{}", rank + 1));

    c!(r, "ZCOUNT lb:global 1000 (2000");
    c!(r, "ZCOUNT lb:global -inf +inf");
    c!(r, "ZCOUNT lb:global (1350 1400");
    c!(r, "ZRANGE lb:global 1000 2000 BYSCORE LIMIT 1 3 WITHSCORES");
    c!(r, "ZRANGEBYSCORE lb:global (1000 +inf LIMIT 0 2 WITHSCORES");
    c!(r, "ZRANGE lb:global (2000 1000 BYSCORE REV LIMIT 0 3");
    c!(r, "ZREVRANGEBYSCORE lb:global +inf -inf LIMIT 2 3");
    c!(r, "ZMSCORE lb:global alice nobody heidi");

    // Daily boards, merged into weekly ones.
    let names = [
        "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
    ];
    for day in 1..=7usize {
        let mut args = vec!["ZADD".to_string(), format!("lb:day:{day}")];
        for (i, name) in names.iter().enumerate() {
            if (i * day) % 7 == 3 {
                continue;
            }
            let score = ((i * 37 + day * 11) % 50) as f64 + 0.25 * ((i + day) % 3) as f64;
            args.push(score.to_string());
            args.push(name.to_string());
        }
        r.argv(args);
    }
    let days: Vec<String> = (1..=7).map(|d| format!("lb:day:{d}")).collect();
    let days = days.join(" ");
    // The weekend counts double; a player's week is their best day.
    c!(
        r,
        "ZUNIONSTORE lb:week:max 7 {days} WEIGHTS 1 1 1 1 1 2 2 AGGREGATE MAX"
    );
    c!(r, "ZUNIONSTORE lb:week:sum 7 {days}");
    c!(r, "ZINTERSTORE lb:week:min 7 {days} AGGREGATE MIN");
    c!(r, "ZREVRANGE lb:week:max 0 -1 WITHSCORES");
    let week_top = strings(&c!(r, "ZREVRANGE lb:week:sum 0 2 WITHSCORES"));
    assert_eq!(week_top[0..2], ["grace", "197.5"]);
    c!(r, "ZRANGE lb:week:min 0 -1 WITHSCORES");
    c!(r, "ZUNION 2 lb:day:1 lb:day:2 WITHSCORES");
    c!(r, "ZINTER 2 lb:day:1 lb:day:2 WEIGHTS 0.5 2 WITHSCORES");
    c!(r, "ZDIFF 2 lb:day:1 lb:day:2");

    // Prizes: pop the best two and the worst of the weekly board.
    c!(r, "ZPOPMAX lb:week:max 2");
    c!(r, "ZPOPMIN lb:week:max");
    c!(r, "ZCARD lb:week:max");

    // A random sample for the "spotlight" box.
    let day1 = sorted(strings(&c!(r, "ZRANGE lb:day:1 0 -1")));
    cs!(r, "ZRANDMEMBER lb:day:1 100");
    cp!(r, "ZRANDMEMBER lb:day:1 100 WITHSCORES");
    let sample = strings(&r.quiet(&["ZRANDMEMBER", "lb:day:1", "-5"]));
    r.note(format!(
        "ZRANDMEMBER lb:day:1 -5: {} picks, all members: {}",
        sample.len(),
        sample.iter().all(|m| day1.contains(m))
    ));
    let one = text(&r.quiet(&["ZRANDMEMBER", "lb:day:1"])).unwrap();
    r.note(format!(
        "ZRANDMEMBER lb:day:1 is a member: {}",
        day1.contains(&one)
    ));
    assert_eq!(sample.len(), 5);

    c!(r, "ZRANGESTORE lb:hall-of-fame lb:global 0 2 REV");
    c!(r, "ZREMRANGEBYRANK lb:hall-of-fame 0 0");
    c!(r, "ZRANGE lb:hall-of-fame 0 -1 WITHSCORES");
    c!(r, "ZADD lb:global 1e3 newbie 3.0e-1 tiny -0.5 negative");
    c!(r, "ZRANGE lb:global -1 1001 BYSCORE WITHSCORES");
    r.done()
}

// ---------------------------------------------------------------------------------
// 4. Secondary indexes and faceted search
// ---------------------------------------------------------------------------------

fn faceted_search(con: &mut Connection, _t: &Target) -> Vec<String> {
    let mut r = Rec::new(con);
    let products = [
        // id | name | price | brand | tags
        "1|Aurora Lamp|49.99|lumina|home lighting sale",
        "2|Bolt Charger|19.5|voltix|electronics sale",
        "3|Cobalt Headphones|129|sonique|electronics audio",
        "4|Drift Speaker|89.9|sonique|electronics audio sale",
        "5|Ember Kettle|35|lumina|home kitchen",
        "6|Flux Cable|9.99|voltix|electronics",
        "7|Glow Strip|24.5|lumina|lighting electronics sale",
        "8|Harbor Mug|12|oakline|home kitchen sale",
        "9|Iris Monitor|249|voltix|electronics office",
        "10|Jade Desk|310|oakline|office home",
        "11|Kite Mouse|24.5|voltix|electronics office",
        "12|Lumen Bulb|7.25|lumina|lighting home sale",
    ];
    for product in products {
        let [id, name, price, brand, tags] = product.split('|').collect::<Vec<_>>()[..] else {
            unreachable!()
        };
        let id: i64 = id.parse().unwrap();
        let stock = (id * 3 % 7).to_string();
        let mut p = pipe!(atomic; "SADD brand:{brand} {id}", "ZADD idx:price {price} {id}");
        let fields = [
            "name", name, "price", price, "brand", brand, "stock", &stock,
        ];
        p.cmd("HSET").arg(format!("product:{id}")).arg(&fields[..]);
        p.cmd("SADD").arg("catalog:names").arg(name);
        for tag in tags.split(' ') {
            p.add_command(cmd_of(&format!("SADD tag:{tag} {id}")));
        }
        r.pipe(&format!("index product {id}"), &p);
    }
    cp!(r, "HGETALL product:4");
    c!(r, "HMGET product:3 name price color");

    // Facets.
    let red_elec = strings(&cs!(r, "SINTER tag:electronics tag:sale"));
    assert_eq!(sorted(red_elec), ["2", "4", "7"]);
    cs!(r, "SINTER tag:electronics tag:sale brand:voltix");
    cs!(r, "SUNION brand:lumina brand:oakline");
    cs!(r, "SDIFF tag:electronics tag:sale");
    cs!(r, "SDIFF tag:home tag:kitchen tag:lighting");
    c!(r, "SINTERSTORE tmp:q:home-sale tag:home tag:sale");
    c!(r, "EXPIRE tmp:q:home-sale 30");
    let ttl = int(&r.quiet(&["TTL", "tmp:q:home-sale"]));
    r.note(format!("TTL tmp:q:home-sale: {}", ttl_range(ttl, 30)));
    cs!(r, "SMEMBERS tmp:q:home-sale");
    c!(r, "SCARD tmp:q:nothing");
    c!(r, "SINTERSTORE tmp:q:nothing tag:office tag:kitchen");
    c!(r, "EXISTS tmp:q:nothing");

    // Price ranges.
    c!(r, "ZRANGEBYSCORE idx:price 10 50 WITHSCORES");
    c!(r, "ZRANGEBYSCORE idx:price (24.5 +inf LIMIT 0 3");
    c!(
        r,
        "ZREVRANGEBYSCORE idx:price 100 -inf LIMIT 0 3 WITHSCORES"
    );
    c!(r, "ZCOUNT idx:price -inf (20");
    // Electronics ordered by price: a set intersected with the price zset.
    c!(
        r,
        "ZINTERSTORE tmp:q:elec-by-price 2 tag:electronics idx:price WEIGHTS 0 1"
    );
    let cheapest = strings(&c!(r, "ZRANGE tmp:q:elec-by-price 0 -1 WITHSCORES"));
    assert_eq!(cheapest[0], "6");
    c!(r, "ZINTERSTORE tmp:q:x 2 tag:sale idx:price AGGREGATE MAX");
    c!(r, "ZRANGE tmp:q:x 0 2 WITHSCORES");
    // Relevance: how many of the wanted tags a product has.
    c!(
        r,
        "ZUNIONSTORE tmp:q:relevance 3 tag:sale tag:lighting tag:home"
    );
    c!(r, "ZREVRANGE tmp:q:relevance 0 4 WITHSCORES");
    c!(r, "EXPIRE tmp:q:relevance 60");

    // SORT by an external hash field, fetching fields (ties break on the element).
    let sorted_ids = strings(&c!(
        r,
        "SORT tag:electronics BY product:*->price GET # GET product:*->name LIMIT 0 4"
    ));
    assert_eq!(sorted_ids[0..2], ["6", "Flux Cable"]);
    c!(
        r,
        "SORT tag:sale BY product:*->price DESC GET product:*->name"
    );
    c!(r, "SORT brand:lumina BY product:*->name ALPHA GET #");
    c!(r, "SORT tag:office ALPHA");
    c!(r, "SORT tag:home");
    c!(r, "SORT tag:home DESC LIMIT 1 2");
    c!(r, "SORT catalog:names LIMIT 0 5"); // forgot ALPHA
    c!(r, "SORT catalog:names ALPHA LIMIT 0 5");
    c!(r, "SORT catalog:names ALPHA DESC LIMIT 0 2");
    c!(
        r,
        "SORT_RO tag:audio BY product:*->stock GET product:*->stock GET #"
    );
    c!(
        r,
        "SORT tag:electronics BY product:*->price GET product:*->name STORE result:elec-names"
    );
    c!(r, "LRANGE result:elec-names 0 -1");
    c!(
        r,
        "SORT tag:kitchen BY nosuchkey:* GET product:*->missing GET #"
    );

    // Updates keep the indexes in step.
    c!(r, "HSET product:6 price 11.99");
    c!(r, "ZADD idx:price XX CH 11.99 6");
    c!(r, "HINCRBYFLOAT product:1 price -5");
    c!(r, "HINCRBY product:9 stock -1");
    c!(r, "HINCRBY product:9 stock -1");
    let mut p = pipe!(atomic;
        "DEL product:12",
        "SREM tag:lighting 12",
        "SREM tag:home 12",
        "SREM tag:sale 12",
        "SREM brand:lumina 12",
        "ZREM idx:price 12",
    );
    p.cmd("SREM").arg("catalog:names").arg("Lumen Bulb");
    r.pipe("delete product 12", &p);
    c!(r, "ZRANGE idx:price 0 2 WITHSCORES");
    cs!(r, "SMEMBERS tag:lighting");

    // An admin page lists every product key with SCAN.
    for (pattern, kind) in [
        ("product:*", None),
        ("tag:*", Some("set")),
        ("*", Some("zset")),
    ] {
        let mut found = BTreeSet::new();
        let mut cursor = "0".to_string();
        loop {
            let mut args = vec!["SCAN", cursor.as_str(), "MATCH", pattern, "COUNT", "4"];
            if let Some(k) = kind {
                args.extend(["TYPE", k]);
            }
            let Value::Array(parts) = r.quiet(&args) else {
                panic!("SCAN reply")
            };
            let next = text(&parts[0]).unwrap();
            found.extend(strings(&parts[1]));
            cursor = next;
            if cursor == "0" {
                break;
            }
        }
        r.note(format!("SCAN MATCH {pattern} TYPE {kind:?}: {found:?}"));
        if pattern == "product:*" {
            assert_eq!(found.len(), 11);
        }
    }
    r.done()
}

// ---------------------------------------------------------------------------------
// 5. Autocomplete and lexicographic indexes
// ---------------------------------------------------------------------------------

/// Records `before [prefix [prefix\xff after`: the lexicographic range of every
/// member starting with `prefix`.
fn prefix_range(r: &mut Rec, before: &str, prefix: &str, after: &str) -> Value {
    let mut args: Vec<Vec<u8>> = before.split(' ').map(|a| a.as_bytes().to_vec()).collect();
    args.push(format!("[{prefix}").into_bytes());
    args.push([format!("[{prefix}").as_bytes(), b"\xff"].concat());
    args.extend(
        after
            .split_ascii_whitespace()
            .map(|a| a.as_bytes().to_vec()),
    );
    r.bin(args)
}

/// Completions of `prefix`: ZRANGEBYLEX key [prefix [prefix\xff LIMIT 0 n.
fn complete(r: &mut Rec, key: &str, prefix: &str, n: usize) -> Vec<String> {
    strings(&prefix_range(
        r,
        &format!("ZRANGEBYLEX {key}"),
        prefix,
        &format!("LIMIT 0 {n}"),
    ))
}

fn autocomplete(con: &mut Connection, _t: &Target) -> Vec<String> {
    let mut r = Rec::new(con);
    let words: Vec<&str> = "red redis reddit redirect redux react reactor ruby rubygems rust \
        rustacean rusty python pytorch pyramid java javascript javadoc jazz go golang gopher \
        haskell hash hashmap kotlin lua luajit zig zebra zsh scala scheme sql sqlite swift node \
        nodejs nim ocaml elixir erlang"
        .split_ascii_whitespace()
        .collect();
    for chunk in words.chunks(9) {
        let members: Vec<String> = chunk.iter().map(|w| format!("0 {w}")).collect();
        c!(r, "ZADD ac:words {}", members.join(" "));
    }
    c!(r, "ZCARD ac:words");
    let re = complete(&mut r, "ac:words", "red", 10);
    assert_eq!(re, ["red", "reddit", "redirect", "redis", "redux"]);
    complete(&mut r, "ac:words", "re", 3);
    complete(&mut r, "ac:words", "ru", 10);
    complete(&mut r, "ac:words", "java", 10);
    assert!(complete(&mut r, "ac:words", "x", 10).is_empty());
    complete(&mut r, "ac:words", "", 4);
    prefix_range(&mut r, "ZLEXCOUNT ac:words", "py", "");
    c!(r, "ZLEXCOUNT ac:words - +");
    c!(r, "ZLEXCOUNT ac:words (go [gopher");
    c!(r, "ZRANGEBYLEX ac:words - + LIMIT 0 5");
    c!(r, "ZRANGEBYLEX ac:words [s (t");
    c!(r, "ZREVRANGEBYLEX ac:words (s [node LIMIT 0 3");
    c!(r, "ZRANGE ac:words [h (i BYLEX");
    c!(r, "ZRANGE ac:words + - BYLEX REV LIMIT 0 3");
    c!(r, "ZRANGEBYLEX ac:words re rf");
    c!(r, "ZRANK ac:words rust");

    // Retiring a family of words.
    let removed = int(&prefix_range(&mut r, "ZREMRANGEBYLEX ac:words", "java", ""));
    assert_eq!(removed, 3);
    complete(&mut r, "ac:words", "ja", 10);
    c!(r, "ZREMRANGEBYLEX ac:words [zebra [zsh");
    c!(r, "ZCARD ac:words");

    // Popularity-ranked completions: every search bumps each of its prefixes.
    let searches = [
        "redis", "redis", "rust", "ruby", "redis", "react", "rust", "python", "pytorch", "react",
        "redis", "go", "golang", "rust",
    ];
    for term in searches {
        let mut p = redis::pipe();
        for len in 1..=term.len() {
            let prefix = &term[..len];
            p.add_command(cmd_of(&format!("ZINCRBY ac:freq:{prefix} 1 {term}")));
        }
        r.pipe(&format!("search {term}"), &p);
    }
    let top = strings(&c!(r, "ZREVRANGE ac:freq:r 0 2 WITHSCORES"));
    assert_eq!(top[0..2], ["redis", "4"]);
    c!(r, "ZREVRANGE ac:freq:re 0 -1 WITHSCORES");
    c!(r, "ZREVRANGE ac:freq:ru 0 -1 WITHSCORES");
    c!(r, "ZREVRANGE ac:freq:py 0 -1 WITHSCORES");
    c!(r, "ZREVRANGE ac:freq:g 0 -1 WITHSCORES");
    c!(r, "ZSCORE ac:freq:rust rust");
    c!(r, "EXISTS ac:freq:x");

    // A case-insensitive name index with ids: "lowercase:Original:id" entries.
    let people = [
        ("Anna", 7),
        ("anne", 3),
        ("Annabel", 12),
        ("Bart", 4),
        ("annika", 9),
        ("ANDREW", 1),
        ("Zoe", 30),
    ];
    for (name, id) in people {
        c!(r, "ZADD idx:people 0 {}:{name}:{id}", name.to_lowercase());
    }
    complete(&mut r, "idx:people", "ann", 10);
    complete(&mut r, "idx:people", "an", 2);
    complete(&mut r, "idx:people", "anna:", 10);
    c!(r, "ZRANGEBYLEX idx:people [b +");

    // Autocomplete per language, on many keys.
    for (lang, list) in [
        ("en", &["hello", "help", "helmet", "hero"][..]),
        ("fr", &["bonjour", "bonsoir", "bon", "bonbon"][..]),
        ("de", &["hallo", "hallenbad", "halt"][..]),
        ("it", &["ciao", "cibo", "cielo"][..]),
        ("es", &["hola", "hora", "horno"][..]),
    ] {
        let key = format!("ac:lang:{lang}");
        for w in list {
            c!(r, "ZADD {key} 0 {w}");
        }
    }
    complete(&mut r, "ac:lang:en", "hel", 10);
    complete(&mut r, "ac:lang:fr", "bon", 2);
    complete(&mut r, "ac:lang:de", "hall", 10);
    complete(&mut r, "ac:lang:it", "ci", 10);
    complete(&mut r, "ac:lang:es", "hor", 10);
    r.done()
}

// ---------------------------------------------------------------------------------
// 6. Rate limiter, session store, cache, locks, optimistic transactions
// ---------------------------------------------------------------------------------

fn rate_limit_sessions_cache(con: &mut Connection, t: &Target) -> Vec<String> {
    let mut r = Rec::new(con);

    // Fixed window: INCR + EXPIRE in MULTI/EXEC, 5 requests per window.
    let mut allowed = Vec::new();
    for user in ["u:17", "u:42"] {
        let key = format!("rl:fixed:{user}:28333333");
        let n = if user == "u:17" { 7 } else { 2 };
        for _ in 0..n {
            let p = pipe!(atomic; "INCR {key}", "EXPIRE {key} 60");
            let v = r.pipe(&format!("hit {key}"), &p);
            let count: i64 = strings(&v)[0].parse().unwrap();
            allowed.push(count <= 5);
        }
        let ttl = int(&r.quiet(&["TTL", &key]));
        r.note(format!("TTL {key}: {}", ttl_range(ttl, 60)));
    }
    r.note(format!("fixed window decisions: {allowed:?}"));
    assert_eq!(allowed.iter().filter(|a| !**a).count(), 2);

    // Sliding window log: ZREMRANGEBYSCORE + ZADD + ZCARD + PEXPIRE in a pipeline, with
    // the application's clock (milliseconds) passed in.
    let mut decisions = Vec::new();
    for i in 0..12i64 {
        let now = 1_000_000 + i * 150;
        let key = "rl:sliding:api-key-9";
        let cutoff = now - 1000;
        let p = pipe!(
            "ZREMRANGEBYSCORE {key} 0 {cutoff}",
            "ZADD {key} {now} req-{i}",
            "ZCARD {key}",
            "PEXPIRE {key} 1000",
        );
        let v = r.pipe(&format!("sliding request {i} at {now}"), &p);
        let Value::Array(parts) = v else {
            panic!("pipeline reply")
        };
        decisions.push(int(&parts[2]) <= 5);
    }
    r.note(format!("sliding window decisions: {decisions:?}"));
    assert!(decisions[..5].iter().all(|d| *d));
    assert!(!decisions[6]);
    c!(r, "ZRANGE rl:sliding:api-key-9 0 -1 WITHSCORES");

    // Sessions.
    for (token, user, name) in [
        ("s:9f1c", 7, "alice"),
        ("s:77aa", 8, "bob"),
        ("s:0b3e", 9, "carol"),
    ] {
        let key = format!("session:{token}");
        c!(
            r,
            "HSET {key} user_id {user} name {name} cart_items 0 theme dark"
        );
        c!(r, "EXPIRE {key} 1800");
    }
    cp!(r, "HGETALL session:s:9f1c");
    c!(r, "HINCRBY session:s:9f1c cart_items 2");
    c!(r, "HINCRBY session:s:9f1c cart_items 1");
    c!(r, "HDEL session:s:9f1c theme nonexistent");
    c!(r, "HEXISTS session:s:9f1c theme");
    c!(r, "HLEN session:s:9f1c");
    c!(r, "HINCRBY session:s:9f1c name 1");
    cp!(r, "HGETALL session:s:9f1c");
    let ttl = int(&r.quiet(&["TTL", "session:s:9f1c"]));
    r.note(format!("session TTL: {}", ttl_range(ttl, 1800)));
    // "Remember me": the session no longer expires.
    c!(r, "PERSIST session:s:9f1c");
    c!(r, "PERSIST session:s:9f1c");
    c!(r, "TTL session:s:9f1c");
    c!(r, "EXPIRE session:s:77aa 3600 GT");
    let ttl = int(&r.quiet(&["TTL", "session:s:77aa"]));
    r.note(format!("sliding session TTL: {}", ttl_range(ttl, 3600)));
    c!(r, "EXPIRE session:s:77aa 10 GT");
    // Logout.
    c!(r, "DEL session:s:0b3e");
    c!(r, "TTL session:s:0b3e");
    cp!(r, "HGETALL session:s:0b3e");
    let name = text(&c!(r, "HGET session:s:9f1c name"));
    assert_eq!(name.as_deref(), Some("alice"));

    // A lock: SET NX PX, released only by its owner.
    c!(r, "SET lock:order:42 worker-a NX PX 5000");
    c!(r, "SET lock:order:42 worker-b NX PX 5000");
    let pttl = int(&r.quiet(&["PTTL", "lock:order:42"]));
    r.note(format!("lock PTTL: {}", ttl_range(pttl, 5000)));
    // worker-b tries to release: compare fails, nothing deleted.
    let owner = text(&c!(r, "GET lock:order:42"));
    if owner.as_deref() == Some("worker-b") {
        c!(r, "DEL lock:order:42");
    }
    let release = "if redis.call('get', KEYS[1]) == ARGV[1] then \
                   return redis.call('del', KEYS[1]) else return 0 end";
    c!(r, ["EVAL", release, 1, "lock:order:42", "worker-b"]);
    c!(r, ["EVAL", release, 1, "lock:order:42", "worker-a"]);
    c!(r, "SET lock:order:42 worker-b NX PX 5000 GET");
    c!(r, "GET lock:order:42");
    assert_eq!(text(&c!(r, "EXISTS lock:order:42")).as_deref(), Some("1"));

    // GETEX refreshes or drops a cache entry's TTL as it reads it.
    c!(r, "SET cache:homepage <html>v1</html>");
    c!(r, "GETEX cache:homepage EX 100");
    let ttl = int(&r.quiet(&["TTL", "cache:homepage"]));
    r.note(format!("homepage TTL: {}", ttl_range(ttl, 100)));
    c!(r, "GETEX cache:homepage PERSIST");
    c!(r, "TTL cache:homepage");
    c!(r, "GETEX cache:missing EX 5");

    // Cache-aside: MGET, load the misses "from the database", MSET / SETEX them.
    let ids = [1, 2, 3, 4, 5, 6];
    let keys: Vec<String> = ids.iter().map(|i| format!("cache:user:{i}")).collect();
    let mut hits = 0;
    let mut misses = 0;
    for round in 0..2 {
        let got = strings(&c!(r, "MGET {}", keys.join(" ")));
        let missing: Vec<usize> = (0..ids.len()).filter(|&i| got[i] == "(nil)").collect();
        hits += ids.len() - missing.len();
        misses += missing.len();
        let mut mset = vec!["MSET".to_string()];
        for &i in &missing {
            let row = format!("{{\"id\":{},\"round\":{round}}}", ids[i]);
            if i % 2 == 0 {
                mset.push(keys[i].clone());
                mset.push(row);
            } else {
                c!(r, "SETEX {} 300 {row}", keys[i]);
            }
        }
        if mset.len() > 1 {
            r.argv(mset);
        }
        c!(r, "INCRBY stats:cache:hits {}", ids.len() - missing.len());
        c!(r, "INCRBY stats:cache:misses {}", missing.len());
    }
    r.note(format!("cache: {hits} hits, {misses} misses"));
    assert_eq!((hits, misses), (6, 6));
    c!(r, "MSETNX cache:user:1 x cache:user:99 y");
    c!(r, "EXISTS cache:user:99");
    let ttl = int(&r.quiet(&["TTL", "cache:user:2"]));
    r.note(format!("cache:user:2 TTL: {}", ttl_range(ttl, 300)));
    c!(r, "TTL cache:user:1");

    // Optimistic transfer with WATCH/MULTI/EXEC; another client writes in between once.
    c!(r, "MSET account:alice 100 account:bob 50");
    let mut other = t.connect();
    for attempt in 0..3 {
        c!(r, "WATCH account:alice account:bob");
        let alice = int(&c!(r, "GET account:alice"));
        let bob = int(&c!(r, "GET account:bob"));
        if attempt == 0 {
            // A deposit lands on a watched key before EXEC.
            let v: i64 = redis::cmd("INCRBY")
                .arg("account:alice")
                .arg(10)
                .query(&mut other)
                .unwrap();
            r.note(format!("other client: INCRBY account:alice 10 => {v}"));
        }
        if alice < 30 {
            c!(r, "UNWATCH");
            break;
        }
        c!(r, "MULTI");
        c!(r, "SET account:alice {}", alice - 30);
        c!(r, "SET account:bob {}", bob + 30);
        c!(r, "INCR stats:transfers");
        let res = c!(r, "EXEC");
        if res != Value::Nil {
            r.note(format!("transfer committed on attempt {}", attempt + 1));
            break;
        }
        r.note(format!("transfer aborted on attempt {}", attempt + 1));
    }
    c!(r, "MGET account:alice account:bob");
    assert_eq!(int(&c!(r, "GET account:alice")), 80);
    // The redis crate's own transaction helper (retries on abort).
    let (a, b): (i64, i64) =
        redis::transaction(&mut *r.con, &["account:alice", "account:bob"], |c, p| {
            let (a, b): (i64, i64) = redis::cmd("MGET")
                .arg("account:alice")
                .arg("account:bob")
                .query(c)?;
            p.set("account:alice", a - 80)
                .ignore()
                .set("account:bob", b + 80)
                .ignore()
                .get("account:alice")
                .get("account:bob")
                .query(c)
        })
        .unwrap();
    r.note(format!("after transaction helper: alice={a} bob={b}"));
    assert_eq!((a, b), (0, 160));
    // A transfer that must be refused: not enough funds.
    c!(r, "WATCH account:alice");
    let alice = int(&c!(r, "GET account:alice"));
    if alice < 30 {
        c!(r, "UNWATCH");
        r.note("transfer refused: insufficient funds");
    }
    // EXEC after a queuing error is aborted as a whole.
    c!(r, "MULTI");
    c!(r, "INCRBY account:bob lots");
    c!(r, "INCRBY account:bob");
    c!(r, "EXEC");
    c!(r, "GET account:bob");
    // A runtime error inside EXEC does not roll back the other commands.
    c!(r, "MULTI");
    c!(r, "INCRBY account:bob 5");
    c!(r, "HSET account:bob owner bob");
    c!(r, "INCR stats:transfers");
    c!(r, "EXEC");
    c!(r, "GET account:bob");
    c!(r, "GET stats:transfers");
    r.done()
}

// ---------------------------------------------------------------------------------
// 7. Social graph, recommendations, unique visitors, daily active users
// ---------------------------------------------------------------------------------

fn social_graph(con: &mut Connection, _t: &Target) -> Vec<String> {
    let mut r = Rec::new(con);
    let friendships = [
        ("alice", "bob"),
        ("alice", "carol"),
        ("alice", "dave"),
        ("bob", "carol"),
        ("bob", "erin"),
        ("bob", "frank"),
        ("carol", "erin"),
        ("carol", "grace"),
        ("dave", "heidi"),
        ("dave", "frank"),
        ("erin", "ivan"),
        ("frank", "ivan"),
        ("grace", "judy"),
        ("heidi", "judy"),
        ("ivan", "judy"),
        ("judy", "mallory"),
    ];
    for (a, b) in friendships {
        let p = pipe!(atomic; "SADD friends:{a} {b}", "SADD friends:{b} {a}");
        r.pipe(&format!("befriend {a} {b}"), &p);
    }
    cs!(r, "SMEMBERS friends:alice");
    c!(r, "SCARD friends:bob");
    c!(r, "SINTERCARD 2 friends:alice friends:bob");
    c!(r, "SINTERCARD 2 friends:bob friends:carol LIMIT 1");
    c!(
        r,
        "SINTERCARD 3 friends:alice friends:bob friends:erin LIMIT 0"
    );
    cs!(r, "SINTER friends:alice friends:bob");
    c!(r, "SMISMEMBER friends:alice bob erin dave zed");

    // Recommendations: friends of friends minus existing friends and self, ranked by
    // the number of mutual friends.
    let friends = sorted(strings(&cs!(r, "SMEMBERS friends:alice")));
    let sets: Vec<String> = friends.iter().map(|f| format!("friends:{f}")).collect();
    c!(r, "SUNIONSTORE tmp:fof:alice {}", sets.join(" "));
    c!(r, "SADD tmp:self:alice alice");
    c!(
        r,
        "SDIFFSTORE rec:alice tmp:fof:alice friends:alice tmp:self:alice"
    );
    let candidates = sorted(strings(&cs!(r, "SMEMBERS rec:alice")));
    let mut ranked = Vec::new();
    for cand in &candidates {
        let mutual = int(&c!(r, "SINTERCARD 2 friends:alice friends:{cand}"));
        ranked.push((-mutual, cand.clone()));
    }
    ranked.sort();
    r.note(format!("recommendations for alice: {ranked:?}"));
    assert_eq!(ranked[0].1, "erin"); // two mutual friends, ties broken by name
    c!(r, "EXPIRE tmp:fof:alice 120");
    c!(r, "DEL tmp:self:alice");

    // Friend requests: pending -> accepted with SMOVE.
    c!(r, "SADD requests:pending:alice erin judy zed");
    c!(
        r,
        "SMOVE requests:pending:alice requests:accepted:alice erin"
    );
    c!(
        r,
        "SMOVE requests:pending:alice requests:accepted:alice erin"
    );
    c!(
        r,
        "SMOVE requests:pending:alice requests:accepted:alice judy"
    );
    cs!(r, "SMEMBERS requests:pending:alice");
    cs!(r, "SMEMBERS requests:accepted:alice");
    c!(r, "SADD friends:alice erin judy");
    c!(r, "SADD friends:erin alice");
    c!(r, "SADD friends:judy alice");

    // "People you may know" draws from a copy: SPOP with a count.
    c!(r, "SUNIONSTORE tmp:draw:alice friends:alice");
    let pool = sorted(strings(&cs!(r, "SMEMBERS tmp:draw:alice")));
    let drawn = strings(&r.quiet(&["SPOP", "tmp:draw:alice", "3"]));
    r.note(format!(
        "SPOP tmp:draw:alice 3: {} members, all from friends:alice: {}, distinct: {}",
        drawn.len(),
        drawn.iter().all(|m| pool.contains(m)),
        drawn.iter().collect::<BTreeSet<_>>().len() == drawn.len()
    ));
    assert_eq!(drawn.len(), 3);
    c!(r, "SCARD tmp:draw:alice");
    cs!(r, "SRANDMEMBER friends:alice 100");
    let one = text(&r.quiet(&["SRANDMEMBER", "friends:alice"])).unwrap();
    r.note(format!("SRANDMEMBER is a friend: {}", pool.contains(&one)));
    c!(r, "SPOP tmp:nothing");
    c!(r, "SCARD friends:alice");

    // Unique visitors per day with HyperLogLog.
    for day in 1..=7 {
        let key = format!("visitors:2024-03-0{day}");
        let mut args = vec!["PFADD".to_string(), key.clone()];
        for v in 0..(40 + day * 25) {
            args.push(format!("user-{}", (v * 7 + day * 13) % 300));
        }
        r.argv(args);
        c!(r, "PFCOUNT {key}");
    }
    c!(r, "PFADD visitors:2024-03-01 user-13");
    c!(r, "PFCOUNT visitors:2024-03-01 visitors:2024-03-02");
    let days: Vec<String> = (1..=7).map(|d| format!("visitors:2024-03-0{d}")).collect();
    c!(r, "PFMERGE visitors:week-10 {}", days.join(" "));
    let week = int(&c!(r, "PFCOUNT visitors:week-10"));
    assert!((270..=330).contains(&week), "{week}");
    // The site-wide counter grows past the sparse encoding, 100 visitors at a time.
    let mut p = redis::pipe();
    for batch in 0..50 {
        p.cmd("PFADD").arg("visitors:site");
        p.arg(
            (batch * 100..batch * 100 + 100)
                .map(|v| format!("visitor-{v}"))
                .collect::<Vec<_>>(),
        );
    }
    r.pipe("PFADD visitors:site x 50 batches of 100", &p);
    let site = int(&c!(r, "PFCOUNT visitors:site"));
    assert!((4800..=5200).contains(&site), "{site}");
    c!(r, "STRLEN visitors:site");
    c!(r, "PFCOUNT visitors:site visitors:week-10");
    c!(r, "GET visitors:2024-03-01");

    // Daily active users with bitmaps (bit = user id).
    for day in 1..=3 {
        let key = format!("dau:2024-03-0{day}");
        let mut p = redis::pipe();
        for uid in (0..400).filter(|u| (u * day) % 5 == 1 || u % 97 == 0) {
            p.cmd("SETBIT").arg(&key).arg(uid).arg(1);
        }
        r.pipe(&format!("day {day} logins"), &p);
        c!(r, "BITCOUNT {key}");
    }
    c!(r, "BITCOUNT dau:2024-03-01 0 9");
    c!(r, "BITCOUNT dau:2024-03-01 5 30 BIT");
    c!(r, "GETBIT dau:2024-03-02 194");
    c!(r, "GETBIT dau:2024-03-02 195");
    c!(r, "GETBIT dau:2024-03-02 100000");
    c!(
        r,
        "BITOP AND dau:all-three dau:2024-03-01 dau:2024-03-02 dau:2024-03-03"
    );
    let loyal = int(&c!(r, "BITCOUNT dau:all-three"));
    assert!(loyal > 0);
    c!(
        r,
        "BITOP OR dau:any dau:2024-03-01 dau:2024-03-02 dau:2024-03-03"
    );
    c!(r, "BITCOUNT dau:any");
    c!(r, "BITOP XOR dau:xor dau:2024-03-01 dau:2024-03-02");
    c!(r, "BITCOUNT dau:xor");
    c!(r, "BITOP NOT dau:inactive-1 dau:2024-03-01");
    c!(r, "BITCOUNT dau:inactive-1");
    c!(r, "BITPOS dau:all-three 1");
    c!(r, "BITPOS dau:2024-03-01 0");
    c!(r, "STRLEN dau:any");
    c!(r, "GET dau:all-three");
    r.done()
}
