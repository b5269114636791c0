//! The movie-level detector of the seed ([`LogDetector`]) and its result ([`Particle`]):
//! `blob_log` on a batch of frames on any back end, then the per-particle noise estimate and the
//! optional sub-pixel refinement on the host.

use bridge_core::{BridgeError, Device, Result};
use rayon::prelude::*;

use super::FrameView;
use super::Movie;
use super::backend::DetectBackend;
use super::blob_log::{BlobLogParams, Precision, Prescale};
use super::dispatch::backend_for;
use super::refine::{RefineParams, Refined, refine_frame};
use crate::exec::DeviceHandle;

/// One detection in the seed's vocabulary (spec §4), plus the LoG response and the optional
/// refinement.
#[derive(Debug, Clone, PartialEq)]
pub struct Particle {
    /// Frame index.
    pub frame: u32,
    /// Column (integer pixel of the LoG maximum).
    pub x: f64,
    /// Row (integer pixel of the LoG maximum).
    pub y: f64,
    /// `2 · response`: an estimate of the peak amplitude in prescaled units (spec §1.4).
    pub intensity: f64,
    /// σ of the detecting scale.
    pub sigma: f64,
    /// `intensity / noise`, noise = 1.4826·MAD of the prescaled frame (an estimate; the MAD is
    /// taken on every 4th pixel).
    pub snr: f64,
    /// `(rows, cols)` of the frame.
    pub frame_size: (u32, u32),
    /// Track id once linked.
    pub id: Option<i64>,
    /// The cube value at the maximum.
    pub response: f64,
    /// Sub-pixel refinement and measures, when requested.
    pub refined: Option<Refined>,
}

/// The seed's LoG detector over a movie: [`BlobLogParams`] (one parameter type for `blob_log`
/// wherever it runs; the detector's defaults are the seed's, [`BlobLogParams::seed`]: σ from 1
/// to 3, no hidden absolute threshold, `threshold_rel` 0.2, spec §4) plus how the movie is run:
/// the batch size, the optional refinement and the CPU's accumulation.
///
/// ```
/// use algorithms::detect::{BlobLogParams, LogDetector};
/// let det = LogDetector {
///     params: BlobLogParams { max_sigma: 2.0, ..BlobLogParams::seed() },
///     batch_size: 8,
///     ..Default::default()
/// };
/// assert_eq!(det.params.threshold_rel, Some(0.2));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct LogDetector {
    /// The `blob_log` parameters.
    pub params: BlobLogParams,
    /// Frames per batch (changes no result).
    pub batch_size: usize,
    /// Run sub-pixel refinement.
    pub refine: Option<RefineParams>,
    /// The arithmetic: `Auto` (the default: exact float64 passes on the CPU, the device's
    /// default elsewhere), `F64` or `F32` (fast float32 passes), see [`Precision`].
    pub precision: Precision,
}

impl Default for LogDetector {
    fn default() -> Self {
        LogDetector {
            params: BlobLogParams::seed(),
            batch_size: 4,
            refine: None,
            precision: Precision::Auto,
        }
    }
}

impl LogDetector {
    /// Detect every frame of `movie` on `device` (`DeviceHandle::cpu()`, or an open device).
    pub fn detect_movie(&self, movie: &Movie, device: &DeviceHandle) -> Result<Vec<Particle>> {
        let backend = backend_for(device)?;
        self.detect_movie_with(movie, backend.as_ref(), |_| {})
    }

    /// Host memory of one batch on a back end not known yet: each frame in flight may hold its
    /// f64 scale space (`num_sigma` images: the cube of a device whose memory is the host's,
    /// such as PoCL's) plus a few f64 work images; a [`BridgeError::TooLarge`] naming the
    /// parameters when that does not fit (before anything is allocated). Detection checks again
    /// with what its back ends need ([`DetectBackend::blob_log_host_bytes`]): the CPU never
    /// holds the cube, only the frame, its padded copy and a few rows of every scale.
    pub fn check_memory(&self, h: usize, w: usize, frames: usize) -> Result<()> {
        let per_frame = super::backend::scale_space_host_bytes(h, w, self.params.num_sigma);
        self.check_batch_bytes(h, w, frames, per_frame)
    }

    /// [`Self::check_memory`] on `backends`: the most any of them needs per frame (none: the
    /// whole scale space, as for an unknown back end).
    pub fn check_memory_on(
        &self,
        h: usize,
        w: usize,
        frames: usize,
        backends: &[&dyn DetectBackend],
    ) -> Result<()> {
        let per_frame = backends
            .iter()
            .map(|b| b.blob_log_host_bytes(h, w, self.params.num_sigma))
            .max()
            .unwrap_or_else(|| super::backend::scale_space_host_bytes(h, w, self.params.num_sigma));
        self.check_batch_bytes(h, w, frames, per_frame)
    }

    fn check_batch_bytes(&self, h: usize, w: usize, frames: usize, per_frame: u64) -> Result<()> {
        let in_flight = self.batch_size.min(frames).max(1);
        let (kernels, scratch) = sigma_host_bytes(w, self.params.num_sigma, self.params.max_sigma);
        let threads = rayon::current_num_threads() as u64;
        bridge_core::host::check_allocation(
            per_frame
                .saturating_add(kernels)
                .saturating_mul(in_flight as u64)
                .saturating_add(scratch.saturating_mul(threads)),
            &format!(
                "blob_log with {} scales (--num-sigma) up to sigma {} (--max-sigma) on \
                 {in_flight} frame(s) of {h}x{w} at once (--batch-size)",
                self.params.num_sigma, self.params.max_sigma
            ),
            "use fewer scales, a smaller max sigma or a smaller batch",
        )
    }

    /// Detect a movie that arrives in chunks (a streaming reader, a long acquisition): each
    /// chunk is detected as [`Self::detect_movie_with`] does and its particles come out as soon
    /// as it is done, with frame numbers counted from the first frame of the first chunk.
    /// Results equal those of the whole movie in one piece; memory is bounded by one chunk.
    pub fn detect_stream<'a, I>(
        &'a self,
        chunks: I,
        backend: &'a dyn DetectBackend,
    ) -> impl Iterator<Item = Result<Vec<Particle>>> + 'a
    where
        I: IntoIterator<Item = Result<Movie>> + 'a,
    {
        bridge_core::pieces::pieces(chunks, Movie::len).map(move |piece| {
            let piece = piece?;
            let frame0 = piece.first_frame_u32()?;
            let mut ps = piece.errors(self.detect_movie_with(&piece.data, backend, |_| {}))?;
            for p in &mut ps {
                p.frame += frame0;
            }
            Ok(ps)
        })
    }

    /// Detect with an explicit back end; `progress(frames_done)` is called after each batch, in
    /// order, on the calling thread.
    ///
    /// Where the back end takes several batches at once ([`DetectBackend::batches_in_flight`]:
    /// 2 on OpenCL by default, `ARRAYBRIDGE_DETECT_IN_FLIGHT`), that many worker threads
    /// (`detect-0`, `detect-1`, …) take the batches in turn: while one batch's kernels run, the
    /// next batch is packed and uploaded and the previous one's noise, refinement and particles
    /// are computed on the host (the device runs one batch's kernels and reads at a time, in
    /// the order the workers reach it). `ARRAYBRIDGE_TRACE=1` prints when each stage ran.
    /// The particles are the same, in the same order: a frame's detections do not depend on
    /// its batch. On an error the workers stop taking batches, and the error of the first
    /// failed batch is returned.
    pub fn detect_movie_with(
        &self,
        movie: &Movie,
        backend: &dyn DetectBackend,
        progress: impl FnMut(usize),
    ) -> Result<Vec<Particle>> {
        let (p, frames) = self.prepare(movie, &[backend])?;
        // the workers take the batches in turn ([`super::in_flight::frame_batches`]); the
        // calling thread puts the results in order and reports progress
        let workers = backend.batches_in_flight().clamp(1, 4);
        super::in_flight::frame_batches(
            &frames,
            self.batch_size,
            (workers, "detect", backend.device()),
            |batch, first| self.detect_batch(batch, first, backend, &p),
            progress,
        )
    }

    /// The checked parameters and the frames of `movie`: valid `blob_log` parameters, a
    /// batch size of at least 1, at least one frame, and a batch that fits host memory on
    /// `backends` (the back ends of this process that will run it).
    pub(crate) fn prepare<'m>(
        &self,
        movie: &'m Movie,
        backends: &[&dyn DetectBackend],
    ) -> Result<(BlobLogParams, Vec<FrameView<'m>>)> {
        let p = self.params.clone();
        p.validate()?;
        if self.batch_size == 0 {
            return Err(BridgeError::invalid_argument(
                "batch_size",
                "must be at least 1",
            ));
        }
        if movie.is_empty() {
            return Err(BridgeError::InvalidInput("the movie has no frame".into()));
        }
        let frames = movie.frames();
        let (h, w) = frames[0].dim();
        self.check_memory_on(h, w, frames.len(), backends)?;
        Ok((p, frames))
    }

    /// One batch of frames (the first is frame `first` of the movie): `blob_log` on the back
    /// end, then noise, refinement and particles on the host. A frame's particles do not
    /// depend on the batch it is in.
    pub(crate) fn detect_batch(
        &self,
        batch: &[FrameView<'_>],
        first: usize,
        backend: &dyn DetectBackend,
        p: &BlobLogParams,
    ) -> Result<Vec<Particle>> {
        let mut out = Vec::new();
        let Some((h, w)) = batch.first().map(FrameView::dim) else {
            return Ok(out);
        };
        let t_batch = std::time::Instant::now();
        let noise_of = || -> Vec<f64> {
            batch
                .par_iter()
                .map(|f| frame_noise(f, self.params.prescale))
                .collect()
        };
        // On a device, the host estimates the frames' noise while the device runs blob_log
        // (the call stays on this thread, which holds the device's context); on the CPU the
        // two would only share the same cores, so they run one after the other.
        let alongside = backend.device() != Device::Cpu;
        let (results, noises) = if !alongside {
            (backend.blob_log_batch_acc(batch, p, self.precision), None)
        } else {
            std::thread::scope(|s| {
                let noise = s.spawn(noise_of);
                let results = backend.blob_log_batch_acc(batch, p, self.precision);
                let noises = noise
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                (results, Some(noises))
            })
        };
        // the batch's frames, counted in the movie
        let results = results.map_err(|e| e.of_batch(first..first + batch.len()))?;
        let t_host = std::time::Instant::now();
        let blob_s = t_host.duration_since(t_batch).as_secs_f64();
        let noises = noises.unwrap_or_else(noise_of);
        let extra: Vec<(f64, Option<Vec<Refined>>)> = batch
            .par_iter()
            .zip(results.par_iter())
            .zip(noises.par_iter())
            .map(|((f, blobs), &noise)| {
                let refined = self.refine.as_ref().map(|rp| refine_frame(*f, blobs, rp));
                (noise, refined)
            })
            .collect();
        for (k, (blobs, (noise, refined))) in results.into_iter().zip(extra).enumerate() {
            let frame = u32::try_from(first + k)
                .map_err(|_| BridgeError::InvalidInput("more than 2^32 frames".into()))?;
            for (j, b) in blobs.iter().enumerate() {
                let intensity = 2.0 * b.response;
                out.push(Particle {
                    frame,
                    x: b.x,
                    y: b.y,
                    intensity,
                    sigma: b.sigma,
                    snr: if noise > 0.0 {
                        intensity / noise
                    } else {
                        f64::INFINITY
                    },
                    frame_size: (h as u32, w as u32),
                    id: None,
                    response: b.response,
                    refined: refined.as_ref().map(|r| r[j]),
                });
            }
        }
        let t_end = std::time::Instant::now();
        super::trace_span(t_host, t_end, || {
            format!(
                "detect batch of frames {first}..{}: blob_log {blob_s:.3} s{}, then \
                 noise/refine/particles {:.3} s",
                first + batch.len(),
                if alongside {
                    " (the noise alongside)"
                } else {
                    ""
                },
                t_end.duration_since(t_host).as_secs_f64()
            )
        });
        Ok(out)
    }
}

/// Host bytes that grow with the largest σ (radius `r = int(4σ + 0.5)`), beyond the images:
/// per frame in flight, the kernels (two f64 halves of `r + 1` taps for each of `num_sigma`
/// scales, and two whole kernels of `2r + 1` taps while they are built); per thread, the CPU's
/// y-pass rows padded by `r` on either side (two f64 arrays of `BLOCK_ROWS` rows of `w + 2r`).
/// A few KB for the usual σ ≤ 10; with `--max-sigma 10000 --num-sigma 1000` the kernels alone
/// are 640 MB a frame.
pub(crate) fn sigma_host_bytes(w: usize, num_sigma: usize, max_sigma: f64) -> (u64, u64) {
    let r = if max_sigma.is_finite() && max_sigma > 0.0 {
        crate::detect::filters::kernel_radius(max_sigma) as u64
    } else {
        0
    };
    let (w, ns) = (w as u64, num_sigma as u64);
    let taps = r.saturating_add(1); // a half kernel
    let whole = r.saturating_mul(2).saturating_add(1);
    let kernels = ns
        .saturating_mul(taps.saturating_mul(2))
        .saturating_add(whole.saturating_mul(2))
        .saturating_mul(8);
    let rows = crate::detect::filters::BLOCK_ROWS as u64;
    let scratch = (2 * rows * 8).saturating_mul(w.saturating_add(r.saturating_mul(2)));
    (kernels, scratch)
}

/// 1.4826 · MAD of the prescaled frame, on every 4th pixel.
fn frame_noise(f: &FrameView<'_>, prescale: Prescale) -> f64 {
    // integer pixels under a prescale that maps each level to one value: counted per level
    // (the same median and MAD, without converting the frame or selecting twice)
    let unit = |max: f64| match prescale {
        Prescale::Legacy => Some(1.0 / max),
        Prescale::None => Some(1.0),
        _ => None,
    };
    match f {
        FrameView::U8(a) => {
            if let Some(u) = unit(255.0) {
                let levels = a.iter().step_by(4).map(|&v| usize::from(v));
                return level_noise(levels, 256, |k| k as f64 * u);
            }
        }
        FrameView::U16(a) => {
            if let Some(u) = unit(65535.0) {
                let levels = a.iter().step_by(4).map(|&v| usize::from(v));
                return level_noise(levels, 65536, |k| k as f64 * u);
            }
        }
        _ => {}
    }
    converted_noise(f, prescale)
}

/// [`frame_noise`] through the converted frame (any dtype and prescale).
fn converted_noise(f: &FrameView<'_>, prescale: Prescale) -> f64 {
    let mut v: Vec<f64> = match super::blob_log::convert_frame(f, prescale) {
        Ok(super::blob_log::Converted::F32(v)) => {
            v.iter().step_by(4).map(|&x| f64::from(x)).collect()
        }
        Ok(super::blob_log::Converted::F64(v)) => v.iter().step_by(4).copied().collect(),
        Err(_) => return f64::NAN,
    };
    if v.is_empty() {
        return f64::NAN;
    }
    let cmp = |a: &f64, b: &f64| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal);
    let mid = v.len() / 2;
    let med = *v.select_nth_unstable_by(mid, cmp).1;
    for x in &mut v {
        *x = (*x - med).abs();
    }
    1.4826 * *v.select_nth_unstable_by(mid, cmp).1
}

/// [`frame_noise`] of pixels given as levels `0..n`, each standing for the value `value(k)`
/// (increasing in `k`): the median is the level at the middle rank of the counts, and the MAD
/// the value at the middle rank of the levels' distinct deviations `|value(k) − median|`, each
/// weighted by its count: the elements `select_nth_unstable` would pick, the same values.
fn level_noise(levels: impl Iterator<Item = usize>, n: usize, value: impl Fn(usize) -> f64) -> f64 {
    let mut counts = vec![0usize; n];
    let mut total = 0usize;
    for k in levels {
        counts[k] += 1;
        total += 1;
    }
    if total == 0 {
        return f64::NAN;
    }
    let mid = total / 2;
    // the element of rank `mid` among (value, count) pairs in increasing order
    let at_rank = |pairs: &mut dyn Iterator<Item = (f64, usize)>| {
        let mut seen = 0usize;
        for (v, c) in pairs {
            seen += c;
            if seen > mid {
                return v;
            }
        }
        f64::NAN
    };
    let med = at_rank(
        &mut counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(k, &c)| (value(k), c)),
    );
    let mut dev: Vec<(f64, usize)> = counts
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(k, &c)| ((value(k) - med).abs(), c))
        .collect();
    dev.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    1.4826 * at_rank(&mut dev.into_iter())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::synth::SplitMix;
    use ndarray::{Array2, s};

    /// The per-level noise of integer frames equals the noise of the converted frame bit for
    /// bit: u8 and u16, prescales `legacy` and `none`, contiguous and strided views, frames of
    /// one pixel, of one level, of two levels and of many.
    #[test]
    fn level_noise_equals_the_converted_frame_noise() {
        let mut rng = SplitMix::new(37);
        for (h, w) in [(1, 1), (1, 3), (7, 5), (64, 81)] {
            for levels in [1.0f64, 2.0, 40.0, 65536.0] {
                let mut draw = |max: f64| (rng.uniform() * levels.min(max + 1.0)).floor();
                let a16 = Array2::from_shape_fn((h, w), |_| draw(65535.0) as u16);
                let a8 = Array2::from_shape_fn((h, w), |_| draw(255.0) as u8);
                for prescale in [Prescale::Legacy, Prescale::None] {
                    let views = [
                        (FrameView::U8(a8.view()), "u8"),
                        (FrameView::U16(a16.view()), "u16"),
                        (FrameView::U8(a8.slice(s![.., ..;2])), "u8 strided"),
                        (FrameView::U16(a16.slice(s![..;2, ..])), "u16 strided"),
                    ];
                    for (f, what) in views {
                        let (got, want) =
                            (frame_noise(&f, prescale), converted_noise(&f, prescale));
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "{h}x{w} {levels} levels {what} {prescale:?}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
