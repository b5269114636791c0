//! The settings of [`locate_nd`](super::locate_nd): [`LocateNdParams`], one value per axis (or
//! one for every axis), resolved against the image's dimensions as trackpy's `validate_tuple`
//! and `locate` resolve them.

use bridge_core::{BridgeError, Result};

use crate::detect::locate::MAX_DIAMETER;

/// Parameters of [`locate_nd`](super::locate_nd): trackpy's `locate` on a 2-D image or a 3-D
/// volume with sizes per axis. A list of one value applies to every axis; otherwise a list has
/// one value per axis, in the image's axis order (`z, y, x` or `y, x`).
#[derive(Debug, Clone, PartialEq)]
pub struct LocateNdParams {
    /// Feature diameter per axis (odd).
    pub diameter: Vec<usize>,
    /// Minimum integrated brightness (strict `mass > minmass`).
    pub minmass: f64,
    /// Maximum radius of gyration (`size < maxsize`); only for an isotropic diameter.
    pub maxsize: Option<f64>,
    /// Minimum separation per axis (default `diameter + 1`).
    pub separation: Option<Vec<f64>>,
    /// Width of the Gaussian lowpass per axis (default 1; 0 skips the axis).
    pub noise_size: Vec<f64>,
    /// Boxcar width of the background per axis (default `diameter`, odd).
    pub smoothing_size: Option<Vec<usize>>,
    /// Bandpass clipping threshold (default 1 for integers, 1/255 for floats).
    pub threshold: Option<f64>,
    /// Look for dark features on a bright background.
    pub invert: bool,
    /// Percentile of the non-zero pixels that a maximum must exceed (default 64).
    pub percentile: f64,
    /// Keep only the `topn` brightest features.
    pub topn: Option<usize>,
    /// Apply the bandpass (default true).
    pub preprocess: bool,
    /// Maximum centroid iterations (default 10; 0 is read as 1, as trackpy does).
    pub max_iterations: usize,
    /// Compute size, ecc, signal, raw_mass and ep (default true).
    pub characterize: bool,
}

impl LocateNdParams {
    /// trackpy's defaults for a diameter per axis (or one for every axis).
    pub fn new(diameter: Vec<usize>) -> Self {
        LocateNdParams {
            diameter,
            minmass: 0.0,
            maxsize: None,
            separation: None,
            noise_size: vec![1.0],
            smoothing_size: None,
            threshold: None,
            invert: false,
            percentile: 64.0,
            topn: None,
            preprocess: true,
            max_iterations: 10,
            characterize: true,
        }
    }

    /// Checks every setting for an image of `ndim` axes as trackpy checks them (what
    /// [`locate_nd`](super::locate_nd) does first), without an image.
    pub fn validate(&self, ndim: usize) -> Result<()> {
        self.resolve(ndim).map(|_| ())
    }

    /// The per-axis settings for an image of `ndim` axes, checked as trackpy checks them.
    pub(super) fn resolve(&self, ndim: usize) -> Result<Resolved> {
        crate::detect::locate::params::check_iterations(self.max_iterations)?;
        let diameter = per_axis("diameter", &self.diameter, ndim)?;
        for &d in &diameter {
            if d.is_multiple_of(2) {
                return bad(
                    "diameter",
                    format!("must be odd integers (round up), got {:?}", self.diameter),
                );
            }
            if d > MAX_DIAMETER {
                return bad(
                    "diameter",
                    format!("must be at most {MAX_DIAMETER} pixels, got {d}"),
                );
            }
        }
        let radius: Vec<usize> = diameter.iter().map(|d| d / 2).collect();
        let isotropic = radius.windows(2).all(|w| w[0] == w[1]);
        if !isotropic && self.maxsize.is_some() {
            return bad(
                "maxsize",
                "filtering by size is not available for anisotropic features".into(),
            );
        }
        let separation = match &self.separation {
            None => diameter.iter().map(|&d| (d + 1) as f64).collect(),
            Some(s) => per_axis("separation", s, ndim)?,
        };
        if separation.iter().any(|s| !(s.is_finite() && *s >= 0.0)) {
            return bad(
                "separation",
                format!("must be non-negative, got {separation:?}"),
            );
        }
        if separation.iter().any(|&s| s > MAX_DIAMETER as f64) {
            return bad(
                "separation",
                format!("must be at most {MAX_DIAMETER} pixels, got {separation:?}"),
            );
        }
        let smoothing = match &self.smoothing_size {
            None => diameter.clone(),
            Some(s) => per_axis("smoothing_size", s, ndim)?,
        };
        let noise = per_axis("noise_size", &self.noise_size, ndim)?;
        if noise.iter().any(|n| !(n.is_finite() && *n >= 0.0)) {
            return bad("noise_size", format!("must be non-negative, got {noise:?}"));
        }
        if self.preprocess {
            if smoothing
                .iter()
                .any(|s| s.is_multiple_of(2) || *s > MAX_DIAMETER)
            {
                return bad(
                    "smoothing_size",
                    format!("must be odd integers of at most {MAX_DIAMETER}, got {smoothing:?}"),
                );
            }
            if noise.iter().zip(&smoothing).any(|(n, s)| *n >= *s as f64) {
                return bad(
                    "noise_size",
                    format!(
                        "the smoothing length scale {smoothing:?} must be larger than the noise \
                         length scale {noise:?} on every axis"
                    ),
                );
            }
        }
        self.check_scalars()?;
        Ok(Resolved {
            radius,
            isotropic,
            separation,
            smoothing,
            noise,
        })
    }

    /// The checks of the settings that are one number (those of the 2-D parameters).
    fn check_scalars(&self) -> Result<()> {
        crate::detect::locate::params::check_scalars(
            self.percentile,
            self.minmass,
            self.maxsize,
            self.threshold,
        )
    }
}

/// The settings of one run, one value per axis.
#[derive(Debug, Clone)]
pub(super) struct Resolved {
    /// Mask radius per axis (`diameter / 2`).
    pub(super) radius: Vec<usize>,
    /// Whether every axis has the same radius.
    pub(super) isotropic: bool,
    /// Minimum separation per axis.
    pub(super) separation: Vec<f64>,
    /// Boxcar width per axis.
    pub(super) smoothing: Vec<usize>,
    /// Lowpass width per axis.
    pub(super) noise: Vec<f64>,
}

impl Resolved {
    /// trackpy's margin per axis: `max(radius, separation // 2 − 1, smoothing // 2)`.
    pub(super) fn margin(&self) -> Vec<usize> {
        self.radius
            .iter()
            .zip(&self.separation)
            .zip(&self.smoothing)
            .map(|((&r, &s), &sm)| {
                let half = ((s / 2.0).floor() - 1.0).max(0.0);
                let half = if half >= usize::MAX as f64 {
                    usize::MAX
                } else {
                    half as usize
                };
                r.max(half).max(sm / 2)
            })
            .collect()
    }

    /// The side of the grey-dilation box per axis: `int(2·separation/√ndim)`, at least 1.
    pub(super) fn box_size(&self) -> Vec<usize> {
        let root = (self.radius.len() as f64).sqrt();
        self.separation
            .iter()
            .map(|&s| ((2.0 * s / root) as usize).max(1))
            .collect()
    }
}

/// An `InvalidInput` naming argument `name`.
fn bad<T>(name: &str, reason: String) -> Result<T> {
    Err(BridgeError::invalid_argument(name, reason))
}

/// `values` for `ndim` axes: one value repeated, or exactly `ndim` values (trackpy's
/// `validate_tuple`).
fn per_axis<T: Clone + std::fmt::Debug>(name: &str, values: &[T], ndim: usize) -> Result<Vec<T>> {
    match values.len() {
        1 => Ok(vec![values[0].clone(); ndim]),
        n if n == ndim => Ok(values.to_vec()),
        n => bad(
            name,
            format!(
                "needs one value or one per axis ({ndim} for a {ndim}-D image), got {n}: {values:?}"
            ),
        ),
    }
}
