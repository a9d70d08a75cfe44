//! CLIENT PAUSE: while a pause is in force, clients' commands wait (all of them, or in
//! WRITE mode those that may write or propagate) and the dataset holds still, as in
//! Redis 7.0: no key is expired or evicted until the pause ends.
//!
//! CLIENT PAUSE / UNPAUSE reach every shard, and each shard keeps its own copy of the
//! pause, so a connection checks it without leaving its core. Connections waiting on a
//! shard are woken by UNPAUSE; a pause that simply runs out is noticed by their timer.

use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// The longest single sleep of a waiting client: a pause may last up to i64::MAX ms,
/// more than a timer can hold; the client checks again after this.
const LONGEST_SLEEP: Duration = Duration::from_secs(3600);

#[derive(Default)]
pub struct ClientPause {
    /// Unix ms at which the pause ends; 0 when none is in force.
    until_ms: u64,
    /// Only commands that may write or propagate wait (CLIENT PAUSE ... WRITE).
    writes_only: bool,
    /// Connections waiting for the pause to end, woken by `unpause`.
    waiters: Vec<Waker>,
    /// Holds on writes that last until their owner lets go, whatever CLIENT PAUSE /
    /// UNPAUSE do (Redis's pause purposes): a set of `WriteHold` bits.
    write_holds: u8,
}

/// Who holds writes beside CLIENT PAUSE (Redis's PAUSE_DURING_FAILOVER and
/// PAUSE_DURING_SHUTDOWN): each lets go of its own hold only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteHold {
    /// A FAILOVER, until the switch or its abort.
    Failover = 1,
    /// A shutdown waiting for lagging replicas, until it exits or is aborted.
    Shutdown = 2,
}

impl ClientPause {
    /// Starts or extends a pause. A new pause never shortens one in force, nor turns
    /// an ALL pause into a WRITE one (Redis's pauseClients).
    /// An end of 0 (CLIENT PAUSE 0) starts nothing but may still make a pause in
    /// force stricter.
    pub fn pause(&mut self, until_ms: u64, writes_only: bool) {
        if self.until_ms == 0 {
            if until_ms == 0 {
                return;
            }
            self.until_ms = until_ms;
            self.writes_only = writes_only;
        } else {
            self.until_ms = self.until_ms.max(until_ms);
            self.writes_only &= writes_only;
        }
    }

    /// Ends the pause and wakes every waiting connection (the write holds stay).
    pub fn unpause(&mut self) {
        self.until_ms = 0;
        self.writes_only = false;
        for w in self.waiters.drain(..) {
            w.wake();
        }
    }

    /// Starts or ends `hold`'s hold on writes.
    pub fn set_write_hold(&mut self, hold: WriteHold, on: bool) {
        if on {
            self.write_holds |= hold as u8;
        } else {
            self.write_holds &= !(hold as u8);
        }
        if self.write_holds == 0 {
            for w in self.waiters.drain(..) {
                w.wake();
            }
        }
    }

    /// Whether a pause was set and not yet seen to end (it may have run out: callers
    /// that act on it go through `in_force`).
    #[inline]
    pub fn is_set(&self) -> bool {
        self.until_ms != 0 || self.write_holds != 0
    }

    /// Whether a pause is in force at `now_ms`; a pause whose time is up ends here.
    pub fn in_force(&mut self, now_ms: u64) -> bool {
        if self.until_ms != 0 && now_ms > self.until_ms {
            self.unpause();
        }
        self.until_ms != 0 || self.write_holds != 0
    }

    /// When a command must wait: the pause's end, if one is in force that holds
    /// this command (`may_write`: it may write or propagate).
    pub fn holds(&mut self, now_ms: u64, may_write: bool) -> Option<u64> {
        if self.write_holds != 0 && may_write {
            return Some(u64::MAX);
        }
        if !self.in_force(now_ms) || self.until_ms == 0 || (self.writes_only && !may_write) {
            return None;
        }
        Some(self.until_ms)
    }

    /// Wakes `waker` at UNPAUSE. Each waiting connection registers once per sleep.
    fn register(&mut self, waker: &Waker) {
        if !self.waiters.iter().any(|w| w.will_wake(waker)) {
            self.waiters.push(waker.clone());
        }
    }

    /// Connections waiting now (tests).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.waiters.len()
    }
}

/// Starts or ends `hold`'s hold on writes on every shard (a FAILOVER's, a
/// shutdown's), returning once each shard has it.
pub async fn hold_writes(cell: &std::rc::Rc<super::ShardCell>, hold: WriteHold, on: bool) {
    cell.call_all(move |c| c.data.borrow_mut().hold_writes(hold, on))
        .await;
}

/// Waits while the shard's pause holds a command (`may_write` as for `holds`), or
/// until `gone` says the client left. Returns at once when no pause holds it.
pub async fn wait_while_paused(
    cell: &crate::shard::ShardCell,
    may_write: bool,
    gone: impl Fn() -> bool,
) {
    loop {
        let until = {
            let mut data = cell.data.borrow_mut();
            let now = crate::util::now_ms();
            match data.pause_holds(now, may_write) {
                Some(until) => Duration::from_millis(until.saturating_sub(now) + 1),
                None => return,
            }
        };
        if gone() {
            return;
        }
        let mut timer = std::pin::pin!(crate::runtime::sleep(until.min(LONGEST_SLEEP)));
        let mut registered = false;
        std::future::poll_fn(|cx: &mut Context<'_>| {
            if registered {
                // Woken: by UNPAUSE, by the timer, or by the socket watch around us.
                return Poll::Ready(());
            }
            if timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
            cell.data.borrow_mut().client_pause.register(cx.waker());
            registered = true;
            Poll::Pending
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_pause_never_shortens_or_weakens_one_in_force() {
        let mut p = ClientPause::default();
        p.pause(2000, false);
        p.pause(1000, true);
        assert_eq!(p.holds(1500, false), Some(2000), "ALL stays ALL, end stays");
        p.pause(3000, true);
        assert_eq!(p.holds(2500, false), Some(3000), "extended, still ALL");
        p.unpause();
        p.pause(1000, true);
        assert_eq!(p.holds(500, false), None, "reads pass a WRITE pause");
        assert_eq!(p.holds(500, true), Some(1000));
    }

    #[test]
    fn a_pause_ends_when_its_time_is_up_and_wakes_its_waiters() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        struct Count(AtomicUsize);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut p = ClientPause::default();
        p.pause(1000, false);
        p.register(&waker);
        p.register(&waker);
        assert_eq!(p.waiting(), 1, "one registration per waker");
        assert!(p.in_force(1000), "in force through its last millisecond");
        assert!(!p.in_force(1001));
        assert!(!p.is_set());
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(p.holds(1001, true), None);
    }
}
