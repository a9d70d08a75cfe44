//! The command line: redis-server's argv rules (config file, `-` for stdin,
//! `--name value...` options turned into config lines) and clap's typed view
//! of the documented flags.

use std::io::{self, Read};
use std::path::PathBuf;

use clap::{ArgAction, CommandFactory, Parser};

use super::file::read_config_source;
use super::*;
use crate::util::cstr::{repr, split_args_lossy};
use crate::util::io_error_text;

impl Config {
    /// Startup entry point: `cli_args` is argv without argv[0].  Loads the
    /// config file named by the first positional argument (if any), stdin
    /// when an argument is `-`, then the command-line options.  The error is
    /// the complete message for stderr (the caller exits with status 1).
    /// `--help`/`-h` and `--version`/`-v` print and exit the process, like
    /// redis-server and clap-based tools do.
    pub fn load(cli_args: impl Iterator<Item = String>) -> Result<Config, String> {
        let args: Vec<String> = cli_args.collect();
        exit_on_help_or_version(&args);
        // Values are judged by the config loader alone, so a bad one gets redis-server's
        // exact error text (clap's view is for --help and would word it its own way).
        let parsed = split_command_line(&args);
        let mut config = Config::new();
        let mut text = String::new();
        if let Some(path) = parsed.config_file.as_deref().map(PathBuf::from) {
            text.push_str(&read_config_source(&path.to_string_lossy())?);
            config.config_file = Some(std::path::absolute(&path).unwrap_or(path));
        }
        if parsed.from_stdin {
            let mut stdin = String::new();
            io::stdin()
                .read_to_string(&mut stdin)
                .map_err(|e| format!("Can't read config from stdin: {}", io_error_text(&e)))?;
            text.push_str(&stdin);
        }
        text.push('\n');
        text.push_str(&parsed.options);
        config.load_str(&text)?;
        config.check_logfile()?;
        config.check_cluster_replicaof()?;
        Ok(config)
    }
}

/// The options Tessera documents on its command line.  Any other
/// `--directive value...` is accepted too and applied as a config line, as
/// redis-server does; `Config` (not this struct) is the source of truth.
#[derive(Parser, Debug, Clone, PartialEq, Eq)]
#[command(
    name = "tessera",
    version,
    about = "Redis-compatible, shared-nothing, thread-per-core in-memory data server",
    after_help = "Any redis.conf directive may also be given as --<directive> <value...>, \
                  e.g. --save \"\" --appendonly no.",
    args_override_self = true
)]
pub struct Cli {
    /// Path to a redis.conf-style configuration file.
    pub config_file: Option<PathBuf>,
    /// TCP port to listen on.
    #[arg(long, default_value_t = 6379)]
    pub port: u16,
    /// Addresses to listen on (several may follow one --bind).
    #[arg(
        long,
        num_args = 1..,
        allow_hyphen_values = true,
        action = ArgAction::Set,
        default_values = ["*", "-::*"]
    )]
    pub bind: Vec<String>,
    /// Number of shard threads (default: one per CPU).
    #[arg(long)]
    pub threads: Option<usize>,
    /// CPUs to pin shard threads to, e.g. 0-3,8.
    #[arg(long, value_parser = cpu_list_arg)]
    pub cpus: Option<String>,
    /// Number of logical databases.
    #[arg(long, default_value_t = 16)]
    pub databases: usize,
    /// Password required by AUTH.
    #[arg(long)]
    pub requirepass: Option<String>,
    /// Maximum number of connected clients.
    #[arg(long, default_value_t = 10_000)]
    pub maxclients: u32,
    /// Log verbosity.
    #[arg(long, value_enum, ignore_case = true, default_value_t = LogLevel::Notice)]
    pub loglevel: LogLevel,
}

fn cpu_list_arg(s: &str) -> Result<String, String> {
    if !s.trim().is_empty() {
        parse_cpu_list(s)?;
    }
    Ok(s.to_string())
}

/// The command line, split the way redis-server splits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedArgs {
    /// Typed view of the documented flags (validated by clap).
    pub cli: Cli,
    /// An argument was `-`: read more config from stdin.
    pub config_from_stdin: bool,
    /// Every `--name value...` option rendered as config lines, to be
    /// appended after the config file.
    pub options: String,
}

/// Flags clap knows, with whether they take exactly one value.
const CLAP_SINGLE: &[&str] = &[
    "port",
    "threads",
    "cpus",
    "databases",
    "requirepass",
    "maxclients",
    "loglevel",
];

/// Splits argv (without argv[0]) into the config file, stdin marker and
/// config-line options exactly like redis-server's `main`, and validates the
/// documented flags with clap.
pub fn parse_args(args: &[String]) -> Result<ParsedArgs, String> {
    let split = split_command_line(args);
    let mut cli = clap_view(&split.groups)?;
    cli.config_file = split.config_file.map(PathBuf::from);
    Ok(ParsedArgs {
        cli,
        config_from_stdin: split.from_stdin,
        options: split.options,
    })
}

struct CommandLine {
    config_file: Option<String>,
    from_stdin: bool,
    options: String,
    /// `[name, values...]` per option, for clap.
    groups: Vec<Vec<String>>,
}

fn split_command_line(args: &[String]) -> CommandLine {
    let mut out = CommandLine {
        config_file: None,
        from_stdin: false,
        options: String::new(),
        groups: Vec::new(),
    };
    let mut j = 0;
    if let Some(first) = args.first() {
        if !first.starts_with('-') {
            out.config_file = Some(first.clone());
            j = 1;
        }
    }
    // After a bare `--name`, the next argument is its value even if it
    // starts with `--` (Redis 7.0.1+), so `--requirepass --x` works.
    let mut expecting_option = true;
    let last = args.len().saturating_sub(1);
    while let Some(arg) = args.get(j) {
        if arg == "-" && (j == 0 || j == last) {
            out.from_stdin = true;
        } else if expecting_option && arg.starts_with("--") {
            expecting_option = start_option(&mut out, args, j);
        } else {
            out.options.push_str(&repr(arg.as_bytes()));
            out.options.push(' ');
            if let Some(group) = out.groups.last_mut() {
                group.push(arg.clone());
            }
            expecting_option = true;
        }
        j += 1;
    }
    out
}

/// Starts a new option line for `args[j]` (which begins with `--`); returns
/// whether the following argument may start another option.
fn start_option(out: &mut CommandLine, args: &[String], j: usize) -> bool {
    let arg = &args[j];
    if !out.options.is_empty() {
        out.options.push('\n');
    }
    out.options.push_str(&arg[2..]);
    out.options.push(' ');
    let mut tokens = split_args_lossy(arg).unwrap_or_default();
    if let Some(first) = tokens.first_mut() {
        *first = first.trim_start_matches('-').to_string();
    }
    let bare_name = tokens.len() == 1;
    out.groups.push(tokens);
    if !bare_name {
        // `"--port 6380"` in one argument already carries its value.
        return true;
    }
    if !arg.eq_ignore_ascii_case("--save") {
        return false;
    }
    // `--save` followed by another option or by nothing means `save ""`,
    // which pre-7.0 scripts generate from an empty list.
    let next_is_option = args.get(j + 1).is_some_and(|a| a.starts_with("--"));
    if next_is_option || j + 1 == args.len() {
        out.options.push_str("\"\"");
        if let Some(group) = out.groups.last_mut() {
            group.push(String::new());
        }
    }
    next_is_option
}

/// Feeds the documented flags to clap for validation and the typed view.
/// Groups clap cannot represent (wrong value count) are left to the config
/// loader, which reports them Redis-style.
fn clap_view(groups: &[Vec<String>]) -> Result<Cli, String> {
    let mut argv = vec!["tessera".to_string()];
    let mut bind_args = Vec::new();
    for group in groups {
        let Some((name, values)) = group.split_first() else {
            continue;
        };
        let name = name.to_ascii_lowercase();
        match values {
            [value] if CLAP_SINGLE.contains(&name.as_str()) => {
                // `--name=value` keeps values that start with `-` intact.
                argv.push(format!("--{name}={value}"));
            }
            [_, ..] if name == "bind" => {
                // One argument holding several addresses is split, exactly as
                // the config loader does; the last --bind wins.
                let addresses = match values {
                    [one] if !one.is_empty() => split_args_lossy(one).unwrap_or_default(),
                    _ => values.to_vec(),
                };
                if !addresses.is_empty() {
                    bind_args = std::iter::once("--bind".to_string())
                        .chain(addresses)
                        .collect();
                }
            }
            _ => {}
        }
    }
    // Bind goes last so its open-ended value list cannot swallow a flag.
    argv.extend(bind_args);
    Cli::try_parse_from(argv).map_err(|e| e.to_string())
}

/// redis-server answers `-v`/`--version` and `-h`/`--help` (as the first
/// argument) by printing and exiting before anything else happens.
fn exit_on_help_or_version(args: &[String]) {
    let Some(first) = args.first() else {
        return;
    };
    match first.as_str() {
        "-h" | "--help" => {
            let _ = Cli::command().print_long_help();
            std::process::exit(0);
        }
        "-v" | "-V" | "--version" => {
            print!("{}", Cli::command().render_version());
            std::process::exit(0);
        }
        _ => {}
    }
}
