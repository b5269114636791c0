//! Exact maxima of the f64 scale space, found in an f32 one.
//!
//! The f64 scale space (SciPy's sums, bit for bit) costs twice what an f32 one costs on the
//! CPU: half the lanes per vector, twice the bytes per row. Yet almost every decision the
//! peak search makes — is this voxel above the threshold, is it at least as large as its 26
//! neighbours — has a wide margin. This module takes those decisions in an f32 cube whose
//! every value is within a proven bound `b` of the f64 value, and settles each of the few
//! that the bound leaves open with the exact f64 value of the voxels involved, computed on
//! their own in SciPy's order ([`ExactVoxels`]). The maxima, their responses, the threshold and
//! the cube's extrema are then those of the f64 path bit for bit
//! (`certified_search_equals_the_exact_one`); where the bound leaves too much open (a flat
//! cube, no threshold), [`log_peaks_certified`] says so and the caller runs the f64 path.
//!
//! **The bound.** For one output of a 1-D pass `s = c·w₀ + Σⱼ (lⱼ + rⱼ)·wⱼ` over inputs of
//! magnitude ≤ m, summed in a precision with unit roundoff u with the taps rounded to it,
//! |ŝ − s| ≤ γ_{r+3}·S·m with `S = Σ|w|` over all taps (the products, the pair sums, r
//! additions, the rounded tap). Chaining the y pass, the x pass, the sum `Lyy + Lxx` and the
//! product by σ² (rounded to f32 too) from an input rounded to f32 gives, with `M = max|x|`,
//!
//! `|ṽ − v_real| ≤ σ²·S₀·S₂·M·(4r + 24)·u₃₂` (to first order), and the same with `u₆₄` for the
//! f64 cube, so `|ṽ − v| ≤ σ²·S₀·S₂·M·(4r + 24)·(u₃₂ + u₆₄)`. `b` is 1.5 times the largest
//! of these over the scales (the slack covers the second-order terms and the rounding of the
//! comparisons below, each ≤ u₃₂·2σ²S₀S₂M, a twelfth of the bound), plus
//! `(σ²·(S₀ + S₂ + 2)·(2r + 3) + 1)·2⁻¹⁴⁹` for f32 underflow (an absolute error of at most
//! 2⁻¹⁵⁰ per operation with a subnormal result). It holds only while the f32 cube stays
//! finite, which [`fits_f32`] checks first. Every test uses `e = 2b`:
//!
//! * a voxel can be a maximum only if `ṽ + e ≥` the largest ṽ of its neighbourhood (a true
//!   maximum passes: `ṽₚ + b ≥ vₚ ≥ v_q ≥ ṽ_q − b`); a neighbour with `ṽ_q + e ≤ ṽₚ` is
//!   certainly not larger, the others are compared exactly;
//! * it can be above the threshold only if `ṽ > thr_lo − e`, with `thr_lo ≤ thr` built from
//!   the running maximum less `e`;
//! * the exact maximum of the cube is the largest exact value of the voxels with
//!   `ṽ ≥ max ṽ − e` (the arg max is one of them), found again in the runs of rows whose
//!   extrema come that close; the minimum likewise.
//!
//! The f32 cube may be summed with fused multiply-adds (`filters/fused.rs`, 8 or 16 lanes,
//! the default where the CPU has FMA): `s + t·w` then rounds once instead of twice, so every
//! step of the bound above still holds (`the_bound_holds_with_room` checks each kernel set).
//! The search and the rows it computes again use the same kernels, so they agree bit for bit.
//! A device's float32 passes ([`DevicePlan`]) fuse their multiply-adds or not
//! (`ARRAYBRIDGE_DETECT_PASS_FMA`) under the same bound.
//!
//! **Float32 frames** ([`Reference::F32`]). scikit-image keeps float32 as the working type of a
//! float32 image: SciPy sums every pass in f64 and rounds its output to f32, and the sum
//! `Lyy + Lxx` and the product by σ² (an f32 value) are f32 operations. That cube is within
//! `σ²·S₀·S₂·M·(8u₃₂ + (4r + 12)·u₆₄)` of the real one (four roundings of a pass output to
//! f32, chained through the next pass, the sum and the product: `2u₃₂` per derivative term
//! before the sum, `u₃₂` each for the sum and the product on twice a term's size), so the f32
//! cube of f32 sums is within `σ²·S₀·S₂·M·((4r + 32)·u₃₂ + (4r + 24)·u₆₄)` of it (taken with the
//! same 1.5 slack, and the underflow term twice). The same search then settles its decisions
//! with exact voxels that round where SciPy rounds, and the threshold is computed in f32 as
//! scikit-image computes it; the tests of `fl32(rel)·(hi − e) − e` below `fl32(fl32(rel)·hi)`
//! hold because `u₃₂·hi` is far below `e`.

use std::collections::HashMap;

use rayon::prelude::*;
use std::hash::BuildHasherDefault;

use super::CpuKnobs;
use super::params::BlobLogParams;
use super::scale_space::{
    Banded, Cand, Span, exact_planes, log_peaks_banded_in_f32, pad_frame, threshold_from,
};
use crate::detect::filters::{
    Avx2, Boundary, Fused, LogKernels, LogScratch, log_rows_scaled, map_index,
};
use crate::detect::real::give_buf;
use crate::grid::CellHasher;

/// Unit roundoff of f32 and f64.
const U32: f64 = f32::EPSILON as f64 / 2.0;
const U64: f64 = f64::EPSILON / 2.0;
/// Twice the largest error of an f32 operation with a subnormal result (2⁻¹⁴⁹).
const TINY32: f64 = 1.401_298_464_324_817e-45;

/// Whether the certified search runs (`knobs.certified`: `ARRAYBRIDGE_DETECT_CERTIFIED`,
/// default 1) on this CPU: it needs the AVX2 f32 kernels to be faster than the f64 path.
pub(super) fn enabled(knobs: &CpuKnobs) -> bool {
    knobs.certified && Avx2::detect().is_some()
}

/// The scale space whose maxima the certified search reproduces exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reference {
    /// SciPy's float64 cube: an f64 frame (u8, u16… converted to f64 as scikit-image does).
    F64,
    /// SciPy's float32 cube of a float32 frame: every pass summed in f64 and its output rounded
    /// to f32; the sum of the two terms and the product by σ² in f32.
    F32,
}

/// `|ṽ − v| ≤ bound` for every voxel of the f32 cube of `planes` against the `reference`
/// one, for inputs of magnitude at most `m` (see the module documentation), where an f32
/// operation with a subnormal result errs by at most `tiny / 2` ([`TINY32`] with gradual
/// underflow, [`ftz_tiny`] where a device may flush to zero).
fn error_bound(planes: &[(LogKernels, f64)], m: f64, reference: Reference) -> f64 {
    bound_parts(planes, reference, |_| TINY32)
        .iter()
        .map(|&(c, u)| c * m + u)
        .fold(0.0, f64::max)
}

/// Per plane of [`error_bound`] `(c, u)`, the bound being `c·m + u`: `c` from the roundings of
/// every operation, `u` from f32 underflow with `tiny(plane)` per operation.
fn bound_parts(
    planes: &[(LogKernels, f64)],
    reference: Reference,
    tiny: impl Fn(&LogKernels) -> f64,
) -> Vec<(f64, f64)> {
    planes
        .iter()
        .map(|(k, sc)| {
            let r = k.radius() as f64;
            let (s0, s2) = (sum_abs(&k.g0), sum_abs(&k.g2));
            let size = sc.abs() * s0 * s2;
            // f32 underflow: an absolute error ≤ tiny/2 per operation whose result is
            // subnormal (2r + 2 per 1-D pass), carried through the x pass and the scale
            let underflow = (sc.abs() * (s0 + s2 + 2.0) * (2.0 * r + 3.0) + 1.0) * tiny(k);
            match reference {
                Reference::F64 => (1.5 * size * (4.0 * r + 24.0) * (U32 + U64), underflow),
                Reference::F32 => {
                    let rounding = (4.0 * r + 32.0) * U32 + (4.0 * r + 24.0) * U64;
                    (1.5 * size * rounding, 2.0 * underflow)
                }
            }
        })
        .collect()
}

/// The `tiny` of [`bound_parts`] on a device that may flush f32 subnormals to zero (OpenCL
/// does not require them; CUDA's `-ftz`): a result below 2⁻¹²⁶ may become 0 (an error below
/// 2⁻¹²⁶), and a subnormal operand may be read as 0 (an error below 2⁻¹²⁶ times the other
/// factor, a tap of `k` at most): twice 2⁻¹²⁶ times the largest tap magnitude, at least 1.
fn ftz_tiny(k: &LogKernels) -> f64 {
    let tap = k.g0.iter().chain(&k.g2).fold(1.0f64, |a, t| a.max(t.abs()));
    2.0 * f64::from(f32::MIN_POSITIVE) * tap
}

/// The largest magnitude of `image`, `None` when a value is NaN or infinite (lane-wise, so
/// that it vectorises: `x·0` is NaN exactly for those). PACO's input check scans its frames
/// with it too.
pub(crate) fn max_abs_finite(image: &[f64]) -> Option<f64> {
    const L: usize = 8;
    let (mut m, mut bad) = ([0.0f64; L], [0.0f64; L]);
    let mut it = image.chunks_exact(L);
    for c in &mut it {
        for l in 0..L {
            let a = c[l].abs();
            m[l] = if a > m[l] { a } else { m[l] };
            bad[l] += c[l] * 0.0;
        }
    }
    for &v in it.remainder() {
        let a = v.abs();
        m[0] = if a > m[0] { a } else { m[0] };
        bad[0] += v * 0.0;
    }
    if bad.iter().any(|b| b.is_nan()) {
        return None;
    }
    Some(m.iter().fold(0.0, |a, &b| if b > a { b } else { a }))
}

/// `Σ|w|` over all `2r + 1` taps of a symmetric kernel given by its half.
fn sum_abs(half: &[f64]) -> f64 {
    half.iter()
        .enumerate()
        .map(|(j, w)| if j == 0 { w.abs() } else { 2.0 * w.abs() })
        .sum()
}

/// Whether every value the f32 cube of `planes` computes from inputs of magnitude at most `m`
/// stays finite and normal enough for [`error_bound`]: finite f32 taps, an f32 σ² that is
/// a normal number, and every partial sum (`M·S₀`, `M·S₂`, `2·S₀·S₂·M`, `2σ²·S₀·S₂·M`) far
/// below `f32::MAX`. Tiny σ (a second-derivative tap of −1/σ²) or huge pixels fail it.
fn fits_f32(planes: &[(LogKernels, f64)], m: f64) -> bool {
    let limit = f64::from(f32::MAX) / 16.0;
    planes.iter().all(|(k, sc)| {
        let taps_ok = k.g0.iter().chain(&k.g2).all(|&t| (t as f32).is_finite());
        let sc32 = *sc as f32;
        let (s0, s2) = (sum_abs(&k.g0), sum_abs(&k.g2));
        taps_ok
            && sc32.is_finite()
            && sc32.abs() >= f32::MIN_POSITIVE
            && [
                m * s0,
                m * s2,
                2.0 * s0 * s2 * m,
                2.0 * sc.abs() * s0 * s2 * m,
            ]
            .iter()
            .all(|&v| v.is_finite() && v < limit)
    })
}

/// Voxels near each extremum of the cube past which the certified search gives up (a flat
/// cube: every voxel is near both).
const NEAR_CAP: usize = 1 << 14;

/// Candidates settled per task when there are many (a dense frame).
const SETTLE_CHUNK: usize = 1024;

/// A position (s, y, x) in the cube.
type Voxel = (usize, usize, usize);

/// Positions (s, y, x) in the f32 cube.
type Voxels = Vec<Voxel>;

/// The voxels of the f32 cube with `ṽ ≤ lo + e` and those with `ṽ ≥ hi − e`, found by
/// computing again the runs of rows (`spans`) whose extrema come that close (the same values
/// bit for bit: `filters::tests::bands_of_rows_equal_the_rows_of_the_plane`). `None` past
/// [`NEAR_CAP`].
fn near_extrema(
    (padded, stride): (&[f32], usize),
    (h, w): (usize, usize),
    (planes, fused): (&[(LogKernels, f32)], Option<Fused>),
    spans: &[Span<f32>],
    (lo, hi, e): (f64, f64, f64),
) -> Option<(Voxels, Voxels)> {
    let rmax = planes.iter().map(|(k, _)| k.radius()).max().unwrap_or(0);
    // the search's kernels: the same values bit for bit
    let mut scratch = LogScratch::<f32, f32>::new(h, w, rmax).with_fused(fused);
    let (mut near_lo, mut near_hi) = (Vec::new(), Vec::new());
    let mut rows = Vec::new();
    for sp in spans {
        let (l, u) = (f64::from(sp.lo), f64::from(sp.hi));
        if l > lo + e && u < hi - e {
            continue;
        }
        let (k, sc) = &planes[sp.s];
        rows.clear();
        rows.resize((sp.rows.1 - sp.rows.0) * w, 0.0f32);
        log_rows_scaled(
            padded,
            stride,
            h,
            w,
            k,
            &mut scratch,
            sp.rows,
            &mut rows,
            *sc,
        );
        for (n, &v) in rows.iter().enumerate() {
            let v = f64::from(v);
            let at = (sp.s, sp.rows.0 + n / w, n % w);
            if v <= lo + e {
                near_lo.push(at);
            }
            if v >= hi - e {
                near_hi.push(at);
            }
        }
        if near_lo.len() > NEAR_CAP || near_hi.len() > NEAR_CAP {
            return None;
        }
    }
    Some((near_lo, near_hi))
}

/// Multiply-adds of one exact voxel of a plane ([`ExactVoxels`]: two y passes at 2r + 1
/// columns).
fn voxel_cost((k, _): &(LogKernels, f64)) -> f64 {
    let r = k.radius() as f64;
    2.0 * (2.0 * r + 1.0) * (r + 1.0)
}

/// Multiply-adds of the whole f64 cube of `pixels` pixels (four passes per plane).
fn f64_cube_cost(planes: &[(LogKernels, f64)], pixels: usize) -> f64 {
    planes
        .iter()
        .map(|(k, _)| 4.0 * pixels as f64 * (k.radius() as f64 + 1.0))
        .sum()
}

/// The exact value of single voxels of the scale space, in SciPy's order (the values of
/// [`super::log_cube`] bit for bit: of its f64 cube, or with [`Reference::F32`] of its f32 cube
/// of an f32 frame, held in f64), remembered once computed.
struct ExactVoxels<'a> {
    img: &'a [f64],
    h: usize,
    w: usize,
    planes: &'a [(LogKernels, f64)],
    /// Round each pass's output, the sum and the product to f32 ([`Reference::F32`]).
    round32: bool,
    simd: Option<Avx2>,
    known: HashMap<(usize, usize, usize), f64, BuildHasherDefault<CellHasher>>,
    cols: Vec<usize>,
    col2: Vec<f64>,
    col0: Vec<f64>,
}

impl<'a> ExactVoxels<'a> {
    fn new(
        img: &'a [f64],
        (h, w): (usize, usize),
        planes: &'a [(LogKernels, f64)],
        reference: Reference,
    ) -> Self {
        ExactVoxels {
            img,
            h,
            w,
            planes,
            round32: reference == Reference::F32,
            simd: Avx2::detect(),
            known: HashMap::default(),
            cols: Vec::new(),
            col2: Vec::new(),
            col0: Vec::new(),
        }
    }

    /// `cube[s][y][x]`.
    fn get(&mut self, s: usize, y: usize, x: usize) -> f64 {
        if let Some(&v) = self.known.get(&(s, y, x)) {
            return v;
        }
        let v = self.compute(s, y, x);
        self.known.insert((s, y, x), v);
        v
    }

    fn compute(&mut self, s: usize, y: usize, x: usize) -> f64 {
        match self.simd {
            // the same sums, with 256-bit vectors across the columns
            Some(t) => t.run(|| self.compute_in(s, y, x)),
            None => self.compute_in(s, y, x),
        }
    }

    /// Both y passes at the 2r + 1 columns that the x passes read around x (reflected as the
    /// padded rows reflect them), each column summed in the order of the y pass (the centre,
    /// then the pairs from the outermost in: the loop over the columns is inside the loop over
    /// the taps), then both x passes and the combine of [`super::log_cube`].
    #[inline(always)]
    fn compute_in(&mut self, s: usize, y: usize, x: usize) -> f64 {
        let (h, w, img) = (self.h, self.w, self.img);
        let (k, scale) = &self.planes[s];
        let (g0, g2) = (&k.g0[..], &k.g2[..]);
        let r = k.radius();
        let n = 2 * r + 1;
        let reflect = |i: isize, n: usize| map_index(i, n, Boundary::Reflect).unwrap_or(0);
        self.cols.clear();
        self.cols
            .extend((0..n).map(|t| reflect(x as isize + t as isize - r as isize, w)));
        let (cols, c2, c0) = (&self.cols, &mut self.col2, &mut self.col0);
        c2.clear();
        c0.clear();
        for &xi in cols.iter() {
            let c = img[y * w + xi];
            c2.push(c * g2[0]);
            c0.push(c * g0[0]);
        }
        // the columns x − r ..= x + r are in the frame: contiguous reads
        let inside = x >= r && x + r < w;
        for j in (1..=r).rev() {
            let (u, d) = (
                reflect(y as isize - j as isize, h) * w,
                reflect((y + j) as isize, h) * w,
            );
            let (w2, w0) = (g2[j], g0[j]);
            if inside {
                let (ru, rd) = (
                    &img[u + x - r..u + x + r + 1],
                    &img[d + x - r..d + x + r + 1],
                );
                for (((a2, a0), &vu), &vd) in c2.iter_mut().zip(c0.iter_mut()).zip(ru).zip(rd) {
                    let t = vu + vd;
                    *a2 += t * w2;
                    *a0 += t * w0;
                }
            } else {
                for ((a2, a0), &xi) in c2.iter_mut().zip(c0.iter_mut()).zip(cols) {
                    let t = img[u + xi] + img[d + xi];
                    *a2 += t * w2;
                    *a0 += t * w0;
                }
            }
        }
        if self.round32 {
            // SciPy writes each pass's output in the f32 working type
            for v in c2.iter_mut().chain(c0.iter_mut()) {
                *v = f64::from(*v as f32);
            }
        }
        let (mut sy, mut sx) = (c2[r] * g0[0], c0[r] * g2[0]);
        for j in (1..=r).rev() {
            sy += (c2[r - j] + c2[r + j]) * g0[j];
            sx += (c0[r - j] + c0[r + j]) * g2[j];
        }
        if self.round32 {
            // the terms, their sum and the product by σ² in f32 (σ² is an f32 value)
            let (a, b) = (sy as f32, sx as f32);
            return f64::from((-(a + b)) * (*scale as f32));
        }
        (-(sy + sx)) * *scale
    }
}

/// The 3×3×3 maxima above the threshold (raster order of (y, x, scale)) and the cube's
/// minimum and maximum of `blob_log` on a frame — exactly those of the banded search of the
/// `reference` cube (the f64 one; with [`Reference::F32`] the f32 one of an f32 frame, whose
/// pixels and σ list (`sigmas`) are f32 values held in f64) — from the f32 search and exact values where its bound leaves a decision open. `None`
/// where this cannot be done cheaply (then the caller runs the f64 path): no threshold, a
/// negative or > 1 `threshold_rel`, a frame with NaN or infinite pixels, of zeros, or of
/// magnitudes beyond 10^±20, kernels or scales that f32 cannot hold (σ so small that a tap
/// overflows, σ² subnormal, partial sums near `f32::MAX`), a bound
/// too loose for the frame (too many voxels near the extrema or too many candidates), exact
/// voxels that would cost more than a quarter of the f64 cube (kernels about as wide as the
/// frame), or an extremum of exactly zero (whose sign the f64 path's order of reduction
/// decides).
pub(super) fn log_peaks_certified(
    image: &[f64],
    (h, w): (usize, usize),
    sigmas: &[f64],
    p: &BlobLogParams,
    (reference, knobs): (Reference, &CpuKnobs),
) -> Option<(Vec<Cand<f64>>, f64, f64)> {
    let fused = Fused::detect(knobs.fused);
    log_peaks_certified_with(
        image,
        (h, w),
        sigmas,
        p,
        (reference, fused, knobs.band_rows),
    )
}

/// [`log_peaks_certified`] with the f32 cube's kernels chosen (`fused` ones or, `None`, the
/// exact ones) and the search's rows per band (`None`: the default).
fn log_peaks_certified_with(
    image: &[f64],
    (h, w): (usize, usize),
    sigmas: &[f64],
    p: &BlobLogParams,
    (reference, fused, band): (Reference, Option<Fused>, Option<usize>),
) -> Option<(Vec<Cand<f64>>, f64, f64)> {
    let m = certifiable(image, (h, w), sigmas, p)?;
    let planes = reference_planes(sigmas, reference);
    if !fits_f32(&planes, m) || !voxels_affordable(&planes, (h, w)) {
        return None;
    }
    let e = 2.0 * error_bound(&planes, m, reference);
    let (found, near) = search_f32(image, (h, w), (&planes, fused, band), p, e);
    let (near_lo, near_hi) = near?;
    let found = Found {
        cands: &found.cands,
        near_lo: &near_lo,
        near_hi: &near_hi,
        e,
    };
    settle_found(image, (h, w), (&planes, reference), p, found)
}

/// What an f32 search relaxed by `e` found in a frame (the CPU's [`search_f32`] or a device's
/// `cert_peaks`): every voxel that can be a maximum of the exact cube above its threshold, with
/// the neighbours its f32 value leaves open ([`Cand::near`]), and every voxel that can hold the
/// exact cube's minimum (`near_lo`: `ṽ ≤ min ṽ + e`) or maximum (`near_hi`: `ṽ ≥ max ṽ − e`).
pub(crate) struct Found<'a> {
    /// The candidates, in any order.
    pub(crate) cands: &'a [Cand<f32>],
    /// Voxels that can hold the exact minimum.
    pub(crate) near_lo: &'a [Voxel],
    /// Voxels that can hold the exact maximum.
    pub(crate) near_hi: &'a [Voxel],
    /// The margin of every test: twice the bound of the f32 cube's error.
    pub(crate) e: f64,
}

/// The second half of [`log_peaks_certified`], shared by the CPU and the devices: from what
/// the f32 search `found`, the exact extrema (the exact values of the voxels near the f32
/// ones), the threshold in the reference's working type, and the candidates' exact values
/// settled against it and against their open neighbours. `None` where the exact voxels would
/// cost more than a quarter of the f64 cube, or an extremum is zero or not finite.
fn settle_found(
    image: &[f64],
    (h, w): (usize, usize),
    (planes, reference): (&[(LogKernels, f64)], Reference),
    p: &BlobLogParams,
    found: Found<'_>,
) -> Option<(Vec<Cand<f64>>, f64, f64)> {
    let Found {
        cands,
        near_lo,
        near_hi,
        e,
    } = found;
    // exact voxels cost O(r²) each: within a quarter of what the f64 cube would cost, or
    // the f64 cube; and their memory (a hash map entry each) within a few bytes per pixel
    let budget = 0.25 * f64_cube_cost(planes, h * w);
    let max_voxels = (h * w / 4).max(64);
    if near_lo.len() > NEAR_CAP || near_hi.len() > NEAR_CAP {
        return None;
    }
    let planned: f64 = near_lo
        .iter()
        .chain(near_hi)
        .map(|&(s, _, _)| voxel_cost(&planes[s]))
        .sum();
    if planned > budget || near_lo.len() + near_hi.len() > max_voxels {
        return None;
    }
    let (lo, hi) = exact_extrema(image, (h, w), planes, (near_lo, near_hi), reference);
    if !lo.is_finite() || !hi.is_finite() || lo == 0.0 || hi == 0.0 {
        return None;
    }
    // the threshold in the reference's working type, as scikit-image computes it
    let (thr, lo, hi) = match reference {
        Reference::F64 => threshold_from((lo, hi), p),
        Reference::F32 => {
            let (t, l, u) = threshold_from((lo as f32, hi as f32), p);
            (f64::from(t), f64::from(l), f64::from(u))
        }
    };
    let open = |c: &&Cand<f32>| f64::from(c.v) + e > thr;
    let planned: f64 = cands
        .iter()
        .filter(open)
        .map(|c| f64::from(1 + c.near.count_ones()) * voxel_cost(&planes[c.s]))
        .sum();
    let count: usize = cands
        .iter()
        .filter(open)
        .map(|c| 1 + c.near.count_ones() as usize)
        .sum();
    if planned > budget || count > max_voxels {
        return None;
    }
    // the candidates' exact values, in parallel chunks (each with its own memo; dense frames
    // have hundreds of thousands), in order
    let open: Vec<&Cand<f32>> = cands.iter().filter(open).collect();
    let settle =
        |chunk: &[&Cand<f32>]| settle_chunk(image, (h, w), (planes, reference), thr, chunk);
    let out: Vec<Cand<f64>> = if open.len() < 2 * SETTLE_CHUNK {
        settle(&open)
    } else {
        open.par_chunks(SETTLE_CHUNK)
            .flat_map_iter(settle)
            .collect()
    };
    Some((out, lo, hi))
}

/// The certified search of a device (issue 29), planned once per run of frames: the planes of
/// the reference cube and the margin per unit of pixel magnitude that the device's f32 cube
/// is searched with ([`DevicePlan::margin`]). The device computes an f32 cube with f32 sums (no
/// contraction needed; FMA keeps the bound, see the module documentation; flushed subnormals
/// too: [`ftz_tiny`]), the frame's largest magnitude `m₃₂` of its f32 pixels and the margin
/// `e = e₁·m₃₂ + e₀`, then the relaxed maxima and the voxels near the extrema; the host
/// settles them with [`settle_device`], which checks every premise again on the exact frame.
#[derive(Debug, Clone)]
pub(crate) struct DevicePlan {
    planes: Vec<(LogKernels, f64)>,
    reference: Reference,
    /// `(e₁, e₀)` as f32 values rounded up.
    margin: (f32, f32),
}

impl DevicePlan {
    /// The plan for frames whose working type is f32 (`f32_frames`: the reference is SciPy's
    /// f32 cube) or f64, with the σ list `sigmas` (as computed in the working type, held in
    /// f64); `None` where no frame could be certified: no threshold, a `threshold_rel` outside
    /// [0, 1], no scales, kernels whose exact voxels are too costly for any frame of `h × w`.
    pub(crate) fn new(
        sigmas: &[f64],
        p: &BlobLogParams,
        f32_frames: bool,
        (h, w): (usize, usize),
    ) -> Option<DevicePlan> {
        if !params_certifiable(sigmas, p, (h, w)) {
            return None;
        }
        let reference = if f32_frames {
            Reference::F32
        } else {
            Reference::F64
        };
        let planes = reference_planes(sigmas, reference);
        if !voxels_affordable(&planes, (h, w)) {
            return None;
        }
        // e ≥ 2·max_s(c_s·m + u_s), m ≤ m₃₂/(1 − u₃₂) + 2⁻¹²⁶ (a flushed pixel), and the
        // device's two f32 operations lose at most 2u₃₂: 2⁻¹⁶ of slack covers all of it (the
        // product e₁·m₃₂ is far above the subnormals: the device searches only frames with
        // m₃₂ ≥ 10⁻²⁰, and e₁ ≳ 10⁻⁶)
        let parts = bound_parts(&planes, reference, ftz_tiny);
        let c = parts.iter().map(|p| p.0).fold(0.0, f64::max);
        let u = parts.iter().map(|p| p.1).fold(0.0, f64::max);
        let slack = 1.0 + 2f64.powi(-16);
        let e1 = 2.0 * c * slack;
        let e0 = (2.0 * u + e1 * f64::from(f32::MIN_POSITIVE)) * slack;
        let margin = (f32_up(e1)?, f32_up(e0)?);
        Some(DevicePlan {
            planes,
            reference,
            margin,
        })
    }

    /// `(e₁, e₀)`: the device's margin of a frame is `e₁·m₃₂ + e₀` in f32, `m₃₂` the largest
    /// magnitude of its f32 pixels.
    pub(crate) fn margin(&self) -> (f32, f32) {
        self.margin
    }
}

/// The smallest f32 at least `x` (a finite, non-negative `x`); `None` past `f32::MAX`.
fn f32_up(x: f64) -> Option<f32> {
    let f = x as f32;
    let up = if f64::from(f) < x { f.next_up() } else { f };
    up.is_finite().then_some(up)
}

/// The kernels and scales of the `reference` cube of `sigmas` (computed in the working type,
/// held in f64).
fn reference_planes(sigmas: &[f64], reference: Reference) -> Vec<(LogKernels, f64)> {
    match reference {
        Reference::F64 => exact_planes(sigmas),
        Reference::F32 => {
            let s32: Vec<f32> = sigmas.iter().map(|&s| s as f32).collect();
            exact_planes(&s32)
                .into_iter()
                .map(|(k, sc)| (k, f64::from(sc)))
                .collect()
        }
    }
}

/// Whether exact voxels can pay on a frame of `h × w`: they cost O(r²) each, and the settling
/// may spend a quarter of what the f64 cube would cost ([`settle_found`]); kernels about as
/// wide as the frame leave room for too few.
fn voxels_affordable(planes: &[(LogKernels, f64)], (h, w): (usize, usize)) -> bool {
    let budget = 0.25 * f64_cube_cost(planes, h * w);
    16.0 * planes.iter().map(voxel_cost).fold(0.0, f64::max) <= budget
}

/// The exact candidates and extrema of a frame from a device's certified search (`found`,
/// its `e` the device's margin for the frame): those of [`log_peaks_certified`] bit for bit,
/// or `None` where the frame cannot be certified — its pixels (the exact frame in f64, or the
/// f32 frame held in f64 for [`Reference::F32`]) not finite or beyond 10^±20, the f32 cube
/// possibly not finite ([`fits_f32`]), the device's margin below twice the bound of the exact
/// frame's magnitude, or the settling too costly ([`settle_found`]). The caller then computes
/// the frame on the CPU.
pub(crate) fn settle_device(
    plan: &DevicePlan,
    image: &[f64],
    (h, w): (usize, usize),
    p: &BlobLogParams,
    found: Found<'_>,
) -> Option<(Vec<Cand<f64>>, f64, f64)> {
    let planes = &plan.planes;
    let m = frame_magnitude(image, (h, w))?;
    if !fits_f32(planes, m) {
        return None;
    }
    let need = bound_parts(planes, plan.reference, ftz_tiny)
        .iter()
        .map(|&(c, u)| 2.0 * (c * m + u))
        .fold(0.0, f64::max);
    if !(found.e >= need && found.e.is_finite()) {
        return None;
    }
    settle_found(image, (h, w), (planes, plan.reference), p, found)
}

/// The first checks of [`log_peaks_certified`], on the frame and the parameters alone
/// ([`params_certifiable`], [`frame_magnitude`]): the frame's largest magnitude, or `None`.
#[inline]
fn certifiable(
    image: &[f64],
    (h, w): (usize, usize),
    sigmas: &[f64],
    p: &BlobLogParams,
) -> Option<f64> {
    if !params_certifiable(sigmas, p, (h, w)) {
        return None;
    }
    frame_magnitude(image, (h, w))
}

/// Whether the parameters leave anything to certify on frames of `h × w`: a non-empty frame,
/// scales, a threshold, a `threshold_rel` within [0, 1].
fn params_certifiable(sigmas: &[f64], p: &BlobLogParams, (h, w): (usize, usize)) -> bool {
    h > 0
        && w > 0
        && !sigmas.is_empty()
        && (p.threshold.is_some() || p.threshold_rel.is_some())
        && p.threshold_rel.is_none_or(|r| (0.0..=1.0).contains(&r))
}

/// The largest magnitude of a frame of `h × w` pixels, where the bound holds: finite pixels
/// (the public `blob_log_typed` does not validate them) of largest magnitude within 10^±20;
/// `None` otherwise.
fn frame_magnitude(image: &[f64], (h, w): (usize, usize)) -> Option<f64> {
    if image.len() != h * w {
        return None;
    }
    let m = max_abs_finite(image)?;
    (1e-20..=1e20).contains(&m).then_some(m)
}

/// The f32 search relaxed by `e` ([`log_peaks_banded_in_f32`]) and the voxels near the f32
/// cube's extrema ([`near_extrema`]; `None` where the search overflowed, the f32 cube or `e`
/// is not finite, or past [`NEAR_CAP`]), from one padded f32 copy of the frame.
fn search_f32(
    image: &[f64],
    (h, w): (usize, usize),
    (planes, fused, band): (&[(LogKernels, f64)], Option<Fused>, Option<usize>),
    p: &BlobLogParams,
    e: f64,
) -> (Banded<f32>, Option<(Voxels, Voxels)>) {
    let planes32: Vec<(LogKernels, f32)> = planes
        .iter()
        .map(|(k, sc)| (k.clone(), *sc as f32))
        .collect();
    // the frame in f32, padded once for the search and for the extrema's rows
    let (img32, stride) = pad_frame::<f64, f32>(image, h, w);
    let found = log_peaks_banded_in_f32((&img32, stride), (h, w), &planes32, p, (e, fused, band));
    let (lo_a, hi_a) = (f64::from(found.lo), f64::from(found.hi));
    // a backstop of `fits_f32`: a non-finite f32 cube settles nothing
    let near = if found.overflow || !(lo_a.is_finite() && hi_a.is_finite() && e.is_finite()) {
        None
    } else {
        near_extrema(
            (&img32, stride),
            (h, w),
            (&planes32, fused),
            &found.spans,
            (lo_a, hi_a, e),
        )
    };
    give_buf(img32);
    (found, near)
}

/// The cube's exact minimum and maximum: the exact values of every voxel that can hold them
/// (`near_lo`, `near_hi`).
fn exact_extrema(
    image: &[f64],
    (h, w): (usize, usize),
    planes: &[(LogKernels, f64)],
    (near_lo, near_hi): (&[Voxel], &[Voxel]),
    reference: Reference,
) -> (f64, f64) {
    let mut exact = ExactVoxels::new(image, (h, w), planes, reference);
    // the extrema: the exact values of every voxel that can hold them
    let mut hi = f64::NEG_INFINITY;
    for &(s, y, x) in near_hi {
        hi = hi.max(exact.get(s, y, x));
    }
    let mut lo = f64::INFINITY;
    for &(s, y, x) in near_lo {
        lo = lo.min(exact.get(s, y, x));
    }
    (lo, hi)
}

/// The candidates of `chunk` (in order) that are maxima of the exact cube above `thr`, with
/// their exact values: each candidate's exact value against the threshold, then against each
/// neighbour its f32 value left open ([`Cand::near`]); one memo of exact voxels per chunk.
fn settle_chunk(
    image: &[f64],
    (h, w): (usize, usize),
    (planes, reference): (&[(LogKernels, f64)], Reference),
    thr: f64,
    chunk: &[&Cand<f32>],
) -> Vec<Cand<f64>> {
    let ns = planes.len();
    let mut exact = ExactVoxels::new(image, (h, w), planes, reference);
    let mut out = Vec::with_capacity(chunk.len());
    'cand: for c in chunk {
        let v = exact.get(c.s, c.y, c.x);
        if v <= thr {
            continue;
        }
        let mut near = c.near;
        while near != 0 {
            let bit = near.trailing_zeros() as usize;
            near &= near - 1;
            let step = |i: usize, d: usize, n: usize| (i + d).saturating_sub(1).min(n - 1);
            let (sn, yn, xn) = (
                step(c.s, bit / 9, ns),
                step(c.y, bit / 3 % 3, h),
                step(c.x, bit % 3, w),
            );
            if exact.get(sn, yn, xn) > v {
                continue 'cand;
            }
        }
        out.push(Cand {
            y: c.y,
            x: c.x,
            s: c.s,
            v,
            near: 0,
        });
    }
    out
}

#[cfg(test)]
mod tests;
