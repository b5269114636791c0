//! Device back ends of PACO: [`OpenClPaco`] (feature `opencl`) and [`CudaPaco`] (feature
//! `cuda`), both running the one portable source [`gpu_kernels::PACO`](super::gpu_kernels::PACO).
//!
//! Data flow of [`PacoBackend::ab_maps`] / [`PacoBackend::ab_at`] without sub-pixel templates:
//!
//! 1. the cube is uploaded **once** (in `REAL`), centred per pixel and transposed to
//!    pixel-major on the device (`paco_centre`);
//! 2. per band of statistics-box rows (at most [`STATS_GROUPS_PER_LAUNCH`] pixels),
//!    `paco_stats` (one work group per pixel: covariance, shrinkage, Cholesky, `w = C⁻¹h0`,
//!    `q = h0·w`; nothing K×K leaves the work group) and `paco_z` (the whitened matched-filter
//!    cube `z_t = w·c_t`, one thread per pixel and frame);
//! 3. the trajectory pixels `[φ_ℓ]` of a batch of `batch_size` output positions are computed on
//!    the host with the CPU's bit-exact geometry ([`super::Geometry::pixel_polar`], so NaN
//!    positions and float traps are exactly the CPU's), uploaded as `i32`, and `paco_accumulate`
//!    sums `a = Σ q`, `b = Σ z` along them; only a and b are downloaded. Each batch runs through
//!    [`bridge_core::oom::run_batched`] with `SplitBatch`: an out-of-memory error halves it.
//!
//! With [`SubPixel::Table`] templates (spec §10 "tile by θ"): the host computes every pair
//! (φ0, ℓ)'s pixel and fractional offsets (same geometry), buckets the pairs by pixel (counting
//! sort, CSR), uploads them with the `(q+1)²·K` template table
//! ([`PacoJob::template_table`]); `paco_stats` evaluates all pairs of its pixel right after the
//! Cholesky factorisation (blended template, `L⁻¹[h | c]`), writes one (a, b) contribution per
//! pair, and `paco_accumulate_pairs` sums them per φ0 in increasing ℓ (no float atomics).
//!
//! **Memory** on the device: the raw cube, its centred copy and `q` (`(2T + 1)·H·W·s` bytes,
//! `s` = 8 in double, 4 in float; the raw cube is kept until the end because launches may be
//! asynchronous); without sub-pixel templates also `z` (`T·H·W·s`), `w` for one band of rows
//! (≤ 2¹⁶·K·s) and `(4T + 2s)` bytes per output position of a batch; with table templates
//! `(4 + 2s)` bytes per pair for the bucketed pairs and `2s` per pair for the contributions,
//! i.e. ≈ `(4 + 4s)·T` bytes per output position, all at once (`batch_size` is not used there).
//!
//! **Precision** ([`GpuPrecision`]): double where the device has it (the default), otherwise
//! float. In double the kernels follow the CPU's operation order without fused multiply-add:
//! on PoCL the maps are bit-identical to the CPU backend without sub-pixel templates and within
//! 1e-15 relative with table templates; in float a and b agree to ~2e-6 (relative, and
//! relative to max|b|).
//!
//! **Limits and delegation.** Patch areas up to [`gpu_kernels::KMAX`](super::gpu_kernels::KMAX)
//! (radius ≤ 4) run on the device; larger patches return [`BridgeError::Unsupported`].
//! [`SubPixel::VipFft`] (the exact per-pair FFT shift) has no device kernels: asking a device
//! for it is [`BridgeError::Unsupported`] (never a silent CPU run); use
//! `SubPixel::Table { q: 32 }` on devices, or the `cpu` device for the exact shift. The `Strategy` switch does not matter on the device
//! (Full and Fast give identical numbers). `ab_at` computes the statistics of the whole field
//! and then sums only the requested trajectories.

use bridge_core::oom::{OnExhausted, PoolReleaser, ReleaseScope, RetryPolicy, run_batched};
use bridge_core::{BridgeError, Device, Result};
use ndarray::Array2;
use rayon::prelude::*;

use super::backend::PacoBackend;
use super::gpu_kernels::{KMAX, LINE_WG, OPTS_F32, OPTS_F64};
use super::{PacoJob, SubPixel, Variant};

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

/// A kernel argument.
enum Arg<'a, B> {
    /// A device buffer.
    Buf(&'a B),
    /// A `uint`.
    U32(u32),
}

/// The few device operations PACO needs; implemented for OpenCL and CUDA.
trait Exec {
    /// A device buffer.
    type Buf;
    /// The device.
    fn device(&self) -> Device;
    /// Whether the device has doubles.
    fn has_fp64(&self) -> bool;
    /// Work-group size of `paco_stats`.
    fn stats_wg(&self) -> usize;
    /// A buffer holding `bytes`.
    fn upload(&self, bytes: &[u8]) -> Result<Self::Buf>;
    /// An uninitialised buffer of `bytes` bytes.
    fn alloc(&self, bytes: usize) -> Result<Self::Buf>;
    /// Launch `entry` of the PACO program built with `opts` (completion is ordered before the
    /// next read).
    fn launch(
        &self,
        opts: &[&str],
        entry: &str,
        global: usize,
        local: usize,
        args: &[Arg<'_, Self::Buf>],
    ) -> Result<()>;
    /// The contents of `buf`, allocated with exactly `bytes` bytes.
    fn read(&self, buf: &Self::Buf, bytes: usize) -> Result<Vec<u8>>;
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

/// The device pipeline (see the module docs): a and b at `phi0s` (`None`: the full grid,
/// row-major).
fn ab_device<E: Exec>(
    e: &E,
    job: &PacoJob<'_>,
    phi0s: Option<&[(usize, usize)]>,
    precision: GpuPrecision,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let dbl = resolve_precision(precision, e.has_fp64(), e.device())?;
    let opts: &[&str] = if dbl { OPTS_F64 } else { OPTS_F32 };
    let rs = if dbl { 8 } else { 4 };
    let (t, h, w) = job.cube.dim();
    let k = job.disk.len();
    if k > KMAX {
        return Err(BridgeError::Unsupported(format!(
            "PACO device kernels support patches of at most {KMAX} pixels (radius 4); this \
             patch has {k} (use --device cpu)"
        )));
    }
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
        npix.div_ceil(LINE_WG) * LINE_WG,
        LINE_WG,
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
    let q = e.alloc(npix * rs)?;
    let r = job.params.psf_rad;
    let variant = match job.params.variant {
        Variant::Paper => 0u32,
        Variant::Vip => 1u32,
    };
    let (y_lo, y_hi) = (r + 1, h.saturating_sub(r + 1));
    let nx = w.saturating_sub(2 * r + 2);
    let band = STATS_GROUPS_PER_LAUNCH
        .checked_div(nx)
        .map_or(1, |b| b.clamp(1, y_hi.saturating_sub(y_lo).max(1)));
    let n0 = phi0s.map_or(npix, <[(usize, usize)]>::len);
    let pos = |i: usize| -> (usize, usize) {
        match phi0s {
            Some(p) => p[i],
            None => (i / w, i % w),
        }
    };
    let geom = job.geom;
    let angles = &job.angles;
    let dummy = e.alloc(4)?;
    let ctx = StatsCtx {
        opts,
        cen: &cen,
        offs: &offs_buf,
        h0: &h0_buf,
        dummy: &dummy,
        q: &q,
        wu,
        tu,
        ku,
        xu: to_u32(r + 1, "column")?,
        nx,
        variant,
    };
    let rows = (y_lo..y_hi)
        .step_by(band)
        .map(|ya| (ya, (ya + band).min(y_hi)));

    let out = if let SubPixel::Table { q: tq } = job.params.subpixel {
        // 3'. sub-pixel templates: pairs bucketed by θ, evaluated inside paco_stats
        let n_pairs = n0
            .checked_mul(t)
            .filter(|&n| n < u32::MAX as usize)
            .ok_or_else(|| {
                BridgeError::Unsupported(format!(
                    "{n0} positions × {t} frames exceed the 2³² (φ0, frame) pairs of one \
                     device run; pass phi0s in parts"
                ))
            })?;
        let mut th = vec![-1i32; n_pairs];
        let mut fyx = vec![(0.0f64, 0.0f64); n_pairs];
        th.par_chunks_mut(t)
            .zip(fyx.par_chunks_mut(t))
            .enumerate()
            .for_each(|(i, (trow, frow))| {
                let (y0, x0) = pos(i);
                let (rr, th0) = geom.polar(y0 as f64, x0 as f64);
                for ((o, f), &ang) in trow.iter_mut().zip(frow.iter_mut()).zip(angles) {
                    match geom.pixel_polar(rr, th0, ang) {
                        Some((theta, fy, fx)) => {
                            *o = theta as i32;
                            *f = (fy, fx);
                        }
                        None => {
                            trow.fill(-1);
                            return;
                        }
                    }
                }
            });
        let valid: Vec<i32> = th.chunks(t).map(|c| i32::from(c[0] >= 0)).collect();
        // counting sort by θ, pair ids ascending within θ (the CPU's order)
        let mut pstart = vec![0u32; npix + 1];
        for &v in &th {
            if v >= 0 {
                pstart[v as usize + 1] += 1;
            }
        }
        for i in 0..npix {
            pstart[i + 1] += pstart[i];
        }
        let total = pstart[npix] as usize;
        let mut fill = pstart.clone();
        let mut ppid = vec![0u32; total];
        let mut pf = vec![(0.0f64, 0.0f64); total];
        for (pid, (&v, &f)) in th.iter().zip(&fyx).enumerate() {
            if v >= 0 {
                let slot = &mut fill[v as usize];
                ppid[*slot as usize] = pid as u32;
                pf[*slot as usize] = f;
                *slot += 1;
            }
        }
        drop((th, fyx, fill));
        let u32b = |v: &[u32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let table = job.template_table(tq)?;
        let sub = SubBufs {
            pstart: e.upload(&u32b(&pstart))?,
            ppid: e.upload(&u32b(&ppid))?,
            pfy: e.upload(&encode(pf.iter().map(|f| f.0), dbl, total))?,
            pfx: e.upload(&encode(pf.iter().map(|f| f.1), dbl, total))?,
            tbl: e.upload(&encode(table.iter().copied(), dbl, table.len()))?,
            tq: to_u32(tq, "subpixel table q")?,
            nearest: u32::from(geom.rounding == super::Rounding::Nearest),
            cab: e.alloc(2 * n_pairs * rs)?,
        };
        drop((pstart, ppid, pf, table));
        let wb_dummy = e.alloc(4)?;
        for (ya, yb) in rows {
            launch_stats(e, &ctx, &wb_dummy, Some(&sub), ya, yb)?;
        }
        let valid_buf = e.upload(&i32_bytes(&valid))?;
        let a = e.alloc(n0 * rs)?;
        let b = e.alloc(n0 * rs)?;
        e.launch(
            opts,
            "paco_accumulate_pairs",
            n0.div_ceil(LINE_WG) * LINE_WG,
            LINE_WG,
            &[
                Arg::Buf(&valid_buf),
                Arg::Buf(&sub.cab),
                Arg::Buf(&a),
                Arg::Buf(&b),
                Arg::U32(to_u32(n0, "positions")?),
                Arg::U32(tu),
            ],
        )?;
        let av = decode(&e.read(&a, n0 * rs)?, dbl);
        let bv = decode(&e.read(&b, n0 * rs)?, dbl);
        drop((sub, wb_dummy, valid_buf, a, b));
        (av, bv)
    } else {
        // 3. q and the whitened matched-filter cube z, per band of rows
        let z = e.alloc(npix * t * rs)?;
        let wb = e.alloc(band * nx.max(1) * k * rs)?;
        for (ya, yb) in rows {
            launch_stats(e, &ctx, &wb, None, ya, yb)?;
            let groups = (yb - ya) * nx;
            // launches are ordered (OpenCL waits for each, CUDA uses one stream), so the next
            // band's paco_stats cannot overwrite wb before this paco_z has read it
            e.launch(
                opts,
                "paco_z",
                (groups * t).div_ceil(LINE_WG) * LINE_WG,
                LINE_WG,
                &[
                    Arg::Buf(&cen),
                    Arg::Buf(&offs_buf),
                    Arg::Buf(&wb),
                    Arg::Buf(&z),
                    Arg::U32(wu),
                    Arg::U32(tu),
                    Arg::U32(ku),
                    Arg::U32(to_u32(ya, "row")?),
                    Arg::U32(ctx.xu),
                    Arg::U32(to_u32(nx, "columns")?),
                    Arg::U32(to_u32(groups, "pixels")?),
                ],
            )?;
        }

        // 4. trajectory sums, in batches of output positions
        let policy = RetryPolicy {
            max_retries: 0,
            release: ReleaseScope::Nothing,
            on_exhausted: OnExhausted::SplitBatch,
            ..RetryPolicy::default()
        };
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
                    opts,
                    "paco_accumulate",
                    n.div_ceil(LINE_WG) * LINE_WG,
                    LINE_WG,
                    &[
                        Arg::Buf(&traj_buf),
                        Arg::Buf(&q),
                        Arg::Buf(&z),
                        Arg::Buf(&a),
                        Arg::Buf(&b),
                        Arg::U32(to_u32(n, "positions")?),
                        Arg::U32(tu),
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
        drop((z, wb));
        (a_out, b_out)
    };
    drop((cube, cen, offs_buf, h0_buf, q, dummy));
    Ok(out)
}

/// Buffers shared by every `paco_stats` launch of a run.
struct StatsCtx<'a, B> {
    opts: &'a [&'a str],
    cen: &'a B,
    offs: &'a B,
    h0: &'a B,
    /// A 4-byte buffer for the pair arguments of runs without sub-pixel templates (never read;
    /// distinct from every written buffer, as the kernel's `restrict` qualifiers require).
    dummy: &'a B,
    q: &'a B,
    wu: u32,
    tu: u32,
    ku: u32,
    xu: u32,
    nx: usize,
    variant: u32,
}

/// The sub-pixel pair lists and template table of a run.
struct SubBufs<B> {
    pstart: B,
    ppid: B,
    pfy: B,
    pfx: B,
    tbl: B,
    tq: u32,
    nearest: u32,
    cab: B,
}

/// One `paco_stats` launch over the box pixels of rows `[ya, yb)`.
fn launch_stats<E: Exec>(
    e: &E,
    c: &StatsCtx<'_, E::Buf>,
    wb: &E::Buf,
    sub: Option<&SubBufs<E::Buf>>,
    ya: usize,
    yb: usize,
) -> Result<()> {
    let groups = (yb - ya) * c.nx;
    if groups == 0 {
        return Ok(());
    }
    // without sub-pixel templates the pair arguments are never read
    let (pstart, ppid, pfy, pfx, tbl, cab) = match sub {
        Some(s) => (&s.pstart, &s.ppid, &s.pfy, &s.pfx, &s.tbl, &s.cab),
        None => {
            let d = c.dummy;
            (d, d, d, d, d, d)
        }
    };
    e.launch(
        c.opts,
        "paco_stats",
        groups * e.stats_wg(),
        e.stats_wg(),
        &[
            Arg::Buf(c.cen),
            Arg::Buf(c.offs),
            Arg::Buf(c.h0),
            Arg::Buf(c.q),
            Arg::Buf(wb),
            Arg::U32(c.wu),
            Arg::U32(c.tu),
            Arg::U32(c.ku),
            Arg::U32(to_u32(ya, "row")?),
            Arg::U32(c.xu),
            Arg::U32(to_u32(c.nx, "columns")?),
            Arg::U32(to_u32(groups, "pixels")?),
            Arg::U32(c.variant),
            Arg::U32(u32::from(sub.is_some())),
            Arg::Buf(pstart),
            Arg::Buf(ppid),
            Arg::Buf(pfy),
            Arg::Buf(pfx),
            Arg::Buf(tbl),
            Arg::U32(sub.map_or(1, |s| s.tq)),
            Arg::U32(sub.map_or(0, |s| s.nearest)),
            Arg::Buf(cab),
        ],
    )
}

/// `Ok` when this job has device kernels; a typed error otherwise (no silent CPU fallback).
fn on_device(job: &PacoJob<'_>, name: &str) -> Result<()> {
    if matches!(job.params.subpixel, SubPixel::Off | SubPixel::Table { .. }) {
        return Ok(());
    }
    Err(BridgeError::Unsupported(format!(
        "PACO sub-pixel templates {:?} have no {name} kernels; use the table interpolator \
         (SubPixel::Table, the CLI's --subpixel) on this device, or --device cpu for the exact \
         FFT shift",
        job.params.subpixel
    )))
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

// ---------------------------------------------------------------------------------------------
// OpenCL

#[cfg(feature = "opencl")]
mod opencl_impl {
    use std::sync::Arc;

    use bridge_core::{DType, Device, Result};
    use bridge_opencl::{ClBuffer, OpenClBackend};

    use super::{Arg, Exec};
    use crate::paco::gpu_kernels::{PACO, STATS_WG, STATS_WG_CPU};

    /// The OpenCL executor: a backend instance and a device.
    pub(super) struct ClExec {
        pub(super) cl: Arc<OpenClBackend>,
        pub(super) dev: Device,
        pub(super) fp64: bool,
        pub(super) stats_wg: usize,
    }

    impl Exec for ClExec {
        type Buf = ClBuffer;

        fn device(&self) -> Device {
            self.dev
        }

        fn has_fp64(&self) -> bool {
            self.fp64
        }

        fn stats_wg(&self) -> usize {
            self.stats_wg
        }

        fn upload(&self, bytes: &[u8]) -> Result<ClBuffer> {
            let buf = self.cl.alloc(self.dev, bytes.len().max(4))?;
            if !bytes.is_empty() {
                buf.write(0, bytes)?;
            }
            Ok(buf)
        }

        fn alloc(&self, bytes: usize) -> Result<ClBuffer> {
            self.cl.alloc(self.dev, bytes.max(4))
        }

        fn launch(
            &self,
            opts: &[&str],
            entry: &str,
            global: usize,
            local: usize,
            args: &[Arg<'_, ClBuffer>],
        ) -> Result<()> {
            let prog = self.cl.program_from(self.dev, &PACO, opts)?;
            let mut k = prog.kernel(entry)?;
            for (i, a) in args.iter().enumerate() {
                let i = i as u32;
                match a {
                    Arg::Buf(b) => k.arg_buffer(i, b)?,
                    Arg::U32(v) => k.arg_scalar(i, *v)?,
                };
            }
            k.launch(&[global], Some(&[local]))
        }

        fn read(&self, buf: &ClBuffer, bytes: usize) -> Result<Vec<u8>> {
            let mut out = vec![0u8; bytes];
            if bytes > 0 {
                buf.read(0, &mut out)?;
            }
            Ok(out)
        }
    }

    /// Whether the device has doubles.
    pub(super) fn fp64(cl: &OpenClBackend, dev: Device) -> bool {
        cl.check_dtype(dev, DType::F64).is_ok()
    }

    /// `paco_stats` work-group size for the device: smaller on CPU devices.
    pub(super) fn stats_wg(cl: &OpenClBackend, dev: Device) -> Result<usize> {
        let info = cl.device_info(dev)?;
        let cpu = info.details.iter().any(|(k, v)| k == "type" && v == "cpu");
        Ok(if cpu { STATS_WG_CPU } else { STATS_WG })
    }
}

/// PACO on an OpenCL device (feature `opencl`). See the [module docs](self) for the data flow,
/// precision and what is delegated to the CPU.
#[cfg(feature = "opencl")]
#[derive(Debug, Clone)]
pub struct OpenClPaco {
    cl: std::sync::Arc<bridge_opencl::OpenClBackend>,
    device: Device,
    fp64: bool,
    stats_wg: usize,
    precision: GpuPrecision,
}

#[cfg(feature = "opencl")]
impl OpenClPaco {
    /// The back end for OpenCL device `n` (`opencl:n`) on the process-wide OpenCL backend;
    /// [`BridgeError::BackendUnavailable`] without OpenCL or without that device.
    pub fn new(n: usize) -> Result<Self> {
        let cl = bridge_opencl::shared();
        let device = Device::OpenCl(n);
        let stats_wg = opencl_impl::stats_wg(&cl, device)?;
        let fp64 = opencl_impl::fp64(&cl, device);
        Ok(OpenClPaco {
            cl,
            device,
            fp64,
            stats_wg,
            precision: GpuPrecision::Auto,
        })
    }

    /// The same back end with another arithmetic type.
    pub fn with_precision(mut self, precision: GpuPrecision) -> Self {
        self.precision = precision;
        self
    }

    /// Whether the device has doubles.
    pub fn has_fp64(&self) -> bool {
        self.fp64
    }

    fn exec(&self) -> opencl_impl::ClExec {
        opencl_impl::ClExec {
            cl: std::sync::Arc::clone(&self.cl),
            dev: self.device,
            fp64: self.fp64,
            stats_wg: self.stats_wg,
        }
    }
}

#[cfg(feature = "opencl")]
impl PacoBackend for OpenClPaco {
    fn name(&self) -> &'static str {
        "opencl"
    }

    fn ab_maps(&self, job: &PacoJob<'_>) -> Result<(Array2<f64>, Array2<f64>)> {
        on_device(job, "OpenCL")?;
        let (a, b) = ab_device(&self.exec(), job, None, self.precision)?;
        to_maps(job, a, b)
    }

    fn ab_at(&self, job: &PacoJob<'_>, phi0s: &[(usize, usize)]) -> Result<(Vec<f64>, Vec<f64>)> {
        on_device(job, "OpenCL")?;
        ab_device(&self.exec(), job, Some(phi0s), self.precision)
    }
}

// ---------------------------------------------------------------------------------------------
// CUDA

#[cfg(feature = "cuda")]
mod cuda_impl {
    use std::sync::Arc;

    use bridge_core::{Array, DType, Device, HostData, Result};
    use bridge_cuda::{Gpu, KernelArg};

    use super::{Arg, Exec};
    use crate::paco::gpu_kernels::{PACO, STATS_WG};

    /// The CUDA executor.
    pub(super) struct CudaExec {
        pub(super) gpu: Arc<Gpu>,
    }

    impl Exec for CudaExec {
        type Buf = Array;

        fn device(&self) -> Device {
            self.gpu.device()
        }

        fn has_fp64(&self) -> bool {
            true
        }

        fn stats_wg(&self) -> usize {
            STATS_WG
        }

        fn upload(&self, bytes: &[u8]) -> Result<Array> {
            if bytes.is_empty() {
                return self.alloc(4);
            }
            let host = HostData::from_c_bytes(DType::U8, &[bytes.len()], bytes)?;
            self.gpu.upload(&host)
        }

        fn alloc(&self, bytes: usize) -> Result<Array> {
            self.gpu.alloc(DType::U8, &[bytes.max(4)])
        }

        fn launch(
            &self,
            opts: &[&str],
            entry: &str,
            global: usize,
            local: usize,
            args: &[Arg<'_, Array>],
        ) -> Result<()> {
            let prog = self.gpu.program(&PACO, opts)?;
            let args: Vec<KernelArg<'_>> = args
                .iter()
                .map(|a| match a {
                    Arg::Buf(b) => KernelArg::Buffer(b),
                    Arg::U32(v) => KernelArg::U32(*v),
                })
                .collect();
            self.gpu
                .launch(&prog, entry, &[global], Some(&[local]), &args, None)?;
            Ok(())
        }

        fn read(&self, buf: &Array, bytes: usize) -> Result<Vec<u8>> {
            let host = self.gpu.download(buf)?;
            let mut v = host.to_c_bytes().into_owned();
            v.truncate(bytes);
            Ok(v)
        }
    }
}

/// PACO on a CUDA device (feature `cuda`): the same portable kernels as [`OpenClPaco`],
/// compiled by NVRTC. See the [module docs](self).
#[cfg(feature = "cuda")]
#[derive(Debug, Clone)]
pub struct CudaPaco {
    gpu: std::sync::Arc<bridge_cuda::Gpu>,
    precision: GpuPrecision,
}

#[cfg(feature = "cuda")]
impl CudaPaco {
    /// The back end for CUDA device `n`; [`BridgeError::BackendUnavailable`] without a driver
    /// or device.
    pub fn new(n: usize) -> Result<Self> {
        Ok(CudaPaco {
            gpu: bridge_cuda::gpu(n)?,
            precision: GpuPrecision::Auto,
        })
    }

    /// The same back end with another arithmetic type.
    pub fn with_precision(mut self, precision: GpuPrecision) -> Self {
        self.precision = precision;
        self
    }

    fn exec(&self) -> cuda_impl::CudaExec {
        cuda_impl::CudaExec {
            gpu: std::sync::Arc::clone(&self.gpu),
        }
    }
}

#[cfg(feature = "cuda")]
impl PacoBackend for CudaPaco {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn ab_maps(&self, job: &PacoJob<'_>) -> Result<(Array2<f64>, Array2<f64>)> {
        on_device(job, "CUDA")?;
        let (a, b) = ab_device(&self.exec(), job, None, self.precision)?;
        to_maps(job, a, b)
    }

    fn ab_at(&self, job: &PacoJob<'_>, phi0s: &[(usize, usize)]) -> Result<(Vec<f64>, Vec<f64>)> {
        on_device(job, "CUDA")?;
        ab_device(&self.exec(), job, Some(phi0s), self.precision)
    }
}
