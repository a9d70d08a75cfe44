//! The command table: data, not code. Each family file contributes its rows.

use std::sync::OnceLock;

use hashbrown::HashMap;

use super::subcommands::{SubSpec, SUBS};
use super::{ClientFn, GlobalFn, KeyedFn};

/// Command flags, as COMMAND INFO reports them.
pub mod flags {
    pub const WRITE: u32 = 1 << 0;
    pub const READONLY: u32 = 1 << 1;
    pub const DENYOOM: u32 = 1 << 2;
    pub const ADMIN: u32 = 1 << 3;
    pub const PUBSUB: u32 = 1 << 4;
    pub const NOSCRIPT: u32 = 1 << 5;
    pub const BLOCKING: u32 = 1 << 6;
    pub const LOADING: u32 = 1 << 7;
    pub const STALE: u32 = 1 << 8;
    pub const SKIP_MONITOR: u32 = 1 << 9;
    pub const SKIP_SLOWLOG: u32 = 1 << 10;
    pub const FAST: u32 = 1 << 11;
    pub const NO_AUTH: u32 = 1 << 12;
    pub const MAY_REPLICATE: u32 = 1 << 13;
    pub const NO_MULTI: u32 = 1 << 14;
    pub const MOVABLE_KEYS: u32 = 1 << 15;
    pub const ALLOW_BUSY: u32 = 1 << 16;
    pub const NO_MANDATORY_KEYS: u32 = 1 << 17;
    /// Not reported by COMMAND: a keyless command that may wait long without being a
    /// blocking command to Redis (WAIT), so its client's socket is watched meanwhile.
    pub const WAITS: u32 = 1 << 18;
    /// Refused while a replica loads its master's data beside the served dataset.
    pub const NO_ASYNC_LOADING: u32 = 1 << 19;

    pub const NAMES: &[(u32, &str)] = &[
        (WRITE, "write"),
        (READONLY, "readonly"),
        (DENYOOM, "denyoom"),
        (ADMIN, "admin"),
        (PUBSUB, "pubsub"),
        (NOSCRIPT, "noscript"),
        (BLOCKING, "blocking"),
        (LOADING, "loading"),
        (STALE, "stale"),
        (SKIP_MONITOR, "skip_monitor"),
        (SKIP_SLOWLOG, "skip_slowlog"),
        (FAST, "fast"),
        (NO_AUTH, "no_auth"),
        // MAY_REPLICATE is not reported: Redis 7.0 hides it on purpose.
        (NO_MANDATORY_KEYS, "no_mandatory_keys"),
        (NO_ASYNC_LOADING, "no_async_loading"),
        (NO_MULTI, "no_multi"),
        (MOVABLE_KEYS, "movablekeys"),
        (ALLOW_BUSY, "allow_busy"),
    ];
}

/// Where a command's keys are.
#[derive(Debug, Clone, Copy)]
pub enum KeySpec {
    None,
    /// Keys at `first`, `first + step` ... up to `last` (< 0 counts from the end,
    /// -1 = the last argument): COMMAND INFO's (first, last, step).
    Range {
        first: u8,
        last: i8,
        step: u8,
    },
    /// A key count at `keynum_at` followed by that many keys (SINTERCARD, LMPOP,
    /// ZUNIONSTORE ...), plus a fixed key at `dest` when non-zero (a STORE target).
    /// An invalid count yields only `dest`: the handler then replies the error.
    Keynum {
        dest: u8,
        keynum_at: u8,
    },
    /// SORT: the key at 1, plus the destination of the last STORE option (found by
    /// skipping the other options' arguments, as Redis's sortGetKeys does).
    Sort,
    /// GEORADIUS*: the key at 1, plus the destination of the last STORE / STOREDIST
    /// option from argument 5 on (Redis's georadiusGetKeys).
    GeoStore,
    /// MIGRATE: the key at 3, or every argument after the KEYS option (Redis's
    /// migrateGetKeys, which skips AUTH's and AUTH2's arguments on the way).
    Migrate,
    /// XREAD / XREADGROUP: the first half of the arguments after STREAMS (Redis's
    /// key spec for them). ACL key rules and COMMAND GETKEYS read the keys from here.
    Streams,
}

/// The key positions most commands use.
pub const K1: KeySpec = KeySpec::Range {
    first: 1,
    last: 1,
    step: 1,
};
pub const K12: KeySpec = KeySpec::Range {
    first: 1,
    last: 2,
    step: 1,
};
pub const K_ALL: KeySpec = KeySpec::Range {
    first: 1,
    last: -1,
    step: 1,
};
pub const K_PAIRS: KeySpec = KeySpec::Range {
    first: 1,
    last: -1,
    step: 2,
};

/// Indexes of a command's key arguments, in argument order.
#[derive(Debug, Clone)]
pub struct KeyPositions {
    fixed: Option<usize>,
    next: usize,
    end: usize,
    step: usize,
}

impl Iterator for KeyPositions {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        if let Some(f) = self.fixed.take() {
            return Some(f);
        }
        if self.next < self.end {
            let p = self.next;
            self.next += self.step;
            Some(p)
        } else {
            None
        }
    }
}

impl KeySpec {
    /// Indexes of the key arguments of `args` (argv[0] is the command name).
    #[inline]
    pub fn positions(&self, args: &super::Args) -> KeyPositions {
        let argc = args.len();
        let none = KeyPositions {
            fixed: None,
            next: 0,
            end: 0,
            step: 1,
        };
        match *self {
            KeySpec::None => none,
            KeySpec::Range { first, last, step } => {
                let first = first as usize;
                let last = if last < 0 {
                    argc as isize + last as isize
                } else {
                    (last as isize).min(argc as isize - 1)
                };
                if last < first as isize {
                    none
                } else {
                    KeyPositions {
                        fixed: None,
                        next: first,
                        end: last as usize + 1,
                        step: step.max(1) as usize,
                    }
                }
            }
            KeySpec::Keynum { dest, keynum_at } => {
                let fixed = (dest > 0 && (dest as usize) < argc).then_some(dest as usize);
                let first = keynum_at as usize + 1;
                let count = super::parse_i64(args.get(keynum_at as usize)).unwrap_or(0);
                let end = if count > 0 && (count as usize) <= argc.saturating_sub(first) {
                    first + count as usize
                } else {
                    first
                };
                KeyPositions {
                    fixed,
                    next: first,
                    end,
                    step: 1,
                }
            }
            KeySpec::Sort => {
                let dest = sort_store_position(args);
                KeyPositions {
                    fixed: (argc > 1).then_some(1),
                    next: dest.unwrap_or(0),
                    end: dest.map_or(0, |d| d + 1),
                    step: 1,
                }
            }
            KeySpec::Streams => match streams_keys_range(args) {
                Some((first, end)) => KeyPositions {
                    fixed: None,
                    next: first,
                    end,
                    step: 1,
                },
                None => none,
            },
            KeySpec::Migrate => match migrate_keys_position(args) {
                Some(first) => KeyPositions {
                    fixed: None,
                    next: first,
                    end: argc,
                    step: 1,
                },
                None => KeyPositions {
                    fixed: (argc > 3).then_some(3),
                    ..none
                },
            },
            KeySpec::GeoStore => {
                let dest = geo_store_position(args);
                KeyPositions {
                    fixed: (argc > 1).then_some(1),
                    next: dest.unwrap_or(0),
                    end: dest.map_or(0, |d| d + 1),
                    step: 1,
                }
            }
        }
    }

    /// COMMAND INFO's (first, last, step); commands with a key count report Redis's
    /// (0, 0, 0) (or their fixed destination) and carry the movablekeys flag.
    pub fn triple(&self) -> (i64, i64, i64) {
        match *self {
            KeySpec::None => (0, 0, 0),
            KeySpec::Range { first, last, step } => (first as i64, last as i64, step as i64),
            KeySpec::Keynum { dest: 0, .. } => (0, 0, 0),
            KeySpec::Keynum { dest, .. } => (dest as i64, dest as i64, 1),
            KeySpec::Sort | KeySpec::GeoStore => (1, 1, 1),
            KeySpec::Migrate => (3, 3, 1),
            KeySpec::Streams => (0, 0, 0),
        }
    }
}

/// The argument index of SORT's last STORE destination, skipping LIMIT's two
/// arguments and GET's / BY's one so a pattern named "store" is not mistaken for it.
fn sort_store_position(args: &super::Args) -> Option<usize> {
    let mut dest = None;
    let mut i = 2;
    while i < args.len() {
        let skip = if args.is(i, "limit") {
            2
        } else if args.is(i, "get") || args.is(i, "by") {
            1
        } else if args.is(i, "store") {
            // Redis does not skip STORE's argument here either.
            if i + 1 < args.len() {
                dest = Some(i + 1);
            }
            0
        } else {
            0
        };
        i += skip + 1;
    }
    dest
}

/// XREAD's / XREADGROUP's keys as [first, end): the options before STREAMS are
/// skipped with their arguments; after it, the first half are keys.
fn streams_keys_range(args: &super::Args) -> Option<(usize, usize)> {
    let mut i = 1;
    let streams = loop {
        if i >= args.len() {
            return None;
        }
        if args.is(i, "block") || args.is(i, "count") {
            i += 2;
        } else if args.is(i, "group") {
            i += 3;
        } else if args.is(i, "noack") {
            i += 1;
        } else if args.is(i, "streams") {
            break i;
        } else {
            return None;
        }
    };
    // Redis's key spec takes half of what follows (rounded down), even when the
    // command itself will refuse an odd count.
    let keys = (args.len() - streams - 1) / 2;
    (keys > 0).then_some((streams + 1, streams + 1 + keys))
}

/// Where MIGRATE's KEYS option's keys start, if it has one.
fn migrate_keys_position(args: &super::Args) -> Option<usize> {
    let mut i = 6;
    while i < args.len() {
        if args.is(i, "keys") {
            return Some(i + 1);
        }
        i += if args.is(i, "auth") {
            2
        } else if args.is(i, "auth2") {
            3
        } else {
            1
        };
    }
    None
}

/// The argument index of GEORADIUS's last STORE / STOREDIST destination.
fn geo_store_position(args: &super::Args) -> Option<usize> {
    let mut dest = None;
    let mut i = 5;
    while i + 1 < args.len() {
        if args.is(i, "store") || args.is(i, "storedist") {
            dest = Some(i + 1);
            i += 1;
        }
        i += 1;
    }
    dest
}

/// How partial replies of a split command combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// One reply per key group, returned as one array in argument order (MGET).
    Array,
    /// Integer replies summed (DEL, EXISTS, TOUCH, UNLINK).
    Sum,
    /// +OK when every part succeeded (MSET).
    Ok,
}

/// What to do when a keyed command's keys live on more than one shard.
#[derive(Clone, Copy)]
pub enum Cross {
    /// The command has one key (or its keys always share a slot).
    Never,
    /// Run `one` per group of `stride` arguments (a key and its values) on the owning
    /// shard, all under the multi-shard locks, and merge the replies.
    Split {
        one: KeyedFn,
        stride: u8,
        merge: Merge,
    },
    /// A dedicated coordinator (RENAME, MSETNX, COPY ...).
    Coordinator(GlobalFn),
}

#[derive(Clone, Copy)]
pub enum Kind {
    Keyed(KeyedFn, Cross),
    Client(ClientFn),
    Global(GlobalFn),
}

pub struct CommandSpec {
    pub name: &'static str,
    /// Redis's arity: exact if positive, minimum if negative; includes the name.
    pub arity: i16,
    pub flags: u32,
    pub keys: KeySpec,
    pub kind: Kind,
    pub group: &'static str,
    pub since: &'static str,
    pub summary: &'static str,
    pub acl: &'static [&'static str],
}

/// Redis's arity rule: exactly `arity` arguments, or at least `-arity` when negative.
#[inline]
pub fn arity_allows(arity: i16, argc: usize) -> bool {
    let a = arity as isize;
    if a >= 0 {
        argc as isize == a
    } else {
        argc as isize >= -a
    }
}

impl CommandSpec {
    #[inline]
    pub fn arity_ok(&self, argc: usize) -> bool {
        arity_allows(self.arity, argc)
    }

    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }
}

pub struct CommandTable {
    pub specs: Vec<&'static CommandSpec>,
    by_name: HashMap<&'static [u8], u16>,
    /// Subcommands of the implemented containers, grouped by container.
    pub subs: Vec<&'static SubSpec>,
    /// Per command: its subcommands' range in `subs` (empty for plain commands).
    sub_ranges: Vec<(u16, u16)>,
}

impl CommandTable {
    /// The subcommands of command `idx` (empty unless it is a container).
    /// Whether the command is a container of subcommands (CONFIG, CLIENT ...).
    #[inline]
    pub fn is_container(&self, idx: u16) -> bool {
        self.sub_ranges
            .get(idx as usize)
            .is_some_and(|&(a, b)| a != b)
    }

    pub fn subcommands(&self, idx: u16) -> &[&'static SubSpec] {
        match self.sub_ranges.get(idx as usize) {
            Some(&(a, b)) => &self.subs[a as usize..b as usize],
            None => &[],
        }
    }

    /// The id commandstats, latency histograms and slowlog know a call by: the command
    /// itself, or for a container its subcommand (`specs.len() + index in subs`). An
    /// unknown subcommand counts as the container (its handler replies the error).
    #[inline(always)]
    pub fn stat_id(&self, idx: u16, args: &super::Args) -> u16 {
        let (a, b) = self.sub_ranges[idx as usize];
        if a == b {
            return idx;
        }
        self.sub_stat_id(idx, a, b, args)
    }

    /// `stat_id` of a container: its subcommands `a..b` searched by name, kept out of
    /// line so that the common case above inlines into every command's accounting.
    #[inline(never)]
    fn sub_stat_id(&self, idx: u16, a: u16, b: u16, args: &super::Args) -> u16 {
        let word = args.get(1);
        (a..b)
            .find(|&i| {
                self.subs[i as usize]
                    .short()
                    .as_bytes()
                    .eq_ignore_ascii_case(word)
            })
            .map_or(idx, |i| (self.specs.len() + i as usize) as u16)
    }

    /// How many stat ids exist (commands plus subcommands).
    pub fn stat_count(&self) -> usize {
        self.specs.len() + self.subs.len()
    }

    /// The subcommand a stat id stands for, if it is one.
    pub fn stat_sub(&self, id: u16) -> Option<&'static SubSpec> {
        (id as usize)
            .checked_sub(self.specs.len())
            .and_then(|i| self.subs.get(i).copied())
    }

    /// The flags of a stat id's command or subcommand.
    pub fn stat_flags(&self, id: u16) -> u32 {
        match self.stat_sub(id) {
            Some(s) => s.flags,
            None => self.specs.get(id as usize).map_or(0, |s| s.flags),
        }
    }

    /// The full name of a stat id (`get`, `client|list`).
    pub fn stat_name(&self, id: u16) -> &'static str {
        match self.stat_sub(id) {
            Some(s) => s.name,
            None => self.specs.get(id as usize).map_or("", |s| s.name),
        }
    }

    /// The stat id of the command an argv names (Redis's lookupCommand): None for an
    /// unknown command or a container's unknown subcommand.
    pub fn lookup_argv(&self, args: &super::Args) -> Option<u16> {
        let (idx, _) = lookup(args.get(0))?;
        let id = self.stat_id(idx, args);
        let unknown_sub = self.is_container(idx) && args.len() >= 2 && id == idx;
        (!unknown_sub).then_some(id)
    }

    /// Finds a command or subcommand by full name (`get`, `CLIENT|LIST`).
    pub fn lookup_full(&self, name: &[u8]) -> Option<u16> {
        match name.iter().position(|&b| b == b'|') {
            None => lookup(name).map(|(i, _)| i),
            Some(p) => {
                let (idx, _) = lookup(&name[..p])?;
                let (a, b) = self.sub_ranges[idx as usize];
                (a..b)
                    .find(|&i| {
                        self.subs[i as usize]
                            .short()
                            .as_bytes()
                            .eq_ignore_ascii_case(&name[p + 1..])
                    })
                    .map(|i| (self.specs.len() + i as usize) as u16)
            }
        }
    }
}

fn build() -> CommandTable {
    let mut specs: Vec<&'static CommandSpec> = Vec::new();
    for family in [
        super::strings::COMMANDS,
        super::keys::COMMANDS,
        super::migrate::COMMANDS,
        super::client::COMMANDS,
        super::server::COMMANDS,
        super::config_cmd::COMMANDS,
        super::lists::COMMANDS,
        super::hashes::COMMANDS,
        super::sets::COMMANDS,
        super::zsets::COMMANDS,
        super::bitops::COMMANDS,
        super::multi::COMMANDS,
        super::replication::COMMANDS,
        super::persistence::COMMANDS,
        super::sort::COMMANDS,
        super::blocking::COMMANDS,
        super::streams::COMMANDS,
        super::hll::COMMANDS,
        super::geo::COMMANDS,
        super::scripting::COMMANDS,
        super::pubsub::COMMANDS,
        super::latency::COMMANDS,
        super::lolwut::COMMANDS,
        super::acl::COMMANDS,
        super::cluster::COMMANDS,
    ] {
        specs.extend(family.iter());
    }
    let by_name: HashMap<&'static [u8], u16> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_bytes(), i as u16))
        .collect();
    let mut subs = Vec::new();
    let mut sub_ranges = Vec::with_capacity(specs.len());
    for spec in &specs {
        let a = subs.len() as u16;
        subs.extend(SUBS.iter().filter(|s| s.parent() == spec.name));
        sub_ranges.push((a, subs.len() as u16));
    }
    CommandTable {
        specs,
        by_name,
        subs,
        sub_ranges,
    }
}

pub fn table() -> &'static CommandTable {
    static TABLE: OnceLock<CommandTable> = OnceLock::new();
    TABLE.get_or_init(build)
}

/// Finds a command by name, case-insensitively, without allocating.
#[inline]
pub fn lookup(name: &[u8]) -> Option<(u16, &'static CommandSpec)> {
    let mut lower = [0u8; 32];
    if name.len() > lower.len() {
        return None;
    }
    for (d, s) in lower.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    let t = table();
    let &idx = t.by_name.get(&lower[..name.len()])?;
    Some((idx, t.specs[idx as usize]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_lowercase_and_multi_key_commands_can_cross() {
        let t = table();
        assert_eq!(t.specs.len(), t.by_name.len(), "duplicate command name");
        for s in &t.specs {
            assert_eq!(s.name, s.name.to_ascii_lowercase());
            match (s.kind, s.keys) {
                (Kind::Keyed(_, Cross::Never), KeySpec::Range { first, last, step }) => {
                    let single = last >= 0 && (last as i16 - first as i16) < step as i16;
                    assert!(
                        single,
                        "{} has several keys but no cross-shard rule",
                        s.name
                    );
                }
                (Kind::Keyed(_, Cross::Never), KeySpec::Keynum { .. }) => {
                    panic!("{} has several keys but no cross-shard rule", s.name)
                }
                _ => {}
            }
        }
        assert!(lookup(b"GeT").is_some());
        assert!(lookup(b"nosuchcommand").is_none());
    }

    #[test]
    fn connection_takeover_commands_are_admin() {
        // Connection::run_command looks for SYNC, PSYNC and MONITOR by name only
        // among admin commands.
        for name in ["sync", "psync", "monitor"] {
            let (_, spec) = lookup(name.as_bytes()).expect("command exists");
            assert!(spec.has(flags::ADMIN), "{name} must stay an admin command");
        }
    }

    fn positions(spec: KeySpec, words: &[&str]) -> Vec<usize> {
        let mut buf = Vec::new();
        let mut spans = Vec::new();
        for w in words {
            let start = buf.len() as u32;
            buf.extend_from_slice(w.as_bytes());
            spans.push(crate::protocol::parser::ArgSpan {
                start,
                end: buf.len() as u32,
            });
        }
        spec.positions(&crate::commands::Args::new(&buf, &spans))
            .collect()
    }

    #[test]
    fn key_positions() {
        let r = KeySpec::Range {
            first: 1,
            last: -1,
            step: 2,
        };
        assert_eq!(positions(r, &["mset", "a", "1", "b", "2"]), vec![1, 3]);
        let one = KeySpec::Range {
            first: 1,
            last: 1,
            step: 1,
        };
        assert_eq!(positions(one, &["get", "a", "x"]), vec![1]);
        let all = KeySpec::Range {
            first: 1,
            last: -1,
            step: 1,
        };
        assert_eq!(positions(all, &["del", "a", "b", "c"]), vec![1, 2, 3]);
        let store = KeySpec::Keynum {
            dest: 1,
            keynum_at: 2,
        };
        assert_eq!(
            positions(
                store,
                &["zunionstore", "d", "2", "a", "b", "WEIGHTS", "1", "2"]
            ),
            vec![1, 3, 4]
        );
        let card = KeySpec::Keynum {
            dest: 0,
            keynum_at: 1,
        };
        assert_eq!(
            positions(card, &["sintercard", "2", "a", "b", "LIMIT", "3"]),
            vec![2, 3]
        );
        assert_eq!(
            positions(card, &["sintercard", "5", "a", "b"]),
            Vec::<usize>::new()
        );
        assert_eq!(
            positions(card, &["sintercard", "x", "a"]),
            Vec::<usize>::new()
        );
    }
}
