//! The `cmsgpack` library: MessagePack with lua-cmsgpack's choices (integral numbers
//! as the smallest int type, other numbers as float32 when exact else float64, tables
//! whose keys are exactly 1..n as arrays, nesting past 16 levels as nil).

use mlua::{Lua, MultiValue, Result, Table, Value};

const MAX_NESTING: usize = 16;

/// Redis's lua-cmsgpack decodes onto the Lua C stack and fails once it would pass
/// LUAI_MAXCSTACK (8000) slots. The decoder here recurses in Rust and holds every
/// open table as an mlua reference (whose auxiliary stack is just as finite), so it
/// keeps the same budget: it bounds Rust recursion, keeps mlua from panicking, and
/// gives the errors at the depths Redis gives them.
const STACK_SLOTS: usize = 8000;
/// What an open array costs (its table and the index being filled).
const ARRAY_SLOTS: usize = 2;
/// What an open map costs while its key is decoded, and while its value is.
const MAP_KEY_SLOTS: usize = 4;
const MAP_VALUE_SLOTS: usize = 6;
/// What a decoded top-level value costs, and a table one on top of that.
const RESULT_SLOTS: usize = 2;
const RESULT_TABLE_SLOTS: usize = 2;
const ARRAY_OVERFLOW: &str = "stack overflow (in function mp_decode_to_lua_array)";
const RESULTS_OVERFLOW: &str =
    "stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)";

fn err<T>(msg: &str) -> Result<T> {
    Err(mlua::Error::RuntimeError(msg.to_string()))
}

pub fn open(lua: &Lua) -> Result<Table> {
    let t = lua.create_table()?;
    t.set(
        "pack",
        super::lib_fn(lua, |_, args: MultiValue| {
            if args.is_empty() {
                return err("bad argument #0 to 'pack' (MessagePack pack needs input.)");
            }
            let mut out = Vec::new();
            for v in args.iter() {
                encode(v, 0, &mut out)?;
            }
            Ok(mlua::BString::from(out))
        })?,
    )?;
    t.set(
        "unpack",
        super::lib_fn(lua, |lua, s: mlua::String| {
            let (_, vals) = unpack(lua, &s.as_bytes(), 0, 0)?;
            Ok(MultiValue::from_iter(vals))
        })?,
    )?;
    t.set(
        "unpack_one",
        super::lib_fn(lua, |lua, (s, off): (mlua::String, Option<i64>)| {
            unpack_with_offset(lua, &s.as_bytes(), 1, off.unwrap_or(0))
        })?,
    )?;
    t.set(
        "unpack_limit",
        super::lib_fn(
            lua,
            |lua, (s, limit, off): (mlua::String, i64, Option<i64>)| {
                unpack_with_offset(lua, &s.as_bytes(), limit.max(0) as usize, off.unwrap_or(0))
            },
        )?,
    )?;
    t.set("_NAME", "cmsgpack")?;
    t.set("_VERSION", "lua-cmsgpack 0.4.0")?;
    Ok(t)
}

fn unpack_with_offset(lua: &Lua, b: &[u8], limit: usize, off: i64) -> Result<MultiValue> {
    if off < 0 || off as usize > b.len() {
        return err("Start offset greater than input length.");
    }
    let (next, vals) = unpack(lua, b, off as usize, limit)?;
    let next = if next >= b.len() { -1.0 } else { next as f64 };
    let mut out = vec![Value::Number(next)];
    out.extend(vals);
    Ok(MultiValue::from_iter(out))
}

/// Decodes up to `limit` objects (0: all) from `off`; returns the next offset.
fn unpack(lua: &Lua, b: &[u8], off: usize, limit: usize) -> Result<(usize, Vec<Value>)> {
    let mut d = Decoder {
        lua,
        b,
        pos: off,
        used: 0,
    };
    let mut vals = Vec::new();
    while d.pos < b.len() && (limit == 0 || vals.len() < limit) {
        let v = d.value()?;
        d.used += RESULT_SLOTS;
        if matches!(v, Value::Table(_)) {
            d.used += RESULT_TABLE_SLOTS;
        }
        if d.used >= STACK_SLOTS {
            return err(RESULTS_OVERFLOW);
        }
        vals.push(v);
    }
    Ok((d.pos, vals))
}

fn encode_int(n: i64, out: &mut Vec<u8>) {
    if n >= 0 {
        let u = n as u64;
        if u < 128 {
            out.push(u as u8);
        } else if u <= 0xff {
            out.extend_from_slice(&[0xcc, u as u8]);
        } else if u <= 0xffff {
            out.push(0xcd);
            out.extend_from_slice(&(u as u16).to_be_bytes());
        } else if u <= 0xffff_ffff {
            out.push(0xce);
            out.extend_from_slice(&(u as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&u.to_be_bytes());
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2147483648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn encode_number(n: f64, out: &mut Vec<u8>) {
    if n.fract() == 0.0 && n.is_finite() && n.abs() < 9.2e18 {
        encode_int(n as i64, out);
    } else if (n as f32) as f64 == n || n.is_nan() {
        out.push(0xca);
        out.extend_from_slice(&(n as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn header(out: &mut Vec<u8>, n: usize, fix: u8, fix_max: usize, b16: u8, b32: u8) {
    if n < fix_max {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(b16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(b32);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

/// Keys exactly 1..n: an array of n.
fn array_len(t: &Table) -> Result<Option<usize>> {
    let (mut max, mut count) = (0usize, 0usize);
    for pair in t.clone().pairs::<Value, Value>() {
        let (k, _) = pair?;
        let n = match k {
            Value::Integer(i) => i as f64,
            Value::Number(n) => n,
            _ => return Ok(None),
        };
        if n < 1.0 || n.fract() != 0.0 {
            return Ok(None);
        }
        max = max.max(n as usize);
        count += 1;
    }
    Ok((max == count).then_some(count))
}

fn encode(v: &Value, level: usize, out: &mut Vec<u8>) -> Result<()> {
    match v {
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(i) => encode_int(*i, out),
        Value::Number(n) => encode_number(*n, out),
        Value::String(s) => {
            let b = s.as_bytes();
            if b.len() < 32 {
                out.push(0xa0 | b.len() as u8);
            } else if b.len() <= 0xff {
                out.extend_from_slice(&[0xd9, b.len() as u8]);
            } else {
                header(out, b.len(), 0, 0, 0xda, 0xdb);
            }
            out.extend_from_slice(&b);
        }
        Value::Table(t) if level < MAX_NESTING => match array_len(t)? {
            Some(n) => {
                header(out, n, 0x90, 16, 0xdc, 0xdd);
                for i in 1..=n {
                    encode(&t.raw_get::<Value>(i)?, level + 1, out)?;
                }
            }
            None => {
                let n = t.clone().pairs::<Value, Value>().count();
                header(out, n, 0x80, 16, 0xde, 0xdf);
                for pair in t.clone().pairs::<Value, Value>() {
                    let (k, val) = pair?;
                    encode(&k, level + 1, out)?;
                    encode(&val, level + 1, out)?;
                }
            }
        },
        _ => out.push(0xc0),
    }
    Ok(())
}

struct Decoder<'a> {
    lua: &'a Lua,
    b: &'a [u8],
    pos: usize,
    /// Stack slots in use (see `STACK_SLOTS`): results so far plus open tables.
    used: usize,
}

impl Decoder<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if n > self.b.len() - self.pos.min(self.b.len()) {
            return err("Missing bytes in input.");
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> Result<u64> {
        Ok(self.take(n)?.iter().fold(0u64, |a, &b| (a << 8) | b as u64))
    }

    fn value(&mut self) -> Result<Value> {
        let c = self.take(1)?[0];
        let num = |n: f64| Ok(Value::Number(n));
        match c {
            0x00..=0x7f => num(c as f64),
            0xe0..=0xff => num(c as i8 as f64),
            0x80..=0x8f => self.map((c & 0x0f) as usize),
            0x90..=0x9f => self.array((c & 0x0f) as usize),
            0xa0..=0xbf => self.string((c & 0x1f) as usize),
            0xc0 => Ok(Value::Nil),
            0xc2 => Ok(Value::Boolean(false)),
            0xc3 => Ok(Value::Boolean(true)),
            0xc4 | 0xd9 => {
                let n = self.uint(1)? as usize;
                self.string(n)
            }
            0xc5 | 0xda => {
                let n = self.uint(2)? as usize;
                self.string(n)
            }
            0xc6 | 0xdb => {
                let n = self.uint(4)? as usize;
                self.string(n)
            }
            0xca => {
                let b = self.take(4)?;
                num(f32::from_be_bytes([b[0], b[1], b[2], b[3]]) as f64)
            }
            0xcb => num(f64::from_bits(self.uint(8)?)),
            0xcc => num(self.uint(1)? as f64),
            0xcd => num(self.uint(2)? as f64),
            0xce => num(self.uint(4)? as f64),
            0xcf => num(self.uint(8)? as f64),
            0xd0 => num(self.uint(1)? as u8 as i8 as f64),
            0xd1 => num(self.uint(2)? as u16 as i16 as f64),
            0xd2 => num(self.uint(4)? as u32 as i32 as f64),
            0xd3 => num(self.uint(8)? as i64 as f64),
            0xdc => {
                let n = self.uint(2)? as usize;
                self.array(n)
            }
            0xdd => {
                let n = self.uint(4)? as usize;
                self.array(n)
            }
            0xde => {
                let n = self.uint(2)? as usize;
                self.map(n)
            }
            0xdf => {
                let n = self.uint(4)? as usize;
                self.map(n)
            }
            _ => err("Bad data format in input."),
        }
    }

    fn string(&mut self, n: usize) -> Result<Value> {
        let lua = self.lua;
        let s = self.take(n)?;
        Ok(Value::String(lua.create_string(s)?))
    }

    fn array(&mut self, n: usize) -> Result<Value> {
        if self.used + ARRAY_SLOTS >= STACK_SLOTS {
            return err(ARRAY_OVERFLOW);
        }
        self.used += ARRAY_SLOTS;
        let r = self.array_items(n);
        self.used -= ARRAY_SLOTS;
        r
    }

    fn array_items(&mut self, n: usize) -> Result<Value> {
        let t = self.lua.create_table()?;
        for i in 1..=n {
            let v = self.value()?;
            t.raw_set(i, v)?;
        }
        Ok(Value::Table(t))
    }

    fn map(&mut self, n: usize) -> Result<Value> {
        if self.used + MAP_KEY_SLOTS >= STACK_SLOTS {
            return err(RESULTS_OVERFLOW);
        }
        let t = self.lua.create_table()?;
        for _ in 0..n {
            self.used += MAP_KEY_SLOTS;
            let k = self.value();
            self.used -= MAP_KEY_SLOTS;
            let k = k?;
            self.used += MAP_VALUE_SLOTS;
            let v = self.value();
            self.used -= MAP_VALUE_SLOTS;
            let v = v?;
            if k != Value::Nil {
                t.raw_set(k, v)?;
            }
        }
        Ok(Value::Table(t))
    }
}
