//! Blocking pops (Redis's blocked.c with the B* commands of t_list.c and t_zset.c):
//! BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP.
//!
//! Each is an async coordinator at home. It tries the non-blocking pop atomically over
//! its keys (locked with `MultiShardOp`, wherever they live); if every key is empty it
//! registers the client on each key's shard (`shard::blocking`), releases the locks
//! and sleeps until a write to one of the keys wakes it, its timeout passes, or CLIENT
//! UNBLOCK ends it. A woken client retries and keeps its place in the queues.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use super::lists::{list_pop_name, parse_side};
use super::strings::cmd;
use super::table::K12;
use super::table::{flags::*, CommandSpec, KeySpec, Kind};
use super::zsets::zpop_name;
use super::{parse_f64, parse_i64, GlobalCtx, SYNTAX_ERR, WRONGTYPE};
use crate::clients::ClientShared;
use crate::protocol::reply::ReplyWriter;
use crate::protocol::Protocol;
use crate::shard::blocking::{
    unblocked_error, BlockState, LocalServe, ServedReply, UNBLOCK_CLUSTER_REDIRECT, UNBLOCK_NONE,
    UNBLOCK_ROLE_CHANGE,
};
use crate::shard::exec::{self, Wake, Written};
use crate::shard::multi::MultiShardOp;
use crate::shard::{ShardCell, ShardData};
use crate::storage::list::ListValue;
use crate::storage::zset::Member;
use crate::storage::{Db, Value, NO_EXPIRE};

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// Keys from argument 1 to the one before the timeout.
const K_ALL_BUT_LAST: KeySpec = KeySpec::Range {
    first: 1,
    last: -2,
    step: 1,
};
/// BLMPOP / BZMPOP: the timeout, then a key count and that many keys.
const K_MPOP: KeySpec = KeySpec::Keynum {
    dest: 0,
    keynum_at: 2,
};

const L_ACL: &[&str] = &["@write", "@list", "@slow", "@blocking"];
const Z_FAST_ACL: &[&str] = &["@write", "@sortedset", "@fast", "@blocking"];
const Z_SLOW_ACL: &[&str] = &["@write", "@sortedset", "@slow", "@blocking"];

macro_rules! bcmd {
    ($name:expr, $arity:expr, $flags:expr, $keys:expr, $f:expr, $group:expr, $acl:expr, $since:expr, $summary:expr) => {
        CommandSpec {
            group: $group,
            acl: $acl,
            ..cmd!(
                $name,
                $arity,
                $flags,
                $keys,
                Kind::Global($f),
                $since,
                $summary
            )
        }
    };
}

#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    bcmd!("blpop", -3, WRITE | NOSCRIPT | BLOCKING, K_ALL_BUT_LAST, blpop, "list", L_ACL, "2.0.0", "Remove and get the first element in a list, or block until one is available"),
    bcmd!("brpop", -3, WRITE | NOSCRIPT | BLOCKING, K_ALL_BUT_LAST, brpop, "list", L_ACL, "2.0.0", "Remove and get the last element in a list, or block until one is available"),
    bcmd!("brpoplpush", 4, WRITE | DENYOOM | NOSCRIPT | BLOCKING, K12, brpoplpush, "list", L_ACL, "2.2.0", "Pop an element from a list, push it to another list and return it; or block until one is available"),
    bcmd!("blmove", 6, WRITE | DENYOOM | NOSCRIPT | BLOCKING, K12, blmove, "list", L_ACL, "6.2.0", "Pop an element from a list, push it to another list and return it; or block until one is available"),
    bcmd!("blmpop", -5, WRITE | BLOCKING | MOVABLE_KEYS, K_MPOP, blmpop, "list", L_ACL, "7.0.0", "Pop elements from a list, or block until one is available"),
    bcmd!("bzpopmin", -3, WRITE | NOSCRIPT | FAST | BLOCKING, K_ALL_BUT_LAST, bzpopmin, "sorted-set", Z_FAST_ACL, "5.0.0", "Remove and return the member with the lowest score from one or more sorted sets, or block until one is available"),
    bcmd!("bzpopmax", -3, WRITE | NOSCRIPT | FAST | BLOCKING, K_ALL_BUT_LAST, bzpopmax, "sorted-set", Z_FAST_ACL, "5.0.0", "Remove and return the member with the highest score from one or more sorted sets, or block until one is available"),
    bcmd!("bzmpop", -5, WRITE | BLOCKING | MOVABLE_KEYS, K_MPOP, bzmpop, "sorted-set", Z_SLOW_ACL, "7.0.0", "Remove and return members with scores in a sorted set or block until one is available"),
];

/// What one try pops.
#[derive(Clone, Copy, Debug)]
enum PopKind {
    /// BLPOP / BRPOP: one element, replied [key, element].
    List { front: bool },
    /// BLMPOP: up to `count` elements, replied [key, [elements]].
    ListMany { front: bool, count: usize },
    /// BLMOVE / BRPOPLPUSH: one element moved to `dst`, replied as a bulk;
    /// `rpoplpush` for BRPOPLPUSH, which propagates as RPOPLPUSH (BLMOVE as LMOVE,
    /// whatever its sides).
    Move {
        from_front: bool,
        to_front: bool,
        rpoplpush: bool,
    },
    /// BZPOPMIN / BZPOPMAX: [key, member, score].
    ZSet { max: bool },
    /// BZMPOP: [key, [[member, score], ...]].
    ZSetMany { max: bool, count: usize },
}

/// A parsed blocking command.
#[derive(Clone)]
struct Request {
    keys: Vec<Vec<u8>>,
    /// BLMOVE / BRPOPLPUSH's destination.
    dst: Option<Vec<u8>>,
    kind: PopKind,
    /// None: wait forever.
    timeout: Option<Duration>,
}

/// What popping gave.
enum Popped {
    One(Vec<u8>),
    Many(Vec<Vec<u8>>),
    Scored(Vec<(Member, f64)>),
}

impl Popped {
    /// What the pop adds to the change counter, as Redis's server.dirty: one per
    /// element (BLMPOP, BZPOPMIN, BZMPOP), except that BLPOP, BRPOP and BLMOVE count
    /// their element only when served at once, not when serving a client that had
    /// blocked (Redis's serveClientBlockedOnList adds nothing for them).
    fn changes(&self, was_blocked: bool) -> u64 {
        match self {
            Popped::One(_) => u64::from(!was_blocked),
            Popped::Many(items) => items.len() as u64,
            Popped::Scored(items) => items.len() as u64,
        }
    }
}

/// What serving a blocking pop propagates: its non-blocking form for what it popped
/// (Redis rewrites BLPOP as LPOP, BLMPOP as LPOP key count, BLMOVE as LMOVE ...).
fn pop_effect(kind: PopKind, key: &[u8], popped: &Popped, dst: Option<&[u8]>) -> Vec<Vec<u8>> {
    let side = |front: bool| {
        if front {
            b"LEFT".to_vec()
        } else {
            b"RIGHT".to_vec()
        }
    };
    let n = match popped {
        Popped::One(_) => 1,
        Popped::Many(items) => items.len(),
        Popped::Scored(items) => items.len(),
    };
    match kind {
        PopKind::List { front } => vec![list_pop_name(front).to_vec(), key.to_vec()],
        PopKind::ListMany { front, .. } => super::counted_pop(list_pop_name(front), key, n),
        PopKind::ZSet { max } => vec![zpop_name(max).to_vec(), key.to_vec()],
        PopKind::ZSetMany { max, .. } => super::counted_pop(zpop_name(max), key, n),
        PopKind::Move {
            rpoplpush: true, ..
        } => vec![
            b"RPOPLPUSH".to_vec(),
            key.to_vec(),
            dst.unwrap_or_default().to_vec(),
        ],
        PopKind::Move {
            from_front,
            to_front,
            ..
        } => vec![
            b"LMOVE".to_vec(),
            key.to_vec(),
            dst.unwrap_or_default().to_vec(),
            side(from_front),
            side(to_front),
        ],
    }
}

/// The outcome of one try over all keys.
enum Try {
    Empty,
    WrongType,
    Served(Vec<u8>, Popped),
}

/// Parses a blocking timeout in seconds as Redis's getTimeoutFromObjectOrReply does.
fn parse_timeout(arg: &[u8]) -> Result<Option<Duration>, &'static str> {
    let secs = parse_f64(arg).ok_or("ERR timeout is not a float or out of range")?;
    let ms = secs * 1000.0;
    if !ms.is_finite() || ms >= i64::MAX as f64 {
        return Err("ERR timeout is out of range");
    }
    // Redis truncates to whole milliseconds; 0 (or under 1ms) waits forever.
    let ms = ms as i64;
    if ms < 0 {
        return Err("ERR timeout is negative");
    }
    Ok((ms > 0).then(|| Duration::from_millis(ms as u64)))
}

/// BLMPOP / BZMPOP: timeout numkeys key... WHERE [COUNT n]. `side` parses WHERE.
fn parse_mpop(
    args: &[Vec<u8>],
    side: fn(&[u8]) -> Option<bool>,
) -> Result<(Vec<Vec<u8>>, bool, usize), &'static str> {
    let numkeys = match parse_i64(&args[2]) {
        Some(n) if n > 0 => n as usize,
        _ => return Err("ERR numkeys should be greater than 0"),
    };
    let where_idx = numkeys
        .checked_add(3)
        .filter(|&i| i < args.len())
        .ok_or(SYNTAX_ERR)?;
    let which = side(&args[where_idx]).ok_or(SYNTAX_ERR)?;
    let mut count = None;
    let mut j = where_idx + 1;
    while j < args.len() {
        if count.is_none() && args[j].eq_ignore_ascii_case(b"count") && j + 1 < args.len() {
            match parse_i64(&args[j + 1]) {
                Some(n) if n > 0 => count = Some(n as usize),
                _ => return Err("ERR count should be greater than 0"),
            }
            j += 2;
        } else {
            return Err(SYNTAX_ERR);
        }
    }
    Ok((args[3..where_idx].to_vec(), which, count.unwrap_or(1)))
}

fn zside(a: &[u8]) -> Option<bool> {
    if a.eq_ignore_ascii_case(b"min") {
        Some(false)
    } else if a.eq_ignore_ascii_case(b"max") {
        Some(true)
    } else {
        None
    }
}

fn blpop<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(bpop(g, PopKind::List { front: true }))
}

fn brpop<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(bpop(g, PopKind::List { front: false }))
}

fn bzpopmin<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(bpop(g, PopKind::ZSet { max: false }))
}

fn bzpopmax<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(bpop(g, PopKind::ZSet { max: true }))
}

/// BLPOP / BRPOP / BZPOPMIN / BZPOPMAX key [key ...] timeout.
async fn bpop(g: &mut GlobalCtx<'_>, kind: PopKind) {
    let timeout = match parse_timeout(&g.args[g.args.len() - 1]) {
        Ok(t) => t,
        Err(e) => return g.error(e),
    };
    let keys = g.args[1..g.args.len() - 1].to_vec();
    let req = Request {
        keys,
        dst: None,
        kind,
        timeout,
    };
    run(g, req).await
}

fn brpoplpush<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let timeout = match parse_timeout(&g.args[3]) {
            Ok(t) => t,
            Err(e) => return g.error(e),
        };
        let req = Request {
            keys: vec![g.args[1].clone()],
            dst: Some(g.args[2].clone()),
            kind: PopKind::Move {
                from_front: false,
                to_front: true,
                rpoplpush: true,
            },
            timeout,
        };
        run(g, req).await
    })
}

fn blmove<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let (Some(from_front), Some(to_front)) = (parse_side(&g.args[3]), parse_side(&g.args[4]))
        else {
            return g.error(SYNTAX_ERR);
        };
        let timeout = match parse_timeout(&g.args[5]) {
            Ok(t) => t,
            Err(e) => return g.error(e),
        };
        let req = Request {
            keys: vec![g.args[1].clone()],
            dst: Some(g.args[2].clone()),
            kind: PopKind::Move {
                from_front,
                to_front,
                rpoplpush: false,
            },
            timeout,
        };
        run(g, req).await
    })
}

fn blmpop<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(mpop(g, true))
}

fn bzmpop<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(mpop(g, false))
}

async fn mpop(g: &mut GlobalCtx<'_>, list: bool) {
    let timeout = match parse_timeout(&g.args[1]) {
        Ok(t) => t,
        Err(e) => return g.error(e),
    };
    let side = if list { parse_side } else { zside };
    let (keys, which, count) = match parse_mpop(&g.args, side) {
        Ok(p) => p,
        Err(e) => return g.error(e),
    };
    let kind = if list {
        PopKind::ListMany {
            front: which,
            count,
        }
    } else {
        PopKind::ZSetMany { max: which, count }
    };
    let req = Request {
        keys,
        dst: None,
        kind,
        timeout,
    };
    run(g, req).await
}

/// How a wait ended.
pub(crate) enum WaitEnd {
    /// A shard served it in place: here is the reply.
    Served(Vec<u8>),
    Woken,
    TimedOut,
    /// CLIENT UNBLOCK with this mode.
    Unblocked(u8),
}

/// The blocking loop shared by every command: try, else wait and retry.
async fn run(g: &mut GlobalCtx<'_>, req: Request) {
    // A pop propagates as its non-blocking form where it is served: on the keys'
    // shard (`one_hop`, `LocalPop::serve`), or before the locks go (below).
    g.propagation.nothing();
    let cell = g.session.cell.clone();
    let db = g.session.db;
    let deadline = req.timeout.map(|t| Instant::now() + t);
    let mut lock_keys: Vec<Vec<u8>> = Vec::with_capacity(req.keys.len() + 1);
    for k in req.keys.iter().chain(req.dst.iter()) {
        if !lock_keys.contains(k) {
            lock_keys.push(k.clone());
        }
    }
    let mut reg: Option<Registration> = None;
    let in_txn = g.session.multi.is_some() || g.session.exec_owner.is_some();
    let home = single_shard(&cell, &lock_keys).filter(|_| !in_txn);
    loop {
        if let Some(shard) = home {
            match one_hop(&cell, shard, db, &req, &mut reg, &g.session.shared).await {
                Hop::Done(outcome) => {
                    drop(reg);
                    return reply(&mut g.w(), &req, outcome);
                }
                Hop::Blocked => {
                    let Some(r) = reg.as_ref() else { return };
                    match wait_end(g, r, deadline).await {
                        Some(()) => return drop(reg),
                        None => continue,
                    }
                }
                // Another operation holds a key: take the locked path this time.
                Hop::Locked => {}
            }
        }
        let mut op = MultiShardOp::lock_keys(g.owner(), &cell, db, &lock_keys).await;
        let outcome = try_pop(&op, &cell, db, &req, reg.is_some()).await;
        op.count_dirty(match &outcome {
            Try::Served(_, p) => p.changes(reg.is_some()),
            _ => 0,
        });
        let in_multi = g.session.multi.is_some() || g.session.exec_owner.is_some();
        if let Try::Served(key, popped) = &outcome {
            let effect = pop_effect(req.kind, key, popped, req.dst.as_deref());
            g.propagation.rewrite(|| effect);
        }
        if !matches!(outcome, Try::Empty) || in_multi {
            // Done before the release signals the keys, so the next client in line
            // is the one woken.
            if let Some(r) = reg.as_ref() {
                r.state.finish();
            }
            g.release(op).await;
            drop(reg);
            return reply(&mut g.w(), &req, outcome);
        }
        match reg.as_ref() {
            // Still ours to act for while the locks are held: a push now finds the
            // keys held and only wakes us.
            Some(r) => r.state.unclaim(),
            None => {
                let shared = &g.session.shared;
                let local = local_serve(&cell, &req, g.session.proto);
                let state = BlockState::with_local_serve(shared.id, local);
                reg = Some(
                    Registration::register_state(&op, &cell, db, &req.keys, shared, state).await,
                );
            }
        }
        // Nothing was written: releasing must not wake anyone (ourselves included).
        op.set_read_only();
        op.release(&cell).await;
        let Some(r) = reg.as_ref() else { return };
        match wait_end(g, r, deadline).await {
            Some(()) => return drop(reg),
            None => continue,
        }
    }
}

/// Waits while blocked. Some(()) when the command is over (its reply written), None
/// when it was woken and should try again.
async fn wait_end(
    g: &mut GlobalCtx<'_>,
    r: &Registration,
    deadline: Option<Instant>,
) -> Option<()> {
    if g.session.shared.killed.get() {
        // The client went away (or was killed) while we tried: stop here.
        return Some(());
    }
    match wait(&r.state, deadline).await {
        WaitEnd::Served(bytes) => g.out.extend_from_slice(&bytes),
        WaitEnd::Woken => return None,
        WaitEnd::Unblocked(UNBLOCK_CLUSTER_REDIRECT) => {
            let key = r.first_key();
            let write = g.args[0].eq_ignore_ascii_case(b"blmove")
                || g.args[0].eq_ignore_ascii_case(b"brpoplpush");
            match crate::connection::redirect::blocked_redirect(g.session, key, write) {
                Some(msg) => g.error(&msg),
                None => {
                    r.state.clear_unblock();
                    return None;
                }
            }
        }
        WaitEnd::TimedOut | WaitEnd::Unblocked(UNBLOCK_NONE) => g.w().null_array(),
        WaitEnd::Unblocked(mode) => match unblocked_error(mode) {
            Some(msg) => {
                g.error(msg);
                g.session.close_after_reply |= mode == UNBLOCK_ROLE_CHANGE;
            }
            None => g.w().null_array(),
        },
    }
    Some(())
}

/// The one shard holding every key, if there is one.
fn single_shard(cell: &ShardCell, keys: &[Vec<u8>]) -> Option<usize> {
    let first = cell.shard_of(keys.first()?);
    keys.iter()
        .all(|k| cell.shard_of(k) == first)
        .then_some(first)
}

/// What one hop to the keys' shard did.
enum Hop {
    /// Served, wrong type: the command is over.
    Done(Try),
    /// Nothing to pop: the client is registered there and waits.
    Blocked,
    /// A key is locked by another operation.
    Locked,
}

/// Every key on one shard: try, and register if there is nothing, in a single message
/// that runs atomically there (no key locks needed). Most blocking pops take this way.
async fn one_hop(
    cell: &Rc<ShardCell>,
    shard: usize,
    db: usize,
    req: &Request,
    reg: &mut Option<Registration>,
    shared: &Rc<ClientShared>,
) -> Hop {
    let retry = reg.is_some();
    let state = match reg.as_ref() {
        Some(r) => r.state.clone(),
        None => BlockState::with_local_serve(shared.id, local_serve(cell, req, shared.proto.get())),
    };
    let st = state.clone();
    let r = req.clone();
    let client = shared.id;
    let hop = cell
        .call(shard, move |c| {
            {
                let locks = c.locks.borrow();
                let held = !locks.is_idle()
                    && r.keys
                        .iter()
                        .chain(r.dst.iter())
                        .any(|k| locks.blocks(db as u8, k, None));
                if held {
                    // A retry keeps its claim: the locked path acts for it next.
                    return Hop::Locked;
                }
            }
            let mut d = c.data.borrow_mut();
            let outcome = try_here(&mut d, db, &r, retry);
            match outcome {
                Try::Empty => {
                    if retry {
                        st.unclaim();
                    } else {
                        for k in &r.keys {
                            d.blocked.add(db, k.clone(), st.clone());
                        }
                    }
                    Hop::Blocked
                }
                Try::Served(ref key, ref p) => {
                    st.finish();
                    exec::after_deletions(&mut d, None);
                    if crate::effects::active() {
                        let effect = pop_effect(r.kind, key, p, r.dst.as_deref());
                        crate::effects::propagate(None, db, effect);
                    }
                    let written = Written {
                        keys: std::iter::once(key.as_slice())
                            .chain(r.dst.as_deref())
                            .map(|k| (db, k)),
                        changes: p.changes(retry),
                        client,
                        wake: Wake::Serve,
                    };
                    exec::after_write(&c.locks, &mut d, written);
                    Hop::Done(outcome)
                }
                Try::WrongType => {
                    st.finish();
                    Hop::Done(outcome)
                }
            }
        })
        .await;
    if matches!(hop, Hop::Blocked) && reg.is_none() {
        *reg = Some(Registration::adopt(cell, db, &req.keys, state, shared));
    }
    hop
}

/// `try_pop` for keys that all live on this shard, run synchronously here.
fn try_here(d: &mut ShardData, db: usize, req: &Request, retry: bool) -> Try {
    let now = crate::util::now_ms();
    if let (
        PopKind::Move {
            from_front,
            to_front,
            ..
        },
        Some(dst),
    ) = (req.kind, &req.dst)
    {
        let src = &req.keys[0];
        let dbr = &mut d.dbs[db];
        let dst_ok = accepts_list(dbr, dst, now);
        let popped = pop_source(dbr, src, now, from_front, dst_ok, retry);
        let emptied = dbr.peek(src).is_none();
        return match popped {
            Ok(Some(Popped::One(v))) => {
                push_one(d, db, dst, &v, to_front);
                notify_move(src, dst, db, (from_front, to_front), emptied);
                Try::Served(src.clone(), Popped::One(v))
            }
            Ok(_) => Try::Empty,
            Err(()) => Try::WrongType,
        };
    }
    for key in &req.keys {
        match pop_key(&mut d.dbs[db], key, now, req.kind, true) {
            Ok(None) => continue,
            Ok(Some(p)) => return Try::Served(key.clone(), p),
            Err(()) if retry => continue,
            Err(()) => return Try::WrongType,
        }
    }
    Try::Empty
}

/// Writes the reply of a try that ended the command (served, wrong type, or nothing
/// inside MULTI, where a command never blocks).
fn reply(w: &mut ReplyWriter, req: &Request, outcome: Try) {
    reply_kind(w, req.kind, outcome)
}

fn reply_kind(w: &mut ReplyWriter, kind: PopKind, outcome: Try) {
    match outcome {
        Try::WrongType => w.error(WRONGTYPE),
        Try::Empty if matches!(kind, PopKind::Move { .. }) => w.null(),
        Try::Empty => w.null_array(),
        Try::Served(key, popped) => match (kind, popped) {
            (PopKind::Move { .. }, Popped::One(v)) => w.bulk(&v),
            (PopKind::List { .. }, Popped::One(v)) => {
                w.array_len(2);
                w.bulk(&key);
                w.bulk(&v);
            }
            (_, Popped::Many(items)) => {
                w.array_len(2);
                w.bulk(&key);
                w.array_len(items.len());
                for i in &items {
                    w.bulk(i);
                }
            }
            (PopKind::ZSet { .. }, Popped::Scored(items)) => {
                w.array_len(1 + 2 * items.len());
                w.bulk(&key);
                for (m, s) in &items {
                    w.bulk(m);
                    w.double(*s);
                }
            }
            (_, Popped::Scored(items)) => {
                w.array_len(2);
                w.bulk(&key);
                w.array_len(items.len());
                for (m, s) in &items {
                    w.array_len(2);
                    w.bulk(m);
                    w.double(*s);
                }
            }
            (_, Popped::One(v)) => w.bulk(&v),
        },
    }
}

/// One atomic try over the keys in argument order, under `op`'s locks: one hop per run
/// of consecutive keys on the same shard, stopping at the first key that exists. A
/// `retry` (after a wake-up) passes over keys of another type: Redis serves blocked
/// clients only from keys of their type.
async fn try_pop(
    op: &MultiShardOp,
    cell: &Rc<ShardCell>,
    db: usize,
    req: &Request,
    retry: bool,
) -> Try {
    if let (
        PopKind::Move {
            from_front,
            to_front,
            ..
        },
        Some(dst),
    ) = (req.kind, &req.dst)
    {
        let sides = (from_front, to_front);
        return try_move(op, cell, db, (&req.keys[0], dst), sides, retry).await;
    }
    let kind = req.kind;
    let mut i = 0;
    while i < req.keys.len() {
        let shard = cell.shard_of(&req.keys[i]);
        let mut j = i + 1;
        while j < req.keys.len() && cell.shard_of(&req.keys[j]) == shard {
            j += 1;
        }
        let run: Vec<Vec<u8>> = req.keys[i..j].to_vec();
        let r = op
            .on(cell, shard, move |d| {
                let now = crate::util::now_ms();
                for key in run {
                    match pop_key(&mut d.dbs[db], &key, now, kind, true) {
                        Ok(None) => continue,
                        Ok(Some(p)) => return Try::Served(key, p),
                        Err(()) if retry => continue,
                        Err(()) => return Try::WrongType,
                    }
                }
                Try::Empty
            })
            .await;
        if !matches!(r, Try::Empty) {
            return r;
        }
        i = j;
    }
    Try::Empty
}

/// Pops from one key as `kind` says: Ok(None) if it is missing, Err(()) if it holds
/// another type. Removes the key when it empties. `notify`: emit the pop's keyspace
/// events here (BLMOVE emits its own, in Redis's order).
/// Whether BLMOVE's destination can take the element: missing, or a list.
fn accepts_list(dbr: &mut Db, key: &[u8], now: u64) -> bool {
    dbr.get(key, now)
        .is_none_or(|e| matches!(e.value(), Value::List(_)))
}

/// BLMOVE's pop from its source. Err(()): WRONGTYPE (the source is not a list, or the
/// destination cannot take the element). A retry passes over a source of another type.
fn pop_source(
    dbr: &mut Db,
    src: &[u8],
    now: u64,
    from_front: bool,
    dst_ok: bool,
    retry: bool,
) -> Result<Option<Popped>, ()> {
    match dbr.get(src, now).map(|e| e.value()) {
        None => Ok(None),
        Some(Value::List(_)) if !dst_ok => Err(()),
        Some(Value::List(_)) => pop_key(dbr, src, now, PopKind::List { front: from_front }, false),
        Some(_) if retry => Ok(None),
        Some(_) => Err(()),
    }
}

fn pop_key(
    db: &mut Db,
    key: &[u8],
    now: u64,
    kind: PopKind,
    notify: bool,
) -> Result<Option<Popped>, ()> {
    let Some(e) = db.get(key, now) else {
        return Ok(None);
    };
    let (popped, emptied) = match (e.value_mut(), kind) {
        (Value::List(l), PopKind::List { front }) => {
            let v = l.pop(front);
            (v.map(Popped::One), l.is_empty())
        }
        (Value::List(l), PopKind::ListMany { front, count }) => {
            let mut items = Vec::with_capacity(count.min(l.len()));
            while items.len() < count {
                match l.pop(front) {
                    Some(v) => items.push(v),
                    None => break,
                }
            }
            (Some(Popped::Many(items)), l.is_empty())
        }
        (Value::ZSet(z), PopKind::ZSet { max }) => {
            (Some(Popped::Scored(z.pop(max, 1))), z.is_empty())
        }
        (Value::ZSet(z), PopKind::ZSetMany { max, count }) => {
            (Some(Popped::Scored(z.pop(max, count))), z.is_empty())
        }
        _ => return Err(()),
    };
    if emptied {
        db.remove(key);
    }
    if notify && popped.is_some() {
        notify_pop(kind, key, db.index(), emptied);
    }
    Ok(popped)
}

/// The events of a pop: Redis's event name for it, then "del" if the key emptied.
fn notify_pop(kind: PopKind, key: &[u8], db: usize, emptied: bool) {
    use crate::config::notify::{GENERIC, LIST, ZSET};
    let (class, event) = match kind {
        PopKind::List { front } | PopKind::ListMany { front, .. } => {
            (LIST, if front { "lpop" } else { "rpop" })
        }
        PopKind::Move { from_front, .. } => (LIST, if from_front { "lpop" } else { "rpop" }),
        PopKind::ZSet { max } | PopKind::ZSetMany { max, .. } => {
            (ZSET, if max { "zpopmax" } else { "zpopmin" })
        }
    };
    crate::pubsub::notify(class, event, key, db);
    if emptied {
        crate::pubsub::notify(GENERIC, "del", key, db);
    }
}

/// BLMOVE's try: the source decides whether to block (a wrong-typed destination only
/// matters once there is something to move), then the element moves atomically.
async fn try_move(
    op: &MultiShardOp,
    cell: &Rc<ShardCell>,
    db: usize,
    (src, dst): (&[u8], &[u8]),
    (from_front, to_front): (bool, bool),
    retry: bool,
) -> Try {
    let d = dst.to_vec();
    let dst_ok = op
        .on(cell, cell.shard_of(dst), move |data| {
            accepts_list(&mut data.dbs[db], &d, crate::util::now_ms())
        })
        .await;
    let s = src.to_vec();
    let (popped, emptied) = op
        .on(cell, cell.shard_of(src), move |data| {
            let dbr = &mut data.dbs[db];
            let now = crate::util::now_ms();
            let r = pop_source(dbr, &s, now, from_front, dst_ok, retry);
            (r, dbr.peek(&s).is_none())
        })
        .await;
    let v = match popped {
        Ok(None) => return Try::Empty,
        Err(()) => return Try::WrongType,
        Ok(Some(Popped::One(v))) => v,
        Ok(Some(_)) => return Try::Empty,
    };
    let d = dst.to_vec();
    let v = op
        .on(cell, cell.shard_of(dst), move |data| {
            push_one(data, db, &d, &v, to_front);
            v
        })
        .await;
    // From here, so subscribers see them in Redis's order.
    notify_move(src, dst, db, (from_front, to_front), emptied);
    Try::Served(src.to_vec(), Popped::One(v))
}

/// BLMOVE's events in Redis's order: the push, the pop, the source's deletion.
fn notify_move(
    src: &[u8],
    dst: &[u8],
    db: usize,
    (from_front, to_front): (bool, bool),
    emptied: bool,
) {
    let push = if to_front { "lpush" } else { "rpush" };
    crate::pubsub::notify(crate::config::notify::LIST, push, dst, db);
    let pop = PopKind::List { front: from_front };
    notify_pop(pop, src, db, emptied && src != dst);
}

/// How the shard owning a ready key serves this client in place (see
/// `shard::blocking::signal_key`). A BLMOVE between shards has none: it retries.
fn local_serve(cell: &ShardCell, req: &Request, proto: Protocol) -> Option<Box<dyn LocalServe>> {
    if let Some(dst) = &req.dst {
        if cell.shard_of(dst) != cell.shard_of(&req.keys[0]) {
            return None;
        }
    }
    Some(Box::new(LocalPop {
        kind: req.kind,
        dst: req.dst.clone(),
        proto,
    }))
}

#[derive(Debug)]
struct LocalPop {
    kind: PopKind,
    dst: Option<Vec<u8>>,
    proto: Protocol,
}

impl LocalServe for LocalPop {
    fn also_writes(&self) -> Option<&[u8]> {
        self.dst.as_deref()
    }

    fn serve(&self, data: &mut ShardData, db: usize, key: &[u8]) -> Option<ServedReply> {
        let now = crate::util::now_ms();
        let mut out = Vec::new();
        let mut w = ReplyWriter::new(&mut out, self.proto);
        if let (
            PopKind::Move {
                from_front,
                to_front,
                ..
            },
            Some(dst),
        ) = (self.kind, &self.dst)
        {
            if !matches!(
                data.dbs[db].get(key, now).map(|e| e.value()),
                Some(Value::List(_))
            ) {
                return None;
            }
            if !accepts_list(&mut data.dbs[db], dst, now) {
                // Redis answers the receiver WRONGTYPE and leaves the source alone.
                w.error(WRONGTYPE);
                return Some(ServedReply {
                    reply: out,
                    pushed: None,
                });
            }
            let Ok(Some(Popped::One(v))) = pop_key(
                &mut data.dbs[db],
                key,
                now,
                PopKind::List { front: from_front },
                false,
            ) else {
                return None;
            };
            let emptied = data.dbs[db].peek(key).is_none();
            push_one(data, db, dst, &v, to_front);
            notify_move(key, dst, db, (from_front, to_front), emptied);
            if crate::effects::active() {
                let effect = pop_effect(self.kind, key, &Popped::One(v.clone()), Some(dst));
                crate::effects::propagate(None, db, effect);
            }
            w.bulk(&v);
            return Some(ServedReply {
                reply: out,
                pushed: Some(dst.clone()),
            });
        }
        match pop_key(&mut data.dbs[db], key, now, self.kind, true) {
            Ok(Some(p)) => {
                data.dirty += p.changes(true);
                if crate::effects::active() {
                    let effect = pop_effect(self.kind, key, &p, None);
                    crate::effects::propagate(None, db, effect);
                }
                reply_kind(&mut w, self.kind, Try::Served(key.to_vec(), p));
                Some(ServedReply {
                    reply: out,
                    pushed: None,
                })
            }
            _ => None,
        }
    }
}

/// Pushes one element, creating the list if missing (the type was checked before).
fn push_one(data: &mut ShardData, db: usize, key: &[u8], v: &[u8], front: bool) {
    let limits = data.limits;
    let dbr = &mut data.dbs[db];
    if let Some(e) = dbr.get(key, crate::util::now_ms()) {
        if let Value::List(l) = e.value_mut() {
            l.push(v, front);
        }
        return;
    }
    let mut l = ListValue::new(&limits);
    l.push(v, front);
    dbr.insert(
        key,
        Value::List(Box::new(l)),
        NO_EXPIRE,
        crate::util::lru_clock(),
    );
}

/// A client's registration as blocked on its keys. Dropping it (served, timed out,
/// unblocked, or the connection went away) removes it from every shard.
pub(crate) struct Registration {
    cell: Rc<ShardCell>,
    db: usize,
    keys: Vec<Vec<u8>>,
    pub(crate) state: Arc<BlockState>,
    shared: Rc<ClientShared>,
}

impl Registration {
    /// The first key it waits on (all of one slot in cluster mode).
    pub(crate) fn first_key(&self) -> &[u8] {
        self.keys.first().map_or(&[][..], Vec::as_slice)
    }

    /// Registers on every key's shard while `op` holds the keys, so no write can slip
    /// between the empty try and the registration. `broadcast`: see `BlockState`.
    pub(crate) async fn register(
        op: &MultiShardOp,
        cell: &Rc<ShardCell>,
        db: usize,
        keys: &[Vec<u8>],
        shared: &Rc<ClientShared>,
        broadcast: bool,
    ) -> Registration {
        let state = BlockState::with_mode(shared.id, broadcast);
        Registration::register_state(op, cell, db, keys, shared, state).await
    }

    /// `register` with a state made by the caller.
    pub(crate) async fn register_state(
        op: &MultiShardOp,
        cell: &Rc<ShardCell>,
        db: usize,
        keys: &[Vec<u8>],
        shared: &Rc<ClientShared>,
        state: Arc<BlockState>,
    ) -> Registration {
        for (shard, ks) in by_shard(cell, keys) {
            let st = state.clone();
            op.on(cell, shard, move |d| {
                for k in ks {
                    d.blocked.add(db, k, st.clone());
                }
            })
            .await;
        }
        Registration::adopt(cell, db, keys, state, shared)
    }

    /// Takes over a registration already made on the keys' shard (by a command that
    /// tried and registered in one hop).
    pub(crate) fn adopt(
        cell: &Rc<ShardCell>,
        db: usize,
        keys: &[Vec<u8>],
        state: Arc<BlockState>,
        shared: &Rc<ClientShared>,
    ) -> Registration {
        *shared.blocked.borrow_mut() = Some(state.clone());
        Registration {
            cell: cell.clone(),
            db,
            keys: keys.to_vec(),
            state,
            shared: shared.clone(),
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        *self.shared.blocked.borrow_mut() = None;
        self.state.finish();
        let cell = self.cell.clone();
        let db = self.db;
        let groups = by_shard(&cell, &self.keys);
        let state = self.state.clone();
        // Broadcast waiters were all woken by the write itself: nothing to pass on.
        let pass_on = !state.is_broadcast();
        crate::runtime::spawn_detached(async move {
            for (shard, ks) in groups {
                let st = state.clone();
                cell.tell(shard, move |c| {
                    let mut d = c.data.borrow_mut();
                    for k in &ks {
                        d.blocked.remove(db, k, &st);
                        // A wake-up it got but did not use passes to the next client.
                        if pass_on {
                            crate::shard::blocking::signal_key(&c.locks, &mut d, db, k);
                        }
                    }
                })
                .await;
            }
        });
    }
}

/// Keys grouped by owning shard, duplicates dropped.
fn by_shard(cell: &ShardCell, keys: &[Vec<u8>]) -> Vec<(usize, Vec<Vec<u8>>)> {
    let mut out: Vec<(usize, Vec<Vec<u8>>)> = Vec::new();
    for k in keys {
        let s = cell.shard_of(k);
        let pos = match out.iter().position(|(x, _)| *x == s) {
            Some(p) => p,
            None => {
                out.push((s, Vec::new()));
                out.len() - 1
            }
        };
        if !out[pos].1.contains(k) {
            out[pos].1.push(k.clone());
        }
    }
    out
}

/// Sleeps until `state` is woken or unblocked, or `deadline` passes.
pub(crate) async fn wait(state: &BlockState, deadline: Option<Instant>) -> WaitEnd {
    let mut timer = deadline.map(|d| {
        Box::pin(crate::runtime::sleep(
            d.saturating_duration_since(Instant::now()),
        ))
    });
    let mut timed_out = false;
    // Every way out but a serve takes the claim first: while a shard holds it, that
    // shard is serving this client, and its delivery (or its unclaim) wakes us again.
    std::future::poll_fn(move |cx| {
        if !timed_out {
            if let Some(t) = timer.as_mut() {
                timed_out = t.as_mut().poll(cx).is_ready();
            }
        }
        for attempt in 0..2 {
            if let Some(bytes) = state.take_served() {
                return Poll::Ready(WaitEnd::Served(bytes));
            }
            let mode = state.unblock_mode();
            let end = if mode != UNBLOCK_NONE {
                Some(WaitEnd::Unblocked(mode))
            } else if state.is_woken() {
                Some(WaitEnd::Woken)
            } else if timed_out {
                Some(WaitEnd::TimedOut)
            } else {
                None
            };
            if let Some(end) = end {
                if state.try_claim() {
                    state.take_woken();
                    return Poll::Ready(end);
                }
            }
            // Set the waker, then look again: a wake in between is not lost.
            if attempt == 0 {
                state.set_waker(cx.waker());
            }
        }
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse_like_redis() {
        assert_eq!(parse_timeout(b"0"), Ok(None));
        assert_eq!(parse_timeout(b"0.0001"), Ok(None));
        assert_eq!(parse_timeout(b"1.5"), Ok(Some(Duration::from_millis(1500))));
        assert_eq!(parse_timeout(b"-1"), Err("ERR timeout is negative"));
        assert_eq!(
            parse_timeout(b"abc"),
            Err("ERR timeout is not a float or out of range")
        );
        assert!(parse_timeout(b"1e300").is_err());
    }
}
