//! Figures the command-line tool writes (`overlay.png` of `arraybridge demo`, `snr.png` of
//! `arraybridge paco` and `arraybridge demo`): a small RGB canvas, its 3×5 font, colour maps and
//! the S/N map figure. Everything is re-exported here; the modules split it by idea:
//!
//! * `canvas`: [`Canvas`], the RGB8 image and what can be drawn on it, and PNG output;
//! * `font`: the 3×5 pixel font of [`Canvas::text`] and [`text_width`];
//! * `colour`: [`Rgb`], the marker colours, [`viridis`], [`palette`], [`grey`], [`percentile`];
//! * `snr_map`: [`render_snr_map`] and its options, markers and result ([`SnrFigure`]).
//!
//! Coordinates are `(x, y)` = (column, row) in canvas pixels, origin at the top-left corner,
//! pixel centres at integers. Everything drawn outside the canvas is clipped.
//!
//! ```
//! use arraybridge_cli::figures::{Canvas, RED};
//! let mut c = Canvas::new(32, 16, [0, 0, 0]);
//! c.circle(10.0, 8.0, 5.0, 1.0, RED);
//! c.line(0.0, 0.0, 31.0, 15.0, [255, 255, 255]);
//! assert_eq!(c.get(15, 8), Some(RED));
//! assert_eq!(c.get(0, 0), Some([255, 255, 255]));
//! ```

mod canvas;
mod colour;
mod font;
mod snr_map;

pub use canvas::Canvas;
pub use colour::{BLACK, GREEN, RED, Rgb, WHITE, grey, palette, percentile, viridis};
pub use font::text_width;
pub use snr_map::{Marker, MarkerShape, NAN_COLOUR, SnrFigure, SnrMapOptions, render_snr_map};
