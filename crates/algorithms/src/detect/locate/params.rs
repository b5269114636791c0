//! The settings of [`locate`](super::locate): [`LocateParams`], trackpy's defaults and their
//! validation.

use bridge_core::{BridgeError, Result};

/// The largest `diameter` and `smoothing_size` accepted (pixels): a feature or background
/// window wider than any frame finds nothing, and sizes derived from larger values would
/// overflow.
pub const MAX_DIAMETER: usize = 65_535;

/// Parameters of [`locate`](crate::detect::locate::locate); `LocateParams::new(diameter)` gives
/// trackpy's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct LocateParams {
    /// Feature diameter in pixels (odd).
    pub diameter: usize,
    /// Minimum integrated brightness (strict `mass > minmass`); trackpy's `None` is 0.
    pub minmass: f64,
    /// Maximum radius of gyration (`size < maxsize`).
    pub maxsize: Option<f64>,
    /// Minimum separation between features (default `diameter + 1`).
    pub separation: Option<f64>,
    /// Width of the Gaussian lowpass (default 1).
    pub noise_size: f64,
    /// Boxcar width of the background (default `diameter`, odd).
    pub smoothing_size: Option<usize>,
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
    /// Maximum centroid iterations (default 10).
    pub max_iterations: usize,
    /// Compute size, ecc, signal, raw_mass and ep (default true).
    pub characterize: bool,
}

impl LocateParams {
    /// trackpy's defaults for a given diameter.
    pub fn new(diameter: usize) -> Self {
        LocateParams {
            diameter,
            minmass: 0.0,
            maxsize: None,
            separation: None,
            noise_size: 1.0,
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

    /// Check every parameter.
    pub fn validate(&self) -> Result<()> {
        let bad = |n: &str, r: String| Err(BridgeError::invalid_argument(n, r));
        if self.diameter == 0 || self.diameter.is_multiple_of(2) {
            return bad(
                "diameter",
                format!("must be a positive odd integer, got {}", self.diameter),
            );
        }
        if self.diameter > MAX_DIAMETER {
            return bad(
                "diameter",
                format!(
                    "must be at most {MAX_DIAMETER} pixels, got {}",
                    self.diameter
                ),
            );
        }
        let sm = self.smoothing_size.unwrap_or(self.diameter);
        if sm.is_multiple_of(2) {
            return bad("smoothing_size", format!("must be odd, got {sm}"));
        }
        if sm > MAX_DIAMETER {
            return bad(
                "smoothing_size",
                format!("must be at most {MAX_DIAMETER} pixels, got {sm}"),
            );
        }
        if !(self.noise_size.is_finite() && self.noise_size >= 0.0)
            || (sm as f64) <= self.noise_size
        {
            return bad(
                "noise_size",
                format!(
                    "must be non-negative and smaller than smoothing_size ({sm}), got {}",
                    self.noise_size
                ),
            );
        }
        if let Some(s) = self.separation
            && !(s.is_finite() && s >= 0.0)
        {
            return bad("separation", format!("must be non-negative, got {s}"));
        }
        // the maxima's dilation pads each row by the separation
        if let Some(s) = self.separation
            && s > MAX_DIAMETER as f64
        {
            return bad(
                "separation",
                format!("must be at most {MAX_DIAMETER} pixels, got {s:e}"),
            );
        }
        check_iterations(self.max_iterations)?;
        check_scalars(self.percentile, self.minmass, self.maxsize, self.threshold)
    }
}

/// The most refinement iterations `max_iterations` may ask for (trackpy's default is 10; each
/// moves every feature's centre once more).
pub const MAX_ITERATIONS: usize = 10_000;

/// `max_iterations` within [`MAX_ITERATIONS`] (0: trackpy's single centroid, no iteration).
pub(crate) fn check_iterations(n: usize) -> Result<()> {
    if n > MAX_ITERATIONS {
        return Err(BridgeError::invalid_argument(
            "max_iterations",
            format!("must be at most {MAX_ITERATIONS}, got {n}"),
        ));
    }
    Ok(())
}

/// The checks of trackpy's one-number settings, shared by [`LocateParams::validate`] and the
/// n-D [`LocateNdParams`](super::LocateNdParams).
pub(crate) fn check_scalars(
    percentile: f64,
    minmass: f64,
    maxsize: Option<f64>,
    threshold: Option<f64>,
) -> Result<()> {
    let bad = |n: &str, r: String| Err(BridgeError::invalid_argument(n, r));
    if !(0.0..=100.0).contains(&percentile) {
        return bad(
            "percentile",
            format!("must lie in [0, 100], got {percentile}"),
        );
    }
    if !minmass.is_finite() {
        return bad("minmass", "must be finite".into());
    }
    // NaN compares false with every size and pixel: it would silently remove every feature
    if let Some(m) = maxsize
        && m.is_nan()
    {
        return bad(
            "maxsize",
            "must be a number (an infinite one sets no limit), got NaN".into(),
        );
    }
    if let Some(t) = threshold
        && !t.is_finite()
    {
        return bad("threshold", format!("must be finite, got {t}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A separation beyond [`MAX_DIAMETER`] is refused (the maxima's dilation pads each row by
    /// it: 1e10 asked for terabytes); at the limit it is accepted.
    #[test]
    fn separation_is_bounded() {
        let with = |s: f64| LocateParams {
            separation: Some(s),
            ..LocateParams::new(7)
        };
        assert!(with(MAX_DIAMETER as f64).validate().is_ok());
        for s in [
            MAX_DIAMETER as f64 + 0.5,
            1e8,
            1e12,
            f64::INFINITY,
            f64::NAN,
            -1.0,
        ] {
            let e = with(s).validate().unwrap_err().to_string();
            assert!(e.contains("separation"), "{e}");
        }
    }
}
