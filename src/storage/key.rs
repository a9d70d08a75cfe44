//! Keys as stored in the keyspace: up to 22 bytes inline in the entry, longer ones in
//! one exact-sized heap block. Most keys are short, so a lookup usually compares bytes
//! already on the entry's cache line instead of chasing a pointer.

use std::hash::{Hash, Hasher};
use std::ops::Deref;

pub const INLINE_KEY: usize = 22;

#[derive(Clone)]
pub enum CompactKey {
    Inline { len: u8, data: [u8; INLINE_KEY] },
    Heap(Box<[u8]>),
}

impl CompactKey {
    pub fn new(k: &[u8]) -> CompactKey {
        if k.len() <= INLINE_KEY {
            let mut data = [0u8; INLINE_KEY];
            data[..k.len()].copy_from_slice(k);
            CompactKey::Inline {
                len: k.len() as u8,
                data,
            }
        } else {
            CompactKey::Heap(k.into())
        }
    }

    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            CompactKey::Inline { len, data } => &data[..*len as usize],
            CompactKey::Heap(b) => b,
        }
    }

    pub fn heap_size(&self) -> usize {
        match self {
            CompactKey::Inline { .. } => 0,
            CompactKey::Heap(b) => b.len(),
        }
    }
}

impl Deref for CompactKey {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// Hashes exactly like the `[u8]` it holds, so lookups by `&[u8]` find it.
impl Hash for CompactKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state)
    }
}

impl std::fmt::Debug for CompactKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

impl From<&[u8]> for CompactKey {
    fn from(k: &[u8]) -> CompactKey {
        CompactKey::new(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap() {
        for n in [0usize, 1, 22, 23, 100] {
            let k = vec![b'k'; n];
            let c = CompactKey::new(&k);
            assert_eq!(&*c, &k[..]);
            assert_eq!(matches!(c, CompactKey::Inline { .. }), n <= INLINE_KEY);
        }
    }
}
