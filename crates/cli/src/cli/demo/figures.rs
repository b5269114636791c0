//! The demo's figures: `overlay.png` (the first frame, tracks and detections) and `snr.png`
//! (PACO's S/N map with the recovered planet and the truth).

use crate::figures::{self, Canvas, GREEN, Marker, RED, SnrFigure, SnrMapOptions, WHITE};
use algorithms::detect::{Movie, Particle};
use algorithms::synth::adi::PlanetTruth;
use bridge_core::Result;
use ndarray::Array2;

use super::particles::position;
use super::planet::Recovered;
use super::scenario::{OVERLAY_SCALE, SNR_PNG_SIDE};

/// Canvas coordinate of the centre of image pixel `v` at `scale`.
fn canvas_coord(v: f64, scale: usize) -> f64 {
    v * scale as f64 + (scale as f64 - 1.0) / 2.0
}

/// The first frame in grey (0.5–99.8 percentile stretch), every track as a coloured polyline
/// and the first frame's detections circled in green.
pub(super) fn render_overlay(
    movie: &Movie,
    ps: &[Particle],
    tracks: &[Vec<(u32, f64, f64)>],
) -> Result<Canvas> {
    let frame = movie.frame(0)?;
    let (h, w) = frame.dim();
    let vals = frame.to_f64_vec();
    let lo = figures::percentile(&vals, 0.5).unwrap_or(0.0);
    let hi = figures::percentile(&vals, 99.8).unwrap_or(1.0);
    let s = OVERLAY_SCALE;
    let mut cv = Canvas::new(w * s, h * s, figures::BLACK);
    cv.blit_map(0, 0, h, w, &vals, s, false, |v| figures::grey(v, lo, hi));
    for (i, t) in tracks.iter().enumerate() {
        if t.len() < 2 {
            continue;
        }
        let pts: Vec<(f64, f64)> = t
            .iter()
            .map(|&(_, y, x)| (canvas_coord(x, s), canvas_coord(y, s)))
            .collect();
        cv.polyline(&pts, 1, figures::palette(i));
    }
    for p in ps.iter().filter(|p| p.frame == 0) {
        let (y, x) = position(p);
        let r = (p.sigma * std::f64::consts::SQRT_2 + 1.5) * s as f64;
        cv.circle(canvas_coord(x, s), canvas_coord(y, s), r, 1.0, GREEN);
    }
    Ok(cv)
}

/// The S/N map ([`figures::render_snr_map`]: viridis, row 0 at the bottom, NaN in dark grey, a
/// colour bar with its range), the recovered planet circled in red and the true position
/// marked with a small white cross.
pub(super) fn render_snr(
    snr: &Array2<f64>,
    rec: &Recovered,
    truth: &PlanetTruth,
) -> Result<SnrFigure> {
    let opts = SnrMapOptions {
        title: Some("PACO S/N".into()),
        markers: vec![
            Marker::cross(truth.y, truth.x, WHITE),
            Marker::circle(rec.y, rec.x, RED),
        ],
        max_side: SNR_PNG_SIDE,
        ..Default::default()
    };
    figures::render_snr_map(snr.view(), &opts)
}
