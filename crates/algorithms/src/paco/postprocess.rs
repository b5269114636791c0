//! Post-processing of the maps: the candidates ([`snr_peaks`]), and (spec §9, off by default)
//! the calibrated S/N ([`calibrated_snr`]) and sub-pixel astrometry of a peak ([`refine_peak`]).

use bridge_core::{BridgeError, Result};
use ndarray::Array2;

use super::job::PacoJob;

/// The candidates of an S/N map: its local maxima (a finite pixel strictly above every other
/// pixel of the 5×5 window about it, ties going to the first in raster order), best first, at
/// most `top` of them, as `(row, column)`.
pub fn snr_peaks(snr: &Array2<f64>, top: usize) -> Vec<(usize, usize)> {
    let (h, w) = snr.dim();
    let mut out = Vec::new();
    for y in 0..h {
        for x in 0..w {
            let v = snr[[y, x]];
            if !v.is_finite() {
                continue;
            }
            let mut is_max = true;
            'win: for yy in y.saturating_sub(2)..(y + 3).min(h) {
                for xx in x.saturating_sub(2)..(x + 3).min(w) {
                    if (yy, xx) == (y, x) {
                        continue;
                    }
                    let u = snr[[yy, xx]];
                    if u > v || (u == v && (yy, xx) < (y, x)) {
                        is_max = false;
                        break 'win;
                    }
                }
            }
            if is_max {
                out.push((y, x));
            }
        }
    }
    out.sort_by(|a, b| snr[[b.0, b.1]].total_cmp(&snr[[a.0, a.1]]));
    out.truncate(top);
    out
}

/// Optional "calibrated S/N" (spec §9, off by default): the S/N divided by a robust per-annulus
/// spread, `1.4826·MAD` over 1-px annuli about `center`, leaving out pixels within
/// `exclude_radius` of the `exclude` positions (candidates). Annuli with fewer than 8 usable
/// pixels, or a zero spread, give NaN; so does every pixel for a centre that is not finite.
/// The annuli are those the map's pixels fall in (a centre far outside the map makes a few
/// wide ones, never a list of every annulus up to it).
pub fn calibrated_snr(
    snr: &Array2<f64>,
    center: (f64, f64),
    exclude: &[(usize, usize)],
    exclude_radius: f64,
) -> Array2<f64> {
    let (h, w) = snr.dim();
    let ring = |y: usize, x: usize| {
        let (dy, dx) = (y as f64 - center.0, x as f64 - center.1);
        (dy * dy + dx * dx).sqrt().round() as usize
    };
    let excluded = |y: usize, x: usize| {
        exclude.iter().any(|&(ey, ex)| {
            let (dy, dx) = (y as f64 - ey as f64, x as f64 - ex as f64);
            dy * dy + dx * dx <= exclude_radius * exclude_radius
        })
    };
    if !(center.0.is_finite() && center.1.is_finite()) {
        return Array2::from_elem((h, w), f64::NAN);
    }
    let mut samples: std::collections::BTreeMap<usize, Vec<f64>> = Default::default();
    for ((y, x), &v) in snr.indexed_iter() {
        if v.is_finite() && !excluded(y, x) {
            samples.entry(ring(y, x)).or_default().push(v);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            0.5 * (v[n / 2 - 1] + v[n / 2])
        }
    };
    let spread: std::collections::BTreeMap<usize, f64> = samples
        .into_iter()
        .map(|(k, mut s)| {
            if s.len() < 8 {
                return (k, f64::NAN);
            }
            let med = median(&mut s);
            let mut dev: Vec<f64> = s.iter().map(|v| (v - med).abs()).collect();
            let mad = 1.4826 * median(&mut dev);
            (k, if mad > 0.0 { mad } else { f64::NAN })
        })
        .collect();
    Array2::from_shape_fn((h, w), |(y, x)| {
        snr[[y, x]] / spread.get(&ring(y, x)).copied().unwrap_or(f64::NAN)
    })
}

/// A sub-pixel S/N peak found by [`refine_peak`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SubpixelPeak {
    /// Row of the best position in the derotated (output) frame.
    pub y: f64,
    /// Column of the best position.
    pub x: f64,
    /// S/N = b/√a there.
    pub snr: f64,
    /// b/a there (biased low, see [`unbiased_flux`](crate::paco::unbiased_flux)).
    pub flux: f64,
}

/// Optional astrometry (spec §9): evaluate the S/N at fractional output positions on a grid of
/// `step` pixels within `half_width` pixels of `start` (y, x), along the exact sub-pixel
/// trajectories of [`PacoJob::ab_along`] (use sub-pixel templates, e.g. `SubPixel::VipFft` or
/// `Table`, for this to mean anything), and return the best one. Positions whose trajectory
/// fails the edge rule are skipped; an error if none is valid or the arguments are not positive
/// and finite.
pub fn refine_peak(
    job: &PacoJob<'_>,
    start: (f64, f64),
    step: f64,
    half_width: f64,
) -> Result<SubpixelPeak> {
    let step_ok = step.is_finite() && step > 0.0;
    let width_ok = half_width.is_finite() && half_width >= 0.0;
    if !step_ok || !width_ok {
        return Err(BridgeError::invalid_argument(
            "refine_peak",
            format!("step ({step}) must be positive and half_width ({half_width}) non-negative"),
        ));
    }
    if !(start.0.is_finite() && start.1.is_finite()) {
        return Err(BridgeError::invalid_argument(
            "refine_peak",
            "the start position must be finite",
        ));
    }
    let n = (half_width / step).floor() as i64;
    if n > 64 {
        return Err(BridgeError::invalid_argument(
            "refine_peak",
            format!(
                "{} grid points per axis is too many (at most 129)",
                2 * n + 1
            ),
        ));
    }
    let geom = job.geom;
    let mut grid = Vec::new();
    let mut positions = Vec::new();
    for i in -n..=n {
        for j in -n..=n {
            let (y0, x0) = (start.0 + i as f64 * step, start.1 + j as f64 * step);
            grid.push((y0, x0));
            positions.extend(job.angles.iter().map(|&ang| geom.position(y0, x0, ang)));
        }
    }
    let (a, b) = job.ab_along(&positions)?;
    grid.iter()
        .zip(a.iter().zip(&b))
        .filter(|(_, (a, b))| a.is_finite() && b.is_finite() && **a > 0.0)
        .map(|(&(y, x), (&a, &b))| SubpixelPeak {
            y,
            x,
            snr: b / a.sqrt(),
            flux: b / a,
        })
        .max_by(|p, q| p.snr.total_cmp(&q.snr))
        .ok_or_else(|| {
            BridgeError::InvalidInput(
                format!(
                    "no valid trajectory within {half_width} px of ({}, {})",
                    start.0, start.1
                )
                .into(),
            )
        })
}
