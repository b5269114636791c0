//! Planet recovery: where PACO's S/N map peaks outside the inner working angle, its sub-pixel
//! centroid, contrast and distance to the truth, and the strongest other peak.

use algorithms::paco::PacoMaps;
use algorithms::synth::adi::PlanetTruth;

use super::scenario::{FWHM, IWA};

/// What PACO found.
#[derive(Debug, Clone, Copy)]
pub(super) struct Recovered {
    /// Pixel of the S/N maximum (row, column).
    pub(super) pixel: (usize, usize),
    /// S/N-weighted centroid of the 3×3 neighbourhood: row.
    pub(super) y: f64,
    /// S/N-weighted centroid of the 3×3 neighbourhood: column.
    pub(super) x: f64,
    /// S/N at the maximum.
    pub(super) snr: f64,
    /// b/a at the maximum, divided by the PSF normalisation factor: the contrast estimate
    /// (biased low, see `unbiased_flux`).
    pub(super) contrast: f64,
    /// Distance to the true position (px).
    pub(super) error: f64,
    /// Largest S/N farther than 2 FWHM from the maximum (outside the inner working angle).
    pub(super) false_alarm_snr: f64,
    /// Contrast and its standard deviation from the unbiased flux (paper Algorithm 3).
    pub(super) unbiased: Option<(f64, f64)>,
}

/// The S/N maximum outside the inner working angle ([`IWA`]) about `centre`.
pub(super) fn recover_planet(
    maps: &PacoMaps,
    truth: &PlanetTruth,
    centre: (f64, f64),
) -> Recovered {
    let snr = &maps.snr;
    let (h, w) = snr.dim();
    let outside = |y: usize, x: usize| (y as f64 - centre.0).hypot(x as f64 - centre.1) >= IWA;
    let mut best = ((0usize, 0usize), f64::NEG_INFINITY);
    for ((y, x), &v) in snr.indexed_iter() {
        if v.is_finite() && v > best.1 && outside(y, x) {
            best = ((y, x), v);
        }
    }
    let ((by, bx), bv) = best;
    let (mut sw, mut sy, mut sx) = (0.0, 0.0, 0.0);
    for y in by.saturating_sub(1)..(by + 2).min(h) {
        for x in bx.saturating_sub(1)..(bx + 2).min(w) {
            let v = snr[[y, x]];
            if v.is_finite() && v > 0.0 {
                sw += v;
                sy += v * y as f64;
                sx += v * x as f64;
            }
        }
    }
    let (y, x) = if sw > 0.0 {
        (sy / sw, sx / sw)
    } else {
        (by as f64, bx as f64)
    };
    let mut fa = f64::NEG_INFINITY;
    for ((yy, xx), &v) in snr.indexed_iter() {
        let d = (yy as f64 - by as f64).hypot(xx as f64 - bx as f64);
        if v.is_finite() && d > 2.0 * FWHM && outside(yy, xx) {
            fa = fa.max(v);
        }
    }
    Recovered {
        pixel: (by, bx),
        y,
        x,
        snr: bv,
        contrast: maps.flux.get((by, bx)).copied().unwrap_or(f64::NAN) / maps.psf_norm_factor,
        error: (y - truth.y).hypot(x - truth.x),
        false_alarm_snr: fa,
        unbiased: None,
    }
}
