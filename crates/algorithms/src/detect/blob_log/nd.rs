//! `skimage.feature.blob_log` (scikit-image 0.26) on n-dimensional images, with scalar or
//! per-axis (anisotropic) σ: [`blob_log_nd`] (an image already in the working type) and
//! [`blob_log_nd_view`] (raw `u8`/`u16`/`f32`/`f64` pixels, converted as `img_as_float`).
//!
//! What is implemented, step by step as scikit-image does it:
//! 1. **Input**: `img_as_float` (unsigned integers times `1/max`, in f64; floats unchanged); the
//!    working type is f32 for f32 input and f64 otherwise.
//! 2. **σ table** ([`sigma_table`]): `min_sigma`/`max_sigma` broadcast to every axis when scalar
//!    ([`Sigma`]), then NumPy's vectorised `linspace` (with its all-axes `step == 0` rule) or
//!    `logspace` in the working type.
//! 3. **Scale space**: `cube[..., i] = −gaussian_laplace(image, σ_i) · mean(σ_i)**2`, every SciPy
//!    pass and rounding reproduced (`nd/laplace.rs`).
//! 4. **Peaks**: `peak_local_max` with a `3^(n+1)` footprint, `nearest` edges, threshold
//!    `max(threshold or min(cube), threshold_rel · max(cube))` compared in the working type,
//!    the border of [`Border`] on the spatial axes (0 on the scale axis), no peak in a constant
//!    cube; order: descending value, then raster order (`nd/peaks.rs`).
//! 5. **Output rows**: coordinates then σ: one σ column when both σ are scalars, else one per
//!    axis (`scalar_sigma`); values in the working type, widened to f64.
//! 6. **Pruning** (`nd/prune.rs`): `_prune_blobs` with `_blob_overlap` (disk in 2-D, sphere in
//!    1-D and 3-D, none above 3-D), pairs in ascending (i, j) order.
//!
//! Where it may differ from scikit-image (none of these shows in the fixtures):
//! * **Pair order of the pruning**: scikit-image iterates a Python set of pairs; here the pairs
//!   are in ascending (i, j) order, as in the 2-D code. Only chains of three or more mutually
//!   overlapping blobs can depend on the order.
//! * **Transcendentals**: the Gaussian taps use the C library's `exp`, `log_scale` its `log10`
//!   and `pow`; NumPy's SIMD (AVX-512/SVML) versions can differ by one ulp, so a kernel tap or
//!   a log-spaced σ may differ by an ulp, and the cube by about 1e-16 relative (1e-7 in f32).
//!   Blobs differ only where a value is that close to a tie (threshold or neighbour).
//! * **Validation** (typed errors instead of what NumPy would do): σ must be finite and above
//!   1e-15 (SciPy skips such an axis), at most 1e4, and `min_sigma ≤ max_sigma` on every axis
//!   (as the 2-D code; scikit-image accepts a decreasing list); `num_sigma` in
//!   `1..=`[`MAX_NUM_SIGMA`](super::MAX_NUM_SIGMA); `overlap` in `[0, 1]`; no empty axis; no NaN or infinite pixel;
//!   pixel values that would overflow the scale space are refused (as the 2-D
//!   `check_scale_space_range`); the cube and work buffers are checked against the host
//!   memory budget before anything large is allocated.
//!
//! **On the CPU**, steps 3 and 4 are by default the certified search (`nd/certified.rs`): the
//! peaks found in a float32 cube with a proven error bound, every decision the bound leaves
//! open settled with exact float64 voxels, so the rows, threshold and candidate count are those
//! of the exact cube bit for bit at about half its cost; [`CpuKnobs::certified`]
//! (`ARRAYBRIDGE_DETECT_CERTIFIED=0`) turns it off, and it declines (the exact cube runs) where
//! it cannot settle cheaply.
//!
//! **On a device** ([`blob_log_nd_on_device`]): step 3 runs on an OpenCL or CUDA device with
//! float64 (`nd/device.rs`, the same passes and roundings: the cube bit for bit), steps 4–6 on
//! the host; the rows are the CPU's.
//!
//! For a 2-D image with scalar σ the rows equal those of the 2-D
//! [`blob_log_frame`](super::blob_log_frame) (tested on its fixtures).

mod certified;
#[cfg(any(feature = "opencl", feature = "cuda"))]
mod device;
mod laplace;
mod params;
mod peaks;
mod prune;

use bridge_core::{BridgeError, Device, Result};
use ndarray::{ArrayView2, ArrayViewD};

use super::{Converted, CpuKnobs, Prescale, convert_frame};
use crate::detect::FrameView;
use crate::detect::real::Real;
use crate::exec::DeviceHandle;
pub use params::{BlobLogNdParams, Border, Sigma, sigma_table};
pub use prune::{Overlap, blob_overlap_nd, pairs_within_nd, prune_blobs_nd};

/// An n-D image in one of the pixel types `blob_log_nd_view` accepts.
#[derive(Debug, Clone)]
pub enum VolumeView<'a> {
    /// Unsigned 8-bit pixels (÷255 in f64).
    U8(ArrayViewD<'a, u8>),
    /// Unsigned 16-bit pixels (÷65535 in f64).
    U16(ArrayViewD<'a, u16>),
    /// 32-bit float pixels (f32 working type).
    F32(ArrayViewD<'a, f32>),
    /// 64-bit float pixels (f64 working type).
    F64(ArrayViewD<'a, f64>),
}

/// The blobs of [`blob_log_nd`]: one row per blob, `[coord_0, …, coord_{n−1}, σ…]`, in
/// scikit-image's order.
#[derive(Debug, Clone, PartialEq)]
pub struct BlobsNd {
    /// The rows: `ndim` coordinates (whole numbers) then `sigma_columns` σ values.
    pub rows: Vec<Vec<f64>>,
    /// Number of spatial axes.
    pub ndim: usize,
    /// 1 when both σ were scalars, else `ndim`.
    pub sigma_columns: usize,
    /// Number of peaks before pruning.
    pub candidates: usize,
    /// The effective threshold (working type, widened).
    pub threshold: f64,
}

impl BlobsNd {
    /// The coordinates of row `i`.
    pub fn coords(&self, i: usize) -> &[f64] {
        &self.rows[i][..self.ndim]
    }

    /// The σ column(s) of row `i`.
    pub fn sigmas(&self, i: usize) -> &[f64] {
        &self.rows[i][self.ndim..]
    }
}

/// `skimage.feature.blob_log(image, …)` on an n-D image already in its working type (`f32`
/// runs in float32, `f64` in float64); see the module docs.
pub fn blob_log_nd<T: Real>(image: ArrayViewD<'_, T>, p: &BlobLogNdParams) -> Result<BlobsNd> {
    blob_log_nd_in(&DeviceHandle::cpu(), image, p, &CpuKnobs::process())
}

/// [`blob_log_nd`] with the scale space computed on `device` (`knobs`: the CPU's).
fn blob_log_nd_in<T: Real>(
    device: &DeviceHandle,
    image: ArrayViewD<'_, T>,
    p: &BlobLogNdParams,
    knobs: &CpuKnobs,
) -> Result<BlobsNd> {
    let shape = image.shape().to_vec();
    let res = p.resolve(&shape)?;
    let nvox = voxels(&shape)?;
    check_memory::<T>(nvox, &shape, p.num_sigma)?;
    let raw = max_magnitude(image.iter().map(|v| v.to_f64()))?;
    check_range(raw, &res, T::IS_F32)?;
    let img: Vec<f64> = image.iter().map(|v| v.to_f64()).collect();
    run::<T>(device, &img, &shape, &res, p, knobs)
}

/// [`blob_log_nd`] on raw pixels: `u8`/`u16` go through `img_as_float` (f64 working type),
/// `f32` and `f64` are used as they are.
pub fn blob_log_nd_view(image: VolumeView<'_>, p: &BlobLogNdParams) -> Result<BlobsNd> {
    blob_log_nd_view_in(&DeviceHandle::cpu(), image, p, &CpuKnobs::process())
}

/// [`blob_log_nd_view`] with the scale space computed on `device` (`knobs`: the CPU's).
fn blob_log_nd_view_in(
    device: &DeviceHandle,
    image: VolumeView<'_>,
    p: &BlobLogNdParams,
    knobs: &CpuKnobs,
) -> Result<BlobsNd> {
    match image {
        VolumeView::U8(a) => blob_log_nd_uint(device, a, 1.0 / 255.0, p, knobs),
        VolumeView::U16(a) => blob_log_nd_uint(device, a, 1.0 / 65535.0, p, knobs),
        VolumeView::F32(a) => blob_log_nd_in(device, a, p, knobs),
        VolumeView::F64(a) => blob_log_nd_in(device, a, p, knobs),
    }
}

impl VolumeView<'_> {
    /// The image's shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            VolumeView::U8(a) => a.shape(),
            VolumeView::U16(a) => a.shape(),
            VolumeView::F32(a) => a.shape(),
            VolumeView::F64(a) => a.shape(),
        }
    }
}

/// [`blob_log_nd_view`] after `prescale`, the frame path's extension (spec §1.3): `Legacy` is
/// scikit-image's `img_as_float`; the others convert the image exactly as [`convert_frame`]
/// converts a frame (the image seen as the rows along its last axis, so `MinMax` takes one
/// minimum and maximum; float32 pixels stay in float32).
pub fn blob_log_nd_prescaled(
    image: VolumeView<'_>,
    prescale: Prescale,
    p: &BlobLogNdParams,
) -> Result<BlobsNd> {
    blob_log_nd_on_device(&DeviceHandle::cpu(), image, prescale, p)
}

/// [`blob_log_nd_prescaled`] with the scale space computed on `device`: the CPU, or an open
/// `opencl:N`/`cuda:N` with float64 (the same passes in the same order with the same
/// roundings, so the rows are the CPU's bit for bit; the peak search and the pruning run on the
/// host). A device without float64 is refused ([`BridgeError::Unsupported`]), as are torch
/// devices. On the CPU it runs with the process's [`CpuKnobs`].
pub fn blob_log_nd_on_device(
    device: &DeviceHandle,
    image: VolumeView<'_>,
    prescale: Prescale,
    p: &BlobLogNdParams,
) -> Result<BlobsNd> {
    blob_log_nd_on_device_with(device, image, prescale, p, &CpuKnobs::process())
}

/// [`blob_log_nd_on_device`] with the CPU's knobs given by value (they change the speed, never
/// the rows: with `knobs.certified` the CPU finds the exact cube's peaks in an f32 one,
/// `nd/certified.rs`).
pub fn blob_log_nd_on_device_with(
    device: &DeviceHandle,
    image: VolumeView<'_>,
    prescale: Prescale,
    p: &BlobLogNdParams,
    knobs: &CpuKnobs,
) -> Result<BlobsNd> {
    let shape = image.shape().to_vec();
    let Some(&cols) = shape
        .last()
        .filter(|&&c| c > 0 && prescale != Prescale::Legacy)
    else {
        // legacy, or an image whose shape `blob_log_nd` refuses in words
        return blob_log_nd_view_in(device, image, p, knobs);
    };
    let converted = match &image {
        VolumeView::U8(a) => convert_rows(a, cols, prescale, |r| FrameView::U8(r)),
        VolumeView::U16(a) => convert_rows(a, cols, prescale, |r| FrameView::U16(r)),
        VolumeView::F32(a) => convert_rows(a, cols, prescale, |r| FrameView::F32(r)),
        VolumeView::F64(a) => convert_rows(a, cols, prescale, |r| FrameView::F64(r)),
    }?;
    let err = |e: ndarray::ShapeError| BridgeError::invalid_argument("image", e.to_string());
    match converted {
        Converted::F32(v) => blob_log_nd_in(
            device,
            ArrayViewD::from_shape(shape, &v).map_err(err)?,
            p,
            knobs,
        ),
        Converted::F64(v) => blob_log_nd_in(
            device,
            ArrayViewD::from_shape(shape, &v).map_err(err)?,
            p,
            knobs,
        ),
    }
}

/// [`convert_frame`] of `a` seen as rows of `cols` pixels (C order).
fn convert_rows<T: Clone>(
    a: &ArrayViewD<'_, T>,
    cols: usize,
    prescale: Prescale,
    frame: impl for<'b> Fn(ArrayView2<'b, T>) -> FrameView<'b>,
) -> Result<Converted> {
    let c = a.as_standard_layout();
    let rows = c
        .view()
        .into_shape_with_order((a.len() / cols, cols))
        .map_err(|e| BridgeError::invalid_argument("image", e.to_string()))?;
    convert_frame(&frame(rows), prescale)
}

/// [`blob_log_nd`] of unsigned integer pixels times `scale` (`img_as_float`), in f64.
fn blob_log_nd_uint<P: Copy + Into<f64>>(
    device: &DeviceHandle,
    image: ArrayViewD<'_, P>,
    scale: f64,
    p: &BlobLogNdParams,
    knobs: &CpuKnobs,
) -> Result<BlobsNd> {
    let shape = image.shape().to_vec();
    let res = p.resolve(&shape)?;
    let nvox = voxels(&shape)?;
    // the scaled pixels lie in [0, 1]
    check_range(1.0, &res, false)?;
    check_memory::<f64>(nvox, &shape, p.num_sigma)?;
    let img: Vec<f64> = image.iter().map(|&v| v.into() * scale).collect();
    run::<f64>(device, &img, &shape, &res, p, knobs)
}

/// The scale-space cube of an n-D image in its working type, plane-major
/// (`cube[s · N + voxel]`, voxels in C order): `−gaussian_laplace(image, σ_s) · mean(σ_s)**2`
/// for the σ table of `min_sigma`, `max_sigma` (one value per axis), `num_sigma`, `log_scale`.
pub fn log_cube_nd<T: Real>(
    image: ArrayViewD<'_, T>,
    min_sigma: &[f64],
    max_sigma: &[f64],
    num_sigma: usize,
    log_scale: bool,
) -> Result<Vec<T>> {
    let shape = image.shape().to_vec();
    let p = BlobLogNdParams {
        min_sigma: Sigma::PerAxis(min_sigma.to_vec()),
        max_sigma: Sigma::PerAxis(max_sigma.to_vec()),
        num_sigma,
        log_scale,
        ..BlobLogNdParams::default()
    };
    let res = p.resolve(&shape)?;
    let nvox = voxels(&shape)?;
    check_memory::<T>(nvox, &shape, num_sigma)?;
    let raw = max_magnitude(image.iter().map(|v| v.to_f64()))?;
    check_range(raw, &res, T::IS_F32)?;
    let img: Vec<f64> = image.iter().map(|v| v.to_f64()).collect();
    let sigmas = sigma_table::<T>(&res.min_sigma, &res.max_sigma, num_sigma, log_scale);
    let scales: Vec<T> = sigmas.iter().map(|r| params::scale_factor(r)).collect();
    Ok(laplace::log_cube_nd(&img, &shape, &sigmas, &scales).0)
}

/// The number of voxels of `shape`, or an error when it overflows.
fn voxels(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| {
            BridgeError::invalid_argument("image", format!("shape {shape:?} is too large"))
        })
}

/// The largest magnitude of the pixels, or an error for a NaN or infinite one.
fn max_magnitude(values: impl Iterator<Item = f64>) -> Result<f64> {
    let mut m = 0f64;
    for v in values {
        if !v.is_finite() {
            return Err(BridgeError::InvalidInput(
                format!("blob_log_nd: the image holds a non-finite value ({v})").into(),
            ));
        }
        m = m.max(v.abs());
    }
    Ok(m)
}

/// Refuse pixel values that could overflow the scale space (the rule of the 2-D
/// `check_scale_space_range`, with the Laplacian's `ndim` terms): the largest magnitude must
/// stay below `max · s² / (8 · ndim)`, `s = min(1, smallest σ)`.
fn check_range(bound: f64, res: &params::Resolved, cube_f32: bool) -> Result<()> {
    let top = if cube_f32 {
        f64::from(f32::MAX)
    } else {
        f64::MAX
    };
    let smin = res.min_sigma.iter().fold(1f64, |m, &s| m.min(s));
    let ndim = res.min_sigma.len().max(1) as f64;
    let limit = top * smin * smin / (8.0 * ndim);
    if bound > limit {
        return Err(BridgeError::InvalidInput(
            format!(
                "pixel values up to {bound:e} would overflow the {} scale space (at most \
             {limit:.1e} with a smallest sigma of {smin}); rescale the image",
                if cube_f32 { "float32" } else { "float64" },
            )
            .into(),
        ));
    }
    Ok(())
}

/// Host bytes of a run on `nvox` voxels with `ns` scales in `T`, checked against the budget:
/// the f64 image and four f64 work volumes, the cube, and four planes of the peak search.
fn check_memory<T: Real>(nvox: usize, shape: &[usize], ns: usize) -> Result<()> {
    let t = std::mem::size_of::<T>() as u64;
    let per_voxel = (ns as u64)
        .saturating_add(4)
        .saturating_mul(t)
        .saturating_add(40);
    let bytes = (nvox as u64).saturating_mul(per_voxel);
    bridge_core::host::check_allocation(
        bytes,
        &format!("blob_log_nd scale space of {ns} scales on an image of shape {shape:?}"),
        "use fewer scales (num_sigma) or a smaller image",
    )
}

/// The scale-space cube, plane-major, and its extrema, computed on `device`: the CPU's passes,
/// or the same passes on the device's executor (`nd/device.rs`).
fn cube_on<T: Real>(
    device: &DeviceHandle,
    img: &[f64],
    shape: &[usize],
    sigmas: &[Vec<T>],
    scales: &[T],
) -> Result<(Vec<T>, T, T)> {
    if device.device() == Device::Cpu {
        return Ok(laplace::log_cube_nd(img, shape, sigmas, scales));
    }
    // exhaustive over the compiled-in executors (no arm without a device backend)
    match device.executor_for("blob_log on an n-D image")? {
        #[cfg(feature = "opencl")]
        crate::exec::AnyExecutor::OpenCl(e) => {
            device::log_cube_nd_on(&e, img, shape, sigmas, scales)
        }
        #[cfg(feature = "cuda")]
        crate::exec::AnyExecutor::Cuda(e) => device::log_cube_nd_on(&e, img, shape, sigmas, scales),
    }
}

/// The threshold of the peak search from the cube's extrema, in the working type:
/// `max(threshold or min(cube), threshold_rel · max(cube))`.
fn threshold_of<T: Real>(
    (threshold, threshold_rel): (Option<f64>, Option<f64>),
    (lo, hi): (T, T),
) -> T {
    let mut thr = threshold.map_or(lo, T::from_f64);
    if let Some(rel) = threshold_rel {
        let t = T::from_f64(rel) * hi;
        if t > thr {
            thr = t;
        }
    }
    thr
}

/// The pipeline on a validated image (`img`: its values in f64, C order), its scale space
/// computed on `device` (on the CPU, by the certified search where `knobs` allow it and it
/// applies).
fn run<T: Real>(
    device: &DeviceHandle,
    img: &[f64],
    shape: &[usize],
    res: &params::Resolved,
    p: &BlobLogNdParams,
    knobs: &CpuKnobs,
) -> Result<BlobsNd> {
    let ndim = shape.len();
    let sigmas = sigma_table::<T>(&res.min_sigma, &res.max_sigma, p.num_sigma, p.log_scale);
    let scales: Vec<T> = sigmas.iter().map(|r| params::scale_factor(r)).collect();
    let thresholds = (p.threshold, p.threshold_rel);
    let certified = if device.device() == Device::Cpu && knobs.certified {
        certified::certified_peaks(img, shape, (&sigmas, &scales), thresholds, &res.border)
    } else {
        None
    };
    let (cands, thr) = match certified {
        Some(found) => found,
        None => {
            let (cube, lo, hi) = cube_on(device, img, shape, &sigmas, &scales)?;
            let thr = threshold_of(thresholds, (lo, hi));
            let ns = sigmas.len();
            let cands = peaks::find_peaks_nd(&cube, shape, ns, (thr, lo, hi), &res.border);
            (cands, thr)
        }
    };
    let sigma_dim = if res.scalar_sigma { 1 } else { ndim };
    let mut coords: Vec<T> = Vec::with_capacity(cands.len() * ndim);
    let mut sig: Vec<T> = Vec::with_capacity(cands.len() * sigma_dim);
    let mut idx = vec![0usize; ndim];
    for c in &cands {
        let mut k = c.idx;
        for (a, &d) in shape.iter().enumerate().rev() {
            idx[a] = k % d;
            k /= d;
        }
        coords.extend(idx.iter().map(|&i| T::from_f64(i as f64)));
        sig.extend_from_slice(&sigmas[c.s][..sigma_dim]);
    }
    let keep = prune_blobs_nd(&coords, &sig, ndim, sigma_dim, p.overlap);
    let rows = (0..cands.len())
        .filter(|&i| keep[i])
        .map(|i| {
            let c = coords[i * ndim..(i + 1) * ndim].iter();
            let s = sig[i * sigma_dim..(i + 1) * sigma_dim].iter();
            c.chain(s).map(|v| v.to_f64()).collect()
        })
        .collect();
    Ok(BlobsNd {
        rows,
        ndim,
        sigma_columns: sigma_dim,
        candidates: cands.len(),
        threshold: thr.to_f64(),
    })
}

#[cfg(test)]
mod tests;
