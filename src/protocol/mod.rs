//! RESP wire protocol: the request parser (client → server) and the reply
//! encoder (server → client).
//!
//! Both halves are deliberately free of I/O and of any server state so they
//! can be unit-tested, property-tested and fuzzed in isolation.

pub mod parser;
pub mod reply;

pub use parser::{ArgSpan, ParseLimits, ProtocolError, RequestParser};
pub use reply::{format_double_g17, write_i64, write_u64, Protocol, ReplyWriter};
