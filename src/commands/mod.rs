//! Commands: the declarative table (name → arity, flags, keys, handler) and the
//! contexts handlers run in. One file per command family.
//!
//! A handler is one of three kinds:
//! * `Keyed` runs on the shard that owns its keys, with that shard's data — inline on
//!   the connection's home shard, or in a batch sent to the owner. When a command's keys
//!   span shards its `Cross` rule says how: split per key and merge, or a dedicated
//!   multi-shard coordinator.
//! * `Client` runs at home with the connection's session (PING, SELECT, HELLO ...).
//! * `Global` is an async coordinator at home (FLUSHALL, DBSIZE, RENAME across shards,
//!   INFO ...); it is a barrier in the pipeline.

pub mod acl;
pub mod bitops;
pub mod blocking;
pub mod client;
pub mod cluster;
pub mod config_cmd;
pub mod debug;
pub mod digest;
pub mod geo;
pub mod hash_expire;
pub mod hash_getex;
pub mod hashes;
pub mod hll;
pub mod keys;
pub mod latency;
pub mod lists;
pub mod lolwut;
pub mod migrate;
pub mod multi;
pub mod persistence;
pub mod pubsub;
pub mod replication;
pub mod scripting;
pub mod server;
pub mod sets;
pub mod sort;
pub mod streams;
pub mod strings;
pub mod subcommands;
pub mod table;
pub mod zsets;

use std::future::Future;
use std::pin::Pin;

use crate::clients::Session;
use crate::protocol::parser::ArgSpan;
use crate::protocol::reply::{Protocol, ReplyWriter};
use crate::shard::ShardData;
use crate::storage::{Db, Entry, StrValue, Value};

/// Keyspace-notification classes for `ExecCtx::notify` / `crate::pubsub::notify`.
pub use crate::config::notify;
pub use table::{lookup, table, CommandSpec, Cross, KeySpec, Kind, Merge};

pub type KeyedFn = fn(&mut ExecCtx);
pub type ClientFn = fn(&mut ClientCtx);
pub type GlobalFn = for<'a> fn(&'a mut GlobalCtx<'_>) -> Pin<Box<dyn Future<Output = ()> + 'a>>;

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
pub const SYNTAX_ERR: &str = "ERR syntax error";
pub const NOT_INT: &str = "ERR value is not an integer or out of range";
pub const NOT_FLOAT: &str = "ERR value is not a valid float";
pub const OVERFLOW: &str = "ERR increment or decrement would overflow";
pub const NO_SUCH_KEY: &str = "ERR no such key";
pub const DB_INDEX_OUT_OF_RANGE: &str = "ERR DB index is out of range";

/// A command's arguments (argv[0] is the name), borrowed from the read buffer or a batch.
#[derive(Clone, Copy)]
pub struct Args<'a> {
    buf: &'a [u8],
    spans: &'a [ArgSpan],
}

impl<'a> Args<'a> {
    pub fn new(buf: &'a [u8], spans: &'a [ArgSpan]) -> Args<'a> {
        Args { buf, spans }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    #[inline]
    pub fn get(&self, i: usize) -> &'a [u8] {
        match self.spans.get(i) {
            Some(s) => &self.buf[s.start as usize..s.end as usize],
            None => &[],
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// The arguments from `from` on, as a command of their own (COMMAND GETKEYS).
    pub fn tail(&self, from: usize) -> Args<'a> {
        Args {
            buf: self.buf,
            spans: self.spans.get(from..).unwrap_or(&[]),
        }
    }

    pub fn to_vecs(&self) -> Vec<Vec<u8>> {
        self.iter().map(|a| a.to_vec()).collect()
    }

    /// Case-insensitive comparison of argument `i` with an ASCII keyword.
    #[inline]
    pub fn is(&self, i: usize, word: &str) -> bool {
        self.get(i).eq_ignore_ascii_case(word.as_bytes())
    }
}

/// Owned arguments gathered into one buffer and spans, so that code holding a
/// `Vec<Vec<u8>>` (a queued MULTI command, a script's `redis.call`, a global
/// command's `GlobalCtx.args` carried to another shard) can run the code written
/// for a handler's borrowed [`Args`].
pub struct OwnedArgs {
    buf: Vec<u8>,
    spans: Vec<ArgSpan>,
}

impl OwnedArgs {
    pub fn new(argv: &[Vec<u8>]) -> OwnedArgs {
        let mut buf = Vec::with_capacity(argv.iter().map(|a| a.len()).sum());
        let mut spans = Vec::with_capacity(argv.len());
        for a in argv {
            // A command's arguments are within what the parser accepted, and its
            // spans are 32-bit too.
            let start = buf.len() as u32;
            buf.extend_from_slice(a);
            spans.push(ArgSpan {
                start,
                end: buf.len() as u32,
            });
        }
        OwnedArgs { buf, spans }
    }

    pub fn args(&self) -> Args<'_> {
        Args::new(&self.buf, &self.spans)
    }
}

/// Context of a keyed command, on the shard that owns its keys.
pub struct ExecCtx<'a> {
    pub data: &'a mut ShardData,
    pub db: usize,
    pub args: Args<'a>,
    pub out: ReplyWriter<'a>,
    pub now: u64,
    /// Bit n: the command left its n-th key (in argument order) as it was, so the write
    /// hooks skip it: Redis signals WATCH, tracking and blocked clients only for keys a
    /// write changed (an SADD of members already there aborts nobody's EXEC).
    pub unchanged: u64,
    /// How much the command adds to the change counter (`rdb_changes_since_last_save`,
    /// Redis's server.dirty) when it says so (`dirty`): Redis counts per element for
    /// many commands (SADD s a b c is 3). None: one per key changed.
    pub dirty: Option<u64>,
    /// What the command propagates, when it is not the command as it came (see
    /// `effects::Propagation`).
    pub propagation: crate::effects::Propagation,
    /// Signals for keys beyond the command's own changed keys, which the executor
    /// sends with theirs (see `ExecCtx::signal_also`).
    pub also: Vec<AlsoSignal>,
    /// The caller is in CLIENT NO-TOUCH mode (and this is not TOUCH): lookups leave
    /// the access clock and LFU counter as they were.
    pub no_touch: bool,
}

/// A signal the executor sends for a key a handler changed that its own changed keys
/// do not cover (`ExecCtx::signal_also`).
pub struct AlsoSignal {
    pub db: usize,
    pub key: Vec<u8>,
    /// WATCH and tracking hear of it (Redis's signalModifiedKey).
    pub modified: bool,
    /// Clients blocked on it try again.
    pub wake: bool,
}

/// `CMD key n`: how a pop of `n` elements propagates (LMPOP as LPOP / RPOP, ZMPOP as
/// ZPOPMIN / ZPOPMAX, and their blocking forms), as Redis rewrites them.
pub fn counted_pop(cmd: &[u8], key: &[u8], n: usize) -> Vec<Vec<u8>> {
    vec![cmd.to_vec(), key.to_vec(), n.to_string().into_bytes()]
}

/// How many of a command's `keys` keys it changed, given its handler's `unchanged`.
#[inline]
pub fn changed_keys(unchanged: u64, keys: usize) -> u64 {
    let tracked = if keys >= 64 {
        u64::MAX
    } else {
        (1u64 << keys) - 1
    };
    keys as u64 - u64::from((unchanged & tracked).count_ones())
}

/// Whether the `nth` key of a command whose handler left `unchanged` (see
/// `ExecCtx::unchanged`) was written. Keys past the 64th always count as written.
#[inline]
pub fn key_changed(unchanged: u64, nth: usize) -> bool {
    nth >= 64 || unchanged & (1u64 << nth) == 0
}

impl<'a> ExecCtx<'a> {
    /// The command changed `n` things as Redis's server.dirty counts them (elements
    /// added or removed, fields set ...), instead of one per key changed.
    #[inline]
    pub fn dirty(&mut self, n: u64) {
        self.dirty = Some(self.dirty.unwrap_or(0) + n);
    }

    /// The executor also signals `key` of `db` after this command: as modified (WATCH,
    /// tracking) and / or to the clients blocked on it. For what a handler changes
    /// beyond its own keys: MOVE's key in the target database, the cached estimate
    /// PFCOUNT writes back, a consumer group XGROUP SETID / DESTROY changed under its
    /// blocked readers.
    pub fn signal_also(&mut self, db: usize, key: &[u8], modified: bool, wake: bool) {
        self.also.push(AlsoSignal {
            db,
            key: key.to_vec(),
            modified,
            wake,
        });
    }

    /// The command's `nth` key (in argument order) was left as it was.
    #[inline]
    pub fn key_unchanged(&mut self, nth: usize) {
        if nth < 64 {
            self.unchanged |= 1u64 << nth;
        }
    }

    /// Nothing the command touched changed (a SET NX that did not set, an SREM of
    /// members that were not there ...): no key of it is signalled.
    #[inline]
    pub fn nothing_changed(&mut self) {
        self.unchanged = u64::MAX;
    }

    /// Of the command's keys only the `nth` changed (a STORE command's destination;
    /// its sources were only read), or none when `changed` is false.
    #[inline]
    pub fn only_changed(&mut self, nth: usize, changed: bool) {
        self.unchanged = if changed && nth < 64 {
            !(1u64 << nth)
        } else {
            u64::MAX
        };
    }

    /// The access clock for entries touched now (seconds, as OBJECT IDLETIME counts).
    #[inline]
    pub fn lru(&self) -> u32 {
        (self.now / 1000) as u32
    }

    #[inline]
    pub fn db(&mut self) -> &mut Db {
        &mut self.data.dbs[self.db]
    }

    #[inline]
    pub fn arg(&self, i: usize) -> &[u8] {
        self.args.get(i)
    }

    /// Looks up a live key, counting a keyspace hit or miss as Redis does for reads.
    pub fn lookup_read(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let now = self.now;
        let lru = self.lru();
        let lfu = self.lfu_touch();
        let stats = &mut self.data.stats;
        match self.data.dbs[self.db].get(key, now) {
            Some(e) => {
                stats.keyspace_hits += 1;
                if !self.no_touch {
                    e.touch(lru, lfu);
                }
                Some(e)
            }
            None => {
                stats.keyspace_misses += 1;
                crate::pubsub::notify(notify::KEY_MISS, "keymiss", key, self.db);
                None
            }
        }
    }

    /// Looks a key up for reading and hands back the reply writer beside it, so a
    /// handler can reply straight from the stored value without copying it.
    pub fn read_with_out(&mut self, key: &[u8]) -> (Option<&mut Entry>, &mut ReplyWriter<'a>) {
        let now = self.now;
        let lru = self.lru();
        let lfu = self.lfu_touch();
        let data = &mut *self.data;
        let entry = match data.dbs[self.db].get(key, now) {
            Some(e) => {
                data.stats.keyspace_hits += 1;
                if !self.no_touch {
                    e.touch(lru, lfu);
                }
                Some(e)
            }
            None => {
                data.stats.keyspace_misses += 1;
                crate::pubsub::notify(notify::KEY_MISS, "keymiss", key, self.db);
                None
            }
        };
        (entry, &mut self.out)
    }

    /// Looks up a live key for writing (no hit/miss accounting).
    pub fn lookup_write(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let now = self.now;
        let lru = self.lru();
        let lfu = self.lfu_touch();
        let no_touch = self.no_touch;
        let e = self.data.dbs[self.db].get(key, now)?;
        if !no_touch {
            e.touch(lru, lfu);
        }
        Some(e)
    }

    /// What an access feeds the LFU counter: (log factor, decay minutes, a random
    /// number) under an LFU policy, None otherwise.
    #[inline]
    fn lfu_touch(&mut self) -> Option<(u64, u64, u64)> {
        let (factor, decay) = self.data.mem.lfu?;
        Some((factor, decay, self.data.rng.next_u64()))
    }

    pub fn error(&mut self, msg: &str) {
        self.out.error(msg);
    }

    /// Redis's addReplyErrorArity, for a handler that finds the argument count wrong
    /// past what the table's arity checks (HSET's odd pairs, HSETEX's FIELDS count).
    pub fn arity_error(&mut self) {
        let name = String::from_utf8_lossy(self.args.get(0)).to_ascii_lowercase();
        self.error(&format!(
            "ERR wrong number of arguments for '{name}' command"
        ));
    }

    /// Emits a keyspace notification (`class` a `config::notify` bit, `event` Redis's
    /// event name) for `key` in this command's database. Call it after the change; it
    /// is one predictable branch when notifications are off (the default).
    #[inline]
    pub fn notify(&self, class: u32, event: &str, key: &[u8]) {
        crate::pubsub::notify(class, event, key, self.db)
    }
}

/// Redis's reply to a DENYOOM command while used memory is over maxmemory.
pub const OOM_ERR: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// Refuses a command for lack of memory: the OOM error, counted as Redis counts a
/// rejected command (rejected_calls, errorstat_OOM).
pub fn oom_reject(data: &mut ShardData, cmd: u16, proto: Protocol, out: &mut Vec<u8>) {
    ReplyWriter { out, proto }.error(OOM_ERR);
    data.stats.record_rejected(Some(cmd));
    data.stats.record_error("OOM");
}

/// The key holds a value of another type than the command works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrongType;

/// The value of a string key: `Ok(None)` if missing, `Err(WrongType)` if it holds
/// another type.
pub fn read_str(entry: Option<&mut Entry>) -> Result<Option<&mut StrValue>, WrongType> {
    match entry {
        None => Ok(None),
        Some(e) => match e.value_mut() {
            Value::Str(s) => Ok(Some(s)),
            _ => Err(WrongType),
        },
    }
}

/// Context of a command that needs the connection's session, run at home.
pub struct ClientCtx<'a> {
    pub session: &'a mut Session,
    pub args: Args<'a>,
    pub out: ReplyWriter<'a>,
}

/// Context of an async coordinator, run at home as a pipeline barrier.
pub struct GlobalCtx<'a> {
    pub session: &'a mut Session,
    pub args: Vec<Vec<u8>>,
    pub out: &'a mut Vec<u8>,
    /// The command writes: its multi-shard locks invalidate WATCHes on release.
    pub write: bool,
    /// What the command propagates (see `effects::Propagation`); a coordinator reports
    /// there what its multi-shard operations changed.
    pub propagation: crate::effects::Propagation,
}

impl GlobalCtx<'_> {
    /// Ends a multi-shard operation the command ran: what it propagates (as stated,
    /// or itself if the operation changed anything) goes into the effect stream while
    /// its locks are still held, so no other write to its keys can come in between;
    /// then the locks go.
    pub async fn release(&mut self, op: crate::shard::multi::MultiShardOp) {
        self.propagation.changed(op.changes());
        if crate::effects::active() {
            let (txn, db) = (self.session.exec_owner, self.session.db);
            self.propagation.flush(txn, db, &self.args);
        }
        let cell = self.session.cell.clone();
        op.release(&cell).await;
    }

    pub fn w(&mut self) -> ReplyWriter<'_> {
        ReplyWriter {
            out: self.out,
            proto: self.session.proto,
        }
    }

    pub fn arg(&self, i: usize) -> &[u8] {
        self.args.get(i).map(|v| v.as_slice()).unwrap_or(&[])
    }

    pub fn is(&self, i: usize, word: &str) -> bool {
        self.arg(i).eq_ignore_ascii_case(word.as_bytes())
    }

    pub fn proto(&self) -> Protocol {
        self.session.proto
    }

    pub fn error(&mut self, msg: &str) {
        self.w().error(msg)
    }

    /// The owner a multi-shard operation started here takes locks as: inside EXEC the
    /// transaction's (it already holds every shard), else a fresh one.
    pub fn owner(&self) -> crate::shard::locks::LockOwner {
        crate::shard::locks::LockOwner {
            id: self
                .session
                .exec_owner
                .unwrap_or_else(|| self.session.cell.next_txn_id()),
            write: self.write,
            client: self.session.id(),
        }
    }

    /// Redis's reply to an unknown subcommand of a container command.
    pub fn unknown_subcommand(&mut self, container: &str) {
        let msg = format!(
            "ERR unknown subcommand '{}'. Try {container} HELP.",
            String::from_utf8_lossy(self.arg(1))
        );
        self.error(&msg)
    }

    /// addReplySubcommandSyntaxError: what a command that parses its own
    /// subcommands (DEBUG) says to one it does not know or to a wrong argument count.
    pub fn subcommand_syntax_error(&mut self, container: &str) {
        let sub = String::from_utf8_lossy(self.arg(1));
        let sub: String = sub.chars().take(128).collect();
        let msg = format!(
            "ERR unknown subcommand or wrong number of arguments for '{sub}'. Try {container} HELP."
        );
        self.error(&msg)
    }
}

/// Parses a SCAN cursor as Redis's strtoul-based parseScanCursorOrReply does: an
/// optional sign, digits, nothing else, no overflow ("-1" wraps like strtoul; "" is 0).
pub fn parse_scan_cursor(b: &[u8]) -> Option<u64> {
    let (neg, digits) = match b.first() {
        None => return Some(0),
        Some(b'-') => (true, &b[1..]),
        Some(b'+') => (false, &b[1..]),
        Some(_) => (false, b),
    };
    if digits.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    Some(if neg { v.wrapping_neg() } else { v })
}

/// HSCAN / SSCAN / ZSCAN options from argument 3 on: (COUNT, MATCH pattern), where a
/// MATCH of `*` is no filter. Errors are Redis's texts.
pub fn parse_scan_opts<'a>(args: &Args<'a>) -> Result<(usize, Option<&'a [u8]>), &'static str> {
    let mut count = 10usize;
    let mut pattern = None;
    let mut i = 3;
    while i < args.len() {
        let more = i + 1 < args.len();
        if args.is(i, "count") && more {
            match parse_i64(args.get(i + 1)) {
                None => return Err(NOT_INT),
                Some(n) if n < 1 => return Err(SYNTAX_ERR),
                Some(n) => count = n as usize,
            }
        } else if args.is(i, "match") && more {
            let p = args.get(i + 1);
            pattern = (p != b"*").then_some(p);
        } else {
            return Err(SYNTAX_ERR);
        }
        i += 2;
    }
    Ok((count, pattern))
}

/// Parses an argument as Redis's string2ll / getLongLongFromObject: the canonical
/// decimal form of an i64 ("01", "+1", "-0" and spaces are rejected).
#[inline]
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    crate::util::string2ll(b)
}

/// Parses a float the way Redis's getLongDoubleFromObject / strtold do: leading and
/// trailing spaces rejected, "inf"/"-inf" accepted, NaN rejected.
pub fn parse_f64(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty()
        || s.starts_with(|c: char| c.is_ascii_whitespace())
        || s.ends_with(|c: char| c.is_ascii_whitespace())
    {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    let v = match lower.as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ => {
            if lower.contains("nan") || lower.contains("inf") {
                return None;
            }
            s.parse::<f64>().ok()?
        }
    };
    if v.is_nan() {
        None
    } else {
        Some(v)
    }
}

/// Writes `n` as a bulk reply, through a stack buffer.
pub fn reply_i64_bulk(out: &mut ReplyWriter, n: i64) {
    let mut b = [0u8; 24];
    out.bulk(crate::storage::value::format_i64(n, &mut b));
}

/// Replies with a string value as a bulk string.
pub fn reply_str(out: &mut ReplyWriter, v: &StrValue) {
    let mut b = [0u8; 24];
    out.bulk(v.bytes(&mut b));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_parsing_is_strict() {
        assert_eq!(parse_i64(b"10"), Some(10));
        assert_eq!(parse_i64(b"-10"), Some(-10));
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"01"), None);
        assert_eq!(parse_i64(b"+1"), None);
        assert_eq!(parse_i64(b" 1"), None);
        assert_eq!(parse_i64(b"1.0"), None);
        assert_eq!(parse_i64(b"9223372036854775808"), None);
    }

    #[test]
    fn float_parsing() {
        assert_eq!(parse_f64(b"1.5"), Some(1.5));
        assert_eq!(parse_f64(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_f64(b"nan"), None);
        assert_eq!(parse_f64(b" 1"), None);
        assert_eq!(parse_f64(b"1e3"), Some(1000.0));
        assert_eq!(parse_f64(b""), None);
    }

    #[test]
    fn cursors_parse_like_strtoul() {
        assert_eq!(parse_scan_cursor(b"0"), Some(0));
        assert_eq!(parse_scan_cursor(b"+7"), Some(7));
        assert_eq!(parse_scan_cursor(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_scan_cursor(b"-1"), Some(u64::MAX));
        assert_eq!(parse_scan_cursor(b"-18446744073709551616"), None);
        assert_eq!(parse_scan_cursor(b"18446744073709551616"), None);
        assert_eq!(parse_scan_cursor(b"x"), None);
        assert_eq!(parse_scan_cursor(b"-"), None);
        assert_eq!(parse_scan_cursor(b" 1"), None);
        assert_eq!(parse_scan_cursor(b"1 "), None);
        // strtoul("") parses nothing and stops at the terminator: cursor 0, as Redis.
        assert_eq!(parse_scan_cursor(b""), Some(0));
    }
}
