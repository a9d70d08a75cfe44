//! ACL LOG: denied commands and failed authentications, newest first, similar
//! entries within a minute merged into one with a count (Redis's addACLLogEntry).

use std::collections::VecDeque;
use std::sync::Mutex;

/// Where the denied command came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    Toplevel,
    Multi,
    Lua,
}

impl Context {
    fn name(self) -> &'static str {
        match self {
            Context::Toplevel => "toplevel",
            Context::Multi => "multi",
            Context::Lua => "lua",
        }
    }
}

pub struct Entry {
    pub count: u64,
    /// `command`, `key`, `channel` or `auth`.
    pub reason: &'static str,
    pub context: Context,
    pub object: Vec<u8>,
    pub username: Vec<u8>,
    pub ctime_ms: u64,
    /// CLIENT LIST's line of the client (the latest one, for a merged entry).
    pub client_info: String,
}

/// Entries within this many ms of each other may merge.
const GROUPING_MAX_DELTA_MS: u64 = 60_000;

static LOG: Mutex<VecDeque<Entry>> = Mutex::new(VecDeque::new());

fn log() -> std::sync::MutexGuard<'static, VecDeque<Entry>> {
    LOG.lock().unwrap_or_else(|e| e.into_inner())
}

/// Adds an entry, or bumps a similar one among the 10 newest (and moves it to the
/// front); the log keeps at most `max_len` entries.
pub fn add(entry: Entry, max_len: usize) {
    let mut log = log();
    let similar = log.iter().take(10).position(|e| {
        e.reason == entry.reason
            && e.context == entry.context
            && e.ctime_ms.abs_diff(entry.ctime_ms) <= GROUPING_MAX_DELTA_MS
            && e.object == entry.object
            && e.username == entry.username
    });
    if let Some(at) = similar {
        if let Some(mut e) = log.remove(at) {
            e.count += 1;
            e.ctime_ms = entry.ctime_ms;
            e.client_info = entry.client_info;
            log.push_front(e);
        }
        return;
    }
    log.push_front(entry);
    log.truncate(max_len);
}

/// An entry about the client of `session` (a script's caller for a script's
/// fake client): `username` None means the client's own user.
pub fn add_for(
    session: &crate::clients::Session,
    reason: &'static str,
    context: Context,
    object: Vec<u8>,
    username: Option<Vec<u8>>,
) {
    let now = crate::util::now_ms();
    let shared = &session.shared;
    let username = username.unwrap_or_else(|| shared.user.borrow().name.clone());
    let max_len = session.cell.data.borrow().config.acllog_max_len();
    add(
        Entry {
            count: 1,
            reason,
            context,
            object,
            username,
            ctime_ms: now,
            client_info: shared.info_line(now),
        },
        max_len,
    );
}

/// What an entry names for a denial: the command's full name, or the key or
/// channel argument at `pos` (addACLLogEntry's object).
pub fn object_of(
    denial: crate::acl::Denial,
    id: u16,
    args: &crate::commands::Args,
    pos: usize,
) -> Vec<u8> {
    match denial {
        crate::acl::Denial::Command => crate::commands::table().stat_name(id).as_bytes().to_vec(),
        _ => args.get(pos).to_vec(),
    }
}

/// Trims to a new `acllog-max-len`.
pub fn trim(max_len: usize) {
    log().truncate(max_len);
}

pub fn reset() {
    log().clear();
}

/// ACL LOG [count]'s reply: up to `count` entries, newest first.
pub fn reply(out: &mut crate::protocol::reply::ReplyWriter, count: usize, now_ms: u64) {
    let log = log();
    let n = count.min(log.len());
    out.array_len(n);
    for e in log.iter().take(n) {
        out.map_len(7);
        out.bulk(b"count");
        out.integer(e.count as i64);
        out.bulk(b"reason");
        out.bulk(e.reason.as_bytes());
        out.bulk(b"context");
        out.bulk(e.context.name().as_bytes());
        out.bulk(b"object");
        out.bulk(&e.object);
        out.bulk(b"username");
        out.bulk(&e.username);
        out.bulk(b"age-seconds");
        out.double(now_ms.saturating_sub(e.ctime_ms) as f64 / 1000.0);
        out.bulk(b"client-info");
        out.bulk(e.client_info.as_bytes());
    }
}
