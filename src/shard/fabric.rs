//! The cross-shard fabric: closures travel to the owning shard over the SPSC mesh and
//! their results come back through a oneshot. A shard's mailbox loop only ever *runs*
//! jobs — it never awaits a send — so two shards can never wait on each other's queues
//! (DESIGN.md §6). Jobs that must wait (for a key lock) spawn a local task instead.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use futures_channel::oneshot;

use super::ShardCell;
use crate::runtime::{self, MeshReceiver};

/// Work sent to another shard. It runs on that shard's thread with its state.
pub type Job = Box<dyn FnOnce(&Rc<ShardCell>) + Send>;

/// A future produced on the target shard by an async job.
pub type LocalFuture<R> = Pin<Box<dyn Future<Output = R>>>;

/// Drains one peer's queue forever, running each job as it arrives.
pub async fn run_mailbox(cell: Rc<ShardCell>, rx: MeshReceiver<Job>) {
    let mut batch = std::collections::VecDeque::new();
    loop {
        rx.recv_batch(&mut batch).await;
        while let Some(job) = batch.pop_front() {
            job(&cell);
        }
    }
}

impl ShardCell {
    /// Runs `f` on shard `target` and returns its result. Runs inline when the target
    /// is this shard.
    pub async fn call<R, F>(self: &Rc<Self>, target: usize, f: F) -> R
    where
        R: Send + 'static,
        F: FnOnce(&Rc<ShardCell>) -> R + Send + 'static,
    {
        if target == self.id {
            return f(self);
        }
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |cell| {
            let _ = tx.send(f(cell));
        });
        self.send_job(target, job);
        match rx.await {
            Ok(r) => r,
            Err(_) => shard_gone(),
        }
    }

    /// Like `call`, but `f` builds a future that runs as a task on the target shard
    /// (for work that may wait there, such as acquiring key locks).
    pub async fn call_async<R, F>(self: &Rc<Self>, target: usize, f: F) -> R
    where
        R: Send + 'static,
        F: FnOnce(Rc<ShardCell>) -> LocalFuture<R> + Send + 'static,
    {
        if target == self.id {
            return f(self.clone()).await;
        }
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |cell| {
            let fut = f(cell.clone());
            runtime::spawn_detached(async move {
                let _ = tx.send(fut.await);
            });
        });
        self.send_job(target, job);
        match rx.await {
            Ok(r) => r,
            Err(_) => shard_gone(),
        }
    }

    /// Sends `f` to run on `target` without waiting for it.
    pub async fn tell<F>(self: &Rc<Self>, target: usize, f: F)
    where
        F: FnOnce(&Rc<ShardCell>) + Send + 'static,
    {
        if target == self.id {
            f(self);
            return;
        }
        self.send_job(target, Box::new(f));
    }

    /// Runs `f` on every shard concurrently; results in shard order.
    pub async fn call_all<R, F>(self: &Rc<Self>, f: F) -> Vec<R>
    where
        R: Send + 'static,
        F: Fn(&Rc<ShardCell>) -> R + Send + Clone + 'static,
    {
        let n = self.shard_count();
        let mut pending = Vec::with_capacity(n);
        for target in 0..n {
            if target == self.id {
                continue;
            }
            let (tx, rx) = oneshot::channel();
            let g = f.clone();
            let job: Job = Box::new(move |cell| {
                let _ = tx.send(g(cell));
            });
            self.send_job(target, job);
            pending.push((target, rx));
        }
        self.gather(f(self), pending).await
    }

    /// `call_all`, with each answer travelling back over the mesh rather than a
    /// oneshot: whatever `f` sent this shard over the mesh (the invalidations of keys
    /// it evicted) runs here before its answer does, one peer's queue being FIFO, so
    /// the caller resumes only after those effects reached its clients.
    pub async fn call_all_in_order<R, F>(self: &Rc<Self>, f: F) -> Vec<R>
    where
        R: Send + 'static,
        F: Fn(&Rc<ShardCell>) -> R + Send + Clone + 'static,
    {
        let n = self.shard_count();
        let asker = self.id;
        let mut pending = Vec::with_capacity(n);
        for target in 0..n {
            if target == asker {
                continue;
            }
            let (tx, rx) = oneshot::channel();
            let g = f.clone();
            let job: Job = Box::new(move |cell| {
                let r = g(cell);
                cell.send_job(asker, Box::new(move |_| drop(tx.send(r))));
            });
            self.send_job(target, job);
            pending.push((target, rx));
        }
        self.gather(f(self), pending).await
    }

    /// Awaits the answers of `call_all*`, this shard's own being `mine`.
    async fn gather<R>(&self, mine: R, pending: Vec<(usize, oneshot::Receiver<R>)>) -> Vec<R> {
        let n = self.shard_count();
        let mut out: Vec<Option<R>> = (0..n).map(|_| None).collect();
        out[self.id] = Some(mine);
        for (target, rx) in pending {
            out[target] = Some(match rx.await {
                Ok(r) => r,
                Err(_) => shard_gone(),
            });
        }
        out.into_iter().flatten().collect()
    }

    pub(super) fn send_job(&self, target: usize, job: Job) {
        if self.mesh.send(target, job).is_err() {
            shard_gone()
        }
    }
}

#[cold]
fn shard_gone() -> ! {
    // Shards only go away at process exit; a lost reply means the process is ending.
    tracing::debug!("peer shard went away during shutdown");
    std::process::exit(0)
}
