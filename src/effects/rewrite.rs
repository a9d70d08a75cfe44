//! What a write propagates: the rewrites of Redis 7.0's call() / alsoPropagate, from
//! the command, its reply and (for keyed commands) its key after it ran. Still
//! decided here by command name; see ARCHITECTURE.md for where this is going.

use super::{propagate, Argv};
use crate::commands::table::flags;
use crate::commands::{Args, CommandSpec};
use crate::shard::ShardData;
use crate::storage::{Db, NO_EXPIRE};

/// After a keyed command ran on its shard (only called while `super::active()`): propagates
/// the keys it found expired, then its own effect.
/// `changed`: the handler said it changed something (see `ExecCtx::unchanged`).
pub fn after_keyed(
    data: &mut ShardData,
    (txn, db): (Option<u64>, usize),
    spec: &CommandSpec,
    args: &Args,
    reply: &[u8],
    changed: bool,
) {
    drain_expired(data, txn);
    if !spec.has(flags::WRITE) || reply.first() == Some(&b'-') {
        return;
    }
    // SET's reply does not say whether it wrote (NX / XX with GET): its handler does.
    if spec.name == "set" && !changed {
        return;
    }
    let mut out = Vec::new();
    effects(spec.name, args, reply, Some(&mut data.dbs[db]), &mut out);
    for argv in out {
        propagate(txn, db, argv);
    }
}

/// After a keyless or multi-shard (coordinator) command ran at home.
/// `idx` is the command's index in the table.
pub fn after_global(txn: Option<u64>, db: usize, idx: u16, args: &Args, reply: &[u8]) {
    // A container's flags are its subcommand's (FUNCTION LOAD writes, FUNCTION LIST
    // does not).
    let t = crate::commands::table();
    let spec = &t.specs[idx as usize];
    let cmd_flags = t.stat_flags(t.stat_id(idx, args));
    let replicates = cmd_flags & (flags::WRITE | flags::MAY_REPLICATE) != 0;
    if !replicates || reply.first() == Some(&b'-') || self_propagating(spec.name) {
        return;
    }
    let mut out = Vec::new();
    effects(spec.name, args, reply, None, &mut out);
    for argv in out {
        propagate(txn, db, argv);
    }
}

/// Commands whose effects are propagated by what they run, not as themselves.
fn self_propagating(name: &str) -> bool {
    matches!(
        name,
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" | "exec" | "script"
    )
}

/// DELs (or UNLINKs, with lazyfree-lazy-expire) for the keys found expired on this
/// shard since the last call.
pub fn drain_expired(data: &mut ShardData, txn: Option<u64>) {
    if data.dbs.iter().all(|d| d.expired_log.is_empty()) {
        return;
    }
    let unlink = data.config.bool_param("lazyfree-lazy-expire") == Some(true);
    let cmd: &[u8] = if unlink { b"UNLINK" } else { b"DEL" };
    for (i, db) in data.dbs.iter_mut().enumerate() {
        for key in std::mem::take(&mut db.expired_log) {
            propagate(txn, i, vec![cmd.to_vec(), key]);
        }
    }
}

/// A parsed reply, as far as the rewrites need to look into it.
#[derive(Debug)]
enum Resp {
    Bulk(Vec<u8>),
    Nil,
    Arr(Vec<Resp>),
    Other,
}

impl Resp {
    fn bytes(&self) -> Option<&[u8]> {
        match self {
            Resp::Bulk(b) => Some(b),
            _ => None,
        }
    }

    fn items(&self) -> &[Resp] {
        match self {
            Resp::Arr(a) => a,
            _ => &[],
        }
    }
}

fn parse_line(r: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = r.windows(2).position(|w| w == b"\r\n")?;
    Some((&r[1..end], &r[end + 2..]))
}

fn parse(r: &[u8]) -> Option<(Resp, &[u8])> {
    let kind = *r.first()?;
    let (line, rest) = parse_line(r)?;
    let num = || std::str::from_utf8(line).ok()?.parse::<i64>().ok();
    match kind {
        b'$' | b'=' => {
            let n = num()?;
            if n < 0 {
                return Some((Resp::Nil, rest));
            }
            let n = n as usize;
            let body = rest.get(..n)?;
            Some((Resp::Bulk(body.to_vec()), rest.get(n + 2..)?))
        }
        b'+' => Some((Resp::Bulk(line.to_vec()), rest)),
        b'_' => Some((Resp::Nil, rest)),
        b'*' | b'~' | b'>' | b'%' => {
            let n = num()?;
            if n < 0 {
                return Some((Resp::Nil, rest));
            }
            let n = if kind == b'%' { n * 2 } else { n } as usize;
            let mut items = Vec::with_capacity(n.min(1024));
            let mut rest = rest;
            for _ in 0..n {
                let (item, r2) = parse(rest)?;
                items.push(item);
                rest = r2;
            }
            Some((Resp::Arr(items), rest))
        }
        _ => Some((Resp::Other, rest)),
    }
}

fn parsed(reply: &[u8]) -> Resp {
    parse(reply).map_or(Resp::Other, |(r, _)| r)
}

fn is_noop(reply: &[u8]) -> bool {
    matches!(
        reply,
        b"$-1\r\n" | b"*-1\r\n" | b"_\r\n" | b"*0\r\n" | b":0\r\n"
    )
}

/// Commands that changed nothing when they reply 0, nil or an empty array.
fn noop_on_empty(name: &str) -> bool {
    matches!(
        name,
        "del"
            | "unlink"
            | "expire"
            | "pexpire"
            | "expireat"
            | "pexpireat"
            | "persist"
            | "srem"
            | "hdel"
            | "zrem"
            | "zremrangebyscore"
            | "zremrangebyrank"
            | "zremrangebylex"
            | "lrem"
            | "setnx"
            | "hsetnx"
            | "msetnx"
            | "renamenx"
            | "move"
            | "copy"
            | "smove"
            | "sadd"
            | "pfadd"
            | "lpushx"
            | "rpushx"
            | "xdel"
            | "xtrim"
            | "xack"
            | "getdel"
            | "getex"
            | "lpop"
            | "rpop"
            | "spop"
            | "zpopmin"
            | "zpopmax"
            | "lmove"
            | "rpoplpush"
            | "lmpop"
            | "zmpop"
            | "blpop"
            | "brpop"
            | "blmove"
            | "brpoplpush"
            | "blmpop"
            | "bzpopmin"
            | "bzpopmax"
            | "bzmpop"
            | "xautoclaim"
            | "xclaim"
            | "xreadgroup"
    )
}

fn word(a: &[u8]) -> Vec<u8> {
    a.to_vec()
}

fn ms_arg(ms: u64) -> Vec<u8> {
    ms.to_string().into_bytes()
}

/// The key's absolute deadline after the command, if it has one.
fn deadline(db: &Option<&mut Db>, key: &[u8]) -> Option<u64> {
    let e = db.as_ref()?.peek(key)?;
    (e.expire_at() != NO_EXPIRE).then(|| e.expire_at())
}

fn key_exists(db: &Option<&mut Db>, key: &[u8]) -> bool {
    db.as_ref().is_some_and(|d| d.peek(key).is_some())
}

fn has_word(args: &Args, from: usize, words: &[&str]) -> Option<usize> {
    (from..args.len()).find(|&i| words.iter().any(|w| args.is(i, w)))
}

/// The effect(s) of a successful write, as Redis 7.0 propagates it. `db` is the
/// database after the command ran (None for commands that ran across shards).
fn effects(name: &str, args: &Args, reply: &[u8], db: Option<&mut Db>, out: &mut Vec<Argv>) {
    if noop_on_empty(name) && is_noop(reply) {
        return;
    }
    if name == "linsert" && reply == b":-1\r\n" {
        return;
    }
    let key = args.get(1);
    match name {
        "set" => {
            if args.len() > 3 && has_word(args, 3, &["ex", "px", "exat", "pxat"]).is_some() {
                if let Some(at) = deadline(&db, key) {
                    out.push(vec![
                        b"SET".to_vec(),
                        word(key),
                        word(args.get(2)),
                        b"PXAT".to_vec(),
                        ms_arg(at),
                    ]);
                    return;
                }
            }
            out.push(args.to_vecs());
        }
        "setex" | "psetex" => match deadline(&db, key) {
            Some(at) => out.push(vec![
                b"SET".to_vec(),
                word(key),
                word(args.get(3)),
                b"PXAT".to_vec(),
                ms_arg(at),
            ]),
            None => out.push(args.to_vecs()),
        },
        "expire" | "pexpire" | "expireat" | "pexpireat" => {
            match (key_exists(&db, key), deadline(&db, key)) {
                (false, _) => out.push(vec![b"DEL".to_vec(), word(key)]),
                (true, Some(at)) => out.push(vec![b"PEXPIREAT".to_vec(), word(key), ms_arg(at)]),
                (true, None) => out.push(args.to_vecs()),
            }
        }
        "getex" => {
            if has_word(args, 2, &["persist"]).is_some() {
                out.push(vec![b"PERSIST".to_vec(), word(key)]);
            } else if has_word(args, 2, &["ex", "px", "exat", "pxat"]).is_some() {
                match (key_exists(&db, key), deadline(&db, key)) {
                    (false, _) => out.push(vec![b"DEL".to_vec(), word(key)]),
                    (true, Some(at)) => {
                        out.push(vec![b"PEXPIREAT".to_vec(), word(key), ms_arg(at)])
                    }
                    (true, None) => {}
                }
            }
        }
        "getdel" => out.push(vec![b"DEL".to_vec(), word(key)]),
        "incrbyfloat" => {
            if let Some(v) = parsed(reply).bytes() {
                out.push(vec![
                    b"SET".to_vec(),
                    word(key),
                    v.to_vec(),
                    b"KEEPTTL".to_vec(),
                ]);
            }
        }
        "hincrbyfloat" => {
            if let Some(v) = parsed(reply).bytes() {
                out.push(vec![
                    b"HSET".to_vec(),
                    word(key),
                    word(args.get(2)),
                    v.to_vec(),
                ]);
            }
        }
        "spop" => {
            let r = parsed(reply);
            let mut argv = vec![b"SREM".to_vec(), word(key)];
            match &r {
                Resp::Bulk(m) => argv.push(m.clone()),
                Resp::Arr(items) => argv.extend(items.iter().filter_map(|i| i.bytes().map(word))),
                _ => {}
            }
            if argv.len() > 2 {
                out.push(argv);
            }
        }
        "blpop" | "brpop" | "bzpopmin" | "bzpopmax" => {
            let r = parsed(reply);
            if let Some(k) = r.items().first().and_then(|k| k.bytes()) {
                let cmd: &[u8] = match name {
                    "blpop" => b"LPOP",
                    "brpop" => b"RPOP",
                    "bzpopmin" => b"ZPOPMIN",
                    _ => b"ZPOPMAX",
                };
                out.push(vec![cmd.to_vec(), word(k)]);
            }
        }
        "lmpop" | "blmpop" | "zmpop" | "bzmpop" => {
            let r = parsed(reply);
            let items = r.items();
            let (Some(k), Some(popped)) = (items.first().and_then(|k| k.bytes()), items.get(1))
            else {
                return;
            };
            let n = popped.items().len();
            let cmd: &[u8] = if name.ends_with("lmpop") {
                if has_word(args, 2, &["left"]).is_some() {
                    b"LPOP"
                } else {
                    b"RPOP"
                }
            } else if has_word(args, 2, &["min"]).is_some() {
                b"ZPOPMIN"
            } else {
                b"ZPOPMAX"
            };
            out.push(vec![cmd.to_vec(), word(k), n.to_string().into_bytes()]);
        }
        "blmove" => {
            let mut argv = args.to_vecs();
            argv[0] = b"LMOVE".to_vec();
            argv.truncate(5);
            out.push(argv);
        }
        "brpoplpush" => out.push(vec![b"RPOPLPUSH".to_vec(), word(key), word(args.get(2))]),
        "restore" => {
            let mut argv = args.to_vecs();
            let absttl = has_word(args, 4, &["absttl"]).is_some();
            let ttl = crate::commands::parse_i64(args.get(2)).unwrap_or(0);
            if ttl > 0 && !absttl {
                if let Some(at) = deadline(&db, key) {
                    argv[2] = ms_arg(at);
                    argv.push(b"ABSTTL".to_vec());
                }
            }
            out.push(argv);
        }
        "xadd" => {
            let mut argv = xadd_with_id(args, reply);
            exact_trim(&mut argv, 2..xadd_id_pos(args), &db, key);
            out.push(argv);
        }
        "xtrim" => {
            let mut argv = args.to_vecs();
            exact_trim(&mut argv, 2..3, &db, key);
            out.push(argv);
        }
        "xreadgroup" => xreadgroup_claims(args, reply, out),
        "sort" => {
            if has_word(args, 2, &["store"]).is_some() {
                out.push(args.to_vecs());
            }
        }
        _ => out.push(args.to_vecs()),
    }
}

/// XADD / XTRIM with `MAXLEN ~ n` or `MINID ~ id` trimmed as far as whole nodes
/// allowed: replicas must trim to the same entry, so the approximation is
/// propagated as `= <length left>` / `= <first id left>` (Redis's
/// streamRewriteApproxSpecifier and streamRewriteTrimArgument).
/// `options`: where the trim strategy may be (XADD's field names may be anything).
fn exact_trim(argv: &mut Argv, options: std::ops::Range<usize>, db: &Option<&mut Db>, key: &[u8]) {
    let Some(i) = options.filter(|&i| i < argv.len()).find(|&i| {
        argv[i].eq_ignore_ascii_case(b"maxlen") || argv[i].eq_ignore_ascii_case(b"minid")
    }) else {
        return;
    };
    if argv.get(i + 1).map(Vec::as_slice) != Some(b"~") || i + 2 >= argv.len() {
        return;
    }
    let Some(crate::storage::Value::Stream(s)) =
        db.as_ref().and_then(|d| d.peek(key)).map(|e| e.value())
    else {
        return;
    };
    argv[i + 1] = b"=".to_vec();
    argv[i + 2] = if argv[i].eq_ignore_ascii_case(b"maxlen") {
        s.len().to_string().into_bytes()
    } else {
        s.first_valid_id().to_string().into_bytes()
    };
}

/// XADD with `*` (or a partial id) propagates the id it generated.
fn xadd_with_id(args: &Args, reply: &[u8]) -> Argv {
    let mut argv = args.to_vecs();
    let Some(id) = parsed(reply).bytes().map(word) else {
        return argv;
    };
    let i = xadd_id_pos(args);
    if i < argv.len() {
        argv[i] = id;
    }
    argv
}

/// Where XADD's ID is: after the options that follow the key.
fn xadd_id_pos(args: &Args) -> usize {
    let mut i = 2;
    while i < args.len() {
        if args.is(i, "nomkstream") {
            i += 1;
        } else if args.is(i, "maxlen") || args.is(i, "minid") {
            i += 2;
            if matches!(args.get(i - 1), b"=" | b"~") {
                i += 1;
            }
        } else if args.is(i, "limit") {
            i += 2;
        } else {
            break;
        }
    }
    i
}

/// XREADGROUP ... > delivers new entries: each becomes an XCLAIM that records it in the
/// consumer's pending list on the replica (or, with NOACK, one XGROUP SETID).
fn xreadgroup_claims(args: &Args, reply: &[u8], out: &mut Vec<Argv>) {
    let (Some(g), Some(_)) = (
        has_word(args, 1, &["group"]),
        has_word(args, 1, &["streams"]),
    ) else {
        return;
    };
    let (group, consumer) = (word(args.get(g + 1)), word(args.get(g + 2)));
    let noack = has_word(args, 1, &["noack"]).is_some();
    let now = crate::util::now_ms().to_string().into_bytes();
    let r = parsed(reply);
    let items = r.items();
    // RESP2: [key, entries] pairs; RESP3: a map, which parses flat.
    let resp2 = items
        .iter()
        .all(|i| matches!(i, Resp::Arr(a) if a.len() == 2 && matches!(a[0], Resp::Bulk(_))));
    let pairs: Vec<(&Resp, &Resp)> = if resp2 {
        items
            .iter()
            .map(|i| (&i.items()[0], &i.items()[1]))
            .collect()
    } else {
        items.chunks_exact(2).map(|c| (&c[0], &c[1])).collect()
    };
    for (key, entries) in pairs {
        let Some(key) = key.bytes() else { continue };
        let ids: Vec<&[u8]> = entries
            .items()
            .iter()
            .filter_map(|e| e.items().first().and_then(|i| i.bytes()))
            .collect();
        let Some(last) = ids.last() else { continue };
        if noack {
            // Nothing else would create the consumer on the replica (Redis's
            // streamPropagateConsumerCreation); for one that exists it is a no-op.
            out.push(vec![
                b"XGROUP".to_vec(),
                b"CREATECONSUMER".to_vec(),
                word(key),
                group.clone(),
                consumer.clone(),
            ]);
            out.push(vec![
                b"XGROUP".to_vec(),
                b"SETID".to_vec(),
                word(key),
                group.clone(),
                word(last),
            ]);
            continue;
        }
        for id in &ids {
            out.push(vec![
                b"XCLAIM".to_vec(),
                word(key),
                group.clone(),
                consumer.clone(),
                b"0".to_vec(),
                word(id),
                b"TIME".to_vec(),
                now.clone(),
                b"RETRYCOUNT".to_vec(),
                b"1".to_vec(),
                b"FORCE".to_vec(),
                b"JUSTID".to_vec(),
                b"LASTID".to_vec(),
                word(last),
            ]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nested_replies() {
        let (r, rest) = parse(b"*2\r\n$1\r\nk\r\n*2\r\n$1\r\na\r\n:3\r\n").unwrap();
        assert!(rest.is_empty());
        assert_eq!(r.items().len(), 2);
        assert_eq!(r.items()[0].bytes(), Some(&b"k"[..]));
        assert!(matches!(r.items()[1].items()[1], Resp::Other));
        assert!(matches!(parsed(b"$-1\r\n"), Resp::Nil));
    }
}
