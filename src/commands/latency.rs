//! LATENCY (histograms and the latency monitor) and SLOWLOG. Every shard records what
//! runs on it (src/observe.rs); these commands gather the shards' parts and merge them:
//! histograms are summed, event series merged per second, slowlog entries ordered by
//! their process-wide id.

use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;

use hdrhistogram::Histogram;

use super::keys::reply_help;
use super::strings::cmd;
use super::table::{self, flags::*, CommandSpec, KeySpec, Kind};
use super::{parse_i64, GlobalCtx};
use crate::observe::{merge_histograms, EventSeries, SlowEntry};
use crate::protocol::reply::ReplyWriter;

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec { group: "server", acl: &["@slow"], ..cmd!("latency", -2, 0, KeySpec::None, Kind::Global(latency), "2.8.13", "A container for latency diagnostics commands") },
    CommandSpec { group: "server", acl: &["@admin", "@slow", "@dangerous"], ..cmd!("monitor", 1, ADMIN | NOSCRIPT | LOADING | STALE, KeySpec::None, Kind::Client(monitor), "1.0.0", "Listen for all requests received by the server in real time") },
    CommandSpec { group: "server", acl: &["@slow"], ..cmd!("slowlog", -2, 0, KeySpec::None, Kind::Global(slowlog), "2.2.12", "A container for slow log commands") },
];

const LATENCY_HELP: &[&str] = &[
    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return a human readable latency analysis report.",
    "GRAPH <event>",
    "    Return an ASCII latency graph for the <event> class.",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
    "    If no commands are specified then all histograms are replied.",
    "HELP",
    "    Prints this help.",
];

const SLOWLOG_HELP: &[&str] = &[
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
    "    Prints this help.",
];

/// Every shard's event series, merged per event name (sorted by name).
async fn merged_events(g: &mut GlobalCtx<'_>) -> Vec<(&'static str, EventSeries)> {
    let parts = g
        .session
        .cell
        .call_all(|c| {
            let d = c.data.borrow();
            d.observe
                .events
                .iter()
                .map(|(k, v)| (*k, v.clone()))
                .collect::<Vec<_>>()
        })
        .await;
    let mut all: Vec<(&'static str, EventSeries)> = Vec::new();
    for (name, series) in parts.into_iter().flatten() {
        match all.iter_mut().find(|(n, _)| *n == name) {
            Some((_, s)) => s.merge(&series),
            None => all.push((name, series)),
        }
    }
    all.sort_by_key(|(n, _)| *n);
    all
}

/// MONITOR itself is taken over by the connection (it streams the feed); this only
/// runs where the connection does not, e.g. from a script, which Redis refuses too.
fn monitor(ctx: &mut super::ClientCtx) {
    ctx.out.error("ERR MONITOR isn't allowed in this context");
}

fn latency<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let sub = String::from_utf8_lossy(g.arg(1)).to_ascii_lowercase();
        match sub.as_str() {
            "help" => reply_help(&mut g.w(), LATENCY_HELP),
            "latest" => {
                let events = merged_events(g).await;
                let mut w = g.w();
                w.array_len(events.len());
                for (name, s) in &events {
                    let (t, ms) = s.samples.back().copied().unwrap_or((0, 0));
                    w.array_len(4);
                    w.bulk(name.as_bytes());
                    w.integer(t as i64);
                    w.integer(ms as i64);
                    w.integer(s.max as i64);
                }
            }
            "history" => {
                let want = g.arg(2).to_vec();
                let events = merged_events(g).await;
                let mut w = g.w();
                match events.iter().find(|(n, _)| n.as_bytes() == want.as_slice()) {
                    None => w.array_len(0),
                    Some((_, s)) => {
                        w.array_len(s.samples.len());
                        for &(t, ms) in &s.samples {
                            w.array_len(2);
                            w.integer(t as i64);
                            w.integer(ms as i64);
                        }
                    }
                }
            }
            "graph" => {
                let want = g.arg(2).to_vec();
                let events = merged_events(g).await;
                match events.iter().find(|(n, _)| n.as_bytes() == want.as_slice()) {
                    None => {
                        let msg = format!(
                            "ERR No samples available for event '{}'",
                            String::from_utf8_lossy(&want)
                        );
                        g.error(&msg)
                    }
                    Some((name, s)) => {
                        let text = graph(name, s);
                        g.w().verbatim("txt", text.as_bytes())
                    }
                }
            }
            "doctor" => {
                let enabled = g
                    .session
                    .cell
                    .data
                    .borrow()
                    .config
                    .latency_monitor_threshold()
                    > 0;
                let events = merged_events(g).await;
                let text = doctor(enabled, &events);
                g.w().verbatim("txt", text.as_bytes())
            }
            "reset" => {
                let names: Vec<Vec<u8>> = g.args[2..].to_vec();
                let parts = g
                    .session
                    .cell
                    .call_all(move |c| {
                        let mut d = c.data.borrow_mut();
                        let ev = &mut d.observe.events;
                        let mut gone: Vec<&'static str> = Vec::new();
                        if names.is_empty() {
                            gone.extend(ev.keys().copied());
                            ev.clear();
                        } else {
                            for n in &names {
                                let key = ev.keys().copied().find(|k| k.as_bytes() == n.as_slice());
                                if let Some(k) = key {
                                    ev.remove(k);
                                    gone.push(k);
                                }
                            }
                        }
                        gone
                    })
                    .await;
                let mut gone: Vec<&'static str> = parts.into_iter().flatten().collect();
                gone.sort_unstable();
                gone.dedup();
                g.w().integer(gone.len() as i64);
            }
            "histogram" => histogram(g).await,
            _ => g.unknown_subcommand("LATENCY"),
        }
    })
}

/// LATENCY HISTOGRAM [command ...]: the named commands (a container stands for its
/// subcommands), or every command called so far.
async fn histogram(g: &mut GlobalCtx<'_>) {
    let t = table::table();
    let wanted: Option<Vec<u16>> = (g.args.len() > 2).then(|| {
        let mut ids = Vec::new();
        for a in &g.args[2..] {
            let Some(id) = t.lookup_full(a) else { continue };
            ids.push(id);
            if t.stat_sub(id).is_none() {
                let n = t.specs.len();
                ids.extend(
                    t.subcommands(id)
                        .iter()
                        .filter_map(|s| t.lookup_full(s.name.as_bytes()))
                        .filter(|&x| x as usize >= n),
                );
            }
        }
        ids
    });
    let parts = g
        .session
        .cell
        .call_all(move |c| c.data.borrow().observe.histograms(wanted.as_deref()))
        .await;
    let mut all: Vec<(u16, Histogram<u64>)> = Vec::new();
    for p in parts {
        merge_histograms(&mut all, p);
    }
    all.sort_by_key(|(id, _)| t.stat_name(*id));
    let mut w = g.w();
    w.map_len(all.len());
    for (id, h) in &all {
        w.bulk(t.stat_name(*id).as_bytes());
        reply_cdf(&mut w, h);
    }
}

/// One command's `calls` and cumulative `histogram_usec` buckets (powers of two
/// from 1024 ns, as Redis iterates them).
fn reply_cdf(w: &mut ReplyWriter, h: &Histogram<u64>) {
    w.map_len(2);
    w.bulk(b"calls");
    w.integer(h.len() as i64);
    w.bulk(b"histogram_usec");
    let mut buckets = Vec::new();
    let mut cumulative = 0u64;
    for v in h.iter_log(1024, 2.0) {
        let added = v.count_since_last_iteration();
        cumulative += added;
        if added > 0 {
            buckets.push((v.value_iterated_to() / 1000, cumulative));
        }
    }
    w.map_len(buckets.len());
    for (us, n) in buckets {
        w.integer(us as i64);
        w.integer(n as i64);
    }
}

/// The `latency_percentiles_usec_<cmd>` lines of INFO latencystats.
pub fn render_latencystats(out: &mut String, hists: &[(u16, Histogram<u64>)], percentiles: &[f64]) {
    let t = table::table();
    let mut sorted: Vec<&(u16, Histogram<u64>)> = hists.iter().collect();
    sorted.sort_by_key(|(id, _)| t.stat_name(*id));
    for (id, h) in sorted {
        let _ = write!(out, "latency_percentiles_usec_{}:", t.stat_name(*id));
        for (i, p) in percentiles.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let v = h.value_at_percentile(*p) as f64 / 1000.0;
            let _ = write!(out, "p{}={:.3}", short_float(*p), v);
        }
        out.push_str("\r\n");
    }
}

/// A percentile as Redis's d2string writes it: `50`, `99.9`.
fn short_float(p: f64) -> String {
    if p.fract() == 0.0 && p.abs() < 1e15 {
        format!("{}", p as i64)
    } else {
        format!("{p}")
    }
}

/// A small ASCII chart of an event's samples: one column per sample, height by
/// latency relative to the series' range.
fn graph(name: &str, s: &EventSeries) -> String {
    let high = s.samples.iter().map(|x| x.1).max().unwrap_or(0);
    let low = s.samples.iter().map(|x| x.1).min().unwrap_or(0);
    let mut out = format!(
        "{name} - high {high} ms, low {low} ms (all time high {} ms)\n",
        s.max
    );
    out.push_str(&"-".repeat(80));
    out.push('\n');
    const ROWS: u64 = 4;
    for row in (0..ROWS).rev() {
        for &(_, ms) in &s.samples {
            let level = if high == low {
                ROWS - 1
            } else {
                (ms - low) * (ROWS - 1) / (high - low)
            };
            out.push(match level.cmp(&row) {
                std::cmp::Ordering::Greater => '|',
                std::cmp::Ordering::Equal => '_',
                std::cmp::Ordering::Less => ' ',
            });
        }
        out.push('\n');
    }
    out
}

/// LATENCY DOCTOR: a per-event summary in Redis's words.
fn doctor(enabled: bool, events: &[(&'static str, EventSeries)]) -> String {
    if !enabled && events.is_empty() {
        return "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n".to_string();
    }
    if events.is_empty() {
        return "Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and think things over.\n".to_string();
    }
    let mut out = String::from(
        "Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n",
    );
    for (i, (name, s)) in events.iter().enumerate() {
        let n = s.samples.len() as u64;
        let avg = s.samples.iter().map(|x| x.1).sum::<u64>() / n.max(1);
        let mad = s.samples.iter().map(|x| x.1.abs_diff(avg)).sum::<u64>() / n.max(1);
        let period = match (s.samples.front(), s.samples.back()) {
            (Some(a), Some(b)) if n > 1 => (b.0 - a.0) as f64 / (n - 1) as f64,
            _ => 1.0,
        };
        let _ = writeln!(
            out,
            "{}. {name}: {n} latency spikes (average {avg}ms, mean deviation {mad}ms, period {period:.2} sec). Worst all time event {}ms.",
            i + 1,
            s.max
        );
    }
    out.push_str("\nI have a few advices for you:\n\n- Check your Slow Log to understand what are the commands you are running which are too slow to execute. Please check https://redis.io/commands/slowlog for more information.\n- Deleting, expiring or evicting (because of maxmemory policy) large objects is a blocking operation. If you have very large objects that are often deleted, expired, or evicted, try to fragment those objects into multiple smaller objects.\n");
    out
}

fn slowlog<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let sub = String::from_utf8_lossy(g.arg(1)).to_ascii_lowercase();
        let max = g.session.cell.data.borrow().config.slowlog_max_len() as usize;
        match sub.as_str() {
            "help" => reply_help(&mut g.w(), SLOWLOG_HELP),
            "reset" => {
                g.session
                    .cell
                    .call_all(|c| c.data.borrow_mut().observe.slowlog.clear())
                    .await;
                g.w().ok();
            }
            "len" => {
                let n: usize = g
                    .session
                    .cell
                    .call_all(|c| c.data.borrow().observe.slowlog.len())
                    .await
                    .into_iter()
                    .sum();
                g.w().integer(n.min(max) as i64);
            }
            "get" if g.args.len() <= 3 => {
                let count = if g.args.len() == 3 {
                    match parse_i64(g.arg(2)) {
                        Some(n) if n >= -1 => n,
                        _ => return g.error("ERR count should be greater than or equal to -1"),
                    }
                } else {
                    10
                };
                let take = if count < 0 {
                    max
                } else {
                    (count as usize).min(max)
                };
                let mut all: Vec<SlowEntry> = g
                    .session
                    .cell
                    .call_all(move |c| {
                        let d = c.data.borrow();
                        d.observe
                            .slowlog
                            .iter()
                            .take(take)
                            .cloned()
                            .collect::<Vec<_>>()
                    })
                    .await
                    .into_iter()
                    .flatten()
                    .collect();
                all.sort_unstable_by_key(|e| std::cmp::Reverse(e.id));
                all.truncate(take);
                let mut w = g.w();
                w.array_len(all.len());
                for e in &all {
                    w.array_len(6);
                    w.integer(e.id as i64);
                    w.integer(e.time as i64);
                    w.integer(e.usec as i64);
                    w.array_len(e.argv.len());
                    for a in &e.argv {
                        w.bulk(a);
                    }
                    w.bulk(e.peer.as_bytes());
                    w.bulk(&e.name);
                }
            }
            "get" => {
                let msg = format!(
                    "ERR unknown subcommand or wrong number of arguments for '{}'. Try SLOWLOG HELP.",
                    String::from_utf8_lossy(g.arg(1))
                );
                g.error(&msg)
            }
            _ => g.unknown_subcommand("SLOWLOG"),
        }
    })
}
