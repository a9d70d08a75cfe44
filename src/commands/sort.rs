//! SORT and SORT_RO (Redis's sort.c).
//!
//! BY and GET patterns name other keys, which may live on any shard, so both commands
//! are coordinators: under the locks of the source key (and the STORE destination)
//! they fetch the elements from the source's shard, resolve the pattern lookups with
//! one call per shard that owns referenced keys, sort at home and write the result on
//! the destination's shard. Pattern lookups are not locked: like Redis (whose docs
//! call BY/GET unsafe in cluster mode) they see the keys as they are at that moment.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use super::strings::cmd;
use super::table::{flags::*, CommandSpec, KeySpec, Kind};
use super::{parse_i64, GlobalCtx, NOT_INT, SYNTAX_ERR, WRONGTYPE};
use crate::shard::multi::MultiShardOp;
use crate::shard::{ShardCell, ShardData};
use crate::storage::list::ListValue;
use crate::storage::Value;

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

const BAD_DOUBLE: &str = "ERR One or more scores can't be converted into double";

macro_rules! scmd {
    ($name:expr, $flags:expr, $kind:expr, $summary:expr) => {
        CommandSpec {
            group: "generic",
            acl: &["@list", "@set", "@sortedset", "@dangerous"],
            ..cmd!($name, -2, $flags, KeySpec::Sort, $kind, "1.0.0", $summary)
        }
    };
}

#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    scmd!("sort", WRITE | DENYOOM | MOVABLE_KEYS, Kind::Global(sort), "Sort the elements in a list, set or sorted set"),
    CommandSpec {
        since: "7.0.0",
        keys: KeySpec::Range { first: 1, last: 1, step: 1 },
        ..scmd!("sort_ro", READONLY | MOVABLE_KEYS, Kind::Global(sort_ro), "Sort the elements in a list, set or sorted set. Read-only variant of SORT.")
    },
];

fn sort<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(sort_generic(g, false))
}

fn sort_ro<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
    Box::pin(sort_generic(g, true))
}

/// The parsed options of one SORT call.
#[derive(Debug, Default, PartialEq)]
struct SortOpts {
    /// A BY pattern containing `*` (a pattern without one disables sorting).
    by: Option<Vec<u8>>,
    dontsort: bool,
    gets: Vec<Vec<u8>>,
    limit_start: i64,
    limit_count: i64,
    desc: bool,
    alpha: bool,
    store: Option<Vec<u8>>,
    /// Called from a Lua script, whose replies must be deterministic.
    in_script: bool,
}

/// Parses SORT's options (argv[2..]) with Redis's precedence: the first bad option
/// wins, later options override earlier ones. `all_keys` says whether the client's
/// ACL user may read every key: BY patterns and GET read keys no ACL check saw.
fn parse_opts(args: &[Vec<u8>], readonly: bool, all_keys: bool) -> Result<SortOpts, &'static str> {
    let mut o = SortOpts {
        limit_count: -1,
        ..SortOpts::default()
    };
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        let a = args[j].as_slice();
        let is = |w: &str| a.eq_ignore_ascii_case(w.as_bytes());
        if is("asc") {
            o.desc = false;
        } else if is("desc") {
            o.desc = true;
        } else if is("alpha") {
            o.alpha = true;
        } else if is("limit") && left >= 2 {
            o.limit_start = parse_i64(&args[j + 1]).ok_or(NOT_INT)?;
            o.limit_count = parse_i64(&args[j + 2]).ok_or(NOT_INT)?;
            j += 2;
        } else if !readonly && is("store") && left >= 1 {
            o.store = Some(args[j + 1].clone());
            j += 1;
        } else if is("by") && left >= 1 {
            let p = &args[j + 1];
            if p.contains(&b'*') {
                if !all_keys {
                    return Err(
                        "ERR BY option of SORT denied due to insufficient ACL permissions.",
                    );
                }
                o.by = Some(p.clone());
                o.dontsort = false;
            } else {
                o.by = None;
                o.dontsort = true;
            }
            j += 1;
        } else if is("get") && left >= 1 {
            if !all_keys {
                return Err("ERR GET option of SORT denied due to insufficient ACL permissions.");
            }
            o.gets.push(args[j + 1].clone());
            j += 1;
        } else {
            return Err(SYNTAX_ERR);
        }
        j += 1;
    }
    Ok(o)
}

/// Which kind of collection was sorted: decides what "natural order" means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SrcKind {
    List,
    Set,
    ZSet,
}

/// Reads the elements of the key to sort, in their natural order (a sorted set's by
/// score). A missing key reads as an empty list.
fn fetch_elements(d: &mut ShardData, db: usize, key: &[u8]) -> Result<(SrcKind, Vec<Vec<u8>>), ()> {
    let now = crate::util::now_ms();
    let Some(e) = d.dbs[db].get(key, now) else {
        d.stats.keyspace_misses += 1;
        return Ok((SrcKind::List, Vec::new()));
    };
    let out = match e.value() {
        Value::List(l) => (SrcKind::List, l.iter().map(|b| b.to_vec()).collect()),
        Value::Set(s) => (
            SrcKind::Set,
            s.iter().map(|m| m.with_bytes(|b| b.to_vec())).collect(),
        ),
        Value::ZSet(z) => (SrcKind::ZSet, z.iter().map(|(m, _)| m.to_vec()).collect()),
        _ => return Err(()),
    };
    d.stats.keyspace_hits += 1;
    Ok(out)
}

/// A pattern lookup: the key to read and, for `key->field`, the hash field.
type Lookup = (Vec<u8>, Option<Vec<u8>>);

/// Substitutes `elem` for the first `*` of `pattern` (lookupKeyByPattern). `None` when
/// the pattern has no `*`: such a GET never finds anything.
fn substitute(pattern: &[u8], elem: &[u8]) -> Option<Lookup> {
    let star = pattern.iter().position(|&c| c == b'*')?;
    let rest = &pattern[star + 1..];
    // A "->" after the star with something behind it selects a hash field.
    let arrow = rest
        .windows(2)
        .position(|w| w == b"->")
        .filter(|&f| f + 2 < rest.len());
    let (suffix, field) = match arrow {
        Some(f) => (&rest[..f], Some(rest[f + 2..].to_vec())),
        None => (rest, None),
    };
    let mut key = Vec::with_capacity(star + elem.len() + suffix.len());
    key.extend_from_slice(&pattern[..star]);
    key.extend_from_slice(elem);
    key.extend_from_slice(suffix);
    Some((key, field))
}

/// Reads one looked-up value on its shard: a string key's value, or a hash field;
/// anything else (missing, other types) is nothing.
fn read_lookup(
    d: &mut ShardData,
    db: usize,
    now: u64,
    key: &[u8],
    field: Option<&[u8]>,
) -> Option<Vec<u8>> {
    let found = d.dbs[db].get(key, now);
    match found {
        Some(_) => d.stats.keyspace_hits += 1,
        None => d.stats.keyspace_misses += 1,
    }
    match (found?.value(), field) {
        (Value::Str(s), None) => Some(s.to_vec()),
        // A field past its deadline is not there (Redis 7.4); deleting it is left to
        // the hash's own commands and the expiry cycle, which propagate the HDEL.
        (Value::Hash(h), Some(f)) if h.field_expire(f).is_some_and(|at| at <= now) => None,
        (Value::Hash(h), Some(f)) => h.get(f).map(|v| v.to_vec()),
        _ => None,
    }
}

/// Resolves lookups in `db`, one call per shard owning some of the keys; the results
/// come back in the order of `lookups` (`None` entries are skipped as not found).
async fn resolve(
    cell: &Rc<ShardCell>,
    db: usize,
    lookups: Vec<Option<Lookup>>,
) -> Vec<Option<Vec<u8>>> {
    let mut out: Vec<Option<Vec<u8>>> = vec![None; lookups.len()];
    let mut by_shard: BTreeMap<usize, Vec<(usize, Lookup)>> = BTreeMap::new();
    for (i, l) in lookups.into_iter().enumerate() {
        if let Some(l) = l {
            by_shard
                .entry(cell.shard_of(&l.0))
                .or_default()
                .push((i, l));
        }
    }
    for (shard, batch) in by_shard {
        let found = cell
            .call(shard, move |c| {
                let mut d = c.data.borrow_mut();
                let now = crate::util::now_ms();
                batch
                    .into_iter()
                    .map(|(i, (k, f))| (i, read_lookup(&mut d, db, now, &k, f.as_deref())))
                    .collect::<Vec<_>>()
            })
            .await;
        for (i, v) in found {
            out[i] = v;
        }
    }
    out
}

/// Parses a sort weight as Redis does with strtod: the whole string must be a number
/// (leading blanks allowed, the empty string is 0); NaN and out-of-range values fail.
fn parse_weight(b: &[u8]) -> Option<f64> {
    if b.is_empty() {
        return Some(0.0);
    }
    let s = std::str::from_utf8(b).ok()?;
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let v: f64 = t.parse().ok()?;
    let digits = t.trim_start_matches(['+', '-']);
    if v.is_nan() {
        return None;
    }
    // strtod reports ERANGE on overflow and underflow, which SORT rejects.
    if v.is_infinite() && !digits[..digits.len().min(3)].eq_ignore_ascii_case("inf") {
        return None;
    }
    let mantissa = digits.split(['e', 'E']).next().unwrap_or("");
    if v == 0.0 && mantissa.bytes().any(|c| (b'1'..=b'9').contains(&c)) {
        return None;
    }
    Some(v)
}

/// The inclusive output window [start, end] after Redis's LIMIT clamping; empty when
/// end < start.
fn window(len: usize, limit_start: i64, limit_count: i64) -> (i64, i64) {
    let len = len as i64;
    let mut start = limit_start.max(0);
    let mut end = if limit_count < 0 {
        len - 1
    } else {
        start.saturating_add(limit_count) - 1
    };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    if end >= len {
        end = len - 1;
    }
    (start, end)
}

/// Orders `elems` by the options' weights; `Err` when a numeric weight is not a number.
async fn sort_elements(
    cell: &Rc<ShardCell>,
    db: usize,
    o: &SortOpts,
    elems: Vec<Vec<u8>>,
) -> Result<Vec<Vec<u8>>, &'static str> {
    let weights: Option<Vec<Option<Vec<u8>>>> = match &o.by {
        Some(p) => {
            let lookups = elems.iter().map(|e| substitute(p, e)).collect();
            Some(resolve(cell, db, lookups).await)
        }
        None => None,
    };
    let desc = o.desc;
    let dir = |c: Ordering| if desc { c.reverse() } else { c };
    let mut order: Vec<usize> = (0..elems.len()).collect();
    if o.alpha {
        match &weights {
            // Missing weights sort first; equal weights keep no particular order.
            Some(w) => order.sort_by(|&a, &b| dir(w[a].cmp(&w[b]))),
            None => order.sort_by(|&a, &b| dir(elems[a].cmp(&elems[b]))),
        }
    } else {
        let mut scores = Vec::with_capacity(elems.len());
        for (i, e) in elems.iter().enumerate() {
            let w = match &weights {
                Some(w) => w[i].as_deref(),
                None => Some(e.as_slice()),
            };
            // A missing BY key weighs 0.
            scores.push(match w {
                Some(b) => parse_weight(b).ok_or(BAD_DOUBLE)?,
                None => 0.0,
            });
        }
        // Equal scores fall back to comparing the elements, so the result is stable.
        order.sort_by(|&a, &b| {
            dir(scores[a]
                .partial_cmp(&scores[b])
                .unwrap_or(Ordering::Equal)
                .then_with(|| elems[a].cmp(&elems[b])))
        });
    }
    let mut slots: Vec<Option<Vec<u8>>> = elems.into_iter().map(Some).collect();
    Ok(order.into_iter().filter_map(|i| slots[i].take()).collect())
}

/// The reply rows: the elements themselves, or one value per GET pattern each.
async fn apply_gets(
    cell: &Rc<ShardCell>,
    db: usize,
    gets: &[Vec<u8>],
    elems: Vec<Vec<u8>>,
) -> Vec<Option<Vec<u8>>> {
    if gets.is_empty() {
        return elems.into_iter().map(Some).collect();
    }
    let mut lookups = Vec::with_capacity(elems.len() * gets.len());
    for e in &elems {
        for p in gets {
            lookups.push(if p.as_slice() == b"#" {
                None
            } else {
                substitute(p, e)
            });
        }
    }
    let mut rows = resolve(cell, db, lookups).await;
    // GET # is the element itself: moved into its last `#` slot, copied into others.
    for (row, mut e) in rows.chunks_mut(gets.len()).zip(elems) {
        let mut slots = gets
            .iter()
            .zip(row.iter_mut())
            .filter(|(p, _)| p.as_slice() == b"#")
            .map(|(_, s)| s)
            .peekable();
        while let Some(slot) = slots.next() {
            *slot = Some(if slots.peek().is_some() {
                e.clone()
            } else {
                std::mem::take(&mut e)
            });
        }
    }
    rows
}

async fn sort_generic(g: &mut GlobalCtx<'_>, readonly: bool) {
    let all_keys = g.session.acl_open || {
        let user = g.session.shared.user.borrow().clone();
        let owned = super::OwnedArgs::new(&g.args);
        let args = owned.args();
        let t = super::table();
        let id = super::lookup(&g.args[0]).map_or(0, |(idx, _)| t.stat_id(idx, &args));
        crate::acl::check::allowed_with_all_keys(&user, id, &args, crate::acl::READ)
    };
    let mut o = match parse_opts(&g.args, readonly, all_keys) {
        Ok(o) => o,
        Err(e) => return g.error(e),
    };
    o.in_script = g.session.in_script;
    let db = g.session.db;
    let cell = g.session.cell.clone();
    let src = g.args[1].clone();
    let mut keys = vec![src.clone()];
    keys.extend(o.store.iter().cloned());
    // Only a STORE writes: a plain SORT must not invalidate WATCHes on its source.
    let mut owner = g.owner();
    owner.write = o.store.is_some();
    let mut op = MultiShardOp::lock_keys(owner, &cell, db, &keys).await;
    let result = run_locked(&op, &cell, db, &src, &mut o).await;
    // A STORE writes its destination only (and only if it changed); the source and an
    // error write nothing.
    match (&result, &o.store) {
        (Ok(Output::Stored(_, true)), Some(dst)) => op.written_only(&[(db, dst.as_slice())]),
        _ => op.set_read_only(),
    }
    g.release(op).await;
    let mut w = g.w();
    match result {
        Err(e) => w.error(e),
        Ok(Output::Stored(n, _)) => w.integer(n as i64),
        Ok(Output::Rows(rows)) => {
            w.array_len(rows.len());
            for r in rows {
                match r {
                    Some(v) => w.bulk(&v),
                    None => w.null(),
                }
            }
        }
    }
}

enum Output {
    Rows(Vec<Option<Vec<u8>>>),
    /// The destination's length, and whether the destination changed.
    Stored(usize, bool),
}

async fn run_locked(
    op: &MultiShardOp,
    cell: &Rc<ShardCell>,
    db: usize,
    src: &[u8],
    o: &mut SortOpts,
) -> Result<Output, &'static str> {
    let key = src.to_vec();
    let (kind, mut elems) = op
        .on(cell, cell.shard_of(src), move |d| {
            fetch_elements(d, db, &key)
        })
        .await
        .map_err(|_| WRONGTYPE)?;
    // A set has no order of its own: a stored result (or a script's reply) must not
    // depend on the hash table's layout, so Redis sorts it alphabetically instead.
    if o.dontsort && kind == SrcKind::Set && (o.store.is_some() || o.in_script) {
        o.dontsort = false;
        o.alpha = true;
        o.by = None;
    }
    let (start, end) = window(elems.len(), o.limit_start, o.limit_count);
    if o.dontsort {
        if o.desc && kind != SrcKind::Set {
            elems.reverse();
        }
    } else {
        elems = sort_elements(cell, db, o, elems).await?;
    }
    let picked: Vec<Vec<u8>> = if end >= start {
        elems
            .into_iter()
            .skip(start as usize)
            .take((end - start + 1) as usize)
            .collect()
    } else {
        Vec::new()
    };
    let rows = apply_gets(cell, db, &o.gets, picked).await;
    let Some(dst) = o.store.clone() else {
        return Ok(Output::Rows(rows));
    };
    let n = rows.len();
    let changed = op
        .on(cell, cell.shard_of(&dst), move |d| store(d, db, &dst, rows))
        .await;
    Ok(Output::Stored(n, changed))
}

/// STORE: the rows become a list (missing GET values as empty strings); an empty
/// result deletes the destination instead. Emits "sortstore" (or "del"). True if the
/// destination changed.
fn store(d: &mut ShardData, db: usize, dst: &[u8], rows: Vec<Option<Vec<u8>>>) -> bool {
    use crate::config::notify;
    if rows.is_empty() {
        let existed = d.dbs[db].remove(dst).is_some();
        if existed {
            crate::pubsub::notify(notify::GENERIC, "del", dst, db);
        }
        return existed;
    }
    let mut list = ListValue::new(&d.limits);
    for r in &rows {
        list.push_back(r.as_deref().unwrap_or(b""));
    }
    d.dbs[db].insert(
        dst,
        Value::List(Box::new(list)),
        crate::storage::NO_EXPIRE,
        crate::util::lru_clock(),
    );
    crate::pubsub::notify(notify::LIST, "sortstore", dst, db);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn pattern_substitution() {
        assert_eq!(substitute(b"w_*", b"a"), Some((b"w_a".to_vec(), None)));
        assert_eq!(
            substitute(b"o_*->f", b"a"),
            Some((b"o_a".to_vec(), Some(b"f".to_vec())))
        );
        // "->" with nothing behind it is part of the key name.
        assert_eq!(substitute(b"x:*->", b"a"), Some((b"x:a->".to_vec(), None)));
        assert_eq!(substitute(b"a*b*c", b"1"), Some((b"a1b*c".to_vec(), None)));
        assert_eq!(substitute(b"const", b"a"), None);
    }

    #[test]
    fn weights_parse_like_strtod() {
        assert_eq!(parse_weight(b"1.5"), Some(1.5));
        assert_eq!(parse_weight(b" 2"), Some(2.0));
        assert_eq!(parse_weight(b""), Some(0.0));
        assert_eq!(parse_weight(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_weight(b"2 "), None);
        assert_eq!(parse_weight(b"   "), None);
        assert_eq!(parse_weight(b"nan"), None);
        assert_eq!(parse_weight(b"1e400"), None);
        assert_eq!(parse_weight(b"1e-400"), None);
        assert_eq!(parse_weight(b"0e5"), Some(0.0));
        assert_eq!(parse_weight(b"abc"), None);
    }

    #[test]
    fn limit_window() {
        assert_eq!(window(5, 0, -1), (0, 4));
        assert_eq!(window(5, 1, 2), (1, 2));
        assert_eq!(window(5, -3, 2), (0, 1));
        assert_eq!(window(5, 7, 2), (4, 3));
        assert_eq!(window(3, 2, i64::MAX), (2, 2));
        assert_eq!(window(0, 0, -1), (-1, -2));
    }

    #[test]
    fn options() {
        let o = parse_opts(
            &argv(&[
                "sort", "k", "by", "w_*", "get", "#", "limit", "1", "2", "desc", "alpha", "store",
                "d",
            ]),
            false,
            true,
        )
        .unwrap();
        assert_eq!(o.by.as_deref(), Some(&b"w_*"[..]));
        assert!(!o.dontsort && o.desc && o.alpha);
        assert_eq!((o.limit_start, o.limit_count), (1, 2));
        assert_eq!(o.gets, argv(&["#"]));
        assert_eq!(o.store.as_deref(), Some(&b"d"[..]));
        assert!(
            parse_opts(&argv(&["sort", "k", "by", "nosort"]), false, true)
                .unwrap()
                .dontsort
        );
        assert_eq!(
            parse_opts(&argv(&["sort_ro", "k", "store", "d"]), true, true),
            Err(SYNTAX_ERR)
        );
        assert_eq!(
            parse_opts(&argv(&["sort", "k", "limit", "x", "1"]), false, true),
            Err(NOT_INT)
        );
        assert_eq!(
            parse_opts(&argv(&["sort", "k", "get"]), false, true),
            Err(SYNTAX_ERR)
        );
    }
}
