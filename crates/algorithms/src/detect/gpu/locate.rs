//! trackpy `locate` on the device ([`kernels::LOCATE`](super::super::kernels::LOCATE)), written
//! once over the executor: frames grouped in runs of equal shape and pixel type, each run in
//! sub-batches that keep the device working set under
//! [`GpuDetectConfig::max_device_bytes`].
//!
//! Per sub-batch: one upload of the frames as stored (u8, u16, f32, f64); on the device the
//! inversion, the bandpass (lowpass, boxcar background, clipping), the rescale to the integer
//! gamut, the percentile threshold, the grey-dilation maxima, the iterated centroid and the
//! characterisation of every candidate, and the background noise. Only the candidates'
//! positions and measures, the per-frame rescale factor and the noise statistics come back
//! (a few bytes per feature and per frame). The host then does what needs every feature of a
//! frame at once, exactly as the CPU does it: raster order, duplicate removal, `minmass`,
//! `maxsize`, `topn` and the static error `ep`
//! ([`remove_duplicates`], [`finish`]).

use bridge_core::exec::{Executor, KernelArg};
use bridge_core::{BridgeError, Result};
use rayon::prelude::*;

use super::super::FrameView;
use super::super::kernels::{LOCATE, LOCATE_OPTS_F32, LOCATE_OPTS_F64};
use super::super::locate::{
    Feature, LocateParams, Plan, finish, lowpass_taps, mask, mask_tables, remove_duplicates,
};
use super::super::trace;
use super::pipeline::{local_xy, prep_wg, round_up_to, to_u32, u32_bytes};
use super::{DevReal, GpuDetectConfig};

/// Work-group size of the per-line, per-frame and per-candidate kernels.
const LINE_WG: usize = 64;

/// The features of every frame and the kernel seconds.
pub(super) struct LocateOut {
    pub(super) features: Vec<Vec<Feature>>,
    pub(super) kernel_s: f64,
}

/// Pixel type of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    U8,
    U16,
    F32,
    F64,
}

impl Kind {
    fn of(f: &FrameView<'_>) -> Kind {
        match f {
            FrameView::U8(_) => Kind::U8,
            FrameView::U16(_) => Kind::U16,
            FrameView::F32(_) => Kind::F32,
            FrameView::F64(_) => Kind::F64,
        }
    }

    fn is_int(self) -> bool {
        matches!(self, Kind::U8 | Kind::U16)
    }

    /// The top of the integer gamut the bandpassed image is rescaled to (trackpy: the dtype's
    /// maximum for integers, 255 for floats).
    fn int_max(self) -> f64 {
        if self == Kind::U16 { 65535.0 } else { 255.0 }
    }

    fn load_entry(self) -> &'static str {
        match self {
            Kind::U8 => "locate_load_u8",
            Kind::U16 => "locate_load_u16",
            Kind::F32 => "locate_load_f32",
            Kind::F64 => "locate_load_f64",
        }
    }
}

/// `locate` on every frame (one result per frame, same order). The arithmetic is float64 when
/// the device has doubles and `cfg.accumulate_f64` is on (the CPU's features bit for bit),
/// float32 otherwise.
pub(super) fn locate_frames<E: Executor>(
    e: &E,
    frames: &[FrameView<'_>],
    p: &LocateParams,
    cfg: &GpuDetectConfig,
) -> Result<LocateOut> {
    p.validate()?;
    for f in frames {
        f.validate()?;
    }
    let plan = Plan::new(p);
    let f64_dev = e.has_fp64() && cfg.accumulate_f64;
    let mut out = LocateOut {
        features: Vec::with_capacity(frames.len()),
        kernel_s: 0.0,
    };
    let mut i = 0;
    while i < frames.len() {
        let dim = frames[i].dim();
        let kind = Kind::of(&frames[i]);
        let mut j = i + 1;
        while j < frames.len() && frames[j].dim() == dim && Kind::of(&frames[j]) == kind {
            j += 1;
        }
        let run = &frames[i..j];
        let (h, w) = dim;
        if !plan.fits(h, w) {
            out.features.extend(run.iter().map(|_| Vec::new()));
        } else if f64_dev {
            run_typed::<E, f64>(e, Src::Host(run), kind, h, w, p, &plan, cfg, &mut out)?;
        } else {
            run_typed::<E, f32>(e, Src::Host(run), kind, h, w, p, &plan, cfg, &mut out)?;
        }
        i = j;
    }
    Ok(out)
}

/// Pixel types a movie already on the device can be read in place as, by `locate` with
/// `cfg`: `u8`, `u16`, `f32`, and `f64` where the device computes in float64 (a float32
/// pipeline reads float64 frames converted on the host).
pub(super) fn resident_kind<E: Executor>(
    e: &E,
    dtype: bridge_core::DType,
    cfg: &GpuDetectConfig,
) -> Option<ResidentKind> {
    use bridge_core::DType;
    let kind = match dtype {
        DType::U8 => Kind::U8,
        DType::U16 => Kind::U16,
        DType::F32 => Kind::F32,
        DType::F64 if e.has_fp64() && cfg.accumulate_f64 => Kind::F64,
        _ => return None,
    };
    Some(ResidentKind(kind))
}

/// A pixel type [`locate_resident`] reads in place (from [`resident_kind`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct ResidentKind(Kind);

/// `locate` on a movie that already lives on the executor's device: `buf` holds `t` frames of
/// `h × w` pixels of `kind`, C order, read in place by the load kernel (no upload, no copy);
/// the rest is [`locate_frames`]'s pipeline. `progress(frames_done)` is called as sub-batches
/// complete.
pub(super) fn locate_resident<E: Executor>(
    e: &E,
    buf: &E::Buffer,
    kind: ResidentKind,
    (t, h, w): (usize, usize, usize),
    p: &LocateParams,
    cfg: &GpuDetectConfig,
    progress: &mut dyn FnMut(usize),
) -> Result<LocateOut> {
    p.validate()?;
    let plan = Plan::new(p);
    let kind = kind.0;
    let mut out = LocateOut {
        features: Vec::with_capacity(t),
        kernel_s: 0.0,
    };
    if !plan.fits(h, w) {
        out.features.extend((0..t).map(|_| Vec::new()));
        progress(t);
        return Ok(out);
    }
    let src = Src::Device {
        buf,
        frames: t,
        progress,
    };
    // a resident f64 movie is only accepted where the device computes in float64
    if e.has_fp64() && cfg.accumulate_f64 {
        run_typed::<E, f64>(e, src, kind, h, w, p, &plan, cfg, &mut out)?;
    } else {
        run_typed::<E, f32>(e, src, kind, h, w, p, &plan, cfg, &mut out)?;
    }
    Ok(out)
}

/// Where the frames of a run come from.
enum Src<'a, 'f, B> {
    /// Host frames, packed and uploaded per sub-batch.
    Host(&'a [FrameView<'f>]),
    /// A movie of `frames` frames already on the device, read in place.
    Device {
        buf: &'a B,
        frames: usize,
        progress: &'a mut dyn FnMut(usize),
    },
}

impl<B> Src<'_, '_, B> {
    fn len(&self) -> usize {
        match self {
            Src::Host(run) => run.len(),
            Src::Device { frames, .. } => *frames,
        }
    }
}

/// Little-endian bytes of `frames` as the load kernel reads them (`R` for float64 frames on a
/// device without doubles), in parallel.
fn pack<R: DevReal>(frames: &[FrameView<'_>], kind: Kind, plane: usize) -> Vec<u8> {
    let px = match kind {
        Kind::U8 => 1,
        Kind::U16 => 2,
        Kind::F32 => 4,
        Kind::F64 => R::SIZE,
    };
    let fb = plane * px;
    let mut bytes = vec![0u8; frames.len() * fb];
    bytes
        .par_chunks_mut(fb.max(1))
        .zip(frames.par_iter())
        .for_each(|(dst, f)| match f {
            FrameView::U8(a) => dst.iter_mut().zip(a.iter()).for_each(|(d, &v)| *d = v),
            FrameView::U16(a) => {
                for (d, &v) in dst.chunks_exact_mut(2).zip(a.iter()) {
                    d.copy_from_slice(&v.to_le_bytes());
                }
            }
            FrameView::F32(a) => {
                for (d, &v) in dst.chunks_exact_mut(4).zip(a.iter()) {
                    d.copy_from_slice(&v.to_le_bytes());
                }
            }
            FrameView::F64(a) => {
                let mut tmp = Vec::with_capacity(R::SIZE);
                for (d, &v) in dst.chunks_exact_mut(R::SIZE).zip(a.iter()) {
                    tmp.clear();
                    R::from_f64(v).put(&mut tmp);
                    d.copy_from_slice(&tmp);
                }
            }
        });
    bytes
}

fn reals<R: DevReal>(v: &[f64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * R::SIZE);
    for &x in v {
        R::from_f64(x).put(&mut out);
    }
    out
}

fn decode<R: DevReal>(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(R::SIZE)
        .map(|c| R::get(c).to_f64())
        .collect()
}

/// One run of frames of one shape and pixel type, in device type `R`.
#[allow(clippy::too_many_arguments)]
fn run_typed<E: Executor, R: DevReal>(
    e: &E,
    mut src: Src<'_, '_, E::Buffer>,
    kind: Kind,
    h: usize,
    w: usize,
    p: &LocateParams,
    plan: &Plan,
    cfg: &GpuDetectConfig,
    out: &mut LocateOut,
) -> Result<()> {
    let t_all = std::time::Instant::now();
    let (mut up_s, mut read_s, mut host_s) = (0.0f64, 0.0f64, 0.0f64);
    let tracing = super::super::trace_enabled();
    let mut kernel_s = 0.0f64;
    // per kernel (traced: each waited for)
    let mut per_kernel: Vec<(&'static str, f64)> = Vec::new();
    let opts: &[&str] = if R::SIZE == 8 {
        LOCATE_OPTS_F64
    } else {
        LOCATE_OPTS_F32
    };
    // Launch one `LOCATE` kernel and add its time (traced: each waited for).
    let mut launch = |name: &'static str,
                      global: &[usize],
                      local: &[usize],
                      args: &[KernelArg<'_, E::Buffer>]|
     -> Result<()> {
        let t = std::time::Instant::now();
        e.launch(&LOCATE, opts, name, global, local, args)?;
        if tracing {
            e.synchronize()?;
        }
        let dt = t.elapsed().as_secs_f64();
        kernel_s += dt;
        if tracing {
            match per_kernel.iter_mut().find(|(n, _)| *n == name) {
                Some(k) => k.1 += dt,
                None => per_kernel.push((name, dt)),
            }
        }
        Ok(())
    };
    let plane = h * w;
    if plane > i32::MAX as usize {
        return Err(BridgeError::invalid_argument(
            "frame",
            format!("{h}x{w} exceeds the device's 32-bit pixel index"),
        ));
    }
    let int_max = kind.int_max();
    let nbins = int_max as usize + 1;
    let thr = p
        .threshold
        .unwrap_or(if kind.is_int() { 1.0 } else { 1.0 / 255.0 });
    let prm = e.upload(&reals::<R>(&[thr, int_max, p.percentile / 100.0]))?;
    let taps = if p.preprocess {
        lowpass_taps(p.noise_size)
    } else {
        None
    };
    let taps_buf = match &taps {
        Some(t) => Some(e.upload(&reals::<R>(t))?),
        None => None,
    };
    let sm = plan.smoothing;
    let mode: u32 = if sm <= 1 {
        3
    } else if kind.is_int() {
        2
    } else if kind == Kind::F32 {
        1
    } else {
        0
    };
    let identity = u32::from(!p.preprocess && kind.is_int());
    let r = plan.r;
    let mk = mask(r);
    let (r2, c2, s2) = mask_tables(r, &mk);
    let mut mask_u = Vec::with_capacity(2 * mk.len());
    for &(a, b) in &mk {
        mask_u.push(to_u32(a, "mask offset")?);
        mask_u.push(to_u32(b, "mask offset")?);
    }
    let mask_buf = e.upload(&u32_bytes(&mask_u))?;
    let r2_u: Vec<u32> = r2.iter().map(|&v| v as u32).collect();
    let r2_buf = e.upload(&u32_bytes(&r2_u))?;
    let c2_buf = e.upload(&reals::<R>(&c2))?;
    let s2_buf = e.upload(&reals::<R>(&s2))?;
    // half-width of the mask per row offset (-1: no pixel), for the noise
    let mut hw = vec![-1i32; 2 * r + 1];
    for &(a, b) in &mk {
        hw[a] = hw[a].max(b as i32 - r as i32);
    }
    let hw_bytes: Vec<u8> = hw.iter().flat_map(|v| v.to_le_bytes()).collect();
    let hw_buf = e.upload(&hw_bytes)?;
    let (lo, hi) = plan.reach();
    let (hu, wu, ru) = (
        to_u32(h, "rows")?,
        to_u32(w, "columns")?,
        to_u32(r, "radius")?,
    );
    let (lou, hiu) = (to_u32(lo, "dilation")?, to_u32(hi, "dilation")?);
    let marginu = to_u32(plan.margin, "margin")?;
    let smu = to_u32(sm, "smoothing_size")?;
    let nbinsu = to_u32(nbins, "bins")?;
    let itu = to_u32(p.max_iterations.min(u32::MAX as usize), "max_iterations")?;
    let pu = to_u32(plane, "frame size")?;

    // device bytes per frame: input, raw, two work images, bandpass, integer image,
    // histogram, row sums
    let px_in = match kind {
        Kind::U8 => 1,
        Kind::U16 => 2,
        Kind::F32 => 4,
        Kind::F64 => R::SIZE,
    };
    let per_frame = plane * (px_in + 4 * R::SIZE + 4) + nbins * 4 + 4 * h * R::SIZE;
    let n_frames = src.len();
    let chunk = (cfg.max_device_bytes / per_frame.max(1))
        .clamp(1, n_frames.max(1))
        .min((u32::MAX as usize / plane).max(1))
        .min(65_535);
    let (lx, ly) = local_xy(e);
    let pwg = prep_wg();

    let mut cap = 1024usize;
    let mut cand_buf = e.alloc(cap * 4)?;
    let mut f0 = 0usize;
    while f0 < n_frames {
        let nb = chunk.min(n_frames - f0);
        let nbu = to_u32(nb, "batch")?;
        let g3 = [round_up_to(w, lx), round_up_to(h, ly), nb];
        let l3 = [lx, ly, 1];
        let gp = [round_up_to(plane, pwg), nb];
        let lp = [pwg, 1];
        let lines = |n: usize| [round_up_to(n, LINE_WG), nb];
        let l2 = [LINE_WG, 1];
        let gf = [round_up_to(nb, LINE_WG)];
        let lf = [LINE_WG];

        let t = std::time::Instant::now();
        // host frames: this sub-batch uploaded as stored; a resident movie: read in place from
        // its frame f0
        let (uploaded, first) = match &src {
            Src::Host(run) => (
                Some(e.upload(&pack::<R>(&run[f0..f0 + nb], kind, plane))?),
                0,
            ),
            Src::Device { .. } => (None, to_u32(f0, "frame")?),
        };
        let input = match (&uploaded, &src) {
            (Some(b), _) => b,
            (None, Src::Device { buf, .. }) => *buf,
            (None, Src::Host(_)) => unreachable!("host frames are uploaded above"),
        };
        up_s += t.elapsed().as_secs_f64();
        let img_bytes = nb * plane * R::SIZE;
        let raw = e.alloc(img_bytes)?;
        launch(
            kind.load_entry(),
            &gp,
            &lp,
            &[
                KernelArg::Buf(input),
                KernelArg::Buf(&raw),
                KernelArg::U32(pu),
                KernelArg::U32(nbu),
                KernelArg::U32(u32::from(p.invert)),
                KernelArg::U32(first),
            ],
        )?;
        drop(uploaded);
        // work images: t1 (lowpass y pass, column boxcar, then the row dilation), bp (the
        // bandpass, then the row distances of the noise)
        let t1 = e.alloc(img_bytes)?;
        let bp = e.alloc(img_bytes)?;
        let rowmax = e.alloc(nb * h * R::SIZE)?;
        let low = if let (true, Some(tb)) = (p.preprocess, &taps_buf) {
            let low = e.alloc(img_bytes)?;
            let tr = to_u32(taps.as_ref().map_or(0, |t| t.len() - 1), "lowpass radius")?;
            for (entry, src, dst) in [
                ("locate_lowpass_y", &raw, &t1),
                ("locate_lowpass_x", &t1, &low),
            ] {
                launch(
                    entry,
                    &g3,
                    &l3,
                    &[
                        KernelArg::Buf(src),
                        KernelArg::Buf(dst),
                        KernelArg::Buf(tb),
                        KernelArg::U32(tr),
                        KernelArg::U32(hu),
                        KernelArg::U32(wu),
                        KernelArg::U32(nbu),
                    ],
                )?;
            }
            Some(low)
        } else {
            None
        };
        let low_ref = low.as_ref().unwrap_or(&raw);
        let bg_src = if p.preprocess && mode == 2 {
            launch(
                "locate_box_int_y",
                &g3,
                &l3,
                &[
                    KernelArg::Buf(&raw),
                    KernelArg::Buf(&t1),
                    KernelArg::U32(hu),
                    KernelArg::U32(wu),
                    KernelArg::U32(nbu),
                    KernelArg::U32(smu),
                ],
            )?;
            &t1
        } else if p.preprocess && mode != 3 {
            launch(
                "locate_box_cols",
                &lines(w),
                &l2,
                &[
                    KernelArg::Buf(&raw),
                    KernelArg::Buf(&t1),
                    KernelArg::U32(hu),
                    KernelArg::U32(wu),
                    KernelArg::U32(nbu),
                    KernelArg::U32(smu),
                    KernelArg::U32(mode),
                ],
            )?;
            &t1
        } else {
            &raw
        };
        launch(
            "locate_box_rows",
            &lines(h),
            &l2,
            &[
                KernelArg::Buf(bg_src),
                KernelArg::Buf(low_ref),
                KernelArg::Buf(&bp),
                KernelArg::Buf(&rowmax),
                KernelArg::Buf(&prm),
                KernelArg::U32(hu),
                KernelArg::U32(wu),
                KernelArg::U32(nbu),
                KernelArg::U32(smu),
                KernelArg::U32(mode),
                KernelArg::U32(u32::from(p.preprocess)),
            ],
        )?;
        drop(low);
        let scale = e.alloc(nb * R::SIZE)?;
        launch(
            "locate_scale",
            &gf,
            &lf,
            &[
                KernelArg::Buf(&rowmax),
                KernelArg::Buf(&scale),
                KernelArg::Buf(&prm),
                KernelArg::U32(hu),
                KernelArg::U32(nbu),
                KernelArg::U32(identity),
            ],
        )?;
        let img = e.alloc(nb * plane * 4)?;
        let hist = e.zeroed(nb * nbins * 4)?;
        launch(
            "locate_rescale",
            &gp,
            &lp,
            &[
                KernelArg::Buf(&bp),
                KernelArg::Buf(&scale),
                KernelArg::Buf(&prm),
                KernelArg::Buf(&img),
                KernelArg::Buf(&hist),
                KernelArg::U32(pu),
                KernelArg::U32(nbu),
                KernelArg::U32(nbinsu),
                KernelArg::U32(identity),
            ],
        )?;
        let vmin = e.alloc(nb * 4)?;
        launch(
            "locate_percentile",
            &gf,
            &lf,
            &[
                KernelArg::Buf(&hist),
                KernelArg::Buf(&prm),
                KernelArg::Buf(&vmin),
                KernelArg::U32(nbinsu),
                KernelArg::U32(nbu),
            ],
        )?;
        drop(hist);
        let dil = &t1;
        launch(
            "locate_dilate_x",
            &g3,
            &l3,
            &[
                KernelArg::Buf(&img),
                KernelArg::Buf(dil),
                KernelArg::U32(lou),
                KernelArg::U32(hiu),
                KernelArg::U32(hu),
                KernelArg::U32(wu),
                KernelArg::U32(nbu),
            ],
        )?;
        let n_cand = loop {
            let counter = e.zeroed(4)?;
            launch(
                "locate_maxima",
                &g3,
                &l3,
                &[
                    KernelArg::Buf(&img),
                    KernelArg::Buf(dil),
                    KernelArg::Buf(&vmin),
                    KernelArg::U32(lou),
                    KernelArg::U32(hiu),
                    KernelArg::U32(marginu),
                    KernelArg::U32(hu),
                    KernelArg::U32(wu),
                    KernelArg::U32(nbu),
                    KernelArg::Buf(&counter),
                    KernelArg::Buf(&cand_buf),
                    KernelArg::U32(to_u32(cap, "candidates")?),
                ],
            )?;
            let t = std::time::Instant::now();
            let c = e.read(&counter, 4)?;
            read_s += t.elapsed().as_secs_f64();
            let n = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            let n = usize::try_from(n).map_err(|_| {
                BridgeError::backend("locate", None, "candidate counter overflowed")
            })?;
            if n <= cap {
                break n;
            }
            // the kernel counts in `int`: a capacity past 2^30 would wrap its bound
            if n > 1 << 30 {
                return Err(BridgeError::InvalidInput(format!(
                    "locate found {n} candidate maxima in one batch (more than 2^30): raise \
                     --separation or use smaller batches"
                )));
            }
            cap = n.next_power_of_two();
            cand_buf = e.alloc(cap * 4)?;
        };
        let mut refined: Vec<f64> = Vec::new();
        let mut cand: Vec<u32> = Vec::new();
        if n_cand > 0 {
            let res = e.alloc(n_cand * 7 * R::SIZE)?;
            launch(
                "locate_refine",
                &[round_up_to(n_cand, LINE_WG)],
                &[LINE_WG],
                &[
                    KernelArg::Buf(&img),
                    KernelArg::Buf(&raw),
                    KernelArg::Buf(&cand_buf),
                    KernelArg::Buf(&mask_buf),
                    KernelArg::Buf(&r2_buf),
                    KernelArg::Buf(&c2_buf),
                    KernelArg::Buf(&s2_buf),
                    KernelArg::Buf(&res),
                    KernelArg::U32(to_u32(mk.len(), "mask size")?),
                    KernelArg::U32(ru),
                    KernelArg::U32(hu),
                    KernelArg::U32(wu),
                    KernelArg::U32(to_u32(n_cand, "candidates")?),
                    KernelArg::U32(itu),
                ],
            )?;
            let t = std::time::Instant::now();
            let cb = e.read(&cand_buf, n_cand * 4)?;
            refined = decode::<R>(&e.read(&res, n_cand * 7 * R::SIZE)?);
            read_s += t.elapsed().as_secs_f64();
            cand = cb
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
        }
        // background noise (only needed when a frame has a feature)
        let stats: Option<Vec<f64>> = if p.characterize && n_cand > 0 {
            let dist = &bp;
            launch(
                "locate_row_dist",
                &g3,
                &l3,
                &[
                    KernelArg::Buf(&img),
                    KernelArg::Buf(dist),
                    KernelArg::U32(ru),
                    KernelArg::U32(hu),
                    KernelArg::U32(wu),
                    KernelArg::U32(nbu),
                ],
            )?;
            let rows = e.alloc(nb * h * 3 * R::SIZE)?;
            let stats = e.alloc(nb * 4 * R::SIZE)?;
            for pass in 0..2u32 {
                launch(
                    "locate_noise_rows",
                    &lines(h),
                    &l2,
                    &[
                        KernelArg::Buf(dist),
                        KernelArg::Buf(&hw_buf),
                        KernelArg::Buf(&raw),
                        KernelArg::Buf(&stats),
                        KernelArg::Buf(&rows),
                        KernelArg::Buf(&img),
                        KernelArg::U32(ru),
                        KernelArg::U32(hu),
                        KernelArg::U32(wu),
                        KernelArg::U32(nbu),
                        KernelArg::U32(pass),
                    ],
                )?;
                launch(
                    "locate_noise_frame",
                    &gf,
                    &lf,
                    &[
                        KernelArg::Buf(&rows),
                        KernelArg::Buf(&stats),
                        KernelArg::U32(hu),
                        KernelArg::U32(nbu),
                        KernelArg::U32(pass),
                    ],
                )?;
            }
            let t = std::time::Instant::now();
            let s = decode::<R>(&e.read(&stats, nb * 4 * R::SIZE)?);
            read_s += t.elapsed().as_secs_f64();
            Some(s)
        } else {
            None
        };
        let t = std::time::Instant::now();
        let scales = decode::<R>(&e.read(&scale, nb * R::SIZE)?);
        read_s += t.elapsed().as_secs_f64();

        // host: raster order, duplicates, filters and ep, per frame as the CPU does it
        let t = std::time::Instant::now();
        let mut per: Vec<Vec<(u32, [f64; 7])>> = vec![Vec::new(); nb];
        for (k, &c) in cand.iter().enumerate() {
            let f = c as usize / plane;
            let mut v = [0.0f64; 7];
            v.copy_from_slice(&refined[7 * k..7 * k + 7]);
            if let Some(list) = per.get_mut(f) {
                list.push((c, v));
            }
        }
        let done: Vec<Vec<Feature>> = per
            .into_par_iter()
            .enumerate()
            .map(|(f, mut list)| {
                list.sort_unstable_by_key(|&(c, _)| c);
                let feats = remove_duplicates(list.into_iter().map(|(_, v)| v).collect(), plan.sep);
                let noise = stats.as_ref().map(|s| {
                    let (n, mean, sq, sum) = (s[4 * f], s[4 * f + 1], s[4 * f + 2], s[4 * f + 3]);
                    if n == 0.0 {
                        (f64::NAN, f64::NAN)
                    } else if n == 1.0 {
                        (sum, f64::NAN)
                    } else {
                        (mean, (sq / n).sqrt())
                    }
                });
                finish(&feats, scales[f], noise, p, r, &mk)
            })
            .collect();
        host_s += t.elapsed().as_secs_f64();
        out.features.extend(done);
        f0 += nb;
        if let Src::Device { progress, .. } = &mut src {
            progress(f0);
        }
    }
    out.kernel_s += kernel_s;
    trace(|| {
        let kernels: Vec<String> = per_kernel
            .iter()
            .map(|(n, t)| format!("{} {:.4}", n.trim_start_matches("locate_"), t))
            .collect();
        format!(
            "locate: {} frames {h}x{w}: total {:.3} s = upload {up_s:.3} + kernels {kernel_s:.3} \
             ({}) + reads {read_s:.3} + host {host_s:.3} + other",
            n_frames,
            t_all.elapsed().as_secs_f64(),
            kernels.join(", ")
        )
    });
    Ok(())
}
