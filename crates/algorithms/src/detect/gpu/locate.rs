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
//! ([`remove_duplicates`](super::super::locate::remove_duplicates),
//! [`finish`](super::super::locate::finish)).
//!
//! One run of frames ([`run_typed`]) is a pipeline of stages over the run's state
//! ([`run::Run`]):
//!
//! * **setup** ([`run::Run::new`], once per run): the parameters, the lowpass taps and the
//!   mask tables uploaded, the scalar kernel arguments checked against the device's 32-bit
//!   indices, the sub-batch size and the candidate buffer;
//! * per sub-batch ([`run::Run::batch`], the stages in [`stages`]):
//!   1. **load**: the frames uploaded as stored (or a resident movie read in place) and
//!      converted to the device type, inverted if asked;
//!   2. **lowpass**: trackpy's Gaussian lowpass, separable (with `preprocess`);
//!   3. **bandpass**: the boxcar background (columns, then rows), subtracted and clipped,
//!      with each row's maximum;
//!   4. **threshold**: the per-frame rescale factor, the integer image and its histogram, the
//!      percentile threshold;
//!   5. **maxima**: the grey dilation and the local maxima above the threshold, the candidate
//!      buffer grown until they all fit;
//!   6. **refine**: the iterated centroid and the characterisation of every candidate, read
//!      back;
//!   7. **noise**: the background mean and deviation per frame (with `characterize`, where a
//!      candidate was found), read back;
//!   8. **host finish**: the rescale factors read back; per frame raster order, duplicates,
//!      filters and `ep`, as the CPU does it;
//! * **trace**: the `ARRAYBRIDGE_TRACE` breakdown of the run.

mod run;
mod stages;

use bridge_core::Result;
use bridge_core::exec::Executor;
use rayon::prelude::*;

use super::super::FrameView;
use super::super::locate::{Feature, LocateParams, Plan};
use super::{DevReal, GpuDetectConfig};
use run::run_typed;

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

/// Little-endian bytes of `v` in the device type `R`.
fn reals<R: DevReal>(v: &[f64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * R::SIZE);
    for &x in v {
        R::from_f64(x).put(&mut out);
    }
    out
}

/// The values of little-endian bytes in the device type `R`, as `f64`.
fn decode<R: DevReal>(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(R::SIZE)
        .map(|c| crate::detect::Real::to_f64(R::get(c)))
        .collect()
}
