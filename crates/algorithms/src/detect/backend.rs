//! The detection back-end trait and its CPU implementation.
//!
//! A [`DetectBackend`] runs detection on a batch of frames. [`CpuBackend`] is the ndarray + rayon
//! implementation (frames of a batch in parallel, scales of a frame in parallel); the device
//! implementation is [`super::gpu::GpuDetect`], and [`super::backend_for`] maps a [`Device`] to
//! one of them.
//!
//! Slotting in a GPU back end: implement [`DetectBackend`] (upload the batch once, raw u16 if
//! possible, and apply the prescale on the device), build the cube with the kernels of
//! [`crate::detect::filters::LogKernels`] (same radius rule and taps, see
//! [`crate::detect::filters::gaussian_kernel1d`]) and the σ list of
//! [`crate::detect::blob_log::sigma_list`]; then either download the cube and call
//! [`crate::detect::blob_log::peaks_and_prune`], or emit the 3×3×3 maxima with their responses,
//! sort by (−response, raster index) and prune on the host with
//! [`crate::detect::blob_log::prune_blobs`] (ascending (i, j) pair order). Report kernel-only
//! time through [`DetectBackend::last_kernel_seconds`]; add the arm to [`super::backend_for`].

use bridge_core::{Device, Result};
use rayon::prelude::*;

use super::FrameView;
use super::blob_log::{Blob, BlobLogParams, CpuKnobs, Precision, blob_log_frame_with};
use super::locate::{Feature, LocateParams, locate};

/// Detection on one device, a batch of frames at a time.
pub trait DetectBackend: Send + Sync {
    /// The device it runs on.
    fn device(&self) -> Device;

    /// `blob_log` on every frame of the batch (one result per frame, same order).
    fn blob_log_batch(&self, frames: &[FrameView<'_>], p: &BlobLogParams)
    -> Result<Vec<Vec<Blob>>>;

    /// `locate` on every frame of the batch.
    fn locate_batch(&self, frames: &[FrameView<'_>], p: &LocateParams)
    -> Result<Vec<Vec<Feature>>>;

    /// `blob_log` with a chosen accumulation. Back ends that have one precision only (f32 GPU
    /// kernels) may ignore `acc`; the default does.
    fn blob_log_batch_acc(
        &self,
        frames: &[FrameView<'_>],
        p: &BlobLogParams,
        acc: Precision,
    ) -> Result<Vec<Vec<Blob>>> {
        let _ = acc;
        self.blob_log_batch(frames, p)
    }

    /// Host bytes that one frame in flight of `blob_log` (`num_sigma` scales, an `h × w`
    /// frame) needs on this back end, at most; [`crate::detect::LogDetector`] checks a batch
    /// against the memory budget with it. The default, [`scale_space_host_bytes`], counts the
    /// whole scale space in host memory: right where the device's memory is the host's (PoCL),
    /// an upper bound for a GPU.
    fn blob_log_host_bytes(&self, h: usize, w: usize, num_sigma: usize) -> u64 {
        scale_space_host_bytes(h, w, num_sigma)
    }

    /// Device time spent in kernels by the last batch call, when the back end measures it
    /// separately from transfers (GPU back ends); `None` on the CPU, where the whole call is
    /// compute.
    fn last_kernel_seconds(&self) -> Option<f64> {
        None
    }

    /// Device time spent in kernels by every batch call so far (a running total: difference
    /// it around a run), where [`Self::last_kernel_seconds`] is measured; unlike the last
    /// call's, it stays right when several threads call the back end at once
    /// ([`Self::batches_in_flight`]). `None` by default.
    fn kernel_seconds_total(&self) -> Option<f64> {
        None
    }

    /// How many batches [`crate::detect::LogDetector::detect_movie_with`] gives this back end
    /// at once, from as many threads: 1 by default (one after the other). A device back end
    /// that takes 2 uploads the next batch while the current one computes, and the host
    /// finishes the previous batch's particles meanwhile.
    fn batches_in_flight(&self) -> usize {
        1
    }

    /// How many times the back end halved a batch that ran out of memory since this was last
    /// asked (a device back end splits its own batches; the CPU never does), for the
    /// several-device queue's accounting ([`super::DeviceShare::splits`]).
    fn take_splits(&self) -> usize {
        0
    }
}

/// Host bytes of a frame's whole f64 scale space and a few f64 work images:
/// `(num_sigma + 4)·h·w·8` (saturating).
pub fn scale_space_host_bytes(h: usize, w: usize, num_sigma: usize) -> u64 {
    bridge_core::host::checked_product(&[
        (num_sigma as u64).saturating_add(4),
        h as u64,
        w as u64,
        8,
    ])
    .unwrap_or(u64::MAX)
}

/// The CPU back end (ndarray + rayon), with its [`CpuKnobs`].
///
/// `CpuBackend::default()` takes the process's knobs ([`CpuKnobs::process`], as
/// [`super::GpuDetect`] takes the process's tuning); [`CpuBackend::with_knobs`] sets them by
/// value. No knob changes a result.
#[derive(Debug, Clone, Copy)]
pub struct CpuBackend {
    knobs: CpuKnobs,
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend::with_knobs(CpuKnobs::process())
    }
}

impl CpuBackend {
    /// The CPU back end with these knobs.
    pub fn with_knobs(knobs: CpuKnobs) -> Self {
        CpuBackend { knobs }
    }

    /// Its knobs.
    pub fn knobs(&self) -> &CpuKnobs {
        &self.knobs
    }
}

impl DetectBackend for CpuBackend {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn blob_log_batch(
        &self,
        frames: &[FrameView<'_>],
        p: &BlobLogParams,
    ) -> Result<Vec<Vec<Blob>>> {
        p.validate()?;
        frames
            .par_iter()
            .enumerate()
            .map(|(i, f)| {
                blob_log_frame_with(*f, p, Precision::F64, &self.knobs)
                    .map_err(|e| e.of_frame(i, frames.len()))
            })
            .collect()
    }

    fn blob_log_batch_acc(
        &self,
        frames: &[FrameView<'_>],
        p: &BlobLogParams,
        acc: Precision,
    ) -> Result<Vec<Vec<Blob>>> {
        p.validate()?;
        frames
            .par_iter()
            .enumerate()
            .map(|(i, f)| {
                blob_log_frame_with(*f, p, acc, &self.knobs)
                    .map_err(|e| e.of_frame(i, frames.len()))
            })
            .collect()
    }

    fn locate_batch(
        &self,
        frames: &[FrameView<'_>],
        p: &LocateParams,
    ) -> Result<Vec<Vec<Feature>>> {
        p.validate()?;
        frames
            .par_iter()
            .enumerate()
            .map(|(i, f)| locate(*f, p).map_err(|e| e.of_frame(i, frames.len())))
            .collect()
    }

    /// The CPU never holds the scale space: the frame, its padded copy, a third image and a
    /// few rows of every scale per part.
    fn blob_log_host_bytes(&self, h: usize, w: usize, num_sigma: usize) -> u64 {
        super::blob_log::banded_host_bytes(h, w, num_sigma, self.knobs.band_rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU budgets about three f64 images and a few rows of every scale per frame, far
    /// less than the whole scale space the default counts, and never less than the frame and
    /// its padded copy it does allocate.
    #[test]
    fn the_cpu_budgets_no_scale_space() {
        for (h, w, ns) in [
            (1, 1, 1),
            (424, 640, 10),
            (2048, 2048, 14),
            (3, 100_000, 30),
        ] {
            let cpu = CpuBackend::default().blob_log_host_bytes(h, w, ns);
            let whole = scale_space_host_bytes(h, w, ns);
            let own = (h * (w + crate::detect::filters::padded_stride(w)) * 8) as u64;
            assert!(cpu >= own, "{h}x{w} {ns}: {cpu} < {own}");
            if h >= 424 {
                assert!(cpu * 3 < whole, "{h}x{w} {ns}: {cpu} vs {whole}");
            }
        }
        assert_eq!(scale_space_host_bytes(usize::MAX, 2, 3), u64::MAX);
    }
}
