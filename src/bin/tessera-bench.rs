//! tessera-bench: a memtier_benchmark-style SET/GET load generator for any server that
//! speaks RESP, with HdrHistogram latencies and an open-loop mode free of coordinated
//! omission. `tessera-bench --help` lists the options.

#[path = "tessera_bench/mod.rs"]
mod bench;

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

use bench::args::{self, Args, Plan};
use bench::report::Report;
use bench::worker::{self, Progress};

fn main() {
    let a = Args::parse();
    let plan = match args::plan(&a) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("tessera-bench: {e}");
            std::process::exit(2);
        }
    };
    match run(&plan, a.quiet) {
        Ok(report) => {
            print!("{}", report.text());
            if let Some(path) = &a.json {
                if let Err(e) = std::fs::write(path, report.json()) {
                    eprintln!("tessera-bench: writing {path}: {e}");
                    std::process::exit(1);
                }
            }
            if report.errors > 0 {
                std::process::exit(3);
            }
        }
        Err(e) => {
            eprintln!("tessera-bench: {e}");
            std::process::exit(1);
        }
    }
}

fn run(plan: &Plan, quiet: bool) -> Result<Report, String> {
    // Every connection is open before the clock starts, so connects are not measured.
    let mut socks = Vec::with_capacity(plan.threads);
    for t in 0..plan.threads {
        socks.push(worker::connect(plan, t)?);
    }
    let value: Arc<Vec<u8>> = Arc::new((0..plan.size_max).map(|i| b'a' + (i % 26) as u8).collect());
    let progress = Arc::new(Progress::new());
    let start = Instant::now();
    let mut handles = Vec::with_capacity(plan.threads);
    for (t, s) in socks.into_iter().enumerate() {
        let plan = plan.clone();
        let value = value.clone();
        let progress = progress.clone();
        let h = std::thread::Builder::new()
            .name(format!("bench-{t}"))
            .spawn(move || {
                let r = worker::run(&plan, t, s, &value, start, &progress);
                if r.is_err() {
                    progress.abort.store(true, Ordering::Relaxed);
                }
                r
            })
            .map_err(|e| format!("spawning thread {t}: {e}"))?;
        handles.push(h);
    }
    report_progress(&handles, &progress, start, quiet);
    let seconds = start.elapsed().as_secs_f64();
    let mut stats = Vec::with_capacity(handles.len());
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(s)) => stats.push(s),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert_with(|| "a client thread panicked".to_string());
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    Ok(Report::build(plan, seconds, stats))
}

/// Prints one line a second to stderr until every thread is done: throughput over the
/// last second and the latency percentiles of the whole run so far.
fn report_progress<T>(
    handles: &[std::thread::JoinHandle<T>],
    progress: &Progress,
    start: Instant,
    quiet: bool,
) {
    let mut last_ops = 0;
    let mut last_t = start;
    let mut next = start + Duration::from_secs(1);
    while !handles.iter().all(|h| h.is_finished()) {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        if now < next {
            continue;
        }
        next += Duration::from_secs(1);
        let ops = progress.ops.load(Ordering::Relaxed);
        let rate = (ops - last_ops) as f64 / now.duration_since(last_t).as_secs_f64();
        last_ops = ops;
        last_t = now;
        if quiet {
            continue;
        }
        let (p50, p99) = match progress.hist.lock() {
            Ok(h) if !h.is_empty() => (
                h.value_at_quantile(0.5) as f64 / 1000.0,
                h.value_at_quantile(0.99) as f64 / 1000.0,
            ),
            _ => (0.0, 0.0),
        };
        let mut err = std::io::stderr().lock();
        let _ = writeln!(
            err,
            "[{:>4.0}s] {:>10.0} ops/s  p50 {:>8.1} us  p99 {:>8.1} us  ({} requests)",
            now.duration_since(start).as_secs_f64(),
            rate,
            p50,
            p99,
            ops
        );
    }
}
