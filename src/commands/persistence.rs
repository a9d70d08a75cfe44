//! Persistence commands (Redis's rdb.c and aof.c commands): SAVE, BGSAVE, LASTSAVE,
//! BGREWRITEAOF. What they start lives in `crate::persistence`.

use super::replication::rcmd;
use super::strings::cmd;
use super::table::{flags::*, CommandSpec, KeySpec, Kind};
use super::{ClientCtx, GlobalCtx, SYNTAX_ERR};
use crate::persistence::{bgsave, rewrite};

type Fut<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>;

#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    rcmd!("save", 1, ADMIN | NOSCRIPT | NO_MULTI | NO_ASYNC_LOADING, Kind::Global(save), "1.0.0", "Synchronously save the dataset to disk"),
    rcmd!("bgsave", -1, ADMIN | NOSCRIPT | NO_ASYNC_LOADING, Kind::Global(bgsave_command), "1.0.0", "Asynchronously save the dataset to disk"),
    rcmd!("bgrewriteaof", 1, ADMIN | NOSCRIPT | NO_ASYNC_LOADING, Kind::Global(bgrewriteaof), "1.0.0", "Asynchronously rewrite the append-only file"),
    CommandSpec { acl: &["@admin", "@dangerous"], ..rcmd!("lastsave", 1, LOADING | STALE | FAST, Kind::Client(lastsave), "1.0.0", "Get the UNIX time stamp of the last successful save to disk") },
];

/// Redis's reply when a save is asked for while a background one runs.
const IN_PROGRESS: &str = "ERR Background save already in progress";

/// LASTSAVE: when the last save succeeded (the server's start before the first).
fn lastsave(ctx: &mut ClientCtx) {
    let t = crate::persistence::last_save_unix(ctx.session.cell.info.started_unix_ms);
    ctx.out.integer(t as i64);
}

/// SAVE: the dataset written to `dir`/`dbfilename` now (`persistence::save`).
fn save<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        if bgsave::in_progress() {
            return g.w().error(IN_PROGRESS);
        }
        let cell = g.session.cell.clone();
        match crate::persistence::save::save(&cell).await {
            Ok(()) => g.w().ok(),
            Err(_) => g.w().error("ERR"),
        }
    })
}

/// BGSAVE [SCHEDULE]: a background save (`persistence::bgsave`). Inside EXEC, or with
/// SCHEDULE while one runs, it is scheduled for when none does, as Redis does.
fn bgsave_command<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        let schedule = match g.args.len() {
            1 => false,
            2 if g.args[1].eq_ignore_ascii_case(b"schedule") => true,
            _ => return g.w().error(SYNTAX_ERR),
        };
        if bgsave::in_progress() {
            return g.w().error(IN_PROGRESS);
        }
        if bgsave::busy() || g.session.exec_owner.is_some() {
            if !schedule && g.session.exec_owner.is_none() {
                return g.w().error("ERR Another child process is active (AOF?): can't BGSAVE right now. Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible.");
            }
            bgsave::schedule();
            return g.w().simple("Background saving scheduled");
        }
        let cell = g.session.cell.clone();
        match bgsave::start(&cell).await {
            Ok(()) => g.w().simple("Background saving started"),
            Err(bgsave::StartError::InProgress) => g.w().error(IN_PROGRESS),
            Err(bgsave::StartError::Spawn) => g.w().error("ERR"),
        }
    })
}

/// BGREWRITEAOF: a new base for the AOF from a snapshot, without fork
/// (`persistence::rewrite`); scheduled while another background job runs or inside
/// EXEC, as Redis does.
fn bgrewriteaof<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(async move {
        if rewrite::in_progress() {
            return g
                .w()
                .error("ERR Background append only file rewriting already in progress");
        }
        if bgsave::busy() || g.session.exec_owner.is_some() {
            rewrite::schedule();
            return g
                .w()
                .simple("Background append only file rewriting scheduled");
        }
        let cell = g.session.cell.clone();
        match rewrite::start(&cell).await {
            Ok(()) => g
                .w()
                .simple("Background append only file rewriting started"),
            Err(rewrite::StartError::Busy) => {
                rewrite::schedule();
                g.w()
                    .simple("Background append only file rewriting scheduled")
            }
            Err(rewrite::StartError::Failed) => g.w().error(
                "ERR Can't execute an AOF background rewriting. Please check the server logs for more information.",
            ),
        }
    })
}
