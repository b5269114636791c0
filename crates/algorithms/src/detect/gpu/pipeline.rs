//! One run of frames on the device: the prescale of raw integers, the two LoG passes into the
//! cube, its per-frame extrema, the 3×3×3 peaks, then the CPU's ordering and overlap pruning on
//! the host (see the [parent module](super)).

use bridge_core::exec::{Executor, KernelArg};
use bridge_core::{BridgeError, Device, Result, tuning};
use rayon::prelude::*;

use super::super::blob_log::{Blob, BlobLogParams, border_covers, prune_blobs};
use super::super::filters::LogKernels;
use super::super::kernels::{BLOB_LOG, MINMAX_WG, OPTS_F32_ACC32, OPTS_F32_ACC64, OPTS_F64};
use super::super::real::Real;
use super::super::trace;
use super::{DevReal, GpuDetectConfig};

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
    rsize: usize,
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
            &[round_up_to(plane, prep_wg()), n_frames],
            &[prep_wg(), 1],
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
/// `ARRAYBRIDGE_DETECT_WG_Y` (4 on CUDA, 1 on OpenCL), at most 1024 work items.
pub(super) fn local_xy<E: Executor>(e: &E) -> (usize, usize) {
    let x = tuning::usize_or("ARRAYBRIDGE_DETECT_WG_X", 64);
    let y = tuning::usize_knob("ARRAYBRIDGE_DETECT_WG_Y").unwrap_or(
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
pub(super) fn pass_blocking<E: Executor>(e: &E) -> (usize, usize) {
    let rows = tuning::usize_knob("ARRAYBRIDGE_DETECT_ROWS").unwrap_or(
        if matches!(e.device(), Device::Cuda(_)) {
            8
        } else {
            1
        },
    );
    (rows, tuning::usize_or("ARRAYBRIDGE_DETECT_COLS", 1))
}

/// Work-group size of the prescale kernels (`ARRAYBRIDGE_DETECT_PREP_WG`, default 256).
pub(super) fn prep_wg() -> usize {
    tuning::usize_or("ARRAYBRIDGE_DETECT_PREP_WG", 256)
}

/// The device pipeline on one run of frames (working type `T`, cube in the device type `R`).
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
    let (mut up_s, mut read_s, mut prune_s) = (0.0f64, 0.0f64, 0.0f64);
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
    let base: &[&str] = if R::SIZE == 8 {
        OPTS_F64
    } else if acc64 {
        OPTS_F32_ACC64
    } else {
        OPTS_F32_ACC32
    };
    let (rows, cols) = pass_blocking(e);
    let blocking = [format!("-DLOG_ROWS={rows}"), format!("-DLOG_COLS={cols}")];
    let opts_v: Vec<&str> = base
        .iter()
        .copied()
        .chain(blocking.iter().map(String::as_str))
        .collect();
    let opts: &[&str] = &opts_v;
    let sigmas = p.sigma_list::<T>();
    let ns = sigmas.len();
    let plane = h * w;
    let per_frame = ns * plane;

    // kernels (ACC type), per-scale (offset, radius), σ² (working type, stored as R)
    let mut taps: Vec<u8> = Vec::new();
    let mut meta: Vec<u32> = Vec::with_capacity(2 * ns);
    let mut ntaps = 0usize;
    for &s in &sigmas {
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
    for &s in &sigmas {
        R::from_f64((s * s).to_f64()).put(&mut s2);
    }
    let taps_buf = e.upload(&taps)?;
    let meta_buf = e.upload(&u32_bytes(&meta))?;
    let s2_buf = e.upload(&s2)?;

    // the whole run in one transfer
    let img_buf = match input {
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
            up_s += t.elapsed().as_secs_f64();
            prescale(
                e,
                &raw_buf,
                0,
                &pre,
                n_frames,
                plane,
                opts,
                acc64,
                R::SIZE,
                &mut timed,
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
            R::SIZE,
            &mut timed,
        )?,
    };

    let frame_bytes = 3 * per_frame * R::SIZE;
    let mut chunk = (cfg.max_device_bytes / frame_bytes.max(1)).clamp(1, n_frames.max(1));
    let idx_limit = (u32::MAX as usize) / per_frame.max(1);
    if idx_limit == 0 {
        return Err(BridgeError::invalid_argument(
            "frame",
            format!("{h}x{w} with {ns} scales exceeds the device's 32-bit cube index"),
        ));
    }
    // CUDA grids hold at most 65535 blocks along y and z (frames × scales along z)
    chunk = chunk.min(idx_limit).min((65_535 / ns.max(1)).max(1));
    let cube_bytes = chunk * per_frame * R::SIZE;
    let a2 = e.alloc(cube_bytes)?;
    let a0 = e.alloc(cube_bytes)?;
    let cube = e.alloc(cube_bytes)?;
    let (hu, wu, nsu) = (
        to_u32(h, "rows")?,
        to_u32(w, "columns")?,
        to_u32(ns, "num_sigma")?,
    );
    let (by, bx) = p.exclude_border;
    let border_empty = border_covers(p.exclude_border, h, w);
    let groups = per_frame.div_ceil(MINMAX_WG).clamp(1, 64);
    let mut cap = (chunk * plane / 32).max(1024);
    let mut idx_buf = e.alloc(cap * 4)?;
    let mut val_buf = e.alloc(cap * R::SIZE)?;

    let mut blobs_out: Vec<Vec<Blob>> = Vec::with_capacity(n_frames);
    let mut cubes_out: Vec<Vec<f64>> = Vec::new();
    let mut frame0 = 0usize;
    while frame0 < n_frames {
        let nb = chunk.min(n_frames - frame0);
        let nbu = to_u32(nb, "batch")?;
        let (lx, ly) = local_xy(e);
        let global = [round_up_to(w, lx), round_up_to(h, ly), nb * ns];
        let global_y = [
            round_up_to(w, lx),
            round_up_to(h.div_ceil(rows), ly),
            nb * ns,
        ];
        let global_x = [
            round_up_to(w.div_ceil(cols), lx),
            round_up_to(h, ly),
            nb * ns,
        ];
        let local = [lx, ly, 1];
        timed(&mut || {
            e.launch(
                &BLOB_LOG,
                opts,
                "log_pass_y",
                &global_y,
                &local,
                &[
                    KernelArg::Buf(&img_buf),
                    KernelArg::U32(to_u32(frame0, "frame")?),
                    KernelArg::Buf(&taps_buf),
                    KernelArg::Buf(&meta_buf),
                    KernelArg::Buf(&a2),
                    KernelArg::Buf(&a0),
                    KernelArg::U32(hu),
                    KernelArg::U32(wu),
                    KernelArg::U32(nsu),
                    KernelArg::U32(nbu),
                ],
            )
        })?;
        timed(&mut || {
            e.launch(
                &BLOB_LOG,
                opts,
                "log_pass_x",
                &global_x,
                &local,
                &[
                    KernelArg::Buf(&a2),
                    KernelArg::Buf(&a0),
                    KernelArg::Buf(&taps_buf),
                    KernelArg::Buf(&meta_buf),
                    KernelArg::Buf(&s2_buf),
                    KernelArg::Buf(&cube),
                    KernelArg::U32(hu),
                    KernelArg::U32(wu),
                    KernelArg::U32(nsu),
                    KernelArg::U32(nbu),
                ],
            )
        })?;
        if want_cube {
            let bytes = e.read(&cube, nb * per_frame * R::SIZE)?;
            for f in bytes.chunks_exact(per_frame * R::SIZE) {
                cubes_out.push(
                    f.chunks_exact(R::SIZE)
                        .map(|c| R::get(c).to_f64())
                        .collect(),
                );
            }
        }
        // per-frame extrema → thresholds
        let part = e.alloc(nb * groups * 2 * R::SIZE)?;
        timed(&mut || {
            e.launch(
                &BLOB_LOG,
                opts,
                "cube_minmax",
                &[groups * MINMAX_WG, nb],
                &[MINMAX_WG, 1],
                &[
                    KernelArg::Buf(&cube),
                    KernelArg::Buf(&part),
                    KernelArg::U32(to_u32(per_frame, "cube size")?),
                    KernelArg::U32(to_u32(groups, "groups")?),
                ],
            )
        })?;
        let t = std::time::Instant::now();
        let part = e.read(&part, nb * groups * 2 * R::SIZE)?;
        read_s += t.elapsed().as_secs_f64();
        let part: Vec<R> = part.chunks_exact(R::SIZE).map(R::get).collect();
        let mut thr = Vec::with_capacity(nb * R::SIZE);
        for f in part.chunks_exact(2 * groups) {
            let (mut lo, mut hi) = (f[0], f[1]);
            for g in f.chunks_exact(2) {
                if g[0] < lo {
                    lo = g[0];
                }
                if g[1] > hi {
                    hi = g[1];
                }
            }
            frame_threshold(lo, hi, p).put(&mut thr);
        }
        let mut per: Vec<Vec<Cand<R>>> = vec![Vec::new(); nb];
        if !border_empty {
            let thr_buf = e.upload(&thr)?;
            let count = loop {
                let counter = e.zeroed(4)?;
                timed(&mut || {
                    e.launch(
                        &BLOB_LOG,
                        opts,
                        "log_peaks",
                        &global,
                        &local,
                        &[
                            KernelArg::Buf(&cube),
                            KernelArg::Buf(&thr_buf),
                            KernelArg::U32(hu),
                            KernelArg::U32(wu),
                            KernelArg::U32(nsu),
                            KernelArg::U32(nbu),
                            KernelArg::U32(to_u32(by, "exclude_border")?),
                            KernelArg::U32(to_u32(bx, "exclude_border")?),
                            KernelArg::Buf(&counter),
                            KernelArg::Buf(&idx_buf),
                            KernelArg::Buf(&val_buf),
                            KernelArg::U32(to_u32(cap, "candidates")?),
                        ],
                    )
                })?;
                let c = e.read(&counter, 4)?;
                let n = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                let n = usize::try_from(n).map_err(|_| {
                    BridgeError::backend("detect", None, "candidate counter overflowed")
                })?;
                if n <= cap {
                    break n;
                }
                cap = n.next_power_of_two();
                idx_buf = e.alloc(cap * 4)?;
                val_buf = e.alloc(cap * R::SIZE)?;
            };
            if count > 0 {
                let t = std::time::Instant::now();
                let idx = e.read(&idx_buf, count * 4)?;
                let val = e.read(&val_buf, count * R::SIZE)?;
                read_s += t.elapsed().as_secs_f64();
                for (ib, vb) in idx.chunks_exact(4).zip(val.chunks_exact(R::SIZE)) {
                    let o = u32::from_le_bytes([ib[0], ib[1], ib[2], ib[3]]) as usize;
                    let b = o / per_frame;
                    let rem = o % per_frame;
                    let (s, yx) = (rem / plane, rem % plane);
                    if let Some(list) = per.get_mut(b) {
                        list.push(Cand {
                            y: yx / w,
                            x: yx % w,
                            s,
                            v: R::get(vb),
                        });
                    }
                }
            }
        }
        let t = std::time::Instant::now();
        let done: Vec<Vec<Blob>> = per
            .into_par_iter()
            .map(|c| order_and_prune::<T, R>(c, &sigmas, p.overlap))
            .collect();
        prune_s += t.elapsed().as_secs_f64();
        blobs_out.extend(done);
        frame0 += nb;
    }
    trace(|| {
        format!(
            "detect: {n_frames} frames {h}x{w}: total {:.3} s = upload {up_s:.3} + kernels \
             {kernel_s:.3} + reads {read_s:.3} + host prune {prune_s:.3} + other",
            t_all.elapsed().as_secs_f64()
        )
    });
    Ok(RunOut {
        blobs: blobs_out,
        cubes: want_cube.then_some(cubes_out),
        kernel_s,
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
