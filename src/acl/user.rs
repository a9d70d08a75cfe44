//! An ACL user and its selectors, and the rules that change them (Redis 7.0's
//! ACLSetUser / ACLSetSelector), with the description ACL LIST and ACL GETUSER show.
//!
//! Command permissions are a bitmap over the command table's stat ids (every command
//! and every subcommand, as Redis's command ids), plus the "future commands" bit that
//! only `+@all` / `allcommands` sets. A user is immutable once registered: a change
//! builds a new one, so a connection holding an `Arc<User>` never sees a rule half
//! applied.

use std::collections::BTreeMap;

use super::categories;

/// Key pattern permissions (`%R~`, `%W~`, `~` = both).
pub const READ: u8 = 1;
pub const WRITE: u8 = 2;
pub const READ_WRITE: u8 = READ | WRITE;

/// Why a rule was refused: Redis's errno values of ACLSetUser, each with its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleError {
    /// EINVAL
    Syntax,
    /// ENOENT
    UnknownCommand,
    /// EEXIST
    PatternAfterAllKeys,
    /// EISDIR
    PatternAfterAllChannels,
    /// ENODEV
    NoSuchPassword,
    /// EBADMSG
    BadHash,
    /// ECHILD
    FirstArgOfSubcommand,
}

impl RuleError {
    /// ACLSetUserStringError's text.
    pub fn text(self) -> &'static str {
        match self {
            RuleError::UnknownCommand => "Unknown command or category name in ACL",
            RuleError::Syntax => "Syntax error",
            RuleError::PatternAfterAllKeys => {
                "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and \
                 does not have any effect. Try 'resetkeys' to start with an empty list of patterns"
            }
            RuleError::PatternAfterAllChannels => {
                "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid \
                 and does not have any effect. Try 'resetchannels' to start with an empty list \
                 of channels"
            }
            RuleError::NoSuchPassword => {
                "The password you are trying to remove from the user does not exist"
            }
            RuleError::BadHash => {
                "The password hash must be exactly 64 characters and contain only lowercase \
                 hexadecimal characters"
            }
            RuleError::FirstArgOfSubcommand => {
                "Allowing first-arg of a subcommand is not supported"
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPattern {
    pub pattern: Vec<u8>,
    pub perm: u8,
}

impl KeyPattern {
    /// `~pat`, `%R~pat` or `%W~pat`, as Redis prints it.
    pub fn describe(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(match self.perm {
            READ => b"%R~".as_slice(),
            WRITE => b"%W~",
            _ => b"~",
        });
        out.extend_from_slice(&self.pattern);
    }
}

/// One set of permissions: the root selector (rules given outside parentheses) or
/// one of the `(...)` selectors. A command runs when any selector allows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    pub all_keys: bool,
    pub all_channels: bool,
    /// Skips the bitmap test (set by `+@all`, cleared by any removal).
    pub all_commands: bool,
    /// The bitmap over stat ids, plus one last bit: "future commands" (`+@all`).
    bits: Vec<u64>,
    /// First arguments allowed of an otherwise denied command (`+select|0`).
    pub first_args: BTreeMap<u16, Vec<Vec<u8>>>,
    pub patterns: Vec<KeyPattern>,
    pub channels: Vec<Vec<u8>>,
}

impl Selector {
    /// A selector with no permissions (channels as `acl-pubsub-default` says).
    pub fn new(all_channels: bool) -> Selector {
        Selector {
            all_keys: false,
            all_channels,
            all_commands: false,
            bits: vec![0; categories::bit_words()],
            first_args: BTreeMap::new(),
            patterns: Vec::new(),
            channels: Vec::new(),
        }
    }

    pub fn allows_id(&self, id: u16) -> bool {
        let id = id as usize;
        self.bits
            .get(id / 64)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    fn set_id(&mut self, id: usize, on: bool) {
        if let Some(w) = self.bits.get_mut(id / 64) {
            if on {
                *w |= 1 << (id % 64);
            } else {
                *w &= !(1 << (id % 64));
                self.all_commands = false;
            }
        }
    }

    /// Whether `+@all` is in effect (the reserved "future commands" bit).
    pub fn future_commands(&self) -> bool {
        self.allows_id(categories::future_bit() as u16)
    }

    fn set_all(&mut self, on: bool) {
        for w in &mut self.bits {
            *w = if on { u64::MAX } else { 0 };
        }
        self.all_commands = on;
        self.first_args.clear();
    }

    /// Allows or denies command `id`, and every subcommand of a container
    /// (ACLChangeSelectorPerm).
    fn change_perm(&mut self, id: u16, allow: bool) {
        self.set_id(id as usize, allow);
        self.first_args.remove(&id);
        for sub in categories::subcommand_ids(id) {
            self.set_id(sub as usize, allow);
        }
    }

    fn change_category(&mut self, cat: u32, allow: bool) {
        for id in categories::ids_in(cat) {
            self.change_perm(id, allow);
        }
    }

    /// One selector rule (ACLSetSelector).
    pub fn apply(&mut self, op: &[u8]) -> Result<(), RuleError> {
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if is("allkeys") || op == b"~*" {
            self.all_keys = true;
            self.patterns.clear();
        } else if is("resetkeys") {
            self.all_keys = false;
            self.patterns.clear();
        } else if is("allchannels") || op == b"&*" {
            self.all_channels = true;
            self.channels.clear();
        } else if is("resetchannels") {
            self.all_channels = false;
            self.channels.clear();
        } else if is("allcommands") || is("+@all") {
            self.set_all(true);
        } else if is("nocommands") || is("-@all") {
            self.set_all(false);
        } else if op[0] == b'~' || op[0] == b'%' {
            self.add_key_pattern(op)?;
        } else if op[0] == b'&' {
            self.add_channel(&op[1..])?;
        } else if op[0] == b'+' && op.get(1) != Some(&b'@') {
            self.allow_command(&op[1..])?;
        } else if op[0] == b'-' && op.get(1) != Some(&b'@') {
            let id = categories::lookup(&op[1..]).ok_or(RuleError::UnknownCommand)?;
            self.change_perm(id, false);
        } else if op[0] == b'+' || op[0] == b'-' {
            let cat = std::str::from_utf8(&op[2..])
                .ok()
                .and_then(categories::flag_of)
                .ok_or(RuleError::UnknownCommand)?;
            self.change_category(cat, op[0] == b'+');
        } else {
            return Err(RuleError::Syntax);
        }
        Ok(())
    }

    fn add_key_pattern(&mut self, op: &[u8]) -> Result<(), RuleError> {
        if self.all_keys {
            return Err(RuleError::PatternAfterAllKeys);
        }
        let (perm, offset) = if op[0] == b'%' {
            let mut perm = 0;
            let mut offset = 1;
            let mut closed = false;
            while offset < op.len() {
                match op[offset].to_ascii_uppercase() {
                    b'R' if perm & READ == 0 => perm |= READ,
                    b'W' if perm & WRITE == 0 => perm |= WRITE,
                    b'~' => {
                        offset += 1;
                        closed = true;
                        break;
                    }
                    _ => return Err(RuleError::Syntax),
                }
                offset += 1;
            }
            // `%~x` and `%RW` name no permission or no pattern: Redis 7.0 accepts
            // them and then cannot describe the user; refused here instead.
            if perm == 0 || !closed {
                return Err(RuleError::Syntax);
            }
            (perm, offset)
        } else {
            (READ_WRITE, 1)
        };
        let pattern = &op[offset..];
        if has_spaces(pattern) {
            return Err(RuleError::Syntax);
        }
        match self.patterns.iter_mut().find(|p| p.pattern == pattern) {
            Some(p) => p.perm |= perm,
            None => self.patterns.push(KeyPattern {
                pattern: pattern.to_vec(),
                perm,
            }),
        }
        self.all_keys = false;
        Ok(())
    }

    fn add_channel(&mut self, pattern: &[u8]) -> Result<(), RuleError> {
        if self.all_channels {
            return Err(RuleError::PatternAfterAllChannels);
        }
        if has_spaces(pattern) {
            return Err(RuleError::Syntax);
        }
        if !self.channels.iter().any(|c| c == pattern) {
            self.channels.push(pattern.to_vec());
        }
        Ok(())
    }

    /// `+cmd`, `+container|sub`, or `+cmd|first-arg`.
    fn allow_command(&mut self, name: &[u8]) -> Result<(), RuleError> {
        let Some(bar) = name.iter().rposition(|&b| b == b'|') else {
            let id = categories::lookup(name).ok_or(RuleError::UnknownCommand)?;
            self.change_perm(id, true);
            return Ok(());
        };
        let (base, sub) = (&name[..bar], &name[bar + 1..]);
        let id = categories::lookup(base).ok_or(RuleError::UnknownCommand)?;
        if categories::is_subcommand(id) {
            return Err(RuleError::FirstArgOfSubcommand);
        }
        if sub.is_empty() {
            return Err(RuleError::Syntax);
        }
        if categories::has_subcommands(id) {
            let sub_id = categories::lookup(name).ok_or(RuleError::UnknownCommand)?;
            self.change_perm(sub_id, true);
            return Ok(());
        }
        tracing::warn!(
            "Deprecation warning: Allowing a first arg of an otherwise blocked command is a \
             misuse of ACL and may get disabled in the future (offender: +{})",
            String::from_utf8_lossy(name)
        );
        let list = self.first_args.entry(id).or_default();
        if !list.iter().any(|a| a.eq_ignore_ascii_case(sub)) {
            list.push(sub.to_vec());
        }
        Ok(())
    }

    /// Whether a pattern of `perm` covers every key (`~*`, `%R~*` ... or allkeys).
    pub fn unrestricted_keys(&self, perm: u8) -> bool {
        self.all_keys
            || self
                .patterns
                .iter()
                .any(|p| p.perm & perm == perm && p.pattern == b"*")
    }

    /// The command rules as ACL LIST shows them (ACLDescribeSelectorCommandRules):
    /// `+@all` or `-@all`, then the categories that best fit the bitmap, then single
    /// commands to make it exact.
    pub fn describe_commands(&self) -> Vec<u8> {
        let mut rules = Vec::new();
        let additive = !self.future_commands();
        let mut fake = Selector::new(false);
        if additive {
            rules.extend_from_slice(b"-@all ");
        } else {
            rules.extend_from_slice(b"+@all ");
            fake.set_all(true);
        }
        let mut temp = self.clone();
        let mut applied = [false; categories::NAMES.len()];
        loop {
            let mut best = None;
            let (mut min_diff, mut max_same) = (usize::MAX, 0);
            for (j, _) in categories::NAMES.iter().enumerate() {
                if applied[j] {
                    continue;
                }
                let (on, off) = temp.count_category(1 << j);
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < min_diff || (diff == min_diff && same > max_same)) {
                    best = Some(j);
                    min_diff = diff;
                    max_same = same;
                }
            }
            let Some(j) = best else { break };
            fake.change_category(1 << j, additive);
            temp.change_category(1 << j, !additive);
            rules.push(if additive { b'+' } else { b'-' });
            rules.push(b'@');
            rules.extend_from_slice(categories::NAMES[j].as_bytes());
            rules.push(b' ');
            applied[j] = true;
        }
        for id in 0..categories::command_count() as u16 {
            let mine = self.allows_id(id);
            if mine != fake.allows_id(id) {
                rules.push(if mine { b'+' } else { b'-' });
                rules.extend_from_slice(categories::full_name(id).as_bytes());
                rules.push(b' ');
                fake.change_perm(id, mine);
            }
            if !mine {
                for arg in self.first_args.get(&id).into_iter().flatten() {
                    rules.push(b'+');
                    rules.extend_from_slice(categories::full_name(id).as_bytes());
                    rules.push(b'|');
                    rules.extend_from_slice(arg);
                    rules.push(b' ');
                }
            }
        }
        rules.pop();
        rules
    }

    /// How many commands of a category this selector allows and denies.
    fn count_category(&self, cat: u32) -> (usize, usize) {
        let mut on = 0;
        let mut off = 0;
        for id in categories::ids_in(cat) {
            if self.allows_id(id) {
                on += 1;
            } else {
                off += 1;
            }
        }
        (on, off)
    }

    /// Keys, channels and commands, as one ACL LIST fragment (ACLDescribeSelector).
    pub fn describe(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.all_keys {
            out.extend_from_slice(b"~* ");
        } else {
            for p in &self.patterns {
                p.describe(&mut out);
                out.push(b' ');
            }
        }
        if self.all_channels {
            out.extend_from_slice(b"&* ");
        } else {
            out.extend_from_slice(b"resetchannels ");
            for c in &self.channels {
                out.push(b'&');
                out.extend_from_slice(c);
                out.push(b' ');
            }
        }
        out.extend_from_slice(&self.describe_commands());
        out
    }

    /// GETUSER's `keys` field.
    pub fn keys_field(&self) -> Vec<u8> {
        if self.all_keys {
            return b"~*".to_vec();
        }
        let mut out = Vec::new();
        for (i, p) in self.patterns.iter().enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            p.describe(&mut out);
        }
        out
    }

    /// GETUSER's `channels` field.
    pub fn channels_field(&self) -> Vec<u8> {
        if self.all_channels {
            return b"&*".to_vec();
        }
        let mut out = Vec::new();
        for (i, c) in self.channels.iter().enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            out.push(b'&');
            out.extend_from_slice(c);
        }
        out
    }
}

/// Redis's ACLStringHasSpaces: whitespace or NUL.
pub fn has_spaces(s: &[u8]) -> bool {
    s.iter()
        .any(|&c| c == 0 || c == b' ' || (b'\t'..=b'\r').contains(&c))
}

/// User flags in the order Redis prints them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UserFlags {
    pub on: bool,
    pub off: bool,
    pub nopass: bool,
    pub skip_sanitize: bool,
    pub sanitize: bool,
}

impl UserFlags {
    pub fn names(&self) -> impl Iterator<Item = &'static str> {
        [
            (self.on, "on"),
            (self.off, "off"),
            (self.nopass, "nopass"),
            (self.skip_sanitize, "skip-sanitize-payload"),
            (self.sanitize, "sanitize-payload"),
        ]
        .into_iter()
        .filter(|(set, _)| *set)
        .map(|(_, n)| n)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: Vec<u8>,
    /// Identity across changes: a user re-created (ACL LOAD, DELUSER + SETUSER) is
    /// another user, and its old connections are gone.
    pub uid: u64,
    pub flags: UserFlags,
    /// SHA-256 hex digests.
    pub passwords: Vec<String>,
    /// The root selector first, then the `(...)` ones.
    pub selectors: Vec<Selector>,
}

impl User {
    /// A new user: off, no password, no permissions (ACLCreateUser).
    pub fn new(name: &[u8], uid: u64, all_channels: bool) -> User {
        User {
            name: name.to_vec(),
            uid,
            flags: UserFlags {
                off: true,
                ..UserFlags::default()
            },
            passwords: Vec::new(),
            selectors: vec![Selector::new(all_channels)],
        }
    }

    pub fn enabled(&self) -> bool {
        !self.flags.off
    }

    pub fn nopass(&self) -> bool {
        self.flags.nopass
    }

    pub fn root(&self) -> &Selector {
        &self.selectors[0]
    }

    /// Whether this user may run anything on any key and channel: the connection
    /// then skips the permission check altogether.
    pub fn unrestricted(&self) -> bool {
        let r = self.root();
        r.all_commands && r.all_keys && r.all_channels
    }

    /// One rule (ACLSetUser). `pubsub_all` is `acl-pubsub-default allchannels`.
    pub fn apply(&mut self, op: &[u8], pubsub_all: bool) -> Result<(), RuleError> {
        if op.is_empty() {
            return Ok(());
        }
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if is("on") {
            self.flags.on = true;
            self.flags.off = false;
        } else if is("off") {
            self.flags.off = true;
            self.flags.on = false;
        } else if is("skip-sanitize-payload") {
            self.flags.skip_sanitize = true;
            self.flags.sanitize = false;
        } else if is("sanitize-payload") {
            self.flags.skip_sanitize = false;
            self.flags.sanitize = true;
        } else if is("nopass") {
            self.flags.nopass = true;
            self.passwords.clear();
        } else if is("resetpass") {
            self.flags.nopass = false;
            self.passwords.clear();
        } else if op[0] == b'>' || op[0] == b'#' {
            let hash = password_hash_of(op)?;
            if !self.passwords.contains(&hash) {
                self.passwords.push(hash);
            }
            self.flags.nopass = false;
        } else if op[0] == b'<' || op[0] == b'!' {
            let hash = password_hash_of(op)?;
            let at = self
                .passwords
                .iter()
                .position(|p| *p == hash)
                .ok_or(RuleError::NoSuchPassword)?;
            self.passwords.remove(at);
        } else if op[0] == b'(' && op[op.len() - 1] == b')' {
            let mut s = Selector::new(pubsub_all);
            for rule in split_args(&op[1..op.len() - 1]).ok_or(RuleError::Syntax)? {
                s.apply(&rule)?;
            }
            self.selectors.push(s);
        } else if is("clearselectors") {
            self.selectors.truncate(1);
        } else if is("reset") {
            for rule in ["resetpass", "resetkeys", "resetchannels"] {
                self.apply(rule.as_bytes(), pubsub_all)?;
            }
            if pubsub_all {
                self.apply(b"allchannels", pubsub_all)?;
            }
            for rule in ["off", "sanitize-payload", "clearselectors", "-@all"] {
                self.apply(rule.as_bytes(), pubsub_all)?;
            }
        } else {
            self.selectors[0].apply(op)?;
        }
        Ok(())
    }

    /// The rules that recreate this user (ACLDescribeUser): flags, password hashes,
    /// the root selector, then each `(...)` selector.
    pub fn describe(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for f in self.flags.names() {
            out.extend_from_slice(f.as_bytes());
            out.push(b' ');
        }
        for p in &self.passwords {
            out.push(b'#');
            out.extend_from_slice(p.as_bytes());
            out.push(b' ');
        }
        for (i, s) in self.selectors.iter().enumerate() {
            if i == 0 {
                out.extend_from_slice(&s.describe());
            } else {
                out.extend_from_slice(b" (");
                out.extend_from_slice(&s.describe());
                out.push(b')');
            }
        }
        out
    }

    /// Whether `password` is one of the user's (or the user needs none).
    pub fn password_matches(&self, password: &[u8]) -> bool {
        if self.flags.nopass {
            return true;
        }
        let hashed = hash_password(password);
        // Every stored hash is compared in full: the time taken says nothing.
        self.passwords.iter().fold(false, |ok, p| {
            ok | constant_time_eq(p.as_bytes(), hashed.as_bytes())
        })
    }
}

/// `>pass` / `<pass` hash their cleartext; `#hash` / `!hash` must be a valid hash.
fn password_hash_of(op: &[u8]) -> Result<String, RuleError> {
    if op[0] == b'>' || op[0] == b'<' {
        return Ok(hash_password(&op[1..]));
    }
    let hash = &op[1..];
    if hash.len() != 64 || !hash.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(RuleError::BadHash);
    }
    Ok(String::from_utf8_lossy(hash).into_owned())
}

/// SHA-256 in lowercase hex (ACLHashPassword).
pub fn hash_password(cleartext: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(cleartext);
    let mut hex = String::with_capacity(64);
    for b in digest {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Redis's sdssplitargs for a selector's inside: words separated by spaces, with
/// "double" and 'single' quoted words. None on unbalanced quotes.
pub fn split_args(s: &[u8]) -> Option<Vec<Vec<u8>>> {
    crate::util::cstr::split_args(s)
}

/// ACLMergeSelectorArguments: a selector spread over several arguments
/// (`(~x` `+get)`) becomes one. Err carries the argument that opened the unmatched
/// parenthesis.
pub fn merge_selector_args(args: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, usize> {
    let mut out = Vec::with_capacity(args.len());
    let mut open: Option<(usize, Vec<u8>)> = None;
    for (j, op) in args.iter().enumerate() {
        if let Some((_, sel)) = open.as_mut() {
            sel.push(b' ');
            sel.extend_from_slice(op);
            if op.last() == Some(&b')') {
                if let Some((_, sel)) = open.take() {
                    out.push(sel);
                }
            }
            continue;
        }
        if op.first() == Some(&b'(') && op.last() != Some(&b')') {
            open = Some((j, op.clone()));
            continue;
        }
        out.push(op.clone());
    }
    match open {
        Some((j, _)) => Err(j),
        None => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rules a user is built from in the model test: categories, commands,
    /// subcommands, first arguments, key and channel patterns, resets.
    const POOL: &[&str] = &[
        "+@all",
        "-@all",
        "+@read",
        "-@read",
        "+@write",
        "-@write",
        "+@admin",
        "-@dangerous",
        "+@hash",
        "-@keyspace",
        "+@pubsub",
        "-@slow",
        "+@fast",
        "+get",
        "-get",
        "+set",
        "-set",
        "+config",
        "-config",
        "+config|get",
        "-config|set",
        "+client|kill",
        "+select|0",
        "+select|1",
        "+debug|object",
        "-debug",
        "~foo:*",
        "%R~r*",
        "%W~w*",
        "%RW~rw*",
        "~*",
        "resetkeys",
        "&chan*",
        "&*",
        "resetchannels",
        "allcommands",
        "nocommands",
    ];

    fn apply_all(rules: &[&str]) -> Selector {
        let mut s = Selector::new(false);
        for r in rules {
            // Refused rules (a pattern after `~*`) change nothing, as in Redis.
            let _ = s.apply(r.as_bytes());
        }
        s
    }

    /// What ACL LIST prints recreates the selector exactly (Redis checks the same
    /// and aborts otherwise): seeded random rule sequences, described, re-applied.
    #[test]
    fn description_recreates_the_selector() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..400 {
            let len = 1 + rnd(10);
            let rules: Vec<&str> = (0..len).map(|_| POOL[rnd(POOL.len())]).collect();
            let original = apply_all(&rules);
            let described = String::from_utf8(original.describe()).expect("utf8");
            let words: Vec<&str> = std::iter::once("resetchannels")
                .chain(described.split(' '))
                .collect();
            let again = apply_all(&words);
            assert_eq!(again.bits, original.bits, "{rules:?} -> {described}");
            // First arguments of a command allowed whole mean nothing (Redis does not
            // describe them either).
            let effective = |s: &Selector| {
                let mut f = s.first_args.clone();
                f.retain(|id, _| !s.allows_id(*id));
                f
            };
            assert_eq!(
                effective(&again),
                effective(&original),
                "{rules:?} -> {described}"
            );
            assert_eq!(
                again.patterns, original.patterns,
                "{rules:?} -> {described}"
            );
            assert_eq!(
                again.channels, original.channels,
                "{rules:?} -> {described}"
            );
            assert_eq!(again.all_keys, original.all_keys);
            assert_eq!(again.all_channels, original.all_channels);
        }
    }

    #[test]
    fn refused_rules_name_redis_errors() {
        let mut u = User::new(b"u", 1, false);
        let err = |u: &mut User, op: &str| u.apply(op.as_bytes(), false).err();
        assert_eq!(err(&mut u, "+nosuch"), Some(RuleError::UnknownCommand));
        assert_eq!(err(&mut u, "+@nosuch"), Some(RuleError::UnknownCommand));
        assert_eq!(err(&mut u, "-select|0"), Some(RuleError::UnknownCommand));
        assert_eq!(
            err(&mut u, "+client|kill|x"),
            Some(RuleError::FirstArgOfSubcommand)
        );
        assert_eq!(err(&mut u, "+select|"), Some(RuleError::Syntax));
        assert_eq!(err(&mut u, "%X~a"), Some(RuleError::Syntax));
        assert_eq!(err(&mut u, "%~a"), Some(RuleError::Syntax));
        assert_eq!(err(&mut u, "#abc"), Some(RuleError::BadHash));
        assert_eq!(err(&mut u, "<never-set"), Some(RuleError::NoSuchPassword));
        assert_eq!(err(&mut u, "bogus"), Some(RuleError::Syntax));
        assert_eq!(err(&mut u, "~*"), None);
        assert_eq!(err(&mut u, "~foo"), Some(RuleError::PatternAfterAllKeys));
        assert_eq!(err(&mut u, "&*"), None);
        assert_eq!(
            err(&mut u, "&foo"),
            Some(RuleError::PatternAfterAllChannels)
        );
        assert_eq!(err(&mut u, ">pw"), None);
        assert!(u.password_matches(b"pw") && !u.password_matches(b"pW"));
        assert_eq!(err(&mut u, "<pw"), None);
        assert!(!u.password_matches(b"pw"));
    }

    #[test]
    fn selectors_spread_over_arguments_merge() {
        let args: Vec<Vec<u8>> = ["on", "(~x", "+get)", "(%R~y", "+@read", ")"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let merged = merge_selector_args(&args).expect("merged");
        assert_eq!(
            merged,
            [
                b"on".to_vec(),
                b"(~x +get)".to_vec(),
                b"(%R~y +@read )".to_vec()
            ]
        );
        let open: Vec<Vec<u8>> = vec![b"(~x".to_vec(), b"+get".to_vec()];
        assert_eq!(merge_selector_args(&open), Err(0));
    }
}
