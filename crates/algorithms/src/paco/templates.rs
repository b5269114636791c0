//! The PSF template `h_ℓ` of every (φ0, ℓ) pair for the chosen [`SubPixel`] mode (spec §5.2):
//! the centred template, VIP's exact FFT shift, a bilinearly blended table of exact shifts, or
//! the quintic B-spline. Built once per run from the normalised PSF and the patch disk; shared by
//! the CPU kernels and, for the per-pair modes, by the device backends.

use bridge_core::{BridgeError, Result};
use ndarray::Array2;
use rayon::prelude::*;

use super::psf::{Spline5Templates, VipShifter};
use super::settings::{Rounding, SubPixel};

/// Templates for one run.
pub(crate) enum Templates {
    Centred(Vec<f64>),
    Fft {
        psf: Array2<f64>,
        points: Vec<(isize, isize)>,
    },
    Table {
        q: usize,
        lo: f64,
        k: usize,
        data: Vec<f64>,
    },
    /// Quintic B-spline coefficients of the normalised PSF (zero outside, exact boundary) and
    /// the disk points as row runs, evaluated separably per template.
    Spline5 {
        spline: Spline5Templates,
    },
}

impl Templates {
    pub(crate) fn new(
        psf_n: &Array2<f64>,
        disk: &[(isize, isize)],
        mode: SubPixel,
        rounding: Rounding,
    ) -> Result<Self> {
        let (ph, pw) = psf_n.dim();
        let (cy, cx) = ((ph / 2) as isize, (pw / 2) as isize);
        let points: Vec<(isize, isize)> = disk.iter().map(|&(dy, dx)| (cy + dy, cx + dx)).collect();
        let k = disk.len();
        Ok(match mode {
            SubPixel::Off => {
                let mut h = vec![0.0; k];
                VipShifter::new(psf_n.view()).sample(0.0, 0.0, &points, &mut h);
                Templates::Centred(h)
            }
            SubPixel::Spline5 => Templates::Spline5 {
                spline: Spline5Templates::new(psf_n.view(), &points),
            },
            SubPixel::VipFft => Templates::Fft {
                psf: psf_n.clone(),
                points,
            },
            SubPixel::Table { q } => {
                if q == 0 || q > 1024 {
                    return Err(BridgeError::invalid_argument(
                        "subpixel table q",
                        "must be in 1..=1024",
                    ));
                }
                let lo = match rounding {
                    Rounding::Trunc => 0.0,
                    Rounding::Nearest => -0.5,
                };
                let sh = VipShifter::new(psf_n.view());
                let n = q + 1;
                let mut data = vec![0.0; n * n * k];
                data.par_chunks_mut(k).enumerate().for_each(|(idx, out)| {
                    let (i, j) = (idx / n, idx % n);
                    sh.sample(
                        lo + i as f64 / q as f64,
                        lo + j as f64 / q as f64,
                        &points,
                        out,
                    );
                });
                Templates::Table { q, lo, k, data }
            }
        })
    }

    /// Template for fractional offsets (fy, fx).
    #[inline(always)]
    pub(crate) fn fill(&self, fy: f64, fx: f64, out: &mut [f64]) {
        match self {
            Templates::Centred(h) => out.copy_from_slice(h),
            Templates::Fft { psf, points } => {
                VipShifter::new(psf.view()).sample(fy, fx, points, out)
            }
            Templates::Spline5 { spline } => spline.fill(fy, fx, out),
            Templates::Table { q, lo, k, data } => {
                let n = q + 1;
                let qf = *q as f64;
                let uy = ((fy - lo) * qf).clamp(0.0, qf);
                let ux = ((fx - lo) * qf).clamp(0.0, qf);
                let iy = (uy.floor() as usize).min(q - 1);
                let ix = (ux.floor() as usize).min(q - 1);
                let (ty, tx) = (uy - iy as f64, ux - ix as f64);
                let w00 = (1.0 - ty) * (1.0 - tx);
                let w01 = (1.0 - ty) * tx;
                let w10 = ty * (1.0 - tx);
                let w11 = ty * tx;
                let t00 = &data[(iy * n + ix) * k..][..*k];
                let t01 = &data[(iy * n + ix + 1) * k..][..*k];
                let t10 = &data[((iy + 1) * n + ix) * k..][..*k];
                let t11 = &data[((iy + 1) * n + ix + 1) * k..][..*k];
                for (kk, o) in out.iter_mut().enumerate() {
                    *o = w00 * t00[kk] + w01 * t01[kk] + w10 * t10[kk] + w11 * t11[kk];
                }
            }
        }
    }
}
