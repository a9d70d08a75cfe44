//! ACL: users, their rules, the log, the ACL file (Redis 7.0's aclCommand). The
//! users themselves live in `crate::acl`; this is the command and the part that
//! reaches connections on every shard (closing those whose user is deleted, or whose
//! Pub/Sub subscriptions a change no longer allows).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::keys::reply_help;
use super::strings::cmd;
use super::table::{self, CommandSpec, KeySpec, Kind};
use super::{parse_i64, GlobalCtx, NOT_INT};
use crate::acl::{self, categories, User};
use crate::protocol::reply::ReplyWriter;

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

pub static COMMANDS: &[CommandSpec] = &[CommandSpec {
    group: "server",
    acl: &["@slow"],
    ..cmd!(
        "acl",
        -2,
        0,
        KeySpec::None,
        Kind::Global(acl),
        "6.0.0",
        "A container for Access List Control commands"
    )
}];

const HELP: &[&str] = &[
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Prints this help.",
];

const NO_ACL_FILE: &str = "ERR This Redis instance is not configured to use an ACL file. You \
may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE \
(assuming you have a Redis configuration file set) in order to store users in the Redis \
configuration.";

const GENPASS_MAX_BITS: i64 = 4096;

fn acl<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let sub = String::from_utf8_lossy(&g.args[1]).to_ascii_lowercase();
        let argc = g.args.len();
        match (sub.as_str(), argc) {
            ("setuser", 3..) => setuser(g).await,
            ("deluser", 3..) => deluser(g).await,
            ("getuser", 3) => getuser(g),
            ("list", 2) => list(g, false),
            ("users", 2) => list(g, true),
            ("whoami", 2) => {
                let name = g.session.shared.user.borrow().name.clone();
                g.w().bulk(&name);
            }
            ("load" | "save", _) if g.session.cell.data.borrow().config.aclfile().is_none() => {
                g.w().error(NO_ACL_FILE)
            }
            ("load", 2) => load(g).await,
            ("save", 2) => save(g),
            ("cat", 2) => {
                let mut w = g.w();
                w.array_len(categories::NAMES.len());
                for c in categories::NAMES {
                    w.bulk(c.as_bytes());
                }
            }
            ("cat", 3) => cat(g),
            ("genpass", 2 | 3) => genpass(g),
            ("log", 2 | 3) => log(g),
            ("dryrun", 4..) => dryrun(g),
            ("help", 2) => reply_help(&mut g.w(), HELP),
            _ => g.subcommand_syntax_error("ACL"),
        }
    })
}

async fn setuser(g: &mut GlobalCtx<'_>) {
    let name = g.args[2].clone();
    if acl::user::has_spaces(&name) {
        return g
            .w()
            .error("ERR Usernames can't contain spaces or null characters");
    }
    match acl::set_user(&name, &g.args[3..]) {
        Ok((Some(old), new)) => {
            kill_pubsub_clients_if_needed(g, &old, &new).await;
            g.w().ok();
        }
        Ok((None, _)) => g.w().ok(),
        Err(e) => g.w().error(&e),
    }
}

async fn deluser(g: &mut GlobalCtx<'_>) {
    let names: Vec<&[u8]> = g.args[2..].iter().map(Vec::as_slice).collect();
    match acl::delete_users(&names) {
        Ok(removed) => {
            let uids = removed.iter().map(|u| u.uid).collect();
            kill_users(g, uids).await;
            g.w().integer(removed.len() as i64);
        }
        Err(e) => g.w().error(e),
    }
}

fn getuser(g: &mut GlobalCtx<'_>) {
    let Some(u) = acl::get(&g.args[2]) else {
        return g.w().null();
    };
    let mut w = g.w();
    w.map_len(6);
    w.bulk(b"flags");
    let flags: Vec<&str> = u.flags.names().collect();
    w.set_len(flags.len());
    for f in flags {
        w.bulk(f.as_bytes());
    }
    w.bulk(b"passwords");
    w.array_len(u.passwords.len());
    for p in &u.passwords {
        w.bulk(p.as_bytes());
    }
    selector_fields(&mut w, u.root());
    w.bulk(b"selectors");
    w.array_len(u.selectors.len() - 1);
    for s in &u.selectors[1..] {
        w.map_len(3);
        selector_fields(&mut w, s);
    }
}

fn selector_fields(w: &mut ReplyWriter, s: &acl::user::Selector) {
    w.bulk(b"commands");
    w.bulk(&s.describe_commands());
    w.bulk(b"keys");
    w.bulk(&s.keys_field());
    w.bulk(b"channels");
    w.bulk(&s.channels_field());
}

/// ACL LIST (`user <name> <rules>` lines) or ACL USERS (names).
fn list(g: &mut GlobalCtx<'_>, names_only: bool) {
    let users = acl::users();
    let mut w = g.w();
    w.array_len(users.len());
    for u in users {
        if names_only {
            w.bulk(&u.name);
        } else {
            let mut line = b"user ".to_vec();
            line.extend_from_slice(&u.name);
            line.push(b' ');
            line.extend_from_slice(&u.describe());
            w.bulk(&line);
        }
    }
}

async fn load(g: &mut GlobalCtx<'_>) {
    let (path, dir) = acl_file(g);
    match acl::load_file(&path, &dir) {
        Ok(removed) => {
            let uids = removed.iter().map(|u| u.uid).collect();
            kill_users(g, uids).await;
            g.w().ok();
        }
        Err(e) => g.w().error(&format!("ERR {e}")),
    }
}

fn save(g: &mut GlobalCtx<'_>) {
    let (path, dir) = acl_file(g);
    match acl::save_file(&path, &dir) {
        Ok(()) => g.w().ok(),
        Err(e) => {
            tracing::warn!("{e}");
            g.w().error(
                "ERR There was an error trying to save the ACLs. Please check the server logs \
                 for more information",
            )
        }
    }
}

/// `aclfile` as configured, and `dir` (where a relative one is).
fn acl_file(g: &GlobalCtx<'_>) -> (String, String) {
    let data = g.session.cell.data.borrow();
    let path = data.config.aclfile().unwrap_or_default().to_string();
    (path, data.config.dir().to_string())
}

fn cat(g: &mut GlobalCtx<'_>) {
    let name = String::from_utf8_lossy(&g.args[2]).into_owned();
    let Some(flag) = categories::flag_of(&name) else {
        let shown: String = name.chars().take(128).collect();
        return g.w().error(&format!("ERR Unknown category '{shown}'"));
    };
    let ids: Vec<u16> = categories::ids_in(flag).collect();
    let mut w = g.w();
    w.array_len(ids.len());
    for id in ids {
        w.bulk(categories::full_name(id).as_bytes());
    }
}

fn genpass(g: &mut GlobalCtx<'_>) {
    let bits = match g.args.get(2) {
        None => 256,
        Some(a) => match parse_i64(a) {
            Some(n) => n,
            None => return g.w().error(NOT_INT),
        },
    };
    if bits <= 0 || bits > GENPASS_MAX_BITS {
        return g.w().error(&format!(
            "ERR ACL GENPASS argument must be the number of bits for the output password, a \
             positive number up to {GENPASS_MAX_BITS}"
        ));
    }
    let pass = crate::util::random_hex(bits as usize);
    g.w().bulk(pass.as_bytes());
}

fn log(g: &mut GlobalCtx<'_>) {
    let mut count = 10;
    if let Some(a) = g.args.get(2) {
        if a.eq_ignore_ascii_case(b"reset") {
            acl::log::reset();
            return g.w().ok();
        }
        match parse_i64(a) {
            Some(n) => count = n.max(0) as usize,
            None => return g.w().error(NOT_INT),
        }
    }
    acl::log::reply(&mut g.w(), count, crate::util::now_ms());
}

/// ACL DRYRUN user command args...: whether the user could run it, without running
/// it (a denial is a plain string, not an error).
fn dryrun(g: &mut GlobalCtx<'_>) {
    let Some(u) = acl::get(&g.args[2]) else {
        let name = String::from_utf8_lossy(&g.args[2]).into_owned();
        return g.w().error(&format!("ERR User '{name}' not found"));
    };
    let argv = g.args[3..].to_vec();
    let owned = super::OwnedArgs::new(&argv);
    let args = owned.args();
    let t = table::table();
    let Some(id) = t.lookup_argv(&args) else {
        let name = String::from_utf8_lossy(args.get(0)).into_owned();
        return g.w().error(&format!("ERR Command '{name}' not found"));
    };
    let arity = match t.stat_sub(id) {
        Some(s) => s.arity,
        None => t.specs[id as usize].arity,
    };
    if !table::arity_allows(arity, args.len()) {
        return g.w().error(&format!(
            "ERR wrong number of arguments for '{}' command",
            t.stat_name(id)
        ));
    }
    match acl::check(&u, id, &args) {
        Ok(()) => g.w().ok(),
        Err((denial, pos)) => {
            let what = match denial {
                acl::Denial::Command => {
                    format!("the '{}' command", t.stat_name(id))
                }
                acl::Denial::Key => {
                    format!("the '{}' key", String::from_utf8_lossy(args.get(pos)))
                }
                acl::Denial::Channel => {
                    format!("the '{}' channel", String::from_utf8_lossy(args.get(pos)))
                }
            };
            let verb = if denial == acl::Denial::Command {
                "run"
            } else {
                "access"
            };
            let msg = format!("This user has no permissions to {verb} {what}");
            g.w().bulk(msg.as_bytes());
        }
    }
}

/// Closes every connection authenticated as one of these users (by identity), on
/// every shard; the calling client, if one of them, once this reply is written.
pub(crate) async fn kill_users(g: &mut GlobalCtx<'_>, uids: Vec<u64>) {
    if uids.is_empty() {
        return;
    }
    let me = g.session.id();
    g.session
        .cell
        .call_all(move |c| {
            for cl in c.clients.borrow().iter() {
                if uids.contains(&cl.user.borrow().uid) {
                    close_client(cl, me);
                }
            }
        })
        .await;
    if g.session.shared.killed.get() {
        g.session.close_after_reply = true;
    }
}

fn close_client(cl: &crate::clients::ClientShared, me: u64) {
    if cl.id == me {
        cl.killed.set(true);
    } else {
        cl.kill();
    }
}

/// ACLKillPubsubClientsIfNeeded: when a change takes channels away from a user, its
/// subscribed clients whose subscriptions the new rules do not allow are closed.
async fn kill_pubsub_clients_if_needed(g: &mut GlobalCtx<'_>, old: &User, new: &Arc<User>) {
    if new.selectors.iter().any(|s| s.all_channels) {
        return;
    }
    let upcoming: Vec<Vec<u8>> = new
        .selectors
        .iter()
        .flat_map(|s| s.channels.iter().cloned())
        .collect();
    let superset = old
        .selectors
        .iter()
        .all(|s| !s.all_channels && s.channels.iter().all(|c| upcoming.contains(c)));
    if superset {
        return;
    }
    let uid = old.uid;
    let me = g.session.id();
    g.session
        .cell
        .call_all(move |c| {
            for cl in c.clients.borrow().iter() {
                if cl.user.borrow().uid != uid || !cl.pubsub.active() {
                    continue;
                }
                let denied = cl.pubsub.any_subscription(|name, is_pattern| {
                    !acl::check::channel_allowed(&upcoming, name, is_pattern)
                });
                if denied {
                    close_client(cl, me);
                }
            }
        })
        .await;
    if g.session.shared.killed.get() {
        g.session.close_after_reply = true;
    }
}
