//! The thin layer between Tessera and its async runtime (glommio 0.9).
//!
//! Everything runtime-specific lives here — executors pinned to CPUs, the SPSC mesh
//! between shards, TCP, timers, task spawning — so the runtime could be swapped without
//! touching shard or command code. glommio gets few upstream fixes; keep its surface small.

use std::future::Future;
use std::io;
use std::time::Duration;

use glommio::channels::shared_channel::{self, ConnectedReceiver, ConnectedSender};
use glommio::{LocalExecutorBuilder, Placement};

pub use glommio::net::{TcpListener, TcpStream};
pub use glommio::task::JoinHandle as DetachedHandle;
pub use glommio::Task;

/// Bytes of io_uring registered buffer memory per executor. RLIMIT_MEMLOCK is often
/// 8 MiB for an unprivileged process, so with 16+ shards this must stay small.
const IO_MEMORY_PER_EXECUTOR: usize = 256 * 1024;

/// Spawns a task on the current shard's executor.
pub fn spawn<T: 'static>(fut: impl Future<Output = T> + 'static) -> Task<T> {
    glommio::spawn_local(fut)
}

/// Spawns a task that runs to completion on its own.
pub fn spawn_detached<T: 'static>(fut: impl Future<Output = T> + 'static) {
    glommio::spawn_local(fut).detach();
}

pub async fn sleep(d: Duration) {
    glommio::timer::sleep(d).await
}

/// Lets other tasks of this shard run if this one has used up its time slice.
pub async fn yield_if_needed() {
    glommio::yield_if_needed().await
}

pub async fn yield_now() {
    glommio::executor().yield_now().await
}

/// Starts one pinned executor thread running `body`. `cpu: None` leaves it unpinned.
pub fn start_executor<F, Fut>(
    name: &str,
    cpu: Option<usize>,
    spin_before_park: Option<Duration>,
    body: F,
) -> io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let placement = match cpu {
        Some(c) => Placement::Fixed(c),
        None => Placement::Unbound,
    };
    let mut builder = LocalExecutorBuilder::new(placement)
        .name(name)
        .io_memory(IO_MEMORY_PER_EXECUTOR)
        .ring_depth(256)
        .preempt_timer(Duration::from_millis(10));
    if let Some(spin) = spin_before_park {
        builder = builder.spin_before_park(spin);
    }
    let handle = builder
        .spawn(body)
        .map_err(|e| io::Error::other(e.to_string()))?;
    // glommio's join handle wraps the std one; expose only std's so callers stay
    // runtime-agnostic.
    Ok(std::thread::spawn(move || {
        let _ = handle.join();
    }))
}

/// The not-yet-connected ends of the full SPSC mesh: `pending[from][to]`.
pub struct MeshEnds<T: Send + 'static> {
    senders: Vec<Option<shared_channel::SharedSender<T>>>,
    receivers: Vec<Option<shared_channel::SharedReceiver<T>>>,
}

/// Builds a full mesh of bounded SPSC channels among `n` shards; returns, for each
/// shard `i`, its senders to every `j != i` and receivers from every `j != i`.
pub fn build_mesh<T: Send + 'static>(n: usize, capacity: usize) -> Vec<MeshEnds<T>> {
    let mut ends: Vec<MeshEnds<T>> = (0..n)
        .map(|_| MeshEnds {
            senders: (0..n).map(|_| None).collect(),
            receivers: (0..n).map(|_| None).collect(),
        })
        .collect();
    for from in 0..n {
        for to in 0..n {
            if from != to {
                let (tx, rx) = shared_channel::new_bounded(capacity);
                ends[from].senders[to] = Some(tx);
                ends[to].receivers[from] = Some(rx);
            }
        }
    }
    ends
}

/// A shard's connected view of the mesh: send to any peer by index.
pub struct MeshSenders<T: Send + 'static> {
    peers: Vec<Option<ConnectedSender<T>>>,
}

impl<T: Send + 'static> MeshSenders<T> {
    /// Sends, waiting while the peer's queue is full. Returns the message back if the
    /// peer has gone away (shutdown).
    pub async fn send(&self, to: usize, msg: T) -> Result<(), T> {
        match self.peers.get(to).and_then(|p| p.as_ref()) {
            Some(tx) => tx.send(msg).await.map_err(|e| match e {
                glommio::GlommioError::Closed(glommio::ResourceType::Channel(m)) => m,
                glommio::GlommioError::WouldBlock(glommio::ResourceType::Channel(m)) => m,
                _ => unreachable_send_error(),
            }),
            None => Err(unreachable_send_error()),
        }
    }

    pub fn close(&self) {
        for p in self.peers.iter().flatten() {
            p.close();
        }
    }
}

#[cold]
fn unreachable_send_error<T>() -> T {
    // A send to ourselves or a nonexistent shard is a routing bug, not input-driven.
    panic!("mesh send to an invalid shard index")
}

impl<T: Send + 'static> MeshEnds<T> {
    /// Connects this shard's ends; must run inside the shard's executor. Each end
    /// waits for its peer to connect, so all ends are connected concurrently (in
    /// sequence, two shards could wait on each other forever).
    pub async fn connect(self) -> (MeshSenders<T>, Vec<(usize, ConnectedReceiver<T>)>) {
        let senders: Vec<Option<Task<ConnectedSender<T>>>> = self
            .senders
            .into_iter()
            .map(|s| s.map(|s| glommio::spawn_local(s.connect())))
            .collect();
        let receivers: Vec<(usize, Task<ConnectedReceiver<T>>)> = self
            .receivers
            .into_iter()
            .enumerate()
            .filter_map(|(from, r)| r.map(|r| (from, glommio::spawn_local(r.connect()))))
            .collect();
        let mut peers = Vec::with_capacity(senders.len());
        for s in senders {
            peers.push(match s {
                Some(t) => Some(t.await),
                None => None,
            });
        }
        let mut connected = Vec::with_capacity(receivers.len());
        for (from, t) in receivers {
            connected.push((from, t.await));
        }
        (MeshSenders { peers }, connected)
    }
}

pub type MeshReceiver<T> = ConnectedReceiver<T>;

/// Binds a listener with SO_REUSEPORT so every shard can accept on the same port.
pub fn bind_reuseport(addr: &str) -> io::Result<TcpListener> {
    TcpListener::bind(addr).map_err(|e| io::Error::other(e.to_string()))
}
