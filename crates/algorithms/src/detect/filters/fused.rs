//! The f32 pass kernels: the exact ones ([`Avx2::y_rows_f32`], [`Avx2::x_row_scaled_f32`]: 8 ×
//! f32 per vector, the generic code's sums with `A = f32` lane for lane, separate
//! multiplications and additions, so the f32 planes are bit-identical to the generic f32
//! path's: `filters::tests::avx2_planes_equal_the_generic_ones`), and the fused ones of the
//! certified search ([`Fused`]).
//!
//! **Fused kernels.** The certified search (`blob_log/certified.rs`) needs an f32 cube within
//! its proven bound of the exact one, not the generic order's values: a fused multiply-add
//! `s + t·w` rounds once where the generic sum rounds twice, so every bound derived for the
//! separate operations holds for it. [`Fused`] runs the same kernels (`avx2.rs`'s bodies) with
//! `_mm256_fmadd_ps` on 8 lanes, or `_mm512_fmadd_ps` on 16 lanes where the CPU has AVX-512:
//! about half the instructions per tap, or a quarter. Its values differ from the exact kernels'
//! in the last bits, so a search and the rows it computes again must use the same kernels
//! (they do: both take them from their [`super::LogScratch`]). `ARRAYBRIDGE_DETECT_FUSED`
//! ([`FusedKernels`], carried by [`crate::detect::blob_log::CpuKnobs`]) chooses: `0` none (the
//! exact kernels), `8` the 8-lane ones, unset or anything else the widest the CPU has.

use std::arch::x86_64::{
    __m256, __m512, _mm256_add_ps, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_max_ps, _mm256_min_ps,
    _mm256_mul_ps, _mm256_set1_ps, _mm256_storeu_ps, _mm256_xor_ps, _mm512_add_ps,
    _mm512_castps_si512, _mm512_castsi512_ps, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_max_ps,
    _mm512_min_ps, _mm512_mul_ps, _mm512_set1_epi32, _mm512_set1_ps, _mm512_storeu_ps,
    _mm512_xor_si512,
};

use super::FusedKernels;

use super::avx2::{
    Avx2, Lanes, XOut, x_rows_avx2, x_rows_fma8, x_rows_fma16, y_offsets, y_rows_avx2, y_rows_fma8,
    y_rows_fma16, y_tall_fma8, y_tall_fma16,
};

/// The kernel radius from which the y pass runs the tall kernels (`avx2.rs`'s
/// `tall_kernels!`: one vector of columns, four output rows at a time, the rows a strip reads
/// kept in L1) instead of 16-vector strips (whose 2r + 1 rows of 1 KiB come from L2 once r
/// passes a few dozen). Both give the same values bit for bit. Measured (docs/perf.md, issue
/// 34): 13 % less CPU time at σ up to 30 (r 120), 8 % at σ up to 10, no change at σ up to 3.
const TALL_FROM_RADIUS: usize = 16;

/// Checks of an x pass: `out` holds `w` values, the rows `w + 2r`, 8 extrema lanes.
///
/// # Panics
/// When a slice is too short (a caller bug).
fn x_checks(
    (row2, row0): (&[f32], &[f32]),
    (g0, g2): (&[f32], &[f32]),
    w: usize,
    (lo, hi): (&[f32], &[f32]),
) {
    let r = g0.len().saturating_sub(1);
    assert!(!g0.is_empty() && g2.len() == g0.len(), "kernel lengths");
    assert!(
        row2.len() >= w + 2 * r && row0.len() >= w + 2 * r,
        "row lengths"
    );
    assert!(lo.len() == 8 && hi.len() == 8, "extrema lanes");
}

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
        let offs = y_offsets(img, (stride, h, w), (y0, y1), (g2, g0), (a2, a0));
        // SAFETY: AVX2 is available (`self`); every read and write is in bounds (checked by
        // `y_offsets`).
        unsafe { y_rows_avx2::<__m256, false>(img, stride, w, (y0, y1), (g2, g0), &offs, a2, a0) }
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
        x_checks((row2, row0), (g0, g2), w, (lo, hi));
        // SAFETY: AVX2 is available (`self`); reads stay below w + 2r ≤ row lengths, writes
        // below w = the output's length and within the 8 extrema lanes (checked above).
        unsafe {
            x_rows_avx2::<__m256>(
                (row2, row0),
                (g0, g2),
                w,
                XOut::Scaled(out, scale, (lo, hi)),
            )
        }
    }
}

/// Fused multiply-add f32 kernels (see the module documentation): a proof that the CPU has
/// them, made only by [`Fused::detect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fused {
    /// AVX2 and FMA: 8 lanes.
    Fma8,
    /// AVX-512F (with AVX2 and FMA): 16 lanes.
    Fma16,
}

impl Fused {
    /// The widest fused kernels the CPU has, as `limit` allows (`ARRAYBRIDGE_DETECT_FUSED`);
    /// `None` without AVX2 and FMA or where `limit` asks for the exact kernels.
    pub(crate) fn detect(limit: FusedKernels) -> Option<Self> {
        let fma = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma");
        let wide = fma && std::arch::is_x86_feature_detected!("avx512f");
        match limit {
            FusedKernels::Exact => None,
            FusedKernels::Eight => fma.then_some(Fused::Fma8),
            _ if wide => Some(Fused::Fma16),
            _ => fma.then_some(Fused::Fma8),
        }
    }

    /// Every fused kernel set the CPU has (for tests that compare them all).
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Self> {
        let fma = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma");
        let wide = fma && std::arch::is_x86_feature_detected!("avx512f");
        [(fma, Fused::Fma8), (wide, Fused::Fma16)]
            .into_iter()
            .filter_map(|(ok, f)| ok.then_some(f))
            .collect()
    }

    /// [`Avx2::y_rows_f32`] with fused multiply-adds.
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
        let offs = y_offsets(img, (stride, h, w), (y0, y1), (g2, g0), (a2, a0));
        let (ys, g) = ((y0, y1), (g2, g0));
        // wide kernels: the tall y pass (the same values)
        let tall = g0.len() > TALL_FROM_RADIUS;
        // SAFETY: the variant proves its instruction set (`detect`); every read and write is
        // in bounds (checked by `y_offsets`).
        unsafe {
            match (self, tall) {
                (Fused::Fma8, false) => {
                    y_rows_fma8::<Fma8, false>(img, stride, w, ys, g, &offs, a2, a0)
                }
                (Fused::Fma16, false) => {
                    y_rows_fma16::<Fma16, false>(img, stride, w, ys, g, &offs, a2, a0)
                }
                (Fused::Fma8, true) => {
                    y_tall_fma8::<Fma8, false>(img, stride, w, ys, g, &offs, a2, a0)
                }
                (Fused::Fma16, true) => {
                    y_tall_fma16::<Fma16, false>(img, stride, w, ys, g, &offs, a2, a0)
                }
            }
        }
    }

    /// [`Avx2::x_row_scaled_f32`] with fused multiply-adds (16 lanes fold their extrema into
    /// the 8: lane `k` and `k + 8`).
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
        x_checks((row2, row0), (g0, g2), w, (lo, hi));
        match self {
            // SAFETY: AVX2 and FMA (`detect`); reads below w + 2r ≤ the rows' lengths, writes
            // below w and within the 8 extrema lanes (checked above).
            Fused::Fma8 => unsafe {
                x_rows_fma8::<Fma8>(
                    (row2, row0),
                    (g0, g2),
                    w,
                    XOut::Scaled(out, scale, (lo, hi)),
                )
            },
            Fused::Fma16 => {
                let mut l16 = [0.0f32; 16];
                let mut h16 = [0.0f32; 16];
                for k in 0..16 {
                    (l16[k], h16[k]) = (lo[k % 8], hi[k % 8]);
                }
                // SAFETY: AVX-512F, AVX2 and FMA (`detect`); reads below w + 2r ≤ the rows'
                // lengths, writes below w and within the 16 extrema lanes here.
                unsafe {
                    x_rows_fma16::<Fma16>(
                        (row2, row0),
                        (g0, g2),
                        w,
                        XOut::Scaled(out, scale, (&mut l16, &mut h16)),
                    )
                };
                for k in 0..8 {
                    let (a, b) = (l16[k], l16[k + 8]);
                    lo[k] = if b < a { b } else { a };
                    let (a, b) = (h16[k], h16[k + 8]);
                    hi[k] = if b > a { b } else { a };
                }
            }
        }
    }
}

/// A [`Lanes`] type of `$l` f32 lanes in `$v` (instruction set `$feat`), whose `mul_add` is one
/// fused multiply-add (`$fma`); `$neg` flips the sign bit of `$x`.
macro_rules! fused_lanes {
    ($name:ident, $v:ty, $l:literal, $feat:literal,
     $load:ident, $store:ident, $set1:ident, $add:ident, $mul:ident, $fma:ident,
     $min:ident, $max:ident, |$x:ident| $neg:expr) => {
        #[derive(Clone, Copy)]
        pub(super) struct $name($v);

        impl Lanes for $name {
            type E = f32;
            const L: usize = $l;
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn load(p: *const f32) -> Self {
                // SAFETY: `p..p + L` readable (the caller's contract).
                $name(unsafe { $load(p) })
            }
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn store(p: *mut f32, v: Self) {
                // SAFETY: `p..p + L` writable (the caller's contract).
                unsafe { $store(p, v.0) }
            }
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn splat(e: f32) -> Self {
                $name($set1(e))
            }
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn add(a: Self, b: Self) -> Self {
                $name($add(a.0, b.0))
            }
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn mul(a: Self, b: Self) -> Self {
                $name($mul(a.0, b.0))
            }
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self {
                $name($fma(a.0, b.0, c.0))
            }
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn neg(v: Self) -> Self {
                let $x = v.0;
                $name($neg)
            }
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn min(a: Self, b: Self) -> Self {
                $name($min(a.0, b.0))
            }
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn max(a: Self, b: Self) -> Self {
                $name($max(a.0, b.0))
            }
            #[inline(always)]
            unsafe fn round_f32(v: Self) -> Self {
                v
            }
            #[inline(always)]
            fn round1_f32(e: f32) -> f32 {
                e
            }
        }
    };
}

// 8 lanes (AVX2 and FMA)
fused_lanes!(
    Fma8,
    __m256,
    8,
    "avx2,fma",
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_set1_ps,
    _mm256_add_ps,
    _mm256_mul_ps,
    _mm256_fmadd_ps,
    _mm256_min_ps,
    _mm256_max_ps,
    |v| _mm256_xor_ps(v, _mm256_set1_ps(-0.0))
);

// 16 lanes (AVX-512F; it has no f32 xor, the integer one flips the same bit)
fused_lanes!(
    Fma16,
    __m512,
    16,
    "avx512f",
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_set1_ps,
    _mm512_add_ps,
    _mm512_mul_ps,
    _mm512_fmadd_ps,
    _mm512_min_ps,
    _mm512_max_ps,
    |v| _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(v),
        _mm512_set1_epi32(i32::MIN)
    ))
);
