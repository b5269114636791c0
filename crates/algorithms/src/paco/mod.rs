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
//! the 4 GB bound. Lower `max_tile_bytes` to trade speed for memory. A cube whose largest
//! |value| is outside `[2^-60, 2^60)` costs one more copy (`T·H·W·8`), scaled (see below).
//!
//! # Scale
//!
//! S/N does not depend on the cube's scale, and a, b, flux and std scale with it as
//! `1/s²`, `1/s`, `s` and `s`. The shrinkage works with fourth powers of the pixel values,
//! which under- or overflow for extreme cubes (issue 32: ×1e-100 gave S/N 52.6 instead of 6.91,
//! ×1e80 all-NaN maps), so [`PacoJob::new`] multiplies such a cube by the power of two that brings its
//! largest |value| into `[0.5, 1)` (exact; every back end, the multi-device run and
//! [`unbiased_flux`] compute on that working cube) and the back ends convert a and b back
//! exactly ([`PacoJob::ab_in_cube_units`]): S/N is bit-identical to the unscaled cube's, and
//! cubes within `[2^-60, 2^60)` are used as given. A largest |value| outside
//! `[2^-400, 2^400)` is an error (a would leave the double range). A device computing in float
//! also brings the cube into `[0.5, 1)` as it converts it. The PSF's scale does not need it: it
//! is normalised (or, with [`PsfNorm::None`] / [`PsfNorm::Factor`], defines the flux unit), and
//! S/N does not depend on it (to rounding, for PSFs ×1e-100 to ×1e150).
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
//!
//! # Layout
//!
//! From the bottom up; the files up to `cpu.rs` import only from files above them in this list,
//! never from this one:
//!
//! - `settings.rs`: [`PacoParams`] and its enums;
//! - `geometry.rs`: trajectories, pixel rules, the patch disk ([`Geometry`]);
//! - `psf/`: PSF normalisation, FFT shift, Airy fit, aperture photometry, quintic spline;
//! - `templates.rs`: the PSF template of every (φ0, ℓ) pair per sub-pixel mode;
//! - `stats.rs`: per-pixel mean, shrunk covariance and Cholesky;
//! - `job.rs`: [`PacoJob`], one run's validated inputs;
//! - `simd.rs`: the CPU's per-pixel kernels (portable and AVX2);
//! - `cpu.rs`: the CPU executor of both passes;
//! - `backend.rs`, `gpu.rs`, `gpu_kernels.rs`: device dispatch and the OpenCL / CUDA backends;
//! - `flux.rs`, `postprocess.rs`: unbiased flux, calibrated S/N, sub-pixel astrometry;
//! - this file: the entry points [`paco`] and [`paco_ab_at`], the maps, and [`FastPaco`] /
//!   [`FullPaco`] with the original package's vocabulary.

mod backend;
pub mod bench;
mod cpu;
mod dispatch;
mod flux;
mod geometry;
#[cfg(any(feature = "opencl", feature = "cuda"))]
pub mod gpu;
pub mod gpu_kernels;
mod input;
mod job;
mod multi;
mod postprocess;
mod psf;
mod settings;
mod simd;
mod stats;
mod templates;

use bridge_core::{BridgeError, Result};
use ndarray::{Array2, ArrayView1, ArrayView2, ArrayView3};

use crate::exec::DeviceHandle;
use backend::CpuBackend;

#[cfg(any(feature = "opencl", feature = "cuda"))]
pub use crate::Precision;
pub use backend::PacoBackend;
pub use dispatch::backend_for;
pub use flux::{FluxEstimate, FluxOptions, unbiased_flux};
pub use geometry::{Geometry, disk_area, disk_offsets};
#[cfg(feature = "cuda")]
pub use gpu::CudaPaco;
#[cfg(feature = "opencl")]
pub use gpu::OpenClPaco;
pub use input::paco_array;
pub use job::PacoJob;
pub use multi::{
    Member, MultiPolicy, PacoMulti, PacoShare, UnitPeer, UnitServer, paco_members, paco_on,
    serve_units,
};
pub use postprocess::{SubpixelPeak, calibrated_snr, refine_peak, snr_peaks};
pub use psf::{
    AiryFit, NormalizedPsf, aperture_flux, centroid, circle_rect_overlap, fit_airy, fit_airy_fwhm,
    normalize_psf, recenter,
};
pub use settings::{Center, EdgeRule, PacoParams, PsfNorm, Rounding, Strategy, SubPixel, Variant};

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

/// Run PACO on the full output grid, where the host arrays live: on the CPU
/// ([`paco_on_device`] runs it on an open device, [`paco_on`] on several).
pub fn paco(
    cube: ArrayView3<'_, f64>,
    angles: ArrayView1<'_, f64>,
    psf: ArrayView2<'_, f64>,
    params: &PacoParams,
) -> Result<PacoMaps> {
    paco_on_device(&DeviceHandle::cpu(), cube, angles, psf, params)
}

/// [`paco`] on `device` (`DeviceHandle::cpu()` or an open `opencl:N`/`cuda:N`): the same maps,
/// byte for byte where the device has doubles.
pub fn paco_on_device(
    device: &DeviceHandle,
    cube: ArrayView3<'_, f64>,
    angles: ArrayView1<'_, f64>,
    psf: ArrayView2<'_, f64>,
    params: &PacoParams,
) -> Result<PacoMaps> {
    let t0 = std::time::Instant::now();
    let job = PacoJob::new(cube, angles, psf, params)?;
    crate::detect::trace_span(t0, std::time::Instant::now(), || {
        "paco inputs checked and the PSF normalised (host)".into()
    });
    let backend = backend_for(device)?;
    let (a, b) = backend.ab_maps(&job)?;
    let t0 = std::time::Instant::now();
    let maps = maps_from_ab(a, b, &job);
    crate::detect::trace_span(t0, std::time::Instant::now(), || {
        "paco maps from a and b (host)".into()
    });
    Ok(maps)
}

/// The maps from a and b (in the cube's units). Every NaN becomes Rust's one NaN (a device
/// writes its own bit pattern), so the maps, and the files written from them, are the same bytes
/// on every device and device list.
fn maps_from_ab(mut a: Array2<f64>, mut b: Array2<f64>, job: &PacoJob<'_>) -> PacoMaps {
    for v in a.iter_mut().chain(b.iter_mut()) {
        if v.is_nan() {
            *v = f64::NAN;
        }
    }
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

/// a and b at an explicit list of (y, x) output positions (`phi0s`), on the CPU.
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
    CpuBackend.ab_at(&job, phi0s)
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
