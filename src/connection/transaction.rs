//! MULTI / EXEC: queueing, EXECABORT, and running the queue as one atomic unit under
//! the locks of every key it touches (WATCH checked under them).

use super::*;

impl Connection {
    /// Between MULTI and EXEC: queue the command (or refuse it, dooming the
    /// transaction) and reply QUEUED.
    pub(super) fn queue_in_multi(
        &mut self,
        idx: u16,
        spec: &'static commands::CommandSpec,
        args: &Args<'_>,
    ) {
        if spec.has(flags::NO_MULTI) {
            return self.reject(Some(idx), "ERR Command not allowed inside a transaction");
        }
        // Redis refuses a DENYOOM command already when queued, dooming the EXEC.
        if spec.has(flags::DENYOOM) && self.home_out_of_memory() {
            return self.reject(Some(idx), commands::OOM_ERR);
        }
        if let Some(m) = self.session.multi.as_mut() {
            m.queue.push((idx, args.to_vecs()));
            self.session.shared.multi_count.set(m.queue.len() as i64);
        }
        let proto = self.session.proto;
        let before = self.reply_target().len();
        ReplyWriter {
            out: self.reply_target(),
            proto,
        }
        .simple("QUEUED");
        self.note_local(before);
    }

    /// EXEC refused before it started (Redis's execCommandAbort): the transaction is
    /// discarded and the error says why.
    pub(super) async fn exec_abort(&mut self, idx: u16, args: &Args<'_>, err: &str) {
        self.flush().await;
        self.session.multi = None;
        self.session.shared.multi_count.set(-1);
        commands::multi::unwatch_all(&mut self.session).await;
        let before = self.out.len();
        ReplyWriter {
            out: &mut self.out,
            proto: self.session.proto,
        }
        .error(&format!(
            "EXECABORT Transaction discarded because of: {err}"
        ));
        self.finish_local(idx, before, None, args);
    }

    /// EXEC: every queued command runs while the transaction holds every shard, so it
    /// is atomic and isolated across cores; WATCHed keys are checked under the locks.
    pub(super) async fn exec(&mut self, idx: u16, args: &Args<'_>) {
        let Some(state) = self.session.multi.take() else {
            return;
        };
        let t0 = self.timing.then(Stamp::now);
        self.session.shared.multi_count.set(-1);
        let proto = self.session.proto;
        if state.aborted {
            commands::multi::unwatch_all(&mut self.session).await;
            let before = self.out.len();
            ReplyWriter {
                out: &mut self.out,
                proto,
            }
            .error("EXECABORT Transaction discarded because of previous errors.");
            self.finish_local(idx, before, t0, args);
            return;
        }
        // Redis gathers each queued command's flags as it queues (a script's from
        // its shebang or its function's flags): EXEC writes if one of them does.
        // (Flags some queued command has, flags every one has.)
        let (any, every) = state
            .queue
            .iter()
            .map(|(i, argv)| queued_flags(*i, argv))
            .fold((0, u32::MAX), |(any, every), f| (any | f, every & f));
        let gate = {
            let write = any & flags::WRITE != 0;
            let stale_ok = every & flags::STALE != 0;
            let config = &self.session.cell.data.borrow().config;
            if self.session.shared.role.get().replays() {
                None
            } else {
                crate::replication::check(config, write, stale_ok)
            }
        };
        if let Some(err) = gate {
            return self.exec_abort(idx, args, err).await;
        }
        let denyoom = any & flags::DENYOOM != 0;
        if denyoom && self.home_out_of_memory() {
            return self
                .exec_abort(idx, args, commands::OOM_ERR.trim_start_matches('-'))
                .await;
        }
        let cell = self.session.cell.clone();
        let owner = locks::LockOwner {
            id: cell.next_txn_id(),
            write: false,
            client: self.session.id(),
        };
        let op = crate::shard::multi::MultiShardOp::lock_all(owner, &cell).await;
        let dirty = commands::multi::watched_dirty(&self.session).await;
        commands::multi::unwatch_all(&mut self.session).await;
        let before = self.out.len();
        if dirty {
            // Aborted: nothing ran.
            op.release(&cell).await;
            ReplyWriter {
                out: &mut self.out,
                proto,
            }
            .null_array();
            self.finish_local(idx, before, t0, args);
            return;
        }
        self.session.exec_owner = Some(owner.id);
        let shared = self.session.shared.clone();
        shared.tracking.defer(&shared, true);
        let captured = crate::effects::begin_capture(owner.id);
        let role_mark = crate::replication::role_mark();
        ReplyWriter {
            out: &mut self.out,
            proto,
        }
        .array_len(state.queue.len());
        for (_, argv) in &state.queue {
            let owned = OwnedArgs::new(argv);
            // Every command takes the locked path under the transaction's owner, which
            // already holds every shard; each completes before the next starts.
            self.pipe.locked = true;
            Box::pin(self.run_command(owned.args())).await;
            self.flush().await;
            self.take_pushes();
        }
        self.pipe.locked = false;
        self.session.exec_owner = None;
        shared.tracking.defer(&shared, false);
        if captured {
            let became_replica = crate::replication::became_replica_since(role_mark);
            crate::effects::end_capture(owner.id, !became_replica);
        }
        // The commands EXEC ran propagated themselves (captured above).
        op.release(&cell).await;
        self.finish_local(idx, before, t0, args);
    }
}

/// A queued command's flags for EXEC's checks: its table entry's, a script
/// command's as its script declares them (`scripting::command_flags`).
fn queued_flags(idx: u16, argv: &[Vec<u8>]) -> u32 {
    let spec = &commands::table().specs[idx as usize];
    match argv.get(1) {
        Some(target) => crate::scripting::command_flags(spec.name, target, spec.flags),
        None => spec.flags,
    }
}
