//! The search for the scale space's peaks: the 3×3×3 local maxima above a threshold of a cube
//! (or of a ring of its rows), in blocks of 16 columns with branch-free threshold masks and
//! vectorised 3×3 maxima ([`find_peaks`], [`rows_peaks`]). Re-exported by [`super`].

use rayon::prelude::*;

use super::Cand;
use crate::detect::blob_log::params::border_covers;
use crate::detect::filters::Avx2;
use crate::detect::real::Real;

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

/// Scratch of [`row_peaks`]: per plane, the threshold mask of a block of columns and the
/// maxima of its 3×3 neighbourhoods.
#[derive(Default)]
pub(super) struct RowScratch<T> {
    masks: Vec<u32>,
    xm: Vec<[T; 16]>,
    /// The block (a running count) whose `xm` each plane holds.
    stamp: Vec<u64>,
    block: u64,
}

/// The 16 values of a full block as f64 (an f64 working type), for the AVX2 masks.
#[inline(always)]
fn f64s<T: Real>(x: &[T]) -> Option<&[f64; 16]> {
    T::as_f64s(x).and_then(|x| <&[f64; 16]>::try_from(x).ok())
}

/// The 16 values of a full block as f32 (an f32 working type), for the AVX2 masks.
#[inline(always)]
fn f32s<T: Real>(x: &[T]) -> Option<&[f32; 16]> {
    T::as_f32s(x).and_then(|x| <&[f32; 16]>::try_from(x).ok())
}

/// The larger of two values (NaN-free: the cube is validated).
#[inline(always)]
fn max2<T: Real>(a: T, b: T) -> T {
    if b > a { b } else { a }
}

/// The maximum of the 3×3 neighbourhood of the 16 columns from `c0` of the row starting at
/// `rows[1]` (rows `rows[0]` and `rows[2]` above and below), columns clamped to the frame (a
/// repeated column changes no maximum).
#[inline(always)]
fn block_max3x3<T: Real>(data: &[T], [ra, rb, rc]: [usize; 3], c0: usize, w: usize) -> [T; 16] {
    // columns c0 − 1 … c0 + 16 of the three rows, read in place (shifted loads: a maximum of
    // columns kept on the stack and read back shifted stalls on store forwarding)
    let cols = |r: usize| data.get(r + c0 - 1..r + c0 + 17)?.first_chunk::<18>();
    if c0 >= 1
        && c0 + 17 <= w
        && let (Some(a), Some(b), Some(c)) = (cols(ra), cols(rb), cols(rc))
    {
        let row3 = |v: &[T; 18], k: usize| max2(max2(v[k], v[k + 1]), v[k + 2]);
        // a plain loop: `array::from_fn` is not always inlined (f32 blocks)
        let mut out = [T::ZERO; 16];
        for (k, o) in out.iter_mut().enumerate() {
            *o = max2(max2(row3(a, k), row3(b, k)), row3(c, k));
        }
        return out;
    }
    let at = |r: usize, k: usize| data[r + (c0 + k).saturating_sub(1).min(w - 1)];
    let cm: [T; 18] = std::array::from_fn(|k| max2(max2(at(ra, k), at(rb, k)), at(rc, k)));
    std::array::from_fn(|k| max2(max2(cm[k], cm[k + 1]), cm[k + 2]))
}

/// The 3×3×3 local maxima above `thr` of row `y` (columns `x0..x1`), appended to `out` in
/// (x, scale) order. Row `y'` of plane `s` starts in `data` at `s·ps + off(y')`, for `y'`
/// within one row of `y` (clamped to the frame, SciPy `nearest`).
///
/// Blocks of 16 columns: the voxels above the threshold as one bit mask per plane
/// (branch-free); where a plane has any, that plane and the planes either side get the
/// maximum of every voxel's 3×3 neighbourhood ([`block_max3x3`]: three rows, then three
/// columns, fixed-size arrays, vectorised), and a voxel is
/// a maximum when it is at least the largest of those of its plane and the planes either side
/// (`image == maximum_filter(image)`, plateaus included).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn row_peaks<T: Real>(
    simd: Option<Avx2>,
    data: &[T],
    (ps, off): (usize, impl Fn(usize) -> usize),
    (y, h): (usize, usize),
    (x0, x1, w): (usize, usize, usize),
    ns: usize,
    (thr, margin): (T, T),
    sc: &mut RowScratch<T>,
    out: &mut Vec<Cand<T>>,
) {
    let ry = [y.saturating_sub(1), y, (y + 1).min(h - 1)];
    let offs = ry.map(off);
    sc.masks.clear();
    sc.masks.resize(ns, 0);
    sc.xm.resize(ns, [T::ZERO; 16]);
    sc.stamp.resize(ns, 0);
    let mut c0 = x0;
    while c0 < x1 {
        let c1 = (c0 + 16).min(x1);
        let mut any = 0u32;
        for (s, m) in sc.masks.iter_mut().enumerate() {
            let base = s * ps + offs[1];
            let v = &data[base + c0..base + c1];
            *m = match (simd, f64s(v), f32s(v)) {
                (Some(t), Some(v), _) => t.gt_mask16(v, thr.to_f64()),
                // `thr` is an f32 here: the conversions are exact
                (Some(t), _, Some(v)) => t.gt_mask16_f32(v, thr.to_f64() as f32),
                _ => above_mask(v, thr),
            };
            any |= *m;
        }
        if any != 0 {
            // the 3×3 maxima of the planes that have voxels above the threshold and of
            // their neighbours, each computed once per block
            sc.block += 1;
            for s in 0..ns {
                if sc.masks[s] == 0 {
                    continue;
                }
                for sn in s.saturating_sub(1)..=(s + 1).min(ns - 1) {
                    if sc.stamp[sn] != sc.block {
                        sc.stamp[sn] = sc.block;
                        let rows = offs.map(|o| sn * ps + o);
                        sc.xm[sn] = block_max3x3(data, rows, c0, w);
                    }
                }
            }
            any = 0;
            for s in 0..ns {
                if sc.masks[s] == 0 {
                    continue;
                }
                let (lo, hi) = (s.saturating_sub(1), (s + 1).min(ns - 1));
                let (a, b, c) = (&sc.xm[lo], &sc.xm[s], &sc.xm[hi]);
                let base = s * ps + offs[1] + c0;
                let v = &data[base..base + (c1 - c0)];
                let f32s4 = (f32s(v), f32s(a), f32s(b), f32s(c));
                let peak = match (simd, f64s(v), f64s(a), f64s(b), f64s(c), f32s4) {
                    (Some(t), Some(v), Some(a), Some(b), Some(c), _) if margin == T::ZERO => {
                        t.ge_max3_mask16(v, (a, b, c))
                    }
                    // f32: `x + 0 ≥ m` is `x ≥ m` (NaN-free), so one kernel serves both
                    (Some(t), _, _, _, _, (Some(v), Some(a), Some(b), Some(c))) => {
                        t.ge_max3_mask16_f32(v, (a, b, c), margin.to_f64() as f32)
                    }
                    _ => {
                        // within the margin of the neighbourhood's maximum (`x + 0 ≥ m` is
                        // `x ≥ m`: NaN-free)
                        let mut peak = 0u32;
                        for (k, &x) in v.iter().enumerate() {
                            let m = max2(max2(a[k], b[k]), c[k]);
                            peak |= u32::from(x + margin >= m) << k;
                        }
                        peak
                    }
                };
                sc.masks[s] &= peak;
                any |= sc.masks[s];
            }
            while any != 0 {
                let k = any.trailing_zeros() as usize;
                any &= any - 1;
                for (s, m) in sc.masks.iter().enumerate() {
                    if m & (1 << k) != 0 {
                        let x = c0 + k;
                        let v = data[s * ps + offs[1] + x];
                        let near = if margin == T::ZERO {
                            0
                        } else {
                            contenders(data, (ps, offs, ry), (s, ns), (x, w), v, margin)
                        };
                        out.push(Cand { y, x, s, v, near });
                    }
                }
            }
        }
        c0 = c1;
    }
}

/// The neighbours (bits as [`Cand::near`]) of the voxel (s, `ry[1]`, x) whose values are
/// within `margin` of its value `v` or above it (rows `ry` at offsets `offs` of planes `ps`
/// apart, clamped as [`row_peaks`] clamps them).
#[inline(never)]
fn contenders<T: Real>(
    data: &[T],
    (ps, offs, ry): (usize, [usize; 3], [usize; 3]),
    (s, ns): (usize, usize),
    (x, w): (usize, usize),
    v: T,
    margin: T,
) -> u32 {
    let ss = [s.saturating_sub(1), s, (s + 1).min(ns - 1)];
    let xs = [x.saturating_sub(1), x, (x + 1).min(w - 1)];
    let (v, margin) = (v.to_f64(), margin.to_f64());
    let mut near = 0u32;
    for (a, &sn) in ss.iter().enumerate() {
        for (b, (&o, &yn)) in offs.iter().zip(&ry).enumerate() {
            for (c, &xn) in xs.iter().enumerate() {
                if (sn, yn, xn) == (s, ry[1], x) {
                    continue;
                }
                if data[sn * ps + o + xn].to_f64() + margin > v {
                    near |= 1 << (9 * a + 3 * b + c);
                }
            }
        }
    }
    near
}

/// [`row_peaks`] of the rows `ys.0..ys.1` (of `ys.2`; row `y'` of plane `s` at
/// `s·row.0 + row.1(y')`), compiled for AVX2 when the CPU has it
/// (the masks and the 3×3 maxima then inline as 256-bit vectors).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn rows_peaks<T: Real, F: Fn(usize) -> usize>(
    simd: Option<Avx2>,
    data: &[T],
    row: (usize, F),
    ys: (usize, usize, usize),
    xs: (usize, usize, usize),
    ns: usize,
    thr: (T, T),
    sc: &mut RowScratch<T>,
    out: &mut Vec<Cand<T>>,
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(t) = simd {
        // SAFETY: an `Avx2` token exists only when the CPU supports AVX2, the one requirement
        // of calling a function compiled with `target_feature(enable = "avx2")`.
        unsafe { rows_peaks_avx2(t, data, row, ys, xs, ns, thr, sc, out) };
        return;
    }
    rows_peaks_in(simd, data, row, ys, xs, ns, thr, sc, out);
}

/// [`rows_peaks_in`] compiled with AVX2 enabled.
///
/// # Safety
/// The CPU must support AVX2 (`t` proves it).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_peaks_avx2<T: Real, F: Fn(usize) -> usize>(
    t: Avx2,
    data: &[T],
    row: (usize, F),
    ys: (usize, usize, usize),
    xs: (usize, usize, usize),
    ns: usize,
    thr: (T, T),
    sc: &mut RowScratch<T>,
    out: &mut Vec<Cand<T>>,
) {
    rows_peaks_in(Some(t), data, row, ys, xs, ns, thr, sc, out);
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn rows_peaks_in<T: Real, F: Fn(usize) -> usize>(
    simd: Option<Avx2>,
    data: &[T],
    (ps, off): (usize, F),
    (y0, y1, h): (usize, usize, usize),
    xs: (usize, usize, usize),
    ns: usize,
    thr: (T, T),
    sc: &mut RowScratch<T>,
    out: &mut Vec<Cand<T>>,
) {
    for y in y0..y1 {
        row_peaks(simd, data, (ps, &off), (y, h), xs, ns, thr, sc, out);
    }
}

/// Local maxima of the cube above `thr`, in raster order of (y, x, scale).
pub(in crate::detect::blob_log) fn find_peaks<T: Real>(
    cube: &[T],
    h: usize,
    w: usize,
    ns: usize,
    thr: T,
    border: (usize, usize),
) -> Vec<Cand<T>> {
    let plane = h * w;
    if border_covers(border, h, w) {
        return Vec::new();
    }
    let (by, bx) = border;
    let simd = Avx2::detect();
    let rows: Vec<Vec<Cand<T>>> = (by..h - by)
        .into_par_iter()
        .map_init(RowScratch::default, |sc, y| {
            let mut out = Vec::new();
            let row = (plane, |y: usize| y * w);
            rows_peaks(
                simd,
                cube,
                row,
                (y, y + 1, h),
                (bx, w - bx, w),
                ns,
                (thr, T::ZERO),
                sc,
                &mut out,
            );
            out
        })
        .collect();
    rows.into_iter().flatten().collect()
}
