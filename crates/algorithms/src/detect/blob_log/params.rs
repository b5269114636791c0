//! The settings of [`blob_log`](super::blob_log): [`BlobLogParams`] with its validation and its σ
//! list (NumPy `linspace`/`logspace` in the working type, spec §1.4), and the input scaling
//! [`Prescale`] (spec §1.3).

use bridge_core::{BridgeError, Result};

use crate::detect::real::Real;

/// Input scaling before the LoG (spec §1.3).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Prescale {
    /// scikit-image `img_as_float`: unsigned integers divided by the dtype maximum, floats
    /// unchanged.
    #[default]
    Legacy,
    /// `(x − min)/(max − min)` per frame, in the working type (float32 for float32 frames);
    /// an error on a constant frame. A range that overflows the working type is rescaled as
    /// scikit-image (main) does it: `(x/2 − min/2)/(max/2 − min/2)`.
    MinMax,
    /// `(x − c)/(d − c)` (halved first like [`Prescale::MinMax`] when `d − c` overflows); an
    /// error unless `c < d`.
    Range(f64, f64),
    /// Values unchanged (integers are converted to f64).
    None,
}

impl std::str::FromStr for Prescale {
    type Err = BridgeError;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "legacy" => Ok(Prescale::Legacy),
            "minmax" => Ok(Prescale::MinMax),
            "none" => Ok(Prescale::None),
            other => {
                if let Some(rest) = other.strip_prefix("range:") {
                    let mut it = rest.split(',');
                    let c = it.next().and_then(|v| v.trim().parse::<f64>().ok());
                    let d = it.next().and_then(|v| v.trim().parse::<f64>().ok());
                    if let (Some(c), Some(d), None) = (c, d, it.next()) {
                        return Ok(Prescale::Range(c, d));
                    }
                }
                Err(BridgeError::invalid_argument(
                    "prescale",
                    format!("{s:?}: expected legacy, minmax, none or range:C,D"),
                ))
            }
        }
    }
}

/// The largest accepted [`BlobLogParams::num_sigma`]: a scale space of more scales than this is
/// a mistake (scikit-image's default is 10), and each scale costs a full f64 image per frame.
pub const MAX_NUM_SIGMA: usize = 1000;

/// Whether `exclude_border` `(rows, cols)` leaves no pixel of an `h`×`w` frame to search: a
/// border of at least half a side (`2·b ≥ side`, compared without the overflow of a huge
/// border, which any `usize` may be).
pub(crate) fn border_covers(border: (usize, usize), h: usize, w: usize) -> bool {
    border.0 >= h.div_ceil(2) || border.1 >= w.div_ceil(2)
}

/// Parameters of [`blob_log`](crate::detect::blob_log::blob_log); [`Default`] gives
/// scikit-image's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct BlobLogParams {
    /// Smallest σ (default 1).
    pub min_sigma: f64,
    /// Largest σ (default 50).
    pub max_sigma: f64,
    /// Number of scales (default 10).
    pub num_sigma: usize,
    /// Absolute threshold (default `Some(0.2)`); `None` means the cube minimum.
    pub threshold: Option<f64>,
    /// Relative threshold: the threshold becomes `max(thr, threshold_rel · max(cube))`.
    pub threshold_rel: Option<f64>,
    /// Overlap fraction above which the smaller blob is removed (default 0.5).
    pub overlap: f64,
    /// Logarithmically spaced scales.
    pub log_scale: bool,
    /// Peaks within this many pixels of the border are dropped `(rows, cols)`; default `(0, 0)`.
    pub exclude_border: (usize, usize),
    /// Input scaling (crate extension, default [`Prescale::Legacy`]).
    pub prescale: Prescale,
}

impl Default for BlobLogParams {
    fn default() -> Self {
        BlobLogParams {
            min_sigma: 1.0,
            max_sigma: 50.0,
            num_sigma: 10,
            threshold: Some(0.2),
            threshold_rel: None,
            overlap: 0.5,
            log_scale: false,
            exclude_border: (0, 0),
            prescale: Prescale::Legacy,
        }
    }
}

impl BlobLogParams {
    /// The defaults of the seed's movie detector ([`crate::detect::LogDetector`]): σ from 1 to
    /// 3 in 10 scales, no absolute threshold (the cube's minimum), `threshold_rel` 0.2; the rest
    /// as [`Default`] (scikit-image's).
    pub fn seed() -> Self {
        BlobLogParams {
            max_sigma: 3.0,
            threshold: None,
            threshold_rel: Some(0.2),
            ..Default::default()
        }
    }

    /// Check every parameter.
    pub fn validate(&self) -> Result<()> {
        let bad = |n: &str, r: String| Err(BridgeError::invalid_argument(n, r));
        if !(self.min_sigma.is_finite() && self.min_sigma > 0.0) {
            return bad(
                "min_sigma",
                format!("must be a positive number, got {}", self.min_sigma),
            );
        }
        if !(self.max_sigma.is_finite() && self.max_sigma > 0.0) {
            return bad(
                "max_sigma",
                format!("must be a positive number, got {}", self.max_sigma),
            );
        }
        if self.min_sigma > self.max_sigma {
            return bad(
                "min_sigma",
                format!(
                    "min_sigma ({}) is larger than max_sigma ({})",
                    self.min_sigma, self.max_sigma
                ),
            );
        }
        if self.num_sigma == 0 || self.num_sigma > MAX_NUM_SIGMA {
            return bad(
                "num_sigma",
                format!(
                    "must be in 1..={MAX_NUM_SIGMA} (scales of the LoG scale space), got {}",
                    self.num_sigma
                ),
            );
        }
        if self.max_sigma > 1.0e4 {
            return bad(
                "max_sigma",
                format!("{} is unreasonably large", self.max_sigma),
            );
        }
        if let Some(t) = self.threshold
            && !t.is_finite()
        {
            return bad("threshold", format!("must be finite, got {t}"));
        }
        if let Some(t) = self.threshold_rel
            && !t.is_finite()
        {
            return bad("threshold_rel", format!("must be finite, got {t}"));
        }
        if !(0.0..=1.0).contains(&self.overlap) {
            return bad(
                "overlap",
                format!("must lie in [0, 1], got {}", self.overlap),
            );
        }
        if let Prescale::Range(c, d) = self.prescale
            && !(c.is_finite() && d.is_finite() && c < d)
        {
            return bad("prescale", format!("range({c}, {d}) needs finite c < d"));
        }
        Ok(())
    }

    /// The σ list in the working type (NumPy `linspace`/`logspace` semantics).
    pub fn sigma_list<T: Real>(&self) -> Vec<T> {
        sigma_list::<T>(
            self.min_sigma,
            self.max_sigma,
            self.num_sigma,
            self.log_scale,
        )
    }
}

/// NumPy `linspace(start, stop, num)` evaluated in `T`.
fn linspace<T: Real>(start: T, stop: T, num: usize) -> Vec<T> {
    if num == 0 {
        return Vec::new(); // NumPy's `linspace(a, b, 0)`: empty
    }
    if num == 1 {
        return vec![start];
    }
    let div = T::from_f64((num - 1) as f64);
    let step = (stop - start) / div;
    let mut v: Vec<T> = (0..num)
        .map(|i| T::from_f64(i as f64) * step + start)
        .collect();
    if let Some(last) = v.last_mut() {
        *last = stop;
    }
    v
}

/// The σ list of `blob_log` in the working type `T` (spec §1.4; `sigma_lists.csv`).
pub fn sigma_list<T: Real>(min_sigma: f64, max_sigma: f64, num: usize, log_scale: bool) -> Vec<T> {
    let lo = T::from_f64(min_sigma);
    let hi = T::from_f64(max_sigma);
    if log_scale {
        let (a, b) = if T::IS_F32 {
            (
                T::from_f64(f64::from((lo.to_f64() as f32).log10())),
                T::from_f64(f64::from((hi.to_f64() as f32).log10())),
            )
        } else {
            (
                T::from_f64(lo.to_f64().log10()),
                T::from_f64(hi.to_f64().log10()),
            )
        };
        linspace(a, b, num)
            .into_iter()
            .map(|e| {
                if T::IS_F32 {
                    T::from_f64(f64::from(10f32.powf(e.to_f64() as f32)))
                } else {
                    T::from_f64(10f64.powf(e.to_f64()))
                }
            })
            .collect()
    } else {
        linspace(lo, hi, num)
    }
}
