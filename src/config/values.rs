//! Values: parsing and rendering of every parameter kind (bools, integers,
//! enums, memory and percent, and the special multi-argument ones), shared by
//! the config file, the command line and CONFIG SET / GET.

use std::fs;

use super::*;
use crate::util::cstr::{memtoull, split_args_lossy, string2ll, strtoll};
use crate::util::io_error_text;

/// Redis's CONFIG_BINDADDR_MAX.
const CONFIG_BINDADDR_MAX: usize = 16;
/// Highest CPU id accepted by `--cpus`; bounds the work a CPU list can cause.
pub const MAX_CPU_ID: usize = 65_535;

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Value {
    Bool(bool),
    Int(i64),
    Mem(u64),
    Percent(u64),
    Enum(usize),
    Str(String),
    List(Vec<String>),
    Save(Vec<SavePoint>),
    Obuf([ObufLimit; 3]),
    Flags(u32),
    Floats(Vec<f64>),
    Cpus(Vec<usize>),
    Octal(i64),
}

/// Parses already-split arguments for `p`.  `current` is needed only by
/// client-output-buffer-limit, which updates just the classes it names.
pub(super) fn parse_value(
    p: &ConfigParam,
    args: &[String],
    current: Option<&Value>,
) -> Result<Value, String> {
    let value = parse_value_of_kind(p, args, current)?;
    match p.not_yet {
        Some(why) if value != default_value(p) => Err(why.to_string()),
        _ => Ok(value),
    }
}

fn parse_value_of_kind(
    p: &ConfigParam,
    args: &[String],
    current: Option<&Value>,
) -> Result<Value, String> {
    match p.kind {
        ParamKind::Bool => parse_bool(single(args)?),
        ParamKind::Int { min, max } => parse_int(single(args)?, min, max),
        ParamKind::Memory { min, max, percent } => parse_memory(single(args)?, min, max, percent),
        ParamKind::Enum(names) => parse_enum(single(args)?, names),
        ParamKind::String => Ok(Value::Str(single(args)?.to_string())),
        ParamKind::Special(kind) => parse_special(p, kind, args, current),
    }
}

fn single(args: &[String]) -> Result<&str, String> {
    match args {
        [one] => Ok(one),
        _ => Err("wrong number of arguments".to_string()),
    }
}

fn parse_bool(s: &str) -> Result<Value, String> {
    if s.eq_ignore_ascii_case("yes") {
        Ok(Value::Bool(true))
    } else if s.eq_ignore_ascii_case("no") {
        Ok(Value::Bool(false))
    } else {
        Err("argument must be 'yes' or 'no'".to_string())
    }
}

fn parse_int(s: &str, min: i64, max: i64) -> Result<Value, String> {
    let v = string2ll(s.as_bytes()).ok_or("argument couldn't be parsed into an integer")?;
    if v < min || v > max {
        return Err(format!(
            "argument must be between {min} and {max} inclusive"
        ));
    }
    Ok(Value::Int(v))
}

fn parse_memory(s: &str, min: u64, max: u64, percent: bool) -> Result<Value, String> {
    if let Some(v) = memtoull(s.as_bytes()) {
        if v < min || v > max {
            return Err(format!(
                "argument must be between {min} and {max} inclusive"
            ));
        }
        return Ok(Value::Mem(v));
    }
    if percent {
        if let Some(pct) = parse_percent(s) {
            if pct > 100 {
                return Err("percentage argument must be less or equal to 100".to_string());
            }
            return Ok(Value::Percent(pct));
        }
        return Err("argument must be a memory or percent value".to_string());
    }
    Err("argument must be a memory value".to_string())
}

/// `N%` with N a non-negative string2ll integer.
fn parse_percent(s: &str) -> Option<u64> {
    let digits = s.strip_suffix('%')?;
    let v = string2ll(digits.as_bytes())?;
    u64::try_from(v).ok()
}

fn parse_enum(s: &str, names: &[&str]) -> Result<Value, String> {
    names
        .iter()
        .position(|n| n.eq_ignore_ascii_case(s))
        .map(Value::Enum)
        .ok_or_else(|| {
            format!(
                "argument(s) must be one of the following: {}",
                names.join(", ")
            )
        })
}

fn parse_special(
    p: &ConfigParam,
    kind: Special,
    args: &[String],
    current: Option<&Value>,
) -> Result<Value, String> {
    match kind {
        Special::Bind => parse_bind(args),
        Special::Save => parse_save(args).map(Value::Save),
        Special::ClientOutputBufferLimit => parse_obuf(args, current),
        Special::NotifyKeyspaceEvents => parse_notify(single(args)?),
        Special::LatencyPercentiles => parse_percentiles(args),
        Special::Dir => parse_dir(single(args)?),
        Special::FileName => parse_file_name(p.name, single(args)?),
        Special::CpuList => parse_cpus_value(single(args)?),
        Special::ReplicaOf => parse_replicaof(args),
        Special::Octal => parse_octal(single(args)?),
        Special::ProcTitleTemplate => parse_proc_title_template(single(args)?),
        Special::OomScoreAdjValues => parse_oom_values(args),
        Special::ShutdownFlags => parse_shutdown_flags(args),
    }
}

fn parse_octal(s: &str) -> Result<Value, String> {
    match i64::from_str_radix(s, 8) {
        Ok(v) if (0..=0o777).contains(&v) && !s.starts_with(['+', '-']) => Ok(Value::Octal(v)),
        Ok(_) => Err("argument must be between 0 and 777 inclusive".to_string()),
        Err(_) => Err("argument couldn't be parsed as an octal number".to_string()),
    }
}

/// The placeholders Redis 7.0 expands in `proc-title-template`.
pub const PROC_TITLE_PLACEHOLDERS: &[&str] = &[
    "title",
    "listen-addr",
    "server-mode",
    "port",
    "tls-port",
    "unixsocket",
    "config-file",
];

/// Redis's validateProcTitleTemplate: every `{` opens a known placeholder that is
/// closed, and the expanded title is not empty.
fn parse_proc_title_template(s: &str) -> Result<Value, String> {
    let invalid = || "template format is invalid or contains unknown variables".to_string();
    let mut rest = s;
    let mut literal = String::new();
    while let Some(open) = rest.find('{') {
        literal.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or_else(invalid)?;
        if !PROC_TITLE_PLACEHOLDERS.contains(&&after[..close]) {
            return Err(invalid());
        }
        literal.push('x');
        rest = &after[close + 1..];
    }
    if rest.contains('}') {
        return Err(invalid());
    }
    literal.push_str(rest);
    if literal.trim().is_empty() {
        return Err(invalid());
    }
    Ok(Value::Str(s.to_string()))
}

fn parse_oom_values(args: &[String]) -> Result<Value, String> {
    let [a, b, c] = args else {
        return Err("wrong number of arguments".to_string());
    };
    let mut out = Vec::with_capacity(3);
    for v in [a, b, c] {
        match string2ll(v.as_bytes()) {
            Some(n) if (-2000..=2000).contains(&n) => out.push(n.to_string()),
            _ => {
                return Err(
                    "Invalid oom-score-adj-values, elements must be between -2000 and 2000."
                        .to_string(),
                )
            }
        }
    }
    Ok(Value::List(out))
}

/// The words of `shutdown-on-sig*`, in the order CONFIG GET lists them.
const SHUTDOWN_FLAG_NAMES: &[&str] = &["save", "nosave", "now", "force"];

/// `default` (save when save points are set) or some of save, nosave, now, force:
/// the flags a signal's shutdown runs with, as SHUTDOWN's arguments would give them.
fn parse_shutdown_flags(args: &[String]) -> Result<Value, String> {
    const ONE_OF: &str =
        "argument(s) must be one of the following: default, save, nosave, now, force";
    if args.is_empty() {
        return Err(ONE_OF.to_string());
    }
    let mut seen = [false; 4];
    for a in args {
        if a.eq_ignore_ascii_case("default") && args.len() == 1 {
            return Ok(Value::List(vec!["default".to_string()]));
        }
        match SHUTDOWN_FLAG_NAMES
            .iter()
            .position(|n| n.eq_ignore_ascii_case(a))
        {
            Some(i) => seen[i] = true,
            None => {
                return Err(
                    "argument(s) must be one of the following: default, save, nosave, now, force"
                        .to_string(),
                )
            }
        }
    }
    if seen[0] && seen[1] {
        return Err("shutdown options SAVE and NOSAVE can't be used simultaneously".to_string());
    }
    let words: Vec<String> = SHUTDOWN_FLAG_NAMES
        .iter()
        .zip(seen)
        .filter(|(_, on)| *on)
        .map(|(n, _)| n.to_string())
        .collect();
    if words.is_empty() {
        return Ok(Value::List(vec!["default".to_string()]));
    }
    Ok(Value::List(words))
}

/// `replicaof host port` / `replicaof no one`, with Redis's errors.
fn parse_replicaof(args: &[String]) -> Result<Value, String> {
    if is_single_empty(args) {
        return Ok(Value::List(Vec::new()));
    }
    let [host, port] = args else {
        return Err("wrong number of arguments".to_string());
    };
    if host.eq_ignore_ascii_case("no") && port.eq_ignore_ascii_case("one") {
        return Ok(Value::List(Vec::new()));
    }
    match port.parse::<u16>() {
        Ok(n) => Ok(Value::List(vec![host.clone(), n.to_string()])),
        Err(_) => Err("Invalid master port".to_string()),
    }
}

/// A lone empty argument means "none" for several multi-arg parameters, so
/// that `--save ""` / `CONFIG SET bind ""` clear them.
fn is_single_empty(args: &[String]) -> bool {
    matches!(args, [one] if one.is_empty())
}

fn parse_bind(args: &[String]) -> Result<Value, String> {
    if args.len() > CONFIG_BINDADDR_MAX {
        return Err("Too many bind addresses specified.".to_string());
    }
    if is_single_empty(args) {
        return Ok(Value::List(Vec::new()));
    }
    Ok(Value::List(args.to_vec()))
}

fn parse_save(args: &[String]) -> Result<Vec<SavePoint>, String> {
    const ERR: &str = "Invalid save parameters";
    let args = if is_single_empty(args) { &[] } else { args };
    if !args.len().is_multiple_of(2) {
        return Err(ERR.to_string());
    }
    let mut points = Vec::with_capacity(args.len() / 2);
    for pair in args.chunks(2) {
        let (seconds, seconds_ok) = strtoll(pair[0].as_bytes());
        let (changes, changes_ok) = strtoll(pair[1].as_bytes());
        if !seconds_ok || !changes_ok || seconds < 1 || changes < 0 {
            return Err(ERR.to_string());
        }
        // Redis keeps `changes` in a C int.
        let changes = i64::from(changes as i32);
        points.push(SavePoint { seconds, changes });
    }
    Ok(points)
}

fn client_class(name: &str) -> Option<ClientClass> {
    match name.to_ascii_lowercase().as_str() {
        "normal" => Some(ClientClass::Normal),
        "slave" | "replica" => Some(ClientClass::Replica),
        "pubsub" => Some(ClientClass::Pubsub),
        // "master" is a known class in Redis but has no configurable limit.
        _ => None,
    }
}

fn parse_obuf(args: &[String], current: Option<&Value>) -> Result<Value, String> {
    if !args.len().is_multiple_of(4) {
        return Err("Wrong number of arguments in buffer limit configuration.".to_string());
    }
    let mut limits = match current {
        Some(Value::Obuf(l)) => *l,
        _ => [ObufLimit::default(); 3],
    };
    for spec in args.chunks(4) {
        let class = client_class(&spec[0])
            .ok_or("Invalid client class specified in buffer limit configuration.")?;
        limits[class as usize] = parse_obuf_limit(&spec[1], &spec[2], &spec[3])?;
    }
    Ok(Value::Obuf(limits))
}

fn parse_obuf_limit(hard: &str, soft: &str, secs: &str) -> Result<ObufLimit, String> {
    const ERR: &str = "Error in hard, soft or soft_seconds setting in buffer limit configuration.";
    let (seconds, full) = strtoll(secs.as_bytes());
    // Redis stores soft_seconds in a C int before the sign check.
    let seconds = seconds as i32;
    match (memtoull(hard.as_bytes()), memtoull(soft.as_bytes())) {
        (Some(h), Some(s)) if full && seconds >= 0 => Ok(ObufLimit {
            hard_limit_bytes: h,
            soft_limit_bytes: s,
            soft_limit_seconds: i64::from(seconds),
        }),
        _ => Err(ERR.to_string()),
    }
}

/// Notification class letters in Redis's order.
const NOTIFY_LETTERS: &[(char, u32)] = &[
    ('g', notify::GENERIC),
    ('$', notify::STRING),
    ('l', notify::LIST),
    ('s', notify::SET),
    ('h', notify::HASH),
    ('z', notify::ZSET),
    ('x', notify::EXPIRED),
    ('e', notify::EVICTED),
    ('t', notify::STREAM),
    ('d', notify::MODULE),
    ('n', notify::NEW),
];

fn parse_notify(s: &str) -> Result<Value, String> {
    let mut flags = 0;
    for c in s.chars() {
        flags |= match c {
            'A' => notify::ALL,
            'K' => notify::KEYSPACE,
            'E' => notify::KEYEVENT,
            'm' => notify::KEY_MISS,
            _ => NOTIFY_LETTERS
                .iter()
                .find(|(l, _)| *l == c)
                .map(|(_, f)| *f)
                .ok_or("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.")?,
        };
    }
    Ok(Value::Flags(flags))
}

fn render_notify(flags: u32) -> String {
    let mut out = String::new();
    if flags & notify::ALL == notify::ALL {
        out.push('A');
    } else {
        for (letter, bit) in NOTIFY_LETTERS {
            if flags & bit != 0 {
                out.push(*letter);
            }
        }
    }
    for (letter, bit) in [
        ('K', notify::KEYSPACE),
        ('E', notify::KEYEVENT),
        ('m', notify::KEY_MISS),
    ] {
        if flags & bit != 0 {
            out.push(letter);
        }
    }
    // Like Redis 7.0, `n` is not shown next to `A` (it is not part of `A`
    // but the renderer only emits it in the per-class branch); the flag
    // itself is kept.
    out
}

fn parse_percentiles(args: &[String]) -> Result<Value, String> {
    if is_single_empty(args) {
        return Ok(Value::Floats(Vec::new()));
    }
    let mut out = Vec::with_capacity(args.len());
    for a in args {
        let v = string2d(a).ok_or("Invalid latency-tracking-info-percentiles parameters")?;
        if !(0.0..=100.0).contains(&v) {
            return Err(
                "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
                    .to_string(),
            );
        }
        out.push(v);
    }
    Ok(Value::Floats(out))
}

/// Renders like Redis: printf("%f") with trailing zeros (and dot) removed.
pub(super) fn render_double(v: f64) -> String {
    let s = format!("{v:.6}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Redis chdir()s on `dir`; Tessera keeps the process cwd and stores the
/// absolute path instead (shard threads share the cwd, and tests run in
/// parallel), so persistence code must join paths onto `Config::dir()`.
fn parse_dir(s: &str) -> Result<Value, String> {
    let path = fs::canonicalize(s).map_err(|e| io_error_text(&e))?;
    if !path.is_dir() {
        return Err("Not a directory".to_string());
    }
    Ok(Value::Str(path.to_string_lossy().into_owned()))
}

fn parse_file_name(name: &str, s: &str) -> Result<Value, String> {
    // Redis's isValidAOFdirname / isValidAOFfilename / isValidDBfilename.
    if name == "appenddirname" || name == "appendfilename" {
        if s.is_empty() {
            return Err(format!("{name} can't be empty"));
        }
        if name == "appenddirname" && s.contains('/') {
            return Err("appenddirname can't be a path, just a dirname".to_string());
        }
    }
    if s.contains('/') {
        return Err(format!("{name} can't be a path, just a filename"));
    }
    Ok(Value::Str(s.to_string()))
}

fn parse_cpus_value(s: &str) -> Result<Value, String> {
    if s.trim().is_empty() {
        return Ok(Value::Cpus(Vec::new()));
    }
    parse_cpu_list(s).map(Value::Cpus)
}

/// Parses a CPU list such as `0-3,8` into sorted, de-duplicated CPU ids.
/// Reversed ranges, empty elements and ids above `MAX_CPU_ID` are errors.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let invalid = |why: String| format!("invalid CPU list '{s}': {why}");
    let trimmed = s.trim();
    if trimmed.is_empty() {
        return Err(invalid("empty list".to_string()));
    }
    // A bitmap rather than expanding ranges into a Vec keeps `0-65535`
    // repeated many times cheap.
    let mut seen = vec![false; MAX_CPU_ID + 1];
    for part in trimmed.split(',') {
        let (lo, hi) = parse_cpu_range(part.trim()).map_err(invalid)?;
        for slot in &mut seen[lo..=hi] {
            *slot = true;
        }
    }
    Ok(seen
        .iter()
        .enumerate()
        .filter_map(|(cpu, &on)| on.then_some(cpu))
        .collect())
}

fn parse_cpu_range(part: &str) -> Result<(usize, usize), String> {
    if part.is_empty() {
        return Err("empty element".to_string());
    }
    let (lo, hi) = match part.split_once('-') {
        Some((a, b)) => (parse_cpu_id(a.trim())?, parse_cpu_id(b.trim())?),
        None => {
            let id = parse_cpu_id(part)?;
            (id, id)
        }
    };
    if lo > hi {
        return Err(format!("range '{part}' is reversed"));
    }
    Ok((lo, hi))
}

fn parse_cpu_id(t: &str) -> Result<usize, String> {
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("'{t}' is not a CPU number"));
    }
    match t.parse::<usize>() {
        Ok(id) if id <= MAX_CPU_ID => Ok(id),
        _ => Err(format!("CPU '{t}' exceeds the maximum of {MAX_CPU_ID}")),
    }
}

/// `0,1,2,3,8` -> `0-3,8`.
pub(super) fn render_cpus(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

/// CONFIG GET rendering.
pub(super) fn render(p: &ConfigParam, v: &Value) -> String {
    match v {
        Value::Bool(b) => if *b { "yes" } else { "no" }.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Mem(m) => m.to_string(),
        Value::Percent(pct) => format!("{pct}%"),
        Value::Enum(i) => match p.kind {
            ParamKind::Enum(names) => names.get(*i).copied().unwrap_or("unknown").to_string(),
            _ => "unknown".to_string(),
        },
        Value::Str(s) => s.clone(),
        Value::List(items) => items.join(" "),
        Value::Save(points) => render_save(points),
        Value::Obuf(limits) => render_obuf(limits),
        Value::Flags(f) => render_notify(*f),
        Value::Floats(fs) => fs
            .iter()
            .map(|f| render_double(*f))
            .collect::<Vec<_>>()
            .join(" "),
        Value::Cpus(c) => render_cpus(c),
        Value::Octal(v) => format!("{v:o}"),
    }
}

fn render_save(points: &[SavePoint]) -> String {
    points
        .iter()
        .map(|p| format!("{} {}", p.seconds, p.changes))
        .collect::<Vec<_>>()
        .join(" ")
}

fn render_obuf(limits: &[ObufLimit; 3]) -> String {
    ["normal", "slave", "pubsub"]
        .iter()
        .zip(limits.iter())
        .map(|(name, l)| {
            format!(
                "{name} {} {} {}",
                l.hard_limit_bytes, l.soft_limit_bytes, l.soft_limit_seconds
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Arguments for parsing a default: multi-arg defaults are written as one
/// config line, single-arg ones are the literal value.
pub(super) fn default_args(p: &ConfigParam) -> Vec<String> {
    if p.kind.is_multi_arg() && !p.default.is_empty() {
        split_args_lossy(p.default).unwrap_or_default()
    } else {
        vec![p.default.to_string()]
    }
}

pub(super) fn default_value(p: &ConfigParam) -> Value {
    // The table is covered by a unit test that every default parses; the
    // fallback only keeps a broken entry from taking the server down.
    parse_value_of_kind(p, &default_args(p), None)
        .unwrap_or_else(|_| Value::Str(p.default.to_string()))
}

/* ------------------------------------------------------------------------ */
/* Floats and CONFIG SET splitting (C-string helpers are in util::cstr).    */
/* ------------------------------------------------------------------------ */

/// Redis's `string2d` (strtod that must consume everything, no leading
/// space, no NaN).  Rust's float grammar differs only in exotic corners
/// (hex floats), which the 0..100 range check rejects anyway.
fn string2d(s: &str) -> Option<f64> {
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    s.parse::<f64>().ok().filter(|v| !v.is_nan())
}

/// Redis's `sdssplitlen(value, " ")` as used by CONFIG SET for multi-arg
/// parameters: an empty value gives no arguments, and repeated spaces give
/// empty arguments (which then fail validation, as in Redis).
pub(super) fn split_spaces(value: &str) -> Vec<String> {
    if value.is_empty() {
        Vec::new()
    } else {
        value.split(' ').map(str::to_string).collect()
    }
}
