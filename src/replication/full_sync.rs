//! A full sync's snapshot (Redis's startBgsaveForReplication), taken without fork and
//! without holding the shards, as BGSAVE is (persistence/bgsave.rs: a cut under every
//! shard's lock, then a walk of each shard between its other work).
//!
//! * **Diskless** (`repl-diskless-sync yes` and a replica that announced `capa eof`):
//!   the replicas of one sync round share one walk, whose file a writer child sends
//!   straight to their sockets after `+FULLRESYNC <id> <offset>` and `$EOF:<mark>`,
//!   ending with the mark. Their links join the stream at the cut, and each link's
//!   stream is held until its replica's first REPLCONF ACK: a replica looks for the
//!   mark at the end of what it read, so nothing may follow the file until it has it
//!   (Redis's repl_start_cmd_stream_on_ack).
//! * **Disk** (`repl-diskless-sync no`, or a replica without `capa eof`): a BGSAVE of
//!   dbfilename, whose cut attaches the link, then the file sent as `$<len>`.
//!
//!   A replica that asks while such a BGSAVE still saves shares it (Redis's
//!   "Waiting for end of BGSAVE for SYNC"): its link starts at the same offset, from
//!   the backlog. When the last replica waiting for it leaves and no `save` point is
//!   set, the BGSAVE is given up (Redis's killRDBChild in freeClient).
//!
//! A round opens with the first replica waiting and starts `repl-diskless-sync-delay`
//! seconds later (sooner once `repl-diskless-sync-max-replicas` wait), once no other
//! background job runs: one child at a time, as Redis has. A replica waiting for its
//! round or its BGSAVE gets a newline every second, which keeps its link alive.
//! Until its snapshot starts it is a pending replica (INFO's wait_bgsave with no
//! link yet); a replica that closes its socket meanwhile is noticed at once.

use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::ReplicaPeer;
use crate::persistence::bgsave::{self, Job, Outcome};
use crate::shard::ShardCell;

/// Where a replica of a sync round stands.
enum Joined {
    Waiting,
    /// The round's transfer runs: its job, this replica's socket among its sockets,
    /// and its link.
    Started {
        job: Arc<Job>,
        index: usize,
        link: u64,
    },
    /// The transfer could not start.
    Failed,
}

/// A replica waiting for its round.
struct Waiter {
    peer: ReplicaPeer,
    /// Its entry among the pending replicas, gone when its link attaches.
    pending: u64,
    socket: OwnedFd,
    joined: Arc<Mutex<Joined>>,
}

/// The open round: when it starts (unix ms) and who waits for it.
struct Round {
    start_ms: u64,
    max_waiting: usize,
    waiters: Vec<Waiter>,
}

static ROUND: Mutex<Option<Round>> = Mutex::new(None);

/// Replicas whose full sync waits for its snapshot to start (Redis's
/// WAIT_BGSAVE_START): no link yet, but INFO lists them and counts them. Each with
/// a token and when it asked (unix ms).
static PENDING: Mutex<Vec<(u64, ReplicaPeer, u64)>> = Mutex::new(Vec::new());
static NEXT_PENDING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A replica's place among the pending ones, for as long as it lives or until its
/// link attaches (`unpend`).
pub struct Pending(u64);

impl Pending {
    fn new(peer: ReplicaPeer) -> Pending {
        let token = NEXT_PENDING.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&PENDING).push((token, peer, crate::util::now_ms()));
        Pending(token)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        unpend(self.0);
    }
}

/// The pending replica `token` got its link (or left).
fn unpend(token: u64) {
    lock(&PENDING).retain(|(t, _, _)| *t != token);
}

pub fn pending_count() -> usize {
    lock(&PENDING).len()
}

/// The pending replicas and since when they wait (unix ms), in arrival order.
pub fn pending_peers() -> Vec<(ReplicaPeer, u64)> {
    lock(&PENDING)
        .iter()
        .map(|(_, peer, since)| (peer.clone(), *since))
        .collect()
}

/// The disk-based sync whose BGSAVE runs: its job and the offset its file ends at.
/// Replicas that ask meanwhile share it.
static DISK_SAVE: Mutex<Option<(Arc<Job>, u64)>> = Mutex::new(None);

/// Whether the replica on `fd` closed its side (or the connection broke): a replica
/// waiting for its snapshot reads nothing, so only this tells that it left (Redis
/// sees the EOF in its event loop and frees the client).
pub fn peer_closed(fd: std::os::fd::RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: poll(2) on one valid pollfd, without waiting.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How often a waiting replica gets its keep-alive newline.
const NEWLINE_EVERY: Duration = Duration::from_secs(1);
/// How often waiters look at their round.
const POLL: Duration = Duration::from_millis(20);

/// What a started transfer hands the connection of one of its replicas.
pub struct Transfer {
    job: Arc<Job>,
    index: usize,
    /// The replica's link (a reader of the stream from the cut on).
    pub link: u64,
}

impl Transfer {
    /// Waits for the transfer to end: true when this replica got the whole file.
    /// `gone` (the connection killed or closed) ends the wait, and so does a replica
    /// that took nothing for `timeout_s()` seconds (repl-timeout, read as it is now):
    /// the socket is shut down so that the writer drops it too.
    pub async fn finished(
        &self,
        socket: &impl AsRawFd,
        gone: impl Fn() -> bool,
        timeout_s: impl Fn() -> u64,
        who: &str,
    ) -> bool {
        let mut stall = Stall::default();
        loop {
            if self.job.outcome().is_some() {
                return self.job.socket_ok(self.index);
            }
            let timed_out = stall.longer_than(socket.as_raw_fd(), timeout_s());
            if timed_out {
                tracing::warn!("Disconnecting timedout replica (full sync): {who}");
            }
            if timed_out || gone() {
                // SAFETY: shutdown(2) on the connection's own socket.
                unsafe { libc::shutdown(socket.as_raw_fd(), libc::SHUT_RDWR) };
                return false;
            }
            crate::runtime::sleep(POLL).await;
        }
    }
}

/// How long a replica has taken nothing of its transfer (Redis's
/// repl_last_partial_write, checked by replicationCron). The writer child owns the
/// writes, so progress is read from the socket: bytes the replica's TCP stack
/// acknowledged. A stopped or stuck replica's window closes and that count stands
/// still while bytes wait in the send queue; with nothing queued (the writer waits
/// for the walk) the replica is not behind.
#[derive(Default)]
struct Stall {
    acked: u64,
    since: Option<std::time::Instant>,
}

impl Stall {
    fn longer_than(&mut self, fd: std::os::fd::RawFd, timeout_s: u64) -> bool {
        let (Some(acked), Some(queued)) = (bytes_acked(fd), bytes_queued(fd)) else {
            return false;
        };
        if acked != self.acked || queued == 0 {
            self.acked = acked;
            self.since = None;
            return false;
        }
        let since = *self.since.get_or_insert_with(std::time::Instant::now);
        since.elapsed() > Duration::from_secs(timeout_s)
    }
}

/// TCP_INFO's tcpi_bytes_acked of a socket.
fn bytes_acked(fd: std::os::fd::RawFd) -> Option<u64> {
    // SAFETY: tcp_info is plain data; getsockopt(2) fills at most `len` bytes of it.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let r = libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        (r == 0).then_some(info.tcpi_bytes_acked)
    }
}

/// Bytes in a socket's send queue, not yet acknowledged (SIOCOUTQ).
fn bytes_queued(fd: std::os::fd::RawFd) -> Option<u64> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ writes one int.
    let r = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n) };
    (r == 0).then_some(n.max(0) as u64)
}

/// A diskless full sync: joins (or opens) the round and waits for its transfer to
/// start. None when the transfer could not start or `gone` says the replica left
/// (its link then never existed).
pub async fn diskless(
    cell: &Rc<ShardCell>,
    peer: ReplicaPeer,
    socket: &impl AsRawFd,
    delay_s: u64,
    max_waiting: usize,
    gone: impl Fn() -> bool,
) -> Option<Transfer> {
    // SAFETY: the connection's socket is open for the length of this call.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(socket.as_raw_fd()) };
    let own = borrowed.try_clone_to_owned().ok()?;
    let joined = Arc::new(Mutex::new(Joined::Waiting));
    let pending = Pending::new(peer.clone());
    {
        let mut round = lock(&ROUND);
        let r = round.get_or_insert_with(|| {
            if delay_s > 0 {
                tracing::info!("Delay next BGSAVE for diskless SYNC");
            }
            Round {
                start_ms: crate::util::now_ms() + delay_s * 1000,
                max_waiting,
                waiters: Vec::new(),
            }
        });
        r.waiters.push(Waiter {
            peer,
            pending: pending.0,
            socket: own,
            joined: joined.clone(),
        });
    }
    let mut keepalive = Keepalive::new();
    loop {
        match std::mem::replace(&mut *lock(&joined), Joined::Waiting) {
            Joined::Started { job, index, link } => return Some(Transfer { job, index, link }),
            Joined::Failed => return None,
            Joined::Waiting => {}
        }
        if gone() {
            // Taken out of the round, or its transfer began meanwhile: then the
            // socket is shut so that the writer drops it, and the link goes.
            if let Some(started) = leave_round(&joined) {
                started.finished(socket, || true, || u64::MAX, "").await;
                super::detach(started.link);
            }
            return None;
        }
        if let Some(waiters) = take_due_round() {
            lead(cell, waiters).await;
            continue;
        }
        keepalive.tick(socket);
        crate::runtime::sleep(POLL).await;
    }
}

/// A waiter whose replica left: out of the round if it is still open, marked failed
/// otherwise; its transfer if one had started for it.
fn leave_round(joined: &Arc<Mutex<Joined>>) -> Option<Transfer> {
    {
        let mut round = lock(&ROUND);
        if let Some(r) = round.as_mut() {
            r.waiters.retain(|w| !Arc::ptr_eq(&w.joined, joined));
            if r.waiters.is_empty() {
                *round = None;
            }
        }
    }
    let was = std::mem::replace(&mut *lock(joined), Joined::Failed);
    match was {
        Joined::Started { job, index, link } => Some(Transfer { job, index, link }),
        _ => None,
    }
}

/// The waiters of the open round, if it is due and no background job runs (the round
/// is closed: later replicas open the next one).
fn take_due_round() -> Option<Vec<Waiter>> {
    let mut round = lock(&ROUND);
    let r = round.as_ref()?;
    let due = crate::util::now_ms() >= r.start_ms
        || (r.max_waiting > 0 && r.waiters.len() >= r.max_waiting);
    if !due || bgsave::busy() {
        return None;
    }
    round.take().map(|r| r.waiters)
}

/// Starts the round's transfer and tells each waiter how it went. A job that
/// started first puts the round back, due.
async fn lead(cell: &Rc<ShardCell>, waiters: Vec<Waiter>) {
    tracing::info!("Starting BGSAVE for SYNC with target: replicas sockets");
    let sockets: std::io::Result<Vec<OwnedFd>> =
        waiters.iter().map(|w| w.socket.try_clone()).collect();
    let Ok(sockets) = sockets else {
        return fail(&waiters);
    };
    let mark = super::random_id();
    let preamble = Rc::new(std::cell::RefCell::new(Vec::new()));
    let links = Rc::new(std::cell::RefCell::new(Vec::new()));
    let at_cut = {
        let (preamble, links, mark) = (preamble.clone(), links.clone(), mark.clone());
        let peers: Vec<(ReplicaPeer, u64)> = waiters
            .iter()
            .map(|w| (w.peer.clone(), w.pending))
            .collect();
        Box::new(move || {
            let mut offset = 0;
            for (peer, pending) in peers {
                unpend(pending);
                let (id, at) = super::attach(peer);
                links.borrow_mut().push(id);
                offset = at;
            }
            *preamble.borrow_mut() = format!(
                "+FULLRESYNC {} {offset}\r\n$EOF:{mark}\r\n",
                super::replid()
            )
            .into_bytes();
            true
        })
    };
    let timeout_ms = cell.data.borrow().config.repl_timeout_s() * 1000;
    let transfer = bgsave::Transfer {
        sockets,
        timeout_ms,
        preamble,
        suffix: mark.into_bytes(),
    };
    // On a replica the cut falls between two batches of its master's stream
    // (bgsave.rs holds it), so the links join exactly where the file ends.
    let started = bgsave::start_transfer(cell, transfer, at_cut).await;
    match started {
        Ok(job) => {
            let links = links.borrow();
            for (index, w) in waiters.iter().enumerate() {
                let link = links.get(index).copied().unwrap_or(0);
                let mut joined = lock(&w.joined);
                if matches!(*joined, Joined::Failed) {
                    // Its connection left while the transfer started: the writer
                    // drops its socket, and its link goes.
                    // SAFETY: shutdown(2) on our copy of the replica's socket.
                    unsafe { libc::shutdown(w.socket.as_raw_fd(), libc::SHUT_RDWR) };
                    super::detach(link);
                    continue;
                }
                *joined = Joined::Started {
                    job: job.clone(),
                    index,
                    link,
                };
            }
        }
        Err(bgsave::StartError::InProgress) => {
            // Attached nothing: the cut was never taken.
            let mut round = lock(&ROUND);
            let r = round.get_or_insert_with(|| Round {
                start_ms: 0,
                max_waiting: 0,
                waiters: Vec::new(),
            });
            r.start_ms = 0;
            r.waiters.extend(waiters);
        }
        Err(bgsave::StartError::Spawn) => {
            for id in links.borrow().iter() {
                super::detach(*id);
            }
            fail(&waiters)
        }
    }
}

fn fail(waiters: &[Waiter]) {
    tracing::warn!("BGSAVE for replication failed");
    for w in waiters {
        *lock(&w.joined) = Joined::Failed;
    }
}

/// A waiting replica's keep-alive: a newline once per `NEWLINE_EVERY`.
struct Keepalive(std::time::Instant);

impl Keepalive {
    fn new() -> Self {
        Self(std::time::Instant::now())
    }

    fn tick(&mut self, socket: &impl AsRawFd) {
        if self.0.elapsed() >= NEWLINE_EVERY {
            send_newline(socket);
            self.0 = std::time::Instant::now();
        }
    }
}

/// A keep-alive newline, if the socket takes it now (a replica whose socket is full
/// needs none: it is reading or gone).
fn send_newline(socket: &impl AsRawFd) {
    // SAFETY: send(2) of one byte from a static buffer on the connection's socket.
    unsafe {
        libc::send(
            socket.as_raw_fd(),
            b"\n".as_ptr().cast(),
            1,
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
}

/// A disk-based full sync: the BGSAVE of another replica's sync if one runs and the
/// backlog still holds the stream from its cut, else a BGSAVE whose cut attaches the
/// link. Returns the job and the link, with the offset +FULLRESYNC reports; None
/// when the save could not start or `gone` says the replica left first.
pub async fn to_disk(
    cell: &Rc<ShardCell>,
    peer: ReplicaPeer,
    socket: &impl AsRawFd,
    gone: impl Fn() -> bool,
) -> Option<(Arc<Job>, u64, u64)> {
    let mut keepalive = Keepalive::new();
    let pending = Pending::new(peer.clone());
    let mut told_waiting = false;
    loop {
        if gone() {
            return None;
        }
        if let Some(shared) = share_disk_save(&peer, &pending) {
            return Some(shared);
        }
        if bgsave::in_progress() && !told_waiting {
            if bgsave::transfer_running() {
                tracing::info!(
                    "Current BGSAVE has socket target. Waiting for next BGSAVE for SYNC"
                );
            } else {
                tracing::info!("Can't attach the replica to the current BGSAVE. Waiting for next BGSAVE for SYNC");
            }
            told_waiting = true;
        }
        if !bgsave::busy() {
            let attached = Rc::new(std::cell::Cell::new(None));
            let at_cut = {
                let (attached, peer, token) = (attached.clone(), peer.clone(), pending.0);
                Box::new(move || {
                    unpend(token);
                    attached.set(Some(super::attach(peer)));
                    true
                })
            };
            tracing::info!("Starting BGSAVE for SYNC with target: disk");
            let kind = bgsave::Kind::Rdb;
            let started = bgsave::start_job(cell, kind, at_cut).await;
            match (started, attached.get()) {
                (Ok(job), Some((link, offset))) => {
                    *lock(&DISK_SAVE) = Some((job.clone(), offset));
                    return Some((job, link, offset));
                }
                (Err(bgsave::StartError::InProgress), None) => {}
                (_, attached) => {
                    if let Some((link, _)) = attached {
                        super::detach(link);
                    }
                    return None;
                }
            }
        }
        keepalive.tick(socket);
        crate::runtime::sleep(POLL).await;
    }
}

/// The running BGSAVE of another replica's disk-based sync, shared (Redis's "Case 1"
/// of syncCommand): a link from its cut's offset on, if the backlog holds it.
fn share_disk_save(peer: &ReplicaPeer, pending: &Pending) -> Option<(Arc<Job>, u64, u64)> {
    let (job, offset) = lock(&DISK_SAVE).clone()?;
    if job.outcome().is_some() || job.abandoned() || !bgsave::is_running(&job) {
        return None;
    }
    let link = super::attach_at(peer.clone(), offset)?;
    unpend(pending.0);
    tracing::info!("Waiting for end of BGSAVE for SYNC");
    Some((job, link, offset))
}

/// A replica waiting for a disk-based sync's BGSAVE left (its link `link` detached):
/// with no other replica waiting for a snapshot and no `save` point that wants the
/// file, the BGSAVE is given up (Redis's freeClient: killRDBChild).
pub fn left_disk_save(cell: &Rc<ShardCell>, job: &Arc<Job>, link: u64) {
    let saves = !cell.data.borrow().config.save_points().is_empty();
    if saves || super::any_other_waits_for_snapshot(link) {
        return;
    }
    bgsave::abandon_disk_save(job);
}

/// Waits for a disk-based sync's BGSAVE to end, sending newlines meanwhile: true
/// when the file was saved.
pub async fn saved(job: &Job, socket: &impl AsRawFd, gone: impl Fn() -> bool) -> bool {
    let mut keepalive = Keepalive::new();
    loop {
        match job.handled_outcome() {
            Some(outcome) => return outcome == Outcome::Saved,
            None if gone() => return false,
            None => {}
        }
        keepalive.tick(socket);
        crate::runtime::sleep(POLL).await;
    }
}
