//! Geohash as Redis's GEO commands use it: 26 steps per axis interleaved into a 52-bit
//! integer (latitude in the even bits, longitude in the odd ones) over the Web
//! Mercator latitude range, stored as a sorted set score; the area search that covers
//! a circle or box with a cell and its 8 neighbours; haversine distances.

pub const STEP_MAX: u8 = 26;
pub const LAT_MIN: f64 = -85.051_128_78;
pub const LAT_MAX: f64 = 85.051_128_78;
pub const LON_MIN: f64 = -180.0;
pub const LON_MAX: f64 = 180.0;
pub const EARTH_RADIUS_M: f64 = 6_372_797.560_856;
/// Half the Mercator projection's width, in meters: where step estimation starts.
const MERCATOR_MAX: f64 = 20_037_726.37;
const D_R: f64 = std::f64::consts::PI / 180.0;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    pub min: f64,
    pub max: f64,
}

pub const LON_RANGE: Range = Range {
    min: LON_MIN,
    max: LON_MAX,
};
pub const LAT_RANGE: Range = Range {
    min: LAT_MIN,
    max: LAT_MAX,
};

/// A cell: `step` bits per axis, interleaved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hash {
    pub bits: u64,
    pub step: u8,
}

impl Hash {
    /// A cleared neighbour: not searched.
    pub fn is_zero(&self) -> bool {
        self.bits == 0 && self.step == 0
    }

    /// The cell's bits shifted to the 52-bit score scale.
    pub fn align52(&self) -> u64 {
        self.bits << (52 - u32::from(self.step) * 2)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Area {
    pub lon: Range,
    pub lat: Range,
}

#[inline]
fn deg_rad(d: f64) -> f64 {
    d * D_R
}

#[inline]
fn rad_deg(r: f64) -> f64 {
    r / D_R
}

/// Spreads the 32 bits of `v` to the even bits of a u64.
fn spread(v: u32) -> u64 {
    let mut x = v as u64;
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// Gathers the even bits of `x` into a u32.
fn squash(x: u64) -> u32 {
    let mut x = x & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x >> 16)) & 0x0000_0000_FFFF_FFFF;
    x as u32
}

/// Encodes a position in the given ranges; None outside them (or outside the
/// WGS84/Mercator limits, which Redis always checks).
pub fn encode(lon_r: Range, lat_r: Range, lon: f64, lat: f64, step: u8) -> Option<Hash> {
    if !(LON_MIN..=LON_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return None;
    }
    if lat < lat_r.min || lat > lat_r.max || lon < lon_r.min || lon > lon_r.max {
        return None;
    }
    let scale = (1u64 << step) as f64;
    let lat_off = (lat - lat_r.min) / (lat_r.max - lat_r.min) * scale;
    let lon_off = (lon - lon_r.min) / (lon_r.max - lon_r.min) * scale;
    // Float to u32 truncates, as C's conversion does for these in-range values.
    Some(Hash {
        bits: spread(lat_off as u32) | (spread(lon_off as u32) << 1),
        step,
    })
}

pub fn encode_wgs84(lon: f64, lat: f64, step: u8) -> Option<Hash> {
    encode(LON_RANGE, LAT_RANGE, lon, lat, step)
}

/// The cell's area in the given ranges.
pub fn decode(lon_r: Range, lat_r: Range, h: Hash) -> Area {
    let lat_i = squash(h.bits) as f64;
    let lon_i = squash(h.bits >> 1) as f64;
    let cells = (1u64 << h.step) as f64;
    let (lat_scale, lon_scale) = (lat_r.max - lat_r.min, lon_r.max - lon_r.min);
    Area {
        lat: Range {
            min: lat_r.min + (lat_i / cells) * lat_scale,
            max: lat_r.min + ((lat_i + 1.0) / cells) * lat_scale,
        },
        lon: Range {
            min: lon_r.min + (lon_i / cells) * lon_scale,
            max: lon_r.min + ((lon_i + 1.0) / cells) * lon_scale,
        },
    }
}

/// The centre of a score's cell: (longitude, latitude), clamped to the limits.
pub fn decode_score(score: f64) -> (f64, f64) {
    let h = Hash {
        bits: score as u64,
        step: STEP_MAX,
    };
    let a = decode(LON_RANGE, LAT_RANGE, h);
    let lon = ((a.lon.min + a.lon.max) / 2.0).clamp(LON_MIN, LON_MAX);
    let lat = ((a.lat.min + a.lat.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (lon, lat)
}

/// The score a position is stored under.
pub fn score_of(lon: f64, lat: f64) -> Option<f64> {
    encode_wgs84(lon, lat, STEP_MAX).map(|h| h.align52() as f64)
}

/// Steps the cell one column east (`d > 0`) or west, wrapping around.
fn move_x(h: &mut Hash, d: i8) {
    if d == 0 || h.step == 0 {
        return;
    }
    let shift = 64 - u32::from(h.step) * 2;
    let mut x = h.bits & 0xAAAA_AAAA_AAAA_AAAA;
    let y = h.bits & 0x5555_5555_5555_5555;
    let zz = 0x5555_5555_5555_5555u64 >> shift;
    if d > 0 {
        x = x.wrapping_add(zz + 1);
    } else {
        x |= zz;
        x = x.wrapping_sub(zz + 1);
    }
    x &= 0xAAAA_AAAA_AAAA_AAAAu64 >> shift;
    h.bits = x | y;
}

/// Steps the cell one row north (`d > 0`) or south, wrapping around.
fn move_y(h: &mut Hash, d: i8) {
    if d == 0 || h.step == 0 {
        return;
    }
    let shift = 64 - u32::from(h.step) * 2;
    let x = h.bits & 0xAAAA_AAAA_AAAA_AAAA;
    let mut y = h.bits & 0x5555_5555_5555_5555;
    let zz = 0xAAAA_AAAA_AAAA_AAAAu64 >> shift;
    if d > 0 {
        y = y.wrapping_add(zz + 1);
    } else {
        y |= zz;
        y = y.wrapping_sub(zz + 1);
    }
    y &= 0x5555_5555_5555_5555u64 >> shift;
    h.bits = x | y;
}

fn moved(h: Hash, dx: i8, dy: i8) -> Hash {
    let mut n = h;
    move_x(&mut n, dx);
    move_y(&mut n, dy);
    n
}

/// What to search, in meters once multiplied by `conversion`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ShapeKind {
    Radius(f64),
    Box { width: f64, height: f64 },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub lon: f64,
    pub lat: f64,
    pub kind: ShapeKind,
    /// Meters per unit of the given sizes.
    pub conversion: f64,
}

/// The step whose cell size suits searching `range_m` meters around latitude `lat`.
pub fn estimate_steps(mut range_m: f64, lat: f64) -> u8 {
    if range_m == 0.0 {
        return STEP_MAX;
    }
    let mut step: i32 = 1;
    while range_m < MERCATOR_MAX {
        range_m *= 2.0;
        step += 1;
    }
    // Make sure the range is included in most of the base cases.
    step -= 2;
    // Cells narrow towards the poles.
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, STEP_MAX as i32) as u8
}

/// The bounding box of a shape: [min lon, min lat, max lon, max lat].
pub fn bounding_box(s: &Shape) -> [f64; 4] {
    let (half_h, half_w) = match s.kind {
        ShapeKind::Radius(r) => (r, r),
        ShapeKind::Box { width, height } => (height / 2.0, width / 2.0),
    };
    let (height, width) = (s.conversion * half_h, s.conversion * half_w);
    let lat_delta = rad_deg(height / EARTH_RADIUS_M);
    let lon_delta_top = rad_deg(width / EARTH_RADIUS_M / deg_rad(s.lat + lat_delta).cos());
    let lon_delta_bottom = rad_deg(width / EARTH_RADIUS_M / deg_rad(s.lat - lat_delta).cos());
    // The wider edge is the one nearer the equator.
    let delta = if s.lat < 0.0 {
        lon_delta_bottom
    } else {
        lon_delta_top
    };
    [
        s.lon - delta,
        s.lat - lat_delta,
        s.lon + delta,
        s.lat + lat_delta,
    ]
}

/// The cells to scan for a shape: its own cell, then north, south, east, west,
/// north-east, north-west, south-east, south-west (cleared ones are skipped).
pub fn search_cells(s: &Shape) -> [Hash; 9] {
    let [min_lon, min_lat, max_lon, max_lat] = bounding_box(s);
    let radius_m = s.conversion
        * match s.kind {
            ShapeKind::Radius(r) => r,
            ShapeKind::Box { width, height } => {
                ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
            }
        };
    let mut steps = estimate_steps(radius_m, s.lat);
    let cells_at = |steps: u8| {
        let h = encode_wgs84(s.lon, s.lat, steps).unwrap_or(Hash {
            bits: 0,
            step: steps,
        });
        let n = [
            h,
            moved(h, 0, 1),
            moved(h, 0, -1),
            moved(h, 1, 0),
            moved(h, -1, 0),
            moved(h, 1, 1),
            moved(h, -1, 1),
            moved(h, 1, -1),
            moved(h, -1, -1),
        ];
        (n, decode(LON_RANGE, LAT_RANGE, h))
    };
    let (mut cells, mut area) = cells_at(steps);
    // Near the edge of its cell, a neighbour may not reach the search area's edge:
    // then one step coarser.
    let edge = |h: Hash| decode(LON_RANGE, LAT_RANGE, h);
    let too_small = edge(cells[1]).lat.max < max_lat
        || edge(cells[2]).lat.min > min_lat
        || edge(cells[3]).lon.max < max_lon
        || edge(cells[4]).lon.min > min_lon;
    if steps > 1 && too_small {
        steps -= 1;
        (cells, area) = cells_at(steps);
    }
    // Drop the neighbours the area does not reach.
    if steps >= 2 {
        let clear = |cells: &mut [Hash; 9], idx: [usize; 3]| {
            for i in idx {
                cells[i] = Hash::default();
            }
        };
        if area.lat.min < min_lat {
            clear(&mut cells, [2, 8, 7]);
        }
        if area.lat.max > max_lat {
            clear(&mut cells, [1, 5, 6]);
        }
        if area.lon.min < min_lon {
            clear(&mut cells, [4, 8, 6]);
        }
        if area.lon.max > max_lon {
            clear(&mut cells, [3, 7, 5]);
        }
    }
    cells
}

/// The score interval [min, max) of a cell.
pub fn cell_scores(h: Hash) -> (f64, f64) {
    let min = h.align52();
    let next = Hash {
        bits: h.bits + 1,
        step: h.step,
    };
    (min as f64, next.align52() as f64)
}

fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_M * (deg_rad(lat2) - deg_rad(lat1)).abs()
}

/// Haversine distance in meters.
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let v = ((deg_rad(lon2) - deg_rad(lon1)) / 2.0).sin();
    // Same longitude: the cheaper latitude distance.
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let (lat1r, lat2r) = (deg_rad(lat1), deg_rad(lat2));
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_M * a.sqrt().asin()
}

/// The distance from the shape's centre to (lon, lat) if the point is inside it.
pub fn within(s: &Shape, lon: f64, lat: f64) -> Option<f64> {
    match s.kind {
        ShapeKind::Radius(r) => {
            let d = distance(s.lon, s.lat, lon, lat);
            (d <= r * s.conversion).then_some(d)
        }
        ShapeKind::Box { width, height } => {
            let (w, h) = (width * s.conversion, height * s.conversion);
            if lat_distance(lat, s.lat) > h / 2.0 {
                return None;
            }
            if distance(lon, lat, s.lon, lat) > w / 2.0 {
                return None;
            }
            Some(distance(s.lon, s.lat, lon, lat))
        }
    }
}

/// The standard 11-character geohash of a stored score (re-encoded over the full
/// -90..90 latitude range; the last character is always '0').
pub fn geohash_string(score: f64) -> [u8; 11] {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let (lon, lat) = decode_score(score);
    let std_lat = Range {
        min: -90.0,
        max: 90.0,
    };
    let bits = encode(LON_RANGE, std_lat, lon, lat, STEP_MAX).map_or(0, |h| h.bits);
    let mut out = [b'0'; 11];
    for (i, c) in out.iter_mut().enumerate().take(10) {
        *c = ALPHABET[((bits >> (52 - (i + 1) * 5)) & 0x1f) as usize];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_and_squash_invert() {
        for v in [0u32, 1, 0x3ff_ffff, 0xdead_beef, u32::MAX] {
            assert_eq!(squash(spread(v)), v);
        }
    }

    #[test]
    fn known_scores_and_hashes() {
        // Values from Redis's own test suite.
        assert_eq!(score_of(-73.9454966, 40.747533), Some(1791875804419201.0));
        assert_eq!(
            &geohash_string(score_of(-5.6, 42.6).unwrap()),
            b"ezs42e44yx0"
        );
        let (lon, lat) = decode_score(score_of(13.361389, 38.115556).unwrap());
        assert!((lon - 13.361389).abs() < 1e-5 && (lat - 38.115556).abs() < 1e-5);
    }

    #[test]
    fn distances() {
        let d = distance(13.361389, 38.115556, 15.087269, 37.502669);
        assert!((166274.0..166275.0).contains(&d), "{d}");
        assert_eq!(distance(1.0, 2.0, 1.0, 2.0), 0.0);
    }

    #[test]
    fn out_of_range_positions_do_not_encode() {
        assert_eq!(score_of(181.0, 0.0), None);
        assert_eq!(score_of(0.0, 85.06), None);
    }
}
