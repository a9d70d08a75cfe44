//! The merge: the shard logs' entries, in number order, as the one stream every reader
//! reads (RESP commands with the SELECTs they need), and its offset. Runs when a
//! reader asks (`poll`, `pending`, `offset`, `keepalive`, `subscribe`), never on a
//! writer's path: a shard only appends to its own log.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::task::{Poll, Waker};

use super::{lock, Effect, LOGS, NEW_LOG_WAITING, READERS};

/// One reader's part of the stream not yet taken.
struct Reader {
    id: u64,
    /// What the reader has not taken, in segments: a log reader's begins a new one at
    /// each switch point (`switch_point`), and each closed segment knows the number of
    /// the first entry after it. A replica's has one segment, always open.
    segments: VecDeque<Segment>,
    /// Replica links get the keep-alive PINGs; a log (the AOF) does not.
    replica: bool,
    waker: Option<Waker>,
}

struct Segment {
    bytes: Vec<u8>,
    /// Closed at a switch point: every entry numbered below this is in `bytes` (or
    /// an earlier segment), none at or above it.
    ends_at: Option<u64>,
}

impl Reader {
    fn new(id: u64, replica: bool) -> Reader {
        let mut segments = VecDeque::with_capacity(2);
        segments.push_back(Segment {
            bytes: Vec::new(),
            ends_at: None,
        });
        Reader {
            id,
            segments,
            replica,
            waker: None,
        }
    }

    fn tail(&mut self) -> &mut Vec<u8> {
        if self.segments.is_empty() {
            self.segments.push_back(Segment {
                bytes: Vec::new(),
                ends_at: None,
            });
        }
        let last = self.segments.len() - 1;
        &mut self.segments[last].bytes
    }

    fn pending(&self) -> usize {
        self.segments.iter().map(|s| s.bytes.len()).sum()
    }

    /// The next thing to take, given the merge's next number: bytes (and the number
    /// every entry below which they complete), a switch, or nothing.
    fn take(&mut self, next_seq: u64) -> Option<Taken> {
        let front = self.segments.front_mut()?;
        if !front.bytes.is_empty() {
            let upto = front.ends_at.unwrap_or(next_seq);
            return Some(Taken::Bytes(std::mem::take(&mut front.bytes), upto));
        }
        if self.segments.len() > 1 {
            self.segments.pop_front();
            return Some(Taken::Switch);
        }
        None
    }
}

/// What a log reader takes from its part of the stream.
pub enum Taken {
    /// Stream bytes; with them, every entry numbered below the number is taken.
    Bytes(Vec<u8>, u64),
    /// A switch point: what follows belongs in the next file.
    Switch,
}

/// Who a piece of the stream is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    /// Every reader: this server's own effects, on a master.
    All,
    /// Replica links (and the backlog) only: keep-alive PINGs, GETACKs, and on a
    /// replica the master's stream passed on.
    Replicas,
    /// Logs (the AOF) only: a replica's own effects (its replicas get the master's
    /// stream instead, byte for byte, so that offsets agree along a chain).
    Logs,
}

/// While this server is a replica, its own effects go to its logs only
/// (`set_replica_mode`).
static REPLICA_MODE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The replication backlog (Redis's repl_backlog): the last `size` bytes of the
/// replicas' stream, for a replica that reconnects to continue from its offset.
struct Backlog {
    /// A ring of `size` bytes; `len` of them hold stream, the newest ending at `end`.
    ring: Vec<u8>,
    end: usize,
    len: usize,
}

impl Backlog {
    fn new(size: usize) -> Backlog {
        Backlog {
            ring: vec![0; size.max(1)],
            end: 0,
            len: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        let size = self.ring.len();
        if bytes.len() >= size {
            bytes = &bytes[bytes.len() - size..];
        }
        let first = bytes.len().min(size - self.end);
        self.ring[self.end..self.end + first].copy_from_slice(&bytes[..first]);
        let rest = &bytes[first..];
        self.ring[..rest.len()].copy_from_slice(rest);
        self.end = (self.end + bytes.len()) % size;
        self.len = (self.len + bytes.len()).min(size);
    }

    /// The last `n` bytes (n <= len).
    fn tail(&self, n: usize) -> Vec<u8> {
        let size = self.ring.len();
        let start = (self.end + size - n) % size;
        let mut out = Vec::with_capacity(n);
        if start + n <= size {
            out.extend_from_slice(&self.ring[start..start + n]);
        } else {
            out.extend_from_slice(&self.ring[start..]);
            out.extend_from_slice(&self.ring[..n - (size - start)]);
        }
        out
    }

    /// The same history in a ring of `size` bytes (the newest kept).
    fn resized(&self, size: usize) -> Backlog {
        let mut b = Backlog::new(size);
        b.push(&self.tail(self.len));
        b
    }
}

struct Merger {
    readers: Vec<Reader>,
    backlog: Option<Backlog>,
    next_id: u64,
    /// The number of the next entry to emit.
    next_seq: u64,
    /// Entries taken from each log (in `LOGS` order), not yet emitted: each queue is
    /// in number order (a thread numbers its appends in turn), so the next entry is
    /// at the head of one of them — or still being appended on another thread.
    queues: Vec<VecDeque<(u64, Effect)>>,
    /// Reused for encoding one entry.
    scratch: Vec<u8>,
    /// master_repl_offset: bytes of stream produced so far, SELECTs and PINGs
    /// included (what a replica counts in its own offset).
    offset: u64,
    /// The database the stream last selected (Redis's slaveseldb); None after a
    /// reader joined, whose part must begin with a SELECT.
    selected: Option<usize>,
    /// When the stream last carried a keep-alive PING (unix ms).
    last_ping_ms: u64,
}

static MERGER: Mutex<Merger> = Mutex::new(Merger {
    readers: Vec::new(),
    backlog: None,
    next_id: 1,
    next_seq: 0,
    queues: Vec::new(),
    scratch: Vec::new(),
    offset: 0,
    selected: None,
    last_ping_ms: 0,
});

/// The merger, with every entry appended so far that can go out emitted.
fn merged() -> MutexGuard<'static, Merger> {
    let mut m = lock(&MERGER);
    m.pull();
    m
}

impl Merger {
    /// Takes what the logs hold and emits it in number order, up to the first number
    /// not yet seen (its thread is appending it; its append wakes the readers).
    fn pull(&mut self) {
        let logs = lock(&LOGS).clone();
        if self.queues.len() < logs.len() {
            self.queues.resize_with(logs.len(), VecDeque::new);
        }
        for (queue, log) in self.queues.iter_mut().zip(&logs) {
            let mut log = lock(log);
            if queue.is_empty() {
                // Most often: the log's vector becomes the queue, no entry moved.
                *queue = VecDeque::from(std::mem::take(&mut log.entries));
            } else {
                queue.extend(log.entries.drain(..));
            }
        }
        loop {
            let next = self.next_seq;
            let Some(q) = self
                .queues
                .iter()
                .position(|q| q.front().is_some_and(|(seq, _)| *seq == next))
            else {
                return;
            };
            let Some((_, effect)) = self.queues[q].pop_front() else {
                return;
            };
            self.next_seq += 1;
            match effect {
                Effect::One(db, argv) => self.emit(db, &argv),
                Effect::Block(cmds) => self.emit_block(&cmds),
            }
        }
    }

    /// Appends bytes of the stream to the readers `target` names; what replicas get
    /// is counted in the offset and kept in the backlog.
    fn write_to(&mut self, bytes: &[u8], target: Target) {
        if target != Target::Logs {
            self.offset += bytes.len() as u64;
            if let Some(b) = &mut self.backlog {
                b.push(bytes);
            }
        }
        for r in &mut self.readers {
            let skip = match target {
                Target::All => false,
                Target::Replicas => !r.replica,
                Target::Logs => r.replica,
            };
            if skip {
                continue;
            }
            r.tail().extend_from_slice(bytes);
            if let Some(w) = r.waker.take() {
                w.wake();
            }
        }
    }

    fn emit(&mut self, db: usize, argv: &[Vec<u8>]) {
        let mut bytes = std::mem::take(&mut self.scratch);
        bytes.clear();
        if self.selected != Some(db) {
            encode(
                &mut bytes,
                &[b"SELECT".as_slice(), db.to_string().as_bytes()],
            );
            self.selected = Some(db);
        }
        encode(&mut bytes, argv);
        let target = if REPLICA_MODE.load(std::sync::atomic::Ordering::Relaxed) {
            Target::Logs
        } else {
            Target::All
        };
        self.write_to(&bytes, target);
        self.scratch = bytes;
    }

    /// An atomic unit inside MULTI/EXEC (Redis 7.0's propagatePendingCommands).
    fn emit_block(&mut self, cmds: &[(usize, Vec<Vec<u8>>)]) {
        let Some(&(first, _)) = cmds.first() else {
            return;
        };
        self.emit(first, &[b"MULTI".to_vec()]);
        let mut last = first;
        for (db, argv) in cmds {
            self.emit(*db, argv);
            last = *db;
        }
        self.emit(last, &[b"EXEC".to_vec()]);
    }
}

/// A command as RESP, the lengths written without formatting machinery (this runs
/// once per propagated command). Also how the AOF's loader and command base write
/// commands.
pub fn encode<A: AsRef<[u8]>>(out: &mut Vec<u8>, argv: &[A]) {
    header(out, b'*', argv.len());
    for a in argv {
        let a = a.as_ref();
        header(out, b'$', a.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// `<kind><n>\r\n`.
fn header(out: &mut Vec<u8>, kind: u8, n: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut n = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.push(kind);
    out.extend_from_slice(&digits[at..]);
    out.extend_from_slice(b"\r\n");
}

/// Bytes of stream produced so far (master_repl_offset).
pub fn offset() -> u64 {
    merged().offset
}

/// The offset and the database the stream last selected (None: its next effect
/// selects again, Redis's slaveseldb -1), read together: a save's cut records them
/// as where its dataset leaves the stream.
pub fn position() -> (u64, Option<usize>) {
    let m = merged();
    (m.offset, m.selected)
}

/// Adds a replica link as a reader; its part starts with the next effect, after a
/// SELECT. Whatever was appended before goes to the readers already there (the caller
/// holds every shard still, so that is everything the new reader's snapshot holds).
/// Returns the reader's id and the offset its part starts after.
pub fn subscribe() -> (u64, u64) {
    add_reader(true)
}

/// Adds a log (the AOF) as a reader: `subscribe`, without the keep-alive PINGs.
pub fn subscribe_log() -> u64 {
    add_reader(false).0
}

fn add_reader(replica: bool) -> (u64, u64) {
    let mut m = merged();
    let id = m.next_id;
    m.next_id += 1;
    m.readers.push(Reader::new(id, replica));
    // Every reader reads one stream: the new one's starts with a SELECT, so the next
    // effect selects again for all (Redis resets slaveseldb on a full resync).
    m.selected = None;
    READERS.join();
    (id, m.offset)
}

pub fn unsubscribe(id: u64) {
    let mut m = lock(&MERGER);
    let before = m.readers.len();
    m.readers.retain(|r| r.id != id);
    if m.readers.len() < before {
        READERS.leave();
    }
}

/// Bytes of stream queued for the reader and not yet taken (for a replica link, part
/// of its client's output: `client-output-buffer-limit replica`).
pub fn pending(id: u64) -> usize {
    let m = merged();
    m.readers
        .iter()
        .find(|r| r.id == id)
        .map_or(0, Reader::pending)
}

/// The reader's pending stream bytes, or Pending (waking `waker` when there are
/// some); None once the reader is gone.
pub fn poll(id: u64, waker: &Waker) -> Poll<Option<Vec<u8>>> {
    poll_log(id, waker).map(|taken| {
        taken.map(|t| match t {
            Taken::Bytes(bytes, _) => bytes,
            // A replica's part has no switch points.
            Taken::Switch => Vec::new(),
        })
    })
}

/// A log reader's next piece (`Taken`), or Pending (waking `waker` when there is
/// one); None once the reader is gone.
pub fn poll_log(id: u64, waker: &Waker) -> Poll<Option<Taken>> {
    let mut m = merged();
    let next_seq = m.next_seq;
    let Some(r) = m.readers.iter_mut().find(|r| r.id == id) else {
        return Poll::Ready(None);
    };
    if let Some(t) = r.take(next_seq) {
        return Poll::Ready(Some(t));
    }
    r.waker = Some(waker.clone());
    // The next append on any thread wakes it too (once per waker) ...
    let wait_in = |waiting: &mut Vec<Waker>| {
        if !waiting.iter().any(|w| w.will_wake(waker)) {
            waiting.push(waker.clone());
        }
    };
    wait_in(&mut lock(&NEW_LOG_WAITING));
    for log in lock(&LOGS).iter() {
        wait_in(&mut lock(log).waiting);
    }
    // ... and one made between the pull above and those registrations is seen now.
    m.pull();
    let next_seq = m.next_seq;
    match m.readers.iter_mut().find(|r| r.id == id) {
        Some(r) => r
            .take(next_seq)
            .map_or(Poll::Pending, |t| Poll::Ready(Some(t))),
        None => Poll::Ready(None),
    }
}

/// A log reader's next piece, if there is one, without asking to be woken for the
/// next (a reader that polls on its own schedule spares the writers the wake-ups).
pub fn take_log(id: u64) -> Option<Option<Taken>> {
    let mut m = merged();
    let next_seq = m.next_seq;
    let r = m.readers.iter_mut().find(|r| r.id == id)?;
    Some(r.take(next_seq))
}

/// Closes the log reader's current segment after every entry appended so far: what
/// is appended from now on, after a SELECT, is taken after a `Taken::Switch`. Called
/// with every shard held (an AOF rewrite's cut), so "so far" is exactly the cut.
pub fn switch_point(id: u64) {
    let mut m = merged();
    let next_seq = m.next_seq;
    if let Some(r) = m.readers.iter_mut().find(|r| r.id == id) {
        if let Some(last) = r.segments.back_mut() {
            last.ends_at = Some(next_seq);
        }
        r.segments.push_back(Segment {
            bytes: Vec::new(),
            ends_at: None,
        });
        if let Some(w) = r.waker.take() {
            w.wake();
        }
    }
    m.selected = None;
}

/// The master's keep-alive PING, into the stream every reader reads (each replica
/// link asks every repl-ping-replica-period): one per half period at most however
/// many ask, and never skipped for a link whose timer runs a little early.
pub fn keepalive(period_ms: u64) {
    if replica_mode() {
        // A replica's replicas get its master's PINGs.
        return;
    }
    let mut m = merged();
    let now = crate::util::now_ms();
    if now.saturating_sub(m.last_ping_ms) < period_ms / 2 {
        return;
    }
    m.last_ping_ms = now;
    m.write_to(b"*1\r\n$4\r\nPING\r\n", Target::Replicas);
}

/// Switches where this server's own effects go: to logs only while it is a replica
/// (its replicas get the master's stream through `proxy`), to every reader as a
/// master. Either way the next effect selects its database again.
pub fn set_replica_mode(on: bool) {
    let mut m = merged();
    REPLICA_MODE.store(on, std::sync::atomic::Ordering::Relaxed);
    m.selected = None;
}

/// Whether this server's own effects reach replicas (it is no replica itself).
pub fn replica_mode() -> bool {
    REPLICA_MODE.load(std::sync::atomic::Ordering::Relaxed)
}

/// On a replica: bytes of the master's stream it applied, passed on as they are to
/// its own replicas and backlog (Redis's replicationFeedStreamFromMasterStream).
pub fn proxy(bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let mut m = merged();
    m.write_to(bytes, Target::Replicas);
    // The master's stream selected databases of its own: this server's next effect
    // (to its logs, or to everyone once promoted) selects again.
    m.selected = None;
}

/// A command into the replicas' stream only, with no SELECT before it (DEBUG
/// REPLICATE, Redis's replicationFeedSlaves with no database): Redis's tests make a
/// replica diverge with it. Nothing on a replica (its replicas get its master's).
pub fn replicate_command(args: &[&[u8]]) {
    if replica_mode() {
        return;
    }
    let mut cmd = Vec::new();
    encode(&mut cmd, args);
    merged().write_to(&cmd, Target::Replicas);
}

/// `REPLCONF GETACK *` to every replica (WAIT, FAILOVER): in the stream, counted in
/// the offset, as Redis sends it.
pub fn request_acks() {
    let mut m = merged();
    m.write_to(
        b"*3\r\n$8\r\nREPLCONF\r\n$6\r\nGETACK\r\n$1\r\n*\r\n",
        Target::Replicas,
    );
}

/// Creates the backlog if there is none (the first replica attached, or a replica
/// synced): `size` bytes. While it exists the stream is kept (it reads the stream).
pub fn backlog_create(size: usize) {
    let mut m = merged();
    if m.backlog.is_none() {
        m.backlog = Some(Backlog::new(size));
        READERS.join();
    }
}

/// Frees the backlog (repl-backlog-ttl without replicas).
pub fn backlog_free() {
    let mut m = merged();
    if m.backlog.take().is_some() {
        READERS.leave();
    }
}

/// CONFIG SET repl-backlog-size: the history kept, as much as fits.
pub fn backlog_resize(size: usize) {
    let mut m = merged();
    if let Some(b) = &m.backlog {
        if b.ring.len() != size.max(1) {
            let resized = b.resized(size);
            m.backlog = Some(resized);
        }
    }
}

/// Stream bytes queued for replica links and not yet taken by their connections
/// (INFO's replication buffers, beside the backlog).
pub fn replica_pending_total() -> usize {
    let m = merged();
    m.readers
        .iter()
        .filter(|r| r.replica)
        .map(Reader::pending)
        .sum()
}

/// INFO's repl_backlog_* fields: (active, size, first byte's offset, bytes held).
pub fn backlog_info() -> Option<(usize, u64, usize)> {
    let m = merged();
    let b = m.backlog.as_ref()?;
    Some((b.ring.len(), m.offset + 1 - b.len as u64, b.len))
}

/// A replica's full sync: the stream goes on from the master's `offset`; the backlog
/// starts again empty (what it held is another history).
pub fn reset_offset(offset: u64) {
    let mut m = merged();
    m.offset = offset;
    if let Some(b) = &m.backlog {
        m.backlog = Some(Backlog::new(b.ring.len()));
    }
    m.selected = None;
}

/// PSYNC's partial resync (Redis's masterTryPartialResynchronization, the backlog
/// half): a replica link whose part starts with the backlog's bytes from `from` (the
/// first byte the replica lacks) on. None when the backlog does not hold them.
/// Returns the reader's id and how many bytes of backlog it got.
pub fn subscribe_from(from: u64) -> Option<(u64, usize)> {
    let mut m = merged();
    let b = m.backlog.as_ref()?;
    let first = m.offset + 1 - b.len as u64;
    if from < first || from > m.offset + 1 {
        return None;
    }
    let n = (m.offset + 1 - from) as usize;
    let bytes = b.tail(n);
    let id = m.next_id;
    m.next_id += 1;
    let mut reader = Reader::new(id, true);
    *reader.tail() = bytes;
    m.readers.push(reader);
    READERS.join();
    Some((id, n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::{begin_capture, end_capture, propagate};

    /// Splits a stream of RESP arrays of bulk strings into commands.
    fn commands(mut s: &[u8]) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        let line = |s: &mut &[u8]| {
            let end = s.windows(2).position(|w| w == b"\r\n").expect("line");
            let l = String::from_utf8(s[1..end].to_vec()).expect("utf8");
            *s = &s[end + 2..];
            l
        };
        while !s.is_empty() {
            let n: usize = line(&mut s).parse().expect("array length");
            let mut argv = Vec::with_capacity(n);
            for _ in 0..n {
                let len: usize = line(&mut s).parse().expect("bulk length");
                argv.push(String::from_utf8(s[..len].to_vec()).expect("utf8"));
                s = &s[len + 2..];
            }
            out.push(argv);
        }
        out
    }

    /// Threads appending at once: one stream in which each thread's effects keep their
    /// order and each captured unit is whole inside MULTI / EXEC.
    #[test]
    fn appends_of_many_threads_merge_in_order_with_units_whole() {
        let (id, _) = subscribe();
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..400u64 {
                        let argv = |what: &str| {
                            vec![
                                what.as_bytes().to_vec(),
                                format!("merge-t{t}").into_bytes(),
                                i.to_string().into_bytes(),
                            ]
                        };
                        if i % 40 == 0 {
                            let txn = u64::MAX - t;
                            assert!(begin_capture(txn));
                            propagate(Some(txn), 0, argv("SET"));
                            propagate(Some(txn), 0, argv("APPEND"));
                            end_capture(txn, true);
                        } else {
                            propagate(None, 0, argv("SET"));
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        let mut bytes = Vec::new();
        let waker = Waker::noop();
        while let Poll::Ready(Some(b)) = poll(id, waker) {
            bytes.extend_from_slice(&b);
        }
        unsubscribe(id);
        let cmds = commands(&bytes);
        let mut last: [Option<u64>; 4] = [None; 4];
        let mut seen = 0;
        let mut i = 0;
        while i < cmds.len() {
            let c = &cmds[i];
            if c[0] == "MULTI" {
                // SET, APPEND of one thread and number, then EXEC.
                let (set, append, exec) = (&cmds[i + 1], &cmds[i + 2], &cmds[i + 3]);
                assert_eq!((set[0].as_str(), append[0].as_str()), ("SET", "APPEND"));
                assert_eq!((&set[1], &set[2]), (&append[1], &append[2]));
                assert_eq!(exec[0], "EXEC");
                i += 1;
                continue;
            }
            if let Some(t) = c.get(1).and_then(|k| k.strip_prefix("merge-t")) {
                let t: usize = t.parse().expect("thread");
                let n: u64 = c[2].parse().expect("number");
                if c[0] == "SET" {
                    assert!(
                        last[t].is_none_or(|p| p < n),
                        "thread {t}: {n} after {last:?}"
                    );
                    last[t] = Some(n);
                    seen += 1;
                }
            }
            i += 1;
        }
        assert_eq!(seen, 4 * 400, "every SET arrived once");
    }

    /// The backlog's ring against a plain vector of everything pushed: the tail it
    /// returns is always the newest bytes, across wraps, oversized pushes and resizes.
    #[test]
    fn backlog_ring_keeps_the_newest_bytes() {
        let mut x = 7u64;
        let mut model: Vec<u8> = Vec::new();
        let mut b = Backlog::new(100);
        // How many of the newest bytes the ring must hold: a shrink loses history.
        let mut held = 0usize;
        for round in 0..2000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = (x % 130) as usize;
            let chunk: Vec<u8> = (0..n).map(|i| (round as usize + i) as u8).collect();
            b.push(&chunk);
            model.extend_from_slice(&chunk);
            held = (held + n).min(b.ring.len());
            assert_eq!(b.len, held);
            let k = (x as usize >> 8) % (b.len + 1);
            assert_eq!(b.tail(k), model[model.len() - k..], "round {round}");
            if round % 97 == 0 {
                let new_size = 50 + (x % 100) as usize;
                b = b.resized(new_size);
                held = held.min(new_size);
                assert_eq!(b.len, held);
                assert_eq!(b.tail(b.len), model[model.len() - b.len..]);
            }
        }
    }
}
