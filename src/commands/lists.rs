//! List commands (Redis's t_list.c): pushes and pops at both ends, index access,
//! ranges, LINSERT / LSET / LREM / LTRIM / LPOS, and the multi-key LMOVE, RPOPLPUSH
//! and LMPOP, which stay atomic across shards through `MultiShardOp`.
//!
//! The blocking variants (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP) are not here: they
//! need the shard waiter registry.

use std::future::Future;
use std::pin::Pin;

use super::strings::cmd;
use super::table::{flags::*, CommandSpec, Cross, KeySpec, Kind};
use super::table::{K1, K12};
use super::{notify, parse_i64, ExecCtx, GlobalCtx, NOT_INT, NO_SUCH_KEY, SYNTAX_ERR, WRONGTYPE};
use crate::protocol::reply::ReplyWriter;
use crate::shard::multi::MultiShardOp;
use crate::storage::limits::EncodingLimits;
use crate::storage::list::ListValue;
use crate::storage::{Db, Entry, Value, NO_EXPIRE};

/// A key count at argument 1, then that many keys.
const K_MPOP: KeySpec = KeySpec::Keynum {
    dest: 0,
    keynum_at: 1,
};

const W_FAST: &[&str] = &["@write", "@list", "@fast"];
const W_SLOW: &[&str] = &["@write", "@list", "@slow"];
const R_FAST: &[&str] = &["@read", "@list", "@fast"];
const R_SLOW: &[&str] = &["@read", "@list", "@slow"];

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

macro_rules! lcmd {
    ($name:expr, $arity:expr, $flags:expr, $keys:expr, $kind:expr, $acl:expr, $since:expr, $summary:expr) => {
        CommandSpec {
            group: "list",
            acl: $acl,
            ..cmd!($name, $arity, $flags, $keys, $kind, $since, $summary)
        }
    };
}

const fn keyed(f: super::KeyedFn) -> Kind {
    Kind::Keyed(f, Cross::Never)
}

/// One row per command, kept on one line each: the table is data.
#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    lcmd!("lpush", -3, WRITE | DENYOOM | FAST, K1, keyed(lpush), W_FAST, "1.0.0", "Prepend one or multiple elements to a list"),
    lcmd!("rpush", -3, WRITE | DENYOOM | FAST, K1, keyed(rpush), W_FAST, "1.0.0", "Append one or multiple elements to a list"),
    lcmd!("lpushx", -3, WRITE | DENYOOM | FAST, K1, keyed(lpushx), W_FAST, "2.2.0", "Prepend an element to a list, only if the list exists"),
    lcmd!("rpushx", -3, WRITE | DENYOOM | FAST, K1, keyed(rpushx), W_FAST, "2.2.0", "Append an element to a list, only if the list exists"),
    lcmd!("lpop", -2, WRITE | FAST, K1, keyed(lpop), W_FAST, "1.0.0", "Remove and get the first elements in a list"),
    lcmd!("rpop", -2, WRITE | FAST, K1, keyed(rpop), W_FAST, "1.0.0", "Remove and get the last elements in a list"),
    lcmd!("llen", 2, READONLY | FAST, K1, keyed(llen), R_FAST, "1.0.0", "Get the length of a list"),
    lcmd!("lindex", 3, READONLY, K1, keyed(lindex), R_SLOW, "1.0.0", "Get an element from a list by its index"),
    lcmd!("linsert", 5, WRITE | DENYOOM, K1, keyed(linsert), W_SLOW, "2.2.0", "Insert an element before or after another element in a list"),
    lcmd!("lset", 4, WRITE | DENYOOM, K1, keyed(lset), W_SLOW, "1.0.0", "Set the value of an element in a list by its index"),
    lcmd!("lrange", 4, READONLY, K1, keyed(lrange), R_SLOW, "1.0.0", "Get a range of elements from a list"),
    lcmd!("ltrim", 4, WRITE, K1, keyed(ltrim), W_SLOW, "1.0.0", "Trim a list to the specified range"),
    lcmd!("lrem", 4, WRITE, K1, keyed(lrem), W_SLOW, "1.0.0", "Remove elements from a list"),
    lcmd!("lpos", -3, READONLY, K1, keyed(lpos), R_SLOW, "6.0.6", "Return the index of matching elements on a list"),
    lcmd!("lmove", 5, WRITE | DENYOOM, K12, Kind::Keyed(lmove, Cross::Coordinator(lmove_across)), W_SLOW, "6.2.0", "Pop an element from a list, push it to another list and return it"),
    lcmd!("rpoplpush", 3, WRITE | DENYOOM, K12, Kind::Keyed(rpoplpush, Cross::Coordinator(rpoplpush_across)), W_SLOW, "1.2.0", "Remove the last element in a list, prepend it to another list and return it"),
    lcmd!("lmpop", -4, WRITE | MOVABLE_KEYS, K_MPOP, Kind::Keyed(lmpop, Cross::Coordinator(lmpop_across)), W_SLOW, "7.0.0", "Pop elements from a list"),
];

const OUT_OF_RANGE: &str = "ERR index out of range";
const MUST_BE_POSITIVE: &str = "ERR value is out of range, must be positive";

fn arity_error(out: &mut ReplyWriter, name: &str) {
    out.error(&format!(
        "ERR wrong number of arguments for '{name}' command"
    ));
}

/// The list under a key: `Ok(None)` if missing, `Err(())` if it holds another type.
fn as_list(entry: Option<&mut Entry>) -> Result<Option<&mut ListValue>, ()> {
    match entry {
        None => Ok(None),
        Some(e) => match e.value_mut() {
            Value::List(l) => Ok(Some(l)),
            _ => Err(()),
        },
    }
}

/// Looks a key up for writing (no hit/miss accounting, as Redis's lookupKeyWrite)
/// and hands back the reply writer beside it, so pops reply straight from the list.
fn write_with_out<'c, 'a>(
    ctx: &'c mut ExecCtx<'a>,
    key: &[u8],
) -> (Option<&'c mut Entry>, &'c mut ReplyWriter<'a>) {
    let now = ctx.now;
    let lru = crate::util::lru_clock();
    let mut entry = ctx.data.dbs[ctx.db].get(key, now);
    if let Some(e) = entry.as_deref_mut() {
        e.set_lru(lru);
    }
    (entry, &mut ctx.out)
}

/// Runs `f` on the list under `key` and deletes the key if `f` emptied it (Redis
/// never keeps an empty list). `Ok(None)`: no such key; `Err(())`: another type;
/// else `f`'s result and whether the key was deleted (for its "del" event).
fn with_list<R>(
    db: &mut Db,
    key: &[u8],
    now: u64,
    f: impl FnOnce(&mut ListValue) -> R,
) -> Result<Option<(R, bool)>, ()> {
    let (r, emptied) = match as_list(db.get(key, now))? {
        None => return Ok(None),
        Some(l) => {
            let r = f(l);
            (r, l.is_empty())
        }
    };
    if emptied {
        db.remove(key);
    }
    Ok(Some((r, emptied)))
}

/// The keyspace events of a list write: `event`, then "del" if it emptied the list.
fn notify_list(event: &str, key: &[u8], db: usize, emptied: bool) {
    crate::pubsub::notify(notify::LIST, event, key, db);
    if emptied {
        crate::pubsub::notify(notify::GENERIC, "del", key, db);
    }
}

fn push_event(front: bool) -> &'static str {
    if front {
        "lpush"
    } else {
        "rpush"
    }
}

fn pop_event(front: bool) -> &'static str {
    if front {
        "lpop"
    } else {
        "rpop"
    }
}

/// Pushes `values` onto the list under `key`, creating it if missing unless
/// `only_existing` (LPUSHX / RPUSHX: then a missing key stays missing and the reply
/// is 0). Returns the new length, or `Err(())` (nothing changed) if the key holds
/// another type. One hash lookup on the hot path.
fn push_values<'v>(
    db: &mut Db,
    key: &[u8],
    now: u64,
    limits: &EncodingLimits,
    front: bool,
    only_existing: bool,
    values: impl Iterator<Item = &'v [u8]>,
) -> Result<usize, ()> {
    match as_list(db.get(key, now))? {
        Some(l) => {
            for v in values {
                l.push(v, front);
            }
            Ok(l.len())
        }
        None if only_existing => Ok(0),
        None => {
            let mut l = ListValue::new(limits);
            for v in values {
                l.push(v, front);
            }
            let n = l.len();
            // get() found nothing (and dropped an expired entry), so the key is absent.
            let lru = crate::util::lru_clock();
            db.insert_new(key, Value::List(Box::new(l)), NO_EXPIRE, lru);
            Ok(n)
        }
    }
}

/// LPUSH / RPUSH / LPUSHX / RPUSHX. `only_existing`: the X forms.
fn push_generic(ctx: &mut ExecCtx, front: bool, only_existing: bool) {
    let args = ctx.args;
    let key = args.get(1);
    let now = ctx.now;
    let limits = ctx.data.limits;
    let db = &mut ctx.data.dbs[ctx.db];
    let values = (2..args.len()).map(|i| args.get(i));
    match push_values(db, key, now, &limits, front, only_existing, values) {
        Ok(n) => {
            if n > 0 {
                ctx.notify(notify::LIST, push_event(front), key);
                ctx.dirty((args.len() - 2) as u64);
            } else {
                // LPUSHX / RPUSHX on a missing key.
                ctx.nothing_changed();
            }
            ctx.out.integer(n as i64)
        }
        Err(()) => ctx.out.error(WRONGTYPE),
    }
}

fn lpush(ctx: &mut ExecCtx) {
    push_generic(ctx, true, false)
}

fn rpush(ctx: &mut ExecCtx) {
    push_generic(ctx, false, false)
}

fn lpushx(ctx: &mut ExecCtx) {
    push_generic(ctx, true, true)
}

fn rpushx(ctx: &mut ExecCtx) {
    push_generic(ctx, false, true)
}

/// Replies with up to `count` elements taken from one end, in pop order, as an
/// array (Redis's addListRangeReply, reversed for the tail), and removes them.
/// Returns how many it removed.
fn pop_range_reply(l: &mut ListValue, out: &mut ReplyWriter, front: bool, count: usize) -> usize {
    let n = count.min(l.len());
    out.array_len(n);
    if front {
        for e in l.iter_from(0, n) {
            out.bulk(&e);
        }
        l.remove_front(n);
    } else {
        for e in l.iter_rev_from(l.len() - 1, n) {
            out.bulk(&e);
        }
        l.remove_back(n);
    }
    n
}

/// LPOP / RPOP with the optional count: a bulk reply without it, an array with it;
/// a missing key is a null (RESP2 `$-1`, or `*-1` when a count was given).
fn pop_generic(ctx: &mut ExecCtx, front: bool) {
    let argc = ctx.args.len();
    if argc > 3 {
        return arity_error(&mut ctx.out, if front { "lpop" } else { "rpop" });
    }
    let count = if argc == 3 {
        match parse_i64(ctx.args.get(2)) {
            Some(n) if n >= 0 => Some(n as usize),
            _ => return ctx.out.error(MUST_BE_POSITIVE),
        }
    } else {
        None
    };
    let key = ctx.args.get(1);
    let now = ctx.now;
    let dbi = ctx.db;
    let db = &mut ctx.data.dbs[dbi];
    let out = &mut ctx.out;
    let done = with_list(db, key, now, |l| match count {
        Some(0) => {
            out.array_len(0);
            0
        }
        Some(n) => pop_range_reply(l, out, front, n),
        None => {
            if let Some(e) = if front { l.front() } else { l.back() } {
                out.bulk(e);
            }
            if front {
                l.remove_front(1)
            } else {
                l.remove_back(1)
            }
            1
        }
    });
    let popped = match done {
        Ok(Some((n, emptied))) => {
            if n > 0 {
                notify_list(pop_event(front), key, dbi, emptied);
            }
            n
        }
        Ok(None) if count.is_some() => {
            out.null_array();
            0
        }
        Ok(None) => {
            out.null();
            0
        }
        Err(()) => return out.error(WRONGTYPE),
    };
    if popped > 0 {
        ctx.dirty(popped as u64);
    } else {
        ctx.nothing_changed();
    }
}

fn lpop(ctx: &mut ExecCtx) {
    pop_generic(ctx, true)
}

fn rpop(ctx: &mut ExecCtx) {
    pop_generic(ctx, false)
}

fn llen(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let (entry, out) = ctx.read_with_out(key);
    match as_list(entry) {
        Ok(l) => out.integer(l.map(|l| l.len()).unwrap_or(0) as i64),
        Err(()) => out.error(WRONGTYPE),
    }
}

/// LINDEX: the key is looked up before the index is parsed, as in Redis.
fn lindex(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let index = parse_i64(ctx.args.get(2));
    let (entry, out) = ctx.read_with_out(key);
    match (as_list(entry), index) {
        (Err(()), _) => out.error(WRONGTYPE),
        (Ok(None), _) => out.null(),
        (Ok(Some(_)), None) => out.error(NOT_INT),
        (Ok(Some(l)), Some(i)) => match l.get(i) {
            Some(e) => out.bulk(&e),
            None => out.null(),
        },
    }
}

/// BEFORE / AFTER → insert after the pivot?
fn parse_where(a: &[u8]) -> Option<bool> {
    if a.eq_ignore_ascii_case(b"after") {
        Some(true)
    } else if a.eq_ignore_ascii_case(b"before") {
        Some(false)
    } else {
        None
    }
}

fn linsert(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let Some(after) = parse_where(args.get(2)) else {
        return ctx.out.error(SYNTAX_ERR);
    };
    let key = args.get(1);
    let (entry, out) = write_with_out(ctx, key);
    match as_list(entry) {
        Err(()) => out.error(WRONGTYPE),
        Ok(None) => {
            out.integer(0);
            ctx.nothing_changed();
        }
        Ok(Some(l)) => {
            if l.insert_by_pivot(args.get(3), args.get(4), after) {
                out.integer(l.len() as i64);
                ctx.notify(notify::LIST, "linsert", key);
            } else {
                out.integer(-1);
                ctx.nothing_changed();
            }
        }
    }
}

fn lset(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let key = args.get(1);
    let index = parse_i64(args.get(2));
    let (entry, out) = write_with_out(ctx, key);
    match (as_list(entry), index) {
        (Err(()), _) => out.error(WRONGTYPE),
        (Ok(None), _) => out.error(NO_SUCH_KEY),
        (Ok(Some(_)), None) => out.error(NOT_INT),
        (Ok(Some(l)), Some(i)) => {
            if l.set(i, args.get(3)) {
                out.ok();
                ctx.notify(notify::LIST, "lset", key);
            } else {
                out.error(OUT_OF_RANGE)
            }
        }
    }
}

/// Redis's index window rules for LRANGE / LTRIM: negative indexes count from the
/// tail, start is clamped at 0, end at the last element. None when empty.
fn window(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let mut s = if start < 0 {
        start.saturating_add(len)
    } else {
        start
    };
    let mut e = if end < 0 {
        end.saturating_add(len)
    } else {
        end
    };
    s = s.max(0);
    if s > e || s >= len {
        return None;
    }
    e = e.min(len - 1);
    Some((s as usize, e as usize))
}

fn lrange(ctx: &mut ExecCtx) {
    let (Some(start), Some(end)) = (parse_i64(ctx.args.get(2)), parse_i64(ctx.args.get(3))) else {
        return ctx.out.error(NOT_INT);
    };
    let key = ctx.args.get(1);
    let (entry, out) = ctx.read_with_out(key);
    match as_list(entry) {
        Err(()) => out.error(WRONGTYPE),
        Ok(None) => out.array_len(0),
        Ok(Some(l)) => match window(start, end, l.len()) {
            None => out.array_len(0),
            Some((s, e)) => {
                out.array_len(e - s + 1);
                for item in l.iter_from(s, e - s + 1) {
                    out.bulk(&item);
                }
            }
        },
    }
}

fn ltrim(ctx: &mut ExecCtx) {
    let (Some(start), Some(end)) = (parse_i64(ctx.args.get(2)), parse_i64(ctx.args.get(3))) else {
        return ctx.out.error(NOT_INT);
    };
    let key = ctx.args.get(1);
    let now = ctx.now;
    let db = &mut ctx.data.dbs[ctx.db];
    let done = with_list(db, key, now, |l| {
        let len = l.len();
        match window(start, end, len) {
            None => {
                l.remove_front(len);
                len
            }
            Some((s, e)) => {
                l.remove_back(len - 1 - e);
                l.remove_front(s);
                s + (len - 1 - e)
            }
        }
    });
    match done {
        Err(()) => ctx.out.error(WRONGTYPE),
        Ok(r) => {
            match r {
                Some((removed, emptied)) => {
                    notify_list("ltrim", key, ctx.db, emptied);
                    // One per element removed: a trim that keeps everything is 0.
                    ctx.dirty(removed as u64);
                }
                None => ctx.nothing_changed(),
            }
            ctx.out.ok()
        }
    }
}

fn lrem(ctx: &mut ExecCtx) {
    let Some(count) = parse_i64(ctx.args.get(2)) else {
        return ctx.out.error(NOT_INT);
    };
    let key = ctx.args.get(1);
    let value = ctx.args.get(3);
    let now = ctx.now;
    let db = &mut ctx.data.dbs[ctx.db];
    let limit = usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX);
    match with_list(db, key, now, |l| l.remove_matching(value, limit, count < 0)) {
        Err(()) => ctx.out.error(WRONGTYPE),
        Ok(r) => {
            let (n, emptied) = r.unwrap_or((0, false));
            if n > 0 {
                notify_list("lrem", key, ctx.db, emptied);
                ctx.dirty(n as u64);
            } else {
                ctx.nothing_changed();
            }
            ctx.out.integer(n as i64)
        }
    }
}

struct LposOpts {
    /// Which match to start from (1 = the first), counted from the scan's start.
    /// Signed, as Redis keeps it: RANK -9223372036854775808 negates to itself, so
    /// every match qualifies and COUNT never stops the scan (Redis's replies for it).
    rank: i64,
    from_tail: bool,
    /// None: reply with one index; Some(0): every match.
    count: Option<u64>,
    /// Elements to look at; 0 = all.
    maxlen: u64,
}

fn parse_lpos_opts(ctx: &ExecCtx) -> Result<LposOpts, &'static str> {
    let args = ctx.args;
    let mut rank: i64 = 1;
    let mut count = None;
    let mut maxlen = 0;
    let mut j = 3;
    while j < args.len() {
        let more = j + 1 < args.len();
        if args.is(j, "rank") && more {
            j += 1;
            rank = parse_i64(args.get(j)).ok_or(NOT_INT)?;
            if rank == 0 {
                return Err("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list");
            }
        } else if args.is(j, "count") && more {
            j += 1;
            match parse_i64(args.get(j)) {
                Some(n) if n >= 0 => count = Some(n as u64),
                _ => return Err("ERR COUNT can't be negative"),
            }
        } else if args.is(j, "maxlen") && more {
            j += 1;
            match parse_i64(args.get(j)) {
                Some(n) if n >= 0 => maxlen = n as u64,
                _ => return Err("ERR MAXLEN can't be negative"),
            }
        } else {
            return Err(SYNTAX_ERR);
        }
        j += 1;
    }
    Ok(LposOpts {
        rank: if rank < 0 { rank.wrapping_neg() } else { rank },
        from_tail: rank < 0,
        count,
        maxlen,
    })
}

/// LPOS: the indexes (from the head, whichever way the scan goes) of the matches
/// starting with the RANK-th, up to COUNT of them, looking at MAXLEN elements at most.
fn lpos(ctx: &mut ExecCtx) {
    let o = match parse_lpos_opts(ctx) {
        Ok(o) => o,
        Err(e) => return ctx.out.error(e),
    };
    let key = ctx.args.get(1);
    let ele = ctx.args.get(2);
    let (entry, out) = ctx.read_with_out(key);
    let l = match as_list(entry) {
        Err(()) => return out.error(WRONGTYPE),
        Ok(None) if o.count.is_some() => return out.array_len(0),
        Ok(None) => return out.null(),
        Ok(Some(l)) => l,
    };
    let len = l.len();
    let mut found: Vec<i64> = Vec::new();
    let mut matches = 0i64;
    for (index, e) in l.scan(o.from_tail).enumerate() {
        if o.maxlen != 0 && index as u64 >= o.maxlen {
            break;
        }
        if e != ele {
            continue;
        }
        matches += 1;
        if matches < o.rank {
            continue;
        }
        found.push(if o.from_tail {
            (len - 1 - index) as i64
        } else {
            index as i64
        });
        match o.count {
            None => break,
            Some(c) if c != 0 && matches.wrapping_sub(o.rank).wrapping_add(1) >= c as i64 => break,
            _ => {}
        }
    }
    match o.count {
        Some(_) => {
            out.array_len(found.len());
            for i in found {
                out.integer(i);
            }
        }
        None => match found.first() {
            Some(&i) => out.integer(i),
            None => out.null(),
        },
    }
}

/// LEFT / RIGHT → from/to the head?
pub(crate) fn parse_side(a: &[u8]) -> Option<bool> {
    if a.eq_ignore_ascii_case(b"left") {
        Some(true)
    } else if a.eq_ignore_ascii_case(b"right") {
        Some(false)
    } else {
        None
    }
}

/// LMOVE / RPOPLPUSH with both keys on this shard. A missing source is a null reply
/// whatever the destination holds; either key of the wrong type is WRONGTYPE, checked
/// before anything changes.
fn lmove_local(ctx: &mut ExecCtx, from_front: bool, to_front: bool) {
    let args = ctx.args;
    let (src, dst) = (args.get(1), args.get(2));
    let now = ctx.now;
    let limits = ctx.data.limits;
    let db = &mut ctx.data.dbs[ctx.db];
    match as_list(db.get(src, now)) {
        Err(()) => return ctx.out.error(WRONGTYPE),
        Ok(None) => {
            ctx.nothing_changed();
            return ctx.out.null();
        }
        Ok(Some(_)) => {}
    }
    if as_list(db.get(dst, now)).is_err() {
        return ctx.out.error(WRONGTYPE);
    }
    // Pop first, push second, delete an emptied source last: with src == dst the
    // element goes round and the key survives.
    let Some(Some(v)) = as_list(db.get(src, now))
        .ok()
        .flatten()
        .map(|l| l.pop(from_front))
    else {
        return ctx.out.null();
    };
    let pushed = push_values(
        db,
        dst,
        now,
        &limits,
        to_front,
        false,
        std::iter::once(v.as_slice()),
    );
    let emptied = matches!(as_list(db.get(src, now)), Ok(Some(l)) if l.is_empty());
    if emptied {
        db.remove(src);
    }
    match pushed {
        Ok(_) => {
            notify_move(src, dst, ctx.db, from_front, to_front, emptied);
            // Two keys written, one change (Redis's lmoveGenericCommand).
            ctx.dirty(1);
            ctx.out.bulk(&v)
        }
        Err(()) => ctx.out.error(WRONGTYPE),
    }
}

/// LMOVE's events in Redis's order: the push on the destination, the pop on the
/// source, and "del" if the source was emptied.
fn notify_move(src: &[u8], dst: &[u8], db: usize, from_front: bool, to: bool, emptied: bool) {
    crate::pubsub::notify(notify::LIST, push_event(to), dst, db);
    notify_list(pop_event(from_front), src, db, emptied);
}

fn lmove(ctx: &mut ExecCtx) {
    let (Some(from), Some(to)) = (parse_side(ctx.args.get(3)), parse_side(ctx.args.get(4))) else {
        return ctx.out.error(SYNTAX_ERR);
    };
    lmove_local(ctx, from, to)
}

fn rpoplpush(ctx: &mut ExecCtx) {
    lmove_local(ctx, false, true)
}

/// Outcome of the source side of a cross-shard move.
enum MoveSrc {
    Missing,
    WrongType,
    Popped(Vec<u8>),
}

/// LMOVE / RPOPLPUSH with the keys on two shards: lock both, check the destination's
/// type, pop on the source shard only if both checks pass, push on the destination
/// shard. Nobody sees the element in neither or both lists.
async fn lmove_across_generic(g: &mut GlobalCtx<'_>, from_front: bool, to_front: bool) {
    let db = g.session.db;
    let (src, dst) = (g.args[1].clone(), g.args[2].clone());
    let cell = g.session.cell.clone();
    let mut op = MultiShardOp::lock_keys(g.owner(), &cell, db, &[src.clone(), dst.clone()]).await;
    let d = dst.clone();
    let dst_ok = op
        .on(&cell, cell.shard_of(&dst), move |data| {
            as_list(data.dbs[db].get(&d, crate::util::now_ms())).is_ok()
        })
        .await;
    let s = src.clone();
    let (popped, emptied) = op
        .on(&cell, cell.shard_of(&src), move |data| {
            let dbr = &mut data.dbs[db];
            let r = with_list(dbr, &s, crate::util::now_ms(), |l| {
                if dst_ok {
                    l.pop(from_front)
                } else {
                    None
                }
            });
            match r {
                Ok(None) => (MoveSrc::Missing, false),
                Ok(Some((Some(v), emptied))) => (MoveSrc::Popped(v), emptied),
                Ok(Some((None, _))) | Err(()) => (MoveSrc::WrongType, false),
            }
        })
        .await;
    let popped = match popped {
        MoveSrc::Popped(v) => {
            let d = dst.clone();
            op.on(&cell, cell.shard_of(&dst), move |data| {
                let limits = data.limits;
                let now = crate::util::now_ms();
                let r = push_values(
                    &mut data.dbs[db],
                    &d,
                    now,
                    &limits,
                    to_front,
                    false,
                    std::iter::once(v.as_slice()),
                );
                r.map(|_| v)
            })
            .await
            .map(MoveSrc::Popped)
            .unwrap_or(MoveSrc::WrongType)
        }
        other => other,
    };
    if matches!(popped, MoveSrc::Popped(_)) {
        // From here, so subscribers get the events in Redis's order.
        notify_move(&src, &dst, db, from_front, to_front, emptied);
        // Two keys written, one change, as on one shard.
        op.count_dirty(1);
    } else {
        // A missing source (or a wrong type) moved nothing.
        op.set_read_only();
    }
    g.release(op).await;
    let mut w = g.w();
    match popped {
        MoveSrc::Missing => w.null(),
        MoveSrc::WrongType => w.error(WRONGTYPE),
        MoveSrc::Popped(v) => w.bulk(&v),
    }
}

fn lmove_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let (Some(from), Some(to)) = (parse_side(g.arg(3)), parse_side(g.arg(4))) else {
            return g.error(SYNTAX_ERR);
        };
        lmove_across_generic(g, from, to).await
    })
}

fn rpoplpush_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(lmove_across_generic(g, false, true))
}

/// LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count], parsed: (number of keys,
/// from the head?, count).
fn parse_mpop(args: &[&[u8]]) -> Result<(usize, bool, usize), &'static str> {
    let numkeys = match parse_i64(args[1]) {
        Some(n) if n > 0 => n as usize,
        _ => return Err("ERR numkeys should be greater than 0"),
    };
    let where_idx = numkeys
        .checked_add(2)
        .filter(|&i| i < args.len())
        .ok_or(SYNTAX_ERR)?;
    let front = parse_side(args[where_idx]).ok_or(SYNTAX_ERR)?;
    let mut count = None;
    let mut j = where_idx + 1;
    while j < args.len() {
        if count.is_none() && args[j].eq_ignore_ascii_case(b"count") && j + 1 < args.len() {
            j += 1;
            match parse_i64(args[j]) {
                Some(n) if n > 0 => count = Some(n as usize),
                _ => return Err("ERR count should be greater than 0"),
            }
        } else {
            return Err(SYNTAX_ERR);
        }
        j += 1;
    }
    Ok((numkeys, front, count.unwrap_or(1)))
}

/// LMPOP with every key on this shard: the first non-empty list, in argument order,
/// gives up to `count` elements, replied as [key, [elements]].
/// The pop LMPOP (and BLPOP, BRPOP, BLMPOP) propagates as.
pub(crate) fn list_pop_name(front: bool) -> &'static [u8] {
    if front {
        b"LPOP"
    } else {
        b"RPOP"
    }
}

fn lmpop(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let argv: Vec<&[u8]> = args.iter().collect();
    let (numkeys, front, count) = match parse_mpop(&argv) {
        Ok(p) => p,
        Err(e) => return ctx.out.error(e),
    };
    let now = ctx.now;
    let dbi = ctx.db;
    let db = &mut ctx.data.dbs[dbi];
    let out = &mut ctx.out;
    let mut popped_from = None;
    for (nth, &key) in argv[2..2 + numkeys].iter().enumerate() {
        let done = with_list(db, key, now, |l| {
            out.array_len(2);
            out.bulk(key);
            pop_range_reply(l, out, front, count)
        });
        match done {
            Ok(None) => continue,
            Ok(Some((n, emptied))) => {
                notify_list(pop_event(front), key, dbi, emptied);
                popped_from = Some((nth, n));
                break;
            }
            Err(()) => return out.error(WRONGTYPE),
        }
    }
    match popped_from {
        // Only the list popped from changed, by one per element.
        Some((nth, n)) => {
            ctx.only_changed(nth, true);
            ctx.dirty(n as u64);
            let cmd = list_pop_name(front);
            ctx.propagation
                .rewrite(|| super::counted_pop(cmd, argv[2 + nth], n));
        }
        None => {
            out.null_array();
            ctx.nothing_changed();
        }
    }
}

/// What one shard found for its run of LMPOP keys.
enum MpopPart {
    /// None of them holds a list.
    Nothing,
    WrongType,
    Popped(Vec<u8>, Vec<Vec<u8>>),
}

/// LMPOP over several shards: lock every key, then walk the keys in argument order,
/// one hop per run of consecutive keys on the same shard, stopping at the first list
/// (or wrong type) found.
fn lmpop_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let argv: Vec<&[u8]> = g.args.iter().map(|a| a.as_slice()).collect();
        let (numkeys, front, count) = match parse_mpop(&argv) {
            Ok(p) => p,
            Err(e) => return g.error(e),
        };
        let keys: Vec<Vec<u8>> = g.args[2..2 + numkeys].to_vec();
        let db = g.session.db;
        let cell = g.session.cell.clone();
        let mut op = MultiShardOp::lock_keys(g.owner(), &cell, db, &keys).await;
        let mut result = MpopPart::Nothing;
        let mut i = 0;
        while i < keys.len() {
            let shard = cell.shard_of(&keys[i]);
            let mut j = i + 1;
            while j < keys.len() && cell.shard_of(&keys[j]) == shard {
                j += 1;
            }
            let run: Vec<Vec<u8>> = keys[i..j].to_vec();
            result = op
                .on(&cell, shard, move |data| {
                    let dbr = &mut data.dbs[db];
                    let now = crate::util::now_ms();
                    for key in run {
                        let taken = with_list(dbr, &key, now, |l| {
                            let n = count.min(l.len());
                            let items: Vec<Vec<u8>> = if front {
                                l.iter_from(0, n).map(|e| e.to_vec()).collect()
                            } else {
                                l.iter_rev_from(l.len() - 1, n)
                                    .map(|e| e.to_vec())
                                    .collect()
                            };
                            if front {
                                l.remove_front(n)
                            } else {
                                l.remove_back(n)
                            }
                            items
                        });
                        match taken {
                            Ok(None) => continue,
                            Ok(Some((items, emptied))) => {
                                notify_list(pop_event(front), &key, db, emptied);
                                return MpopPart::Popped(key, items);
                            }
                            Err(()) => return MpopPart::WrongType,
                        }
                    }
                    MpopPart::Nothing
                })
                .await;
            if !matches!(result, MpopPart::Nothing) {
                break;
            }
            i = j;
        }
        // Only the list popped from changed.
        match &result {
            MpopPart::Popped(key, items) => {
                op.written_only(&[(db, key.as_slice())]);
                op.count_dirty(items.len() as u64);
                let cmd = list_pop_name(front);
                g.propagation
                    .rewrite(|| super::counted_pop(cmd, key, items.len()));
            }
            _ => op.set_read_only(),
        }
        g.release(op).await;
        let mut w = g.w();
        match result {
            MpopPart::Nothing => w.null_array(),
            MpopPart::WrongType => w.error(WRONGTYPE),
            MpopPart::Popped(key, items) => {
                w.array_len(2);
                w.bulk(&key);
                w.array_len(items.len());
                for item in &items {
                    w.bulk(item);
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_follows_redis_rules() {
        assert_eq!(window(0, -1, 3), Some((0, 2)));
        assert_eq!(window(-1000, 1000, 3), Some((0, 2)));
        assert_eq!(window(1, 0, 3), None);
        assert_eq!(window(-1, -2, 3), None);
        assert_eq!(window(0, -4, 3), None);
        assert_eq!(window(3, 5, 3), None);
        assert_eq!(window(i64::MIN, i64::MAX, 3), Some((0, 2)));
        assert_eq!(window(0, 0, 0), None);
    }

    #[test]
    fn mpop_argument_errors() {
        let p = |s: &str| {
            let v: Vec<&[u8]> = s.split(' ').map(|a| a.as_bytes()).collect();
            parse_mpop(&v)
        };
        assert_eq!(p("lmpop 1 k left"), Ok((1, true, 1)));
        assert_eq!(p("lmpop 2 a b RIGHT COUNT 5"), Ok((2, false, 5)));
        assert_eq!(
            p("lmpop 0 k left"),
            Err("ERR numkeys should be greater than 0")
        );
        assert_eq!(
            p("lmpop a k left"),
            Err("ERR numkeys should be greater than 0")
        );
        assert_eq!(p("lmpop 5 k left"), Err(SYNTAX_ERR));
        assert_eq!(p("lmpop 1 k bad"), Err(SYNTAX_ERR));
        assert_eq!(p("lmpop 1 k left count"), Err(SYNTAX_ERR));
        assert_eq!(p("lmpop 1 k left count 1 count 2"), Err(SYNTAX_ERR));
        assert_eq!(
            p("lmpop 1 k left count 0"),
            Err("ERR count should be greater than 0")
        );
        assert_eq!(
            p("lmpop 1 k left count -1"),
            Err("ERR count should be greater than 0")
        );
        assert_eq!(p("lmpop 9223372036854775807 k left"), Err(SYNTAX_ERR));
    }
}
