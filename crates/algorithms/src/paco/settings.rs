//! PACO's settings: [`PacoParams`] and the enums of its modes (covariance formulas, trajectory
//! rounding, sub-pixel templates, edge rule, PSF normalisation, memory strategy, star centre).
//! The bottom of the module: it depends on nothing else in `paco`.

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

/// All PACO settings. The defaults are those of the PACO specification this port follows (the
/// paper's covariance and shrinkage, `trunc` trajectories, no sub-pixel templates, the PSF
/// normalised by its fitted Airy peak), which the command line's `paco` uses;
/// [`PacoParams::vip`] gives VIP 2.1.1's `FastPACO` settings, for maps equal to VIP's.
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
    /// lag table of a chunk of rows or of a batch of pixels, the per-batch template/pair
    /// buffers and the covariance scratch of large patches (see the `paco::gpu` module docs).
    /// Never changes results.
    pub max_tile_bytes: usize,
    /// Cancellation and progress, shared with the caller (not a setting: never changes
    /// results, and any two compare equal). The run checks it between bands of statistics
    /// rows (a row on the CPU), device batches and the pairs of a band, and returns
    /// [`bridge_core::BridgeError::Cancelled`] once it is cancelled; it counts the statistics
    /// rows done (the pairs, with sub-pixel templates on the CPU) against the total it sets.
    pub control: bridge_core::control::Control,
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
            control: bridge_core::control::Control::default(),
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
