//! Sorted set commands (Redis 7.0's t_zset.c), minus the blocking BZPOPMIN / BZPOPMAX /
//! BZMPOP. Multi-key commands whose keys span shards (ZUNIONSTORE, ZRANGESTORE, ZMPOP
//! ...) run as coordinators: they lock every key, bring the inputs to the home shard,
//! compute there and write the destination on its owner, so they stay atomic.

use std::future::Future;
use std::pin::Pin;

use hashbrown::{HashMap, HashSet};

use super::table::{flags::*, CommandSpec, Cross, KeySpec, Kind};
use super::table::{K1, K12};
use super::{
    notify, parse_i64, Args, ExecCtx, GlobalCtx, OwnedArgs, NOT_FLOAT, NOT_INT, SYNTAX_ERR,
    WRONGTYPE,
};
use crate::protocol::reply::{format_double_g17, Protocol, ReplyWriter};
use crate::shard::multi::MultiShardOp;
use crate::shard::ShardData;
use crate::storage::limits::EncodingLimits;
use crate::storage::set::SetValue;
use crate::storage::zset::{
    cmp_entries, AddFlags, AddOutcome, LexBound, LexRange, Member, ScoreRange, ZSetValue,
};
use crate::storage::{Entry, Value, NO_EXPIRE};
use crate::util::glob::glob_match;

/// `numkeys key...` right after the name (ZUNION, ZMPOP, ZINTERCARD ...).
const K_NUM: KeySpec = KeySpec::Keynum {
    dest: 0,
    keynum_at: 1,
};
/// `destination numkeys key...` (ZUNIONSTORE ...).
const K_STORE: KeySpec = KeySpec::Keynum {
    dest: 1,
    keynum_at: 2,
};

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

const fn keyed(f: super::KeyedFn) -> Kind {
    Kind::Keyed(f, Cross::Never)
}

const fn across(f: super::KeyedFn, g: super::GlobalFn) -> Kind {
    Kind::Keyed(f, Cross::Coordinator(g))
}

const W_FAST: &[&str] = &["@write", "@sortedset", "@fast"];
const W_SLOW: &[&str] = &["@write", "@sortedset", "@slow"];
const R_FAST: &[&str] = &["@read", "@sortedset", "@fast"];
const R_SLOW: &[&str] = &["@read", "@sortedset", "@slow"];

macro_rules! zcmd {
    ($name:expr, $arity:expr, $flags:expr, $keys:expr, $kind:expr, $since:expr, $summary:expr, $acl:expr) => {
        CommandSpec {
            name: $name,
            arity: $arity,
            flags: $flags,
            keys: $keys,
            kind: $kind,
            group: "sorted-set",
            since: $since,
            summary: $summary,
            acl: $acl,
        }
    };
}

/// One row per command, kept on one line each so the table reads as data.
#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    zcmd!("zadd", -4, WRITE | DENYOOM | FAST, K1, keyed(zadd), "1.2.0", "Add one or more members to a sorted set, or update its score if it already exists", W_FAST),
    zcmd!("zincrby", 4, WRITE | DENYOOM | FAST, K1, keyed(zincrby), "1.2.0", "Increment the score of a member in a sorted set", W_FAST),
    zcmd!("zrem", -3, WRITE | FAST, K1, keyed(zrem), "1.2.0", "Remove one or more members from a sorted set", W_FAST),
    zcmd!("zcard", 2, READONLY | FAST, K1, keyed(zcard), "1.2.0", "Get the number of members in a sorted set", R_FAST),
    zcmd!("zscore", 3, READONLY | FAST, K1, keyed(zscore), "1.2.0", "Get the score associated with the given member in a sorted set", R_FAST),
    zcmd!("zmscore", -3, READONLY | FAST, K1, keyed(zmscore), "6.2.0", "Get the score associated with the given members in a sorted set", R_FAST),
    zcmd!("zrank", -3, READONLY | FAST, K1, keyed(zrank), "2.0.0", "Determine the index of a member in a sorted set", R_FAST),
    zcmd!("zrevrank", -3, READONLY | FAST, K1, keyed(zrevrank), "2.0.0", "Determine the index of a member in a sorted set, with scores ordered from high to low", R_FAST),
    zcmd!("zcount", 4, READONLY | FAST, K1, keyed(zcount), "2.0.0", "Count the members in a sorted set with scores within the given values", R_FAST),
    zcmd!("zlexcount", 4, READONLY | FAST, K1, keyed(zlexcount), "2.8.9", "Count the number of members in a sorted set between a given lexicographical range", R_FAST),
    zcmd!("zrange", -4, READONLY, K1, keyed(zrange), "1.2.0", "Return a range of members in a sorted set", R_SLOW),
    zcmd!("zrangestore", -5, WRITE | DENYOOM, K12, across(zrangestore, zrangestore_across), "6.2.0", "Store a range of members from sorted set into another key", W_SLOW),
    zcmd!("zrangebyscore", -4, READONLY, K1, keyed(zrangebyscore), "1.0.5", "Return a range of members in a sorted set, by score", R_SLOW),
    zcmd!("zrevrangebyscore", -4, READONLY, K1, keyed(zrevrangebyscore), "2.2.0", "Return a range of members in a sorted set, by score, with scores ordered from high to low", R_SLOW),
    zcmd!("zrangebylex", -4, READONLY, K1, keyed(zrangebylex), "2.8.9", "Return a range of members in a sorted set, by lexicographical range", R_SLOW),
    zcmd!("zrevrangebylex", -4, READONLY, K1, keyed(zrevrangebylex), "2.8.9", "Return a range of members in a sorted set, by lexicographical range, ordered from higher to lower strings.", R_SLOW),
    zcmd!("zrevrange", -4, READONLY, K1, keyed(zrevrange), "1.2.0", "Return a range of members in a sorted set, by index, with scores ordered from high to low", R_SLOW),
    zcmd!("zremrangebyrank", 4, WRITE, K1, keyed(zremrangebyrank), "2.0.0", "Remove all members in a sorted set within the given indexes", W_SLOW),
    zcmd!("zremrangebyscore", 4, WRITE, K1, keyed(zremrangebyscore), "1.2.0", "Remove all members in a sorted set within the given scores", W_SLOW),
    zcmd!("zremrangebylex", 4, WRITE, K1, keyed(zremrangebylex), "2.8.9", "Remove all members in a sorted set between the given lexicographical range", W_SLOW),
    zcmd!("zpopmin", -2, WRITE | FAST, K1, keyed(zpopmin), "5.0.0", "Remove and return members with the lowest scores in a sorted set", W_FAST),
    zcmd!("zpopmax", -2, WRITE | FAST, K1, keyed(zpopmax), "5.0.0", "Remove and return members with the highest scores in a sorted set", W_FAST),
    zcmd!("zmpop", -4, WRITE | MOVABLE_KEYS, K_NUM, across(zmpop, zmpop_across), "7.0.0", "Remove and return members with scores in a sorted set", W_SLOW),
    zcmd!("zrandmember", -2, READONLY, K1, keyed(zrandmember), "6.2.0", "Get one or multiple random elements from a sorted set", R_SLOW),
    zcmd!("zunion", -3, READONLY | MOVABLE_KEYS, K_NUM, across(zunion, zunion_across), "6.2.0", "Add multiple sorted sets", R_SLOW),
    zcmd!("zinter", -3, READONLY | MOVABLE_KEYS, K_NUM, across(zinter, zinter_across), "6.2.0", "Intersect multiple sorted sets", R_SLOW),
    zcmd!("zdiff", -3, READONLY | MOVABLE_KEYS, K_NUM, across(zdiff, zdiff_across), "6.2.0", "Subtract multiple sorted sets", R_SLOW),
    zcmd!("zunionstore", -4, WRITE | DENYOOM | MOVABLE_KEYS, K_STORE, across(zunionstore, zunionstore_across), "2.0.0", "Add multiple sorted sets and store the resulting sorted set in a new key", W_SLOW),
    zcmd!("zinterstore", -4, WRITE | DENYOOM | MOVABLE_KEYS, K_STORE, across(zinterstore, zinterstore_across), "2.0.0", "Intersect multiple sorted sets and store the resulting sorted set in a new key", W_SLOW),
    zcmd!("zdiffstore", -4, WRITE | DENYOOM | MOVABLE_KEYS, K_STORE, across(zdiffstore, zdiffstore_across), "6.2.0", "Subtract multiple sorted sets and store the resulting sorted set in a new key", W_SLOW),
    zcmd!("zintercard", -3, READONLY | MOVABLE_KEYS, K_NUM, across(zintercard, zintercard_across), "7.0.0", "Intersect multiple sorted sets and return the cardinality of the result", R_SLOW),
    zcmd!("zscan", -3, READONLY, K1, keyed(zscan), "2.8.0", "Incrementally iterate sorted sets elements and associated scores", R_SLOW),
];

/// A member with its score, as popped or copied out of a set.
type Scored = (Member, f64);

const MINMAX_NOT_FLOAT: &str = "ERR min or max is not a float";
const LEX_NOT_VALID: &str = "ERR min or max not valid string range item";
const NAN_RESULT: &str = "ERR resulting score is not a number (NaN)";
const MUST_BE_POSITIVE: &str = "ERR value is out of range, must be positive";

// ---------------------------------------------------------------------------
// Argument parsing
// ---------------------------------------------------------------------------

/// C's isspace() in the "C" locale.
#[inline]
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Parses all of `b` as strtod would (no leading space): the value, and whether it
/// overflowed or underflowed (strtod's ERANGE). None if strtod would stop early.
fn strtod_all(b: &[u8]) -> Option<(f64, bool)> {
    let s = std::str::from_utf8(b).ok()?;
    let (neg, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let sign = if neg { -1.0 } else { 1.0 };
    let lower = body.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" {
        return Some((sign * f64::INFINITY, false));
    }
    if lower == "nan" || (lower.starts_with("nan(") && lower.ends_with(')')) {
        return Some((f64::NAN, false));
    }
    // Decimal only: digits, one optional point, an optional exponent.
    let first = *body.as_bytes().first()?;
    if !(first.is_ascii_digit() || first == b'.') {
        return None;
    }
    let v: f64 = body.parse().ok()?;
    let mantissa = body.split(['e', 'E']).next().unwrap_or("");
    let range_err =
        v.is_infinite() || (v == 0.0 && mantissa.bytes().any(|c| (b'1'..=b'9').contains(&c)));
    Some((sign * v, range_err))
}

/// A score argument, as Redis's getDoubleFromObject reads it: the whole string, no
/// leading space, no overflow or underflow to zero, never NaN.
fn parse_score(b: &[u8]) -> Option<f64> {
    if b.first().is_none_or(|&c| is_c_space(c)) {
        return None;
    }
    let (v, range_err) = strtod_all(b)?;
    let underflow_to_zero = range_err && v == 0.0;
    let overflow = range_err && v.is_infinite();
    if v.is_nan() || underflow_to_zero || overflow {
        None
    } else {
        Some(v)
    }
}

/// One end of a score range (zslParseRange): `(` for exclusive, then a strtod float
/// (leading spaces allowed, an empty string reads as 0, NaN rejected).
fn parse_range_end(b: &[u8]) -> Option<(f64, bool)> {
    let (ex, body) = match b.first() {
        Some(b'(') => (true, &b[1..]),
        _ => (false, b),
    };
    if body.is_empty() {
        return Some((0.0, ex));
    }
    let start = body.iter().position(|&c| !is_c_space(c))?;
    let (v, _) = strtod_all(&body[start..])?;
    if v.is_nan() {
        None
    } else {
        Some((v, ex))
    }
}

fn parse_score_range(min: &[u8], max: &[u8]) -> Option<ScoreRange> {
    let (min, minex) = parse_range_end(min)?;
    let (max, maxex) = parse_range_end(max)?;
    Some(ScoreRange {
        min,
        minex,
        max,
        maxex,
    })
}

fn parse_lex_end(b: &[u8]) -> Option<LexBound> {
    match *b.first()? {
        b'+' if b.len() == 1 => Some(LexBound::PosInf),
        b'-' if b.len() == 1 => Some(LexBound::NegInf),
        b'(' => Some(LexBound::Excl(b[1..].to_vec())),
        b'[' => Some(LexBound::Incl(b[1..].to_vec())),
        _ => None,
    }
}

fn parse_lex_range(min: &[u8], max: &[u8]) -> Option<LexRange> {
    Some(LexRange {
        min: parse_lex_end(min)?,
        max: parse_lex_end(max)?,
    })
}

/// Redis's getRangeLongFromObjectOrReply with a custom message for both a non-integer
/// and an out-of-range value.
fn parse_in_range(b: &[u8], min: i64, msg: &'static str) -> Result<i64, &'static str> {
    match parse_i64(b) {
        Some(n) if n >= min => Ok(n),
        _ => Err(msg),
    }
}

// ---------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------

enum Found<'e> {
    Missing,
    WrongType,
    ZSet(&'e mut ZSetValue),
}

fn as_zset(e: Option<&mut Entry>) -> Found<'_> {
    match e {
        None => Found::Missing,
        Some(e) => match e.value_mut() {
            Value::ZSet(z) => Found::ZSet(z),
            _ => Found::WrongType,
        },
    }
}

/// Replies with `n` entries from `it`: members alone, or with scores — flat pairs in
/// RESP2, one [member, score] array per entry in RESP3, as Redis 7.0 does.
fn reply_entries<'a>(
    out: &mut ReplyWriter,
    n: usize,
    withscores: bool,
    it: impl Iterator<Item = (&'a [u8], f64)>,
) {
    let resp3 = out.proto == Protocol::Resp3;
    out.array_len(if withscores && !resp3 { n * 2 } else { n });
    for (m, s) in it.take(n) {
        if withscores && resp3 {
            out.array_len(2);
        }
        out.bulk(m);
        if withscores {
            out.double(s);
        }
    }
}

/// Deletes `key` once its sorted set became empty (Redis never keeps empty keys);
/// true if it did.
fn drop_if_empty(ctx: &mut ExecCtx, key: &[u8]) -> bool {
    let now = ctx.now;
    let empty =
        matches!(ctx.db().get(key, now).map(|e| e.value()), Some(Value::ZSet(z)) if z.is_empty());
    if empty {
        ctx.db().remove(key);
    }
    empty
}

/// The events of a removal: `event`, then "del" if it emptied the key.
fn notify_removal(event: &str, key: &[u8], db: usize, emptied: bool) {
    crate::pubsub::notify(notify::ZSET, event, key, db);
    if emptied {
        crate::pubsub::notify(notify::GENERIC, "del", key, db);
    }
}

/// Stores a computed sorted set (replacing the key and its TTL), or deletes the key
/// when the result is empty, as Redis's *STORE commands do; emits `event` (or "del"
/// when an existing key was deleted). True if the key changed.
fn store_result(
    db: &mut crate::storage::Db,
    key: &[u8],
    z: Option<ZSetValue>,
    event: &str,
) -> bool {
    match z {
        Some(z) if !z.is_empty() => {
            db.insert(
                key,
                Value::ZSet(Box::new(z)),
                NO_EXPIRE,
                crate::util::lru_clock(),
            );
            crate::pubsub::notify(notify::ZSET, event, key, db.index());
            true
        }
        _ => {
            let existed = db.remove(key).is_some();
            if existed {
                crate::pubsub::notify(notify::GENERIC, "del", key, db.index());
            }
            existed
        }
    }
}

// ---------------------------------------------------------------------------
// ZADD / ZINCRBY / ZREM
// ---------------------------------------------------------------------------

struct AddTally {
    added: i64,
    updated: i64,
    processed: i64,
    last: f64,
}

/// Applies the score/member pairs from `first` on (scores already validated).
fn apply_pairs(
    z: &mut ZSetValue,
    args: Args,
    first: usize,
    flags: AddFlags,
    limits: &EncodingLimits,
) -> Result<AddTally, ()> {
    let mut t = AddTally {
        added: 0,
        updated: 0,
        processed: 0,
        last: 0.0,
    };
    let mut i = first;
    while i + 1 < args.len() {
        let score = parse_score(args.get(i)).ok_or(())?;
        match z.add(args.get(i + 1), score, flags, limits) {
            AddOutcome::Nan => return Err(()),
            AddOutcome::Nop => {}
            AddOutcome::Added(s) => {
                t.added += 1;
                t.processed += 1;
                t.last = s;
            }
            AddOutcome::Updated(s) => {
                t.updated += 1;
                t.processed += 1;
                t.last = s;
            }
            AddOutcome::Unchanged(s) => {
                t.processed += 1;
                t.last = s;
            }
        }
        i += 2;
    }
    Ok(t)
}

/// ZADD and ZINCRBY (which Redis runs through the same parser with INCR forced).
fn zadd_generic(ctx: &mut ExecCtx, zincrby: bool) {
    let args = ctx.args;
    let mut flags = AddFlags {
        incr: zincrby,
        ..AddFlags::default()
    };
    let mut ch = false;
    let mut idx = 2;
    while idx < args.len() {
        let a = args.get(idx);
        if a.eq_ignore_ascii_case(b"nx") {
            flags.nx = true;
        } else if a.eq_ignore_ascii_case(b"xx") {
            flags.xx = true;
        } else if a.eq_ignore_ascii_case(b"ch") {
            ch = true;
        } else if a.eq_ignore_ascii_case(b"incr") {
            flags.incr = true;
        } else if a.eq_ignore_ascii_case(b"gt") {
            flags.gt = true;
        } else if a.eq_ignore_ascii_case(b"lt") {
            flags.lt = true;
        } else {
            break;
        }
        idx += 1;
    }
    let elements = args.len() - idx;
    if elements == 0 || !elements.is_multiple_of(2) {
        return ctx.error(SYNTAX_ERR);
    }
    let pairs = elements / 2;
    if flags.nx && flags.xx {
        return ctx.error("ERR XX and NX options at the same time are not compatible");
    }
    // Any two of GT, LT and NX.
    if u8::from(flags.gt) + u8::from(flags.lt) + u8::from(flags.nx) > 1 {
        return ctx.error("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if flags.incr && pairs > 1 {
        return ctx.error("ERR INCR option supports a single increment-element pair");
    }
    // Every score is checked before anything changes: the command is all or nothing.
    if (0..pairs).any(|j| parse_score(args.get(idx + 2 * j)).is_none()) {
        return ctx.error(NOT_FLOAT);
    }
    let key = args.get(1);
    let limits = ctx.data.limits;
    let tally = match as_zset(ctx.lookup_write(key)) {
        Found::WrongType => return ctx.error(WRONGTYPE),
        Found::ZSet(z) => {
            z.maybe_convert(pairs, &limits);
            apply_pairs(z, args, idx, flags, &limits)
        }
        Found::Missing if flags.xx => Ok(AddTally {
            added: 0,
            updated: 0,
            processed: 0,
            last: 0.0,
        }),
        Found::Missing => {
            let mut z = ZSetValue::with_hint(pairs, args.get(idx + 1).len(), &limits);
            let t = apply_pairs(&mut z, args, idx, flags, &limits);
            if !z.is_empty() {
                let lru = crate::util::lru_clock();
                ctx.db()
                    .insert(key, Value::ZSet(Box::new(z)), NO_EXPIRE, lru);
            }
            t
        }
    };
    let Ok(t) = tally else {
        return ctx.error(NAN_RESULT);
    };
    if t.added + t.updated > 0 {
        ctx.notify(notify::ZSET, if flags.incr { "zincr" } else { "zadd" }, key);
        ctx.dirty((t.added + t.updated) as u64);
    } else {
        ctx.nothing_changed();
    }
    if flags.incr {
        if t.processed > 0 {
            ctx.out.double(t.last)
        } else {
            ctx.out.null()
        }
    } else {
        ctx.out
            .integer(if ch { t.added + t.updated } else { t.added })
    }
}

fn zadd(ctx: &mut ExecCtx) {
    zadd_generic(ctx, false)
}

fn zincrby(ctx: &mut ExecCtx) {
    zadd_generic(ctx, true)
}

fn zrem(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let key = args.get(1);
    let removed = match as_zset(ctx.lookup_write(key)) {
        Found::Missing => {
            ctx.nothing_changed();
            return ctx.out.integer(0);
        }
        Found::WrongType => return ctx.error(WRONGTYPE),
        Found::ZSet(z) => {
            let mut n = 0;
            for i in 2..args.len() {
                if z.remove(args.get(i)).is_some() {
                    n += 1;
                    if z.is_empty() {
                        break;
                    }
                }
            }
            n
        }
    };
    let emptied = drop_if_empty(ctx, key);
    if removed > 0 {
        notify_removal("zrem", key, ctx.db, emptied);
        ctx.dirty(removed as u64);
    } else {
        ctx.nothing_changed();
    }
    ctx.out.integer(removed);
}

// ---------------------------------------------------------------------------
// Point reads
// ---------------------------------------------------------------------------

fn zcard(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let (e, out) = ctx.read_with_out(key);
    match as_zset(e) {
        Found::Missing => out.integer(0),
        Found::WrongType => out.error(WRONGTYPE),
        Found::ZSet(z) => out.integer(z.len() as i64),
    }
}

fn zscore(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let (e, out) = ctx.read_with_out(args.get(1));
    match as_zset(e) {
        Found::Missing => out.null(),
        Found::WrongType => out.error(WRONGTYPE),
        Found::ZSet(z) => match z.score(args.get(2)) {
            Some(s) => out.double(s),
            None => out.null(),
        },
    }
}

fn zmscore(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let (e, out) = ctx.read_with_out(args.get(1));
    let z = match as_zset(e) {
        Found::WrongType => return out.error(WRONGTYPE),
        Found::Missing => None,
        Found::ZSet(z) => Some(z),
    };
    out.array_len(args.len() - 2);
    for i in 2..args.len() {
        match z.as_ref().and_then(|z| z.score(args.get(i))) {
            Some(s) => out.double(s),
            None => out.null(),
        }
    }
}

/// ZRANK / ZREVRANK key member [WITHSCORE] (WITHSCORE: Redis 7.2).
fn zrank_generic(ctx: &mut ExecCtx, rev: bool) {
    let args = ctx.args;
    if args.len() > 4 {
        let name = if rev { "zrevrank" } else { "zrank" };
        return ctx.error(&format!(
            "ERR wrong number of arguments for '{name}' command"
        ));
    }
    let with_score = args.len() == 4;
    if with_score && !args.is(3, "withscore") {
        return ctx.error(SYNTAX_ERR);
    }
    let (e, out) = ctx.read_with_out(args.get(1));
    let none = |out: &mut ReplyWriter| {
        if with_score {
            out.null_array()
        } else {
            out.null()
        }
    };
    match as_zset(e) {
        Found::Missing => none(out),
        Found::WrongType => out.error(WRONGTYPE),
        Found::ZSet(z) => match z.rank(args.get(2)) {
            Some(r) => {
                let rank = if rev { z.len() - 1 - r } else { r };
                if with_score {
                    out.array_len(2);
                    out.integer(rank as i64);
                    out.double(z.score(args.get(2)).unwrap_or_default());
                } else {
                    out.integer(rank as i64);
                }
            }
            None => none(out),
        },
    }
}

fn zrank(ctx: &mut ExecCtx) {
    zrank_generic(ctx, false)
}

fn zrevrank(ctx: &mut ExecCtx) {
    zrank_generic(ctx, true)
}

fn zcount(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let Some(r) = parse_score_range(args.get(2), args.get(3)) else {
        return ctx.error(MINMAX_NOT_FLOAT);
    };
    let (e, out) = ctx.read_with_out(args.get(1));
    match as_zset(e) {
        Found::Missing => out.integer(0),
        Found::WrongType => out.error(WRONGTYPE),
        Found::ZSet(z) => {
            let (lo, hi) = z.score_window(&r);
            out.integer((hi - lo) as i64)
        }
    }
}

fn zlexcount(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let Some(r) = parse_lex_range(args.get(2), args.get(3)) else {
        return ctx.error(LEX_NOT_VALID);
    };
    let (e, out) = ctx.read_with_out(args.get(1));
    match as_zset(e) {
        Found::Missing => out.integer(0),
        Found::WrongType => out.error(WRONGTYPE),
        Found::ZSet(z) => {
            let (lo, hi) = z.lex_window(&r);
            out.integer((hi - lo) as i64)
        }
    }
}

// ---------------------------------------------------------------------------
// ZRANGE and its variants
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RangeType {
    Auto,
    Rank,
    Score,
    Lex,
}

#[derive(Debug, Clone)]
enum RangeBy {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexRange),
}

/// A parsed ZRANGE-family request.
#[derive(Debug, Clone)]
struct RangeQuery {
    by: RangeBy,
    rev: bool,
    offset: i64,
    /// Negative: no limit.
    limit: i64,
    withscores: bool,
}

/// Parses `<src> <min> <max> [options]` starting at `src_idx`, as Redis's
/// zrangeGenericCommand. `rev` / `kind` are fixed by the legacy commands, left open
/// (None / Auto) for ZRANGE and ZRANGESTORE.
fn parse_range(
    args: Args,
    src_idx: usize,
    store: bool,
    kind: RangeType,
    rev: Option<bool>,
) -> Result<RangeQuery, &'static str> {
    let mut kind = kind;
    let mut dir = rev;
    let mut withscores = false;
    let (mut offset, mut limit) = (0i64, -1i64);
    let mut j = src_idx + 3;
    while j < args.len() {
        let left = args.len() - j - 1;
        if !store && args.is(j, "withscores") {
            withscores = true;
        } else if args.is(j, "limit") && left >= 2 {
            offset = parse_i64(args.get(j + 1)).ok_or(NOT_INT)?;
            limit = parse_i64(args.get(j + 2)).ok_or(NOT_INT)?;
            j += 2;
        } else if dir.is_none() && args.is(j, "rev") {
            dir = Some(true);
        } else if kind == RangeType::Auto && args.is(j, "bylex") {
            kind = RangeType::Lex;
        } else if kind == RangeType::Auto && args.is(j, "byscore") {
            kind = RangeType::Score;
        } else {
            return Err(SYNTAX_ERR);
        }
        j += 1;
    }
    let rev = dir.unwrap_or(false);
    if kind == RangeType::Auto {
        kind = RangeType::Rank;
    }
    // LIMIT was given (the default limit is -1 and Redis tests exactly that).
    if limit != -1 && kind == RangeType::Rank {
        return Err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        );
    }
    if withscores && kind == RangeType::Lex {
        return Err("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
    }
    let (mut min, mut max) = (args.get(src_idx + 1), args.get(src_idx + 2));
    if rev && kind != RangeType::Rank {
        // Reverse score and lex ranges are written max first.
        std::mem::swap(&mut min, &mut max);
    }
    let by = match kind {
        RangeType::Score => RangeBy::Score(parse_score_range(min, max).ok_or(MINMAX_NOT_FLOAT)?),
        RangeType::Lex => RangeBy::Lex(parse_lex_range(min, max).ok_or(LEX_NOT_VALID)?),
        _ => RangeBy::Rank(
            parse_i64(min).ok_or(NOT_INT)?,
            parse_i64(max).ok_or(NOT_INT)?,
        ),
    };
    Ok(RangeQuery {
        by,
        rev,
        offset,
        limit,
        withscores,
    })
}

/// Clamps Redis-style (possibly negative) rank bounds to `[start, end]` within `len`;
/// None when the range is empty.
fn clamp_ranks(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let llen = len as i64;
    let mut start = if start < 0 { start + llen } else { start };
    let end = if end < 0 { end + llen } else { end };
    if start < 0 {
        start = 0;
    }
    if start > end || start >= llen {
        return None;
    }
    Some((start as usize, end.min(llen - 1) as usize))
}

/// Where a query's result starts (the first rank to visit, walking down when `rev`)
/// and how many entries it has.
fn range_window(z: &ZSetValue, q: &RangeQuery) -> (usize, usize) {
    let len = z.len();
    let (lo, hi) = match &q.by {
        RangeBy::Rank(s, e) => {
            return match clamp_ranks(*s, *e, len) {
                None => (0, 0),
                Some((s, e)) if q.rev => (len - 1 - s, e - s + 1),
                Some((s, e)) => (s, e - s + 1),
            };
        }
        RangeBy::Score(r) => z.score_window(r),
        RangeBy::Lex(r) => z.lex_window(r),
    };
    // A negative offset skips everything, as Redis's skip loop does.
    if q.offset < 0 {
        return (0, 0);
    }
    let avail = hi - lo;
    let skip = (q.offset as u64).min(avail as u64) as usize;
    let mut n = avail - skip;
    if q.limit >= 0 {
        n = n.min(q.limit as usize);
    }
    if n == 0 {
        return (0, 0);
    }
    if q.rev {
        (hi - 1 - skip, n)
    } else {
        (lo + skip, n)
    }
}

/// The entries a query selects, in ascending order, owned (for *STORE).
fn range_items(z: &ZSetValue, q: &RangeQuery) -> Vec<(Member, f64)> {
    let (start, n) = range_window(z, q);
    let mut items: Vec<(Member, f64)> = z
        .iter_from(start, q.rev)
        .take(n)
        .map(|(m, s)| (m.into(), s))
        .collect();
    if q.rev {
        items.reverse();
    }
    items
}

fn zrange_generic(ctx: &mut ExecCtx, kind: RangeType, rev: Option<bool>) {
    let args = ctx.args;
    let q = match parse_range(args, 1, false, kind, rev) {
        Ok(q) => q,
        Err(e) => return ctx.error(e),
    };
    let (e, out) = ctx.read_with_out(args.get(1));
    match as_zset(e) {
        Found::Missing => out.array_len(0),
        Found::WrongType => out.error(WRONGTYPE),
        Found::ZSet(z) => {
            let (start, n) = range_window(z, &q);
            reply_entries(out, n, q.withscores, z.iter_from(start, q.rev));
        }
    }
}

fn zrange(ctx: &mut ExecCtx) {
    zrange_generic(ctx, RangeType::Auto, None)
}

fn zrevrange(ctx: &mut ExecCtx) {
    zrange_generic(ctx, RangeType::Rank, Some(true))
}

fn zrangebyscore(ctx: &mut ExecCtx) {
    zrange_generic(ctx, RangeType::Score, Some(false))
}

fn zrevrangebyscore(ctx: &mut ExecCtx) {
    zrange_generic(ctx, RangeType::Score, Some(true))
}

fn zrangebylex(ctx: &mut ExecCtx) {
    zrange_generic(ctx, RangeType::Lex, Some(false))
}

fn zrevrangebylex(ctx: &mut ExecCtx) {
    zrange_generic(ctx, RangeType::Lex, Some(true))
}

fn zrangestore(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let q = match parse_range(args, 2, true, RangeType::Auto, None) {
        Ok(q) => q,
        Err(e) => return ctx.error(e),
    };
    let items = match as_zset(ctx.lookup_read(args.get(2))) {
        Found::WrongType => return ctx.error(WRONGTYPE),
        Found::Missing => Vec::new(),
        Found::ZSet(z) => range_items(z, &q),
    };
    let n = items.len();
    let limits = ctx.data.limits;
    let changed = store_result(
        ctx.db(),
        args.get(1),
        Some(ZSetValue::from_sorted(items, &limits)),
        "zrangestore",
    );
    // The destination is the first key; the source was only read.
    ctx.only_changed(0, changed);
    ctx.out.integer(n as i64);
}

/// ZRANGESTORE with source and destination on different shards.
fn zrangestore_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let owned = OwnedArgs::new(&g.args);
        let q = match parse_range(owned.args(), 2, true, RangeType::Auto, None) {
            Ok(q) => q,
            Err(e) => return g.error(e),
        };
        let (dst, src) = (g.args[1].clone(), g.args[2].clone());
        let db = g.session.db;
        let cell = g.session.cell.clone();
        let mut op =
            MultiShardOp::lock_keys(g.owner(), &cell, db, &[dst.clone(), src.clone()]).await;
        let src_shard = cell.shard_of(&src);
        let items = op
            .on(&cell, src_shard, move |d| {
                let now = crate::util::now_ms();
                match as_zset(read_counted(d, db, &src, now)) {
                    Found::WrongType => Err(()),
                    Found::Missing => Ok(Vec::new()),
                    Found::ZSet(z) => Ok(range_items(z, &q)),
                }
            })
            .await;
        let reply = match items {
            Err(()) => Err(WRONGTYPE),
            Ok(items) => {
                let n = items.len();
                let dst_shard = cell.shard_of(&dst);
                let k = dst.clone();
                let changed = op
                    .on(&cell, dst_shard, move |d| {
                        let z = ZSetValue::from_sorted(items, &d.limits);
                        store_result(&mut d.dbs[db], &k, Some(z), "zrangestore")
                    })
                    .await;
                // The source was only read.
                let written: &[(usize, &[u8])] = &[(db, &dst)];
                op.written_only(if changed { written } else { &[] });
                Ok(n)
            }
        };
        if reply.is_err() {
            op.set_read_only();
        }
        g.release(op).await;
        match reply {
            Ok(n) => g.w().integer(n as i64),
            Err(e) => g.error(e),
        }
    })
}

/// A read lookup on a shard's data outside a handler, counting the hit or miss.
fn read_counted<'d>(
    d: &'d mut ShardData,
    db: usize,
    key: &[u8],
    now: u64,
) -> Option<&'d mut Entry> {
    let e = d.dbs[db].get(key, now);
    if e.is_some() {
        d.stats.keyspace_hits += 1;
    } else {
        d.stats.keyspace_misses += 1;
    }
    e
}

// ---------------------------------------------------------------------------
// ZREMRANGEBY*
// ---------------------------------------------------------------------------

fn zremrange_generic(ctx: &mut ExecCtx, kind: RangeType) {
    let args = ctx.args;
    let (min, max) = (args.get(2), args.get(3));
    let by = match kind {
        RangeType::Score => match parse_score_range(min, max) {
            Some(r) => RangeBy::Score(r),
            None => return ctx.error(MINMAX_NOT_FLOAT),
        },
        RangeType::Lex => match parse_lex_range(min, max) {
            Some(r) => RangeBy::Lex(r),
            None => return ctx.error(LEX_NOT_VALID),
        },
        _ => match (parse_i64(min), parse_i64(max)) {
            (Some(s), Some(e)) => RangeBy::Rank(s, e),
            _ => return ctx.error(NOT_INT),
        },
    };
    let key = args.get(1);
    let removed = match as_zset(ctx.lookup_write(key)) {
        Found::Missing => {
            ctx.nothing_changed();
            return ctx.out.integer(0);
        }
        Found::WrongType => return ctx.error(WRONGTYPE),
        Found::ZSet(z) => {
            let (lo, hi) = match &by {
                RangeBy::Rank(s, e) => match clamp_ranks(*s, *e, z.len()) {
                    Some((s, e)) => (s, e + 1),
                    None => (0, 0),
                },
                RangeBy::Score(r) => z.score_window(r),
                RangeBy::Lex(r) => z.lex_window(r),
            };
            z.remove_ranks(lo, hi)
        }
    };
    let emptied = drop_if_empty(ctx, key);
    if removed > 0 {
        let event = match kind {
            RangeType::Score => "zremrangebyscore",
            RangeType::Lex => "zremrangebylex",
            _ => "zremrangebyrank",
        };
        notify_removal(event, key, ctx.db, emptied);
        ctx.dirty(removed as u64);
    } else {
        ctx.nothing_changed();
    }
    ctx.out.integer(removed as i64);
}

fn zremrangebyrank(ctx: &mut ExecCtx) {
    zremrange_generic(ctx, RangeType::Rank)
}

fn zremrangebyscore(ctx: &mut ExecCtx) {
    zremrange_generic(ctx, RangeType::Score)
}

fn zremrangebylex(ctx: &mut ExecCtx) {
    zremrange_generic(ctx, RangeType::Lex)
}

// ---------------------------------------------------------------------------
// ZPOPMIN / ZPOPMAX / ZMPOP
// ---------------------------------------------------------------------------

/// Replies with popped entries: flat [m, s, ...] or nested [[m, s], ...].
fn reply_popped(out: &mut ReplyWriter, items: &[(Member, f64)], nested: bool) {
    out.array_len(if nested { items.len() } else { items.len() * 2 });
    for (m, s) in items {
        if nested {
            out.array_len(2);
        }
        out.bulk(m);
        out.double(*s);
    }
}

fn zpop_generic(ctx: &mut ExecCtx, max: bool) {
    let args = ctx.args;
    if args.len() > 3 {
        return ctx.error(SYNTAX_ERR);
    }
    // None: the plain form, which always answers with a flat pair.
    let count = if args.len() == 3 {
        match parse_in_range(args.get(2), 0, MUST_BE_POSITIVE) {
            Ok(n) => Some(n as usize),
            Err(e) => return ctx.error(e),
        }
    } else {
        None
    };
    let key = args.get(1);
    let items = match as_zset(ctx.lookup_write(key)) {
        Found::WrongType => return ctx.error(WRONGTYPE),
        Found::Missing => Vec::new(),
        Found::ZSet(_) if count == Some(0) => Vec::new(),
        Found::ZSet(z) => z.pop(max, count.unwrap_or(1)),
    };
    let emptied = drop_if_empty(ctx, key);
    if !items.is_empty() {
        notify_removal(pop_event(max), key, ctx.db, emptied);
        ctx.dirty(items.len() as u64);
    } else {
        ctx.nothing_changed();
    }
    let nested = ctx.out.proto == Protocol::Resp3 && count.is_some();
    reply_popped(&mut ctx.out, &items, nested);
}

fn pop_event(max: bool) -> &'static str {
    if max {
        "zpopmax"
    } else {
        "zpopmin"
    }
}

fn zpopmin(ctx: &mut ExecCtx) {
    zpop_generic(ctx, false)
}

fn zpopmax(ctx: &mut ExecCtx) {
    zpop_generic(ctx, true)
}

/// ZMPOP's arguments: the keys' index range, the end to pop from, the count.
struct MpopArgs {
    keys: std::ops::Range<usize>,
    max: bool,
    count: usize,
}

fn parse_mpop(args: Args) -> Result<MpopArgs, &'static str> {
    let numkeys = parse_in_range(args.get(1), 1, "ERR numkeys should be greater than 0")?;
    let where_idx = (numkeys as u64)
        .checked_add(2)
        .filter(|&w| w < args.len() as u64)
        .ok_or(SYNTAX_ERR)? as usize;
    let max = if args.is(where_idx, "min") {
        false
    } else if args.is(where_idx, "max") {
        true
    } else {
        return Err(SYNTAX_ERR);
    };
    let mut count = None;
    let mut j = where_idx + 1;
    while j < args.len() {
        if count.is_none() && args.is(j, "count") && j + 1 < args.len() {
            count = Some(
                parse_in_range(args.get(j + 1), 1, "ERR count should be greater than 0")? as usize,
            );
            j += 2;
        } else {
            return Err(SYNTAX_ERR);
        }
    }
    Ok(MpopArgs {
        keys: 2..where_idx,
        max,
        count: count.unwrap_or(1),
    })
}

/// ZMPOP's reply: [key, [[member, score], ...]], or a null array when nothing popped.
fn reply_mpop(out: &mut ReplyWriter, popped: Option<(&[u8], &[Scored])>) {
    match popped {
        None => out.null_array(),
        Some((key, items)) => {
            out.array_len(2);
            out.bulk(key);
            reply_popped(out, items, true);
        }
    }
}

fn zmpop(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let p = match parse_mpop(args) {
        Ok(p) => p,
        Err(e) => return ctx.error(e),
    };
    let first = p.keys.start;
    for i in p.keys {
        let key = args.get(i);
        let items = match as_zset(ctx.lookup_write(key)) {
            Found::Missing => continue,
            Found::WrongType => return ctx.error(WRONGTYPE),
            Found::ZSet(z) => z.pop(p.max, p.count),
        };
        let emptied = drop_if_empty(ctx, key);
        // Only the key popped from changed.
        ctx.only_changed(i - first, !items.is_empty());
        if !items.is_empty() {
            notify_removal(pop_event(p.max), key, ctx.db, emptied);
            ctx.dirty(items.len() as u64);
            let n = items.len();
            ctx.propagation
                .rewrite(|| super::counted_pop(zpop_name(p.max), key, n));
        }
        return reply_mpop(&mut ctx.out, Some((key, &items)));
    }
    ctx.nothing_changed();
    reply_mpop(&mut ctx.out, None)
}

/// The pop ZMPOP (and BZMPOP) propagates as.
pub(crate) fn zpop_name(max: bool) -> &'static [u8] {
    if max {
        b"ZPOPMAX"
    } else {
        b"ZPOPMIN"
    }
}

/// What one key gave ZMPOP on its shard.
enum PopStep {
    Missing,
    WrongType,
    Popped(Vec<(Member, f64)>),
}

fn zmpop_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let owned = OwnedArgs::new(&g.args);
        let p = match parse_mpop(owned.args()) {
            Ok(p) => p,
            Err(e) => return g.error(e),
        };
        let keys: Vec<Vec<u8>> = g.args[p.keys.clone()].to_vec();
        let db = g.session.db;
        let cell = g.session.cell.clone();
        let mut op = MultiShardOp::lock_keys(g.owner(), &cell, db, &keys).await;
        // The first key that is not missing decides: (key, what it gave).
        let mut outcome: Option<(Vec<u8>, PopStep)> = None;
        for key in keys {
            let k = key.clone();
            let (max, count) = (p.max, p.count);
            let step = op
                .on(&cell, cell.shard_of(&key), move |d| {
                    let dbr = &mut d.dbs[db];
                    let step = match as_zset(dbr.get(&k, crate::util::now_ms())) {
                        Found::Missing => PopStep::Missing,
                        Found::WrongType => PopStep::WrongType,
                        Found::ZSet(z) => PopStep::Popped(z.pop(max, count)),
                    };
                    let emptied = matches!(dbr.peek(&k).map(|e| e.value()), Some(Value::ZSet(z)) if z.is_empty());
                    if emptied {
                        dbr.remove(&k);
                    }
                    if matches!(&step, PopStep::Popped(items) if !items.is_empty()) {
                        notify_removal(pop_event(max), &k, db, emptied);
                    }
                    step
                })
                .await;
            if !matches!(step, PopStep::Missing) {
                outcome = Some((key, step));
                break;
            }
        }
        // Only the key popped from changed.
        match &outcome {
            Some((key, PopStep::Popped(items))) if !items.is_empty() => {
                op.written_only(&[(db, key.as_slice())]);
                op.count_dirty(items.len() as u64);
                let n = items.len();
                g.propagation
                    .rewrite(|| super::counted_pop(zpop_name(p.max), key, n));
            }
            _ => op.set_read_only(),
        }
        g.release(op).await;
        match outcome {
            Some((_, PopStep::WrongType)) => g.error(WRONGTYPE),
            Some((key, PopStep::Popped(items))) => reply_mpop(&mut g.w(), Some((&key, &items))),
            _ => reply_mpop(&mut g.w(), None),
        }
    })
}

// ---------------------------------------------------------------------------
// ZRANDMEMBER
// ---------------------------------------------------------------------------

fn zrandmember(ctx: &mut ExecCtx) {
    let args = ctx.args;
    if args.len() >= 3 {
        let l = match parse_i64(args.get(2)) {
            None => return ctx.error(NOT_INT),
            Some(i64::MIN) => {
                return ctx.error("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
            }
            Some(l) => l,
        };
        if args.len() > 4 || (args.len() == 4 && !args.is(3, "withscores")) {
            return ctx.error(SYNTAX_ERR);
        }
        let withscores = args.len() == 4;
        if withscores && !(-i64::MAX / 2..=i64::MAX / 2).contains(&l) {
            return ctx.error("ERR value is out of range");
        }
        return zrandmember_count(ctx, l, withscores);
    }
    let now = ctx.now;
    let ShardData {
        dbs, stats, rng, ..
    } = &mut *ctx.data;
    let e = dbs[ctx.db].get(args.get(1), now);
    if e.is_some() {
        stats.keyspace_hits += 1;
    } else {
        stats.keyspace_misses += 1;
    }
    match as_zset(e) {
        Found::Missing => ctx.out.null(),
        Found::WrongType => ctx.out.error(WRONGTYPE),
        Found::ZSet(z) => match z.get(rng.below(z.len())) {
            Some((m, _)) => ctx.out.bulk(m),
            None => ctx.out.null(),
        },
    }
}

fn zrandmember_count(ctx: &mut ExecCtx, l: i64, withscores: bool) {
    let now = ctx.now;
    let key = ctx.args.get(1);
    let ShardData {
        dbs, stats, rng, ..
    } = &mut *ctx.data;
    let out = &mut ctx.out;
    let e = dbs[ctx.db].get(key, now);
    if e.is_some() {
        stats.keyspace_hits += 1;
    } else {
        stats.keyspace_misses += 1;
    }
    let z = match as_zset(e) {
        Found::Missing => return out.array_len(0),
        Found::WrongType => return out.error(WRONGTYPE),
        Found::ZSet(z) => z,
    };
    let count = l.unsigned_abs() as usize;
    let size = z.len();
    let resp3 = out.proto == Protocol::Resp3;
    let header = |out: &mut ReplyWriter, n: usize| {
        out.array_len(if withscores && !resp3 { n * 2 } else { n })
    };
    let emit = |out: &mut ReplyWriter, (m, s): (&[u8], f64)| {
        if withscores && resp3 {
            out.array_len(2);
        }
        out.bulk(m);
        if withscores {
            out.double(s);
        }
    };
    if count == 0 {
        return out.array_len(0);
    }
    // Negative count: repeats allowed, every pick independent.
    if l < 0 || count == 1 {
        header(out, count);
        for _ in 0..count {
            if let Some(e) = z.get(rng.below(size)) {
                emit(out, e);
            }
        }
        return;
    }
    // Everything: Redis answers with the whole set, highest rank first.
    if count >= size {
        header(out, size);
        for e in z.iter_from(size - 1, true) {
            emit(out, e);
        }
        return;
    }
    // Distinct picks: a partial shuffle of all ranks when most are wanted, otherwise
    // rejection sampling (Redis's CASE 3 / CASE 4).
    header(out, count);
    if count * 3 > size {
        let mut ranks: Vec<usize> = (0..size).collect();
        for i in 0..count {
            let j = i + rng.below(size - i);
            ranks.swap(i, j);
            if let Some(e) = z.get(ranks[i]) {
                emit(out, e);
            }
        }
    } else {
        let mut picked: HashSet<usize> = HashSet::with_capacity(count);
        while picked.len() < count {
            let r = rng.below(size);
            if picked.insert(r) {
                if let Some(e) = z.get(r) {
                    emit(out, e);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// ZUNION / ZINTER / ZDIFF (+STORE) / ZINTERCARD
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

/// The variant of the combining command being run.
#[derive(Debug, Clone, Copy)]
struct Combine {
    op: SetOp,
    /// ZUNIONSTORE & co: a destination at argument 1.
    store: bool,
    /// ZINTERCARD: only the size of the intersection.
    card: bool,
    name: &'static str,
}

impl Combine {
    fn numkeys_at(&self) -> usize {
        if self.store {
            2
        } else {
            1
        }
    }
}

struct CombineOpts {
    weights: Vec<f64>,
    aggregate: Aggregate,
    withscores: bool,
    /// ZINTERCARD's LIMIT; 0 = none.
    limit: usize,
}

/// Reads numkeys and checks the keys are there: the key indexes, or the error.
fn parse_numkeys(args: Args, c: Combine) -> Result<std::ops::Range<usize>, String> {
    let at = c.numkeys_at();
    let n = parse_i64(args.get(at)).ok_or_else(|| NOT_INT.to_string())?;
    if n < 1 {
        return Err(format!(
            "ERR at least 1 input key is needed for '{}' command",
            c.name
        ));
    }
    if n as u64 > (args.len() - at - 1) as u64 {
        return Err(SYNTAX_ERR.to_string());
    }
    Ok(at + 1..at + 1 + n as usize)
}

/// The options after the keys (WEIGHTS, AGGREGATE, WITHSCORES, LIMIT), as
/// zunionInterDiffGenericCommand accepts them for each variant.
fn parse_combine_opts(
    args: Args,
    c: Combine,
    keys: std::ops::Range<usize>,
) -> Result<CombineOpts, &'static str> {
    let n = keys.len();
    let mut o = CombineOpts {
        weights: vec![1.0; n],
        aggregate: Aggregate::Sum,
        withscores: false,
        limit: 0,
    };
    let mut j = keys.end;
    while j < args.len() {
        let remaining = args.len() - j;
        let scored = c.op != SetOp::Diff && !c.card;
        if scored && remaining > n && args.is(j, "weights") {
            for (i, w) in o.weights.iter_mut().enumerate() {
                *w = parse_score(args.get(j + 1 + i)).ok_or("ERR weight value is not a float")?;
            }
            j += 1 + n;
        } else if scored && remaining >= 2 && args.is(j, "aggregate") {
            let a = args.get(j + 1);
            o.aggregate = if a.eq_ignore_ascii_case(b"sum") {
                Aggregate::Sum
            } else if a.eq_ignore_ascii_case(b"min") {
                Aggregate::Min
            } else if a.eq_ignore_ascii_case(b"max") {
                Aggregate::Max
            } else {
                return Err(SYNTAX_ERR);
            };
            j += 2;
        } else if !c.store && !c.card && args.is(j, "withscores") {
            o.withscores = true;
            j += 1;
        } else if c.card && remaining >= 2 && args.is(j, "limit") {
            o.limit = parse_in_range(args.get(j + 1), 0, "ERR LIMIT can't be negative")? as usize;
            j += 2;
        } else {
            return Err(SYNTAX_ERR);
        }
    }
    Ok(o)
}

/// One input of a combining command.
enum Input<'a> {
    Empty,
    ZSet(&'a ZSetValue),
    /// A plain set: every member counts with score 1.
    Set(HashSet<Vec<u8>>),
    /// The same, borrowed from a fetched copy.
    SetRef(&'a HashSet<Vec<u8>>),
}

impl Input<'_> {
    fn len(&self) -> usize {
        match self {
            Input::Empty => 0,
            Input::ZSet(z) => z.len(),
            Input::Set(s) => s.len(),
            Input::SetRef(s) => s.len(),
        }
    }

    fn score(&self, m: &[u8]) -> Option<f64> {
        match self {
            Input::Empty => None,
            Input::ZSet(z) => z.score(m),
            Input::Set(s) => s.contains(m).then_some(1.0),
            Input::SetRef(s) => s.contains(m).then_some(1.0),
        }
    }

    fn entries(&self) -> Box<dyn Iterator<Item = (&[u8], f64)> + '_> {
        match self {
            Input::Empty => Box::new(std::iter::empty()),
            Input::ZSet(z) => Box::new(z.iter()),
            Input::Set(s) => Box::new(s.iter().map(|m| (m.as_slice(), 1.0))),
            Input::SetRef(s) => Box::new(s.iter().map(|m| (m.as_slice(), 1.0))),
        }
    }
}

/// A value as a combining input: Err for a type that is neither zset nor set.
fn input_of(v: Option<&Value>) -> Result<Input<'_>, ()> {
    match v {
        None => Ok(Input::Empty),
        Some(Value::ZSet(z)) => Ok(Input::ZSet(z)),
        Some(Value::Set(s)) => Ok(Input::Set(set_members(s))),
        Some(_) => Err(()),
    }
}

/// A set's members, copied out: the combining code works on owned byte strings.
fn set_members(s: &SetValue) -> HashSet<Vec<u8>> {
    s.iter().map(|m| m.with_bytes(|b| b.to_vec())).collect()
}

fn aggregate(target: &mut f64, val: f64, how: Aggregate) {
    match how {
        Aggregate::Sum => {
            *target += val;
            // inf + -inf: Redis's convention is 0.
            if target.is_nan() {
                *target = 0.0;
            }
        }
        Aggregate::Min => {
            if val < *target {
                *target = val
            }
        }
        Aggregate::Max => {
            if val > *target {
                *target = val
            }
        }
    }
}

/// Computes the combined entries, sorted by (score, member).
fn combine<'a>(inputs: &'a [Input<'a>], c: Combine, o: &CombineOpts) -> Vec<(&'a [u8], f64)> {
    // Union and intersection visit the inputs smallest first, as Redis does (this
    // fixes the order scores are summed in).
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    if c.op != SetOp::Diff {
        order.sort_by_key(|&i| inputs[i].len());
    }
    let weighted = |s: f64, i: usize| {
        let v = s * o.weights[i];
        if v.is_nan() {
            0.0
        } else {
            v
        }
    };
    let mut out: Vec<(&'a [u8], f64)> = Vec::new();
    match c.op {
        SetOp::Inter => {
            let first = order[0];
            'members: for (m, s) in inputs[first].entries() {
                let mut score = weighted(s, first);
                for &j in &order[1..] {
                    let Some(v) = inputs[j].score(m) else {
                        continue 'members;
                    };
                    aggregate(&mut score, v * o.weights[j], o.aggregate);
                }
                out.push((m, score));
            }
        }
        SetOp::Union => {
            let mut acc: HashMap<&'a [u8], f64> = HashMap::new();
            for &i in &order {
                for (m, s) in inputs[i].entries() {
                    let score = weighted(s, i);
                    match acc.get_mut(m) {
                        Some(t) => aggregate(t, score, o.aggregate),
                        None => {
                            acc.insert(m, score);
                        }
                    }
                }
            }
            out = acc.into_iter().collect();
        }
        SetOp::Diff => {
            for (m, s) in inputs[0].entries() {
                if !inputs[1..].iter().any(|x| x.score(m).is_some()) {
                    out.push((m, s));
                }
            }
        }
    }
    out.sort_unstable_by(|a, b| cmp_entries(a.1, a.0, b.1, b.0));
    out
}

/// ZINTERCARD: the intersection's size, stopping at `limit` (0 = no limit).
fn intercard(inputs: &[Input], limit: usize) -> usize {
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    order.sort_by_key(|&i| inputs[i].len());
    let mut n = 0;
    for (m, _) in inputs[order[0]].entries() {
        if order[1..].iter().all(|&j| inputs[j].score(m).is_some()) {
            n += 1;
            if limit > 0 && n >= limit {
                break;
            }
        }
    }
    n
}

/// What a combining command produced, ready to store or reply.
enum Combined {
    Card(usize),
    Entries(Vec<(Member, f64)>, bool),
    Stored(ZSetValue),
}

fn run_combine(inputs: &[Input], c: Combine, o: &CombineOpts, limits: &EncodingLimits) -> Combined {
    if c.card {
        return Combined::Card(intercard(inputs, o.limit));
    }
    let items: Vec<(Member, f64)> = combine(inputs, c, o)
        .into_iter()
        .map(|(m, s)| (m.into(), s))
        .collect();
    if c.store {
        Combined::Stored(ZSetValue::from_sorted(items, limits))
    } else {
        Combined::Entries(items, o.withscores)
    }
}

fn reply_combined(out: &mut ReplyWriter, r: &Combined) {
    match r {
        Combined::Card(n) => out.integer(*n as i64),
        Combined::Stored(z) => out.integer(z.len() as i64),
        Combined::Entries(items, withscores) => reply_entries(
            out,
            items.len(),
            *withscores,
            items.iter().map(|(m, s)| (&**m, *s)),
        ),
    }
}

/// The combining commands with every key on this shard.
fn combine_local(ctx: &mut ExecCtx, c: Combine) {
    let args = ctx.args;
    let keys = match parse_numkeys(args, c) {
        Ok(k) => k,
        Err(e) => return ctx.error(&e),
    };
    // Look every input up first (expiring, counting hits), as Redis does before it
    // even reads the options.
    for i in keys.clone() {
        ctx.lookup_read(args.get(i));
    }
    let limits = ctx.data.limits;
    let result = {
        let db = &ctx.data.dbs[ctx.db];
        let mut inputs = Vec::with_capacity(keys.len());
        for i in keys.clone() {
            match input_of(db.peek(args.get(i)).map(|e| e.value())) {
                Ok(input) => inputs.push(input),
                Err(()) => return ctx.out.error(WRONGTYPE),
            }
        }
        let o = match parse_combine_opts(args, c, keys) {
            Ok(o) => o,
            Err(e) => return ctx.out.error(e),
        };
        run_combine(&inputs, c, &o, &limits)
    };
    reply_combined(&mut ctx.out, &result);
    if let Combined::Stored(z) = result {
        // The destination is the first key; the inputs were only read.
        let changed = store_result(ctx.db(), args.get(1), Some(z), c.name);
        ctx.only_changed(0, changed);
    }
}

/// An input fetched from its owning shard for a cross-shard combine.
enum Fetched {
    Missing,
    WrongType,
    ZSet(Box<ZSetValue>),
    Set(HashSet<Vec<u8>>),
}

async fn fetch_input(
    op: &MultiShardOp,
    cell: &std::rc::Rc<crate::shard::ShardCell>,
    db: usize,
    key: &[u8],
) -> Fetched {
    let k = key.to_vec();
    op.on(cell, cell.shard_of(key), move |d| {
        let now = crate::util::now_ms();
        match read_counted(d, db, &k, now).map(|e| e.value()) {
            None => Fetched::Missing,
            Some(Value::ZSet(z)) => Fetched::ZSet(z.clone()),
            Some(Value::Set(s)) => Fetched::Set(set_members(s)),
            Some(_) => Fetched::WrongType,
        }
    })
    .await
}

/// The combining commands with keys on several shards.
async fn combine_across(g: &mut GlobalCtx<'_>, c: Combine) {
    let owned = OwnedArgs::new(&g.args);
    let args = owned.args();
    let keys = match parse_numkeys(args, c) {
        Ok(k) => k,
        Err(e) => return g.error(&e),
    };
    let db = g.session.db;
    let cell = g.session.cell.clone();
    let mut lock: Vec<Vec<u8>> = g.args[keys.clone()].to_vec();
    if c.store {
        lock.push(g.args[1].clone());
    }
    let mut op = MultiShardOp::lock_keys(g.owner(), &cell, db, &lock).await;
    let mut fetched = Vec::with_capacity(keys.len());
    for i in keys.clone() {
        fetched.push(fetch_input(&op, &cell, db, &g.args[i]).await);
    }
    let limits = cell.data.borrow().limits;
    let result: Result<Combined, &'static str> = (|| {
        let mut inputs = Vec::with_capacity(fetched.len());
        for f in &fetched {
            inputs.push(match f {
                Fetched::Missing => Input::Empty,
                Fetched::WrongType => return Err(WRONGTYPE),
                Fetched::ZSet(z) => Input::ZSet(z),
                Fetched::Set(s) => Input::SetRef(s),
            });
        }
        let o = parse_combine_opts(args, c, keys)?;
        Ok(run_combine(&inputs, c, &o, &limits))
    })();
    let result = match result {
        Ok(Combined::Stored(z)) => {
            let n = z.len();
            let dst = g.args[1].clone();
            let k = dst.clone();
            let changed = op
                .on(&cell, cell.shard_of(&dst), move |d| {
                    store_result(&mut d.dbs[db], &k, Some(z), c.name)
                })
                .await;
            // The inputs were only read.
            let written: &[(usize, &[u8])] = &[(db, &dst)];
            op.written_only(if changed { written } else { &[] });
            Ok(Combined::Card(n))
        }
        other => {
            op.set_read_only();
            other
        }
    };
    g.release(op).await;
    match result {
        Ok(r) => reply_combined(&mut g.w(), &r),
        Err(e) => g.error(e),
    }
}

macro_rules! combine_cmds {
    ($($local:ident, $across:ident, $op:expr, $store:expr, $card:expr, $name:expr;)*) => {$(
        fn $local(ctx: &mut ExecCtx) {
            combine_local(ctx, Combine { op: $op, store: $store, card: $card, name: $name })
        }

        fn $across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
            Box::pin(combine_across(g, Combine { op: $op, store: $store, card: $card, name: $name }))
        }
    )*};
}

combine_cmds! {
    zunion, zunion_across, SetOp::Union, false, false, "zunion";
    zinter, zinter_across, SetOp::Inter, false, false, "zinter";
    zdiff, zdiff_across, SetOp::Diff, false, false, "zdiff";
    zunionstore, zunionstore_across, SetOp::Union, true, false, "zunionstore";
    zinterstore, zinterstore_across, SetOp::Inter, true, false, "zinterstore";
    zdiffstore, zdiffstore_across, SetOp::Diff, true, false, "zdiffstore";
    zintercard, zintercard_across, SetOp::Inter, false, true, "zintercard";
}

// ---------------------------------------------------------------------------
// ZSCAN
// ---------------------------------------------------------------------------

fn zscan(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let Some(cursor) = super::parse_scan_cursor(args.get(2)) else {
        return ctx.error("ERR invalid cursor");
    };
    let (e, out) = ctx.read_with_out(args.get(1));
    let z = match as_zset(e) {
        Found::Missing => {
            out.array_len(2);
            out.bulk(b"0");
            return out.array_len(0);
        }
        Found::WrongType => return out.error(WRONGTYPE),
        Found::ZSet(z) => z,
    };
    let (count, pattern) = match super::parse_scan_opts(&args) {
        Ok(o) => o,
        Err(e) => return out.error(e),
    };
    let mut found: Vec<(&[u8], f64)> = Vec::new();
    let next = z.scan(cursor, count, |m, s| {
        if pattern.is_none_or(|p| glob_match(p, m, false)) {
            found.push((m, s));
        }
    });
    let mut text = Vec::with_capacity(24);
    out.array_len(2);
    out.bulk(next.to_string().as_bytes());
    out.array_len(found.len() * 2);
    for (m, s) in found {
        out.bulk(m);
        text.clear();
        format_double_g17(s, &mut text);
        out.bulk(&text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_parsing_is_strict() {
        assert_eq!(parse_score(b"1.5"), Some(1.5));
        assert_eq!(parse_score(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_score(b"+inf"), Some(f64::INFINITY));
        assert_eq!(parse_score(b"Infinity"), Some(f64::INFINITY));
        assert_eq!(parse_score(b"1e3"), Some(1000.0));
        assert_eq!(parse_score(b".5"), Some(0.5));
        assert_eq!(parse_score(b"5."), Some(5.0));
        assert_eq!(parse_score(b"0"), Some(0.0));
        assert_eq!(parse_score(b"0e10"), Some(0.0));
        for bad in [
            &b""[..],
            b" 1",
            b"1 ",
            b"nan",
            b"abc",
            b"1e400",
            b"1e-400",
            b"--1",
            b"+-1",
            b"1e",
            b"-",
        ] {
            assert_eq!(parse_score(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        let max = "179769313486231570814527423731704356798070567525844996598917476803157260780028538760589558632766878171540458953514382464234321326889464182768467546703537516986049910576551282076245490090389328944075868508455133942304583236903222948165808559332123348274797826204144723168738177180919299881250404026184124858368.00000000000000000";
        assert_eq!(parse_score(max.as_bytes()), Some(f64::MAX));
    }

    #[test]
    fn range_ends() {
        assert_eq!(parse_range_end(b"(1"), Some((1.0, true)));
        assert_eq!(parse_range_end(b"-inf"), Some((f64::NEG_INFINITY, false)));
        assert_eq!(parse_range_end(b"("), Some((0.0, true)));
        assert_eq!(parse_range_end(b""), Some((0.0, false)));
        assert_eq!(parse_range_end(b" 2"), Some((2.0, false)));
        assert_eq!(parse_range_end(b"1e400"), Some((f64::INFINITY, false)));
        assert_eq!(parse_range_end(b"nan"), None);
        assert_eq!(parse_range_end(b"str"), None);
        assert_eq!(parse_range_end(b" "), None);
        assert_eq!(parse_lex_end(b"-"), Some(LexBound::NegInf));
        assert_eq!(parse_lex_end(b"+"), Some(LexBound::PosInf));
        assert_eq!(parse_lex_end(b"[a"), Some(LexBound::Incl(b"a".to_vec())));
        assert_eq!(parse_lex_end(b"("), Some(LexBound::Excl(Vec::new())));
        assert_eq!(parse_lex_end(b"+a"), None);
        assert_eq!(parse_lex_end(b"a"), None);
        assert_eq!(parse_lex_end(b""), None);
    }

    #[test]
    fn rank_clamping() {
        assert_eq!(clamp_ranks(0, -1, 3), Some((0, 2)));
        assert_eq!(clamp_ranks(-100, 100, 3), Some((0, 2)));
        assert_eq!(clamp_ranks(2, 1, 3), None);
        assert_eq!(clamp_ranks(3, 5, 3), None);
        assert_eq!(clamp_ranks(0, -4, 3), None);
        assert_eq!(clamp_ranks(i64::MIN, i64::MAX, 3), Some((0, 2)));
        assert_eq!(clamp_ranks(0, 0, 0), None);
    }
}
