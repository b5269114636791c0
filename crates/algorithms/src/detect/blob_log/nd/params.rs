//! The settings of [`blob_log_nd`](super::blob_log_nd): [`BlobLogNdParams`] with its scalar or
//! per-axis σ ([`Sigma`]) and border ([`Border`]), their validation against an image shape, and
//! the σ table (NumPy's vectorised `linspace`/`logspace` in the working type) with each scale's
//! factor `mean(σ)**2`.

use bridge_core::{BridgeError, Result};

use crate::detect::blob_log::MAX_NUM_SIGMA;
use crate::detect::real::Real;

/// A σ of `blob_log_nd`: one value for every axis, or one per axis (scikit-image's
/// `min_sigma`/`max_sigma` as a scalar or a sequence).
#[derive(Debug, Clone, PartialEq)]
pub enum Sigma {
    /// The same σ on every axis (a Python scalar).
    Scalar(f64),
    /// One σ per axis, in axis order (a Python sequence; its length must be the image's ndim).
    PerAxis(Vec<f64>),
}

impl From<f64> for Sigma {
    fn from(v: f64) -> Self {
        Sigma::Scalar(v)
    }
}

impl From<Vec<f64>> for Sigma {
    fn from(v: Vec<f64>) -> Self {
        Sigma::PerAxis(v)
    }
}

impl Sigma {
    /// The σ of every axis of an `ndim`-dimensional image (a scalar broadcast), or an
    /// [`BridgeError::InvalidArgument`] naming `name` for a sequence of another length.
    fn per_axis(&self, ndim: usize, name: &str) -> Result<Vec<f64>> {
        match self {
            Sigma::Scalar(v) => Ok(vec![*v; ndim]),
            Sigma::PerAxis(v) if v.len() == ndim => Ok(v.clone()),
            Sigma::PerAxis(v) => Err(BridgeError::invalid_argument(
                name,
                format!(
                    "has {} values but the image has {ndim} axes (one σ per axis, or a scalar)",
                    v.len()
                ),
            )),
        }
    }
}

/// `exclude_border` of `blob_log_nd`, as scikit-image 0.26 reads it.
///
/// `blob_log` hands `_format_exclude_border(ndim, exclude_border)` to `peak_local_max`: an int
/// (and a bool, which Python counts as an int: the `exclude_border is True` error branch is
/// never reached) becomes that width on every spatial axis, a tuple one width per axis; the
/// scale axis always gets 0. So `True` excludes 1 pixel and `False` none
/// ([`Border::from_bool`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Border {
    /// No border (`False` or `0`; the default).
    #[default]
    None,
    /// The same width on every axis (an int; `True` is 1).
    All(usize),
    /// One width per axis (a tuple; its length must be the image's ndim).
    PerAxis(Vec<usize>),
}

impl Border {
    /// scikit-image's reading of a bool: `True` is the int 1, `False` the int 0.
    pub fn from_bool(b: bool) -> Self {
        if b { Border::All(1) } else { Border::None }
    }

    /// The width of every axis of an `ndim`-dimensional image.
    pub(super) fn widths(&self, ndim: usize) -> Result<Vec<usize>> {
        match self {
            Border::None => Ok(vec![0; ndim]),
            Border::All(b) => Ok(vec![*b; ndim]),
            Border::PerAxis(v) if v.len() == ndim => Ok(v.clone()),
            Border::PerAxis(v) => Err(BridgeError::invalid_argument(
                "exclude_border",
                format!(
                    "has {} widths but the image has {ndim} axes (scikit-image: `exclude_border` \
                     should have the same length as the dimensionality of the image)",
                    v.len()
                ),
            )),
        }
    }
}

/// Parameters of [`blob_log_nd`](super::blob_log_nd); [`Default`] gives scikit-image's
/// defaults (`min_sigma=1, max_sigma=50, num_sigma=10, threshold=0.2, overlap=0.5,
/// log_scale=False, threshold_rel=None, exclude_border=False`).
#[derive(Debug, Clone, PartialEq)]
pub struct BlobLogNdParams {
    /// Smallest σ (scalar or per axis).
    pub min_sigma: Sigma,
    /// Largest σ (scalar or per axis).
    pub max_sigma: Sigma,
    /// Number of scales, `1..=`[`MAX_NUM_SIGMA`].
    pub num_sigma: usize,
    /// Absolute threshold; `None` means the scale-space minimum.
    pub threshold: Option<f64>,
    /// Relative threshold: the threshold becomes `max(threshold, threshold_rel · max(cube))`.
    pub threshold_rel: Option<f64>,
    /// Overlap fraction above which the smaller blob is removed, in `[0, 1]`.
    pub overlap: f64,
    /// Logarithmically spaced scales.
    pub log_scale: bool,
    /// Peaks within this many pixels of the border are dropped.
    pub exclude_border: Border,
}

impl Default for BlobLogNdParams {
    fn default() -> Self {
        BlobLogNdParams {
            min_sigma: Sigma::Scalar(1.0),
            max_sigma: Sigma::Scalar(50.0),
            num_sigma: 10,
            threshold: Some(0.2),
            threshold_rel: None,
            overlap: 0.5,
            log_scale: false,
            exclude_border: Border::None,
        }
    }
}

/// The largest accepted σ (as the 2-D `blob_log`): kernels of `8σ + 1` taps.
const MAX_SIGMA: f64 = 1.0e4;

/// SciPy's `gaussian_filter` skips an axis whose σ is at most this (it would then not be a
/// Laplacian at all), so smaller σ are refused.
const MIN_SIGMA: f64 = 1.0e-15;

/// What the parameters mean for one image: the per-axis σ bounds, the border widths and
/// whether the output has a single σ column.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Resolved {
    pub(super) min_sigma: Vec<f64>,
    pub(super) max_sigma: Vec<f64>,
    pub(super) border: Vec<usize>,
    /// Both σ were scalars: one σ column in the output (scikit-image's `scalar_sigma`).
    pub(super) scalar_sigma: bool,
}

impl BlobLogNdParams {
    /// Check every parameter against an image of shape `shape`, and resolve the σ and border
    /// to one value per axis.
    pub(super) fn resolve(&self, shape: &[usize]) -> Result<Resolved> {
        let bad = |n: &str, r: String| Err(BridgeError::invalid_argument(n, r));
        let ndim = shape.len();
        if ndim == 0 {
            return bad("image", "a 0-dimensional image has no blobs to find".into());
        }
        if let Some(a) = shape.iter().position(|&d| d == 0) {
            return bad("image", format!("axis {a} of shape {shape:?} is empty"));
        }
        let min_sigma = self.min_sigma.per_axis(ndim, "min_sigma")?;
        let max_sigma = self.max_sigma.per_axis(ndim, "max_sigma")?;
        for (name, v) in [("min_sigma", &min_sigma), ("max_sigma", &max_sigma)] {
            if let Some(s) = v.iter().find(|s| !(s.is_finite() && **s > MIN_SIGMA)) {
                return bad(name, format!("must be positive numbers (> 1e-15), got {s}"));
            }
            if let Some(s) = v.iter().find(|s| **s > MAX_SIGMA) {
                return bad(name, format!("{s} is unreasonably large"));
            }
        }
        if let Some(a) = (0..ndim).find(|&a| min_sigma[a] > max_sigma[a]) {
            return bad(
                "min_sigma",
                format!(
                    "min_sigma ({}) is larger than max_sigma ({}) on axis {a}",
                    min_sigma[a], max_sigma[a]
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
        for (name, t) in [
            ("threshold", self.threshold),
            ("threshold_rel", self.threshold_rel),
        ] {
            if let Some(t) = t
                && !t.is_finite()
            {
                return bad(name, format!("must be finite, got {t}"));
            }
        }
        if !(0.0..=1.0).contains(&self.overlap) {
            return bad(
                "overlap",
                format!("must lie in [0, 1], got {}", self.overlap),
            );
        }
        let border = self.exclude_border.widths(ndim)?;
        let scalar_sigma = matches!(
            (&self.min_sigma, &self.max_sigma),
            (Sigma::Scalar(_), Sigma::Scalar(_))
        );
        Ok(Resolved {
            min_sigma,
            max_sigma,
            border,
            scalar_sigma,
        })
    }
}

/// `x ** e` of a NumPy scalar of the working type: the C library's `pow`/`powf` (NumPy's scalar
/// power; `powf(x, 2)` is not always `x · x` at a tie). The exponent goes through
/// [`std::hint::black_box`] so that the compiler does not turn `pow(x, 2)` into `x · x`.
pub(super) fn scalar_pow<T: Real>(x: T, e: f64) -> T {
    let e = std::hint::black_box(e);
    if T::IS_F32 {
        T::from_f64(f64::from((x.to_f64() as f32).powf(e as f32)))
    } else {
        T::from_f64(x.to_f64().powf(e))
    }
}

/// NumPy's `add.reduce` of a short contiguous array in `T`: a running sum from zero below 8
/// values, NumPy's 8-way pairwise blocks from 8 on (as `filters::numpy_sum`, in `T`).
pub(super) fn numpy_sum_t<T: Real>(a: &[T]) -> T {
    let n = a.len();
    if n < 8 {
        return a.iter().fold(T::ZERO, |s, &v| s + v);
    }
    if n <= 128 {
        let mut r = [T::ZERO; 8];
        r.copy_from_slice(&a[..8]);
        let full = n - n % 8;
        for c in a[8..full].chunks_exact(8) {
            for (rk, &v) in r.iter_mut().zip(c) {
                *rk = *rk + v;
            }
        }
        let res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        return a[full..].iter().fold(res, |s, &v| s + v);
    }
    let mut n2 = n / 2;
    n2 -= n2 % 8;
    numpy_sum_t(&a[..n2]) + numpy_sum_t(&a[n2..])
}

/// NumPy's `linspace` of one axis in `T` (`any_zero`: some axis of the vectorised call has a
/// zero step, and then every axis is computed as `i / div · delta`, NumPy's denormal guard).
fn linspace_axis<T: Real>(start: T, stop: T, num: usize, any_zero: bool) -> Vec<T> {
    if num == 1 {
        // div = 0: `y = arange(1) * delta + start`
        return vec![start];
    }
    let div = T::from_f64((num - 1) as f64);
    let delta = stop - start;
    let step = delta / div;
    let mut v: Vec<T> = (0..num)
        .map(|i| {
            let i = T::from_f64(i as f64);
            let y = if any_zero { i / div * delta } else { i * step };
            y + start
        })
        .collect();
    if let Some(last) = v.last_mut() {
        *last = stop;
    }
    v
}

/// `np.linspace(start, stop, num)` of per-axis arrays in `T`: row `i` holds the σ of scale `i`
/// on every axis.
fn linspace_rows<T: Real>(start: &[T], stop: &[T], num: usize) -> Vec<Vec<T>> {
    let div = T::from_f64(num.saturating_sub(1) as f64);
    let any_zero = num > 1
        && start
            .iter()
            .zip(stop)
            .any(|(&a, &b)| (b - a) / div == T::ZERO);
    let cols: Vec<Vec<T>> = start
        .iter()
        .zip(stop)
        .map(|(&a, &b)| linspace_axis(a, b, num, any_zero))
        .collect();
    (0..num)
        .map(|i| cols.iter().map(|c| c[i]).collect())
        .collect()
}

/// `log10` of a NumPy array value of type `T` (the C library's; see the module docs of
/// [`super`] on NumPy's SIMD `log10` and `power`).
fn log10_t<T: Real>(x: T) -> T {
    if T::IS_F32 {
        T::from_f64(f64::from((x.to_f64() as f32).log10()))
    } else {
        T::from_f64(x.to_f64().log10())
    }
}

/// `10 ** y` of a NumPy array value of type `T` (the C library's `pow`/`powf`).
fn exp10_t<T: Real>(y: T) -> T {
    if T::IS_F32 {
        T::from_f64(f64::from(10f32.powf(y.to_f64() as f32)))
    } else {
        T::from_f64(10f64.powf(y.to_f64()))
    }
}

/// The σ table of `blob_log` in `T`: row `i` holds scale `i`'s σ on every axis
/// (`np.linspace(min_sigma, max_sigma, num_sigma)` of the per-axis arrays, or
/// `np.logspace(log10(min_sigma), log10(max_sigma), num_sigma)`).
pub fn sigma_table<T: Real>(
    min_sigma: &[f64],
    max_sigma: &[f64],
    num_sigma: usize,
    log_scale: bool,
) -> Vec<Vec<T>> {
    let lo: Vec<T> = min_sigma.iter().map(|&s| T::from_f64(s)).collect();
    let hi: Vec<T> = max_sigma.iter().map(|&s| T::from_f64(s)).collect();
    if !log_scale {
        return linspace_rows(&lo, &hi, num_sigma);
    }
    let a: Vec<T> = lo.iter().map(|&s| log10_t(s)).collect();
    let b: Vec<T> = hi.iter().map(|&s| log10_t(s)).collect();
    linspace_rows(&a, &b, num_sigma)
        .into_iter()
        .map(|row| row.into_iter().map(exp10_t).collect())
        .collect()
}

/// The scale factor `np.mean(s) ** 2` of a σ row in `T`.
pub(super) fn scale_factor<T: Real>(row: &[T]) -> T {
    let mean = numpy_sum_t(row) / T::from_f64(row.len() as f64);
    scalar_pow(mean, 2.0)
}
