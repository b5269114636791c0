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
//! This file and its siblings handle isotropic σ on 2-D frames; n-D images (1-D, 3-D volumes…)
//! with scalar or per-axis (anisotropic) σ are [`nd`] ([`blob_log_nd`]).
//!
//! The settings and the σ list are in `params.rs`, the input conversion in `convert.rs`, the
//! scale-space cube with its threshold and local maxima in `scale_space.rs`, the overlap pruning
//! in `prune.rs`; this file holds the results and the drivers that chain them.

mod certified;
pub(crate) use certified::max_abs_finite;
mod convert;
mod knobs;
pub mod nd;
mod params;
mod prune;
mod scale_space;

use bridge_core::{BridgeError, Result};

use super::FrameView;
use super::real::{Real, give_buf, take_buf};
use scale_space::{Cand, degenerate, find_peaks, log_peaks_banded, threshold_from, threshold_of};

pub(crate) use certified::{DevicePlan, Found as DeviceFound};
pub(crate) use convert::check_scale_space_range;
pub use convert::{Converted, convert_frame};
pub use knobs::{CpuKnobs, FusedKernels};
pub use nd::{
    BlobLogNdParams, BlobsNd, Border, Sigma, VolumeView, blob_log_nd, blob_log_nd_on_device,
    blob_log_nd_on_device_with, blob_log_nd_prescaled, blob_log_nd_view,
};
pub(crate) use scale_space::Cand as SearchCand;
// used by the device back end only
#[cfg(any(feature = "cuda", feature = "opencl"))]
pub(crate) use convert::check_range_of;
#[cfg(any(feature = "cuda", feature = "opencl"))]
pub(crate) use params::border_covers;
pub use params::{BlobLogParams, MAX_NUM_SIGMA, Prescale, sigma_list};
pub use prune::{blob_overlap_2d, pairs_within, prune_blobs};
pub(crate) use scale_space::banded_host_bytes;
pub use scale_space::{Precision, log_cube, log_cube_acc};

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
    blob_log_typed_acc(image, h, w, p, Precision::F64)
}

/// [`blob_log_typed`] with a chosen accumulation (and the process's [`CpuKnobs`]).
pub fn blob_log_typed_acc<T: Real>(
    image: &[T],
    h: usize,
    w: usize,
    p: &BlobLogParams,
    acc: Precision,
) -> Result<BlobLogDiag> {
    blob_log_typed_with(image, (h, w), p, acc, &CpuKnobs::process())
}

/// [`blob_log_typed`] with a chosen accumulation and knobs (which change the speed, never the
/// result).
pub fn blob_log_typed_with<T: Real>(
    image: &[T],
    (h, w): (usize, usize),
    p: &BlobLogParams,
    acc: Precision,
    knobs: &CpuKnobs,
) -> Result<BlobLogDiag> {
    p.validate()?;
    if h == 0 || w == 0 || h.checked_mul(w) != Some(image.len()) {
        return Err(BridgeError::shape_mismatch(
            format!("{h}x{w}"),
            image.len(),
            "blob_log frame",
        ));
    }
    let sigmas = p.sigma_list::<T>();
    // the maxima above a lower bound of the threshold, without the cube in memory: found in
    // an f32 scale space where its error bound settles them (exact values of the working
    // type's cube where it does not), else in the working type's cube
    let certified = if acc != Precision::F32 && certified::enabled(knobs) {
        let s64: Vec<f64> = sigmas.iter().map(|s| s.to_f64()).collect();
        match T::as_f64s(image) {
            Some(img) => certified::log_peaks_certified(
                img,
                (h, w),
                &s64,
                p,
                (certified::Reference::F64, knobs),
            ),
            None if T::IS_F32 => {
                // an f32 frame: its pixels in f64 (exact) for the exact voxels
                let mut img: Vec<f64> = take_buf(image.len());
                for (d, v) in img.iter_mut().zip(image) {
                    *d = v.to_f64();
                }
                let out = certified::log_peaks_certified(
                    &img,
                    (h, w),
                    &s64,
                    p,
                    (certified::Reference::F32, knobs),
                );
                give_buf(img);
                out
            }
            None => None,
        }
    } else {
        None
    };
    let (cands, lo, hi) = match certified {
        Some((cands, lo, hi)) => (
            cands.iter().map(|c| c.map(T::from_f64)).collect(),
            T::from_f64(lo),
            T::from_f64(hi),
        ),
        None => log_peaks_banded(image, h, w, &sigmas, (acc, knobs.band_rows), p),
    };
    Ok(threshold_order_and_prune(cands, &sigmas, p, (lo, hi)))
}

/// The threshold from the cube's extrema `(lo, hi)`, the maxima (in raster order of
/// (y, x, scale)) above it, sorted by descending response (stable) and pruned.
fn threshold_order_and_prune<T: Real>(
    mut cands: Vec<Cand<T>>,
    sigmas: &[T],
    p: &BlobLogParams,
    (lo, hi): (T, T),
) -> BlobLogDiag {
    let (thr, lo, hi) = threshold_from((lo, hi), p);
    if degenerate(lo, hi) {
        cands.clear();
    }
    cands.retain(|c| c.v > thr);
    order_and_prune(cands, sigmas, p, (thr, lo, hi))
}

/// `blob_log` of one frame from a device's certified search (issue 29): `found` is what the
/// device's f32 search of the frame found, `image` the frame in the working type held in f64
/// (f32 pixels exactly for a float32 frame). The host settles it with the exact voxels of
/// [`certified::settle_device`], so the blobs are those of [`blob_log_typed_with`] bit for bit;
/// where the frame cannot be certified (see there) it is computed on the CPU (`.1` true).
pub(crate) fn blobs_of_device_search<T: Real>(
    image: &[f64],
    (h, w): (usize, usize),
    p: &BlobLogParams,
    plan: &DevicePlan,
    found: certified::Found<'_>,
) -> Result<(Vec<Blob>, bool)> {
    let sigmas = p.sigma_list::<T>();
    match certified::settle_device(plan, image, (h, w), p, found) {
        Some((mut cands, lo, hi)) => {
            // the device's candidates come in any order
            cands.sort_unstable_by_key(|c| (c.y, c.x, c.s));
            let cands = cands.iter().map(|c| c.map(T::from_f64)).collect();
            let (lo, hi) = (T::from_f64(lo), T::from_f64(hi));
            Ok((
                threshold_order_and_prune(cands, &sigmas, p, (lo, hi)).blobs,
                false,
            ))
        }
        // a blank frame (a closed shutter): a cube of zeros is flat, so no blobs
        None if image.iter().all(|&v| v == 0.0) => Ok((Vec::new(), true)),
        None => {
            let img: Vec<T> = image.iter().map(|&v| T::from_f64(v)).collect();
            let knobs = CpuKnobs::process();
            let diag = blob_log_typed_with(&img, (h, w), p, Precision::F64, &knobs)?;
            Ok((diag.blobs, true))
        }
    }
}

/// The post-cube part of the pipeline (threshold, peaks, order, pruning) on a cube computed
/// elsewhere: `sigmas.len()` planes of `h × w`, scale-major. A cube of another length, an empty
/// plane or invalid parameters are errors.
pub fn peaks_and_prune<T: Real>(
    cube: &[T],
    h: usize,
    w: usize,
    sigmas: &[T],
    p: &BlobLogParams,
) -> Result<BlobLogDiag> {
    p.validate()?;
    let want = h.checked_mul(w).and_then(|n| n.checked_mul(sigmas.len()));
    if h == 0 || w == 0 || sigmas.is_empty() || want != Some(cube.len()) {
        return Err(BridgeError::shape_mismatch(
            format!("{} scales of {h}x{w}", sigmas.len()),
            cube.len(),
            "blob_log cube",
        ));
    }
    Ok(peaks_and_prune_in(
        cube,
        h,
        w,
        sigmas,
        p,
        threshold_of(cube, p),
    ))
}

/// [`peaks_and_prune`] with the threshold and the cube extrema already known.
fn peaks_and_prune_in<T: Real>(
    cube: &[T],
    h: usize,
    w: usize,
    sigmas: &[T],
    p: &BlobLogParams,
    (thr, lo, hi): (T, T, T),
) -> BlobLogDiag {
    let ns = sigmas.len();
    let cands = if degenerate(lo, hi) {
        Vec::new()
    } else {
        find_peaks(cube, h, w, ns, thr, p.exclude_border)
    };
    order_and_prune(cands, sigmas, p, (thr, lo, hi))
}

/// The maxima (in raster order) sorted by descending response (stable), pruned.
fn order_and_prune<T: Real>(
    mut cands: Vec<Cand<T>>,
    sigmas: &[T],
    p: &BlobLogParams,
    (thr, lo, hi): (T, T, T),
) -> BlobLogDiag {
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
    blob_log_diag_acc(frame, p, Precision::F64)
}

/// [`blob_log_diag`] with a chosen accumulation (and the process's [`CpuKnobs`]).
pub fn blob_log_diag_acc(
    frame: FrameView<'_>,
    p: &BlobLogParams,
    acc: Precision,
) -> Result<BlobLogDiag> {
    blob_log_diag_with(frame, p, acc, &CpuKnobs::process())
}

/// [`blob_log_diag`] with a chosen accumulation and knobs (which change the speed, never the
/// result).
pub fn blob_log_diag_with(
    frame: FrameView<'_>,
    p: &BlobLogParams,
    acc: Precision,
    knobs: &CpuKnobs,
) -> Result<BlobLogDiag> {
    p.validate()?;
    frame.validate()?;
    // the working type (and cube) is f32 for f32 frames, f64 otherwise; f32 sums (--fast)
    // bound it as f32 too
    let f32_sums = acc == Precision::F32 || matches!(frame, FrameView::F32(_));
    check_scale_space_range(&frame, p, f32_sums)?;
    let (h, w) = frame.dim();
    // the converted frame goes back to the pool for the next frame
    match convert_frame(&frame, p.prescale)? {
        Converted::F32(v) => {
            let out = blob_log_typed_with(&v, (h, w), p, acc, knobs);
            give_buf(v);
            out
        }
        Converted::F64(v) => {
            let out = blob_log_typed_with(&v, (h, w), p, acc, knobs);
            give_buf(v);
            out
        }
    }
}

/// [`blob_log_frame`] with a chosen accumulation (and the process's [`CpuKnobs`]).
pub fn blob_log_frame_acc(
    frame: FrameView<'_>,
    p: &BlobLogParams,
    acc: Precision,
) -> Result<Vec<Blob>> {
    Ok(blob_log_diag_acc(frame, p, acc)?.blobs)
}

/// [`blob_log_frame`] with a chosen accumulation and knobs (which change the speed, never the
/// result).
pub fn blob_log_frame_with(
    frame: FrameView<'_>,
    p: &BlobLogParams,
    acc: Precision,
    knobs: &CpuKnobs,
) -> Result<Vec<Blob>> {
    Ok(blob_log_diag_with(frame, p, acc, knobs)?.blobs)
}

/// `blob_log` on one frame: the surviving blobs in candidate order.
pub fn blob_log_frame(frame: FrameView<'_>, p: &BlobLogParams) -> Result<Vec<Blob>> {
    Ok(blob_log_diag(frame, p)?.blobs)
}

/// `blob_log` on a 2-D f64 array view (convenience, f64 working type).
pub fn blob_log(image: ndarray::ArrayView2<'_, f64>, p: &BlobLogParams) -> Result<Vec<Blob>> {
    blob_log_frame(FrameView::F64(image), p)
}
