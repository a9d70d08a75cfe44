//! Commands bound for one shard, copied out of a connection's read buffer into one
//! contiguous block so they can travel in a single message (DESIGN.md §3.4), and the
//! code that runs them on the owning shard.

use std::rc::Rc;

use super::exec::{execute, Call, Wake};
use super::locks::{self, KeyLocks, LockSet, TxnId};
use super::ShardCell;
use crate::commands::{table, Args, Cross, KeyedFn, Kind};
use crate::protocol::parser::ArgSpan;
use crate::protocol::reply::Protocol;
use crate::storage::evict::OomCheck;
use crate::storage::keyspace::PREFETCH_BATCH;
use crate::util::clock::Stamp;

#[derive(Debug, Clone, Copy)]
struct BatchCmd {
    cmd: u16,
    /// Run the command's per-key `Split` handler instead of its main one.
    split_part: bool,
    /// Whether this command counts in the command statistics: a split command
    /// counts once, on its first part.
    counted: bool,
    /// Client tracking: remember the keys read for the batch's client.
    track: bool,
    db: u8,
    proto: Protocol,
    args: (u32, u32),
    keys: (u32, u32),
}

/// A run of commands for one shard, in the order they must execute there.
pub struct OwnedBatch {
    data: Vec<u8>,
    spans: Vec<ArgSpan>,
    key_spans: Vec<ArgSpan>,
    cmds: Vec<BatchCmd>,
    /// The connection that sent the batch, and its shard (client tracking).
    pub client: u64,
    pub home: usize,
    /// The reply bytes the batch may produce before its client breaks its hard
    /// `client-output-buffer-limit`: past it the shard stops running the batch and
    /// marks the reply `cut` (Redis stops processing a client it will close).
    /// `usize::MAX` (no limit) unless the sender sets it for this batch.
    pub out_budget: usize,
}

impl Default for OwnedBatch {
    fn default() -> OwnedBatch {
        OwnedBatch {
            data: Vec::new(),
            spans: Vec::new(),
            key_spans: Vec::new(),
            cmds: Vec::new(),
            client: 0,
            home: 0,
            out_budget: usize::MAX,
        }
    }
}

impl OwnedBatch {
    pub fn len(&self) -> usize {
        self.cmds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cmds.is_empty()
    }

    /// Empties the batch, keeping its buffers for the next one (unless one huge
    /// command grew them: see `clear_or_release`).
    pub fn clear(&mut self) {
        clear_or_release(&mut self.data);
        clear_or_release(&mut self.spans);
        clear_or_release(&mut self.key_spans);
        clear_or_release(&mut self.cmds);
        self.out_budget = usize::MAX;
    }

    /// Command `i` is a read whose keys the client tracks.
    pub fn track(&mut self, i: usize) {
        self.cmds[i].track = true;
    }

    fn push_arg(&mut self, a: &[u8]) -> ArgSpan {
        let start = self.data.len() as u32;
        self.data.extend_from_slice(a);
        let span = ArgSpan {
            start,
            end: self.data.len() as u32,
        };
        self.spans.push(span);
        span
    }

    /// Appends a whole command; returns its index in the batch.
    pub fn push(
        &mut self,
        cmd: u16,
        db: u8,
        proto: Protocol,
        args: &Args,
        key_positions: impl Iterator<Item = usize>,
    ) -> usize {
        let a0 = self.spans.len() as u32;
        let k0 = self.key_spans.len() as u32;
        let mut next_key = key_positions.peekable();
        for i in 0..args.len() {
            let span = self.push_arg(args.get(i));
            if next_key.peek() == Some(&i) {
                self.key_spans.push(span);
                next_key.next();
            }
        }
        self.finish(cmd, false, db, proto, a0, k0)
    }

    /// Starts this shard's part of a split command: the command name, to which
    /// `extend_part` then appends the key groups owned here. Only the `counted` part
    /// of a command records it in the statistics. Returns its index in the batch.
    pub fn open_part(
        &mut self,
        cmd: u16,
        db: u8,
        proto: Protocol,
        name: &[u8],
        counted: bool,
    ) -> usize {
        let a0 = self.spans.len() as u32;
        let k0 = self.key_spans.len() as u32;
        self.push_arg(name);
        let i = self.finish(cmd, true, db, proto, a0, k0);
        self.cmds[i].counted = counted;
        i
    }

    /// Appends one key group (the key first) to the part `open_part` started last.
    pub fn extend_part(&mut self, group: &[&[u8]]) {
        for (i, a) in group.iter().enumerate() {
            let span = self.push_arg(a);
            if i == 0 {
                self.key_spans.push(span);
            }
        }
        if let Some(c) = self.cmds.last_mut() {
            c.args.1 = self.spans.len() as u32;
            c.keys.1 = self.key_spans.len() as u32;
        }
    }

    fn finish(
        &mut self,
        cmd: u16,
        split_part: bool,
        db: u8,
        proto: Protocol,
        a0: u32,
        k0: u32,
    ) -> usize {
        self.cmds.push(BatchCmd {
            cmd,
            split_part,
            counted: true,
            track: false,
            db,
            proto,
            args: (a0, self.spans.len() as u32),
            keys: (k0, self.key_spans.len() as u32),
        });
        self.cmds.len() - 1
    }

    /// Warms the cache for the keys of the commands from `from` on that use the same
    /// database, before they run (see `Db::prefetch`, which takes the first
    /// `PREFETCH_BATCH`). A lone command has nothing to overlap with and is skipped.
    fn prefetch(&self, cell: &ShardCell, from: usize) {
        let rest = &self.cmds[from.min(self.cmds.len())..];
        let Some(db) = rest.first().filter(|_| rest.len() >= 2).map(|c| c.db) else {
            return;
        };
        let data = cell.data.borrow();
        if let Some(d) = data.dbs.get(db as usize) {
            let keys = (from..from + rest.len())
                .take_while(|&i| self.cmds[i].db == db)
                .flat_map(|i| self.keys_of(i));
            d.prefetch(keys);
        }
    }

    /// Starts loading every buffer of a batch that arrived from another shard: its
    /// lines are in the sender's cache, and read in order each miss would wait for the
    /// one before (perf put most of a hop's execution on these first touches).
    pub fn prefetch_buffers(&self) {
        use crate::util::prefetch::read_slice;
        read_slice(&self.cmds, HOP_PREFETCH_LINES);
        read_slice(&self.spans, HOP_PREFETCH_LINES);
        read_slice(&self.key_spans, HOP_PREFETCH_LINES);
        read_slice(&self.data, HOP_PREFETCH_LINES);
    }

    fn keys_of(&self, i: usize) -> impl Iterator<Item = &[u8]> + Clone {
        let (k0, k1) = self.cmds[i].keys;
        self.key_spans[k0 as usize..k1 as usize]
            .iter()
            .map(|s| &self.data[s.start as usize..s.end as usize])
    }

    /// Every (db, key) the batch touches: what a multi-shard operation locks on the
    /// shard whose `locks` these are.
    pub fn lock_set(&self, locks: &KeyLocks) -> LockSet {
        let mut ids = Vec::with_capacity(self.key_spans.len());
        for (i, c) in self.cmds.iter().enumerate() {
            ids.extend(self.keys_of(i).map(|k| locks.id(c.db, k)));
        }
        LockSet::Ids(ids)
    }

    fn blocked(&self, i: usize, cell: &ShardCell) -> bool {
        let locks = cell.locks.borrow();
        if locks.is_idle() {
            return false;
        }
        let db = self.cmds[i].db;
        self.keys_of(i).any(|k| locks.blocks(db, k, None))
    }
}

/// Replies of a batch, back to back, with each command's end offset.
#[derive(Default, Debug)]
pub struct BatchReply {
    pub out: Vec<u8>,
    ends: Vec<u32>,
    /// Commands slow enough for the slowlog, which the sending connection logs with
    /// its client's address and name: (index in the batch, what to log).
    pub slow: Vec<(u32, crate::observe::SlowRecord)>,
    /// Time taken by each part of a split command (index in the batch, usec): the
    /// connection decides whether the whole command was slow.
    pub part_usec: Vec<(u32, u64)>,
    /// The batch stopped early: its replies went past the client's output budget.
    pub cut: bool,
}

impl BatchReply {
    /// How long part `i` of a split command took (0 if not timed).
    pub fn part_usec(&self, i: u32) -> u64 {
        // Parts are timed in batch order, so the list is sorted by index.
        self.part_usec
            .binary_search_by_key(&i, |(j, _)| *j)
            .map_or(0, |at| self.part_usec[at].1)
    }
}

impl BatchReply {
    /// Starts loading the replies written on another shard before they are copied
    /// into the connection's output.
    pub fn prefetch(&self) {
        crate::util::prefetch::read_slice(&self.out, HOP_PREFETCH_LINES);
        crate::util::prefetch::read_slice(&self.ends, HOP_PREFETCH_LINES);
    }

    /// Empties the reply, keeping its buffers for the next one (unless one huge
    /// reply grew them).
    pub fn clear(&mut self) {
        clear_or_release(&mut self.out);
        clear_or_release(&mut self.ends);
        self.slow.clear();
        self.part_usec.clear();
        self.cut = false;
    }

    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.out[start..self.ends[i] as usize]
    }
}

/// How many cache lines of each buffer a hop prefetches: a pipeline's worth; a huge
/// batch is read in order anyway, where the hardware prefetcher keeps up.
const HOP_PREFETCH_LINES: usize = 16;

/// Recycled buffers above this stay with the connection only while in use: one SADD
/// of 100,000 members left ~2 MB behind in its connection's batch for good.
/// Pipelines of ordinary commands stay far below it and keep their buffers.
const RECYCLE_MAX_BYTES: usize = 256 * 1024;

fn clear_or_release<T>(v: &mut Vec<T>) {
    if v.capacity() * std::mem::size_of::<T>() > RECYCLE_MAX_BYTES {
        *v = Vec::new();
    } else {
        v.clear();
    }
}

fn handler_of(cmd: u16, split_part: bool) -> KeyedFn {
    match table().specs[cmd as usize].kind {
        Kind::Keyed(_, Cross::Split { one, .. }) if split_part => one,
        Kind::Keyed(run, _) => run,
        // Only keyed commands are ever put in a batch.
        _ => unreachable!("non-keyed command in a shard batch"),
    }
}

/// Runs one command of the batch and appends its reply. `clock` is the end of the
/// previous command (None when timing is off): one clock read per command. Returns
/// `Err(bytes)` without running it when other shards must evict first (`may_ask`).
fn run_one(
    cell: &ShardCell,
    batch: &OwnedBatch,
    i: usize,
    (now, txn, may_ask): (u64, Option<TxnId>, bool),
    reply: &mut BatchReply,
    clock: &mut Option<Stamp>,
) -> Result<(), u64> {
    let c = batch.cmds[i];
    let run = handler_of(c.cmd, c.split_part);
    let args = Args::new(
        &batch.data,
        &batch.spans[c.args.0 as usize..c.args.1 as usize],
    );
    let mut data = cell.data.borrow_mut();
    let spec = &table().specs[c.cmd as usize];
    if data.mem.limit != 0 {
        let denyoom = spec.has(crate::commands::table::flags::DENYOOM);
        match data.oom_check(denyoom, cell.locks.borrow().is_idle(), may_ask) {
            OomCheck::Run => {}
            OomCheck::AskPeers(bytes) => return Err(bytes),
            OomCheck::Refuse => {
                crate::commands::oom_reject(&mut data, c.cmd, c.proto, &mut reply.out);
                reply.ends.push(reply.out.len() as u32);
                return Ok(());
            }
        }
    }
    let call = Call {
        cmd: c.cmd,
        run,
        db: c.db as usize,
        args,
        keys: || batch.keys_of(i),
        proto: c.proto,
        now,
        client: batch.client,
        txn,
        track_home: c.track.then_some(batch.home),
        wake: Wake::Serve,
        clock: *clock,
        counted: c.counted,
        error_counted: false,
        // A split command's slowness is judged on its whole, at home.
        slowlog: !c.split_part,
    };
    let executed = execute(&cell.locks, &mut data, call, &mut reply.out);
    if executed.end.is_some() {
        *clock = executed.end;
    }
    if c.split_part && clock.is_some() {
        reply.part_usec.push((i as u32, executed.usec));
    }
    if let Some(rec) = executed.slow {
        reply.slow.push((i as u32, rec));
    }
    reply.ends.push(reply.out.len() as u32);
    Ok(())
}

/// Why a batch stopped before its end: the command at this index waits.
#[derive(Clone, Copy)]
enum Stop {
    /// For a key another operation has locked.
    Locked(usize),
    /// For other shards to evict this many bytes (the server is over maxmemory and
    /// this shard has nothing it may evict).
    Memory(usize, u64),
}

impl Stop {
    /// Waits for what stopped the batch; returns where it resumes and the command
    /// that must not ask the other shards again.
    async fn wait(self, cell: &Rc<ShardCell>, batch: &OwnedBatch) -> (usize, Option<usize>) {
        match self {
            Stop::Locked(i) => {
                let db = batch.cmds[i].db;
                let keys: Vec<Vec<u8>> = batch.keys_of(i).map(|k| k.to_vec()).collect();
                locks::wait_unlocked(&cell.locks, db, keys).await;
                (i, None)
            }
            Stop::Memory(i, bytes) => {
                crate::shard::memory::evict_on_peers(cell, bytes).await;
                (i, Some(i))
            }
        }
    }
}

/// Runs commands from `from` on until one touches a key another operation has locked
/// or must wait for other shards' evictions (returns why) or the batch ends (None).
/// `txn`'s own locks never block it; `asked` already had its evictions.
fn run_until_blocked(
    cell: &ShardCell,
    batch: &OwnedBatch,
    (from, asked): (usize, Option<usize>),
    txn: Option<TxnId>,
    reply: &mut BatchReply,
) -> Option<Stop> {
    let now = crate::util::now_ms();
    let mut clock = cell.data.borrow().observe.timing().then(Stamp::now);
    for i in from..batch.cmds.len() {
        if (i - from) % PREFETCH_BATCH == 0 {
            batch.prefetch(cell, i);
        }
        if txn.is_none() && batch.blocked(i, cell) {
            return Some(Stop::Locked(i));
        }
        let may_ask = asked != Some(i);
        if let Err(bytes) = run_one(cell, batch, i, (now, txn, may_ask), reply, &mut clock) {
            return Some(Stop::Memory(i, bytes));
        }
        // One compare per command: the budget is usize::MAX without a limit, and a
        // transaction's batches are never cut (all of EXEC runs, as in Redis).
        if reply.out.len() >= batch.out_budget && txn.is_none() {
            reply.cut = true;
            return None;
        }
    }
    None
}

/// Runs a batch on this shard, waiting behind key locks where needed. Without `txn`
/// (plain single-shard commands) it completes synchronously unless a key is locked.
pub async fn run(cell: &Rc<ShardCell>, batch: &OwnedBatch, txn: Option<TxnId>) -> BatchReply {
    run_into(cell, batch, txn, BatchReply::default()).await
}

/// `run`, writing into `reply` (an emptied one the caller recycles).
pub async fn run_into(
    cell: &Rc<ShardCell>,
    batch: &OwnedBatch,
    txn: Option<TxnId>,
    mut reply: BatchReply,
) -> BatchReply {
    reply.out.reserve(64 * batch.len());
    reply.ends.reserve(batch.len());
    let mut at = (0, None);
    while let Some(stop) = run_until_blocked(cell, batch, at, txn, &mut reply) {
        at = stop.wait(cell, batch).await;
    }
    reply
}

/// Entry point for a batch arriving from another shard (one request of a hop, held in
/// place in the hop's vector): runs it now when nothing blocks it and returns true.
/// Otherwise the batch and its reply are taken out, a task waits for what blocks
/// (key locks, other shards' evictions) and finishes the batch, then hands both to
/// `done`; returns false. The reply is written into `reply`, an emptied one the sender
/// lent, so a hop allocates no payload memory.
pub fn run_remote(
    cell: &Rc<ShardCell>,
    batch: &mut OwnedBatch,
    reply: &mut BatchReply,
    done: impl FnOnce(BatchReply, OwnedBatch) + 'static,
) -> bool {
    reply.out.reserve(64 * batch.len());
    reply.ends.reserve(batch.len());
    let Some(first_stop) = run_until_blocked(cell, batch, (0, None), None, reply) else {
        return true;
    };
    let batch = std::mem::take(batch);
    let mut reply = std::mem::take(reply);
    let cell = cell.clone();
    crate::runtime::spawn_detached(async move {
        let mut stop = first_stop;
        loop {
            let at = stop.wait(&cell, &batch).await;
            match run_until_blocked(&cell, &batch, at, None, &mut reply) {
                None => break,
                Some(next) => stop = next,
            }
        }
        done(reply, batch);
    });
    false
}
