//! The SPSC mesh between shards: one queue per (sender, receiver) pair.
//!
//! Queues are unbounded so a send never waits: a shard can therefore never block on a
//! peer whose own sends are blocked on it (DESIGN.md §6). What bounds them is the
//! protocol above: every connection waits for its replies before sending more.
//! Each queue is only ever touched by its two shards, so its mutex is uncontended
//! except at the moment of hand-off; the receiver takes the whole backlog at once.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

struct Queue<T> {
    items: VecDeque<T>,
    waker: Option<Waker>,
    closed: bool,
}

struct Channel<T> {
    q: Mutex<Queue<T>>,
}

/// One shard's ends of the mesh, before its executor starts.
pub struct MeshEnds<T: Send + 'static> {
    senders: Vec<Option<Arc<Channel<T>>>>,
    receivers: Vec<Option<Arc<Channel<T>>>>,
}

/// Builds the full mesh among `n` shards; element `i` belongs to shard `i`.
pub fn build_mesh<T: Send + 'static>(n: usize) -> Vec<MeshEnds<T>> {
    let mut ends: Vec<MeshEnds<T>> = (0..n)
        .map(|_| MeshEnds {
            senders: (0..n).map(|_| None).collect(),
            receivers: (0..n).map(|_| None).collect(),
        })
        .collect();
    for from in 0..n {
        for to in 0..n {
            if from != to {
                let ch = Arc::new(Channel {
                    q: Mutex::new(Queue {
                        items: VecDeque::new(),
                        waker: None,
                        closed: false,
                    }),
                });
                ends[from].senders[to] = Some(ch.clone());
                ends[to].receivers[from] = Some(ch);
            }
        }
    }
    ends
}

impl<T: Send + 'static> MeshEnds<T> {
    pub fn split(self) -> (MeshSenders<T>, Vec<(usize, MeshReceiver<T>)>) {
        let receivers = self
            .receivers
            .into_iter()
            .enumerate()
            .filter_map(|(from, r)| r.map(|ch| (from, MeshReceiver { ch })))
            .collect();
        (
            MeshSenders {
                peers: self.senders,
            },
            receivers,
        )
    }
}

pub struct MeshSenders<T: Send + 'static> {
    peers: Vec<Option<Arc<Channel<T>>>>,
}

impl<T: Send + 'static> MeshSenders<T> {
    /// Queues `msg` for shard `to` and wakes its receiver. Returns the message if the
    /// peer has gone away or `to` is not a peer.
    pub fn send(&self, to: usize, msg: T) -> Result<(), T> {
        let Some(Some(ch)) = self.peers.get(to) else {
            return Err(msg);
        };
        let waker = {
            let Ok(mut q) = ch.q.lock() else {
                return Err(msg);
            };
            if q.closed {
                return Err(msg);
            }
            q.items.push_back(msg);
            q.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }
}

pub struct MeshReceiver<T: Send + 'static> {
    ch: Arc<Channel<T>>,
}

impl<T: Send + 'static> MeshReceiver<T> {
    /// Waits for at least one message and moves everything queued into `out`.
    pub async fn recv_batch(&self, out: &mut VecDeque<T>) {
        poll_fn(|cx| {
            let Ok(mut q) = self.ch.q.lock() else {
                return Poll::Pending;
            };
            if q.items.is_empty() {
                q.waker = Some(cx.waker().clone());
                Poll::Pending
            } else {
                std::mem::swap(&mut q.items, out);
                Poll::Ready(())
            }
        })
        .await
    }
}

impl<T: Send + 'static> Drop for MeshReceiver<T> {
    fn drop(&mut self) {
        if let Ok(mut q) = self.ch.q.lock() {
            q.closed = true;
        }
    }
}
