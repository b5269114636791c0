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
    __m256d, _mm256_add_pd, _mm256_cvtpd_ps, _mm256_cvtps_pd, _mm256_loadu_pd, _mm256_max_pd,
    _mm256_min_pd, _mm256_mul_pd, _mm256_set1_pd, _mm256_storeu_pd, _mm256_xor_pd,
};

use super::{Boundary, map_index};

/// Proof that the CPU has AVX2: made only by [`Avx2::detect`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Avx2(());

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
    pub(super) fn detect() -> Option<Self> {
        std::arch::is_x86_feature_detected!("avx2").then_some(Avx2(()))
    }

    /// Run `f` in a frame compiled with AVX2 enabled (the compiler may then vectorise the
    /// generic code that `f` inlines with 256-bit vectors; wider vectors only, no FMA
    /// contraction: Rust never contracts `a * b + c`).
    #[inline(always)]
    pub(super) fn run<R>(self, f: impl FnOnce() -> R) -> R {
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
        unsafe { x_row_pair_avx2((row2, row0), (g0, g2), lyy, lxx) }
    }
}

impl Avx2 {
    /// `out[x] = (−(lyy[x] + lxx[x]))·scale`, folded into the lane-wise extrema `lo`, `hi`
    /// (8 lanes: lane `x mod 8` for the full blocks of 8 columns, lane 0 for the rest) with
    /// `v < lo ? v : lo` and `v > hi ? v : hi`, as the generic `combine_row` with that
    /// combine.
    ///
    /// # Panics
    /// When the lengths differ, or `lo`, `hi` do not hold 8 lanes (a caller bug).
    pub(super) fn combine_scaled_row(
        self,
        (lyy, lxx): (&[f64], &[f64]),
        scale: f64,
        out: &mut [f64],
        (lo, hi): (&mut [f64], &mut [f64]),
    ) {
        assert!(
            lyy.len() == out.len() && lxx.len() == out.len(),
            "row lengths"
        );
        assert!(lo.len() == 8 && hi.len() == 8, "extrema lanes");
        // SAFETY: AVX2 is available (`self`); the lengths are checked above.
        unsafe { combine_scaled_row_avx2((lyy, lxx), scale, out, (lo, hi)) }
    }
}

/// [`Avx2::combine_scaled_row`].
///
/// # Safety
/// AVX2; `lyy`, `lxx` and `out` of one length, `lo` and `hi` of 8.
#[target_feature(enable = "avx2")]
unsafe fn combine_scaled_row_avx2(
    (lyy, lxx): (&[f64], &[f64]),
    scale: f64,
    out: &mut [f64],
    (lo, hi): (&mut [f64], &mut [f64]),
) {
    let w = out.len();
    let n8 = w / 8 * 8;
    let (py, px, po) = (lyy.as_ptr(), lxx.as_ptr(), out.as_mut_ptr());
    // negation flips the sign bit, as Rust's `-x`
    let (sign, sc) = (_mm256_set1_pd(-0.0), _mm256_set1_pd(scale));
    // SAFETY: 8 lanes each (checked by the caller).
    let (mut lo0, mut lo1, mut hi0, mut hi1) = unsafe {
        (
            ld(lo.as_ptr()),
            ld(lo.as_ptr().add(4)),
            ld(hi.as_ptr()),
            ld(hi.as_ptr().add(4)),
        )
    };
    let mut x = 0;
    while x < n8 {
        // SAFETY: x + 8 ≤ w, the length of the three rows.
        unsafe {
            let v0 = _mm256_add_pd(ld(py.add(x)), ld(px.add(x)));
            let v1 = _mm256_add_pd(ld(py.add(x + 4)), ld(px.add(x + 4)));
            let v0 = _mm256_mul_pd(_mm256_xor_pd(v0, sign), sc);
            let v1 = _mm256_mul_pd(_mm256_xor_pd(v1, sign), sc);
            _mm256_storeu_pd(po.add(x), v0);
            _mm256_storeu_pd(po.add(x + 4), v1);
            // `_mm256_min_pd(a, b)` is `a < b ? a : b`, `_mm256_max_pd(a, b)` `a > b ? a : b`
            lo0 = _mm256_min_pd(v0, lo0);
            lo1 = _mm256_min_pd(v1, lo1);
            hi0 = _mm256_max_pd(v0, hi0);
            hi1 = _mm256_max_pd(v1, hi1);
        }
        x += 8;
    }
    // SAFETY: 8 lanes each (checked by the caller).
    unsafe {
        _mm256_storeu_pd(lo.as_mut_ptr(), lo0);
        _mm256_storeu_pd(lo.as_mut_ptr().add(4), lo1);
        _mm256_storeu_pd(hi.as_mut_ptr(), hi0);
        _mm256_storeu_pd(hi.as_mut_ptr().add(4), hi1);
    }
    for x in n8..w {
        let v = (-(lyy[x] + lxx[x])) * scale;
        out[x] = v;
        lo[0] = if v < lo[0] { v } else { lo[0] };
        hi[0] = if v > hi[0] { v } else { hi[0] };
    }
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

/// The x passes of [`Avx2::x_row_pair`].
///
/// # Safety
/// AVX2; `row2`, `row0` hold `w + 2r` values, `lyy`, `lxx` hold `w`.
#[target_feature(enable = "avx2")]
unsafe fn x_row_pair_avx2(
    (row2, row0): (&[f64], &[f64]),
    (g0, g2): (&[f64], &[f64]),
    lyy: &mut [f64],
    lxx: &mut [f64],
) {
    let w = lyy.len();
    let r = g0.len() - 1;
    let (p2, p0) = (row2.as_ptr(), row0.as_ptr());
    let (oy, ox) = (lyy.as_mut_ptr(), lxx.as_mut_ptr());
    let (cy, cx) = (_mm256_set1_pd(g0[0]), _mm256_set1_pd(g2[0]));
    let mut x = 0;
    while x + XB <= w {
        // SAFETY: reads at x + r ± j + 0..16 ≤ w + 2r, writes at x + 0..16 ≤ w.
        unsafe {
            let (c2, c0) = (p2.add(r + x), p0.add(r + x));
            let mut y0 = _mm256_mul_pd(ld(c2), cy);
            let mut y1 = _mm256_mul_pd(ld(c2.add(4)), cy);
            let mut y2 = _mm256_mul_pd(ld(c2.add(8)), cy);
            let mut y3 = _mm256_mul_pd(ld(c2.add(12)), cy);
            let mut x0 = _mm256_mul_pd(ld(c0), cx);
            let mut x1 = _mm256_mul_pd(ld(c0.add(4)), cx);
            let mut x2 = _mm256_mul_pd(ld(c0.add(8)), cx);
            let mut x3 = _mm256_mul_pd(ld(c0.add(12)), cx);
            for j in (1..=r).rev() {
                let (wy, wx) = (
                    _mm256_set1_pd(*g0.get_unchecked(j)),
                    _mm256_set1_pd(*g2.get_unchecked(j)),
                );
                let (l2, r2) = (c2.sub(j), c2.add(j));
                y0 = _mm256_add_pd(y0, _mm256_mul_pd(_mm256_add_pd(ld(l2), ld(r2)), wy));
                y1 = _mm256_add_pd(
                    y1,
                    _mm256_mul_pd(_mm256_add_pd(ld(l2.add(4)), ld(r2.add(4))), wy),
                );
                y2 = _mm256_add_pd(
                    y2,
                    _mm256_mul_pd(_mm256_add_pd(ld(l2.add(8)), ld(r2.add(8))), wy),
                );
                y3 = _mm256_add_pd(
                    y3,
                    _mm256_mul_pd(_mm256_add_pd(ld(l2.add(12)), ld(r2.add(12))), wy),
                );
                let (l0, r0) = (c0.sub(j), c0.add(j));
                x0 = _mm256_add_pd(x0, _mm256_mul_pd(_mm256_add_pd(ld(l0), ld(r0)), wx));
                x1 = _mm256_add_pd(
                    x1,
                    _mm256_mul_pd(_mm256_add_pd(ld(l0.add(4)), ld(r0.add(4))), wx),
                );
                x2 = _mm256_add_pd(
                    x2,
                    _mm256_mul_pd(_mm256_add_pd(ld(l0.add(8)), ld(r0.add(8))), wx),
                );
                x3 = _mm256_add_pd(
                    x3,
                    _mm256_mul_pd(_mm256_add_pd(ld(l0.add(12)), ld(r0.add(12))), wx),
                );
            }
            _mm256_storeu_pd(oy.add(x), y0);
            _mm256_storeu_pd(oy.add(x + 4), y1);
            _mm256_storeu_pd(oy.add(x + 8), y2);
            _mm256_storeu_pd(oy.add(x + 12), y3);
            _mm256_storeu_pd(ox.add(x), x0);
            _mm256_storeu_pd(ox.add(x + 4), x1);
            _mm256_storeu_pd(ox.add(x + 8), x2);
            _mm256_storeu_pd(ox.add(x + 12), x3);
        }
        x += XB;
    }
    while x + 4 <= w {
        // SAFETY: reads at x + r ± j + 0..4 ≤ w + 2r, writes at x + 0..4 ≤ w.
        unsafe {
            let (c2, c0) = (p2.add(r + x), p0.add(r + x));
            let mut sy = _mm256_mul_pd(ld(c2), cy);
            let mut sx = _mm256_mul_pd(ld(c0), cx);
            for j in (1..=r).rev() {
                let (wy, wx) = (_mm256_set1_pd(g0[j]), _mm256_set1_pd(g2[j]));
                sy = _mm256_add_pd(
                    sy,
                    _mm256_mul_pd(_mm256_add_pd(ld(c2.sub(j)), ld(c2.add(j))), wy),
                );
                sx = _mm256_add_pd(
                    sx,
                    _mm256_mul_pd(_mm256_add_pd(ld(c0.sub(j)), ld(c0.add(j))), wx),
                );
            }
            _mm256_storeu_pd(oy.add(x), sy);
            _mm256_storeu_pd(ox.add(x), sx);
        }
        x += 4;
    }
    while x < w {
        let (mut sy, mut sx) = (row2[r + x] * g0[0], row0[r + x] * g2[0]);
        for j in (1..=r).rev() {
            sy += (row2[r + x - j] + row2[r + x + j]) * g0[j];
            sx += (row0[r + x - j] + row0[r + x + j]) * g2[j];
        }
        lyy[x] = sy;
        lxx[x] = sx;
        x += 1;
    }
}
