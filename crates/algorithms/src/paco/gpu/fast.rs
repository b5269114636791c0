//! The device entry point ([`ab_device`]: templates first, then the path) and the path without
//! sub-pixel templates ([`ab_fast`]: statistics per band, the whitened matched-filter cube, the
//! trajectory sums in batches).

use bridge_core::exec::{Executor, KernelArg};
use bridge_core::oom::{NoRelease, RetryPolicy, run_batched};
use bridge_core::tuning::Tuning;
use bridge_core::{BridgeError, Result};
use rayon::prelude::*;

use super::super::gpu_kernels::{self, KMAX, KMAX_BIG};
use super::super::job::PacoJob;
use super::super::settings::{SubPixel, Variant};
use super::super::templates::Templates;
use super::common::{
    PairTemplates, Shapes, decode, encode, encode_slice, i32_bytes, resolve_precision, to_u32,
};
use super::pairs::ab_pairs;
use super::stats::{StatsCtx, StatsLaunch, launch_stats};
use super::{GpuPrecision, STATS_GROUPS_PER_LAUNCH};

/// What a run decides before any device work: the arithmetic type, the build options and the
/// templates (a mode the CPU does not implement is its typed error here).
pub(super) struct Plan {
    pub(super) dbl: bool,
    pub(super) big: bool,
    pub(super) opts: &'static [&'static str],
    pub(super) tpl: Option<PairTemplates>,
    pub(super) shapes: Shapes,
}

impl Plan {
    pub(super) fn new<E: Executor>(
        e: &E,
        job: &PacoJob<'_>,
        precision: GpuPrecision,
        tuning: &Tuning,
    ) -> Result<Self> {
        let dbl = resolve_precision(precision, e.has_fp64(), e.device())?;
        let k = job.disk.len();
        let opts = gpu_kernels::options(dbl, k).ok_or_else(|| {
            BridgeError::Unsupported(format!(
                "PACO device kernels support patches of at most {KMAX_BIG} pixels (radius 6); \
                 this patch has {k} (use --device cpu)"
            ))
        })?;
        let tpl = match job.params.subpixel {
            SubPixel::Off => None,
            SubPixel::Table { q } => Some(PairTemplates::Table {
                q,
                data: job.template_table(q)?,
            }),
            mode => Some(PairTemplates::PerPair(Templates::new(
                &job.psf_n.psf,
                &job.disk,
                mode,
                job.geom.rounding,
            )?)),
        };
        Ok(Plan {
            dbl,
            big: k > KMAX,
            opts,
            tpl,
            shapes: Shapes::new(e, tuning),
        })
    }
}

/// A run's inputs on one device: the raw and centred cube (uploaded once), the patch offsets
/// and the centred template; [`Self::ctx`] is what every `paco_stats` launch shares.
pub(super) struct DeviceJob<B> {
    pub(super) plan: Plan,
    /// The raw cube, kept until the run ends (launches may still read it).
    _cube: B,
    cen: B,
    offs: B,
    h0: B,
    dummy: B,
    wu: u32,
    tu: u32,
    ku: u32,
    variant: u32,
    /// Bytes uploaded so far.
    pub(super) uploaded: u64,
}

impl<B> DeviceJob<B> {
    /// Upload the cube, centre and transpose it on the device, and upload the per-pixel inputs.
    pub(super) fn new<E: Executor<Buffer = B>>(
        e: &E,
        job: &PacoJob<'_>,
        plan: Plan,
    ) -> Result<Self> {
        let dbl = plan.dbl;
        let rs = if dbl { 8 } else { 4 };
        let (t, h, w) = job.cube.dim();
        let k = job.disk.len();
        let npix = h * w;
        let (tu, wu, ku, npu) = (
            to_u32(t, "frames")?,
            to_u32(w, "columns")?,
            to_u32(k, "patch area")?,
            to_u32(npix, "pixels")?,
        );
        to_u32(npix * t, "cube size")?;
        i32::try_from(npix)
            .map_err(|_| BridgeError::invalid_argument("frame", "over 2^31 pixels per frame"))?;
        // 1. cube, centred and transposed on the device
        // Launches are asynchronous and a released buffer may be reused at once by the
        // backend's pool, so every buffer a queued kernel reads stays alive until the blocking
        // downloads at the end.
        // in float, scaled into [0.5, 1) on the way (exact; see PacoJob::device_scale)
        let s = job.device_scale(dbl);
        let cube_bytes = match job.cube.as_slice() {
            Some(c) => encode_slice(c, dbl, s),
            None => encode(job.cube.iter().map(|&v| v * s), dbl, t * npix),
        };
        let mut uploaded = cube_bytes.len() as u64;
        let cube = e.upload(&cube_bytes)?;
        drop(cube_bytes);
        let cen = e.alloc(npix * t * rs)?;
        let lw = plan.shapes.line_wg;
        e.launch(
            &gpu_kernels::PACO,
            plan.opts,
            "paco_centre",
            &[npix.div_ceil(lw) * lw],
            &[lw],
            &[
                KernelArg::Buf(&cube),
                KernelArg::Buf(&cen),
                KernelArg::U32(npu),
                KernelArg::U32(tu),
            ],
        )?;
        // 2. per-pixel inputs
        let offs: Vec<i32> = job
            .disk
            .iter()
            .map(|&(dy, dx)| i32::try_from(dy * w as isize + dx))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| BridgeError::invalid_argument("frame", "patch offsets overflow i32"))?;
        let offs_bytes = i32_bytes(&offs);
        let h0 = encode(job.centred_template()?.iter().copied(), dbl, k);
        uploaded += (offs_bytes.len() + h0.len()) as u64;
        let offs = e.upload(&offs_bytes)?;
        let h0 = e.upload(&h0)?;
        let variant = match job.params.variant {
            Variant::Paper => 0u32,
            Variant::Vip => 1u32,
        };
        let dummy = e.alloc(4)?;
        Ok(DeviceJob {
            plan,
            _cube: cube,
            cen,
            offs,
            h0,
            dummy,
            wu,
            tu,
            ku,
            variant,
            uploaded,
        })
    }

    /// The arguments every `paco_stats` launch shares.
    pub(super) fn ctx(&self) -> StatsCtx<'_, B> {
        let rs = if self.plan.dbl { 8 } else { 4 };
        let k = self.ku as usize;
        StatsCtx {
            opts: self.plan.opts,
            cen: &self.cen,
            offs: &self.offs,
            h0: &self.h0,
            dummy: &self.dummy,
            wu: self.wu,
            tu: self.tu,
            ku: self.ku,
            variant: self.variant,
            local_bytes: if self.plan.big { 8 } else { k * k * rs },
            shapes: self.plan.shapes,
        }
    }
}

/// The device pipeline (see the module docs): a and b at `phi0s` (`None`: the full grid,
/// row-major), in the caller's units ([`PacoJob::ab_in_cube_units`]).
pub(super) fn ab_device<E: Executor>(
    e: &E,
    job: &PacoJob<'_>,
    phi0s: Option<&[(usize, usize)]>,
    (precision, tuning): (GpuPrecision, &Tuning),
) -> Result<(Vec<f64>, Vec<f64>)> {
    // Templates first: a mode the CPU does not implement is its typed error, before any
    // device work.
    let plan = Plan::new(e, job, precision, tuning)?;
    if phi0s.is_some_and(<[(usize, usize)]>::is_empty) {
        return Ok((Vec::new(), Vec::new()));
    }
    let w = job.geom.width;
    let dj = DeviceJob::new(e, job, plan)?;
    let n0 = phi0s.map_or(job.geom.height * w, <[(usize, usize)]>::len);
    let pos = |i: usize| -> (usize, usize) {
        match phi0s {
            Some(p) => p[i],
            None => (i / w, i % w),
        }
    };
    let ctx = dj.ctx();
    let (dbl, big) = (dj.plan.dbl, dj.plan.big);
    let (mut a, mut b) = match &dj.plan.tpl {
        Some(tpl) => ab_pairs(e, &ctx, job, &pos, n0, tpl, dbl, big)?,
        None => ab_fast(e, &ctx, job, &pos, n0, dbl, big)?,
    };
    drop(dj);
    job.ab_from_device(dbl, &mut a, &mut b);
    Ok((a, b))
}

/// Rows of statistics per `paco_stats` launch without templates (bounded by the `COV_GLOBAL`
/// scratch when K > [`KMAX`]).
pub(super) fn fast_band(job: &PacoJob<'_>, dbl: bool, big: bool) -> usize {
    let rs = if dbl { 8 } else { 4 };
    let k = job.disk.len();
    let ((y_lo, y_hi), (x_lo, x_hi)) = job.geom.stats_ranges();
    let nx = x_hi - x_lo;
    let mut band = STATS_GROUPS_PER_LAUNCH
        .checked_div(nx)
        .map_or(1, |b| b.clamp(1, y_hi.saturating_sub(y_lo).max(1)));
    if big {
        // one K×K scratch matrix per work group of a launch
        let per_row = (nx * k * k * rs).max(1);
        band = band.min((job.params.max_tile_bytes / per_row).max(1));
    }
    band
}

/// The band buffers of [`stats_rows`]: `w` of `rows` statistics rows (and the `COV_GLOBAL`
/// scratch).
pub(super) fn band_buffers<E: Executor>(
    e: &E,
    job: &PacoJob<'_>,
    rows: usize,
    dbl: bool,
    big: bool,
) -> Result<(E::Buffer, Option<E::Buffer>)> {
    let rs = if dbl { 8 } else { 4 };
    let k = job.disk.len();
    let (_, (x_lo, x_hi)) = job.geom.stats_ranges();
    let nx = (x_hi - x_lo).max(1);
    let wb = e.alloc(rows * nx * k * rs)?;
    let scr = if big {
        Some(e.alloc(rows * nx * k * k * rs)?)
    } else {
        None
    };
    Ok((wb, scr))
}

/// q and z of the statistics rows `[ya, yb)` (columns of the edge rule), written into the
/// full-frame buffers `q` and `z`, in launches of at most `band` rows (`wb` and `scr` sized for
/// `band` rows by [`band_buffers`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn stats_rows<E: Executor>(
    e: &E,
    c: &StatsCtx<'_, E::Buffer>,
    job: &PacoJob<'_>,
    (q, z): (&E::Buffer, &E::Buffer),
    (wb, scr): (&E::Buffer, Option<&E::Buffer>),
    (ya, yb): (usize, usize),
    band: usize,
) -> Result<()> {
    let t = job.cube.dim().0;
    let (_, (x_lo, x_hi)) = job.geom.stats_ranges();
    let nx = x_hi - x_lo;
    let xu = to_u32(x_lo, "column")?;
    let nxu = to_u32(nx, "columns")?;
    let lw = c.shapes.line_wg;
    for ya in (ya..yb).step_by(band.max(1)) {
        let yb = (ya + band).min(yb);
        let groups = (yb - ya) * nx;
        if groups == 0 {
            continue;
        }
        let l = StatsLaunch {
            q,
            wb,
            scr,
            y0: to_u32(ya, "row")?,
            x_lo: xu,
            nx: nxu,
            groups,
            pairs: None,
        };
        launch_stats(e, c, &l)?;
        // launches are ordered (OpenCL waits for each, CUDA uses one stream), so the next
        // band's paco_stats cannot overwrite wb (or the scratch) before this paco_z has read it
        e.launch(
            &gpu_kernels::PACO,
            c.opts,
            "paco_z",
            &[(groups * t).div_ceil(lw) * lw],
            &[lw],
            &[
                KernelArg::Buf(c.cen),
                KernelArg::Buf(c.offs),
                KernelArg::Buf(wb),
                KernelArg::Buf(z),
                KernelArg::U32(c.wu),
                KernelArg::U32(c.tu),
                KernelArg::U32(c.ku),
                KernelArg::U32(to_u32(ya, "row")?),
                KernelArg::U32(xu),
                KernelArg::U32(nxu),
                KernelArg::U32(to_u32(groups, "pixels")?),
            ],
        )?;
    }
    Ok(())
}

/// Without sub-pixel templates: q and the whitened matched-filter cube z per band of
/// statistics rows, then the trajectory sums in batches of `batch_size` positions.
#[allow(clippy::too_many_arguments)]
pub(super) fn ab_fast<E: Executor>(
    e: &E,
    c: &StatsCtx<'_, E::Buffer>,
    job: &PacoJob<'_>,
    pos: &(dyn Fn(usize) -> (usize, usize) + Sync),
    n0: usize,
    dbl: bool,
    big: bool,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let rs = if dbl { 8 } else { 4 };
    let (t, h, w) = job.cube.dim();
    let npix = h * w;
    let ((y_lo, y_hi), _) = job.geom.stats_ranges();
    let band = fast_band(job, dbl, big);
    let q = e.alloc(npix * rs)?;
    let z = e.alloc(npix * t * rs)?;
    let (wb, scr) = band_buffers(e, job, band, dbl, big)?;
    stats_rows(e, c, job, (&q, &z), (&wb, scr.as_ref()), (y_lo, y_hi), band)?;
    let lw = c.shapes.line_wg;

    // trajectory sums, in batches of output positions; the next batch's trajectories are
    // computed on the host while the device sums the current one
    let geom = job.geom;
    let angles = &job.angles;
    let trajectories = |lo: usize, hi: usize| -> Vec<i32> {
        let mut traj = vec![-1i32; (hi - lo) * t];
        traj.par_chunks_mut(t).enumerate().for_each(|(i, row)| {
            let (y0, x0) = pos(lo + i);
            let (rr, th0) = geom.polar(y0 as f64, x0 as f64);
            for (o, &ang) in row.iter_mut().zip(angles) {
                match geom.pixel_polar(rr, th0, ang) {
                    // θ < H·W < 2³¹, checked above
                    Some((theta, _, _)) => *o = theta as i32,
                    None => {
                        *o = -1;
                        break;
                    }
                }
            }
        });
        traj
    };
    let policy = RetryPolicy::split_only();
    let batch = c.shapes.batch;
    let mut a_out = Vec::with_capacity(n0);
    let mut b_out = Vec::with_capacity(n0);
    let mut start = 0;
    // (first position, trajectories) computed ahead for the next batch
    let mut ahead: Option<(usize, Vec<i32>)> = None;
    while start < n0 {
        let len = batch.min(n0 - start);
        let next = start + len;
        let mut op = |range: std::ops::Range<usize>| -> Result<Vec<(f64, f64)>> {
            let (lo, hi) = (start + range.start, start + range.end);
            let n = hi - lo;
            let traj = match ahead.take() {
                Some((first, traj)) if first == lo && traj.len() == n * t => traj,
                other => {
                    ahead = other;
                    trajectories(lo, hi)
                }
            };
            let traj_buf = e.upload(&i32_bytes(&traj))?;
            drop(traj);
            let a = e.alloc(n * rs)?;
            let b = e.alloc(n * rs)?;
            e.launch(
                &gpu_kernels::PACO,
                c.opts,
                "paco_accumulate",
                &[n.div_ceil(lw) * lw],
                &[lw],
                &[
                    KernelArg::Buf(&traj_buf),
                    KernelArg::Buf(&q),
                    KernelArg::Buf(&z),
                    KernelArg::Buf(&a),
                    KernelArg::Buf(&b),
                    KernelArg::U32(to_u32(n, "positions")?),
                    KernelArg::U32(c.tu),
                ],
            )?;
            // the whole batch in one piece: prepare the next while the device runs this one
            if hi == next && range.start == 0 && next < n0 && ahead.is_none() {
                let nhi = (next + batch).min(n0);
                ahead = Some((next, trajectories(next, nhi)));
            }
            let av = decode(&e.read(&a, n * rs)?, dbl);
            let bv = decode(&e.read(&b, n * rs)?, dbl);
            Ok(av.into_iter().zip(bv).collect())
        };
        let part = run_batched(&policy, e.device(), &NoRelease, len, &mut op, None)?;
        for (a, b) in part {
            a_out.push(a);
            b_out.push(b);
        }
        start = next;
    }
    drop((q, z, wb, scr));
    Ok((a_out, b_out))
}
