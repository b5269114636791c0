//! Device back ends of PACO: [`OpenClPaco`] (feature `opencl`) and [`CudaPaco`] (feature
//! `cuda`), both running the one portable source [`gpu_kernels::PACO`].
//!
//! Data flow of [`PacoBackend::ab_maps`] / [`PacoBackend::ab_at`] without sub-pixel templates:
//!
//! 1. the cube is uploaded **once** (in `REAL`), centred per pixel and transposed to
//!    pixel-major on the device (`paco_centre`);
//! 2. per band of statistics rows (at most [`STATS_GROUPS_PER_LAUNCH`] pixels; the rows and
//!    columns of the edge rule, [`EdgeRule::Box`](super::EdgeRule::Box) or
//!    [`EdgeRule::Disk`](super::EdgeRule::Disk), from [`super::Geometry::stats_ranges`]),
//!    `paco_stats` (one work group per pixel: covariance, shrinkage, Cholesky, `w = C⁻¹h0`,
//!    `q = h0·w`; nothing K×K leaves the work group) and `paco_z` (the whitened matched-filter
//!    cube `z_t = w·c_t`, one thread per pixel and frame);
//! 3. the trajectory pixels `[φ_ℓ]` of a batch of `batch_size` output positions are computed on
//!    the host with the CPU's bit-exact geometry ([`super::Geometry::pixel_polar`], so NaN
//!    positions, the edge rule and float traps are exactly the CPU's), uploaded as `i32`, and
//!    `paco_accumulate` sums `a = Σ q`, `b = Σ z` along them; only a and b are downloaded. Each
//!    batch runs through [`bridge_core::oom::run_batched`] with `SplitBatch`: an out-of-memory
//!    error halves it.
//!
//! With sub-pixel templates (spec §5.2, §10 "tile by θ"), every [`SubPixel`] mode: the host
//! computes every pair (φ0, ℓ)'s trajectory pixel θ (same geometry) and buckets the pairs by θ
//! (counting sort; pair ids ascending within θ, the CPU's order); only the pixels that have
//! pairs are processed, in **batches** of consecutive pixels whose device bytes stay within
//! [`PacoParams::max_tile_bytes`](super::PacoParams::max_tile_bytes) (at least one pixel; at
//! most [`STATS_GROUPS_PER_LAUNCH`]), each through `run_batched` with `SplitBatch`. Per batch
//! the host uploads the pixel list, the batch-local CSR of its pair slots and each slot's frame,
//! plus
//!
//! - [`SubPixel::Table`]: each slot's fractional offsets; the `(q+1)²·K` template table
//!   ([`PacoJob::template_table`]) is uploaded once and `paco_stats` blends it like the CPU;
//! - any other mode ([`SubPixel::VipFft`], [`SubPixel::Spline5`], ...): each slot's K-value
//!   template, computed on the host (rayon) with the CPU's own `Templates::new` /
//!   `Templates::fill`, so a mode the CPU gains runs on the device with no kernel change (and a
//!   mode the CPU reports `Unsupported` is the same error here, before any device work).
//!
//! `paco_stats` evaluates all pairs of its pixel right after the Cholesky factorisation
//! (`L⁻¹[h | c]`) and writes one (a, b) contribution per slot; the host downloads them and adds
//! them to a(φ0), b(φ0) in slot order, which is exactly the CPU's summation order (no float
//! atomics, nothing per pair left on the device after its batch).
//!
//! **Patch size.** K ≤ [`KMAX`] = 64 (radius ≤ 4): the K×K matrix of
//! a work group in local (shared) memory. 64 < K ≤ [`KMAX_BIG`] = 128 (radius 5: K = 81,
//! radius 6: K = 113): the `COV_GLOBAL` kernel variant keeps it in a global scratch buffer of
//! `K²·s` bytes per work group of a launch, so launches are bounded: a band of rows holds at
//! most `max(1, max_tile_bytes / (nx·K²·s))` rows (nx statistics columns), a batch of pairs
//! counts `K²·s` bytes per pixel against its budget. Larger patches return
//! [`BridgeError::Unsupported`] (use the `cpu` device).
//!
//! **Memory** on the device (`s` = 8 in double, 4 in float): the raw cube and its centred copy
//! (`2T·H·W·s` bytes; the raw cube is kept until the end because launches may be asynchronous),
//! plus
//!
//! - without sub-pixel templates: `q` and `z` (`(T + 1)·H·W·s`), `w` for one band of rows
//!   (≤ 2¹⁶·K·s), the `COV_GLOBAL` scratch of one band (`rows·nx·K²·s`, ≤ `max_tile_bytes`
//!   unless one row exceeds it), and `(4T + 2s)` bytes per output position of a batch;
//! - with sub-pixel templates, per batch: `8` bytes per pixel (+ `K²·s` with `COV_GLOBAL`) and
//!   per pair `4 + 2s` bytes (frame, contribution) + `2s` (table offsets) or `K·s` (per-pair
//!   template), bounded by `max_tile_bytes` (default 256 MiB) unless one pixel alone exceeds
//!   it; the table, `(q+1)²·K·s`, once. On the host: 4 bytes per (φ0, ℓ) pair (trajectory
//!   pixels), 4 per valid pair (sorted pair ids), 8 per frame pixel, and the current batch's
//!   uploads (for per-pair templates ≈ the batch's device bytes).
//!
//! **Precision** ([`GpuPrecision`]): double where the device has it (the default), otherwise
//! float. In double the kernels follow the CPU's operation order without fused multiply-add:
//! on PoCL the maps are bit-identical to the CPU backend in every mode tested (no templates,
//! table, VipFft and Spline5 templates, R = 5 and 6, `EdgeRule::Disk`); in float a and b agree
//! to ~2e-6 (relative, and relative to max|b|).
//!
//! The `Strategy` switch does not matter on the device (Full and Fast give identical numbers).
//! `ab_at` without templates computes the statistics of the whole field and then sums only the
//! requested trajectories; with templates, only the pixels its trajectories visit.

use bridge_core::oom::{OnExhausted, PoolReleaser, ReleaseScope, RetryPolicy, run_batched};
use bridge_core::{BridgeError, Device, Result};
use ndarray::Array2;
use rayon::prelude::*;

use super::backend::PacoBackend;
use super::gpu_kernels::{self, KMAX, KMAX_BIG, LINE_WG};
use super::{PacoJob, SubPixel, Templates, Variant};
use crate::gpu::{Arg, Exec};

/// Most `paco_stats` work groups (pixels) per launch.
pub const STATS_GROUPS_PER_LAUNCH: usize = 1 << 16;

/// Arithmetic type of the device kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuPrecision {
    /// Double where the device has it, float otherwise.
    #[default]
    Auto,
    /// Double (an error on devices without doubles).
    F64,
    /// Float.
    F32,
}

/// `paco_stats` work-group size: smaller on CPU devices (PoCL).
fn stats_wg<E: Exec>(e: &E) -> usize {
    if e.is_cpu() {
        gpu_kernels::STATS_WG_CPU
    } else {
        gpu_kernels::STATS_WG
    }
}

/// Pools are not released between attempts (PACO holds its buffers itself).
struct NoRelease;

impl PoolReleaser for NoRelease {
    fn release(&self, _device: Device, _scope: &ReleaseScope) -> u64 {
        0
    }
}

fn to_u32(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| {
        BridgeError::invalid_argument(what, format!("{v} does not fit the device's 32-bit index"))
    })
}

/// Encode f64 values as `REAL` (8 or 4 bytes, little-endian).
fn encode(vals: impl Iterator<Item = f64>, f64_real: bool, cap: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(cap * if f64_real { 8 } else { 4 });
    for v in vals {
        if f64_real {
            out.extend_from_slice(&v.to_le_bytes());
        } else {
            out.extend_from_slice(&(v as f32).to_le_bytes());
        }
    }
    out
}

/// Decode `REAL` bytes to f64.
fn decode(bytes: &[u8], f64_real: bool) -> Vec<f64> {
    if f64_real {
        bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect()
    } else {
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect()
    }
}

fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn u32_bytes(v: impl Iterator<Item = u32>) -> Vec<u8> {
    v.flat_map(u32::to_le_bytes).collect()
}

/// Whether the run uses double precision on this device.
fn resolve_precision(p: GpuPrecision, fp64: bool, device: Device) -> Result<bool> {
    match p {
        GpuPrecision::Auto => Ok(fp64),
        GpuPrecision::F32 => Ok(false),
        GpuPrecision::F64 if fp64 => Ok(true),
        GpuPrecision::F64 => Err(BridgeError::Unsupported(format!(
            "PACO in double precision: {device} has no float64 support"
        ))),
    }
}

/// Templates of the bucketed-pairs path.
enum PairTemplates {
    /// The `(q+1)²·K` table, blended on the device (`sub = 1`).
    Table { q: usize, data: Vec<f64> },
    /// The CPU's templates, one per pair, computed on the host (`sub = 2`).
    PerPair(Templates),
}

/// The OOM policy of every batched step: an out-of-memory error halves the batch.
fn split_policy() -> RetryPolicy {
    RetryPolicy {
        max_retries: 0,
        release: ReleaseScope::Nothing,
        on_exhausted: OnExhausted::SplitBatch,
        ..RetryPolicy::default()
    }
}

/// The device pipeline (see the module docs): a and b at `phi0s` (`None`: the full grid,
/// row-major).
fn ab_device<E: Exec>(
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
    let cube_bytes = encode(job.cube.iter().copied(), dbl, t * npix);
    let cube = e.upload(&cube_bytes)?;
    drop(cube_bytes);
    let cen = e.alloc(npix * t * rs)?;
    e.launch(
        opts,
        "paco_centre",
        &[npix.div_ceil(LINE_WG) * LINE_WG],
        &[LINE_WG],
        &[Arg::Buf(&cube), Arg::Buf(&cen), Arg::U32(npu), Arg::U32(tu)],
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
fn ab_fast<E: Exec>(
    e: &E,
    c: &StatsCtx<'_, E::Buf>,
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
            c.opts,
            "paco_z",
            &[(groups * t).div_ceil(LINE_WG) * LINE_WG],
            &[LINE_WG],
            &[
                Arg::Buf(c.cen),
                Arg::Buf(c.offs),
                Arg::Buf(&wb),
                Arg::Buf(&z),
                Arg::U32(c.wu),
                Arg::U32(c.tu),
                Arg::U32(c.ku),
                Arg::U32(to_u32(ya, "row")?),
                Arg::U32(xu),
                Arg::U32(nxu),
                Arg::U32(to_u32(groups, "pixels")?),
            ],
        )?;
    }

    // trajectory sums, in batches of output positions
    let geom = job.geom;
    let angles = &job.angles;
    let policy = split_policy();
    let batch = job.params.batch_size.max(1);
    let mut a_out = Vec::with_capacity(n0);
    let mut b_out = Vec::with_capacity(n0);
    let mut start = 0;
    while start < n0 {
        let len = batch.min(n0 - start);
        let mut op = |range: std::ops::Range<usize>| -> Result<Vec<(f64, f64)>> {
            let (lo, hi) = (start + range.start, start + range.end);
            let n = hi - lo;
            let mut traj = vec![-1i32; n * t];
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
            let traj_buf = e.upload(&i32_bytes(&traj))?;
            drop(traj);
            let a = e.alloc(n * rs)?;
            let b = e.alloc(n * rs)?;
            e.launch(
                c.opts,
                "paco_accumulate",
                &[n.div_ceil(LINE_WG) * LINE_WG],
                &[LINE_WG],
                &[
                    Arg::Buf(&traj_buf),
                    Arg::Buf(&q),
                    Arg::Buf(&z),
                    Arg::Buf(&a),
                    Arg::Buf(&b),
                    Arg::U32(to_u32(n, "positions")?),
                    Arg::U32(c.tu),
                ],
            )?;
            let av = decode(&e.read(&a, n * rs)?, dbl);
            let bv = decode(&e.read(&b, n * rs)?, dbl);
            Ok(av.into_iter().zip(bv).collect())
        };
        let part = run_batched(&policy, e.device(), &NoRelease, len, &mut op, None)?;
        for (a, b) in part {
            a_out.push(a);
            b_out.push(b);
        }
        start += len;
    }
    drop((q, z, wb, scr));
    Ok((a_out, b_out))
}

/// With sub-pixel templates: pairs (φ0, ℓ) bucketed by their trajectory pixel θ on the host,
/// evaluated by `paco_stats` right after the Cholesky factorisation of θ, in batches of pixels
/// bounded by `max_tile_bytes`; the host adds the contributions in the CPU's order.
#[allow(clippy::too_many_arguments)]
fn ab_pairs<E: Exec>(
    e: &E,
    c: &StatsCtx<'_, E::Buf>,
    job: &PacoJob<'_>,
    pos: &(dyn Fn(usize) -> (usize, usize) + Sync),
    n0: usize,
    tpl: &PairTemplates,
    dbl: bool,
    big: bool,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let rs = if dbl { 8 } else { 4 };
    let (t, h, w) = job.cube.dim();
    let (npix, k) = (h * w, job.disk.len());
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
    drop(start);
    let nact = plist.len();

    // templates on the device: the table once; per-pair templates with their batch
    let (sub, tq, tbl) = match tpl {
        PairTemplates::Table { q, data } => (
            1u32,
            to_u32(*q, "subpixel table q")?,
            Some(e.upload(&encode(data.iter().copied(), dbl, data.len()))?),
        ),
        PairTemplates::PerPair(_) => (2u32, 1u32, None),
    };
    let nearest = u32::from(geom.rounding == super::Rounding::Nearest);
    // device bytes per pixel and per pair of a batch
    let per_pixel = 8 + if big { k * k * rs } else { 0 };
    let per_pair = 4
        + 2 * rs
        + match tpl {
            PairTemplates::Table { .. } => 2 * rs,
            PairTemplates::PerPair(_) => k * rs,
        };
    let budget = job.params.max_tile_bytes;
    let policy = split_policy();
    let mut a = vec![0.0f64; n0];
    let mut b = vec![0.0f64; n0];
    let frac = |pid: u32| -> (f64, f64) {
        let (i0, l) = (pid as usize / t, pid as usize % t);
        let (y0, x0) = pos(i0);
        // valid pairs only: the same computation as the bucketing above (and the CPU's)
        geom.pixel(y0 as f64, x0 as f64, angles[l])
            .map_or((f64::NAN, f64::NAN), |(_, fy, fx)| (fy, fx))
    };
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
        let mut op = |range: std::ops::Range<usize>| -> Result<Vec<()>> {
            let (pa, pb) = (ga + range.start, ga + range.end);
            let (sa, sb) = (pstart[pa] as usize, pstart[pb] as usize);
            let ns = sb - sa;
            let slots = &ppid[sa..sb];
            let plist_b = e.upload(&u32_bytes(plist[pa..pb].iter().copied()))?;
            let pstart_b = e.upload(&u32_bytes(pstart[pa..=pb].iter().map(|&s| s - sa as u32)))?;
            let pfr_b = e.upload(&u32_bytes(slots.iter().map(|&pid| pid % t as u32)))?;
            let (pfy_b, pfx_b, tpl_b) = match tpl {
                PairTemplates::Table { .. } => {
                    let f: Vec<(f64, f64)> = slots.par_iter().map(|&pid| frac(pid)).collect();
                    (
                        Some(e.upload(&encode(f.iter().map(|v| v.0), dbl, ns))?),
                        Some(e.upload(&encode(f.iter().map(|v| v.1), dbl, ns))?),
                        None,
                    )
                }
                PairTemplates::PerPair(tp) => {
                    // the CPU's own template of every pair, encoded in parallel
                    let mut bytes = vec![0u8; ns * k * rs];
                    bytes
                        .par_chunks_mut(k * rs)
                        .zip(slots.par_iter())
                        .for_each_init(
                            || vec![0.0f64; k],
                            |hv, (out, &pid)| {
                                let (fy, fx) = frac(pid);
                                tp.fill(fy, fx, hv);
                                for (o, &v) in out.chunks_exact_mut(rs).zip(hv.iter()) {
                                    if dbl {
                                        o.copy_from_slice(&v.to_le_bytes());
                                    } else {
                                        o.copy_from_slice(&(v as f32).to_le_bytes());
                                    }
                                }
                            },
                        );
                    (None, None, Some(e.upload(&bytes)?))
                }
            };
            let cab = e.alloc(2 * ns * rs)?;
            let scr = if big {
                Some(e.alloc((pb - pa) * k * k * rs)?)
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
                tbl: tpl_b.as_ref().or(tbl.as_ref()).unwrap_or(c.dummy),
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
            };
            launch_stats(e, c, &l)?;
            let contrib = decode(&e.read(&cab, 2 * ns * rs)?, dbl);
            drop((plist_b, pstart_b, pfr_b, pfy_b, pfx_b, tpl_b, cab, scr));
            // the CPU's order: slots in (θ, pair id) order
            for (&pid, cv) in slots.iter().zip(contrib.chunks_exact(2)) {
                let i0 = pid as usize / t;
                a[i0] += cv[0];
                b[i0] += cv[1];
            }
            Ok(vec![(); pb - pa])
        };
        run_batched(&policy, e.device(), &NoRelease, gb - ga, &mut op, None)?;
        ga = gb;
    }
    drop(tbl);
    for ((av, bv), &ok) in a.iter_mut().zip(b.iter_mut()).zip(&valid) {
        if !ok {
            *av = f64::NAN;
            *bv = f64::NAN;
        }
    }
    Ok((a, b))
}

/// Buffers and sizes shared by every `paco_stats` launch of a run.
struct StatsCtx<'a, B> {
    opts: &'a [&'a str],
    cen: &'a B,
    offs: &'a B,
    h0: &'a B,
    /// A 4-byte buffer for the arguments a launch never reads or writes (distinct from every
    /// buffer that is written, as the kernel's `restrict` qualifiers require).
    dummy: &'a B,
    wu: u32,
    tu: u32,
    ku: u32,
    variant: u32,
}

/// The pair arguments of a `paco_stats` launch with sub-pixel templates.
struct PairArgs<'a, B> {
    /// 1: table templates, 2: per-pair templates.
    sub: u32,
    plist: &'a B,
    pstart: &'a B,
    pfr: &'a B,
    pfy: &'a B,
    pfx: &'a B,
    tbl: &'a B,
    tq: u32,
    nearest: u32,
    cab: &'a B,
}

/// One `paco_stats` launch: `groups` pixels of rows from `y0` (columns `[x_lo, x_lo + nx)`)
/// without templates, the pixels of `pairs.plist` with them.
struct StatsLaunch<'a, B> {
    q: &'a B,
    wb: &'a B,
    /// The K×K scratch matrices of the `COV_GLOBAL` variant (`groups·K²` values).
    scr: Option<&'a B>,
    y0: u32,
    x_lo: u32,
    nx: u32,
    groups: usize,
    pairs: Option<PairArgs<'a, B>>,
}

fn launch_stats<E: Exec>(
    e: &E,
    c: &StatsCtx<'_, E::Buf>,
    l: &StatsLaunch<'_, E::Buf>,
) -> Result<()> {
    if l.groups == 0 {
        return Ok(());
    }
    let d = c.dummy;
    let p = l.pairs.as_ref();
    e.launch(
        c.opts,
        "paco_stats",
        &[l.groups * stats_wg(e)],
        &[stats_wg(e)],
        &[
            Arg::Buf(c.cen),
            Arg::Buf(c.offs),
            Arg::Buf(c.h0),
            Arg::Buf(l.q),
            Arg::Buf(l.wb),
            Arg::Buf(l.scr.unwrap_or(d)),
            Arg::U32(c.wu),
            Arg::U32(c.tu),
            Arg::U32(c.ku),
            Arg::U32(l.y0),
            Arg::U32(l.x_lo),
            Arg::U32(l.nx),
            Arg::U32(to_u32(l.groups, "pixels")?),
            Arg::U32(c.variant),
            Arg::U32(p.map_or(0, |p| p.sub)),
            Arg::Buf(p.map_or(d, |p| p.plist)),
            Arg::Buf(p.map_or(d, |p| p.pstart)),
            Arg::Buf(p.map_or(d, |p| p.pfr)),
            Arg::Buf(p.map_or(d, |p| p.pfy)),
            Arg::Buf(p.map_or(d, |p| p.pfx)),
            Arg::Buf(p.map_or(d, |p| p.tbl)),
            Arg::U32(p.map_or(1, |p| p.tq)),
            Arg::U32(p.map_or(0, |p| p.nearest)),
            Arg::Buf(p.map_or(d, |p| p.cab)),
        ],
    )
}

/// Full-grid maps from the flat outputs.
fn to_maps(job: &PacoJob<'_>, a: Vec<f64>, b: Vec<f64>) -> Result<(Array2<f64>, Array2<f64>)> {
    let shape = (job.geom.height, job.geom.width);
    let err = |e: ndarray::ShapeError| BridgeError::Unsupported(format!("internal: {e}"));
    Ok((
        Array2::from_shape_vec(shape, a).map_err(err)?,
        Array2::from_shape_vec(shape, b).map_err(err)?,
    ))
}

/// What the OpenCL and CUDA back ends share (both hold an `exec` and a `precision`): the
/// precision setter, `has_fp64` and the [`PacoBackend`] impl over [`ab_device`].
#[cfg(any(feature = "opencl", feature = "cuda"))]
macro_rules! gpu_paco_backend {
    ($ty:ty, $name:literal) => {
        impl $ty {
            /// The same back end with another arithmetic type.
            pub fn with_precision(mut self, precision: GpuPrecision) -> Self {
                self.precision = precision;
                self
            }

            /// Whether the device has doubles (every CUDA device does).
            pub fn has_fp64(&self) -> bool {
                self.exec.has_fp64()
            }
        }

        impl PacoBackend for $ty {
            fn name(&self) -> &'static str {
                $name
            }

            fn ab_maps(&self, job: &PacoJob<'_>) -> Result<(Array2<f64>, Array2<f64>)> {
                let (a, b) = ab_device(&self.exec, job, None, self.precision)?;
                to_maps(job, a, b)
            }

            fn ab_at(
                &self,
                job: &PacoJob<'_>,
                phi0s: &[(usize, usize)],
            ) -> Result<(Vec<f64>, Vec<f64>)> {
                ab_device(&self.exec, job, Some(phi0s), self.precision)
            }
        }
    };
}

// ---------------------------------------------------------------------------------------------
// OpenCL

/// PACO on an OpenCL device (feature `opencl`). See the [module docs](self) for the data flow,
/// precision and what is delegated to the CPU.
#[cfg(feature = "opencl")]
#[derive(Debug, Clone)]
pub struct OpenClPaco {
    exec: crate::gpu::ClExec,
    precision: GpuPrecision,
}

#[cfg(feature = "opencl")]
impl OpenClPaco {
    /// The back end for OpenCL device `n` (`opencl:n`) on the process-wide OpenCL backend;
    /// [`BridgeError::BackendUnavailable`] without OpenCL or without that device.
    pub fn new(n: usize) -> Result<Self> {
        let exec = crate::gpu::ClExec::new(
            bridge_opencl::shared(),
            Device::OpenCl(n),
            &gpu_kernels::PACO,
        )?;
        Ok(OpenClPaco {
            exec,
            precision: GpuPrecision::Auto,
        })
    }
}

#[cfg(feature = "opencl")]
gpu_paco_backend!(OpenClPaco, "opencl");

// ---------------------------------------------------------------------------------------------
// CUDA

/// PACO on a CUDA device (feature `cuda`): the same portable kernels as [`OpenClPaco`],
/// compiled by NVRTC. See the [module docs](self).
#[cfg(feature = "cuda")]
#[derive(Debug, Clone)]
pub struct CudaPaco {
    exec: crate::gpu::CudaExec,
    precision: GpuPrecision,
}

#[cfg(feature = "cuda")]
impl CudaPaco {
    /// The back end for CUDA device `n`; [`BridgeError::BackendUnavailable`] without a driver
    /// or device.
    pub fn new(n: usize) -> Result<Self> {
        Ok(CudaPaco {
            exec: crate::gpu::CudaExec {
                gpu: bridge_cuda::gpu(n)?,
                program: &gpu_kernels::PACO,
            },
            precision: GpuPrecision::Auto,
        })
    }
}

#[cfg(feature = "cuda")]
gpu_paco_backend!(CudaPaco, "cuda");
