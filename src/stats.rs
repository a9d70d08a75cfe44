//! Per-shard counters behind INFO stats / commandstats / errorstats, merged on demand.

use hashbrown::HashMap;

#[derive(Default, Clone, Copy, Debug)]
pub struct CommandStat {
    pub calls: u64,
    /// Microseconds spent executing, over all calls.
    pub usec: u64,
    pub failed_calls: u64,
    pub rejected_calls: u64,
}

#[derive(Default, Clone, Debug)]
pub struct ShardStats {
    pub total_commands: u64,
    pub total_connections: u64,
    pub rejected_connections: u64,
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    pub net_input_bytes: u64,
    pub net_output_bytes: u64,
    pub commands: Vec<CommandStat>,
    pub errors: HashMap<String, u64>,
    pub total_error_replies: u64,
}

impl ShardStats {
    #[inline]
    pub fn record_call(&mut self, cmd: u16, failed: bool) {
        self.total_commands += 1;
        let i = cmd as usize;
        if i >= self.commands.len() {
            self.commands.resize(
                crate::commands::table().stat_count().max(i + 1),
                CommandStat::default(),
            );
        }
        self.commands[i].calls += 1;
        if failed {
            self.commands[i].failed_calls += 1;
        }
    }

    /// A call of stat id `id` (a command or subcommand) that took `usec`.
    #[inline]
    pub fn record_timed(&mut self, id: u16, failed: bool, usec: u64) {
        self.record_call(id, failed);
        self.commands[id as usize].usec += usec;
    }

    /// A command refused before it ran (unknown, arity, auth ...).
    pub fn record_rejected(&mut self, cmd: Option<u16>) {
        if let Some(c) = cmd {
            let i = c as usize;
            if i >= self.commands.len() {
                self.commands.resize(
                    crate::commands::table().stat_count().max(i + 1),
                    CommandStat::default(),
                );
            }
            self.commands[i].rejected_calls += 1;
        }
    }

    /// An error reply went out; `prefix` is its first word (ERR, WRONGTYPE ...).
    pub fn record_error(&mut self, prefix: &str) {
        self.total_error_replies += 1;
        *self.errors.entry(prefix.to_string()).or_insert(0) += 1;
    }

    pub fn merge(&mut self, other: &ShardStats) {
        self.total_commands += other.total_commands;
        self.total_connections += other.total_connections;
        self.rejected_connections += other.rejected_connections;
        self.keyspace_hits += other.keyspace_hits;
        self.keyspace_misses += other.keyspace_misses;
        self.net_input_bytes += other.net_input_bytes;
        self.net_output_bytes += other.net_output_bytes;
        self.total_error_replies += other.total_error_replies;
        if self.commands.len() < other.commands.len() {
            self.commands
                .resize(other.commands.len(), CommandStat::default());
        }
        for (a, b) in self.commands.iter_mut().zip(&other.commands) {
            a.calls += b.calls;
            a.usec += b.usec;
            a.failed_calls += b.failed_calls;
            a.rejected_calls += b.rejected_calls;
        }
        for (k, v) in &other.errors {
            *self.errors.entry(k.clone()).or_insert(0) += v;
        }
    }

    /// CONFIG RESETSTAT.
    pub fn reset(&mut self) {
        *self = ShardStats::default();
    }
}
