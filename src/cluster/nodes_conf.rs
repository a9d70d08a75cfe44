//! `nodes.conf`: the node table a cluster member saves, and CLUSTER NODES' reply
//! (Redis 7.0's clusterLoadConfig, clusterSaveConfig, clusterGenNodeDescription).
//!
//! One line per known node, fields separated by single spaces:
//!
//! ```text
//! <name> <ip>:<port>@<cport>[,<hostname>] <flags> <master|-> <ping_sent> <pong_received> <config_epoch> <connected|disconnected> [<slot>|<first>-<last>]... [[<slot>->-<name>]|[<slot>-<-<name>]]...
//! ```
//!
//! `flags` is a comma-separated list (`myself,master`, `noflags` when empty); the
//! bracketed entries are the slots this node is migrating to / importing from
//! another node, written on the `myself` line only. The file ends with
//! `vars currentEpoch <n> lastVoteEpoch <m>`. Lines are split as Redis splits them
//! (sdssplitargs), blank lines are ignored (Redis 7.0 rewrites the file in place
//! and may leave newline padding).
//!
//! Reading is stricter than Redis where Redis is merely lax (`atoi`, `strtoull`,
//! unchecked bracket syntax) or undefined (an over-long ip): a number that is not
//! a number is an error here, never 0. Everything Redis itself writes is read
//! back, and `render(&parse(file)?)` is the file again, byte for byte.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::fmt::{self, Write as _};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, OnceLock};

use super::wire::{set_slot, slot_is_set, BITMAP_LEN};
use super::{flags, NodeName, SLOTS};
use crate::util::split_args;

/// Bus port = client port + this, when an old file omits `@cport`
/// (CLUSTER_PORT_INCR).
const PORT_INCR: u32 = 10_000;

/// Longest ip Redis can hold: its `ip` field is `char[NET_IP_STR_LEN]` (46), and a
/// longer one in the file would overflow it.
const IP_MAX_LEN: usize = 45;

/// Node lines have at least these fields; the slots follow.
const FIXED_FIELDS: usize = 8;

/// One node: one line of nodes.conf or of CLUSTER NODES.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeLine {
    /// The node ID (printed lossily should a name taken off the bus not be text).
    pub name: NodeName,
    /// May be empty: a node that has not learned its own address yet, or a
    /// `noaddr` one, prints `:<port>@<cport>` (`:0@0` when the ports are 0 too).
    pub ip: String,
    /// The client port, the one printed.
    pub port: u16,
    /// The bus port; an old file without `@cport` reads as `port + 10000`.
    pub cport: u16,
    /// The `,hostname` suffix of the address (cluster-announce-hostname); never
    /// `Some("")`: parse reads an empty one as `None`, and render prints both alike.
    pub hostname: Option<String>,
    /// Bits of `super::flags`. MEET and MIGRATE_TO are never printed.
    pub flags: u16,
    /// A replica's master, printed `-` when none.
    pub master: Option<NodeName>,
    /// Milliseconds, as printed. Redis prints live values; at load it only asks
    /// whether they are non-zero (a ping in flight, a pong ever received).
    pub ping_sent: u64,
    /// Milliseconds, as `ping_sent`.
    pub pong_received: u64,
    /// The epoch printed. For a replica whose master is known Redis prints the
    /// master's config epoch, so a caller rendering a replica fills in the
    /// master's; parse keeps what the file says (see `loaded_config_epoch` for the
    /// value Redis keeps at load).
    pub config_epoch: u64,
    /// Whether the bus link is up. Render prints `connected` for the `myself`
    /// node whatever this says, as Redis does.
    pub connected: bool,
    /// Owned slots as inclusive ranges, ascending; slot 5 alone is `(5, 5)`.
    /// Render prints them as given; `ranges_of` gives the canonical form (the
    /// longest runs, as Redis prints), which is also what parse produces.
    pub slots: Vec<(u16, u16)>,
    /// `[slot->-name]`: slots this node is migrating to `name`, ascending, one
    /// entry per slot. Printed only on the `myself` line; parse gathers them there.
    pub migrating: Vec<(u16, NodeName)>,
    /// `[slot-<-name]`: slots this node is importing from `name`, as `migrating`.
    /// Render skips a slot that is also migrating, as Redis does.
    pub importing: Vec<(u16, NodeName)>,
}

impl NodeLine {
    /// The config epoch Redis keeps when it loads this line: 0 for a replica
    /// with a master (it follows its master's epoch), the printed one otherwise.
    pub fn loaded_config_epoch(&self) -> u64 {
        if self.flags & flags::REPLICA != 0 && self.master.is_some() {
            0
        } else {
            self.config_epoch
        }
    }
}

/// A whole nodes.conf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodesConf {
    /// In file order. After `parse`, exactly one has the MYSELF flag.
    pub nodes: Vec<NodeLine>,
    /// `vars currentEpoch`: the cluster's epoch as this node last knew it.
    pub current_epoch: u64,
    /// `vars lastVoteEpoch`: the epoch of the last failover vote this node gave.
    pub last_vote_epoch: u64,
}

impl NodesConf {
    /// The node with the MYSELF flag.
    pub fn myself(&self) -> Option<&NodeLine> {
        self.nodes.iter().find(|n| n.flags & flags::MYSELF != 0)
    }

    /// The current epoch Redis starts with after loading this file: the saved
    /// one, raised to the largest loaded config epoch should a hand-edited file
    /// hold a larger one.
    pub fn loaded_current_epoch(&self) -> u64 {
        let max_epoch = self.nodes.iter().map(NodeLine::loaded_config_epoch).max();
        self.current_epoch.max(max_epoch.unwrap_or(0))
    }
}

// ---------------------------------------------------------------------------------
// Rendering

/// Appends `node`'s line, exactly as clusterGenNodeDescription writes it, without
/// the newline. Serves both nodes.conf and CLUSTER NODES.
pub fn render_line(node: &NodeLine, out: &mut String) {
    let _ = write!(
        out,
        "{} {}:{}@{}",
        node.name, node.ip, node.port, node.cport
    );
    if let Some(hostname) = node.hostname.as_deref().filter(|h| !h.is_empty()) {
        out.push(',');
        out.push_str(hostname);
    }
    out.push(' ');
    render_flags(node.flags, out);
    match &node.master {
        Some(master) => {
            let _ = write!(out, " {master}");
        }
        None => out.push_str(" -"),
    }
    let myself = node.flags & flags::MYSELF != 0;
    let link = if node.connected || myself {
        "connected"
    } else {
        "disconnected"
    };
    let _ = write!(
        out,
        " {} {} {} {link}",
        node.ping_sent, node.pong_received, node.config_epoch
    );
    for &(first, last) in &node.slots {
        if first == last {
            let _ = write!(out, " {first}");
        } else {
            let _ = write!(out, " {first}-{last}");
        }
    }
    if myself {
        render_open_slots(node, out);
    }
}

/// The flags in `flags::NAMES` order, or `noflags` (representClusterNodeFlags).
fn render_flags(bits: u16, out: &mut String) {
    let mut names = flags::NAMES.iter().filter(|(bit, _)| bits & bit != 0);
    match names.next() {
        None => out.push_str("noflags"),
        Some((_, first)) => {
            out.push_str(first);
            for (_, name) in names {
                out.push(',');
                out.push_str(name);
            }
        }
    }
}

/// The `[slot->-name]` / `[slot-<-name]` entries in slot order. Redis walks its
/// per-slot tables and prints a slot's migration before (and instead of) its
/// import, so a map keyed by slot where migrating overwrites importing yields
/// the same text.
fn render_open_slots(node: &NodeLine, out: &mut String) {
    let mut open: BTreeMap<u16, (&str, &NodeName)> = BTreeMap::new();
    for (slot, name) in &node.importing {
        open.insert(*slot, ("-<-", name));
    }
    for (slot, name) in &node.migrating {
        open.insert(*slot, ("->-", name));
    }
    for (slot, (arrow, name)) in open {
        let _ = write!(out, " [{slot}{arrow}{name}]");
    }
}

/// The whole file as clusterSaveConfig writes it: every node but those still in
/// handshake (they carry a provisional random name, not worth remembering), one
/// line each, then the `vars` line.
pub fn render(conf: &NodesConf) -> String {
    let mut out = String::with_capacity(conf.nodes.len() * 160 + 64);
    for node in conf
        .nodes
        .iter()
        .filter(|n| n.flags & flags::HANDSHAKE == 0)
    {
        render_line(node, &mut out);
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "vars currentEpoch {} lastVoteEpoch {}",
        conf.current_epoch, conf.last_vote_epoch
    );
    out
}

// ---------------------------------------------------------------------------------
// Slot bitmaps

/// The set slots of a bitmap (bit `slot` is `bitmap[slot / 8] & (1 << (slot & 7))`,
/// Redis's bitmapTestBit) as ascending inclusive ranges of maximal length.
pub fn ranges_of(bitmap: &[u8; BITMAP_LEN]) -> Vec<(u16, u16)> {
    let mut ranges = Vec::new();
    let mut start = None;
    for slot in 0..SLOTS {
        match (slot_is_set(bitmap, slot), start) {
            (true, None) => start = Some(slot),
            (false, Some(first)) => {
                ranges.push((first as u16, (slot - 1) as u16));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(first) = start {
        ranges.push((first as u16, (SLOTS - 1) as u16));
    }
    ranges
}

/// The bitmap with the slots of `ranges` set. A range whose start is past its
/// end is empty (as at load); slots past 16383 are ignored.
pub fn bitmap_of(ranges: &[(u16, u16)]) -> Box<[u8; BITMAP_LEN]> {
    let mut bitmap = Box::new([0u8; BITMAP_LEN]);
    for &(first, last) in ranges {
        let last = usize::from(last).min(SLOTS - 1);
        for slot in usize::from(first)..=last {
            set_slot(&mut bitmap, slot);
        }
    }
    bitmap
}

// ---------------------------------------------------------------------------------
// Errors

/// Why a file cannot be loaded.
#[derive(Debug)]
pub enum NodesConfError {
    /// The file exists but could not be read.
    Io { path: PathBuf, source: io::Error },
    /// The text is not a node table. `line` is 1-based; `None` when the file as a
    /// whole is wrong (no `myself` line).
    Corrupt { line: Option<usize>, reason: Reason },
}

/// What is wrong with a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    UnbalancedQuotes,
    /// A node line with fewer than 8 fields (how many it has).
    TooFewFields(usize),
    /// A `vars` line whose words after `vars` do not pair up.
    UnpairedVars,
    /// A field that must be a decimal number (or a port, 0-65535) is not.
    BadNumber {
        field: &'static str,
        value: String,
    },
    /// Not 40 characters of 0-9a-f, or `-` where a master may be absent.
    BadNodeName(String),
    /// The address field: no `:`, an ip too long or not UTF-8, or (without
    /// `@cport`) a port whose default bus port would pass 65535.
    BadAddress(String),
    UnknownFlag(String),
    /// The link-state field is neither `connected` nor `disconnected`.
    BadLinkState(String),
    /// A slot field that is not `N`, `A-B`, `[N->-name]` or `[N-<-name]` with
    /// slots below 16384 and a valid name.
    BadSlot(String),
    /// The same node on two lines.
    DuplicateNode(NodeName),
    /// A second node (or the same flag twice) with the `myself` flag.
    SecondMyself,
    /// No line has the `myself` flag.
    NoMyself,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::UnbalancedQuotes => f.write_str("unbalanced quotes"),
            Reason::TooFewFields(n) => write!(f, "{n} fields, a node line has at least 8"),
            Reason::UnpairedVars => f.write_str("vars line without a value for each name"),
            Reason::BadNumber { field, value } => write!(f, "bad {field} '{value}'"),
            Reason::BadNodeName(name) => write!(f, "invalid node name '{name}'"),
            Reason::BadAddress(addr) => write!(f, "bad address '{addr}'"),
            Reason::UnknownFlag(flag) => write!(f, "unknown flag '{flag}'"),
            Reason::BadLinkState(state) => write!(
                f,
                "link state '{state}' is neither connected nor disconnected"
            ),
            Reason::BadSlot(slot) => write!(f, "bad slot '{slot}'"),
            Reason::DuplicateNode(name) => write!(f, "node {name} listed twice"),
            Reason::SecondMyself => f.write_str("more than one node with the myself flag"),
            Reason::NoMyself => f.write_str("no node with the myself flag"),
        }
    }
}

impl fmt::Display for NodesConfError {
    /// Redis's log lines, the corrupt case followed by where and why.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodesConfError::Io { path, source } => write!(
                f,
                "Loading the cluster node config from {}: {source}",
                path.display()
            ),
            NodesConfError::Corrupt { line, reason } => {
                f.write_str("Unrecoverable error: corrupted cluster config file.")?;
                match line {
                    Some(line) => write!(f, " (line {line}: {reason})"),
                    None => write!(f, " ({reason})"),
                }
            }
        }
    }
}

impl std::error::Error for NodesConfError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NodesConfError::Io { source, .. } => Some(source),
            NodesConfError::Corrupt { .. } => None,
        }
    }
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

// ---------------------------------------------------------------------------------
// Parsing

/// Reads a nodes.conf (or a CLUSTER NODES reply, which has no `vars` line).
///
/// Beyond the line format, it applies what Redis's loading does to the table:
/// a slot claimed by two lines stays with the first (clusterAddSlot refuses an
/// assigned slot), a line's slots come out as ascending maximal ranges, and the
/// migrating/importing entries (a per-slot table in Redis, the last entry for a
/// slot winning) end up on the `myself` line, the only one Redis writes them on.
/// It does not create the nodes that are only named as a master or a migration
/// peer, as Redis does (with no address and no flags): that is the caller's.
///
/// Stricter than Redis: a node listed twice is an error (Redis would merge the
/// lines), the master field must be exactly `-` or a name (Redis takes anything
/// starting with '-' as none), the link state must be `connected` or
/// `disconnected` (Redis ignores it), and a whitespace-only line is skipped
/// (Redis reads past its empty argument vector).
pub fn parse(text: &[u8]) -> Result<NodesConf, NodesConfError> {
    let mut loader = Loader::new();
    for (index, line) in text.split(|&b| b == b'\n').enumerate() {
        loader
            .line(line)
            .map_err(|reason| NodesConfError::Corrupt {
                line: Some(index + 1),
                reason,
            })?;
    }
    loader
        .finish()
        .map_err(|reason| NodesConfError::Corrupt { line: None, reason })
}

/// The table being built, line by line.
struct Loader {
    nodes: Vec<NodeLine>,
    names: HashSet<NodeName>,
    /// Slots some earlier line already owns.
    claimed: Box<[u8; BITMAP_LEN]>,
    migrating: BTreeMap<u16, NodeName>,
    importing: BTreeMap<u16, NodeName>,
    current_epoch: u64,
    last_vote_epoch: u64,
}

impl Loader {
    fn new() -> Loader {
        Loader {
            nodes: Vec::new(),
            names: HashSet::new(),
            claimed: Box::new([0; BITMAP_LEN]),
            migrating: BTreeMap::new(),
            importing: BTreeMap::new(),
            current_epoch: 0,
            last_vote_epoch: 0,
        }
    }

    fn line(&mut self, line: &[u8]) -> Result<(), Reason> {
        // Redis skips a line that is empty or starts with NUL (fgets' view of it).
        if line.first().is_none_or(|&b| b == 0) {
            return Ok(());
        }
        let args = split_args(line).ok_or(Reason::UnbalancedQuotes)?;
        match args.first() {
            None => Ok(()),
            Some(first) if first.eq_ignore_ascii_case(b"vars") => self.vars(&args[1..]),
            Some(_) => self.node(&args),
        }
    }

    /// `vars name value ...`: later values win; unknown names are logged and
    /// skipped, so a newer Redis's additions do not stop an older reader.
    fn vars(&mut self, pairs: &[Vec<u8>]) -> Result<(), Reason> {
        if !pairs.len().is_multiple_of(2) {
            return Err(Reason::UnpairedVars);
        }
        for pair in pairs.chunks_exact(2) {
            let (name, value) = (&pair[0], &pair[1]);
            if name.eq_ignore_ascii_case(b"currentEpoch") {
                self.current_epoch = number(value, "currentEpoch")?;
            } else if name.eq_ignore_ascii_case(b"lastVoteEpoch") {
                self.last_vote_epoch = number(value, "lastVoteEpoch")?;
            } else {
                tracing::warn!("Skipping unknown cluster config variable '{}'", lossy(name));
            }
        }
        Ok(())
    }

    fn node(&mut self, args: &[Vec<u8>]) -> Result<(), Reason> {
        if args.len() < FIXED_FIELDS {
            return Err(Reason::TooFewFields(args.len()));
        }
        let name = node_name(&args[0])?;
        if !self.names.insert(name) {
            return Err(Reason::DuplicateNode(name));
        }
        let (ip, port, cport, hostname) = address(&args[1])?;
        let bits = node_flags(&args[2])?;
        if bits & flags::MYSELF != 0 && self.myself_seen() {
            return Err(Reason::SecondMyself);
        }
        let master = match args[3].as_slice() {
            b"-" => None,
            other => Some(node_name(other)?),
        };
        let mut node = NodeLine {
            name,
            ip,
            port,
            cport,
            hostname,
            flags: bits,
            master,
            ping_sent: number(&args[4], "ping_sent")?,
            pong_received: number(&args[5], "pong_received")?,
            config_epoch: number(&args[6], "config epoch")?,
            connected: link_state(&args[7])?,
            slots: Vec::new(),
            migrating: Vec::new(),
            importing: Vec::new(),
        };
        node.slots = self.slots(&args[FIXED_FIELDS..])?;
        self.nodes.push(node);
        Ok(())
    }

    fn myself_seen(&self) -> bool {
        self.nodes.iter().any(|n| n.flags & flags::MYSELF != 0)
    }

    /// The slot fields of a line: ranges become this line's (minus slots an
    /// earlier line owns), bracketed entries go to the migration tables.
    fn slots(&mut self, fields: &[Vec<u8>]) -> Result<Vec<(u16, u16)>, Reason> {
        let mut mine = Box::new([0u8; BITMAP_LEN]);
        let mut any = false;
        for field in fields {
            match slot_field(field)? {
                SlotField::Range(first, last) => {
                    for slot in usize::from(first)..=usize::from(last) {
                        if !slot_is_set(&self.claimed, slot) {
                            set_slot(&mut self.claimed, slot);
                            set_slot(&mut mine, slot);
                            any = true;
                        }
                    }
                }
                SlotField::Migrating(slot, peer) => {
                    self.migrating.insert(slot, peer);
                }
                SlotField::Importing(slot, peer) => {
                    self.importing.insert(slot, peer);
                }
            }
        }
        Ok(if any { ranges_of(&mine) } else { Vec::new() })
    }

    fn finish(mut self) -> Result<NodesConf, Reason> {
        let myself = self
            .nodes
            .iter_mut()
            .find(|n| n.flags & flags::MYSELF != 0)
            .ok_or(Reason::NoMyself)?;
        myself.migrating = self.migrating.into_iter().collect();
        myself.importing = self.importing.into_iter().collect();
        Ok(NodesConf {
            nodes: self.nodes,
            current_epoch: self.current_epoch,
            last_vote_epoch: self.last_vote_epoch,
        })
    }
}

fn node_name(field: &[u8]) -> Result<NodeName, Reason> {
    NodeName::parse(field).ok_or_else(|| Reason::BadNodeName(lossy(field)))
}

/// A decimal number: ASCII digits only, no sign, no overflow.
fn number(field: &[u8], what: &'static str) -> Result<u64, Reason> {
    let bad = || Reason::BadNumber {
        field: what,
        value: lossy(field),
    };
    if field.is_empty() {
        return Err(bad());
    }
    field.iter().try_fold(0u64, |acc, &b| {
        let digit = match b {
            b'0'..=b'9' => u64::from(b - b'0'),
            _ => return Err(bad()),
        };
        acc.checked_mul(10)
            .and_then(|v| v.checked_add(digit))
            .ok_or_else(bad)
    })
}

fn port_number(field: &[u8], what: &'static str) -> Result<u16, Reason> {
    let value = number(field, what)?;
    u16::try_from(value).map_err(|_| Reason::BadNumber {
        field: what,
        value: lossy(field),
    })
}

/// `ip:port[@cport][,hostname]`. The hostname goes first (it follows the first
/// ','), then the port follows the last ':' (IPv6 addresses contain ':').
fn address(field: &[u8]) -> Result<(String, u16, u16, Option<String>), Reason> {
    let bad = || Reason::BadAddress(lossy(field));
    let (addr, hostname) = match field.iter().position(|&b| b == b',') {
        Some(comma) => (&field[..comma], &field[comma + 1..]),
        None => (field, &b""[..]),
    };
    let colon = addr.iter().rposition(|&b| b == b':').ok_or_else(bad)?;
    let (ip, ports) = (&addr[..colon], &addr[colon + 1..]);
    if ip.len() > IP_MAX_LEN {
        return Err(bad());
    }
    let ip = String::from_utf8(ip.to_vec()).map_err(|_| bad())?;
    let (port, cport) = match ports.iter().position(|&b| b == b'@') {
        Some(at) => {
            let port = port_number(&ports[..at], "port")?;
            (port, port_number(&ports[at + 1..], "bus port")?)
        }
        None => {
            let port = port_number(ports, "port")?;
            let cport = u16::try_from(u32::from(port) + PORT_INCR).map_err(|_| bad())?;
            (port, cport)
        }
    };
    let hostname = match hostname {
        b"" => None,
        h => Some(String::from_utf8(h.to_vec()).map_err(|_| bad())?),
    };
    Ok((ip, port, cport, hostname))
}

/// Comma-separated flag names, case-insensitive, `noflags` for none.
fn node_flags(field: &[u8]) -> Result<u16, Reason> {
    let mut bits = 0;
    for word in field.split(|&b| b == b',') {
        if word.eq_ignore_ascii_case(b"noflags") {
            continue;
        }
        let bit = flags::NAMES
            .iter()
            .find(|(_, name)| word.eq_ignore_ascii_case(name.as_bytes()))
            .map(|&(bit, _)| bit)
            .ok_or_else(|| Reason::UnknownFlag(lossy(word)))?;
        if bit == flags::MYSELF && bits & flags::MYSELF != 0 {
            return Err(Reason::SecondMyself);
        }
        bits |= bit;
    }
    Ok(bits)
}

fn link_state(field: &[u8]) -> Result<bool, Reason> {
    match field {
        b"connected" => Ok(true),
        b"disconnected" => Ok(false),
        other => Err(Reason::BadLinkState(lossy(other))),
    }
}

/// One slot field of a node line.
enum SlotField {
    /// `N` or `A-B`; empty when A > B, as Redis's loop adds nothing then.
    Range(u16, u16),
    /// `[N->-name]`
    Migrating(u16, NodeName),
    /// `[N-<-name]`
    Importing(u16, NodeName),
}

fn slot_field(field: &[u8]) -> Result<SlotField, Reason> {
    let bad = || Reason::BadSlot(lossy(field));
    if let Some(inner) = field.strip_prefix(b"[") {
        let inner = inner.strip_suffix(b"]").ok_or_else(bad)?;
        let dash = inner.iter().position(|&b| b == b'-').ok_or_else(bad)?;
        let slot = slot_number(&inner[..dash]).ok_or_else(bad)?;
        let rest = &inner[dash..];
        let peer = |name: &[u8]| NodeName::parse(name).ok_or_else(bad);
        return if let Some(name) = rest.strip_prefix(b"->-") {
            Ok(SlotField::Migrating(slot, peer(name)?))
        } else if let Some(name) = rest.strip_prefix(b"-<-") {
            Ok(SlotField::Importing(slot, peer(name)?))
        } else {
            Err(bad())
        };
    }
    let (first, last) = match field.iter().position(|&b| b == b'-') {
        Some(dash) => (&field[..dash], &field[dash + 1..]),
        None => (field, field),
    };
    let first = slot_number(first).ok_or_else(bad)?;
    let last = slot_number(last).ok_or_else(bad)?;
    Ok(SlotField::Range(first, last))
}

fn slot_number(field: &[u8]) -> Option<u16> {
    let value = number(field, "slot").ok()?;
    (value < SLOTS as u64).then_some(value as u16)
}

// ---------------------------------------------------------------------------------
// Files

/// Reads and parses `path`. `Ok(None)` when there is no file or it is empty:
/// Redis then starts as a fresh node and writes one.
pub fn load(path: &Path) -> Result<Option<NodesConf>, NodesConfError> {
    let text = match fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(NodesConfError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    if text.is_empty() {
        return Ok(None);
    }
    parse(&text).map(Some)
}

/// Writes `conf` to `path` atomically: the text goes to `<path>.tmp-<pid>` in the
/// same directory, which is renamed over `path`, so a crash at any point leaves
/// the old file or the new one, never part of one. With `fsync`, the data is on
/// disk before the rename and the directory (the rename itself) after it.
///
/// Redis 7.0 rewrites the file in place instead, which keeps its lock on the same
/// inode. Here the new inode replaces the locked one, so with `lock` the temporary
/// file is locked before it is renamed into place and the lock then holds it: no
/// moment exists where the file at `path` is unlocked. Without `lock` the new file
/// is not locked.
pub fn save(
    path: &Path,
    conf: &NodesConf,
    fsync: bool,
    lock: Option<&mut ConfigLock>,
) -> io::Result<()> {
    let tmp = temp_path(path);
    let result = write_and_rename(path, &tmp, render(conf).as_bytes(), fsync, lock);
    if result.is_err() {
        // Gone already if the rename happened; otherwise do not leave it behind.
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn temp_path(path: &Path) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(format!(".tmp-{}", std::process::id()));
    PathBuf::from(name)
}

fn write_and_rename(
    path: &Path,
    tmp: &Path,
    content: &[u8],
    fsync: bool,
    lock: Option<&mut ConfigLock>,
) -> io::Result<()> {
    // A fresh inode: a leftover of a crashed process with our pid could be locked.
    let _ = fs::remove_file(tmp);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(tmp)?;
    if lock.is_some() {
        flock_exclusive(&file)?;
    }
    file.write_all(content)?;
    if fsync {
        file.sync_all()?;
    }
    fs::rename(tmp, path)?;
    if let Some(lock) = lock {
        // Closing the old descriptor releases the lock on the replaced inode.
        close_in_background(std::mem::replace(&mut lock.file, file));
    }
    if fsync {
        sync_parent_dir(path)?;
    }
    Ok(())
}

/// Closes the replaced nodes.conf's last descriptor on a thread of its own. That
/// close frees an unlinked inode, which can wait for the filesystem's journal
/// (over a second on a loaded ext4), and the bus thread saving under the
/// engine's lock must not stall that long: its peers would stop hearing from it
/// and mark it failing.
fn close_in_background(file: File) {
    static CLOSER: OnceLock<Option<mpsc::Sender<File>>> = OnceLock::new();
    let closer = CLOSER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<File>();
        std::thread::Builder::new()
            .name("nodes-conf-close".into())
            .spawn(move || rx.into_iter().for_each(drop))
            .ok()
            .map(|_| tx)
    });
    // Without the thread (it could not start, or is gone) the caller closes it.
    if let Some(tx) = closer {
        let _ = tx.send(file);
    }
}

/// Makes a rename in `path`'s directory durable.
fn sync_parent_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// `flock(LOCK_EX | LOCK_NB)`: an exclusive lock held as long as the open file
/// description lives, released by the kernel when the process dies.
fn flock_exclusive(file: &File) -> io::Result<()> {
    // SAFETY: flock on a descriptor `file` owns; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The lock that keeps two nodes from using one nodes.conf (clusterLockConfig):
/// an exclusive `flock` on the file, held while this value lives. The descriptor
/// is close-on-exec, so a spawned child does not keep the lock after a kill -9 of
/// the server (the reason Redis closes it in its forks).
#[derive(Debug)]
pub struct ConfigLock {
    file: File,
}

impl ConfigLock {
    /// Opens `path` (creating it: locking a file that another process may be
    /// creating at the same time would race) and locks it without waiting. The
    /// errors read as Redis's log lines, the "already used" one with kind
    /// `WouldBlock`.
    pub fn acquire(path: &Path) -> io::Result<ConfigLock> {
        loop {
            let file = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .open(path)
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!(
                            "Can't open {} in order to acquire a lock: {e}",
                            path.display()
                        ),
                    )
                })?;
            flock_exclusive(&file).map_err(|e| lock_error(path, e))?;
            // The holder's save may have renamed a new file over `path` between
            // our open and our flock, leaving us the lock of a file no longer
            // there: lock whatever is at `path` now instead.
            if same_file(&file, path)? {
                return Ok(ConfigLock { file });
            }
        }
    }
}

fn lock_error(path: &Path, e: io::Error) -> io::Error {
    let text = if e.kind() == io::ErrorKind::WouldBlock {
        format!(
            "Sorry, the cluster configuration file {} is already used by a different \
             Redis Cluster node. Please make sure that different nodes use different \
             cluster configuration files.",
            path.display()
        )
    } else {
        format!("Impossible to lock {}: {e}", path.display())
    };
    io::Error::new(e.kind(), text)
}

/// Whether `path` still names the inode `file` has open (false if it is gone).
fn same_file(file: &File, path: &Path) -> io::Result<bool> {
    let open = file.metadata()?;
    match fs::metadata(path) {
        Ok(now) => Ok(now.dev() == open.dev() && now.ino() == open.ino()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: &str = "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca";
    const B: &str = "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1";
    const C: &str = "292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f";

    fn name(text: &str) -> NodeName {
        NodeName::parse(text.as_bytes()).expect("test name")
    }

    fn node(name_text: &str, flags: u16) -> NodeLine {
        NodeLine {
            name: name(name_text),
            ip: "127.0.0.1".into(),
            port: 30001,
            cport: 40001,
            hostname: None,
            flags,
            master: None,
            ping_sent: 0,
            pong_received: 0,
            config_epoch: 0,
            connected: true,
            slots: Vec::new(),
            migrating: Vec::new(),
            importing: Vec::new(),
        }
    }

    fn line_of(node: &NodeLine) -> String {
        let mut out = String::new();
        render_line(node, &mut out);
        out
    }

    fn reason(text: &str) -> (Option<usize>, Reason) {
        match parse(text.as_bytes()) {
            Err(NodesConfError::Corrupt { line, reason }) => (line, reason),
            other => panic!("expected a corrupt file, got {other:?}"),
        }
    }

    /// A file as Redis 7.0 writes it for a three-node cluster.
    fn redis_file() -> String {
        format!(
            "{A} 127.0.0.1:30001@40001,host-a myself,master - 0 1700000000000 3 connected 0-5460 12000 [5461->-{B}] [9000-<-{C}]\n\
             {B} 127.0.0.1:30002@40002 master - 0 1700000001000 2 connected 5461-10922\n\
             {C} ::1:30003@40003 slave,nofailover {B} 1700000002000 1700000001500 2 disconnected\n\
             vars currentEpoch 3 lastVoteEpoch 1\n"
        )
    }

    #[test]
    fn redis_file_round_trips_byte_for_byte() {
        let text = redis_file();
        let conf = parse(text.as_bytes()).expect("parse");
        assert_eq!(render(&conf), text);

        let a = &conf.nodes[0];
        assert_eq!(a.name, name(A));
        assert_eq!(a.hostname.as_deref(), Some("host-a"));
        assert_eq!(a.flags, flags::MYSELF | flags::MASTER);
        assert_eq!(a.slots, vec![(0, 5460), (12000, 12000)]);
        assert_eq!(a.migrating, vec![(5461, name(B))]);
        assert_eq!(a.importing, vec![(9000, name(C))]);
        assert_eq!(a.pong_received, 1_700_000_000_000);

        let c = &conf.nodes[2];
        assert_eq!(c.ip, "::1");
        assert_eq!((c.port, c.cport), (30003, 40003));
        assert_eq!(c.master, Some(name(B)));
        assert_eq!(c.flags, flags::REPLICA | flags::NOFAILOVER);
        assert!(!c.connected);
        assert_eq!(c.config_epoch, 2);
        assert_eq!(c.loaded_config_epoch(), 0);
        assert_eq!((conf.current_epoch, conf.last_vote_epoch), (3, 1));
        assert_eq!(conf.myself().map(|n| n.name), Some(name(A)));
    }

    #[test]
    fn render_line_matches_redis_text() {
        let mut n = node(
            A,
            flags::MYSELF | flags::MASTER | flags::MEET | flags::MIGRATE_TO,
        );
        n.slots = vec![(0, 0), (2, 100), (16383, 16383)];
        n.migrating = vec![(7, name(B))];
        n.importing = vec![(3, name(C)), (7, name(C))];
        n.connected = false; // myself always prints connected
        assert_eq!(
            line_of(&n),
            format!("{A} 127.0.0.1:30001@40001 myself,master - 0 0 0 connected 0 2-100 16383 [3-<-{C}] [7->-{B}]")
        );

        let mut noaddr = node(
            B,
            flags::MASTER | flags::NOADDR | flags::FAIL | flags::PFAIL,
        );
        noaddr.ip.clear();
        noaddr.port = 0;
        noaddr.cport = 0;
        noaddr.connected = false;
        noaddr.migrating = vec![(1, name(A))]; // not myself: not printed
        assert_eq!(
            line_of(&noaddr),
            format!("{B} :0@0 master,fail?,fail,noaddr - 0 0 0 disconnected")
        );

        let mut none = node(C, 0);
        none.hostname = Some(String::new());
        assert_eq!(
            line_of(&none),
            format!("{C} 127.0.0.1:30001@40001 noflags - 0 0 0 connected")
        );
    }

    #[test]
    fn every_printable_flag_in_table_order() {
        let all = flags::NAMES.iter().fold(0, |acc, (bit, _)| acc | bit);
        let mut n = node(A, all);
        n.master = Some(name(B));
        assert_eq!(
            line_of(&n),
            format!("{A} 127.0.0.1:30001@40001 myself,master,slave,fail?,fail,handshake,noaddr,nofailover {B} 0 0 0 connected")
        );
        let text = format!("{}\n", line_of(&n));
        assert_eq!(parse(text.as_bytes()).expect("parse").nodes[0], n);
    }

    #[test]
    fn line_forms_round_trip() {
        let lines = [
            format!("{A} 10.0.0.1:6379@16379,node-a.example myself,master - 0 0 7 connected 0-100 200"),
            format!("{A} :0@0 myself,noaddr - 0 0 0 connected"),
            format!("{A} fe80::1:6379@16379 myself,handshake - 5 6 0 connected"),
            format!("{A} 1.2.3.4:0@65535 myself,slave,fail? {B} 0 0 3 connected [0->-{B}] [16383-<-{C}]"),
            format!("{A} 1.2.3.4:7000@17000 noflags - 0 0 0 disconnected\n{B} 1.2.3.4:7001@17001 myself,master - 0 0 0 connected"),
        ];
        for text in lines {
            let text = format!("{text}\nvars currentEpoch 0 lastVoteEpoch 0\n");
            let conf = parse(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"));
            // render drops handshake nodes as clusterSaveConfig does: compare lines.
            let mut again = String::new();
            for n in &conf.nodes {
                render_line(n, &mut again);
                again.push('\n');
            }
            again.push_str("vars currentEpoch 0 lastVoteEpoch 0\n");
            assert_eq!(again, text);
        }
    }

    #[test]
    fn render_leaves_out_nodes_in_handshake() {
        let conf = NodesConf {
            nodes: vec![
                node(A, flags::MYSELF | flags::MASTER),
                node(B, flags::HANDSHAKE),
            ],
            current_epoch: 5,
            last_vote_epoch: 4,
        };
        assert_eq!(
            render(&conf),
            format!("{A} 127.0.0.1:30001@40001 myself,master - 0 0 0 connected\nvars currentEpoch 5 lastVoteEpoch 4\n")
        );
    }

    #[test]
    fn old_files_without_bus_port() {
        let text = format!("{A} 127.0.0.1:7000 myself,master - 0 0 0 connected\n");
        let conf = parse(text.as_bytes()).expect("parse");
        assert_eq!((conf.nodes[0].port, conf.nodes[0].cport), (7000, 17000));
        assert!(render(&conf).starts_with(&format!("{A} 127.0.0.1:7000@17000 ")));

        let text = format!("{A} 127.0.0.1:55536 myself,master - 0 0 0 connected\n");
        assert!(matches!(reason(&text), (Some(1), Reason::BadAddress(_))));
    }

    #[test]
    fn hostname_splits_at_first_comma_and_port_at_last_colon() {
        let text = format!("{A} ::ffff:1.2.3.4:7000@17000,h:1,x myself - 0 0 0 connected\n");
        let n = &parse(text.as_bytes()).expect("parse").nodes[0];
        assert_eq!(n.ip, "::ffff:1.2.3.4");
        assert_eq!(n.hostname.as_deref(), Some("h:1,x"));

        let text = format!("{A} 1.2.3.4:7000@17000, myself - 0 0 0 connected\n");
        assert_eq!(
            parse(text.as_bytes()).expect("parse").nodes[0].hostname,
            None
        );
    }

    #[test]
    fn flags_are_case_insensitive_and_noflags_is_none() {
        let text = format!("{A} 1.2.3.4:1@2 MYSELF,Master,noflags - 0 0 0 connected\n{B} 1.2.3.4:1@2 NoFlags - 0 0 0 connected\n");
        let conf = parse(text.as_bytes()).expect("parse");
        assert_eq!(conf.nodes[0].flags, flags::MYSELF | flags::MASTER);
        assert_eq!(conf.nodes[1].flags, 0);
        assert!(line_of(&conf.nodes[1]).contains(" noflags - "));
    }

    #[test]
    fn slots_are_normalised_as_redis_holds_them() {
        let text = format!(
            "{A} 1.2.3.4:1@2 myself,master - 0 0 0 connected 10-5 3-7 0-4 9 8 [1->-{B}]\n\
             {B} 1.2.3.4:1@2 master - 0 0 0 connected 5-12 [1->-{C}] [2-<-{C}] [2-<-{A}]\n"
        );
        let conf = parse(text.as_bytes()).expect("parse");
        // 10-5 is empty; overlapping and adjacent ranges merge.
        assert_eq!(conf.nodes[0].slots, vec![(0, 9)]);
        // Slots 5-9 belong to the first line that claimed them.
        assert_eq!(conf.nodes[1].slots, vec![(10, 12)]);
        // Open slots gather on myself, the last entry for a slot winning.
        assert_eq!(conf.nodes[0].migrating, vec![(1, name(C))]);
        assert_eq!(conf.nodes[0].importing, vec![(2, name(A))]);
        assert!(conf.nodes[1].migrating.is_empty() && conf.nodes[1].importing.is_empty());
    }

    #[test]
    fn vars_line() {
        let mine = format!("{A} 1.2.3.4:1@2 myself - 0 0 0 connected\n");
        let conf = parse(mine.as_bytes()).expect("no vars");
        assert_eq!((conf.current_epoch, conf.last_vote_epoch), (0, 0));

        let text =
            format!("VARS CURRENTEPOCH 9 future 1 lastvoteepoch 8\n{mine}vars currentEpoch 10\n");
        let conf = parse(text.as_bytes()).expect("vars");
        assert_eq!((conf.current_epoch, conf.last_vote_epoch), (10, 8));

        let text = format!("{mine}vars currentEpoch\n");
        assert_eq!(reason(&text), (Some(2), Reason::UnpairedVars));
        let text = format!("{mine}vars currentEpoch x\n");
        assert!(matches!(
            reason(&text),
            (
                Some(2),
                Reason::BadNumber {
                    field: "currentEpoch",
                    ..
                }
            )
        ));
    }

    #[test]
    fn blank_lines_and_padding_are_skipped() {
        let text = format!("\n\n{}\n\n  \n\0junk\n\n\n", redis_file());
        let conf = parse(text.as_bytes()).expect("parse");
        assert_eq!(render(&conf), redis_file());
    }

    #[test]
    fn loaded_epochs() {
        let text = format!(
            "{A} 1.2.3.4:1@2 myself,master - 0 0 12 connected\n\
             {B} 1.2.3.4:1@2 slave {A} 0 0 40 connected\n\
             vars currentEpoch 3 lastVoteEpoch 0\n"
        );
        let conf = parse(text.as_bytes()).expect("parse");
        assert_eq!(conf.nodes[1].loaded_config_epoch(), 0);
        assert_eq!(conf.loaded_current_epoch(), 12);
    }

    fn bad_number(field: &'static str, value: &str) -> Reason {
        Reason::BadNumber {
            field,
            value: value.into(),
        }
    }

    #[test]
    fn errors_say_line_and_reason() {
        let good = format!("{A} 1.2.3.4:1@2 myself - 0 0 0 connected");
        let cases: Vec<(String, usize, Reason)> = vec![
            (format!("{good} \"open"), 1, Reason::UnbalancedQuotes),
            (
                format!("{A} 1.2.3.4:1@2 myself - 0 0 0"),
                1,
                Reason::TooFewFields(7),
            ),
            (
                format!("{}X 1:1@2 myself - 0 0 0 connected", &A[..39]),
                1,
                Reason::BadNodeName(format!("{}X", &A[..39])),
            ),
            (
                format!("{A} 1.2.3.4 myself - 0 0 0 connected"),
                1,
                Reason::BadAddress("1.2.3.4".into()),
            ),
            (
                format!("{A} {}:1@2 myself - 0 0 0 connected", "1".repeat(46)),
                1,
                Reason::BadAddress(format!("{}:1@2", "1".repeat(46))),
            ),
            (
                format!("{A} 1.2.3.4:x@2 myself - 0 0 0 connected"),
                1,
                bad_number("port", "x"),
            ),
            (
                format!("{A} 1.2.3.4:65536@2 myself - 0 0 0 connected"),
                1,
                bad_number("port", "65536"),
            ),
            (
                format!("{A} 1.2.3.4:1@-2 myself - 0 0 0 connected"),
                1,
                bad_number("bus port", "-2"),
            ),
            (
                format!("{A} 1.2.3.4:1@2 myself,foo - 0 0 0 connected"),
                1,
                Reason::UnknownFlag("foo".into()),
            ),
            (
                format!("{A} 1.2.3.4:1@2 myself,meet - 0 0 0 connected"),
                1,
                Reason::UnknownFlag("meet".into()),
            ),
            (
                format!("{A} 1.2.3.4:1@2 myself, - 0 0 0 connected"),
                1,
                Reason::UnknownFlag(String::new()),
            ),
            (
                format!("{A} 1.2.3.4:1@2 myself,myself - 0 0 0 connected"),
                1,
                Reason::SecondMyself,
            ),
            (
                format!("{good}\n{B} 1.2.3.4:1@2 myself - 0 0 0 connected"),
                2,
                Reason::SecondMyself,
            ),
            (
                format!("{A} 1.2.3.4:1@2 myself -x 0 0 0 connected"),
                1,
                Reason::BadNodeName("-x".into()),
            ),
            (
                format!("{A} 1.2.3.4:1@2 myself abc 0 0 0 connected"),
                1,
                Reason::BadNodeName("abc".into()),
            ),
            (
                format!("{A} 1.2.3.4:1@2 myself - 1x 0 0 connected"),
                1,
                bad_number("ping_sent", "1x"),
            ),
            (
                format!("{A} 1.2.3.4:1@2 myself - 0 -1 0 connected"),
                1,
                bad_number("pong_received", "-1"),
            ),
            (
                format!("{A} 1.2.3.4:1@2 myself - 0 0 18446744073709551616 connected"),
                1,
                bad_number("config epoch", "18446744073709551616"),
            ),
            (
                format!("{A} 1.2.3.4:1@2 myself - 0 0 0 up"),
                1,
                Reason::BadLinkState("up".into()),
            ),
            (format!("{good} 16384"), 1, Reason::BadSlot("16384".into())),
            (
                format!("{good} 0-16384"),
                1,
                Reason::BadSlot("0-16384".into()),
            ),
            (format!("{good} -5"), 1, Reason::BadSlot("-5".into())),
            (format!("{good} 5-"), 1, Reason::BadSlot("5-".into())),
            (format!("{good} 12abc"), 1, Reason::BadSlot("12abc".into())),
            (
                format!("{good} [16384->-{B}]"),
                1,
                Reason::BadSlot(format!("[16384->-{B}]")),
            ),
            (
                format!("{good} [5->-{B}"),
                1,
                Reason::BadSlot(format!("[5->-{B}")),
            ),
            (
                format!("{good} [5-?-{B}]"),
                1,
                Reason::BadSlot(format!("[5-?-{B}]")),
            ),
            (
                format!("{good} [5->-abc]"),
                1,
                Reason::BadSlot("[5->-abc]".into()),
            ),
            (format!("{good} [5-"), 1, Reason::BadSlot("[5-".into())),
            (format!("{good}\n{good}"), 2, Reason::DuplicateNode(name(A))),
        ];
        for (text, line, want) in cases {
            assert_eq!(reason(&text), (Some(line), want), "{text}");
        }
        let text = format!("{B} 1.2.3.4:1@2 master - 0 0 0 connected\n");
        assert_eq!(reason(&text), (None, Reason::NoMyself));
        assert_eq!(reason(""), (None, Reason::NoMyself));
    }

    #[test]
    fn error_text_starts_with_redis_log_line() {
        let err = parse(format!("\n\n{A} 1:1@2 foo - 0 0 0 connected\n").as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Unrecoverable error: corrupted cluster config file. (line 3: unknown flag 'foo')"
        );
        let err = parse(b"vars currentEpoch 1 lastVoteEpoch 1\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "Unrecoverable error: corrupted cluster config file. (no node with the myself flag)"
        );
    }

    // -- bitmaps

    #[test]
    fn bitmap_edges() {
        let empty = Box::new([0u8; BITMAP_LEN]);
        assert!(ranges_of(&empty).is_empty());
        assert_eq!(bitmap_of(&[]), empty);

        let full = Box::new([0xffu8; BITMAP_LEN]);
        assert_eq!(ranges_of(&full), vec![(0, 16383)]);
        assert_eq!(bitmap_of(&[(0, 16383)]), full);

        let first = bitmap_of(&[(0, 0)]);
        assert_eq!(first[0], 1);
        assert_eq!(ranges_of(&first), vec![(0, 0)]);

        let last = bitmap_of(&[(16383, 16383)]);
        assert_eq!(last[BITMAP_LEN - 1], 0x80);
        assert_eq!(ranges_of(&last), vec![(16383, 16383)]);

        let alternating = Box::new([0x55u8; BITMAP_LEN]);
        let ranges = ranges_of(&alternating);
        assert_eq!(ranges.len(), SLOTS / 2);
        assert!(ranges
            .iter()
            .enumerate()
            .all(|(i, &r)| r == (2 * i as u16, 2 * i as u16)));
        assert_eq!(bitmap_of(&ranges), alternating);

        // Bytes straddled, empty and out-of-range ranges.
        assert_eq!(
            ranges_of(&bitmap_of(&[(7, 8), (20, 10), (16000, 65535)])),
            vec![(7, 8), (16000, 16383)]
        );
    }

    // -- files

    /// A scratch directory, removed at the end.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let dir = std::env::temp_dir()
                .join(format!("tessera-nodes-conf-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).expect("scratch dir");
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn load_missing_empty_and_present() {
        let dir = Scratch::new("load");
        let path = dir.0.join("nodes.conf");
        assert!(load(&path).expect("missing").is_none());
        fs::write(&path, b"").expect("write");
        assert!(load(&path).expect("empty").is_none());
        fs::write(&path, redis_file()).expect("write");
        let conf = load(&path).expect("load").expect("some");
        assert_eq!(render(&conf), redis_file());
        fs::write(&path, b"\n").expect("write");
        assert!(matches!(
            load(&path),
            Err(NodesConfError::Corrupt {
                line: None,
                reason: Reason::NoMyself
            })
        ));
        let err = load(&dir.0).unwrap_err(); // a directory
        assert!(
            err.to_string()
                .starts_with("Loading the cluster node config from "),
            "{err}"
        );
    }

    #[test]
    fn save_replaces_the_file_and_keeps_the_lock() {
        let dir = Scratch::new("save");
        let path = dir.0.join("nodes.conf");
        let conf = parse(redis_file().as_bytes()).expect("parse");

        let mut lock = ConfigLock::acquire(&path).expect("lock");
        let err = ConfigLock::acquire(&path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(
            err.to_string(),
            format!(
                "Sorry, the cluster configuration file {} is already used by a different Redis Cluster node. \
                 Please make sure that different nodes use different cluster configuration files.",
                path.display()
            )
        );

        fs::write(&path, "x".repeat(10_000)).expect("write a longer file");
        let before = fs::metadata(&path).expect("stat").ino();
        save(&path, &conf, true, Some(&mut lock)).expect("save");
        assert_ne!(
            fs::metadata(&path).expect("stat").ino(),
            before,
            "a new inode"
        );
        assert_eq!(fs::read_to_string(&path).expect("read"), redis_file());
        let names: Vec<_> = fs::read_dir(&dir.0)
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(
            names,
            vec![OsString::from("nodes.conf")],
            "no temporary file left"
        );

        // The new file is the locked one.
        assert_eq!(
            ConfigLock::acquire(&path).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        save(&path, &conf, false, Some(&mut lock)).expect("save again");
        assert_eq!(
            ConfigLock::acquire(&path).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        drop(lock);
        let _relocked = ConfigLock::acquire(&path).expect("free once dropped");
    }

    #[test]
    fn failed_save_leaves_no_temporary_file() {
        let dir = Scratch::new("fail");
        // Renaming a file over a non-empty directory fails.
        let path = dir.0.join("nodes.conf");
        fs::create_dir_all(path.join("sub")).expect("dir");
        let conf = parse(redis_file().as_bytes()).expect("parse");
        assert!(save(&path, &conf, false, None).is_err());
        assert!(!temp_path(&path).exists());
    }

    // -- property

    fn arb_name() -> impl Strategy<Value = NodeName> {
        "[0-9a-f]{40}".prop_map(|s| name(&s))
    }

    /// Flags render can print and parse read back (handshake nodes are not saved).
    const SAVED_FLAGS: u16 = flags::MASTER
        | flags::REPLICA
        | flags::PFAIL
        | flags::FAIL
        | flags::NOADDR
        | flags::NOFAILOVER;

    fn arb_node() -> impl Strategy<Value = NodeLine> {
        let address = (
            "[0-9a-f:.]{0,45}",
            any::<u16>(),
            any::<u16>(),
            proptest::option::of("[a-z0-9][a-z0-9.-]{0,20}"),
        );
        let state = (
            any::<u16>(),
            proptest::option::of(arb_name()),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<bool>(),
        );
        let slots = proptest::collection::vec((0u16..16384, 0u16..300), 0..6);
        (arb_name(), address, state, slots).prop_map(
            |(
                name,
                (ip, port, cport, hostname),
                (bits, master, ping, pong, epoch, connected),
                raw,
            )| NodeLine {
                name,
                ip,
                port,
                cport,
                hostname,
                flags: bits & SAVED_FLAGS,
                master,
                ping_sent: ping,
                pong_received: pong,
                config_epoch: epoch,
                connected,
                // Raw (start, length) runs; made canonical with the whole table.
                slots: raw
                    .into_iter()
                    .map(|(s, len)| (s, s.saturating_add(len).min(16383)))
                    .collect(),
                migrating: Vec::new(),
                importing: Vec::new(),
            },
        )
    }

    /// Open slots (migrating or importing) and their peers.
    fn arb_open() -> impl Strategy<Value = Vec<(u16, NodeName)>> {
        proptest::collection::vec((0u16..16384, arb_name()), 0..5)
    }

    /// Valid, canonical tables: distinct names, one myself, disjoint canonical
    /// slots, open slots on myself only and never both migrating and importing.
    fn arb_conf() -> impl Strategy<Value = NodesConf> {
        (
            proptest::collection::vec(arb_node(), 1..6),
            any::<usize>(),
            any::<u64>(),
            any::<u64>(),
            arb_open(),
            arb_open(),
        )
            .prop_map(
                |(nodes, me, current_epoch, last_vote_epoch, migrating, importing)| {
                    let mut seen = HashSet::new();
                    let mut nodes: Vec<NodeLine> =
                        nodes.into_iter().filter(|n| seen.insert(n.name)).collect();
                    let mut claimed = Box::new([0u8; BITMAP_LEN]);
                    for n in &mut nodes {
                        let mut mine = bitmap_of(&n.slots);
                        for (m, c) in mine.iter_mut().zip(claimed.iter_mut()) {
                            *m &= !*c;
                            *c |= *m;
                        }
                        n.slots = ranges_of(&mine);
                    }
                    let me = me % nodes.len();
                    let migrating: BTreeMap<u16, NodeName> = migrating.into_iter().collect();
                    let importing: BTreeMap<u16, NodeName> = importing
                        .into_iter()
                        .filter(|(s, _)| !migrating.contains_key(s))
                        .collect();
                    let myself = &mut nodes[me];
                    myself.flags |= flags::MYSELF;
                    myself.connected = true;
                    myself.migrating = migrating.into_iter().collect();
                    myself.importing = importing.into_iter().collect();
                    NodesConf {
                        nodes,
                        current_epoch,
                        last_vote_epoch,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn render_then_parse_is_identity(conf in arb_conf()) {
            let text = render(&conf);
            let back = parse(text.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
            prop_assert_eq!(&back, &conf);
            prop_assert_eq!(render(&back), text);
        }

        #[test]
        fn bitmap_ranges_bitmap_is_identity(bytes in proptest::collection::vec(any::<u8>(), BITMAP_LEN)) {
            let mut bitmap = Box::new([0u8; BITMAP_LEN]);
            bitmap.copy_from_slice(&bytes);
            let ranges = ranges_of(&bitmap);
            prop_assert!(ranges.windows(2).all(|w| w[0].1 + 1 < w[1].0), "maximal and ascending");
            prop_assert_eq!(bitmap_of(&ranges), bitmap);
        }
    }
}
