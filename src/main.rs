use tracing_subscriber::EnvFilter;

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
