//! The merge: the shard logs' entries, in number order, as the one stream every reader
//! reads (RESP commands with the SELECTs they need), and its offset. Runs when a
//! reader asks (`poll`, `link_usage`, `offset`, `keepalive`, `subscribe`), never on a
//! writer's path: a shard only appends to its own log.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::task::{Poll, Waker};

use crate::protocol::reply::{write_number_line, NUMBER_LINE_MAX};

use super::{
    lock, Effect, ShardLog, LOGS, NEW_LOG_WAITING, READERS, REPL_ALL, REPL_AOF, REPL_REPLICAS,
};

/// A log's (the AOF's) part of the stream not yet taken: its own copy, because a
/// log also gets what replicas do not (a replica's own effects) and none of what
/// only they get (keep-alive PINGs, a master's stream passed on).
struct Reader {
    id: u64,
    /// What the reader has not taken, in segments: a new one begins at each switch
    /// point (`switch_point`), and each closed segment knows the number of the
    /// first entry after it.
    segments: VecDeque<Segment>,
    waker: Option<Waker>,
}

struct Segment {
    bytes: Vec<u8>,
    /// Closed at a switch point: every entry numbered below the mark's number is in
    /// `bytes` (or an earlier segment), none at or above it.
    ends: Option<Mark>,
}

/// How far a log reader's takes cover the stream: every entry numbered below `seq`,
/// and the stream up to `offset` (master_repl_offset: what the AOF has fsynced is
/// reported in it, Redis's fsynced_reploff) as counted since the offset's last reset
/// number `epoch` (`offset_epoch`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mark {
    pub seq: u64,
    pub offset: u64,
    pub epoch: u64,
}

/// How many times `reset_offset` moved the offset (a replica's full sync): an offset
/// a log reader took before the last one is no longer this stream's.
static OFFSET_EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub fn offset_epoch() -> u64 {
    OFFSET_EPOCH.load(std::sync::atomic::Ordering::Acquire)
}

impl Reader {
    fn new(id: u64) -> Reader {
        let mut segments = VecDeque::with_capacity(2);
        segments.push_back(Segment {
            bytes: Vec::new(),
            ends: None,
        });
        Reader {
            id,
            segments,
            waker: None,
        }
    }

    fn tail(&mut self) -> &mut Vec<u8> {
        if self.segments.is_empty() {
            self.segments.push_back(Segment {
                bytes: Vec::new(),
                ends: None,
            });
        }
        let last = self.segments.len() - 1;
        &mut self.segments[last].bytes
    }

    /// The next thing to take, given where the merge stands (`now`): bytes (and how
    /// far they complete the stream), a switch, or nothing more than up to `now`.
    fn take(&mut self, now: Mark) -> Taken {
        let Some(front) = self.segments.front_mut() else {
            return Taken::CaughtUp(now);
        };
        if !front.bytes.is_empty() {
            let upto = front.ends.unwrap_or(now);
            return Taken::Bytes(std::mem::take(&mut front.bytes), upto);
        }
        if self.segments.len() > 1 {
            self.segments.pop_front();
            return Taken::Switch;
        }
        Taken::CaughtUp(now)
    }
}

/// A replica link's place in the replication buffer (Redis's ref_repl_buf_node and
/// ref_block_pos): not a copy of the stream, two offsets into the one copy.
struct LinkReader {
    id: u64,
    /// The first byte not yet sent: the buffer keeps every block from the one that
    /// holds it on.
    sent: u64,
    /// The first byte not yet handed to the link. Bytes between `sent` and `taken`
    /// are being written; the link asks for more only once they are, so the next
    /// ask moves `sent` up to `taken`.
    taken: u64,
    waker: Option<Waker>,
}

/// What a log reader takes from its part of the stream.
pub enum Taken {
    /// Stream bytes; with them, the stream is taken up to the mark.
    Bytes(Vec<u8>, Mark),
    /// A switch point: what follows belongs in the next file.
    Switch,
    /// Nothing to take: what was taken covers the stream up to the mark.
    CaughtUp(Mark),
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

/// Redis 7.0's replication buffer: the replicas' stream kept once, in blocks, for
/// the backlog and every replica link together. A link holds a position in it (the
/// first byte it has not sent), not a copy. The backlog is the blocks' history,
/// trimmed from the front down to `repl-backlog-size` — but never past a block a
/// link still has to send, so that a slow replica makes the backlog outgrow its
/// setting (and a replica that reconnects may continue from anywhere in it), and
/// N replicas cost one copy of the stream, not N.
struct ReplBuffer {
    /// In offset order, each starting where the one before ends.
    blocks: VecDeque<Block>,
    /// repl-backlog-size while there is a backlog.
    backlog: Option<usize>,
    /// Bytes allocated for blocks, their bookkeeping included (Redis's
    /// repl_buffer_mem, INFO's mem_total_replication_buffers).
    mem: usize,
}

struct Block {
    /// The stream offset of its first byte.
    start: u64,
    bytes: Vec<u8>,
    /// How much it takes before the next block begins (Redis's size; `bytes.len()`
    /// is its used).
    size: usize,
}

/// The smallest block (Redis's PROTO_REPLY_CHUNK_BYTES) and the smallest backlog
/// (CONFIG_REPL_BACKLOG_MIN_SIZE).
const MIN_BLOCK: usize = 16 * 1024;
const MIN_BACKLOG: usize = 16 * 1024;
/// A block's bookkeeping, counted with its bytes.
const BLOCK_OVERHEAD: usize = std::mem::size_of::<Block>();
/// Blocks trimmed at most per append, and per trim of the cron or of a link that
/// left (Redis's REPL_BACKLOG_TRIM_BLOCKS_PER_CALL, and ten times it): a big
/// backlog is freed a little at a time, not in one pause.
const TRIM_PER_APPEND: usize = 64;
const TRIM_PER_CRON: usize = 640;
/// The most a link is handed at once: its position moves on as pieces are sent.
const LINK_PIECE: usize = 1 << 20;

impl ReplBuffer {
    const fn new() -> ReplBuffer {
        ReplBuffer {
            blocks: VecDeque::new(),
            backlog: None,
            mem: 0,
        }
    }

    fn backlog_size(&self) -> Option<usize> {
        self.backlog.map(|size| size.max(MIN_BACKLOG))
    }

    /// Bytes held, first to last.
    fn histlen(&self) -> usize {
        match (self.blocks.front(), self.blocks.back()) {
            (Some(first), Some(last)) => {
                (last.start + last.bytes.len() as u64 - first.start) as usize
            }
            _ => 0,
        }
    }

    /// Appends `bytes`, whose first byte has offset `from`. True when a block was
    /// added (the moment to trim).
    fn push(&mut self, from: u64, mut bytes: &[u8]) -> bool {
        let mut at = from;
        if let Some(tail) = self.blocks.back_mut() {
            let room = tail.size - tail.bytes.len();
            let n = room.min(bytes.len());
            tail.bytes.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            at += n as u64;
        }
        let added = !bytes.is_empty();
        // Blocks of at least 16 KB, so that small writes fill them, and at most a
        // sixteenth of the backlog, so that a big write does not pin a huge block
        // of which the backlog needs only the end.
        let limit = (self.backlog.unwrap_or(1 << 20) / 16).max(MIN_BLOCK);
        while !bytes.is_empty() {
            let size = bytes.len().clamp(MIN_BLOCK, limit);
            let n = size.min(bytes.len());
            let mut block = Vec::with_capacity(size);
            block.extend_from_slice(&bytes[..n]);
            self.blocks.push_back(Block {
                start: at,
                bytes: block,
                size,
            });
            self.mem += size + BLOCK_OVERHEAD;
            bytes = &bytes[n..];
            at += n as u64;
        }
        added
    }

    /// Frees up to `max` blocks from the front (Redis's
    /// incrementalTrimReplicationBacklog): those every link has sent (`min_sent`:
    /// the least first unsent byte) and the backlog does not need — it keeps at
    /// least its size and one block; without a backlog nothing is kept for it.
    fn trim(&mut self, min_sent: u64, max: usize) {
        let keep = self.backlog_size();
        for _ in 0..max {
            let Some(front) = self.blocks.front() else {
                return;
            };
            let used = front.bytes.len();
            if min_sent < front.start + used as u64 {
                return;
            }
            if let Some(size) = keep {
                if self.blocks.len() <= 1 || self.histlen() - used <= size {
                    return;
                }
            }
            let size = front.size;
            self.blocks.pop_front();
            self.mem -= size + BLOCK_OVERHEAD;
        }
    }

    fn clear(&mut self) {
        self.blocks.clear();
        self.mem = 0;
    }

    /// The block that holds offset `at` (or the one it would go in next).
    fn index_of(&self, at: u64) -> usize {
        self.blocks
            .partition_point(|b| b.start <= at)
            .saturating_sub(1)
    }

    /// A copy of up to `max` bytes from offset `from` on, up to offset `end`.
    fn copy(&self, from: u64, max: usize, end: u64) -> Vec<u8> {
        let want = (end + 1).saturating_sub(from).min(max as u64) as usize;
        let mut out = Vec::with_capacity(want);
        let mut at = from;
        for b in self.blocks.range(self.index_of(from)..) {
            if out.len() == want {
                break;
            }
            // `from` is never before the first block (links keep theirs).
            let off = (at.saturating_sub(b.start) as usize).min(b.bytes.len());
            let n = (b.bytes.len() - off).min(want - out.len());
            out.extend_from_slice(&b.bytes[off..off + n]);
            at += n as u64;
        }
        out
    }

    /// A link's output buffer (Redis's getClientOutputBufferMemoryUsage for a
    /// replica): from the block it has not finished sending to the end of the last.
    fn usage(&self, sent: u64) -> usize {
        let Some(last) = self.blocks.back() else {
            return 0;
        };
        let i = self.index_of(sent);
        let first = &self.blocks[i];
        (last.start + last.size as u64 - first.start) as usize
            + BLOCK_OVERHEAD * (self.blocks.len() - i)
    }
}

struct Merger {
    /// Logs (the AOF).
    readers: Vec<Reader>,
    /// Replica links.
    links: Vec<LinkReader>,
    buffer: ReplBuffer,
    next_id: u64,
    /// The number of the next entry to emit.
    next_seq: u64,
    /// Entries taken from each log (in `LOGS` order), not yet emitted: each queue is
    /// in number order (a thread numbers its appends in turn), so the next entry is
    /// at the head of one of them — or still being appended on another thread.
    queues: Vec<Queue>,
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
    /// Where the stream stood at the end of recent merges, oldest first: (every
    /// entry numbered below this is in, offset then). WAIT finds a client's last
    /// write here (`offset_of`).
    checkpoints: VecDeque<(u64, u64)>,
}

/// Merges remembered for WAIT: an older write is looked up at the oldest, which is
/// later than it (WAIT then waits for a little more of the stream, never less).
const CHECKPOINTS: usize = 4096;

/// A log's entries taken by the merge and not yet emitted, with their bytes.
#[derive(Default)]
struct Queue {
    entries: VecDeque<(u64, Effect)>,
    bytes: Vec<u8>,
}

/// A buffer emptied by the merge keeps its capacity for the log it goes back to,
/// up to this much (a burst of big writes does not pin its memory for good).
const KEEP_CAPACITY: usize = 1 << 20;

impl Queue {
    /// Takes what `log` holds. Most often everything before was emitted: then the
    /// log's buffers become the queue's and the queue's emptied ones go back to the
    /// log, so neither side allocates or frees per entry.
    fn take_from(&mut self, log: &mut ShardLog) {
        if log.entries.is_empty() {
            return;
        }
        if self.entries.is_empty() {
            let mut entries = Vec::from(std::mem::take(&mut self.entries));
            std::mem::swap(&mut entries, &mut log.entries);
            self.entries = VecDeque::from(entries);
            self.bytes.clear();
            std::mem::swap(&mut self.bytes, &mut log.bytes);
            if log.bytes.capacity() > KEEP_CAPACITY {
                log.bytes = Vec::new();
            }
            if log.entries.capacity() > KEEP_CAPACITY / 64 {
                log.entries = Vec::new();
            }
            return;
        }
        let base = self.bytes.len();
        self.bytes.extend_from_slice(&log.bytes);
        log.bytes.clear();
        self.entries
            .extend(log.entries.drain(..).map(|(seq, e)| (seq, e.shifted(base))));
    }
}

static MERGER: Mutex<Merger> = Mutex::new(Merger {
    readers: Vec::new(),
    links: Vec::new(),
    buffer: ReplBuffer::new(),
    next_id: 1,
    next_seq: 0,
    queues: Vec::new(),
    scratch: Vec::new(),
    offset: 0,
    selected: None,
    last_ping_ms: 0,
    checkpoints: VecDeque::new(),
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
            self.queues.resize_with(logs.len(), Queue::default);
        }
        for (queue, log) in self.queues.iter_mut().zip(&logs) {
            queue.take_from(&mut lock(log));
        }
        let before = self.next_seq;
        // Out of `self` while entries are emitted from their bytes.
        let mut queues = std::mem::take(&mut self.queues);
        loop {
            let next = self.next_seq;
            let Some(q) = queues
                .iter()
                .position(|q| q.entries.front().is_some_and(|(seq, _)| *seq == next))
            else {
                break;
            };
            let Some((_, effect)) = queues[q].entries.pop_front() else {
                break;
            };
            self.next_seq += 1;
            match effect {
                Effect::One { db, at, len } => {
                    self.emit(db, &queues[q].bytes[at..at + len], REPL_ALL)
                }
                Effect::Block(cmds) => self.emit_block(&cmds),
            }
        }
        self.queues = queues;
        if self.next_seq != before {
            if self.checkpoints.len() == CHECKPOINTS {
                self.checkpoints.pop_front();
            }
            self.checkpoints.push_back((self.next_seq, self.offset));
        }
    }

    /// Appends bytes of the stream to the readers `target` names; what replicas get
    /// is counted in the offset and kept in the replication buffer (while there is a
    /// backlog or a link to keep it for).
    fn write_to(&mut self, bytes: &[u8], target: Target) {
        if target != Target::Logs {
            let from = self.offset + 1;
            self.offset += bytes.len() as u64;
            if (self.buffer.backlog.is_some() || !self.links.is_empty())
                && self.buffer.push(from, bytes)
            {
                self.trim(TRIM_PER_APPEND);
            }
            for l in &mut self.links {
                if let Some(w) = l.waker.take() {
                    w.wake();
                }
            }
        }
        if target != Target::Replicas {
            for r in &mut self.readers {
                r.tail().extend_from_slice(bytes);
                if let Some(w) = r.waker.take() {
                    w.wake();
                }
            }
        }
    }

    /// Frees up to `max` blocks of the replication buffer nobody needs any more.
    fn trim(&mut self, max: usize) {
        let min_sent = self.links.iter().map(|l| l.sent).min().unwrap_or(u64::MAX);
        self.buffer.trim(min_sent, max);
    }

    /// A link's next piece of stream (at most `LINK_PIECE` bytes): Some(None) when
    /// it has everything, None when it is gone. Asking means the piece before was
    /// sent.
    fn take_link(&mut self, id: u64) -> Option<Option<Vec<u8>>> {
        let end = self.offset;
        let l = self.links.iter_mut().find(|l| l.id == id)?;
        let moved = l.sent != l.taken;
        l.sent = l.taken;
        let from = l.taken;
        let piece = (from <= end).then(|| self.buffer.copy(from, LINK_PIECE, end));
        if let Some(bytes) = &piece {
            l.taken += bytes.len() as u64;
        }
        if moved {
            self.trim(TRIM_PER_APPEND);
        }
        Some(piece)
    }

    /// One command (RESP) in database `db` for the readers `repl` names, after a
    /// SELECT when the stream is in another.
    fn emit(&mut self, db: usize, cmd: &[u8], repl: u8) {
        let replica = REPLICA_MODE.load(std::sync::atomic::Ordering::Relaxed);
        // A replica's own effects go to its logs only (its replicas get its master's).
        let to_logs = repl & REPL_AOF != 0;
        let to_replicas = repl & REPL_REPLICAS != 0 && !replica;
        let target = match (to_logs, to_replicas) {
            (true, true) => Target::All,
            (true, false) => Target::Logs,
            (false, true) => Target::Replicas,
            (false, false) => return,
        };
        if self.selected == Some(db) {
            return self.write_to(cmd, target);
        }
        let mut bytes = std::mem::take(&mut self.scratch);
        bytes.clear();
        encode(
            &mut bytes,
            &[b"SELECT".as_slice(), db.to_string().as_bytes()],
        );
        bytes.extend_from_slice(cmd);
        self.write_to(&bytes, target);
        self.scratch = bytes;
        // When only some of the readers got the SELECT, the next effect selects
        // again for all of them.
        let everyone = if replica { Target::Logs } else { Target::All };
        self.selected = (target == everyone).then_some(db);
    }

    /// An atomic unit inside MULTI/EXEC (Redis 7.0's propagatePendingCommands, which
    /// sends MULTI and EXEC to every reader whoever the commands are for); one
    /// command alone.
    fn emit_block(&mut self, cmds: &[(usize, u8, Vec<u8>)]) {
        let Some(&(first, repl, ref cmd)) = cmds.first() else {
            return;
        };
        if cmds.len() == 1 {
            return self.emit(first, cmd, repl);
        }
        self.emit(first, b"*1\r\n$5\r\nMULTI\r\n", REPL_ALL);
        let mut last = first;
        for (db, repl, cmd) in cmds {
            self.emit(*db, cmd, *repl);
            last = *db;
        }
        self.emit(last, b"*1\r\n$4\r\nEXEC\r\n", REPL_ALL);
    }
}

/// A command as RESP, the lengths written without formatting machinery (this runs
/// once per propagated command, on the thread that ran it). Also how the AOF's
/// loader and command base write commands.
pub fn encode<A: AsRef<[u8]>>(out: &mut Vec<u8>, argv: &[A]) {
    encode_parts(out, argv.len(), argv.iter().map(AsRef::as_ref));
}

/// `encode` for `n` arguments given one by one.
pub fn encode_parts<'a>(out: &mut Vec<u8>, n: usize, parts: impl Iterator<Item = &'a [u8]>) {
    header(out, b'*', n);
    for a in parts {
        header(out, b'$', a.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// `<kind><n>\r\n`.
fn header(out: &mut Vec<u8>, kind: u8, n: usize) {
    let mut line = [0u8; NUMBER_LINE_MAX];
    let len = write_number_line(&mut line, kind, false, n as u64);
    out.extend_from_slice(&line[..len]);
}

/// Room `encode_sized` needs for `n` arguments of `bytes` bytes in all: each
/// argument's header and CRLF, and the array's header, take at most
/// `NUMBER_LINE_MAX + 2` bytes.
pub fn sized_bound(n: usize, bytes: usize) -> usize {
    bytes + (NUMBER_LINE_MAX + 2) * (n + 1)
}

/// `encode_parts` for the effects every write appends, given the arguments' total
/// size: the room is made once and every header written in place, so no part's
/// append checks capacity or calls memcpy for a few bytes (the generic encoder
/// took about 500 instructions for a SET).
pub fn encode_sized<'a>(
    out: &mut Vec<u8>,
    n: usize,
    bytes: usize,
    parts: impl Iterator<Item = &'a [u8]>,
) {
    let start = out.len();
    out.resize(start + sized_bound(n, bytes), 0);
    let buf = &mut out[start..];
    let mut at = write_number_line(buf, b'*', false, n as u64);
    for a in parts {
        at += write_number_line(&mut buf[at..], b'$', false, a.len() as u64);
        buf[at..at + a.len()].copy_from_slice(a);
        at += a.len();
        buf[at..at + 2].copy_from_slice(b"\r\n");
        at += 2;
    }
    out.truncate(start + at);
}

/// Bytes of stream produced so far (master_repl_offset).
pub fn offset() -> u64 {
    merged().offset
}

/// The offset at which the stream holds every entry numbered below `seq` (a
/// client's writes, for WAIT: Redis's c->woff), or a little later. Entries below it
/// were all appended when the caller read `seq` from `next_seq`; one whose thread
/// took its number but had not pushed it when this merge looked is there a moment
/// later.
pub fn offset_of(seq: u64) -> u64 {
    let m = merged_past(seq);
    if m.next_seq < seq {
        return m.offset;
    }
    let i = m.checkpoints.partition_point(|(s, _)| *s < seq);
    m.checkpoints.get(i).map_or(m.offset, |(_, o)| *o)
}

/// The merger once it emitted every entry numbered below `seq` (all appended when
/// the caller read `seq` from `next_seq`; one whose thread took its number but had
/// not pushed it yet is there a moment later), or after a bounded wait for it.
fn merged_past(seq: u64) -> MutexGuard<'static, Merger> {
    for _ in 0..1000 {
        let m = merged();
        if m.next_seq >= seq {
            return m;
        }
        drop(m);
        std::thread::yield_now();
    }
    merged()
}

impl Merger {
    /// Where the merge stands: what a log reader with nothing left to take covers.
    fn mark(&self) -> Mark {
        Mark {
            seq: self.next_seq,
            offset: self.offset,
            // Moved only under the merger's lock, which the caller holds.
            epoch: offset_epoch(),
        }
    }
}

/// Where the stream stands now, as a log reader caught up with it would be.
pub fn mark() -> Mark {
    merged().mark()
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
    let mut m = merged();
    let at = m.offset + 1;
    let id = m.add_link(at);
    // Every reader reads one stream: the new one's starts with a SELECT, so the next
    // effect selects again for all (Redis resets slaveseldb on a full resync).
    m.selected = None;
    (id, m.offset)
}

/// Adds a log (the AOF) as a reader: its part starts with the next effect, after a
/// SELECT, without the keep-alive PINGs.
pub fn subscribe_log() -> u64 {
    let mut m = merged();
    let id = m.next_id;
    m.next_id += 1;
    m.readers.push(Reader::new(id));
    m.selected = None;
    READERS.join();
    id
}

impl Merger {
    fn add_link(&mut self, at: u64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.links.push(LinkReader {
            id,
            sent: at,
            taken: at,
            waker: None,
        });
        READERS.join();
        id
    }
}

pub fn unsubscribe(id: u64) {
    let mut m = lock(&MERGER);
    let (readers, links) = (m.readers.len(), m.links.len());
    m.readers.retain(|r| r.id != id);
    m.links.retain(|l| l.id != id);
    if m.readers.len() < readers || m.links.len() < links {
        READERS.leave();
    }
    if m.links.len() < links {
        // What only this link held goes (a replica that left makes the buffer
        // smaller at once, as Redis's freeClient does).
        m.trim(TRIM_PER_CRON);
    }
}

/// A replica link's output buffer, as Redis counts it for
/// `client-output-buffer-limit replica` and CLIENT LIST's omem: the replication
/// buffer from the block it has not finished sending to the end.
pub fn link_usage(id: u64) -> usize {
    let m = merged();
    m.links
        .iter()
        .find(|l| l.id == id)
        .map_or(0, |l| m.buffer.usage(l.sent))
}

/// The link's next piece of stream, or Pending (waking `waker` when there is some);
/// None once the link is gone. Asking again means the piece before was sent.
pub fn poll(id: u64, waker: &Waker) -> Poll<Option<Vec<u8>>> {
    let mut m = merged();
    match m.take_link(id) {
        None => return Poll::Ready(None),
        Some(Some(bytes)) => return Poll::Ready(Some(bytes)),
        Some(None) => {}
    }
    if let Some(l) = m.links.iter_mut().find(|l| l.id == id) {
        l.waker = Some(waker.clone());
    }
    wait_for_appends(waker);
    // An append made between the pull above and those registrations is seen now.
    m.pull();
    match m.take_link(id) {
        None => Poll::Ready(None),
        Some(Some(bytes)) => Poll::Ready(Some(bytes)),
        Some(None) => Poll::Pending,
    }
}

/// Registers `waker` with every shard log (and for logs not made yet): the next
/// append on any thread wakes it, once per waker.
fn wait_for_appends(waker: &Waker) {
    let wait_in = |waiting: &mut Vec<Waker>| {
        if !waiting.iter().any(|w| w.will_wake(waker)) {
            waiting.push(waker.clone());
        }
    };
    wait_in(&mut lock(&NEW_LOG_WAITING));
    for log in lock(&LOGS).iter() {
        wait_in(&mut lock(log).waiting);
    }
}

/// A log reader's next piece (`Taken`); when it has caught up, `waker` is woken by
/// the next append. None once the reader is gone.
pub fn poll_log(id: u64, waker: &Waker) -> Option<Taken> {
    let mut m = merged();
    let now = m.mark();
    let r = m.readers.iter_mut().find(|r| r.id == id)?;
    let taken = r.take(now);
    if !matches!(taken, Taken::CaughtUp(_)) {
        return Some(taken);
    }
    r.waker = Some(waker.clone());
    wait_for_appends(waker);
    // An append made between the pull above and those registrations is seen now.
    m.pull();
    let now = m.mark();
    let r = m.readers.iter_mut().find(|r| r.id == id)?;
    Some(r.take(now))
}

/// A log reader's next piece, without asking to be woken for the next (a reader
/// that polls on its own schedule spares the writers the wake-ups). None once the
/// reader is gone.
pub fn take_log(id: u64) -> Option<Taken> {
    let mut m = merged();
    let now = m.mark();
    let r = m.readers.iter_mut().find(|r| r.id == id)?;
    Some(r.take(now))
}

/// Closes the log reader's current segment after every entry appended so far: what
/// is appended from now on, after a SELECT, is taken after a `Taken::Switch`. Called
/// with every shard held (an AOF rewrite's cut), so "so far" is exactly the cut.
pub fn switch_point(id: u64) {
    let mut m = merged();
    let now = m.mark();
    if let Some(r) = m.readers.iter_mut().find(|r| r.id == id) {
        if let Some(last) = r.segments.back_mut() {
            last.ends = Some(now);
        }
        r.segments.push_back(Segment {
            bytes: Vec::new(),
            ends: None,
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
    // The applied commands' own effects (to the AOF) are emitted before the offset
    // counts their bytes: a log caught up at an offset holds what it stands for.
    let mut m = merged_past(super::next_seq());
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
    if m.buffer.backlog.is_none() {
        m.buffer.backlog = Some(size);
        READERS.join();
    }
}

/// Frees the backlog (repl-backlog-ttl without replicas).
pub fn backlog_free() {
    let mut m = merged();
    if m.buffer.backlog.take().is_some() {
        READERS.leave();
        m.trim(usize::MAX);
    }
}

/// CONFIG SET repl-backlog-size: a smaller backlog is trimmed (a little at a time,
/// as Redis does), a bigger one fills as the stream goes on.
pub fn backlog_resize(size: usize) {
    let mut m = merged();
    if m.buffer.backlog.is_some() {
        m.buffer.backlog = Some(size);
        m.trim(TRIM_PER_APPEND);
    }
}

/// The replication cron's part (Redis's replicationCron → the backlog trimmed a
/// little at a time, even with no stream coming).
pub fn trim_buffer() {
    merged().trim(TRIM_PER_CRON);
}

/// INFO memory's replication fields, as Redis 7.0 splits its one buffer: the
/// backlog's part (up to repl-backlog-size) and the replicas' (what the buffer holds
/// beyond it while there are replicas).
pub fn replication_memory() -> (usize, usize) {
    let m = merged();
    let size = m.buffer.backlog.unwrap_or(0);
    let mem = m.buffer.mem;
    if !m.links.is_empty() && mem > size {
        (size, mem - size)
    } else {
        (mem, 0)
    }
}

/// INFO's repl_backlog_* fields: (size, first byte's offset, bytes held).
pub fn backlog_info() -> Option<(usize, u64, usize)> {
    let m = merged();
    let size = m.buffer.backlog_size()?;
    let held = m.buffer.histlen();
    Some((size, m.offset + 1 - held as u64, held))
}

/// A replica's full sync: the stream goes on from the master's `offset`; the buffer
/// starts again empty (what it held is another history), and the links, if any
/// (they are being disconnected), from there.
pub fn reset_offset(offset: u64) {
    let mut m = merged();
    OFFSET_EPOCH.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    m.offset = offset;
    m.buffer.clear();
    m.checkpoints.clear();
    for l in &mut m.links {
        l.sent = offset + 1;
        l.taken = offset + 1;
    }
    m.selected = None;
}

/// PSYNC's partial resync (Redis's masterTryPartialResynchronization, the backlog
/// half): a replica link whose part starts at `from` (the first byte the replica
/// lacks), anywhere in the buffer's history — which may reach back beyond
/// repl-backlog-size while a slower link holds it. None when there is no backlog
/// or it does not hold `from`. Returns the link's id and how many bytes of history
/// it gets.
pub fn subscribe_from(from: u64) -> Option<(u64, usize)> {
    let mut m = merged();
    m.buffer.backlog?;
    let first = m.offset + 1 - m.buffer.histlen() as u64;
    if from < first || from > m.offset + 1 {
        return None;
    }
    let id = m.add_link(from);
    Some((id, (m.offset + 1 - from) as usize))
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

    /// The sized encoder writes what the generic one does, at every header width,
    /// after what the buffer already holds, and leaves nothing of its room behind.
    #[test]
    fn sized_encoding_matches_the_generic_one() {
        for len in [0usize, 1, 9, 10, 99, 100, 101, 12_345, 100_000] {
            let value = vec![b'v'; len];
            let argv: Vec<&[u8]> = vec![b"SET", b"key", &value, b"", b"x"];
            for n in 1..=argv.len() {
                let parts = &argv[..n];
                let mut generic = b"before".to_vec();
                encode(&mut generic, parts);
                let mut sized = b"before".to_vec();
                let bytes = parts.iter().map(|a| a.len()).sum();
                encode_sized(&mut sized, n, bytes, parts.iter().copied());
                assert_eq!(sized, generic);
            }
        }
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

    /// The replication buffer against a plain vector of the whole stream, with three
    /// links sending at their own paces: every piece a link gets is the stream's
    /// bytes at its offset; the history held reaches back to the slowest link and
    /// to at least repl-backlog-size (or all there is); blocks follow each other
    /// without gaps, only the last one not full; `mem` is what the blocks take.
    #[test]
    fn replication_buffer_keeps_what_links_and_the_backlog_need() {
        let mut x = 7u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut model: Vec<u8> = Vec::new();
        let mut buf = ReplBuffer::new();
        buf.backlog = Some(MIN_BACKLOG);
        let mut sent = [1u64; 3];
        for round in 0..4000usize {
            let n = if round % 97 == 0 {
                100_000
            } else {
                (next() % 5000) as usize
            };
            let chunk: Vec<u8> = (0..n).map(|i| (round * 31 + i) as u8).collect();
            buf.push(model.len() as u64 + 1, &chunk);
            model.extend_from_slice(&chunk);
            let end = model.len() as u64;
            let k = (next() % 3) as usize;
            let piece = buf.copy(sent[k], (next() % 70_000) as usize, end);
            let at = (sent[k] - 1) as usize;
            assert_eq!(piece, model[at..at + piece.len()], "round {round}");
            sent[k] += piece.len() as u64;
            if round % 1000 == 999 {
                // One link catches up at once.
                sent[k] = end + 1;
            }
            let min_sent = *sent.iter().min().expect("links");
            buf.trim(min_sent, if round % 7 == 0 { usize::MAX } else { 64 });
            let held = buf.histlen() as u64;
            assert!(
                end + 1 - held <= min_sent,
                "round {round}: a link's bytes went"
            );
            assert!(
                held >= (MIN_BACKLOG as u64).min(end),
                "round {round}: backlog short"
            );
            let mut mem = 0;
            for (i, b) in buf.blocks.iter().enumerate() {
                mem += b.size + BLOCK_OVERHEAD;
                assert!(b.bytes.len() <= b.size);
                if let Some(next) = buf.blocks.get(i + 1) {
                    assert_eq!(b.bytes.len(), b.size, "only the last block has room");
                    assert_eq!(b.start + b.size as u64, next.start);
                }
            }
            assert_eq!(mem, buf.mem);
            for s in sent {
                assert!(buf.usage(s) as u64 >= end + 1 - s);
            }
        }
        // With no link left and no backlog, nothing is kept.
        buf.backlog = None;
        buf.trim(u64::MAX, usize::MAX);
        assert_eq!((buf.histlen(), buf.mem), (0, 0));
    }
}
