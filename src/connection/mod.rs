//! One task per client: read, parse, route, batch, write (DESIGN.md §3).
//!
//! Everything a read delivered is parsed at once. Commands whose keys live on the home
//! shard run inline, with no await and no allocation beyond the reply. Commands for
//! another shard are appended to that shard's batch; at the end of the read (or at a
//! barrier) each batch travels in one message, all in parallel, and the replies are
//! stitched back in request order into one write.
//!
//! A command whose keys span shards is split per key into the owning shards' batches,
//! and the whole set of batches then runs as one multi-shard operation: locks taken
//! shard by shard in ascending order, each shard's part executed as soon as its locks
//! are held, everything released at the end — so no client can observe half of it.
//!
//! By stage: this file is the connection's loop (read, parse, dispatch, write) and the
//! general path of one command (`run_command`); `gate` decides whether a command runs;
//! `pipeline` routes, batches and runs it (inline through shard/exec.rs, or in a
//! batch on its owning shard); `transaction` is MULTI/EXEC; `takeover` turns the
//! connection into a replica link or a MONITOR feed.

mod gate;
mod master_link;
mod pipeline;
pub(crate) mod redirect;
mod takeover;
mod transaction;

use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::clients::{ClientShared, ReplyMode, Session};
use crate::commands::{
    self, table::flags, Args, ClientCtx, Cross, GlobalCtx, KeyedFn, Kind, Merge, OwnedArgs,
};
use crate::protocol::parser::{scan_first_args, ArgSpan, ParseLimits, RequestParser};
use crate::protocol::reply::{Protocol, ReplyWriter};
use crate::runtime::TcpStream;
use crate::shard::batch::{self, BatchReply, OwnedBatch};
use crate::shard::exec::{error_prefix, execute, Call, Wake};
use crate::shard::locks;
use crate::shard::ShardCell;
use crate::storage::evict::OomCheck;
use crate::storage::keyspace::PREFETCH_BATCH;
use crate::util::clock::Stamp;
use gate::{protected_mode_denies, unknown_command_message, Gate, PROTECTED_MODE_DENIED};

/// Clients connected to the whole process (for maxclients and INFO clients).
pub static CONNECTED_CLIENTS: AtomicUsize = AtomicUsize::new(0);

const READ_CHUNK: usize = 16 * 1024;

/// Commands a reading-ahead connection queues for other shards before it sends them
/// (`Connection::launch`): a 16 KB read of SETs holds about 180 for each of two
/// shards, so the peers run a few reads' worth at a time.
const READ_AHEAD_LAUNCH: usize = 512;

/// Bytes of the read buffer one key-prefetch glance may read: a -P 16 batch of GETs or
/// SETs is well under 1 KB, and bigger commands gain little from it.
const PREFETCH_SCAN_BYTES: usize = 4096;

/// Where one command's reply is while a pipeline batch is in flight.
#[derive(Debug, Clone, Copy)]
enum Part {
    /// Already produced, in the pipeline's scratch buffer.
    Local(u32, u32),
    /// The `idx`-th reply of the batch sent to `shard`.
    Remote(u16, u32),
    /// A split command: its parts, one per shard, are `merge_parts[from..to]`; it
    /// has `groups` key groups, and for an array merge `merge_order[order..]` says
    /// which shard answers each group, in the client's order.
    Merged {
        merge: Merge,
        from: u32,
        to: u32,
        order: u32,
        groups: u32,
    },
}

/// The commands of the current read that could not run inline yet.
struct Pipeline {
    batches: Vec<OwnedBatch>,
    /// Emptied replies of earlier flushes, one per shard, lent to the next hop.
    spare_replies: Vec<BatchReply>,
    /// The flush's replies per shard, and the hops it waits for (kept to reuse the
    /// vectors).
    replies: Vec<Option<BatchReply>>,
    waiting: Vec<(usize, crate::shard::hops::HopWait)>,
    /// Some command spans shards: run all batches as one locked operation.
    locked: bool,
    order: Vec<Part>,
    scratch: Vec<u8>,
    merge_parts: Vec<(u16, u32)>,
    merge_order: Vec<u16>,
    /// Read positions in each part's reply while an array merge is assembled.
    cursors: Vec<usize>,
    /// While a split command is queued: its part index on each shard (or NO_PART).
    part_of: Vec<u32>,
    /// Split commands that may belong in the slowlog: their parts
    /// (`merge_parts[from..to]`) and their arguments (`split_spans[a..b]` over
    /// `split_args`), copied flat so that only a slow command pays for its argv.
    split_slow: Vec<(u32, u32, u32, u32)>,
    split_args: Vec<u8>,
    split_spans: Vec<ArgSpan>,
    /// The generation sent ahead while this one is parsed (read-ahead, see
    /// `Connection::launch`); allocated the first time the connection reads ahead.
    in_flight: Option<Box<InFlight>>,
}

/// A pipeline generation whose batches are on the other shards while the connection
/// parses the input that came after it: its parts in request order, the local
/// replies among them, and the hops it waits for. One at most: it is finished
/// before the next generation leaves, so a connection still has at most one batch
/// per shard in flight.
#[derive(Default)]
struct InFlight {
    active: bool,
    waiting: Vec<(usize, crate::shard::hops::HopWait)>,
    /// Emptied batches back from earlier generations, one per shard: the next
    /// generation queues into these while this one's batches travel.
    spare_batches: Vec<OwnedBatch>,
    order: Vec<Part>,
    scratch: Vec<u8>,
    merge_parts: Vec<(u16, u32)>,
    merge_order: Vec<u16>,
    split_slow: Vec<(u32, u32, u32, u32)>,
    split_args: Vec<u8>,
    split_spans: Vec<ArgSpan>,
}

impl InFlight {
    /// Trades the request-ordered parts (and what they point into) with `pipe`'s:
    /// a generation moves into or out of the box without copying or allocating.
    fn swap_parts(&mut self, pipe: &mut Pipeline) {
        std::mem::swap(&mut self.order, &mut pipe.order);
        std::mem::swap(&mut self.scratch, &mut pipe.scratch);
        std::mem::swap(&mut self.merge_parts, &mut pipe.merge_parts);
        std::mem::swap(&mut self.merge_order, &mut pipe.merge_order);
        std::mem::swap(&mut self.split_slow, &mut pipe.split_slow);
        std::mem::swap(&mut self.split_args, &mut pipe.split_args);
        std::mem::swap(&mut self.split_spans, &mut pipe.split_spans);
    }
}

const NO_PART: u32 = u32::MAX;

impl Pipeline {
    fn new(shards: usize) -> Pipeline {
        Pipeline {
            batches: (0..shards).map(|_| OwnedBatch::default()).collect(),
            spare_replies: (0..shards).map(|_| BatchReply::default()).collect(),
            replies: Vec::with_capacity(shards),
            waiting: Vec::with_capacity(shards),
            locked: false,
            order: Vec::new(),
            scratch: Vec::new(),
            merge_parts: Vec::new(),
            merge_order: Vec::new(),
            cursors: Vec::new(),
            part_of: vec![NO_PART; shards],
            split_slow: Vec::new(),
            split_args: Vec::new(),
            split_spans: Vec::new(),
            in_flight: None,
        }
    }

    /// No buffers at all: what a connection holds until it has input, and again
    /// after it idles (a few hundred bytes per connection otherwise).
    fn unallocated() -> Pipeline {
        // With no shards every field is empty and nothing is allocated.
        Pipeline::new(0)
    }

    fn is_allocated(&self) -> bool {
        !self.part_of.is_empty()
    }

    /// No reply owed: nothing queued here and no generation in flight (while one is,
    /// even a local reply must wait its turn in the scratch buffer).
    fn is_empty(&self) -> bool {
        self.order.is_empty() && !self.has_in_flight()
    }

    fn has_in_flight(&self) -> bool {
        self.in_flight.as_ref().is_some_and(|f| f.active)
    }

    /// Commands queued for other shards and not sent yet.
    fn queued_remote(&self) -> usize {
        self.batches.iter().map(OwnedBatch::len).sum()
    }
}

pub struct Connection {
    stream: TcpStream,
    session: Session,
    buf: Vec<u8>,
    /// Unparsed input is `buf[start..end]`.
    start: usize,
    end: usize,
    parser: RequestParser,
    spans: Vec<ArgSpan>,
    out: Vec<u8>,
    pipe: Pipeline,
    /// Unix ms read once per read batch: commands of one batch see one time, as
    /// Redis's commands see one time per event-loop iteration.
    now: u64,
    /// The last command looked up: pipelines mostly repeat one command.
    last_cmd: Option<(u16, &'static commands::CommandSpec)>,
    /// Input read while a blocking command waited (to notice the client leaving);
    /// parsed once the command ends.
    stash: Vec<u8>,
    /// SYNC / PSYNC turned this client into a replica link (its id).
    replica_link: Option<u64>,
    /// Whether commands are timed (latency tracking, slowlog or latency monitor on),
    /// read once per read batch.
    timing: bool,
    /// When the last command run here ended: the next one's start, so timing costs
    /// one clock read per command. None after anything else took time (a wait, a read).
    mark: Option<Stamp>,
    /// After MONITOR: the feed of every command the server runs.
    monitor: Option<futures_channel::mpsc::UnboundedReceiver<Vec<u8>>>,
    /// Bytes of `out` written while the current command waited for a CLIENT PAUSE
    /// (replies of earlier commands), so that dispatch's reply start stays right.
    sent_early: usize,
    /// Pending output from which the client's `client-output-buffer-limit` must be
    /// checked (`clients::output_watermark`, read once per read batch): usize::MAX
    /// without a limit, so the per-command check is one compare.
    obuf_watch: usize,
    /// The client broke its output buffer limit: nothing more runs or is written.
    obuf_closed: bool,
    /// A replica link that came with PSYNC: timed out after `repl-timeout` without an
    /// ACK (takeover.rs).
    link_timeout: bool,
    /// A replica link after a diskless transfer: its stream waits for the replica's
    /// first ACK (full_sync.rs says why).
    stream_on_ack: bool,
    /// Set on the link to this replica's master (master_link.rs): its offset is
    /// accounted per command, its replies are not sent, what it applied is passed on.
    master: Option<Box<master_link::MasterFeed>>,
    /// Set on the clients that replay commands (the master link, the AOF loader):
    /// their error replies are logged (master_link.rs).
    reply_check: Option<Box<master_link::ReplyCheck>>,
}

/// Shrinks an idle connection's query buffer to `size` bytes (0: frees it).
fn shrink_query_buf(buf: &mut Vec<u8>, size: usize) {
    if size == 0 {
        *buf = Vec::new();
    } else {
        buf.truncate(size);
        buf.shrink_to_fit();
    }
}

pub async fn serve(cell: Rc<ShardCell>, stream: TcpStream) {
    serve_as(cell, stream, crate::clients::ClientRole::Normal, Vec::new()).await
}

/// The AOF's commands at start, read from `stream` (persistence/aof_load.rs feeds
/// it): a connection whose commands are refused nothing while the dataset loads.
pub async fn serve_aof_client(cell: Rc<ShardCell>, stream: TcpStream) {
    serve_as(
        cell,
        stream,
        crate::clients::ClientRole::AofLoader,
        Vec::new(),
    )
    .await
}

/// This replica's link to its master once synced (replication/link.rs hands it
/// over; `initial`: stream bytes already read): the master's commands, applied.
pub async fn serve_master(cell: Rc<ShardCell>, stream: TcpStream, initial: Vec<u8>) {
    serve_as(cell, stream, crate::clients::ClientRole::Master, initial).await
}

async fn serve_as(
    cell: Rc<ShardCell>,
    stream: TcpStream,
    role: crate::clients::ClientRole,
    initial: Vec<u8>,
) {
    let Ok((peer, local)) = stream.addresses() else {
        return;
    };
    let _ = stream.set_nodelay(true);
    let maxclients = cell.data.borrow().config.maxclients();
    let connected = CONNECTED_CLIENTS.fetch_add(1, Ordering::Relaxed) + 1;
    let mut stream = stream;
    let from_master = role == crate::clients::ClientRole::Master;
    if connected > maxclients && !from_master {
        CONNECTED_CLIENTS.fetch_sub(1, Ordering::Relaxed);
        cell.data.borrow_mut().stats.rejected_connections += 1;
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        return;
    }
    if !from_master && protected_mode_denies(&cell, &peer) {
        CONNECTED_CLIENTS.fetch_sub(1, Ordering::Relaxed);
        cell.data.borrow_mut().stats.rejected_connections += 1;
        let _ = stream.write_all(PROTECTED_MODE_DENIED.as_bytes()).await;
        return;
    }
    let now = crate::util::now_ms();
    let mut client = ClientShared::new(crate::shard::next_client_id(), peer, local, now);
    client.fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    // No buffer yet: the query buffer is allocated by the first read that has input
    // and the output buffer by the first reply (an idle connection holds neither).
    client.read_waker = Some(stream.read_waker());
    client.role.set(role);
    let shared = Rc::new(client);
    let authenticated = role.replays() || crate::acl::default_needs_no_auth();
    cell.data.borrow_mut().stats.total_connections += 1;
    cell.clients.borrow_mut().add(shared.clone());
    let mut conn = Connection {
        stream,
        session: Session {
            cell: cell.clone(),
            shared: shared.clone(),
            db: 0,
            proto: Protocol::Resp2,
            authenticated,
            acl_gen: 0,
            acl_open: false,
            reply_mode: ReplyMode::On,
            close_after_reply: false,
            multi: None,
            exec_owner: None,
            watched: None,
            in_script: false,
            error_counted: false,
            last_write: Default::default(),
            cluster: Default::default(),
        },
        end: initial.len(),
        buf: initial,
        start: 0,
        parser: RequestParser::default(),
        spans: Vec::new(),
        out: Vec::new(),
        pipe: Pipeline::unallocated(),
        now,
        last_cmd: None,
        stash: Vec::new(),
        replica_link: None,
        timing: false,
        mark: None,
        monitor: None,
        sent_early: 0,
        obuf_watch: usize::MAX,
        obuf_closed: false,
        link_timeout: false,
        stream_on_ack: false,
        master: from_master.then(Box::default),
        reply_check: role.replays().then(Box::default),
    };
    if from_master {
        conn.run_master().await;
    } else {
        conn.run().await;
    }
    if conn.monitor.is_some() {
        crate::observe::monitor_unregister(shared.id);
    }
    commands::multi::unwatch_all(&mut conn.session).await;
    commands::client::set_no_touch(&mut conn.session, false).await;
    crate::pubsub::unsubscribe_all_silently(&shared);
    crate::tracking::disable(&conn.session);
    cell.clients.borrow_mut().remove(shared.id);
    CONNECTED_CLIENTS.fetch_sub(1, Ordering::Relaxed);
}

impl Connection {
    async fn run(&mut self) {
        loop {
            let more = if self.monitor.is_some() {
                self.read_or_feed().await
            } else {
                self.read_more().await
            };
            if !more {
                return;
            }
            // Pushes that arrived before this input was read (invalidations,
            // messages) go out before its replies, as Redis had them queued already.
            self.take_pushes();
            let ran = self.process_input().await;
            if !self.read_ahead().await {
                return;
            }
            if self.obuf_closed {
                return;
            }
            self.take_pushes();
            if ran > 1 && !self.out.is_empty() && crate::runtime::others_ready() {
                // A pipelined batch's replies wait until the other connections that are
                // ready have run theirs, then all go out in one burst (Redis writes in
                // beforeSleep for the same reason): a client that reads many
                // connections is woken once for the burst, not once per reply with our
                // work in between. A lone command is answered at once: measured open
                // loop at P=1, waiting for the round raised the median latency by half.
                crate::runtime::yield_to_round_end().await;
            }
            if !self.write_replies().await {
                return;
            }
            if self.session.close_after_reply || self.session.shared.killed.get() {
                return;
            }
            if let Some(id) = self.replica_link {
                // Boxed for the same reason as the sync that led here.
                Box::pin(self.serve_replica(id)).await;
                crate::replication::detach(id);
                return;
            }
        }
    }

    /// Sends the replies produced so far. False when the client is gone or was closed
    /// over its output limit.
    async fn write_replies(&mut self) -> bool {
        self.check_replies();
        if self.out.is_empty() {
            return true;
        }
        // Under appendfsync always, nothing is acknowledged before the AOF holds it on
        // disk (group commit: one fsync for every core's round).
        crate::persistence::aof::wait_durable().await;
        let n = self.out.len() as u64;
        if !self.write_out().await {
            return false;
        }
        self.session.cell.data.borrow_mut().stats.net_output_bytes += n;
        self.out.clear();
        if self.out.capacity() > 4 * 1024 * 1024 {
            self.out = Vec::new();
        }
        let shared = &self.session.shared;
        shared.reply_buf_cap.set(self.out.capacity());
        shared
            .reply_buf_peak
            .set(shared.reply_buf_peak.get().max(n as usize));
        true
    }

    /// While the last read left commands queued or a generation in flight
    /// (`may_read_ahead`): sends the replies finished so far, then parses whatever
    /// input is already waiting, without waiting for more; once none is, waits for
    /// every reply as any flush does. False when the client went away.
    async fn read_ahead(&mut self) -> bool {
        while !self.pipe.is_empty() {
            if self.obuf_closed || !self.write_replies().await {
                return false;
            }
            match crate::runtime::first(self.read_more(), std::future::ready(())).await {
                crate::runtime::First::A(true) => {
                    self.process_input().await;
                }
                crate::runtime::First::A(false) => return false,
                crate::runtime::First::B(()) => {
                    self.flush().await;
                    self.session.last_write.settle();
                }
            }
        }
        true
    }

    /// Writes all of `out`. While the client does not read, the unwritten rest is its
    /// pending output (CLIENT LIST's omem) and is held to its class's output buffer
    /// limit, looked at again every second while the write waits (Redis looks when
    /// replies are added; this connection adds none while its write waits, but
    /// pushes and a replica's stream may pile up). False when the client is gone or
    /// was closed over the limit.
    async fn write_out(&mut self) -> bool {
        let len = self.out.len();
        let mut sent = 0;
        loop {
            match self.stream.send_now(&self.out[sent..]) {
                Ok(n) => sent += n,
                Err(_) => return false,
            }
            if sent == len {
                break;
            }
            let shared = self.session.shared.clone();
            shared.output_len.set(len - sent);
            if shared.killed.get() {
                return false;
            }
            // A replica's count is its part of the replication buffer.
            let pending = shared.pending_output();
            let watch = crate::clients::output_watermark(shared.output_class());
            if watch == usize::MAX {
                self.stream.writable().await;
                continue;
            }
            if pending >= watch {
                let now = crate::util::now_ms();
                if shared.output_limit_reached(pending, now) {
                    shared.close_for_output_limit(now);
                    self.obuf_closed = true;
                    return false;
                }
            }
            // Pushes or a replica's stream may pile up while the write waits:
            // looked at again every second.
            let tick = crate::runtime::sleep(std::time::Duration::from_secs(1));
            race(self.stream.writable(), tick).await;
        }
        let shared = &self.session.shared;
        if shared.output_len.get() != 0 {
            shared.output_len.set(0);
            shared.obuf_soft_since.set(0);
        }
        true
    }

    /// The per-command output limit check (after `obuf_watch` was reached): the
    /// replies produced and not written yet, here and queued as pushes. Sets
    /// `obuf_closed` when the client must go.
    fn check_output_limit(&mut self) {
        let shared = &self.session.shared;
        let pending = self.out.len() + self.pipe.scratch.len() + shared.pending_output();
        let now = crate::util::now_ms();
        if shared.output_limit_reached(pending, now) {
            // The log line's omem shows what broke the limit, as Redis's does.
            shared
                .output_len
                .set(self.out.len() + self.pipe.scratch.len());
            shared.close_for_output_limit(now);
            self.obuf_closed = true;
        }
    }

    /// Reads whatever the socket has into the buffer. False on EOF, error or kill.
    async fn read_more(&mut self) -> bool {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        let want = READ_CHUNK.max(self.parser.pending_bulk_bytes().min(64 * 1024 * 1024));
        if self.buf.len() - self.end < want && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let shared = &self.session.shared;
        let idle = self.start == self.end;
        let out = &mut self.out;
        let pipe = &mut self.pipe;
        let read = self.stream.read_vec(&mut self.buf, self.end, want, |buf| {
            // The clients cron asks a connection that holds more buffer than its recent
            // input needs (or that idles) to give it back; done here, while no input
            // is pending, and grown again by the next read.
            if let Some(size) = shared.query_buf_shrink.take() {
                if idle && size < buf.len() {
                    shrink_query_buf(buf, size);
                    shared.query_buf_cap.set(buf.len());
                }
                // The output buffer is empty whenever the connection waits for input
                // (replies are written first); an idle client gives it back too, so
                // 10k idle connections hold no buffers at all (Redis: 1.4 KB each).
                if idle && size == 0 && out.is_empty() {
                    *out = Vec::new();
                    shared.reply_buf_cap.set(0);
                }
                if idle && size == 0 && pipe.is_empty() && pipe.is_allocated() {
                    *pipe = Pipeline::unallocated();
                }
            }
        });
        let pubsub = &self.session.shared.pubsub;
        // RESP3 clients also get pushes (client tracking's invalidations) while idle.
        let result =
            if pubsub.active() || pubsub.has_pushes() || self.session.proto == Protocol::Resp3 {
                // A subscriber also wakes up for messages; it then has no new input.
                match crate::pubsub::read_or_push(pubsub, read).await {
                    Some(r) => r,
                    None => return true,
                }
            } else {
                read.await
            };
        let n = match result {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        self.end += n;
        if self.session.shared.killed.get() {
            return false;
        }
        let now = crate::util::now_ms();
        self.now = now;
        self.session.shared.last_interaction_ms.set(now);
        let limit = {
            let mut data = self.session.cell.data.borrow_mut();
            data.stats.net_input_bytes += n as u64;
            data.config.client_query_buffer_limit() as usize
        };
        let pending = self.end - self.start;
        let shared = &self.session.shared;
        shared.query_buf_len.set(pending);
        shared.query_buf_cap.set(self.buf.len());
        shared
            .query_buf_peak
            .set(shared.query_buf_peak.get().max(pending));
        // The master's stream is not held to the limit (Redis exempts it too).
        if pending > limit && self.master.is_none() {
            tracing::warn!(
                client = self.session.id(),
                "closing client that reached max query buffer length"
            );
            return false;
        }
        true
    }

    fn limits(&mut self) -> ParseLimits {
        self.obuf_watch = crate::clients::output_watermark(self.session.shared.output_class());
        let data = self.session.cell.data.borrow();
        self.timing = data.observe.timing();
        self.mark = None;
        ParseLimits {
            max_bulk_len: data.config.proto_max_bulk_len() as usize,
            ..ParseLimits::default()
        }
    }

    /// Parses and runs every complete command in the buffer; returns how many it parsed.
    async fn process_input(&mut self) -> usize {
        let mut parsed_commands = 0;
        if !self.pipe.is_allocated() {
            self.pipe = Pipeline::new(self.session.cell.shard_count());
        }
        let limits = self.limits();
        let mut buf = std::mem::take(&mut self.buf);
        let mut spans = std::mem::take(&mut self.spans);
        let mut prefetched_to = self.start;
        while self.start < self.end
            && !self.session.close_after_reply
            && !self.obuf_closed
            && self.replica_link.is_none()
        {
            if self.start >= prefetched_to {
                prefetched_to = self.prefetch_keys(&buf);
            }
            // Redis's tighter limits for clients that have not authenticated yet.
            self.parser.set_auth_required(!self.session.authenticated);
            let parsed = self
                .parser
                .parse(&buf[self.start..self.end], &limits, &mut spans);
            match parsed {
                Ok(Some(consumed)) => {
                    parsed_commands += 1;
                    let cmd_start = self.start;
                    self.start += consumed;
                    if spans.is_empty() {
                        continue;
                    }
                    if self.parser.last_was_inline() {
                        let inline = self.parser.inline_buf().to_vec();
                        self.dispatch(Args::new(&inline, &spans)).await;
                    } else {
                        self.dispatch(Args::new(&buf[cmd_start..], &spans)).await;
                    }
                    if !self.stash.is_empty() {
                        self.absorb_stash(&mut buf);
                    }
                    if let Some(check) = self.reply_check.as_mut() {
                        // Inline commands have no name here (Redis's are never inline).
                        let name = match spans.first() {
                            Some(s) if !self.parser.last_was_inline() => {
                                &buf[cmd_start + s.start as usize..cmd_start + s.end as usize]
                            }
                            _ => &[][..],
                        };
                        check.command(name);
                    }
                    if self.master.is_some() {
                        self.master_command_done(&buf[cmd_start..self.start], self.end - cmd_start);
                    }
                    if self.out.len() + self.pipe.scratch.len() >= self.obuf_watch {
                        self.check_output_limit();
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    self.flush().await;
                    let msg = format!("ERR {}", e.0);
                    ReplyWriter {
                        out: &mut self.out,
                        proto: self.session.proto,
                    }
                    .error(&msg);
                    tracing::debug!(client = self.session.id(), "protocol error: {}", e.0);
                    self.session.close_after_reply = true;
                    self.start = self.end;
                }
            }
        }
        if !self.obuf_closed {
            if self.may_read_ahead() {
                // Otherwise the next read's commands join this generation: the peers
                // are woken once per READ_AHEAD_LAUNCH commands, not once per read.
                if self.pipe.queued_remote() >= READ_AHEAD_LAUNCH {
                    self.launch().await;
                }
            } else {
                self.flush().await;
                if self.out.len() >= self.obuf_watch {
                    self.check_output_limit();
                }
            }
        }
        if self.pipe.is_empty() {
            // Every command of the batch is done: its writes are in the stream.
            self.session.last_write.settle();
        }
        self.buf = buf;
        self.spans = spans;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            // The span list one huge request grew is given back at once; the query
            // buffer is trimmed by the clients cron (see `clients::trim_query_buffer`),
            // as Redis's clientsCron does, so a run of big requests reuses it.
            if self.spans.capacity() > 4096 {
                self.spans = Vec::new();
            }
        }
        self.session.shared.query_buf_len.set(self.end - self.start);
        parsed_commands
    }

    /// Prefetches the keys of the next commands in the buffer (see `Db::prefetch`)
    /// when there are at least two: a lone command has nothing to overlap with.
    /// Returns where the scanned commands end; the next window starts there.
    /// The glance covers at most `PREFETCH_SCAN_BYTES`: a big command still arriving
    /// is not re-read on every read (the parser itself resumes where it stopped).
    fn prefetch_keys(&self, buf: &[u8]) -> usize {
        let window = &buf[self.start..self.end.min(self.start + PREFETCH_SCAN_BYTES)];
        let mut keys = [ArgSpan { start: 0, end: 0 }; PREFETCH_BATCH];
        let (n, len) = scan_first_args(window, &mut keys);
        if n >= 2 {
            let data = self.session.cell.data.borrow();
            if let Some(db) = data.dbs.get(self.session.db) {
                db.prefetch(keys[..n].iter().map(|k| &window[k.range()]));
            }
        }
        if n == 0 {
            self.end
        } else {
            self.start + len
        }
    }

    /// The buffer a reply produced now must go to, to stay in request order.
    fn reply_target(&mut self) -> &mut Vec<u8> {
        if self.pipe.is_empty() {
            &mut self.out
        } else {
            &mut self.pipe.scratch
        }
    }

    /// Records a reply just written to the scratch buffer as the next part.
    fn note_local(&mut self, before: usize) {
        if !self.pipe.is_empty() {
            let end = self.pipe.scratch.len() as u32;
            self.pipe.order.push(Part::Local(before as u32, end));
        }
    }

    /// Runs one command, applying CLIENT REPLY OFF / SKIP to whatever it replied,
    /// rejections (unknown command, arity, NOAUTH) included, as Redis does.
    async fn dispatch(&mut self, args: Args<'_>) {
        if self.run_fast(&args) {
            self.note_write();
            if self.session.shared.pubsub.has_pushes() {
                self.flush().await;
                self.take_pushes();
            }
            return;
        }
        let mode_before = self.session.reply_mode;
        let quiet = mode_before != ReplyMode::On;
        if quiet {
            self.flush().await;
        }
        let before = self.out.len();
        self.sent_early = 0;
        self.run_command(args).await;
        let before = before.saturating_sub(self.sent_early);
        // CLIENT CACHING covers the next command only (a whole transaction, as Redis).
        if self.session.shared.tracking.caching_given()
            && self.session.multi.is_none()
            && self.last_cmd.is_none_or(|(_, s)| s.name != "client")
        {
            self.session.shared.tracking.end_command();
        }
        if quiet {
            self.flush().await;
        }
        self.apply_reply_mode(mode_before, before);
        if self.session.shared.pubsub.has_pushes() {
            // Pushes (subscribe confirmations, messages) go after this command's
            // reply and are never silenced by CLIENT REPLY, as Redis's pushes.
            self.flush().await;
            self.take_pushes();
        }
    }

    /// Notes a command that may have written (EXEC: what it ran may have), for
    /// WAIT: the client's last write is settled when its batch is done.
    #[inline]
    fn note_write(&mut self) {
        if let Some((_, spec)) = self.last_cmd {
            if spec.has(flags::WRITE) || spec.has(flags::MAY_REPLICATE) || spec.name == "exec" {
                self.session.last_write.wrote();
            }
        }
    }

    /// Moves pushes waiting for this client (pub/sub) to the output.
    fn take_pushes(&mut self) {
        let pubsub = &self.session.shared.pubsub;
        if pubsub.has_pushes() {
            pubsub.take_pushes(&mut self.out);
        }
    }

    /// The full path of one command: every refusal and wait Redis's processCommand
    /// has, then routing. `run_fast` takes the common keyed command past all of them;
    /// a gate added here that can refuse, delay or reroute a keyed command must also
    /// make `run_fast` decline (as CLIENT PAUSE does), or ordinary keyed commands
    /// would skip it.
    async fn run_command(&mut self, args: Args<'_>) {
        let in_multi = self.session.multi.is_some();
        self.session.cluster.next_command(in_multi);
        if !self.session.acl_refresh() {
            // The client's user was deleted: the connection ends (ACL DELUSER and
            // ACL LOAD close it too, this catches a command already on its way).
            self.session.close_after_reply = true;
            return;
        }
        let name = args.get(0);
        let cached = self
            .last_cmd
            .filter(|(_, s)| s.name.as_bytes().eq_ignore_ascii_case(name));
        let Some((idx, spec)) = cached.or_else(|| commands::lookup(name)) else {
            let msg = unknown_command_message(&args);
            self.reject(None, &msg);
            return;
        };
        self.last_cmd = Some((idx, spec));
        // Noted now: what EXEC runs resets `last_cmd`.
        self.note_write();
        let t = commands::table();
        let stat = t.stat_id(idx, &args);
        self.session.shared.last_cmd.set(t.stat_name(stat));
        let verdict = match self.gate(idx, spec, stat, &args) {
            // Boxed, as the redirect below: rare paths whose futures every
            // connection's task would otherwise carry (tests/conn_memory.rs).
            Gate::ClusterLookup => {
                Box::pin(self.cluster_gate_after_lookup(idx, spec, stat, &args)).await
            }
            other => other,
        };
        match verdict {
            Gate::Pass => {}
            Gate::Refuse(cmd, msg) => return self.reject(cmd, &msg),
            Gate::Busy(busy) => {
                if spec.name == "exec" && self.session.multi.is_some() {
                    return self.exec_abort(idx, &args, busy).await;
                }
                return self.reject(Some(idx), busy);
            }
            Gate::ClusterLookup => {}
            Gate::Redirect(msg) => return Box::pin(self.redirect(idx, spec, msg)).await,
        }
        // CLIENT PAUSE holds a command after every refusal and before MULTI queues
        // it, as Redis's processCommand; what EXEC or a script runs is never held.
        if self.session.exec_owner.is_none()
            && !self.session.in_script
            && self.session.cell.data.borrow().client_pause.is_set()
        {
            let may_write = self.pause_may_write(idx, &args);
            Box::pin(self.wait_out_pause(may_write)).await;
            if self.session.close_after_reply {
                return;
            }
            // The pause may have ended with this server a replica (FAILOVER): the
            // command is looked at again, as Redis processes a paused one anew.
            if let Some(err) = self.replication_gate(spec, stat) {
                return self.reject(Some(idx), err);
            }
        }
        if self.session.multi.is_some() {
            if spec.name == "exec" {
                self.flush().await;
                // Boxed: a transaction's future is the largest of a command's, and
                // every connection's task would carry its size (one allocation per
                // EXEC, which allocates its queue anyway).
                Box::pin(self.exec(idx, &args)).await;
                // Redis feeds EXEC to monitors after the commands it ran.
                if crate::observe::monitoring() {
                    crate::observe::monitor_feed(
                        self.session.db,
                        Some(&self.session.shared.addr.monitor_text()),
                        &args,
                    );
                }
                return;
            }
            if !commands::multi::runs_inside_multi(spec.name) {
                return self.queue_in_multi(idx, spec, &args);
            }
        }
        if crate::observe::monitoring() && t.stat_flags(stat) & flags::ADMIN == 0 {
            crate::observe::monitor_feed(
                self.session.db,
                Some(&self.session.shared.addr.monitor_text()),
                &args,
            );
        }
        // SYNC, PSYNC and MONITOR take over the connection; all three are admin
        // commands, so one flag test spares every other command the name compares.
        if spec.has(flags::ADMIN) {
            if matches!(spec.name, "sync" | "psync") && !self.session.in_script {
                self.flush().await;
                // Boxed: the sync's futures (a BGSAVE's start among them) are large,
                // and every connection's task would otherwise carry their size.
                return Box::pin(self.start_replica(&args)).await;
            }
            if spec.name == "monitor" {
                return self.start_monitor(idx, &args).await;
            }
        }
        match spec.kind {
            Kind::Client(f) => self.run_client(idx, spec, f, args),
            Kind::Global(f) => {
                if spec.has(flags::DENYOOM) && self.home_out_of_memory() {
                    return self.reject(Some(idx), commands::OOM_ERR);
                }
                self.flush().await;
                self.run_global(idx, f, &args).await;
            }
            Kind::Keyed(run, cross) => self.route_keyed(idx, spec, run, cross, &args).await,
        }
    }

    /// Runs a connection command (its handler is synchronous) and accounts it.
    fn run_client(
        &mut self,
        idx: u16,
        spec: &'static commands::CommandSpec,
        f: commands::ClientFn,
        args: Args<'_>,
    ) {
        let proto = self.session.proto;
        let before = self.reply_target().len();
        let t0 = self.clock_start();
        let target: &mut Vec<u8> = if self.pipe.is_empty() {
            &mut self.out
        } else {
            &mut self.pipe.scratch
        };
        f(&mut ClientCtx {
            session: &mut self.session,
            args,
            out: ReplyWriter { out: target, proto },
        });
        if crate::effects::active() && spec.has(flags::MAY_REPLICATE | flags::WRITE) {
            let (txn, db) = (self.session.exec_owner, self.session.db);
            let failed = self.reply_target().get(before) == Some(&b'-');
            let stated = crate::effects::Propagation::global();
            crate::effects::after_global(txn, db, idx, &args, failed, stated);
        }
        self.finish_local(idx, before, t0, &args);
        self.note_local(before);
    }

    /// CLIENT REPLY OFF / SKIP: drop what the command produced. `before` is where its
    /// reply starts in `out` (exact when the mode was not On, as the pipeline was
    /// flushed first). A command that switches replies off or to SKIP writes nothing,
    /// and one that switches them back on (CLIENT REPLY ON, RESET) keeps its reply.
    fn apply_reply_mode(&mut self, mode_before: ReplyMode, before: usize) {
        let quiet = mode_before != ReplyMode::On;
        match self.session.reply_mode {
            ReplyMode::On => {}
            ReplyMode::Off if quiet => self.out.truncate(before),
            ReplyMode::Off => {}
            ReplyMode::Skip => {
                if quiet {
                    self.out.truncate(before);
                }
                self.session.reply_mode = ReplyMode::SkipNext;
            }
            ReplyMode::SkipNext => {
                self.out.truncate(before);
                self.session.reply_mode = ReplyMode::On;
            }
        }
    }

    /// Where timing of a command run here starts: the end of the previous one when
    /// nothing happened since, else now. None when timing is off.
    #[inline]
    fn clock_start(&mut self) -> Option<Stamp> {
        if !self.timing {
            return None;
        }
        Some(*self.mark.get_or_insert_with(Stamp::now))
    }

    /// Accounts a command that ran here: commandstats / errorstats, its latency
    /// (histogram, latency monitor) and, if slow, a slowlog entry.
    fn finish_local(&mut self, idx: u16, before: usize, t0: Option<Stamp>, args: &Args<'_>) {
        let failed_prefix = {
            let target = if self.pipe.is_empty() {
                &self.out
            } else {
                &self.pipe.scratch
            };
            (target.get(before) == Some(&b'-'))
                .then(|| error_prefix(&target[before + 1..]).to_string())
        };
        let t = commands::table();
        let stat = t.stat_id(idx, args);
        let mut usec = 0;
        let mut slow = None;
        let cell = self.session.cell.clone();
        let mut data = cell.data.borrow_mut();
        if let Some(t0) = t0 {
            let t1 = Stamp::now();
            self.mark = Some(t1);
            let ns = t1.ns_since(t0);
            usec = ns / 1000;
            let cmd_flags = t.stat_flags(stat);
            data.observe.record(stat, cmd_flags, ns);
            if data.observe.is_slow(usec) && cmd_flags & flags::SKIP_SLOWLOG == 0 {
                slow = Some(crate::observe::SlowRecord {
                    time: crate::util::now_ms() / 1000,
                    usec,
                    argv: crate::observe::slow_argv(args),
                });
            }
        }
        data.stats.record_timed(stat, failed_prefix.is_some(), usec);
        let counted = std::mem::take(&mut self.session.error_counted);
        if let Some(p) = failed_prefix.filter(|_| !counted) {
            data.stats.record_error(&p);
        }
        if let Some(rec) = slow {
            let (peer, name) = self.client_ident();
            data.observe.push_slow(rec, peer, name);
        }
    }

    /// The client's address and name, as the slowlog records them.
    fn client_ident(&self) -> (String, Vec<u8>) {
        let sh = &self.session.shared;
        (
            sh.addr.to_string(),
            sh.name.borrow().clone().unwrap_or_default(),
        )
    }

    async fn run_global(&mut self, idx: u16, f: commands::GlobalFn, args: &Args<'_>) {
        let before = self.out.len();
        let t0 = self.timing.then(Stamp::now);
        let spec = &commands::table().specs[idx as usize];
        let write = spec.has(flags::WRITE);
        let may_block = (spec.has(flags::BLOCKING) || spec.has(flags::WAITS))
            && self.session.multi.is_none()
            && self.session.exec_owner.is_none();
        let mut ctx = GlobalCtx {
            session: &mut self.session,
            args: args.to_vecs(),
            out: &mut self.out,
            write,
            propagation: crate::effects::Propagation::global(),
        };
        if !may_block {
            f(&mut ctx).await;
            let stated = std::mem::take(&mut ctx.propagation);
            self.after_global(idx, args, before, stated);
            self.finish_local(idx, before, t0, args);
            return;
        }
        // A blocking command may wait for long: watch the socket meanwhile, so a
        // client that goes away stops waiting. The command is told (its client is
        // marked killed and unblocked) rather than dropped, as it may hold key locks.
        let shared = ctx.session.shared.clone();
        let on_close = || {
            shared.killed.set(true);
            if let Some(st) = shared.blocked.borrow().as_ref() {
                st.unblock(crate::shard::blocking::UNBLOCK_TIMEOUT);
            }
        };
        let ((), closed) =
            watch_socket(&mut self.stream, &mut self.stash, f(&mut ctx), on_close).await;
        let stated = std::mem::take(&mut ctx.propagation);
        if closed {
            self.session.close_after_reply = true;
            return;
        }
        self.after_global(idx, args, before, stated);
        self.finish_local(idx, before, t0, args);
    }

    /// Propagates what a keyless or multi-shard command did (its reply is at `before`).
    fn after_global(
        &self,
        idx: u16,
        args: &Args<'_>,
        before: usize,
        stated: crate::effects::Propagation,
    ) {
        if crate::effects::active() {
            let (txn, db) = (self.session.exec_owner, self.session.db);
            let failed = self.out.get(before) == Some(&b'-');
            crate::effects::after_global(txn, db, idx, args, failed, stated);
        }
    }

    /// Appends input read during a blocking command to the unparsed input.
    fn absorb_stash(&mut self, buf: &mut Vec<u8>) {
        let need = self.end + self.stash.len();
        if buf.len() < need {
            buf.resize(need, 0);
        }
        buf[self.end..need].copy_from_slice(&self.stash);
        self.end = need;
        self.stash.clear();
    }
}

/// Runs `fut` while watching the client's socket: input that arrives meanwhile (one
/// read, at most `READ_CHUNK` bytes, so a waiting client cannot grow it) goes to
/// `stash`, parsed after; end-of-file or an error calls `on_close`, which must make
/// `fut` end soon. Returns `fut`'s output and whether the client went away.
async fn watch_socket<T>(
    stream: &mut TcpStream,
    stash: &mut Vec<u8>,
    fut: impl std::future::Future<Output = T>,
    on_close: impl FnOnce(),
) -> (T, bool) {
    let mut tmp = vec![0u8; READ_CHUNK];
    let (mut got, mut closed) = (0, false);
    let out = {
        let mut fut = std::pin::pin!(fut);
        let mut rd = std::pin::pin!(stream.read(&mut tmp));
        let mut on_close = Some(on_close);
        let mut reading = true;
        std::future::poll_fn(|cx| {
            use std::future::Future;
            if reading {
                if let std::task::Poll::Ready(r) = rd.as_mut().poll(cx) {
                    reading = false;
                    match r {
                        Ok(0) | Err(_) => {
                            closed = true;
                            if let Some(f) = on_close.take() {
                                f();
                            }
                        }
                        Ok(n) => got = n,
                    }
                }
            }
            fut.as_mut().poll(cx)
        })
        .await
    };
    stash.extend_from_slice(&tmp[..got]);
    (out, closed)
}

/// Waits for whichever of `a` and `b` ends first.
async fn race(a: impl std::future::Future<Output = ()>, b: impl std::future::Future<Output = ()>) {
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    std::future::poll_fn(|cx| {
        if a.as_mut().poll(cx).is_ready() || b.as_mut().poll(cx).is_ready() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}
