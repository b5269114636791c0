//! `convert` (and `convert_api`, `route`), `copyto`, `devices` and `backends`: arrays moved
//! between devices through the registry. What they read is a [`Held`] (`held.rs`, imported by
//! `import.rs`); the [`Array`] they return is in `array.rs`.

use std::sync::Arc;

use arraybridge::registry;
use bridge_core::dlpack::DlpackTensor;
use bridge_core::{Array as CoreArray, BridgeError, Device, HostElement, MemoryType};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString};

use crate::array::Array;
use crate::errors::{IntoPy, invalid, to_py};
use crate::held::{COPY_HINT, Held, dtype_name, nbytes};
use crate::import::{import_held, import_held_with, import_tensor};

/// Parse a device string (`cpu`, `cuda:N`, `opencl:N`; `auto` is resolved by the caller).
pub(crate) fn parse_device(s: &str) -> PyResult<Device> {
    s.parse::<Device>().py_err()
}

/// Move `held` to `device`: in place when it is there already (unless `copy`). arraybridge's
/// own arrays take the registry's planned route from where they are (a device copy, a peer
/// copy between devices, staged through the host: what the planner picks, reported to its
/// observer; [`route`] says which); a host copy on the way is checked against the host budget
/// before it is made (`OutOfMemory`). Another library's host tensor is copied row-major and
/// converted from there.
pub(crate) fn move_to(held: &Held, device: Device, copy: bool) -> PyResult<Held> {
    if held.device() == device && !copy {
        return Ok(held.clone());
    }
    if let Held::Bridge(a) = held {
        let reg = registry();
        let route = reg
            .plan(a.memory_type(), a.device(), device.memory_type(), device)
            .py_err()?;
        let via_host = route
            .steps
            .iter()
            .any(|s| s.to.memory_type == MemoryType::Host)
            || (route.steps.is_empty() && device == Device::Cpu);
        if via_host {
            crate::memory::check(
                nbytes(a.shape(), a.dtype()),
                &format!(
                    "convert(x, device='{device}'): a host copy of {}",
                    held.describe()
                ),
                COPY_HINT,
            )?;
        }
        match reg.copy(a, device.memory_type(), device) {
            Ok(out) => return Ok(Held::Bridge(Arc::new(out))),
            // a first hop that takes the memory over (zero-copy) cannot start from a shared
            // array: the host copy below
            Err(BridgeError::Unsupported(_)) => {}
            Err(e) => return Err(to_py(e)),
        }
    }
    let host = held.host_copy(
        &format!(
            "convert(x, device='{device}'{})",
            if copy { ", copy=True" } else { "" }
        ),
        COPY_HINT,
    )?;
    let a = CoreArray::from_host(host);
    let a = if device == Device::Cpu {
        a
    } else {
        registry()
            .convert(a, device.memory_type(), device)
            .py_err()?
    };
    Ok(Held::Bridge(Arc::new(a)))
}

/// Resolve `device` for an input: `auto` is the input's device when it is a device arraybridge
/// computes on (CUDA, OpenCL), otherwise the CPU.
pub(crate) fn resolve(device: &str, input: &Held) -> PyResult<Device> {
    if device.trim().eq_ignore_ascii_case("auto") {
        return Ok(match input.device() {
            d @ (Device::Cuda(_) | Device::OpenCl(_)) => d,
            _ => Device::Cpu,
        });
    }
    parse_device(device)
}

/// `arraybridge._native.convert(x, device, copy)`: `x` held as an [`Array`] on `device` (the
/// core of `arraybridge.convert` with `to="array"`; `_frameworks` calls it for the others).
#[pyfunction]
#[pyo3(signature = (x, device="cpu", *, copy=None))]
pub fn convert(x: &Bound<'_, PyAny>, device: &str, copy: Option<bool>) -> PyResult<Array> {
    convert_array(x, None, device, copy)
}

/// [`convert`] to `device` (parsed) or, when it is `None`, to `device_str` (`auto` resolved
/// for the input).
fn convert_array(
    x: &Bound<'_, PyAny>,
    device: Option<Device>,
    device_str: &str,
    copy: Option<bool>,
) -> PyResult<Array> {
    let held = import_held_with(x, copy != Some(false))?;
    let target = match device {
        Some(d) => d,
        None => resolve(device_str, &held)?,
    };
    if copy == Some(false) && held.device() != target {
        return Err(invalid(format!(
            "copy=False, but the array is on {} and {target} was asked for",
            held.device()
        )));
    }
    if held.device() == target && copy != Some(true) {
        // in place: nothing to compute, so the GIL is kept (releasing it costs more than this)
        return Ok(Array { held });
    }
    let py = x.py();
    let moved = py.detach(|| move_to(&held, target, copy == Some(true)))?;
    Ok(Array { held: moved })
}

/// `arraybridge.route(x, device)`: the route `convert(x, device)` takes, in words (pure: plans,
/// moves nothing). `x` is read as `convert` reads it.
#[pyfunction]
pub fn route(x: &Bound<'_, PyAny>, device: &str) -> PyResult<String> {
    let held = import_held(x)?;
    let target = resolve(device, &held)?;
    let (mt, d) = match &held {
        Held::Bridge(a) => (a.memory_type(), a.device()),
        Held::Tensor(t) => (t.info().device.memory_type(), t.info().device),
    };
    let r = registry()
        .plan(mt, d, target.memory_type(), target)
        .py_err()?;
    Ok(r.to_string())
}

/// An optional argument that tells "left out" (its default) from any value, `None` included.
pub enum Arg<'py> {
    /// Left out.
    Default,
    /// Passed (possibly `None`).
    Given(Bound<'py, PyAny>),
}

impl<'a, 'py> FromPyObject<'a, 'py> for Arg<'py> {
    type Error = PyErr;
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(Arg::Given(obj.to_owned()))
    }
}

/// Hold ``x`` (any object with ``__dlpack__``, a DLPack capsule, or a buffer-protocol
/// object) on ``device`` and return it as an object of framework ``to``: ``"array"`` (the
/// default: an :class:`Array` that any DLPack consumer takes), ``"numpy"``, ``"torch"``,
/// ``"cupy"``, ``"jax"``, ``"tensorflow"`` (where importable; through the framework's own
/// DLPack import), or ``"same"`` (the framework of ``x``). ``device=None`` keeps ``x`` where
/// it is.
///
/// Zero-copy when ``x`` is already on ``device`` (the result aliases ``x``'s memory; a
/// read-only input stays read-only), except a strided CUDA tensor, which is gathered into a
/// C-contiguous copy on its device, and JAX, which views host memory only when it is aligned
/// to 64 bytes (and copies otherwise); otherwise the data is copied there. ``copy=True``
/// always copies; ``copy=False`` refuses to (a strided CUDA tensor and unaligned memory for
/// JAX included). A copy is made on the host first (a broadcast view in full:
/// ``np.broadcast_to(np.float32(1), (2**16, 2**16))`` is 16 GiB), checked against the host
/// memory budget before it is made (:class:`OutOfMemory`; see :func:`set_memory_limit`).
/// A ``numpy.ndarray`` is read in place from its own struct, without a DLPack exchange.
///
/// >>> import numpy as np, arraybridge as ab
/// >>> x = np.arange(6.0)
/// >>> y = ab.convert(x, "cpu", to="numpy")
/// >>> y.ctypes.data == x.ctypes.data
/// True
///
/// (Rust: `arraybridge.convert` itself, held as `_native.convert_api`.)
#[pyfunction]
#[pyo3(
    name = "convert",
    signature = (x, device = Arg::Default, *, to = Arg::Default, copy = None),
    text_signature = "(x, device='cpu', *, to='array', copy=None)"
)]
pub fn convert_api<'py>(
    x: &Bound<'py, PyAny>,
    device: Arg<'py>,
    to: Arg<'py>,
    copy: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = x.py();
    // `arraybridge.convert` itself, in Rust so that `ab.convert(x)` costs no Python frame: the
    // common arguments (`to="array"`, a device string, `copy` None or a bool) go straight to
    // the core; anything else to the Python implementation (`_convert_py`: frameworks,
    // `device=None`, and the errors of bad arguments, unchanged)
    let to_array = match &to {
        Arg::Default => true,
        Arg::Given(t) => t
            .cast::<PyString>()
            .is_ok_and(|s| s.to_cow().is_ok_and(|s| s == "array")),
    };
    let copy_flag = match copy {
        None => Some(None),
        Some(c) => c.cast_exact::<PyBool>().ok().map(|b| Some(b.is_true())),
    };
    // a dask array goes to the Python code, which computes it after checking its bytes against
    // the host budget (reading it here would compute it unchecked); an ndarray is never one
    let dask = !<numpy::PyUntypedArray as pyo3::PyTypeInfo>::is_type_of(x)
        && x.get_type()
            .module()
            .is_ok_and(|m| m.to_cow().is_ok_and(|m| m.starts_with("dask")));
    if to_array
        && !dask
        && let Some(copy_flag) = copy_flag
    {
        let device_str: Option<std::borrow::Cow<'_, str>> = match &device {
            Arg::Default => Some("cpu".into()),
            // `"cpu"` written in Python code is this interned string: nothing to read
            Arg::Given(d) if d.is(pyo3::intern!(py, "cpu")) => Some("cpu".into()),
            Arg::Given(d) => d.cast::<PyString>().ok().and_then(|s| s.to_cow().ok()),
        };
        if let Some(s) = device_str {
            let parsed = (s == "cpu").then_some(Device::Cpu);
            return convert_array(x, parsed, &s, copy_flag)
                .and_then(|a| Ok(Bound::new(py, a)?.into_any()));
        }
    }
    let device = match device {
        Arg::Default => pyo3::intern!(py, "cpu").clone().into_any(),
        Arg::Given(d) => d,
    };
    let kwargs = PyDict::new(py);
    match to {
        Arg::Default => kwargs.set_item("to", "array")?,
        Arg::Given(t) => kwargs.set_item("to", t)?,
    }
    kwargs.set_item("copy", copy)?;
    py.import("arraybridge")?
        .getattr("_convert_py")?
        .call((x, device), Some(&kwargs))
}

/// `arraybridge.copyto(dst, src)`: write `src` into host array `dst` in place (broadcasting as
/// NumPy does, casting losslessly).
#[pyfunction]
pub fn copyto(dst: &Bound<'_, PyAny>, src: &Bound<'_, PyAny>) -> PyResult<()> {
    let mut t = if let Ok(a) = dst.cast::<Array>() {
        match &a.get().held {
            Held::Tensor(_) => import_tensor(&a.clone().into_any())?,
            Held::Bridge(_) => {
                return Err(invalid(
                    "copyto writes into arrays of other libraries; this one is arraybridge's own",
                ));
            }
        }
    } else {
        refuse_immutable(dst)?;
        import_tensor(dst)?
    };
    if t.info().device != Device::Cpu {
        return Err(invalid(format!(
            "copyto writes host arrays; the destination is on {}",
            t.info().device
        )));
    }
    let src = import_held(src)?;
    let dtype = t.info().dtype;
    // the source's host copy, and its cast to the destination's dtype when that differs
    let cast_bytes = if src.dtype() == dtype {
        0
    } else {
        nbytes(&src.shape(), dtype)
    };
    crate::memory::check(
        src.to_host_bytes().saturating_add(cast_bytes),
        &format!(
            "copyto: a host copy of the source ({}){}",
            src.describe(),
            if cast_bytes > 0 {
                format!(" and its cast to {}", dtype_name(dtype))
            } else {
                String::new()
            }
        ),
        COPY_HINT,
    )?;
    let host = src.to_host().py_err()?;
    let host = if host.dtype() == dtype {
        host
    } else {
        host.cast(dtype, bridge_core::CastMode::Lossless).py_err()?
    };
    bridge_core::with_host_data!(&host, s => {
        write_into(&mut t, s)
    })
}

/// Refuses a destination of a library whose arrays are immutable by contract (JAX, TensorFlow):
/// their DLPack exports do not say `READ_ONLY`, but writing into one changes a value the
/// library assumes never changes (its caches, traced computations and copies share it).
fn refuse_immutable(dst: &Bound<'_, PyAny>) -> PyResult<()> {
    let module = dst.get_type().module()?.to_string();
    let root = module.split('.').next().unwrap_or("");
    let library = match root {
        "jax" | "jaxlib" => "JAX",
        "tensorflow" => "TensorFlow",
        _ => return Ok(()),
    };
    Err(invalid(format!(
        "copyto writes arrays in place, and {library} arrays are immutable (a {module} \
         object); convert the source instead, e.g. ab.convert(src, to=\"{}\")",
        if library == "JAX" {
            "jax"
        } else {
            "tensorflow"
        }
    )))
}

fn write_into<T: HostElement>(t: &mut DlpackTensor, s: &ndarray::ArrayD<T>) -> PyResult<()> {
    let mut v = t.view_mut::<T>().py_err()?;
    let b = s.broadcast(v.raw_dim()).ok_or_else(|| {
        invalid(format!(
            "cannot broadcast a source of shape {:?} to the destination's {:?}",
            s.shape(),
            v.shape()
        ))
    })?;
    v.assign(&b);
    Ok(())
}

/// `arraybridge.devices()`: every device this build can use, the CPU first.
#[pyfunction]
pub fn devices(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let out = PyList::empty(py);
    let cpu = PyDict::new(py);
    cpu.set_item("device", "cpu")?;
    cpu.set_item("backend", "host")?;
    cpu.set_item("name", "host CPU (ndarray + rayon)")?;
    cpu.set_item("total_memory", bridge_core::host::meminfo().0)?;
    out.append(cpu)?;
    for r in registry().reports() {
        for info in &r.devices {
            let d = PyDict::new(py);
            d.set_item("device", info.device.to_string())?;
            d.set_item("backend", &r.name)?;
            d.set_item("name", &info.name)?;
            d.set_item("total_memory", info.total_memory)?;
            out.append(d)?;
        }
    }
    Ok(out)
}

/// `arraybridge.backends()`: each backend and why it is unavailable (`None` when available).
#[pyfunction]
pub fn backends(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    for r in registry().reports() {
        out.set_item(&r.name, r.unavailable.as_deref())?;
    }
    Ok(out)
}
