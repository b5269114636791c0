//! The LoG planes of the scale space ([`log_plane`], [`log_plane_scaled`] and its bands of rows
//! [`log_rows_scaled`]): both y passes of a scale from one read of the frame, in blocks of
//! [`BLOCK_ROWS`] rows, then the x passes of those rows while they are in cache, with the
//! explicit AVX2 kernels of `filters/avx2.rs` where the CPU has them. Re-exported by [`super`]
//! (`crate::detect::filters`), where the paths stay.

use super::{Avx2, Boundary, Fused, gaussian_kernel1d, half_kernel, kernel_radius, map_index};
use crate::detect::real::Real;

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
    /// The fused f32 kernels, where f32 sums of an f32 cube run ([`LogScratch::with_fused`]).
    fused: Option<Fused>,
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
            fused: None,
            _t: std::marker::PhantomData,
        }
    }

    /// The same buffers, whose planes of f32 sums of an f32 cube (`T = A = f32`) run the fused
    /// multiply-add kernels `fused` (`filters/fused.rs`): values within the certified search's
    /// bound, not the generic order's bit for bit. `None`: the exact kernels.
    pub(crate) fn with_fused(mut self, fused: Option<Fused>) -> Self {
        self.fused = fused;
        self
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
    let fused = s.fused;
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
            match fused {
                Some(f) => f.y_rows_f32(img, (stride, h, w), (y0, y1), (g2, g0), a2, a0),
                None => t.y_rows_f32(img, (stride, h, w), (y0, y1), (g2, g0), a2, a0),
            }
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
                match fused {
                    Some(f) => f.x_row_scaled_f32((r2, r0), (g0, g2), sc, o, (l, hh)),
                    None => t.x_row_scaled_f32((r2, r0), (g0, g2), sc, o, (l, hh)),
                }
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

/// Fill the `r` samples on each side of `row[r..r + w]` (SciPy `reflect`), as
/// [`pad_row`](super::pad_row).
#[inline(always)]
fn reflect_pad<A: Real>(row: &mut [A], r: usize, w: usize) {
    if r <= w {
        // one reflection: sample −1 − k is column k, sample w + k is column w − 1 − k
        for k in 0..r {
            row[r - 1 - k] = row[r + k];
            row[r + w + k] = row[r + w - 1 - k];
        }
        return;
    }
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
pub(super) fn log_plane_with<T: Real, A: Real>(
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
