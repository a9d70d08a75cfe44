//! The cluster bus's sockets: one thread that owns every bus connection and runs
//! the membership engine (`membership.rs`) on what they carry.
//!
//! The bus is control traffic — a PING a second per node, failure reports,
//! votes, the odd PUBLISH — so it lives on a thread of its own, off the shards:
//! an epoll set over the listening sockets, every link (non-blocking, with a
//! read buffer that frames messages and a write buffer that drains as the socket
//! allows), and an eventfd that wakes the thread when a client command changed
//! the engine. Each round it hands what arrived to the engine, ticks its cron
//! every 100 ms, and carries out the effects: sends, connects and closes itself,
//! everything else (saving nodes.conf, delivering a PUBLISH, replication,
//! republishing routes) through the `Host` the server provides.

use super::membership::{Effect, LinkId, Membership, CRON_PERIOD_MS};
use super::wire;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// What the bus needs from the server around it.
pub trait Host: Send {
    /// Carries out an effect the bus does not handle itself (see `Effect`), with
    /// the engine's lock held so it can read the state the effect is about (the
    /// node table to save, the routes to publish). It runs before the round's
    /// messages go out: a node saves a configuration before announcing it.
    fn effect(&mut self, effect: Effect, engine: &Membership);
    /// This node's replication offset and, on a replica, how long (ms) since it
    /// last heard from its master (`Membership::set_replication`).
    fn replication(&mut self) -> (u64, u64);
}

/// Epoll tokens below this are the listeners and the wake-up eventfd; links use
/// their id shifted above it.
const WAKE_TOKEN: u64 = 0;
const FIRST_LISTENER_TOKEN: u64 = 1;
const LINK_TOKEN_BASE: u64 = 1 << 32;
/// Read this much at a time; a whole header fits.
const READ_CHUNK: usize = 16 * 1024;

struct Shared {
    engine: Mutex<Membership>,
    wake: OwnedFd,
    stop: AtomicBool,
}

impl Shared {
    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an eventfd this struct owns.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

/// The running bus. Dropping it stops the thread and closes every connection.
pub struct Bus {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Bus {
    /// Starts the bus thread on `listeners` (bound to the bus port already).
    pub fn start(
        engine: Membership,
        listeners: Vec<TcpListener>,
        host: Box<dyn Host>,
    ) -> io::Result<Bus> {
        // SAFETY: plain syscalls creating fds owned by the values built from them.
        let (epoll, wake) = unsafe {
            (
                OwnedFd::from_raw_fd(cvt(libc::epoll_create1(libc::EPOLL_CLOEXEC))?),
                OwnedFd::from_raw_fd(cvt(libc::eventfd(
                    0,
                    libc::EFD_NONBLOCK | libc::EFD_CLOEXEC,
                ))?),
            )
        };
        register(
            epoll.as_raw_fd(),
            wake.as_raw_fd(),
            WAKE_TOKEN,
            libc::EPOLLIN as u32,
        )?;
        for (i, listener) in listeners.iter().enumerate() {
            listener.set_nonblocking(true)?;
            register(
                epoll.as_raw_fd(),
                listener.as_raw_fd(),
                FIRST_LISTENER_TOKEN + i as u64,
                libc::EPOLLIN as u32,
            )?;
        }
        let shared = Arc::new(Shared {
            engine: Mutex::new(engine),
            wake,
            stop: AtomicBool::new(false),
        });
        let mut worker = Worker {
            shared: shared.clone(),
            epoll,
            listeners,
            conns: HashMap::new(),
            host,
        };
        let thread = std::thread::Builder::new()
            .name("cluster-bus".into())
            .spawn(move || worker.run())?;
        Ok(Bus {
            shared,
            thread: Some(thread),
        })
    }

    /// Runs `f` on the engine (a CLUSTER command, a PUBLISH to relay), then wakes
    /// the bus so the effects go out now rather than at the next tick.
    pub fn with_engine<T>(&self, f: impl FnOnce(&mut Membership) -> T) -> T {
        let result = f(&mut lock(&self.shared.engine));
        self.shared.wake();
        result
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The engine's lock. A panic elsewhere while holding it leaves state that is
/// still the last consistent one the engine wrote, so carry on with it.
fn lock(engine: &Mutex<Membership>) -> MutexGuard<'_, Membership> {
    engine
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One bus connection.
struct Conn {
    stream: TcpStream,
    /// Our outbound connect has not completed yet.
    connecting: bool,
    peer_ip: String,
    local_ip: String,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Bytes of `output` already written.
    sent: usize,
    /// EPOLLOUT is in the interest set.
    wants_write: bool,
}

struct Worker {
    shared: Arc<Shared>,
    epoll: OwnedFd,
    listeners: Vec<TcpListener>,
    conns: HashMap<LinkId, Conn>,
    host: Box<dyn Host>,
}

/// What happened to a link while the engine's lock was not held.
enum LinkEvent {
    Connected(LinkId),
    Failed(LinkId),
}

impl Worker {
    fn run(&mut self) {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
        let mut next_cron = crate::util::now_ms() + CRON_PERIOD_MS;
        while !self.shared.stop.load(Ordering::Acquire) {
            let wait = next_cron
                .saturating_sub(crate::util::now_ms())
                .min(CRON_PERIOD_MS) as i32;
            // SAFETY: the buffer outlives the call and its length is passed.
            let n = unsafe {
                libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as i32,
                    wait,
                )
            };
            let ready: Vec<(u64, u32)> = events[..n.max(0) as usize]
                .iter()
                .map(|e| (e.u64, e.events))
                .collect();
            let mut link_events = Vec::new();
            let mut arrived = Vec::new();
            for (token, flags) in ready {
                match token {
                    WAKE_TOKEN => self.drain_wake(),
                    t if t < LINK_TOKEN_BASE => {
                        self.accept_all((t - FIRST_LISTENER_TOKEN) as usize, &mut arrived)
                    }
                    t => self.on_ready(
                        LinkId(t - LINK_TOKEN_BASE),
                        flags,
                        &mut link_events,
                        &mut arrived,
                    ),
                }
            }
            let now = crate::util::now_ms();
            let cron_due = now >= next_cron;
            if cron_due {
                next_cron = now + CRON_PERIOD_MS;
            }
            self.step(arrived, link_events, cron_due, now);
        }
    }

    /// One round of the engine under its lock, then the effects outside it.
    fn step(
        &mut self,
        arrived: Vec<Arrived>,
        link_events: Vec<LinkEvent>,
        cron_due: bool,
        now: u64,
    ) {
        let replication = if cron_due {
            Some(self.host.replication())
        } else {
            None
        };
        let shared = self.shared.clone();
        let mut effects = {
            let mut engine = lock(&shared.engine);
            for a in arrived {
                match a {
                    Arrived::Accepted(conn) => {
                        let link = engine.on_accept(now);
                        self.add_conn(link, conn);
                    }
                    Arrived::Frames(link, frames) => self.deliver(&mut engine, link, frames, now),
                    Arrived::Lost(link) => engine.on_link_error(link),
                }
            }
            for e in link_events {
                match e {
                    LinkEvent::Connected(link) => engine.on_connected(link, now),
                    LinkEvent::Failed(link) => engine.on_link_error(link),
                }
            }
            if let Some((offset, age)) = replication {
                engine.set_replication(offset, age);
                engine.cron(now);
            }
            engine.before_sleep(now);
            self.host_effects(&mut engine)
        };
        // Carrying out effects can fail links (a refused connect), which the
        // engine must hear about, which may produce more effects.
        while !effects.is_empty() {
            let failed = self.apply(effects);
            if failed.is_empty() {
                break;
            }
            let mut engine = lock(&shared.engine);
            for link in failed {
                engine.on_link_error(link);
            }
            engine.before_sleep(now);
            effects = self.host_effects(&mut engine);
        }
    }

    /// Takes the engine's effects, carries out the server's share under the
    /// lock, and returns the socket work for after it.
    fn host_effects(&mut self, engine: &mut Membership) -> Vec<Effect> {
        let mut sockets = Vec::new();
        for effect in engine.take_effects() {
            match effect {
                Effect::Send { .. } | Effect::Connect { .. } | Effect::Close { .. } => {
                    sockets.push(effect)
                }
                other => self.host.effect(other, engine),
            }
        }
        sockets
    }

    fn deliver(&mut self, engine: &mut Membership, link: LinkId, frames: Vec<Vec<u8>>, now: u64) {
        for frame in frames {
            let Some(conn) = self.conns.get(&link) else {
                return;
            };
            let (peer, local) = (conn.peer_ip.clone(), conn.local_ip.clone());
            match wire::decode(&frame) {
                Ok(message) => {
                    if !engine.on_message(link, message, &peer, &local, now) {
                        return;
                    }
                }
                // Redis ignores a message of another protocol version silently.
                Err(wire::Malformed::Version(_)) => {}
                Err(e) => tracing::warn!("{e}"),
            }
        }
    }

    /// Carries out the socket effects; returns the links whose connect failed at once.
    fn apply(&mut self, effects: Vec<Effect>) -> Vec<LinkId> {
        let mut failed = Vec::new();
        for effect in effects {
            match effect {
                Effect::Send { link, bytes } => self.send(link, &bytes),
                Effect::Connect { link, ip, cport } => match start_connect(&ip, cport) {
                    Ok(stream) => self.add_connecting(link, stream),
                    Err(e) => {
                        tracing::debug!("Unable to connect to Cluster Node [{ip}]:{cport} -> {e}");
                        failed.push(link);
                    }
                },
                Effect::Close { link } => self.close(link),
                // The server's effects were carried out under the lock.
                _ => {}
            }
        }
        failed
    }

    fn drain_wake(&self) {
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from the eventfd.
        unsafe {
            libc::read(
                self.shared.wake.as_raw_fd(),
                (&mut count as *mut u64).cast(),
                8,
            )
        };
    }

    fn accept_all(&mut self, listener: usize, arrived: &mut Vec<Arrived>) {
        let Some(l) = self.listeners.get(listener) else {
            return;
        };
        loop {
            match l.accept() {
                Ok((stream, _)) => {
                    if let Some(conn) = new_conn(stream, false) {
                        arrived.push(Arrived::Accepted(conn));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::info!("Error accepting cluster node connection: {e}");
                    return;
                }
            }
        }
    }

    /// Watches a link: for input always, for EPOLLOUT while a connect is pending
    /// (that is how its completion shows) or output waits.
    fn add_conn(&mut self, link: LinkId, conn: Conn) {
        let mut interest = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
        if conn.wants_write {
            interest |= libc::EPOLLOUT as u32;
        }
        let (epoll, fd) = (self.epoll.as_raw_fd(), conn.stream.as_raw_fd());
        if register(epoll, fd, LINK_TOKEN_BASE + link.0, interest).is_ok() {
            self.conns.insert(link, conn);
        }
    }

    fn add_connecting(&mut self, link: LinkId, stream: TcpStream) {
        if let Some(mut conn) = new_conn(stream, true) {
            conn.wants_write = true;
            self.add_conn(link, conn);
        }
    }

    fn close(&mut self, link: LinkId) {
        if let Some(conn) = self.conns.remove(&link) {
            // SAFETY: removes a registered fd from the epoll set this worker owns.
            unsafe {
                libc::epoll_ctl(
                    self.epoll.as_raw_fd(),
                    libc::EPOLL_CTL_DEL,
                    conn.stream.as_raw_fd(),
                    std::ptr::null_mut(),
                )
            };
        }
    }

    /// Readiness on a link: finish a connect, read whole messages, flush output.
    fn on_ready(
        &mut self,
        link: LinkId,
        flags: u32,
        link_events: &mut Vec<LinkEvent>,
        arrived: &mut Vec<Arrived>,
    ) {
        let Some(conn) = self.conns.get_mut(&link) else {
            return;
        };
        if conn.connecting {
            match conn.stream.take_error() {
                Ok(None) if flags & libc::EPOLLOUT as u32 != 0 => {
                    conn.connecting = false;
                    conn.local_ip = conn
                        .stream
                        .local_addr()
                        .map(|a| a.ip().to_string())
                        .unwrap_or_default();
                    link_events.push(LinkEvent::Connected(link));
                }
                Ok(None) => return,
                _ => {
                    link_events.push(LinkEvent::Failed(link));
                    self.close(link);
                    return;
                }
            }
        }
        if flags & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0
        {
            match read_frames(conn) {
                Ok(frames) if !frames.is_empty() => arrived.push(Arrived::Frames(link, frames)),
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!("I/O error reading from node link: {e}");
                    arrived.push(Arrived::Lost(link));
                    self.close(link);
                    return;
                }
            }
        }
        if flags & libc::EPOLLOUT as u32 != 0 {
            self.flush(link);
        }
    }

    fn send(&mut self, link: LinkId, bytes: &[u8]) {
        let Some(conn) = self.conns.get_mut(&link) else {
            return;
        };
        conn.output.extend_from_slice(bytes);
        if !conn.connecting {
            self.flush(link);
        }
    }

    /// Writes what the socket takes; asks for EPOLLOUT while anything is left.
    fn flush(&mut self, link: LinkId) {
        let epoll = self.epoll.as_raw_fd();
        let Some(conn) = self.conns.get_mut(&link) else {
            return;
        };
        if conn.connecting {
            return;
        }
        while conn.sent < conn.output.len() {
            match conn.stream.write(&conn.output[conn.sent..]) {
                Ok(0) => break,
                Ok(n) => conn.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break, // the read side reports the failure
            }
        }
        if conn.sent == conn.output.len() {
            conn.output.clear();
            conn.sent = 0;
        }
        let wants_write = !conn.output.is_empty();
        if wants_write != conn.wants_write {
            conn.wants_write = wants_write;
            let mut interest = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
            if wants_write {
                interest |= libc::EPOLLOUT as u32;
            }
            let _ = modify(
                epoll,
                conn.stream.as_raw_fd(),
                LINK_TOKEN_BASE + link.0,
                interest,
            );
        }
    }
}

/// What a round of readiness produced for the engine.
enum Arrived {
    Accepted(Conn),
    Frames(LinkId, Vec<Vec<u8>>),
    Lost(LinkId),
}

fn new_conn(stream: TcpStream, connecting: bool) -> Option<Conn> {
    stream.set_nonblocking(true).ok()?;
    let _ = stream.set_nodelay(true);
    let peer_ip = stream
        .peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    let local_ip = stream
        .local_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    Some(Conn {
        stream,
        connecting,
        peer_ip,
        local_ip,
        input: Vec::new(),
        output: Vec::new(),
        sent: 0,
        wants_write: false,
    })
}

/// Reads until the socket is drained and returns the whole messages that came
/// in; an error when the peer closed, the socket failed, or the stream is not
/// the cluster bus (Redis frees such a link).
fn read_frames(conn: &mut Conn) -> io::Result<Vec<Vec<u8>>> {
    let mut chunk = [0u8; READ_CHUNK];
    let mut closed = false;
    loop {
        match conn.stream.read(&mut chunk) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(n) => conn.input.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    let mut frames = Vec::new();
    let mut start = 0;
    loop {
        let len = match wire::frame_len(&conn.input[start..]) {
            Ok(Some(len)) => len,
            Ok(None) => break,
            Err(bad) => {
                tracing::warn!("{bad}");
                return Err(io::Error::new(io::ErrorKind::InvalidData, bad.to_string()));
            }
        };
        if conn.input.len() - start < len {
            break;
        }
        frames.push(conn.input[start..start + len].to_vec());
        start += len;
    }
    conn.input.drain(..start);
    if closed && frames.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    Ok(frames)
}

/// A non-blocking connect to `ip:port`: the stream is returned at once, and
/// EPOLLOUT says when the connection is made (or failed).
fn start_connect(ip: &str, port: u16) -> io::Result<TcpStream> {
    let addr = SocketAddr::new(
        ip.parse::<IpAddr>()
            .map_err(|_| io::Error::other("invalid address"))?,
        port,
    );
    crate::util::outbound::start_connect(&addr)
}

fn cvt(r: i32) -> io::Result<i32> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn register(epoll: RawFd, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
    let mut event = libc::epoll_event { events, u64: token };
    // SAFETY: the event lives for the call; epoll and fd are open descriptors.
    cvt(unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, &mut event) }).map(|_| ())
}

fn modify(epoll: RawFd, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
    let mut event = libc::epoll_event { events, u64: token };
    // SAFETY: as `register`, for a descriptor already in the set.
    cvt(unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_MOD, fd, &mut event) }).map(|_| ())
}
