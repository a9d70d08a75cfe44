//! Tessera: a Redis-compatible, shared-nothing, thread-per-core in-memory data server.
//! See DESIGN.md (in the shared folder) for the architecture this code implements.

pub mod acl;
pub mod clients;
pub mod cluster;
pub mod commands;
pub mod config;
pub mod connection;
pub mod effects;
pub mod observe;
pub mod persistence;
pub mod protocol;
pub mod pubsub;
pub mod replication;
pub mod runtime;
pub mod scripting;
pub mod server;
pub mod shard;
pub mod slot;
pub mod stats;
pub mod storage;
pub mod tls;
pub mod tracking;
pub mod util;
