//! One run of frames on the device: the prescale of raw integers, the two LoG passes into the
//! cube, its per-frame extrema, the 3×3×3 peaks, then the CPU's ordering and overlap pruning on
//! the host (see the [parent module](super)).

use bridge_core::exec::{Executor, KernelArg};
use bridge_core::tuning::Tuning;
use bridge_core::{BridgeError, Device, Result};

use super::super::blob_log::{Blob, BlobLogParams, prune_blobs};
use super::super::filters::LogKernels;
use super::super::kernels::{BLOB_LOG, OPTS_F32_ACC32, OPTS_F32_ACC64, OPTS_F64};
use super::super::real::Real;
use super::super::trace;
use super::{DevReal, GpuDetectConfig};

mod stages;

use stages::LogRun;

pub(super) fn u32_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(super) fn to_u32(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| {
        BridgeError::invalid_argument(what, format!("{v} does not fit the device's 32-bit index"))
    })
}

/// One device candidate, decoded: frame of the run, raster position, scale, value.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cand<R> {
    y: usize,
    x: usize,
    s: usize,
    v: R,
}

/// Result of one run of frames: survivors per frame and, when asked, the cube per frame
/// (`[scale][y][x]`, widened to f64).
pub(super) struct RunOut {
    pub(super) blobs: Vec<Vec<Blob>>,
    pub(super) cubes: Option<Vec<Vec<f64>>>,
    /// Seconds spent in the pipeline's kernels (launches are blocking).
    pub(super) kernel_s: f64,
}

/// Threshold of one frame in the device type (spec §1.5), `+inf` for a constant cube.
pub(super) fn frame_threshold<R: Real>(lo: R, hi: R, p: &BlobLogParams) -> R {
    if lo == hi || lo.is_nan() || hi.is_nan() {
        return R::from_f64(f64::INFINITY);
    }
    let mut thr = p.threshold.map(R::from_f64).unwrap_or(lo);
    if let Some(rel) = p.threshold_rel {
        let t = R::from_f64(rel) * hi;
        if t > thr {
            thr = t;
        }
    }
    thr
}

/// How raw integer frames are converted on the device.
pub(super) struct Prescaling {
    /// `prescale_u8` or `prescale_u16`.
    pub(super) entry: &'static str,
    /// Per frame `(c, k)`; see the `prescale_*` kernels.
    pub(super) params: Vec<(f64, f64)>,
    /// 0: `v · k`; 1: `(v − c) / k`.
    pub(super) mode: u32,
}

/// The frames of one run.
pub(super) enum Input<'a, T, B> {
    /// Converted on the host to the working type `T`.
    Host(&'a [Vec<T>]),
    /// Raw integers (working type f64) from the host, little-endian, frame after frame:
    /// uploaded as they are and converted on the device.
    Raw(&'a [u8], Prescaling),
    /// Raw integers (working type f64) already on the device (a caller's array, read in place),
    /// from frame `.1` of the buffer.
    Device(&'a B, usize, Prescaling),
}

/// Runs a launch and adds its wall time to the run's kernel time.
type Timed<'a> = dyn FnMut(&mut dyn FnMut() -> Result<()>) -> Result<()> + 'a;

/// The `prescale_*` kernel on frames `frame0..frame0 + n_frames` of `raw` into a new image
/// buffer of the working type (`rsize` bytes per pixel).
#[allow(clippy::too_many_arguments)]
fn prescale<E: Executor>(
    e: &E,
    raw: &E::Buffer,
    frame0: usize,
    pre: &Prescaling,
    n_frames: usize,
    plane: usize,
    opts: &[&str],
    acc64: bool,
    (rsize, wg): (usize, usize),
    timed: &mut Timed<'_>,
) -> Result<E::Buffer> {
    let mut pp = Vec::with_capacity(pre.params.len() * 16);
    for &(c, k) in &pre.params {
        if acc64 {
            c.put(&mut pp);
            k.put(&mut pp);
        } else {
            (c as f32).put(&mut pp);
            (k as f32).put(&mut pp);
        }
    }
    let pp_buf = e.upload(&pp)?;
    let img = e.alloc(n_frames * plane * rsize)?;
    let (pu, nu) = (to_u32(plane, "frame size")?, to_u32(n_frames, "frames")?);
    let f0 = to_u32(frame0, "first frame")?;
    timed(&mut || {
        e.launch(
            &BLOB_LOG,
            opts,
            pre.entry,
            &[round_up_to(plane, wg), n_frames],
            &[wg, 1],
            &[
                KernelArg::Buf(raw),
                KernelArg::Buf(&pp_buf),
                KernelArg::Buf(&img),
                KernelArg::U32(pu),
                KernelArg::U32(nu),
                KernelArg::U32(pre.mode),
                KernelArg::U32(f0),
            ],
        )
    })?;
    Ok(img)
}

/// Work-group shape (x, y) of the per-voxel kernels: `ARRAYBRIDGE_DETECT_WG_X` (64) ×
/// `ARRAYBRIDGE_DETECT_WG_Y` (4 on CUDA, 1 on OpenCL) of `t`, at most 1024 work items.
pub(super) fn local_xy<E: Executor>(e: &E, t: &Tuning) -> (usize, usize) {
    let x = t.usize_or("ARRAYBRIDGE_DETECT_WG_X", 64);
    let y = t.usize_knob("ARRAYBRIDGE_DETECT_WG_Y").unwrap_or(
        if matches!(e.device(), Device::Cuda(_)) {
            4
        } else {
            1
        },
    );
    if x * y > 1024 {
        log::warn!("ARRAYBRIDGE_DETECT_WG_X × _Y = {x}×{y} is over 1024 work items; using 64×1");
        return (64, 1);
    }
    (x, y)
}

/// Outputs per work-item of `log_pass_y` (rows) and `log_pass_x` (columns):
/// `ARRAYBRIDGE_DETECT_ROWS` (auto: 8 on CUDA, where the H200 run of 2026-11-26 timed 1000×512²
/// frames 8 % faster than with 1; 1 on OpenCL, where more is slower on PoCL) and
/// `ARRAYBRIDGE_DETECT_COLS` (1: 2 and 4 were slower on the H200). They are build options of
/// the kernels (`-DLOG_ROWS`, `-DLOG_COLS`); results do not depend on them.
pub(super) fn pass_blocking<E: Executor>(e: &E, t: &Tuning) -> (usize, usize) {
    let rows = t.usize_knob("ARRAYBRIDGE_DETECT_ROWS").unwrap_or(
        if matches!(e.device(), Device::Cuda(_)) {
            8
        } else {
            1
        },
    );
    (rows, t.usize_or("ARRAYBRIDGE_DETECT_COLS", 1))
}

/// Work-group size of the prescale kernels (`ARRAYBRIDGE_DETECT_PREP_WG` of `t`, default 256).
pub(super) fn prep_wg(t: &Tuning) -> usize {
    t.usize_or("ARRAYBRIDGE_DETECT_PREP_WG", 256)
}

/// The device pipeline on one run of frames (working type `T`, cube in the device type `R`).
///
/// Setup: the kernels' build options, the LoG coefficients ([`upload_coefficients`]) and the
/// frames ([`upload_frames`]) go up, and [`LogRun::new`] sizes the batches and allocates the
/// cube. Then each batch of frames runs the stages of [`LogRun::batch`]: the two LoG passes,
/// the per-frame thresholds, the peaks and the host's ordering and pruning.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_typed<E: Executor, T: Real, R: DevReal>(
    e: &E,
    input: Input<'_, T, E::Buffer>,
    n_frames: usize,
    h: usize,
    w: usize,
    p: &BlobLogParams,
    cfg: &GpuDetectConfig,
    want_cube: bool,
) -> Result<RunOut> {
    let t_all = std::time::Instant::now();
    let mut up_s = 0.0f64;
    let mut kernel_s = 0.0f64;
    // With ARRAYBRIDGE_TRACE=1 each kernel is waited for, so the breakdown is exact (launches
    // are asynchronous otherwise, and their time shows up in the next read).
    let tracing = super::super::trace_enabled();
    let mut timed = |f: &mut dyn FnMut() -> Result<()>| -> Result<()> {
        let t = std::time::Instant::now();
        f()?;
        if tracing {
            e.synchronize()?;
        }
        kernel_s += t.elapsed().as_secs_f64();
        Ok(())
    };
    let acc64 = e.has_fp64() && (cfg.accumulate_f64 || R::SIZE == 8);
    let (rows, cols) = pass_blocking(e, &cfg.tuning);
    let (lx, ly) = local_xy(e, &cfg.tuning);
    let blocking = [format!("-DLOG_ROWS={rows}"), format!("-DLOG_COLS={cols}")];
    let opts_v = kernel_options::<R>(acc64, &blocking);
    let opts: &[&str] = &opts_v;
    let sigmas = p.sigma_list::<T>();
    let coeffs = upload_coefficients::<E, T, R>(e, &sigmas, acc64)?;
    let img = upload_frames::<E, T, R>(
        e,
        input,
        n_frames,
        h * w,
        opts,
        (acc64, prep_wg(&cfg.tuning)),
        &mut up_s,
        &mut timed,
    )?;
    let mut run = LogRun::<E, T, R>::new(
        e,
        p,
        opts,
        sigmas,
        coeffs,
        img,
        (n_frames, h, w, rows, cols, lx, ly),
        cfg.max_device_bytes,
        want_cube,
    )?;
    let mut frame0 = 0usize;
    while frame0 < n_frames {
        frame0 += run.batch(frame0, &mut timed)?;
    }
    let (read_s, prune_s) = (run.read_s, run.prune_s);
    trace(|| {
        format!(
            "detect: {n_frames} frames {h}x{w}: total {:.3} s = upload {up_s:.3} + kernels \
             {kernel_s:.3} + reads {read_s:.3} + host prune {prune_s:.3} + other",
            t_all.elapsed().as_secs_f64()
        )
    });
    Ok(RunOut {
        blobs: run.blobs,
        cubes: want_cube.then_some(run.cubes),
        kernel_s,
    })
}

/// The kernels' build options: the precision set (`f64`, `f32` with `f64` or `f32`
/// accumulation) followed by the pass blocking (`-DLOG_ROWS`, `-DLOG_COLS`).
fn kernel_options<R: DevReal>(acc64: bool, blocking: &[String; 2]) -> Vec<&str> {
    let base: &[&str] = if R::SIZE == 8 {
        OPTS_F64
    } else if acc64 {
        OPTS_F32_ACC64
    } else {
        OPTS_F32_ACC32
    };
    base.iter()
        .copied()
        .chain(blocking.iter().map(String::as_str))
        .collect()
}

/// The LoG coefficients of a run on the device.
struct Coeffs<B> {
    /// Every scale's kernel taps (`g0` then `g2`), in the accumulation type.
    taps: B,
    /// Per scale `(offset, radius)` into `taps`, `u32`.
    meta: B,
    /// Per scale σ² (working type, stored as `R`).
    s2: B,
}

/// Builds the LoG kernels of `sigmas` and uploads their taps, their `(offset, radius)` and σ².
fn upload_coefficients<E: Executor, T: Real, R: DevReal>(
    e: &E,
    sigmas: &[T],
    acc64: bool,
) -> Result<Coeffs<E::Buffer>> {
    let ns = sigmas.len();
    // kernels (ACC type), per-scale (offset, radius), σ² (working type, stored as R)
    let mut taps: Vec<u8> = Vec::new();
    let mut meta: Vec<u32> = Vec::with_capacity(2 * ns);
    let mut ntaps = 0usize;
    for &s in sigmas {
        let k = LogKernels::new(s.to_f64(), T::IS_F32);
        meta.push(to_u32(ntaps, "kernel taps")?);
        meta.push(to_u32(k.radius(), "kernel radius")?);
        for &v in k.g0.iter().chain(&k.g2) {
            if acc64 {
                v.put(&mut taps);
            } else {
                (v as f32).put(&mut taps);
            }
        }
        ntaps += k.g0.len() + k.g2.len();
    }
    let mut s2 = Vec::with_capacity(ns * R::SIZE);
    for &s in sigmas {
        R::from_f64((s * s).to_f64()).put(&mut s2);
    }
    let taps_buf = e.upload(&taps)?;
    let meta_buf = e.upload(&u32_bytes(&meta))?;
    let s2_buf = e.upload(&s2)?;
    Ok(Coeffs {
        taps: taps_buf,
        meta: meta_buf,
        s2: s2_buf,
    })
}

/// The whole run in one transfer: host frames converted to `R` and uploaded, or raw integers
/// (uploaded, or already on the device) converted by [`prescale`]. The upload of raw frames
/// counts in `up_s`, the prescale kernel in `timed`.
#[allow(clippy::too_many_arguments)]
fn upload_frames<E: Executor, T: Real, R: DevReal>(
    e: &E,
    input: Input<'_, T, E::Buffer>,
    n_frames: usize,
    plane: usize,
    opts: &[&str],
    (acc64, wg): (bool, usize),
    up_s: &mut f64,
    timed: &mut Timed<'_>,
) -> Result<E::Buffer> {
    Ok(match input {
        Input::Host(images) => {
            let mut img = Vec::with_capacity(n_frames * plane * R::SIZE);
            for im in images {
                for &v in im {
                    R::from_f64(v.to_f64()).put(&mut img);
                }
            }
            e.upload(&img)?
        }
        Input::Raw(bytes, pre) => {
            let t = std::time::Instant::now();
            let raw_buf = e.upload(bytes)?;
            *up_s += t.elapsed().as_secs_f64();
            prescale(
                e,
                &raw_buf,
                0,
                &pre,
                n_frames,
                plane,
                opts,
                acc64,
                (R::SIZE, wg),
                timed,
            )?
        }
        Input::Device(buf, frame0, pre) => prescale(
            e,
            buf,
            frame0,
            &pre,
            n_frames,
            plane,
            opts,
            acc64,
            (R::SIZE, wg),
            timed,
        )?,
    })
}

pub(super) fn round_up_to(n: usize, m: usize) -> usize {
    n.div_ceil(m) * m
}

/// The CPU's post-peak stage: raster order (y, x, scale), stable sort by descending response,
/// overlap pruning in the working type.
pub(super) fn order_and_prune<T: Real, R: Real>(
    mut cands: Vec<Cand<R>>,
    sigmas: &[T],
    overlap: f64,
) -> Vec<Blob> {
    cands.sort_unstable_by_key(|c| (c.y, c.x, c.s));
    cands.sort_by(|a, b| b.v.partial_cmp(&a.v).unwrap_or(std::cmp::Ordering::Equal));
    let typed: Vec<(T, T, T)> = cands
        .iter()
        .map(|c| {
            (
                T::from_f64(c.y as f64),
                T::from_f64(c.x as f64),
                sigmas[c.s],
            )
        })
        .collect();
    let keep = prune_blobs(&typed, overlap);
    cands
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(c, _)| Blob {
            y: c.y as f64,
            x: c.x as f64,
            sigma: sigmas[c.s].to_f64(),
            response: c.v.to_f64(),
            scale_index: c.s,
        })
        .collect()
}
