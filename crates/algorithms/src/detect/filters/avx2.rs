//! Explicit AVX2 kernels (4 × f64 per vector) for the y and x passes of an exact f64 LoG plane.
//!
//! Every vector lane computes one output pixel with exactly the scalar sum of
//! [`super::log_plane`]'s generic code, in the same order: `c·w[0]`, then
//! `+ (u_j + d_j)·w[j]` for `j = r … 1`, with separate multiplications and additions (never
//! `_mm256_fmadd_pd`: a fused multiply-add rounds once where SciPy rounds twice) and no
//! reassociation. The vectors run across neighbouring output pixels, so the outputs are
//! bit-identical to the generic path's (`filters::tests::avx2_planes_equal_the_generic_ones`).
//!
//! The only way to call the kernels is through an [`Avx2`] token, which exists only when the
//! CPU reports AVX2 ([`Avx2::detect`]); the safe methods check every slice length once, before
//! the unchecked loads and stores.

use std::arch::x86_64::{
    __m256, __m256d, _CMP_GE_OQ, _CMP_GT_OQ, _mm256_add_pd, _mm256_add_ps, _mm256_cmp_pd,
    _mm256_cmp_ps, _mm256_cvtpd_ps, _mm256_cvtps_pd, _mm256_loadu_pd, _mm256_loadu_ps,
    _mm256_max_pd, _mm256_max_ps, _mm256_min_pd, _mm256_min_ps, _mm256_movemask_pd,
    _mm256_movemask_ps, _mm256_mul_pd, _mm256_mul_ps, _mm256_set1_pd, _mm256_set1_ps,
    _mm256_storeu_pd, _mm256_storeu_ps, _mm256_xor_pd, _mm256_xor_ps,
};

use super::{Boundary, map_index};

/// Proof that the CPU has AVX2: made only by [`Avx2::detect`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Avx2(());

/// Columns of one register block of the y pass (per kernel: 4 vectors, 8 accumulators for the
/// pair g2, g0).
const YB: usize = 16;
/// Columns of one register block of the x passes (per pass: 4 vectors, 8 accumulators for the
/// pair Lyy, Lxx).
const XB: usize = 16;
/// Column strip of the y pass: the 2r + 1 input rows of a strip stay in L1 while y advances.
const STRIP: usize = 64;

impl Avx2 {
    /// The token, when the CPU supports AVX2.
    pub(crate) fn detect() -> Option<Self> {
        std::arch::is_x86_feature_detected!("avx2").then_some(Avx2(()))
    }

    /// Run `f` in a frame compiled with AVX2 enabled (the compiler may then vectorise the
    /// generic code that `f` inlines with 256-bit vectors; wider vectors only, no FMA
    /// contraction: Rust never contracts `a * b + c`).
    #[inline(always)]
    pub(crate) fn run<R>(self, f: impl FnOnce() -> R) -> R {
        // SAFETY: `self` exists only when the CPU supports AVX2 (see `detect`), the one
        // requirement of calling a function compiled with `target_feature(enable = "avx2")`.
        unsafe { with_avx2(f) }
    }

    /// Both y passes (g2 and g0) of the output rows `y0..y1` of an `h × w` f64 image whose
    /// rows are `stride` apart: row `y` goes to `a2`, `a0` at `(y − y0)·pw + r` (with
    /// `pw = w + 2r`, `r = g0.len() − 1`, room for the x passes' padding), each value
    /// rounded to f32 and back when `round_f32` (a float32 working type), as the generic pass.
    ///
    /// # Panics
    /// When a slice is too short for the given geometry (a caller bug).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn y_rows(
        self,
        img: &[f64],
        (stride, h, w): (usize, usize, usize),
        (y0, y1): (usize, usize),
        (g2, g0): (&[f64], &[f64]),
        round_f32: bool,
        a2: &mut [f64],
        a0: &mut [f64],
    ) {
        let r = g0.len().saturating_sub(1);
        let pw = w + 2 * r;
        assert!(!g0.is_empty() && g2.len() == g0.len(), "kernel lengths");
        assert!(stride >= w && y0 <= y1 && y1 <= h, "geometry");
        assert!(h == 0 || img.len() >= (h - 1) * stride + w, "image length");
        assert!(
            a2.len() >= (y1 - y0) * pw && a0.len() >= (y1 - y0) * pw,
            "scratch length"
        );
        // row offsets of the taps 1..=r above and below each output row (reflected)
        let reflect = |y: isize| map_index(y, h, Boundary::Reflect).unwrap_or(0) * stride;
        let mut offs = Vec::with_capacity((y1 - y0) * r);
        for y in y0..y1 {
            for j in 1..=r {
                offs.push((reflect(y as isize - j as isize), reflect((y + j) as isize)));
            }
        }
        // every offset + column read is < (h − 1)·stride + w ≤ img.len() (map_index stays in
        // 0..h), every write < (y1 − y0)·pw ≤ a2.len(), a0.len(): checked above
        if round_f32 {
            // SAFETY: AVX2 is available (`self`); the lengths are checked above.
            unsafe { y_rows_avx2::<true>(img, stride, w, (y0, y1), (g2, g0), &offs, a2, a0) }
        } else {
            // SAFETY: as above.
            unsafe { y_rows_avx2::<false>(img, stride, w, (y0, y1), (g2, g0), &offs, a2, a0) }
        }
    }

    /// Both x passes of one row: `lyy = corr_x(g0, row2)`, `lxx = corr_x(g2, row0)`, from rows
    /// padded by `r = g0.len() − 1` samples on each side (`row2[r + x]` is column x), for the
    /// `lyy.len()` columns.
    ///
    /// # Panics
    /// When a slice is too short (a caller bug).
    pub(super) fn x_row_pair(
        self,
        (row2, row0): (&[f64], &[f64]),
        (g0, g2): (&[f64], &[f64]),
        lyy: &mut [f64],
        lxx: &mut [f64],
    ) {
        let w = lyy.len();
        let r = g0.len().saturating_sub(1);
        assert!(!g0.is_empty() && g2.len() == g0.len(), "kernel lengths");
        assert!(lxx.len() == w, "output lengths");
        assert!(
            row2.len() >= w + 2 * r && row0.len() >= w + 2 * r,
            "row lengths"
        );
        // SAFETY: AVX2 is available (`self`); reads stay below w + 2r ≤ row lengths, writes
        // below w = output lengths (checked above).
        unsafe { x_rows_avx2((row2, row0), (g0, g2), w, XOut::Pair(lyy, lxx)) }
    }

    /// [`Avx2::x_row_pair`] and the generic combine in one pass: `out[x] =
    /// (−(Lyy[x] + Lxx[x]))·scale`, the same values bit for bit, folded into the 8 lanes of
    /// extrema with `v < lo ? v : lo` and `v > hi ? v : hi` (lane `x mod 8` for blocks of 4
    /// columns, lane 0 for the rest: the same minimum and maximum over the lanes), without
    /// storing `Lyy` and `Lxx`.
    ///
    /// # Panics
    /// When a slice is too short (a caller bug).
    pub(super) fn x_row_scaled(
        self,
        (row2, row0): (&[f64], &[f64]),
        (g0, g2): (&[f64], &[f64]),
        scale: f64,
        out: &mut [f64],
        (lo, hi): (&mut [f64], &mut [f64]),
    ) {
        let w = out.len();
        let r = g0.len().saturating_sub(1);
        assert!(!g0.is_empty() && g2.len() == g0.len(), "kernel lengths");
        assert!(
            row2.len() >= w + 2 * r && row0.len() >= w + 2 * r,
            "row lengths"
        );
        assert!(lo.len() == 8 && hi.len() == 8, "extrema lanes");
        // SAFETY: AVX2 is available (`self`); reads stay below w + 2r ≤ row lengths, writes
        // below w = the output's length and within the 8 extrema lanes (checked above).
        unsafe {
            x_rows_avx2(
                (row2, row0),
                (g0, g2),
                w,
                XOut::Scaled(out, scale, (lo, hi)),
            )
        }
    }
}

impl Avx2 {
    /// Bit `k` set where `v[k] > t` (16 values: four compares and four sign masks).
    #[inline(always)]
    pub(crate) fn gt_mask16(self, v: &[f64; 16], t: f64) -> u32 {
        // SAFETY: the token proves AVX2; the array holds the 16 values read.
        unsafe { gt_mask16_avx2(v, t) }
    }

    /// Bit `k` set where `v[k] ≥ max(a[k], b[k], c[k])` (16 values; NaN-free).
    #[inline(always)]
    pub(crate) fn ge_max3_mask16(
        self,
        v: &[f64; 16],
        (a, b, c): (&[f64; 16], &[f64; 16], &[f64; 16]),
    ) -> u32 {
        // SAFETY: the token proves AVX2; each array holds the 16 values read.
        unsafe { ge_max3_mask16_avx2(v, (a, b, c)) }
    }
}

impl Avx2 {
    /// Bit `k` set where `v[k] > t` (16 f32 values: two compares and two sign masks).
    #[inline(always)]
    pub(crate) fn gt_mask16_f32(self, v: &[f32; 16], t: f32) -> u32 {
        // SAFETY: the token proves AVX2; the array holds the 16 values read.
        unsafe { gt_mask16_f32_avx2(v, t) }
    }

    /// Bit `k` set where `v[k] + margin ≥ max(a[k], b[k], c[k])` (16 f32 values, NaN-free;
    /// `margin = 0` is `v[k] ≥ max(…)`).
    #[inline(always)]
    pub(crate) fn ge_max3_mask16_f32(
        self,
        v: &[f32; 16],
        (a, b, c): (&[f32; 16], &[f32; 16], &[f32; 16]),
        margin: f32,
    ) -> u32 {
        // SAFETY: the token proves AVX2; each array holds the 16 values read.
        unsafe { ge_max3_mask16_f32_avx2(v, (a, b, c), margin) }
    }
}

/// # Safety
/// AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn gt_mask16_f32_avx2(v: &[f32; 16], t: f32) -> u32 {
    let tv = _mm256_set1_ps(t);
    let mut m = 0u32;
    for q in 0..2 {
        // SAFETY: lanes 8q..8q + 8 of a 16-value array.
        let x = unsafe { ld8(v.as_ptr().add(8 * q)) };
        let bits = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(x, tv));
        m |= (bits as u32) << (8 * q);
    }
    m
}

/// # Safety
/// AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn ge_max3_mask16_f32_avx2(
    v: &[f32; 16],
    (a, b, c): (&[f32; 16], &[f32; 16], &[f32; 16]),
    margin: f32,
) -> u32 {
    let mv = _mm256_set1_ps(margin);
    let mut m = 0u32;
    for q in 0..2 {
        // SAFETY: lanes 8q..8q + 8 of 16-value arrays.
        let (x, mx) = unsafe {
            let o = 8 * q;
            let mx = _mm256_max_ps(
                _mm256_max_ps(ld8(a.as_ptr().add(o)), ld8(b.as_ptr().add(o))),
                ld8(c.as_ptr().add(o)),
            );
            (_mm256_add_ps(ld8(v.as_ptr().add(o)), mv), mx)
        };
        let bits = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(x, mx));
        m |= (bits as u32) << (8 * q);
    }
    m
}

/// # Safety
/// AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn gt_mask16_avx2(v: &[f64; 16], t: f64) -> u32 {
    let tv = _mm256_set1_pd(t);
    let mut m = 0u32;
    for q in 0..4 {
        // SAFETY: lanes 4q..4q + 4 of a 16-value array.
        let x = unsafe { ld(v.as_ptr().add(4 * q)) };
        let bits = _mm256_movemask_pd(_mm256_cmp_pd::<_CMP_GT_OQ>(x, tv));
        m |= (bits as u32) << (4 * q);
    }
    m
}

/// # Safety
/// AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn ge_max3_mask16_avx2(
    v: &[f64; 16],
    (a, b, c): (&[f64; 16], &[f64; 16], &[f64; 16]),
) -> u32 {
    let mut m = 0u32;
    for q in 0..4 {
        // SAFETY: lanes 4q..4q + 4 of 16-value arrays.
        let (x, mx) = unsafe {
            let o = 4 * q;
            let mx = _mm256_max_pd(
                _mm256_max_pd(ld(a.as_ptr().add(o)), ld(b.as_ptr().add(o))),
                ld(c.as_ptr().add(o)),
            );
            (ld(v.as_ptr().add(o)), mx)
        };
        let bits = _mm256_movemask_pd(_mm256_cmp_pd::<_CMP_GE_OQ>(x, mx));
        m |= (bits as u32) << (4 * q);
    }
    m
}

/// Call `f` with AVX2 enabled for the code it inlines.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// Load 4 f64 from `p`.
///
/// # Safety
/// AVX2; `p..p + 4` readable.
#[inline(always)]
unsafe fn ld(p: *const f64) -> __m256d {
    // SAFETY: guaranteed by the caller.
    unsafe { _mm256_loadu_pd(p) }
}

/// With `F32`, round each lane to f32 and back (`(v as f32) as f64`: round to nearest even,
/// as `_mm256_cvtpd_ps` under the default rounding mode Rust assumes); else `v`.
#[target_feature(enable = "avx2")]
#[inline]
fn round<const F32: bool>(v: __m256d) -> __m256d {
    if F32 {
        _mm256_cvtps_pd(_mm256_cvtpd_ps(v))
    } else {
        v
    }
}

/// The y passes of [`Avx2::y_rows`] (`offs[(y − y0)·r + j − 1]` = the offsets of rows y − j
/// and y + j).
///
/// # Safety
/// AVX2; `img[off + x]` readable for every offset in `offs` (and `(y)·stride` for y in
/// `y0..y1`) and x < w; `a2`, `a0` hold `(y1 − y0)·(w + 2r)` values.
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn y_rows_avx2<const F32: bool>(
    img: &[f64],
    stride: usize,
    w: usize,
    (y0, y1): (usize, usize),
    (g2, g0): (&[f64], &[f64]),
    offs: &[(usize, usize)],
    a2: &mut [f64],
    a0: &mut [f64],
) {
    let r = g0.len() - 1;
    let pw = w + 2 * r;
    let ip = img.as_ptr();
    let round1 = |v: f64| if F32 { f64::from(v as f32) } else { v };
    let (c2, c0) = (_mm256_set1_pd(g2[0]), _mm256_set1_pd(g0[0]));
    let mut xs = 0;
    while xs < w {
        let xe = (xs + STRIP).min(w);
        for y in y0..y1 {
            let off = &offs[(y - y0) * r..(y - y0 + 1) * r];
            let centre = y * stride;
            let orow = (y - y0) * pw + r;
            let (o2, o0) = (
                a2[orow..orow + w].as_mut_ptr(),
                a0[orow..orow + w].as_mut_ptr(),
            );
            let mut x = xs;
            // 16 columns: 4 vectors per kernel
            while x + YB <= xe {
                // SAFETY: columns x..x + 16 ≤ w of rows inside the image (caller's contract).
                unsafe {
                    let p = ip.add(centre + x);
                    let (v0, v1, v2, v3) = (ld(p), ld(p.add(4)), ld(p.add(8)), ld(p.add(12)));
                    let mut s20 = _mm256_mul_pd(v0, c2);
                    let mut s21 = _mm256_mul_pd(v1, c2);
                    let mut s22 = _mm256_mul_pd(v2, c2);
                    let mut s23 = _mm256_mul_pd(v3, c2);
                    let mut s00 = _mm256_mul_pd(v0, c0);
                    let mut s01 = _mm256_mul_pd(v1, c0);
                    let mut s02 = _mm256_mul_pd(v2, c0);
                    let mut s03 = _mm256_mul_pd(v3, c0);
                    for j in (1..=r).rev() {
                        let (u, d) = *off.get_unchecked(j - 1);
                        let (pu, pd) = (ip.add(u + x), ip.add(d + x));
                        let (w2, w0) = (
                            _mm256_set1_pd(*g2.get_unchecked(j)),
                            _mm256_set1_pd(*g0.get_unchecked(j)),
                        );
                        let t0 = _mm256_add_pd(ld(pu), ld(pd));
                        let t1 = _mm256_add_pd(ld(pu.add(4)), ld(pd.add(4)));
                        let t2 = _mm256_add_pd(ld(pu.add(8)), ld(pd.add(8)));
                        let t3 = _mm256_add_pd(ld(pu.add(12)), ld(pd.add(12)));
                        s20 = _mm256_add_pd(s20, _mm256_mul_pd(t0, w2));
                        s21 = _mm256_add_pd(s21, _mm256_mul_pd(t1, w2));
                        s22 = _mm256_add_pd(s22, _mm256_mul_pd(t2, w2));
                        s23 = _mm256_add_pd(s23, _mm256_mul_pd(t3, w2));
                        s00 = _mm256_add_pd(s00, _mm256_mul_pd(t0, w0));
                        s01 = _mm256_add_pd(s01, _mm256_mul_pd(t1, w0));
                        s02 = _mm256_add_pd(s02, _mm256_mul_pd(t2, w0));
                        s03 = _mm256_add_pd(s03, _mm256_mul_pd(t3, w0));
                    }
                    let (q2, q0) = (o2.add(x), o0.add(x));
                    _mm256_storeu_pd(q2, round::<F32>(s20));
                    _mm256_storeu_pd(q2.add(4), round::<F32>(s21));
                    _mm256_storeu_pd(q2.add(8), round::<F32>(s22));
                    _mm256_storeu_pd(q2.add(12), round::<F32>(s23));
                    _mm256_storeu_pd(q0, round::<F32>(s00));
                    _mm256_storeu_pd(q0.add(4), round::<F32>(s01));
                    _mm256_storeu_pd(q0.add(8), round::<F32>(s02));
                    _mm256_storeu_pd(q0.add(12), round::<F32>(s03));
                }
                x += YB;
            }
            // 4 columns
            while x + 4 <= xe {
                // SAFETY: columns x..x + 4 ≤ w (caller's contract).
                unsafe {
                    let v = ld(ip.add(centre + x));
                    let mut s2 = _mm256_mul_pd(v, c2);
                    let mut s0 = _mm256_mul_pd(v, c0);
                    for j in (1..=r).rev() {
                        let (u, d) = *off.get_unchecked(j - 1);
                        let t = _mm256_add_pd(ld(ip.add(u + x)), ld(ip.add(d + x)));
                        s2 = _mm256_add_pd(s2, _mm256_mul_pd(t, _mm256_set1_pd(g2[j])));
                        s0 = _mm256_add_pd(s0, _mm256_mul_pd(t, _mm256_set1_pd(g0[j])));
                    }
                    _mm256_storeu_pd(o2.add(x), round::<F32>(s2));
                    _mm256_storeu_pd(o0.add(x), round::<F32>(s0));
                }
                x += 4;
            }
            // the last columns, one at a time
            while x < xe {
                let c = img[centre + x];
                let (mut s2, mut s0) = (c * g2[0], c * g0[0]);
                for j in (1..=r).rev() {
                    let (u, d) = off[j - 1];
                    let t = img[u + x] + img[d + x];
                    s2 += t * g2[j];
                    s0 += t * g0[j];
                }
                a2[orow + x] = round1(s2);
                a0[orow + x] = round1(s0);
                x += 1;
            }
        }
        xs = xe;
    }
}

/// Where the x passes put a block of outputs: both rows (`lyy`, `lxx`), or the cube's
/// `(−(Lyy + Lxx))·scale` with its running extrema (the combine fused into the pass, so `Lyy`
/// and `Lxx` never leave the registers).
enum XOut<'a> {
    /// `lyy`, `lxx`, `w` values each.
    Pair(&'a mut [f64], &'a mut [f64]),
    /// `out` (`w` values), the scale, and 8 lanes of minima and maxima.
    Scaled(&'a mut [f64], f64, (&'a mut [f64], &'a mut [f64])),
}

/// `Lyy` and `Lxx` of the 4·N columns from `c2`, `c0` (the columns' centre samples in rows
/// padded by `r`), each lane in the generic order.
///
/// # Safety
/// AVX2; `c2 − r .. c2 + 4N + r` and the same around `c0` readable; `g0`, `g2` hold `r + 1`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn x_block<const N: usize>(
    (c2, c0): (*const f64, *const f64),
    (g0, g2): (&[f64], &[f64]),
    r: usize,
) -> ([__m256d; N], [__m256d; N]) {
    let (cy, cx) = (_mm256_set1_pd(g0[0]), _mm256_set1_pd(g2[0]));
    // SAFETY: every read is within the ranges the caller guarantees.
    unsafe {
        let mut ys: [__m256d; N] = std::array::from_fn(|v| _mm256_mul_pd(ld(c2.add(4 * v)), cy));
        let mut xs: [__m256d; N] = std::array::from_fn(|v| _mm256_mul_pd(ld(c0.add(4 * v)), cx));
        for j in (1..=r).rev() {
            let (wy, wx) = (
                _mm256_set1_pd(*g0.get_unchecked(j)),
                _mm256_set1_pd(*g2.get_unchecked(j)),
            );
            let (l2, r2) = (c2.sub(j), c2.add(j));
            for (v, y) in ys.iter_mut().enumerate() {
                let t = _mm256_add_pd(ld(l2.add(4 * v)), ld(r2.add(4 * v)));
                *y = _mm256_add_pd(*y, _mm256_mul_pd(t, wy));
            }
            let (l0, r0) = (c0.sub(j), c0.add(j));
            for (v, x) in xs.iter_mut().enumerate() {
                let t = _mm256_add_pd(ld(l0.add(4 * v)), ld(r0.add(4 * v)));
                *x = _mm256_add_pd(*x, _mm256_mul_pd(t, wx));
            }
        }
        (ys, xs)
    }
}

/// The x passes of [`Avx2::x_row_pair`] and [`Avx2::x_row_scaled`].
///
/// # Safety
/// AVX2; `row2`, `row0` hold `w + 2r` values, the outputs `w` (and 8 extrema lanes).
#[target_feature(enable = "avx2")]
unsafe fn x_rows_avx2(
    (row2, row0): (&[f64], &[f64]),
    (g0, g2): (&[f64], &[f64]),
    w: usize,
    mut out: XOut<'_>,
) {
    let r = g0.len() - 1;
    let (p2, p0) = (row2.as_ptr(), row0.as_ptr());
    // negation flips the sign bit, as Rust's `-x`
    let sign = _mm256_set1_pd(-0.0);
    let mut put = |x: usize, ys: &[__m256d], xs: &[__m256d]| match &mut out {
        XOut::Pair(lyy, lxx) => {
            for (v, (y, xx)) in ys.iter().zip(xs).enumerate() {
                // SAFETY: x + 4v + 4 ≤ w, the length of both rows (checked by the caller).
                unsafe {
                    _mm256_storeu_pd(lyy.as_mut_ptr().add(x + 4 * v), *y);
                    _mm256_storeu_pd(lxx.as_mut_ptr().add(x + 4 * v), *xx);
                }
            }
        }
        XOut::Scaled(o, scale, (lo, hi)) => {
            let sc = _mm256_set1_pd(*scale);
            for (v, (y, xx)) in ys.iter().zip(xs).enumerate() {
                // lanes 0..4 or 4..8 of the extrema (x mod 8)
                let e = 4 * ((x / 4 + v) % 2);
                // SAFETY: x + 4v + 4 ≤ w, the output's length; e + 4 ≤ 8, the extrema's.
                unsafe {
                    let c = _mm256_mul_pd(_mm256_xor_pd(_mm256_add_pd(*y, *xx), sign), sc);
                    _mm256_storeu_pd(o.as_mut_ptr().add(x + 4 * v), c);
                    // `_mm256_min_pd(a, b)` is `a < b ? a : b`, `_mm256_max_pd(a, b)` `a > b ? a : b`
                    let l = _mm256_min_pd(c, ld(lo.as_ptr().add(e)));
                    let u = _mm256_max_pd(c, ld(hi.as_ptr().add(e)));
                    _mm256_storeu_pd(lo.as_mut_ptr().add(e), l);
                    _mm256_storeu_pd(hi.as_mut_ptr().add(e), u);
                }
            }
        }
    };
    let mut x = 0;
    while x + XB <= w {
        // SAFETY: reads at x + r ± j + 0..16 ≤ w + 2r.
        let (ys, xs) =
            unsafe { x_block::<{ XB / 4 }>((p2.add(r + x), p0.add(r + x)), (g0, g2), r) };
        put(x, &ys, &xs);
        x += XB;
    }
    while x + 4 <= w {
        // SAFETY: reads at x + r ± j + 0..4 ≤ w + 2r.
        let (ys, xs) = unsafe { x_block::<1>((p2.add(r + x), p0.add(r + x)), (g0, g2), r) };
        put(x, &ys, &xs);
        x += 4;
    }
    while x < w {
        let (mut sy, mut sx) = (row2[r + x] * g0[0], row0[r + x] * g2[0]);
        for j in (1..=r).rev() {
            sy += (row2[r + x - j] + row2[r + x + j]) * g0[j];
            sx += (row0[r + x - j] + row0[r + x + j]) * g2[j];
        }
        match &mut out {
            XOut::Pair(lyy, lxx) => {
                lyy[x] = sy;
                lxx[x] = sx;
            }
            XOut::Scaled(o, scale, (lo, hi)) => {
                let v = (-(sy + sx)) * *scale;
                o[x] = v;
                lo[0] = if v < lo[0] { v } else { lo[0] };
                hi[0] = if v > hi[0] { v } else { hi[0] };
            }
        }
        x += 1;
    }
}

// ---------------------------------------------------------------------------------------------
// f32 accumulation (8 × f32 per vector): the same sums as the generic code with `A = f32`, lane
// for lane, in the same order (separate multiplications and additions, no reassociation), so
// the f32 planes are bit-identical to the generic f32 path's
// (`filters::tests::avx2_f32_planes_equal_the_generic_ones`).

/// Columns of one f32 register block (4 vectors of 8).
const B32: usize = 32;

impl Avx2 {
    /// [`Avx2::y_rows`] for an f32 image and f32 accumulation (`g2`, `g0`: the taps in f32).
    ///
    /// # Panics
    /// When a slice is too short for the given geometry (a caller bug).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn y_rows_f32(
        self,
        img: &[f32],
        (stride, h, w): (usize, usize, usize),
        (y0, y1): (usize, usize),
        (g2, g0): (&[f32], &[f32]),
        a2: &mut [f32],
        a0: &mut [f32],
    ) {
        let r = g0.len().saturating_sub(1);
        let pw = w + 2 * r;
        assert!(!g0.is_empty() && g2.len() == g0.len(), "kernel lengths");
        assert!(stride >= w && y0 <= y1 && y1 <= h, "geometry");
        assert!(h == 0 || img.len() >= (h - 1) * stride + w, "image length");
        assert!(
            a2.len() >= (y1 - y0) * pw && a0.len() >= (y1 - y0) * pw,
            "scratch length"
        );
        let reflect = |y: isize| map_index(y, h, Boundary::Reflect).unwrap_or(0) * stride;
        let mut offs = Vec::with_capacity((y1 - y0) * r);
        for y in y0..y1 {
            for j in 1..=r {
                offs.push((reflect(y as isize - j as isize), reflect((y + j) as isize)));
            }
        }
        // SAFETY: AVX2 is available (`self`); every offset + column read is
        // < (h − 1)·stride + w ≤ img.len(), every write < (y1 − y0)·pw ≤ a2.len(), a0.len()
        // (checked above).
        unsafe { y_rows_f32_avx2(img, stride, w, (y0, y1), (g2, g0), &offs, a2, a0) }
    }

    /// [`Avx2::x_row_scaled`] for f32 rows, taps, output and extrema: `out[x] =
    /// (−(Lyy[x] + Lxx[x]))·scale` in f32, folded into the 8 lanes of extrema (lane `x mod 8`
    /// for blocks of 8 columns, lane 0 for the rest).
    ///
    /// # Panics
    /// When a slice is too short (a caller bug).
    pub(super) fn x_row_scaled_f32(
        self,
        (row2, row0): (&[f32], &[f32]),
        (g0, g2): (&[f32], &[f32]),
        scale: f32,
        out: &mut [f32],
        (lo, hi): (&mut [f32], &mut [f32]),
    ) {
        let w = out.len();
        let r = g0.len().saturating_sub(1);
        assert!(!g0.is_empty() && g2.len() == g0.len(), "kernel lengths");
        assert!(
            row2.len() >= w + 2 * r && row0.len() >= w + 2 * r,
            "row lengths"
        );
        assert!(lo.len() == 8 && hi.len() == 8, "extrema lanes");
        // SAFETY: AVX2 is available (`self`); reads stay below w + 2r ≤ row lengths, writes
        // below w = the output's length and within the 8 extrema lanes (checked above).
        unsafe { x_rows_f32_avx2((row2, row0), (g0, g2), w, scale, out, (lo, hi)) }
    }
}

/// Load 8 f32 from `p`.
///
/// # Safety
/// AVX2; `p..p + 8` readable.
#[inline(always)]
unsafe fn ld8(p: *const f32) -> __m256 {
    // SAFETY: guaranteed by the caller.
    unsafe { _mm256_loadu_ps(p) }
}

/// The f32 y passes of [`Avx2::y_rows_f32`] (offsets as [`y_rows_avx2`]'s).
///
/// # Safety
/// AVX2; `img[off + x]` readable for every offset in `offs` (and `y·stride` for y in
/// `y0..y1`) and x < w; `a2`, `a0` hold `(y1 − y0)·(w + 2r)` values.
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn y_rows_f32_avx2(
    img: &[f32],
    stride: usize,
    w: usize,
    (y0, y1): (usize, usize),
    (g2, g0): (&[f32], &[f32]),
    offs: &[(usize, usize)],
    a2: &mut [f32],
    a0: &mut [f32],
) {
    let r = g0.len() - 1;
    let pw = w + 2 * r;
    let ip = img.as_ptr();
    let (c2, c0) = (_mm256_set1_ps(g2[0]), _mm256_set1_ps(g0[0]));
    let mut xs = 0;
    while xs < w {
        let xe = (xs + 2 * STRIP).min(w);
        for y in y0..y1 {
            let off = &offs[(y - y0) * r..(y - y0 + 1) * r];
            let centre = y * stride;
            let orow = (y - y0) * pw + r;
            let (o2, o0) = (
                a2[orow..orow + w].as_mut_ptr(),
                a0[orow..orow + w].as_mut_ptr(),
            );
            let mut x = xs;
            // 32 columns: 4 vectors per kernel
            while x + B32 <= xe {
                // SAFETY: columns x..x + 32 ≤ w of rows inside the image (caller's contract).
                unsafe {
                    let p = ip.add(centre + x);
                    let v: [__m256; 4] = std::array::from_fn(|q| ld8(p.add(8 * q)));
                    let mut s2: [__m256; 4] = std::array::from_fn(|q| _mm256_mul_ps(v[q], c2));
                    let mut s0: [__m256; 4] = std::array::from_fn(|q| _mm256_mul_ps(v[q], c0));
                    for j in (1..=r).rev() {
                        let (u, d) = *off.get_unchecked(j - 1);
                        let (pu, pd) = (ip.add(u + x), ip.add(d + x));
                        let (w2, w0) = (
                            _mm256_set1_ps(*g2.get_unchecked(j)),
                            _mm256_set1_ps(*g0.get_unchecked(j)),
                        );
                        for q in 0..4 {
                            let t = _mm256_add_ps(ld8(pu.add(8 * q)), ld8(pd.add(8 * q)));
                            s2[q] = _mm256_add_ps(s2[q], _mm256_mul_ps(t, w2));
                            s0[q] = _mm256_add_ps(s0[q], _mm256_mul_ps(t, w0));
                        }
                    }
                    let (q2, q0) = (o2.add(x), o0.add(x));
                    for q in 0..4 {
                        _mm256_storeu_ps(q2.add(8 * q), s2[q]);
                        _mm256_storeu_ps(q0.add(8 * q), s0[q]);
                    }
                }
                x += B32;
            }
            // 8 columns
            while x + 8 <= xe {
                // SAFETY: columns x..x + 8 ≤ w (caller's contract).
                unsafe {
                    let v = ld8(ip.add(centre + x));
                    let mut s2 = _mm256_mul_ps(v, c2);
                    let mut s0 = _mm256_mul_ps(v, c0);
                    for j in (1..=r).rev() {
                        let (u, d) = *off.get_unchecked(j - 1);
                        let t = _mm256_add_ps(ld8(ip.add(u + x)), ld8(ip.add(d + x)));
                        s2 = _mm256_add_ps(s2, _mm256_mul_ps(t, _mm256_set1_ps(g2[j])));
                        s0 = _mm256_add_ps(s0, _mm256_mul_ps(t, _mm256_set1_ps(g0[j])));
                    }
                    _mm256_storeu_ps(o2.add(x), s2);
                    _mm256_storeu_ps(o0.add(x), s0);
                }
                x += 8;
            }
            // the last columns, one at a time
            while x < xe {
                let c = img[centre + x];
                let (mut s2, mut s0) = (c * g2[0], c * g0[0]);
                for j in (1..=r).rev() {
                    let (u, d) = off[j - 1];
                    let t = img[u + x] + img[d + x];
                    s2 += t * g2[j];
                    s0 += t * g0[j];
                }
                a2[orow + x] = s2;
                a0[orow + x] = s0;
                x += 1;
            }
        }
        xs = xe;
    }
}

/// `Lyy` and `Lxx` of the 8·N columns from `c2`, `c0` in f32 (as [`x_block`]).
///
/// # Safety
/// AVX2; `c2 − r .. c2 + 8N + r` and the same around `c0` readable; `g0`, `g2` hold `r + 1`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn x_block_f32<const N: usize>(
    (c2, c0): (*const f32, *const f32),
    (g0, g2): (&[f32], &[f32]),
    r: usize,
) -> ([__m256; N], [__m256; N]) {
    let (cy, cx) = (_mm256_set1_ps(g0[0]), _mm256_set1_ps(g2[0]));
    // SAFETY: every read is within the ranges the caller guarantees.
    unsafe {
        let mut ys: [__m256; N] = std::array::from_fn(|v| _mm256_mul_ps(ld8(c2.add(8 * v)), cy));
        let mut xs: [__m256; N] = std::array::from_fn(|v| _mm256_mul_ps(ld8(c0.add(8 * v)), cx));
        for j in (1..=r).rev() {
            let (wy, wx) = (
                _mm256_set1_ps(*g0.get_unchecked(j)),
                _mm256_set1_ps(*g2.get_unchecked(j)),
            );
            let (l2, r2) = (c2.sub(j), c2.add(j));
            for (v, y) in ys.iter_mut().enumerate() {
                let t = _mm256_add_ps(ld8(l2.add(8 * v)), ld8(r2.add(8 * v)));
                *y = _mm256_add_ps(*y, _mm256_mul_ps(t, wy));
            }
            let (l0, r0) = (c0.sub(j), c0.add(j));
            for (v, x) in xs.iter_mut().enumerate() {
                let t = _mm256_add_ps(ld8(l0.add(8 * v)), ld8(r0.add(8 * v)));
                *x = _mm256_add_ps(*x, _mm256_mul_ps(t, wx));
            }
        }
        (ys, xs)
    }
}

/// The f32 x passes of [`Avx2::x_row_scaled_f32`].
///
/// # Safety
/// AVX2; `row2`, `row0` hold `w + 2r` values, `out` `w`, `lo` and `hi` 8.
#[target_feature(enable = "avx2")]
unsafe fn x_rows_f32_avx2(
    (row2, row0): (&[f32], &[f32]),
    (g0, g2): (&[f32], &[f32]),
    w: usize,
    scale: f32,
    out: &mut [f32],
    (lo, hi): (&mut [f32], &mut [f32]),
) {
    let r = g0.len() - 1;
    let (p2, p0) = (row2.as_ptr(), row0.as_ptr());
    let sign = _mm256_set1_ps(-0.0);
    let sc = _mm256_set1_ps(scale);
    // SAFETY: the 8 extrema lanes (caller's contract).
    let (mut lv, mut hv) = unsafe { (ld8(lo.as_ptr()), ld8(hi.as_ptr())) };
    let op = out.as_mut_ptr();
    let mut put = |x: usize, ys: &[__m256], xs: &[__m256]| {
        for (v, (y, xx)) in ys.iter().zip(xs).enumerate() {
            let c = _mm256_mul_ps(_mm256_xor_ps(_mm256_add_ps(*y, *xx), sign), sc);
            // SAFETY: x + 8v + 8 ≤ w, the output's length (caller's contract).
            unsafe { _mm256_storeu_ps(op.add(x + 8 * v), c) };
            // `_mm256_min_ps(a, b)` is `a < b ? a : b`, `_mm256_max_ps(a, b)` `a > b ? a : b`
            lv = _mm256_min_ps(c, lv);
            hv = _mm256_max_ps(c, hv);
        }
    };
    let mut x = 0;
    while x + B32 <= w {
        // SAFETY: reads at x + r ± j + 0..32 ≤ w + 2r.
        let (ys, xs) =
            unsafe { x_block_f32::<{ B32 / 8 }>((p2.add(r + x), p0.add(r + x)), (g0, g2), r) };
        put(x, &ys, &xs);
        x += B32;
    }
    while x + 8 <= w {
        // SAFETY: reads at x + r ± j + 0..8 ≤ w + 2r.
        let (ys, xs) = unsafe { x_block_f32::<1>((p2.add(r + x), p0.add(r + x)), (g0, g2), r) };
        put(x, &ys, &xs);
        x += 8;
    }
    // SAFETY: the 8 extrema lanes (caller's contract).
    unsafe {
        _mm256_storeu_ps(lo.as_mut_ptr(), lv);
        _mm256_storeu_ps(hi.as_mut_ptr(), hv);
    }
    while x < w {
        let (mut sy, mut sx) = (row2[r + x] * g0[0], row0[r + x] * g2[0]);
        for j in (1..=r).rev() {
            sy += (row2[r + x - j] + row2[r + x + j]) * g0[j];
            sx += (row0[r + x - j] + row0[r + x + j]) * g2[j];
        }
        let v = (-(sy + sx)) * scale;
        out[x] = v;
        lo[0] = if v < lo[0] { v } else { lo[0] };
        hi[0] = if v > hi[0] { v } else { hi[0] };
        x += 1;
    }
}
