//! Redis 8.0's hash commands that read or write fields together with their TTL
//! (t_hash.c's hgetdelCommand, hgetexCommand, hsetexCommand; their rows are in the
//! hash family's table, `hashes::COMMANDS`): HGETDEL reads and deletes fields, HGETEX
//! reads fields and sets or drops their deadlines, HSETEX sets fields, all or none
//! (FNX / FXX), with a deadline. The deadlines are Redis 7.4's (`hash_expire`,
//! `storage::field_ttl`). Like every hash command these meet the hash with its due
//! fields already deleted (`hashes::modify_hash`), which sends their HDELs and the
//! `hexpired` / `del` events first.
//!
//! None of them propagates as it came when it could be replayed differently: HGETDEL
//! becomes HDEL, HGETEX HPEXPIREAT / HPERSIST, a relative HSETEX an HSETEX ... PXAT,
//! and a deadline already past deletes the fields and propagates one HDEL each.

use super::hash_expire::{
    count_changes, other_type, parse_deadline, parse_fields, NUMFIELDS_NOT_POSITIVE,
};
use super::hashes::{modify_hash, write_hash, Found};
use super::{notify, ExecCtx, WRONGTYPE};
use crate::storage::entry::deadline_passed;
use crate::storage::hash::HashValue;
use crate::storage::limits::EncodingLimits;

/// Replies one value or nil per field, in the order asked.
fn reply_values(ctx: &mut ExecCtx, values: &[Option<Vec<u8>>]) {
    ctx.out.array_len(values.len());
    for v in values {
        match v {
            Some(v) => ctx.out.bulk(v),
            None => ctx.out.null(),
        }
    }
}

/// A key that does not exist is an empty hash: nil for every field, and no change.
fn reply_missing(ctx: &mut ExecCtx, n: usize) {
    ctx.nothing_changed();
    ctx.out.array_len(n);
    for _ in 0..n {
        ctx.out.null();
    }
}

/// The fields past their deadline that a command deleted (Redis's hashTypeSetEx with a
/// time in the past): counted as expired subkeys and propagated as one HDEL each, as
/// Redis's propagateHashFieldDeletion does, the command itself not at all.
fn propagate_deleted(ctx: &mut ExecCtx, key: &[u8], fields: &[Vec<u8>]) {
    ctx.db().expired_fields_count += fields.len() as u64;
    for field in fields {
        ctx.propagation
            .also(|| vec![b"HDEL".to_vec(), key.to_vec(), field.clone()]);
    }
}

/// The fields a command gave a deadline, and those it deleted instead because the
/// deadline had already passed.
#[derive(Default)]
struct Deadlines {
    updated: usize,
    deleted: Vec<Vec<u8>>,
}

impl Deadlines {
    /// Gives the existing `field` the deadline `at`, or deletes it if that has passed
    /// (Redis's hashTypeSetEx without a condition).
    fn apply(&mut self, h: &mut HashValue, field: &[u8], at: u64, past: bool) {
        if past {
            h.remove(field);
            self.deleted.push(field.to_vec());
        } else {
            h.set_field_expire(field, at);
            self.updated += 1;
        }
    }

    fn changes(&self) -> usize {
        self.updated + self.deleted.len()
    }
}

/// HGETDEL key FIELDS numfields field...: each field's value (nil if missing), the
/// fields found deleted, the key with its last field.
pub(super) fn hgetdel(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    // Redis looks the key up before it reads any other argument.
    if other_type(ctx, key) {
        return ctx.error(WRONGTYPE);
    }
    let first = match parse_fields(ctx, 2, NUMFIELDS_NOT_POSITIVE) {
        Ok(i) => i,
        Err(e) => return ctx.error(e),
    };
    let args = ctx.args;
    let taken = modify_hash(ctx, key, |h| {
        let values: Vec<Option<Vec<u8>>> = (first..args.len())
            .map(|i| take_field(h, args.get(i)))
            .collect();
        (values, h.is_empty())
    });
    let (values, emptied) = match taken {
        Err(()) => return ctx.error(WRONGTYPE),
        Ok(Found::Missing(_)) => return reply_missing(ctx, args.len() - first),
        Ok(Found::Hash(r)) => r,
    };
    let deleted = values.iter().filter(|v| v.is_some()).count();
    if !count_changes(ctx, key, deleted, emptied) {
        return reply_values(ctx, &values);
    }
    ctx.notify(notify::HASH, "hdel", key);
    if emptied {
        ctx.notify(notify::GENERIC, "del", key);
    }
    // As HDEL with every field given (Redis drops FIELDS and the count from argv).
    ctx.propagation.rewrite(|| {
        let mut argv = vec![b"HDEL".to_vec(), key.to_vec()];
        argv.extend((first..args.len()).map(|i| args.get(i).to_vec()));
        argv
    });
    reply_values(ctx, &values);
}

/// Removes a field, returning its value if it was there.
fn take_field(h: &mut HashValue, field: &[u8]) -> Option<Vec<u8>> {
    let value = h.get(field)?.to_vec();
    h.remove(field);
    Some(value)
}

/// What HGETEX does to the deadline of each field it finds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum GetExTtl {
    /// No option: a plain read.
    Leave,
    /// PERSIST: drop the deadline.
    Persist,
    /// EX / PX / EXAT / PXAT: this deadline (unix ms).
    At(u64),
}

/// HGETEX's option at argument 2: what it does and where FIELDS must be, or the error
/// reply (Redis's order: the time is checked before FIELDS).
fn parse_getex_ttl(ctx: &ExecCtx) -> Result<(GetExTtl, usize), String> {
    let now = ctx.now as i64;
    let (base, unit) = match ctx.args.get(2).to_ascii_lowercase().as_slice() {
        b"ex" => (now, 1000),
        b"px" => (now, 1),
        b"exat" => (0, 1000),
        b"pxat" => (0, 1),
        b"persist" => return Ok((GetExTtl::Persist, 3)),
        // Anything else must be FIELDS itself.
        _ => return Ok((GetExTtl::Leave, 2)),
    };
    Ok((GetExTtl::At(parse_deadline(ctx, 3, base, unit)?), 4))
}

/// What HGETEX found and did (PERSIST counts the deadlines it dropped as updated).
#[derive(Default)]
struct GetExOutcome {
    values: Vec<Option<Vec<u8>>>,
    ttl: Deadlines,
    emptied: bool,
}

/// HGETEX key [EX s | PX ms | EXAT unix-s | PXAT unix-ms | PERSIST] FIELDS n field...:
/// each field's value (nil if missing); the fields found get the deadline, lose it
/// (PERSIST), or go at once if the deadline has passed.
pub(super) fn hgetex(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    if other_type(ctx, key) {
        return ctx.error(WRONGTYPE);
    }
    let (ttl, fields_at) = match parse_getex_ttl(ctx) {
        Ok(t) => t,
        Err(e) => return ctx.error(&e),
    };
    // `HGETEX k EX 10 FIELDS` has no count at all (Redis reads past argv there).
    if ctx.args.is(fields_at, "fields") && fields_at + 1 == ctx.args.len() {
        return ctx.arity_error();
    }
    let first = match parse_fields(ctx, fields_at, NUMFIELDS_NOT_POSITIVE) {
        Ok(i) => i,
        Err(e) => return ctx.error(e),
    };
    let args = ctx.args;
    let past = matches!(ttl, GetExTtl::At(at) if deadline_passed(at, ctx.now));
    let done = modify_hash(ctx, key, |h| {
        let mut o = GetExOutcome::default();
        for i in first..args.len() {
            let field = args.get(i);
            let value = h.get(field).map(<[u8]>::to_vec);
            if value.is_some() {
                change_ttl(h, field, ttl, past, &mut o);
            }
            o.values.push(value);
        }
        o.emptied = h.is_empty();
        o
    });
    let o = match done {
        Err(()) => return ctx.error(WRONGTYPE),
        Ok(Found::Missing(_)) => return reply_missing(ctx, args.len() - first),
        Ok(Found::Hash(o)) => o,
    };
    after_getex(ctx, &o, ttl, fields_at);
    reply_values(ctx, &o.values);
}

/// One found field of HGETEX: Redis's hashTypeSetEx without a condition.
fn change_ttl(h: &mut HashValue, field: &[u8], ttl: GetExTtl, past: bool, o: &mut GetExOutcome) {
    match ttl {
        GetExTtl::Leave => {}
        // A field without a deadline is left alone and not counted.
        GetExTtl::Persist => o.ttl.updated += h.persist_field(field) as usize,
        GetExTtl::At(at) => o.ttl.apply(h, field, at, past),
    }
}

/// HGETEX's change counter, events and propagation: HPERSIST for PERSIST, HPEXPIREAT
/// for a deadline (every field given, as Redis rewrites the command's argv), HDELs
/// for a deadline already past.
fn after_getex(ctx: &mut ExecCtx, o: &GetExOutcome, ttl: GetExTtl, fields_at: usize) {
    let key = ctx.args.get(1);
    if !count_changes(ctx, key, o.ttl.changes(), o.emptied) {
        return;
    }
    let args = ctx.args;
    match ttl {
        _ if !o.ttl.deleted.is_empty() => {
            ctx.notify(notify::HASH, "hdel", key);
            propagate_deleted(ctx, key, &o.ttl.deleted);
        }
        GetExTtl::Persist => {
            ctx.notify(notify::HASH, "hpersist", key);
            ctx.propagation.rewrite(|| {
                let mut argv = vec![b"HPERSIST".to_vec(), key.to_vec()];
                argv.extend((fields_at..args.len()).map(|i| args.get(i).to_vec()));
                argv
            });
        }
        GetExTtl::At(at) => {
            ctx.db().note_field_deadline(key, at);
            ctx.notify(notify::HASH, "hexpire", key);
            // PXAT's time goes as given; the others' as the unix ms they came to.
            let as_given = ctx.args.is(2, "pxat");
            ctx.propagation.rewrite(|| {
                let time = if as_given {
                    args.get(3).to_vec()
                } else {
                    at.to_string().into_bytes()
                };
                let mut argv = vec![b"HPEXPIREAT".to_vec(), key.to_vec(), time];
                argv.extend((fields_at..args.len()).map(|i| args.get(i).to_vec()));
                argv
            });
        }
        GetExTtl::Leave => {}
    }
    if o.emptied {
        ctx.notify(notify::GENERIC, "del", key);
    }
}

/// HSETEX's FNX / FXX.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FieldCond {
    /// Set the fields only if none of them exists.
    Fnx,
    /// Set the fields only if all of them exist.
    Fxx,
}

/// What HSETEX does to the deadline of each field it sets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SetExTtl {
    /// No option: an overwritten field loses its deadline, as with HSET.
    Discard,
    /// KEEPTTL: an overwritten field keeps its deadline.
    Keep,
    /// EX / PX / EXAT / PXAT: this deadline (unix ms).
    At(u64),
}

/// HSETEX's arguments.
struct SetExArgs {
    cond: Option<FieldCond>,
    ttl: SetExTtl,
    /// The index of the time argument (0: none); PXAT's is propagated as given.
    time_at: usize,
    as_pxat: bool,
    /// The index of the first field.
    first: usize,
}

const ONE_TTL_OPTION: &str =
    "ERR Only one of EX, PX, EXAT, PXAT or KEEPTTL arguments can be specified";
const ONE_CONDITION: &str = "ERR Only one of FXX or FNX arguments can be specified";

/// Why HSETEX's arguments were refused: Redis's arity error, or another error text.
enum SetExError {
    Arity,
    Msg(String),
}

impl From<String> for SetExError {
    fn from(msg: String) -> SetExError {
        SetExError::Msg(msg)
    }
}

fn msg(text: &str) -> SetExError {
    SetExError::Msg(text.to_string())
}

/// HSETEX key [FNX|FXX] [EX s|PX ms|EXAT unix-s|PXAT unix-ms|KEEPTTL] FIELDS n f v...:
/// the options in any order before FIELDS, each at most once (Redis's
/// hsetexParseArgs, which runs before the key is looked up).
fn parse_setex(ctx: &ExecCtx) -> Result<SetExArgs, SetExError> {
    let args = ctx.args;
    let now = ctx.now as i64;
    let mut a = SetExArgs {
        cond: None,
        ttl: SetExTtl::Discard,
        time_at: 0,
        as_pxat: false,
        first: 0,
    };
    let mut i = 2;
    while i < args.len() {
        let word = args.get(i).to_ascii_lowercase();
        let timed = match word.as_slice() {
            b"fields" => {
                a.first = parse_setex_count(ctx, i)?;
                return Ok(a);
            }
            b"ex" => Some((now, 1000)),
            b"px" => Some((now, 1)),
            b"exat" => Some((0, 1000)),
            b"pxat" => Some((0, 1)),
            b"keepttl" => None,
            b"fnx" | b"fxx" => {
                if a.cond.is_some() {
                    return Err(msg(ONE_CONDITION));
                }
                a.cond = Some(if word == b"fnx" {
                    FieldCond::Fnx
                } else {
                    FieldCond::Fxx
                });
                i += 1;
                continue;
            }
            _ => {
                let arg = String::from_utf8_lossy(args.get(i));
                return Err(SetExError::Msg(format!("ERR unknown argument: {arg}")));
            }
        };
        if a.ttl != SetExTtl::Discard {
            return Err(msg(ONE_TTL_OPTION));
        }
        match timed {
            None => a.ttl = SetExTtl::Keep,
            // Redis's check, though HSETEX's arity leaves no way to a time option last.
            Some(_) if i + 1 >= args.len() => return Err(msg("ERR missing expire time")),
            Some((base, unit)) => {
                i += 1;
                a.ttl = SetExTtl::At(parse_deadline(ctx, i, base, unit)?);
                a.time_at = i;
                a.as_pxat = word == b"pxat";
            }
        }
        i += 1;
    }
    // Unreachable with HSETEX's arity (at most three option words fit before the
    // sixth argument), but a command without FIELDS has too few arguments.
    Err(SetExError::Arity)
}

/// HSETEX's `FIELDS n field value ...` at argument `at`: the index of the first field.
/// As Redis: a count that does not match the pairs after it is an arity error.
fn parse_setex_count(ctx: &ExecCtx, at: usize) -> Result<usize, SetExError> {
    let args = ctx.args;
    if at + 3 >= args.len() {
        return Err(SetExError::Arity);
    }
    let n = super::parse_i64(args.get(at + 1))
        .filter(|n| (1..=i64::from(i32::MAX)).contains(n))
        .ok_or_else(|| msg("ERR invalid number of fields"))?;
    let rest = args.len() - at - 2;
    if !rest.is_multiple_of(2) || n as usize != rest / 2 {
        return Err(SetExError::Arity);
    }
    Ok(at + 2)
}

/// What HSETEX did.
#[derive(Default)]
struct SetExOutcome {
    /// The FNX / FXX condition held and the fields were set.
    set: bool,
    ttl: Deadlines,
    emptied: bool,
}

/// HSETEX: 1 when the fields were set, 0 when FNX / FXX stopped it (a missing key
/// with FXX stays missing).
pub(super) fn hsetex(ctx: &mut ExecCtx) {
    let a = match parse_setex(ctx) {
        Ok(a) => a,
        Err(SetExError::Arity) => return ctx.arity_error(),
        Err(SetExError::Msg(e)) => return ctx.error(&e),
    };
    let args = ctx.args;
    let key = args.get(1);
    let past = matches!(a.ttl, SetExTtl::At(at) if deadline_passed(at, ctx.now));
    let Some(o) = write_hash(ctx, key, |h, limits| set_fields(h, limits, &a, &args, past)) else {
        return; // WRONGTYPE, replied.
    };
    if !o.set {
        ctx.nothing_changed();
        return ctx.out.integer(0);
    }
    // One change per field given, as Redis counts them, deleted or not.
    count_changes(ctx, key, (args.len() - a.first) / 2, o.emptied);
    ctx.notify(notify::HASH, "hset", key);
    if !o.ttl.deleted.is_empty() {
        ctx.notify(notify::HASH, "hdel", key);
        propagate_deleted(ctx, key, &o.ttl.deleted);
    } else if let (SetExTtl::At(at), true) = (a.ttl, o.ttl.updated > 0) {
        ctx.db().note_field_deadline(key, at);
        ctx.notify(notify::HASH, "hexpire", key);
        if !a.as_pxat {
            propagate_as_pxat(ctx, &a, at);
        }
    }
    if o.emptied {
        ctx.notify(notify::GENERIC, "del", key);
    }
    ctx.out.integer(1);
}

/// Sets HSETEX's fields if its condition holds, with their deadline.
fn set_fields(
    h: &mut HashValue,
    limits: &EncodingLimits,
    a: &SetExArgs,
    args: &super::Args,
    past: bool,
) -> SetExOutcome {
    let mut o = SetExOutcome::default();
    let fields = (a.first..args.len()).step_by(2).map(|i| args.get(i));
    let holds = match a.cond {
        None => true,
        Some(FieldCond::Fnx) => !fields.clone().any(|f| h.contains(f)),
        Some(FieldCond::Fxx) => fields.clone().all(|f| h.contains(f)),
    };
    if !holds {
        return o;
    }
    for (i, field) in (a.first..args.len()).step_by(2).zip(fields) {
        let value = args.get(i + 1);
        match a.ttl {
            SetExTtl::Discard => h.set(field, value, limits),
            SetExTtl::Keep | SetExTtl::At(_) => h.set_keep_ttl(field, value, limits),
        };
        if let SetExTtl::At(at) = a.ttl {
            o.ttl.apply(h, field, at, past);
        }
    }
    o.set = true;
    o.emptied = h.is_empty();
    o
}

/// HSETEX with EX / PX / EXAT propagates with PXAT and the unix ms it came to, every
/// other argument as given (Redis rewrites the two arguments in place).
fn propagate_as_pxat(ctx: &mut ExecCtx, a: &SetExArgs, at: u64) {
    let args = ctx.args;
    let time_at = a.time_at;
    ctx.propagation.rewrite(|| {
        (0..args.len())
            .map(|i| match i {
                _ if i + 1 == time_at => b"PXAT".to_vec(),
                _ if i == time_at => at.to_string().into_bytes(),
                _ => args.get(i).to_vec(),
            })
            .collect()
    });
}
