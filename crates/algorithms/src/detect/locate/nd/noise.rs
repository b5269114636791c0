//! trackpy's `measure_noise` in n dimensions: the mean and standard deviation of the raw pixels
//! outside `binary_dilation(image != 0, structure=binary_mask(radius))`, as NumPy forms them.

use super::Kind;
use super::prep::split;
use super::refine::{Mask, numpy_sum_f32};
use crate::detect::filters::numpy_sum;

/// The pixels within the mask of a non-zero pixel of `img` (`binary_dilation` with the mask as
/// structure, zero border). The mask is a union of runs along the last axis, one per offset of
/// the leading axes: the non-zero pixels are dilated along the last axis once per half-width,
/// then shifted by every leading offset.
fn covered(img: &[u32], shape: &[usize], m: &Mask) -> Vec<bool> {
    let nd = shape.len();
    let last = nd - 1;
    let (rows, w, _) = split(shape, last);
    let rl = m.radius[last];
    // the runs: leading offsets (relative to the centre) and the half-width along the last axis
    let mut runs: Vec<(Vec<isize>, usize)> = Vec::new();
    for p in &m.points {
        let lead: Vec<isize> = (0..last)
            .map(|a| p[a] as isize - m.radius[a] as isize)
            .collect();
        let hw = (p[last] as isize - rl as isize).unsigned_abs();
        match runs.iter_mut().find(|(l, _)| *l == lead) {
            Some(run) => run.1 = run.1.max(hw),
            None => runs.push((lead, hw)),
        }
    }
    let nz: Vec<bool> = img.iter().map(|&v| v != 0).collect();
    // near[h]: a non-zero pixel lies within |Δ| ≤ h along the last axis
    let mut near: Vec<Option<Vec<bool>>> = vec![None; rl + 1];
    for (_, hw) in &runs {
        if near[*hw].is_some() {
            continue;
        }
        let h = *hw;
        let mut v = vec![false; img.len()];
        for (src, dst) in nz.chunks_exact(w).zip(v.chunks_exact_mut(w)) {
            // running count of non-zero pixels in the window [x − h, x + h]
            let mut prefix = vec![0usize; w + 1];
            for (x, &b) in src.iter().enumerate() {
                prefix[x + 1] = prefix[x] + usize::from(b);
            }
            for (x, d) in dst.iter_mut().enumerate() {
                let a = x.saturating_sub(h);
                let b = (x + h + 1).min(w);
                *d = prefix[b] > prefix[a];
            }
        }
        near[h] = Some(v);
    }
    let lead_shape = &shape[..last];
    let mut out = vec![false; img.len()];
    for row in 0..rows {
        // the leading multi-index of this row
        let mut idx = vec![0isize; last];
        let mut rem = row;
        for a in (0..last).rev() {
            idx[a] = (rem % lead_shape[a]) as isize;
            rem /= lead_shape[a];
        }
        let dst = &mut out[row * w..(row + 1) * w];
        for (lead, hw) in &runs {
            let mut src_row = 0usize;
            let mut ok = true;
            for a in 0..last {
                let j = idx[a] + lead[a];
                if j < 0 || j >= lead_shape[a] as isize {
                    ok = false;
                    break;
                }
                src_row = src_row * lead_shape[a] + j as usize;
            }
            if !ok {
                continue;
            }
            let Some(src) = &near[*hw] else {
                continue;
            };
            for (d, &s) in dst.iter_mut().zip(&src[src_row * w..(src_row + 1) * w]) {
                *d |= s;
            }
        }
    }
    out
}

/// `(mean, std)` of the raw pixels of the background (`(NaN, NaN)` without background, `(value,
/// NaN)` with one pixel), in the pixels' float type (float32 for float32 images, as NumPy's
/// `mean` and `std` keep it; float64 otherwise).
pub(super) fn measure_noise(
    img: &[u32],
    raw: &[f64],
    shape: &[usize],
    m: &Mask,
    kind: Kind,
) -> (f64, f64) {
    let cov = covered(img, shape, m);
    let bg: Vec<f64> = raw
        .iter()
        .zip(&cov)
        .filter(|(_, c)| !**c)
        .map(|(&v, _)| v)
        .collect();
    let n = bg.len();
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    if kind == Kind::F32 {
        let mean = numpy_sum_f32(&bg) / n as f32;
        if n == 1 {
            return (f64::from(mean), f64::NAN);
        }
        let sq: Vec<f64> = bg
            .iter()
            .map(|&v| {
                let d = v as f32 - mean;
                f64::from(d * d)
            })
            .collect();
        let var = numpy_sum_f32(&sq) / n as f32;
        return (f64::from(mean), f64::from(var.sqrt()));
    }
    let mean = numpy_sum(&bg) / n as f64;
    if n == 1 {
        return (mean, f64::NAN);
    }
    let sq: Vec<f64> = bg.iter().map(|&v| (v - mean) * (v - mean)).collect();
    let var = numpy_sum(&sq) / n as f64;
    (mean, var.sqrt())
}
