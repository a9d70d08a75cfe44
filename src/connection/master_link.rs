//! The connection to this replica's master once it synced (Redis's CLIENT_MASTER
//! client): the master's stream runs as commands on the owning shards, in order, with
//! no replies; the offset applied is accounted per command (outside a MULTI, so a
//! transaction cut by a dropped link is asked for again whole); REPLCONF ACK goes
//! back every second and when the master asks with GETACK. What was applied is passed
//! on byte for byte to this server's own replicas and backlog (`effects::proxy`), once
//! per batch, after the batch ran: a replica's full sync snapshots between batches
//! (`replication::link::hold_stream`), so it never holds a command its
//! stream also carries.

use super::*;

/// The names of the commands a replaying client ran since its replies were last
/// looked at, in order, those without a reply left out.
#[derive(Default)]
pub(super) struct ReplyCheck {
    names: Vec<u8>,
    ends: Vec<usize>,
}

impl ReplyCheck {
    pub(super) fn command(&mut self, name: &[u8]) {
        // REPLCONF (GETACK) is the one command of a master's stream with no reply.
        if !name.eq_ignore_ascii_case(b"replconf") {
            self.names.extend_from_slice(name);
            self.ends.push(self.names.len());
        }
    }

    fn names(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(s, &e)| &self.names[s..e])
    }

    fn clear(&mut self) {
        self.names.clear();
        self.ends.clear();
    }
}

/// The master connection's bytes applied but not yet passed on.
#[derive(Default)]
pub(super) struct MasterFeed {
    /// Raw commands, in stream order, since the last pass.
    applied: Vec<u8>,
    /// How much of `applied` is complete units (a MULTI not yet EXECed stays back).
    ready: usize,
}

impl Connection {
    pub(super) async fn run_master(&mut self) {
        // A partial resync's stream goes on in the database the last one selected.
        if let Some(db) = crate::replication::link::stream_db() {
            self.session.set_db(db);
        }
        crate::replication::link::set_master_client(self.session.id());
        self.serve_master_stream().await;
        crate::replication::link::set_master_client(0);
    }

    async fn serve_master_stream(&mut self) {
        let generation = crate::replication::link::generation();
        let ack_every = std::time::Duration::from_secs(1);
        // The first ACK goes at once: a diskless master puts the replica online
        // (and starts its stream) on it.
        let mut last_ack = std::time::Instant::now()
            .checked_sub(ack_every)
            .unwrap_or_else(std::time::Instant::now);
        loop {
            // While a script is busy the stream waits, read but not applied (Redis's
            // processInputBuffer skips the master then): applied now, its commands
            // would get -BUSY, and the replica would lose them.
            let busy = crate::scripting::is_busy();
            if self.start < self.end && !busy {
                crate::replication::link::begin_batch().await;
                // REPLICAOF moved on meanwhile: nothing more of this master applies.
                if crate::replication::link::generation() != generation {
                    crate::replication::link::end_batch();
                    return;
                }
                self.process_input().await;
                self.check_replies();
                self.pass_on_applied();
                crate::replication::link::set_stream_db(self.session.db);
                crate::replication::link::end_batch();
            }
            // Replies to the master are never sent (its pushes neither).
            self.out.clear();
            if self.obuf_closed || self.session.shared.killed.get() {
                return;
            }
            let asked = self.session.shared.ack_asked.take();
            if asked.is_some() || last_ack.elapsed() >= ack_every {
                let offset = asked
                    .filter(|&o| o != crate::clients::ACK_ASKED)
                    .unwrap_or_else(crate::replication::link::applied);
                if !self.send_ack(offset).await {
                    return;
                }
                last_ack = std::time::Instant::now();
            }
            if self.master_timed_out() {
                tracing::warn!("MASTER timeout: no data nor PING received...");
                return;
            }
            let due = ack_every.saturating_sub(last_ack.elapsed());
            let pending = self.end - self.start;
            let mut wait = due.max(std::time::Duration::from_millis(1));
            if busy {
                wait = wait.min(std::time::Duration::from_millis(10));
            }
            let tick = crate::runtime::sleep(wait);
            match crate::runtime::first(self.read_more(), tick).await {
                crate::runtime::First::A(false) => return,
                crate::runtime::First::A(true) => {
                    crate::replication::link::stream_read((self.end - self.start) - pending)
                }
                crate::runtime::First::B(()) => {}
            }
        }
    }

    /// After each command of the master's stream (`raw`: its bytes; `unprocessed`:
    /// the bytes from its start to the end of what was read): kept to pass on; the
    /// applied offset moves past it unless a MULTI is open; a GETACK gets the offset
    /// before it.
    pub(super) fn master_command_done(&mut self, raw: &[u8], unprocessed: usize) {
        let shared = &self.session.shared;
        if shared.ack_asked.get() == Some(crate::clients::ACK_ASKED) {
            shared
                .ack_asked
                .set(Some(crate::replication::link::offset_before(unprocessed)));
        }
        let in_multi = self.session.multi.is_some();
        if let Some(feed) = self.master.as_mut() {
            feed.applied.extend_from_slice(raw);
            if !in_multi {
                feed.ready = feed.applied.len();
            }
        }
        if !in_multi {
            crate::replication::link::stream_applied(self.end - self.start);
        }
    }

    /// The replies of a client that replays commands, before they are dropped (the
    /// master never gets them, the AOF loader reads none): an error among them means
    /// this server may now differ from its master or its file (`error_to_source`).
    pub(super) fn check_replies(&mut self) {
        let Some(check) = self.reply_check.as_mut() else {
            return;
        };
        if self.out.contains(&b'-') {
            let role = self.session.shared.role.get();
            let data = self.session.cell.data.borrow();
            let mut at = 0;
            for name in check.names() {
                let Some(len) = crate::protocol::reply::value_len(&self.out[at..]) else {
                    break;
                };
                let reply = &self.out[at..at + len];
                at += len;
                if reply.first() == Some(&b'-') {
                    // An unknown command has no name to Redis here ("<unknown>").
                    let cmd = crate::commands::table::lookup(name).map(|(_, spec)| spec.name);
                    crate::replication::link::error_to_source(role, reply, cmd, &data.config);
                }
            }
        }
        check.clear();
    }

    /// The complete units applied since the last pass, to this server's replicas.
    fn pass_on_applied(&mut self) {
        let Some(feed) = self.master.as_mut() else {
            return;
        };
        if feed.ready == 0 {
            return;
        }
        crate::effects::proxy(&feed.applied[..feed.ready]);
        feed.applied.drain(..feed.ready);
        feed.ready = 0;
        if feed.applied.capacity() > 1 << 20 && feed.applied.len() < 4096 {
            feed.applied.shrink_to(4096);
        }
    }

    /// `REPLCONF ACK <offset>` to the master, with `FACK <offset>` while the AOF is
    /// on: how far it is fsynced, for the master's WAITAOF (Redis 7.2's
    /// replicationSendAck; a 7.0 master reads the ACK and ignores the rest). False
    /// when the link is gone.
    async fn send_ack(&mut self, offset: u64) -> bool {
        let offset = offset.to_string();
        let fsynced = crate::persistence::aof::fsynced_offset();
        let fsynced = (fsynced != -1).then(|| fsynced.to_string());
        let mut cmd = Vec::with_capacity(80);
        match &fsynced {
            Some(f) => {
                let args: [&[u8]; 5] = [
                    b"REPLCONF",
                    b"ACK",
                    offset.as_bytes(),
                    b"FACK",
                    f.as_bytes(),
                ];
                crate::effects::encode_command(&mut cmd, &args);
            }
            None => {
                let args: [&[u8]; 3] = [b"REPLCONF", b"ACK", offset.as_bytes()];
                crate::effects::encode_command(&mut cmd, &args);
            }
        }
        self.stream.write_all(&cmd).await.is_ok()
    }

    /// Nothing from the master for `repl-timeout` seconds (its PINGs included).
    fn master_timed_out(&self) -> bool {
        let limit = self.session.cell.data.borrow().config.repl_timeout_s();
        crate::util::now_ms().saturating_sub(crate::replication::link::last_io_ms()) > limit * 1000
    }
}
