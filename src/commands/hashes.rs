//! Hash commands (Redis's t_hash.c): HSET and friends, counters, whole-hash reads,
//! HRANDFIELD and HSCAN. Every command has one key, so all run on its owning shard.
//!
//! Fields may have deadlines (Redis 7.4, see `hash_expire`): every command here deletes
//! the due fields of the hash it looks up before using it, so none of them ever shows
//! an expired field. A hash without field TTLs pays one branch for that check.

use super::hash_expire;
use super::hash_getex;
use super::table::K1;
use super::table::{flags::*, CommandSpec, Cross, Kind};
use super::{notify, parse_i64, ExecCtx, NOT_FLOAT, NOT_INT, OVERFLOW, SYNTAX_ERR, WRONGTYPE};
use crate::protocol::reply::{Protocol, ReplyWriter};
use crate::storage::hash::HashValue;
use crate::storage::limits::EncodingLimits;
use crate::storage::{Entry, Rng, Value, NO_EXPIRE};
use crate::util::glob::glob_match;
use crate::util::long_double::LongDouble;

const HASH: &[&str] = &["@hash"];

macro_rules! cmd {
    ($name:expr, $arity:expr, $flags:expr, $handler:expr, $since:expr, $summary:expr) => {
        CommandSpec {
            name: $name,
            arity: $arity,
            flags: $flags,
            keys: K1,
            kind: Kind::Keyed($handler, Cross::Never),
            group: "hash",
            since: $since,
            summary: $summary,
            acl: HASH,
        }
    };
}

/// The hash family's rows: one line per command reads best as a table.
#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    cmd!("hset", -4, WRITE | DENYOOM | FAST, hset, "2.0.0", "Set the string value of a hash field"),
    cmd!("hsetnx", 4, WRITE | DENYOOM | FAST, hsetnx, "2.0.0", "Set the value of a hash field, only if the field does not exist"),
    cmd!("hmset", -4, WRITE | DENYOOM | FAST, hmset, "2.0.0", "Set multiple hash fields to multiple values"),
    cmd!("hget", 3, READONLY | FAST, hget, "2.0.0", "Get the value of a hash field"),
    cmd!("hmget", -3, READONLY | FAST, hmget, "2.0.0", "Get the values of all the given hash fields"),
    cmd!("hgetall", 2, READONLY, hgetall, "2.0.0", "Get all the fields and values in a hash"),
    cmd!("hkeys", 2, READONLY, hkeys, "2.0.0", "Get all the fields in a hash"),
    cmd!("hvals", 2, READONLY, hvals, "2.0.0", "Get all the values in a hash"),
    cmd!("hdel", -3, WRITE | FAST, hdel, "2.0.0", "Delete one or more hash fields"),
    cmd!("hlen", 2, READONLY | FAST, hlen, "2.0.0", "Get the number of fields in a hash"),
    cmd!("hexists", 3, READONLY | FAST, hexists, "2.0.0", "Determine if a hash field exists"),
    cmd!("hstrlen", 3, READONLY | FAST, hstrlen, "3.2.0", "Get the length of the value of a hash field"),
    cmd!("hincrby", 4, WRITE | DENYOOM | FAST, hincrby, "2.0.0", "Increment the integer value of a hash field by the given number"),
    cmd!("hincrbyfloat", 4, WRITE | DENYOOM | FAST, hincrbyfloat, "2.6.0", "Increment the float value of a hash field by the given amount"),
    cmd!("hrandfield", -2, READONLY, hrandfield, "6.2.0", "Get one or multiple random fields from a hash"),
    cmd!("hscan", -3, READONLY, hscan, "2.8.0", "Incrementally iterate hash fields and associated values"),
    // Field expiration (hash_expire.rs), as Redis 7.4's table has it.
    cmd!("hexpire", -6, WRITE | DENYOOM | FAST, hash_expire::hexpire, "7.4.0", "Set expiry for hash field using relative time to expire (seconds)"),
    cmd!("hpexpire", -6, WRITE | DENYOOM | FAST, hash_expire::hpexpire, "7.4.0", "Set expiry for hash field using relative time to expire (milliseconds)"),
    cmd!("hexpireat", -6, WRITE | DENYOOM | FAST, hash_expire::hexpireat, "7.4.0", "Set expiry for hash field using an absolute Unix timestamp (seconds)"),
    cmd!("hpexpireat", -6, WRITE | DENYOOM | FAST, hash_expire::hpexpireat, "7.4.0", "Set expiry for hash field using an absolute Unix timestamp (milliseconds)"),
    cmd!("httl", -5, READONLY | FAST, hash_expire::httl, "7.4.0", "Returns the TTL in seconds of a hash field."),
    cmd!("hpttl", -5, READONLY | FAST, hash_expire::hpttl, "7.4.0", "Returns the TTL in milliseconds of a hash field."),
    cmd!("hexpiretime", -5, READONLY | FAST, hash_expire::hexpiretime, "7.4.0", "Returns the expiration time of a hash field as a Unix timestamp, in seconds."),
    cmd!("hpexpiretime", -5, READONLY | FAST, hash_expire::hpexpiretime, "7.4.0", "Returns the expiration time of a hash field as a Unix timestamp, in msec."),
    cmd!("hpersist", -5, WRITE | FAST, hash_expire::hpersist, "7.4.0", "Removes the expiration time for each specified field"),
    // Get or set fields with their TTL (hash_getex.rs), as Redis 8.0's table has them.
    cmd!("hgetdel", -5, WRITE | FAST, hash_getex::hgetdel, "8.0.0", "Returns the value of a field and deletes it from the hash."),
    cmd!("hgetex", -5, WRITE | FAST, hash_getex::hgetex, "8.0.0", "Get the value of one or more fields of a given hash key, and optionally set their expiration."),
    cmd!("hsetex", -6, WRITE | DENYOOM | FAST, hash_getex::hsetex, "8.0.0", "Set the value of one or more fields of a given hash key, and optionally set their expiration."),
];

/// The hash at a looked-up entry: `Ok(None)` if missing, `Err` if another type.
pub(super) fn as_hash(entry: Option<&mut Entry>) -> Result<Option<&mut HashValue>, ()> {
    match entry {
        None => Ok(None),
        Some(e) => match e.value_mut() {
            Value::Hash(h) => Ok(Some(h)),
            _ => Err(()),
        },
    }
}

/// What `modify_hash` found at the key.
pub(super) enum Found<R, F> {
    /// The hash, and what `f` returned for it.
    Hash(R),
    /// No such key: `f` comes back unused.
    Missing(F),
}

/// Runs `f` on the hash at `key` for writing, its due fields deleted first. Err for
/// another type.
pub(super) fn modify_hash<R, F: FnOnce(&mut HashValue) -> R>(
    ctx: &mut ExecCtx,
    key: &[u8],
    f: F,
) -> Result<Found<R, F>, ()> {
    let now = ctx.now;
    match as_hash(ctx.lookup_write(key))? {
        None => return Ok(Found::Missing(f)),
        Some(h) if !h.fields_due(now) => return Ok(Found::Hash(f(h))),
        Some(_) => {}
    }
    drop_due_fields(ctx, key);
    let db = ctx.db;
    Ok(match as_hash(ctx.data.dbs[db].get(key, now))? {
        Some(h) => Found::Hash(f(h)),
        None => Found::Missing(f),
    })
}

/// Deletes the due fields of the hash at `key` (and the key if none is left), as the
/// server's write: replicas get their HDELs, WATCH and tracking hear of it. Where
/// fields do not expire (a replica, a client pause, loading) they stay: returns true.
pub(super) fn drop_due_fields(ctx: &mut ExecCtx, key: &[u8]) -> bool {
    let now = ctx.now;
    let db = ctx.db();
    if !db.fields_expire_here() {
        return true;
    }
    db.expire_due_fields(key, now);
    ctx.signal_also(ctx.db, key, true, false);
    false
}

/// The hash as a reader sees it where due fields are kept (a replica's own clients):
/// a copy without them. The master's own commands see the hash as it is.
fn without_due_fields(h: &HashValue, now: u64) -> Option<std::borrow::Cow<'_, HashValue>> {
    use std::borrow::Cow;
    if crate::storage::entry::replaying() {
        return Some(Cow::Borrowed(h));
    }
    let mut copy = h.clone();
    copy.expire_due_fields(now, usize::MAX, |_| {});
    (!copy.is_empty()).then_some(Cow::Owned(copy))
}

/// Runs `f` on the hash at `key` for writing, on a fresh empty hash if the key is
/// missing (stored only if `f` left it non-empty: Redis never keeps an empty hash).
/// Replies WRONGTYPE and returns None for another type.
pub(super) fn write_hash<R>(
    ctx: &mut ExecCtx,
    key: &[u8],
    f: impl FnOnce(&mut HashValue, &EncodingLimits) -> R,
) -> Option<R> {
    let limits = ctx.data.limits;
    match modify_hash(ctx, key, |h| f(h, &limits)) {
        Err(()) => {
            ctx.error(WRONGTYPE);
            None
        }
        Ok(Found::Hash(r)) => Some(r),
        Ok(Found::Missing(f)) => {
            let mut h = HashValue::new();
            let r = f(&mut h);
            if !h.is_empty() {
                let lru = crate::util::lru_clock();
                ctx.db()
                    .insert_new(key, Value::Hash(Box::new(h)), NO_EXPIRE, lru);
            }
            Some(r)
        }
    }
}

/// Looks a hash up for reading and replies from it with `f`; a missing key gets
/// `missing`, another type WRONGTYPE.
pub(super) fn read_hash(
    ctx: &mut ExecCtx,
    missing: impl FnOnce(&mut ReplyWriter),
    f: impl FnOnce(&HashValue, &mut ReplyWriter),
) {
    let key = ctx.args.get(1);
    let now = ctx.now;
    let (entry, out) = ctx.read_with_out(key);
    match as_hash(entry) {
        Ok(Some(h)) if !h.fields_due(now) => return f(h, out),
        Ok(Some(_)) => {}
        Ok(None) => return missing(out),
        Err(()) => return out.error(WRONGTYPE),
    }
    let kept = drop_due_fields(ctx, key);
    let db = ctx.db;
    let (entry, out) = (ctx.data.dbs[db].get(key, now), &mut ctx.out);
    match as_hash(entry) {
        Ok(Some(h)) if kept => match without_due_fields(h, now) {
            Some(live) => f(&live, out),
            None => missing(out),
        },
        Ok(Some(h)) => f(h, out),
        _ => missing(out),
    }
}

/// HSET and HMSET: field/value pairs from argument 2 on. Returns the fields added, or
/// None after an error reply.
fn set_pairs(ctx: &mut ExecCtx) -> Option<i64> {
    if ctx.args.len() % 2 == 1 {
        ctx.arity_error();
        return None;
    }
    let args = ctx.args;
    let added = write_hash(ctx, args.get(1), |h, limits| {
        let mut added = 0;
        for i in (2..args.len()).step_by(2) {
            added += h.set(args.get(i), args.get(i + 1), limits) as i64;
        }
        added
    })?;
    ctx.notify(notify::HASH, "hset", args.get(1));
    // One per field given, new or overwritten (Redis's hsetCommand).
    ctx.dirty(((args.len() - 2) / 2) as u64);
    Some(added)
}

fn hset(ctx: &mut ExecCtx) {
    if let Some(n) = set_pairs(ctx) {
        ctx.out.integer(n);
    }
}

fn hmset(ctx: &mut ExecCtx) {
    if set_pairs(ctx).is_some() {
        ctx.out.ok();
    }
}

fn hsetnx(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let added = write_hash(ctx, args.get(1), |h, limits| {
        let (field, value) = (args.get(2), args.get(3));
        !h.contains(field) && h.set(field, value, limits)
    });
    if let Some(added) = added {
        if added {
            ctx.notify(notify::HASH, "hset", args.get(1));
        } else {
            ctx.nothing_changed();
        }
        ctx.out.integer(added as i64);
    }
}

fn hget(ctx: &mut ExecCtx) {
    let field = ctx.args.get(2);
    read_hash(
        ctx,
        |out| out.null(),
        |h, out| match h.get(field) {
            Some(v) => out.bulk(v),
            None => out.null(),
        },
    );
}

fn hmget(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let fields = 2..args.len();
    read_hash(
        ctx,
        |out| {
            out.array_len(fields.len());
            for _ in fields.clone() {
                out.null();
            }
        },
        |h, out| {
            out.array_len(fields.len());
            for i in fields.clone() {
                match h.get(args.get(i)) {
                    Some(v) => out.bulk(v),
                    None => out.null(),
                }
            }
        },
    );
}

fn hgetall(ctx: &mut ExecCtx) {
    read_hash(
        ctx,
        |out| out.map_len(0),
        |h, out| {
            out.map_len(h.len());
            for (f, v) in h.iter() {
                out.bulk(f);
                out.bulk(v);
            }
        },
    );
}

fn hkeys(ctx: &mut ExecCtx) {
    read_hash(
        ctx,
        |out| out.array_len(0),
        |h, out| {
            out.array_len(h.len());
            for (f, _) in h.iter() {
                out.bulk(f);
            }
        },
    );
}

fn hvals(ctx: &mut ExecCtx) {
    read_hash(
        ctx,
        |out| out.array_len(0),
        |h, out| {
            out.array_len(h.len());
            for (_, v) in h.iter() {
                out.bulk(v);
            }
        },
    );
}

fn hdel(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let key = args.get(1);
    let removed = modify_hash(ctx, key, |h| {
        let n = (2..args.len()).filter(|&i| h.remove(args.get(i))).count();
        (n, h.is_empty())
    });
    let (deleted, emptied) = match removed {
        Err(()) => return ctx.error(WRONGTYPE),
        Ok(Found::Missing(_)) => (0, false),
        Ok(Found::Hash(r)) => r,
    };
    if emptied {
        ctx.db().remove(key);
    }
    if deleted > 0 {
        ctx.dirty(deleted as u64);
        ctx.notify(notify::HASH, "hdel", key);
        if emptied {
            ctx.notify(notify::GENERIC, "del", key);
        }
    } else {
        ctx.nothing_changed();
    }
    ctx.out.integer(deleted as i64);
}

fn hlen(ctx: &mut ExecCtx) {
    read_hash(
        ctx,
        |out| out.integer(0),
        |h, out| out.integer(h.len() as i64),
    );
}

fn hexists(ctx: &mut ExecCtx) {
    let field = ctx.args.get(2);
    read_hash(
        ctx,
        |out| out.integer(0),
        |h, out| out.integer(h.contains(field) as i64),
    );
}

fn hstrlen(ctx: &mut ExecCtx) {
    let field = ctx.args.get(2);
    read_hash(
        ctx,
        |out| out.integer(0),
        |h, out| out.integer(h.get(field).map_or(0, |v| v.len()) as i64),
    );
}

fn hincrby(ctx: &mut ExecCtx) {
    let Some(incr) = parse_i64(ctx.args.get(3)) else {
        return ctx.error(NOT_INT);
    };
    let args = ctx.args;
    let result = write_hash(ctx, args.get(1), |h, limits| {
        let field = args.get(2);
        let cur = match h.get(field) {
            None => 0,
            Some(v) => parse_i64(v).ok_or("ERR hash value is not an integer")?,
        };
        let n = cur.checked_add(incr).ok_or(OVERFLOW)?;
        let mut buf = [0u8; 24];
        h.set_keep_ttl(
            field,
            crate::storage::value::format_i64(n, &mut buf),
            limits,
        );
        Ok(n)
    });
    match result {
        Some(Ok(n)) => {
            ctx.notify(notify::HASH, "hincrby", args.get(1));
            ctx.out.integer(n)
        }
        Some(Err(e)) => ctx.error(e),
        None => {}
    }
}

fn hincrbyfloat(ctx: &mut ExecCtx) {
    let Some(incr) = LongDouble::parse(ctx.args.get(3)) else {
        return ctx.error(NOT_FLOAT);
    };
    if incr.is_nan_or_infinite() {
        return ctx.error("ERR value is NaN or Infinity");
    }
    let args = ctx.args;
    let result = write_hash(ctx, args.get(1), |h, limits| {
        let field = args.get(2);
        let cur = match h.get(field) {
            None => LongDouble::from_i64(0),
            Some(v) => LongDouble::parse(v).ok_or("ERR hash value is not a float")?,
        };
        let n = cur.add(&incr);
        if n.is_nan_or_infinite() {
            return Err("ERR increment would produce NaN or Infinity");
        }
        let mut text = Vec::with_capacity(32);
        n.format_human(&mut text);
        h.set_keep_ttl(field, &text, limits);
        Ok((text, h.field_expire(field)))
    });
    match result {
        Some(Ok((text, deadline))) => {
            ctx.notify(notify::HASH, "hincrbyfloat", args.get(1));
            ctx.out.bulk(&text);
            // The result, not the increment: float arithmetic must not run twice.
            let (key, field) = (args.get(1), args.get(2));
            ctx.propagation
                .rewrite(|| vec![b"HSET".to_vec(), key.to_vec(), field.to_vec(), text]);
            // HSET drops a field's TTL, which HINCRBYFLOAT keeps: the deadline goes
            // after it (Redis 8.0 sends HSETEX KEEPTTL instead, which a 7.4 replica
            // would not know).
            if let Some(at) = deadline {
                ctx.propagation.also(|| {
                    let at = at.to_string().into_bytes();
                    let fields = [b"FIELDS".as_slice(), b"1", field].map(<[u8]>::to_vec);
                    [
                        vec![b"HPEXPIREAT".to_vec(), key.to_vec(), at],
                        fields.to_vec(),
                    ]
                    .concat()
                });
            }
        }
        Some(Err(e)) => ctx.error(e),
        None => {}
    }
}

/// HRANDFIELD key [count [WITHVALUES]].
fn hrandfield(ctx: &mut ExecCtx) {
    let argc = ctx.args.len();
    if argc == 2 {
        return hrandfield_one(ctx);
    }
    let count = match parse_i64(ctx.args.get(2)) {
        Some(n) if n == i64::MIN => {
            return ctx.error("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
        }
        Some(n) => n,
        None => return ctx.error(NOT_INT),
    };
    if argc > 4 || (argc == 4 && !ctx.args.is(3, "withvalues")) {
        return ctx.error(SYNTAX_ERR);
    }
    let withvalues = argc == 4;
    // Redis bounds WITHVALUES counts so the doubled reply length cannot overflow.
    if withvalues && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
        return ctx.error("ERR value is out of range");
    }
    hrandfield_count(ctx, count, withvalues);
}

/// HRANDFIELD's view of a hash with due fields: they are dropped first (None: read
/// the hash itself), or where they are kept (a replica), it reads a copy without them
/// (Some(None) when nothing is left).
fn random_view(ctx: &mut ExecCtx) -> Option<Option<HashValue>> {
    let key = ctx.args.get(1);
    let now = ctx.now;
    let due = ctx.data.dbs[ctx.db]
        .peek(key)
        .is_some_and(|e| match e.value() {
            Value::Hash(h) => h.fields_due(now),
            _ => false,
        });
    if !due || !drop_due_fields(ctx, key) {
        return None;
    }
    let Value::Hash(h) = ctx.data.dbs[ctx.db].peek(key)?.value() else {
        return None;
    };
    Some(without_due_fields(h, now).map(std::borrow::Cow::into_owned))
}

/// The hash at argument 1 for reading (counting a hit or miss), or `view` in its
/// place (see `random_view`), with the shard's random generator and the reply writer
/// beside it.
fn hash_and_rng<'c, 'a>(
    ctx: &'c mut ExecCtx<'a>,
    view: &'c Option<Option<HashValue>>,
) -> (
    Result<Option<&'c HashValue>, ()>,
    &'c mut Rng,
    &'c mut ReplyWriter<'a>,
) {
    let key = ctx.args.get(1);
    let now = ctx.now;
    let lru = crate::util::lru_clock();
    let data = &mut *ctx.data;
    let entry = match data.dbs[ctx.db].get(key, now) {
        Some(e) => {
            data.stats.keyspace_hits += 1;
            e.set_lru(lru);
            Some(e)
        }
        None => {
            data.stats.keyspace_misses += 1;
            None
        }
    };
    let hash = match (as_hash(entry), view) {
        (Ok(Some(_)), Some(copy)) => Ok(copy.as_ref()),
        (found, _) => found.map(|h| h.map(|h| &*h)),
    };
    (hash, &mut data.rng, &mut ctx.out)
}

/// HRANDFIELD key: one random field, or nil.
fn hrandfield_one(ctx: &mut ExecCtx) {
    let view = random_view(ctx);
    let (hash, rng, out) = hash_and_rng(ctx, &view);
    match hash {
        Err(()) => out.error(WRONGTYPE),
        Ok(None) => out.null(),
        Ok(Some(h)) => match h.random_pair(rng) {
            Some((f, _)) => out.bulk(f),
            None => out.null(),
        },
    }
}

/// Most elements a negative HRANDFIELD count may ask for. Redis would build any reply
/// until memory runs out; Tessera refuses one that large instead.
const MAX_RANDOM_REPLY: u64 = 1 << 24;

/// HRANDFIELD key count [WITHVALUES]: a positive count gives distinct fields (at most
/// the whole hash), a negative one that many independent picks, repeats allowed.
/// WITHVALUES pairs are nested arrays in RESP3 and flat in RESP2, as in Redis.
fn hrandfield_count(ctx: &mut ExecCtx, count: i64, withvalues: bool) {
    let view = random_view(ctx);
    let (hash, rng, out) = hash_and_rng(ctx, &view);
    let h = match hash {
        Err(()) => return out.error(WRONGTYPE),
        Ok(None) => return out.array_len(0),
        Ok(Some(h)) => h,
    };
    if count == 0 {
        return out.array_len(0);
    }
    let nested = withvalues && out.proto == Protocol::Resp3;
    let header = |out: &mut ReplyWriter, n: usize| {
        out.array_len(if withvalues && !nested { n * 2 } else { n })
    };
    let pair = |out: &mut ReplyWriter, f: &[u8], v: &[u8]| {
        if nested {
            out.array_len(2);
        }
        out.bulk(f);
        if withvalues {
            out.bulk(v);
        }
    };
    if count < 0 || count == 1 {
        let n = count.unsigned_abs();
        if n > MAX_RANDOM_REPLY {
            return out.error("ERR value is out of range");
        }
        header(out, n as usize);
        for _ in 0..n {
            let (f, v) = h.random_pair(rng).unwrap_or((b"", b""));
            pair(out, f, v);
        }
        return;
    }
    let picks = h.random_distinct(count as usize, rng);
    header(out, picks.len());
    for (f, v) in picks {
        pair(out, f, v);
    }
}

/// HSCAN key cursor [MATCH pattern] [COUNT count]. As in Redis the key is looked up
/// before the options are parsed, so a missing key answers an empty scan whatever
/// follows. See storage::hash for the cursor's guarantee.
fn hscan(ctx: &mut ExecCtx) {
    let Some(cursor) = super::parse_scan_cursor(ctx.args.get(2)) else {
        return ctx.error("ERR invalid cursor");
    };
    let args = ctx.args;
    read_hash(
        ctx,
        |out| {
            out.array_len(2);
            out.bulk(b"0");
            out.array_len(0);
        },
        |h, out| {
            let (count, pattern) = match super::parse_scan_opts(&args) {
                Ok(o) => o,
                Err(e) => return out.error(e),
            };
            let mut found: Vec<(&[u8], &[u8])> = Vec::new();
            let next = h.scan(cursor, count, |f, v| {
                if pattern.is_none_or(|p| glob_match(p, f, false)) {
                    found.push((f, v));
                }
            });
            out.array_len(2);
            out.bulk(next.to_string().as_bytes());
            out.array_len(found.len() * 2);
            for (f, v) in found {
                out.bulk(f);
                out.bulk(v);
            }
        },
    );
}
