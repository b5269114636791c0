//! The interpolating quintic B-spline of the PSF (`SubPixel::Spline5`, spec §5.2): the exact
//! prefilter for a PSF that is zero outside its array, the spline itself ([`QuinticSpline`]) and
//! the separable evaluation of a whole patch template per fractional offset
//! ([`Spline5Templates`]).

use ndarray::ArrayView2;

/// Poles of the quintic B-spline prefilter: the two roots inside the unit circle of
/// `z⁴ + 26z³ + 66z² + 26z + 1`, i.e. of `Σ_k β5(k) z^k = (z⁻² + 26z⁻¹ + 66 + 26z + z²)/120`.
/// With `w = z + 1/z` the polynomial is `w² + 26w + 64`, so `w = −13 ± √105` and
/// `z = 2/(w − √(w² − 4))`.
pub(crate) const SPLINE5_POLES: [f64; 2] = [-0.430_575_347_099_973_8, -0.043_096_288_203_264_65];

/// Coefficients further than this many pixels outside the PSF array (or the sampled points) are
/// not stored and count as zero: they are below `|z1|^44 ≈ 8e-17` of the largest coefficient.
const SPLINE5_MARGIN: usize = 44;

#[inline(always)]
fn pow5(v: f64) -> f64 {
    let v2 = v * v;
    v2 * v2 * v
}

/// The centred quintic B-spline β5(x) (support |x| < 3).
#[cfg(test)]
pub(crate) fn bspline5(x: f64) -> f64 {
    let a = x.abs();
    if a >= 3.0 {
        return 0.0;
    }
    let mut s = pow5(3.0 - a);
    if a < 2.0 {
        s -= 6.0 * pow5(2.0 - a);
    }
    if a < 1.0 {
        s += 15.0 * pow5(1.0 - a);
    }
    s / 120.0
}

/// The six weights `β5(t − j)`, j = −2…3, of a point at `i + t` (i integer, t in [0, 1]) on the
/// coefficients `i − 2 … i + 3`.
#[inline(always)]
pub(crate) fn bspline5_weights(t: f64) -> [f64; 6] {
    let s = 1.0 - t;
    let (t5, s5) = (pow5(t), pow5(s));
    let (t1, s1) = (pow5(1.0 + t), pow5(1.0 + s));
    const K: f64 = 1.0 / 120.0;
    [
        s5 * K,
        (s1 - 6.0 * s5) * K,
        (pow5(2.0 + s) - 6.0 * s1 + 15.0 * s5) * K,
        (pow5(2.0 + t) - 6.0 * t1 + 15.0 * t5) * K,
        (t1 - 6.0 * t5) * K,
        t5 * K,
    ]
}

/// Quintic B-spline coefficients, in place, of the signal that equals `line` on its indices and
/// is **zero everywhere else on the infinite line**: `c = b5⁻¹ * s` with `b5 = [1, 26, 66, 26,
/// 1]/120`, returned on the indices of `line`. Exact (up to rounding) for any length ≥ 1, with
/// no padding needed:
///
/// The prefilter is `120 / ((W − w1)(W − w2))`, `W = Z + Z⁻¹`, applied as two passes; the pass
/// for pole z is the causal recursion `c⁺[k] = x[k] + z·c⁺[k−1]` followed by the anti-causal
/// `c[k] = z·(c[k+1] − c⁺[k])`. For the first pass the input is zero outside, so
/// `c⁺[0] = x[0]` and `c[n−1] = −z1/(1 − z1²)·c⁺[n−1]` exactly. Its output is then geometric
/// with ratio z1 on both sides (`c1[−j] = z1^j·c1[0]`, `c1[n−1+j] = z1^j·c1[n−1]`), so the
/// second pass starts exactly with `c⁺[0] = c1[0]/(1 − z1·z2)` and
/// `c[n−1] = −z2/(1 − z2²)·(c⁺[n−1] + c1[n−1]·z1·z2/(1 − z1·z2))`.
pub(crate) fn bspline5_prefilter(line: &mut [f64]) {
    let n = line.len();
    if n == 0 {
        return;
    }
    let [z1, z2] = SPLINE5_POLES;
    for v in line.iter_mut() {
        *v *= 120.0;
    }
    // Pole z1.
    for k in 1..n {
        line[k] += z1 * line[k - 1];
    }
    line[n - 1] *= -z1 / (1.0 - z1 * z1);
    for k in (0..n - 1).rev() {
        line[k] = z1 * (line[k + 1] - line[k]);
    }
    // Pole z2, on an input with geometric tails of ratio z1.
    let last = line[n - 1];
    let zz = z1 * z2;
    line[0] /= 1.0 - zz;
    for k in 1..n {
        line[k] += z2 * line[k - 1];
    }
    line[n - 1] = -z2 / (1.0 - z2 * z2) * (line[n - 1] + last * zz / (1.0 - zz));
    for k in (0..n - 1).rev() {
        line[k] = z2 * (line[k + 1] - line[k]);
    }
}

/// Interpolating quintic B-spline of an image that is zero outside its array:
/// `f(u, v) = Σ_{i,j} c[i][j]·β5(u − i)·β5(v − j)` with `f(i, j) = img[i][j]` at every integer
/// point (0 outside the array). The coefficients are computed exactly for the infinite zero
/// extension (separable [`bspline5_prefilter`] along rows, then columns) on the array extended
/// by a margin; beyond the margin they count as zero (see `SPLINE5_MARGIN`).
#[derive(Debug, Clone)]
pub(crate) struct QuinticSpline {
    coef: Vec<f64>,
    rows: usize,
    cols: usize,
    /// Grid index of image pixel (0, 0).
    off: (isize, isize),
}

impl QuinticSpline {
    /// Spline of `img`; the stored coefficient grid covers the image and the image-coordinate
    /// box `[r0, r1] × [c0, c1]` (inclusive), each extended by the margin.
    pub(crate) fn new(
        img: ArrayView2<'_, f64>,
        (r0, r1): (isize, isize),
        (c0, c1): (isize, isize),
    ) -> Self {
        let (h, w) = img.dim();
        let m = SPLINE5_MARGIN as isize;
        let lo_r = r0.min(0) - m;
        let hi_r = r1.max(h as isize - 1) + m;
        let lo_c = c0.min(0) - m;
        let hi_c = c1.max(w as isize - 1) + m;
        let rows = (hi_r - lo_r + 1) as usize;
        let cols = (hi_c - lo_c + 1) as usize;
        let off = (-lo_r, -lo_c);
        let mut coef = vec![0.0; rows * cols];
        // Rows holding the image: 1-D prefilter along x. The other rows stay zero.
        for i in 0..h {
            let gr = (i as isize + off.0) as usize;
            let line = &mut coef[gr * cols..(gr + 1) * cols];
            for (j, &v) in img.row(i).iter().enumerate() {
                line[(j as isize + off.1) as usize] = v;
            }
            bspline5_prefilter(line);
        }
        // Every column: 1-D prefilter along y (its input is zero outside the image rows).
        let mut col = vec![0.0; rows];
        for j in 0..cols {
            for (r, v) in col.iter_mut().enumerate() {
                *v = coef[r * cols + j];
            }
            bspline5_prefilter(&mut col);
            for (r, &v) in col.iter().enumerate() {
                coef[r * cols + j] = v;
            }
        }
        QuinticSpline {
            coef,
            rows,
            cols,
            off,
        }
    }

    /// Value at image coordinates (u, v) = (row, column), any finite values (0 far outside,
    /// NaN for non-finite input).
    pub(crate) fn eval(&self, u: f64, v: f64) -> f64 {
        if !(u.is_finite() && v.is_finite()) {
            return f64::NAN;
        }
        let gu = u + self.off.0 as f64;
        let gv = v + self.off.1 as f64;
        if gu <= -3.0 || gv <= -3.0 || gu >= self.rows as f64 + 2.0 || gv >= self.cols as f64 + 2.0
        {
            return 0.0;
        }
        let (fu, fv) = (gu.floor(), gv.floor());
        let wy = bspline5_weights(gu - fu);
        let wx = bspline5_weights(gv - fv);
        let (iu, iv) = (fu as isize - 2, fv as isize - 2);
        let mut acc = 0.0;
        for (a, &wa) in wy.iter().enumerate() {
            let r = iu + a as isize;
            if r < 0 || r as usize >= self.rows {
                continue;
            }
            let mut s = 0.0;
            for (b, &wb) in wx.iter().enumerate() {
                let c = iv + b as isize;
                if c >= 0 && (c as usize) < self.cols {
                    s += wb * self.coef[r as usize * self.cols + c as usize];
                }
            }
            acc += wa * s;
        }
        acc
    }
}

/// A run of sampled points on one row, consecutive columns and consecutive output indices.
#[derive(Debug, Clone, Copy)]
struct RowRun {
    /// Grid row of the points.
    row: isize,
    /// Grid column of the first point.
    col: isize,
    /// Output index of the first point.
    start: usize,
    /// Number of points.
    len: usize,
}

/// Capacity (f64) of the on-stack buffer of x-reduced coefficient rows in
/// [`Spline5Templates::fill`]: `(rows of the points + 5) × (columns of the points)` must fit,
/// which holds for patch radii up to 6 (126 values for R = 4); larger patches take 36 MACs per
/// point instead.
const SPLINE5_SCRATCH: usize = 256;

/// Sub-pixel templates from the interpolating quintic B-spline of the PSF (`SubPixel::Spline5`):
/// `h[k] = f(r_k − fy, c_k − fx)` for the points `(r_k, c_k)` of the patch in PSF coordinates.
///
/// All points of a template share the fractional parts of their offsets, hence one set of 6 + 6
/// weights per template. Separable evaluation on the points' bounding box: every coefficient
/// row the box needs is reduced with the x weights (6 MACs per box column), then every point
/// takes 6 MACs with the y weights: `6·(H + 5)·W + 6K` MACs per template (756 + 294 for R = 4,
/// against `36K` = 1764 directly), in contiguous loops the compiler vectorises.
#[derive(Debug, Clone)]
pub(crate) struct Spline5Templates {
    spline: QuinticSpline,
    points: Vec<(isize, isize)>,
    runs: Vec<RowRun>,
    /// Grid bounding box of the points: (row min, row max, col min, col max).
    bbox: (isize, isize, isize, isize),
}

impl Spline5Templates {
    pub(crate) fn new(psf: ArrayView2<'_, f64>, points: &[(isize, isize)]) -> Self {
        let rmin = points.iter().map(|p| p.0).min().unwrap_or(0);
        let rmax = points.iter().map(|p| p.0).max().unwrap_or(0);
        let cmin = points.iter().map(|p| p.1).min().unwrap_or(0);
        let cmax = points.iter().map(|p| p.1).max().unwrap_or(0);
        let spline = QuinticSpline::new(psf, (rmin, rmax), (cmin, cmax));
        let (oy, ox) = spline.off;
        let mut runs: Vec<RowRun> = Vec::new();
        for (k, &(r, c)) in points.iter().enumerate() {
            let (r, c) = (r + oy, c + ox);
            match runs.last_mut() {
                Some(run) if run.row == r && run.col + run.len as isize == c => run.len += 1,
                _ => runs.push(RowRun {
                    row: r,
                    col: c,
                    start: k,
                    len: 1,
                }),
            }
        }
        Spline5Templates {
            spline,
            points: points.to_vec(),
            runs,
            bbox: (rmin + oy, rmax + oy, cmin + ox, cmax + ox),
        }
    }

    /// The template for the fractional offsets (fy, fx): `out[k] = f(r_k − fy, c_k − fx)`.
    /// Any finite offsets; NaN for non-finite ones. Always inlined, so that it is compiled with
    /// the caller's target features (the AVX2 pair kernel).
    #[inline(always)]
    pub(crate) fn fill(&self, fy: f64, fx: f64, out: &mut [f64]) {
        // Position r − fy = (r + ny) + ty with ny = floor(−fy), ty in [0, 1]: coefficient rows
        // r + ny − 2 … r + ny + 3.
        let (sy, sx) = ((-fy).floor(), (-fx).floor());
        let sp = &self.spline;
        let (r0, r1, c0, c1) = self.bbox;
        let lim = SPLINE5_MARGIN as f64;
        let fast = sy.abs() <= lim && sx.abs() <= lim && {
            let (ny, nx) = (sy as isize, sx as isize);
            r0 + ny - 2 >= 0
                && r1 + ny + 3 < sp.rows as isize
                && c0 + nx - 2 >= 0
                && c1 + nx + 3 < sp.cols as isize
        };
        if !fast || self.points.is_empty() {
            for (o, &(r, c)) in out.iter_mut().zip(&self.points) {
                *o = sp.eval(r as f64 - fy, c as f64 - fx);
            }
            return;
        }
        let wy = bspline5_weights(-fy - sy);
        let wx = bspline5_weights(-fx - sx);
        let (ny, nx) = (sy as isize, sx as isize);
        let cols = sp.cols;
        let coef = &sp.coef;
        let w = (c1 - c0 + 1) as usize;
        let th = (r1 - r0 + 6) as usize;
        let gr0 = (r0 + ny - 2) as usize;
        let gc0 = (c0 + nx - 2) as usize;
        if th * w <= SPLINE5_SCRATCH {
            // x pass: t[i][j] = Σ_b wx[b]·coef[gr0 + i][gc0 + j + b].
            let mut t = [0.0f64; SPLINE5_SCRATCH];
            for (i, dst) in t[..th * w].chunks_exact_mut(w).enumerate() {
                let src = &coef[(gr0 + i) * cols + gc0..][..w + 5];
                let (s0, s1, s2) = (&src[..w], &src[1..w + 1], &src[2..w + 2]);
                let (s3, s4, s5) = (&src[3..w + 3], &src[4..w + 4], &src[5..w + 5]);
                for j in 0..w {
                    dst[j] = wx[0] * s0[j]
                        + wx[1] * s1[j]
                        + wx[2] * s2[j]
                        + wx[3] * s3[j]
                        + wx[4] * s4[j]
                        + wx[5] * s5[j];
                }
            }
            // y pass: out = Σ_a wy[a]·t[row − r0 + a][col − c0].
            for run in &self.runs {
                let (i0, j0, n) = ((run.row - r0) as usize, (run.col - c0) as usize, run.len);
                let o = &mut out[run.start..run.start + n];
                let row = |a: usize| &t[(i0 + a) * w + j0..][..n];
                let (t0, t1, t2, t3, t4, t5) = (row(0), row(1), row(2), row(3), row(4), row(5));
                for j in 0..n {
                    o[j] = wy[0] * t0[j]
                        + wy[1] * t1[j]
                        + wy[2] * t2[j]
                        + wy[3] * t3[j]
                        + wy[4] * t4[j]
                        + wy[5] * t5[j];
                }
            }
        } else {
            // Large patches: 6×6 taps per point.
            for run in &self.runs {
                let gr = (run.row + ny - 2) as usize;
                for j in 0..run.len {
                    let gc = (run.col + nx - 2) as usize + j;
                    let mut acc = 0.0;
                    for (a, &wa) in wy.iter().enumerate() {
                        let s = &coef[(gr + a) * cols + gc..][..6];
                        let x = wx[0] * s[0]
                            + wx[1] * s[1]
                            + wx[2] * s[2]
                            + wx[3] * s[3]
                            + wx[4] * s[4]
                            + wx[5] * s[5];
                        acc += wa * x;
                    }
                    out[run.start + j] = acc;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use ndarray::Array2;

    use super::*;
    use crate::paco::psf::fft_shift::VipShifter;

    /// Uniform numbers in [−1, 1) from the workspace's one generator.
    fn rng(seed: u64) -> impl FnMut() -> f64 {
        let mut s = crate::synth::SplitMix::new(seed);
        move || s.range(-1.0, 1.0)
    }

    fn random_image(h: usize, w: usize, seed: u64) -> Array2<f64> {
        let mut r = rng(seed);
        Array2::from_shape_fn((h, w), |_| r())
    }

    fn all_points(
        rows: std::ops::Range<isize>,
        cols: std::ops::Range<isize>,
    ) -> Vec<(isize, isize)> {
        rows.flat_map(|r| cols.clone().map(move |c| (r, c)))
            .collect()
    }

    #[test]
    fn spline5_poles() {
        for (i, &z) in SPLINE5_POLES.iter().enumerate() {
            let p = z.powi(4) + 26.0 * z.powi(3) + 66.0 * z * z + 26.0 * z + 1.0;
            assert!(p.abs() < 1e-14, "pole {z}: residual {p:e}");
            assert!(z.abs() < 1.0);
            let w = -13.0 + if i == 0 { 1.0 } else { -1.0 } * 105f64.sqrt();
            let zf = 2.0 / (w - (w * w - 4.0).sqrt());
            assert!((zf - z).abs() < 2e-16, "{zf} vs {z}");
        }
    }

    #[test]
    fn spline5_weights_match_bspline() {
        let mut r = rng(3);
        for i in 0..200 {
            let t = if i == 0 { 0.0 } else { 0.5 * (r() + 1.0) };
            let w = bspline5_weights(t);
            let sum: f64 = w.iter().sum();
            assert!((sum - 1.0).abs() < 1e-14, "t {t}: Σw = {sum}");
            let wm = bspline5_weights(1.0 - t);
            for j in 0..6 {
                let exact = bspline5(t - (j as f64 - 2.0));
                assert!(
                    (w[j] - exact).abs() < 1e-15,
                    "t {t} j {j}: {} vs {exact}",
                    w[j]
                );
                // Mirror symmetry: β5(t − j) = β5((1 − t) − (1 − j)).
                assert!((w[j] - wm[5 - j]).abs() < 1e-15);
            }
        }
        assert!((bspline5(0.0) - 66.0 / 120.0).abs() < 1e-16);
        assert!((bspline5(1.0) - 26.0 / 120.0).abs() < 1e-16);
        assert!((bspline5(-2.0) - 1.0 / 120.0).abs() < 1e-16);
        assert_eq!(bspline5(3.0), 0.0);
    }

    /// The in-place recursive prefilter equals the closed-form inverse filter
    /// `g[k] = 120/(w1 − w2)·(−z1/(1 − z1²)·z1^|k| + z2/(1 − z2²)·z2^|k|)` applied to the zero
    /// extension, whatever the padding (0 included): the boundary handling is exact.
    #[test]
    fn spline5_prefilter_exact_zero_extension() {
        let [z1, z2] = SPLINE5_POLES;
        let dw = 2.0 * 105f64.sqrt();
        let g = |k: isize| {
            let k = k.unsigned_abs() as i32;
            120.0 / dw * (-z1 / (1.0 - z1 * z1) * z1.powi(k) + z2 / (1.0 - z2 * z2) * z2.powi(k))
        };
        // Σ_k g[k]·b5[k] = δ.
        let b = [1.0, 26.0, 66.0, 26.0, 1.0];
        for k in -3isize..=3 {
            let s: f64 = (0..5).map(|m| b[m] / 120.0 * g(k - (m as isize - 2))).sum();
            assert!((s - if k == 0 { 1.0 } else { 0.0 }).abs() < 1e-14);
        }
        let mut r = rng(11);
        for n in [1usize, 2, 3, 7, 21] {
            let sig: Vec<f64> = (0..n).map(|_| r()).collect();
            for pad in [0usize, 1, 3, 10] {
                let mut line = vec![0.0; n + 2 * pad];
                line[pad..pad + n].copy_from_slice(&sig);
                bspline5_prefilter(&mut line);
                for (i, &c) in line.iter().enumerate() {
                    let k = i as isize - pad as isize;
                    let exact: f64 = sig
                        .iter()
                        .enumerate()
                        .map(|(j, &v)| g(k - j as isize) * v)
                        .sum();
                    assert!(
                        (c - exact).abs() < 1e-13,
                        "n {n} pad {pad} k {k}: {c} vs {exact}"
                    );
                }
            }
        }
    }

    /// At integer offsets the spline returns the PSF samples (and 0 outside the array).
    #[test]
    fn spline5_interpolates_samples() {
        for (h, w, seed) in [(21, 21, 1u64), (9, 12, 2), (1, 5, 3), (4, 1, 4)] {
            let img = random_image(h, w, seed);
            let pts = all_points(-6..h as isize + 6, -6..w as isize + 6);
            let tpl = Spline5Templates::new(img.view(), &pts);
            let mut out = vec![f64::NAN; pts.len()];
            tpl.fill(0.0, 0.0, &mut out);
            for (&(r, c), &v) in pts.iter().zip(&out) {
                let want = if r >= 0 && c >= 0 && (r as usize) < h && (c as usize) < w {
                    img[[r as usize, c as usize]]
                } else {
                    0.0
                };
                assert!((v - want).abs() < 1e-12, "{h}x{w} ({r},{c}): {v} vs {want}");
            }
            // Integer shifts move the samples.
            tpl.fill(1.0, -2.0, &mut out);
            for (&(r, c), &v) in pts.iter().zip(&out) {
                let (r, c) = (r - 1, c + 2);
                let want = if r >= 0 && c >= 0 && (r as usize) < h && (c as usize) < w {
                    img[[r as usize, c as usize]]
                } else {
                    0.0
                };
                assert!((v - want).abs() < 1e-12);
            }
        }
    }

    /// A smooth function sampled on the grid is reproduced between the samples.
    #[test]
    fn spline5_reproduces_smooth_function() {
        let sigma = 3.0;
        let f = |y: f64, x: f64| {
            (-((y - 20.0).powi(2) + (x - 20.0).powi(2)) / (2.0 * sigma * sigma)).exp()
        };
        let img = Array2::from_shape_fn((41, 41), |(i, j)| f(i as f64, j as f64));
        let pts = all_points(12..29, 10..31);
        let tpl = Spline5Templates::new(img.view(), &pts);
        let mut out = vec![0.0; pts.len()];
        let mut r = rng(5);
        let mut worst = 0.0f64;
        for _ in 0..50 {
            let (fy, fx) = (r() * 0.75 + 0.25, r() * 0.75);
            tpl.fill(fy, fx, &mut out);
            for (&(pr, pc), &v) in pts.iter().zip(&out) {
                worst = worst.max((v - f(pr as f64 - fy, pc as f64 - fx)).abs());
            }
        }
        eprintln!("Gaussian σ=3: worst error {worst:e}");
        assert!(worst < 1e-5, "worst error {worst:e}");
        // A wider one: the error falls as σ⁻⁶.
        let f2 = |y: f64, x: f64| (-((y - 20.0).powi(2) + (x - 20.0).powi(2)) / (2.0 * 36.0)).exp();
        let img2 = Array2::from_shape_fn((41, 41), |(i, j)| f2(i as f64, j as f64));
        let tpl2 = Spline5Templates::new(img2.view(), &pts);
        let mut worst2 = 0.0f64;
        tpl2.fill(0.37, -0.41, &mut out);
        for (&(pr, pc), &v) in pts.iter().zip(&out) {
            worst2 = worst2.max((v - f2(pr as f64 - 0.37, pc as f64 + 0.41)).abs());
        }
        assert!(worst2 < worst / 20.0, "σ=6: {worst2:e} vs σ=3: {worst:e}");
    }

    fn disk(r: isize, cy: isize, cx: isize) -> Vec<(isize, isize)> {
        all_points(-r..r + 1, -r..r + 1)
            .into_iter()
            .filter(|&(y, x)| y * y + x * x <= r * r)
            .map(|(y, x)| (y + cy, x + cx))
            .collect()
    }

    /// Both fast evaluations (separable on the bounding box for small patches, 6×6 taps per
    /// point for large ones), on disks and on scattered points in any order, equal the direct
    /// evaluation; far outside is zero.
    #[test]
    fn spline5_fast_path_matches_direct_and_vanishes_far_away() {
        let img = random_image(11, 13, 7);
        let mut r = rng(9);
        let scattered: Vec<(isize, isize)> = (0..40)
            .map(|_| ((r() * 9.0) as isize + 5, (r() * 9.0) as isize + 6))
            .collect();
        for pts in [disk(4, 5, 6), disk(8, 5, 6), scattered] {
            let tpl = Spline5Templates::new(img.view(), &pts);
            let mut out = vec![0.0; pts.len()];
            for i in 0..100 {
                let (fy, fx) = if i < 50 {
                    (0.5 * (r() + 1.0), 0.5 * (r() + 1.0))
                } else {
                    (0.5 * r(), 0.5 * r())
                };
                tpl.fill(fy, fx, &mut out);
                for (&(pr, pc), &v) in pts.iter().zip(&out) {
                    let d = tpl.spline.eval(pr as f64 - fy, pc as f64 - fx);
                    assert!(
                        (v - d).abs() < 1e-13,
                        "({pr},{pc}) at ({fy},{fx}): {v} vs {d}"
                    );
                }
            }
        }
        let disk = disk(4, 5, 6);
        let tpl = Spline5Templates::new(img.view(), &disk);
        let mut out = vec![0.0; disk.len()];
        let peak = img.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        // 30 px away: the spline tail is ~|z1|^27 of the peak; 200 px away: beyond the stored
        // coefficients (slow path), exactly 0.
        for (fy, fx, bound) in [
            (30.3, 0.2, 1e-8),
            (-0.4, -36.6, 1e-10),
            (200.5, 3.0, 0.0),
            (0.5, -1e6, 0.0),
        ] {
            tpl.fill(fy, fx, &mut out);
            for &v in &out {
                assert!(v.abs() <= bound * peak, "({fy},{fx}): {v:e}");
            }
        }
        tpl.fill(f64::NAN, 0.0, &mut out);
        assert!(out.iter().all(|v| v.is_nan()));
    }

    /// Through `Templates` (spec §5.2): `h[k]` is the PSF at offset `(dy_k − fy, dx_k − fx)` from
    /// its centre `(floor(h/2), floor(w/2))`, and at zero offset the centred template.
    #[test]
    fn spline5_templates_follow_spec() {
        use crate::paco::geometry::disk_offsets;
        use crate::paco::settings::{Rounding, SubPixel};
        use crate::paco::templates::Templates;
        for (h, w) in [(21, 21), (20, 17)] {
            let psf = random_image(h, w, 21 + h as u64);
            let d = disk_offsets(4);
            let k = d.len();
            let sp = Templates::new(&psf, &d, SubPixel::Spline5, Rounding::Trunc).unwrap();
            let c0 = Templates::new(&psf, &d, SubPixel::Off, Rounding::Trunc).unwrap();
            let (mut a, mut b) = (vec![0.0; k], vec![0.0; k]);
            sp.fill(0.0, 0.0, &mut a);
            c0.fill(0.0, 0.0, &mut b);
            for i in 0..k {
                assert!(
                    (a[i] - b[i]).abs() < 1e-12,
                    "{h}x{w} k {i}: {} vs {}",
                    a[i],
                    b[i]
                );
            }
            let Templates::Spline5 { spline } = &sp else {
                panic!("Spline5 templates expected");
            };
            let (cy, cx) = ((h / 2) as f64, (w / 2) as f64);
            for (fy, fx) in [(0.25, 0.75), (0.999, 0.0), (-0.5, 0.4)] {
                sp.fill(fy, fx, &mut a);
                for (i, &(dy, dx)) in d.iter().enumerate() {
                    let want = spline.spline.eval(cy + dy as f64 - fy, cx + dx as f64 - fx);
                    assert!((a[i] - want).abs() < 1e-13);
                }
            }
        }
    }

    /// Mirroring the PSF mirrors the templates (the boundary treatment is symmetric), and a
    /// symmetric PSF gives point-symmetric templates for opposite shifts.
    #[test]
    fn spline5_symmetry() {
        let img = random_image(9, 9, 13);
        let flipped = Array2::from_shape_fn((9, 9), |(i, j)| img[[8 - i, 8 - j]]);
        let transposed = img.t().to_owned();
        let pts = all_points(-2..11, -2..11);
        let mirror: Vec<(isize, isize)> = pts.iter().map(|&(r, c)| (8 - r, 8 - c)).collect();
        let swap: Vec<(isize, isize)> = pts.iter().map(|&(r, c)| (c, r)).collect();
        let a = Spline5Templates::new(img.view(), &pts);
        let b = Spline5Templates::new(flipped.view(), &mirror);
        let c = Spline5Templates::new(transposed.view(), &swap);
        let (mut oa, mut ob, mut oc) = (
            vec![0.0; pts.len()],
            vec![0.0; pts.len()],
            vec![0.0; pts.len()],
        );
        for (fy, fx) in [(0.3, 0.7), (0.5, 0.0), (-0.25, 0.9), (0.999, 0.001)] {
            a.fill(fy, fx, &mut oa);
            b.fill(-fy, -fx, &mut ob);
            c.fill(fx, fy, &mut oc);
            for k in 0..pts.len() {
                assert!(
                    (oa[k] - ob[k]).abs() < 1e-13,
                    "mirror {:?}: {} vs {}",
                    pts[k],
                    oa[k],
                    ob[k]
                );
                assert!((oa[k] - oc[k]).abs() < 1e-13, "transpose {:?}", pts[k]);
            }
        }
        // Symmetric PSF: h(fy, fx) at (c + d) equals h(−fy, −fx) at (c − d).
        let g = Array2::from_shape_fn((9, 9), |(i, j)| {
            (-((i as f64 - 4.0).powi(2) + (j as f64 - 4.0).powi(2)) / 5.0).exp()
        });
        let mirror_c: Vec<(isize, isize)> = pts.iter().map(|&(r, c)| (8 - r, 8 - c)).collect();
        let ga = Spline5Templates::new(g.view(), &pts);
        let gb = Spline5Templates::new(g.view(), &mirror_c);
        ga.fill(0.3, 0.6, &mut oa);
        gb.fill(-0.3, -0.6, &mut ob);
        for k in 0..pts.len() {
            assert!((oa[k] - ob[k]).abs() < 1e-13);
        }
    }

    /// Against VIP's exact FFT shift on a band-limited-enough PSF (Gaussian, FWHM 4), the spline
    /// templates agree to 2e-4 of the peak (6e-5 measured).
    #[test]
    fn spline5_close_to_fft_shift() {
        let sigma = 4.0 / (8.0f64.ln() * 2.0).sqrt();
        let psf = Array2::from_shape_fn((21, 21), |(i, j)| {
            (-((i as f64 - 10.0).powi(2) + (j as f64 - 10.0).powi(2)) / (2.0 * sigma * sigma)).exp()
        });
        let disk: Vec<(isize, isize)> = all_points(6..15, 6..15);
        let tpl = Spline5Templates::new(psf.view(), &disk);
        let sh = VipShifter::new(psf.view());
        let (mut a, mut b) = (vec![0.0; disk.len()], vec![0.0; disk.len()]);
        let mut worst = 0.0f64;
        for (fy, fx) in [(0.1, 0.9), (0.5, 0.5), (0.73, 0.21)] {
            tpl.fill(fy, fx, &mut a);
            sh.sample(fy, fx, &disk, &mut b);
            for k in 0..disk.len() {
                worst = worst.max((a[k] - b[k]).abs());
            }
        }
        eprintln!("spline vs FFT shift: worst {worst:e}");
        assert!(worst < 2e-4, "{worst:e}");
    }
}
