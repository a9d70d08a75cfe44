//! The `cjson` library: JSON encode/decode with lua-cjson's rules (arrays are tables
//! whose keys are 1..n, empty tables encode as objects, `/` is escaped, numbers use
//! 14 significant digits, `cjson.null` is a NULL light userdata) and its settings.

use std::cell::Cell;
use std::rc::Rc;

use mlua::{LightUserData, Lua, MultiValue, Result, Table, Value};

use super::format_g;

struct Settings {
    encode_max_depth: Cell<u32>,
    decode_max_depth: Cell<u32>,
    encode_invalid_numbers: Cell<bool>,
    decode_invalid_numbers: Cell<bool>,
    precision: Cell<usize>,
    sparse_convert: Cell<bool>,
    sparse_ratio: Cell<u32>,
    sparse_safe: Cell<u32>,
}

fn err<T>(msg: String) -> Result<T> {
    Err(mlua::Error::RuntimeError(msg))
}

pub fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

pub fn open(lua: &Lua) -> Result<Table> {
    let st = Rc::new(Settings {
        encode_max_depth: Cell::new(1000),
        decode_max_depth: Cell::new(1000),
        encode_invalid_numbers: Cell::new(false),
        decode_invalid_numbers: Cell::new(true),
        precision: Cell::new(14),
        sparse_convert: Cell::new(false),
        sparse_ratio: Cell::new(2),
        sparse_safe: Cell::new(10),
    });
    let t = lua.create_table()?;
    let s = st.clone();
    t.set(
        "encode",
        super::lib_fn(lua, move |_, args: MultiValue| {
            if args.len() != 1 {
                return err("bad argument #1 to 'encode' (expected 1 argument)".into());
            }
            let mut out = Vec::new();
            encode(&s, &args[0], 0, &mut out)?;
            Ok(mlua::BString::from(out))
        })?,
    )?;
    let s = st.clone();
    t.set(
        "decode",
        super::lib_fn(lua, move |lua, args: MultiValue| {
            let text = match (args.len(), args.front()) {
                (1, Some(Value::String(t))) => t.clone(),
                (1, Some(v @ (Value::Integer(_) | Value::Number(_)))) => {
                    lua.create_string(super::format_g(super::bit::number(v).unwrap_or(0.0), 14))?
                }
                (1, Some(v)) => {
                    return err(format!(
                        "bad argument #1 to 'decode' (string expected, got {})",
                        super::vm::arg_type(v)
                    ))
                }
                _ => return err("bad argument #1 to 'decode' (expected 1 argument)".into()),
            };
            let bytes = text.as_bytes();
            let mut d = Decoder {
                lua,
                s: &s,
                b: &bytes,
                pos: 0,
                depth: 0,
            };
            d.skip_ws();
            let v = d.value()?;
            d.skip_ws();
            if d.pos < d.b.len() {
                return d.fail("the end");
            }
            Ok(v)
        })?,
    )?;
    let int_setting = |get: fn(&Settings) -> &Cell<u32>| {
        let s = st.clone();
        super::lib_fn(lua, move |_, v: Option<f64>| {
            if let Some(n) = v {
                if !(1.0..=2147483647.0).contains(&n) {
                    return err(
                        "bad argument #1 (expected integer between 1 and 2147483647)".into(),
                    );
                }
                get(&s).set(n as u32);
            }
            Ok(get(&s).get())
        })
    };
    t.set("encode_max_depth", int_setting(|s| &s.encode_max_depth)?)?;
    t.set("decode_max_depth", int_setting(|s| &s.decode_max_depth)?)?;
    let bool_setting = |get: fn(&Settings) -> &Cell<bool>| {
        let s = st.clone();
        super::lib_fn(lua, move |_, v: Value| {
            match v {
                Value::Boolean(b) => get(&s).set(b),
                Value::String(ref x) if x.as_bytes() == b"on" => get(&s).set(true),
                Value::String(ref x) if x.as_bytes() == b"off" => get(&s).set(false),
                _ => {}
            }
            Ok(get(&s).get())
        })
    };
    t.set(
        "encode_invalid_numbers",
        bool_setting(|s| &s.encode_invalid_numbers)?,
    )?;
    t.set(
        "decode_invalid_numbers",
        bool_setting(|s| &s.decode_invalid_numbers)?,
    )?;
    t.set(
        "encode_keep_buffer",
        super::lib_fn(lua, |_, v: Value| Ok(v))?,
    )?;
    let s = st.clone();
    t.set(
        "encode_number_precision",
        super::lib_fn(lua, move |_, v: Option<f64>| {
            if let Some(n) = v {
                if !(1.0..=14.0).contains(&n) {
                    return err("bad argument #1 (expected integer between 1 and 14)".into());
                }
                s.precision.set(n as usize);
            }
            Ok(s.precision.get())
        })?,
    )?;
    let s = st;
    t.set(
        "encode_sparse_array",
        super::lib_fn(
            lua,
            move |_, (c, r, safe): (Option<bool>, Option<u32>, Option<u32>)| {
                if let Some(c) = c {
                    s.sparse_convert.set(c);
                }
                if let Some(r) = r {
                    s.sparse_ratio.set(r);
                }
                if let Some(x) = safe {
                    s.sparse_safe.set(x);
                }
                Ok((
                    s.sparse_convert.get(),
                    s.sparse_ratio.get(),
                    s.sparse_safe.get(),
                ))
            },
        )?,
    )?;
    t.set("null", null())?;
    t.set("_NAME", "cjson")?;
    t.set("_VERSION", "2.1.0")?;
    Ok(t)
}

fn encode_string(b: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &c in b {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            c if c < 0x20 || c == 0x7f => {
                out.extend_from_slice(format!("\\u{:04x}", c).as_bytes());
            }
            c => out.push(c),
        }
    }
    out.push(b'"');
}

fn encode_number(s: &Settings, n: f64, out: &mut Vec<u8>) -> Result<()> {
    if n.is_nan() || n.is_infinite() {
        if !s.encode_invalid_numbers.get() {
            return err("Cannot serialise number: must not be NaN or Inf".into());
        }
        let t = if n.is_nan() {
            "nan"
        } else if n > 0.0 {
            "inf"
        } else {
            "-inf"
        };
        out.extend_from_slice(t.as_bytes());
        return Ok(());
    }
    out.extend_from_slice(format_g(n, s.precision.get()).as_bytes());
    Ok(())
}

/// The array length of `t` if every key is a positive integer (lua-cjson's rule,
/// sparse arrays refused or converted), else None (an object).
fn array_len(s: &Settings, t: &Table) -> Result<Option<usize>> {
    let (mut max, mut items) = (0usize, 0usize);
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
        items += 1;
    }
    let ratio = s.sparse_ratio.get() as usize;
    if ratio > 0 && max > items * ratio && max > s.sparse_safe.get() as usize {
        if !s.sparse_convert.get() {
            return err("Cannot serialise table: excessively sparse array".into());
        }
        return Ok(None);
    }
    Ok(Some(max))
}

fn encode(s: &Settings, v: &Value, depth: u32, out: &mut Vec<u8>) -> Result<()> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(u) if u.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(i) => encode_number(s, *i as f64, out)?,
        Value::Number(n) => encode_number(s, *n, out)?,
        Value::String(x) => encode_string(&x.as_bytes(), out),
        Value::Table(t) => {
            let depth = depth + 1;
            if depth > s.encode_max_depth.get() {
                return err(format!("Cannot serialise, excessive nesting ({depth})"));
            }
            match array_len(s, t)? {
                Some(n) if n > 0 => {
                    out.push(b'[');
                    for i in 1..=n {
                        if i > 1 {
                            out.push(b',');
                        }
                        encode(s, &t.raw_get::<Value>(i)?, depth, out)?;
                    }
                    out.push(b']');
                }
                _ => {
                    out.push(b'{');
                    let mut first = true;
                    for pair in t.clone().pairs::<Value, Value>() {
                        let (k, val) = pair?;
                        if !first {
                            out.push(b',');
                        }
                        first = false;
                        match &k {
                            Value::String(x) => encode_string(&x.as_bytes(), out),
                            Value::Integer(_) | Value::Number(_) => {
                                let n = super::bit::number(&k).unwrap_or(0.0);
                                out.push(b'"');
                                encode_number(s, n, out)?;
                                out.push(b'"');
                            }
                            _ => {
                                return err(
                                    "Cannot serialise table: table key must be a number or string"
                                        .into(),
                                )
                            }
                        }
                        out.push(b':');
                        encode(s, &val, depth, out)?;
                    }
                    out.push(b'}');
                }
            }
        }
        other => {
            return err(format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            ))
        }
    }
    Ok(())
}

struct Decoder<'a> {
    lua: &'a Lua,
    s: &'a Settings,
    b: &'a [u8],
    pos: usize,
    depth: u32,
}

impl Decoder<'_> {
    /// Redis's cjson names the token it found by its type (json_token_type_name).
    fn fail<T>(&self, what: &str) -> Result<T> {
        let rest = self.b.get(self.pos..).unwrap_or_default();
        let found = match rest.first() {
            None => "T_END",
            Some(b'{') => "T_OBJ_BEGIN",
            Some(b'}') => "T_OBJ_END",
            Some(b'[') => "T_ARR_BEGIN",
            Some(b']') => "T_ARR_END",
            Some(b'"') => "T_STRING",
            Some(b':') => "T_COLON",
            Some(b',') => "T_COMMA",
            Some(b'-' | b'0'..=b'9') => "T_NUMBER",
            Some(_) if rest.starts_with(b"true") || rest.starts_with(b"false") => "T_BOOLEAN",
            Some(_) if rest.starts_with(b"null") => "T_NULL",
            Some(_) => "invalid token",
        };
        err(format!(
            "Expected {what} but found {found} at character {}",
            self.pos + 1
        ))
    }

    /// A bad \u escape: cjson reports it at the backslash, as the token it was
    /// expecting (`what`).
    fn bad_escape<T>(&self, what: &str, backslash: usize) -> Result<T> {
        err(format!(
            "Expected {what} but found invalid unicode escape code at character {}",
            backslash + 1
        ))
    }

    fn skip_ws(&mut self) {
        while self.pos < self.b.len() && matches!(self.b[self.pos], b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
    }

    fn nest(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > self.s.decode_max_depth.get() {
            return err(format!(
                "Found too many nested data structures ({}) at character {}",
                self.depth,
                self.pos + 1
            ));
        }
        Ok(())
    }

    fn value(&mut self) -> Result<Value> {
        match self.b.get(self.pos) {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => Ok(Value::String(
                self.lua.create_string(self.string("value")?)?,
            )),
            Some(b't') if self.b[self.pos..].starts_with(b"true") => {
                self.pos += 4;
                Ok(Value::Boolean(true))
            }
            Some(b'f') if self.b[self.pos..].starts_with(b"false") => {
                self.pos += 5;
                Ok(Value::Boolean(false))
            }
            Some(b'n') if self.b[self.pos..].starts_with(b"null") => {
                self.pos += 4;
                Ok(null())
            }
            Some(c) if *c == b'-' || c.is_ascii_digit() || *c == b'i' || *c == b'n' => {
                self.number()
            }
            _ => self.fail("value"),
        }
    }

    fn number(&mut self) -> Result<Value> {
        let start = self.pos;
        while self.pos < self.b.len()
            && matches!(self.b[self.pos], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' | b'x' | b'X' | b'a'..=b'f' | b'A'..=b'F' | b'i' | b'n' | b'I' | b'N')
        {
            self.pos += 1;
        }
        let text = std::str::from_utf8(&self.b[start..self.pos]).unwrap_or("");
        let v = match text.parse::<f64>() {
            Ok(v) if v.is_finite() || self.s.decode_invalid_numbers.get() => v,
            _ => {
                self.pos = start;
                return self.fail("value");
            }
        };
        Ok(Value::Number(v))
    }

    fn hex4(&mut self) -> Option<u32> {
        let h = self.b.get(self.pos..self.pos + 4)?;
        if !h.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let v = u32::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()?;
        self.pos += 4;
        Some(v)
    }

    fn string(&mut self, what: &str) -> Result<Vec<u8>> {
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let Some(&c) = self.b.get(self.pos) else {
                return err("Expected string but found unexpected end of string".into());
            };
            self.pos += 1;
            match c {
                b'"' => return Ok(out),
                b'\\' => {
                    let Some(&e) = self.b.get(self.pos) else {
                        return err("Expected string but found unexpected end of string".into());
                    };
                    self.pos += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            // As cjson: a high surrogate must be followed by a low
                            // one; a lone surrogate or bad hex is an error.
                            let backslash = self.pos - 2;
                            let Some(mut cp) = self.hex4() else {
                                return self.bad_escape(what, backslash);
                            };
                            if (0xDC00..0xE000).contains(&cp) {
                                return self.bad_escape(what, backslash);
                            }
                            if (0xD800..0xDC00).contains(&cp) {
                                if self.b.get(self.pos..self.pos + 2) != Some(b"\\u") {
                                    return self.bad_escape(what, backslash);
                                }
                                self.pos += 2;
                                let lo = match self.hex4() {
                                    Some(lo) if (0xDC00..0xE000).contains(&lo) => lo,
                                    _ => return self.bad_escape(what, backslash),
                                };
                                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                            }
                            let Some(ch) = char::from_u32(cp) else {
                                return self.bad_escape(what, backslash);
                            };
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return self.fail("a valid escape sequence"),
                    }
                }
                c => out.push(c),
            }
        }
    }

    fn array(&mut self) -> Result<Value> {
        self.nest()?;
        self.pos += 1;
        let t = self.lua.create_table()?;
        self.skip_ws();
        if self.b.get(self.pos) == Some(&b']') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(Value::Table(t));
        }
        let mut i = 1;
        loop {
            self.skip_ws();
            let v = self.value()?;
            t.raw_set(i, v)?;
            i += 1;
            self.skip_ws();
            match self.b.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    break;
                }
                _ => return self.fail("comma or array end"),
            }
        }
        self.depth -= 1;
        Ok(Value::Table(t))
    }

    fn object(&mut self) -> Result<Value> {
        self.nest()?;
        self.pos += 1;
        let t = self.lua.create_table()?;
        self.skip_ws();
        if self.b.get(self.pos) == Some(&b'}') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(Value::Table(t));
        }
        loop {
            self.skip_ws();
            if self.b.get(self.pos) != Some(&b'"') {
                return self.fail("object key string");
            }
            let k = self.string("object key string")?;
            self.skip_ws();
            if self.b.get(self.pos) != Some(&b':') {
                return self.fail("colon");
            }
            self.pos += 1;
            self.skip_ws();
            let v = self.value()?;
            t.raw_set(self.lua.create_string(&k)?, v)?;
            self.skip_ws();
            match self.b.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return self.fail("comma or object end"),
            }
        }
        self.depth -= 1;
        Ok(Value::Table(t))
    }
}
