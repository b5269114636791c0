//! VIP's FFT sub-pixel shift (`frame_shift(…, imlib='vip-fft')`) in closed form: the shift
//! operator of each axis is a sum of complex exponentials evaluated directly, so a template is
//! computed only at the patch pixels it needs ([`VipShifter::sample`]) and a whole PSF can be
//! shifted by any amount ([`shift_any`]) without an FFT.

use std::f64::consts::PI;

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

/// VIP FFT shift of a whole image by any (dy, dx): integer part exactly, fractional part by
/// [`VipShifter::shift_full`].
pub(super) fn shift_any(img: ArrayView2<'_, f64>, dy: f64, dx: f64) -> Array2<f64> {
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
}
