//! [`Held`]: what an array object of the package holds (arraybridge's own array or an imported
//! DLPack tensor): its shape, dtype and device, and host copies of it.

use std::sync::Arc;

use arraybridge::registry;
use bridge_core::dlpack::DlpackTensor;
use bridge_core::{Array as CoreArray, DType, Device, HostData, HostElement, MemoryType};
use ndarray::ArrayViewD;
use pyo3::prelude::*;

use crate::errors::IntoPy;

/// What an `arraybridge.Array` holds (and what every function of the package reads an array
/// object as).
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

/// NumPy's name of a dtype.
pub(crate) fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::U8 => "uint8",
        DType::U16 => "uint16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::F32 => "float32",
        DType::F64 => "float64",
    }
}
