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

use bridge_core::exec::{Buffer, BufferRef, DeviceElement, Executor, TypedExecutor};
use bridge_core::{Array, DType, Result};
use rayon::prelude::*;

use super::super::FrameView;
use super::super::locate::{Feature, LocateParams, Plan};
use super::super::real::{give_buf, take_buf};
use super::pipeline::Turn;
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
}

/// `locate` on every frame (one result per frame, same order). The arithmetic is float64 when
/// the device has doubles and the precision is not [`crate::Precision::F32`] (the CPU's features bit for bit),
/// float32 otherwise.
pub(super) fn locate_frames<E: Executor>(
    e: &E,
    frames: &[FrameView<'_>],
    p: &LocateParams,
    cfg: &GpuDetectConfig,
    turn: &Turn,
) -> Result<LocateOut> {
    p.validate()?;
    for (i, f) in frames.iter().enumerate() {
        f.validate().map_err(|e| e.of_frame(i, frames.len()))?;
    }
    let plan = Plan::new(p);
    let f64_dev = cfg.precision.doubles(e.has_fp64(), e.device())?;
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
            run_typed::<E, f64>(e, Src::Host(run), kind, h, w, p, &plan, cfg, &mut out, turn)?;
        } else {
            run_typed::<E, f32>(e, Src::Host(run), kind, h, w, p, &plan, cfg, &mut out, turn)?;
        }
        i = j;
    }
    Ok(out)
}

/// The pixel type of a movie of `dtype` already on the device that `locate` with `cfg` reads
/// in place: `u8`, `u16`, `f32`, and `f64` where the device computes in float64 (a float32
/// pipeline reads float64 frames converted on the host).
fn resident_kind<E: Executor>(e: &E, dtype: DType, cfg: &GpuDetectConfig) -> Option<Kind> {
    match dtype {
        DType::U8 => Some(Kind::U8),
        DType::U16 => Some(Kind::U16),
        DType::F32 => Some(Kind::F32),
        DType::F64 if matches!(cfg.precision.doubles(e.has_fp64(), e.device()), Ok(true)) => {
            Some(Kind::F64)
        }
        _ => None,
    }
}

/// Whether `locate` with `cfg` reads a movie of `dtype` already on the device in place
/// ([`resident_kind`]).
pub(super) fn reads_in_place<E: Executor>(e: &E, dtype: DType, cfg: &GpuDetectConfig) -> bool {
    resident_kind(e, dtype, cfg).is_some()
}

/// The pixels of `movie` as a typed buffer read in place, when it lives on `e`'s device in
/// this backend's memory and holds a pixel type `locate` with `cfg` reads in place
/// ([`resident_kind`]); `None` otherwise.
pub(super) fn resident_pixels<'a, E: Executor>(
    e: &E,
    movie: &'a Array,
    cfg: &GpuDetectConfig,
) -> Option<Pixels<'a, E, f64>> {
    match resident_kind(e, movie.dtype(), cfg)? {
        Kind::U8 => e.buffer_ref::<u8>(movie).map(Pixels::U8),
        Kind::U16 => e.buffer_ref::<u16>(movie).map(Pixels::U16),
        Kind::F32 => e.buffer_ref::<f32>(movie).map(Pixels::F32),
        Kind::F64 => e.buffer_ref::<f64>(movie).map(Pixels::F64),
    }
}

/// `locate` on a movie that already lives on the executor's device: `movie` holds `t` frames
/// of `h × w` pixels, C order, read in place by the load kernel (no upload, no copy); the rest
/// is [`locate_frames`]'s pipeline. `progress(frames_done)` is called as sub-batches complete.
pub(super) fn locate_resident<E: Executor>(
    e: &E,
    movie: Pixels<'_, E, f64>,
    (t, h, w): (usize, usize, usize),
    p: &LocateParams,
    cfg: &GpuDetectConfig,
    turn: &Turn,
    progress: &mut dyn FnMut(usize),
) -> Result<LocateOut> {
    p.validate()?;
    let plan = Plan::new(p);
    let kind = movie.kind();
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
        movie,
        frames: t,
        progress,
    };
    // a resident f64 movie is only accepted where the device computes in float64
    if cfg.precision.doubles(e.has_fp64(), e.device())? {
        run_typed::<E, f64>(e, src, kind, h, w, p, &plan, cfg, &mut out, turn)?;
    } else {
        run_typed::<E, f32>(e, src, kind, h, w, p, &plan, cfg, &mut out, turn)?;
    }
    Ok(out)
}

/// Frames on the device as the load kernels read them, by pixel type: `F` is the element
/// type of float64 frames (`f64` for a resident movie; the device type for host frames,
/// which a device without doubles receives narrowed to float32).
pub(super) enum Pixels<'a, E: Executor, F: DeviceElement> {
    /// `u8` pixels (`locate_load_u8`).
    U8(BufferRef<'a, E, u8>),
    /// `u16` pixels (`locate_load_u16`).
    U16(BufferRef<'a, E, u16>),
    /// `f32` pixels (`locate_load_f32`).
    F32(BufferRef<'a, E, f32>),
    /// float64 pixels stored as `F` (`locate_load_f64`).
    F64(BufferRef<'a, E, F>),
}

impl<E: Executor, F: DeviceElement> Pixels<'_, E, F> {
    /// The pixel type.
    fn kind(&self) -> Kind {
        match self {
            Pixels::U8(_) => Kind::U8,
            Pixels::U16(_) => Kind::U16,
            Pixels::F32(_) => Kind::F32,
            Pixels::F64(_) => Kind::F64,
        }
    }
}

/// Host frames of one sub-batch uploaded as stored ([`upload_frames`]); float64 frames in the
/// device type `R`.
enum Uploaded<E: Executor, R: DevReal> {
    /// `u8` pixels.
    U8(Buffer<E, u8>),
    /// `u16` pixels.
    U16(Buffer<E, u16>),
    /// `f32` pixels.
    F32(Buffer<E, f32>),
    /// float64 pixels in the device type.
    F64(Buffer<E, R>),
}

impl<E: Executor, R: DevReal> Uploaded<E, R> {
    /// The frames as the load kernels read them.
    fn view(&self) -> Pixels<'_, E, R> {
        match self {
            Uploaded::U8(b) => Pixels::U8(b.view()),
            Uploaded::U16(b) => Pixels::U16(b.view()),
            Uploaded::F32(b) => Pixels::F32(b.view()),
            Uploaded::F64(b) => Pixels::F64(b.view()),
        }
    }
}

/// Where the frames of a run come from.
enum Src<'a, 'f, E: Executor> {
    /// Host frames, packed and uploaded per sub-batch.
    Host(&'a [FrameView<'f>]),
    /// A movie of `frames` frames already on the device, read in place.
    Device {
        movie: Pixels<'a, E, f64>,
        frames: usize,
        progress: &'a mut dyn FnMut(usize),
    },
}

impl<E: Executor> Src<'_, '_, E> {
    fn len(&self) -> usize {
        match self {
            Src::Host(run) => run.len(),
            Src::Device { frames, .. } => *frames,
        }
    }
}

/// `frames` (all of pixel type `kind`, `plane` pixels each) uploaded in one transfer as the
/// load kernel reads them: as stored, float64 frames in the device type `R`; packed in
/// parallel straight into the upload's memory (`Executor::upload_filled`: page-locked on CUDA,
/// so the frames cross in one DMA; elsewhere a pooled buffer).
fn upload_frames<E: Executor, R: DevReal>(
    e: &E,
    frames: &[FrameView<'_>],
    kind: Kind,
    plane: usize,
) -> Result<Uploaded<E, R>> {
    Ok(match kind {
        Kind::U8 => Uploaded::U8(upload_packed(e, frames, plane, |f, d| {
            if let FrameView::U8(a) = f {
                d.iter_mut().zip(a.iter()).for_each(|(d, &v)| *d = v);
            }
        })?),
        Kind::U16 => Uploaded::U16(upload_packed(e, frames, plane, |f, d| {
            if let FrameView::U16(a) = f {
                d.iter_mut().zip(a.iter()).for_each(|(d, &v)| *d = v);
            }
        })?),
        Kind::F32 => Uploaded::F32(upload_packed(e, frames, plane, |f, d| {
            if let FrameView::F32(a) = f {
                d.iter_mut().zip(a.iter()).for_each(|(d, &v)| *d = v);
            }
        })?),
        Kind::F64 => Uploaded::F64(upload_packed(e, frames, plane, |f, d: &mut [R]| {
            if let FrameView::F64(a) = f {
                d.iter_mut()
                    .zip(a.iter())
                    .for_each(|(d, &v)| *d = R::from_f64(v));
            }
        })?),
    })
}

/// A buffer of the pixels of `frames`, `plane` per frame, frame after frame, each frame written
/// by `fill` (in parallel) into the upload's memory (where that is not the executor's own, a
/// pooled buffer of this thread's).
fn upload_packed<E: Executor, T: DeviceElement>(
    e: &E,
    frames: &[FrameView<'_>],
    plane: usize,
    fill: impl Fn(&FrameView<'_>, &mut [T]) + Sync,
) -> Result<Buffer<E, T>> {
    let len = frames.len() * plane;
    let mut scratch = take_buf::<u64>((len * std::mem::size_of::<T>()).div_ceil(8));
    let out = e.upload_filled_elems(len, &mut scratch, |px: &mut [T]| {
        px.par_chunks_mut(plane.max(1))
            .zip(frames.par_iter())
            .for_each(|(dst, f)| fill(f, dst));
        Ok(())
    });
    give_buf(scratch);
    out
}

/// `v` in the device type `R`.
fn reals<R: DevReal>(v: &[f64]) -> Vec<R> {
    v.iter().map(|&x| R::from_f64(x)).collect()
}

/// Values of the device type `R`, as `f64`.
fn widen<R: DevReal>(v: Vec<R>) -> Vec<f64> {
    v.into_iter().map(crate::detect::Real::to_f64).collect()
}
