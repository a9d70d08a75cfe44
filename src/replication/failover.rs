//! FAILOVER (Redis 7.0's coordinated failover, replication.c failoverCommand and
//! updateFailoverStatus): the master holds writes, waits until a replica (the one
//! named with TO, or any) acknowledged everything, then becomes that replica's
//! replica with `PSYNC <replid> <offset> FAILOVER`, which makes the replica promote
//! itself and answer +CONTINUE. No write is acknowledged that the new master lacks:
//! the held writes run after the switch, on a replica, and are refused READONLY.
//!
//! The state is process-wide (FAILOVER runs on any shard); the replication cron on
//! shard 0 moves it on (`cron`), the link task reports the PSYNC's outcome.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// Redis's failover_state, as INFO's master_failover_state names it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum State {
    None = 0,
    WaitForSync = 1,
    InProgress = 2,
}

static STATE: AtomicU8 = AtomicU8::new(0);

/// The failover being run: its target (once known), deadline and FORCE.
struct Plan {
    target: Option<(String, u16)>,
    /// Unix ms; 0 without a TIMEOUT.
    deadline_ms: u64,
    force: bool,
}

static PLAN: Mutex<Option<Plan>> = Mutex::new(None);

fn plan() -> std::sync::MutexGuard<'static, Option<Plan>> {
    PLAN.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn state() -> State {
    match STATE.load(Ordering::SeqCst) {
        1 => State::WaitForSync,
        2 => State::InProgress,
        _ => State::None,
    }
}

fn set_state(s: State) {
    STATE.store(s as u8, Ordering::SeqCst);
}

/// INFO's master_failover_state.
pub fn state_name() -> &'static str {
    match state() {
        State::None => "no-failover",
        State::WaitForSync => "waiting-for-sync",
        State::InProgress => "failover-in-progress",
    }
}

/// The PSYNC the link sends is the failover's (it carries FAILOVER).
pub fn in_progress() -> bool {
    state() == State::InProgress
}

/// What FAILOVER asked for, parsed.
pub struct Request {
    pub target: Option<(String, u16)>,
    pub timeout_ms: u64,
    pub force: bool,
}

/// Starts a failover (the command's checks in Redis's order). Err: the reply.
pub async fn start(
    cell: &std::rc::Rc<crate::shard::ShardCell>,
    req: Request,
) -> Result<(), String> {
    if state() != State::None {
        return Err("ERR FAILOVER already in progress.".into());
    }
    if super::is_replica() {
        return Err("ERR FAILOVER is not valid when server is a replica.".into());
    }
    if super::link_count() == 0 {
        return Err("ERR FAILOVER requires connected replicas.".into());
    }
    if req.force && (req.timeout_ms == 0 || req.target.is_none()) {
        return Err(
            "ERR FAILOVER with force option requires both a timeout and target HOST and IP.".into(),
        );
    }
    match &req.target {
        Some((host, port)) => {
            if !super::has_replica(host, *port) {
                return Err("ERR FAILOVER target HOST and PORT is not a replica.".into());
            }
            tracing::info!("FAILOVER requested to {host}:{port}.");
        }
        None => tracing::info!("FAILOVER requested to any replica."),
    }
    *plan() = Some(Plan {
        target: req.target,
        deadline_ms: if req.timeout_ms > 0 {
            crate::util::now_ms() + req.timeout_ms
        } else {
            0
        },
        force: req.force,
    });
    set_state(State::WaitForSync);
    hold_writes(cell, true).await;
    Ok(())
}

/// FAILOVER ABORT. Err: the reply.
pub async fn abort_by_user(cell: &std::rc::Rc<crate::shard::ShardCell>) -> Result<(), String> {
    if state() == State::None {
        return Err("ERR No failover in progress.".into());
    }
    abort(cell, "Failover manually aborted").await;
    Ok(())
}

async fn hold_writes(cell: &std::rc::Rc<crate::shard::ShardCell>, on: bool) {
    crate::shard::pause::hold_writes(cell, crate::shard::pause::WriteHold::Failover, on).await;
}

/// Redis's abortFailover: logged, a switch already begun undone (master again), the
/// writes let go.
async fn abort(cell: &std::rc::Rc<crate::shard::ShardCell>, why: &str) {
    let target = plan().as_ref().and_then(|p| p.target.clone());
    match target {
        Some((h, p)) => tracing::info!("FAILOVER to {h}:{p} aborted: {why}"),
        None => tracing::info!("FAILOVER to any replica aborted: {why}"),
    }
    if state() == State::InProgress {
        super::become_master(cell, false).await;
    }
    clear(cell).await;
}

/// Redis's clearFailoverState: no failover, writes let go.
async fn clear(cell: &std::rc::Rc<crate::shard::ShardCell>) {
    *plan() = None;
    set_state(State::None);
    hold_writes(cell, false).await;
}

/// Redis's updateFailoverStatus, from the replication cron: the timeout, and the
/// switch once the target acknowledged the whole stream.
pub async fn cron(cell: &std::rc::Rc<crate::shard::ShardCell>) {
    if state() != State::WaitForSync {
        return;
    }
    let (deadline, force, target) = match plan().as_ref() {
        Some(p) => (p.deadline_ms, p.force, p.target.clone()),
        None => return,
    };
    let offset = crate::effects::offset();
    if deadline != 0 && crate::util::now_ms() >= deadline {
        match (force, target) {
            (true, Some((host, port))) => {
                tracing::info!("FAILOVER to {host}:{port} time out exceeded, failing over.");
                switch(cell, host, port).await;
            }
            _ => abort(cell, "Replica never caught up before timeout").await,
        }
        return;
    }
    let synced = match target {
        Some((host, port)) => super::replica_acked(&host, port, offset).then_some((host, port)),
        None => super::replica_with_ack(offset),
    };
    if let Some((host, port)) = synced {
        tracing::info!("Failover target {host}:{port} is synced, failing over.");
        switch(cell, host, port).await;
    }
}

/// The switch: this master becomes its target's replica; its PSYNC says FAILOVER.
async fn switch(cell: &std::rc::Rc<crate::shard::ShardCell>, host: String, port: u16) {
    if let Some(p) = plan().as_mut() {
        p.target = Some((host.clone(), port));
    }
    set_state(State::InProgress);
    super::become_replica_of(cell, host, port).await;
}

/// The link's PSYNC during the switch was answered: +CONTINUE or +FULLRESYNC end the
/// failover (Redis accepts either), anything else aborts it.
pub async fn psync_answered(cell: &std::rc::Rc<crate::shard::ShardCell>, accepted: bool) {
    if state() != State::InProgress {
        return;
    }
    if accepted {
        clear(cell).await;
    } else {
        abort(cell, "Failover target rejected psync request").await;
    }
}

/// A failover on its way refuses replicas' syncs (Redis: -NOMASTERLINK).
pub fn refuses_sync() -> bool {
    state() != State::None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_names_follow_redis() {
        set_state(State::None);
        assert_eq!(state_name(), "no-failover");
        set_state(State::WaitForSync);
        assert_eq!(state_name(), "waiting-for-sync");
        set_state(State::InProgress);
        assert!(in_progress());
        assert_eq!(state_name(), "failover-in-progress");
        set_state(State::None);
    }
}
