//! PSF handling (spec §5): normalisation to unit flux in a 1-FWHM-diameter aperture
//! ([`normalize_psf`], here), and in the submodules VIP's FFT sub-pixel shift in closed form
//! (`fft_shift`), aperture photometry (`aperture`), the Airy FWHM fit, centroid and recentring
//! (`airy`), and the interpolating quintic B-spline of the PSF (`spline5`). The patch templates
//! built from them are in `paco/templates.rs`.

mod airy;
mod aperture;
mod fft_shift;
mod spline5;

use bridge_core::{BridgeError, Result};
use ndarray::{Array2, ArrayView2};

use super::settings::PsfNorm;

pub use airy::{AiryFit, centroid, fit_airy, fit_airy_fwhm, recenter};
pub use aperture::{aperture_flux, circle_rect_overlap};
pub(crate) use fft_shift::VipShifter;
pub(crate) use spline5::Spline5Templates;

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
            // S/N does not depend on it; beyond this the template's squares (and the
            // statistics' products of them) leave the doubles' range and every map is NaN
            if !(1e-100..=1e100).contains(&f) {
                return Err(BridgeError::invalid_argument(
                    "psf_norm",
                    format!("factor {f:e} is outside [1e-100, 1e100]"),
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
        return Err(BridgeError::InvalidInput(
            format!("PSF aperture flux is {factor}; cannot normalise").into(),
        ));
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
