//! PSF handling: VIP's FFT sub-pixel shift (in closed form), normalisation to unit flux in a
//! 1-FWHM-diameter aperture, Airy FWHM fit and the patch templates (spec §5).

use std::f64::consts::PI;

use bridge_core::{BridgeError, Result};
use ndarray::{Array2, ArrayView2};

/// Coefficients of VIP's 1-D FFT shift operator for one axis.
///
/// The shifted signal is `y[o] = Σ_i A(o − i) x[i]` with
/// `A(d) = (1/n) Σ_{k=−n/2}^{n/2−1} exp(2πi k (d − f)/n)` (signed DFT frequencies, Nyquist
/// negative), `n` the zero-padded even length. The padding position does not matter because `A`
/// is `n`-periodic and the output window is cropped back; only `n` does.
#[derive(Debug, Clone)]
pub(crate) struct ShiftAxis {
    /// Real parts of A(d) for d = −(s−1) … (s−1), index d + s − 1.
    re: Vec<f64>,
    /// Imaginary parts, same indexing.
    im: Vec<f64>,
    s: usize,
}

impl ShiftAxis {
    pub(crate) fn new(s: usize, f: f64, n: usize) -> Self {
        let len = 2 * s - 1;
        let mut re = vec![0.0; len];
        let mut im = vec![0.0; len];
        if f == 0.0 {
            re[s - 1] = 1.0;
        } else {
            let nf = n as f64;
            for (idx, (r, i)) in re.iter_mut().zip(im.iter_mut()).enumerate() {
                let d = idx as isize - (s as isize - 1);
                // x = d − f is exact near 0 (Sterbenz), so sin(πx) keeps full relative precision.
                let x = d as f64 - f;
                // Σ_k e^{iβk}, β = 2πx/n, k = −n/2…n/2−1, equals e^{−iπx/n}·sin(πx)/sin(πx/n).
                if x == 0.0 {
                    *r = 1.0;
                    *i = 0.0;
                } else {
                    let num = (PI * x).sin();
                    let arg = PI * x / nf;
                    *r = num * arg.cos() / arg.sin() / nf;
                    *i = -num / nf;
                }
            }
        }
        ShiftAxis { re, im, s }
    }

    #[inline]
    fn at(&self, d: isize) -> (f64, f64) {
        let idx = d + self.s as isize - 1;
        if idx < 0 || idx as usize >= self.re.len() {
            (0.0, 0.0)
        } else {
            (self.re[idx as usize], self.im[idx as usize])
        }
    }
}

/// Padded FFT length VIP uses for a shift of (fy, fx) on an axis of length `s`.
fn padded_len(s: usize, fy: f64, fx: f64) -> usize {
    let p = fy.abs().max(fx.abs()).ceil() as usize;
    let n = s + 2 * p;
    if n % 2 == 1 { n + 1 } else { n }
}

/// VIP's `frame_shift(psf, fy, fx, imlib='vip-fft')`, evaluated only at the requested output
/// pixels `(row, col)` of the original window (values outside the window are 0).
pub(crate) struct VipShifter<'a> {
    psf: ArrayView2<'a, f64>,
}

impl<'a> VipShifter<'a> {
    pub(crate) fn new(psf: ArrayView2<'a, f64>) -> Self {
        VipShifter { psf }
    }

    /// Shift by (fy, fx) and sample at `points` (row, col) in the original PSF grid.
    pub(crate) fn sample(&self, fy: f64, fx: f64, points: &[(isize, isize)], out: &mut [f64]) {
        let (h, w) = self.psf.dim();
        if fy == 0.0 && fx == 0.0 {
            for (o, &(r, c)) in out.iter_mut().zip(points) {
                *o = if r >= 0 && c >= 0 && (r as usize) < h && (c as usize) < w {
                    self.psf[[r as usize, c as usize]]
                } else {
                    0.0
                };
            }
            return;
        }
        let ay = ShiftAxis::new(h, fy, padded_len(h, fy, fx));
        let ax = ShiftAxis::new(w, fx, padded_len(w, fy, fx));
        // Separable: T1 = X·ReAxᵀ and T2 = X·ImAxᵀ on the needed columns only, then
        // out[r][c] = Σ_i ReAy(r−i)·T1[i][c] − ImAy(r−i)·T2[i][c].
        let inside =
            |&&(r, c): &&(isize, isize)| r >= 0 && c >= 0 && (r as usize) < h && (c as usize) < w;
        let cmin = points.iter().filter(inside).map(|p| p.1).min().unwrap_or(0);
        let cmax = points
            .iter()
            .filter(inside)
            .map(|p| p.1)
            .max()
            .unwrap_or(-1);
        let nc = (cmax - cmin + 1).max(0) as usize;
        let mut t1 = vec![0.0; h * nc];
        let mut t2 = vec![0.0; h * nc];
        for i in 0..h {
            let row = self.psf.row(i);
            for cc in 0..nc {
                let c = cmin + cc as isize;
                let (mut s1, mut s2) = (0.0, 0.0);
                for (j, &v) in row.iter().enumerate() {
                    let (xr, xi) = ax.at(c - j as isize);
                    s1 += v * xr;
                    s2 += v * xi;
                }
                t1[i * nc + cc] = s1;
                t2[i * nc + cc] = s2;
            }
        }
        for (o, p) in out.iter_mut().zip(points) {
            if !inside(&p) {
                *o = 0.0;
                continue;
            }
            let (r, c) = *p;
            let cc = (c - cmin) as usize;
            let mut acc = 0.0;
            for i in 0..h {
                let (yr, yi) = ay.at(r - i as isize);
                acc += yr * t1[i * nc + cc] - yi * t2[i * nc + cc];
            }
            *o = acc;
        }
    }

    /// Shift the whole PSF by (fy, fx) (separable evaluation), returning an array of its size.
    pub(crate) fn shift_full(&self, fy: f64, fx: f64) -> Array2<f64> {
        let (h, w) = self.psf.dim();
        if fy == 0.0 && fx == 0.0 {
            return self.psf.to_owned();
        }
        let ay = ShiftAxis::new(h, fy, padded_len(h, fy, fx));
        let ax = ShiftAxis::new(w, fx, padded_len(w, fy, fx));
        // T1 = X·ReAxᵀ, T2 = X·ImAxᵀ (h × w each).
        let mut t1 = Array2::<f64>::zeros((h, w));
        let mut t2 = Array2::<f64>::zeros((h, w));
        for i in 0..h {
            for c in 0..w {
                let mut s1 = 0.0;
                let mut s2 = 0.0;
                for j in 0..w {
                    let (xr, xi) = ax.at(c as isize - j as isize);
                    let v = self.psf[[i, j]];
                    s1 += v * xr;
                    s2 += v * xi;
                }
                t1[[i, c]] = s1;
                t2[[i, c]] = s2;
            }
        }
        let mut out = Array2::<f64>::zeros((h, w));
        for r in 0..h {
            for c in 0..w {
                let mut acc = 0.0;
                for i in 0..h {
                    let (yr, yi) = ay.at(r as isize - i as isize);
                    acc += yr * t1[[i, c]] - yi * t2[[i, c]];
                }
                out[[r, c]] = acc;
            }
        }
        out
    }
}

/// Area of the intersection of the disc `u² + v² ≤ r²` with `[0, x] × [0, y]`, x, y ≥ 0.
fn quadrant_area(x: f64, y: f64, r: f64) -> f64 {
    let x = x.min(r);
    let y = y.min(r);
    if x <= 0.0 || y <= 0.0 {
        return 0.0;
    }
    if x * x + y * y <= r * r {
        return x * y;
    }
    let g = |u: f64| {
        0.5 * (u * (r * r - u * u).max(0.0).sqrt() + r * r * (u / r).clamp(-1.0, 1.0).asin())
    };
    let xc = (r * r - y * y).max(0.0).sqrt();
    xc * y + g(x) - g(xc)
}

/// Signed area of the disc ∩ the rectangle spanned by the origin and (x, y).
fn signed_area(x: f64, y: f64, r: f64) -> f64 {
    x.signum() * y.signum() * quadrant_area(x.abs(), y.abs(), r)
}

/// Exact area of the intersection of a disc of radius `r` centred at the origin with the
/// rectangle `[x0, x1] × [y0, y1]` (photutils' `exact` method).
pub fn circle_rect_overlap(x0: f64, x1: f64, y0: f64, y1: f64, r: f64) -> f64 {
    signed_area(x1, y1, r) - signed_area(x0, y1, r) - signed_area(x1, y0, r)
        + signed_area(x0, y0, r)
}

/// Flux of `img` inside a circle of diameter `fwhm` centred on the array centre
/// (`(s−1)/2` per axis), with exact pixel/circle overlap areas.
pub fn aperture_flux(img: ArrayView2<'_, f64>, fwhm: f64) -> f64 {
    let (h, w) = img.dim();
    let cy = (h as f64 - 1.0) / 2.0;
    let cx = (w as f64 - 1.0) / 2.0;
    let r = fwhm / 2.0;
    let mut sum = 0.0;
    for ((i, j), &v) in img.indexed_iter() {
        let y = i as f64 - cy;
        let x = j as f64 - cx;
        if y.abs() - 0.5 > r || x.abs() - 0.5 > r {
            continue;
        }
        sum += v * circle_rect_overlap(x - 0.5, x + 0.5, y - 0.5, y + 0.5, r);
    }
    sum
}

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

/// VIP FFT shift of a whole image by any (dy, dx): integer part exactly, fractional part by
/// [`VipShifter::shift_full`].
fn shift_any(img: ArrayView2<'_, f64>, dy: f64, dx: f64) -> Array2<f64> {
    let (h, w) = img.dim();
    let (iy, ix) = (dy.trunc(), dx.trunc());
    let frac = VipShifter::new(img).shift_full(dy - iy, dx - ix);
    let (iy, ix) = (iy as isize, ix as isize);
    Array2::from_shape_fn((h, w), |(r, c)| {
        let (sr, sc) = (r as isize - iy, c as isize - ix);
        if sr < 0 || sc < 0 || sr as usize >= h || sc as usize >= w {
            0.0
        } else {
            frac[[sr as usize, sc as usize]]
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_full_and_quarter() {
        let r = 1.0;
        let full = circle_rect_overlap(-2.0, 2.0, -2.0, 2.0, r);
        assert!((full - PI).abs() < 1e-12);
        let q = circle_rect_overlap(0.0, 2.0, 0.0, 2.0, r);
        assert!((q - PI / 4.0).abs() < 1e-12);
        let inside = circle_rect_overlap(-0.1, 0.1, -0.2, 0.3, r);
        assert!((inside - 0.2 * 0.5).abs() < 1e-15);
    }

    #[test]
    fn shift_zero_and_integer() {
        let psf = Array2::from_shape_fn((7, 7), |(i, j)| {
            (-(((i as f64 - 3.0).powi(2) + (j as f64 - 3.0).powi(2)) / 2.0)).exp()
        });
        let s = VipShifter::new(psf.view());
        let full = s.shift_full(1.0, 0.0);
        for i in 1..7 {
            for j in 0..7 {
                assert!((full[[i, j]] - psf[[i - 1, j]]).abs() < 1e-12);
            }
        }
        let pts: Vec<(isize, isize)> = (0..7).flat_map(|i| (0..7).map(move |j| (i, j))).collect();
        let mut out = vec![0.0; 49];
        s.sample(0.3, -0.2, &pts, &mut out);
        let full = s.shift_full(0.3, -0.2);
        for (k, &(i, j)) in pts.iter().enumerate() {
            assert!((out[k] - full[[i as usize, j as usize]]).abs() < 1e-14);
        }
    }

    #[test]
    fn j1_values() {
        assert!((bessel_j1(1.0) - 0.440_050_585_744_933_5).abs() < 1e-8);
        assert!((bessel_j1(10.0) - 0.043_472_746_168_861_44).abs() < 1e-7);
    }
}
