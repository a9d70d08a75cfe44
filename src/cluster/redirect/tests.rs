//! The routing rules one by one against a fixed cluster, every error text, and a
//! model: for random small tables and queries, `route` and `redirect_blocked` agree
//! with a plain restatement of Redis's rules, and nothing panics.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;

// The fixture cluster: A (0) and B (1) are masters, RA (2) replicates A, RB (3)
// replicates B.
const A: NodeIndex = NodeIndex(0);
const B: NodeIndex = NodeIndex(1);
const RA: NodeIndex = NodeIndex(2);

/// Slots of the fixture: A serves MINE, 0, 16383, MIGRATING; B serves THEIRS and
/// IMPORTING; UNBOUND has no owner.
const MINE: u16 = 100;
const THEIRS: u16 = 3999;
const UNBOUND: u16 = 7000;
/// A's slot, migrating to B.
const MIGRATING: u16 = 200;
/// B's slot, imported by A from B.
const IMPORTING: u16 = 300;
/// B's slot with a stale MIGRATING entry at A (A does not serve it).
const STALE_MIGRATING: u16 = 400;

fn endpoint(ip: &str, port: u16, hostname: &str, replica_of: Option<NodeIndex>) -> NodeEndpoint {
    NodeEndpoint {
        ip: ip.to_owned(),
        port,
        pport: 0,
        hostname: hostname.to_owned(),
        replica_of,
    }
}

fn fixture(myself: NodeIndex) -> RoutingTable {
    let nodes = vec![
        endpoint("127.0.0.1", 6379, "node-a.example", None),
        endpoint("127.0.0.1", 6381, "node-b.example", None),
        endpoint("127.0.0.1", 6380, "", Some(A)),
        endpoint("127.0.0.1", 6382, "", Some(B)),
    ];
    let mut t = RoutingTable::new(nodes, myself).expect("fixture table");
    for slot in [0, MINE, 16383, MIGRATING] {
        t.set_owner(slot, Some(A)).expect("slot");
    }
    for slot in [THEIRS, IMPORTING, STALE_MIGRATING] {
        t.set_owner(slot, Some(B)).expect("slot");
    }
    if myself == A {
        t.set_migrating(MIGRATING, Some(B)).expect("migrating");
        t.set_importing(IMPORTING, Some(B)).expect("importing");
        t.set_migrating(STALE_MIGRATING, Some(B))
            .expect("migrating");
    }
    t.state_ok = true;
    t
}

/// Routes `keys` with `present` as the keys this node holds; also returns the keys
/// looked up, in order.
fn run(
    t: &RoutingTable,
    q: &Query,
    keys: &[(u16, &str)],
    present: &[&str],
) -> (Route, Vec<String>) {
    let mut looked_up = Vec::new();
    let mut exists = |key: &[u8]| {
        let key = String::from_utf8_lossy(key).into_owned();
        let found = present.contains(&key.as_str());
        looked_up.push(key);
        found
    };
    let route = route(
        t,
        q,
        keys.iter().map(|&(s, k)| (s, k.as_bytes())),
        &mut exists,
    );
    (route, looked_up)
}

fn read() -> Query {
    Query::default()
}

fn write() -> Query {
    Query {
        write: true,
        ..Query::default()
    }
}

fn exec(queued_write: bool) -> Query {
    let mut q = Query {
        kind: CommandKind::Exec { queued_write },
        ..Query::default()
    };
    q.client.in_multi = true;
    q
}

fn shard_pubsub() -> Query {
    Query {
        kind: CommandKind::ShardPubSub,
        ..Query::default()
    }
}

fn migrate() -> Query {
    Query {
        kind: CommandKind::Migrate,
        write: true,
        ..Query::default()
    }
}

fn asking(mut q: Query) -> Query {
    q.client.asking = true;
    q
}

fn readonly(mut q: Query) -> Query {
    q.client.readonly = true;
    q
}

struct Case {
    name: &'static str,
    myself: NodeIndex,
    /// Changes to the fixture's settings.
    tweak: fn(&mut RoutingTable),
    query: Query,
    keys: &'static [(u16, &'static str)],
    present: &'static [&'static str],
    want: Route,
}

fn as_is(_: &mut RoutingTable) {}

fn down(t: &mut RoutingTable) {
    t.state_ok = false;
}

fn down_reads_allowed(t: &mut RoutingTable) {
    t.state_ok = false;
    t.allow_reads_when_down = true;
}

fn down_no_pubsub(t: &mut RoutingTable) {
    t.state_ok = false;
    t.allow_reads_when_down = true;
    t.allow_pubsubshard_when_down = false;
}

fn check(cases: &[Case]) {
    for c in cases {
        let mut t = fixture(c.myself);
        (c.tweak)(&mut t);
        let (got, _) = run(&t, &c.query, c.keys, c.present);
        assert_eq!(got, c.want, "{}", c.name);
    }
}

fn case(
    name: &'static str,
    query: Query,
    keys: &'static [(u16, &'static str)],
    want: Route,
) -> Case {
    Case {
        name,
        myself: A,
        tweak: as_is,
        query,
        keys,
        present: &[],
        want,
    }
}

fn moved(slot: u16, node: NodeIndex) -> Route {
    Route::Moved { slot, node }
}

#[test]
fn keys_in_a_slot_served_here_run_here() {
    check(&[
        case("one key", read(), &[(MINE, "k")], Route::Local),
        case("slot 0", write(), &[(0, "k")], Route::Local),
        case("slot 16383", write(), &[(16383, "k")], Route::Local),
        case(
            "two keys, one slot",
            write(),
            &[(MINE, "a"), (MINE, "b")],
            Route::Local,
        ),
        case(
            "the same key twice",
            write(),
            &[(MINE, "a"), (MINE, "a")],
            Route::Local,
        ),
    ]);
}

#[test]
fn keys_in_a_slot_served_elsewhere_are_moved() {
    check(&[
        case("read", read(), &[(THEIRS, "k")], moved(THEIRS, B)),
        case("write", write(), &[(THEIRS, "k")], moved(THEIRS, B)),
        // MIGRATING is only meaningful for a slot this node serves.
        case(
            "stale migrating",
            read(),
            &[(STALE_MIGRATING, "k")],
            moved(STALE_MIGRATING, B),
        ),
    ]);
}

#[test]
fn commands_without_keys_run_here_whatever_the_state() {
    let mut c = case("no keys", write(), &[], Route::Local);
    c.tweak = down;
    check(&[c, case("no keys, state ok", read(), &[], Route::Local)]);
}

#[test]
fn keys_in_two_slots_are_cross_slot() {
    check(&[
        case(
            "mine and mine",
            read(),
            &[(MINE, "a"), (0, "b")],
            Route::CrossSlot,
        ),
        case(
            "mine and theirs",
            read(),
            &[(MINE, "a"), (THEIRS, "b")],
            Route::CrossSlot,
        ),
        case(
            "theirs and mine",
            read(),
            &[(THEIRS, "a"), (MINE, "b")],
            Route::CrossSlot,
        ),
        case(
            "first and last slot",
            write(),
            &[(0, "a"), (16383, "b")],
            Route::CrossSlot,
        ),
        // An unserved slot after the first key is just another slot.
        case(
            "then unbound",
            read(),
            &[(MINE, "a"), (UNBOUND, "b")],
            Route::CrossSlot,
        ),
    ]);
}

#[test]
fn an_unserved_first_slot_is_cluster_down_unbound() {
    let mut down_too = case(
        "even when down",
        write(),
        &[(UNBOUND, "a")],
        Route::DownUnbound,
    );
    down_too.tweak = down;
    check(&[
        case("one key", read(), &[(UNBOUND, "a")], Route::DownUnbound),
        // Redis stops at the first key: unbound beats a later cross-slot key.
        case(
            "before cross slot",
            read(),
            &[(UNBOUND, "a"), (MINE, "b")],
            Route::DownUnbound,
        ),
        down_too,
    ]);
}

#[test]
fn slots_past_the_last_are_treated_as_unserved() {
    check(&[
        case("16384 first", read(), &[(16384, "a")], Route::DownUnbound),
        case(
            "u16::MAX first",
            read(),
            &[(u16::MAX, "a")],
            Route::DownUnbound,
        ),
        case(
            "16384 second",
            read(),
            &[(MINE, "a"), (16384, "b")],
            Route::CrossSlot,
        ),
    ]);
}

#[test]
fn exec_routes_the_keys_of_every_queued_command() {
    let mut outside_multi = exec(false);
    outside_multi.client.in_multi = false;
    check(&[
        case(
            "all mine",
            exec(true),
            &[(MINE, "a"), (MINE, "b")],
            Route::Local,
        ),
        // One queued command's keys in another slot spoil the whole transaction.
        case(
            "one cross-slot command",
            exec(true),
            &[(MINE, "a"), (MINE, "a"), (THEIRS, "c")],
            Route::CrossSlot,
        ),
        case(
            "all theirs",
            exec(false),
            &[(THEIRS, "a")],
            moved(THEIRS, B),
        ),
        case("no keyed command", exec(true), &[], Route::Local),
        // EXEC without MULTI only errors; it is not redirected.
        case(
            "outside MULTI",
            outside_multi,
            &[(THEIRS, "a")],
            Route::Local,
        ),
    ]);
}

#[test]
fn a_down_cluster_refuses_keyed_commands() {
    let cases = [
        (
            "read, reads refused",
            down as fn(&mut RoutingTable),
            read(),
            Route::DownState,
        ),
        ("write, reads refused", down, write(), Route::DownState),
        (
            "read, reads allowed",
            down_reads_allowed,
            read(),
            Route::Local,
        ),
        (
            "write, reads allowed",
            down_reads_allowed,
            write(),
            Route::DownReadOnlyState,
        ),
        // Redis judges EXEC by EXEC's own flags here: queued writes (refused when
        // they were queued, had the cluster been down then) do not refuse it.
        (
            "exec with writes, reads allowed",
            down_reads_allowed,
            exec(true),
            Route::Local,
        ),
        ("exec, reads refused", down, exec(false), Route::DownState),
    ];
    for (name, tweak, query, want) in cases {
        check(&[Case {
            name,
            myself: A,
            tweak,
            query,
            keys: &[(MINE, "k")],
            present: &[],
            want,
        }]);
    }
    // The state is checked before the owner: a write elsewhere is refused, a read
    // elsewhere moved.
    check(&[
        Case {
            tweak: down_reads_allowed,
            ..case(
                "write elsewhere",
                write(),
                &[(THEIRS, "k")],
                Route::DownReadOnlyState,
            )
        },
        Case {
            tweak: down_reads_allowed,
            ..case("read elsewhere", read(), &[(THEIRS, "k")], moved(THEIRS, B))
        },
    ]);
}

#[test]
fn shard_pubsub_follows_its_own_down_rule() {
    check(&[
        Case {
            tweak: down,
            ..case(
                "allowed when down (default)",
                shard_pubsub(),
                &[(MINE, "ch")],
                Route::Local,
            )
        },
        Case {
            tweak: down_no_pubsub,
            ..case(
                "refused when down",
                shard_pubsub(),
                &[(MINE, "ch")],
                Route::DownState,
            )
        },
        Case {
            tweak: down,
            ..case(
                "elsewhere when down",
                shard_pubsub(),
                &[(THEIRS, "ch")],
                moved(THEIRS, B),
            )
        },
        case(
            "cross slot",
            shard_pubsub(),
            &[(MINE, "a"), (THEIRS, "b")],
            Route::CrossSlot,
        ),
        // Channels are not keys to look up: a migrating slot keeps its channels.
        case(
            "migrating slot",
            shard_pubsub(),
            &[(MIGRATING, "ch")],
            Route::Local,
        ),
        // Any client of a replica gets its master's shard channels, READONLY or not.
        Case {
            myself: RA,
            ..case(
                "on a replica",
                shard_pubsub(),
                &[(MINE, "ch")],
                Route::Local,
            )
        },
        Case {
            myself: RA,
            ..case(
                "replica, other master",
                shard_pubsub(),
                &[(THEIRS, "ch")],
                moved(THEIRS, B),
            )
        },
    ]);
    let t = fixture(A);
    let (_, looked_up) = run(&t, &shard_pubsub(), &[(MIGRATING, "ch")], &[]);
    assert!(looked_up.is_empty(), "channels are never looked up");
}

#[test]
fn a_migrating_slot_serves_what_it_still_has() {
    let keys2: &[(u16, &str)] = &[(MIGRATING, "a"), (MIGRATING, "b")];
    let cases = [
        (
            "one key, here",
            &[(MIGRATING, "a")][..],
            &["a"][..],
            Route::Local,
        ),
        (
            "one key, gone",
            &[(MIGRATING, "a")],
            &[],
            Route::Ask {
                slot: MIGRATING,
                node: B,
            },
        ),
        ("two keys, both here", keys2, &["a", "b"], Route::Local),
        (
            "two keys, both gone",
            keys2,
            &[],
            Route::Ask {
                slot: MIGRATING,
                node: B,
            },
        ),
        ("two keys, one gone", keys2, &["a"], Route::TryAgain),
        ("two keys, other gone", keys2, &["b"], Route::TryAgain),
        (
            "same key twice, gone",
            &[(MIGRATING, "a"), (MIGRATING, "a")],
            &[],
            Route::Ask {
                slot: MIGRATING,
                node: B,
            },
        ),
    ];
    for (name, keys, present, want) in cases {
        for query in [read(), write(), asking(write())] {
            let t = fixture(A);
            let (got, looked_up) = run(&t, &query, keys, present);
            assert_eq!(got, want, "{name}");
            assert_eq!(
                looked_up.len(),
                keys.len(),
                "{name}: every key is looked up"
            );
        }
    }
}

#[test]
fn a_stable_slot_looks_nothing_up() {
    let t = fixture(A);
    let (_, looked_up) = run(&t, &write(), &[(MINE, "a"), (MINE, "b")], &[]);
    assert!(looked_up.is_empty());
    let (_, looked_up) = run(&t, &write(), &[(THEIRS, "a")], &[]);
    assert!(looked_up.is_empty());
}

#[test]
fn an_importing_slot_serves_only_asking_clients() {
    let keys2: &[(u16, &str)] = &[(IMPORTING, "a"), (IMPORTING, "b")];
    let restore_asking = Query {
        asking_command: true,
        ..write()
    };
    let cases = [
        (
            "no ASKING: moved to the owner",
            write(),
            &[(IMPORTING, "a")][..],
            &["a"][..],
            moved(IMPORTING, B),
        ),
        (
            "ASKING, key here",
            asking(write()),
            &[(IMPORTING, "a")],
            &["a"],
            Route::Local,
        ),
        // A single missing key is fine: the command may be creating it here.
        (
            "ASKING, one key missing",
            asking(write()),
            &[(IMPORTING, "a")],
            &[],
            Route::Local,
        ),
        (
            "ASKING, same key twice, missing",
            asking(read()),
            &[(IMPORTING, "a"), (IMPORTING, "a")],
            &[],
            Route::Local,
        ),
        (
            "ASKING, two keys here",
            asking(read()),
            keys2,
            &["a", "b"],
            Route::Local,
        ),
        (
            "ASKING, two keys, one missing",
            asking(read()),
            keys2,
            &["b"],
            Route::TryAgain,
        ),
        (
            "ASKING, two keys, none here",
            asking(read()),
            keys2,
            &[],
            Route::TryAgain,
        ),
        (
            "RESTORE-ASKING",
            restore_asking,
            &[(IMPORTING, "a")],
            &[],
            Route::Local,
        ),
    ];
    for (name, query, keys, present, want) in cases {
        let t = fixture(A);
        assert_eq!(run(&t, &query, keys, present).0, want, "{name}");
    }
}

#[test]
fn asking_without_an_open_slot_changes_nothing() {
    check(&[
        case(
            "their stable slot",
            asking(read()),
            &[(THEIRS, "a")],
            moved(THEIRS, B),
        ),
        case(
            "my stable slot",
            asking(write()),
            &[(MINE, "a")],
            Route::Local,
        ),
    ]);
}

#[test]
fn migrate_runs_here_while_the_slot_is_open() {
    check(&[
        case(
            "migrating, keys gone",
            migrate(),
            &[(MIGRATING, "a"), (MIGRATING, "b")],
            Route::Local,
        ),
        case(
            "importing, no ASKING",
            migrate(),
            &[(IMPORTING, "a")],
            Route::Local,
        ),
        case(
            "stable elsewhere",
            migrate(),
            &[(THEIRS, "a")],
            moved(THEIRS, B),
        ),
        Case {
            tweak: down,
            ..case(
                "down comes first",
                migrate(),
                &[(MIGRATING, "a")],
                Route::DownState,
            )
        },
    ]);
}

#[test]
fn a_replica_serves_reads_of_its_master_to_readonly_clients() {
    let on_replica = |name, query, keys, want| Case {
        myself: RA,
        ..case(name, query, keys, want)
    };
    let mut ro_eval = readonly(Query::default());
    ro_eval.write = false; // EVAL_RO, or a script flagged no-writes
    check(&[
        on_replica(
            "READONLY read",
            readonly(read()),
            &[(MINE, "k")],
            Route::Local,
        ),
        on_replica(
            "READONLY read, slot 0",
            readonly(read()),
            &[(0, "k")],
            Route::Local,
        ),
        on_replica(
            "READONLY read-only script",
            ro_eval,
            &[(MINE, "k")],
            Route::Local,
        ),
        // A write sent to a replica goes to its master.
        on_replica(
            "READONLY write",
            readonly(write()),
            &[(MINE, "k")],
            moved(MINE, A),
        ),
        on_replica(
            "read without READONLY",
            read(),
            &[(MINE, "k")],
            moved(MINE, A),
        ),
        on_replica(
            "write without READONLY",
            write(),
            &[(MINE, "k")],
            moved(MINE, A),
        ),
        on_replica(
            "READONLY read, other master",
            readonly(read()),
            &[(THEIRS, "k")],
            moved(THEIRS, B),
        ),
        on_replica(
            "READONLY EXEC of reads",
            readonly(exec(false)),
            &[(MINE, "k")],
            Route::Local,
        ),
        on_replica(
            "READONLY EXEC with a write",
            readonly(exec(true)),
            &[(MINE, "k")],
            moved(MINE, A),
        ),
        on_replica(
            "READONLY cross slot",
            readonly(read()),
            &[(MINE, "a"), (0, "b")],
            Route::CrossSlot,
        ),
    ]);
}

#[test]
fn the_master_link_and_the_aof_are_never_redirected() {
    let mut from_master = write();
    from_master.client.master_link = true;
    let mut aof = write();
    aof.client.aof_loading = true;
    for q in [from_master, aof] {
        check(&[
            case("elsewhere", q, &[(THEIRS, "k")], Route::Local),
            case("cross slot", q, &[(MINE, "a"), (THEIRS, "b")], Route::Local),
            case("unbound", q, &[(UNBOUND, "a")], Route::Local),
            Case {
                tweak: down,
                ..case("down", q, &[(MINE, "a")], Route::Local)
            },
            Case {
                myself: RA,
                ..case("on a replica", q, &[(MINE, "a")], Route::Local)
            },
        ]);
    }
}

// ---- error texts -------------------------------------------------------------

#[test]
fn error_texts_are_redis_own() {
    let t = fixture(A);
    let text = |r: Route| error_text(&t, &r, false);
    assert_eq!(text(Route::Local), None);
    assert_eq!(
        text(Route::CrossSlot).as_deref(),
        Some("CROSSSLOT Keys in request don't hash to the same slot")
    );
    assert_eq!(
        text(Route::TryAgain).as_deref(),
        Some("TRYAGAIN Multiple keys request during rehashing of slot")
    );
    assert_eq!(
        text(Route::DownState).as_deref(),
        Some("CLUSTERDOWN The cluster is down")
    );
    assert_eq!(
        text(Route::DownReadOnlyState).as_deref(),
        Some("CLUSTERDOWN The cluster is down and only accepts read commands")
    );
    assert_eq!(
        text(Route::DownUnbound).as_deref(),
        Some("CLUSTERDOWN Hash slot not served")
    );
    assert_eq!(
        text(moved(3999, B)).as_deref(),
        Some("MOVED 3999 127.0.0.1:6381")
    );
    assert_eq!(
        text(Route::Ask {
            slot: 3999,
            node: B
        })
        .as_deref(),
        Some("ASK 3999 127.0.0.1:6381")
    );
    assert_eq!(text(moved(0, A)).as_deref(), Some("MOVED 0 127.0.0.1:6379"));
    assert_eq!(
        text(moved(16383, A)).as_deref(),
        Some("MOVED 16383 127.0.0.1:6379")
    );
}

#[test]
fn redirects_name_the_preferred_endpoint() {
    let mut t = fixture(A);
    t.preferred_endpoint = EndpointType::Hostname;
    assert_eq!(
        error_text(&t, &moved(3999, B), false).as_deref(),
        Some("MOVED 3999 node-b.example:6381")
    );
    // A node without a hostname is "?" when hostnames are preferred.
    assert_eq!(
        error_text(&t, &moved(5, RA), false).as_deref(),
        Some("MOVED 5 ?:6380")
    );
    t.preferred_endpoint = EndpointType::UnknownEndpoint;
    assert_eq!(
        error_text(
            &t,
            &Route::Ask {
                slot: 3999,
                node: B
            },
            false
        )
        .as_deref(),
        Some("ASK 3999 :6381")
    );
}

#[test]
fn plaintext_clients_of_a_tls_cluster_get_the_plaintext_port() {
    let mut nodes = vec![
        endpoint("10.0.0.1", 16379, "", None),
        endpoint("10.0.0.2", 16381, "", None),
    ];
    nodes[1].pport = 6381;
    let mut t = RoutingTable::new(nodes, A).expect("table");
    let b = NodeIndex(1);
    let a_moved = moved(7, A);
    // Without tls-cluster the port is the port, whatever the client.
    assert_eq!(
        error_text(&t, &moved(7, b), false).as_deref(),
        Some("MOVED 7 10.0.0.2:16381")
    );
    t.tls_cluster = true;
    assert_eq!(
        error_text(&t, &moved(7, b), true).as_deref(),
        Some("MOVED 7 10.0.0.2:16381")
    );
    assert_eq!(
        error_text(&t, &moved(7, b), false).as_deref(),
        Some("MOVED 7 10.0.0.2:6381")
    );
    // A node that announced no plaintext port is named by its TLS port.
    assert_eq!(
        error_text(&t, &a_moved, false).as_deref(),
        Some("MOVED 7 10.0.0.1:16379")
    );
}

#[test]
fn a_hand_made_route_to_no_node_does_not_panic() {
    let t = fixture(A);
    let ghost = NodeIndex(99);
    assert_eq!(
        error_text(&t, &moved(5, ghost), false).as_deref(),
        Some("MOVED 5 :0")
    );
    assert_eq!(
        error_text(
            &t,
            &Route::Ask {
                slot: 5,
                node: ghost
            },
            true
        )
        .as_deref(),
        Some("ASK 5 :0")
    );
}

// ---- blocked clients -----------------------------------------------------------

fn blocked(slot: u16) -> BlockedClient {
    BlockedClient {
        on: BlockedOn::Keys { slot },
        readonly: false,
        last_command_write: false,
    }
}

#[test]
fn blocked_clients_are_redirected_when_their_slot_left() {
    let t = fixture(A);
    assert_eq!(redirect_blocked(&t, &blocked(MINE)), None);
    assert_eq!(redirect_blocked(&t, &blocked(0)), None);
    assert_eq!(redirect_blocked(&t, &blocked(16383)), None);
    // Still ours while migrating: the pop may yet be served here.
    assert_eq!(redirect_blocked(&t, &blocked(MIGRATING)), None);
    assert_eq!(
        redirect_blocked(&t, &blocked(THEIRS)),
        Some(moved(THEIRS, B))
    );
    // Being imported here: the keys are arriving.
    assert_eq!(redirect_blocked(&t, &blocked(IMPORTING)), None);
    assert_eq!(
        redirect_blocked(&t, &blocked(UNBOUND)),
        Some(Route::DownUnbound)
    );
    assert_eq!(
        redirect_blocked(&t, &blocked(16384)),
        Some(Route::DownUnbound)
    );
}

#[test]
fn blocked_clients_are_unblocked_when_the_cluster_fails() {
    let mut t = fixture(A);
    t.state_ok = false;
    t.allow_reads_when_down = true; // no matter: only a write would unblock them
    assert_eq!(redirect_blocked(&t, &blocked(MINE)), Some(Route::DownState));
    let module = BlockedClient {
        on: BlockedOn::ModuleWithoutKeys,
        ..blocked(0)
    };
    assert_eq!(redirect_blocked(&t, &module), Some(Route::DownState));
    let wait = BlockedClient {
        on: BlockedOn::Other,
        ..blocked(0)
    };
    assert_eq!(redirect_blocked(&t, &wait), None, "WAIT is not about keys");
    t.state_ok = true;
    assert_eq!(redirect_blocked(&t, &module), None);
    assert_eq!(redirect_blocked(&t, &wait), None);
}

#[test]
fn blocked_readonly_readers_stay_on_a_replica_of_their_master() {
    let t = fixture(RA);
    let reader = BlockedClient {
        readonly: true,
        ..blocked(MINE)
    };
    assert_eq!(redirect_blocked(&t, &reader), None);
    let mover = BlockedClient {
        last_command_write: true, // BLMOVE
        ..reader
    };
    assert_eq!(redirect_blocked(&t, &mover), Some(moved(MINE, A)));
    assert_eq!(redirect_blocked(&t, &blocked(MINE)), Some(moved(MINE, A)));
    let other_master = BlockedClient {
        readonly: true,
        ..blocked(THEIRS)
    };
    assert_eq!(redirect_blocked(&t, &other_master), Some(moved(THEIRS, B)));
}

// ---- the table ---------------------------------------------------------------

#[test]
fn the_table_refuses_indexes_it_cannot_honour() {
    let nodes = || vec![NodeEndpoint::default(), NodeEndpoint::default()];
    assert_eq!(
        RoutingTable::new(nodes(), NodeIndex(2)).err(),
        Some(TableError::NoSuchNode(NodeIndex(2)))
    );
    assert!(RoutingTable::new(Vec::new(), A).is_err());
    let too_many = vec![NodeEndpoint::default(); usize::from(u16::MAX) + 1];
    assert_eq!(
        RoutingTable::new(too_many, A).err(),
        Some(TableError::TooManyNodes)
    );

    let mut t = RoutingTable::new(nodes(), A).expect("table");
    assert_eq!(
        t.set_owner(16384, Some(A)),
        Err(TableError::NoSuchSlot(16384))
    );
    assert_eq!(
        t.set_owner(5, Some(NodeIndex(2))),
        Err(TableError::NoSuchNode(NodeIndex(2)))
    );
    assert_eq!(
        t.set_migrating(16384, Some(B)),
        Err(TableError::NoSuchSlot(16384))
    );
    assert_eq!(
        t.set_importing(5, Some(NodeIndex(9))),
        Err(TableError::NoSuchNode(NodeIndex(9)))
    );
    assert_eq!(
        t.set_migrating(16384, None),
        Err(TableError::NoSuchSlot(16384))
    );

    assert_eq!(t.owner(16383), None);
    t.set_owner(16383, Some(B)).expect("owner");
    assert_eq!(t.owner(16383), Some(B));
    t.set_owner(16383, None).expect("owner");
    assert_eq!(t.owner(16383), None);
    assert_eq!(t.owner(u16::MAX), None);

    t.set_migrating(0, Some(B)).expect("migrating");
    t.set_importing(1, Some(B)).expect("importing");
    assert_eq!((t.migrating_to(0), t.importing_from(1)), (Some(B), Some(B)));
    t.set_migrating(0, None).expect("migrating");
    t.set_importing(1, None).expect("importing");
    assert_eq!((t.migrating_to(0), t.importing_from(1)), (None, None));
}

#[test]
fn a_new_table_has_redis_defaults() {
    let t = RoutingTable::new(vec![NodeEndpoint::default()], A).expect("table");
    assert!(!t.state_ok);
    assert!(!t.allow_reads_when_down);
    assert!(t.allow_pubsubshard_when_down);
    assert!(!t.tls_cluster);
    assert_eq!(t.preferred_endpoint, EndpointType::Ip);
    assert!((0..=u16::MAX).all(|s| t.owner(s).is_none()));
}

// ---- the model -----------------------------------------------------------------

/// getNodeByQuery restated over the whole key list at once, rule by rule.
fn model(
    t: &RoutingTable,
    q: &Query,
    keys: &[(u16, Vec<u8>)],
    present: &BTreeSet<Vec<u8>>,
) -> Route {
    let c = q.client;
    if c.master_link || c.aof_loading {
        return Route::Local;
    }
    if matches!(q.kind, CommandKind::Exec { .. }) && !c.in_multi {
        return Route::Local;
    }
    let Some((slot, first)) = keys.first() else {
        return Route::Local;
    };
    let slot = *slot;
    let Some(owner) = t.owner(slot) else {
        return Route::DownUnbound;
    };
    if keys.iter().any(|(s, k)| k != first && *s != slot) {
        return Route::CrossSlot;
    }
    let me = t.myself();
    let migrating = if owner == me {
        t.migrating_to(slot)
    } else {
        None
    };
    let importing = migrating.is_none() && t.importing_from(slot).is_some();
    let pubsub = q.kind == CommandKind::ShardPubSub;
    let counted = (migrating.is_some() || importing) && !pubsub;
    let missing = if counted {
        keys.iter().filter(|(_, k)| !present.contains(k)).count()
    } else {
        0
    };
    let existing = if counted { keys.len() - missing } else { 0 };
    let multiple = keys.iter().any(|(_, k)| k != first);

    if !t.state_ok {
        if pubsub {
            if !t.allow_pubsubshard_when_down {
                return Route::DownState;
            }
        } else if !t.allow_reads_when_down {
            return Route::DownState;
        } else if q.write {
            return Route::DownReadOnlyState;
        }
    }
    if (migrating.is_some() || importing) && q.kind == CommandKind::Migrate {
        return Route::Local;
    }
    if let Some(to) = migrating {
        if missing > 0 && existing > 0 {
            return Route::TryAgain;
        }
        if missing > 0 {
            return Route::Ask { slot, node: to };
        }
    }
    if importing && (c.asking || q.asking_command) {
        if multiple && missing > 0 {
            return Route::TryAgain;
        }
        return Route::Local;
    }
    let is_write = q.write || q.kind == (CommandKind::Exec { queued_write: true });
    let my_master = t.node(me).and_then(|n| n.replica_of);
    if (c.readonly || pubsub) && !is_write && my_master == Some(owner) {
        return Route::Local;
    }
    if owner == me {
        Route::Local
    } else {
        Route::Moved { slot, node: owner }
    }
}

/// clusterRedirectBlockedClientIfNeeded restated.
fn blocked_model(t: &RoutingTable, b: &BlockedClient) -> Option<Route> {
    let slot = match b.on {
        BlockedOn::Other => return None,
        _ if !t.state_ok => return Some(Route::DownState),
        BlockedOn::ModuleWithoutKeys => return None,
        BlockedOn::Keys { slot } => slot,
    };
    let owner = t.owner(slot);
    let my_master = t.node(t.myself()).and_then(|n| n.replica_of);
    let stays_for_reader =
        b.readonly && !b.last_command_write && owner.is_some() && owner == my_master;
    if owner == Some(t.myself()) || stays_for_reader || t.importing_from(slot).is_some() {
        return None;
    }
    Some(owner.map_or(Route::DownUnbound, |node| Route::Moved { slot, node }))
}

/// Slots the random tables and keys draw from: few, so keys share slots, with the
/// edges and two values past the last slot.
const SLOT_POOL: [u16; 6] = [0, 1, 2, 16383, 16384, u16::MAX];
const KEY_POOL: [&str; 4] = ["a", "b", "c", "{a}d"];

#[derive(Debug, Clone)]
struct World {
    table: RoutingTable,
    query: Query,
    keys: Vec<(u16, Vec<u8>)>,
    present: BTreeSet<Vec<u8>>,
    blocked: BlockedClient,
}

fn node_count() -> impl Strategy<Value = usize> {
    1usize..=4
}

fn world() -> impl Strategy<Value = World> {
    node_count().prop_flat_map(|n| {
        let node = move || (0..n).prop_map(|i| NodeIndex(i as u16));
        let maybe_node = move || prop::option::of(node());
        let per_slot = (maybe_node(), maybe_node(), maybe_node());
        (
            prop::collection::vec(maybe_node(), n),
            node(),
            prop::collection::vec(per_slot, 4),
            any::<[bool; 5]>(),
            query(),
            keys(),
            any::<u8>(),
            blocked_client(),
        )
            .prop_map(
                move |(replica_of, myself, slots, settings, query, keys, present, blocked)| {
                    let nodes = replica_of
                        .into_iter()
                        .enumerate()
                        .map(|(i, replica_of)| NodeEndpoint {
                            ip: format!("10.0.0.{i}"),
                            port: 7000 + i as u16,
                            replica_of,
                            ..NodeEndpoint::default()
                        })
                        .collect();
                    let mut table = RoutingTable::new(nodes, myself).expect("valid table");
                    // The first four pool slots are real ones.
                    for (&slot, (owner, migrating, importing)) in SLOT_POOL.iter().zip(slots) {
                        table.set_owner(slot, owner).expect("owner");
                        table.set_migrating(slot, migrating).expect("migrating");
                        table.set_importing(slot, importing).expect("importing");
                    }
                    let [state_ok, reads, pubsub, tls, _] = settings;
                    table.state_ok = state_ok;
                    table.allow_reads_when_down = reads;
                    table.allow_pubsubshard_when_down = pubsub;
                    table.tls_cluster = tls;
                    let present = KEY_POOL
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| present & (1 << i) != 0)
                        .map(|(_, k)| k.as_bytes().to_vec())
                        .collect();
                    World {
                        table,
                        query,
                        keys,
                        present,
                        blocked,
                    }
                },
            )
    })
}

fn query() -> impl Strategy<Value = Query> {
    let kind = prop_oneof![
        Just(CommandKind::Other),
        any::<bool>().prop_map(|queued_write| CommandKind::Exec { queued_write }),
        Just(CommandKind::Migrate),
        Just(CommandKind::ShardPubSub),
    ];
    let rare = || prop::bool::weighted(0.1);
    let client = (any::<[bool; 3]>(), rare(), rare()).prop_map(
        |([asking, readonly, in_multi], master_link, aof_loading)| ClientFlags {
            asking,
            readonly,
            in_multi,
            master_link,
            aof_loading,
        },
    );
    (kind, any::<bool>(), prop::bool::weighted(0.2), client).prop_map(
        |(kind, write, asking_command, client)| Query {
            kind,
            write,
            asking_command,
            client,
        },
    )
}

/// Keys with their slots: usually each key keeps one slot for the whole query (as
/// `key_slot` would give), sometimes every pair is drawn freely.
fn keys() -> impl Strategy<Value = Vec<(u16, Vec<u8>)>> {
    let pick = || prop::sample::select(SLOT_POOL.to_vec());
    let consistent = (
        prop::collection::vec(0..KEY_POOL.len(), 0..6),
        [pick(), pick(), pick(), pick()],
    )
        .prop_map(|(picks, slot_of)| {
            picks
                .into_iter()
                .map(|i| (slot_of[i], KEY_POOL[i].as_bytes().to_vec()))
                .collect()
        });
    let free = prop::collection::vec(
        (pick(), prop::sample::select(KEY_POOL.to_vec()))
            .prop_map(|(s, k)| (s, k.as_bytes().to_vec())),
        0..6,
    );
    prop_oneof![3 => consistent, 1 => free]
}

fn blocked_client() -> impl Strategy<Value = BlockedClient> {
    let on = prop_oneof![
        4 => prop::sample::select(SLOT_POOL.to_vec()).prop_map(|slot| BlockedOn::Keys { slot }),
        1 => Just(BlockedOn::ModuleWithoutKeys),
        1 => Just(BlockedOn::Other),
    ];
    (on, any::<bool>(), any::<bool>()).prop_map(|(on, readonly, last_command_write)| {
        BlockedClient {
            on,
            readonly,
            last_command_write,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn route_agrees_with_the_model(w in world()) {
        let mut looked_up = 0usize;
        let mut exists = |key: &[u8]| {
            looked_up += 1;
            w.present.contains(key)
        };
        let keys = w.keys.iter().map(|(s, k)| (*s, k.as_slice()));
        let got = route(&w.table, &w.query, keys, &mut exists);
        prop_assert_eq!(got, model(&w.table, &w.query, &w.keys, &w.present));

        // Keys are looked up only while the first key's slot is open.
        if let Some(&(slot, _)) = w.keys.first() {
            let owner = w.table.owner(slot);
            let open = (owner.is_some() && owner == Some(w.table.myself()) && w.table.migrating_to(slot).is_some())
                || w.table.importing_from(slot).is_some();
            if !open || w.query.kind == CommandKind::ShardPubSub {
                prop_assert_eq!(looked_up, 0);
            }
        }

        // Every refusal has its text; a redirect names a slot and a node. (The
        // client's TLS flag only picks a port: any random bool will do.)
        let text = error_text(&w.table, &got, w.query.client.readonly);
        prop_assert_eq!(text.is_none(), got.is_local());
        if let Route::Moved { slot, node } | Route::Ask { slot, node } = got {
            prop_assert!(usize::from(slot) < SLOTS);
            prop_assert!(w.table.node(node).is_some());
            let text = text.unwrap_or_default();
            let prefix = format!("{} {} ", if matches!(got, Route::Ask { .. }) { "ASK" } else { "MOVED" }, slot);
            prop_assert!(text.starts_with(&prefix), "{}", text);
        }
    }

    #[test]
    fn redirect_blocked_agrees_with_the_model(w in world()) {
        prop_assert_eq!(redirect_blocked(&w.table, &w.blocked), blocked_model(&w.table, &w.blocked));
    }
}
