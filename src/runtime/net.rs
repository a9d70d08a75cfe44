//! Nonblocking TCP on the shard's reactor: try the syscall first, and only when it
//! would block wait for the fd's next readiness edge.

use std::future::poll_fn;
use std::io::{self, ErrorKind};
use std::net::{SocketAddr, ToSocketAddrs};

/// One `bind` address resolved: where to listen, and whether a failure to bind it
/// may be ignored (Redis's `-` prefix: an address the host may not have).
#[derive(Clone, Copy, Debug)]
pub struct BindAddr {
    pub addr: SocketAddr,
    pub optional: bool,
}

impl BindAddr {
    /// Redis's bind syntax: `*` is every IPv4 address, `::*` every IPv6 address, a
    /// leading `-` marks the address optional.
    pub fn parse(spec: &str, port: u16) -> io::Result<BindAddr> {
        let (optional, host) = match spec.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, spec),
        };
        let addr = match host {
            "*" => SocketAddr::from(([0, 0, 0, 0], port)),
            "::*" => SocketAddr::from(([0u16; 8], port)),
            h if h.contains(':') => (h, port)
                .to_socket_addrs()?
                .next()
                .ok_or_else(|| io::Error::new(ErrorKind::InvalidInput, "no address"))?,
            h => (h, port)
                .to_socket_addrs()?
                .next()
                .ok_or_else(|| io::Error::new(ErrorKind::InvalidInput, "no address"))?,
        };
        Ok(BindAddr { addr, optional })
    }

    /// A failure an optional address may skip: the host lacks the address or the
    /// protocol (Redis's list: EADDRNOTAVAIL, EAFNOSUPPORT and kin).
    pub fn may_skip(&self, e: &io::Error) -> bool {
        self.optional
            && matches!(
                e.raw_os_error(),
                Some(
                    libc::EADDRNOTAVAIL
                        | libc::EAFNOSUPPORT
                        | libc::EPROTONOSUPPORT
                        | libc::ENOPROTOOPT
                        | libc::ESOCKTNOSUPPORT
                        | libc::EPFNOSUPPORT
                )
            )
    }
}
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::rc::Rc;
use std::task::Poll;

use super::executor::current;
use super::reactor::IoState;
use super::scripted::ScriptedClient;
use super::tls::TlsSession;

/// Where a client is connected from: a TCP peer, or the Unix socket's path (Redis
/// shows those as `path:0` in CLIENT LIST and `unix:path` in MONITOR).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerAddr {
    Tcp(SocketAddr),
    Unix(std::sync::Arc<str>),
}

impl std::fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerAddr::Tcp(a) => write!(f, "{a}"),
            PeerAddr::Unix(path) => write!(f, "{path}:0"),
        }
    }
}

impl PeerAddr {
    /// The host part (a replica's address when it announces none).
    pub fn ip_text(&self) -> String {
        match self {
            PeerAddr::Tcp(a) => a.ip().to_string(),
            PeerAddr::Unix(path) => path.to_string(),
        }
    }

    /// How MONITOR names the client.
    pub fn monitor_text(&self) -> String {
        match self {
            PeerAddr::Tcp(a) => a.to_string(),
            PeerAddr::Unix(path) => format!("unix:{path}"),
        }
    }
}

/// A registered fd: removed from the epoll set when dropped (before the fd closes).
struct Registration {
    fd: RawFd,
    token: u64,
    state: Rc<IoState>,
}

impl Registration {
    fn new(fd: RawFd) -> io::Result<Registration> {
        let (token, state) = current().reactor.register(fd)?;
        Ok(Registration { fd, token, state })
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(ex) = super::executor::try_current() {
            ex.reactor.deregister(self.fd, self.token);
        }
    }
}

pub struct TcpListener {
    reg: Registration,
    inner: std::net::TcpListener,
}

impl TcpListener {
    /// Binds with SO_REUSEADDR and SO_REUSEPORT (every shard binds the same port and
    /// the kernel spreads connections over them). IPv6 sockets are IPv6-only, as in
    /// Redis, so `*` (0.0.0.0) and `::*` (::) can both listen on one port.
    pub fn bind_reuseport(addr: SocketAddr) -> io::Result<TcpListener> {
        let domain = if addr.is_ipv6() {
            libc::AF_INET6
        } else {
            libc::AF_INET
        };
        // SAFETY: creating a socket; the fd is owned by the std listener below.
        let fd = unsafe {
            libc::socket(
                domain,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh socket we own.
        let inner = unsafe { std::net::TcpListener::from_raw_fd(fd) };
        set_opt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
        set_opt(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
        if addr.is_ipv6() {
            set_opt(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
        }
        bind(fd, &addr)?;
        // SAFETY: listen on our socket.
        if unsafe { libc::listen(fd, 1024) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(TcpListener {
            reg: Registration::new(fd)?,
            inner,
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    pub async fn accept(&self) -> io::Result<TcpStream> {
        let (s, _) = accept_when_ready(&self.reg, || self.inner.accept()).await?;
        TcpStream::from_std(s)
    }
}

/// Runs a nonblocking `accept` until it yields a connection or fails, waiting for the
/// listener's next readiness edge whenever it would block.
async fn accept_when_ready<T>(
    reg: &Registration,
    mut accept: impl FnMut() -> io::Result<T>,
) -> io::Result<T> {
    poll_fn(|cx| loop {
        match accept() {
            Ok(accepted) => return Poll::Ready(Ok(accepted)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                reg.state.readable.set(false);
                *reg.state.read_waker.borrow_mut() = Some(cx.waker().clone());
                if !reg.state.readable.get() {
                    return Poll::Pending;
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Poll::Ready(Err(e)),
        }
    })
    .await
}

/// A listener clients connect to: the TCP port or the Unix socket.
pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    pub async fn accept(&self) -> io::Result<TcpStream> {
        match self {
            Listener::Tcp(l) => l.accept().await,
            Listener::Unix(l) => l.accept().await,
        }
    }
}

/// The Unix-domain socket (`unixsocket`); one shard accepts on it.
pub struct UnixListener {
    reg: Registration,
    inner: std::os::unix::net::UnixListener,
    path: std::sync::Arc<str>,
}

impl UnixListener {
    /// Binds `path` (a stale socket file left by a killed server is removed first,
    /// as Redis does) and applies `perm` when it is not 0.
    pub fn bind(path: &str, perm: u32) -> io::Result<UnixListener> {
        let _ = std::fs::remove_file(path);
        let inner = std::os::unix::net::UnixListener::bind(path)?;
        inner.set_nonblocking(true)?;
        if perm != 0 {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(perm))?;
        }
        Ok(UnixListener {
            reg: Registration::new(inner.as_raw_fd())?,
            inner,
            path: path.into(),
        })
    }

    pub async fn accept(&self) -> io::Result<TcpStream> {
        let (s, _) = accept_when_ready(&self.reg, || self.inner.accept()).await?;
        // SAFETY: the accepted fd moves from the Unix stream into the stream-socket
        // wrapper, which is its only owner from here on.
        let s = unsafe { std::net::TcpStream::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(s)) };
        let mut stream = TcpStream::from_std(s)?;
        stream.unix = Some(Box::new(self.path.clone()));
        Ok(stream)
    }
}

/// Binds `addr` once without SO_REUSEPORT (IPv6-only for IPv6, as the listeners
/// are) and lets it go: whether the shards' listeners can have the address.
pub fn probe_bind(addr: SocketAddr) -> io::Result<()> {
    bind_exclusive(addr).map(drop)
}

/// A blocking listener on `addr` that no other socket shares (no SO_REUSEPORT;
/// IPv6-only for IPv6, so `*` and `::*` can both have the port): the cluster
/// bus's, which one thread serves.
pub fn listen_exclusive(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let listener = bind_exclusive(addr)?;
    // SAFETY: listen on a socket the listener owns.
    if unsafe { libc::listen(listener.as_raw_fd(), 1024) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(listener)
}

fn bind_exclusive(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let domain = if addr.is_ipv6() {
        libc::AF_INET6
    } else {
        libc::AF_INET
    };
    // SAFETY: creating a socket; the fd is owned by the std listener below.
    let fd = unsafe { libc::socket(domain, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh socket we own; dropping the listener closes it.
    let owner = unsafe { std::net::TcpListener::from_raw_fd(fd) };
    set_opt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    if addr.is_ipv6() {
        set_opt(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
    }
    bind(fd, &addr)?;
    Ok(owner)
}

fn set_opt(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: setsockopt with a pointer to a live i32.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &value as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn bind(fd: RawFd, addr: &SocketAddr) -> io::Result<()> {
    let (storage, len, _) = crate::util::sockaddr::raw_sockaddr(addr);
    // SAFETY: bind with a sockaddr that lives for the call and its true length.
    let r = unsafe { libc::bind(fd, (&storage as *const libc::sockaddr_storage).cast(), len) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Wakes the task waiting in a stream's read, which then re-polls and, finding no
/// input, runs its idle hook (see `TcpStream::read_vec`). Used by the clients cron.
#[derive(Clone)]
pub struct ReadWaker(Rc<IoState>);

impl ReadWaker {
    pub fn wake(&self) {
        let waker = self.0.read_waker.borrow_mut().take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// What the first read into an unallocated buffer takes from the stack (the array
/// lives only while the read is polled, so it costs a connection nothing). As much
/// as every later read takes (Redis's PROTO_IOBUF_LEN, 16 KiB): where an input is
/// cut between reads decides whether a line longer than the 64 KiB inline limit
/// has its terminator buffered in time, exactly as it does in Redis (PING followed
/// by 70,000 spaces answers PONG there). A smaller first read shifted every cut.
const FIRST_READ_BYTES: usize = 16 * 1024;

/// A client connection: TCP, or a Unix-domain stream socket (`unix` holds the
/// listening path). Both are stream sockets, so the same recv/send code serves them;
/// only the addresses differ.
pub struct TcpStream {
    reg: Registration,
    inner: std::net::TcpStream,
    /// Boxed so that the field is one word: with `layer` beside it, every connection's
    /// task (which holds its stream) stays within its allocation size class.
    unix: Option<Box<std::sync::Arc<str>>>,
    /// What the bytes pass through instead of the socket calls; None for plaintext,
    /// which then takes the direct syscall paths.
    layer: Option<Box<Layer>>,
}

/// A stream's bytes go through one of these instead of straight to the socket.
// Boxed as a whole in `TcpStream::layer`, so the variants' sizes cost nothing.
#[allow(clippy::large_enum_variant)]
enum Layer {
    /// The TLS session of a connection on a TLS port (or a TLS link this server
    /// opened).
    Tls(TlsSession),
    /// An in-process client (the hop lab): the socket is only the connection's
    /// identity, and no byte touches it.
    Scripted(ScriptedClient),
}

impl Layer {
    fn poll_read(
        &mut self,
        cx: &mut std::task::Context<'_>,
        fd: RawFd,
        state: &IoState,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self {
            Layer::Tls(tls) => tls.poll_read(cx, fd, state, buf),
            Layer::Scripted(client) => client.poll_read(cx, buf),
        }
    }

    fn send_now(&mut self, fd: RawFd, state: &IoState, buf: &[u8]) -> io::Result<usize> {
        match self {
            Layer::Tls(tls) => tls.send_now(fd, state, buf),
            Layer::Scripted(client) => client.send(buf),
        }
    }

    fn poll_write_all(
        &mut self,
        cx: &mut std::task::Context<'_>,
        fd: RawFd,
        state: &IoState,
        buf: &mut &[u8],
    ) -> Poll<io::Result<()>> {
        match self {
            Layer::Tls(tls) => tls.poll_write_all(cx, fd, state, buf),
            Layer::Scripted(client) => Poll::Ready(client.send(buf).map(|_| *buf = &[])),
        }
    }

    fn poll_drained(
        &mut self,
        cx: &mut std::task::Context<'_>,
        fd: RawFd,
        state: &IoState,
    ) -> Poll<()> {
        match self {
            Layer::Tls(tls) => tls.poll_drained(cx, fd, state),
            Layer::Scripted(_) => Poll::Ready(()),
        }
    }
}

impl TcpStream {
    fn from_std(s: std::net::TcpStream) -> io::Result<TcpStream> {
        s.set_nonblocking(true)?;
        let reg = Registration::new(s.as_raw_fd())?;
        Ok(TcpStream {
            reg,
            inner: s,
            unix: None,
            layer: None,
        })
    }

    /// Runs this stream through `session` from now on (nothing has been read or
    /// written on it yet).
    pub fn start_tls(&mut self, session: TlsSession) {
        self.layer = Some(Box::new(Layer::Tls(session)));
    }

    /// A connection whose client is `client`, inside this process (the hop lab). The
    /// socket pair behind it only gives the connection an fd and a name ("lab").
    pub fn scripted(client: ScriptedClient) -> io::Result<TcpStream> {
        let (ours, _theirs) = std::os::unix::net::UnixStream::pair()?;
        let mut stream = TcpStream::from_unix(ours, "lab")?;
        stream.layer = Some(Box::new(Layer::Scripted(client)));
        Ok(stream)
    }

    /// Whether input may be waiting right now: the last read filled its buffer (or a
    /// readiness edge came since), so a read would likely not find the socket empty.
    /// Costs no system call. Always false on TLS, whose session buffers on its own.
    pub fn input_may_be_waiting(&self) -> bool {
        match self.layer.as_deref() {
            None => self.reg.state.readable.get(),
            Some(Layer::Tls(_)) => false,
            Some(Layer::Scripted(client)) => client.has_input(),
        }
    }

    /// Whether the stream is encrypted.
    pub fn is_tls(&self) -> bool {
        matches!(self.layer.as_deref(), Some(Layer::Tls(_)))
    }

    /// A TCP connection this server opened itself (a replica's link to its master).
    pub fn from_tcp(s: std::net::TcpStream) -> io::Result<TcpStream> {
        TcpStream::from_std(s)
    }

    /// One end of a Unix socket pair as a connection (the AOF loader's fake client);
    /// `label` is the address CLIENT LIST shows for it.
    pub fn from_unix(s: std::os::unix::net::UnixStream, label: &str) -> io::Result<TcpStream> {
        // SAFETY: the fd moves from the Unix stream into the wrapper, its only owner.
        let s = unsafe { std::net::TcpStream::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(s)) };
        let mut stream = TcpStream::from_std(s)?;
        stream.unix = Some(Box::new(label.into()));
        Ok(stream)
    }

    /// The peer and local address as CLIENT LIST shows them.
    pub fn addresses(&self) -> io::Result<(PeerAddr, PeerAddr)> {
        if let Some(path) = &self.unix {
            let path: &std::sync::Arc<str> = path;
            return Ok((PeerAddr::Unix(path.clone()), PeerAddr::Unix(path.clone())));
        }
        Ok((
            PeerAddr::Tcp(self.inner.peer_addr()?),
            PeerAddr::Tcp(self.inner.local_addr()?),
        ))
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.inner.set_nodelay(on)
    }

    /// Reads what is available (at least one byte), waiting if nothing is. Ok(0) = EOF.
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let fd = self.inner.as_raw_fd();
        let state = self.reg.state.clone();
        // One poll_fn for both kinds of stream: a second future type here would
        // grow every connection's task by its size.
        let mut layer = self.layer.as_deref_mut();
        poll_fn(|cx| loop {
            if let Some(layer) = layer.as_deref_mut() {
                return layer.poll_read(cx, fd, &state, buf);
            }
            if !state.readable.get() {
                *state.read_waker.borrow_mut() = Some(cx.waker().clone());
                return Poll::Pending;
            }
            if let Some(done) = recv_once(&state, fd, buf) {
                return Poll::Ready(done);
            }
        })
        .await
    }

    /// Like `read`, into `buf[at..]`, but the buffer is needed only once the socket is
    /// readable: while the task waits, `idle` may shrink or free it (it runs each time
    /// the wait is polled without input, e.g. after a `ReadWaker` wake-up), and right
    /// before the read `buf` is grown to hold `want` bytes past `at`. This lets an idle
    /// connection give its query buffer back without a timer per read.
    pub async fn read_vec(
        &mut self,
        buf: &mut Vec<u8>,
        at: usize,
        want: usize,
        mut idle: impl FnMut(&mut Vec<u8>),
    ) -> io::Result<usize> {
        let fd = self.inner.as_raw_fd();
        let state = self.reg.state.clone();
        let mut layer = self.layer.as_deref_mut();
        poll_fn(|cx| loop {
            if let Some(layer) = layer.as_deref_mut() {
                return poll_read_vec_layer(layer, cx, fd, &state, buf, at, want, &mut idle);
            }
            if !state.readable.get() {
                idle(buf);
                *state.read_waker.borrow_mut() = Some(cx.waker().clone());
                return Poll::Pending;
            }
            if buf.is_empty() {
                // No buffer (a new connection, or an idle one that gave it back): read
                // into the stack first and allocate only when input actually came.
                // Growing the buffer up front would write (and so make resident) 16 KB
                // for every connection the reactor reports, most of which have nothing.
                let mut first = [0u8; FIRST_READ_BYTES];
                match recv_once(&state, fd, &mut first) {
                    None => continue,
                    Some(Ok(n)) => {
                        if n > 0 {
                            buf.resize(at + want.max(n), 0);
                            buf[at..at + n].copy_from_slice(&first[..n]);
                        }
                        return Poll::Ready(Ok(n));
                    }
                    Some(Err(e)) => return Poll::Ready(Err(e)),
                }
            }
            if buf.len() < at + want {
                buf.resize(at + want, 0);
            }
            if let Some(done) = recv_once(&state, fd, &mut buf[at..]) {
                return Poll::Ready(done);
            }
        })
        .await
    }

    /// A handle that wakes this stream's pending read without input.
    pub fn read_waker(&self) -> ReadWaker {
        ReadWaker(self.reg.state.clone())
    }

    /// Sends what the socket takes of `buf` now, without waiting: the bytes sent, 0
    /// when its buffer is full (then `writable` waits for room).
    pub fn send_now(&mut self, buf: &[u8]) -> io::Result<usize> {
        let fd = self.inner.as_raw_fd();
        if let Some(layer) = self.layer.as_deref_mut() {
            return layer.send_now(fd, &self.reg.state, buf);
        }
        let mut sent = 0;
        while sent < buf.len() {
            let n = sys_send(fd, &buf[sent..]);
            if n >= 0 {
                sent += n as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                ErrorKind::WouldBlock => {
                    self.reg.state.writable.set(false);
                    break;
                }
                ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
        Ok(sent)
    }

    /// Waits until the socket may take more after `send_now` found it full (or it
    /// failed: the next send then reports the error).
    pub async fn writable(&mut self) {
        let state = self.reg.state.clone();
        let fd = self.inner.as_raw_fd();
        let mut layer = self.layer.as_deref_mut();
        poll_fn(|cx| {
            if let Some(layer) = layer.as_deref_mut() {
                return layer.poll_drained(cx, fd, &state);
            }
            if state.writable.get() {
                return Poll::Ready(());
            }
            *state.write_waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Writes all of `buf`, waiting for the socket to drain when its buffer is full.
    pub async fn write_all(&mut self, mut buf: &[u8]) -> io::Result<()> {
        let fd = self.inner.as_raw_fd();
        let state = self.reg.state.clone();
        let mut layer = self.layer.as_deref_mut();
        poll_fn(|cx| {
            if let Some(layer) = layer.as_deref_mut() {
                return layer.poll_write_all(cx, fd, &state, &mut buf);
            }
            while !buf.is_empty() {
                let n = sys_send(fd, buf);
                if n >= 0 {
                    buf = &buf[n as usize..];
                    continue;
                }
                let e = io::Error::last_os_error();
                match e.kind() {
                    ErrorKind::WouldBlock => {
                        state.writable.set(false);
                        *state.write_waker.borrow_mut() = Some(cx.waker().clone());
                        return Poll::Pending;
                    }
                    ErrorKind::Interrupted => continue,
                    _ => return Poll::Ready(Err(e)),
                }
            }
            Poll::Ready(Ok(()))
        })
        .await
    }
}

/// `TcpStream::read_vec`'s poll on a layered stream: the same contract (the buffer
/// grown only once input is there, `idle` run while none is), with the layer's
/// input (decrypted, or the scripted client's).
#[allow(clippy::too_many_arguments)]
fn poll_read_vec_layer(
    layer: &mut Layer,
    cx: &mut std::task::Context<'_>,
    fd: RawFd,
    state: &IoState,
    buf: &mut Vec<u8>,
    at: usize,
    want: usize,
    idle: &mut impl FnMut(&mut Vec<u8>),
) -> Poll<io::Result<usize>> {
    let polled = if buf.is_empty() {
        // As the plaintext path: no buffer until input came.
        let mut first = [0u8; FIRST_READ_BYTES];
        let polled = layer.poll_read(cx, fd, state, &mut first);
        if let Poll::Ready(Ok(n)) = polled {
            if n > 0 {
                buf.resize(at + want.max(n), 0);
                buf[at..at + n].copy_from_slice(&first[..n]);
            }
        }
        polled
    } else {
        if buf.len() < at + want {
            buf.resize(at + want, 0);
        }
        layer.poll_read(cx, fd, state, &mut buf[at..])
    };
    if polled.is_pending() {
        idle(buf);
    }
    polled
}

impl AsRawFd for TcpStream {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.as_raw_fd()
    }
}

// recv and send as bare system calls. glibc's wrappers are thread-cancellation points
// that switch the cancel state around every call (about 1.5% of a shard's CPU at one
// request per read, measured with perf); shards are never cancelled.

/// recvfrom(fd, buf, 0, NULL, NULL): bytes read, or -1 with errno set.
/// One recv into `buf` on a socket the reactor last saw readable: the bytes read (0 =
/// EOF) or the error, or None when it turned out to have nothing (it is then marked
/// not readable, so the caller waits for the next edge) or the call was interrupted.
pub(super) fn recv_once(
    state: &IoState,
    fd: libc::c_int,
    buf: &mut [u8],
) -> Option<io::Result<usize>> {
    let n = sys_recv(fd, buf);
    if n >= 0 {
        // A short read drained the socket: wait for the next readiness edge instead of
        // paying a recv that can only say EAGAIN (Redis reads once per readable event
        // too). Data arriving after that read raises a new edge; an end-of-file that
        // came with the data raised its edge already, so once the peer closed, reads
        // go on until they return 0.
        if n > 0 && (n as usize) < buf.len() && !state.read_closed.get() {
            state.readable.set(false);
        }
        return Some(Ok(n as usize));
    }
    let e = io::Error::last_os_error();
    match e.kind() {
        ErrorKind::WouldBlock => {
            state.readable.set(false);
            None
        }
        ErrorKind::Interrupted => None,
        _ => Some(Err(e)),
    }
}

fn sys_recv(fd: libc::c_int, buf: &mut [u8]) -> isize {
    let null = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: the kernel writes at most buf.len() bytes into a live, exclusively
    // borrowed buffer; the address arguments are NULL.
    unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            fd,
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            0,
            null,
            null,
        ) as isize
    }
}

/// sendto(fd, buf, MSG_NOSIGNAL, NULL, 0): bytes sent, or -1 with errno set.
/// MSG_NOSIGNAL keeps a closed peer from raising SIGPIPE.
pub(super) fn sys_send(fd: libc::c_int, buf: &[u8]) -> isize {
    // SAFETY: the kernel only reads buf.len() bytes of a live buffer; no address.
    unsafe {
        libc::syscall(
            libc::SYS_sendto,
            fd,
            buf.as_ptr() as *const libc::c_void,
            buf.len(),
            libc::MSG_NOSIGNAL,
            std::ptr::null::<libc::c_void>(),
            0,
        ) as isize
    }
}
