//! The pipelines: `blob_log`, `locate`, `link` (PACO's are in `paco.rs`). Each reads its input
//! where it lives (host arrays in place through DLPack views; a movie already on the chosen GPU
//! in place: `u8`/`u16` for `blob_log`, also `f32` (and `f64` on float64 devices) for `locate`), releases the GIL while computing, and checks for Ctrl-C between
//! batches of frames (`KeyboardInterrupt`).

use algorithms::detect::{
    BlobLogParams, DetectBackend, FrameView, LocateParams, LogDetector, MultiPolicy, Prescale,
    backend_for, blob_log_frames_multi, locate_frames_multi,
};
use algorithms::track::LinkParams;
use bridge_core::{BridgeError, DType, Device};
use ndarray::{Array2, ArrayView2, ArrayViewD, Axis, Ix2, Ix3};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{IntoPy, invalid};
use crate::held::Held;
use crate::import::import_held;

/// Frames of a 2-D image or 3-D movie view, and whether it was a movie.
fn frames_of<'a, T: Copy>(
    v: ArrayViewD<'a, T>,
    wrap: fn(ArrayView2<'a, T>) -> FrameView<'a>,
) -> PyResult<(Vec<FrameView<'a>>, bool)> {
    match v.ndim() {
        2 => {
            let v = v
                .into_dimensionality::<Ix2>()
                .map_err(|e| invalid(e.to_string()))?;
            Ok((vec![wrap(v)], false))
        }
        3 => {
            let v = v
                .into_dimensionality::<Ix3>()
                .map_err(|e| invalid(e.to_string()))?;
            let n = v.len_of(Axis(0));
            Ok((
                (0..n)
                    .map(|i| wrap(v.index_axis_move(Axis(0), i)))
                    .collect(),
                true,
            ))
        }
        n => Err(invalid(format!(
            "expected a 2-D image (H, W) or a 3-D movie (T, H, W), got {n} dimension(s)"
        ))),
    }
}

/// `held` itself when it is host memory, else a host copy of it kept in `keep` (checked against
/// the host budget first; `what` names the call in the error).
pub(crate) fn host_held<'a>(
    held: &'a Held,
    keep: &'a mut Option<Held>,
    what: &str,
) -> PyResult<&'a Held> {
    if held.device() == Device::Cpu {
        return Ok(held);
    }
    let h = held.host_copy(
        &format!("{what}: reading the movie back to the host"),
        "detect on the device it lives on (device=\"auto\"), or on fewer frames",
    )?;
    Ok(keep.insert(Held::Bridge(std::sync::Arc::new(
        bridge_core::Array::from_host(h),
    ))))
}

/// Host frames of `held` (a host view, or a host copy of a device array kept in `keep`, checked
/// against the host budget first; `what` names the function for its error).
fn host_frames<'a>(
    held: &'a Held,
    keep: &'a mut Option<Held>,
    what: &str,
) -> PyResult<(Vec<FrameView<'a>>, bool)> {
    let src = host_held(held, keep, what)?;
    match src.dtype() {
        DType::U8 => frames_of(src.host_view::<u8>().py_err()?, FrameView::U8),
        DType::U16 => frames_of(src.host_view::<u16>().py_err()?, FrameView::U16),
        DType::F32 => frames_of(src.host_view::<f32>().py_err()?, FrameView::F32),
        DType::F64 => frames_of(src.host_view::<f64>().py_err()?, FrameView::F64),
        other => Err(invalid(format!(
            "images of {other} pixels: detection takes uint8, uint16, float32 or float64 (cast \
             first)"
        ))),
    }
}

/// Run `f` on batches of `frames` with the GIL released, checking for Ctrl-C in between. An
/// input error of a movie's batch names its frames (`InvalidInput.frames` in Python).
fn batched<R: Send>(
    py: Python<'_>,
    frames: &[FrameView<'_>],
    batch: usize,
    f: impl Fn(&[FrameView<'_>]) -> bridge_core::Result<Vec<R>> + Send + Sync,
) -> PyResult<Vec<R>> {
    let mut out = Vec::with_capacity(frames.len());
    let batches = frames.chunks(batch.max(1)).map(Ok);
    let total = Some(frames.len());
    for piece in bridge_core::pieces::pieces(batches, |c| c.len()).of(total) {
        let piece = piece.py_err()?;
        let r = piece.errors(py.detach(|| f(piece.data))).py_err()?;
        out.extend(r);
        py.check_signals()?;
    }
    Ok(out)
}

/// Whether detection runs on `d` (it has a back end there).
fn supports_detect(d: Device) -> bridge_core::Result<()> {
    backend_for(&arraybridge::open_device(d)?).map(|_| ())
}

/// The workload of detecting `held` (a 2-D image or a 3-D movie) at `flops_per_pixel`.
fn movie_workload(held: &Held, flops_per_pixel: f64) -> bridge_core::offload::Workload {
    let s = held.shape();
    let (t, h, w) = match s.as_slice() {
        [h, w] => (1, *h, *w),
        [t, h, w] => (*t, *h, *w),
        _ => (1, 1, s.iter().product()),
    };
    arraybridge::runtime::detect_workload((t, h, w), held.dtype().size_of(), flops_per_pixel)
}

/// The devices of a device list (`"opencl:0,opencl:1"` or `"all"`, with the command line's
/// meaning: `arraybridge::runtime::device_list`), open, with their detection back ends; `None`
/// for one device or `"auto"`.
fn detect_list(device: &str) -> PyResult<Option<Vec<Box<dyn DetectBackend>>>> {
    let supports = |d: Device| backend_for(&arraybridge::open_device(d)?).map(|_| ());
    let Some(handles) =
        arraybridge::runtime::device_list(device, "particle detection", &supports, false)
            .py_err()?
    else {
        return Ok(None);
    };
    handles
        .iter()
        .map(backend_for)
        .collect::<bridge_core::Result<Vec<_>>>()
        .py_err()
        .map(Some)
}

/// [`batched`] on several devices at once: pieces of `batch × devices × 4` frames, each shared
/// out by `run` (the several-device queue), with Ctrl-C checked between pieces.
fn batched_multi<R: Send>(
    py: Python<'_>,
    frames: &[FrameView<'_>],
    batch: usize,
    devices: usize,
    run: impl Fn(&[FrameView<'_>]) -> bridge_core::Result<Vec<R>> + Send + Sync,
) -> PyResult<Vec<R>> {
    batched(py, frames, batch.saturating_mul(devices.max(1) * 4), run)
}

/// `value` of argument `name` within `lo..=hi` (the command line's ranges), else `InvalidInput`
/// naming it: Python passes any int that fits a `usize`, and 0 or a huge count was accepted
/// where the command line refuses it.
pub(crate) fn in_range(name: &str, value: usize, lo: usize, hi: usize) -> PyResult<()> {
    if (lo..=hi).contains(&value) {
        return Ok(());
    }
    Err(invalid(format!(
        "invalid argument {name}: must be in {lo}..={hi}, got {value}"
    )))
}

/// The command line's `--batch-size` range.
const MAX_BATCH: usize = 100_000;

/// `(frames, h, w)` of a movie's frames (all of one size), `None` when there are none.
fn frames_dim(frames: &[FrameView<'_>]) -> Option<(usize, usize, usize)> {
    let (h, w) = frames.first()?.dim();
    Some((frames.len(), h, w))
}

/// `blob_log`'s host memory, checked against the budget before any frame is detected, as the
/// command line checks it (`LogDetector::check_memory_on`): each frame in flight (a batch, in
/// parallel) needs what `backend` holds for it (the CPU: the frame in float64, its padded copy
/// and a few rows of every scale; elsewhere the whole scale space), plus the kernels. A
/// broadcast view of a few bytes is detected as the frames it stands for.
fn check_blob_log_memory(
    frames: &[FrameView<'_>],
    p: &BlobLogParams,
    batch_size: usize,
    backend: &dyn DetectBackend,
) -> PyResult<()> {
    let Some((n, h, w)) = frames_dim(frames) else {
        return Ok(());
    };
    let detector = LogDetector {
        params: p.clone(),
        batch_size,
        ..LogDetector::default()
    };
    // the library names the command line's flags; Python has keywords
    let r = detector
        .check_memory_on(h, w, n, &[backend])
        .map_err(|e| match e {
            BridgeError::TooLarge {
                what,
                requested,
                limit,
                limited_by,
                hint,
            } => BridgeError::TooLarge {
                what: what
                    .replace("(--num-sigma)", "(num_sigma)")
                    .replace("(--max-sigma)", "(max_sigma)")
                    .replace("(--batch-size)", "(batch_size)"),
                requested,
                limit,
                limited_by,
                hint,
            },
            e => e,
        });
    crate::memory::check_result(r)
}

/// `locate`'s host memory, checked against the budget before any frame is located (the
/// library's estimate, [`algorithms::detect::locate::check_memory`], as the command line
/// checks it).
fn check_locate_memory(frames: &[FrameView<'_>], batch_size: usize) -> PyResult<()> {
    let Some((n, h, w)) = frames_dim(frames) else {
        return Ok(());
    };
    crate::memory::check_result(algorithms::detect::locate::check_memory(
        h,
        w,
        batch_size.min(n),
        "batch_size",
    ))
}

/// Blobs of a movie already on `device` (`u8`/`u16`, C-contiguous), read in place; `None` when
/// the movie cannot be read there ([`algorithms::detect::blob_log_in_place`]).
fn resident_blobs(
    py: Python<'_>,
    held: &Held,
    device: Device,
    p: &BlobLogParams,
) -> PyResult<Option<Vec<Vec<algorithms::detect::Blob>>>> {
    let Held::Bridge(a) = held else {
        return Ok(None);
    };
    if a.device() != device || a.ndim() != 3 {
        return Ok(None);
    }
    py.detach(|| algorithms::detect::blob_log_in_place(a, p))
        .py_err()
}

/// Features of a movie already on `device` (`u8`/`u16`/`f32`, `f64` where the device computes
/// in float64; C-contiguous), read in place by the device `locate`; `None` when the movie
/// cannot be read there ([`algorithms::detect::locate_in_place`]).
fn resident_features(
    py: Python<'_>,
    held: &Held,
    device: Device,
    p: &LocateParams,
) -> PyResult<Option<Vec<Vec<algorithms::detect::Feature>>>> {
    let Held::Bridge(a) = held else {
        return Ok(None);
    };
    if a.device() != device || a.ndim() != 3 {
        return Ok(None);
    }
    py.detach(|| algorithms::detect::locate_in_place(a, p))
        .py_err()
}

/// `blob_log`: rows `(frame, y, x, sigma)` (frame 0 for a 2-D image) and whether the input was
/// a movie.
#[pyfunction]
#[pyo3(signature = (image, *, min_sigma, max_sigma, num_sigma, threshold, threshold_rel,
                    overlap, log_scale, exclude_border, prescale, device, batch_size))]
#[allow(clippy::too_many_arguments)]
pub fn blob_log<'py>(
    py: Python<'py>,
    image: &Bound<'py, PyAny>,
    min_sigma: f64,
    max_sigma: f64,
    num_sigma: usize,
    threshold: Option<f64>,
    threshold_rel: Option<f64>,
    overlap: f64,
    log_scale: bool,
    exclude_border: (usize, usize),
    prescale: &str,
    device: &str,
    batch_size: usize,
) -> PyResult<(Bound<'py, PyArray2<f64>>, bool)> {
    let p = BlobLogParams {
        min_sigma,
        max_sigma,
        num_sigma,
        threshold,
        threshold_rel,
        overlap,
        log_scale,
        exclude_border,
        prescale: prescale.parse::<Prescale>().py_err()?,
    };
    p.validate().py_err()?;
    in_range("batch_size", batch_size, 1, MAX_BATCH)?;
    let held = import_held(image)?;
    if let Some(backends) = detect_list(device)? {
        let mut keep = None;
        let (frames, movie) = host_frames(&held, &mut keep, "blob_log")?;
        for b in &backends {
            check_blob_log_memory(&frames, &p, batch_size, b.as_ref())?;
        }
        let refs: Vec<&dyn DetectBackend> = backends.iter().map(|b| b.as_ref()).collect();
        let blobs = batched_multi(py, &frames, batch_size, refs.len(), |c| {
            blob_log_frames_multi(c, &p, &refs, batch_size, MultiPolicy::default(), |_| {})
                .map(|(b, _)| b)
        })?;
        return blob_rows(py, &blobs, movie);
    }
    let device = crate::auto::pipeline_device(
        device,
        &held,
        "particle detection",
        &supports_detect,
        || {
            let flops = arraybridge::runtime::blob_log_flops_per_pixel(
                p.min_sigma,
                p.max_sigma,
                p.num_sigma,
            );
            movie_workload(&held, flops)
        },
    )?;
    let backend = backend_for(&arraybridge::open_device(device).py_err()?).py_err()?;
    let (blobs, movie) = match resident_blobs(py, &held, device, &p)? {
        Some(b) => (b, true),
        None => {
            let mut keep = None;
            let (frames, movie) = host_frames(&held, &mut keep, "blob_log")?;
            check_blob_log_memory(&frames, &p, batch_size, backend.as_ref())?;
            let b = batched(py, &frames, batch_size, |c| backend.blob_log_batch(c, &p))?;
            (b, movie)
        }
    };
    blob_rows(py, &blobs, movie)
}

/// The rows `(frame, y, x, sigma)` of every frame's blobs, and whether the input was a movie.
fn blob_rows<'py>(
    py: Python<'py>,
    blobs: &[Vec<algorithms::detect::blob_log::Blob>],
    movie: bool,
) -> PyResult<(Bound<'py, PyArray2<f64>>, bool)> {
    let rows: Vec<[f64; 4]> = blobs
        .iter()
        .enumerate()
        .flat_map(|(t, bs)| bs.iter().map(move |b| [t as f64, b.y, b.x, b.sigma]))
        .collect();
    let out = Array2::from_shape_fn((rows.len(), 4), |(i, j)| rows[i][j]);
    Ok((out.into_pyarray(py), movie))
}

/// The frames of a movie without features and why (`algorithms::detect::Empty::as_str`).
type EmptyFrames = Vec<(usize, Option<&'static str>)>;

/// `locate`: the trackpy columns, as a dict of NumPy arrays, whether the input was a movie, and
/// why each frame without features has none (`(frame index, reason)`, the reason one of
/// [`algorithms::detect::Empty`]'s names or `None`), which the Python layer turns into
/// trackpy's warnings. The reasons are found on the CPU from the host frames (a movie that
/// lives on a device is read back for it, only when a frame came back empty).
#[pyfunction]
#[pyo3(signature = (image, *, diameter, minmass, maxsize, separation, noise_size,
                    smoothing_size, threshold, invert, percentile, topn, preprocess,
                    characterize, device, batch_size, max_iterations=10))]
#[allow(clippy::too_many_arguments)]
pub fn locate<'py>(
    py: Python<'py>,
    image: &Bound<'py, PyAny>,
    diameter: usize,
    minmass: f64,
    maxsize: Option<f64>,
    separation: Option<f64>,
    noise_size: f64,
    smoothing_size: Option<usize>,
    threshold: Option<f64>,
    invert: bool,
    percentile: f64,
    topn: Option<usize>,
    preprocess: bool,
    characterize: bool,
    device: &str,
    batch_size: usize,
    max_iterations: usize,
) -> PyResult<(Bound<'py, PyDict>, bool, EmptyFrames)> {
    let p = LocateParams {
        max_iterations,
        minmass,
        maxsize,
        separation,
        noise_size,
        smoothing_size,
        threshold,
        invert,
        percentile,
        topn,
        preprocess,
        characterize,
        ..LocateParams::new(diameter)
    };
    p.validate().py_err()?;
    in_range("batch_size", batch_size, 1, MAX_BATCH)?;
    let held = import_held(image)?;
    let (feats, movie) = match detect_list(device)? {
        Some(backends) => {
            let mut keep = None;
            let (frames, movie) = host_frames(&held, &mut keep, "locate")?;
            check_locate_memory(&frames, batch_size)?;
            let refs: Vec<&dyn DetectBackend> = backends.iter().map(|b| b.as_ref()).collect();
            let f = batched_multi(py, &frames, batch_size, refs.len(), |c| {
                locate_frames_multi(c, &p, &refs, batch_size, MultiPolicy::default(), |_| {})
                    .map(|o| o.features)
            })?;
            (f, movie)
        }
        None => locate_one(py, &held, device, &p, batch_size)?,
    };
    let cols = ["y", "x", "mass", "size", "ecc", "signal", "raw_mass", "ep"];
    let mut data: Vec<Vec<f64>> = vec![Vec::new(); cols.len()];
    let mut frame = Vec::new();
    for (t, fs) in feats.iter().enumerate() {
        for f in fs {
            for (c, v) in data
                .iter_mut()
                .zip([f.y, f.x, f.mass, f.size, f.ecc, f.signal, f.raw_mass, f.ep])
            {
                c.push(v);
            }
            frame.push(t as i64);
        }
    }
    let out = PyDict::new(py);
    for (name, c) in cols.iter().zip(data) {
        out.set_item(*name, c.into_pyarray(py))?;
    }
    out.set_item("frame", frame.into_pyarray(py))?;
    let empty = why_empty(py, &held, &feats, &p)?;
    Ok((out, movie, empty))
}

/// Why each frame of `held` whose features `feats` are empty has none (in frame order):
/// [`algorithms::detect::why_empty`] on the host frames, read only when there is such a frame.
fn why_empty(
    py: Python<'_>,
    held: &Held,
    feats: &[Vec<algorithms::detect::Feature>],
    p: &LocateParams,
) -> PyResult<EmptyFrames> {
    let empty: Vec<usize> = (0..feats.len()).filter(|&t| feats[t].is_empty()).collect();
    if empty.is_empty() {
        return Ok(Vec::new());
    }
    let mut keep = None;
    let (frames, _) = host_frames(held, &mut keep, "locate")?;
    let mut out = Vec::with_capacity(empty.len());
    for t in empty {
        let Some(f) = frames.get(t) else { break };
        let why = py
            .detach(|| algorithms::detect::why_empty(*f, p))
            .py_err()?;
        out.push((t, why.map(|e| e.as_str())));
        py.check_signals()?;
    }
    Ok(out)
}

/// `locate` on one device (`auto`: where the movie lives, else the CPU): in place on the
/// device for a movie that lives there, else from host frames in batches.
fn locate_one(
    py: Python<'_>,
    held: &Held,
    device: &str,
    p: &LocateParams,
    batch_size: usize,
) -> PyResult<(Vec<Vec<algorithms::detect::locate::Feature>>, bool)> {
    let device =
        crate::auto::pipeline_device(device, held, "particle detection", &supports_detect, || {
            // the command line's estimate of `--method locate` (its default LoG scales)
            movie_workload(
                held,
                arraybridge::runtime::blob_log_flops_per_pixel(1.0, 3.0, 10),
            )
        })?;
    let backend: Box<dyn DetectBackend> =
        backend_for(&arraybridge::open_device(device).py_err()?).py_err()?;
    if let Some(f) = resident_features(py, held, device, p)? {
        return Ok((f, true));
    }
    let mut keep = None;
    let (frames, movie) = host_frames(held, &mut keep, "locate")?;
    check_locate_memory(&frames, batch_size)?;
    let f = batched(py, &frames, batch_size, |c| backend.locate_batch(c, p))?;
    Ok((f, movie))
}

/// `link`: trackpy's particle ids for `(frame, position)` rows, in row order; positions are
/// `(n, 2)` (`y, x`), `(n, 3)` (`z, y, x`) or `(n, 1)`. Every subnet is solved optimally unless
/// `max_subnet` caps its sources (then larger ones are linked greedily), or, with `drop`,
/// trackpy's `link_strategy='drop'` leaves the particles of every subnet unlinked (one too
/// large: `SubnetOversizeException`).
#[pyfunction]
#[pyo3(signature = (frames, pos, *, search_range, memory, max_subnet=None, adaptive=None,
                    drop=false))]
#[allow(clippy::too_many_arguments)]
pub fn link<'py>(
    py: Python<'py>,
    frames: PyReadonlyArray1<'py, i64>,
    pos: PyReadonlyArray2<'py, f64>,
    search_range: f64,
    memory: usize,
    max_subnet: Option<usize>,
    adaptive: Option<(f64, f64)>,
    drop: bool,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let frames: Vec<i64> = frames.as_array().to_vec();
    let pos = pos.as_array();
    if let Some(m) = max_subnet {
        in_range("max_subnet", m, 1, usize::MAX)?;
    }
    let p = LinkParams {
        max_subnet_sources: max_subnet.unwrap_or(usize::MAX),
        adaptive: adaptive.map(|(stop, step)| algorithms::track::Adaptive::new(stop, step)),
        link_strategy: if drop {
            algorithms::track::LinkStrategy::Drop
        } else {
            algorithms::track::LinkStrategy::Solve
        },
        ..LinkParams::new(search_range, memory)
    };
    let (ids, _) = match pos.ncols() {
        1 => link_rows::<1>(py, &frames, pos, &p)?,
        2 => link_rows::<2>(py, &frames, pos, &p)?,
        3 => link_rows::<3>(py, &frames, pos, &p)?,
        n => {
            return Err(invalid(format!(
                "positions must have 1, 2 or 3 columns ((x), (y, x) or (z, y, x)), got {n}"
            )));
        }
    }
    .py_err()?;
    Ok(ids.into_pyarray(py))
}

/// [`algorithms::track::link_nd`] on the rows of `pos` (`D` columns), without the GIL, on a
/// worker thread that Ctrl-C stops before its next frame (`KeyboardInterrupt`).
fn link_rows<const D: usize>(
    py: Python<'_>,
    frames: &[i64],
    pos: ArrayView2<'_, f64>,
    p: &LinkParams,
) -> PyResult<bridge_core::Result<(Vec<i64>, algorithms::track::LinkStats)>> {
    let pos: Vec<[f64; D]> = pos
        .rows()
        .into_iter()
        .map(|r| std::array::from_fn(|a| r[a]))
        .collect();
    crate::interrupt::run(py, &p.control, None, || {
        algorithms::track::link_nd(frames, &pos, p)
    })
}
