//! The PSF's FWHM and centre: VIP's Levenberg–Marquardt fit of an Airy pattern
//! (astropy's `AiryDisk2D`), the intensity centroid, and VIP's recentring of an off-centre PSF
//! (spec §5.1).

use std::f64::consts::PI;

use bridge_core::{BridgeError, Result};
use ndarray::{Array2, ArrayView2};

use super::fft_shift::shift_any;

/// Bessel function of the first kind of order 1 (rational approximations, |error| < 1e-8).
fn bessel_j1(x: f64) -> f64 {
    let ax = x.abs();
    if ax < 8.0 {
        let y = x * x;
        let n = x
            * (72362614232.0
                + y * (-7895059235.0
                    + y * (242396853.1
                        + y * (-2972611.439 + y * (15704.48260 + y * (-30.16036606))))));
        let d = 144725228442.0
            + y * (2300535178.0 + y * (18583304.74 + y * (99447.43394 + y * (376.9991397 + y))));
        n / d
    } else {
        let z = 8.0 / ax;
        let y = z * z;
        let xx = ax - 2.356194491;
        let p1 = 1.0
            + y * (0.183105e-2
                + y * (-0.3516396496e-4 + y * (0.2457520174e-5 + y * (-0.240337019e-6))));
        let p2 = 0.04687499995
            + y * (-0.2002690873e-3
                + y * (0.8449199096e-5 + y * (-0.88228987e-6 + y * 0.105787412e-6)));
        let ans = (std::f64::consts::FRAC_2_PI / ax).sqrt() * (xx.cos() * p1 - z * xx.sin() * p2);
        if x < 0.0 { -ans } else { ans }
    }
}

/// First zero of J1 divided by π (astropy's `AiryDisk2D` scaling).
const AIRY_RZ: f64 = 1.219_669_891_266_504_5;

/// Airy model `A·[2·J1(u)/u]²`, `u = π·ρ·rz/ρ0`, so that ρ0 is the first-zero radius (astropy's
/// `AiryDisk2D`, which VIP fits).
fn airy(a: f64, rho: f64, rho0: f64) -> f64 {
    let u = PI * rho * AIRY_RZ / rho0;
    if u.abs() < 1e-8 {
        return a;
    }
    let v = 2.0 * bessel_j1(u) / u;
    a * v * v
}

/// FWHM of a PSF by a Levenberg–Marquardt fit of an Airy pattern to all its pixels (VIP
/// `fit_2dairydisk`): start values A = max − min, centre = intensity centroid,
/// ρ0 = (4·2.44/1.028)/2; result `2·ρ0·1.028/2.44`.
pub fn fit_airy_fwhm(psf: ArrayView2<'_, f64>) -> Result<f64> {
    Ok(fit_airy(psf)?.fwhm)
}

/// Result of an Airy fit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AiryFit {
    /// Full width at half maximum, pixels.
    pub fwhm: f64,
    /// Fitted centre row.
    pub y: f64,
    /// Fitted centre column.
    pub x: f64,
    /// Fitted peak amplitude.
    pub amplitude: f64,
}

/// Levenberg–Marquardt Airy fit (see [`fit_airy_fwhm`]), returning the centre too.
pub fn fit_airy(psf: ArrayView2<'_, f64>) -> Result<AiryFit> {
    let (mut sy, mut sx, mut st) = (0.0, 0.0, 0.0);
    let (mut mx, mut mn) = (f64::NEG_INFINITY, f64::INFINITY);
    for ((i, j), &v) in psf.indexed_iter() {
        if !v.is_finite() {
            return Err(BridgeError::InvalidInput(
                "PSF contains non-finite values".into(),
            ));
        }
        sy += v * i as f64;
        sx += v * j as f64;
        st += v;
        mx = mx.max(v);
        mn = mn.min(v);
    }
    if st <= 0.0 || mx <= mn {
        return Err(BridgeError::InvalidInput(
            "PSF has no positive flux; cannot fit its FWHM".into(),
        ));
    }
    // params: A, y0, x0, rho0
    let mut p = [mx - mn, sy / st, sx / st, (4.0 * 2.44 / 1.028) / 2.0];
    let resid = |p: &[f64; 4]| -> f64 {
        psf.indexed_iter()
            .map(|((i, j), &v)| {
                let rho = ((i as f64 - p[1]).powi(2) + (j as f64 - p[2]).powi(2)).sqrt();
                let d = v - airy(p[0], rho, p[3]);
                d * d
            })
            .sum()
    };
    let mut lambda = 1e-3;
    let mut cost = resid(&p);
    for _ in 0..200 {
        // Numerical Jacobian (central differences) and normal equations.
        let mut jtj = [[0.0f64; 4]; 4];
        let mut jtr = [0.0f64; 4];
        let steps = [
            1e-7 * p[0].abs().max(1e-12),
            1e-7,
            1e-7,
            1e-7 * p[3].abs().max(1e-12),
        ];
        for ((i, j), &v) in psf.indexed_iter() {
            let f = |q: &[f64; 4]| {
                let rho = ((i as f64 - q[1]).powi(2) + (j as f64 - q[2]).powi(2)).sqrt();
                airy(q[0], rho, q[3])
            };
            let r = v - f(&p);
            let mut g = [0.0; 4];
            for k in 0..4 {
                let mut qp = p;
                let mut qm = p;
                qp[k] += steps[k];
                qm[k] -= steps[k];
                g[k] = (f(&qp) - f(&qm)) / (2.0 * steps[k]);
            }
            for a in 0..4 {
                jtr[a] += g[a] * r;
                for b in 0..4 {
                    jtj[a][b] += g[a] * g[b];
                }
            }
        }
        let mut improved = false;
        for _ in 0..20 {
            let mut m = jtj;
            for (a, row) in m.iter_mut().enumerate() {
                row[a] *= 1.0 + lambda;
            }
            let Some(delta) = solve4(m, jtr) else {
                lambda *= 10.0;
                continue;
            };
            let q = [
                p[0] + delta[0],
                p[1] + delta[1],
                p[2] + delta[2],
                p[3] + delta[3],
            ];
            let c = resid(&q);
            if c.is_finite() && c < cost {
                let rel = (cost - c) / cost.max(1e-300);
                p = q;
                cost = c;
                lambda = (lambda / 10.0).max(1e-12);
                improved = rel > 1e-15;
                break;
            }
            lambda *= 10.0;
        }
        if !improved {
            break;
        }
    }
    let fwhm = 2.0 * p[3].abs() * 1.028 / 2.44;
    if !fwhm.is_finite() || fwhm <= 0.0 {
        return Err(BridgeError::InvalidInput(
            "Airy fit of the PSF did not converge".into(),
        ));
    }
    Ok(AiryFit {
        fwhm,
        y: p[1],
        x: p[2],
        amplitude: p[0],
    })
}

/// Solve a 4×4 linear system by Gaussian elimination with partial pivoting.
fn solve4(mut m: [[f64; 4]; 4], mut b: [f64; 4]) -> Option<[f64; 4]> {
    for c in 0..4 {
        let piv = (c..4).max_by(|&a, &bb| m[a][c].abs().total_cmp(&m[bb][c].abs()))?;
        if m[piv][c].abs() < 1e-300 {
            return None;
        }
        m.swap(c, piv);
        b.swap(c, piv);
        for r in c + 1..4 {
            let f = m[r][c] / m[c][c];
            let pivot_row = m[c];
            for (dst, &src) in m[r][c..].iter_mut().zip(&pivot_row[c..]) {
                *dst -= f * src;
            }
            b[r] -= f * b[c];
        }
    }
    let mut x = [0.0; 4];
    for r in (0..4).rev() {
        let mut s = b[r];
        for k in r + 1..4 {
            s -= m[r][k] * x[k];
        }
        x[r] = s / m[r][r];
    }
    Some(x)
}

/// Intensity centroid (y, x) of an image.
pub fn centroid(img: ArrayView2<'_, f64>) -> (f64, f64) {
    let (mut sy, mut sx, mut st) = (0.0, 0.0, 0.0);
    for ((i, j), &v) in img.indexed_iter() {
        sy += v * i as f64;
        sx += v * j as f64;
        st += v;
    }
    (sy / st, sx / st)
}

/// VIP's recentring (spec §5.1 step 2): if the intensity centroid is more than 0.01 px from the
/// array centre on both axes, fit the centre and FFT-shift the PSF onto the centre; up to 3 passes.
pub fn recenter(psf: &Array2<f64>) -> Result<Array2<f64>> {
    let (h, w) = psf.dim();
    let (cy, cx) = ((h as f64 - 1.0) / 2.0, (w as f64 - 1.0) / 2.0);
    let mut cur = psf.clone();
    for _ in 0..3 {
        let (gy, gx) = centroid(cur.view());
        if !((gy - cy).abs() > 0.01 && (gx - cx).abs() > 0.01) {
            break;
        }
        let fit = fit_airy(cur.view())?;
        let (dy, dx) = (cy - fit.y, cx - fit.x);
        if !(dy.is_finite() && dx.is_finite())
            || dy.abs() > h as f64 / 2.0
            || dx.abs() > w as f64 / 2.0
        {
            return Err(BridgeError::InvalidInput(
                "cannot recentre the PSF: its fitted centre is off the array".into(),
            ));
        }
        cur = shift_any(cur.view(), dy, dx);
    }
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn j1_values() {
        assert!((bessel_j1(1.0) - 0.440_050_585_744_933_5).abs() < 1e-8);
        assert!((bessel_j1(10.0) - 0.043_472_746_168_861_44).abs() < 1e-7);
    }
}
