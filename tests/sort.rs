//! SORT and SORT_RO over TCP against a real 2-shard server: numeric and ALPHA order,
//! LIMIT, BY nosort / constant, BY and GET patterns whose keys live on the other shard,
//! STORE to a destination on either shard, errors, and SORT inside MULTI/EXEC.

mod common;
use common::*;

use redis::{Connection, RedisResult};

// "bar" lives on shard 0 and "foo" on shard 1; `{bar}x` shares bar's slot.
const SRC0: &str = "{bar}src";
const DST0: &str = "{bar}dst";
const DST1: &str = "{foo}dst";

fn sort(c: &mut Connection, args: &[&str]) -> RedisResult<Vec<Option<String>>> {
    redis::cmd("SORT").arg(args).query(c)
}

fn sorted(c: &mut Connection, args: &[&str]) -> Vec<String> {
    redis::cmd("SORT").arg(args).query(c).unwrap()
}

fn lrange(c: &mut Connection, key: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(c)
        .unwrap()
}

fn rpush(c: &mut Connection, key: &str, items: &[&str]) {
    let _: i64 = redis::cmd("RPUSH").arg(key).arg(items).query(c).unwrap();
}

fn err_of(r: RedisResult<Vec<Option<String>>>) -> String {
    let e = r.expect_err("expected an error");
    format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
        .trim()
        .to_string()
}

#[test]
fn numeric_alpha_desc_and_limit() {
    let s = Server::start(2);
    let mut c = s.client();
    rpush(&mut c, SRC0, &["3", "10", "1.5", "-2", "2"]);
    assert_eq!(sorted(&mut c, &[SRC0]), ["-2", "1.5", "2", "3", "10"]);
    assert_eq!(
        sorted(&mut c, &[SRC0, "DESC"]),
        ["10", "3", "2", "1.5", "-2"]
    );
    assert_eq!(
        sorted(&mut c, &[SRC0, "ALPHA"]),
        ["-2", "1.5", "10", "2", "3"]
    );
    assert_eq!(sorted(&mut c, &[SRC0, "LIMIT", "1", "2"]), ["1.5", "2"]);
    assert_eq!(sorted(&mut c, &[SRC0, "LIMIT", "-5", "2"]), ["-2", "1.5"]);
    assert_eq!(
        sorted(&mut c, &[SRC0, "LIMIT", "2", "-1"]),
        ["2", "3", "10"]
    );
    assert!(sorted(&mut c, &[SRC0, "LIMIT", "9", "2"]).is_empty());
    assert!(sorted(&mut c, &["{bar}missing"]).is_empty());
    // Equal weights fall back to comparing the elements.
    let _: i64 = redis::cmd("SADD")
        .arg("{foo}set")
        .arg(&["b", "a", "c"])
        .query(&mut c)
        .unwrap();
    assert_eq!(
        sorted(&mut c, &["{foo}set", "BY", "nokey_*"]),
        ["a", "b", "c"]
    );
    assert_eq!(
        sorted(&mut c, &["{foo}set", "BY", "nokey_*", "DESC"]),
        ["c", "b", "a"]
    );
}

#[test]
fn errors() {
    let s = Server::start(2);
    let mut c = s.client();
    rpush(&mut c, SRC0, &["1", "x"]);
    assert_eq!(
        err_of(sort(&mut c, &[SRC0])),
        "ERR One or more scores can't be converted into double"
    );
    assert_eq!(sorted(&mut c, &[SRC0, "ALPHA"]), ["1", "x"]);
    assert_eq!(err_of(sort(&mut c, &[SRC0, "FOO"])), "ERR syntax error");
    assert_eq!(
        err_of(sort(&mut c, &[SRC0, "LIMIT", "1"])),
        "ERR syntax error"
    );
    assert_eq!(
        err_of(sort(&mut c, &[SRC0, "LIMIT", "a", "1"])),
        "ERR value is not an integer or out of range"
    );
    let _: () = redis::cmd("SET")
        .arg("{foo}str")
        .arg("v")
        .query(&mut c)
        .unwrap();
    assert!(err_of(sort(&mut c, &["{foo}str"])).starts_with("WRONGTYPE"));
    let r: RedisResult<Vec<String>> = redis::cmd("SORT_RO")
        .arg(SRC0)
        .arg("STORE")
        .arg(DST0)
        .query(&mut c);
    assert!(r.unwrap_err().to_string().contains("syntax error"));
}

#[test]
fn by_and_get_patterns_on_other_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    rpush(&mut c, SRC0, &["a", "b", "c", "d"]);
    // Weights all on shard 1, and plain keys spread over both shards.
    for (e, w) in [("a", "4"), ("b", "1"), ("c", "3"), ("d", "2")] {
        let _: () = redis::cmd("SET")
            .arg(format!("{{foo}}w_{e}"))
            .arg(w)
            .query(&mut c)
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg(format!("w_{e}"))
            .arg(w)
            .query(&mut c)
            .unwrap();
        let _: i64 = redis::cmd("HSET")
            .arg(format!("obj_{e}"))
            .arg("weight")
            .arg(w)
            .arg("name")
            .arg(format!("N{e}"))
            .query(&mut c)
            .unwrap();
    }
    let want = ["b", "d", "c", "a"];
    assert_eq!(sorted(&mut c, &[SRC0, "BY", "{foo}w_*"]), want);
    assert_eq!(sorted(&mut c, &[SRC0, "BY", "w_*"]), want);
    assert_eq!(sorted(&mut c, &[SRC0, "BY", "obj_*->weight"]), want);
    assert_eq!(
        sorted(&mut c, &[SRC0, "BY", "w_*", "DESC", "LIMIT", "0", "2"]),
        ["a", "c"]
    );
    assert_eq!(
        sort(
            &mut c,
            &[
                SRC0,
                "BY",
                "w_*",
                "GET",
                "#",
                "GET",
                "obj_*->name",
                "GET",
                "nokey_*"
            ]
        )
        .unwrap(),
        [
            Some("b".into()),
            Some("Nb".into()),
            None,
            Some("d".into()),
            Some("Nd".into()),
            None,
            Some("c".into()),
            Some("Nc".into()),
            None,
            Some("a".into()),
            Some("Na".into()),
            None,
        ]
    );
    // GET # twice, and a GET pattern without '*' never finds anything.
    assert_eq!(
        sort(
            &mut c,
            &[SRC0, "BY", "w_*", "LIMIT", "0", "1", "GET", "#", "GET", "#", "GET", "w_a"]
        )
        .unwrap(),
        [Some("b".into()), Some("b".into()), None]
    );
    // A hash field pattern against a string key, and a plain pattern against a hash.
    assert_eq!(
        sort(
            &mut c,
            &[SRC0, "ALPHA", "LIMIT", "0", "1", "GET", "w_*->x", "GET", "obj_*"]
        )
        .unwrap(),
        [None, None]
    );
    let _: () = redis::cmd("SET")
        .arg("w_b")
        .arg("nan-ish")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        err_of(sort(&mut c, &[SRC0, "BY", "w_*"])),
        "ERR One or more scores can't be converted into double"
    );
}

#[test]
fn nosort_keeps_natural_order() {
    let s = Server::start(2);
    let mut c = s.client();
    rpush(&mut c, SRC0, &["5", "3", "4", "1", "2"]);
    assert_eq!(
        sorted(&mut c, &[SRC0, "BY", "nosort"]),
        ["5", "3", "4", "1", "2"]
    );
    assert_eq!(
        sorted(&mut c, &[SRC0, "BY", "nosort", "DESC", "LIMIT", "1", "2"]),
        ["1", "4"]
    );
    let _: i64 = redis::cmd("ZADD")
        .arg("{foo}z")
        .arg(&["1", "a", "5", "b", "2", "c", "10", "d", "3", "e"])
        .query(&mut c)
        .unwrap();
    assert_eq!(
        sorted(&mut c, &["{foo}z", "BY", "nosort"]),
        ["a", "c", "e", "b", "d"]
    );
    assert_eq!(
        sorted(
            &mut c,
            &["{foo}z", "BY", "nosort", "DESC", "LIMIT", "0", "2"]
        ),
        ["d", "b"]
    );
    assert_eq!(
        sorted(&mut c, &["{foo}z", "ALPHA", "DESC"]),
        ["e", "d", "c", "b", "a"]
    );
}

#[test]
fn store_on_either_shard() {
    let s = Server::start(2);
    let mut c = s.client();
    rpush(&mut c, SRC0, &["3", "1", "2"]);
    for dst in [DST0, DST1] {
        let n: i64 = redis::cmd("SORT")
            .arg(SRC0)
            .arg("STORE")
            .arg(dst)
            .query(&mut c)
            .unwrap();
        assert_eq!(n, 3);
        assert_eq!(lrange(&mut c, dst), ["1", "2", "3"]);
        // Missing GET values are stored as empty strings.
        let n: i64 = redis::cmd("SORT")
            .arg(SRC0)
            .arg(&["GET", "#", "GET", "nokey_*", "STORE", dst])
            .query(&mut c)
            .unwrap();
        assert_eq!(n, 6);
        assert_eq!(lrange(&mut c, dst), ["1", "", "2", "", "3", ""]);
        // An empty result deletes the destination.
        let n: i64 = redis::cmd("SORT")
            .arg(SRC0)
            .arg(&["LIMIT", "10", "1", "STORE", dst])
            .query(&mut c)
            .unwrap();
        assert_eq!(n, 0);
        let exists: i64 = redis::cmd("EXISTS").arg(dst).query(&mut c).unwrap();
        assert_eq!(exists, 0);
    }
    // A set sorted BY a constant into STORE is ordered alphabetically.
    let _: i64 = redis::cmd("SADD")
        .arg("{foo}set")
        .arg(&["b", "aa", "a", "c"])
        .query(&mut c)
        .unwrap();
    let n: i64 = redis::cmd("SORT")
        .arg(&["{foo}set", "BY", "_", "STORE", DST0])
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 4);
    assert_eq!(lrange(&mut c, DST0), ["a", "aa", "b", "c"]);
    // Storing over the source itself.
    let n: i64 = redis::cmd("SORT")
        .arg(&[SRC0, "DESC", "STORE", SRC0])
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 3);
    assert_eq!(lrange(&mut c, SRC0), ["3", "2", "1"]);
}

#[test]
fn sort_ro_getkeys_and_multi() {
    let s = Server::start(2);
    let mut c = s.client();
    rpush(&mut c, SRC0, &["2", "1"]);
    let v: Vec<String> = redis::cmd("SORT_RO").arg(SRC0).query(&mut c).unwrap();
    assert_eq!(v, ["1", "2"]);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg(&[
            "GETKEYS", "SORT", "abc", "STORE", "x", "LIMIT", "0", "1", "STORE", "def",
        ])
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["abc", "def"]);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg(&["GETKEYS", "SORT", "abc", "GET", "store", "BY", "x"])
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["abc"]);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg(&["GETKEYS", "SORT_RO", "abc"])
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["abc"]);
    let (a, n): (Vec<String>, i64) = redis::pipe()
        .atomic()
        .cmd("SORT")
        .arg(SRC0)
        .arg("DESC")
        .cmd("SORT")
        .arg(&[SRC0, "STORE", DST1])
        .query(&mut c)
        .unwrap();
    assert_eq!(a, ["2", "1"]);
    assert_eq!(n, 2);
    assert_eq!(lrange(&mut c, DST1), ["1", "2"]);
}
