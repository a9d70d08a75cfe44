//! Introspection and latency observability over TCP: SLOWLOG merged across shards,
//! LATENCY HISTOGRAM / LATEST, INFO commandstats / latencystats, CLIENT LIST's
//! subcommand names, COMMAND LIST / GETKEYS, MONITOR.

mod common;
use common::*;

use std::io::{BufRead, BufReader};
use std::time::Duration;

use redis::Value;

fn cmd<T: redis::FromRedisValue>(c: &mut redis::Connection, args: &[&str]) -> T {
    let mut r = redis::cmd(args[0]);
    for a in &args[1..] {
        r.arg(*a);
    }
    r.query(c).expect("query")
}

/// SLOWLOG GET entries as (id, usec, argv, name).
fn slowlog(c: &mut redis::Connection, count: &str) -> Vec<(i64, i64, Vec<String>, String)> {
    let v: Vec<Value> = cmd(c, &["SLOWLOG", "GET", count]);
    v.into_iter()
        .map(|e| {
            let Value::Array(f) = e else {
                panic!("entry {e:?}")
            };
            assert_eq!(f.len(), 6);
            let int = |v: &Value| match v {
                Value::Int(i) => *i,
                other => panic!("{other:?}"),
            };
            let argv: Vec<String> = redis::from_redis_value(&f[3]).expect("argv");
            let name: String = redis::from_redis_value(&f[5]).expect("name");
            (int(&f[0]), int(&f[2]), argv, name)
        })
        .collect()
}

#[test]
fn slowlog_merges_entries_of_both_shards_newest_first() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = cmd(&mut c, &["CLIENT", "SETNAME", "slowpoke"]);
    let _: () = cmd(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    let _: () = cmd(&mut c, &["SLOWLOG", "RESET"]);
    let _: () = cmd(&mut c, &["SET", KEY_SHARD0, "a"]);
    let _: () = cmd(&mut c, &["SET", KEY_SHARD1, "b"]);
    // A command spanning both shards is logged once, as sent.
    let _: () = cmd(&mut c, &["MSET", KEY_SHARD0, "1", KEY_SHARD1, "2"]);
    let _: () = cmd(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "-1"]);
    let log = slowlog(&mut c, "-1");
    let argvs: Vec<Vec<String>> = log.iter().map(|e| e.2.clone()).collect();
    let want: Vec<Vec<String>> = [
        vec!["MSET", KEY_SHARD0, "1", KEY_SHARD1, "2"],
        vec!["SET", KEY_SHARD1, "b"],
        vec!["SET", KEY_SHARD0, "a"],
        vec!["SLOWLOG", "RESET"],
    ]
    .iter()
    .map(|v| v.iter().map(|s| s.to_string()).collect())
    .collect();
    assert_eq!(argvs, want);
    assert!(log.windows(2).all(|w| w[0].0 > w[1].0), "ids descend");
    assert!(log.iter().all(|e| e.3 == "slowpoke"));
    let len: i64 = cmd(&mut c, &["SLOWLOG", "LEN"]);
    assert_eq!(len, 4);
    assert_eq!(slowlog(&mut c, "2").len(), 2);
    // slowlog-max-len bounds the merged log too.
    let _: () = cmd(&mut c, &["CONFIG", "SET", "slowlog-max-len", "3"]);
    let len: i64 = cmd(&mut c, &["SLOWLOG", "LEN"]);
    assert_eq!(len, 3);
    let err = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg("-2")
        .query::<Value>(&mut c)
        .unwrap_err();
    assert!(err
        .to_string()
        .contains("count should be greater than or equal to -1"));
}

#[test]
fn slowlog_trims_arguments_like_redis() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = cmd(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    let _: () = cmd(&mut c, &["SLOWLOG", "RESET"]);
    let long = "A".repeat(130);
    let _: i64 = cmd(&mut c, &["SADD", "set", "foo", &long]);
    let mut many = vec!["SADD".to_string(), "set2".to_string()];
    many.extend((0..40).map(|i| i.to_string()));
    let refs: Vec<&str> = many.iter().map(|s| s.as_str()).collect();
    let _: i64 = cmd(&mut c, &refs);
    let _: () = cmd(&mut c, &["CONFIG", "SET", "requirepass", ""]);
    let log = slowlog(&mut c, "3");
    assert_eq!(log[0].2, ["CONFIG", "SET", "requirepass", "(redacted)"]);
    assert_eq!(log[1].2.len(), 32);
    assert_eq!(log[1].2[31], "... (11 more arguments)");
    assert_eq!(
        log[2].2[3],
        format!("{}... (2 more bytes)", "A".repeat(128))
    );
}

#[test]
fn latency_histogram_and_latencystats() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = cmd(&mut c, &["CONFIG", "RESETSTAT"]);
    let _: () = cmd(&mut c, &["SET", KEY_SHARD0, "a"]);
    let _: () = cmd(&mut c, &["SET", KEY_SHARD1, "b"]);
    let _: Option<String> = cmd(&mut c, &["GET", KEY_SHARD1]);
    let _: i64 = cmd(&mut c, &["CLIENT", "ID"]);
    let v: Value = cmd(&mut c, &["LATENCY", "HISTOGRAM", "set", "client", "nosuch"]);
    let Value::Array(items) = v else {
        panic!("{v:?}")
    };
    let names: Vec<String> = items
        .iter()
        .step_by(2)
        .map(|n| redis::from_redis_value(n).expect("name"))
        .collect();
    assert_eq!(names, ["client|id", "set"]);
    let Value::Array(set) = &items[3] else {
        panic!()
    };
    assert_eq!(set[0], Value::BulkString(b"calls".to_vec()));
    assert_eq!(set[1], Value::Int(2));
    let Value::Array(buckets) = &set[3] else {
        panic!()
    };
    assert!(!buckets.is_empty());
    // The last cumulative count is every call.
    assert_eq!(buckets.last(), Some(&Value::Int(2)));

    let info: String = cmd(&mut c, &["INFO", "latencystats"]);
    assert!(info.contains("# Latencystats"));
    let line = info
        .lines()
        .find(|l| l.starts_with("latency_percentiles_usec_set:"))
        .expect("set line");
    assert!(line.contains("p50=") && line.contains(",p99=") && line.contains(",p99.9="));
    let _: () = cmd(
        &mut c,
        &["CONFIG", "SET", "latency-tracking-info-percentiles", "90"],
    );
    let info: String = cmd(&mut c, &["INFO", "latencystats"]);
    assert!(info.contains("latency_percentiles_usec_get:p90="));
    let _: () = cmd(&mut c, &["CONFIG", "SET", "latency-tracking", "no"]);
    let _: () = cmd(&mut c, &["CONFIG", "RESETSTAT"]);
    let _: () = cmd(&mut c, &["SET", KEY_SHARD0, "a"]);
    let v: Value = cmd(&mut c, &["LATENCY", "HISTOGRAM"]);
    assert_eq!(v, Value::Array(vec![]));
}

#[test]
fn commandstats_time_calls_and_name_subcommands() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = cmd(&mut c, &["CONFIG", "RESETSTAT"]);
    let _: () = cmd(&mut c, &["SET", KEY_SHARD0, "a"]);
    let _: () = cmd(&mut c, &["SET", KEY_SHARD1, "b"]);
    let _: String = cmd(&mut c, &["CLIENT", "LIST"]);
    let _ = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("x")
        .query::<Value>(&mut c);
    let _ = redis::cmd("INCR").arg(KEY_SHARD1).query::<Value>(&mut c);
    let info: String = cmd(&mut c, &["INFO", "commandstats"]);
    let line = |name: &str| {
        info.lines()
            .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
            .unwrap_or_else(|| panic!("no {name} in {info}"))
            .to_string()
    };
    let set = line("set");
    assert!(set.starts_with("cmdstat_set:calls=2,usec="), "{set}");
    assert!(set.contains(",usec_per_call=") && set.ends_with("rejected_calls=0,failed_calls=0"));
    let list = line("client|list");
    assert!(
        list.contains("calls=2,") && list.ends_with("failed_calls=1"),
        "{list}"
    );
    assert!(line("incr").ends_with("failed_calls=1"));
    let info: String = cmd(&mut c, &["INFO", "errorstats"]);
    assert!(info.contains("errorstat_ERR:count="), "{info}");
}

#[test]
fn client_list_and_info_name_the_subcommand() {
    let s = Server::start(2);
    let mut c = s.client();
    let list: String = cmd(&mut c, &["CLIENT", "LIST"]);
    assert!(list.contains(" cmd=client|list "), "{list}");
    let info: String = cmd(&mut c, &["CLIENT", "INFO"]);
    assert!(info.contains(" cmd=client|info "), "{info}");
    let err = redis::cmd("CLIENT")
        .arg("KILL")
        .query::<Value>(&mut c)
        .unwrap_err();
    assert!(err
        .to_string()
        .contains("wrong number of arguments for 'client|kill' command"));
}

#[test]
fn command_list_info_and_getkeys_know_subcommands() {
    let s = Server::start(2);
    let mut c = s.client();
    let all: Vec<String> = cmd(&mut c, &["COMMAND", "LIST"]);
    assert!(all.iter().any(|n| n == "client|list"));
    assert!(all.iter().any(|n| n == "get"));
    let cfg: Vec<String> = cmd(
        &mut c,
        &["COMMAND", "LIST", "FILTERBY", "PATTERN", "config|*re*"],
    );
    assert!(cfg.contains(&"config|resetstat".to_string()));
    let keys: Vec<String> = cmd(&mut c, &["COMMAND", "GETKEYS", "MEMORY", "USAGE", "k"]);
    assert_eq!(keys, ["k"]);
    let keys: Vec<String> = cmd(&mut c, &["COMMAND", "GETKEYS", "EVAL", "return 1", "0"]);
    assert!(keys.is_empty());
    let v: Value = cmd(
        &mut c,
        &[
            "COMMAND",
            "GETKEYSANDFLAGS",
            "LMOVE",
            "a",
            "b",
            "LEFT",
            "RIGHT",
        ],
    );
    let Value::Array(k) = v else { panic!() };
    assert_eq!(k.len(), 2);
    let v: Value = cmd(&mut c, &["COMMAND", "INFO", "config|get", "get|key"]);
    let Value::Array(e) = v else { panic!() };
    assert_eq!(e[1], Value::Nil);
    let Value::Array(entry) = &e[0] else { panic!() };
    assert_eq!(entry[0], Value::BulkString(b"config|get".to_vec()));
}

#[test]
fn latency_monitor_records_slow_commands() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = cmd(&mut c, &["CONFIG", "SET", "latency-monitor-threshold", "1"]);
    // A script that busy-waits ~20 ms.
    let script = "local t=redis.call('time') local s=t[1]*1000000+t[2] \
                  while true do local n=redis.call('time') \
                  if n[1]*1000000+n[2]-s > 20000 then break end end";
    let _: Value = cmd(&mut c, &["EVAL", script, "0"]);
    let v: Value = cmd(&mut c, &["LATENCY", "LATEST"]);
    let Value::Array(events) = v else { panic!() };
    let names: Vec<String> = events
        .iter()
        .map(|e| match e {
            Value::Array(f) => redis::from_redis_value(&f[0]).expect("name"),
            _ => panic!(),
        })
        .collect();
    assert!(names.contains(&"command".to_string()), "{names:?}");
    let hist: Value = cmd(&mut c, &["LATENCY", "HISTORY", "command"]);
    let Value::Array(h) = hist else { panic!() };
    assert!(!h.is_empty());
    let doctor: String = cmd(&mut c, &["LATENCY", "DOCTOR"]);
    assert!(doctor.contains("command:"));
    // Stop monitoring first: the reset itself might take a millisecond.
    let _: () = cmd(&mut c, &["CONFIG", "SET", "latency-monitor-threshold", "0"]);
    let n: i64 = cmd(&mut c, &["LATENCY", "RESET"]);
    assert!(n >= 1);
    let v: Value = cmd(&mut c, &["LATENCY", "LATEST"]);
    assert_eq!(v, Value::Array(vec![]));
}

#[test]
fn monitor_sees_commands_of_every_shard() {
    let s = Server::start(2);
    let mut mon = s.raw();
    mon.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    std::io::Write::write_all(&mut mon, b"MONITOR\r\n").expect("write");
    let mut rd = BufReader::new(mon);
    let mut line = String::new();
    rd.read_line(&mut line).expect("ok");
    assert_eq!(line, "+OK\r\n");
    let mut c = s.client();
    let _: () = cmd(&mut c, &["SET", KEY_SHARD0, "a"]);
    let _: () = cmd(&mut c, &["SET", KEY_SHARD1, "b"]);
    for want in [
        format!("\"SET\" \"{KEY_SHARD0}\" \"a\""),
        format!("\"SET\" \"{KEY_SHARD1}\" \"b\""),
    ] {
        // Skip what the client library sends on connect (CLIENT SETINFO ...).
        loop {
            line.clear();
            rd.read_line(&mut line).expect("line");
            if line.contains("\"SET\"") {
                break;
            }
        }
        assert!(
            line.starts_with('+') && line.contains(" [0 127.0.0.1:"),
            "{line}"
        );
        assert!(line.trim_end().ends_with(&want), "{line}");
    }
}
