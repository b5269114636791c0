//! The converters bridge-cuda registers: host→CUDA, CUDA→host and CUDA→CUDA.
//!
//! `edge` is pure (reads only its arguments and the path chosen at construction); `convert`
//! returns synchronised data (the blocking completion contract of [`bridge_core::convert`]).
//! Between two CUDA devices the route records [`TransferKind::PeerCopy`] when the topology says
//! the pair has peer access, and [`TransferKind::PinnedStaged`] otherwise.

use std::sync::Arc;

use bridge_core::convert::{Converted, Converter, Topology, TransferKind};
use bridge_core::{Array, BridgeError, Device, MemoryType, Result};

use crate::buffer::storage_of;
use crate::device::gpu_for;
use crate::transfer::HostPath;

/// Host (ndarray, any layout) → CUDA array.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostToCuda {
    /// Pageable or pinned-staged.
    pub path: HostPath,
}

/// CUDA array → host (C-ordered ndarray).
#[derive(Debug, Clone, Copy, Default)]
pub struct CudaToHost {
    /// Pageable or pinned-staged.
    pub path: HostPath,
}

/// CUDA array on one device → another device (peer copy or pinned staging).
#[derive(Debug, Clone, Copy, Default)]
pub struct CudaToCuda;

impl Converter for HostToCuda {
    fn source(&self) -> MemoryType {
        MemoryType::Host
    }
    fn target(&self) -> MemoryType {
        MemoryType::Cuda
    }
    fn edge(&self, src: Device, dst: Device, _topology: &Topology) -> Option<TransferKind> {
        (src == Device::Cpu && matches!(dst, Device::Cuda(_))).then_some(self.path.kind())
    }
    fn convert(&self, array: Array, dst: Device, _kind: TransferKind) -> Result<Converted> {
        self.upload(&array, dst)
    }
    fn copy(&self, array: &Array, dst: Device, _kind: TransferKind) -> Option<Result<Converted>> {
        Some(self.upload(array, dst))
    }
}

impl HostToCuda {
    fn upload(&self, array: &Array, dst: Device) -> Result<Converted> {
        let g = gpu_for(dst)?;
        let bytes = array.nbytes() as u64;
        let out = g.upload_with(array.host()?, self.path)?;
        Ok(Converted {
            array: out,
            bytes_moved: bytes,
        })
    }
}

impl Converter for CudaToHost {
    fn source(&self) -> MemoryType {
        MemoryType::Cuda
    }
    fn target(&self) -> MemoryType {
        MemoryType::Host
    }
    fn edge(&self, src: Device, dst: Device, _topology: &Topology) -> Option<TransferKind> {
        (matches!(src, Device::Cuda(_)) && dst == Device::Cpu).then_some(self.path.kind())
    }
    fn convert(&self, array: Array, dst: Device, _kind: TransferKind) -> Result<Converted> {
        self.download(&array, dst)
    }
    fn copy(&self, array: &Array, dst: Device, _kind: TransferKind) -> Option<Result<Converted>> {
        Some(self.download(array, dst))
    }
}

impl CudaToHost {
    fn download(&self, array: &Array, dst: Device) -> Result<Converted> {
        if dst != Device::Cpu {
            return Err(BridgeError::InvalidPlacement {
                memory_type: MemoryType::Host,
                device: dst,
            });
        }
        let g = Arc::clone(storage_of(array)?.gpu());
        let bytes = array.nbytes() as u64;
        let host = g.download_with(array, self.path)?;
        Ok(Converted {
            array: Array::from_host(host),
            bytes_moved: bytes,
        })
    }
}

/// The transfer kind between two CUDA devices as the planner sees it (pure).
pub fn cuda_pair_kind(src: Device, dst: Device, topology: &Topology) -> Option<TransferKind> {
    match (src, dst) {
        (Device::Cuda(_), Device::Cuda(_)) => Some(if topology.same_physical(src, dst) {
            TransferKind::DeviceCopy
        } else if topology.can_access_peer(src, dst) {
            TransferKind::PeerCopy
        } else {
            TransferKind::PinnedStaged
        }),
        _ => None,
    }
}

impl Converter for CudaToCuda {
    fn source(&self) -> MemoryType {
        MemoryType::Cuda
    }
    fn target(&self) -> MemoryType {
        MemoryType::Cuda
    }
    fn edge(&self, src: Device, dst: Device, topology: &Topology) -> Option<TransferKind> {
        cuda_pair_kind(src, dst, topology)
    }
    fn convert(&self, array: Array, dst: Device, kind: TransferKind) -> Result<Converted> {
        CudaToCuda::device_copy(&array, dst, kind)
    }
    fn copy(&self, array: &Array, dst: Device, kind: TransferKind) -> Option<Result<Converted>> {
        Some(CudaToCuda::device_copy(array, dst, kind))
    }
}

impl CudaToCuda {
    fn device_copy(array: &Array, dst: Device, kind: TransferKind) -> Result<Converted> {
        let g = gpu_for(dst)?;
        let bytes = array.nbytes() as u64;
        let out = g.copy_from(array, kind)?;
        Ok(Converted {
            array: out,
            bytes_moved: bytes,
        })
    }
}

/// The converters bridge-cuda registers (pinned-staged host paths).
pub fn converters() -> Vec<Arc<dyn Converter>> {
    converters_with(HostPath::PinnedStaged)
}

/// The converters with the host path of your choice (benchmarks compare both).
pub fn converters_with(path: HostPath) -> Vec<Arc<dyn Converter>> {
    vec![
        Arc::new(HostToCuda { path }),
        Arc::new(CudaToHost { path }),
        Arc::new(CudaToCuda),
    ]
}
