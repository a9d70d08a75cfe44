//! Command line of tessera-bench, validated into the plain values the workers use.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use clap::Parser;

/// A memtier_benchmark-style load generator for Redis-protocol servers (Tessera, Redis,
/// anything speaking RESP). Closed loop by default: each connection sends `--pipeline`
/// requests and waits for their replies. With `--rate` the load is open loop: requests
/// follow a fixed schedule and latency counts from each request's scheduled send time,
/// so a stalled server shows up in the percentiles (no coordinated omission).
#[derive(Parser, Debug, Clone)]
#[command(name = "tessera-bench", version)]
pub struct Args {
    /// Server host: an address in 127.0.0.0/8 or a name resolving there (only local
    /// servers may be loaded).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(short, long, default_value_t = 6379)]
    pub port: u16,
    /// Client threads.
    #[arg(short, long, default_value_t = 4)]
    pub threads: usize,
    /// Connections per thread.
    #[arg(short, long, default_value_t = 50)]
    pub clients: usize,
    /// SET:GET ratio: in every SET+GET requests, SET requests are SETs, then GETs.
    #[arg(long, default_value = "1:10")]
    pub ratio: String,
    /// uniform, sequential or zipf:<exponent> (rank 1 = --key-min is the hottest key).
    #[arg(long, default_value = "uniform")]
    pub key_pattern: String,
    #[arg(long, default_value = "key:")]
    pub key_prefix: String,
    /// Smallest key id (keys are <prefix><id>).
    #[arg(long, default_value_t = 0)]
    pub key_min: u64,
    /// Largest key id (inclusive).
    #[arg(long, default_value_t = 99_999)]
    pub key_max: u64,
    /// SET value size in bytes.
    #[arg(short, long, default_value_t = 32, conflicts_with = "data_size_range")]
    pub data_size: usize,
    /// SET value sizes drawn uniformly from MIN-MAX bytes.
    #[arg(long)]
    pub data_size_range: Option<String>,
    /// Requests in flight per connection (closed loop: sent together; open loop: the
    /// most that may be outstanding).
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Requests per connection (default 10000 unless --test-time is given).
    #[arg(short = 'n', long, conflicts_with = "test_time")]
    pub requests: Option<u64>,
    /// Run for this many seconds instead of a request count.
    #[arg(long)]
    pub test_time: Option<f64>,
    /// Open loop: total requests per second over all connections.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Seed of every random choice (keys, value sizes); connection i uses seed + i.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the final report as JSON to this file.
    #[arg(long)]
    pub json: Option<String>,
    /// No progress line on stderr.
    #[arg(long)]
    pub quiet: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyPattern {
    Uniform,
    Sequential,
    Zipf(f64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Requests(u64),
    Time(Duration),
}

/// Everything a worker needs, checked.
#[derive(Debug, Clone)]
pub struct Plan {
    pub addr: SocketAddr,
    pub threads: usize,
    pub clients: usize,
    pub sets: u64,
    pub gets: u64,
    pub pattern: KeyPattern,
    pub prefix: Vec<u8>,
    pub key_min: u64,
    pub key_max: u64,
    pub size_min: usize,
    pub size_max: usize,
    pub pipeline: usize,
    pub stop: Stop,
    /// Open-loop total rate (requests per second).
    pub rate: Option<f64>,
    pub seed: u64,
}

impl Plan {
    pub fn connections(&self) -> usize {
        self.threads * self.clients
    }
}

/// Largest value size accepted: well beyond any sensible benchmark, small enough that
/// the shared value buffer stays modest.
const MAX_DATA_SIZE: usize = 64 << 20;

pub fn plan(a: &Args) -> Result<Plan, String> {
    let addr = resolve_local(&a.host, a.port)?;
    if a.threads == 0 || a.threads > 1024 {
        return Err("--threads must be 1..=1024".into());
    }
    if a.clients == 0 || a.clients > 10_000 {
        return Err("--clients must be 1..=10000".into());
    }
    if a.pipeline == 0 || a.pipeline > 100_000 {
        return Err("--pipeline must be 1..=100000".into());
    }
    let (sets, gets) = parse_ratio(&a.ratio)?;
    let pattern = parse_pattern(&a.key_pattern)?;
    if a.key_min > a.key_max {
        return Err("--key-min must not exceed --key-max".into());
    }
    let (size_min, size_max) = match &a.data_size_range {
        Some(r) => parse_range(r)?,
        None => (a.data_size, a.data_size),
    };
    if size_max > MAX_DATA_SIZE {
        return Err(format!("data size above {MAX_DATA_SIZE} bytes"));
    }
    let stop = match (a.requests, a.test_time) {
        (_, Some(t)) if !(t.is_finite() && t > 0.0 && t < 1e7) => {
            return Err("--test-time must be a positive number of seconds".into())
        }
        (_, Some(t)) => Stop::Time(Duration::from_secs_f64(t)),
        (Some(0), None) => return Err("--requests must be at least 1".into()),
        (Some(n), None) => Stop::Requests(n),
        (None, None) => Stop::Requests(10_000),
    };
    if let Some(r) = a.rate {
        if !(r.is_finite() && r > 0.0) {
            return Err("--rate must be a positive number of requests per second".into());
        }
    }
    Ok(Plan {
        addr,
        threads: a.threads,
        clients: a.clients,
        sets,
        gets,
        pattern,
        prefix: a.key_prefix.as_bytes().to_vec(),
        key_min: a.key_min,
        key_max: a.key_max,
        size_min,
        size_max,
        pipeline: a.pipeline,
        stop,
        rate: a.rate,
        seed: a.seed,
    })
}

/// Resolves `host` and keeps only a 127.0.0.0/8 address: this tool generates heavy
/// load and must not be pointed at machines other than this one.
pub fn resolve_local(host: &str, port: u16) -> Result<SocketAddr, String> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve --host {host}: {e}"))?
        .collect();
    addrs
        .iter()
        .copied()
        .find(|a| matches!(a.ip(), IpAddr::V4(v4) if v4.octets()[0] == 127))
        .ok_or_else(|| {
            format!("refusing --host {host}: it must be in 127.0.0.0/8 (resolved to {addrs:?})")
        })
}

pub fn parse_ratio(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("--ratio must be SET:GET like 1:10, got {s:?}");
    let (a, b) = s.split_once(':').ok_or_else(bad)?;
    let sets: u64 = a.trim().parse().map_err(|_| bad())?;
    let gets: u64 = b.trim().parse().map_err(|_| bad())?;
    if sets + gets == 0 || sets > 1_000_000 || gets > 1_000_000 {
        return Err(bad());
    }
    Ok((sets, gets))
}

pub fn parse_pattern(s: &str) -> Result<KeyPattern, String> {
    match s {
        "uniform" | "R" => Ok(KeyPattern::Uniform),
        "sequential" | "S" => Ok(KeyPattern::Sequential),
        _ => {
            let exp = s
                .strip_prefix("zipf:")
                .and_then(|e| e.parse::<f64>().ok())
                .filter(|e| e.is_finite() && *e > 0.0)
                .ok_or_else(|| {
                    format!("--key-pattern must be uniform, sequential or zipf:<s> with s > 0, got {s:?}")
                })?;
            Ok(KeyPattern::Zipf(exp))
        }
    }
}

fn parse_range(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("--data-size-range must be MIN-MAX, got {s:?}");
    let (a, b) = s.split_once('-').ok_or_else(bad)?;
    let lo: usize = a.trim().parse().map_err(|_| bad())?;
    let hi: usize = b.trim().parse().map_err(|_| bad())?;
    if lo > hi {
        return Err(bad());
    }
    Ok((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Result<Plan, String> {
        let mut v = vec!["tessera-bench"];
        v.extend_from_slice(extra);
        let a = Args::try_parse_from(v).map_err(|e| e.to_string())?;
        plan(&a)
    }

    #[test]
    fn refuses_non_local_hosts() {
        assert!(resolve_local("127.0.0.1", 1).is_ok());
        assert!(resolve_local("127.1.2.3", 1).is_ok());
        assert!(resolve_local("localhost", 1).is_ok());
        assert!(resolve_local("10.0.0.1", 1)
            .unwrap_err()
            .contains("refusing"));
        assert!(resolve_local("::1", 1).is_err());
        assert!(resolve_local("0.0.0.0", 1).is_err());
    }

    #[test]
    fn parses_options() {
        let p = args(&[
            "--ratio",
            "1:0",
            "--key-pattern",
            "zipf:0.99",
            "--test-time",
            "2",
        ])
        .expect("valid");
        assert_eq!((p.sets, p.gets), (1, 0));
        assert_eq!(p.pattern, KeyPattern::Zipf(0.99));
        assert_eq!(p.stop, Stop::Time(Duration::from_secs(2)));
        let p = args(&["--data-size-range", "10-20", "-n", "5"]).expect("valid");
        assert_eq!(
            (p.size_min, p.size_max, p.stop),
            (10, 20, Stop::Requests(5))
        );
        assert!(args(&["--ratio", "0:0"]).is_err());
        assert!(args(&["--ratio", "3"]).is_err());
        assert!(args(&["--key-pattern", "zipf:-1"]).is_err());
        assert!(args(&["--key-pattern", "gauss"]).is_err());
        assert!(args(&["--key-min", "5", "--key-max", "4"]).is_err());
        assert!(args(&["--rate", "0"]).is_err());
        assert!(args(&["-n", "5", "--test-time", "1"]).is_err());
        assert!(args(&["--host", "192.168.1.1"]).is_err());
    }
}
