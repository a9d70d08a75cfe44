//! Value representations. Strings are stored compactly as Redis does: integers as
//! integers, short strings inline in the entry, longer ones in one heap block.
//! A `Value` is 16 bytes (a tag and one word), so the keyspace's per-key block stays
//! in jemalloc's 48-byte class for typical cache keys (see `keyspace::Entry`).

use super::hash::HashValue;
use super::list::ListValue;
use super::set::SetValue;
use super::stream::StreamValue;
use super::zset::ZSetValue;
use crate::util::string2ll;

/// Longest string kept inline in the value itself (no heap allocation).
pub const INLINE_CAP: usize = 14;
/// Redis reports strings up to this length, created by SET, as `embstr`.
const EMBSTR_LIMIT: usize = 44;

#[derive(Clone, PartialEq, Eq)]
pub enum StrValue {
    /// A string that is the canonical decimal form of an i64 (OBJECT ENCODING "int").
    Int(i64),
    /// A short string stored in place.
    Inline { len: u8, data: [u8; INLINE_CAP] },
    /// An immutable string in one exact-sized heap block.
    Heap(HeapBytes),
    /// A string that has been modified in place (APPEND, SETRANGE): keeps spare
    /// capacity so repeated appends are amortised, as Redis's raw sds does. Boxed so
    /// the rare mutable form does not make every value (and entry) 8 bytes bigger.
    Raw(Box<Vec<u8>>),
}

/// An exact-sized, immutable heap string behind a thin pointer: a `Box<[u8]>` whose
/// length is kept in 32 bits, so that `StrValue` (and `Value`) fit in 16 bytes.
/// Strings of 4 GiB and more are stored as `StrValue::Raw` instead. Packed to 4-byte
/// alignment so it sits right after the enum's tag (12 bytes at offset 4, not 16 at 8).
#[repr(C, packed(4))]
pub struct HeapBytes {
    ptr: std::ptr::NonNull<u8>,
    len: u32,
}

// SAFETY: HeapBytes uniquely owns its block, exactly as the Box<[u8]> it was made from.
unsafe impl Send for HeapBytes {}
// SAFETY: shared access only reads the bytes.
unsafe impl Sync for HeapBytes {}

impl HeapBytes {
    /// Takes the box apart; gives it back when it is 4 GiB or longer.
    pub fn new(b: Box<[u8]>) -> Result<HeapBytes, Box<[u8]>> {
        let Ok(len) = u32::try_from(b.len()) else {
            return Err(b);
        };
        let ptr = std::ptr::NonNull::from(Box::leak(b)).cast::<u8>();
        Ok(HeapBytes { ptr, len })
    }
}

impl std::ops::Deref for HeapBytes {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr and len come from a live Box<[u8]> this value owns.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len as usize) }
    }
}

impl Drop for HeapBytes {
    fn drop(&mut self) {
        let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len as usize);
        // SAFETY: rebuilds the Box<[u8]> taken apart in `new`, exactly once.
        drop(unsafe { Box::from_raw(slice) });
    }
}

impl Clone for HeapBytes {
    fn clone(&self) -> HeapBytes {
        let copy: Box<[u8]> = Box::from(&**self);
        HeapBytes {
            ptr: std::ptr::NonNull::from(Box::leak(copy)).cast::<u8>(),
            len: self.len,
        }
    }
}

impl PartialEq for HeapBytes {
    fn eq(&self, other: &HeapBytes) -> bool {
        **self == **other
    }
}

impl Eq for HeapBytes {}

impl std::fmt::Debug for StrValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut scratch = [0u8; 24];
        write!(f, "{:?}", String::from_utf8_lossy(self.bytes(&mut scratch)))
    }
}

/// Formats `n` into the tail of `buf`, returning the digits.
pub fn format_i64(n: i64, buf: &mut [u8; 24]) -> &[u8] {
    let mut i = buf.len();
    let mut u = n.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    if n < 0 {
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

impl StrValue {
    /// Chooses the most compact encoding for `b`.
    pub fn from_bytes(b: &[u8]) -> StrValue {
        if let Some(n) = string2ll(b) {
            return StrValue::Int(n);
        }
        Self::from_bytes_no_int(b)
    }

    fn from_bytes_no_int(b: &[u8]) -> StrValue {
        if b.len() <= INLINE_CAP {
            let mut data = [0u8; INLINE_CAP];
            data[..b.len()].copy_from_slice(b);
            StrValue::Inline {
                len: b.len() as u8,
                data,
            }
        } else {
            Self::boxed(b.into())
        }
    }

    /// A heap string, thin if it can be.
    fn boxed(b: Box<[u8]>) -> StrValue {
        match HeapBytes::new(b) {
            Ok(h) => StrValue::Heap(h),
            Err(b) => StrValue::raw(b.into_vec()),
        }
    }

    /// The mutable form (APPEND, SETRANGE, SETBIT, HyperLogLogs).
    pub fn raw(v: Vec<u8>) -> StrValue {
        StrValue::Raw(Box::new(v))
    }

    pub fn from_vec(v: Vec<u8>) -> StrValue {
        if v.len() <= INLINE_CAP || string2ll(&v).is_some() {
            return Self::from_bytes(&v);
        }
        Self::boxed(v.into_boxed_slice())
    }

    /// The string's bytes; integers are formatted into `scratch`.
    #[inline]
    pub fn bytes<'a>(&'a self, scratch: &'a mut [u8; 24]) -> &'a [u8] {
        match self {
            StrValue::Int(n) => format_i64(*n, scratch),
            StrValue::Inline { len, data } => &data[..*len as usize],
            StrValue::Heap(b) => b,
            StrValue::Raw(v) => v,
        }
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut scratch = [0u8; 24];
        self.bytes(&mut scratch).to_vec()
    }

    pub fn len(&self) -> usize {
        match self {
            StrValue::Int(n) => {
                let mut scratch = [0u8; 24];
                format_i64(*n, &mut scratch).len()
            }
            StrValue::Inline { len, .. } => *len as usize,
            StrValue::Heap(b) => b.len(),
            StrValue::Raw(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value as an integer, if it is one in canonical or parseable form.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            StrValue::Int(n) => Some(*n),
            other => {
                let mut scratch = [0u8; 24];
                string2ll(other.bytes(&mut scratch))
            }
        }
    }

    /// Converts to the mutable raw form, for APPEND and SETRANGE.
    pub fn make_raw(&mut self) -> &mut Vec<u8> {
        if !matches!(self, StrValue::Raw(_)) {
            let v = self.to_vec();
            *self = StrValue::raw(v);
        }
        match self {
            StrValue::Raw(v) => v,
            _ => unreachable!("converted to Raw above"),
        }
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            StrValue::Int(_) => "int",
            StrValue::Inline { .. } => "embstr",
            StrValue::Heap(b) if b.len() <= EMBSTR_LIMIT => "embstr",
            StrValue::Heap(_) | StrValue::Raw(_) => "raw",
        }
    }

    /// Heap bytes owned by this value beyond its inline size, for memory accounting.
    pub fn heap_size(&self) -> usize {
        match self {
            StrValue::Heap(b) => b.len(),
            StrValue::Raw(v) => v.capacity() + std::mem::size_of::<Vec<u8>>(),
            _ => 0,
        }
    }
}

/// A value stored under a key. Collections are boxed so the common string case keeps
/// entries small.
#[derive(Clone, Debug)]
pub enum Value {
    Str(StrValue),
    List(Box<ListValue>),
    Hash(Box<HashValue>),
    Set(Box<SetValue>),
    ZSet(Box<ZSetValue>),
    Stream(Box<StreamValue>),
}

impl Value {
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Hash(_) => "hash",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
            Value::Stream(_) => "stream",
        }
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            Value::Str(s) => s.encoding(),
            Value::List(v) => v.encoding(),
            Value::Hash(v) => v.encoding(),
            Value::Set(v) => v.encoding(),
            Value::ZSet(v) => v.encoding(),
            Value::Stream(v) => v.encoding(),
        }
    }

    pub fn heap_size(&self) -> usize {
        match self {
            Value::Str(s) => s.heap_size(),
            Value::List(v) => v.heap_size(),
            Value::Hash(v) => v.heap_size(),
            Value::Set(v) => v.heap_size(),
            Value::ZSet(v) => v.heap_size(),
            Value::Stream(v) => v.heap_size(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_round_trip() {
        let mut s = [0u8; 24];
        for input in [
            &b"123"[..],
            b"-77",
            b"hello",
            &[b'x'; 22],
            &[b'y'; 23],
            &[b'z'; 100],
        ] {
            let v = StrValue::from_bytes(input);
            assert_eq!(v.bytes(&mut s), input);
            assert_eq!(v.len(), input.len());
        }
        assert_eq!(StrValue::from_bytes(b"123").encoding(), "int");
        assert_eq!(StrValue::from_bytes(b"abc").encoding(), "embstr");
        assert_eq!(StrValue::from_bytes(&[b'a'; 44]).encoding(), "embstr");
        assert_eq!(StrValue::from_bytes(&[b'a'; 45]).encoding(), "raw");
        let mut v = StrValue::from_bytes(b"abc");
        v.make_raw().extend_from_slice(b"def");
        assert_eq!(v.encoding(), "raw");
        assert_eq!(v.bytes(&mut s), b"abcdef");
    }
}
