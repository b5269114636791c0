//! `device="auto"` for the pipelines, with the command line's policy
//! (`arraybridge::runtime::choose`): a movie that lives on a device arraybridge computes on is
//! read there; a host movie goes where the offload model says the work is fastest (its
//! estimate from the workload and nominal throughputs; the command line measures its CPU on the
//! first frames instead), and the decision and its reason are kept for `last_decision()`.

use std::sync::Mutex;

use bridge_core::offload::Workload;
use bridge_core::{Device, Result};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert::parse_device;
use crate::held::Held;

/// The last `auto` decision of this process: the device and why.
static LAST: Mutex<Option<(String, String)>> = Mutex::new(None);

fn record(device: Device, reason: String) {
    *LAST.lock().unwrap_or_else(|p| p.into_inner()) = Some((device.to_string(), reason));
}

/// The device of a pipeline's `device` argument: `auto` as above (`stage` names the pipeline,
/// `supports` says where it runs, `work` its workload), anything else parsed.
pub(crate) fn pipeline_device(
    device: &str,
    input: &Held,
    stage: &str,
    supports: &dyn Fn(Device) -> Result<()>,
    work: impl FnOnce() -> Workload,
) -> PyResult<Device> {
    if !device.trim().eq_ignore_ascii_case("auto") {
        return parse_device(device);
    }
    if let d @ (Device::Cuda(_) | Device::OpenCl(_)) = input.device() {
        record(
            d,
            format!("the input lives on {d}: {stage} reads it there (nothing is moved)"),
        );
        return Ok(d);
    }
    let (cpu, note) = arraybridge::runtime::nominal_cpu();
    let c = arraybridge::runtime::choose(stage, supports, &work(), &cpu, &note);
    record(c.device, c.reason);
    Ok(c.device)
}

/// `arraybridge._native.gpus()`: the GPUs `device="all"` runs on (each physical GPU once, as
/// `arraybridge::runtime::gpus` lists them), as device names.
#[pyfunction]
pub fn gpus() -> Vec<String> {
    arraybridge::runtime::gpus(&|_| Ok(()), false)
        .0
        .iter()
        .map(Device::to_string)
        .collect()
}

/// `arraybridge.last_decision()`: the last `device="auto"` decision of this process as
/// `{"device": ..., "reason": ...}`, or `None` before the first.
#[pyfunction]
pub fn last_decision(py: Python<'_>) -> PyResult<Option<Bound<'_, PyDict>>> {
    let last = LAST.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let Some((device, reason)) = last else {
        return Ok(None);
    };
    let d = PyDict::new(py);
    d.set_item("device", device)?;
    d.set_item("reason", reason)?;
    Ok(Some(d))
}

/// The figures a device's profile may give (`"cpu"` gives `flops_per_s` only).
const FIGURES: [&str; 4] = [
    "flops_per_s",
    "h2d_bytes_per_s",
    "d2h_bytes_per_s",
    "launch_overhead_s",
];

/// `device_profiles[device][key]`: a finite, non-negative number (not a bool), or a typed error
/// naming where it is.
fn figure(device: &str, key: &str, v: &Bound<'_, PyAny>) -> PyResult<f64> {
    let refuse = || {
        crate::errors::invalid(format!(
            "device_profiles[{device:?}][{key:?}] is a number, got {}",
            v.repr()
                .map(|r| r.to_string())
                .unwrap_or_else(|_| "?".into())
        ))
    };
    if v.is_instance_of::<pyo3::types::PyBool>() {
        return Err(refuse());
    }
    let val: f64 = v.extract().map_err(|_| refuse())?;
    if !(val.is_finite() && val >= 0.0) {
        return Err(crate::errors::invalid(format!(
            "device_profiles[{device:?}][{key:?}] must be finite and not negative, got {val}"
        )));
    }
    Ok(val)
}

/// Every figure of `device`'s profile `g`, checked (its keys, their numbers) whether or not
/// the device is here (a profile that could never be used is an error, not kept silently):
/// each as its index in [`FIGURES`] and its value.
fn figures(device: &str, g: &Bound<'_, PyAny>) -> PyResult<Vec<(usize, f64)>> {
    let g = g.cast::<PyDict>().map_err(|_| {
        crate::errors::invalid(format!("device_profiles[{device:?}] is a dict of figures"))
    })?;
    let allowed: &[&str] = if device == "cpu" {
        &FIGURES[..1]
    } else {
        &FIGURES
    };
    let mut out = Vec::with_capacity(g.len());
    for (k, v) in g.iter() {
        let key: String = k.extract().map_err(|_| {
            crate::errors::invalid(format!(
                "device_profiles[{device:?}]: a figure's name is a string, got {k:?}"
            ))
        })?;
        let Some(i) = allowed.iter().position(|&f| f == key) else {
            return Err(crate::errors::invalid(format!(
                "device_profiles[{device:?}]: unknown figure {key:?} ({})",
                allowed.join(", ")
            )));
        };
        out.push((i, figure(device, &key, &v)?));
    }
    Ok(out)
}

/// A device's figures for `@ab.offload`: the nominal ones (`arraybridge::runtime`), with any
/// of [`FIGURES`] that `ab.config(device_profiles=...)` measured replacing them (as
/// [`figures`] reads them).
fn profile_with(
    mut p: bridge_core::offload::DeviceProfile,
    given: Option<&Bound<'_, PyDict>>,
) -> PyResult<(bridge_core::offload::DeviceProfile, bool)> {
    let Some(g) = given else {
        return Ok((p, false));
    };
    for (i, val) in figures(&p.device.to_string(), g.as_any())? {
        let slot = match i {
            0 => &mut p.flops_per_s,
            1 => &mut p.h2d_bytes_per_s,
            2 => &mut p.d2h_bytes_per_s,
            _ => &mut p.launch_overhead_s,
        };
        *slot = val;
    }
    Ok((p, true))
}

/// `arraybridge._native.offload_decision(input_bytes, output_bytes, flops, profiles)`: the
/// offload model (`bridge_core::offload::decide`, the command line's) for a job of these
/// sizes over the process's CUDA and OpenCL devices, with nominal figures unless `profiles`
/// (`{"opencl:0": {...}, "cpu": {"flops_per_s": ...}}`) gives measured ones. The decision is
/// kept for `last_decision()`; returned as `{"device", "reason", "cpu_s", "estimates"}`.
#[pyfunction]
#[pyo3(signature = (input_bytes, output_bytes, flops, profiles=None))]
pub fn offload_decision<'py>(
    py: Python<'py>,
    input_bytes: u64,
    output_bytes: u64,
    flops: f64,
    profiles: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    use bridge_core::offload::{OffloadThresholds, decide};
    if !(flops.is_finite() && flops >= 0.0) {
        return Err(crate::errors::invalid(format!(
            "the work of a call is a finite, non-negative number of operations, got {flops}"
        )));
    }
    // every key names a device ("cpu", "cuda:0", "opencl:1", ...), present here or not: a
    // profile for "gpu" would otherwise be kept and never used
    if let Some(p) = profiles {
        for k in p.keys() {
            let name: String = k.extract().map_err(|_| {
                crate::errors::invalid(format!(
                    "device_profiles' keys are device names such as \"cuda:0\", got {k:?}"
                ))
            })?;
            crate::convert::parse_device(&name).map_err(|e| {
                crate::errors::invalid(format!(
                    "device_profiles[{name:?}]: not a device name ({e})"
                ))
            })?;
        }
        for (k, v) in p.iter() {
            figures(&k.extract::<String>()?, &v)?;
        }
    }
    let given = |name: &str| -> PyResult<Option<Bound<'py, PyDict>>> {
        match profiles.map(|p| p.get_item(name)).transpose()?.flatten() {
            None => Ok(None),
            Some(d) => d.cast_into::<PyDict>().map(Some).map_err(|_| {
                crate::errors::invalid(format!("device_profiles[{name:?}] is a dict of figures"))
            }),
        }
    };
    let (mut cpu, mut cpu_note) = arraybridge::runtime::nominal_cpu();
    if let Some(c) = given("cpu")? {
        let v = figure(
            "cpu",
            "flops_per_s",
            &c.get_item("flops_per_s")?.ok_or_else(|| {
                crate::errors::invalid("device_profiles['cpu'] needs flops_per_s")
            })?,
        )?;
        if v <= 0.0 {
            return Err(crate::errors::invalid(format!(
                "device_profiles['cpu']['flops_per_s'] must be finite and positive, got {v}"
            )));
        }
        cpu.flops_per_s = v;
        cpu_note = "measured (ab.config)".to_owned();
    }
    let mut devices = Vec::new();
    let mut notes = Vec::new();
    for info in arraybridge::registry().device_infos() {
        if !matches!(info.device, Device::Cuda(_) | Device::OpenCl(_)) {
            continue;
        }
        let (nominal, note) = arraybridge::runtime::nominal_profile(info, &cpu);
        let (p, measured) = profile_with(nominal, given(&info.device.to_string())?.as_ref())?;
        notes.push(if measured {
            format!("{}: measured figures (ab.config)", info.device)
        } else {
            note
        });
        devices.push(p);
    }
    let work = Workload {
        input_bytes,
        output_bytes,
        flops,
    };
    let d = decide(&work, &cpu, &devices, &OffloadThresholds::default());
    let reason = format!(
        "{} [CPU throughput: {cpu_note}; {}]",
        d.reason,
        notes.join("; ")
    );
    record(d.device, reason.clone());
    let out = PyDict::new(py);
    out.set_item("device", d.device.to_string())?;
    out.set_item("reason", reason)?;
    out.set_item("cpu_s", d.cpu_s)?;
    let est = pyo3::types::PyList::empty(py);
    for e in &d.estimates {
        let x = PyDict::new(py);
        x.set_item("device", e.device.to_string())?;
        x.set_item("transfer_s", e.transfer_s)?;
        x.set_item("compute_s", e.compute_s)?;
        x.set_item("fits", e.fits)?;
        est.append(x)?;
    }
    out.set_item("estimates", est)?;
    Ok(out)
}

/// `arraybridge._native.record_decision(device, reason)`: keep a decision made without the
/// model (`ab.config(offload=False)`) for `last_decision()`.
#[pyfunction]
pub fn record_decision(device: &str, reason: String) -> PyResult<()> {
    record(parse_device(device)?, reason);
    Ok(())
}
