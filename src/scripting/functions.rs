//! The function-library registry (FUNCTION LOAD / DELETE / FLUSH / LIST / DUMP /
//! RESTORE), shared by every shard's VM. Each VM compiles the libraries itself and
//! reloads them when `GENERATION` moves.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::lock;

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

/// The RDB opcode Redis uses for a function library in DUMP payloads.
const OPCODE_FUNCTION: u8 = 245;
const RDB_VERSION: u16 = 10;

/// FUNCTION DUMP: every library's code, with RDB version and CRC64 trailer.
pub fn dump() -> Vec<u8> {
    let libs = lock(&LIBRARIES);
    let mut out = Vec::new();
    for lib in libs.values() {
        out.push(OPCODE_FUNCTION);
        out.extend_from_slice(&(lib.code.len() as u32).to_le_bytes());
        out.extend_from_slice(&lib.code);
    }
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crate::storage::rdb::crc64(0, &out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The library codes of a FUNCTION DUMP payload.
pub fn parse_dump(p: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let bad = || "ERR payload version or checksum are wrong".to_string();
    if p.len() < 10 {
        return Err(bad());
    }
    let (body, crc) = p.split_at(p.len() - 8);
    let mut c = [0u8; 8];
    c.copy_from_slice(crc);
    if crate::storage::rdb::crc64(0, body) != u64::from_le_bytes(c) {
        return Err(bad());
    }
    let (mut rest, ver) = body.split_at(body.len() - 2);
    if u16::from_le_bytes([ver[0], ver[1]]) > RDB_VERSION {
        return Err(bad());
    }
    let mut codes = Vec::new();
    while !rest.is_empty() {
        if rest[0] != OPCODE_FUNCTION {
            return Err("ERR given type is not a function".into());
        }
        let Some((code, used)) = read_string(&rest[1..]) else {
            return Err(bad());
        };
        codes.push(code);
        rest = &rest[1 + used..];
    }
    Ok(codes)
}

/// A u32-length-prefixed string: (bytes, bytes consumed).
fn read_string(b: &[u8]) -> Option<(Vec<u8>, usize)> {
    let l = b.get(..4)?;
    let len = u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize;
    let s = b.get(4..4 + len)?;
    Some((s.to_vec(), 4 + len))
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
}
