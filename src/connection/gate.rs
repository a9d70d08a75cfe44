//! The gate: whether a command runs, in Redis's processCommand order. `Connection::gate`
//! is the one predicate for the refusals (unknown subcommand, arity, protected
//! commands, NOAUTH, subscribed context, BUSY, replication); both the fast path and
//! `run_command` consult it. Also here: protected mode, CLIENT PAUSE holds, the
//! maxmemory refusal of coordinators, and the error texts.

use super::*;

/// The gate's verdict on a command (`Connection::gate`).
pub(super) enum Gate {
    Pass,
    /// Refused with this error, counted as a rejected call of this stat id.
    Refuse(Option<u16>, String),
    /// A script is running too long (BUSY): refused, and EXEC aborts its transaction.
    Busy(&'static str),
    /// Cluster mode, a migrating or importing slot, and keys on other shards:
    /// `run_command` asks them, then routes (`cluster_lookup_route`) and makes the
    /// checks that follow routing (`refusal_after_routing`).
    ClusterLookup,
    /// Cluster mode: the command goes to another node, or the cluster refuses it
    /// (-MOVED, -ASK, -CLUSTERDOWN ...). EXEC discards its transaction.
    Redirect(String),
}

/// Redis 7.0's reply to a client refused by protected mode, word for word: clients
/// and operators search for it.
pub(super) const PROTECTED_MODE_DENIED: &str =
    "-DENIED Redis is running in protected mode because protected \
mode is enabled and no password is set for the default user. In this mode connections are only \
accepted from the loopback interface. If you want to connect from external computers to Redis you \
may adopt one of the following solutions: 1) Just disable protected mode sending the command \
'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same \
host the server is running, however MAKE SURE Redis is not publicly accessible from internet if \
you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable \
the protected mode by editing the Redis configuration file, and setting the protected mode option \
to 'no', and then restarting the server. 3) If you started the server manually just for testing, \
restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the \
default user. NOTE: You only need to do one of the above things in order for the server to start \
accepting connections from the outside.\r\n";

/// Protected mode (Redis 7.0's clientAcceptHandler): while it is on and the default
/// user has no password, only local peers may connect, whatever `bind` says.
pub(super) fn protected_mode_denies(cell: &ShardCell, peer: &crate::clients::PeerAddr) -> bool {
    let data = cell.data.borrow();
    data.config.protected_mode()
        && crate::acl::default().nopass()
        && !crate::clients::is_local_peer(peer)
}

/// Whether a command may write or propagate (Redis's WRITE | MAY_REPLICATE, with a
/// script's declared flags for EVAL / EVALSHA / FCALL): what CLIENT PAUSE WRITE holds.
pub(super) fn may_write_or_propagate(idx: u16, args: &Args<'_>) -> bool {
    let t = commands::table();
    let writes = flags::WRITE | flags::MAY_REPLICATE;
    let own = t.stat_flags(t.stat_id(idx, args));
    if own & writes == 0 {
        return false;
    }
    // A script that declares flags writes unless it says no-writes; one without a
    // shebang, unknown, or whose shebang does not parse keeps MAY_REPLICATE.
    args.len() < 2
        || crate::scripting::command_flags(t.specs[idx as usize].name, args.get(1), own) & writes
            != 0
}

/// Whether a command writes, with a script's declared flags for EVAL / EVALSHA /
/// FCALL (Redis's getCommandFlags & CMD_WRITE, what cluster routing asks).
pub(super) fn command_writes(idx: u16, args: &Args<'_>) -> bool {
    let t = commands::table();
    let own = t.stat_flags(t.stat_id(idx, args));
    let effective = if args.len() < 2 {
        own
    } else {
        crate::scripting::command_flags(t.specs[idx as usize].name, args.get(1), own)
    };
    effective & flags::WRITE != 0
}

/// Redis 7.0's text for an unknown command, including up to 128 bytes of its arguments.
/// Redis's reply to a container command with a subcommand it does not have
/// (`%.128s` of the subcommand, the container as typed, upper-cased).
pub(super) fn unknown_subcommand_message(container: &str, sub: &[u8]) -> String {
    let sub = String::from_utf8_lossy(&sub[..sub.len().min(128)]);
    format!(
        "ERR unknown subcommand '{sub}'. Try {} HELP.",
        container.to_ascii_uppercase()
    )
}

pub(super) fn unknown_command_message(args: &Args) -> String {
    let name = String::from_utf8_lossy(&args.get(0)[..args.get(0).len().min(128)]).into_owned();
    let mut tail = String::new();
    for i in 1..args.len() {
        if tail.len() >= 128 {
            break;
        }
        let room = 128 - tail.len();
        let a = args.get(i);
        tail.push('\'');
        tail.push_str(&String::from_utf8_lossy(&a[..a.len().min(room)]));
        tail.push_str("' ");
    }
    format!("ERR unknown command '{name}', with args beginning with: {tail}")
}

impl Connection {
    pub(super) fn reject(&mut self, cmd: Option<u16>, msg: &str) {
        // A command that fails to queue dooms the transaction (EXECABORT).
        if let Some(m) = self.session.multi.as_mut() {
            m.aborted = true;
        }
        let proto = self.session.proto;
        let mut data = self.session.cell.data.borrow_mut();
        data.stats.record_rejected(cmd);
        data.stats.record_error(error_prefix(msg.as_bytes()));
        drop(data);
        let before = self.reply_target().len();
        ReplyWriter {
            out: self.reply_target(),
            proto,
        }
        .error(msg);
        self.note_local(before);
    }

    /// The refusals, in Redis's processCommand order: the one predicate both the fast
    /// path and `run_command` consult (the fast path runs a command only when this
    /// passes, and leaves every other verdict to `run_command`). `stat` is the
    /// command's stat id (its subcommand's, for a container).
    #[inline(always)]
    pub(super) fn gate(
        &self,
        idx: u16,
        spec: &'static commands::CommandSpec,
        stat: u16,
        args: &Args<'_>,
    ) -> Gate {
        if self.no_refusal_can_apply(idx, spec, args) {
            // In cluster mode routing is then the only check that can refuse.
            return self.cluster_gate(idx, spec, args).unwrap_or(Gate::Pass);
        }
        self.refusal(idx, spec, stat, args)
    }

    /// The cluster check as the gate's verdict; None when the command runs here.
    #[inline(always)]
    fn cluster_gate(
        &self,
        idx: u16,
        spec: &'static commands::CommandSpec,
        args: &Args<'_>,
    ) -> Option<Gate> {
        match self.cluster_verdict(idx, spec, args)? {
            redirect::ClusterVerdict::Local => None,
            redirect::ClusterVerdict::Redirect(msg) => Some(Gate::Redirect(msg)),
            redirect::ClusterVerdict::NeedsLookup => Some(Gate::ClusterLookup),
        }
    }

    /// The common case in a few loads: no container and no protected command, with
    /// the right arity, from an authenticated client outside RESP2 pub/sub, while no
    /// script is busy, neither replication check can refuse (a master without
    /// min-replicas) and the dataset is not loading. When this holds, none of `refusal`'s checks can refuse; when it
    /// does not, `refusal` decides, in order.
    #[inline(always)]
    fn no_refusal_can_apply(
        &self,
        idx: u16,
        spec: &'static commands::CommandSpec,
        args: &Args<'_>,
    ) -> bool {
        !spec.has(flags::ADMIN)
            && spec.arity_ok(args.len())
            && self.session.authenticated
            && self.session.acl_open
            && self.session.acl_gen == crate::acl::generation()
            && !self.session.shared.pubsub.active()
            && !crate::scripting::is_busy()
            && !crate::replication::may_refuse()
            && !crate::persistence::loading()
            && !crate::persistence::async_loading()
            && !commands::table().is_container(idx)
    }

    /// `gate`'s checks one by one, in processCommand order.
    #[inline(never)]
    fn refusal(
        &self,
        idx: u16,
        spec: &'static commands::CommandSpec,
        stat: u16,
        args: &Args<'_>,
    ) -> Gate {
        let t = commands::table();
        // A container's unknown subcommand is an unknown command to Redis: refused
        // before arity, protection and authentication are looked at.
        if stat == idx && args.len() >= 2 && !t.subcommands(idx).is_empty() {
            return Gate::Refuse(None, unknown_subcommand_message(spec.name, args.get(1)));
        }
        if !spec.arity_ok(args.len()) {
            let msg = format!("ERR wrong number of arguments for '{}' command", spec.name);
            return Gate::Refuse(Some(idx), msg);
        }
        if let Some(sub) = t.stat_sub(stat).filter(|s| !s.arity_ok(args.len())) {
            let msg = format!("ERR wrong number of arguments for '{}' command", sub.name);
            return Gate::Refuse(Some(stat), msg);
        }
        if let Some(msg) = self.protected_command_refusal(spec, args) {
            return Gate::Refuse(Some(idx), msg);
        }
        if !self.session.authenticated && !spec.has(flags::NO_AUTH) {
            return Gate::Refuse(Some(idx), "NOAUTH Authentication required.".into());
        }
        if !self.session.acl_open && !self.session.shared.role.get().replays() {
            // A queued command is checked again when EXEC runs it, in case the rules
            // changed meanwhile (execCommand), with its own error.
            let in_exec = self.session.exec_owner.is_some() && !self.session.in_script;
            let context = if self.session.multi.is_some() || in_exec {
                crate::acl::log::Context::Multi
            } else {
                crate::acl::log::Context::Toplevel
            };
            if let Err(denial) = self.acl_check(stat, args, context) {
                let msg = if in_exec {
                    denial.exec_error()
                } else {
                    denial.top_level_error(t.stat_name(stat))
                };
                return Gate::Refuse(Some(idx), msg);
            }
        }
        if let Some(verdict) = self.cluster_gate(idx, spec, args) {
            return verdict;
        }
        self.refusal_after_routing(idx, spec, stat)
    }

    /// `refusal`'s checks that come after cluster routing, in processCommand order.
    pub(super) fn refusal_after_routing(
        &self,
        idx: u16,
        spec: &'static commands::CommandSpec,
        stat: u16,
    ) -> Gate {
        let t = commands::table();
        if self.session.shared.pubsub.active()
            && self.session.proto == Protocol::Resp2
            && !commands::pubsub::allowed_while_subscribed(spec.name)
        {
            let msg = commands::pubsub::subscribed_context_error(spec.name);
            return Gate::Refuse(Some(idx), msg);
        }
        if let Some(err) = self.replication_gate(spec, stat) {
            return Gate::Refuse(Some(idx), err.into());
        }
        if crate::persistence::loading()
            && t.stat_flags(stat) & flags::LOADING == 0
            && !self.session.shared.role.get().replays()
        {
            return Gate::Refuse(Some(idx), crate::persistence::LOADING_ERR.into());
        }
        if crate::persistence::async_loading() && t.stat_flags(stat) & flags::NO_ASYNC_LOADING != 0
        {
            return Gate::Refuse(Some(idx), crate::persistence::LOADING_ERR.into());
        }
        // After -LOADING, as Redis checks: a script the AOF runs while loading makes
        // clients wait for the load, not for the script.
        if let Some(busy) = crate::scripting::busy_error() {
            if !spec.has(flags::ALLOW_BUSY) {
                return Gate::Busy(busy);
            }
        }
        Gate::Pass
    }

    /// The ACL check of a command (`stat` its id, `args` from its name on) for this
    /// client's user; a denial goes to ACL LOG with `context`.
    pub(super) fn acl_check(
        &self,
        stat: u16,
        args: &Args<'_>,
        context: crate::acl::log::Context,
    ) -> Result<(), crate::acl::Denial> {
        let user = self.session.shared.user.borrow().clone();
        crate::acl::check(&user, stat, args).map_err(|(denial, pos)| {
            let object = crate::acl::log::object_of(denial, stat, args, pos);
            crate::acl::log::add_for(&self.session, denial.reason(), context, object, None);
            denial
        })
    }

    /// DEBUG, and MODULE LOAD / LOADEX / UNLOAD, run only as `enable-debug-command` /
    /// `enable-module-command` allow (Redis 7.0's protected commands; `local` means a
    /// local peer; MODULE LIST and HELP are not protected). Both are admin commands,
    /// so the flag test spares every other command the name compare.
    pub(super) fn protected_command_refusal(
        &self,
        spec: &commands::CommandSpec,
        args: &Args<'_>,
    ) -> Option<String> {
        if !spec.has(flags::ADMIN) {
            return None;
        }
        let (name, setting) = match spec.name {
            "debug" => ("DEBUG", "enable-debug-command"),
            "module" if ["load", "loadex", "unload"].iter().any(|s| args.is(1, s)) => {
                ("MODULE", "enable-module-command")
            }
            _ => return None,
        };
        let data = self.session.cell.data.borrow();
        let allowed = if spec.name == "debug" {
            data.config.enable_debug_command()
        } else {
            data.config.enable_module_command()
        };
        if allowed.allows(self.session.shared.is_local()) {
            return None;
        }
        Some(format!(
            "ERR {name} command not allowed. If the {setting} option is set to \"local\", \
             you can run it from a local connection, otherwise you need to set this option \
             in the configuration file, and then restart the server."
        ))
    }

    /// Redis's replication checks before a command runs (or queues): READONLY on a
    /// replica, NOREPLICAS under min-replicas-to-write, MASTERDOWN on a replica whose
    /// link is down with replica-serve-stale-data off. Commands EXEC or a script runs
    /// are not checked again.
    /// `stat` names the subcommand when there is one: its flags decide (SCRIPT LOAD
    /// is allowed on a stale replica, CONFIG SET ... as their own tables say).
    pub(super) fn replication_gate(
        &self,
        spec: &commands::CommandSpec,
        stat: u16,
    ) -> Option<&'static str> {
        if self.session.exec_owner.is_some()
            || self.session.in_script
            || self.session.shared.role.get().replays()
        {
            return None;
        }
        let command_flags = commands::table().stat_flags(stat);
        let write = command_flags & flags::WRITE != 0;
        let stale_ok = command_flags & flags::STALE != 0;
        let config = &self.session.cell.data.borrow().config;
        // Redis refuses PING too while writes are refused for a failed save.
        if spec.name == "ping" {
            if let Some(e) = crate::persistence::bgsave::write_refusal(config) {
                return Some(e);
            }
            if let Some(e) = crate::persistence::aof::write_refusal() {
                return Some(e);
            }
        }
        if !crate::replication::is_replica() && !write {
            return None;
        }
        crate::replication::check(config, write, stale_ok)
    }

    /// Whether CLIENT PAUSE WRITE holds this command: it may write or propagate
    /// (EXEC: one of its queued commands may).
    pub(super) fn pause_may_write(&self, idx: u16, args: &Args<'_>) -> bool {
        let spec = &commands::table().specs[idx as usize];
        if spec.name != "exec" {
            return may_write_or_propagate(idx, args);
        }
        self.session.multi.as_ref().is_some_and(|m| {
            m.queue
                .iter()
                .any(|(i, argv)| may_write_or_propagate(*i, &OwnedArgs::new(argv).args()))
        })
    }

    /// Waits while a CLIENT PAUSE holds the command about to run. Replies of earlier
    /// commands go out first (Redis writes them while the client is blocked); the
    /// socket is watched meanwhile, so a client that leaves stops waiting.
    pub(super) async fn wait_out_pause(&mut self, may_write: bool) {
        let cell = self.session.cell.clone();
        let held = cell
            .data
            .borrow_mut()
            .pause_holds(crate::util::now_ms(), may_write)
            .is_some();
        if !held {
            return;
        }
        self.flush().await;
        if self.master.is_some() {
            // Replies to the master are never sent.
            self.out.clear();
        }
        if !self.out.is_empty() {
            crate::persistence::aof::wait_durable().await;
            let n = self.out.len();
            if self.stream.write_all(&self.out).await.is_err() {
                self.session.close_after_reply = true;
                return;
            }
            cell.data.borrow_mut().stats.net_output_bytes += n as u64;
            self.out.clear();
            self.sent_early += n;
        }
        let shared = self.session.shared.clone();
        shared.paused.set(true);
        let gone = || shared.killed.get();
        let wait = crate::shard::pause::wait_while_paused(&cell, may_write, gone);
        let ((), closed) = watch_socket(&mut self.stream, &mut self.stash, wait, || {
            shared.killed.set(true)
        })
        .await;
        shared.paused.set(false);
        self.mark = None;
        if closed {
            self.session.close_after_reply = true;
        }
    }

    /// Whether this connection's shard is over its maxmemory share with nothing left
    /// to evict (for commands checked at home: MULTI queueing, EXEC, coordinators).
    pub(super) fn home_out_of_memory(&self) -> bool {
        if self.session.exec_owner.is_some() {
            return false;
        }
        let cell = &self.session.cell;
        let mut d = cell.data.borrow_mut();
        d.mem.limit != 0 && d.oom_refuses(true, cell.locks.borrow().is_idle())
    }
}
