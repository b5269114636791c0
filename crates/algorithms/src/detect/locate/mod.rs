//! `trackpy.locate` (trackpy 0.7, Crocker–Grier feature finding), spec §2.
//!
//! Chain: optional inversion → bandpass (Gaussian lowpass with zero padding minus a boxcar with
//! edge replication computed in the input dtype) → rescale to the integer gamut (truncation) →
//! grey-dilation local maxima above a percentile of the non-zero pixels, outside the margin →
//! iterated centre-of-mass refinement on the circular mask → characterisation (mass, size, ecc,
//! signal, raw_mass) → duplicate removal within `separation` → `mass > minmass` → static error.
//!
//! The settings are in `params.rs`, the preprocessing (inversion, bandpass, rescaling) in
//! `bandpass.rs`, the local maxima in `maxima.rs`, the refinement, characterisation and noise
//! in `characterize.rs`; this file chains them ([`locate`]) and removes duplicates. Volumes and
//! sizes per axis take the n-D path, [`locate_nd`] (`nd/`).

mod bandpass;
mod characterize;
mod maxima;
pub mod nd;
pub(crate) mod params;

use bridge_core::Result;

use super::FrameView;
use bandpass::{lowpass_half, prepare};
use characterize::{mask_geometry, mask_offsets, measure_noise, refine_one};
use maxima::{dilate_rows, dilation_reach, local_maxima, percentile_nonzero};

pub use nd::{FeaturesNd, LocateNdParams, locate_nd, locate_nd_on_device, why_empty_nd};
pub use params::{LocateParams, MAX_DIAMETER, MAX_ITERATIONS};

/// One located feature (spec §2.7 columns).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Feature {
    /// Row of the centroid.
    pub y: f64,
    /// Column of the centroid.
    pub x: f64,
    /// Integrated brightness of the bandpassed image (original units).
    pub mass: f64,
    /// Radius of gyration.
    pub size: f64,
    /// Eccentricity (0 = circular).
    pub ecc: f64,
    /// Maximum bandpassed value in the mask (original units).
    pub signal: f64,
    /// Sum of the raw pixels in the mask.
    pub raw_mass: f64,
    /// Static localisation error (Savin & Doyle).
    pub ep: f64,
}

/// The frame-independent geometry of a [`locate`] run: the mask radius, the separation, the
/// margin and the dilation box, as the CPU and the device back ends both use them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    /// Feature diameter.
    pub(crate) diameter: usize,
    /// Mask radius (`diameter / 2`).
    pub(crate) r: usize,
    /// Minimum separation.
    pub(crate) sep: f64,
    /// Boxcar width of the background.
    pub(crate) smoothing: usize,
    /// Pixels within this distance of the border hold no maximum.
    pub(crate) margin: usize,
    /// Side of the grey-dilation box (at least 1).
    pub(crate) box_size: usize,
}

impl Plan {
    /// The geometry of `p` (assumed valid).
    pub(crate) fn new(p: &LocateParams) -> Plan {
        let d = p.diameter;
        let r = d / 2;
        let sep = p.separation.unwrap_or((d + 1) as f64);
        let sm = p.smoothing_size.unwrap_or(d);
        let margin = r
            .max(((sep / 2.0).floor() as isize - 1).max(0) as usize)
            .max(sm / 2);
        Plan {
            diameter: d,
            r,
            sep,
            smoothing: sm,
            margin,
            box_size: ((2.0 * sep / std::f64::consts::SQRT_2) as usize).max(1),
        }
    }

    /// Reach `(lo, hi)` of the dilation box: offsets `−lo..=hi` along each axis.
    #[cfg_attr(not(any(feature = "opencl", feature = "cuda")), allow(dead_code))] // used by the device back end
    pub(crate) fn reach(&self) -> (usize, usize) {
        dilation_reach(self.box_size)
    }

    /// Whether an `h × w` frame can hold a feature (else `locate` finds none).
    pub(crate) fn fits(&self, h: usize, w: usize) -> bool {
        !(h <= 2 * self.margin || w <= 2 * self.margin || h < self.diameter || w < self.diameter)
    }
}

/// The mask offsets of radius `r` in raster order (trackpy's `maskY`, `maskX`, as indices
/// `0..=2r`).
#[cfg_attr(not(any(feature = "opencl", feature = "cuda")), allow(dead_code))] // used by the device back end
pub(crate) fn mask(r: usize) -> Vec<(usize, usize)> {
    mask_offsets(r)
}

/// The half `0..=r` of trackpy's lowpass kernel for `noise_size` (`None` when it is 0).
#[cfg_attr(not(any(feature = "opencl", feature = "cuda")), allow(dead_code))] // used by the device back end
pub(crate) fn lowpass_taps(noise_size: f64) -> Option<Vec<f64>> {
    lowpass_half(noise_size)
}

/// Per mask pixel: the squared radius and the cosine and sine of twice its angle.
#[cfg_attr(not(any(feature = "opencl", feature = "cuda")), allow(dead_code))] // used by the device back end
pub(crate) fn mask_tables(r: usize, mask: &[(usize, usize)]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let g = mask_geometry(r, mask);
    (g.r2.clone(), g.cos2.clone(), g.sin2.clone())
}

/// Duplicates: every pair of features closer than `sep` (‖Δ/sep‖ ≤ 1 − 1e-7) loses its dimmer
/// member (ties broken as [`drop_dimmer`] breaks them), all pairs decided at once; the
/// order of the others is kept. `feats[k]` is `[y, x, mass, …]`.
pub(crate) fn remove_duplicates(feats: Vec<[f64; 7]>, sep: f64) -> Vec<[f64; 7]> {
    if !(sep > 0.0 && feats.len() > 1) {
        return feats;
    }
    let pos: Vec<(f64, f64)> = feats.iter().map(|f| (f[0] / sep, f[1] / sep)).collect();
    let pairs = super::blob_log::pairs_within(&pos, 1.0 - 1e-7);
    drop_dimmer(feats, pairs, |f| f[2], |i| pos[i].0 + pos[i].1)
}

/// trackpy's decision for close pairs of features, all pairs at once: each pair loses its
/// dimmer member (`mass`), on equal mass the one with the smaller `coord_sum` (the sum of its
/// scaled coordinates), the first of the pair when those are equal too; the others are kept in
/// order. Shared by the 2-D and the n-D `locate`.
pub(crate) fn drop_dimmer<T>(
    feats: Vec<T>,
    pairs: impl IntoIterator<Item = (usize, usize)>,
    mass: impl Fn(&T) -> f64,
    coord_sum: impl Fn(usize) -> f64,
) -> Vec<T> {
    let mut drop = vec![false; feats.len()];
    for (i, j) in pairs {
        let (mi, mj) = (mass(&feats[i]), mass(&feats[j]));
        let k = if mi > mj {
            j
        } else if mi < mj {
            i
        } else if coord_sum(i) > coord_sum(j) {
            j
        } else {
            i
        };
        drop[k] = true;
    }
    feats
        .into_iter()
        .zip(drop)
        .filter(|(_, d)| !d)
        .map(|(f, _)| f)
        .collect()
}

/// The features of one frame from its refined candidates (`[y, x, mass, size, ecc, signal,
/// raw_mass]` in the rescaled units, duplicates removed): back to the input's units with
/// `scale`, `minmass`, `maxsize` and `topn` applied, and the static error from `noise`
/// (`(black level, noise)`, when characterising).
pub(crate) fn finish(
    feats: &[[f64; 7]],
    scale: f64,
    noise: Option<(f64, f64)>,
    p: &LocateParams,
    r: usize,
    mask: &[(usize, usize)],
) -> Vec<Feature> {
    let inv = 1.0 / scale;
    let mut out: Vec<Feature> = feats
        .iter()
        .map(|f| Feature {
            y: f[0],
            x: f[1],
            mass: f[2] * inv,
            size: f[3],
            ecc: f[4],
            signal: f[5] * inv,
            raw_mass: f[6],
            ep: f64::NAN,
        })
        .filter(|f| f.mass > p.minmass)
        .filter(|f| p.maxsize.is_none_or(|m| f.size < m))
        .collect();
    if let Some(n) = p.topn {
        out = top_n_by(out, n, |f| f.mass);
    }

    if p.characterize && !out.is_empty() {
        let (black, noise) = noise.unwrap_or((f64::NAN, f64::NAN));
        let npx = mask.len() as f64;
        let moment = mask
            .iter()
            .map(|&(i, _)| ((i as f64) - r as f64).powi(2))
            .sum::<f64>()
            .sqrt();
        for f in &mut out {
            let m = f.raw_mass - npx * black;
            f.ep = noise / m * p.noise_size * moment;
        }
    }
    out
}

/// trackpy's `topn` (`feature.py`: where there are more features than `n`, `np.argmax` for
/// one, else `iloc[np.argsort(mass)[-n:]]`): the first feature of the largest mass for `n = 1`;
/// else the `n` most massive in ascending mass, all of them for `n = 0` (NumPy's `[-0:]` is the
/// whole array). Equal masses keep their order (a stable sort, where NumPy's default sort is
/// not: at a tie across the cut, trackpy's choice depends on NumPy's sorting kernel).
pub(crate) fn top_n_by<T>(mut v: Vec<T>, n: usize, mass: impl Fn(&T) -> f64) -> Vec<T> {
    if v.len() <= n {
        return v;
    }
    if n == 1 {
        // np.argmax: the first maximum (a NaN, were there one, counts as the maximum)
        let mut best = 0;
        for (i, f) in v.iter().enumerate() {
            let (m, b) = (mass(f), mass(&v[best]));
            if !b.is_nan() && (m > b || m.is_nan()) {
                best = i;
            }
        }
        return vec![v.swap_remove(best)];
    }
    v.sort_by(|a, b| {
        mass(a)
            .partial_cmp(&mass(b))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let drop = if n == 0 { 0 } else { v.len() - n };
    v.drain(..drop);
    v
}

/// Host bytes per pixel of a frame in flight in `locate`: the frame in float64, its lowpass
/// (and the pass between), its background, at most four float64 images at once, plus the
/// integer image and maps that follow (an upper bound, rounded up). A device whose memory is the
/// host's (PoCL) holds about as much.
pub const LOCATE_BYTES_PER_PIXEL: u64 = 40;

/// `locate`'s host memory for `in_flight` frames of `h × w` at once (a batch, in parallel),
/// checked against the host budget before any frame is located: a
/// [`bridge_core::BridgeError::TooLarge`] naming the frames and `batch_flag` (`--batch-size`,
/// or Python's `batch_size`) when it does not fit.
pub fn check_memory(h: usize, w: usize, in_flight: usize, batch_flag: &str) -> Result<()> {
    let in_flight = in_flight.max(1);
    let bytes = bridge_core::host::checked_product(&[
        in_flight as u64,
        h as u64,
        w as u64,
        LOCATE_BYTES_PER_PIXEL,
    ])
    .unwrap_or(u64::MAX);
    bridge_core::host::check_allocation(
        bytes,
        &format!(
            "locate on {in_flight} frame(s) of {h}x{w} at once ({batch_flag}; about five \
             float64 images of each)"
        ),
        &format!("use a smaller {batch_flag} or smaller frames"),
    )
}

/// `trackpy.locate` on every frame of `movie` on `device` (`DeviceHandle::cpu()`, or an open
/// `opencl:N` or `cuda:N`, through [`backend_for`](crate::detect::backend_for): the device runs the whole
/// pipeline, see `detect::gpu::GpuDetect`; an unavailable device is an
/// error, never a silent CPU run). One result per frame, as [`locate`] gives it.
pub fn locate_movie(
    movie: &super::Movie,
    p: &LocateParams,
    device: &crate::exec::DeviceHandle,
) -> Result<Vec<Vec<Feature>>> {
    p.validate()?;
    let backend = super::backend_for(device)?;
    backend.locate_batch(&movie.frames(), p)
}

/// `locate` on `frames` in batches of `batch_size` frames on `backend` (its
/// [`DetectBackend::locate_batch`](super::DetectBackend::locate_batch)): one feature list per
/// frame, in order; `progress(frames_done)` after each batch, in order, on the calling thread.
/// Where the back end takes several batches at once
/// ([`DetectBackend::batches_in_flight`](super::DetectBackend::batches_in_flight): 2 on OpenCL
/// by default), that many worker threads (`locate-0`, `locate-1`) take the batches in turn: a
/// batch uploads while another's kernels run, and the host finishes a batch's features while
/// the next one computes. The features do not depend on the batches; the first failed batch's
/// error is returned.
pub fn locate_batches(
    frames: &[FrameView<'_>],
    p: &LocateParams,
    batch_size: usize,
    backend: &dyn super::DetectBackend,
    progress: impl FnMut(usize),
) -> Result<Vec<Vec<Feature>>> {
    p.validate()?;
    if batch_size == 0 {
        return Err(bridge_core::BridgeError::invalid_argument(
            "batch_size",
            "must be at least 1",
        ));
    }
    let workers = backend.batches_in_flight().clamp(1, 4);
    super::in_flight::frame_batches(
        frames,
        batch_size,
        (workers, "locate", backend.device()),
        // an input error names its frames in the movie (the batch counts from its first)
        |batch, first| {
            backend
                .locate_batch(batch, p)
                .map_err(|e| e.of_batch(first..first + batch.len()))
        },
        progress,
    )
}

/// `trackpy.locate` on one 2-D frame. Rows follow the raster order of the maxima (or ascending
/// mass with `topn`).
pub fn locate(frame: FrameView<'_>, p: &LocateParams) -> Result<Vec<Feature>> {
    p.validate()?;
    frame.validate()?;
    let (h, w) = frame.dim();
    let plan = Plan::new(p);
    if !plan.fits(h, w) {
        return Ok(Vec::new());
    }
    let (r, margin, sep) = (plan.r, plan.margin, plan.sep);
    let prep = prepare(&frame, p);
    let img = &prep.img;

    let mask_v = mask_offsets(r);
    let mask = mask_v.as_slice();
    // the background noise only needs the prepared image: measure it on a second worker
    let (noise, feats) = rayon::join(
        || {
            p.characterize
                .then(|| measure_noise(img, &prep.raw, h, w, r, mask))
        },
        || {
            // local maxima
            let box_size = plan.box_size;
            let (thr, rows) = rayon::join(
                || percentile_nonzero(img, p.percentile),
                || dilate_rows(img, h, w, box_size),
            );
            let Some(thr) = thr else {
                return Vec::new();
            };
            let maxima = local_maxima(img, &rows, h, w, box_size, margin, thr);

            // refinement
            let geo = mask_geometry(r, mask);
            let feats: Vec<[f64; 7]> = maxima
                .iter()
                .map(|&c| refine_one(img, &prep.raw, h, w, r, mask, &geo, c, p.max_iterations))
                .collect();
            remove_duplicates(feats, sep)
        },
    );
    Ok(finish(&feats, prep.scale, noise, p, r, mask))
}

/// Why [`locate`] found no feature in a frame: the stage that left none, in the order trackpy
/// checks them, each the reason of one of trackpy's `UserWarning`s ([`Empty::trackpy_warning`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Empty {
    /// The preprocessed image has no non-zero pixel (no percentile threshold).
    Black,
    /// No pixel is a local maximum above the percentile threshold.
    NoMaxima,
    /// Every local maximum is within the margin (always so in a frame too small to hold a
    /// feature).
    InMargins,
    /// Features were refined but none passed `minmass` and `maxsize`.
    Filtered,
}

impl Empty {
    /// A short name: `black`, `no_maxima`, `margins`, `filtered`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Empty::Black => "black",
            Empty::NoMaxima => "no_maxima",
            Empty::InMargins => "margins",
            Empty::Filtered => "filtered",
        }
    }

    /// The text of trackpy 0.7's `UserWarning` for this case (`trackpy.find.grey_dilation`
    /// and `trackpy.feature.locate`).
    pub fn trackpy_warning(&self) -> &'static str {
        match self {
            Empty::Black => "Image is completely black.",
            Empty::NoMaxima => "Image contains no local maxima.",
            Empty::InMargins => "All local maxima were in the margins.",
            Empty::Filtered => {
                "No maxima survived mass- and size-based filtering. Be advised that the mass \
                 computation was changed from version 0.2.4 to 0.3.0 and from 0.3.3 to 0.4.0. \
                 See the documentation and the convenience functions 'minmass_v03_change' and \
                 'minmass_v04_change'."
            }
        }
    }
}

/// Why [`locate`] finds no feature in `frame` (`None`: it finds some), on the CPU: the
/// preprocessed image is black, it has no local maximum above the percentile threshold, they
/// are all in the margin, or none passes the mass and size filters. Meant for the frames a
/// [`locate`] (on any device) returned empty, to say why as trackpy does: it repeats the
/// preprocessing and, when maxima remain outside the margin, the whole [`locate`].
pub fn why_empty(frame: FrameView<'_>, p: &LocateParams) -> Result<Option<Empty>> {
    p.validate()?;
    frame.validate()?;
    let (h, w) = frame.dim();
    let plan = Plan::new(p);
    let prep = prepare(&frame, p);
    let img = &prep.img;
    let Some(thr) = percentile_nonzero(img, p.percentile) else {
        return Ok(Some(Empty::Black));
    };
    let rows = dilate_rows(img, h, w, plan.box_size);
    let maxima = local_maxima(img, &rows, h, w, plan.box_size, 0, thr);
    if maxima.is_empty() {
        return Ok(Some(Empty::NoMaxima));
    }
    let m = plan.margin;
    let inside = |&(y, x): &(usize, usize)| y >= m && x >= m && y + m < h && x + m < w;
    if !plan.fits(h, w) || !maxima.iter().any(inside) {
        return Ok(Some(Empty::InMargins));
    }
    Ok(locate(frame, p)?.is_empty().then_some(Empty::Filtered))
}

#[cfg(test)]
mod tests {
    use super::top_n_by;

    /// trackpy's `topn`: `np.argmax` (the first maximum) for one, ascending mass for more,
    /// every feature for 0 (`[-0:]`), nothing cut where there are not more than `n`.
    #[test]
    fn top_n_is_trackpys() {
        let m = [3.0, 7.0, 1.0, 7.0, 5.0];
        let v: Vec<(usize, f64)> = m.iter().copied().enumerate().collect();
        let ids = |n| -> Vec<usize> {
            top_n_by(v.clone(), n, |f| f.1)
                .iter()
                .map(|f| f.0)
                .collect()
        };
        assert_eq!(ids(1), [1], "the first of the two largest");
        assert_eq!(ids(2), [1, 3]);
        assert_eq!(ids(3), [4, 1, 3]);
        assert_eq!(ids(0), [2, 0, 4, 1, 3], "all, by mass");
        assert_eq!(ids(5), [0, 1, 2, 3, 4], "not more than n: as found");
        let nan: Vec<(usize, f64)> = vec![(0, 1.0), (1, f64::NAN), (2, 9.0), (3, f64::NAN)];
        assert_eq!(
            top_n_by(nan, 1, |f| f.1)[0].0,
            1,
            "np.argmax takes the first NaN"
        );
    }
}
