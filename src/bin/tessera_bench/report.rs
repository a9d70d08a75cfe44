//! The final report: per-command and overall throughput and latency percentiles, as
//! a text table (stdout) and as JSON (`--json`).

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use super::args::{KeyPattern, Plan, Stop};
use super::worker::{new_histogram, ThreadStats};

/// Percentiles reported everywhere, with their JSON names.
pub const PERCENTILES: [(&str, f64); 5] = [
    ("p50", 50.0),
    ("p90", 90.0),
    ("p99", 99.0),
    ("p99.9", 99.9),
    ("p99.99", 99.99),
];

pub struct Line {
    pub name: &'static str,
    pub hist: Histogram<u64>,
}

impl Line {
    fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Latency at a percentile, microseconds.
    fn us(&self, p: f64) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        self.hist.value_at_quantile(p / 100.0) as f64 / 1000.0
    }

    fn max_us(&self) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        self.hist.max() as f64 / 1000.0
    }

    fn mean_us(&self) -> f64 {
        self.hist.mean() / 1000.0
    }
}

pub struct Report {
    pub plan: Plan,
    pub seconds: f64,
    pub lines: [Line; 3],
    pub hits: u64,
    pub misses: u64,
    pub errors: u64,
    pub error_samples: Vec<String>,
}

impl Report {
    pub fn build(plan: &Plan, seconds: f64, threads: Vec<ThreadStats>) -> Report {
        let mut set = new_histogram();
        let mut get = new_histogram();
        let (mut hits, mut misses, mut errors) = (0, 0, 0);
        let mut error_samples = Vec::new();
        for t in threads {
            let _ = set.add(&t.set);
            let _ = get.add(&t.get);
            hits += t.hits;
            misses += t.misses;
            errors += t.errors;
            for e in t.error_samples {
                if error_samples.len() < 5 {
                    error_samples.push(e);
                }
            }
        }
        let mut all = set.clone();
        let _ = all.add(&get);
        Report {
            plan: plan.clone(),
            seconds,
            lines: [
                Line {
                    name: "SET",
                    hist: set,
                },
                Line {
                    name: "GET",
                    hist: get,
                },
                Line {
                    name: "TOTAL",
                    hist: all,
                },
            ],
            hits,
            misses,
            errors,
            error_samples,
        }
    }

    fn rate(&self, n: u64) -> f64 {
        if self.seconds > 0.0 {
            n as f64 / self.seconds
        } else {
            0.0
        }
    }

    pub fn text(&self) -> String {
        let p = &self.plan;
        let mut s = String::new();
        let mode = match p.rate {
            Some(r) => format!("open loop at {r:.0} req/s (latency from scheduled send time)"),
            None => "closed loop".to_string(),
        };
        let _ = writeln!(
            s,
            "{} threads x {} connections, pipeline {}, ratio {}:{}, keys {} {}..={}, {mode}",
            p.threads,
            p.clients,
            p.pipeline,
            p.sets,
            p.gets,
            pattern_name(p.pattern),
            p.key_min,
            p.key_max
        );
        let _ = writeln!(
            s,
            "{:.2} s, {} requests, {} errors\n",
            self.seconds,
            self.lines[2].count(),
            self.errors
        );
        let _ = writeln!(
            s,
            "{:<6} {:>12} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}",
            "Type",
            "Ops/sec",
            "Hits/sec",
            "Misses/sec",
            "p50 us",
            "p90 us",
            "p99 us",
            "p99.9 us",
            "p99.99 us",
            "max us",
            "mean us"
        );
        for l in &self.lines {
            let (h, m) = match l.name {
                "SET" => ("-".to_string(), "-".to_string()),
                _ => (
                    format!("{:.2}", self.rate(self.hits)),
                    format!("{:.2}", self.rate(self.misses)),
                ),
            };
            let _ = write!(
                s,
                "{:<6} {:>12.2} {:>11} {:>11}",
                l.name,
                self.rate(l.count()),
                h,
                m
            );
            for (_, q) in PERCENTILES {
                let _ = write!(s, " {:>9.1}", l.us(q));
            }
            let _ = writeln!(s, " {:>10.1} {:>10.1}", l.max_us(), l.mean_us());
        }
        let _ = writeln!(s, "\nGET hits {} misses {}", self.hits, self.misses);
        for e in &self.error_samples {
            let _ = writeln!(s, "error reply: {e}");
        }
        s
    }

    pub fn json(&self) -> String {
        let p = &self.plan;
        let mut s = String::from("{\n");
        let _ = writeln!(s, "  \"config\": {{");
        let _ = writeln!(s, "    \"server\": \"{}\",", p.addr);
        let _ = writeln!(s, "    \"threads\": {},", p.threads);
        let _ = writeln!(s, "    \"clients_per_thread\": {},", p.clients);
        let _ = writeln!(s, "    \"pipeline\": {},", p.pipeline);
        let _ = writeln!(s, "    \"ratio\": \"{}:{}\",", p.sets, p.gets);
        let _ = writeln!(s, "    \"key_pattern\": \"{}\",", pattern_name(p.pattern));
        let _ = writeln!(s, "    \"key_min\": {},", p.key_min);
        let _ = writeln!(s, "    \"key_max\": {},", p.key_max);
        let _ = writeln!(s, "    \"data_size_min\": {},", p.size_min);
        let _ = writeln!(s, "    \"data_size_max\": {},", p.size_max);
        match p.stop {
            Stop::Requests(n) => {
                let _ = writeln!(s, "    \"requests_per_client\": {n},");
            }
            Stop::Time(d) => {
                let _ = writeln!(s, "    \"test_time_s\": {},", d.as_secs_f64());
            }
        }
        match p.rate {
            Some(r) => {
                let _ = writeln!(s, "    \"mode\": \"open\",\n    \"rate\": {r},");
            }
            None => {
                let _ = writeln!(s, "    \"mode\": \"closed\",\n    \"rate\": null,");
            }
        }
        let _ = writeln!(s, "    \"seed\": {}", p.seed);
        let _ = writeln!(s, "  }},");
        let _ = writeln!(s, "  \"duration_s\": {:.6},", self.seconds);
        let _ = writeln!(s, "  \"errors\": {},", self.errors);
        let _ = writeln!(s, "  \"hits\": {},", self.hits);
        let _ = writeln!(s, "  \"misses\": {},", self.misses);
        let _ = writeln!(s, "  \"commands\": {{");
        for (i, l) in self.lines.iter().enumerate() {
            let key = if l.name == "TOTAL" { "ALL" } else { l.name };
            let _ = write!(
                s,
                "    \"{key}\": {{\"count\": {}, \"ops_per_sec\": {:.3}",
                l.count(),
                self.rate(l.count())
            );
            if l.name != "SET" {
                let _ = write!(
                    s,
                    ", \"hits_per_sec\": {:.3}, \"misses_per_sec\": {:.3}",
                    self.rate(self.hits),
                    self.rate(self.misses)
                );
            }
            let _ = write!(s, ", \"latency_us\": {{");
            for (name, q) in PERCENTILES {
                let _ = write!(s, "\"{name}\": {:.3}, ", l.us(q));
            }
            let _ = write!(
                s,
                "\"max\": {:.3}, \"mean\": {:.3}}}}}",
                l.max_us(),
                l.mean_us()
            );
            let _ = writeln!(s, "{}", if i + 1 < self.lines.len() { "," } else { "" });
        }
        let _ = writeln!(s, "  }}");
        s.push_str("}\n");
        s
    }
}

fn pattern_name(p: KeyPattern) -> String {
    match p {
        KeyPattern::Uniform => "uniform".into(),
        KeyPattern::Sequential => "sequential".into(),
        KeyPattern::Zipf(e) => format!("zipf:{e}"),
    }
}
