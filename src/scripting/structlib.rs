//! The `struct` library: pack/unpack binary records described by a format string
//! (`<`/`>`/`=` endianness, `b B h H l L T i[n] I[n]` integers, `f d` floats,
//! `s` zero-terminated and `c[n]` fixed strings, `x` padding), and `struct.size`.

use mlua::{Lua, MultiValue, Result, Table, Value};

use super::bit::number;

fn err<T>(msg: String) -> Result<T> {
    Err(mlua::Error::RuntimeError(msg))
}

enum Item {
    Int { size: usize, signed: bool },
    Float,
    Double,
    ZString,
    Chars(Option<usize>),
    Pad,
}

/// Parses the format into items, tracking endianness switches.
fn parse(fmt: &[u8]) -> Result<Vec<(bool, Item)>> {
    let mut little = true;
    let mut items = Vec::new();
    let mut i = 0;
    let digits = |i: &mut usize| -> Option<usize> {
        let start = *i;
        while *i < fmt.len() && fmt[*i].is_ascii_digit() {
            *i += 1;
        }
        std::str::from_utf8(&fmt[start..*i]).ok()?.parse().ok()
    };
    while i < fmt.len() {
        let c = fmt[i];
        i += 1;
        let item = match c {
            b'<' | b'=' => {
                little = true;
                continue;
            }
            b'>' => {
                little = false;
                continue;
            }
            b'!' => {
                digits(&mut i);
                continue;
            }
            b' ' => continue,
            b'x' => Item::Pad,
            b'b' | b'B' => Item::Int {
                size: 1,
                signed: c == b'b',
            },
            b'h' | b'H' => Item::Int {
                size: 2,
                signed: c == b'h',
            },
            b'l' | b'L' | b'T' => Item::Int {
                size: 8,
                signed: c == b'l',
            },
            b'i' | b'I' => {
                let size = digits(&mut i).unwrap_or(4);
                if !(1..=8).contains(&size) {
                    return err(format!("integral size {size} is larger than limit of 8"));
                }
                Item::Int {
                    size,
                    signed: c == b'i',
                }
            }
            b'f' => Item::Float,
            b'd' => Item::Double,
            b's' => Item::ZString,
            b'c' => Item::Chars(digits(&mut i)),
            other => return err(format!("invalid format option '{}'", other as char)),
        };
        items.push((little, item));
    }
    Ok(items)
}

fn put_int(out: &mut Vec<u8>, v: i64, size: usize, little: bool) {
    let bytes = v.to_le_bytes();
    if little {
        out.extend_from_slice(&bytes[..size]);
    } else {
        out.extend(bytes[..size].iter().rev());
    }
}

fn arg_bytes(args: &MultiValue, i: usize) -> Result<Vec<u8>> {
    match args.get(i) {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(v @ (Value::Integer(_) | Value::Number(_))) => {
            Ok(super::format_g(number(v).unwrap_or(0.0), 14).into_bytes())
        }
        _ => err(format!(
            "bad argument #{} to 'pack' (string expected)",
            i + 1
        )),
    }
}

fn pack(args: &MultiValue) -> Result<Vec<u8>> {
    let fmt = arg_bytes(args, 0)?;
    let mut out = Vec::new();
    let mut a = 1;
    for (little, item) in parse(&fmt)? {
        match item {
            Item::Pad => out.push(0),
            Item::Int { size, .. } => {
                let Some(n) = args.get(a).and_then(number) else {
                    return err(format!(
                        "bad argument #{} to 'pack' (number expected)",
                        a + 1
                    ));
                };
                a += 1;
                put_int(&mut out, n as i64, size, little);
            }
            Item::Float | Item::Double => {
                let Some(n) = args.get(a).and_then(number) else {
                    return err(format!(
                        "bad argument #{} to 'pack' (number expected)",
                        a + 1
                    ));
                };
                a += 1;
                let bytes: Vec<u8> = match (matches!(item, Item::Float), little) {
                    (true, true) => (n as f32).to_le_bytes().to_vec(),
                    (true, false) => (n as f32).to_be_bytes().to_vec(),
                    (false, true) => n.to_le_bytes().to_vec(),
                    (false, false) => n.to_be_bytes().to_vec(),
                };
                out.extend_from_slice(&bytes);
            }
            Item::ZString => {
                let s = arg_bytes(args, a)?;
                a += 1;
                out.extend_from_slice(&s);
                out.push(0);
            }
            Item::Chars(n) => {
                let s = arg_bytes(args, a)?;
                a += 1;
                let n = match n {
                    Some(0) | None => s.len(),
                    Some(n) => n,
                };
                if s.len() < n {
                    return err(format!("bad argument #{} to 'pack' (string too short)", a));
                }
                out.extend_from_slice(&s[..n]);
            }
        }
    }
    Ok(out)
}

fn unpack(lua: &Lua, fmt: &[u8], data: &[u8], init: usize) -> Result<MultiValue> {
    let mut pos = init;
    let mut vals = Vec::new();
    let mut last_int: Option<i64> = None;
    let short = || err::<MultiValue>("bad argument #2 to 'unpack' (data string too short)".into());
    for (little, item) in parse(fmt)? {
        match item {
            Item::Pad => pos += 1,
            Item::Int { size, signed } => {
                let Some(b) = data.get(pos..pos + size) else {
                    return short();
                };
                let mut v: u64 = 0;
                for k in 0..size {
                    let byte = if little { b[size - 1 - k] } else { b[k] };
                    v = (v << 8) | byte as u64;
                }
                let n = if signed && size < 8 && v & (1 << (size * 8 - 1)) != 0 {
                    (v | (!0u64 << (size * 8))) as i64
                } else {
                    v as i64
                };
                pos += size;
                last_int = Some(n);
                vals.push(Value::Number(if signed { n as f64 } else { v as f64 }));
            }
            Item::Float => {
                let Some(b) = data.get(pos..pos + 4) else {
                    return short();
                };
                let arr = [b[0], b[1], b[2], b[3]];
                let f = if little {
                    f32::from_le_bytes(arr)
                } else {
                    f32::from_be_bytes(arr)
                };
                pos += 4;
                vals.push(Value::Number(f as f64));
            }
            Item::Double => {
                let Some(b) = data.get(pos..pos + 8) else {
                    return short();
                };
                let mut arr = [0u8; 8];
                arr.copy_from_slice(b);
                let f = if little {
                    f64::from_le_bytes(arr)
                } else {
                    f64::from_be_bytes(arr)
                };
                pos += 8;
                vals.push(Value::Number(f));
            }
            Item::ZString => {
                let Some(end) = data.get(pos..).and_then(|d| d.iter().position(|&c| c == 0)) else {
                    return err("unfinished string in data".into());
                };
                vals.push(Value::String(lua.create_string(&data[pos..pos + end])?));
                pos += end + 1;
            }
            Item::Chars(n) => {
                let n = match n {
                    Some(0) | None => last_int.unwrap_or(0).max(0) as usize,
                    Some(n) => n,
                };
                let Some(b) = data.get(pos..pos + n) else {
                    return short();
                };
                vals.push(Value::String(lua.create_string(b)?));
                pos += n;
            }
        }
    }
    vals.push(Value::Number((pos + 1) as f64));
    Ok(MultiValue::from_iter(vals))
}

pub fn open(lua: &Lua) -> Result<Table> {
    let t = lua.create_table()?;
    t.set(
        "pack",
        lua.create_function(|_, args: MultiValue| Ok(mlua::BString::from(pack(&args)?)))?,
    )?;
    t.set(
        "unpack",
        lua.create_function(
            |lua, (fmt, data, init): (mlua::String, mlua::String, Option<i64>)| {
                let init = init.unwrap_or(1).max(1) as usize - 1;
                unpack(lua, &fmt.as_bytes(), &data.as_bytes(), init)
            },
        )?,
    )?;
    t.set(
        "size",
        lua.create_function(|_, fmt: mlua::String| {
            let mut n = 0usize;
            for (_, item) in parse(&fmt.as_bytes())? {
                n += match item {
                    Item::Pad => 1,
                    Item::Int { size, .. } => size,
                    Item::Float => 4,
                    Item::Double => 8,
                    Item::Chars(Some(k)) if k > 0 => k,
                    _ => return err("options 'c0' - 's' have undefined sizes".into()),
                };
            }
            Ok(n)
        })?,
    )?;
    Ok(t)
}
