//! One shard's Lua VM, run on the shard's own thread. A script runs inside the
//! EVAL's task poll; each `redis.call` is served synchronously by the caller's
//! `CallHandler`, which runs the command (on another shard when its keys live there)
//! while the shard's other tasks keep running in a nested loop
//! (`runtime::block_on_nested`). Past busy-reply-threshold the instruction hook
//! serves the shard's clients the same way, so they get -BUSY and SCRIPT KILL reaches
//! the script, as Redis's processEventsWhileBlocked does.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use futures_channel::oneshot;
use mlua::{
    ChunkMode, Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState,
};

use super::convert::{err_table, lua_to_resp, resp_to_lua};
use super::functions::{self, FunctionInfo, Library, Policy};
use super::{flags, format_g};
use crate::protocol::reply::{Protocol, ReplyWriter};

/// Redis's hook period: the hook checks time and kills every this many instructions.
const HOOK_EVERY: u32 = 100_000;
const LOAD_TIMEOUT: Duration = Duration::from_millis(500);
const PRELUDE: &str = include_str!("prelude.lua");
/// The text of the Lua error `redis.call` raises; `pending` maps it to the table.
const MARKER: &str = "redis.call error #";
const KILLED: &str = "ERR Script killed by user with SCRIPT KILL...";

/// One `redis.call` / `redis.pcall` of the running script.
pub struct Call {
    pub argv: Vec<Vec<u8>>,
    pub resp3: bool,
    /// Who the command's effects are for (`redis.set_repl`, `effects::REPL_*`).
    pub repl: u8,
    pub ro: bool,
    /// The script may run deny-oom commands even when out of memory.
    pub allow_oom: bool,
    /// `redis.acl_check_cmd`: only whether the caller's user may run it (`:1` /
    /// `:0`, or an error), nothing runs.
    pub acl_check_only: bool,
}

/// Runs a script's command and returns its RESP reply.
pub type CallHandler = Box<dyn FnMut(Call) -> Vec<u8>>;

pub enum Target {
    Eval { sha: String, body: Option<Vec<u8>> },
    Function(String),
}

/// What a stale replica answers (processCommand's shared masterdownerr).
const MASTERDOWN: &str =
    "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.";

pub struct RunJob {
    pub target: Target,
    pub keys: Vec<Vec<u8>>,
    pub args: Vec<Vec<u8>>,
    pub client_proto: Protocol,
    /// EVAL_RO / EVALSHA_RO / FCALL_RO.
    pub ro_cmd: bool,
    /// Used memory was above maxmemory when the script started.
    pub oom: bool,
    /// What a write would get from the replication checks (NOREPLICAS, READONLY):
    /// scripts not flagged no-writes are refused up front.
    pub write_denied: Option<&'static str>,
    /// A stale replica (link down, replica-serve-stale-data no): only scripts
    /// flagged allow-stale run.
    pub stale: bool,
    pub threshold_ms: u64,
    pub handler: CallHandler,
    /// The script's reply for the client, and whether that reply is an error a
    /// `redis.call` already counted in the error stats (Redis's
    /// ignore_error_stats_update: the script's command counts as failed, the error
    /// not twice).
    pub done: oneshot::Sender<(Vec<u8>, bool)>,
}

pub enum Job {
    Run(Box<RunJob>),
    ScriptLoad {
        body: Vec<u8>,
        done: oneshot::Sender<Result<String, String>>,
    },
    FunctionLoad {
        code: Vec<u8>,
        replace: bool,
        done: oneshot::Sender<Result<String, String>>,
    },
    FunctionRestore {
        payload: functions::Restored,
        policy: Policy,
        done: oneshot::Sender<Result<(), String>>,
    },
}

/// This shard's VM: out of its slot while a job runs, so that tasks the running
/// script lets run (nested loop) wait their turn instead of re-entering it.
struct VmSlot {
    vm: Option<Vm>,
    in_use: bool,
    waiters: Vec<Waker>,
}

thread_local! {
    static SLOT: RefCell<VmSlot> = const {
        RefCell::new(VmSlot {
            vm: None,
            in_use: false,
            waiters: Vec::new(),
        })
    };
}

/// Runs `job` on this shard's VM, once no other job holds it (one runs at a time).
pub async fn run(job: Job) {
    let vm = std::future::poll_fn(|cx| {
        SLOT.with(|s| {
            let mut s = s.borrow_mut();
            if s.in_use {
                s.waiters.push(cx.waker().clone());
                return Poll::Pending;
            }
            s.in_use = true;
            Poll::Ready(s.vm.take())
        })
    })
    .await;
    let epoch = super::SCRIPT_EPOCH.load(Ordering::SeqCst);
    let mut vm = match vm {
        Some(v) if v.epoch == epoch => Some(v),
        // SCRIPT FLUSH resets the VM, as Redis does.
        _ => match Vm::new(epoch) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::error!("cannot create the Lua VM: {e}");
                None
            }
        },
    };
    match vm.as_mut() {
        Some(v) => {
            v.handle(job);
            super::publish_lua_memory(v.lua.used_memory() as u64);
        }
        None => fail(job, "ERR Lua engine unavailable"),
    }
    let waiters = SLOT.with(|s| {
        let mut s = s.borrow_mut();
        s.vm = vm;
        s.in_use = false;
        std::mem::take(&mut s.waiters)
    });
    waiters.into_iter().for_each(Waker::wake);
}

/// After SCRIPT FLUSH: this shard's VM goes now, not at its next script, so that
/// INFO's used_memory_lua falls as Redis's does when it resets its VM (a shard that
/// runs no script would keep reporting it). A VM in use is rebuilt after its job.
pub fn drop_stale() {
    let epoch = super::SCRIPT_EPOCH.load(Ordering::SeqCst);
    let stale = SLOT.with(|s| {
        let mut s = s.borrow_mut();
        match &s.vm {
            Some(v) if v.epoch != epoch => s.vm.take(),
            _ => None,
        }
    });
    if stale.is_some() {
        drop(stale);
        super::publish_lua_memory(0);
    }
}

fn fail(job: Job, msg: &str) {
    match job {
        Job::Run(r) => {
            let mut out = Vec::new();
            ReplyWriter::new(&mut out, r.client_proto).error(msg);
            let _ = r.done.send((out, false));
        }
        Job::ScriptLoad { done, .. } | Job::FunctionLoad { done, .. } => {
            let _ = done.send(Err(msg.to_string()));
        }
        Job::FunctionRestore { done, .. } => {
            let _ = done.send(Err(msg.to_string()));
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Idle,
    Load,
    Eval,
    Function,
}

struct RunState {
    mode: Cell<Mode>,
    start: Cell<Instant>,
    threshold_ms: Cell<u64>,
    busy: Cell<bool>,
    fast_hook: Cell<bool>,
    resp3: Cell<bool>,
    /// `redis.set_repl`'s flags for the script running.
    repl: Cell<u8>,
    ro: Cell<bool>,
    allow_oom: Cell<bool>,
    /// Serves `redis.call` while a script runs.
    link: RefCell<Option<CallHandler>>,
    /// The error table of the last failed `redis.call`, with its marker number.
    pending: RefCell<Option<(u64, Value)>>,
    err_seq: Cell<u64>,
    /// The running script's name (its body's SHA1, or the function's), for the log.
    name: RefCell<String>,
}

struct FuncEntry {
    f: Function,
    flags: u32,
    name: String,
}

pub struct Vm {
    lua: Lua,
    run: Function,
    load_library: Function,
    /// Where the globals really live (KEYS and ARGV go here).
    store: Table,
    /// "KEYS" and "ARGV", made once: interning them again for every EVAL showed up.
    keys_name: mlua::String,
    argv_name: mlua::String,
    epoch: u64,
    scripts: HashMap<String, (Function, u32)>,
    funcs: HashMap<String, FuncEntry>,
    funcs_gen: u64,
    st: Rc<RunState>,
    /// Scripts run since the last garbage-collection step (see `execute`).
    gc_count: u32,
}

/// Scripts between two garbage-collection steps, and the step's size (Redis's
/// LUA_GC_CYCLE_PERIOD).
const LUA_GC_CYCLE_PERIOD: u32 = 50;

fn install_hook(lua: &Lua, st: &Rc<RunState>, every: u32) {
    let s = st.clone();
    lua.set_hook(
        HookTriggers::new().every_nth_instruction(every),
        move |lua, _| hook(lua, &s),
    );
}

/// The hook on `thread` instead. Lua 5.1 coroutines inherit their creator's hook
/// (so Redis's time limit and SCRIPT KILL reach a loop inside a coroutine), but
/// mlua runs its hook on one thread only and removes it from any other: a loop in
/// a coroutine escaped both and wedged the shard for good. The prelude's
/// coroutine.resume / wrap therefore move the hook onto the coroutine for as long
/// as it runs and back onto the resumer when it yields, returns or fails.
fn install_hook_on(thread: &mlua::Thread, st: &Rc<RunState>) {
    let every = if st.fast_hook.get() { 1 } else { HOOK_EVERY };
    let s = st.clone();
    thread.set_hook(
        HookTriggers::new().every_nth_instruction(every),
        move |lua, _| hook(lua, &s),
    );
}

/// Every HOOK_EVERY instructions: load timeout, busy state, kill requests. Once a kill
/// is requested the hook fires on every instruction, so a script that catches the
/// error with pcall is stopped at its next instruction outside the pcall.
fn hook(lua: &Lua, st: &Rc<RunState>) -> mlua::Result<VmState> {
    let elapsed = st.start.get().elapsed();
    match st.mode.get() {
        Mode::Idle => {}
        Mode::Load => {
            if elapsed > LOAD_TIMEOUT {
                return Err(mlua::Error::RuntimeError("FUNCTION LOAD timeout".into()));
            }
        }
        _ => {
            serve_if_slow(st);
            if super::KILL.load(Ordering::SeqCst) {
                if !st.fast_hook.get() {
                    st.fast_hook.set(true);
                    install_hook_on(&lua.current_thread(), st);
                }
                return Err(mlua::Error::RuntimeError(
                    "Script killed by user with SCRIPT KILL...".into(),
                ));
            }
        }
    }
    Ok(VmState::Continue)
}

/// Past `lua-time-limit` a running script is busy: other clients get -BUSY (those
/// of this shard served from here, meanwhile) and SCRIPT / FUNCTION KILL may stop it.
/// Checked by the instruction hook and before every `redis.call`, so a script that
/// spends its time in calls (each perhaps a hop to another core) is seen busy on
/// time, not only every HOOK_EVERY instructions.
fn serve_if_slow(st: &RunState) {
    let mode = st.mode.get();
    if matches!(mode, Mode::Idle | Mode::Load) {
        return;
    }
    let elapsed = st.start.get().elapsed();
    if !st.busy.get() && elapsed.as_millis() as u64 >= st.threshold_ms.get() {
        let kill = if mode == Mode::Eval {
            "SCRIPT KILL"
        } else {
            "FUNCTION KILL"
        };
        tracing::warn!(
            "Slow script detected: still in execution after {} milliseconds. You can try killing the script using the {kill} command. Script name is: {}.",
            elapsed.as_millis(),
            st.name.borrow()
        );
        st.busy.set(true);
        super::set_busy(mode == Mode::Eval);
    }
    if st.busy.get() {
        // This shard's clients get -BUSY, and SCRIPT KILL can arrive.
        crate::runtime::serve_while_blocked();
    }
}

/// The text of a Lua error (syntax errors without mlua's prefix).
pub fn error_text(e: &mlua::Error) -> String {
    match e {
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::CallbackError { cause, .. } => error_text(cause),
        other => other.to_string(),
    }
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
        Value::Table(t) => match t.raw_get::<Value>("err") {
            Ok(Value::String(s)) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
            _ => "unknown error".into(),
        },
        Value::Error(e) => error_text(e),
        Value::Nil => "unknown error".into(),
        other => format!("{other:?}"),
    }
}

/// `#!lua flags=...` of an EVAL body: (flags, bytes of the shebang line).
pub fn parse_shebang(body: &[u8]) -> Result<(u32, usize), String> {
    if !body.starts_with(b"#!") {
        return Ok((flags::EVAL_COMPAT, 0));
    }
    let end = body.iter().position(|&c| c == b'\n').unwrap_or(body.len());
    let line = String::from_utf8_lossy(&body[2..end]).into_owned();
    let parts = functions::split_shebang_words(&line);
    let engine = parts.first().cloned().unwrap_or_default();
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("ERR Unexpected engine in script shebang: {engine}"));
    }
    let mut fl = 0;
    for p in &parts[1..] {
        let Some(list) = p.strip_prefix("flags=") else {
            return Err(format!("ERR Unknown lua shebang option: {p}"));
        };
        for f in list.split(',').filter(|f| !f.is_empty()) {
            match flags::NAMES.iter().find(|(_, n)| *n == f) {
                Some((bit, _)) => fl |= bit,
                None => return Err(format!("ERR Unexpected flag in script shebang: {f}")),
            }
        }
    }
    Ok((fl, end))
}

fn version_num() -> u32 {
    let mut parts = crate::server::REDIS_VERSION
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (a, b, c) = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    (a << 16) | (b << 8) | c
}

impl Vm {
    fn new(epoch: u64) -> mlua::Result<Vm> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::new(),
        )?;
        let st = Rc::new(RunState {
            mode: Cell::new(Mode::Idle),
            start: Cell::new(Instant::now()),
            threshold_ms: Cell::new(5000),
            busy: Cell::new(false),
            fast_hook: Cell::new(false),
            resp3: Cell::new(false),
            repl: Cell::new(crate::effects::REPL_ALL),
            ro: Cell::new(false),
            allow_oom: Cell::new(false),
            link: RefCell::new(None),
            pending: RefCell::new(None),
            err_seq: Cell::new(0),
            name: RefCell::new(String::new()),
        });
        let prims = Self::prims(&lua, &st)?;
        let (run, load_library, store): (Function, Function, Table) =
            lua.load(PRELUDE).set_name("=[tessera]").call(prims)?;
        install_hook(&lua, &st, HOOK_EVERY);
        // What building the sandbox left behind (the prelude's chunk, copies of the
        // library tables) is garbage: a fresh VM starts at its live size.
        lua.gc_collect()?;
        lua.gc_collect()?;
        let (keys_name, argv_name) = (lua.create_string("KEYS")?, lua.create_string("ARGV")?);
        Ok(Vm {
            lua,
            run,
            load_library,
            store,
            keys_name,
            argv_name,
            epoch,
            scripts: HashMap::new(),
            funcs: HashMap::new(),
            funcs_gen: 0,
            st,
            gc_count: 0,
        })
    }

    /// The Rust side of the sandbox: redis.call's transport, libraries, helpers.
    fn prims(lua: &Lua, st: &Rc<RunState>) -> mlua::Result<Table> {
        let p = lua.create_table()?;
        let s = st.clone();
        p.set(
            "hook_thread",
            lua.create_function(move |lua, co: Option<mlua::Thread>| {
                let thread = co.unwrap_or_else(|| lua.current_thread());
                install_hook_on(&thread, &s);
                Ok(())
            })?,
        )?;
        let s = st.clone();
        p.set(
            "call",
            lua.create_function(move |lua, args: MultiValue| {
                let (v, failed) = redis_call(lua, &s, args)?;
                if !failed {
                    return Ok(v);
                }
                let n = s.err_seq.get() + 1;
                s.err_seq.set(n);
                *s.pending.borrow_mut() = Some((n, v));
                Err(mlua::Error::RuntimeError(format!("{MARKER}{n}")))
            })?,
        )?;
        let s = st.clone();
        p.set(
            "acl_check",
            lua.create_function(move |lua, args: MultiValue| {
                // Raised from Rust, as redis.call's errors: the error names the
                // script's line, not a wrapper's.
                match acl_check(lua, &s, args)? {
                    Value::String(e) => {
                        let v = err_table(lua, &e.to_str()?)?;
                        let n = s.err_seq.get() + 1;
                        s.err_seq.set(n);
                        *s.pending.borrow_mut() = Some((n, v));
                        Err(mlua::Error::RuntimeError(format!("{MARKER}{n}")))
                    }
                    v => Ok(v),
                }
            })?,
        )?;
        let s = st.clone();
        p.set(
            "pcall",
            lua.create_function(move |lua, args: MultiValue| Ok(redis_call(lua, &s, args)?.0))?,
        )?;
        let s = st.clone();
        p.set(
            "unmark",
            lua.create_function(move |lua, e: Value| {
                let Value::Error(err) = &e else {
                    return Ok(e);
                };
                let text = error_text(err);
                let n = text
                    .strip_prefix(MARKER)
                    .and_then(|n| n.parse::<u64>().ok());
                let mut p = s.pending.borrow_mut();
                match (n, p.as_ref()) {
                    (Some(n), Some((m, _))) if n == *m => {
                        Ok(p.take().map_or(Value::Nil, |(_, v)| v))
                    }
                    _ => Ok(Value::String(lua.create_string(&text)?)),
                }
            })?,
        )?;
        p.set(
            "frame",
            lua.create_function(|lua, ()| {
                for level in 1..256 {
                    let Some(d) = lua.inspect_stack(level) else {
                        break;
                    };
                    let src = d.source();
                    let name = src.source.as_deref().unwrap_or("");
                    if src.what == "C" || name == "=[tessera]" {
                        continue;
                    }
                    return Ok((Some(name.to_string()), Some(d.curr_line())));
                }
                Ok((None, None))
            })?,
        )?;
        p.set(
            "sha1hex",
            lua.create_function(|_, v: Value| {
                let bytes = match &v {
                    Value::String(s) => s.as_bytes().to_vec(),
                    Value::Integer(_) | Value::Number(_) => {
                        format_g(super::bit::number(&v).unwrap_or(0.0), 14).into_bytes()
                    }
                    _ => Vec::new(),
                };
                Ok(super::sha1::sha1_hex(&bytes))
            })?,
        )?;
        p.set(
            "log",
            lua.create_function(|_, (level, msg): (i64, String)| {
                // redis.LOG_DEBUG .. LOG_WARNING, on the server log's four levels.
                match level {
                    0 => tracing::trace!(target: "script", "{msg}"),
                    1 => tracing::debug!(target: "script", "{msg}"),
                    2 => tracing::info!(target: "script", "{msg}"),
                    _ => tracing::warn!(target: "script", "{msg}"),
                }
                Ok(())
            })?,
        )?;
        let s = st.clone();
        p.set(
            "set_repl",
            lua.create_function(move |_, v: u8| {
                s.repl.set(v);
                Ok(())
            })?,
        )?;
        let s = st.clone();
        p.set(
            "setresp",
            lua.create_function(move |_, v: i64| {
                s.resp3.set(v == 3);
                Ok(())
            })?,
        )?;
        // Readonly tables in Redis are a flag its patched Lua checks in every raw
        // write. Stock Lua 5.1 has no such flag, so the prelude's readonly tables are
        // empty proxies, and the functions that write raw (rawset, setmetatable,
        // table.insert) or read raw (rawget, next) are wrapped here, in Rust, so that
        // their errors carry the caller's line exactly as the C functions' do.
        // guard(f, ro): f, refusing a first argument that is a key of `ro`.
        p.set(
            "guard",
            lua.create_function(|lua, (f, ro): (Function, Table)| {
                lua.create_function(move |lua, args: MultiValue| {
                    if let Some(Value::Table(t)) = args.front() {
                        if ro.raw_get::<Value>(t.clone())? != Value::Nil {
                            return Err(mlua::Error::RuntimeError(READONLY.into()));
                        }
                    }
                    call_located(lua, &f, args)
                })
            })?,
        )?;
        // through(f, ro): f on the table a readonly proxy stands for (`ro[proxy]`).
        p.set(
            "through",
            lua.create_function(|lua, (f, ro): (Function, Table)| {
                lua.create_function(move |lua, mut args: MultiValue| {
                    if let Some(Value::Table(t)) = args.front() {
                        if let Value::Table(inner) = ro.raw_get::<Value>(t.clone())? {
                            if let Some(first) = args.front_mut() {
                                *first = Value::Table(inner);
                            }
                        }
                    }
                    call_located(lua, &f, args)
                })
            })?,
        )?;
        // hide(f, hidden): f, answering nil where it would answer `hidden`
        // (getmetatable of a readonly table: nil, as in Redis).
        p.set(
            "hide",
            lua.create_function(|lua, (f, hidden): (Function, Table)| {
                lua.create_function(move |lua, args: MultiValue| {
                    let r = call_located(lua, &f, args)?;
                    match r.front() {
                        Some(Value::Table(t)) if *t == hidden => {
                            Ok(MultiValue::from_iter([Value::Nil]))
                        }
                        _ => Ok(r),
                    }
                })
            })?,
        )?;
        p.set(
            "loadstring",
            super::lib_fn(lua, |lua, (src, name): (Value, Option<mlua::String>)| {
                let src = match &src {
                    Value::String(s) => s.as_bytes().to_vec(),
                    Value::Integer(_) | Value::Number(_) => {
                        format_g(super::bit::number(&src).unwrap_or(0.0), 14).into_bytes()
                    }
                    other => {
                        return Err(mlua::Error::RuntimeError(format!(
                            "bad argument #1 to 'loadstring' (string expected, got {})",
                            arg_type(other)
                        )))
                    }
                };
                // Lua's default chunk name is the source itself (as a C string).
                let name = match name {
                    Some(n) => n.as_bytes().to_vec(),
                    None => src.clone(),
                };
                load_text(lua, &src, &name)
            })?,
        )?;
        p.set(
            "load",
            super::lib_fn(lua, |lua, (reader, name): (Value, Option<mlua::String>)| {
                let Value::Function(reader) = reader else {
                    return Err(mlua::Error::RuntimeError(format!(
                        "bad argument #1 to 'load' (function expected, got {})",
                        arg_type(&reader)
                    )));
                };
                // Lua 5.1's load: the reader's pieces until nil or "", numbers as text.
                let mut src = Vec::new();
                loop {
                    match reader.call::<Value>(()) {
                        Err(e) => return Ok((Value::Nil, Some(error_text(&e)))),
                        Ok(Value::Nil) => break,
                        Ok(Value::String(s)) if s.as_bytes().is_empty() => break,
                        Ok(Value::String(s)) => src.extend_from_slice(&s.as_bytes()),
                        Ok(n @ (Value::Integer(_) | Value::Number(_))) => src.extend_from_slice(
                            format_g(super::bit::number(&n).unwrap_or(0.0), 14).as_bytes(),
                        ),
                        Ok(_) => {
                            return Ok((
                                Value::Nil,
                                Some("reader function must return a string".into()),
                            ))
                        }
                    }
                }
                let name = name.map_or_else(|| b"=(load)".to_vec(), |n| n.as_bytes().to_vec());
                load_text(lua, &src, &name)
            })?,
        )?;
        p.set("cjson", super::cjson::open(lua)?)?;
        p.set("cmsgpack", super::cmsgpack::open(lua)?)?;
        p.set("bit", super::bit::open(lua)?)?;
        p.set("struct", super::structlib::open(lua)?)?;
        p.set("version", crate::server::REDIS_VERSION)?;
        p.set("version_num", version_num())?;
        Ok(p)
    }

    fn handle(&mut self, job: Job) {
        match job {
            Job::Run(r) => self.run_job(*r),
            Job::ScriptLoad { body, done } => {
                let sha = super::sha1::sha1_hex(&body);
                let r = self.script(&sha, Some(body)).map(|_| sha);
                let _ = done.send(r);
            }
            Job::FunctionLoad {
                code,
                replace,
                done,
            } => {
                let r = self.compile_library(&code).and_then(|lib| {
                    let name = lib.name.clone();
                    let policy = if replace {
                        Policy::Replace
                    } else {
                        Policy::Append
                    };
                    functions::install(vec![lib], policy, false).map(|_| name)
                });
                let _ = done.send(r);
            }
            Job::FunctionRestore {
                payload,
                policy,
                done,
            } => {
                let libs = functions::compile_restored(&payload, |c| self.compile_library(c));
                let _ = done.send(libs.and_then(|l| functions::install(l, policy, true)));
            }
        }
    }

    /// A cached or newly compiled EVAL script: (function, flags).
    fn script(&mut self, sha: &str, body: Option<Vec<u8>>) -> Result<(Function, u32), String> {
        if let Some((f, fl)) = self.scripts.get(sha) {
            return Ok((f.clone(), *fl));
        }
        let body = match body {
            Some(b) => b,
            None => match super::script_get(sha) {
                Some(b) => b.to_vec(),
                None => return Err("NOSCRIPT No matching script. Please use EVAL.".into()),
            },
        };
        let (fl, skip) = parse_shebang(&body)?;
        let f = self
            .lua
            .load(&body[skip..])
            .set_name("@user_script")
            .set_mode(ChunkMode::Text)
            .into_function()
            .map_err(|e| {
                format!(
                    "ERR Error compiling script (new function): {}",
                    error_text(&e)
                )
            })?;
        super::script_put(sha.to_string(), body);
        self.scripts.insert(sha.to_string(), (f.clone(), fl));
        Ok((f, fl))
    }

    /// Compiles a library and runs its registration code (under the load timeout).
    fn compile_library(&mut self, code: &[u8]) -> Result<Library, String> {
        let (name, skip) = functions::parse_metadata(code)?;
        let chunk = self
            .lua
            .load(&code[skip..])
            .set_name("@user_function")
            .set_mode(ChunkMode::Text)
            .into_function()
            .map_err(|e| format!("ERR Error compiling function: {}", error_text(&e)))?;
        self.st.mode.set(Mode::Load);
        self.st.start.set(Instant::now());
        let r: mlua::Result<(bool, Value, Value)> = self.load_library.call(chunk);
        self.st.mode.set(Mode::Idle);
        let (ok, err, reg) =
            r.map_err(|e| format!("ERR Error registering functions: {}", error_text(&e)))?;
        if !ok {
            return Err(format!(
                "ERR Error registering functions: {}",
                value_text(&err)
            ));
        }
        let Value::Table(reg) = reg else {
            return Err("ERR No functions registered".into());
        };
        let mut list = Vec::new();
        for pair in reg.pairs::<String, Table>() {
            let Ok((_, t)) = pair else { continue };
            let fname: String = t.raw_get(1).unwrap_or_default();
            let desc: Option<String> = t.raw_get(3).ok().flatten();
            let fl: u32 = t.raw_get(4).unwrap_or(0);
            list.push(FunctionInfo {
                name: fname,
                description: desc,
                flags: fl,
            });
        }
        if list.is_empty() {
            return Err("ERR No functions registered".into());
        }
        list.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Library {
            name,
            code: code.to_vec(),
            functions: list,
        })
    }

    /// Reloads every library if the registry changed since this VM last looked.
    fn sync_functions(&mut self) {
        if functions::GENERATION.load(Ordering::SeqCst) == self.funcs_gen {
            return;
        }
        let (gen, libs) = functions::snapshot();
        self.funcs.clear();
        for lib in libs {
            let Ok((_, skip)) = functions::parse_metadata(&lib.code) else {
                continue;
            };
            let Ok(chunk) = self
                .lua
                .load(&lib.code[skip..])
                .set_name("@user_function")
                .set_mode(ChunkMode::Text)
                .into_function()
            else {
                continue;
            };
            self.st.mode.set(Mode::Load);
            self.st.start.set(Instant::now());
            let r: mlua::Result<(bool, Value, Value)> = self.load_library.call(chunk);
            self.st.mode.set(Mode::Idle);
            let Ok((true, _, Value::Table(reg))) = r else {
                continue;
            };
            for (key, t) in reg.pairs::<String, Table>().flatten() {
                let (Ok(name), Ok(f)) = (t.raw_get::<String>(1), t.raw_get::<Function>(2)) else {
                    continue;
                };
                let fl: u32 = t.raw_get(4).unwrap_or(0);
                self.funcs.insert(key, FuncEntry { f, flags: fl, name });
            }
        }
        self.funcs_gen = gen;
    }

    fn run_job(&mut self, job: RunJob) {
        let RunJob {
            target,
            keys,
            args,
            client_proto,
            ro_cmd,
            oom,
            write_denied,
            stale,
            threshold_ms,
            handler,
            done,
        } = job;
        let mut out = Vec::new();
        let mut counted = false;
        let mut w = ReplyWriter::new(&mut out, client_proto);
        let resolved = match target {
            Target::Eval { sha, body } => self
                .script(&sha, body)
                .map(|(f, fl)| (f, fl, sha, Mode::Eval)),
            Target::Function(name) => {
                self.sync_functions();
                match self.funcs.get(&name.to_ascii_lowercase()) {
                    Some(e) => Ok((e.f.clone(), e.flags, e.name.clone(), Mode::Function)),
                    None => Err("ERR Function not found".to_string()),
                }
            }
        };
        match resolved {
            Err(e) => w.error(&e),
            Ok((f, fl, name, mode)) => {
                let shebang = fl & flags::EVAL_COMPAT == 0;
                // script.c's order: a flagless EVAL is refused on a stale replica at
                // once; a flagged script after the write checks (processCommand's
                // order for the flags it declares).
                if !shebang && stale {
                    w.error(MASTERDOWN);
                } else if shebang && oom && fl & (flags::ALLOW_OOM | flags::NO_WRITES) == 0 {
                    w.error("OOM command not allowed when used memory > 'maxmemory'.");
                } else if shebang && fl & flags::NO_WRITES == 0 && ro_cmd {
                    w.error("ERR Can not execute a script with write flag using *_ro command.");
                } else if let Some(e) =
                    write_denied.filter(|_| shebang && fl & flags::NO_WRITES == 0)
                {
                    w.error(e);
                } else if shebang && stale && fl & flags::ALLOW_STALE == 0 {
                    w.error(MASTERDOWN);
                } else {
                    let ro = ro_cmd || fl & flags::NO_WRITES != 0;
                    self.st.allow_oom.set(fl & flags::ALLOW_OOM != 0);
                    *self.st.link.borrow_mut() = Some(handler);
                    counted = self.execute(f, &name, mode, ro, threshold_ms, &keys, &args, &mut w);
                    *self.st.link.borrow_mut() = None;
                }
            }
        }
        let _ = done.send((out, counted));
    }

    #[allow(clippy::too_many_arguments)]
    fn execute(
        &mut self,
        f: Function,
        name: &str,
        mode: Mode,
        ro: bool,
        threshold_ms: u64,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
        w: &mut ReplyWriter,
    ) -> bool {
        let lua = &self.lua;
        let seq = |items: &[Vec<u8>]| -> mlua::Result<Table> {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, k) in items.iter().enumerate() {
                t.raw_set(i + 1, lua.create_string(k)?)?;
            }
            Ok(t)
        };
        let (kt, at) = match (seq(keys), seq(args)) {
            (Ok(k), Ok(a)) => (k, a),
            _ => {
                w.error("ERR out of memory building KEYS/ARGV");
                return false;
            }
        };
        let st = &self.st;
        st.mode.set(mode);
        st.start.set(Instant::now());
        st.threshold_ms.set(threshold_ms);
        // Redis names an EVAL script's function f_<sha1>.
        *st.name.borrow_mut() = match mode {
            Mode::Eval => format!("f_{name}"),
            _ => name.to_string(),
        };
        st.busy.set(false);
        st.resp3.set(false);
        st.repl.set(crate::effects::REPL_ALL);
        st.ro.set(ro);
        let result: mlua::Result<(bool, Value)> = if mode == Mode::Eval {
            let _ = self.store.raw_set(&self.keys_name, kt);
            let _ = self.store.raw_set(&self.argv_name, at);
            self.run.call((f, Value::Nil, Value::Nil))
        } else {
            self.run.call((f, kt, at))
        };
        st.mode.set(Mode::Idle);
        // Redis's evalGenericCommand: a collection step every 50 scripts, so that
        // garbage does not pile up to Lua's default pause (twice the live size)
        // and used_memory_lua stays near what the VM really holds.
        self.gc_count += 1;
        if self.gc_count >= LUA_GC_CYCLE_PERIOD {
            self.gc_count = 0;
            let _ = lua.gc_step_kbytes(LUA_GC_CYCLE_PERIOD as i32);
        }
        // After a kill, back on the main state at the normal rate. (A coroutine's
        // resume always hands the hook back to its resumer, so without a kill it is
        // on the main state already.)
        if st.fast_hook.get() {
            st.fast_hook.set(false);
            install_hook(lua, st, HOOK_EVERY);
        }
        let killed = super::KILL.load(Ordering::SeqCst);
        match result {
            Ok((true, v)) if !killed => {
                lua_to_resp(&v, w, 0, st.resp3.get());
                counted_error(&v)
            }
            Ok((_, v)) => {
                let (mut msg, mut at) = (value_text(&v), None);
                if let Value::Table(t) = &v {
                    if let (Ok(Value::String(src)), Ok(line)) =
                        (t.raw_get::<Value>("source"), t.raw_get::<i64>("line"))
                    {
                        at = Some(format!("{}:{line}", src.to_string_lossy()));
                    }
                }
                if killed {
                    msg = KILLED.to_string();
                }
                match at {
                    Some(at) => w.error(&format!("{msg} script: {name}, on {at}.")),
                    None => w.error(&msg),
                }
                !killed && counted_error(&v)
            }
            Err(e) => {
                w.error(&format!("ERR {}", error_text(&e)));
                false
            }
        }
    }
}

/// The field Redis puts in the error table of a failed `redis.call` / `redis.pcall`:
/// the error was counted when the command failed, so the script's reply, if it is
/// that error, is not counted again.
const COUNTED_FIELD: &str = "ignore_error_stats_update";

/// Whether `v` is an error table a `redis.call` produced (see `COUNTED_FIELD`).
fn counted_error(v: &Value) -> bool {
    matches!(v, Value::Table(t) if t.raw_get::<bool>(COUNTED_FIELD).unwrap_or(false))
}

const READONLY: &str = "Attempt to modify a readonly table";

/// Calls the C function `f` for a wrapper; its errors get the line of the wrapper's
/// caller, as they would have if the script had called `f` itself.
fn call_located(lua: &Lua, f: &Function, args: MultiValue) -> mlua::Result<MultiValue> {
    f.call::<MultiValue>(args).map_err(|e| {
        mlua::Error::RuntimeError(format!("{}{}", super::caller_where(lua), error_text(&e)))
    })
}

/// Lua's name for a value's type, as in "bad argument" errors.
pub fn arg_type(v: &Value) -> &'static str {
    match v {
        Value::Nil => "nil",
        Value::Boolean(_) => "boolean",
        Value::Integer(_) | Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Table(_) => "table",
        Value::Function(_) => "function",
        Value::Thread(_) => "thread",
        _ => "userdata",
    }
}

/// loadstring / load for scripts: (function) or (nil, message), as Lua 5.1 answers.
/// Chunks are only ever loaded as text (the loader's own text-only mode), so
/// precompiled bytecode, which can break the VM's memory safety, never runs, whatever
/// a script did to the string metatable or the globals. Redis's Lua has no binary
/// loader and parses such a chunk as text, failing on its first byte (ESC); a leading
/// space makes the parser do the same here, giving Redis's message word for word.
fn load_text(lua: &Lua, src: &[u8], name: &[u8]) -> mlua::Result<(Value, Option<String>)> {
    // The name reaches Lua as a C string: it ends at the first NUL.
    let name = name.split(|&c| c == 0).next().unwrap_or_default();
    let binary = src.first() == Some(&27);
    let mut text = Vec::with_capacity(src.len() + 1);
    if binary {
        text.push(b' ');
    }
    text.extend_from_slice(src);
    let loaded = lua
        .load(&text[..])
        .set_name(String::from_utf8_lossy(name).into_owned())
        .set_mode(ChunkMode::Text)
        .into_function();
    match loaded {
        Ok(f) => Ok((Value::Function(f), None)),
        Err(e) => Ok((Value::Nil, Some(error_text(&e)))),
    }
}

/// A redis lib call's arguments as a command's words (luaArgsToRedisArgv): strings,
/// integers, and numbers as `%.17g`; the error text otherwise.
fn lua_argv(args: &MultiValue) -> Result<Vec<Vec<u8>>, &'static str> {
    if args.is_empty() {
        return Err("ERR Please specify at least one argument for this redis lib call");
    }
    let mut argv = Vec::with_capacity(args.len());
    for a in args.iter() {
        match a {
            Value::String(s) => argv.push(s.as_bytes().to_vec()),
            Value::Integer(i) => argv.push(i.to_string().into_bytes()),
            Value::Number(n) => argv.push(format_g(*n, 17).into_bytes()),
            _ => return Err("ERR Lua redis lib command arguments must be strings or integers"),
        }
    }
    Ok(argv)
}

/// `redis.acl_check_cmd`'s transport: true / false, or the error text to raise.
fn acl_check(lua: &Lua, st: &Rc<RunState>, args: MultiValue) -> mlua::Result<Value> {
    let text = |e: &str| Ok(Value::String(lua.create_string(e)?));
    let argv = match lua_argv(&args) {
        Ok(argv) => argv,
        Err(e) => return text(e),
    };
    let Some(mut handler) = st.link.borrow_mut().take() else {
        return text("ERR redis.acl_check_cmd can only be called inside a script invocation");
    };
    let reply = handler(Call {
        argv,
        resp3: false,
        repl: crate::effects::REPL_ALL,
        ro: false,
        allow_oom: false,
        acl_check_only: true,
    });
    *st.link.borrow_mut() = Some(handler);
    match reply.as_slice() {
        b":1\r\n" => Ok(Value::Boolean(true)),
        b":0\r\n" => Ok(Value::Boolean(false)),
        other => {
            let e = String::from_utf8_lossy(other);
            text(e.trim_start_matches('-').trim_end())
        }
    }
}

/// `redis.call` / `redis.pcall`'s transport: (reply as a Lua value, is an error).
fn redis_call(lua: &Lua, st: &Rc<RunState>, args: MultiValue) -> mlua::Result<(Value, bool)> {
    let argv = match lua_argv(&args) {
        Ok(argv) => argv,
        Err(e) => return Ok((err_table(lua, e)?, true)),
    };
    serve_if_slow(st);
    let call = Call {
        argv,
        resp3: st.resp3.get(),
        repl: st.repl.get(),
        ro: st.ro.get(),
        allow_oom: st.allow_oom.get(),
        acl_check_only: false,
    };
    // The handler is taken out while it runs: the nested loop it may run serves other
    // tasks, none of which can reach this VM (it is out of its slot).
    let Some(mut handler) = st.link.borrow_mut().take() else {
        let e = "ERR redis.call/pcall can only be called inside a script invocation";
        return Ok((err_table(lua, e)?, true));
    };
    let reply = handler(call);
    *st.link.borrow_mut() = Some(handler);
    let (v, failed) = resp_to_lua(lua, &reply)?;
    if let (true, Value::Table(t)) = (failed, &v) {
        t.raw_set(COUNTED_FIELD, true)?;
    }
    Ok((v, failed))
}
