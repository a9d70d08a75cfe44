//! What two servers hold, compared key by key: type, value, TTL presence and absolute
//! expiry time, streams with their groups, consumers and pending entries, and the
//! function libraries. One comparison for every test that needs one (a replica against
//! its master in propagation.rs, a server against another loading the same RDB file in
//! rdb_interop.rs).
//!
//! Keys and values are handled as bytes throughout, so binary key names and values are
//! compared exactly; valid UTF-8 is shown as a Rust string literal, anything else as an
//! escaped byte string.
//!
//! Included by test files with `#[path = "common/dataset.rs"] mod dataset;`.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use redis::Value;

/// What to compare and how to name the two sides in the report.
pub struct Options<'a> {
    /// The two sides, as the mismatch lines name them ("tessera", "replica", ...).
    pub names: [&'a str; 2],
    /// The databases to walk (SELECTed in turn on both connections, which are left in
    /// the first one of the list).
    pub dbs: &'a [u32],
    /// Streams: also each group's entries-read and lag (XINFO GROUPS), and each pending
    /// entry's delivery time and each consumer's seen-time (XINFO STREAM FULL). A file
    /// keeps them; replication does not (redis-server's own replicas disagree on them).
    pub stream_persisted_state: bool,
    /// Appended to every key mismatch (a seed to replay, say).
    pub note: String,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            names: ["a", "b"],
            dbs: &[0],
            stream_persisted_state: false,
            note: String::new(),
        }
    }
}

/// The mismatches between what `a` and `b` hold in databases `dbs`, one text per key
/// (naming the database, the key and what differs), plus one if FUNCTION LIST differs.
pub fn compare(a: &mut redis::Connection, b: &mut redis::Connection, dbs: &[u32]) -> Vec<String> {
    let opts = Options {
        dbs,
        ..Options::default()
    };
    compare_with(a, b, &opts).1
}

/// As `compare`, with options; also returns how many keys were looked at.
pub fn compare_with(
    a: &mut redis::Connection,
    b: &mut redis::Connection,
    opts: &Options,
) -> (usize, Vec<String>) {
    let [an, bn] = opts.names;
    let mut problems = Vec::new();
    let mut seen = 0;
    for &db in opts.dbs {
        if opts.dbs != [0] {
            select(a, db);
            select(b, db);
        }
        let ak = scan_all(a);
        let bk = scan_all(b);
        let all: BTreeSet<&Vec<u8>> = ak.iter().chain(bk.iter()).collect();
        seen += all.len();
        for key in &all {
            let x = snap(a, key, opts);
            let y = snap(b, key, opts);
            if x.kind == "none" && y.kind == "none" {
                continue;
            }
            if (x.kind == "none" && near_expiry(&y)) || (y.kind == "none" && near_expiry(&x)) {
                continue;
            }
            let mut diffs = Vec::new();
            if x.kind != y.kind {
                diffs.push("type");
            } else if x.value != y.value {
                diffs.push("value");
            }
            if (x.pttl < 0) != (y.pttl < 0) && !near_expiry(&x) && !near_expiry(&y) {
                diffs.push("TTL presence");
            }
            // Replicas get absolute expiry times (PXAT / PEXPIREAT), files hold them:
            // the same instant on both sides.
            if x.kind == y.kind && x.pttl >= 0 && y.pttl >= 0 && x.expire_at != y.expire_at {
                diffs.push("expiry time");
            }
            if diffs.is_empty() {
                continue;
            }
            let mut text = format!(
                "db {db} key {} differs in {diffs:?} (in {an} SCAN: {}, in {bn} SCAN: {})\n  \
                 {an}: {} ttl={} at={:?}\n  \
                 {bn}: {} ttl={} at={:?}",
                show(key),
                ak.contains(*key),
                bk.contains(*key),
                x.kind,
                x.pttl,
                x.expire_at,
                y.kind,
                y.pttl,
                y.expire_at,
            );
            text += &describe_values(an, &x.value, bn, &y.value);
            if !opts.note.is_empty() {
                text += &format!("\n  {}", opts.note);
            }
            problems.push(text);
        }
    }
    if opts.dbs.len() > 1 {
        select(a, opts.dbs[0]);
        select(b, opts.dbs[0]);
    }
    let (al, bl) = (libraries(a), libraries(b));
    if al != bl {
        problems.push(format!(
            "FUNCTION LIST differs:\n  {an}: {al:?}\n  {bn}: {bl:?}"
        ));
    }
    (seen, problems)
}

/// Both values in full when short; otherwise their lengths and where they first part,
/// with some context on both sides (a 1000-item list in full helps nobody).
fn describe_values(an: &str, x: &str, bn: &str, y: &str) -> String {
    const FULL: usize = 600;
    const CONTEXT: usize = 120;
    if x.len() <= FULL && y.len() <= FULL {
        return format!("\n    {an}: {x}\n    {bn}: {y}");
    }
    let first = x
        .bytes()
        .zip(y.bytes())
        .position(|(p, q)| p != q)
        .unwrap_or(x.len().min(y.len()));
    let around = |s: &str| {
        let mut lo = first.saturating_sub(CONTEXT);
        while !s.is_char_boundary(lo.min(s.len())) {
            lo -= 1;
        }
        let mut hi = (first + CONTEXT).min(s.len());
        while !s.is_char_boundary(hi) {
            hi += 1;
        }
        let lo = lo.min(hi);
        format!(
            "{}{}{}",
            if lo > 0 { "..." } else { "" },
            &s[lo..hi],
            if hi < s.len() { "..." } else { "" }
        )
    };
    format!(
        "\n    (canonical forms of {} and {} bytes, first different at byte {first})\
         \n    {an}: {}\n    {bn}: {}",
        x.len(),
        y.len(),
        around(x),
        around(y)
    )
}

fn select(c: &mut redis::Connection, db: u32) {
    must(c, &["SELECT", &db.to_string()]);
}

fn must(c: &mut redis::Connection, args: &[&str]) -> Value {
    must_bytes(c, args[0], &args[1..], &[])
}

/// `name key after...`, the key as bytes.
fn must_key(c: &mut redis::Connection, name: &str, key: &[u8], after: &[&str]) -> Value {
    let mut cmd = redis::cmd(name);
    cmd.arg(key);
    for a in after {
        cmd.arg(*a);
    }
    cmd.query::<Value>(c)
        .unwrap_or_else(|e| panic!("{name} {} {after:?}: {e}", show(key)))
}

fn must_bytes(c: &mut redis::Connection, name: &str, args: &[&str], tail: &[&[u8]]) -> Value {
    let mut cmd = redis::cmd(name);
    for a in args {
        cmd.arg(*a);
    }
    for t in tail {
        cmd.arg(*t);
    }
    cmd.query::<Value>(c)
        .unwrap_or_else(|e| panic!("{name} {args:?}: {e}"))
}

/// Bytes as a Rust string literal when they are UTF-8, else as an escaped byte string.
pub fn show(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => format!("{s:?}"),
        Err(_) => format!("b\"{}\"", b.escape_ascii()),
    }
}

/// A reply as one canonical line, whatever the RESP flavour.
pub fn canon(v: &Value) -> String {
    match v {
        Value::Nil => "nil".into(),
        Value::Int(i) => i.to_string(),
        Value::BulkString(b) => show(b),
        Value::SimpleString(s) => format!("{s:?}"),
        Value::Okay => "\"OK\"".into(),
        Value::Double(d) => format!("{d:?}"),
        Value::Boolean(b) => b.to_string(),
        Value::Array(xs) | Value::Set(xs) => {
            format!("[{}]", xs.iter().map(canon).collect::<Vec<_>>().join(", "))
        }
        Value::Map(kv) => format!(
            "{{{}}}",
            kv.iter()
                .map(|(k, v)| format!("{}: {}", canon(k), canon(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => format!("{other:?}"),
    }
}

/// A reply as text (lossy for binary bulk strings: for names and numbers).
pub fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Okay => "OK".into(),
        Value::Int(i) => i.to_string(),
        other => canon(other),
    }
}

fn bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        other => text(other).into_bytes(),
    }
}

pub fn items(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(xs) | Value::Set(xs) => xs.clone(),
        Value::Map(kv) => kv
            .iter()
            .flat_map(|(k, v)| [k.clone(), v.clone()])
            .collect(),
        _ => Vec::new(),
    }
}

/// A flat `[field, value, ...]` reply (or a map), as (field, value) pairs.
pub fn pairs(v: &Value) -> Vec<(String, Value)> {
    items(v)
        .chunks(2)
        .filter(|p| p.len() == 2)
        .map(|p| (text(&p[0]), p[1].clone()))
        .collect()
}

/// The canonical form of field `name` of a `[field, value, ...]` reply.
pub fn field(v: &Value, name: &str) -> String {
    lookup(v, name)
        .map(|v| canon(&v))
        .unwrap_or_else(|| "<absent>".into())
}

fn lookup(v: &Value, name: &str) -> Option<Value> {
    pairs(v)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// What one side holds under one key, each part in a comparable form.
#[derive(Debug, PartialEq)]
pub struct Snap {
    pub kind: String,
    pub value: String,
    pub pttl: i64,
    pub expire_at: Option<i64>,
}

pub fn snap(c: &mut redis::Connection, key: &[u8], opts: &Options) -> Snap {
    let kind = text(&must_key(c, "TYPE", key, &[]));
    let pttl = match must_key(c, "PTTL", key, &[]) {
        Value::Int(i) => i,
        v => panic!("PTTL {}: {v:?}", show(key)),
    };
    let expire_at = match redis::cmd("PEXPIRETIME").arg(key).query::<Value>(c) {
        Ok(Value::Int(i)) => Some(i),
        _ => None,
    };
    let value = match kind.as_str() {
        "string" => canon(&must_key(c, "GET", key, &[])),
        "list" => canon(&must_key(c, "LRANGE", key, &["0", "-1"])),
        "hash" => {
            let mut kv: Vec<String> = items(&must_key(c, "HGETALL", key, &[]))
                .chunks(2)
                .filter(|p| p.len() == 2)
                .map(|p| format!("{}={}", canon(&p[0]), canon(&p[1])))
                .collect();
            kv.sort();
            kv.join(", ")
        }
        "set" => {
            let mut ms: Vec<String> = items(&must_key(c, "SMEMBERS", key, &[]))
                .iter()
                .map(canon)
                .collect();
            ms.sort();
            ms.join(", ")
        }
        "zset" => {
            // Scores as numbers: how each server prints a double is not the data.
            items(&must_key(c, "ZRANGE", key, &["0", "-1", "WITHSCORES"]))
                .chunks(2)
                .map(|p| {
                    let s: f64 = text(&p[1]).parse().unwrap_or(f64::NAN);
                    format!("{}={s:?}", canon(&p[0]))
                })
                .collect::<Vec<_>>()
                .join(", ")
        }
        "stream" => stream_snap(c, key, opts),
        "none" => String::new(),
        other => format!("<type {other}>"),
    };
    Snap {
        kind,
        value,
        pttl,
        expire_at,
    }
}

fn stream_snap(c: &mut redis::Connection, key: &[u8], opts: &Options) -> String {
    let mut out = Vec::new();
    out.push(format!(
        "entries {}",
        canon(&must_key(c, "XRANGE", key, &["-", "+"]))
    ));
    let info = must_bytes(c, "XINFO", &["STREAM"], &[key]);
    for f in [
        "length",
        "last-generated-id",
        "max-deleted-entry-id",
        "entries-added",
        "recorded-first-entry-id",
        "groups",
    ] {
        out.push(format!("{f} {}", field(&info, f)));
    }
    let groups = items(&must_bytes(c, "XINFO", &["GROUPS"], &[key]));
    for g in &groups {
        let name = lookup(g, "name").map(|v| bytes(&v)).unwrap_or_default();
        let mut line = format!("group {}:", String::from_utf8_lossy(&name));
        // entries-read and lag only when asked: redis-server's own replicas of a
        // redis-server master disagree on them (XREADGROUP propagates as XCLAIM + XGROUP
        // SETID without the read counter), so they are no property of replication.
        let mut fields = vec!["consumers", "pending", "last-delivered-id"];
        if opts.stream_persisted_state {
            fields.extend(["entries-read", "lag"]);
        }
        for f in fields {
            line += &format!(" {f}={}", field(g, f));
        }
        out.push(line);
        let mut consumers: Vec<String> = items(&must_bytes(
            c,
            "XINFO",
            &["CONSUMERS"],
            &[key, name.as_slice()],
        ))
        .iter()
        .map(|cv| format!("{}/{}", field(cv, "name"), field(cv, "pending")))
        .collect();
        consumers.sort();
        out.push(format!("  consumers {}", consumers.join(" ")));
        // Pending entries: id, owner, delivery count (idle times differ by nature).
        let mut cmd = redis::cmd("XPENDING");
        cmd.arg(key)
            .arg(name.as_slice())
            .arg("-")
            .arg("+")
            .arg("100000");
        let pending = items(
            &cmd.query::<Value>(c)
                .unwrap_or_else(|e| panic!("XPENDING {} {}: {e}", show(key), show(&name))),
        );
        let pel: Vec<String> = pending
            .iter()
            .map(|p| {
                let p = items(p);
                format!(
                    "{}@{}x{}",
                    text(&p[0]),
                    text(&p[1]),
                    p.get(3).map(text).unwrap_or_default()
                )
            })
            .collect();
        out.push(format!("  pending {}", pel.join(" ")));
    }
    if opts.stream_persisted_state {
        out.extend(stream_times(c, key));
    }
    out.join("\n    ")
}

/// From XINFO STREAM FULL: each pending entry's delivery time and each consumer's
/// seen-time, absolute instants a file keeps.
fn stream_times(c: &mut redis::Connection, key: &[u8]) -> Vec<String> {
    let full = must_bytes(c, "XINFO", &["STREAM"], &[key, b"FULL", b"COUNT", b"0"]);
    let mut out = Vec::new();
    for g in items(&lookup(&full, "groups").unwrap_or(Value::Nil)) {
        let name = field(&g, "name");
        let pel: Vec<String> = items(&lookup(&g, "pending").unwrap_or(Value::Nil))
            .iter()
            .map(|p| {
                let p = items(p);
                format!(
                    "{}@{}",
                    p.first().map(text).unwrap_or_default(),
                    p.get(2).map(text).unwrap_or_default()
                )
            })
            .collect();
        out.push(format!("group {name} delivery times {}", pel.join(" ")));
        let mut consumers: Vec<String> = items(&lookup(&g, "consumers").unwrap_or(Value::Nil))
            .iter()
            .map(|cv| {
                let pel: Vec<String> = items(&lookup(cv, "pending").unwrap_or(Value::Nil))
                    .iter()
                    .map(|p| {
                        let p = items(p);
                        format!(
                            "{}@{}x{}",
                            p.first().map(text).unwrap_or_default(),
                            p.get(1).map(text).unwrap_or_default(),
                            p.get(2).map(text).unwrap_or_default()
                        )
                    })
                    .collect();
                format!(
                    "{} seen-time={} pel-count={} pending [{}]",
                    field(cv, "name"),
                    field(cv, "seen-time"),
                    field(cv, "pel-count"),
                    pel.join(" ")
                )
            })
            .collect();
        consumers.sort();
        for line in consumers {
            out.push(format!("  consumer {line}"));
        }
    }
    out
}

/// Every key of the selected database, as bytes.
pub fn scan_all(c: &mut redis::Connection) -> BTreeSet<Vec<u8>> {
    let mut keys = BTreeSet::new();
    let mut cursor = "0".to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let reply = items(&must(c, &["SCAN", &cursor, "COUNT", "1000"]));
        assert_eq!(reply.len(), 2, "SCAN reply {reply:?}");
        cursor = text(&reply[0]);
        keys.extend(items(&reply[1]).iter().map(bytes));
        if cursor == "0" {
            return keys;
        }
        assert!(Instant::now() < deadline, "SCAN does not end");
    }
}

/// Library names and code, as FUNCTION LIST WITHCODE reports them.
pub fn libraries(c: &mut redis::Connection) -> Vec<String> {
    let mut libs: Vec<String> = items(&must(c, &["FUNCTION", "LIST", "WITHCODE"]))
        .iter()
        .map(|l| format!("{} {}", field(l, "library_name"), field(l, "library_code")))
        .collect();
    libs.sort();
    libs
}

/// Time left on a key this close to its expiry may legitimately be seen on one side
/// and not the other.
pub const NEAR_EXPIRY_MS: i64 = 2_000;

fn near_expiry(s: &Snap) -> bool {
    (0..NEAR_EXPIRY_MS).contains(&s.pttl)
}
