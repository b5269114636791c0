//! Unbiased flux estimation (paper Algorithm 3, spec §8), with the source model removed from
//! every frame of every trajectory column.

use bridge_core::{BridgeError, Result};
use ndarray::{Array2, ArrayView1, ArrayView2, ArrayView3};
use rayon::prelude::*;

use super::job::PacoJob;
use super::psf::VipShifter;
use super::settings::PacoParams;
use super::stats::{Scratch, dot, forward2, shrink_and_factor};

/// Iteration settings of [`unbiased_flux`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FluxOptions {
    /// Relative stopping tolerance ε (`|α_new − α| ≤ ε·|α_new|`).
    pub eps: f64,
    /// Maximum number of iterations.
    pub max_iter: usize,
    /// Initial flux α0.
    pub alpha0: f64,
}

impl Default for FluxOptions {
    fn default() -> Self {
        FluxOptions {
            eps: 1e-3,
            max_iter: 50,
            alpha0: 0.0,
        }
    }
}

/// The most iterations [`FluxOptions::max_iter`] may ask for (200 times the default; each
/// relearns the statistics around the position).
pub const MAX_ITER: usize = 10_000;

impl FluxOptions {
    /// Check every option: `eps` finite and positive (with NaN or a negative tolerance the
    /// iteration never converges), `alpha0` finite, `max_iter` in `[1, MAX_ITER]` (each iteration
    /// relearns the statistics around the position).
    pub fn validate(&self) -> Result<()> {
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err(BridgeError::invalid_argument(
                "eps",
                format!("must be a positive number, got {}", self.eps),
            ));
        }
        if !self.alpha0.is_finite() {
            return Err(BridgeError::invalid_argument(
                "alpha0",
                format!("must be finite, got {}", self.alpha0),
            ));
        }
        if self.max_iter == 0 || self.max_iter > MAX_ITER {
            return Err(BridgeError::invalid_argument(
                "max_iter",
                format!("must lie in [1, {MAX_ITER}], got {}", self.max_iter),
            ));
        }
        Ok(())
    }
}

/// Result of the unbiased flux estimation at one position.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FluxEstimate {
    /// Output-map row.
    pub y: f64,
    /// Output-map column.
    pub x: f64,
    /// Unbiased flux α (units of the normalised PSF: flux in a 1-FWHM-diameter aperture).
    pub flux: f64,
    /// Its standard deviation 1/√a.
    pub std: f64,
    /// S/N b/√a of the final iteration.
    pub snr: f64,
    /// Iterations performed.
    pub iterations: usize,
    /// Whether the tolerance was met before `max_iter`.
    pub converged: bool,
}

/// Paper Algorithm 3 at each `(y, x)` output position (sub-pixel positions allowed): iterate
/// `α ← max(b, 0)/a`, relearning the statistics of every trajectory column after subtracting
/// `α` times the (FFT-shifted) PSF model from every frame. Positions whose trajectory leaves the
/// statistics box give NaN.
///
/// The iteration runs on the job's working cube ([`PacoJob::cube_scale`]: the cube times a
/// power of two when its scale is extreme): `alpha0` is scaled in, flux and std are scaled out
/// (exactly), S/N does not depend on it.
pub fn unbiased_flux(
    cube: ArrayView3<'_, f64>,
    angles: ArrayView1<'_, f64>,
    psf: ArrayView2<'_, f64>,
    params: &PacoParams,
    positions: &[(f64, f64)],
    opts: FluxOptions,
) -> Result<Vec<FluxEstimate>> {
    opts.validate()?;
    let job = PacoJob::new(cube, angles, psf, params)?;
    // the working cube is the cube times s (a power of two): fluxes are times s there
    let s = job.cube_scale();
    let alpha0 = opts.alpha0 * s;
    if !alpha0.is_finite() {
        return Err(BridgeError::invalid_argument(
            "alpha0",
            format!(
                "{} overflows on this cube's working scale (PACO multiplies the cube by {s:e} to \
                 bring its largest |value| into [0.5, 1)); start from a flux of the order of the \
                 cube's values",
                opts.alpha0
            ),
        ));
    }
    let work = FluxOptions { alpha0, ..opts };
    // `params.control`: cancelled between iterations, one step of progress per position
    let control = &params.control;
    control.set_total(positions.len() as u64);
    positions
        .iter()
        .map(|&(y, x)| {
            let e = estimate_one(&job, y, x, work).map(|e| FluxEstimate {
                flux: e.flux / s,
                std: e.std / s,
                ..e
            });
            control.advance(1);
            e
        })
        .collect()
}

/// [`unbiased_flux`] at one position `(y0, x0)` on the working cube: the trajectory's pixels
/// ([`trajectory`]), its columns and models ([`columns`]), then `α ← max(b, 0)/a` with a and b
/// relearnt at every step ([`ab_without_source`]) until the tolerance or `max_iter`.
fn estimate_one(job: &PacoJob<'_>, y0: f64, x0: f64, opts: FluxOptions) -> Result<FluxEstimate> {
    let nan = FluxEstimate {
        y: y0,
        x: x0,
        flux: f64::NAN,
        std: f64::NAN,
        snr: f64::NAN,
        iterations: 0,
        converged: false,
    };
    let Some(pix) = trajectory(job, y0, x0) else {
        return Ok(nan);
    };
    let (xs, ms) = columns(job, &pix);
    let mut alpha = opts.alpha0;
    let mut out = nan;
    for it in 1..=opts.max_iter.max(1) {
        job.params.control.check("unbiased_flux")?;
        let (a, b) = ab_without_source(job, (&xs, &ms), alpha);
        if !(a.is_finite() && b.is_finite() && a > 0.0) {
            return Ok(nan);
        }
        let new = b.max(0.0) / a;
        let done = (new - alpha).abs() <= opts.eps * new.abs();
        out = FluxEstimate {
            y: y0,
            x: x0,
            flux: new,
            std: 1.0 / a.sqrt(),
            snr: b / a.sqrt(),
            iterations: it,
            converged: done,
        };
        alpha = new;
        if done {
            break;
        }
    }
    Ok(out)
}

/// The trajectory of `(y0, x0)` through the frames: for every frame its rounded pixel and the
/// fractional offset from it `(py, px, fy, fx)`; `None` when a pixel leaves the statistics box.
fn trajectory(job: &PacoJob<'_>, y0: f64, x0: f64) -> Option<Vec<(isize, isize, f64, f64)>> {
    let t = job.angles.len();
    let geom = job.geom;
    let mut pix = Vec::with_capacity(t);
    for &ang in &job.angles {
        let (y, x) = geom.position(y0, x0, ang);
        let (py, px) = (geom.round(y), geom.round(x));
        if !geom.in_box(py, px) {
            return None;
        }
        pix.push((py as isize, px as isize, y - py, x - px));
    }
    Some(pix)
}

/// The raw columns X_ℓ (T×K) and the models M_ℓ (T×K) for every ℓ of the trajectory `pix`,
/// ℓ-major: the patches of the cube about every frame's pixel, and the PSF shifted by each
/// frame's fractional offset (FFT-shifted) sampled at the same offsets.
fn columns(job: &PacoJob<'_>, pix: &[(isize, isize, f64, f64)]) -> (Vec<f64>, Vec<f64>) {
    let t = job.angles.len();
    let k = job.disk.len();
    let psf_n = &job.psf_n.psf;
    let (ph, pw) = psf_n.dim();
    let (cy, cx) = ((ph / 2) as isize, (pw / 2) as isize);
    let shifter = VipShifter::new(psf_n.view());
    let shifted: Vec<Array2<f64>> = pix
        .par_iter()
        .map(|&(_, _, fy, fx)| shifter.shift_full(fy, fx))
        .collect();
    let sample = |img: &Array2<f64>, r: isize, c: isize| -> f64 {
        if r < 0 || c < 0 || r as usize >= ph || c as usize >= pw {
            0.0
        } else {
            img[[r as usize, c as usize]]
        }
    };
    // Raw columns X_ℓ (T×K) and models M_ℓ (T×K) for every ℓ.
    let mut xs = vec![0.0; t * t * k];
    let mut ms = vec![0.0; t * t * k];
    xs.par_chunks_mut(t * k)
        .zip(ms.par_chunks_mut(t * k))
        .enumerate()
        .for_each(|(l, (xl, ml))| {
            let (py, px, _, _) = pix[l];
            for tt in 0..t {
                let (ty, tx, _, _) = pix[tt];
                for (kk, &(dy, dx)) in job.disk.iter().enumerate() {
                    xl[tt * k + kk] = job.cube[[tt, (py + dy) as usize, (px + dx) as usize]];
                    ml[tt * k + kk] =
                        sample(&shifted[tt], cy + dy - (ty - py), cx + dx - (tx - px));
                }
            }
        });
    (xs, ms)
}

/// a and b of one iteration: every column's statistics relearnt after subtracting `alpha`
/// times its model (mean, sample covariance, shrinkage and Cholesky factor), its contribution
/// `(hᵀC⁻¹h, hᵀC⁻¹(r − m))` computed in parallel, then summed in increasing ℓ; NaN where a
/// covariance cannot be factored.
fn ab_without_source(job: &PacoJob<'_>, (xs, ms): (&[f64], &[f64]), alpha: f64) -> (f64, f64) {
    let t = job.angles.len();
    let k = job.disk.len();
    let variant = job.params.variant;
    let contrib: Vec<(f64, f64)> = (0..t)
        .into_par_iter()
        .map_init(
            || (Scratch::new(k), vec![0.0; t * k], vec![0.0; k]),
            |(sc, xc, mean), l| {
                let xl = &xs[l * t * k..(l + 1) * t * k];
                let ml = &ms[l * t * k..(l + 1) * t * k];
                for ((o, &xv), &mv) in xc.iter_mut().zip(xl).zip(ml) {
                    *o = xv - alpha * mv;
                }
                mean.fill(0.0);
                for row in xc.chunks_exact(k) {
                    for (m, &v) in mean.iter_mut().zip(row) {
                        *m += v;
                    }
                }
                for m in mean.iter_mut() {
                    *m /= t as f64;
                }
                for row in xc.chunks_exact_mut(k) {
                    for (v, &m) in row.iter_mut().zip(mean.iter()) {
                        *v -= m;
                    }
                }
                sc.l.fill(0.0);
                for row in xc.chunks_exact(k) {
                    for i in 0..k {
                        let ri = row[i];
                        let li = &mut sc.l[i * k..i * k + i + 1];
                        for (lv, &rj) in li.iter_mut().zip(&row[..=i]) {
                            *lv += ri * rj;
                        }
                    }
                }
                let inv_t = 1.0 / t as f64;
                // S into the upper triangle (what shrink_and_factor reads).
                for i in 0..k {
                    for j in 0..=i {
                        sc.l[j * k + i] = sc.l[i * k + j] * inv_t;
                    }
                }
                if !shrink_and_factor(sc, k, t, variant) {
                    return (f64::NAN, f64::NAN);
                }
                // h_ℓ = model of frame ℓ in its own column; r_ℓ − m_ℓ with the raw patch.
                sc.v.copy_from_slice(&ml[l * k..(l + 1) * k]);
                for ((u, &xv), &m) in
                    sc.u.iter_mut()
                        .zip(&xl[l * k..(l + 1) * k])
                        .zip(mean.iter())
                {
                    *u = xv - m;
                }
                forward2(&sc.l, &sc.inv_diag, k, &mut sc.v, &mut sc.u);
                (dot(&sc.v, &sc.v), dot(&sc.v, &sc.u))
            },
        )
        .collect();
    let (mut a, mut b) = (0.0, 0.0);
    for (ca, cb) in contrib {
        a += ca;
        b += cb;
    }
    (a, b)
}
