//! The device entry point ([`ab_device`]: templates first, then the path) and the path without
//! sub-pixel templates ([`ab_fast`]: statistics per band, the whitened matched-filter cube, the
//! trajectory sums in batches).

use bridge_core::exec::{Buffer, Executor, Grid, Local, TypedExecutor};
use bridge_core::oom::{NoRelease, RetryPolicy, run_batched};
use bridge_core::tuning::Tuning;
use bridge_core::{BridgeError, Result};
use rayon::prelude::*;

use super::super::gpu_kernels::paco_kernels::Kernels;
use super::super::gpu_kernels::{self, KMAX, KMAX_BIG};
use super::super::job::PacoJob;
use super::super::settings::{Rounding, SubPixel, Variant};
use super::super::templates::Templates;
use super::STATS_GROUPS_PER_LAUNCH;
use super::common::{
    DevReal, PairTemplates, Shapes, bytes_of, is_double, resolve_precision, to_f64s, to_reals,
    to_reals_scaled, to_u32, trace_stage,
};
use super::pairs::ab_pairs;
use super::stats::{LagTable, StatsCtx, StatsLaunch, launch_stats};
use crate::Precision;
use crate::paco::stats::lag_tables;

/// What a run decides before any device work: the arithmetic type, the build options and the
/// templates (a mode the CPU does not implement is its typed error here).
pub(super) struct Plan {
    /// Double precision: the device code runs as `R = f64`, else `R = f32`.
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
        precision: Precision,
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

/// A run's inputs on one device, in arithmetic `R`: the centred cube in both layouts (uploaded
/// once, centred in place frame-major, and transposed pixel-major),
/// the patch offsets and the centred template; [`Self::ctx`] is what every `paco_stats` launch
/// shares.
pub(super) struct DeviceJob<E: Executor, R: DevReal> {
    pub(super) plan: Plan,
    /// The cube, centred in place by `paco_centre` (frame-major: `paco_lag`'s input).
    cenf: Buffer<E, R>,
    cen: Buffer<E, R>,
    offs: Buffer<E, i32>,
    /// The patch's lags, flattened `(dy, dx)`, and `lag_idx` (K×K).
    lags: Buffer<E, i32>,
    lidx: Buffer<E, u32>,
    nl: usize,
    /// The smallest and the largest `dy` of the patch.
    dy: (isize, isize),
    hu: u32,
    h0: Buffer<E, R>,
    dummy: Buffer<E, R>,
    dummy_u32: Buffer<E, u32>,
    wu: u32,
    tu: u32,
    ku: u32,
    variant: u32,
    /// Bytes uploaded so far.
    pub(super) uploaded: u64,
}

impl<E: Executor, R: DevReal> DeviceJob<E, R> {
    /// Upload the cube, centre and transpose it on the device, and upload the per-pixel inputs
    /// (`plan.dbl` is `R`'s precision).
    pub(super) fn new(e: &E, job: &PacoJob<'_>, plan: Plan) -> Result<Self> {
        if plan.dbl != is_double::<R>() {
            return Err(BridgeError::Unsupported(
                "internal: the device arithmetic differs from the plan's precision".into(),
            ));
        }
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
        let t0 = std::time::Instant::now();
        let s = job.device_scale(is_double::<R>());
        let mut uploaded = bytes_of::<R>(npix * t);
        let cube = match job.cube.as_slice() {
            // in double the scale is 1: the cube's own bytes, with no host copy (a 100×1024²
            // cube is 800 MiB)
            Some(c) if is_double::<R>() && s == 1.0 => {
                e.upload_bytes::<R>(bytemuck::cast_slice(c))?
            }
            Some(c) => e.upload_slice(&to_reals_scaled::<R>(c, s))?,
            None => e.upload_slice(&to_reals::<R>(job.cube.iter().map(|&v| v * s)))?,
        };
        let cen = e.alloc_elems::<R>(npix * t)?;
        let lw = plan.shapes.line_wg;
        Kernels::new(e, plan.opts).paco_centre(
            Grid::new(&[npix.div_ceil(lw) * lw], &[lw]),
            &cube,
            &cen,
            npu,
            tu,
        )?;
        trace_stage(e, t0, || {
            format!("paco cube {t}x{h}x{w} converted, uploaded and centred")
        })?;
        // 2. per-pixel inputs
        let offs: Vec<i32> = job
            .disk
            .iter()
            .map(|&(dy, dx)| i32::try_from(dy * w as isize + dx))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| BridgeError::invalid_argument("frame", "patch offsets overflow i32"))?;
        let h0: Vec<R> = to_reals(job.centred_template()?.iter().copied());
        let (lag_list, lag_idx) = lag_tables(&job.disk);
        let lags: Vec<i32> = lag_list
            .iter()
            .flat_map(|&(dy, dx)| [dy, dx])
            .map(i32::try_from)
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| BridgeError::invalid_argument("patch", "lags overflow i32"))?;
        let dy = job
            .disk
            .iter()
            .fold((0isize, 0isize), |(lo, hi), &(dy, _)| {
                (lo.min(dy), hi.max(dy))
            });
        uploaded += bytes_of::<i32>(offs.len() + lags.len())
            + bytes_of::<u32>(lag_idx.len())
            + bytes_of::<R>(h0.len());
        let offs = e.upload_slice(&offs)?;
        let h0 = e.upload_slice(&h0)?;
        let nl = lag_list.len();
        let lags = e.upload_slice(&lags)?;
        let lidx = e.upload_slice(&lag_idx)?;
        let variant = match job.params.variant {
            Variant::Paper => 0u32,
            Variant::Vip => 1u32,
        };
        Ok(DeviceJob {
            plan,
            cenf: cube,
            cen,
            offs,
            lags,
            lidx,
            nl,
            dy,
            hu: to_u32(h, "rows")?,
            h0,
            dummy: e.alloc_elems(1)?,
            dummy_u32: e.alloc_elems(1)?,
            wu,
            tu,
            ku,
            variant,
            uploaded,
        })
    }

    /// The arguments every `paco_stats` launch on `e` (the executor of [`Self::new`]) shares.
    pub(super) fn ctx<'a>(&'a self, e: &'a E) -> StatsCtx<'a, E, R> {
        let k = self.ku as usize;
        StatsCtx {
            exec: e,
            kern: Kernels::new(e, self.plan.opts),
            cen: &self.cen,
            cenf: &self.cenf,
            lags: &self.lags,
            lidx: &self.lidx,
            nl: self.nl,
            dy: self.dy,
            hu: self.hu,
            offs: &self.offs,
            h0: &self.h0,
            dummy: &self.dummy,
            dummy_u32: &self.dummy_u32,
            wu: self.wu,
            tu: self.tu,
            ku: self.ku,
            variant: self.variant,
            // the packed upper triangle, K(K+1)/2 values; with COV_GLOBAL a token 8 bytes
            local: Local::elems(if self.plan.big {
                8 / std::mem::size_of::<R>()
            } else {
                gpu_kernels::tri(k)
            }),
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
    (precision, tuning): (Precision, &Tuning),
) -> Result<(Vec<f64>, Vec<f64>)> {
    // Templates first: a mode the CPU does not implement is its typed error, before any
    // device work.
    let plan = Plan::new(e, job, precision, tuning)?;
    if phi0s.is_some_and(<[(usize, usize)]>::is_empty) {
        return Ok((Vec::new(), Vec::new()));
    }
    // the one dispatch on the arithmetic type
    if plan.dbl {
        ab_typed::<E, f64>(e, job, phi0s, plan)
    } else {
        ab_typed::<E, f32>(e, job, phi0s, plan)
    }
}

/// [`ab_device`] in arithmetic `R` (`plan.dbl` is `R`'s precision).
fn ab_typed<E: Executor, R: DevReal>(
    e: &E,
    job: &PacoJob<'_>,
    phi0s: Option<&[(usize, usize)]>,
    plan: Plan,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let w = job.geom.width;
    let dj = DeviceJob::<E, R>::new(e, job, plan)?;
    let n0 = phi0s.map_or(job.geom.height * w, <[(usize, usize)]>::len);
    let pos = |i: usize| -> (usize, usize) {
        match phi0s {
            Some(p) => p[i],
            None => (i / w, i % w),
        }
    };
    let ctx = dj.ctx(e);
    let big = dj.plan.big;
    let (mut a, mut b) = match &dj.plan.tpl {
        Some(tpl) => ab_pairs(e, &ctx, job, &pos, n0, tpl, big)?,
        None => ab_fast(e, &ctx, job, &pos, n0, big)?,
    };
    drop(dj);
    job.ab_from_device(is_double::<R>(), &mut a, &mut b);
    Ok((a, b))
}

/// Rows of statistics per `paco_stats` launch without templates in arithmetic `R` (bounded by
/// the `COV_GLOBAL` scratch when K > [`KMAX`]).
pub(super) fn fast_band<R: DevReal>(job: &PacoJob<'_>, big: bool) -> usize {
    let rs = std::mem::size_of::<R>();
    let k = job.disk.len();
    let ((y_lo, y_hi), (x_lo, x_hi)) = job.geom.stats_ranges();
    let nx = x_hi - x_lo;
    let mut band = STATS_GROUPS_PER_LAUNCH
        .checked_div(nx)
        .map_or(1, |b| b.clamp(1, y_hi.saturating_sub(y_lo).max(1)));
    if big {
        // one packed K×K scratch matrix per work group of a launch
        let per_row = (nx * gpu_kernels::tri(k) * rs).max(1);
        band = band.min((job.params.max_tile_bytes / per_row).max(1));
    }
    band
}

/// The band buffers of [`stats_rows`]: `w` of `rows` statistics rows (and the `COV_GLOBAL`
/// scratch).
pub(super) type BandBuffers<E, R> = (Buffer<E, R>, Option<Buffer<E, R>>);

/// Allocates the [`BandBuffers`] of `rows` statistics rows.
pub(super) fn band_buffers<E: Executor, R: DevReal>(
    e: &E,
    job: &PacoJob<'_>,
    rows: usize,
    big: bool,
) -> Result<BandBuffers<E, R>> {
    let k = job.disk.len();
    let (_, (x_lo, x_hi)) = job.geom.stats_ranges();
    let nx = (x_hi - x_lo).max(1);
    let wb = e.alloc_elems::<R>(rows * nx * k)?;
    let scr = if big {
        Some(e.alloc_elems::<R>(rows * nx * gpu_kernels::tri(k))?)
    } else {
        None
    };
    Ok((wb, scr))
}

/// q and z of the statistics rows `[ya, yb)` (columns of the edge rule), written into the
/// full-frame buffers `q` and `z`, in launches of at most `band` rows (`wb` and `scr` sized for
/// `band` rows by [`band_buffers`]). The rows go in chunks that share one lag table
/// ([`StatsCtx::lag_table`]; within `max_tile_bytes`, halved on out-of-memory down to one row,
/// then computed directly for the remaining rows) when the run's
/// [`CovMode`](super::common::CovMode) takes it. Returns the last chunk's table, which its
/// launches may still be reading: dropping it waits for them on CUDA, so the caller drops it
/// once it has host work of its own done (the first trajectories).
pub(super) fn stats_rows<E: Executor, R: DevReal>(
    c: &StatsCtx<'_, E, R>,
    job: &PacoJob<'_>,
    (q, z): (&Buffer<E, R>, &Buffer<E, R>),
    (wb, scr): (&Buffer<E, R>, Option<&Buffer<E, R>>),
    (ya, yb): (usize, usize),
    band: usize,
) -> Result<Option<LagTable<E, R>>> {
    let (_, (x_lo, x_hi)) = job.geom.stats_ranges();
    let nx = x_hi - x_lo;
    let budget = job.params.max_tile_bytes;
    // statistics rows per lag table: its rows (theirs and the patch's) within the budget
    let span = (c.dy.1 - c.dy.0).max(0) as usize;
    let per_row = c.lag_bytes(1).max(1);
    let mut chunk = (budget / per_row).saturating_sub(span).max(1);
    // set once even a one-row table did not fit: the rest is computed directly
    let mut direct = false;
    let mut last: Option<LagTable<E, R>> = None;
    let mut y = ya;
    while y < yb {
        job.params.control.check("PACO")?;
        let yc = (y + chunk).min(yb);
        let rows = c.lag_rows((y, yc));
        let lag = if !direct && c.wants_lag((yc - y) * nx, rows, budget) {
            let t0 = std::time::Instant::now();
            match c.lag_table(rows) {
                Ok(g) => {
                    trace_stage(c.exec, t0, || {
                        format!("paco lag table rows {}..{}", rows.0, rows.1)
                    })?;
                    Some(g)
                }
                Err(BridgeError::OutOfMemory { .. }) if chunk > 1 => {
                    chunk = chunk.div_ceil(2);
                    log::info!(
                        "paco: no device memory for a lag table; retrying with {chunk} rows"
                    );
                    continue;
                }
                Err(BridgeError::OutOfMemory { .. }) => {
                    log::info!(
                        "paco: no device memory for a one-row lag table; direct covariances \
                         for the remaining rows"
                    );
                    direct = true;
                    None
                }
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        stats_band_rows(c, job, (q, z), (wb, scr), (y, yc), band, lag.as_ref())?;
        // a buffer dropped while a launch still reads it stays alive until that launch is done
        // (OpenCL: the launch holds it; CUDA: the drop waits for its last use): the previous
        // chunk's table goes now, behind this chunk's launches
        drop(std::mem::replace(&mut last, lag));
        y = yc;
    }
    Ok(last)
}

/// [`stats_rows`] of one chunk `[ya, yb)`, its covariances from `lag` (or computed directly).
fn stats_band_rows<E: Executor, R: DevReal>(
    c: &StatsCtx<'_, E, R>,
    job: &PacoJob<'_>,
    (q, z): (&Buffer<E, R>, &Buffer<E, R>),
    (wb, scr): (&Buffer<E, R>, Option<&Buffer<E, R>>),
    (ya, yb): (usize, usize),
    band: usize,
    lag: Option<&LagTable<E, R>>,
) -> Result<()> {
    let t = job.cube.dim().0;
    let (_, (x_lo, x_hi)) = job.geom.stats_ranges();
    let nx = x_hi - x_lo;
    let xu = to_u32(x_lo, "column")?;
    let nxu = to_u32(nx, "columns")?;
    let lw = c.shapes.line_wg;
    let control = &job.params.control;
    for ya in (ya..yb).step_by(band.max(1)) {
        control.check("PACO")?;
        let t0 = std::time::Instant::now();
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
            lag,
        };
        launch_stats(c, &l)?;
        // launches are ordered (OpenCL waits for each, CUDA uses one stream), so the next
        // band's paco_stats cannot overwrite wb (or the scratch) before this paco_z has read it
        c.kern.paco_z(
            Grid::new(&[(groups * t).div_ceil(lw) * lw], &[lw]),
            c.cen,
            c.offs,
            wb,
            z,
            c.wu,
            c.tu,
            c.ku,
            to_u32(ya, "row")?,
            xu,
            nxu,
            to_u32(groups, "pixels")?,
        )?;
        trace_stage(c.exec, t0, || {
            format!(
                "paco stats + z rows {ya}..{yb} ({})",
                if lag.is_some() { "lag table" } else { "direct" }
            )
        })?;
        control.advance((yb - ya) as u64);
    }
    Ok(())
}

/// Without sub-pixel templates: q and the whitened matched-filter cube z per band of
/// statistics rows, then the trajectory sums in batches of `batch_size` positions.
pub(super) fn ab_fast<E: Executor, R: DevReal>(
    e: &E,
    c: &StatsCtx<'_, E, R>,
    job: &PacoJob<'_>,
    pos: &(dyn Fn(usize) -> (usize, usize) + Sync),
    n0: usize,
    big: bool,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let (t, h, w) = job.cube.dim();
    let npix = h * w;
    let ((y_lo, y_hi), _) = job.geom.stats_ranges();
    let band = fast_band::<R>(job, big);
    let q = e.alloc_elems::<R>(npix)?;
    let z = e.alloc_elems::<R>(npix * t)?;
    let (wb, scr) = band_buffers::<E, R>(e, job, band, big)?;
    job.params.control.set_total((y_hi - y_lo) as u64);
    // (the last lag table is dropped after the first trajectories, which the host computes
    // while the device still runs the statistics)
    let mut last_lag = stats_rows(c, job, (&q, &z), (&wb, scr.as_ref()), (y_lo, y_hi), band)?;
    if c.shapes.traj.on_device(is_double::<R>(), e.is_cpu()) {
        return sums_on_device(e, c, job, pos, n0, (&q, &z), last_lag);
    }

    // trajectory sums, in batches of output positions; the next batch's trajectories are
    // computed on the host while the device sums the current one
    let trajectories =
        |lo: usize, hi: usize| -> Vec<i32> { host_trajectories(job, hi - lo, &|i| pos(lo + i)) };
    let batch = c.shapes.batch;
    // (first position, trajectories) computed ahead for the next batch
    let mut ahead: Option<(usize, Vec<i32>)> = None;
    let out = in_batches(e, job, n0, batch, |pos_range, whole| {
        let (lo, hi) = (pos_range.start, pos_range.end);
        let n = hi - lo;
        let t0 = std::time::Instant::now();
        let traj = match ahead.take() {
            Some((first, traj)) if first == lo && traj.len() == n * t => traj,
            other => {
                ahead = other;
                let traj = trajectories(lo, hi);
                // host work: its span, with no wait for the device
                crate::detect::trace_span(t0, std::time::Instant::now(), || {
                    format!("paco trajectories {lo}..{hi} (host)")
                });
                traj
            }
        };
        // the statistics' last lag table, once the host has its first trajectories
        drop(last_lag.take());
        let t0 = std::time::Instant::now();
        let traj_buf = e.upload_slice(&traj)?;
        drop(traj);
        let ab = launch_sums(c, &traj_buf, (&q, &z), n)?;
        // the whole batch in one piece: prepare the next while the device runs this one
        let next = whole.end;
        if pos_range == whole && next < n0 && ahead.is_none() {
            let nhi = (next + batch).min(n0);
            let t1 = std::time::Instant::now();
            ahead = Some((next, trajectories(next, nhi)));
            crate::detect::trace_span(t1, std::time::Instant::now(), || {
                format!("paco trajectories {next}..{nhi} (host, beside the device)")
            });
        }
        let sums = read_sums(e, ab, n)?;
        crate::detect::trace_span(t0, std::time::Instant::now(), || {
            format!("paco upload, sums and read of positions {lo}..{hi}")
        });
        Ok(sums)
    })?;
    drop((q, z, wb, scr));
    Ok(out)
}

/// The trajectories of `count` output positions (`pos_of(i)`, `i < count`) on the host, the
/// CPU's geometry bit for bit: `traj[i·T + ℓ]` is the pixel of frame ℓ, −1 from the first frame
/// whose pixel fails the edge rule (θ < H·W < 2³¹, checked when the cube was uploaded).
fn host_trajectories(
    job: &PacoJob<'_>,
    count: usize,
    pos_of: &(dyn Fn(usize) -> (usize, usize) + Sync),
) -> Vec<i32> {
    let geom = job.geom;
    let angles = &job.angles;
    let t = angles.len();
    let mut traj = vec![-1i32; count * t];
    if t == 0 {
        return traj;
    }
    traj.par_chunks_mut(t).enumerate().for_each(|(i, row)| {
        let (y0, x0) = pos_of(i);
        let (rr, th0) = geom.polar(y0 as f64, x0 as f64);
        for (o, &ang) in row.iter_mut().zip(angles) {
            match geom.pixel_polar(rr, th0, ang) {
                Some((theta, _, _)) => *o = theta as i32,
                None => {
                    *o = -1;
                    break;
                }
            }
        }
    });
    traj
}

/// The trajectory sums of [`ab_fast`] with the trajectories computed on the device
/// (`paco_traj`, runs in double): per batch of output positions the host computes their polar
/// coordinates (the CPU's `atan2`: 16 bytes a position uploaded instead of `4·T` bytes of
/// trajectory), the device each frame's pixel with its own sine and cosine, certified against
/// the host's (see the kernel); the entries it cannot decide (a coordinate within about
/// 2⁻⁴⁰·r of a rounding boundary, so every entry of a frame with angle 0 and an integer centre)
/// come back as a list, the host computes them with the CPU's geometry and `paco_traj_fix`
/// writes them; then `paco_accumulate` sums as on the host path. The same trajectories, so the
/// same bits.
fn sums_on_device<E: Executor, R: DevReal>(
    e: &E,
    c: &StatsCtx<'_, E, R>,
    job: &PacoJob<'_>,
    pos: &(dyn Fn(usize) -> (usize, usize) + Sync),
    n0: usize,
    (q, z): (&Buffer<E, R>, &Buffer<E, R>),
    mut last_lag: Option<LagTable<E, R>>,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let geom = job.geom;
    let angles = &job.angles;
    let t = angles.len().max(1);
    let ((ylo, yhi), (xlo, xhi)) = geom.stats_ranges();
    let to_i32 = |v: usize| {
        i32::try_from(v).map_err(|_| BridgeError::invalid_argument("frame", "over 2^31 pixels"))
    };
    let (ylo, yhi, xlo, xhi) = (to_i32(ylo)?, to_i32(yhi)?, to_i32(xlo)?, to_i32(xhi)?);
    let nearest = i32::from(geom.rounding == Rounding::Nearest);
    let ang = e.upload_slice(&to_reals::<R>(angles.iter().copied()))?;
    // the certification's relative margin: 2^-40, 512 times the bound of the kernel's docs
    let geo = e.upload_slice(&to_reals::<R>(
        [
            geom.add.0,
            geom.add.1,
            std::f64::consts::PI / 180.0,
            (-40f64).exp2(),
            c.shapes.traj.margin(),
        ]
        .into_iter(),
    ))?;
    let lw = c.shapes.line_wg;
    // a batch's trajectory entries are indexed by an i32, and its trajectories and list of
    // undecided entries (8 bytes a frame a position) stay within max_tile_bytes
    let batch = c
        .shapes
        .batch
        .min(i32::MAX as usize / t)
        .min(job.params.max_tile_bytes / (8 * t))
        .max(1);
    in_batches(e, job, n0, batch, |pos_range, _| {
        let (lo, hi) = (pos_range.start, pos_range.end);
        let n = hi - lo;
        let t0 = std::time::Instant::now();
        let polar: Vec<(f64, f64)> = (lo..hi)
            .into_par_iter()
            .with_min_len(4096)
            .map(|i| {
                let (y0, x0) = pos(i);
                geom.polar(y0 as f64, x0 as f64)
            })
            .collect();
        let pol = to_reals::<R>(polar.iter().flat_map(|&(r, th0)| [r, th0]));
        let pol = e.upload_slice(&pol)?;
        let traj = e.alloc_elems::<i32>(n * t)?;
        // the undecided entries' count (zeroed) and list (written below the count)
        let count = e.zeroed_elems::<i32>(1)?;
        let undec = e.alloc_elems::<i32>(n * t)?;
        c.kern.paco_traj(
            Grid::new(&[n.div_ceil(lw) * lw], &[lw]),
            &pol,
            &ang,
            &geo,
            &traj,
            &count,
            &undec,
            nearest,
            ylo,
            yhi,
            xlo,
            xhi,
            c.wu,
            to_u32(n, "positions")?,
            c.tu,
        )?;
        // the statistics' last lag table, once the first trajectories are queued behind the
        // statistics (dropping it may wait for its last use)
        drop(last_lag.take());
        let k = e.read_elems(&count, 1)?[0];
        let k = usize::try_from(k)
            .ok()
            .filter(|&k| k <= n * t)
            .ok_or_else(|| {
                BridgeError::Unsupported(format!(
                    "internal: paco_traj counted {k} undecided entries of {}",
                    n * t
                ))
            })?;
        if k > 0 {
            let idx = e.read_elems(&undec, k)?;
            let val: Vec<i32> = idx
                .par_iter()
                .map(|&p| {
                    let p = usize::try_from(p).ok().filter(|&p| p < n * t)?;
                    let (r, th0) = polar[p / t];
                    Some(
                        geom.pixel_polar(r, th0, angles[p % t])
                            // θ < H·W < 2³¹, checked when the cube was uploaded
                            .map_or(-1, |(theta, _, _)| theta as i32),
                    )
                })
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    BridgeError::Unsupported(
                        "internal: paco_traj listed an entry outside its batch".into(),
                    )
                })?;
            let idx = e.upload_slice(&idx)?;
            let val = e.upload_slice(&val)?;
            c.kern.paco_traj_fix(
                Grid::new(&[k.div_ceil(lw) * lw], &[lw]),
                &idx,
                &val,
                &traj,
                to_u32(k, "entries")?,
            )?;
        }
        let sums = read_sums(e, launch_sums(c, &traj, (q, z), n)?, n)?;
        crate::detect::trace_span(t0, std::time::Instant::now(), || {
            format!(
                "paco trajectories and sums of positions {lo}..{hi} on the device \
                 ({k} of {} entries left to the host)",
                n * t
            )
        });
        Ok(sums)
    })
}

/// a and b of the output positions `0..n0` in batches of `batch` (the run's control checked
/// before each), each through `run_batched` (an out-of-memory error halves it): `op(part,
/// whole)` sums the positions `part` of the batch `whole` (the whole batch, or a piece of it).
fn in_batches<E: Executor>(
    e: &E,
    job: &PacoJob<'_>,
    n0: usize,
    batch: usize,
    mut op: impl FnMut(std::ops::Range<usize>, std::ops::Range<usize>) -> Result<Vec<(f64, f64)>>,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let policy = RetryPolicy::split_only();
    let mut a_out = Vec::with_capacity(n0);
    let mut b_out = Vec::with_capacity(n0);
    let mut start = 0;
    while start < n0 {
        job.params.control.check("PACO")?;
        let whole = start..start + batch.min(n0 - start);
        let mut part =
            |r: std::ops::Range<usize>| op(start + r.start..start + r.end, whole.clone());
        let sums = run_batched(
            &policy,
            e.device(),
            &NoRelease,
            whole.len(),
            &mut part,
            None,
        )?;
        for (a, b) in sums {
            a_out.push(a);
            b_out.push(b);
        }
        start = whole.end;
    }
    Ok((a_out, b_out))
}

/// `paco_accumulate` over the `n` trajectories of `traj` (queued, not waited for): a and b
/// on the device.
fn launch_sums<E: Executor, R: DevReal>(
    c: &StatsCtx<'_, E, R>,
    traj: &Buffer<E, i32>,
    (q, z): (&Buffer<E, R>, &Buffer<E, R>),
    n: usize,
) -> Result<(Buffer<E, R>, Buffer<E, R>)> {
    let lw = c.shapes.line_wg;
    let a = c.exec.alloc_elems::<R>(n)?;
    let b = c.exec.alloc_elems::<R>(n)?;
    c.kern.paco_accumulate(
        Grid::new(&[n.div_ceil(lw) * lw], &[lw]),
        traj,
        q,
        z,
        &a,
        &b,
        to_u32(n, "positions")?,
        c.tu,
    )?;
    Ok((a, b))
}

/// The `n` sums `(a, b)` of [`launch_sums`], read back.
fn read_sums<E: Executor, R: DevReal>(
    e: &E,
    (a, b): (Buffer<E, R>, Buffer<E, R>),
    n: usize,
) -> Result<Vec<(f64, f64)>> {
    let av = to_f64s(e.read_elems(&a, n)?);
    let bv = to_f64s(e.read_elems(&b, n)?);
    Ok(av.into_iter().zip(bv).collect())
}
