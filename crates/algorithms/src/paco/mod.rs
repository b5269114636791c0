//! PACO (PAtch COvariance) exoplanet detection in angular-differential-imaging cubes
//! (Flasseur et al. 2018), following `docs/paco.md` of the shared specification.
//!
//! The background of every pixel θ is modelled by the temporal mean and the shrunk sample
//! covariance of its patch (a disk of radius `psf_rad`, `patch_area = K` pixels). For every
//! output position φ0 the source trajectory `[φ_ℓ]` through the frames is followed and
//!
//! ```text
//! a(φ0) = Σ_ℓ h_ℓᵀ C⁻¹([φ_ℓ]) h_ℓ      b(φ0) = Σ_ℓ h_ℓᵀ C⁻¹([φ_ℓ]) (P_ℓ([φ_ℓ]) − m([φ_ℓ]))
//! S/N = b/√a      flux = b/a      std = 1/√a
//! ```
//!
//! Modes: [`Variant::Paper`] / [`Variant::Vip`] (VIP 2.1.1's half covariance and shrinkage
//! numerator), [`Rounding::Trunc`] (VIP) / [`Rounding::Nearest`], sub-pixel PSF templates
//! ([`SubPixel`]), PSF normalisation ([`PsfNorm`]), [`Strategy::Fast`] / [`Strategy::Full`].
//! [`FastPaco`] and [`FullPaco`] keep the original package's vocabulary (`psf_rad`,
//! `patch_area`, `phi0s`, `batch_size`).
//!
//! # Memory
//!
//! Statistics are computed in bands of rows; each band needs a lag table of
//! `(band + 2R)·W·|Δ|·8` bytes (|Δ| = 113 lags for R = 4), capped by
//! [`PacoParams::max_tile_bytes`] (default 256 MiB). If an allocation fails the band is split in
//! two and retried, down to one row, before [`BridgeError::OutOfMemory`] is returned (large
//! buffers use `try_reserve`, so the CPU path reports OOM instead of aborting). Never is a K×K
//! matrix stored per pixel. Besides the caller's cube (`T·H·W·8` bytes) the CPU path holds:
//!
//! - `Fast` without sub-pixel templates: a centred copy of the cube (`T·H·W·8`), the whitened
//!   matched-filter cube `z` (`T·H·W·8`) and `q` (`H·W·8`), plus one lag band;
//! - `Full` or sub-pixel templates: the centred copy, 12 bytes per (φ0, ℓ) pair while sorting the
//!   pairs by trajectory pixel (8 bytes after), and 16 bytes per pair of the current band.
//!
//! For a 100×1024×1024 cube the peak is ≈ 0.84 (input) + 0.84 + 0.84 + 0.27 (band) ≈ 2.8 GB in
//! `Fast` mode and ≈ 0.84 + 0.84 + 1.26 + 0.4 + 0.27 ≈ 3.6 GB with sub-pixel templates: within
//! the 4 GB bound. Lower `max_tile_bytes` to trade speed for memory.
//!
//! # Parity with VIP 2.1.1
//!
//! `Variant::Vip` + `Rounding::Trunc` follows VIP's operation order for the trajectories (spec
//! §4), so on the fixture a and b match VIP's golden maps to ~1e-14 at every pixel, given the
//! same truncation of each trajectory coordinate. That proviso matters at coordinates whose
//! exact value is an integer (the angle-0 frame): there, the last ulp of `atan2` decides between
//! two pixels. This crate uses the platform libm (`f64::atan2`, glibc on Linux), which is what
//! NumPy uses too, except on CPUs with AVX-512, where NumPy's SIMD `arctan2` differs from glibc
//! by 1 ulp for ~8 % of arguments. The goldens were made on such a CPU: 62 of their 2305 finite
//! pixels pick the neighbouring pixel in the angle-0 frame, and VIP run on a CPU without AVX-512
//! gives this crate's numbers at those pixels. `tests/paco_golden.rs` checks every one of them by
//! re-evaluating it with the other truncation ([`PacoJob::ab_along`]);
//! `scripts/vip-atan2-check.py` reproduces both outcomes with NumPy.

mod backend;
pub mod bench;
mod flux;
mod geometry;
#[cfg(any(feature = "opencl", feature = "cuda"))]
pub mod gpu;
pub mod gpu_kernels;
mod kernels;
mod psf;
mod stats;

use bridge_core::{BridgeError, Device, Result};
use ndarray::{Array2, ArrayView1, ArrayView2, ArrayView3};
use rayon::prelude::*;

pub use backend::{PacoBackend, backend_for};
pub use flux::{FluxEstimate, FluxOptions, unbiased_flux};
pub use geometry::{Geometry, disk_offsets};
#[cfg(feature = "cuda")]
pub use gpu::CudaPaco;
#[cfg(any(feature = "opencl", feature = "cuda"))]
pub use gpu::GpuPrecision;
#[cfg(feature = "opencl")]
pub use gpu::OpenClPaco;
pub use psf::{
    AiryFit, aperture_flux, centroid, circle_rect_overlap, fit_airy, fit_airy_fwhm, recenter,
};

use stats::{Prepared, Scratch, try_vec};

/// Covariance and shrinkage formulas (spec §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Variant {
    /// The paper: `S = (1/T) Σ (P−m)(P−m)ᵀ`, numerator `tr(S²) + tr(S)² − 2 Σ S_ii²`.
    #[default]
    Paper,
    /// VIP 2.1.1: half covariance and numerator `tr(S)² − tr(S²)` (S/N × √2 against `Paper`).
    Vip,
}

/// How a sub-pixel trajectory position becomes a pixel (spec §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rounding {
    /// `trunc` (VIP and the original package).
    #[default]
    Trunc,
    /// `floor(v + 0.5)`.
    Nearest,
}

/// PSF template per frame (spec §5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SubPixel {
    /// The centred template `h0` in every frame.
    #[default]
    Off,
    /// VIP's FFT shift of the PSF by the fractional position, evaluated exactly (slow).
    VipFft,
    /// Table of `(q+1)²` exact FFT-shifted templates on a 1/q grid, blended bilinearly.
    /// With q = 32 the fixture reaches 1.8e-4 relative in a (see the crate tests).
    Table {
        /// Grid subdivisions per pixel.
        q: usize,
    },
    /// The normalised PSF interpolated by an interpolating quintic B-spline at every pair's
    /// offsets: `h_ℓ[k] = f(c_y + dy_k − fy, c_x + dx_k − fx)`, where `f` equals the PSF at every
    /// integer point and the PSF is taken as zero outside its array (the prefilter's boundary is
    /// handled exactly, no truncated padding). The coefficients are computed once per run; a
    /// template costs about 1000 multiply-adds (R = 4), no table. Measured on the fixture (VIP +
    /// Trunc, R = 4) against the VIP sub-pixel golden: max relative Δa 4.0e-4, max |Δb|/max|b|
    /// 1.7e-4, max |ΔS/N| 1.2e-3, peak S/N 13.7208 at (39, 45) (exact shift: 13.7202); the same
    /// against this crate's exact FFT shift, also with `Nearest` (`tests/paco_spline5.rs`).
    /// Between `Table { q: 16 }` and `Table { q: 32 }` in accuracy.
    Spline5,
}

/// Which pixels θ may hold statistics (spec §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EdgeRule {
    /// VIP's rule (all goldens): `R+1 ≤ y ≤ H−R−2` and `R+1 ≤ x ≤ W−R−2`, a (2R+3)-wide box
    /// fits in the frame.
    #[default]
    Box,
    /// The disk fits: `R ≤ y ≤ H−1−R` and `R ≤ x ≤ W−1−R` (an extension; a one-pixel wider
    /// valid field than VIP on every side except the asymmetric low side).
    Disk,
}

/// PSF normalisation (spec §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum PsfNorm {
    /// Fit an Airy pattern to get the FWHM, then divide by the flux in a FWHM-diameter aperture
    /// (not applied when that flux is within [0.9, 1.1], as VIP does).
    #[default]
    FitAiry,
    /// Use this FWHM (pixels) for the aperture.
    Fwhm(f64),
    /// Divide the PSF by exactly this factor.
    Factor(f64),
    /// Use the PSF as given.
    None,
}

/// Memory strategy; both give the same numbers (spec §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Precompute the whitened matched-filter cube (fastest without sub-pixel templates).
    #[default]
    Fast,
    /// Statistics on demand per trajectory pixel, in bounded bands.
    Full,
}

/// Where the star is.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Center {
    /// (N/2, N/2) for even N, ((N−1)/2, (N−1)/2) for odd N (per axis).
    #[default]
    Auto,
    /// VIP's convention including its half-pixel shift for odd N (compatibility only).
    VipOdd,
    /// An explicit (y, x) position.
    At(f64, f64),
}

/// All PACO settings.
#[derive(Debug, Clone, PartialEq)]
pub struct PacoParams {
    /// Patch radius R in pixels (`psf_rad`); K = |disk| pixels per patch.
    pub psf_rad: usize,
    /// If given, must equal K (the original package's `patch_area`).
    pub patch_area: Option<usize>,
    /// Covariance formulas.
    pub variant: Variant,
    /// Trajectory pixel rule.
    pub rounding: Rounding,
    /// PSF template mode.
    pub subpixel: SubPixel,
    /// PSF normalisation.
    pub psf_norm: PsfNorm,
    /// Multiplicative PSF scaling applied first (`dit_science / dit_psf / nd_transmission`).
    pub psf_scale: f64,
    /// Star centre.
    pub center: Center,
    /// Which pixels may hold statistics.
    pub edge: EdgeRule,
    /// Memory strategy.
    pub strategy: Strategy,
    /// φ0 per work item: per device launch on GPUs, minimum φ0 per rayon task in the CPU
    /// trajectory pass. Never changes results.
    pub batch_size: usize,
    /// Memory budget of one tile, in bytes: the CPU's lag-table band, and on devices the
    /// per-batch template/pair buffers and the covariance scratch of large patches (see
    /// `paco/gpu.rs`). Never changes results.
    pub max_tile_bytes: usize,
    /// Device to compute on.
    pub device: Device,
}

impl Default for PacoParams {
    fn default() -> Self {
        PacoParams {
            psf_rad: 4,
            patch_area: None,
            variant: Variant::Paper,
            rounding: Rounding::Trunc,
            subpixel: SubPixel::Off,
            psf_norm: PsfNorm::FitAiry,
            psf_scale: 1.0,
            center: Center::Auto,
            edge: EdgeRule::Box,
            strategy: Strategy::Fast,
            batch_size: 1000,
            max_tile_bytes: 256 << 20,
            device: Device::Cpu,
        }
    }
}

impl PacoParams {
    /// VIP 2.1.1 settings (`Vip`, `Trunc`, FFT sub-pixel shift as VIP's `run()`). The odd-N
    /// half-pixel centre shift stays off; set `center: Center::VipOdd` to reproduce it.
    pub fn vip() -> Self {
        PacoParams {
            variant: Variant::Vip,
            subpixel: SubPixel::VipFft,
            ..Default::default()
        }
    }
}

/// The detection maps, each `H × W` in the derotated frame, NaN where no valid trajectory.
#[derive(Debug, Clone)]
pub struct PacoMaps {
    /// a(φ0) = Σ h_ℓᵀ C⁻¹ h_ℓ.
    pub a: Array2<f64>,
    /// b(φ0) = Σ h_ℓᵀ C⁻¹ (P_ℓ − m).
    pub b: Array2<f64>,
    /// S/N = b/√a.
    pub snr: Array2<f64>,
    /// Flux = b/a (biased low near a source, see [`unbiased_flux`]).
    pub flux: Array2<f64>,
    /// Standard deviation of the flux, 1/√a.
    pub std: Array2<f64>,
    /// The factor the PSF was divided by.
    pub psf_norm_factor: f64,
    /// The FWHM used (fitted or given), if any.
    pub fwhm: Option<f64>,
}

/// Normalised PSF and its provenance.
#[derive(Debug, Clone)]
pub struct NormalizedPsf {
    /// The normalised PSF.
    pub psf: Array2<f64>,
    /// What the scaled PSF was divided by.
    pub factor: f64,
    /// FWHM used, if any.
    pub fwhm: Option<f64>,
}

/// Normalise a PSF to unit flux in a FWHM-diameter aperture (spec §5.1). With `FitAiry` and
/// `Fwhm`, an off-centre PSF is first recentred as VIP does ([`recenter`]); `Factor` and `None`
/// use the PSF as given.
pub fn normalize_psf(psf: ArrayView2<'_, f64>, norm: PsfNorm, scale: f64) -> Result<NormalizedPsf> {
    if psf.iter().any(|v| !v.is_finite()) {
        return Err(BridgeError::InvalidInput(
            "the PSF contains NaN or infinite values".into(),
        ));
    }
    let mut scaled = psf.mapv(|v| v * scale);
    let (factor, fwhm) = match norm {
        PsfNorm::None => (1.0, None),
        PsfNorm::Factor(f) => {
            if !(f.is_finite() && f > 0.0) {
                return Err(BridgeError::invalid_argument(
                    "psf_norm",
                    "factor must be positive",
                ));
            }
            (f, None)
        }
        PsfNorm::Fwhm(fw) => {
            if !(fw.is_finite() && fw > 0.0) {
                return Err(BridgeError::invalid_argument(
                    "fwhm",
                    "must be a positive number of pixels",
                ));
            }
            scaled = recenter(&scaled)?;
            (vip_factor(aperture_flux(scaled.view(), fw)), Some(fw))
        }
        PsfNorm::FitAiry => {
            scaled = recenter(&scaled)?;
            let fw = fit_airy_fwhm(scaled.view())?;
            (vip_factor(aperture_flux(scaled.view(), fw)), Some(fw))
        }
    };
    if !(factor.is_finite() && factor > 0.0) {
        return Err(BridgeError::InvalidInput(format!(
            "PSF aperture flux is {factor}; cannot normalise"
        )));
    }
    Ok(NormalizedPsf {
        psf: scaled.mapv(|v| v / factor),
        factor,
        fwhm,
    })
}

fn vip_factor(f: f64) -> f64 {
    if (0.9..=1.1).contains(&f) { 1.0 } else { f }
}

/// Templates for one run.
pub(crate) enum Templates {
    Centred(Vec<f64>),
    Fft {
        psf: Array2<f64>,
        points: Vec<(isize, isize)>,
    },
    Table {
        q: usize,
        lo: f64,
        k: usize,
        data: Vec<f64>,
    },
    /// Quintic B-spline coefficients of the normalised PSF (zero outside, exact boundary) and
    /// the disk points as row runs, evaluated separably per template.
    Spline5 {
        spline: psf::Spline5Templates,
    },
}

impl Templates {
    pub(crate) fn new(
        psf_n: &Array2<f64>,
        disk: &[(isize, isize)],
        mode: SubPixel,
        rounding: Rounding,
    ) -> Result<Self> {
        let (ph, pw) = psf_n.dim();
        let (cy, cx) = ((ph / 2) as isize, (pw / 2) as isize);
        let points: Vec<(isize, isize)> = disk.iter().map(|&(dy, dx)| (cy + dy, cx + dx)).collect();
        let k = disk.len();
        Ok(match mode {
            SubPixel::Off => {
                let mut h = vec![0.0; k];
                psf::VipShifter::new(psf_n.view()).sample(0.0, 0.0, &points, &mut h);
                Templates::Centred(h)
            }
            SubPixel::Spline5 => Templates::Spline5 {
                spline: psf::Spline5Templates::new(psf_n.view(), &points),
            },
            SubPixel::VipFft => Templates::Fft {
                psf: psf_n.clone(),
                points,
            },
            SubPixel::Table { q } => {
                if q == 0 || q > 1024 {
                    return Err(BridgeError::invalid_argument(
                        "subpixel table q",
                        "must be in 1..=1024",
                    ));
                }
                let lo = match rounding {
                    Rounding::Trunc => 0.0,
                    Rounding::Nearest => -0.5,
                };
                let sh = psf::VipShifter::new(psf_n.view());
                let n = q + 1;
                let mut data = vec![0.0; n * n * k];
                data.par_chunks_mut(k).enumerate().for_each(|(idx, out)| {
                    let (i, j) = (idx / n, idx % n);
                    sh.sample(
                        lo + i as f64 / q as f64,
                        lo + j as f64 / q as f64,
                        &points,
                        out,
                    );
                });
                Templates::Table { q, lo, k, data }
            }
        })
    }

    /// Template for fractional offsets (fy, fx).
    #[inline(always)]
    pub(crate) fn fill(&self, fy: f64, fx: f64, out: &mut [f64]) {
        match self {
            Templates::Centred(h) => out.copy_from_slice(h),
            Templates::Fft { psf, points } => {
                psf::VipShifter::new(psf.view()).sample(fy, fx, points, out)
            }
            Templates::Spline5 { spline } => spline.fill(fy, fx, out),
            Templates::Table { q, lo, k, data } => {
                let n = q + 1;
                let qf = *q as f64;
                let uy = ((fy - lo) * qf).clamp(0.0, qf);
                let ux = ((fx - lo) * qf).clamp(0.0, qf);
                let iy = (uy.floor() as usize).min(q - 1);
                let ix = (ux.floor() as usize).min(q - 1);
                let (ty, tx) = (uy - iy as f64, ux - ix as f64);
                let w00 = (1.0 - ty) * (1.0 - tx);
                let w01 = (1.0 - ty) * tx;
                let w10 = ty * (1.0 - tx);
                let w11 = ty * tx;
                let t00 = &data[(iy * n + ix) * k..][..*k];
                let t01 = &data[(iy * n + ix + 1) * k..][..*k];
                let t10 = &data[((iy + 1) * n + ix) * k..][..*k];
                let t11 = &data[((iy + 1) * n + ix + 1) * k..][..*k];
                for (kk, o) in out.iter_mut().enumerate() {
                    *o = w00 * t00[kk] + w01 * t01[kk] + w10 * t10[kk] + w11 * t11[kk];
                }
            }
        }
    }
}

/// Everything a backend needs for one run, validated.
pub struct PacoJob<'a> {
    pub(crate) cube: ArrayView3<'a, f64>,
    pub(crate) angles: Vec<f64>,
    pub(crate) params: PacoParams,
    pub(crate) geom: Geometry,
    pub(crate) psf_n: NormalizedPsf,
    pub(crate) disk: Vec<(isize, isize)>,
}

/// Every pixel of every frame enters the statistics of its neighbours, so one NaN makes all
/// maps NaN and one infinite pixel silently hides what is around it: non-finite pixels are an
/// error that says where they are.
fn check_finite(cube: ArrayView3<'_, f64>) -> Result<()> {
    let t = cube.dim().0;
    let mut first: Option<(usize, usize)> = None;
    let (mut frames, mut pixels) = (0usize, 0usize);
    let mut all_bad = true;
    for i in 0..t {
        let f = cube.index_axis(ndarray::Axis(0), i);
        let bad = f.iter().filter(|v| !v.is_finite()).count();
        if bad > 0 {
            frames += 1;
            pixels += bad;
            first.get_or_insert((i, bad));
        }
        all_bad &= bad == f.len();
    }
    if all_bad {
        return Err(BridgeError::InvalidInput(
            "the cube has no finite value".into(),
        ));
    }
    match first {
        None => Ok(()),
        Some((i, n)) => Err(BridgeError::InvalidInput(format!(
            "the cube has {pixels} non-finite pixel(s) (NaN or ±Inf) in {frames} frame(s), the \
             first in frame {i} ({n} pixels); PACO uses every pixel of every frame in the \
             statistics of its neighbours, so remove those frames (with their angles) or \
             replace the pixels (e.g. by the frame median) first"
        ))),
    }
}

impl<'a> PacoJob<'a> {
    /// Validate inputs and normalise the PSF.
    pub fn new(
        cube: ArrayView3<'a, f64>,
        angles: ArrayView1<'_, f64>,
        psf: ArrayView2<'_, f64>,
        params: &PacoParams,
    ) -> Result<Self> {
        let (t, h, w) = cube.dim();
        if t < 2 {
            return Err(BridgeError::InvalidInput(format!(
                "the cube needs at least 2 frames, found {t}"
            )));
        }
        if angles.len() != t {
            return Err(BridgeError::shape_mismatch(
                format!("{t} angles (one per frame)"),
                format!("{} angles", angles.len()),
                "PACO angles",
            ));
        }
        if angles.iter().any(|a| !a.is_finite()) {
            return Err(BridgeError::InvalidInput(
                "angles contain non-finite values".into(),
            ));
        }
        let r = params.psf_rad;
        if r == 0 {
            return Err(BridgeError::invalid_argument(
                "psf_rad",
                "must be at least 1",
            ));
        }
        // The smallest frame with one pixel that may hold statistics. Checked before anything
        // of size R² is built (and without overflow for absurd radii).
        let min_side = match params.edge {
            EdgeRule::Box => r.checked_mul(2).and_then(|d| d.checked_add(3)),
            EdgeRule::Disk => r.checked_mul(2).and_then(|d| d.checked_add(1)),
        }
        .unwrap_or(usize::MAX);
        if h < min_side || w < min_side {
            return Err(BridgeError::InvalidInput(format!(
                "frames of {h}×{w} are too small for patches of radius {r} with the {:?} edge rule (need at least {min_side}×{min_side})",
                params.edge
            )));
        }
        let disk = disk_offsets(r);
        if let Some(pa) = params.patch_area
            && pa != disk.len()
        {
            return Err(BridgeError::invalid_argument(
                "patch_area",
                format!("a disk of radius {r} has {} pixels, not {pa}", disk.len()),
            ));
        }
        // Each worker holds at least one K×K covariance (and its factor) at a time.
        let k = disk.len() as u64;
        let workers = rayon::current_num_threads() as u64;
        bridge_core::host::check_allocation(
            k.saturating_mul(k)
                .saturating_mul(16)
                .saturating_mul(workers),
            &format!(
                "PACO patches of radius {r} (--radius; {k} pixels, a {k}×{k} covariance per \
                 thread, {workers} threads)"
            ),
            "use a smaller patch radius (about the PSF's FWHM)",
        )?;
        let (ph, pw) = psf.dim();
        if ph > h || pw > w {
            return Err(BridgeError::InvalidInput(format!(
                "the PSF ({ph}×{pw}) is larger than the frames ({h}×{w})"
            )));
        }
        if ph % 2 == 0 || pw % 2 == 0 {
            return Err(BridgeError::InvalidInput(format!(
                "the PSF is {ph}×{pw}: PACO needs odd sides with the star on the centre pixel \
                 (an even side has no centre pixel and would shift every template by half a \
                 pixel); crop one row and/or column so the peak is in the middle"
            )));
        }
        if ph < 2 * r + 1 || pw < 2 * r + 1 {
            return Err(BridgeError::InvalidInput(format!(
                "the PSF ({ph}×{pw}) is smaller than the patch ({0}×{0})",
                2 * r + 1
            )));
        }
        check_finite(cube)?;
        if params.batch_size == 0 {
            return Err(BridgeError::invalid_argument(
                "batch_size",
                "must be at least 1",
            ));
        }
        let psf_n = normalize_psf(psf, params.psf_norm, params.psf_scale)?;
        let (sub, add) = match params.center {
            Center::Auto => {
                // floor(N/2) is N/2 for even N and (N−1)/2, the centre pixel, for odd N.
                let c = ((h / 2) as f64, (w / 2) as f64);
                (c, c)
            }
            Center::VipOdd => (
                (h as f64 / 2.0, w as f64 / 2.0),
                ((h / 2) as f64, (w / 2) as f64),
            ),
            Center::At(cy, cx) => {
                if !(cy.is_finite() && cx.is_finite()) {
                    return Err(BridgeError::invalid_argument("center", "must be finite"));
                }
                // The star must be on the frame (every trajectory rotates about it).
                if !(0.0..=(h - 1) as f64).contains(&cy) || !(0.0..=(w - 1) as f64).contains(&cx) {
                    return Err(BridgeError::invalid_argument(
                        "center",
                        format!(
                            "({cy}, {cx}) is outside the {h}×{w} frame (y in 0..={}, x in 0..={})",
                            h - 1,
                            w - 1
                        ),
                    ));
                }
                ((cy, cx), (cy, cx))
            }
        };
        let geom = Geometry {
            height: h,
            width: w,
            sub,
            add,
            rounding: params.rounding,
            radius: r,
            edge: params.edge,
        };
        Ok(PacoJob {
            cube,
            angles: angles.to_vec(),
            params: params.clone(),
            geom,
            psf_n,
            disk,
        })
    }

    /// The geometry in use.
    pub fn geometry(&self) -> &Geometry {
        &self.geom
    }

    /// The cube `[t][y][x]`.
    pub fn cube(&self) -> ArrayView3<'a, f64> {
        self.cube
    }

    /// Derotation angles, one per frame (degrees).
    pub fn angles(&self) -> &[f64] {
        &self.angles
    }

    /// The settings.
    pub fn params(&self) -> &PacoParams {
        &self.params
    }

    /// Patch disk offsets (dy, dx) in row-major order (K of them).
    pub fn disk(&self) -> &[(isize, isize)] {
        &self.disk
    }

    /// The PSF template for every entry of a sub-pixel table with `q` steps per pixel: a
    /// `(q+1)·(q+1)·K` row-major array (fy index, fx index, disk index) of exact VIP FFT-shifted
    /// templates starting at offset 0 (`Trunc`) or −½ (`Nearest`). Device backends upload it and
    /// blend bilinearly like the CPU does.
    pub fn template_table(&self, q: usize) -> Result<Vec<f64>> {
        match Templates::new(
            &self.psf_n.psf,
            &self.disk,
            SubPixel::Table { q },
            self.geom.rounding,
        )? {
            Templates::Table { data, .. } => Ok(data),
            _ => Err(BridgeError::Unsupported(
                "internal: table templates expected".into(),
            )),
        }
    }

    /// The centred template h0 (K values).
    pub fn centred_template(&self) -> Result<Vec<f64>> {
        match Templates::new(
            &self.psf_n.psf,
            &self.disk,
            SubPixel::Off,
            self.geom.rounding,
        )? {
            Templates::Centred(h) => Ok(h),
            _ => Err(BridgeError::Unsupported(
                "internal: centred template expected".into(),
            )),
        }
    }

    /// The normalised PSF in use.
    pub fn normalized_psf(&self) -> &NormalizedPsf {
        &self.psf_n
    }

    /// a and b along explicit trajectories, on the CPU: `positions` holds, for every
    /// trajectory, the sub-pixel position `(y_ℓ, x_ℓ)` of the source in each raw frame ℓ (T
    /// rows per trajectory, frame order, flattened: `positions.len()` must be a multiple of T).
    /// Everything else is as for the geometric trajectories of output positions: the rounding
    /// rule picks `[φ_ℓ]`, the edge rule decides validity (NaN when any frame fails it), the
    /// sub-pixel mode builds `h_ℓ` from the fractional offsets, and contributions are summed in
    /// increasing ℓ.
    ///
    /// Use it for geometries the star-centred rotation does not describe (a drifting star
    /// centre, field distortion, an orbit hypothesis), or to test what a different pixel choice
    /// does: `positions` from [`Geometry::position`] give exactly the numbers of
    /// [`paco_ab_at`].
    pub fn ab_along(&self, positions: &[(f64, f64)]) -> Result<(Vec<f64>, Vec<f64>)> {
        let t = self.angles.len();
        if !positions.len().is_multiple_of(t) {
            return Err(BridgeError::shape_mismatch(
                format!("a multiple of {t} positions (one per frame per trajectory)"),
                format!("{} positions", positions.len()),
                "PACO trajectories",
            ));
        }
        if let Some(i) = positions
            .iter()
            .position(|(y, x)| !(y.is_finite() && x.is_finite()))
        {
            return Err(BridgeError::InvalidInput(format!(
                "trajectory {} has a non-finite position in frame {}",
                i / t,
                i % t
            )));
        }
        cpu::bucket_ab(self, &kernels::Trajectories::Explicit(positions))
    }

    /// Number of θ rows per lag-table band.
    fn band_rows(&self, nlags: usize) -> usize {
        let per_row = self.geom.width * nlags * 8;
        let rows = self.params.max_tile_bytes / per_row.max(1);
        rows.saturating_sub(2 * self.params.psf_rad).max(1)
    }
}

/// Run PACO on the full output grid.
pub fn paco(
    cube: ArrayView3<'_, f64>,
    angles: ArrayView1<'_, f64>,
    psf: ArrayView2<'_, f64>,
    params: &PacoParams,
) -> Result<PacoMaps> {
    let job = PacoJob::new(cube, angles, psf, params)?;
    let backend = backend_for(params.device)?;
    let (a, b) = backend.ab_maps(&job)?;
    Ok(maps_from_ab(a, b, &job))
}

fn maps_from_ab(a: Array2<f64>, b: Array2<f64>, job: &PacoJob<'_>) -> PacoMaps {
    let snr = ndarray::Zip::from(&a)
        .and(&b)
        .map_collect(|&a, &b| b / a.sqrt());
    let flux = ndarray::Zip::from(&a).and(&b).map_collect(|&a, &b| b / a);
    let std = a.mapv(|a| 1.0 / a.sqrt());
    PacoMaps {
        a,
        b,
        snr,
        flux,
        std,
        psf_norm_factor: job.psf_n.factor,
        fwhm: job.psf_n.fwhm,
    }
}

/// a and b at an explicit list of (y, x) output positions (`phi0s`).
pub fn paco_ab_at(
    cube: ArrayView3<'_, f64>,
    angles: ArrayView1<'_, f64>,
    psf: ArrayView2<'_, f64>,
    params: &PacoParams,
    phi0s: &[(usize, usize)],
) -> Result<(Vec<f64>, Vec<f64>)> {
    let job = PacoJob::new(cube, angles, psf, params)?;
    let (h, w) = (job.geom.height, job.geom.width);
    if let Some(&(y, x)) = phi0s.iter().find(|&&(y, x)| y >= h || x >= w) {
        return Err(BridgeError::invalid_argument(
            "phi0s",
            format!("({y}, {x}) is outside the {h}×{w} frame"),
        ));
    }
    let backend = backend_for(params.device)?;
    backend.ab_at(&job, phi0s)
}

/// The CPU implementation of the two PACO passes.
pub(crate) mod cpu {
    use super::*;

    /// Rows of θ that can hold statistics (half-open).
    fn box_rows(job: &PacoJob<'_>) -> (usize, usize) {
        job.geom.stats_ranges().0
    }

    /// Fast path: q and z for every pixel, then sums along trajectories.
    pub(crate) fn fast_maps(job: &PacoJob<'_>) -> Result<(Array2<f64>, Array2<f64>)> {
        let prep = Prepared::new(job.cube, job.disk.clone())?;
        let tpl = Templates::new(&job.psf_n.psf, &job.disk, SubPixel::Off, job.geom.rounding)?;
        let Templates::Centred(h0) = tpl else {
            return Err(BridgeError::Unsupported(
                "internal: centred template expected".into(),
            ));
        };
        let (h, w, t, k) = (prep.h, prep.w, prep.t, prep.k());
        let r = job.params.psf_rad;
        let variant = job.params.variant;
        let mut q = try_vec(h * w, f64::NAN)?;
        let mut z = try_vec(h * w * t, f64::NAN)?;
        let (y_lo, y_hi) = box_rows(job);
        let xr = job.geom.stats_ranges().1;
        let mut band = job.band_rows(prep.lags.len());
        let mut g = Vec::new();
        let mut ya = y_lo;
        while ya < y_hi {
            let yb = (ya + band).min(y_hi);
            let pa = ya - r;
            if let Err(e) = prep.lag_table(pa, yb + r, &mut g) {
                // Out of memory: split the band and retry, down to one row.
                if band == 1 {
                    return Err(e);
                }
                g = Vec::new();
                band = band.div_ceil(2);
                log::info!("paco: out of memory for a lag-table band; retrying with {band} rows");
                continue;
            }
            let qrows = &mut q[ya * w..yb * w];
            let zrows = &mut z[ya * w * t..yb * w * t];
            qrows
                .par_chunks_mut(w)
                .zip(zrows.par_chunks_mut(w * t))
                .enumerate()
                .for_each_init(
                    || Scratch::new(k),
                    |sc, (ry, (qrow, zrow))| {
                        kernels::fast_row(&prep, &g, pa, ya + ry, xr, &h0, variant, sc, qrow, zrow);
                    },
                );
            ya = yb;
        }
        drop(g);
        let geom = job.geom;
        let angles = &job.angles;
        let mut a = Array2::<f64>::from_elem((h, w), f64::NAN);
        let mut b = Array2::<f64>::from_elem((h, w), f64::NAN);
        let a_sl = a
            .as_slice_mut()
            .ok_or_else(|| BridgeError::Unsupported("non-contiguous".into()))?;
        let b_sl = b
            .as_slice_mut()
            .ok_or_else(|| BridgeError::Unsupported("non-contiguous".into()))?;
        a_sl.par_chunks_mut(w)
            .zip(b_sl.par_chunks_mut(w))
            .enumerate()
            .for_each(|(y0, (arow, brow))| {
                for x0 in 0..w {
                    let mut sa = 0.0;
                    let mut sb = 0.0;
                    let mut ok = true;
                    let (rr, th0) = geom.polar(y0 as f64, x0 as f64);
                    for (l, &ang) in angles.iter().enumerate() {
                        match geom.pixel_polar(rr, th0, ang) {
                            Some((theta, _, _)) => {
                                sa += q[theta];
                                sb += z[theta * t + l];
                            }
                            None => {
                                ok = false;
                                break;
                            }
                        }
                    }
                    if ok {
                        arow[x0] = sa;
                        brow[x0] = sb;
                    }
                }
            });
        Ok((a, b))
    }

    /// Bucketed path: pairs (φ0, ℓ) grouped by their trajectory pixel, statistics per band.
    pub(crate) fn bucket_ab(
        job: &PacoJob<'_>,
        traj: &kernels::Trajectories<'_>,
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        let t = job.angles.len();
        let geom = job.geom;
        let angles = &job.angles;
        let n0 = traj.len(t);
        let w = geom.width;
        // Trajectory pixel of every pair; u32::MAX for φ0 with an invalid trajectory.
        if n0.checked_mul(t).is_none_or(|n| n >= u32::MAX as usize) {
            return Err(BridgeError::Unsupported(format!(
                "{n0} positions × {t} frames exceed the 2³² (φ0, frame) pairs of one run; pass phi0s in parts"
            )));
        }
        let mut pair_theta = try_vec(n0 * t, u32::MAX)?;
        pair_theta
            .par_chunks_mut(t)
            .enumerate()
            .with_min_len(job.params.batch_size.min(n0.max(1)))
            .for_each(|(i0, row)| {
                let polar = match traj {
                    kernels::Trajectories::Grid(p) => {
                        Some(geom.polar(p[i0].0 as f64, p[i0].1 as f64))
                    }
                    kernels::Trajectories::Explicit(_) => None,
                };
                for (l, &ang) in angles.iter().enumerate() {
                    let px = match polar {
                        Some((rr, th0)) => geom.pixel_polar(rr, th0, ang),
                        None => traj.pixel(&geom, angles, i0, l),
                    };
                    match px {
                        Some((theta, _, _)) => row[l] = theta as u32,
                        None => {
                            row.fill(u32::MAX);
                            return;
                        }
                    }
                }
            });
        let valid: Vec<bool> = pair_theta.chunks(t).map(|c| c[0] != u32::MAX).collect();
        let prep = Prepared::new(job.cube, job.disk.clone())?;
        let tpl = Templates::new(
            &job.psf_n.psf,
            &job.disk,
            job.params.subpixel,
            geom.rounding,
        )?;
        let (k, r) = (prep.k(), job.params.psf_rad);
        let variant = job.params.variant;
        let (y_lo, y_hi) = box_rows(job);
        let band = job.band_rows(prep.lags.len());
        let nbands = (y_hi - y_lo).div_ceil(band);
        // Counting sort of (θ, pair id) by band.
        let mut counts = vec![0usize; nbands + 1];
        for &th in &pair_theta {
            if th != u32::MAX {
                counts[(th as usize / w - y_lo) / band + 1] += 1;
            }
        }
        for i in 0..nbands {
            counts[i + 1] += counts[i];
        }
        let mut by_band = try_vec(counts[nbands], (0u32, 0u32))?;
        let mut fill = counts.clone();
        for (pid, &th) in pair_theta.iter().enumerate() {
            if th != u32::MAX {
                let bi = (th as usize / w - y_lo) / band;
                by_band[fill[bi]] = (th, pid as u32);
                fill[bi] += 1;
            }
        }
        drop(pair_theta);
        let mut a = vec![0.0f64; n0];
        let mut b = vec![0.0f64; n0];
        let mut g = Vec::new();
        let h0 = match &tpl {
            Templates::Centred(h) => Some(h.clone()),
            _ => None,
        };
        for bi in 0..nbands {
            let pairs = &mut by_band[counts[bi]..counts[bi + 1]];
            if pairs.is_empty() {
                continue;
            }
            pairs.sort_unstable();
            let pairs: &[(u32, u32)] = pairs;
            let ya = y_lo + bi * band;
            let yb = (ya + band).min(y_hi);
            // Rows of the band, split further if the lag table does not fit in memory.
            let mut todo = vec![(ya, yb)];
            while let Some((sa, sb)) = todo.pop() {
                let lo = pairs.partition_point(|p| (p.0 as usize) < sa * w);
                let hi = pairs.partition_point(|p| (p.0 as usize) < sb * w);
                let sub = &pairs[lo..hi];
                if sub.is_empty() {
                    continue;
                }
                let pa = sa - r;
                if let Err(e) = prep.lag_table(pa, sb + r, &mut g) {
                    if sb - sa == 1 {
                        return Err(e);
                    }
                    g = Vec::new();
                    let mid = sa + (sb - sa) / 2;
                    log::info!(
                        "paco: out of memory for a lag-table band; splitting rows {sa}..{sb}"
                    );
                    todo.push((mid, sb));
                    todo.push((sa, mid));
                    continue;
                }
                let ctx = kernels::GroupCtx {
                    prep: &prep,
                    g: &g,
                    pa,
                    variant,
                    h0: h0.as_deref(),
                    tpl: &tpl,
                    geom: &geom,
                    angles,
                    traj,
                };
                process_pairs(&ctx, sub, k, &mut a, &mut b, t)?;
            }
        }
        for ((av, bv), &ok) in a.iter_mut().zip(b.iter_mut()).zip(&valid) {
            if !ok {
                *av = f64::NAN;
                *bv = f64::NAN;
            }
        }
        Ok((a, b))
    }

    /// Evaluate the pairs (sorted by θ) of one lag-table band and add their contributions to
    /// a and b, in the (deterministic) order of the sorted pairs.
    fn process_pairs(
        ctx: &kernels::GroupCtx<'_>,
        pairs: &[(u32, u32)],
        k: usize,
        a: &mut [f64],
        b: &mut [f64],
        t: usize,
    ) -> Result<()> {
        let mut groups: Vec<(usize, usize)> = Vec::new();
        let mut s = 0;
        while s < pairs.len() {
            let mut e = s + 1;
            while e < pairs.len() && pairs[e].0 == pairs[s].0 {
                e += 1;
            }
            groups.push((s, e));
            s = e;
        }
        let mut contrib = try_vec(pairs.len(), (f64::NAN, f64::NAN))?;
        let mut chunks: Vec<&mut [(f64, f64)]> = Vec::with_capacity(groups.len());
        let mut rest: &mut [(f64, f64)] = &mut contrib;
        for &(s, e) in &groups {
            let (head, tail) = rest.split_at_mut(e - s);
            chunks.push(head);
            rest = tail;
        }
        groups.par_iter().zip(chunks.into_par_iter()).for_each_init(
            || Scratch::new(k),
            |sc, (&(s, e), out)| kernels::group(ctx, &pairs[s..e], sc, out),
        );
        for (&(_, pid), &(ca, cb)) in pairs.iter().zip(&contrib) {
            let i0 = pid as usize / t;
            a[i0] += ca;
            b[i0] += cb;
        }
        Ok(())
    }

    /// Full-grid maps through the bucketed path.
    pub(crate) fn bucket_maps(job: &PacoJob<'_>) -> Result<(Array2<f64>, Array2<f64>)> {
        let (h, w) = (job.geom.height, job.geom.width);
        let phi0s: Vec<(usize, usize)> = (0..h).flat_map(|y| (0..w).map(move |x| (y, x))).collect();
        let (a, b) = bucket_ab(job, &kernels::Trajectories::Grid(&phi0s))?;
        let a = Array2::from_shape_vec((h, w), a)
            .map_err(|e| BridgeError::Unsupported(e.to_string()))?;
        let b = Array2::from_shape_vec((h, w), b)
            .map_err(|e| BridgeError::Unsupported(e.to_string()))?;
        Ok((a, b))
    }
}

/// FastPACO with the original package's vocabulary: statistics precomputed for every pixel.
#[derive(Debug, Clone)]
pub struct FastPaco<'a> {
    cube: ArrayView3<'a, f64>,
    angles: ArrayView1<'a, f64>,
    psf: ArrayView2<'a, f64>,
    /// Settings; `psf_rad` and `patch_area` follow the original names.
    pub params: PacoParams,
}

/// FullPACO with the original package's vocabulary: statistics on demand (bounded memory).
/// Same numbers as [`FastPaco`].
#[derive(Debug, Clone)]
pub struct FullPaco<'a> {
    inner: FastPaco<'a>,
}

impl<'a> FastPaco<'a> {
    /// `FastPACO(image_stack, angles, psf, psf_rad, patch_area)`.
    pub fn new(
        image_stack: ArrayView3<'a, f64>,
        angles: ArrayView1<'a, f64>,
        psf: ArrayView2<'a, f64>,
        psf_rad: usize,
        patch_area: usize,
    ) -> Self {
        let params = PacoParams {
            psf_rad,
            patch_area: Some(patch_area),
            strategy: Strategy::Fast,
            ..Default::default()
        };
        FastPaco {
            cube: image_stack,
            angles,
            psf,
            params,
        }
    }

    /// `PACOCalc(phi0s)`: a and b at the given (y, x) positions, or the full grid (row-major)
    /// when `phi0s` is `None`.
    pub fn paco_calc(&self, phi0s: Option<&[(usize, usize)]>) -> Result<(Vec<f64>, Vec<f64>)> {
        match phi0s {
            Some(p) => paco_ab_at(self.cube, self.angles, self.psf, &self.params, p),
            None => {
                let m = paco(self.cube, self.angles, self.psf, &self.params)?;
                Ok((m.a.iter().copied().collect(), m.b.iter().copied().collect()))
            }
        }
    }

    /// `run()`: the S/N and flux maps.
    pub fn run(&self) -> Result<PacoMaps> {
        paco(self.cube, self.angles, self.psf, &self.params)
    }
}

impl<'a> FullPaco<'a> {
    /// `FullPACO(image_stack, angles, psf, psf_rad, patch_area)`.
    pub fn new(
        image_stack: ArrayView3<'a, f64>,
        angles: ArrayView1<'a, f64>,
        psf: ArrayView2<'a, f64>,
        psf_rad: usize,
        patch_area: usize,
    ) -> Self {
        let mut inner = FastPaco::new(image_stack, angles, psf, psf_rad, patch_area);
        inner.params.strategy = Strategy::Full;
        FullPaco { inner }
    }

    /// Settings (mutable).
    pub fn params_mut(&mut self) -> &mut PacoParams {
        &mut self.inner.params
    }

    /// `PACOCalc(phi0s)`, see [`FastPaco::paco_calc`].
    pub fn paco_calc(&self, phi0s: Option<&[(usize, usize)]>) -> Result<(Vec<f64>, Vec<f64>)> {
        self.inner.paco_calc(phi0s)
    }

    /// `run()`: the S/N and flux maps.
    pub fn run(&self) -> Result<PacoMaps> {
        self.inner.run()
    }
}

impl<'a> FastPaco<'a> {
    /// Settings (mutable).
    pub fn params_mut(&mut self) -> &mut PacoParams {
        &mut self.params
    }
}

/// Optional "calibrated S/N" (spec §9, off by default): the S/N divided by a robust per-annulus
/// spread, `1.4826·MAD` over 1-px annuli about `center`, leaving out pixels within
/// `exclude_radius` of the `exclude` positions (candidates). Annuli with fewer than 8 usable
/// pixels, or a zero spread, give NaN.
pub fn calibrated_snr(
    snr: &Array2<f64>,
    center: (f64, f64),
    exclude: &[(usize, usize)],
    exclude_radius: f64,
) -> Array2<f64> {
    let (h, w) = snr.dim();
    let ring = |y: usize, x: usize| {
        let (dy, dx) = (y as f64 - center.0, x as f64 - center.1);
        (dy * dy + dx * dx).sqrt().round() as usize
    };
    let excluded = |y: usize, x: usize| {
        exclude.iter().any(|&(ey, ex)| {
            let (dy, dx) = (y as f64 - ey as f64, x as f64 - ex as f64);
            dy * dy + dx * dx <= exclude_radius * exclude_radius
        })
    };
    let nrings = ring(0, 0)
        .max(ring(0, w - 1))
        .max(ring(h - 1, 0))
        .max(ring(h - 1, w - 1))
        + 1;
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); nrings];
    for ((y, x), &v) in snr.indexed_iter() {
        if v.is_finite() && !excluded(y, x) {
            samples[ring(y, x)].push(v);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            0.5 * (v[n / 2 - 1] + v[n / 2])
        }
    };
    let spread: Vec<f64> = samples
        .iter_mut()
        .map(|s| {
            if s.len() < 8 {
                return f64::NAN;
            }
            let med = median(s);
            let mut dev: Vec<f64> = s.iter().map(|v| (v - med).abs()).collect();
            let mad = 1.4826 * median(&mut dev);
            if mad > 0.0 { mad } else { f64::NAN }
        })
        .collect();
    Array2::from_shape_fn((h, w), |(y, x)| snr[[y, x]] / spread[ring(y, x)])
}

/// A sub-pixel S/N peak found by [`refine_peak`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SubpixelPeak {
    /// Row of the best position in the derotated (output) frame.
    pub y: f64,
    /// Column of the best position.
    pub x: f64,
    /// S/N = b/√a there.
    pub snr: f64,
    /// b/a there (biased low, see [`unbiased_flux`]).
    pub flux: f64,
}

/// Optional astrometry (spec §9): evaluate the S/N at fractional output positions on a grid of
/// `step` pixels within `half_width` pixels of `start` (y, x), along the exact sub-pixel
/// trajectories of [`PacoJob::ab_along`] (use sub-pixel templates, e.g. `SubPixel::VipFft` or
/// `Table`, for this to mean anything), and return the best one. Positions whose trajectory
/// fails the edge rule are skipped; an error if none is valid or the arguments are not positive
/// and finite.
pub fn refine_peak(
    job: &PacoJob<'_>,
    start: (f64, f64),
    step: f64,
    half_width: f64,
) -> Result<SubpixelPeak> {
    let step_ok = step.is_finite() && step > 0.0;
    let width_ok = half_width.is_finite() && half_width >= 0.0;
    if !step_ok || !width_ok {
        return Err(BridgeError::invalid_argument(
            "refine_peak",
            format!("step ({step}) must be positive and half_width ({half_width}) non-negative"),
        ));
    }
    if !(start.0.is_finite() && start.1.is_finite()) {
        return Err(BridgeError::invalid_argument(
            "refine_peak",
            "the start position must be finite",
        ));
    }
    let n = (half_width / step).floor() as i64;
    if n > 64 {
        return Err(BridgeError::invalid_argument(
            "refine_peak",
            format!(
                "{} grid points per axis is too many (at most 129)",
                2 * n + 1
            ),
        ));
    }
    let geom = job.geom;
    let mut grid = Vec::new();
    let mut positions = Vec::new();
    for i in -n..=n {
        for j in -n..=n {
            let (y0, x0) = (start.0 + i as f64 * step, start.1 + j as f64 * step);
            grid.push((y0, x0));
            positions.extend(job.angles.iter().map(|&ang| geom.position(y0, x0, ang)));
        }
    }
    let (a, b) = job.ab_along(&positions)?;
    grid.iter()
        .zip(a.iter().zip(&b))
        .filter(|(_, (a, b))| a.is_finite() && b.is_finite() && **a > 0.0)
        .map(|(&(y, x), (&a, &b))| SubpixelPeak {
            y,
            x,
            snr: b / a.sqrt(),
            flux: b / a,
        })
        .max_by(|p, q| p.snr.total_cmp(&q.snr))
        .ok_or_else(|| {
            BridgeError::InvalidInput(format!(
                "no valid trajectory within {half_width} px of ({}, {})",
                start.0, start.1
            ))
        })
}
