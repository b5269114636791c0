//! One `paco_stats` launch (shrinkage covariance, Cholesky, and either the matched filter or the
//! pair contributions) and the full-grid maps from the flat outputs.

use bridge_core::exec::{Executor, KernelArg};
use bridge_core::{BridgeError, Result};
use ndarray::Array2;

use super::super::gpu_kernels;
use super::super::job::PacoJob;
use super::common::to_u32;

/// Buffers and sizes shared by every `paco_stats` launch of a run.
pub(super) struct StatsCtx<'a, B> {
    pub(super) opts: &'a [&'a str],
    pub(super) cen: &'a B,
    pub(super) offs: &'a B,
    pub(super) h0: &'a B,
    /// A 4-byte buffer for the arguments a launch never reads or writes (distinct from every
    /// buffer that is written, as the kernel's `restrict` qualifiers require).
    pub(super) dummy: &'a B,
    pub(super) wu: u32,
    pub(super) tu: u32,
    pub(super) ku: u32,
    pub(super) variant: u32,
    /// Bytes of the `LOCAL_ARG` of `paco_stats`: the K×K matrix (`K²·s`), or a token 8 bytes
    /// with `COV_GLOBAL` (the matrix is in `scr` then).
    pub(super) local_bytes: usize,
    /// The run's launch shapes.
    pub(super) shapes: super::common::Shapes,
}

/// The pair arguments of a `paco_stats` launch with sub-pixel templates.
pub(super) struct PairArgs<'a, B> {
    /// 1: table templates, 2: per-pair templates.
    pub(super) sub: u32,
    pub(super) plist: &'a B,
    pub(super) pstart: &'a B,
    pub(super) pfr: &'a B,
    pub(super) pfy: &'a B,
    pub(super) pfx: &'a B,
    pub(super) tbl: &'a B,
    pub(super) tq: u32,
    pub(super) nearest: u32,
    pub(super) cab: &'a B,
}

/// One `paco_stats` launch: `groups` pixels of rows from `y0` (columns `[x_lo, x_lo + nx)`)
/// without templates, the pixels of `pairs.plist` with them.
pub(super) struct StatsLaunch<'a, B> {
    pub(super) q: &'a B,
    pub(super) wb: &'a B,
    /// The K×K scratch matrices of the `COV_GLOBAL` variant (`groups·K²` values).
    pub(super) scr: Option<&'a B>,
    pub(super) y0: u32,
    pub(super) x_lo: u32,
    pub(super) nx: u32,
    pub(super) groups: usize,
    pub(super) pairs: Option<PairArgs<'a, B>>,
}

pub(super) fn launch_stats<E: Executor>(
    e: &E,
    c: &StatsCtx<'_, E::Buffer>,
    l: &StatsLaunch<'_, E::Buffer>,
) -> Result<()> {
    if l.groups == 0 {
        return Ok(());
    }
    let d = c.dummy;
    let p = l.pairs.as_ref();
    e.launch(
        &gpu_kernels::PACO,
        c.opts,
        "paco_stats",
        &[l.groups * c.shapes.stats_wg],
        &[c.shapes.stats_wg],
        &[
            KernelArg::Buf(c.cen),
            KernelArg::Buf(c.offs),
            KernelArg::Buf(c.h0),
            KernelArg::Buf(l.q),
            KernelArg::Buf(l.wb),
            KernelArg::Buf(l.scr.unwrap_or(d)),
            KernelArg::U32(c.wu),
            KernelArg::U32(c.tu),
            KernelArg::U32(c.ku),
            KernelArg::U32(l.y0),
            KernelArg::U32(l.x_lo),
            KernelArg::U32(l.nx),
            KernelArg::U32(to_u32(l.groups, "pixels")?),
            KernelArg::U32(c.variant),
            KernelArg::U32(p.map_or(0, |p| p.sub)),
            KernelArg::Buf(p.map_or(d, |p| p.plist)),
            KernelArg::Buf(p.map_or(d, |p| p.pstart)),
            KernelArg::Buf(p.map_or(d, |p| p.pfr)),
            KernelArg::Buf(p.map_or(d, |p| p.pfy)),
            KernelArg::Buf(p.map_or(d, |p| p.pfx)),
            KernelArg::Buf(p.map_or(d, |p| p.tbl)),
            KernelArg::U32(p.map_or(1, |p| p.tq)),
            KernelArg::U32(p.map_or(0, |p| p.nearest)),
            KernelArg::Buf(p.map_or(d, |p| p.cab)),
            KernelArg::Local(c.local_bytes),
        ],
    )
}

/// Full-grid maps from the flat outputs.
pub(super) fn to_maps(
    job: &PacoJob<'_>,
    a: Vec<f64>,
    b: Vec<f64>,
) -> Result<(Array2<f64>, Array2<f64>)> {
    let shape = (job.geom.height, job.geom.width);
    let err = |e: ndarray::ShapeError| BridgeError::Unsupported(format!("internal: {e}"));
    Ok((
        Array2::from_shape_vec(shape, a).map_err(err)?,
        Array2::from_shape_vec(shape, b).map_err(err)?,
    ))
}
