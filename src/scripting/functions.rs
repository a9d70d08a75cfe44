//! The function-library registry (FUNCTION LOAD / DELETE / FLUSH / LIST / DUMP /
//! RESTORE), shared by every shard's VM. Each VM compiles the libraries itself and
//! reloads them when `GENERATION` moves.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::lock;
use crate::storage::rdb;

#[derive(Debug, Clone)]
pub struct FunctionInfo {
    pub name: String,
    pub description: Option<String>,
    pub flags: u32,
}

#[derive(Debug, Clone)]
pub struct Library {
    pub name: String,
    pub code: Vec<u8>,
    pub functions: Vec<FunctionInfo>,
}

static LIBRARIES: Mutex<BTreeMap<String, Arc<Library>>> = Mutex::new(BTreeMap::new());
/// Bumped on every change to the registry.
pub static GENERATION: AtomicU64 = AtomicU64::new(1);

pub fn snapshot() -> (u64, Vec<Arc<Library>>) {
    let libs = lock(&LIBRARIES);
    (
        GENERATION.load(Ordering::SeqCst),
        libs.values().cloned().collect(),
    )
}

/// The flags of the function called `name` (case-insensitive), if one is loaded.
pub fn flags_of(name: &[u8]) -> Option<u32> {
    let libs = lock(&LIBRARIES);
    libs.values()
        .flat_map(|l| l.functions.iter())
        .find(|f| f.name.as_bytes().eq_ignore_ascii_case(name))
        .map(|f| f.flags)
}

pub fn counts() -> (usize, usize) {
    let libs = lock(&LIBRARIES);
    (libs.len(), libs.values().map(|l| l.functions.len()).sum())
}

pub fn delete(name: &str) -> bool {
    let removed = lock(&LIBRARIES).remove(name).is_some();
    if removed {
        GENERATION.fetch_add(1, Ordering::SeqCst);
    }
    removed
}

pub fn flush() {
    lock(&LIBRARIES).clear();
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// How FUNCTION RESTORE treats libraries that already exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Append,
    Replace,
    Flush,
}

/// Adds compiled libraries atomically: all or none. `replace` lets a library replace
/// one of the same name (FUNCTION LOAD REPLACE, RESTORE REPLACE).
pub fn install(new: Vec<Library>, policy: Policy, restore: bool) -> Result<(), String> {
    let mut libs = lock(&LIBRARIES);
    let mut next = if policy == Policy::Flush {
        BTreeMap::new()
    } else {
        libs.clone()
    };
    for lib in &new {
        if next.contains_key(&lib.name) {
            if policy == Policy::Append {
                return Err(if restore {
                    format!("ERR Library {} already exists", lib.name)
                } else {
                    format!("ERR Library '{}' already exists", lib.name)
                });
            }
            next.remove(&lib.name);
        }
    }
    for lib in new {
        for f in &lib.functions {
            let taken = next.values().any(|l| {
                l.functions
                    .iter()
                    .any(|g| g.name.eq_ignore_ascii_case(&f.name))
            });
            if taken {
                return Err(format!("ERR Function {} already exists", f.name));
            }
        }
        next.insert(lib.name.clone(), Arc::new(lib));
    }
    *libs = next;
    GENERATION.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// `#!<engine> name=<lib> ...`: the library name, or Redis's error.
pub fn parse_metadata(code: &[u8]) -> Result<(String, usize), String> {
    if !code.starts_with(b"#!") {
        return Err("ERR Missing library metadata".into());
    }
    let end = code.iter().position(|&c| c == b'\n').unwrap_or(code.len());
    let line = String::from_utf8_lossy(&code[2..end]).into_owned();
    // The engine is everything up to the first space ("#! name=x" names engine '').
    let (engine, params) = line.split_once(' ').unwrap_or((&line, ""));
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("ERR Engine '{engine}' not found"));
    }
    let mut name = None;
    for p in split_shebang_words(params).iter() {
        if let Some(v) = p.strip_prefix("name=") {
            if name.is_some() {
                return Err(
                    "ERR Invalid metadata value, name argument was given multiple times".into(),
                );
            }
            name = Some(v.to_string());
        } else {
            return Err(format!("ERR Invalid metadata value given: {p}"));
        }
    }
    let Some(name) = name else {
        return Err("ERR Library name was not given".into());
    };
    if !valid_name(&name) {
        return Err("ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".into());
    }
    Ok((name, end))
}

pub fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Splits a shebang line into words, honouring double quotes. Not Redis's
/// `sdssplitargs` (`util::split_args`), which Redis uses here: a quote toggles
/// anywhere, there are no escapes, an unclosed quote is accepted and any Unicode
/// space separates. Kept apart so that moving the C-string helpers into
/// `util::cstr` changed no behaviour; adopting `split_args` here would change
/// what odd shebangs mean, and wants its own change and tests.
pub fn split_shebang_words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                in_word = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    out
}

/// The RDB opcodes of a function library: FUNCTION2 (Redis 7.0: the code, as an RDB
/// string) and FUNCTION (7.0's release candidates: name, engine, an optional
/// description and the body, which Redis still loads).
const OPCODE_FUNCTION2: u8 = 245;
const OPCODE_FUNCTION: u8 = 246;

/// FUNCTION DUMP, as Redis's `functionDumpCommand`: per library FUNCTION2 and its
/// code as an RDB string (LZF-compressed when that pays), then the RDB version and
/// the CRC64 of all before it, like a key's DUMP. Libraries go in name order (Redis's
/// follow its dict), which RESTORE does not care about.
pub fn dump() -> Vec<u8> {
    let libs = lock(&LIBRARIES);
    dump_codes(libs.values().map(|l| &l.code[..]))
}

fn dump_codes<'a>(codes: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for code in codes {
        out.push(OPCODE_FUNCTION2);
        rdb::write_rdb_string(&mut out, code);
    }
    out.extend_from_slice(&rdb::RDB_VERSION.to_le_bytes());
    let crc = rdb::crc64(0, &out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// A FUNCTION RESTORE payload as read: the library codes before the first bad
/// record, and that record's error. Redis compiles each library as soon as it has
/// read it, so a library that fails to compile is reported before a bad record
/// after it: `compile_restored` keeps that order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Restored {
    pub codes: Vec<Vec<u8>>,
    pub error: Option<String>,
}

/// Reads a FUNCTION DUMP payload as `functionRestoreCommand` does. Err when the
/// footer is wrong (nothing is read then).
pub fn parse_dump(p: &[u8]) -> Result<Restored, String> {
    let bad = || rdb::RestoreError::BadPayload.message().to_string();
    let Some(footer_at) = p.len().checked_sub(10) else {
        return Err(bad());
    };
    let version = u16::from_le_bytes([p[footer_at], p[footer_at + 1]]);
    if version > rdb::RDB_VERSION {
        return Err(bad());
    }
    let crc = rdb::crc64(0, &p[..footer_at + 2]);
    if crc.to_le_bytes() != p[footer_at + 2..] {
        return Err(bad());
    }
    // Like Redis, records are read from the whole payload while more than the
    // footer's 10 bytes remain: a string may run into the footer, not past it.
    let mut out = Restored::default();
    let mut pos = 0;
    while p.len() - pos > 10 {
        let ty = p[pos];
        pos += 1;
        let read = match ty {
            OPCODE_FUNCTION2 => read_string(p, &mut pos, "library payload"),
            OPCODE_FUNCTION => read_old_format(p, &mut pos),
            _ => Err("given type is not a function".to_string()),
        };
        match read {
            Ok(code) => out.codes.push(code),
            Err(e) => {
                out.error = Some(format!("ERR {e}"));
                break;
            }
        }
    }
    Ok(out)
}

/// An RDB string at `p[*pos..]`; on failure Redis's "Failed loading <what>".
fn read_string(p: &[u8], pos: &mut usize, what: &str) -> Result<Vec<u8>, String> {
    let (s, used) =
        rdb::read_rdb_string(&p[*pos..]).ok_or_else(|| format!("Failed loading {what}"))?;
    *pos += used;
    Ok(s)
}

/// A FUNCTION record of Redis 7.0's release candidates, turned into the code
/// FUNCTION2 carries as `rdbFunctionLoad` does (the description is dropped).
fn read_old_format(p: &[u8], pos: &mut usize) -> Result<Vec<u8>, String> {
    let name = read_string(p, pos, "library name")?;
    let engine = read_string(p, pos, "engine name")?;
    let (has_desc, used) = rdb::read_rdb_len(&p[*pos..])
        .ok_or_else(|| "Failed loading library description indicator".to_string())?;
    *pos += used;
    if has_desc != 0 {
        read_string(p, pos, "library description")?;
    }
    let blob = read_string(p, pos, "library blob")?;
    let mut code = b"#!".to_vec();
    code.extend_from_slice(&engine);
    code.extend_from_slice(b" name=");
    code.extend_from_slice(&name);
    code.push(b'\n');
    code.extend_from_slice(&blob);
    Ok(code)
}

/// Compiles a restored payload's libraries in order, failing as Redis's
/// `functionsCreateWithLibraryCtx` does on the first that will not load: bad
/// metadata, a library name seen earlier in the payload, a compile or registration
/// error, a function name seen earlier in the payload. Then the payload's own
/// error, if any.
pub fn compile_restored(
    payload: &Restored,
    mut compile: impl FnMut(&[u8]) -> Result<Library, String>,
) -> Result<Vec<Library>, String> {
    let mut libs: Vec<Library> = Vec::new();
    for code in &payload.codes {
        let (name, _) = parse_metadata(code)?;
        if libs.iter().any(|l| l.name == name) {
            return Err(format!("ERR Library '{name}' already exists"));
        }
        let lib = compile(code)?;
        for f in &lib.functions {
            let seen = libs
                .iter()
                .flat_map(|l| l.functions.iter())
                .any(|g| g.name.eq_ignore_ascii_case(&f.name));
            if seen {
                return Err(format!("ERR Function {} already exists", f.name));
            }
        }
        libs.push(lib);
    }
    match &payload.error {
        Some(e) => Err(e.clone()),
        None => Ok(libs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata() {
        assert_eq!(
            parse_metadata(b"#!lua name=test\nreturn 1").map(|r| r.0),
            Ok("test".to_string())
        );
        assert_eq!(
            parse_metadata(b"#!lua name=\"foo\"\n").map(|r| r.0),
            Ok("foo".to_string())
        );
        assert_eq!(
            parse_metadata(b"#! name=test\n"),
            Err("ERR Engine '' not found".to_string())
        );
        assert_eq!(
            parse_metadata(b"#!lua name=test foo=bar\n"),
            Err("ERR Invalid metadata value given: foo=bar".to_string())
        );
        assert_eq!(
            parse_metadata(b"#!lua\n"),
            Err("ERR Library name was not given".to_string())
        );
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// `body` with an RDB version and a correct CRC64, as a payload.
    fn with_footer(body: &[u8], version: u16) -> Vec<u8> {
        let mut p = body.to_vec();
        p.extend_from_slice(&version.to_le_bytes());
        let crc = rdb::crc64(0, &p);
        p.extend_from_slice(&crc.to_le_bytes());
        p
    }

    const SHORT: &[u8] =
        b"#!lua name=short\nredis.register_function('f1', function() return 1 end)";
    const LONG: &[u8] = b"#!lua name=long\n\
        redis.register_function('fa', function() return 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' end)\n\
        redis.register_function('fb', function() return 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' end)\n";
    // FUNCTION DUMP from redis-server 7.0.15 (default config) holding only SHORT
    // (71 bytes LZF cannot shrink by 4: stored verbatim) or only LONG (LZF).
    const SHORT_DUMP: &str = concat!(
        "f5404723216c7561206e616d653d73686f72740a72656469732e72656769737465725f66756e63",
        "74696f6e28276631272c2066756e6374696f6e28292072657475726e203120656e6429",
        "0a00016c0ca8ca33f7b6",
    );
    const LONG_DUMP: &str = concat!(
        "f5c3405440c01f23216c7561206e616d653d6c6f6e670a72656469732e72656769737465725f66",
        "0d756e6374696f6e28276661272c20e0000e0a292072657475726e202761e01600052720656e64",
        "29e012570062e0325701290a0a003cbafa5d3b76274d",
    );

    #[test]
    fn snapshots_write_libraries_as_function_dump_does() {
        let file = rdb::file::assemble(&[], &[LONG], None);
        let dumped = unhex(LONG_DUMP);
        let record = &dumped[..dumped.len() - 10];
        // The record, then EOF (0xFF) and the CRC64.
        assert_eq!(&file[file.len() - 9 - record.len()..file.len() - 9], record);
    }

    fn restored(codes: &[&[u8]], error: Option<&str>) -> Restored {
        Restored {
            codes: codes.iter().map(|c| c.to_vec()).collect(),
            error: error.map(str::to_string),
        }
    }

    #[test]
    fn dump_is_byte_identical_to_redis() {
        assert_eq!(dump_codes([SHORT].into_iter()), unhex(SHORT_DUMP));
        assert_eq!(dump_codes([LONG].into_iter()), unhex(LONG_DUMP));
    }

    #[test]
    fn redis_payloads_restore() {
        assert_eq!(parse_dump(&unhex(SHORT_DUMP)), Ok(restored(&[SHORT], None)));
        // LZF-compressed code.
        assert_eq!(parse_dump(&unhex(LONG_DUMP)), Ok(restored(&[LONG], None)));
    }

    #[test]
    fn round_trip() {
        for codes in [vec![], vec![SHORT], vec![LONG, SHORT], vec![&b"12"[..]]] {
            let p = dump_codes(codes.iter().copied());
            assert_eq!(parse_dump(&p), Ok(restored(&codes, None)));
        }
        // An integer-encoded string comes back as its text.
        let p = with_footer(&[OPCODE_FUNCTION2, 0xC0, 0x7B], 10);
        assert_eq!(parse_dump(&p), Ok(restored(&[b"123"], None)));
    }

    #[test]
    fn bad_footer_is_refused() {
        let wrong = Err("ERR DUMP payload version or checksum are wrong".to_string());
        let mut p = unhex(SHORT_DUMP);
        let last = p.len() - 1;
        p[last] ^= 1;
        assert_eq!(parse_dump(&p), wrong);
        let mut p = unhex(SHORT_DUMP);
        p[3] ^= 1;
        assert_eq!(parse_dump(&p), wrong);
        // A newer RDB version, even with a correct checksum.
        let body = &unhex(SHORT_DUMP)[..unhex(SHORT_DUMP).len() - 10];
        assert_eq!(parse_dump(&with_footer(body, 11)), wrong);
        assert_eq!(
            parse_dump(&with_footer(body, 9)),
            Ok(restored(&[SHORT], None))
        );
        assert_eq!(parse_dump(&unhex(SHORT_DUMP)[..9]), wrong);
        assert_eq!(parse_dump(b""), wrong);
    }

    #[test]
    fn bad_records_are_refused() {
        // A key's DUMP (a string) is not a function; records before it are kept.
        let not_fn = Some("ERR given type is not a function");
        assert_eq!(
            parse_dump(&with_footer(b"\x00\x05hello", 10)),
            Ok(restored(&[], not_fn))
        );
        let mut body = dump_codes([SHORT].into_iter());
        body.truncate(body.len() - 10);
        body.extend_from_slice(b"\x00\x05hello");
        assert_eq!(
            parse_dump(&with_footer(&body, 10)),
            Ok(restored(&[SHORT], not_fn))
        );
        // A string longer than the payload; an unknown string encoding; bad LZF.
        let failed = Some("ERR Failed loading library payload");
        for body in [
            &b"\xf5\x7f\xff"[..],
            b"\xf5\xc4\x00",
            b"\xf5\xc3\x03\x18\x00abc",
        ] {
            assert_eq!(
                parse_dump(&with_footer(body, 10)),
                Ok(restored(&[], failed)),
                "{body:?}"
            );
        }
        // As in Redis, a string may take bytes of the footer: 10 bytes of footer
        // make "\x0a\x00<crc>" the code, and reading stops there.
        let p = with_footer(b"\xf5\x0a", 10);
        assert_eq!(parse_dump(&p), Ok(restored(&[&p[2..]], None)));
    }

    #[test]
    fn release_candidate_format() {
        let p = with_footer(b"\xf6\x03lib\x03LUA\x01\x04desc\x0areturn 1 2", 10);
        assert_eq!(
            parse_dump(&p),
            Ok(restored(&[b"#!LUA name=lib\nreturn 1 2"], None))
        );
        let p = with_footer(b"\xf6\x03lib\x03LUA\x00\x01x", 10);
        assert_eq!(parse_dump(&p), Ok(restored(&[b"#!LUA name=lib\nx"], None)));
        let p = with_footer(b"\xf6\x03lib\x03LUA\x01\x20", 10);
        assert_eq!(
            parse_dump(&p),
            Ok(restored(
                &[],
                Some("ERR Failed loading library description")
            ))
        );
    }

    fn fake_compile(code: &[u8]) -> Result<Library, String> {
        let (name, skip) = parse_metadata(code)?;
        let body = String::from_utf8_lossy(&code[skip..]).into_owned();
        if body.contains("syntax error") {
            return Err("ERR Error compiling function: bad".into());
        }
        let functions = body
            .split_whitespace()
            .map(|f| FunctionInfo {
                name: f.to_string(),
                description: None,
                flags: 0,
            })
            .collect();
        Ok(Library {
            name,
            code: code.to_vec(),
            functions,
        })
    }

    #[test]
    fn restored_libraries_fail_in_payload_order() {
        let names = |r: Result<Vec<Library>, String>| {
            r.map(|libs| libs.into_iter().map(|l| l.name).collect::<Vec<_>>())
        };
        let ok = restored(&[b"#!lua name=a\nf1", b"#!lua name=b\nf2 f3"], None);
        assert_eq!(
            names(compile_restored(&ok, fake_compile)),
            Ok(vec!["a".to_string(), "b".to_string()])
        );
        // A library that does not compile is reported before a bad record after it.
        let both = restored(
            &[b"#!lua name=a\nsyntax error"],
            Some("ERR given type is not a function"),
        );
        assert_eq!(
            names(compile_restored(&both, fake_compile)),
            Err("ERR Error compiling function: bad".to_string())
        );
        let tail = restored(
            &[b"#!lua name=a\nf1"],
            Some("ERR given type is not a function"),
        );
        assert_eq!(
            names(compile_restored(&tail, fake_compile)),
            Err("ERR given type is not a function".to_string())
        );
        // The same library twice (checked before compiling), the same function twice.
        let dup_lib = restored(&[b"#!lua name=a\nf1", b"#!lua name=a\nsyntax error"], None);
        assert_eq!(
            names(compile_restored(&dup_lib, fake_compile)),
            Err("ERR Library 'a' already exists".to_string())
        );
        let dup_fn = restored(&[b"#!lua name=a\nf1", b"#!lua name=b\nF1"], None);
        assert_eq!(
            names(compile_restored(&dup_fn, fake_compile)),
            Err("ERR Function F1 already exists".to_string())
        );
        assert_eq!(
            names(compile_restored(&restored(&[b"123"], None), fake_compile)),
            Err("ERR Missing library metadata".to_string())
        );
    }
}
