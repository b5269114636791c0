//! Zero-copy converters between torch CUDA tensors (`torch:cuda:N`) and bridge-cuda arrays
//! (`cuda:M`) on the same physical GPU (feature `cuda-interop`). The memory changes hands by
//! pointer; nothing is copied (`bytes_moved` is 0, except when a non-contiguous tensor must
//! first be made C-contiguous on the device).
//!
//! | hop | edge kind | what happens |
//! |---|---|---|
//! | `torch:cuda:N` → `cuda:M` | zero-copy when the topology says N and M are the same GPU (UUID) | [`export_cuda`] (torch synchronises its device), then [`CudaStorage::from_foreign`] with the torch export as owner: the tensor's memory stays allocated until the bridge-cuda array is dropped |
//! | `cuda:M` → `torch:cuda:N` | same | [`CudaStorage::export`] (bridge-cuda synchronises its context), then [`tensor_from_foreign_cuda`] with the bridge-cuda storage as the tensor's deleter context: the buffer leaves the pool only when the last tensor view is dropped |
//!
//! Other device pairs have no edge here: the planner routes them through the host.
//!
//! Handing back: a bridge-cuda array that wraps a torch export comes back to torch as the
//! original tensor (no chain of wrappers grows on round trips); likewise, in reverse, torch
//! keeps the bridge-cuda buffer alive for as long as any view of the tensor exists.
//!
//! # Lifetimes and streams
//! - Either side may be dropped first: each side holds the other's owner. The releasing side
//!   synchronises before the owner goes (bridge-cuda synchronises its context before dropping
//!   a torch export; torch synchronises its device in the tensor deleter before dropping a
//!   bridge-cuda storage), so neither library reuses memory the other still has work queued on.
//! - While both sides are alive they alias the same memory: a write through one side is seen by
//!   the other once the writer's work is complete (synchronise the writing stream, or convert
//!   again, which synchronises).
//! - Torch and bridge-cuda share the device's primary context, so the pointers are valid in
//!   both. The device index must be the same CUDA ordinal on both sides (it is within one
//!   process); a mismatch is an error, not a silent copy.

use std::sync::Arc;

use bridge_core::convert::{Converted, Converter, Topology, TransferKind};
use bridge_core::{Array, BridgeError, Device, MemoryType, Result, Storage};
use bridge_cuda::{CudaStorage, ExportedCuda};

use crate::cuda::{CudaExport, ForeignCudaMemory, export_cuda, tensor_from_foreign_cuda};
use crate::storage::{TorchStorage, into_tensor};

/// The zero-copy edge between `torch:cuda:N` and `cuda:M` (either direction): [`ZeroCopy`]
/// exactly when the topology says both are the same physical GPU. Pure.
///
/// [`ZeroCopy`]: TransferKind::ZeroCopy
pub fn interop_edge(src: Device, dst: Device, topology: &Topology) -> Option<TransferKind> {
    match (src, dst) {
        (Device::TorchCuda(_), Device::Cuda(_)) | (Device::Cuda(_), Device::TorchCuda(_))
            if topology.same_physical(src, dst) =>
        {
            Some(TransferKind::ZeroCopy)
        }
        _ => None,
    }
}

/// A bridge-cuda buffer aliased by a torch tensor: torch keeps it in the tensor's deleter
/// context, so the buffer stays out of the pool while any view of the tensor lives.
struct BridgeCudaMemory(ExportedCuda);

// SAFETY: `ExportedCuda` owns the `CudaStorage` whose memory it reports: `device_ptr` is the
// start of at least `nbytes` bytes on CUDA ordinal `cuda_ordinal` (the pool block, or foreign
// memory whose owner the storage keeps), which stays allocated and out of the pool until the
// storage is dropped, i.e. while `self` lives. `synchronize` waits for the buffer's recorded
// use and for the whole context, so no bridge-cuda work writes it afterwards.
unsafe impl ForeignCudaMemory for BridgeCudaMemory {
    fn device_ptr(&self) -> u64 {
        self.0.device_ptr()
    }
    fn nbytes(&self) -> usize {
        self.0.nbytes()
    }
    fn cuda_ordinal(&self) -> usize {
        self.0.ordinal()
    }
    fn synchronize(&self) -> Result<()> {
        self.0.synchronize()
    }
}

fn ordinal_mismatch(from: Device, to: Device) -> BridgeError {
    BridgeError::Unsupported(format!(
        "zero-copy {from} → {to} needs the same CUDA ordinal on both sides"
    ))
}

/// `torch:cuda:N` → `cuda:N` without copying (see the module docs).
#[derive(Debug, Default, Clone, Copy)]
pub struct TorchToCuda;

impl Converter for TorchToCuda {
    fn source(&self) -> MemoryType {
        MemoryType::Torch
    }
    fn target(&self) -> MemoryType {
        MemoryType::Cuda
    }
    fn edge(&self, src: Device, dst: Device, topology: &Topology) -> Option<TransferKind> {
        match src {
            Device::TorchCuda(_) => interop_edge(src, dst, topology),
            _ => None,
        }
    }
    fn convert(&self, array: Array, dst: Device, _kind: TransferKind) -> Result<Converted> {
        let src = array.device();
        let Device::Cuda(n) = dst else {
            return Err(BridgeError::InvalidPlacement {
                memory_type: MemoryType::Cuda,
                device: dst,
            });
        };
        let tensor = into_tensor(array)?;
        let (export, copied) = export_cuda(&tensor)?;
        drop(tensor);
        if export.cuda_ordinal() != n {
            return Err(ordinal_mismatch(src, dst));
        }
        let gpu = bridge_cuda::gpu(n)?;
        let (ptr, nbytes, dtype) = (export.device_ptr(), export.nbytes(), export.dtype());
        let shape = export.shape().to_vec();
        // SAFETY: `export` holds a handle on the tensor, so torch's caching allocator keeps its
        // `nbytes` bytes at `ptr` on CUDA ordinal `n` allocated while the export lives; the
        // export becomes the storage's owner. Torch allocates through the CUDA runtime in the
        // device's primary context, which `gpu` uses too. `export_cuda` synchronised the
        // device, so no torch work is pending on the memory.
        let storage = unsafe { CudaStorage::from_foreign(&gpu, ptr, nbytes, Box::new(export)) }?;
        Ok(Converted {
            array: Array::from_storage(Box::new(storage), shape, dtype)?,
            bytes_moved: if copied { nbytes as u64 } else { 0 },
        })
    }
}

/// `cuda:N` → `torch:cuda:N` without copying (see the module docs).
#[derive(Debug, Default, Clone, Copy)]
pub struct CudaToTorch;

impl Converter for CudaToTorch {
    fn source(&self) -> MemoryType {
        MemoryType::Cuda
    }
    fn target(&self) -> MemoryType {
        MemoryType::Torch
    }
    fn edge(&self, src: Device, dst: Device, topology: &Topology) -> Option<TransferKind> {
        match src {
            Device::Cuda(_) => interop_edge(src, dst, topology),
            _ => None,
        }
    }
    fn convert(&self, array: Array, dst: Device, _kind: TransferKind) -> Result<Converted> {
        let src = array.device();
        let Device::TorchCuda(n) = dst else {
            return Err(BridgeError::InvalidPlacement {
                memory_type: MemoryType::Torch,
                device: dst,
            });
        };
        let (storage, shape, dtype) = array.into_storage::<CudaStorage>().map_err(|a| {
            BridgeError::Unsupported(format!(
                "expected a bridge-cuda array, got {} memory on {}",
                a.memory_type(),
                a.device()
            ))
        })?;
        if storage.gpu().ordinal() != n {
            return Err(ordinal_mismatch(src, dst));
        }
        let storage = match unwrap_torch_export(storage, &shape, dtype)? {
            Ok(tensor) => {
                return Ok(Converted {
                    array: TorchStorage::from_tensor(tensor)?.into_array()?,
                    bytes_moved: 0,
                });
            }
            Err(storage) => storage,
        };
        let tensor =
            tensor_from_foreign_cuda(BridgeCudaMemory((*storage).export()?), &shape, dtype)?;
        Ok(Converted {
            array: TorchStorage::from_tensor(tensor)?.into_array()?,
            bytes_moved: 0,
        })
    }
}

/// When `storage` wraps a torch export whose memory the array covers exactly (same pointer,
/// dtype and size), the original tensor reshaped to `shape` (the wrapper is released after
/// bridge-cuda's synchronisation); otherwise the storage back.
fn unwrap_torch_export(
    storage: Box<CudaStorage>,
    shape: &[usize],
    dtype: bridge_core::DType,
) -> Result<std::result::Result<tch::Tensor, Box<CudaStorage>>> {
    let matches = storage
        .foreign_owner()
        .and_then(|o| o.downcast_ref::<CudaExport>())
        .is_some_and(|e| {
            e.device_ptr() == storage.device_ptr()
                && e.dtype() == dtype
                && e.nbytes() == storage.nbytes()
                && e.nbytes() == shape.iter().product::<usize>() * dtype.size_of()
        });
    if !matches {
        return Ok(Err(storage));
    }
    let device = Device::TorchCuda(storage.gpu().ordinal());
    let owner = match storage.into_foreign_owner() {
        Ok(owner) => owner,
        Err(storage) => return Ok(Err(storage)),
    };
    let export = owner
        .downcast::<CudaExport>()
        .map_err(|_| BridgeError::backend("torch", None, "foreign owner changed type"))?;
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    export
        .tensor()
        .f_reshape(dims.as_slice())
        .map(Ok)
        .map_err(|e| crate::error::map_tch_error(device, 0, &e))
}

/// The interop converters ([`TorchToCuda`], [`CudaToTorch`]).
pub fn converters() -> Vec<Arc<dyn Converter>> {
    vec![Arc::new(TorchToCuda), Arc::new(CudaToTorch)]
}
