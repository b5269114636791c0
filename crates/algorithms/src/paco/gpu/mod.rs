//! Device back ends of PACO: [`OpenClPaco`] (feature `opencl`) and [`CudaPaco`] (feature
//! `cuda`), both running the one portable source [`gpu_kernels::PACO`](super::gpu_kernels::PACO).
//!
//! Data flow of [`PacoBackend::ab_maps`] / [`PacoBackend::ab_at`] without sub-pixel templates:
//!
//! 1. the cube is uploaded **once** (in `REAL`), centred per pixel and transposed to
//!    pixel-major on the device (`paco_centre`; the uploaded cube is centred in place,
//!    frame-major);
//! 2. per chunk of statistics rows whose lag table fits
//!    [`PacoParams::max_tile_bytes`](super::PacoParams::max_tile_bytes), `paco_lag` computes
//!    the CPU's lag table of the rows their patches cover (`ARRAYBRIDGE_PACO_COV`: `auto`, the
//!    default, when that computes fewer dot products than the covariances themselves; `lag`
//!    always; `direct` never: `paco_stats` then computes its `K(K+1)/2` dot products; the same
//!    bits either way). An out-of-memory error halves the chunk, down to one row, then the
//!    covariances are computed directly. Per band of statistics rows of a chunk (at most
//!    [`STATS_GROUPS_PER_LAUNCH`] pixels; the rows and
//!    columns of the edge rule, [`EdgeRule::Box`](super::EdgeRule::Box) or
//!    [`EdgeRule::Disk`](super::EdgeRule::Disk), from [`super::Geometry::stats_ranges`]),
//!    `paco_stats` (one work group per pixel: covariance, shrinkage, Cholesky, `w = C⁻¹h0`,
//!    `q = h0·w`; nothing K×K leaves the work group, which keeps the matrix's packed upper triangle) and `paco_z` (the whitened matched-filter
//!    cube `z_t = w·c_t`, one thread per pixel and frame);
//! 3. the trajectory pixels `[φ_ℓ]` of a batch of [`DEVICE_BATCH`] output positions (the
//!    `ARRAYBRIDGE_PACO_DEVICE_BATCH` knob) are exactly the CPU's bit-exact geometry's
//!    ([`super::Geometry::pixel_polar`], so NaN positions, the edge rule and float traps are
//!    the CPU's), and `paco_accumulate` sums `a = Σ q`, `b = Σ z` along them; only a and b are
//!    downloaded. On GPUs, in double (`ARRAYBRIDGE_PACO_TRAJ`), `paco_traj` computes them on
//!    the device from each position's polar coordinates (the host's `atan2`, 16 bytes a
//!    position) with the device's sine and cosine, each rounding certified against the host's
//!    (a coordinate farther than about 2⁻⁴⁰·r from a rounding boundary rounds the same with
//!    either sine); the host computes the entries the device leaves undecided (every entry of
//!    a frame with angle 0 and an integer centre, a few others) and `paco_traj_fix` writes
//!    them. Otherwise (CPU devices, float runs) the host computes them, uploads them as `i32`
//!    (4·T bytes a position), and computes the next batch's while the device sums one. Each
//!    batch runs through
//!    [`bridge_core::oom::run_batched`] with `SplitBatch`: an out-of-memory error halves it.
//!
//! With sub-pixel templates (spec §5.2, §10 "tile by θ"), every [`SubPixel`](super::SubPixel) mode: the host
//! computes every pair (φ0, ℓ)'s trajectory pixel θ (same geometry) and buckets the pairs by θ
//! (counting sort; pair ids ascending within θ, the CPU's order); only the pixels that have
//! pairs are processed, in **batches** of consecutive pixels whose device bytes stay within
//! [`PacoParams::max_tile_bytes`](super::PacoParams::max_tile_bytes) (at least one pixel; at
//! most [`STATS_GROUPS_PER_LAUNCH`]), each through `run_batched` with `SplitBatch`. Per batch
//! the host uploads the pixel list, the batch-local CSR of its pair slots and each slot's frame,
//! plus
//!
//! - [`SubPixel::Table`](super::SubPixel::Table): each slot's fractional offsets; the `(q+1)²·K` template table
//!   ([`PacoJob::template_table`]) is uploaded once and `paco_stats` blends it like the CPU;
//! - any other mode ([`SubPixel::VipFft`](super::SubPixel::VipFft), [`SubPixel::Spline5`](super::SubPixel::Spline5), ...): each slot's K-value
//!   template, computed on the host (rayon) with the CPU's own `Templates::new` /
//!   `Templates::fill`, so a mode the CPU gains runs on the device with no kernel change (and a
//!   mode the CPU reports `Unsupported` is the same error here, before any device work).
//!
//! A batch reads a lag table of the rows from its first pixel's to its last's (and their
//! patches') when that computes fewer dot products and fits `max_tile_bytes` (any batch in
//! `lag` mode). `paco_stats` evaluates all pairs of its pixel right after the Cholesky factorisation
//! (`L⁻¹[h | c]`) and writes one (a, b) contribution per slot; the host downloads them and adds
//! them to a(φ0), b(φ0) in slot order, which is exactly the CPU's summation order (no float
//! atomics, nothing per pair left on the device after its batch).
//!
//! **Patch size.** K ≤ [`KMAX`](super::gpu_kernels::KMAX) = 64 (radius ≤ 4): the K×K matrix of
//! a work group in local (shared) memory. 64 < K ≤ [`KMAX_BIG`](super::gpu_kernels::KMAX_BIG) = 128 (radius 5: K = 81,
//! radius 6: K = 113): the `COV_GLOBAL` kernel variant keeps it in a global scratch buffer of
//! `K(K+1)/2·s` bytes per work group of a launch (the packed upper triangle), so launches are
//! bounded: a band of rows holds at most `max(1, max_tile_bytes / (nx·K(K+1)/2·s))` rows (nx
//! statistics columns), a batch of pairs counts `K(K+1)/2·s` bytes per pixel against its budget. Larger patches return
//! [`BridgeError::Unsupported`](bridge_core::BridgeError::Unsupported) (use the `cpu` device).
//!
//! **Memory** on the device (`s` = 8 in double, 4 in float): the cube, centred in place
//! (frame-major, `paco_lag`'s input), and its pixel-major copy (`2T·H·W·s` bytes), plus
//!
//! - the lag table of a chunk of rows (or of a batch of pixels): `rows·W·L·s` bytes for `L`
//!   lags (91 at radius 4), within `max_tile_bytes` (any size in `lag` mode): with sub-pixel
//!   templates on top of the batch's own bytes, so a batch's peak is up to twice
//!   `max_tile_bytes`;
//! - without sub-pixel templates: `q` and `z` (`(T + 1)·H·W·s`), `w` for one band of rows
//!   (≤ 2¹⁶·K·s), the `COV_GLOBAL` scratch of one band (`rows·nx·K(K+1)/2·s`, ≤ `max_tile_bytes`
//!   unless one row exceeds it), and `(4T + 2s)` bytes per output position of a batch;
//! - with sub-pixel templates, per batch: `8` bytes per pixel (+ `K(K+1)/2·s` with `COV_GLOBAL`) and
//!   per pair `4 + 2s` bytes (frame, contribution) + `2s` (table offsets) or `K·s` (per-pair
//!   template), bounded by `max_tile_bytes` (default 256 MiB) unless one pixel alone exceeds
//!   it; the table, `(q+1)²·K·s`, once. On the host: 4 bytes per (φ0, ℓ) pair (trajectory
//!   pixels), 4 per valid pair (sorted pair ids), 8 per frame pixel, and the current batch's
//!   uploads (for per-pair templates ≈ the batch's device bytes).
//!
//! **Precision** ([`Precision`]): double where the device has it (the default), otherwise
//! float. In double the kernels follow the CPU's operation order without fused multiply-add:
//! on PoCL the maps are bit-identical to the CPU backend in every mode tested (no templates,
//! table, VipFft and Spline5 templates, R = 5 and 6, `EdgeRule::Disk`); in float a and b agree
//! to ~2e-6 (relative, and relative to max|b|). In float the cube is converted times the power
//! of two that brings its largest |value| into [0.5, 1) (exact; a and b are converted back), so
//! that the shrinkage's fourth powers stay in float's range whatever the cube's scale.
//!
//! The `Strategy` switch does not matter on the device (Full and Fast give identical numbers).
//! `ab_at` without templates computes the statistics of the whole field and then sums only the
//! requested trajectories; with templates, only the pixels its trajectories visit.
//!
//! **Trace.** With `ARRAYBRIDGE_TRACE=1` each stage (upload and centring, each lag table, each
//! band's statistics, the trajectories and sums of each batch, each batch of pairs) waits for
//! the device and prints a `[trace]` span (`detect`'s format), so `bench paco` shows where the
//! time goes; tracing serialises what would overlap.
//!
//! Files: `common` (the device arithmetic `R` and its conversions, precision, OOM policy),
//! `fast` (the entry point, which dispatches once to `R = f64` or `R = f32`, and the path
//! without templates), `pairs` (the bucketed pairs with templates), `stats` (one `paco_stats`
//! launch), `worker` (one device of a multi-device run). Device buffers are typed
//! ([`bridge_core::exec::Buffer`]) and kernels launch through the typed launchers generated
//! from `paco.cl` ([`paco_kernels`](super::gpu_kernels::paco_kernels)).

use crate::Precision;
use bridge_core::exec::Executor;
use bridge_core::tuning::Tuning;
use bridge_core::{Device, Result};
use ndarray::Array2;

use super::backend::PacoBackend;
use super::job::PacoJob;

mod common;
mod fast;
mod pairs;
mod stats;
mod worker;

pub(crate) use pairs::PairPlan;
pub(crate) use worker::GpuWorker;

/// Most `paco_stats` work groups (pixels) per launch.
pub const STATS_GROUPS_PER_LAUNCH: usize = 1 << 16;

/// Output positions per `paco_accumulate` launch on a device by default
/// (`ARRAYBRIDGE_PACO_DEVICE_BATCH`): 64k threads fill a GPU, where the CPU's `batch_size`
/// (1000) gave 16 blocks per launch. Where the host computes the trajectories, it computes
/// the next batch's while the device sums this one.
pub const DEVICE_BATCH: usize = 1 << 16;

/// PACO on a device, over its executor `E`. See the [module docs](self) for the data flow,
/// precision and what is delegated to the CPU.
#[derive(Debug, Clone)]
pub struct GpuPaco<E: Executor> {
    exec: E,
    precision: Precision,
    tuning: Tuning,
}

/// [`GpuPaco`] on an OpenCL device.
#[cfg(feature = "opencl")]
pub type OpenClPaco = GpuPaco<bridge_opencl::OpenClExecutor>;

/// [`GpuPaco`] on a CUDA device (the same portable kernels, compiled by NVRTC).
#[cfg(feature = "cuda")]
pub type CudaPaco = GpuPaco<bridge_cuda::CudaExecutor>;

impl<E: Executor> GpuPaco<E> {
    /// The back end over `exec`, in [`Precision::Auto`].
    pub fn with_executor(exec: E) -> Self {
        GpuPaco {
            exec,
            precision: Precision::Auto,
            tuning: bridge_core::tuning::process().clone(),
        }
    }

    /// The same back end with other knobs (`ARRAYBRIDGE_PACO_STATS_WG`, `_LINE_WG`,
    /// `_DEVICE_BATCH`, docs/gpu.md; the process's by default). Results do not depend on them.
    pub fn with_tuning(mut self, tuning: Tuning) -> Self {
        self.tuning = tuning;
        self
    }

    /// The knobs in use.
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// The same back end with another arithmetic type.
    pub fn with_precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }

    /// Whether the device has doubles (every CUDA device does).
    pub fn has_fp64(&self) -> bool {
        self.exec.has_fp64()
    }

    /// The executor.
    pub fn executor(&self) -> &E {
        &self.exec
    }
}

impl<E: Executor> PacoBackend for GpuPaco<E> {
    fn name(&self) -> &'static str {
        match self.exec.device() {
            Device::Cuda(_) => "cuda",
            Device::OpenCl(_) => "opencl",
            Device::Cpu | Device::TorchCpu | Device::TorchCuda(_) => "device",
        }
    }

    fn ab_maps(&self, job: &PacoJob<'_>) -> Result<(Array2<f64>, Array2<f64>)> {
        let (a, b) = fast::ab_device(&self.exec, job, None, (self.precision, &self.tuning))?;
        stats::to_maps(job, a, b)
    }

    fn ab_at(&self, job: &PacoJob<'_>, phi0s: &[(usize, usize)]) -> Result<(Vec<f64>, Vec<f64>)> {
        fast::ab_device(&self.exec, job, Some(phi0s), (self.precision, &self.tuning))
    }
}
