//! Keyspace, slot tables, value encodings, expiry and the DUMP/RESTORE format.
pub mod dump;
pub mod keyspace;
pub mod value;

pub use keyspace::{Db, Entry, Rng, NO_EXPIRE};
pub use value::{StrValue, Value};
