//! Set commands (Redis's t_set.c): membership, random members, SMOVE, the set
//! algebra (SINTER/SUNION/SDIFF, their STORE forms and SINTERCARD) and SSCAN.
//!
//! The multi-key commands have one implementation of the algebra ([`compute`]) used
//! two ways: when every key is on one shard the plain handler runs there over borrowed
//! values; when keys span shards a coordinator locks them all, clones the sets from
//! their owning shards, computes at home and writes a STORE destination on its shard
//! before releasing, so no client observes a partial result.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use super::strings::cmd;
use super::table::{flags::*, CommandSpec, Cross, KeySpec, Kind};
use super::table::{K1, K12, K_ALL};
use super::{notify, parse_i64, ExecCtx, GlobalCtx, NOT_INT, SYNTAX_ERR, WRONGTYPE};
use crate::protocol::reply::ReplyWriter;
use crate::shard::multi::MultiShardOp;
use crate::shard::ShardCell;
use crate::storage::limits::EncodingLimits;
use crate::storage::set::{Member, MemberRef, SetValue};
use crate::storage::{Db, Entry, Rng, Value, NO_EXPIRE};
use crate::util::glob::glob_match;

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// A key count at argument 1, then that many keys.
const K_AFTER_NUMKEYS: KeySpec = KeySpec::Keynum {
    dest: 0,
    keynum_at: 1,
};

const OUT_OF_RANGE_POSITIVE: &str = "ERR value is out of range, must be positive";

macro_rules! scmd {
    ($name:expr, $arity:expr, $flags:expr, $keys:expr, $kind:expr, $since:expr, $summary:expr) => {
        CommandSpec {
            group: "set",
            acl: &["@set"],
            ..cmd!($name, $arity, $flags, $keys, $kind, $since, $summary)
        }
    };
}

const fn keyed(f: super::KeyedFn) -> Kind {
    Kind::Keyed(f, Cross::Never)
}

const fn across(f: super::KeyedFn, g: super::GlobalFn) -> Kind {
    Kind::Keyed(f, Cross::Coordinator(g))
}

/// The set family's rows: name, arity, flags, keys, handler (and cross-shard rule),
/// since, summary.
#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    scmd!("sadd", -3, WRITE | DENYOOM | FAST, K1, keyed(sadd), "1.0.0", "Add one or more members to a set"),
    scmd!("srem", -3, WRITE | FAST, K1, keyed(srem), "1.0.0", "Remove one or more members from a set"),
    scmd!("scard", 2, READONLY | FAST, K1, keyed(scard), "1.0.0", "Get the number of members in a set"),
    scmd!("sismember", 3, READONLY | FAST, K1, keyed(sismember), "1.0.0", "Determine if a given value is a member of a set"),
    scmd!("smismember", -3, READONLY | FAST, K1, keyed(smismember), "6.2.0", "Returns the membership associated with the given elements for a set"),
    scmd!("smembers", 2, READONLY, K1, keyed(smembers), "1.0.0", "Get all the members in a set"),
    scmd!("srandmember", -2, READONLY, K1, keyed(srandmember), "1.0.0", "Get one or multiple random members from a set"),
    scmd!("spop", -2, WRITE | FAST, K1, keyed(spop), "1.0.0", "Remove and return one or multiple random members from a set"),
    scmd!("smove", 4, WRITE | FAST, K12, across(smove, smove_across), "1.0.0", "Move a member from one set to another"),
    scmd!("sinter", -2, READONLY, K_ALL, across(sinter, sinter_across), "1.0.0", "Intersect multiple sets"),
    scmd!("sintercard", -3, READONLY | MOVABLE_KEYS, K_AFTER_NUMKEYS, across(sintercard, sintercard_across), "7.0.0", "Intersect multiple sets and return the cardinality of the result"),
    scmd!("sinterstore", -3, WRITE | DENYOOM, K_ALL, across(sinterstore, sinterstore_across), "1.0.0", "Intersect multiple sets and store the resulting set in a key"),
    scmd!("sunion", -2, READONLY, K_ALL, across(sunion, sunion_across), "1.0.0", "Add multiple sets"),
    scmd!("sunionstore", -3, WRITE | DENYOOM, K_ALL, across(sunionstore, sunionstore_across), "1.0.0", "Add multiple sets and store the resulting set in a key"),
    scmd!("sdiff", -2, READONLY, K_ALL, across(sdiff, sdiff_across), "1.0.0", "Subtract multiple sets"),
    scmd!("sdiffstore", -3, WRITE | DENYOOM, K_ALL, across(sdiffstore, sdiffstore_across), "1.0.0", "Subtract multiple sets and store the resulting set in a key"),
    scmd!("sscan", -3, READONLY, K1, keyed(sscan), "2.8.0", "Incrementally iterate Set elements"),
];

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// The set under a key: `Ok(None)` if missing, `Err(())` if it holds another type.
fn as_set(entry: Option<&mut Entry>) -> Result<Option<&mut SetValue>, ()> {
    match entry {
        None => Ok(None),
        Some(e) => match e.value_mut() {
            Value::Set(s) => Ok(Some(s)),
            _ => Err(()),
        },
    }
}

#[inline]
fn reply_member(out: &mut ReplyWriter, m: MemberRef) {
    match m {
        MemberRef::Int(n) => out.bulk_int(n),
        MemberRef::Bytes(b) => out.bulk(b),
    }
}

/// Looks a set up for reading (counting a keyspace hit or miss, as `lookup_read`
/// does) and hands back the shard's random generator and the reply writer with it.
fn read_set_rng<'c, 'a>(
    ctx: &'c mut ExecCtx<'a>,
    key: &[u8],
) -> (
    Result<Option<&'c mut SetValue>, ()>,
    &'c mut Rng,
    &'c mut ReplyWriter<'a>,
) {
    let now = ctx.now;
    let data = &mut *ctx.data;
    let entry = match data.dbs[ctx.db].get(key, now) {
        Some(e) => {
            data.stats.keyspace_hits += 1;
            e.set_lru(crate::util::lru_clock());
            Some(e)
        }
        None => {
            data.stats.keyspace_misses += 1;
            None
        }
    };
    (as_set(entry), &mut data.rng, &mut ctx.out)
}

/// Replies with every member, as a RESP3 set.
fn reply_set(out: &mut ReplyWriter, s: &SetValue) {
    out.set_len(s.len());
    for m in s.iter() {
        reply_member(out, m);
    }
}

/// Adds `member` to the set at `key`, creating the set if missing (SMOVE's
/// destination side, so it emits "sadd" when the member is new); true if it was new.
/// The caller has checked the key holds a set or nothing.
fn add_member(db: &mut Db, key: &[u8], member: &[u8], limits: &EncodingLimits, now: u64) -> bool {
    let dbi = db.index();
    if let Ok(Some(s)) = as_set(db.get(key, now)) {
        let added = s.insert(member, limits);
        if added {
            crate::pubsub::notify(notify::SET, "sadd", key, dbi);
        }
        return added;
    }
    let mut s = SetValue::default();
    s.insert(member, limits);
    db.insert(
        key,
        Value::Set(Box::new(s)),
        NO_EXPIRE,
        crate::util::lru_clock(),
    );
    crate::pubsub::notify(notify::SET, "sadd", key, dbi);
    true
}

/// Replaces `dst` with `result` (deleting it when the result is empty, as Redis
/// never stores an empty set) and returns the result's size and whether `dst` changed
/// (an empty result where there was no key changes nothing). Emits `event` (or "del"
/// when an existing destination was deleted).
fn store_result(db: &mut Db, dst: &[u8], result: SetValue, event: &str) -> (i64, bool) {
    let existed = db.remove(dst).is_some();
    let n = result.len() as i64;
    if n > 0 {
        db.insert(
            dst,
            Value::Set(Box::new(result)),
            NO_EXPIRE,
            crate::util::lru_clock(),
        );
        crate::pubsub::notify(notify::SET, event, dst, db.index());
    } else if existed {
        crate::pubsub::notify(notify::GENERIC, "del", dst, db.index());
    }
    (n, n > 0 || existed)
}

// ---------------------------------------------------------------------------
// Single-key commands
// ---------------------------------------------------------------------------

fn sadd(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let args = ctx.args;
    let limits = ctx.data.limits;
    let add_all = |s: &mut SetValue| {
        (2..args.len())
            .filter(|&i| s.insert(args.get(i), &limits))
            .count() as i64
    };
    let added = match as_set(ctx.lookup_write(key)) {
        Err(()) => return ctx.error(WRONGTYPE),
        Ok(Some(s)) => add_all(s),
        Ok(None) => {
            let mut s = SetValue::default();
            let n = add_all(&mut s);
            ctx.db().insert(
                key,
                Value::Set(Box::new(s)),
                NO_EXPIRE,
                crate::util::lru_clock(),
            );
            n
        }
    };
    if added > 0 {
        ctx.notify(notify::SET, "sadd", key);
        ctx.dirty(added as u64);
    } else {
        ctx.nothing_changed();
    }
    ctx.out.integer(added);
}

fn srem(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let args = ctx.args;
    let (removed, empty) = match as_set(ctx.lookup_write(key)) {
        Err(()) => return ctx.error(WRONGTYPE),
        Ok(None) => {
            ctx.nothing_changed();
            return ctx.out.integer(0);
        }
        Ok(Some(s)) => {
            let n = (2..args.len()).filter(|&i| s.remove(args.get(i))).count();
            (n, s.is_empty())
        }
    };
    if empty {
        ctx.db().remove(key);
    }
    if removed > 0 {
        notify_removal("srem", key, ctx.db, empty);
        ctx.dirty(removed as u64);
    } else {
        ctx.nothing_changed();
    }
    ctx.out.integer(removed as i64);
}

/// The events of a removal: `event`, then "del" if it emptied the set.
fn notify_removal(event: &str, key: &[u8], db: usize, emptied: bool) {
    crate::pubsub::notify(notify::SET, event, key, db);
    if emptied {
        crate::pubsub::notify(notify::GENERIC, "del", key, db);
    }
}

fn scard(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let (entry, out) = ctx.read_with_out(key);
    match as_set(entry) {
        Err(()) => out.error(WRONGTYPE),
        Ok(s) => out.integer(s.map_or(0, |s| s.len()) as i64),
    }
}

fn sismember(ctx: &mut ExecCtx) {
    let (key, member) = (ctx.args.get(1), ctx.args.get(2));
    let (entry, out) = ctx.read_with_out(key);
    match as_set(entry) {
        Err(()) => out.error(WRONGTYPE),
        Ok(s) => out.integer(s.is_some_and(|s| s.contains(member)) as i64),
    }
}

fn smismember(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let args = ctx.args;
    let (entry, out) = ctx.read_with_out(key);
    let set = match as_set(entry) {
        Err(()) => return out.error(WRONGTYPE),
        Ok(s) => s,
    };
    out.array_len(args.len() - 2);
    for i in 2..args.len() {
        let hit = set.as_ref().is_some_and(|s| s.contains(args.get(i)));
        out.integer(hit as i64);
    }
}

fn smembers(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let (entry, out) = ctx.read_with_out(key);
    match as_set(entry) {
        Err(()) => out.error(WRONGTYPE),
        Ok(None) => out.set_len(0),
        Ok(Some(s)) => reply_set(out, s),
    }
}

fn srandmember(ctx: &mut ExecCtx) {
    match ctx.args.len() {
        2 => {}
        3 => return srandmember_count(ctx),
        _ => return ctx.error(SYNTAX_ERR),
    }
    let key = ctx.args.get(1);
    let (set, rng, out) = read_set_rng(ctx, key);
    match set {
        Err(()) => out.error(WRONGTYPE),
        Ok(None) => out.null(),
        Ok(Some(s)) => match s.random(rng) {
            Some(m) => reply_member(out, m),
            None => out.null(),
        },
    }
}

/// SRANDMEMBER key count: distinct members for a positive count, independent draws
/// (repeats allowed) for a negative one. Always an array, in RESP3 too.
fn srandmember_count(ctx: &mut ExecCtx) {
    let Some(n) = parse_i64(ctx.args.get(2)) else {
        return ctx.error(NOT_INT);
    };
    if n == i64::MIN {
        return ctx.error("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807");
    }
    let key = ctx.args.get(1);
    let (set, rng, out) = read_set_rng(ctx, key);
    let set = match set {
        Err(()) => return out.error(WRONGTYPE),
        Ok(None) => return out.array_len(0),
        Ok(Some(s)) => s,
    };
    let count = n.unsigned_abs() as usize;
    if n < 0 {
        out.array_len(count);
        for _ in 0..count {
            if let Some(m) = set.random(rng) {
                reply_member(out, m);
            }
        }
        return;
    }
    let picked = distinct_random(set, count, rng);
    out.array_len(picked.len());
    for m in picked {
        reply_member(out, m);
    }
}

/// `count` distinct random members (all of them if the set is not bigger). Small
/// draws sample with rejection; draws close to the set's size shuffle a list of all
/// members instead, which would otherwise spend most draws on repeats.
fn distinct_random<'a>(set: &'a SetValue, count: usize, rng: &mut Rng) -> Vec<MemberRef<'a>> {
    let size = set.len();
    if count >= size {
        return set.iter().collect();
    }
    if count.saturating_mul(3) > size {
        let mut all: Vec<MemberRef> = set.iter().collect();
        // Partial Fisher-Yates: the first `count` places get a uniform sample.
        for i in 0..count {
            let j = i + rng.below(all.len() - i);
            all.swap(i, j);
        }
        all.truncate(count);
        return all;
    }
    let mut seen = hashbrown::HashSet::with_capacity(count);
    let mut picked = Vec::with_capacity(count);
    while picked.len() < count {
        let Some(m) = set.random(rng) else { break };
        if seen.insert(m) {
            picked.push(m);
        }
    }
    picked
}

fn spop(ctx: &mut ExecCtx) {
    match ctx.args.len() {
        2 => {}
        3 => return spop_count(ctx),
        _ => return ctx.error(SYNTAX_ERR),
    }
    let key = ctx.args.get(1);
    let now = ctx.now;
    let data = &mut *ctx.data;
    let db = &mut data.dbs[ctx.db];
    let (popped, empty) = match as_set(db.get(key, now)) {
        Err(()) => return ctx.out.error(WRONGTYPE),
        Ok(None) => {
            ctx.unchanged = u64::MAX;
            return ctx.out.null();
        }
        Ok(Some(s)) => {
            let Some(m) = s.random(&mut data.rng).map(|m| m.to_owned()) else {
                ctx.unchanged = u64::MAX;
                return ctx.out.null();
            };
            s.remove_ref(m.as_ref());
            (m, s.is_empty())
        }
    };
    if empty {
        db.remove(key);
    }
    notify_removal("spop", key, ctx.db, empty);
    reply_member(&mut ctx.out, popped.as_ref());
    // The member, not the random choice, reaches the replica.
    ctx.propagation
        .rewrite(|| vec![b"SREM".to_vec(), key.to_vec(), popped.as_ref().to_vec()]);
}

/// Members SPOP with a count propagates per SREM (Redis's SPOP_MOVE_BATCH_COUNT).
const SREM_BATCH: usize = 1024;

/// SPOP key count: a RESP3 set of up to `count` distinct members, removed.
fn spop_count(ctx: &mut ExecCtx) {
    // Redis's getPositiveLongFromObjectOrReply: one error for "not a number" and "< 0".
    let count = match parse_i64(ctx.args.get(2)) {
        Some(n) if n >= 0 => n as usize,
        _ => return ctx.error(OUT_OF_RANGE_POSITIVE),
    };
    let key = ctx.args.get(1);
    let now = ctx.now;
    let del = super::keys::deleted_as(ctx, "lazyfree-lazy-server-del");
    let data = &mut *ctx.data;
    let db = &mut data.dbs[ctx.db];
    let out = &mut ctx.out;
    let set = match as_set(db.get(key, now)) {
        Err(()) => return out.error(WRONGTYPE),
        Ok(None) => {
            ctx.unchanged = u64::MAX;
            return out.set_len(0);
        }
        Ok(Some(s)) => s,
    };
    if count == 0 {
        ctx.unchanged = u64::MAX;
        return out.set_len(0);
    }
    // One change per member popped.
    ctx.dirty = Some(count.min(set.len()) as u64);
    if count >= set.len() {
        reply_set(out, set);
        db.remove(key);
        // The whole set went: one DEL says it.
        ctx.propagation.rewrite(|| vec![del.to_vec(), key.to_vec()]);
        return notify_removal("spop", key, ctx.db, true);
    }
    let popped: Vec<Member> = distinct_random(set, count, &mut data.rng)
        .into_iter()
        .map(|m| m.to_owned())
        .collect();
    out.set_len(popped.len());
    for m in &popped {
        reply_member(out, m.as_ref());
        set.remove_ref(m.as_ref());
    }
    notify_removal("spop", key, ctx.db, false);
    // The members chosen, in SREMs of at most SREM_BATCH members each.
    if ctx.propagation.on() {
        ctx.propagation.nothing();
        for batch in popped.chunks(SREM_BATCH) {
            let mut argv = Vec::with_capacity(batch.len() + 2);
            argv.extend([b"SREM".to_vec(), key.to_vec()]);
            argv.extend(batch.iter().map(|m| m.as_ref().to_vec()));
            ctx.propagation.also(|| argv);
        }
    }
}

/// Whether `key` holds a set, nothing, or another type.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Holds {
    Nothing,
    Set,
    Other,
}

fn holds(db: &mut Db, key: &[u8], now: u64) -> Holds {
    match as_set(db.get(key, now)) {
        Ok(None) => Holds::Nothing,
        Ok(Some(_)) => Holds::Set,
        Err(()) => Holds::Other,
    }
}

/// SMOVE's source side: the checks in Redis's order (missing source → 0 before any
/// type error), then the removal; an emptied source is deleted.
fn smove_take(db: &mut Db, src: &[u8], dst: Holds, member: &[u8], now: u64) -> Result<bool, ()> {
    let (removed, empty) = match as_set(db.get(src, now)) {
        Ok(None) => return Ok(false),
        Err(()) => return Err(()),
        Ok(Some(_)) if dst == Holds::Other => return Err(()),
        Ok(Some(s)) => {
            let removed = s.remove(member);
            (removed, s.is_empty())
        }
    };
    if empty {
        db.remove(src);
    }
    if removed {
        notify_removal("srem", src, db.index(), empty);
    }
    Ok(removed)
}

fn smove(ctx: &mut ExecCtx) {
    let (src, dst, member) = (ctx.args.get(1), ctx.args.get(2), ctx.args.get(3));
    let now = ctx.now;
    let limits = ctx.data.limits;
    let db = &mut ctx.data.dbs[ctx.db];
    let dst_holds = holds(db, dst, now);
    if src == dst {
        let reply = match as_set(db.get(src, now)) {
            Ok(None) => Ok(0),
            Ok(Some(s)) => Ok(s.contains(member) as i64),
            Err(()) => Err(()),
        };
        ctx.nothing_changed();
        return match reply {
            Ok(n) => ctx.out.integer(n),
            Err(()) => ctx.out.error(WRONGTYPE),
        };
    }
    match smove_take(db, src, dst_holds, member, now) {
        Err(()) => ctx.out.error(WRONGTYPE),
        Ok(false) => {
            ctx.nothing_changed();
            ctx.out.integer(0)
        }
        Ok(true) => {
            // The destination may have held the member already: then only the
            // source changed (Redis signals the destination only on an addition).
            if !add_member(db, dst, member, &limits, now) {
                ctx.key_unchanged(1);
            }
            ctx.out.integer(1);
        }
    }
}

/// SMOVE with the two keys on different shards: under both locks, read the
/// destination's type, take the member from the source, then add it.
fn smove_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let (src, dst, member) = (g.args[1].clone(), g.args[2].clone(), g.args[3].clone());
        let db = g.session.db;
        let cell = g.session.cell.clone();
        let mut op =
            MultiShardOp::lock_keys(g.owner(), &cell, db, &[src.clone(), dst.clone()]).await;
        let k = dst.clone();
        let dst_holds = op
            .on(&cell, cell.shard_of(&dst), move |d| {
                holds(&mut d.dbs[db], &k, crate::util::now_ms())
            })
            .await;
        let m = member.clone();
        let k = src.clone();
        let taken = op
            .on(&cell, cell.shard_of(&src), move |d| {
                smove_take(&mut d.dbs[db], &k, dst_holds, &m, crate::util::now_ms())
            })
            .await;
        let mut added = false;
        if taken == Ok(true) {
            let k = dst.clone();
            added = op
                .on(&cell, cell.shard_of(&dst), move |d| {
                    let limits = d.limits;
                    add_member(&mut d.dbs[db], &k, &member, &limits, crate::util::now_ms())
                })
                .await;
        }
        // As on one shard: the source changed if the member left it, the destination
        // only if the member was new there.
        let written: Vec<(usize, &[u8])> = [(taken == Ok(true), &src), (added, &dst)]
            .into_iter()
            .filter(|(changed, _)| *changed)
            .map(|(_, k)| (db, k.as_slice()))
            .collect();
        op.written_only(&written);
        g.release(op).await;
        match taken {
            Err(()) => g.w().error(WRONGTYPE),
            Ok(moved) => g.w().integer(moved as i64),
        }
    })
}

fn sscan(ctx: &mut ExecCtx) {
    let Some(cursor) = super::parse_scan_cursor(ctx.args.get(2)) else {
        return ctx.error("ERR invalid cursor");
    };
    let key = ctx.args.get(1);
    let args = ctx.args;
    let (entry, out) = ctx.read_with_out(key);
    let set = match as_set(entry) {
        Err(()) => return out.error(WRONGTYPE),
        Ok(None) => {
            out.array_len(2);
            out.bulk(b"0");
            return out.array_len(0);
        }
        Ok(Some(s)) => s,
    };
    // Options are parsed after the key lookup, as Redis's scanGenericCommand does.
    let (count, pattern) = match super::parse_scan_opts(&args) {
        Ok(o) => o,
        Err(e) => return out.error(e),
    };
    let mut found: Vec<MemberRef> = Vec::new();
    let next = set.scan(cursor, count, |m| {
        if pattern.is_none_or(|p| m.with_bytes(|b| glob_match(p, b, false))) {
            found.push(m);
        }
    });
    out.array_len(2);
    out.bulk(next.to_string().as_bytes());
    out.array_len(found.len());
    for m in found {
        reply_member(out, m);
    }
}

// ---------------------------------------------------------------------------
// Set algebra
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SetOp {
    Inter,
    Union,
    Diff,
}

impl SetOp {
    /// The keyspace event of the STORE form.
    fn store_event(self) -> &'static str {
        match self {
            SetOp::Inter => "sinterstore",
            SetOp::Union => "sunionstore",
            SetOp::Diff => "sdiffstore",
        }
    }
}

/// The result of an operation: members borrowed from the inputs (intersection) or a
/// newly built set (union, difference), which is also what a STORE writes.
enum Computed<'a> {
    Refs(Vec<MemberRef<'a>>),
    Owned(SetValue),
}

impl Computed<'_> {
    fn len(&self) -> usize {
        match self {
            Computed::Refs(v) => v.len(),
            Computed::Owned(s) => s.len(),
        }
    }

    fn reply(&self, out: &mut ReplyWriter) {
        match self {
            Computed::Refs(v) => {
                out.set_len(v.len());
                v.iter().for_each(|&m| reply_member(out, m));
            }
            Computed::Owned(s) => reply_set(out, s),
        }
    }

    fn into_set(self, limits: &EncodingLimits) -> SetValue {
        match self {
            Computed::Refs(v) => SetValue::from_members(v, limits),
            Computed::Owned(s) => s,
        }
    }
}

/// Set algebra over `sets` in argument order, a missing key being an empty set.
/// `limit` > 0 stops an intersection after that many members (SINTERCARD).
fn compute<'a>(
    op: SetOp,
    sets: &[Option<&'a SetValue>],
    limit: usize,
    limits: &EncodingLimits,
) -> Computed<'a> {
    match op {
        SetOp::Inter => Computed::Refs(intersect(sets, limit)),
        SetOp::Union => {
            let mut out = SetValue::default();
            for s in sets.iter().flatten() {
                for m in s.iter() {
                    out.insert_ref(m, limits);
                }
            }
            Computed::Owned(out)
        }
        SetOp::Diff => {
            let Some(Some(first)) = sets.first() else {
                return Computed::Owned(SetValue::default());
            };
            let others: Vec<&SetValue> = sets[1..].iter().flatten().copied().collect();
            let kept = first
                .iter()
                .filter(|&m| !others.iter().any(|o| o.contains_ref(m)));
            Computed::Owned(SetValue::from_members(kept, limits))
        }
    }
}

/// Walks the smallest set and keeps the members every other set has.
fn intersect<'a>(sets: &[Option<&'a SetValue>], limit: usize) -> Vec<MemberRef<'a>> {
    let Some(mut all) = sets.iter().copied().collect::<Option<Vec<&SetValue>>>() else {
        return Vec::new();
    };
    all.sort_by_key(|s| s.len());
    let Some((&smallest, rest)) = all.split_first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for m in smallest.iter() {
        // The same key given twice is the same value: nothing to check.
        if rest
            .iter()
            .all(|s| std::ptr::eq(*s, smallest) || s.contains_ref(m))
        {
            out.push(m);
            if limit > 0 && out.len() >= limit {
                break;
            }
        }
    }
    out
}

/// Which arguments are the source keys and which (if any) the destination.
struct Layout {
    dst: Option<usize>,
    keys: std::ops::Range<usize>,
}

fn layout(argc: usize, store: bool) -> Layout {
    if store {
        Layout {
            dst: Some(1),
            keys: 2..argc,
        }
    } else {
        Layout {
            dst: None,
            keys: 1..argc,
        }
    }
}

/// The plain handler of SINTER/SUNION/SDIFF(STORE)/SINTERCARD: all keys on this shard.
fn set_op_local(ctx: &mut ExecCtx, op: SetOp, lay: Layout, card_limit: Option<usize>) {
    let args = ctx.args;
    // First pass: expire, count hits, and check types (any non-set is an error).
    for i in lay.keys.clone() {
        let entry = if lay.dst.is_some() {
            ctx.lookup_write(args.get(i))
        } else {
            ctx.lookup_read(args.get(i))
        };
        if as_set(entry).is_err() {
            return ctx.error(WRONGTYPE);
        }
    }
    let limits = ctx.data.limits;
    let db = &ctx.data.dbs[ctx.db];
    let sets: Vec<Option<&SetValue>> = lay
        .keys
        .map(|i| match db.peek(args.get(i)).map(|e| e.value()) {
            Some(Value::Set(s)) => Some(&**s),
            _ => None,
        })
        .collect();
    let result = compute(op, &sets, card_limit.unwrap_or(0), &limits);
    match (lay.dst, card_limit) {
        (_, Some(_)) => ctx.out.integer(result.len() as i64),
        (None, None) => result.reply(&mut ctx.out),
        (Some(d), None) => {
            let result = result.into_set(&limits);
            drop(sets);
            let (n, changed) = store_result(
                &mut ctx.data.dbs[ctx.db],
                args.get(d),
                result,
                op.store_event(),
            );
            // The destination is the first key; the sources were only read.
            ctx.only_changed(0, changed);
            ctx.out.integer(n);
        }
    }
}

/// For each position of `keys`, the position where that key first appears.
fn first_positions(keys: &[Vec<u8>]) -> Vec<usize> {
    let mut first: hashbrown::HashMap<&[u8], usize> = hashbrown::HashMap::with_capacity(keys.len());
    keys.iter()
        .enumerate()
        .map(|(i, k)| *first.entry(k.as_slice()).or_insert(i))
        .collect()
}

/// Clones the sets at `keys` from their owning shards, one message per shard; `Err`
/// if any key holds another type. A key named twice is fetched once, at the position
/// `first` gives it; other positions stay None.
async fn fetch_sets(
    op: &MultiShardOp,
    cell: &Rc<ShardCell>,
    db: usize,
    keys: &[Vec<u8>],
    first: &[usize],
) -> Result<Vec<Option<SetValue>>, ()> {
    let mut by_shard: BTreeMap<usize, Vec<(usize, Vec<u8>)>> = BTreeMap::new();
    for (i, k) in keys.iter().enumerate().filter(|&(i, _)| first[i] == i) {
        by_shard
            .entry(cell.shard_of(k))
            .or_default()
            .push((i, k.clone()));
    }
    let mut out: Vec<Option<SetValue>> = vec![None; keys.len()];
    for (shard, items) in by_shard {
        let got = op
            .on(cell, shard, move |d| {
                let now = crate::util::now_ms();
                let mut got = Vec::with_capacity(items.len());
                for (i, k) in items {
                    match as_set(d.dbs[db].get(&k, now)) {
                        Err(()) => return Err(()),
                        Ok(s) => got.push((i, s.map(|s| s.clone()))),
                    }
                }
                Ok(got)
            })
            .await?;
        for (i, s) in got {
            out[i] = s;
        }
    }
    Ok(out)
}

/// The multi-shard form of [`set_op_local`]: lock every key (and the destination),
/// clone the sources home, compute, store on the destination's shard, release.
async fn set_op_across(g: &mut GlobalCtx<'_>, op: SetOp, lay: Layout, card_limit: Option<usize>) {
    let db = g.session.db;
    let cell = g.session.cell.clone();
    let keys: Vec<Vec<u8>> = g.args[lay.keys.clone()].to_vec();
    let mut locked = keys.clone();
    locked.extend(lay.dst.map(|d| g.args[d].clone()));
    let mut msop = MultiShardOp::lock_keys(g.owner(), &cell, db, &locked).await;
    let first = first_positions(&keys);
    let fetched = fetch_sets(&msop, &cell, db, &keys, &first).await;
    let limits = cell.data.borrow().limits;
    let reply = match fetched {
        Err(()) => Err(()),
        Ok(values) => {
            // A repeated key reads its first fetch: the same value, as in the local path.
            let sets: Vec<Option<&SetValue>> = first.iter().map(|&i| values[i].as_ref()).collect();
            let result = compute(op, &sets, card_limit.unwrap_or(0), &limits);
            match (lay.dst, card_limit) {
                (_, Some(_)) => Ok(Err(result.len() as i64)),
                (None, None) => {
                    let mut buf = Vec::new();
                    result.reply(&mut ReplyWriter::new(&mut buf, g.proto()));
                    Ok(Ok(buf))
                }
                (Some(d), None) => {
                    let result = result.into_set(&limits);
                    let dst = g.args[d].clone();
                    let k = dst.clone();
                    let (n, changed) = msop
                        .on(&cell, cell.shard_of(&dst), move |d| {
                            store_result(&mut d.dbs[db], &k, result, op.store_event())
                        })
                        .await;
                    // The sources were only read.
                    let written: &[(usize, &[u8])] = &[(db, &dst)];
                    msop.written_only(if changed { written } else { &[] });
                    Ok(Err(n))
                }
            }
        }
    };
    // A read, or a store that failed on a wrong type, wrote nothing.
    if lay.dst.is_none() || reply.is_err() {
        msop.set_read_only();
    }
    g.release(msop).await;
    match reply {
        Err(()) => g.error(WRONGTYPE),
        Ok(Err(n)) => g.w().integer(n),
        Ok(Ok(bytes)) => g.out.extend_from_slice(&bytes),
    }
}

/// SINTERCARD numkeys key [key ...] [LIMIT limit] → (numkeys, limit), with Redis's errors.
fn parse_intercard(args: &[&[u8]]) -> Result<(usize, usize), &'static str> {
    let numkeys = match parse_i64(args[1]) {
        Some(n) if n > 0 => n as usize,
        _ => return Err("ERR numkeys should be greater than 0"),
    };
    if numkeys > args.len() - 2 {
        return Err("ERR Number of keys can't be greater than number of args");
    }
    let mut limit = 0;
    let mut i = 2 + numkeys;
    while i < args.len() {
        if args[i].eq_ignore_ascii_case(b"limit") && i + 1 < args.len() {
            match parse_i64(args[i + 1]) {
                Some(n) if n >= 0 => limit = n as usize,
                _ => return Err("ERR LIMIT can't be negative"),
            }
            i += 2;
        } else {
            return Err(SYNTAX_ERR);
        }
    }
    Ok((numkeys, limit))
}

fn sinter(ctx: &mut ExecCtx) {
    let lay = layout(ctx.args.len(), false);
    set_op_local(ctx, SetOp::Inter, lay, None)
}

fn sinterstore(ctx: &mut ExecCtx) {
    let lay = layout(ctx.args.len(), true);
    set_op_local(ctx, SetOp::Inter, lay, None)
}

fn sunion(ctx: &mut ExecCtx) {
    let lay = layout(ctx.args.len(), false);
    set_op_local(ctx, SetOp::Union, lay, None)
}

fn sunionstore(ctx: &mut ExecCtx) {
    let lay = layout(ctx.args.len(), true);
    set_op_local(ctx, SetOp::Union, lay, None)
}

fn sdiff(ctx: &mut ExecCtx) {
    let lay = layout(ctx.args.len(), false);
    set_op_local(ctx, SetOp::Diff, lay, None)
}

fn sdiffstore(ctx: &mut ExecCtx) {
    let lay = layout(ctx.args.len(), true);
    set_op_local(ctx, SetOp::Diff, lay, None)
}

fn sintercard(ctx: &mut ExecCtx) {
    let argv: Vec<&[u8]> = ctx.args.iter().collect();
    match parse_intercard(&argv) {
        Err(e) => ctx.error(e),
        Ok((numkeys, limit)) => {
            let lay = Layout {
                dst: None,
                keys: 2..2 + numkeys,
            };
            set_op_local(ctx, SetOp::Inter, lay, Some(limit))
        }
    }
}

fn sinter_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    let lay = layout(g.args.len(), false);
    Box::pin(set_op_across(g, SetOp::Inter, lay, None))
}

fn sinterstore_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    let lay = layout(g.args.len(), true);
    Box::pin(set_op_across(g, SetOp::Inter, lay, None))
}

fn sunion_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    let lay = layout(g.args.len(), false);
    Box::pin(set_op_across(g, SetOp::Union, lay, None))
}

fn sunionstore_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    let lay = layout(g.args.len(), true);
    Box::pin(set_op_across(g, SetOp::Union, lay, None))
}

fn sdiff_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    let lay = layout(g.args.len(), false);
    Box::pin(set_op_across(g, SetOp::Diff, lay, None))
}

fn sdiffstore_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    let lay = layout(g.args.len(), true);
    Box::pin(set_op_across(g, SetOp::Diff, lay, None))
}

fn sintercard_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let parsed = {
            let argv: Vec<&[u8]> = g.args.iter().map(|a| a.as_slice()).collect();
            parse_intercard(&argv)
        };
        match parsed {
            Err(e) => g.error(e),
            Ok((numkeys, limit)) => {
                let lay = Layout {
                    dst: None,
                    keys: 2..2 + numkeys,
                };
                set_op_across(g, SetOp::Inter, lay, Some(limit)).await
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intercard_arguments() {
        let p = |s: &str| {
            let v: Vec<&[u8]> = s.split(' ').map(|a| a.as_bytes()).collect();
            parse_intercard(&v)
        };
        assert_eq!(p("sintercard 2 a b"), Ok((2, 0)));
        assert_eq!(p("sintercard 1 a LIMIT 5"), Ok((1, 5)));
        assert_eq!(
            p("sintercard 0 a"),
            Err("ERR numkeys should be greater than 0")
        );
        assert_eq!(
            p("sintercard x a"),
            Err("ERR numkeys should be greater than 0")
        );
        assert_eq!(
            p("sintercard 3 a b"),
            Err("ERR Number of keys can't be greater than number of args")
        );
        assert_eq!(p("sintercard 1 a b"), Err(SYNTAX_ERR));
        assert_eq!(p("sintercard 1 a LIMIT"), Err(SYNTAX_ERR));
        assert_eq!(
            p("sintercard 1 a LIMIT -1"),
            Err("ERR LIMIT can't be negative")
        );
        assert_eq!(
            p("sintercard 1 a LIMIT x"),
            Err("ERR LIMIT can't be negative")
        );
    }

    fn set(members: &[&str]) -> SetValue {
        let l = EncodingLimits::default();
        let mut s = SetValue::default();
        for m in members {
            s.insert(m.as_bytes(), &l);
        }
        s
    }

    fn sorted(c: Computed) -> Vec<Vec<u8>> {
        let mut v: Vec<Vec<u8>> = match c {
            Computed::Refs(r) => r.iter().map(|m| m.with_bytes(|b| b.to_vec())).collect(),
            Computed::Owned(s) => s.iter().map(|m| m.with_bytes(|b| b.to_vec())).collect(),
        };
        v.sort();
        v
    }

    #[test]
    fn algebra_mixes_encodings() {
        let l = EncodingLimits::default();
        let ints = set(&["1", "2", "3"]);
        let mixed = set(&["2", "3", "a"]);
        let bytes = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        let both = [Some(&ints), Some(&mixed)];
        assert_eq!(
            sorted(compute(SetOp::Inter, &both, 0, &l)),
            bytes(&["2", "3"])
        );
        assert_eq!(
            sorted(compute(SetOp::Union, &both, 0, &l)),
            bytes(&["1", "2", "3", "a"])
        );
        assert_eq!(sorted(compute(SetOp::Diff, &both, 0, &l)), bytes(&["1"]));
        assert_eq!(compute(SetOp::Inter, &both, 1, &l).len(), 1);
        assert_eq!(compute(SetOp::Inter, &[Some(&ints), None], 0, &l).len(), 0);
        assert_eq!(compute(SetOp::Diff, &[None, Some(&ints)], 0, &l).len(), 0);
        assert_eq!(
            compute(SetOp::Diff, &[Some(&ints), Some(&ints)], 0, &l).len(),
            0
        );
        // An all-integer result is an intset, as Redis builds its results.
        match compute(SetOp::Union, &[Some(&ints), None], 0, &l) {
            Computed::Owned(s) => assert_eq!(s.encoding(), "intset"),
            Computed::Refs(_) => panic!("union builds a set"),
        }
    }
}
