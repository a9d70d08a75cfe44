//! Type conversion between RESP replies and Lua values, with Redis 7.0's rules.
//!
//! RESP -> Lua (a command's reply inside the script): integer -> number, bulk ->
//! string, null -> false (RESP3 null -> nil), array -> table, status -> {ok=...},
//! error -> {err=...}; RESP3 map -> {map={...}}, set -> {set={k=true}}, double ->
//! {double=n}, big number -> {big_number=s}, verbatim -> {verbatim_string={format,
//! string}}, boolean -> boolean; attributes are skipped.
//!
//! Lua -> RESP (the script's result): string -> bulk, number -> integer (truncated),
//! true -> 1 (RESP3 #t), false/nil -> null (RESP3 #f for false), tables -> the err /
//! ok / double / big_number / verbatim_string / map / set forms, else an array that
//! stops at the first nil. Fields are read raw, so metatables never run.

use mlua::{Lua, Result, Table, Value};

use crate::protocol::reply::ReplyWriter;

/// A `{err = msg}` table.
pub fn err_table(lua: &Lua, msg: &str) -> Result<Value> {
    let t = lua.create_table()?;
    t.raw_set("err", msg)?;
    Ok(Value::Table(t))
}

/// Parses one reply; returns it and whether it is an error.
pub fn resp_to_lua(lua: &Lua, b: &[u8]) -> Result<(Value, bool)> {
    let mut p = Parser { b, pos: 0 };
    let is_err = b.first() == Some(&b'-');
    let v = p.value(lua)?;
    Ok((v, is_err))
}

struct Parser<'a> {
    b: &'a [u8],
    pos: usize,
}

fn bad<T>() -> Result<T> {
    Err(mlua::Error::RuntimeError(
        "protocol error in command reply".into(),
    ))
}

impl Parser<'_> {
    fn line(&mut self) -> Result<&[u8]> {
        let rest = &self.b[self.pos.min(self.b.len())..];
        let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
            return bad();
        };
        self.pos += end + 2;
        Ok(&rest[..end])
    }

    fn int(&mut self) -> Result<i64> {
        let l = self.line()?;
        match std::str::from_utf8(l)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
        {
            Some(n) => Ok(n),
            None => bad(),
        }
    }

    fn bulk(&mut self, len: i64) -> Result<&[u8]> {
        let n = len as usize;
        if len < 0 || self.pos + n + 2 > self.b.len() {
            return bad();
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n + 2;
        Ok(s)
    }

    fn wrap(lua: &Lua, key: &str, v: Value) -> Result<Value> {
        let t = lua.create_table()?;
        t.raw_set(key, v)?;
        Ok(Value::Table(t))
    }

    fn value(&mut self, lua: &Lua) -> Result<Value> {
        let Some(&kind) = self.b.get(self.pos) else {
            return bad();
        };
        self.pos += 1;
        match kind {
            b':' => Ok(Value::Number(self.int()? as f64)),
            b'$' => {
                let n = self.int()?;
                if n < 0 {
                    return Ok(Value::Boolean(false));
                }
                Ok(Value::String(lua.create_string(self.bulk(n)?)?))
            }
            b'+' => {
                let s = lua.create_string(self.line()?)?;
                Self::wrap(lua, "ok", Value::String(s))
            }
            b'-' => {
                let s = lua.create_string(self.line()?)?;
                Self::wrap(lua, "err", Value::String(s))
            }
            b'*' | b'~' | b'>' => {
                let n = self.int()?;
                if n < 0 {
                    return Ok(Value::Boolean(false));
                }
                let t = lua.create_table()?;
                for i in 1..=n {
                    let v = self.value(lua)?;
                    if kind == b'~' {
                        t.raw_set(v, true)?;
                    } else {
                        t.raw_set(i, v)?;
                    }
                }
                if kind == b'~' {
                    Self::wrap(lua, "set", Value::Table(t))
                } else {
                    Ok(Value::Table(t))
                }
            }
            b'%' => {
                let n = self.int()?;
                let t = lua.create_table()?;
                for _ in 0..n {
                    let k = self.value(lua)?;
                    let v = self.value(lua)?;
                    t.raw_set(k, v)?;
                }
                Self::wrap(lua, "map", Value::Table(t))
            }
            b'|' => {
                // Attributes are not exposed to scripts: skip them, keep the reply.
                let n = self.int()?;
                for _ in 0..2 * n {
                    self.value(lua)?;
                }
                self.value(lua)
            }
            b'_' => {
                self.line()?;
                Ok(Value::Nil)
            }
            b'#' => Ok(Value::Boolean(self.line()? == b"t")),
            b',' => {
                let l = self.line()?;
                let s = std::str::from_utf8(l).unwrap_or("0");
                let d = crate::commands::parse_f64(l).unwrap_or(match s {
                    "nan" | "-nan" => f64::NAN,
                    _ => 0.0,
                });
                Self::wrap(lua, "double", Value::Number(d))
            }
            b'(' => {
                let s = lua.create_string(self.line()?)?;
                Self::wrap(lua, "big_number", Value::String(s))
            }
            b'=' => {
                let n = self.int()?;
                let body = self.bulk(n)?;
                let (fmt, text) = if body.len() >= 4 {
                    (&body[..3], &body[4..])
                } else {
                    (&b"txt"[..], body)
                };
                let t = lua.create_table()?;
                t.raw_set("format", lua.create_string(fmt)?)?;
                t.raw_set("string", lua.create_string(text)?)?;
                Self::wrap(lua, "verbatim_string", Value::Table(t))
            }
            _ => bad(),
        }
    }
}

/// Deepest table nesting a reply may have (Redis stops at its Lua stack limit).
const MAX_DEPTH: usize = 1000;

/// Lua number -> Redis integer: C's (long long) cast as x86-64 does it (Redis's
/// builds): NaN and values out of range give the "integer indefinite" LLONG_MIN.
fn to_int(n: f64) -> i64 {
    if !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&n) {
        i64::MIN
    } else {
        n as i64
    }
}

fn field(t: &Table, k: &str) -> Value {
    t.raw_get::<Value>(k).unwrap_or(Value::Nil)
}

/// An error message as Redis replies it: the text of `{err=...}`.
pub fn error_text(msg: &[u8]) -> String {
    String::from_utf8_lossy(msg).into_owned()
}

/// Writes the script's result (or a nested element of it) as a reply. A boolean
/// follows the protocol the *script* chose (redis.setresp), as script_lua.c does:
/// under RESP2 true is `:1` and false a null; under RESP3 both are booleans, which a
/// RESP2 client receives as `:1` / `:0`.
pub fn lua_to_resp(v: &Value, w: &mut ReplyWriter, depth: usize, lua_resp3: bool) {
    if depth > MAX_DEPTH {
        w.error("ERR reached lua stack limit");
        return;
    }
    match v {
        Value::String(s) => w.bulk(&s.as_bytes()),
        Value::Boolean(true) if !lua_resp3 => w.integer(1),
        Value::Boolean(b) if lua_resp3 => w.boolean(*b),
        Value::Integer(i) => w.integer(*i),
        Value::Number(n) => w.integer(to_int(*n)),
        Value::Table(t) => table_to_resp(t, w, depth, lua_resp3),
        _ => w.null(),
    }
}

fn table_to_resp(t: &Table, w: &mut ReplyWriter, depth: usize, lua_resp3: bool) {
    if let Value::String(e) = field(t, "err") {
        let msg = error_text(&e.as_bytes());
        w.error(&format!("-{msg}"));
        return;
    }
    if let Value::String(s) = field(t, "ok") {
        w.simple(&String::from_utf8_lossy(&s.as_bytes()));
        return;
    }
    match field(t, "double") {
        Value::Number(n) => return w.double(n),
        Value::Integer(i) => return w.double(i as f64),
        _ => {}
    }
    if let Value::String(s) = field(t, "big_number") {
        let text = String::from_utf8_lossy(&s.as_bytes()).replace(['\r', '\n'], " ");
        w.big_number(&text);
        return;
    }
    if let Value::Table(v) = field(t, "verbatim_string") {
        if let (Value::String(f), Value::String(s)) = (field(&v, "format"), field(&v, "string")) {
            w.verbatim(&String::from_utf8_lossy(&f.as_bytes()), &s.as_bytes());
            return;
        }
    }
    if let Value::Table(m) = field(t, "map") {
        let pairs: Vec<(Value, Value)> = m.pairs::<Value, Value>().filter_map(|p| p.ok()).collect();
        w.map_len(pairs.len());
        for (k, v) in &pairs {
            lua_to_resp(k, w, depth + 1, lua_resp3);
            lua_to_resp(v, w, depth + 1, lua_resp3);
        }
        return;
    }
    if let Value::Table(s) = field(t, "set") {
        let keys: Vec<Value> = s
            .pairs::<Value, Value>()
            .filter_map(|p| p.ok().map(|(k, _)| k))
            .collect();
        w.set_len(keys.len());
        for k in &keys {
            lua_to_resp(k, w, depth + 1, lua_resp3);
        }
        return;
    }
    let mut items = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(v) => items.push(v),
        }
    }
    w.array_len(items.len());
    for v in &items {
        lua_to_resp(v, w, depth + 1, lua_resp3);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Converts `reply` and describes the Lua value with a small Lua serializer.
    fn show(lua: &Lua, reply: &[u8]) -> Result<String> {
        let (v, _) = resp_to_lua(lua, reply)?;
        let dump: mlua::Function = lua
            .load(
                r#"
                local function dump(v)
                  if type(v) ~= 'table' then return type(v) .. ':' .. tostring(v) end
                  local keys = {}
                  for k in pairs(v) do keys[#keys + 1] = k end
                  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
                  local parts = {}
                  for _, k in ipairs(keys) do parts[#parts + 1] = dump(k) .. '=' .. dump(v[k]) end
                  return '{' .. table.concat(parts, ',') .. '}'
                end
                return dump
                "#,
            )
            .eval()?;
        dump.call(v)
    }

    #[test]
    fn every_reply_type_becomes_redis_s_lua_value() {
        let lua = Lua::new();
        let cases: &[(&[u8], &str)] = &[
            (b":42\r\n", "number:42"),
            (b"$3\r\nfoo\r\n", "string:foo"),
            (b"$0\r\n\r\n", "string:"),
            (b"$-1\r\n", "boolean:false"),
            (b"*-1\r\n", "boolean:false"),
            (b"+OK\r\n", "{string:ok=string:OK}"),
            (b"-ERR bad\r\n", "{string:err=string:ERR bad}"),
            (
                b"*3\r\n:1\r\n$1\r\na\r\n*1\r\n+x\r\n",
                "{number:1=number:1,number:2=string:a,number:3={number:1={string:ok=string:x}}}",
            ),
            (b"*0\r\n", "{}"),
            (b"_\r\n", "nil:nil"),
            (b"#t\r\n", "boolean:true"),
            (b"#f\r\n", "boolean:false"),
            (b",1.5\r\n", "{string:double=number:1.5}"),
            (b"(123\r\n", "{string:big_number=string:123}"),
            (
                b"%1\r\n$1\r\nk\r\n:7\r\n",
                "{string:map={string:k=number:7}}",
            ),
            (b"~1\r\n$1\r\nm\r\n", "{string:set={string:m=boolean:true}}"),
            (
                b"=8\r\ntxt:abcd\r\n",
                "{string:verbatim_string={string:format=string:txt,string:string=string:abcd}}",
            ),
            (b"|1\r\n+a\r\n+b\r\n:5\r\n", "number:5"),
        ];
        for (reply, want) in cases {
            let got = show(&lua, reply).unwrap_or_else(|e| panic!("{reply:?}: {e}"));
            assert_eq!(&got, want, "{}", String::from_utf8_lossy(reply));
        }
        // The error flag comes from the reply's first byte.
        assert!(resp_to_lua(&lua, b"-ERR x\r\n")
            .map(|(_, e)| e)
            .unwrap_or(false));
        assert!(!resp_to_lua(&lua, b"+OK\r\n")
            .map(|(_, e)| e)
            .unwrap_or(true));
    }

    #[test]
    fn malformed_replies_are_errors_and_leave_the_vm_usable() {
        let lua = Lua::new();
        let bad: &[&[u8]] = &[
            b"",
            b"+OK",
            b":x\r\n",
            b"$5\r\nab\r\n",
            b"*2\r\n:1\r\n",
            b"?\r\n",
            b"$-",
        ];
        for reply in bad {
            let e = resp_to_lua(&lua, reply).err();
            let text = e.map(|e| e.to_string()).unwrap_or_default();
            assert!(text.contains("protocol error"), "{reply:?}: {text}");
        }
        assert_eq!(show(&lua, b":1\r\n").ok().as_deref(), Some("number:1"));
    }
}
