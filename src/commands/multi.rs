//! Transactions (Redis's multi.c): MULTI, EXEC, DISCARD, WATCH, UNWATCH.
//!
//! Commands queue on the connection; EXEC (in connection.rs) runs them all while
//! holding every shard, so the transaction is atomic and isolated across cores.
//! WATCH registers a flag on the key's owning shard; any write sets it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::strings::cmd;
use super::table::{flags::*, CommandSpec, KeySpec, Kind};
use super::{ClientCtx, GlobalCtx};
use crate::clients::{Session, WatchedKey};

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

macro_rules! tcmd {
    ($name:expr, $arity:expr, $flags:expr, $keys:expr, $kind:expr, $since:expr, $summary:expr) => {
        CommandSpec {
            group: "transactions",
            acl: &["@transaction"],
            ..cmd!($name, $arity, $flags, $keys, $kind, $since, $summary)
        }
    };
}

#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    tcmd!("multi", 1, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY, KeySpec::None, Kind::Client(multi), "1.2.0", "Mark the start of a transaction block"),
    tcmd!("exec", 1, NOSCRIPT | LOADING | STALE | SKIP_SLOWLOG, KeySpec::None, Kind::Client(exec_without_multi), "1.2.0", "Execute all commands issued after MULTI"),
    tcmd!("discard", 1, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY, KeySpec::None, Kind::Global(discard), "2.0.0", "Discard all commands issued after MULTI"),
    tcmd!("watch", -2, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY, KeySpec::Range { first: 1, last: -1, step: 1 }, Kind::Global(watch), "2.2.0", "Watch the given keys to determine execution of the MULTI/EXEC block"),
    tcmd!("unwatch", 1, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY, KeySpec::None, Kind::Global(unwatch), "2.2.0", "Forget about all watched keys"),
];

/// Commands that act at once even between MULTI and EXEC.
pub fn runs_inside_multi(name: &str) -> bool {
    matches!(
        name,
        "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
    )
}

fn multi(ctx: &mut ClientCtx) {
    if ctx.session.multi.is_some() {
        return ctx.out.error("ERR MULTI calls can not be nested");
    }
    ctx.session.multi = Some(Box::default());
    ctx.session.shared.multi_count.set(0);
    ctx.out.ok();
}

/// EXEC outside MULTI (inside, the connection intercepts it).
fn exec_without_multi(ctx: &mut ClientCtx) {
    ctx.out.error("ERR EXEC without MULTI");
}

fn discard<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        if g.session.multi.take().is_none() {
            return g.error("ERR DISCARD without MULTI");
        }
        g.session.shared.multi_count.set(-1);
        unwatch_all(g.session).await;
        g.w().ok();
    })
}

fn watch<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        if g.session.multi.is_some() {
            return g.error("ERR WATCH inside MULTI is not allowed");
        }
        let db = g.session.db;
        let cell = g.session.cell.clone();
        for key in std::mem::take(&mut g.args).into_iter().skip(1) {
            let already = (g.session.watched.iter().flat_map(|w| w.iter()))
                .any(|w| w.db == db && w.key == key);
            if already {
                continue;
            }
            let flag = Arc::new(AtomicBool::new(false));
            let (f2, k2) = (flag.clone(), key.clone());
            let existed = cell
                .call(cell.shard_of(&key), move |c| {
                    let mut d = c.data.borrow_mut();
                    let now = crate::util::now_ms();
                    // Expired but kept (expiry held): Redis's watchedKey.expired.
                    let expired = d.dbs[db].peek_expired(&k2, now) == Some(true);
                    let live = d.dbs[db].get(&k2, now).is_some();
                    d.watches.add(db, k2, f2, expired && !live);
                    live
                })
                .await;
            g.session
                .watched
                .get_or_insert_with(Box::default)
                .push(WatchedKey {
                    db,
                    key,
                    dirty: flag,
                    expired_at_watch: !existed,
                });
        }
        g.w().ok();
    })
}

fn unwatch<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        unwatch_all(g.session).await;
        g.w().ok();
    })
}

/// Forgets every WATCH of the session, on the shards that hold them.
pub async fn unwatch_all(session: &mut Session) {
    let cell = session.cell.clone();
    for w in session.watched.take().map(|w| *w).unwrap_or_default() {
        let shard = cell.shard_of(&w.key);
        cell.tell(shard, move |c| {
            c.data.borrow_mut().watches.remove(w.db, &w.key, &w.dirty)
        })
        .await;
    }
}

/// Whether a watched key changed since WATCH: written (its flag is set), or live then
/// and gone now (deleted or expired). Called while EXEC holds every shard.
pub async fn watched_dirty(session: &Session) -> bool {
    let cell = session.cell.clone();
    for w in session.watched.iter().flat_map(|w| w.iter()) {
        if w.dirty.load(Ordering::SeqCst) {
            return true;
        }
        if !w.expired_at_watch {
            let (db, key) = (w.db, w.key.clone());
            let live = cell
                .call(cell.shard_of(&w.key), move |c| {
                    c.data.borrow().dbs[db].peek_live(&key, crate::util::now_ms())
                })
                .await;
            if !live {
                return true;
            }
        }
    }
    false
}
