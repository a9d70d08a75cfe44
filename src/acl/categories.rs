//! ACL categories and command ids, from the command table: every command and every
//! subcommand has an id (the table's stat id, as Redis gives each its own command
//! id), and the categories COMMAND INFO lists for it.

use std::sync::OnceLock;

use crate::commands::table;

/// Redis 7.0's categories in its order (ACL CAT, and the order the describer tries
/// them in).
pub const NAMES: [&str; 21] = [
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

struct Universe {
    /// Per id: its category bits (1 << index in NAMES).
    cats: Vec<u32>,
    /// Per id: its full name (`get`, `config|get`).
    names: Vec<&'static str>,
    /// Per id: the ids of its subcommands (empty unless a container).
    subs: Vec<std::ops::Range<u16>>,
}

fn universe() -> &'static Universe {
    static U: OnceLock<Universe> = OnceLock::new();
    U.get_or_init(|| {
        let t = table::table();
        let n = t.stat_count();
        let mut cats = Vec::with_capacity(n);
        let mut names = Vec::with_capacity(n);
        for id in 0..n as u16 {
            let acl = match t.stat_sub(id) {
                Some(s) => s.acl,
                None => t.specs[id as usize].acl,
            };
            let explicit = acl
                .iter()
                .filter_map(|c| flag_of(c.trim_start_matches('@')))
                .fold(0, |a, f| a | f);
            // A container's flags here steer its subcommands' routing; Redis's
            // containers have none, so none of their categories come from flags.
            let container = t.stat_sub(id).is_none() && t.is_container(id);
            let flags = if container { 0 } else { t.stat_flags(id) };
            cats.push(with_implicit(explicit, flags));
            names.push(t.stat_name(id));
        }
        let mut subs = vec![0..0; n];
        let mut next = t.specs.len() as u16;
        for (idx, range) in subs.iter_mut().enumerate().take(t.specs.len()) {
            let count = t.subcommands(idx as u16).len() as u16;
            *range = next..next + count;
            next += count;
        }
        Universe { cats, names, subs }
    })
}

/// Redis's setImplicitACLCategories: the categories a command's flags imply.
fn with_implicit(mut cats: u32, flags: u32) -> u32 {
    use table::flags::*;
    let bit = |name| flag_of(name).unwrap_or(0);
    if flags & WRITE != 0 {
        cats |= bit("write");
    }
    // Scripting commands are not @read, whatever their flags.
    if flags & READONLY != 0 && cats & bit("scripting") == 0 {
        cats |= bit("read");
    }
    if flags & ADMIN != 0 {
        cats |= bit("admin") | bit("dangerous");
    }
    if flags & PUBSUB != 0 {
        cats |= bit("pubsub");
    }
    if flags & FAST != 0 {
        cats |= bit("fast");
    }
    if flags & BLOCKING != 0 {
        cats |= bit("blocking");
    }
    if cats & bit("fast") == 0 {
        cats |= bit("slow");
    }
    cats
}

/// The category names of an id, in Redis's order (COMMAND INFO, COMMAND DOCS).
pub fn names_of(id: u16) -> impl Iterator<Item = &'static str> {
    let cats = categories_of(id);
    NAMES
        .iter()
        .enumerate()
        .filter(move |(i, _)| cats & (1 << i) != 0)
        .map(|(_, n)| *n)
}

/// How many ids exist (commands plus subcommands).
pub fn command_count() -> usize {
    universe().cats.len()
}

/// The reserved bit `+@all` sets: "future commands".
pub fn future_bit() -> usize {
    command_count()
}

/// Words of a selector's bitmap (every id plus the future bit).
pub fn bit_words() -> usize {
    command_count() / 64 + 1
}

/// A category's bit, by name (case-insensitive).
pub fn flag_of(name: &str) -> Option<u32> {
    NAMES
        .iter()
        .position(|n| n.eq_ignore_ascii_case(name))
        .map(|i| 1 << i)
}

/// The ids in a category.
pub fn ids_in(cat: u32) -> impl Iterator<Item = u16> {
    universe()
        .cats
        .iter()
        .enumerate()
        .filter(move |(_, c)| *c & cat != 0)
        .map(|(i, _)| i as u16)
}

/// The categories of an id.
pub fn categories_of(id: u16) -> u32 {
    universe().cats.get(id as usize).copied().unwrap_or(0)
}

pub fn full_name(id: u16) -> &'static str {
    universe().names.get(id as usize).copied().unwrap_or("")
}

/// A command or subcommand by full name (`get`, `CONFIG|GET`).
pub fn lookup(name: &[u8]) -> Option<u16> {
    table::table().lookup_full(name)
}

pub fn is_subcommand(id: u16) -> bool {
    table::table().stat_sub(id).is_some()
}

pub fn has_subcommands(id: u16) -> bool {
    !is_subcommand(id) && table::table().is_container(id)
}

/// The ids of a container's subcommands.
pub fn subcommand_ids(id: u16) -> std::ops::Range<u16> {
    universe().subs.get(id as usize).cloned().unwrap_or(0..0)
}
