//! A small RGB canvas for the figures the command-line tool writes: greyscale and colour-mapped
//! images, circles, polylines, colour bars, and PNG output.
//!
//! Coordinates are `(x, y)` = (column, row) in canvas pixels, origin at the top-left corner,
//! pixel centres at integers. Everything drawn outside the canvas is clipped.
//!
//! ```
//! use arraybridge::io::draw::{Canvas, RED};
//! let mut c = Canvas::new(32, 16, [0, 0, 0]);
//! c.circle(10.0, 8.0, 5.0, 1.0, RED);
//! c.line(0.0, 0.0, 31.0, 15.0, [255, 255, 255]);
//! assert_eq!(c.get(15, 8), Some(RED));
//! assert_eq!(c.get(0, 0), Some([255, 255, 255]));
//! ```

use std::path::Path;

use bridge_core::{BridgeError, Result};

/// An RGB colour.
pub type Rgb = [u8; 3];

/// Pure red, the marker colour of recovered sources (absent from [`viridis`]).
pub const RED: Rgb = [255, 0, 0];
/// Pure green, the marker colour of detections on greyscale overlays.
pub const GREEN: Rgb = [0, 255, 0];
/// White.
pub const WHITE: Rgb = [255, 255, 255];
/// Black.
pub const BLACK: Rgb = [0, 0, 0];

/// An RGB8 image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canvas {
    width: usize,
    height: usize,
    pixels: Vec<u8>,
}

impl Canvas {
    /// A `width × height` canvas filled with `fill`.
    pub fn new(width: usize, height: usize, fill: Rgb) -> Self {
        let mut pixels = Vec::with_capacity(width * height * 3);
        for _ in 0..width * height {
            pixels.extend_from_slice(&fill);
        }
        Canvas {
            width,
            height,
            pixels,
        }
    }

    /// Width in pixels.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> usize {
        self.height
    }

    /// The RGB bytes, row-major.
    pub fn pixels(&self) -> &[u8] {
        &self.pixels
    }

    /// Colour of pixel `(x, y)`, `None` outside the canvas.
    pub fn get(&self, x: usize, y: usize) -> Option<Rgb> {
        if x < self.width && y < self.height {
            let i = (y * self.width + x) * 3;
            Some([self.pixels[i], self.pixels[i + 1], self.pixels[i + 2]])
        } else {
            None
        }
    }

    /// Set pixel `(x, y)`; ignored outside the canvas.
    pub fn set(&mut self, x: isize, y: isize, c: Rgb) {
        if x >= 0 && y >= 0 && (x as usize) < self.width && (y as usize) < self.height {
            let i = (y as usize * self.width + x as usize) * 3;
            self.pixels[i..i + 3].copy_from_slice(&c);
        }
    }

    /// Fill the rectangle with top-left corner `(x, y)` and size `w × h` (clipped).
    pub fn fill_rect(&mut self, x: isize, y: isize, w: usize, h: usize, c: Rgb) {
        for dy in 0..h as isize {
            for dx in 0..w as isize {
                self.set(x + dx, y + dy, c);
            }
        }
    }

    /// Paint `values` (`rows × cols`, row-major) at `(x0, y0)`, each value a `scale × scale`
    /// block coloured by `colour(value)`. With `flip_rows`, row 0 is drawn at the bottom (the
    /// astronomical display convention).
    #[allow(clippy::too_many_arguments)]
    pub fn blit_map(
        &mut self,
        x0: isize,
        y0: isize,
        rows: usize,
        cols: usize,
        values: &[f64],
        scale: usize,
        flip_rows: bool,
        colour: impl Fn(f64) -> Rgb,
    ) {
        for r in 0..rows.min(values.len() / cols.max(1)) {
            let pr = if flip_rows { rows - 1 - r } else { r };
            for c in 0..cols {
                let rgb = colour(values[r * cols + c]);
                self.fill_rect(
                    x0 + (c * scale) as isize,
                    y0 + (pr * scale) as isize,
                    scale,
                    scale,
                    rgb,
                );
            }
        }
    }

    /// A straight line from `(x0, y0)` to `(x1, y1)`, one pixel wide, both ends included.
    pub fn line(&mut self, x0: f64, y0: f64, x1: f64, y1: f64, c: Rgb) {
        if !(x0.is_finite() && y0.is_finite() && x1.is_finite() && y1.is_finite()) {
            return;
        }
        let n = (x1 - x0).abs().max((y1 - y0).abs()).ceil().clamp(1.0, 1e6) as usize;
        for i in 0..=n {
            let t = i as f64 / n as f64;
            self.set(
                (x0 + t * (x1 - x0)).round() as isize,
                (y0 + t * (y1 - y0)).round() as isize,
                c,
            );
        }
    }

    /// A thick line: `width` parallel one-pixel lines (1 = a plain [`Canvas::line`]).
    pub fn thick_line(&mut self, x0: f64, y0: f64, x1: f64, y1: f64, width: usize, c: Rgb) {
        let len = (x1 - x0).hypot(y1 - y0);
        let (nx, ny) = if len > 0.0 {
            (-(y1 - y0) / len, (x1 - x0) / len)
        } else {
            (0.0, 0.0)
        };
        let w = width.max(1);
        for k in 0..w {
            let off = k as f64 - (w - 1) as f64 / 2.0;
            self.line(
                x0 + off * nx,
                y0 + off * ny,
                x1 + off * nx,
                y1 + off * ny,
                c,
            );
        }
    }

    /// A polyline through `points` `(x, y)`.
    pub fn polyline(&mut self, points: &[(f64, f64)], width: usize, c: Rgb) {
        for p in points.windows(2) {
            self.thick_line(p[0].0, p[0].1, p[1].0, p[1].1, width, c);
        }
    }

    /// A circle outline of radius `r` about `(cx, cy)`, `thickness` pixels thick (outwards).
    pub fn circle(&mut self, cx: f64, cy: f64, r: f64, thickness: f64, c: Rgb) {
        if !(cx.is_finite() && cy.is_finite() && r.is_finite()) || r < 0.0 {
            return;
        }
        let t = thickness.max(1.0);
        let outer = r + t - 0.5;
        let inner = (r - 0.5).max(0.0);
        let (x0, x1) = ((cx - outer).floor() as isize, (cx + outer).ceil() as isize);
        let (y0, y1) = ((cy - outer).floor() as isize, (cy + outer).ceil() as isize);
        for y in y0..=y1 {
            for x in x0..=x1 {
                let d = (x as f64 - cx).hypot(y as f64 - cy);
                if d >= inner && d <= outer {
                    self.set(x, y, c);
                }
            }
        }
    }

    /// A `+` of half-length `arm` about `(cx, cy)`.
    pub fn cross(&mut self, cx: f64, cy: f64, arm: f64, c: Rgb) {
        self.line(cx - arm, cy, cx + arm, cy, c);
        self.line(cx, cy - arm, cx, cy + arm, c);
    }

    /// Text in a 3×5 pixel font (digits, `.`, `-`, `+`, `e` and a few letters; other characters
    /// are blank), each font pixel a `scale × scale` block, top-left corner at `(x, y)`.
    pub fn text(&mut self, x: isize, y: isize, s: &str, scale: usize, c: Rgb) {
        let scale = scale.max(1) as isize;
        for (n, ch) in s.chars().enumerate() {
            let g = glyph(ch);
            for (r, bits) in g.iter().enumerate() {
                for col in 0..3isize {
                    if bits & (4 >> col) != 0 {
                        self.fill_rect(
                            x + (n as isize * 4 + col) * scale,
                            y + r as isize * scale,
                            scale as usize,
                            scale as usize,
                            c,
                        );
                    }
                }
            }
        }
    }

    /// Write the canvas as an 8-bit RGB PNG.
    pub fn write_png(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let bad = |e: png::EncodingError| BridgeError::InvalidInput(format!("{name}: {e}"));
        let width = u32::try_from(self.width)
            .map_err(|_| BridgeError::invalid_argument("width", "too large for PNG"))?;
        let height = u32::try_from(self.height)
            .map_err(|_| BridgeError::invalid_argument("height", "too large for PNG"))?;
        let file = std::fs::File::create(path).map_err(|e| BridgeError::io(name.clone(), e))?;
        let mut enc = png::Encoder::new(std::io::BufWriter::new(file), width, height);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().map_err(bad)?;
        w.write_image_data(&self.pixels).map_err(bad)?;
        w.finish().map_err(bad)
    }
}

/// 3×5 bitmap glyphs (3 bits per row, most significant bit on the left).
fn glyph(c: char) -> [u8; 5] {
    match c.to_ascii_lowercase() {
        '0' => [7, 5, 5, 5, 7],
        '1' => [2, 6, 2, 2, 7],
        '2' => [7, 1, 7, 4, 7],
        '3' => [7, 1, 7, 1, 7],
        '4' => [5, 5, 7, 1, 1],
        '5' => [7, 4, 7, 1, 7],
        '6' => [7, 4, 7, 5, 7],
        '7' => [7, 1, 1, 1, 1],
        '8' => [7, 5, 7, 5, 7],
        '9' => [7, 5, 7, 1, 7],
        '-' => [0, 0, 7, 0, 0],
        '+' => [0, 2, 7, 2, 0],
        '.' => [0, 0, 0, 0, 2],
        '/' => [1, 1, 2, 4, 4],
        ':' => [0, 2, 0, 2, 0],
        'e' => [7, 4, 7, 4, 7],
        's' => [7, 4, 7, 1, 7],
        'n' => [6, 5, 5, 5, 5],
        _ => [0, 0, 0, 0, 0],
    }
}

/// The viridis colour map at `t ∈ [0, 1]` (clamped; NaN gives the low end), by linear
/// interpolation between six anchor colours.
pub fn viridis(t: f64) -> Rgb {
    const C: [[f64; 3]; 6] = [
        [68.0, 1.0, 84.0],
        [65.0, 68.0, 135.0],
        [42.0, 120.0, 142.0],
        [34.0, 168.0, 132.0],
        [122.0, 209.0, 81.0],
        [253.0, 231.0, 37.0],
    ];
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) } * 5.0;
    let i = (t.floor() as usize).min(4);
    let f = t - i as f64;
    let mut out = [0u8; 3];
    for (k, o) in out.iter_mut().enumerate() {
        *o = (C[i][k] * (1.0 - f) + C[i + 1][k] * f).round() as u8;
    }
    out
}

/// A distinct, saturated colour for index `i` (cycles through 10 hues; never grey, never
/// [`GREEN`]).
pub fn palette(i: usize) -> Rgb {
    const P: [Rgb; 10] = [
        [255, 99, 71],
        [30, 144, 255],
        [255, 215, 0],
        [238, 130, 238],
        [0, 206, 209],
        [255, 140, 0],
        [186, 85, 211],
        [255, 20, 147],
        [135, 206, 250],
        [173, 255, 47],
    ];
    P[i % P.len()]
}

/// Grey level of `v` stretched linearly from `lo` (black) to `hi` (white), clamped.
pub fn grey(v: f64, lo: f64, hi: f64) -> Rgb {
    let t = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
    let g = (t.clamp(0.0, 1.0) * 255.0).round() as u8;
    [g, g, g]
}

/// The `p`-th percentile (0–100, nearest rank) of the finite values, `None` if there are none.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let k = ((p.clamp(0.0, 100.0) / 100.0) * (v.len() - 1) as f64).round() as usize;
    Some(v[k.min(v.len() - 1)])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn circle_is_a_ring_at_the_radius() {
        let mut c = Canvas::new(41, 41, BLACK);
        c.circle(20.0, 20.0, 10.0, 1.0, RED);
        assert_eq!(c.get(30, 20), Some(RED));
        assert_eq!(c.get(10, 20), Some(RED));
        assert_eq!(c.get(20, 30), Some(RED));
        assert_eq!(c.get(20, 20), Some(BLACK));
        assert_eq!(c.get(20, 25), Some(BLACK));
        assert_eq!(c.get(0, 0), Some(BLACK));
        // every red pixel lies within half a pixel of the ring
        for y in 0..41 {
            for x in 0..41 {
                if c.get(x, y) == Some(RED) {
                    let d = (x as f64 - 20.0).hypot(y as f64 - 20.0);
                    assert!((9.5..=10.5).contains(&d), "({x},{y}) at {d}");
                }
            }
        }
    }

    #[test]
    fn lines_include_both_ends_and_clip() {
        let mut c = Canvas::new(10, 10, BLACK);
        c.line(1.0, 1.0, 8.0, 5.0, WHITE);
        assert_eq!(c.get(1, 1), Some(WHITE));
        assert_eq!(c.get(8, 5), Some(WHITE));
        c.line(-5.0, -5.0, 20.0, 20.0, RED); // clipped, no panic
        assert_eq!(c.get(9, 9), Some(RED));
        c.line(f64::NAN, 0.0, 1.0, 1.0, GREEN); // ignored
        c.polyline(&[(0.0, 9.0), (4.0, 9.0), (4.0, 5.0)], 1, GREEN);
        assert_eq!(c.get(2, 9), Some(GREEN));
        assert_eq!(c.get(4, 7), Some(GREEN));
    }

    #[test]
    fn blit_map_flips_rows() {
        let mut c = Canvas::new(4, 4, BLACK);
        c.blit_map(0, 0, 2, 2, &[0.0, 0.0, 1.0, 1.0], 2, true, |v| {
            if v > 0.5 { WHITE } else { RED }
        });
        // row 1 (value 1) is drawn at the top
        assert_eq!(c.get(0, 0), Some(WHITE));
        assert_eq!(c.get(3, 3), Some(RED));
    }

    #[test]
    fn colours() {
        assert_eq!(viridis(0.0), [68, 1, 84]);
        assert_eq!(viridis(1.0), [253, 231, 37]);
        assert_eq!(viridis(f64::NAN), [68, 1, 84]);
        for i in 0..=100 {
            assert_ne!(viridis(i as f64 / 100.0), RED);
        }
        for i in 0..20 {
            let p = palette(i);
            assert!(p != GREEN && !(p[0] == p[1] && p[1] == p[2]));
        }
        assert_eq!(grey(5.0, 0.0, 10.0), [128, 128, 128]);
        assert_eq!(percentile(&[3.0, f64::NAN, 1.0, 2.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[f64::NAN], 50.0), None);
    }

    #[test]
    fn png_round_trip() {
        let dir = std::env::temp_dir().join(format!("ab-draw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.png");
        let mut c = Canvas::new(7, 5, WHITE);
        c.text(0, 0, "1.5", 1, BLACK);
        c.set(6, 4, RED);
        c.write_png(&p).unwrap();
        let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&p).unwrap()));
        let mut r = dec.read_info().unwrap();
        let mut buf = vec![0u8; r.output_buffer_size().unwrap()];
        let info = r.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (7, 5));
        assert_eq!(info.color_type, png::ColorType::Rgb);
        assert_eq!(&buf[..info.buffer_size()], c.pixels());
        std::fs::remove_dir_all(&dir).ok();
    }
}
