//! Redis's C-string helpers (util.c and sds.c), written once.
//!
//! The protocol parser, the keyspace, command arguments and the config all need
//! exactly Redis's rules for what an integer, a memory size or a quoted argument
//! list is, because clients and config files see the difference. Each helper takes
//! bytes: callers holding `&str` pass `.as_bytes()`.

/// Redis's `string2ll`: the canonical decimal form of an i64. An optional `-`,
/// then digits with no leading zero ("0" alone is fine, "-0" is not), no `+`, no
/// spaces, and the value must fit.
#[inline]
pub fn string2ll(b: &[u8]) -> Option<i64> {
    // Twenty bytes hold "-9223372036854775808"; anything longer cannot fit, and
    // the early exit keeps long non-numeric strings cheap on the keyspace's path.
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    let (neg, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    match digits {
        [] => return None,
        [b'0', ..] if digits.len() > 1 || neg => return None,
        _ => {}
    }
    let mut v: i64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        let d = i64::from(c - b'0');
        // Accumulating towards the sign reaches i64::MIN without overflowing.
        v = if neg {
            v.checked_mul(10)?.checked_sub(d)?
        } else {
            v.checked_mul(10)?.checked_add(d)?
        };
    }
    Some(v)
}

/// C `strtoll(s, &end, 10)` followed by Redis's `*end == '\0'` check: returns
/// (value, whole input consumed). Leading whitespace and a sign are accepted,
/// overflow saturates, and no digits yields (0, input is empty).
pub fn strtoll(b: &[u8]) -> (i64, bool) {
    let mut i = b.iter().take_while(|c| is_c_space(**c)).count();
    let negative = match b.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let rest = b.get(i..).unwrap_or_default();
    let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        return (0, b.is_empty());
    }
    let mut acc: i128 = 0;
    for d in &rest[..digits] {
        // Capped one past i64::MAX so that the negation below still reaches MIN.
        acc = (acc * 10 + i128::from(d - b'0')).min(i128::from(i64::MAX) + 1);
    }
    let signed = if negative { -acc } else { acc };
    let clamped = signed.clamp(i128::from(i64::MIN), i128::from(i64::MAX));
    (clamped as i64, i + digits == b.len())
}

/// Redis's `memtoull`: digits plus an optional case-insensitive unit (b, k=1000,
/// kb=1024, m, mb, g, gb). Quirks kept: an empty digit string is 0 (so "" and
/// "kb" are 0), and digit overflow saturates like strtoull (only the unit
/// multiplication is overflow-checked).
pub fn memtoull(b: &[u8]) -> Option<u64> {
    let ndigits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    let (digits, unit) = b.split_at(ndigits);
    let mul = memory_unit(unit)?;
    // Redis copies the digits into a 128-byte buffer and refuses longer ones.
    if ndigits >= 128 {
        return None;
    }
    let val = if digits.is_empty() {
        0
    } else {
        // ASCII digits are valid UTF-8, so only overflow fails: saturate.
        std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse::<u64>().ok())
            .unwrap_or(u64::MAX)
    };
    val.checked_mul(mul)
}

/// The multiplier of a `memtoull` unit suffix (the empty suffix is bytes).
fn memory_unit(unit: &[u8]) -> Option<u64> {
    const UNITS: &[(&[u8], u64)] = &[
        (b"", 1),
        (b"b", 1),
        (b"k", 1000),
        (b"kb", 1024),
        (b"m", 1000 * 1000),
        (b"mb", 1024 * 1024),
        (b"g", 1000 * 1000 * 1000),
        (b"gb", 1024 * 1024 * 1024),
    ];
    UNITS
        .iter()
        .find(|(u, _)| u.eq_ignore_ascii_case(unit))
        .map(|(_, m)| *m)
}

/// C `isspace` in the C locale.
#[inline]
pub fn is_c_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// `sdssplitargs` found a quote that is never closed, or a closing quote that is
/// not followed by a space or the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnbalancedQuotes;

/// Redis's `sdssplitargs`: splits a config or inline-command line into
/// arguments, honouring "double quotes" (with \n \r \t \b \a \\ \" \xHH escapes)
/// and 'single quotes' (with \' only). A closing quote must be followed by a
/// space or the end. Returns None on unbalanced quotes. A NUL byte ends the
/// input, as it does for the C string Redis works on.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    let mut arg = Vec::new();
    let mut pos = 0;
    while let Some(next) = next_arg(line, pos, &mut arg).ok()? {
        args.push(std::mem::take(&mut arg));
        pos = next;
    }
    Some(args)
}

/// `split_args` with arguments converted to (lossy) UTF-8 strings, for the config
/// file and command line, which Redis reads as C strings.
pub fn split_args_lossy(line: &str) -> Option<Vec<String>> {
    split_args(line.as_bytes()).map(|args| {
        args.into_iter()
            .map(|a| String::from_utf8_lossy(&a).into_owned())
            .collect()
    })
}

/// One step of `split_args`: skips the spaces at `pos`, appends the next decoded
/// argument to `out` and returns where to resume, or `None` at the end of the
/// line. Appending to a caller's buffer lets the protocol parser decode an
/// inline command without an allocation per argument.
pub fn next_arg(
    line: &[u8],
    pos: usize,
    out: &mut Vec<u8>,
) -> Result<Option<usize>, UnbalancedQuotes> {
    let mut cur = Cursor { line, pos };
    while is_c_space(cur.peek(0)) {
        cur.pos += 1;
    }
    if cur.peek(0) == 0 {
        return Ok(None);
    }
    read_token(&mut cur, out)?;
    Ok(Some(cur.pos))
}

/// Byte cursor that reads 0 at a NUL and past the end, mirroring the terminator
/// the C splitter relies on.
struct Cursor<'a> {
    line: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn peek(&self, ahead: usize) -> u8 {
        self.line.get(self.pos + ahead).copied().unwrap_or(0)
    }
}

#[derive(Clone, Copy)]
enum Quoting {
    None,
    Double,
    Single,
}

/// Reads one argument. Quotes may open mid-token (`a"b c"` is `ab c`), so the
/// quoting mode is per character, not per token.
fn read_token(cur: &mut Cursor<'_>, out: &mut Vec<u8>) -> Result<(), UnbalancedQuotes> {
    let mut quoting = Quoting::None;
    loop {
        let done = match quoting {
            Quoting::None => read_plain(cur, &mut quoting, out),
            Quoting::Double => read_double_quoted(cur, out)?,
            Quoting::Single => read_single_quoted(cur, out)?,
        };
        if cur.peek(0) != 0 {
            cur.pos += 1;
        }
        if done {
            return Ok(());
        }
    }
}

/// Handles one unquoted byte; returns true when the token ends here. A bare
/// token ends at a narrower set than `is_c_space` (as in Redis), which is why
/// `a\vb` is one argument.
fn read_plain(cur: &Cursor<'_>, quoting: &mut Quoting, out: &mut Vec<u8>) -> bool {
    match cur.peek(0) {
        b' ' | b'\n' | b'\r' | b'\t' | 0 => return true,
        b'"' => *quoting = Quoting::Double,
        b'\'' => *quoting = Quoting::Single,
        other => out.push(other),
    }
    false
}

/// Handles one byte inside double quotes; returns true on the closing quote.
fn read_double_quoted(cur: &mut Cursor<'_>, out: &mut Vec<u8>) -> Result<bool, UnbalancedQuotes> {
    let c = cur.peek(0);
    if c == b'\\' && cur.peek(1) == b'x' {
        if let (Some(hi), Some(lo)) = (hex_value(cur.peek(2)), hex_value(cur.peek(3))) {
            out.push(hi * 16 + lo);
            cur.pos += 3;
            return Ok(false);
        }
    }
    if c == b'\\' && cur.peek(1) != 0 {
        cur.pos += 1;
        out.push(unescape(cur.peek(0)));
        return Ok(false);
    }
    match c {
        b'"' => closing_quote(cur).map(|()| true),
        0 => Err(UnbalancedQuotes),
        _ => {
            out.push(c);
            Ok(false)
        }
    }
}

/// Handles one byte inside single quotes, where only `\'` is an escape.
fn read_single_quoted(cur: &mut Cursor<'_>, out: &mut Vec<u8>) -> Result<bool, UnbalancedQuotes> {
    let c = cur.peek(0);
    if c == b'\\' && cur.peek(1) == b'\'' {
        cur.pos += 1;
        out.push(b'\'');
        return Ok(false);
    }
    match c {
        b'\'' => closing_quote(cur).map(|()| true),
        0 => Err(UnbalancedQuotes),
        _ => {
            out.push(c);
            Ok(false)
        }
    }
}

/// Redis requires a closing quote to be followed by whitespace or the end, so
/// `"a"b` is an error rather than silently becoming `ab`.
fn closing_quote(cur: &Cursor<'_>) -> Result<(), UnbalancedQuotes> {
    let next = cur.peek(1);
    if next != 0 && !is_c_space(next) {
        return Err(UnbalancedQuotes);
    }
    Ok(())
}

fn unescape(c: u8) -> u8 {
    match c {
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        b'b' => 0x08,
        b'a' => 0x07,
        other => other,
    }
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Redis's `sdscatrepr`: a double-quoted form that `split_args` reads back.
pub fn repr(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string2ll_accepts_canonical_integers() {
        assert_eq!(string2ll(b"0"), Some(0));
        assert_eq!(string2ll(b"-1"), Some(-1));
        assert_eq!(string2ll(b"-5"), Some(-5));
        assert_eq!(string2ll(b"10"), Some(10));
        assert_eq!(string2ll(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(string2ll(b"-9223372036854775808"), Some(i64::MIN));
    }

    #[test]
    fn string2ll_is_strict() {
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"00",
            b"01",
            b"007",
            b"-01",
            b"+1",
            b" 1",
            b"1 ",
            b"1a",
            b"1k",
            b"1.0",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"99999999999999999999",
            b"123456789012345678901",
        ] {
            assert_eq!(string2ll(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn strtoll_matches_libc() {
        assert_eq!(strtoll(b"42"), (42, true));
        assert_eq!(strtoll(b" +7"), (7, true));
        assert_eq!(strtoll(b"-3"), (-3, true));
        assert_eq!(strtoll(b"007"), (7, true));
        assert_eq!(strtoll(b"-0"), (0, true));
        assert_eq!(strtoll(b""), (0, true));
        assert_eq!(strtoll(b" "), (0, false));
        assert_eq!(strtoll(b"-"), (0, false));
        assert_eq!(strtoll(b"1k"), (1, false));
        assert_eq!(strtoll(b"99999999999999999999"), (i64::MAX, true));
        assert_eq!(strtoll(b"-9223372036854775808"), (i64::MIN, true));
        assert_eq!(strtoll(b"-99999999999999999999"), (i64::MIN, true));
    }

    #[test]
    fn memtoull_units() {
        let cases: &[(&[u8], Option<u64>)] = &[
            (b"0", Some(0)),
            (b"100", Some(100)),
            (b"100b", Some(100)),
            (b"1k", Some(1000)),
            (b"1K", Some(1000)),
            (b"1kb", Some(1024)),
            (b"1KB", Some(1024)),
            (b"2m", Some(2_000_000)),
            (b"2mb", Some(2 * 1024 * 1024)),
            (b"3g", Some(3_000_000_000)),
            (b"1gb", Some(1024 * 1024 * 1024)),
            (b"3Gb", Some(3 * 1024 * 1024 * 1024)),
            (b"-1", None),
            (b"1t", None),
            (b"1 mb", None),
            (b" 1", None),
            (b"1.5mb", None),
            (b"18446744073709551615", Some(u64::MAX)),
            (b"18446744073709551615kb", None),
        ];
        for (s, want) in cases {
            assert_eq!(memtoull(s), *want, "{s:?}");
        }
    }

    #[test]
    fn memtoull_quirks() {
        assert_eq!(memtoull(b""), Some(0), "Redis quirk: no digits is 0");
        assert_eq!(memtoull(b"kb"), Some(0));
        assert_eq!(memtoull(b"99999999999999999999999"), Some(u64::MAX));
        assert_eq!(memtoull(&[b'1'; 128]), None, "Redis's 128-byte buffer");
    }

    fn split(s: &str) -> Vec<String> {
        split_args_lossy(s).unwrap_or_else(|| vec!["<unbalanced>".to_string()])
    }

    #[test]
    fn split_args_rules() {
        assert_eq!(split("  port   6379  "), ["port", "6379"]);
        assert_eq!(split("save \"\""), ["save", ""]);
        assert_eq!(split(r#"a "b c" 'd e'"#), ["a", "b c", "d e"]);
        assert_eq!(split(r#""\n\r\t\\\"\x41\x4a""#), ["\n\r\t\\\"AJ"]);
        assert_eq!(split(r#""\b\a\q""#), ["\u{8}\u{7}q"]);
        assert_eq!(split(r"'it\'s'"), ["it's"]);
        assert_eq!(split(r"'a\nb'"), ["a\\nb"]);
        assert_eq!(split(r#"foo"bar baz""#), ["foobar baz"]);
        assert_eq!(split(""), Vec::<String>::new());
        assert_eq!(
            split("a\x0bb"),
            ["a\x0bb"],
            "a bare token ends at fewer spaces"
        );
        assert_eq!(split_args(b"a\0b"), Some(vec![b"a".to_vec()]));
    }

    #[test]
    fn split_args_hex_escapes() {
        assert_eq!(split(r#""\x41""#), ["A"]);
        assert_eq!(split(r#""\x4a\x4A""#), ["JJ"]);
        assert_eq!(split_args(br#""\xff\x00""#), Some(vec![vec![0xff, 0x00]]));
        assert_eq!(split(r#""x\xzz""#), ["xxzz"], "not hex: a plain escaped x");
        assert_eq!(split(r#""\x4""#), ["x4"]);
        assert_eq!(split(r"\x41"), [r"\x41"], "no escapes outside quotes");
        assert_eq!(split(r"'\x41'"), [r"\x41"], "nor inside single quotes");
    }

    #[test]
    fn split_args_unbalanced_quotes() {
        for bad in [
            &b"\"abc"[..],
            b"'abc",
            b"\"a\"b",
            b"'a'b",
            b"a \"b",
            b"\"a\\\"",
            b"\"a\0\"",
        ] {
            assert_eq!(split_args(bad), None, "{bad:?}");
        }
        let mut out = Vec::new();
        assert_eq!(next_arg(b"x 'y", 1, &mut out), Err(UnbalancedQuotes));
    }

    #[test]
    fn next_arg_appends_and_resumes() {
        let line = b" ab \"c d\"  e";
        let mut out = Vec::new();
        let mut ends = Vec::new();
        let mut pos = 0;
        while let Ok(Some(next)) = next_arg(line, pos, &mut out) {
            ends.push(out.len());
            pos = next;
        }
        assert_eq!(out, b"abc de");
        assert_eq!(ends, [2, 5, 6]);
    }

    #[test]
    fn repr_round_trips() {
        for s in [
            &b"plain"[..],
            b"",
            b"sp ace",
            b"q\"uo\\te",
            b"\n\r\t\x07\x08\x00\xff\x7f",
        ] {
            let r = repr(s);
            assert_eq!(split_args(r.as_bytes()), Some(vec![s.to_vec()]), "{r}");
        }
        assert_eq!(repr(b"a\x01"), "\"a\\x01\"");
    }
}
