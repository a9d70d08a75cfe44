//! The few bytes of RESP the load generator needs: an encoder for SET/GET that writes
//! straight into the connection's output buffer, and a parser that finds where one
//! complete reply ends without building it (the generator only needs its kind).

/// What a reply was, as far as the statistics care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    /// A null (`$-1`, `*-1`, RESP3 `_`): a GET miss.
    Null,
    /// An error reply (`-ERR ...`, RESP3 `!`).
    Error,
    /// Anything else: a GET hit, `+OK` for SET.
    Value,
}

/// The server sent something that is not RESP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "protocol error: {}", self.0)
    }
}

/// Deepest aggregate nesting accepted; replies to SET/GET never nest at all, this only
/// keeps a hostile or broken server from growing the stack without bound.
const MAX_DEPTH: usize = 64;

/// Looks for one complete reply at the start of `buf`. `Ok(None)`: more bytes needed.
/// `Ok(Some((len, kind)))`: the reply occupies `buf[..len]`.
pub fn skip_reply(buf: &[u8]) -> Result<Option<(usize, ReplyKind)>, ProtocolError> {
    let mut pos = 0;
    // Open aggregates: elements still expected, and whether it is an attribute.
    let mut pending: Vec<(u64, bool)> = Vec::new();
    let mut kind = ReplyKind::Value;
    loop {
        let Some((line_end, next)) = find_line(buf, pos) else {
            return Ok(None);
        };
        if line_end == pos {
            return Err(ProtocolError("empty reply line".into()));
        }
        let tag = buf[pos];
        let line = &buf[pos + 1..line_end];
        let top = pending.is_empty();
        pos = next;
        // Elements this item opens (aggregates) or 0 for a finished item.
        let mut children: u64 = 0;
        match tag {
            b'+' | b':' | b',' | b'#' | b'(' => {}
            b'-' if top => kind = ReplyKind::Error,
            b'-' => {}
            b'_' if top => kind = ReplyKind::Null,
            b'_' => {}
            b'$' | b'=' | b'!' => {
                let n = parse_len(line)?;
                if n < 0 {
                    if top {
                        kind = ReplyKind::Null;
                    }
                } else {
                    let end = pos
                        .checked_add(n as usize)
                        .and_then(|e| e.checked_add(2))
                        .ok_or_else(|| ProtocolError("bulk length overflow".into()))?;
                    if buf.len() < end {
                        return Ok(None);
                    }
                    if &buf[end - 2..end] != b"\r\n" {
                        return Err(ProtocolError("bulk payload not followed by CRLF".into()));
                    }
                    pos = end;
                    if top && tag == b'!' {
                        kind = ReplyKind::Error;
                    }
                }
            }
            b'*' | b'~' | b'>' | b'%' | b'|' => {
                let n = parse_len(line)?;
                if n < 0 {
                    if top {
                        kind = ReplyKind::Null;
                    }
                } else {
                    // Maps and attributes hold key/value pairs.
                    let per = if tag == b'%' || tag == b'|' { 2 } else { 1 };
                    children = (n as u64).saturating_mul(per);
                }
            }
            other => {
                return Err(ProtocolError(format!(
                    "unexpected reply type byte 0x{other:02x}"
                )))
            }
        }
        // An attribute (`|`) precedes the item it annotates: it is no element of its
        // parent, and once it is complete that item still has to follow.
        let is_attr = tag == b'|';
        if !is_attr {
            if let Some(last) = pending.last_mut() {
                last.0 -= 1;
            }
        }
        if children > 0 {
            if pending.len() >= MAX_DEPTH {
                return Err(ProtocolError("reply nested too deeply".into()));
            }
            pending.push((children, is_attr));
        }
        let mut closed_attr = false;
        while let Some(&(0, attr)) = pending.last() {
            pending.pop();
            closed_attr = attr;
        }
        if pending.is_empty() && !is_attr && !closed_attr {
            return Ok(Some((pos, kind)));
        }
    }
}

/// Finds the CRLF ending the line that starts at `from`: (index of CR, index after LF).
fn find_line(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    let rest = buf.get(from..)?;
    let cr = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((from + cr, from + cr + 2))
}

fn parse_len(line: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|&n| n >= -1)
        .ok_or_else(|| {
            ProtocolError(format!(
                "bad length line {:?}",
                String::from_utf8_lossy(line)
            ))
        })
}

/// Appends `*<argc>\r\n`.
pub fn array_header(out: &mut Vec<u8>, argc: usize) {
    out.push(b'*');
    push_decimal(out, argc as u64);
    out.extend_from_slice(b"\r\n");
}

/// Appends one bulk-string argument.
pub fn bulk(out: &mut Vec<u8>, arg: &[u8]) {
    out.push(b'$');
    push_decimal(out, arg.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(arg);
    out.extend_from_slice(b"\r\n");
}

/// Appends a bulk argument made of `prefix` followed by the decimal `id`, without
/// building the key in a temporary buffer first.
pub fn bulk_key(out: &mut Vec<u8>, prefix: &[u8], id: u64) {
    let mut digits = [0u8; 20];
    let d = decimal(&mut digits, id);
    out.push(b'$');
    push_decimal(out, (prefix.len() + d.len()) as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(prefix);
    out.extend_from_slice(d);
    out.extend_from_slice(b"\r\n");
}

fn push_decimal(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    out.extend_from_slice(decimal(&mut digits, n));
}

fn decimal(buf: &mut [u8; 20], mut n: u64) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(s: &[u8]) -> (usize, ReplyKind) {
        skip_reply(s).expect("valid").expect("complete")
    }

    #[test]
    fn scalars() {
        assert_eq!(whole(b"+OK\r\n"), (5, ReplyKind::Value));
        assert_eq!(whole(b"-ERR no\r\nrest"), (9, ReplyKind::Error));
        assert_eq!(whole(b":42\r\n"), (5, ReplyKind::Value));
        assert_eq!(whole(b"$-1\r\n"), (5, ReplyKind::Null));
        assert_eq!(whole(b"_\r\n"), (3, ReplyKind::Null));
        assert_eq!(whole(b"$3\r\nabc\r\n+OK\r\n"), (9, ReplyKind::Value));
        assert_eq!(whole(b"$0\r\n\r\n"), (6, ReplyKind::Value));
        assert_eq!(whole(b",1.5\r\n"), (6, ReplyKind::Value));
        assert_eq!(whole(b"!3\r\nERR\r\n"), (9, ReplyKind::Error));
    }

    #[test]
    fn bulk_payload_may_contain_crlf() {
        assert_eq!(whole(b"$4\r\n\r\n\r\n\r\n"), (10, ReplyKind::Value));
    }

    #[test]
    fn aggregates() {
        let r = b"*3\r\n$1\r\na\r\n*2\r\n:1\r\n:2\r\n$-1\r\n:9\r\n";
        assert_eq!(whole(r), (r.len() - 4, ReplyKind::Value));
        assert_eq!(whole(b"*0\r\n"), (4, ReplyKind::Value));
        assert_eq!(whole(b"*-1\r\n"), (5, ReplyKind::Null));
        let m = b"%2\r\n+a\r\n:1\r\n+b\r\n*1\r\n:2\r\n";
        assert_eq!(whole(m), (m.len(), ReplyKind::Value));
        // A nested error does not make the whole reply an error (EXEC results).
        let e = b"*2\r\n-ERR x\r\n+OK\r\n";
        assert_eq!(whole(e), (e.len(), ReplyKind::Value));
    }

    #[test]
    fn attribute_precedes_reply() {
        let a = b"|1\r\n+k\r\n+v\r\n$2\r\nhi\r\n";
        assert_eq!(whole(a), (a.len(), ReplyKind::Value));
        let nested = b"*1\r\n|1\r\n+k\r\n+v\r\n:1\r\n";
        assert_eq!(whole(nested), (nested.len(), ReplyKind::Value));
    }

    #[test]
    fn every_prefix_is_incomplete() {
        let r = b"*3\r\n$5\r\nhello\r\n%1\r\n+a\r\n$-1\r\n-ERR e\r\n";
        for cut in 0..r.len() {
            assert_eq!(skip_reply(&r[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(whole(r), (r.len(), ReplyKind::Value));
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(skip_reply(b"hello\r\n").is_err());
        assert!(skip_reply(b"\r\n").is_err());
        assert!(skip_reply(b"$x\r\n").is_err());
        assert!(skip_reply(b"$-5\r\n").is_err());
        assert!(skip_reply(b"$2\r\nabcd\r\n").is_err());
        let deep = b"*1\r\n".repeat(100);
        assert!(skip_reply(&deep).is_err());
    }

    #[test]
    fn encoder() {
        let mut out = Vec::new();
        array_header(&mut out, 3);
        bulk(&mut out, b"SET");
        bulk_key(&mut out, b"key:", 1234);
        bulk(&mut out, b"");
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$8\r\nkey:1234\r\n$0\r\n\r\n");
        out.clear();
        bulk_key(&mut out, b"", 0);
        assert_eq!(out, b"$1\r\n0\r\n");
        out.clear();
        bulk_key(&mut out, b"k", u64::MAX);
        assert_eq!(out, b"$21\r\nk18446744073709551615\r\n");
    }
}
