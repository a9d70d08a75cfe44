//! This process as a cluster node: its nodes.conf (locked, loaded at start or
//! created, saved whenever the engine asks), the bus thread on the cluster port,
//! and the routing table every shard consults, republished whenever slots move or
//! the cluster state changes (Redis's clusterInit and clusterSaveConfig around the
//! engine).
//!
//! The server gives it the settings and an `Server` for what only the server can
//! do (deliver a PUBLISH, start or stop replicating, pause writes, drop the keys
//! of lost slots, report its replication offset).

use super::bus::{Bus, Host};
use super::membership::{Effect, Membership, Settings};
use super::nodes::NodeTable;
use super::nodes_conf::{self, ConfigLock};
use super::redirect::RoutingTable;
use super::{flags, NodeName};
use std::net::{IpAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// What the server does for the cluster node.
pub trait Server: Send {
    /// Effects the server carries out: Publish, ReplicateFrom, StopReplicating,
    /// PauseWrites, Unpause, DeleteKeysInSlots, and TopologyChanged after the
    /// routes were republished (to redirect blocked clients, drop shard channels).
    fn effect(&mut self, effect: Effect, engine: &Membership);
    /// The replication offset and, on a replica, the ms since it last heard from
    /// its master.
    fn replication(&mut self) -> (u64, u64);
}

/// Where and how to run the node.
pub struct ServiceSettings {
    /// `cluster-config-file`, resolved against `dir`.
    pub config_file: PathBuf,
    /// The addresses to listen on (`bind`), at `bus_port`.
    pub bind: Vec<IpAddr>,
    /// `cluster-port`, or the client port + 10000.
    pub bus_port: u16,
    pub engine: Settings,
}

/// The routing table of now, and a counter that moves whenever it changes, so a
/// connection can keep its copy and look again only when the counter moved.
pub struct Routes {
    generation: AtomicU64,
    table: RwLock<Arc<RoutingTable>>,
}

impl Routes {
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn current(&self) -> Arc<RoutingTable> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn publish(&self, table: RoutingTable) {
        *self.table.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// One thread's copy of the routing table: a shard looks at the shared table
/// only when its generation moved, so routing a command costs a load, not a
/// lock and a reference count on a line every core writes.
#[derive(Default)]
pub struct RoutesCopy {
    copy: Option<(u64, Arc<RoutingTable>)>,
}

impl RoutesCopy {
    /// The current table, refreshed first if the node published a newer one.
    pub fn get(&mut self, routes: &Routes) -> &RoutingTable {
        let generation = routes.generation();
        if self.copy.as_ref().is_none_or(|(g, _)| *g != generation) {
            self.copy = Some((generation, routes.current()));
        }
        match &self.copy {
            Some((_, table)) => table,
            None => unreachable!("set just above"),
        }
    }
}

/// The running node.
pub struct Service {
    bus: Bus,
    routes: Arc<Routes>,
    name: NodeName,
    config: Arc<ConfigFile>,
}

impl Service {
    pub fn routes(&self) -> &Arc<Routes> {
        &self.routes
    }

    /// This node's ID.
    pub fn name(&self) -> NodeName {
        self.name
    }

    /// Runs `f` on the engine and sends what it produced at once (see
    /// `Bus::with_engine`). Routes it changed are republished before this
    /// returns: a client told OK for CLUSTER SETSLOT ... MIGRATING must find
    /// every command after it routed by the new table (a key created here once the
    /// slot migrates would be left behind).
    pub fn with_engine<T>(&self, f: impl FnOnce(&mut Membership) -> T) -> T {
        self.bus.with_engine(|engine| {
            let result = f(engine);
            if engine.topology_pending() {
                self.routes.publish(engine.routing_table());
            }
            result
        })
    }

    /// CLUSTER SAVECONFIG: nodes.conf written and fsynced now.
    pub fn save_config(&self) -> std::io::Result<()> {
        self.bus
            .with_engine(|engine| self.config.save(engine, true))
    }
}

/// Starts the node: locks and loads nodes.conf (or creates it with a new
/// identity), binds the bus port, and runs the bus thread. The error is the
/// line Redis would log before exiting.
pub fn start(
    settings: ServiceSettings,
    server: Box<dyn Server>,
    now: u64,
) -> Result<Service, String> {
    let path = settings.config_file.clone();
    let lock = ConfigLock::acquire(&path).map_err(|e| e.to_string())?;
    let (table, fresh) = match nodes_conf::load(&path).map_err(|e| e.to_string())? {
        Some(conf) => {
            let table = NodeTable::from_conf(&conf, now)
                .ok_or("Unrecoverable error: corrupted cluster config file.")?;
            (table, false)
        }
        None => (NodeTable::new(NodeName::random(), flags::MASTER, now), true),
    };
    let name = table.me().name;
    if fresh {
        tracing::info!("No cluster configuration found, I'm {name}");
    } else {
        tracing::info!("Node configuration loaded, I'm {name}");
    }
    let listeners = bind_bus(&settings.bind, settings.bus_port)?;
    let mut seed = [0u8; 8];
    seed.copy_from_slice(&name.0[..8]);
    let engine = Membership::new(table, settings.engine, now ^ u64::from_le_bytes(seed));
    let routes = Arc::new(Routes {
        generation: AtomicU64::new(0),
        table: RwLock::new(Arc::new(engine.routing_table())),
    });
    let config = Arc::new(ConfigFile {
        path,
        lock: Mutex::new(lock),
    });
    let host = ServiceHost {
        config: config.clone(),
        routes: routes.clone(),
        server,
    };
    // A new identity is saved before anyone hears of it (clusterInit saves at
    // once); a loaded one is saved again with this start's addresses.
    config
        .save(&engine, true)
        .map_err(|e| format!("Fatal: can't update cluster config file: {e}"))?;
    let bus = Bus::start(engine, listeners, Box::new(host)).map_err(|e| e.to_string())?;
    Ok(Service {
        bus,
        routes,
        name,
        config,
    })
}

/// The bus port on every address, as Redis listens on it (`bind`).
fn bind_bus(addresses: &[IpAddr], port: u16) -> Result<Vec<TcpListener>, String> {
    addresses
        .iter()
        .map(|ip| {
            crate::runtime::listen_exclusive((*ip, port).into()).map_err(|e| {
                format!("Could not create server TCP listening socket {ip}:{port}: {e}")
            })
        })
        .collect()
}

/// nodes.conf and the lock held on it. The bus thread saves when the engine asks,
/// a client's CLUSTER SAVECONFIG on demand; both hold the engine's lock meanwhile.
struct ConfigFile {
    path: PathBuf,
    lock: Mutex<ConfigLock>,
}

impl ConfigFile {
    /// clusterSaveConfig: the node table as CLUSTER NODES prints it (plaintext
    /// ports, handshake nodes left out by the renderer) and the epochs.
    fn save(&self, engine: &Membership, fsync: bool) -> std::io::Result<()> {
        let conf = engine.table.to_conf(false, |id| engine.connected(id));
        let mut lock = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        nodes_conf::save(&self.path, &conf, fsync, Some(&mut lock))
    }
}

/// The bus's host: nodes.conf and the routes here, the rest to the server.
struct ServiceHost {
    config: Arc<ConfigFile>,
    routes: Arc<Routes>,
    server: Box<dyn Server>,
}

impl Host for ServiceHost {
    fn effect(&mut self, effect: Effect, engine: &Membership) {
        match effect {
            Effect::SaveConfig { fsync } => {
                if let Err(e) = self.config.save(engine, fsync) {
                    // clusterSaveConfigOrDie: a node must not go on announcing a
                    // configuration it could not persist.
                    tracing::warn!("Fatal: can't update cluster config file: {e}");
                    std::process::exit(1);
                }
            }
            Effect::TopologyChanged => {
                self.routes.publish(engine.routing_table());
                self.server.effect(Effect::TopologyChanged, engine);
            }
            other => self.server.effect(other, engine),
        }
    }

    fn replication(&mut self) -> (u64, u64) {
        self.server.replication()
    }
}
