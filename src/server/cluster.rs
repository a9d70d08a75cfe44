//! This server as a Redis Cluster node (`cluster-enabled yes`): the node is started
//! before any shard serves (Redis's clusterInit), and what the node asks of the
//! server — deliver a PUBLISH another node relayed, follow a new master or stop
//! following, hold writes for a manual failover, drop the keys of lost slots —
//! is carried out on the shards.
//!
//! The node's bus thread reports those effects while it holds the engine's lock,
//! so it must never wait for a shard (a shard may be waiting for that lock in a
//! CLUSTER command). It queues them here instead; a task on shard 0 takes them in
//! order and runs each to completion before the next.

use crate::cluster::membership::{Effect, Membership};
use crate::cluster::service::{self, ServiceSettings};
use crate::cluster::settings;
use crate::config::Config;
use crate::shard::ShardCell;
use std::collections::VecDeque;
use std::future::poll_fn;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Mutex;
use std::task::{Poll, Waker};

/// Starts the node on the bus port of every address in `bind` and installs it
/// (`crate::cluster::node`). The error is the line to log before exiting.
pub fn start(config: &Config, bind: &[IpAddr]) -> Result<(), String> {
    if config.bool_param("tls-cluster") == Some(true) {
        return Err(TLS_BUS_REFUSED.into());
    }
    let bus_port = settings::bus_port(config).map_err(str::to_string)?;
    let settings = ServiceSettings {
        config_file: settings::config_file(config),
        bind: bind.to_vec(),
        bus_port,
        engine: settings::engine_settings(config),
    };
    let node = service::start(settings, Box::new(ShardHandoff), crate::util::now_ms())?;
    crate::cluster::install(node);
    Ok(())
}

/// What `tls-cluster yes` gets in cluster mode: the bus has no TLS yet.
pub const TLS_BUS_REFUSED: &str =
    "tls-cluster yes is not supported yet: Tessera's cluster bus is plaintext";

/// A CONFIG SET of `cluster-*` parameters: the engine reads its settings again.
pub fn config_changed(config: &Config) {
    if let Some(node) = crate::cluster::node() {
        let fresh = settings::engine_settings(config);
        node.with_engine(|engine| engine.apply_settings(fresh));
    }
}

/// Effects waiting for shard 0, and its task's waker.
struct Inbox {
    effects: VecDeque<Effect>,
    waker: Option<Waker>,
}

static INBOX: Mutex<Inbox> = Mutex::new(Inbox {
    effects: VecDeque::new(),
    waker: None,
});

fn inbox() -> std::sync::MutexGuard<'static, Inbox> {
    INBOX.lock().unwrap_or_else(|p| p.into_inner())
}

/// The node's view of the server: effects go to shard 0's queue; the replication
/// offset is read from the process-wide counters.
struct ShardHandoff;

impl service::Server for ShardHandoff {
    fn effect(&mut self, effect: Effect, _engine: &Membership) {
        let mut inbox = inbox();
        inbox.effects.push_back(effect);
        if let Some(w) = inbox.waker.take() {
            w.wake();
        }
    }

    /// replicationGetSlaveOffset and the data age clusterHandleSlaveFailover
    /// computes: on a replica, what it applied of its master's stream and how long
    /// since the master was last heard from; on a master, its own offset.
    fn replication(&mut self) -> (u64, u64) {
        if !crate::replication::is_replica() {
            return (crate::effects::offset(), 0);
        }
        let link = &crate::replication::link::applied_offset();
        let offset = u64::try_from(*link).unwrap_or(0);
        let age = crate::util::now_ms().saturating_sub(crate::replication::link::last_io_ms());
        (offset, age)
    }
}

/// Shard 0's task: carries out the node's effects, one at a time, in order.
pub async fn run_effects(cell: Rc<ShardCell>) {
    loop {
        let batch: Vec<Effect> = poll_fn(|cx| {
            let mut inbox = inbox();
            if inbox.effects.is_empty() {
                inbox.waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            Poll::Ready(inbox.effects.drain(..).collect())
        })
        .await;
        for effect in batch {
            apply(&cell, effect).await;
        }
    }
}

async fn apply(cell: &Rc<ShardCell>, effect: Effect) {
    match effect {
        Effect::Publish {
            channel,
            message,
            shard,
        } => {
            crate::pubsub::publish(cell, shard, &channel, &message).await;
        }
        Effect::ReplicateFrom { ip, port } => {
            if crate::replication::master().as_ref() != Some(&(ip.clone(), port)) {
                crate::replication::become_replica_of(cell, ip, port).await;
            }
        }
        Effect::StopReplicating => {
            if crate::replication::become_master(cell, true).await {
                tracing::info!("MASTER MODE enabled (cluster failover)");
            }
        }
        Effect::PauseWrites { until } => {
            cell.call_all(move |c| c.data.borrow_mut().pause_clients(until, true))
                .await;
            let offset = settled_offset().await;
            if let Some(node) = crate::cluster::node() {
                node.with_engine(|engine| engine.writes_paused(offset, crate::util::now_ms()));
            }
        }
        Effect::Unpause => {
            cell.call_all(|c| c.data.borrow_mut().unpause_clients())
                .await;
        }
        Effect::DeleteKeysInSlots(slots) => delete_keys_in_slots(cell, slots).await,
        Effect::TopologyChanged => {
            crate::connection::redirect::redirect_blocked_clients(cell).await
        }
        // The bus carries these out itself.
        Effect::Send { .. } | Effect::Connect { .. } | Effect::Close { .. } => {}
        Effect::SaveConfig { .. } => {}
    }
}

/// The replication offset once writes are held: a write that passed the pause
/// check before the pause may still be on its way to the stream, so read until
/// it stands still (a few ms; at most 100). The replica takes this offset as
/// final and waits to reach exactly it.
async fn settled_offset() -> u64 {
    let mut offset = crate::effects::offset();
    for _ in 0..20 {
        crate::runtime::sleep(std::time::Duration::from_millis(5)).await;
        let now = crate::effects::offset();
        if now == offset {
            break;
        }
        offset = now;
    }
    offset
}

/// Redis's delKeysInSlot for every slot this master lost while staying a master:
/// each key is deleted where it lives, its DEL propagated to replicas and the AOF
/// as an expired key's is, and its watchers and blocked clients told.
async fn delete_keys_in_slots(cell: &Rc<ShardCell>, slots: Vec<u16>) {
    let mut deleted = 0usize;
    for slot in slots {
        let shard = cell.slots.owner(slot);
        let removed = cell
            .call(shard, move |c| {
                let mut d = c.data.borrow_mut();
                let db = &mut d.dbs[0];
                let idx = (slot as usize).saturating_sub(db.first_slot());
                let keys = db.delete_slot(idx);
                for key in &keys {
                    d.signal_modified(0, key);
                }
                crate::shard::exec::after_deletions(&mut d, None);
                d.dirty += keys.len() as u64;
                keys.len()
            })
            .await;
        deleted += removed;
    }
    if deleted > 0 {
        tracing::warn!("Deleted {deleted} keys from slots this node no longer serves");
    }
}
