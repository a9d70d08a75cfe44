//! Black-box tests of the list commands against a 2-shard server: keys on both
//! shards, the cross-shard LMOVE / RPOPLPUSH / LMPOP, exact RESP2/RESP3 replies.

mod common;
use common::*;

use redis::{Connection, RedisError, Value};

/// `CODE detail` of a server error, e.g. "WRONGTYPE Operation against ...".
fn err_text(e: RedisError) -> String {
    format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or(""))
}

fn q(c: &mut Connection, args: &[&str]) -> Value {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(c).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn q_err(c: &mut Connection, args: &[&str]) -> String {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    match cmd.query::<Value>(c) {
        Ok(v) => panic!("{args:?}: expected an error, got {v:?}"),
        Err(e) => err_text(e),
    }
}

fn range(c: &mut Connection, key: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(c)
        .unwrap()
}

fn int(v: Value) -> i64 {
    match v {
        Value::Int(n) => n,
        other => panic!("not an integer: {other:?}"),
    }
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

/// RESP for one command.
fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{}\r\n", a.len(), a).as_bytes());
    }
    out
}

/// Sends the commands on one raw connection and returns exactly `expect.len()` bytes.
fn raw(s: &Server, cmds: &[&[&str]], expect: &str) -> String {
    let mut bytes = Vec::new();
    for c in cmds {
        bytes.extend(resp(c));
    }
    String::from_utf8_lossy(&s.roundtrip(&bytes, expect.len())).into_owned()
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[test]
fn push_pop_index_and_range_on_both_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    for key in [KEY_SHARD0, KEY_SHARD1] {
        assert_eq!(int(q(&mut c, &["RPUSH", key, "a", "b", "c"])), 3);
        assert_eq!(int(q(&mut c, &["LPUSH", key, "x", "y"])), 5);
        assert_eq!(range(&mut c, key), ["y", "x", "a", "b", "c"]);
        assert_eq!(int(q(&mut c, &["LLEN", key])), 5);
        assert_eq!(q(&mut c, &["LINDEX", key, "-1"]), bulk("c"));
        assert_eq!(q(&mut c, &["LINDEX", key, "5"]), Value::Nil);
        assert_eq!(q(&mut c, &["LPOP", key]), bulk("y"));
        assert_eq!(q(&mut c, &["RPOP", key]), bulk("c"));
        assert_eq!(
            q(&mut c, &["RPOP", key, "2"]),
            Value::Array(vec![bulk("b"), bulk("a")])
        );
        assert_eq!(
            q(&mut c, &["LPOP", key, "10"]),
            Value::Array(vec![bulk("x")])
        );
        // The last element gone, the key is gone.
        assert_eq!(int(q(&mut c, &["EXISTS", key])), 0);
        assert_eq!(int(q(&mut c, &["LPUSHX", key, "a"])), 0);
        assert_eq!(int(q(&mut c, &["RPUSH", key, "m"])), 1);
        assert_eq!(int(q(&mut c, &["LPUSHX", key, "l1", "l2"])), 3);
        assert_eq!(int(q(&mut c, &["RPUSHX", key, "r"])), 4);
        assert_eq!(range(&mut c, key), ["l2", "l1", "m", "r"]);
        assert_eq!(
            q(&mut c, &["TYPE", key]),
            Value::SimpleString("list".into())
        );
        assert_eq!(q(&mut c, &["OBJECT", "ENCODING", key]), bulk("quicklist"));
    }
}

#[test]
fn pop_replies_in_resp2_and_resp3() {
    let s = Server::start(2);
    let mut c = s.client();
    q(&mut c, &["RPUSH", "list", "a"]);
    let got = raw(
        &s,
        &[
            &["LPOP", "nokey"],
            &["LPOP", "nokey", "0"],
            &["RPOP", "nokey", "1"],
            &["LPOP", "list", "0"],
            &["LPOP", "list", "-1"],
            &["LPOP", "list", "x"],
            &["LPOP", "list", "1", "1"],
        ],
        "$-1\r\n*-1\r\n*-1\r\n*0\r\n-ERR value is out of range, must be positive\r\n\
         -ERR value is out of range, must be positive\r\n-ERR wrong number of arguments for 'lpop' command\r\n",
    );
    assert_eq!(
        got,
        "$-1\r\n*-1\r\n*-1\r\n*0\r\n-ERR value is out of range, must be positive\r\n\
         -ERR value is out of range, must be positive\r\n-ERR wrong number of arguments for 'lpop' command\r\n"
    );
    let mut stream = s.raw();
    use std::io::Write;
    stream.write_all(&resp(&["HELLO", "3"])).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let hello = read_at_least(&mut stream, 1);
    assert!(hello.starts_with(b"%"));
    let mut bytes = Vec::new();
    for c in [
        &["LPOP", "nokey"][..],
        &["LPOP", "nokey", "1"],
        &["LMPOP", "1", "nokey", "LEFT"],
        &["LINDEX", "nokey", "0"],
        &["LPOS", "list", "zz"],
    ] {
        bytes.extend(resp(c));
    }
    stream.write_all(&bytes).unwrap();
    let want = "_\r\n_\r\n_\r\n_\r\n_\r\n";
    assert_eq!(
        String::from_utf8_lossy(&read_at_least(&mut stream, want.len())),
        want
    );
}

#[test]
fn wrong_type_errors() {
    let s = Server::start(2);
    let mut c = s.client();
    q(&mut c, &["SET", "str", "x"]);
    for cmd in [
        &["LPUSH", "str", "a"][..],
        &["RPUSH", "str", "a"],
        &["LPUSHX", "str", "a"],
        &["LPOP", "str"],
        &["RPOP", "str", "2"],
        &["LLEN", "str"],
        &["LINDEX", "str", "0"],
        &["LINSERT", "str", "BEFORE", "a", "b"],
        &["LSET", "str", "0", "a"],
        &["LRANGE", "str", "0", "-1"],
        &["LTRIM", "str", "0", "1"],
        &["LREM", "str", "0", "a"],
        &["LPOS", "str", "a"],
        &["LMPOP", "1", "str", "LEFT"],
    ] {
        assert_eq!(q_err(&mut c, cmd), WRONGTYPE, "{cmd:?}");
    }
    assert_eq!(q(&mut c, &["GET", "str"]), bulk("x"));
}

#[test]
fn argument_errors_match_redis() {
    let s = Server::start(2);
    let mut c = s.client();
    q(
        &mut c,
        &["RPUSH", "l", "a", "b", "c", "1", "2", "3", "c", "c"],
    );
    assert_eq!(
        q_err(&mut c, &["LSET", "nokey", "0", "x"]),
        "ERR no such key"
    );
    assert_eq!(
        q_err(&mut c, &["LSET", "l", "10", "x"]),
        "ERR index out of range"
    );
    assert_eq!(
        q_err(&mut c, &["LSET", "l", "x", "x"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        q_err(&mut c, &["LINDEX", "l", "x"]),
        "ERR value is not an integer or out of range"
    );
    // LINDEX looks the key up first: a missing key with a bad index is just nil.
    assert_eq!(q(&mut c, &["LINDEX", "nokey", "x"]), Value::Nil);
    assert_eq!(
        q_err(&mut c, &["LRANGE", "nokey", "a", "1"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        q_err(&mut c, &["LINSERT", "l", "middle", "a", "b"]),
        "ERR syntax error"
    );
    assert_eq!(
        q_err(&mut c, &["LREM", "l", "x", "a"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        q_err(&mut c, &["LPOS", "l", "c", "RANK", "0"]),
        "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list"
    );
    assert_eq!(
        q_err(&mut c, &["LPOS", "l", "c", "COUNT", "-1"]),
        "ERR COUNT can't be negative"
    );
    assert_eq!(
        q_err(&mut c, &["LPOS", "l", "c", "MAXLEN", "-1"]),
        "ERR MAXLEN can't be negative"
    );
    assert_eq!(
        q_err(&mut c, &["LPOS", "l", "c", "RANK", "x"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        q_err(&mut c, &["LPOS", "l", "c", "RANK"]),
        "ERR syntax error"
    );
    assert_eq!(
        q_err(&mut c, &["LMOVE", "l", "m", "up", "left"]),
        "ERR syntax error"
    );
    assert_eq!(
        q_err(&mut c, &["LMPOP", "0", "l", "LEFT"]),
        "ERR numkeys should be greater than 0"
    );
    assert_eq!(
        q_err(&mut c, &["LMPOP", "1", "l", "LEFT", "COUNT", "0"]),
        "ERR count should be greater than 0"
    );
    assert_eq!(
        q_err(
            &mut c,
            &["LMPOP", "1", "l", "LEFT", "COUNT", "1", "COUNT", "2"]
        ),
        "ERR syntax error"
    );
    assert_eq!(
        q_err(&mut c, &["LMPOP", "3", "l", "LEFT"]),
        "ERR syntax error"
    );
    assert_eq!(
        q_err(&mut c, &["LMPOP", "1", "l"]),
        "ERR wrong number of arguments for 'lmpop' command"
    );
}

#[test]
fn lpos_rank_count_maxlen() {
    let s = Server::start(2);
    let mut c = s.client();
    q(
        &mut c,
        &["RPUSH", "l", "a", "b", "c", "1", "2", "3", "c", "c"],
    );
    let ints = |v: Value| -> Vec<i64> {
        match v {
            Value::Array(a) => a.into_iter().map(int).collect(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(int(q(&mut c, &["LPOS", "l", "c"])), 2);
    assert_eq!(int(q(&mut c, &["LPOS", "l", "c", "RANK", "2"])), 6);
    assert_eq!(int(q(&mut c, &["LPOS", "l", "c", "RANK", "-1"])), 7);
    assert_eq!(q(&mut c, &["LPOS", "l", "c", "RANK", "4"]), Value::Nil);
    assert_eq!(
        ints(q(&mut c, &["LPOS", "l", "c", "COUNT", "0"])),
        [2, 6, 7]
    );
    assert_eq!(
        ints(q(&mut c, &["LPOS", "l", "c", "COUNT", "2", "RANK", "-1"])),
        [7, 6]
    );
    assert_eq!(
        ints(q(
            &mut c,
            &["LPOS", "l", "c", "COUNT", "0", "MAXLEN", "7", "RANK", "2"]
        )),
        [6]
    );
    assert_eq!(
        ints(q(&mut c, &["LPOS", "l", "c", "COUNT", "0", "MAXLEN", "1"])),
        Vec::<i64>::new()
    );
    assert_eq!(
        ints(q(&mut c, &["LPOS", "nokey", "c", "COUNT", "0"])),
        Vec::<i64>::new()
    );
    assert_eq!(q(&mut c, &["LPOS", "nokey", "c"]), Value::Nil);
}

#[test]
fn insert_set_trim_rem() {
    let s = Server::start(2);
    let mut c = s.client();
    q(&mut c, &["RPUSH", "l", "a", "b", "c", "d"]);
    assert_eq!(int(q(&mut c, &["LINSERT", "l", "BEFORE", "c", "zz"])), 5);
    assert_eq!(int(q(&mut c, &["LINSERT", "l", "after", "d", "e"])), 6);
    assert_eq!(int(q(&mut c, &["LINSERT", "l", "after", "nope", "e"])), -1);
    assert_eq!(int(q(&mut c, &["LINSERT", "nokey", "after", "a", "e"])), 0);
    assert_eq!(range(&mut c, "l"), ["a", "b", "zz", "c", "d", "e"]);
    assert_eq!(q(&mut c, &["LSET", "l", "-1", "E"]), Value::Okay);
    assert_eq!(q(&mut c, &["LTRIM", "l", "1", "-2"]), Value::Okay);
    assert_eq!(range(&mut c, "l"), ["b", "zz", "c", "d"]);
    assert_eq!(q(&mut c, &["LTRIM", "nokey", "0", "1"]), Value::Okay);
    q(
        &mut c,
        &["RPUSH", "r", "x", "foo", "bar", "foo", "x", "foo"],
    );
    assert_eq!(int(q(&mut c, &["LREM", "r", "-2", "foo"])), 2);
    assert_eq!(range(&mut c, "r"), ["x", "foo", "bar", "x"]);
    assert_eq!(int(q(&mut c, &["LREM", "r", "0", "x"])), 2);
    assert_eq!(int(q(&mut c, &["LREM", "nokey", "0", "x"])), 0);
    assert_eq!(int(q(&mut c, &["LREM", "r", "0", "foo"])), 1);
    assert_eq!(int(q(&mut c, &["LREM", "r", "1", "bar"])), 1);
    assert_eq!(int(q(&mut c, &["EXISTS", "r"])), 0);
    // A trim to nothing deletes the key.
    assert_eq!(q(&mut c, &["LTRIM", "l", "5", "1"]), Value::Okay);
    assert_eq!(int(q(&mut c, &["EXISTS", "l"])), 0);
}

#[test]
fn writes_in_place_keep_the_ttl() {
    let s = Server::start(2);
    let mut c = s.client();
    q(&mut c, &["RPUSH", "l", "a", "b"]);
    q(&mut c, &["EXPIRE", "l", "100"]);
    q(&mut c, &["RPUSH", "l", "c"]);
    q(&mut c, &["LPOP", "l"]);
    q(&mut c, &["LSET", "l", "0", "x"]);
    assert!(int(q(&mut c, &["TTL", "l"])) > 90);
}

#[test]
fn lmove_and_rpoplpush_across_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    let (a, b) = (KEY_SHARD0, KEY_SHARD1);
    q(&mut c, &["RPUSH", a, "1", "2", "3"]);
    assert_eq!(q(&mut c, &["LMOVE", a, b, "RIGHT", "LEFT"]), bulk("3"));
    assert_eq!(q(&mut c, &["LMOVE", a, b, "LEFT", "RIGHT"]), bulk("1"));
    assert_eq!(range(&mut c, a), ["2"]);
    assert_eq!(range(&mut c, b), ["3", "1"]);
    assert_eq!(q(&mut c, &["RPOPLPUSH", a, b]), bulk("2"));
    assert_eq!(int(q(&mut c, &["EXISTS", a])), 0);
    assert_eq!(range(&mut c, b), ["2", "3", "1"]);
    // Missing source: nil, even when the destination has the wrong type.
    assert_eq!(q(&mut c, &["RPOPLPUSH", a, b]), Value::Nil);
    q(&mut c, &["SET", a, "str"]);
    assert_eq!(
        q(&mut c, &["LMOVE", "nosuch", a, "LEFT", "LEFT"]),
        Value::Nil
    );
    // Wrong destination type: nothing moves.
    assert_eq!(q_err(&mut c, &["LMOVE", b, a, "LEFT", "LEFT"]), WRONGTYPE);
    assert_eq!(range(&mut c, b), ["2", "3", "1"]);
    // Wrong source type.
    assert_eq!(q_err(&mut c, &["RPOPLPUSH", a, b]), WRONGTYPE);
    assert_eq!(q(&mut c, &["GET", a]), bulk("str"));
    // Same key: a rotation.
    assert_eq!(q(&mut c, &["LMOVE", b, b, "LEFT", "RIGHT"]), bulk("2"));
    assert_eq!(range(&mut c, b), ["3", "1", "2"]);
    // Same shard, different keys (hash tags).
    q(&mut c, &["RPUSH", "{t}src", "only"]);
    assert_eq!(
        q(&mut c, &["LMOVE", "{t}src", "{t}dst", "LEFT", "LEFT"]),
        bulk("only")
    );
    assert_eq!(int(q(&mut c, &["EXISTS", "{t}src"])), 0);
    assert_eq!(range(&mut c, "{t}dst"), ["only"]);
}

#[test]
fn lmove_across_shards_is_atomic_under_concurrency() {
    let s = Server::start(2);
    let (a, b) = (KEY_SHARD0, KEY_SHARD1);
    let mut c = s.client();
    let n = 200;
    let items: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    let mut push = redis::cmd("RPUSH");
    push.arg(a).arg(&items);
    let _: i64 = push.query(&mut c).unwrap();
    let movers: Vec<_> = (0..4)
        .map(|t| {
            let url = s.url();
            std::thread::spawn(move || {
                let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
                for _ in 0..n {
                    let (from, to) = if t % 2 == 0 { (a, b) } else { (b, a) };
                    let _: Value = redis::cmd("RPOPLPUSH")
                        .arg(from)
                        .arg(to)
                        .query(&mut c)
                        .unwrap();
                }
            })
        })
        .collect();
    // Meanwhile every element stays readable from one of the two lists.
    for _ in 0..50 {
        let la = int(q(&mut c, &["LLEN", a]));
        assert!((0..=n as i64).contains(&la));
    }
    for m in movers {
        m.join().unwrap();
    }
    let mut all = range(&mut c, a);
    all.extend(range(&mut c, b));
    all.sort_by_key(|x| x.parse::<i64>().unwrap_or(-1));
    assert_eq!(all, items);
}

#[test]
fn lmpop_single_and_across_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    let (a, b) = (KEY_SHARD0, KEY_SHARD1);
    let popped = |v: Value| -> (String, Vec<String>) { redis::from_redis_value(&v).unwrap() };
    q(&mut c, &["RPUSH", b, "1", "2", "3", "4", "5"]);
    // First key missing, second on the other shard.
    assert_eq!(
        popped(q(&mut c, &["LMPOP", "2", a, b, "LEFT", "COUNT", "2"])),
        (b.into(), vec!["1".into(), "2".into()])
    );
    assert_eq!(
        popped(q(&mut c, &["LMPOP", "2", a, b, "RIGHT"])),
        (b.into(), vec!["5".into()])
    );
    q(&mut c, &["RPUSH", a, "x", "y"]);
    assert_eq!(
        popped(q(&mut c, &["LMPOP", "2", a, b, "RIGHT", "COUNT", "10"])),
        (a.into(), vec!["y".into(), "x".into()])
    );
    assert_eq!(int(q(&mut c, &["EXISTS", a])), 0);
    assert_eq!(
        popped(q(&mut c, &["LMPOP", "1", b, "LEFT", "COUNT", "10"])),
        (b.into(), vec!["3".into(), "4".into()])
    );
    assert_eq!(q(&mut c, &["LMPOP", "2", a, b, "LEFT"]), Value::Nil);
    // A wrong type before any list is an error; after one, it is never looked at.
    q(&mut c, &["SET", a, "str"]);
    q(&mut c, &["RPUSH", b, "z"]);
    assert_eq!(q_err(&mut c, &["LMPOP", "2", a, b, "LEFT"]), WRONGTYPE);
    assert_eq!(
        popped(q(&mut c, &["LMPOP", "2", b, a, "LEFT"])),
        (b.into(), vec!["z".into()])
    );
    // Same key twice, single shard.
    q(&mut c, &["RPUSH", "{t}l", "a", "b", "c"]);
    assert_eq!(
        popped(q(
            &mut c,
            &["LMPOP", "2", "{t}l", "{t}l", "LEFT", "COUNT", "2"]
        )),
        ("{t}l".into(), vec!["a".into(), "b".into()])
    );
}

#[test]
fn big_elements_small_nodes_and_dump_restore() {
    let s = Server::start(2);
    let mut c = s.client();
    let mut model: Vec<String> = Vec::new();
    for fill in ["4", "-1", "1"] {
        q(&mut c, &["CONFIG", "SET", "list-max-listpack-size", fill]);
        q(&mut c, &["DEL", "big"]);
        model.clear();
        let mut seed = 7u64;
        let mut rnd = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for i in 0..400 {
            let v = if rnd(5) == 0 {
                "x".repeat(rnd(9000) as usize)
            } else {
                format!("v{}", rnd(20))
            };
            match rnd(7) {
                0 => {
                    q(&mut c, &["LPUSH", "big", &v]);
                    model.insert(0, v);
                }
                1 | 2 => {
                    q(&mut c, &["RPUSH", "big", &v]);
                    model.push(v);
                }
                3 if !model.is_empty() => {
                    let idx = rnd(model.len() as u64) as usize;
                    q(&mut c, &["LSET", "big", &idx.to_string(), &v]);
                    model[idx] = v;
                }
                4 => {
                    let pivot = format!("v{}", rnd(20));
                    let r = int(q(&mut c, &["LINSERT", "big", "AFTER", &pivot, &v]));
                    if let Some(p) = model.iter().position(|x| *x == pivot) {
                        model.insert(p + 1, v);
                        assert_eq!(r, model.len() as i64);
                    }
                }
                5 => {
                    let target = format!("v{}", rnd(20));
                    let n = int(q(&mut c, &["LREM", "big", "-1", &target]));
                    if let Some(p) = model.iter().rposition(|x| *x == target) {
                        model.remove(p);
                        assert_eq!(n, 1);
                    }
                }
                _ if !model.is_empty() => {
                    let got = q(&mut c, &["RPOP", "big"]);
                    assert_eq!(got, bulk(&model.pop().unwrap_or_default()));
                }
                _ => {}
            }
            if i % 50 == 0 {
                assert_eq!(range(&mut c, "big"), model, "fill {fill} step {i}");
            }
        }
        assert_eq!(range(&mut c, "big"), model, "fill {fill}");
        let dump: Vec<u8> = redis::cmd("DUMP").arg("big").query(&mut c).unwrap();
        let _: () = redis::cmd("RESTORE")
            .arg("copy")
            .arg(0)
            .arg(dump)
            .arg("REPLACE")
            .query(&mut c)
            .unwrap();
        assert_eq!(range(&mut c, "copy"), model);
        assert_eq!(
            q(&mut c, &["OBJECT", "ENCODING", "copy"]),
            bulk("quicklist")
        );
    }
}

/// `list-compress-depth` takes effect: a list created under it keeps its inner nodes
/// LZF-compressed (DEBUG OBJECT says so, MEMORY USAGE shows the saving), every read
/// and write in the middle sees the elements as they are, and a list created before
/// the change keeps its nodes as they were, as in Redis.
#[test]
fn compress_depth_compresses_inner_nodes() {
    let server = Server::start(2);
    let mut c = server.client();
    let fill = |c: &mut Connection, key: &str| {
        for chunk in 0..20 {
            let mut cmd = redis::cmd("RPUSH");
            cmd.arg(key);
            for i in 0..100 {
                cmd.arg(format!(
                    "element {} of a list that compresses",
                    chunk * 100 + i
                ));
            }
            cmd.query::<i64>(c).expect("rpush");
        }
    };
    fill(&mut c, "plain{t}");
    q(&mut c, &["CONFIG", "SET", "list-compress-depth", "1"]);
    fill(&mut c, "packed{t}");
    let usage = |c: &mut Connection, key: &str| int(q(c, &["MEMORY", "USAGE", key]));
    let (plain, packed) = (usage(&mut c, "plain{t}"), usage(&mut c, "packed{t}"));
    assert!(packed * 2 < plain, "compressed {packed} vs {plain}");
    let object = |c: &mut Connection, key: &str| match q(c, &["DEBUG", "OBJECT", key]) {
        Value::SimpleString(s) => s,
        v => panic!("{v:?}"),
    };
    assert!(object(&mut c, "packed{t}").contains(" ql_compressed:1 "));
    assert!(object(&mut c, "plain{t}").contains(" ql_compressed:0 "));
    assert_eq!(range(&mut c, "packed{t}"), range(&mut c, "plain{t}"));
    for key in ["plain{t}", "packed{t}"] {
        q(&mut c, &["LSET", key, "1000", "changed"]);
        q(&mut c, &["LINSERT", key, "AFTER", "changed", "inserted"]);
        q(
            &mut c,
            &["LREM", key, "0", "element 1500 of a list that compresses"],
        );
        q(&mut c, &["LTRIM", key, "300", "-300"]);
    }
    let got = range(&mut c, "packed{t}");
    assert_eq!(got, range(&mut c, "plain{t}"));
    assert_eq!(got[700], "changed");
    assert_eq!(got[701], "inserted");
    assert_eq!(
        q(&mut c, &["LINDEX", "packed{t}", "900"]),
        q(&mut c, &["LINDEX", "plain{t}", "900"])
    );
    q(&mut c, &["CONFIG", "SET", "list-compress-depth", "0"]);
}
