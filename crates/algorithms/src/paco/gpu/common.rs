//! What the device passes share: the device arithmetic `R` and its conversions, index
//! conversion, the precision decision, the OOM policy and the template kinds of the pairs path.

use bridge_core::exec::Executor;
use bridge_core::tuning::Tuning;
use bridge_core::{BridgeError, Device, Result};
use rayon::prelude::*;

use super::super::gpu_kernels;
use super::super::templates::Templates;
use crate::Precision;
use crate::detect::real::Real;

/// `paco_stats` work-group size: `ARRAYBRIDGE_PACO_STATS_WG` of `t`, else smaller on CPU
/// devices (PoCL) than on GPUs.
pub(super) fn stats_wg<E: Executor>(e: &E, t: &Tuning) -> usize {
    t.usize_knob("ARRAYBRIDGE_PACO_STATS_WG")
        .unwrap_or(if e.is_cpu() {
            gpu_kernels::STATS_WG_CPU
        } else {
            gpu_kernels::STATS_WG
        })
}

/// Work-group size of the per-pixel kernels (`ARRAYBRIDGE_PACO_LINE_WG` of `t`, default
/// [`gpu_kernels::LINE_WG`]).
pub(super) fn line_wg(t: &Tuning) -> usize {
    t.usize_or("ARRAYBRIDGE_PACO_LINE_WG", gpu_kernels::LINE_WG)
}

/// Output positions per `paco_accumulate` launch (`ARRAYBRIDGE_PACO_DEVICE_BATCH` of `t`,
/// default [`super::DEVICE_BATCH`]).
pub(super) fn device_batch(t: &Tuning) -> usize {
    t.usize_or("ARRAYBRIDGE_PACO_DEVICE_BATCH", super::DEVICE_BATCH)
}

/// When tracing (`ARRAYBRIDGE_TRACE`), waits for `e`'s device and prints the stage begun at
/// `t0` as a `[trace]` span (so the span is device time, not enqueue time; tracing serialises
/// the pipeline).
pub(super) fn trace_stage<E: Executor>(
    e: &E,
    t0: std::time::Instant,
    msg: impl FnOnce() -> String,
) -> Result<()> {
    if crate::detect::trace_enabled() {
        e.synchronize()?;
        crate::detect::trace_span(t0, std::time::Instant::now(), msg);
    }
    Ok(())
}

/// The launch shapes of one run, from the tuning of its back end (results do not depend on
/// them).
#[derive(Debug, Clone, Copy)]
pub(super) struct Shapes {
    /// `paco_stats` work-group size ([`stats_wg`]).
    pub(super) stats_wg: usize,
    /// Work-group size of the per-pixel kernels ([`line_wg`]).
    pub(super) line_wg: usize,
    /// Output positions per `paco_accumulate` launch ([`device_batch`], at least 1).
    pub(super) batch: usize,
    /// Where `paco_stats` gets the sample covariance ([`CovMode::of`]).
    pub(super) cov: CovMode,
    /// What `paco_lag` reads and writes (`ARRAYBRIDGE_PACO_LAG_LAYOUT`).
    pub(super) lag_layout: LagLayout,
    /// Where the trajectories of the path without templates are computed
    /// (`ARRAYBRIDGE_PACO_TRAJ`).
    pub(super) traj: TrajMode,
    /// `paco_stats`' Cholesky updates its trailing triangle a column per work item
    /// (`ARRAYBRIDGE_PACO_CHOL=columns`; auto: where a pixel's group has more than one work
    /// item) rather than a row at a time over the group.
    pub(super) chol_cols: bool,
    /// `paco_lag`'s grid runs over the lags first (`ARRAYBRIDGE_PACO_LAG_ORDER=lags`; auto:
    /// on GPUs), so the groups in flight read the same pixels' frames (in cache) for every
    /// lag instead of streaming the cube once per lag.
    pub(super) lag_first: bool,
}

/// Where the path without sub-pixel templates computes its trajectories
/// (`ARRAYBRIDGE_PACO_TRAJ`); the sums are the same bits either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TrajMode {
    /// `Device` on GPUs, `Host` on CPU devices (PoCL: its double sine is slower than the
    /// host's, on the same cores).
    Auto,
    /// On the device when the run's arithmetic is double (`paco_traj`: certified roundings,
    /// the undecided entries computed on the host), else on the host.
    Device,
    /// On the host (`paco_accumulate` reads them), as before 2026-11-28.
    Host,
    /// As `Device`, but every coordinate within 2⁻¹⁰ pixel of a rounding boundary is left to
    /// the host: many undecided positions, a test of the host's share.
    Wide,
}

impl TrajMode {
    /// Whether a run in double (`dbl`) on a CPU device (`cpu`) or a GPU computes its
    /// trajectories on the device.
    pub(super) fn on_device(self, dbl: bool, cpu: bool) -> bool {
        dbl && match self {
            TrajMode::Auto => !cpu,
            TrajMode::Device | TrajMode::Wide => true,
            TrajMode::Host => false,
        }
    }

    /// The absolute part of the certification margin in pixels (`geo[4]` of `paco_traj`).
    pub(super) fn margin(self) -> f64 {
        match self {
            TrajMode::Wide => 1.0 / 1024.0,
            TrajMode::Auto | TrajMode::Device | TrajMode::Host => 0.0,
        }
    }
}

/// What `paco_lag` reads and how its table is laid out (`ARRAYBRIDGE_PACO_LAG_LAYOUT`); the
/// numbers are the same in every layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LagLayout {
    /// The frame-major cube, a thread per pixel and lag (neighbouring threads read and write
    /// neighbouring pixels); the table lag-major. GPUs' default.
    Frame,
    /// The pixel-major cube, a thread per pixel over all its lags (its column stays in
    /// cache); the table pixel-major, as the CPU's. CPU devices' default.
    Pixel,
    /// The frame-major cube, a thread per pixel and lag, the table pixel-major: the reads of
    /// `paco_lag` coalesced, and `paco_stats` reads each patch pixel's lags from one short
    /// row of the table instead of across it.
    Mixed,
}

/// Where `paco_stats` gets the sample covariance (`ARRAYBRIDGE_PACO_COV`); the numbers are the
/// same either way (the same dot products in the same order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CovMode {
    /// Whichever of the two computes fewer dot products for a launch.
    Auto,
    /// The lag table of `paco_lag` always, at any size (out of device memory: computed
    /// directly).
    Lag,
    /// `K(K+1)/2` dot products per pixel in `paco_stats`.
    Direct,
}

impl CovMode {
    /// The mode of `t`'s `ARRAYBRIDGE_PACO_COV`.
    pub(super) fn of(t: &Tuning) -> CovMode {
        match t.choice("ARRAYBRIDGE_PACO_COV").as_str() {
            "lag" => CovMode::Lag,
            "direct" => CovMode::Direct,
            _ => CovMode::Auto,
        }
    }

    /// Whether a launch over `pixels` statistics pixels reads a lag table of `lag_pixels`
    /// pixels × `nl` lags rather than computing `K(K+1)/2` dot products per pixel.
    pub(super) fn use_lag(self, pixels: usize, k: usize, lag_pixels: usize, nl: usize) -> bool {
        match self {
            CovMode::Direct => false,
            CovMode::Lag => true,
            CovMode::Auto => {
                (lag_pixels as u128) * (nl as u128)
                    < (pixels as u128) * (k as u128 * (k as u128 + 1) / 2)
            }
        }
    }
}

impl Shapes {
    pub(super) fn new<E: Executor>(e: &E, t: &Tuning) -> Shapes {
        let stats_wg = stats_wg(e, t);
        Shapes {
            stats_wg,
            chol_cols: match t.choice("ARRAYBRIDGE_PACO_CHOL").as_str() {
                "rows" => false,
                "columns" => true,
                _ => stats_wg > 1,
            },
            lag_first: match t.choice("ARRAYBRIDGE_PACO_LAG_ORDER").as_str() {
                "lags" => true,
                "pixels" => false,
                _ => !e.is_cpu(),
            },
            line_wg: line_wg(t),
            batch: device_batch(t).max(1),
            cov: CovMode::of(t),
            lag_layout: match t.choice("ARRAYBRIDGE_PACO_LAG_LAYOUT").as_str() {
                "pixel" => LagLayout::Pixel,
                "frame" => LagLayout::Frame,
                "mixed" => LagLayout::Mixed,
                _ if e.is_cpu() => LagLayout::Pixel,
                _ => LagLayout::Frame,
            },
            traj: match t.choice("ARRAYBRIDGE_PACO_TRAJ").as_str() {
                "device" => TrajMode::Device,
                "host" => TrajMode::Host,
                "wide" => TrajMode::Wide,
                _ => TrajMode::Auto,
            },
        }
    }
}

pub(super) fn to_u32(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| {
        BridgeError::invalid_argument(what, format!("{v} does not fit the device's 32-bit index"))
    })
}

/// The device arithmetic of a run: `f64` or `f32` (the `REAL` of the kernels).
pub(super) use crate::detect::gpu::DevReal;

/// Whether `R` is the double-precision instantiation.
pub(super) fn is_double<R: DevReal>() -> bool {
    !<R as Real>::IS_F32
}

/// f64 values rounded to `R` (round to nearest).
pub(super) fn to_reals<R: DevReal>(vals: impl Iterator<Item = f64>) -> Vec<R> {
    vals.map(<R as Real>::from_f64).collect()
}

/// [`to_reals`] of a slice times `scale` (a power of two: exact), converted in parallel pieces
/// for large inputs (the cube).
pub(super) fn to_reals_scaled<R: DevReal>(vals: &[f64], scale: f64) -> Vec<R> {
    const PIECE: usize = 1 << 18;
    if vals.len() <= PIECE {
        return to_reals(vals.iter().map(|&x| x * scale));
    }
    vals.par_iter()
        .with_min_len(PIECE)
        .map(|&x| <R as Real>::from_f64(x * scale))
        .collect()
}

/// `R` values widened to f64 (exact).
pub(super) fn to_f64s<R: DevReal>(vals: Vec<R>) -> Vec<f64> {
    vals.into_iter().map(<R as Real>::to_f64).collect()
}

/// Bytes of `n` elements of `T` (a transfer's size).
pub(super) fn bytes_of<T>(n: usize) -> u64 {
    (n * std::mem::size_of::<T>()) as u64
}

/// Whether the run uses double precision on this device.
pub(super) fn resolve_precision(p: Precision, fp64: bool, device: Device) -> Result<bool> {
    match p {
        Precision::Auto => Ok(fp64),
        Precision::F32 => Ok(false),
        Precision::F64 if fp64 => Ok(true),
        Precision::F64 => Err(BridgeError::Unsupported(format!(
            "PACO in double precision: {device} has no float64 support"
        ))),
    }
}

/// Templates of the bucketed-pairs path.
pub(super) enum PairTemplates {
    /// The `(q+1)²·K` table, blended on the device (`sub = 1`).
    Table { q: usize, data: Vec<f64> },
    /// The CPU's templates, one per pair, computed on the host (`sub = 2`).
    PerPair(Templates),
}
