//! The cluster check of the gate: in cluster mode, where a command with keys may
//! run (Redis's processCommand calling getNodeByQuery), and the redirect errors
//! clients follow (-MOVED, -ASK, -TRYAGAIN, -CROSSSLOT, -CLUSTERDOWN).
//!
//! The routing table is the node's (`cluster::service::Routes`); each shard keeps
//! its own copy and looks at the shared one only when its generation moved, so the
//! common case is a few loads and no atomic write. A stable slot needs no key
//! lookup. While the first key's slot is migrating or importing, routing asks
//! whether each key is here; keys of this shard are answered at once, keys of
//! other shards need a hop, which the gate leaves to `cluster_lookup_route`.

use super::gate::Gate;
use super::*;
use crate::cluster::redirect::{self, ClientFlags, CommandKind, Query, Route, RoutingTable};

/// What the cluster check decided without waiting.
pub(super) enum ClusterVerdict {
    Local,
    /// Refused with this error (already in Redis's text).
    Redirect(String),
    /// The slot is open and some keys live on other shards: decide after asking
    /// them (`Connection::cluster_lookup_route`).
    NeedsLookup,
}

/// Runs `f` on the current routing table (the shard's copy, refreshed if the node
/// published a newer one). None outside cluster mode.
pub(crate) fn with_routes<T>(cell: &ShardCell, f: impl FnOnce(&RoutingTable) -> T) -> Option<T> {
    let routes = crate::cluster::node()?.routes();
    Some(f(cell.routes.borrow_mut().get(routes)))
}

/// The commands whose "keys" are shard channels.
fn kind_of(spec: &commands::CommandSpec) -> CommandKind {
    match spec.name {
        "spublish" | "ssubscribe" | "sunsubscribe" => CommandKind::ShardPubSub,
        "migrate" => CommandKind::Migrate,
        _ => CommandKind::Other,
    }
}

/// Whether Redis checks the command at all: it has keys (or may have: movable
/// keys), or it is EXEC.
fn has_keys(spec: &commands::CommandSpec) -> bool {
    !matches!(spec.keys, commands::KeySpec::None) || spec.name == "exec"
}

impl Connection {
    /// The cluster check, where Redis's processCommand makes it (after ACL). None
    /// when it cannot apply: not cluster mode, the master's link or the AOF, a
    /// command without keys.
    pub(super) fn cluster_verdict(
        &self,
        idx: u16,
        spec: &'static commands::CommandSpec,
        args: &Args<'_>,
    ) -> Option<ClusterVerdict> {
        if !crate::cluster::enabled()
            || self.session.shared.role.get().replays()
            || self.session.in_script
            || !has_keys(spec)
        {
            return None;
        }
        // Asked only while the first key's slot is migrating or importing.
        let home = &self.session.cell;
        let mut remote = false;
        let mut exists = |key: &[u8]| {
            if home.shard_of(key) != home.id {
                remote = true;
                return false;
            }
            home.data.borrow().dbs[0].peek_live(key, crate::util::now_ms())
        };
        let route = self.route_with(idx, spec, args, &mut exists)?;
        if remote {
            return Some(ClusterVerdict::NeedsLookup);
        }
        Some(self.verdict_of(route))
    }

    /// `cluster_verdict` for `NeedsLookup`: every key's existence asked where it
    /// lives, then routed. None: run here.
    pub(super) async fn cluster_lookup_route(
        &self,
        idx: u16,
        spec: &'static commands::CommandSpec,
        args: &Args<'_>,
    ) -> Option<String> {
        let keys = self.routed_keys(idx, spec, args);
        let cell = self.session.cell.clone();
        let mut found = Vec::with_capacity(keys.len());
        for (_, key) in &keys {
            let key = key.clone();
            let shard = cell.shard_of(&key);
            let live = cell
                .call(shard, move |c| {
                    c.data.borrow().dbs[0].peek_live(&key, crate::util::now_ms())
                })
                .await;
            found.push(live);
        }
        // Routing asks about the keys in order, repeats included.
        let mut answers = found.into_iter();
        let mut exists = |_: &[u8]| answers.next().unwrap_or(false);
        let route = self.route_with(idx, spec, args, &mut exists)?;
        match self.verdict_of(route) {
            ClusterVerdict::Redirect(msg) => Some(msg),
            _ => None,
        }
    }

    /// The gate's verdict for `Gate::ClusterLookup`: the keys asked where they
    /// live, routed, then the checks that follow routing.
    pub(super) async fn cluster_gate_after_lookup(
        &self,
        idx: u16,
        spec: &'static commands::CommandSpec,
        stat: u16,
        args: &Args<'_>,
    ) -> Gate {
        match self.cluster_lookup_route(idx, spec, args).await {
            Some(msg) => Gate::Redirect(msg),
            None => self.refusal_after_routing(idx, spec, stat),
        }
    }

    fn verdict_of(&self, route: Route) -> ClusterVerdict {
        if route.is_local() {
            return ClusterVerdict::Local;
        }
        let tls = self.stream.is_tls();
        let text = with_routes(&self.session.cell, |t| redirect::error_text(t, &route, tls));
        match text.flatten() {
            Some(msg) => ClusterVerdict::Redirect(msg),
            None => ClusterVerdict::Local,
        }
    }

    /// Routes the command with `exists` answering key lookups. None outside
    /// cluster mode.
    fn route_with(
        &self,
        idx: u16,
        spec: &'static commands::CommandSpec,
        args: &Args<'_>,
        exists: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Option<Route> {
        let query = self.query_of(idx, spec, args);
        if spec.name == "exec" {
            let keys = self.routed_keys(idx, spec, args);
            let pairs = keys.iter().map(|(slot, k)| (*slot, k.as_slice()));
            return with_routes(&self.session.cell, |t| {
                redirect::route(t, &query, pairs, exists)
            });
        }
        let keys = spec.keys.positions(args).map(|i| {
            let key = args.get(i);
            (crate::slot::key_slot(key), key)
        });
        with_routes(&self.session.cell, |t| {
            redirect::route(t, &query, keys, exists)
        })
    }

    /// The keys routing looks at, copied: the command's, or for EXEC those of
    /// every queued command in order.
    fn routed_keys(
        &self,
        _idx: u16,
        spec: &'static commands::CommandSpec,
        args: &Args<'_>,
    ) -> Vec<(u16, Vec<u8>)> {
        let mut keys = Vec::new();
        let mut add = |spec: &commands::CommandSpec, args: &Args<'_>| {
            for i in spec.keys.positions(args) {
                let key = args.get(i);
                keys.push((crate::slot::key_slot(key), key.to_vec()));
            }
        };
        if spec.name != "exec" {
            add(spec, args);
            return keys;
        }
        if let Some(multi) = &self.session.multi {
            let t = commands::table();
            for (i, argv) in &multi.queue {
                let owned = OwnedArgs::new(argv);
                add(t.specs[*i as usize], &owned.args());
            }
        }
        keys
    }

    /// The command and client as routing sees them.
    fn query_of(&self, idx: u16, spec: &'static commands::CommandSpec, args: &Args<'_>) -> Query {
        session_query(&self.session, idx, spec, args)
    }

    /// A command routing refused: the redirect error, counted as a rejected call.
    /// EXEC's transaction is discarded (a client retries it whole on the right
    /// node); a command queued in MULTI makes EXEC fail (Redis's flagTransaction).
    pub(super) async fn redirect(&mut self, idx: u16, spec: &commands::CommandSpec, msg: String) {
        if spec.name == "exec" && self.session.multi.is_some() {
            self.session.multi = None;
            self.session.shared.multi_count.set(-1);
            commands::multi::unwatch_all(&mut self.session).await;
        }
        self.reject(Some(idx), &msg);
    }
}

/// The command `session` is about to run, and the client, as routing sees them.
pub(crate) fn session_query(
    session: &crate::clients::Session,
    idx: u16,
    spec: &'static commands::CommandSpec,
    args: &Args<'_>,
) -> Query {
    let role = session.shared.role.get();
    let client = ClientFlags {
        asking: session.cluster.asking,
        readonly: session.cluster.readonly,
        in_multi: session.multi.is_some(),
        master_link: role == crate::clients::ClientRole::Master,
        aof_loading: role == crate::clients::ClientRole::AofLoader,
    };
    let kind = if spec.name == "exec" {
        let t = commands::table();
        let queued_write = session.multi.as_ref().is_some_and(|m| {
            m.queue
                .iter()
                .any(|(i, _)| t.specs[*i as usize].has(flags::WRITE))
        });
        CommandKind::Exec { queued_write }
    } else {
        kind_of(spec)
    };
    Query {
        kind,
        write: gate::command_writes(idx, args),
        asking_command: spec.name == "restore-asking",
        client,
    }
}

/// What a script's `redis.call` may not do in a cluster (Redis's
/// scriptVerifyClusterState): touch keys this node does not serve, run while the
/// cluster is down, or — unless the script allows cross-slot keys — touch a slot
/// other than the first one it used (its declared keys' slot, `script_slot`).
pub(crate) async fn script_refusal(
    fake: &crate::clients::Session,
    idx: u16,
    spec: &'static commands::CommandSpec,
    argv: &[Vec<u8>],
    script_slot: &mut Option<u16>,
    cross_slot_ok: bool,
) -> Option<&'static str> {
    crate::cluster::node()?;
    if !has_keys(spec) {
        return None;
    }
    let owned = OwnedArgs::new(argv);
    let args = owned.args();
    let keys: Vec<(u16, Vec<u8>)> = spec
        .keys
        .positions(&args)
        .map(|i| (crate::slot::key_slot(args.get(i)), args.get(i).to_vec()))
        .collect();
    let first_slot = keys.first().map(|(slot, _)| *slot)?;
    let cell = fake.cell.clone();
    let mut found = Vec::with_capacity(keys.len());
    for (_, key) in &keys {
        let key = key.clone();
        let live = cell
            .call(cell.shard_of(&key), move |c| {
                c.data.borrow().dbs[0].peek_live(&key, crate::util::now_ms())
            })
            .await;
        found.push(live);
    }
    let query = session_query(fake, idx, spec, &args);
    let mut answers = found.into_iter();
    let mut exists = |_: &[u8]| answers.next().unwrap_or(false);
    let pairs = keys.iter().map(|(slot, k)| (*slot, k.as_slice()));
    let route = with_routes(&cell, |t| redirect::route(t, &query, pairs, &mut exists))?;
    match route {
        Route::Local => {}
        Route::DownReadOnlyState => {
            return Some(
                "ERR Script attempted to execute a write command while the cluster is down and readonly",
            )
        }
        Route::DownState => {
            return Some("ERR Script attempted to execute a command while the cluster is down")
        }
        _ => return Some("ERR Script attempted to access a non local key in a cluster node"),
    }
    if cross_slot_ok {
        return None;
    }
    match *script_slot {
        None => *script_slot = Some(first_slot),
        Some(slot) if slot != first_slot => {
            return Some("ERR Script attempted to access keys that do not hash to the same slot")
        }
        Some(_) => {}
    }
    None
}

/// Cluster mode: the error a client blocked on `key` gets now, if its slot is no
/// longer served here or the cluster failed (Redis's
/// clusterRedirectBlockedClientIfNeeded). `write`: the blocking command writes
/// (BLMOVE), so a READONLY replica cannot keep it.
pub(crate) fn blocked_redirect(
    session: &crate::clients::Session,
    key: &[u8],
    write: bool,
) -> Option<String> {
    let client = redirect::BlockedClient {
        on: redirect::BlockedOn::Keys {
            slot: crate::slot::key_slot(key),
        },
        readonly: session.cluster.readonly,
        last_command_write: write,
    };
    with_routes(&session.cell, |t| {
        let route = redirect::redirect_blocked(t, &client)?;
        redirect::error_text(t, &route, false)
    })
    .flatten()
}

/// Every shard: clients blocked on keys whose slot this node no longer serves
/// (or while the cluster is down) are unblocked to redirect themselves. Run when
/// the routes change.
pub(crate) async fn redirect_blocked_clients(cell: &std::rc::Rc<ShardCell>) {
    cell.call_all(|c| {
        let data = c.data.borrow();
        if data.blocked.is_empty() {
            return;
        }
        with_routes(c, |t| {
            data.blocked.unblock_where(
                |_, key| {
                    let client = redirect::BlockedClient {
                        on: redirect::BlockedOn::Keys {
                            slot: crate::slot::key_slot(key),
                        },
                        // Looked at again by the client with its own flags.
                        readonly: true,
                        last_command_write: false,
                    };
                    redirect::redirect_blocked(t, &client).is_some()
                },
                crate::shard::blocking::UNBLOCK_CLUSTER_REDIRECT,
            );
        });
    })
    .await;
}
