//! Pipeline batches bound for other shards, gathered per destination over one round of
//! this shard's executor and sent as one message (DESIGN.md §3.4, taken across
//! connections): every connection that flushes in a round adds its batch to the
//! `ShardOutbox`, and the outbox task sends each destination everything at once when
//! the round ends. The destination runs the batches in order and sends them back in
//! one message, whose job completes every connection's wait on this shard. A round
//! with ten flushing connections costs one mesh message, one wake-up of the peer and
//! one reply message, where each connection used to send, wake and be woken on its
//! own (with a oneshot channel each), and the peer wakes this shard once, not once
//! per connection from its thread.
//!
//! Order is kept where it matters: one connection has at most one batch per shard in
//! flight (it waits for its replies before it sends more), and batches of one round
//! reach the peer in the order they were added.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use super::batch::{self, BatchReply, OwnedBatch};
use super::ShardCell;

/// One connection's batch for one shard, travelling there and back in a hop.
pub struct HopRequest {
    /// The sender's completion slot (`ShardOutbox::slots`).
    slot: u32,
    /// Run on the peer's task instead of inline (it waited for a key lock): its
    /// reply comes back in a message of its own, and this entry is empty.
    deferred: bool,
    batch: OwnedBatch,
    reply: BatchReply,
}

// `Done` holds a batch and its reply in place: boxing it would allocate once per hop
// on the hot path, and the slot vector is small (one entry per hop in flight).
#[allow(clippy::large_enum_variant)]
enum Slot {
    Free,
    /// Sent; the waiting connection's waker once it has polled.
    Waiting(Option<Waker>),
    Done(BatchReply, OwnedBatch),
    /// The waiting connection went away: the reply is dropped when it comes.
    Abandoned,
}

/// The hops of one shard: requests gathered for the end of the round, and the
/// completion slots of those in flight. Touched only by its shard's thread.
#[derive(Default)]
pub struct ShardOutbox {
    /// Requests per destination shard, to send when the round ends.
    pending: RefCell<Vec<Vec<HopRequest>>>,
    /// Request vectors that came back emptied, reused for the next hops.
    spare: RefCell<Vec<Vec<HopRequest>>>,
    slots: RefCell<Vec<Slot>>,
    free: RefCell<Vec<u32>>,
    /// A send is due at the end of the current round.
    scheduled: Cell<bool>,
    /// The outbox task (`run_outbox`), woken at the end of a round with requests.
    sender: RefCell<Option<Waker>>,
}

/// A connection's wait for the reply to one batch it sent with `ShardCell::hop`.
pub struct HopWait {
    cell: Rc<ShardCell>,
    slot: u32,
    finished: bool,
}

impl ShardCell {
    /// Sends `batch` to shard `target` (not this one) with the emptied `reply` it
    /// writes into; the request leaves when the current round ends.
    pub fn hop(self: &Rc<Self>, target: usize, batch: OwnedBatch, reply: BatchReply) -> HopWait {
        let outbox = &self.outbox;
        let slot = outbox.claim_slot();
        {
            let mut pending = outbox.pending.borrow_mut();
            if pending.len() <= target {
                pending.resize_with(self.shard_count(), Vec::new);
            }
            if pending[target].capacity() == 0 {
                if let Some(v) = outbox.spare.borrow_mut().pop() {
                    pending[target] = v;
                }
            }
            pending[target].push(HopRequest {
                slot,
                deferred: false,
                batch,
                reply,
            });
        }
        if !outbox.scheduled.replace(true) {
            if let Some(w) = outbox.sender.borrow().as_ref() {
                crate::runtime::wake_at_round_end(w);
            }
        }
        HopWait {
            cell: self.clone(),
            slot,
            finished: false,
        }
    }
}

impl ShardOutbox {
    fn claim_slot(&self) -> u32 {
        let mut slots = self.slots.borrow_mut();
        match self.free.borrow_mut().pop() {
            Some(i) => {
                slots[i as usize] = Slot::Waiting(None);
                i
            }
            None => {
                slots.push(Slot::Waiting(None));
                (slots.len() - 1) as u32
            }
        }
    }

    fn release(&self, slot: u32) {
        self.slots.borrow_mut()[slot as usize] = Slot::Free;
        self.free.borrow_mut().push(slot);
    }

    /// Stores a reply that came back and wakes its connection (a local wake-up).
    fn complete(&self, slot: u32, reply: BatchReply, batch: OwnedBatch) {
        let previous = {
            let mut slots = self.slots.borrow_mut();
            let Some(s) = slots.get_mut(slot as usize) else {
                return;
            };
            std::mem::replace(s, Slot::Done(reply, batch))
        };
        match previous {
            Slot::Waiting(Some(w)) => w.wake(),
            Slot::Abandoned => self.release(slot),
            _ => {}
        }
    }
}

impl Future for HopWait {
    type Output = (BatchReply, OwnedBatch);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let outbox = &self.cell.outbox;
        let done = {
            let mut slots = outbox.slots.borrow_mut();
            let s = &mut slots[self.slot as usize];
            match std::mem::replace(s, Slot::Free) {
                Slot::Done(r, b) => Some((r, b)),
                _ => {
                    *s = Slot::Waiting(Some(cx.waker().clone()));
                    None
                }
            }
        };
        match done {
            Some(out) => {
                outbox.release(self.slot);
                self.finished = true;
                Poll::Ready(out)
            }
            None => Poll::Pending,
        }
    }
}

impl Drop for HopWait {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let outbox = &self.cell.outbox;
        let done = {
            let mut slots = outbox.slots.borrow_mut();
            let s = &mut slots[self.slot as usize];
            if matches!(s, Slot::Done(..)) {
                true
            } else {
                *s = Slot::Abandoned;
                false
            }
        };
        if done {
            outbox.release(self.slot);
        }
    }
}

/// The outbox task of a shard with peers: at the end of every round in which
/// connections added requests, sends each destination its requests in one message.
pub async fn run_outbox(cell: Rc<ShardCell>) {
    loop {
        std::future::poll_fn(|cx| {
            if cell.outbox.scheduled.get() {
                Poll::Ready(())
            } else {
                *cell.outbox.sender.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await;
        cell.outbox.scheduled.set(false);
        let home = cell.id;
        for target in 0..cell.shard_count() {
            let requests = match cell.outbox.pending.borrow_mut().get_mut(target) {
                Some(v) if !v.is_empty() => std::mem::take(v),
                _ => continue,
            };
            cell.send_job(
                target,
                Box::new(move |peer| serve_hop(peer, home, requests)),
            );
        }
    }
}

/// On the destination: runs each request's batch in order and sends the replies home
/// in one message. A batch that must wait for a key lock finishes on a task of its
/// own and goes home alone.
fn serve_hop(cell: &Rc<ShardCell>, home: usize, mut requests: Vec<HopRequest>) {
    for req in &requests {
        req.batch.prefetch_buffers();
    }
    for req in requests.iter_mut() {
        let slot = req.slot;
        let peer = cell.clone();
        let inline = batch::run_remote(cell, &mut req.batch, &mut req.reply, move |r, b| {
            peer.send_job(home, Box::new(move |c| c.outbox.complete(slot, r, b)));
        });
        req.deferred = !inline;
    }
    cell.send_job(home, Box::new(move |c| complete_hop(c, requests)));
}

/// Back home: hands each reply to its connection and keeps the emptied vector (unless
/// a burst of connections grew it past `SPARE_MAX_REQUESTS`: it would hold that
/// memory for good).
fn complete_hop(cell: &Rc<ShardCell>, mut requests: Vec<HopRequest>) {
    for req in &requests {
        req.reply.prefetch();
    }
    for req in requests.drain(..) {
        if !req.deferred {
            cell.outbox.complete(req.slot, req.reply, req.batch);
        }
    }
    if requests.capacity() <= SPARE_MAX_REQUESTS {
        cell.outbox.spare.borrow_mut().push(requests);
    }
}

/// The largest request vector kept for reuse: a round's flushing connections for one
/// shard rarely number more than a few dozen.
const SPARE_MAX_REQUESTS: usize = 256;
