//! Reply encoder for RESP2 and RESP3.
//!
//! Replies are appended straight to the connection's output `Vec<u8>`; no
//! method allocates anything except through that vector's own growth.
//! Numbers are formatted via small stack buffers.
//!
//! The byte layout follows Redis 7.0's `addReply*` family in networking.c,
//! including how each RESP3-only type degrades when the client speaks RESP2.

use std::fmt::{self, Write as _};

/// Which protocol the client negotiated (`HELLO 2` / `HELLO 3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    #[default]
    Resp2,
    Resp3,
}

/// Appends encoded replies to `out`.
pub struct ReplyWriter<'a> {
    pub out: &'a mut Vec<u8>,
    pub proto: Protocol,
}

impl<'a> ReplyWriter<'a> {
    pub fn new(out: &'a mut Vec<u8>, proto: Protocol) -> Self {
        ReplyWriter { out, proto }
    }
}

impl ReplyWriter<'_> {
    /// `+s\r\n`. CR/LF in `s` become spaces so a buggy caller cannot
    /// desynchronise the client.
    pub fn simple(&mut self, s: &str) {
        self.out.push(b'+');
        let bytes = s.as_bytes();
        if bytes.iter().any(|&b| b == b'\r' || b == b'\n') {
            push_single_line(self.out, bytes);
        } else {
            self.out.extend_from_slice(bytes);
        }
        self.crlf();
    }

    pub fn ok(&mut self) {
        self.out.extend_from_slice(b"+OK\r\n");
    }

    /// `-msg\r\n`, where `msg` carries its own code ("ERR ...",
    /// "WRONGTYPE ..."). Like Redis's `addReplyErrorFormat`, CR/LF at either
    /// end are trimmed and inner ones become spaces; a leading `-` is not
    /// doubled, and an empty message becomes `-ERR `.
    pub fn error(&mut self, msg: &str) {
        let msg = msg.trim_matches(|c| c == '\r' || c == '\n');
        let body = msg.strip_prefix('-').unwrap_or(msg);
        if body.is_empty() {
            self.out.extend_from_slice(b"-ERR \r\n");
            return;
        }
        self.out.push(b'-');
        push_single_line(self.out, body.as_bytes());
        self.crlf();
    }

    /// `:n\r\n`.
    pub fn integer(&mut self, n: i64) {
        put_number_line(self.out, b':', n < 0, n.unsigned_abs());
    }

    /// `$len\r\n<bytes>\r\n`.
    pub fn bulk(&mut self, b: &[u8]) {
        self.header(b'$', b.len() as u64);
        self.out.extend_from_slice(b);
        self.crlf();
    }

    /// Missing value: RESP2 `$-1`, RESP3 `_`.
    pub fn null(&mut self) {
        self.out.extend_from_slice(match self.proto {
            Protocol::Resp2 => b"$-1\r\n",
            Protocol::Resp3 => b"_\r\n",
        });
    }

    /// Missing aggregate (e.g. BLPOP timeout): RESP2 `*-1`, RESP3 `_`.
    pub fn null_array(&mut self) {
        self.out.extend_from_slice(match self.proto {
            Protocol::Resp2 => b"*-1\r\n",
            Protocol::Resp3 => b"_\r\n",
        });
    }

    /// `*n`; the caller then writes `n` elements.
    pub fn array_len(&mut self, n: usize) {
        self.header(b'*', n as u64);
    }

    /// RESP3 `%n` (n key/value pairs); RESP2 flattens to `*2n`.
    pub fn map_len(&mut self, n: usize) {
        match self.proto {
            Protocol::Resp2 => self.header(b'*', (n as u64).saturating_mul(2)),
            Protocol::Resp3 => self.header(b'%', n as u64),
        }
    }

    /// RESP3 `|n` (n attribute pairs before the reply they describe); RESP2 has no
    /// attributes, so callers write none there.
    pub fn attribute_len(&mut self, n: usize) {
        self.header(b'|', n as u64);
    }

    /// RESP3 `~n`; RESP2 `*n`.
    pub fn set_len(&mut self, n: usize) {
        let prefix = self.pick(b'*', b'~');
        self.header(prefix, n as u64);
    }

    /// RESP3 `>n` (out-of-band push, e.g. pub/sub); RESP2 `*n`.
    pub fn push_len(&mut self, n: usize) {
        let prefix = self.pick(b'*', b'>');
        self.header(prefix, n as u64);
    }

    /// RESP3 `,<%.17g>`; RESP2 the same text as a bulk string. Infinities
    /// are `inf`/`-inf` in both.
    pub fn double(&mut self, d: f64) {
        let text = g17(d);
        match self.proto {
            Protocol::Resp2 => self.bulk(text.as_bytes()),
            Protocol::Resp3 => {
                self.out.push(b',');
                self.out.extend_from_slice(text.as_bytes());
                self.crlf();
            }
        }
    }

    /// RESP3 `#t`/`#f`; RESP2 `:1`/`:0`.
    pub fn boolean(&mut self, b: bool) {
        let bytes: &[u8] = match (self.proto, b) {
            (Protocol::Resp2, true) => b":1\r\n",
            (Protocol::Resp2, false) => b":0\r\n",
            (Protocol::Resp3, true) => b"#t\r\n",
            (Protocol::Resp3, false) => b"#f\r\n",
        };
        self.out.extend_from_slice(bytes);
    }

    /// RESP3 `(digits`; RESP2 a bulk string.
    pub fn big_number(&mut self, digits: &str) {
        match self.proto {
            Protocol::Resp2 => self.bulk(digits.as_bytes()),
            Protocol::Resp3 => {
                self.out.push(b'(');
                push_single_line(self.out, digits.as_bytes());
                self.crlf();
            }
        }
    }

    /// RESP3 `=len\r\nfmt:body\r\n`; RESP2 a plain bulk of `body`. As in
    /// Redis, `fmt` is forced to exactly three bytes (padded with spaces or
    /// truncated) because the client splits on the fixed-position colon.
    pub fn verbatim(&mut self, fmt: &str, body: &[u8]) {
        if self.proto == Protocol::Resp2 {
            self.bulk(body);
            return;
        }
        self.header(b'=', body.len() as u64 + 4);
        let mut ext = [b' '; 3];
        for (slot, &b) in ext.iter_mut().zip(fmt.as_bytes()) {
            *slot = b;
        }
        self.out.extend_from_slice(&ext);
        self.out.push(b':');
        self.out.extend_from_slice(body);
        self.crlf();
    }

    /// An integer rendered as a bulk string (`addReplyBulkLongLong`).
    pub fn bulk_int(&mut self, n: i64) {
        let digits = IntBuf::signed(n);
        self.bulk(digits.as_bytes());
    }

    fn pick(&self, resp2: u8, resp3: u8) -> u8 {
        match self.proto {
            Protocol::Resp2 => resp2,
            Protocol::Resp3 => resp3,
        }
    }

    fn header(&mut self, prefix: u8, n: u64) {
        put_number_line(self.out, prefix, false, n);
    }

    fn crlf(&mut self) {
        self.out.extend_from_slice(b"\r\n");
    }
}

/// Copies `bytes`, turning CR and LF into spaces (Redis's `sdsmapchars`
/// step) so a one-line reply type can never be split.
fn push_single_line(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend(bytes.iter().map(|&b| match b {
        b'\r' | b'\n' => b' ',
        other => other,
    }));
}

// ---- integers ---------------------------------------------------------

/// "00" "01" … "99": emitting two digits per division halves the work.
const DIGIT_PAIRS: [u8; 200] = {
    let mut table = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        table[2 * i] = b'0' + (i / 10) as u8;
        table[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    table
};

/// The longest number line: prefix, sign, 20 digits (u64::MAX), CRLF.
pub const NUMBER_LINE_MAX: usize = 24;

/// Appends `<prefix>[-]<magnitude>\r\n` (integer replies, bulk and aggregate
/// headers). The output grows by a constant 24 zero bytes (a few stores), the line
/// is written in place and the rest cut back: appending a variable-length slice
/// called memcpy (1-2% of integer-reply commands at -P 16, for 3 to 10 bytes), and
/// building the line on the stack first stalled on reading it back whole.
#[inline]
fn put_number_line(out: &mut Vec<u8>, prefix: u8, negative: bool, magnitude: u64) {
    let start = out.len();
    out.extend_from_slice(&[0u8; NUMBER_LINE_MAX]);
    let len = write_number_line(&mut out[start..], prefix, negative, magnitude);
    out.truncate(start + len);
}

/// Writes `<prefix>[-]<magnitude>\r\n` at the start of `line`, which has room for
/// `NUMBER_LINE_MAX` bytes, and returns its length.
#[inline]
pub fn write_number_line(line: &mut [u8], prefix: u8, negative: bool, mut magnitude: u64) -> usize {
    // Most lines are small headers ("$3", "*2", ":1"): no digit count, no loop.
    if !negative && magnitude < 100 {
        line[0] = prefix;
        if magnitude < 10 {
            line[1] = b'0' + magnitude as u8;
            line[2..4].copy_from_slice(b"\r\n");
            return 4;
        }
        let pair = magnitude as usize * 2;
        line[1..3].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
        line[3..5].copy_from_slice(b"\r\n");
        return 5;
    }
    let digits = magnitude.checked_ilog10().map_or(1, |d| d as usize + 1);
    let len = 1 + usize::from(negative) + digits + 2;
    let line = &mut line[..len];
    line[0] = prefix;
    if negative {
        line[1] = b'-';
    }
    let mut at = len - 2;
    line[at..].copy_from_slice(b"\r\n");
    while magnitude >= 100 {
        let pair = (magnitude % 100) as usize * 2;
        magnitude /= 100;
        at -= 2;
        line[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if magnitude >= 10 {
        let pair = magnitude as usize * 2;
        at -= 2;
        line[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        line[at - 1] = b'0' + magnitude as u8;
    }
    len
}

/// Decimal digits of an integer, built right-to-left on the stack.
struct IntBuf {
    bytes: [u8; 20],
    start: usize,
}

impl IntBuf {
    fn unsigned(mut n: u64) -> IntBuf {
        let mut buf = IntBuf {
            bytes: [0; 20],
            start: 20,
        };
        while n >= 100 {
            let pair = (n % 100) as usize * 2;
            n /= 100;
            buf.prepend(&DIGIT_PAIRS[pair..pair + 2]);
        }
        if n >= 10 {
            let pair = n as usize * 2;
            buf.prepend(&DIGIT_PAIRS[pair..pair + 2]);
        } else {
            buf.prepend(&[b'0' + n as u8]);
        }
        buf
    }

    /// `i64::MIN` works because the magnitude is taken as unsigned.
    fn signed(n: i64) -> IntBuf {
        let mut buf = IntBuf::unsigned(n.unsigned_abs());
        if n < 0 {
            buf.prepend(b"-");
        }
        buf
    }

    /// Callers never exceed 20 bytes (u64::MAX has 20 digits, and a negative
    /// i64 has at most 19 plus the sign), so the slice is always in range.
    fn prepend(&mut self, digits: &[u8]) {
        let new_start = self.start - digits.len();
        self.bytes[new_start..self.start].copy_from_slice(digits);
        self.start = new_start;
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[self.start..]
    }
}

/// Appends the decimal form of `n` without allocating.
pub fn write_i64(n: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(IntBuf::signed(n).as_bytes());
}

/// Appends the decimal form of `n` without allocating.
pub fn write_u64(n: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(IntBuf::unsigned(n).as_bytes());
}

// ---- doubles ----------------------------------------------------------

/// Fixed-capacity text buffer on the stack. The longest `%.17g` output is
/// 24 bytes ("-2.2250738585072014e-308"), and `{:.16e}` is shorter.
struct StackStr {
    bytes: [u8; 32],
    len: usize,
}

impl StackStr {
    fn new() -> StackStr {
        StackStr {
            bytes: [0; 32],
            len: 0,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }

    fn push(&mut self, b: u8) {
        // Overflow is impossible for the formats used here; dropping the
        // byte is the non-panicking fallback.
        if let Some(slot) = self.bytes.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }

    fn push_all(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.push(b);
        }
    }
}

impl fmt::Write for StackStr {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        let dst = self.bytes.get_mut(self.len..end).ok_or(fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Appends `d` exactly as C's `printf("%.17g", d)` (glibc) renders it,
/// e.g. "0.10000000000000001", "1e+20", "-0", "inf", "nan"/"-nan".
pub fn format_double_g17(d: f64, out: &mut Vec<u8>) {
    out.extend_from_slice(g17(d).as_bytes());
}

/// The 17 significant digits of |d| (trailing zeros removed, at least one
/// digit kept) and the decimal exponent of the first one.
struct Decimal {
    digits: [u8; 17],
    len: usize,
    exp: i32,
}

impl Decimal {
    /// Rust's `{:.16e}` is correctly rounded, and at 17 significant digits a
    /// double can never sit exactly halfway between two candidates, so the
    /// result matches glibc whatever tie rule either side uses.
    fn of(d: f64) -> Decimal {
        let mut sci = StackStr::new();
        // At most 22 bytes ("1.7976931348623157e308"), so this cannot fail.
        let _ = write!(sci, "{:.16e}", d.abs());
        let text = sci.as_bytes();
        let split = text.iter().position(|&b| b == b'e').unwrap_or(text.len());
        let (mantissa, exponent) = text.split_at(split);
        let mut dec = Decimal {
            digits: [b'0'; 17],
            len: 0,
            exp: parse_exponent(exponent.get(1..).unwrap_or_default()),
        };
        for (slot, &b) in dec
            .digits
            .iter_mut()
            .zip(mantissa.iter().filter(|b| **b != b'.'))
        {
            *slot = b;
        }
        dec.len = dec
            .digits
            .iter()
            .rposition(|&b| b != b'0')
            .map_or(1, |i| i + 1);
        dec
    }

    fn significant(&self) -> &[u8] {
        self.digits.get(..self.len).unwrap_or_default()
    }
}

/// Parses the `-?[0-9]+` exponent that Rust's `{:e}` emits.
fn parse_exponent(text: &[u8]) -> i32 {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let magnitude = digits
        .iter()
        .filter(|b| b.is_ascii_digit())
        .fold(0i32, |acc, &b| {
            acc.saturating_mul(10).saturating_add(i32::from(b - b'0'))
        });
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

fn g17(d: f64) -> StackStr {
    let mut out = StackStr::new();
    if d.is_sign_negative() {
        // glibc prints the sign of -0 and of negative NaNs too.
        out.push(b'-');
    }
    if d.is_nan() {
        out.push_all(b"nan");
    } else if d.is_infinite() {
        out.push_all(b"inf");
    } else {
        let dec = Decimal::of(d);
        // %g picks plain notation when -4 <= exponent < precision.
        if (-4..17).contains(&dec.exp) {
            write_plain(&dec, &mut out);
        } else {
            write_scientific(&dec, &mut out);
        }
    }
    out
}

fn write_plain(dec: &Decimal, out: &mut StackStr) {
    let sig = dec.significant();
    if dec.exp < 0 {
        out.push_all(b"0.");
        for _ in 0..(-dec.exp - 1) {
            out.push(b'0');
        }
        out.push_all(sig);
        return;
    }
    let int_len = dec.exp as usize + 1;
    for i in 0..int_len {
        out.push(sig.get(i).copied().unwrap_or(b'0'));
    }
    if let Some(frac) = sig.get(int_len..).filter(|f| !f.is_empty()) {
        out.push(b'.');
        out.push_all(frac);
    }
}

fn write_scientific(dec: &Decimal, out: &mut StackStr) {
    let sig = dec.significant();
    if let Some((first, rest)) = sig.split_first() {
        out.push(*first);
        if !rest.is_empty() {
            out.push(b'.');
            out.push_all(rest);
        }
    }
    out.push(b'e');
    out.push(if dec.exp < 0 { b'-' } else { b'+' });
    let magnitude = dec.exp.unsigned_abs();
    if magnitude < 10 {
        // C always prints at least two exponent digits.
        out.push(b'0');
    }
    out.push_all(IntBuf::unsigned(u64::from(magnitude)).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn render(proto: Protocol, f: impl FnOnce(&mut ReplyWriter<'_>)) -> String {
        let mut out = Vec::new();
        f(&mut ReplyWriter::new(&mut out, proto));
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Renders in both protocols: (RESP2, RESP3).
    fn both(f: impl Fn(&mut ReplyWriter<'_>)) -> (String, String) {
        (render(Protocol::Resp2, &f), render(Protocol::Resp3, &f))
    }

    fn g17_str(d: f64) -> String {
        let mut out = Vec::new();
        format_double_g17(d, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    fn int_str(n: i64) -> String {
        let mut out = Vec::new();
        write_i64(n, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn simple_and_ok() {
        assert_eq!(
            both(|w| w.simple("PONG")),
            ("+PONG\r\n".into(), "+PONG\r\n".into())
        );
        assert_eq!(render(Protocol::Resp2, |w| w.ok()), "+OK\r\n");
        assert_eq!(render(Protocol::Resp2, |w| w.simple("a\r\nb")), "+a  b\r\n");
    }

    #[test]
    fn errors() {
        let r = |m: &str| render(Protocol::Resp3, |w| w.error(m));
        assert_eq!(r("ERR syntax error"), "-ERR syntax error\r\n");
        assert_eq!(
            r("WRONGTYPE Operation against a key holding the wrong kind of value"),
            "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
        );
        assert_eq!(r("ERR bad\r\nthing\r\n"), "-ERR bad  thing\r\n");
        assert_eq!(r("\nERR x"), "-ERR x\r\n");
        assert_eq!(r("-ERR already prefixed"), "-ERR already prefixed\r\n");
        assert_eq!(r(""), "-ERR \r\n");
    }

    #[test]
    fn integers_and_bulk() {
        assert_eq!(render(Protocol::Resp2, |w| w.integer(0)), ":0\r\n");
        assert_eq!(render(Protocol::Resp3, |w| w.integer(-42)), ":-42\r\n");
        assert_eq!(
            render(Protocol::Resp2, |w| w.integer(i64::MIN)),
            ":-9223372036854775808\r\n"
        );
        assert_eq!(
            render(Protocol::Resp2, |w| w.bulk(b"hello")),
            "$5\r\nhello\r\n"
        );
        assert_eq!(render(Protocol::Resp2, |w| w.bulk(b"")), "$0\r\n\r\n");
        assert_eq!(
            render(Protocol::Resp2, |w| w.bulk(b"a\r\nb")),
            "$4\r\na\r\nb\r\n"
        );
        assert_eq!(
            render(Protocol::Resp3, |w| w.bulk_int(-123)),
            "$4\r\n-123\r\n"
        );
        assert_eq!(render(Protocol::Resp2, |w| w.bulk_int(7)), "$1\r\n7\r\n");
    }

    #[test]
    fn number_lines_match_decimal_formatting_at_every_width() {
        let mut values = vec![0u64, u64::MAX, i64::MAX as u64, 1 << 63];
        let mut p = 1u64;
        while let Some(next) = p.checked_mul(10) {
            values.extend([p - 1, p, p + 1]);
            p = next;
        }
        values.extend([p - 1, p, p + 1]);
        for m in values {
            for negative in [false, true] {
                let mut out = b"junk".to_vec();
                put_number_line(&mut out, b'*', negative, m);
                let sign = if negative { "-" } else { "" };
                assert_eq!(out, format!("junk*{sign}{m}\r\n").into_bytes());
            }
        }
        for n in [i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX] {
            assert_eq!(
                render(Protocol::Resp2, |w| w.integer(n)),
                format!(":{n}\r\n")
            );
        }
    }

    #[test]
    fn nulls() {
        assert_eq!(both(|w| w.null()), ("$-1\r\n".into(), "_\r\n".into()));
        assert_eq!(both(|w| w.null_array()), ("*-1\r\n".into(), "_\r\n".into()));
    }

    #[test]
    fn aggregate_headers() {
        assert_eq!(both(|w| w.array_len(3)), ("*3\r\n".into(), "*3\r\n".into()));
        assert_eq!(both(|w| w.map_len(2)), ("*4\r\n".into(), "%2\r\n".into()));
        assert_eq!(both(|w| w.set_len(5)), ("*5\r\n".into(), "~5\r\n".into()));
        assert_eq!(both(|w| w.push_len(3)), ("*3\r\n".into(), ">3\r\n".into()));
        assert_eq!(both(|w| w.array_len(0)), ("*0\r\n".into(), "*0\r\n".into()));
    }

    #[test]
    fn doubles() {
        assert_eq!(
            both(|w| w.double(1.5)),
            ("$3\r\n1.5\r\n".into(), ",1.5\r\n".into())
        );
        assert_eq!(
            both(|w| w.double(0.1)),
            (
                "$19\r\n0.10000000000000001\r\n".into(),
                ",0.10000000000000001\r\n".into()
            )
        );
        assert_eq!(
            both(|w| w.double(f64::INFINITY)),
            ("$3\r\ninf\r\n".into(), ",inf\r\n".into())
        );
        assert_eq!(
            both(|w| w.double(f64::NEG_INFINITY)),
            ("$4\r\n-inf\r\n".into(), ",-inf\r\n".into())
        );
        assert_eq!(render(Protocol::Resp3, |w| w.double(f64::NAN)), ",nan\r\n");
    }

    #[test]
    fn booleans_big_numbers_verbatim() {
        assert_eq!(
            both(|w| w.boolean(true)),
            (":1\r\n".into(), "#t\r\n".into())
        );
        assert_eq!(
            both(|w| w.boolean(false)),
            (":0\r\n".into(), "#f\r\n".into())
        );
        assert_eq!(
            both(|w| w.big_number("1234567890123456789012")),
            (
                "$22\r\n1234567890123456789012\r\n".into(),
                "(1234567890123456789012\r\n".into()
            )
        );
        assert_eq!(
            both(|w| w.verbatim("txt", b"Some string")),
            (
                "$11\r\nSome string\r\n".into(),
                "=15\r\ntxt:Some string\r\n".into()
            )
        );
        assert_eq!(
            render(Protocol::Resp3, |w| w.verbatim("m", b"x")),
            "=5\r\nm  :x\r\n"
        );
        assert_eq!(
            render(Protocol::Resp3, |w| w.verbatim("markdown", b"")),
            "=4\r\nmar:\r\n"
        );
    }

    #[test]
    fn writer_appends_without_clobbering() {
        let mut out = b"existing".to_vec();
        let mut w = ReplyWriter::new(&mut out, Protocol::Resp2);
        w.array_len(2);
        w.bulk(b"a");
        w.integer(1);
        assert_eq!(out, b"existing*2\r\n$1\r\na\r\n:1\r\n");
    }

    #[test]
    fn write_i64_edge_cases() {
        for n in [
            0,
            1,
            -1,
            9,
            10,
            99,
            100,
            101,
            12345,
            -98765,
            i64::MAX,
            i64::MIN,
        ] {
            assert_eq!(int_str(n), n.to_string());
        }
        let mut out = Vec::new();
        write_u64(u64::MAX, &mut out);
        assert_eq!(out, u64::MAX.to_string().as_bytes());
    }

    /// Expected strings are glibc `printf("%.17g")` output.
    #[test]
    fn g17_matches_printf() {
        let cases: &[(f64, &str)] = &[
            (0.1, "0.10000000000000001"),
            (1.5, "1.5"),
            (1e20, "1e+20"),
            (3.0, "3"),
            (1e-5, "1.0000000000000001e-05"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (-0.0, "-0"),
            (0.0, "0"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
            (-f64::NAN, "-nan"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (12345678901234567.0, "12345678901234568"),
            (0.0001, "0.0001"),
            (0.00012, "0.00012"),
            (1e-4, "0.0001"),
            (9.9999e-5, "9.9999000000000003e-05"),
            (1.0000000000000001e20, "1.0000000000000002e+20"),
            (100000000000000010000.0, "1.0000000000000002e+20"),
            (-2.5, "-2.5"),
            (1.0 / 3.0, "0.33333333333333331"),
            (2.0 / 3.0, "0.66666666666666663"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (5e-324, "4.9406564584124654e-324"),
            (1e100, "1e+100"),
            (123.456, "123.456"),
            (9007199254740993.0, "9007199254740992"),
            (0.3, "0.29999999999999999"),
            (1e21, "1e+21"),
            (1.5e-7, "1.4999999999999999e-07"),
        ];
        for &(d, want) in cases {
            assert_eq!(g17_str(d), want, "for {d:e}");
        }
    }

    proptest! {
        /// 17 significant digits always identify a double uniquely.
        #[test]
        fn g17_round_trips(bits in any::<u64>()) {
            let d = f64::from_bits(bits);
            prop_assume!(d.is_finite());
            let text = g17_str(d);
            prop_assert_eq!(text.parse::<f64>().ok().map(f64::to_bits), Some(bits));
        }

        /// Cross-checks %g's notation choice against an independent
        /// rendering built from Rust's `{:e}` output.
        #[test]
        fn g17_agrees_with_reference(bits in any::<u64>()) {
            let d = f64::from_bits(bits);
            prop_assume!(d.is_finite());
            prop_assert_eq!(g17_str(d), reference_g17(d));
        }

        #[test]
        fn write_i64_matches_std(n in any::<i64>()) {
            prop_assert_eq!(int_str(n), n.to_string());
        }
    }

    /// Straightforward allocation-heavy %.17g used only as a test oracle.
    fn reference_g17(d: f64) -> String {
        let sci = format!("{:.16e}", d);
        let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let negative = mantissa.starts_with('-');
        let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
        let digits = digits.trim_end_matches('0');
        let digits = if digits.is_empty() { "0" } else { digits };
        let sign = if negative { "-" } else { "" };
        if (-4..17).contains(&exp) {
            let body = if exp < 0 {
                format!("0.{}{}", "0".repeat((-exp - 1) as usize), digits)
            } else {
                let int_len = exp as usize + 1;
                let padded = format!("{digits:0<int_len$}");
                let (int_part, frac) = padded.split_at(int_len);
                if frac.is_empty() {
                    int_part.to_string()
                } else {
                    format!("{int_part}.{frac}")
                }
            };
            format!("{sign}{body}")
        } else {
            let (first, rest) = digits.split_at(1);
            let dot = if rest.is_empty() { "" } else { "." };
            let esign = if exp < 0 { '-' } else { '+' };
            format!("{sign}{first}{dot}{rest}e{esign}{:02}", exp.abs())
        }
    }
}

/// The length of the first RESP value in `buf` (a reply this server wrote), or None
/// when it is incomplete or malformed. Used to pick single elements out of replies
/// that were produced back to back, such as the per-shard parts of an MGET.
pub fn value_len(buf: &[u8]) -> Option<usize> {
    value_len_at(buf, 0, 0)
}

fn value_len_at(buf: &[u8], at: usize, depth: u32) -> Option<usize> {
    // Replies nest a few levels at most; the bound keeps a bad buffer off the stack.
    if depth > 64 {
        return None;
    }
    let kind = *buf.get(at)?;
    let line_end = at + 1 + buf.get(at + 1..)?.windows(2).position(|w| w == b"\r\n")?;
    let after_line = line_end + 2;
    let header = || -> Option<i64> {
        std::str::from_utf8(&buf[at + 1..line_end])
            .ok()?
            .parse()
            .ok()
    };
    match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Some(after_line - at),
        b'$' | b'=' | b'!' => {
            let n = header()?;
            if n < 0 {
                return Some(after_line - at);
            }
            let end = after_line.checked_add(n as usize)?.checked_add(2)?;
            (end <= buf.len()).then_some(end - at)
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = header()?;
            if n < 0 {
                return Some(after_line - at);
            }
            let items = if matches!(kind, b'%' | b'|') {
                2 * n
            } else {
                n
            };
            let mut pos = after_line;
            for _ in 0..items {
                pos += value_len_at(buf, pos, depth + 1)?;
            }
            if kind == b'|' {
                // An attribute precedes the value it describes.
                pos += value_len_at(buf, pos, depth + 1)?;
            }
            Some(pos - at)
        }
        _ => None,
    }
}

#[cfg(test)]
mod value_len_tests {
    use super::value_len;

    #[test]
    fn measures_first_value() {
        assert_eq!(value_len(b"$3\r\nabc\r\n$-1\r\n"), Some(9));
        assert_eq!(value_len(b"$-1\r\n$3\r\nabc\r\n"), Some(5));
        assert_eq!(value_len(b"_\r\nxx"), Some(3));
        assert_eq!(value_len(b"*2\r\n:1\r\n$1\r\na\r\n+OK\r\n"), Some(15));
        assert_eq!(value_len(b"%1\r\n+a\r\n:2\r\n"), Some(12));
        assert_eq!(value_len(b"$5\r\nab"), None);
        assert_eq!(value_len(b"*3\r\n:1\r\n"), None);
        assert_eq!(value_len(b"?"), None);
        assert_eq!(value_len(b""), None);
    }
}
