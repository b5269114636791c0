//! The exact peaks of the n-D scale space, found in an f32 one (the n-D form of
//! `blob_log/certified.rs`).
//!
//! The cube of `nd/laplace.rs` sums every pass in f64 (SciPy's sums, bit for bit). The same
//! passes summed in f32 ([`laplace::log_plane_nd`] with `A = f32`) cost half as much (twice the
//! lanes per vector, half the bytes per line), and every value of that f32 cube lies within a
//! proven bound `b` of the exact one. The peak search takes its decisions there with `e = 2b`
//! of room, and settles each decision the bound leaves open with the exact values of the voxels
//! involved, computed on their own in SciPy's order ([`ExactNd`]):
//!
//! * the cube's exact maximum (and minimum, where the threshold is taken from it) is the
//!   largest exact value of the voxels with `ṽ ≥ max ṽ − e` (the arg max is one of them);
//! * a voxel can be a peak only if `ṽ > thr − e` and no neighbour has `ṽ_q > ṽ + e`
//!   ([`peaks::select_peaks`] with a relaxed limit); a true peak always passes
//!   (`ṽₚ + b ≥ vₚ ≥ v_q ≥ ṽ_q − b`);
//! * a candidate is a peak when its exact value is above the threshold and no neighbour whose
//!   `ṽ_q + e > ṽₚ` has a larger exact value (the others are certainly not larger).
//!
//! The peaks, their values (hence their order), the threshold and the candidate count are
//! those of the exact path bit for bit
//! (`nd/certified/tests.rs::certified_search_equals_the_exact_one`).
//! Where the bound leaves too much open (a flat cube, no threshold, kernels as wide as the
//! image) [`certified_peaks`] says so and the caller computes the exact cube.
//!
//! **The bound.** One output of a 1-D pass `s = c·w₀ + Σⱼ (lⱼ + rⱼ)·wⱼ` of inputs of magnitude
//! ≤ m, summed with unit roundoff u and taps rounded to it, is within `γ_{r+3}·S·m` of the real
//! sum (`S = Σ|w|` over all taps). The term `L_a` of the Laplacian chains one pass per axis
//! (`g2` on axis `a`, `g0` on the others), so from an input rounded to f32 it is within
//! `P_a·M·(1 + R)·u` (`P_a` the product of the passes' `S`, `R = Σ_b (r_b + 3)`, `M = max|x|`);
//! the `n − 1` additions of the terms and the product by the scale (rounded to f32) add
//! `(n + 1)·u·ΣP·M`. So `|ṽ − v_real| ≤ |σ²|·M·ΣP·(R + n + 4)·u₃₂`, the same with `u₆₄` for the
//! f64 cube, and `b` is 1.5 times the sum of both over the scales' largest (the slack covers
//! second-order terms and the rounding of the comparisons), plus an underflow term (an absolute
//! error of at most 2⁻¹⁵⁰ for each operation with a subnormal result). For a float32 image the
//! reference is scikit-image's float32 cube (each pass summed in f64 and stored in f32, the sum
//! of the terms and the product in f32): `2n` more roundings to f32 of values of size
//! `ΣP·M`, so its bound adds `2n·u₃₂` and doubles the underflow term. In 2-D with one σ this is
//! the bound of the 2-D search (`4r + 24` and `4r + 32`). It holds while the f32 cube stays
//! finite, which [`fits_f32`] checks first.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rayon::prelude::*;

use super::laplace::{self, Halves, Level, Simd, Work};
use super::peaks::{self, Cand};
use crate::detect::filters::{Boundary, LogKernels, map_index};
use crate::detect::real::Real;
use crate::grid::CellHasher;

/// Unit roundoff of f32 and f64.
const U32: f64 = f32::EPSILON as f64 / 2.0;
const U64: f64 = f64::EPSILON / 2.0;
/// Twice the largest error of an f32 operation with a subnormal result (2⁻¹⁴⁹).
const TINY32: f64 = 1.401_298_464_324_817e-45;
/// Voxels near an extremum of the cube past which the search gives up (a flat cube).
const NEAR_CAP: usize = 1 << 14;
/// Candidates settled per task.
const SETTLE_CHUNK: usize = 64;

/// One plane of the scale space: the kernels of every axis and the scale `mean(σ)²` (in the
/// working type).
type PlaneKernels<T> = (Vec<LogKernels>, T);

/// `Σ|w|` over all `2r + 1` taps of a symmetric kernel given by its half.
fn sum_abs(half: &[f64]) -> f64 {
    half.iter()
        .enumerate()
        .map(|(j, w)| if j == 0 { w.abs() } else { 2.0 * w.abs() })
        .sum()
}

/// `(ΣP, Π_b max(S₀, S₂, 1), R)` of a plane: the sum over the terms of the product of their
/// passes' tap sums, a bound of every partial product, and `Σ_b (r_b + 3)`.
fn sizes(ks: &[LogKernels]) -> (f64, f64, f64) {
    let s0: Vec<f64> = ks.iter().map(|k| sum_abs(&k.g0)).collect();
    let s2: Vec<f64> = ks.iter().map(|k| sum_abs(&k.g2)).collect();
    let sum_p: f64 = (0..ks.len())
        .map(|a| {
            (0..ks.len())
                .map(|b| if a == b { s2[b] } else { s0[b] })
                .product::<f64>()
        })
        .sum();
    let partial: f64 = s0
        .iter()
        .zip(&s2)
        .map(|(a, b)| a.max(*b).max(1.0))
        .product();
    let r: f64 = ks.iter().map(|k| k.radius() as f64 + 3.0).sum();
    (sum_p, partial, r)
}

/// `|ṽ − v| ≤ bound` for every voxel of the f32 cube of `planes` against the reference cube
/// (f64, or with `f32_reference` scikit-image's f32 one), for inputs of magnitude at most `m`
/// (see the module documentation).
fn error_bound<T: Real>(planes: &[PlaneKernels<T>], m: f64, f32_reference: bool) -> f64 {
    planes
        .iter()
        .map(|(ks, sc)| {
            let n = ks.len() as f64;
            let (sum_p, partial, r) = sizes(ks);
            let sc = sc.to_f64().abs();
            let size = sc * m * sum_p;
            let underflow = ((sc.max(1.0)) * partial * n * (2.0 * r + 3.0) + 1.0) * TINY32;
            let base = r + n + 4.0;
            if f32_reference {
                1.5 * size * ((base + 2.0 * n) * U32 + base * U64) + 2.0 * underflow
            } else {
                1.5 * size * base * (U32 + U64) + underflow
            }
        })
        .fold(0.0, f64::max)
}

/// Whether every value the f32 cube of `planes` computes from inputs of magnitude at most `m`
/// stays finite and normal enough for [`error_bound`]: finite f32 taps, a scale that is a
/// normal f32, and every partial sum far below `f32::MAX`.
fn fits_f32<T: Real>(planes: &[PlaneKernels<T>], m: f64) -> bool {
    let limit = f64::from(f32::MAX) / 16.0;
    planes.iter().all(|(ks, sc)| {
        let taps_ok = ks
            .iter()
            .flat_map(|k| k.g0.iter().chain(&k.g2))
            .all(|&t| (t as f32).is_finite());
        let sc64 = sc.to_f64();
        let sc32 = sc64 as f32;
        let (_, partial, _) = sizes(ks);
        let big = 2.0 * m * partial * ks.len() as f64 * sc64.abs().max(1.0);
        taps_ok
            && sc32.is_finite()
            && sc32.abs() >= f32::MIN_POSITIVE
            && big.is_finite()
            && big < limit
    })
}

/// Multiply-adds of the whole f64 cube of `nvox` voxels: `n − a + 1` passes for each term
/// `a < n − 1` and one for the last, per plane.
fn cube_cost<T>(planes: &[PlaneKernels<T>], nvox: usize) -> f64 {
    planes
        .iter()
        .map(|(ks, _)| {
            let n = ks.len();
            let passes = 1 + (0..n.saturating_sub(1)).map(|a| n - a + 1).sum::<usize>();
            let r = ks.iter().map(LogKernels::radius).max().unwrap_or(0);
            nvox as f64 * passes as f64 * (r as f64 + 1.0)
        })
        .sum()
}

/// Multiply-adds of one exact voxel of a plane ([`ExactNd`]): two first passes at every
/// position the later passes read, then about three passes per axis on what is left.
fn voxel_cost(ks: &[LogKernels]) -> f64 {
    let m: Vec<f64> = ks.iter().map(|k| 2.0 * k.radius() as f64 + 1.0).collect();
    let r: Vec<f64> = ks.iter().map(|k| k.radius() as f64 + 1.0).collect();
    let first = 2.0 * m[1..].iter().product::<f64>() * r[0];
    let rest: f64 = (1..ks.len())
        .map(|b| 3.0 * m[b + 1..].iter().product::<f64>() * r[b])
        .sum();
    first + rest
}

/// The exact values of single voxels of the scale space, in SciPy's order (the values of
/// [`laplace::log_cube_nd`] bit for bit), remembered once computed.
struct ExactNd<'a, T> {
    img: &'a [f64],
    dims: &'a [usize],
    strides: Vec<usize>,
    nvox: usize,
    planes: &'a [PlaneKernels<T>],
    known: HashMap<(usize, usize), T, BuildHasherDefault<CellHasher>>,
    /// Voxels computed per plane since the last [`ExactNd::take_cost`].
    computed: Vec<usize>,
}

impl<'a, T: Real> ExactNd<'a, T> {
    fn new(img: &'a [f64], dims: &'a [usize], planes: &'a [PlaneKernels<T>]) -> Self {
        let mut strides = vec![1usize; dims.len()];
        for a in (0..dims.len().saturating_sub(1)).rev() {
            strides[a] = strides[a + 1] * dims[a + 1];
        }
        ExactNd {
            img,
            dims,
            strides,
            nvox: dims.iter().product(),
            planes,
            known: HashMap::default(),
            computed: vec![0; planes.len()],
        }
    }

    /// `cube[s · N + idx]`.
    fn get(&mut self, s: usize, idx: usize) -> T {
        if let Some(&v) = self.known.get(&(s, idx)) {
            return v;
        }
        let v = self.compute(s, idx);
        self.computed[s] += 1;
        self.known.insert((s, idx), v);
        v
    }

    /// The multiply-adds of the voxels computed since the last call (`costs`: per voxel of
    /// each plane, [`voxel_cost`]).
    fn take_cost(&mut self, costs: &[f64]) -> f64 {
        let c = self
            .computed
            .iter()
            .zip(costs)
            .map(|(&n, c)| n as f64 * c)
            .sum();
        self.computed.iter_mut().for_each(|n| *n = 0);
        c
    }

    /// The flat cube index `i` (`s · N + idx`).
    fn at(&mut self, i: usize) -> T {
        self.get(i / self.nvox, i % self.nvox)
    }

    /// The voxel as [`laplace::log_plane_nd`] computes it: every pass's output at the positions
    /// the later passes read (reflected), summed in f64 in SciPy's order (the centre tap, then
    /// the mirrored pairs from the outermost in) and rounded to `T`; the terms added in `T` in
    /// axis order; then `−L · scale`.
    fn compute(&self, s: usize, idx: usize) -> T {
        let (ks, scale) = &self.planes[s];
        let n = self.dims.len();
        let mut p = vec![0usize; n];
        let mut rest = idx;
        for a in (0..n).rev() {
            p[a] = rest % self.dims[a];
            rest /= self.dims[a];
        }
        // positions read along each axis: offset t − r_b, reflected
        let pos: Vec<Vec<usize>> = (0..n)
            .map(|b| {
                let r = ks[b].radius() as isize;
                (-r..=r)
                    .map(|t| reflect(p[b] as isize + t, self.dims[b]))
                    .collect()
            })
            .collect();
        // the flat offsets (axis 0 at 0) of every position of axes 1 .. n−1, C order
        let mut bases = vec![0usize];
        for (line, &st) in pos.iter().zip(&self.strides).skip(1) {
            bases = bases
                .iter()
                .flat_map(|&o| line.iter().map(move |&q| o + q * st))
                .collect();
        }
        let first = |h: &[f64]| self.first_pass(&bases, p[0], h);
        let mut d = first(&ks[0].g2);
        for k in &ks[1..] {
            d = next_pass::<T>(&d, k.radius(), &k.g0);
        }
        let mut total = T::from_f64(d[0]);
        if n > 1 {
            let mut q = first(&ks[0].g0);
            for a in 1..n {
                let mut d = next_pass::<T>(&q, ks[a].radius(), &ks[a].g2);
                for k in &ks[a + 1..] {
                    d = next_pass::<T>(&d, k.radius(), &k.g0);
                }
                total = total + T::from_f64(d[0]);
                if a + 1 < n {
                    q = next_pass::<T>(&q, ks[a].radius(), &ks[a].g0);
                }
            }
        }
        -total * *scale
    }

    /// The pass along axis 0 at `p0` of every line starting at `bases`, rounded to `T`.
    fn first_pass(&self, bases: &[usize], p0: usize, h: &[f64]) -> Vec<f64> {
        let (img, len, st) = (self.img, self.dims[0], self.strides[0]);
        let mut acc: Vec<f64> = bases.iter().map(|&o| img[o + p0 * st] * h[0]).collect();
        for j in (1..h.len()).rev() {
            let u = reflect(p0 as isize - j as isize, len) * st;
            let d = reflect((p0 + j) as isize, len) * st;
            let w = h[j];
            for (a, &o) in acc.iter_mut().zip(bases) {
                *a += (img[o + u] + img[o + d]) * w;
            }
        }
        for a in &mut acc {
            *a = T::from_f64(*a).to_f64();
        }
        acc
    }
}

/// The pass along the slowest axis of `src` (its `2r + 1` positions, the output's position in
/// the middle) for every element of the faster axes, rounded to `T`.
fn next_pass<T: Real>(src: &[f64], r: usize, h: &[f64]) -> Vec<f64> {
    let inner = src.len() / (2 * r + 1);
    let line = |t: usize| &src[t * inner..(t + 1) * inner];
    let mut acc: Vec<f64> = line(r).iter().map(|&v| v * h[0]).collect();
    for j in (1..=r).rev() {
        for ((a, &u), &d) in acc.iter_mut().zip(line(r - j)).zip(line(r + j)) {
            *a += (u + d) * h[j];
        }
    }
    for a in &mut acc {
        *a = T::from_f64(*a).to_f64();
    }
    acc
}

/// SciPy `reflect` index of `j` on a line of `n`.
fn reflect(j: isize, n: usize) -> usize {
    map_index(j, n, Boundary::Reflect).unwrap_or(0)
}

/// The smallest f32 at least `x`, and the largest at most `x`.
fn up32(x: f64) -> f32 {
    let f = x as f32;
    if f64::from(f) < x { f.next_up() } else { f }
}
fn down32(x: f64) -> f32 {
    let f = x as f32;
    if f64::from(f) > x { f.next_down() } else { f }
}

/// Values per chunk of the f32 cube's scans.
const CHUNK: usize = 1 << 14;

/// The minimum and maximum of every [`CHUNK`] of `cube`.
fn chunk_extrema(cube: &[f32]) -> Vec<(f32, f32)> {
    const L: usize = 16;
    cube.par_chunks(CHUNK)
        .map(|c| {
            // lane by lane, so that it vectorises
            let (mut lo, mut hi) = ([c[0]; L], [c[0]; L]);
            let mut it = c.chunks_exact(L);
            for b in &mut it {
                for l in 0..L {
                    lo[l] = if b[l] < lo[l] { b[l] } else { lo[l] };
                    hi[l] = if b[l] > hi[l] { b[l] } else { hi[l] };
                }
            }
            for &v in it.remainder() {
                lo[0] = if v < lo[0] { v } else { lo[0] };
                hi[0] = if v > hi[0] { v } else { hi[0] };
            }
            let lo = lo.iter().fold(lo[0], |a, &v| if v < a { v } else { a });
            let hi = hi.iter().fold(hi[0], |a, &v| if v > a { v } else { a });
            (lo, hi)
        })
        .collect()
}

/// The positions of the f32 cube with `ṽ ≥ at` (`above`) or `ṽ ≤ at`, visiting only the
/// chunks whose extrema (`ext`) reach `at`; `None` past [`NEAR_CAP`].
fn near(cube: &[f32], ext: &[(f32, f32)], at: f64, above: bool) -> Option<Vec<usize>> {
    // the same tests in f32: `v ≥ at` ⇔ `v ≥ up32(at)`, `v ≤ at` ⇔ `v ≤ down32(at)`
    let (up, down) = (up32(at), down32(at));
    let mut out = Vec::new();
    for (c, &(lo, hi)) in ext.iter().enumerate() {
        if (above && hi < up) || (!above && lo > down) {
            continue;
        }
        let vs = &cube[c * CHUNK..((c + 1) * CHUNK).min(cube.len())];
        for (k, &v) in vs.iter().enumerate() {
            if (above && v >= up) || (!above && v <= down) {
                out.push(c * CHUNK + k);
            }
        }
        if out.len() > NEAR_CAP {
            return None;
        }
    }
    Some(out)
}

/// The peaks (scikit-image's order, exact values) and the threshold of `blob_log_nd`'s search
/// in the cube of `img` (f64 values of the working type `T`, C order, shape `dims`) for the σ
/// rows `sigmas` and scales `scales` — those of the exact cube bit for bit — found in an f32
/// cube with exact values where its bound leaves a decision open. `None` where this cannot be
/// done cheaply (the caller computes the exact cube): a CPU without AVX2, more than 8 axes, a
/// border that leaves no voxel, pixels beyond 10^±20 or all zero, kernels or scales f32
/// cannot hold, exact voxels that would cost more than a quarter of the exact cube, too many
/// voxels near an extremum or candidates, or an extremum of exactly zero.
pub(super) fn certified_peaks<T: Real>(
    img: &[f64],
    dims: &[usize],
    (sigmas, scales): (&[Vec<T>], &[T]),
    thresholds: (Option<f64>, Option<f64>),
    border: &[usize],
) -> Option<(Vec<Cand<T>>, T)> {
    let n = dims.len();
    if Simd::detect().level() == Level::Plain || n == 0 || n > 8 || sigmas.is_empty() {
        return None;
    }
    if !peaks::searchable(dims, border) {
        return None;
    }
    let m = img.iter().fold(0f64, |a, v| a.max(v.abs()));
    if !(1e-20..=1e20).contains(&m) {
        return None;
    }
    let planes: Vec<PlaneKernels<T>> = sigmas
        .iter()
        .zip(scales)
        .map(|(row, &sc)| {
            let ks = row
                .iter()
                .map(|s| LogKernels::new(s.to_f64(), T::IS_F32))
                .collect();
            (ks, sc)
        })
        .collect();
    if !fits_f32(&planes, m) {
        return None;
    }
    let nvox: usize = dims.iter().product();
    let budget = 0.25 * cube_cost(&planes, nvox);
    let costs: Vec<f64> = planes.iter().map(|(ks, _)| voxel_cost(ks)).collect();
    let worst = costs.iter().fold(0f64, |a, &c| a.max(c));
    if 16.0 * worst > budget {
        return None;
    }
    let e = 2.0 * error_bound(&planes, m, T::IS_F32);
    let cube = f32_cube(img, dims, &planes);
    let ext = chunk_extrema(&cube);
    let lo32 = ext.iter().fold(f64::INFINITY, |a, e| a.min(f64::from(e.0)));
    let hi32 = ext
        .iter()
        .fold(f64::NEG_INFINITY, |a, e| a.max(f64::from(e.1)));
    if !(lo32.is_finite() && hi32.is_finite() && e.is_finite()) {
        return None;
    }
    // the exact extrema: the maximum always, the minimum where the threshold is taken from it
    let near_hi = near(&cube, &ext, hi32 - e, true)?;
    let near_lo = if thresholds.0.is_none() {
        near(&cube, &ext, lo32 + e, false)?
    } else if hi32 - lo32 > 2.0 * e {
        Vec::new()
    } else {
        // perhaps a constant cube: the exact path tells
        return None;
    };
    let planned: f64 = near_hi
        .iter()
        .chain(&near_lo)
        .map(|&i| costs[i / nvox])
        .sum();
    if planned > budget {
        return None;
    }
    let mut exact = ExactNd::new(img, dims, &planes);
    let fold = |ix: &[usize], exact: &mut ExactNd<'_, T>, pick: fn(T, T) -> bool| {
        let mut best: Option<T> = None;
        for &i in ix {
            let v = exact.at(i);
            if best.is_none_or(|b| pick(v, b)) {
                best = Some(v);
            }
        }
        best
    };
    let hi = fold(&near_hi, &mut exact, |v, b| v > b)?;
    let lo = if thresholds.0.is_none() {
        fold(&near_lo, &mut exact, |v, b| v < b)?
    } else {
        // unused: the threshold is given (and the cube is not constant)
        T::ZERO
    };
    if hi == T::ZERO || (thresholds.0.is_none() && lo == T::ZERO) {
        return None;
    }
    let thr = super::threshold_of(thresholds, (lo, hi));
    if thresholds.0.is_none() && lo == hi {
        // a constant cube has no peak
        return Some((Vec::new(), thr));
    }
    // the candidates: every voxel that may be a peak
    let thr_lo = down32(thr.to_f64() - e);
    let cands = peaks::select_peaks(&cube, dims, sigmas.len(), thr_lo, border, |v| {
        up32(f64::from(v) + e)
    });
    let planned: f64 = cands.iter().map(|c| costs[c.s]).sum();
    if planned > budget {
        return None;
    }
    let ns = sigmas.len();
    // what the exact voxels cost so far (the candidates' and their open neighbours'), in
    // multiply-adds: past the budget the search gives up (the exact cube is cheaper)
    let spent = AtomicU64::new(0);
    let over = AtomicBool::new(false);
    let settle = |chunk: &[Cand<f32>]| {
        let mut exact = ExactNd::new(img, dims, &planes);
        let mut out = Vec::new();
        for c in chunk {
            if over.load(Ordering::Relaxed) {
                break;
            }
            let v = exact.get(c.s, c.idx);
            if v <= thr {
                continue;
            }
            let mut peak = true;
            let open = f64::from(c.v) - e;
            peaks::for_window(dims, ns, (c.s, c.idx), |t, q| {
                if (t, q) != (c.s, c.idx)
                    && f64::from(cube[t * nvox + q]) > open
                    && exact.get(t, q) > v
                {
                    peak = false;
                }
                peak
            });
            if peak {
                out.push(Cand {
                    idx: c.idx,
                    s: c.s,
                    v,
                });
            }
            let cost = exact.take_cost(&costs) as u64;
            if spent.fetch_add(cost, Ordering::Relaxed) + cost > budget as u64 {
                over.store(true, Ordering::Relaxed);
            }
        }
        out
    };
    let mut out: Vec<Cand<T>> = cands
        .par_chunks(SETTLE_CHUNK)
        .flat_map_iter(settle)
        .collect();
    if over.load(Ordering::Relaxed) {
        return None;
    }
    peaks::sort_peaks(&mut out);
    Some((out, thr))
}

/// The f32 cube of `img` (rounded to f32) for `planes`, every pass summed in f32.
fn f32_cube<T: Real>(img: &[f64], dims: &[usize], planes: &[PlaneKernels<T>]) -> Vec<f32> {
    let nvox: usize = dims.iter().product();
    let img32: Vec<f32> = img.iter().map(|&v| v as f32).collect();
    let mut cube = vec![0f32; nvox * planes.len()];
    let mut work = Work::<f32>::new(nvox, dims.len());
    for ((ks, sc), plane) in planes.iter().zip(cube.chunks_mut(nvox)) {
        let halves: Vec<Halves<f32>> = ks.iter().map(Halves::of).collect();
        laplace::log_plane_nd::<f32, f32>(
            &img32,
            dims,
            &halves,
            sc.to_f64() as f32,
            &mut work,
            plane,
        );
    }
    cube
}

#[cfg(test)]
mod tests;
