//! Explicit AVX2 kernels for the y and x passes of a LoG plane: 4 × f64 per vector for the
//! exact f64 sums, 8 × f32 for the f32 sums of `--fast` on f32 frames and of the certified
//! search (`blob_log/certified.rs`) where fused kernels are off, one generic kernel over the
//! [`Lanes`] of both. The kernels' bodies are also compiled for the fused multiply-add lanes
//! of `filters/fused.rs` (8 lanes with FMA, 16 with AVX-512F), where `Lanes::mul_add` fuses.
//!
//! Every vector lane computes one output pixel with exactly the scalar sum of
//! [`super::log_plane`](fn@super::log_plane)'s generic code, in the same order: `c·w[0]`, then
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
        let offs = y_offsets(img, (stride, h, w), (y0, y1), (g2, g0), (a2, a0));
        // every offset + column read is < (h − 1)·stride + w ≤ img.len() (map_index stays in
        // 0..h), every write < (y1 − y0)·pw ≤ a2.len(), a0.len(): checked above
        if round_f32 {
            // SAFETY: AVX2 is available (`self`); the lengths are checked above.
            unsafe {
                y_rows_avx2::<__m256d, true>(img, stride, w, (y0, y1), (g2, g0), &offs, a2, a0)
            }
        } else {
            // SAFETY: as above.
            unsafe {
                y_rows_avx2::<__m256d, false>(img, stride, w, (y0, y1), (g2, g0), &offs, a2, a0)
            }
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
        unsafe { x_rows_avx2::<__m256d>((row2, row0), (g0, g2), w, XOut::Pair(lyy, lxx)) }
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
            x_rows_avx2::<__m256d>(
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

/// The row offsets of the taps `1..=r` above and below each output row `y0..y1` of an `h × w`
/// image whose rows are `stride` apart (reflected), after checking every slice of a y pass
/// against the geometry (then every read of the kernels is `< (h − 1)·stride + w ≤ img.len()`,
/// every write `< (y1 − y0)·(w + 2r) ≤ a2.len(), a0.len()`).
///
/// # Panics
/// When a slice is too short for the given geometry (a caller bug).
pub(super) fn y_offsets<E>(
    img: &[E],
    (stride, h, w): (usize, usize, usize),
    (y0, y1): (usize, usize),
    (g2, g0): (&[E], &[E]),
    (a2, a0): (&[E], &[E]),
) -> Vec<(usize, usize)> {
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
        if y >= r && y + r < h {
            // inside the frame: no reflection
            offs.extend((1..=r).map(|j| ((y - j) * stride, (y + j) * stride)));
            continue;
        }
        for j in 1..=r {
            offs.push((reflect(y as isize - j as isize), reflect((y + j) as isize)));
        }
    }
    offs
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

/// Load 8 f32 from `p`.
///
/// # Safety
/// AVX2; `p..p + 8` readable.
#[inline(always)]
unsafe fn ld8(p: *const f32) -> __m256 {
    // SAFETY: guaranteed by the caller.
    unsafe { _mm256_loadu_ps(p) }
}

/// A 256-bit vector: 4 f64 or 8 f32 lanes. The pass kernels below are written once for both.
///
/// # Safety
/// Each method is an AVX intrinsic compiled with AVX2 enabled: call it only where the CPU has
/// AVX2 (from the kernels, which an [`Avx2`] token guards); `load` and `store` also need
/// `p..p + L` readable or writable.
pub(super) trait Lanes: Copy {
    /// The lane type.
    type E: Copy
        + PartialOrd
        + std::ops::Add<Output = Self::E>
        + std::ops::Mul<Output = Self::E>
        + std::ops::Neg<Output = Self::E>;
    /// Lanes per vector.
    const L: usize;
    /// `L` values from `p` (unaligned).
    unsafe fn load(p: *const Self::E) -> Self;
    /// `L` values to `p` (unaligned).
    unsafe fn store(p: *mut Self::E, v: Self);
    /// Every lane `e`.
    unsafe fn splat(e: Self::E) -> Self;
    /// `a + b` per lane.
    unsafe fn add(a: Self, b: Self) -> Self;
    /// `a · b` per lane (never fused with an addition).
    unsafe fn mul(a: Self, b: Self) -> Self;
    /// `c + a·b` per lane: `add(c, mul(a, b))`, two roundings, except where a type says it
    /// fuses them (the fused kernels of `filters/fused.rs`: one rounding).
    #[inline(always)]
    unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self {
        // SAFETY: the caller's contract (the type's instruction set).
        unsafe { Self::add(c, Self::mul(a, b)) }
    }
    /// `−v` per lane (the sign bit flipped, as Rust's `-x`).
    unsafe fn neg(v: Self) -> Self;
    /// `a < b ? a : b` per lane.
    unsafe fn min(a: Self, b: Self) -> Self;
    /// `a > b ? a : b` per lane.
    unsafe fn max(a: Self, b: Self) -> Self;
    /// Each lane rounded to f32 and back (f64 lanes: `(v as f32) as f64`, round to nearest
    /// even as `_mm256_cvtpd_ps` under the default rounding mode Rust assumes); f32 lanes
    /// unchanged.
    unsafe fn round_f32(v: Self) -> Self;
    /// [`Lanes::round_f32`] of one value.
    fn round1_f32(e: Self::E) -> Self::E;
}

impl Lanes for __m256d {
    type E = f64;
    const L: usize = 4;
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn load(p: *const f64) -> Self {
        // SAFETY: `p..p + 4` readable (the caller's contract).
        unsafe { _mm256_loadu_pd(p) }
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn store(p: *mut f64, v: Self) {
        // SAFETY: `p..p + 4` writable (the caller's contract).
        unsafe { _mm256_storeu_pd(p, v) }
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn splat(e: f64) -> Self {
        _mm256_set1_pd(e)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn add(a: Self, b: Self) -> Self {
        _mm256_add_pd(a, b)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn mul(a: Self, b: Self) -> Self {
        _mm256_mul_pd(a, b)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn neg(v: Self) -> Self {
        _mm256_xor_pd(v, _mm256_set1_pd(-0.0))
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn min(a: Self, b: Self) -> Self {
        _mm256_min_pd(a, b)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn max(a: Self, b: Self) -> Self {
        _mm256_max_pd(a, b)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn round_f32(v: Self) -> Self {
        _mm256_cvtps_pd(_mm256_cvtpd_ps(v))
    }
    #[inline(always)]
    fn round1_f32(e: f64) -> f64 {
        f64::from(e as f32)
    }
}

impl Lanes for __m256 {
    type E = f32;
    const L: usize = 8;
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: `p..p + 8` readable (the caller's contract).
        unsafe { _mm256_loadu_ps(p) }
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn store(p: *mut f32, v: Self) {
        // SAFETY: `p..p + 8` writable (the caller's contract).
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn splat(e: f32) -> Self {
        _mm256_set1_ps(e)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn add(a: Self, b: Self) -> Self {
        _mm256_add_ps(a, b)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn mul(a: Self, b: Self) -> Self {
        _mm256_mul_ps(a, b)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn neg(v: Self) -> Self {
        _mm256_xor_ps(v, _mm256_set1_ps(-0.0))
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn min(a: Self, b: Self) -> Self {
        _mm256_min_ps(a, b)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn max(a: Self, b: Self) -> Self {
        _mm256_max_ps(a, b)
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn round_f32(v: Self) -> Self {
        v
    }
    #[inline(always)]
    fn round1_f32(e: f32) -> f32 {
        e
    }
}

/// Vectors per register block of the passes (4: 16 f64 or 32 f32 columns; per kernel pair,
/// 8 accumulators).
const BLOCK: usize = 4;

/// Where the x passes put a block of outputs: both rows (`lyy`, `lxx`), or the cube's
/// `(−(Lyy + Lxx))·scale` with its running extrema (the combine fused into the pass, so `Lyy`
/// and `Lxx` never leave the registers).
pub(super) enum XOut<'a, E> {
    /// `lyy`, `lxx`, `w` values each.
    Pair(&'a mut [E], &'a mut [E]),
    /// `out` (`w` values), the scale, and 8 lanes of minima and maxima.
    Scaled(&'a mut [E], E, (&'a mut [E], &'a mut [E])),
}

/// One output column `x` of a y pass, both kernels, one value at a time (the y kernels' last
/// columns): the centre tap, then the pairs `off[j − 1]` (rows y − j, y + j) from the outermost
/// in, separate multiplications and additions.
#[inline(always)]
fn y_column<E>(
    img: &[E],
    (centre, off): (usize, &[(usize, usize)]),
    x: usize,
    (g2, g0): (&[E], &[E]),
) -> (E, E)
where
    E: Copy + std::ops::Add<Output = E> + std::ops::Mul<Output = E>,
{
    let c = img[centre + x];
    let (mut s2, mut s0) = (c * g2[0], c * g0[0]);
    for j in (1..g0.len()).rev() {
        let (u, d) = off[j - 1];
        let t = img[u + x] + img[d + x];
        s2 = s2 + t * g2[j];
        s0 = s0 + t * g0[j];
    }
    (s2, s0)
}

/// The pass kernels, compiled for one instruction set (`$feat`) and written once for every
/// [`Lanes`] type: [`y_rows_avx2`], [`x_rows_avx2`] for AVX2, and the same for the fused
/// multiply-add lanes of `filters/fused.rs` (`y_rows_fma8`, `y_rows_fma16`…). Each is a
/// function of its own with its target features, so that the closures and helpers in it are
/// compiled for them too and every `Lanes` method inlines.
macro_rules! pass_kernels {
    ($feat:literal, $y:ident, $xb:ident, $x:ident) => {
        /// The y passes of [`Avx2::y_rows`] and [`Avx2::y_rows_f32`] (`offs[(y − y0)·r + j − 1]`
        /// = the offsets of rows y − j and y + j), each output rounded with
        /// [`Lanes::round_f32`] when `ROUND`. Column strips of `16·L` keep the 2r + 1 input
        /// rows of a strip in L1 while y advances.
        ///
        /// # Safety
        /// The instruction set (and `V`'s); `img[off + x]` readable for every offset in `offs`
        /// (and `y·stride` for y in `y0..y1`) and x < w; `a2`, `a0` hold `(y1 − y0)·(w + 2r)`
        /// values.
        #[target_feature(enable = $feat)]
        #[allow(clippy::too_many_arguments, dead_code)]
        pub(super) unsafe fn $y<V: Lanes, const ROUND: bool>(
            img: &[V::E],
            stride: usize,
            w: usize,
            (y0, y1): (usize, usize),
            (g2, g0): (&[V::E], &[V::E]),
            offs: &[(usize, usize)],
            a2: &mut [V::E],
            a0: &mut [V::E],
        ) {
            let (l, cols) = (V::L, BLOCK * V::L);
            let r = g0.len() - 1;
            let pw = w + 2 * r;
            let ip = img.as_ptr();
            let round1 = |v: V::E| if ROUND { V::round1_f32(v) } else { v };
            // SAFETY: AVX2 (the caller's contract); every read is at columns x..x + L·n ≤ w of rows
            // inside the image, every write below (y1 − y0)·pw (the caller's contract).
            unsafe {
                let round = |v: V| if ROUND { V::round_f32(v) } else { v };
                let (c2, c0) = (V::splat(g2[0]), V::splat(g0[0]));
                let mut xs = 0;
                while xs < w {
                    let xe = (xs + 16 * l).min(w);
                    for y in y0..y1 {
                        let off = &offs[(y - y0) * r..(y - y0 + 1) * r];
                        let centre = y * stride;
                        let orow = (y - y0) * pw + r;
                        let (o2, o0) = (
                            a2[orow..orow + w].as_mut_ptr(),
                            a0[orow..orow + w].as_mut_ptr(),
                        );
                        let mut x = xs;
                        // BLOCK vectors per kernel
                        while x + cols <= xe {
                            let p = ip.add(centre + x);
                            let v: [V; BLOCK] = std::array::from_fn(|q| V::load(p.add(l * q)));
                            let mut s2: [V; BLOCK] = std::array::from_fn(|q| V::mul(v[q], c2));
                            let mut s0: [V; BLOCK] = std::array::from_fn(|q| V::mul(v[q], c0));
                            for j in (1..=r).rev() {
                                let (u, d) = *off.get_unchecked(j - 1);
                                let (pu, pd) = (ip.add(u + x), ip.add(d + x));
                                let (w2, w0) = (
                                    V::splat(*g2.get_unchecked(j)),
                                    V::splat(*g0.get_unchecked(j)),
                                );
                                for q in 0..BLOCK {
                                    let t = V::add(V::load(pu.add(l * q)), V::load(pd.add(l * q)));
                                    s2[q] = V::mul_add(t, w2, s2[q]);
                                    s0[q] = V::mul_add(t, w0, s0[q]);
                                }
                            }
                            for q in 0..BLOCK {
                                V::store(o2.add(x + l * q), round(s2[q]));
                                V::store(o0.add(x + l * q), round(s0[q]));
                            }
                            x += cols;
                        }
                        // one vector
                        while x + l <= xe {
                            let v = V::load(ip.add(centre + x));
                            let mut s2 = V::mul(v, c2);
                            let mut s0 = V::mul(v, c0);
                            for j in (1..=r).rev() {
                                let (u, d) = *off.get_unchecked(j - 1);
                                let t = V::add(V::load(ip.add(u + x)), V::load(ip.add(d + x)));
                                s2 = V::mul_add(t, V::splat(g2[j]), s2);
                                s0 = V::mul_add(t, V::splat(g0[j]), s0);
                            }
                            V::store(o2.add(x), round(s2));
                            V::store(o0.add(x), round(s0));
                            x += l;
                        }
                        // the last columns, one at a time
                        while x < xe {
                            let (s2, s0) = y_column(img, (centre, off), x, (g2, g0));
                            a2[orow + x] = round1(s2);
                            a0[orow + x] = round1(s0);
                            x += 1;
                        }
                    }
                    xs = xe;
                }
            }
        }

        /// `Lyy` and `Lxx` of the L·N columns from `c2`, `c0` (the columns' centre samples in rows
        /// padded by `r`), each lane in the generic order.
        ///
        /// # Safety
        /// The instruction set; `c2 − r .. c2 + L·N + r` and the same around `c0` readable; `g0`,
        /// `g2` hold `r + 1`.
        #[target_feature(enable = $feat)]
        #[inline]
        unsafe fn $xb<V: Lanes, const N: usize>(
            (c2, c0): (*const V::E, *const V::E),
            (g0, g2): (&[V::E], &[V::E]),
            r: usize,
        ) -> ([V; N], [V; N]) {
            let l = V::L;
            // SAFETY: AVX2 and every read within the ranges the caller guarantees.
            unsafe {
                let (cy, cx) = (V::splat(g0[0]), V::splat(g2[0]));
                let mut ys: [V; N] = std::array::from_fn(|v| V::mul(V::load(c2.add(l * v)), cy));
                let mut xs: [V; N] = std::array::from_fn(|v| V::mul(V::load(c0.add(l * v)), cx));
                for j in (1..=r).rev() {
                    let (wy, wx) = (
                        V::splat(*g0.get_unchecked(j)),
                        V::splat(*g2.get_unchecked(j)),
                    );
                    let (l2, r2) = (c2.sub(j), c2.add(j));
                    for (v, y) in ys.iter_mut().enumerate() {
                        let t = V::add(V::load(l2.add(l * v)), V::load(r2.add(l * v)));
                        *y = V::mul_add(t, wy, *y);
                    }
                    let (l0, r0) = (c0.sub(j), c0.add(j));
                    for (v, x) in xs.iter_mut().enumerate() {
                        let t = V::add(V::load(l0.add(l * v)), V::load(r0.add(l * v)));
                        *x = V::mul_add(t, wx, *x);
                    }
                }
                (ys, xs)
            }
        }

        /// The x passes of [`Avx2::x_row_pair`], [`Avx2::x_row_scaled`] and
        /// [`Avx2::x_row_scaled_f32`] (and of the fused kernels). The extrema fold lane
        /// `x mod lanes` of blocks of `L` columns (lane 0 for the last columns), as the
        /// generic `combine_row` does; the extrema lanes are as many as `XOut::Scaled` holds:
        /// 8, or `L` for vectors wider than 8 lanes.
        ///
        /// # Safety
        /// The instruction set (and `V`'s); `row2`, `row0` hold `w + 2r` values, the outputs
        /// `w`, the extrema lanes a multiple of `L` (or 8 for `L` = 4).
        #[target_feature(enable = $feat)]
        #[allow(dead_code)]
        pub(super) unsafe fn $x<V: Lanes>(
            (row2, row0): (&[V::E], &[V::E]),
            (g0, g2): (&[V::E], &[V::E]),
            w: usize,
            mut out: XOut<'_, V::E>,
        ) {
            let l = V::L;
            let r = g0.len() - 1;
            let (p2, p0) = (row2.as_ptr(), row0.as_ptr());
            // the extrema lanes (8, or L) as 8 / L vectors held in registers across the row (vector
            // k: lanes k·L..(k + 1)·L)
            let lanes = match &out {
                XOut::Scaled(_, _, (lo, _)) => lo.len(),
                XOut::Pair(..) => 8,
            };
            let nv = (lanes / l).max(1);
            let mut ext = match &out {
                // SAFETY: AVX2; lanes k·L..(k + 1)·L within the extrema lanes (caller's contract).
                XOut::Scaled(_, _, (lo, hi)) => unsafe {
                    let at = |e: &[V::E], k: usize| V::load(e.as_ptr().add(l * k.min(nv - 1)));
                    Some(([at(lo, 0), at(lo, 1)], [at(hi, 0), at(hi, 1)]))
                },
                XOut::Pair(..) => None,
            };
            let mut put = |x: usize, ys: &[V], xs: &[V]| match (&mut out, &mut ext) {
                (XOut::Pair(lyy, lxx), _) => {
                    for (v, (y, xx)) in ys.iter().zip(xs).enumerate() {
                        // SAFETY: AVX2; x + L·v + L ≤ w, the length of both rows (caller's contract).
                        unsafe {
                            V::store(lyy.as_mut_ptr().add(x + l * v), *y);
                            V::store(lxx.as_mut_ptr().add(x + l * v), *xx);
                        }
                    }
                }
                (XOut::Scaled(o, scale, _), Some((lov, hiv))) => {
                    for (v, (y, xx)) in ys.iter().zip(xs).enumerate() {
                        // the extrema vector of lanes (x mod lanes) rounded down to a vector
                        let k = (x + l * v) % lanes / l;
                        // SAFETY: AVX2; x + L·v + L ≤ w, the output's length (caller's contract).
                        unsafe {
                            let c = V::mul(V::neg(V::add(*y, *xx)), V::splat(*scale));
                            V::store(o.as_mut_ptr().add(x + l * v), c);
                            lov[k] = V::min(c, lov[k]);
                            hiv[k] = V::max(c, hiv[k]);
                        }
                    }
                }
                (XOut::Scaled(..), None) => {}
            };
            let mut x = 0;
            while x + BLOCK * l <= w {
                let (c2, c0) = (p2.wrapping_add(r + x), p0.wrapping_add(r + x));
                // SAFETY: reads at x + r ± j + 0..BLOCK·L ≤ w + 2r.
                let (ys, xs) = unsafe { $xb::<V, BLOCK>((c2, c0), (g0, g2), r) };
                put(x, &ys, &xs);
                x += BLOCK * l;
            }
            while x + l <= w {
                // SAFETY: reads at x + r ± j + 0..L ≤ w + 2r.
                let (ys, xs) = unsafe { $xb::<V, 1>((p2.add(r + x), p0.add(r + x)), (g0, g2), r) };
                put(x, &ys, &xs);
                x += l;
            }
            if let (XOut::Scaled(_, _, (lo, hi)), Some((lov, hiv))) = (&mut out, &ext) {
                for k in 0..nv {
                    // SAFETY: AVX2; lanes k·L..(k + 1)·L within the extrema lanes (caller's contract).
                    unsafe {
                        V::store(lo.as_mut_ptr().add(l * k), lov[k]);
                        V::store(hi.as_mut_ptr().add(l * k), hiv[k]);
                    }
                }
            }
            while x < w {
                let (mut sy, mut sx) = (row2[r + x] * g0[0], row0[r + x] * g2[0]);
                for j in (1..=r).rev() {
                    sy = sy + (row2[r + x - j] + row2[r + x + j]) * g0[j];
                    sx = sx + (row0[r + x - j] + row0[r + x + j]) * g2[j];
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
    };
}

/// The y pass of the `pass_kernels!` y kernels for wide kernels (`$yt`): strips of one vector
/// of columns, [`TALL`] output rows at a time, so that the 2r + [`TALL`] input rows a strip
/// reads stay in L1 however wide the kernel (the 16-vector strips of `y_rows_*` read 2r + 1
/// rows of 16 vectors per output row: from L2 once 2r + 1 passes a hundred or so). Every output
/// is the same operations in the same order as there, so the values are the same bit for bit
/// (`filters::tests::tall_y_passes_equal_the_strips`).
macro_rules! tall_kernels {
    ($feat:literal, $yt:ident, $blk:ident) => {
        /// [`TALL`] (or `T`) output rows from `y` of the vector of columns from `x` of the tall y
        /// pass (see the macro).
        ///
        /// # Safety
        /// As the y kernels of `pass_kernels!`, for the rows `y .. y + T` and columns
        /// `x .. x + L`.
        #[target_feature(enable = $feat)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $blk<V: Lanes, const ROUND: bool, const T: usize>(
            ip: *const V::E,
            (stride, r, pw): (usize, usize, usize),
            (x, y, y0): (usize, usize, usize),
            (g2, g0): (&[V::E], &[V::E]),
            offs: &[(usize, usize)],
            (o2, o0): (*mut V::E, *mut V::E),
        ) {
            // SAFETY: the caller's contract.
            unsafe {
                let round = |v: V| if ROUND { V::round_f32(v) } else { v };
                let (c2, c0) = (V::splat(g2[0]), V::splat(g0[0]));
                let v: [V; T] = std::array::from_fn(|k| V::load(ip.add((y + k) * stride + x)));
                let mut s2: [V; T] = std::array::from_fn(|k| V::mul(v[k], c2));
                let mut s0: [V; T] = std::array::from_fn(|k| V::mul(v[k], c0));
                // rows whose taps are all inside the frame: consecutive rows, no table
                let interior = y >= r && {
                    let (_, d) = *offs.get_unchecked((y + T - 1 - y0) * r + r - 1);
                    d == (y + T - 1 + r) * stride
                };
                if interior {
                    for j in (1..=r).rev() {
                        let (w2, w0) = (
                            V::splat(*g2.get_unchecked(j)),
                            V::splat(*g0.get_unchecked(j)),
                        );
                        let (pu, pd) = (ip.add((y - j) * stride + x), ip.add((y + j) * stride + x));
                        for k in 0..T {
                            let t =
                                V::add(V::load(pu.add(k * stride)), V::load(pd.add(k * stride)));
                            s2[k] = V::mul_add(t, w2, s2[k]);
                            s0[k] = V::mul_add(t, w0, s0[k]);
                        }
                    }
                } else {
                    for j in (1..=r).rev() {
                        let (w2, w0) = (
                            V::splat(*g2.get_unchecked(j)),
                            V::splat(*g0.get_unchecked(j)),
                        );
                        for k in 0..T {
                            let (u, d) = *offs.get_unchecked((y + k - y0) * r + j - 1);
                            let t = V::add(V::load(ip.add(u + x)), V::load(ip.add(d + x)));
                            s2[k] = V::mul_add(t, w2, s2[k]);
                            s0[k] = V::mul_add(t, w0, s0[k]);
                        }
                    }
                }
                for k in 0..T {
                    let orow = (y + k - y0) * pw + r + x;
                    V::store(o2.add(orow), round(s2[k]));
                    V::store(o0.add(orow), round(s0[k]));
                }
            }
        }

        /// The tall y pass (see the macro): the arguments and contract of the y kernels of
        /// `pass_kernels!`.
        ///
        /// # Safety
        /// As the y kernels of `pass_kernels!`.
        #[target_feature(enable = $feat)]
        #[allow(clippy::too_many_arguments, dead_code)]
        pub(super) unsafe fn $yt<V: Lanes, const ROUND: bool>(
            img: &[V::E],
            stride: usize,
            w: usize,
            (y0, y1): (usize, usize),
            (g2, g0): (&[V::E], &[V::E]),
            offs: &[(usize, usize)],
            a2: &mut [V::E],
            a0: &mut [V::E],
        ) {
            let l = V::L;
            let r = g0.len() - 1;
            let pw = w + 2 * r;
            let ip = img.as_ptr();
            let round1 = |v: V::E| if ROUND { V::round1_f32(v) } else { v };
            let (o2, o0) = (a2.as_mut_ptr(), a0.as_mut_ptr());
            let mut x = 0;
            // SAFETY: the caller's contract: every read is at columns below w of rows inside
            // the image (`offs`), every write below (y1 − y0)·pw.
            unsafe {
                while x + l <= w {
                    let mut y = y0;
                    while y + TALL <= y1 {
                        $blk::<V, ROUND, TALL>(
                            ip,
                            (stride, r, pw),
                            (x, y, y0),
                            (g2, g0),
                            offs,
                            (o2, o0),
                        );
                        y += TALL;
                    }
                    while y < y1 {
                        $blk::<V, ROUND, 1>(
                            ip,
                            (stride, r, pw),
                            (x, y, y0),
                            (g2, g0),
                            offs,
                            (o2, o0),
                        );
                        y += 1;
                    }
                    x += l;
                }
            }
            // the last columns, one at a time (as `pass_kernels!`'s y kernels)
            for y in y0..y1 {
                let off = &offs[(y - y0) * r..(y - y0 + 1) * r];
                let (centre, orow) = (y * stride, (y - y0) * pw + r);
                for x in x..w {
                    let (s2, s0) = y_column(img, (centre, off), x, (g2, g0));
                    a2[orow + x] = round1(s2);
                    a0[orow + x] = round1(s0);
                }
            }
        }
    };
}

/// Output rows per block of the tall y kernels.
const TALL: usize = 4;

tall_kernels!("avx2,fma", y_tall_fma8, y_tall_block_fma8);
tall_kernels!("avx512f,avx2,fma", y_tall_fma16, y_tall_block_fma16);

pass_kernels!("avx2", y_rows_avx2, x_block_avx2, x_rows_avx2);
pass_kernels!("avx2,fma", y_rows_fma8, x_block_fma8, x_rows_fma8);
pass_kernels!(
    "avx512f,avx2,fma",
    y_rows_fma16,
    x_block_fma16,
    x_rows_fma16
);
