//! String commands (Redis's t_string.c): GET/SET and friends, counters, ranges, LCS,
//! and the multi-key MGET / MSET / MSETNX.

use super::table::{flags::*, CommandSpec, Cross, Kind, Merge};
use super::table::{K1, K12, K_ALL, K_PAIRS};
use super::{
    notify, parse_i64, read_str, reply_str, ExecCtx, GlobalCtx, WrongType, NOT_FLOAT, NOT_INT,
    OVERFLOW, SYNTAX_ERR, WRONGTYPE,
};
use crate::protocol::reply::ReplyWriter;
use crate::storage::{StrValue, Value, NO_EXPIRE};
use crate::util::long_double::LongDouble;

pub(crate) const STR: &[&str] = &["@string"];

macro_rules! cmd {
    ($name:expr, $arity:expr, $flags:expr, $keys:expr, $kind:expr, $since:expr, $summary:expr) => {
        CommandSpec {
            name: $name,
            arity: $arity,
            flags: $flags,
            keys: $keys,
            kind: $kind,
            group: "string",
            since: $since,
            summary: $summary,
            acl: $crate::commands::strings::STR,
        }
    };
}
pub(crate) use cmd;

const fn keyed(f: super::KeyedFn) -> Kind {
    Kind::Keyed(f, Cross::Never)
}

pub static COMMANDS: &[CommandSpec] = &[
    cmd!(
        "get",
        2,
        READONLY | FAST,
        K1,
        keyed(get),
        "1.0.0",
        "Get the value of a key"
    ),
    cmd!(
        "set",
        -3,
        WRITE | DENYOOM,
        K1,
        keyed(set),
        "1.0.0",
        "Set the string value of a key"
    ),
    cmd!(
        "setnx",
        3,
        WRITE | DENYOOM | FAST,
        K1,
        keyed(setnx),
        "1.0.0",
        "Set the value of a key, only if the key does not exist"
    ),
    cmd!(
        "setex",
        4,
        WRITE | DENYOOM,
        K1,
        keyed(setex),
        "2.0.0",
        "Set the value and expiration of a key"
    ),
    cmd!(
        "psetex",
        4,
        WRITE | DENYOOM,
        K1,
        keyed(psetex),
        "2.6.0",
        "Set the value and expiration in milliseconds of a key"
    ),
    cmd!(
        "getex",
        -2,
        WRITE | FAST,
        K1,
        keyed(getex),
        "6.2.0",
        "Get the value of a key and optionally set its expiration"
    ),
    cmd!(
        "getdel",
        2,
        WRITE | FAST,
        K1,
        keyed(getdel),
        "6.2.0",
        "Get the value of a key and delete the key"
    ),
    cmd!(
        "getset",
        3,
        WRITE | DENYOOM | FAST,
        K1,
        keyed(getset),
        "1.0.0",
        "Set the string value of a key and return its old value"
    ),
    cmd!(
        "append",
        3,
        WRITE | DENYOOM | FAST,
        K1,
        keyed(append),
        "2.0.0",
        "Append a value to a key"
    ),
    cmd!(
        "strlen",
        2,
        READONLY | FAST,
        K1,
        keyed(strlen),
        "2.2.0",
        "Get the length of the value stored in a key"
    ),
    cmd!(
        "incr",
        2,
        WRITE | DENYOOM | FAST,
        K1,
        keyed(incr),
        "1.0.0",
        "Increment the integer value of a key by one"
    ),
    cmd!(
        "decr",
        2,
        WRITE | DENYOOM | FAST,
        K1,
        keyed(decr),
        "1.0.0",
        "Decrement the integer value of a key by one"
    ),
    cmd!(
        "incrby",
        3,
        WRITE | DENYOOM | FAST,
        K1,
        keyed(incrby),
        "1.0.0",
        "Increment the integer value of a key by the given amount"
    ),
    cmd!(
        "decrby",
        3,
        WRITE | DENYOOM | FAST,
        K1,
        keyed(decrby),
        "1.0.0",
        "Decrement the integer value of a key by the given number"
    ),
    cmd!(
        "incrbyfloat",
        3,
        WRITE | DENYOOM | FAST,
        K1,
        keyed(incrbyfloat),
        "2.6.0",
        "Increment the float value of a key by the given amount"
    ),
    cmd!(
        "getrange",
        4,
        READONLY,
        K1,
        keyed(getrange),
        "2.4.0",
        "Get a substring of the string stored at a key"
    ),
    cmd!(
        "substr",
        4,
        READONLY,
        K1,
        keyed(getrange),
        "1.0.0",
        "Get a substring of the string stored at a key"
    ),
    cmd!(
        "setrange",
        4,
        WRITE | DENYOOM,
        K1,
        keyed(setrange),
        "2.2.0",
        "Overwrite part of a string at key starting at the specified offset"
    ),
    cmd!(
        "lcs",
        -3,
        READONLY,
        K12,
        Kind::Keyed(lcs, Cross::Coordinator(lcs_across)),
        "7.0.0",
        "Find longest common substring"
    ),
    cmd!(
        "mget",
        -2,
        READONLY | FAST,
        K_ALL,
        Kind::Keyed(
            mget,
            Cross::Split {
                one: mget_part,
                stride: 1,
                merge: Merge::Array
            }
        ),
        "1.0.0",
        "Get the values of all the given keys"
    ),
    cmd!(
        "mset",
        -3,
        WRITE | DENYOOM,
        K_PAIRS,
        Kind::Keyed(
            mset,
            Cross::Split {
                one: mset,
                stride: 2,
                merge: Merge::Ok
            }
        ),
        "1.0.1",
        "Set multiple keys to multiple values"
    ),
    cmd!(
        "msetnx",
        -3,
        WRITE | DENYOOM,
        K_PAIRS,
        Kind::Keyed(msetnx, Cross::Coordinator(msetnx_across)),
        "1.0.1",
        "Set multiple keys to multiple values, only if none of the keys exist"
    ),
];

/// The largest string Redis lets a command build (proto-max-bulk-len).
fn max_string(ctx: &ExecCtx) -> usize {
    ctx.data.config.proto_max_bulk_len() as usize
}

const TOO_BIG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

fn get(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let (entry, out) = ctx.read_with_out(key);
    match read_str(entry) {
        Ok(Some(v)) => reply_str(out, v),
        Ok(None) => out.null(),
        Err(WrongType) => out.error(WRONGTYPE),
    }
}

/// Expiry options shared by SET, GETEX (and the deadline maths of SETEX/EXPIRE).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ExpireOpt {
    None,
    Keep,
    Persist,
    At(u64),
}

/// Turns `n` in `unit_ms` relative (or absolute when `absolute`) into a unix-ms
/// deadline, with Redis's overflow and sign checks. None = invalid expire time.
pub fn deadline(n: i64, unit_ms: i64, absolute: bool, now: u64) -> Option<u64> {
    if n <= 0 {
        return None;
    }
    let ms = n.checked_mul(unit_ms)?;
    let at = if absolute {
        ms
    } else {
        ms.checked_add(now as i64)?
    };
    if at <= 0 {
        return None;
    }
    Some(at as u64)
}

/// The options of SET (from argument 3) or GETEX (from argument 2), parsed with
/// Redis's parseExtendedStringArgumentsOrReply rules: every option is checked for
/// syntax before the expire value is looked at, and repeating an option is allowed
/// (`SET k v EX 1 EX 2` keeps the last) while conflicting ones are a syntax error.
#[derive(Default)]
struct StrOpts<'a> {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    /// (milliseconds per unit, absolute?) of EX / PX / EXAT / PXAT, and its value.
    expire: Option<((i64, bool), &'a [u8])>,
}

fn parse_str_opts<'a>(args: &super::Args<'a>, from: usize, for_set: bool) -> Option<StrOpts<'a>> {
    let mut o = StrOpts::default();
    let mut i = from;
    while i < args.len() {
        let a = args.get(i);
        let timed = o.expire.is_some();
        let is = |w: &[u8]| a.eq_ignore_ascii_case(w);
        if for_set && is(b"nx") && !o.xx {
            o.nx = true;
        } else if for_set && is(b"xx") && !o.nx {
            o.xx = true;
        } else if for_set && is(b"get") {
            o.get = true;
        } else if for_set && is(b"keepttl") && !timed {
            o.keepttl = true;
        } else if !for_set && is(b"persist") && !timed {
            o.persist = true;
        } else {
            let unit = expire_unit(a)?;
            let same_unit = o.expire.is_none_or(|(u, _)| u == unit);
            if o.keepttl || o.persist || !same_unit || i + 1 >= args.len() {
                return None;
            }
            o.expire = Some((unit, args.get(i + 1)));
            i += 1;
        }
        i += 1;
    }
    Some(o)
}

/// Turns parsed options into an expiry, replying the error if the value is bad.
fn resolve_expire(ctx: &mut ExecCtx, o: &StrOpts, cmd: &str) -> Option<ExpireOpt> {
    let Some(((unit_ms, absolute), v)) = o.expire else {
        return Some(if o.keepttl {
            ExpireOpt::Keep
        } else if o.persist {
            ExpireOpt::Persist
        } else {
            ExpireOpt::None
        });
    };
    let Some(n) = parse_i64(v) else {
        ctx.error(NOT_INT);
        return None;
    };
    match deadline(n, unit_ms, absolute, ctx.now) {
        Some(at) => Some(ExpireOpt::At(at)),
        None => {
            ctx.error(&format!("ERR invalid expire time in '{cmd}' command"));
            None
        }
    }
}

struct SetOpts {
    nx: bool,
    xx: bool,
    get: bool,
    expire: ExpireOpt,
}

/// Parses SET's options from argument 3 on. Errors are replied here.
fn parse_set_opts(ctx: &mut ExecCtx, cmd: &str) -> Option<SetOpts> {
    let args = ctx.args;
    let Some(o) = parse_str_opts(&args, 3, true) else {
        ctx.error(SYNTAX_ERR);
        return None;
    };
    let expire = resolve_expire(ctx, &o, cmd)?;
    Some(SetOpts {
        nx: o.nx,
        xx: o.xx,
        get: o.get,
        expire,
    })
}

/// EX / PX / EXAT / PXAT → (milliseconds per unit, absolute?).
fn expire_unit(a: &[u8]) -> Option<(i64, bool)> {
    if a.eq_ignore_ascii_case(b"ex") {
        Some((1000, false))
    } else if a.eq_ignore_ascii_case(b"px") {
        Some((1, false))
    } else if a.eq_ignore_ascii_case(b"exat") {
        Some((1000, true))
    } else if a.eq_ignore_ascii_case(b"pxat") {
        Some((1, true))
    } else {
        None
    }
}

/// The events of a SET-like write: "set", then "expire" when it gave a TTL.
fn notify_set(ctx: &ExecCtx, key: &[u8], with_ttl: bool) {
    ctx.notify(notify::STRING, "set", key);
    if with_ttl {
        ctx.notify(notify::GENERIC, "expire", key);
    }
}

/// Stores a string value, replacing whatever the key held (and its TTL unless `keep_ttl`).
pub fn store_str(ctx: &mut ExecCtx, key: &[u8], v: StrValue, expire: ExpireOpt) {
    let lru = ctx.lru();
    let now = ctx.now;
    let db = ctx.db();
    let at = match expire {
        ExpireOpt::Keep => db.get(key, now).map(|e| e.expire_at()).unwrap_or(NO_EXPIRE),
        ExpireOpt::At(at) => at,
        ExpireOpt::None | ExpireOpt::Persist => NO_EXPIRE,
    };
    db.insert(key, Value::Str(v), at, lru);
}

fn set(ctx: &mut ExecCtx) {
    let Some(o) = parse_set_opts(ctx, "set") else {
        return;
    };
    let key = ctx.args.get(1);
    let existing = ctx.lookup_write(key);
    let exists = existing.is_some();
    let old = match (o.get, existing) {
        (true, Some(e)) => match e.value() {
            Value::Str(s) => Some(s.clone()),
            _ => {
                ctx.error(WRONGTYPE);
                return;
            }
        },
        _ => None,
    };
    let blocked = (o.nx && exists) || (o.xx && !exists);
    if blocked {
        ctx.nothing_changed();
    } else {
        let v = StrValue::from_bytes(ctx.args.get(2));
        store_str(ctx, key, v, o.expire);
        notify_set(ctx, key, matches!(o.expire, ExpireOpt::At(_)));
        if let ExpireOpt::At(at) = o.expire {
            // A relative TTL would restart on the replica: the deadline goes.
            let args = ctx.args;
            ctx.propagation.rewrite(|| set_pxat(key, args.get(2), at));
        }
    }
    if o.get {
        match old {
            Some(v) => reply_str(&mut ctx.out, &v),
            None => ctx.out.null(),
        }
    } else if blocked {
        ctx.out.null();
    } else {
        ctx.out.ok();
    }
}

fn setnx(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    if ctx.lookup_write(key).is_some() {
        ctx.nothing_changed();
        ctx.out.integer(0);
    } else {
        store_str(
            ctx,
            key,
            StrValue::from_bytes(ctx.args.get(2)),
            ExpireOpt::None,
        );
        notify_set(ctx, key, false);
        ctx.out.integer(1);
    }
}

fn setex_generic(ctx: &mut ExecCtx, unit_ms: i64, name: &str) {
    let Some(n) = parse_i64(ctx.args.get(2)) else {
        return ctx.error(NOT_INT);
    };
    let Some(at) = deadline(n, unit_ms, false, ctx.now) else {
        return ctx.error(&format!("ERR invalid expire time in '{name}' command"));
    };
    let key = ctx.args.get(1);
    store_str(
        ctx,
        key,
        StrValue::from_bytes(ctx.args.get(3)),
        ExpireOpt::At(at),
    );
    notify_set(ctx, key, true);
    let args = ctx.args;
    ctx.propagation.rewrite(|| set_pxat(key, args.get(3), at));
    ctx.out.ok();
}

/// `SET key value PXAT deadline`: how a SET with a TTL, SETEX and PSETEX propagate
/// (Redis 7.0 makes every relative expiry absolute for replicas and the AOF).
fn set_pxat(key: &[u8], value: &[u8], at: u64) -> Vec<Vec<u8>> {
    vec![
        b"SET".to_vec(),
        key.to_vec(),
        value.to_vec(),
        b"PXAT".to_vec(),
        at.to_string().into_bytes(),
    ]
}

fn setex(ctx: &mut ExecCtx) {
    setex_generic(ctx, 1000, "setex")
}

fn psetex(ctx: &mut ExecCtx) {
    setex_generic(ctx, 1, "psetex")
}

fn getex(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let Some(o) = parse_str_opts(&args, 2, false) else {
        return ctx.error(SYNTAX_ERR);
    };
    let Some(opt) = resolve_expire(ctx, &o, "getex") else {
        return;
    };
    let key = args.get(1);
    let (entry, out) = ctx.read_with_out(key);
    let had_ttl = entry.as_ref().is_some_and(|e| e.expire_at() != NO_EXPIRE);
    match read_str(entry) {
        Ok(Some(v)) => reply_str(out, v),
        Ok(None) => {
            out.null();
            return ctx.nothing_changed();
        }
        Err(WrongType) => return out.error(WRONGTYPE),
    }
    let now = ctx.now;
    match opt {
        ExpireOpt::At(at) if crate::storage::entry::deadline_passed(at, now) => {
            ctx.db().remove(key);
            ctx.notify(notify::GENERIC, "del", key);
            let del = super::keys::deleted_as(ctx, "lazyfree-lazy-expire");
            ctx.propagation.rewrite(|| vec![del.to_vec(), key.to_vec()]);
        }
        ExpireOpt::At(at) => {
            ctx.db().set_expire(key, at);
            ctx.notify(notify::GENERIC, "expire", key);
            ctx.propagation
                .rewrite(|| super::keys::pexpireat_effect(key, at));
        }
        ExpireOpt::Persist if had_ttl => {
            ctx.db().set_expire(key, NO_EXPIRE);
            ctx.notify(notify::GENERIC, "persist", key);
            ctx.propagation
                .rewrite(|| vec![b"PERSIST".to_vec(), key.to_vec()]);
        }
        // No option, or PERSIST on a key without a TTL: a plain read.
        _ => ctx.nothing_changed(),
    }
}

fn getdel(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let (entry, out) = ctx.read_with_out(key);
    match read_str(entry) {
        Ok(Some(v)) => reply_str(out, v),
        Ok(None) => {
            out.null();
            return ctx.nothing_changed();
        }
        Err(WrongType) => return out.error(WRONGTYPE),
    }
    ctx.db().remove(key);
    ctx.notify(notify::GENERIC, "del", key);
    ctx.propagation
        .rewrite(|| vec![b"DEL".to_vec(), key.to_vec()]);
}

fn getset(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let old = match read_str(ctx.lookup_read(key)) {
        Ok(v) => v.map(|v| v.clone()),
        Err(WrongType) => return ctx.error(WRONGTYPE),
    };
    let value = ctx.args.get(2);
    store_str(ctx, key, StrValue::from_bytes(value), ExpireOpt::None);
    ctx.notify(notify::STRING, "set", key);
    // Propagated as SET, as Redis rewrites it.
    ctx.propagation
        .rewrite(|| vec![b"SET".to_vec(), key.to_vec(), value.to_vec()]);
    match old {
        Some(v) => reply_str(&mut ctx.out, &v),
        None => ctx.out.null(),
    }
}

fn append(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let add = ctx.args.get(2);
    let limit = max_string(ctx);
    match read_str(ctx.lookup_write(key)) {
        Err(WrongType) => ctx.error(WRONGTYPE),
        Ok(None) => {
            store_str(ctx, key, StrValue::from_bytes(add), ExpireOpt::None);
            ctx.notify(notify::STRING, "append", key);
            ctx.out.integer(add.len() as i64);
        }
        Ok(Some(v)) => {
            if v.len() + add.len() > limit {
                return ctx.error(TOO_BIG);
            }
            let raw = v.make_raw();
            raw.extend_from_slice(add);
            let n = raw.len() as i64;
            ctx.notify(notify::STRING, "append", key);
            ctx.out.integer(n);
        }
    }
}

fn strlen(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    match read_str(ctx.lookup_read(key)) {
        Ok(v) => {
            let n = v.map(|v| v.len()).unwrap_or(0);
            ctx.out.integer(n as i64)
        }
        Err(WrongType) => ctx.error(WRONGTYPE),
    }
}

/// INCR/DECR/INCRBY/DECRBY: the value is updated in place, keeping the key's TTL.
fn incr_by(ctx: &mut ExecCtx, delta: i64) {
    let key = ctx.args.get(1);
    match read_str(ctx.lookup_write(key)) {
        Err(WrongType) => ctx.error(WRONGTYPE),
        Ok(None) => {
            store_str(ctx, key, StrValue::Int(delta), ExpireOpt::None);
            ctx.notify(notify::STRING, "incrby", key);
            ctx.out.integer(delta);
        }
        Ok(Some(v)) => {
            let Some(cur) = v.as_i64() else {
                return ctx.error(NOT_INT);
            };
            let Some(n) = cur.checked_add(delta) else {
                return ctx.error(OVERFLOW);
            };
            let same_size = matches!(v, StrValue::Int(_));
            *v = StrValue::Int(n);
            if same_size {
                ctx.db().charge_unchanged(key);
            }
            ctx.notify(notify::STRING, "incrby", key);
            ctx.out.integer(n);
        }
    }
}

fn incr(ctx: &mut ExecCtx) {
    incr_by(ctx, 1)
}

fn decr(ctx: &mut ExecCtx) {
    incr_by(ctx, -1)
}

fn incrby(ctx: &mut ExecCtx) {
    match parse_i64(ctx.args.get(2)) {
        Some(d) => incr_by(ctx, d),
        None => ctx.error(NOT_INT),
    }
}

fn decrby(ctx: &mut ExecCtx) {
    match parse_i64(ctx.args.get(2)) {
        Some(i64::MIN) => ctx.error("ERR decrement would overflow"),
        Some(d) => incr_by(ctx, -d),
        None => ctx.error(NOT_INT),
    }
}

fn incrbyfloat(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    // As Redis: the key's type, then its value, then the increment.
    let cur = match read_str(ctx.lookup_write(key)) {
        Err(WrongType) => return ctx.error(WRONGTYPE),
        Ok(None) => LongDouble::from_i64(0),
        Ok(Some(v)) => {
            let mut s = [0u8; 24];
            match LongDouble::parse(v.bytes(&mut s)) {
                Some(f) => f,
                None => return ctx.error(NOT_FLOAT),
            }
        }
    };
    let Some(delta) = LongDouble::parse(ctx.args.get(2)) else {
        return ctx.error(NOT_FLOAT);
    };
    let n = cur.add(&delta);
    if n.is_nan_or_infinite() {
        return ctx.error("ERR increment would produce NaN or Infinity");
    }
    let mut text = Vec::with_capacity(32);
    n.format_human(&mut text);
    ctx.out.bulk(&text);
    // The result, not the increment: float arithmetic must not run twice.
    ctx.propagation.rewrite(|| {
        let keepttl = b"KEEPTTL".to_vec();
        vec![b"SET".to_vec(), key.to_vec(), text.clone(), keepttl]
    });
    let now = ctx.now;
    let at = ctx
        .db()
        .get(key, now)
        .map(|e| e.expire_at())
        .unwrap_or(NO_EXPIRE);
    store_str(
        ctx,
        key,
        StrValue::from_vec(text),
        ExpireOpt::At(at).or_none(),
    );
    ctx.notify(notify::STRING, "incrbyfloat", key);
}

impl ExpireOpt {
    fn or_none(self) -> ExpireOpt {
        match self {
            ExpireOpt::At(NO_EXPIRE) => ExpireOpt::None,
            o => o,
        }
    }
}

/// Redis's GETRANGE index rules: negative counts from the end, clamped, inclusive.
pub fn clamp_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    if start < 0 && end < 0 && start > end {
        return None;
    }
    let mut s = if start < 0 { len + start } else { start };
    let mut e = if end < 0 { len + end } else { end };
    s = s.max(0);
    e = e.max(0);
    if e >= len {
        e = len - 1;
    }
    if s > e || len == 0 {
        return None;
    }
    Some((s as usize, e as usize))
}

fn getrange(ctx: &mut ExecCtx) {
    let (Some(start), Some(end)) = (parse_i64(ctx.args.get(2)), parse_i64(ctx.args.get(3))) else {
        return ctx.error(NOT_INT);
    };
    let key = ctx.args.get(1);
    let (entry, out) = ctx.read_with_out(key);
    match read_str(entry) {
        Err(WrongType) => out.error(WRONGTYPE),
        Ok(None) => out.bulk(b""),
        Ok(Some(v)) => {
            let mut s = [0u8; 24];
            let b = v.bytes(&mut s);
            match clamp_range(start, end, b.len()) {
                Some((a, z)) => out.bulk(&b[a..=z]),
                None => out.bulk(b""),
            }
        }
    }
}

fn setrange(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let Some(offset) = parse_i64(ctx.args.get(2)) else {
        return ctx.error(NOT_INT);
    };
    if offset < 0 {
        return ctx.error("ERR offset is out of range");
    }
    let value = ctx.args.get(3);
    let limit = max_string(ctx);
    let offset = offset as usize;
    let too_big = offset.checked_add(value.len()).is_none_or(|n| n > limit);
    match read_str(ctx.lookup_write(key)) {
        Err(WrongType) => ctx.error(WRONGTYPE),
        Ok(None) => {
            if value.is_empty() {
                ctx.nothing_changed();
                return ctx.out.integer(0);
            }
            if too_big {
                return ctx.error(TOO_BIG);
            }
            let mut v = vec![0u8; offset + value.len()];
            v[offset..].copy_from_slice(value);
            let n = v.len() as i64;
            store_str(ctx, key, StrValue::raw(v), ExpireOpt::None);
            ctx.notify(notify::STRING, "setrange", key);
            ctx.out.integer(n);
        }
        Ok(Some(v)) => {
            if value.is_empty() {
                let n = v.len() as i64;
                ctx.nothing_changed();
                return ctx.out.integer(n);
            }
            if too_big {
                return ctx.error(TOO_BIG);
            }
            let raw = v.make_raw();
            if raw.len() < offset + value.len() {
                raw.resize(offset + value.len(), 0);
            }
            raw[offset..offset + value.len()].copy_from_slice(value);
            let n = raw.len() as i64;
            ctx.notify(notify::STRING, "setrange", key);
            ctx.out.integer(n);
        }
    }
}

/// MGET: a non-string value reads as nil, not an error.
fn mget(ctx: &mut ExecCtx) {
    ctx.out.array_len(ctx.args.len() - 1);
    mget_values(ctx);
}

/// MGET's part for one key of a split MGET: the element, without the array header.
fn mget_part(ctx: &mut ExecCtx) {
    mget_values(ctx);
}

fn mget_values(ctx: &mut ExecCtx) {
    for i in 1..ctx.args.len() {
        let key = ctx.args.get(i);
        let (entry, out) = ctx.read_with_out(key);
        match read_str(entry) {
            Ok(Some(v)) => reply_str(out, v),
            _ => out.null(),
        }
    }
}

fn mset(ctx: &mut ExecCtx) {
    if ctx.args.len().is_multiple_of(2) {
        return ctx.error("ERR wrong number of arguments for 'mset' command");
    }
    for i in (1..ctx.args.len()).step_by(2) {
        let key = ctx.args.get(i);
        store_str(
            ctx,
            key,
            StrValue::from_bytes(ctx.args.get(i + 1)),
            ExpireOpt::None,
        );
        ctx.notify(notify::STRING, "set", key);
    }
    ctx.out.ok();
}

fn msetnx(ctx: &mut ExecCtx) {
    if ctx.args.len().is_multiple_of(2) {
        return ctx.error("ERR wrong number of arguments for 'msetnx' command");
    }
    let now = ctx.now;
    let any = (1..ctx.args.len()).step_by(2).any(|i| {
        let k = ctx.args.get(i);
        ctx.db().contains(k, now)
    });
    if any {
        ctx.nothing_changed();
        return ctx.out.integer(0);
    }
    for i in (1..ctx.args.len()).step_by(2) {
        let key = ctx.args.get(i);
        store_str(
            ctx,
            key,
            StrValue::from_bytes(ctx.args.get(i + 1)),
            ExpireOpt::None,
        );
        ctx.notify(notify::STRING, "set", key);
    }
    ctx.out.integer(1);
}

/// MSETNX over several shards: under the multi-shard locks, check every key, then
/// write only if none exists.
fn msetnx_across<'a>(
    g: &'a mut GlobalCtx<'_>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>> {
    Box::pin(async move {
        if g.args.len().is_multiple_of(2) {
            g.w()
                .error("ERR wrong number of arguments for 'msetnx' command");
            return;
        }
        let db = g.session.db;
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = g.args[1..]
            .chunks(2)
            .map(|c| (c[0].clone(), c[1].clone()))
            .collect();
        let keys: Vec<Vec<u8>> = pairs.iter().map(|p| p.0.clone()).collect();
        let cell = g.session.cell.clone();
        let mut op =
            crate::shard::multi::MultiShardOp::lock_keys(g.owner(), &cell, db, &keys).await;
        let exists = op.count_existing(&cell, db, &keys).await;
        if exists == 0 {
            op.write_strings(&cell, db, pairs).await;
        } else {
            op.set_read_only();
        }
        g.release(op).await;
        g.w().integer(if exists == 0 { 1 } else { 0 });
    })
}

const LCS_BOTH: &str = "ERR If you want both the length and indexes, please just use IDX.";
const LCS_TYPE: &str = "ERR The specified keys must contain string values";

struct LcsOpts {
    len: bool,
    idx: bool,
    min_match: i64,
    with_match_len: bool,
}

fn parse_lcs_opts(args: &[&[u8]]) -> Result<LcsOpts, &'static str> {
    let mut o = LcsOpts {
        len: false,
        idx: false,
        min_match: 0,
        with_match_len: false,
    };
    let mut i = 3;
    while i < args.len() {
        let a = args[i];
        if a.eq_ignore_ascii_case(b"idx") {
            o.idx = true;
        } else if a.eq_ignore_ascii_case(b"len") {
            o.len = true;
        } else if a.eq_ignore_ascii_case(b"withmatchlen") {
            o.with_match_len = true;
        } else if a.eq_ignore_ascii_case(b"minmatchlen") && i + 1 < args.len() {
            o.min_match = parse_i64(args[i + 1]).ok_or(NOT_INT)?.max(0);
            i += 1;
        } else {
            return Err(SYNTAX_ERR);
        }
        i += 1;
    }
    if o.len && o.idx {
        return Err(LCS_BOTH);
    }
    Ok(o)
}

/// Reads a key for LCS: missing is the empty string, another type an error.
fn lcs_value(ctx: &mut ExecCtx, key: &[u8]) -> Result<Vec<u8>, WrongType> {
    match read_str(ctx.lookup_read(key)) {
        Ok(Some(v)) => Ok(v.to_vec()),
        Ok(None) => Ok(Vec::new()),
        Err(WrongType) => Err(WrongType),
    }
}

fn lcs(ctx: &mut ExecCtx) {
    let argv: Vec<&[u8]> = ctx.args.iter().collect();
    // Redis checks the key types before it parses the options.
    let (Ok(a), Ok(b)) = (lcs_value(ctx, argv[1]), lcs_value(ctx, argv[2])) else {
        return ctx.error(LCS_TYPE);
    };
    let opts = match parse_lcs_opts(&argv) {
        Ok(o) => o,
        Err(e) => return ctx.error(e),
    };
    let limit = max_string(ctx);
    lcs_reply(&mut ctx.out, &a, &b, &opts, limit);
}

/// LCS with its two keys on different shards: read both under the locks, then
/// compute here.
fn lcs_across<'a>(
    g: &'a mut GlobalCtx<'_>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>> {
    Box::pin(async move {
        let db = g.session.db;
        let keys = vec![g.args[1].clone(), g.args[2].clone()];
        let cell = g.session.cell.clone();
        let op = crate::shard::multi::MultiShardOp::lock_keys(g.owner(), &cell, db, &keys).await;
        let values = op.read_strings(&cell, db, &keys).await;
        g.release(op).await;
        let limit = cell.data.borrow().config.proto_max_bulk_len() as usize;
        // As in Redis, the key types are checked before the options are parsed.
        let (Ok(a), Ok(b)) = (&values[0], &values[1]) else {
            return g.w().error(LCS_TYPE);
        };
        let (a, b) = (a.clone().unwrap_or_default(), b.clone().unwrap_or_default());
        let argv: Vec<&[u8]> = g.args.iter().map(|a| a.as_slice()).collect();
        match parse_lcs_opts(&argv) {
            Ok(opts) => lcs_reply(&mut g.w(), &a, &b, &opts, limit),
            Err(e) => g.w().error(e),
        }
    })
}

/// The LCS dynamic programme and its three reply shapes, walking back from the end
/// exactly as Redis does so match ranges come out in the same order.
fn lcs_reply(out: &mut ReplyWriter, a: &[u8], b: &[u8], o: &LcsOpts, limit: usize) {
    let (alen, blen) = (a.len(), b.len());
    let cells = (alen + 1)
        .checked_mul(blen + 1)
        .and_then(|n| n.checked_mul(4));
    if cells.is_none_or(|n| n > limit)
        || alen >= u32::MAX as usize - 1
        || blen >= u32::MAX as usize - 1
    {
        return out
            .error("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len");
    }
    let w = alen + 1;
    let mut dp = vec![0u32; (alen + 1) * (blen + 1)];
    for j in 1..=blen {
        for i in 1..=alen {
            dp[i + j * w] = if a[i - 1] == b[j - 1] {
                dp[(i - 1) + (j - 1) * w] + 1
            } else {
                dp[(i - 1) + j * w].max(dp[i + (j - 1) * w])
            };
        }
    }
    let total = dp[alen + blen * w];
    if o.len {
        return out.integer(total as i64);
    }
    let mut result = vec![0u8; total as usize];
    let mut matches: Vec<[i64; 5]> = Vec::new();
    let (mut i, mut j, mut idx) = (alen, blen, total as usize);
    let (mut a_start, mut a_end, mut b_start, mut b_end) = (alen, 0usize, 0usize, 0usize);
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            result[idx - 1] = a[i - 1];
            if a_start == alen {
                a_start = i - 1;
                a_end = i - 1;
                b_start = j - 1;
                b_end = j - 1;
            } else if a_start == i && b_start == j {
                a_start -= 1;
                b_start -= 1;
            } else {
                emit = true;
            }
            if a_start == 0 || b_start == 0 {
                emit = true;
            }
            idx -= 1;
            i -= 1;
            j -= 1;
        } else {
            if dp[(i - 1) + j * w] > dp[i + (j - 1) * w] {
                i -= 1;
            } else {
                j -= 1;
            }
            if a_start != alen {
                emit = true;
            }
        }
        if emit {
            let len = (a_end - a_start + 1) as i64;
            if o.min_match == 0 || len >= o.min_match {
                matches.push([
                    a_start as i64,
                    a_end as i64,
                    b_start as i64,
                    b_end as i64,
                    len,
                ]);
            }
            a_start = alen;
        }
    }
    if !o.idx {
        return out.bulk(&result);
    }
    out.map_len(2);
    out.bulk(b"matches");
    out.array_len(matches.len());
    for m in &matches {
        out.array_len(if o.with_match_len { 3 } else { 2 });
        out.array_len(2);
        out.integer(m[0]);
        out.integer(m[1]);
        out.array_len(2);
        out.integer(m[2]);
        out.integer(m[3]);
        if o.with_match_len {
            out.integer(m[4]);
        }
    }
    out.bulk(b"len");
    out.integer(total as i64);
}
