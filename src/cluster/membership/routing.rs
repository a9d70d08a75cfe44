//! The routing table the shards consult (`redirect::RoutingTable`), built from
//! the engine's view whenever it reports `Effect::TopologyChanged`.

use super::*;
use crate::cluster::redirect::{NodeEndpoint, NodeIndex, RoutingTable};

impl Membership {
    /// Who serves each slot, which of ours are moving, the cluster state and the
    /// settings that bend the redirect rules, as one immutable snapshot.
    pub fn routing_table(&self) -> RoutingTable {
        let ids: Vec<NodeId> = self.table.iter().map(|(id, _)| id).collect();
        let positions: HashMap<NodeId, NodeIndex> = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| (id, NodeIndex(i as u16)))
            .collect();
        let index_of = |id: NodeId| positions.get(&id).copied();
        let nodes = ids
            .iter()
            .filter_map(|&id| self.table.get(id))
            .map(|n| NodeEndpoint {
                ip: n.ip.clone(),
                port: n.port,
                pport: n.pport,
                hostname: n.hostname.clone(),
                replica_of: n.master().filter(|_| n.is_replica()).and_then(index_of),
            })
            .collect();
        let myself = index_of(self.table.myself()).unwrap_or(NodeIndex(0));
        // Node tables are far below NodeIndex's 65535 nodes; should one not be,
        // an empty table routes nothing here rather than mis-routing.
        let mut table = RoutingTable::new(nodes, myself).unwrap_or_else(|_| {
            RoutingTable::new(vec![NodeEndpoint::default()], NodeIndex(0))
                .expect("a one-node table is valid")
        });
        for slot in 0..SLOTS {
            let slot16 = slot as u16;
            let owner = self.table.slot_owner(slot).and_then(index_of);
            let _ = table.set_owner(slot16, owner);
            if let Some(to) = self.table.migrating_to(slot).and_then(index_of) {
                let _ = table.set_migrating(slot16, Some(to));
            }
            if let Some(from) = self.table.importing_from(slot).and_then(index_of) {
                let _ = table.set_importing(slot16, Some(from));
            }
        }
        table.state_ok = self.state_ok;
        table.allow_reads_when_down = self.settings.allow_reads_when_down;
        table.allow_pubsubshard_when_down = self.settings.allow_pubsubshard_when_down;
        table.tls_cluster = self.settings.tls_cluster;
        table.preferred_endpoint = self.settings.preferred_endpoint;
        table
    }
}
