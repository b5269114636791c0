//! The converters this backend contributes: host ↔ OpenCL and OpenCL ↔ OpenCL.
//!
//! # Completion contract
//! Every `convert` here returns only after the destination data is complete: host → OpenCL
//! uses a blocking write, OpenCL → host a blocking read, and a device-side copy is waited for
//! (its event) before returning. Any later consumer — host code, or any queue of any device —
//! therefore sees the whole array. Non-blocking variants are offered outside the converter
//! interface ([`OpenClBackend::upload_async`], [`OpenClBackend::download_async`],
//! [`ClBuffer::write_async`](crate::ClBuffer::write_async), ...) and return a
//! [`Pending`](crate::Pending) token whose `wait` is the only way to reach the result.
//!
//! # Edges
//! The planner-facing `edge` functions are pure: they consult a snapshot of the device list
//! (ordinal → platform) taken when the converters are created, never the driver.
//! - host → `opencl:N` and back: [`TransferKind::HostCopy`];
//! - `opencl:A` → `opencl:B` on one platform (one shared context): [`TransferKind::PeerCopy`]
//!   (a device-side `clEnqueueCopyBuffer`);
//! - across platforms: [`TransferKind::HostCopy`], staged through host memory in chunks of
//!   [`STAGING_CHUNK`](crate::buffer::STAGING_CHUNK) bytes.

use std::sync::Arc;

use bridge_core::convert::{Converted, Converter, Topology, TransferKind};
use bridge_core::{Array, BridgeError, Device, MemoryType, Result};

use crate::backend::OpenClBackend;

fn snapshot(backend: &OpenClBackend) -> Arc<Vec<usize>> {
    Arc::new(
        backend
            .inner
            .discovery()
            .map(|d| d.devices.iter().map(|e| e.platform).collect())
            .unwrap_or_default(),
    )
}

pub(crate) fn converters(backend: &OpenClBackend) -> Vec<Arc<dyn Converter>> {
    let platforms = snapshot(backend);
    vec![
        Arc::new(HostToOpenCl {
            backend: backend.clone(),
            platforms: Arc::clone(&platforms),
        }),
        Arc::new(OpenClToHost {
            backend: backend.clone(),
            platforms: Arc::clone(&platforms),
        }),
        Arc::new(OpenClToOpenCl {
            backend: backend.clone(),
            platforms,
        }),
    ]
}

fn known(platforms: &[usize], d: Device) -> Option<usize> {
    match d {
        Device::OpenCl(n) => platforms.get(n).copied(),
        _ => None,
    }
}

/// Host (ndarray, any layout) → OpenCL buffer.
struct HostToOpenCl {
    backend: OpenClBackend,
    platforms: Arc<Vec<usize>>,
}

impl Converter for HostToOpenCl {
    fn source(&self) -> MemoryType {
        MemoryType::Host
    }
    fn target(&self) -> MemoryType {
        MemoryType::OpenCl
    }
    fn edge(&self, src: Device, dst: Device, _topology: &Topology) -> Option<TransferKind> {
        (src == Device::Cpu && known(&self.platforms, dst).is_some())
            .then_some(TransferKind::HostCopy)
    }
    fn convert(&self, array: Array, dst: Device, _kind: TransferKind) -> Result<Converted> {
        self.upload(&array, dst)
    }
    fn copy(&self, array: &Array, dst: Device, _kind: TransferKind) -> Option<Result<Converted>> {
        Some(self.upload(array, dst))
    }
}

impl HostToOpenCl {
    fn upload(&self, array: &Array, dst: Device) -> Result<Converted> {
        let out = self.backend.upload(array.host()?, dst)?;
        let bytes_moved = out.nbytes() as u64;
        Ok(Converted {
            array: out,
            bytes_moved,
        })
    }
}

/// OpenCL buffer → host (C-ordered ndarray).
struct OpenClToHost {
    backend: OpenClBackend,
    platforms: Arc<Vec<usize>>,
}

impl Converter for OpenClToHost {
    fn source(&self) -> MemoryType {
        MemoryType::OpenCl
    }
    fn target(&self) -> MemoryType {
        MemoryType::Host
    }
    fn edge(&self, src: Device, dst: Device, _topology: &Topology) -> Option<TransferKind> {
        (dst == Device::Cpu && known(&self.platforms, src).is_some())
            .then_some(TransferKind::HostCopy)
    }
    fn convert(&self, array: Array, dst: Device, _kind: TransferKind) -> Result<Converted> {
        self.download(&array, dst)
    }
    fn copy(&self, array: &Array, dst: Device, _kind: TransferKind) -> Option<Result<Converted>> {
        Some(self.download(array, dst))
    }
}

impl OpenClToHost {
    fn download(&self, array: &Array, dst: Device) -> Result<Converted> {
        if dst != Device::Cpu {
            return Err(BridgeError::InvalidPlacement {
                memory_type: MemoryType::Host,
                device: dst,
            });
        }
        let host = self.backend.download(array)?;
        let out = Array::from_host(host);
        let bytes_moved = out.nbytes() as u64;
        Ok(Converted {
            array: out,
            bytes_moved,
        })
    }
}

/// OpenCL device → another OpenCL device.
struct OpenClToOpenCl {
    backend: OpenClBackend,
    platforms: Arc<Vec<usize>>,
}

impl Converter for OpenClToOpenCl {
    fn source(&self) -> MemoryType {
        MemoryType::OpenCl
    }
    fn target(&self) -> MemoryType {
        MemoryType::OpenCl
    }
    fn edge(&self, src: Device, dst: Device, _topology: &Topology) -> Option<TransferKind> {
        let (a, b) = (known(&self.platforms, src)?, known(&self.platforms, dst)?);
        Some(if src == dst {
            TransferKind::DeviceCopy
        } else if a == b {
            TransferKind::PeerCopy
        } else {
            TransferKind::HostCopy
        })
    }
    fn convert(&self, array: Array, dst: Device, _kind: TransferKind) -> Result<Converted> {
        self.device_copy(&array, dst)
    }
    fn copy(&self, array: &Array, dst: Device, _kind: TransferKind) -> Option<Result<Converted>> {
        Some(self.device_copy(array, dst))
    }
}

impl OpenClToOpenCl {
    fn device_copy(&self, array: &Array, dst: Device) -> Result<Converted> {
        let src = OpenClBackend::buffer(array)?;
        let out = self
            .backend
            .alloc_array(dst, array.dtype(), array.shape())?;
        let n = array.nbytes();
        OpenClBackend::buffer(&out)?.copy_from(src, 0, 0, n)?;
        Ok(Converted {
            array: out,
            bytes_moved: n as u64,
        })
    }
}
