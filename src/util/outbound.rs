//! Connections this server opens itself (a replica's link to its master, the
//! cluster bus's links to other nodes) and `bind-source-addr`, the local address they
//! leave from.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{FromRawFd, RawFd};
use std::sync::RwLock;
use std::time::Duration;

static SOURCE: RwLock<Option<IpAddr>> = RwLock::new(None);

/// Sets `bind-source-addr` ("" lets the system choose). As in Redis, any text is
/// accepted; one that is not an IP address binds nothing, as Redis's best-effort bind
/// then connects unbound.
pub fn set_source(spec: &str) {
    let addr = spec.parse::<IpAddr>().ok();
    *SOURCE.write().unwrap_or_else(|p| p.into_inner()) = addr;
}

fn source() -> Option<IpAddr> {
    *SOURCE.read().unwrap_or_else(|p| p.into_inner())
}

/// Binds the unconnected socket `fd` of address family `family` to the source
/// address, if one is set. Best effort, as Redis's
/// anetTcpNonBlockBestEffortBindConnect: an address of the other family, or one this
/// host does not have, leaves the socket unbound and the connect goes on.
fn bind_source(fd: RawFd, family: libc::c_int) {
    let Some(ip) = source() else {
        return;
    };
    let (storage, len, domain) = super::sockaddr::raw_sockaddr(&SocketAddr::new(ip, 0));
    if domain != family {
        return;
    }
    // SAFETY: bind with a sockaddr that lives for the call and its true length.
    let r = unsafe { libc::bind(fd, (&storage as *const libc::sockaddr_storage).cast(), len) };
    if r < 0 {
        let e = io::Error::last_os_error();
        tracing::debug!("bind-source-addr {ip}: {e}; connecting unbound");
    }
}

fn cvt(r: i32) -> io::Result<i32> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A new nonblocking TCP socket for `addr`, bound to the source address, with its
/// connect started: the connect may still be in progress when it returns.
pub fn start_connect(addr: &SocketAddr) -> io::Result<TcpStream> {
    let (storage, len, domain) = super::sockaddr::raw_sockaddr(addr);
    // SAFETY: creates a socket owned by the TcpStream built from it at once, and
    // passes connect a sockaddr that lives for the call with its true length.
    unsafe {
        let fd: RawFd = cvt(libc::socket(
            domain,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let stream = TcpStream::from_raw_fd(fd);
        bind_source(fd, domain);
        let r = libc::connect(fd, (&storage as *const libc::sockaddr_storage).cast(), len);
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINPROGRESS) {
                return Err(e);
            }
        }
        Ok(stream)
    }
}

/// Connects to `addr` within `timeout`, blocking the calling thread (run it on a
/// thread of its own), from the source address: `TcpStream::connect_timeout` with
/// `bind-source-addr`. The stream comes back in blocking mode.
pub fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    use std::os::fd::AsRawFd;
    let stream = start_connect(addr)?;
    let mut pfd = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
    loop {
        // SAFETY: poll on one pollfd that lives for the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "connection timed out",
            ));
        }
        break;
    }
    if let Some(e) = stream.take_error()? {
        return Err(e);
    }
    // A connect refused shows as an error above; hung-up without one is refused too.
    if pfd.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
        return Err(io::Error::from(io::ErrorKind::ConnectionRefused));
    }
    stream.set_nonblocking(false)?;
    Ok(stream)
}
