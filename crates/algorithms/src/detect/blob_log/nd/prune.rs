//! n-D overlap pruning: scikit-image's `_prune_blobs(blobs, overlap, sigma_dim)` and
//! `_blob_overlap` in the working type, NumPy 2's scalar rules reproduced.
//!
//! * The pairs are those within `2 · max(σ) · sqrt(ndim)` (every σ column of every blob), in
//!   **ascending lexicographic (i, j) order** (scikit-image iterates `cKDTree.query_pairs`, a
//!   Python set; the 2-D code made the same choice, see [`crate::detect::blob_log::prune_blobs`]).
//! * Positions are divided by `σ_max · sqrt(ndim)` of the blob with the larger **last** σ
//!   column (per axis when there is one σ column per axis); `r` is the ratio of the last σ
//!   columns. Overlap: 0 past `r1 + r2`, 1 within `|r1 − r2|`, else the disk formula in 2-D
//!   and the sphere formula otherwise (1-D included, as scikit-image), and 0 for ndim > 3.
//! * Arithmetic is that of the NumPy scalars: the working type throughout (Python ints and
//!   floats are weak), `x ** 2` and `x ** 3` of a scalar by the C library's `pow`, `acos` and
//!   `sqrt` of `math` in f64; the early 0.0 and 1.0 are Python floats, compared with `overlap`
//!   in f64.

use super::params::scalar_pow;
use crate::detect::blob_log::prune::pairs_within_d;
use crate::detect::real::Real;

/// An overlap as `_blob_overlap` returns it: a Python float (the early exits) or a NumPy scalar
/// of the working type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Overlap<T> {
    /// A Python float (0.0 or 1.0).
    Py(f64),
    /// A NumPy scalar of the working type.
    Typed(T),
}

impl<T: Real> Overlap<T> {
    /// `overlap_value > overlap` as Python evaluates it (a NumPy scalar compares in its type).
    pub fn exceeds(self, overlap: f64) -> bool {
        match self {
            Overlap::Py(v) => v > overlap,
            Overlap::Typed(v) => v > T::from_f64(overlap),
        }
    }

    /// The value, widened.
    pub fn value(self) -> f64 {
        match self {
            Overlap::Py(v) => v,
            Overlap::Typed(v) => v.to_f64(),
        }
    }
}

/// `_compute_disk_overlap(d, r1, r2)` in `T`.
fn disk_overlap<T: Real>(d: T, r1: T, r2: T) -> T {
    let pw2 = |x: T| scalar_pow(x, 2.0);
    let two = T::from_f64(2.0);
    let clip = |v: T| {
        if v < -T::ONE {
            -T::ONE
        } else if v > T::ONE {
            T::ONE
        } else {
            v
        }
    };
    let ratio1 = clip((pw2(d) + pw2(r1) - pw2(r2)) / (two * d * r1));
    let acos1 = ratio1.to_f64().acos();
    let ratio2 = clip((pw2(d) + pw2(r2) - pw2(r1)) / (two * d * r2));
    let acos2 = ratio2.to_f64().acos();
    let a = -d + r2 + r1;
    let b = d - r2 + r1;
    let c = d + r2 - r1;
    let dd = d + r2 + r1;
    let root = (a * b * c * dd).abs().to_f64().sqrt();
    let area =
        pw2(r1) * T::from_f64(acos1) + pw2(r2) * T::from_f64(acos2) - T::from_f64(0.5 * root);
    let m = if r2 < r1 { r2 } else { r1 };
    area / (T::from_f64(std::f64::consts::PI) * pw2(m))
}

/// `_compute_sphere_overlap(d, r1, r2)` in `T`.
fn sphere_overlap<T: Real>(d: T, r1: T, r2: T) -> T {
    let pw2 = |x: T| scalar_pow(x, 2.0);
    let k = |v: f64| T::from_f64(v);
    let pi = std::f64::consts::PI;
    let inner = pw2(d) + k(2.0) * d * (r1 + r2) - k(3.0) * (pw2(r1) + pw2(r2)) + k(6.0) * r1 * r2;
    let vol = k(pi) / (k(12.0) * d) * pw2(r1 + r2 - d) * inner;
    let m = if r2 < r1 { r2 } else { r1 };
    vol / (k(4.0 / 3.0 * pi) * scalar_pow(m, 3.0))
}

/// `_blob_overlap(blob1, blob2, sigma_dim)` of two blobs with coordinates `c1`, `c2` and σ
/// columns `s1`, `s2` (one, or one per axis), in `T`.
pub fn blob_overlap_nd<T: Real>(c1: &[T], s1: &[T], c2: &[T], s2: &[T]) -> Overlap<T> {
    let ndim = c1.len();
    if ndim > 3 || s1.is_empty() || s2.is_empty() {
        return Overlap::Py(0.0);
    }
    let root = T::from_f64((ndim as f64).sqrt());
    let (l1, l2) = (s1[s1.len() - 1], s2[s2.len() - 1]);
    if l1 == T::ZERO && l2 == T::ZERO {
        return Overlap::Py(0.0);
    }
    // Python's int 1 acts as the working type's 1 in every expression below
    let (max_sigma, r1, r2) = if l1 > l2 {
        (s1, T::ONE, l2 / l1)
    } else {
        (s2, l1 / l2, T::ONE)
    };
    let sq: Vec<T> = (0..ndim)
        .map(|a| {
            let den = max_sigma[a.min(max_sigma.len() - 1)] * root;
            let diff = c2[a] / den - c1[a] / den;
            diff * diff
        })
        .collect();
    let d = super::params::numpy_sum_t(&sq).sqrt();
    if d > r1 + r2 {
        return Overlap::Py(0.0);
    }
    if d <= (r1 - r2).abs() {
        return Overlap::Py(1.0);
    }
    Overlap::Typed(if ndim == 2 {
        disk_overlap(d, r1, r2)
    } else {
        sphere_overlap(d, r1, r2)
    })
}

/// Pairs `(i < j)` of the points `pos` (`ndim` coordinates each, flat) within `cutoff`
/// (inclusive, squared distances in f64), in ascending lexicographic order: the 2-D code's
/// [`pairs_within`](crate::detect::blob_log::pairs_within) on the `ndim`-dimensional grid (past
/// four axes, the grid of the first four, a superset whose pairs are then checked on every
/// axis).
pub fn pairs_within_nd(pos: &[f64], ndim: usize, cutoff: f64) -> Vec<(usize, usize)> {
    fn points<const D: usize>(pos: &[f64], ndim: usize) -> Vec<[f64; D]> {
        pos.chunks_exact(ndim)
            .map(|p| std::array::from_fn(|a| p[a]))
            .collect()
    }
    match ndim {
        0 => Vec::new(),
        1 => pairs_within_d(&points::<1>(pos, 1), cutoff),
        2 => pairs_within_d(&points::<2>(pos, 2), cutoff),
        3 => pairs_within_d(&points::<3>(pos, 3), cutoff),
        _ => {
            let c2 = cutoff * cutoff;
            let pt = |i: usize| &pos[i * ndim..(i + 1) * ndim];
            let mut pairs = pairs_within_d(&points::<4>(pos, ndim), cutoff);
            pairs.retain(|&(i, j)| {
                pt(i)
                    .iter()
                    .zip(pt(j))
                    .map(|(a, b)| (b - a) * (b - a))
                    .sum::<f64>()
                    <= c2
            });
            pairs
        }
    }
}

/// `_prune_blobs`: the survivor flags of blobs already in candidate order, each with its
/// `ndim` coordinates (`coords`, flat) and its σ columns (`sigmas`, flat, `sigma_dim` each).
pub fn prune_blobs_nd<T: Real>(
    coords: &[T],
    sigmas: &[T],
    ndim: usize,
    sigma_dim: usize,
    overlap: f64,
) -> Vec<bool> {
    let n = sigmas.len().checked_div(sigma_dim).unwrap_or(0);
    let mut last: Vec<T> = (0..n).map(|i| sigmas[(i + 1) * sigma_dim - 1]).collect();
    // no pair overlaps in more than three dimensions (`_blob_overlap` returns 0)
    if n < 2 || ndim == 0 || ndim > 3 {
        return last.iter().map(|&s| s > T::ZERO).collect();
    }
    let smax = sigmas
        .iter()
        .copied()
        .fold(sigmas[0], |a, b| if b > a { b } else { a });
    let cutoff = (T::from_f64(2.0) * smax * T::from_f64((ndim as f64).sqrt())).to_f64();
    let pos: Vec<f64> = coords.iter().map(|c| c.to_f64()).collect();
    let c = |i: usize| &coords[i * ndim..(i + 1) * ndim];
    let s = |i: usize| &sigmas[i * sigma_dim..(i + 1) * sigma_dim];
    for (i, j) in pairs_within_nd(&pos, ndim, cutoff) {
        // a removed blob (last σ column 0) never removes another one (see `_prune_blobs`)
        if last[i] == T::ZERO || last[j] == T::ZERO {
            continue;
        }
        if blob_overlap_nd(c(i), s(i), c(j), s(j)).exceeds(overlap) {
            if last[i] > last[j] {
                last[j] = T::ZERO;
            } else {
                last[i] = T::ZERO;
            }
        }
    }
    last.iter().map(|&s| s > T::ZERO).collect()
}
