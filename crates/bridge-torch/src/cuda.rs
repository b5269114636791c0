//! Torch-CUDA memory exchange with other CUDA libraries (bridge-cuda), by pointer, without
//! copies. These are the torch halves of a `torch:cuda:N` ↔ `cuda:N` zero-copy converter:
//!
//! - [`tensor_from_foreign_cuda`]: a torch tensor over device memory another library owns; the
//!   owner moves into the tensor's storage deleter, so it lives exactly as long as any tensor
//!   viewing it. Its pending work is synchronised first; when torch lets go, the device is
//!   synchronised before the owner is dropped (so torch work still queued on the memory
//!   finishes before the other library reuses it).
//! - [`export_cuda`]: a torch CUDA tensor's memory as a `(pointer, bytes, ordinal)` plus an
//!   owner ([`CudaExport`], `Send + Sync`) that keeps torch's allocation alive; the device is
//!   synchronised so the data is complete for any stream of the other library.
//!
//! The converters built on these (feature `cuda-interop`) are in `crate::cuda_interop`.

use std::sync::{Mutex, PoisonError};

use bridge_core::{BridgeError, DType, Device, Result};
use tch::Tensor;

use crate::cuda_state::{cuda_device_count, cuda_unavailable_reason};
use crate::dtype::dtype_of;
use crate::error::map_torch_error;
use crate::ffi::{self, Place};

// The contract is defined beside the code that relies on it (the shim's deleter context).
pub use crate::ffi::ForeignCudaMemory;

/// A C-order torch tensor of `dtype` and `shape` on `torch:cuda:N` over `mem` (no copy). The
/// tensor (and every view of it) keeps `mem` alive.
pub fn tensor_from_foreign_cuda<M: ForeignCudaMemory>(
    mem: M,
    shape: &[usize],
    dtype: DType,
) -> Result<Tensor> {
    if cuda_device_count() <= mem.cuda_ordinal() {
        return Err(BridgeError::unavailable(
            "torch",
            cuda_unavailable_reason()
                .unwrap_or_else(|| format!("no torch:cuda:{}", mem.cuda_ordinal())),
        ));
    }
    ffi::alias_cuda(mem, shape, dtype)
}

/// A torch CUDA tensor's memory, exported for another library to alias. Holding it keeps the
/// allocation alive in torch's caching allocator; drop it only once the other library's work
/// on the memory is done.
pub struct CudaExport {
    tensor: Mutex<Tensor>,
    ptr: u64,
    nbytes: usize,
    ordinal: usize,
    dtype: DType,
    shape: Vec<usize>,
}

impl std::fmt::Debug for CudaExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaExport")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("nbytes", &self.nbytes)
            .field("ordinal", &self.ordinal)
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .finish()
    }
}

impl CudaExport {
    /// Device address of the first element (C order).
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }
    /// Bytes.
    pub fn nbytes(&self) -> usize {
        self.nbytes
    }
    /// CUDA device ordinal.
    pub fn cuda_ordinal(&self) -> usize {
        self.ordinal
    }
    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// A handle to the exported tensor.
    pub fn tensor(&self) -> Tensor {
        self.tensor
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .shallow_clone()
    }
}

/// Export a CUDA tensor's memory (C order: a non-contiguous tensor is first copied on the
/// device, which the returned flag reports). The device is synchronised before returning.
pub fn export_cuda(tensor: &Tensor) -> Result<(CudaExport, bool)> {
    let Place::Cuda(ordinal) = ffi::device_place(tensor) else {
        return Err(BridgeError::Unsupported(
            "export_cuda needs a CUDA tensor".into(),
        ));
    };
    let dtype = dtype_of(tensor)?;
    let copied = !tensor.is_contiguous();
    let t = if copied {
        ffi::to_device(tensor, Place::Cuda(ordinal), false)?
    } else {
        tensor.shallow_clone()
    };
    ffi::cuda_synchronize(ordinal)
        .map_err(|m| map_torch_error(Device::TorchCuda(ordinal), 0, &m))?;
    let shape: Vec<usize> = t
        .size()
        .iter()
        .map(|&d| usize::try_from(d).unwrap_or(0))
        .collect();
    let nbytes = shape.iter().product::<usize>() * dtype.size_of();
    Ok((
        CudaExport {
            ptr: t.data_ptr() as usize as u64,
            tensor: Mutex::new(t),
            nbytes,
            ordinal,
            dtype,
            shape,
        },
        copied,
    ))
}
