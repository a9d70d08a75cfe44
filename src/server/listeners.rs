//! Where clients connect: every shard accepts on the plaintext port and the TLS
//! port (each shard its own SO_REUSEPORT socket, the kernel spreading connections
//! over them), shard 0 on the Unix socket. CONFIG SET port, tls-port and bind move
//! them at run time, as Redis's changeListenPort and changeBindAddr do, but
//! without a moment of not listening: each shard binds its new sockets first and
//! closes the old ones only once they are bound, so a failed change leaves the
//! server where it was.

use std::cell::RefCell;
use std::rc::Rc;

use futures_channel::oneshot;

use crate::config::Config;
use crate::runtime::{self, BindAddr, First, Listener};
use crate::shard::ShardCell;

/// What a listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Plain,
    Tls,
    Unix,
}

thread_local! {
    /// This shard's accept loops: dropping a sender ends its loop and closes the
    /// listener.
    static OPEN: RefCell<Vec<(Kind, oneshot::Sender<()>)>> = const { RefCell::new(Vec::new()) };
}

/// Accepts on `listener` from now on, handing each connection to its own task.
pub fn serve(cell: &Rc<ShardCell>, listener: Listener, kind: Kind) {
    let (stop, mut stopped) = oneshot::channel::<()>();
    OPEN.with(|open| open.borrow_mut().push((kind, stop)));
    let cell = cell.clone();
    runtime::spawn_detached(async move {
        loop {
            let mut accepted = match runtime::first(listener.accept(), &mut stopped).await {
                First::A(accepted) => accepted,
                First::B(_) => break,
            };
            if kind == Kind::Tls {
                accepted = accepted.and_then(super::start_server_tls);
            }
            if !super::serve_accepted(&cell, accepted).await {
                break;
            }
        }
    });
}

/// Replaces this shard's listeners of `kind` with `new`.
fn replace(cell: &Rc<ShardCell>, kind: Kind, new: Vec<Listener>) {
    OPEN.with(|open| open.borrow_mut().retain(|(k, _)| *k != kind));
    for l in new {
        serve(cell, l, kind);
    }
}

/// The addresses a CONFIG SET moves the plaintext or TLS listeners to.
#[derive(Clone, Debug)]
pub struct Move {
    kind: Kind,
    addrs: Vec<BindAddr>,
    /// Whether `bind` changed (Redis's error then names the addresses).
    bind_changed: bool,
}

/// What changing from `before` to `after` asks of the listeners, or the error
/// Redis gives when the new addresses cannot be parsed.
pub fn moves(before: &Config, after: &Config) -> Result<Vec<Move>, String> {
    let bind_changed = before.bind() != after.bind();
    let tls_port = |c: &Config| c.int_param("tls-port").unwrap_or(0) as u16;
    let mut out = Vec::new();
    for (kind, old, new) in [
        (Kind::Plain, before.port(), after.port()),
        (Kind::Tls, tls_port(before), tls_port(after)),
    ] {
        if old == new && !(bind_changed && new != 0) {
            continue;
        }
        let addrs = addresses(after, new).map_err(|e| {
            tracing::warn!("Failed to bind: {e}");
            move_error(bind_changed)
        })?;
        out.push(Move {
            kind,
            addrs,
            bind_changed,
        });
    }
    Ok(out)
}

/// Redis's CONFIG SET error for listeners that could not move.
fn move_error(bind_changed: bool) -> String {
    if bind_changed {
        "Failed to bind to specified addresses.".into()
    } else {
        "Unable to listen on this port. Check server logs.".into()
    }
}

/// `bind`'s addresses on `port` (none for port 0); optional addresses the host
/// lacks are left out, as at start.
fn addresses(config: &Config, port: u16) -> Result<Vec<BindAddr>, String> {
    if port == 0 {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for spec in config.bind() {
        let addr = BindAddr::parse(spec, port).map_err(|e| format!("{spec}: {e}"))?;
        out.push(addr);
    }
    Ok(out)
}

/// Carries out `moves` on this shard: every new socket bound before any old one
/// closes. The error is Redis's CONFIG SET text; the reason is logged.
pub fn apply_here(cell: &Rc<ShardCell>, moves: &[Move]) -> Result<(), String> {
    let mut bound = Vec::new();
    for m in moves {
        let mut listeners = Vec::new();
        for a in &m.addrs {
            match runtime::bind_reuseport(a.addr) {
                Ok(l) => listeners.push(Listener::Tcp(l)),
                Err(e) if a.may_skip(&e) => {}
                Err(e) => {
                    tracing::warn!(
                        "Could not create server TCP listening socket {}: bind: {}",
                        a.addr,
                        crate::util::io_error_text(&e)
                    );
                    return Err(move_error(m.bind_changed));
                }
            }
        }
        bound.push((m.kind, listeners));
    }
    for (kind, listeners) in bound {
        replace(cell, kind, listeners);
    }
    Ok(())
}
