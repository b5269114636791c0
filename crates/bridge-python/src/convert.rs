//! Importing any `__dlpack__` or buffer-protocol object ([`Held`]), `convert`, `copyto`,
//! `devices` and `backends`; the [`Array`] they return is in `array.rs`.

use std::ffi::c_void;
use std::sync::Arc;

use arraybridge::registry;
use bridge_core::dlpack::DlpackTensor;
use bridge_core::{
    Array as CoreArray, BridgeError, DType, Device, HostData, HostElement, MemoryType,
};
use dlpark::ffi::DLDevice;
use dlpark::python::{DlpackStream, ImportRequest, ImportedDlpack, StreamArg};
use ndarray::ArrayViewD;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString};

use crate::array::{Array, dtype_name};
use crate::errors::{IntoPy, invalid, to_py};

/// What an [`Array`] holds.
#[derive(Clone)]
pub(crate) enum Held {
    /// A tensor imported from another library, read in place (host memory).
    Tensor(Arc<DlpackTensor>),
    /// arraybridge's own array (host ndarray, CUDA or OpenCL buffer).
    Bridge(Arc<CoreArray>),
}

impl Held {
    pub(crate) fn device(&self) -> Device {
        match self {
            Held::Tensor(t) => t.info().device,
            Held::Bridge(a) => a.device(),
        }
    }
    pub(crate) fn dtype(&self) -> DType {
        match self {
            Held::Tensor(t) => t.info().dtype,
            Held::Bridge(a) => a.dtype(),
        }
    }
    pub(crate) fn shape(&self) -> Vec<usize> {
        match self {
            Held::Tensor(t) => t.info().shape.clone(),
            Held::Bridge(a) => a.shape().to_vec(),
        }
    }
    pub(crate) fn read_only(&self) -> bool {
        match self {
            Held::Tensor(t) => t.info().read_only,
            Held::Bridge(_) => false,
        }
    }
    /// A host view when the data is in host memory.
    pub(crate) fn host_view<T: HostElement>(&self) -> bridge_core::Result<ArrayViewD<'_, T>> {
        match self {
            Held::Tensor(t) => t.view::<T>(),
            Held::Bridge(a) => a.as_ndarray::<T>(),
        }
    }
    /// Host bytes that [`Self::to_host`] allocates at its peak: one row-major copy, and for an
    /// array on a device also the buffer its bytes are read into first (saturating: a size
    /// that overflows is over any budget).
    pub(crate) fn to_host_bytes(&self) -> u64 {
        let n = nbytes(&self.shape(), self.dtype());
        match self {
            Held::Bridge(a) if a.device() != Device::Cpu => n.saturating_mul(2),
            _ => n,
        }
    }

    /// `a float32 array of shape (65536, 65536)` (`… on opencl:0` off the host): what a budget
    /// error names.
    pub(crate) fn describe(&self) -> String {
        let on = match self.device() {
            Device::Cpu => String::new(),
            d => format!(" on {d}"),
        };
        format!(
            "a {} array of shape {}{on}",
            dtype_name(self.dtype()),
            shape_str(&self.shape())
        )
    }

    /// [`Self::to_host`] after checking its bytes against the host budget (`OutOfMemory`
    /// naming `what` and [`Self::describe`] when they do not fit): a broadcast view of a few
    /// bytes can ask for gigabytes.
    pub(crate) fn host_copy(&self, what: &str, hint: &str) -> PyResult<HostData> {
        crate::memory::check(
            self.to_host_bytes(),
            &format!("{what}: a host copy of {}", self.describe()),
            hint,
        )?;
        self.to_host().py_err()
    }

    /// A host copy (row-major), from any device. Unchecked: callers check
    /// [`Self::to_host_bytes`] against the budget first ([`Self::host_copy`]).
    pub(crate) fn to_host(&self) -> bridge_core::Result<HostData> {
        match self {
            Held::Tensor(t) => t.to_host_data(),
            Held::Bridge(a) if a.device() == Device::Cpu => {
                let h = a.host()?;
                Ok(bridge_core::with_host_data!(h, x => {
                    HostElement::wrap(x.as_standard_layout().into_owned())
                }))
            }
            Held::Bridge(a) => download(a),
        }
    }
}

/// Bytes of `shape` elements of `dtype`, saturating (an overflow is over any budget).
pub(crate) fn nbytes(shape: &[usize], dtype: DType) -> u64 {
    let mut factors: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    factors.push(dtype.size_of() as u64);
    bridge_core::host::checked_product(&factors).unwrap_or(u64::MAX)
}

/// A shape as Python writes it: `(3,)`, `(2, 3)`, `()`.
pub(crate) fn shape_str(shape: &[usize]) -> String {
    match shape {
        [n] => format!("({n},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// What a budget error suggests for a copy of a whole array.
pub(crate) const COPY_HINT: &str =
    "a broadcast or strided view is copied in full: use a smaller array";

/// A host copy of a device array: the process registry's planned route to the host, its first
/// hop copying from the borrowed array (recorded by the registry's observer, as every move of
/// the package is).
pub(crate) fn download(a: &CoreArray) -> bridge_core::Result<HostData> {
    let host = registry().copy(a, MemoryType::Host, Device::Cpu)?;
    host.into_host()
}

/// The consumer stream we hand a CUDA producer (`__dlpack__(stream=…)`).
struct CudaConsumer(usize);

// SAFETY: the handle is a live CUDA stream of the producer's device (an `ImportStream`), which
// outlives the import.
unsafe impl DlpackStream for CudaConsumer {
    fn as_python_arg(&self, _py: Python<'_>, _device: DLDevice) -> PyResult<StreamArg> {
        Ok(dlpark::python::consumer::stream::cuda(
            self.0 as *mut c_void,
        ))
    }
}

fn tensor_of(imported: ImportedDlpack) -> bridge_core::Result<DlpackTensor> {
    match imported {
        ImportedDlpack::Legacy(m) => DlpackTensor::from_legacy(m),
        ImportedDlpack::Versioned(m) => DlpackTensor::from_versioned(m),
    }
}

fn import_error(e: PyErr, py: Python<'_>) -> PyErr {
    if e.is_instance_of::<crate::errors::ArrayBridgeError>(py) {
        return e;
    }
    let text = e.to_string();
    if text.contains("native byte order") {
        return invalid(format!(
            "cannot import the array through DLPack: its bytes are not in this machine's order \
             (big-endian, as FITS files store them; DLPack carries native byte order only): \
             x.astype(x.dtype.newbyteorder('=')) makes a native copy ({text})"
        ));
    }
    invalid(format!("cannot import the array through DLPack: {text}"))
}

/// Import any `__dlpack__` object (or DLPack capsule), or a buffer-protocol object through
/// `numpy.asarray` (zero-copy), as a validated tensor. CUDA tensors are imported with a
/// consumer stream that is synchronised before they are used (stream, not device, sync).
///
/// A `numpy.ndarray` is read in place without the DLPack exchange when NumPy would export it
/// as it is (`numpy_fast`: same pointer, shape, strides, dtype and read-only flag; the array
/// kept alive by the tensor).
pub(crate) fn import_tensor(obj: &Bound<'_, PyAny>) -> PyResult<DlpackTensor> {
    if let Some(t) = crate::numpy_fast::try_import(obj) {
        return Ok(t);
    }
    let py = obj.py();
    let is_capsule = obj.is_instance_of::<pyo3::types::PyCapsule>();
    let obj = if is_capsule || obj.hasattr("__dlpack__")? {
        obj.clone()
    } else {
        let a = py
            .import("numpy")?
            .call_method1("asarray", (obj,))
            .map_err(|e| invalid(format!("not an array (no __dlpack__, no buffer): {e}")))?;
        if let Some(t) = crate::numpy_fast::try_import(&a) {
            return Ok(t);
        }
        a
    };
    let request = ImportRequest::new(obj.as_borrowed()).map_err(|e| import_error(e, py))?;
    let device = request.device().ok().map(dlpark_device);
    let imported = match device {
        Some(Ok(Device::Cuda(n))) => import_cuda(py, request, n)?,
        _ => request
            .import(None, None)
            .map_err(|e| import_error(e, py))?,
    };
    tensor_of(imported).py_err()
}

fn dlpark_device(d: DLDevice) -> bridge_core::Result<Device> {
    bridge_core::dlpack::device_of(d)
}

#[cfg(feature = "cuda")]
fn import_cuda(py: Python<'_>, request: ImportRequest<'_>, n: usize) -> PyResult<ImportedDlpack> {
    let stream = arraybridge::bridge_cuda::dlpack::ImportStream::new(n).py_err()?;
    let consumer = CudaConsumer(stream.handle());
    let imported = request
        .import(Some(&consumer), None)
        .map_err(|e| import_error(e, py))?;
    stream.finish().py_err()?;
    Ok(imported)
}

#[cfg(not(feature = "cuda"))]
fn import_cuda(_py: Python<'_>, _request: ImportRequest<'_>, n: usize) -> PyResult<ImportedDlpack> {
    let _ = CudaConsumer(0);
    Err(to_py(BridgeError::BackendUnavailable {
        backend: "cuda".into(),
        reason: format!("a tensor on cuda:{n}, but this build of arraybridge has no CUDA backend"),
    }))
}

/// Import `obj` as a [`Held`]: zero-copy on the host; C-contiguous CUDA tensors wrapped in
/// place, strided ones gathered into a contiguous copy on their device.
pub(crate) fn import_held(obj: &Bound<'_, PyAny>) -> PyResult<Held> {
    import_held_with(obj, true)
}

/// [`import_held`]; with `allow_copy` false a device tensor that would have to be copied (a
/// strided CUDA tensor) is an `InvalidInput` instead.
pub(crate) fn import_held_with(obj: &Bound<'_, PyAny>, allow_copy: bool) -> PyResult<Held> {
    if let Ok(a) = obj.cast::<Array>() {
        return Ok(a.get().held.clone());
    }
    let t = import_tensor(obj)?;
    match t.info().device {
        Device::Cpu => Ok(Held::Tensor(Arc::new(t))),
        d => {
            // the planner says whether the import copies (a strided device tensor is gathered)
            if !allow_copy {
                let plan = registry()
                    .plan_from_dlpack(&t, d.memory_type(), d)
                    .py_err()?;
                if !plan.is_zero_copy() {
                    return Err(invalid(format!(
                        "copy=False, but importing the tensor on {d} (strides {:?} for shape \
                         {:?}) copies it: {plan}",
                        t.info().strides,
                        t.info().shape
                    )));
                }
            }
            let imported = registry().from_dlpack(t, d.memory_type(), d).py_err()?;
            Ok(Held::Bridge(Arc::new(imported.array)))
        }
    }
}

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
