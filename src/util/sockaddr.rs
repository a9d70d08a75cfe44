//! A `SocketAddr` as the C `struct sockaddr` that bind(2) and connect(2) take.

use std::net::SocketAddr;

/// The address in a `sockaddr_storage`, with the length of the part that holds
/// it (a `sockaddr_in` or a `sockaddr_in6`), and its address family.
pub fn raw_sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t, libc::c_int) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let ptr = &mut storage as *mut libc::sockaddr_storage;
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            unsafe { std::ptr::write(ptr.cast(), sin) };
            let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            (storage, len, libc::AF_INET)
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above.
            unsafe { std::ptr::write(ptr.cast(), sin6) };
            let len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
            (storage, len, libc::AF_INET6)
        }
    }
}
