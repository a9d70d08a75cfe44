//! Black-box test of the `tessera-bench` load generator: a short closed-loop and
//! open-loop run against a started server, checked through the JSON report.

mod common;
use common::*;

use std::process::Command;

fn run_bench(server: &Server, extra: &[&str]) -> serde_json::Value {
    let dir = std::env::temp_dir().join(format!("tessera-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let json = dir.join(format!("{}.json", extra.join("_").replace(['/', ':'], "-")));
    let out = Command::new(env!("CARGO_BIN_EXE_tessera-bench"))
        .args(["--host", "127.0.0.1", "--port", &server.port.to_string()])
        .args([
            "--threads",
            "2",
            "--clients",
            "4",
            "--test-time",
            "1",
            "--quiet",
        ])
        .args(["--key-max", "999", "--seed", "7", "--json"])
        .arg(&json)
        .args(extra)
        .output()
        .expect("run tessera-bench");
    assert!(
        out.status.success(),
        "tessera-bench failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("TOTAL"), "no text report: {text}");
    let body = std::fs::read_to_string(&json).expect("json written");
    let _ = std::fs::remove_file(&json);
    serde_json::from_str(&body).expect("valid JSON")
}

fn f(v: &serde_json::Value, path: &[&str]) -> f64 {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_f64()
        .unwrap_or_else(|| panic!("{path:?} missing in {v}"))
}

#[test]
fn closed_loop_against_tessera() {
    let server = Server::start(2);
    let v = run_bench(&server, &["--ratio", "1:1", "--key-pattern", "zipf:0.9"]);
    assert_eq!(v["config"]["mode"], "closed");
    assert_eq!(f(&v, &["errors"]), 0.0);
    let sets = f(&v, &["commands", "SET", "count"]);
    let gets = f(&v, &["commands", "GET", "count"]);
    let all = f(&v, &["commands", "ALL", "count"]);
    assert!(sets > 0.0 && gets > 0.0, "{v}");
    assert_eq!(sets + gets, all);
    // 1:1 per connection: the counts differ by at most one per connection.
    assert!((sets - gets).abs() <= 8.0, "{v}");
    // Zipf over 1000 keys: once SETs went in, the hot keys exist and GETs hit.
    assert!(f(&v, &["hits"]) > 0.0, "{v}");
    assert_eq!(f(&v, &["hits"]) + f(&v, &["misses"]), gets);
    let d = f(&v, &["duration_s"]);
    assert!((0.9..5.0).contains(&d), "duration {d}");
    for cmd in ["SET", "GET", "ALL"] {
        let lat = |p: &str| f(&v, &["commands", cmd, "latency_us", p]);
        assert!(lat("p50") > 0.0);
        assert!(lat("p50") <= lat("p90"));
        assert!(lat("p90") <= lat("p99"));
        assert!(lat("p99") <= lat("p99.9"));
        assert!(lat("p99.9") <= lat("p99.99"));
        assert!(lat("p99.99") <= lat("max"));
    }
    // The server really holds what was SET.
    let mut c = server.client();
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).expect("dbsize");
    assert!(n > 0 && n <= 1000, "dbsize {n}");
}

#[test]
fn open_loop_keeps_the_schedule() {
    let server = Server::start(1);
    let v = run_bench(&server, &["--rate", "2000", "--ratio", "0:1"]);
    assert_eq!(v["config"]["mode"], "open");
    assert_eq!(f(&v, &["errors"]), 0.0);
    // 2000 req/s for one second: the schedule, not the server, sets the count.
    let all = f(&v, &["commands", "ALL", "count"]);
    assert!((1900.0..=2000.0).contains(&all), "count {all}");
    assert_eq!(f(&v, &["commands", "SET", "count"]), 0.0);
    assert_eq!(f(&v, &["misses"]), all);
}

#[test]
fn refuses_remote_hosts() {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera-bench"))
        .args(["--host", "192.0.2.1", "--port", "6379", "-n", "1"])
        .output()
        .expect("run tessera-bench");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("127.0.0.0/8"));
}
