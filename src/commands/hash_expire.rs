//! Hash field expiration (Redis 7.4's t_hash.c HFE commands; their rows are in the
//! hash family's table, `hashes::COMMANDS`): HEXPIRE, HPEXPIRE,
//! HEXPIREAT, HPEXPIREAT set field deadlines, HTTL, HPTTL, HEXPIRETIME, HPEXPIRETIME
//! read them and HPERSIST drops them. Each replies one code per field given. The
//! deadlines live in the hash (`storage::field_ttl`); the hash commands delete due
//! fields as they meet them (`hashes::modify_hash`), the shard's active expiry the rest.

use super::hashes::{modify_hash, read_hash, Found};
use super::{notify, parse_i64, ExecCtx, WRONGTYPE};
use crate::storage::hash::HashValue;
use crate::storage::Value;

/// Latest deadline a command may give a field (Redis's HFE_MAX_ABS_TIME_MSEC: 48-bit
/// times with two bits reserved).
const MAX_DEADLINE_MS: i64 = 0xFFFF_FFFF_FFFF_i64 >> 2;

/// Reply codes (Redis's SetExRes, GetExpireTimeRes and the HPERSIST results).
const NO_FIELD: i64 = -2;
const NO_TTL: i64 = -1;
const CONDITION_NOT_MET: i64 = 0;
const UPDATED: i64 = 1;
const DELETED: i64 = 2;

const FIELDS_MISSING: &str =
    "ERR Mandatory argument FIELDS is missing or not at the right position";
/// A count below 1 after FIELDS (HTTL, HPERSIST and Redis 8.0's HGETEX, HGETDEL).
pub(super) const NUMFIELDS_NOT_POSITIVE: &str = "ERR Number of fields must be a positive integer";
const NUMFIELDS_MISMATCH: &str = "ERR The `numfields` parameter must match the number of arguments";

/// Which deadlines HEXPIRE's NX / XX / GT / LT let it replace.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cond {
    Always,
    Nx,
    Xx,
    Gt,
    Lt,
}

impl Cond {
    fn parse(word: &[u8]) -> Option<Cond> {
        Some(match word.to_ascii_lowercase().as_slice() {
            b"nx" => Cond::Nx,
            b"xx" => Cond::Xx,
            b"gt" => Cond::Gt,
            b"lt" => Cond::Lt,
            _ => return None,
        })
    }

    /// Whether a field whose deadline is `old` (None: none) may get `new`. No
    /// deadline counts as infinite: GT never passes it, LT always does.
    fn allows(self, old: Option<u64>, new: u64) -> bool {
        match (self, old) {
            (Cond::Always, _) => true,
            (Cond::Nx, old) => old.is_none(),
            (Cond::Xx | Cond::Gt, None) => false,
            (Cond::Lt, None) => true,
            (Cond::Xx, Some(_)) => true,
            (Cond::Gt, Some(old)) => new > old,
            (Cond::Lt, Some(old)) => new < old,
        }
    }
}

/// The `FIELDS numfields field ...` part starting at argument `at`: the index of the
/// first field, or the error Redis gives (`range_err` for a bad count).
pub(super) fn parse_fields(
    ctx: &ExecCtx,
    at: usize,
    range_err: &'static str,
) -> Result<usize, &'static str> {
    if at >= ctx.args.len() || !ctx.args.is(at, "fields") {
        return Err(FIELDS_MISSING);
    }
    let n = ctx.args.get(at + 1);
    let n = parse_i64(n).filter(|&n| n >= 1).ok_or(range_err)?;
    let given = ctx.args.len().saturating_sub(at + 2);
    if n as u64 != given as u64 {
        return Err(NUMFIELDS_MISMATCH);
    }
    Ok(at + 2)
}

/// Whether `key` holds a live value of another type: Redis looks the key up before
/// it reads any other argument, so WRONGTYPE comes before argument errors.
pub(super) fn other_type(ctx: &ExecCtx, key: &[u8]) -> bool {
    let db = &ctx.data.dbs[ctx.db];
    db.peek_live(key, ctx.now)
        && db
            .peek(key)
            .is_some_and(|e| !matches!(e.value(), Value::Hash(_)))
}

/// HTTL's and HPERSIST's `key FIELDS n field...`: the index of the first field, or
/// None after replying the error (WRONGTYPE first: Redis looks the key up first).
fn key_and_fields(ctx: &mut ExecCtx, key: &[u8]) -> Option<usize> {
    if other_type(ctx, key) {
        ctx.error(WRONGTYPE);
        return None;
    }
    match parse_fields(ctx, 2, NUMFIELDS_NOT_POSITIVE) {
        Ok(i) => Some(i),
        Err(e) => {
            ctx.error(e);
            None
        }
    }
}

/// Replies `n` times `code` (a key that does not exist: every field is missing).
fn reply_all(ctx: &mut ExecCtx, n: usize, code: i64) {
    ctx.out.array_len(n);
    for _ in 0..n {
        ctx.out.integer(code);
    }
}

pub(super) fn hexpire(ctx: &mut ExecCtx) {
    let now = ctx.now as i64;
    set_deadlines(ctx, now, 1000);
}

pub(super) fn hpexpire(ctx: &mut ExecCtx) {
    let now = ctx.now as i64;
    set_deadlines(ctx, now, 1);
}

pub(super) fn hexpireat(ctx: &mut ExecCtx) {
    set_deadlines(ctx, 0, 1000);
}

pub(super) fn hpexpireat(ctx: &mut ExecCtx) {
    set_deadlines(ctx, 0, 1);
}

/// The deadline (unix ms) argument `arg` gives, `unit` ms per unit, from `base`; or
/// the error reply (Redis's parseExpireTime of t_hash.c, which HGETEX and HSETEX share).
pub(super) fn parse_deadline(
    ctx: &ExecCtx,
    arg: usize,
    base: i64,
    unit: i64,
) -> Result<u64, String> {
    let Some(t) = parse_i64(ctx.args.get(arg)) else {
        return Err(super::NOT_INT.to_string());
    };
    if t < 0 {
        return Err("ERR invalid expire time, must be >= 0".to_string());
    }
    let name = String::from_utf8_lossy(ctx.args.get(0)).to_ascii_lowercase();
    let bad_time = || format!("ERR invalid expire time in '{name}' command");
    if unit > 1 && t > MAX_DEADLINE_MS / unit {
        return Err(bad_time());
    }
    let ms = t * unit;
    if ms > MAX_DEADLINE_MS - base {
        return Err(bad_time());
    }
    Ok((ms + base) as u64)
}

/// What HEXPIRE did to the fields it was given.
#[derive(Default)]
struct Outcome {
    codes: Vec<i64>,
    /// Argument indexes of the fields whose deadline was set.
    updated: Vec<usize>,
    /// Fields deleted because the deadline had passed.
    deleted: Vec<Vec<u8>>,
    emptied: bool,
}

/// HEXPIRE / HPEXPIRE / HEXPIREAT / HPEXPIREAT key time [NX|XX|GT|LT] FIELDS n f...,
/// `unit` ms per time unit, relative to `base` (0 for the AT forms).
fn set_deadlines(ctx: &mut ExecCtx, base: i64, unit: i64) {
    let key = ctx.args.get(1);
    if other_type(ctx, key) {
        return ctx.error(WRONGTYPE);
    }
    let at = match parse_deadline(ctx, 2, base, unit) {
        Ok(at) => at,
        Err(e) => return ctx.error(&e),
    };
    let cond = Cond::parse(ctx.args.get(3));
    let fields_at = if cond.is_some() { 4 } else { 3 };
    let first = match parse_fields(
        ctx,
        fields_at,
        "ERR Parameter `numFields` should be greater than 0",
    ) {
        Ok(i) => i,
        Err(e) => return ctx.error(e),
    };
    let cond = cond.unwrap_or(Cond::Always);
    let args = ctx.args;
    let now = ctx.now;
    let past = crate::storage::entry::deadline_passed(at, now);
    let outcome = modify_hash(ctx, key, |h| {
        let mut o = Outcome::default();
        for i in first..args.len() {
            let code = set_one(h, args.get(i), at, cond, past);
            match code {
                UPDATED => o.updated.push(i),
                DELETED => o.deleted.push(args.get(i).to_vec()),
                _ => {}
            }
            o.codes.push(code);
        }
        o.emptied = h.is_empty();
        o
    });
    let o = match outcome {
        Err(()) => return ctx.error(WRONGTYPE),
        Ok(Found::Missing(_)) => return reply_all(ctx, args.len() - first, NO_FIELD),
        Ok(Found::Hash(o)) => o,
    };
    if let Some(min) = (!o.updated.is_empty()).then_some(at) {
        ctx.db().note_field_deadline(key, min);
    }
    ctx.db().expired_fields_count += o.deleted.len() as u64;
    after_deadlines_set(ctx, &o, at, first);
    ctx.out.array_len(o.codes.len());
    for code in &o.codes {
        ctx.out.integer(*code);
    }
}

/// One field of HEXPIRE: Redis's hashTypeSetEx.
fn set_one(h: &mut HashValue, field: &[u8], at: u64, cond: Cond, past: bool) -> i64 {
    if !h.contains(field) {
        return NO_FIELD;
    }
    if !cond.allows(h.field_expire(field), at) {
        return CONDITION_NOT_MET;
    }
    if past {
        h.remove(field);
        return DELETED;
    }
    h.set_field_expire(field, at);
    UPDATED
}

/// A hash command's change counter (Redis's server.dirty, `changes` as it counts
/// them): false, and no key signalled, when it changed nothing; else the key it left
/// empty goes.
pub(super) fn count_changes(ctx: &mut ExecCtx, key: &[u8], changes: usize, emptied: bool) -> bool {
    if changes == 0 {
        ctx.nothing_changed();
        return false;
    }
    ctx.dirty(changes as u64);
    if emptied {
        ctx.db().remove(key);
    }
    true
}

/// HEXPIRE's change counter, events and propagation (Redis's hashTypeSetExDone and
/// the rewrite to HPEXPIREAT with the fields it set).
fn after_deadlines_set(ctx: &mut ExecCtx, o: &Outcome, at: u64, first: usize) {
    let key = ctx.args.get(1);
    if !count_changes(ctx, key, o.updated.len() + o.deleted.len(), o.emptied) {
        return;
    }
    if o.emptied {
        ctx.notify(notify::HASH, "hdel", key);
        ctx.notify(notify::GENERIC, "del", key);
    } else if o.deleted.is_empty() {
        ctx.notify(notify::HASH, "hexpire", key);
    } else {
        ctx.notify(notify::HASH, "hdel", key);
    }
    if !ctx.propagation.on() {
        return;
    }
    for field in &o.deleted {
        ctx.propagation
            .also(|| vec![b"HDEL".to_vec(), key.to_vec(), field.clone()]);
    }
    if o.updated.is_empty() {
        // Only HDELs: the command itself changed no deadline a replica would see.
        return;
    }
    let args = ctx.args;
    ctx.propagation.also(|| {
        let as_given = args.is(0, "hpexpireat");
        let mut argv = vec![
            if as_given {
                args.get(0).to_vec()
            } else {
                b"HPEXPIREAT".to_vec()
            },
            key.to_vec(),
            if as_given {
                args.get(2).to_vec()
            } else {
                at.to_string().into_bytes()
            },
        ];
        // Everything between the time and the fields (the condition, FIELDS).
        argv.extend((3..first - 1).map(|i| args.get(i).to_vec()));
        let all = o.updated.len() == args.len() - first;
        argv.push(if all {
            args.get(first - 1).to_vec()
        } else {
            o.updated.len().to_string().into_bytes()
        });
        argv.extend(o.updated.iter().map(|&i| args.get(i).to_vec()));
        argv
    });
}

pub(super) fn httl(ctx: &mut ExecCtx) {
    let now = ctx.now;
    read_deadlines(ctx, |at| ((at + 999).saturating_sub(now) / 1000) as i64);
}

pub(super) fn hpttl(ctx: &mut ExecCtx) {
    let now = ctx.now;
    read_deadlines(ctx, |at| at.saturating_sub(now) as i64);
}

pub(super) fn hexpiretime(ctx: &mut ExecCtx) {
    read_deadlines(ctx, |at| (at.div_ceil(1000)) as i64);
}

pub(super) fn hpexpiretime(ctx: &mut ExecCtx) {
    read_deadlines(ctx, |at| at as i64);
}

/// HTTL / HPTTL / HEXPIRETIME / HPEXPIRETIME key FIELDS n field...: each field's
/// deadline as `show` puts it, -1 for none, -2 for no such field.
fn read_deadlines(ctx: &mut ExecCtx, show: impl Fn(u64) -> i64) {
    let key = ctx.args.get(1);
    let Some(first) = key_and_fields(ctx, key) else {
        return;
    };
    let args = ctx.args;
    let now = ctx.now;
    let fields = first..args.len();
    read_hash(
        ctx,
        |out| {
            out.array_len(fields.len());
            for _ in fields.clone() {
                out.integer(NO_FIELD);
            }
        },
        |h, out| {
            out.array_len(fields.len());
            for i in fields.clone() {
                let field = args.get(i);
                out.integer(match h.field_expire(field) {
                    _ if !h.contains(field) => NO_FIELD,
                    None => NO_TTL,
                    // Kept past its deadline (a replica): as good as gone.
                    Some(at) if at <= now => NO_FIELD,
                    Some(at) => show(at),
                });
            }
        },
    );
}

/// HPERSIST key FIELDS n field...: 1 for each deadline dropped, -1 for a field
/// without one, -2 for no such field.
pub(super) fn hpersist(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let Some(first) = key_and_fields(ctx, key) else {
        return;
    };
    let args = ctx.args;
    let now = ctx.now;
    let codes = modify_hash(ctx, key, |h| {
        (first..args.len())
            .map(|i| persist_one(h, args.get(i), now))
            .collect::<Vec<i64>>()
    });
    let codes = match codes {
        Err(()) => return ctx.error(WRONGTYPE),
        Ok(Found::Missing(_)) => return reply_all(ctx, args.len() - first, NO_FIELD),
        Ok(Found::Hash(codes)) => codes,
    };
    if codes.contains(&UPDATED) {
        ctx.notify(notify::HASH, "hpersist", key);
        ctx.dirty(1);
    } else {
        ctx.nothing_changed();
    }
    ctx.out.array_len(codes.len());
    for code in codes {
        ctx.out.integer(code);
    }
}

fn persist_one(h: &mut HashValue, field: &[u8], now: u64) -> i64 {
    if !h.contains(field) {
        return NO_FIELD;
    }
    match h.field_expire(field) {
        None => NO_TTL,
        Some(at) if at < now => NO_FIELD,
        Some(_) => {
            h.persist_field(field);
            UPDATED
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_treat_no_deadline_as_infinite() {
        assert!(Cond::Nx.allows(None, 5));
        assert!(!Cond::Nx.allows(Some(1), 5));
        assert!(!Cond::Xx.allows(None, 5));
        assert!(Cond::Xx.allows(Some(9), 5));
        assert!(!Cond::Gt.allows(None, 5));
        assert!(Cond::Gt.allows(Some(4), 5));
        assert!(!Cond::Gt.allows(Some(5), 5));
        assert!(Cond::Lt.allows(None, 5));
        assert!(Cond::Lt.allows(Some(6), 5));
        assert!(!Cond::Lt.allows(Some(5), 5));
        assert!(Cond::Always.allows(Some(1), 0));
    }
}
