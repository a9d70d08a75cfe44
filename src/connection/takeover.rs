//! Commands that take the connection over: SYNC / PSYNC turn it into a replica
//! link fed from the replication stream, MONITOR into a feed of every command.

use super::*;

/// How much of an RDB file a disk-based full sync reads and writes at a time.
const SEND_CHUNK: usize = 1 << 20;

/// The socket a full sync writes to directly: the connection's own, or the input
/// of a TLS connection's relay.
struct SyncSocket(std::os::fd::RawFd);

impl std::os::fd::AsRawFd for SyncSocket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0
    }
}

/// A socket pair between a full sync's direct writes and a TLS connection: what
/// goes into `input` is read from `output` and sent through the connection's TLS
/// session.
struct Relay {
    input: std::os::unix::net::UnixStream,
    output: TcpStream,
}

/// What the relay reads at a time.
const RELAY_CHUNK: usize = 64 * 1024;

impl Relay {
    fn new() -> std::io::Result<Relay> {
        let (input, output) = std::os::unix::net::UnixStream::pair()?;
        Ok(Relay {
            input,
            output: TcpStream::from_unix(output, "relay")?,
        })
    }

    /// Sends what arrives until dropped. A failed send shuts the connection's
    /// socket, which the sync's `gone` then sees; the pump itself never ends.
    async fn pump(&mut self, stream: &mut TcpStream) -> std::convert::Infallible {
        let mut buf = vec![0u8; RELAY_CHUNK];
        loop {
            let sent = match self.output.read(&mut buf).await {
                Ok(n) if n > 0 => stream.write_all(&buf[..n]).await,
                _ => Err(std::io::ErrorKind::BrokenPipe.into()),
            };
            if sent.is_err() {
                // SAFETY: shutdown(2) on the connection's own socket.
                unsafe { libc::shutdown(std::os::fd::AsRawFd::as_raw_fd(stream), libc::SHUT_RDWR) };
                std::future::pending::<()>().await;
            }
        }
    }

    /// Sends what the relay still holds (its writers are done: all of it is in the
    /// socket pair's buffer now). False when the connection failed.
    async fn drain(&mut self, stream: &mut TcpStream) -> bool {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.output);
        let mut buf = vec![0u8; RELAY_CHUNK];
        loop {
            // SAFETY: recv(2) into a live buffer of its length, without waiting.
            let n =
                unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if n <= 0 {
                return true;
            }
            if stream.write_all(&buf[..n as usize]).await.is_err() {
                // As the pump does: the sync's `gone` sees the replica gone.
                // SAFETY: shutdown(2) on the connection's own socket.
                unsafe { libc::shutdown(std::os::fd::AsRawFd::as_raw_fd(stream), libc::SHUT_RDWR) };
                return false;
            }
        }
    }
}

impl Connection {
    /// SYNC / PSYNC (Redis's syncCommand): continue from the backlog when PSYNC names
    /// a history and offset this server still holds (+CONTINUE), else reply with an
    /// RDB snapshot (+FULLRESYNC for PSYNC) and register the link, whose stream
    /// starts right after it.
    pub(super) async fn start_replica(&mut self, args: &Args<'_>) {
        let psync = args.is(0, "psync");
        if psync && args.len() > 3 && args.is(3, "failover") {
            // The master fails over to this replica (Redis's syncCommand): promoted
            // here, its PSYNC then continues with the id it had.
            let asked = String::from_utf8_lossy(args.get(1)).into_owned();
            tracing::warn!("Failover request received for replid {asked}.");
            if !crate::replication::is_replica() {
                return self
                    .out
                    .extend_from_slice(b"-ERR PSYNC FAILOVER can't be sent to a master.\r\n");
            }
            if asked != crate::replication::replid() {
                return self
                    .out
                    .extend_from_slice(b"-ERR PSYNC FAILOVER replid must match my replid.\r\n");
            }
            let cell = self.session.cell.clone();
            crate::replication::become_master(&cell, true).await;
            tracing::info!("MASTER MODE enabled (failover request)");
        }
        if crate::replication::failover::refuses_sync() {
            return self
                .out
                .extend_from_slice(b"-NOMASTERLINK Can't SYNC while failing over\r\n");
        }
        if crate::replication::is_replica() && !crate::replication::link::is_up() {
            return self.out.extend_from_slice(
                b"-NOMASTERLINK Can't SYNC while not connected with my master\r\n",
            );
        }
        let shared = &self.session.shared;
        // A filtered snapshot is only ever sent over the socket, never saved as
        // dbfilename (Redis's syncCommand).
        if shared.replica_filter.get().is_some() && !shared.replica_capa_eof.get() {
            return self
                .out
                .extend_from_slice(b"-ERR Filtered replica requires EOF capability\r\n");
        }
        let peer = crate::replication::ReplicaPeer {
            ip: shared
                .replica_ip
                .borrow()
                .clone()
                .unwrap_or_else(|| shared.addr.ip_text()),
            port: shared.replica_port.get(),
        };
        let who = format!("{}:{}", peer.ip, peer.port);
        tracing::info!("Replica {who} asks for synchronization");
        let asked = if psync {
            let Some(offset) = commands::parse_i64(args.get(2)) else {
                tracing::warn!("Replica {who} asks for synchronization but with a wrong offset");
                return self
                    .out
                    .extend_from_slice(b"-ERR value is not an integer or out of range\r\n");
            };
            Some((String::from_utf8_lossy(args.get(1)).into_owned(), offset))
        } else {
            None
        };
        if let Some(functions) = self.session.shared.replica_filter.get() {
            return self.filtered_sync(peer, psync, functions).await;
        }
        if let Some((id, offset)) = &asked {
            if let Some(link) = crate::replication::try_partial(id, *offset, peer.clone(), &who) {
                let line = format!("+CONTINUE {}\r\n", crate::replication::replid());
                self.out.extend_from_slice(line.as_bytes());
                self.link_timeout = true;
                return self.become_replica_link(link, "partial resync");
            }
        }
        crate::replication::count_full_sync(asked.as_ref().is_some_and(|(id, _)| id != "?"));
        // Whatever this client was sent before goes out first: the sync's bytes are
        // written to its socket directly.
        if !self.send_early().await {
            return;
        }
        let cell = self.session.cell.clone();
        let (diskless, delay_s, max_waiting) = {
            let c = &cell.data.borrow().config;
            (
                c.bool_param("repl-diskless-sync").unwrap_or(true),
                c.int_param("repl-diskless-sync-delay").unwrap_or(5).max(0) as u64,
                c.int_param("repl-diskless-sync-max-replicas")
                    .unwrap_or(0)
                    .max(0) as usize,
            )
        };
        // A replica from its SYNC on, as in Redis: CLIENT KILL TYPE replica and a
        // full sync of this server's own (disconnectSlaves) end its transfer too.
        self.session
            .shared
            .role
            .set(crate::clients::ClientRole::Replica);
        if diskless && psync && self.session.shared.replica_capa_eof.get() {
            self.diskless_sync(&cell, peer, delay_s, max_waiting).await;
        } else {
            self.disk_sync(&cell, peer, psync).await;
        }
    }

    /// A replica that asked for the file only (REPLCONF rdb-only 1) has it: its link
    /// goes, never fed, and the connection closes (Redis's replicaPutOnline).
    fn rdb_only_done(&mut self, link: u64, who: &str) -> bool {
        if !self.session.shared.replica_rdb_only.get() {
            return false;
        }
        crate::replication::detach(link);
        self.session.close_after_reply = true;
        tracing::info!(
            "RDB transfer completed, rdb only replica ({who}) should be disconnected asap"
        );
        true
    }

    /// A full sync whose snapshot leaves the keys out (REPLCONF rdb-filter-only,
    /// redis-cli --functions-rdb and --replica): the file holds the function
    /// libraries or nothing, so it is built here at once and needs no walk of the
    /// shards. Sent framed `$EOF:<mark>` (after +FULLRESYNC for PSYNC); the link,
    /// unless the replica wants the file only, starts at the offset taken with the
    /// libraries.
    async fn filtered_sync(
        &mut self,
        peer: crate::replication::ReplicaPeer,
        psync: bool,
        functions: bool,
    ) {
        use crate::storage::rdb::{self, file};
        let who = format!("{}:{}", peer.ip, peer.port);
        let rdb_only = self.session.shared.replica_rdb_only.get();
        let (_, libraries) = crate::scripting::functions::snapshot();
        let codes: Vec<&[u8]> = if functions {
            libraries.iter().map(|l| l.code.as_slice()).collect()
        } else {
            Vec::new()
        };
        let (link, offset) = if rdb_only {
            (None, crate::effects::position().0)
        } else {
            let (link, offset) = crate::replication::attach(peer);
            (Some(link), offset)
        };
        let mut file = file::header(&codes, crate::replication::save_info().as_ref());
        let crc = rdb::crc64(0, &file);
        file.extend_from_slice(&file::trailer(crc));
        tracing::info!("Starting BGSAVE for SYNC with target: replicas sockets");
        let mark = crate::replication::random_id();
        if psync {
            let line = format!("+FULLRESYNC {} {offset}\r\n", crate::replication::replid());
            self.out.extend_from_slice(line.as_bytes());
        }
        self.out
            .extend_from_slice(format!("$EOF:{mark}\r\n").as_bytes());
        self.out.extend_from_slice(&file);
        self.out.extend_from_slice(mark.as_bytes());
        let sent = self.send_early().await;
        match link {
            Some(link) if sent => self.online_after_socket_file(link, &who, "full sync (filtered)"),
            Some(link) => {
                crate::replication::detach(link);
                self.session.close_after_reply = true;
            }
            None => {
                if sent {
                    tracing::info!("RDB transfer completed, rdb only replica ({who}) should be disconnected asap");
                }
                self.session.close_after_reply = true;
            }
        }
    }

    /// A full sync through the round's shared transfer (full_sync.rs): the writer
    /// child sends +FULLRESYNC, the file and its mark; the link's stream then waits
    /// for the replica's first ACK.
    async fn diskless_sync(
        &mut self,
        cell: &Rc<ShardCell>,
        peer: crate::replication::ReplicaPeer,
        delay_s: u64,
        max_waiting: usize,
    ) {
        use crate::replication::full_sync;
        let who = format!("{}:{}", peer.ip, peer.port);
        let shared = self.session.shared.clone();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.stream);
        let gone = || shared.killed.get() || full_sync::peer_closed(fd);
        let sent = self
            .with_sync_socket(async |socket: &SyncSocket| {
                let transfer =
                    full_sync::diskless(cell, peer, socket, delay_s, max_waiting, gone).await?;
                shared.repl_link.set(transfer.link);
                let timeout_s = || cell.data.borrow().config.repl_timeout_s();
                // The stream since the cut waits in the replication buffer meanwhile,
                // held to the replica's output buffer limit.
                let gone = || gone() || shared.replica_over_limit();
                if !transfer.finished(socket, gone, timeout_s, &who).await {
                    crate::replication::detach(transfer.link);
                    return None;
                }
                Some(transfer.link)
            })
            .await;
        let link = match sent {
            Some((Some(link), true)) => link,
            Some((Some(link), false)) => {
                crate::replication::detach(link);
                self.session.close_after_reply = true;
                return;
            }
            Some((None, _)) | None => {
                self.session.close_after_reply = true;
                return;
            }
        };
        if self.rdb_only_done(link, &who) {
            return;
        }
        self.online_after_socket_file(link, &who, "full sync");
    }

    /// A replica has the whole file sent over its socket (`$EOF:` framed): it loads
    /// now, its timeout counts from here (replicaPutOnline), and its stream waits for
    /// its first ACK (full_sync.rs says why).
    fn online_after_socket_file(&mut self, link: u64, who: &str, how: &str) {
        tracing::info!("Streamed RDB transfer with replica {who} succeeded (socket). Waiting for REPLCONF ACK from slave to enable streaming");
        self.session
            .shared
            .last_interaction_ms
            .set(crate::util::now_ms());
        self.stream_on_ack = true;
        self.link_timeout = true;
        self.become_replica_link(link, how);
    }

    /// Runs `work`, which writes to the replica's socket directly (keep-alive
    /// newlines; a diskless transfer's writer child). For a TLS connection that
    /// socket is a relay whose bytes are encrypted onto the connection meanwhile,
    /// and the last of them once `work` is done: bytes written past TLS would break
    /// the session. What `work` returned and whether all it wrote reached the
    /// replica; None when no relay could be made (`work` did not run).
    async fn with_sync_socket<T>(
        &mut self,
        work: impl AsyncFnOnce(&SyncSocket) -> T,
    ) -> Option<(T, bool)> {
        use std::os::fd::AsRawFd;
        if !self.stream.is_tls() {
            let socket = SyncSocket(self.stream.as_raw_fd());
            return Some((work(&socket).await, true));
        }
        let mut relay = match Relay::new() {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("Can't relay the full sync to a TLS replica: {e}");
                return None;
            }
        };
        let socket = SyncSocket(relay.input.as_raw_fd());
        let done = match crate::runtime::first(work(&socket), relay.pump(&mut self.stream)).await {
            crate::runtime::First::A(done) => done,
            crate::runtime::First::B(never) => match never {},
        };
        let delivered = relay.drain(&mut self.stream).await;
        Some((done, delivered))
    }

    /// A full sync through a BGSAVE of dbfilename (Redis's disk target), the file
    /// then sent as `$<len>`.
    async fn disk_sync(
        &mut self,
        cell: &Rc<ShardCell>,
        peer: crate::replication::ReplicaPeer,
        psync: bool,
    ) {
        use crate::replication::full_sync;
        let shared = self.session.shared.clone();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.stream);
        let gone = || shared.killed.get() || full_sync::peer_closed(fd);
        let started = self
            .with_sync_socket(async |socket: &SyncSocket| {
                full_sync::to_disk(cell, peer, socket, gone).await
            })
            .await;
        let (job, link, offset) = match started {
            Some((Some(started), true)) => started,
            Some((Some((job, link, _)), false)) => {
                full_sync::left_disk_save(cell, &job, link);
                crate::replication::detach(link);
                self.session.close_after_reply = true;
                return;
            }
            Some((None, _)) | None => {
                self.session.close_after_reply = true;
                return;
            }
        };
        shared.repl_link.set(link);
        // The stream since the cut waits in the replication buffer meanwhile, held
        // to the replica's output buffer limit (closing it makes `gone` true).
        let gone = || gone() || shared.replica_over_limit();
        if psync {
            let line = format!("+FULLRESYNC {} {offset}\r\n", crate::replication::replid());
            self.out.extend_from_slice(line.as_bytes());
            if !self.send_early().await {
                full_sync::left_disk_save(cell, &job, link);
                crate::replication::detach(link);
                return;
            }
        }
        let saved = self
            .with_sync_socket(async |socket: &SyncSocket| {
                full_sync::saved(&job, socket, &gone).await
            })
            .await;
        if saved != Some((true, true)) {
            if gone() {
                // The replica left while its snapshot was saved.
                full_sync::left_disk_save(cell, &job, link);
            } else {
                tracing::warn!("SYNC failed. BGSAVE child returned an error");
            }
            crate::replication::detach(link);
            self.session.close_after_reply = true;
            return;
        }
        crate::replication::set_state(link, crate::replication::SyncState::SendBulk);
        let sent = self.send_rdb_file(cell).await;
        if let Err(e) = &sent {
            tracing::warn!("SYNC failed. Can't open/stat DB after BGSAVE: {e}");
        }
        // A file error, or the replica went away mid-file: no link to attach.
        if !matches!(sent, Ok(true)) {
            crate::replication::detach(link);
            self.session.close_after_reply = true;
            return;
        }
        let who = format!("{}:{}", shared.addr.ip_text(), shared.replica_port.get());
        if self.rdb_only_done(link, &who) {
            return;
        }
        self.link_timeout = psync;
        shared.last_interaction_ms.set(crate::util::now_ms());
        self.become_replica_link(link, "full sync");
    }

    /// Sends dbfilename as `$<len>` and its bytes, a chunk at a time (Redis's
    /// sendBulkToSlave), each chunk read straight into the output buffer. Err on a
    /// file error; Ok(false) when the replica went away mid-file.
    async fn send_rdb_file(&mut self, cell: &Rc<ShardCell>) -> std::io::Result<bool> {
        use std::io::Read as _;
        let path = {
            let c = &cell.data.borrow().config;
            std::path::Path::new(c.dir()).join(c.dbfilename())
        };
        let mut file = std::fs::File::open(&path)?;
        let len = file.metadata()?.len();
        self.out.extend_from_slice(format!("${len}\r\n").as_bytes());
        let mut left = len;
        loop {
            if !self.send_early().await {
                return Ok(false);
            }
            if left == 0 {
                return Ok(true);
            }
            let start = self.out.len();
            let want = SEND_CHUNK.min(left as usize);
            self.out.resize(start + want, 0);
            let n = file.read(&mut self.out[start..])?;
            self.out.truncate(start + n);
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            left -= n as u64;
        }
    }

    /// Writes what `out` holds now, outside the reply accounting of the command
    /// running (as a pause's early write): false when the client is gone.
    async fn send_early(&mut self) -> bool {
        let n = self.out.len();
        if n == 0 {
            return true;
        }
        let sent = self.write_out().await;
        self.out.clear();
        self.sent_early += n;
        self.session.cell.data.borrow_mut().stats.net_output_bytes += n as u64;
        sent
    }

    fn become_replica_link(&mut self, id: u64, how: &str) {
        self.replica_link = Some(id);
        self.session.shared.repl_link.set(id);
        crate::replication::set_state(id, crate::replication::SyncState::Online);
        self.session
            .shared
            .role
            .set(crate::clients::ClientRole::Replica);
        tracing::info!(client = self.session.id(), "replica attached, {how}");
    }

    /// The link's life: write the propagated stream as it comes; what the replica
    /// sends (REPLCONF ACK) is read and dropped; ends when it disconnects.
    pub(super) async fn serve_replica(&mut self, id: u64) {
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
            let (period, timeout_s) = {
                let data = self.session.cell.data.borrow();
                let c = &data.config;
                (
                    c.int_param("repl-ping-replica-period").unwrap_or(10).max(1) as u64,
                    c.repl_timeout_s(),
                )
            };
            // A PSYNC replica acknowledges every second: silent for repl-timeout, it
            // is gone (an old SYNC replica never acknowledges and is never timed out).
            let silent_ms =
                crate::util::now_ms().saturating_sub(self.session.shared.last_interaction_ms.get());
            if self.link_timeout && silent_ms > timeout_s * 1000 {
                let s = &self.session.shared;
                let ip = s
                    .replica_ip
                    .borrow()
                    .clone()
                    .unwrap_or_else(|| s.addr.ip_text());
                tracing::warn!(
                    "Disconnecting timedout replica (streaming sync): {ip}:{}",
                    s.replica_port.get()
                );
                return;
            }
            let due = std::time::Duration::from_secs(period).saturating_sub(last_ping.elapsed());
            if due.is_zero() {
                crate::effects::keepalive(period * 1000);
                last_ping = std::time::Instant::now();
                continue;
            }
            let held = self.stream_on_ack;
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
                    if held {
                        return std::task::Poll::Pending;
                    }
                    crate::effects::poll(id, cx.waker()).map(|o| match o {
                        Some(buf) => Event::Output(buf),
                        None => Event::Gone,
                    })
                })
                .await
            };
            match ev {
                Event::Tick => {
                    if self.session.shared.replica_over_limit() {
                        return;
                    }
                }
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
    pub(super) fn replica_acks(&mut self, id: u64, input: &mut Vec<u8>) -> bool {
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
                    let quiet = args.len() >= 2
                        && args.is(0, "replconf")
                        && (args.is(1, "ack") || args.is(1, "getack"));
                    if args.is_empty() {
                        // A newline: what a replica sends to keep its link alive
                        // while it loads (Redis skips empty inline commands).
                        pos += consumed;
                        continue;
                    }
                    if !quiet {
                        // Anything else would be answered, and a replica link carries
                        // no replies (Redis disconnects such a replica).
                        self.log_replica_command(&args);
                        return false;
                    }
                    if args.len() >= 3 && args.is(1, "ack") {
                        if let Some(offset) = commands::parse_i64(args.get(2)) {
                            crate::replication::ack(id, offset.max(0) as u64, fack(&args));
                        }
                        // Loaded: the stream may follow the file now.
                        self.stream_on_ack = false;
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

    /// Redis's warning for a replica that sent a command its link cannot answer.
    fn log_replica_command(&self, args: &Args<'_>) {
        let t = commands::table::table();
        let sub = (args.len() >= 2)
            .then(|| [args.get(0), b"|", args.get(1)].concat())
            .and_then(|full| t.lookup_full(&full));
        let (name, flags) = match sub {
            Some(id) => (t.stat_name(id), t.stat_flags(id)),
            None => commands::table::lookup(args.get(0))
                .map_or(("<unknown>", 0), |(_, s)| (s.name, s.flags)),
        };
        tracing::warn!(
            "Replica generated a reply to command '{name}', disconnecting it: {}",
            self.session.shared.info_line(crate::util::now_ms())
        );
        use commands::table::flags::{MAY_REPLICATE, READONLY, WRITE};
        if flags & (READONLY | WRITE | MAY_REPLICATE) != 0 {
            crate::replication::link::error_to_replica(
                "Replica can't interact with the keyspace",
                name,
            );
        }
    }

    /// A monitor's wait: writes feed lines as they come until input arrives.
    /// False on EOF, error or kill.
    pub(super) async fn read_or_feed(&mut self) -> bool {
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
    pub(super) async fn start_monitor(&mut self, idx: u16, args: &Args<'_>) {
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
}

/// `REPLCONF ACK <offset> FACK <aofoffset>` (Redis 7.2): the offset the replica's AOF
/// has fsynced, when it names one (a negative one never raises what is recorded).
fn fack(args: &Args<'_>) -> Option<u64> {
    if args.len() < 5 || !args.is(3, "fack") {
        return None;
    }
    commands::parse_i64(args.get(4)).map(|o| o.max(0) as u64)
}
