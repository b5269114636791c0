//! Importing any `__dlpack__` object, DLPack capsule or buffer-protocol object as a [`Held`]
//! (an `arraybridge.Array` as the array it holds).

use std::ffi::c_void;
use std::sync::Arc;

use arraybridge::registry;
use bridge_core::Device;
use bridge_core::dlpack::DlpackTensor;
use dlpark::ffi::DLDevice;
use dlpark::python::{DlpackStream, ImportRequest, ImportedDlpack, StreamArg};
use pyo3::prelude::*;

use crate::array::Array;
use crate::errors::{IntoPy, invalid};
use crate::held::Held;

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
    // `bytes` through its buffer (read-only uint8), as a `memoryview` of it: `numpy.asarray`
    // would make it one string scalar (dtype `S4`)
    let obj = if obj.is_instance_of::<pyo3::types::PyBytes>() {
        pyo3::types::PyMemoryView::from(obj)?.into_any()
    } else {
        obj.clone()
    };
    let obj = &obj;
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
