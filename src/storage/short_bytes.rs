//! [`ShortBytes`]: the byte strings inside collection values (hash fields and values,
//! set members). Most of them are short (ids, names, numbers), and a separate heap
//! block for each would cost an allocation, allocator rounding and, on every lookup, a
//! dependent cache miss from the table slot to the bytes. Up to [`INLINE_CAP`] bytes
//! live inside the value itself, in the same 24 bytes a boxed slice plus its tag take.

/// Longest string stored inside a [`ShortBytes`] without a heap block.
pub const INLINE_CAP: usize = 22;

/// An immutable byte string: inline when short, otherwise one exact-sized heap block.
#[derive(Clone, PartialEq, Eq)]
pub enum ShortBytes {
    Inline { len: u8, data: [u8; INLINE_CAP] },
    Heap(Box<[u8]>),
}

impl ShortBytes {
    pub fn new(b: &[u8]) -> ShortBytes {
        if b.len() <= INLINE_CAP {
            let mut data = [0u8; INLINE_CAP];
            data[..b.len()].copy_from_slice(b);
            ShortBytes::Inline {
                len: b.len() as u8,
                data,
            }
        } else {
            ShortBytes::Heap(b.into())
        }
    }

    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            ShortBytes::Inline { len, data } => &data[..*len as usize],
            ShortBytes::Heap(b) => b,
        }
    }

    /// Heap bytes owned beyond the inline size.
    pub fn heap_size(&self) -> usize {
        match self {
            ShortBytes::Inline { .. } => 0,
            ShortBytes::Heap(b) => b.len(),
        }
    }
}

impl std::ops::Deref for ShortBytes {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

// Ordered and hashed as the bytes they hold (consistent with the derived `Eq`: the
// inline padding is always zero), so field-keyed maps can be searched with `&[u8]`.
impl std::hash::Hash for ShortBytes {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state)
    }
}

impl PartialOrd for ShortBytes {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ShortBytes {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl std::borrow::Borrow<[u8]> for ShortBytes {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl std::fmt::Debug for ShortBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// Heap bytes a [`ShortBytes`] made from `b` owns.
pub fn heap_len(b: &[u8]) -> usize {
    if b.len() > INLINE_CAP {
        b.len()
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_at_every_length_around_the_inline_limit() {
        for n in [0, 1, INLINE_CAP - 1, INLINE_CAP, INLINE_CAP + 1, 100] {
            let src: Vec<u8> = (0..n as u8).collect();
            let b = ShortBytes::new(&src);
            assert_eq!(b.as_bytes(), &src[..]);
            assert_eq!(&*b, &src[..]);
            assert_eq!(b.heap_size(), heap_len(&src));
            assert_eq!(matches!(b, ShortBytes::Inline { .. }), n <= INLINE_CAP);
        }
    }

    #[test]
    fn is_as_small_as_a_tagged_boxed_slice() {
        assert_eq!(std::mem::size_of::<ShortBytes>(), 24);
    }
}
