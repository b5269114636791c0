//! [`Array`]: the DLPack-speaking array object of the Python package (export to any
//! consumer, `device`, `shape`, `dtype`, `to`, `__repr__`).

use std::sync::Arc;

use bridge_core::dlpack::{
    ConsumerStream, ExportOptions, Exported, dl_device, export_host_copy, export_host_shared,
};
use bridge_core::{Array as CoreArray, BridgeError, Device};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::errors::{IntoPy, invalid, to_py};
use crate::held::{COPY_HINT, Held, dtype_name, shape_str};

/// An array held by arraybridge, on the host or a device. Any DLPack consumer takes it
/// (`numpy.from_dlpack`, `torch.from_dlpack`, `cupy.from_dlpack`, `jax.dlpack.from_dlpack`);
/// host and CUDA arrays are exported zero-copy.
#[pyclass(module = "arraybridge", name = "Array", frozen)]
pub struct Array {
    pub(crate) held: Held,
}

fn parse_stream(stream: Option<&Bound<'_, PyAny>>) -> PyResult<ConsumerStream> {
    let Some(s) = stream else {
        return Ok(ConsumerStream::Omitted);
    };
    if s.is_none() {
        return Ok(ConsumerStream::Omitted);
    }
    let v: i64 = match s.extract() {
        Ok(v) => v,
        Err(_) => s
            .getattr("__cuda_stream__")
            .and_then(|a| if a.is_callable() { a.call0() } else { Ok(a) })
            .and_then(|a| a.extract())
            .map_err(|_| invalid("stream must be an integer or provide __cuda_stream__"))?,
    };
    ConsumerStream::from_protocol(Some(v)).py_err()
}

impl Array {
    fn export(
        &self,
        stream: ConsumerStream,
        max_version: Option<(u32, u32)>,
        dl_device_req: Option<(u32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Exported> {
        let opts = ExportOptions {
            abi: ExportOptions::abi_for_max_version(max_version),
            read_only: self.held.read_only(),
            stream,
        };
        let here = self.held.device();
        let ours = dl_device(here);
        let target = dl_device_req;
        let cross = target.is_some_and(|t| t != (ours.device_type.0, ours.device_id));
        // host memory is what a cross-device export hands over (the CPU only, checked below)
        if (cross || here == Device::Cpu) && stream != ConsumerStream::Omitted {
            return Err(to_py(BridgeError::invalid_argument(
                "stream",
                "the DLPack protocol takes no stream for CPU arrays",
            )));
        }
        if cross {
            let cpu = dl_device(Device::Cpu);
            if target != Some((cpu.device_type.0, cpu.device_id)) {
                return Err(PyBufferError::new_err(format!(
                    "arraybridge exports {here} memory to its own device or to the CPU only"
                )));
            }
            if copy == Some(false) {
                return Err(PyBufferError::new_err(format!(
                    "the array is on {here}: copy=False cannot hand it to the CPU"
                )));
            }
            let host = self
                .held
                .host_copy("__dlpack__(dl_device=CPU)", COPY_HINT)?;
            let opts = ExportOptions {
                stream: ConsumerStream::Omitted,
                ..opts
            };
            return export_host_copy(host, &opts).py_err();
        }
        if copy == Some(true) {
            if here != Device::Cpu {
                return Err(PyBufferError::new_err(format!(
                    "copy=True for {here} memory: convert it with arraybridge.convert(x, \
                     device=..., copy=True) first"
                )));
            }
            if stream != ConsumerStream::Omitted {
                return Err(to_py(BridgeError::invalid_argument(
                    "stream",
                    "the DLPack protocol takes no stream for CPU arrays",
                )));
            }
            let host = self.held.host_copy("__dlpack__(copy=True)", COPY_HINT)?;
            return export_host_copy(host, &opts).py_err();
        }
        match &self.held {
            Held::Tensor(t) => {
                if stream != ConsumerStream::Omitted {
                    return Err(to_py(BridgeError::invalid_argument(
                        "stream",
                        "the DLPack protocol takes no stream for CPU arrays",
                    )));
                }
                t.reexport(&opts)
                    .map(|tensor| Exported {
                        tensor,
                        copied: false,
                    })
                    .py_err()
            }
            Held::Bridge(a) => match a.device() {
                Device::Cpu => export_host_shared(Arc::clone(a), &opts).py_err(),
                #[cfg(feature = "cuda")]
                Device::Cuda(_) => {
                    arraybridge::bridge_cuda::dlpack::export_shared(Arc::clone(a), &opts).py_err()
                }
                d => Err(PyBufferError::new_err(format!(
                    "{} memory on {d} has no DLPack consumer; ask for the CPU \
                     (numpy.from_dlpack(x, device='cpu')) or use arraybridge.convert",
                    a.memory_type()
                ))),
            },
        }
    }
}

#[pymethods]
impl Array {
    /// Export as a DLPack capsule (the Python array API's `__dlpack__`): versioned when
    /// `max_version >= (1, 0)`, legacy otherwise; zero-copy on the array's own device;
    /// `dl_device=(1, 0)` with `copy` not False gives a host copy (flagged `IS_COPIED`).
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<&Bound<'_, PyAny>>,
        dl_device: Option<(u32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let stream = parse_stream(stream)?;
        let max_version = max_version.map(parse_max_version).transpose()?;
        // The Python array API's `__dlpack__` raises BufferError for exports it cannot make.
        let out = self
            .export(stream, max_version, dl_device, copy)
            .map_err(|e| {
                if e.get_type(py)
                    .is(py.get_type::<crate::errors::ArrayBridgeError>())
                {
                    PyBufferError::new_err(e.value(py).to_string())
                } else {
                    e
                }
            })?;
        let t = out.tensor;
        let capsule = match t.into_versioned() {
            Ok(m) => m.into_pyobject(py)?.into_any().unbind(),
            Err(t) => match t.into_legacy() {
                Ok(m) => m.into_pyobject(py)?.into_any().unbind(),
                // exports are managed tensors; only imports read in place are neither ABI
                Err(_) => {
                    return Err(PyBufferError::new_err(
                        "internal: the export is not a DLPack managed tensor",
                    ));
                }
            },
        };
        Ok(capsule)
    }

    /// `(device_type, device_id)` as DLPack numbers them (1 = CPU, 2 = CUDA, 4 = OpenCL).
    fn __dlpack_device__(&self) -> (u32, i32) {
        let d = dl_device(self.held.device());
        (d.device_type.0, d.device_id)
    }

    /// The shape, a tuple (as NumPy's, PyTorch's and the array API's).
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.held.shape())
    }

    /// The NumPy name of the dtype (`"float32"`, ...).
    #[getter]
    fn dtype(&self) -> &'static str {
        dtype_name(self.held.dtype())
    }

    /// The device (`"cpu"`, `"cuda:0"`, `"opencl:0"`).
    #[getter]
    fn device(&self) -> String {
        self.held.device().to_string()
    }

    /// Number of dimensions.
    #[getter]
    fn ndim(&self) -> usize {
        self.held.shape().len()
    }

    /// Whether the producer marked the data read-only.
    #[getter]
    fn readonly(&self) -> bool {
        self.held.read_only()
    }

    /// The address of element `[0, …, 0]` (host pointer or device address).
    #[getter]
    fn data_ptr(&self) -> PyResult<usize> {
        match &self.held {
            Held::Tensor(t) => Ok(t.info().data),
            Held::Bridge(a) => {
                let out = export_probe(a)?;
                Ok(out)
            }
        }
    }

    /// A NumPy array: zero-copy for host memory, a copy from a device.
    fn numpy<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let np = py.import("numpy")?;
        if slf.get().held.device() == Device::Cpu {
            return np.call_method1("from_dlpack", (slf,));
        }
        let host = slf.get().held.host_copy("Array.numpy()", COPY_HINT)?;
        let copy = Bound::new(
            py,
            Array {
                held: Held::Bridge(Arc::new(CoreArray::from_host(host))),
            },
        )?;
        np.call_method1("from_dlpack", (copy,))
    }

    /// NumPy's array protocol (`numpy.asarray(x)`): a host array as a zero-copy NumPy view
    /// (cast to `dtype` when given; a copy when `copy` is True). A device array is refused with
    /// a `TypeError`, as CuPy and PyTorch refuse theirs: the copy to the host is explicit
    /// (`x.numpy()`, `arraybridge.convert(x, "cpu")`).
    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let device = slf.get().held.device();
        if device != Device::Cpu {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "an arraybridge.Array on {device} is not converted to NumPy implicitly (that \
                 would copy device memory): use x.numpy() or \
                 arraybridge.convert(x, \"cpu\", to=\"numpy\")"
            )));
        }
        let np = py.import("numpy")?;
        let a = np.call_method1("from_dlpack", (slf,))?;
        let a = match dtype {
            Some(d) if !d.is_none() => {
                let want = np.call_method1("dtype", (d,))?;
                if a.getattr("dtype")?.eq(&want)? {
                    a
                } else if copy == Some(false) {
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "copy=False, but a {} array is {} (a cast copies)",
                        want.str()?,
                        dtype_name(slf.get().held.dtype())
                    )));
                } else {
                    // the cast is the copy
                    return a.call_method1("astype", (want,));
                }
            }
            _ => a,
        };
        if copy == Some(true) {
            a.call_method0("copy")
        } else {
            Ok(a)
        }
    }

    fn __len__(&self) -> PyResult<usize> {
        self.held
            .shape()
            .first()
            .copied()
            .ok_or_else(|| pyo3::exceptions::PyTypeError::new_err("len() of a 0-d array"))
    }

    fn __repr__(&self) -> String {
        let shape = shape_str(&self.held.shape());
        format!(
            "arraybridge.Array(shape={shape}, dtype={}, device={}{})",
            dtype_name(self.held.dtype()),
            self.held.device(),
            if self.held.read_only() {
                ", readonly"
            } else {
                ""
            }
        )
    }
}

/// The data address of an arraybridge array (host pointer or device address).
fn export_probe(a: &CoreArray) -> PyResult<usize> {
    match a.device() {
        Device::Cpu => {
            let h = a.host().py_err()?;
            Ok(bridge_core::with_host_data!(h, x => x.as_ptr() as usize))
        }
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => Ok(arraybridge::bridge_cuda::storage_of(a)
            .py_err()?
            .device_ptr() as usize),
        d => Err(invalid(format!("{d} buffers have no address to show"))),
    }
}

/// `__dlpack__`'s `max_version`: two non-negative integers; a version beyond `u32` (a consumer
/// that takes any version) is `u32::MAX`, anything else a typed error.
fn parse_max_version(v: &Bound<'_, PyAny>) -> PyResult<(u32, u32)> {
    let refuse = || {
        invalid(format!(
            "max_version must be two non-negative integers, got {}",
            v.repr()
                .map(|r| r.to_string())
                .unwrap_or_else(|_| "?".into())
        ))
    };
    let (a, b): (Bound<'_, PyAny>, Bound<'_, PyAny>) = v.extract().map_err(|_| refuse())?;
    let part = |x: &Bound<'_, PyAny>| -> PyResult<u32> {
        if x.is_instance_of::<pyo3::types::PyBool>() {
            return Err(refuse());
        }
        // an integer of any width (Python's or NumPy's), not a float
        let n = x.call_method0("__index__").map_err(|_| refuse())?;
        if n.lt(0).map_err(|_| refuse())? {
            return Err(refuse());
        }
        Ok(n.extract::<u64>()
            .map_or(u32::MAX, |n| u32::try_from(n).unwrap_or(u32::MAX)))
    };
    Ok((part(&a)?, part(&b)?))
}
