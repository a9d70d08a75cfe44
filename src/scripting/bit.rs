//! The `bit` library (LuaBitOp's API): 32-bit operations on Lua numbers, whose
//! results are signed 32-bit integers.

use mlua::{Lua, MultiValue, Result, Table, Value};

/// A Lua number (or numeric string) argument.
pub fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(i) => Some(*i as f64),
        Value::Number(n) => Some(*n),
        Value::String(s) => s.to_str().ok()?.trim().parse::<f64>().ok(),
        _ => None,
    }
}

/// LuaBitOp's normalisation: the number modulo 2^32, as a signed 32-bit value.
fn tobit(n: f64) -> i32 {
    let m = n.round_ties_even().rem_euclid(4_294_967_296.0);
    (m as u64) as u32 as i32
}

fn arg(args: &MultiValue, i: usize, fname: &str) -> Result<i32> {
    match args.get(i).and_then(number) {
        Some(n) => Ok(tobit(n)),
        None => Err(mlua::Error::RuntimeError(format!(
            "bad argument #{} to '{fname}' (number expected, got {})",
            i + 1,
            args.get(i).map_or("no value", |v| v.type_name())
        ))),
    }
}

fn fold(lua: &Lua, name: &'static str, op: fn(i32, i32) -> i32) -> Result<mlua::Function> {
    super::lib_fn(lua, move |_, args: MultiValue| {
        let mut acc = arg(&args, 0, name)?;
        for i in 1..args.len() {
            acc = op(acc, arg(&args, i, name)?);
        }
        Ok(acc as f64)
    })
}

fn shift(lua: &Lua, name: &'static str, op: fn(i32, u32) -> i32) -> Result<mlua::Function> {
    super::lib_fn(lua, move |_, args: MultiValue| {
        let x = arg(&args, 0, name)?;
        let n = arg(&args, 1, name)? as u32 & 31;
        Ok(op(x, n) as f64)
    })
}

pub fn open(lua: &Lua) -> Result<Table> {
    let t = lua.create_table()?;
    t.set(
        "tobit",
        super::lib_fn(
            lua,
            |_, args: MultiValue| Ok(arg(&args, 0, "tobit")? as f64),
        )?,
    )?;
    t.set(
        "bnot",
        super::lib_fn(
            lua,
            |_, args: MultiValue| Ok(!arg(&args, 0, "bnot")? as f64),
        )?,
    )?;
    t.set("band", fold(lua, "band", |a, b| a & b)?)?;
    t.set("bor", fold(lua, "bor", |a, b| a | b)?)?;
    t.set("bxor", fold(lua, "bxor", |a, b| a ^ b)?)?;
    t.set(
        "lshift",
        shift(lua, "lshift", |x, n| ((x as u32) << n) as i32)?,
    )?;
    t.set(
        "rshift",
        shift(lua, "rshift", |x, n| ((x as u32) >> n) as i32)?,
    )?;
    t.set("arshift", shift(lua, "arshift", |x, n| x >> n)?)?;
    t.set(
        "rol",
        shift(lua, "rol", |x, n| (x as u32).rotate_left(n) as i32)?,
    )?;
    t.set(
        "ror",
        shift(lua, "ror", |x, n| (x as u32).rotate_right(n) as i32)?,
    )?;
    t.set(
        "bswap",
        super::lib_fn(lua, |_, args: MultiValue| {
            Ok(arg(&args, 0, "bswap")?.swap_bytes() as f64)
        })?,
    )?;
    t.set(
        "tohex",
        super::lib_fn(lua, |_, args: MultiValue| {
            let x = arg(&args, 0, "tohex")? as u32;
            let n = if args.len() > 1 {
                arg(&args, 1, "tohex")?
            } else {
                8
            };
            let upper = n < 0;
            let digits = n.unsigned_abs().min(8) as usize;
            let s = if upper {
                format!("{x:08X}")
            } else {
                format!("{x:08x}")
            };
            Ok(s[8 - digits..].to_string())
        })?,
    )?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::tobit;

    #[test]
    fn tobit_wraps() {
        assert_eq!(tobit(4294967295.0), -1);
        assert_eq!(tobit(2147483648.0), i32::MIN);
        assert_eq!(tobit(-1.0), -1);
        assert_eq!(tobit(1.0), 1);
    }
}
