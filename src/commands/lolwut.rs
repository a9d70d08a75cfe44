//! LOLWUT [VERSION v] [args]: computer art and the version, as Redis 7.0 draws it.
//! Without VERSION (or with one other than 5 or 6) 7.0 answers only "Redis ver.
//! 7.0.15"; VERSION 5 draws Georg Nees's "Schotter" in Braille characters, VERSION 6
//! a city skyline in four terminal grays. The drawings are random each time, as in
//! Redis; their geometry, limits and texts are lolwut5.c's and lolwut6.c's.

use super::strings::cmd;
use super::table::{flags::*, CommandSpec, KeySpec, Kind};
use super::{parse_i64, ClientCtx};
use crate::server::REDIS_VERSION;

const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";

#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        group: "server",
        acl: &["@read", "@fast"],
        ..cmd!("lolwut", -1, READONLY | FAST, KeySpec::None, Kind::Client(lolwut), "5.0.0", "Display some computer art and the Redis version")
    },
];

fn lolwut(ctx: &mut ClientCtx) {
    let mut first = 1;
    let mut version = None;
    if ctx.args.len() >= 3 && ctx.args.is(1, "version") {
        match parse_i64(ctx.args.get(2)) {
            // lolwut.c prints it with %u: the low 32 bits decide.
            Some(v) => version = Some(v as u32),
            None => return ctx.out.error(NOT_AN_INTEGER),
        }
        first = 3;
    }
    // Each drawing reads its own leading arguments (longs, in order, the first bad
    // one refused) and ignores the rest; the version banner reads none.
    let wanted = match version {
        Some(5) => 3,
        Some(6) => 2,
        _ => 0,
    };
    let mut numbers = Vec::new();
    for i in (first..ctx.args.len()).take(wanted) {
        match parse_i64(ctx.args.get(i)) {
            Some(n) => numbers.push(n),
            None => return ctx.out.error(NOT_AN_INTEGER),
        }
    }
    let mut rng = Rand::seeded();
    let text = match version {
        Some(5) => {
            let arg = |i: usize, default: i64, max: i64| {
                numbers.get(i).copied().unwrap_or(default).clamp(1, max)
            };
            let (cols, per_row, per_col) = (arg(0, 66, 1000), arg(1, 8, 200), arg(2, 12, 200));
            let canvas = schotter(&mut rng, cols as i32, per_row as i32, per_col as i32);
            format!(
                "{}\nGeorg Nees - schotter, plotter on paper, 1968. Redis ver. {REDIS_VERSION}\n",
                render_braille(&canvas)
            )
        }
        Some(6) => {
            let cols = numbers.first().copied().unwrap_or(80).clamp(1, 1000);
            let rows = numbers.get(1).copied().unwrap_or(20).clamp(1, 1000);
            let mut canvas = Canvas::new(cols as i32, rows as i32, 3);
            skyline(&mut rng, &mut canvas);
            format!(
                "{}\nDedicated to the 8 bit game developers of past and present.\n\
                 Original 8 bit image from Plaguemon by hikikomori. Redis ver. {REDIS_VERSION}\n",
                render_grays(&canvas)
            )
        }
        _ => format!("Redis ver. {REDIS_VERSION}\n"),
    };
    ctx.out.verbatim("txt", text.as_bytes());
}

/// C's rand() as the drawings use it: 31-bit values (xorshift; art, not secrets).
struct Rand(u64);

const RAND_MAX: i32 = i32::MAX;

impl Rand {
    fn seeded() -> Rand {
        Rand(crate::util::now_us() | 1)
    }

    fn next(&mut self) -> i32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 33) as i32
    }
}

/// A grid of small color numbers; drawing outside it is ignored (lolwut.c's canvas).
struct Canvas {
    width: i32,
    height: i32,
    pixels: Vec<u8>,
}

impl Canvas {
    fn new(width: i32, height: i32, color: u8) -> Canvas {
        Canvas {
            width,
            height,
            pixels: vec![color; (width.max(0) as usize) * (height.max(0) as usize)],
        }
    }

    fn set(&mut self, x: i32, y: i32, color: u8) {
        if (0..self.width).contains(&x) && (0..self.height).contains(&y) {
            self.pixels[(x + y * self.width) as usize] = color;
        }
    }

    fn get(&self, x: i32, y: i32) -> u8 {
        if (0..self.width).contains(&x) && (0..self.height).contains(&y) {
            self.pixels[(x + y * self.width) as usize]
        } else {
            0
        }
    }

    /// Bresenham's line.
    fn line(&mut self, (mut x1, mut y1): (i32, i32), (x2, y2): (i32, i32), color: u8) {
        let (dx, dy) = ((x2 - x1).abs(), (y2 - y1).abs());
        let (sx, sy) = (if x1 < x2 { 1 } else { -1 }, if y1 < y2 { 1 } else { -1 });
        let mut err = dx - dy;
        loop {
            self.set(x1, y1, color);
            if x1 == x2 && y1 == y2 {
                break;
            }
            let e2 = err * 2;
            if e2 > -dy {
                err -= dy;
                x1 += sx;
            }
            if e2 < dx {
                err += dx;
                y1 += sy;
            }
        }
    }

    /// A square of side `size` centred on (x, y), rotated by `angle`: its corners
    /// are points of a circle, a quarter turn apart, starting at 45 degrees.
    fn square(&mut self, x: i32, y: i32, size: f32, angle: f32, color: u8) {
        let size = (size / std::f32::consts::SQRT_2).round();
        let mut k = std::f32::consts::FRAC_PI_4 + angle;
        let mut corners = [(0, 0); 4];
        for corner in &mut corners {
            let kd = f64::from(k);
            *corner = (
                (kd.sin() * f64::from(size) + f64::from(x)).round() as i32,
                (kd.cos() * f64::from(size) + f64::from(y)).round() as i32,
            );
            k += std::f32::consts::FRAC_PI_2;
        }
        for j in 0..4 {
            self.line(corners[j], corners[(j + 1) % 4], color);
        }
    }
}

/// Schotter: rows of squares, more rotated and displaced the lower the row.
fn schotter(rng: &mut Rand, cols: i32, per_row: i32, per_col: i32) -> Canvas {
    let width = cols * 2;
    let padding = if width > 4 { 2 } else { 0 };
    let side = (width - padding * 2) as f32 / per_row as f32;
    let height = (side * per_col as f32) as i32 + padding * 2;
    let mut canvas = Canvas::new(width, height, 0);
    let jitter =
        |rng: &mut Rand, y: i32| rng.next() as f32 / RAND_MAX as f32 / per_col as f32 * y as f32;
    for y in 0..per_col {
        for x in 0..per_row {
            let mut sx = (x as f32 * side + side / 2.0 + padding as f32) as i32;
            let mut sy = (y as f32 * side + side / 2.0 + padding as f32) as i32;
            let mut angle = 0.0;
            if y > 1 {
                let mut r = [jitter(rng, y), jitter(rng, y), jitter(rng, y)];
                for v in &mut r {
                    if rng.next() % 2 == 1 {
                        *v = -*v;
                    }
                }
                angle = r[0];
                sx = (sx as f32 + r[1] * side / 3.0) as i32;
                sy = (sy as f32 + r[2] * side / 3.0) as i32;
            }
            canvas.square(sx, sy, side, angle, 1);
        }
    }
    canvas
}

/// Each 2x4 block of pixels as one Braille character (U+2800 + the dot bits).
fn render_braille(canvas: &Canvas) -> String {
    // Dot bit of each pixel of a block, by (dx, dy).
    const DOTS: [(i32, i32, u32); 8] = [
        (0, 0, 0),
        (0, 1, 1),
        (0, 2, 2),
        (1, 0, 3),
        (1, 1, 4),
        (1, 2, 5),
        (0, 3, 6),
        (1, 3, 7),
    ];
    let mut text = String::new();
    for y in (0..canvas.height).step_by(4) {
        for x in (0..canvas.width).step_by(2) {
            let bits = DOTS
                .iter()
                .filter(|&&(dx, dy, _)| canvas.get(x + dx, y + dy) != 0)
                .fold(0, |acc, &(_, _, bit)| acc | (1 << bit));
            text.push(char::from_u32(0x2800 + bits).unwrap_or(' '));
        }
        if y != canvas.height - 1 {
            text.push('\n');
        }
    }
    text
}

/// One building of the skyline.
struct Skyscraper {
    xoff: i32,
    width: i32,
    height: i32,
    windows: bool,
    color: u8,
}

fn skyscraper(rng: &mut Rand, canvas: &mut Canvas, s: &Skyscraper) {
    let start_y = canvas.height - 1;
    let end_y = start_y - s.height + 1;
    for y in (end_y..=start_y).rev() {
        for x in s.xoff..s.xoff + s.width {
            // The roof is four pixels narrower.
            if y == end_y && (x <= s.xoff + 1 || x >= s.xoff + s.width - 2) {
                continue;
            }
            let mut color = s.color;
            let inner =
                x > s.xoff + 1 && x < s.xoff + s.width - 2 && y > end_y + 1 && y < start_y - 1;
            if s.windows && inner {
                let (relx, rely) = (x - (s.xoff + 1), y - (end_y + 1));
                // Windows two pixels wide and one tall (terminal cells are tall).
                if (relx / 2) % 2 != 0 && rely % 2 != 0 {
                    loop {
                        color = (1 + rng.next() % 2) as u8;
                        if color != s.color {
                            break;
                        }
                    }
                    if relx % 2 != 0 {
                        color = canvas.get(x - 1, y);
                    }
                }
            }
            canvas.set(x, y, color);
        }
    }
}

/// Two rows of plain buildings behind (the lighter always further back), then a row
/// with windows in front, as in 8-bit games' parallax backgrounds.
fn skyline(rng: &mut Rand, canvas: &mut Canvas) {
    let h = canvas.height;
    for color in [2u8, 1] {
        let mut offset = -10;
        while offset < canvas.width {
            offset += rng.next() % 8;
            let width = 10 + rng.next() % 9;
            let height = if color == 2 {
                h / 2 + (rng.next() % h) / 2
            } else {
                h / 2 + (rng.next() % h) / 3
            };
            let s = Skyscraper {
                xoff: offset,
                width,
                height,
                windows: false,
                color,
            };
            skyscraper(rng, canvas, &s);
            offset += if color == 2 { width / 2 } else { width + 1 };
        }
    }
    let mut offset = -10;
    while offset < canvas.width {
        offset += rng.next() % 8;
        let mut width = 5 + rng.next() % 14;
        if width % 4 != 0 {
            width += width % 3;
        }
        let s = Skyscraper {
            xoff: offset,
            width,
            height: h / 3 + (rng.next() % h) / 2,
            windows: true,
            color: 0,
        };
        skyscraper(rng, canvas, &s);
        offset += width + 5;
    }
}

/// Each pixel as a space on one of the terminal's four grays (foreground and
/// background both set, for the same look on every terminal).
fn render_grays(canvas: &Canvas) -> String {
    let mut text = String::new();
    for y in 0..canvas.height {
        for x in 0..canvas.width {
            let escape = match canvas.get(x, y) {
                1 => "0;90;100m",
                2 => "0;37;47m",
                3 => "0;97;107m",
                _ => "0;30;40m",
            };
            text.push_str("\x1b[");
            text.push_str(escape);
            text.push_str(" \x1b[0m");
        }
        if y != canvas.height - 1 {
            text.push('\n');
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braille_blocks_and_canvas_size() {
        let mut rng = Rand(12345);
        let canvas = schotter(&mut rng, 66, 8, 12);
        assert_eq!(canvas.width, 132);
        // (132 - 4) / 8 = 16 per square, 12 rows, 2 + 2 of padding.
        assert_eq!(canvas.height, 16 * 12 + 4);
        let text = render_braille(&canvas);
        // 49 rows of 4 pixels; as in Redis each ends with a newline unless the
        // canvas's last pixel row starts one (196 - 1 is not a multiple of 4).
        assert!(text.ends_with('\n'));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 49);
        assert!(lines.iter().all(|l| l.chars().count() == 66));
        assert!(text
            .chars()
            .all(|c| c == '\n' || ('\u{2800}'..='\u{28ff}').contains(&c)));
        // The first row of squares is neither rotated nor moved: its top edge is a
        // straight run of dots along one pixel row.
        assert!(lines[0].chars().any(|c| c != '\u{2800}'));
    }

    #[test]
    fn skyline_keeps_to_its_canvas_and_grays() {
        let mut rng = Rand(99);
        let mut canvas = Canvas::new(80, 20, 3);
        skyline(&mut rng, &mut canvas);
        assert!(canvas.pixels.iter().all(|&c| c <= 3));
        // The buildings start from the bottom row: something is drawn there.
        assert!((0..80).any(|x| canvas.get(x, 19) != 3));
        let text = render_grays(&canvas);
        assert_eq!(text.split('\n').count(), 20);
        assert_eq!(text.matches("\x1b[0m").count(), 80 * 20);
    }

    #[test]
    fn squares_close_and_lines_reach_their_end() {
        let mut c = Canvas::new(20, 20, 0);
        c.line((1, 1), (15, 7), 1);
        assert_eq!(c.get(1, 1), 1);
        assert_eq!(c.get(15, 7), 1);
        let mut c = Canvas::new(40, 40, 0);
        c.square(20, 20, 14.0, 0.0, 1);
        // An unrotated square of side 14: corners 7 away from the centre.
        assert_eq!(c.get(27, 27), 1);
        assert_eq!(c.get(13, 13), 1);
        assert_eq!(c.get(20, 20), 0);
    }
}
