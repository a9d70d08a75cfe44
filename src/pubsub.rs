//! Pub/Sub and keyspace notifications across shards.
//!
//! Each shard keeps a registry (the *hub*, a thread-local: a shard is one thread) of the
//! channel, pattern and shard-channel subscriptions of ITS OWN connections only, so
//! subscribing never leaves the connection's core. A message published anywhere is
//! delivered by every shard that has subscribers, each to its local ones: the
//! publishing shard delivers inline, and the others get one mesh message each, sent
//! only to shards whose subscription count (process-wide atomics, one per shard) is
//! non-zero. With no subscriber anywhere, PUBLISH and keyspace notifications stop at
//! one relaxed atomic load.
//!
//! Delivery appends the encoded message to the client's *outbox* and wakes its
//! connection task, which waits on the socket and the outbox at once while the client
//! is subscribed (`read_or_push`). Subscribe / unsubscribe confirmations go through
//! the outbox too, which is how they bypass CLIENT REPLY OFF as Redis's pushes do.
//! An outbox that grows past `client-output-buffer-limit pubsub` disconnects its
//! client (slow subscribers must not exhaust memory).
//!
//! Keyspace notifications: `notify(class, event, key, db)` is callable from any code
//! running on the shard that owns the key (handlers, coordinators' closures, the
//! expiry paths). Its fast path, when `notify-keyspace-events` excludes the class
//! (the default excludes everything), is one relaxed load and a branch.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Poll, Waker};

use hashbrown::{HashMap, HashSet};

use crate::clients::ClientShared;
use crate::config::{notify as class, Config};
use crate::protocol::reply::ReplyWriter;
use crate::shard::ShardCell;
use crate::util::glob::glob_match;

/// The three subscription namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubKind {
    Channel,
    Pattern,
    Shard,
}

impl SubKind {
    fn subscribe_word(self) -> &'static [u8] {
        match self {
            SubKind::Channel => b"subscribe",
            SubKind::Pattern => b"psubscribe",
            SubKind::Shard => b"ssubscribe",
        }
    }

    fn unsubscribe_word(self) -> &'static [u8] {
        match self {
            SubKind::Channel => b"unsubscribe",
            SubKind::Pattern => b"punsubscribe",
            SubKind::Shard => b"sunsubscribe",
        }
    }

    /// Channel and pattern subscriptions receive PUBLISH; shard channels SPUBLISH.
    fn is_shard(self) -> bool {
        self == SubKind::Shard
    }
}

/* ------------------------------------------------------------------------ */
/* Process-wide counters and cached configuration.                          */
/* ------------------------------------------------------------------------ */

/// Subscriptions per shard: index 0 channels + patterns (what PUBLISH and keyspace
/// notifications reach), index 1 shard channels (SPUBLISH).
struct Counts {
    per_shard: [Box<[AtomicUsize]>; 2],
    total: [AtomicUsize; 2],
}

static COUNTS: OnceLock<Counts> = OnceLock::new();

fn counts() -> Option<&'static Counts> {
    COUNTS.get()
}

fn class_index(shard: bool) -> usize {
    usize::from(shard)
}

/// Copies the pub/sub related configuration into the process-wide caches, and has
/// the other services do the same (client output limits, the replication gate, RDB
/// compression).
/// Called at startup and after every CONFIG SET (the configuration is the same on
/// all shards).
pub fn sync_config(config: &Config) {
    crate::storage::events::set_notify_mask(config.notify_keyspace_events());
    crate::storage::events::set_sink(notify_enabled);
    crate::clients::sync_output_limits(config);
    crate::replication::sync_config(config);
    crate::persistence::aof::sync_config(config);
    crate::storage::rdb::set_compression(config.rdbcompression());
    crate::acl::sync_config(config);
}

/* ------------------------------------------------------------------------ */
/* Per-client state.                                                        */
/* ------------------------------------------------------------------------ */

/// A client's subscriptions and the pushes waiting for its connection task.
#[derive(Default)]
pub struct ClientPubSub {
    channels: RefCell<HashSet<Vec<u8>>>,
    /// In subscription order, as Redis keeps them.
    patterns: RefCell<Vec<Vec<u8>>>,
    shard_channels: RefCell<HashSet<Vec<u8>>>,
    /// Encoded pushes not yet handed to the connection's output.
    outbox: RefCell<Vec<u8>>,
    /// The connection task, while it waits for input or pushes.
    waker: RefCell<Option<Waker>>,
    /// Subscriptions of all three kinds: checked on every command, so one load.
    total: Cell<usize>,
    /// The outbox is not empty (checked after every command, so a plain flag).
    pending: Cell<bool>,
    /// Bytes at the front of the outbox that go before the reply the connection is
    /// waiting for (invalidations of evicted keys), not after it.
    early: Cell<usize>,
}

impl ClientPubSub {
    /// Whether any subscription fails `allowed(name, is_pattern)`: the ACL's test
    /// when a user loses channel permissions.
    pub fn any_subscription(&self, mut denied: impl FnMut(&[u8], bool) -> bool) -> bool {
        self.patterns.borrow().iter().any(|p| denied(p, true))
            || self.channels.borrow().iter().any(|c| denied(c, false))
            || self
                .shard_channels
                .borrow()
                .iter()
                .any(|c| denied(c, false))
    }

    pub fn channel_count(&self) -> usize {
        self.channels.borrow().len()
    }

    pub fn pattern_count(&self) -> usize {
        self.patterns.borrow().len()
    }

    pub fn shard_channel_count(&self) -> usize {
        self.shard_channels.borrow().len()
    }

    /// Subscribed to anything (Redis's CLIENT_PUBSUB flag).
    #[inline]
    pub fn active(&self) -> bool {
        self.total.get() > 0
    }

    /// Pushes are waiting to be written.
    #[inline]
    pub fn has_pushes(&self) -> bool {
        self.pending.get()
    }

    /// What was pushed so far goes before the reply being waited for.
    pub fn mark_early(&self) {
        self.early.set(self.outbox.borrow().len());
    }

    /// Moves the pushes marked early to the end of `out`.
    pub fn take_early_pushes(&self, out: &mut Vec<u8>) {
        let n = self.early.replace(0);
        if n == 0 {
            return;
        }
        let mut ob = self.outbox.borrow_mut();
        let n = n.min(ob.len());
        out.extend_from_slice(&ob[..n]);
        ob.drain(..n);
        self.pending.set(!ob.is_empty());
    }

    /// Moves the waiting pushes to the end of `out`.
    pub fn take_pushes(&self, out: &mut Vec<u8>) {
        let mut ob = self.outbox.borrow_mut();
        out.extend_from_slice(&ob);
        ob.clear();
        self.early.set(0);
        if ob.capacity() > 1024 * 1024 {
            *ob = Vec::new();
        }
        self.pending.set(false);
    }

    /// Bytes of pushes waiting (part of the client's pending output).
    #[inline]
    pub fn outbox_len(&self) -> usize {
        if self.pending.get() {
            self.outbox.borrow().len()
        } else {
            0
        }
    }

    /// How many subscriptions the confirmation of `kind` reports: channels and
    /// patterns together, shard channels on their own (Redis 7.0).
    fn count_for(&self, kind: SubKind) -> usize {
        match kind {
            SubKind::Shard => self.shard_channel_count(),
            _ => self.channel_count() + self.pattern_count(),
        }
    }

    fn add(&self, kind: SubKind, name: &[u8]) -> bool {
        let added = self.insert(kind, name);
        if added {
            self.total.set(self.total.get() + 1);
        }
        added
    }

    fn remove(&self, kind: SubKind, name: &[u8]) -> bool {
        let removed = self.delete(kind, name);
        if removed {
            self.total.set(self.total.get() - 1);
        }
        removed
    }

    fn insert(&self, kind: SubKind, name: &[u8]) -> bool {
        match kind {
            SubKind::Channel => self.channels.borrow_mut().insert(name.to_vec()),
            SubKind::Shard => self.shard_channels.borrow_mut().insert(name.to_vec()),
            SubKind::Pattern => {
                let mut p = self.patterns.borrow_mut();
                if p.iter().any(|x| x == name) {
                    false
                } else {
                    p.push(name.to_vec());
                    true
                }
            }
        }
    }

    fn delete(&self, kind: SubKind, name: &[u8]) -> bool {
        match kind {
            SubKind::Channel => self.channels.borrow_mut().remove(name),
            SubKind::Shard => self.shard_channels.borrow_mut().remove(name),
            SubKind::Pattern => {
                let mut p = self.patterns.borrow_mut();
                match p.iter().position(|x| x == name) {
                    Some(i) => {
                        p.remove(i);
                        true
                    }
                    None => false,
                }
            }
        }
    }

    fn names(&self, kind: SubKind) -> Vec<Vec<u8>> {
        match kind {
            SubKind::Channel => self.channels.borrow().iter().cloned().collect(),
            SubKind::Shard => self.shard_channels.borrow().iter().cloned().collect(),
            SubKind::Pattern => self.patterns.borrow().clone(),
        }
    }
}

/// Appends one push (`parts` as bulk strings, `tail` an optional trailing integer or
/// null) to a client's outbox and wakes its connection. Enforces the pubsub output
/// buffer limits.
fn push_to(c: &ClientShared, parts: &[Option<&[u8]>], tail: Option<i64>) {
    push_with(c, |w| {
        w.push_len(parts.len() + usize::from(tail.is_some()));
        for p in parts {
            match p {
                Some(b) => w.bulk(b),
                None => w.null(),
            }
        }
        if let Some(n) = tail {
            w.integer(n);
        }
    });
}

/// Appends one push written by `write` (in the client's protocol) to its outbox and
/// wakes its connection (client tracking's invalidations use it too).
pub fn push_with(c: &ClientShared, write: impl FnOnce(&mut ReplyWriter)) {
    let ps = &c.pubsub;
    let len = {
        let mut ob = ps.outbox.borrow_mut();
        let mut w = ReplyWriter::new(&mut ob, c.proto.get());
        write(&mut w);
        ob.len() as u64
    };
    ps.pending.set(true);
    // Redis checks the limit as each reply is added: the pushes, plus what the
    // connection still has to write (a subscriber that does not read stalls it),
    // against the client's class (pubsub for a subscriber, normal for a RESP3 client
    // that gets invalidations).
    let pending = len as usize + c.output_len.get();
    if pending >= crate::clients::output_watermark(c.output_class()) {
        let now = crate::util::now_ms();
        if c.output_limit_reached(pending, now) {
            c.close_for_output_limit(now);
            ps.outbox.borrow_mut().clear();
            ps.early.set(0);
            ps.pending.set(false);
        }
    } else {
        c.obuf_soft_since.set(0);
    }
    if let Some(w) = ps.waker.borrow_mut().take() {
        w.wake();
    }
}

/// Waits for `read` to complete or for pushes to arrive, whichever is first: `None`
/// means pushes are waiting (the read is dropped; with a readiness-based reactor that
/// loses nothing).
pub async fn read_or_push<F: Future>(ps: &ClientPubSub, read: F) -> Option<F::Output> {
    let mut read = std::pin::pin!(read);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = read.as_mut().poll(cx) {
            return Poll::Ready(Some(r));
        }
        if ps.has_pushes() {
            return Poll::Ready(None);
        }
        *ps.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    })
    .await
}

/* ------------------------------------------------------------------------ */
/* The shard's hub.                                                         */
/* ------------------------------------------------------------------------ */

type Subscribers = Vec<Rc<ClientShared>>;

#[derive(Default)]
struct Hub {
    shard: usize,
    cell: Option<Weak<ShardCell>>,
    channels: HashMap<Vec<u8>, Subscribers>,
    /// In first-subscription order.
    patterns: Vec<(Vec<u8>, Subscribers)>,
    shard_channels: HashMap<Vec<u8>, Subscribers>,
}

impl Hub {
    /// The subscribers by name: shard channels (SSUBSCRIBE) or plain channels.
    fn named(&self, shard: bool) -> &HashMap<Vec<u8>, Subscribers> {
        if shard {
            &self.shard_channels
        } else {
            &self.channels
        }
    }
}

thread_local! {
    static HUB: RefCell<Hub> = RefCell::new(Hub::default());
}

/// This thread's shard, for code that has only its data at hand (client tracking).
pub fn shard_cell() -> Option<Rc<ShardCell>> {
    HUB.with(|h| h.borrow().cell.as_ref().and_then(Weak::upgrade))
}

/// Binds this thread's hub to its shard. Called once when the shard starts.
pub fn install(cell: &Rc<ShardCell>) {
    let n = cell.shard_count();
    COUNTS.get_or_init(|| Counts {
        per_shard: [
            (0..n).map(|_| AtomicUsize::new(0)).collect(),
            (0..n).map(|_| AtomicUsize::new(0)).collect(),
        ],
        total: [AtomicUsize::new(0), AtomicUsize::new(0)],
    });
    HUB.with(|h| {
        let mut h = h.borrow_mut();
        h.shard = cell.id;
        h.cell = Some(Rc::downgrade(cell));
    });
    if cell.id == 0 {
        sync_config(&cell.data.borrow().config);
    }
}

fn adjust_count(shard: usize, is_shard: bool, added: bool) {
    let Some(c) = counts() else { return };
    let i = class_index(is_shard);
    // SeqCst so a publisher that saw this client's confirmation also sees the count.
    if added {
        c.total[i].fetch_add(1, Ordering::SeqCst);
        if let Some(s) = c.per_shard[i].get(shard) {
            s.fetch_add(1, Ordering::SeqCst);
        }
    } else {
        c.total[i].fetch_sub(1, Ordering::SeqCst);
        if let Some(s) = c.per_shard[i].get(shard) {
            s.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Hub {
    fn map(&mut self, kind: SubKind) -> Option<&mut HashMap<Vec<u8>, Subscribers>> {
        match kind {
            SubKind::Channel => Some(&mut self.channels),
            SubKind::Shard => Some(&mut self.shard_channels),
            SubKind::Pattern => None,
        }
    }

    fn add(&mut self, kind: SubKind, name: &[u8], c: &Rc<ClientShared>) {
        match self.map(kind) {
            Some(m) => m.entry(name.to_vec()).or_default().push(c.clone()),
            None => match self.patterns.iter_mut().find(|(p, _)| p == name) {
                Some((_, subs)) => subs.push(c.clone()),
                None => self.patterns.push((name.to_vec(), vec![c.clone()])),
            },
        }
        adjust_count(self.shard, kind.is_shard(), true);
    }

    fn remove(&mut self, kind: SubKind, name: &[u8], id: u64) {
        let drop_client = |subs: &mut Subscribers| {
            if let Some(i) = subs.iter().position(|s| s.id == id) {
                subs.swap_remove(i);
            }
            subs.is_empty()
        };
        match self.map(kind) {
            Some(m) => {
                if m.get_mut(name).is_some_and(drop_client) {
                    m.remove(name);
                }
            }
            None => {
                if let Some(i) = self.patterns.iter().position(|(p, _)| p == name) {
                    if drop_client(&mut self.patterns[i].1) {
                        self.patterns.remove(i);
                    }
                }
            }
        }
        adjust_count(self.shard, kind.is_shard(), false);
    }

    /// Delivers to this shard's subscribers; returns how many received it.
    fn deliver(&self, shard: bool, channel: &[u8], msg: &[u8]) -> usize {
        if shard {
            let subs = self.shard_channels.get(channel).map_or(&[][..], |v| v);
            for c in subs {
                push_to(c, &[Some(b"smessage"), Some(channel), Some(msg)], None);
            }
            return subs.len();
        }
        let mut n = 0;
        if let Some(subs) = self.channels.get(channel) {
            for c in subs {
                push_to(c, &[Some(b"message"), Some(channel), Some(msg)], None);
            }
            n += subs.len();
        }
        for (pat, subs) in &self.patterns {
            if glob_match(pat, channel, false) {
                for c in subs {
                    push_to(
                        c,
                        &[Some(b"pmessage"), Some(pat), Some(channel), Some(msg)],
                        None,
                    );
                }
                n += subs.len();
            }
        }
        n
    }
}

/* ------------------------------------------------------------------------ */
/* Subscribing (on the client's home shard).                                */
/* ------------------------------------------------------------------------ */

/// SUBSCRIBE / PSUBSCRIBE / SSUBSCRIBE of one name, with its confirmation.
pub fn subscribe(c: &Rc<ClientShared>, kind: SubKind, name: &[u8]) {
    if c.pubsub.add(kind, name) {
        HUB.with(|h| h.borrow_mut().add(kind, name, c));
    }
    let n = c.pubsub.count_for(kind) as i64;
    push_to(c, &[Some(kind.subscribe_word()), Some(name)], Some(n));
}

/// (P|S)UNSUBSCRIBE of the given names, or of all when `names` is empty (one
/// confirmation per name, or a single one with a null name when there were none).
pub fn unsubscribe(c: &Rc<ClientShared>, kind: SubKind, names: &[&[u8]]) {
    let owned;
    let names: Vec<&[u8]> = if names.is_empty() {
        owned = c.pubsub.names(kind);
        if owned.is_empty() {
            let n = c.pubsub.count_for(kind) as i64;
            push_to(c, &[Some(kind.unsubscribe_word()), None], Some(n));
            return;
        }
        owned.iter().map(|v| v.as_slice()).collect()
    } else {
        names.to_vec()
    };
    for name in names {
        if c.pubsub.remove(kind, name) {
            HUB.with(|h| h.borrow_mut().remove(kind, name, c.id));
        }
        let n = c.pubsub.count_for(kind) as i64;
        push_to(c, &[Some(kind.unsubscribe_word()), Some(name)], Some(n));
    }
}

/// Drops every subscription without confirmations (RESET, disconnect).
pub fn unsubscribe_all_silently(c: &ClientShared) {
    if !c.pubsub.active() {
        return;
    }
    for kind in [SubKind::Channel, SubKind::Pattern, SubKind::Shard] {
        for name in c.pubsub.names(kind) {
            c.pubsub.remove(kind, &name);
            HUB.with(|h| h.borrow_mut().remove(kind, &name, c.id));
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Publishing.                                                              */
/* ------------------------------------------------------------------------ */

/// Shards other than `home` that have subscribers of the class.
fn remote_shards(home: usize, shard: bool) -> impl Iterator<Item = usize> {
    let per = counts().map_or(&[][..], |c| &c.per_shard[class_index(shard)][..]);
    per.iter()
        .enumerate()
        .filter(move |(s, n)| *s != home && n.load(Ordering::SeqCst) > 0)
        .map(|(s, _)| s)
}

fn anyone_listening(shard: bool) -> bool {
    counts().is_some_and(|c| c.total[class_index(shard)].load(Ordering::SeqCst) > 0)
}

fn deliver_here(shard: bool, channel: &[u8], msg: &[u8]) -> usize {
    HUB.with(|h| h.borrow().deliver(shard, channel, msg))
}

/// PUBLISH (`shard` false) or SPUBLISH (`shard` true): delivers everywhere and
/// returns the number of receivers.
pub async fn publish(cell: &Rc<ShardCell>, shard: bool, channel: &[u8], msg: &[u8]) -> usize {
    if !anyone_listening(shard) {
        return 0;
    }
    let payload = Arc::new((channel.to_vec(), msg.to_vec()));
    let mut waiting = Vec::new();
    for s in remote_shards(cell.id, shard) {
        let (tx, rx) = futures_channel::oneshot::channel();
        let p = payload.clone();
        let job: crate::shard::fabric::Job = Box::new(move |_| {
            let _ = tx.send(deliver_here(shard, &p.0, &p.1));
        });
        if cell.mesh.send(s, job).is_ok() {
            waiting.push(rx);
        }
    }
    let mut n = deliver_here(shard, channel, msg);
    for rx in waiting {
        n += rx.await.unwrap_or(0);
    }
    n
}

/// Publishes from synchronous code (keyspace notifications), without waiting for
/// the other shards.
fn publish_now(channel: Vec<u8>, msg: Vec<u8>) {
    let (home, cell) = HUB.with(|h| {
        let h = h.borrow();
        (h.shard, h.cell.as_ref().and_then(Weak::upgrade))
    });
    if let Some(cell) = cell {
        let mut payload: Option<Arc<(Vec<u8>, Vec<u8>)>> = None;
        for s in remote_shards(home, false) {
            let p = payload
                .get_or_insert_with(|| Arc::new((channel.clone(), msg.clone())))
                .clone();
            let _ = cell.mesh.send(
                s,
                Box::new(move |_| {
                    deliver_here(false, &p.0, &p.1);
                }),
            );
        }
    }
    deliver_here(false, &channel, &msg);
}

/* ------------------------------------------------------------------------ */
/* PUBSUB introspection (run on every shard, merged by the caller).         */
/* ------------------------------------------------------------------------ */

/// This shard's channel (or shard-channel) names matching `pattern`.
pub fn local_channels(shard: bool, pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
    HUB.with(|h| {
        let h = h.borrow();
        h.named(shard)
            .keys()
            .filter(|k| pattern.is_none_or(|p| glob_match(p, k, false)))
            .cloned()
            .collect()
    })
}

/// This shard's subscriber counts of each name.
pub fn local_numsub(shard: bool, names: &[Vec<u8>]) -> Vec<usize> {
    HUB.with(|h| {
        let h = h.borrow();
        let m = h.named(shard);
        names
            .iter()
            .map(|n| m.get(n).map_or(0, |v| v.len()))
            .collect()
    })
}

/// This shard's subscribed patterns.
pub fn local_patterns() -> Vec<Vec<u8>> {
    HUB.with(|h| h.borrow().patterns.iter().map(|(p, _)| p.clone()).collect())
}

/* ------------------------------------------------------------------------ */
/* Keyspace notifications.                                                  */
/* ------------------------------------------------------------------------ */

/// Emits a keyspace event of `class_bit` (a `config::notify` bit) for `key` in `db`,
/// as Redis's notifyKeyspaceEvent: `__keyspace@<db>__:<key>` gets `event`,
/// `__keyevent@<db>__:<event>` gets `key`. Call it on the shard that owns the key,
/// after the change. A no-op branch unless the class is enabled.
#[inline]
pub fn notify(class_bit: u32, event: &str, key: &[u8], db: usize) {
    crate::storage::events::notify(class_bit, event, key, db);
}

/// Publishes a keyspace event of an enabled class (storage's event sink).
fn notify_enabled(flags: u32, event: &str, key: &[u8], db: usize) {
    if !anyone_listening(false) {
        return;
    }
    if flags & class::KEYSPACE != 0 {
        let mut ch = format!("__keyspace@{db}__:").into_bytes();
        ch.extend_from_slice(key);
        publish_now(ch, event.as_bytes().to_vec());
    }
    if flags & class::KEYEVENT != 0 {
        let ch = format!("__keyevent@{db}__:{event}").into_bytes();
        publish_now(ch, key.to_vec());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_subscriptions_count_per_namespace() {
        let ps = ClientPubSub::default();
        assert!(ps.add(SubKind::Channel, b"a"));
        assert!(!ps.add(SubKind::Channel, b"a"));
        assert!(ps.add(SubKind::Pattern, b"a*"));
        assert!(ps.add(SubKind::Shard, b"s"));
        assert_eq!(ps.count_for(SubKind::Channel), 2);
        assert_eq!(ps.count_for(SubKind::Pattern), 2);
        assert_eq!(ps.count_for(SubKind::Shard), 1);
        assert!(ps.active());
        assert!(ps.remove(SubKind::Pattern, b"a*"));
        assert!(!ps.remove(SubKind::Pattern, b"a*"));
        assert_eq!(ps.names(SubKind::Channel), vec![b"a".to_vec()]);
        assert!(ps.remove(SubKind::Channel, b"a"));
        assert!(ps.active());
        assert!(ps.remove(SubKind::Shard, b"s"));
        assert!(!ps.active());
    }

    #[test]
    fn notify_is_silent_when_disabled() {
        notify(class::GENERIC, "del", b"k", 0);
    }
}
