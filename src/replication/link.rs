//! Replica side (Redis's replication.c: connectWithMaster, syncWithMaster,
//! readSyncBulkPayload, replicationCron): the link to the master REPLICAOF names.
//!
//! One task on shard 0 owns the link. Every 100 ms it looks whether a master is set
//! and no link is up; then it connects, runs the handshake (PING, AUTH, REPLCONF,
//! PSYNC), and either receives the master's RDB into a file and loads it into every
//! shard (+FULLRESYNC; with `repl-diskless-load` the payload is parsed as it arrives
//! instead, see `diskless_load`) or keeps the dataset (+CONTINUE). The socket then becomes a
//! connection of the master role (`connection::serve_master`), which applies the
//! stream on the owning shards in order and acknowledges it. When that connection
//! ends, the master's replication id and the offset applied so far are kept (Redis's
//! cached master) for the next PSYNC.
//!
//! State lives in statics: REPLICAOF runs on any shard, INFO and ROLE read it from
//! any shard, and the master connection updates the offsets per command (atomics, no
//! lock on that path).

mod diskless_load;

use std::io::Write as _;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::runtime::TcpStream;
use crate::shard::ShardCell;

/// Where the link is (Redis's repl_state, the states ROLE names).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum LinkState {
    /// Not a replica.
    None = 0,
    /// A master is set; the link task connects at its next look.
    Connect = 1,
    Connecting = 2,
    Handshake = 3,
    /// Receiving (or loading) the master's RDB.
    Transfer = 4,
    Connected = 5,
}

impl LinkState {
    fn from_u8(v: u8) -> LinkState {
        match v {
            1 => LinkState::Connect,
            2 => LinkState::Connecting,
            3 => LinkState::Handshake,
            4 => LinkState::Transfer,
            5 => LinkState::Connected,
            _ => LinkState::None,
        }
    }

    /// ROLE's word for it.
    pub fn role_name(self) -> &'static str {
        match self {
            LinkState::None => "none",
            LinkState::Connect => "connect",
            LinkState::Connecting => "connecting",
            LinkState::Handshake => "handshake",
            LinkState::Transfer => "sync",
            LinkState::Connected => "connected",
        }
    }
}

static STATE: AtomicU8 = AtomicU8::new(0);
/// Bumped by every REPLICAOF that changes the master: a link made for an older
/// setting gives up at its next step.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// The offset of the master's stream applied here (slave_repl_offset), and the offset
/// read from the socket (slave_read_repl_offset). Valid while `HAS_POSITION`.
static APPLIED: AtomicU64 = AtomicU64::new(0);
static READ: AtomicU64 = AtomicU64::new(0);
/// This server has a place in a replication history to continue from with PSYNC:
/// its replication id and stream offset (Redis's cached master). Set by a sync, and
/// when a master becomes a replica (Redis's replicationCacheMasterUsingMyself).
static HAS_POSITION: AtomicBool = AtomicBool::new(false);
/// The master connection is applying a batch (set around it): a snapshot for a
/// replica of this one waits for the batch's end, and the connection waits while
/// `SNAPSHOT_WANTED` before it starts the next.
static BATCH_RUNNING: AtomicBool = AtomicBool::new(false);
static SNAPSHOT_WANTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
/// Unix ms of the last bytes from the master (stream or transfer).
static LAST_IO_MS: AtomicU64 = AtomicU64::new(0);
/// The database the master's stream selected last, as applied (Redis's
/// `master->db`): a partial resync's stream goes on without selecting again, so the
/// next master connection, and a restart from a save's file, start in it. Valid
/// while `HAS_POSITION`.
static STREAM_DB: AtomicU64 = AtomicU64::new(0);

/// What INFO shows of the link beyond the atomics.
struct Detail {
    /// When the link went down (unix ms; 0: it never was up).
    down_since_ms: u64,
    /// The RDB transfer: its announced size (-1 with an EOF mark) and bytes read.
    transfer_size: i64,
    transfer_read: u64,
}

static DETAIL: Mutex<Detail> = Mutex::new(Detail {
    down_since_ms: 0,
    transfer_size: -1,
    transfer_read: 0,
});

fn detail() -> std::sync::MutexGuard<'static, Detail> {
    DETAIL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Bytes of the full sync's payload read so far (INFO's master_sync_read_bytes).
pub fn transfer_read() -> u64 {
    detail().transfer_read
}

pub fn state() -> LinkState {
    LinkState::from_u8(STATE.load(Ordering::Relaxed))
}

fn set_state(s: LinkState) {
    STATE.store(s as u8, Ordering::Relaxed);
}

/// The link task's own state change, made only while the REPLICAOF it works for is
/// still the current one (under `DETAIL`, as REPLICAOF's changes are): a link that
/// finished its handshake just as REPLICAOF moved on must not mark itself up over
/// the `Connect` that sends the task to the new master. False when it moved on.
fn set_state_for(generation: u64, s: LinkState) -> bool {
    let _d = detail();
    let current = GENERATION.load(Ordering::SeqCst) == generation;
    if current {
        set_state(s);
    }
    current
}

/// The link is up: the master's stream is being applied.
#[inline]
pub fn is_up() -> bool {
    state() == LinkState::Connected
}

/// REPLICAOF host port (or `replicaof` in the config): the link task connects at
/// its next look; a link to another master ends. A master that becomes a replica
/// asks to continue its own history (the new master may be its promoted replica).
pub fn master_changed(was_master: bool) {
    let mut d = detail();
    GENERATION.fetch_add(1, Ordering::SeqCst);
    if was_master {
        let offset = crate::effects::offset();
        APPLIED.store(offset, Ordering::Relaxed);
        READ.store(offset, Ordering::Relaxed);
        // Any database will do: a master's stream selects again after a promotion.
        STREAM_DB.store(0, Ordering::Relaxed);
        HAS_POSITION.store(true, Ordering::Relaxed);
    }
    if state() == LinkState::Connected {
        d.down_since_ms = crate::util::now_ms();
    }
    set_state(LinkState::Connect);
}

/// REPLICAOF NO ONE: the link ends (awaited: nothing more of the old master is
/// applied or passed on once this returns) and the master's state is forgotten.
/// `wait`: false inside a transaction, which may hold what the link waits for.
pub async fn master_unset(wait: bool) {
    {
        let mut d = detail();
        GENERATION.fetch_add(1, Ordering::SeqCst);
        set_state(LinkState::None);
        d.down_since_ms = 0;
    }
    HAS_POSITION.store(false, Ordering::Relaxed);
    while wait && MASTER_CONNECTION_UP.load(Ordering::SeqCst) {
        crate::runtime::sleep(Duration::from_millis(1)).await;
    }
}

/// The master connection runs (between its start and its end).
static MASTER_CONNECTION_UP: AtomicBool = AtomicBool::new(false);
/// The master connection's client id (0: none), for the executor: to the master's
/// commands no key has expired on a replica.
static MASTER_CLIENT: AtomicU64 = AtomicU64::new(0);

#[inline]
pub fn master_client() -> u64 {
    MASTER_CLIENT.load(Ordering::Relaxed)
}

/// The master connection's client id, while it runs (connection/master_link.rs).
pub fn set_master_client(id: u64) {
    MASTER_CLIENT.store(id, Ordering::Relaxed);
}

/// REPLICAOF's count of changes: a master connection stops when it moves on.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::SeqCst)
}

/// The database the master's stream had selected at the end of what was applied,
/// when this server has a position (Redis's `master->db->id` or the cached
/// master's, for a save's `repl-stream-db`).
pub fn stream_db() -> Option<usize> {
    HAS_POSITION
        .load(Ordering::Relaxed)
        .then(|| STREAM_DB.load(Ordering::Relaxed) as usize)
}

/// The master connection applied everything up to the end of a batch, in database
/// `db` (connection/master_link.rs).
pub fn set_stream_db(db: usize) {
    STREAM_DB.store(db as u64, Ordering::Relaxed);
}

/// A server started as a replica from a file that recorded where its replication
/// stood (Redis's replicationCacheMasterUsingMyself at start): the history and
/// offset it continues from with PSYNC, and the database the stream had selected.
/// The caller has made `offset` the stream's own (`effects::reset_offset`).
pub fn cache_position(offset: u64, stream_db: usize) {
    tracing::info!("Before turning into a replica, using my own master parameters to synthesize a cached master: I may be able to synchronize with the new master with just a partial transfer.");
    APPLIED.store(offset, Ordering::Relaxed);
    READ.store(offset, Ordering::Relaxed);
    STREAM_DB.store(stream_db as u64, Ordering::Relaxed);
    HAS_POSITION.store(true, Ordering::Relaxed);
}

/// Where PSYNC asks to continue: this server's replication id and offset, when it
/// has a position.
fn position() -> Option<(String, u64)> {
    HAS_POSITION
        .load(Ordering::Relaxed)
        .then(|| (super::replid(), crate::effects::offset()))
}

/// The master connection is about to apply a batch: waits while a snapshot for a
/// replica of this one is wanted (Dekker-style with `hold_stream`: each
/// side raises its flag, then looks at the other's).
pub async fn begin_batch() {
    loop {
        while SNAPSHOT_WANTED.load(Ordering::SeqCst) > 0 {
            crate::runtime::sleep(Duration::from_millis(1)).await;
        }
        BATCH_RUNNING.store(true, Ordering::SeqCst);
        if SNAPSHOT_WANTED.load(Ordering::SeqCst) == 0 {
            return;
        }
        BATCH_RUNNING.store(false, Ordering::SeqCst);
    }
}

/// The batch ran and what it applied was passed on.
pub fn end_batch() {
    BATCH_RUNNING.store(false, Ordering::SeqCst);
}

/// The master connection kept between two batches while this lives
/// (`hold_stream`).
pub struct StreamHeld(());

impl Drop for StreamHeld {
    fn drop(&mut self) {
        SNAPSHOT_WANTED.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Waits until the master connection (if any) is between two batches and keeps it
/// there until the guard drops: a cut taken meanwhile holds exactly the master's
/// stream up to `effects::offset()`, never part of a batch the offset does not count
/// yet. Costs nothing on a master. Never call it holding key locks: the batch it
/// waits for may need them.
pub async fn hold_stream() -> StreamHeld {
    SNAPSHOT_WANTED.fetch_add(1, Ordering::SeqCst);
    let held = StreamHeld(());
    while BATCH_RUNNING.load(Ordering::SeqCst) {
        crate::runtime::sleep(Duration::from_millis(1)).await;
    }
    held
}

/// Error replies this replica gave its master's commands (INFO
/// unexpected_error_replies).
static UNEXPECTED_ERRORS: AtomicU64 = AtomicU64::new(0);

pub fn unexpected_error_replies() -> u64 {
    UNEXPECTED_ERRORS.load(Ordering::Relaxed)
}

pub fn reset_unexpected_error_replies() {
    UNEXPECTED_ERRORS.store(0, Ordering::Relaxed);
}

/// A replica link sent a command that touches the keyspace: Redis refuses it (its
/// processCommand: "Replica can't interact with the keyspace") and logs the error it
/// sends down the link as any error between master and replica, counted too.
pub fn error_to_replica(text: &str, cmd: &str) {
    tracing::warn!("== CRITICAL == This master is sending an error to its replica: '{text}' after processing the command '{cmd}'");
    UNEXPECTED_ERRORS.fetch_add(1, Ordering::Relaxed);
}

/// A command replayed here failed (Redis's afterErrorReply for its master client
/// and its AOF client): this server may now differ from its master (or its file),
/// which never sees the reply. Logged as Redis logs it and counted; with
/// `propagation-error-behavior panic` (or `panic-on-replicas`, for a master's
/// command on a read-only replica) the process stops rather than diverge.
pub fn error_to_source(
    role: crate::clients::ClientRole,
    reply: &[u8],
    cmd: Option<&str>,
    config: &crate::config::Config,
) {
    let from_master = role == crate::clients::ClientRole::Master;
    let (from, to) = if from_master {
        ("replica", "master")
    } else {
        ("server", "AOF-loading-client")
    };
    let text = reply.strip_prefix(b"-").unwrap_or(reply);
    let text = text.strip_suffix(b"\r\n").unwrap_or(text);
    let text = String::from_utf8_lossy(&text[..text.len().min(4096)]);
    let cmd = cmd.unwrap_or("<unknown>");
    tracing::warn!("== CRITICAL == This {from} is sending an error to its {to}: '{text}' after processing the command '{cmd}'");
    UNEXPECTED_ERRORS.fetch_add(1, Ordering::Relaxed);
    let behavior = config.enum_param("propagation-error-behavior");
    let panics = if from_master {
        matches!(behavior, Some("panic" | "panic-on-replicas")) && config.replica_read_only()
    } else {
        behavior == Some("panic")
    };
    if panics {
        panic!("This {from} panicked sending an error to its {to} after processing the command '{cmd}'");
    }
}

/// ROLE's offset for a replica: what it applied, -1 before its first sync.
pub fn applied_offset() -> i64 {
    if HAS_POSITION.load(Ordering::Relaxed) {
        APPLIED.load(Ordering::Relaxed) as i64
    } else {
        -1
    }
}

// ---- the master connection's accounting (connection::serve_master) ----

/// `n` more bytes of the stream were read from the master.
pub fn stream_read(n: usize) {
    READ.fetch_add(n as u64, Ordering::Relaxed);
    LAST_IO_MS.store(crate::util::now_ms(), Ordering::Relaxed);
}

/// Everything read but `unprocessed` bytes has been applied.
pub fn stream_applied(unprocessed: usize) {
    let read = READ.load(Ordering::Relaxed);
    APPLIED.store(read.saturating_sub(unprocessed as u64), Ordering::Relaxed);
}

/// The offset a REPLCONF ACK reports: what was applied before the `unprocessed`
/// bytes still to run (the GETACK asking included, as Redis acknowledges the offset
/// before it).
pub fn offset_before(unprocessed: usize) -> u64 {
    READ.load(Ordering::Relaxed)
        .saturating_sub(unprocessed as u64)
}

pub fn applied() -> u64 {
    APPLIED.load(Ordering::Relaxed)
}

/// Unix ms of the master's last bytes (the master connection's timeout looks).
pub fn last_io_ms() -> u64 {
    LAST_IO_MS.load(Ordering::Relaxed)
}

/// INFO replication's lines between `master_port` and `slave_priority`, as Redis
/// 7.0's genRedisInfoString writes them for a replica.
pub fn info_fields(out: &mut String) {
    use std::fmt::Write;
    let s = state();
    let now = crate::util::now_ms();
    let up = s == LinkState::Connected;
    let last_io = if up {
        (now.saturating_sub(LAST_IO_MS.load(Ordering::Relaxed)) / 1000) as i64
    } else {
        -1
    };
    let (applied, read) = if HAS_POSITION.load(Ordering::Relaxed) {
        (
            APPLIED.load(Ordering::Relaxed),
            READ.load(Ordering::Relaxed),
        )
    } else {
        (1, 1)
    };
    let _ = write!(
        out,
        "master_link_status:{}\r\nmaster_last_io_seconds_ago:{last_io}\r\nmaster_sync_in_progress:{}\r\nslave_read_repl_offset:{read}\r\nslave_repl_offset:{applied}\r\n",
        if up { "up" } else { "down" },
        u8::from(s == LinkState::Transfer),
    );
    let d = detail();
    if s == LinkState::Transfer {
        let total = d.transfer_size;
        let left = if total < 0 {
            0
        } else {
            (total as u64).saturating_sub(d.transfer_read)
        };
        let perc = if total > 0 {
            d.transfer_read as f64 * 100.0 / total as f64
        } else {
            0.0
        };
        let _ = write!(
            out,
            "master_sync_total_bytes:{total}\r\nmaster_sync_read_bytes:{}\r\nmaster_sync_left_bytes:{left}\r\nmaster_sync_perc:{perc:.2}\r\nmaster_sync_last_io_seconds_ago:{}\r\n",
            d.transfer_read,
            now.saturating_sub(LAST_IO_MS.load(Ordering::Relaxed)) / 1000,
        );
    }
    if !up {
        let since = if d.down_since_ms == 0 {
            -1
        } else {
            (now.saturating_sub(d.down_since_ms) / 1000) as i64
        };
        let _ = write!(out, "master_link_down_since_seconds:{since}\r\n");
    }
}

// ---- the link task ----

/// Starts the master connection on the stream left after the sync (`initial`: bytes
/// of the stream already read). Set by the server: the connection layer sits above
/// replication.
pub type ServeMaster = fn(Rc<ShardCell>, TcpStream, Vec<u8>) -> crate::runtime::JoinHandle<()>;
static SERVE_MASTER: std::sync::OnceLock<ServeMaster> = std::sync::OnceLock::new();

pub fn set_master_server(serve: ServeMaster) {
    let _ = SERVE_MASTER.set(serve);
}

/// The link task (shard 0, for the server's life).
pub async fn run(cell: Rc<ShardCell>) {
    loop {
        crate::runtime::sleep(Duration::from_millis(100)).await;
        // Not while the dataset loads (Redis's cron does not run then): a start from
        // a file that recorded a position must have adopted it before the first PSYNC.
        if state() != LinkState::Connect || crate::persistence::loading() {
            continue;
        }
        let Some((host, port)) = super::master() else {
            continue;
        };
        let generation = GENERATION.load(Ordering::SeqCst);
        match sync_with_master(&cell, &host, port, generation).await {
            Ok(Some((stream, initial))) => follow(&cell, stream, initial, generation).await,
            Ok(None) => {}
            Err(msg) => {
                if !msg.is_empty() {
                    tracing::warn!("{msg}");
                }
            }
        }
        // Whatever ended the link, the next look reconnects (unless REPLICAOF
        // changed the setting meanwhile: it set the state itself).
        let retry = {
            let mut d = detail();
            let current = GENERATION.load(Ordering::SeqCst) == generation;
            if current {
                if d.down_since_ms == 0 || state() == LinkState::Connected {
                    d.down_since_ms = crate::util::now_ms();
                }
                set_state(LinkState::Connect);
            }
            current
        };
        if retry {
            // Redis retries once a second (replicationCron).
            crate::runtime::sleep(Duration::from_millis(900)).await;
        }
    }
}

fn current(generation: u64) -> bool {
    GENERATION.load(Ordering::SeqCst) == generation
}

/// The connected link: runs the master connection until it ends or REPLICAOF
/// changes the master.
async fn follow(cell: &Rc<ShardCell>, stream: TcpStream, initial: Vec<u8>, generation: u64) {
    let Some(serve) = SERVE_MASTER.get() else {
        return;
    };
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    if !set_state_for(generation, LinkState::Connected) {
        return;
    }
    LAST_IO_MS.store(crate::util::now_ms(), Ordering::Relaxed);
    MASTER_CONNECTION_UP.store(true, Ordering::SeqCst);
    let mut conn = serve(cell.clone(), stream, initial);
    loop {
        let tick = crate::runtime::sleep(Duration::from_millis(100));
        let ended = matches!(
            crate::runtime::first(&mut conn, tick).await,
            crate::runtime::First::A(())
        );
        if ended {
            break;
        }
        if !current(generation) {
            // REPLICAOF moved on: end the connection (its read sees end-of-file).
            // SAFETY: shutdown(2) on the master connection's fd, which it still owns
            // (it has not ended: `conn` is pending).
            unsafe {
                libc::shutdown(fd, libc::SHUT_RDWR);
            }
            conn.await;
            break;
        }
    }
    MASTER_CONNECTION_UP.store(false, Ordering::SeqCst);
    if current(generation) {
        tracing::warn!("Connection with master lost.");
        tracing::info!("Caching the disconnected master state.");
    }
}

/// What the master's first reply to PSYNC said.
enum Psync {
    Full { replid: String, offset: u64 },
    Continue { replid: Option<String> },
}

/// Connects and syncs: Ok(Some) with the stream to follow, Ok(None) when REPLICAOF
/// changed meanwhile, Err with the log line of a failure (retried a second later).
async fn sync_with_master(
    cell: &Rc<ShardCell>,
    host: &str,
    port: u16,
    generation: u64,
) -> Result<Option<(TcpStream, Vec<u8>)>, String> {
    tracing::info!("Connecting to MASTER {host}:{port}");
    if !set_state_for(generation, LinkState::Connecting) {
        return Ok(None);
    }
    let timeout = repl_timeout(cell);
    let mut stream = connect(host, port, timeout)
        .await
        .map_err(|e| format!("Unable to connect to MASTER: {e}"))?;
    if cell
        .data
        .borrow()
        .config
        .bool_param("tls-replication")
        .unwrap_or(false)
    {
        start_tls(&mut stream, host).map_err(|e| format!("Unable to connect to MASTER: {e}"))?;
    }
    if !current(generation) {
        return Ok(None);
    }
    tracing::info!("MASTER <-> REPLICA sync started");
    if !set_state_for(generation, LinkState::Handshake) {
        return Ok(None);
    }
    let mut link = Lines::new(stream, timeout, generation);
    handshake(cell, &mut link).await?;
    if !current(generation) {
        return Ok(None);
    }
    let answer = psync(&mut link).await;
    super::failover::psync_answered(cell, answer.is_ok()).await;
    match answer? {
        Psync::Continue { replid } => {
            tracing::info!("Successful partial resynchronization with master.");
            let offset = crate::effects::offset();
            if let Some(id) = replid.filter(|id| *id != super::replid()) {
                tracing::warn!("Master replication ID changed to {id}");
                super::continue_with_replid(&id, offset);
                // This server's replicas must learn of the new id.
                super::disconnect_replicas(cell).await;
            }
            // A replica keeps a backlog (it may be promoted); one that continued a
            // position from its file at start has none yet (Redis creates it here).
            crate::effects::backlog_create(super::backlog_size());
            // The stream goes on from what was applied: the unapplied rest of the
            // last read is gone with the old connection.
            APPLIED.store(offset, Ordering::Relaxed);
            READ.store(offset, Ordering::Relaxed);
            tracing::info!("MASTER <-> REPLICA sync: Master accepted a Partial Resynchronization.");
        }
        Psync::Full { replid, offset } => {
            tracing::info!("Full resync from master: {replid}:{offset}");
            if !set_state_for(generation, LinkState::Transfer) {
                return Ok(None);
            }
            // The master's history is already this server's (Redis compares
            // replids): a swapdb load may serve the old dataset meanwhile.
            let history_ours = replid == super::replid();
            receive_and_load(cell, &mut link, generation, history_ours).await?;
            if !current(generation) {
                return Ok(None);
            }
            // The master's history is this server's now: its id, its offset, and a
            // backlog from here (a replica keeps one: it may be promoted).
            super::adopt_replid(&replid);
            crate::effects::backlog_create(super::backlog_size());
            crate::effects::reset_offset(offset);
            APPLIED.store(offset, Ordering::Relaxed);
            READ.store(offset, Ordering::Relaxed);
            // The master's stream starts with a SELECT after a full sync.
            STREAM_DB.store(0, Ordering::Relaxed);
            HAS_POSITION.store(true, Ordering::Relaxed);
            tracing::info!("MASTER <-> REPLICA sync: Finished with success");
        }
    }
    let (stream, rest) = link.into_parts();
    READ.fetch_add(rest.len() as u64, Ordering::Relaxed);
    Ok(Some((stream, rest)))
}

fn repl_timeout(cell: &Rc<ShardCell>) -> Duration {
    Duration::from_secs(cell.data.borrow().config.repl_timeout_s())
}

/// A blocking connect on a thread of its own (a master that does not answer must
/// not stall the shard), from `bind-source-addr`, handed back as the reactor's stream.
pub(crate) async fn connect(host: &str, port: u16, timeout: Duration) -> Result<TcpStream, String> {
    let (tx, rx) = futures_channel::oneshot::channel();
    let target = format!("{host}:{port}");
    std::thread::Builder::new()
        .name("repl-connect".into())
        .spawn(move || {
            let result = (|| {
                use std::net::ToSocketAddrs;
                let addr = target
                    .to_socket_addrs()?
                    .next()
                    .ok_or_else(|| std::io::Error::other("no address"))?;
                crate::util::outbound::connect_timeout(&addr, timeout)
            })();
            let _ = tx.send(result);
        })
        .map_err(|e| e.to_string())?;
    let s = rx
        .await
        .map_err(|_| "the connecting thread failed".to_string())?
        .map_err(|e| crate::util::io_error_text(&e))?;
    let _ = s.set_nodelay(true);
    TcpStream::from_tcp(s).map_err(|e| e.to_string())
}

/// `tls-replication yes`: the link speaks TLS with the client context of now (the
/// handshake runs in the link's first exchange).
fn start_tls(stream: &mut TcpStream, host: &str) -> Result<(), String> {
    let config = crate::tls::connector().ok_or("TLS is not configured")?;
    let session = crate::runtime::TlsSession::client(config, crate::tls::server_name(host)?)
        .map_err(|e| e.to_string())?;
    stream.start_tls(session);
    Ok(())
}

/// PING, AUTH (masterauth / masteruser), REPLCONF listening-port, ip-address and
/// capa, each answered before the next, as Redis's syncWithMaster.
async fn handshake(cell: &Rc<ShardCell>, link: &mut Lines) -> Result<(), String> {
    let reply = link.command(&[b"PING"]).await?;
    if !reply.starts_with('+')
        && !reply.starts_with("-NOAUTH")
        && !reply.starts_with("-NOPERM")
        && !reply.starts_with("-ERR operation not permitted")
    {
        return Err(format!("Error reply to PING from master: '{reply}'"));
    }
    tracing::info!("Master replied to PING, replication can continue...");
    let (auth, user, announce_ip, port) = {
        let data = cell.data.borrow();
        let c = &data.config;
        let announced = c.int_param("replica-announce-port").unwrap_or(0);
        let tls_port = c.int_param("tls-port").unwrap_or(0);
        // Redis's order: the announced port, the TLS port when the link is TLS,
        // else the plaintext port.
        let port = if announced != 0 {
            announced
        } else if tls_port != 0 && c.bool_param("tls-replication").unwrap_or(false) {
            tls_port
        } else {
            i64::from(c.port())
        };
        (
            c.str_param("masterauth").to_string(),
            c.str_param("masteruser").to_string(),
            c.str_param("replica-announce-ip").to_string(),
            port,
        )
    };
    if !auth.is_empty() {
        let reply = if user.is_empty() {
            link.command(&[b"AUTH", auth.as_bytes()]).await?
        } else {
            link.command(&[b"AUTH", user.as_bytes(), auth.as_bytes()])
                .await?
        };
        if reply.starts_with('-') {
            return Err(format!("Unable to AUTH to MASTER: {reply}"));
        }
    }
    let port = port.to_string();
    let reply = link
        .command(&[b"REPLCONF", b"listening-port", port.as_bytes()])
        .await?;
    if reply.starts_with('-') {
        tracing::info!(
            "(Non critical) Master does not understand REPLCONF listening-port: {reply}"
        );
    }
    if !announce_ip.is_empty() {
        let reply = link
            .command(&[b"REPLCONF", b"ip-address", announce_ip.as_bytes()])
            .await?;
        if reply.starts_with('-') {
            tracing::info!(
                "(Non critical) Master does not understand REPLCONF ip-address: {reply}"
            );
        }
    }
    let reply = link
        .command(&[b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"])
        .await?;
    if reply.starts_with('-') {
        tracing::info!("(Non critical) Master does not understand REPLCONF capa: {reply}");
    }
    Ok(())
}

/// PSYNC with the cached master's id and offset+1, or `? -1` without one.
async fn psync(link: &mut Lines) -> Result<Psync, String> {
    let (id, offset) = match position() {
        Some((id, applied)) => {
            let next = (applied + 1).to_string();
            tracing::info!("Trying a partial resynchronization (request {id}:{next}).");
            (id, next)
        }
        None => {
            tracing::info!("Partial resynchronization not possible (no cached master)");
            ("?".to_string(), "-1".to_string())
        }
    };
    // A master failing over to this one says so: the replica promotes itself.
    if super::failover::in_progress() {
        link.send(&[b"PSYNC", id.as_bytes(), offset.as_bytes(), b"FAILOVER"])
            .await?;
    } else {
        link.send(&[b"PSYNC", id.as_bytes(), offset.as_bytes()])
            .await?;
    }
    loop {
        let reply = link.line().await?;
        // Newlines before the reply keep the link alive while the master prepares.
        if reply.is_empty() {
            continue;
        }
        if let Some(rest) = reply.strip_prefix("+FULLRESYNC") {
            let mut parts = rest.split_whitespace();
            let replid = parts.next().unwrap_or("");
            let offset = parts.next().and_then(|o| o.parse::<u64>().ok());
            return match (replid.len(), offset) {
                (40, Some(offset)) => Ok(Psync::Full {
                    replid: replid.to_string(),
                    offset,
                }),
                _ => Err("Master replied with wrong +FULLRESYNC syntax.".into()),
            };
        }
        if let Some(rest) = reply.strip_prefix("+CONTINUE") {
            if !HAS_POSITION.load(Ordering::Relaxed) {
                return Err(format!("Unexpected reply to PSYNC from master: {reply}"));
            }
            let id = rest.trim();
            return Ok(Psync::Continue {
                replid: (id.len() == 40).then(|| id.to_string()),
            });
        }
        if reply.starts_with("-NOMASTERLINK") || reply.starts_with("-LOADING") {
            let msg = reply.trim_start_matches('-');
            return Err(format!(
                "Master is currently unable to PSYNC but should be in the future: {msg}"
            ));
        }
        return Err(format!("Unexpected reply to PSYNC from master: {reply}"));
    }
}

/// Receives the RDB (`$<len>` or `$EOF:<mark>`) into a temporary file, renames it
/// over `dbfilename` and loads it into every shard, the old dataset flushed.
async fn receive_and_load(
    cell: &Rc<ShardCell>,
    link: &mut Lines,
    generation: u64,
    history_ours: bool,
) -> Result<(), String> {
    let (dir, dbfilename) = {
        let data = cell.data.borrow();
        (
            std::path::PathBuf::from(data.config.dir()),
            data.config.dbfilename().to_string(),
        )
    };
    let header = loop {
        let line = link.line().await?;
        if !line.is_empty() {
            break line;
        }
    };
    if let Some(msg) = header.strip_prefix('-') {
        return Err(format!("MASTER aborted replication with an error: {msg}"));
    }
    let Some(size) = header.strip_prefix('$') else {
        return Err(format!("Bad protocol from MASTER, the first byte is not '$' (we received '{header}'), are you sure the host and port are right?"));
    };
    let diskless = use_diskless_load(cell).await;
    let to = if diskless { "parser" } else { "disk" };
    let body = match size.strip_prefix("EOF:") {
        Some(mark) if mark.len() >= 40 => {
            tracing::info!(
                "MASTER <-> REPLICA sync: receiving streamed RDB from master with EOF to {to}"
            );
            Body::Marked(mark.as_bytes()[..40].to_vec())
        }
        _ => match size.parse::<u64>() {
            Ok(n) => {
                tracing::info!("MASTER <-> REPLICA sync: receiving {n} bytes from master to {to}");
                Body::Sized(n)
            }
            Err(_) => return Err(format!("Bad protocol from MASTER: {header}")),
        },
    };
    {
        // INFO's master_sync_total_bytes / master_sync_read_bytes from here on.
        let mut d = detail();
        d.transfer_size = match &body {
            Body::Sized(n) => *n as i64,
            Body::Marked(_) => -1,
        };
        d.transfer_read = 0;
    }
    if diskless {
        let side = cell.data.borrow().config.enum_param("repl-diskless-load") == Some("swapdb");
        let plan = diskless_load::Plan {
            side,
            serve_old: side && history_ours,
        };
        return diskless_load::load(cell, link, body, plan, generation).await;
    }
    let temp = dir.join(format!(
        "temp-{}.{}.rdb",
        crate::util::now_ms() / 1000,
        std::process::id()
    ));
    let received = receive_to(link, &temp, body).await;
    if let Err(e) = received {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    if !current(generation) {
        let _ = std::fs::remove_file(&temp);
        return Ok(());
    }
    let target = dir.join(&dbfilename);
    if let Err(e) = std::fs::rename(&temp, &target) {
        let _ = std::fs::remove_file(&temp);
        return Err(format!("Failed trying to rename the temp DB into {dbfilename} in MASTER <-> REPLICA synchronization: {}", crate::util::io_error_text(&e)));
    }
    load(cell, &target).await
}

enum Body {
    Sized(u64),
    Marked(Vec<u8>),
}

/// Whether a full sync's payload is parsed as it arrives instead of saved first
/// (Redis's useDisklessLoad): `swapdb` always, `on-empty-db` when there is no key.
async fn use_diskless_load(cell: &Rc<ShardCell>) -> bool {
    let mode = cell.data.borrow().config.enum_param("repl-diskless-load");
    match mode {
        Some("swapdb") => true,
        Some("on-empty-db") => {
            let keys = cell
                .call_all(|c| c.data.borrow().dbs.iter().map(|db| db.len()).sum::<usize>())
                .await;
            keys.iter().sum::<usize>() == 0
        }
        _ => false,
    }
}

/// The payload into `path`, fsynced. With an EOF mark, the last 40 bytes read are
/// held back until more come or they turn out to be the mark.
async fn receive_to(link: &mut Lines, path: &std::path::Path, body: Body) -> Result<(), String> {
    let io_err = |e: std::io::Error| {
        format!(
            "Opening the temp file needed for MASTER <-> REPLICA synchronization: {}",
            crate::util::io_error_text(&e)
        )
    };
    let mut file = std::fs::File::create(path).map_err(io_err)?;
    let write_err = |e: std::io::Error| {
        format!(
            "Write error saving the DB on disk in MASTER <-> REPLICA synchronization: {}",
            crate::util::io_error_text(&e)
        )
    };
    match body {
        Body::Sized(total) => {
            let mut left = total;
            while left > 0 {
                let chunk = link.chunk(left as usize).await?;
                file.write_all(&chunk).map_err(write_err)?;
                left -= chunk.len() as u64;
                detail().transfer_read = total - left;
            }
        }
        Body::Marked(mark) => {
            let mut held: Vec<u8> = Vec::new();
            loop {
                let chunk = link.chunk(usize::MAX).await?;
                held.extend_from_slice(&chunk);
                detail().transfer_read += chunk.len() as u64;
                if held.ends_with(&mark) {
                    held.truncate(held.len() - mark.len());
                    file.write_all(&held).map_err(write_err)?;
                    break;
                }
                if held.len() > mark.len() {
                    let keep = held.split_off(held.len() - mark.len());
                    file.write_all(&held).map_err(write_err)?;
                    held = keep;
                }
            }
        }
    }
    file.sync_all().map_err(write_err)?;
    Ok(())
}

/// The received file into every shard (Redis's readSyncBulkPayload after the
/// transfer): the AOF stopped meanwhile and started again with a rewrite, replicas
/// of this one disconnected (their data is from before).
async fn load(cell: &Rc<ShardCell>, path: &std::path::Path) -> Result<(), String> {
    let config = cell.data.borrow().config.clone();
    let aof_was_on = crate::persistence::aof::enabled();
    if aof_was_on {
        crate::persistence::rewrite::turn_off_at_run_time(&config);
    }
    super::disconnect_replicas(cell).await;
    tracing::info!("MASTER <-> REPLICA sync: Flushing old data");
    tracing::info!("MASTER <-> REPLICA sync: Loading DB in memory");
    crate::persistence::set_loading(true);
    let loaded = crate::persistence::load::load_from_master(cell, path).await;
    crate::persistence::set_loading(false);
    if let Err(e) = loaded {
        return Err(format!(
            "Failed trying to load the MASTER synchronization DB from disk, check server logs. ({e})"
        ));
    }
    // What was loaded is the master's, not a change of ours to save.
    cell.call_all(|c| c.data.borrow_mut().dirty = 0).await;
    if aof_was_on {
        if let Err(e) = crate::persistence::rewrite::turn_on_at_run_time(cell).await {
            tracing::warn!("Failed enabling the AOF after successful master synchronization! Trying it again in one second. ({e})");
        }
    }
    Ok(())
}

/// The handshake's reader: replies line by line, then the payload in chunks, each
/// read bounded by `repl-timeout` (Redis's timeouts for the handshake and transfer).
struct Lines {
    stream: TcpStream,
    buf: Vec<u8>,
    timeout: Duration,
    /// The REPLICAOF setting this link serves: once it changes, reads end.
    generation: u64,
}

/// How often a read waiting on the master looks whether REPLICAOF changed.
const SETTING_CHECK: Duration = Duration::from_millis(50);

impl Lines {
    fn new(stream: TcpStream, timeout: Duration, generation: u64) -> Lines {
        Lines {
            stream,
            buf: Vec::new(),
            timeout,
            generation,
        }
    }

    fn into_parts(self) -> (TcpStream, Vec<u8>) {
        (self.stream, self.buf)
    }

    /// Puts bytes taken too many back in front of what is buffered.
    fn unread(&mut self, mut bytes: Vec<u8>) {
        bytes.append(&mut self.buf);
        self.buf = bytes;
    }

    async fn send(&mut self, args: &[&[u8]]) -> Result<(), String> {
        let mut cmd = Vec::new();
        crate::effects::encode_command(&mut cmd, args);
        self.stream
            .write_all(&cmd)
            .await
            .map_err(|e| format!("Sending command to master in replication handshake: {e}"))
    }

    async fn command(&mut self, args: &[&[u8]]) -> Result<String, String> {
        self.send(args).await?;
        self.line().await
    }

    /// More bytes into `buf`; Err on end-of-file, error or timeout, and (an empty
    /// message: nothing went wrong) once REPLICAOF changed: the handshake or transfer
    /// is given up and its socket closed at once, as Redis's
    /// cancelReplicationHandshake does, not when the master next sends something (a
    /// master saving for a disk-based sync sends only a newline a second, and keeps
    /// its BGSAVE for a replica that is gone).
    async fn fill(&mut self) -> Result<(), String> {
        let mut tmp = vec![0u8; 64 * 1024];
        let deadline = std::time::Instant::now() + self.timeout;
        let read = loop {
            if !current(self.generation) {
                return Err(String::new());
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break None;
            }
            let tick = crate::runtime::sleep(left.min(SETTING_CHECK));
            if let crate::runtime::First::A(r) =
                crate::runtime::first(self.stream.read(&mut tmp), tick).await
            {
                break Some(r);
            }
        };
        match read {
            None => Err(if state() == LinkState::Transfer {
                "Timeout receiving bulk data from MASTER... If the problem persists try to set the 'repl-timeout' parameter in redis.conf to a larger value.".into()
            } else {
                "Timeout connecting to the MASTER...".into()
            }),
            Some(Ok(0)) => Err(if state() == LinkState::Transfer {
                "I/O error trying to sync with MASTER: connection lost".into()
            } else {
                "Master did not respond to command during SYNC handshake".into()
            }),
            Some(Err(e)) => Err(format!("I/O error trying to sync with MASTER: {e}")),
            Some(Ok(n)) => {
                self.buf.extend_from_slice(&tmp[..n]);
                LAST_IO_MS.store(crate::util::now_ms(), Ordering::Relaxed);
                Ok(())
            }
        }
    }

    /// The next line without its CRLF (a lone LF ends one too).
    async fn line(&mut self) -> Result<String, String> {
        loop {
            if let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
                let mut line: Vec<u8> = self.buf.drain(..=end).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(String::from_utf8_lossy(&line).into_owned());
            }
            if self.buf.len() > 64 * 1024 {
                return Err("Bad protocol from MASTER: a reply line without an end".into());
            }
            self.fill().await?;
        }
    }

    /// Up to `max` payload bytes (what is buffered, or the next read's).
    async fn chunk(&mut self, max: usize) -> Result<Vec<u8>, String> {
        if self.buf.is_empty() {
            self.fill().await?;
        }
        let n = self.buf.len().min(max);
        let rest = self.buf.split_off(n);
        Ok(std::mem::replace(&mut self.buf, rest))
    }
}
