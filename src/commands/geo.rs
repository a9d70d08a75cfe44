//! Geospatial commands (Redis's geo.c) over sorted sets whose scores are 52-bit
//! geohashes (util/geohash.rs): GEOADD, GEOPOS, GEODIST, GEOHASH, GEORADIUS[_RO],
//! GEORADIUSBYMEMBER[_RO], GEOSEARCH and GEOSEARCHSTORE.
//!
//! A search is a pure function of the arguments and the source set, run on the
//! source's shard; a STORE destination on another shard is written by a coordinator
//! that holds both keys' locks, so the command stays atomic.

use std::future::Future;
use std::pin::Pin;

use super::table::{flags::*, CommandSpec, Cross, KeySpec, Kind, K1, K12};
use super::WRONGTYPE;
use super::{
    notify, parse_f64, parse_i64, Args, ExecCtx, GlobalCtx, OwnedArgs, NOT_FLOAT, NOT_INT,
    SYNTAX_ERR,
};
use crate::protocol::reply::{Protocol, ReplyWriter};
use crate::shard::multi::MultiShardOp;
use crate::storage::limits::EncodingLimits;
use crate::storage::zset::{cmp_entries, AddFlags, AddOutcome, Member, ScoreRange, ZSetValue};
use crate::storage::{Db, Entry, Value, NO_EXPIRE};
use crate::util::geohash::{self, Shape, ShapeKind};

type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

const W: &[&str] = &["@write", "@geo", "@slow"];
const R: &[&str] = &["@read", "@geo", "@slow"];

const fn keyed(f: super::KeyedFn) -> Kind {
    Kind::Keyed(f, Cross::Never)
}

const fn across(f: super::KeyedFn, g: super::GlobalFn) -> Kind {
    Kind::Keyed(f, Cross::Coordinator(g))
}

macro_rules! gcmd {
    ($name:expr, $arity:expr, $flags:expr, $keys:expr, $kind:expr, $since:expr, $summary:expr, $acl:expr) => {
        CommandSpec {
            name: $name,
            arity: $arity,
            flags: $flags,
            keys: $keys,
            kind: $kind,
            group: "geo",
            since: $since,
            summary: $summary,
            acl: $acl,
        }
    };
}

/// One row per command, kept on one line each so the table reads as data.
#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    gcmd!("geoadd", -5, WRITE | DENYOOM, K1, keyed(geoadd), "3.2.0", "Add one or more geospatial items in the geospatial index represented using a sorted set", W),
    gcmd!("geodist", -4, READONLY, K1, keyed(geodist), "3.2.0", "Returns the distance between two members of a geospatial index", R),
    gcmd!("geohash", -2, READONLY, K1, keyed(geohash_cmd), "3.2.0", "Returns members of a geospatial index as standard geohash strings", R),
    gcmd!("geopos", -2, READONLY, K1, keyed(geopos), "3.2.0", "Returns longitude and latitude of members of a geospatial index", R),
    gcmd!("georadius", -6, WRITE | DENYOOM | MOVABLE_KEYS, KeySpec::GeoStore, across(georadius, georadius_across), "3.2.0", "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance from a point", W),
    gcmd!("georadius_ro", -6, READONLY, K1, keyed(georadius_ro), "3.2.10", "A read-only variant for GEORADIUS", R),
    gcmd!("georadiusbymember", -5, WRITE | DENYOOM | MOVABLE_KEYS, KeySpec::GeoStore, across(georadiusbymember, georadiusbymember_across), "3.2.0", "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance from a member", W),
    gcmd!("georadiusbymember_ro", -5, READONLY, K1, keyed(georadiusbymember_ro), "3.2.10", "A read-only variant for GEORADIUSBYMEMBER", R),
    gcmd!("geosearch", -7, READONLY, K1, keyed(geosearch), "6.2.0", "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle.", R),
    gcmd!("geosearchstore", -8, WRITE | DENYOOM, K12, across(geosearchstore, geosearchstore_across), "6.2.0", "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle, and store the result in another key.", W),
];

const NO_MEMBER: &str = "ERR could not decode requested zset member";
const BAD_UNIT: &str = "ERR unsupported unit provided. please use M, KM, FT, MI";

// ---------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------

/// The sorted set at an entry: Ok(None) if missing, Err for another type.
fn as_zset(e: Option<&mut Entry>) -> Result<Option<&ZSetValue>, ()> {
    match e {
        None => Ok(None),
        Some(e) => match e.value() {
            Value::ZSet(z) => Ok(Some(z)),
            _ => Err(()),
        },
    }
}

/// Meters per unit; None for an unknown unit.
fn unit(b: &[u8]) -> Option<f64> {
    [("m", 1.0), ("km", 1000.0), ("ft", 0.3048), ("mi", 1609.34)]
        .iter()
        .find(|(n, _)| b.eq_ignore_ascii_case(n.as_bytes()))
        .map(|&(_, v)| v)
}

/// A longitude / latitude pair within the indexable limits (Redis's
/// extractLongLatOrReply).
fn lon_lat(lon: &[u8], lat: &[u8]) -> Result<(f64, f64), String> {
    let (Some(x), Some(y)) = (parse_f64(lon), parse_f64(lat)) else {
        return Err(NOT_FLOAT.to_string());
    };
    if !(geohash::LON_MIN..=geohash::LON_MAX).contains(&x)
        || !(geohash::LAT_MIN..=geohash::LAT_MAX).contains(&y)
    {
        return Err(format!("ERR invalid longitude,latitude pair {x:.6},{y:.6}"));
    }
    Ok((x, y))
}

/// A distance reply: "%.4f" as a bulk string in both protocols.
fn reply_distance(out: &mut ReplyWriter, d: f64) {
    out.bulk(format!("{d:.4}").as_bytes());
}

/// A coordinate as Redis's addReplyHumanLongDouble writes it: the exact value with 17
/// decimals, trailing zeros dropped; a bulk string in RESP2, a double in RESP3.
fn reply_coord(out: &mut ReplyWriter, v: f64) {
    let mut s = format!("{v:.17}");
    if s.contains('.') {
        let keep = s.trim_end_matches('0').trim_end_matches('.').len();
        s.truncate(keep);
    }
    if s == "-0" {
        s = "0".to_string();
    }
    match out.proto {
        Protocol::Resp2 => out.bulk(s.as_bytes()),
        Protocol::Resp3 => {
            out.out.push(b',');
            out.out.extend_from_slice(s.as_bytes());
            out.out.extend_from_slice(b"\r\n");
        }
    }
}

// ---------------------------------------------------------------------------
// GEOADD
// ---------------------------------------------------------------------------

fn geoadd(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let mut flags = AddFlags::default();
    let mut ch = false;
    let mut at = 2;
    while at < args.len() {
        if args.is(at, "nx") {
            flags.nx = true;
        } else if args.is(at, "xx") {
            flags.xx = true;
        } else if args.is(at, "ch") {
            ch = true;
        } else {
            break;
        }
        at += 1;
    }
    let rest = args.len() - at;
    if !rest.is_multiple_of(3) || (flags.xx && flags.nx) || rest == 0 {
        return ctx.error(SYNTAX_ERR);
    }
    // Every position is checked before anything changes.
    let mut scores = Vec::with_capacity(rest / 3);
    for i in (at..args.len()).step_by(3) {
        match lon_lat(args.get(i), args.get(i + 1)) {
            Ok((lon, lat)) => scores.push(geohash::score_of(lon, lat).unwrap_or(0.0)),
            Err(e) => return ctx.error(&e),
        }
    }
    let key = args.get(1);
    let limits = ctx.data.limits;
    let first_len = args.get(at + 2).len();
    let (now, lru, dbi) = (ctx.now, ctx.lru(), ctx.db);
    let mut fresh = None;
    let mut entry = ctx.data.dbs[dbi].get(key, now);
    if let Some(e) = entry.as_deref_mut() {
        e.set_lru(lru);
    }
    let z = match as_zset_mut(entry) {
        Err(()) => return ctx.out.error(WRONGTYPE),
        Ok(Some(z)) => {
            z.maybe_convert(scores.len(), &limits);
            z
        }
        Ok(None) if flags.xx => return ctx.out.integer(0),
        Ok(None) => fresh.insert(ZSetValue::with_hint(scores.len(), first_len, &limits)),
    };
    let (mut added, mut changed) = (0, 0);
    for (j, &score) in scores.iter().enumerate() {
        match z.add(args.get(at + 3 * j + 2), score, flags, &limits) {
            AddOutcome::Added(_) => added += 1,
            AddOutcome::Updated(_) => changed += 1,
            _ => {}
        }
    }
    if let Some(z) = fresh.filter(|z| !z.is_empty()) {
        ctx.data.dbs[dbi].insert(key, Value::ZSet(Box::new(z)), NO_EXPIRE, lru);
    }
    // GEOADD is ZADD underneath, notifications included.
    if added + changed > 0 {
        ctx.notify(notify::ZSET, "zadd", key);
    }
    ctx.out.integer(if ch { added + changed } else { added });
}

fn as_zset_mut(e: Option<&mut Entry>) -> Result<Option<&mut ZSetValue>, ()> {
    match e {
        None => Ok(None),
        Some(e) => match e.value_mut() {
            Value::ZSet(z) => Ok(Some(z)),
            _ => Err(()),
        },
    }
}

// ---------------------------------------------------------------------------
// GEOPOS / GEODIST / GEOHASH
// ---------------------------------------------------------------------------

fn geopos(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let (e, out) = ctx.read_with_out(args.get(1));
    let Ok(z) = as_zset(e) else {
        return out.error(WRONGTYPE);
    };
    out.array_len(args.len() - 2);
    for m in args.iter().skip(2) {
        match z.and_then(|z| z.score(m)) {
            None => out.null_array(),
            Some(s) => {
                let (lon, lat) = geohash::decode_score(s);
                out.array_len(2);
                reply_coord(out, lon);
                reply_coord(out, lat);
            }
        }
    }
}

fn geodist(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let to_meters = match args.len() {
        4 => 1.0,
        5 => match unit(args.get(4)) {
            Some(u) => u,
            None => return ctx.error(BAD_UNIT),
        },
        _ => return ctx.error(SYNTAX_ERR),
    };
    let (e, out) = ctx.read_with_out(args.get(1));
    let z = match as_zset(e) {
        Err(()) => return out.error(WRONGTYPE),
        Ok(None) => return out.null(),
        Ok(Some(z)) => z,
    };
    let (Some(a), Some(b)) = (z.score(args.get(2)), z.score(args.get(3))) else {
        return out.null();
    };
    let ((lon1, lat1), (lon2, lat2)) = (geohash::decode_score(a), geohash::decode_score(b));
    reply_distance(out, geohash::distance(lon1, lat1, lon2, lat2) / to_meters);
}

fn geohash_cmd(ctx: &mut ExecCtx) {
    let args = ctx.args;
    let (e, out) = ctx.read_with_out(args.get(1));
    let Ok(z) = as_zset(e) else {
        return out.error(WRONGTYPE);
    };
    out.array_len(args.len() - 2);
    for m in args.iter().skip(2) {
        match z.and_then(|z| z.score(m)) {
            None => out.null(),
            Some(s) => out.bulk(&geohash::geohash_string(s)),
        }
    }
}

// ---------------------------------------------------------------------------
// The searches
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavor {
    /// GEORADIUS: centre and radius from arguments 2..6.
    Coords,
    /// GEORADIUSBYMEMBER: a member's position, radius from arguments 3..5.
    Member,
    /// GEOSEARCH (key at 1) / GEOSEARCHSTORE (destination at 1, key at 2).
    Search { store: bool },
}

#[derive(Clone, Copy)]
struct Mode {
    flavor: Flavor,
    /// The _RO variants: no STORE option.
    no_store: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    None,
    Asc,
    Desc,
}

/// A match: member, distance from the centre (meters), score and position.
struct Point {
    member: Member,
    dist: f64,
    score: f64,
    lon: f64,
    lat: f64,
}

/// Where the results go.
enum Target {
    Reply {
        withdist: bool,
        withhash: bool,
        withcoord: bool,
    },
    Store {
        key: Vec<u8>,
        dist: bool,
    },
}

/// A search's outcome: the matches (sorted, at most COUNT; distances in the request's
/// unit), or None when the source key does not exist.
struct Outcome {
    points: Option<Vec<Point>>,
    target: Target,
}

fn distance_arg(num: &[u8], u: &[u8], what: &str) -> Result<(f64, f64), String> {
    let d = parse_f64(num).ok_or_else(|| format!("ERR need numeric {what}"))?;
    if d < 0.0 {
        return Err("ERR radius cannot be negative".into());
    }
    Ok((d, unit(u).ok_or(BAD_UNIT)?))
}

fn box_arg(w: &[u8], h: &[u8], u: &[u8]) -> Result<(f64, f64, f64), String> {
    let w = parse_f64(w).ok_or("ERR need numeric width")?;
    let h = parse_f64(h).ok_or("ERR need numeric height")?;
    if h < 0.0 || w < 0.0 {
        return Err("ERR height or width cannot be negative".into());
    }
    Ok((w, h, unit(u).ok_or(BAD_UNIT)?))
}

fn member_pos(z: &ZSetValue, m: &[u8]) -> Result<(f64, f64), String> {
    z.score(m)
        .map(geohash::decode_score)
        .ok_or_else(|| NO_MEMBER.to_string())
}

/// Parses and runs a search over `z` (None: the key is missing), checking arguments
/// in Redis's order so the first error is the one Redis reports.
fn evaluate(args: Args, mode: Mode, z: Option<&ZSetValue>) -> Result<Outcome, String> {
    let mut shape = Shape {
        lon: 0.0,
        lat: 0.0,
        kind: ShapeKind::Radius(0.0),
        conversion: 1.0,
    };
    let mut store: Option<(Vec<u8>, bool)> = None;
    let base = match mode.flavor {
        Flavor::Coords => {
            (shape.lon, shape.lat) = lon_lat(args.get(2), args.get(3))?;
            let (r, conv) = distance_arg(args.get(4), args.get(5), "radius")?;
            (shape.kind, shape.conversion) = (ShapeKind::Radius(r), conv);
            6
        }
        Flavor::Member => {
            if let Some(z) = z {
                (shape.lon, shape.lat) = member_pos(z, args.get(2))?;
                let (r, conv) = distance_arg(args.get(3), args.get(4), "radius")?;
                (shape.kind, shape.conversion) = (ShapeKind::Radius(r), conv);
            }
            5
        }
        Flavor::Search { store: false } => 2,
        Flavor::Search { store: true } => {
            store = Some((args.get(1).to_vec(), false));
            3
        }
    };
    let search = matches!(mode.flavor, Flavor::Search { .. });
    let search_store = mode.flavor == (Flavor::Search { store: true });
    let (mut withdist, mut withhash, mut withcoord, mut any) = (false, false, false, false);
    let (mut from_member, mut from_loc, mut by_radius, mut by_box) = (false, false, false, false);
    let mut order = Order::None;
    let mut count = 0usize;
    let mut i = base;
    while i < args.len() {
        let left = args.len() - i - 1;
        if args.is(i, "withdist") {
            withdist = true;
        } else if args.is(i, "withhash") {
            withhash = true;
        } else if args.is(i, "withcoord") {
            withcoord = true;
        } else if args.is(i, "any") {
            any = true;
        } else if args.is(i, "asc") {
            order = Order::Asc;
        } else if args.is(i, "desc") {
            order = Order::Desc;
        } else if args.is(i, "count") && left >= 1 {
            let n = parse_i64(args.get(i + 1)).ok_or(NOT_INT)?;
            if n <= 0 {
                return Err("ERR COUNT must be > 0".into());
            }
            count = n as usize;
            i += 1;
        } else if (args.is(i, "store") || args.is(i, "storedist"))
            && left >= 1
            && !mode.no_store
            && !search
        {
            store = Some((args.get(i + 1).to_vec(), args.is(i, "storedist")));
            i += 1;
        } else if args.is(i, "storedist") && search_store {
            if let Some(s) = store.as_mut() {
                s.1 = true;
            }
        } else if args.is(i, "frommember") && left >= 1 && search && !from_loc {
            if let Some(z) = z {
                (shape.lon, shape.lat) = member_pos(z, args.get(i + 1))?;
            }
            from_member = true;
            i += 1;
        } else if args.is(i, "fromlonlat") && left >= 2 && search && !from_member {
            (shape.lon, shape.lat) = lon_lat(args.get(i + 1), args.get(i + 2))?;
            from_loc = true;
            i += 2;
        } else if args.is(i, "byradius") && left >= 2 && search && !by_box {
            let (r, conv) = distance_arg(args.get(i + 1), args.get(i + 2), "radius")?;
            (shape.kind, shape.conversion) = (ShapeKind::Radius(r), conv);
            by_radius = true;
            i += 2;
        } else if args.is(i, "bybox") && left >= 3 && search && !by_radius {
            let (width, height, conv) = box_arg(args.get(i + 1), args.get(i + 2), args.get(i + 3))?;
            (shape.kind, shape.conversion) = (ShapeKind::Box { width, height }, conv);
            by_box = true;
            i += 3;
        } else {
            return Err(SYNTAX_ERR.into());
        }
        i += 1;
    }
    let name = String::from_utf8_lossy(args.get(0)).into_owned();
    if store.is_some() && (withdist || withhash || withcoord) {
        let what = if search_store {
            "GEOSEARCHSTORE"
        } else {
            "STORE option in GEORADIUS"
        };
        return Err(format!(
            "ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        ));
    }
    if search && !(from_member || from_loc) {
        return Err(format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        ));
    }
    if search && !(by_radius || by_box) {
        return Err(format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {name}"
        ));
    }
    if any && count == 0 {
        return Err("ERR the ANY argument requires COUNT argument".into());
    }
    let target = match store {
        Some((key, dist)) => Target::Store { key, dist },
        None => Target::Reply {
            withdist,
            withhash,
            withcoord,
        },
    };
    let Some(z) = z else {
        return Ok(Outcome {
            points: None,
            target,
        });
    };
    // COUNT without ANY means the nearest ones.
    if count != 0 && order == Order::None && !any {
        order = Order::Asc;
    }
    let mut points = search_set(z, &shape, if any { count } else { 0 });
    match order {
        Order::Asc => points.sort_by(|a, b| a.dist.total_cmp(&b.dist)),
        Order::Desc => points.sort_by(|a, b| b.dist.total_cmp(&a.dist)),
        Order::None => {}
    }
    if count != 0 {
        points.truncate(count);
    }
    for p in &mut points {
        p.dist /= shape.conversion;
    }
    Ok(Outcome {
        points: Some(points),
        target,
    })
}

/// The members inside the shape, scanning its cell and neighbours in Redis's order
/// (each cell in score order); stops at `limit` matches when non-zero.
fn search_set(z: &ZSetValue, shape: &Shape, limit: usize) -> Vec<Point> {
    let cells = geohash::search_cells(shape);
    let mut out = Vec::new();
    let mut last: Option<usize> = None;
    for (i, cell) in cells.iter().enumerate() {
        if cell.is_zero() {
            continue;
        }
        // Huge radiuses can make neighbours coincide: skip a repeat of the last one.
        if let Some(l) = last.filter(|&l| l > 0) {
            if cells[l] == *cell {
                continue;
            }
        }
        if limit != 0 && out.len() >= limit {
            break;
        }
        let (min, max) = geohash::cell_scores(*cell);
        let range = ScoreRange {
            min,
            minex: false,
            max,
            maxex: true,
        };
        let (lo, hi) = z.score_window(&range);
        for (m, score) in z.iter_from(lo, false).take(hi - lo) {
            let (lon, lat) = geohash::decode_score(score);
            if let Some(dist) = geohash::within(shape, lon, lat) {
                out.push(Point {
                    member: m.into(),
                    dist,
                    score,
                    lon,
                    lat,
                });
            }
            if limit != 0 && out.len() >= limit {
                break;
            }
        }
        last = Some(i);
    }
    out
}

/// Replies with the matches of a non-storing search.
fn reply_points(out: &mut ReplyWriter, points: &[Point], target: &Target) {
    let Target::Reply {
        withdist,
        withhash,
        withcoord,
    } = *target
    else {
        return;
    };
    let extra = usize::from(withdist) + usize::from(withhash) + usize::from(withcoord);
    out.array_len(points.len());
    for p in points {
        if extra > 0 {
            out.array_len(extra + 1);
        }
        out.bulk(&p.member);
        if withdist {
            reply_distance(out, p.dist);
        }
        if withhash {
            out.integer(p.score as i64);
        }
        if withcoord {
            out.array_len(2);
            reply_coord(out, p.lon);
            reply_coord(out, p.lat);
        }
    }
}

/// What a storing search writes: the destination key and its new value (None:
/// delete it).
type StoreWrite = (Vec<u8>, Option<Vec<(Member, f64)>>);

/// Turns an outcome into the reply (written now for non-storing searches) and, for
/// STORE, the write to make on the destination's shard and the count to reply.
fn finish(out: &mut ReplyWriter, o: Outcome) -> Option<(StoreWrite, usize)> {
    match o.target {
        Target::Reply { .. } => {
            match &o.points {
                Some(p) if !p.is_empty() => reply_points(out, p, &o.target),
                _ => out.array_len(0),
            }
            None
        }
        Target::Store { key, dist } => {
            let points = o.points.unwrap_or_default();
            let n = points.len();
            let mut items: Vec<(Member, f64)> = points
                .into_iter()
                .map(|p| (p.member, if dist { p.dist } else { p.score }))
                .collect();
            items.sort_by(|a, b| cmp_entries(a.1, &a.0, b.1, &b.0));
            Some(((key, (n > 0).then_some(items)), n))
        }
    }
}

/// The keyspace event of a storing search: GEOSEARCHSTORE's own, or the one
/// GEORADIUS and GEORADIUSBYMEMBER share.
fn store_event(mode: Mode) -> &'static str {
    if mode.flavor == (Flavor::Search { store: true }) {
        "geosearchstore"
    } else {
        "georadiusstore"
    }
}

/// Writes a storing search's result: replaces the destination (and its TTL), or
/// deletes it when nothing matched, notifying as Redis does. True if the destination
/// changed.
fn store(db: &mut Db, w: StoreWrite, limits: &EncodingLimits, event: &str) -> bool {
    match w.1 {
        Some(items) => {
            let z = ZSetValue::from_sorted(items, limits);
            db.insert(
                &w.0,
                Value::ZSet(Box::new(z)),
                NO_EXPIRE,
                crate::util::lru_clock(),
            );
            crate::pubsub::notify(notify::ZSET, event, &w.0, db.index());
            true
        }
        None => {
            let existed = db.remove(&w.0).is_some();
            if existed {
                crate::pubsub::notify(notify::GENERIC, "del", &w.0, db.index());
            }
            existed
        }
    }
}

/// The argument index of the source key.
fn source_index(mode: Mode) -> usize {
    if mode.flavor == (Flavor::Search { store: true }) {
        2
    } else {
        1
    }
}

/// A search whose keys all live on this shard.
fn search_local(ctx: &mut ExecCtx, mode: Mode) {
    let args = ctx.args;
    let r = match as_zset(ctx.lookup_read(args.get(source_index(mode)))) {
        Err(()) => Err(WRONGTYPE.to_string()),
        Ok(z) => evaluate(args, mode, z),
    };
    let o = match r {
        Ok(o) => o,
        Err(e) => return ctx.error(&e),
    };
    // A search without STORE reads; a storing one writes its destination only
    // (GEOSEARCHSTORE's first key, GEORADIUS's second).
    match finish(&mut ctx.out, o) {
        Some((w, n)) => {
            let limits = ctx.data.limits;
            let changed = store(ctx.db(), w, &limits, store_event(mode));
            let dst = if source_index(mode) == 1 { 1 } else { 0 };
            ctx.only_changed(dst, changed);
            ctx.out.integer(n as i64);
        }
        None => ctx.nothing_changed(),
    }
}

/// A storing search whose source and destination are on different shards: both keys
/// locked, the search run on the source's shard, the result written on the
/// destination's.
async fn search_across(g: &mut GlobalCtx<'_>, mode: Mode) {
    let db = g.session.db;
    let cell = g.session.cell.clone();
    let owned = OwnedArgs::new(&g.args);
    let src = g.args[source_index(mode)].clone();
    let keys: Vec<Vec<u8>> = {
        let spec = crate::commands::lookup(&g.args[0]).map(|(_, s)| s.keys);
        spec.map(|k| {
            k.positions(&owned.args())
                .map(|p| g.args[p].clone())
                .collect()
        })
        .unwrap_or_else(|| vec![src.clone()])
    };
    let mut op = MultiShardOp::lock_keys(g.owner(), &cell, db, &keys).await;
    let argv = g.args.clone();
    let r = op
        .on(&cell, cell.shard_of(&src), move |d| {
            let owned = OwnedArgs::new(&argv);
            let now = crate::util::now_ms();
            let e = d.dbs[db].get(&src, now);
            if e.is_some() {
                d.stats.keyspace_hits += 1;
            } else {
                d.stats.keyspace_misses += 1;
            }
            match as_zset(e) {
                Err(()) => Err(WRONGTYPE.to_string()),
                Ok(z) => evaluate(owned.args(), mode, z),
            }
        })
        .await;
    let mut reply = Vec::new();
    let mut w = ReplyWriter {
        out: &mut reply,
        proto: g.proto(),
    };
    // Only a STORE's destination can change; the source is only read.
    let mut stored: Option<Vec<u8>> = None;
    match r {
        Err(e) => w.error(&e),
        Ok(o) => {
            if let Some((write, n)) = finish(&mut w, o) {
                let dst = write.0.clone();
                let changed = op
                    .on(&cell, cell.shard_of(&write.0), move |d| {
                        let limits = d.limits;
                        store(&mut d.dbs[db], write, &limits, store_event(mode))
                    })
                    .await;
                stored = changed.then_some(dst);
                w.integer(n as i64);
            }
        }
    }
    match &stored {
        Some(dst) => op.written_only(&[(db, dst.as_slice())]),
        None => op.set_read_only(),
    }
    g.release(op).await;
    g.out.extend_from_slice(&reply);
}

macro_rules! searches {
    ($($local:ident, $flavor:expr, $no_store:expr;)*) => {$(
        fn $local(ctx: &mut ExecCtx) {
            search_local(ctx, Mode { flavor: $flavor, no_store: $no_store })
        }
    )*};
}

searches! {
    georadius, Flavor::Coords, false;
    georadius_ro, Flavor::Coords, true;
    georadiusbymember, Flavor::Member, false;
    georadiusbymember_ro, Flavor::Member, true;
    geosearch, Flavor::Search { store: false }, true;
    geosearchstore, Flavor::Search { store: true }, false;
}

macro_rules! searches_across {
    ($($across:ident, $flavor:expr;)*) => {$(
        fn $across<'a>(g: &'a mut GlobalCtx<'_>) -> Fut<'a> {
            Box::pin(search_across(g, Mode { flavor: $flavor, no_store: false }))
        }
    )*};
}

searches_across! {
    georadius_across, Flavor::Coords;
    georadiusbymember_across, Flavor::Member;
    geosearchstore_across, Flavor::Search { store: true };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(unit(b"KM"), Some(1000.0));
        assert_eq!(unit(b"mi"), Some(1609.34));
        assert_eq!(unit(b"yd"), None);
    }

    #[test]
    fn coordinates_are_validated() {
        assert!(lon_lat(b"10", b"20").is_ok());
        assert_eq!(
            lon_lat(b"181", b"0").unwrap_err(),
            "ERR invalid longitude,latitude pair 181.000000,0.000000"
        );
        assert_eq!(lon_lat(b"x", b"0").unwrap_err(), NOT_FLOAT);
    }
}
