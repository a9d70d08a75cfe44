//! HyperLogLog commands (Redis's hyperloglog.c): PFADD, PFCOUNT, PFMERGE, PFDEBUG and
//! PFSELFTEST over plain string values in Redis's byte format (storage/hll.rs).
//! Multi-key PFCOUNT and PFMERGE whose keys span shards run as coordinators: they lock
//! every key, copy the strings home, merge there and (PFMERGE) write the destination
//! on its owner, so they stay atomic.

use std::future::Future;
use std::pin::Pin;

use super::table::{flags::*, CommandSpec, Cross, KeySpec, Kind, K1, K_ALL};
use super::{notify, ClientCtx, ExecCtx, GlobalCtx, WRONGTYPE};
use crate::config::Config;
use crate::shard::multi::MultiShardOp;
use crate::shard::ShardData;
use crate::storage::hll::{self, INVALID_ERR, NOT_HLL_ERR, REGISTERS};
use crate::storage::{Entry, StrValue, Value, NO_EXPIRE};

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

const W: &[&str] = &["@write", "@hyperloglog", "@fast"];
const W_SLOW: &[&str] = &["@write", "@hyperloglog", "@slow"];
const R_SLOW: &[&str] = &["@read", "@hyperloglog", "@slow"];
const ADMIN_SLOW: &[&str] = &["@write", "@hyperloglog", "@admin", "@slow", "@dangerous"];
const SELFTEST: &[&str] = &["@hyperloglog", "@admin", "@slow", "@dangerous"];

/// PFDEBUG's key is its second argument.
const K2: KeySpec = KeySpec::Range {
    first: 2,
    last: 2,
    step: 1,
};

macro_rules! pcmd {
    ($name:expr, $arity:expr, $flags:expr, $keys:expr, $kind:expr, $summary:expr, $acl:expr) => {
        CommandSpec {
            name: $name,
            arity: $arity,
            flags: $flags,
            keys: $keys,
            kind: $kind,
            group: "hyperloglog",
            since: "2.8.9",
            summary: $summary,
            acl: $acl,
        }
    };
}

/// One row per command, kept on one line each so the table reads as data.
#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    pcmd!("pfadd", -2, WRITE | DENYOOM | FAST, K1, Kind::Keyed(pfadd, Cross::Never), "Adds the specified elements to the specified HyperLogLog.", W),
    pcmd!("pfcount", -2, READONLY | MAY_REPLICATE, K_ALL, Kind::Keyed(pfcount, Cross::Coordinator(pfcount_across)), "Return the approximated cardinality of the set(s) observed by the HyperLogLog at key(s).", R_SLOW),
    pcmd!("pfmerge", -2, WRITE | DENYOOM, K_ALL, Kind::Keyed(pfmerge, Cross::Coordinator(pfmerge_across)), "Merge N different HyperLogLogs into a single one.", W_SLOW),
    pcmd!("pfdebug", 3, WRITE | DENYOOM | ADMIN, K2, Kind::Keyed(pfdebug, Cross::Never), "Internal commands for debugging HyperLogLog values", ADMIN_SLOW),
    pcmd!("pfselftest", 1, ADMIN, KeySpec::None, Kind::Client(pfselftest), "An internal command for testing HyperLogLog values", SELFTEST),
];

/// hll-sparse-max-bytes: the sparse size beyond which an HLL turns dense.
fn sparse_max(c: &Config) -> usize {
    c.int_param("hll-sparse-max-bytes")
        .map_or(3000, |n| usize::try_from(n).unwrap_or(0))
}

/// The HLL string of an entry, made mutable in place: Ok(None) when missing; the
/// WRONGTYPE errors for another type or a string that is not an HLL.
fn hll_mut(e: Option<&mut Entry>) -> Result<Option<&mut Vec<u8>>, &'static str> {
    let Some(e) = e else { return Ok(None) };
    let Value::Str(s) = e.value_mut() else {
        return Err(WRONGTYPE);
    };
    let mut scratch = [0u8; 24];
    if !hll::is_hll(s.bytes(&mut scratch)) {
        return Err(NOT_HLL_ERR);
    }
    Ok(Some(s.make_raw()))
}

/// A live entry looked up for writing, touching its access clock; borrows only the
/// shard data so the reply writer stays usable beside it.
fn write_entry<'d>(
    data: &'d mut ShardData,
    db: usize,
    key: &[u8],
    now: u64,
    lru: u32,
) -> Option<&'d mut Entry> {
    let e = data.dbs[db].get(key, now)?;
    e.set_lru(lru);
    Some(e)
}

// ---------------------------------------------------------------------------
// PFADD
// ---------------------------------------------------------------------------

fn pfadd(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let sparse_max = sparse_max(&ctx.data.config);
    let (lru, now, dbi) = (ctx.lru(), ctx.now, ctx.db);
    let key = args.get(1);
    let mut fresh = None;
    let h = match hll_mut(write_entry(ctx.data, dbi, key, now, lru)) {
        Err(e) => return ctx.out.error(e),
        Ok(Some(h)) => h,
        Ok(None) => fresh.insert(hll::new_sparse()),
    };
    // Redis's pfaddCommand counts one change per element that altered a register,
    // and one for creating the key.
    let mut updated = 0;
    for ele in args.iter().skip(2) {
        match hll::add(h, ele, sparse_max) {
            Ok(u) => updated += u64::from(u),
            Err(_) => return ctx.out.error(INVALID_ERR),
        }
    }
    if updated > 0 {
        hll::invalidate(h);
    }
    if let Some(h) = fresh {
        updated += 1;
        ctx.data.dbs[dbi].insert(key, Value::Str(StrValue::raw(h)), NO_EXPIRE, lru);
    }
    if updated > 0 {
        ctx.notify(notify::STRING, "pfadd", key);
        ctx.dirty(updated);
    } else {
        ctx.nothing_changed();
    }
    ctx.out.integer(i64::from(updated > 0));
}

// ---------------------------------------------------------------------------
// PFCOUNT
// ---------------------------------------------------------------------------

fn pfcount(ctx: &mut ExecCtx) {
    if ctx.args.len() > 2 {
        return pfcount_local_multi(ctx);
    }
    let key = ctx.args.get(1);
    let (lru, now, dbi) = (ctx.lru(), ctx.now, ctx.db);
    let h = match hll_mut(write_entry(ctx.data, dbi, key, now, lru)) {
        Err(e) => return ctx.out.error(e),
        Ok(None) => return ctx.out.integer(0),
        Ok(Some(h)) => h,
    };
    if let Some(card) = hll::cached(h) {
        return ctx.out.integer(card as i64);
    }
    match hll::count(h) {
        Err(_) => ctx.out.error(INVALID_ERR),
        Ok(card) => {
            // Caching the estimate modifies the key, as Redis signals it.
            hll::set_cached(h, card);
            ctx.signal_also(dbi, key, true, false);
            ctx.out.integer(card as i64);
        }
    }
}

/// Folds one source into the merged registers: the reply error for an invalid one.
fn fold(max: &mut [u8], dense: &mut bool, v: &[u8]) -> Result<(), &'static str> {
    if !hll::is_hll(v) {
        return Err(NOT_HLL_ERR);
    }
    *dense |= !hll::is_sparse(v);
    hll::merge_into(max, v).map_err(|_| INVALID_ERR)
}

/// Merges the HLLs at the argument positions `from..` of one shard's keys.
fn fold_local(ctx: &mut ExecCtx, from: usize) -> Result<(Vec<u8>, bool), &'static str> {
    let args = ctx.args;
    let mut max = vec![0u8; REGISTERS];
    let mut dense = false;
    for key in args.iter().skip(from) {
        match ctx.lookup_read(key).map(|e| e.value()) {
            None => {}
            Some(Value::Str(s)) => {
                let mut scratch = [0u8; 24];
                fold(&mut max, &mut dense, s.bytes(&mut scratch))?;
            }
            Some(_) => return Err(WRONGTYPE),
        }
    }
    Ok((max, dense))
}

fn pfcount_local_multi(ctx: &mut ExecCtx) {
    match fold_local(ctx, 1) {
        Ok((max, _)) => ctx.out.integer(hll::count_registers(&max) as i64),
        Err(e) => ctx.error(e),
    }
}

/// Copies of the string values of `keys` (in order) under `op`'s locks: Err for a key
/// of another type.
async fn fetch(
    op: &MultiShardOp,
    cell: &std::rc::Rc<crate::shard::ShardCell>,
    db: usize,
    keys: &[Vec<u8>],
) -> Result<(Vec<u8>, bool), &'static str> {
    let mut max = vec![0u8; REGISTERS];
    let mut dense = false;
    for key in keys {
        let k = key.clone();
        let v = op
            .on(cell, cell.shard_of(key), move |d| {
                let now = crate::util::now_ms();
                let e = d.dbs[db].get(&k, now);
                if e.is_some() {
                    d.stats.keyspace_hits += 1;
                } else {
                    d.stats.keyspace_misses += 1;
                }
                match e.map(|e| e.value()) {
                    None => Ok(None),
                    Some(Value::Str(s)) => Ok(Some(s.to_vec())),
                    Some(_) => Err(WRONGTYPE),
                }
            })
            .await?;
        if let Some(v) = v {
            fold(&mut max, &mut dense, &v)?;
        }
    }
    Ok((max, dense))
}

/// PFCOUNT of several keys on several shards: merged on the fly, nothing cached.
fn pfcount_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let db = g.session.db;
        let cell = g.session.cell.clone();
        let keys = g.args[1..].to_vec();
        let mut op = MultiShardOp::lock_keys(g.owner(), &cell, db, &keys).await;
        let r = fetch(&op, &cell, db, &keys).await;
        // Merged on the fly: nothing is written.
        op.set_read_only();
        g.release(op).await;
        match r {
            Ok((max, _)) => g.w().integer(hll::count_registers(&max) as i64),
            Err(e) => g.error(e),
        }
    })
}

// ---------------------------------------------------------------------------
// PFMERGE
// ---------------------------------------------------------------------------

/// PFMERGE's write: raises the destination's registers to the merged ones (creating
/// it if missing, keeping its TTL otherwise). Like Redis, a successful merge always
/// signals `pfadd` on the destination, changed or not.
fn store_merged(
    d: &mut ShardData,
    db: usize,
    key: &[u8],
    max: &[u8],
    dense: bool,
) -> Result<(), &'static str> {
    let sparse_max = sparse_max(&d.config);
    let now = crate::util::now_ms();
    match hll_mut(d.dbs[db].get(key, now))? {
        Some(h) => hll::store_registers(h, max, dense, sparse_max).map_err(|_| INVALID_ERR)?,
        None => {
            let mut h = hll::new_sparse();
            hll::store_registers(&mut h, max, dense, sparse_max).map_err(|_| INVALID_ERR)?;
            let lru = crate::util::lru_clock();
            d.dbs[db].insert(key, Value::Str(StrValue::raw(h)), NO_EXPIRE, lru);
        }
    }
    crate::pubsub::notify(notify::STRING, "pfadd", key, db);
    Ok(())
}

fn pfmerge(ctx: &mut ExecCtx) {
    let r = fold_local(ctx, 1).and_then(|(max, dense)| {
        let key = ctx.args.get(1);
        store_merged(ctx.data, ctx.db, key, &max, dense)
    });
    // Redis signals the destination even when the merge left it as it was; the
    // sources were only read.
    ctx.only_changed(0, true);
    match r {
        Ok(()) => ctx.out.ok(),
        Err(e) => ctx.error(e),
    }
}

/// PFMERGE with the destination and sources on several shards.
fn pfmerge_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let db = g.session.db;
        let cell = g.session.cell.clone();
        let keys = g.args[1..].to_vec();
        let mut op = MultiShardOp::lock_keys(g.owner(), &cell, db, &keys).await;
        let r = match fetch(&op, &cell, db, &keys).await {
            Err(e) => Err(e),
            Ok((max, dense)) => {
                let dst = g.args[1].clone();
                op.on(&cell, cell.shard_of(&dst), move |d| {
                    store_merged(d, db, &dst, &max, dense)
                })
                .await
            }
        };
        // The destination is written (even when the merge left it as it was, as
        // Redis signals it); the sources were only read.
        match r {
            Ok(()) => op.written_only(&[(db, g.args[1].as_slice())]),
            Err(_) => op.set_read_only(),
        }
        g.release(op).await;
        match r {
            Ok(()) => g.w().ok(),
            Err(e) => g.error(e),
        }
    })
}

// ---------------------------------------------------------------------------
// PFDEBUG / PFSELFTEST
// ---------------------------------------------------------------------------

fn pfdebug(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let sub = String::from_utf8_lossy(args.get(1)).into_owned();
    let (lru, now, dbi) = (ctx.lru(), ctx.now, ctx.db);
    let h = match hll_mut(write_entry(ctx.data, dbi, args.get(2), now, lru)) {
        Err(e) => return ctx.out.error(e),
        Ok(None) => return ctx.out.error("ERR The specified key does not exist"),
        Ok(Some(h)) => h,
    };
    let known = ["getreg", "decode", "encoding", "todense"];
    if !known.iter().any(|k| sub.eq_ignore_ascii_case(k)) {
        return ctx
            .out
            .error(&format!("ERR Unknown PFDEBUG subcommand '{sub}'"));
    }
    let out = &mut ctx.out;
    if sub.eq_ignore_ascii_case("getreg") {
        if hll::to_dense(h).is_err() {
            return out.error(INVALID_ERR);
        }
        let regs = hll::registers(h);
        out.array_len(regs.len());
        for r in regs {
            out.integer(i64::from(r));
        }
    } else if sub.eq_ignore_ascii_case("decode") {
        if !hll::is_sparse(h) {
            return out.error("ERR HLL encoding is not sparse");
        }
        out.bulk(hll::decode(h).as_bytes());
    } else if sub.eq_ignore_ascii_case("encoding") {
        out.simple(if hll::is_sparse(h) { "sparse" } else { "dense" });
    } else {
        match hll::to_dense(h) {
            Ok(conv) => out.integer(i64::from(conv)),
            Err(_) => out.error(INVALID_ERR),
        }
    }
}

fn pfselftest(ctx: &mut ClientCtx) {
    match hll::self_test() {
        Ok(()) => ctx.out.ok(),
        Err(e) => ctx.out.error(&e),
    }
}
