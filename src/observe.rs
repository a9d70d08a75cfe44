//! Latency observability, per shard (DESIGN.md §2: "stats, slowlog, latency
//! histograms"): per-command latency histograms (hdrhistogram, as Redis 7's
//! `latency-tracking`), the latency monitor's event series (`latency-monitor-threshold`)
//! and the slow log. Each shard records what runs on it without any sharing; LATENCY,
//! SLOWLOG and INFO merge the shards' parts when asked.
//!
//! Timing costs one monotonic clock read per command (the end of one command is the
//! start of the next), and none at all when tracking, slowlog and the latency monitor
//! are all off.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashMap;
use hdrhistogram::Histogram;

use crate::commands::{table::flags, Args};
use crate::config::Config;

/// Redis's histogram bounds: 1 ns .. 1 s, two significant digits; values in ns.
const HIST_MIN_NS: u64 = 1;
const HIST_MAX_NS: u64 = 1_000_000_000;
const HIST_SIGFIG: u8 = 2;

/// Samples kept per latency event (Redis's LATENCY_TS_LEN).
const EVENT_SAMPLES: usize = 160;

/// Slowlog argv limits (Redis's SLOWLOG_ENTRY_MAX_ARGC / _STRING).
const SLOW_MAX_ARGC: usize = 32;
const SLOW_MAX_STRING: usize = 128;

/// Slowlog ids are process-wide, so entries of different shards sort into one log.
static SLOWLOG_NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A command's argv as the slowlog keeps it, with the time it ran and how long.
#[derive(Debug, Clone)]
pub struct SlowRecord {
    pub time: u64,
    pub usec: u64,
    pub argv: Vec<Vec<u8>>,
}

/// One slowlog entry (SLOWLOG GET's six fields).
#[derive(Debug, Clone)]
pub struct SlowEntry {
    pub id: u64,
    pub time: u64,
    pub usec: u64,
    pub argv: Vec<Vec<u8>>,
    pub peer: String,
    pub name: Vec<u8>,
}

/// One latency monitor event: (unix seconds, ms) samples, oldest first, and the max.
#[derive(Debug, Clone, Default)]
pub struct EventSeries {
    pub samples: VecDeque<(u64, u64)>,
    pub max: u64,
}

impl EventSeries {
    /// Redis's latencyAddSample: one sample per second (the worst one wins).
    pub fn add(&mut self, time: u64, ms: u64) {
        self.max = self.max.max(ms);
        if let Some(last) = self.samples.back_mut() {
            if last.0 == time {
                last.1 = last.1.max(ms);
                return;
            }
        }
        if self.samples.len() == EVENT_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((time, ms));
    }

    /// Folds another shard's series of the same event into this one.
    pub fn merge(&mut self, other: &EventSeries) {
        let mut all: Vec<(u64, u64)> = self.samples.iter().chain(&other.samples).copied().collect();
        all.sort_unstable();
        self.samples.clear();
        self.max = self.max.max(other.max);
        let max = self.max;
        for (t, ms) in all {
            self.add(t, ms);
        }
        self.max = max;
    }
}

/// The per-shard recorder.
pub struct Observer {
    /// Per stat id (see `CommandTable::stat_id`), created on first call.
    hist: Vec<Option<Box<Histogram<u64>>>>,
    pub slowlog: VecDeque<SlowEntry>,
    pub events: HashMap<&'static str, EventSeries>,
    // Cached configuration, refreshed on CONFIG SET.
    tracking: bool,
    slower_than: i64,
    slowlog_max: usize,
    threshold_ms: u64,
}

impl Observer {
    pub fn new(config: &Config) -> Observer {
        let mut o = Observer {
            hist: Vec::new(),
            slowlog: VecDeque::new(),
            events: HashMap::new(),
            tracking: false,
            slower_than: -1,
            slowlog_max: 0,
            threshold_ms: 0,
        };
        o.refresh(config);
        o
    }

    /// Re-reads the settings this recorder depends on (after CONFIG SET).
    pub fn refresh(&mut self, config: &Config) {
        self.tracking = config.latency_tracking();
        self.slower_than = config.slowlog_log_slower_than();
        self.slowlog_max = config.slowlog_max_len() as usize;
        self.threshold_ms = config.latency_monitor_threshold();
        while self.slowlog.len() > self.slowlog_max {
            self.slowlog.pop_back();
        }
    }

    /// Whether commands need timing at all.
    #[inline]
    pub fn timing(&self) -> bool {
        self.tracking || self.slower_than >= 0 || self.threshold_ms > 0
    }

    /// Whether a command that took `usec` belongs in the slow log.
    #[inline]
    pub fn is_slow(&self, usec: u64) -> bool {
        self.slower_than >= 0 && usec >= self.slower_than as u64
    }

    /// Records one call of stat id `id` (whose flags are `cmd_flags`) that took `ns`.
    #[inline]
    pub fn record(&mut self, id: u16, cmd_flags: u32, ns: u64) {
        if self.tracking {
            self.histogram(id)
                .saturating_record(ns.clamp(HIST_MIN_NS, HIST_MAX_NS));
        }
        let ms = ns / 1_000_000;
        if self.threshold_ms > 0 && ms >= self.threshold_ms {
            let event = if cmd_flags & flags::FAST != 0 {
                "fast-command"
            } else {
                "command"
            };
            self.add_event(event, ms);
        }
    }

    fn histogram(&mut self, id: u16) -> &mut Histogram<u64> {
        let i = id as usize;
        if i >= self.hist.len() {
            self.hist.resize_with(i + 1, || None);
        }
        self.hist[i].get_or_insert_with(|| {
            Box::new(
                Histogram::new_with_bounds(HIST_MIN_NS, HIST_MAX_NS, HIST_SIGFIG)
                    .expect("constant histogram bounds are valid"),
            )
        })
    }

    /// A latency monitor sample for a non-command event (expire-cycle ...), if it
    /// reaches the threshold.
    pub fn add_event_if_needed(&mut self, event: &'static str, ms: u64) {
        if self.threshold_ms > 0 && ms >= self.threshold_ms {
            self.add_event(event, ms);
        }
    }

    fn add_event(&mut self, event: &'static str, ms: u64) {
        let now = crate::util::now_ms() / 1000;
        self.events.entry(event).or_default().add(now, ms);
    }

    /// Adds a slowlog entry, dropping the oldest beyond `slowlog-max-len`.
    pub fn push_slow(&mut self, rec: SlowRecord, peer: String, name: Vec<u8>) {
        if self.slowlog_max == 0 {
            return;
        }
        let id = SLOWLOG_NEXT_ID.fetch_add(1, Ordering::Relaxed);
        self.slowlog.push_front(SlowEntry {
            id,
            time: rec.time,
            usec: rec.usec,
            argv: rec.argv,
            peer,
            name,
        });
        while self.slowlog.len() > self.slowlog_max {
            self.slowlog.pop_back();
        }
    }

    /// A copy of the histograms that have data: (stat id, histogram).
    pub fn histograms(&self, wanted: Option<&[u16]>) -> Vec<(u16, Histogram<u64>)> {
        self.hist
            .iter()
            .enumerate()
            .filter_map(|(i, h)| {
                let h = h.as_ref()?;
                let keep = !h.is_empty() && wanted.is_none_or(|w| w.contains(&(i as u16)));
                keep.then(|| (i as u16, (**h).clone()))
            })
            .collect()
    }

    /// CONFIG RESETSTAT: forget the histograms.
    pub fn reset_histograms(&mut self) {
        self.hist.clear();
    }
}

/// Sums one shard's histograms into `into`.
pub fn merge_histograms(into: &mut Vec<(u16, Histogram<u64>)>, part: Vec<(u16, Histogram<u64>)>) {
    for (id, h) in part {
        match into.iter_mut().find(|(i, _)| *i == id) {
            Some((_, mine)) => {
                let _ = mine.add(&h);
            }
            None => into.push((id, h)),
        }
    }
}

/// A command's argv as the slowlog shows it: at most 32 arguments (the last one
/// saying how many more there were), strings cut at 128 bytes, secrets redacted.
pub fn slow_argv(args: &Args) -> Vec<Vec<u8>> {
    let argc = args.len();
    let shown = argc.min(SLOW_MAX_ARGC);
    let mut out = Vec::with_capacity(shown);
    for j in 0..shown {
        if shown != argc && j == shown - 1 {
            out.push(format!("... ({} more arguments)", argc - shown + 1).into_bytes());
        } else if is_redacted(args, j) {
            out.push(b"(redacted)".to_vec());
        } else {
            let a = args.get(j);
            if a.len() > SLOW_MAX_STRING {
                let mut v = a[..SLOW_MAX_STRING].to_vec();
                v.extend_from_slice(
                    format!("... ({} more bytes)", a.len() - SLOW_MAX_STRING).as_bytes(),
                );
                out.push(v);
            } else {
                out.push(a.to_vec());
            }
        }
    }
    out
}

/// Arguments Redis hides from the slowlog and MONITOR (redactClientCommandArgument):
/// AUTH's credentials, HELLO's AUTH pair, MIGRATE's AUTH/AUTH2 credentials and the
/// values of sensitive configs in CONFIG SET.
pub fn is_redacted(args: &Args, i: usize) -> bool {
    if i == 0 {
        return false;
    }
    if args.is(0, "auth") {
        return true;
    }
    // ACL SETUSER's rules may hold passwords: every one of them is hidden.
    if args.is(0, "acl") && args.is(1, "setuser") {
        return i >= 2;
    }
    if args.is(0, "hello") {
        return (2..args.len())
            .find(|&j| args.is(j, "auth"))
            .is_some_and(|j| i == j + 1 || i == j + 2);
    }
    if args.is(0, "migrate") {
        for j in 6..args.len() {
            if args.is(j, "keys") {
                // Only keys follow.
                return false;
            }
            if args.is(j, "auth") && i == j + 1 {
                return true;
            }
            if args.is(j, "auth2") && (i == j + 1 || i == j + 2) {
                return true;
            }
        }
        return false;
    }
    if args.is(0, "config") && args.is(1, "set") && i >= 3 && (i - 3).is_multiple_of(2) {
        return crate::config::lookup_param(args.get(i - 1)).is_some_and(|p| p.is_sensitive());
    }
    false
}

/* MONITOR: every shard may run commands a monitor must see, and monitors may sit
 * on any shard, so the registry is process-wide. Executing shards only pay one
 * relaxed atomic load per command while nobody monitors. */

type MonitorTx = futures_channel::mpsc::UnboundedSender<Vec<u8>>;

static MONITOR_COUNT: AtomicU64 = AtomicU64::new(0);
static MONITORS: std::sync::Mutex<Vec<(u64, MonitorTx)>> = std::sync::Mutex::new(Vec::new());

/// Registers client `id` as a monitor; its lines arrive on the returned receiver.
pub fn monitor_register(id: u64) -> futures_channel::mpsc::UnboundedReceiver<Vec<u8>> {
    let (tx, rx) = futures_channel::mpsc::unbounded();
    let mut m = MONITORS.lock().unwrap_or_else(|e| e.into_inner());
    m.push((id, tx));
    MONITOR_COUNT.store(m.len() as u64, Ordering::Relaxed);
    rx
}

/// Removes client `id` from the monitors (it left, or RESET).
pub fn monitor_unregister(id: u64) {
    let mut m = MONITORS.lock().unwrap_or_else(|e| e.into_inner());
    m.retain(|(i, _)| *i != id);
    MONITOR_COUNT.store(m.len() as u64, Ordering::Relaxed);
}

/// Whether anyone monitors (cheap: check before building a line).
#[inline]
pub fn monitoring() -> bool {
    MONITOR_COUNT.load(Ordering::Relaxed) > 0
}

/// Sends a command to every monitor in Redis's format:
/// `+<unix s>.<us> [<db> <addr>|lua] "arg" ...`, secrets redacted.
pub fn monitor_feed(db: usize, peer: Option<&str>, args: &Args) {
    if !monitoring() {
        return;
    }
    let us = crate::util::now_us();
    let mut line = match peer {
        Some(p) => format!("+{}.{:06} [{db} {p}] ", us / 1_000_000, us % 1_000_000),
        None => format!("+{}.{:06} [{db} lua] ", us / 1_000_000, us % 1_000_000),
    };
    for j in 0..args.len() {
        if j > 0 {
            line.push(' ');
        }
        if is_redacted(args, j) {
            line.push_str("\"(redacted)\"");
        } else {
            line.push_str(&crate::util::repr(args.get(j)));
        }
    }
    line.push_str("\r\n");
    let m = MONITORS.lock().unwrap_or_else(|e| e.into_inner());
    for (_, tx) in m.iter() {
        let _ = tx.unbounded_send(line.clone().into_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_series_keeps_one_sample_per_second() {
        let mut s = EventSeries::default();
        s.add(10, 5);
        s.add(10, 7);
        s.add(10, 3);
        s.add(11, 2);
        assert_eq!(
            s.samples.iter().copied().collect::<Vec<_>>(),
            [(10, 7), (11, 2)]
        );
        assert_eq!(s.max, 7);
        let mut other = EventSeries::default();
        other.add(11, 9);
        other.add(12, 1);
        s.merge(&other);
        assert_eq!(
            s.samples.iter().copied().collect::<Vec<_>>(),
            [(10, 7), (11, 9), (12, 1)]
        );
        assert_eq!(s.max, 9);
    }
}
