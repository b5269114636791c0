//! The device back end of the LoG blob detector, written once over the executor trait:
//! [`GpuDetect<E>`] for any [`Executor`]; [`OpenClDetect`] (feature `opencl`) and [`CudaDetect`]
//! (feature `cuda`) are its instances, both running the one portable source
//! [`kernels::BLOB_LOG`](super::kernels::BLOB_LOG).
//!
//! * `pipeline`: one run of frames on the device (prescale, LoG passes, extrema, peaks, the
//!   host's ordering and pruning);
//! * `frames`: how frames reach the device (host frames grouped in runs, raw integers packed
//!   in parallel, or a device-resident movie read in place).
//!
//! Per batch ([`DetectBackend::blob_log_batch`]):
//!
//! 1. the whole batch is uploaded in **one** transfer (one per run of consecutive frames with
//!    the same shape and pixel type; a movie is one run): u8 and u16 frames raw, converted on
//!    the device by `prescale_u8` / `prescale_u16` with the CPU's arithmetic
//!    ([`convert_frame`](super::blob_log::convert_frame): `v · (1/max)` or `(v − c)/(d − c)` in float64 where the device has
//!    doubles); float frames converted on the host exactly as on the CPU;
//! 2. the LoG cube, its per-frame extrema, the 3×3×3 maxima, the threshold and `exclude_border`
//!    are evaluated on the device, in sub-batches that keep the device working set (the cube,
//!    plus two pass buffers where the passes are not fused) under
//!    [`GpuDetectConfig::max_device_bytes`]; the two passes of a scale run as one kernel in
//!    local memory, `log_pass_block` (`ARRAYBRIDGE_DETECT_BLOCK`: CUDA's default, both passes
//!    register-blocked) or `log_pass_tile` (`ARRAYBRIDGE_DETECT_TILE`: OpenCL's default), each
//!    folding its region's extrema for the thresholds and the peaks (which skip the regions
//!    that cannot hold one), or as `log_pass_y` then `log_pass_x` through two scratch cubes
//!    (then `cube_minmax` reads the cube for them), the same cube bit for bit;
//! 3. only the candidates (flat index and cube value) and their count are
//!    downloaded; the host restores raster order, applies the CPU's stable sort by descending
//!    response and the CPU's overlap pruning ([`prune_blobs`](super::blob_log::prune_blobs), pairs in ascending `(i, j)`).
//!
//! Several threads may call one back end (and its clones) at once
//! ([`DetectBackend::batches_in_flight`]): each packs and uploads its frames without waiting for
//! the others' kernels (OpenCL uploads on a transfer queue), then takes the device's turn for its
//! kernels and reads, so a read waits only for its own batch's kernels.
//!
//! **Precision.** Where the device has doubles, the default ([`Precision::Auto`], as
//! [`Precision::F64`]) stores the cube in the CPU's working type (float64 for integer and
//! float64 frames, float32 for float32 frames) and accumulates each 1-D pass in float64, in the
//! CPU's order and without FMA contraction: the cube is the CPU's bit for bit, and so are the
//! detections, for every input type (issue 29: `detect --device opencl:0` writes the CPU's
//! CSV). By default that exactness comes from the **certified search**
//! (`ARRAYBRIDGE_DETECT_DEVICE_CERTIFIED`, wherever there is a threshold and the cube is not
//! asked for): the device computes a float32 cube with float32 sums, the margin of the CPU's
//! proven error bound per frame and, with it, every voxel that can be an exact maximum above
//! the threshold (`cert_frames`, `cert_peaks`); the host settles each frame with exact
//! float64 voxels in SciPy's order (the CPU's own code, `blob_log/certified.rs`, which checks
//! every premise again on the exact frame) and computes on the CPU the rare frame the bound
//! cannot certify ([`GpuDetect::take_certified`] counts both). The certified search needs no
//! doubles on the device (u8 and u16 frames are then converted on the host), so a device
//! without them gives the CPU's results too wherever a threshold is set. Without doubles and
//! without a threshold (`Auto`), or with [`Precision::F32`] (`--fast`), the cube and the
//! passes are float32 (cube within the 1e-4 tolerance; detections near the threshold may
//! differ).
//!
//! [`DetectBackend::blob_log_batch_acc`] selects the accumulation per call and
//! [`DetectBackend::last_kernel_seconds`] reports the kernel time of the last batch.
//!
//! **`locate_batch`** runs trackpy's `locate` on the device (`locate`, kernels
//! [`kernels::LOCATE`](super::kernels::LOCATE)): the frames are uploaded as stored; the
//! inversion, the bandpass, the rescale to the integer gamut, the percentile, the
//! grey-dilation maxima, the iterated centroid with the characterisation of every candidate and
//! the background noise run on the device; the host receives the candidates' rows and a few
//! numbers per frame and does the steps that need all features of a frame at once (raster
//! order, duplicate removal, `minmass`/`maxsize`/`topn`, the static error `ep`) with the CPU's
//! code. Where the device has doubles (and the precision is not [`Precision::F32`]; the
//! default is [`Precision::Auto`]) the arithmetic is float64 in the CPU's order without contraction and the features
//! are the CPU's bit for bit; otherwise it is float32: the bandpass then differs from the
//! CPU's by rounding, so a pixel of the integer image can differ by one (fixtures: positions
//! within 2e-5 px, measures within 1e-4 relative; on random frames 98 % of the positions within
//! 1e-5 px and 99.8 % within 1e-3 px, while a feature of a few integer units can refine to
//! another pixel, and a maximum at the percentile threshold can come or go).

use bridge_core::exec::{Executor, TypedExecutor};
use bridge_core::tuning::Tuning;
use bridge_core::{Array, BridgeError, DType, Device, Result};

use super::FrameView;
use super::backend::DetectBackend;
use super::blob_log::{Blob, BlobLogParams, Precision};
use super::locate::{Feature, LocateParams};
use super::real::Real;

mod frames;
mod locate;
mod pipeline;
pub(crate) use pipeline::{round_up_to, to_u32};

/// Tuning of the device back ends.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuDetectConfig {
    /// The arithmetic ([`Precision`]): `Auto` (the default) the CPU's results for every input
    /// type (the certified search wherever a threshold is set, else the CPU's working type
    /// where the device has doubles), float32 throughout on a device without doubles when no
    /// threshold is set;
    /// `F64` the same, an error without doubles; `F32` float32 throughout, faster on
    /// GPUs with slow doubles (cube within ~1e-6 relative). For `locate`:
    /// float64 where the device has doubles (`Auto`, `F64`) or float32 (`F32`).
    pub precision: Precision,
    /// Upper bound of the device working set of one sub-batch (the cube, and two pass buffers
    /// where the passes are not fused); at least one frame is always processed at a time.
    /// `0` (the default): `ARRAYBRIDGE_DETECT_MAX_MB` of [`Self::tuning`] where set, else from
    /// the device when the run starts ([`GpuDetectConfig::device_budget`]).
    pub max_device_bytes: usize,
    /// The knobs of the device pipeline (work-group shapes, pass blocking: `ARRAYBRIDGE_DETECT_*`,
    /// docs/gpu.md); results do not depend on them. Default: the process's
    /// ([`bridge_core::tuning::process`]).
    pub tuning: Tuning,
}

impl Default for GpuDetectConfig {
    fn default() -> Self {
        GpuDetectConfig {
            precision: Precision::Auto,
            max_device_bytes: 0,
            tuning: bridge_core::tuning::process().clone(),
        }
    }
}

impl GpuDetectConfig {
    /// The working set one sub-batch may take on `e`: [`Self::max_device_bytes`] where set;
    /// else `ARRAYBRIDGE_DETECT_MAX_MB` of [`Self::tuning`]; else, on a GPU, a quarter of what
    /// a new allocation could take now ([`bridge_core::memory::MemoryStats::available`]: the
    /// driver's free memory and the pool's cache, within its limit), between 64 MiB and 8 GiB;
    /// on a CPU device (PoCL: the host's memory, shared with everything else) or where the
    /// backend cannot say, 512 MiB.
    pub fn device_budget<E: Executor>(&self, e: &E) -> usize {
        const MIB: usize = 1 << 20;
        if self.max_device_bytes > 0 {
            return self.max_device_bytes;
        }
        if let Some(mb) = self.tuning.usize_knob("ARRAYBRIDGE_DETECT_MAX_MB") {
            return mb.saturating_mul(MIB);
        }
        match e.memory_stats() {
            Some(m) if !e.is_cpu() => {
                let quarter = usize::try_from(m.available() / 4).unwrap_or(usize::MAX);
                quarter.clamp(64 * MIB, 8192 * MIB)
            }
            _ => 512 * MIB,
        }
    }
}

/// Device storage types (f32, f64): the element type of typed device buffers and a kernel
/// scalar.
pub(crate) trait DevReal:
    Real + bridge_core::exec::DeviceElement + bridge_core::exec::KernelScalar
{
    /// Bytes per element.
    const SIZE: usize;
}

impl DevReal for f32 {
    const SIZE: usize = 4;
}

impl DevReal for f64 {
    const SIZE: usize = 8;
}

/// Kernel time of the last batch and of every batch so far, shared by clones of a back end.
#[derive(Debug, Clone, Default)]
struct LastKernel(std::sync::Arc<std::sync::Mutex<(Option<f64>, f64)>>);

impl LastKernel {
    fn set(&self, v: f64) {
        let mut k = self.0.lock().unwrap_or_else(|e| e.into_inner());
        k.0 = Some(v);
        k.1 += v;
    }

    fn get(&self) -> Option<f64> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    fn total(&self) -> f64 {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).1
    }
}

/// `blob_log` and `locate` on a device, over its executor `E`. See the [module docs](self) for
/// the pipelines and their precision.
#[derive(Debug, Clone)]
pub struct GpuDetect<E: Executor> {
    exec: E,
    config: GpuDetectConfig,
    last_kernel: LastKernel,
    /// Batches halved on out of memory, not yet reported ([`DetectBackend::take_splits`]).
    splits: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// The device's turn between threads (kernels and reads of one run at a time).
    turn: std::sync::Arc<pipeline::Turn>,
    /// Frames of the certified search and those it left to the CPU, not yet reported
    /// ([`GpuDetect::take_certified`]).
    certified: std::sync::Arc<std::sync::Mutex<(usize, usize)>>,
}

/// [`GpuDetect`] on an OpenCL device.
#[cfg(feature = "opencl")]
pub type OpenClDetect = GpuDetect<bridge_opencl::OpenClExecutor>;

/// [`GpuDetect`] on a CUDA device (the same portable kernels, compiled by NVRTC).
#[cfg(feature = "cuda")]
pub type CudaDetect = GpuDetect<bridge_cuda::CudaExecutor>;

impl<E: Executor> GpuDetect<E> {
    /// The back end over `exec`, with the default configuration.
    pub fn with_executor(exec: E) -> Self {
        GpuDetect {
            exec,
            config: GpuDetectConfig::default(),
            last_kernel: LastKernel::default(),
            splits: std::sync::Arc::default(),
            turn: std::sync::Arc::default(),
            certified: std::sync::Arc::default(),
        }
    }

    /// Frames detected by the certified search since the last call (an f32 scale space on
    /// the device with a proven error bound, settled with exact float64 voxels on the host:
    /// `ARRAYBRIDGE_DETECT_DEVICE_CERTIFIED`), and how many of them it computed on the CPU
    /// instead (frames the bound cannot certify: constant or nearly so, NaN or infinite
    /// pixels, magnitudes beyond 10^±20, or too many decisions left open). Clones share the
    /// count.
    pub fn take_certified(&self) -> (usize, usize) {
        let mut c = self.certified.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut *c)
    }

    /// Adds a run's certified frames to [`Self::take_certified`]'s count.
    fn count_certified(&self, (n, cpu): (usize, usize)) {
        let mut c = self.certified.lock().unwrap_or_else(|e| e.into_inner());
        c.0 += n;
        c.1 += cpu;
    }

    /// The executor.
    pub fn executor(&self) -> &E {
        &self.exec
    }

    /// The same back end with another configuration.
    pub fn with_config(mut self, config: GpuDetectConfig) -> Self {
        self.config = config;
        self
    }

    /// The configuration in use.
    pub fn config(&self) -> &GpuDetectConfig {
        &self.config
    }

    /// Whether the device has doubles (the passes then accumulate in float64).
    pub fn has_fp64(&self) -> bool {
        self.exec.has_fp64()
    }

    /// Diagnostic: the device LoG cube of every frame (`[scale][y][x]`, widened to f64), as
    /// `blob_log_batch` computes it (a full download; not for production use).
    pub fn log_cubes(&self, frames: &[FrameView<'_>], p: &BlobLogParams) -> Result<Vec<Vec<f64>>> {
        let out = frames::run_frames(&self.exec, frames, p, &self.config, true, &self.turn)?;
        out.cubes.ok_or_else(|| {
            BridgeError::backend(self.exec.device().to_string(), None, "no cube was computed")
        })
    }

    /// `blob_log` on a movie that already lives on this device: a `(T, H, W)` (or `(H, W)`)
    /// C-contiguous `u8` or `u16` [`Array`] of this executor's backend, read in place (no
    /// upload, no copy). `Ok(None)` when the array is not such an array (another device or
    /// memory type, another dtype, not contiguous) or the prescale needs per-frame extrema
    /// ([`super::Prescale::MinMax`]): the caller then converts it to the host once.
    /// `progress(frames_done)` is called as runs of frames complete.
    pub fn blob_log_resident(
        &self,
        movie: &Array,
        p: &BlobLogParams,
        progress: impl FnMut(usize),
    ) -> Result<Option<Vec<Vec<Blob>>>> {
        let raw = match movie.dtype() {
            DType::U8 => self
                .exec
                .buffer_ref::<u8>(movie)
                .map(pipeline::RawFrames::U8),
            DType::U16 => self
                .exec
                .buffer_ref::<u16>(movie)
                .map(pipeline::RawFrames::U16),
            _ => None,
        };
        let Some(raw) = raw else {
            return Ok(None);
        };
        if !movie.is_contiguous() || p.prescale == super::Prescale::MinMax {
            return Ok(None);
        }
        let dims = resident_dims(movie, "blob_log")?;
        let out =
            frames::run_resident(&self.exec, raw, dims, p, &self.config, &self.turn, progress)?;
        self.last_kernel.set(out.kernel_s);
        Ok(Some(out.blobs))
    }

    /// Whether [`Self::locate_resident`] reads a C-contiguous movie of `dtype` on this device
    /// in place: `u8`, `u16`, `f32`, and `f64` where `locate` computes in float64 (the device
    /// has doubles and the precision is not [`Precision::F32`]).
    pub fn locate_reads_in_place(&self, dtype: DType) -> bool {
        locate::reads_in_place(&self.exec, dtype, &self.config)
    }

    /// trackpy `locate` on a movie that already lives on this device: a `(T, H, W)` (or
    /// `(H, W)`) C-contiguous [`Array`] of this executor's backend whose pixels
    /// [`Self::locate_reads_in_place`] takes, read in place by the load kernel (no upload, no
    /// copy to the host); the features are those of [`DetectBackend::locate_batch`] on the
    /// same frames. `Ok(None)` when the array is not such an array: the caller then reads it
    /// from the host. `progress(frames_done)` is called as sub-batches complete.
    pub fn locate_resident(
        &self,
        movie: &Array,
        p: &LocateParams,
        mut progress: impl FnMut(usize),
    ) -> Result<Option<Vec<Vec<Feature>>>> {
        let Some(pixels) = locate::resident_pixels(&self.exec, movie, &self.config) else {
            return Ok(None);
        };
        if !movie.is_contiguous() {
            return Ok(None);
        }
        let dims = resident_dims(movie, "locate")?;
        let out = locate::locate_resident(
            &self.exec,
            pixels,
            dims,
            p,
            &self.config,
            &self.turn,
            &mut progress,
        )?;
        self.last_kernel.set(out.kernel_s);
        Ok(Some(out.features))
    }
}

/// `(T, H, W)` of a resident movie (`(1, H, W)` for a frame); an error when it is neither or
/// empty.
fn resident_dims(movie: &Array, what: &str) -> Result<(usize, usize, usize)> {
    let dims = match *movie.shape() {
        [t, h, w] => (t, h, w),
        [h, w] => (1, h, w),
        _ => {
            return Err(BridgeError::shape_mismatch(
                "a movie of shape (T, H, W) or a frame (H, W)",
                format!("{:?}", movie.shape()),
                what,
            ));
        }
    };
    if dims.0 == 0 || dims.1 == 0 || dims.2 == 0 {
        return Err(BridgeError::InvalidInput(
            format!("empty movie of shape {:?}", movie.shape()).into(),
        ));
    }
    Ok(dims)
}

impl<E: Executor> DetectBackend for GpuDetect<E> {
    fn device(&self) -> Device {
        self.exec.device()
    }

    fn blob_log_batch(
        &self,
        frames: &[FrameView<'_>],
        p: &BlobLogParams,
    ) -> Result<Vec<Vec<Blob>>> {
        self.split_on_oom(frames, |f| {
            let out = frames::run_frames(&self.exec, f, p, &self.config, false, &self.turn)?;
            self.count_certified(out.certified);
            Ok((out.blobs, out.kernel_s))
        })
    }

    /// `acc` other than [`Precision::Auto`] overrides [`GpuDetectConfig::precision`] for the
    /// call.
    fn blob_log_batch_acc(
        &self,
        frames: &[FrameView<'_>],
        p: &BlobLogParams,
        acc: Precision,
    ) -> Result<Vec<Vec<Blob>>> {
        let cfg = GpuDetectConfig {
            precision: if acc == Precision::Auto {
                self.config.precision
            } else {
                acc
            },
            ..self.config.clone()
        };
        self.split_on_oom(frames, |f| {
            let out = frames::run_frames(&self.exec, f, p, &cfg, false, &self.turn)?;
            self.count_certified(out.certified);
            Ok((out.blobs, out.kernel_s))
        })
    }

    /// Time of the last batch's kernels (input conversion, passes, extrema, peaks), without
    /// transfers and host work: the device's own account where the executor keeps one
    /// ([`Executor::kernel_seconds`]: OpenCL's event profiling), else the host time around the
    /// launches; `None` where launches are asynchronous without a device account (CUDA's
    /// default `ARRAYBRIDGE_CUDA_LAUNCH=stream`) unless `ARRAYBRIDGE_TRACE=1` waits for each.
    fn last_kernel_seconds(&self) -> Option<f64> {
        if !self.kernels_measured() {
            return None;
        }
        self.last_kernel.get()
    }

    fn take_splits(&self) -> usize {
        self.splits.swap(0, std::sync::atomic::Ordering::Relaxed)
    }

    /// The kernel seconds of every call so far, measured as [`Self::last_kernel_seconds`] is.
    fn kernel_seconds_total(&self) -> Option<f64> {
        self.kernels_measured().then(|| self.last_kernel.total())
    }

    /// `ARRAYBRIDGE_DETECT_IN_FLIGHT` of the configuration's tuning; `auto`: 2 on OpenCL,
    /// where uploads go on a queue of their own and overlap the kernels (see
    /// [`LogDetector::detect_movie_with`](super::LogDetector::detect_movie_with)), 1 on CUDA
    /// until a GPU run settles it: on the H200 (2026-11-27, `docs/perf.md`) 2 won at 64 frames
    /// a batch (`blob_log` and `locate`) and lost at 256.
    fn batches_in_flight(&self) -> usize {
        self.config
            .tuning
            .usize_knob("ARRAYBRIDGE_DETECT_IN_FLIGHT")
            .unwrap_or(if matches!(self.exec.device(), Device::OpenCl(_)) {
                2
            } else {
                1
            })
    }

    /// trackpy's `locate` on the device (see the [module docs](self)); the kernel time is
    /// reported by [`DetectBackend::last_kernel_seconds`].
    fn locate_batch(
        &self,
        frames: &[FrameView<'_>],
        p: &LocateParams,
    ) -> Result<Vec<Vec<Feature>>> {
        self.split_on_oom(frames, |f| {
            let out = locate::locate_frames(&self.exec, f, p, &self.config, &self.turn)?;
            Ok((out.features, out.kernel_s))
        })
    }
}

impl<E: Executor> GpuDetect<E> {
    /// Whether the kernel time is known: the device keeps an account, launches block, or
    /// `ARRAYBRIDGE_TRACE=1` waits for each.
    fn kernels_measured(&self) -> bool {
        !self.exec.launches_are_async()
            || self.exec.kernel_seconds().is_some()
            || super::trace_enabled()
    }

    /// `run` on `frames`, halving the batch when the device is out of memory (a pool limit or
    /// the device itself; recursively, down to one frame, whose failure is the error). Each
    /// frame's result does not depend on the frames it is run with, so the results are the
    /// same as one run's. `run` gives one result per frame and its kernel seconds (summed into
    /// [`DetectBackend::last_kernel_seconds`]).
    fn split_on_oom<R>(
        &self,
        frames: &[FrameView<'_>],
        run: impl Fn(&[FrameView<'_>]) -> Result<(Vec<R>, f64)>,
    ) -> Result<Vec<R>> {
        use bridge_core::oom::{NoRelease, RetryPolicy, run_batched};
        let mut kernel_s = 0.0;
        let mut calls = 0usize;
        let mut op = |r: std::ops::Range<usize>| {
            calls += 1;
            let (out, k) = run(&frames[r])?;
            kernel_s += k;
            Ok(out)
        };
        let out = run_batched(
            &RetryPolicy::split_only(),
            self.exec.device(),
            &NoRelease,
            frames.len(),
            &mut op,
            None,
        );
        // each split replaces one failed run by two: `calls = 1 + 2 · splits` once done
        self.splits.fetch_add(
            calls.saturating_sub(1) / 2,
            std::sync::atomic::Ordering::Relaxed,
        );
        let out = out?;
        self.last_kernel.set(kernel_s);
        Ok(out)
    }
}
