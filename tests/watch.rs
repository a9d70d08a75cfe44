//! WATCH sees exactly the writes that changed a key (Redis's signalModifiedKey): a
//! write that left the key as it was (an SADD of a member already there, a SET NX
//! on an existing key, a STORE command's source) must not abort a transaction, and
//! one that changed it must. Each case runs on a 2-shard Tessera and, when
//! redis-server is installed, on it too, so the expectations are Redis's own.

mod common;
use common::*;

/// One interference: `setup` runs first, then a client WATCHes `watch` (in database
/// `watch_db`) and opens a transaction, another client (in database 0) runs `write`,
/// and `aborts` says whether EXEC must come back nil.
struct Case {
    setup: &'static [&'static [&'static str]],
    watch: &'static str,
    watch_db: u8,
    write: &'static [&'static str],
    aborts: bool,
}

const fn case(
    setup: &'static [&'static [&'static str]],
    watch: &'static str,
    write: &'static [&'static str],
    aborts: bool,
) -> Case {
    Case {
        setup,
        watch,
        watch_db: 0,
        write,
        aborts,
    }
}

const SET_AB: &[&[&str]] = &[&["SADD", "s{t}", "a", "b"]];

/// A stream with a group whose consumer `c` has read (and not acknowledged) 1-1.
const XGROUP_READ: &[&[&str]] = &[
    &["XADD", "x{t}", "1-1", "f", "v"],
    &["XGROUP", "CREATE", "x{t}", "g", "0"],
    &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "x{t}", ">"],
];

/// Two keys on different shards of the 2-shard server.
const A: &str = KEY_SHARD1;
const B: &str = KEY_SHARD0;

const CASES: &[Case] = &[
    // SWAPDB changes a watched key only where it, or what replaces it, is there.
    case(&[], "w", &["SWAPDB", "0", "1"], false),
    case(&[&["SET", "w", "1"]], "w", &["SWAPDB", "0", "1"], true),
    case(
        &[&["SELECT", "1"], &["SET", "w", "1"], &["SELECT", "0"]],
        "w",
        &["SWAPDB", "1", "0"],
        true,
    ),
    case(&[&["SET", "w", "1"]], "other", &["SWAPDB", "0", "1"], false),
    case(&[&["SET", "w", "1"]], "w", &["SWAPDB", "2", "3"], false),
    // Sets.
    case(SET_AB, "s{t}", &["SADD", "s{t}", "a"], false),
    case(SET_AB, "s{t}", &["SADD", "s{t}", "c"], true),
    case(SET_AB, "s{t}", &["SREM", "s{t}", "zz"], false),
    case(SET_AB, "s{t}", &["SREM", "s{t}", "a"], true),
    case(SET_AB, "s{t}", &["SPOP", "none{t}"], false),
    case(
        &[&["SADD", "src{t}", "a", "b"], &["SADD", "dst{t}", "a"]],
        "dst{t}",
        &["SMOVE", "src{t}", "dst{t}", "a"],
        false,
    ),
    case(
        &[&["SADD", "src{t}", "a", "b"], &["SADD", "dst{t}", "a"]],
        "src{t}",
        &["SMOVE", "src{t}", "dst{t}", "a"],
        true,
    ),
    case(
        &[&["SADD", "src{t}", "a"]],
        "dst{t}",
        &["SMOVE", "src{t}", "dst{t}", "a"],
        true,
    ),
    case(SET_AB, "s{t}", &["SMOVE", "s{t}", "s{t}", "a"], false),
    case(
        &[&["SADD", "s1{t}", "a"], &["SADD", "s2{t}", "a"]],
        "s1{t}",
        &["SINTERSTORE", "d{t}", "s1{t}", "s2{t}"],
        false,
    ),
    case(
        &[&["SADD", "s1{t}", "a"], &["SADD", "s2{t}", "a"]],
        "d{t}",
        &["SINTERSTORE", "d{t}", "s1{t}", "s2{t}"],
        true,
    ),
    case(
        &[&["SADD", "s1{t}", "a"]],
        "d{t}",
        &["SINTERSTORE", "d{t}", "s1{t}", "none{t}"],
        false,
    ),
    // Strings.
    case(
        &[&["SET", "k{t}", "v"]],
        "k{t}",
        &["SET", "k{t}", "w", "NX"],
        false,
    ),
    case(
        &[&["SET", "k{t}", "v"]],
        "k{t}",
        &["SET", "k{t}", "w", "XX"],
        true,
    ),
    case(&[], "k{t}", &["SET", "k{t}", "w", "XX"], false),
    case(
        &[&["SET", "k{t}", "v"]],
        "k{t}",
        &["SETNX", "k{t}", "w"],
        false,
    ),
    case(
        &[&["SET", "k{t}", "v"]],
        "k{t}",
        &["SET", "k{t}", "v"],
        true,
    ),
    case(
        &[&["SET", "k{t}", "v"]],
        "k{t}",
        &["SETRANGE", "k{t}", "0", ""],
        false,
    ),
    case(&[&["SET", "k{t}", "v"]], "k{t}", &["GETEX", "k{t}"], false),
    case(
        &[&["SET", "k{t}", "v"]],
        "k{t}",
        &["GETEX", "k{t}", "PERSIST"],
        false,
    ),
    case(
        &[&["SET", "k{t}", "v"]],
        "k{t}",
        &["GETEX", "k{t}", "EX", "100"],
        true,
    ),
    case(&[], "k{t}", &["GETDEL", "k{t}"], false),
    case(
        &[&["SET", "k{t}", "v"]],
        "k{t}",
        &["MSETNX", "k{t}", "1", "j{t}", "2"],
        false,
    ),
    // Keys.
    case(&[&["SET", "k{t}", "v"]], "k{t}", &["DEL", "none{t}"], false),
    case(
        &[&["SET", "k{t}", "v"]],
        "k{t}",
        &["DEL", "none{t}", "k{t}"],
        true,
    ),
    case(
        &[&["SET", "k{t}", "v"]],
        "none{t}",
        &["DEL", "none{t}", "k{t}"],
        false,
    ),
    case(&[], "k{t}", &["EXPIRE", "k{t}", "100"], false),
    case(
        &[&["SET", "k{t}", "v"]],
        "k{t}",
        &["EXPIRE", "k{t}", "100", "XX"],
        false,
    ),
    case(
        &[&["SET", "k{t}", "v"]],
        "k{t}",
        &["EXPIRE", "k{t}", "100"],
        true,
    ),
    case(
        &[&["SET", "k{t}", "v"]],
        "k{t}",
        &["PERSIST", "k{t}"],
        false,
    ),
    case(
        &[&["SET", "k{t}", "v"]],
        "k{t}",
        &["COPY", "k{t}", "c{t}"],
        false,
    ),
    case(
        &[&["SET", "k{t}", "v"]],
        "c{t}",
        &["COPY", "k{t}", "c{t}"],
        true,
    ),
    case(
        &[&["SET", "k{t}", "v"], &["SET", "c{t}", "w"]],
        "c{t}",
        &["COPY", "k{t}", "c{t}"],
        false,
    ),
    case(
        &[&["SET", "k{t}", "v"]],
        "k{t}",
        &["RENAME", "k{t}", "k{t}"],
        false,
    ),
    case(
        &[&["SET", "k{t}", "v"], &["SET", "n{t}", "w"]],
        "n{t}",
        &["RENAMENX", "k{t}", "n{t}"],
        false,
    ),
    Case {
        setup: &[&["SET", "k{t}", "v"]],
        watch: "k{t}",
        watch_db: 1,
        write: &["COPY", "k{t}", "k{t}", "DB", "1"],
        aborts: true,
    },
    Case {
        setup: &[&["SET", "k{t}", "v"]],
        watch: "k{t}",
        watch_db: 1,
        write: &["MOVE", "k{t}", "1"],
        aborts: true,
    },
    // Hashes.
    case(
        &[&["HSET", "h{t}", "f", "v"]],
        "h{t}",
        &["HSETNX", "h{t}", "f", "w"],
        false,
    ),
    case(
        &[&["HSET", "h{t}", "f", "v"]],
        "h{t}",
        &["HDEL", "h{t}", "g"],
        false,
    ),
    case(
        &[&["HSET", "h{t}", "f", "v"]],
        "h{t}",
        &["HSET", "h{t}", "f", "v"],
        true,
    ),
    // Lists.
    case(
        &[&["RPUSH", "l{t}", "a"]],
        "l{t}",
        &["LREM", "l{t}", "0", "zz"],
        false,
    ),
    case(
        &[&["RPUSH", "l{t}", "a"]],
        "l{t}",
        &["LINSERT", "l{t}", "BEFORE", "zz", "b"],
        false,
    ),
    case(&[], "l{t}", &["LPUSHX", "l{t}", "a"], false),
    case(&[], "l{t}", &["LPOP", "l{t}"], false),
    case(
        &[&["RPUSH", "l{t}", "a"]],
        "l{t}",
        &["LPOP", "l{t}", "0"],
        false,
    ),
    case(&[], "l{t}", &["LTRIM", "l{t}", "0", "1"], false),
    case(
        &[&["RPUSH", "l{t}", "a", "b"]],
        "l{t}",
        &["LTRIM", "l{t}", "0", "5"],
        true,
    ),
    case(
        &[&["RPUSH", "l2{t}", "a"]],
        "l1{t}",
        &["LMPOP", "2", "l1{t}", "l2{t}", "LEFT"],
        false,
    ),
    case(
        &[&["RPUSH", "l2{t}", "a"]],
        "l2{t}",
        &["LMPOP", "2", "l1{t}", "l2{t}", "LEFT"],
        true,
    ),
    // Sorted sets.
    case(
        &[&["ZADD", "z{t}", "1", "a"]],
        "z{t}",
        &["ZADD", "z{t}", "1", "a"],
        false,
    ),
    case(
        &[&["ZADD", "z{t}", "1", "a"]],
        "z{t}",
        &["ZADD", "z{t}", "2", "a"],
        true,
    ),
    case(
        &[&["ZADD", "z{t}", "1", "a"]],
        "z{t}",
        &["ZADD", "z{t}", "XX", "1", "b"],
        false,
    ),
    case(
        &[&["ZADD", "z{t}", "1", "a"]],
        "z{t}",
        &["ZREM", "z{t}", "b"],
        false,
    ),
    case(
        &[&["ZADD", "z{t}", "1", "a"]],
        "z{t}",
        &["ZREMRANGEBYSCORE", "z{t}", "5", "6"],
        false,
    ),
    case(&[], "z{t}", &["ZPOPMIN", "z{t}"], false),
    case(
        &[&["ZADD", "z1{t}", "1", "a"]],
        "z1{t}",
        &["ZUNIONSTORE", "d{t}", "1", "z1{t}"],
        false,
    ),
    case(
        &[&["ZADD", "z1{t}", "1", "a"]],
        "d{t}",
        &["ZUNIONSTORE", "d{t}", "1", "z1{t}"],
        true,
    ),
    case(
        &[&["ZADD", "z1{t}", "1", "a"]],
        "z1{t}",
        &["ZRANGESTORE", "d{t}", "z1{t}", "0", "-1"],
        false,
    ),
    // Bitmaps and HyperLogLog.
    case(
        &[&["SETBIT", "b{t}", "7", "1"]],
        "b{t}",
        &["SETBIT", "b{t}", "7", "1"],
        false,
    ),
    case(
        &[&["SETBIT", "b{t}", "7", "1"]],
        "b{t}",
        &["SETBIT", "b{t}", "7", "0"],
        true,
    ),
    case(
        &[&["SETBIT", "b{t}", "7", "1"]],
        "b{t}",
        &["SETBIT", "b{t}", "100", "0"],
        true,
    ),
    case(
        &[&["BITFIELD", "f{t}", "SET", "u8", "0", "5"]],
        "f{t}",
        &["BITFIELD", "f{t}", "SET", "u8", "0", "5"],
        false,
    ),
    case(
        &[&["SET", "a{t}", "x"], &["SET", "b{t}", "y"]],
        "a{t}",
        &["BITOP", "AND", "d{t}", "a{t}", "b{t}"],
        false,
    ),
    case(
        &[&["PFADD", "p{t}", "a"]],
        "p{t}",
        &["PFADD", "p{t}", "a"],
        false,
    ),
    case(
        &[&["PFADD", "p{t}", "a"]],
        "p{t}",
        &["PFADD", "p{t}", "b"],
        true,
    ),
    case(
        &[&["PFADD", "p1{t}", "a"]],
        "p1{t}",
        &["PFMERGE", "p2{t}", "p1{t}"],
        false,
    ),
    // Geo: a search without STORE only reads.
    case(
        &[&["GEOADD", "g{t}", "13.36", "38.11", "a"]],
        "g{t}",
        &["GEORADIUS", "g{t}", "13", "38", "100", "km"],
        false,
    ),
    case(
        &[&["GEOADD", "g{t}", "13.36", "38.11", "a"]],
        "g{t}",
        &[
            "GEOSEARCHSTORE",
            "d{t}",
            "g{t}",
            "FROMLONLAT",
            "13",
            "38",
            "BYRADIUS",
            "100",
            "km",
        ],
        false,
    ),
    // Streams.
    case(
        &[&["XADD", "x{t}", "1-1", "f", "v"]],
        "x{t}",
        &["XDEL", "x{t}", "9-9"],
        false,
    ),
    case(
        &[&["XADD", "x{t}", "1-1", "f", "v"]],
        "x{t}",
        &["XDEL", "x{t}", "1-1"],
        true,
    ),
    case(
        &[&["XADD", "x{t}", "1-1", "f", "v"]],
        "x{t}",
        &["XTRIM", "x{t}", "MAXLEN", "5"],
        false,
    ),
    case(
        &[],
        "x{t}",
        &["XADD", "x{t}", "NOMKSTREAM", "*", "f", "v"],
        false,
    ),
    case(
        &[&["XADD", "x{t}", "1-1", "f", "v"]],
        "x{t}",
        &["XGROUP", "CREATE", "x{t}", "g", "0"],
        false,
    ),
    case(
        &[
            &["XADD", "x{t}", "1-1", "f", "v"],
            &["XGROUP", "CREATE", "x{t}", "g", "0"],
        ],
        "x{t}",
        &["XGROUP", "DESTROY", "x{t}", "nope"],
        false,
    ),
    case(
        &[],
        "x{t}",
        &["XGROUP", "CREATE", "x{t}", "g", "$", "MKSTREAM"],
        true,
    ),
    case(
        &[
            &["XADD", "x{t}", "1-1", "f", "v"],
            &["XGROUP", "CREATE", "x{t}", "g", "0"],
        ],
        "x{t}",
        &["XACK", "x{t}", "g", "1-1"],
        false,
    ),
    case(
        &[&["XADD", "x{t}", "1-1", "f", "v"]],
        "x{t}",
        &["XSETID", "x{t}", "5-5"],
        false,
    ),
    case(
        XGROUP_READ,
        "x{t}",
        &["XGROUP", "DESTROY", "x{t}", "g"],
        false,
    ),
    case(
        XGROUP_READ,
        "x{t}",
        &["XGROUP", "SETID", "x{t}", "g", "0"],
        false,
    ),
    case(
        XGROUP_READ,
        "x{t}",
        &["XGROUP", "CREATECONSUMER", "x{t}", "g", "d"],
        false,
    ),
    case(
        XGROUP_READ,
        "x{t}",
        &["XGROUP", "DELCONSUMER", "x{t}", "g", "c"],
        false,
    ),
    case(XGROUP_READ, "x{t}", &["XACK", "x{t}", "g", "1-1"], false),
    case(
        XGROUP_READ,
        "x{t}",
        &["XCLAIM", "x{t}", "g", "d", "0", "1-1"],
        false,
    ),
    case(
        XGROUP_READ,
        "x{t}",
        &["XAUTOCLAIM", "x{t}", "g", "d", "0", "0"],
        false,
    ),
    case(XGROUP_READ, "x{t}", &["XADD", "x{t}", "*", "f", "v"], true),
    // Keys on different shards: the multi-shard operations signal only what changed.
    case(&[&["SADD", A, "a"]], B, &["SMOVE", A, B, "zz"], false),
    case(&[&["SADD", A, "a"]], A, &["SMOVE", A, B, "zz"], false),
    case(
        &[&["SADD", A, "a"], &["SADD", B, "a"]],
        B,
        &["SMOVE", A, B, "a"],
        false,
    ),
    case(
        &[&["SADD", A, "a"], &["SADD", B, "a"]],
        A,
        &["SMOVE", A, B, "a"],
        true,
    ),
    case(&[&["SET", B, "1"]], A, &["MSETNX", A, "2", B, "2"], false),
    case(&[&["SET", B, "1"]], B, &["MSETNX", A, "2", B, "2"], false),
    case(
        &[&["SET", A, "1"], &["SET", B, "1"]],
        A,
        &["RENAMENX", A, B],
        false,
    ),
    case(&[&["SET", A, "1"]], A, &["DEL", B, A], true),
    case(&[&["SET", A, "1"]], B, &["DEL", B, A], false),
    case(
        &[&["RPUSH", A, "b", "a"]],
        A,
        &["SORT", A, "ALPHA", "STORE", B],
        false,
    ),
    case(
        &[&["RPUSH", A, "b", "a"]],
        B,
        &["SORT", A, "ALPHA", "STORE", B],
        true,
    ),
    case(&[&["SADD", A, "a"]], A, &["SINTERSTORE", B, A], false),
    case(&[&["SADD", A, "a"]], B, &["SINTERSTORE", B, A], true),
    case(
        &[&["ZADD", A, "1", "a"]],
        A,
        &["ZUNIONSTORE", B, "1", A],
        false,
    ),
    case(
        &[&["ZADD", A, "1", "a"]],
        A,
        &["ZRANGESTORE", B, A, "0", "-1"],
        false,
    ),
    case(&[&["SET", A, "x"]], A, &["BITOP", "NOT", B, A], false),
    case(&[&["PFADD", A, "a"]], A, &["PFMERGE", B, A], false),
    case(
        &[&["PFADD", A, "a"], &["PFADD", B, "b"]],
        A,
        &["PFCOUNT", A, B],
        false,
    ),
    case(&[&["SET", A, "v"]], A, &["COPY", A, B], false),
    case(&[&["SET", A, "v"]], B, &["COPY", A, B], true),
    case(&[], B, &["LMOVE", A, B, "LEFT", "LEFT"], false),
    case(
        &[&["RPUSH", A, "a"]],
        B,
        &["LMOVE", A, B, "LEFT", "LEFT"],
        true,
    ),
    case(
        &[&["RPUSH", B, "a"]],
        A,
        &["LMPOP", "2", A, B, "LEFT"],
        false,
    ),
    case(
        &[&["RPUSH", B, "a"]],
        B,
        &["LMPOP", "2", A, B, "LEFT"],
        true,
    ),
    case(
        &[&["ZADD", B, "1", "a"]],
        A,
        &["ZMPOP", "2", A, B, "MIN"],
        false,
    ),
    case(
        &[&["GEOADD", A, "13.36", "38.11", "a"]],
        A,
        &[
            "GEOSEARCHSTORE",
            B,
            A,
            "FROMLONLAT",
            "13",
            "38",
            "BYRADIUS",
            "100",
            "km",
        ],
        false,
    ),
];

/// Runs `case` against the server on `port`: whether EXEC was aborted.
fn aborted(port: u16, case: &Case) -> bool {
    let url = format!("redis://127.0.0.1:{port}/");
    let client = redis::Client::open(url).expect("client");
    let mut writer = client.get_connection().expect("connect");
    let mut watcher = client.get_connection().expect("connect");
    let _: () = redis::cmd("FLUSHALL").query(&mut writer).expect("flushall");
    for cmd in case.setup {
        let _: redis::Value = q(&mut writer, cmd);
    }
    let _: () = redis::cmd("SELECT")
        .arg(case.watch_db)
        .query(&mut watcher)
        .expect("select");
    let _: () = redis::cmd("WATCH")
        .arg(case.watch)
        .query(&mut watcher)
        .expect("watch");
    let _: () = redis::cmd("MULTI").query(&mut watcher).expect("multi");
    let _: redis::Value = redis::cmd("PING").query(&mut watcher).expect("queue");
    let _: redis::Value = q(&mut writer, case.write);
    let exec: redis::Value = redis::cmd("EXEC").query(&mut watcher).expect("exec");
    exec == redis::Value::Nil
}

fn describe(case: &Case) -> String {
    format!(
        "setup {:?}, WATCH {} (db {}), then {:?}",
        case.setup, case.watch, case.watch_db, case.write
    )
}

#[test]
fn watch_is_aborted_only_by_writes_that_change_the_key() {
    let server = Server::start(2);
    let mut wrong = Vec::new();
    for c in CASES {
        if aborted(server.port, c) != c.aborts {
            wrong.push(format!("{}: expected aborted={}", describe(c), c.aborts));
        }
    }
    assert!(wrong.is_empty(), "Tessera:\n{}", wrong.join("\n"));
}

/// The expectations above are Redis 7.0's: checked against redis-server when it is
/// installed (CI installs it, so there a missing one fails).
#[test]
fn watch_expectations_match_redis() {
    let Some(reference) = ReferenceRedis::start() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "redis-server did not start, and CI is set: the comparison must run"
        );
        eprintln!("redis-server not found: expectations not checked against Redis");
        return;
    };
    let mut wrong = Vec::new();
    for c in CASES {
        if aborted(reference.port, c) != c.aborts {
            wrong.push(format!("{}: Redis aborted={}", describe(c), !c.aborts));
        }
    }
    assert!(
        wrong.is_empty(),
        "redis-server disagrees:\n{}",
        wrong.join("\n")
    );
}
