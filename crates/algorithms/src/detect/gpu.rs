//! Device back ends of the LoG blob detector: [`OpenClDetect`] (feature `opencl`) and
//! [`CudaDetect`] (feature `cuda`), both running the one portable source
//! [`kernels::BLOB_LOG`](super::kernels::BLOB_LOG).
//!
//! Per batch ([`DetectBackend::blob_log_batch`]):
//!
//! 1. the whole batch is uploaded in **one** transfer (one per run of consecutive frames with
//!    the same shape and pixel type; a movie is one run): u8 and u16 frames raw, converted on
//!    the device by `prescale_u8` / `prescale_u16` with the CPU's arithmetic
//!    ([`convert_frame`]: `v · (1/max)` or `(v − c)/(d − c)` in float64 where the device has
//!    doubles); float frames converted on the host exactly as on the CPU;
//! 2. the LoG cube, its per-frame extrema, the 3×3×3 maxima, the threshold and `exclude_border`
//!    are evaluated on the device, in sub-batches that keep the device working set (cube plus
//!    two pass buffers) under [`GpuDetectConfig::max_device_bytes`];
//! 3. only the candidates (flat index and cube value) and the per-work-group extrema are
//!    downloaded; the host restores raster order, applies the CPU's stable sort by descending
//!    response and the CPU's overlap pruning ([`prune_blobs`], pairs in ascending `(i, j)`).
//!
//! **Precision.** The cube is float32 ([`DevicePrecision::Float32`], the default); each 1-D pass
//! accumulates in float64 where the device has doubles, in the CPU's order and without FMA
//! contraction. For float32 frames (working type f32) the device cube is then bit-identical to
//! the CPU cube and so are the detections. For integer and float64 frames the CPU works in
//! float64; the float32 cube differs from it by about 1e-7 relative, which can only matter for
//! peaks within that margin of the threshold or of a neighbour
//! ([`DevicePrecision::MatchCpu`] stores the cube in float64 on devices with doubles and is
//! then identical to the CPU for every input type). Without doubles, or with
//! [`GpuDetectConfig::accumulate_f64`] off, the passes accumulate in float32 (cube within the
//! 1e-4 tolerance; detections near the threshold may differ).
//!
//! [`DetectBackend::blob_log_batch_acc`] selects the accumulation per call and
//! [`DetectBackend::last_kernel_seconds`] reports the kernel time of the last batch.
//!
//! **`locate_batch`** delegates to the CPU implementation ([`locate`]) on every back end here:
//! trackpy's pipeline (integer bandpass, percentile, iterative centroid) has no device kernels
//! yet. The results are therefore exactly the CPU's.

use bridge_core::{BridgeError, Device, Result};
use rayon::prelude::*;

use super::backend::DetectBackend;
use super::blob_log::{
    Accumulate, Blob, BlobLogParams, Converted, Prescale, convert_frame, prune_blobs,
};
use super::filters::LogKernels;
use super::kernels::{BLOB_LOG, MINMAX_WG, OPTS_F32_ACC32, OPTS_F32_ACC64, OPTS_F64};
use super::locate::{Feature, LocateParams, locate};
use super::real::Real;
use super::{FrameView, trace};
use crate::gpu::{Arg, Exec};

/// Storage type of the device cube.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DevicePrecision {
    /// float32 cube (passes accumulated in float64 where the device has doubles). Identical to
    /// the CPU for float32 frames; within ~1e-7 relative of the CPU's float64 cube otherwise.
    #[default]
    Float32,
    /// The cube in the CPU's working type (float64 for integer and float64 frames) on devices
    /// with doubles; falls back to [`DevicePrecision::Float32`] without them.
    MatchCpu,
}

/// Tuning of the device back ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuDetectConfig {
    /// Storage type of the cube.
    pub precision: DevicePrecision,
    /// Upper bound of the device working set of one sub-batch (cube and two pass buffers); at
    /// least one frame is always processed at a time.
    pub max_device_bytes: usize,
    /// Accumulate the passes in float64 where the device has doubles (default `true`; needed
    /// for a cube bit-identical to the CPU). `false` accumulates in float32, which is faster
    /// on GPUs with slow doubles (cube within ~1e-6 relative).
    pub accumulate_f64: bool,
}

impl Default for GpuDetectConfig {
    fn default() -> Self {
        GpuDetectConfig {
            precision: DevicePrecision::Float32,
            max_device_bytes: 512 << 20,
            accumulate_f64: true,
        }
    }
}

/// Device storage types (f32, f64) with their byte encoding.
trait DevReal: Real {
    /// Bytes per element.
    const SIZE: usize;
    /// Append the little-endian bytes.
    fn put(self, out: &mut Vec<u8>);
    /// Decode one element from `SIZE` little-endian bytes.
    fn get(bytes: &[u8]) -> Self;
}

impl DevReal for f32 {
    const SIZE: usize = 4;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(bytes: &[u8]) -> Self {
        let mut b = [0u8; 4];
        b.copy_from_slice(&bytes[..4]);
        f32::from_le_bytes(b)
    }
}

impl DevReal for f64 {
    const SIZE: usize = 8;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(bytes: &[u8]) -> Self {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[..8]);
        f64::from_le_bytes(b)
    }
}

fn u32_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn to_u32(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| {
        BridgeError::invalid_argument(what, format!("{v} does not fit the device's 32-bit index"))
    })
}

/// One device candidate, decoded: frame of the run, raster position, scale, value.
#[derive(Debug, Clone, Copy)]
struct Cand<R> {
    y: usize,
    x: usize,
    s: usize,
    v: R,
}

/// Result of one run of frames: survivors per frame and, when asked, the cube per frame
/// (`[scale][y][x]`, widened to f64).
struct RunOut {
    blobs: Vec<Vec<Blob>>,
    cubes: Option<Vec<Vec<f64>>>,
    /// Seconds spent in the pipeline's kernels (launches are blocking).
    kernel_s: f64,
}

/// Threshold of one frame in the device type (spec §1.5), `+inf` for a constant cube.
fn frame_threshold<R: Real>(lo: R, hi: R, p: &BlobLogParams) -> R {
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

/// Raw integer frames of one run, uploaded as they are and converted on the device.
struct RawFrames {
    /// The frames' pixels, little-endian, frame after frame.
    bytes: Vec<u8>,
    /// `prescale_u8` or `prescale_u16`.
    entry: &'static str,
    /// Per frame `(c, k)`; see the `prescale_*` kernels.
    params: Vec<(f64, f64)>,
    /// 0: `v · k`; 1: `(v − c) / k`.
    mode: u32,
}

/// The frames of one run.
enum Input<'a, T> {
    /// Converted on the host to the working type `T`.
    Host(&'a [Vec<T>]),
    /// Raw integers (working type f64), converted on the device.
    Raw(RawFrames),
}

/// Work-group shape (x, y) of the per-voxel kernels: 64×4 on CUDA, 64×1 on OpenCL.
fn local_xy<E: Exec>(e: &E) -> (usize, usize) {
    if matches!(e.device(), Device::Cuda(_)) {
        (64, 4)
    } else {
        (64, 1)
    }
}

/// The device pipeline on one run of frames (working type `T`, cube in the device type `R`).
#[allow(clippy::too_many_arguments)]
fn run_typed<E: Exec, T: Real, R: DevReal>(
    e: &E,
    input: Input<'_, T>,
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
    let mut timed = |f: &mut dyn FnMut() -> Result<()>| -> Result<()> {
        let t = std::time::Instant::now();
        f()?;
        kernel_s += t.elapsed().as_secs_f64();
        Ok(())
    };
    let acc64 = e.has_fp64() && (cfg.accumulate_f64 || R::SIZE == 8);
    let opts: &[&str] = if R::SIZE == 8 {
        OPTS_F64
    } else if acc64 {
        OPTS_F32_ACC64
    } else {
        OPTS_F32_ACC32
    };
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
        Input::Raw(raw) => {
            let t = std::time::Instant::now();
            let raw_buf = e.upload(&raw.bytes)?;
            up_s += t.elapsed().as_secs_f64();
            let mut pp = Vec::with_capacity(raw.params.len() * 16);
            for &(c, k) in &raw.params {
                if acc64 {
                    c.put(&mut pp);
                    k.put(&mut pp);
                } else {
                    (c as f32).put(&mut pp);
                    (k as f32).put(&mut pp);
                }
            }
            let pp_buf = e.upload(&pp)?;
            let img = e.alloc(n_frames * plane * R::SIZE)?;
            let (pu, nu) = (to_u32(plane, "frame size")?, to_u32(n_frames, "frames")?);
            timed(&mut || {
                e.launch(
                    opts,
                    raw.entry,
                    &[round_up_to(plane, 256), n_frames],
                    &[256, 1],
                    &[
                        Arg::Buf(&raw_buf),
                        Arg::Buf(&pp_buf),
                        Arg::Buf(&img),
                        Arg::U32(pu),
                        Arg::U32(nu),
                        Arg::U32(raw.mode),
                    ],
                )
            })?;
            img
        }
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
    let border_empty = 2 * by >= h || 2 * bx >= w;
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
        let local = [lx, ly, 1];
        timed(&mut || {
            e.launch(
                opts,
                "log_pass_y",
                &global,
                &local,
                &[
                    Arg::Buf(&img_buf),
                    Arg::U32(to_u32(frame0, "frame")?),
                    Arg::Buf(&taps_buf),
                    Arg::Buf(&meta_buf),
                    Arg::Buf(&a2),
                    Arg::Buf(&a0),
                    Arg::U32(hu),
                    Arg::U32(wu),
                    Arg::U32(nsu),
                    Arg::U32(nbu),
                ],
            )
        })?;
        timed(&mut || {
            e.launch(
                opts,
                "log_pass_x",
                &global,
                &local,
                &[
                    Arg::Buf(&a2),
                    Arg::Buf(&a0),
                    Arg::Buf(&taps_buf),
                    Arg::Buf(&meta_buf),
                    Arg::Buf(&s2_buf),
                    Arg::Buf(&cube),
                    Arg::U32(hu),
                    Arg::U32(wu),
                    Arg::U32(nsu),
                    Arg::U32(nbu),
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
                opts,
                "cube_minmax",
                &[groups * MINMAX_WG, nb],
                &[MINMAX_WG, 1],
                &[
                    Arg::Buf(&cube),
                    Arg::Buf(&part),
                    Arg::U32(to_u32(per_frame, "cube size")?),
                    Arg::U32(to_u32(groups, "groups")?),
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
                        opts,
                        "log_peaks",
                        &global,
                        &local,
                        &[
                            Arg::Buf(&cube),
                            Arg::Buf(&thr_buf),
                            Arg::U32(hu),
                            Arg::U32(wu),
                            Arg::U32(nsu),
                            Arg::U32(nbu),
                            Arg::U32(to_u32(by, "exclude_border")?),
                            Arg::U32(to_u32(bx, "exclude_border")?),
                            Arg::Buf(&counter),
                            Arg::Buf(&idx_buf),
                            Arg::Buf(&val_buf),
                            Arg::U32(to_u32(cap, "candidates")?),
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

fn round_up_to(n: usize, m: usize) -> usize {
    n.div_ceil(m) * m
}

/// The CPU's post-peak stage: raster order (y, x, scale), stable sort by descending response,
/// overlap pruning in the working type.
fn order_and_prune<T: Real, R: Real>(
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

/// How a frame reaches the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Converted on the host, working type f32.
    HostF32,
    /// Converted on the host, working type f64.
    HostF64,
    /// Raw u8, converted on the device (working type f64).
    RawU8,
    /// Raw u16, converted on the device (working type f64).
    RawU16,
}

fn kind_of(f: &FrameView<'_>) -> Kind {
    match f {
        FrameView::U8(_) => Kind::RawU8,
        FrameView::U16(_) => Kind::RawU16,
        FrameView::F32(_) => Kind::HostF32,
        FrameView::F64(_) => Kind::HostF64,
    }
}

/// `(mode, c, k)` of the device conversion of an integer frame, with the CPU's arithmetic
/// ([`convert_frame`]); the CPU's error for `MinMax` on a constant frame.
fn raw_params(f: &FrameView<'_>, prescale: Prescale) -> Result<(u32, f64, f64)> {
    let (lo, hi, dmax) = match f {
        FrameView::U8(a) => {
            let (lo, hi) = a
                .iter()
                .fold((u8::MAX, u8::MIN), |(l, h), &v| (l.min(v), h.max(v)));
            (f64::from(lo), f64::from(hi), 255.0)
        }
        FrameView::U16(a) => {
            let (lo, hi) = a
                .iter()
                .fold((u16::MAX, u16::MIN), |(l, h), &v| (l.min(v), h.max(v)));
            (f64::from(lo), f64::from(hi), 65535.0)
        }
        _ => {
            return Err(BridgeError::invalid_argument(
                "frame",
                "device prescale takes u8 or u16 frames",
            ));
        }
    };
    match prescale {
        Prescale::Legacy => Ok((0, 0.0, 1.0 / dmax)),
        Prescale::None => Ok((0, 0.0, 1.0)),
        Prescale::MinMax => {
            if lo < hi {
                Ok((1, lo, hi - lo))
            } else {
                // the CPU's error message
                match convert_frame(f, prescale) {
                    Err(e) => Err(e),
                    Ok(_) => Err(BridgeError::InvalidInput(format!(
                        "prescale minmax needs min < max, but the frame is constant ({lo})"
                    ))),
                }
            }
        }
        Prescale::Range(c, d) => Ok((1, c, d - c)),
    }
}

/// Group into runs of equal shape and kind, run each on the device (one upload per run).
fn run_frames<E: Exec>(
    e: &E,
    frames: &[FrameView<'_>],
    p: &BlobLogParams,
    cfg: &GpuDetectConfig,
    want_cube: bool,
) -> Result<RunOut> {
    p.validate()?;
    for f in frames {
        f.validate()?;
    }
    let mut out = RunOut {
        blobs: Vec::with_capacity(frames.len()),
        cubes: want_cube.then(Vec::new),
        kernel_s: 0.0,
    };
    let f64_cube = cfg.precision == DevicePrecision::MatchCpu && e.has_fp64();
    let mut i = 0;
    while i < frames.len() {
        let dim = frames[i].dim();
        let kind = kind_of(&frames[i]);
        let mut j = i + 1;
        // CUDA grids: at most 65535 frames along y in the prescale launch
        while j < frames.len()
            && j - i < 65_535
            && frames[j].dim() == dim
            && kind_of(&frames[j]) == kind
        {
            j += 1;
        }
        let run = &frames[i..j];
        let (h, w) = dim;
        let n = run.len();
        let res = match kind {
            Kind::HostF32 | Kind::HostF64 => {
                let converted: Vec<Converted> = run
                    .par_iter()
                    .map(|f| convert_frame(f, p.prescale))
                    .collect::<Result<_>>()?;
                if kind == Kind::HostF32 {
                    let imgs: Vec<Vec<f32>> = converted
                        .into_iter()
                        .map(|c| match c {
                            Converted::F32(v) => v,
                            Converted::F64(v) => v.iter().map(|&x| x as f32).collect(),
                        })
                        .collect();
                    run_typed::<E, f32, f32>(e, Input::Host(&imgs), n, h, w, p, cfg, want_cube)?
                } else {
                    let imgs: Vec<Vec<f64>> = converted
                        .into_iter()
                        .map(|c| match c {
                            Converted::F64(v) => v,
                            Converted::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
                        })
                        .collect();
                    if f64_cube {
                        run_typed::<E, f64, f64>(e, Input::Host(&imgs), n, h, w, p, cfg, want_cube)?
                    } else {
                        run_typed::<E, f64, f32>(e, Input::Host(&imgs), n, h, w, p, cfg, want_cube)?
                    }
                }
            }
            Kind::RawU8 | Kind::RawU16 => {
                let t_pack = std::time::Instant::now();
                let px = if kind == Kind::RawU8 { 1 } else { 2 };
                let fb = h * w * px;
                // per-frame prescale parameters and little-endian pixels, in parallel
                let pr: Vec<(u32, f64, f64)> = run
                    .par_iter()
                    .map(|f| raw_params(f, p.prescale))
                    .collect::<Result<_>>()?;
                let mode = pr.last().map_or(0, |r| r.0);
                let params: Vec<(f64, f64)> = pr.iter().map(|r| (r.1, r.2)).collect();
                let mut bytes = vec![0u8; n * fb];
                bytes
                    .par_chunks_mut(fb.max(1))
                    .zip(run.par_iter())
                    .for_each(|(dst, f)| pack_le(f, dst));
                trace(|| {
                    format!(
                        "detect: pack {n} raw frames {:.3} s",
                        t_pack.elapsed().as_secs_f64()
                    )
                });
                let raw = RawFrames {
                    bytes,
                    entry: if kind == Kind::RawU8 {
                        "prescale_u8"
                    } else {
                        "prescale_u16"
                    },
                    params,
                    mode,
                };
                if f64_cube {
                    run_typed::<E, f64, f64>(e, Input::Raw(raw), n, h, w, p, cfg, want_cube)?
                } else {
                    run_typed::<E, f64, f32>(e, Input::Raw(raw), n, h, w, p, cfg, want_cube)?
                }
            }
        };
        out.blobs.extend(res.blobs);
        out.kernel_s += res.kernel_s;
        if let (Some(all), Some(c)) = (out.cubes.as_mut(), res.cubes) {
            all.extend(c);
        }
        i = j;
    }
    Ok(out)
}

/// A frame's pixels as little-endian bytes into `dst` (exactly its size); u8 and u16 only.
fn pack_le(f: &FrameView<'_>, dst: &mut [u8]) {
    match f {
        FrameView::U8(a) => match a.as_slice() {
            Some(s) => dst.copy_from_slice(s),
            None => dst.iter_mut().zip(a.iter()).for_each(|(d, &v)| *d = v),
        },
        FrameView::U16(a) => {
            for (d, &v) in dst.chunks_exact_mut(2).zip(a.iter()) {
                d.copy_from_slice(&v.to_le_bytes());
            }
        }
        _ => {}
    }
}

/// Kernel time of the last batch, shared by clones of a back end.
#[derive(Debug, Clone, Default)]
struct LastKernel(std::sync::Arc<std::sync::Mutex<Option<f64>>>);

impl LastKernel {
    fn set(&self, v: f64) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
    }

    fn get(&self) -> Option<f64> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn cpu_locate(frames: &[FrameView<'_>], p: &LocateParams) -> Result<Vec<Vec<Feature>>> {
    p.validate()?;
    frames.par_iter().map(|f| locate(*f, p)).collect()
}

// ---------------------------------------------------------------------------------------------
// OpenCL

/// `blob_log` on an OpenCL device (feature `opencl`). See the [module docs](self) for the
/// pipeline and its precision; `locate_batch` runs on the CPU.
#[cfg(feature = "opencl")]
#[derive(Debug, Clone)]
pub struct OpenClDetect {
    exec: crate::gpu::ClExec,
    config: GpuDetectConfig,
    last_kernel: LastKernel,
}

#[cfg(feature = "opencl")]
impl OpenClDetect {
    /// The back end for OpenCL device `n` (`opencl:n`) on the process-wide OpenCL backend;
    /// [`BridgeError::BackendUnavailable`] without OpenCL or without that device.
    pub fn new(n: usize) -> Result<Self> {
        let exec = crate::gpu::ClExec::new(bridge_opencl::shared(), Device::OpenCl(n), &BLOB_LOG)?;
        Ok(OpenClDetect {
            exec,
            config: GpuDetectConfig::default(),
            last_kernel: LastKernel::default(),
        })
    }
}

/// What the OpenCL and CUDA detectors share (both hold an `exec`, a `config` and a
/// `last_kernel`): the configuration accessors, `has_fp64`, the `log_cubes` diagnostic and the
/// [`DetectBackend`] impl (`blob_log` on the device, `locate` on the CPU).
#[cfg(any(feature = "opencl", feature = "cuda"))]
macro_rules! gpu_detect_backend {
    ($ty:ty, $name:literal) => {
        impl $ty {
            /// The same back end with another configuration.
            pub fn with_config(mut self, config: GpuDetectConfig) -> Self {
                self.config = config;
                self
            }

            /// The configuration in use.
            pub fn config(&self) -> GpuDetectConfig {
                self.config
            }

            /// Whether the device has doubles (the passes then accumulate in float64).
            pub fn has_fp64(&self) -> bool {
                self.exec.has_fp64()
            }

            /// Diagnostic: the device LoG cube of every frame (`[scale][y][x]`, widened to
            /// f64), as `blob_log_batch` computes it (a full download; not for production use).
            pub fn log_cubes(
                &self,
                frames: &[FrameView<'_>],
                p: &BlobLogParams,
            ) -> Result<Vec<Vec<f64>>> {
                let out = run_frames(&self.exec, frames, p, &self.config, true)?;
                out.cubes
                    .ok_or_else(|| BridgeError::backend($name, None, "no cube was computed"))
            }
        }

        impl DetectBackend for $ty {
            fn device(&self) -> Device {
                self.exec.device()
            }
            fn blob_log_batch(
                &self,
                frames: &[FrameView<'_>],
                p: &BlobLogParams,
            ) -> Result<Vec<Vec<Blob>>> {
                let out = run_frames(&self.exec, frames, p, &self.config, false)?;
                self.last_kernel.set(out.kernel_s);
                Ok(out.blobs)
            }

            /// [`Accumulate::F64`] accumulates the passes in float64 (where the device has doubles),
            /// [`Accumulate::F32`] in float32; this overrides [`GpuDetectConfig::accumulate_f64`] for
            /// the call.
            fn blob_log_batch_acc(
                &self,
                frames: &[FrameView<'_>],
                p: &BlobLogParams,
                acc: Accumulate,
            ) -> Result<Vec<Vec<Blob>>> {
                let cfg = GpuDetectConfig {
                    accumulate_f64: acc == Accumulate::F64,
                    ..self.config
                };
                let out = run_frames(&self.exec, frames, p, &cfg, false)?;
                self.last_kernel.set(out.kernel_s);
                Ok(out.blobs)
            }

            /// Wall time of the last batch's kernels (input conversion, passes, extrema, peaks; the
            /// launches are blocking), without transfers and host work.
            fn last_kernel_seconds(&self) -> Option<f64> {
                self.last_kernel.get()
            }

            /// Runs on the CPU ([`locate`]); there are no device kernels for `locate` yet.
            fn locate_batch(
                &self,
                frames: &[FrameView<'_>],
                p: &LocateParams,
            ) -> Result<Vec<Vec<Feature>>> {
                cpu_locate(frames, p)
            }
        }
    };
}

#[cfg(feature = "opencl")]
gpu_detect_backend!(OpenClDetect, "opencl");

// ---------------------------------------------------------------------------------------------
// CUDA

/// `blob_log` on a CUDA device (feature `cuda`), the same portable kernels as
/// [`OpenClDetect`] compiled by NVRTC. See the [module docs](self); `locate_batch` runs on the
/// CPU.
#[cfg(feature = "cuda")]
#[derive(Debug, Clone)]
pub struct CudaDetect {
    exec: crate::gpu::CudaExec,
    config: GpuDetectConfig,
    last_kernel: LastKernel,
}

#[cfg(feature = "cuda")]
impl CudaDetect {
    /// The back end for CUDA device `n`; [`BridgeError::BackendUnavailable`] without a driver
    /// or device.
    pub fn new(n: usize) -> Result<Self> {
        Ok(CudaDetect {
            exec: crate::gpu::CudaExec {
                gpu: bridge_cuda::gpu(n)?,
                program: &BLOB_LOG,
            },
            config: GpuDetectConfig::default(),
            last_kernel: LastKernel::default(),
        })
    }
}

#[cfg(feature = "cuda")]
gpu_detect_backend!(CudaDetect, "cuda");
