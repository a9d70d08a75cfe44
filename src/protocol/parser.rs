//! Incremental, zero-copy RESP request parser.
//!
//! This reproduces the observable behaviour of Redis 7.0's
//! `processMultibulkBuffer` / `processInlineBuffer` (networking.c):
//! which inputs are accepted, how inline lines are split, and the exact
//! text of every protocol error.
//!
//! # Usage contract
//!
//! The caller owns a growable input buffer and calls [`RequestParser::parse`]
//! with the whole unconsumed part of it. The parser never copies multibulk
//! payloads: it reports [`ArgSpan`]s that index into the caller's buffer.
//!
//! * `Ok(Some(n))` — one complete command. The caller processes `args`, then
//!   drops `n` bytes from the front of its buffer. `args` may be empty
//!   (blank inline line, `*0\r\n`, `*-1\r\n`): skip such commands.
//! * `Ok(None)` — more bytes are needed. The parser remembers how far it got,
//!   so the next call (same bytes, plus more appended) costs O(new bytes).
//! * `Err(e)` — protocol error: reply `-ERR <e>` and close the connection.
//!
//! Inline commands are the one exception to zero-copy: quoting and escapes
//! mean their arguments are not contiguous in the input, so they are decoded
//! into a parser-owned scratch buffer. After an inline command,
//! [`RequestParser::last_was_inline`] is `true` and the spans index
//! [`RequestParser::inline_buf`] instead of the caller's buffer.
//! [`RequestParser::arg`] hides that distinction.
//!
//! # Deliberate differences from Redis
//!
//! * Length limits are enforced on the length of the line, not on how much
//!   happens to be buffered when a `read()` returns. Redis checks "no line
//!   terminator yet and more than 64 KiB buffered", so whether a 70 KiB line
//!   is accepted depends on TCP segmentation. Here it is always rejected
//!   with the same error Redis gives when the line trickles in, so the result
//!   never depends on how the input was chunked.
//! * Redis locates line terminators with `strchr`, which stops at a NUL byte.
//!   We search the whole buffer, so a NUL inside a header line yields the
//!   "invalid ... length" error at once instead of stalling until the 64 KiB
//!   limit trips. Inside an inline line everything from the first NUL on is
//!   ignored, exactly as Redis's C-string based `sdssplitargs` does.
//! * The "expected '$'" error cannot carry a non-ASCII byte in a Rust string;
//!   such bytes are shown as `?`.
//! * A single command whose byte offsets exceed `u32::MAX` (4 GiB) is
//!   rejected as "invalid bulk length", because spans are 32-bit.
//!
//! Like Redis, the byte after each `\r` of a header line and the two bytes
//! after a bulk payload are skipped without checking that they really are
//! `\n` / `\r\n`.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use crate::util::cstr::{self, string2ll};

/// Payloads at least this large are worth pre-reserving buffer space for
/// (Redis's `PROTO_MBULK_BIG_ARG`); see [`RequestParser::pending_bulk_bytes`].
pub const PROTO_MBULK_BIG_ARG: usize = 32 * 1024;

/// Before AUTH, Redis refuses commands with more arguments than this
/// (protection against memory exhaustion by unauthenticated clients).
const UNAUTH_MAX_MULTIBULK: i64 = 10;

/// Before AUTH, Redis refuses bulk arguments longer than this.
const UNAUTH_MAX_BULK: i64 = 16 * 1024;

/// How many argument slots to pre-allocate at most: the count comes from the
/// client, so trusting it blindly would let one header allocate megabytes.
const MAX_ARGS_PREALLOC: usize = 1024;

/// Size limits applied while parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    /// `proto-max-bulk-len`: the largest accepted bulk argument.
    pub max_bulk_len: usize,
    /// Longest inline command line, and longest `*`/`$` header line
    /// (Redis uses `PROTO_INLINE_MAX_SIZE` for all three).
    pub max_inline_len: usize,
    /// Most arguments a multibulk command may declare.
    pub max_multibulk_len: usize,
}

impl Default for ParseLimits {
    fn default() -> Self {
        ParseLimits {
            max_bulk_len: 512 * 1024 * 1024,
            max_inline_len: 64 * 1024,
            // Redis's limit (INT_MAX); the query buffer limit bounds what a
            // big count can make the server hold.
            max_multibulk_len: i32::MAX as usize,
        }
    }
}

/// A protocol violation. The message is Redis's exact text, without the
/// `-ERR ` prefix, e.g. `Protocol error: invalid bulk length`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub Cow<'static, str>);

impl ProtocolError {
    const fn fixed(msg: &'static str) -> Self {
        ProtocolError(Cow::Borrowed(msg))
    }

    /// The message text (no `-ERR ` prefix, no CRLF).
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProtocolError {}

const INVALID_MULTIBULK: ProtocolError =
    ProtocolError::fixed("Protocol error: invalid multibulk length");
const TOO_BIG_MBULK: ProtocolError =
    ProtocolError::fixed("Protocol error: too big mbulk count string");
const UNAUTH_MULTIBULK: ProtocolError =
    ProtocolError::fixed("Protocol error: unauthenticated multibulk length");
const INVALID_BULK: ProtocolError = ProtocolError::fixed("Protocol error: invalid bulk length");
const TOO_BIG_BULK: ProtocolError =
    ProtocolError::fixed("Protocol error: too big bulk count string");
const UNAUTH_BULK: ProtocolError =
    ProtocolError::fixed("Protocol error: unauthenticated bulk length");
const TOO_BIG_INLINE: ProtocolError =
    ProtocolError::fixed("Protocol error: too big inline request");
const UNBALANCED_QUOTES: ProtocolError =
    ProtocolError::fixed("Protocol error: unbalanced quotes in request");

/// Builds "expected '$', got 'X'" the way Redis's `addReplyErrorFormat`
/// would render it: `%c` of NUL ends the C string early, and CR/LF are
/// mapped to spaces so the reply stays one line.
fn expected_dollar(got: u8) -> ProtocolError {
    const PREFIX: &str = "Protocol error: expected '$', got '";
    let shown = match got {
        0 => return ProtocolError::fixed(PREFIX),
        b'\r' | b'\n' => ' ',
        b if b.is_ascii() => char::from(b),
        _ => '?',
    };
    ProtocolError(Cow::Owned(format!("{PREFIX}{shown}'")))
}

/// One argument's byte range, within the caller's buffer for multibulk
/// commands or within [`RequestParser::inline_buf`] for inline ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgSpan {
    pub start: u32,
    pub end: u32,
}

impl ArgSpan {
    /// `None` when the offsets do not fit the 32-bit representation.
    fn new(start: usize, end: usize) -> Option<ArgSpan> {
        Some(ArgSpan {
            start: u32::try_from(start).ok()?,
            end: u32::try_from(end).ok()?,
        })
    }

    pub fn range(&self) -> Range<usize> {
        self.start as usize..self.end as usize
    }

    pub fn len(&self) -> usize {
        self.end.saturating_sub(self.start) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Finds the first argument after the name (where nearly every command keeps its
/// key) of each complete multibulk command at the start of `buf`, at most
/// `out.len()` of them, so the keyspace can prefetch a batch before it runs (see
/// `Db::prefetch`). A hint, not a parse: it stops at the first command it cannot read
/// at a glance (inline, incomplete, malformed), which the real parser then handles. A
/// command with no argument gets an empty span. Returns how many commands it read and
/// the offset where the last one ends.
pub fn scan_first_args(buf: &[u8], out: &mut [ArgSpan]) -> (usize, usize) {
    let mut done = 0;
    let mut pos = 0;
    while done < out.len() {
        let Some((argc, mut at)) = scan_header(buf, pos, b'*') else {
            break;
        };
        let mut first = ArgSpan { start: 0, end: 0 };
        let mut complete = true;
        for i in 0..argc {
            let Some((len, data)) = scan_header(buf, at, b'$') else {
                complete = false;
                break;
            };
            let end = data + len;
            if buf.get(end..end + 2) != Some(&b"\r\n"[..]) {
                complete = false;
                break;
            }
            if i == 1 {
                match ArgSpan::new(data, end) {
                    Some(span) => first = span,
                    None => return (done, pos),
                }
            }
            at = end + 2;
        }
        if !complete {
            break;
        }
        out[done] = first;
        done += 1;
        pos = at;
    }
    (done, pos)
}

/// Reads `<marker><digits>\r\n` at `pos`: the number and where the line ends.
fn scan_header(buf: &[u8], pos: usize, marker: u8) -> Option<(usize, usize)> {
    if buf.get(pos) != Some(&marker) {
        return None;
    }
    let mut n: usize = 0;
    let mut i = pos + 1;
    // Ten digits bound the value well inside usize, so the sums above cannot overflow.
    while let Some(&b) = buf.get(i).filter(|b| b.is_ascii_digit()) {
        if i - pos > 10 {
            return None;
        }
        n = n * 10 + usize::from(b - b'0');
        i += 1;
    }
    (i > pos + 1 && buf.get(i..i + 2) == Some(&b"\r\n"[..])).then_some((n, i + 2))
}

/// The common case in one straight pass: a multibulk command that is wholly buffered,
/// with plain decimal headers, within every limit. Anything else (a partial command,
/// a sign, a leading zero, a limit reached) gives `None` and the state machine parses
/// the command from its start, with Redis's errors; so on success this must give
/// exactly what the state machine would (which, like Redis, skips the two bytes after
/// a header's `\r` and a payload without looking at them).
#[inline]
fn parse_whole_multibulk(
    buf: &[u8],
    limits: &ParseLimits,
    args: &mut Vec<ArgSpan>,
) -> Option<usize> {
    if limits.max_inline_len < 16 {
        return None;
    }
    let (count, mut at) = plain_header(buf, 0, b'*')?;
    if count == 0 || count > limits.max_multibulk_len {
        return None;
    }
    args.reserve(count.min(MAX_ARGS_PREALLOC));
    for _ in 0..count {
        let (len, start) = plain_header(buf, at, b'$')?;
        if len > limits.max_bulk_len {
            return None;
        }
        let next = start + len + 2;
        if next > buf.len() || next > u32::MAX as usize {
            return None;
        }
        args.push(ArgSpan::new(start, start + len)?);
        at = next;
    }
    Some(at)
}

/// Reads `<marker><digits>\r` at `pos` whose byte after the `\r` is buffered, the
/// digits being `0` or up to ten without a leading zero: the number and where the
/// line ends (two bytes past the `\r`).
#[inline]
fn plain_header(buf: &[u8], pos: usize, marker: u8) -> Option<(usize, usize)> {
    if *buf.get(pos)? != marker {
        return None;
    }
    let first = *buf.get(pos + 1)?;
    let mut n = usize::from(first.wrapping_sub(b'0'));
    if n > 9 {
        return None;
    }
    let mut i = pos + 2;
    if n != 0 {
        while let Some(&b) = buf.get(i).filter(|b| b.is_ascii_digit()) {
            if i - pos > 10 {
                return None;
            }
            n = n * 10 + usize::from(b - b'0');
            i += 1;
        }
    }
    (buf.get(i) == Some(&b'\r') && i + 1 < buf.len()).then_some((n, i + 2))
}

/// What the parser is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Phase {
    /// Between commands.
    #[default]
    Idle,
    /// Looking for the `\n` that ends an inline command.
    Inline,
    /// Looking for the `\r` that ends the `*<count>` line.
    Count,
    /// Looking for the `\r` that ends a `$<len>` line.
    BulkHeader,
    /// Waiting until `bulk_len + 2` payload bytes are buffered.
    BulkPayload,
}

/// Result of one state-machine step.
enum Step {
    Continue,
    Wait,
    Done(usize),
}

/// Result of searching for a line terminator.
enum Scan {
    Found(usize),
    Pending,
    TooLong,
}

/// Resumable parser for one connection's request stream.
#[derive(Debug, Default)]
pub struct RequestParser {
    phase: Phase,
    /// Offset of the line or payload currently being parsed.
    line_start: usize,
    /// Terminator search resumes here, so bytes are examined only once.
    scanned: usize,
    /// Bulk arguments still expected by the current multibulk command.
    remaining: usize,
    /// Length of the bulk payload being waited for.
    bulk_len: usize,
    /// Buffer length at the last `Ok(None)`, to answer `pending_bulk_bytes`
    /// and to notice a caller that broke the "never drop bytes" contract.
    seen: usize,
    /// Spans of the arguments parsed so far for the current command.
    spans: Vec<ArgSpan>,
    /// Decoded arguments of the last inline command.
    inline_buf: Vec<u8>,
    last_inline: bool,
    /// Apply Redis's tighter pre-AUTH limits.
    auth_required: bool,
    /// Bytes inspected by terminator searches, so tests can prove that
    /// trickling input is handled in linear time.
    #[cfg(test)]
    examined: usize,
}

impl RequestParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses one command starting at `buf[0]`; see the module docs for the
    /// meaning of each outcome. `args` is cleared first and is only filled on
    /// `Ok(Some(_))`.
    pub fn parse(
        &mut self,
        buf: &[u8],
        limits: &ParseLimits,
        args: &mut Vec<ArgSpan>,
    ) -> Result<Option<usize>, ProtocolError> {
        args.clear();
        if self.phase == Phase::Idle && !self.auth_required {
            if let Some(consumed) = parse_whole_multibulk(buf, limits, args) {
                self.last_inline = false;
                return Ok(Some(consumed));
            }
            args.clear();
        }
        if self.phase != Phase::Idle && buf.len() < self.seen {
            // The caller dropped bytes mid-command; the saved offsets would
            // be meaningless, so treat the buffer as a fresh start.
            self.reset();
        }
        if self.phase == Phase::Idle {
            self.begin_command();
        }
        match self.run(buf, limits) {
            Ok(Some(consumed)) => {
                std::mem::swap(args, &mut self.spans);
                self.end_command();
                Ok(Some(consumed))
            }
            Ok(None) => {
                self.seen = buf.len();
                Ok(None)
            }
            Err(e) => {
                self.reset();
                Err(e)
            }
        }
    }

    /// While waiting for a bulk payload: how many more bytes (including the
    /// trailing CRLF) must arrive to complete it, so the caller can reserve
    /// space in one go. 0 in every other state. Compare against
    /// [`PROTO_MBULK_BIG_ARG`] to decide whether reserving is worthwhile.
    pub fn pending_bulk_bytes(&self) -> usize {
        if self.phase != Phase::BulkPayload {
            return 0;
        }
        let have = self.seen.saturating_sub(self.line_start);
        self.bulk_len.saturating_add(2).saturating_sub(have)
    }

    /// Forgets any partially parsed command. The auth setting is kept: it
    /// describes the connection, not the parse.
    pub fn reset(&mut self) {
        self.phase = Phase::Idle;
        self.end_command();
        self.spans.clear();
        self.inline_buf.clear();
        self.last_inline = false;
    }

    /// Enables Redis's pre-AUTH limits: more than 10 arguments fails with
    /// "unauthenticated multibulk length" and a bulk over 16 KiB with
    /// "unauthenticated bulk length". Off by default.
    pub fn set_auth_required(&mut self, required: bool) {
        self.auth_required = required;
    }

    /// True when the last completed command was inline, meaning its spans
    /// index [`Self::inline_buf`] rather than the caller's buffer.
    pub fn last_was_inline(&self) -> bool {
        self.last_inline
    }

    /// Decoded argument bytes of the last inline command (valid until the
    /// next `parse`/`reset`).
    pub fn inline_buf(&self) -> &[u8] {
        &self.inline_buf
    }

    /// Resolves a span of the last completed command to its bytes, whichever
    /// buffer it lives in. `buf` must be the buffer that was passed to
    /// `parse`. Out-of-range spans yield an empty slice rather than a panic.
    pub fn arg<'a>(&'a self, buf: &'a [u8], span: ArgSpan) -> &'a [u8] {
        let backing = if self.last_inline {
            &self.inline_buf[..]
        } else {
            buf
        };
        backing.get(span.range()).unwrap_or_default()
    }

    fn begin_command(&mut self) {
        self.spans.clear();
        self.inline_buf.clear();
        self.last_inline = false;
    }

    fn end_command(&mut self) {
        self.phase = Phase::Idle;
        self.line_start = 0;
        self.scanned = 0;
        self.remaining = 0;
        self.bulk_len = 0;
        self.seen = 0;
    }

    fn enter(&mut self, phase: Phase, at: usize) {
        self.phase = phase;
        self.line_start = at;
        self.scanned = at;
    }

    fn run(&mut self, buf: &[u8], limits: &ParseLimits) -> Result<Option<usize>, ProtocolError> {
        loop {
            let step = match self.phase {
                Phase::Idle => self.start(buf),
                Phase::Inline => self.inline(buf, limits)?,
                Phase::Count => self.count(buf, limits)?,
                Phase::BulkHeader => self.bulk_header(buf, limits)?,
                Phase::BulkPayload => self.bulk_payload(buf)?,
            };
            match step {
                Step::Continue => {}
                Step::Wait => return Ok(None),
                Step::Done(consumed) => return Ok(Some(consumed)),
            }
        }
    }

    /// Like Redis, the first byte alone decides the request type.
    fn start(&mut self, buf: &[u8]) -> Step {
        match buf.first() {
            None => Step::Wait,
            Some(b'*') => {
                self.enter(Phase::Count, 0);
                Step::Continue
            }
            Some(_) => {
                self.enter(Phase::Inline, 0);
                Step::Continue
            }
        }
    }

    /// Finds `delim` in the current line. As in Redis, a line is too long only
    /// while no terminator is buffered and more than `max_len` bytes wait after
    /// its start: a terminator already read is honoured however far it is (Redis
    /// answers `PING` followed by 70,000 spaces). `scanned` makes the search
    /// resume where it stopped, so every buffered byte is looked at once.
    fn find(&mut self, buf: &[u8], delim: u8, max_len: usize) -> Scan {
        let from = self.scanned.max(self.line_start);
        let window = buf.get(from..).unwrap_or_default();
        #[cfg(test)]
        {
            self.examined += window.len();
        }
        let hit = window.iter().position(|&b| b == delim);
        match hit {
            Some(offset) => Scan::Found(from + offset),
            None if buf.len().saturating_sub(self.line_start) > max_len => Scan::TooLong,
            None => {
                self.scanned = buf.len().max(from);
                Scan::Pending
            }
        }
    }

    /// Finds the `\r` of a header line and makes sure the byte after it is
    /// buffered too. Returns the `\r` offset.
    fn header_line(
        &mut self,
        buf: &[u8],
        max_len: usize,
        too_long: ProtocolError,
    ) -> Result<Option<usize>, ProtocolError> {
        match self.find(buf, b'\r', max_len) {
            Scan::TooLong => Err(too_long),
            Scan::Pending => Ok(None),
            Scan::Found(cr) if cr + 1 >= buf.len() => {
                self.scanned = cr;
                Ok(None)
            }
            Scan::Found(cr) => Ok(Some(cr)),
        }
    }

    fn count(&mut self, buf: &[u8], limits: &ParseLimits) -> Result<Step, ProtocolError> {
        let Some(cr) = self.header_line(buf, limits.max_inline_len, TOO_BIG_MBULK)? else {
            return Ok(Step::Wait);
        };
        let digits = buf.get(self.line_start + 1..cr).unwrap_or_default();
        let n = string2ll(digits).ok_or(INVALID_MULTIBULK)?;
        let next = cr + 2;
        // Redis treats any count <= 0 as an empty command, not an error.
        let Ok(count) = usize::try_from(n) else {
            return Ok(Step::Done(next));
        };
        if count > limits.max_multibulk_len {
            return Err(INVALID_MULTIBULK);
        }
        if self.auth_required && n > UNAUTH_MAX_MULTIBULK {
            return Err(UNAUTH_MULTIBULK);
        }
        if count == 0 {
            return Ok(Step::Done(next));
        }
        self.remaining = count;
        self.spans.reserve(count.min(MAX_ARGS_PREALLOC));
        self.enter(Phase::BulkHeader, next);
        Ok(Step::Continue)
    }

    fn bulk_header(&mut self, buf: &[u8], limits: &ParseLimits) -> Result<Step, ProtocolError> {
        let Some(cr) = self.header_line(buf, limits.max_inline_len, TOO_BIG_BULK)? else {
            return Ok(Step::Wait);
        };
        let first = buf.get(self.line_start).copied().unwrap_or(0);
        if first != b'$' {
            return Err(expected_dollar(first));
        }
        let digits = buf.get(self.line_start + 1..cr).unwrap_or_default();
        let n = string2ll(digits).ok_or(INVALID_BULK)?;
        let len = usize::try_from(n).map_err(|_| INVALID_BULK)?;
        if len > limits.max_bulk_len {
            return Err(INVALID_BULK);
        }
        if self.auth_required && n > UNAUTH_MAX_BULK {
            return Err(UNAUTH_BULK);
        }
        let payload_start = cr + 2;
        // Spans are 32-bit; refuse up front rather than fail after buffering.
        let end = payload_start
            .checked_add(len)
            .and_then(|e| e.checked_add(2));
        if end.is_none_or(|e| e > u32::MAX as usize) {
            return Err(INVALID_BULK);
        }
        self.bulk_len = len;
        self.enter(Phase::BulkPayload, payload_start);
        Ok(Step::Continue)
    }

    fn bulk_payload(&mut self, buf: &[u8]) -> Result<Step, ProtocolError> {
        let start = self.line_start;
        let needed = self.bulk_len + 2;
        if buf.len().saturating_sub(start) < needed {
            return Ok(Step::Wait);
        }
        let span = ArgSpan::new(start, start + self.bulk_len).ok_or(INVALID_BULK)?;
        self.spans.push(span);
        let next = start + needed;
        self.remaining = self.remaining.saturating_sub(1);
        if self.remaining == 0 {
            return Ok(Step::Done(next));
        }
        self.enter(Phase::BulkHeader, next);
        Ok(Step::Continue)
    }

    fn inline(&mut self, buf: &[u8], limits: &ParseLimits) -> Result<Step, ProtocolError> {
        let newline = match self.find(buf, b'\n', limits.max_inline_len) {
            Scan::Found(i) => i,
            Scan::Pending => return Ok(Step::Wait),
            Scan::TooLong => return Err(TOO_BIG_INLINE),
        };
        let line = buf.get(..newline).unwrap_or_default();
        // Only one trailing CR belongs to the terminator.
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        split_inline(line, &mut self.inline_buf, &mut self.spans)?;
        self.last_inline = true;
        Ok(Step::Done(newline + 1))
    }
}

/// Splits an inline command line the way Redis's `sdssplitargs` does,
/// appending decoded arguments to `out` and their spans to `spans`.
fn split_inline(
    line: &[u8],
    out: &mut Vec<u8>,
    spans: &mut Vec<ArgSpan>,
) -> Result<(), ProtocolError> {
    let mut pos = 0;
    loop {
        let start = out.len();
        match cstr::next_arg(line, pos, out) {
            Ok(Some(next)) => pos = next,
            Ok(None) => return Ok(()),
            Err(cstr::UnbalancedQuotes) => return Err(UNBALANCED_QUOTES),
        }
        spans.push(ArgSpan::new(start, out.len()).ok_or(TOO_BIG_INLINE)?);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Everything observable about feeding one input stream to a parser.
    #[derive(Debug, Default, PartialEq, Eq)]
    struct Outcome {
        commands: Vec<Vec<Vec<u8>>>,
        error: Option<ProtocolError>,
        leftover: usize,
    }

    /// Parses every complete command in `buf`, dropping consumed bytes the
    /// way a connection handler would, and checks the API invariants.
    fn drain(
        parser: &mut RequestParser,
        buf: &mut Vec<u8>,
        limits: &ParseLimits,
        commands: &mut Vec<Vec<Vec<u8>>>,
    ) -> Result<(), ProtocolError> {
        let mut args = Vec::new();
        while let Some(consumed) = parser.parse(buf, limits, &mut args)? {
            assert!(consumed >= 1, "a command must consume bytes");
            assert!(consumed <= buf.len());
            let backing_len = if parser.last_was_inline() {
                parser.inline_buf().len()
            } else {
                consumed
            };
            let mut cmd = Vec::new();
            for &span in &args {
                assert!(span.start <= span.end && span.end as usize <= backing_len);
                cmd.push(parser.arg(buf, span).to_vec());
            }
            commands.push(cmd);
            buf.drain(..consumed);
        }
        assert!(args.is_empty(), "args must be empty on Ok(None)");
        Ok(())
    }

    /// Feeds `input` in pieces ending at the given cut points.
    fn drive_with(input: &[u8], cuts: &[usize], limits: &ParseLimits) -> Outcome {
        let mut ends: Vec<usize> = cuts.iter().map(|&c| c % (input.len() + 1)).collect();
        ends.push(input.len());
        ends.sort_unstable();
        ends.dedup();
        let mut parser = RequestParser::new();
        let mut buf = Vec::new();
        let mut out = Outcome::default();
        let mut fed = 0;
        for end in ends {
            buf.extend_from_slice(&input[fed..end]);
            fed = end;
            if let Err(e) = drain(&mut parser, &mut buf, limits, &mut out.commands) {
                out.error = Some(e);
                return out;
            }
        }
        out.leftover = buf.len();
        out
    }

    fn one_shot(input: &[u8]) -> Outcome {
        drive_with(input, &[], &ParseLimits::default())
    }

    fn byte_by_byte(input: &[u8], limits: &ParseLimits) -> Outcome {
        let cuts: Vec<usize> = (0..input.len()).collect();
        drive_with(input, &cuts, limits)
    }

    fn cmds(list: &[&[&[u8]]]) -> Vec<Vec<Vec<u8>>> {
        list.iter()
            .map(|c| c.iter().map(|a| a.to_vec()).collect())
            .collect()
    }

    fn encode(cmd: &[Vec<u8>], out: &mut Vec<u8>) {
        out.extend_from_slice(format!("*{}\r\n", cmd.len()).as_bytes());
        for arg in cmd {
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
    }

    /// Parses a single request and returns its args or the error text.
    fn parse_one(input: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let out = one_shot(input);
        match out.error {
            Some(e) => Err(e.0.into_owned()),
            None => {
                assert_eq!(out.commands.len(), 1, "for input {input:?}: {out:?}");
                Ok(out.commands.into_iter().next().unwrap_or_default())
            }
        }
    }

    fn is_too_long(out: &Outcome) -> bool {
        [TOO_BIG_INLINE, TOO_BIG_MBULK, TOO_BIG_BULK]
            .iter()
            .any(|e| out.error.as_ref() == Some(e))
    }

    fn error_of(input: &[u8]) -> String {
        let out = one_shot(input);
        let chunked = byte_by_byte(input, &ParseLimits::default());
        assert_eq!(out, chunked, "chunking changed the outcome");
        match out.error {
            Some(e) => e.0.into_owned(),
            None => panic!("expected an error for {input:?}, got {out:?}"),
        }
    }

    fn inline(line: &str) -> Result<Vec<Vec<u8>>, String> {
        parse_one(format!("{line}\r\n").as_bytes())
    }

    // ---- multibulk ------------------------------------------------------

    #[test]
    fn parses_simple_multibulk() {
        let input = b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n";
        let mut parser = RequestParser::new();
        let mut args = Vec::new();
        let got = parser.parse(input, &ParseLimits::default(), &mut args);
        assert_eq!(got, Ok(Some(input.len())));
        assert!(!parser.last_was_inline());
        assert_eq!(
            args,
            vec![
                ArgSpan { start: 8, end: 11 },
                ArgSpan { start: 17, end: 20 }
            ]
        );
        assert_eq!(parser.arg(input, args[1]), b"key");
    }

    #[test]
    fn pipelined_commands_back_to_back() {
        let input = b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nPING\r\n*1\r\n$4\r\nPI";
        let out = one_shot(input);
        assert_eq!(
            out.commands,
            cmds(&[&[b"PING"], &[b"ECHO", b"hi"], &[b"PING"]])
        );
        assert_eq!(out.error, None);
        assert_eq!(out.leftover, 10);
    }

    #[test]
    fn bulk_args_are_binary_safe() {
        let input = b"*3\r\n$3\r\nSET\r\n$4\r\n\r\n\r\n\r\n$5\r\na\0\r\xffb\r\n";
        assert_eq!(
            parse_one(input),
            Ok(vec![
                b"SET".to_vec(),
                b"\r\n\r\n".to_vec(),
                b"a\0\r\xffb".to_vec()
            ])
        );
    }

    #[test]
    fn empty_bulk_argument() {
        assert_eq!(parse_one(b"*1\r\n$0\r\n\r\n"), Ok(vec![Vec::new()]));
    }

    #[test]
    fn empty_commands_are_consumed_with_no_args() {
        for input in [
            &b"*0\r\n"[..],
            b"*-1\r\n",
            b"*-5\r\n",
            b"\r\n",
            b"\n",
            b"   \t \r\n",
        ] {
            let mut parser = RequestParser::new();
            let mut args = vec![ArgSpan { start: 9, end: 9 }];
            let got = parser.parse(input, &ParseLimits::default(), &mut args);
            assert_eq!(got, Ok(Some(input.len())), "{input:?}");
            assert!(args.is_empty());
        }
    }

    #[test]
    fn empty_command_between_pipelined_ones() {
        let out = one_shot(b"*0\r\n*1\r\n$1\r\na\r\n\r\n*-1\r\n*1\r\n$1\r\nb\r\n");
        assert_eq!(out.commands, cmds(&[&[], &[b"a"], &[], &[], &[b"b"]]));
    }

    #[test]
    fn like_redis_terminator_bytes_are_not_verified() {
        // Redis skips the byte after '\r' and the two bytes after a payload
        // without looking at them; clients relying on that must keep working.
        assert_eq!(parse_one(b"*1\rX$1\rYaZZ"), Ok(vec![b"a".to_vec()]));
    }

    #[test]
    fn incomplete_input_waits() {
        for input in [
            &b""[..],
            b"*",
            b"*2",
            b"*2\r",
            b"*2\r\n",
            b"*2\r\n$3",
            b"*2\r\n$3\r",
            b"*2\r\n$3\r\nGET",
            b"*2\r\n$3\r\nGET\r",
            b"*2\r\n$3\r\nGET\r\n",
            b"GET key",
        ] {
            let out = one_shot(input);
            assert_eq!(out.commands.len(), 0, "{input:?}");
            assert_eq!(out.error, None, "{input:?}");
            assert_eq!(out.leftover, input.len());
        }
    }

    // ---- error messages -------------------------------------------------

    #[test]
    fn invalid_multibulk_length() {
        let msg = "Protocol error: invalid multibulk length";
        for input in [
            &b"*3000000000\r\n"[..],
            b"*2147483648\r\n",
            b"*abc\r\n",
            b"*\r\n",
            b"*-0\r\n",
            b"*01\r\n",
            b"*+1\r\n",
            b"* 1\r\n",
            b"*1 \r\n",
            b"*99999999999999999999\r\n",
            b"*1\0\r\n",
        ] {
            assert_eq!(error_of(input), msg, "{input:?}");
        }
    }

    #[test]
    fn multibulk_count_limit_is_inclusive() {
        let out = one_shot(b"*1048577\r\n");
        assert_eq!(out.error, None);
        let out = one_shot(b"*2147483647\r\n");
        assert_eq!(out.error, None);
        let out = one_shot(b"*2147483648\r\n");
        assert_eq!(out.error, Some(INVALID_MULTIBULK));
        let limits = ParseLimits {
            max_multibulk_len: 2,
            ..ParseLimits::default()
        };
        let out = drive_with(b"*3\r\n", &[], &limits);
        assert_eq!(out.error, Some(INVALID_MULTIBULK));
    }

    #[test]
    fn too_big_mbulk_count_string() {
        let limit = ParseLimits::default().max_inline_len;
        let mut input = vec![b'*'];
        input.resize(limit, b'1');
        // Exactly at the limit without '\r': still waiting.
        assert_eq!(one_shot(&input).error, None);
        input.push(b'1');
        assert_eq!(
            error_of(&input),
            "Protocol error: too big mbulk count string"
        );
        // With its '\r' already buffered the line is read, as Redis reads it, and
        // its count is then no number; trickled in, it is too long first.
        input.extend_from_slice(b"\r\n");
        assert_eq!(one_shot(&input).error, Some(INVALID_MULTIBULK));
        assert_eq!(
            byte_by_byte(&input, &ParseLimits::default()).error,
            Some(TOO_BIG_MBULK)
        );
    }

    #[test]
    fn expected_dollar() {
        assert_eq!(
            error_of(b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n"),
            "Protocol error: expected '$', got 'f'"
        );
        assert_eq!(
            error_of(b"*1\r\nfoo\r\n"),
            "Protocol error: expected '$', got 'f'"
        );
        assert_eq!(
            error_of(b"*1\r\n\r\n"),
            "Protocol error: expected '$', got ' '"
        );
        assert_eq!(
            error_of(b"*1\r\n\n\r\n"),
            "Protocol error: expected '$', got ' '"
        );
        // C's printf("%c", 0) ends the message early.
        assert_eq!(
            error_of(b"*1\r\n\0\r\n"),
            "Protocol error: expected '$', got '"
        );
        assert_eq!(
            error_of(b"*1\r\n\xff\r\n"),
            "Protocol error: expected '$', got '?'"
        );
    }

    #[test]
    fn expected_dollar_waits_for_complete_line() {
        // Redis only looks at the first byte once the whole line is in.
        let out = one_shot(b"*1\r\nfoo");
        assert_eq!(out.error, None);
    }

    #[test]
    fn invalid_bulk_length() {
        let msg = "Protocol error: invalid bulk length";
        for input in [
            &b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n"[..],
            b"*1\r\n$2000000000\r\n",
            b"*1\r\n$blabla\r\n",
            b"*1\r\n$-1\r\n",
            b"*1\r\n$-0\r\n",
            b"*1\r\n$01\r\n",
            b"*1\r\n$\r\n",
            b"*1\r\n$1 \r\n",
        ] {
            assert_eq!(error_of(input), msg, "{input:?}");
        }
    }

    #[test]
    fn bulk_length_limit_is_inclusive() {
        let limits = ParseLimits {
            max_bulk_len: 3,
            ..ParseLimits::default()
        };
        let ok = drive_with(b"*1\r\n$3\r\nabc\r\n", &[], &limits);
        assert_eq!(ok.commands, cmds(&[&[b"abc"]]));
        let bad = drive_with(b"*1\r\n$4\r\n", &[], &limits);
        assert_eq!(bad.error, Some(INVALID_BULK));
    }

    #[test]
    fn too_big_bulk_count_string() {
        let limit = ParseLimits::default().max_inline_len;
        let mut input = b"*1\r\n$".to_vec();
        input.resize(4 + limit, b'1');
        assert_eq!(one_shot(&input).error, None);
        input.push(b'1');
        assert_eq!(
            error_of(&input),
            "Protocol error: too big bulk count string"
        );
    }

    #[test]
    fn too_big_inline_request() {
        let limit = ParseLimits::default().max_inline_len;
        let mut input = vec![b'a'; limit];
        assert_eq!(one_shot(&input).error, None);
        input.push(b'a');
        assert_eq!(error_of(&input), "Protocol error: too big inline request");
        // A terminator already buffered is honoured however long the line: Redis
        // answers PING followed by 70,000 spaces.
        let mut ping = b"PING".to_vec();
        ping.resize(70_004, b' ');
        ping.extend_from_slice(b"\r\n");
        assert_eq!(parse_one(&ping).map(|a| a.len()), Ok(1));
        let mut fits = vec![b'a'; limit - 1];
        fits.extend_from_slice(b"\r\n");
        assert_eq!(parse_one(&fits).map(|a| a.len()), Ok(1));
    }

    #[test]
    fn unbalanced_quotes() {
        let msg = "Protocol error: unbalanced quotes in request";
        for line in [
            r#"set """test-key""" test-value"#,
            r#"GET "abc"#,
            "GET 'abc",
            r#"GET "a"b"#,
            "GET 'a'b",
            r#"GET "abc\"#,
            r#"GET 'abc\'"#,
        ] {
            assert_eq!(error_of(format!("{line}\r\n").as_bytes()), msg, "{line}");
        }
    }

    #[test]
    fn unauthenticated_limits() {
        let run = |input: &[u8]| {
            let mut parser = RequestParser::new();
            parser.set_auth_required(true);
            let mut args = Vec::new();
            parser.parse(input, &ParseLimits::default(), &mut args)
        };
        assert_eq!(
            run(b"*11\r\n"),
            Err(ProtocolError::fixed(
                "Protocol error: unauthenticated multibulk length"
            ))
        );
        assert_eq!(run(b"*10\r\n"), Ok(None));
        assert_eq!(
            run(b"*1\r\n$16385\r\n"),
            Err(ProtocolError::fixed(
                "Protocol error: unauthenticated bulk length"
            ))
        );
        assert_eq!(run(b"*1\r\n$16384\r\n"), Ok(None));
        // Validity is checked before authentication, as in Redis.
        assert_eq!(run(b"*1\r\n$-1\r\n"), Err(INVALID_BULK));
    }

    #[test]
    fn auth_setting_survives_reset() {
        let mut parser = RequestParser::new();
        parser.set_auth_required(true);
        parser.reset();
        let got = parser.parse(b"*11\r\n", &ParseLimits::default(), &mut Vec::new());
        assert_eq!(got, Err(UNAUTH_MULTIBULK));
    }

    #[test]
    fn error_message_is_displayable() {
        assert_eq!(
            INVALID_BULK.to_string(),
            "Protocol error: invalid bulk length"
        );
        assert_eq!(
            INVALID_BULK.message(),
            "Protocol error: invalid bulk length"
        );
    }

    // ---- inline ---------------------------------------------------------

    #[test]
    fn inline_basic_splitting() {
        assert_eq!(
            inline("SET key value"),
            Ok(vec![b"SET".to_vec(), b"key".to_vec(), b"value".to_vec()])
        );
        assert_eq!(
            inline("  GET \t  key   "),
            Ok(vec![b"GET".to_vec(), b"key".to_vec()])
        );
        assert_eq!(parse_one(b"PING\n"), Ok(vec![b"PING".to_vec()]));
    }

    #[test]
    fn inline_quoting() {
        let q = |line: &str| inline(line).map_err(|e| e.to_string());
        assert_eq!(q(r#""hello world""#), Ok(vec![b"hello world".to_vec()]));
        assert_eq!(
            q(r#""a\n\r\t\b\a\\\"z\q""#),
            Ok(vec![b"a\n\r\t\x08\x07\\\"zq".to_vec()])
        );
        assert_eq!(q(r#""\x41\x4a\x4A\x00""#), Ok(vec![b"AJJ\0".to_vec()]));
        // Malformed hex escapes fall back to the generic "drop the backslash".
        assert_eq!(q(r#""\xZZ\x4""#), Ok(vec![b"xZZx4".to_vec()]));
        assert_eq!(q(r"'it\'s'"), Ok(vec![b"it's".to_vec()]));
        assert_eq!(q(r"'a\nb\\ c'"), Ok(vec![br"a\nb\\ c".to_vec()]));
        // `\'` right before the closing quote escapes it, leaving it open.
        assert_eq!(q(r"'a\\'"), Err(UNBALANCED_QUOTES.to_string()));
        assert_eq!(q(r#"'say "hi"'"#), Ok(vec![br#"say "hi""#.to_vec()]));
        assert_eq!(q(r#""it's""#), Ok(vec![b"it's".to_vec()]));
        assert_eq!(q(r#""" ''"#), Ok(vec![Vec::new(), Vec::new()]));
        // A quote may open in the middle of a token.
        assert_eq!(q(r#"a"b c""#), Ok(vec![b"ab c".to_vec()]));
        assert_eq!(q(r#"a"b c" d"#), Ok(vec![b"ab c".to_vec(), b"d".to_vec()]));
        // Any C whitespace may follow a closing quote.
        assert_eq!(
            q("\"a\"\t'b'\x0bc"),
            Ok(vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()])
        );
    }

    #[test]
    fn inline_whitespace_rules_match_sdssplitargs() {
        // Vertical tab and form feed are skipped between tokens but do not
        // end a bare token.
        assert_eq!(
            inline("\x0b\x0cGET a\x0bb"),
            Ok(vec![b"GET".to_vec(), b"a\x0bb".to_vec()])
        );
        // Only one trailing CR is part of the terminator; a stray CR inside
        // the line separates tokens.
        assert_eq!(parse_one(b"PING\r\r\n"), Ok(vec![b"PING".to_vec()]));
        assert_eq!(
            parse_one(b"SET a\rb\r\n"),
            Ok(vec![b"SET".to_vec(), b"a".to_vec(), b"b".to_vec()])
        );
    }

    #[test]
    fn inline_nul_ends_the_line_like_a_c_string() {
        assert_eq!(
            parse_one(b"SET a b\0c d\r\n"),
            Ok(vec![b"SET".to_vec(), b"a".to_vec(), b"b".to_vec()])
        );
        // An unterminated quote cut short by NUL is still unbalanced.
        assert_eq!(
            parse_one(b"GET \"a\0\"\r\n"),
            Err("Protocol error: unbalanced quotes in request".to_string())
        );
    }

    #[test]
    fn inline_spans_index_the_inline_buffer() {
        let input = b"SET \"a b\" c\r\n*1\r\n$1\r\nx\r\n";
        let limits = ParseLimits::default();
        let mut parser = RequestParser::new();
        let mut args = Vec::new();
        assert_eq!(parser.parse(input, &limits, &mut args), Ok(Some(13)));
        assert!(parser.last_was_inline());
        assert_eq!(parser.inline_buf(), b"SETa bc");
        let spans: Vec<_> = args.iter().map(ArgSpan::range).collect();
        assert_eq!(spans, vec![0..3, 3..6, 6..7]);
        let rest = &input[13..];
        assert_eq!(parser.parse(rest, &limits, &mut args), Ok(Some(rest.len())));
        assert!(!parser.last_was_inline());
        assert_eq!(parser.arg(rest, args[0]), b"x");
    }

    // ---- incremental behaviour -----------------------------------------

    #[test]
    fn byte_at_a_time_equals_one_shot() {
        let samples: [&[u8]; 9] = [
            b"*3\r\n$3\r\nSET\r\n$5\r\nkey\r\n\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n",
            b"SET \"a\\x41\" 'b c'\r\nPING\n\r\n",
            b"*0\r\n*-1\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n",
            b"*1\r\n$3\r\nfoo\r\nbar\r\n",
            b"*1\r\nxyz\r\n",
            b"*1\r\n$abc\r\n",
            b"*x\r\n",
            b"GET 'a\r\n",
            b"*2\r\n$3\r\nGET\r\n$1\r\nk",
        ];
        for input in samples {
            let limits = ParseLimits::default();
            assert_eq!(byte_by_byte(input, &limits), one_shot(input), "{input:?}");
        }
    }

    #[test]
    fn pending_bulk_bytes_tracks_large_payload() {
        let limits = ParseLimits::default();
        let mut parser = RequestParser::new();
        let mut args = Vec::new();
        let mut buf = b"*1\r\n$100000\r\n".to_vec();
        assert_eq!(parser.pending_bulk_bytes(), 0);
        assert_eq!(parser.parse(&buf, &limits, &mut args), Ok(None));
        assert_eq!(parser.pending_bulk_bytes(), 100_002);
        buf.extend_from_slice(&[b'v'; 10]);
        assert_eq!(parser.parse(&buf, &limits, &mut args), Ok(None));
        assert_eq!(parser.pending_bulk_bytes(), 99_992);
        buf.resize(buf.len() + 99_990, b'v');
        buf.extend_from_slice(b"\r\n");
        assert_eq!(parser.parse(&buf, &limits, &mut args), Ok(Some(buf.len())));
        assert_eq!(parser.pending_bulk_bytes(), 0);
        assert_eq!(args[0].len(), 100_000);
    }

    #[test]
    fn pending_bulk_bytes_is_zero_while_reading_headers() {
        let mut parser = RequestParser::new();
        let got = parser.parse(b"*1\r\n$10", &ParseLimits::default(), &mut Vec::new());
        assert_eq!(got, Ok(None));
        assert_eq!(parser.pending_bulk_bytes(), 0);
    }

    /// Feeds `input` in `step`-byte pieces to one parser and returns how
    /// many bytes its terminator searches examined in total.
    fn examined_when_trickled(input: &[u8], step: usize) -> (usize, usize) {
        let limits = ParseLimits::default();
        let mut parser = RequestParser::new();
        let mut args = Vec::new();
        let mut completed = 0;
        for end in (step..input.len() + step).step_by(step) {
            let buf = &input[..end.min(input.len())];
            if let Ok(Some(_)) = parser.parse(buf, &limits, &mut args) {
                completed += 1;
            }
        }
        (completed, parser.examined)
    }

    /// Re-scanning from the start on every call would examine O(n^2) bytes.
    #[test]
    fn large_payload_in_tiny_chunks_is_linear() {
        let payload_len = 1 << 20;
        let mut input = format!("*2\r\n$3\r\nSET\r\n${payload_len}\r\n").into_bytes();
        input.resize(input.len() + payload_len, b'\r');
        input.extend_from_slice(b"\r\n");
        let (completed, examined) = examined_when_trickled(&input, 3);
        assert_eq!(completed, 1);
        // Only the short header lines are ever searched, never the payload.
        assert!(examined < 64, "examined {examined} bytes");
    }

    #[test]
    fn long_inline_line_byte_by_byte_is_linear() {
        let mut input = vec![b'a'; 60_000];
        input.extend_from_slice(b"\r\n");
        let (completed, examined) = examined_when_trickled(&input, 1);
        assert_eq!(completed, 1);
        assert!(examined <= input.len(), "examined {examined} bytes");
        let out = byte_by_byte(&input, &ParseLimits::default());
        assert_eq!(out.commands, vec![vec![vec![b'a'; 60_000]]]);
    }

    #[test]
    fn oversized_line_search_is_bounded() {
        // A megabyte without any terminator is rejected, each byte looked at once
        // however the megabyte arrives.
        let input = vec![b'a'; 1 << 20];
        let mut parser = RequestParser::new();
        let got = parser.parse(&input, &ParseLimits::default(), &mut Vec::new());
        assert_eq!(got, Err(TOO_BIG_INLINE));
        assert!(parser.examined <= input.len());
        let (_, examined) = examined_when_trickled(&input[..60_000], 1000);
        assert!(examined <= 60_000, "examined {examined} bytes");
    }

    #[test]
    fn args_survive_caller_clearing_between_calls() {
        // The parser keeps partial progress itself, so a caller that reuses
        // one args vector (cleared by parse) still gets every argument.
        let input = b"*2\r\n$1\r\na\r\n$1\r\nb\r\n";
        let limits = ParseLimits::default();
        let mut parser = RequestParser::new();
        let mut args = Vec::new();
        assert_eq!(parser.parse(&input[..12], &limits, &mut args), Ok(None));
        assert!(args.is_empty());
        assert_eq!(
            parser.parse(input, &limits, &mut args),
            Ok(Some(input.len()))
        );
        assert_eq!(args.len(), 2);
    }

    #[test]
    fn shrunk_buffer_restarts_instead_of_panicking() {
        let limits = ParseLimits::default();
        let mut parser = RequestParser::new();
        let mut args = Vec::new();
        assert_eq!(
            parser.parse(b"*2\r\n$1\r\na\r\n$1", &limits, &mut args),
            Ok(None)
        );
        let fresh = b"*1\r\n$1\r\nz\r\n";
        assert_eq!(
            parser.parse(fresh, &limits, &mut args),
            Ok(Some(fresh.len()))
        );
        assert_eq!(parser.arg(fresh, args[0]), b"z");
    }

    #[test]
    fn parser_is_reusable_after_error_and_reset() {
        let limits = ParseLimits::default();
        let mut parser = RequestParser::new();
        let mut args = Vec::new();
        assert!(parser.parse(b"*x\r\n", &limits, &mut args).is_err());
        let ok = b"*1\r\n$1\r\na\r\n";
        assert_eq!(parser.parse(ok, &limits, &mut args), Ok(Some(ok.len())));
        assert_eq!(parser.parse(b"*2\r\n", &limits, &mut args), Ok(None));
        parser.reset();
        assert_eq!(parser.parse(ok, &limits, &mut args), Ok(Some(ok.len())));
    }

    // ---- properties -----------------------------------------------------

    /// Small limits so random inputs actually reach the "too big" paths.
    fn tiny_limits() -> ParseLimits {
        ParseLimits {
            max_bulk_len: 40,
            max_inline_len: 24,
            max_multibulk_len: 6,
        }
    }

    fn command_strategy() -> impl Strategy<Value = Vec<Vec<u8>>> {
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..6)
    }

    /// Bytes weighted toward protocol syntax so random input gets deep.
    fn protocol_ish_bytes() -> impl Strategy<Value = Vec<u8>> {
        let byte = prop_oneof![
            3 => prop::sample::select(b"*$\r\n0123456789- \t\"'\\x".to_vec()),
            1 => any::<u8>(),
        ];
        prop::collection::vec(byte, 0..300)
    }

    /// Quotes every byte of every argument so the splitter must decode it.
    fn encode_inline(cmd: &[Vec<u8>]) -> Vec<u8> {
        let mut line = Vec::new();
        for (i, arg) in cmd.iter().enumerate() {
            if i > 0 {
                line.push(b' ');
            }
            line.push(b'"');
            for &b in arg {
                match b {
                    b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b' ' => line.push(b),
                    b'"' => line.extend_from_slice(b"\\\""),
                    _ => line.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
                }
            }
            line.push(b'"');
        }
        line.extend_from_slice(b"\r\n");
        line
    }

    proptest! {
        #[test]
        fn multibulk_roundtrip_any_chunking(
            commands in prop::collection::vec(command_strategy(), 1..5),
            cuts in prop::collection::vec(any::<usize>(), 0..20),
        ) {
            let mut input = Vec::new();
            for cmd in &commands {
                encode(cmd, &mut input);
            }
            let out = drive_with(&input, &cuts, &ParseLimits::default());
            prop_assert_eq!(out.error, None);
            prop_assert_eq!(out.leftover, 0);
            prop_assert_eq!(out.commands, commands);
        }

        #[test]
        fn inline_roundtrip_any_chunking(
            cmd in command_strategy(),
            cuts in prop::collection::vec(any::<usize>(), 0..10),
        ) {
            let input = encode_inline(&cmd);
            let out = drive_with(&input, &cuts, &ParseLimits::default());
            prop_assert_eq!(out.error, None);
            prop_assert_eq!(out.commands, vec![cmd]);
        }

        #[test]
        fn random_bytes_never_panic_and_ignore_chunking(
            input in protocol_ish_bytes(),
            cuts in prop::collection::vec(any::<usize>(), 0..30),
        ) {
            let limits = tiny_limits();
            let whole = drive_with(&input, &[], &limits);
            let cut = drive_with(&input, &cuts, &limits);
            let bytewise = byte_by_byte(&input, &limits);
            // A line longer than the limit is read when its terminator arrived with
            // it and refused when the limit is passed first, as in Redis: only there
            // may chunking decide.
            if ![&whole, &cut, &bytewise].iter().any(|o| is_too_long(o)) {
                prop_assert_eq!(&cut, &whole);
                prop_assert_eq!(&bytewise, &whole);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(input in prop::collection::vec(any::<u8>(), 0..200)) {
            let out = drive_with(&input, &[], &ParseLimits::default());
            prop_assert!(out.leftover <= input.len());
        }

        #[test]
        fn scan_first_args_agrees_with_the_parser(
            commands in prop::collection::vec(command_strategy(), 0..20),
            cut in any::<usize>(),
            room in 1usize..24,
        ) {
            let mut input = Vec::new();
            let mut ends = Vec::new();
            for cmd in &commands {
                encode(cmd, &mut input);
                ends.push(input.len());
            }
            // A trailing partial command is never reported.
            let cut = cut % (input.len() + 1);
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            let mut spans = vec![ArgSpan { start: 0, end: 0 }; room];
            let (n, end) = scan_first_args(&input[..cut], &mut spans);
            prop_assert_eq!(n, whole.min(room));
            prop_assert_eq!(end, if n == 0 { 0 } else { ends[n - 1] });
            for (cmd, span) in commands.iter().zip(&spans[..n]) {
                let first: &[u8] = cmd.get(1).map_or(&[], |a| a.as_slice());
                prop_assert_eq!(&input[span.range()], first);
            }
        }

        #[test]
        fn whole_multibulk_fast_path_matches_the_state_machine(
            cmd in command_strategy(),
            flip in prop::option::of((any::<usize>(), prop::sample::select(b"*$\r\n0129-+ x".to_vec()))),
            cut in prop::option::of(any::<usize>()),
        ) {
            let mut input = Vec::new();
            encode(&cmd, &mut input);
            let pristine = flip.is_none() && cut.is_none();
            if let Some((at, byte)) = flip {
                let at = at % input.len();
                input[at] = byte;
            }
            if let Some(cut) = cut {
                input.truncate(cut % (input.len() + 1));
            }
            for limits in [ParseLimits::default(), tiny_limits()] {
                let mut fast = Vec::new();
                let got = parse_whole_multibulk(&input, &limits, &mut fast);
                let mut p = RequestParser::new();
                p.begin_command();
                let slow = p.run(&input, &limits);
                if let Some(n) = got {
                    prop_assert_eq!(slow, Ok(Some(n)));
                    prop_assert_eq!(&p.spans, &fast);
                }
            }
            // A well-formed whole command always takes the fast path.
            if pristine {
                let mut fast = Vec::new();
                let got = parse_whole_multibulk(&input, &ParseLimits::default(), &mut fast);
                prop_assert_eq!(got, Some(input.len()));
            }
        }

        #[test]
        fn scan_first_args_stays_inside_any_input(input in protocol_ish_bytes()) {
            let mut spans = [ArgSpan { start: 0, end: 0 }; 8];
            let (n, end) = scan_first_args(&input, &mut spans);
            prop_assert!(end <= input.len());
            for span in &spans[..n] {
                prop_assert!(span.start <= span.end && span.end as usize <= end);
            }
        }
    }

    #[test]
    fn scan_first_args_stops_where_a_glance_is_not_enough() {
        let mut spans = [ArgSpan { start: 0, end: 0 }; 4];
        let input = b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n*1\r\n$4\r\nPING\r\nGET b\r\n";
        let (n, end) = scan_first_args(input, &mut spans);
        assert_eq!((n, end), (2, 34));
        assert_eq!(&input[spans[0].range()], b"a");
        assert!(spans[1].is_empty());
        // Counts the real parser would refuse, or that are not numbers at all.
        for bad in [
            &b"*-1\r\n"[..],
            b"*\r\n",
            b"*99999999999\r\n",
            b"*1\r\n$x\r\n",
            b"*1\n$1\r\na\r\n",
            b"*1\r\n$1\r\nab\r\n",
        ] {
            let (n, end) = scan_first_args(bad, &mut spans);
            assert_eq!((n, end), (0, 0), "{bad:?}");
        }
    }
}
