//! `skimage.feature.blob_log` (scikit-image 0.26) on 2-D frames, plus the `prescale` extension.
//!
//! Pipeline (spec §1): input conversion → σ list → scale-space cube
//! `cube[i] = −σ_i²·(L_yy + L_xx)` → threshold → 3×3×3 local maxima (`nearest` edges, plateaus
//! included) → border exclusion (spatial axes only) → stable sort by descending response →
//! overlap pruning over the pairs in **ascending lexicographic (i, j) order**.
//!
//! The working type is f32 for f32 input and f64 otherwise; every intermediate is rounded where
//! NumPy rounds it, including the σ list (NumPy's float32 `linspace`) and the pruning arithmetic
//! (float32 for float32 input), so the fixture blob sets are reproduced exactly.
//!
//! Only isotropic σ on 2-D frames is implemented.

use bridge_core::{BridgeError, Result};
use rayon::prelude::*;

use super::FrameView;
use super::filters::{LogKernels, LogScratch, log_plane};
use super::real::{Real, give_buf, take_buf};

/// Input scaling before the LoG (spec §1.3).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Prescale {
    /// scikit-image `img_as_float`: unsigned integers divided by the dtype maximum, floats
    /// unchanged.
    #[default]
    Legacy,
    /// `(x − min)/(max − min)` per frame; an error on a constant frame.
    MinMax,
    /// `(x − c)/(d − c)`; an error unless `c < d`.
    Range(f64, f64),
    /// Values unchanged (integers are converted to f64).
    None,
}

impl std::str::FromStr for Prescale {
    type Err = BridgeError;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "legacy" => Ok(Prescale::Legacy),
            "minmax" => Ok(Prescale::MinMax),
            "none" => Ok(Prescale::None),
            other => {
                if let Some(rest) = other.strip_prefix("range:") {
                    let mut it = rest.split(',');
                    let c = it.next().and_then(|v| v.trim().parse::<f64>().ok());
                    let d = it.next().and_then(|v| v.trim().parse::<f64>().ok());
                    if let (Some(c), Some(d), None) = (c, d, it.next()) {
                        return Ok(Prescale::Range(c, d));
                    }
                }
                Err(BridgeError::invalid_argument(
                    "prescale",
                    format!("{s:?}: expected legacy, minmax, none or range:C,D"),
                ))
            }
        }
    }
}

/// The largest accepted [`BlobLogParams::num_sigma`]: a scale space of more scales than this is
/// a mistake (scikit-image's default is 10), and each scale costs a full f64 image per frame.
pub const MAX_NUM_SIGMA: usize = 1000;

/// Parameters of [`blob_log`]; [`Default`] gives scikit-image's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct BlobLogParams {
    /// Smallest σ (default 1).
    pub min_sigma: f64,
    /// Largest σ (default 50).
    pub max_sigma: f64,
    /// Number of scales (default 10).
    pub num_sigma: usize,
    /// Absolute threshold (default `Some(0.2)`); `None` means the cube minimum.
    pub threshold: Option<f64>,
    /// Relative threshold: the threshold becomes `max(thr, threshold_rel · max(cube))`.
    pub threshold_rel: Option<f64>,
    /// Overlap fraction above which the smaller blob is removed (default 0.5).
    pub overlap: f64,
    /// Logarithmically spaced scales.
    pub log_scale: bool,
    /// Peaks within this many pixels of the border are dropped `(rows, cols)`; default `(0, 0)`.
    pub exclude_border: (usize, usize),
    /// Input scaling (crate extension, default [`Prescale::Legacy`]).
    pub prescale: Prescale,
}

impl Default for BlobLogParams {
    fn default() -> Self {
        BlobLogParams {
            min_sigma: 1.0,
            max_sigma: 50.0,
            num_sigma: 10,
            threshold: Some(0.2),
            threshold_rel: None,
            overlap: 0.5,
            log_scale: false,
            exclude_border: (0, 0),
            prescale: Prescale::Legacy,
        }
    }
}

impl BlobLogParams {
    /// Check every parameter.
    pub fn validate(&self) -> Result<()> {
        let bad = |n: &str, r: String| Err(BridgeError::invalid_argument(n, r));
        if !(self.min_sigma.is_finite() && self.min_sigma > 0.0) {
            return bad(
                "min_sigma",
                format!("must be a positive number, got {}", self.min_sigma),
            );
        }
        if !(self.max_sigma.is_finite() && self.max_sigma > 0.0) {
            return bad(
                "max_sigma",
                format!("must be a positive number, got {}", self.max_sigma),
            );
        }
        if self.min_sigma > self.max_sigma {
            return bad(
                "min_sigma",
                format!(
                    "min_sigma ({}) is larger than max_sigma ({})",
                    self.min_sigma, self.max_sigma
                ),
            );
        }
        if self.num_sigma == 0 || self.num_sigma > MAX_NUM_SIGMA {
            return bad(
                "num_sigma",
                format!(
                    "must be in 1..={MAX_NUM_SIGMA} (scales of the LoG scale space), got {}",
                    self.num_sigma
                ),
            );
        }
        if self.max_sigma > 1.0e4 {
            return bad(
                "max_sigma",
                format!("{} is unreasonably large", self.max_sigma),
            );
        }
        if let Some(t) = self.threshold
            && !t.is_finite()
        {
            return bad("threshold", format!("must be finite, got {t}"));
        }
        if let Some(t) = self.threshold_rel
            && !t.is_finite()
        {
            return bad("threshold_rel", format!("must be finite, got {t}"));
        }
        if !(0.0..=1.0).contains(&self.overlap) {
            return bad(
                "overlap",
                format!("must lie in [0, 1], got {}", self.overlap),
            );
        }
        if let Prescale::Range(c, d) = self.prescale
            && !(c.is_finite() && d.is_finite() && c < d)
        {
            return bad("prescale", format!("range({c}, {d}) needs finite c < d"));
        }
        Ok(())
    }

    /// The σ list in the working type (NumPy `linspace`/`logspace` semantics).
    pub fn sigma_list<T: Real>(&self) -> Vec<T> {
        sigma_list::<T>(
            self.min_sigma,
            self.max_sigma,
            self.num_sigma,
            self.log_scale,
        )
    }
}

/// One detection: integer position, σ of its scale and the cube value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Blob {
    /// Row (an integer value).
    pub y: f64,
    /// Column (an integer value).
    pub x: f64,
    /// σ of the scale (in the working type, widened).
    pub sigma: f64,
    /// Cube value at the peak (LoG response, spec §1.9).
    pub response: f64,
    /// Index of the scale in the σ list.
    pub scale_index: usize,
}

/// NumPy `linspace(start, stop, num)` evaluated in `T`.
fn linspace<T: Real>(start: T, stop: T, num: usize) -> Vec<T> {
    if num == 1 {
        return vec![start];
    }
    let div = T::from_f64((num - 1) as f64);
    let step = (stop - start) / div;
    let mut v: Vec<T> = (0..num)
        .map(|i| T::from_f64(i as f64) * step + start)
        .collect();
    if let Some(last) = v.last_mut() {
        *last = stop;
    }
    v
}

/// The σ list of `blob_log` in the working type `T` (spec §1.4; `sigma_lists.csv`).
pub fn sigma_list<T: Real>(min_sigma: f64, max_sigma: f64, num: usize, log_scale: bool) -> Vec<T> {
    let lo = T::from_f64(min_sigma);
    let hi = T::from_f64(max_sigma);
    if log_scale {
        let (a, b) = if T::IS_F32 {
            (
                T::from_f64(f64::from((lo.to_f64() as f32).log10())),
                T::from_f64(f64::from((hi.to_f64() as f32).log10())),
            )
        } else {
            (
                T::from_f64(lo.to_f64().log10()),
                T::from_f64(hi.to_f64().log10()),
            )
        };
        linspace(a, b, num)
            .into_iter()
            .map(|e| {
                if T::IS_F32 {
                    T::from_f64(f64::from(10f32.powf(e.to_f64() as f32)))
                } else {
                    T::from_f64(10f64.powf(e.to_f64()))
                }
            })
            .collect()
    } else {
        linspace(lo, hi, num)
    }
}

/// The frame converted to the working type according to `prescale`.
pub enum Converted {
    /// Working type f32.
    F32(Vec<f32>),
    /// Working type f64.
    F64(Vec<f64>),
}

fn min_max(v: impl Iterator<Item = f64>) -> (f64, f64) {
    v.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    })
}

/// Convert a frame to the working type (spec §1.2, §1.3).
pub fn convert_frame(frame: &FrameView<'_>, prescale: Prescale) -> Result<Converted> {
    let range = match prescale {
        Prescale::MinMax => {
            let (lo, hi) = match frame {
                FrameView::U8(a) => min_max(a.iter().map(|&v| f64::from(v))),
                FrameView::U16(a) => min_max(a.iter().map(|&v| f64::from(v))),
                FrameView::F32(a) => min_max(a.iter().map(|&v| f64::from(v))),
                FrameView::F64(a) => min_max(a.iter().copied()),
            };
            if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less) {
                return Err(BridgeError::InvalidInput(format!(
                    "prescale minmax needs min < max, but the frame is constant ({lo})"
                )));
            }
            Some((lo, hi))
        }
        Prescale::Range(c, d) => Some((c, d)),
        _ => None,
    };
    Ok(match (frame, prescale, range) {
        (FrameView::U8(a), Prescale::Legacy, _) => {
            let s = 1.0 / 255.0;
            Converted::F64(a.iter().map(|&v| f64::from(v) * s).collect())
        }
        (FrameView::U16(a), Prescale::Legacy, _) => {
            let s = 1.0 / 65535.0;
            Converted::F64(a.iter().map(|&v| f64::from(v) * s).collect())
        }
        (FrameView::F32(a), Prescale::Legacy | Prescale::None, _) => {
            Converted::F32(a.iter().copied().collect())
        }
        (FrameView::F64(a), Prescale::Legacy | Prescale::None, _) => {
            Converted::F64(a.iter().copied().collect())
        }
        (FrameView::F32(a), _, Some((c, d))) => {
            let (c, d) = (c as f32, d as f32);
            let span = d - c;
            Converted::F32(a.iter().map(|&v| (v - c) / span).collect())
        }
        (f, _, Some((c, d))) => {
            let span = d - c;
            Converted::F64(f.to_f64_vec().into_iter().map(|v| (v - c) / span).collect())
        }
        (f, _, None) => Converted::F64(f.to_f64_vec()),
    })
}

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
    let plane = h * w;
    let mut cube: Vec<T> = take_buf(plane * sigmas.len());
    let stride = super::filters::padded_stride(w);
    let mut padded: Vec<A> = take_buf(h * stride);
    for (dst, src) in padded.chunks_mut(stride).zip(image.chunks(w.max(1))) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = A::from_f64(s.to_f64());
        }
    }
    let image = &padded[..];
    let rmax = sigmas
        .iter()
        .map(|s| super::filters::kernel_radius(s.to_f64()))
        .max()
        .unwrap_or(0);
    cube.par_chunks_mut(plane.max(1))
        .zip(sigmas.par_iter())
        .for_each_init(
            || LogScratch::<T, A>::new(h, w, rmax),
            |scratch, (out, &s)| {
                let k = LogKernels::new(s.to_f64(), T::IS_F32);
                let s2 = s * s;
                log_plane(image, stride, h, w, &k, scratch, out, |lyy, lxx| {
                    (-(lyy + lxx)) * s2
                });
            },
        );
    give_buf(padded);
    cube
}

/// A candidate peak before pruning.
#[derive(Debug, Clone, Copy)]
struct Cand<T> {
    y: usize,
    x: usize,
    s: usize,
    v: T,
}

/// Effective threshold (spec §1.5) and the cube extrema.
fn threshold_of<T: Real>(cube: &[T], p: &BlobLogParams) -> (T, T, T) {
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
    let mut thr = p.threshold.map(T::from_f64).unwrap_or(lo);
    if let Some(rel) = p.threshold_rel {
        let t = T::from_f64(rel) * hi;
        if t > thr {
            thr = t;
        }
    }
    (thr, lo, hi)
}

/// Local maxima of the cube above `thr`, in raster order of (y, x, scale).
fn find_peaks<T: Real>(
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
            // voxels above the threshold in this row, scanned plane by plane (contiguous)
            let mut above: Vec<(usize, usize)> = Vec::new();
            for s in 0..ns {
                let row = &cube[s * plane + y * w + bx..s * plane + (y + 1) * w - bx];
                // test 16 voxels at a time (branch-free, vectorisable), then look closer
                for (c, ch) in row.chunks(16).enumerate() {
                    if !ch.iter().fold(false, |a, &v| a | (v > thr)) {
                        continue;
                    }
                    for (k, &v) in ch.iter().enumerate() {
                        if v > thr {
                            above.push((bx + c * 16 + k, s));
                        }
                    }
                }
            }
            above.sort_unstable();
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

/// `skimage.feature.blob._blob_overlap` for 2-D isotropic blobs, in the working type
/// (Python-scalar promotion rules of NumPy 2 reproduced).
pub fn blob_overlap_2d<T: Real>(b1: (T, T, T), b2: (T, T, T)) -> T {
    let (y1, x1, s1) = b1;
    let (y2, x2, s2) = b2;
    if s1 == T::ZERO && s2 == T::ZERO {
        return T::ZERO;
    }
    let (max_sigma, r1, r2) = if s1 > s2 {
        (s1, T::ONE, s2 / s1)
    } else {
        (s2, s1 / s2, T::ONE)
    };
    let denom = max_sigma * T::from_f64(std::f64::consts::SQRT_2);
    let dy = y2 / denom - y1 / denom;
    let dx = x2 / denom - x1 / denom;
    let d = (dy * dy + dx * dx).sqrt();
    if d > r1 + r2 {
        return T::ZERO;
    }
    if d <= (r1 - r2).abs() {
        return T::ONE;
    }
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
    let ratio1 = clip((d * d + r1 * r1 - r2 * r2) / (two * d * r1));
    let acos1 = ratio1.to_f64().acos();
    let ratio2 = clip((d * d + r2 * r2 - r1 * r1) / (two * d * r2));
    let acos2 = ratio2.to_f64().acos();
    let a = -d + r2 + r1;
    let b = d - r2 + r1;
    let c = d + r2 - r1;
    let dd = d + r2 + r1;
    let root = (a * b * c * dd).to_f64().abs().sqrt();
    let area =
        r1 * r1 * T::from_f64(acos1) + r2 * r2 * T::from_f64(acos2) - T::from_f64(0.5 * root);
    let m = if r2 < r1 { r2 } else { r1 };
    area / (T::from_f64(std::f64::consts::PI) * (m * m))
}

/// Pairs `(i < j)` of candidates within `cutoff` (inclusive), in ascending lexicographic order.
pub fn pairs_within(pos: &[(f64, f64)], cutoff: f64) -> Vec<(usize, usize)> {
    let n = pos.len();
    let mut pairs = Vec::new();
    if n < 2 || cutoff.is_nan() || cutoff < 0.0 {
        return pairs;
    }
    let c2 = cutoff * cutoff;
    let cell = cutoff.max(1.0);
    let (mut ymin, mut xmin) = (f64::INFINITY, f64::INFINITY);
    for &(y, x) in pos {
        ymin = ymin.min(y);
        xmin = xmin.min(x);
    }
    let key = |y: f64, x: f64| {
        (
            ((y - ymin) / cell).floor() as i64,
            ((x - xmin) / cell).floor() as i64,
        )
    };
    let mut grid: std::collections::HashMap<(i64, i64), Vec<usize>> =
        std::collections::HashMap::new();
    for (i, &(y, x)) in pos.iter().enumerate() {
        grid.entry(key(y, x)).or_default().push(i);
    }
    let mut js = Vec::new();
    for (i, &(y, x)) in pos.iter().enumerate() {
        let (ky, kx) = key(y, x);
        js.clear();
        for dy in -1..=1 {
            for dx in -1..=1 {
                if let Some(list) = grid.get(&(ky + dy, kx + dx)) {
                    for &j in list {
                        if j > i {
                            let (yj, xj) = pos[j];
                            let d2 = (yj - y) * (yj - y) + (xj - x) * (xj - x);
                            if d2 <= c2 {
                                js.push(j);
                            }
                        }
                    }
                }
            }
        }
        js.sort_unstable();
        pairs.extend(js.iter().map(|&j| (i, j)));
    }
    pairs
}

/// Overlap pruning (spec §1.8) over candidates `(y, x, σ)` already in candidate order; returns
/// the survivor flags. Pairs are processed in ascending lexicographic `(i, j)` order.
pub fn prune_blobs<T: Real>(blobs: &[(T, T, T)], overlap: f64) -> Vec<bool> {
    let n = blobs.len();
    if n == 0 {
        return Vec::new();
    }
    let mut sig: Vec<T> = blobs.iter().map(|b| b.2).collect();
    let smax = sig
        .iter()
        .copied()
        .fold(sig[0], |a, b| if b > a { b } else { a });
    let cutoff = (T::from_f64(2.0) * smax * T::from_f64(std::f64::consts::SQRT_2)).to_f64();
    let pos: Vec<(f64, f64)> = blobs.iter().map(|b| (b.0.to_f64(), b.1.to_f64())).collect();
    let ov = T::from_f64(overlap);
    for (i, j) in pairs_within(&pos, cutoff) {
        let b1 = (blobs[i].0, blobs[i].1, sig[i]);
        let b2 = (blobs[j].0, blobs[j].1, sig[j]);
        if blob_overlap_2d(b1, b2) > ov {
            if sig[i] > sig[j] {
                sig[j] = T::ZERO;
            } else {
                sig[i] = T::ZERO;
            }
        }
    }
    sig.iter().map(|&s| s > T::ZERO).collect()
}

/// Everything `blob_log` computes for one frame in the working type.
#[derive(Debug, Clone)]
pub struct BlobLogDiag {
    /// Candidates before pruning, in candidate order.
    pub candidates: Vec<Blob>,
    /// Survivors, in candidate order.
    pub blobs: Vec<Blob>,
    /// Effective threshold.
    pub threshold: f64,
    /// Cube minimum.
    pub cube_min: f64,
    /// Cube maximum.
    pub cube_max: f64,
}

/// Run the whole pipeline on a frame already in the working type.
pub fn blob_log_typed<T: Real>(
    image: &[T],
    h: usize,
    w: usize,
    p: &BlobLogParams,
) -> Result<BlobLogDiag> {
    blob_log_typed_acc(image, h, w, p, Accumulate::F64)
}

/// [`blob_log_typed`] with a chosen accumulation.
pub fn blob_log_typed_acc<T: Real>(
    image: &[T],
    h: usize,
    w: usize,
    p: &BlobLogParams,
    acc: Accumulate,
) -> Result<BlobLogDiag> {
    p.validate()?;
    if h == 0 || w == 0 || image.len() != h * w {
        return Err(BridgeError::shape_mismatch(
            h * w,
            image.len(),
            "blob_log frame",
        ));
    }
    let sigmas = p.sigma_list::<T>();
    let cube = log_cube_acc(image, h, w, &sigmas, acc);
    let out = peaks_and_prune(&cube, h, w, &sigmas, p);
    give_buf(cube);
    Ok(out)
}

/// The post-cube part of the pipeline (threshold, peaks, order, pruning); shared with device
/// back ends that compute the cube themselves.
pub fn peaks_and_prune<T: Real>(
    cube: &[T],
    h: usize,
    w: usize,
    sigmas: &[T],
    p: &BlobLogParams,
) -> BlobLogDiag {
    let ns = sigmas.len();
    let (thr, lo, hi) = threshold_of(cube, p);
    let mut cands = if lo == hi || lo.is_nan() || hi.is_nan() {
        Vec::new()
    } else {
        find_peaks(cube, h, w, ns, thr, p.exclude_border)
    };
    cands.sort_by(|a, b| b.v.partial_cmp(&a.v).unwrap_or(std::cmp::Ordering::Equal));
    let typed: Vec<(T, T, T)> = cands
        .iter()
        .map(|c| {
            (
                T::from_f64(c.y as f64),
                T::from_f64(c.x as f64),
                sigmas[c.s],
            )
        })
        .collect();
    let keep = prune_blobs(&typed, p.overlap);
    let candidates: Vec<Blob> = cands
        .iter()
        .map(|c| Blob {
            y: c.y as f64,
            x: c.x as f64,
            sigma: sigmas[c.s].to_f64(),
            response: c.v.to_f64(),
            scale_index: c.s,
        })
        .collect();
    let blobs = candidates
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(b, _)| *b)
        .collect();
    BlobLogDiag {
        candidates,
        blobs,
        threshold: thr.to_f64(),
        cube_min: lo.to_f64(),
        cube_max: hi.to_f64(),
    }
}

/// `blob_log` on one frame with full diagnostics (candidates, threshold, cube extrema).
pub fn blob_log_diag(frame: FrameView<'_>, p: &BlobLogParams) -> Result<BlobLogDiag> {
    blob_log_diag_acc(frame, p, Accumulate::F64)
}

/// [`blob_log_diag`] with a chosen accumulation.
pub fn blob_log_diag_acc(
    frame: FrameView<'_>,
    p: &BlobLogParams,
    acc: Accumulate,
) -> Result<BlobLogDiag> {
    p.validate()?;
    frame.validate()?;
    let (h, w) = frame.dim();
    match convert_frame(&frame, p.prescale)? {
        Converted::F32(v) => blob_log_typed_acc(&v, h, w, p, acc),
        Converted::F64(v) => blob_log_typed_acc(&v, h, w, p, acc),
    }
}

/// [`blob_log_frame`] with a chosen accumulation.
pub fn blob_log_frame_acc(
    frame: FrameView<'_>,
    p: &BlobLogParams,
    acc: Accumulate,
) -> Result<Vec<Blob>> {
    Ok(blob_log_diag_acc(frame, p, acc)?.blobs)
}

/// `blob_log` on one frame: the surviving blobs in candidate order.
pub fn blob_log_frame(frame: FrameView<'_>, p: &BlobLogParams) -> Result<Vec<Blob>> {
    Ok(blob_log_diag(frame, p)?.blobs)
}

/// `blob_log` on a 2-D f64 array view (convenience, f64 working type).
pub fn blob_log(image: ndarray::ArrayView2<'_, f64>, p: &BlobLogParams) -> Result<Vec<Blob>> {
    blob_log_frame(FrameView::F64(image), p)
}
