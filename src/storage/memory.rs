//! Memory accounting (INFO memory, MEMORY, maxmemory).
//!
//! Two figures, each where it is cheap and right:
//! * The process total comes from the allocator: jemalloc's `stats.allocated` (bytes
//!   the program holds), `stats.active`/`resident` (fragmentation). Reading it needs an
//!   `epoch` refresh, a few microseconds under jemalloc's ctl lock: fine for INFO and
//!   for each shard's cron, too slow for every command.
//! * Each shard's own share is the keyspace's exact bookkeeping: every entry records
//!   the bytes it was charged (in the entry's padding, so it costs nothing) and the
//!   `Db` keeps the sum, updated on insert/remove and re-measured after writes. Reading
//!   it is a few loads. jemalloc's per-thread counters were the other candidate, but
//!   a shard thread frees what other shards allocated (pipeline batches travel from the
//!   connection's shard to the key's owner, replies come back), so a thread's
//!   allocated-minus-freed drifts without bound and says little about its keys.
//!
//! The two meet in `overhead`: allocator total minus every shard's dataset (client
//! buffers, table slack, scripts, startup), refreshed by the shards' crons and split
//! evenly. A shard is over its limit when `dataset + overhead/N > maxmemory/N`, so the
//! shards together keep the allocator's figure under `maxmemory`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Shards the accounting arrays can describe (more are clamped into the last cell).
pub const MAX_SHARDS: usize = 1024;

static DATASET: [AtomicU64; MAX_SHARDS] = [const { AtomicU64::new(0) }; MAX_SHARDS];
static SHARDS: AtomicUsize = AtomicUsize::new(1);
static OVERHEAD_SHARE: AtomicU64 = AtomicU64::new(0);
static STARTUP: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);
/// Values handed to the lazy-free tasks and not yet freed (INFO lazyfree_pending_objects).
pub static LAZYFREE_PENDING: AtomicU64 = AtomicU64::new(0);
/// Their charged bytes: still allocated, no longer in any keyspace; kept out of the
/// overhead so a big UNLINK does not trigger evictions while it is being freed.
pub static LAZYFREE_PENDING_BYTES: AtomicU64 = AtomicU64::new(0);
/// Values freed by the lazy-free tasks since start (INFO lazyfreed_objects).
pub static LAZYFREED: AtomicU64 = AtomicU64::new(0);

/// The allocator's view of the process.
#[derive(Default, Clone, Copy, Debug)]
pub struct AllocStats {
    pub allocated: u64,
    pub active: u64,
    pub resident: u64,
    pub mapped: u64,
    pub retained: u64,
    pub metadata: u64,
    /// Freed objects the threads' caches keep for reuse (jemalloc counts them in
    /// `allocated` until a cache flushes them).
    pub tcache: u64,
}

/// Refreshes jemalloc's statistics and reads them. Zeroes when jemalloc is not the
/// process allocator (unit tests), where callers fall back to the resident set.
pub fn alloc_stats() -> AllocStats {
    use tikv_jemalloc_ctl::{epoch, stats};
    let _ = epoch::advance();
    let r = |v: tikv_jemalloc_ctl::Result<usize>| v.unwrap_or(0) as u64;
    AllocStats {
        allocated: r(stats::allocated::read()),
        active: r(stats::active::read()),
        resident: r(stats::resident::read()),
        mapped: r(stats::mapped::read()),
        retained: r(stats::retained::read()),
        metadata: r(stats::metadata::read()),
        tcache: tcache_bytes(),
    }
}

/// Bytes held in every thread's cache, all arenas merged (4096 is jemalloc's
/// MALLCTL_ARENAS_ALL). Read after an `epoch` advance.
fn tcache_bytes() -> u64 {
    // SAFETY: the name is NUL-terminated and the value a size_t, as jemalloc's
    // mallctl documents for stats.arenas.<i>.tcache_bytes.
    unsafe { tikv_jemalloc_ctl::raw::read::<usize>(b"stats.arenas.4096.tcache_bytes\0") }
        .map_or(0, |v| v as u64)
}

/// The allocator's version string, as Redis's `mem_allocator` shows it.
pub fn allocator_name() -> String {
    match tikv_jemalloc_ctl::version::read() {
        Ok(v) => format!("jemalloc-{}", v.split('-').next().unwrap_or(v)),
        Err(_) => "libc".to_string(),
    }
}

/// jemalloc's full statistics report (MEMORY MALLOC-STATS).
pub fn malloc_stats_text() -> String {
    let mut buf = Vec::new();
    let opts = tikv_jemalloc_ctl::stats_print::Options::default();
    match tikv_jemalloc_ctl::stats_print::stats_print(&mut buf, opts) {
        Ok(()) if !buf.is_empty() => String::from_utf8_lossy(&buf).into_owned(),
        _ => "Stats not supported for the current allocator".to_string(),
    }
}

/// MEMORY PURGE: returns every arena's dirty pages to the system now, by dropping
/// its decay time to zero (which purges at once) and restoring it.
pub fn purge() {
    use tikv_jemalloc_ctl::{arenas, Access, AsName};
    let n = arenas::narenas::read().unwrap_or(0);
    for i in 0..n {
        for kind in ["dirty", "muzzy"] {
            let name = format!("arena.{i}.{kind}_decay_ms\0");
            if let Ok(old) = name.as_str().name().update(0isize) {
                let _ = name.as_str().name().write(old);
            }
        }
    }
}

/// The resident set of the process, from /proc.
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// INFO's used_memory: the allocator's figure (the resident set without jemalloc).
/// Also advances the peak. Objects parked in the shard threads' caches are not in use:
/// with several threads they add up to hundreds of kilobytes that come and go between
/// two commands, and maxmemory would chase them.
///
/// The Lua VMs are left out: Redis 7.0's Lua allocates with libc's malloc, outside
/// the figure its used_memory and maxmemory share, and clients (the test suite
/// among them) set maxmemory relative to used_memory. Counting the VMs here while
/// eviction does not would put the limit one VM per shard (~65 KB each) above what
/// eviction measures against it.
pub fn used_memory() -> u64 {
    let s = alloc_stats();
    let used = if s.allocated > 0 {
        s.allocated
            .saturating_sub(s.tcache)
            .saturating_sub(crate::scripting::lua_memory())
    } else {
        rss_bytes()
    };
    PEAK.fetch_max(used, Relaxed);
    used
}

pub fn peak() -> u64 {
    PEAK.load(Relaxed)
}

/// Remembers what the server holds before any data (INFO used_memory_startup).
pub fn record_startup(shards: usize) {
    SHARDS.store(shards.clamp(1, MAX_SHARDS), Relaxed);
    STARTUP.store(used_memory(), Relaxed);
}

pub fn startup() -> u64 {
    STARTUP.load(Relaxed)
}

/// A shard publishes its dataset bytes (its cron and INFO read them).
pub fn publish_dataset(shard: usize, bytes: u64) {
    DATASET[shard.min(MAX_SHARDS - 1)].store(bytes, Relaxed);
}

/// One shard's dataset bytes, as last published.
pub fn dataset_of(shard: usize) -> u64 {
    DATASET[shard.min(MAX_SHARDS - 1)].load(Relaxed)
}

/// Every shard's dataset bytes, as last published.
pub fn dataset_total() -> u64 {
    let n = SHARDS.load(Relaxed);
    DATASET[..n].iter().map(|d| d.load(Relaxed)).sum()
}

/// Re-derives the per-shard overhead share from the allocator (a shard's cron).
pub fn refresh_overhead() -> u64 {
    let used = used_memory();
    let n = SHARDS.load(Relaxed) as u64;
    let pending = LAZYFREE_PENDING_BYTES.load(Relaxed);
    // used_memory() already leaves the Lua VMs out, as Redis does.
    let share = used.saturating_sub(dataset_total() + pending) / n.max(1);
    OVERHEAD_SHARE.store(share, Relaxed);
    used
}

/// What each shard adds to its dataset to judge itself against maxmemory/N.
#[inline]
pub fn overhead_share() -> u64 {
    OVERHEAD_SHARE.load(Relaxed)
}

/// Bytes jemalloc hands out for a request of `n` (its size classes: 8, 16, then four
/// classes per doubling), so charges match what the allocator really holds.
pub fn alloc_size(n: usize) -> usize {
    match n {
        0 => 0,
        1..=8 => 8,
        9..=128 => n.div_ceil(16) * 16,
        _ => {
            let spacing = (n.next_power_of_two() / 8).max(16);
            n.div_ceil(spacing) * spacing
        }
    }
}

/// Charges are kept in 24 bits: exact below 512 KiB, beyond that a 19-bit mantissa
/// and a shift (relative error under 2^-19). Callers add the decoded value, so the
/// per-database sum stays exactly the sum of what entries record.
pub fn encode_charge(bytes: usize) -> u32 {
    const MANT: u32 = 19;
    let b = bytes as u64;
    if b < (1 << MANT) {
        return b as u32;
    }
    let shift = (64 - b.leading_zeros()) - MANT;
    let shift = shift.min(31);
    ((shift << MANT) | (b >> shift) as u32) & 0xFF_FFFF
}

pub fn decode_charge(c: u32) -> usize {
    let c = c & 0xFF_FFFF;
    let shift = c >> 19;
    ((c & 0x7_FFFF) as usize) << shift
}

/// Redis's LFU: a logarithmic (Morris) counter, 0..=255, starting at 5 for new keys.
pub const LFU_INIT_VAL: u8 = 5;

/// LFULogIncr: the higher the counter, the less likely an access bumps it.
pub fn lfu_log_incr(counter: u8, log_factor: u64, rnd: u64) -> u8 {
    if counter == 255 {
        return 255;
    }
    let r = (rnd >> 11) as f64 / (1u64 << 53) as f64;
    let base = counter.saturating_sub(LFU_INIT_VAL) as f64;
    let p = 1.0 / (base * log_factor as f64 + 1.0);
    if r < p {
        counter + 1
    } else {
        counter
    }
}

/// LFUDecrAndReturn: one point off per `decay_minutes` since the last access (the
/// entry's access clock, seconds), as Redis derives it from its 16-bit minute stamp.
pub fn lfu_decayed(counter: u8, last_access_s: u32, now_s: u32, decay_minutes: u64) -> u8 {
    if decay_minutes == 0 {
        return counter;
    }
    let idle_min = (now_s.wrapping_sub(last_access_s) / 60) as u64;
    let periods = idle_min / decay_minutes;
    counter.saturating_sub(periods.min(255) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_round_trip_closely() {
        for n in [0usize, 1, 100, 524_287, 524_288, 1 << 24, 5_000_000_000] {
            let d = decode_charge(encode_charge(n));
            assert!(d <= n && n - d <= n >> 18, "{n} -> {d}");
        }
    }

    #[test]
    fn size_classes() {
        assert_eq!(alloc_size(1), 8);
        assert_eq!(alloc_size(17), 32);
        assert_eq!(alloc_size(129), 160);
        assert_eq!(alloc_size(1000), 1024);
    }

    #[test]
    fn lfu_counter_grows_logarithmically() {
        let mut c = LFU_INIT_VAL;
        let mut rng = crate::storage::Rng::new(7);
        for _ in 0..100_000 {
            c = lfu_log_incr(c, 10, rng.next_u64());
        }
        // Redis's table: 100K hits with factor 10 give about 143.
        assert!((120..=170).contains(&c), "{c}");
        assert_eq!(lfu_decayed(10, 0, 600, 1), 0);
        assert_eq!(lfu_decayed(10, 0, 120, 1), 8);
        assert_eq!(lfu_decayed(10, 0, 6000, 0), 10);
    }
}
