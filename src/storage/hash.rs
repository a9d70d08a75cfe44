//! The hash value type. (Being written: see the collections issue.)

use super::dump::DumpValue;
use super::limits::EncodingLimits;

#[derive(Debug, Clone, Default)]
pub struct HashValue {}

impl HashValue {
    /// OBJECT ENCODING's name for the current representation.
    pub fn encoding(&self) -> &'static str {
        unimplemented!()
    }

    /// Heap bytes held, for memory accounting.
    pub fn heap_size(&self) -> usize {
        0
    }

    /// The DUMP representation.
    pub fn to_dump(&self) -> DumpValue {
        unimplemented!()
    }

    /// Builds a value from a RESTOREd payload, choosing the encoding by `limits`.
    /// Returns None if the decoded value is not of this type.
    pub fn from_dump(_v: DumpValue, _limits: &EncodingLimits) -> Option<HashValue> {
        None
    }
}
