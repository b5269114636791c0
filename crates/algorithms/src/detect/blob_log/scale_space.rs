//! The scale space and its peaks: the cube `cube[i] = −σ_i²·(L_yy + L_xx)` ([`log_cube`], with
//! the [`Accumulate`] choice), the effective threshold (spec §1.5), and the 3×3×3 local maxima
//! above it outside the border.

use rayon::prelude::*;

use super::params::BlobLogParams;
use crate::detect::filters::{LogKernels, LogScratch, log_plane_scaled};
use crate::detect::real::{Real, give_buf, take_buf};

/// How the LoG passes accumulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Accumulate {
    /// f64, in SciPy's order: the cube equals SciPy's bit for bit (default).
    #[default]
    F64,
    /// f32 (about twice as fast on the CPU, like a GPU path). Spec §1.4 allows it: the cube
    /// differs by ~1e-7 relative, so a candidate within that distance of the threshold may flip.
    F32,
}

/// The scale-space cube, plane-major: `cube[i·h·w + y·w + x]` (exact f64 accumulation).
pub fn log_cube<T: Real>(image: &[T], h: usize, w: usize, sigmas: &[T]) -> Vec<T> {
    log_cube_acc(image, h, w, sigmas, Accumulate::F64)
}

/// The scale-space cube with a chosen accumulation.
pub fn log_cube_acc<T: Real>(
    image: &[T],
    h: usize,
    w: usize,
    sigmas: &[T],
    acc: Accumulate,
) -> Vec<T> {
    match acc {
        Accumulate::F64 => log_cube_in::<T, f64>(image, h, w, sigmas),
        Accumulate::F32 => log_cube_in::<T, f32>(image, h, w, sigmas),
    }
}

fn log_cube_in<T: Real, A: Real>(image: &[T], h: usize, w: usize, sigmas: &[T]) -> Vec<T> {
    log_cube_extrema_in::<T, A>(image, h, w, sigmas).0
}

/// [`log_cube_acc`] and the cube's minimum and maximum, found while it is written (one pass
/// over the cube less than [`threshold_of`]; the same values: NaN-free input).
pub(super) fn log_cube_extrema<T: Real>(
    image: &[T],
    h: usize,
    w: usize,
    sigmas: &[T],
    acc: Accumulate,
) -> (Vec<T>, T, T) {
    match acc {
        Accumulate::F64 => log_cube_extrema_in::<T, f64>(image, h, w, sigmas),
        Accumulate::F32 => log_cube_extrema_in::<T, f32>(image, h, w, sigmas),
    }
}

fn log_cube_extrema_in<T: Real, A: Real>(
    image: &[T],
    h: usize,
    w: usize,
    sigmas: &[T],
) -> (Vec<T>, T, T) {
    let plane = h * w;
    let mut cube: Vec<T> = take_buf(plane * sigmas.len());
    let stride = crate::detect::filters::padded_stride(w);
    let mut padded: Vec<A> = take_buf(h * stride);
    for (dst, src) in padded.chunks_mut(stride).zip(image.chunks(w.max(1))) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = A::from_f64(s.to_f64());
        }
    }
    let image = &padded[..];
    let rmax = sigmas
        .iter()
        .map(|s| crate::detect::filters::kernel_radius(s.to_f64()))
        .max()
        .unwrap_or(0);
    let extrema: Vec<(T, T)> = cube
        .par_chunks_mut(plane.max(1))
        .zip(sigmas.par_iter())
        .map_init(
            || LogScratch::<T, A>::new(h, w, rmax),
            |scratch, (out, &s)| {
                let k = LogKernels::new(s.to_f64(), T::IS_F32);
                log_plane_scaled(image, stride, h, w, &k, scratch, out, s * s)
            },
        )
        .collect();
    give_buf(padded);
    let (lo, hi) = extrema
        .iter()
        .copied()
        .reduce(|a, b| {
            (
                if b.0 < a.0 { b.0 } else { a.0 },
                if b.1 > a.1 { b.1 } else { a.1 },
            )
        })
        .unwrap_or((T::ZERO, T::ZERO));
    (cube, lo, hi)
}

/// A candidate peak before pruning.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cand<T> {
    pub(super) y: usize,
    pub(super) x: usize,
    pub(super) s: usize,
    pub(super) v: T,
}

/// Effective threshold (spec §1.5) from the cube extrema `(lo, hi)`, and those extrema.
pub(super) fn threshold_from<T: Real>((lo, hi): (T, T), p: &BlobLogParams) -> (T, T, T) {
    let mut thr = p.threshold.map(T::from_f64).unwrap_or(lo);
    if let Some(rel) = p.threshold_rel {
        let t = T::from_f64(rel) * hi;
        if t > thr {
            thr = t;
        }
    }
    (thr, lo, hi)
}

/// Effective threshold (spec §1.5) and the cube extrema.
pub(super) fn threshold_of<T: Real>(cube: &[T], p: &BlobLogParams) -> (T, T, T) {
    const L: usize = 16;
    let (lo, hi) = cube
        .par_chunks(1 << 16)
        .map(|c| {
            // lane-wise extrema (vectorisable); NaN-free input is guaranteed by validation
            let mut lo = [c[0]; L];
            let mut hi = [c[0]; L];
            let mut it = c.chunks_exact(L);
            for ch in &mut it {
                for l in 0..L {
                    lo[l] = if ch[l] < lo[l] { ch[l] } else { lo[l] };
                    hi[l] = if ch[l] > hi[l] { ch[l] } else { hi[l] };
                }
            }
            let mut a = lo[0];
            let mut b = hi[0];
            for &v in lo.iter().chain(it.remainder()) {
                if v < a {
                    a = v;
                }
            }
            for &v in hi.iter().chain(it.remainder()) {
                if v > b {
                    b = v;
                }
            }
            (a, b)
        })
        .reduce_with(|a, b| {
            (
                if b.0 < a.0 { b.0 } else { a.0 },
                if b.1 > a.1 { b.1 } else { a.1 },
            )
        })
        .unwrap_or((T::ZERO, T::ZERO));
    threshold_from((lo, hi), p)
}

/// Bit `k` set where `v[k] > thr`, for up to 16 values (a full block compares as one array,
/// which vectorises).
#[inline(always)]
fn above_mask<T: Real>(v: &[T], thr: T) -> u32 {
    if let Ok(b) = <&[T; 16]>::try_from(v) {
        let mut m = 0u32;
        for (k, &x) in b.iter().enumerate() {
            m |= u32::from(x > thr) << k;
        }
        return m;
    }
    v.iter()
        .enumerate()
        .fold(0u32, |m, (k, &x)| m | (u32::from(x > thr) << k))
}

/// Local maxima of the cube above `thr`, in raster order of (y, x, scale).
pub(super) fn find_peaks<T: Real>(
    cube: &[T],
    h: usize,
    w: usize,
    ns: usize,
    thr: T,
    border: (usize, usize),
) -> Vec<Cand<T>> {
    let plane = h * w;
    let (by, bx) = border;
    if 2 * by >= h || 2 * bx >= w {
        return Vec::new();
    }
    let rows: Vec<Vec<Cand<T>>> = (by..h - by)
        .into_par_iter()
        .map(|y| {
            let mut out = Vec::new();
            let ys = [y.saturating_sub(1), y, (y + 1).min(h - 1)];
            // voxels above the threshold in this row, in (x, scale) order: 16 columns at a
            // time, one bit mask per plane (branch-free, vectorisable), then the set bits
            let mut above: Vec<(usize, usize)> = Vec::new();
            let mut masks = vec![0u32; ns];
            let (x0, x1) = (bx, w - bx);
            let mut c0 = x0;
            while c0 < x1 {
                let c1 = (c0 + 16).min(x1);
                let mut any = 0u32;
                for (s, m) in masks.iter_mut().enumerate() {
                    let base = s * plane + y * w;
                    *m = above_mask(&cube[base + c0..base + c1], thr);
                    any |= *m;
                }
                while any != 0 {
                    let k = any.trailing_zeros() as usize;
                    any &= any - 1;
                    for (s, m) in masks.iter().enumerate() {
                        if m & (1 << k) != 0 {
                            above.push((c0 + k, s));
                        }
                    }
                }
                c0 = c1;
            }
            for (x, s) in above {
                let v = cube[s * plane + y * w + x];
                let xs = [x.saturating_sub(1), x, (x + 1).min(w - 1)];
                let ss = [s.saturating_sub(1), s, (s + 1).min(ns - 1)];
                let mut is_max = true;
                'outer: for &sn in &ss {
                    let base = sn * plane;
                    for &yn in &ys {
                        let rb = base + yn * w;
                        for &xn in &xs {
                            if cube[rb + xn] > v {
                                is_max = false;
                                break 'outer;
                            }
                        }
                    }
                }
                if is_max {
                    out.push(Cand { y, x, s, v });
                }
            }
            out
        })
        .collect();
    rows.into_iter().flatten().collect()
}
