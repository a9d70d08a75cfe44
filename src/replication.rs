//! Replication, master side: the replica links (SYNC / PSYNC) and the propagation of
//! writes to them (Redis's replication.c and the `propagate` rules of server.c).
//!
//! Every shard executes writes on its own thread, so the stream has to be merged into
//! one ordered sequence: each effect is appended, under one process-wide mutex, to the
//! output buffer of every attached link right after it executed on its shard (still on
//! that shard's thread, so two writes to one key keep their order). MULTI/EXEC and
//! scripts, which hold every shard, first collect their effects in a *capture* keyed by
//! their transaction id and append them as one MULTI ... EXEC block when they end.
//!
//! With no link attached all of this costs one relaxed atomic load per command.
//!
//! Effects are what Redis 7.0 propagates, not always the command as sent: relative
//! TTLs become absolute (SET ... PXAT, PEXPIREAT), pops with a random or computed
//! outcome become the deterministic command (SPOP → SREM, INCRBYFLOAT → SET KEEPTTL,
//! BLPOP → LPOP ...), and writes that changed nothing are not propagated.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::task::{Poll, Waker};

use crate::commands::table::flags;
use crate::commands::{Args, CommandSpec};
use crate::shard::ShardData;
use crate::storage::{rdb, Db, NO_EXPIRE};

/// Attached replica links; zero keeps propagation off every hot path. Storage's
/// listener count: it logs expired and evicted keys for their DELs while non-zero.
static LINKS: &crate::storage::events::Listeners = &crate::storage::events::REPLICA_LINKS;

/// REPLICAOF host port is in force (this server is a replica whose link is down).
static IS_REPLICA: AtomicBool = AtomicBool::new(false);

/// Whether any replica link is attached (checked once per command).
#[inline]
pub fn active() -> bool {
    LINKS.any()
}

/// Whether REPLICAOF made this server a replica.
#[inline]
pub fn is_replica() -> bool {
    IS_REPLICA.load(Ordering::Relaxed)
}

pub fn set_replica(on: bool) {
    IS_REPLICA.store(on, Ordering::Relaxed);
}

/// The master REPLICAOF (or the config file's `replicaof`) named, while one is
/// set. It lives here, below the commands, because the config (CONFIG GET and
/// CONFIG REWRITE of `replicaof`) and the server read it as well as REPLICAOF.
static MASTER: Mutex<Option<(String, u16)>> = Mutex::new(None);

/// The master REPLICAOF set, if any (for ROLE, INFO replication and the config).
pub fn master() -> Option<(String, u16)> {
    master_slot().clone()
}

/// The master, locked, for REPLICAOF's compare-and-change.
pub fn master_slot() -> std::sync::MutexGuard<'static, Option<(String, u16)>> {
    MASTER.lock().unwrap_or_else(|e| e.into_inner())
}

/// The error a command with these traits gets under the replication settings.
pub fn check(config: &crate::config::Config, write: bool, stale_ok: bool) -> Option<&'static str> {
    let replica = is_replica();
    if write && !replica {
        let min = config.min_replicas_to_write();
        // Links never report a lag (no REPLCONF ACK handling), so none counts as good.
        if min > 0 && config.min_replicas_max_lag() > 0 {
            return Some("NOREPLICAS Not enough good replicas to write.");
        }
    }
    if write && replica && config.replica_read_only() {
        return Some("READONLY You can't write against a read only replica.");
    }
    if replica && !stale_ok && !config.replica_serve_stale_data() {
        return Some(
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        );
    }
    None
}

pub type Argv = Vec<Vec<u8>>;

/// Who a replica link is, for INFO replication's `slaveN:` line.
#[derive(Clone, Debug)]
pub struct ReplicaPeer {
    /// The replica's address (or the one it announced with REPLCONF ip-address).
    pub ip: String,
    /// What it announced with REPLCONF listening-port (0: nothing).
    pub port: u16,
}

struct Link {
    id: u64,
    peer: ReplicaPeer,
    /// The offset the replica last acknowledged (REPLCONF ACK) and when (unix ms);
    /// the time starts as the link's.
    ack_offset: u64,
    ack_ms: u64,
    out: Vec<u8>,
    waker: Option<Waker>,
}

struct Capture {
    txn: u64,
    cmds: Vec<(usize, Argv)>,
}

struct State {
    links: Vec<Link>,
    captures: Vec<Capture>,
    next_id: u64,
    /// master_repl_offset: bytes of stream produced so far, SELECTs and PINGs
    /// included (what a replica counts in its own offset).
    offset: u64,
    /// The database the stream last selected (Redis's slaveseldb); None after a
    /// replica attached, whose stream must begin with a SELECT.
    selected: Option<usize>,
    /// When the stream last carried a keep-alive PING (unix ms).
    last_ping_ms: u64,
}

static STATE: Mutex<State> = Mutex::new(State {
    links: Vec::new(),
    captures: Vec::new(),
    next_id: 1,
    offset: 0,
    selected: None,
    last_ping_ms: 0,
});

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The replication id this process reports (fixed per process, 40 hex chars).
pub fn replid() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let seed = crate::util::now_ms() ^ ((std::process::id() as u64) << 32);
        let mut x = seed | 1;
        let mut s = String::with_capacity(40);
        while s.len() < 40 {
            // xorshift: only needs to look random, never to be secure.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.push_str(&format!("{:016x}", x));
        }
        s.truncate(40);
        s
    })
}

pub fn offset() -> u64 {
    state().offset
}

pub fn link_count() -> usize {
    LINKS.count()
}

/// Registers a replica link; its stream starts with the next propagated write.
pub fn attach(peer: ReplicaPeer) -> u64 {
    let mut st = state();
    let id = st.next_id;
    st.next_id += 1;
    st.links.push(Link {
        id,
        peer,
        ack_offset: 0,
        ack_ms: crate::util::now_ms(),
        out: Vec::new(),
        waker: None,
    });
    // Every link reads one stream: the new one's starts with a SELECT, so the next
    // write selects again for all (Redis resets slaveseldb on a full resync).
    st.selected = None;
    LINKS.join();
    id
}

pub fn detach(id: u64) {
    let mut st = state();
    let before = st.links.len();
    st.links.retain(|l| l.id != id);
    if st.links.len() < before {
        LINKS.leave();
    }
}

/// REPLCONF ACK on a link: the replica has processed the stream up to `offset`.
pub fn ack(id: u64, offset: u64) {
    let mut st = state();
    if let Some(l) = st.links.iter_mut().find(|l| l.id == id) {
        l.ack_offset = offset;
        l.ack_ms = crate::util::now_ms();
    }
}

/// INFO replication's `slaveN:ip=...,port=...,state=online,offset=...,lag=...` lines,
/// in attach order. A link is online from its attach: the snapshot it starts with
/// is already queued to it.
pub fn info_lines(out: &mut String) {
    use std::fmt::Write;
    let now = crate::util::now_ms();
    let st = state();
    for (i, l) in st.links.iter().enumerate() {
        let _ = write!(
            out,
            "slave{i}:ip={},port={},state=online,offset={},lag={}\r\n",
            l.peer.ip,
            l.peer.port,
            l.ack_offset,
            now.saturating_sub(l.ack_ms) / 1000
        );
    }
}

/// Bytes of stream queued for the link and not yet taken by its connection (part of
/// the replica client's output, for `client-output-buffer-limit replica`).
pub fn link_pending(id: u64) -> usize {
    let st = state();
    st.links
        .iter()
        .find(|l| l.id == id)
        .map_or(0, |l| l.out.len())
}

/// The link's pending stream bytes, or Pending (waking `waker` when there are some);
/// None once the link is gone.
pub fn poll_output(id: u64, waker: &Waker) -> Poll<Option<Vec<u8>>> {
    let mut st = state();
    let Some(l) = st.links.iter_mut().find(|l| l.id == id) else {
        return Poll::Ready(None);
    };
    if l.out.is_empty() {
        l.waker = Some(waker.clone());
        Poll::Pending
    } else {
        Poll::Ready(Some(std::mem::take(&mut l.out)))
    }
}

/// The master's keep-alive PING, into the stream every link reads (each link's task
/// asks every repl-ping-replica-period): one per half period at most however many
/// links ask, and never skipped for a link whose timer runs a little early.
pub fn ping_links(period_ms: u64) {
    let mut st = state();
    let now = crate::util::now_ms();
    if now.saturating_sub(st.last_ping_ms) < period_ms / 2 {
        return;
    }
    st.last_ping_ms = now;
    append(&mut st, b"*1\r\n$4\r\nPING\r\n");
}

/// Appends bytes of the stream to every link and counts them in the offset.
fn append(st: &mut State, bytes: &[u8]) {
    st.offset += bytes.len() as u64;
    for l in &mut st.links {
        l.out.extend_from_slice(bytes);
        if let Some(w) = l.waker.take() {
            w.wake();
        }
    }
}

/// One shard's live keys as RDB records, per database index.
pub fn shard_records(data: &ShardData, now: u64) -> Vec<Vec<u8>> {
    data.dbs
        .iter()
        .map(|db| {
            let mut out = Vec::new();
            if db.is_empty() {
                return out;
            }
            for idx in 0..db.slot_count() {
                db.for_each_in_slot(idx, now, |e| {
                    rdb::file::write_record(&mut out, e.key(), e.value(), e.expire_at());
                });
            }
            out
        })
        .collect()
}

/// A consistent RDB snapshot of every shard (all locked while it is taken); with
/// `attach`, a replica link registered at that same point, so its stream carries
/// exactly the writes after the snapshot.
/// When the last successful SAVE finished (unix seconds; 0: none yet, so the server's
/// start counts, as Redis's lastsave starts there) and how many there were.
pub static LAST_SAVE_UNIX: AtomicU64 = AtomicU64::new(0);
pub static SAVES: AtomicU64 = AtomicU64::new(0);

/// LASTSAVE's and INFO's rdb_last_save_time: the last SAVE, or the server's start.
pub fn last_save_unix(started_unix_ms: u64) -> u64 {
    match LAST_SAVE_UNIX.load(Ordering::Relaxed) {
        0 => started_unix_ms / 1000,
        t => t,
    }
}

/// The dataset as one RDB file, taken under every shard's lock, plus each shard's
/// change counter at that moment (what a SAVE of it makes clean).
pub async fn snapshot(
    cell: &std::rc::Rc<crate::shard::ShardCell>,
    attach_link: Option<ReplicaPeer>,
) -> (Vec<u8>, Option<u64>, Vec<u64>) {
    let owner = crate::shard::locks::LockOwner {
        id: cell.next_txn_id(),
        write: false,
        client: 0,
    };
    let op = crate::shard::multi::MultiShardOp::lock_all(owner, cell).await;
    let parts = op
        .on_each(cell, |d| (shard_records(d, crate::util::now_ms()), d.dirty))
        .await;
    let id = attach_link.map(attach);
    op.release(cell).await;
    let (parts, dirty): (Vec<_>, Vec<u64>) = parts.into_iter().unzip();
    let (_, libraries) = crate::scripting::functions::snapshot();
    let codes: Vec<&[u8]> = libraries.iter().map(|l| l.code.as_slice()).collect();
    (rdb::file::assemble(&parts, &codes), id, dirty)
}

fn encode(out: &mut Vec<u8>, argv: &[Vec<u8>]) {
    out.extend_from_slice(format!("*{}\r\n", argv.len()).as_bytes());
    for a in argv {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn emit(st: &mut State, db: usize, argv: &[Vec<u8>]) {
    let mut bytes = Vec::with_capacity(64);
    if st.selected != Some(db) {
        encode(
            &mut bytes,
            &[b"SELECT".to_vec(), db.to_string().into_bytes()],
        );
        st.selected = Some(db);
    }
    encode(&mut bytes, argv);
    append(st, &bytes);
}

/// A transaction's effects: one alone goes out as is, several inside MULTI/EXEC
/// (Redis 7.0's propagatePendingCommands).
fn emit_block(st: &mut State, cmds: &[(usize, Argv)]) {
    match cmds {
        [] => {}
        [(db, argv)] => emit(st, *db, argv),
        [(first, _), ..] => {
            emit(st, *first, &[b"MULTI".to_vec()]);
            let mut last = *first;
            for (db, argv) in cmds {
                emit(st, *db, argv);
                last = *db;
            }
            emit(st, last, &[b"EXEC".to_vec()]);
        }
    }
}

/// Sends one effect to the replicas, or into `txn`'s capture when it has one.
pub fn propagate(txn: Option<u64>, db: usize, argv: Argv) {
    let mut st = state();
    if let Some(t) = txn {
        if let Some(c) = st.captures.iter_mut().find(|c| c.txn == t) {
            c.cmds.push((db, argv));
            return;
        }
    }
    emit(&mut st, db, &argv);
}

/// Starts collecting the effects of transaction `txn` (EXEC, a script). False when
/// no replica is attached or `txn` already collects (a script inside EXEC): then the
/// caller must not end it.
pub fn begin_capture(txn: u64) -> bool {
    if !active() {
        return false;
    }
    let mut st = state();
    if st.captures.iter().any(|c| c.txn == txn) {
        return false;
    }
    st.captures.push(Capture {
        txn,
        cmds: Vec::new(),
    });
    true
}

/// Ends a capture, sending its effects as one block (dropped when the transaction
/// turned this server into a replica, as Redis does).
pub fn end_capture(txn: u64) {
    let mut st = state();
    let Some(pos) = st.captures.iter().position(|c| c.txn == txn) else {
        return;
    };
    let cap = st.captures.swap_remove(pos);
    if !is_replica() {
        emit_block(&mut st, &cap.cmds);
    }
}

/// After a keyed command ran on its shard (only called while `active()`): propagates
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
pub fn after_global(txn: Option<u64>, db: usize, spec: &CommandSpec, args: &Args, reply: &[u8]) {
    // A container's flags are its subcommand's (FUNCTION LOAD writes, FUNCTION LIST
    // does not).
    let t = crate::commands::table();
    let cmd_flags = crate::commands::lookup(spec.name.as_bytes())
        .map_or(spec.flags, |(idx, _)| t.stat_flags(t.stat_id(idx, args)));
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
