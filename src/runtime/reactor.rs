//! Readiness and time for one executor: an edge-triggered epoll set (sockets plus the
//! executor's eventfd) and a timer heap. Only the owning thread touches it.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use hashbrown::HashMap;

/// Token of the executor's eventfd in the epoll set.
const EVENTFD_TOKEN: u64 = u64::MAX;

/// Readiness of one registered fd. Edge-triggered: a flag is set by an event and
/// cleared by the I/O call that hit EAGAIN, so no edge is ever lost.
#[derive(Default)]
pub(crate) struct IoState {
    pub readable: Cell<bool>,
    /// The peer closed its side (EPOLLRDHUP) or the socket failed: reads go on until
    /// one returns end-of-file, since no further edge will announce it.
    pub read_closed: Cell<bool>,
    pub writable: Cell<bool>,
    pub read_waker: RefCell<Option<Waker>>,
    pub write_waker: RefCell<Option<Waker>>,
}

pub struct Reactor {
    epfd: i32,
    eventfd: i32,
    ios: RefCell<HashMap<u64, Rc<IoState>>>,
    next_token: Cell<u64>,
    timers: RefCell<BinaryHeap<Reverse<(Instant, u64)>>>,
    timer_wakers: RefCell<HashMap<u64, Waker>>,
    next_timer: Cell<u64>,
    events: RefCell<Vec<libc::epoll_event>>,
}

fn cvt(r: i32) -> io::Result<i32> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Reactor {
    pub fn new() -> io::Result<Reactor> {
        // SAFETY: plain syscalls creating fds this reactor owns.
        let (epfd, eventfd) = unsafe {
            (
                cvt(libc::epoll_create1(libc::EPOLL_CLOEXEC))?,
                cvt(libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC))?,
            )
        };
        let r = Reactor {
            epfd,
            eventfd,
            ios: RefCell::new(HashMap::new()),
            next_token: Cell::new(1),
            timers: RefCell::new(BinaryHeap::new()),
            timer_wakers: RefCell::new(HashMap::new()),
            next_timer: Cell::new(1),
            events: RefCell::new(vec![libc::epoll_event { events: 0, u64: 0 }; 256]),
        };
        r.ctl(
            libc::EPOLL_CTL_ADD,
            eventfd,
            EVENTFD_TOKEN,
            libc::EPOLLIN as u32 | libc::EPOLLET as u32,
        )?;
        Ok(r)
    }

    pub fn eventfd(&self) -> i32 {
        self.eventfd
    }

    fn ctl(&self, op: i32, fd: i32, token: u64, events: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: epoll_ctl on our epoll fd with a valid event struct.
        cvt(unsafe { libc::epoll_ctl(self.epfd, op, fd, &mut ev) }).map(|_| ())
    }

    /// Adds `fd` to the epoll set for both directions, edge-triggered.
    pub(crate) fn register(&self, fd: i32) -> io::Result<(u64, Rc<IoState>)> {
        let token = self.next_token.get();
        self.next_token.set(token + 1);
        let state = Rc::new(IoState {
            readable: Cell::new(true),
            writable: Cell::new(true),
            ..Default::default()
        });
        let events = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, events)?;
        self.ios.borrow_mut().insert(token, state.clone());
        Ok((token, state))
    }

    pub(crate) fn deregister(&self, fd: i32, token: u64) {
        let _ = self.ctl(libc::EPOLL_CTL_DEL, fd, token, 0);
        let mut ios = self.ios.borrow_mut();
        ios.remove(&token);
        // The table of a burst of closed connections goes back (see shrink_map).
        crate::clients::shrink_map(&mut ios);
    }

    /// Waits for events (or only checks, when `block` is false), wakes the tasks they
    /// concern and fires due timers.
    pub fn poll(&self, block: bool) {
        let timeout = if block { self.next_timeout_ms() } else { 0 };
        let n = {
            let mut events = self.events.borrow_mut();
            // SAFETY: the buffer holds `events.len()` initialised epoll_event structs.
            unsafe {
                libc::epoll_wait(self.epfd, events.as_mut_ptr(), events.len() as i32, timeout)
            }
        };
        for i in 0..n.max(0) as usize {
            let (token, bits) = {
                let events = self.events.borrow();
                (events[i].u64, events[i].events)
            };
            self.dispatch(token, bits);
        }
        self.fire_timers();
    }

    fn dispatch(&self, token: u64, bits: u32) {
        if token == EVENTFD_TOKEN {
            let mut buf = 0u64;
            // SAFETY: reading 8 bytes into a u64 from our nonblocking eventfd.
            unsafe {
                libc::read(self.eventfd, &mut buf as *mut u64 as *mut libc::c_void, 8);
            }
            return;
        }
        let Some(state) = self.ios.borrow().get(&token).cloned() else {
            return;
        };
        let err = bits & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0;
        if err || bits & libc::EPOLLRDHUP as u32 != 0 {
            state.read_closed.set(true);
        }
        if err || bits & (libc::EPOLLIN | libc::EPOLLRDHUP) as u32 != 0 {
            state.readable.set(true);
            if let Some(w) = state.read_waker.borrow_mut().take() {
                w.wake();
            }
        }
        if err || bits & libc::EPOLLOUT as u32 != 0 {
            state.writable.set(true);
            if let Some(w) = state.write_waker.borrow_mut().take() {
                w.wake();
            }
        }
    }

    fn next_timeout_ms(&self) -> i32 {
        match self.timers.borrow().peek() {
            None => -1,
            Some(Reverse((at, _))) => {
                let d = at.saturating_duration_since(Instant::now());
                // Round up so a timer is never polled a hair too early.
                d.as_millis().min(i32::MAX as u128) as i32
                    + i32::from(d.subsec_nanos() % 1_000_000 != 0)
            }
        }
    }

    fn fire_timers(&self) {
        let now = Instant::now();
        loop {
            let id = {
                let mut timers = self.timers.borrow_mut();
                match timers.peek() {
                    Some(Reverse((at, id))) if *at <= now => {
                        let id = *id;
                        timers.pop();
                        id
                    }
                    _ => return,
                }
            };
            let w = self.timer_wakers.borrow_mut().remove(&id);
            if let Some(w) = w {
                w.wake();
            }
        }
    }

    fn add_timer(&self, at: Instant, waker: Waker) -> u64 {
        let id = self.next_timer.get();
        self.next_timer.set(id + 1);
        self.timers.borrow_mut().push(Reverse((at, id)));
        self.timer_wakers.borrow_mut().insert(id, waker);
        id
    }
}

/// Completes once `d` has passed.
pub fn sleep(d: Duration) -> Sleep {
    Sleep {
        at: Instant::now() + d,
        timer: None,
    }
}

pub struct Sleep {
    at: Instant,
    timer: Option<u64>,
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.at {
            return Poll::Ready(());
        }
        let ex = super::executor::current();
        match self.timer {
            Some(id) => {
                ex.reactor
                    .timer_wakers
                    .borrow_mut()
                    .insert(id, cx.waker().clone());
            }
            None => self.timer = Some(ex.reactor.add_timer(self.at, cx.waker().clone())),
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let (Some(id), Some(ex)) = (self.timer, super::executor::try_current()) {
            ex.reactor.timer_wakers.borrow_mut().remove(&id);
        }
    }
}
