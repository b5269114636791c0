//! The RGB canvas of the figures: pixels, rectangles, colour-mapped blocks, lines, circles,
//! crosses, text in the 3×5 font (`font`), and PNG output.
//!
//! Coordinates are `(x, y)` = (column, row) in canvas pixels, origin at the top-left corner,
//! pixel centres at integers. Everything drawn outside the canvas is clipped.

use std::path::Path;

use bridge_core::{BridgeError, Result};

use super::colour::Rgb;
use super::font::glyph;

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

    /// Text in a 3×5 pixel font (digits, letters — drawn upper case — and `. , - + / : = ( ) _`;
    /// other characters are blank), each font pixel a `scale × scale` block, top-left corner at
    /// `(x, y)`. Characters advance by 4 font pixels: a string of `n` characters is
    /// [`text_width`](super::text_width)`(n, scale)` canvas pixels wide and `5 × scale` high.
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
        let bad = |e: png::EncodingError| BridgeError::InvalidInput(format!("{name}: {e}").into());
        let width = u32::try_from(self.width)
            .map_err(|_| BridgeError::invalid_argument("width", "too large for PNG"))?;
        let height = u32::try_from(self.height)
            .map_err(|_| BridgeError::invalid_argument("height", "too large for PNG"))?;
        // written under a temporary name, in place only once complete (no partial figure)
        let mut file = arraybridge::io::staged::Staged::create(path)?;
        {
            let mut enc = png::Encoder::new(std::io::BufWriter::new(&mut file), width, height);
            enc.set_color(png::ColorType::Rgb);
            enc.set_depth(png::BitDepth::Eight);
            let mut w = enc.write_header().map_err(bad)?;
            w.write_image_data(&self.pixels).map_err(bad)?;
            w.finish().map_err(bad)?;
        }
        file.commit()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::figures::colour::{BLACK, GREEN, RED, WHITE};

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
