//! Reading the commands of one AOF file, as Redis 7.0's loadSingleAppendOnlyFile
//! parses them: `*<argc>` then, per argument, `$<len>`, the bytes and two more
//! bytes (the CRLF, never checked), with `#` annotation lines skipped between
//! commands.
//!
//! Redis reads the lines with fgets into a 1024-byte buffer, so a line is at most
//! 1023 bytes per read and a longer one is read on as the next "line"; numbers are
//! read with atoi/strtol, which stop at the first non-digit. Which of truncated
//! (loadable with aof-load-truncated) and malformed (never loadable) a damaged file
//! is follows from exactly that, so this reader reproduces it byte for byte.
//!
//! The caller deals with an RDB preamble ([`is_rdb_preamble`]) and hands over the
//! stream where the commands start, with that offset, so [`CommandReader::offset`]
//! speaks in file offsets: where a truncated file is cut back to.

use std::io::{BufRead, ErrorKind};

use super::manifest::c_strtol;
use crate::util::io_error_text;

/// AOF_ANNOTATION_LINE_MAX_LEN: the size of Redis's fgets buffer, so a line read
/// takes at most one byte less.
pub const ANNOTATION_LINE_MAX_LEN: usize = 1024;

/// The most allocated for an argument before its bytes arrive: a length is only a
/// claim, and "$999999999999" in a short file must cost nothing.
const ARG_PREALLOC_MAX: usize = 1 << 20;

/// The same bound for the argument list, whose count is also a claim.
const ARGV_PREALLOC_MAX: usize = 1024;

/// What the reader found next.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// A complete command's arguments.
    Command(Vec<Vec<u8>>),
    /// The file ended cleanly between commands.
    End,
}

/// Why reading stopped, as Redis's loader tells its error paths apart.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The file ends inside a command (Redis's uxeof): with aof-load-truncated the
    /// file is cut back to [`CommandReader::offset`] and loads.
    Truncated,
    /// Not the AOF format (fmterr): never loads.
    Format,
    /// The read failed (readerr before EOF), in strerror's words.
    Io(String),
}

/// Whether a file's first five bytes say it starts with an RDB image (a BASE file
/// in RDB format, or an old-style AOF with an RDB preamble).
pub fn is_rdb_preamble(first5: &[u8]) -> bool {
    first5.starts_with(b"REDIS")
}

/// Reads an AOF file's commands one at a time.
pub struct CommandReader<R> {
    inner: R,
    /// The file offset of the next unread byte.
    pos: u64,
    /// The file offset just after the last complete command (valid_up_to).
    valid: u64,
}

/// One fgets: the bytes read, and whether it stopped because the file ended (what
/// feof says afterwards).
struct Line {
    bytes: Vec<u8>,
    hit_eof: bool,
}

impl<R: BufRead> CommandReader<R> {
    /// A reader for commands that start at `start_offset` in the file.
    pub fn new(inner: R, start_offset: u64) -> Self {
        CommandReader {
            inner,
            pos: start_offset,
            valid: start_offset,
        }
    }

    /// The next command, skipping annotation lines. After an error the reader is
    /// not meant to be read further. Not an Iterator: the end and the errors are
    /// outcomes the loader tells apart, not a `None`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Next, ReadError> {
        loop {
            let Some(line) = self.fgets()? else {
                return Ok(Next::End);
            };
            if line.bytes.first() == Some(&b'#') {
                continue;
            }
            let argc = header_argc(&line)?;
            let argv = self.read_args(argc)?;
            self.valid = self.pos;
            return Ok(Next::Command(argv));
        }
    }

    /// The file offset just after the last complete command, or the start offset
    /// before any. Annotations do not move it, as they do not move Redis's
    /// valid_up_to: a truncated file is cut back to its last command.
    pub fn offset(&self) -> u64 {
        self.valid
    }

    /// The file offset of the next unread byte (ftello), annotations included.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Hands the stream back.
    pub fn into_inner(self) -> R {
        self.inner
    }

    /// Reads `argc` arguments, allocating for them only as they arrive.
    fn read_args(&mut self, argc: usize) -> Result<Vec<Vec<u8>>, ReadError> {
        let mut argv = Vec::with_capacity(argc.min(ARGV_PREALLOC_MAX));
        for _ in 0..argc {
            argv.push(self.read_arg()?);
        }
        Ok(argv)
    }

    /// One `$<len>` line, the bytes and the two bytes after them.
    fn read_arg(&mut self) -> Result<Vec<u8>, ReadError> {
        let line = self.fgets()?.ok_or(ReadError::Truncated)?;
        if line.bytes.first() != Some(&b'$') {
            return Err(ReadError::Format);
        }
        // Redis takes strtol's value as unsigned: a negative length would ask for
        // an impossible allocation and abort it. Here it is simply not the format.
        let len = u64::try_from(c_strtol(&line.bytes[1..])).map_err(|_| ReadError::Format)?;
        let arg = self.read_bytes(len)?.ok_or(ReadError::Truncated)?;
        // The CRLF: read, not checked, as Redis does.
        self.read_bytes(2)?.ok_or(ReadError::Truncated)?;
        Ok(arg)
    }

    /// fgets(buf, 1024, fp): through the next '\n', or 1023 bytes, or to the end
    /// of the file; None when the file is already at its end.
    fn fgets(&mut self) -> Result<Option<Line>, ReadError> {
        let max = ANNOTATION_LINE_MAX_LEN - 1;
        let mut bytes = Vec::new();
        let mut hit_eof = false;
        while bytes.len() < max {
            let buf = fill(&mut self.inner)?;
            if buf.is_empty() {
                hit_eof = true;
                break;
            }
            let room = (max - bytes.len()).min(buf.len());
            let newline = buf[..room].iter().position(|&c| c == b'\n');
            let take = newline.map_or(room, |i| i + 1);
            bytes.extend_from_slice(&buf[..take]);
            self.consume(take);
            if newline.is_some() {
                break;
            }
        }
        Ok((!bytes.is_empty()).then_some(Line { bytes, hit_eof }))
    }

    /// fread of exactly `n` bytes, growing the buffer as bytes arrive; None when
    /// the file ends first.
    fn read_bytes(&mut self, n: u64) -> Result<Option<Vec<u8>>, ReadError> {
        let want = usize::try_from(n).unwrap_or(usize::MAX);
        let mut out = Vec::with_capacity(want.min(ARG_PREALLOC_MAX));
        while out.len() < want {
            let buf = fill(&mut self.inner)?;
            if buf.is_empty() {
                return Ok(None);
            }
            let take = buf.len().min(want - out.len());
            out.extend_from_slice(&buf[..take]);
            self.consume(take);
        }
        Ok(Some(out))
    }

    /// Marks `n` buffered bytes read.
    fn consume(&mut self, n: usize) {
        self.inner.consume(n);
        self.pos += n as u64;
    }
}

/// The argument count of a command's first line, or why the line is not one.
fn header_argc(line: &Line) -> Result<usize, ReadError> {
    let b = &line.bytes;
    if b.first() != Some(&b'*') {
        return Err(ReadError::Format);
    }
    // buf[1] == '\0': a lone "*" at the end of the file is a truncation. A NUL
    // right after the '*' mid-file sends Redis to its read-error path with no
    // error to report (feof is false); it fails to load either way, and the bytes
    // are what is wrong, so it is a format error here.
    if b.get(1).copied().unwrap_or(0) == 0 {
        return Err(if line.hit_eof {
            ReadError::Truncated
        } else {
            ReadError::Format
        });
    }
    // atoi is glibc's (int)strtol: the low 32 bits of the saturated value.
    let argc = c_strtol(&b[1..]) as i32;
    usize::try_from(argc)
        .ok()
        .filter(|&n| n >= 1)
        .ok_or(ReadError::Format)
}

/// The buffered bytes, retrying interrupted reads; an empty slice at the end.
fn fill<R: BufRead>(inner: &mut R) -> Result<&[u8], ReadError> {
    loop {
        match inner.fill_buf() {
            Ok(_) => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadError::Io(io_error_text(&e))),
        }
    }
    // Buffered now: this returns at once.
    inner
        .fill_buf()
        .map_err(|e| ReadError::Io(io_error_text(&e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads everything: the commands, and how it ended.
    fn read_all(data: &[u8], start: u64) -> (Vec<Vec<Vec<u8>>>, Result<(), ReadError>, u64) {
        let mut r = CommandReader::new(data, start);
        let mut cmds = Vec::new();
        loop {
            match r.next() {
                Ok(Next::Command(c)) => cmds.push(c),
                Ok(Next::End) => return (cmds, Ok(()), r.offset()),
                Err(e) => return (cmds, Err(e), r.offset()),
            }
        }
    }

    fn args(a: &[&str]) -> Vec<Vec<u8>> {
        a.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    /// Where `needle` first starts in `hay`.
    fn find(hay: &[u8], needle: &[u8]) -> u64 {
        let at = hay.windows(needle.len()).position(|w| w == needle);
        at.expect("needle in the test data") as u64
    }

    const THREE: &[u8] = b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n\
                           *3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n\
                           *1\r\n$4\r\nPING\r\n";

    /// Where each command of THREE ends.
    fn three_ends() -> [usize; 3] {
        let first = b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n".len();
        let second = first + b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n".len();
        [first, second, THREE.len()]
    }

    #[test]
    fn commands_and_annotations() {
        let data = b"#TS:1700000000\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n#x\n\
                     *1\r\n$4\r\nPING\r\n#tail";
        let get_end = 100 + find(data, b"k\r\n") + 3;
        let ping_end = 100 + find(data, b"PING\r\n") + 6;
        let mut r = CommandReader::new(&data[..], 100);
        assert_eq!(r.offset(), 100);
        assert_eq!(r.next(), Ok(Next::Command(args(&["GET", "k"]))));
        assert_eq!(r.offset(), get_end);
        assert_eq!(r.next(), Ok(Next::Command(args(&["PING"]))));
        let end_of_ping = ping_end;
        assert_eq!(r.offset(), end_of_ping);
        // A last annotation without its newline is still skipped.
        assert_eq!(r.next(), Ok(Next::End));
        assert_eq!(r.offset(), end_of_ping);
        assert_eq!(r.position(), 100 + data.len() as u64);
    }

    #[test]
    fn every_cut_is_a_truncation_or_a_boundary() {
        let ends = three_ends();
        for cut in 0..=THREE.len() {
            let (cmds, end, offset) = read_all(&THREE[..cut], 7);
            let done = ends.iter().filter(|&&e| e <= cut).count();
            let last = if done == 0 { 0 } else { ends[done - 1] };
            assert_eq!(cmds.len(), done, "cut {cut}");
            assert_eq!(offset, 7 + last as u64, "cut {cut}");
            let expected = if cut == last {
                Ok(())
            } else {
                Err(ReadError::Truncated)
            };
            assert_eq!(end, expected, "cut {cut}");
        }
        let (cmds, _, _) = read_all(THREE, 0);
        assert_eq!(cmds[1], args(&["SET", "k", "hello"]));
    }

    #[test]
    fn cut_after_an_annotation_keeps_the_last_command() {
        let mut data = b"*1\r\n$4\r\nPING\r\n".to_vec();
        let ping = data.len() as u64;
        data.extend_from_slice(b"#TS:1\r\n*1\r\n$4\r\nPI");
        assert_eq!(
            read_all(&data, 0),
            (vec![args(&["PING"])], Err(ReadError::Truncated), ping)
        );
        // Cut inside the annotation: it is skipped, the file ends cleanly.
        assert_eq!(read_all(&data[..ping as usize + 3], 0).1, Ok(()));
    }

    #[test]
    fn format_errors() {
        for bad in [
            &b"+OK\r\n"[..],
            b"*0\r\n",
            b"*-1\r\n",
            b"*\r\n",
            b"\r\n",
            b"*1\r\n+x\r\n",
            b"*1\r\n$-1\r\n",
            b"*1\r\n\0$1\r\n",
            b"*\0\r\n",
            b"\0*1\r\n",
        ] {
            assert_eq!(read_all(bad, 0).1, Err(ReadError::Format), "{bad:?}");
        }
        // The same NUL at the very end is a truncation, as Redis's feof says.
        assert_eq!(read_all(b"*\0", 0).1, Err(ReadError::Truncated));
        assert_eq!(read_all(b"*", 0).1, Err(ReadError::Truncated));
    }

    #[test]
    fn numbers_read_like_atoi_and_strtol() {
        // atoi keeps the low 32 bits: 2^32 + 1 is 1.
        let (cmds, end, _) = read_all(b"*4294967297\r\n$1\r\nx\r\n", 0);
        assert_eq!((cmds, end), (vec![args(&["x"])], Ok(())));
        // Leading blanks, a sign, trailing junk; the CRLF is not checked.
        let (cmds, end, _) = read_all(b"* +2junk\r\n$ 1x\r\naXY$0\r\n\r\n", 0);
        assert_eq!((cmds, end), (vec![args(&["a", ""])], Ok(())));
    }

    #[test]
    fn long_lines_read_in_1023_byte_pieces() {
        let ping = b"*1\r\n$4\r\nPING\r\n";
        // 1023 bytes with the newline: one read, skipped.
        let mut fits = vec![b'#'; 1];
        fits.resize(1022, b'a');
        fits.push(b'\n');
        fits.extend_from_slice(ping);
        assert_eq!(read_all(&fits, 0).0, vec![args(&["PING"])]);
        // One more byte: the '\n' is read alone, as a line that is not a command.
        let mut over = fits.clone();
        over.insert(1, b'a');
        assert_eq!(read_all(&over, 0).1, Err(ReadError::Format));
        // A long "*1" line: the count is read, then the rest of its line is where
        // the first "$" should be.
        let mut star = b"*1".to_vec();
        star.resize(1023, b' ');
        star.extend_from_slice(b"\r\n$4\r\nPING\r\n");
        assert_eq!(read_all(&star, 0).1, Err(ReadError::Format));
    }

    #[test]
    fn huge_lengths_on_short_input() {
        for data in [
            &b"*1\r\n$999999999999\r\nabc"[..],
            b"*1\r\n$9223372036854775807\r\n",
            b"*1\r\n$99999999999999999999999\r\nab\r\n",
            b"*2147483647\r\n$1\r\na\r\n",
        ] {
            assert_eq!(read_all(data, 0).1, Err(ReadError::Truncated), "{data:?}");
        }
    }

    /// A stream that fails (or is interrupted) after its bytes.
    struct Failing {
        data: &'static [u8],
        fail: bool,
        interrupted_once: bool,
    }

    impl std::io::Read for Failing {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            if self.interrupted_once {
                self.interrupted_once = false;
                return Err(ErrorKind::Interrupted.into());
            }
            if !self.data.is_empty() {
                let n = self.data.len().min(out.len());
                out[..n].copy_from_slice(&self.data[..n]);
                self.data = &self.data[n..];
                return Ok(n);
            }
            if self.fail {
                return Err(std::io::Error::from_raw_os_error(libc::EIO));
            }
            Ok(0)
        }
    }

    #[test]
    fn io_errors_and_interruptions() {
        let failing = Failing {
            data: b"*1\r\n$4\r\nPI",
            fail: true,
            interrupted_once: false,
        };
        let mut r = CommandReader::new(std::io::BufReader::new(failing), 0);
        assert_eq!(
            r.next(),
            Err(ReadError::Io("Input/output error".to_string()))
        );
        let interrupted = Failing {
            data: b"*1\r\n$4\r\nPING\r\n",
            fail: false,
            interrupted_once: true,
        };
        let mut r = CommandReader::new(std::io::BufReader::new(interrupted), 0);
        assert_eq!(r.next(), Ok(Next::Command(args(&["PING"]))));
        assert_eq!(r.next(), Ok(Next::End));
    }

    #[test]
    fn rdb_preamble() {
        assert!(is_rdb_preamble(b"REDIS"));
        assert!(is_rdb_preamble(b"REDIS0010"));
        assert!(!is_rdb_preamble(b"REDI"));
        assert!(!is_rdb_preamble(b"*1\r\n$"));
    }
}
