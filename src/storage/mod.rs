//! Keyspace, slot tables, value encodings, expiry and the RDB format (DUMP/RESTORE
//! payloads and snapshot files).
pub mod entry;
pub mod events;
pub mod evict;
pub mod field_ttl;
pub mod hash;
pub mod hll;
pub mod keyspace;
pub mod limits;
pub mod list;
pub mod memory;
pub mod rdb;
pub mod set;
pub mod short_bytes;
pub mod snapshot;
pub mod stream;
pub mod value;
pub mod zset;

pub use keyspace::{Db, Entry, Rng, NO_EXPIRE};
pub use value::{StrValue, Value};
