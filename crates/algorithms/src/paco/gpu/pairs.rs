//! The path with sub-pixel templates: pairs (φ0, ℓ) bucketed by trajectory pixel on the host,
//! evaluated by `paco_stats` right after each pixel's Cholesky factorisation.

use bridge_core::exec::{Buffer, Executor, TypedExecutor};
use bridge_core::oom::{NoRelease, RetryPolicy, run_batched};
use bridge_core::{BridgeError, Result};
use rayon::prelude::*;

use super::super::job::PacoJob;
use super::STATS_GROUPS_PER_LAUNCH;
use super::common::{DevReal, PairTemplates, bytes_of, is_double, to_f64s, to_reals, to_u32};
use super::stats::{PairArgs, StatsCtx, StatsLaunch, launch_stats};
use crate::detect::real::Real;

/// The pairs (φ0, ℓ) of a run bucketed by trajectory pixel θ: the pixels that have pairs
/// (`plist`) and their slot ranges (`pstart`, CSR over `ppid`, pair ids ascending within θ:
/// the CPU's order).
pub(crate) struct PairPlan {
    /// Whether each output position has a valid trajectory.
    pub(super) valid: Vec<bool>,
    /// Pair id (`i·T + ℓ`) of every slot.
    pub(super) ppid: Vec<u32>,
    /// The pixels that have pairs.
    pub(super) plist: Vec<u32>,
    /// First slot of each pixel of `plist`, and the total at the end.
    pub(super) pstart: Vec<u32>,
}

impl PairPlan {
    /// Bucket the pairs of `n0` positions (`pos(i)`).
    pub(crate) fn new(
        job: &PacoJob<'_>,
        pos: &(dyn Fn(usize) -> (usize, usize) + Sync),
        n0: usize,
    ) -> Result<Self> {
        let (t, h, w) = job.cube.dim();
        let npix = h * w;
        let geom = job.geom;
        let angles = &job.angles;
        let n_pairs = n0
            .checked_mul(t)
            .filter(|&n| n < u32::MAX as usize)
            .ok_or_else(|| {
                BridgeError::Unsupported(format!(
                    "{n0} positions × {t} frames exceed the 2³² (φ0, frame) pairs of one device \
                     run; pass phi0s in parts"
                ))
            })?;
        // trajectory pixel of every pair (pair id i·T + ℓ); u32::MAX for an invalid trajectory
        let mut th = vec![u32::MAX; n_pairs];
        th.par_chunks_mut(t).enumerate().for_each(|(i, row)| {
            let (y0, x0) = pos(i);
            let (rr, th0) = geom.polar(y0 as f64, x0 as f64);
            for (o, &ang) in row.iter_mut().zip(angles) {
                match geom.pixel_polar(rr, th0, ang) {
                    // θ < H·W < 2³¹, checked by the caller
                    Some((theta, _, _)) => *o = theta as u32,
                    None => {
                        row.fill(u32::MAX);
                        return;
                    }
                }
            }
        });
        let valid: Vec<bool> = th.chunks(t).map(|r| r[0] != u32::MAX).collect();
        // counting sort by θ, pair ids ascending within θ (the CPU's order)
        let mut start = vec![0u32; npix + 1];
        for &v in &th {
            if v != u32::MAX {
                start[v as usize + 1] += 1;
            }
        }
        for i in 0..npix {
            start[i + 1] += start[i];
        }
        let total = start[npix] as usize;
        let mut ppid = vec![0u32; total];
        {
            let mut fill = start.clone();
            for (pid, &v) in th.iter().enumerate() {
                if v != u32::MAX {
                    let slot = &mut fill[v as usize];
                    ppid[*slot as usize] = pid as u32;
                    *slot += 1;
                }
            }
        }
        drop(th);
        // the pixels that have pairs, and their slot ranges (CSR)
        let plist: Vec<u32> = (0..npix)
            .filter(|&p| start[p + 1] > start[p])
            .map(|p| p as u32)
            .collect();
        let mut pstart: Vec<u32> = plist.iter().map(|&p| start[p as usize]).collect();
        pstart.push(total as u32);
        Ok(PairPlan {
            valid,
            ppid,
            plist,
            pstart,
        })
    }

    /// Number of pixels that have pairs.
    pub(crate) fn pixels(&self) -> usize {
        self.plist.len()
    }

    /// Runs of consecutive pixels whose device bytes stay within the `max_tile_bytes` budget
    /// (at least one pixel, at most [`STATS_GROUPS_PER_LAUNCH`]), as `[ga, gb)` ranges of
    /// `plist`.
    pub(crate) fn batches(&self, job: &PacoJob<'_>, dbl: bool) -> Vec<(usize, usize)> {
        let rs = if dbl { 8 } else { 4 };
        let k = job.disk.len();
        let big = k > super::super::gpu_kernels::KMAX;
        let table = matches!(
            job.params.subpixel,
            super::super::settings::SubPixel::Table { .. }
        );
        // device bytes per pixel and per pair of a batch
        let per_pixel = 8 + if big {
            super::super::gpu_kernels::tri(k) * rs
        } else {
            0
        };
        let per_pair = 4 + 2 * rs + if table { 2 * rs } else { k * rs };
        let budget = job.params.max_tile_bytes;
        let nact = self.pixels();
        let pstart = &self.pstart;
        let mut out = Vec::new();
        let mut ga = 0;
        while ga < nact {
            // the largest run of pixels within the byte budget (at least one pixel)
            let mut gb = ga + 1;
            let mut bytes = per_pixel + (pstart[gb] - pstart[ga]) as usize * per_pair;
            while gb < nact && gb - ga < STATS_GROUPS_PER_LAUNCH {
                let more = per_pixel + (pstart[gb + 1] - pstart[gb]) as usize * per_pair;
                if bytes + more > budget {
                    break;
                }
                bytes += more;
                gb += 1;
            }
            out.push((ga, gb));
            ga = gb;
        }
        out
    }

    /// Add the contributions of the pixels `[pa, pb)` (two values per slot, from
    /// [`pair_batch`]) to a and b, in slot order (the CPU's order).
    pub(crate) fn add(
        &self,
        (pa, pb): (usize, usize),
        contrib: &[f64],
        t: usize,
        a: &mut [f64],
        b: &mut [f64],
    ) {
        let (sa, sb) = (self.pstart[pa] as usize, self.pstart[pb] as usize);
        for (&pid, cv) in self.ppid[sa..sb].iter().zip(contrib.chunks_exact(2)) {
            let i0 = pid as usize / t;
            a[i0] += cv[0];
            b[i0] += cv[1];
        }
    }

    /// NaN where the trajectory is invalid.
    pub(crate) fn finish(&self, a: &mut [f64], b: &mut [f64]) {
        for ((av, bv), &ok) in a.iter_mut().zip(b.iter_mut()).zip(&self.valid) {
            if !ok {
                *av = f64::NAN;
                *bv = f64::NAN;
            }
        }
    }
}

/// The template table on the device (uploaded once per run), with `sub` and `tq` of the
/// `paco_stats` arguments.
pub(super) type Table<E, R> = (u32, u32, Option<Buffer<E, R>>);

/// Uploads the [`Table`] of `tpl` in arithmetic `R` (no buffer for per-pair templates).
pub(super) fn upload_table<E: Executor, R: DevReal>(
    e: &E,
    tpl: &PairTemplates,
) -> Result<Table<E, R>> {
    Ok(match tpl {
        PairTemplates::Table { q, data } => (
            1u32,
            to_u32(*q, "subpixel table q")?,
            Some(e.upload_slice(&to_reals::<R>(data.iter().copied()))?),
        ),
        PairTemplates::PerPair(_) => (2u32, 1u32, None),
    })
}

/// What one batch of pixels needs besides the launch context.
pub(super) struct PairRun<'a, E: Executor, R: DevReal> {
    pub(super) plan: &'a PairPlan,
    pub(super) tpl: &'a PairTemplates,
    /// `sub`, `tq` and the table of [`upload_table`].
    pub(super) table: (u32, u32, Option<&'a Buffer<E, R>>),
    pub(super) pos: &'a (dyn Fn(usize) -> (usize, usize) + Sync),
    pub(super) big: bool,
}

/// The per-slot template inputs of a batch, uploaded: the fractional offsets (`pfy`, `pfx`)
/// with the table, the CPU's own templates (`tbl`) without.
type SlotInputs<E, R> = (
    Option<Buffer<E, R>>,
    Option<Buffer<E, R>>,
    Option<Buffer<E, R>>,
);

/// Computes and uploads the [`SlotInputs`] of the pair ids `slots` (`frac`: a pair's
/// fractional offsets); adds the bytes uploaded to `up`.
fn slot_inputs<E: Executor, R: DevReal>(
    e: &E,
    tpl: &PairTemplates,
    k: usize,
    slots: &[u32],
    frac: &(dyn Fn(u32) -> (f64, f64) + Sync),
    up: &mut u64,
) -> Result<SlotInputs<E, R>> {
    Ok(match tpl {
        PairTemplates::Table { .. } => {
            let f: Vec<(f64, f64)> = slots.par_iter().map(|&pid| frac(pid)).collect();
            let fy: Vec<R> = to_reals(f.iter().map(|v| v.0));
            let fx: Vec<R> = to_reals(f.iter().map(|v| v.1));
            *up += bytes_of::<R>(fy.len() + fx.len());
            (Some(e.upload_slice(&fy)?), Some(e.upload_slice(&fx)?), None)
        }
        PairTemplates::PerPair(tp) => {
            // the CPU's own template of every pair, converted in parallel
            let mut vals = vec![R::ZERO; slots.len() * k];
            vals.par_chunks_mut(k).zip(slots.par_iter()).for_each_init(
                || vec![0.0f64; k],
                |hv, (out, &pid)| {
                    let (fy, fx) = frac(pid);
                    tp.fill(fy, fx, hv);
                    for (o, &v) in out.iter_mut().zip(hv.iter()) {
                        *o = <R as Real>::from_f64(v);
                    }
                },
            );
            *up += bytes_of::<R>(vals.len());
            (None, None, Some(e.upload_slice(&vals)?))
        }
    })
}

/// The contributions (a, b per slot, slot order) of the pixels `[pa, pb)` of `plan.plist`,
/// and the bytes uploaded.
pub(super) fn pair_batch<E: Executor, R: DevReal>(
    e: &E,
    c: &StatsCtx<'_, E, R>,
    job: &PacoJob<'_>,
    r: &PairRun<'_, E, R>,
    (pa, pb): (usize, usize),
) -> Result<(Vec<f64>, u64)> {
    let t = job.cube.dim().0;
    let k = job.disk.len();
    let geom = job.geom;
    let angles = &job.angles;
    let pos = r.pos;
    let plan = r.plan;
    let (sub, tq, tbl) = r.table;
    let nearest = u32::from(geom.rounding == super::super::settings::Rounding::Nearest);
    let frac = |pid: u32| -> (f64, f64) {
        let (i0, l) = (pid as usize / t, pid as usize % t);
        let (y0, x0) = pos(i0);
        // valid pairs only: the same computation as the bucketing (and the CPU's)
        geom.pixel(y0 as f64, x0 as f64, angles[l])
            .map_or((f64::NAN, f64::NAN), |(_, fy, fx)| (fy, fx))
    };
    let (sa, sb) = (plan.pstart[pa] as usize, plan.pstart[pb] as usize);
    let ns = sb - sa;
    let slots = &plan.ppid[sa..sb];
    let plist = &plan.plist[pa..pb];
    let pstart: Vec<u32> = plan.pstart[pa..=pb]
        .iter()
        .map(|&s| s - sa as u32)
        .collect();
    let pfr: Vec<u32> = slots.iter().map(|&pid| pid % t as u32).collect();
    let mut up = bytes_of::<u32>(plist.len() + pstart.len() + pfr.len());
    let plist_b = e.upload_slice(plist)?;
    let pstart_b = e.upload_slice(&pstart)?;
    let pfr_b = e.upload_slice(&pfr)?;
    let (pfy_b, pfx_b, tpl_b) = slot_inputs::<E, R>(e, r.tpl, k, slots, &frac, &mut up)?;
    let cab = e.alloc_elems::<R>(2 * ns)?;
    let scr = if r.big {
        Some(e.alloc_elems::<R>((pb - pa) * super::super::gpu_kernels::tri(k))?)
    } else {
        None
    };
    // the covariances from a lag table of the batch's rows when that computes fewer dot
    // products (pixels are ascending: the rows from the first pixel's to the last's)
    let w = job.geom.width;
    let rows = match (plist.first(), plist.last()) {
        (Some(&first), Some(&last)) => c.lag_rows((first as usize / w, last as usize / w + 1)),
        _ => (0, 0),
    };
    let lag = if c.wants_lag(pb - pa, rows, job.params.max_tile_bytes) {
        match c.lag_table(rows) {
            Ok(g) => Some(g),
            Err(BridgeError::OutOfMemory { .. }) => {
                log::info!("paco: no device memory for a lag table; direct covariances");
                None
            }
            Err(e) => return Err(e),
        }
    } else {
        None
    };
    let pairs = PairArgs {
        sub,
        plist: &plist_b,
        pstart: &pstart_b,
        pfr: &pfr_b,
        pfy: pfy_b.as_ref().unwrap_or(c.dummy),
        pfx: pfx_b.as_ref().unwrap_or(c.dummy),
        tbl: tpl_b.as_ref().or(tbl).unwrap_or(c.dummy),
        tq,
        nearest,
        cab: &cab,
    };
    let l = StatsLaunch {
        q: c.dummy,
        wb: c.dummy,
        scr: scr.as_ref(),
        y0: 0,
        x_lo: 0,
        nx: 1,
        groups: pb - pa,
        pairs: Some(pairs),
        lag: lag.as_ref(),
    };
    launch_stats(c, &l)?;
    let contrib = to_f64s(e.read_elems(&cab, 2 * ns)?);
    drop((plist_b, pstart_b, pfr_b, pfy_b, pfx_b, tpl_b, cab, scr, lag));
    Ok((contrib, up))
}

/// With sub-pixel templates: pairs (φ0, ℓ) bucketed by their trajectory pixel θ on the host,
/// evaluated by `paco_stats` right after the Cholesky factorisation of θ, in batches of pixels
/// bounded by `max_tile_bytes`; the host adds the contributions in the CPU's order.
pub(super) fn ab_pairs<E: Executor, R: DevReal>(
    e: &E,
    c: &StatsCtx<'_, E, R>,
    job: &PacoJob<'_>,
    pos: &(dyn Fn(usize) -> (usize, usize) + Sync),
    n0: usize,
    tpl: &PairTemplates,
    big: bool,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let t = job.cube.dim().0;
    let t0 = std::time::Instant::now();
    let plan = PairPlan::new(job, pos, n0)?;
    crate::detect::trace_span(t0, std::time::Instant::now(), || {
        format!(
            "paco pairs bucketed by pixel (host): {} pixels, {} pairs",
            plan.pixels(),
            plan.ppid.len()
        )
    });
    // templates on the device: the table once; per-pair templates with their batch
    let (sub, tq, tbl) = upload_table::<E, R>(e, tpl)?;
    let run = PairRun {
        plan: &plan,
        tpl,
        table: (sub, tq, tbl.as_ref()),
        pos,
        big,
    };
    let policy = RetryPolicy::split_only();
    let mut a = vec![0.0f64; n0];
    let mut b = vec![0.0f64; n0];
    for (ga, gb) in plan.batches(job, is_double::<R>()) {
        job.params.control.check("PACO")?;
        let mut op = |range: std::ops::Range<usize>| -> Result<Vec<()>> {
            let (pa, pb) = (ga + range.start, ga + range.end);
            let t0 = std::time::Instant::now();
            let (contrib, _) = pair_batch(e, c, job, &run, (pa, pb))?;
            crate::detect::trace_span(t0, std::time::Instant::now(), || {
                format!(
                    "paco pairs of pixels {pa}..{pb} ({} slots): templates, upload, statistics, read",
                    plan.pstart[pb] - plan.pstart[pa]
                )
            });
            plan.add((pa, pb), &contrib, t, &mut a, &mut b);
            Ok(vec![(); pb - pa])
        };
        run_batched(&policy, e.device(), &NoRelease, gb - ga, &mut op, None)?;
    }
    drop(tbl);
    plan.finish(&mut a, &mut b);
    Ok((a, b))
}
