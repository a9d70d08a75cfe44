//! DEBUG: the container of test and introspection subcommands (Redis's debug.c).
//! What it reaches into lives elsewhere; this file parses and answers.

use std::future::Future;
use std::pin::Pin;

use super::keys::reply_help;
use super::{parse_i64, GlobalCtx};
use crate::protocol::{Protocol, ReplyWriter};
use crate::storage::Value;

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// C's atoi, as debug.c reads its 0/1 switches: leading digits, else 0.
fn atoi(arg: &[u8]) -> i64 {
    let s = std::str::from_utf8(arg).unwrap_or("").trim_start();
    let (sign, digits) = match s.as_bytes().first() {
        Some(b'-') => (-1, &s[1..]),
        Some(b'+') => (1, &s[1..]),
        _ => (1, s),
    };
    let end = digits
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse::<i64>().map(|n| sign * n).unwrap_or(0)
}

pub(super) fn debug<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let sub = String::from_utf8_lossy(&g.args[1]).to_ascii_lowercase();
        match sub.as_str() {
            "sleep" if g.args.len() == 3 => {
                let secs: f64 = std::str::from_utf8(&g.args[2])
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0.0);
                // Redis blocks the whole server: every shard sleeps, at once (tests
                // use it to stop a master's keepalives, which may come from any shard).
                let secs = if secs.is_finite() { secs.clamp(0.0, 1e9) } else { 0.0 };
                let pause = std::time::Duration::from_secs_f64(secs);
                g.session
                    .cell
                    .call_all(move |_| std::thread::sleep(pause))
                    .await;
                g.w().ok()
            }
            "set-active-expire" if g.args.len() == 3 => {
                let on = g.args[2] != b"0";
                g.session
                    .cell
                    .call_all(move |c| c.data.borrow_mut().active_expire = on)
                    .await;
                g.w().ok()
            }
            // Pauses the shards' cron: client timeouts and the pick-up of a signal's
            // shutdown (active expiry is SET-ACTIVE-EXPIRE's).
            "pause-cron" if g.args.len() == 3 => {
                let on = parse_i64(&g.args[2]).unwrap_or(0) != 0;
                crate::clients::CRON_PAUSED.store(on, std::sync::atomic::Ordering::Relaxed);
                g.w().ok()
            }
            "change-repl-id" if g.args.len() == 2 => {
                tracing::warn!("Changing replication IDs after receiving DEBUG change-repl-id");
                crate::replication::change_replid();
                g.w().ok()
            }
            "quicklist-packed-threshold" if g.args.len() == 3 => {
                let set = crate::util::memtoull(&g.args[2])
                    .is_some_and(crate::storage::list::set_packed_threshold);
                if set {
                    g.w().ok()
                } else {
                    g.w().error(
                        "ERR argument must be a memory value bigger than 1 and smaller than 4gb",
                    )
                }
            }
            "set-skip-checksum-validation" if g.args.len() == 3 => {
                crate::storage::rdb::set_skip_checksum_validation(atoi(&g.args[2]) != 0);
                g.w().ok()
            }
            "set-disable-deny-scripts" if g.args.len() == 3 => {
                crate::scripting::set_deny_script_disabled(atoi(&g.args[2]) != 0);
                g.w().ok()
            }
            // The message as given, CR and LF turned into spaces: clients test their
            // error handling with it.
            "error" if g.args.len() == 3 => {
                g.out.push(b'-');
                g.out.extend(g.args[2].iter().map(|&b| match b {
                    b'\r' | b'\n' => b' ',
                    b => b,
                }));
                g.out.extend_from_slice(b"\r\n");
            }
            "leak" if g.args.len() == 3 => {
                // On purpose: leak checkers are tested with it.
                std::mem::forget(g.args[2].clone());
                g.w().ok()
            }
            "stringmatch-test" if g.args.len() == 2 => {
                stringmatch_fuzz();
                g.w().simple("Apparently Redis did not crash: test passed")
            }
            "listpack" if g.args.len() == 3 => debug_encoding_dump(g, Dump::Listpack).await,
            "quicklist" if g.args.len() == 3 || g.args.len() == 4 => {
                let full = g.args.get(3).is_some_and(|a| atoi(a) != 0);
                debug_encoding_dump(g, Dump::Quicklist { full }).await
            }
            "reload" => debug_reload(g).await,
            "clusterlink" if g.args.len() == 5 && g.args[2].eq_ignore_ascii_case(b"kill") => {
                let Some(node) = crate::cluster::node() else {
                    return g.w().error(
                        "ERR Debug option only available for cluster mode enabled setup!",
                    );
                };
                let (direction, id) = (g.args[3].clone(), g.args[4].clone());
                let mut out = g.w();
                node.with_engine(|engine| {
                    crate::cluster::command::debug_clusterlink_kill(engine, &direction, &id, &mut out)
                });
            }
            "loadaof" => {
                let cell = g.session.cell.clone();
                match crate::persistence::aof_load::debug_loadaof(&cell).await {
                    Ok(()) => g.w().ok(),
                    Err(e) => g.w().error(&format!("ERR {e}")),
                }
            }
            "aof-flush-sleep" if g.args.len() == 3 => {
                let us = parse_i64(&g.args[2]).unwrap_or(0).max(0) as u64;
                crate::persistence::aof::set_flush_sleep(us);
                g.w().ok()
            }
            "replicate" if g.args.len() >= 3 => {
                let args: Vec<&[u8]> = g.args[2..].iter().map(|a| a.as_slice()).collect();
                crate::effects::replicate_command(&args);
                g.w().ok()
            }
            // Redis's tests mark their place in a server's log with it.
            "log" if g.args.len() == 3 => {
                tracing::warn!("DEBUG LOG: {}", String::from_utf8_lossy(&g.args[2]));
                g.w().ok()
            }
            "populate" if (3..=5).contains(&g.args.len()) => debug_populate(g).await,
            "digest" if g.args.len() == 2 => super::digest::debug_digest(g).await,
            "digest-value" => super::digest::debug_digest_value(g).await,
            "protocol" if g.args.len() == 3 => {
                let kind = String::from_utf8_lossy(&g.args[2]).to_ascii_lowercase();
                debug_protocol(&mut g.w(), &kind)
            }
            "config-rewrite-force-all" if g.args.len() == 2 => {
                let result = g.session.cell.data.borrow().config.rewrite_all(&crate::acl::user_lines());
                match result {
                    Ok(()) => g.w().ok(),
                    Err(e) => g
                        .w()
                        .error(&format!("ERR CONFIG-REWRITE-FORCE-ALL failed: {e}")),
                }
            }
            // Crash on purpose, as Redis's DEBUG SEGFAULT / PANIC do, to test what
            // supervisors and the crash report do.
            "segfault" if g.args.len() == 2 => {
                // SAFETY: raising a signal in this process; its handler logs and ends it.
                unsafe {
                    libc::raise(libc::SIGSEGV);
                }
                g.w().ok()
            }
            "panic" if g.args.len() == 2 => {
                panic!(
                    "DEBUG PANIC called at Unix time {}",
                    crate::util::now_ms() / 1000
                )
            }
            "object" if g.args.len() == 3 => debug_object(g).await,
            "help" => reply_help(
                &mut g.w(),
                &[
                    "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "AOF-FLUSH-SLEEP <microsec>",
                    "    Server will sleep before flushing the AOF, this is used for testing.",
                    "CHANGE-REPL-ID",
                    "    Change the replication IDs of the instance.",
                    "    Dangerous: should be used only for testing the replication subsystem.",
                    "CONFIG-REWRITE-FORCE-ALL",
                    "    Like CONFIG REWRITE but writes all configuration options, including",
                    "    keywords not listed in original configuration file or default values.",
                    "DIGEST",
                    "    Output a hex signature representing the current DB content.",
                    "DIGEST-VALUE <key> [<key> ...]",
                    "    Output a hex signature of the values of all the specified keys.",
                    "ERROR <string>",
                    "    Return a Redis protocol error with <string> as message. Useful for clients",
                    "    unit tests to simulate Redis errors.",
                    "LEAK <string>",
                    "    Create a memory leak of the input string.",
                    "LOG <message>",
                    "    Write <message> to the server log.",
                    "LOADAOF",
                    "    Flush the AOF buffers on disk and reload the AOF in memory.",
                    "REPLICATE <string>",
                    "    Replicates the provided string to replicas, allowing data divergence.",
                    "OBJECT <key>",
                    "    Show low level info about `key` and associated value.",
                    "PANIC",
                    "    Crash the server simulating a panic.",
                    "POPULATE <count> [<prefix>] [<size>]",
                    "    Create <count> string keys named key:<num>. If <prefix> is specified then",
                    "    it is used instead of the 'key' prefix. These are not propagated to",
                    "    replicas. Cluster slots are not respected so keys not belonging to the",
                    "    current node can be created in cluster mode.",
                    "PROTOCOL <type>",
                    "    Reply with a test value of the specified type. <type> can be: string,",
                    "    integer, double, bignum, null, array, set, map, attrib, push, verbatim,",
                    "    true, false.",
                    "RELOAD [option ...]",
                    "    Save the RDB on disk and reload it back to memory. Valid <option> values:",
                    "    * MERGE: conflicting keys will be loaded from RDB.",
                    "    * NOFLUSH: the existing database will not be removed before load, but",
                    "      conflicting keys will generate an exception and kill the server.",
                    "    * NOSAVE: the database will be loaded from an existing RDB file.",
                    "    Examples:",
                    "    * DEBUG RELOAD: verify that the server is able to persist, flush and reload",
                    "      the database.",
                    "    * DEBUG RELOAD NOSAVE: replace the current database with the contents of an",
                    "      existing RDB file.",
                    "    * DEBUG RELOAD NOSAVE NOFLUSH MERGE: add the contents of an existing RDB",
                    "      file to the database.",
                    "SEGFAULT",
                    "    Crash the server with sigsegv.",
                    "SET-ACTIVE-EXPIRE <0|1>",
                    "    Setting it to 0 disables expiring keys in background when they are not",
                    "    accessed (otherwise the Redis behavior). Setting it to 1 reenables back the",
                    "    default.",
                    "QUICKLIST-PACKED-THRESHOLD <size>",
                    "    Sets the threshold for elements to be inserted as plain vs packed nodes",
                    "    Default value is 1GB, allows values up to 4GB. Setting to 0 restores to default.",
                    "SET-SKIP-CHECKSUM-VALIDATION <0|1>",
                    "    Enables or disables checksum checks for RDB files and RESTORE's payload.",
                    "SET-DISABLE-DENY-SCRIPTS <0|1>",
                    "    Allow or deny running commands marked no-script from scripts.",
                    "SLEEP <seconds>",
                    "    Stop the server for <seconds>. Decimals allowed.",
                    "STRINGMATCH-TEST",
                    "    Run a fuzz tester against the stringmatchlen() function.",
                    "LISTPACK <key>",
                    "    Show low level info about the listpack encoding of <key>.",
                    "QUICKLIST <key> [<0|1>]",
                    "    Show low level info about the quicklist encoding of <key>.",
                    "    The optional argument (0 by default) sets the level of detail",
                    "PAUSE-CRON <0|1>",
                    "    Stop periodic cron job processing.",
                    "CLUSTERLINK KILL <to|from|all> <node-id>",
                    "    Kills the link based on the direction to/from (both) with the provided node.",
                ],
            ),
            _ => g.subcommand_syntax_error("DEBUG"),
        }
    })
}

/// DEBUG POPULATE count [prefix] [size]: `prefix:N` = `value:N` (padded with zero
/// bytes, or cut, to `size`) for N below `count`, skipping keys that exist, as Redis's
/// debug.c does. Every shard runs the whole count and creates the keys of its slots.
async fn debug_populate(g: &mut GlobalCtx<'_>) {
    let positive = |arg: &[u8]| match super::parse_i64(arg) {
        Some(n) if n >= 0 => Ok(n as u64),
        Some(_) => Err("ERR value is out of range, must be positive"),
        None => Err("ERR value is not an integer or out of range"),
    };
    let count = match positive(&g.args[2]) {
        Ok(n) => n,
        Err(e) => return g.w().error(e),
    };
    let size = match g.args.get(4).map(|a| positive(a)).transpose() {
        Ok(size) => size.unwrap_or(0) as usize,
        Err(e) => return g.w().error(e),
    };
    let prefix = g.args.get(3).cloned().unwrap_or_else(|| b"key".to_vec());
    let db = g.session.db;
    g.session
        .cell
        .call_all(move |c| {
            let mut data = c.data.borrow_mut();
            populate_shard(&mut data, db, count, &prefix, size);
        })
        .await;
    g.w().ok()
}

fn populate_shard(
    data: &mut crate::shard::ShardData,
    db: usize,
    count: u64,
    prefix: &[u8],
    size: usize,
) {
    let (now, lru) = (crate::util::now_ms(), crate::util::lru_clock());
    let mut key = Vec::with_capacity(prefix.len() + 21);
    for n in 0..count {
        key.clear();
        key.extend_from_slice(prefix);
        key.push(b':');
        key.extend_from_slice(n.to_string().as_bytes());
        if !data.dbs[db].holds_slot_of(&key) || data.dbs[db].get(&key, now).is_some() {
            continue;
        }
        let mut value = format!("value:{n}").into_bytes();
        if size > 0 {
            value.resize(size, 0);
        }
        let value = crate::storage::Value::Str(crate::storage::StrValue::from_vec(value));
        data.dbs[db].insert(&key, value, crate::storage::NO_EXPIRE, lru);
        if !data.write_hooks_idle() {
            data.tracking.writer = 0;
            data.signal_modified(db, &key);
        }
    }
}

/// DEBUG RELOAD [MERGE] [NOFLUSH] [NOSAVE] (`persistence::load::reload`).
async fn debug_reload(g: &mut GlobalCtx<'_>) {
    let (mut save, mut flush, mut merge) = (true, true, false);
    for i in 2..g.args.len() {
        if g.is(i, "merge") {
            merge = true;
        } else if g.is(i, "noflush") {
            flush = false;
        } else if g.is(i, "nosave") {
            save = false;
        } else {
            return g
                .w()
                .error("ERR DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options.");
        }
    }
    let cell = g.session.cell.clone();
    match crate::persistence::load::reload(&cell, save, flush, merge).await {
        Ok(()) => g.w().ok(),
        Err(e) => g.w().error(e),
    }
}

/// DEBUG PROTOCOL: one sample reply of each RESP type, as Redis's debug.c sends them
/// (clients test their RESP3 parsers with it); RESP2 gets each type's fallback.
fn debug_protocol(w: &mut ReplyWriter<'_>, kind: &str) {
    let resp3 = w.proto == Protocol::Resp3;
    match kind {
        "string" => w.bulk(b"Hello World"),
        "integer" => w.integer(12345),
        // Redis's literal sample value, not an approximation of pi.
        #[allow(clippy::approx_constant)]
        "double" => w.double(3.141),
        "bignum" => w.big_number("1234567999999999999999999999999999999"),
        "null" => w.null(),
        "array" | "set" | "map" => {
            match kind {
                "array" => w.array_len(3),
                "set" => w.set_len(3),
                _ => w.map_len(3),
            }
            for j in 0..3 {
                w.integer(j);
                if kind == "map" {
                    w.boolean(j == 1);
                }
            }
        }
        "attrib" => {
            if resp3 {
                w.attribute_len(1);
                w.bulk(b"key-popularity");
                w.array_len(2);
                w.bulk(b"key:123");
                w.integer(90);
            }
            // Attributes are not replies: a real one follows.
            w.bulk(b"Some real reply following the attribute");
        }
        "push" if !resp3 => w.error("ERR RESP2 is not supported by this command"),
        "push" => {
            w.push_len(2);
            w.bulk(b"server-cpu-usage");
            w.integer(42);
            // A push is not the command's reply: one follows.
            w.bulk(b"Some real reply following the push reply");
        }
        "verbatim" => w.verbatim("txt", b"This is a verbatim\nstring"),
        "true" => w.boolean(true),
        "false" => w.boolean(false),
        _ => w.error(
            "ERR Wrong protocol type name. Please use one of the following: string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false",
        ),
    }
}

/// Runs `f` on the shard that owns the key DEBUG names (its third argument), with
/// that key's entry if it exists (expired or not: DEBUG looks, it does not expire).
async fn on_key_shard<R, F>(g: &mut GlobalCtx<'_>, f: F) -> R
where
    R: Send + 'static,
    F: FnOnce(Option<&crate::storage::Entry>) -> R + Send + 'static,
{
    let key = g.args[2].clone();
    let db = g.session.db;
    let cell = g.session.cell.clone();
    let shard = cell.shard_of(&key);
    cell.call(shard, move |c| f(c.data.borrow().dbs[db].peek(&key)))
        .await
}

/// DEBUG OBJECT's line, as debug.c prints it; a list adds its quicklist's shape.
async fn debug_object(g: &mut GlobalCtx<'_>) {
    let line = on_key_shard(g, |entry| {
            entry.map(|e| {
                let mut payload = Vec::new();
                crate::storage::rdb::dump_value(e.value(), &mut payload);
                let mut line = format!(
                    "Value at:0x0 refcount:1 encoding:{} serializedlength:{} lru:{} lru_seconds_idle:{}",
                    e.value().encoding(),
                    payload.len(),
                    e.lru() & 0xFF_FFFF,
                    crate::util::lru_clock().saturating_sub(e.lru())
                );
                if let Value::List(l) = e.value() {
                    let nodes = l.node_count().max(1);
                    let bytes: usize = l.node_summaries().map(|n| n.bytes).sum();
                    line.push_str(&format!(
                        " ql_nodes:{} ql_avg_node:{:.2} ql_listpack_max:{} ql_compressed:{} ql_uncompressed_size:{}",
                        l.node_count(),
                        l.len() as f64 / nodes as f64,
                        l.fill(),
                        u8::from(l.compress_depth() != 0),
                        bytes
                    ));
                }
                line
            })
        })
        .await;
    match line {
        Some(l) => g.w().simple(&l),
        None => g.w().error("ERR no such key"),
    }
}

#[derive(Clone, Copy)]
enum Dump {
    Listpack,
    Quicklist { full: bool },
}

/// DEBUG LISTPACK / QUICKLIST: the layout of a key's compact encoding, printed on
/// the server's stdout as Redis prints it (the reply only says it was printed).
async fn debug_encoding_dump(g: &mut GlobalCtx<'_>, kind: Dump) {
    let printed = on_key_shard(g, move |entry| {
        let e = entry.ok_or("ERR no such key")?;
        let text = match (kind, e.value()) {
            (Dump::Quicklist { full }, Value::List(l)) => quicklist_repr(l, full),
            (Dump::Quicklist { .. }, _) => return Err("ERR Not a quicklist encoded object."),
            (Dump::Listpack, v) if v.encoding() == "listpack" => listpack_repr(v),
            (Dump::Listpack, _) => return Err("ERR Not a listpack encoded object."),
        };
        Ok(text)
    })
    .await;
    match (printed, kind) {
        (Ok(text), kind) => {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            // stdout may be closed under a supervisor; the reply does not depend on it.
            let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
            g.w().simple(match kind {
                Dump::Listpack => "Listpack structure printed on stdout",
                Dump::Quicklist { .. } => "Quicklist structure printed on stdout",
            })
        }
        (Err(e), _) => g.w().error(e),
    }
}

fn quicklist_repr(l: &crate::storage::list::ListValue, full: bool) -> String {
    let mut s = format!(
        "{{count : {}}}\n{{len : {}}}\n{{fill : {}}}\n{{compress : {}}}\n{{bookmark_count : 0}}\n",
        l.len(),
        l.node_count(),
        l.fill(),
        l.compress_depth()
    );
    let mut items = l.iter();
    for (i, node) in l.node_summaries().enumerate() {
        s.push_str(&format!(
            "{{quicklist node({i})\n{{container : {}, encoding: {}, size: {}, count: {}, recompress: 0, attempted_compress: 0}}\n",
            if node.plain { "PLAIN" } else { "PACKED" },
            if node.compressed_bytes.is_some() { "LZF" } else { "RAW" },
            node.bytes,
            node.count,
        ));
        for _ in 0..node.count {
            let item = items.next().unwrap_or_default();
            if full {
                s.push_str(&format!("{{entry : {}}}\n", String::from_utf8_lossy(&item)));
            }
        }
        s.push_str("}\n");
    }
    s
}

/// A listpack-encoded hash or sorted set, entry by entry as it is laid out (field
/// then value, member then score).
fn listpack_repr(v: &Value) -> String {
    let mut entries: Vec<Vec<u8>> = Vec::new();
    match v {
        Value::Hash(h) => {
            for (f, val) in h.iter() {
                entries.push(f.to_vec());
                entries.push(val.to_vec());
            }
        }
        Value::ZSet(z) => {
            for (m, score) in z.iter() {
                entries.push(m.to_vec());
                let mut text = Vec::new();
                crate::protocol::reply::format_double_g17(score, &mut text);
                entries.push(text);
            }
        }
        _ => {}
    }
    let mut s = format!("{{total entries {}}}\n", entries.len());
    for (i, e) in entries.iter().enumerate() {
        s.push_str(&format!(
            "{{\n\tindex: {i:>3},\n\tentry len: {},\n\tstring: {}\n}}\n",
            e.len(),
            String::from_utf8_lossy(e)
        ));
    }
    s.push_str("{end}\n\n");
    s
}

/// debug.c's stringmatchlen_fuzz_test: random patterns against random strings (up
/// to 31 bytes of 7-bit characters each), only to show the matcher neither crashes
/// nor hangs on any input. Prints the number of matches, as Redis does.
fn stringmatch_fuzz() {
    let mut x: u64 = crate::util::now_ms() | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut pattern, mut string) = (Vec::with_capacity(32), Vec::with_capacity(32));
    let mut matches = 0u64;
    for _ in 0..10_000_000 {
        let (slen, plen) = ((next() % 32) as usize, (next() % 32) as usize);
        string.clear();
        string.extend((0..slen).map(|_| (next() % 128) as u8));
        pattern.clear();
        pattern.extend((0..plen).map(|_| (next() % 128) as u8));
        matches += crate::util::glob::glob_match(&pattern, &string, false) as u64;
    }
    println!("Total matches: {matches}");
}
