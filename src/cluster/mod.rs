//! Redis Cluster membership (issue 27), built from the bottom up.
//!
//! Tessera already routes by the 16384 cluster hash slots inside one process
//! (`slot.rs`). This folder makes a Tessera process a member of a real Redis 7.0
//! cluster, speaking its bus byte for byte so Tessera and redis-server nodes can
//! share one cluster. `cluster-enabled` stays refused (config/params.rs) until the
//! server runs all of it:
//!
//! - `wire.rs`: the cluster bus message (`clusterMsg` in Redis's cluster.h), framing,
//!   decoding with Redis's own length checks, and encoding;
//! - `nodes_conf.rs`: `nodes.conf`, the node table as each member saves it, whose
//!   line format is also CLUSTER NODES' reply;
//! - `redirect.rs`: where a keyed command may run (Redis's getNodeByQuery): the
//!   routing table a shard consults, MOVED / ASK / CROSSSLOT / TRYAGAIN /
//!   CLUSTERDOWN and their texts, and the blocked-client redirect;
//! - `nodes.rs`: the node table, the slot map, failure reports and config epochs,
//!   with Redis's bookkeeping rules and no I/O;
//! - `membership.rs`: the bus protocol one node plays over that table (handshake,
//!   gossip, failure detection, slot claims, the cluster state), as an engine fed
//!   events and returning effects, so the I/O layer stays thin and a whole
//!   cluster can be tested on a simulated clock;
//! - `bus.rs`: the thread that owns the bus sockets and runs that engine on them;
//! - `command.rs`: the CLUSTER command family over that engine (Redis 7.0.15's
//!   replies and error texts), pure code a connection calls with the engine;
//! - `service.rs`: this process as a node: nodes.conf locked, loaded or created
//!   and saved, the bus on the cluster port, the routing table shards consult;
//! - `settings.rs`: the `cluster-*` parameters as the node reads them.
//!
//! The server side lives with the server: `server/cluster.rs` starts the node
//! and carries out its effects on the shards, `connection/redirect.rs` is the
//! redirect check of the connection gate, `commands/cluster.rs` the CLUSTER,
//! ASKING, READONLY and READWRITE commands.

pub mod bus;
pub mod command;
pub mod membership;
pub mod nodes;
pub mod nodes_conf;
pub mod redirect;
pub mod service;
pub mod settings;
pub mod wire;

use std::fmt;
use std::sync::OnceLock;

/// This process's node, once `cluster-enabled yes` started it.
static NODE: OnceLock<service::Service> = OnceLock::new();

/// The running node, or None outside cluster mode.
#[inline]
pub fn node() -> Option<&'static service::Service> {
    NODE.get()
}

/// Whether this server runs in cluster mode (one load: the connection gate asks
/// for every command).
#[inline]
pub fn enabled() -> bool {
    NODE.get().is_some()
}

/// Makes `service` the process's node (once, at start).
pub fn install(service: service::Service) {
    if NODE.set(service).is_err() {
        tracing::warn!("a second cluster node was started in one process; ignored");
    }
}

/// The number of hash slots (`CLUSTER_SLOTS`).
pub const SLOTS: usize = 16384;

/// Length of a node ID: 40 hex characters, the size of a SHA-1 in hex.
pub const NAME_LEN: usize = 40;

/// A cluster node's ID as it travels on the bus: 40 bytes. Nodes name themselves
/// with 40 random lowercase hex characters; a name read off the wire is kept as it
/// came (Redis does not check it either), and `NodeName::parse` is the check
/// commands and nodes.conf apply (Redis's verifyClusterNodeId).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeName(pub [u8; NAME_LEN]);

impl NodeName {
    /// The all-zero name: "no master" in a message's `slaveof` field.
    pub const NULL: NodeName = NodeName([0; NAME_LEN]);

    /// A fresh random name (createClusterNode with no name).
    pub fn random() -> NodeName {
        let hex = crate::util::random_hex(NAME_LEN * 4);
        let mut name = [0u8; NAME_LEN];
        name.copy_from_slice(hex.as_bytes());
        NodeName(name)
    }

    /// `text` as a node ID if it is exactly 40 characters of 0-9 and a-f.
    pub fn parse(text: &[u8]) -> Option<NodeName> {
        let valid =
            text.len() == NAME_LEN && text.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !valid {
            return None;
        }
        let mut name = [0u8; NAME_LEN];
        name.copy_from_slice(text);
        Some(NodeName(name))
    }

    pub fn is_null(&self) -> bool {
        self.0 == [0; NAME_LEN]
    }

    pub fn as_bytes(&self) -> &[u8; NAME_LEN] {
        &self.0
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl fmt::Debug for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeName({self})")
    }
}

/// A node's flags, as the bus carries them (`CLUSTER_NODE_*` in cluster.h) and
/// nodes.conf and CLUSTER NODES spell them.
pub mod flags {
    pub const MASTER: u16 = 1;
    pub const REPLICA: u16 = 2;
    /// Possibly failing: this node's own suspicion, not yet agreed.
    pub const PFAIL: u16 = 4;
    /// Failing, by agreement of a majority of masters.
    pub const FAIL: u16 = 8;
    pub const MYSELF: u16 = 16;
    /// Added by MEET or gossip, first PONG not yet received.
    pub const HANDSHAKE: u16 = 32;
    pub const NOADDR: u16 = 64;
    /// Send MEET rather than PING on the next connection.
    pub const MEET: u16 = 128;
    /// A master that may receive a migrating replica.
    pub const MIGRATE_TO: u16 = 256;
    /// A replica that will not try to fail over (`cluster-replica-no-failover`).
    pub const NOFAILOVER: u16 = 512;

    /// The flags in the order and spelling of nodes.conf and CLUSTER NODES
    /// (redisNodeFlagsTable); MEET, MIGRATE_TO and NOFAILOVER's spelling matter
    /// when reading a file, and a node with none of them prints `noflags`.
    pub const NAMES: &[(u16, &str)] = &[
        (MYSELF, "myself"),
        (MASTER, "master"),
        (REPLICA, "slave"),
        (PFAIL, "fail?"),
        (FAIL, "fail"),
        (HANDSHAKE, "handshake"),
        (NOADDR, "noaddr"),
        (NOFAILOVER, "nofailover"),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_names_are_valid_and_differ() {
        let a = NodeName::random();
        let b = NodeName::random();
        assert_ne!(a, b);
        assert_eq!(NodeName::parse(a.as_bytes()), Some(a));
    }

    #[test]
    fn parse_accepts_only_forty_lowercase_hex_characters() {
        assert!(NodeName::parse(&[b'a'; 40]).is_some());
        assert!(NodeName::parse(&[b'a'; 39]).is_none());
        assert!(NodeName::parse(&[b'A'; 40]).is_none());
        assert!(NodeName::parse(&[b'g'; 40]).is_none());
        assert!(NodeName::NULL.is_null());
    }
}
