//! The device entry point ([`ab_device`]: templates first, then the path) and the path without
//! sub-pixel templates ([`ab_fast`]: statistics per band, the whitened matched-filter cube, the
//! trajectory sums in batches).

use bridge_core::exec::{Executor, KernelArg};
use bridge_core::oom::run_batched;
use bridge_core::{BridgeError, Result};
use rayon::prelude::*;

use super::super::gpu_kernels::{self, KMAX, KMAX_BIG};
use super::super::job::PacoJob;
use super::super::settings::{SubPixel, Variant};
use super::super::templates::Templates;
use super::common::{
    NoRelease, PairTemplates, decode, device_batch, encode, encode_slice, i32_bytes, line_wg,
    resolve_precision, split_policy, to_u32,
};
use super::pairs::ab_pairs;
use super::stats::{StatsCtx, StatsLaunch, launch_stats};
use super::{GpuPrecision, STATS_GROUPS_PER_LAUNCH};

/// The device pipeline (see the module docs): a and b at `phi0s` (`None`: the full grid,
/// row-major).
pub(super) fn ab_device<E: Executor>(
    e: &E,
    job: &PacoJob<'_>,
    phi0s: Option<&[(usize, usize)]>,
    precision: GpuPrecision,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let dbl = resolve_precision(precision, e.has_fp64(), e.device())?;
    let rs = if dbl { 8 } else { 4 };
    let (t, h, w) = job.cube.dim();
    let k = job.disk.len();
    let opts = gpu_kernels::options(dbl, k).ok_or_else(|| {
        BridgeError::Unsupported(format!(
            "PACO device kernels support patches of at most {KMAX_BIG} pixels (radius 6); this \
             patch has {k} (use --device cpu)"
        ))
    })?;
    let big = k > KMAX;
    // Templates first: a mode the CPU does not implement is its typed error, before any
    // device work.
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
    let npix = h * w;
    if phi0s.is_some_and(<[(usize, usize)]>::is_empty) {
        return Ok((Vec::new(), Vec::new()));
    }
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
    // Launches are asynchronous and a released buffer may be reused at once by the backend's
    // pool, so every buffer a queued kernel reads stays alive until the blocking downloads at
    // the end.
    let cube_bytes = match job.cube.as_slice() {
        Some(c) => encode_slice(c, dbl),
        None => encode(job.cube.iter().copied(), dbl, t * npix),
    };
    let cube = e.upload(&cube_bytes)?;
    drop(cube_bytes);
    let cen = e.alloc(npix * t * rs)?;
    let lw = line_wg();
    e.launch(
        &gpu_kernels::PACO,
        opts,
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
    let offs_buf = e.upload(&i32_bytes(&offs))?;
    let h0 = job.centred_template()?;
    let h0_buf = e.upload(&encode(h0.iter().copied(), dbl, k))?;
    let variant = match job.params.variant {
        Variant::Paper => 0u32,
        Variant::Vip => 1u32,
    };
    let n0 = phi0s.map_or(npix, <[(usize, usize)]>::len);
    let pos = |i: usize| -> (usize, usize) {
        match phi0s {
            Some(p) => p[i],
            None => (i / w, i % w),
        }
    };
    let dummy = e.alloc(4)?;
    let ctx = StatsCtx {
        opts,
        cen: &cen,
        offs: &offs_buf,
        h0: &h0_buf,
        dummy: &dummy,
        wu,
        tu,
        ku,
        variant,
        local_bytes: if big { 8 } else { k * k * rs },
    };
    let out = match tpl {
        Some(tpl) => ab_pairs(e, &ctx, job, &pos, n0, &tpl, dbl, big)?,
        None => ab_fast(e, &ctx, job, &pos, n0, dbl, big)?,
    };
    drop((cube, cen, offs_buf, h0_buf, dummy));
    Ok(out)
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
    let (npix, k) = (h * w, job.disk.len());
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
    let q = e.alloc(npix * rs)?;
    let z = e.alloc(npix * t * rs)?;
    let wb = e.alloc(band * nx.max(1) * k * rs)?;
    let scr = if big {
        Some(e.alloc(band * nx.max(1) * k * k * rs)?)
    } else {
        None
    };
    let xu = to_u32(x_lo, "column")?;
    let nxu = to_u32(nx, "columns")?;
    let lw = line_wg();
    for ya in (y_lo..y_hi).step_by(band) {
        let yb = (ya + band).min(y_hi);
        let groups = (yb - ya) * nx;
        if groups == 0 {
            continue;
        }
        let l = StatsLaunch {
            q: &q,
            wb: &wb,
            scr: scr.as_ref(),
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
                KernelArg::Buf(&wb),
                KernelArg::Buf(&z),
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
    let policy = split_policy();
    let batch = device_batch().max(1);
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
