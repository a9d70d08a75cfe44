//! Generic key commands (Redis's db.c / expire.c / object.c / cluster.c DUMP/RESTORE).

use std::future::Future;
use std::pin::Pin;

use super::strings::cmd;
use super::table::{flags::*, CommandSpec, Cross, KeySpec, Kind, Merge};
use super::table::{K1, K12, K_ALL};
use super::{
    notify, parse_i64, ExecCtx, GlobalCtx, DB_INDEX_OUT_OF_RANGE, NOT_INT, NO_SUCH_KEY, SYNTAX_ERR,
};
use crate::shard::multi::MultiShardOp;
use crate::storage::rdb;
use crate::storage::{StrValue, Value, NO_EXPIRE};
use crate::util::glob::glob_match;

const K2: KeySpec = KeySpec::Range {
    first: 2,
    last: 2,
    step: 1,
};

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

const fn keyed(f: super::KeyedFn) -> Kind {
    Kind::Keyed(f, Cross::Never)
}

const fn sum(f: super::KeyedFn) -> Kind {
    Kind::Keyed(
        f,
        Cross::Split {
            one: f,
            stride: 1,
            merge: Merge::Sum,
        },
    )
}

macro_rules! kcmd {
    ($name:expr, $arity:expr, $flags:expr, $keys:expr, $kind:expr, $since:expr, $summary:expr) => {
        CommandSpec {
            group: "generic",
            acl: &["@keyspace"],
            ..cmd!($name, $arity, $flags, $keys, $kind, $since, $summary)
        }
    };
}

#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    kcmd!("del", -2, WRITE, K_ALL, sum(del), "1.0.0", "Delete a key"),
    kcmd!("unlink", -2, WRITE | FAST, K_ALL, sum(del), "4.0.0", "Delete a key asynchronously in another thread. Otherwise it is just as DEL, but non blocking."),
    kcmd!("exists", -2, READONLY | FAST, K_ALL, sum(exists), "1.0.0", "Determine if a key exists"),
    kcmd!("touch", -2, READONLY | FAST, K_ALL, sum(touch), "3.2.1", "Alters the last access time of a key(s). Returns the number of existing keys specified."),
    kcmd!("type", 2, READONLY | FAST, K1, keyed(type_cmd), "1.0.0", "Determine the type stored at key"),
    kcmd!("expire", -3, WRITE | FAST, K1, keyed(expire), "1.0.0", "Set a key's time to live in seconds"),
    kcmd!("pexpire", -3, WRITE | FAST, K1, keyed(pexpire), "2.6.0", "Set a key's time to live in milliseconds"),
    kcmd!("expireat", -3, WRITE | FAST, K1, keyed(expireat), "1.2.0", "Set the expiration for a key as a UNIX timestamp"),
    kcmd!("pexpireat", -3, WRITE | FAST, K1, keyed(pexpireat), "2.6.0", "Set the expiration for a key as a UNIX timestamp specified in milliseconds"),
    kcmd!("ttl", 2, READONLY | FAST, K1, keyed(ttl), "1.0.0", "Get the time to live for a key in seconds"),
    kcmd!("pttl", 2, READONLY | FAST, K1, keyed(pttl), "2.6.0", "Get the time to live for a key in milliseconds"),
    kcmd!("expiretime", 2, READONLY | FAST, K1, keyed(expiretime), "7.0.0", "Get the expiration Unix timestamp for a key"),
    kcmd!("pexpiretime", 2, READONLY | FAST, K1, keyed(pexpiretime), "7.0.0", "Get the expiration Unix timestamp for a key in milliseconds"),
    kcmd!("persist", 2, WRITE | FAST, K1, keyed(persist), "2.2.0", "Remove the expiration from a key"),
    kcmd!("rename", 3, WRITE, K12, Kind::Keyed(rename, Cross::Coordinator(rename_across)), "1.0.0", "Rename a key"),
    kcmd!("renamenx", 3, WRITE | FAST, K12, Kind::Keyed(renamenx, Cross::Coordinator(renamenx_across)), "1.0.0", "Rename a key, only if the new key does not exist"),
    kcmd!("copy", -3, WRITE | DENYOOM, K12, Kind::Keyed(copy, Cross::Coordinator(copy_across)), "6.2.0", "Copy a key"),
    kcmd!("move", 3, WRITE | FAST, K1, keyed(move_cmd), "1.0.0", "Move a key to another database"),
    CommandSpec { acl: &[], ..kcmd!("object", -2, READONLY, K2, keyed(object), "2.2.3", "A container for object introspection commands") },
    kcmd!("dump", 2, READONLY, K1, keyed(dump_cmd), "2.6.0", "Return a serialized version of the value stored at the specified key."),
    CommandSpec { acl: &["@keyspace", "@dangerous"], ..kcmd!("restore", -4, WRITE | DENYOOM, K1, keyed(restore), "2.6.0", "Create a key using the provided serialized value, previously obtained using DUMP.") },
    CommandSpec { acl: &["@keyspace", "@dangerous"], ..kcmd!("restore-asking", -4, WRITE | DENYOOM, K1, keyed(restore), "3.0.0", "An internal command for migrating keys in a cluster") },
    CommandSpec { acl: &["@keyspace", "@dangerous"], ..kcmd!("keys", 2, READONLY, KeySpec::None, Kind::Global(keys), "1.0.0", "Find all keys matching the given pattern") },
    kcmd!("scan", -2, READONLY, KeySpec::None, Kind::Global(scan), "2.8.0", "Incrementally iterate the keys space"),
    kcmd!("randomkey", 1, READONLY, KeySpec::None, Kind::Global(randomkey), "1.0.0", "Return a random key from the keyspace"),
];

/// DEL and UNLINK. UNLINK (and DEL under lazyfree-lazy-user-del) hands values with
/// many elements to the shard's lazy-free task instead of freeing them here.
fn del(ctx: &mut ExecCtx) {
    let lazy = ctx.args.is(0, "unlink") || ctx.data.mem.lazy_user_del;
    let mut n = 0;
    for i in 1..ctx.args.len() {
        let key = ctx.args.get(i);
        let now = ctx.now;
        let data = &mut *ctx.data;
        let db = &mut data.dbs[ctx.db];
        if db.get(key, now).is_none() {
            // Redis signals only the keys it deleted.
            ctx.key_unchanged(i - 1);
            continue;
        }
        if let Some(e) = db.remove(key) {
            crate::pubsub::notify(notify::GENERIC, "del", key, ctx.db);
            n += 1;
            if lazy {
                let charge = e.charge();
                data.lazy.free(e.into_value(), charge);
            }
        }
    }
    ctx.out.integer(n);
}

/// EXISTS: a read that counts keyspace hits and misses (and raises keymiss) but
/// leaves the keys' access clocks alone, as Redis's LOOKUP_NOTOUCH lookup.
fn exists(ctx: &mut ExecCtx) {
    let no_touch_before = std::mem::replace(&mut ctx.no_touch, true);
    let mut n = 0;
    for i in 1..ctx.args.len() {
        let key = ctx.args.get(i);
        if ctx.lookup_read(key).is_some() {
            n += 1;
        }
    }
    ctx.no_touch = no_touch_before;
    ctx.out.integer(n);
}

fn touch(ctx: &mut ExecCtx) {
    let mut n = 0;
    for i in 1..ctx.args.len() {
        let key = ctx.args.get(i);
        if ctx.lookup_write(key).is_some() {
            n += 1;
        }
    }
    ctx.out.integer(n);
}

fn type_cmd(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let now = ctx.now;
    let t = ctx
        .db()
        .get(key, now)
        .map(|e| e.value().type_name())
        .unwrap_or("none");
    ctx.out.simple(t);
}

#[derive(Default)]
struct ExpireFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

fn parse_expire_flags(ctx: &mut ExecCtx) -> Option<ExpireFlags> {
    let mut f = ExpireFlags::default();
    for i in 3..ctx.args.len() {
        let a = ctx.args.get(i);
        if a.eq_ignore_ascii_case(b"nx") {
            f.nx = true;
        } else if a.eq_ignore_ascii_case(b"xx") {
            f.xx = true;
        } else if a.eq_ignore_ascii_case(b"gt") {
            f.gt = true;
        } else if a.eq_ignore_ascii_case(b"lt") {
            f.lt = true;
        } else {
            ctx.error(&format!(
                "ERR Unsupported option {}",
                String::from_utf8_lossy(a)
            ));
            return None;
        }
    }
    if f.nx && (f.xx || f.gt || f.lt) {
        ctx.error("ERR NX and XX, GT or LT options at the same time are not compatible");
        return None;
    }
    if f.gt && f.lt {
        ctx.error("ERR GT and LT options at the same time are not compatible");
        return None;
    }
    Some(f)
}

/// EXPIRE / PEXPIRE / EXPIREAT / PEXPIREAT with NX/XX/GT/LT. A deadline in the past
/// deletes the key, as Redis does.
fn expire_generic(ctx: &mut ExecCtx, unit_ms: i64, absolute: bool, name: &str) {
    // Redis checks the options before the time argument.
    let Some(f) = parse_expire_flags(ctx) else {
        return;
    };
    let Some(n) = parse_i64(ctx.args.get(2)) else {
        return ctx.error(NOT_INT);
    };
    let invalid = || format!("ERR invalid expire time in '{name}' command");
    let Some(mut when) = n.checked_mul(unit_ms) else {
        return ctx.error(&invalid());
    };
    if !absolute {
        match when.checked_add(ctx.now as i64) {
            Some(w) => when = w,
            None => return ctx.error(&invalid()),
        }
    }
    let key = ctx.args.get(1);
    let now = ctx.now;
    let Some(entry) = ctx.db().get(key, now) else {
        ctx.nothing_changed();
        return ctx.out.integer(0);
    };
    let current = entry.expire_at();
    let has_ttl = current != NO_EXPIRE;
    let refused = (f.nx && has_ttl)
        || (f.xx && !has_ttl)
        || (f.gt && (!has_ttl || when <= current as i64))
        || (f.lt && has_ttl && when >= current as i64);
    if refused {
        ctx.nothing_changed();
        return ctx.out.integer(0);
    }
    // A deadline at or before the epoch is kept as the earliest one (0 means none).
    let at = when.max(1) as u64;
    if crate::storage::entry::deadline_passed(at, now) {
        ctx.db().remove(key);
        ctx.notify(notify::GENERIC, "del", key);
        let del = deleted_as(ctx, "lazyfree-lazy-server-del");
        ctx.propagation.rewrite(|| vec![del.to_vec(), key.to_vec()]);
    } else {
        ctx.db().set_expire(key, at);
        ctx.notify(notify::GENERIC, "expire", key);
        ctx.propagation.rewrite(|| pexpireat_effect(key, at));
    }
    ctx.out.integer(1);
}

/// `PEXPIREAT key deadline`: how every relative or absolute expiry propagates (a
/// relative one would restart on the replica).
pub(crate) fn pexpireat_effect(key: &[u8], at: u64) -> Vec<Vec<u8>> {
    vec![
        b"PEXPIREAT".to_vec(),
        key.to_vec(),
        at.to_string().into_bytes(),
    ]
}

/// DEL, or UNLINK when the lazyfree setting `param` says so: how a key a command
/// deleted by giving it a past deadline propagates.
pub(crate) fn deleted_as(ctx: &ExecCtx, param: &str) -> &'static [u8] {
    if ctx.data.config.bool_param(param) == Some(true) {
        b"UNLINK"
    } else {
        b"DEL"
    }
}

fn expire(ctx: &mut ExecCtx) {
    expire_generic(ctx, 1000, false, "expire")
}

fn pexpire(ctx: &mut ExecCtx) {
    expire_generic(ctx, 1, false, "pexpire")
}

fn expireat(ctx: &mut ExecCtx) {
    expire_generic(ctx, 1000, true, "expireat")
}

fn pexpireat(ctx: &mut ExecCtx) {
    expire_generic(ctx, 1, true, "pexpireat")
}

/// TTL family: -2 missing, -1 no deadline. `relative`: remaining time, else the deadline.
fn ttl_generic(ctx: &mut ExecCtx, ms: bool, relative: bool) {
    let key = ctx.args.get(1);
    let now = ctx.now;
    // Redis looks the key up with LOOKUP_NOTOUCH: TTL counts a hit or miss but does
    // not refresh the key's access time (OBJECT IDLETIME).
    let d = &mut *ctx.data;
    let at = match d.dbs[ctx.db].get(key, now) {
        None => {
            d.stats.keyspace_misses += 1;
            return ctx.out.integer(-2);
        }
        Some(e) => {
            d.stats.keyspace_hits += 1;
            e.expire_at()
        }
    };
    if at == NO_EXPIRE {
        return ctx.out.integer(-1);
    }
    let v = if relative {
        let left = at.saturating_sub(now) as i64;
        if ms {
            left
        } else {
            (left + 500) / 1000
        }
    } else if ms {
        at as i64
    } else {
        at as i64 / 1000
    };
    ctx.out.integer(v);
}

fn ttl(ctx: &mut ExecCtx) {
    ttl_generic(ctx, false, true)
}

fn pttl(ctx: &mut ExecCtx) {
    ttl_generic(ctx, true, true)
}

fn expiretime(ctx: &mut ExecCtx) {
    ttl_generic(ctx, false, false)
}

fn pexpiretime(ctx: &mut ExecCtx) {
    ttl_generic(ctx, true, false)
}

fn persist(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let now = ctx.now;
    let had = ctx.db().get(key, now).map(|e| e.expire_at() != NO_EXPIRE);
    if had == Some(true) {
        ctx.db().set_expire(key, NO_EXPIRE);
        ctx.notify(notify::GENERIC, "persist", key);
        ctx.out.integer(1);
    } else {
        ctx.nothing_changed();
        ctx.out.integer(0);
    }
}

/// RENAME / RENAMENX with both keys on this shard.
fn rename_local(ctx: &mut ExecCtx, nx: bool) {
    let (src, dst) = (ctx.args.get(1), ctx.args.get(2));
    let now = ctx.now;
    let db = ctx.db();
    if db.get(src, now).is_none() {
        return ctx.error(NO_SUCH_KEY);
    }
    if src == dst {
        ctx.nothing_changed();
        return if nx { ctx.out.integer(0) } else { ctx.out.ok() };
    }
    if nx && db.contains(dst, now) {
        ctx.nothing_changed();
        return ctx.out.integer(0);
    }
    if let Some(e) = db.remove(src) {
        db.insert_moved(dst, e);
        notify_rename(src, dst, ctx.db);
    }
    // Two keys written, one change (Redis's renameGenericCommand).
    ctx.dirty(1);
    if nx {
        ctx.out.integer(1)
    } else {
        ctx.out.ok()
    }
}

fn notify_rename(src: &[u8], dst: &[u8], db: usize) {
    crate::pubsub::notify(notify::GENERIC, "rename_from", src, db);
    crate::pubsub::notify(notify::GENERIC, "rename_to", dst, db);
}

fn rename(ctx: &mut ExecCtx) {
    rename_local(ctx, false)
}

fn renamenx(ctx: &mut ExecCtx) {
    rename_local(ctx, true)
}

/// RENAME across shards: under both keys' locks, take the value from the source shard
/// and store it (with its TTL) on the destination shard.
async fn rename_across_generic(g: &mut GlobalCtx<'_>, nx: bool) {
    let db = g.session.db;
    let (src, dst) = (g.args[1].clone(), g.args[2].clone());
    let cell = g.session.cell.clone();
    let mut op = MultiShardOp::lock_keys(g.owner(), &cell, db, &[src.clone(), dst.clone()]).await;
    let reply: Result<bool, &str> = async {
        if !op.exists(&cell, db, &src).await {
            return Err(NO_SUCH_KEY);
        }
        if nx && op.exists(&cell, db, &dst).await {
            return Ok(false);
        }
        if let Some(taken) = op.take(&cell, db, &src).await {
            op.put_taken(&cell, db, &dst, taken).await;
            // Both events from here, so subscribers see them in Redis's order.
            notify_rename(&src, &dst, db);
        }
        Ok(true)
    }
    .await;
    if reply != Ok(true) {
        op.set_read_only();
    }
    // Two keys written, one change, as on one shard.
    op.count_dirty(1);
    g.release(op).await;
    let mut w = g.w();
    match (reply, nx) {
        (Err(e), _) => w.error(e),
        (Ok(done), true) => w.integer(done as i64),
        (Ok(_), false) => w.ok(),
    }
}

fn rename_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(rename_across_generic(g, false))
}

fn renamenx_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(rename_across_generic(g, true))
}

struct CopyOpts {
    db: usize,
    replace: bool,
}

fn parse_copy_opts(
    args: &[&[u8]],
    cur_db: usize,
    databases: usize,
) -> Result<CopyOpts, &'static str> {
    let mut o = CopyOpts {
        db: cur_db,
        replace: false,
    };
    let mut db = cur_db as i64;
    let mut i = 3;
    while i < args.len() {
        if args[i].eq_ignore_ascii_case(b"replace") {
            o.replace = true;
        } else if args[i].eq_ignore_ascii_case(b"db") && i + 1 < args.len() {
            db = parse_i64(args[i + 1]).ok_or(NOT_INT)?;
            i += 1;
        } else {
            return Err(SYNTAX_ERR);
        }
        i += 1;
    }
    if crate::cluster::enabled() && (cur_db != 0 || db != 0) {
        return Err("ERR Copying to another database is not allowed in cluster mode");
    }
    if db < 0 || db as usize >= databases {
        return Err(DB_INDEX_OUT_OF_RANGE);
    }
    o.db = db as usize;
    Ok(o)
}

fn copy(ctx: &mut ExecCtx) {
    let argv: Vec<&[u8]> = ctx.args.iter().collect();
    let dbs = ctx.data.dbs.len();
    let o = match parse_copy_opts(&argv, ctx.db, dbs) {
        Ok(o) => o,
        Err(e) => return ctx.error(e),
    };
    let (src, dst) = (argv[1], argv[2]);
    if src == dst && o.db == ctx.db {
        return ctx.error("ERR source and destination objects are the same");
    }
    let now = ctx.now;
    let Some((v, at)) = ctx
        .db()
        .get(src, now)
        .map(|e| (e.value().clone(), e.expire_at()))
    else {
        ctx.nothing_changed();
        return ctx.out.integer(0);
    };
    let target = &mut ctx.data.dbs[o.db];
    if target.contains(dst, now) && !o.replace {
        ctx.nothing_changed();
        return ctx.out.integer(0);
    }
    let lru = (now / 1000) as u32;
    target.insert(dst, v, at, lru);
    crate::pubsub::notify(notify::GENERIC, "copy_to", dst, o.db);
    // The source was only read; the destination changed, in its own database.
    if o.db == ctx.db {
        ctx.only_changed(1, true);
    } else {
        // Its own keys are unchanged in this database: the count and the signals
        // are stated here.
        ctx.nothing_changed();
        ctx.dirty(1);
        ctx.signal_also(o.db, dst, true, true);
    }
    ctx.out.integer(1);
}

fn copy_across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let argv: Vec<&[u8]> = g.args.iter().map(|a| a.as_slice()).collect();
        let cell = g.session.cell.clone();
        let dbs = cell.data.borrow().dbs.len();
        let o = match parse_copy_opts(&argv, g.session.db, dbs) {
            Ok(o) => o,
            Err(e) => return g.w().error(e),
        };
        let (src, dst) = (g.args[1].clone(), g.args[2].clone());
        let db = g.session.db;
        let mut op =
            MultiShardOp::lock_db_keys(g.owner(), &cell, &[(db, src.clone()), (o.db, dst.clone())])
                .await;
        let mut copied = 0;
        if let Some((v, at)) = op.peek_clone(&cell, db, &src).await {
            if o.replace || !op.exists(&cell, o.db, &dst).await {
                op.put(&cell, o.db, &dst, v, at).await;
                crate::pubsub::notify(notify::GENERIC, "copy_to", &dst, o.db);
                copied = 1;
            }
        }
        // The source was only read.
        let written: &[(usize, &[u8])] = &[(o.db, &dst)];
        op.written_only(if copied == 1 { written } else { &[] });
        g.release(op).await;
        g.w().integer(copied);
    })
}

fn move_cmd(ctx: &mut ExecCtx) {
    if crate::cluster::enabled() {
        return ctx.error("ERR MOVE is not allowed in cluster mode");
    }
    let Some(target) = parse_i64(ctx.args.get(2)) else {
        return ctx.error(NOT_INT);
    };
    if target < 0 || target as usize >= ctx.data.dbs.len() {
        return ctx.error(DB_INDEX_OUT_OF_RANGE);
    }
    let target = target as usize;
    if target == ctx.db {
        return ctx.error("ERR source and destination objects are the same");
    }
    let key = ctx.args.get(1);
    let now = ctx.now;
    if ctx.db().get(key, now).is_none() || ctx.data.dbs[target].contains(key, now) {
        ctx.nothing_changed();
        return ctx.out.integer(0);
    }
    if let Some(e) = ctx.db().remove(key) {
        ctx.data.dbs[target].insert_moved(key, e);
        ctx.notify(notify::GENERIC, "move_from", key);
        crate::pubsub::notify(notify::GENERIC, "move_to", key, target);
        // The write hooks signal the key in this database; it also appeared there.
        ctx.signal_also(target, key, true, true);
    }
    ctx.out.integer(1);
}

const OBJECT_HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Prints this help.",
];

/// Redis's reply to a container command's HELP: the lines as status replies.
pub fn reply_help(out: &mut crate::protocol::reply::ReplyWriter, lines: &[&str]) {
    out.array_len(lines.len());
    for l in lines {
        out.simple(l);
    }
}

fn object(ctx: &mut ExecCtx) {
    let sub = ctx.args.get(1).to_ascii_lowercase();
    let sub = String::from_utf8_lossy(&sub).into_owned();
    if sub == "help" && ctx.args.len() == 2 {
        return reply_help(&mut ctx.out, OBJECT_HELP);
    }
    let known = ["encoding", "refcount", "idletime", "freq"].contains(&sub.as_str());
    if !known {
        return ctx.error(&format!(
            "ERR unknown subcommand '{}'. Try OBJECT HELP.",
            String::from_utf8_lossy(ctx.args.get(1))
        ));
    }
    if ctx.args.len() != 3 {
        return ctx.error(&format!(
            "ERR wrong number of arguments for 'object|{sub}' command"
        ));
    }
    let lfu = ctx.data.config.maxmemory_policy().as_str().contains("lfu");
    let decay = ctx.data.config.lfu_decay_time();
    let key = ctx.args.get(2);
    let now = ctx.now;
    let Some(e) = ctx.data.dbs[ctx.db].get(key, now) else {
        return ctx.out.null();
    };
    match sub.as_str() {
        "encoding" => {
            let enc = e.value().encoding();
            ctx.out.bulk(enc.as_bytes())
        }
        "refcount" => {
            // Redis shares small integers (0..10000) and reports INT_MAX for them.
            let shared = matches!(e.value(), Value::Str(StrValue::Int(n)) if (0..10000).contains(n));
            ctx.out.integer(if shared { i32::MAX as i64 } else { 1 })
        }
        "idletime" if lfu => ctx.error("ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."),
        "idletime" => {
            let idle = crate::util::lru_clock().saturating_sub(e.lru());
            ctx.out.integer(idle as i64)
        }
        _ if !lfu => ctx.error("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."),
        _ => {
            let freq = crate::storage::memory::lfu_decayed(
                e.lfu_counter(),
                e.lru(),
                crate::util::lru_clock(),
                decay,
            );
            ctx.out.integer(freq as i64)
        }
    }
}

fn dump_cmd(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let (entry, out) = ctx.read_with_out(key);
    let Some(e) = entry else {
        return out.null();
    };
    let mut payload = Vec::new();
    rdb::dump_value(e.value(), &mut payload);
    out.bulk(&payload);
}

/// RESTORE, checking in Redis's order: options, BUSYKEY, the TTL, then the payload.
fn restore(ctx: &mut ExecCtx) {
    let key = ctx.args.get(1);
    let (mut replace, mut absttl) = (false, false);
    let mut lru_idle: Option<i64> = None;
    let mut freq: Option<i64> = None;
    let mut i = 4;
    while i < ctx.args.len() {
        let a = ctx.args.get(i);
        let more = i + 1 < ctx.args.len();
        if a.eq_ignore_ascii_case(b"replace") {
            replace = true;
        } else if a.eq_ignore_ascii_case(b"absttl") {
            absttl = true;
        } else if a.eq_ignore_ascii_case(b"idletime") && more && freq.is_none() {
            match parse_i64(ctx.args.get(i + 1)) {
                Some(n) if n >= 0 => lru_idle = Some(n),
                Some(_) => return ctx.error("ERR Invalid IDLETIME value, must be >= 0"),
                None => return ctx.error(NOT_INT),
            }
            i += 1;
        } else if a.eq_ignore_ascii_case(b"freq") && more && lru_idle.is_none() {
            match parse_i64(ctx.args.get(i + 1)) {
                Some(n) if (0..=255).contains(&n) => freq = Some(n),
                Some(_) => return ctx.error("ERR Invalid FREQ value, must be >= 0 and <= 255"),
                None => return ctx.error(NOT_INT),
            }
            i += 1;
        } else {
            return ctx.error(SYNTAX_ERR);
        }
        i += 1;
    }
    let now = ctx.now;
    if !replace && ctx.db().contains(key, now) {
        return ctx.error("BUSYKEY Target key name already exists.");
    }
    let ttl = match parse_i64(ctx.args.get(2)) {
        None => return ctx.error(NOT_INT),
        Some(t) if t < 0 => return ctx.error("ERR Invalid TTL value, must be >= 0"),
        Some(t) => t,
    };
    let limits = ctx.data.limits;
    let value = match rdb::restore(ctx.args.get(3)).map(|d| d.into_value(&limits)) {
        Ok(Some(v)) => v,
        Ok(None) => return ctx.error("ERR Bad data format"),
        Err(e) => return ctx.error(e.message()),
    };
    let at = match (ttl, absttl) {
        (0, _) => NO_EXPIRE,
        (t, true) => t as u64,
        (t, false) => now.saturating_add(t as u64),
    };
    let deleted = replace && ctx.db().remove(key).is_some();
    if at != NO_EXPIRE && crate::storage::entry::deadline_passed(at, now) {
        // Already expired: Redis replies OK and does not create the key.
        if deleted {
            let del = deleted_as(ctx, "lazyfree-lazy-server-del");
            ctx.propagation.rewrite(|| vec![del.to_vec(), key.to_vec()]);
        } else {
            ctx.nothing_changed();
        }
        return ctx.out.ok();
    }
    if ttl > 0 && !absttl {
        // The deadline, not the TTL, reaches the replica.
        let args = ctx.args;
        ctx.propagation.rewrite(|| {
            let mut argv = args.to_vecs();
            argv[2] = at.to_string().into_bytes();
            argv.push(b"ABSTTL".to_vec());
            argv
        });
    }
    // As Redis's objectSetLRUOrLFU: FREQ counts under an LFU policy, IDLETIME otherwise.
    let lfu = ctx.data.mem.lfu.is_some();
    let idle = if lfu { 0 } else { lru_idle.unwrap_or(0) };
    let lru = crate::util::lru_clock().saturating_sub(idle.min(u32::MAX as i64) as u32);
    ctx.db().insert(key, value, at, lru);
    if let (true, Some(f)) = (lfu, freq) {
        if let Some(e) = ctx.db().get(key, now) {
            e.set_lfu_counter(f as u8);
        }
    }
    ctx.notify(notify::GENERIC, "restore", key);
    ctx.out.ok();
}

fn keys<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let pattern = g.args[1].clone();
        let db = g.session.db;
        let cell = g.session.cell.clone();
        let op = MultiShardOp::lock_all(g.owner(), &cell).await;
        let parts = op
            .on_each(&cell, move |d| {
                let now = crate::util::now_ms();
                let dbr = &d.dbs[db];
                let mut out = Vec::new();
                let all = pattern == b"*";
                for idx in 0..dbr.slot_count() {
                    dbr.for_each_in_slot(idx, now, |e| {
                        if all || glob_match(&pattern, e.key(), false) {
                            out.push(e.key().to_vec());
                        }
                    });
                }
                out
            })
            .await;
        g.release(op).await;
        let n: usize = parts.iter().map(|p| p.len()).sum();
        let mut w = g.w();
        w.array_len(n);
        for k in parts.iter().flatten() {
            w.bulk(k);
        }
    })
}

/// SCAN's cursor is the next hash slot to visit: a call walks whole slots, so every
/// key present for the whole iteration is returned at least once, whatever the
/// tables do in between. It goes on into the next shard's slots until it found COUNT
/// keys or looked at ten times as many (Redis's bound of COUNT*10 buckets), so a small
/// keyspace is one call however many shards hold it.
fn scan<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let Some(cursor) = super::parse_scan_cursor(&g.args[1]) else {
            return g.w().error("ERR invalid cursor");
        };
        let mut count = 10usize;
        let mut pattern: Option<Vec<u8>> = None;
        let mut type_filter: Option<Vec<u8>> = None;
        let mut i = 2;
        while i < g.args.len() {
            let more = i + 1 < g.args.len();
            if g.is(i, "count") && more {
                match parse_i64(&g.args[i + 1]) {
                    Some(n) if n >= 1 => count = n as usize,
                    Some(_) => return g.w().error(SYNTAX_ERR),
                    None => return g.w().error(NOT_INT),
                }
            } else if g.is(i, "match") && more {
                pattern = Some(g.args[i + 1].clone());
            } else if g.is(i, "type") && more {
                type_filter = Some(g.args[i + 1].to_ascii_lowercase());
            } else {
                return g.w().error(SYNTAX_ERR);
            }
            i += 2;
        }
        let db = g.session.db;
        let cell = g.session.cell.clone();
        let filter = std::sync::Arc::new(ScanFilter {
            pattern,
            type_filter,
        });
        let mut keys = Vec::new();
        let mut budget = ScanBudget {
            found: 0,
            count,
            looked: 0,
            looks: count.saturating_mul(10),
        };
        let mut slot = cursor as usize;
        while slot < crate::slot::SLOT_COUNT && !budget.spent() {
            let shard = cell.slots.owner(slot as u16);
            let filter = filter.clone();
            let (next, found, spent) = cell
                .call(shard, move |c| {
                    let mut d = c.data.borrow_mut();
                    let scanned = scan_shard(&mut d.dbs[db], slot, &filter, budget);
                    // The DELs of the keys it found expired reach replicas now, each on
                    // its own (Redis's lazy expiry, never wrapped in MULTI/EXEC).
                    crate::shard::exec::after_deletions(&mut d, None);
                    scanned
                })
                .await;
            budget = spent;
            keys.extend(found);
            slot = next;
        }
        let next = if slot >= crate::slot::SLOT_COUNT {
            0
        } else {
            slot
        };
        let mut w = g.w();
        w.array_len(2);
        w.bulk(next.to_string().as_bytes());
        w.array_len(keys.len());
        for k in &keys {
            w.bulk(k);
        }
    })
}

/// SCAN's MATCH and TYPE.
struct ScanFilter {
    pattern: Option<Vec<u8>>,
    type_filter: Option<Vec<u8>>,
}

impl ScanFilter {
    fn matches_pattern(&self, key: &[u8]) -> bool {
        self.pattern
            .as_deref()
            .is_none_or(|p| glob_match(p, key, false))
    }

    fn matches_type(&self, e: &crate::storage::Entry) -> bool {
        self.type_filter
            .as_deref()
            .is_none_or(|t| t == e.value().type_name().as_bytes())
    }
}

/// How much of its COUNT a SCAN call has done: keys found and keys looked at.
#[derive(Clone, Copy)]
struct ScanBudget {
    found: usize,
    count: usize,
    looked: usize,
    looks: usize,
}

impl ScanBudget {
    fn spent(&self) -> bool {
        self.found >= self.count || self.looked >= self.looks
    }
}

/// Walks this shard's slots of `db` from `slot`, whole slots at a time, until the
/// budget is spent or its slots end. Returns the next slot to visit, the keys found
/// and the budget with them and the keys looked at counted. A key that matches the
/// pattern but whose TTL passed is deleted (Redis's scanGenericCommand filters by
/// pattern, then type, then expireIfNeeded; its type check expires the key too).
fn scan_shard(
    dbr: &mut crate::storage::Db,
    slot: usize,
    filter: &ScanFilter,
    mut budget: ScanBudget,
) -> (usize, Vec<Vec<u8>>, ScanBudget) {
    let now = crate::util::now_ms();
    let first = dbr.first_slot();
    let mut keys = Vec::new();
    let mut expired = Vec::new();
    let mut idx = slot - first;
    while idx < dbr.slot_count() && !budget.spent() {
        for e in dbr.slot_entries(idx) {
            budget.looked += 1;
            if !filter.matches_pattern(e.key()) {
                continue;
            }
            if e.is_expired(now) {
                expired.push(e.key().to_vec());
            } else if filter.matches_type(e) {
                keys.push(e.key().to_vec());
                budget.found += 1;
            }
        }
        idx += 1;
    }
    for key in &expired {
        // Deletes it (logged for replicas, tracking and keyspace events), unless
        // expired keys are held (a replica, a client pause).
        let _ = dbr.get(key, now);
    }
    (first + idx, keys, budget)
}

fn randomkey<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let db = g.session.db;
        let cell = g.session.cell.clone();
        let mut key = None;
        // A shard whose keys all turned out expired deleted them and answered none:
        // ask again, so a dataset with live keys on another shard still answers one
        // (and every expired key found on the way is gone, as in Redis). Bounded: a
        // replica keeps expired keys, and a shard may answer none again.
        for _ in 0..=cell.shard_count() {
            let sizes = cell.call_all(move |c| c.data.borrow().dbs[db].len()).await;
            let total: usize = sizes.iter().sum();
            if total == 0 {
                break;
            }
            let mut pick = cell.data.borrow_mut().rng.below(total);
            let shard = sizes
                .iter()
                .position(|&n| {
                    if pick < n {
                        true
                    } else {
                        pick -= n;
                        false
                    }
                })
                .unwrap_or(0);
            key = cell
                .call(shard, move |c| {
                    let mut d = c.data.borrow_mut();
                    let d = &mut *d;
                    d.dbs[db].random_key(crate::util::now_ms(), &mut d.rng)
                })
                .await;
            if key.is_some() {
                break;
            }
        }
        match key {
            Some(k) => g.w().bulk(&k),
            None => g.w().null(),
        }
    })
}
