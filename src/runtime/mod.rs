//! The thin layer between Tessera and its async runtime.
//!
//! Each shard runs one single-threaded executor pinned to its CPU, with an
//! edge-triggered epoll reactor for sockets, an eventfd for wake-ups from other shards,
//! a timer heap, and unbounded SPSC mailboxes between shards. Everything
//! runtime-specific lives under this module, so shard and command code never name it.
//!
//! Why not glommio (the first runtime behind this module): glommio 0.9 sets up its
//! io_uring rings without COOP/DEFER_TASKRUN, so each completion interrupts the running
//! shard with an IPI to run task_work. Under redis-benchmark that was 19% of the
//! server's CPU (perf, see benches/RESULTS.md). A readiness loop has no such
//! interruptions, and a busy shard batches its readiness checks into one epoll_wait
//! per round of ready tasks.

mod executor;
mod mesh;
mod net;
mod reactor;
mod scripted;
mod tls;

use std::future::Future;
use std::io;
use std::time::Duration;

pub use executor::JoinHandle;
pub use mesh::{build_mesh, MeshEnds, MeshReceiver, MeshSenders};
pub use net::{
    listen_exclusive, probe_bind, BindAddr, Listener, PeerAddr, ReadWaker, TcpListener, TcpStream,
    UnixListener,
};
pub use scripted::{Script, ScriptOutcome, ScriptRound, ScriptedClient};
pub use tls::TlsSession;

/// Spawns a task on the current shard's executor; awaiting the handle gives its output.
pub fn spawn<T: 'static>(fut: impl Future<Output = T> + 'static) -> JoinHandle<T> {
    executor::spawn(fut)
}

/// Spawns a task that runs to completion on its own.
pub fn spawn_detached(fut: impl Future<Output = ()> + 'static) {
    executor::spawn_detached(fut)
}

pub async fn sleep(d: Duration) {
    reactor::sleep(d).await
}

/// Which of two futures `first` saw end.
pub enum First<A, B> {
    A(A),
    B(B),
}

/// Waits for whichever of `a` and `b` ends first (`a` wins a tie); the other is
/// dropped, so it must be cancel-safe (a read, a sleep, a task's handle).
pub async fn first<A: Future, B: Future>(a: A, b: B) -> First<A::Output, B::Output> {
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(v) = a.as_mut().poll(cx) {
            return std::task::Poll::Ready(First::A(v));
        }
        if let std::task::Poll::Ready(v) = b.as_mut().poll(cx) {
            return std::task::Poll::Ready(First::B(v));
        }
        std::task::Poll::Pending
    })
    .await
}

/// Runs `fut` to completion without returning to the executor, serving this shard's
/// other tasks and I/O while it waits. For synchronous callers only (a Lua
/// `redis.call`); async code awaits instead.
pub fn block_on_nested<F: Future>(fut: F) -> F::Output {
    executor::block_on_nested(fut)
}

/// Serves this shard's ready tasks and I/O once, from inside a long synchronous
/// computation (a script past busy-reply-threshold).
pub fn serve_while_blocked() {
    executor::serve_while_blocked()
}

/// Whether another task of this shard is ready to run now.
pub fn others_ready() -> bool {
    executor::others_ready()
}

/// Continues once every other task ready in this round has run, before the shard
/// looks for new I/O.
pub async fn yield_to_round_end() {
    executor::YieldToRoundEnd(false).await
}

/// Wakes the task of `waker` once every task ready in this round has run: work that
/// the round's tasks hand to one task (the per-shard hop outbox) is done once for all.
pub fn wake_at_round_end(waker: &std::task::Waker) {
    executor::wake_at_round_end(waker)
}

/// Waits until this shard has nothing else to do, or `at_most` has passed (so the
/// caller progresses under full load too): for background work such as a BGSAVE's
/// walk, which must not take time clients are waiting for.
pub async fn idle_or_after(at_most: Duration) {
    let mut idle = std::pin::pin!(executor::WhenIdle::new());
    let mut timer = std::pin::pin!(sleep(at_most));
    std::future::poll_fn(|cx| {
        if idle.as_mut().poll(cx).is_ready() || timer.as_mut().poll(cx).is_ready() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}

/// Lets every other ready task of this shard run once before continuing.
pub async fn yield_now() {
    executor::YieldNow(false).await
}

/// Starts one executor thread, pinned to `cpu` when given, running `body` and then
/// every task it spawns, for the life of the process.
pub fn start_executor<F, Fut>(
    name: &str,
    cpu: Option<usize>,
    body: F,
) -> io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    std::thread::Builder::new()
        .name(name.to_string())
        // Lua scripts run on the shard thread, and Lua's C calls nest on its stack
        // (Redis runs them on its main thread's 8 MiB); untouched pages cost nothing.
        .stack_size(64 << 20)
        .spawn(move || {
            if let Some(c) = cpu {
                if !core_affinity::set_for_current(core_affinity::CoreId { id: c }) {
                    tracing::warn!(cpu = c, "could not pin shard thread");
                }
            }
            match executor::Executor::new() {
                Ok(ex) => ex.run(body()),
                Err(e) => tracing::error!("could not start executor: {e}"),
            }
        })
}

/// Binds a listener with SO_REUSEPORT so every shard can accept on the same port.
pub fn bind_reuseport(addr: std::net::SocketAddr) -> io::Result<TcpListener> {
    TcpListener::bind_reuseport(addr)
}
