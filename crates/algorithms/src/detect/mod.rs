//! Particle detection: scikit-image `blob_log`, trackpy `locate`, sub-pixel refinement and the
//! movie-level [`LogDetector`].
//!
//! The normative behaviour is `shared/docs/detection.md`; the golden data is
//! `fixtures/detect/` (in this repository). The algorithms are implemented on the CPU (ndarray +
//! rayon) and, for `blob_log` and `locate`, on devices by `gpu::GpuDetect` (one portable
//! kernel source, [`kernels`], for OpenCL and CUDA); [`backend_for`] picks the back end of a
//! device.
//!
//! **On an array, where it lives:** [`blob_log()`] and [`locate()`] take a movie as a
//! [`bridge_core::Array`] and run where it lives (the CPU for host memory, its device for a
//! movie on `opencl:N` or `cuda:N`, read in place), moving nothing; [`blob_log_array`] and
//! [`locate_array`] convert through a registry first when asked for another device. One frame
//! at a time: [`blob_log_frame`] and [`locate::locate`]. The device-independent pieces (parameter validation, the sigma list, candidate
//! ordering, overlap pruning, duplicate removal) are shared by both.

pub mod backend;
pub mod blob_log;
pub mod detector;
pub mod dispatch;
pub mod filters;
#[cfg(any(feature = "opencl", feature = "cuda"))]
pub mod gpu;
mod in_flight;
pub mod input;
pub mod kernels;
pub mod locate;
pub mod multi;
pub mod real;
pub mod refine;
pub mod synth;

pub use backend::{CpuBackend, DetectBackend};
pub use blob_log::{Blob, BlobLogParams, Precision, Prescale, blob_log_frame};
pub use detector::{LogDetector, Particle};
pub use dispatch::backend_for;
#[cfg(feature = "cuda")]
pub use gpu::CudaDetect;
#[cfg(any(feature = "opencl", feature = "cuda"))]
pub use gpu::GpuDetect;
#[cfg(feature = "opencl")]
pub use gpu::OpenClDetect;
pub use input::{
    blob_log, blob_log_array, blob_log_in_place, locate, locate_array, locate_in_place,
};
pub use locate::{Empty, Feature, LocateParams, locate_batches, locate_movie, why_empty};
pub use multi::{
    DetectMember, DeviceShare, FramePeer, FrameServer, LocateOutcome, MultiOutcome, MultiPolicy,
    blob_log_frames_multi, locate_frames_multi, locate_movie_members, locate_movie_multi,
    locate_movie_on, serve_locate,
};
pub use real::Real;
pub use refine::{RefineParams, Refined, refine_blobs};

use bridge_core::{BridgeError, Result};
use ndarray::{Array3, ArrayView2, Axis};

/// One 2-D frame in one of the pixel types the detectors accept.
#[derive(Debug, Clone, Copy)]
pub enum FrameView<'a> {
    /// Unsigned 8-bit pixels.
    U8(ArrayView2<'a, u8>),
    /// Unsigned 16-bit pixels.
    U16(ArrayView2<'a, u16>),
    /// 32-bit float pixels.
    F32(ArrayView2<'a, f32>),
    /// 64-bit float pixels.
    F64(ArrayView2<'a, f64>),
}

impl FrameView<'_> {
    /// `(rows, cols)`.
    pub fn dim(&self) -> (usize, usize) {
        match self {
            FrameView::U8(a) => a.dim(),
            FrameView::U16(a) => a.dim(),
            FrameView::F32(a) => a.dim(),
            FrameView::F64(a) => a.dim(),
        }
    }

    /// Short name of the pixel type (`u8`, `u16`, `f32`, `f64`).
    pub fn dtype_name(&self) -> &'static str {
        match self {
            FrameView::U8(_) => "u8",
            FrameView::U16(_) => "u16",
            FrameView::F32(_) => "f32",
            FrameView::F64(_) => "f64",
        }
    }

    /// Rejects empty frames and frames with non-finite pixels (NaN, +Inf or −Inf): one infinite
    /// pixel would saturate the prescaling and the LoG responses of its neighbourhood, changing
    /// detections far from it, so it is an error rather than a silent change.
    pub fn validate(&self) -> Result<()> {
        let (h, w) = self.dim();
        if h == 0 || w == 0 {
            return Err(BridgeError::InvalidInput(
                format!("empty frame of shape {h}x{w}").into(),
            ));
        }
        let (nan, inf) = match self {
            FrameView::F32(a) => a.iter().fold((0, 0), |(n, i), v| {
                (
                    n + usize::from(v.is_nan()),
                    i + usize::from(v.is_infinite()),
                )
            }),
            FrameView::F64(a) => a.iter().fold((0, 0), |(n, i), v| {
                (
                    n + usize::from(v.is_nan()),
                    i + usize::from(v.is_infinite()),
                )
            }),
            _ => (0, 0),
        };
        if nan == h * w {
            return Err(BridgeError::InvalidInput("frame is all NaN".into()));
        }
        if nan + inf > 0 {
            return Err(BridgeError::InvalidInput(format!(
                "frame contains {nan} NaN and {inf} infinite pixel(s); replace them (e.g. by the \
                 frame median) before detection"
            ).into()));
        }
        Ok(())
    }

    /// Pixel values as f64, row-major (a copy).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self {
            FrameView::U8(a) => a.iter().map(|&v| f64::from(v)).collect(),
            FrameView::U16(a) => a.iter().map(|&v| f64::from(v)).collect(),
            FrameView::F32(a) => a.iter().map(|&v| f64::from(v)).collect(),
            FrameView::F64(a) => a.iter().copied().collect(),
        }
    }
}

/// A movie `[T][H][W]` in one of the accepted pixel types.
#[derive(Debug, Clone)]
pub enum Movie {
    /// Unsigned 8-bit pixels.
    U8(Array3<u8>),
    /// Unsigned 16-bit pixels.
    U16(Array3<u16>),
    /// 32-bit float pixels.
    F32(Array3<f32>),
    /// 64-bit float pixels.
    F64(Array3<f64>),
}

impl Movie {
    /// `(frames, rows, cols)`.
    pub fn dim(&self) -> (usize, usize, usize) {
        match self {
            Movie::U8(a) => a.dim(),
            Movie::U16(a) => a.dim(),
            Movie::F32(a) => a.dim(),
            Movie::F64(a) => a.dim(),
        }
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.dim().0
    }

    /// True when the movie has no frame.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Short name of the pixel type.
    pub fn dtype_name(&self) -> &'static str {
        match self {
            Movie::U8(_) => "u8",
            Movie::U16(_) => "u16",
            Movie::F32(_) => "f32",
            Movie::F64(_) => "f64",
        }
    }

    /// A view of frame `t`. Panics never: returns an error when `t` is out of range.
    pub fn frame(&self, t: usize) -> Result<FrameView<'_>> {
        if t >= self.len() {
            return Err(BridgeError::invalid_argument(
                "frame",
                format!(
                    "index {t} out of range for a movie of {} frames",
                    self.len()
                ),
            ));
        }
        Ok(match self {
            Movie::U8(a) => FrameView::U8(a.index_axis(Axis(0), t)),
            Movie::U16(a) => FrameView::U16(a.index_axis(Axis(0), t)),
            Movie::F32(a) => FrameView::F32(a.index_axis(Axis(0), t)),
            Movie::F64(a) => FrameView::F64(a.index_axis(Axis(0), t)),
        })
    }

    /// Views of every frame, in order.
    pub fn frames(&self) -> Vec<FrameView<'_>> {
        match self {
            Movie::U8(a) => a.outer_iter().map(FrameView::U8).collect(),
            Movie::U16(a) => a.outer_iter().map(FrameView::U16).collect(),
            Movie::F32(a) => a.outer_iter().map(FrameView::F32).collect(),
            Movie::F64(a) => a.outer_iter().map(FrameView::F64).collect(),
        }
    }
}

/// When `ARRAYBRIDGE_TRACE` is `1`/`true`/`yes` (read once), print `msg()` on stderr as a
/// `[trace]` line: the per-stage time breakdown of the detection pipelines. `msg` is only
/// evaluated when tracing.
#[cfg(any(feature = "opencl", feature = "cuda"))]
pub(crate) fn trace(msg: impl FnOnce() -> String) {
    if trace_enabled() {
        eprintln!("[trace] {}", msg());
    }
}

/// [`trace`] for a stage that ran from `start` to `end`: the line begins with both instants,
/// in seconds since the process's first traced stage, and the name of the thread that ran
/// it (`detect-0`, `detect-1`: the workers of [`LogDetector::detect_movie_with`]), so the
/// stages of consecutive batches show where they overlap.
pub(crate) fn trace_span(
    start: std::time::Instant,
    end: std::time::Instant,
    msg: impl FnOnce() -> String,
) {
    if !trace_enabled() {
        return;
    }
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(|| start);
    let at = |t: std::time::Instant| t.saturating_duration_since(epoch).as_secs_f64();
    let me = std::thread::current();
    eprintln!(
        "[trace] +{:.4}..{:.4} s [{}] {}",
        at(start),
        at(end),
        me.name().unwrap_or("main"),
        msg()
    );
}

/// Whether `ARRAYBRIDGE_TRACE` asks for the breakdown (a [`bridge_core::tuning`] knob).
pub(crate) fn trace_enabled() -> bool {
    matches!(
        bridge_core::tuning::choice("ARRAYBRIDGE_TRACE").as_str(),
        "1" | "true" | "yes"
    )
}
