//! Connected clients: each connection's session state, and the per-shard registry that
//! CLIENT LIST / KILL / INFO read (fanned out over all shards).

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;

use hashbrown::HashMap;

use crate::protocol::reply::Protocol;

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

/// The part of a client's state that other tasks on its shard read or change
/// (CLIENT LIST, CLIENT KILL): cells, because the shard is single-threaded.
pub struct ClientShared {
    pub id: u64,
    pub addr: SocketAddr,
    pub laddr: SocketAddr,
    pub fd: i32,
    pub created_ms: u64,
    pub name: RefCell<Option<Vec<u8>>>,
    pub db: Cell<usize>,
    pub last_cmd: Cell<&'static str>,
    pub last_interaction_ms: Cell<u64>,
    pub proto: Cell<Protocol>,
    pub query_buf_len: Cell<usize>,
    pub output_len: Cell<usize>,
    pub killed: Cell<bool>,
    pub no_evict: Cell<bool>,
    pub multi_count: Cell<i64>,
    /// While the client waits in a blocking command: its wake-up state, which
    /// CLIENT UNBLOCK uses.
    pub blocked: RefCell<Option<std::sync::Arc<crate::shard::blocking::BlockState>>>,
    /// While the client's next command waits for a CLIENT PAUSE to end.
    pub paused: Cell<bool>,
    /// Pub/Sub subscriptions and pushes waiting to be written.
    pub pubsub: crate::pubsub::ClientPubSub,
    /// CLIENT TRACKING mode.
    pub tracking: crate::tracking::ClientTracking,
}

impl ClientShared {
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
        if self.pubsub.active() {
            flags.push('P');
        }
        if self.is_blocked() {
            flags.push('b');
        }
        self.tracking.list_flags(&mut flags);
        if self.no_evict.get() {
            flags.push('e');
        }
        if flags.is_empty() {
            flags.push('N');
        }
        format!(
            "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db={} sub={} psub={} ssub={} multi={} qbuf={} qbuf-free=0 argv-mem=0 multi-mem=0 rbs=16384 rbp=0 obl=0 oll=0 omem={} tot-mem=0 events=r cmd={} user=default redir={} resp={}",
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
            self.output_len.get(),
            self.last_cmd.get(),
            self.tracking.redir_field(),
            match self.proto.get() {
                Protocol::Resp2 => 2,
                Protocol::Resp3 => 3,
            }
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
    pub reply_mode: ReplyMode,
    /// Close the connection once pending replies are written (QUIT, protocol errors).
    pub close_after_reply: bool,
    /// MULTI state: the queued commands, or None outside a transaction.
    pub multi: Option<MultiState>,
    /// While EXEC runs: the lock owner of the transaction.
    pub exec_owner: Option<crate::shard::locks::TxnId>,
    /// Keys this client WATCHes: (db, key, flag set by any write to it, expired then).
    pub watched: Vec<WatchedKey>,
    /// The fake client a Lua script's commands run as (Redis's CLIENT_SCRIPT).
    pub in_script: bool,
    /// The reply just produced is an error already counted in the error stats (a
    /// script's error that came from a `redis.call`): the command still counts as
    /// failed, the error not a second time.
    pub error_counted: bool,
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
}

impl ClientRegistry {
    pub fn add(&mut self, c: Rc<ClientShared>) {
        self.clients.insert(c.id, c);
    }

    pub fn remove(&mut self, id: u64) {
        self.clients.remove(&id);
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
}
