//! Scripting commands (Redis's eval.c, function.c, script.c): EVAL, EVALSHA, EVAL_RO,
//! EVALSHA_RO, FCALL, FCALL_RO, SCRIPT and FUNCTION.
//!
//! A script runs atomically across shards: the home task takes every shard's lock
//! (MultiShardOp::lock_all, as EXEC does) and runs the script on the shard's Lua VM
//! (src/scripting), serving its `redis.call`s synchronously: each command runs like a
//! command of a fake client inside EXEC — keyed commands on the shard owning their
//! keys, split or coordinated when they span shards — and its RESP reply goes back to
//! the script.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use super::keys::reply_help;
use super::strings::cmd;
use super::table::{flags::*, CommandSpec, KeySpec, Kind};
use super::{ClientCtx, Cross, GlobalCtx, KeyedFn, OwnedArgs};
use crate::clients::{ClientShared, ReplyMode, Session};
use crate::protocol::reply::{Protocol, ReplyWriter};
use crate::scripting::functions::{self, Policy};
use crate::scripting::vm::{self, Job, RunJob, Target};
use crate::scripting::{self, flags as script_flags, Running};
use crate::shard::exec::{execute, Call, Wake};
use crate::shard::locks::LockOwner;
use crate::shard::multi::MultiShardOp;
use crate::shard::ShardCell;

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

const NUMKEYS: KeySpec = KeySpec::Keynum {
    dest: 0,
    keynum_at: 2,
};

macro_rules! scmd {
    ($name:expr, $arity:expr, $flags:expr, $keys:expr, $f:expr, $since:expr, $summary:expr) => {
        CommandSpec {
            group: "scripting",
            acl: &["@scripting"],
            ..cmd!(
                $name,
                $arity,
                $flags,
                $keys,
                Kind::Global($f),
                $since,
                $summary
            )
        }
    };
}

#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    scmd!("eval", -3, NOSCRIPT | SKIP_MONITOR | MAY_REPLICATE | NO_MANDATORY_KEYS | STALE | MOVABLE_KEYS, NUMKEYS, eval, "2.6.0", "Execute a Lua script server side"),
    scmd!("evalsha", -3, NOSCRIPT | SKIP_MONITOR | MAY_REPLICATE | NO_MANDATORY_KEYS | STALE | MOVABLE_KEYS, NUMKEYS, evalsha, "2.6.0", "Execute a Lua script server side"),
    scmd!("eval_ro", -3, NOSCRIPT | SKIP_MONITOR | NO_MANDATORY_KEYS | STALE | READONLY | MOVABLE_KEYS, NUMKEYS, eval_ro, "7.0.0", "Execute a read-only Lua script server side"),
    scmd!("evalsha_ro", -3, NOSCRIPT | SKIP_MONITOR | NO_MANDATORY_KEYS | STALE | READONLY | MOVABLE_KEYS, NUMKEYS, evalsha_ro, "7.0.0", "Execute a read-only Lua script server side"),
    scmd!("fcall", -3, NOSCRIPT | SKIP_MONITOR | MAY_REPLICATE | NO_MANDATORY_KEYS | STALE | MOVABLE_KEYS, NUMKEYS, fcall, "7.0.0", "Invoke a function"),
    scmd!("fcall_ro", -3, NOSCRIPT | SKIP_MONITOR | NO_MANDATORY_KEYS | STALE | READONLY | MOVABLE_KEYS, NUMKEYS, fcall_ro, "7.0.0", "Invoke a read-only function"),
    CommandSpec { acl: &[], ..scmd!("script", -2, NOSCRIPT | ALLOW_BUSY, KeySpec::None, script, "2.6.0", "A container for Lua scripts management commands") },
    CommandSpec { acl: &[], ..scmd!("function", -2, NOSCRIPT | ALLOW_BUSY, KeySpec::None, function, "7.0.0", "A container for function commands") },
];

fn eval<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(run_eval(g, false, false))
}

fn evalsha<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(run_eval(g, true, false))
}

fn eval_ro<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(run_eval(g, false, true))
}

fn evalsha_ro<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(run_eval(g, true, true))
}

fn fcall<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(run_fcall(g, false))
}

fn fcall_ro<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(run_fcall(g, true))
}

/// KEYS and ARGV of `<cmd> <script|sha|name> numkeys key... arg...`.
/// A script's KEYS and ARGV.
type KeysArgs = (Vec<Vec<u8>>, Vec<Vec<u8>>);

fn split_keys(g: &GlobalCtx<'_>, bad_count: &str) -> Result<KeysArgs, String> {
    let Some(n) = super::parse_i64(g.arg(2)) else {
        return Err(bad_count.to_string());
    };
    let avail = g.args.len() as i64 - 3;
    if n > avail {
        return Err("ERR Number of keys can't be greater than number of args".into());
    }
    if n < 0 {
        return Err("ERR Number of keys can't be negative".into());
    }
    let split = 3 + n as usize;
    Ok((g.args[3..split].to_vec(), g.args[split..].to_vec()))
}

async fn run_eval(g: &mut GlobalCtx<'_>, by_sha: bool, ro: bool) {
    let (keys, args) = match split_keys(g, super::NOT_INT) {
        Ok(ka) => ka,
        Err(e) => return g.error(&e),
    };
    let target = if by_sha {
        let sha = String::from_utf8_lossy(g.arg(1)).to_ascii_lowercase();
        if sha.len() != 40 {
            return g.error("NOSCRIPT No matching script. Please use EVAL.");
        }
        Target::Eval { sha, body: None }
    } else {
        let body = g.args[1].clone();
        Target::Eval {
            sha: scripting::sha1::sha1_hex(&body),
            body: Some(body),
        }
    };
    let name = match &target {
        Target::Eval { sha, .. } => sha.clone(),
        Target::Function(n) => n.clone(),
    };
    run_script(g, target, name, true, keys, args, ro).await
}

async fn run_fcall(g: &mut GlobalCtx<'_>, ro: bool) {
    let (keys, args) = match split_keys(g, "ERR Bad number of keys provided") {
        Ok(ka) => ka,
        Err(e) => return g.error(&e),
    };
    let name = String::from_utf8_lossy(g.arg(1)).into_owned();
    run_script(
        g,
        Target::Function(name.clone()),
        name,
        false,
        keys,
        args,
        ro,
    )
    .await
}

/// The script's own client: the caller's database, the script's RESP version, the
/// script's lock owner (so commands that lock keys re-enter the held locks).
/// Whether the client's commands are obeyed whatever the replication checks say (the
/// AOF's, as Redis's mustObeyClient; a master link's once replicas apply a stream).
fn obeys(s: &Session) -> bool {
    s.shared.role.get().replays()
}

fn fake_session(s: &Session, txn: u64) -> Session {
    let c = &s.shared;
    // The script's fake client: the caller's identity, none of its connection.
    let shared = ClientShared::new(c.id, c.addr.clone(), c.laddr.clone(), c.created_ms);
    shared.db.set(s.db);
    shared.last_interaction_ms.set(c.last_interaction_ms.get());
    // The AOF's commands obey (Redis's mustObeyClient): their scripts too.
    if c.role.get().replays() {
        shared.role.set(c.role.get());
    }
    // Scripts run with the caller's permissions.
    *shared.user.borrow_mut() = c.user.borrow().clone();
    let shared = Rc::new(shared);
    Session {
        cell: s.cell.clone(),
        shared,
        db: s.db,
        proto: Protocol::Resp2,
        authenticated: true,
        acl_gen: s.acl_gen,
        acl_open: s.acl_open,
        reply_mode: ReplyMode::On,
        close_after_reply: false,
        multi: None,
        exec_owner: Some(txn),
        watched: None,
        in_script: true,
        error_counted: false,
        last_write: Default::default(),
        // The script's commands are routed as its caller's (scriptVerifyClusterState
        // copies ASKING and READONLY).
        cluster: s.cluster,
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_script(
    g: &mut GlobalCtx<'_>,
    target: Target,
    name: String,
    is_eval: bool,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
    ro: bool,
) {
    let keys_for_tracking = if g.session.shared.tracking.tracks_reads() {
        keys.clone()
    } else {
        Vec::new()
    };
    // In a cluster a script keeps to one slot unless it says otherwise (a script
    // without a shebang may cross slots, as before Redis 7), and one flagged
    // no-cluster does not run at all (scriptPrepareForRun).
    let declared = g.args.get(1).and_then(|target| {
        let command = String::from_utf8_lossy(&g.args[0]).to_ascii_lowercase();
        scripting::declared_flags(&command, target)
    });
    let cross_slot_ok = declared
        .is_none_or(|f| f & (script_flags::EVAL_COMPAT | script_flags::ALLOW_CROSS_SLOT) != 0);
    if crate::cluster::enabled()
        && declared.is_some_and(|f| {
            f & script_flags::EVAL_COMPAT == 0 && f & script_flags::NO_CLUSTER != 0
        })
    {
        return g.error("ERR Can not run script on cluster, 'no-cluster' flag is set.");
    }
    let mut script_slot = keys.first().map(|k| crate::slot::key_slot(k));
    let cell = g.session.cell.clone();
    let owner = LockOwner {
        id: g.session.exec_owner.unwrap_or_else(|| cell.next_txn_id()),
        write: true,
        client: g.session.id(),
    };
    let op = MultiShardOp::lock_all(owner, &cell).await;
    let captured = crate::effects::begin_capture(owner.id);
    let role_mark = crate::replication::role_mark();
    let threshold_ms = cell.data.borrow().config.busy_reply_threshold();
    let oom = out_of_memory(&cell);
    scripting::start_running(Running {
        start: std::time::Instant::now(),
        is_eval,
        name,
        command: g.args.clone(),
        wrote: false,
    });
    let read = Rc::new(std::cell::Cell::new(false));
    let handler = {
        let mut fake = fake_session(g.session, owner.id);
        // Time stands still for the script, as in Redis: every command sees its start.
        let now = crate::util::now_ms();
        let mut wrote = false;
        let read = read.clone();
        let mut repl = crate::effects::REPL_ALL;
        Box::new(move |c: vm::Call| {
            fake.proto = if c.resp3 {
                Protocol::Resp3
            } else {
                Protocol::Resp2
            };
            if c.acl_check_only {
                return acl_check_cmd(&fake, &c.argv);
            }
            if c.repl != repl {
                // redis.set_repl: the capture (the script's, or the EXEC's it runs
                // in) sends what follows to other readers.
                repl = c.repl;
                crate::effects::set_capture_repl(owner.id, repl);
            }
            let deny_oom = oom && !c.allow_oom;
            let slot = ScriptSlot {
                first: &mut script_slot,
                cross_slot_ok,
            };
            crate::runtime::block_on_nested(call(
                &mut fake, c.argv, c.ro, deny_oom, now, &mut wrote, &read, slot,
            ))
        })
    };
    let (done, reply) = futures_channel::oneshot::channel();
    // Read before the job statement: a borrow in it would last across its await,
    // while the script's own calls borrow the shard.
    let stale = crate::replication::running_stale(&cell.data.borrow().config);
    vm::run(Job::Run(Box::new(RunJob {
        target,
        keys,
        args,
        client_proto: g.session.proto,
        ro_cmd: ro,
        oom,
        write_denied: if obeys(g.session) {
            None
        } else {
            let config = &cell.data.borrow().config;
            crate::replication::check(config, true, true)
        },
        stale,
        threshold_ms,
        handler,
        done,
    })))
    .await;
    match reply.await {
        Ok((reply, counted)) => {
            g.out.extend_from_slice(&reply);
            g.session.error_counted = counted;
        }
        Err(_) => g.error("ERR the script engine failed"),
    }
    scripting::stop_running();
    // The flags end with the script (an EXEC it ran in goes on capturing for all).
    crate::effects::set_capture_repl(owner.id, crate::effects::REPL_ALL);
    if captured {
        let became_replica = crate::replication::became_replica_since(role_mark);
        crate::effects::end_capture(owner.id, !became_replica);
    }
    // What the script ran propagated on its own (captured above).
    op.release(&cell).await;
    // Client tracking: a script that read anything tracks its declared keys for its
    // caller, as Redis remembers the EVAL's keys.
    if read.get() && g.session.shared.tracking.tracks_reads() {
        crate::tracking::remember_remote(g.session, keys_for_tracking).await;
    }
}

const OOM_ERR: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// This shard is over its maxmemory share with nothing left to evict: the
/// script may not run deny-oom commands (Redis checks once, when it starts).
fn out_of_memory(cell: &ShardCell) -> bool {
    let mut d = cell.data.borrow_mut();
    d.mem.limit != 0 && d.oom_refuses(true, cell.locks.borrow().is_idle())
}

/// A `redis.call` refused before its command ran: counted as that command's rejected
/// call and as an error reply, as Redis counts it (the script's own reply, if it is
/// this error, is then not counted again).
fn refuse(fake: &Session, cmd: Option<u16>, msg: &str) -> Vec<u8> {
    let mut d = fake.cell.data.borrow_mut();
    d.stats.record_rejected(cmd);
    d.stats
        .record_error(crate::shard::exec::error_prefix(msg.as_bytes()));
    error_reply(fake.proto, msg)
}

fn error_reply(proto: Protocol, msg: &str) -> Vec<u8> {
    let mut out = Vec::new();
    ReplyWriter::new(&mut out, proto).error(msg);
    out
}

/// The ACL check of a script's command (scriptVerifyACL): scripts run with the
/// caller's permissions; a denial goes to ACL LOG with context `lua`.
fn acl_refusal(fake: &Session, idx: u16, argv: &[Vec<u8>]) -> Option<String> {
    let owned = OwnedArgs::new(argv);
    let args = owned.args();
    let stat = super::table().stat_id(idx, &args);
    let user = fake.shared.user.borrow().clone();
    let (denial, pos) = crate::acl::check(&user, stat, &args).err()?;
    let object = crate::acl::log::object_of(denial, stat, &args, pos);
    crate::acl::log::add_for(
        fake,
        denial.reason(),
        crate::acl::log::Context::Lua,
        object,
        None,
    );
    Some(format!(
        "ERR The user executing the script {}",
        denial.message()
    ))
}

/// `redis.acl_check_cmd`: `:1` when the caller's user may run the command, `:0`
/// when not, an error for a command that does not exist.
fn acl_check_cmd(fake: &Session, argv: &[Vec<u8>]) -> Vec<u8> {
    let owned = OwnedArgs::new(argv);
    let args = owned.args();
    let t = super::table();
    let Some(id) = t.lookup_argv(&args) else {
        return error_reply(
            Protocol::Resp2,
            "ERR Invalid command passed to redis.acl_check_cmd()",
        );
    };
    let user = fake.shared.user.borrow().clone();
    if crate::acl::check(&user, id, &args).is_ok() {
        b":1\r\n".to_vec()
    } else {
        b":0\r\n".to_vec()
    }
}

/// In cluster mode, the slot a script's keys keep to (its declared keys', else
/// the first one it touched) and whether it may leave it.
struct ScriptSlot<'a> {
    first: &'a mut Option<u16>,
    cross_slot_ok: bool,
}

/// Runs one `redis.call` for the script and returns its reply. `read` is set once
/// the script calls a read-only command (client tracking then remembers its keys).
#[allow(clippy::too_many_arguments)]
async fn call(
    fake: &mut Session,
    argv: Vec<Vec<u8>>,
    ro: bool,
    deny_oom: bool,
    now: u64,
    wrote: &mut bool,
    read: &std::cell::Cell<bool>,
    slot: ScriptSlot<'_>,
) -> Vec<u8> {
    let proto = fake.proto;
    let Some((idx, spec)) = super::lookup(&argv[0]) else {
        return refuse(fake, None, "ERR Unknown Redis command called from script");
    };
    if spec.has(READONLY) {
        read.set(true);
    }
    if !spec.arity_ok(argv.len()) {
        return refuse(
            fake,
            Some(idx),
            "ERR Wrong number of args calling Redis command from script",
        );
    }
    // A subcommand's own flags decide (CLUSTER RESET is refused, CLUSTER INFO runs).
    let stat_flags = {
        let owned = OwnedArgs::new(&argv);
        let t = super::table();
        t.stat_flags(t.stat_id(idx, &owned.args()))
    };
    if (spec.has(NOSCRIPT) || stat_flags & NOSCRIPT != 0) && !scripting::deny_script_disabled() {
        return refuse(
            fake,
            Some(idx),
            "ERR This Redis command is not allowed from script",
        );
    }
    // An allow-stale script on a stale replica runs only stale commands
    // (scriptVerifyAllowStale).
    let stale = crate::replication::running_stale(&fake.cell.data.borrow().config);
    if stale && !spec.has(STALE) {
        return refuse(
            fake,
            Some(idx),
            "ERR Can not execute the command on a stale replica",
        );
    }
    if !fake.acl_open {
        if let Some(e) = acl_refusal(fake, idx, &argv) {
            return refuse(fake, Some(idx), &e);
        }
    }
    if crate::cluster::enabled() && !obeys(fake) {
        let refused = crate::connection::redirect::script_refusal(
            fake,
            idx,
            spec,
            &argv,
            slot.first,
            slot.cross_slot_ok,
        )
        .await;
        if let Some(e) = refused {
            return refuse(fake, Some(idx), e);
        }
    }
    let write = spec.has(WRITE);
    // Only until the script's first write: after that it cannot stop half-way.
    if deny_oom && !*wrote && spec.has(DENYOOM) {
        return refuse(fake, Some(idx), OOM_ERR);
    }
    // Commands that may propagate (PUBLISH, PFCOUNT) count as writes here, so that
    // a read-only script never waits for CLIENT PAUSE WRITE (Redis does the same).
    if ro && spec.has(WRITE | MAY_REPLICATE) {
        return refuse(
            fake,
            Some(idx),
            "ERR Write commands are not allowed from read-only scripts.",
        );
    }
    // Only until the script's first write: once it changed the dataset it is not
    // failed half-way on the server's state (scriptVerifyWriteCommandAllow), so a
    // replica dropping under min-replicas-to-write does not stop it.
    if write && !obeys(fake) && !*wrote {
        let denied = {
            let config = &fake.cell.data.borrow().config;
            crate::replication::check(config, true, true)
        };
        if let Some(e) = denied {
            return refuse(fake, Some(idx), e);
        }
        *wrote = true;
        if let Some(r) = scripting::running().as_mut() {
            r.wrote = true;
        }
    }
    if crate::observe::monitoring() && !spec.has(ADMIN) {
        crate::observe::monitor_feed(fake.db, None, &OwnedArgs::new(&argv).args());
    }
    let cell = fake.cell.clone();
    let mut out = Vec::new();
    match spec.kind {
        Kind::Client(f) => {
            let owned = OwnedArgs::new(&argv);
            f(&mut ClientCtx {
                session: fake,
                args: owned.args(),
                out: ReplyWriter::new(&mut out, proto),
            });
            record(&cell, idx, &out);
        }
        Kind::Global(f) => {
            run_global(fake, f, argv, write, &mut out).await;
            record(&cell, idx, &out);
        }
        Kind::Keyed(run, cross) => {
            let owned = OwnedArgs::new(&argv);
            let args = owned.args();
            let mut shards = spec
                .keys
                .positions(&args)
                .map(|p| cell.shard_of(args.get(p)));
            let first = shards.next().unwrap_or(cell.id);
            if shards.all(|s| s == first) {
                let keys: Vec<usize> = spec.keys.positions(&args).collect();
                let job = KeyedJob {
                    idx,
                    run,
                    db: fake.db,
                    proto,
                    argv: owned,
                    keys,
                    now,
                    counted: true,
                    txn: fake.exec_owner,
                    client: fake.id(),
                };
                out = cell.call(first, move |c| job.run(c)).await;
            } else {
                match cross {
                    Cross::Split { one, stride, merge } => {
                        out =
                            split(&cell, idx, one, stride as usize, merge, fake, &argv, now).await;
                    }
                    Cross::Coordinator(f) => {
                        run_global(fake, f, argv, write, &mut out).await;
                        record(&cell, idx, &out);
                    }
                    Cross::Never => {
                        out = error_reply(proto, "ERR internal error: command cannot span shards")
                    }
                }
            }
        }
    }
    out
}

async fn run_global(
    fake: &mut Session,
    f: super::GlobalFn,
    argv: Vec<Vec<u8>>,
    write: bool,
    out: &mut Vec<u8>,
) {
    let before = out.len();
    let (txn, db) = (fake.exec_owner, fake.db);
    let propagated = crate::effects::active().then(|| argv.clone());
    let mut ctx = GlobalCtx {
        session: fake,
        args: argv,
        out,
        write,
        propagation: crate::effects::Propagation::global(),
    };
    f(&mut ctx).await;
    let stated = std::mem::take(&mut ctx.propagation);
    if let Some(argv) = propagated {
        if let Some((idx, _)) = super::lookup(&argv[0]) {
            let args = OwnedArgs::new(&argv);
            let failed = out.get(before) == Some(&b'-');
            crate::effects::after_global(txn, db, idx, &args.args(), failed, stated);
        }
    }
}

fn record(cell: &ShardCell, idx: u16, out: &[u8]) {
    let failed = out.first() == Some(&b'-');
    let mut d = cell.data.borrow_mut();
    d.stats.record_call(idx, failed);
    if failed {
        d.stats.record_error(crate::shard::exec::error_prefix(out));
    }
}

/// A keyed command travelling to the shard that owns its keys.
struct KeyedJob {
    idx: u16,
    run: KeyedFn,
    db: usize,
    proto: Protocol,
    argv: OwnedArgs,
    keys: Vec<usize>,
    now: u64,
    /// Whether it counts in commandstats (a split command counts once).
    counted: bool,
    /// The script's lock owner: its effects go into the script's capture.
    txn: Option<u64>,
    /// The calling client (client tracking's NOLOOP).
    client: u64,
}

impl KeyedJob {
    fn run(self, cell: &Rc<ShardCell>) -> Vec<u8> {
        let mut out = Vec::new();
        let args = self.argv.args();
        let call = Call {
            cmd: self.idx,
            run: self.run,
            db: self.db,
            args,
            keys: || self.keys.iter().map(|&p| args.get(p)),
            proto: self.proto,
            now: self.now,
            client: self.client,
            txn: self.txn,
            track_home: None,
            // Blocked poppers re-check once the script releases its locks.
            wake: Wake::WhenReleased,
            clock: None,
            counted: self.counted,
            error_counted: false,
            slowlog: false,
        };
        execute(&cell.locks, &mut cell.data.borrow_mut(), call, &mut out);
        out
    }
}

/// A split command (MGET, MSET, DEL ...) whose keys span shards: each key group runs
/// on its shard under the script's locks, and the replies merge as the client path does.
#[allow(clippy::too_many_arguments)]
async fn split(
    cell: &Rc<ShardCell>,
    idx: u16,
    one: KeyedFn,
    stride: usize,
    merge: super::Merge,
    fake: &Session,
    argv: &[Vec<u8>],
    now: u64,
) -> Vec<u8> {
    let proto = fake.proto;
    if !(argv.len() - 1).is_multiple_of(stride) {
        let name = String::from_utf8_lossy(&argv[0]).to_ascii_lowercase();
        return error_reply(
            proto,
            &format!("ERR wrong number of arguments for '{name}' command"),
        );
    }
    let mut parts = Vec::new();
    for (n, group) in argv[1..].chunks(stride).enumerate() {
        let mut part = Vec::with_capacity(stride + 1);
        part.push(argv[0].clone());
        part.extend(group.iter().cloned());
        let argv = OwnedArgs::new(&part);
        let job = KeyedJob {
            idx,
            run: one,
            db: fake.db,
            proto,
            argv,
            keys: vec![1],
            now,
            counted: n == 0,
            txn: fake.exec_owner,
            client: fake.id(),
        };
        let shard = cell.shard_of(&group[0]);
        parts.push(cell.call(shard, move |c| job.run(c)).await);
    }
    let mut out = Vec::new();
    crate::shard::merge::merge_replies(
        merge,
        parts.iter().map(|p| p.as_slice()),
        parts.len(),
        &mut ReplyWriter::new(&mut out, proto),
    );
    out
}

const SCRIPT_HELP: &[&str] = &[
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DEBUG (YES|SYNC|NO)",
    "    Set the debug mode for subsequent scripts executed.",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
];

const FUNCTION_HELP: &[&str] = &[
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
    "HELP",
    "    Prints this help.",
];

/// Checks a subcommand's arity (Redis's per-subcommand table); false after replying.
fn sub_arity(g: &mut GlobalCtx<'_>, container: &str, sub: &str, arity: i64) -> bool {
    let argc = g.args.len() as i64;
    let ok = if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
    };
    if !ok {
        g.error(&format!(
            "ERR wrong number of arguments for '{container}|{sub}' command"
        ));
    }
    ok
}

fn syntax_error(g: &mut GlobalCtx<'_>, container: &str) {
    let msg = format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {container} HELP.",
        String::from_utf8_lossy(g.arg(1))
    );
    g.error(&msg)
}

/// SCRIPT KILL / FUNCTION KILL.
fn kill(g: &mut GlobalCtx<'_>, is_eval: bool) {
    let run = scripting::running();
    let msg = match run.as_ref() {
        None => Some("NOTBUSY No scripts in execution right now."),
        Some(r) if r.wrote => Some("UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command."),
        Some(r) if is_eval && !r.is_eval => Some(scripting::BUSY_FUNCTION),
        Some(r) if !is_eval && r.is_eval => Some(scripting::BUSY_EVAL),
        Some(_) => None,
    };
    drop(run);
    match msg {
        Some(m) => g.error(m),
        None => {
            scripting::KILL.store(true, std::sync::atomic::Ordering::SeqCst);
            g.w().ok();
        }
    }
}

/// The flush mode argument: Ok(()) for none, ASYNC or SYNC.
fn flush_mode(g: &GlobalCtx<'_>) -> Option<bool> {
    match g.args.len() {
        2 => Some(true),
        3 => Some(g.is(2, "async") || g.is(2, "sync")),
        _ => None,
    }
}

fn script<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let sub = String::from_utf8_lossy(g.arg(1)).to_ascii_lowercase();
        if sub != "kill" {
            if let Some(busy) = scripting::busy_error() {
                return g.error(busy);
            }
        }
        match sub.as_str() {
            "help" if sub_arity(g, "script", "help", 2) => reply_help(&mut g.w(), SCRIPT_HELP),
            "load" if sub_arity(g, "script", "load", 3) => {
                let (done, rx) = futures_channel::oneshot::channel();
                vm::run(Job::ScriptLoad {
                    body: g.args[2].clone(),
                    done,
                })
                .await;
                match rx.await {
                    Ok(Ok(sha)) => g.w().bulk(sha.as_bytes()),
                    Ok(Err(e)) => g.error(&e),
                    Err(_) => g.error("ERR the script engine failed"),
                }
            }
            "exists" if sub_arity(g, "script", "exists", -3) => {
                let found: Vec<bool> = g.args[2..]
                    .iter()
                    .map(|s| {
                        scripting::script_exists(&String::from_utf8_lossy(s).to_ascii_lowercase())
                    })
                    .collect();
                let mut w = g.w();
                w.array_len(found.len());
                for f in found {
                    w.integer(f as i64);
                }
            }
            "flush" if sub_arity(g, "script", "flush", -2) => match flush_mode(g) {
                Some(true) => {
                    scripting::script_flush();
                    g.session
                        .cell
                        .call_all(|_| scripting::vm::drop_stale())
                        .await;
                    g.w().ok();
                }
                Some(false) => g.error("ERR SCRIPT FLUSH only support SYNC|ASYNC option"),
                None => syntax_error(g, "SCRIPT"),
            },
            "kill" if sub_arity(g, "script", "kill", 2) => kill(g, true),
            "debug" if sub_arity(g, "script", "debug", 3) => {
                if g.is(2, "no") {
                    g.w().ok();
                } else if g.is(2, "yes") || g.is(2, "sync") {
                    // The Lua debugger (LDB) is not built: refused, not accepted and
                    // ignored (redis-cli --ldb then says so).
                    g.error(
                        "ERR SCRIPT DEBUG YES/SYNC is not supported: Tessera has no Lua debugger",
                    );
                } else {
                    g.error("ERR Use SCRIPT DEBUG YES/SYNC/NO");
                }
            }
            "help" | "load" | "exists" | "flush" | "kill" | "debug" => {}
            _ => g.unknown_subcommand("SCRIPT"),
        }
    })
}

fn function<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let sub = String::from_utf8_lossy(g.arg(1)).to_ascii_lowercase();
        if sub != "kill" && sub != "stats" {
            if let Some(busy) = scripting::busy_error() {
                return g.error(busy);
            }
        }
        match sub.as_str() {
            "help" if sub_arity(g, "function", "help", 2) => reply_help(&mut g.w(), FUNCTION_HELP),
            "load" if sub_arity(g, "function", "load", -3) => function_load(g).await,
            "delete" if sub_arity(g, "function", "delete", 3) => {
                let name = String::from_utf8_lossy(g.arg(2)).into_owned();
                if functions::delete(&name) {
                    functions_changed(g);
                    g.w().ok();
                } else {
                    g.error("ERR Library not found");
                }
            }
            "flush" if sub_arity(g, "function", "flush", -2) => match flush_mode(g) {
                Some(true) => {
                    functions::flush();
                    functions_changed(g);
                    g.w().ok();
                }
                Some(false) => g.error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option"),
                None => syntax_error(g, "FUNCTION"),
            },
            "list" if sub_arity(g, "function", "list", -2) => function_list(g),
            "dump" if sub_arity(g, "function", "dump", 2) => {
                let payload = functions::dump();
                g.w().bulk(&payload);
            }
            "restore" if sub_arity(g, "function", "restore", -3) => function_restore(g).await,
            "stats" if sub_arity(g, "function", "stats", 2) => function_stats(g),
            "kill" if sub_arity(g, "function", "kill", 2) => kill(g, false),
            "help" | "load" | "delete" | "flush" | "list" | "dump" | "restore" | "stats"
            | "kill" => {}
            _ => g.unknown_subcommand("FUNCTION"),
        }
    })
}

async fn function_load(g: &mut GlobalCtx<'_>) {
    if out_of_memory(&g.session.cell) {
        return g.error(OOM_ERR);
    }
    let argc = g.args.len();
    let mut replace = false;
    for i in 2..argc - 1 {
        if g.is(i, "replace") {
            replace = true;
        } else {
            let msg = format!(
                "ERR Unknown option given: {}",
                String::from_utf8_lossy(g.arg(i))
            );
            return g.error(&msg);
        }
    }
    let (done, rx) = futures_channel::oneshot::channel();
    vm::run(Job::FunctionLoad {
        code: g.args[argc - 1].clone(),
        replace,
        done,
    })
    .await;
    match rx.await {
        Ok(Ok(name)) => {
            functions_changed(g);
            g.w().bulk(name.as_bytes())
        }
        Ok(Err(e)) => g.error(&e),
        Err(_) => g.error("ERR the script engine failed"),
    }
}

async fn function_restore(g: &mut GlobalCtx<'_>) {
    if out_of_memory(&g.session.cell) {
        return g.error(OOM_ERR);
    }
    if g.args.len() > 4 {
        return syntax_error(g, "FUNCTION");
    }
    let policy = if g.args.len() == 4 {
        if g.is(3, "append") {
            Policy::Append
        } else if g.is(3, "replace") {
            Policy::Replace
        } else if g.is(3, "flush") {
            Policy::Flush
        } else {
            return g.error(
                "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
            );
        }
    } else {
        Policy::Append
    };
    let payload = match functions::parse_dump(g.arg(2)) {
        Ok(p) => p,
        Err(e) => return g.error(&e),
    };
    let (done, rx) = futures_channel::oneshot::channel();
    vm::run(Job::FunctionRestore {
        payload,
        policy,
        done,
    })
    .await;
    match rx.await {
        Ok(Ok(())) => {
            functions_changed(g);
            g.w().ok()
        }
        Ok(Err(e)) => g.error(&e),
        Err(_) => g.error("ERR the script engine failed"),
    }
}

/// FUNCTION LOAD, DELETE, FLUSH and RESTORE change the data: one change for the
/// counter (Redis's server.dirty), on the home shard as the command has no key.
fn functions_changed(g: &GlobalCtx<'_>) {
    g.session.cell.data.borrow_mut().dirty += 1;
}

fn function_list(g: &mut GlobalCtx<'_>) {
    let (mut with_code, mut pattern): (bool, Option<Vec<u8>>) = (false, None);
    let mut i = 2;
    while i < g.args.len() {
        if !with_code && g.is(i, "withcode") {
            with_code = true;
        } else if pattern.is_none() && g.is(i, "libraryname") {
            if i + 1 >= g.args.len() {
                return g.error("ERR library name argument was not given");
            }
            i += 1;
            pattern = Some(g.args[i].clone());
        } else {
            let msg = format!("ERR Unknown argument {}", String::from_utf8_lossy(g.arg(i)));
            return g.error(&msg);
        }
        i += 1;
    }
    let (_, libs) = functions::snapshot();
    let libs: Vec<_> = libs
        .into_iter()
        .filter(|l| {
            pattern
                .as_ref()
                .is_none_or(|p| crate::util::glob::glob_match(p, l.name.as_bytes(), true))
        })
        .collect();
    let mut w = g.w();
    w.array_len(libs.len());
    for lib in libs {
        w.map_len(if with_code { 4 } else { 3 });
        w.bulk(b"library_name");
        w.bulk(lib.name.as_bytes());
        w.bulk(b"engine");
        w.bulk(b"LUA");
        w.bulk(b"functions");
        w.array_len(lib.functions.len());
        for f in &lib.functions {
            w.map_len(3);
            w.bulk(b"name");
            w.bulk(f.name.as_bytes());
            w.bulk(b"description");
            match &f.description {
                Some(d) => w.bulk(d.as_bytes()),
                None => w.null(),
            }
            w.bulk(b"flags");
            let names: Vec<&str> = scripting::flags::NAMES
                .iter()
                .filter(|(bit, _)| f.flags & bit != 0)
                .map(|(_, n)| *n)
                .collect();
            w.set_len(names.len());
            for n in names {
                w.simple(n);
            }
        }
        if with_code {
            w.bulk(b"library_code");
            w.bulk(&lib.code);
        }
    }
}

fn function_stats(g: &mut GlobalCtx<'_>) {
    let running = scripting::running().as_ref().map(|r| {
        (
            r.name.clone(),
            r.command.clone(),
            r.start.elapsed().as_millis() as i64,
        )
    });
    let (libs, funcs) = functions::counts();
    let mut w = g.w();
    w.map_len(2);
    w.bulk(b"running_script");
    match running {
        None => w.null(),
        Some((name, command, ms)) => {
            w.map_len(3);
            w.bulk(b"name");
            w.bulk(name.as_bytes());
            w.bulk(b"command");
            w.array_len(command.len());
            for a in &command {
                w.bulk(a);
            }
            w.bulk(b"duration_ms");
            w.integer(ms);
        }
    }
    w.bulk(b"engines");
    w.map_len(1);
    w.bulk(b"LUA");
    w.map_len(2);
    w.bulk(b"libraries_count");
    w.integer(libs as i64);
    w.bulk(b"functions_count");
    w.integer(funcs as i64);
}
