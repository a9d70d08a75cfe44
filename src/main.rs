use tracing_subscriber::EnvFilter;

/// jemalloc rather than the system allocator: per-arena statistics and `epoch`-fresh
/// totals (INFO memory, maxmemory), MEMORY PURGE of dirty pages, fragmentation figures
/// (allocator_active/resident), and size classes that fragment less than glibc under
/// millions of small keys and values — what Redis ships with too.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let config = match tessera::config::Config::load(std::env::args().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let level = match config.loglevel().as_str() {
        "debug" => "debug",
        "verbose" => "info",
        "notice" => "info",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    std::process::exit(tessera::server::run(config));
}
