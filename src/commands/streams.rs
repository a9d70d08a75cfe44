//! Stream commands (Redis 7.0's t_stream.c): XADD, XRANGE, XREVRANGE, XLEN, XDEL,
//! XTRIM, XSETID, consumer groups (XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM,
//! XAUTOCLAIM), XINFO, and XREAD / XREADGROUP with BLOCK.
//!
//! XREAD and XREADGROUP name keys after STREAMS, possibly on several shards, and may
//! block: they are async coordinators at home, like BLPOP (`commands::blocking`). A
//! try locks the keys, resolves `$` once (the last ID when the client first tries),
//! and serves what is there; if nothing is and BLOCK was given, the client registers
//! on every key's shard and retries when a write to one of them wakes it. Stream
//! waiters are woken by every write (each waits for its own IDs), not in turn.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::blocking::{wait, Registration, WaitEnd};
use super::strings::cmd;
use super::table::{flags::*, CommandSpec, Cross, KeySpec, Kind, K1};
use super::{parse_i64, Args, ExecCtx, GlobalCtx, NOT_INT, SYNTAX_ERR, WRONGTYPE};
use crate::protocol::reply::{Protocol, ReplyWriter};
use crate::shard::blocking::{
    unblocked_error, BlockState, UNBLOCK_CLUSTER_REDIRECT, UNBLOCK_NONE, UNBLOCK_ROLE_CHANGE,
};
use crate::shard::exec::{self, Wake, Written};
use crate::shard::multi::MultiShardOp;
use crate::shard::{ShardCell, ShardData};
use crate::storage::stream::{
    ConsumerGroup, EntryRef, NodeLimits, StreamId, StreamValue, Trim, ENTRIES_READ_INVALID,
};
use crate::storage::{Db, Entry, Value, NO_EXPIRE};

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

const K2: KeySpec = KeySpec::Range {
    first: 2,
    last: 2,
    step: 1,
};

const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";
const XGROUP_NEEDS_KEY: &str = "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.";

macro_rules! xcmd {
    ($name:expr, $arity:expr, $flags:expr, $keys:expr, $kind:expr, $since:expr, $summary:expr) => {
        CommandSpec {
            group: "stream",
            acl: &["@stream"],
            ..cmd!($name, $arity, $flags, $keys, $kind, $since, $summary)
        }
    };
}

const fn keyed(f: super::KeyedFn) -> Kind {
    Kind::Keyed(f, Cross::Never)
}

#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    xcmd!("xadd", -5, WRITE | DENYOOM | FAST, K1, keyed(xadd), "5.0.0", "Appends a new entry to a stream"),
    xcmd!("xlen", 2, READONLY | FAST, K1, keyed(xlen), "5.0.0", "Return the number of entries in a stream"),
    xcmd!("xrange", -4, READONLY, K1, keyed(xrange), "5.0.0", "Return a range of elements in a stream, with IDs matching the specified IDs interval"),
    xcmd!("xrevrange", -4, READONLY, K1, keyed(xrevrange), "5.0.0", "Return a range of elements in a stream, with IDs matching the specified IDs interval, in reverse order (from greater to smaller IDs) compared to XRANGE"),
    xcmd!("xdel", -3, WRITE | FAST, K1, keyed(xdel), "5.0.0", "Removes the specified entries from the stream. Returns the number of items actually deleted, that may be different from the number of IDs passed in case certain IDs do not exist."),
    xcmd!("xtrim", -4, WRITE, K1, keyed(xtrim), "5.0.0", "Trims the stream to (approximately if '~' is passed) a certain size"),
    xcmd!("xsetid", -3, WRITE | DENYOOM | FAST, K1, keyed(xsetid), "5.0.0", "An internal command for replicating stream values"),
    xcmd!("xread", -4, READONLY | BLOCKING | MOVABLE_KEYS, KeySpec::Streams, Kind::Global(xread), "5.0.0", "Return never seen elements in multiple streams, with IDs greater than the ones reported by the caller for each stream. Can block."),
    xcmd!("xreadgroup", -7, WRITE | BLOCKING | MOVABLE_KEYS, KeySpec::Streams, Kind::Global(xreadgroup), "5.0.0", "Return new entries from a stream using a consumer group, or access the history of the pending entries for a given consumer. Can block."),
    CommandSpec { acl: &[], ..xcmd!("xgroup", -2, WRITE, K2, keyed(xgroup), "5.0.0", "A container for consumer groups commands") },
    xcmd!("xack", -4, WRITE | FAST, K1, keyed(xack), "5.0.0", "Marks a pending message as correctly processed, effectively removing it from the pending entries list of the consumer group. Return value of the command is the number of messages successfully acknowledged, that is, the IDs we were actually able to resolve in the PEL."),
    xcmd!("xpending", -3, READONLY, K1, keyed(xpending), "5.0.0", "Return information and entries from a stream consumer group pending entries list, that are messages fetched but never acknowledged."),
    xcmd!("xclaim", -6, WRITE | FAST, K1, keyed(xclaim), "5.0.0", "Changes (or acquires) ownership of a message in a consumer group, as if the message was delivered to the specified consumer."),
    xcmd!("xautoclaim", -6, WRITE | FAST, K1, keyed(xautoclaim), "6.2.0", "Changes (or acquires) ownership of messages in a consumer group, as if the messages were delivered to the specified consumer."),
    CommandSpec { acl: &[], ..xcmd!("xinfo", -2, READONLY, K2, keyed(xinfo), "5.0.0", "A container for stream introspection commands") },
];

// ---------------------------------------------------------------------------
// ID parsing and replies
// ---------------------------------------------------------------------------

/// Redis's string2ull: a canonical non-negative i64, else what strtoull accepts
/// whole (leading spaces, '+', leading zeros).
fn parse_u64(b: &[u8]) -> Option<u64> {
    if let Some(n) = parse_i64(b) {
        return (n >= 0).then_some(n as u64);
    }
    let s = std::str::from_utf8(b).ok()?;
    let s = s.trim_start_matches(|c: char| c.is_ascii_whitespace());
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse::<u64>().ok()
}

/// Redis's streamGenericParseIDOrReply. Returns the ID and whether a sequence was
/// given (`ms-*` yields false when `seq_star` allows it).
fn parse_id_generic(
    b: &[u8],
    missing_seq: u64,
    strict: bool,
    seq_star: bool,
) -> Option<(StreamId, bool)> {
    if b.len() > 127 {
        return None;
    }
    match b {
        b"-" if !strict => return Some((StreamId::ZERO, true)),
        b"+" if !strict => return Some((StreamId::MAX, true)),
        b"-" | b"+" => return None,
        _ => {}
    }
    let (ms, seq) = match b.iter().position(|&c| c == b'-') {
        Some(p) => (&b[..p], Some(&b[p + 1..])),
        None => (b, None),
    };
    let ms = parse_u64(ms)?;
    match seq {
        None => Some((StreamId::new(ms, missing_seq), true)),
        Some(b"*") if seq_star => Some((StreamId::new(ms, 0), false)),
        Some(s) => Some((StreamId::new(ms, parse_u64(s)?), true)),
    }
}

/// A strict ID (no `-` / `+`).
fn parse_strict_id(b: &[u8]) -> Option<StreamId> {
    parse_id_generic(b, 0, true, false).map(|(id, _)| id)
}

/// An interval bound: `(id` is exclusive (and strict), else `-` / `+` / an ID.
fn parse_interval(b: &[u8], missing_seq: u64) -> Option<(StreamId, bool)> {
    if b.len() > 1 && b[0] == b'(' {
        parse_id_generic(&b[1..], missing_seq, true, false).map(|(id, _)| (id, true))
    } else {
        parse_id_generic(b, missing_seq, false, false).map(|(id, _)| (id, false))
    }
}

/// The inclusive [start, end] of a range given as two interval arguments, or the
/// error reply.
fn parse_range(start: &[u8], end: &[u8]) -> Result<(StreamId, StreamId), &'static str> {
    let (s, sx) = parse_interval(start, 0).ok_or(INVALID_ID)?;
    let s = if sx {
        s.incr().ok_or("ERR invalid start ID for the interval")?
    } else {
        s
    };
    let (e, ex) = parse_interval(end, u64::MAX).ok_or(INVALID_ID)?;
    let e = if ex {
        e.decr().ok_or("ERR invalid end ID for the interval")?
    } else {
        e
    };
    Ok((s, e))
}

fn reply_id(w: &mut ReplyWriter, id: StreamId) {
    let mut buf = [0u8; 48];
    w.bulk(id.format(&mut buf));
}

/// `[id, [field, value, ...]]`.
fn reply_entry(w: &mut ReplyWriter, e: &EntryRef) {
    w.array_len(2);
    reply_id(w, e.id);
    w.array_len(e.nfields * 2);
    for f in e.fields() {
        w.bulk(f);
    }
}

fn reply_entries(w: &mut ReplyWriter, entries: &[EntryRef]) {
    w.array_len(entries.len());
    for e in entries {
        reply_entry(w, e);
    }
}

/// The entries of `s` from `start` to `end` (`count` 0 = all).
fn collect_range(
    s: &StreamValue,
    start: StreamId,
    end: StreamId,
    rev: bool,
    count: usize,
) -> Vec<EntryRef<'_>> {
    let it = s.range(start, end, rev);
    if count == 0 {
        it.collect()
    } else {
        it.take(count).collect()
    }
}

fn node_limits(ctx: &ExecCtx) -> NodeLimits {
    let l = &ctx.data.limits;
    NodeLimits {
        max_entries: l.stream_node_max_entries.max(0) as usize,
        max_bytes: l.stream_node_max_bytes.max(0) as usize,
    }
}

/// The stream in `entry`: Ok(None) if missing, Err if another type.
fn as_stream(entry: Option<&mut Entry>) -> Result<Option<&mut StreamValue>, ()> {
    match entry {
        None => Ok(None),
        Some(e) => match e.value_mut() {
            Value::Stream(s) => Ok(Some(s)),
            _ => Err(()),
        },
    }
}

/// The key's stream for writing and the reply writer beside it.
fn write_parts<'c, 'a>(
    ctx: &'c mut ExecCtx<'a>,
    key: &[u8],
) -> (
    Result<Option<&'c mut StreamValue>, ()>,
    &'c mut ReplyWriter<'a>,
) {
    let now = ctx.now;
    let lru = ctx.lru();
    let mut e = ctx.data.dbs[ctx.db].get(key, now);
    if let Some(e) = e.as_deref_mut() {
        e.set_lru(lru);
    }
    (as_stream(e), &mut ctx.out)
}

fn nogroup(key: &[u8], group: &[u8]) -> String {
    format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    )
}

fn nogroup_for_key(key: &[u8], group: &[u8]) -> String {
    format!(
        "NOGROUP No such consumer group '{}' for key name '{}'",
        String::from_utf8_lossy(group),
        String::from_utf8_lossy(key)
    )
}

fn subcommand_syntax(ctx: &mut ExecCtx, container: &str) {
    let msg = format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {container} HELP.",
        String::from_utf8_lossy(ctx.args.get(1))
    );
    ctx.error(&msg)
}

// ---------------------------------------------------------------------------
// XADD / XTRIM
// ---------------------------------------------------------------------------

/// Options of XADD / XTRIM (Redis's streamParseAddOrTrimArgsOrReply).
#[derive(Default)]
struct AddTrim {
    rule: Option<Trim>,
    approx: bool,
    limit: u64,
    nomkstream: bool,
    /// XADD's explicit ID and whether its sequence was given (false for `ms-*`).
    id: Option<(StreamId, bool)>,
    /// XADD: index of the ID argument.
    id_at: usize,
    /// Index of the MAXLEN / MINID argument, when given.
    rule_at: usize,
}

fn parse_add_trim(ctx: &ExecCtx, xadd: bool) -> Result<AddTrim, &'static str> {
    let args = ctx.args;
    let argc = args.len();
    let mut a = AddTrim::default();
    let mut limit_given = false;
    let mut i = 2;
    while i < argc {
        let more = argc - 1 - i;
        let opt = args.get(i);
        if xadd && opt == b"*" {
            break;
        } else if (args.is(i, "maxlen") || args.is(i, "minid")) && more > 0 {
            if a.rule.is_some() {
                return Err("ERR syntax error, MAXLEN and MINID options at the same time are not compatible");
            }
            let maxlen = args.is(i, "maxlen");
            a.rule_at = i;
            a.approx = false;
            let next = args.get(i + 1);
            if more >= 2 && next == b"~" {
                a.approx = true;
                i += 1;
            } else if more >= 2 && next == b"=" {
                i += 1;
            }
            let v = args.get(i + 1);
            if maxlen {
                let n = parse_i64(v).ok_or(NOT_INT)?;
                if n < 0 {
                    return Err("ERR The MAXLEN argument must be >= 0.");
                }
                a.rule = Some(Trim::MaxLen(n as u64));
            } else {
                a.rule = Some(Trim::MinId(parse_strict_id(v).ok_or(INVALID_ID)?));
            }
            i += 1;
        } else if args.is(i, "limit") && more > 0 {
            let n = parse_i64(args.get(i + 1)).ok_or(NOT_INT)?;
            if n < 0 {
                return Err("ERR The LIMIT argument must be >= 0.");
            }
            a.limit = n as u64;
            limit_given = true;
            i += 1;
        } else if xadd && args.is(i, "nomkstream") {
            a.nomkstream = true;
        } else if xadd {
            a.id = Some(parse_id_generic(opt, 0, true, true).ok_or(INVALID_ID)?);
            break;
        } else {
            return Err(SYNTAX_ERR);
        }
        i += 1;
    }
    a.id_at = i;
    if a.limit > 0 && a.rule.is_none() {
        return Err(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        );
    }
    if !xadd && a.rule.is_none() {
        return Err("ERR syntax error, XTRIM must be called with a trimming strategy");
    }
    // Redis's `mustobey`: what the master or the AOF sends ran on the master already,
    // rewritten to the exact trim it amounted to (`MAXLEN = 71 LIMIT 30`): obeyed in
    // full, with LIMIT neither checked nor applied.
    if crate::storage::entry::replaying() || crate::persistence::loading() {
        a.limit = 0;
    } else if limit_given {
        if !a.approx {
            return Err("ERR syntax error, LIMIT cannot be used without the special ~ option");
        }
    } else if a.approx {
        let per_node = ctx.data.limits.stream_node_max_entries;
        a.limit = match per_node.checked_mul(100) {
            Some(n) if n > 0 => n as u64,
            _ => 10000,
        };
    } else {
        a.limit = 0;
    }
    Ok(a)
}

fn xadd(ctx: &mut ExecCtx) {
    let a = match parse_add_trim(ctx, true) {
        Ok(a) => a,
        Err(e) => return ctx.error(e),
    };
    let argc = ctx.args.len();
    let field_pos = a.id_at + 1;
    if field_pos > argc || argc - field_pos < 2 || (argc - field_pos) % 2 == 1 {
        return ctx.error("ERR wrong number of arguments for 'xadd' command");
    }
    if let Some((id, true)) = a.id {
        if id.is_zero() {
            return ctx.error("ERR The ID specified in XADD must be greater than 0-0");
        }
    }
    let key = ctx.args.get(1);
    let limits = node_limits(ctx);
    let now = ctx.now;
    let dbi = ctx.db;
    let exists = match write_parts(ctx, key).0 {
        Err(()) => return ctx.error(WRONGTYPE),
        Ok(s) => s.is_some(),
    };
    if !exists {
        if a.nomkstream {
            ctx.nothing_changed();
            return ctx.out.null();
        }
        let lru = ctx.lru();
        let v = Value::Stream(Box::new(StreamValue::new()));
        ctx.db().insert(key, v, NO_EXPIRE, lru);
    }
    let fields: Vec<&[u8]> = (field_pos..argc).map(|i| ctx.args.get(i)).collect();
    let (args, propagating) = (ctx.args, ctx.propagation.on());
    let (s, out) = write_parts(ctx, key);
    let Ok(Some(s)) = s else {
        return out.error(WRONGTYPE);
    };
    if s.last_id == StreamId::MAX {
        return out
            .error("ERR The stream has exhausted the last possible ID, unable to add more items");
    }
    let id = match a.id {
        None => s.next_auto_id(now),
        Some((id, true)) => Some(id),
        Some((id, false)) if id.ms == s.last_id.ms => {
            let seq = s.last_id.seq.checked_add(1);
            seq.map(|seq| StreamId::new(id.ms, seq))
        }
        Some((id, false)) => Some(id),
    };
    let Some(id) = id.filter(|id| *id > s.last_id) else {
        return out.error(
            "ERR The ID specified in XADD is equal or smaller than the target stream top item",
        );
    };
    s.append(id, &fields, limits);
    let trimmed = a.rule.map_or(0, |rule| s.trim(rule, a.approx, a.limit));
    let effect = propagating.then(|| add_trim_effect(args, &a, Some(id), s));
    reply_id(out, id);
    if let Some(effect) = effect {
        ctx.propagation.rewrite(|| effect);
    }
    stream_event("xadd", key, dbi);
    if trimmed > 0 {
        stream_event("xtrim", key, dbi);
    }
}

/// XADD / XTRIM as they propagate (Redis's streamRewriteApproxSpecifier and
/// streamRewriteTrimArgument): XADD with the ID it generated; an approximate trim,
/// which stopped at a node boundary, as the exact one it amounted to (`= <length
/// left>` / `= <first ID left>`), so the replica trims to the same entry.
fn add_trim_effect(
    args: Args,
    a: &AddTrim,
    added: Option<StreamId>,
    s: &StreamValue,
) -> Vec<Vec<u8>> {
    let mut argv = args.to_vecs();
    if let Some(id) = added {
        argv[a.id_at] = id.to_string().into_bytes();
    }
    if a.approx && a.rule.is_some() && argv.get(a.rule_at + 1).map(Vec::as_slice) == Some(b"~") {
        argv[a.rule_at + 1] = b"=".to_vec();
        argv[a.rule_at + 2] = match a.rule {
            Some(Trim::MaxLen(_)) => s.len().to_string().into_bytes(),
            _ => s.first_valid_id().to_string().into_bytes(),
        };
    }
    argv
}

/// A stream keyspace event (class `t`).
fn stream_event(event: &str, key: &[u8], db: usize) {
    crate::pubsub::notify(super::notify::STREAM, event, key, db);
}

fn xtrim(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    match write_parts(ctx, key).0 {
        Err(()) => return ctx.error(WRONGTYPE),
        Ok(None) => {
            ctx.nothing_changed();
            return ctx.out.integer(0);
        }
        Ok(Some(_)) => {}
    }
    let a = match parse_add_trim(ctx, false) {
        Ok(a) => a,
        Err(e) => return ctx.error(e),
    };
    let dbi = ctx.db;
    let (args, propagating) = (ctx.args, ctx.propagation.on());
    let (s, out) = write_parts(ctx, key);
    if let (Ok(Some(s)), Some(rule)) = (s, a.rule) {
        let n = s.trim(rule, a.approx, a.limit);
        out.integer(n as i64);
        if let Some(effect) = propagating.then(|| add_trim_effect(args, &a, None, s)) {
            ctx.propagation.rewrite(|| effect);
        }
        if n > 0 {
            stream_event("xtrim", key, dbi);
            ctx.dirty(n);
        } else {
            ctx.nothing_changed();
        }
    }
}

fn xlen(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let (e, out) = ctx.read_with_out(key);
    match as_stream(e) {
        Err(()) => out.error(WRONGTYPE),
        Ok(None) => out.integer(0),
        Ok(Some(s)) => out.integer(s.len() as i64),
    }
}

fn xrange(ctx: &mut ExecCtx) {
    range_generic(ctx, false)
}

fn xrevrange(ctx: &mut ExecCtx) {
    range_generic(ctx, true)
}

fn range_generic(ctx: &mut ExecCtx, rev: bool) {
    let args = ctx.args;
    let (a, b) = if rev {
        (args.get(3), args.get(2))
    } else {
        (args.get(2), args.get(3))
    };
    let (start, end) = match parse_range(a, b) {
        Ok(r) => r,
        Err(e) => return ctx.error(e),
    };
    let mut count: i64 = -1;
    let mut j = 4;
    while j < args.len() {
        if args.is(j, "count") && j + 1 < args.len() {
            match parse_i64(args.get(j + 1)) {
                Some(n) => count = n.max(0),
                None => return ctx.error(NOT_INT),
            }
            j += 2;
        } else {
            return ctx.error(SYNTAX_ERR);
        }
    }
    let key = args.get(1);
    let (e, out) = ctx.read_with_out(key);
    match as_stream(e) {
        Err(()) => out.error(WRONGTYPE),
        Ok(None) => out.array_len(0),
        Ok(Some(_)) if count == 0 => out.null_array(),
        Ok(Some(s)) => {
            let entries = collect_range(s, start, end, rev, count.max(0) as usize);
            reply_entries(out, &entries);
        }
    }
}

fn xdel(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    match write_parts(ctx, key).0 {
        Err(()) => return ctx.error(WRONGTYPE),
        Ok(None) => {
            ctx.nothing_changed();
            return ctx.out.integer(0);
        }
        Ok(Some(_)) => {}
    }
    let mut ids = Vec::with_capacity(ctx.args.len() - 2);
    for i in 2..ctx.args.len() {
        match parse_strict_id(ctx.args.get(i)) {
            Some(id) => ids.push(id),
            None => return ctx.error(INVALID_ID),
        }
    }
    let dbi = ctx.db;
    let (s, out) = write_parts(ctx, key);
    if let Ok(Some(s)) = s {
        let n = ids.into_iter().filter(|id| s.delete(*id)).count();
        out.integer(n as i64);
        if n > 0 {
            stream_event("xdel", key, dbi);
            ctx.dirty(n as u64);
        } else {
            ctx.nothing_changed();
        }
    }
}

fn xsetid(ctx: &mut ExecCtx) {
    // Redis 7.0 signals no WATCH or tracking for XSETID.
    ctx.nothing_changed();
    let args = ctx.args;
    let Some(id) = parse_strict_id(args.get(2)) else {
        return ctx.error(INVALID_ID);
    };
    let mut entries_added: i64 = -1;
    let mut max_xdel = StreamId::ZERO;
    let mut i = 3;
    while i < args.len() {
        let more = i + 1 < args.len();
        if args.is(i, "entriesadded") && more {
            match parse_i64(args.get(i + 1)) {
                None => return ctx.error(NOT_INT),
                Some(n) if n < 0 => return ctx.error("ERR entries_added must be positive"),
                Some(n) => entries_added = n,
            }
        } else if args.is(i, "maxdeletedid") && more {
            match parse_strict_id(args.get(i + 1)) {
                None => return ctx.error(INVALID_ID),
                Some(m) if id < m => return ctx.error("ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id"),
                Some(m) => max_xdel = m,
            }
        } else {
            return ctx.error(SYNTAX_ERR);
        }
        i += 2;
    }
    let key = args.get(1);
    let dbi = ctx.db;
    let (s, out) = write_parts(ctx, key);
    let s = match s {
        Err(()) => return out.error(WRONGTYPE),
        Ok(None) => return out.error(super::NO_SUCH_KEY),
        Ok(Some(s)) => s,
    };
    if id < s.max_deleted_id {
        return out
            .error("ERR The ID specified in XSETID is smaller than current max_deleted_entry_id");
    }
    if !s.is_empty() {
        if id < s.last_valid_id() {
            return out.error(
                "ERR The ID specified in XSETID is smaller than the target stream top item",
            );
        }
        if entries_added != -1 && s.len() > entries_added as u64 {
            return out.error(
                "ERR The entries_added specified in XSETID is smaller than the target stream length",
            );
        }
    }
    s.last_id = id;
    if entries_added != -1 {
        s.entries_added = entries_added as u64;
    }
    if !max_xdel.is_zero() {
        s.max_deleted_id = max_xdel;
    }
    out.ok();
    stream_event("xsetid", key, dbi);
    // Not signalled, but a change for the counter (Redis's xsetidCommand).
    ctx.dirty(1);
}

// ---------------------------------------------------------------------------
// XGROUP
// ---------------------------------------------------------------------------

const XGROUP_HELP: &[&str] = &[
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Print this help.",
];

const XINFO_HELP: &[&str] = &[
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Print this help.",
];

/// Checks a container subcommand's name and arity; replies and returns None if bad.
fn subcommand(
    ctx: &mut ExecCtx,
    container: &str,
    known: &[(&'static str, i64)],
) -> Option<&'static str> {
    let argc = ctx.args.len() as i64;
    let Some(&(name, arity)) = known.iter().find(|(n, _)| ctx.args.is(1, n)) else {
        let msg = format!(
            "ERR unknown subcommand '{}'. Try {} HELP.",
            String::from_utf8_lossy(ctx.args.get(1)),
            container.to_ascii_uppercase()
        );
        ctx.error(&msg);
        return None;
    };
    let ok = if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
    };
    if !ok {
        let msg = format!("ERR wrong number of arguments for '{container}|{name}' command");
        ctx.error(&msg);
        return None;
    }
    Some(name)
}

/// ENTRIESREAD options from argument 5 on (with MKSTREAM for CREATE).
fn parse_group_opts(ctx: &mut ExecCtx, create: bool) -> Option<(bool, i64)> {
    let args = ctx.args;
    let (mut mkstream, mut entries_read) = (false, ENTRIES_READ_INVALID);
    let mut i = 5;
    while i < args.len() {
        if create && args.is(i, "mkstream") {
            mkstream = true;
            i += 1;
        } else if args.is(i, "entriesread") && i + 1 < args.len() {
            match parse_i64(args.get(i + 1)) {
                None => {
                    ctx.error(NOT_INT);
                    return None;
                }
                Some(n) if n < 0 && n != ENTRIES_READ_INVALID => {
                    ctx.error("ERR value for ENTRIESREAD must be positive or -1");
                    return None;
                }
                Some(n) => entries_read = n,
            }
            i += 2;
        } else {
            subcommand_syntax(ctx, "XGROUP");
            return None;
        }
    }
    Some((mkstream, entries_read))
}

fn xgroup(ctx: &mut ExecCtx) {
    let known = [
        ("help", 2),
        ("create", -5),
        ("setid", -5),
        ("destroy", 4),
        ("createconsumer", 5),
        ("delconsumer", 5),
    ];
    let Some(sub) = subcommand(ctx, "xgroup", &known) else {
        return;
    };
    if sub == "help" {
        return super::keys::reply_help(&mut ctx.out, XGROUP_HELP);
    }
    let argc = ctx.args.len();
    let (mut mkstream, mut entries_read) = (false, ENTRIES_READ_INVALID);
    if sub == "create" || sub == "setid" {
        match parse_group_opts(ctx, sub == "create") {
            Some(o) => (mkstream, entries_read) = o,
            None => return,
        }
    }
    let key = ctx.args.get(2);
    let group = ctx.args.get(3);
    let dbi = ctx.db;
    // Group and consumer changes are not writes to the key for WATCH or tracking
    // (Redis 7.0 calls no signalModifiedKey in XGROUP); DESTROY and SETID still wake
    // clients blocked in XREADGROUP on it, below. Each subcommand that changed
    // something counts one change.
    ctx.nothing_changed();
    let exists = match write_parts(ctx, key).0 {
        Err(()) => return ctx.error(WRONGTYPE),
        Ok(s) => s.map(|s| s.groups.contains_key(group)),
    };
    let Some(has_group) = exists.or((sub == "create" && mkstream).then_some(false)) else {
        return ctx.error(XGROUP_NEEDS_KEY);
    };
    if matches!(sub, "setid" | "createconsumer" | "delconsumer") && !has_group {
        return ctx.error(&nogroup_for_key(key, group));
    }
    match sub {
        "create" => {
            if argc > 8 {
                return subcommand_syntax(ctx, "XGROUP");
            }
            xgroup_create(ctx, exists.is_some(), entries_read)
        }
        "setid" => {
            if argc != 5 && argc != 7 {
                return subcommand_syntax(ctx, "XGROUP");
            }
            let arg = ctx.args.get(4);
            let (s, out) = write_parts(ctx, key);
            let Ok(Some(s)) = s else { return };
            let id = if arg == b"$" {
                Some(s.last_id)
            } else {
                parse_id_generic(arg, 0, false, false).map(|(id, _)| id)
            };
            let Some(id) = id else {
                return out.error(INVALID_ID);
            };
            if let Some(g) = s.groups.get_mut(group) {
                g.last_id = id;
                g.entries_read = entries_read;
            }
            out.ok();
            stream_event("xgroup-setid", key, dbi);
            ctx.dirty(1);
            ctx.signal_also(dbi, key, false, true);
        }
        "destroy" => {
            let (s, out) = write_parts(ctx, key);
            if let Ok(Some(s)) = s {
                let destroyed = s.groups.remove(group).is_some();
                out.integer(destroyed as i64);
                if destroyed {
                    stream_event("xgroup-destroy", key, dbi);
                    ctx.dirty(1);
                    // Its blocked readers retry and get NOGROUP.
                    ctx.signal_also(dbi, key, false, true);
                }
            }
        }
        "createconsumer" => {
            let now = ctx.now;
            let name = ctx.args.get(4);
            let (s, out) = write_parts(ctx, key);
            if let Some(g) = s.ok().flatten().and_then(|s| s.groups.get_mut(group)) {
                let created = g.create_consumer(name, now);
                out.integer(created as i64);
                if created {
                    stream_event("xgroup-createconsumer", key, dbi);
                    ctx.dirty(1);
                }
            }
        }
        _ => {
            let name = ctx.args.get(4);
            let (s, out) = write_parts(ctx, key);
            if let Some(g) = s.ok().flatten().and_then(|s| s.groups.get_mut(group)) {
                let deleted = g.delete_consumer(name);
                out.integer(deleted.unwrap_or(0) as i64);
                if deleted.is_some() {
                    stream_event("xgroup-delconsumer", key, dbi);
                    ctx.dirty(1);
                }
            }
        }
    }
}

fn xgroup_create(ctx: &mut ExecCtx, exists: bool, entries_read: i64) {
    let key = ctx.args.get(2);
    let group = ctx.args.get(3);
    let arg = ctx.args.get(4);
    let id = if arg == b"$" {
        None
    } else {
        match parse_strict_id(arg) {
            Some(id) => Some(id),
            None => return ctx.error(INVALID_ID),
        }
    };
    if !exists {
        let lru = ctx.lru();
        let v = Value::Stream(Box::new(StreamValue::new()));
        ctx.db().insert(key, v, NO_EXPIRE, lru);
        // MKSTREAM created the key: that is a write (the group alone is not).
        ctx.only_changed(0, true);
    }
    let (s, out) = write_parts(ctx, key);
    let Ok(Some(s)) = s else { return };
    if s.groups.contains_key(group) {
        return out.error("BUSYGROUP Consumer Group name already exists");
    }
    let id = id.unwrap_or(s.last_id);
    s.groups
        .insert(group.to_vec(), ConsumerGroup::new(id, entries_read));
    out.ok();
    stream_event("xgroup-create", key, ctx.db);
    // One change, with or without MKSTREAM.
    ctx.dirty(1);
}

// ---------------------------------------------------------------------------
// XACK / XPENDING / XCLAIM / XAUTOCLAIM
// ---------------------------------------------------------------------------

fn xack(ctx: &mut ExecCtx) {
    // A pending-entries change: no WATCH or tracking signal (as Redis 7.0).
    ctx.nothing_changed();
    let key = ctx.args.get(1);
    let group = ctx.args.get(2);
    let found = match write_parts(ctx, key).0 {
        Err(()) => return ctx.error(WRONGTYPE),
        Ok(s) => s.is_some_and(|s| s.groups.contains_key(group)),
    };
    if !found {
        return ctx.out.integer(0);
    }
    let mut ids = Vec::with_capacity(ctx.args.len() - 3);
    for i in 3..ctx.args.len() {
        match parse_strict_id(ctx.args.get(i)) {
            Some(id) => ids.push(id),
            None => return ctx.error(INVALID_ID),
        }
    }
    let (s, out) = write_parts(ctx, key);
    if let Some(g) = s.ok().flatten().and_then(|s| s.groups.get_mut(group)) {
        let n = ids.into_iter().filter(|id| g.ack(*id)).count();
        out.integer(n as i64);
        ctx.dirty(n as u64);
    }
}

struct PendingRange<'a> {
    min_idle: i64,
    start: StreamId,
    end: StreamId,
    count: usize,
    consumer: Option<&'a [u8]>,
}

fn parse_pending_range<'a>(args: &super::Args<'a>) -> Result<PendingRange<'a>, &'static str> {
    let argc = args.len();
    let mut at = 3;
    let mut min_idle = 0;
    if args.is(3, "idle") {
        min_idle = parse_i64(args.get(4)).ok_or(NOT_INT)?;
        if argc < 8 {
            return Err(SYNTAX_ERR);
        }
        at += 2;
    }
    let count = parse_i64(args.get(at + 2)).ok_or(NOT_INT)?.max(0) as usize;
    let (start, end) = parse_range(args.get(at), args.get(at + 1))?;
    let consumer = (at + 3 < argc).then(|| args.get(at + 3));
    Ok(PendingRange {
        min_idle,
        start,
        end,
        count,
        consumer,
    })
}

fn xpending(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let argc = args.len();
    if argc != 3 && !(6..=9).contains(&argc) {
        return ctx.error(SYNTAX_ERR);
    }
    let range = if argc >= 6 {
        match parse_pending_range(&args) {
            Ok(r) => Some(r),
            Err(e) => return ctx.error(e),
        }
    } else {
        None
    };
    let (key, group) = (args.get(1), args.get(2));
    let now = ctx.now;
    let (e, out) = ctx.read_with_out(key);
    let g = match as_stream(e) {
        Err(()) => return out.error(WRONGTYPE),
        Ok(s) => s.and_then(|s| s.groups.get(group)),
    };
    let Some(g) = g else {
        return out.error(&nogroup(key, group));
    };
    let Some(r) = range else {
        return pending_summary(out, g);
    };
    let ids: Box<dyn Iterator<Item = StreamId>> = match r.consumer {
        Some(name) => match g.consumers.get(name) {
            Some(c) => Box::new(c.pel.range(r.start..=r.end.max(r.start)).copied()),
            None => return out.array_len(0),
        },
        None => Box::new(g.pel.range(r.start..=r.end.max(r.start)).map(|(k, _)| *k)),
    };
    let mut rows = Vec::new();
    if r.start <= r.end {
        for id in ids {
            if rows.len() >= r.count {
                break;
            }
            let Some(p) = g.pel.get(&id) else { continue };
            let idle = now as i64 - p.delivery_time as i64;
            if r.min_idle > 0 && idle < r.min_idle {
                continue;
            }
            rows.push((id, p, idle.max(0)));
        }
    }
    out.array_len(rows.len());
    for (id, p, idle) in rows {
        out.array_len(4);
        reply_id(out, id);
        out.bulk(&p.consumer);
        out.integer(idle);
        out.integer(p.delivery_count as i64);
    }
}

fn pending_summary(out: &mut ReplyWriter, g: &ConsumerGroup) {
    out.array_len(4);
    out.integer(g.pel.len() as i64);
    let (Some((first, _)), Some((last, _))) = (g.pel.first_key_value(), g.pel.last_key_value())
    else {
        out.null();
        out.null();
        return out.null_array();
    };
    reply_id(out, *first);
    reply_id(out, *last);
    let busy: Vec<_> = g
        .consumers
        .iter()
        .filter(|(_, c)| !c.pel.is_empty())
        .collect();
    out.array_len(busy.len());
    for (name, c) in busy {
        out.array_len(2);
        out.bulk(name);
        out.bulk_int(c.pel.len() as i64);
    }
}

struct ClaimOpts {
    min_idle: u64,
    ids_end: usize,
    delivery_time: u64,
    retry_count: Option<u64>,
    force: bool,
    justid: bool,
    last_id: StreamId,
}

fn parse_claim(ctx: &ExecCtx) -> Result<ClaimOpts, String> {
    let args = ctx.args;
    let now = ctx.now as i64;
    let min_idle = parse_i64(args.get(4))
        .ok_or("ERR Invalid min-idle-time argument for XCLAIM")?
        .max(0) as u64;
    let mut j = 5;
    while j < args.len() && parse_strict_id(args.get(j)).is_some() {
        j += 1;
    }
    let ids_end = j;
    let mut o = ClaimOpts {
        min_idle,
        ids_end,
        delivery_time: now as u64,
        retry_count: None,
        force: false,
        justid: false,
        last_id: StreamId::ZERO,
    };
    let mut delivery: Option<i64> = None;
    while j < args.len() {
        let more = j + 1 < args.len();
        let num = |what: &str| {
            parse_i64(args.get(j + 1))
                .ok_or_else(|| format!("ERR Invalid {what} option argument for XCLAIM"))
        };
        if args.is(j, "force") {
            o.force = true;
        } else if args.is(j, "justid") {
            o.justid = true;
        } else if args.is(j, "idle") && more {
            delivery = Some(now - num("IDLE")?);
            j += 1;
        } else if args.is(j, "time") && more {
            delivery = Some(num("TIME")?);
            j += 1;
        } else if args.is(j, "retrycount") && more {
            o.retry_count = Some(num("RETRYCOUNT")?.max(0) as u64);
            j += 1;
        } else if args.is(j, "lastid") && more {
            o.last_id = parse_strict_id(args.get(j + 1)).ok_or(INVALID_ID)?;
            j += 1;
        } else {
            return Err(format!(
                "ERR Unrecognized XCLAIM option '{}'",
                String::from_utf8_lossy(args.get(j))
            ));
        }
        j += 1;
    }
    if let Some(t) = delivery {
        o.delivery_time = if t < 0 || t > now { now } else { t } as u64;
    }
    Ok(o)
}

fn xclaim(ctx: &mut ExecCtx) {
    // A pending-entries change: no WATCH or tracking signal (as Redis 7.0).
    ctx.nothing_changed();
    let key = ctx.args.get(1);
    let group = ctx.args.get(2);
    let found = match write_parts(ctx, key).0 {
        Err(()) => return ctx.error(WRONGTYPE),
        Ok(s) => s.is_some_and(|s| s.groups.contains_key(group)),
    };
    if !found {
        return ctx.error(&nogroup(key, group));
    }
    let o = match parse_claim(ctx) {
        Ok(o) => o,
        Err(e) => return ctx.error(&e),
    };
    let ids: Vec<StreamId> = (5..o.ids_end)
        .filter_map(|i| parse_strict_id(ctx.args.get(i)))
        .collect();
    let name = ctx.args.get(3);
    let now = ctx.now;
    let dbi = ctx.db;
    let propagating = ctx.propagation.on();
    let (s, out) = write_parts(ctx, key);
    let Ok(Some(s)) = s else { return };
    let Some(mut g) = s.groups.remove(group) else {
        return;
    };
    let had_consumer = g.consumers.contains_key(name);
    let bumped = o.last_id > g.last_id;
    if bumped {
        g.last_id = o.last_id;
    }
    let mut claimed = Vec::new();
    // Pending entries dropped because their entry is gone.
    let mut dropped = Vec::new();
    let mut consumer: Option<Arc<[u8]>> = None;
    for id in ids {
        if !s.contains(id) {
            if g.ack(id) {
                dropped.push(id);
            }
            continue;
        }
        match g.pel.get(&id) {
            None if !o.force => continue,
            None => {
                // FORCE creates the NACK (as Redis's streamCreateNACK: one delivery).
                let c = consumer
                    .get_or_insert_with(|| g.touch_consumer(name, now))
                    .clone();
                g.deliver(id, &c, now);
            }
            Some(p) => {
                let idle = now as i64 - p.delivery_time as i64;
                if o.min_idle > 0 && idle < o.min_idle as i64 {
                    continue;
                }
            }
        }
        let c = consumer
            .get_or_insert_with(|| g.touch_consumer(name, now))
            .clone();
        g.transfer(id, &c);
        if let Some(p) = g.pel.get_mut(&id) {
            p.delivery_time = o.delivery_time;
            match o.retry_count {
                Some(n) => p.delivery_count = n,
                None if !o.justid => p.delivery_count = p.delivery_count.wrapping_add(1),
                None => {}
            }
        }
        claimed.push(id);
    }
    out.array_len(claimed.len());
    for id in &claimed {
        reply_claimed(out, s, *id, o.justid);
    }
    let mut effects = Vec::new();
    if propagating {
        effects = claims_effects((key, group, name), &g, &claimed, &dropped);
        if effects.is_empty() && bumped {
            effects.push(setid_effect(key, group, (g.last_id, g.entries_read)));
        }
    }
    s.groups.insert(group.to_vec(), g);
    let created = notify_new_consumer(s, group, name, had_consumer, key, dbi);
    // Redis's xclaimCommand: one change per entry claimed or dropped, one for a
    // consumer created, and one for a LASTID bump when nothing else changed.
    let changes = (claimed.len() + dropped.len()) as u64;
    ctx.dirty(changes + u64::from(created) + u64::from(bumped && changes == 0));
    state_effects(ctx, effects);
}

/// A command that propagates as `effects` (each in turn), not as itself.
fn state_effects(ctx: &mut ExecCtx, effects: Vec<Vec<Vec<u8>>>) {
    ctx.propagation.nothing();
    for argv in effects {
        ctx.propagation.also(|| argv);
    }
}

/// An XCLAIM / XAUTOCLAIM result: the ID alone, or the entry.
fn reply_claimed(out: &mut ReplyWriter, s: &StreamValue, id: StreamId, justid: bool) {
    match (justid, s.get(id)) {
        (false, Some(e)) => reply_entry(out, &e),
        _ => reply_id(out, id),
    }
}

fn xautoclaim(ctx: &mut ExecCtx) {
    // A pending-entries change: no WATCH or tracking signal (as Redis 7.0).
    ctx.nothing_changed();
    let args = ctx.args;
    let Some(min_idle) = parse_i64(args.get(4)) else {
        return ctx.error("ERR Invalid min-idle-time argument for XAUTOCLAIM");
    };
    let min_idle = min_idle.max(0);
    let (start, sx) = match parse_interval(args.get(5), 0) {
        Some(s) => s,
        None => return ctx.error(INVALID_ID),
    };
    let start = match (sx, start.incr()) {
        (false, _) => start,
        (true, Some(s)) => s,
        (true, None) => return ctx.error("ERR invalid start ID for the interval"),
    };
    let mut count: i64 = 100;
    let mut justid = false;
    let mut j = 6;
    while j < args.len() {
        if args.is(j, "count") && j + 1 < args.len() {
            let max = i64::MAX / 16;
            match parse_i64(args.get(j + 1)) {
                Some(n) if (1..=max).contains(&n) => count = n,
                _ => return ctx.error("ERR COUNT must be > 0"),
            }
            j += 1;
        } else if args.is(j, "justid") {
            justid = true;
        } else {
            return ctx.error(SYNTAX_ERR);
        }
        j += 1;
    }
    let key = args.get(1);
    let group = args.get(2);
    let found = match write_parts(ctx, key).0 {
        Err(()) => return ctx.error(WRONGTYPE),
        Ok(s) => s.is_some_and(|s| s.groups.contains_key(group)),
    };
    if !found {
        return ctx.error(&nogroup(key, group));
    }
    let name = args.get(3);
    let now = ctx.now;
    let dbi = ctx.db;
    let propagating = ctx.propagation.on();
    let (s, out) = write_parts(ctx, key);
    let Ok(Some(s)) = s else { return };
    let Some(mut g) = s.groups.remove(group) else {
        return;
    };
    let had_consumer = g.consumers.contains_key(name);
    let mut attempts = count.saturating_mul(10);
    let mut claimed = Vec::new();
    let mut deleted = Vec::new();
    let mut consumer: Option<Arc<[u8]>> = None;
    let mut cur = Some(start);
    while attempts > 0 && count > 0 {
        let Some(from) = cur else { break };
        let Some((&id, p)) = g.pel.range(from..).next() else {
            cur = None;
            break;
        };
        attempts -= 1;
        cur = id.incr();
        if !s.contains(id) {
            g.ack(id);
            deleted.push(id);
            count -= 1;
            continue;
        }
        if min_idle > 0 && (now as i64 - p.delivery_time as i64) < min_idle {
            continue;
        }
        let c = consumer
            .get_or_insert_with(|| g.touch_consumer(name, now))
            .clone();
        g.transfer(id, &c);
        if let Some(p) = g.pel.get_mut(&id) {
            p.delivery_time = now;
            if !justid {
                p.delivery_count = p.delivery_count.wrapping_add(1);
            }
        }
        claimed.push(id);
        count -= 1;
    }
    let cursor = cur
        .and_then(|c| g.pel.range(c..).next().map(|(k, _)| *k))
        .unwrap_or(StreamId::ZERO);
    out.array_len(3);
    reply_id(out, cursor);
    out.array_len(claimed.len());
    for id in &claimed {
        reply_claimed(out, s, *id, justid);
    }
    out.array_len(deleted.len());
    for id in &deleted {
        reply_id(out, *id);
    }
    let effects = match propagating {
        true => claims_effects((key, group, name), &g, &claimed, &deleted),
        false => Vec::new(),
    };
    s.groups.insert(group.to_vec(), g);
    let created = notify_new_consumer(s, group, name, had_consumer, key, dbi);
    // One change per entry claimed or dropped, one for a consumer created.
    ctx.dirty((claimed.len() + deleted.len()) as u64 + u64::from(created));
    state_effects(ctx, effects);
}

// ---------------------------------------------------------------------------
// XINFO
// ---------------------------------------------------------------------------

fn xinfo(ctx: &mut ExecCtx) {
    let known = [("help", 2), ("stream", -3), ("groups", 3), ("consumers", 4)];
    let Some(sub) = subcommand(ctx, "xinfo", &known) else {
        return;
    };
    if sub == "help" {
        return super::keys::reply_help(&mut ctx.out, XINFO_HELP);
    }
    let args = ctx.args;
    let key = args.get(2);
    let now = ctx.now;
    let (e, out) = ctx.read_with_out(key);
    let s = match as_stream(e) {
        Err(()) => return out.error(WRONGTYPE),
        Ok(None) => return out.error(super::NO_SUCH_KEY),
        Ok(Some(s)) => &*s,
    };
    match sub {
        "consumers" => {
            let group = args.get(3);
            let Some(g) = s.groups.get(group) else {
                return out.error(&nogroup_for_key(key, group));
            };
            out.array_len(g.consumers.len());
            for (name, c) in &g.consumers {
                out.map_len(3);
                out.bulk(b"name");
                out.bulk(name);
                out.bulk(b"pending");
                out.integer(c.pel.len() as i64);
                out.bulk(b"idle");
                out.integer((now as i64 - c.seen_time as i64).max(0));
            }
        }
        "groups" => {
            out.array_len(s.groups.len());
            for (name, g) in &s.groups {
                out.map_len(6);
                out.bulk(b"name");
                out.bulk(name);
                out.bulk(b"consumers");
                out.integer(g.consumers.len() as i64);
                out.bulk(b"pending");
                out.integer(g.pel.len() as i64);
                out.bulk(b"last-delivered-id");
                reply_id(out, g.last_id);
                reply_group_counters(out, s, g);
            }
        }
        _ => {
            let argc = args.len();
            let mut full = false;
            let mut count: i64 = 10;
            if argc > 3 {
                if (argc != 4 && argc != 6)
                    || !args.is(3, "full")
                    || (argc == 6 && !args.is(4, "count"))
                {
                    let msg = format!(
                        "ERR unknown subcommand or wrong number of arguments for '{}'. Try XINFO HELP.",
                        String::from_utf8_lossy(args.get(1))
                    );
                    return out.error(&msg);
                }
                full = true;
                if argc == 6 {
                    match parse_i64(args.get(5)) {
                        Some(n) => count = n.max(0),
                        None => return out.error(NOT_INT),
                    }
                }
            }
            if full {
                xinfo_full(out, s, count as usize);
            } else {
                xinfo_stream(out, s);
            }
        }
    }
}

/// entries-read and lag of a group.
fn reply_group_counters(out: &mut ReplyWriter, s: &StreamValue, g: &ConsumerGroup) {
    out.bulk(b"entries-read");
    if g.entries_read != ENTRIES_READ_INVALID {
        out.integer(g.entries_read);
    } else {
        out.null();
    }
    out.bulk(b"lag");
    match s.group_lag(g) {
        Some(l) => out.integer(l),
        None => out.null(),
    }
}

fn xinfo_header(out: &mut ReplyWriter, s: &StreamValue) {
    out.bulk(b"length");
    out.integer(s.len() as i64);
    out.bulk(b"radix-tree-keys");
    out.integer(s.node_count() as i64);
    out.bulk(b"radix-tree-nodes");
    // Redis counts the radix tree's inner nodes; we have a B-tree, so report a
    // comparable figure (one per key plus the root).
    out.integer(s.node_count() as i64 + 1);
    out.bulk(b"last-generated-id");
    reply_id(out, s.last_id);
    out.bulk(b"max-deleted-entry-id");
    reply_id(out, s.max_deleted_id);
    out.bulk(b"entries-added");
    out.integer(s.entries_added as i64);
    out.bulk(b"recorded-first-entry-id");
    reply_id(out, s.first_id);
}

fn xinfo_stream(out: &mut ReplyWriter, s: &StreamValue) {
    out.map_len(10);
    xinfo_header(out, s);
    out.bulk(b"groups");
    out.integer(s.groups.len() as i64);
    for (label, rev) in [(&b"first-entry"[..], false), (b"last-entry", true)] {
        out.bulk(label);
        match s.range(StreamId::ZERO, StreamId::MAX, rev).next() {
            Some(e) => reply_entry(out, &e),
            None => out.null(),
        }
    }
}

fn xinfo_full(out: &mut ReplyWriter, s: &StreamValue, count: usize) {
    let limit = if count == 0 { usize::MAX } else { count };
    out.map_len(9);
    xinfo_header(out, s);
    out.bulk(b"entries");
    let entries = collect_range(s, StreamId::ZERO, StreamId::MAX, false, count);
    reply_entries(out, &entries);
    out.bulk(b"groups");
    out.array_len(s.groups.len());
    for (name, g) in &s.groups {
        out.map_len(7);
        out.bulk(b"name");
        out.bulk(name);
        out.bulk(b"last-delivered-id");
        reply_id(out, g.last_id);
        reply_group_counters(out, s, g);
        out.bulk(b"pel-count");
        out.integer(g.pel.len() as i64);
        out.bulk(b"pending");
        out.array_len(g.pel.len().min(limit));
        for (id, p) in g.pel.iter().take(limit) {
            out.array_len(4);
            reply_id(out, *id);
            out.bulk(&p.consumer);
            out.integer(p.delivery_time as i64);
            out.integer(p.delivery_count as i64);
        }
        out.bulk(b"consumers");
        out.array_len(g.consumers.len());
        for (cname, c) in &g.consumers {
            out.map_len(4);
            out.bulk(b"name");
            out.bulk(cname);
            out.bulk(b"seen-time");
            out.integer(c.seen_time as i64);
            out.bulk(b"pel-count");
            out.integer(c.pel.len() as i64);
            out.bulk(b"pending");
            out.array_len(c.pel.len().min(limit));
            for id in c.pel.iter().take(limit) {
                let p = g.pel.get(id);
                out.array_len(3);
                reply_id(out, *id);
                out.integer(p.map_or(0, |p| p.delivery_time as i64));
                out.integer(p.map_or(0, |p| p.delivery_count as i64));
            }
        }
    }
}

// ---------------------------------------------------------------------------
// XREAD / XREADGROUP
// ---------------------------------------------------------------------------

/// What a key's ID argument asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadFrom {
    /// `$`: after the stream's last ID when the command first runs.
    Last,
    /// `+` (Redis 7.4): from the stream's last entry, which is read at once.
    LastEntry,
    /// `>`: entries never delivered to the group.
    New,
    /// Entries after this ID (XREAD), or this consumer's history after it.
    After(StreamId),
}

/// A parsed XREAD / XREADGROUP.
struct ReadReq {
    /// (group, consumer) for XREADGROUP.
    group: Option<(Vec<u8>, Vec<u8>)>,
    noack: bool,
    /// 0 = no limit.
    count: usize,
    /// None: no BLOCK. Some(None): block forever.
    block: Option<Option<Duration>>,
    keys: Vec<Vec<u8>>,
    /// Per key: where to read from, or the error its ID argument gives.
    from: Vec<Result<ReadFrom, &'static str>>,
}

fn xread<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(read_generic(g, false))
}

fn xreadgroup<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(read_generic(g, true))
}

/// Parses the options (Redis's xreadCommand argument loop); errors are Redis's.
fn parse_read(args: &[Vec<u8>], group_cmd: bool, in_script: bool) -> Result<ReadReq, String> {
    let is = |i: usize, w: &str| args[i].eq_ignore_ascii_case(w.as_bytes());
    let mut req = ReadReq {
        group: None,
        noack: false,
        count: 0,
        block: None,
        keys: Vec::new(),
        from: Vec::new(),
    };
    let mut streams_at = 0;
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - i - 1;
        if is(i, "block") && more > 0 {
            if in_script {
                // Redis refuses it outright from scripts (its error names the command
                // as the script spelled it).
                return Err(format!(
                    "ERR {} command is not allowed with BLOCK option from scripts",
                    String::from_utf8_lossy(&args[0])
                ));
            }
            i += 1;
            let ms = parse_i64(&args[i]).ok_or("ERR timeout is not an integer or out of range")?;
            if ms < 0 {
                return Err("ERR timeout is negative".into());
            }
            let now = crate::util::now_ms() as i64;
            if ms > i64::MAX - now {
                return Err("ERR timeout is out of range".into());
            }
            req.block = Some((ms > 0).then(|| Duration::from_millis(ms as u64)));
        } else if is(i, "count") && more > 0 {
            i += 1;
            req.count = parse_i64(&args[i]).ok_or(NOT_INT)?.max(0) as usize;
        } else if is(i, "streams") && more > 0 {
            streams_at = i + 1;
            if !(args.len() - streams_at).is_multiple_of(2) {
                let (name, symbol) = if group_cmd {
                    ("xreadgroup", '>')
                } else {
                    ("xread", '$')
                };
                return Err(format!("ERR Unbalanced '{name}' list of streams: for each stream key an ID or '{symbol}' must be specified."));
            }
            break;
        } else if is(i, "group") && more >= 2 {
            if !group_cmd {
                return Err("ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.".into());
            }
            req.group = Some((args[i + 1].clone(), args[i + 2].clone()));
            i += 2;
        } else if is(i, "noack") {
            if !group_cmd {
                return Err("ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.".into());
            }
            req.noack = true;
        } else {
            return Err(SYNTAX_ERR.into());
        }
        i += 1;
    }
    if streams_at == 0 {
        return Err(SYNTAX_ERR.into());
    }
    if group_cmd && req.group.is_none() {
        return Err("ERR Missing GROUP option for XREADGROUP".into());
    }
    let n = (args.len() - streams_at) / 2;
    req.keys = args[streams_at..streams_at + n].to_vec();
    req.from = args[streams_at + n..]
        .iter()
        .map(|a| match a.as_slice() {
            b"$" if group_cmd => Err("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set."),
            b"$" => Ok(ReadFrom::Last),
            b"+" if group_cmd => Err("ERR The + ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The + ID would just return an empty result set."),
            b"+" => Ok(ReadFrom::LastEntry),
            b">" if !group_cmd => Err("ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option."),
            b">" => Ok(ReadFrom::New),
            _ => parse_strict_id(a).map(ReadFrom::After).ok_or(INVALID_ID),
        })
        .collect();
    Ok(req)
}

async fn read_generic(g: &mut GlobalCtx<'_>, group_cmd: bool) {
    // What a group read changes propagates where it is served (`serve_key`).
    g.propagation.nothing();
    let req = match parse_read(&g.args, group_cmd, g.session.in_script) {
        Ok(r) => r,
        Err(e) => return g.error(&e),
    };
    let cell = g.session.cell.clone();
    let db = g.session.db;
    let mut lock_keys: Vec<Vec<u8>> = Vec::with_capacity(req.keys.len());
    for k in &req.keys {
        if !lock_keys.contains(k) {
            lock_keys.push(k.clone());
        }
    }
    let deadline = req.block.flatten().map(|d| Instant::now() + d);
    let in_multi = g.session.multi.is_some() || g.session.exec_owner.is_some();
    let mut from: Vec<ReadFrom> = Vec::new();
    let mut reg: Option<Registration> = None;
    if !in_multi {
        match fast_try(g, &req, &lock_keys).await {
            None => {}
            Some(Fast::Done(outcome)) => return reply_outcome(g, outcome),
            Some(Fast::Blocked(f, state)) => {
                from = f;
                let shared = &g.session.shared;
                reg = Some(Registration::adopt(&cell, db, &lock_keys, state, shared));
            }
        }
    }
    let mut waiting = reg.is_some();
    loop {
        if waiting {
            let Some(r) = reg.as_ref() else { return };
            if g.session.shared.killed.get() {
                return;
            }
            match wait(&r.state, deadline).await {
                WaitEnd::Woken => {}
                // Stream readers are never served in place (no LocalServe), but a
                // reply handed over is a reply all the same.
                WaitEnd::Served(bytes) => {
                    drop(reg);
                    return g.out.extend_from_slice(&bytes);
                }
                WaitEnd::TimedOut | WaitEnd::Unblocked(UNBLOCK_NONE) => {
                    drop(reg);
                    return g.w().null_array();
                }
                WaitEnd::Unblocked(UNBLOCK_CLUSTER_REDIRECT) => {
                    let write = g.args[0].eq_ignore_ascii_case(b"xreadgroup");
                    let redirect = crate::connection::redirect::blocked_redirect(
                        g.session,
                        r.first_key(),
                        write,
                    );
                    match redirect {
                        Some(msg) => {
                            drop(reg);
                            return g.error(&msg);
                        }
                        None => r.state.clear_unblock(),
                    }
                }
                WaitEnd::Unblocked(mode) => {
                    drop(reg);
                    let Some(msg) = unblocked_error(mode) else {
                        return g.w().null_array();
                    };
                    g.session.close_after_reply |= mode == UNBLOCK_ROLE_CHANGE;
                    return g.error(msg);
                }
            }
        }
        waiting = true;
        let owner = g.owner();
        let mut op = MultiShardOp::lock_keys(owner, &cell, db, &lock_keys).await;
        let retry = reg.is_some();
        if !retry {
            match resolve(&op, &cell, db, &req).await {
                Ok(f) => from = f,
                Err(e) => {
                    op.set_read_only();
                    op.release(&cell).await;
                    return g.error(&e);
                }
            }
        }
        let spec = ServeSpec {
            group: req.group.clone(),
            noack: req.noack,
            count: req.count,
            proto: g.proto(),
            retry,
            txn: Some(owner.id),
        };
        let outcome = serve(&op, &cell, db, &req.keys, &from, &spec).await;
        let served = matches!(outcome, Outcome::Served(_));
        if !served || !group_cmd {
            op.set_read_only();
        }
        // serve_key counted the changes on each shard.
        op.count_dirty(0);
        if !matches!(outcome, Outcome::Nothing) || req.block.is_none() || in_multi {
            if let Some(r) = reg.as_ref() {
                r.state.finish();
            }
            op.release(&cell).await;
            drop(reg);
            return reply_outcome(g, outcome);
        }
        if reg.is_none() {
            let shared = &g.session.shared;
            reg = Some(Registration::register(&op, &cell, db, &lock_keys, shared, true).await);
        }
        op.release(&cell).await;
    }
}

fn reply_outcome(g: &mut GlobalCtx<'_>, outcome: Outcome) {
    match outcome {
        Outcome::Nothing => g.w().null_array(),
        Outcome::Error(e) => g.error(&e),
        Outcome::Served(parts) => write_served(&mut g.w(), parts),
    }
}

/// What the one-hop first try gave.
enum Fast {
    Done(Outcome),
    /// Nothing yet: registered as blocked (with the resolved IDs).
    Blocked(Vec<ReadFrom>, Arc<BlockState>),
}

/// The first try when every key is on one shard and none is locked: check, serve,
/// and register as blocked in one hop, so a write sent right after the command
/// finds the client already waiting. None: take the locking path.
async fn fast_try(g: &GlobalCtx<'_>, req: &ReadReq, lock_keys: &[Vec<u8>]) -> Option<Fast> {
    let cell = &g.session.cell;
    let shard = cell.shard_of(lock_keys.first()?);
    if lock_keys.iter().any(|k| cell.shard_of(k) != shard) {
        return None;
    }
    let db = g.session.db;
    let keys = req.keys.clone();
    let ids = req.from.clone();
    let lock_keys = lock_keys.to_vec();
    let block = req.block.is_some();
    let client = g.session.shared.id;
    let state = BlockState::with_mode(client, true);
    let spec = ServeSpec {
        group: req.group.clone(),
        noack: req.noack,
        count: req.count,
        proto: g.proto(),
        retry: false,
        txn: None,
    };
    cell.call(shard, move |c| {
        {
            let locks = c.locks.borrow();
            if !locks.is_idle() && lock_keys.iter().any(|k| locks.blocks(db as u8, k, None)) {
                return None;
            }
        }
        let mut d = c.data.borrow_mut();
        let now = crate::util::now_ms();
        let group = spec.group.as_ref().map(|(g, _)| g.as_slice());
        let checked = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (i, check_key(&mut d.dbs[db], k, group, now)))
            .collect();
        let from = match combine(checked, &ids) {
            Ok(f) => f,
            Err(e) => return Some(Fast::Done(Outcome::Error(e))),
        };
        let items = keys.iter().cloned().zip(from.iter().copied()).collect();
        match serve_items(&mut d, db, items, &spec, now) {
            Err(e) => Some(Fast::Done(Outcome::Error(e))),
            Ok(parts) if !parts.is_empty() => {
                if spec.group.is_some() {
                    // serve_key counted the changes; the keys wake whoever waits on
                    // them once this hop is over.
                    let written = Written {
                        keys: lock_keys.iter().map(|k| (db, k.as_slice())),
                        changes: 0,
                        client,
                        wake: Wake::WhenReleased,
                    };
                    exec::after_write(&c.locks, &mut d, written);
                }
                Some(Fast::Done(Outcome::Served(parts)))
            }
            Ok(_) if !block => Some(Fast::Done(Outcome::Nothing)),
            Ok(_) => {
                for k in lock_keys {
                    d.blocked.add(db, k, state.clone());
                }
                Some(Fast::Blocked(from, state))
            }
        }
    })
    .await
}

/// Writes the served keys: RESP2 `[[key, entries] ...]`, RESP3 `{key: entries}`.
fn write_served(w: &mut ReplyWriter, parts: Vec<Vec<u8>>) {
    match w.proto {
        Protocol::Resp2 => w.array_len(parts.len()),
        Protocol::Resp3 => w.map_len(parts.len()),
    }
    for p in parts {
        w.out.extend_from_slice(&p);
    }
}

/// Consecutive runs of keys on one shard: (shard, [index]).
fn runs(cell: &ShardCell, keys: &[Vec<u8>]) -> Vec<(usize, Vec<usize>)> {
    let mut out: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let s = cell.shard_of(k);
        match out.last_mut() {
            Some((last, idx)) if *last == s => idx.push(i),
            _ => out.push((s, vec![i])),
        }
    }
    out
}

/// The first try's checks, in argument order as Redis makes them: each key's type
/// (and group), then its ID argument. Resolves `$` to the stream's last ID.
async fn resolve(
    op: &MultiShardOp,
    cell: &Rc<ShardCell>,
    db: usize,
    req: &ReadReq,
) -> Result<Vec<ReadFrom>, String> {
    let group = req.group.as_ref().map(|(g, _)| g.clone());
    let mut checked: Vec<(usize, Result<Option<StreamId>, String>)> = Vec::new();
    for (shard, idx) in runs(cell, &req.keys) {
        let keys: Vec<(usize, Vec<u8>)> = idx.iter().map(|&i| (i, req.keys[i].clone())).collect();
        let group = group.clone();
        let r = op
            .on(cell, shard, move |d| {
                let now = crate::util::now_ms();
                keys.into_iter()
                    .map(|(i, k)| (i, check_key(&mut d.dbs[db], &k, group.as_deref(), now)))
                    .collect::<Vec<_>>()
            })
            .await;
        checked.extend(r);
    }
    checked.sort_by_key(|(i, _)| *i);
    combine(checked, &req.from)
}

/// Merges the per-key checks (in argument order) with the parsed ID arguments: the
/// first error wins, a key's own check before its ID; `$` becomes the last ID, `+`
/// the one before it (so the last entry is read), both 0-0 for a missing key.
fn combine(
    checked: Vec<(usize, Result<Option<StreamId>, String>)>,
    ids: &[Result<ReadFrom, &'static str>],
) -> Result<Vec<ReadFrom>, String> {
    let mut out = Vec::with_capacity(ids.len());
    for (i, last) in checked {
        let last = last?;
        match ids[i] {
            Err(e) => return Err(e.to_string()),
            Ok(ReadFrom::Last) => out.push(ReadFrom::After(last.unwrap_or(StreamId::ZERO))),
            Ok(ReadFrom::LastEntry) => match last.map(StreamId::decr) {
                None => out.push(ReadFrom::After(StreamId::ZERO)),
                Some(Some(before)) => out.push(ReadFrom::After(before)),
                Some(None) => return Err("ERR the stream last element ID is 0-0".into()),
            },
            Ok(f) => out.push(f),
        }
    }
    Ok(out)
}

/// A key's type (and group) check; Ok(its last ID, None if missing).
fn check_key(
    db: &mut Db,
    key: &[u8],
    group: Option<&[u8]>,
    now: u64,
) -> Result<Option<StreamId>, String> {
    let s = match as_stream(db.get(key, now)) {
        Err(()) => return Err(WRONGTYPE.into()),
        Ok(s) => s,
    };
    if let Some(g) = group {
        if !s.as_ref().is_some_and(|s| s.groups.contains_key(g)) {
            return Err(format!(
                "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(g)
            ));
        }
    }
    Ok(s.map(|s| s.last_id))
}

#[derive(Clone)]
struct ServeSpec {
    group: Option<(Vec<u8>, Vec<u8>)>,
    noack: bool,
    count: usize,
    proto: Protocol,
    /// After a wake-up: serve at most one key, and a vanished key or group is an
    /// error for XREADGROUP (plain XREAD keeps waiting).
    retry: bool,
    /// The transaction the read is part of: what a group read propagates joins it.
    txn: Option<u64>,
}

enum Outcome {
    Nothing,
    Served(Vec<Vec<u8>>),
    Error(String),
}

/// What serving one key gave.
enum KeyServe {
    Skip,
    Data(Vec<u8>),
    Error(String),
}

/// Serves the keys in argument order, one hop per run of keys on one shard.
async fn serve(
    op: &MultiShardOp,
    cell: &Rc<ShardCell>,
    db: usize,
    keys: &[Vec<u8>],
    from: &[ReadFrom],
    spec: &ServeSpec,
) -> Outcome {
    let mut parts = Vec::new();
    let mut seen: Vec<&[u8]> = Vec::new();
    for (shard, idx) in runs(cell, keys) {
        let mut items: Vec<(Vec<u8>, ReadFrom)> = Vec::with_capacity(idx.len());
        for i in idx {
            // A blocked client waits on each key once, for its first ID.
            if spec.retry && seen.contains(&keys[i].as_slice()) {
                continue;
            }
            seen.push(&keys[i]);
            items.push((keys[i].clone(), from[i]));
        }
        let sp = spec.clone();
        let r = op
            .on(cell, shard, move |d| {
                serve_items(d, db, items, &sp, crate::util::now_ms())
            })
            .await;
        match r {
            Err(e) => return Outcome::Error(e),
            Ok(got) => parts.extend(got),
        }
        if spec.retry && !parts.is_empty() {
            break;
        }
    }
    if parts.is_empty() {
        Outcome::Nothing
    } else {
        Outcome::Served(parts)
    }
}

/// Serves keys of this shard in order (after a wake-up, only the first with data).
fn serve_items(
    d: &mut ShardData,
    db: usize,
    items: Vec<(Vec<u8>, ReadFrom)>,
    spec: &ServeSpec,
    now: u64,
) -> Result<Vec<Vec<u8>>, String> {
    let mut got = Vec::new();
    for (k, f) in items {
        match serve_key(d, db, &k, f, spec, now) {
            KeyServe::Skip => {}
            KeyServe::Data(b) => {
                got.push(b);
                if spec.retry {
                    break;
                }
            }
            KeyServe::Error(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Serves one key: its `[key, entries]` reply part (RESP3: `key entries`).
fn serve_key(
    d: &mut ShardData,
    db: usize,
    key: &[u8],
    from: ReadFrom,
    spec: &ServeSpec,
    now: u64,
) -> KeyServe {
    let s = match as_stream(d.dbs[db].get(key, now)) {
        Ok(Some(s)) => s,
        _ if spec.retry && spec.group.is_some() => {
            return KeyServe::Error("UNBLOCKED the stream key no longer exists".into())
        }
        _ => return KeyServe::Skip,
    };
    let mut buf = Vec::new();
    let mut w = ReplyWriter::new(&mut buf, spec.proto);
    if spec.proto == Protocol::Resp2 {
        w.array_len(2);
    }
    w.bulk(key);
    let Some((group, consumer)) = &spec.group else {
        let ReadFrom::After(gt) = from else {
            return KeyServe::Skip;
        };
        if s.is_empty() || s.last_valid_id() <= gt {
            return KeyServe::Skip;
        }
        let Some(start) = gt.incr() else {
            return KeyServe::Skip;
        };
        let entries = collect_range(s, start, StreamId::MAX, false, spec.count);
        reply_entries(&mut w, &entries);
        return KeyServe::Data(buf);
    };
    let Some(g) = s.groups.get(group.as_slice()) else {
        return KeyServe::Error(
            "NOGROUP the consumer group this client was blocked on no longer exists".into(),
        );
    };
    let had_consumer = g.consumers.contains_key(consumer.as_slice());
    let delivered = match from {
        ReadFrom::After(gt) => {
            serve_history(&mut w, s, group, consumer, gt, spec.count, now);
            Vec::new()
        }
        _ => {
            let last = g.last_id;
            if s.is_empty() || s.last_valid_id() <= last {
                return KeyServe::Skip;
            }
            serve_new(&mut w, s, group, consumer, last, spec, now)
        }
    };
    let created = notify_new_consumer(s, group, consumer, had_consumer, key, db);
    if crate::effects::active() {
        let last = s
            .groups
            .get(group.as_slice())
            .map(|g| (g.last_id, g.entries_read));
        let read = GroupRead {
            key,
            group,
            consumer,
            created,
            noack: spec.noack,
        };
        propagate_group_read(spec.txn, db, &read, &delivered, last, now);
    }
    // Redis's change counter: one for a consumer created, and one per key a group read
    // served at once (not when it serves a client that was blocked).
    d.dirty += u64::from(created) + u64::from(!spec.retry);
    KeyServe::Data(buf)
}

/// "xgroup-createconsumer" when a command created the consumer as a side effect
/// (XREADGROUP, XCLAIM, XAUTOCLAIM), as Redis's streamCreateConsumer does. Whether it
/// was created.
fn notify_new_consumer(
    s: &StreamValue,
    group: &[u8],
    consumer: &[u8],
    had: bool,
    key: &[u8],
    db: usize,
) -> bool {
    let has = s
        .groups
        .get(group)
        .is_some_and(|g| g.consumers.contains_key(consumer));
    if !had && has {
        stream_event("xgroup-createconsumer", key, db);
    }
    !had && has
}

/// XREADGROUP with an ID: the consumer's pending entries after `gt` (deleted ones
/// as `[id, nil]`), each counted as delivered again.
fn serve_history(
    w: &mut ReplyWriter,
    s: &mut StreamValue,
    group: &[u8],
    consumer: &[u8],
    gt: StreamId,
    count: usize,
    now: u64,
) {
    let Some(g) = s.groups.get_mut(group) else {
        return w.array_len(0);
    };
    g.touch_consumer(consumer, now);
    let ids: Vec<StreamId> = match (g.consumers.get(consumer), gt.incr()) {
        (Some(c), Some(start)) => {
            let it = c.pel.range(start..).copied();
            if count == 0 {
                it.collect()
            } else {
                it.take(count).collect()
            }
        }
        _ => Vec::new(),
    };
    let mut group_state = s.groups.remove(group);
    w.array_len(ids.len());
    for id in ids {
        match s.get(id) {
            Some(e) => {
                reply_entry(w, &e);
                if let Some(p) = group_state.as_mut().and_then(|g| g.pel.get_mut(&id)) {
                    p.delivery_time = now;
                    p.delivery_count = p.delivery_count.wrapping_add(1);
                }
            }
            None => {
                w.array_len(2);
                reply_id(w, id);
                w.null_array();
            }
        }
    }
    if let Some(g) = group_state {
        s.groups.insert(group.to_vec(), g);
    }
}

/// XREADGROUP `>`: entries after the group's last ID, moved into the PEL.
fn serve_new(
    w: &mut ReplyWriter,
    s: &mut StreamValue,
    group: &[u8],
    consumer: &[u8],
    last: StreamId,
    spec: &ServeSpec,
    now: u64,
) -> Vec<StreamId> {
    let Some(start) = last.incr() else {
        w.array_len(0);
        return Vec::new();
    };
    let ids: Vec<StreamId> = {
        let entries = collect_range(s, start, StreamId::MAX, false, spec.count);
        reply_entries(w, &entries);
        entries.iter().map(|e| e.id).collect()
    };
    for &id in &ids {
        s.advance_group(group, id);
    }
    if let Some(g) = s.groups.get_mut(group) {
        let name = g.touch_consumer(consumer, now);
        if !spec.noack {
            for &id in &ids {
                g.deliver(id, &name, now);
            }
        }
    }
    ids
}

/// One consumer's group read of one key, as it propagates.
struct GroupRead<'a> {
    key: &'a [u8],
    group: &'a [u8],
    consumer: &'a [u8],
    /// The read created the consumer.
    created: bool,
    noack: bool,
}

/// What a group read propagates, where it is served (Redis's
/// streamPropagateConsumerCreation, streamPropagateXCLAIM, streamPropagateGroupID): the
/// consumer a NOACK read created; each new entry delivered as an XCLAIM that puts it in the
/// consumer's pending list on the replica, or with NOACK the group's new last ID.
fn propagate_group_read(
    txn: Option<u64>,
    db: usize,
    read: &GroupRead,
    delivered: &[StreamId],
    last: Option<(StreamId, i64)>,
    now: u64,
) {
    let word = |b: &[u8]| b.to_vec();
    // Without NOACK the XCLAIMs create the consumer on the replica.
    if read.created && read.noack {
        let argv = vec![
            b"XGROUP".to_vec(),
            b"CREATECONSUMER".to_vec(),
            word(read.key),
            word(read.group),
            word(read.consumer),
        ];
        crate::effects::propagate(txn, db, argv);
    }
    let (Some((last, entries_read)), false) = (last, delivered.is_empty()) else {
        return;
    };
    if read.noack {
        let argv = setid_effect(read.key, read.group, (last, entries_read));
        return crate::effects::propagate(txn, db, argv);
    }
    let last = last.to_string().into_bytes();
    for &id in delivered {
        let pending = (now, 1);
        let argv = claim_effect((read.key, read.group, read.consumer), id, pending, &last);
        crate::effects::propagate(txn, db, argv);
    }
}

/// `XGROUP SETID key group last ENTRIESREAD n`: how a group's last delivered ID (and
/// its read counter) moved without a pending entry to say it (a NOACK read, an XCLAIM
/// that only moved LASTID) propagates, as Redis's streamPropagateGroupID.
fn setid_effect(key: &[u8], group: &[u8], (last, entries_read): (StreamId, i64)) -> Vec<Vec<u8>> {
    vec![
        b"XGROUP".to_vec(),
        b"SETID".to_vec(),
        key.to_vec(),
        group.to_vec(),
        last.to_string().into_bytes(),
        b"ENTRIESREAD".to_vec(),
        entries_read.to_string().into_bytes(),
    ]
}

/// `XCLAIM key group consumer 0 id TIME ms RETRYCOUNT n FORCE JUSTID LASTID last`:
/// how a pending entry given to a consumer (by a group read, XCLAIM or XAUTOCLAIM)
/// propagates, with its delivery time and count as they are now (Redis's
/// streamPropagateXCLAIM); for an entry no longer in the stream the replica drops
/// the pending entry. `(key, group, consumer)`, `pending`: (delivery ms, count).
fn claim_effect(
    (key, group, consumer): (&[u8], &[u8], &[u8]),
    id: StreamId,
    (time, count): (u64, u64),
    last: &[u8],
) -> Vec<Vec<u8>> {
    vec![
        b"XCLAIM".to_vec(),
        key.to_vec(),
        group.to_vec(),
        consumer.to_vec(),
        b"0".to_vec(),
        id.to_string().into_bytes(),
        b"TIME".to_vec(),
        time.to_string().into_bytes(),
        b"RETRYCOUNT".to_vec(),
        count.to_string().into_bytes(),
        b"FORCE".to_vec(),
        b"JUSTID".to_vec(),
        b"LASTID".to_vec(),
        last.to_vec(),
    ]
}

/// What XCLAIM and XAUTOCLAIM propagate instead of themselves: one XCLAIM per entry
/// claimed (`claimed`, as it is in the group's pending list now) or dropped because
/// the entry is gone (`dropped`), so the replica does not decide idle times itself.
fn claims_effects(
    names: (&[u8], &[u8], &[u8]),
    g: &ConsumerGroup,
    claimed: &[StreamId],
    dropped: &[StreamId],
) -> Vec<Vec<Vec<u8>>> {
    let last = g.last_id.to_string().into_bytes();
    let pending = |id: &StreamId| {
        g.pel
            .get(id)
            .map_or((0, 0), |p| (p.delivery_time, p.delivery_count))
    };
    claimed
        .iter()
        .chain(dropped)
        .map(|id| claim_effect(names, *id, pending(id), &last))
        .collect()
}
