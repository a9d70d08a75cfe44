//! MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE] [AUTH password |
//! AUTH2 username password] [KEYS key ...] (Redis's cluster.c migrateCommand).
//!
//! The keys are locked on their shards for the whole transfer (other keys keep
//! flowing; commands on these keys wait, as every client waits in Redis, whose
//! MIGRATE blocks the server): their values are serialized as DUMP payloads, sent as
//! RESTORE commands (after AUTH and SELECT) to the target over a connection of its
//! own, and each key whose RESTORE the target acknowledged is deleted here unless
//! COPY was given. The deletions propagate as one DEL of those keys.
//!
//! In cluster mode the target gets RESTORE-ASKING, which it serves in a slot it
//! is importing.
//!
//! Not as Redis: the connection is made for each call, not cached for 10 seconds (so
//! INFO's migrate_cached_sockets stays 0 and SELECT is sent every time), and it is
//! never TLS (Redis uses TLS for MIGRATE only with `tls-cluster`, a cluster-mode
//! setting).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::strings::cmd;
use super::table::{flags::*, CommandSpec, KeySpec, Kind};
use super::{parse_i64, GlobalCtx, NOT_INT, SYNTAX_ERR};
use crate::config::notify;
use crate::runtime::{First, TcpStream};
use crate::shard::multi::MultiShardOp;
use crate::storage::{rdb, NO_EXPIRE};

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        group: "generic",
        acl: &["@keyspace", "@dangerous"],
        ..cmd!("migrate", -6, WRITE | MOVABLE_KEYS, KeySpec::Migrate, Kind::Global(migrate), "2.6.0", "Atomically transfer a key from a Redis instance to another one.")
    },
];

/// MIGRATE's arguments, parsed in Redis's order.
struct Request {
    host: String,
    port: u16,
    db: i64,
    timeout: Duration,
    copy: bool,
    replace: bool,
    /// AUTH's password, with AUTH2's username.
    auth: Option<(Option<Vec<u8>>, Vec<u8>)>,
    keys: Vec<Vec<u8>>,
}

fn parse(args: &[Vec<u8>]) -> Result<Request, String> {
    let is = |i: usize, w: &str| args[i].eq_ignore_ascii_case(w.as_bytes());
    let (mut copy, mut replace, mut auth) = (false, false, None);
    let mut keys = vec![args[3].clone()];
    let mut j = 6;
    while j < args.len() {
        let more = args.len() - 1 - j;
        if is(j, "copy") {
            copy = true;
        } else if is(j, "replace") {
            replace = true;
        } else if is(j, "auth") {
            if more == 0 {
                return Err(SYNTAX_ERR.into());
            }
            auth = Some((None, args[j + 1].clone()));
            j += 1;
        } else if is(j, "auth2") {
            if more < 2 {
                return Err(SYNTAX_ERR.into());
            }
            auth = Some((Some(args[j + 1].clone()), args[j + 2].clone()));
            j += 2;
        } else if is(j, "keys") {
            if !args[3].is_empty() {
                return Err("ERR When using MIGRATE KEYS option, the key argument must be set to the empty string".into());
            }
            keys = args[j + 1..].to_vec();
            break;
        } else {
            return Err(SYNTAX_ERR.into());
        }
        j += 1;
    }
    let timeout = parse_i64(&args[5]).ok_or(NOT_INT)?;
    let db = parse_i64(&args[4]).ok_or(NOT_INT)?;
    let timeout = if timeout <= 0 { 1000 } else { timeout as u64 };
    // A port that is no port cannot be connected to: Redis's connect fails alike.
    let port = parse_i64(&args[2])
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(0);
    Ok(Request {
        host: String::from_utf8_lossy(&args[1]).into_owned(),
        port,
        db,
        timeout: Duration::from_millis(timeout),
        copy,
        replace,
        auth,
        keys,
    })
}

fn migrate<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(migrate_async(g))
}

async fn migrate_async(g: &mut GlobalCtx<'_>) {
    let req = match parse(&g.args) {
        Ok(r) => r,
        Err(e) => return g.error(&e),
    };
    let db = g.session.db;
    let cell = g.session.cell.clone();
    let mut op = MultiShardOp::lock_keys(g.owner(), &cell, db, &req.keys).await;
    let outcome = transfer(&req, &op, &cell, db).await;
    let moved: Vec<Vec<u8>> = match &outcome {
        Outcome::Done(acked) | Outcome::TargetError(_, acked) | Outcome::Lost(acked)
            if !req.copy =>
        {
            acked.clone()
        }
        _ => Vec::new(),
    };
    for key in &moved {
        let _ = op.take(&cell, db, key).await;
        crate::pubsub::notify(notify::GENERIC, "del", key, db);
    }
    if moved.is_empty() {
        op.set_read_only();
        g.propagation.nothing();
    } else {
        let written: Vec<(usize, &[u8])> = moved.iter().map(|k| (db, k.as_slice())).collect();
        op.written_only(&written);
        op.count_dirty(moved.len() as u64);
        let mut del = vec![b"DEL".to_vec()];
        del.extend(moved.iter().cloned());
        g.propagation.rewrite(|| del);
    }
    g.release(op).await;
    match outcome {
        Outcome::NoKey => g.w().simple("NOKEY"),
        Outcome::Done(_) => g.w().ok(),
        Outcome::TargetError(msg, _) => {
            g.error(&format!("ERR Target instance replied with error: {msg}"))
        }
        Outcome::ConnectFailed => g.error("IOERR error or timeout connecting to the client"),
        Outcome::WriteFailed => g.error("IOERR error or timeout writing to target instance"),
        Outcome::Lost(_) => g.error("IOERR error or timeout reading to target instance"),
    }
}

/// How a transfer ended; the keys whose RESTORE the target acknowledged, where some
/// may have been.
enum Outcome {
    /// None of the keys exists.
    NoKey,
    Done(Vec<Vec<u8>>),
    /// The target refused AUTH, SELECT or a RESTORE (the first error it gave).
    TargetError(String, Vec<Vec<u8>>),
    ConnectFailed,
    WriteFailed,
    /// The connection failed or timed out while the replies were read.
    Lost(Vec<Vec<u8>>),
}

/// A key to send: its name, DUMP payload and deadline.
type Dumped = (Vec<u8>, Vec<u8>, u64);

async fn transfer(
    req: &Request,
    op: &MultiShardOp,
    cell: &std::rc::Rc<crate::shard::ShardCell>,
    db: usize,
) -> Outcome {
    let mut dumped: Vec<Dumped> = Vec::new();
    for key in &req.keys {
        let k = key.clone();
        let found = op
            .on(cell, cell.shard_of(key), move |d| {
                let now = crate::util::now_ms();
                d.dbs[db].get(&k, now).map(|e| {
                    let mut payload = Vec::new();
                    rdb::dump_value(e.value(), &mut payload);
                    (payload, e.expire_at())
                })
            })
            .await;
        if let Some((payload, at)) = found {
            dumped.push((key.clone(), payload, at));
        }
    }
    if dumped.is_empty() {
        return Outcome::NoKey;
    }
    // Redis tries once more when the connection failed before any reply was read
    // (a cached connection the target had closed); a fresh one has no such cause,
    // but a connection refused at once is retried alike.
    let mut outcome = attempt(req, &dumped).await;
    if matches!(outcome, Outcome::ConnectFailed) {
        outcome = attempt(req, &dumped).await;
    }
    outcome
}

/// One connection: AUTH, SELECT and the RESTOREs written at once, then the replies
/// read in order, each within the timeout.
async fn attempt(req: &Request, dumped: &[Dumped]) -> Outcome {
    let Ok(mut stream) = crate::replication::link::connect(&req.host, req.port, req.timeout).await
    else {
        return Outcome::ConnectFailed;
    };
    let mut out = Vec::new();
    if let Some((user, password)) = &req.auth {
        let mut argv: Vec<&[u8]> = vec![b"AUTH"];
        if let Some(u) = user {
            argv.push(u);
        }
        argv.push(password);
        crate::effects::encode_command(&mut out, &argv);
    }
    crate::effects::encode_command(&mut out, &[b"SELECT", req.db.to_string().as_bytes()]);
    let now = crate::util::now_ms();
    let mut sent: Vec<&[u8]> = Vec::new();
    for (key, payload, at) in dumped {
        let ttl = if *at == NO_EXPIRE {
            0
        } else if *at < now {
            // Expired since it was found: not sent, not deleted here.
            continue;
        } else {
            (*at - now).max(1)
        };
        let ttl = ttl.to_string();
        // In a cluster the target imports the slot: RESTORE-ASKING is served there
        // before the slot is its own (Redis's migrateCommand).
        let restore: &[u8] = if crate::cluster::enabled() {
            b"RESTORE-ASKING"
        } else {
            b"RESTORE"
        };
        let mut argv: Vec<&[u8]> = vec![restore, key, ttl.as_bytes(), payload];
        if req.replace {
            argv.push(b"REPLACE");
        }
        crate::effects::encode_command(&mut out, &argv);
        sent.push(key);
    }
    let written = within(req.timeout, stream.write_all(&out)).await;
    if !matches!(written, Some(Ok(()))) {
        return Outcome::WriteFailed;
    }
    let mut lines = Lines::default();
    // AUTH's or SELECT's error: then no RESTORE counts, and it is the one reported.
    let mut first_error: Option<String> = None;
    for _ in 0..usize::from(req.auth.is_some()) + 1 {
        match lines.next(&mut stream, req.timeout).await {
            Some(l) if l.starts_with('-') => {
                first_error.get_or_insert_with(|| l[1..].to_string());
            }
            Some(_) => {}
            None => return Outcome::Lost(Vec::new()),
        }
    }
    let setup_failed = first_error.is_some();
    let mut acked = Vec::new();
    for key in sent {
        let Some(line) = lines.next(&mut stream, req.timeout).await else {
            return match first_error {
                Some(e) => Outcome::TargetError(e, acked),
                None => Outcome::Lost(acked),
            };
        };
        if let Some(err) = line.strip_prefix('-') {
            first_error.get_or_insert_with(|| err.to_string());
        } else if !setup_failed {
            // A key the target took is deleted here even when another key's
            // RESTORE failed, as in Redis.
            acked.push(key.to_vec());
        }
    }
    match first_error {
        Some(e) => Outcome::TargetError(e, acked),
        None => Outcome::Done(acked),
    }
}

/// `fut`, or None once `timeout` passed.
async fn within<F: Future>(timeout: Duration, fut: F) -> Option<F::Output> {
    match crate::runtime::first(fut, crate::runtime::sleep(timeout)).await {
        First::A(v) => Some(v),
        First::B(()) => None,
    }
}

/// The target's one-line replies (RESTORE, AUTH and SELECT answer +OK or -ERR ...).
#[derive(Default)]
struct Lines {
    buf: Vec<u8>,
}

/// Longer than any status or error line a server sends (Redis reads into 1 KB).
const MAX_LINE: usize = 64 * 1024;

impl Lines {
    /// The next line without its CRLF; None on a closed or failed connection, a
    /// timeout, or a line past MAX_LINE.
    async fn next(&mut self, stream: &mut TcpStream, timeout: Duration) -> Option<String> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                self.buf.drain(..end + 2);
                return Some(line);
            }
            if self.buf.len() > MAX_LINE {
                return None;
            }
            let mut chunk = [0u8; 4096];
            match within(timeout, stream.read(&mut chunk)).await {
                Some(Ok(n)) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn parses_options_in_redis_order() {
        let r = parse(&argv(&[
            "migrate", "h", "7000", "", "3", "0", "COPY", "auth2", "u", "p", "KEYS", "a", "b",
        ]))
        .unwrap();
        assert!(r.copy && !r.replace);
        assert_eq!(r.auth, Some((Some(b"u".to_vec()), b"p".to_vec())));
        assert_eq!(r.keys, argv(&["a", "b"]));
        assert_eq!((r.db, r.timeout), (3, Duration::from_millis(1000)));
        let e = |w: &[&str]| parse(&argv(w)).err().unwrap();
        assert_eq!(e(&["migrate", "h", "1", "k", "0", "5", "auth"]), SYNTAX_ERR);
        assert_eq!(
            e(&["migrate", "h", "1", "k", "0", "5", "auth2", "u"]),
            SYNTAX_ERR
        );
        assert_eq!(e(&["migrate", "h", "1", "k", "0", "5", "nope"]), SYNTAX_ERR);
        assert!(e(&["migrate", "h", "1", "k", "0", "5", "keys", "a"]).contains("empty string"));
        assert_eq!(e(&["migrate", "h", "1", "k", "x", "5"]), NOT_INT);
        assert_eq!(e(&["migrate", "h", "1", "k", "0", "x"]), NOT_INT);
    }
}
