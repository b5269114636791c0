//! `blob_log` on one n-dimensional image (scikit-image's semantics: a 3-D array is a volume),
//! on the CPU or one device: [`algorithms::detect::blob_log::blob_log_nd_on_device`]; and trackpy's `locate` on one
//! image or volume with sizes per axis: [`algorithms::detect::locate::locate_nd`].

use algorithms::detect::blob_log::{
    BlobLogNdParams, BlobsNd, Border, Prescale, Sigma, VolumeView, blob_log_nd_on_device,
};
use algorithms::detect::locate::{LocateNdParams, locate_nd_on_device};
use bridge_core::DType;
use ndarray::Array2;
use numpy::{IntoPyArray, PyArray2};
use pyo3::prelude::*;

use crate::convert::resolve;
use crate::errors::{IntoPy, invalid};
use crate::held::Held;
use crate::import::import_held;
use crate::pipelines::host_held;

/// A σ given as a number (the same on every axis) or a sequence (one per axis).
fn sigma(v: &Bound<'_, PyAny>, name: &str) -> PyResult<Sigma> {
    if let Ok(x) = v.extract::<f64>() {
        return Ok(Sigma::Scalar(x));
    }
    v.extract::<Vec<f64>>().map(Sigma::PerAxis).map_err(|_| {
        invalid(format!(
            "{name} is a number or a sequence of numbers (one per axis), got {}",
            v.get_type()
                .name()
                .map_or_else(|_| "?".to_owned(), |n| n.to_string())
        ))
    })
}

/// `exclude_border` as scikit-image reads it: a bool or an int for every axis, a sequence of
/// ints for each axis.
fn border(v: &Bound<'_, PyAny>) -> PyResult<Border> {
    if let Ok(b) = v.extract::<bool>() {
        return Ok(Border::from_bool(b));
    }
    if let Ok(n) = v.extract::<usize>() {
        return Ok(if n == 0 { Border::None } else { Border::All(n) });
    }
    v.extract::<Vec<usize>>().map(Border::PerAxis).map_err(|_| {
        invalid("exclude_border is a bool, a non-negative int or a sequence of them (one per axis)")
    })
}

/// A host image as the n-D algorithms read it (uint8, uint16, float32 or float64 pixels; the
/// others are an `InvalidInput` naming `what`, whose Python wrapper converts them first).
fn volume_view<'a>(src: &'a Held, what: &str) -> PyResult<VolumeView<'a>> {
    Ok(match src.dtype() {
        DType::U8 => VolumeView::U8(src.host_view::<u8>().py_err()?),
        DType::U16 => VolumeView::U16(src.host_view::<u16>().py_err()?),
        DType::F32 => VolumeView::F32(src.host_view::<f32>().py_err()?),
        DType::F64 => VolumeView::F64(src.host_view::<f64>().py_err()?),
        other => {
            return Err(invalid(format!(
                "images of {other} pixels: {what} takes uint8, uint16, float32 or float64 \
                 (cast first)"
            )));
        }
    })
}

/// The rows of `b` as an `(n, ndim + sigma columns)` array.
fn rows<'py>(py: Python<'py>, b: &BlobsNd) -> Bound<'py, PyArray2<f64>> {
    let ncol = b.ndim + b.sigma_columns;
    Array2::from_shape_fn((b.rows.len(), ncol), |(i, j)| b.rows[i][j]).into_pyarray(py)
}

/// `skimage.feature.blob_log(image, ...)` on an n-D image of uint8, uint16, float32 or float64
/// pixels (others are converted by the Python wrapper) under `prescale` (as the frame path
/// converts a frame): rows of the coordinates then the σ column(s). The scale space is computed
/// on `device` (`cpu`, or one `opencl:N`/`cuda:N` with float64; `auto`: the image's device when
/// it lives on one, else the CPU); an image on a device is read to the host first, and the peak
/// search and pruning run there.
#[pyfunction]
#[pyo3(signature = (image, *, min_sigma, max_sigma, num_sigma, threshold, threshold_rel,
                    overlap, log_scale, exclude_border, prescale, device="cpu"))]
#[allow(clippy::too_many_arguments)]
pub fn blob_log_nd<'py>(
    py: Python<'py>,
    image: &Bound<'py, PyAny>,
    min_sigma: &Bound<'py, PyAny>,
    max_sigma: &Bound<'py, PyAny>,
    num_sigma: usize,
    threshold: Option<f64>,
    threshold_rel: Option<f64>,
    overlap: f64,
    log_scale: bool,
    exclude_border: &Bound<'py, PyAny>,
    prescale: &str,
    device: &str,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let p = BlobLogNdParams {
        min_sigma: sigma(min_sigma, "min_sigma")?,
        max_sigma: sigma(max_sigma, "max_sigma")?,
        num_sigma,
        threshold,
        threshold_rel,
        overlap,
        log_scale,
        exclude_border: border(exclude_border)?,
    };
    let prescale = prescale.parse::<Prescale>().py_err()?;
    let held = import_held(image)?;
    let device = arraybridge::open_device(resolve(device, &held)?).py_err()?;
    let mut keep = None;
    let src = host_held(&held, &mut keep, "blob_log")?;
    let view = volume_view(src, "blob_log")?;
    let blobs = py
        .detach(|| blob_log_nd_on_device(&device, view, prescale, &p))
        .py_err()?;
    Ok(rows(py, &blobs))
}

/// What `locate_nd` returns to Python: column names, rows, why it is empty.
type LocatedNd<'py> = (Vec<String>, Bound<'py, PyArray2<f64>>, Option<&'static str>);

/// `trackpy.locate(image, diameter, ...)` on one 2-D image or 3-D volume (axes `z, y, x`) of
/// uint8, uint16, float32 or float64 pixels, with sizes per axis (a list of one value applies
/// to every axis), its bandpass on `device` (`cpu`, or one `opencl:N`/`cuda:N` with float64;
/// `auto`: the image's device when it lives on one, else the CPU; the maxima, refinement and
/// characterisation on the host, the features the CPU's bit for bit):
/// [`algorithms::detect::locate::locate_nd_on_device`]. Returns trackpy's
/// column names, an `(n, columns)` array, and, when no feature was found, why
/// ([`algorithms::detect::Empty::as_str`], for trackpy's warnings; `None` otherwise).
#[pyfunction(name = "locate_nd")]
#[pyo3(signature = (image, *, diameter, minmass, maxsize, separation, noise_size,
                    smoothing_size, threshold, invert, percentile, topn, preprocess,
                    characterize, device="cpu", max_iterations=10))]
#[allow(clippy::too_many_arguments)]
pub fn locate_volume<'py>(
    py: Python<'py>,
    image: &Bound<'py, PyAny>,
    diameter: Vec<usize>,
    minmass: f64,
    maxsize: Option<f64>,
    separation: Option<Vec<f64>>,
    noise_size: Vec<f64>,
    smoothing_size: Option<Vec<usize>>,
    threshold: Option<f64>,
    invert: bool,
    percentile: f64,
    topn: Option<usize>,
    preprocess: bool,
    characterize: bool,
    device: &str,
    max_iterations: usize,
) -> PyResult<LocatedNd<'py>> {
    let p = LocateNdParams {
        max_iterations,
        minmass,
        maxsize,
        separation,
        noise_size,
        smoothing_size,
        threshold,
        invert,
        percentile,
        topn,
        preprocess,
        characterize,
        ..LocateNdParams::new(diameter)
    };
    let held = import_held(image)?;
    let device = arraybridge::open_device(resolve(device, &held)?).py_err()?;
    let mut keep = None;
    let src = host_held(&held, &mut keep, "locate")?;
    let view = volume_view(src, "locate")?;
    let (f, why) = py
        .detach(|| -> bridge_core::Result<_> {
            let f = locate_nd_on_device(&device, view.clone(), &p)?;
            let why = if f.rows.is_empty() {
                algorithms::detect::locate::why_empty_nd(view, &p)?
            } else {
                None
            };
            Ok((f, why))
        })
        .py_err()?;
    let ncol = f.columns.len();
    let arr = Array2::from_shape_fn((f.rows.len(), ncol), |(i, j)| f.rows[i][j]).into_pyarray(py);
    Ok((f.columns, arr, why.map(|w| w.as_str())))
}
