//! redis.conf reading: lines, directives, `include`s (with Redis 7.0's
//! wildcards) and the fatal error texts that name the offending line.

use std::fs;

use super::*;
use crate::util::cstr::split_args_lossy;
use crate::util::glob::glob_match;
use crate::util::io_error_text;

/// Nested `include` limit; Redis has none and overflows its stack on cycles.
const MAX_INCLUDE_DEPTH: usize = 16;

/// Error from one directive: plain errors get the caller's line context,
/// fatal ones (from an included file) already carry their own.
/// Checks a `user` directive's rules as it is read (Redis's ACLAppendUserForLoading):
/// the ACL registers it before the config is loaded, since the config module
/// imports nothing that knows commands.
static USER_CHECK: std::sync::OnceLock<UserCheck> = std::sync::OnceLock::new();

/// A `user` directive's words (name, rules) to its error, if any.
pub type UserCheck = fn(&[String]) -> Result<(), String>;

pub fn set_user_check(check: UserCheck) {
    let _ = USER_CHECK.set(check);
}

enum DirectiveError {
    Plain(String),
    Fatal(String),
}

impl From<String> for DirectiveError {
    fn from(e: String) -> Self {
        DirectiveError::Plain(e)
    }
}

fn fatal_at(line_number: usize, line: &str, err: &str) -> String {
    format!(
        "*** FATAL CONFIG FILE ERROR (Redis {REDIS_VERSION}) ***\n\
         Reading the configuration file, at line {line_number}\n\
         >>> '{line}'\n\
         {err}"
    )
}

pub(super) fn fatal(err: &str) -> String {
    format!("*** FATAL CONFIG FILE ERROR (Redis {REDIS_VERSION}) ***\n{err}")
}

impl Config {
    /// Applies redis.conf-formatted text (the same path as a config file;
    /// `include` paths are relative to the process cwd).  Errors are the
    /// full "FATAL CONFIG FILE ERROR" text with line number and line.
    pub fn load_str(&mut self, text: &str) -> Result<(), String> {
        self.load_text(text, 0)
    }

    fn load_text(&mut self, text: &str, depth: usize) -> Result<(), String> {
        for (i, raw) in text.split('\n').enumerate() {
            let line = raw.trim_matches([' ', '\t', '\r', '\n']);
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some(mut argv) = split_args_lossy(line) else {
                return Err(fatal_at(
                    i + 1,
                    line,
                    "Unbalanced quotes in configuration line",
                ));
            };
            if argv.is_empty() {
                continue;
            }
            let name = argv.remove(0).to_ascii_lowercase();
            match self.apply_directive_at(&name, &argv, depth) {
                Ok(()) => {}
                Err(DirectiveError::Plain(e)) => return Err(fatal_at(i + 1, line, &e)),
                Err(DirectiveError::Fatal(e)) => return Err(e),
            }
        }
        Ok(())
    }

    /// Applies one config-file directive (`name` is case-insensitive, `args`
    /// are the words after it).  File semantics apply: immutable parameters
    /// may be set, the first `save` line replaces the default and later ones
    /// append, and a multi-arg parameter given one argument has it split
    /// (`--save "900 1 300 10"`).  Errors are Redis's bare messages, e.g.
    /// "Bad directive or wrong number of arguments".
    pub fn apply_directive(&mut self, name: &str, args: &[String]) -> Result<(), String> {
        match self.apply_directive_at(name, args, 0) {
            Ok(()) => Ok(()),
            Err(DirectiveError::Plain(e) | DirectiveError::Fatal(e)) => Err(e),
        }
    }

    fn apply_directive_at(
        &mut self,
        name: &str,
        args: &[String],
        depth: usize,
    ) -> Result<(), DirectiveError> {
        if let Some((idx, _)) = lookup_entry(name.as_bytes()) {
            return self
                .apply_param_directive(idx, args)
                .map_err(DirectiveError::Plain);
        }
        let argc = args.len() + 1;
        let deprecated = DEPRECATED
            .iter()
            .any(|(n, lo, hi)| n.eq_ignore_ascii_case(name) && (*lo..=*hi).contains(&argc));
        if deprecated {
            return Ok(());
        }
        if name.eq_ignore_ascii_case("user") {
            if args.is_empty() {
                return Err("wrong number of arguments".to_string().into());
            }
            if self.acl_users.iter().any(|u| u[0] == args[0]) {
                return Err(format!(
                    "Error in user declaration '{}': Duplicate user found. A user can only be \
                     defined once in config files",
                    args[0]
                )
                .into());
            }
            if let Some(check) = USER_CHECK.get() {
                check(args)?;
            }
            // Applied at start (a rule naming an unknown command fails there).
            self.acl_users.push(args.to_vec());
            return Ok(());
        }
        if let Some(why) = directive_not_yet(name) {
            return Err(why.to_string().into());
        }
        match args {
            [path] if name.eq_ignore_ascii_case("include") => self.include(path, depth),
            _ => Err("Bad directive or wrong number of arguments"
                .to_string()
                .into()),
        }
    }

    fn apply_param_directive(&mut self, idx: usize, args: &[String]) -> Result<(), String> {
        let p = PARAMS
            .get(idx)
            .ok_or("Bad directive or wrong number of arguments")?;
        let multi = p.kind.is_multi_arg();
        if !multi && args.len() != 1 {
            return Err("wrong number of arguments".to_string());
        }
        let split;
        let args = match args {
            // Redis treats a failed re-split as "no arguments".
            [one] if multi && !one.is_empty() => {
                split = split_args_lossy(one).unwrap_or_default();
                &split[..]
            }
            _ => args,
        };
        let value = parse_value(p, args, self.values.get(idx))?;
        self.store_from_file(idx, value);
        self.version += 1;
        Ok(())
    }

    fn store_from_file(&mut self, idx: usize, value: Value) {
        if let (true, Value::Save(points)) = (idx == IDX_SAVE, &value) {
            // `save ""` clears every point, wherever it comes; other lines append.
            if self.save_loaded && !points.is_empty() {
                if let Some(Value::Save(current)) = self.values.get_mut(idx) {
                    current.extend_from_slice(points);
                }
                return;
            }
            self.save_loaded = true;
        }
        store(&mut self.values, idx, value);
    }

    fn include(&mut self, path: &str, depth: usize) -> Result<(), DirectiveError> {
        if depth >= MAX_INCLUDE_DEPTH {
            return Err(DirectiveError::Plain(format!(
                "Too many nested include directives (limit {MAX_INCLUDE_DEPTH})"
            )));
        }
        let text = read_config_source(path).map_err(DirectiveError::Fatal)?;
        self.load_text(&text, depth + 1)
            .map_err(DirectiveError::Fatal)
    }

    /// A cluster node's master is chosen by the cluster (CLUSTER REPLICATE), never
    /// by `replicaof` (loadServerConfigFromString's sanity check).
    pub(super) fn check_cluster_replicaof(&self) -> Result<(), String> {
        if self.cluster_enabled() && self.replicaof().is_some() {
            return Err(fatal("replicaof directive not allowed in cluster mode"));
        }
        Ok(())
    }

    /// Redis refuses to start when the log file cannot be opened.
    pub(super) fn check_logfile(&self) -> Result<(), String> {
        let logfile = self.logfile();
        if logfile.is_empty() {
            return Ok(());
        }
        fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(logfile)
            .map(drop)
            .map_err(|e| fatal(&format!("Can't open the log file: {}", io_error_text(&e))))
    }
}

/* ------------------------------------------------------------------------ */
/* Config file reading (with Redis 7.0's wildcard includes).                */
/* ------------------------------------------------------------------------ */

/// Reads a config file, or every file matching a wildcard in its last path
/// component (sorted, hidden files skipped, no match = nothing), as Redis
/// 7.0's `loadServerConfig` does with glob(3).
pub(super) fn read_config_source(path: &str) -> Result<String, String> {
    if !path.contains(['*', '?', '[']) {
        return read_config_file(path);
    }
    let mut text = String::new();
    for file in expand_wildcard(path)? {
        text.push_str(&read_config_file(&file)?);
    }
    Ok(text)
}

fn read_config_file(path: &str) -> Result<String, String> {
    fs::read(path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .map_err(|e| {
            format!(
                "Fatal error, can't open config file '{path}': {}",
                io_error_text(&e)
            )
        })
}

fn expand_wildcard(path: &str) -> Result<Vec<String>, String> {
    let (dir, pattern) = match path.rfind('/') {
        Some(i) => (&path[..=i], &path[i + 1..]),
        None => ("", path),
    };
    if dir.contains(['*', '?', '[']) {
        return Err(format!(
            "Fatal error, can't open config file '{path}': wildcards are only supported in the file name"
        ));
    }
    let Ok(listing) = fs::read_dir(if dir.is_empty() { "." } else { dir }) else {
        return Ok(Vec::new());
    };
    let mut names: Vec<String> = listing
        .filter_map(Result::ok)
        .filter(|e| e.file_type().map(|t| !t.is_dir()).unwrap_or(false))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.') || pattern.starts_with('.'))
        .filter(|n| glob_match(pattern.as_bytes(), n.as_bytes(), false))
        .collect();
    names.sort();
    Ok(names.into_iter().map(|n| format!("{dir}{n}")).collect())
}
