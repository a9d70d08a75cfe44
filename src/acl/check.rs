//! Whether a user may run a command (Redis 7.0's ACLCheckAllUserCommandPerm): any
//! selector that allows the command, every key it names (with the read or write
//! access the key's spec says) and every channel it publishes or subscribes to lets
//! it run; otherwise the most relevant denial is reported.

use super::user::{Selector, User};
use crate::commands::{table, Args};

/// Why a command was denied, in Redis's order of relevance (a key or channel
/// denial says more than "no such command").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Denial {
    Command,
    Key,
    Channel,
}

impl Denial {
    /// ACL LOG's `reason`.
    pub fn reason(self) -> &'static str {
        match self {
            Denial::Command => "command",
            Denial::Key => "key",
            Denial::Channel => "channel",
        }
    }

    /// getAclErrorMessage (scripts: "The user executing the script ...").
    pub fn message(self) -> &'static str {
        match self {
            Denial::Command => "can't run this command or subcommand",
            Denial::Key => {
                "can't access at least one of the keys mentioned in the command arguments"
            }
            Denial::Channel => "can't publish to the channel mentioned in the command",
        }
    }

    /// The error a client gets at the top level or when queueing (processCommand).
    pub fn top_level_error(self, command: &str) -> String {
        match self {
            Denial::Command => {
                format!("NOPERM this user has no permissions to run the '{command}' command")
            }
            Denial::Key => {
                "NOPERM this user has no permissions to access one of the keys used as arguments"
                    .into()
            }
            Denial::Channel => "NOPERM this user has no permissions to access one of the \
                                channels used as arguments"
                .into(),
        }
    }

    /// EXEC's error when the rules changed after the command was queued.
    pub fn exec_error(self) -> String {
        let reason = match self {
            Denial::Command => "no permission to execute the command or subcommand",
            Denial::Key => "no permission to touch the specified keys",
            Denial::Channel => "no permission to access one of the channels used as arguments",
        };
        format!(
            "NOPERM ACLs rules changed between the moment the transaction was accumulated and \
             the EXEC call. This command is no longer allowed for the following reason: {reason}"
        )
    }
}

/// Which arguments are channels, and how they are checked (Redis's
/// commands_with_channels, unsubscribes left out: they are never refused).
fn channel_args(name: &str, argc: usize) -> Option<(std::ops::Range<usize>, bool)> {
    match name {
        "subscribe" | "ssubscribe" => Some((1..argc, false)),
        "psubscribe" => Some((1..argc, true)),
        "publish" | "spublish" => Some((1..argc.min(2), false)),
        _ => None,
    }
}

/// Checks command `id` (a stat id: the subcommand's for a container) with `args`
/// (from the command name on). Err gives the denial and the argument it is about.
pub fn check(user: &User, id: u16, args: &Args) -> Result<(), (Denial, usize)> {
    let mut keys: Option<Vec<(usize, u8)>> = None;
    let mut worst = (Denial::Command, 0);
    for s in &user.selectors {
        match check_selector(s, id, args, &mut keys) {
            Ok(()) => return Ok(()),
            Err(d) => {
                if d.0 > worst.0 || (d.0 == worst.0 && d.1 > worst.1) {
                    worst = d;
                }
            }
        }
    }
    Err(worst)
}

fn check_selector(
    s: &Selector,
    id: u16,
    args: &Args,
    keys: &mut Option<Vec<(usize, u8)>>,
) -> Result<(), (Denial, usize)> {
    let t = table::table();
    let flags = t.stat_flags(id);
    if !s.all_commands && flags & table::flags::NO_AUTH == 0 && !s.allows_id(id) {
        let arg_at = if t.stat_sub(id).is_some() { 2 } else { 1 };
        let allowed = args.len() > arg_at
            && s.first_args.get(&id).is_some_and(|list| {
                list.iter()
                    .any(|a| a.eq_ignore_ascii_case(args.get(arg_at)))
            });
        if !allowed {
            return Err((Denial::Command, 0));
        }
    }
    if !s.all_keys {
        let keys = keys.get_or_insert_with(|| crate::commands::server::key_permissions(args));
        for &(pos, perm) in keys.iter() {
            let key = args.get(pos);
            let ok = s.patterns.iter().any(|p| {
                p.perm & perm == perm && crate::util::glob::glob_match(&p.pattern, key, false)
            });
            if !ok {
                return Err((Denial::Key, pos));
            }
        }
    }
    if !s.all_channels {
        let name = t.stat_name(id);
        if let Some((range, is_pattern)) = channel_args(name, args.len()) {
            for pos in range {
                if !channel_allowed(&s.channels, args.get(pos), is_pattern) {
                    return Err((Denial::Channel, pos));
                }
            }
        }
    }
    Ok(())
}

/// A channel against a selector's patterns: a plain channel is matched by the
/// patterns, a subscription pattern only by an identical one.
pub fn channel_allowed(patterns: &[Vec<u8>], channel: &[u8], is_pattern: bool) -> bool {
    patterns.iter().any(|p| {
        if is_pattern {
            p.as_slice() == channel
        } else {
            crate::util::glob::glob_match(p, channel, false)
        }
    })
}

/// ACLUserCheckChannelPerm: whether any selector allows the channel.
pub fn channel_permitted(user: &User, channel: &[u8], is_pattern: bool) -> bool {
    user.selectors
        .iter()
        .any(|s| s.all_channels || channel_allowed(&s.channels, channel, is_pattern))
}

/// ACLUserCheckKeyPerm: whether any selector gives `perm` on `key`.
pub fn key_permitted(user: &User, key: &[u8], perm: u8) -> bool {
    user.selectors.iter().any(|s| {
        s.all_keys
            || s.patterns.iter().any(|p| {
                p.perm & perm == perm && crate::util::glob::glob_match(&p.pattern, key, false)
            })
    })
}

/// ACLUserCheckCmdWithUnrestrictedKeyAccess: the command is allowed by a selector
/// that also has `perm` on every key (SORT's BY / GET need that for reads).
pub fn allowed_with_all_keys(user: &User, id: u16, args: &Args, perm: u8) -> bool {
    let mut keys = None;
    user.selectors
        .iter()
        .any(|s| check_selector(s, id, args, &mut keys).is_ok() && s.unrestricted_keys(perm))
}
