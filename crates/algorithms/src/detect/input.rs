//! Detection (`blob_log`, [`locate_array`] for trackpy `locate`) on a movie given as a [`bridge_core::Array`] on any memory type (host ndarray,
//! CUDA, OpenCL, torch): the movie is converted through the [`Registry`] **at most once**, and
//! not at all when it already lives where the work runs.
//!
//! * On a device (`cuda:N`, `opencl:N`) a C-contiguous `u8`/`u16` movie is read **in place**
//!   when it already lives on that device ([`GpuDetect::blob_log_resident`]); from anywhere
//!   else it is converted to the device once, and the converted movie is handed back so the
//!   next call reads it in place.
//! * Float movies, and the `minmax` prescale (which needs per-frame extrema), run from host
//!   frames, as on the CPU:
//! * host arrays are read in place, `torch:cpu` tensors too (through a view of the tensor's
//!   memory: no conversion at all); anything else is converted to the host once.
//!
//! Results come back on the host, with the movie (wherever it now lives).
//!
//! [`blob_log`] and [`locate`] take the movie by reference and run **where it lives**: on the
//! CPU for a host array or a `torch:cpu` tensor (read in place), on its device for a movie on
//! `opencl:N` or `cuda:N` (read in place by the device pipeline). They never convert: a movie
//! the device cannot read in place (see each function) is a typed
//! [`BridgeError::Unsupported`] that says which conversion to make, never a silent copy.

use bridge_core::convert::Registry;
use bridge_core::{Array, BridgeError, DType, Device, MemoryType, Result};
use ndarray::Ix3;

use super::FrameView;
use super::backend::{CpuBackend, DetectBackend};
use super::blob_log::Prescale;
use super::blob_log::{Blob, BlobLogParams};
#[cfg(any(feature = "opencl", feature = "cuda"))]
use super::gpu::GpuDetect;
use super::locate::{Feature, LocateParams};
use crate::exec::DeviceHandle;

/// `blob_log` on every frame of `movie` (shape `(T, H, W)` or `(H, W)`; `u8`, `u16`, `f32` or
/// `f64`) on `device`. Returns the blobs of each frame and the movie, on the device it was read
/// from (see the [module docs](self) for when it is converted). `reg` is the registry that
/// converts (usually `arraybridge::registry()`); its observer sees every conversion.
pub fn blob_log_array(
    reg: &Registry,
    movie: Array,
    p: &BlobLogParams,
    device: &DeviceHandle,
) -> Result<(Vec<Vec<Blob>>, Array)> {
    p.validate()?;
    check_movie(&movie)?;
    if device.device() == Device::Cpu {
        return via_host(reg, &CpuBackend::default(), movie, &|b, f| {
            b.blob_log_batch(f, p)
        });
    }
    match device.executor_for("particle detection")? {
        #[cfg(feature = "opencl")]
        crate::exec::AnyExecutor::OpenCl(e) => {
            on_device(reg, &GpuDetect::with_executor(e), movie, p)
        }
        #[cfg(feature = "cuda")]
        crate::exec::AnyExecutor::Cuda(e) => on_device(reg, &GpuDetect::with_executor(e), movie, p),
    }
}

/// scikit-image `blob_log` on every frame of `movie` (shape `(T, H, W)` or `(H, W)`), where
/// the movie lives (see the [module docs](self)): on the CPU for host arrays and `torch:cpu`
/// tensors (`u8`, `u16`, `f32`, `f64`), on the device for a C-contiguous `u8`/`u16` movie on
/// `opencl:N` or `cuda:N` (with the `linear` or `dtype` prescale; `minmax` needs each frame's
/// extrema on the host). Anything else is [`BridgeError::Unsupported`], naming the conversion
/// to make; no bytes move. Results are those of [`blob_log_array`] on the same device.
pub fn blob_log(movie: &Array, p: &BlobLogParams) -> Result<Vec<Vec<Blob>>> {
    p.validate()?;
    check_movie(movie)?;
    if let Some(out) = on_host_in_place(movie, &|b, f| b.blob_log_batch(f, p))? {
        return Ok(out);
    }
    check_device(movie, "blob_log")?;
    resident_blob_log(movie, p)
}

/// trackpy `locate` on every frame of `movie` (shape `(T, H, W)` or `(H, W)`), where the
/// movie lives, as [`blob_log`] runs: on the CPU for host arrays and `torch:cpu` tensors, on
/// the device for a C-contiguous movie on `opencl:N` or `cuda:N` whose pixels the device reads
/// in place (`u8`, `u16`, `f32`, and `f64` where the device computes in float64). Anything
/// else is [`BridgeError::Unsupported`], naming the conversion to make. Results are those of
/// [`locate_array`] on the same device.
pub fn locate(movie: &Array, p: &LocateParams) -> Result<Vec<Vec<Feature>>> {
    p.validate()?;
    check_movie(movie)?;
    if let Some(out) = on_host_in_place(movie, &|b, f| b.locate_batch(f, p))? {
        return Ok(out);
    }
    check_device(movie, "locate")?;
    resident_locate(movie, p)
}

/// The CPU on a host array or a `torch:cpu` tensor, read in place; `None` for other memory.
fn on_host_in_place<R>(movie: &Array, run: HostRun<'_, R>) -> Result<Option<Vec<Vec<R>>>> {
    #[cfg(feature = "torch")]
    if let Some(out) = from_torch_cpu(&CpuBackend::default(), movie, run)? {
        return Ok(Some(out));
    }
    if movie.memory_type() == MemoryType::Host {
        return from_host(&CpuBackend::default(), movie, run).map(Some);
    }
    Ok(None)
}

/// `Ok` for a movie on a device that reads it (`opencl:N`, `cuda:N`), else the error that
/// names the conversion.
fn check_device(movie: &Array, what: &str) -> Result<()> {
    match movie.device() {
        Device::OpenCl(_) | Device::Cuda(_) => Ok(()),
        Device::TorchCuda(n) => Err(not_in_place(
            movie,
            what,
            &format!(
                "is not read where it lives: convert it to cuda:{n} first (zero-copy through \
                 DLPack)"
            ),
        )),
        _ => Err(not_in_place(
            movie,
            what,
            "is not read where it lives: convert it to the host first",
        )),
    }
}

/// The error for a movie that the algorithm cannot read where it lives.
fn not_in_place(movie: &Array, what: &str, why: &str) -> BridgeError {
    BridgeError::Unsupported(format!(
        "{what} runs where its movie lives, and a movie of {} pixels, shape {:?}, on {} {why} \
         (nothing is moved silently; the registry's `convert` moves it, once)",
        movie.dtype(),
        movie.shape(),
        movie.device()
    ))
}

/// The device part of [`blob_log`]: the reasons a movie on `opencl:N`/`cuda:N` is not read in
/// place, as errors, then [`blob_log_in_place`].
fn resident_blob_log(movie: &Array, p: &BlobLogParams) -> Result<Vec<Vec<Blob>>> {
    if !matches!(movie.dtype(), DType::U8 | DType::U16) {
        return Err(not_in_place(
            movie,
            "blob_log",
            "is not read in place (the device reads u8 and u16 movies): convert it to the host",
        ));
    }
    if p.prescale == Prescale::MinMax {
        return Err(not_in_place(
            movie,
            "blob_log",
            "is not read in place with the minmax prescale (it needs each frame's extrema on \
             the host): convert it to the host, or use the linear prescale",
        ));
    }
    blob_log_in_place(movie, p)?.ok_or_else(|| {
        not_in_place(
            movie,
            "blob_log",
            "is not read in place (not C-contiguous): convert it to the host",
        )
    })
}

/// Whether the device `blob_log` reads `movie` in place with `p`: integer pixels (the float
/// path starts from host frames) and not the `minmax` prescale (it needs each frame's extrema
/// on the host).
fn blob_log_reads_in_place(movie: &Array, p: &BlobLogParams) -> bool {
    matches!(movie.dtype(), DType::U8 | DType::U16) && p.prescale != Prescale::MinMax
}

/// [`blob_log`] on a movie that lives on `opencl:N` or `cuda:N` and that the device reads in
/// place (C-contiguous `u8`/`u16`, not the `minmax` prescale); `Ok(None)` for any other movie
/// (nothing is run or moved), for callers that then choose another route.
pub fn blob_log_in_place(movie: &Array, p: &BlobLogParams) -> Result<Option<Vec<Vec<Blob>>>> {
    p.validate()?;
    check_movie(movie)?;
    let device = movie.device();
    if !matches!(device, Device::OpenCl(_) | Device::Cuda(_)) || !blob_log_reads_in_place(movie, p)
    {
        return Ok(None);
    }
    match DeviceHandle::of_array(movie)?.executor_for("particle detection")? {
        #[cfg(feature = "opencl")]
        crate::exec::AnyExecutor::OpenCl(e) => {
            GpuDetect::with_executor(e).blob_log_resident(movie, p, |_| {})
        }
        #[cfg(feature = "cuda")]
        crate::exec::AnyExecutor::Cuda(e) => {
            GpuDetect::with_executor(e).blob_log_resident(movie, p, |_| {})
        }
    }
}

/// The device part of [`locate`]: [`locate_in_place`], or the error naming the conversion.
fn resident_locate(movie: &Array, p: &LocateParams) -> Result<Vec<Vec<Feature>>> {
    locate_in_place(movie, p)?.ok_or_else(|| {
        not_in_place(
            movie,
            "locate",
            "is not read in place by this device's pipeline (its pixel type or layout): \
             convert it to the host",
        )
    })
}

/// [`locate`] on a movie that lives on `opencl:N` or `cuda:N` and that the device reads in
/// place (C-contiguous, a pixel type its pipeline takes there); `Ok(None)` for any other movie
/// (nothing is run or moved), for callers that then choose another route.
pub fn locate_in_place(movie: &Array, p: &LocateParams) -> Result<Option<Vec<Vec<Feature>>>> {
    p.validate()?;
    check_movie(movie)?;
    let device = movie.device();
    if !matches!(device, Device::OpenCl(_) | Device::Cuda(_)) {
        return Ok(None);
    }
    match DeviceHandle::of_array(movie)?.executor_for("particle detection")? {
        #[cfg(feature = "opencl")]
        crate::exec::AnyExecutor::OpenCl(e) => {
            in_place_locate(&GpuDetect::with_executor(e), movie, p)
        }
        #[cfg(feature = "cuda")]
        crate::exec::AnyExecutor::Cuda(e) => {
            in_place_locate(&GpuDetect::with_executor(e), movie, p)
        }
    }
}

#[cfg(any(feature = "opencl", feature = "cuda"))]
fn in_place_locate<E: bridge_core::exec::Executor>(
    g: &GpuDetect<E>,
    movie: &Array,
    p: &LocateParams,
) -> Result<Option<Vec<Vec<Feature>>>> {
    if !g.locate_reads_in_place(movie.dtype()) {
        return Ok(None);
    }
    g.locate_resident(movie, p, |_| {})
}

/// Shape and dtype checks before anything moves.
fn check_movie(movie: &Array) -> Result<()> {
    match movie.dtype() {
        DType::U8 | DType::U16 | DType::F32 | DType::F64 => {}
        other => {
            return Err(BridgeError::InvalidInput(
                format!(
                    "a movie of {other} pixels: detection takes u8, u16, f32 or f64 (cast it first)"
                )
                .into(),
            ));
        }
    }
    match movie.shape() {
        [t, h, w] if *t > 0 && *h > 0 && *w > 0 => Ok(()),
        [h, w] if *h > 0 && *w > 0 => Ok(()),
        s => Err(BridgeError::shape_mismatch(
            "a non-empty movie (T, H, W) or frame (H, W)",
            format!("{s:?}"),
            "blob_log_array",
        )),
    }
}

/// The movie on the host: one registry conversion, zero-copy where the registry can.
fn to_host(reg: &Registry, movie: Array) -> Result<Array> {
    if movie.memory_type() == MemoryType::Host {
        return Ok(movie);
    }
    reg.convert(movie, MemoryType::Host, Device::Cpu)
}

/// What runs on host frames: `blob_log` or `locate` on a batch with a back end.
type HostRun<'r, R> = &'r dyn Fn(&dyn DetectBackend, &[FrameView<'_>]) -> Result<Vec<Vec<R>>>;

/// `run` on the frames of a `(T, H, W)` or `(H, W)` view with `backend`.
fn run_on_view<'a, T: bridge_core::HostElement, R>(
    backend: &dyn DetectBackend,
    v: ndarray::ArrayViewD<'a, T>,
    wrap: fn(ndarray::ArrayView2<'a, T>) -> FrameView<'a>,
    run: HostRun<'_, R>,
) -> Result<Vec<Vec<R>>> {
    let v = if v.ndim() == 2 {
        v.insert_axis(ndarray::Axis(0))
    } else {
        v
    };
    let v = v
        .into_dimensionality::<Ix3>()
        .map_err(|e| BridgeError::InvalidInput(format!("movie: {e}").into()))?;
    let frames: Vec<FrameView<'a>> = (0..v.len_of(ndarray::Axis(0)))
        .map(|i| wrap(v.index_axis_move(ndarray::Axis(0), i)))
        .collect();
    run(backend, &frames)
}

fn unsupported_dtype(dtype: DType) -> BridgeError {
    BridgeError::InvalidInput(
        format!("a movie of {dtype} pixels: detection takes u8, u16, f32 or f64").into(),
    )
}

/// `run` on the frames of a host movie with `backend` (read in place).
fn from_host<R>(
    backend: &dyn DetectBackend,
    movie: &Array,
    run: HostRun<'_, R>,
) -> Result<Vec<Vec<R>>> {
    match movie.dtype() {
        DType::U8 => run_on_view(backend, movie.as_ndarray::<u8>()?, FrameView::U8, run),
        DType::U16 => run_on_view(backend, movie.as_ndarray::<u16>()?, FrameView::U16, run),
        DType::F32 => run_on_view(backend, movie.as_ndarray::<f32>()?, FrameView::F32, run),
        DType::F64 => run_on_view(backend, movie.as_ndarray::<f64>()?, FrameView::F64, run),
        other => Err(unsupported_dtype(other)),
    }
}

/// `run` on the frames of a `torch:cpu` tensor, read in place through a view of its memory
/// (no conversion, no copy); `None` when `movie` is not such a tensor.
#[cfg(feature = "torch")]
fn from_torch_cpu<R>(
    backend: &dyn DetectBackend,
    movie: &Array,
    run: HostRun<'_, R>,
) -> Result<Option<Vec<Vec<R>>>> {
    use bridge_torch::tensor_view;
    if movie.device() != Device::TorchCpu {
        return Ok(None);
    }
    let Some(st) = movie.storage::<bridge_torch::TorchStorage>() else {
        return Ok(None);
    };
    let t = st.tensor();
    let out = match movie.dtype() {
        DType::U8 => run_on_view(backend, tensor_view::<u8>(&t)?, FrameView::U8, run),
        DType::U16 => run_on_view(backend, tensor_view::<u16>(&t)?, FrameView::U16, run),
        DType::F32 => run_on_view(backend, tensor_view::<f32>(&t)?, FrameView::F32, run),
        DType::F64 => run_on_view(backend, tensor_view::<f64>(&t)?, FrameView::F64, run),
        other => Err(unsupported_dtype(other)),
    }?;
    Ok(Some(out))
}

/// `run` on host frames: a `torch:cpu` tensor is read in place; anything else is converted to
/// the host once (zero-copy for host arrays).
fn via_host<R>(
    reg: &Registry,
    backend: &dyn DetectBackend,
    movie: Array,
    run: HostRun<'_, R>,
) -> Result<(Vec<Vec<R>>, Array)> {
    #[cfg(feature = "torch")]
    if let Some(out) = from_torch_cpu(backend, &movie, run)? {
        return Ok((out, movie));
    }
    let movie = to_host(reg, movie)?;
    let out = from_host(backend, &movie, run)?;
    Ok((out, movie))
}

/// On a device: in place when resident (or after one conversion to the device) for integer
/// movies; from host frames otherwise.
#[cfg(any(feature = "opencl", feature = "cuda"))]
fn on_device<E: bridge_core::exec::Executor>(
    reg: &Registry,
    g: &GpuDetect<E>,
    movie: Array,
    p: &BlobLogParams,
) -> Result<(Vec<Vec<Blob>>, Array)> {
    if blob_log_reads_in_place(&movie, p) {
        let dev = g.executor().device();
        let movie = if g.executor().buffer_of(&movie).is_some() {
            movie
        } else {
            reg.convert(movie, dev.memory_type(), dev)?
        };
        if let Some(blobs) = g.blob_log_resident(&movie, p, |_| {})? {
            return Ok((blobs, movie));
        }
        // Not readable in place after all (e.g. a strided view): from the host.
        return via_host(reg, g, movie, &|b, f| b.blob_log_batch(f, p));
    }
    via_host(reg, g, movie, &|b, f| b.blob_log_batch(f, p))
}

/// trackpy `locate` on every frame of `movie` (shape `(T, H, W)` or `(H, W)`; `u8`, `u16`,
/// `f32` or `f64`) on `device`, as [`blob_log_array`] runs `blob_log`: on a device, a movie
/// that already lives there is read **in place** by the device pipeline (zero bytes converted;
/// `u8`, `u16`, `f32`, and `f64` where the device computes in float64, see
/// `GpuDetect::locate_reads_in_place`), a movie from elsewhere is converted to the device
/// once and handed back there; other movies run from host frames. Returns the features of
/// each frame (those of [`locate_movie`](super::locate_movie)) and the movie.
pub fn locate_array(
    reg: &Registry,
    movie: Array,
    p: &LocateParams,
    device: &DeviceHandle,
) -> Result<(Vec<Vec<Feature>>, Array)> {
    p.validate()?;
    check_movie(&movie)?;
    if device.device() == Device::Cpu {
        return via_host(reg, &CpuBackend::default(), movie, &|b, f| {
            b.locate_batch(f, p)
        });
    }
    match device.executor_for("particle detection")? {
        #[cfg(feature = "opencl")]
        crate::exec::AnyExecutor::OpenCl(e) => {
            locate_on_device(reg, &GpuDetect::with_executor(e), movie, p)
        }
        #[cfg(feature = "cuda")]
        crate::exec::AnyExecutor::Cuda(e) => {
            locate_on_device(reg, &GpuDetect::with_executor(e), movie, p)
        }
    }
}

/// `locate` on a device: in place when resident (or after one conversion to the device) for
/// the pixel types the device reads there; from host frames otherwise.
#[cfg(any(feature = "opencl", feature = "cuda"))]
fn locate_on_device<E: bridge_core::exec::Executor>(
    reg: &Registry,
    g: &GpuDetect<E>,
    movie: Array,
    p: &LocateParams,
) -> Result<(Vec<Vec<Feature>>, Array)> {
    if g.locate_reads_in_place(movie.dtype()) {
        let dev = g.executor().device();
        let movie = if g.executor().buffer_of(&movie).is_some() {
            movie
        } else {
            reg.convert(movie, dev.memory_type(), dev)?
        };
        if let Some(feats) = g.locate_resident(&movie, p, |_| {})? {
            return Ok((feats, movie));
        }
        // Not readable in place after all (e.g. a strided view): from the host.
        return via_host(reg, g, movie, &|b, f| b.locate_batch(f, p));
    }
    via_host(reg, g, movie, &|b, f| b.locate_batch(f, p))
}
