//! Preprocessing of a frame (spec §2): optional inversion, trackpy's bandpass (Gaussian lowpass
//! with zero padding minus a boxcar background computed in the input dtype, clipped at the
//! threshold), and rescaling to the integer gamut.

use super::params::LocateParams;
use crate::detect::FrameView;
use crate::detect::filters::{Boundary, half_kernel, kernel_radius, numpy_sum, pass_x, pass_y};

/// `uniform_filter1d` along one axis, SciPy's running mean (running sum of the window, divided
/// by the size at each output), `nearest` edges; `store` rounds each output to the input dtype.
pub(super) fn boxcar_pass(
    data: &mut [f64],
    h: usize,
    w: usize,
    size: usize,
    axis: usize,
    store: impl Fn(f64) -> f64,
) {
    let s1 = size / 2;
    let fs = size as f64;
    if axis == 1 {
        let mut line = vec![0.0f64; w + size];
        for row in data.chunks_mut(w) {
            for (k, v) in line.iter_mut().enumerate() {
                *v = row[(k as isize - s1 as isize).clamp(0, w as isize - 1) as usize];
            }
            let mut tmp = 0.0f64;
            for &v in &line[..size] {
                tmp += v;
            }
            row[0] = store(tmp / fs);
            for k in 1..w {
                tmp += line[k + size - 1] - line[k - 1];
                row[k] = store(tmp / fs);
            }
        }
        return;
    }
    // axis 0: the same arithmetic for every column at once (rows as vectors)
    let src = data.to_vec();
    boxcar_cols(&src, data, h, w, size, store);
}

/// [`boxcar_pass`] along axis 0 from `src` into `data`: every column at once (rows as vectors).
pub(super) fn boxcar_cols(
    src: &[f64],
    data: &mut [f64],
    h: usize,
    w: usize,
    size: usize,
    store: impl Fn(f64) -> f64,
) {
    let s1 = size / 2;
    let fs = size as f64;
    let row = |k: isize| {
        let j = (k - s1 as isize).clamp(0, h as isize - 1) as usize;
        &src[j * w..(j + 1) * w]
    };
    let mut tmp = vec![0.0f64; w];
    for k in 0..size as isize {
        for (t, &v) in tmp.iter_mut().zip(row(k)) {
            *t += v;
        }
    }
    for (o, &t) in data[..w].iter_mut().zip(&tmp) {
        *o = store(t / fs);
    }
    for k in 1..h {
        let (add, sub) = (row((k + size - 1) as isize), row(k as isize - 1));
        let out = &mut data[k * w..(k + 1) * w];
        for (((t, &a), &b), o) in tmp.iter_mut().zip(add).zip(sub).zip(out.iter_mut()) {
            *t += a - b;
            *o = store(*t / fs);
        }
    }
}

/// `v as i32 as f64` for `0 ≤ v < 2⁵²` (means of integer pixels), in a form that vectorises:
/// adding and removing 2⁵² rounds to an integer, stepped down by one where it rounded up.
#[inline]
pub(super) fn trunc_small(v: f64) -> f64 {
    const TWO52: f64 = 4_503_599_627_370_496.0;
    let t = (v + TWO52) - TWO52;
    if t > v { t - 1.0 } else { t }
}

/// [`boxcar_pass`] along axis 1 for integer-valued data with `0 ≤ v < 2³²` (integer frames):
/// every partial sum of a window is an integer far below 2⁵³, hence exact, so summing each
/// window directly (vectorisable) gives the running sum's value bit for bit.
fn boxcar_rows_int(data: &mut [f64], w: usize, size: usize) {
    let s1 = size / 2;
    let fs = size as f64;
    let mut line = vec![0.0f64; w + size];
    let mut acc = vec![0.0f64; w];
    for row in data.chunks_mut(w) {
        for (k, v) in line.iter_mut().enumerate() {
            *v = row[(k as isize - s1 as isize).clamp(0, w as isize - 1) as usize];
        }
        acc.copy_from_slice(&line[..w]);
        for o in 1..size {
            for (a, &v) in acc.iter_mut().zip(&line[o..o + w]) {
                *a += v;
            }
        }
        for (r, &a) in row.iter_mut().zip(&acc) {
            *r = trunc_small(a / fs);
        }
    }
}

/// The non-negative half of trackpy's lowpass kernel `exp(t²/(−2σ²)) / Σ` (taps `0..=r`),
/// `None` for σ = 0 (no lowpass).
pub(super) fn lowpass_half(sig: f64) -> Option<Vec<f64>> {
    if sig > 0.0 {
        let r = kernel_radius(sig);
        let ri = r as isize;
        let phi: Vec<f64> = (-ri..=ri)
            .map(|t| ((t * t) as f64 / (-2.0 * sig * sig)).exp())
            .collect();
        let sum = numpy_sum(&phi);
        let k: Vec<f64> = phi.iter().map(|v| v / sum).collect();
        Some(half_kernel(&k))
    } else {
        None
    }
}

/// trackpy's lowpass: its own kernel `exp(t²/(−2σ²)) / Σ`, zero padding, f64.
fn lowpass(raw: &[f64], h: usize, w: usize, sig: f64) -> Vec<f64> {
    let mut low = raw.to_vec();
    if let Some(half) = lowpass_half(sig) {
        let mut tmp = vec![0.0f64; h * w];
        pass_y(&low, h, w, &[&half], Boundary::Constant, &mut [&mut tmp]);
        pass_x(&tmp, h, w, &half, Boundary::Constant, &mut low);
    }
    low
}

/// trackpy's background: a boxcar of width `sm` computed in the input dtype.
fn background(raw: &[f64], h: usize, w: usize, sm: usize, is_int: bool, is_f32: bool) -> Vec<f64> {
    if sm <= 1 {
        return raw.to_vec();
    }
    let mut bg = vec![0.0f64; raw.len()];
    if is_int {
        // means of u8/u16 pixels fit i32; truncation toward zero like NumPy's cast
        boxcar_cols(raw, &mut bg, h, w, sm, trunc_small);
    } else if is_f32 {
        boxcar_cols(raw, &mut bg, h, w, sm, |v| f64::from(v as f32));
    } else {
        boxcar_cols(raw, &mut bg, h, w, sm, |v| v);
    }
    if is_int && sm <= 32 {
        boxcar_rows_int(&mut bg, w, sm);
    } else if is_int {
        boxcar_pass(&mut bg, h, w, sm, 1, |v| v as i32 as f64);
    } else if is_f32 {
        boxcar_pass(&mut bg, h, w, sm, 1, |v| f64::from(v as f32));
    } else {
        boxcar_pass(&mut bg, h, w, sm, 1, |v| v);
    }
    bg
}

/// A frame ready for feature finding.
pub(super) struct Prepared {
    /// The raw pixels as f64 (inverted if asked).
    pub(super) raw: Vec<f64>,
    /// The bandpassed image rescaled to the integer gamut (truncated).
    pub(super) img: Vec<u32>,
    /// The factor that rescaled the bandpassed image.
    pub(super) scale: f64,
}

/// Inversion, bandpass and rescaling to the integer gamut of one frame.
pub(super) fn prepare(frame: &FrameView<'_>, p: &LocateParams) -> Prepared {
    let (h, w) = frame.dim();
    let (is_int, int_max) = match frame {
        FrameView::U8(_) => (true, 255.0),
        FrameView::U16(_) => (true, 65535.0),
        _ => (false, 255.0),
    };
    let is_f32 = matches!(frame, FrameView::F32(_));
    let mut raw = frame.to_f64_vec();
    if p.invert {
        if is_int {
            for v in &mut raw {
                *v = int_max - *v;
            }
        } else if is_f32 {
            for v in &mut raw {
                *v = f64::from(1.0f32 - *v as f32);
            }
        } else {
            for v in &mut raw {
                *v = 1.0 - *v;
            }
        }
    }
    if !p.preprocess && is_int {
        let img = raw.iter().map(|&v| v as u32).collect();
        return Prepared {
            raw,
            img,
            scale: 1.0,
        };
    }
    let bp = if p.preprocess {
        // lowpass and background are independent: compute them on two workers
        let (mut low, bg) = rayon::join(
            || lowpass(&raw, h, w, p.noise_size),
            || {
                background(
                    &raw,
                    h,
                    w,
                    p.smoothing_size.unwrap_or(p.diameter),
                    is_int,
                    is_f32,
                )
            },
        );
        let thr = p
            .threshold
            .unwrap_or(if is_int { 1.0 } else { 1.0 / 255.0 });
        for (l, b) in low.iter_mut().zip(&bg) {
            let v = *l - b;
            *l = if v >= thr { v } else { 0.0 };
        }
        low
    } else {
        raw.clone()
    };
    let (img, scale) = rescale(&bp, int_max);
    Prepared { raw, img, scale }
}

/// trackpy's `convert_to_int` of a bandpassed image: `int_max / max` (1 when the maximum is
/// not positive) times the image clipped at 0, truncated; returns the image and the factor.
pub(super) fn rescale(bp: &[f64], int_max: f64) -> (Vec<u32>, f64) {
    // the maximum is exact whatever the grouping: eight independent lanes, then combined
    let mut lanes = [f64::NEG_INFINITY; 8];
    let chunks = bp.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = l.max(v);
        }
    }
    let max = lanes
        .iter()
        .chain(tail)
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    let scale = if max > 0.0 && max.is_finite() {
        int_max / max
    } else {
        1.0
    };
    let img = bp
        .iter()
        .map(|&v| (scale * v.max(0.0)).min(int_max) as i32 as u32)
        .collect();
    (img, scale)
}
