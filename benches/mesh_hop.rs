//! A cross-shard hop over the mesh (src/runtime/mesh.rs): shard A sends, shard B's
//! `recv_batch` wakes and answers, A receives the answer. Two OS threads stand in for
//! the two shard executors; each parks while its receiver is empty, as an idle
//! executor would sleep in epoll, so a round trip includes two cross-thread wake-ups.

use criterion::{criterion_group, criterion_main, Criterion};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use tessera::runtime::{build_mesh, MeshReceiver, MeshSenders};

/// Wakes a parked thread: the smallest executor that can drive `recv_batch`.
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

fn block_on<F: Future>(fut: F) -> F::Output {
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// Ends of a two-shard mesh: (senders, receiver from the other shard).
fn two_shards() -> [(MeshSenders<u64>, MeshReceiver<u64>); 2] {
    let mut ends = build_mesh::<u64>(2).into_iter().map(|e| {
        let (tx, mut rx) = e.split();
        (tx, rx.pop().map(|(_, r)| r).expect("one peer"))
    });
    let a = ends.next().expect("shard 0");
    let b = ends.next().expect("shard 1");
    [a, b]
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("mesh_hop");
    g.bench_function("round_trip", |b| {
        let [(tx_a, rx_a), (tx_b, rx_b)] = two_shards();
        // Shard B echoes every message back until it receives u64::MAX.
        let echo = std::thread::spawn(move || {
            let mut batch = VecDeque::new();
            loop {
                block_on(rx_b.recv_batch(&mut batch));
                for m in batch.drain(..) {
                    if m == u64::MAX {
                        return;
                    }
                    let _ = tx_b.send(0, m);
                }
            }
        });
        let mut batch = VecDeque::new();
        let mut n = 0u64;
        b.iter(|| {
            n += 1;
            let _ = tx_a.send(1, n);
            block_on(rx_a.recv_batch(&mut batch));
            batch.clear();
        });
        let _ = tx_a.send(1, u64::MAX);
        let _ = echo.join();
    });
    g.bench_function("batch_of_64_one_way", |b| {
        let [(tx_a, _rx_a), (_tx_b, rx_b)] = two_shards();
        let mut batch = VecDeque::with_capacity(64);
        // Single-threaded: measures the queue and batching cost without wake-ups.
        b.iter(|| {
            for m in 0..64 {
                let _ = tx_a.send(1, m);
            }
            block_on(rx_b.recv_batch(&mut batch));
            let n = batch.len();
            batch.clear();
            n
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
