//! CONFIG GET / SET / RESETSTAT / HELP. Every shard keeps its own copy of the
//! configuration (no shared lock on the hot path): CONFIG SET validates and applies at
//! home, then broadcasts the same pairs to every other shard.

use std::future::Future;
use std::pin::Pin;

use super::keys::reply_help;
use super::strings::cmd;
use super::table::{flags::*, CommandSpec, KeySpec, Kind};
use super::GlobalCtx;

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

pub static COMMANDS: &[CommandSpec] = &[CommandSpec {
    group: "server",
    acl: &[],
    ..cmd!(
        "config",
        -2,
        ADMIN | NOSCRIPT | LOADING | STALE,
        KeySpec::None,
        Kind::Global(config),
        "2.0.0",
        "A container for server configuration commands"
    )
}];

const CONFIG_HELP: &[&str] = &[
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern>",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value>",
    "    Set the configuration <directive> to <value>.",
    "RESETSTAT",
    "    Reset statistics reported by the INFO command.",
    "REWRITE",
    "    Rewrite the configuration file.",
    "HELP",
    "    Prints this help.",
];

/// Parameters Redis refuses to change while a dataset loads (DENY_LOADING_CONFIG):
/// the load reads or writes what they name.
const DENY_WHILE_LOADING: &[&str] = &["appendonly", "repl-diskless-load", "dir"];

fn denied_while_loading(pairs: &[(Vec<u8>, Vec<u8>)]) -> bool {
    let loading = crate::persistence::loading() || crate::persistence::async_loading();
    loading
        && pairs.iter().any(|(name, _)| {
            DENY_WHILE_LOADING
                .iter()
                .any(|d| d.as_bytes().eq_ignore_ascii_case(name))
        })
}

fn config<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let sub = String::from_utf8_lossy(&g.args[1]).to_ascii_lowercase();
        let argc = g.args.len();
        match sub.as_str() {
            "get" if argc >= 3 => {
                let pairs = {
                    let d = g.session.cell.data.borrow();
                    let patterns: Vec<&[u8]> = g.args[2..].iter().map(|a| a.as_slice()).collect();
                    d.config.get_many(&patterns)
                };
                let mut w = g.w();
                w.map_len(pairs.len());
                for (k, v) in pairs {
                    w.bulk(k.as_bytes());
                    w.bulk(v.as_bytes());
                }
            }
            "set" if argc >= 4 && argc.is_multiple_of(2) => {
                let pairs: Vec<(Vec<u8>, Vec<u8>)> = g.args[2..]
                    .chunks(2)
                    .map(|c| (c[0].clone(), c[1].clone()))
                    .collect();
                if denied_while_loading(&pairs) {
                    return g.w().error(crate::persistence::LOADING_ERR);
                }
                // What a failure past the checks restores (Redis's restoreBackupConfig).
                let backup = g.session.cell.data.borrow().config.clone();
                let result = {
                    let mut d = g.session.cell.data.borrow_mut();
                    let refs: Vec<(&[u8], &[u8])> = pairs
                        .iter()
                        .map(|(k, v)| (k.as_slice(), v.as_slice()))
                        .collect();
                    let before = d.config.clone();
                    // `enable-protected-configs local` lets local clients set
                    // protected parameters (Redis's islocalClient).
                    d.config
                        .set_many_as(&refs, g.session.shared.is_local())
                        .and_then(|()| apply_tls(&mut d.config, before.clone(), &pairs))
                        .and_then(|()| {
                            move_listeners(&g.session.cell, &mut d.config, before, &pairs)
                        })
                };
                let moves = match result {
                    Ok(moves) => moves,
                    Err(e) => return g.w().error(&e),
                };
                let names: Vec<&[u8]> = pairs.iter().map(|(k, _)| k.as_slice()).collect();
                let applied = {
                    let mut d = g.session.cell.data.borrow_mut();
                    d.refresh_config();
                    crate::pubsub::sync_config(&d.config);
                    crate::server::config_changed(&d.config, &names)
                };
                if let Err(e) = applied {
                    undo_config_set(&g.session.cell, backup, &names);
                    return g.w().error(&format!("ERR CONFIG SET failed - {e}"));
                }
                let me = g.session.cell.id;
                // The other shards take the settings as set here: checked once (a
                // second check could not pass: the new port is ours by now).
                let settled = g.session.cell.data.borrow().config.clone();
                g.session
                    .cell
                    .call_all(move |c| {
                        if c.id != me {
                            let mut d = c.data.borrow_mut();
                            d.config = settled.clone();
                            d.refresh_config();
                            drop(d);
                            // Bound at home, so binding here fails only if the
                            // host changed meanwhile (the reason is logged).
                            let _ = crate::server::listeners::apply_here(c, &moves);
                        }
                    })
                    .await;
                // A new maxmemory is judged against the allocator's figure of now.
                crate::storage::memory::refresh_overhead();
                crate::persistence::rewrite::config_changed(&g.session.cell.data.borrow().config);
                let in_exec = g.session.exec_owner.is_some();
                if let Err(e) = apply_appendonly(&g.session.cell, in_exec).await {
                    return g.w().error(&e);
                }
                g.w().ok();
            }
            "resetstat" if argc == 2 => {
                g.session
                    .cell
                    .call_all(|c| {
                        let mut d = c.data.borrow_mut();
                        d.stats.reset();
                        d.mem.reset_stats();
                        d.observe.reset_histograms();
                        // INFO's expired_keys and expired_subkeys (Redis's
                        // stat_expiredkeys, stat_expired_subkeys) are kept per database.
                        for db in d.dbs.iter_mut() {
                            db.expired_count = 0;
                            db.expired_fields_count = 0;
                        }
                    })
                    .await;
                crate::replication::reset_stats();
                g.w().ok();
            }
            "rewrite" if argc == 2 => {
                let result = g
                    .session
                    .cell
                    .data
                    .borrow()
                    .config
                    .rewrite(&crate::acl::user_lines());
                match result {
                    Ok(()) => {
                        tracing::info!("CONFIG REWRITE executed with success.");
                        g.w().ok()
                    }
                    Err(e) => {
                        tracing::warn!("CONFIG REWRITE failed: {e}");
                        g.w().error(&format!("ERR {e}"))
                    }
                }
            }
            "help" if argc == 2 => reply_help(&mut g.w(), CONFIG_HELP),
            "get" | "set" | "resetstat" | "rewrite" | "help" => g.w().error(&format!(
                "ERR wrong number of arguments for 'config|{sub}' command"
            )),
            _ => g.unknown_subcommand("CONFIG"),
        }
    })
}

/// CONFIG SET of a `tls-*` setting rebuilds the TLS contexts (Redis's applyTlsCfg);
/// when that fails the settings go back to `before`, the running contexts stay, and
/// the reason goes to the log.
/// Puts every parameter of a CONFIG SET that failed to apply back as it was on this
/// shard (the others never saw the new values), with what was applied from them: the
/// process-wide settings and any listener moved.
fn undo_config_set(
    cell: &std::rc::Rc<crate::shard::ShardCell>,
    backup: crate::config::Config,
    names: &[&[u8]],
) {
    use crate::server::listeners;
    let mut d = cell.data.borrow_mut();
    let moves_back = listeners::moves(&d.config, &backup);
    d.config = backup;
    d.refresh_config();
    crate::pubsub::sync_config(&d.config);
    // The old values applied before, so they apply again.
    let _ = crate::server::config_changed(&d.config, names);
    drop(d);
    if let Err(e) = moves_back.and_then(|m| listeners::apply_here(cell, &m)) {
        tracing::warn!("CONFIG SET failed and its listeners could not be put back: {e}");
    }
}

fn apply_tls(
    config: &mut crate::config::Config,
    before: crate::config::Config,
    pairs: &[(Vec<u8>, Vec<u8>)],
) -> Result<(), String> {
    let Some((name, _)) = pairs
        .iter()
        .find(|(k, _)| k.len() > 4 && k[..4].eq_ignore_ascii_case(b"tls-"))
    else {
        return Ok(());
    };
    crate::tls::configure(config).map_err(|e| {
        tracing::warn!("{e}");
        *config = before;
        format!(
            "ERR CONFIG SET failed (possibly related to argument '{}') - Unable to update TLS configuration. Check server logs.",
            String::from_utf8_lossy(name)
        )
    })
}

/// CONFIG SET port / tls-port / bind: this shard's listeners move first (Redis's
/// changeListenPort / changeBindAddr, with their errors); on failure the settings
/// go back and nothing moved. The moves the other shards then make.
fn move_listeners(
    cell: &std::rc::Rc<crate::shard::ShardCell>,
    config: &mut crate::config::Config,
    before: crate::config::Config,
    pairs: &[(Vec<u8>, Vec<u8>)],
) -> Result<Vec<crate::server::listeners::Move>, String> {
    use crate::server::listeners;
    let failed = |config: &mut crate::config::Config, before, e: String| {
        *config = before;
        let name = pairs
            .iter()
            .map(|(k, _)| String::from_utf8_lossy(k).to_ascii_lowercase())
            .find(|k| k == "port" || k == "tls-port" || k == "bind")
            .unwrap_or_default();
        format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {e}")
    };
    let moves = match listeners::moves(&before, config) {
        Ok(moves) => moves,
        Err(e) => return Err(failed(config, before, e)),
    };
    if let Err(e) = listeners::apply_here(cell, &moves) {
        return Err(failed(config, before, e));
    }
    Ok(moves)
}

/// CONFIG SET appendonly: the AOF turned on (a rewrite first, as Redis's
/// startAppendOnly) or off when the setting and the state differ. On failure the
/// setting goes back to `no`, and the reply is Redis's.
async fn apply_appendonly(
    cell: &std::rc::Rc<crate::shard::ShardCell>,
    in_exec: bool,
) -> Result<(), String> {
    use crate::persistence::rewrite;
    let wanted = cell.data.borrow().config.appendonly();
    if wanted == rewrite::wanted() {
        return Ok(());
    }
    if !wanted {
        let config = cell.data.borrow().config.clone();
        rewrite::turn_off_at_run_time(&config);
        return Ok(());
    }
    if in_exec {
        // The rewrite's cut needs every shard, which this EXEC holds: it starts
        // once the transaction is over (Redis's startAppendOnly inside EXEC).
        rewrite::schedule_turn_on();
        return Ok(());
    }
    let Err(e) = rewrite::turn_on_at_run_time(cell).await else {
        return Ok(());
    };
    cell.call_all(|c| {
        let mut d = c.data.borrow_mut();
        let _ = d
            .config
            .set_many(&[(b"appendonly".as_slice(), b"no".as_slice())]);
        d.refresh_config();
    })
    .await;
    Err(format!(
        "ERR CONFIG SET failed (possibly related to argument 'appendonly') - {e}"
    ))
}
