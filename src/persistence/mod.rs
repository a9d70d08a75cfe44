//! Persistence, as Redis 7.0 has it (rdb.c's saving and loading, the parts of server.c
//! that schedule them): what the server writes to `dir` and reads back at start. The
//! RDB format itself is `storage::rdb`'s; this module decides when files are written
//! and read, and keeps what INFO persistence, LASTSAVE and the log say about it.
//!
//! * `mod.rs` (here): the process-wide bookkeeping (last save, load counters, the
//!   loading flag the gate checks) and INFO's persistence section;
//! * `save.rs`: writing `dir`/`dbfilename` (SAVE, and the saves on shutdown);
//! * `bgsave.rs`: BGSAVE without fork — the cut, each shard's walk, the done handler,
//!   the save points; `writer.rs`: the thread and child process that write its file;
//! * `load.rs`: loading it at start, every shard its own slots, in parallel.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub mod aof;
pub mod aof_base;
pub mod aof_load;
pub mod aof_reader;
pub mod bgsave;
pub mod load;
pub mod manifest;
pub mod rewrite;
pub mod save;
pub mod writer;

/// When the last successful save finished (unix seconds; 0: none yet, so the server's
/// start counts, as Redis's lastsave starts there) and how many were tried (SAVE and
/// BGSAVE, Redis's stat_rdb_saves).
pub static LAST_SAVE_UNIX: AtomicU64 = AtomicU64::new(0);
pub static SAVES: AtomicU64 = AtomicU64::new(0);

/// A save succeeded: each shard's change counter drops by what it was at the save's
/// snapshot (`dirty_at_snapshot[shard]`; writes since still count) and LASTSAVE moves.
pub(crate) async fn saved(
    cell: &std::rc::Rc<crate::shard::ShardCell>,
    dirty_at_snapshot: Vec<u64>,
) {
    let dirty = std::sync::Arc::new(dirty_at_snapshot);
    cell.call_all(move |c| {
        let mut d = c.data.borrow_mut();
        let saved = dirty.get(c.id).copied().unwrap_or(0);
        d.dirty = d.dirty.saturating_sub(saved);
    })
    .await;
    LAST_SAVE_UNIX.store(crate::util::now_ms() / 1000, Ordering::Relaxed);
}

/// LASTSAVE's and INFO's rdb_last_save_time: the last save, or the server's start.
pub fn last_save_unix(started_unix_ms: u64) -> u64 {
    match LAST_SAVE_UNIX.load(Ordering::Relaxed) {
        0 => started_unix_ms / 1000,
        t => t,
    }
}

/// The dataset is being loaded: commands without the `loading` flag are refused.
static LOADING: AtomicBool = AtomicBool::new(false);

/// Whether the server is loading its dataset (Redis's server.loading).
#[inline]
pub fn loading() -> bool {
    LOADING.load(Ordering::Relaxed)
}

pub fn set_loading(on: bool) {
    LOADING.store(on, Ordering::Relaxed);
    crate::storage::entry::set_dataset_loading(on);
}

/// A replica's swapdb load from a master of the same history (Redis's
/// async_loading): the old dataset is served meanwhile, only the commands flagged
/// `no_async_loading` are refused with -LOADING.
static ASYNC_LOADING: AtomicBool = AtomicBool::new(false);

#[inline]
pub fn async_loading() -> bool {
    ASYNC_LOADING.load(Ordering::Relaxed)
}

pub fn set_async_loading(on: bool) {
    ASYNC_LOADING.store(on, Ordering::Relaxed);
}

/// Redis's reply to a command refused while the dataset loads.
pub const LOADING_ERR: &str = "LOADING Redis is loading the dataset in memory";

/// INFO persistence. `dirty` is the change counter summed over the shards.
pub fn info_section(started_unix_ms: u64, dirty: u64, out: &mut String) {
    let last = last_save_unix(started_unix_ms);
    let saves = SAVES.load(Ordering::Relaxed);
    let _ = write!(out, "# Persistence\r\nloading:{}\r\n", loading() as u8);
    load::info_loading_fields(out);
    let _ = write!(out, "async_loading:{}\r\n", async_loading() as u8);
    bgsave::info_fields(out, dirty, last, saves);
    let _ = write!(
        out,
        "rdb_last_load_keys_expired:{}\r\nrdb_last_load_keys_loaded:{}\r\n",
        load::LAST_LOAD_KEYS_EXPIRED.load(Ordering::Relaxed),
        load::LAST_LOAD_KEYS_LOADED.load(Ordering::Relaxed),
    );
    aof::info_fields(out);
}
