//! [`CudaBackend`]: discovery, memory statistics and limits, pool release, converters.

use std::sync::Arc;

use bridge_core::backend::{Backend, DeviceInfo};
use bridge_core::convert::Converter;
use bridge_core::memory::{MemoryInfo, MemoryLimit, MemoryStats};
use bridge_core::{BridgeError, Device, MemoryType, Result};

use crate::device::{gpu, gpu_for};
use crate::error::BACKEND;
use crate::{ffi, probe};

/// The CUDA backend. Construct with [`crate::backend()`].
#[derive(Debug, Default, Clone, Copy)]
pub struct CudaBackend;

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }
    fn memory_type(&self) -> MemoryType {
        MemoryType::Cuda
    }
    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        let n = probe::device_count()?;
        if n == 0 {
            return Err(BridgeError::unavailable(
                BACKEND,
                "the CUDA driver reports no device",
            ));
        }
        (0..n)
            .map(|i| {
                let g = gpu(i)?;
                let mut info = g.info().clone();
                if let Ok(s) = g.memory_stats() {
                    info.free_memory = s.free;
                }
                Ok(info)
            })
            .collect()
    }
    fn can_access_peer(&self, a: Device, b: Device) -> bool {
        match (gpu_for(a), gpu_for(b)) {
            (Ok(ga), Ok(gb)) if a != b => {
                ffi::can_access_peer(ga.context().cu_device(), gb.context().cu_device())
            }
            _ => false,
        }
    }
    fn release_pool(&self, device: Device) -> u64 {
        match device {
            Device::Cuda(n) if probe::driver().is_ok() => gpu(n).map(|g| g.release()).unwrap_or(0),
            _ => 0,
        }
    }
    fn converters(&self) -> Vec<Arc<dyn Converter>> {
        crate::convert::converters()
    }
}

impl MemoryInfo for CudaBackend {
    fn memory_stats(&self, device: Device) -> Result<MemoryStats> {
        gpu_for(device)?.memory_stats()
    }
    fn set_memory_limit(&self, device: Device, limit: Option<MemoryLimit>) -> Result<()> {
        gpu_for(device)?.pool().set_limit(limit);
        Ok(())
    }
}
