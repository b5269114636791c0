//! The n-D preprocessing and candidates of [`locate_nd`](super::locate_nd): inversion,
//! trackpy's bandpass axis by axis (its Gaussian lowpass with zero padding, minus a boxcar
//! computed in the input dtype), rescaling to the integer gamut, and the grey-dilation local
//! maxima outside the margin.

use super::params::Resolved;
use super::{Kind, LocateNdParams};
use crate::detect::filters::{Boundary, pass_x, pass_y};
use crate::detect::locate::bandpass::{
    boxcar_cols, boxcar_pass, lowpass_half, rescale, trunc_small,
};
use crate::detect::locate::maxima::dilation_reach;

/// `(outer, n, inner)`: the image seen as `outer` blocks of `n × inner` along `axis`.
pub(super) fn split(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}

/// trackpy's `lowpass`: `correlate1d` with its Gaussian of width `sigma[a]` along each axis `a`
/// in turn (axes of width 0 skipped), zero padding, float64.
fn lowpass(raw: &[f64], shape: &[usize], sigma: &[f64]) -> Vec<f64> {
    let mut low = raw.to_vec();
    let mut tmp = vec![0.0f64; raw.len()];
    for (axis, &s) in sigma.iter().enumerate() {
        let Some(half) = lowpass_half(s) else {
            continue;
        };
        let (outer, n, inner) = split(shape, axis);
        if inner == 1 {
            pass_x(&low, outer, n, &half, Boundary::Constant, &mut tmp);
        } else {
            let block = n * inner;
            for (src, dst) in low.chunks_exact(block).zip(tmp.chunks_exact_mut(block)) {
                pass_y(src, n, inner, &[&half], Boundary::Constant, &mut [dst]);
            }
        }
        std::mem::swap(&mut low, &mut tmp);
    }
    low
}

/// trackpy's `boxcar`: SciPy's `uniform_filter1d` (mode `nearest`) of width `size[a]` along each
/// axis `a` in turn (widths ≤ 1 skipped), each pass stored in the input dtype.
fn boxcar(raw: &[f64], shape: &[usize], size: &[usize], kind: Kind) -> Vec<f64> {
    let mut bg = raw.to_vec();
    let store = |v: f64| match kind {
        Kind::U8 | Kind::U16 => trunc_small(v),
        Kind::F32 => f64::from(v as f32),
        Kind::F64 => v,
    };
    for (axis, &s) in size.iter().enumerate() {
        if s <= 1 {
            continue;
        }
        let (outer, n, inner) = split(shape, axis);
        if inner == 1 {
            boxcar_pass(&mut bg, outer, n, s, 1, store);
        } else {
            let src = bg.clone();
            let block = n * inner;
            for (s_blk, d_blk) in src.chunks_exact(block).zip(bg.chunks_exact_mut(block)) {
                boxcar_cols(s_blk, d_blk, n, inner, s, store);
            }
        }
    }
    bg
}

/// Inversion (in the input dtype) of the raw pixels, in place.
pub(super) fn invert(raw: &mut [f64], kind: Kind) {
    match kind {
        Kind::U8 | Kind::U16 => {
            let m = kind.int_max();
            for v in raw {
                *v = m - *v;
            }
        }
        Kind::F32 => {
            for v in raw {
                *v = f64::from(1.0f32 - *v as f32);
            }
        }
        Kind::F64 => {
            for v in raw {
                *v = 1.0 - *v;
            }
        }
    }
}

/// The image local maxima are found on: the bandpass of `raw` (unless `preprocess` is off)
/// rescaled to the integer gamut, and the factor of that rescaling.
pub(super) fn prepare(
    raw: &[f64],
    shape: &[usize],
    kind: Kind,
    p: &LocateNdParams,
    res: &Resolved,
) -> (Vec<u32>, f64) {
    let int = matches!(kind, Kind::U8 | Kind::U16);
    if !p.preprocess {
        if int {
            return (raw.iter().map(|&v| v as u32).collect(), 1.0);
        }
        return rescale(raw, kind.int_max());
    }
    let (mut low, bg) = rayon::join(
        || lowpass(raw, shape, &res.noise),
        || boxcar(raw, shape, &res.smoothing, kind),
    );
    let thr = p.threshold.unwrap_or(if int { 1.0 } else { 1.0 / 255.0 });
    for (l, b) in low.iter_mut().zip(&bg) {
        let v = *l - b;
        *l = if v >= thr { v } else { 0.0 };
    }
    rescale(&low, kind.int_max())
}

/// `scipy.ndimage.grey_dilation(img, size, mode='constant')` of a non-negative image: the
/// maximum over the box of `size[a]` pixels per axis (zero padding changes nothing).
fn grey_dilation(img: &[u32], shape: &[usize], size: &[usize]) -> Vec<u32> {
    let mut cur = img.to_vec();
    let mut out = vec![0u32; img.len()];
    for (axis, &s) in size.iter().enumerate() {
        let (lo, hi) = dilation_reach(s);
        if lo == 0 && hi == 0 {
            continue;
        }
        let (outer, n, inner) = split(shape, axis);
        for o in 0..outer {
            let base = o * n * inner;
            for i in 0..n {
                let a = i.saturating_sub(lo);
                let b = i.saturating_add(hi).min(n - 1);
                let dst = &mut out[base + i * inner..base + (i + 1) * inner];
                dst.copy_from_slice(&cur[base + a * inner..base + (a + 1) * inner]);
                for j in a + 1..=b {
                    let src = &cur[base + j * inner..base + (j + 1) * inner];
                    for (d, &v) in dst.iter_mut().zip(src) {
                        *d = (*d).max(v);
                    }
                }
            }
        }
        std::mem::swap(&mut cur, &mut out);
    }
    cur
}

/// trackpy's `grey_dilation(image, separation, percentile, margin, precise=False)`: the pixels
/// equal to the dilation by the box of `box_size` and above `thr`, none within `margin[a]` of
/// the border of axis `a`, in raster order (as multi-indices).
pub(super) fn local_maxima(
    img: &[u32],
    shape: &[usize],
    box_size: &[usize],
    margin: &[usize],
    thr: f64,
) -> Vec<Vec<usize>> {
    let dil = grey_dilation(img, shape, box_size);
    let ndim = shape.len();
    let mut out = Vec::new();
    let mut idx = vec![0usize; ndim];
    for (k, (&v, &d)) in img.iter().zip(&dil).enumerate() {
        if v == d && f64::from(v) > thr {
            let mut rem = k;
            for a in (0..ndim).rev() {
                idx[a] = rem % shape[a];
                rem /= shape[a];
            }
            let inside = idx
                .iter()
                .zip(shape)
                .zip(margin)
                .all(|((&i, &n), &m)| i >= m && i.saturating_add(m) < n);
            if inside {
                out.push(idx.clone());
            }
        }
    }
    out
}
