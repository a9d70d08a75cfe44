/// jemalloc rather than the system allocator: per-arena statistics and `epoch`-fresh
/// totals (INFO memory, maxmemory), MEMORY PURGE of dirty pages, fragmentation figures
/// (allocator_active/resident), and size classes that fragment less than glibc under
/// millions of small keys and values — what Redis ships with too.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read when it initialises (the `malloc_conf` symbol, which the
/// prefixed build names `_rjem_malloc_conf`; `_RJEM_MALLOC_CONF` in the environment
/// still overrides it). Without a background thread jemalloc returns freed pages to
/// the OS only while the process allocates, so an idle server kept the memory of
/// 10,000 closed connections until MEMORY PURGE; Redis runs jemalloc with background
/// threads too (`jemalloc-bg-thread yes`). The decay times are how long unused dirty
/// pages stay before they are purged: short enough that memory comes back within
/// seconds of a burst, long enough that a busy server reuses them (measured in
/// benches/RESULTS.md: no throughput change).
#[export_name = "_rjem_malloc_conf"]
pub static MALLOC_CONF: Option<&'static u8> =
    Some(&b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0"[0]);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(tessera::persistence::writer::CHILD_FLAG) {
        // The process a BGSAVE spawns to write its file (persistence/writer.rs).
        std::process::exit(tessera::persistence::writer::child_main(&args[1..]));
    }
    tessera::config::set_user_check(tessera::acl::check_user_directive);
    let config = match tessera::config::Config::load(args.into_iter()) {
        Ok(c) => c,
        Err(e) => {
            // redis-server starts its fatal config report on a fresh line.
            if e.starts_with("*** FATAL") {
                eprintln!("\n{e}");
            } else {
                eprintln!("{e}");
            }
            std::process::exit(1);
        }
    };
    tessera::server::log::init(&config);
    std::process::exit(tessera::server::run(config));
}
