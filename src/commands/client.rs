//! Connection commands (Redis's networking.c / server.c parts): PING, ECHO, SELECT,
//! AUTH, HELLO, QUIT, RESET and the CLIENT container.

use std::future::Future;
use std::pin::Pin;

use super::keys::reply_help;
use super::strings::cmd;
use super::table::{flags::*, CommandSpec, KeySpec, Kind};
use super::{parse_i64, ClientCtx, GlobalCtx, DB_INDEX_OUT_OF_RANGE, NOT_INT, SYNTAX_ERR};
use crate::clients::{ClientType, ReplyMode};
use crate::protocol::reply::{Protocol, ReplyWriter};

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

macro_rules! ccmd {
    ($name:expr, $arity:expr, $flags:expr, $kind:expr, $since:expr, $summary:expr) => {
        CommandSpec {
            group: "connection",
            acl: &["@connection"],
            ..cmd!(
                $name,
                $arity,
                $flags,
                KeySpec::None,
                $kind,
                $since,
                $summary
            )
        }
    };
}

#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    ccmd!("ping", -1, FAST, Kind::Client(ping), "1.0.0", "Ping the server"),
    ccmd!("echo", 2, LOADING | STALE | FAST, Kind::Client(echo), "1.0.0", "Echo the given string"),
    ccmd!("select", 2, LOADING | STALE | FAST, Kind::Client(select), "1.0.0", "Change the selected database for the current connection"),
    ccmd!("auth", -2, NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY, Kind::Client(auth), "1.0.0", "Authenticate to the server"),
    ccmd!("hello", -1, NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY, Kind::Client(hello), "6.0.0", "Handshake with Redis"),
    ccmd!("quit", -1, NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY, Kind::Client(quit), "1.0.0", "Close the connection"),
    ccmd!("reset", 1, NOSCRIPT | LOADING | STALE | FAST | NO_AUTH, Kind::Global(reset), "6.2.0", "Reset the connection"),
    CommandSpec { acl: &[], ..ccmd!("client", -2, NOSCRIPT | LOADING | STALE, Kind::Global(client), "2.4.0", "A container for client connection commands") },
];

fn ping(ctx: &mut ClientCtx) {
    // A subscribed RESP2 client gets PING's reply in the shape of a message.
    let subscribed = ctx.session.shared.pubsub.active();
    if subscribed && ctx.session.proto == Protocol::Resp2 && ctx.args.len() <= 2 {
        ctx.out.array_len(2);
        ctx.out.bulk(b"pong");
        ctx.out.bulk(ctx.args.get(1));
        return;
    }
    match ctx.args.len() {
        1 => ctx.out.simple("PONG"),
        2 => ctx.out.bulk(ctx.args.get(1)),
        _ => ctx
            .out
            .error("ERR wrong number of arguments for 'ping' command"),
    }
}

fn echo(ctx: &mut ClientCtx) {
    ctx.out.bulk(ctx.args.get(1));
}

fn select(ctx: &mut ClientCtx) {
    let dbs = ctx.session.cell.data.borrow().dbs.len();
    match parse_i64(ctx.args.get(1)) {
        None => ctx.out.error(NOT_INT),
        Some(n) if n != 0 && crate::cluster::enabled() => {
            ctx.out.error("ERR SELECT is not allowed in cluster mode")
        }
        Some(n) if n < 0 || n as usize >= dbs => ctx.out.error(DB_INDEX_OUT_OF_RANGE),
        Some(n) => {
            ctx.session.set_db(n as usize);
            ctx.out.ok();
        }
    }
}

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// Authenticates the client as `user` (ACLAuthenticateUser): on failure an `auth`
/// entry goes to ACL LOG, naming the command as the client typed it.
fn authenticate(ctx: &mut ClientCtx, user: &[u8], pass: &[u8]) -> Result<(), &'static str> {
    match crate::acl::authenticate(user, pass) {
        Some(u) => {
            ctx.session.authenticated = true;
            ctx.session.set_user(u);
            Ok(())
        }
        None => {
            let context = if ctx.session.multi.is_some() {
                crate::acl::log::Context::Multi
            } else {
                crate::acl::log::Context::Toplevel
            };
            crate::acl::log::add_for(
                ctx.session,
                "auth",
                context,
                ctx.args.get(0).to_vec(),
                Some(user.to_vec()),
            );
            Err(WRONGPASS)
        }
    }
}

fn auth(ctx: &mut ClientCtx) {
    let (user, pass) = match ctx.args.len() {
        2 => (&b"default"[..], ctx.args.get(1)),
        3 => (ctx.args.get(1), ctx.args.get(2)),
        _ => return ctx.out.error(SYNTAX_ERR),
    };
    if ctx.args.len() == 2 && crate::acl::default().nopass() {
        return ctx.out.error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
    }
    match authenticate(ctx, user, pass) {
        Ok(()) => ctx.out.ok(),
        Err(e) => ctx.out.error(e),
    }
}

fn valid_client_name(name: &[u8]) -> bool {
    name.iter().all(|&c| (b'!'..=b'~').contains(&c))
}

const BAD_NAME: &str = "ERR Client names cannot contain spaces, newlines or special characters.";

fn hello(ctx: &mut ClientCtx) {
    let mut proto = ctx.session.proto;
    if ctx.args.len() >= 2 {
        match parse_i64(ctx.args.get(1)) {
            None => {
                return ctx
                    .out
                    .error("ERR Protocol version is not an integer or out of range")
            }
            Some(2) => proto = Protocol::Resp2,
            Some(3) => proto = Protocol::Resp3,
            Some(_) => return ctx.out.error("NOPROTO unsupported protocol version"),
        }
    }
    let mut name = None;
    let mut i = 2;
    while i < ctx.args.len() {
        let more = ctx.args.len() - i - 1;
        if ctx.args.is(i, "auth") && more >= 2 {
            if let Err(e) = authenticate(ctx, ctx.args.get(i + 1), ctx.args.get(i + 2)) {
                return ctx.out.error(e);
            }
            i += 3;
        } else if ctx.args.is(i, "setname") && more >= 1 {
            let n = ctx.args.get(i + 1);
            if !valid_client_name(n) {
                return ctx.out.error(BAD_NAME);
            }
            name = Some(n.to_vec());
            i += 2;
        } else {
            return ctx.out.error(&format!(
                "ERR Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(ctx.args.get(i))
            ));
        }
    }
    if !ctx.session.authenticated {
        return ctx.out.error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
    }
    if let Some(n) = name {
        *ctx.session.shared.name.borrow_mut() = if n.is_empty() { None } else { Some(n) };
    }
    ctx.session.set_proto(proto);
    ctx.out.proto = proto;
    let id = ctx.session.id() as i64;
    let out = &mut ctx.out;
    out.map_len(7);
    out.bulk(b"server");
    out.bulk(b"redis");
    out.bulk(b"version");
    out.bulk(crate::server::REDIS_VERSION.as_bytes());
    out.bulk(b"proto");
    out.integer(if proto == Protocol::Resp3 { 3 } else { 2 });
    out.bulk(b"id");
    out.integer(id);
    out.bulk(b"mode");
    out.bulk(b"standalone");
    out.bulk(b"role");
    out.bulk(b"master");
    out.bulk(b"modules");
    out.array_len(0);
}

fn quit(ctx: &mut ClientCtx) {
    ctx.out.ok();
    ctx.session.close_after_reply = true;
}

/// RESET (Redis's clearClientConnectionState): discards a transaction and the WATCHes,
/// leaves Pub/Sub and tracking, back to db 0, RESP2, replies on, no name.
fn reset<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        g.session.multi = None;
        g.session.shared.multi_count.set(-1);
        super::multi::unwatch_all(g.session).await;
        set_no_touch(g.session, false).await;
        reset_connection(g.session);
        g.w().simple("RESET");
    })
}

fn reset_connection(s: &mut crate::clients::Session) {
    s.set_db(0);
    s.set_proto(Protocol::Resp2);
    s.reply_mode = ReplyMode::On;
    *s.shared.name.borrow_mut() = None;
    s.shared.no_evict.set(false);
    crate::pubsub::unsubscribe_all_silently(&s.shared);
    crate::tracking::disable(s);
    s.authenticated = crate::acl::default_needs_no_auth();
    s.set_user(crate::acl::default());
}

const CLIENT_HELP: &[&str] = &[
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CACHING (YES|NO)",
    "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
    "GETREDIR",
    "    Return the client ID we are redirecting to when tracking is enabled.",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are:",
    "    * ADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made from the specified address",
    "    * LADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made to specified local address",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Kill connections by type.",
    "    * USER <username>",
    "      Kill connections authenticated by <username>.",
    "    * SKIPME (YES|NO)",
    "      Skip killing current connection (default: yes).",
    "    * ID <client-id>",
    "      Kill connections by client id.",
    "    * MAXAGE <maxage>",
    "      Kill connections older than the specified age.",
    "LIST [options ...]",
    "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Return clients of specified type.",
    "UNPAUSE",
    "    Stop the current client pause, resuming traffic.",
    "PAUSE <timeout> [WRITE|ALL]",
    "    Suspend all, or just write, clients for <timeout> milliseconds.",
    "REPLY (ON|OFF|SKIP)",
    "    Control the replies sent to the current connection.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "SETINFO <option> <value>",
    "    Set client meta attr. Options are:",
    "    * LIB-NAME: the client lib name.",
    "    * LIB-VER: the client lib version.",
    "UNBLOCK <clientid> [TIMEOUT|ERROR]",
    "    Unblock the specified blocked client.",
    "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
    "         [OPTIN] [OPTOUT] [NOLOOP]",
    "    Control server assisted client side caching.",
    "TRACKINGINFO",
    "    Report tracking status for the current connection.",
    "NO-EVICT (ON|OFF)",
    "    Protect current client connection from eviction.",
    "NO-TOUCH (ON|OFF)",
    "    Will not touch LRU/LFU stats when this mode is on.",
    "HELP",
    "    Print this help.",
];

fn client<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let sub = String::from_utf8_lossy(&g.args[1]).to_ascii_lowercase();
        let argc = g.args.len();
        let arity_err = |g: &mut GlobalCtx, sub: &str| {
            g.w().error(&format!(
                "ERR wrong number of arguments for 'client|{sub}' command"
            ))
        };
        match sub.as_str() {
            "help" if argc == 2 => reply_help(&mut g.w(), CLIENT_HELP),
            "id" if argc == 2 => {
                let id = g.session.id() as i64;
                g.w().integer(id)
            }
            "id" => arity_err(g, &sub),
            "getname" if argc == 2 => {
                let name = g.session.shared.name.borrow().clone();
                match name {
                    Some(n) => g.w().bulk(&n),
                    None => g.w().null(),
                }
            }
            "setname" if argc == 3 => {
                let n = g.args[2].clone();
                if !valid_client_name(&n) {
                    return g.w().error(BAD_NAME);
                }
                *g.session.shared.name.borrow_mut() = if n.is_empty() { None } else { Some(n) };
                g.w().ok()
            }
            "setinfo" if argc == 4 => client_setinfo(g),
            "info" if argc == 2 => {
                let line = g.session.shared.info_line(crate::util::now_ms()) + "\n";
                g.w().verbatim("txt", line.as_bytes())
            }
            "list" => client_list(g).await,
            "tracking" if argc >= 3 => {
                let args = g.args.clone();
                match crate::tracking::client_tracking(g.session, &args).await {
                    Ok(()) => g.w().ok(),
                    Err(e) => g.w().error(&e),
                }
            }
            "caching" if argc >= 3 => {
                match crate::tracking::client_caching(&g.session.shared.tracking, &g.args[2]) {
                    Ok(()) => g.w().ok(),
                    Err(e) => g.w().error(e),
                }
            }
            "getredir" if argc == 2 => {
                let r = g.session.shared.tracking.redir_field();
                g.w().integer(r)
            }
            "trackinginfo" if argc == 2 => {
                let shared = g.session.shared.clone();
                crate::tracking::write_info(&shared.tracking, &mut g.w())
            }
            "kill" if argc >= 3 => client_kill(g).await,
            "reply" if argc == 3 => {
                let mode = if g.is(2, "on") {
                    ReplyMode::On
                } else if g.is(2, "off") {
                    ReplyMode::Off
                } else if g.is(2, "skip") {
                    ReplyMode::Skip
                } else {
                    return g.w().error(SYNTAX_ERR);
                };
                g.session.reply_mode = mode;
                if mode == ReplyMode::On {
                    g.w().ok();
                }
            }
            "no-evict" if argc == 3 => {
                if g.is(2, "on") {
                    g.session.shared.no_evict.set(true);
                } else if g.is(2, "off") {
                    g.session.shared.no_evict.set(false);
                } else {
                    return g.w().error(SYNTAX_ERR);
                }
                g.w().ok()
            }
            "no-touch" if argc == 3 => {
                let on = if g.is(2, "on") {
                    true
                } else if g.is(2, "off") {
                    false
                } else {
                    return g.w().error(SYNTAX_ERR);
                };
                set_no_touch(g.session, on).await;
                g.w().ok()
            }
            "pause" if argc == 3 || argc == 4 => {
                // Redis checks the mode before the timeout.
                let writes_only = if argc == 4 {
                    if g.is(3, "write") {
                        true
                    } else if g.is(3, "all") {
                        false
                    } else {
                        return g.w().error("ERR CLIENT PAUSE mode must be WRITE or ALL");
                    }
                } else {
                    false
                };
                let Some(ms) = parse_i64(&g.args[2]) else {
                    return g.w().error("ERR timeout is not an integer or out of range");
                };
                if ms < 0 {
                    return g.w().error("ERR timeout is negative");
                }
                let now = crate::util::now_ms();
                if ms > i64::MAX - now as i64 {
                    return g.w().error("ERR timeout is out of range");
                }
                // A zero timeout is an end time of 0: it extends nothing (Redis).
                let until = if ms > 0 { now + ms as u64 } else { 0 };
                g.session
                    .cell
                    .call_all(move |c| c.data.borrow_mut().pause_clients(until, writes_only))
                    .await;
                g.w().ok()
            }
            "unpause" if argc == 2 => {
                g.session
                    .cell
                    .call_all(|c| c.data.borrow_mut().unpause_clients())
                    .await;
                g.w().ok()
            }
            "unblock" if argc == 3 || argc == 4 => client_unblock(g).await,
            "getname" | "setname" | "setinfo" | "info" | "kill" | "reply" | "no-evict"
            | "no-touch" | "pause" | "unpause" | "help" | "unblock" | "tracking" | "caching"
            | "getredir" | "trackinginfo" => arity_err(g, &sub),
            _ => g.unknown_subcommand("CLIENT"),
        }
    })
}

/// CLIENT NO-TOUCH ON|OFF (Redis 7.2): every shard learns the client's id, so its
/// executor leaves the access clock of the keys this client reads alone (a set that
/// stays empty costs the executor one test while nobody uses it).
pub async fn set_no_touch(session: &mut crate::clients::Session, on: bool) {
    if session.shared.no_touch.replace(on) == on {
        return;
    }
    let id = session.id();
    session
        .cell
        .call_all(move |c| {
            let set = &mut c.data.borrow_mut().no_touch_clients;
            if on {
                set.insert(id);
            } else {
                set.remove(&id);
            }
        })
        .await;
}

/// CLIENT SETINFO lib-name|lib-ver value (Redis 7.2): printable ASCII without spaces,
/// so that CLIENT LIST stays splittable by space; empty clears it.
fn client_setinfo(g: &mut GlobalCtx<'_>) {
    let attr = String::from_utf8_lossy(&g.args[2]).into_owned();
    // Redis checks and prints the value as a C string: a NUL ends it there.
    let value: Vec<u8> = g.args[3].iter().copied().take_while(|&b| b != 0).collect();
    let slot = match attr.to_ascii_lowercase().as_str() {
        "lib-name" => &g.session.shared.lib_name,
        "lib-ver" => &g.session.shared.lib_ver,
        _ => return g.w().error(&format!("ERR Unrecognized option '{attr}'")),
    };
    if value.iter().any(|b| !(b'!'..=b'~').contains(b)) {
        return g.w().error(&format!(
            "ERR {attr} cannot contain spaces, newlines or special characters."
        ));
    }
    *slot.borrow_mut() = (!value.is_empty()).then_some(value);
    g.w().ok()
}

/// CLIENT UNBLOCK id [TIMEOUT|ERROR]: ends a blocking command of another client, as
/// if it timed out or with an error. :1 if that client was blocked.
async fn client_unblock(g: &mut GlobalCtx<'_>) {
    use crate::shard::blocking::{UNBLOCK_ERROR, UNBLOCK_TIMEOUT};
    let Some(id) = parse_i64(&g.args[2]) else {
        return g.w().error(NOT_INT);
    };
    let mode = if g.args.len() == 3 || g.is(3, "timeout") {
        UNBLOCK_TIMEOUT
    } else if g.is(3, "error") {
        UNBLOCK_ERROR
    } else {
        return g
            .w()
            .error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR");
    };
    let found = g
        .session
        .cell
        .call_all(move |c| {
            let clients = c.clients.borrow();
            let Some(client) = clients.get(id as u64) else {
                return false;
            };
            let state = client.blocked.borrow();
            match state.as_ref() {
                Some(s) if s.unblock_mode() == 0 => {
                    s.unblock(mode);
                    true
                }
                _ => false,
            }
        })
        .await;
    let n = found.into_iter().any(|f| f) as i64;
    g.w().integer(n)
}

async fn client_list(g: &mut GlobalCtx<'_>) {
    let mut ids: Option<Vec<u64>> = None;
    let mut kind: Option<ClientType> = None;
    let mut i = 2;
    while i < g.args.len() {
        if g.is(i, "type") && i + 1 < g.args.len() {
            match ClientType::parse(&g.args[i + 1]) {
                Some(t) => kind = Some(t),
                None => {
                    let msg = format!(
                        "ERR Unknown client type '{}'",
                        String::from_utf8_lossy(&g.args[i + 1])
                    );
                    return g.error(&msg);
                }
            }
            i += 2;
        } else if g.is(i, "id") && i + 1 < g.args.len() {
            let mut v = Vec::new();
            for a in &g.args[i + 1..] {
                match parse_i64(a) {
                    Some(n) if n > 0 => v.push(n as u64),
                    _ => return g.w().error("ERR Invalid client ID"),
                }
            }
            ids = Some(v);
            i = g.args.len();
        } else {
            return g.w().error(SYNTAX_ERR);
        }
    }
    let lines = g
        .session
        .cell
        .call_all(move |c| {
            let now = crate::util::now_ms();
            let reg = c.clients.borrow();
            let mut v: Vec<(u64, String)> = reg
                .iter()
                .filter(|cl| {
                    kind.is_none_or(|k| cl.client_type() == k)
                        && ids.as_ref().is_none_or(|ids| ids.contains(&cl.id))
                })
                .map(|cl| (cl.id, cl.info_line(now)))
                .collect();
            v.sort();
            v
        })
        .await;
    let mut all: Vec<(u64, String)> = lines.into_iter().flatten().collect();
    all.sort();
    let mut text = String::new();
    for (_, l) in all {
        text.push_str(&l);
        text.push('\n');
    }
    g.w().verbatim("txt", text.as_bytes());
}

#[derive(Clone, Default)]
struct KillFilter {
    id: Option<u64>,
    addr: Option<String>,
    laddr: Option<String>,
    skip_me: bool,
    max_age: Option<u64>,
    kind: Option<ClientType>,
    /// The ACL user's identity.
    user: Option<u64>,
}

/// CLIENT KILL MAXAGE's value (Redis 7.4): seconds, at least 1, with 7.4.1's texts.
fn parse_max_age(arg: &[u8]) -> Result<u64, &'static str> {
    match parse_i64(arg) {
        None => Err("ERR maxage is not an integer or out of range"),
        Some(n) if n <= 0 => Err("ERR maxage should be greater than 0"),
        Some(n) => Ok(n as u64),
    }
}

/// A client's age as MAXAGE judges it: whole seconds now minus whole seconds at
/// connect (Redis keeps ctime in seconds), so a client that connected at x.9 s is a
/// second old at (x+1).0 s, as in Redis.
fn age_secs(now_ms: u64, created_ms: u64) -> u64 {
    (now_ms / 1000).saturating_sub(created_ms / 1000)
}

async fn client_kill(g: &mut GlobalCtx<'_>) {
    let me = g.session.id();
    let old_style = g.args.len() == 3;
    let mut f = KillFilter {
        skip_me: true,
        ..Default::default()
    };
    if old_style {
        f.addr = Some(String::from_utf8_lossy(&g.args[2]).into_owned());
        f.skip_me = false;
    } else {
        let mut i = 2;
        while i + 1 < g.args.len() {
            let v = String::from_utf8_lossy(&g.args[i + 1]).into_owned();
            if g.is(i, "id") {
                match parse_i64(&g.args[i + 1]) {
                    Some(n) if n > 0 => f.id = Some(n as u64),
                    _ => return g.w().error("ERR client-id should be greater than 0"),
                }
            } else if g.is(i, "addr") {
                f.addr = Some(v);
            } else if g.is(i, "laddr") {
                f.laddr = Some(v);
            } else if g.is(i, "skipme") {
                match v.to_ascii_lowercase().as_str() {
                    "yes" => f.skip_me = true,
                    "no" => f.skip_me = false,
                    _ => return g.w().error(SYNTAX_ERR),
                }
            } else if g.is(i, "maxage") {
                match parse_max_age(&g.args[i + 1]) {
                    Ok(secs) => f.max_age = Some(secs),
                    Err(e) => return g.w().error(e),
                }
            } else if g.is(i, "user") {
                match crate::acl::get(&g.args[i + 1]) {
                    Some(u) => f.user = Some(u.uid),
                    None => return g.w().error(&format!("ERR No such user '{v}'")),
                }
            } else if g.is(i, "type") {
                match ClientType::parse(&g.args[i + 1]) {
                    Some(t) => f.kind = Some(t),
                    None => return g.w().error(&format!("ERR Unknown client type '{v}'")),
                }
            } else {
                return g.w().error(SYNTAX_ERR);
            }
            i += 2;
        }
        if i != g.args.len() {
            return g.w().error(SYNTAX_ERR);
        }
    }
    let filter = f.clone();
    let killed: usize = g
        .session
        .cell
        .call_all(move |c| {
            let now = crate::util::now_ms();
            let reg = c.clients.borrow();
            let mut n = 0;
            for cl in reg.iter() {
                let f = &filter;
                let matches = f.kind.is_none_or(|k| cl.client_type() == k)
                    && f.id.is_none_or(|id| id == cl.id)
                    && f.addr.as_deref().is_none_or(|a| a == cl.addr.to_string())
                    && f.laddr.as_deref().is_none_or(|a| a == cl.laddr.to_string())
                    && f.max_age.is_none_or(|m| age_secs(now, cl.created_ms) >= m)
                    && f.user.is_none_or(|uid| cl.user.borrow().uid == uid)
                    && !(f.skip_me && cl.id == me);
                if matches {
                    if cl.id == me {
                        // Killing ourselves: finish this reply first, then close.
                        cl.killed.set(true);
                    } else {
                        cl.kill();
                    }
                    n += 1;
                }
            }
            n
        })
        .await
        .into_iter()
        .sum();
    if g.session.shared.killed.get() {
        g.session.close_after_reply = true;
    }
    if old_style {
        if killed == 0 {
            g.w().error("ERR No such client");
        } else {
            g.w().ok();
        }
    } else {
        g.w().integer(killed as i64);
    }
}

#[allow(dead_code)]
fn _unused(_: &mut ReplyWriter) {}
