//! The one S/N map figure of `arraybridge paco` and `arraybridge demo` ([`render_snr_map`]): the
//! map in [`viridis`], row 0 at the bottom, non-finite pixels in [`NAN_COLOUR`], a colour bar
//! with its range, a title strip and markers ([`Marker`]) for candidates and true positions.

use std::path::Path;

use bridge_core::{BridgeError, Result};

use super::canvas::Canvas;
use super::colour::{BLACK, Rgb, WHITE, viridis};
use super::font::text_width;

/// Colour of NaN (and ±inf) pixels of [`render_snr_map`]: a dark grey that is not in
/// [`viridis`].
pub const NAN_COLOUR: Rgb = [40, 40, 40];

/// How a [`Marker`] is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerShape {
    /// A two-pixel-thick circle of radius [`SnrMapOptions::marker_radius`] (a candidate).
    Circle,
    /// A `+` with arms of one map pixel (at least 2 canvas pixels; a true position).
    Cross,
}

/// A mark on an S/N map, at map row `y` and column `x` (fractional positions allowed; pixel
/// centres at integers).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Marker {
    /// Map row.
    pub y: f64,
    /// Map column.
    pub x: f64,
    /// Circle or cross.
    pub shape: MarkerShape,
    /// Its colour.
    pub colour: Rgb,
}

impl Marker {
    /// A circle about `(y, x)`.
    pub fn circle(y: f64, x: f64, colour: Rgb) -> Self {
        Marker {
            y,
            x,
            shape: MarkerShape::Circle,
            colour,
        }
    }

    /// A cross at `(y, x)`.
    pub fn cross(y: f64, x: f64, colour: Rgb) -> Self {
        Marker {
            y,
            x,
            shape: MarkerShape::Cross,
            colour,
        }
    }
}

/// Options of [`render_snr_map`].
#[derive(Debug, Clone, PartialEq)]
pub struct SnrMapOptions {
    /// Caption in a strip under the map (the 3×5 font of [`Canvas::text`]); `None`: no strip.
    pub title: Option<String>,
    /// Label of the colour bar, written beside its middle (e.g. `S/N`); `None`: none.
    pub bar_label: Option<String>,
    /// Candidates to circle and positions to mark, drawn in order.
    pub markers: Vec<Marker>,
    /// Colour-map range `(lo, hi)`, finite with `lo < hi`; values outside are clamped. `None`:
    /// the finite minimum and maximum of the map (`hi = lo + 1` for a constant map).
    pub range: Option<(f64, f64)>,
    /// Canvas pixels per map pixel (≥ 1). `None`: the largest integer scale that keeps the longer
    /// side of the map within [`SnrMapOptions::max_side`] (at least 1).
    pub scale: Option<usize>,
    /// Longest side of the map on the canvas when `scale` is `None`.
    pub max_side: usize,
    /// Radius of [`MarkerShape::Circle`] markers in map pixels.
    pub marker_radius: f64,
}

impl Default for SnrMapOptions {
    fn default() -> Self {
        SnrMapOptions {
            title: None,
            bar_label: Some("S/N".into()),
            markers: Vec::new(),
            range: None,
            scale: None,
            max_side: 512,
            marker_radius: 3.0,
        }
    }
}

/// A rendered S/N map and where things are on it.
#[derive(Debug, Clone, PartialEq)]
pub struct SnrFigure {
    /// The picture.
    pub canvas: Canvas,
    /// Canvas pixels per map pixel.
    pub scale: usize,
    /// Radius of the circle markers in canvas pixels.
    pub marker_radius: f64,
    /// The colour-map range used; `None` when the map has no finite value and no range was given
    /// (the map and the colour bar are then all [`NAN_COLOUR`], the bar labelled `nan`).
    pub range: Option<(f64, f64)>,
    /// Map size `(rows, columns)`.
    pub map_dim: (usize, usize),
}

impl SnrFigure {
    /// Canvas `(x, y)` of the centre of map position `(y, x)` (row 0 at the bottom; the map's
    /// top-left corner is the canvas origin).
    pub fn to_canvas(&self, y: f64, x: f64) -> (f64, f64) {
        let s = self.scale as f64;
        let h = self.map_dim.0 as f64;
        (x * s + (s - 1.0) / 2.0, (h - 1.0 - y) * s + (s - 1.0) / 2.0)
    }

    /// Write the picture as an 8-bit RGB PNG.
    pub fn write_png(&self, path: impl AsRef<Path>) -> Result<()> {
        self.canvas.write_png(path)
    }
}

/// Largest canvas [`render_snr_map`] draws (pixels), so that a huge scale is an error, not an
/// allocation failure.
const MAX_CANVAS_PIXELS: usize = 1 << 28;

/// A colour-bar label for `v` when the bar spans `span`: enough decimals to tell the ends apart.
fn bar_tick(v: f64, span: f64) -> String {
    if !v.is_finite() {
        return "nan".into();
    }
    if v.abs() >= 1e6 || (span < 0.01 && v != 0.0) {
        return format!("{v:.2e}");
    }
    let decimals = if span >= 1.0 {
        1
    } else if span >= 0.1 {
        2
    } else {
        3
    };
    format!("{v:.decimals$}")
}

/// The S/N map picture written by `arraybridge paco` and `arraybridge demo`.
///
/// Layout: the map in [`viridis`] at the top-left corner, each map pixel a `scale × scale`
/// block, row 0 at the bottom (the astronomical display convention; see
/// [`SnrFigure::to_canvas`]); non-finite values in [`NAN_COLOUR`]. To its right, 10 pixels
/// away, a 20-pixel-wide colour bar as tall as the map (at least 60 pixels) with the range
/// printed at its top and bottom and [`SnrMapOptions::bar_label`] beside its middle; under
/// both, the title strip when there is a title. The background is white. Markers are drawn
/// last, over everything.
///
/// A map without a finite value is a defined picture (everything in [`NAN_COLOUR`], the bar
/// labelled `nan`, [`SnrFigure::range`] `None`) unless `range` is given. Errors (typed, never a
/// panic): an empty map, a zero scale, a non-finite or empty `range`, or a canvas larger than
/// 2²⁸ pixels.
///
/// ```
/// use arraybridge_cli::figures::{Marker, RED, SnrMapOptions, render_snr_map};
/// let snr = ndarray::Array2::from_shape_fn((16, 16), |(y, x)| (y + x) as f64);
/// let opts = SnrMapOptions {
///     title: Some("PACO S/N".into()),
///     markers: vec![Marker::circle(10.0, 5.0, RED)],
///     scale: Some(4),
///     ..Default::default()
/// };
/// let fig = render_snr_map(snr.view(), &opts)?;
/// assert_eq!(fig.range, Some((0.0, 30.0)));
/// let (x, y) = fig.to_canvas(10.0, 5.0 + 3.0); // on the circle, 3 map pixels to the right
/// assert_eq!(fig.canvas.get(x.round() as usize, y.round() as usize), Some(RED));
/// # Ok::<(), arraybridge::BridgeError>(())
/// ```
pub fn render_snr_map(
    snr: ndarray::ArrayView2<'_, f64>,
    opts: &SnrMapOptions,
) -> Result<SnrFigure> {
    let (h, w) = snr.dim();
    if h == 0 || w == 0 {
        return Err(BridgeError::InvalidInput(
            format!("cannot draw an empty S/N map ({h}×{w})").into(),
        ));
    }
    let s = match opts.scale {
        Some(0) => {
            return Err(BridgeError::invalid_argument(
                "scale",
                "must be at least 1 canvas pixel per map pixel",
            ));
        }
        Some(s) => s,
        None => (opts.max_side / h.max(w)).max(1),
    };
    let range = colour_range(snr, opts.range)?;
    let layout = Layout::new((h, w), s, range, opts)?;
    let mut cv = Canvas::new(layout.width, layout.height, WHITE);
    let values: Vec<f64> = snr.iter().copied().collect();
    cv.blit_map(0, 0, h, w, &values, s, true, |v| match range {
        Some((lo, hi)) if v.is_finite() => viridis((v - lo) / (hi - lo)),
        _ => NAN_COLOUR,
    });
    layout.draw_bar_and_title(&mut cv, range.is_some(), opts);
    let marker_radius = opts.marker_radius * s as f64;
    let mut fig = SnrFigure {
        canvas: cv,
        scale: s,
        marker_radius,
        range,
        map_dim: (h, w),
    };
    for m in &opts.markers {
        let (x, y) = fig.to_canvas(m.y, m.x);
        match m.shape {
            MarkerShape::Circle => fig.canvas.circle(x, y, marker_radius, 2.0, m.colour),
            MarkerShape::Cross => fig.canvas.cross(x, y, s.max(2) as f64, m.colour),
        }
    }
    Ok(fig)
}

/// The colour-map range of [`render_snr_map`]: `given` when it is finite with `lo < hi` (an
/// error when it is not), else the finite minimum and maximum of `snr` (`hi = lo + 1` for a
/// constant map; `None` without a finite value).
fn colour_range(
    snr: ndarray::ArrayView2<'_, f64>,
    given: Option<(f64, f64)>,
) -> Result<Option<(f64, f64)>> {
    let finite = || snr.iter().copied().filter(|v| v.is_finite());
    Ok(match given {
        Some((lo, hi)) if lo.is_finite() && hi.is_finite() && lo < hi => Some((lo, hi)),
        Some((lo, hi)) => {
            return Err(BridgeError::invalid_argument(
                "range",
                format!("expected finite lo < hi, got ({lo}, {hi})"),
            ));
        }
        None => {
            let (lo, hi) = finite().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
                (a.min(v), b.max(v))
            });
            lo.is_finite()
                .then_some((lo, if hi > lo { hi } else { lo + 1.0 }))
        }
    })
}

/// Where things are on the canvas of [`render_snr_map`]: its size, the colour bar's and its
/// labels' columns, the plot's height and the title's scale, with the bar's end labels.
struct Layout {
    /// Canvas width.
    width: usize,
    /// Canvas height.
    height: usize,
    /// Left column of the colour bar.
    bar_x: usize,
    /// Left column of the bar's labels.
    label_x: usize,
    /// Height of the map and the bar (at least 60).
    plot_h: usize,
    /// Scale of the title's font (2, or 1 when a title that large would not fit).
    title_scale: usize,
    /// The labels of the bar's top and bottom.
    top: String,
    bottom: String,
}

impl Layout {
    /// The layout of an `h × w` map at `s` canvas pixels per map pixel with the colour `range`;
    /// an error for a map or canvas larger than [`MAX_CANVAS_PIXELS`] (or than `usize`).
    fn new(
        (h, w): (usize, usize),
        s: usize,
        range: Option<(f64, f64)>,
        opts: &SnrMapOptions,
    ) -> Result<Layout> {
        let too_large = || {
            BridgeError::invalid_argument(
                "scale",
                format!("a {h}×{w} map at scale {s} is too large to draw"),
            )
        };
        let (map_w, map_h) = (
            w.checked_mul(s).ok_or_else(too_large)?,
            h.checked_mul(s).ok_or_else(too_large)?,
        );
        if map_w
            .checked_mul(map_h)
            .is_none_or(|n| n > MAX_CANVAS_PIXELS)
        {
            return Err(too_large());
        }
        let (top, bottom) = match range {
            Some((lo, hi)) => (bar_tick(hi, hi - lo), bar_tick(lo, hi - lo)),
            None => ("nan".to_owned(), "nan".to_owned()),
        };
        let label = opts.bar_label.as_deref().unwrap_or_default();
        let label_chars = [
            top.chars().count(),
            bottom.chars().count(),
            label.chars().count(),
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        let bar_x = map_w + 10;
        let label_x = bar_x + 24;
        let mut cw = label_x + text_width(label_chars, 2) + 4;
        let plot_h = map_h.max(60);
        let title = opts.title.as_deref().unwrap_or_default();
        let title_chars = title.chars().count();
        let title_scale = if text_width(title_chars, 2) + 8 <= cw {
            2
        } else {
            1
        };
        if title_chars > 0 {
            cw = cw.max(text_width(title_chars, 1) + 8);
        }
        let ch = if title_chars > 0 {
            plot_h + 5 * title_scale + 8
        } else {
            plot_h
        };
        if cw.checked_mul(ch).is_none_or(|n| n > MAX_CANVAS_PIXELS) {
            return Err(too_large());
        }
        Ok(Layout {
            width: cw,
            height: ch,
            bar_x,
            label_x,
            plot_h,
            title_scale,
            top,
            bottom,
        })
    }

    /// Draw the colour bar (in [`viridis`] when `coloured`, else [`NAN_COLOUR`]), its end
    /// labels and [`SnrMapOptions::bar_label`], and the title strip when there is a title.
    fn draw_bar_and_title(&self, cv: &mut Canvas, coloured: bool, opts: &SnrMapOptions) {
        let plot_h = self.plot_h;
        for py in 0..plot_h {
            let c = if coloured {
                viridis(1.0 - py as f64 / (plot_h - 1) as f64)
            } else {
                NAN_COLOUR
            };
            cv.fill_rect(self.bar_x as isize, py as isize, 20, 1, c);
        }
        let label = opts.bar_label.as_deref().unwrap_or_default();
        let title = opts.title.as_deref().unwrap_or_default();
        let label_x = self.label_x as isize;
        cv.text(label_x, 2, &self.top, 2, BLACK);
        cv.text(label_x, plot_h as isize - 12, &self.bottom, 2, BLACK);
        if !label.is_empty() {
            cv.text(label_x, plot_h as isize / 2 - 5, label, 2, BLACK);
        }
        if !title.is_empty() {
            cv.text(4, (plot_h + 4) as isize, title, self.title_scale, BLACK);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::figures::colour::{GREEN, RED};

    fn ramp(h: usize, w: usize) -> ndarray::Array2<f64> {
        ndarray::Array2::from_shape_fn((h, w), |(y, x)| (y * w + x) as f64)
    }

    /// Pixels of `c` inside the map area of `fig`.
    fn count_in_map(fig: &SnrFigure, c: Rgb) -> usize {
        let (h, w) = fig.map_dim;
        let mut n = 0;
        for y in 0..h * fig.scale {
            for x in 0..w * fig.scale {
                n += usize::from(fig.canvas.get(x, y) == Some(c));
            }
        }
        n
    }

    #[test]
    fn snr_map_dimensions_and_orientation() {
        // 20 rows × 30 columns, automatic scale: 512 / 30 = 17.
        let fig = render_snr_map(ramp(20, 30).view(), &SnrMapOptions::default()).unwrap();
        assert_eq!(fig.scale, 17);
        assert_eq!(fig.map_dim, (20, 30));
        assert_eq!(fig.range, Some((0.0, 599.0)));
        assert!(fig.canvas.width() > 30 * 17 + 30, "room for the colour bar");
        assert_eq!(fig.canvas.height(), 20 * 17);
        // Row 0 at the bottom: the minimum (row 0, column 0) is the bottom-left block, the
        // maximum the top-right one.
        assert_eq!(fig.canvas.get(0, 20 * 17 - 1), Some(viridis(0.0)));
        assert_eq!(fig.canvas.get(30 * 17 - 1, 0), Some(viridis(1.0)));
        assert_eq!(fig.to_canvas(0.0, 0.0), (8.0, 19.0 * 17.0 + 8.0));
        // The colour bar: top is the maximum colour, bottom the minimum.
        let bar_x = 30 * 17 + 10 + 10;
        assert_eq!(fig.canvas.get(bar_x, 0), Some(viridis(1.0)));
        assert_eq!(fig.canvas.get(bar_x, 20 * 17 - 1), Some(viridis(0.0)));
        // The range labels are printed (black pixels right of the bar).
        let black = (0..fig.canvas.height())
            .flat_map(|y| (bar_x + 14..fig.canvas.width()).map(move |x| (x, y)))
            .filter(|&(x, y)| fig.canvas.get(x, y) == Some(BLACK))
            .count();
        assert!(black > 50, "{black}");

        // A fixed scale, a title strip under the map, and a tiny map: the bar is at least
        // 60 pixels high.
        let opts = SnrMapOptions {
            scale: Some(3),
            title: Some("PACO S/N".into()),
            ..Default::default()
        };
        let fig = render_snr_map(ramp(4, 5).view(), &opts).unwrap();
        assert_eq!(fig.scale, 3);
        assert!(fig.canvas.height() > 60);
        assert!(fig.canvas.width() >= text_width(8, 1) + 8);
        let strip_black = (60..fig.canvas.height())
            .flat_map(|y| (0..fig.canvas.width()).map(move |x| (x, y)))
            .filter(|&(x, y)| fig.canvas.get(x, y) == Some(BLACK))
            .count();
        assert!(strip_black > 20, "title missing ({strip_black})");
        // A non-square map in portrait keeps its aspect.
        let fig = render_snr_map(ramp(40, 10).view(), &SnrMapOptions::default()).unwrap();
        assert_eq!(fig.scale, 12);
        assert_eq!(fig.canvas.height(), 480);
    }

    #[test]
    fn snr_map_nan_pixels_are_distinct() {
        let mut snr = ramp(10, 10);
        snr[[0, 0]] = f64::NAN;
        snr[[9, 9]] = f64::INFINITY;
        snr[[5, 5]] = f64::NEG_INFINITY;
        let opts = SnrMapOptions {
            scale: Some(2),
            ..Default::default()
        };
        let fig = render_snr_map(snr.view(), &opts).unwrap();
        // The range ignores the non-finite values.
        assert_eq!(fig.range, Some((1.0, 98.0)));
        assert_eq!(count_in_map(&fig, NAN_COLOUR), 3 * 4);
        let (x, y) = fig.to_canvas(0.0, 0.0);
        assert_eq!(fig.canvas.get(x as usize, y as usize), Some(NAN_COLOUR));
        for i in 0..=100 {
            assert_ne!(viridis(f64::from(i) / 100.0), NAN_COLOUR);
        }
    }

    #[test]
    fn snr_map_all_nan_is_a_defined_picture() {
        let snr = ndarray::Array2::from_elem((8, 6), f64::NAN);
        let fig = render_snr_map(snr.view(), &SnrMapOptions::default()).unwrap();
        assert_eq!(fig.range, None);
        assert_eq!(
            count_in_map(&fig, NAN_COLOUR),
            8 * 6 * fig.scale * fig.scale
        );
        // The bar is grey too, no viridis colour anywhere.
        let bar_x = 6 * fig.scale + 15;
        assert_eq!(fig.canvas.get(bar_x, 0), Some(NAN_COLOUR));
        let again = render_snr_map(snr.view(), &SnrMapOptions::default()).unwrap();
        assert_eq!(fig, again);
        // With an explicit range the bar is drawn normally.
        let opts = SnrMapOptions {
            range: Some((-5.0, 5.0)),
            ..Default::default()
        };
        let fig = render_snr_map(snr.view(), &opts).unwrap();
        assert_eq!(fig.range, Some((-5.0, 5.0)));
        assert_eq!(fig.canvas.get(bar_x, 0), Some(viridis(1.0)));
        // All-infinite is the same as all-NaN.
        let inf = ndarray::Array2::from_elem((3, 3), f64::INFINITY);
        assert_eq!(
            render_snr_map(inf.view(), &SnrMapOptions::default())
                .unwrap()
                .range,
            None
        );
    }

    #[test]
    fn snr_map_errors_are_typed() {
        let empty = ndarray::Array2::<f64>::zeros((0, 5));
        let e = render_snr_map(empty.view(), &SnrMapOptions::default()).unwrap_err();
        assert!(matches!(e, BridgeError::InvalidInput(_)), "{e}");
        let snr = ramp(4, 4);
        for range in [
            (1.0, 1.0),
            (2.0, 1.0),
            (f64::NAN, 1.0),
            (0.0, f64::INFINITY),
        ] {
            let opts = SnrMapOptions {
                range: Some(range),
                ..Default::default()
            };
            let e = render_snr_map(snr.view(), &opts).unwrap_err();
            assert!(matches!(e, BridgeError::InvalidArgument { .. }), "{e}");
        }
        for scale in [0, usize::MAX / 2, 1 << 20] {
            let opts = SnrMapOptions {
                scale: Some(scale),
                ..Default::default()
            };
            let e = render_snr_map(snr.view(), &opts).unwrap_err();
            assert!(matches!(e, BridgeError::InvalidArgument { .. }), "{e}");
        }
    }

    #[test]
    fn snr_map_markers_are_drawn_where_asked() {
        let snr = ndarray::Array2::<f64>::zeros((40, 40));
        let opts = SnrMapOptions {
            markers: vec![
                Marker::circle(30.0, 10.0, RED),
                Marker::circle(10.0, 30.0, WHITE),
                Marker::cross(20.0, 20.0, GREEN),
            ],
            scale: Some(4),
            ..Default::default()
        };
        let fig = render_snr_map(snr.view(), &opts).unwrap();
        assert_eq!(fig.marker_radius, 12.0);
        let (cx, cy) = fig.to_canvas(30.0, 10.0);
        assert_eq!((cx, cy), (41.5, 37.5));
        // Every red pixel is on the ring about the candidate, and there are enough of them for
        // a whole circle.
        let mut red = 0;
        for y in 0..fig.canvas.height() {
            for x in 0..fig.canvas.width() {
                if fig.canvas.get(x, y) == Some(RED) {
                    red += 1;
                    let d = (x as f64 - cx).hypot(y as f64 - cy);
                    assert!((11.5..=13.5).contains(&d), "({x},{y}) at {d}");
                }
            }
        }
        assert!(
            red as f64 > 2.0 * std::f64::consts::PI * 12.0 * 1.5,
            "{red}"
        );
        // The centre of the circle is not painted.
        assert_eq!(fig.canvas.get(cx as usize, cy as usize), Some(viridis(0.0)));
        // The white circle about (10, 30), the green cross at (20, 20).
        let (wx, wy) = fig.to_canvas(10.0, 30.0 + 3.0);
        assert_eq!(
            fig.canvas.get(wx.round() as usize, wy as usize),
            Some(WHITE)
        );
        let (gx, gy) = fig.to_canvas(20.0, 20.0);
        let (gx, gy) = (gx.round() as usize, gy.round() as usize);
        assert_eq!(fig.canvas.get(gx, gy), Some(GREEN));
        assert_eq!(fig.canvas.get(gx + 4, gy), Some(GREEN));
        assert_eq!(fig.canvas.get(gx, gy - 4), Some(GREEN));
        // Markers off the map are clipped, not a panic.
        let opts = SnrMapOptions {
            markers: vec![
                Marker::circle(-100.0, 1e9, RED),
                Marker::cross(f64::NAN, 0.0, RED),
            ],
            ..Default::default()
        };
        render_snr_map(snr.view(), &opts).unwrap();
    }

    #[test]
    fn bar_ticks_tell_the_ends_apart() {
        assert_eq!(bar_tick(13.6, 20.0), "13.6");
        assert_eq!(bar_tick(0.25, 0.5), "0.25");
        assert_eq!(bar_tick(0.012, 0.05), "0.012");
        assert_eq!(bar_tick(1.5e-4, 1e-4), "1.50e-4");
        assert_eq!(bar_tick(2.5e7, 1e7), "2.50e7");
        assert_eq!(bar_tick(f64::NAN, 1.0), "nan");
        assert_eq!(text_width(0, 2), 0);
        assert_eq!(text_width(3, 2), 22);
    }

    #[test]
    fn snr_map_png_round_trip() {
        let dir = std::env::temp_dir().join(format!("ab-draw-snr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("snr.png");
        let fig = render_snr_map(ramp(8, 8).view(), &SnrMapOptions::default()).unwrap();
        fig.write_png(&p).unwrap();
        let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&p).unwrap()));
        let mut r = dec.read_info().unwrap();
        let mut buf = vec![0u8; r.output_buffer_size().unwrap()];
        let info = r.next_frame(&mut buf).unwrap();
        assert_eq!(
            (info.width as usize, info.height as usize),
            (fig.canvas.width(), fig.canvas.height())
        );
        assert_eq!(&buf[..info.buffer_size()], fig.canvas.pixels());
        std::fs::remove_dir_all(&dir).ok();
    }
}
