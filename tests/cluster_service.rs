//! `cluster::service`: a node's identity lives in its nodes.conf (created on the
//! first start, loaded on the next, locked while the node runs, refused when
//! corrupt), and a node killed while its redis-server replica took over comes
//! back from that file as the replica of its replacement.

mod common;

use common::{eventually, free_cluster_port, q, scratch_dir, ReferenceRedis};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::Duration;
use tessera::cluster::membership::{Effect, Membership, Settings};
use tessera::cluster::service::{self, Server, Service, ServiceSettings};
use tessera::util::now_ms;

struct NoServer;

impl Server for NoServer {
    fn effect(&mut self, _effect: Effect, _engine: &Membership) {}
    fn replication(&mut self) -> (u64, u64) {
        (0, 0)
    }
}

fn start(conf: &Path, port: u16) -> Result<Service, String> {
    let settings = ServiceSettings {
        config_file: conf.to_path_buf(),
        bind: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
        bus_port: port + 10000,
        engine: Settings {
            node_timeout: 2000,
            port,
            cport: port + 10000,
            ..Settings::default()
        },
    };
    service::start(settings, Box::new(NoServer), now_ms())
}

#[test]
fn the_identity_is_created_once_kept_locked_and_reloaded() {
    let dir = scratch_dir("cluster_service", "identity");
    let conf = dir.join("nodes.conf");
    let port = free_cluster_port();
    let first = start(&conf, port).expect("a fresh node starts");
    let text = std::fs::read_to_string(&conf).expect("nodes.conf written at once");
    assert!(
        text.starts_with(&format!(
            "{} :{port}@{} myself,master - 0 0 0 connected\n",
            first.name(),
            port + 10000
        )),
        "{text}"
    );
    assert!(
        text.ends_with("vars currentEpoch 0 lastVoteEpoch 0\n"),
        "{text}"
    );

    let second = start(&conf, free_cluster_port())
        .err()
        .expect("the file is locked");
    assert!(
        second.starts_with("Sorry, the cluster configuration file"),
        "{second}"
    );

    let name = first.name();
    drop(first);
    let again = start(&conf, port).expect("restarts from its file");
    assert_eq!(again.name(), name, "the same identity");
    drop(again);

    std::fs::write(&conf, "not a node line\n").expect("write");
    let corrupt = start(&conf, port).err().expect("a corrupt file is refused");
    assert!(
        corrupt.starts_with("Unrecoverable error: corrupted cluster config file."),
        "{corrupt}"
    );
}

#[test]
fn a_master_killed_during_its_replicas_takeover_comes_back_as_its_replica() {
    let args = ["--cluster-node-timeout", "2000"];
    let replica_args = [
        "--cluster-node-timeout",
        "2000",
        "--cluster-replica-validity-factor",
        "0",
    ];
    let (Some(a), Some(b), Some(r)) = (
        ReferenceRedis::start_cluster_node(&args),
        ReferenceRedis::start_cluster_node(&args),
        ReferenceRedis::start_cluster_node(&replica_args),
    ) else {
        eprintln!("redis-server is not installed: skipping");
        return;
    };
    let dir = scratch_dir("cluster_service", "rejoin");
    let conf = dir.join("nodes.conf");
    let port = free_cluster_port();
    let node = start(&conf, port).expect("start");
    let name = node.name();
    node.with_engine(|e| (10923..16384).for_each(|s| assert!(e.add_my_slot(s))));
    let (mut ca, mut cr) = (a.client(), r.client());
    let _: () = q(&mut ca, &["CLUSTER", "ADDSLOTSRANGE", "0", "5460"]);
    let _: () = q(
        &mut b.client(),
        &["CLUSTER", "ADDSLOTSRANGE", "5461", "10922"],
    );
    for other in [b.port, r.port, port] {
        let _: () = q(
            &mut ca,
            &["CLUSTER", "MEET", "127.0.0.1", &other.to_string()],
        );
    }
    let all_known = eventually(Duration::from_secs(15), || {
        let nodes: String = q(&mut cr, &["CLUSTER", "NODES"]);
        nodes.lines().count() == 4 && !nodes.contains("handshake")
    });
    assert!(all_known, "the four never met");
    let _: () = q(&mut cr, &["CLUSTER", "REPLICATE", &name.to_string()]);
    let r_id: String = q(&mut cr, &["CLUSTER", "MYID"]);
    let ok = eventually(Duration::from_secs(15), || {
        node.with_engine(|e| {
            e.state_ok()
                && e.table
                    .iter()
                    .any(|(_, n)| n.name.to_string() == r_id && n.is_replica())
        })
    });
    assert!(ok, "the node never saw the redis-server as its replica");

    // Killed: the replica wins the election and takes the slots.
    drop(node);
    let promoted = eventually(Duration::from_secs(30), || {
        let nodes: String = q(&mut ca, &["CLUSTER", "NODES"]);
        nodes
            .lines()
            .any(|l| l.starts_with(&r_id) && l.contains("master") && l.ends_with("10923-16383"))
    });
    assert!(
        promoted,
        "the redis-server replica was never promoted:\n{}",
        q::<String>(&mut ca, &["CLUSTER", "NODES"])
    );

    // Restarted from its nodes.conf: it claims the slots under its old epoch,
    // learns the newer configuration, and follows the node that has them.
    let node = start(&conf, port).expect("restart");
    assert_eq!(node.name(), name);
    let follows = eventually(Duration::from_secs(20), || {
        node.with_engine(|e| {
            let me = e.table.me();
            me.is_replica()
                && me.slot_count() == 0
                && me
                    .master()
                    .and_then(|m| e.table.get(m))
                    .is_some_and(|m| m.name.to_string() == r_id)
        })
    });
    assert!(follows, "the old master did not come back as a replica");
    let seen = eventually(Duration::from_secs(10), || {
        let nodes: String = q(&mut ca, &["CLUSTER", "NODES"]);
        nodes
            .lines()
            .any(|l| l.starts_with(&name.to_string()) && l.contains(&format!("slave {r_id}")))
    });
    assert!(
        seen,
        "redis-server does not see it as the new master's replica"
    );
    let saved = std::fs::read_to_string(&conf).expect("nodes.conf");
    assert!(
        saved.lines().any(
            |l| l.starts_with(&name.to_string()) && l.contains(&format!("myself,slave {r_id}"))
        ),
        "{saved}"
    );
}
