//! Connected clients: each connection's session state, and the per-shard registry that
//! CLIENT LIST / KILL / INFO read (fanned out over all shards).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashMap;

use crate::config::{ClientClass, Config, ObufLimit};
use crate::protocol::reply::Protocol;

/// Redis's per-client static reply buffer (PROTO_REPLY_CHUNK_BYTES): output up to
/// this size is never counted against `client-output-buffer-limit`.
pub const REPLY_BUF_BYTES: usize = 16 * 1024;

/// `client-output-buffer-limit` per class (hard bytes, soft bytes, soft seconds),
/// copied here at startup and on CONFIG SET so that the checks read three relaxed
/// loads instead of the shard's configuration.
static OBUF_LIMITS: [[AtomicU64; 3]; 3] = [
    [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
    [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
    [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
];

/// Copies `client-output-buffer-limit` into the process-wide cache.
pub fn sync_output_limits(config: &Config) {
    for class in [
        ClientClass::Normal,
        ClientClass::Replica,
        ClientClass::Pubsub,
    ] {
        let l = config.client_output_buffer_limit(class);
        let slot = &OBUF_LIMITS[class as usize];
        slot[0].store(l.hard_limit_bytes, Ordering::Relaxed);
        slot[1].store(l.soft_limit_bytes, Ordering::Relaxed);
        slot[2].store(l.soft_limit_seconds.max(0) as u64, Ordering::Relaxed);
    }
}

/// One class's cached `client-output-buffer-limit`.
pub fn output_limit(class: ClientClass) -> ObufLimit {
    let slot = &OBUF_LIMITS[class as usize];
    ObufLimit {
        hard_limit_bytes: slot[0].load(Ordering::Relaxed),
        soft_limit_bytes: slot[1].load(Ordering::Relaxed),
        soft_limit_seconds: slot[2].load(Ordering::Relaxed) as i64,
    }
}

/// The pending output (in bytes) from which `output_limit_reached` must be asked for
/// a client of `class`; `usize::MAX` when the class has no limit. Connections keep it
/// per read batch, so the per-command check is one compare.
pub fn output_watermark(class: ClientClass) -> usize {
    let l = output_limit(class);
    let low = match (l.hard_limit_bytes, l.soft_limit_bytes) {
        (0, 0) => return usize::MAX,
        (0, s) => s,
        (h, 0) => h,
        (h, s) => h.min(s),
    };
    usize::try_from(low)
        .unwrap_or(usize::MAX)
        .saturating_add(REPLY_BUF_BYTES)
}

/// The most output a batch of this client's commands may add on another shard
/// before that shard stops running it (the hard limit left after `pending`);
/// `usize::MAX` without a hard limit.
pub fn output_budget(class: ClientClass, pending: usize) -> usize {
    let hard = output_limit(class).hard_limit_bytes;
    if hard == 0 {
        return usize::MAX;
    }
    usize::try_from(hard)
        .unwrap_or(usize::MAX)
        .saturating_add(REPLY_BUF_BYTES)
        .saturating_sub(pending)
}

/// CLIENT REPLY mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    Off,
    /// Suppress the reply of the next command only.
    Skip,
    /// Internal: SKIP has been consumed by one command; back to On after it.
    SkipNext,
}

pub use crate::runtime::PeerAddr;

/// The part of a client's state that other tasks on its shard read or change
/// (CLIENT LIST, CLIENT KILL): cells, because the shard is single-threaded.
pub struct ClientShared {
    pub id: u64,
    pub addr: PeerAddr,
    pub laddr: PeerAddr,
    pub fd: i32,
    pub created_ms: u64,
    pub name: RefCell<Option<Vec<u8>>>,
    /// CLIENT SETINFO lib-name / lib-ver (Redis 7.2): what the client library says
    /// it is, shown in CLIENT LIST; kept by RESET.
    pub lib_name: RefCell<Option<Vec<u8>>>,
    pub lib_ver: RefCell<Option<Vec<u8>>>,
    pub db: Cell<usize>,
    pub last_cmd: Cell<&'static str>,
    pub last_interaction_ms: Cell<u64>,
    pub proto: Cell<Protocol>,
    pub query_buf_len: Cell<usize>,
    /// The query buffer's allocated size (CLIENT LIST's qbuf + qbuf-free).
    pub query_buf_cap: Cell<usize>,
    /// The most input the query buffer held since the clients cron last looked.
    pub query_buf_peak: Cell<usize>,
    /// The size the clients cron asks an idle connection to shrink its query buffer
    /// to (0: free it), applied by the connection itself while it waits for input.
    pub query_buf_shrink: Cell<Option<usize>>,
    /// The output buffer's capacity after its last write (0 once an idle connection
    /// gave it back): CLIENT LIST's `rbs`.
    pub reply_buf_cap: Cell<usize>,
    /// The most reply bytes one write carried in the current period of
    /// REPLY_PEAK_RESET_MS: CLIENT LIST's `rbp` (Redis's buf_peak), and when that
    /// period began (unix ms).
    pub reply_buf_peak: Cell<usize>,
    pub reply_buf_peak_since: Cell<u64>,
    /// Wakes the connection's pending read so that it applies `query_buf_shrink`.
    pub read_waker: Option<crate::runtime::ReadWaker>,
    /// A replica link or a MONITOR instead of a normal client.
    pub role: Cell<ClientRole>,
    /// What REPLCONF listening-port / ip-address announced (INFO's slaveN line).
    pub replica_port: Cell<u16>,
    pub replica_ip: RefCell<Option<String>>,
    /// REPLCONF capa eof: the replica reads an RDB framed `$EOF:<mark>` (a diskless
    /// full sync).
    pub replica_capa_eof: Cell<bool>,
    /// REPLCONF rdb-only 1: the replica wants the snapshot and no stream after it
    /// (redis-cli --rdb); its connection closes once the file is sent.
    pub replica_rdb_only: Cell<bool>,
    /// REPLCONF rdb-filter-only: the snapshot leaves the keys out, and the function
    /// libraries too unless `functions` was named (Some(true)).
    pub replica_filter: Cell<Option<bool>>,
    /// The replica's link into the replication buffer once it has one (0 before):
    /// its output is counted there, not in `output_len`.
    pub repl_link: Cell<u64>,
    /// Reply bytes the connection holds but has not written yet (while a write waits
    /// for the client to read): with the pub/sub outbox, CLIENT LIST's `omem` and what
    /// `client-output-buffer-limit` measures.
    pub output_len: Cell<usize>,
    /// When the pending output last went over its class's soft limit (unix ms), 0
    /// while under it (Redis's obuf_soft_limit_reached_time).
    pub obuf_soft_since: Cell<u64>,
    pub killed: Cell<bool>,
    /// The master asked for a REPLCONF ACK (REPLCONF GETACK on the master link):
    /// `ACK_ASKED` while the GETACK runs, then the offset before it.
    pub ack_asked: Cell<Option<u64>>,
    pub no_evict: Cell<bool>,
    /// CLIENT NO-TOUCH (Redis 7.2); every shard also has the id in its
    /// `no_touch_clients` meanwhile.
    pub no_touch: Cell<bool>,
    pub multi_count: Cell<i64>,
    /// While the client waits in a blocking command: its wake-up state, which
    /// CLIENT UNBLOCK uses.
    pub blocked: RefCell<Option<std::sync::Arc<crate::shard::blocking::BlockState>>>,
    /// While the client's next command waits for a CLIENT PAUSE to end, or its
    /// SHUTDOWN waits (both counted in INFO's blocked_clients).
    pub paused: Cell<bool>,
    /// Pub/Sub subscriptions and pushes waiting to be written.
    pub pubsub: crate::pubsub::ClientPubSub,
    /// The ACL user the client runs as (the default user until AUTH / HELLO).
    pub user: RefCell<std::sync::Arc<crate::acl::User>>,
    /// CLIENT TRACKING mode.
    pub tracking: crate::tracking::ClientTracking,
}

/// `ClientShared::ack_asked` while the GETACK that asked has not finished.
pub const ACK_ASKED: u64 = u64::MAX;

/// What a connection became: Redis's CLIENT_SLAVE / CLIENT_MONITOR flags.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub enum ClientRole {
    #[default]
    Normal,
    /// SYNC / PSYNC made it a replica link.
    Replica,
    /// MONITOR made it a feed of every command.
    Monitor,
    /// The AOF's commands at start (Redis's fake AOF client): refused nothing while
    /// the dataset loads, never timed out.
    AofLoader,
    /// This replica's link to its master (Redis's CLIENT_MASTER): the master's
    /// stream, applied without replies and refused nothing.
    Master,
}

impl ClientRole {
    /// Commands from this client are the dataset's own history (the AOF, the
    /// master's stream): no refusal for role, loading or stale data applies.
    pub fn replays(self) -> bool {
        matches!(self, ClientRole::AofLoader | ClientRole::Master)
    }
}

/// The client classes CLIENT LIST / CLIENT KILL TYPE select (Redis's getClientType).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ClientType {
    Normal,
    Replica,
    PubSub,
    /// This server's own link to its master.
    Master,
}

impl ClientType {
    /// `normal`, `replica` / `slave`, `pubsub` or `master`, in any case.
    pub fn parse(name: &[u8]) -> Option<ClientType> {
        let t = match name.to_ascii_lowercase().as_slice() {
            b"normal" => ClientType::Normal,
            b"replica" | b"slave" => ClientType::Replica,
            b"pubsub" => ClientType::PubSub,
            b"master" => ClientType::Master,
            _ => return None,
        };
        Some(t)
    }
}

impl ClientShared {
    /// A client with nothing set yet: no socket (`fd` -1), RESP2, db 0.
    pub fn new(id: u64, addr: PeerAddr, laddr: PeerAddr, now_ms: u64) -> ClientShared {
        ClientShared {
            id,
            addr,
            laddr,
            fd: -1,
            created_ms: now_ms,
            name: Default::default(),
            lib_name: Default::default(),
            lib_ver: Default::default(),
            db: Default::default(),
            last_cmd: Cell::new("NULL"),
            last_interaction_ms: Cell::new(now_ms),
            proto: Cell::new(Protocol::Resp2),
            query_buf_len: Default::default(),
            query_buf_cap: Default::default(),
            query_buf_peak: Default::default(),
            query_buf_shrink: Default::default(),
            reply_buf_cap: Default::default(),
            reply_buf_peak: Default::default(),
            reply_buf_peak_since: Default::default(),
            read_waker: None,
            role: Default::default(),
            replica_port: Default::default(),
            replica_ip: Default::default(),
            replica_capa_eof: Default::default(),
            replica_rdb_only: Default::default(),
            replica_filter: Default::default(),
            repl_link: Default::default(),
            output_len: Default::default(),
            obuf_soft_since: Default::default(),
            killed: Default::default(),
            ack_asked: Default::default(),
            no_evict: Default::default(),
            no_touch: Default::default(),
            multi_count: Cell::new(-1),
            blocked: Default::default(),
            paused: Default::default(),
            pubsub: Default::default(),
            user: RefCell::new(crate::acl::default()),
            tracking: Default::default(),
        }
    }

    /// A MONITOR is a normal client here, as in Redis (only replica links count as
    /// replicas).
    pub fn client_type(&self) -> ClientType {
        let role = self.role.get();
        if role == ClientRole::Replica {
            ClientType::Replica
        } else if role == ClientRole::Master {
            ClientType::Master
        } else if self.pubsub.active() {
            ClientType::PubSub
        } else {
            ClientType::Normal
        }
    }

    /// The `client-output-buffer-limit` class this client is held to.
    pub fn output_class(&self) -> ClientClass {
        match self.client_type() {
            ClientType::Replica => ClientClass::Replica,
            ClientType::PubSub => ClientClass::Pubsub,
            ClientType::Normal | ClientType::Master => ClientClass::Normal,
        }
    }

    /// Reply bytes waiting for this client: unwritten output and queued pushes; for
    /// a replica with a link, its part of the replication buffer (Redis counts a
    /// replica's output there, and not the RDB file it is sent).
    pub fn pending_output(&self) -> usize {
        match self.repl_link.get() {
            0 => self.output_len.get() + self.pubsub.outbox_len(),
            link => crate::effects::link_usage(link),
        }
    }

    /// A replica over the replica class's output buffer limit is closed (Redis
    /// checks as the stream grows; a link checks while it waits to write, and at
    /// least every second). True when it was.
    pub fn replica_over_limit(&self) -> bool {
        let now = crate::util::now_ms();
        if self.output_limit_reached(self.pending_output(), now) {
            self.close_for_output_limit(now);
            return true;
        }
        false
    }

    /// Redis's checkClientOutputBufferLimits: whether `pending` reply bytes break the
    /// client's class limit: the hard one at once, the soft one once it has been
    /// exceeded continuously for more than its seconds (the timer starts at the first
    /// check over it and stops at the first under it). Bytes that Redis's static
    /// 16 KB reply buffer would hold do not count, as in Redis; a replica's whole
    /// part of the replication buffer does.
    pub fn output_limit_reached(&self, pending: usize, now_ms: u64) -> bool {
        let class = self.output_class();
        let mut limit = output_limit(class);
        let used = if class == ClientClass::Replica {
            // A replica's hard limit is never below the backlog: a partial resync
            // may hand it that much at once, and the buffer is shared anyway.
            let backlog = crate::replication::backlog_size() as u64;
            if limit.hard_limit_bytes > 0 && limit.hard_limit_bytes < backlog {
                limit.hard_limit_bytes = backlog;
            }
            pending as u64
        } else {
            pending.saturating_sub(REPLY_BUF_BYTES) as u64
        };
        if limit.hard_limit_bytes > 0 && used >= limit.hard_limit_bytes {
            return true;
        }
        if limit.soft_limit_bytes == 0 || used < limit.soft_limit_bytes {
            self.obuf_soft_since.set(0);
            return false;
        }
        match self.obuf_soft_since.get() {
            0 => {
                self.obuf_soft_since.set(now_ms.max(1));
                false
            }
            since => {
                let elapsed_s = now_ms.saturating_sub(since) / 1000;
                elapsed_s > limit.soft_limit_seconds.max(0) as u64
            }
        }
    }

    /// Closes a client over its output buffer limit, logging it as Redis 7.0 does
    /// (freeClientAsync's warning, with the client's CLIENT LIST line).
    pub fn close_for_output_limit(&self, now_ms: u64) {
        if self.killed.get() {
            return;
        }
        tracing::warn!(
            "Client {} scheduled to be closed ASAP for overcoming of output buffer limits.",
            self.info_line(now_ms)
        );
        self.kill();
    }

    /// One line of CLIENT LIST / CLIENT INFO in Redis 7.0's format.
    pub fn info_line(&self, now_ms: u64) -> String {
        let name = self.name.borrow();
        let name = name
            .as_deref()
            .map(String::from_utf8_lossy)
            .unwrap_or_default();
        let age = now_ms.saturating_sub(self.created_ms) / 1000;
        let idle = now_ms.saturating_sub(self.last_interaction_ms.get()) / 1000;
        let mut flags = String::new();
        match self.role.get() {
            ClientRole::Replica => flags.push('S'),
            ClientRole::Monitor => flags.push('O'),
            ClientRole::Master => flags.push('M'),
            ClientRole::Normal | ClientRole::AofLoader => {}
        }
        if self.pubsub.active() {
            flags.push('P');
        }
        if self.is_blocked() {
            flags.push('b');
        }
        self.tracking.list_flags(&mut flags);
        // Redis 7.2's order: U, e, T.
        if matches!(self.addr, PeerAddr::Unix(_)) {
            flags.push('U');
        }
        if self.no_evict.get() {
            flags.push('e');
        }
        if self.no_touch.get() {
            flags.push('T');
        }
        if flags.is_empty() {
            flags.push('N');
        }
        let omem = self.pending_output();
        // Redis's tot-mem: the client's buffers (query buffer, output) and its struct.
        let rbs = self.reply_buf_cap.get();
        let tot_mem = self.query_buf_cap.get() + rbs + omem + std::mem::size_of::<ClientShared>();
        format!(
            "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db={} sub={} psub={} ssub={} multi={} qbuf={} qbuf-free={} argv-mem=0 multi-mem=0 rbs={} rbp={} obl=0 oll=0 omem={} tot-mem={} events=r cmd={} user={} redir={} resp={} lib-name={} lib-ver={}",
            self.id,
            self.addr,
            self.laddr,
            self.fd,
            name,
            age,
            idle,
            flags,
            self.db.get(),
            self.pubsub.channel_count(),
            self.pubsub.pattern_count(),
            self.pubsub.shard_channel_count(),
            self.multi_count.get(),
            self.query_buf_len.get(),
            self.query_buf_cap
                .get()
                .saturating_sub(self.query_buf_len.get()),
            rbs,
            self.reply_buf_peak.get(),
            omem,
            tot_mem,
            self.last_cmd.get(),
            String::from_utf8_lossy(&self.user.borrow().name),
            self.tracking.redir_field(),
            match self.proto.get() {
                Protocol::Resp2 => 2,
                Protocol::Resp3 => 3,
            },
            String::from_utf8_lossy(self.lib_name.borrow().as_deref().unwrap_or_default()),
            String::from_utf8_lossy(self.lib_ver.borrow().as_deref().unwrap_or_default()),
        )
    }

    /// Whether the client waits: in a blocking command or for a CLIENT PAUSE to end
    /// (Redis counts both as blocked clients).
    pub fn is_blocked(&self) -> bool {
        self.paused.get() || self.blocked.borrow().is_some()
    }

    /// Ends the connection from outside its task: shutting the socket down makes the
    /// pending read return end-of-file.
    pub fn kill(&self) {
        self.killed.set(true);
        // SAFETY: shutdown(2) on an fd this process owns; a stale fd at worst fails.
        unsafe {
            libc::shutdown(self.fd, libc::SHUT_RDWR);
        }
    }
}

/// A connection's session: what commands read and change about their client.
pub struct Session {
    pub cell: Rc<crate::shard::ShardCell>,
    pub shared: Rc<ClientShared>,
    pub db: usize,
    pub proto: Protocol,
    pub authenticated: bool,
    /// The ACL generation the client's user was read at, and whether that user may
    /// run everything (then no permission check runs).
    pub acl_gen: u64,
    pub acl_open: bool,
    pub reply_mode: ReplyMode,
    /// Close the connection once pending replies are written (QUIT, protocol errors).
    pub close_after_reply: bool,
    /// MULTI state: the queued commands, or None outside a transaction. Boxed:
    /// every connection's task carries its session, most never open one.
    pub multi: Option<Box<MultiState>>,
    /// While EXEC runs: the lock owner of the transaction.
    pub exec_owner: Option<crate::shard::locks::TxnId>,
    /// Keys this client WATCHes: (db, key, flag set by any write to it, expired then).
    /// Boxed for the reason `multi` is.
    pub watched: Option<Box<Vec<WatchedKey>>>,
    /// The fake client a Lua script's commands run as (Redis's CLIENT_SCRIPT).
    pub in_script: bool,
    /// The reply just produced is an error already counted in the error stats (a
    /// script's error that came from a `redis.call`): the command still counts as
    /// failed, the error not a second time.
    pub error_counted: bool,
    /// Where the client's last write stands in the stream, for WAIT.
    pub last_write: LastWrite,
    /// Cluster mode: ASKING and READONLY (Redis's CLIENT_ASKING, CLIENT_READONLY).
    pub cluster: ClusterFlags,
}

/// A client's cluster-mode state.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClusterFlags {
    /// ASKING was sent: the next command (or the transaction it is in) may use
    /// a slot this node imports.
    pub asking: bool,
    /// READONLY: reads of the master's slots are served on this replica.
    pub readonly: bool,
    /// ASKING was the command just before this one.
    pub asking_fresh: bool,
}

impl ClusterFlags {
    /// ASKING: the next command (or the transaction it opens) may use an
    /// importing slot.
    pub fn ask(&mut self) {
        self.asking = true;
        self.asking_fresh = true;
    }

    /// A command begins (`in_multi`: the client is inside MULTI): ASKING lasts
    /// for the one command after it, or through a transaction, as Redis's
    /// resetClient clears it after any other command outside MULTI.
    #[inline]
    pub fn next_command(&mut self, in_multi: bool) {
        if self.asking {
            if self.asking_fresh {
                self.asking_fresh = false;
            } else if !in_multi {
                self.asking = false;
            }
        }
    }
}

impl Session {
    /// Makes the client run as `user` (AUTH, HELLO, RESET).
    pub fn set_user(&mut self, user: std::sync::Arc<crate::acl::User>) {
        self.acl_gen = crate::acl::generation();
        self.acl_open = self.unchecked(&user);
        *self.shared.user.borrow_mut() = user;
    }

    /// Whether the client's commands skip the permission check: its user may run
    /// everything, or it replays what a master or the AOF already ran (Redis's
    /// clients with no user).
    fn unchecked(&self, user: &crate::acl::User) -> bool {
        user.unrestricted() || self.shared.role.get().replays()
    }

    /// Reads the client's user again if the ACL changed since it was read. False
    /// when the user is gone (deleted, or replaced by ACL LOAD): the client is then
    /// back to the default user, unauthenticated, and must be closed.
    pub fn acl_refresh(&mut self) -> bool {
        let gen = crate::acl::generation();
        if gen == self.acl_gen {
            return true;
        }
        let current = self.shared.user.borrow().clone();
        match crate::acl::refresh(&current) {
            Some(u) => {
                self.acl_open = self.unchecked(&u);
                *self.shared.user.borrow_mut() = u;
                self.acl_gen = gen;
                true
            }
            None => {
                self.authenticated = false;
                self.set_user(crate::acl::default());
                false
            }
        }
    }
}

/// Where a client's last write stands in the effect stream (Redis's c->woff): WAIT
/// waits for the replicas to acknowledge that far, not for other clients' writes.
/// Known as an entry number: the client's writes are numbered below
/// `effects::next_seq()` as read once they are done.
#[derive(Default, Clone, Copy)]
pub struct LastWrite {
    /// A write was dispatched and `seq` is not updated for it yet.
    due: bool,
    /// Every entry of the client's writes is numbered below this (0: none).
    seq: u64,
}

impl LastWrite {
    /// A command that may write was dispatched.
    #[inline]
    pub fn wrote(&mut self) {
        self.due = true;
    }

    /// The batch of commands that held the write is done (its replies are in).
    #[inline]
    pub fn settle(&mut self) {
        if self.due {
            self.seq = crate::effects::next_seq();
            self.due = false;
        }
    }

    /// The stream offset the client's writes end at (0 without any), or a little
    /// later.
    pub fn offset(&self) -> u64 {
        let seq = if self.due {
            crate::effects::next_seq()
        } else {
            self.seq
        };
        if seq == 0 {
            return 0;
        }
        crate::effects::offset_of(seq)
    }
}

/// A key under WATCH: any write to it on its shard sets `dirty`.
pub struct WatchedKey {
    pub db: usize,
    pub key: Vec<u8>,
    pub dirty: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The key was already logically expired when watched (Redis then ignores a later
    /// expiry of it).
    pub expired_at_watch: bool,
}

/// Commands queued between MULTI and EXEC.
#[derive(Default)]
pub struct MultiState {
    pub queue: Vec<(u16, Vec<Vec<u8>>)>,
    /// A command failed to queue: EXEC must answer EXECABORT.
    pub aborted: bool,
}

impl Session {
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    pub fn set_db(&mut self, db: usize) {
        self.db = db;
        self.shared.db.set(db);
    }

    pub fn set_proto(&mut self, p: Protocol) {
        self.proto = p;
        self.shared.proto.set(p);
    }
}

#[derive(Default)]
pub struct ClientRegistry {
    clients: HashMap<u64, Rc<ClientShared>>,
    /// The largest client buffers the clients cron saw lately (INFO clients).
    recent_peaks: BufferPeaks,
}

/// Seconds of history behind INFO's client_recent_max_input_buffer and
/// client_recent_max_output_buffer (Redis's CLIENTS_PEAK_MEM_USAGE_SLOTS).
const PEAK_SLOTS: usize = 8;

/// The largest query buffer and output buffer of any client, one slot per second of
/// the last `PEAK_SLOTS` seconds (Redis's ClientsPeakMemInput / ClientsPeakMemOutput):
/// a client that needed a big buffer a moment ago still shows after it is gone.
#[derive(Default)]
pub struct BufferPeaks {
    input: [usize; PEAK_SLOTS],
    output: [usize; PEAK_SLOTS],
    /// The second the current slot belongs to.
    second: u64,
}

impl BufferPeaks {
    /// Folds one cron pass's largest buffers into the slot of `now_ms`'s second,
    /// clearing the slots of the seconds skipped since the last pass.
    pub fn record(&mut self, now_ms: u64, input: usize, output: usize) {
        let second = now_ms / 1000;
        if second != self.second {
            let skipped = second.saturating_sub(self.second).min(PEAK_SLOTS as u64);
            for s in 1..=skipped {
                let slot = ((self.second + s) % PEAK_SLOTS as u64) as usize;
                self.input[slot] = 0;
                self.output[slot] = 0;
            }
            self.second = second;
        }
        let slot = (second % PEAK_SLOTS as u64) as usize;
        self.input[slot] = self.input[slot].max(input);
        self.output[slot] = self.output[slot].max(output);
    }

    /// (largest input buffer, largest output buffer) over the window.
    pub fn max(&self) -> (usize, usize) {
        let max = |a: &[usize; PEAK_SLOTS]| a.iter().copied().max().unwrap_or(0);
        (max(&self.input), max(&self.output))
    }
}

impl ClientRegistry {
    pub fn add(&mut self, c: Rc<ClientShared>) {
        self.clients.insert(c.id, c);
    }

    pub fn remove(&mut self, id: u64) {
        self.clients.remove(&id);
        shrink_map(&mut self.clients);
    }

    pub fn len(&self) -> usize {
        self.clients.len()
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Rc<ClientShared>> {
        self.clients.values()
    }

    pub fn get(&self, id: u64) -> Option<&Rc<ClientShared>> {
        self.clients.get(&id)
    }

    /// INFO clients' client_recent_max_input_buffer / _output_buffer for this shard.
    pub fn recent_buffer_peaks(&self) -> (usize, usize) {
        self.recent_peaks.max()
    }
}

/// Gives a map's table back once it is mostly empty (after a burst of connections
/// closed), keeping room to double: a map never shrinks on its own, and 10,000
/// closed connections left ~300 KB of empty table per shard resident.
pub fn shrink_map<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 1024 && map.len() * 4 < map.capacity() {
        map.shrink_to(map.len() * 2);
    }
}

/// Redis frees the query buffer of a client idle for longer than this.
const QUERY_BUF_IDLE_MS: u64 = 2000;
/// Buffers at most this big are kept whatever the recent peak (PROTO_RESIZE_THRESHOLD).
const QUERY_BUF_RESIZE_THRESHOLD: usize = 32 * 1024;
/// Free space worth giving back.
const QUERY_BUF_MIN_WASTE: usize = 4 * 1024;

/// DEBUG PAUSE-CRON: every shard's cron skips its work while set.
pub static CRON_PAUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// One shard's clients cron (Redis's clientsCron), every 1/hz seconds: on shard 0,
/// runs the shutdown a signal asked for and the background saves' done handler and
/// save points (Redis's serverCron); closes clients idle
/// past `timeout` and asks connections holding more query buffer than their recent
/// input needs to give it back. A check is a few loads per client; with 10k clients on
/// a shard at hz 10 that is ~100k checks a second, well under a millisecond.
pub async fn run_cron(cell: Rc<crate::shard::ShardCell>) {
    loop {
        if CRON_PAUSED.load(std::sync::atomic::Ordering::Relaxed) {
            crate::runtime::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        }
        let (hz, timeout_s) = {
            let data = cell.data.borrow();
            (data.config.hz().clamp(1, 500), data.config.timeout())
        };
        crate::runtime::sleep(std::time::Duration::from_millis(1000 / hz as u64)).await;
        crate::server::shutdown::cron(&cell);
        crate::persistence::bgsave::cron(&cell);
        let now = crate::util::now_ms();
        let max_idle_ms = timeout_s.saturating_mul(1000);
        let (mut input_peak, mut output_peak) = (0, 0);
        for c in cell.clients.borrow().iter() {
            if max_idle_ms > 0 && c.idle_timed_out(now, max_idle_ms) {
                tracing::info!(client = c.id, "Closing idle client");
                c.kill();
                continue;
            }
            input_peak = input_peak.max(c.query_buf_cap.get());
            output_peak = output_peak.max(c.output_len.get());
            trim_query_buffer(c, now);
        }
        cell.clients
            .borrow_mut()
            .recent_peaks
            .record(now, input_peak, output_peak);
    }
}

impl ClientShared {
    /// Redis's islocalClient: the peer's address is exactly 127.0.0.1 or ::1. The
    /// rest of 127.0.0.0/8 is not local to Redis, and neither to Tessera: protected
    /// mode and the `local` settings of enable-debug-command / enable-protected-configs
    /// judge a client by this.
    pub fn is_local(&self) -> bool {
        is_local_peer(&self.addr)
    }

    /// `timeout`: replica links, MONITORs, subscribers and blocked clients never time
    /// out (Redis's clientsCronHandleTimeout); blocking commands time out on their own.
    fn idle_timed_out(&self, now_ms: u64, max_idle_ms: u64) -> bool {
        self.role.get() == ClientRole::Normal
            && !self.pubsub.active()
            && !self.is_blocked()
            && now_ms.saturating_sub(self.last_interaction_ms.get()) > max_idle_ms
    }
}

/// Redis's clientsCronResizeQueryBuffer: where the buffer wastes more than a few KiB,
/// an idle client gives all of it back and a busy one shrinks a big buffer down to the
/// peak its input reached since the last look. The connection applies the request
/// itself when it next waits for input with none pending (`connection::read_more`).
fn trim_query_buffer(c: &ClientShared, now_ms: u64) {
    let cap = c.query_buf_cap.get();
    let len = c.query_buf_len.get();
    let peak = c.query_buf_peak.get();
    if cap.saturating_sub(len) > QUERY_BUF_MIN_WASTE {
        let idle = now_ms.saturating_sub(c.last_interaction_ms.get()) > QUERY_BUF_IDLE_MS;
        let target = if idle {
            Some(len)
        } else if cap > QUERY_BUF_RESIZE_THRESHOLD && cap / 2 > peak {
            Some(len.max(peak))
        } else {
            None
        };
        if let Some(size) = target {
            c.query_buf_shrink.set(Some(size));
            if let Some(w) = &c.read_waker {
                w.wake();
            }
        }
    }
    c.query_buf_peak.set(len);
    if now_ms.saturating_sub(c.reply_buf_peak_since.get()) >= REPLY_PEAK_RESET_MS {
        c.reply_buf_peak.set(0);
        c.reply_buf_peak_since.set(now_ms);
    }
}

/// How long `rbp` remembers a write (Redis's reply-buffer-peak-reset-time default).
const REPLY_PEAK_RESET_MS: u64 = 5000;

/// See [`ClientShared::is_local`]. A Unix-socket client is local, as in Redis.
pub fn is_local_peer(addr: &PeerAddr) -> bool {
    let PeerAddr::Tcp(addr) = addr else {
        return true;
    };
    match addr.ip() {
        std::net::IpAddr::V4(ip) => ip == std::net::Ipv4Addr::LOCALHOST,
        std::net::IpAddr::V6(ip) => ip == std::net::Ipv6Addr::LOCALHOST,
    }
}

#[cfg(test)]
mod tests {
    use super::{BufferPeaks, ClientShared, OBUF_LIMITS, REPLY_BUF_BYTES};
    use std::sync::atomic::Ordering;

    /// Redis's checkClientOutputBufferLimits: the hard limit at once, the soft one
    /// only after it held for more than its seconds, its timer reset by a check under
    /// it; the first 16 KB (Redis's static reply buffer) never count.
    #[test]
    fn output_limits_hard_and_soft() {
        let normal = &OBUF_LIMITS[0];
        normal[0].store(1000, Ordering::Relaxed);
        normal[1].store(100, Ordering::Relaxed);
        normal[2].store(2, Ordering::Relaxed);
        let addr = "127.0.0.1:1".parse().expect("addr");
        let c = ClientShared::new(1, super::PeerAddr::Tcp(addr), super::PeerAddr::Tcp(addr), 0);
        let base = REPLY_BUF_BYTES;
        assert!(!c.output_limit_reached(base + 999, 10_000));
        assert!(c.output_limit_reached(base + 1000, 10_000));
        c.obuf_soft_since.set(0);
        // Over the soft limit: the timer starts, then needs more than 2 s.
        assert!(!c.output_limit_reached(base + 200, 10_000));
        assert!(!c.output_limit_reached(base + 200, 12_000));
        assert!(c.output_limit_reached(base + 200, 13_000));
        // Under it once: the timer starts over.
        assert!(!c.output_limit_reached(base + 50, 13_000));
        assert_eq!(c.obuf_soft_since.get(), 0);
        assert!(!c.output_limit_reached(base + 200, 14_000));
        assert!(!c.output_limit_reached(base + 200, 16_000));
        for slot in normal {
            slot.store(0, Ordering::Relaxed);
        }
    }

    #[test]
    fn peaks_last_eight_seconds() {
        let mut p = BufferPeaks::default();
        p.record(100_000, 50_000, 10);
        p.record(100_500, 1_000, 20);
        assert_eq!(p.max(), (50_000, 20));
        // Seven seconds on, the peak of second 100 still counts.
        p.record(107_000, 16_384, 0);
        assert_eq!(p.max(), (50_000, 20));
        // Eight seconds on, its slot is reused and the peak is gone.
        p.record(108_000, 16_384, 0);
        assert_eq!(p.max(), (16_384, 0));
        // A long gap clears every slot.
        p.record(200_000, 0, 0);
        assert_eq!(p.max(), (0, 0));
    }
}
