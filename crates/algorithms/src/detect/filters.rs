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

use ndarray::{Array2, ArrayView2};

use super::real::Real;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) use avx2::Avx2;

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

/// The pair of half kernels (g0, g2) of one LoG scale.
#[derive(Debug, Clone)]
pub struct LogKernels {
    /// Gaussian, taps `0..=r`.
    pub g0: Vec<f64>,
    /// Second derivative of the Gaussian, taps `0..=r`.
    pub g2: Vec<f64>,
}

impl LogKernels {
    /// Kernels for σ (`sigma_f32`: see [`gaussian_kernel1d`]).
    pub fn new(sigma: f64, sigma_f32: bool) -> Self {
        let r = kernel_radius(sigma);
        LogKernels {
            g0: half_kernel(&gaussian_kernel1d(sigma, 0, r, sigma_f32)),
            g2: half_kernel(&gaussian_kernel1d(sigma, 2, r, sigma_f32)),
        }
    }

    /// The radius r.
    pub fn radius(&self) -> usize {
        self.g0.len() - 1
    }
}

/// Scratch buffers for [`log_plane`]: a block of y-pass rows of each kernel, padded for the x
/// passes.
#[derive(Debug)]
pub struct LogScratch<T: Real, A: Real = f64> {
    a2: Vec<A>,
    a0: Vec<A>,
    lyy: Vec<A>,
    lxx: Vec<A>,
    _t: std::marker::PhantomData<T>,
}

impl<T: Real, A: Real> LogScratch<T, A> {
    /// Buffers for an `h × w` frame and kernels of radius up to `rmax`.
    pub fn new(h: usize, w: usize, rmax: usize) -> Self {
        LogScratch {
            a2: vec![A::ZERO; h.min(BLOCK_ROWS) * (w + 2 * rmax)],
            a0: vec![A::ZERO; h.min(BLOCK_ROWS) * (w + 2 * rmax)],
            lyy: vec![A::ZERO; w],
            lxx: vec![A::ZERO; w],
            _t: std::marker::PhantomData,
        }
    }
}

const LANES: usize = 16;
const XLANES: usize = 32;

/// A row as blocks of `LANES` columns.
type Blocks<'a, A> = &'a [[A; LANES]];

/// Rows of a y-pass block: the x passes read them while they are still in the L2 cache.
pub(crate) const BLOCK_ROWS: usize = 8;

/// Both y passes of one scale (`g2` and `g0` from one read) for the output rows `y0..y1`
/// (row `y` at `(y − y0)·(w + 2r) + r` in `a2`, `a0`: room for the x passes' padding),
/// register-blocked over `LANES` columns; per output the sum (in the accumulator type `A`) runs
/// in SciPy's order and is rounded to the working type `T` (then held in `A`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn log_pass_y<T: Real, A: Real>(
    img: &[A],
    stride: usize,
    h: usize,
    w: usize,
    (y0, y1): (usize, usize),
    g2: &[A],
    g0: &[A],
    a2: &mut [A],
    a0: &mut [A],
) {
    let r = g0.len() - 1;
    let pw = w + 2 * r;
    let round = |v: A| A::from_f64(T::from_f64(v.to_f64()).to_f64());
    let nb = w / LANES;
    // row `y` of the image as blocks of LANES columns (the full blocks only)
    let blocks = |y: usize| {
        img[y * stride..y * stride + nb * LANES]
            .as_chunks::<LANES>()
            .0
    };
    // the rows of taps 1..=r above and below the current row (reflected at the edges)
    let mut taps: Vec<(Blocks<'_, A>, Blocks<'_, A>)> = Vec::with_capacity(r + 1);
    let mut offs = vec![(0usize, 0usize); r + 1];
    let reflect = |y: isize| map_index(y, h, Boundary::Reflect).unwrap_or(0);
    // column strips keep the 2r+1 input rows of a strip in L1 while y advances
    const STRIP: usize = 64 / LANES;
    let mut bs = 0;
    while bs < nb {
        let be = (bs + STRIP).min(nb);
        for y in y0..y1 {
            taps.clear();
            taps.push((&[], &[]));
            for j in 1..=r {
                let (u, d) = (reflect(y as isize - j as isize), reflect((y + j) as isize));
                taps.push((blocks(u), blocks(d)));
            }
            let row = (y - y0) * pw + r;
            let centre = blocks(y);
            let (a2r, a0r) = (
                &mut a2[row..row + nb * LANES],
                &mut a0[row..row + nb * LANES],
            );
            let (a2b, a0b) = (
                a2r.as_chunks_mut::<LANES>().0,
                a0r.as_chunks_mut::<LANES>().0,
            );
            for b in bs..be {
                let c = &centre[b];
                let mut s2 = [A::ZERO; LANES];
                let mut s0 = [A::ZERO; LANES];
                for l in 0..LANES {
                    s2[l] = c[l] * g2[0];
                    s0[l] = c[l] * g0[0];
                }
                for j in (1..=r).rev() {
                    let (ru, rd) = (&taps[j].0[b], &taps[j].1[b]);
                    let (w2, w0) = (g2[j], g0[j]);
                    for l in 0..LANES {
                        let t = ru[l] + rd[l];
                        s2[l] = s2[l] + t * w2;
                        s0[l] = s0[l] + t * w0;
                    }
                }
                for l in 0..LANES {
                    a2b[b][l] = round(s2[l]);
                    a0b[b][l] = round(s0[l]);
                }
            }
        }
        bs = be;
    }
    // the columns after the last full block
    if nb * LANES < w {
        for y in y0..y1 {
            for (j, o) in offs.iter_mut().enumerate().skip(1) {
                let (u, d) = (reflect(y as isize - j as isize), reflect((y + j) as isize));
                *o = (u * stride, d * stride);
            }
            let row = (y - y0) * pw + r;
            let irow = y * stride;
            for x in nb * LANES..w {
                let mut s2 = img[irow + x] * g2[0];
                let mut s0 = img[irow + x] * g0[0];
                for j in (1..=r).rev() {
                    let (u, d) = offs[j];
                    let t = img[u + x] + img[d + x];
                    s2 = s2 + t * g2[j];
                    s0 = s0 + t * g0[j];
                }
                a2[row + x] = round(s2);
                a0[row + x] = round(s0);
            }
        }
    }
}

/// One output row of an x pass from a padded row, register-blocked.
#[inline(always)]
fn xpass_row<A: Real>(buf: &[A], pad: usize, half: &[A], w: usize, out: &mut [A]) {
    let r = half.len() - 1;
    let mut xb = 0;
    while xb + XLANES <= w {
        let mut s = [A::ZERO; XLANES];
        let c = &buf[pad + xb..pad + xb + XLANES];
        for l in 0..XLANES {
            s[l] = c[l] * half[0];
        }
        for j in (1..=r).rev() {
            let lft = &buf[pad + xb - j..pad + xb - j + XLANES];
            let rgt = &buf[pad + xb + j..pad + xb + j + XLANES];
            let wj = half[j];
            for l in 0..XLANES {
                s[l] = s[l] + (lft[l] + rgt[l]) * wj;
            }
        }
        out[xb..xb + XLANES].copy_from_slice(&s);
        xb += XLANES;
    }
    for x in xb..w {
        let mut s = buf[pad + x] * half[0];
        for j in (1..=r).rev() {
            s = s + (buf[pad + x - j] + buf[pad + x + j]) * half[j];
        }
        out[x] = s;
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn log_plane_impl<T: Real, A: Real>(
    simd: Option<Avx2>,
    img: &[A],
    stride: usize,
    h: usize,
    w: usize,
    k: &LogKernels,
    s: &mut LogScratch<T, A>,
    (ya, yb): (usize, usize),
    out: &mut [T],
    combine: &impl Fn(T, T) -> T,
    scaled: Option<T>,
) -> (T, T) {
    let r = k.radius();
    let pw = w + 2 * r;
    let rows = h.min(BLOCK_ROWS) * pw;
    if s.a2.len() < rows {
        s.a2.resize(rows, A::ZERO);
        s.a0.resize(rows, A::ZERO);
    }
    // the explicit AVX2 kernels of f64 accumulation
    let avx = simd.zip(A::as_f64s(img));
    // the explicit AVX2 kernels of f32 accumulation (an f32 cube for the x passes)
    let avx32 = simd.zip(A::as_f32s(img));
    // the kernels in `A` for the generic passes (the AVX2 ones read the f64 kernels)
    let (g0, g2): (Vec<A>, Vec<A>) = if avx.is_some() {
        (Vec::new(), Vec::new())
    } else {
        (
            k.g0.iter().map(|&v| A::from_f64(v)).collect(),
            k.g2.iter().map(|&v| A::from_f64(v)).collect(),
        )
    };
    if s.lyy.len() < w {
        s.lyy.resize(w, A::ZERO);
        s.lxx.resize(w, A::ZERO);
    }
    let (mut lo, mut hi) = (
        [T::from_f64(f64::INFINITY); EXT_LANES],
        [T::from_f64(f64::NEG_INFINITY); EXT_LANES],
    );
    // y passes of a block of rows, then the x passes of those rows while they are in cache
    let mut y0 = ya;
    while y0 < yb {
        let y1 = (y0 + BLOCK_ROWS).min(yb);
        if let Some((t, img)) = avx
            && let (Some(a2), Some(a0)) = (A::as_f64s_mut(&mut s.a2), A::as_f64s_mut(&mut s.a0))
        {
            t.y_rows(
                img,
                (stride, h, w),
                (y0, y1),
                (&k.g2, &k.g0),
                T::IS_F32,
                a2,
                a0,
            );
        } else if let Some((t, img)) = avx32
            && let (Some(g2), Some(g0)) = (A::as_f32s(&g2), A::as_f32s(&g0))
            && let (Some(a2), Some(a0)) = (A::as_f32s_mut(&mut s.a2), A::as_f32s_mut(&mut s.a0))
        {
            t.y_rows_f32(img, (stride, h, w), (y0, y1), (g2, g0), a2, a0);
        } else {
            log_pass_y::<T, A>(img, stride, h, w, (y0, y1), &g2, &g0, &mut s.a2, &mut s.a0);
        }
        for y in y0..y1 {
            let b = (y - y0) * pw;
            let (row2, row0) = (&mut s.a2[b..b + pw], &mut s.a0[b..b + pw]);
            reflect_pad(row2, r, w);
            reflect_pad(row0, r, w);
            let (lyy, lxx) = (&mut s.lyy[..w], &mut s.lxx[..w]);
            let orow = &mut out[(y - ya) * w..(y - ya + 1) * w];
            // a plane of the cube in f64: the x passes write it directly
            if let (Some((t, _)), Some(sc)) = (avx, scaled)
                && let (Some(r2), Some(r0)) = (A::as_f64s(row2), A::as_f64s(row0))
                && let Some(o) = T::as_f64s_mut(orow)
                && let (Some(l), Some(hh)) = (T::as_f64s_mut(&mut lo), T::as_f64s_mut(&mut hi))
            {
                t.x_row_scaled((r2, r0), (&k.g0, &k.g2), sc.to_f64(), o, (l, hh));
                continue;
            }
            // a plane of an f32 cube from f32 sums
            if let (Some((t, _)), Some(sc)) = (avx32, scaled)
                && let (Some(r2), Some(r0)) = (A::as_f32s(row2), A::as_f32s(row0))
                && let (Some(g0), Some(g2)) = (A::as_f32s(&g0), A::as_f32s(&g2))
                && let Some(o) = T::as_f32s_mut(orow)
                && let (Some(l), Some(hh)) = (T::as_f32s_mut(&mut lo), T::as_f32s_mut(&mut hi))
                && let Some(&sc) = T::as_f32s(std::slice::from_ref(&sc)).and_then(<[f32]>::first)
            {
                t.x_row_scaled_f32((r2, r0), (g0, g2), sc, o, (l, hh));
                continue;
            }
            if let Some((t, _)) = avx
                && let (Some(r2), Some(r0)) = (A::as_f64s(row2), A::as_f64s(row0))
                && let (Some(ly), Some(lx)) = (A::as_f64s_mut(lyy), A::as_f64s_mut(lxx))
            {
                t.x_row_pair((r2, r0), (&k.g0, &k.g2), ly, lx);
            } else {
                xpass_row(row2, r, &g0, w, lyy);
                xpass_row(row0, r, &g2, w, lxx);
            }
            combine_row(lyy, lxx, combine, orow, (&mut lo, &mut hi));
        }
        y0 = y1;
    }
    (
        lo.iter()
            .copied()
            .fold(lo[0], |a, b| if b < a { b } else { a }),
        hi.iter()
            .copied()
            .fold(hi[0], |a, b| if b > a { b } else { a }),
    )
}

/// Fill the `r` samples on each side of `row[r..r + w]` (SciPy `reflect`), as [`pad_row`].
#[inline(always)]
fn reflect_pad<A: Real>(row: &mut [A], r: usize, w: usize) {
    for k in 0..r {
        let jl = k as isize - r as isize;
        let jr = (w + k) as isize;
        row[k] = row[r + map_index(jl, w, Boundary::Reflect).unwrap_or(0)];
        row[r + w + k] = row[r + map_index(jr, w, Boundary::Reflect).unwrap_or(0)];
    }
}

/// Lanes of the running extrema of [`log_plane`].
const EXT_LANES: usize = 8;

/// `out[x] = combine(lyy[x], lxx[x])` (each rounded to `T` first), folded into the lane-wise
/// minima and maxima as it is written (one pass, vectorisable; NaN-free values).
#[inline(always)]
fn combine_row<T: Real, A: Real>(
    lyy: &[A],
    lxx: &[A],
    combine: &impl Fn(T, T) -> T,
    out: &mut [T],
    (lo, hi): (&mut [T; EXT_LANES], &mut [T; EXT_LANES]),
) {
    let (ob, orest) = out.as_chunks_mut::<EXT_LANES>();
    let (yb, yrest) = lyy.as_chunks::<EXT_LANES>();
    let (xb, xrest) = lxx.as_chunks::<EXT_LANES>();
    for ((o, a), b) in ob.iter_mut().zip(yb).zip(xb) {
        for l in 0..EXT_LANES {
            let v = combine(T::from_f64(a[l].to_f64()), T::from_f64(b[l].to_f64()));
            o[l] = v;
            lo[l] = if v < lo[l] { v } else { lo[l] };
            hi[l] = if v > hi[l] { v } else { hi[l] };
        }
    }
    for ((o, &a), &b) in orest.iter_mut().zip(yrest).zip(xrest) {
        let v = combine(T::from_f64(a.to_f64()), T::from_f64(b.to_f64()));
        *o = v;
        lo[0] = if v < lo[0] { v } else { lo[0] };
        hi[0] = if v > hi[0] { v } else { hi[0] };
    }
}

/// One LoG plane: `out[i] = combine(Lyy[i], Lxx[i])` where `Lyy = corr_x(g0, corr_y(g2, I))` and
/// `Lxx = corr_x(g2, corr_y(g0, I))`, every pass accumulated in `A` in SciPy's order and
/// rounded to `T`. With `A = f64` this is SciPy bit for bit; `A = f32` is the fast mode (f32
/// accumulation, spec §1.4). `img` is the frame in `A`, rows `stride` apart. Uses explicit AVX2
/// kernels when the CPU has them (f64 accumulation, and f32 accumulation of an f32 working
/// type: each vector lane sums one pixel in the generic order, no FMA: results are
/// bit-identical), the generic code otherwise. Returns the
/// plane's minimum and maximum (infinities for an empty plane; the values must be NaN-free).
///
/// The y passes run on blocks of rows that the x passes then read while they are in cache.
#[allow(clippy::too_many_arguments)]
pub fn log_plane<T: Real, A: Real>(
    img: &[A],
    stride: usize,
    h: usize,
    w: usize,
    k: &LogKernels,
    s: &mut LogScratch<T, A>,
    out: &mut [T],
    combine: impl Fn(T, T) -> T,
) -> (T, T) {
    log_plane_with(
        Avx2::detect(),
        img,
        stride,
        h,
        w,
        k,
        s,
        (0, h),
        out,
        combine,
        None,
    )
}

/// [`log_plane`] with `combine(Lyy, Lxx) = (−(Lyy + Lxx))·scale` (a plane of the scale-space
/// cube, `scale = σ²`), which the AVX2 path also vectorises explicitly for an f64 working type.
#[allow(clippy::too_many_arguments)]
pub fn log_plane_scaled<T: Real, A: Real>(
    img: &[A],
    stride: usize,
    h: usize,
    w: usize,
    k: &LogKernels,
    s: &mut LogScratch<T, A>,
    out: &mut [T],
    scale: T,
) -> (T, T) {
    log_rows_scaled(img, stride, h, w, k, s, (0, h), out, scale)
}

/// The rows `rows.0..rows.1` of [`log_plane_scaled`]'s plane (the same values bit for bit),
/// written to `out` from its start (`(rows.1 − rows.0)·w` values): a band of the cube can be
/// used while it is in cache. Returns the band's minimum and maximum.
#[allow(clippy::too_many_arguments)]
pub fn log_rows_scaled<T: Real, A: Real>(
    img: &[A],
    stride: usize,
    h: usize,
    w: usize,
    k: &LogKernels,
    s: &mut LogScratch<T, A>,
    rows: (usize, usize),
    out: &mut [T],
    scale: T,
) -> (T, T) {
    let combine = move |lyy: T, lxx: T| (-(lyy + lxx)) * scale;
    log_plane_with(
        Avx2::detect(),
        img,
        stride,
        h,
        w,
        k,
        s,
        rows,
        out,
        combine,
        Some(scale),
    )
}

/// [`log_plane`] with the explicit AVX2 kernels (`simd`) or the generic code (`None`): the
/// same values bit for bit. `scaled = Some(c)` promises `combine(a, b) = (−(a + b))·c`. Only
/// the rows `rows.0..rows.1` are computed, into `out` (row `y` at `(y − rows.0)·w`).
#[allow(clippy::too_many_arguments)]
fn log_plane_with<T: Real, A: Real>(
    simd: Option<Avx2>,
    img: &[A],
    stride: usize,
    h: usize,
    w: usize,
    k: &LogKernels,
    s: &mut LogScratch<T, A>,
    rows: (usize, usize),
    out: &mut [T],
    combine: impl Fn(T, T) -> T,
    scaled: Option<T>,
) -> (T, T) {
    let rows = (rows.0.min(h), rows.1.min(h));
    match simd {
        // the generic code around the kernels (conversions, `combine`, extrema, and the f32
        // accumulation) compiled for AVX2 too
        Some(t) => {
            t.run(|| log_plane_impl(simd, img, stride, h, w, k, s, rows, out, &combine, scaled))
        }
        None => log_plane_impl(None, img, stride, h, w, k, s, rows, out, &combine, scaled),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::SplitMix;

    /// `Lyy + Lxx` by the plain separable passes ([`pass_y`], [`pass_x`]), in `T`.
    fn reference<T: Real>(img: &[T], h: usize, w: usize, k: &LogKernels) -> Vec<T> {
        let mut t2 = vec![T::ZERO; h * w];
        let mut t0 = vec![T::ZERO; h * w];
        pass_y(
            img,
            h,
            w,
            &[&k.g2, &k.g0],
            Boundary::Reflect,
            &mut [&mut t2, &mut t0],
        );
        let mut lyy = vec![T::ZERO; h * w];
        let mut lxx = vec![T::ZERO; h * w];
        pass_x(&t2, h, w, &k.g0, Boundary::Reflect, &mut lyy);
        pass_x(&t0, h, w, &k.g2, Boundary::Reflect, &mut lxx);
        lyy.iter().zip(&lxx).map(|(&a, &b)| a + b).collect()
    }

    /// A random frame with the values of an input type: `u8` and `u16` frames as scikit-image's
    /// `img_as_float` gives them (k / 255, k / 65535), `f32` or `f64` uniform values.
    fn frame<T: Real>(rng: &mut SplitMix, n: usize, input: &str) -> Vec<T> {
        (0..n)
            .map(|_| {
                let u = rng.uniform();
                T::from_f64(match input {
                    "u8" => (u * 256.0).floor().min(255.0) / 255.0,
                    "u16" => (u * 65536.0).floor().min(65535.0) / 65535.0,
                    "f32" => f64::from(u as f32),
                    _ => u,
                })
            })
            .collect()
    }

    /// The plane of `img` by [`log_plane_with`] (`simd`), accumulated in `A`: `Lyy + Lxx`, or
    /// `(−(Lyy + Lxx))·c` for `scaled = Some(c)`.
    fn plane<T: Real, A: Real>(
        simd: Option<Avx2>,
        scaled: Option<T>,
        img: &[T],
        h: usize,
        w: usize,
        k: &LogKernels,
    ) -> (Vec<T>, (T, T)) {
        let stride = padded_stride(w);
        let wide: Vec<f64> = img.iter().map(|v| v.to_f64()).collect();
        let padded: Vec<A> = pad_stride(&wide, h, w, stride)
            .iter()
            .map(|&v| A::from_f64(v))
            .collect();
        let mut s = LogScratch::<T, A>::new(h, w, 2);
        let mut out = vec![T::ZERO; h * w];
        let f = move |a: T, b: T| match scaled {
            Some(c) => (-(a + b)) * c,
            None => a + b,
        };
        let ext = log_plane_with(
            simd,
            &padded,
            stride,
            h,
            w,
            k,
            &mut s,
            (0, h),
            &mut out,
            f,
            scaled,
        );
        (out, ext)
    }

    fn check<T: Real>(rng: &mut SplitMix, h: usize, w: usize, sigma: f64) {
        let img: Vec<T> = frame(rng, h * w, "f64");
        let k = LogKernels::new(sigma, T::IS_F32);
        let want = reference(&img, h, w, &k);
        let (out, (lo, hi)) = plane::<T, f64>(Avx2::detect(), None, &img, h, w, &k);
        for (i, (a, b)) in out.iter().zip(&want).enumerate() {
            assert!(
                a.to_f64().to_bits() == b.to_f64().to_bits(),
                "{h}x{w} σ {sigma}: pixel {i}: {} vs {}",
                a.to_f64(),
                b.to_f64()
            );
        }
        let min = want
            .iter()
            .map(|v| v.to_f64())
            .fold(f64::INFINITY, f64::min);
        let max = want
            .iter()
            .map(|v| v.to_f64())
            .fold(f64::NEG_INFINITY, f64::max);
        assert_eq!((lo.to_f64(), hi.to_f64()), (min, max), "{h}x{w} σ {sigma}");
    }

    /// Bit-identical planes and extrema from both paths.
    fn same_planes<T: Real, A: Real>(
        simd: Avx2,
        img: &[T],
        (h, w): (usize, usize),
        k: &LogKernels,
        what: &str,
    ) {
        // the plain sum, and the cube's combine with σ² = 2.25 (fused on the AVX2 path)
        for scaled in [None, Some(T::from_f64(2.25))] {
            let (a, ea) = plane::<T, A>(Some(simd), scaled, img, h, w, k);
            let (b, eb) = plane::<T, A>(None, scaled, img, h, w, k);
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                assert!(
                    x.to_f64().to_bits() == y.to_f64().to_bits(),
                    "{what} {scaled:?}: pixel {i}: AVX2 {} vs generic {}",
                    x.to_f64(),
                    y.to_f64()
                );
            }
            assert_eq!(
                (ea.0.to_f64().to_bits(), ea.1.to_f64().to_bits()),
                (eb.0.to_f64().to_bits(), eb.1.to_f64().to_bits()),
                "{what} {scaled:?}: extrema"
            );
        }
    }

    /// The explicit AVX2 kernels give the generic code's planes bit for bit (the generic path
    /// is `log_plane_with(None, …)`, so both run in one test on an AVX2 machine), on random
    /// frames of u8, u16, f32 and f64 values, in f64 and f32 working types and with f32
    /// accumulation (the f32 kernels: 8 lanes), with every radius 0…12 and 24 and awkward
    /// sizes: widths around the vector (4, 8), register-block (16, 32) and strip (64, 128)
    /// sizes, frames smaller than the kernel (reflected more than once) and than a row block.
    #[test]
    fn avx2_planes_equal_the_generic_ones() {
        let Some(simd) = Avx2::detect() else {
            eprintln!("no AVX2 on this CPU: only the generic path exists here");
            return;
        };
        let mut rng = SplitMix::new(23);
        let sigmas: Vec<f64> = std::iter::once(0.1)
            .chain((1..=12).map(|r| f64::from(r) / 4.0))
            .chain([6.0])
            .collect();
        let sizes = [
            (1, 1),
            (1, 5),
            (2, 3),
            (3, 17),
            (5, 4),
            (7, 19),
            (8, 16),
            (9, 33),
            (13, 63),
            (17, 65),
            (24, 67),
            (31, 131),
        ];
        for (n, &(h, w)) in sizes.iter().enumerate() {
            for &sigma in &sigmas {
                let input = ["u8", "u16", "f32", "f64"][(n + (4.0 * sigma) as usize) % 4];
                let what = format!("{h}x{w} σ {sigma} {input}");
                let img64: Vec<f64> = frame(&mut rng, h * w, input);
                let k64 = LogKernels::new(sigma, false);
                same_planes::<f64, f64>(simd, &img64, (h, w), &k64, &what);
                let img32: Vec<f32> = img64.iter().map(|&v| v as f32).collect();
                let k32 = LogKernels::new(sigma, true);
                same_planes::<f32, f64>(simd, &img32, (h, w), &k32, &what);
                same_planes::<f32, f32>(simd, &img32, (h, w), &k32, &what);
            }
        }
    }

    /// The blocked passes (rows in blocks of `BLOCK_ROWS`, columns in `LANES`, padding in
    /// place) give the plain passes' values bit for bit, and the plane's extrema, on random
    /// frames of every shape class: fewer rows than a block or than the radius (reflected more
    /// than once), widths around the lane and strip sizes.
    #[test]
    fn blocked_log_plane_equals_the_plain_passes() {
        let mut rng = SplitMix::new(19);
        for h in [1, 2, 5, 8, 9, 17, 33] {
            for w in [1, 3, 4, 5, 15, 16, 17, 21, 64, 67, 130] {
                for sigma in [0.7, 1.5, 3.0, 6.0] {
                    check::<f64>(&mut rng, h, w, sigma);
                    check::<f32>(&mut rng, h, w, sigma);
                }
            }
        }
    }

    /// Any band of rows of a plane (`log_rows_scaled`) equals those rows of the whole plane bit
    /// for bit, with the band's own extrema: bands starting and ending inside a row block,
    /// within the kernel radius of an edge, single rows, and empty bands.
    #[test]
    fn bands_of_rows_equal_the_rows_of_the_plane() {
        let mut rng = SplitMix::new(29);
        for (h, w) in [(1, 7), (5, 17), (23, 37), (40, 70)] {
            let img: Vec<f64> = frame(&mut rng, h * w, "u8");
            let stride = padded_stride(w);
            let padded = pad_stride(&img, h, w, stride);
            for sigma in [0.5, 1.5, 3.0] {
                let k = LogKernels::new(sigma, false);
                let c = sigma * sigma;
                let mut s = LogScratch::<f64, f64>::new(h, w, k.radius());
                let mut plane = vec![0.0; h * w];
                log_plane_scaled(&padded, stride, h, w, &k, &mut s, &mut plane, c);
                let cuts = [0, 1, 3, 8, 9, 16, 21, h / 2, h - 1, h];
                for &a in &cuts {
                    for &b in &cuts {
                        let (a, b) = (a.min(h), b.min(h));
                        if a > b {
                            continue;
                        }
                        let mut band = vec![f64::NAN; (b - a) * w];
                        let (lo, hi) = log_rows_scaled(
                            &padded,
                            stride,
                            h,
                            w,
                            &k,
                            &mut s,
                            (a, b),
                            &mut band,
                            c,
                        );
                        let want = &plane[a * w..b * w];
                        assert!(
                            band.iter()
                                .zip(want)
                                .all(|(x, y)| x.to_bits() == y.to_bits()),
                            "{h}x{w} σ {sigma} rows {a}..{b}"
                        );
                        if a < b {
                            let wl = want.iter().copied().fold(f64::INFINITY, f64::min);
                            let wh = want.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                            assert_eq!((lo, hi), (wl, wh), "{h}x{w} σ {sigma} rows {a}..{b}");
                        }
                    }
                }
            }
        }
    }
}
