//! The dirty counter (INFO persistence `rdb_changes_since_last_save`), black-box: the
//! same commands run on `tessera --threads 2` and on a standalone redis-server, and
//! after each one the counter must have moved by the same amount on both. Keys are
//! hash-tagged onto both shards; multi-key commands cross them.

mod common;

use common::*;
use redis::Value;

fn dirty(c: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("persistence")
        .query(c)
        .expect("INFO persistence");
    info.lines()
        .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no rdb_changes_since_last_save in {info}"))
}

/// A command's reply, or its error, as text.
fn reply(c: &mut redis::Connection, args: &[String]) -> String {
    let mut cmd = redis::cmd(&args[0]);
    for a in &args[1..] {
        cmd.arg(a.as_str());
    }
    match cmd.query::<Value>(c) {
        Ok(v) => format!("{v:?}"),
        Err(e) if e.is_io_error() => panic!("{args:?}: {e}"),
        Err(e) => format!("error: {e}"),
    }
}

/// Key `name` on shard 0 (`{bar}name`) or shard 1 (`{foo}name`).
fn k0(name: &str) -> String {
    format!("{{{KEY_SHARD0}}}{name}")
}

fn k1(name: &str) -> String {
    format!("{{{KEY_SHARD1}}}{name}")
}

const LIBRARY: &str = "#!lua name=dirtylib
redis.register_function('two_writes', function(keys, args)
  redis.call('SET', keys[1], args[1])
  redis.call('SET', keys[2], args[1])
  return 2
end)";

/// The sequence: each entry is one command, run on both servers in this order.
fn sequence() -> Vec<Vec<String>> {
    let (s, h, l, z, x) = (k0("s"), k1("h"), k0("l"), k1("z"), k0("x"));
    let (k, n, f, e) = (k0("k"), k1("n"), k0("f"), k1("e"));
    let raw: Vec<Vec<String>> = vec![
        // strings
        vec!["SET".into(), k.clone(), "v".into()],
        vec!["SET".into(), k.clone(), "v2".into(), "NX".into()],
        vec!["SET".into(), k.clone(), "v3".into(), "XX".into()],
        vec!["SET".into(), k1("absent"), "v".into(), "XX".into()],
        vec!["SET".into(), k.clone(), "v4".into(), "GET".into()],
        vec!["SETNX".into(), k.clone(), "x".into()],
        vec!["SETEX".into(), k1("sx"), "100".into(), "v".into()],
        vec!["PSETEX".into(), k0("psx"), "100000".into(), "v".into()],
        vec!["INCR".into(), n.clone()],
        vec!["INCRBY".into(), n.clone(), "5".into()],
        vec!["DECR".into(), n.clone()],
        vec!["INCR".into(), k.clone()],
        vec!["INCRBYFLOAT".into(), f.clone(), "1.5".into()],
        vec!["APPEND".into(), k.clone(), "xyz".into()],
        vec!["APPEND".into(), k.clone(), "".into()],
        vec!["SETRANGE".into(), k.clone(), "10".into(), "abc".into()],
        vec!["SETRANGE".into(), k1("sr"), "0".into(), "".into()],
        vec!["GETDEL".into(), k.clone()],
        vec!["GETDEL".into(), k.clone()],
        vec!["MSET".into(), k0("m"), "1".into(), k1("m"), "2".into()],
        vec!["MSETNX".into(), k0("mn"), "1".into(), k1("mn"), "2".into()],
        vec!["MSETNX".into(), k0("mn"), "1".into(), k1("mo"), "2".into()],
        vec!["GETEX".into(), k1("m"), "EX".into(), "100".into()],
        vec!["GETEX".into(), k1("m"), "PERSIST".into()],
        vec!["GETEX".into(), k1("m")],
        vec!["SETBIT".into(), k0("b"), "7".into(), "1".into()],
        vec!["SETBIT".into(), k0("b"), "7".into(), "1".into()],
        // keys
        vec!["DEL".into(), k0("m"), k0("missing")],
        vec!["DEL".into(), k0("psx"), k1("sx"), n.clone()],
        vec!["SET".into(), e.clone(), "v".into()],
        vec!["EXPIRE".into(), e.clone(), "100".into()],
        vec!["EXPIRE".into(), e.clone(), "200".into(), "NX".into()],
        vec!["EXPIRE".into(), e.clone(), "300".into(), "GT".into()],
        vec!["PEXPIRE".into(), k1("missing"), "100".into()],
        vec!["TTL".into(), e.clone()],
        vec!["PERSIST".into(), e.clone()],
        vec!["PERSIST".into(), e.clone()],
        vec!["RENAME".into(), e.clone(), k1("e2")],
        vec!["RENAME".into(), k1("e2"), k0("e3")],
        vec!["RENAMENX".into(), k0("e3"), k0("b")],
        vec!["COPY".into(), k0("e3"), k1("e4")],
        vec!["COPY".into(), k0("e3"), k1("e4")],
        vec!["EXPIREAT".into(), k1("e4"), "1".into()],
        vec!["UNLINK".into(), k0("e3"), k0("b")],
        // sets
        vec!["SADD".into(), s.clone(), "a".into(), "b".into(), "c".into()],
        vec!["SADD".into(), s.clone(), "a".into(), "d".into()],
        vec!["SADD".into(), s.clone(), "a".into()],
        vec![
            "SREM".into(),
            s.clone(),
            "a".into(),
            "b".into(),
            "zz".into(),
        ],
        vec!["SREM".into(), s.clone(), "zz".into()],
        vec![
            "SADD".into(),
            k0("s2"),
            "a".into(),
            "b".into(),
            "c".into(),
            "d".into(),
            "e".into(),
        ],
        vec!["SPOP".into(), k0("s2"), "2".into()],
        vec!["SPOP".into(), k0("s2")],
        vec!["SPOP".into(), k0("s2"), "10".into()],
        vec!["SMOVE".into(), s.clone(), k0("s3"), "c".into()],
        vec!["SMOVE".into(), s.clone(), k0("s3"), "nope".into()],
        vec!["SADD".into(), k1("s4"), "c".into(), "x".into()],
        vec!["SINTERSTORE".into(), k0("si"), k0("s3"), k1("s4")],
        vec!["SUNIONSTORE".into(), k1("su"), k0("s3"), k1("s4")],
        // hashes
        vec![
            "HSET".into(),
            h.clone(),
            "f1".into(),
            "v1".into(),
            "f2".into(),
            "v2".into(),
            "f3".into(),
            "v3".into(),
        ],
        vec!["HSET".into(), h.clone(), "f1".into(), "v1".into()],
        vec!["HSETNX".into(), h.clone(), "f1".into(), "x".into()],
        vec!["HSETNX".into(), h.clone(), "f4".into(), "x".into()],
        vec!["HDEL".into(), h.clone(), "absent".into()],
        vec![
            "HDEL".into(),
            h.clone(),
            "f1".into(),
            "f2".into(),
            "absent".into(),
        ],
        vec!["HINCRBY".into(), h.clone(), "n".into(), "3".into()],
        vec!["HINCRBYFLOAT".into(), h.clone(), "fl".into(), "0.5".into()],
        // lists
        vec![
            "LPUSH".into(),
            l.clone(),
            "a".into(),
            "b".into(),
            "c".into(),
        ],
        vec!["RPUSH".into(), l.clone(), "d".into(), "e".into()],
        vec!["LPUSHX".into(), k0("nolist"), "a".into()],
        vec!["LPOP".into(), l.clone(), "2".into()],
        vec!["LSET".into(), l.clone(), "0".into(), "A".into()],
        vec![
            "LINSERT".into(),
            l.clone(),
            "BEFORE".into(),
            "A".into(),
            "Z".into(),
        ],
        vec![
            "LINSERT".into(),
            l.clone(),
            "BEFORE".into(),
            "nope".into(),
            "Z".into(),
        ],
        vec!["LREM".into(), l.clone(), "0".into(), "Z".into()],
        vec![
            "LMOVE".into(),
            l.clone(),
            k1("l2"),
            "LEFT".into(),
            "RIGHT".into(),
        ],
        vec!["RPOPLPUSH".into(), l.clone(), k0("l3")],
        vec!["LTRIM".into(), l.clone(), "0".into(), "0".into()],
        vec!["RPOP".into(), l.clone(), "5".into()],
        vec!["RPOP".into(), l.clone()],
        vec!["LPUSH".into(), k1("m"), "x".into()],
        // sorted sets
        vec![
            "ZADD".into(),
            z.clone(),
            "1".into(),
            "a".into(),
            "2".into(),
            "b".into(),
            "3".into(),
            "c".into(),
        ],
        vec!["ZADD".into(), z.clone(), "5".into(), "a".into()],
        vec!["ZADD".into(), z.clone(), "5".into(), "a".into()],
        vec![
            "ZADD".into(),
            z.clone(),
            "CH".into(),
            "6".into(),
            "a".into(),
            "7".into(),
            "d".into(),
        ],
        vec![
            "ZADD".into(),
            z.clone(),
            "NX".into(),
            "9".into(),
            "a".into(),
        ],
        vec![
            "ZADD".into(),
            z.clone(),
            "INCR".into(),
            "1".into(),
            "b".into(),
        ],
        vec!["ZINCRBY".into(), z.clone(), "1".into(), "b".into()],
        vec!["ZREM".into(), z.clone(), "a".into(), "missing".into()],
        vec![
            "ZREMRANGEBYSCORE".into(),
            z.clone(),
            "100".into(),
            "200".into(),
        ],
        vec!["ZPOPMIN".into(), z.clone(), "2".into()],
        vec!["ZADD".into(), k0("z2"), "1".into(), "x".into()],
        vec![
            "ZUNIONSTORE".into(),
            k0("zu"),
            "2".into(),
            z.clone(),
            k0("z2"),
        ],
        // streams
        vec![
            "XADD".into(),
            x.clone(),
            "1-1".into(),
            "f".into(),
            "v".into(),
        ],
        vec![
            "XADD".into(),
            x.clone(),
            "1-2".into(),
            "f".into(),
            "v2".into(),
            "g".into(),
            "w".into(),
        ],
        vec![
            "XADD".into(),
            x.clone(),
            "1-3".into(),
            "f".into(),
            "v3".into(),
        ],
        vec![
            "XGROUP".into(),
            "CREATE".into(),
            x.clone(),
            "g".into(),
            "0".into(),
        ],
        vec![
            "XREADGROUP".into(),
            "GROUP".into(),
            "g".into(),
            "c1".into(),
            "COUNT".into(),
            "10".into(),
            "STREAMS".into(),
            x.clone(),
            ">".into(),
        ],
        vec![
            "XACK".into(),
            x.clone(),
            "g".into(),
            "1-1".into(),
            "9-9".into(),
        ],
        vec!["XDEL".into(), x.clone(), "1-2".into(), "7-7".into()],
        vec!["XTRIM".into(), x.clone(), "MAXLEN".into(), "1".into()],
        vec!["XTRIM".into(), x.clone(), "MAXLEN".into(), "1".into()],
        // HyperLogLog
        vec![
            "PFADD".into(),
            k1("hll"),
            "a".into(),
            "b".into(),
            "c".into(),
        ],
        vec!["PFADD".into(), k1("hll"), "a".into()],
        // scripts and functions: two writes, on both shards
        vec![
            "EVAL".into(),
            "redis.call('SET', KEYS[1], 'x') redis.call('INCR', KEYS[2]) return 1".into(),
            "2".into(),
            k0("ev"),
            k1("ev"),
        ],
        vec![
            "EVAL".into(),
            "return redis.call('GET', KEYS[1])".into(),
            "1".into(),
            k0("ev"),
        ],
        vec!["FUNCTION".into(), "LOAD".into(), LIBRARY.into()],
        vec![
            "FCALL".into(),
            "two_writes".into(),
            "2".into(),
            k0("fc"),
            k1("fc"),
            "v".into(),
        ],
        // a transaction with two writes, on both shards
        vec!["MULTI".into()],
        vec!["SET".into(), k0("tx"), "1".into()],
        vec!["INCR".into(), k1("tx")],
        vec!["EXEC".into()],
        // a transaction that writes nothing
        vec!["MULTI".into()],
        vec!["GET".into(), k0("tx")],
        vec!["EXEC".into()],
        // everything
        vec!["FLUSHALL".into()],
        vec!["FLUSHALL".into()],
    ];
    raw
}

#[test]
fn dirty_counter_moves_like_redis() {
    let Some(reference) = ReferenceRedis::start() else {
        eprintln!("redis-server not installed: skipped");
        return;
    };
    // As the reference runs: no save points (with them FLUSHALL saves, which resets the
    // counter, in both servers alike).
    let server = Server::start_with(2, &["--save", ""]);
    let mut t = server.client();
    let mut r = reference.client();
    // The counter is read on other connections: inside MULTI, INFO would be queued.
    let mut ti = server.client();
    let mut ri = reference.client();
    let mut mismatches = Vec::new();
    let seq = sequence();
    for args in &seq {
        let (t0, r0) = (dirty(&mut ti), dirty(&mut ri));
        let tr = reply(&mut t, args);
        let rr = reply(&mut r, args);
        let (dt, dr) = (dirty(&mut ti) - t0, dirty(&mut ri) - r0);
        if dt != dr {
            let shown: Vec<String> = args
                .iter()
                .map(|a| {
                    if a.len() > 40 {
                        format!("{}...", &a[..40])
                    } else {
                        a.clone()
                    }
                })
                .collect();
            mismatches.push(format!(
                "{shown:?}: tessera dirty +{dt} (reply {tr}), redis-server dirty +{dr} (reply {rr})"
            ));
        }
    }
    assert!(seq.len() >= 50);
    assert!(
        mismatches.is_empty(),
        "{} of {} commands moved rdb_changes_since_last_save differently:\n{}",
        mismatches.len(),
        seq.len(),
        mismatches.join("\n")
    );
}
