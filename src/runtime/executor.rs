//! A single-threaded executor. Tasks live in a generation-checked slab; a waker pushes
//! its task id onto the local ready queue when woken on the executor's own thread, or
//! onto a mutex-protected remote queue (plus an eventfd write if the executor sleeps)
//! when woken from another shard.
//!
//! A task that must stay synchronous while it waits (a Lua script's `redis.call`)
//! runs the loop from inside its own poll (`block_on_nested`); its own wake-ups are
//! parked until it returns, so no future is ever polled re-entrantly.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use super::reactor::Reactor;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct TaskId {
    index: u32,
    generation: u32,
}

/// State shared with other threads: where they put wake-ups for this executor.
pub(crate) struct Remote {
    executor_id: usize,
    queue: Mutex<Vec<TaskId>>,
    pending: AtomicBool,
    /// Set while the executor is (about to be) blocked in epoll_wait.
    sleeping: AtomicBool,
    eventfd: i32,
}

impl Remote {
    fn push(&self, id: TaskId) {
        if let Ok(mut q) = self.queue.lock() {
            q.push(id);
        }
        self.kick();
    }

    /// Makes a sleeping executor look at its queues again.
    fn kick(&self) {
        self.pending.store(true, Ordering::SeqCst);
        if self.sleeping.swap(false, Ordering::SeqCst) {
            let one: u64 = 1;
            // SAFETY: writing 8 bytes from a valid u64 to our own eventfd.
            unsafe {
                libc::write(self.eventfd, &one as *const u64 as *const libc::c_void, 8);
            }
        }
    }
}

struct TaskWaker {
    id: TaskId,
    remote: Arc<Remote>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let local = CURRENT_ID.with(|c| c.get()) == self.remote.executor_id;
        if local {
            let pushed = CURRENT.with(|c| match &*c.borrow() {
                Some(ex) => {
                    ex.ready.borrow_mut().push_back(self.id);
                    true
                }
                None => false,
            });
            if pushed {
                return;
            }
        }
        self.remote.push(self.id);
    }
}

type BoxedTask = Pin<Box<dyn Future<Output = ()>>>;

struct Slot {
    generation: u32,
    future: Option<BoxedTask>,
    waker: Option<Waker>,
    /// The slot holds a live task (its future may be out while it is being polled).
    live: bool,
}

pub struct Executor {
    remote: Arc<Remote>,
    slots: RefCell<Vec<Slot>>,
    /// Indices of dead slots to reuse. May hold indices past the end of `slots`
    /// (dropped by `release_tail`): `spawn_boxed` skips those.
    free: RefCell<Vec<u32>>,
    /// The highest generation of any slot dropped from the end: a slot created again
    /// at that index starts above it, so a stale TaskId never names the new task.
    retired_generation: Cell<u32>,
    ready: RefCell<VecDeque<TaskId>>,
    /// Tasks waiting in `YieldToRoundEnd` for the rest of the round to run.
    round_end: RefCell<Vec<Waker>>,
    /// Tasks woken while they were still being polled further up the stack (a task
    /// that runs a nested loop, see `block_on_nested`): they go back on the ready
    /// queue once that loop ends, not lost and not polled re-entrantly.
    parked: RefCell<Vec<TaskId>>,
    /// Background work waiting for a moment when nothing else is ready (`WhenIdle`),
    /// each with the flag that tells it that moment came.
    idle: RefCell<Vec<(Rc<Cell<bool>>, Waker)>>,
    pub(crate) reactor: Reactor,
}

/// How long a nested loop spins for a reply before it sleeps (`spin_for_wakeup`).
const NESTED_SPIN: std::time::Duration = std::time::Duration::from_micros(50);

static NEXT_EXECUTOR_ID: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    static CURRENT: RefCell<Option<Rc<Executor>>> = const { RefCell::new(None) };
    static CURRENT_ID: Cell<usize> = const { Cell::new(0) };
}

pub(crate) fn try_current() -> Option<Rc<Executor>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// The executor of the calling thread. Runtime functions are only called from tasks.
pub(crate) fn current() -> Rc<Executor> {
    CURRENT.with(|c| c.borrow().clone()).unwrap_or_else(|| {
        // Calling runtime functions outside an executor is a programming error.
        panic!("no Tessera executor on this thread")
    })
}

impl Executor {
    pub fn new() -> io::Result<Rc<Executor>> {
        let reactor = Reactor::new()?;
        let remote = Arc::new(Remote {
            executor_id: NEXT_EXECUTOR_ID.fetch_add(1, Ordering::Relaxed),
            queue: Mutex::new(Vec::new()),
            pending: AtomicBool::new(false),
            sleeping: AtomicBool::new(false),
            eventfd: reactor.eventfd(),
        });
        let ex = Rc::new(Executor {
            remote,
            slots: RefCell::new(Vec::new()),
            free: RefCell::new(Vec::new()),
            retired_generation: Cell::new(0),
            ready: RefCell::new(VecDeque::new()),
            round_end: RefCell::new(Vec::new()),
            parked: RefCell::new(Vec::new()),
            idle: RefCell::new(Vec::new()),
            reactor,
        });
        CURRENT_ID.with(|c| c.set(ex.remote.executor_id));
        CURRENT.with(|c| *c.borrow_mut() = Some(ex.clone()));
        Ok(ex)
    }

    fn spawn_boxed(&self, future: BoxedTask) {
        let reusable = {
            let len = self.slots.borrow().len();
            let mut free = self.free.borrow_mut();
            // A dropped slot's index is skipped; new slots are only pushed once the
            // list is empty, so none of them can be named by such an index.
            loop {
                match free.pop() {
                    Some(i) if (i as usize) < len => break Some(i),
                    Some(_) => continue,
                    None => break None,
                }
            }
        };
        let index = match reusable {
            Some(i) => i,
            None => {
                let mut slots = self.slots.borrow_mut();
                slots.push(Slot {
                    generation: self.retired_generation.get(),
                    future: None,
                    waker: None,
                    live: false,
                });
                (slots.len() - 1) as u32
            }
        };
        let mut slots = self.slots.borrow_mut();
        let slot = &mut slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        let id = TaskId {
            index,
            generation: slot.generation,
        };
        slot.future = Some(future);
        slot.live = true;
        slot.waker = Some(Waker::from(Arc::new(TaskWaker {
            id,
            remote: self.remote.clone(),
        })));
        drop(slots);
        self.ready.borrow_mut().push_back(id);
    }

    /// Polls one task if `id` still names it.
    fn poll_task(&self, id: TaskId) {
        let (mut fut, waker) = {
            let mut slots = self.slots.borrow_mut();
            let Some(slot) = slots.get_mut(id.index as usize) else {
                return;
            };
            if slot.generation != id.generation || !slot.live {
                return;
            }
            let Some(f) = slot.future.take() else {
                // Live but out of its slot: it is mid-poll below a nested loop.
                self.parked.borrow_mut().push(id);
                return;
            };
            (f, slot.waker.clone())
        };
        let Some(waker) = waker else {
            return;
        };
        let mut cx = Context::from_waker(&waker);
        let done = fut.as_mut().poll(&mut cx).is_ready();
        let mut slots = self.slots.borrow_mut();
        let slot = &mut slots[id.index as usize];
        if done {
            slot.live = false;
            slot.waker = None;
            drop(slots);
            drop(fut);
            self.free.borrow_mut().push(id.index);
            self.release_tail();
        } else {
            slot.future = Some(fut);
        }
    }

    /// Drops the dead slots at the end of the table and gives memory back once it is
    /// mostly unused: 10,000 connections that came and went left ~330 KB of slots per
    /// shard resident. Each slot is pushed and dropped at most once per use, so this
    /// costs O(1) per task amortized.
    fn release_tail(&self) {
        let mut slots = self.slots.borrow_mut();
        let mut retired = self.retired_generation.get();
        while slots.last().is_some_and(|s| !s.live && s.future.is_none()) {
            if let Some(s) = slots.pop() {
                retired = retired.max(s.generation);
            }
        }
        self.retired_generation.set(retired);
        let len = slots.len();
        if slots.capacity() > 1024 && len * 4 < slots.capacity() {
            slots.shrink_to(len * 2);
            let mut free = self.free.borrow_mut();
            free.retain(|&i| (i as usize) < len);
            let keep = free.len() * 2;
            free.shrink_to(keep);
        }
    }

    /// One round: every task ready now; tasks woken during the round wait for the
    /// next one, after the reactor had a chance to report I/O.
    fn run_round(&self) {
        let round = self.ready.borrow().len();
        for _ in 0..round {
            let next = self.ready.borrow_mut().pop_front();
            match next {
                Some(id) => self.poll_task(id),
                None => break,
            }
        }
    }

    /// One round of the loop run from inside a task that cannot return yet (a Lua
    /// script waiting for a command or serving clients while busy): every task ready
    /// now, the deferred ones, then the reactor, which sleeps only when `may_sleep`
    /// says nothing the caller waits for has happened.
    fn nested_round(&self, may_sleep: &dyn Fn() -> bool) {
        self.drain_remote();
        self.run_round();
        let deferred = std::mem::take(&mut *self.round_end.borrow_mut());
        deferred.into_iter().for_each(Waker::wake);
        self.drain_remote();
        let mut block = self.ready.borrow().is_empty() && may_sleep();
        if block && self.spin_for_wakeup(may_sleep) {
            block = false;
        }
        if block {
            self.remote.sleeping.store(true, Ordering::SeqCst);
            if self.remote.pending.load(Ordering::SeqCst) || !may_sleep() {
                block = false;
            }
        }
        self.reactor.poll(block);
        self.remote.sleeping.store(false, Ordering::SeqCst);
    }

    /// Spins up to `NESTED_SPIN` for a wake-up from another shard; true if one came.
    /// A nested loop waits for one reply only (a script's command on another shard,
    /// while the script holds every shard), and the reply usually comes within
    /// microseconds: sleeping would add a wake-up (an interrupt and a context switch)
    /// to every such command.
    fn spin_for_wakeup(&self, may_sleep: &dyn Fn() -> bool) -> bool {
        let until = std::time::Instant::now() + NESTED_SPIN;
        loop {
            if self.remote.pending.load(Ordering::Acquire) || !may_sleep() {
                return true;
            }
            if std::time::Instant::now() >= until {
                return false;
            }
            for _ in 0..64 {
                std::hint::spin_loop();
            }
        }
    }

    /// Puts tasks woken during a nested loop back on the ready queue.
    fn unpark(&self) {
        let parked = std::mem::take(&mut *self.parked.borrow_mut());
        self.ready.borrow_mut().extend(parked);
    }

    fn drain_remote(&self) {
        if !self.remote.pending.swap(false, Ordering::SeqCst) {
            return;
        }
        let ids = match self.remote.queue.lock() {
            Ok(mut q) => std::mem::take(&mut *q),
            Err(_) => return,
        };
        self.ready.borrow_mut().extend(ids);
    }

    /// Runs `main` and every spawned task forever (the process ends shards).
    pub fn run(self: Rc<Self>, main: impl Future<Output = ()> + 'static) {
        self.spawn_boxed(Box::pin(main));
        let mut polled_last_round = true;
        loop {
            self.drain_remote();
            self.run_round();
            // Tasks that waited for the end of the round go on now, without a reactor
            // poll first (that would be one more system call between a connection's
            // commands and its reply); at most every other round skips the poll, so
            // readiness is still collected however often tasks ask.
            let deferred = std::mem::take(&mut *self.round_end.borrow_mut());
            if !deferred.is_empty() {
                deferred.into_iter().for_each(Waker::wake);
                if polled_last_round {
                    polled_last_round = false;
                    continue;
                }
            }
            polled_last_round = true;
            self.drain_remote();
            let idle = self.ready.borrow().is_empty();
            if idle && !self.idle.borrow().is_empty() {
                // Background work runs only if no task is ready once pending I/O is
                // collected: the executor is idle, so it need not block yet.
                self.reactor.poll(false);
                self.drain_remote();
                if self.ready.borrow().is_empty() {
                    for (came, waker) in std::mem::take(&mut *self.idle.borrow_mut()) {
                        came.set(true);
                        waker.wake();
                    }
                }
                continue;
            }
            if idle {
                self.remote.sleeping.store(true, Ordering::SeqCst);
                if self.remote.pending.load(Ordering::SeqCst) {
                    self.remote.sleeping.store(false, Ordering::SeqCst);
                    continue;
                }
            }
            self.reactor.poll(idle);
            self.remote.sleeping.store(false, Ordering::SeqCst);
        }
    }
}

/// Wakes `block_on_nested`'s loop, from this thread or another.
struct NestedWaker {
    woken: AtomicBool,
    remote: Arc<Remote>,
}

impl Wake for NestedWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        if CURRENT_ID.with(|c| c.get()) != self.remote.executor_id {
            self.remote.kick();
        }
    }
}

/// Runs `fut` to completion from inside a task's poll, running this executor's other
/// tasks and its reactor while `fut` waits (Redis's processEventsWhileBlocked, for
/// code that must stay synchronous, such as a Lua `redis.call`). The calling task is
/// not polled meanwhile: a wake-up for it is kept for after.
pub fn block_on_nested<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let ex = current();
    let flag = Arc::new(NestedWaker {
        woken: AtomicBool::new(false),
        remote: ex.remote.clone(),
    });
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    loop {
        flag.woken.store(false, Ordering::SeqCst);
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            ex.unpark();
            return v;
        }
        while !flag.woken.load(Ordering::SeqCst) {
            ex.nested_round(&|| !flag.woken.load(Ordering::SeqCst));
        }
    }
}

/// One round of this executor's other tasks and a non-blocking look at the reactor,
/// from inside a task that cannot return yet (a long script answering -BUSY).
pub fn serve_while_blocked() {
    if let Some(ex) = try_current() {
        ex.nested_round(&|| false);
        ex.unpark();
    }
}

/// Resolves after every other task already ready in this round has had its turn,
/// before the reactor is polled again.
pub struct YieldToRoundEnd(pub bool);

impl Future for YieldToRoundEnd {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        wake_at_round_end(cx.waker());
        Poll::Pending
    }
}

/// Wakes `waker`'s task once every task ready in this round has run (at once when
/// called outside an executor).
pub fn wake_at_round_end(waker: &Waker) {
    match try_current() {
        Some(ex) => ex.round_end.borrow_mut().push(waker.clone()),
        None => waker.wake_by_ref(),
    }
}

/// Ready when this executor has nothing else to do (no task ready, no I/O pending):
/// how background work (a BGSAVE's walk) yields to clients.
pub struct WhenIdle(Option<Rc<Cell<bool>>>);

impl WhenIdle {
    pub fn new() -> WhenIdle {
        WhenIdle(None)
    }
}

impl Default for WhenIdle {
    fn default() -> Self {
        WhenIdle::new()
    }
}

impl Future for WhenIdle {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(came) = &self.0 {
            if came.get() {
                return Poll::Ready(());
            }
        }
        let Some(ex) = try_current() else {
            return Poll::Ready(());
        };
        let came = self
            .0
            .get_or_insert_with(|| Rc::new(Cell::new(false)))
            .clone();
        let mut idle = ex.idle.borrow_mut();
        // One registration per future: a re-poll replaces its waker.
        idle.retain(|(c, _)| !Rc::ptr_eq(c, &came));
        idle.push((came, cx.waker().clone()));
        Poll::Pending
    }
}

impl Drop for WhenIdle {
    fn drop(&mut self) {
        if let (Some(came), Some(ex)) = (&self.0, try_current()) {
            ex.idle.borrow_mut().retain(|(c, _)| !Rc::ptr_eq(c, came));
        }
    }
}

/// Whether another task of this shard is waiting to run in the current round.
pub fn others_ready() -> bool {
    CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .is_some_and(|ex| !ex.ready.borrow().is_empty())
    })
}

pub fn spawn_detached(fut: impl Future<Output = ()> + 'static) {
    current().spawn_boxed(Box::pin(fut));
}

/// Handle to a spawned task's output.
pub struct JoinHandle<T> {
    state: Rc<RefCell<(Option<T>, Option<Waker>)>>,
}

pub fn spawn<T: 'static>(fut: impl Future<Output = T> + 'static) -> JoinHandle<T> {
    let state: Rc<RefCell<(Option<T>, Option<Waker>)>> = Rc::new(RefCell::new((None, None)));
    let s2 = state.clone();
    spawn_detached(async move {
        let v = fut.await;
        let mut st = s2.borrow_mut();
        st.0 = Some(v);
        if let Some(w) = st.1.take() {
            w.wake();
        }
    });
    JoinHandle { state }
}

impl<T> Future for JoinHandle<T> {
    type Output = T;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut st = self.state.borrow_mut();
        match st.0.take() {
            Some(v) => Poll::Ready(v),
            None => {
                st.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Returns Pending once (after waking itself), so other ready tasks run first.
pub struct YieldNow(pub bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Runs `main` on a fresh executor thread and returns what it sends back.
    fn run_on_executor<T: Send + 'static>(
        main: impl FnOnce(std::sync::mpsc::Sender<T>) -> BoxedTask + Send + 'static,
    ) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || match Executor::new() {
            Ok(ex) => ex.run(main(tx)),
            Err(e) => panic!("executor: {e}"),
        });
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(v) => v,
            Err(e) => panic!("executor test timed out: {e}"),
        }
    }

    #[test]
    fn block_on_nested_runs_other_tasks_and_keeps_the_callers_wakeup() {
        let (ran, polls) = run_on_executor(|tx| {
            Box::pin(async move {
                let other_ran = Rc::new(Cell::new(false));
                let flag = other_ran.clone();
                spawn_detached(async move { flag.set(true) });
                let polls = Rc::new(Cell::new(0));
                let p = polls.clone();
                // The caller wakes itself before blocking: the wake-up must survive
                // the nested loop (parked, then re-queued) so it is polled again.
                let caller = spawn(std::future::poll_fn(move |cx| {
                    p.set(p.get() + 1);
                    if p.get() == 1 {
                        cx.waker().wake_by_ref();
                        block_on_nested(super::super::reactor::sleep(Duration::from_millis(5)));
                        return Poll::Pending;
                    }
                    Poll::Ready(())
                }));
                caller.await;
                let _ = tx.send((other_ran.get(), polls.get()));
            })
        });
        assert!(ran, "the other task did not run during the nested loop");
        assert_eq!(polls, 2);
    }

    #[test]
    fn block_on_nested_is_woken_from_another_thread() {
        let v = run_on_executor(|tx| {
            Box::pin(async move {
                let (otx, orx) = futures_channel::oneshot::channel();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(20));
                    let _ = otx.send(7u32);
                });
                let v = block_on_nested(orx).unwrap_or(0);
                let _ = tx.send(v);
            })
        });
        assert_eq!(v, 7);
    }
}
