//! Server-assisted client-side caching (CLIENT TRACKING), as Redis 7.0.
//!
//! Keys are tracked on the shards that own them: each shard's `TrackingTable` (in its
//! `ShardData`) maps a key to the clients that read it, and every write hook of the
//! shard (`ShardData::signal_modified`, beside WATCH) invalidates it. A client lives on
//! its home shard, so an invalidation is a `Note` addressed to (home shard, client id):
//! delivered in place when the key's shard is the client's, else sent over the mesh,
//! like pub/sub messages. The note is written to the client's push outbox (or to its
//! redirection client's) by `pubsub::push_with`.
//!
//! A client whose redirection client lives on another shard is the exception: the
//! key's shard applies its mode itself (from `REMOTE_REDIRECTS`) and sends the note
//! straight to the redirection client's shard, so every invalidation bound for one
//! redirection client takes the same path and arrives in write order (through each
//! tracking client's home, two clients on different shards could overtake each other).
//!
//! BCAST clients register their prefixes on every shard; keys written under a prefix
//! are collected and sent when the command ends (or when the transaction / script
//! releases the shard), one message per prefix and client, as Redis's beforeSleep does.
//!
//! Fast path: with nobody tracking, a write checks one bool (`TrackingTable::active`)
//! and a read one `Cell<bool>` on its connection.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use hashbrown::HashMap;

use crate::clients::{ClientShared, Session};
use crate::protocol::reply::{Protocol, ReplyWriter};
use crate::shard::ShardCell;

/* ------------------------------------------------------------------------ */
/* Process-wide counters (INFO).                                            */
/* ------------------------------------------------------------------------ */

/// Clients with tracking on: storage's listener count (it logs lazily expired keys
/// for invalidation while there are any).
static CLIENTS: &crate::storage::events::Listeners = &crate::storage::events::TRACKING_CLIENTS;
static TOTAL_KEYS: AtomicU64 = AtomicU64::new(0);
static TOTAL_ITEMS: AtomicU64 = AtomicU64::new(0);
/// Distinct BCAST prefixes (every shard holds them all; shard 0 counts).
static PREFIXES: AtomicUsize = AtomicUsize::new(0);

/// Some client has tracking on (lazy expiry then records the keys it removes).
#[inline]
pub fn any_client() -> bool {
    CLIENTS.any()
}

/// (tracking_clients, tracking_total_keys, tracking_total_items, tracking_total_prefixes)
pub fn info_counts() -> (usize, u64, u64, usize) {
    (
        CLIENTS.count(),
        TOTAL_KEYS.load(Ordering::Relaxed),
        TOTAL_ITEMS.load(Ordering::Relaxed),
        PREFIXES.load(Ordering::Relaxed),
    )
}

/// The mode of a tracking client whose redirection client is on another shard.
#[derive(Clone, Copy)]
struct RemoteRedirect {
    home: u16,
    /// The redirection client and its shard.
    redirect: u64,
    shard: u16,
    bcast: bool,
    noloop: bool,
}

/// Tracking clients (by id) that redirect to a client of another shard: read by the
/// shard of a changed key, only when a tracked key changes (a cold path), written by
/// the client's home on CLIENT TRACKING, RESET and disconnection.
static REMOTE_REDIRECTS: Mutex<Option<HashMap<u64, RemoteRedirect>>> = Mutex::new(None);
/// REMOTE_REDIRECTS is not empty: without such clients delivery takes no lock.
static ANY_REMOTE_REDIRECT: AtomicBool = AtomicBool::new(false);

fn set_remote_redirect(id: u64, mode: Option<RemoteRedirect>) {
    let mut map = REMOTE_REDIRECTS.lock().unwrap_or_else(|e| e.into_inner());
    let map = map.get_or_insert_with(HashMap::new);
    match mode {
        Some(m) => {
            map.insert(id, m);
        }
        None => {
            map.remove(&id);
        }
    }
    ANY_REMOTE_REDIRECT.store(!map.is_empty(), Ordering::SeqCst);
}

fn remote_redirect(id: u64) -> Option<RemoteRedirect> {
    if !ANY_REMOTE_REDIRECT.load(Ordering::Relaxed) {
        return None;
    }
    let map = REMOTE_REDIRECTS.lock().unwrap_or_else(|e| e.into_inner());
    map.as_ref()?.get(&id).copied()
}

/* ------------------------------------------------------------------------ */
/* Per-client state.                                                        */
/* ------------------------------------------------------------------------ */

/// A client's tracking mode. Cells: read by other tasks of its shard (delivery).
#[derive(Default)]
pub struct ClientTracking {
    /// Tracking is on (Redis's CLIENT_TRACKING).
    on: Cell<bool>,
    /// On and not BCAST: read commands remember their keys (the read path's check).
    reads: Cell<bool>,
    /// CLIENT CACHING YES (optin) / NO (optout) given for the next command.
    caching: Cell<bool>,
    mode: RefCell<Mode>,
    /// While the client's EXEC runs, its invalidations wait here, to follow the
    /// EXEC reply rather than interleave with it (Redis's tracking_pending_keys).
    deferring: Cell<bool>,
    deferred: RefCell<Vec<u8>>,
}

#[derive(Default, Clone)]
struct Mode {
    bcast: bool,
    optin: bool,
    optout: bool,
    noloop: bool,
    broken_redirect: bool,
    /// Client id invalidations go to (0: the client itself), and its home shard.
    redirect: u64,
    redirect_shard: usize,
    prefixes: Vec<Vec<u8>>,
}

impl ClientTracking {
    #[inline]
    pub fn on(&self) -> bool {
        self.on.get()
    }

    /// Whether a read-only command run now has its keys remembered.
    #[inline]
    pub fn tracks_reads(&self) -> bool {
        self.reads.get() && self.caching_allows()
    }

    #[cold]
    fn caching_allows(&self) -> bool {
        let m = self.mode.borrow();
        let given = self.caching.get();
        !((m.optin && !given) || (m.optout && given))
    }

    /// CLIENT CACHING was given and not yet consumed.
    #[inline]
    pub fn caching_given(&self) -> bool {
        self.caching.get()
    }

    /// Called after each command (not CLIENT ..., not inside MULTI): CLIENT CACHING
    /// applies to the next command only.
    #[inline]
    pub fn end_command(&self) {
        if self.caching.get() {
            self.caching.set(false);
        }
    }

    /// EXEC starts (`true`) or ends: invalidations for this client are held back
    /// until its reply is written.
    pub fn defer(&self, c: &ClientShared, on: bool) {
        self.deferring.set(on);
        if !on && !self.deferred.borrow().is_empty() {
            let held = std::mem::take(&mut *self.deferred.borrow_mut());
            crate::pubsub::push_with(c, |w| w.out.extend_from_slice(&held));
        }
    }

    /// The CLIENT LIST flags: t, R, B in Redis's order.
    pub fn list_flags(&self, flags: &mut String) {
        if !self.on.get() {
            return;
        }
        let m = self.mode.borrow();
        flags.push('t');
        if m.broken_redirect {
            flags.push('R');
        }
        if m.bcast {
            flags.push('B');
        }
    }

    /// CLIENT LIST `redir=`: -1 when off.
    pub fn redir_field(&self) -> i64 {
        if self.on.get() {
            self.mode.borrow().redirect as i64
        } else {
            -1
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Per-shard table.                                                         */
/* ------------------------------------------------------------------------ */

/// A client that read a key: its id and home shard.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Reader {
    id: u64,
    home: u16,
}

struct Prefix {
    prefix: Vec<u8>,
    clients: Vec<Reader>,
    /// Keys modified since the last broadcast, with their writer (0: the server).
    pending: Vec<(Vec<u8>, u64)>,
}

/// The keys of this shard that clients read, and the BCAST prefixes.
#[derive(Default)]
pub struct TrackingTable {
    keys: HashMap<Vec<u8>, Vec<Reader>>,
    prefixes: Vec<Prefix>,
    /// Some prefix has pending keys.
    pending: bool,
    /// Anything to do on a write: keys tracked or prefixes registered.
    active: bool,
    /// The client whose command runs now (NOLOOP), 0 outside commands.
    pub writer: u64,
    /// `tracking-table-max-keys` (0: no limit).
    max_keys: u64,
}

impl TrackingTable {
    #[inline]
    pub fn active(&self) -> bool {
        self.active
    }

    fn refresh_active(&mut self) {
        self.active = !self.keys.is_empty() || !self.prefixes.is_empty();
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// A read of `key` by client `id` (home shard `home`).
    pub fn remember(&mut self, key: &[u8], id: u64, home: usize) {
        let r = Reader {
            id,
            home: home as u16,
        };
        match self.keys.get_mut(key) {
            Some(v) => {
                if !v.contains(&r) {
                    v.push(r);
                    TOTAL_ITEMS.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => {
                self.keys.insert(key.to_vec(), vec![r]);
                TOTAL_KEYS.fetch_add(1, Ordering::Relaxed);
                TOTAL_ITEMS.fetch_add(1, Ordering::Relaxed);
                self.active = true;
                self.enforce_limit();
            }
        }
    }

    /// `key` was modified: its readers get an invalidation and forget it; BCAST
    /// prefixes matching it collect it.
    pub fn invalidate(&mut self, key: &[u8]) {
        self.invalidate_by(key, self.writer);
    }

    /// `invalidate` on behalf of `writer` (0: the server's eviction, `EXPIRY`: its
    /// expiry).
    #[cold]
    pub fn invalidate_by(&mut self, key: &[u8], writer: u64) {
        for p in &mut self.prefixes {
            if key.starts_with(&p.prefix) {
                p.pending.push((key.to_vec(), writer));
                self.pending = true;
            }
        }
        if let Some(readers) = self.keys.remove(key) {
            TOTAL_KEYS.fetch_sub(1, Ordering::Relaxed);
            TOTAL_ITEMS.fetch_sub(readers.len() as u64, Ordering::Relaxed);
            self.forget(key, readers, writer);
        }
    }

    /// Sends the invalidation of a key already removed from the table.
    fn forget(&mut self, key: &[u8], readers: Vec<Reader>, writer: u64) {
        for r in readers {
            route(
                r,
                Note {
                    id: r.id,
                    kind: Kind::Key { writer },
                    keys: Some(vec![(key.to_vec(), writer)]),
                },
            );
        }
        self.refresh_active();
    }

    /// Whether BCAST keys wait to be sent.
    #[inline]
    pub fn has_pending(&self) -> bool {
        self.pending
    }

    /// Sends the keys collected per prefix to that prefix's clients.
    #[cold]
    pub fn flush_bcast(&mut self) {
        if !self.pending {
            return;
        }
        self.pending = false;
        for p in &mut self.prefixes {
            if p.pending.is_empty() {
                continue;
            }
            let mut keys = std::mem::take(&mut p.pending);
            // One entry per key (the last writer), as Redis's per-prefix rax.
            keys.reverse();
            let mut seen = hashbrown::HashSet::new();
            keys.retain(|(k, _)| seen.insert(k.clone()));
            keys.reverse();
            for &r in &p.clients {
                route(
                    r,
                    Note {
                        id: r.id,
                        kind: Kind::Bcast,
                        keys: Some(keys.clone()),
                    },
                );
            }
        }
    }

    /// FLUSHALL / FLUSHDB: every tracked key is forgotten (the clients get one null
    /// invalidation each, sent by `notify_flush`).
    pub fn clear(&mut self) {
        let items: u64 = self.keys.values().map(|v| v.len() as u64).sum();
        TOTAL_KEYS.fetch_sub(self.keys.len() as u64, Ordering::Relaxed);
        TOTAL_ITEMS.fetch_sub(items, Ordering::Relaxed);
        self.keys = HashMap::new();
        self.refresh_active();
    }

    fn add_prefix(&mut self, shard: usize, prefix: &[u8], r: Reader) {
        match self.prefixes.iter_mut().find(|p| p.prefix == prefix) {
            Some(p) => {
                if !p.clients.contains(&r) {
                    p.clients.push(r);
                }
            }
            None => {
                self.prefixes.push(Prefix {
                    prefix: prefix.to_vec(),
                    clients: vec![r],
                    pending: Vec::new(),
                });
                if shard == 0 {
                    PREFIXES.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.active = true;
    }

    fn remove_client_prefixes(&mut self, shard: usize, id: u64) {
        // Keys collected for the prefixes go out first.
        self.flush_bcast();
        let before = self.prefixes.len();
        for p in &mut self.prefixes {
            p.clients.retain(|r| r.id != id);
        }
        self.prefixes.retain(|p| !p.clients.is_empty());
        if shard == 0 {
            PREFIXES.fetch_sub(before - self.prefixes.len(), Ordering::Relaxed);
        }
        self.refresh_active();
    }

    /// `tracking-table-max-keys` changed.
    pub fn set_max_keys(&mut self, max: u64) {
        self.max_keys = max;
        self.enforce_limit();
    }

    /// Over the limit (process-wide): invalidate keys of this shard until under it.
    /// Each eviction first claims one unit off the global count, so shards evicting
    /// at once never go below the limit together.
    fn enforce_limit(&mut self) {
        let max = self.max_keys;
        if max == 0 || TOTAL_KEYS.load(Ordering::Relaxed) <= max {
            return;
        }
        while !self.keys.is_empty() {
            let claimed = TOTAL_KEYS
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                    (t > max).then(|| t - 1)
                })
                .is_ok();
            if !claimed {
                break;
            }
            let Some(key) = self.keys.keys().next().cloned() else {
                break;
            };
            if let Some(readers) = self.keys.remove(&key) {
                TOTAL_ITEMS.fetch_sub(readers.len() as u64, Ordering::Relaxed);
                self.forget(&key, readers, 0);
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Delivery.                                                                */
/* ------------------------------------------------------------------------ */

/// The writer of an expired key's invalidation. Like eviction's (writer 0) it is no
/// client's write, so NOLOOP never hides it; unlike eviction's it follows the reply of
/// the command that found the key expired (Redis 7.0 queues it in
/// `tracking_pending_keys` while that command runs, where eviction, done before the
/// command starts, sends at once).
pub const EXPIRY: u64 = u64::MAX;

#[derive(Clone, Copy)]
enum Kind {
    /// A key the client read was modified by `writer`.
    Key { writer: u64 },
    /// Keys under one of the client's BCAST prefixes.
    Bcast,
    /// FLUSHALL / FLUSHDB: a null invalidation.
    Flush,
}

/// An invalidation for client `id`: its keys with their writers (None: null).
struct Note {
    id: u64,
    kind: Kind,
    keys: Option<Vec<(Vec<u8>, u64)>>,
}

/// Sends `note` for reader `r`: to the redirection client's shard when that is not
/// the reader's home (see the module comment), else to the reader's home.
fn route(r: Reader, mut note: Note) {
    let Some(m) = remote_redirect(r.id) else {
        return deliver(r.home as usize, note);
    };
    if !mode_allows(&mut note, m.bcast, m.noloop) {
        return;
    }
    let Some(cell) = crate::pubsub::shard_cell() else {
        return;
    };
    let (id, home, redirect, keys) = (note.id, m.home as usize, m.redirect, note.keys);
    if m.shard as usize == cell.id {
        redirect_here(&cell, id, home, redirect, keys);
    } else {
        let _ = cell.mesh.send(
            m.shard as usize,
            Box::new(move |c| redirect_here(c, id, home, redirect, keys)),
        );
    }
}

/// Whether a client in this mode gets `note` (BCAST clients get only BCAST notes,
/// NOLOOP ones not their own writes); NOLOOP drops its own keys from a BCAST note.
fn mode_allows(note: &mut Note, bcast: bool, noloop: bool) -> bool {
    match note.kind {
        Kind::Key { writer } => !(bcast || (noloop && writer == note.id)),
        Kind::Bcast => {
            if !bcast {
                return false;
            }
            if noloop {
                if let Some(keys) = note.keys.as_mut() {
                    keys.retain(|(_, w)| *w != note.id);
                    return !keys.is_empty();
                }
            }
            true
        }
        Kind::Flush => true,
    }
}

/// Sends `note` to the client's home shard (in place when it is this one).
fn deliver(home: usize, note: Note) {
    let Some(cell) = crate::pubsub::shard_cell() else {
        return;
    };
    if home == cell.id {
        deliver_here(&cell, note);
    } else {
        let _ = cell
            .mesh
            .send(home, Box::new(move |c| deliver_here(c, note)));
    }
}

/// On the client's home shard: applies its mode (BCAST, NOLOOP) and writes the
/// invalidation to it or to its redirection client.
fn deliver_here(cell: &Rc<ShardCell>, mut note: Note) {
    let Some(c) = cell.clients.borrow().get(note.id).cloned() else {
        return;
    };
    if !c.tracking.on.get() {
        return;
    }
    let (redirect, shard) = {
        let m = c.tracking.mode.borrow();
        if !mode_allows(&mut note, m.bcast, m.noloop) {
            return;
        }
        (m.redirect, m.redirect_shard)
    };
    if redirect == 0 {
        send_to(&c, &note.keys, false);
        if matches!(note.kind, Kind::Key { writer: 0 }) {
            // The server's own deletions (evictions, expiry) are not the client's
            // writes: they precede its next reply, as in Redis.
            c.pubsub.mark_early();
        }
    } else if shard == cell.id {
        redirect_here(cell, note.id, cell.id, redirect, note.keys);
    } else {
        let (id, home, keys) = (note.id, cell.id, note.keys);
        let _ = cell.mesh.send(
            shard,
            Box::new(move |c| redirect_here(c, id, home, redirect, keys)),
        );
    }
}

type Keys = Option<Vec<(Vec<u8>, u64)>>;

/// On the redirection client's shard: hands it the invalidation, or tells the
/// tracking client (on `home`) that its redirection is gone.
fn redirect_here(cell: &Rc<ShardCell>, id: u64, home: usize, redirect: u64, keys: Keys) {
    let target = cell.clients.borrow().get(redirect).cloned();
    match target {
        Some(r) => send_to(&r, &keys, true),
        None if home == cell.id => broken_here(cell, id, redirect),
        None => {
            let _ = cell
                .mesh
                .send(home, Box::new(move |c| broken_here(c, id, redirect)));
        }
    }
}

/// The redirection client of `id` no longer exists: Redis flags it and, for RESP3,
/// pushes `tracking-redir-broken`.
fn broken_here(cell: &Rc<ShardCell>, id: u64, redirect: u64) {
    let Some(c) = cell.clients.borrow().get(id).cloned() else {
        return;
    };
    if !c.tracking.on.get() {
        return;
    }
    c.tracking.mode.borrow_mut().broken_redirect = true;
    if c.proto.get() == Protocol::Resp3 {
        crate::pubsub::push_with(&c, |w| {
            w.push_len(2);
            w.bulk(b"tracking-redir-broken");
            w.integer(redirect as i64);
        });
    }
}

/// Writes one invalidation: a RESP3 push, or for a RESP2 redirection client in
/// Pub/Sub mode a message on `__redis__:invalidate`. RESP2 otherwise gets nothing.
fn send_to(t: &ClientShared, keys: &Keys, redirected: bool) {
    let body = |w: &mut ReplyWriter| match keys {
        Some(keys) => {
            w.array_len(keys.len());
            for (k, _) in keys {
                w.bulk(k);
            }
        }
        None => w.null(),
    };
    if t.tracking.deferring.get() {
        let mut held = t.tracking.deferred.borrow_mut();
        let mut w = ReplyWriter::new(&mut held, t.proto.get());
        if t.proto.get() == Protocol::Resp3 {
            w.push_len(2);
            w.bulk(b"invalidate");
            body(&mut w);
            return;
        }
    }
    if t.proto.get() == Protocol::Resp3 {
        crate::pubsub::push_with(t, |w| {
            w.push_len(2);
            w.bulk(b"invalidate");
            body(w);
        });
    } else if redirected && t.pubsub.active() {
        crate::pubsub::push_with(t, |w| {
            w.push_len(3);
            w.bulk(b"message");
            w.bulk(b"__redis__:invalidate");
            body(w);
        });
    }
}

/// After FLUSHALL / FLUSHDB: every tracking client gets a null invalidation (BCAST
/// and NOLOOP ones included, as Redis).
pub async fn notify_flush(cell: &Rc<ShardCell>) {
    if CLIENTS.count() == 0 {
        return;
    }
    cell.call_all(|c| {
        let ids: Vec<u64> = c
            .clients
            .borrow()
            .iter()
            .filter(|x| x.tracking.on.get())
            .map(|x| x.id)
            .collect();
        for id in ids {
            deliver_here(
                c,
                Note {
                    id,
                    kind: Kind::Flush,
                    keys: None,
                },
            );
        }
    })
    .await;
}

/// Remembers `keys` for the session's client on the shards that own them (reads
/// that did not run on those shards' command path: coordinators, scripts).
pub async fn remember_remote(session: &Session, db_keys: Vec<Vec<u8>>) {
    let cell = session.cell.clone();
    let (id, home) = (session.id(), cell.id);
    for k in db_keys {
        let s = cell.shard_of(&k);
        cell.tell(s, move |c| {
            c.data.borrow_mut().tracking.remember(&k, id, home);
        })
        .await;
    }
}

/// Sends the pending BCAST keys of every shard (after a transaction).
pub async fn flush_everywhere(cell: &Rc<ShardCell>) {
    if PREFIXES.load(Ordering::Relaxed) == 0 {
        return;
    }
    cell.call_all(|c| c.data.borrow_mut().tracking.flush_bcast())
        .await;
}

/* ------------------------------------------------------------------------ */
/* CLIENT TRACKING / CACHING / GETREDIR / TRACKINGINFO.                     */
/* ------------------------------------------------------------------------ */

/// The parsed options of CLIENT TRACKING.
#[derive(Default)]
struct Options {
    bcast: bool,
    optin: bool,
    optout: bool,
    noloop: bool,
    prefixes: Vec<Vec<u8>>,
}

fn parse_options(args: &[Vec<u8>]) -> Result<(Options, Option<i64>), String> {
    let mut o = Options::default();
    let mut redirect = None;
    let mut j = 3;
    while j < args.len() {
        let a = &args[j];
        let more = j + 1 < args.len();
        if a.eq_ignore_ascii_case(b"redirect") && more {
            j += 1;
            if redirect.is_some() {
                return Err("ERR A client can only redirect to a single other client".into());
            }
            let n = crate::commands::parse_i64(&args[j])
                .ok_or_else(|| crate::commands::NOT_INT.to_string())?;
            redirect = Some(n);
        } else if a.eq_ignore_ascii_case(b"bcast") {
            o.bcast = true;
        } else if a.eq_ignore_ascii_case(b"optin") {
            o.optin = true;
        } else if a.eq_ignore_ascii_case(b"optout") {
            o.optout = true;
        } else if a.eq_ignore_ascii_case(b"noloop") {
            o.noloop = true;
        } else if a.eq_ignore_ascii_case(b"prefix") && more {
            j += 1;
            o.prefixes.push(args[j].clone());
        } else {
            return Err(crate::commands::SYNTAX_ERR.to_string());
        }
        j += 1;
    }
    Ok((o, redirect))
}

/// Redis's checkPrefixCollisionsOrReply: a prefix may not overlap an existing one
/// of the client or another given one.
fn check_prefixes(existing: &[Vec<u8>], given: &[Vec<u8>]) -> Result<(), String> {
    let overlap = |a: &[u8], b: &[u8]| {
        let n = a.len().min(b.len());
        a[..n] == b[..n]
    };
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for (i, p) in given.iter().enumerate() {
        if let Some(e) = existing.iter().find(|e| overlap(e, p)) {
            return Err(format!(
                "ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                s(p),
                s(e)
            ));
        }
        if let Some(q) = given[i + 1..].iter().find(|q| overlap(p, q)) {
            return Err(format!(
                "ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                s(p),
                s(q)
            ));
        }
    }
    Ok(())
}

/// The shard whose registry holds client `id`, if any.
async fn find_client(cell: &Rc<ShardCell>, id: u64) -> Option<usize> {
    let found = cell
        .call_all(move |c| c.clients.borrow().get(id).is_some())
        .await;
    found.iter().position(|f| *f)
}

/// CLIENT TRACKING ON|OFF [options]: Ok(()) for +OK, or the error text.
pub async fn client_tracking(session: &Session, args: &[Vec<u8>]) -> Result<(), String> {
    let (o, redirect) = parse_options(args)?;
    let cell = session.cell.clone();
    let t = &session.shared.tracking;
    let mut redirect_shard = 0;
    if let Some(r) = redirect {
        // The redirection client must exist now (it may go away later).
        let found = if r > 0 {
            find_client(&cell, r as u64).await
        } else {
            None
        };
        match found {
            Some(s) => redirect_shard = s,
            None => return Err("ERR The client ID you want redirect to does not exist".into()),
        }
    }
    let on = if args[2].eq_ignore_ascii_case(b"on") {
        true
    } else if args[2].eq_ignore_ascii_case(b"off") {
        false
    } else {
        return Err(crate::commands::SYNTAX_ERR.into());
    };
    if !on {
        disable(session);
        return Ok(());
    }
    if !o.bcast && !o.prefixes.is_empty() {
        return Err("ERR PREFIX option requires BCAST mode to be enabled".into());
    }
    let old = t.mode.borrow().clone();
    if t.on.get() && old.bcast != o.bcast {
        return Err("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.".into());
    }
    if o.bcast && (o.optin || o.optout) {
        return Err("ERR OPTIN and OPTOUT are not compatible with BCAST".into());
    }
    if o.optin && o.optout {
        return Err("ERR You can't use both OPTIN and OPTOUT".into());
    }
    if t.on.get() && ((o.optin && old.optout) || (o.optout && old.optin)) {
        return Err("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.".into());
    }
    if o.bcast {
        check_prefixes(&old.prefixes, &o.prefixes)?;
    }
    if !t.on.get() {
        CLIENTS.join();
    }
    let mut prefixes = if t.on.get() { old.prefixes } else { Vec::new() };
    let mut added = Vec::new();
    if o.bcast {
        let given = if o.prefixes.is_empty() {
            vec![Vec::new()]
        } else {
            o.prefixes
        };
        for p in given {
            if !prefixes.contains(&p) {
                prefixes.push(p.clone());
                added.push(p);
            }
        }
    }
    *t.mode.borrow_mut() = Mode {
        bcast: o.bcast,
        optin: o.optin,
        optout: o.optout,
        noloop: o.noloop,
        broken_redirect: false,
        redirect: redirect.unwrap_or(0) as u64,
        redirect_shard,
        prefixes,
    };
    let remote = (redirect.is_some() && redirect_shard != cell.id).then(|| RemoteRedirect {
        home: cell.id as u16,
        redirect: redirect.unwrap_or(0) as u64,
        shard: redirect_shard as u16,
        bcast: o.bcast,
        noloop: o.noloop,
    });
    set_remote_redirect(session.id(), remote);
    t.on.set(true);
    t.reads.set(!o.bcast);
    // Only CLIENT CACHING's own mode keeps its flag.
    t.caching.set(false);
    if !added.is_empty() {
        let r = Reader {
            id: session.id(),
            home: cell.id as u16,
        };
        cell.call_all(move |c| {
            let mut d = c.data.borrow_mut();
            for p in &added {
                d.tracking.add_prefix(c.id, p, r);
            }
        })
        .await;
    }
    Ok(())
}

/// CLIENT TRACKING OFF, RESET and disconnection. The BCAST prefixes leave every
/// shard through the mesh, ahead of anything this client sends later.
pub fn disable(session: &Session) {
    let t = &session.shared.tracking;
    if !t.on.get() {
        return;
    }
    let bcast = t.mode.borrow().bcast;
    if t.mode.borrow().redirect != 0 {
        set_remote_redirect(session.id(), None);
    }
    t.on.set(false);
    t.reads.set(false);
    t.caching.set(false);
    *t.mode.borrow_mut() = Mode::default();
    CLIENTS.leave();
    if bcast {
        let id = session.id();
        let cell = &session.cell;
        for s in 0..cell.shard_count() {
            if s == cell.id {
                cell.data
                    .borrow_mut()
                    .tracking
                    .remove_client_prefixes(s, id);
            } else {
                let _ = cell.mesh.send(
                    s,
                    Box::new(move |c| {
                        c.data
                            .borrow_mut()
                            .tracking
                            .remove_client_prefixes(c.id, id)
                    }),
                );
            }
        }
    }
}

/// CLIENT CACHING YES|NO.
pub fn client_caching(t: &ClientTracking, arg: &[u8]) -> Result<(), &'static str> {
    if !t.on.get() {
        return Err("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled");
    }
    let m = t.mode.borrow();
    if arg.eq_ignore_ascii_case(b"yes") {
        if !m.optin {
            return Err(
                "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
            );
        }
    } else if arg.eq_ignore_ascii_case(b"no") {
        if !m.optout {
            return Err(
                "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
            );
        }
    } else {
        return Err(crate::commands::SYNTAX_ERR);
    }
    t.caching.set(true);
    Ok(())
}

/// CLIENT TRACKINGINFO's reply.
pub fn write_info(t: &ClientTracking, w: &mut ReplyWriter) {
    let m = t.mode.borrow();
    let on = t.on.get();
    let mut flags: Vec<&str> = vec![if on { "on" } else { "off" }];
    if m.bcast {
        flags.push("bcast");
    }
    if m.optin {
        flags.push("optin");
        if t.caching.get() {
            flags.push("caching-yes");
        }
    }
    if m.optout {
        flags.push("optout");
        if t.caching.get() {
            flags.push("caching-no");
        }
    }
    if m.noloop {
        flags.push("noloop");
    }
    if m.broken_redirect {
        flags.push("broken_redirect");
    }
    w.map_len(3);
    w.bulk(b"flags");
    w.set_len(flags.len());
    for f in flags {
        w.bulk(f.as_bytes());
    }
    w.bulk(b"redirect");
    w.integer(if on { m.redirect as i64 } else { -1 });
    w.bulk(b"prefixes");
    w.array_len(m.prefixes.len());
    for p in &m.prefixes {
        w.bulk(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn prefix_overlaps_are_refused() {
        let e = check_prefixes(&[], &args(&["FOOBAR", "FOO"])).unwrap_err();
        assert!(e.starts_with("ERR Prefix 'FOOBAR' overlaps with another provided prefix 'FOO'"));
        let e = check_prefixes(&args(&["FOO", "BAR"]), &args(&["FO"])).unwrap_err();
        assert!(e.starts_with("ERR Prefix 'FO' overlaps with an existing prefix 'FOO'"));
        assert!(check_prefixes(&args(&["FOO"]), &args(&["BAR", "BAZ"])).is_ok());
    }

    #[test]
    fn options_parse_as_redis() {
        let (o, r) = parse_options(&args(&[
            "client", "tracking", "on", "bcast", "prefix", "a", "noloop",
        ]))
        .unwrap();
        assert!(o.bcast && o.noloop && r.is_none());
        assert_eq!(o.prefixes, args(&["a"]));
        assert!(parse_options(&args(&["client", "tracking", "on", "prefix"])).is_err());
        assert!(parse_options(&args(&["client", "tracking", "on", "redirect", "x"])).is_err());
    }

    #[test]
    fn caching_follows_optin_optout() {
        let t = ClientTracking::default();
        t.on.set(true);
        t.reads.set(true);
        assert!(t.tracks_reads());
        t.mode.borrow_mut().optin = true;
        assert!(!t.tracks_reads());
        assert!(client_caching(&t, b"yes").is_ok());
        assert!(t.tracks_reads());
        t.end_command();
        assert!(!t.tracks_reads());
        assert!(client_caching(&t, b"no").is_err());
    }
}
