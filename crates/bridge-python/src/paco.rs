//! The PACO pipelines of the Python package: `paco` and `unbiased_flux` (float64 inputs read
//! in place where they are, checked against the host budget otherwise).

use algorithms::paco::{
    Center, EdgeRule, FluxOptions, PacoParams, PsfNorm, Rounding, Strategy, SubPixel, Variant,
};
use bridge_core::{DType, Device};
use ndarray::{Array2, Ix1, Ix2, Ix3};
use numpy::{IntoPyArray, PyArray2};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{IntoPy, invalid};
use crate::held::Held;
use crate::import::import_held;
use crate::pipelines::in_range;

/// A PACO input, imported (in place) and checked for its number of dimensions.
fn paco_input(obj: &Bound<'_, PyAny>, ndim: usize, what: &str) -> PyResult<Held> {
    let held = import_held(obj)?;
    let shape = held.shape();
    let shape_ok = shape.len() == ndim || (ndim == 1 && shape.len() == 2 && shape[1] == 1);
    if !shape_ok {
        return Err(invalid(format!(
            "{what} must have {ndim} dimension(s), got shape {shape:?}"
        )));
    }
    Ok(held)
}

/// Host bytes [`f64_input`] allocates at its peak: the float64 copy, and for other dtypes or
/// device arrays the host copy it is cast from.
fn f64_input_bytes(held: &Held) -> u64 {
    let f64_copy = crate::held::nbytes(&held.shape(), DType::F64);
    if held.dtype() == DType::F64 {
        if held.device() == Device::Cpu {
            f64_copy
        } else {
            held.to_host_bytes()
        }
    } else {
        held.to_host_bytes().saturating_add(f64_copy)
    }
}

/// The f64 host data of a PACO input (a copy; its bytes are checked by the caller).
fn f64_input(held: &Held, what: &str) -> PyResult<ndarray::ArrayD<f64>> {
    if held.device() == Device::Cpu && held.dtype() == DType::F64 {
        return Ok(held.host_view::<f64>().py_err()?.to_owned());
    }
    let h = held.to_host().py_err()?;
    let h = if h.dtype() == DType::F64 {
        h
    } else {
        h.cast(DType::F64, bridge_core::CastMode::Lossless)
            .py_err()?
    };
    match h {
        bridge_core::HostData::F64(a) => Ok(a),
        other => Err(invalid(format!(
            "{what}: expected float64 after the cast, got {}",
            other.dtype()
        ))),
    }
}

/// Settings shared by `paco` and `unbiased_flux`.
#[allow(clippy::too_many_arguments)]
fn paco_params(
    radius: usize,
    mode: &str,
    fwhm: Option<f64>,
    psf_norm_factor: Option<f64>,
    subpixel: &str,
    edge: &str,
    nearest: bool,
    center: Option<(f64, f64)>,
    stats_strategy: &str,
) -> PyResult<PacoParams> {
    let variant = match mode {
        "paper" => Variant::Paper,
        "vip" => Variant::Vip,
        m => return Err(invalid(format!("mode must be 'paper' or 'vip', got {m:?}"))),
    };
    let subpixel = match subpixel.trim().to_ascii_lowercase().as_str() {
        "off" | "none" => SubPixel::Off,
        "fft" => SubPixel::VipFft,
        "spline5" => SubPixel::Spline5,
        "table" => SubPixel::Table { q: 32 },
        t => match t.strip_prefix("table:").map(str::parse::<usize>) {
            Some(Ok(q)) if (1..=1024).contains(&q) => SubPixel::Table { q },
            _ => {
                return Err(invalid(format!(
                    "subpixel must be 'off', 'table', 'table:Q' (Q in 1..=1024), 'fft' or \
                     'spline5', got {subpixel:?}"
                )));
            }
        },
    };
    let edge = match edge {
        "box" => EdgeRule::Box,
        "disk" => EdgeRule::Disk,
        e => return Err(invalid(format!("edge must be 'box' or 'disk', got {e:?}"))),
    };
    let strategy = match stats_strategy {
        "fast" => Strategy::Fast,
        "full" => Strategy::Full,
        s => {
            return Err(invalid(format!(
                "stats_strategy must be 'fast' or 'full', got {s:?}"
            )));
        }
    };
    Ok(PacoParams {
        psf_rad: radius,
        variant,
        rounding: if nearest {
            Rounding::Nearest
        } else {
            Rounding::Trunc
        },
        subpixel,
        edge,
        psf_norm: match (psf_norm_factor, fwhm) {
            (Some(f), _) => PsfNorm::Factor(f),
            (None, Some(f)) => PsfNorm::Fwhm(f),
            (None, None) => PsfNorm::FitAiry,
        },
        center: match center {
            Some((y, x)) => Center::At(y, x),
            None => Center::Auto,
        },
        strategy,
        ..Default::default()
    })
}

type Inputs = (
    ndarray::Array3<f64>,
    ndarray::Array1<f64>,
    ndarray::Array2<f64>,
);

fn paco_inputs(
    cube: &Bound<'_, PyAny>,
    angles: &Bound<'_, PyAny>,
    psf: &Bound<'_, PyAny>,
) -> PyResult<Inputs> {
    let inputs = [
        (paco_input(cube, 3, "cube")?, "cube"),
        (paco_input(angles, 1, "angles")?, "angles"),
        (paco_input(psf, 2, "psf")?, "psf"),
    ];
    // the three float64 copies are alive together: checked as one, before any is made
    let bytes = inputs
        .iter()
        .fold(0u64, |acc, (h, _)| acc.saturating_add(f64_input_bytes(h)));
    let listed = inputs
        .iter()
        .map(|(h, name)| format!("{name}: {}", h.describe()))
        .collect::<Vec<_>>()
        .join("; ");
    crate::memory::check(
        bytes,
        &format!("the float64 host copies of the PACO inputs ({listed})"),
        "use fewer or smaller frames (a broadcast view is copied in full)",
    )?;
    let [(c, _), (a, _), (p, _)] = &inputs;
    let c = f64_input(c, "cube")?;
    let a = f64_input(a, "angles")?;
    let p = f64_input(p, "psf")?;
    let n = a.len();
    let c = c
        .into_dimensionality::<Ix3>()
        .map_err(|e| invalid(e.to_string()))?;
    let a = a
        .into_shape_with_order(n)
        .map_err(|e| invalid(e.to_string()))?
        .into_dimensionality::<Ix1>()
        .map_err(|e| invalid(e.to_string()))?;
    let p = p
        .into_dimensionality::<Ix2>()
        .map_err(|e| invalid(e.to_string()))?;
    Ok((c, a, p))
}

/// `paco`: the maps, the PSF factor and FWHM, and the candidates (local maxima of the S/N).
#[pyfunction]
#[pyo3(signature = (cube, angles, psf, *, radius, mode, fwhm, psf_norm_factor, subpixel,
                    edge, nearest, center, stats_strategy, top, device, progress=None))]
#[allow(clippy::too_many_arguments)]
pub fn paco<'py>(
    py: Python<'py>,
    cube: &Bound<'py, PyAny>,
    angles: &Bound<'py, PyAny>,
    psf: &Bound<'py, PyAny>,
    radius: usize,
    mode: &str,
    fwhm: Option<f64>,
    psf_norm_factor: Option<f64>,
    subpixel: &str,
    edge: &str,
    nearest: bool,
    center: Option<(f64, f64)>,
    stats_strategy: &str,
    top: usize,
    device: &str,
    progress: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    // `paco --top`'s range, checked before the maps are computed
    in_range("top", top, 1, 100_000)?;
    let supports =
        |d: Device| algorithms::paco::backend_for(&arraybridge::open_device(d)?).map(|_| ());
    // a device list ("opencl:0,opencl:1", "all"): the several-device queue, the same maps
    let several = arraybridge::runtime::device_list(device, "PACO", &supports, true).py_err()?;
    let (c, a, p) = paco_inputs(cube, angles, psf)?;
    let device = match &several {
        Some(_) => Device::Cpu,
        None => {
            let (t, h, w) = c.dim();
            let input = crate::import::import_held(cube)?;
            crate::auto::pipeline_device(device, &input, "PACO", &supports, || {
                arraybridge::runtime::paco_workload(t, h.max(w), radius)
            })?
        }
    };
    let params = paco_params(
        radius,
        mode,
        fwhm,
        psf_norm_factor,
        subpixel,
        edge,
        nearest,
        center,
        stats_strategy,
    )?;
    let device = arraybridge::open_device(device).py_err()?;
    // Ctrl-C cancels the run at its next band of rows or device batch; `progress(done, total)`
    // follows its statistics rows
    let control = params.control.clone();
    let maps = crate::interrupt::run(py, &control, progress, || match &several {
        Some(devices) => algorithms::paco::paco_on(
            c.view(),
            a.view(),
            p.view(),
            &params,
            devices,
            algorithms::paco::MultiPolicy::default(),
        )
        .map(|m| m.maps),
        None => algorithms::paco::paco_on_device(&device, c.view(), a.view(), p.view(), &params),
    })?
    .py_err()?;
    let peaks = algorithms::paco::snr_peaks(&maps.snr, top);
    let out = PyDict::new(py);
    let cand_y: Vec<i64> = peaks.iter().map(|&(y, _)| y as i64).collect();
    let cand_x: Vec<i64> = peaks.iter().map(|&(_, x)| x as i64).collect();
    let cand_snr: Vec<f64> = peaks.iter().map(|&(y, x)| maps.snr[[y, x]]).collect();
    let cand_flux: Vec<f64> = peaks.iter().map(|&(y, x)| maps.flux[[y, x]]).collect();
    out.set_item("candidates_y", cand_y.into_pyarray(py))?;
    out.set_item("candidates_x", cand_x.into_pyarray(py))?;
    out.set_item("candidates_snr", cand_snr.into_pyarray(py))?;
    out.set_item("candidates_flux", cand_flux.into_pyarray(py))?;
    out.set_item("psf_norm_factor", maps.psf_norm_factor)?;
    out.set_item("fwhm", maps.fwhm)?;
    let name = match &several {
        Some(v) => v
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(","),
        None => device.to_string(),
    };
    out.set_item("device", name)?;
    out.set_item("snr", maps.snr.into_pyarray(py))?;
    out.set_item("flux", maps.flux.into_pyarray(py))?;
    out.set_item("a", maps.a.into_pyarray(py))?;
    out.set_item("b", maps.b.into_pyarray(py))?;
    out.set_item("std", maps.std.into_pyarray(py))?;
    Ok(out)
}

/// `unbiased_flux`: rows `(y, x, flux, std, snr, iterations, converged)` per position.
#[pyfunction]
#[pyo3(signature = (cube, angles, psf, positions, *, radius, mode, fwhm, psf_norm_factor,
                    subpixel, edge, nearest, center, eps, max_iter, alpha0, progress=None))]
#[allow(clippy::too_many_arguments)]
pub fn unbiased_flux<'py>(
    py: Python<'py>,
    cube: &Bound<'py, PyAny>,
    angles: &Bound<'py, PyAny>,
    psf: &Bound<'py, PyAny>,
    positions: Vec<(f64, f64)>,
    radius: usize,
    mode: &str,
    fwhm: Option<f64>,
    psf_norm_factor: Option<f64>,
    subpixel: &str,
    edge: &str,
    nearest: bool,
    center: Option<(f64, f64)>,
    eps: f64,
    max_iter: usize,
    alpha0: f64,
    progress: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let params = paco_params(
        radius,
        mode,
        fwhm,
        psf_norm_factor,
        subpixel,
        edge,
        nearest,
        center,
        "fast",
    )?;
    let (c, a, p) = paco_inputs(cube, angles, psf)?;
    let opts = FluxOptions {
        eps,
        max_iter,
        alpha0,
    };
    // Ctrl-C cancels between iterations; `progress(done, total)` counts the positions
    let control = params.control.clone();
    let est = crate::interrupt::run(py, &control, progress, || {
        algorithms::paco::unbiased_flux(c.view(), a.view(), p.view(), &params, &positions, opts)
    })?
    .py_err()?;
    let out = Array2::from_shape_fn((est.len(), 7), |(i, j)| {
        let e = &est[i];
        [
            e.y,
            e.x,
            e.flux,
            e.std,
            e.snr,
            e.iterations as f64,
            f64::from(u8::from(e.converged)),
        ][j]
    });
    Ok(out.into_pyarray(py))
}
