//! C's `long double`, for INCRBYFLOAT and HINCRBYFLOAT.
//!
//! Redis parses their operands with strtold, adds them as `long double` (80-bit
//! extended precision on x86-64) and prints the result with `%.17Lf`, trailing zeros
//! trimmed. Done in f64, `SET k 3.14` then `INCRBYFLOAT k 1.5` answers
//! `4.640000000000001` where Redis answers `4.64`, and near 2^63 every digit differs.
//! Rust has no such type, so the few steps run in C (src/util/c/long_double.c, built
//! by build.rs) with the platform's own libc, as redis-server does; the value travels
//! as its 16 bytes of storage.

use std::os::raw::{c_char, c_int};

/// Redis's MAX_LONG_DOUBLE_CHARS: longer operands are refused, and the formatted
/// result must fit.
pub const MAX_CHARS: usize = 5 * 1024;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct LongDouble {
    bytes: [u8; 16],
}

extern "C" {
    fn tessera_ld_parse(s: *const c_char, len: usize, out: *mut LongDouble) -> c_int;
    fn tessera_ld_from_i64(n: i64, out: *mut LongDouble);
    fn tessera_ld_add(a: *const LongDouble, b: *const LongDouble, out: *mut LongDouble);
    fn tessera_ld_nan_or_inf(v: *const LongDouble) -> c_int;
    fn tessera_ld_format_fixed17(v: *const LongDouble, buf: *mut c_char, len: usize) -> c_int;
}

const ZERO: LongDouble = LongDouble { bytes: [0; 16] };

impl LongDouble {
    /// Parses `text` as Redis's string2ld: strtold's syntax (hex floats and "inf"
    /// included), no leading space, no trailing bytes, no NaN, no overflow and no
    /// underflow to zero, fewer than `MAX_CHARS` bytes.
    pub fn parse(text: &[u8]) -> Option<LongDouble> {
        if text.is_empty() || text.len() >= MAX_CHARS || text.contains(&0) {
            return None;
        }
        // On the stack, NUL-terminated, as Redis's string2ld copies it.
        let mut c_text = [0u8; MAX_CHARS];
        c_text[..text.len()].copy_from_slice(text);
        let mut out = ZERO;
        // SAFETY: `c_text` is NUL-terminated right after its `text.len()` bytes, and
        // `out` is a valid place for the result.
        let ok = unsafe { tessera_ld_parse(c_text.as_ptr().cast(), text.len(), &mut out) };
        (ok == 1).then_some(out)
    }

    pub fn from_i64(n: i64) -> LongDouble {
        let mut out = ZERO;
        // SAFETY: `out` is a valid place for the result.
        unsafe { tessera_ld_from_i64(n, &mut out) };
        out
    }

    pub fn add(&self, other: &LongDouble) -> LongDouble {
        let mut out = ZERO;
        // SAFETY: both operands were written by the C side; `out` is valid.
        unsafe { tessera_ld_add(self, other, &mut out) };
        out
    }

    pub fn is_nan_or_infinite(&self) -> bool {
        // SAFETY: the value was written by the C side.
        unsafe { tessera_ld_nan_or_inf(self) != 0 }
    }

    /// Redis's ld2string(LD_STR_HUMAN) of a finite value: `%.17Lf`, trailing zeros
    /// after the point and a bare point dropped, "-0" as "0". Appended to `out`.
    pub fn format_human(&self, out: &mut Vec<u8>) {
        let mut buf = [0u8; MAX_CHARS];
        // SAFETY: `buf` holds `MAX_CHARS` bytes, which snprintf never passes.
        let needed = unsafe { tessera_ld_format_fixed17(self, buf.as_mut_ptr().cast(), MAX_CHARS) };
        let Ok(len) = usize::try_from(needed) else {
            return;
        };
        if len + 1 > MAX_CHARS {
            // Redis's ld2string fails, and the reply is an empty string. (The
            // largest long double needs under 5,000 characters.)
            return;
        }
        let mut text = &buf[..len];
        if text.contains(&b'.') {
            while let [rest @ .., b'0'] = text {
                text = rest;
            }
            if let [rest @ .., b'.'] = text {
                text = rest;
            }
        }
        if text == b"-0" {
            text = b"0";
        }
        out.extend_from_slice(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incr(a: &str, b: &str) -> Option<String> {
        let sum = LongDouble::parse(a.as_bytes())?.add(&LongDouble::parse(b.as_bytes())?);
        if sum.is_nan_or_infinite() {
            return None;
        }
        let mut out = Vec::new();
        sum.format_human(&mut out);
        String::from_utf8(out).ok()
    }

    #[test]
    fn sums_print_as_redis_prints_them() {
        // Each pair as redis-server 7.0.15 answers it on x86-64.
        assert_eq!(incr("3.14", "1.5").as_deref(), Some("4.64"));
        assert_eq!(incr("10.5", "0.1").as_deref(), Some("10.6"));
        assert_eq!(incr("5.0e3", "2.0e2").as_deref(), Some("5200"));
        assert_eq!(incr("0.1", "0.2").as_deref(), Some("0.3"));
        assert_eq!(incr("1", "-1.1").as_deref(), Some("-0.1"));
        assert_eq!(
            incr("9223372036854775807", "0").as_deref(),
            Some("9223372036854775807")
        );
        assert_eq!(incr("-0", "0").as_deref(), Some("0"));
        assert_eq!(incr("0x10", "1").as_deref(), Some("17"));
    }

    #[test]
    fn parsing_refuses_what_string2ld_refuses() {
        for bad in [
            "", " 1", "1 ", "1x", "nan", "-nan", "1e99999", "1e-99999", "abc", "1\0",
        ] {
            assert!(LongDouble::parse(bad.as_bytes()).is_none(), "{bad:?}");
        }
        assert!(LongDouble::parse(&vec![b'1'; MAX_CHARS]).is_none());
        for good in ["inf", "-inf", "+1.5", "1e4000", "0x1p-3", "4.9e-4940"] {
            assert!(LongDouble::parse(good.as_bytes()).is_some(), "{good:?}");
        }
        assert!(LongDouble::parse(b"inf").is_some_and(|v| v.is_nan_or_infinite()));
    }

    #[test]
    fn big_values_print_in_full() {
        let v = LongDouble::parse(b"1e4000").expect("parses");
        let mut out = Vec::new();
        v.format_human(&mut out);
        // As redis-server prints it: 1e4000 is not exact in 64 bits of mantissa.
        assert_eq!(out.len(), 4000);
        assert!(out.starts_with(b"9999999999999999999965463873099623784932"));
    }
}
