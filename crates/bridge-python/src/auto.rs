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

use crate::convert::{Held, parse_device};

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
