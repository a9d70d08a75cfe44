//! The `struct` library (Roberto Ierusalimschy's struct 0.2, as Redis ships it):
//! pack/unpack binary records described by a format string (`<`/`>` endianness,
//! `!n` alignment, `b B h H l L T i[n] I[n]` integers of up to 32 bytes, `f d`
//! floats, `s` zero-terminated and `c[n]` fixed strings, `x` padding), and
//! `struct.size`. Sizes, alignment, and error texts follow Redis's copy, including
//! its integer arithmetic on 64 bits for integers wider than 8 bytes.

use mlua::{Lua, MultiValue, Result, Table, Value};

use super::bit::number;
use super::vm::arg_type;

/// Redis's MAXINTSIZE.
const MAX_INT_SIZE: usize = 32;
/// The alignment `!` alone sets (the platform's largest, 8 on 64-bit).
const MAX_ALIGN: usize = 8;
/// Lua 5.1 gives a C function at most LUAI_MAXCSTACK (8000) stack slots; struct
/// checks for two more before each result ("too many results"). Its three
/// arguments take three of them.
const MAX_RESULTS: usize = 8000 - 3;
/// Each string result holds an mlua reference until it is returned, and mlua's
/// reference stack is bounded by the same 8000 slots, shared with the VM's own
/// references; past this many strings the call fails the same way instead of
/// exhausting it.
const MAX_STRING_RESULTS: usize = 6000;

fn err<T>(msg: String) -> Result<T> {
    Err(mlua::Error::RuntimeError(msg))
}

struct Header {
    little: bool,
    align: usize,
}

/// The format being read: position and the current header.
struct Fmt<'a> {
    f: &'a [u8],
    i: usize,
}

impl Fmt<'_> {
    fn next(&mut self) -> Option<u8> {
        let c = *self.f.get(self.i)?;
        self.i += 1;
        Some(c)
    }

    /// Digits at the cursor, or `default` when there are none.
    fn num(&mut self, default: usize) -> Result<usize> {
        let mut a: usize = 0;
        let mut any = false;
        while let Some(&c) = self.f.get(self.i).filter(|c| c.is_ascii_digit()) {
            let d = (c - b'0') as usize;
            // Redis's getnum refuses what would overflow a C int.
            if a > i32::MAX as usize / 10 || a * 10 > i32::MAX as usize - d {
                return err("integral size overflow".into());
            }
            a = a * 10 + d;
            self.i += 1;
            any = true;
        }
        Ok(if any { a } else { default })
    }
}

/// optsize: the size of option `opt` (0 for those without one).
fn opt_size(opt: u8, fmt: &mut Fmt) -> Result<usize> {
    Ok(match opt {
        b'b' | b'B' | b'x' => 1,
        b'h' | b'H' => 2,
        b'l' | b'L' | b'T' | b'd' => 8,
        b'f' => 4,
        b'c' => fmt.num(1)?,
        b'i' | b'I' => {
            let sz = fmt.num(4)?;
            if sz > MAX_INT_SIZE {
                return err(format!(
                    "integral size {sz} is larger than limit of {MAX_INT_SIZE}"
                ));
            }
            sz
        }
        _ => 0,
    })
}

/// gettoalign: the padding before an item of `size` at `len`.
fn to_align(len: u64, h: &Header, opt: u8, size: usize) -> u64 {
    if size == 0 || opt == b'c' || h.align == 0 {
        return 0;
    }
    let size = size.min(h.align) as u64;
    size.wrapping_sub(len & (size - 1)) & (size - 1)
}

/// controloptions: endianness, alignment, blanks; anything else is refused.
fn control(opt: u8, fmt: &mut Fmt, h: &mut Header, fname: &str) -> Result<()> {
    match opt {
        b' ' => {}
        b'>' => h.little = false,
        b'<' => h.little = true,
        b'!' => {
            let a = fmt.num(MAX_ALIGN)?;
            if a & a.wrapping_sub(1) != 0 {
                return err(format!("alignment {a} is not a power of 2"));
            }
            h.align = a;
        }
        other => {
            return err(format!(
                "bad argument #1 to '{fname}' (invalid format option '{}')",
                other as char
            ))
        }
    }
    Ok(())
}

fn header() -> Header {
    Header {
        little: cfg!(target_endian = "little"),
        align: 1,
    }
}

/// A string argument (numbers as Lua prints them), 1-based `arg` in errors.
fn check_string(args: &MultiValue, arg: usize, fname: &str) -> Result<Vec<u8>> {
    let nil_mark = fname == "pack";
    match args.get(arg - 1) {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(v @ (Value::Integer(_) | Value::Number(_))) => {
            Ok(super::format_g(number(v).unwrap_or(0.0), 14).into_bytes())
        }
        other => err(format!(
            "bad argument #{arg} to '{fname}' (string expected, got {})",
            got(args, arg, other, nil_mark)
        )),
    }
}

/// The type an argument check names. Redis's pack pushes a nil right after its
/// arguments, so the first missing one is "nil" there.
fn got(args: &MultiValue, arg: usize, v: Option<&Value>, nil_mark: bool) -> &'static str {
    match v {
        Some(v) => arg_type(v),
        None if nil_mark && arg == args.len() + 1 => "nil",
        None => "no value",
    }
}

fn check_number(args: &MultiValue, arg: usize) -> Result<f64> {
    let v = args.get(arg - 1);
    match v.and_then(number) {
        Some(n) => Ok(n),
        None => err(format!(
            "bad argument #{arg} to 'pack' (number expected, got {})",
            got(args, arg, v, true)
        )),
    }
}

/// putinteger: the value as C's (unsigned long long) cast of the double, its bytes
/// in order; sizes past 8 are zero beyond the eighth byte.
fn put_int(out: &mut Vec<u8>, n: f64, size: usize, little: bool) {
    let mut value: u64 = if n < 0.0 { n as i64 as u64 } else { n as u64 };
    let mut buf = [0u8; MAX_INT_SIZE];
    let buf = &mut buf[..size];
    for k in 0..size {
        let at = if little { k } else { size - 1 - k };
        buf[at] = (value & 0xff) as u8;
        value = value.checked_shr(8).unwrap_or(0);
    }
    out.extend_from_slice(buf);
}

/// getinteger: the bytes folded into 64 bits (the most significant ones of a wider
/// integer fall out), then sign-extended with C's shift (the count taken mod 64).
fn get_int(b: &[u8], little: bool, signed: bool) -> f64 {
    let size = b.len();
    let mut l: u64 = 0;
    for k in 0..size {
        let byte = if little { b[size - 1 - k] } else { b[k] };
        l = (l << 8) | byte as u64;
    }
    if !signed {
        return l as f64;
    }
    let mask = (!0u64).wrapping_shl((size * 8).wrapping_sub(1) as u32);
    if l & mask != 0 {
        l |= mask;
    }
    l as i64 as f64
}

fn pack(args: &MultiValue) -> Result<Vec<u8>> {
    let fbytes = check_string(args, 1, "pack")?;
    let mut fmt = Fmt { f: &fbytes, i: 0 };
    let mut h = header();
    let mut arg = 2;
    let mut out = Vec::new();
    let mut total: u64 = 0;
    while let Some(opt) = fmt.next() {
        let mut size = opt_size(opt, &mut fmt)?;
        let pad = to_align(total, &h, opt, size);
        total = total.wrapping_add(pad);
        out.resize(out.len() + pad as usize, 0);
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let n = check_number(args, arg)?;
                arg += 1;
                put_int(&mut out, n, size, h.little);
            }
            b'x' => out.push(0),
            b'f' => {
                let f = check_number(args, arg)? as f32;
                arg += 1;
                out.extend_from_slice(&if h.little {
                    f.to_le_bytes()
                } else {
                    f.to_be_bytes()
                });
            }
            b'd' => {
                let d = check_number(args, arg)?;
                arg += 1;
                out.extend_from_slice(&if h.little {
                    d.to_le_bytes()
                } else {
                    d.to_be_bytes()
                });
            }
            b'c' | b's' => {
                let s = check_string(args, arg, "pack")?;
                arg += 1;
                if size == 0 {
                    size = s.len();
                }
                if s.len() < size {
                    // Redis names the argument after the one it read.
                    return err(format!("bad argument #{arg} to 'pack' (string too short)"));
                }
                out.extend_from_slice(&s[..size]);
                if opt == b's' {
                    out.push(0);
                    size += 1;
                }
            }
            _ => control(opt, &mut fmt, &mut h, "pack")?,
        }
        total = total.wrapping_add(size as u64);
    }
    Ok(out)
}

fn unpack(lua: &Lua, args: &MultiValue) -> Result<MultiValue> {
    let fbytes = check_string(args, 1, "unpack")?;
    let data = check_string(args, 2, "unpack")?;
    let init = match args.get(2) {
        None | Some(Value::Nil) => 1,
        Some(v) => match number(v) {
            Some(n) => n as i64,
            None => {
                return err(format!(
                    "bad argument #3 to 'unpack' (number expected, got {})",
                    arg_type(v)
                ))
            }
        },
    };
    if init == 0 {
        return err("bad argument #3 to 'unpack' (offset must be 1 or greater)".into());
    }
    // C's size_t: a negative offset wraps around and fails the length check.
    let mut pos = (init as u64).wrapping_sub(1);
    let ld = data.len() as u64;
    let short = || err::<MultiValue>("bad argument #2 to 'unpack' (data string too short)".into());
    let mut fmt = Fmt { f: &fbytes, i: 0 };
    let mut h = header();
    let mut vals: Vec<Value> = Vec::new();
    let mut strings = 0usize;
    while let Some(opt) = fmt.next() {
        let mut size = opt_size(opt, &mut fmt)? as u64;
        pos = pos.wrapping_add(to_align(pos, &h, opt, size as usize));
        if size > ld || pos > ld - size {
            return short();
        }
        if vals.len() + 1 > MAX_RESULTS || strings >= MAX_STRING_RESULTS {
            return err("stack overflow (too many results)".into());
        }
        // In bounds: pos + size <= ld was just checked.
        let at = pos as usize;
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let b = &data[at..at + size as usize];
                vals.push(Value::Number(get_int(
                    b,
                    h.little,
                    opt.is_ascii_lowercase(),
                )));
            }
            b'x' => {}
            b'f' => {
                let mut a = [0u8; 4];
                a.copy_from_slice(&data[at..at + 4]);
                let f = if h.little {
                    f32::from_le_bytes(a)
                } else {
                    f32::from_be_bytes(a)
                };
                vals.push(Value::Number(f as f64));
            }
            b'd' => {
                let mut a = [0u8; 8];
                a.copy_from_slice(&data[at..at + 8]);
                let d = if h.little {
                    f64::from_le_bytes(a)
                } else {
                    f64::from_be_bytes(a)
                };
                vals.push(Value::Number(d));
            }
            b'c' => {
                if size == 0 {
                    // c0: the length is the previous result, which it replaces.
                    let prev = vals.last().and_then(number);
                    let Some(n) = prev else {
                        return err("format 'c0' needs a previous size".into());
                    };
                    vals.pop();
                    size = if n < 0.0 { n as i64 as u64 } else { n as u64 };
                    if size > ld || pos > ld - size {
                        return short();
                    }
                }
                let s = &data[at..at + size as usize];
                vals.push(Value::String(lua.create_string(s)?));
                strings += 1;
            }
            b's' => {
                let Some(end) = data[at..].iter().position(|&c| c == 0) else {
                    return err("unfinished string in data".into());
                };
                size = end as u64 + 1;
                vals.push(Value::String(lua.create_string(&data[at..at + end])?));
                strings += 1;
            }
            _ => control(opt, &mut fmt, &mut h, "unpack")?,
        }
        pos = pos.wrapping_add(size);
    }
    vals.push(Value::Number(pos.wrapping_add(1) as i64 as f64));
    Ok(MultiValue::from_iter(vals))
}

fn size(args: &MultiValue) -> Result<f64> {
    let fbytes = check_string(args, 1, "size")?;
    let mut fmt = Fmt { f: &fbytes, i: 0 };
    let mut h = header();
    let mut pos: u64 = 0;
    while let Some(opt) = fmt.next() {
        let size = opt_size(opt, &mut fmt)?;
        pos = pos.wrapping_add(to_align(pos, &h, opt, size));
        if opt == b's' {
            return err("bad argument #1 to 'size' (option 's' has no fixed size)".into());
        }
        if opt == b'c' && size == 0 {
            return err("bad argument #1 to 'size' (option 'c0' has no fixed size)".into());
        }
        if !opt.is_ascii_alphanumeric() {
            control(opt, &mut fmt, &mut h, "size")?;
        }
        pos = pos.wrapping_add(size as u64);
    }
    Ok(pos as i64 as f64)
}

pub fn open(lua: &Lua) -> Result<Table> {
    let t = lua.create_table()?;
    t.set(
        "pack",
        super::lib_fn(lua, |_, args: MultiValue| {
            Ok(mlua::BString::from(pack(&args)?))
        })?,
    )?;
    t.set(
        "unpack",
        super::lib_fn(lua, |lua, args: MultiValue| unpack(lua, &args))?,
    )?;
    t.set(
        "size",
        super::lib_fn(lua, |_, args: MultiValue| size(&args))?,
    )?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lua: &Lua, code: &str) -> std::result::Result<MultiValue, String> {
        let t = open(lua).map_err(|e| e.to_string())?;
        lua.globals().set("struct", t).map_err(|e| e.to_string())?;
        lua.load(code)
            .eval::<MultiValue>()
            .map_err(|e| super::super::vm::error_text(&e))
    }

    #[test]
    fn wide_integers_round_trip() {
        let lua = Lua::new();
        let r = run(
            &lua,
            "return struct.unpack('<i16', struct.pack('<i16', -2))",
        )
        .unwrap();
        assert_eq!(r.front().and_then(number), Some(-2.0));
        let r = run(&lua, "return struct.unpack('i9', string.rep('x', 9))").unwrap();
        assert_eq!(r.front().and_then(number), Some(-8.0));
    }

    #[test]
    fn errors_match_redis() {
        let lua = Lua::new();
        let e = run(&lua, "return struct.unpack('!99999i', 'xxxx')").unwrap_err();
        assert!(e.ends_with("alignment 99999 is not a power of 2"), "{e}");
        let e = run(&lua, "return struct.unpack('i4', 'xxxx', -100)").unwrap_err();
        assert!(
            e.ends_with("bad argument #2 to 'unpack' (data string too short)"),
            "{e}"
        );
        let e = run(&lua, "return struct.pack('i33', 1)").unwrap_err();
        assert!(
            e.ends_with("integral size 33 is larger than limit of 32"),
            "{e}"
        );
        let e = run(&lua, "return struct.pack('i99999999999', 1)").unwrap_err();
        assert!(e.ends_with("integral size overflow"), "{e}");
        let e = run(&lua, "return struct.unpack('c0', '')").unwrap_err();
        assert!(e.ends_with("format 'c0' needs a previous size"), "{e}");
    }

    #[test]
    fn too_many_results_is_an_error() {
        let lua = Lua::new();
        let e = run(
            &lua,
            "return struct.unpack(string.rep('c1', 7000), string.rep('x', 7000))",
        )
        .unwrap_err();
        assert!(e.ends_with("stack overflow (too many results)"), "{e}");
    }

    #[test]
    fn alignment_pads() {
        let lua = Lua::new();
        let r = run(
            &lua,
            "return #struct.pack('!4bi', 1, 2), struct.size('!2bd')",
        )
        .unwrap();
        let v: Vec<f64> = r.iter().filter_map(number).collect();
        assert_eq!(v, vec![8.0, 10.0]);
    }
}
