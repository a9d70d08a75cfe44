//! Users and permissions, as Redis 7.0's ACL (acl.c).
//!
//! The registry of users is process-wide and changes rarely (ACL SETUSER, DELUSER,
//! LOAD, CONFIG SET requirepass), so it is one mutex that command execution never
//! takes: each connection holds an `Arc<User>` snapshot and the generation it was
//! taken at, and looks the user up again only when the generation moved — one
//! relaxed load per command. A user who may run everything (the default user, as
//! shipped) skips the permission check altogether.
//!
//! - `user.rs`: a user, its selectors, the rules and their description;
//! - `categories.rs`: command ids and categories from the command table;
//! - `check.rs`: whether a user may run a command with these keys and channels;
//! - `log.rs`: ACL LOG;
//! - here: the registry, authentication, the `user` directives and the ACL file.

pub mod categories;
pub mod check;
pub mod log;
pub mod user;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub use check::{check, Denial};
pub use user::{User, READ, READ_WRITE, WRITE};

struct Registry {
    /// By name, in byte order (ACL LIST and USERS list them so, as Redis's rax).
    users: BTreeMap<Vec<u8>, Arc<User>>,
    next_uid: u64,
    /// `user` directives of the config file, applied at start.
    configured: Vec<Vec<Vec<u8>>>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);
/// Moves whenever a user changes: connections then refresh their snapshot.
static GENERATION: AtomicU64 = AtomicU64::new(1);
/// `acl-pubsub-default allchannels`.
static PUBSUB_ALL: AtomicBool = AtomicBool::new(false);

const DEFAULT: &[u8] = b"default";

fn registry() -> MutexGuard<'static, Option<Registry>> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

fn with_registry<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut guard = registry();
    let reg = guard.get_or_insert_with(|| {
        let mut users = BTreeMap::new();
        users.insert(DEFAULT.to_vec(), Arc::new(default_user(1)));
        Registry {
            users,
            next_uid: 2,
            configured: Vec::new(),
        }
    });
    f(reg)
}

/// The default user as Redis creates it: `on nopass ~* &* +@all`.
fn default_user(uid: u64) -> User {
    let mut u = User::new(DEFAULT, uid, false);
    for rule in ["+@all", "~*", "&*", "on", "nopass"] {
        // These rules are valid on every user.
        let _ = u.apply(rule.as_bytes(), false);
    }
    u
}

#[inline]
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}

fn bump() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

pub fn pubsub_default_all() -> bool {
    PUBSUB_ALL.load(Ordering::Relaxed)
}

/// `acl-pubsub-default` as configured (applies to users and selectors made later).
pub fn set_pubsub_default(all: bool) {
    PUBSUB_ALL.store(all, Ordering::Relaxed);
}

/// A user by name.
pub fn get(name: &[u8]) -> Option<Arc<User>> {
    with_registry(|r| r.users.get(name).cloned())
}

/// The default user (new connections start as it).
pub fn default() -> Arc<User> {
    with_registry(|r| r.users.get(DEFAULT).cloned()).unwrap_or_else(|| Arc::new(default_user(1)))
}

/// Whether a new connection is authenticated at once: the default user is on and
/// needs no password (Redis's authRequired).
pub fn default_needs_no_auth() -> bool {
    let d = default();
    d.nopass() && d.enabled()
}

/// The user a connection runs as, refreshed after a change: None when the user is
/// gone (deleted, or replaced by ACL LOAD) — the connection must then end.
pub fn refresh(current: &User) -> Option<Arc<User>> {
    with_registry(|r| {
        r.users
            .get(&current.name)
            .filter(|u| u.uid == current.uid)
            .cloned()
    })
}

/// ACLCheckUserCredentials: the user if it exists, is on, and the password is
/// one of its own (or it needs none).
pub fn authenticate(name: &[u8], password: &[u8]) -> Option<Arc<User>> {
    let u = get(name)?;
    (u.enabled() && u.password_matches(password)).then_some(u)
}

/// ACL SETUSER (ACLStringSetUser): every rule is tried on a copy first, so a bad
/// rule changes nothing. Returns the user as it was before (None if it is new) and
/// as it is now, for the caller to disconnect Pub/Sub clients that lost channels.
pub fn set_user(name: &[u8], rules: &[Vec<u8>]) -> Result<(Option<Arc<User>>, Arc<User>), String> {
    let merged = user::merge_selector_args(rules).map_err(|j| {
        format!(
            "ERR Unmatched parenthesis in acl selector starting at '{}'.",
            String::from_utf8_lossy(&rules[j])
        )
    })?;
    let pubsub_all = pubsub_default_all();
    with_registry(|r| {
        let old = r.users.get(name).cloned();
        let mut u = match &old {
            Some(u) => (**u).clone(),
            None => User::new(name, 0, pubsub_all),
        };
        for op in &merged {
            u.apply(op, pubsub_all).map_err(|e| {
                format!(
                    "ERR Error in ACL SETUSER modifier '{}': {}",
                    String::from_utf8_lossy(op),
                    e.text()
                )
            })?;
        }
        if old.is_none() {
            u.uid = r.next_uid;
            r.next_uid += 1;
        }
        let u = Arc::new(u);
        r.users.insert(name.to_vec(), u.clone());
        bump();
        Ok((old, u))
    })
}

/// ACL DELUSER: the users removed (their connections must be closed).
pub fn delete_users(names: &[&[u8]]) -> Result<Vec<Arc<User>>, &'static str> {
    if names.contains(&DEFAULT) {
        return Err("ERR The 'default' user cannot be removed");
    }
    let removed: Vec<Arc<User>> =
        with_registry(|r| names.iter().filter_map(|n| r.users.remove(*n)).collect());
    if !removed.is_empty() {
        bump();
    }
    Ok(removed)
}

/// All users, in name order.
pub fn users() -> Vec<Arc<User>> {
    with_registry(|r| r.users.values().cloned().collect())
}

/// `requirepass` is the default user's password (ACLUpdateDefaultUserPassword).
pub fn set_default_password(password: Option<&[u8]>) {
    with_registry(|r| {
        let Some(d) = r.users.get(DEFAULT) else {
            return;
        };
        let mut u = (**d).clone();
        let _ = u.apply(b"resetpass", false);
        match password {
            Some(p) => {
                let mut op = b">".to_vec();
                op.extend_from_slice(p);
                let _ = u.apply(&op, false);
            }
            None => {
                let _ = u.apply(b"nopass", false);
            }
        }
        r.users.insert(DEFAULT.to_vec(), Arc::new(u));
    });
    bump();
}

/// Queues a `user` directive (already checked as the config was read) for
/// `load_configured_users`.
fn queue_configured_user(args: Vec<Vec<u8>>) {
    let merged = match user::merge_selector_args(&args[1..]) {
        Ok(m) => m,
        Err(_) => return,
    };
    let mut entry = vec![args[0].clone()];
    entry.extend(merged);
    with_registry(|r| r.configured.push(entry));
}

/// A `user` directive's check as the config file is read (ACLAppendUserForLoading):
/// every rule but those naming unknown commands (those fail at start). The error
/// names `argv[j]` for the j-th merged rule, as Redis 7.0 does (an index into the
/// merged rules used on the directive's words: `user`, the name, then the rules).
pub fn check_user_directive(args: &[String]) -> Result<(), String> {
    let argv: Vec<Vec<u8>> = std::iter::once("user")
        .chain(args.iter().map(String::as_str))
        .map(|s| s.as_bytes().to_vec())
        .collect();
    let word =
        |j: usize| String::from_utf8_lossy(argv.get(j).map_or(&[][..], Vec::as_slice)).into_owned();
    let merged = user::merge_selector_args(&argv[2..])
        .map_err(|j| format!("Error in user declaration '{}': Syntax error", word(j)))?;
    let mut probe = User::new(&argv[1], 0, pubsub_default_all());
    for (j, op) in merged.iter().enumerate() {
        match probe.apply(op, pubsub_default_all()) {
            Ok(()) | Err(user::RuleError::UnknownCommand) => {}
            Err(e) => {
                return Err(format!(
                    "Error in user declaration '{}': {}",
                    word(j),
                    e.text()
                ))
            }
        }
    }
    Ok(())
}

/// ACLLoadConfiguredUsers: the `user` directives become users. Err is the log line
/// of the first bad rule (the server then refuses to start).
pub fn load_configured_users() -> Result<(), String> {
    let configured = with_registry(|r| std::mem::take(&mut r.configured));
    for entry in &configured {
        let name = &entry[0];
        if user::has_spaces(name) {
            return Err("Spaces not allowed in ACL usernames".into());
        }
        let mut u = match get(name) {
            // Only the default user exists already: it is reset first.
            Some(d) => {
                let mut d = (*d).clone();
                let _ = d.apply(b"reset", pubsub_default_all());
                d
            }
            None => User::new(name, 0, pubsub_default_all()),
        };
        for op in &entry[1..] {
            if let Err(e) = u.apply(op, pubsub_default_all()) {
                return Err(format!(
                    "Error loading ACL rule '{}' for the user named '{}': {}",
                    String::from_utf8_lossy(op),
                    String::from_utf8_lossy(name),
                    e.text()
                ));
            }
        }
        if !u.enabled() {
            tracing::info!(
                "The user '{}' is disabled (there is no 'on' modifier in the user \
                 description). Make sure this is not a configuration error.",
                String::from_utf8_lossy(name)
            );
        }
        install(u);
    }
    Ok(())
}

/// Registers a user built outside the registry: a new one gets a fresh identity,
/// the default user keeps its own (its connections stay).
fn install(mut u: User) {
    with_registry(|r| {
        if u.uid == 0 {
            u.uid = r.next_uid;
            r.next_uid += 1;
        }
        r.users.insert(u.name.clone(), Arc::new(u));
    });
    bump();
}

/// ACLLoadFromFile: every line checked; on any error nothing changes and the
/// errors are returned as one line. On success every user but the default one is
/// new (their old connections must be closed); the removed users are returned.
pub fn load_file(path: &str, dir: &str) -> Result<Vec<Arc<User>>, String> {
    let text = std::fs::read(resolve(path, dir)).map_err(|e| {
        format!(
            "Error loading ACLs, opening file '{path}': {}",
            os_error_text(&e)
        )
    })?;
    let pubsub_all = pubsub_default_all();
    let mut errors = String::new();
    let mut fresh: BTreeMap<Vec<u8>, User> = BTreeMap::new();
    for (i, raw) in text.split(|&b| b == b'\n').enumerate() {
        let linenum = i + 1;
        let line = trim(raw, b" \t\r\n");
        if line.is_empty() {
            continue;
        }
        let argv: Vec<Vec<u8>> = line
            .split(|&b| b == b' ')
            .filter(|w| !w.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        if argv.is_empty() {
            continue;
        }
        if argv[0] != b"user" || argv.len() < 2 {
            errors.push_str(&format!(
                "{path}:{linenum} should start with user keyword followed by the username. "
            ));
            continue;
        }
        let name = &argv[1];
        if user::has_spaces(name) {
            errors.push_str(&format!(
                "'{path}:{linenum}: username '{}' contains invalid characters. ",
                String::from_utf8_lossy(name)
            ));
            continue;
        }
        if fresh.contains_key(name) {
            errors.push_str(&format!(
                "WARNING: Duplicate user '{}' found on line {linenum}. ",
                String::from_utf8_lossy(name)
            ));
            continue;
        }
        let mut u = User::new(name, 0, pubsub_all);
        let merged = match user::merge_selector_args(&argv[2..]) {
            Ok(m) => m,
            Err(_) => {
                errors.push_str(&format!(
                    "{path}:{linenum}: Unmatched parenthesis in selector definition."
                ));
                Vec::new()
            }
        };
        let mut syntax_error = false;
        for op in &merged {
            let op = trim(op, b"\t\r\n");
            if let Err(e) = u.apply(op, pubsub_all) {
                if e == user::RuleError::UnknownCommand {
                    errors.push_str(&format!(
                        "{path}:{linenum}: Error in applying operation '{}': {}. ",
                        String::from_utf8_lossy(op),
                        e.text()
                    ));
                } else if !syntax_error {
                    errors.push_str(&format!("{path}:{linenum}: {}. ", e.text()));
                    syntax_error = true;
                }
            }
        }
        fresh.insert(name.clone(), u);
    }
    if !errors.is_empty() {
        errors.push_str(
            "WARNING: ACL errors detected, no change to the previously active ACL rules was \
             performed",
        );
        return Err(errors);
    }
    let removed = with_registry(|r| {
        let old_default = r.users.get(DEFAULT).cloned();
        let old = std::mem::take(&mut r.users);
        let mut default = fresh.remove(DEFAULT).unwrap_or_else(|| default_user(0));
        default.uid = old_default.map_or(1, |d| d.uid);
        r.users.insert(DEFAULT.to_vec(), Arc::new(default));
        for (name, mut u) in fresh {
            u.uid = r.next_uid;
            r.next_uid += 1;
            r.users.insert(name, Arc::new(u));
        }
        old.into_iter()
            .filter(|(n, _)| n != DEFAULT)
            .map(|(_, u)| u)
            .collect()
    });
    bump();
    Ok(removed)
}

/// ACLSaveToFile: every user as a `user` line, written to a temporary file and
/// renamed over `path`. Err is the log line.
pub fn save_file(path: &str, dir: &str) -> Result<(), String> {
    let resolved = resolve(path, dir);
    let path = resolved.to_string_lossy();
    let mut text = Vec::new();
    for u in users() {
        text.extend_from_slice(b"user ");
        text.extend_from_slice(&u.name);
        text.push(b' ');
        text.extend_from_slice(&u.describe());
        text.push(b'\n');
    }
    let tmp = format!(
        "{path}.tmp-{}-{}",
        std::process::id(),
        crate::util::now_ms()
    );
    let result = std::fs::write(&tmp, &text)
        .map_err(|e| format!("Writing ACL file for ACL SAVE: {e}"))
        .and_then(|()| {
            std::fs::rename(&tmp, &resolved)
                .map_err(|e| format!("Renaming ACL file for ACL SAVE: {e}"))
        });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The ACL file's path: a relative one is relative to `dir` (Redis has chdir()ed
/// there; Tessera keeps its cwd).
fn resolve(path: &str, dir: &str) -> std::path::PathBuf {
    std::path::Path::new(dir).join(path)
}

/// strerror(3)'s text for an I/O error, as Redis prints it.
fn os_error_text(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        // SAFETY: strerror returns a static NUL-terminated string for any errno.
        Some(errno) => unsafe { std::ffi::CStr::from_ptr(libc::strerror(errno)) }
            .to_string_lossy()
            .into_owned(),
        None => e.to_string(),
    }
}

fn trim<'a>(s: &'a [u8], set: &[u8]) -> &'a [u8] {
    let start = s.iter().position(|b| !set.contains(b)).unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !set.contains(b))
        .map_or(start, |e| e + 1);
    &s[start..end.max(start)]
}

/// The `requirepass` last given to the default user (None: not yet).
static APPLIED_REQUIREPASS: Mutex<Option<String>> = Mutex::new(None);

/// Copies the ACL settings into place: `acl-pubsub-default`, `acllog-max-len`,
/// and `requirepass` as the default user's password when it changed (Redis sets it
/// only when the parameter is set, so ACL SETUSER default's password stays
/// otherwise). Called at start and after every CONFIG SET.
pub fn sync_config(config: &crate::config::Config) {
    set_pubsub_default(config.acl_pubsub_all());
    log::trim(config.acllog_max_len());
    let pass = config.requirepass().unwrap_or("").to_string();
    let mut applied = APPLIED_REQUIREPASS
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if applied.as_deref() != Some(pass.as_str()) {
        set_default_password((!pass.is_empty()).then_some(pass.as_bytes()));
        *applied = Some(pass);
    }
}

/// The users at start (ACLLoadUsersAtStartup): the `user` directives, or the ACL
/// file — not both. Err is the reason to refuse to start, as Redis logs it.
pub fn load_at_startup(config: &crate::config::Config) -> Result<(), String> {
    sync_config(config);
    if config.aclfile().is_some() && !config.acl_users().is_empty() {
        return Err(
            "Configuring Redis with users defined in redis.conf and at the same setting \
                    an ACL file path is invalid. This setup is very likely to lead to \
                    configuration errors and security holes, please define either an ACL file \
                    or declare users directly in your redis.conf, but not both."
                .into(),
        );
    }
    for u in config.acl_users() {
        let args: Vec<Vec<u8>> = u.iter().map(|a| a.as_bytes().to_vec()).collect();
        queue_configured_user(args);
    }
    load_configured_users()
        .map_err(|e| format!("{e}\nCritical error while loading ACLs. Exiting."))?;
    if let Some(path) = config.aclfile() {
        load_file(path, config.dir())
            .map_err(|e| format!("Aborting Redis startup because of ACL errors: {e}"))?;
    }
    Ok(())
}

/// Every user as a config-file `user` line (CONFIG REWRITE, ACL SAVE).
pub fn user_lines() -> Vec<String> {
    users()
        .iter()
        .map(|u| {
            let mut line = b"user ".to_vec();
            line.extend_from_slice(&u.name);
            line.push(b' ');
            line.extend_from_slice(&u.describe());
            String::from_utf8_lossy(&line).into_owned()
        })
        .collect()
}
