//! Lua scripting over TCP on a 2-shard server: type conversions both ways, error
//! texts, EVALSHA / SCRIPT, functions, and atomicity of scripts whose keys live on
//! different shards.

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use redis::Value;

fn eval(
    c: &mut redis::Connection,
    script: &str,
    keys: &[&str],
    args: &[&str],
) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script).arg(keys.len());
    for k in keys {
        cmd.arg(*k);
    }
    for a in args {
        cmd.arg(*a);
    }
    cmd.query(c)
}

fn err_text(r: redis::RedisResult<Value>) -> String {
    match r {
        Err(e) => e.to_string(),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

#[test]
fn lua_to_redis_conversions() {
    let s = Server::start(2);
    let mut c = s.client();
    assert_eq!(
        eval(&mut c, "return 100.5", &[], &[]).unwrap(),
        Value::Int(100)
    );
    assert_eq!(
        eval(&mut c, "return -3.9", &[], &[]).unwrap(),
        Value::Int(-3)
    );
    assert_eq!(
        eval(&mut c, "return true", &[], &[]).unwrap(),
        Value::Int(1)
    );
    assert_eq!(eval(&mut c, "return false", &[], &[]).unwrap(), Value::Nil);
    assert_eq!(eval(&mut c, "return nil", &[], &[]).unwrap(), Value::Nil);
    assert_eq!(
        eval(&mut c, "return {ok='fine'}", &[], &[]).unwrap(),
        Value::Okay.clone().max_status("fine")
    );
    assert_eq!(
        eval(&mut c, "return {1,2,nil,4}", &[], &[]).unwrap(),
        Value::Array(vec![Value::Int(1), Value::Int(2)])
    );
    assert_eq!(
        eval(&mut c, "return {1,'two',{3}}", &[], &[]).unwrap(),
        Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"two".to_vec()),
            Value::Array(vec![Value::Int(3)])
        ])
    );
    let e = err_text(eval(&mut c, "return {err='MYERR custom'}", &[], &[]));
    assert!(e.contains("MYERR") && e.contains("custom"), "{e}");
    assert_eq!(
        eval(
            &mut c,
            "return {KEYS[1], KEYS[2], ARGV[1]}",
            &["a", "b"],
            &["c"]
        )
        .unwrap(),
        Value::Array(vec![
            Value::BulkString(b"a".to_vec()),
            Value::BulkString(b"b".to_vec()),
            Value::BulkString(b"c".to_vec())
        ])
    );
}

/// `Value::Status` for a status reply (helper so the test reads naturally).
trait StatusExt {
    fn max_status(self, s: &str) -> Value;
}

impl StatusExt for Value {
    fn max_status(self, s: &str) -> Value {
        Value::SimpleString(s.to_string())
    }
}

#[test]
fn redis_to_lua_conversions() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = redis::cmd("SET")
        .arg(KEY_SHARD0)
        .arg("0")
        .query(&mut c)
        .unwrap();
    let script = "local i = redis.call('incr', KEYS[1]) \
                  local s = redis.call('set', KEYS[2], 'v') \
                  local g = redis.call('get', KEYS[2]) \
                  local n = redis.call('get', 'missing-key') \
                  local e = redis.pcall('lpush', KEYS[2], 'x') \
                  local l = redis.call('lrange', 'nolist', 0, -1) \
                  return {type(i), i, s.ok, g, tostring(n), e.err, #l}";
    let v = eval(&mut c, script, &[KEY_SHARD0, KEY_SHARD1], &[]).unwrap();
    assert_eq!(
        v,
        Value::Array(vec![
            Value::BulkString(b"number".to_vec()),
            Value::Int(1),
            Value::BulkString(b"OK".to_vec()),
            Value::BulkString(b"v".to_vec()),
            Value::BulkString(b"false".to_vec()),
            Value::BulkString(
                b"WRONGTYPE Operation against a key holding the wrong kind of value".to_vec()
            ),
            Value::Int(0),
        ])
    );
    // RESP3 inside the script: HGETALL comes back as {map=...}.
    let _: () = redis::cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("v")
        .query(&mut c)
        .unwrap();
    let v = eval(
        &mut c,
        "redis.setresp(3) local m = redis.call('hgetall', KEYS[1]) return m.map.f",
        &["h"],
        &[],
    )
    .unwrap();
    assert_eq!(v, Value::BulkString(b"v".to_vec()));
}

#[test]
fn errors_match_redis() {
    let s = Server::start(2);
    let mut c = s.client();
    let e = err_text(eval(&mut c, "return a", &[], &[]));
    assert!(
        e.contains("user_script:1: Script attempted to access nonexistent global variable 'a'"),
        "{e}"
    );
    assert!(e.contains("script: "), "{e}");
    // Functions a sandboxed script must not reach, as in Redis. (Redis 7.0 keeps
    // `load`; it is text-only here, see tests/lua_sandbox.rs.)
    for name in ["print", "dofile", "loadfile", "getfenv", "setfenv"] {
        let e = err_text(eval(&mut c, &format!("return {name}('x')"), &[], &[]));
        assert!(
            e.contains(&format!("nonexistent global variable '{name}'")),
            "{name}: {e}"
        );
    }
    // XREAD / XREADGROUP cannot block from a script.
    let e = err_text(eval(
        &mut c,
        "return redis.pcall('xread', 'BLOCK', 0, 'STREAMS', KEYS[1], '$')",
        &["s"],
        &[],
    ));
    assert!(
        e.contains("xread command is not allowed with BLOCK option from scripts"),
        "{e}"
    );
    let e = err_text(eval(&mut c, "a = 1", &[], &[]));
    assert!(e.contains("Attempt to modify a readonly table"), "{e}");
    let e = err_text(eval(&mut c, "redis = 1", &[], &[]));
    assert!(e.contains("Attempt to modify a readonly table"), "{e}");
    let e = err_text(eval(&mut c, "return redis.call('nosuchcmd')", &[], &[]));
    assert!(
        e.contains("Unknown Redis command called from script"),
        "{e}"
    );
    assert!(e.contains("on @user_script:1."), "{e}");
    let e = err_text(eval(&mut c, "return redis.call('get')", &[], &[]));
    assert!(
        e.contains("Wrong number of args calling Redis command from script"),
        "{e}"
    );
    let e = err_text(eval(&mut c, "return redis.call('blpop', 'x', 0)", &[], &[]));
    assert!(
        e.contains("This Redis command is not allowed from script"),
        "{e}"
    );
    let e = err_text(eval(&mut c, "return 'x", &[], &[]));
    assert!(e.contains("Error compiling script"), "{e}");
    let e = err_text(eval(&mut c, "return 1", &["k"], &[]).and_then(|_| {
        redis::cmd("EVAL")
            .arg("return 1")
            .arg(-1)
            .query::<Value>(&mut c)
    }));
    assert!(e.contains("Number of keys can't be negative"), "{e}");
    let e = err_text(
        redis::cmd("EVAL_RO")
            .arg("return redis.call('set', KEYS[1], 1)")
            .arg(1)
            .arg("k")
            .query(&mut c),
    );
    assert!(
        e.contains("Write commands are not allowed from read-only scripts"),
        "{e}"
    );
    // The connection still works after all these errors.
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn evalsha_and_script_commands() {
    let s = Server::start(2);
    let mut c = s.client();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return 'loaded'")
        .query(&mut c)
        .unwrap();
    assert_eq!(sha, "b534286061d4b9e4026607613b95c06c06015ae8");
    // Another connection (possibly on the other shard) sees the script.
    let mut c2 = s.client();
    let v: String = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(0)
        .query(&mut c2)
        .unwrap();
    assert_eq!(v, "loaded");
    let v: String = redis::cmd("EVALSHA")
        .arg(sha.to_uppercase())
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(v, "loaded");
    let exists: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&sha)
        .arg("ffffffffffffffffffffffffffffffffffffffff")
        .query(&mut c)
        .unwrap();
    assert_eq!(exists, vec![1, 0]);
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut c).unwrap();
    let e = err_text(redis::cmd("EVALSHA").arg(&sha).arg(0).query(&mut c2));
    assert!(e.contains("No matching script"), "{e}");
}

#[test]
fn functions_load_and_call() {
    let s = Server::start(2);
    let mut c = s.client();
    let code = "#!lua name=mylib\n\
                redis.register_function('incr2', function(keys, args) \
                  redis.call('incrby', keys[1], args[1]) \
                  return redis.call('incrby', keys[2], args[1]) end)\n\
                redis.register_function{function_name='ro_get', callback=function(keys) \
                  return redis.call('get', keys[1]) end, flags={'no-writes'}}";
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(code)
        .query(&mut c)
        .unwrap();
    assert_eq!(name, "mylib");
    let mut c2 = s.client();
    let v: i64 = redis::cmd("FCALL")
        .arg("incr2")
        .arg(2)
        .arg(KEY_SHARD0)
        .arg(KEY_SHARD1)
        .arg(5)
        .query(&mut c2)
        .unwrap();
    assert_eq!(v, 5);
    let v: String = redis::cmd("FCALL_RO")
        .arg("ro_get")
        .arg(1)
        .arg(KEY_SHARD0)
        .query(&mut c)
        .unwrap();
    assert_eq!(v, "5");
    let e = err_text(redis::cmd("FCALL_RO").arg("incr2").arg(0).query(&mut c));
    assert!(
        e.contains("Can not execute a script with write flag using *_ro command"),
        "{e}"
    );
    let e = err_text(redis::cmd("FUNCTION").arg("LOAD").arg(code).query(&mut c));
    assert!(e.contains("already exists"), "{e}");
    let dump: Vec<u8> = redis::cmd("FUNCTION").arg("DUMP").query(&mut c).unwrap();
    let _: () = redis::cmd("FUNCTION").arg("FLUSH").query(&mut c).unwrap();
    let e = err_text(redis::cmd("FCALL").arg("incr2").arg(0).query(&mut c2));
    assert!(e.contains("Function not found"), "{e}");
    let _: () = redis::cmd("FUNCTION")
        .arg("RESTORE")
        .arg(dump)
        .query(&mut c)
        .unwrap();
    let v: String = redis::cmd("FCALL")
        .arg("ro_get")
        .arg(1)
        .arg(KEY_SHARD1)
        .query(&mut c2)
        .unwrap();
    assert_eq!(v, "5");
}

#[test]
fn lock_pattern_set_nx_and_compare_and_delete() {
    let s = Server::start(2);
    let mut c = s.client();
    let release = "if redis.call('get', KEYS[1]) == ARGV[1] then \
                     return redis.call('del', KEYS[1]) else return 0 end";
    for key in [KEY_SHARD0, KEY_SHARD1] {
        let ok: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg("token-a")
            .arg("NX")
            .arg("PX")
            .arg(30000)
            .query(&mut c)
            .unwrap();
        assert_eq!(ok.as_deref(), Some("OK"));
        let again: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg("token-b")
            .arg("NX")
            .arg("PX")
            .arg(30000)
            .query(&mut c)
            .unwrap();
        assert_eq!(again, None);
        assert_eq!(
            eval(&mut c, release, &[key], &["token-b"]).unwrap(),
            Value::Int(0)
        );
        assert_eq!(
            eval(&mut c, release, &[key], &["token-a"]).unwrap(),
            Value::Int(1)
        );
        assert_eq!(
            eval(&mut c, release, &[key], &["token-a"]).unwrap(),
            Value::Int(0)
        );
    }
}

/// A script INCRs two keys on different shards while other clients MGET both:
/// no reader may ever see them differ.
#[test]
fn eval_is_atomic_across_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    let keys = [KEY_SHARD0, KEY_SHARD1];
    let _: () = redis::cmd("MSET")
        .arg(keys[0])
        .arg(0)
        .arg(keys[1])
        .arg(0)
        .query(&mut c)
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let torn = Arc::new(AtomicU64::new(0));
    let reads = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for _ in 0..2 {
        let mut rc = s.client();
        let (stop, torn, reads) = (stop.clone(), torn.clone(), reads.clone());
        readers.push(thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let v: Vec<i64> = redis::cmd("MGET")
                    .arg(keys[0])
                    .arg(keys[1])
                    .query(&mut rc)
                    .unwrap();
                if v[0] != v[1] {
                    torn.fetch_add(1, Ordering::Relaxed);
                }
                reads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let mut writers = Vec::new();
    for _ in 0..2 {
        let mut wc = s.client();
        writers.push(thread::spawn(move || {
            for _ in 0..300 {
                let script = "redis.call('incr', KEYS[1]) return redis.call('incr', KEYS[2])";
                eval(&mut wc, script, &keys, &[]).unwrap();
            }
        }));
    }
    for w in writers {
        w.join().unwrap();
    }
    thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(
        torn.load(Ordering::Relaxed),
        0,
        "a reader saw half a script"
    );
    assert!(reads.load(Ordering::Relaxed) > 0);
    let v: Vec<i64> = redis::cmd("MGET")
        .arg(keys[0])
        .arg(keys[1])
        .query(&mut c)
        .unwrap();
    assert_eq!(v, vec![600, 600]);
}

/// A script may touch keys it did not declare, on any shard.
#[test]
fn undeclared_keys_on_other_shards_work() {
    let s = Server::start(2);
    let mut c = s.client();
    let script = format!(
        "redis.call('set', '{}', 'x') redis.call('set', '{}', 'y') \
         return redis.call('mget', '{}', '{}')",
        KEY_SHARD0, KEY_SHARD1, KEY_SHARD0, KEY_SHARD1
    );
    assert_eq!(
        eval(&mut c, &script, &[], &[]).unwrap(),
        Value::Array(vec![
            Value::BulkString(b"x".to_vec()),
            Value::BulkString(b"y".to_vec())
        ])
    );
    let n = eval(
        &mut c,
        &format!(
            "return redis.call('del', '{}', '{}')",
            KEY_SHARD0, KEY_SHARD1
        ),
        &[],
        &[],
    )
    .unwrap();
    assert_eq!(n, Value::Int(2));
}

fn set_busy_threshold(c: &mut redis::Connection, ms: u64) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("busy-reply-threshold")
        .arg(ms)
        .query(c)
        .unwrap();
}

#[test]
fn busy_script_can_be_killed() {
    let s = Server::start(2);
    let mut c = s.client();
    set_busy_threshold(&mut c, 10);
    let mut runner = s.client();
    let t = thread::spawn(move || eval(&mut runner, "while true do end", &[], &[]));
    thread::sleep(Duration::from_millis(200));
    let e = err_text(redis::cmd("PING").query(&mut c));
    assert!(e.contains("BUSY"), "{e}");
    let _: () = redis::cmd("SCRIPT").arg("KILL").query(&mut c).unwrap();
    let e = err_text(t.join().unwrap());
    assert!(e.contains("killed by user"), "{e}");
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
}

/// A loop inside a coroutine is under the same time limit and SCRIPT KILL as any
/// other (Lua 5.1 coroutines inherit the hook in Redis), through resume and wrap.
#[test]
fn busy_script_in_a_coroutine_can_be_killed() {
    let s = Server::start(2);
    let mut c = s.client();
    set_busy_threshold(&mut c, 10);
    for body in [
        "local co = coroutine.wrap(function() while true do end end) co()",
        "local co = coroutine.create(function() while true do end end) return coroutine.resume(co)",
        "local inner = coroutine.wrap(function() while true do end end) \
         local outer = coroutine.wrap(function() inner() end) outer()",
        "local co = coroutine.wrap(function() while true do pcall(function() end) end end) co()",
    ] {
        let mut runner = s.client();
        let b = body.to_string();
        let t = thread::spawn(move || eval(&mut runner, &b, &[], &[]));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let r: redis::RedisResult<Value> = redis::cmd("PING").query(&mut c);
            if matches!(&r, Err(e) if e.to_string().contains("BUSY")) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "never BUSY: {body}");
            thread::sleep(Duration::from_millis(20));
        }
        let _: () = redis::cmd("SCRIPT").arg("KILL").query(&mut c).unwrap();
        match t.join().unwrap() {
            Ok(v) => {
                // resume catches the kill inside the coroutine; the script is then
                // stopped at its next instruction outside it.
                panic!("{body}: script returned {v:?} after SCRIPT KILL")
            }
            Err(e) => assert!(e.to_string().contains("killed by user"), "{body}: {e}"),
        }
        let pong: String = redis::cmd("PING").query(&mut c).unwrap();
        assert_eq!(pong, "PONG");
    }
    // Coroutines still work as Lua's: values through yield and resume, errors.
    let v = eval(
        &mut c,
        "local co = coroutine.wrap(function(a) local b = coroutine.yield(a + 1) return b * 2 end) \
         local x = co(1) return {x, co(10)}",
        &[],
        &[],
    )
    .unwrap();
    assert_eq!(v, Value::Array(vec![Value::Int(2), Value::Int(20)]));
    let v = eval(
        &mut c,
        "local co = coroutine.create(function() error({err='x'}) end) \
         local ok, e = coroutine.resume(co) return {tostring(ok), e.err, coroutine.status(co)}",
        &[],
        &[],
    )
    .unwrap();
    assert_eq!(
        v,
        Value::Array(vec![
            Value::BulkString(b"false".to_vec()),
            Value::BulkString(b"x".to_vec()),
            Value::BulkString(b"dead".to_vec())
        ])
    );
}

#[test]
fn libraries_cjson_cmsgpack_bit_struct() {
    let s = Server::start(2);
    let mut c = s.client();
    let v = eval(
        &mut c,
        "local t = cjson.decode('{\"a\":[1,2,3],\"b\":\"x\"}') return {t.a[3], t.b, cjson.encode({1,2})}",
        &[],
        &[],
    )
    .unwrap();
    assert_eq!(
        v,
        Value::Array(vec![
            Value::Int(3),
            Value::BulkString(b"x".to_vec()),
            Value::BulkString(b"[1,2]".to_vec())
        ])
    );
    let v = eval(
        &mut c,
        "local p = cmsgpack.pack({1,2,'x'}) local t = cmsgpack.unpack(p) return {#p, t[3]}",
        &[],
        &[],
    )
    .unwrap();
    assert_eq!(
        v,
        Value::Array(vec![Value::Int(5), Value::BulkString(b"x".to_vec())])
    );
    let v = eval(
        &mut c,
        "return {bit.band(0xff, 0x0f), bit.bor(1, 2, 4), bit.tohex(255, 4)}",
        &[],
        &[],
    )
    .unwrap();
    assert_eq!(
        v,
        Value::Array(vec![
            Value::Int(15),
            Value::Int(7),
            Value::BulkString(b"00ff".to_vec())
        ])
    );
    let v = eval(
        &mut c,
        "local s = struct.pack('>I2', 258) local n = struct.unpack('>I2', s) return {#s, n}",
        &[],
        &[],
    )
    .unwrap();
    assert_eq!(v, Value::Array(vec![Value::Int(2), Value::Int(258)]));
}

/// One INFO field's value.
fn info_value(c: &mut redis::Connection, section: &str, field: &str) -> Option<String> {
    let info: String = q(c, &["INFO", section]);
    info.split("\r\n")
        .find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_string))
}

#[test]
fn an_error_from_redis_call_is_counted_once() {
    // As Redis: the failing command counts the error (a refused one as rejected), the
    // script's reply carrying that same error counts the script as failed but not the
    // error again; an error the script makes itself is counted.
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = q(&mut c, &["CONFIG", "SET", "maxmemory", "1"]);
    let _: () = q(&mut c, &["CONFIG", "RESETSTAT"]);
    let e = err(
        &mut c,
        &["EVAL", "return redis.call('set','x','y')", "1", "x"],
    );
    assert!(e.contains("OOM"), "{e}");
    assert_eq!(
        info_value(&mut c, "errorstats", "errorstat_OOM").as_deref(),
        Some("count=1")
    );
    assert_eq!(
        info_value(&mut c, "stats", "total_error_replies").as_deref(),
        Some("1")
    );
    let set = info_value(&mut c, "commandstats", "cmdstat_set").unwrap_or_default();
    assert!(
        set.contains("calls=0,") && set.contains("rejected_calls=1,failed_calls=0"),
        "{set}"
    );
    let ev = info_value(&mut c, "commandstats", "cmdstat_eval").unwrap_or_default();
    assert!(ev.contains("rejected_calls=0,failed_calls=1"), "{ev}");
    // pcall's error table returned as the script's reply: still counted once.
    let _ = err(
        &mut c,
        &["EVAL", "return redis.pcall('set','x','y')", "1", "x"],
    );
    assert_eq!(
        info_value(&mut c, "errorstats", "errorstat_OOM").as_deref(),
        Some("count=2")
    );
    let _: () = q(&mut c, &["CONFIG", "SET", "maxmemory", "0"]);
    let _: () = q(&mut c, &["CONFIG", "RESETSTAT"]);
    let _ = err(&mut c, &["EVAL", "return redis.call('select',99)", "0"]);
    assert_eq!(
        info_value(&mut c, "errorstats", "errorstat_ERR").as_deref(),
        Some("count=1")
    );
    assert_eq!(
        info_value(&mut c, "stats", "total_error_replies").as_deref(),
        Some("1")
    );
    let _ = err(
        &mut c,
        &["EVAL", "return redis.error_reply('MINE oops')", "0"],
    );
    assert_eq!(
        info_value(&mut c, "errorstats", "errorstat_MINE").as_deref(),
        Some("count=1")
    );
    assert_eq!(
        info_value(&mut c, "stats", "total_error_replies").as_deref(),
        Some("2")
    );
}

/// Lua runs on the shard thread: a busy script must still let its own shard's other
/// clients in (one shard, so every client shares the script's thread), to get -BUSY,
/// to see FUNCTION STATS, and to kill it.
#[test]
fn busy_script_serves_clients_of_its_own_shard() {
    let s = Server::start(1);
    let mut c = s.client();
    set_busy_threshold(&mut c, 10);
    let mut runner = s.client();
    let t = thread::spawn(move || {
        eval(
            &mut runner,
            "local i = 0 while true do i = i + 1 end",
            &[],
            &[],
        )
    });
    thread::sleep(Duration::from_millis(200));
    let e = err_text(redis::cmd("GET").arg("k").query(&mut c));
    assert!(e.contains("BUSY"), "{e}");
    let e = err_text(
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg("return 1")
            .query(&mut c),
    );
    assert!(e.contains("BUSY"), "{e}");
    let stats: Value = redis::cmd("FUNCTION").arg("STATS").query(&mut c).unwrap();
    assert!(format!("{stats:?}").contains("while true"), "{stats:?}");
    let _: () = redis::cmd("SCRIPT").arg("KILL").query(&mut c).unwrap();
    let e = err_text(t.join().unwrap());
    assert!(e.contains("killed by user"), "{e}");
    assert_eq!(
        eval(&mut c, "return redis.call('incr', KEYS[1])", &["k"], &[]).unwrap(),
        Value::Int(1)
    );
}

/// While a script waits for another shard's reply its shard runs its other tasks;
/// those that need the Lua VM (SCRIPT LOAD, EVAL, FCALL, FUNCTION LOAD) must wait
/// for the script rather than re-enter the VM, and every reply must stay right.
#[test]
fn scripts_waiting_on_other_shards_let_other_script_jobs_wait() {
    let s = Server::start(2);
    let mut c = s.client();
    let lib = "#!lua name=counters\nredis.register_function('bump', function(keys) return redis.call('incr', keys[1]) end)";
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(lib)
        .query(&mut c)
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..4 {
        let mut c = s.client();
        let stop = stop.clone();
        workers.push(thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let body = format!("return {w}{n}");
                let sha: String = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(&body)
                    .query(&mut c)
                    .unwrap();
                let v: i64 = redis::cmd("EVALSHA")
                    .arg(&sha)
                    .arg(0)
                    .query(&mut c)
                    .unwrap();
                assert_eq!(v, format!("{w}{n}").parse::<i64>().unwrap());
                let key = format!("fc{w}");
                let v: i64 = redis::cmd("FCALL")
                    .arg("bump")
                    .arg(1)
                    .arg(&key)
                    .query(&mut c)
                    .unwrap();
                assert_eq!(v as u64, n + 1);
                let lib = format!(
                    "#!lua name=w{w}\nredis.register_function('f{w}', function() return {n} end)"
                );
                let _: String = redis::cmd("FUNCTION")
                    .arg("LOAD")
                    .arg("REPLACE")
                    .arg(lib)
                    .query(&mut c)
                    .unwrap();
                n += 1;
            }
            n
        }));
    }
    let script = format!(
        "for i = 1, 300 do redis.call('incr', '{KEY_SHARD0}') redis.call('incr', '{KEY_SHARD1}') end \
         return redis.call('mget', '{KEY_SHARD0}', '{KEY_SHARD1}')"
    );
    for round in 1..=10 {
        let v = eval(&mut c, &script, &[], &[]).unwrap();
        let want = (round * 300).to_string().into_bytes();
        assert_eq!(
            v,
            Value::Array(vec![
                Value::BulkString(want.clone()),
                Value::BulkString(want)
            ])
        );
    }
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        assert!(w.join().unwrap() > 0);
    }
}

/// On a stale replica (link down, replica-serve-stale-data no) scripts run as in
/// Redis 7.0: a flagless EVAL and a script without allow-stale get -MASTERDOWN (after
/// the write checks for a script that may write), an allow-stale script runs and
/// may call only stale commands (ECHO, not GET). Replies compared with redis-server
/// in the same state.
#[test]
fn scripts_on_a_stale_replica() {
    // Made stale at run time, as the Tcl test does (PING itself is refused once
    // stale, so a server cannot be started that way and waited for).
    let dead = free_port().to_string();
    let make_stale = |c: &mut redis::Connection| {
        q::<String>(c, &["CONFIG", "SET", "replica-serve-stale-data", "no"]);
        q::<String>(c, &["REPLICAOF", "127.0.0.1", &dead]);
    };
    let server = Server::start(2);
    let reference = ReferenceRedis::start();
    let cases: [&[&str]; 7] = [
        &["EVAL", "return redis.call('get','x')", "1", "x"],
        &["EVAL", "return 1", "0"],
        &["EVAL", "#!lua flags=no-writes\nreturn 1", "0"],
        &["EVAL", "#!lua\nreturn 1", "0"],
        &["EVAL", "#!lua flags=allow-stale,no-writes\nreturn 1", "0"],
        &[
            "EVAL",
            "#!lua flags=allow-stale,no-writes\nreturn redis.call('get','x')",
            "1",
            "x",
        ],
        &[
            "EVAL",
            "#!lua flags=allow-stale,no-writes\nreturn redis.call('echo','foobar')",
            "0",
        ],
    ];
    let reply = |c: &mut redis::Connection, args: &[&str]| -> String {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        match cmd.query::<Value>(c) {
            Ok(v) => format!("{v:?}"),
            Err(e) => format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
        }
    };
    let mut t = server.client();
    make_stale(&mut t);
    let got: Vec<String> = cases.iter().map(|a| reply(&mut t, a)).collect();
    assert!(
        got[0].contains("MASTERDOWN Link with MASTER is down"),
        "{}",
        got[0]
    );
    assert!(
        got[5].contains("Can not execute the command on a stale replica"),
        "{}",
        got[5]
    );
    assert!(got[6].contains("foobar"), "{}", got[6]);
    if let Some(r) = reference {
        let mut r = r.client();
        make_stale(&mut r);
        for (args, mine) in cases.iter().zip(&got) {
            assert_eq!(mine, &reply(&mut r, args), "{args:?}");
        }
    }
}

/// SCRIPT FLUSH resets every shard's VM at once (Redis resets its VM), so
/// used_memory_lua falls to nothing even on a shard that runs no script afterwards;
/// function libraries survive it. Redis's scripting.tcl "EVAL does not leak in the
/// Lua stack" reads used_memory_lua after a flush and 10000 scripts on one shard.
/// SCRIPT DEBUG YES / SYNC is refused: there is no Lua debugger.
#[test]
fn script_flush_releases_every_shards_vm() {
    let s = Server::start(2);
    let mut c = s.client();
    let lua_memory = |c: &mut redis::Connection| -> u64 {
        info_field(c, "memory", "used_memory_lua").parse().unwrap()
    };
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("#!lua name=lib\nredis.register_function('f', function(k) return redis.call('incr', k[1]) end)")
        .query(&mut c)
        .unwrap();
    for k in [KEY_SHARD0, KEY_SHARD1] {
        let _: i64 = redis::cmd("FCALL")
            .arg("f")
            .arg(1)
            .arg(k)
            .query(&mut c)
            .unwrap();
        eval(&mut c, "return redis.call('get', KEYS[1])", &[k], &[]).unwrap();
    }
    assert!(lua_memory(&mut c) > 0);
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut c).unwrap();
    assert_eq!(lua_memory(&mut c), 0);
    let v: i64 = redis::cmd("FCALL")
        .arg("f")
        .arg(1)
        .arg(KEY_SHARD1)
        .query(&mut c)
        .unwrap();
    assert_eq!(v, 2);
    for mode in ["YES", "SYNC"] {
        let e = err_text(redis::cmd("SCRIPT").arg("DEBUG").arg(mode).query(&mut c));
        assert!(e.contains("not supported"), "{e}");
    }
    let _: () = redis::cmd("SCRIPT")
        .arg("DEBUG")
        .arg("NO")
        .query(&mut c)
        .unwrap();
}
