//! The demo's fixed scenario: sizes of the generated data, the planet, and the settings of
//! detection, linking, PACO and the figures (every number the summary reports).

use algorithms::synth::adi::PlanetAdiParams;

/// Movie: frames, frame size, particles, Brownian step (σ per axis per frame, px).
pub(super) const MOVIE: (usize, usize, usize, f64) = (100, 256, 50, 1.0);
/// A detection matches a true particle within this distance (px).
pub(super) const MATCH_RADIUS: f64 = 2.0;
/// Linking: search range (px) and memory (frames).
pub(super) const LINK: (f64, usize) = (5.0, 2);
/// ADI cube: frames and frame size.
pub(super) const ADI: (usize, usize) = (48, 80);
/// PSF full width at half maximum (px).
pub(super) const FWHM: f64 = 4.0;
/// Planet: separation (px), position angle (degrees counter-clockwise from +x in array
/// coordinates, in the derotated frame) and contrast (planet / star peak).
pub(super) const PLANET: (f64, f64, f64) = (18.0, 30.0, 6e-3);
/// Peak of the unocculted star in the PSF frame (counts).
pub(super) const STAR_PEAK: f64 = 20_000.0;
/// Total field rotation over the sequence (degrees).
pub(super) const ROTATION: f64 = 80.0;
/// Inner working angle (px): the planet search and the false-alarm statistics ignore the
/// coronagraph-dominated centre.
pub(super) const IWA: f64 = 2.0 * FWHM;
/// Canvas scale of the overlay (canvas pixels per image pixel).
pub(super) const OVERLAY_SCALE: usize = 2;
/// Largest side of the S/N map in the PNG (canvas pixels).
pub(super) const SNR_PNG_SIDE: usize = 480;

/// The ADI generator's settings of this scenario ([`FWHM`], [`PLANET`], [`STAR_PEAK`],
/// [`ROTATION`]).
pub(super) fn adi_params() -> PlanetAdiParams {
    let (separation, angle_deg, contrast) = PLANET;
    PlanetAdiParams {
        fwhm: FWHM,
        separation,
        angle_deg,
        contrast,
        star_peak: STAR_PEAK,
        rotation_deg: ROTATION,
    }
}
