//! One client thread: `clients` non-blocking connections multiplexed with ppoll(2).
//!
//! Closed loop: a connection with nothing in flight sends `pipeline` requests at once
//! and their latency counts from that moment. Open loop (`--rate`): every connection
//! has its own fixed schedule (its share of the total rate, phases staggered so the
//! connections do not fire together); a request is due at its scheduled time, is sent
//! as soon as the connection has fewer than `pipeline` requests in flight, and its
//! latency counts from the scheduled time. A server that stalls therefore charges the
//! stall to every request that should have been sent during it, instead of the
//! client politely waiting and sampling only the lucky ones (coordinated omission).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::args::{KeyPattern, Plan, Stop};
use super::resp::{self, ReplyKind};
use super::rng::Rng;
use super::zipf::Zipf;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmd {
    Set,
    Get,
}

/// Latencies in nanoseconds, 3 significant digits, up to an hour.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("static histogram bounds")
}

/// What one thread measured.
pub struct ThreadStats {
    pub set: Histogram<u64>,
    pub get: Histogram<u64>,
    pub hits: u64,
    pub misses: u64,
    pub errors: u64,
    /// The first few error replies, to show the user what went wrong.
    pub error_samples: Vec<String>,
}

/// Shared with the progress printer: completed requests and the latencies so far.
pub struct Progress {
    pub ops: AtomicU64,
    pub hist: Mutex<Histogram<u64>>,
    /// Set on a fatal error or Ctrl-C equivalent: every thread stops issuing.
    pub abort: AtomicBool,
}

impl Progress {
    pub fn new() -> Progress {
        Progress {
            ops: AtomicU64::new(0),
            hist: Mutex::new(new_histogram()),
            abort: AtomicBool::new(false),
        }
    }
}

/// How long replies may trail the end of the run before the run is declared broken.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Initial read buffer per connection.
const READ_BUF: usize = 16 * 1024;
/// How often a thread folds its recent latencies into the shared progress histogram.
const FLUSH_EVERY_NS: u64 = 200_000_000;

/// Chooses key ids for one connection.
struct Keys {
    pattern: KeyPattern,
    min: u64,
    span: u64,
    zipf: Option<Zipf>,
    /// Sequential pattern: the next offset from `min`.
    next: u64,
}

impl Keys {
    fn new(plan: &Plan, conn: usize) -> Keys {
        let span = plan.key_max - plan.key_min; // keys = span + 1
        let zipf = match plan.pattern {
            KeyPattern::Zipf(s) => Zipf::new(span.saturating_add(1), s).ok(),
            _ => None,
        };
        // Sequential: connections start evenly spread so that together they cover the
        // keyspace once (a SET-only sequential run with requests = keys/connections
        // fills every key exactly once).
        let total = plan.connections() as u128;
        let next = ((span as u128 + 1) * conn as u128 / total) as u64;
        Keys {
            pattern: plan.pattern,
            min: plan.key_min,
            span,
            zipf,
            next,
        }
    }

    fn next_id(&mut self, rng: &mut Rng) -> u64 {
        match self.pattern {
            KeyPattern::Uniform => rng.range_inclusive(self.min, self.min + self.span),
            KeyPattern::Sequential => {
                let id = self.min + self.next;
                self.next = if self.next >= self.span {
                    0
                } else {
                    self.next + 1
                };
                id
            }
            KeyPattern::Zipf(_) => match &self.zipf {
                Some(z) => self.min + (z.sample(rng) - 1),
                None => self.min,
            },
        }
    }
}

struct Conn {
    sock: TcpStream,
    /// Received bytes are `rbuf[rstart..rend]`.
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    /// Requests sent or queued, with the time their latency counts from (ns since start).
    inflight: VecDeque<(Cmd, u64)>,
    issued: u64,
    /// Position in the SET/GET cycle.
    mix: u64,
    keys: Keys,
    rng: Rng,
    /// Open loop: schedule of this connection (ns since start): first + k * interval.
    first_due: f64,
    interval: f64,
    k: u64,
    closed: bool,
}

impl Conn {
    fn due(&self) -> u64 {
        (self.first_due + self.k as f64 * self.interval) as u64
    }

    fn next_cmd(&mut self, plan: &Plan) -> Cmd {
        let cycle = plan.sets + plan.gets;
        let c = if self.mix < plan.sets {
            Cmd::Set
        } else {
            Cmd::Get
        };
        self.mix = (self.mix + 1) % cycle;
        c
    }

    fn push_request(&mut self, plan: &Plan, value: &[u8], t0: u64) {
        let cmd = self.next_cmd(plan);
        let id = self.keys.next_id(&mut self.rng);
        match cmd {
            Cmd::Set => {
                let size = if plan.size_min == plan.size_max {
                    plan.size_min
                } else {
                    self.rng
                        .range_inclusive(plan.size_min as u64, plan.size_max as u64)
                        as usize
                };
                resp::array_header(&mut self.wbuf, 3);
                resp::bulk(&mut self.wbuf, b"SET");
                resp::bulk_key(&mut self.wbuf, &plan.prefix, id);
                resp::bulk(&mut self.wbuf, &value[..size]);
            }
            Cmd::Get => {
                resp::array_header(&mut self.wbuf, 2);
                resp::bulk(&mut self.wbuf, b"GET");
                resp::bulk_key(&mut self.wbuf, &plan.prefix, id);
            }
        }
        self.inflight.push_back((cmd, t0));
        self.issued += 1;
    }

    fn may_issue(&self, plan: &Plan, at_ns: u64) -> bool {
        !self.closed
            && match plan.stop {
                Stop::Requests(n) => self.issued < n,
                Stop::Time(d) => (at_ns as u128) < d.as_nanos(),
            }
    }

    /// Queues whatever this connection should send now.
    fn fill(&mut self, plan: &Plan, value: &[u8], now: u64) {
        if plan.rate.is_some() {
            while self.inflight.len() < plan.pipeline {
                let due = self.due();
                if due > now || !self.may_issue(plan, due) {
                    break;
                }
                self.push_request(plan, value, due);
                self.k += 1;
            }
        } else if self.inflight.is_empty() {
            while self.inflight.len() < plan.pipeline && self.may_issue(plan, now) {
                self.push_request(plan, value, now);
            }
        }
    }

    /// Open loop: when this connection next wants to send (ns), if it can.
    fn next_wakeup(&self, plan: &Plan) -> Option<u64> {
        if plan.rate.is_none() || self.inflight.len() >= plan.pipeline {
            return None;
        }
        let due = self.due();
        self.may_issue(plan, due).then_some(due)
    }

    fn flush(&mut self) -> io::Result<()> {
        while self.wpos < self.wbuf.len() {
            match self.sock.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        Ok(())
    }

    /// Reads what is available and accounts every complete reply.
    fn read_replies(&mut self, now: u64, st: &mut Accounting) -> Result<(), String> {
        loop {
            if self.rend == self.rbuf.len() {
                self.make_room();
            }
            match self.sock.read(&mut self.rbuf[self.rend..]) {
                Ok(0) => return Err("server closed the connection".into()),
                Ok(n) => self.rend += n,
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock => break,
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(format!("read: {e}")),
                },
            }
        }
        while let Some((len, kind)) =
            resp::skip_reply(&self.rbuf[self.rstart..self.rend]).map_err(|e| e.to_string())?
        {
            let Some((cmd, t0)) = self.inflight.pop_front() else {
                return Err("reply without a request".into());
            };
            let raw = &self.rbuf[self.rstart..self.rstart + len];
            st.record(cmd, kind, now.saturating_sub(t0), raw);
            self.rstart += len;
        }
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        }
        Ok(())
    }

    /// The read buffer is full: move the unparsed tail to the front, or grow it when
    /// one reply is larger than the buffer. It is zeroed only when it grows.
    fn make_room(&mut self) {
        if self.rstart > 0 {
            self.rbuf.copy_within(self.rstart..self.rend, 0);
            self.rend -= self.rstart;
            self.rstart = 0;
        } else {
            let n = self.rbuf.len() * 2;
            self.rbuf.resize(n, 0);
        }
    }
}

struct Accounting {
    stats: ThreadStats,
    recent: Histogram<u64>,
    recent_ops: u64,
}

impl Accounting {
    fn record(&mut self, cmd: Cmd, kind: ReplyKind, ns: u64, raw: &[u8]) {
        let ns = ns.max(1);
        match cmd {
            Cmd::Set => self.stats.set.saturating_record(ns),
            Cmd::Get => self.stats.get.saturating_record(ns),
        }
        self.recent.saturating_record(ns);
        self.recent_ops += 1;
        match (cmd, kind) {
            (_, ReplyKind::Error) => {
                self.stats.errors += 1;
                if self.stats.error_samples.len() < 3 {
                    let text = String::from_utf8_lossy(raw).trim_end().to_string();
                    self.stats.error_samples.push(text);
                }
            }
            (Cmd::Get, ReplyKind::Null) => self.stats.misses += 1,
            (Cmd::Get, ReplyKind::Value) => self.stats.hits += 1,
            (Cmd::Set, _) => {}
        }
    }

    fn flush(&mut self, progress: &Progress) {
        if self.recent_ops == 0 {
            return;
        }
        if let Ok(mut h) = progress.hist.lock() {
            let _ = h.add(&self.recent);
        }
        progress.ops.fetch_add(self.recent_ops, Ordering::Relaxed);
        self.recent.reset();
        self.recent_ops = 0;
    }
}

/// Opens this thread's connections (before the clock starts).
pub fn connect(plan: &Plan, thread: usize) -> Result<Vec<TcpStream>, String> {
    (0..plan.clients)
        .map(|_| {
            let s = TcpStream::connect_timeout(&plan.addr, Duration::from_secs(5))
                .map_err(|e| format!("connect {}: {e}", plan.addr))?;
            s.set_nodelay(true).map_err(|e| e.to_string())?;
            s.set_nonblocking(true).map_err(|e| e.to_string())?;
            Ok(s)
        })
        .collect::<Result<Vec<_>, String>>()
        .map_err(|e| format!("thread {thread}: {e}"))
}

/// Runs one thread's connections to completion. `start` is shared by all threads.
pub fn run(
    plan: &Plan,
    thread: usize,
    socks: Vec<TcpStream>,
    value: &[u8],
    start: Instant,
    progress: &Progress,
) -> Result<ThreadStats, String> {
    let total_conns = plan.connections() as f64;
    let interval = plan.rate.map(|r| total_conns * 1e9 / r).unwrap_or(0.0);
    let mut conns: Vec<Conn> = socks
        .into_iter()
        .enumerate()
        .map(|(i, sock)| {
            let global = thread * plan.clients + i;
            Conn {
                sock,
                rbuf: vec![0; READ_BUF],
                rstart: 0,
                rend: 0,
                wbuf: Vec::new(),
                wpos: 0,
                inflight: VecDeque::new(),
                issued: 0,
                mix: 0,
                keys: Keys::new(plan, global),
                rng: Rng::new(plan.seed.wrapping_add(global as u64)),
                first_due: interval * global as f64 / total_conns,
                interval,
                k: 0,
                closed: false,
            }
        })
        .collect();
    let mut acc = Accounting {
        stats: ThreadStats {
            set: new_histogram(),
            get: new_histogram(),
            hits: 0,
            misses: 0,
            errors: 0,
            error_samples: Vec::new(),
        },
        recent: new_histogram(),
        recent_ops: 0,
    };
    let mut pollfds: Vec<libc::pollfd> = Vec::with_capacity(conns.len());
    let mut last_flush = 0u64;
    let mut drain_deadline: Option<Instant> = None;
    loop {
        let now = elapsed_ns(start);
        let aborting = progress.abort.load(Ordering::Relaxed);
        let mut busy = false;
        let mut any_wants = false;
        let mut wake: Option<u64> = None;
        pollfds.clear();
        for c in conns.iter_mut() {
            if !aborting {
                c.fill(plan, value, now);
            }
            c.flush().map_err(|e| format!("write: {e}"))?;
            // Open loop asks about the next scheduled request, closed loop about now.
            let at = if plan.rate.is_some() { c.due() } else { now };
            let wants = !aborting && c.may_issue(plan, at);
            any_wants |= wants;
            busy |= wants || !c.inflight.is_empty();
            if let Some(w) = c.next_wakeup(plan) {
                wake = Some(wake.map_or(w, |x: u64| x.min(w)));
            }
            let mut events = 0;
            if !c.inflight.is_empty() {
                events |= libc::POLLIN;
            }
            if c.wpos < c.wbuf.len() {
                events |= libc::POLLOUT;
            }
            pollfds.push(libc::pollfd {
                fd: c.sock.as_raw_fd(),
                events,
                revents: 0,
            });
        }
        if !busy {
            break;
        }
        if !any_wants {
            let d = *drain_deadline.get_or_insert_with(|| Instant::now() + DRAIN_TIMEOUT);
            if Instant::now() > d {
                return Err("replies still missing 10s after the last request".into());
            }
        }
        if now.saturating_sub(last_flush) >= FLUSH_EVERY_NS {
            acc.flush(progress);
            last_flush = now;
        }
        // Sleep until a reply, a writable socket, the next scheduled send or the next
        // progress flush, whichever comes first.
        let mut timeout = FLUSH_EVERY_NS / 2;
        if let Some(w) = wake {
            timeout = timeout.min(w.saturating_sub(now));
        }
        poll(&mut pollfds, timeout)?;
        let now = elapsed_ns(start);
        for (c, p) in conns.iter_mut().zip(&pollfds) {
            if p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0 {
                if let Err(e) = c.read_replies(now, &mut acc) {
                    c.closed = true;
                    progress.abort.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
    }
    acc.flush(progress);
    Ok(acc.stats)
}

fn elapsed_ns(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

/// ppoll(2) with a nanosecond timeout: poll(2) only has milliseconds, too coarse for
/// open-loop schedules of tens of thousands of requests per second.
fn poll(fds: &mut [libc::pollfd], timeout_ns: u64) -> Result<(), String> {
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `fds` is a valid, exclusively borrowed slice of pollfd for the duration
    // of the call, its length is passed alongside, `ts` lives on the stack, and a null
    // signal mask means "leave the mask alone".
    let rc = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(format!("ppoll: {e}"));
        }
    }
    Ok(())
}
