//! The maxima of the n-D scale space as `peak_local_max(cube, threshold_abs, threshold_rel,
//! exclude_border=(b_0, …, b_{n−1}, 0), footprint=ones((3,)·(n+1)))` finds them: a voxel is a
//! peak when it equals the maximum of its 3^(n+1) neighbourhood (`nearest` edges, plateaus
//! included), is above the threshold, and lies at least `b_a` from both ends of every spatial
//! axis `a`; a constant cube has none. Peaks come in scikit-image's order: descending value,
//! ties in raster order of `(coordinates…, scale)` (a stable sort of `np.nonzero`).
//!
//! Where few voxels are above the threshold (the usual case), each of them is compared with
//! its 3^(n+1) − 1 neighbours directly ([`is_peak`]); otherwise the box maximum, which is
//! separable, is computed for every plane (one 3-wide pass per axis) and a voxel is compared
//! with those of its plane and the planes either side. Both find the same peaks: a voxel
//! equals its window's maximum exactly when no neighbour is larger.

use rayon::prelude::*;

use super::laplace::{Geo, Simd, simd_fn};
use crate::detect::real::Real;

/// A peak: flat voxel index, scale index and value.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cand<T> {
    pub(super) idx: usize,
    pub(super) s: usize,
    pub(super) v: T,
}

#[inline(always)]
fn max2<T: Real>(a: T, b: T) -> T {
    if b > a { b } else { a }
}

/// The 3-wide maximum (`nearest` edges) of `src` along the axis of `g` into `dst`.
fn max3_pass<T: Real>(src: &[T], dst: &mut [T], g: Geo) {
    let (len, inner) = (g.len, g.inner);
    let threads = rayon::current_num_threads().max(1);
    let rows = g.outer * len;
    let rb = rows
        .div_ceil(4 * threads)
        .max((1usize << 14).div_ceil(inner))
        .max(1);
    let simd = Simd::detect();
    dst.par_chunks_mut(rb * inner)
        .enumerate()
        .for_each(|(c, out)| max3_rows_simd::<T>(simd, src, out, g, c * rb));
}

simd_fn!(
    /// [`max3_rows`] compiled for `simd`.
    max3_rows_simd,
    max3_rows,
    <T: Real>,
    (src: &[T], out: &mut [T], g: Geo, t0: usize)
);

/// Rows `t0 ..` of [`max3_pass`] into `out`.
#[inline(always)]
fn max3_rows<T: Real>(src: &[T], out: &mut [T], g: Geo, t0: usize) {
    let (len, inner) = (g.len, g.inner);
    for (dt, orow) in out.chunks_mut(inner).enumerate() {
        let t = t0 + dt;
        let (base, i) = ((t / len) * len * inner, t % len);
        let row = |i: usize| &src[base + i * inner..base + (i + 1) * inner];
        let (a, b, d) = (row(i.saturating_sub(1)), row(i), row((i + 1).min(len - 1)));
        if inner > 1 {
            for (((o, &x), &y), &z) in orow.iter_mut().zip(a).zip(b).zip(d) {
                *o = max2(max2(x, y), z);
            }
        } else {
            orow[0] = max2(max2(a[0], b[0]), d[0]);
        }
    }
}

/// The 3^n box maximum of one plane into `out` (`tmp`: a second buffer of the same size).
fn box_max<T: Real>(plane: &[T], dims: &[usize], out: &mut [T], tmp: &mut [T]) {
    let n = dims.len();
    // an odd number of swaps puts the last pass into `out`
    let (mut a, mut b) = if n % 2 == 1 { (out, tmp) } else { (tmp, out) };
    max3_pass(plane, a, Geo::of(dims, 0));
    for axis in 1..n {
        max3_pass(a, b, Geo::of(dims, axis));
        std::mem::swap(&mut a, &mut b);
    }
}

/// Whether the voxel `idx` of a C-order array of shape `dims` lies outside every border
/// (`border[a] ≤ i_a < dims[a] − border[a]`).
#[inline]
fn inside(mut idx: usize, dims: &[usize], border: &[usize]) -> bool {
    for (&d, &b) in dims.iter().zip(border).rev() {
        let i = idx % d;
        idx /= d;
        if i < b || i >= d.saturating_sub(b) {
            return false;
        }
    }
    true
}

/// The peaks above `thr` of the plane-major cube (`ns` planes of shape `dims`) in
/// scikit-image's order (see the module docs); `(lo, hi)` are the cube's extrema.
pub(super) fn find_peaks_nd<T: Real>(
    cube: &[T],
    dims: &[usize],
    ns: usize,
    (thr, lo, hi): (T, T, T),
    border: &[usize],
) -> Vec<Cand<T>> {
    if lo == hi || lo.is_nan() || hi.is_nan() || !searchable(dims, border) {
        return Vec::new();
    }
    let mut cands = select_peaks(cube, dims, ns, thr, border, |v| v);
    sort_peaks(&mut cands);
    cands
}

/// Whether a peak search of a cube of planes `dims` can find anything at all: some voxel, and
/// a border that leaves some voxel inside.
pub(super) fn searchable(dims: &[usize], border: &[usize]) -> bool {
    let nvox: usize = dims.iter().product();
    let covered = dims
        .iter()
        .zip(border)
        .any(|(&d, &b)| 2 * (b as u128) >= d as u128);
    nvox > 0 && !covered
}

/// scikit-image's order of peaks: descending value, ties in raster order of
/// `(coordinates…, scale)`.
pub(super) fn sort_peaks<T: Real>(cands: &mut [Cand<T>]) {
    cands.sort_by(|a, b| {
        b.v.partial_cmp(&a.v)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.idx.cmp(&b.idx))
            .then(a.s.cmp(&b.s))
    });
}

/// The voxels of the cube above `thr`, inside the border, with no neighbour above `lim(v)`
/// (`lim(v) = v`: the maxima; larger: every voxel that may be a maximum when each value is
/// known to within a bound), in plane-major raster order: by direct comparisons where few
/// voxels pass the threshold, else by box maxima.
pub(super) fn select_peaks<T: Real>(
    cube: &[T],
    dims: &[usize],
    ns: usize,
    thr: T,
    border: &[usize],
    lim: impl Fn(T) -> T + Sync,
) -> Vec<Cand<T>> {
    let above: usize = cube
        .par_chunks(1 << 16)
        .map(|c| c.iter().filter(|&&v| v > thr).count())
        .sum();
    let window = 3usize.pow(dims.len() as u32 + 1);
    // (`is_peak` holds up to 8 axes)
    if dims.len() <= 8 && above.saturating_mul(window) <= cube.len().saturating_mul(8) {
        direct_peaks(cube, dims, ns, thr, border, lim)
    } else {
        box_peaks(cube, dims, ns, thr, border, lim)
    }
}

/// Whether no neighbour of voxel `k` of plane `s` is above `v`: the 3^n window of its plane and
/// of the planes either side, clamped at the ends of every axis (`nearest` edges: a clamped
/// neighbour is a voxel of the window already).
#[inline]
fn is_peak<T: Real>(cube: &[T], dims: &[usize], ns: usize, (s, k, v): (usize, usize, T)) -> bool {
    let nvox = nvox_of(dims);
    // the neighbours along each axis and scale first: on a slope one of them is larger, and
    // the whole window need not be read
    let mut stride = 1usize;
    for &d in dims.iter().rev() {
        let i = (k / stride) % d;
        if (i > 0 && cube[s * nvox + k - stride] > v)
            || (i + 1 < d && cube[s * nvox + k + stride] > v)
        {
            return false;
        }
        stride *= d;
    }
    if (s > 0 && cube[(s - 1) * nvox + k] > v) || (s + 1 < ns && cube[(s + 1) * nvox + k] > v) {
        return false;
    }
    let mut peak = true;
    for_window(dims, ns, (s, k), |t, idx| {
        if cube[t * nvox + idx] > v {
            peak = false;
        }
        peak
    });
    peak
}

/// The number of voxels of a plane.
#[inline]
fn nvox_of(dims: &[usize]) -> usize {
    dims.iter().product()
}

/// Calls `visit(t, idx)` for every voxel `idx` of plane `t` in the neighbourhood of voxel `k` of
/// plane `s` (the 3^n window, clamped at the ends of every axis, in the planes `s − 1 ..= s + 1`
/// that exist), until `visit` returns `false`. At most 8 axes.
#[inline]
pub(super) fn for_window(
    dims: &[usize],
    ns: usize,
    (s, k): (usize, usize),
    mut visit: impl FnMut(usize, usize) -> bool,
) {
    let n = dims.len();
    // the voxel's coordinates and the strides, last axis fastest
    let mut at = [0usize; 8];
    let mut stride = [0usize; 8];
    let (mut rest, mut st) = (k, 1usize);
    for a in (0..n).rev() {
        at[a] = rest % dims[a];
        rest /= dims[a];
        stride[a] = st;
        st *= dims[a];
    }
    let lo_s = s.saturating_sub(1);
    let hi_s = (s + 1).min(ns - 1);
    // an odometer over the offsets −1, 0, +1 of every spatial axis (clamped)
    let mut off = [0usize; 8];
    let first = |a: usize| at[a].saturating_sub(1);
    let last = |a: usize| (at[a] + 1).min(dims[a] - 1);
    for (a, o) in off.iter_mut().enumerate().take(n) {
        *o = first(a);
    }
    loop {
        let idx: usize = (0..n).map(|a| off[a] * stride[a]).sum();
        for t in lo_s..=hi_s {
            if !visit(t, idx) {
                return;
            }
        }
        // next offset
        let mut a = n;
        loop {
            if a == 0 {
                return;
            }
            a -= 1;
            if off[a] < last(a) {
                off[a] += 1;
                break;
            }
            off[a] = first(a);
        }
    }
}

/// [`select_peaks`] by direct comparisons ([`is_peak`]), planes in parallel chunks.
pub(super) fn direct_peaks<T: Real>(
    cube: &[T],
    dims: &[usize],
    ns: usize,
    thr: T,
    border: &[usize],
    lim: impl Fn(T) -> T + Sync,
) -> Vec<Cand<T>> {
    let nvox: usize = dims.iter().product();
    let chunk = 1 << 14;
    let found: Vec<Vec<Cand<T>>> = cube
        .par_chunks(chunk)
        .enumerate()
        .map(|(c, vs)| {
            let mut out = Vec::new();
            for (dk, &v) in vs.iter().enumerate() {
                if v > thr {
                    let i = c * chunk + dk;
                    let (s, k) = (i / nvox, i % nvox);
                    if inside(k, dims, border) && is_peak(cube, dims, ns, (s, k, lim(v))) {
                        out.push(Cand { idx: k, s, v });
                    }
                }
            }
            out
        })
        .collect();
    found.into_iter().flatten().collect()
}

/// [`select_peaks`] by box maxima (every voxel compared with its window's maximum).
pub(super) fn box_peaks<T: Real>(
    cube: &[T],
    dims: &[usize],
    ns: usize,
    thr: T,
    border: &[usize],
    lim: impl Fn(T) -> T + Sync,
) -> Vec<Cand<T>> {
    let nvox: usize = dims.iter().product();
    let plane = |s: usize| &cube[s * nvox..(s + 1) * nvox];
    let mut tmp = vec![T::ZERO; nvox];
    let mut maxes: [Vec<T>; 3] = std::array::from_fn(|_| vec![T::ZERO; nvox]);
    box_max(plane(0), dims, &mut maxes[1], &mut tmp);
    let mut cands = Vec::new();
    for s in 0..ns {
        // maxes: [s − 1, s, s + 1], clamped at the ends (`nearest` along the scales)
        if s == 0 {
            let (a, b) = maxes.split_at_mut(1);
            a[0].copy_from_slice(&b[0]);
        } else {
            maxes.rotate_left(1);
        }
        if s + 1 < ns {
            box_max(plane(s + 1), dims, &mut maxes[2], &mut tmp);
        } else {
            let (a, b) = maxes.split_at_mut(2);
            b[0].copy_from_slice(&a[1]);
        }
        let p = plane(s);
        let chunk = 1 << 14;
        let found: Vec<Vec<Cand<T>>> = p
            .par_chunks(chunk)
            .enumerate()
            .map(|(c, vs)| {
                let k0 = c * chunk;
                let mut out = Vec::new();
                for (dk, &v) in vs.iter().enumerate() {
                    if v > thr {
                        let k = k0 + dk;
                        let m = max2(max2(maxes[0][k], maxes[1][k]), maxes[2][k]);
                        if m <= lim(v) && inside(k, dims, border) {
                            out.push(Cand { idx: k, s, v });
                        }
                    }
                }
                out
            })
            .collect();
        cands.extend(found.into_iter().flatten());
    }
    cands
}
