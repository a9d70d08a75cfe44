//! TLS on a reactor stream: a rustls session between the connection's code and its
//! nonblocking socket. Reads decrypt what the socket has; writes encrypt into
//! rustls's record buffer and send what the socket takes. Whatever the socket does
//! not take now stays in that buffer and goes out on the stream's next read, send
//! or writable wait, so a connection that is done writing and waits for input still
//! flushes its last records (its read registers for writability while any remain).
//!
//! The handshake needs no step of its own: it runs inside the first reads, which
//! answer the peer's handshake records before any application data arrives.

use std::io::{self, ErrorKind, Read, Write};
use std::sync::Arc;
use std::task::{Context, Poll};

use super::reactor::IoState;

/// Plaintext taken from the caller per send while nothing is pending: bounds what
/// hides in rustls's buffer, out of the output-buffer accounting's sight, to one
/// chunk (as many bytes as four full records).
const SEND_CHUNK: usize = 64 * 1024;

/// One connection's TLS state.
pub struct TlsSession {
    conn: rustls::Connection,
}

/// The socket as rustls's reader and writer: bare recv/send that report EAGAIN as
/// `WouldBlock` and keep the reactor's readiness flags as the plaintext path does.
struct Socket<'a> {
    fd: libc::c_int,
    state: &'a IoState,
}

impl Read for Socket<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match super::net::recv_once(self.state, self.fd, buf) {
            Some(done) => done,
            None if self.state.readable.get() => Err(ErrorKind::Interrupted.into()),
            None => Err(ErrorKind::WouldBlock.into()),
        }
    }
}

impl Write for Socket<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            let n = super::net::sys_send(self.fd, buf);
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                ErrorKind::Interrupted => continue,
                ErrorKind::WouldBlock => {
                    self.state.writable.set(false);
                    return Err(e);
                }
                _ => return Err(e),
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What a flush of the pending records came to.
enum Flushed {
    /// Nothing is left to send.
    All,
    /// The socket is full; the rest waits for writability.
    Blocked,
}

impl TlsSession {
    /// The server side of a connection accepted on a TLS port.
    pub fn server(config: Arc<rustls::ServerConfig>) -> io::Result<TlsSession> {
        let conn = rustls::ServerConnection::new(config).map_err(io::Error::other)?;
        Ok(TlsSession { conn: conn.into() })
    }

    /// The client side of a connection this server opens (a replica's master link).
    pub fn client(
        config: Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
    ) -> io::Result<TlsSession> {
        let conn = rustls::ClientConnection::new(config, name).map_err(io::Error::other)?;
        Ok(TlsSession { conn: conn.into() })
    }

    /// Sends pending records until none are left or the socket is full.
    fn flush(&mut self, fd: libc::c_int, state: &IoState) -> io::Result<Flushed> {
        let mut socket = Socket { fd, state };
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut socket) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Flushed::Blocked),
                Err(e) => return Err(e),
            }
        }
        Ok(Flushed::All)
    }

    /// Flushes and, when records remain, asks to be woken once the socket drains.
    fn flush_or_register(
        &mut self,
        cx: &mut Context<'_>,
        fd: libc::c_int,
        state: &IoState,
    ) -> io::Result<()> {
        if let Flushed::Blocked = self.flush(fd, state)? {
            *state.write_waker.borrow_mut() = Some(cx.waker().clone());
        }
        Ok(())
    }

    /// Decrypted input into `dst` (Ok(0) = end of stream), reading records from the
    /// socket as needed; Pending when the socket has nothing more yet. A peer that
    /// closes without close_notify ends the stream as a plaintext EOF would.
    pub(super) fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        fd: libc::c_int,
        state: &IoState,
        dst: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            match self.conn.reader().read(dst) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Poll::Ready(Ok(0)),
                Err(e) => return Poll::Ready(Err(e)),
            }
            // Handshake answers and records a send left behind go out first.
            if let Err(e) = self.flush_or_register(cx, fd, state) {
                return Poll::Ready(Err(e));
            }
            if !state.readable.get() {
                *state.read_waker.borrow_mut() = Some(cx.waker().clone());
                return Poll::Pending;
            }
            let mut socket = Socket { fd, state };
            match self.conn.read_tls(&mut socket) {
                Ok(0) => return Poll::Ready(Ok(0)),
                Ok(_) => {
                    if let Err(e) = self.conn.process_new_packets() {
                        // The alert rustls queued tells a TLS peer why. A peer that does
                        // not speak TLS at all (plaintext on the TLS port) gets nothing,
                        // as from OpenSSL: the alert's bytes would read as a reply.
                        if !matches!(e, rustls::Error::InvalidMessage(_)) {
                            let _ = self.flush(fd, state);
                        }
                        if self.conn.is_handshaking()
                            && matches!(self.conn, rustls::Connection::Server(_))
                        {
                            // Redis's line for a TLS client that failed its handshake
                            // (a missing or untrusted certificate, no common protocol).
                            tracing::warn!("Error accepting a client connection: {e}");
                        }
                        return Poll::Ready(Err(io::Error::new(ErrorKind::InvalidData, e)));
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// Takes plaintext from `buf` when the previous records are all out: the bytes
    /// taken (encrypted, and sent as far as the socket allows), or 0 when older
    /// records still wait for room.
    pub(super) fn send_now(
        &mut self,
        fd: libc::c_int,
        state: &IoState,
        buf: &[u8],
    ) -> io::Result<usize> {
        if let Flushed::Blocked = self.flush(fd, state)? {
            return Ok(0);
        }
        let take = buf.len().min(SEND_CHUNK);
        let taken = self.conn.writer().write(&buf[..take])?;
        self.flush(fd, state)?;
        Ok(taken)
    }

    /// All of `buf` taken and sent (`buf` advanced as it goes), waiting for the
    /// socket to drain as needed: `write_all` on a TLS stream.
    pub(super) fn poll_write_all(
        &mut self,
        cx: &mut Context<'_>,
        fd: libc::c_int,
        state: &IoState,
        buf: &mut &[u8],
    ) -> Poll<io::Result<()>> {
        loop {
            match self.flush(fd, state) {
                Ok(Flushed::Blocked) => {
                    *state.write_waker.borrow_mut() = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                Ok(Flushed::All) if buf.is_empty() => return Poll::Ready(Ok(())),
                Ok(Flushed::All) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            let take = buf.len().min(SEND_CHUNK);
            match self.conn.writer().write(&buf[..take]) {
                Ok(n) => *buf = &buf[n..],
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// Ready once no records wait to be sent (or sending them failed: the next send
    /// reports the error).
    pub(super) fn poll_drained(
        &mut self,
        cx: &mut Context<'_>,
        fd: libc::c_int,
        state: &IoState,
    ) -> Poll<()> {
        match self.flush(fd, state) {
            Ok(Flushed::Blocked) => {
                *state.write_waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
            Ok(Flushed::All) | Err(_) => Poll::Ready(()),
        }
    }
}
