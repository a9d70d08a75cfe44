//! Black-box tests of the string commands against a 2-shard server, checked against
//! Redis 7.0's replies and error texts.

mod common;
#[path = "common/resp.rs"]
mod resp;

use common::*;
use resp::*;
use tessera::slot::SlotTable;

const INVALID_SET: &str = "ERR invalid expire time in 'set' command";
const NOT_INT: &str = "ERR value is not an integer or out of range";
const NOT_FLOAT: &str = "ERR value is not a valid float";
const SYNTAX: &str = "ERR syntax error";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const TOO_BIG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

fn shard(key: &str) -> usize {
    SlotTable::new(2).shard_of_key(key.as_bytes())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn setup() -> (Server, Raw) {
    let s = Server::start(2);
    let c = Raw::connect(s.port);
    (s, c)
}

#[test]
fn shard_keys_are_on_different_shards() {
    assert_ne!(shard(KEY_SHARD0), shard(KEY_SHARD1));
    assert_eq!(shard("{bar}x"), shard(KEY_SHARD0));
    assert_eq!(shard("{foo}x"), shard(KEY_SHARD1));
}

#[test]
fn set_get_basics_on_both_shards() {
    let (_s, mut c) = setup();
    for k in [KEY_SHARD0, KEY_SHARD1] {
        assert_eq!(c.cmd(&[b"SET", k.as_bytes(), b"value"]), ok());
        assert_eq!(c.cmd(&[b"GET", k.as_bytes()]), b("value"));
        assert_eq!(c.cmd(&[b"SET", k.as_bytes(), b""]), ok());
        assert_eq!(c.c_raw(&format!("GET {k}")), b"$0\r\n\r\n");
    }
    assert_eq!(c.c_raw("GET missing"), b"$-1\r\n");
    c.c("SADD aset m");
    assert_eq!(c.c("GET aset"), e(WRONGTYPE));
}

#[test]
fn set_nx_xx_get() {
    let (_s, mut c) = setup();
    assert_eq!(c.c("SET k 1 NX"), ok());
    assert_eq!(c.c_raw("SET k 2 NX"), b"$-1\r\n");
    assert_eq!(c.c("GET k"), b("1"));
    assert_eq!(c.c_raw("SET nokey 1 XX"), b"$-1\r\n");
    assert_eq!(c.c("EXISTS nokey"), i(0));
    assert_eq!(c.c("SET k 2 XX"), ok());
    assert_eq!(c.c("GET k"), b("2"));
    // GET returns the old value (or nil), combined with NX / XX as in Redis 7.0.
    assert_eq!(c.c("SET k 3 GET"), b("2"));
    assert_eq!(c.c("SET g 1 GET"), R::Nil);
    assert_eq!(c.c("GET g"), b("1"));
    assert_eq!(c.c("SET k 4 GET XX"), b("3"));
    assert_eq!(c.c("SET nx2 v GET XX"), R::Nil);
    assert_eq!(c.c("EXISTS nx2"), i(0));
    assert_eq!(c.c("SET nx3 v GET NX"), R::Nil);
    assert_eq!(c.c("GET nx3"), b("v"));
    assert_eq!(c.c("SET nx3 w GET NX"), b("v"));
    assert_eq!(c.c("GET nx3"), b("v"));
    // GET against another type: WRONGTYPE and nothing written.
    c.c("SADD aset m");
    assert_eq!(c.c("SET aset v GET"), e(WRONGTYPE));
    assert_eq!(c.c("TYPE aset"), st("set"));
    // Without GET the other type is simply overwritten.
    assert_eq!(c.c("SET aset v"), ok());
    assert_eq!(c.c("TYPE aset"), st("string"));
}

#[test]
fn set_expire_options() {
    let (_s, mut c) = setup();
    assert_eq!(c.c("SET k v EX 100"), ok());
    assert!((99..=100).contains(&c.c("TTL k").int()));
    assert_eq!(c.c("SET k v PX 100000"), ok());
    assert!((99_000..=100_000).contains(&c.c("PTTL k").int()));
    let at = now_ms() / 1000 + 100;
    assert_eq!(c.c(&format!("SET k v EXAT {at}")), ok());
    assert_eq!(c.c("EXPIRETIME k"), i(at as i64));
    let pat = now_ms() + 100_000;
    assert_eq!(c.c(&format!("SET k v PXAT {pat}")), ok());
    assert_eq!(c.c("PEXPIRETIME k"), i(pat as i64));
    // KEEPTTL keeps the deadline; a plain SET drops it.
    assert_eq!(c.c("SET k v2 KEEPTTL"), ok());
    assert_eq!(c.c("PEXPIRETIME k"), i(pat as i64));
    assert_eq!(c.c("SET k v3"), ok());
    assert_eq!(c.c("TTL k"), i(-1));
    // Several options at once; lower case works too.
    assert_eq!(c.c("set k v xx px 10000 get"), b("v3"));
    assert!((9..=10).contains(&c.c("TTL k").int()));
    // Repeating the same expire option is accepted (the last one wins).
    assert_eq!(c.c("SET k v EX 10 EX 200"), ok());
    assert!((199..=200).contains(&c.c("TTL k").int()));
    assert_eq!(c.c("SET k v NX NX"), R::Nil);
    assert_eq!(c.c("SET k v GET GET"), b("v"));
    assert_eq!(c.c("SET k v KEEPTTL KEEPTTL"), ok());
    // A deadline already in the past: OK, and the key is gone.
    assert_eq!(c.c("SET past v EXAT 1"), ok());
    assert_eq!(c.c("EXISTS past"), i(0));
    assert_eq!(c.c("SET past v PXAT 1"), ok());
    assert_eq!(c.c("GET past"), R::Nil);
}

#[test]
fn set_option_errors() {
    let (_s, mut c) = setup();
    for bad in [
        "SET k v NX XX",
        "SET k v XX NX",
        "SET k v EX 10 PX 100",
        "SET k v PX 10 EX 100",
        "SET k v EX 10 EXAT 100",
        "SET k v PXAT 10 EXAT 100",
        "SET k v KEEPTTL EX 10",
        "SET k v EX 10 KEEPTTL",
        "SET k v PERSIST",
        "SET k v EX",
        "SET k v PX",
        "SET k v BADOPT",
        // Options are all checked before the expire value.
        "SET k v EX 0 BADOPT",
        "SET k v EX abc NX XX",
    ] {
        assert_eq!(c.c(bad), e(SYNTAX), "{bad}");
    }
    for bad in [
        "SET k v EX abc",
        "SET k v PX 1.5",
        "SET k v EXAT 9223372036854775808",
        "SET k v PX 01",
    ] {
        assert_eq!(c.c(bad), e(NOT_INT), "{bad}");
    }
    for bad in [
        "SET k v EX 0",
        "SET k v EX -1",
        "SET k v PX 0",
        "SET k v PX -100",
        "SET k v EXAT 0",
        "SET k v PXAT -1",
        "SET k v EX 9223372036854775807",
        "SET k v EX 9223372036854776",
        "SET k v PX 9223372036854775807",
    ] {
        assert_eq!(c.c(bad), e(INVALID_SET), "{bad}");
    }
    assert_eq!(c.c("EXISTS k"), i(0));
    assert_eq!(
        c.c("SET k"),
        e("ERR wrong number of arguments for 'set' command")
    );
}

#[test]
fn setnx_setex_psetex() {
    let (_s, mut c) = setup();
    assert_eq!(c.c("SETNX k a"), i(1));
    assert_eq!(c.c("SETNX k b"), i(0));
    assert_eq!(c.c("GET k"), b("a"));
    // A volatile key that has not expired blocks SETNX.
    c.c("EXPIRE k 100");
    assert_eq!(c.c("SETNX k c"), i(0));
    c.c("SADD s m");
    assert_eq!(c.c("SETNX s x"), i(0));

    assert_eq!(c.c("SETEX k 100 v"), ok());
    assert!((99..=100).contains(&c.c("TTL k").int()));
    assert_eq!(c.c("GET k"), b("v"));
    assert_eq!(c.c("PSETEX k 100000 w"), ok());
    assert!((99_000..=100_000).contains(&c.c("PTTL k").int()));
    assert_eq!(
        c.c("SETEX k 0 v"),
        e("ERR invalid expire time in 'setex' command")
    );
    assert_eq!(
        c.c("SETEX k -10 v"),
        e("ERR invalid expire time in 'setex' command")
    );
    assert_eq!(
        c.c("PSETEX k 0 v"),
        e("ERR invalid expire time in 'psetex' command")
    );
    assert_eq!(
        c.c("SETEX k 9223372036854775807 v"),
        e("ERR invalid expire time in 'setex' command")
    );
    assert_eq!(c.c("SETEX k abc v"), e(NOT_INT));
    assert_eq!(c.c("GET k"), b("w"));
    assert_eq!(
        c.c("SETEX k 10"),
        e("ERR wrong number of arguments for 'setex' command")
    );
    // SETEX replaces another type.
    assert_eq!(c.c("SETEX s 10 v"), ok());
    assert_eq!(c.c("TYPE s"), st("string"));
}

#[test]
fn getex_options() {
    let (_s, mut c) = setup();
    assert_eq!(c.c("GETEX missing"), R::Nil);
    assert_eq!(c.c("GETEX missing EX 10"), R::Nil);
    c.c("SET k v");
    assert_eq!(c.c("GETEX k"), b("v"));
    assert_eq!(c.c("TTL k"), i(-1));
    assert_eq!(c.c("GETEX k EX 100"), b("v"));
    assert!((99..=100).contains(&c.c("TTL k").int()));
    assert_eq!(c.c("GETEX k PX 50000"), b("v"));
    assert!((49_000..=50_000).contains(&c.c("PTTL k").int()));
    let at = now_ms() / 1000 + 200;
    assert_eq!(c.c(&format!("GETEX k EXAT {at}")), b("v"));
    assert_eq!(c.c("EXPIRETIME k"), i(at as i64));
    let pat = now_ms() + 300_000;
    assert_eq!(c.c(&format!("GETEX k PXAT {pat}")), b("v"));
    assert_eq!(c.c("PEXPIRETIME k"), i(pat as i64));
    // GETEX without options leaves the TTL alone; PERSIST removes it.
    assert_eq!(c.c("GETEX k"), b("v"));
    assert_eq!(c.c("PEXPIRETIME k"), i(pat as i64));
    assert_eq!(c.c("GETEX k PERSIST"), b("v"));
    assert_eq!(c.c("TTL k"), i(-1));
    // A deadline in the past returns the value and deletes the key.
    assert_eq!(c.c("GETEX k PXAT 1"), b("v"));
    assert_eq!(c.c("EXISTS k"), i(0));

    c.c("SET k v");
    for bad in [
        "GETEX k EX 10 PERSIST",
        "GETEX k PERSIST EX 10",
        "GETEX k EX 10 PX 10",
        "GETEX k KEEPTTL",
        "GETEX k GET",
        "GETEX k NX",
        "GETEX k EX",
        "GETEX k BADOPT",
        "GETEX k EX abc PERSIST",
    ] {
        assert_eq!(c.c(bad), e(SYNTAX), "{bad}");
    }
    assert_eq!(c.c("GETEX k EX abc"), e(NOT_INT));
    assert_eq!(
        c.c("GETEX k EX 0"),
        e("ERR invalid expire time in 'getex' command")
    );
    assert_eq!(
        c.c("GETEX k PX -1"),
        e("ERR invalid expire time in 'getex' command")
    );
    assert_eq!(
        c.c("GETEX k EX 9223372036854775807"),
        e("ERR invalid expire time in 'getex' command")
    );
    assert_eq!(c.c("TTL k"), i(-1));
    assert_eq!(
        c.c("GETEX"),
        e("ERR wrong number of arguments for 'getex' command")
    );
    c.c("SADD s m");
    assert_eq!(c.c("GETEX s EX 10"), e(WRONGTYPE));
    assert_eq!(c.c("TTL s"), i(-1));
}

#[test]
fn getdel_getset() {
    let (_s, mut c) = setup();
    c.c("SET k v EX 100");
    assert_eq!(c.c("GETDEL k"), b("v"));
    assert_eq!(c.c("GETDEL k"), R::Nil);
    assert_eq!(c.c("EXISTS k"), i(0));
    c.c("SADD s m");
    assert_eq!(c.c("GETDEL s"), e(WRONGTYPE));
    assert_eq!(c.c("EXISTS s"), i(1));

    assert_eq!(c.c("GETSET k a"), R::Nil);
    c.c("EXPIRE k 100");
    assert_eq!(c.c("GETSET k b"), b("a"));
    // GETSET is a SET: the TTL is gone.
    assert_eq!(c.c("TTL k"), i(-1));
    assert_eq!(c.c("GET k"), b("b"));
    assert_eq!(c.c("GETSET s x"), e(WRONGTYPE));
    // Integer-encoded values come back as their text.
    c.c("SET n 12345");
    assert_eq!(c.c("GETSET n 1"), b("12345"));
}

#[test]
fn append_and_strlen() {
    let (_s, mut c) = setup();
    assert_eq!(c.c("APPEND k hello"), i(5));
    assert_eq!(c.c("APPEND k _world"), i(11));
    assert_eq!(c.c("GET k"), b("hello_world"));
    assert_eq!(c.c("STRLEN k"), i(11));
    assert_eq!(c.c("STRLEN missing"), i(0));
    c.c("SET n -555");
    assert_eq!(c.c("STRLEN n"), i(4));
    assert_eq!(c.c("APPEND n 1"), i(5));
    assert_eq!(c.c("GET n"), b("-5551"));
    // APPEND keeps the TTL.
    c.c("SET t a EX 100");
    c.c("APPEND t b");
    assert!(c.c("TTL t").int() > 0);
    assert_eq!(c.cmd(&[b"APPEND", b"bin", b"a\r\n\x00b"]), i(5));
    assert_eq!(c.c("STRLEN bin"), i(5));
    c.c("SADD s m");
    assert_eq!(c.c("APPEND s x"), e(WRONGTYPE));
    assert_eq!(c.c("STRLEN s"), e(WRONGTYPE));
}

#[test]
fn incr_decr_family() {
    let (_s, mut c) = setup();
    assert_eq!(c.c("INCR novar"), i(1));
    assert_eq!(c.c("GET novar"), b("1"));
    assert_eq!(c.c("INCR novar"), i(2));
    assert_eq!(c.c("DECR novar"), i(1));
    assert_eq!(c.c("DECR other"), i(-1));
    c.c("SET novar 17179869184");
    assert_eq!(c.c("INCR novar"), i(17179869185));
    assert_eq!(c.c("INCRBY novar 17179869184"), i(34359738369));
    c.c("SET novar 17179869184");
    assert_eq!(c.c("DECRBY novar 17179869185"), i(-1));
    assert_eq!(c.c("INCRBY novar -5"), i(-6));
    assert_eq!(c.c("DECRBY novar -10"), i(4));

    // Overflow in either direction.
    c.c("SET big 9223372036854775807");
    assert_eq!(
        c.c("INCR big"),
        e("ERR increment or decrement would overflow")
    );
    assert_eq!(
        c.c("INCRBY big 1"),
        e("ERR increment or decrement would overflow")
    );
    assert_eq!(c.c("GET big"), b("9223372036854775807"));
    c.c("SET small -9223372036854775808");
    assert_eq!(
        c.c("DECR small"),
        e("ERR increment or decrement would overflow")
    );
    assert_eq!(
        c.c("DECRBY small 1"),
        e("ERR increment or decrement would overflow")
    );
    c.c("SET x 0");
    assert_eq!(
        c.c("DECRBY x -9223372036854775808"),
        e("ERR decrement would overflow")
    );

    // Non-integer values and increments.
    for v in [
        "    11",
        "11    ",
        " 11 ",
        "1.5",
        "abc",
        "9223372036854775808",
        "",
    ] {
        c.cmd(&[b"SET", b"s", v.as_bytes()]);
        assert_eq!(c.c("INCR s"), e(NOT_INT), "{v:?}");
        assert_eq!(c.c("DECRBY s 1"), e(NOT_INT), "{v:?}");
    }
    assert_eq!(c.c("INCRBY x abc"), e(NOT_INT));
    assert_eq!(c.c("INCRBY x 1.0"), e(NOT_INT));
    assert_eq!(c.c("DECRBY x 9223372036854775808"), e(NOT_INT));
    c.c("SADD set m");
    assert_eq!(c.c("INCR set"), e(WRONGTYPE));
    assert_eq!(c.c("DECRBY set 1"), e(WRONGTYPE));

    // The TTL survives an increment.
    c.c("SET t 10 EX 100");
    assert_eq!(c.c("INCR t"), i(11));
    assert!(c.c("TTL t").int() > 0);
    assert_eq!(
        c.c("INCR"),
        e("ERR wrong number of arguments for 'incr' command")
    );
}

#[test]
fn incrbyfloat_formatting_and_errors() {
    let (_s, mut c) = setup();
    assert_eq!(c.c_raw("INCRBYFLOAT novar 1"), b"$1\r\n1\r\n");
    assert_eq!(c.c("INCRBYFLOAT novar 0.25"), b("1.25"));
    assert_eq!(c.c("GET novar"), b("1.25"));
    // The examples of the INCRBYFLOAT documentation.
    c.c("SET mykey 10.50");
    assert_eq!(c.c("INCRBYFLOAT mykey 0.1"), b("10.6"));
    assert_eq!(c.c("INCRBYFLOAT mykey -5"), b("5.6"));
    c.c("SET mykey 5.0e3");
    assert_eq!(c.c("INCRBYFLOAT mykey 2.0e2"), b("5200"));
    c.c("SET f 10");
    assert_eq!(c.c("INCRBYFLOAT f 0.5"), b("10.5"));
    c.c("SET f 1.5");
    assert_eq!(c.c("INCRBYFLOAT f 1.5"), b("3"));
    c.c("SET f 17179869184");
    assert_eq!(c.c("INCRBYFLOAT f 1.5"), b("17179869185.5"));
    c.c("SET f 17179869184");
    assert_eq!(c.c("INCRBYFLOAT f 17179869184"), b("34359738368"));
    c.c("SET f 5000");
    assert_eq!(c.c("INCRBYFLOAT f 0"), b("5000"));
    // No negative zero.
    c.c("DEL z");
    let third = (1.0f64 / 41.0).to_string();
    c.cmd(&[b"INCRBYFLOAT", b"z", third.as_bytes()]);
    c.cmd(&[b"INCRBYFLOAT", b"z", format!("-{third}").as_bytes()]);
    assert_eq!(c.c("GET z"), b("0"));

    for v in ["    11", "11    ", " 11 ", "abc", "1.5.5"] {
        c.cmd(&[b"SET", b"s", v.as_bytes()]);
        assert_eq!(c.c("INCRBYFLOAT s 1.0"), e(NOT_FLOAT), "{v:?}");
    }
    // A NUL inside the number makes it invalid.
    c.c("SET s 1");
    c.c("SETRANGE s 2 2");
    assert_eq!(c.c("INCRBYFLOAT s 1"), e(NOT_FLOAT));
    assert_eq!(c.c("INCRBYFLOAT f abc"), e(NOT_FLOAT));
    assert_eq!(c.c("INCRBYFLOAT f nan"), e(NOT_FLOAT));
    c.c("SET f 0");
    assert_eq!(
        c.c("INCRBYFLOAT f +inf"),
        e("ERR increment would produce NaN or Infinity")
    );
    assert_eq!(
        c.c("INCRBYFLOAT f -inf"),
        e("ERR increment would produce NaN or Infinity")
    );
    assert_eq!(c.c("GET f"), b("0"));
    c.c("SADD set m");
    assert_eq!(c.c("INCRBYFLOAT set 1"), e(WRONGTYPE));
    // The TTL survives.
    c.c("SET t 1 EX 100");
    c.c("INCRBYFLOAT t 1.5");
    assert!(c.c("TTL t").int() > 0);
}

/// Redis adds in `long double` (80-bit on x86-64) and prints with `%.17Lf`, so
/// 1 + -1.1 is "-0.1"; in f64 the sum is -0.10000000000000009.
#[test]
fn incrbyfloat_long_double_precision() {
    let (_s, mut c) = setup();
    c.c("SET f 1");
    assert_eq!(c.c("INCRBYFLOAT f -1.1"), b("-0.1"));
    c.c("SET f 0.1");
    assert_eq!(c.c("INCRBYFLOAT f 0.2"), b("0.3"));
}

#[test]
fn getrange_edge_cases() {
    let (_s, mut c) = setup();
    assert_eq!(c.c_raw("GETRANGE missing 0 -1"), b"$0\r\n\r\n");
    c.cmd(&[b"SET", b"k", b"Hello World"]);
    for (range, want) in [
        ("0 3", "Hell"),
        ("0 -1", "Hello World"),
        ("-4 -1", "orld"),
        ("5 3", ""),
        ("5 5000", " World"),
        ("-5000 10000", "Hello World"),
        ("-1 -5", ""),
        ("0 -100", "H"),
        ("20 30", ""),
        ("0 4294967297", "Hello World"),
        ("-1 -1", "d"),
    ] {
        assert_eq!(c.c(&format!("GETRANGE k {range}")), b(want), "{range}");
        assert_eq!(c.c(&format!("SUBSTR k {range}")), b(want), "{range}");
    }
    c.c("SET n 1234");
    for (range, want) in [
        ("0 2", "123"),
        ("0 -1", "1234"),
        ("-3 -1", "234"),
        ("5 3", ""),
        ("3 5000", "4"),
        ("-5000 10000", "1234"),
    ] {
        assert_eq!(c.c(&format!("GETRANGE n {range}")), b(want), "{range}");
    }
    c.cmd(&[b"SET", b"empty", b""]);
    assert_eq!(c.c("GETRANGE empty 0 -1"), b(""));
    assert_eq!(c.c("GETRANGE k a 1"), e(NOT_INT));
    assert_eq!(c.c("GETRANGE k 0 1.5"), e(NOT_INT));
    c.c("SADD s m");
    assert_eq!(c.c("GETRANGE s 0 -1"), e(WRONGTYPE));
}

#[test]
fn setrange_edge_cases() {
    let (_s, mut c) = setup();
    // Missing key: zero-padded up to the offset.
    assert_eq!(c.c("SETRANGE k 5 ab"), i(7));
    assert_eq!(c.c("GET k"), R::Bulk(b"\0\0\0\0\0ab".to_vec()));
    // Empty value on a missing key: 0 and no key.
    assert_eq!(c.c("SETRANGE none 10 \"\""), i(12));
    c.c("DEL none");
    assert_eq!(c.cmd(&[b"SETRANGE", b"none", b"10", b""]), i(0));
    assert_eq!(c.c("EXISTS none"), i(0));
    // Existing key: overwrite in place, extend, or report the length for "".
    c.c("SET k Hello");
    assert_eq!(c.c("SETRANGE k 1 a"), i(5));
    assert_eq!(c.c("GET k"), b("Hallo"));
    assert_eq!(c.c("SETRANGE k 4 o_World"), i(11));
    assert_eq!(c.c("GET k"), b("Hallo_World"));
    assert_eq!(c.c("SETRANGE k 13 !"), i(14));
    assert_eq!(c.c("GET k"), R::Bulk(b"Hallo_World\0\0!".to_vec()));
    assert_eq!(c.cmd(&[b"SETRANGE", b"k", b"100", b""]), i(14));
    // Integer-encoded values are edited as text.
    c.c("SET n 1234");
    assert_eq!(c.c("SETRANGE n 1 9"), i(4));
    assert_eq!(c.c("GET n"), b("1934"));
    assert_eq!(c.c("INCR n"), i(1935));
    // TTL kept.
    c.c("SET t abc EX 100");
    c.c("SETRANGE t 0 x");
    assert!(c.c("TTL t").int() > 0);
    // Errors.
    assert_eq!(c.c("SETRANGE k -1 x"), e("ERR offset is out of range"));
    assert_eq!(c.c("SETRANGE k a x"), e(NOT_INT));
    assert_eq!(c.c("SETRANGE k 9223372036854775807 x"), e(TOO_BIG));
    assert_eq!(c.c("SETRANGE k 2147483647 x"), e(TOO_BIG));
    assert_eq!(c.c("SETRANGE new 536870912 x"), e(TOO_BIG));
    assert_eq!(c.c("EXISTS new"), i(0));
    c.c("SADD s m");
    assert_eq!(c.c("SETRANGE s 0 x"), e(WRONGTYPE));
    // The limit follows proto-max-bulk-len (its minimum is 1 MiB).
    assert_eq!(c.c("CONFIG SET proto-max-bulk-len 1048576"), ok());
    assert_eq!(c.c("SETRANGE lim 1048576 x"), e(TOO_BIG));
    assert_eq!(c.c("SETRANGE lim 1048575 x"), i(1048576));
    assert_eq!(c.c("APPEND lim x"), e(TOO_BIG));
    assert_eq!(c.c("STRLEN lim"), i(1048576));
}

#[test]
fn lcs_matches_redis_docs() {
    let (_s, mut c) = setup();
    assert_eq!(c.c("MSET {t}key1 ohmytext {t}key2 mynewtext"), ok());
    check_lcs_docs(&mut c, "{t}key1", "{t}key2");
    // The same across shards.
    let (k1, k2) = ("{bar}1", "{foo}2");
    assert_ne!(shard(k1), shard(k2));
    assert_eq!(c.c(&format!("MSET {k1} ohmytext {k2} mynewtext")), ok());
    check_lcs_docs(&mut c, k1, k2);
}

fn range(a: i64, z: i64) -> R {
    arr(vec![i(a), i(z)])
}

fn check_lcs_docs(c: &mut Raw, k1: &str, k2: &str) {
    assert_eq!(c.c(&format!("LCS {k1} {k2}")), b("mytext"));
    assert_eq!(c.c(&format!("LCS {k1} {k2} LEN")), i(6));
    let all = arr(vec![
        b("matches"),
        arr(vec![
            arr(vec![range(4, 7), range(5, 8)]),
            arr(vec![range(2, 3), range(0, 1)]),
        ]),
        b("len"),
        i(6),
    ]);
    assert_eq!(c.c(&format!("LCS {k1} {k2} IDX")), all);
    let min4 = arr(vec![
        b("matches"),
        arr(vec![arr(vec![range(4, 7), range(5, 8)])]),
        b("len"),
        i(6),
    ]);
    assert_eq!(c.c(&format!("LCS {k1} {k2} IDX MINMATCHLEN 4")), min4);
    let with_len = arr(vec![
        b("matches"),
        arr(vec![arr(vec![range(4, 7), range(5, 8), i(4)])]),
        b("len"),
        i(6),
    ]);
    assert_eq!(
        c.c(&format!("LCS {k1} {k2} IDX MINMATCHLEN 4 WITHMATCHLEN")),
        with_len
    );
    let all_len = arr(vec![
        b("matches"),
        arr(vec![
            arr(vec![range(4, 7), range(5, 8), i(4)]),
            arr(vec![range(2, 3), range(0, 1), i(2)]),
        ]),
        b("len"),
        i(6),
    ]);
    assert_eq!(c.c(&format!("LCS {k1} {k2} WITHMATCHLEN IDX")), all_len);
    // A negative MINMATCHLEN means no minimum.
    assert_eq!(c.c(&format!("LCS {k1} {k2} IDX MINMATCHLEN -1")), all);
}

#[test]
fn lcs_rna_and_errors() {
    let (_s, mut c) = setup();
    let rna1 = "CACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTTCGTCCGGGTGTG";
    let rna2 = "ATTAAAGGTTTATACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTT";
    let lcs = &rna2[13..];
    c.cmd(&[b"SET", b"v1{t}", rna1.as_bytes()]);
    c.cmd(&[b"SET", b"v2{t}", rna2.as_bytes()]);
    assert_eq!(c.c("LCS v1{t} v2{t}"), b(lcs));
    assert_eq!(c.c("LCS v1{t} v2{t} LEN"), i(lcs.len() as i64));
    let m = |a: (i64, i64), b2: (i64, i64), len: Option<i64>| {
        let mut v = vec![range(a.0, a.1), range(b2.0, b2.1)];
        v.extend(len.map(i));
        arr(v)
    };
    let idx = c.c("LCS v1{t} v2{t} IDX WITHMATCHLEN");
    let want = arr(vec![
        m((238, 238), (239, 239), Some(1)),
        m((236, 236), (238, 238), Some(1)),
        m((229, 230), (236, 237), Some(2)),
        m((224, 224), (235, 235), Some(1)),
        m((1, 222), (13, 234), Some(222)),
    ]);
    assert_eq!(idx.items()[1], want);
    let min5 = c.c("LCS v1{t} v2{t} IDX WITHMATCHLEN MINMATCHLEN 5");
    assert_eq!(
        min5.items()[1],
        arr(vec![m((1, 222), (13, 234), Some(222))])
    );

    // Missing keys are empty strings.
    assert_eq!(c.c("LCS nokey1{t} nokey2{t}"), b(""));
    assert_eq!(c.c("LCS v1{t} nokey{t} LEN"), i(0));
    assert_eq!(
        c.c("LCS v1{t} v2{t} LEN IDX"),
        e("ERR If you want both the length and indexes, please just use IDX.")
    );
    assert_eq!(c.c("LCS v1{t} v2{t} BADOPT"), e(SYNTAX));
    assert_eq!(c.c("LCS v1{t} v2{t} IDX MINMATCHLEN"), e(SYNTAX));
    assert_eq!(c.c("LCS v1{t} v2{t} IDX MINMATCHLEN x"), e(NOT_INT));
    c.c("SADD s{t} m");
    let type_err = e("ERR The specified keys must contain string values");
    assert_eq!(c.c("LCS v1{t} s{t}"), type_err);
    assert_eq!(c.c("LCS s{t} v1{t}"), type_err);
    // The type check comes before option parsing, as in Redis.
    assert_eq!(c.c("LCS s{t} v1{t} BADOPT"), type_err);
    // Across shards too.
    c.c("SADD {foo}s m");
    c.c("SET {bar}v x");
    assert_eq!(c.c("LCS {bar}v {foo}s"), type_err);
    assert_eq!(c.c("LCS {bar}v {foo}s BADOPT"), type_err);
    assert_eq!(
        c.c("LCS {bar}v {foo}missing LEN IDX"),
        e("ERR If you want both the length and indexes, please just use IDX.")
    );
}

#[test]
fn mget_mset_msetnx_across_shards() {
    let s = Server::start(2);
    let mut c = Raw::connect(s.port);
    let keys = ["{bar}a", "{foo}b", "{bar}c", "{foo}d"];
    assert_ne!(shard(keys[0]), shard(keys[1]));
    assert_eq!(c.c("MSET {bar}a 1 {foo}b 2 {bar}c 3 {foo}d 4"), ok());
    assert_eq!(
        c.c("MGET {bar}a {foo}b {bar}c {foo}d missing"),
        arr(vec![b("1"), b("2"), b("3"), b("4"), R::Nil])
    );
    // A key repeated, and a non-string key, which reads as nil.
    c.c("SADD {foo}set m");
    assert_eq!(
        c.c("MGET {foo}b {bar}a {foo}b {foo}set"),
        arr(vec![b("2"), b("1"), b("2"), R::Nil])
    );
    // The last value of a repeated key wins.
    assert_eq!(c.c("MSET {bar}x 1 {foo}y 2 {bar}x 3"), ok());
    assert_eq!(c.c("MGET {bar}x {foo}y"), arr(vec![b("3"), b("2")]));
    // MSET drops TTLs, on both shards.
    c.c("EXPIRE {bar}x 100");
    c.c("EXPIRE {foo}y 100");
    c.c("MSET {bar}x a {foo}y b");
    assert_eq!(c.c("TTL {bar}x"), i(-1));
    assert_eq!(c.c("TTL {foo}y"), i(-1));

    let wrong = |name: &str| {
        e(&format!(
            "ERR wrong number of arguments for '{name}' command"
        ))
    };
    assert_eq!(c.c("MSET {bar}x 10 {foo}y"), wrong("mset"));
    assert_eq!(c.c("MSET x{t} 10 y{t} foo z{t}"), wrong("mset"));
    assert_eq!(c.c("MSETNX {bar}x 20 {foo}y"), wrong("msetnx"));
    assert_eq!(c.c("MSETNX x{t} 20 y{t} foo z{t}"), wrong("msetnx"));
    assert_eq!(c.c("MSET k"), wrong("mset"));
    assert_eq!(c.c("MGET"), wrong("mget"));

    // MSETNX: all or nothing, across shards.
    assert_eq!(c.c("MSETNX {bar}n1 a {foo}n2 b {bar}a z"), i(0));
    assert_eq!(c.c("EXISTS {bar}n1 {foo}n2"), i(0));
    assert_eq!(c.c("GET {bar}a"), b("1"));
    assert_eq!(c.c("MSETNX {bar}n1 a {foo}n2 b"), i(1));
    assert_eq!(c.c("MGET {bar}n1 {foo}n2"), arr(vec![b("a"), b("b")]));
    assert_eq!(c.c("MSETNX {bar}n3 a {foo}n2 c"), i(0));
    assert_eq!(c.c("EXISTS {bar}n3"), i(0));
    // The same key twice: new → the last value; existing → nothing.
    assert_eq!(c.c("MSETNX x1{t} xxx x1{t} yyy"), i(1));
    assert_eq!(c.c("GET x1{t}"), b("yyy"));
    assert_eq!(c.c("MSETNX x1{t} xxx x1{t} zzz"), i(0));
    assert_eq!(c.c("GET x1{t}"), b("yyy"));
    assert_eq!(c.c("MSETNX {bar}t1 xxx {foo}t2 a {bar}t1 yyy"), i(1));
    assert_eq!(c.c("GET {bar}t1"), b("yyy"));
    // A non-string key counts as existing.
    assert_eq!(c.c("MSETNX {bar}n9 a {foo}set b"), i(0));
    assert_eq!(c.c("TYPE {foo}set"), st("set"));

    // The same through the redis crate.
    let mut rc = s.client();
    let _: () = redis::cmd("MSET")
        .arg(KEY_SHARD0)
        .arg("x")
        .arg(KEY_SHARD1)
        .arg("y")
        .query(&mut rc)
        .unwrap();
    let v: Vec<Option<String>> = redis::cmd("MGET")
        .arg(KEY_SHARD1)
        .arg("nokey")
        .arg(KEY_SHARD0)
        .query(&mut rc)
        .unwrap();
    assert_eq!(v, vec![Some("y".to_string()), None, Some("x".to_string())]);
}

#[test]
fn binary_values_and_big_payload() {
    let (_s, mut c) = setup();
    let v: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    assert_eq!(c.cmd(&[b"SET", b"big", &v]), ok());
    assert_eq!(c.cmd(&[b"GET", b"big"]), R::Bulk(v.clone()));
    assert_eq!(
        c.cmd(&[b"GETRANGE", b"big", b"1000", b"1009"]),
        R::Bulk(v[1000..1010].to_vec())
    );
    assert_eq!(c.c("STRLEN big"), i(100_000));
}

/// Multi-key commands over keys of both shards: each shard runs one part holding all
/// its keys, and the connection puts MGET's elements back in the client's key order.
#[test]
fn split_commands_keep_key_order_and_count_once() {
    let s = Server::start(2);
    let mut c = s.client();
    let keys: Vec<String> = (0..24).map(|i| format!("k{i}")).collect();
    assert!((0..2).all(|sh| keys.iter().any(|k| shard(k) == sh)));
    let _: () = q(&mut c, &["CONFIG", "RESETSTAT"]);
    let mut mset = vec!["MSET"];
    for k in &keys[..20] {
        mset.push(k);
        mset.push(k);
    }
    // A repeated key keeps its last value, as in Redis.
    mset.extend(["k3", "last"]);
    let _: () = q(&mut c, &mset);
    let _: () = q(&mut c, &["HSET", "k21", "f", "v"]);
    let mut p = redis::pipe();
    let mut mget = redis::cmd("MGET");
    for k in &keys {
        mget.arg(k);
    }
    p.add_command(mget.clone());
    p.cmd("EXISTS").arg("k0").arg("k1").arg("k0").arg("k22");
    p.cmd("DEL").arg("k5").arg("k6").arg("k23").arg("k7");
    p.add_command(mget);
    type Rows = (Vec<Option<String>>, i64, i64, Vec<Option<String>>);
    let (first, exists, deleted, second): Rows = p.query(&mut c).expect("pipeline");
    let expect = |gone: &[usize]| -> Vec<Option<String>> {
        (0..24)
            .map(|i| match i {
                3 => Some("last".to_string()),
                _ if i >= 20 || gone.contains(&i) => None,
                _ => Some(format!("k{i}")),
            })
            .collect()
    };
    assert_eq!(first, expect(&[]));
    assert_eq!(exists, 3);
    assert_eq!(deleted, 3);
    assert_eq!(second, expect(&[5, 6, 7]));
    let info: String = q(&mut c, &["INFO", "commandstats"]);
    assert!(info.contains("cmdstat_mset:calls=1,"), "{info}");
    assert!(info.contains("cmdstat_mget:calls=2,"), "{info}");
    assert!(info.contains("cmdstat_del:calls=1,"), "{info}");
}

/// Operands of every size and form: the fixed edge cases, raw 64-bit integers, decimal
/// fractions, exponents from 1e-350 to 1e350, and integers within 1000 of ±2^63 (with
/// the forms Redis's string2ll refuses: a plus sign, leading zeros, spaces).
struct Operands {
    seed: u64,
}

impl Operands {
    const FIXED: [&'static str; 38] = [
        "0",
        "-0",
        "1",
        "-1.1",
        "3.14",
        "1.5",
        "0.1",
        "0.2",
        "9223372036854775807",
        "-9223372036854775808",
        "9223372036854775808",
        "9223372036854775806.5",
        "1e308",
        "1.7e308",
        "1e4000",
        "-1e4000",
        "1.1e4932",
        "4.9e-4940",
        "1e-99999",
        "0x1p63",
        "0x10",
        "inf",
        "-inf",
        "+inf",
        "nan",
        "1e",
        "",
        " 1",
        "1 ",
        "abc",
        "5.0e3",
        "1.0000000000000002",
        "123456789.123456789",
        "0.30000000000000004",
        "+5",
        "007",
        "1.0",
        "1e3",
    ];

    /// xorshift64: the same sequence on every run.
    fn below(&mut self, n: u64) -> u64 {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        self.seed % n
    }

    fn sign(&mut self) -> &'static str {
        if self.below(2) == 0 {
            ""
        } else {
            "-"
        }
    }

    fn any(&mut self) -> String {
        match self.below(6) {
            0 => Self::FIXED[self.below(Self::FIXED.len() as u64) as usize].to_string(),
            1 => format!("{}", self.below(u64::MAX) as i64),
            2 => {
                let sign = self.sign();
                format!(
                    "{sign}{}.{}",
                    self.below(1_000_000),
                    self.below(1_000_000_000)
                )
            }
            3 => format!(
                "{}{}e{}",
                self.sign(),
                self.below(100_000) as f64 / 1000.0,
                self.below(700) as i64 - 350
            ),
            4 => self.near_limit(),
            _ => format!("{}{}", self.sign(), self.below(1000)),
        }
    }

    /// An integer within 1000 of i64::MAX or i64::MIN.
    fn near_limit(&mut self) -> String {
        let off = self.below(1000) as i64;
        if self.below(2) == 0 {
            (i64::MAX - off).to_string()
        } else {
            (i64::MIN + off).to_string()
        }
    }

    /// INCRBY / DECRBY's increment: mostly integers, sometimes anything.
    fn integer_like(&mut self) -> String {
        match self.below(4) {
            0 => self.any(),
            1 => self.near_limit(),
            _ => format!("{}{}", self.sign(), self.below(1_000_000)),
        }
    }
}

/// One of the test's 20,000 commands, on 48 keys (both shards) and one hash, so that
/// increments pile up on the values earlier ones left.
fn float_mix_command(o: &mut Operands) -> Vec<String> {
    let key = format!("n{}", o.below(48));
    let field = format!("f{}", o.below(16));
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    match o.below(20) {
        0..=2 => s(&["SET", &key, &o.any()]),
        3..=5 => s(&["INCRBYFLOAT", &key, &o.any()]),
        6 | 7 => s(&["HSET", "h", &field, &o.any()]),
        8..=10 => s(&["HINCRBYFLOAT", "h", &field, &o.any()]),
        11 | 12 => s(&["INCR", &key]),
        13 => s(&["DECR", &key]),
        14 | 15 => s(&["INCRBY", &key, &o.integer_like()]),
        16 => s(&["DECRBY", &key, &o.integer_like()]),
        17 => s(&["GET", &key]),
        18 => s(&["HGET", "h", &field]),
        _ => s(&["SET", &key, &o.near_limit()]),
    }
}

/// Sends `cmds` in one write and returns each reply's exact bytes.
fn pipelined(conn: &mut Raw, cmds: &[Vec<String>]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for c in cmds {
        let args: Vec<&[u8]> = c.iter().map(|a| a.as_bytes()).collect();
        out.extend_from_slice(&encode(&args));
    }
    conn.send(&out);
    cmds.iter().map(|_| conn.read_raw()).collect()
}

/// INCRBYFLOAT, HINCRBYFLOAT, INCR, DECR, INCRBY and DECRBY answer exactly as
/// redis-server 7.0.15 does (it adds floats in C's long double and prints `%.17Lf`,
/// refuses non-integers and overflows with its own texts): 20,000 seeded commands
/// with operands of every size and form, on values earlier commands left, sent to
/// both in pipelines of 500 and compared byte for byte, errors included.
#[test]
fn float_increments_match_redis_digit_for_digit() {
    let Some(redis) = ReferenceRedis::start() else {
        eprintln!("redis-server not available: comparison skipped");
        return;
    };
    let s = Server::start(2);
    let mut ours = Raw::connect(s.port);
    let mut theirs = Raw::connect(redis.port);
    let mut o = Operands {
        seed: 0x2545_f491_4f6c_dd1d,
    };
    let cmds: Vec<Vec<String>> = (0..20_000).map(|_| float_mix_command(&mut o)).collect();
    let mut errors = 0;
    for (round, chunk) in cmds.chunks(500).enumerate() {
        let (a, b) = (pipelined(&mut ours, chunk), pipelined(&mut theirs, chunk));
        for (j, (ra, rb)) in a.iter().zip(&b).enumerate() {
            assert_eq!(
                String::from_utf8_lossy(ra),
                String::from_utf8_lossy(rb),
                "command #{}: {:?}",
                round * 500 + j,
                chunk[j]
            );
            errors += usize::from(ra.first() == Some(&b'-'));
        }
    }
    // The mix must exercise both sides: replies and refusals.
    assert!((2_000..18_000).contains(&errors), "{errors} errors");
}
