//! Separable Gaussian filters with SciPy `ndimage` semantics.
//!
//! * Kernels follow `scipy.ndimage._filters._gaussian_kernel1d`: radius `floor(4σ + 0.5)`,
//!   `φ = exp(-0.5/σ² · t²)` normalised with NumPy's pairwise sum, second derivative
//!   `(t²/σ⁴ − 1/σ²)·φ` built from the normalised φ and not re-zeroed.
//! * Each 1-D pass is a correlation accumulated in f64 in SciPy's order for symmetric kernels
//!   (centre tap first, then the mirrored pairs from the outermost inwards) and rounded to the
//!   working type ([`Real`]) when stored.
//! * Boundaries: [`Boundary::Reflect`] (SciPy `reflect`, half-sample symmetric), [`Boundary::Constant`]
//!   (zero padding) and [`Boundary::Nearest`] (edge replication).
//!
//! Child modules: the LoG planes of the scale space (`filters/log_plane.rs`: [`LogKernels`],
//! [`LogScratch`], [`log_plane`](fn@log_plane), [`log_plane_scaled`], [`log_rows_scaled`],
//! re-exported here), their explicit AVX2 kernels (`filters/avx2.rs`; the f32 ones and the
//! fused multiply-add ones of the certified search in `filters/fused.rs`), and the unit tests
//! (`filters/tests.rs`).

use ndarray::{Array2, ArrayView2};

use super::real::Real;

/// Which f32 kernels the certified search of `blob_log` may use
/// ([`crate::detect::blob_log::CpuKnobs::fused`], `ARRAYBRIDGE_DETECT_FUSED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FusedKernels {
    /// The widest fused multiply-add kernels the CPU has (16 lanes with AVX-512F, 8 with AVX2
    /// and FMA, the exact ones otherwise): `auto` or `16`.
    #[default]
    Widest,
    /// At most the 8-lane fused kernels (AVX2 and FMA): `8`.
    Eight,
    /// The exact kernels (separate multiplies and adds, 8 lanes): `0`.
    Exact,
}

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) use avx2::Avx2;
#[cfg(target_arch = "x86_64")]
mod fused;
#[cfg(target_arch = "x86_64")]
pub(crate) use fused::Fused;

/// No fused kernels off x86-64: the token type has no values.
#[cfg(not(target_arch = "x86_64"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fused {}

#[cfg(not(target_arch = "x86_64"))]
impl Fused {
    pub(crate) fn detect(_: FusedKernels) -> Option<Self> {
        None
    }
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Self> {
        Vec::new()
    }
    #[allow(clippy::too_many_arguments)]
    fn y_rows_f32(
        self,
        _: &[f32],
        _: (usize, usize, usize),
        _: (usize, usize),
        _: (&[f32], &[f32]),
        _: &mut [f32],
        _: &mut [f32],
    ) {
        match self {}
    }
    fn x_row_scaled_f32(
        self,
        _: (&[f32], &[f32]),
        _: (&[f32], &[f32]),
        _: f32,
        _: &mut [f32],
        _: (&mut [f32], &mut [f32]),
    ) {
        match self {}
    }
}

mod log_plane;
pub(crate) use log_plane::BLOCK_ROWS;
pub use log_plane::{LogKernels, LogScratch, log_plane, log_plane_scaled, log_rows_scaled};

/// No explicit SIMD kernels off x86-64: the token type has no values.
#[cfg(not(target_arch = "x86_64"))]
#[derive(Debug, Clone, Copy)]
pub(crate) enum Avx2 {}

#[cfg(not(target_arch = "x86_64"))]
impl Avx2 {
    pub(crate) fn detect() -> Option<Self> {
        None
    }
    pub(crate) fn run<R>(self, _: impl FnOnce() -> R) -> R {
        match self {}
    }
    pub(crate) fn gt_mask16(self, _: &[f64; 16], _: f64) -> u32 {
        match self {}
    }
    pub(crate) fn gt_mask16_f32(self, _: &[f32; 16], _: f32) -> u32 {
        match self {}
    }
    pub(crate) fn ge_max3_mask16_f32(
        self,
        _: &[f32; 16],
        _: (&[f32; 16], &[f32; 16], &[f32; 16]),
        _: f32,
    ) -> u32 {
        match self {}
    }
    pub(crate) fn ge_max3_mask16(
        self,
        _: &[f64; 16],
        _: (&[f64; 16], &[f64; 16], &[f64; 16]),
    ) -> u32 {
        match self {}
    }
    #[allow(clippy::too_many_arguments)]
    fn y_rows(
        self,
        _: &[f64],
        _: (usize, usize, usize),
        _: (usize, usize),
        _: (&[f64], &[f64]),
        _: bool,
        _: &mut [f64],
        _: &mut [f64],
    ) {
        match self {}
    }
    fn x_row_pair(self, _: (&[f64], &[f64]), _: (&[f64], &[f64]), _: &mut [f64], _: &mut [f64]) {
        match self {}
    }
    fn y_rows_f32(
        self,
        _: &[f32],
        _: (usize, usize, usize),
        _: (usize, usize),
        _: (&[f32], &[f32]),
        _: &mut [f32],
        _: &mut [f32],
    ) {
        match self {}
    }
    fn x_row_scaled_f32(
        self,
        _: (&[f32], &[f32]),
        _: (&[f32], &[f32]),
        _: f32,
        _: &mut [f32],
        _: (&mut [f32], &mut [f32]),
    ) {
        match self {}
    }
    fn x_row_scaled(
        self,
        _: (&[f64], &[f64]),
        _: (&[f64], &[f64]),
        _: f64,
        _: &mut [f64],
        _: (&mut [f64], &mut [f64]),
    ) {
        match self {}
    }
}

/// Boundary handling of a 1-D pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundary {
    /// `… c b a | a b c … z | z y …` (SciPy `reflect`).
    Reflect,
    /// Zero outside the image (SciPy `constant`, `cval = 0`).
    Constant,
    /// Edge replication (SciPy `nearest`).
    Nearest,
}

/// Map an out-of-range index onto `0..n`, or `None` for zero padding.
#[inline]
pub fn map_index(j: isize, n: usize, mode: Boundary) -> Option<usize> {
    let ni = n as isize;
    if (0..ni).contains(&j) {
        return Some(j as usize);
    }
    match mode {
        Boundary::Constant => None,
        Boundary::Nearest => Some(if j < 0 { 0 } else { n - 1 }),
        Boundary::Reflect => {
            let period = 2 * ni;
            let k = j.rem_euclid(period);
            Some(if k >= ni {
                (period - 1 - k) as usize
            } else {
                k as usize
            })
        }
    }
}

/// NumPy's pairwise summation of a contiguous f64 array (`np.sum`), reproduced bit for bit.
pub fn numpy_sum(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        let mut res = 0.0;
        for &v in a {
            res += v;
        }
        res
    } else if n <= 128 {
        let mut r = [0.0f64; 8];
        r.copy_from_slice(&a[..8]);
        let mut i = 8;
        while i < n - (n % 8) {
            for k in 0..8 {
                r[k] += a[i + k];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        while i < n {
            res += a[i];
            i += 1;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        numpy_sum(&a[..n2]) + numpy_sum(&a[n2..])
    }
}

/// Kernel radius of `gaussian_filter1d` with `truncate = 4`: `int(4σ + 0.5)`.
pub fn kernel_radius(sigma: f64) -> usize {
    let r = 4.0 * sigma + 0.5;
    if r.is_finite() && r > 0.0 {
        r as usize
    } else {
        0
    }
}

/// `_gaussian_kernel1d(σ, order, radius)` for order 0 or 2 (all `2r+1` taps, index `t + r`).
///
/// `sigma_f32`: σ is a NumPy float32 scalar (float32 input to `blob_log`), so σ² and `-0.5/σ²`
/// are computed in float32, the rest in float64.
pub fn gaussian_kernel1d(sigma: f64, order: u8, radius: usize, sigma_f32: bool) -> Vec<f64> {
    let (sigma2, coef) = if sigma_f32 {
        let s = sigma as f32;
        let s2 = s * s;
        (f64::from(s2), f64::from(-0.5f32 / s2))
    } else {
        let s2 = sigma * sigma;
        (s2, -0.5 / s2)
    };
    let r = radius as isize;
    let phi: Vec<f64> = (-r..=r).map(|t| (coef * (t * t) as f64).exp()).collect();
    let sum = numpy_sum(&phi);
    let phi: Vec<f64> = phi.iter().map(|p| p / sum).collect();
    if order == 0 {
        return phi;
    }
    // q = [-1/σ², 0, (1/σ²)²] with P's diagonal entry 1/(-σ²).
    let p = 1.0 / (-sigma2);
    let q0 = p;
    let q2 = p * p;
    (-r..=r)
        .zip(phi.iter())
        .map(|(t, &ph)| {
            let x2 = (t * t) as f64;
            (q0 + x2 * q2) * ph
        })
        .collect()
}

/// The non-negative half `w[0..=r]` of a symmetric kernel stored with index `t + r`.
pub fn half_kernel(full: &[f64]) -> Vec<f64> {
    let r = full.len() / 2;
    full[r..].to_vec()
}

/// Correlate every column of `input` (`h × w`, row-major) with the symmetric kernels `halves`
/// along axis 0 (y), sharing the reads; `outs[k]` receives the pass with `halves[k]`.
pub fn pass_y<T: Real>(
    input: &[T],
    h: usize,
    w: usize,
    halves: &[&[f64]],
    mode: Boundary,
    outs: &mut [&mut [T]],
) {
    debug_assert_eq!(halves.len(), outs.len());
    let nk = halves.len();
    let mut accs = vec![vec![0.0f64; w]; nk];
    let r = halves
        .iter()
        .map(|k| k.len().saturating_sub(1))
        .max()
        .unwrap_or(0);
    for y in 0..h {
        let row = &input[y * w..(y + 1) * w];
        for (acc, hk) in accs.iter_mut().zip(halves) {
            let w0 = hk[0];
            for (a, &v) in acc.iter_mut().zip(row) {
                *a = v.to_f64() * w0;
            }
        }
        for j in (1..=r).rev() {
            let up = map_index(y as isize - j as isize, h, mode);
            let dn = map_index(y as isize + j as isize, h, mode);
            match (up, dn) {
                (Some(u), Some(d)) => {
                    let ru = &input[u * w..(u + 1) * w];
                    let rd = &input[d * w..(d + 1) * w];
                    if nk == 2 && halves[0].len() > j && halves[1].len() > j {
                        let (wa, wb) = (halves[0][j], halves[1][j]);
                        let (a0, a1) = accs.split_at_mut(1);
                        for (((acc0, acc1), &vu), &vd) in
                            a0[0].iter_mut().zip(a1[0].iter_mut()).zip(ru).zip(rd)
                        {
                            let s = vu.to_f64() + vd.to_f64();
                            *acc0 += s * wa;
                            *acc1 += s * wb;
                        }
                    } else {
                        for (acc, hk) in accs.iter_mut().zip(halves) {
                            if hk.len() <= j {
                                continue;
                            }
                            let wj = hk[j];
                            for ((a, &vu), &vd) in acc.iter_mut().zip(ru).zip(rd) {
                                *a += (vu.to_f64() + vd.to_f64()) * wj;
                            }
                        }
                    }
                }
                (Some(u), None) | (None, Some(u)) => {
                    let ru = &input[u * w..(u + 1) * w];
                    for (acc, hk) in accs.iter_mut().zip(halves) {
                        if hk.len() <= j {
                            continue;
                        }
                        let wj = hk[j];
                        for (a, &vu) in acc.iter_mut().zip(ru) {
                            *a += (vu.to_f64() + 0.0) * wj;
                        }
                    }
                }
                (None, None) => {}
            }
        }
        for (acc, out) in accs.iter().zip(outs.iter_mut()) {
            for (o, &a) in out[y * w..(y + 1) * w].iter_mut().zip(acc) {
                *o = T::from_f64(a);
            }
        }
    }
}

/// Fill `buf` (length `w + 2r`) with `row` extended by `r` samples on each side.
#[inline]
pub fn pad_row<T: Real, A: Real>(row: &[T], r: usize, mode: Boundary, buf: &mut [A]) {
    let w = row.len();
    for (b, &v) in buf[r..r + w].iter_mut().zip(row) {
        *b = A::from_f64(v.to_f64());
    }
    for k in 0..r {
        let jl = k as isize - r as isize;
        let jr = (w + k) as isize;
        buf[k] = map_index(jl, w, mode).map_or(A::ZERO, |i| A::from_f64(row[i].to_f64()));
        buf[r + w + k] = map_index(jr, w, mode).map_or(A::ZERO, |i| A::from_f64(row[i].to_f64()));
    }
}

/// Correlate a padded row (`buf`, padding `pad ≥ half.len() − 1`) with a symmetric kernel into
/// `acc` (f64, length `w`).
#[inline]
pub fn correlate_padded(buf: &[f64], pad: usize, half: &[f64], acc: &mut [f64]) {
    let w = acc.len();
    let w0 = half[0];
    for (a, &v) in acc.iter_mut().zip(&buf[pad..pad + w]) {
        *a = v * w0;
    }
    let r = half.len() - 1;
    for j in (1..=r).rev() {
        let wj = half[j];
        let left = &buf[pad - j..pad - j + w];
        let right = &buf[pad + j..pad + j + w];
        for ((a, &l), &rr) in acc.iter_mut().zip(left).zip(right) {
            *a += (l + rr) * wj;
        }
    }
}

/// Correlate every row of `input` with the symmetric kernel `half` along axis 1 (x).
pub fn pass_x<T: Real>(
    input: &[T],
    h: usize,
    w: usize,
    half: &[f64],
    mode: Boundary,
    out: &mut [T],
) {
    let r = half.len().saturating_sub(1);
    let mut buf = vec![0.0f64; w + 2 * r];
    let mut acc = vec![0.0f64; w];
    for y in 0..h {
        pad_row(&input[y * w..(y + 1) * w], r, mode, &mut buf);
        correlate_padded(&buf, r, half, &mut acc);
        for (o, &a) in out[y * w..(y + 1) * w].iter_mut().zip(&acc) {
            *o = T::from_f64(a);
        }
    }
}

fn contiguous<T: Real>(image: ArrayView2<'_, T>) -> Vec<T> {
    image.iter().copied().collect()
}

/// `scipy.ndimage.gaussian_filter(image, σ)` (mode `reflect`, truncate 4), in the image's type.
pub fn gaussian_filter<T: Real>(image: ArrayView2<'_, T>, sigma: f64) -> Array2<T> {
    let (h, w) = image.dim();
    let input = contiguous(image);
    let g0 = half_kernel(&gaussian_kernel1d(
        sigma,
        0,
        kernel_radius(sigma),
        T::IS_F32,
    ));
    let mut tmp = vec![T::ZERO; h * w];
    pass_y(&input, h, w, &[&g0], Boundary::Reflect, &mut [&mut tmp]);
    let mut out = vec![T::ZERO; h * w];
    pass_x(&tmp, h, w, &g0, Boundary::Reflect, &mut out);
    Array2::from_shape_vec((h, w), out).unwrap_or_else(|_| Array2::from_elem((h, w), T::ZERO))
}

/// `scipy.ndimage.gaussian_laplace(image, σ)` (mode `reflect`, truncate 4), in the image's type:
/// `L_yy + L_xx` with each term rounded to the type.
pub fn gaussian_laplace<T: Real>(image: ArrayView2<'_, T>, sigma: f64) -> Array2<T> {
    let (h, w) = image.dim();
    let input: Vec<f64> = image.iter().map(|v| v.to_f64()).collect();
    let k = LogKernels::new(sigma, T::IS_F32);
    let mut out = vec![T::ZERO; h * w];
    let mut s = LogScratch::new(h, w, k.radius());
    let stride = padded_stride(w);
    let input = pad_stride(&input, h, w, stride);
    log_plane(&input, stride, h, w, &k, &mut s, &mut out, |lyy, lxx| {
        lyy + lxx
    });
    Array2::from_shape_vec((h, w), out).unwrap_or_else(|_| Array2::from_elem((h, w), T::ZERO))
}

/// A row stride (in f64 elements) ≥ `w` whose byte size is not a multiple of 4 KiB, so the
/// 2r+1 rows read by a y pass do not alias in the L1 cache.
pub fn padded_stride(w: usize) -> usize {
    let mut s = w + 8;
    while (s * 8).is_multiple_of(4096) {
        s += 8;
    }
    s
}

/// Copy an `h × w` f64 image to rows of `stride` elements.
pub fn pad_stride(img: &[f64], h: usize, w: usize, stride: usize) -> Vec<f64> {
    let mut out = vec![0.0f64; h * stride];
    for y in 0..h {
        out[y * stride..y * stride + w].copy_from_slice(&img[y * w..(y + 1) * w]);
    }
    out
}

#[cfg(test)]
mod tests;
