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

/// The gate's verdict on a command (`Connection::gate`).
enum Gate {
    Pass,
    /// Refused with this error, counted as a rejected call of this stat id.
    Refuse(Option<u16>, String),
    /// A script is running too long (BUSY): refused, and EXEC aborts its transaction.
    Busy(&'static str),
}

/// Clients connected to the whole process (for maxclients and INFO clients).
pub static CONNECTED_CLIENTS: AtomicUsize = AtomicUsize::new(0);

const READ_CHUNK: usize = 16 * 1024;

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

    fn is_empty(&self) -> bool {
        self.order.is_empty()
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

/// Redis 7.0's reply to a client refused by protected mode, word for word: clients
/// and operators search for it.
const PROTECTED_MODE_DENIED: &str = "-DENIED Redis is running in protected mode because protected \
mode is enabled and no password is set for the default user. In this mode connections are only \
accepted from the loopback interface. If you want to connect from external computers to Redis you \
may adopt one of the following solutions: 1) Just disable protected mode sending the command \
'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same \
host the server is running, however MAKE SURE Redis is not publicly accessible from internet if \
you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable \
the protected mode by editing the Redis configuration file, and setting the protected mode option \
to 'no', and then restarting the server. 3) If you started the server manually just for testing, \
restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the \
default user. NOTE: You only need to do one of the above things in order for the server to start \
accepting connections from the outside.\r\n";

/// Protected mode (Redis 7.0's clientAcceptHandler): while it is on and the default
/// user has no password, only local peers may connect, whatever `bind` says.
fn protected_mode_denies(cell: &ShardCell, peer: &crate::clients::PeerAddr) -> bool {
    let data = cell.data.borrow();
    data.config.protected_mode()
        && data.config.requirepass().is_none()
        && !crate::clients::is_local_peer(peer)
}

pub async fn serve(cell: Rc<ShardCell>, stream: TcpStream) {
    let Ok((peer, local)) = stream.addresses() else {
        return;
    };
    let _ = stream.set_nodelay(true);
    let maxclients = cell.data.borrow().config.maxclients();
    let connected = CONNECTED_CLIENTS.fetch_add(1, Ordering::Relaxed) + 1;
    let mut stream = stream;
    if connected > maxclients {
        CONNECTED_CLIENTS.fetch_sub(1, Ordering::Relaxed);
        cell.data.borrow_mut().stats.rejected_connections += 1;
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        return;
    }
    if protected_mode_denies(&cell, &peer) {
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
    let shared = Rc::new(client);
    let authenticated = cell.data.borrow().config.requirepass().is_none();
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
            reply_mode: ReplyMode::On,
            close_after_reply: false,
            multi: None,
            exec_owner: None,
            watched: Vec::new(),
            in_script: false,
            error_counted: false,
        },
        buf: Vec::new(),
        start: 0,
        end: 0,
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
    };
    conn.run().await;
    if conn.monitor.is_some() {
        crate::observe::monitor_unregister(shared.id);
    }
    commands::multi::unwatch_all(&mut conn.session).await;
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
            if !self.out.is_empty() {
                let n = self.out.len() as u64;
                if !self.write_out().await {
                    return;
                }
                self.session.cell.data.borrow_mut().stats.net_output_bytes += n;
                self.out.clear();
                if self.out.capacity() > 4 * 1024 * 1024 {
                    self.out = Vec::new();
                }
            }
            if self.session.close_after_reply || self.session.shared.killed.get() {
                return;
            }
            if let Some(id) = self.replica_link {
                self.serve_replica(id).await;
                crate::replication::detach(id);
                return;
            }
        }
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
            // A replica link's stream queued meanwhile counts too.
            let link = self
                .replica_link
                .map_or(0, crate::replication::link_pending);
            let pending = shared.pending_output() + link;
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

    /// SYNC / PSYNC: reply with an RDB snapshot and register the link, whose stream
    /// starts right after it.
    async fn start_replica(&mut self, psync: bool) {
        let cell = self.session.cell.clone();
        let shared = &self.session.shared;
        let peer = crate::replication::ReplicaPeer {
            ip: shared
                .replica_ip
                .borrow()
                .clone()
                .unwrap_or_else(|| shared.addr.ip_text()),
            port: shared.replica_port.get(),
        };
        let (rdb, id, _) = crate::replication::snapshot(&cell, Some(peer)).await;
        let Some(id) = id else { return };
        if psync {
            let line = format!(
                "+FULLRESYNC {} {}\r\n",
                crate::replication::replid(),
                crate::replication::offset()
            );
            self.out.extend_from_slice(line.as_bytes());
        }
        self.out
            .extend_from_slice(format!("${}\r\n", rdb.len()).as_bytes());
        self.out.extend_from_slice(&rdb);
        self.replica_link = Some(id);
        self.session
            .shared
            .role
            .set(crate::clients::ClientRole::Replica);
        tracing::info!(client = self.session.id(), "replica attached, full sync");
    }

    /// The link's life: write the propagated stream as it comes; what the replica
    /// sends (REPLCONF ACK) is read and dropped; ends when it disconnects.
    async fn serve_replica(&mut self, id: u64) {
        enum Event {
            Tick,
            Input(usize),
            Output(Vec<u8>),
            Gone,
        }
        let mut tmp = vec![0u8; 4096];
        // What the replica sent after its SYNC in the same read, then as it comes.
        let mut input = self.buf[self.start..self.end].to_vec();
        if !self.replica_acks(id, &mut input) {
            return;
        }
        let mut last_ping = std::time::Instant::now();
        loop {
            let period = {
                let data = self.session.cell.data.borrow();
                data.config
                    .int_param("repl-ping-replica-period")
                    .unwrap_or(10)
                    .max(1) as u64
            };
            let due = std::time::Duration::from_secs(period).saturating_sub(last_ping.elapsed());
            if due.is_zero() {
                crate::replication::ping_links(period * 1000);
                last_ping = std::time::Instant::now();
                continue;
            }
            let ev = {
                let mut rd = std::pin::pin!(self.stream.read(&mut tmp));
                // Wakes the loop for the next PING (at most a second late, so a
                // lowered period takes effect soon).
                let mut tick = std::pin::pin!(crate::runtime::sleep(
                    due.min(std::time::Duration::from_secs(1))
                ));
                std::future::poll_fn(|cx| {
                    if std::future::Future::poll(tick.as_mut(), cx).is_ready() {
                        return std::task::Poll::Ready(Event::Tick);
                    }
                    if let std::task::Poll::Ready(r) = std::future::Future::poll(rd.as_mut(), cx) {
                        return std::task::Poll::Ready(match r {
                            Ok(0) | Err(_) => Event::Gone,
                            Ok(n) => Event::Input(n),
                        });
                    }
                    crate::replication::poll_output(id, cx.waker()).map(|o| match o {
                        Some(buf) => Event::Output(buf),
                        None => Event::Gone,
                    })
                })
                .await
            };
            match ev {
                Event::Tick => {}
                Event::Input(n) => {
                    let now = crate::util::now_ms();
                    self.session.shared.last_interaction_ms.set(now);
                    input.extend_from_slice(&tmp[..n]);
                    if !self.replica_acks(id, &mut input) {
                        return;
                    }
                }
                Event::Output(buf) => {
                    let n = buf.len() as u64;
                    // Written as any reply is, so that a replica that stops reading
                    // meets the replica class's output buffer limit.
                    self.out = buf;
                    let ok = self.write_out().await;
                    self.out = Vec::new();
                    if !ok {
                        return;
                    }
                    self.session.cell.data.borrow_mut().stats.net_output_bytes += n;
                }
                Event::Gone => return,
            }
            if self.session.shared.killed.get() {
                return;
            }
        }
    }

    /// What a replica link sends: REPLCONF ACK <offset> is recorded (INFO's `slaveN`
    /// offset and lag); anything else is ignored, as a Redis master ignores it.
    /// Consumes the complete commands of `input`; false on a protocol error, which
    /// ends the link.
    fn replica_acks(&mut self, id: u64, input: &mut Vec<u8>) -> bool {
        let limits = ParseLimits::default();
        let mut spans = Vec::new();
        let mut pos = 0;
        loop {
            match self.parser.parse(&input[pos..], &limits, &mut spans) {
                Ok(Some(consumed)) => {
                    let args = if self.parser.last_was_inline() {
                        Args::new(self.parser.inline_buf(), &spans)
                    } else {
                        Args::new(&input[pos..], &spans)
                    };
                    if args.len() >= 3 && args.is(0, "replconf") && args.is(1, "ack") {
                        if let Some(offset) = commands::parse_i64(args.get(2)) {
                            crate::replication::ack(id, offset.max(0) as u64);
                        }
                    }
                    pos += consumed;
                }
                Ok(None) => break,
                Err(_) => return false,
            }
        }
        input.drain(..pos);
        true
    }

    /// A monitor's wait: writes feed lines as they come until input arrives.
    /// False on EOF, error or kill.
    async fn read_or_feed(&mut self) -> bool {
        use std::task::Poll;
        loop {
            if self.start == self.end {
                self.start = 0;
                self.end = 0;
            }
            if self.buf.len() - self.end < READ_CHUNK {
                self.buf.resize(self.end + READ_CHUNK, 0);
            }
            let Some(rx) = self.monitor.as_mut() else {
                return self.read_more().await;
            };
            let mut lines: Vec<u8> = Vec::new();
            let got = {
                let mut rd = Box::pin(self.stream.read(&mut self.buf[self.end..]));
                std::future::poll_fn(|cx| {
                    if let Poll::Ready(r) = std::future::Future::poll(rd.as_mut(), cx) {
                        return Poll::Ready(Some(r));
                    }
                    while let Poll::Ready(Some(l)) =
                        futures_core::Stream::poll_next(std::pin::Pin::new(&mut *rx), cx)
                    {
                        lines.extend_from_slice(&l);
                    }
                    if lines.is_empty() {
                        Poll::Pending
                    } else {
                        Poll::Ready(None)
                    }
                })
                .await
            };
            match got {
                Some(Ok(0)) | Some(Err(_)) => return false,
                Some(Ok(n)) => {
                    self.end += n;
                    self.now = crate::util::now_ms();
                    self.session.shared.last_interaction_ms.set(self.now);
                    return !self.session.shared.killed.get();
                }
                None => {
                    if self.stream.write_all(&lines).await.is_err() {
                        return false;
                    }
                }
            }
        }
    }

    /// MONITOR: reply OK, then stream every command the server runs.
    async fn start_monitor(&mut self, idx: u16, args: &Args<'_>) {
        self.flush().await;
        let before = self.out.len();
        ReplyWriter {
            out: &mut self.out,
            proto: self.session.proto,
        }
        .ok();
        if self.monitor.is_none() {
            self.monitor = Some(crate::observe::monitor_register(self.session.id()));
            self.session
                .shared
                .role
                .set(crate::clients::ClientRole::Monitor);
        }
        self.finish_local(idx, before, None, args);
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
        if pending > limit {
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
            self.flush().await;
            if self.out.len() >= self.obuf_watch {
                self.check_output_limit();
            }
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

    fn reject(&mut self, cmd: Option<u16>, msg: &str) {
        // A command that fails to queue dooms the transaction (EXECABORT).
        if let Some(m) = self.session.multi.as_mut() {
            m.aborted = true;
        }
        let proto = self.session.proto;
        let mut data = self.session.cell.data.borrow_mut();
        data.stats.record_rejected(cmd);
        data.stats.record_error(error_prefix(msg.as_bytes()));
        drop(data);
        let before = self.reply_target().len();
        ReplyWriter {
            out: self.reply_target(),
            proto,
        }
        .error(msg);
        self.note_local(before);
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

    /// The common case, run without building the futures of `run_command`,
    /// `route_keyed` and `run_inline` (whose set-up and state switches were about a
    /// tenth of a pipelined GET or SET): a known keyed command of the right arity
    /// whose keys are all on this shard, or a fast connection command (PING, ECHO,
    /// SELECT ...), from an authenticated client with replies on, outside MULTI,
    /// pub/sub and tracking, with no script busy, no monitor, no replication refusal
    /// and no client pause; for a keyed command also no key lock on the shard and no
    /// maxmemory. It then does exactly what the full path does for it. Returns false,
    /// having changed nothing, for anything else.
    fn run_fast(&mut self, args: &Args<'_>) -> bool {
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
            || session.multi.is_some()
            || shared.pubsub.has_pushes()
            || shared.tracking.on()
            || shared.tracking.caching_given()
            || crate::observe::monitoring()
            || self.pipe.locked
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
    fn queue_remote(
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
        let t = commands::table();
        let stat = t.stat_id(idx, &args);
        self.session.shared.last_cmd.set(t.stat_name(stat));
        match self.gate(idx, spec, stat, &args) {
            Gate::Pass => {}
            Gate::Refuse(cmd, msg) => return self.reject(cmd, &msg),
            Gate::Busy(busy) => {
                if spec.name == "exec" && self.session.multi.is_some() {
                    return self.exec_abort(idx, &args, busy).await;
                }
                return self.reject(Some(idx), busy);
            }
        }
        // CLIENT PAUSE holds a command after every refusal and before MULTI queues
        // it, as Redis's processCommand; what EXEC or a script runs is never held.
        if self.session.exec_owner.is_none()
            && !self.session.in_script
            && self.session.cell.data.borrow().client_pause.is_set()
        {
            let may_write = self.pause_may_write(idx, &args);
            self.wait_out_pause(may_write).await;
            if self.session.close_after_reply {
                return;
            }
        }
        if self.session.multi.is_some() {
            if spec.name == "exec" {
                self.flush().await;
                self.exec(idx, &args).await;
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
                return self.start_replica(spec.name == "psync").await;
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

    /// The refusals, in Redis's processCommand order: the one predicate both the fast
    /// path and `run_command` consult (the fast path runs a command only when this
    /// passes, and leaves every other verdict to `run_command`). `stat` is the
    /// command's stat id (its subcommand's, for a container).
    fn gate(
        &self,
        idx: u16,
        spec: &'static commands::CommandSpec,
        stat: u16,
        args: &Args<'_>,
    ) -> Gate {
        let t = commands::table();
        // A container's unknown subcommand is an unknown command to Redis: refused
        // before arity, protection and authentication are looked at.
        if stat == idx && args.len() >= 2 && !t.subcommands(idx).is_empty() {
            return Gate::Refuse(None, unknown_subcommand_message(spec.name, args.get(1)));
        }
        if !spec.arity_ok(args.len()) {
            let msg = format!("ERR wrong number of arguments for '{}' command", spec.name);
            return Gate::Refuse(Some(idx), msg);
        }
        if let Some(sub) = t.stat_sub(stat).filter(|s| !s.arity_ok(args.len())) {
            let msg = format!("ERR wrong number of arguments for '{}' command", sub.name);
            return Gate::Refuse(Some(stat), msg);
        }
        if let Some(msg) = self.protected_command_refusal(spec, args) {
            return Gate::Refuse(Some(idx), msg);
        }
        if !self.session.authenticated && !spec.has(flags::NO_AUTH) {
            return Gate::Refuse(Some(idx), "NOAUTH Authentication required.".into());
        }
        if self.session.shared.pubsub.active()
            && self.session.proto == Protocol::Resp2
            && !commands::pubsub::allowed_while_subscribed(spec.name)
        {
            let msg = commands::pubsub::subscribed_context_error(spec.name);
            return Gate::Refuse(Some(idx), msg);
        }
        if let Some(busy) = crate::scripting::busy_error() {
            if !spec.has(flags::ALLOW_BUSY) {
                return Gate::Busy(busy);
            }
        }
        if let Some(err) = self.replication_gate(spec) {
            return Gate::Refuse(Some(idx), err.into());
        }
        Gate::Pass
    }

    /// DEBUG, and MODULE LOAD / LOADEX / UNLOAD, run only as `enable-debug-command` /
    /// `enable-module-command` allow (Redis 7.0's protected commands; `local` means a
    /// local peer; MODULE LIST and HELP are not protected). Both are admin commands,
    /// so the flag test spares every other command the name compare.
    fn protected_command_refusal(
        &self,
        spec: &commands::CommandSpec,
        args: &Args<'_>,
    ) -> Option<String> {
        if !spec.has(flags::ADMIN) {
            return None;
        }
        let (name, setting) = match spec.name {
            "debug" => ("DEBUG", "enable-debug-command"),
            "module" if ["load", "loadex", "unload"].iter().any(|s| args.is(1, s)) => {
                ("MODULE", "enable-module-command")
            }
            _ => return None,
        };
        let data = self.session.cell.data.borrow();
        let allowed = if spec.name == "debug" {
            data.config.enable_debug_command()
        } else {
            data.config.enable_module_command()
        };
        if allowed.allows(self.session.shared.is_local()) {
            return None;
        }
        Some(format!(
            "ERR {name} command not allowed. If the {setting} option is set to \"local\", \
             you can run it from a local connection, otherwise you need to set this option \
             in the configuration file, and then restart the server."
        ))
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
        if crate::replication::active() && spec.has(flags::MAY_REPLICATE | flags::WRITE) {
            let (txn, db) = (self.session.exec_owner, self.session.db);
            let reply = &self.reply_target()[before..];
            crate::replication::after_global(txn, db, spec, &args, reply);
        }
        self.finish_local(idx, before, t0, &args);
        self.note_local(before);
    }

    /// Redis's replication checks before a command runs (or queues): READONLY on a
    /// replica, NOREPLICAS under min-replicas-to-write, MASTERDOWN on a replica whose
    /// link is down with replica-serve-stale-data off. Commands EXEC or a script runs
    /// are not checked again.
    fn replication_gate(&self, spec: &commands::CommandSpec) -> Option<&'static str> {
        if self.session.exec_owner.is_some() || self.session.in_script {
            return None;
        }
        let write = spec.has(flags::WRITE);
        let stale_ok = spec.has(flags::STALE);
        if !crate::replication::is_replica() && !write {
            return None;
        }
        let config = &self.session.cell.data.borrow().config;
        crate::replication::check(config, write, stale_ok)
    }

    /// Whether CLIENT PAUSE WRITE holds this command: it may write or propagate
    /// (EXEC: one of its queued commands may).
    fn pause_may_write(&self, idx: u16, args: &Args<'_>) -> bool {
        let spec = &commands::table().specs[idx as usize];
        if spec.name != "exec" {
            return may_write_or_propagate(idx, args);
        }
        self.session.multi.as_ref().is_some_and(|m| {
            m.queue
                .iter()
                .any(|(i, argv)| may_write_or_propagate(*i, &OwnedArgs::new(argv).args()))
        })
    }

    /// Waits while a CLIENT PAUSE holds the command about to run. Replies of earlier
    /// commands go out first (Redis writes them while the client is blocked); the
    /// socket is watched meanwhile, so a client that leaves stops waiting.
    async fn wait_out_pause(&mut self, may_write: bool) {
        let cell = self.session.cell.clone();
        let held = cell
            .data
            .borrow_mut()
            .pause_holds(crate::util::now_ms(), may_write)
            .is_some();
        if !held {
            return;
        }
        self.flush().await;
        if !self.out.is_empty() {
            let n = self.out.len();
            if self.stream.write_all(&self.out).await.is_err() {
                self.session.close_after_reply = true;
                return;
            }
            cell.data.borrow_mut().stats.net_output_bytes += n as u64;
            self.out.clear();
            self.sent_early += n;
        }
        let shared = self.session.shared.clone();
        shared.paused.set(true);
        let gone = || shared.killed.get();
        let wait = crate::shard::pause::wait_while_paused(&cell, may_write, gone);
        let ((), closed) = watch_socket(&mut self.stream, &mut self.stash, wait, || {
            shared.killed.set(true)
        })
        .await;
        shared.paused.set(false);
        self.mark = None;
        if closed {
            self.session.close_after_reply = true;
        }
    }

    /// Whether this connection's shard is over its maxmemory share with nothing left
    /// to evict (for commands checked at home: MULTI queueing, EXEC, coordinators).
    fn home_out_of_memory(&self) -> bool {
        if self.session.exec_owner.is_some() {
            return false;
        }
        let cell = &self.session.cell;
        let mut d = cell.data.borrow_mut();
        d.mem.limit != 0 && d.oom_refuses(true, cell.locks.borrow().is_idle())
    }

    /// Between MULTI and EXEC: queue the command (or refuse it, dooming the
    /// transaction) and reply QUEUED.
    fn queue_in_multi(&mut self, idx: u16, spec: &'static commands::CommandSpec, args: &Args<'_>) {
        if spec.has(flags::NO_MULTI) {
            return self.reject(Some(idx), "ERR Command not allowed inside a transaction");
        }
        // Redis refuses a DENYOOM command already when queued, dooming the EXEC.
        if spec.has(flags::DENYOOM) && self.home_out_of_memory() {
            return self.reject(Some(idx), commands::OOM_ERR);
        }
        if let Some(m) = self.session.multi.as_mut() {
            m.queue.push((idx, args.to_vecs()));
            self.session.shared.multi_count.set(m.queue.len() as i64);
        }
        let proto = self.session.proto;
        let before = self.reply_target().len();
        ReplyWriter {
            out: self.reply_target(),
            proto,
        }
        .simple("QUEUED");
        self.note_local(before);
    }

    /// EXEC refused before it started (Redis's execCommandAbort): the transaction is
    /// discarded and the error says why.
    async fn exec_abort(&mut self, idx: u16, args: &Args<'_>, err: &str) {
        self.flush().await;
        self.session.multi = None;
        self.session.shared.multi_count.set(-1);
        commands::multi::unwatch_all(&mut self.session).await;
        let before = self.out.len();
        ReplyWriter {
            out: &mut self.out,
            proto: self.session.proto,
        }
        .error(&format!(
            "EXECABORT Transaction discarded because of: {err}"
        ));
        self.finish_local(idx, before, None, args);
    }

    /// EXEC: every queued command runs while the transaction holds every shard, so it
    /// is atomic and isolated across cores; WATCHed keys are checked under the locks.
    async fn exec(&mut self, idx: u16, args: &Args<'_>) {
        let Some(state) = self.session.multi.take() else {
            return;
        };
        let t0 = self.timing.then(Stamp::now);
        self.session.shared.multi_count.set(-1);
        let proto = self.session.proto;
        if state.aborted {
            commands::multi::unwatch_all(&mut self.session).await;
            let before = self.out.len();
            ReplyWriter {
                out: &mut self.out,
                proto,
            }
            .error("EXECABORT Transaction discarded because of previous errors.");
            self.finish_local(idx, before, t0, args);
            return;
        }
        let gate = {
            let specs = &commands::table().specs;
            let write = state
                .queue
                .iter()
                .any(|(i, _)| specs[*i as usize].has(flags::WRITE));
            let stale_ok = state
                .queue
                .iter()
                .all(|(i, _)| specs[*i as usize].has(flags::STALE));
            let config = &self.session.cell.data.borrow().config;
            crate::replication::check(config, write, stale_ok)
        };
        if let Some(err) = gate {
            return self.exec_abort(idx, args, err).await;
        }
        let denyoom = state
            .queue
            .iter()
            .any(|(c, _)| commands::table().specs[*c as usize].has(flags::DENYOOM));
        if denyoom && self.home_out_of_memory() {
            return self
                .exec_abort(idx, args, commands::OOM_ERR.trim_start_matches('-'))
                .await;
        }
        let cell = self.session.cell.clone();
        let owner = locks::LockOwner {
            id: cell.next_txn_id(),
            write: false,
            client: self.session.id(),
        };
        let op = crate::shard::multi::MultiShardOp::lock_all(owner, &cell).await;
        let dirty = commands::multi::watched_dirty(&self.session).await;
        commands::multi::unwatch_all(&mut self.session).await;
        let before = self.out.len();
        if dirty {
            op.release(&cell).await;
            ReplyWriter {
                out: &mut self.out,
                proto,
            }
            .null_array();
            self.finish_local(idx, before, t0, args);
            return;
        }
        self.session.exec_owner = Some(owner.id);
        let shared = self.session.shared.clone();
        shared.tracking.defer(&shared, true);
        let captured = crate::replication::begin_capture(owner.id);
        ReplyWriter {
            out: &mut self.out,
            proto,
        }
        .array_len(state.queue.len());
        for (_, argv) in &state.queue {
            let owned = OwnedArgs::new(argv);
            // Every command takes the locked path under the transaction's owner, which
            // already holds every shard; each completes before the next starts.
            self.pipe.locked = true;
            Box::pin(self.run_command(owned.args())).await;
            self.flush().await;
            self.take_pushes();
        }
        self.pipe.locked = false;
        self.session.exec_owner = None;
        shared.tracking.defer(&shared, false);
        if captured {
            crate::replication::end_capture(owner.id);
        }
        op.release(&cell).await;
        self.finish_local(idx, before, t0, args);
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

    /// Logs the slow commands a batch reported, as this client's.
    fn log_remote_slow(&mut self, replies: &mut [Option<BatchReply>]) {
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

    async fn run_global(&mut self, idx: u16, f: commands::GlobalFn, args: &Args<'_>) {
        let before = self.out.len();
        let t0 = self.timing.then(Stamp::now);
        let spec = &commands::table().specs[idx as usize];
        let write = spec.has(flags::WRITE);
        let may_block = spec.has(flags::BLOCKING)
            && self.session.multi.is_none()
            && self.session.exec_owner.is_none();
        let mut ctx = GlobalCtx {
            session: &mut self.session,
            args: args.to_vecs(),
            out: &mut self.out,
            write,
        };
        if !may_block {
            f(&mut ctx).await;
            self.after_global(spec, args, before);
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
        if closed {
            self.session.close_after_reply = true;
            return;
        }
        self.after_global(spec, args, before);
        self.finish_local(idx, before, t0, args);
    }

    /// Propagates what a keyless or multi-shard command did (its reply is at `before`).
    fn after_global(&self, spec: &commands::CommandSpec, args: &Args<'_>, before: usize) {
        if crate::replication::active() {
            let (txn, db) = (self.session.exec_owner, self.session.db);
            crate::replication::after_global(txn, db, spec, args, &self.out[before..]);
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

    async fn route_keyed(
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
    async fn run_inline(
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
    fn run_inline_now(
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
            keys: spec.keys.positions(args).map(|p| args.get(p)),
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
    async fn oom_check(&mut self, cell: &Rc<ShardCell>, denyoom: bool) -> OomCheck {
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

    fn queue_split(
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

    /// Sends every pending batch, waits for the replies and writes them in order.
    async fn flush(&mut self) {
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
                let mut b = std::mem::take(&mut self.pipe.batches[s]);
                (b.client, b.home) = (self.session.id(), cell.id);
                b.out_budget = budget;
                let r = std::mem::take(&mut self.pipe.spare_replies[s]);
                waiting.push((s, cell.hop(s, b, r)));
            }
            for (s, wait) in waiting.drain(..) {
                let (r, mut b) = wait.await;
                replies[s] = Some(r);
                b.clear();
                self.pipe.batches[s] = b;
            }
            self.pipe.waiting = waiting;
        }
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
        self.pipe.locked = false;
    }

    /// One multi-shard operation over all pending batches: lock and run shard by shard
    /// in ascending order, release when the last shard has run.
    async fn run_locked(&mut self, cell: &Rc<ShardCell>, replies: &mut [Option<BatchReply>]) {
        let txn = self
            .session
            .exec_owner
            .unwrap_or_else(|| cell.next_txn_id());
        let shards: Vec<usize> = (0..replies.len())
            .filter(|&s| !self.pipe.batches[s].is_empty())
            .collect();
        // A command split over shards reaches replicas as one MULTI/EXEC block.
        let captured = crate::replication::begin_capture(txn);
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
            crate::replication::end_capture(txn);
        }
        for &s in &shards[..shards.len().saturating_sub(1)] {
            cell.tell(s, move |c| c.locks.borrow_mut().release(txn))
                .await;
        }
    }

    fn assemble(&mut self, replies: &[Option<BatchReply>]) {
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

/// Where a keyed command's keys live.
enum KeyShard {
    /// All on this shard (also a command with no key: it runs at home).
    One(usize),
    /// On more than one shard.
    Spans,
}

fn key_shard(cell: &ShardCell, spec: &commands::CommandSpec, args: &Args<'_>) -> KeyShard {
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
fn merge_in_order(
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

/// Combines the per-key replies of a split command into the reply the client expects.
pub(crate) fn merge_replies<'a>(
    merge: Merge,
    pieces: impl Iterator<Item = &'a [u8]> + Clone,
    count: usize,
    w: &mut ReplyWriter,
) {
    if merge != Merge::Array {
        if let Some(err) = pieces.clone().find(|p| p.first() == Some(&b'-')) {
            w.out.extend_from_slice(err);
            return;
        }
    }
    match merge {
        Merge::Array => {
            w.array_len(count);
            for p in pieces {
                w.out.extend_from_slice(p);
            }
        }
        Merge::Sum => {
            let total: i64 = pieces
                .filter_map(|p| p.strip_prefix(b":"))
                .filter_map(|p| std::str::from_utf8(p).ok()?.trim_end().parse::<i64>().ok())
                .sum();
            w.integer(total);
        }
        Merge::Ok => w.ok(),
    }
}

/// Whether a command may write or propagate (Redis's WRITE | MAY_REPLICATE, with a
/// script's declared flags for EVAL / EVALSHA / FCALL): what CLIENT PAUSE WRITE holds.
fn may_write_or_propagate(idx: u16, args: &Args<'_>) -> bool {
    let t = commands::table();
    if t.stat_flags(t.stat_id(idx, args)) & (flags::WRITE | flags::MAY_REPLICATE) == 0 {
        return false;
    }
    args.len() < 2 || crate::scripting::may_write(t.specs[idx as usize].name, args.get(1))
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

/// Redis 7.0's text for an unknown command, including up to 128 bytes of its arguments.
/// Redis's reply to a container command with a subcommand it does not have
/// (`%.128s` of the subcommand, the container as typed, upper-cased).
fn unknown_subcommand_message(container: &str, sub: &[u8]) -> String {
    let sub = String::from_utf8_lossy(&sub[..sub.len().min(128)]);
    format!(
        "ERR unknown subcommand '{sub}'. Try {} HELP.",
        container.to_ascii_uppercase()
    )
}

fn unknown_command_message(args: &Args) -> String {
    let name = String::from_utf8_lossy(&args.get(0)[..args.get(0).len().min(128)]).into_owned();
    let mut tail = String::new();
    for i in 1..args.len() {
        if tail.len() >= 128 {
            break;
        }
        let room = 128 - tail.len();
        let a = args.get(i);
        tail.push('\'');
        tail.push_str(&String::from_utf8_lossy(&a[..a.len().min(room)]));
        tail.push_str("' ");
    }
    format!("ERR unknown command '{name}', with args beginning with: {tail}")
}
