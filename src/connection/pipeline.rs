//! The pipeline: routing each command to the shard that owns its keys, running it
//! inline through the executor when that is the home shard, batching the others per
//! destination shard (one message per shard per flush), splitting multi-key commands
//! across shards, and stitching the replies back in request order.

use super::*;
use crate::shard::hops::HopWait;
use crate::shard::merge::merge_replies;

/// Replies a reading-ahead connection may hold before it stops to write them: the
/// generation in flight is finished before the next leaves, so this bounds its
/// pending output to about twice as much.
const READ_AHEAD_MAX_OUTPUT: usize = 128 * 1024;

/// Where a keyed command's keys live.
pub(super) enum KeyShard {
    /// All on this shard (also a command with no key: it runs at home).
    One(usize),
    /// On more than one shard.
    Spans,
}

pub(super) fn key_shard(
    cell: &ShardCell,
    spec: &commands::CommandSpec,
    args: &Args<'_>,
) -> KeyShard {
    if cell.shard_count() == 1 {
        return KeyShard::One(cell.id);
    }
    let mut first = None;
    for p in spec.keys.positions(args) {
        let s = cell.shard_of(args.get(p));
        match first {
            None => first = Some(s),
            Some(f) if f != s => return KeyShard::Spans,
            _ => {}
        }
    }
    KeyShard::One(first.unwrap_or(cell.id))
}

/// The array reply of a split command whose per-shard parts each answered several
/// key groups back to back: takes the elements in the client's key order (`order`
/// names the shard of each group). A part that failed as a whole answers each of its
/// groups with its error.
pub(super) fn merge_in_order(
    parts: &[(u16, u32)],
    order: &[u16],
    replies: &[Option<BatchReply>],
    cursors: &mut Vec<usize>,
    w: &mut ReplyWriter,
) {
    cursors.clear();
    cursors.resize(parts.len(), 0);
    w.array_len(order.len());
    for &shard in order {
        let Some(j) = parts.iter().position(|&(s, _)| s == shard) else {
            w.null();
            continue;
        };
        let Some(reply) = &replies[shard as usize] else {
            w.null();
            continue;
        };
        let piece = reply.get(parts[j].1 as usize);
        let rest = piece.get(cursors[j]..).unwrap_or_default();
        if piece.first() == Some(&b'-') {
            w.out.extend_from_slice(piece);
        } else if let Some(n) = crate::protocol::reply::value_len(rest) {
            w.out.extend_from_slice(&rest[..n]);
            cursors[j] += n;
        } else {
            w.null();
        }
    }
}

impl Connection {
    /// The common case, run without building the futures of `run_command`,
    /// `route_keyed` and `run_inline` (whose set-up and state switches were about a
    /// tenth of a pipelined GET or SET): a known keyed command of the right arity
    /// whose keys are all on this shard, or a fast connection command (PING, ECHO,
    /// SELECT ...), from an authenticated client with replies on, outside MULTI,
    /// pub/sub and tracking, with no script busy, no monitor, no replication refusal
    /// and no client pause; for a keyed command also no key lock on the shard and no
    /// maxmemory. It then does exactly what the full path does for it. Returns false,
    /// having changed nothing, for anything else.
    pub(super) fn run_fast(&mut self, args: &Args<'_>) -> bool {
        let name = args.get(0);
        let Some((idx, spec)) = self
            .last_cmd
            .filter(|(_, s)| s.name.as_bytes().eq_ignore_ascii_case(name))
            .or_else(|| commands::lookup(name))
        else {
            return false;
        };
        match spec.kind {
            Kind::Keyed(..) => {}
            // PING, ECHO, SELECT, TIME ...: fast connection commands that neither take
            // the connection over nor touch authentication or subscriptions.
            Kind::Client(_)
                if spec.has(flags::FAST)
                    && !spec.has(flags::ADMIN | flags::PUBSUB | flags::NO_AUTH) => {}
            _ => return false,
        }
        // What would make the command wait, be queued or be reported elsewhere: the
        // general path handles those.
        let session = &self.session;
        let shared = &session.shared;
        if session.reply_mode != ReplyMode::On
            || !session.acl_open
            || session.acl_gen != crate::acl::generation()
            || session.multi.is_some()
            || shared.pubsub.has_pushes()
            || shared.tracking.on()
            || shared.tracking.caching_given()
            || crate::observe::monitoring()
            || self.pipe.locked
            || session.cluster.asking
        {
            return false;
        }
        let t = commands::table();
        let stat = t.stat_id(idx, args);
        if t.stat_sub(stat).is_some() || !matches!(self.gate(idx, spec, stat, args), Gate::Pass) {
            return false;
        }
        let cell = self.session.cell.clone();
        if cell.data.borrow().client_pause.is_set() {
            return false;
        }
        let run = match spec.kind {
            Kind::Keyed(run, _) => run,
            Kind::Client(f) => {
                self.last_cmd = Some((idx, spec));
                self.session.shared.last_cmd.set(t.stat_name(stat));
                self.run_client(idx, spec, f, *args);
                return true;
            }
            _ => return false,
        };
        let target = match key_shard(&cell, spec, args) {
            KeyShard::One(s) => s,
            KeyShard::Spans => return false,
        };
        if target != cell.id {
            // Bound for one other shard: queued as `route_keyed` queues it (tracking
            // is off here, so there is no read to remember); the owning shard checks
            // its own locks and memory when the batch runs.
            self.last_cmd = Some((idx, spec));
            self.session.shared.last_cmd.set(t.stat_name(stat));
            self.queue_remote(target, idx, spec, args);
            return true;
        }
        if !cell.locks.borrow().is_idle() || cell.data.borrow().mem.limit != 0 {
            return false;
        }
        self.last_cmd = Some((idx, spec));
        self.session.shared.last_cmd.set(t.stat_name(stat));
        self.run_inline_now(&cell, idx, spec, run, args, OomCheck::Run);
        true
    }

    /// Queues a command whose keys are all on shard `target` (not this one) in that
    /// shard's batch; its reply is taken in order when the pipeline is flushed.
    /// Returns the command's index in the batch.
    pub(super) fn queue_remote(
        &mut self,
        target: usize,
        idx: u16,
        spec: &'static commands::CommandSpec,
        args: &Args<'_>,
    ) -> usize {
        let db = self.session.db as u8;
        let proto = self.session.proto;
        let i = self.pipe.batches[target].push(idx, db, proto, args, spec.keys.positions(args));
        self.pipe.order.push(Part::Remote(target as u16, i as u32));
        // Queueing is not this command's time, nor the next local one's.
        self.mark = None;
        i
    }

    /// Logs the slow commands a batch reported, as this client's.
    pub(super) fn log_remote_slow(&mut self, replies: &mut [Option<BatchReply>]) {
        for r in replies.iter_mut().flatten() {
            if r.slow.is_empty() {
                continue;
            }
            let (peer, name) = self.client_ident();
            let mut data = self.session.cell.data.borrow_mut();
            for (_, rec) in r.slow.drain(..) {
                data.observe.push_slow(rec, peer.clone(), name.clone());
            }
        }
        // A split command took as long as its parts together.
        let split_slow = std::mem::take(&mut self.pipe.split_slow);
        for &(from, to, a, b) in &split_slow {
            let usec: u64 = self.pipe.merge_parts[from as usize..to as usize]
                .iter()
                .filter_map(|&(s, i)| replies[s as usize].as_ref().map(|r| r.part_usec(i)))
                .sum();
            let mut data = self.session.cell.data.borrow_mut();
            if data.observe.is_slow(usec) {
                let spans = &self.pipe.split_spans[a as usize..b as usize];
                let args = Args::new(&self.pipe.split_args, spans);
                let rec = crate::observe::SlowRecord {
                    time: crate::util::now_ms() / 1000,
                    usec,
                    argv: crate::observe::slow_argv(&args),
                };
                let (peer, name) = self.client_ident();
                data.observe.push_slow(rec, peer, name);
            }
        }
        let mut split_slow = split_slow;
        split_slow.clear();
        self.pipe.split_slow = split_slow;
        self.pipe.split_args.clear();
        self.pipe.split_spans.clear();
    }

    pub(super) async fn route_keyed(
        &mut self,
        idx: u16,
        spec: &'static commands::CommandSpec,
        run: KeyedFn,
        cross: Cross,
        args: &Args<'_>,
    ) {
        let cell = self.session.cell.clone();
        if let KeyShard::One(target) = key_shard(&cell, spec, args) {
            if target == cell.id && !self.pipe.locked {
                self.run_inline(idx, spec, run, args).await;
            } else {
                let i = self.queue_remote(target, idx, spec, args);
                if self.session.shared.tracking.tracks_reads() && spec.has(flags::READONLY) {
                    self.pipe.batches[target].track(i);
                }
            }
            return;
        }
        match cross {
            Cross::Split { stride, merge, .. } => {
                self.queue_split(idx, spec, stride as usize, merge, args)
            }
            Cross::Coordinator(f) => {
                if spec.has(flags::DENYOOM) && self.home_out_of_memory() {
                    return self.reject(Some(idx), commands::OOM_ERR);
                }
                self.flush().await;
                let track =
                    self.session.shared.tracking.tracks_reads() && spec.has(flags::READONLY);
                self.run_global(idx, f, args).await;
                if track {
                    let keys = spec.keys.positions(args).map(|p| args.get(p).to_vec());
                    crate::tracking::remember_remote(&self.session, keys.collect()).await;
                }
            }
            Cross::Never => {
                // The table test guarantees multi-key commands have a rule; keep the
                // failure mode a clean error rather than a wrong-shard write.
                self.reject(Some(idx), "ERR internal error: command cannot span shards");
            }
        }
    }

    /// Runs a command whose keys are all on the home shard, waiting first if another
    /// multi-shard operation holds one of them.
    pub(super) async fn run_inline(
        &mut self,
        idx: u16,
        spec: &'static commands::CommandSpec,
        run: KeyedFn,
        args: &Args<'_>,
    ) {
        let cell = self.session.cell.clone();
        let db = self.session.db as u8;
        let blocked = {
            let l = cell.locks.borrow();
            !l.is_idle()
                && spec
                    .keys
                    .positions(args)
                    .any(|p| l.blocks(db, args.get(p), None))
        };
        if blocked {
            self.flush().await;
            let keys = spec
                .keys
                .positions(args)
                .map(|p| args.get(p).to_vec())
                .collect();
            locks::wait_unlocked(&cell.locks, db, keys).await;
            self.mark = None;
        }
        // Without a limit, one comparison (no future is even built).
        let oom = if cell.data.borrow().mem.limit == 0 {
            OomCheck::Run
        } else {
            self.oom_check(&cell, spec.has(flags::DENYOOM)).await
        };
        self.run_inline_now(&cell, idx, spec, run, args, oom);
    }

    /// The part of `run_inline` after its waits: runs the command on this shard's
    /// data, with its bookkeeping (tracking, replication, memory, blocked clients,
    /// stats, latency).
    pub(super) fn run_inline_now(
        &mut self,
        cell: &Rc<ShardCell>,
        idx: u16,
        spec: &'static commands::CommandSpec,
        run: KeyedFn,
        args: &Args<'_>,
        oom: OomCheck,
    ) {
        let before = self.reply_target().len();
        let clock = self.clock_start();
        let direct = self.pipe.is_empty();
        let call = Call {
            cmd: idx,
            run,
            db: self.session.db,
            args: *args,
            keys: || spec.keys.positions(args).map(|p| args.get(p)),
            proto: self.session.proto,
            now: self.now,
            client: self.session.id(),
            txn: self.session.exec_owner,
            track_home: (self.session.shared.tracking.tracks_reads() && spec.has(flags::READONLY))
                .then_some(cell.id),
            wake: Wake::Serve,
            clock,
            counted: true,
            error_counted: std::mem::take(&mut self.session.error_counted),
            slowlog: true,
        };
        let executed = {
            let target: &mut Vec<u8> = if direct {
                &mut self.out
            } else {
                &mut self.pipe.scratch
            };
            let mut data = cell.data.borrow_mut();
            // maxmemory: one comparison unless a limit is set (then evict / refuse).
            if data.mem.limit != 0 {
                if oom == OomCheck::Refuse {
                    commands::oom_reject(&mut data, idx, call.proto, target);
                    drop(data);
                    self.note_local(before);
                    return;
                }
                // Invalidations of keys just evicted precede the reply, as in Redis.
                let pubsub = &self.session.shared.pubsub;
                if pubsub.has_pushes() && direct {
                    pubsub.take_pushes(target);
                }
            }
            execute(&cell.locks, &mut data, call, target)
        };
        if executed.end.is_some() {
            self.mark = executed.end;
        }
        if let Some(rec) = executed.slow {
            let (peer, name) = self.client_ident();
            cell.data.borrow_mut().observe.push_slow(rec, peer, name);
        }
        self.note_local(before);
    }

    /// maxmemory before a local keyed command, with a limit set. When the other
    /// shards must evict first, waits for them after sending the replies owed so far,
    /// then decides without asking again.
    pub(super) async fn oom_check(&mut self, cell: &Rc<ShardCell>, denyoom: bool) -> OomCheck {
        let idle = cell.locks.borrow().is_idle();
        let first = cell.data.borrow_mut().oom_check(denyoom, idle, true);
        let OomCheck::AskPeers(bytes) = first else {
            return first;
        };
        self.flush().await;
        crate::shard::memory::evict_on_peers(cell, bytes).await;
        self.mark = None;
        let idle = cell.locks.borrow().is_idle();
        cell.data.borrow_mut().oom_check(denyoom, idle, false)
    }

    pub(super) fn queue_split(
        &mut self,
        idx: u16,
        spec: &'static commands::CommandSpec,
        stride: usize,
        merge: Merge,
        args: &Args<'_>,
    ) {
        if !(args.len() - 1).is_multiple_of(stride) {
            self.reject(
                Some(idx),
                &format!("ERR wrong number of arguments for '{}' command", spec.name),
            );
            return;
        }
        let cell = self.session.cell.clone();
        let db = self.session.db as u8;
        let proto = self.session.proto;
        self.pipe.locked = true;
        // One part per shard holding all the key groups it owns: a shard runs the
        // command once per pipeline entry, not once per key.
        let from = self.pipe.merge_parts.len() as u32;
        let order = self.pipe.merge_order.len() as u32;
        let keep_order = merge == Merge::Array;
        let mut group: Vec<&[u8]> = Vec::with_capacity(stride);
        let mut i = 1;
        while i < args.len() {
            group.clear();
            group.extend((i..i + stride).map(|j| args.get(j)));
            let s = cell.shard_of(group[0]);
            if self.pipe.part_of[s] == NO_PART {
                let first = self.pipe.merge_parts.len() as u32 == from;
                let part = self.pipe.batches[s].open_part(idx, db, proto, args.get(0), first);
                self.pipe.part_of[s] = part as u32;
                self.pipe.merge_parts.push((s as u16, part as u32));
            }
            self.pipe.batches[s].extend_part(&group);
            if keep_order {
                self.pipe.merge_order.push(s as u16);
            }
            i += stride;
        }
        let to = self.pipe.merge_parts.len() as u32;
        for &(s, _) in &self.pipe.merge_parts[from as usize..] {
            self.pipe.part_of[s as usize] = NO_PART;
        }
        if self.session.shared.tracking.tracks_reads() && spec.has(flags::READONLY) {
            for &(s, part) in &self.pipe.merge_parts[from as usize..to as usize] {
                self.pipe.batches[s as usize].track(part as usize);
            }
        }
        let groups = ((args.len() - 1) / stride) as u32;
        self.pipe.order.push(Part::Merged {
            merge,
            from,
            to,
            order,
            groups,
        });
        if self.timing {
            let a = self.pipe.split_spans.len() as u32;
            for j in 0..args.len() {
                let start = self.pipe.split_args.len() as u32;
                self.pipe.split_args.extend_from_slice(args.get(j));
                let end = self.pipe.split_args.len() as u32;
                self.pipe.split_spans.push(ArgSpan { start, end });
            }
            let b = self.pipe.split_spans.len() as u32;
            self.pipe.split_slow.push((from, to, a, b));
        }
    }

    /// Whether to send this read's batches now and parse the input already waiting
    /// while the other shards run them, instead of waiting for their replies first
    /// (`launch`). A client streaming a long pipeline (`redis-cli --pipe`) otherwise
    /// leaves its home shard and the others taking turns, each asleep while the other
    /// works, woken once per read. Only a plain client qualifies: replies on, RESP2,
    /// no MULTI, pub/sub, tracking, monitor, replication role or output limit, and a
    /// split command (which locks its shards) ends it. The socket must still be
    /// marked readable (the last read filled the buffer), so a client that waits for
    /// its replies never costs a read that finds nothing.
    pub(super) fn may_read_ahead(&self) -> bool {
        let session = &self.session;
        let shared = &session.shared;
        self.stream.input_may_be_waiting()
            && !self.pipe.locked
            && self.pipe.batches.iter().any(|b| !b.is_empty())
            && self.obuf_watch == usize::MAX
            && self.out.len() + self.pipe.scratch.len() < READ_AHEAD_MAX_OUTPUT
            && self.master.is_none()
            && self.reply_check.is_none()
            && self.replica_link.is_none()
            && self.monitor.is_none()
            && session.multi.is_none()
            && session.reply_mode == ReplyMode::On
            && session.proto == Protocol::Resp2
            && !session.close_after_reply
            && !shared.killed.get()
            && !shared.tracking.on()
            && !shared.pubsub.active()
            && !shared.pubsub.has_pushes()
    }

    /// Sends the pending batches as the generation in flight, once the one before it
    /// is finished (its replies assembled into `out`), and lets the round end so the
    /// outbox sends them now. The pipeline starts the next generation empty.
    pub(super) async fn launch(&mut self) {
        self.finish_in_flight().await;
        let cell = self.session.cell.clone();
        let n = cell.shard_count();
        let mut f = self.pipe.in_flight.take().unwrap_or_default();
        f.spare_batches.resize_with(n, OwnedBatch::default);
        for s in 0..n {
            if self.pipe.batches[s].is_empty() {
                continue;
            }
            // A reading-ahead client has no output limit (`may_read_ahead`).
            let next = std::mem::take(&mut f.spare_batches[s]);
            f.waiting
                .push((s, self.send_batch(&cell, s, next, usize::MAX)));
        }
        f.swap_parts(&mut self.pipe);
        f.active = true;
        self.pipe.in_flight = Some(f);
        self.mark = None;
        crate::runtime::yield_to_round_end().await;
    }

    /// Sends the pending batch for shard `s`, stamped with this client and the
    /// reply bytes it may produce (`budget`), with the spare reply buffer it writes
    /// into; `replacement` takes its place in the pipeline.
    fn send_batch(
        &mut self,
        cell: &Rc<ShardCell>,
        s: usize,
        replacement: OwnedBatch,
        budget: usize,
    ) -> HopWait {
        let mut b = std::mem::replace(&mut self.pipe.batches[s], replacement);
        (b.client, b.home) = (self.session.id(), cell.id);
        b.out_budget = budget;
        let r = std::mem::take(&mut self.pipe.spare_replies[s]);
        cell.hop(s, b, r)
    }

    /// Waits for the generation in flight and writes its replies to `out`.
    pub(super) async fn finish_in_flight(&mut self) {
        let Some(mut f) = self.pipe.in_flight.take() else {
            return;
        };
        if f.active {
            let mut replies = std::mem::take(&mut self.pipe.replies);
            replies.clear();
            replies.resize_with(self.session.cell.shard_count(), || None);
            for (s, wait) in f.waiting.drain(..) {
                let (r, mut b) = wait.await;
                replies[s] = Some(r);
                b.clear();
                f.spare_batches[s] = b;
            }
            // The generation's parts come back for assembly; the newer generation
            // waits in the box meanwhile and returns after.
            f.swap_parts(&mut self.pipe);
            self.complete_generation(replies);
            f.swap_parts(&mut self.pipe);
            f.active = false;
        }
        self.pipe.in_flight = Some(f);
    }

    /// Sends every pending batch, waits for the replies and writes them in order.
    pub(super) async fn flush(&mut self) {
        self.finish_in_flight().await;
        if self.pipe.is_empty() {
            return;
        }
        let cell = self.session.cell.clone();
        let n = cell.shard_count();
        let mut replies = std::mem::take(&mut self.pipe.replies);
        replies.clear();
        replies.resize_with(n, || None);
        if self.pipe.locked {
            self.run_locked(&cell, &mut replies).await;
        } else {
            let mut waiting = std::mem::take(&mut self.pipe.waiting);
            // Other shards stop a batch whose replies would break the client's hard
            // output limit, counting what is already pending here.
            let budget = if self.obuf_watch == usize::MAX {
                usize::MAX
            } else {
                crate::clients::output_budget(
                    self.session.shared.output_class(),
                    self.out.len() + self.pipe.scratch.len(),
                )
            };
            for s in 0..n {
                if self.pipe.batches[s].is_empty() {
                    continue;
                }
                waiting.push((s, self.send_batch(&cell, s, OwnedBatch::default(), budget)));
            }
            for (s, wait) in waiting.drain(..) {
                let (r, mut b) = wait.await;
                replies[s] = Some(r);
                b.clear();
                self.pipe.batches[s] = b;
            }
            self.pipe.waiting = waiting;
        }
        self.complete_generation(replies);
        self.pipe.locked = false;
    }

    /// Writes the replies of a generation whose batches all came back (`replies`, per
    /// shard) to `out` in request order, then empties the generation.
    fn complete_generation(&mut self, mut replies: Vec<Option<BatchReply>>) {
        // Invalidations of keys evicted while these commands waited for memory go
        // before their replies, as Redis evicts before it runs a command. (Those of
        // keys the commands wrote themselves go after, as in Redis.)
        if self.session.reply_mode == ReplyMode::On {
            self.session.shared.pubsub.take_early_pushes(&mut self.out);
        }
        if replies.iter().flatten().any(|r| r.cut) {
            // A shard stopped this client's batch at its hard output limit: the client
            // is closed with nothing more written (Redis frees it with its replies).
            let now = crate::util::now_ms();
            self.session.shared.close_for_output_limit(now);
            self.obuf_closed = true;
        } else {
            self.assemble(&replies);
        }
        self.log_remote_slow(&mut replies);
        self.mark = None;
        for (s, r) in replies.iter_mut().enumerate() {
            if let Some(mut r) = r.take() {
                r.clear();
                self.pipe.spare_replies[s] = r;
            }
        }
        self.pipe.replies = replies;
        self.pipe.order.clear();
        self.pipe.scratch.clear();
        self.pipe.merge_parts.clear();
        self.pipe.merge_order.clear();
    }

    /// One multi-shard operation over all pending batches: lock and run shard by shard
    /// in ascending order, release when the last shard has run.
    pub(super) async fn run_locked(
        &mut self,
        cell: &Rc<ShardCell>,
        replies: &mut [Option<BatchReply>],
    ) {
        let txn = self
            .session
            .exec_owner
            .unwrap_or_else(|| cell.next_txn_id());
        let shards: Vec<usize> = (0..replies.len())
            .filter(|&s| !self.pipe.batches[s].is_empty())
            .collect();
        // A command split over shards reaches replicas as one MULTI/EXEC block.
        let captured = crate::effects::begin_capture(txn);
        let in_exec = self.session.exec_owner.is_some();
        for (pos, &s) in shards.iter().enumerate() {
            let last = pos + 1 == shards.len();
            let mut b = std::mem::take(&mut self.pipe.batches[s]);
            (b.client, b.home) = (self.session.id(), cell.id);
            let spare = std::mem::take(&mut self.pipe.spare_replies[s]);
            let (reply, mut b) = cell
                .call_async(s, move |c| {
                    Box::pin(async move {
                        let set = b.lock_set(&c.locks.borrow());
                        if last {
                            // Runs at once once free (batch::run_into never waits
                            // for its own operation): no lock to take or release.
                            locks::wait_free(&c.locks, set, txn).await;
                        } else {
                            locks::acquire(&c.locks, set, txn).await;
                        }
                        let r = batch::run_into(&c, &b, Some(txn), spare).await;
                        if !in_exec {
                            // A split command's BCAST keys go out with it (EXEC's
                            // when the transaction ends).
                            let mut d = c.data.borrow_mut();
                            if d.tracking.has_pending() {
                                d.tracking.flush_bcast();
                            }
                        }
                        (r, b)
                    })
                })
                .await;
            // The emptied batch goes back for the next pipeline: no reallocation.
            b.clear();
            self.pipe.batches[s] = b;
            replies[s] = Some(reply);
        }
        if captured {
            crate::effects::end_capture(txn, true);
        }
        for &s in &shards[..shards.len().saturating_sub(1)] {
            cell.tell(s, move |c| c.locks.borrow_mut().release(txn))
                .await;
        }
    }

    pub(super) fn assemble(&mut self, replies: &[Option<BatchReply>]) {
        let proto = self.session.proto;
        for part in &self.pipe.order {
            match *part {
                Part::Local(a, b) => self
                    .out
                    .extend_from_slice(&self.pipe.scratch[a as usize..b as usize]),
                Part::Remote(s, i) => {
                    if let Some(r) = &replies[s as usize] {
                        self.out.extend_from_slice(r.get(i as usize));
                    }
                }
                Part::Merged {
                    merge,
                    from,
                    to,
                    order,
                    groups,
                } => {
                    let parts = &self.pipe.merge_parts[from as usize..to as usize];
                    let mut w = ReplyWriter {
                        out: &mut self.out,
                        proto,
                    };
                    if merge == Merge::Array {
                        let order =
                            &self.pipe.merge_order[order as usize..(order + groups) as usize];
                        merge_in_order(parts, order, replies, &mut self.pipe.cursors, &mut w);
                    } else {
                        let pieces = parts.iter().filter_map(|&(s, i)| {
                            replies[s as usize].as_ref().map(|r| r.get(i as usize))
                        });
                        merge_replies(merge, pieces, parts.len(), &mut w);
                    }
                }
            }
        }
    }
}
