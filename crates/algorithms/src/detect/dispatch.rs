//! [`backend_for`]: the one place that maps a [`Device`] to a detection back end (the CPU, or
//! [`GpuDetect`] over the device's executor from [`crate::exec::executor_for`]).

use bridge_core::{Device, Result};

use super::backend::{CpuBackend, DetectBackend};
#[cfg(any(feature = "opencl", feature = "cuda"))]
use super::gpu::GpuDetect;

/// The detection back end for a device: the CPU, or the device's executor
/// ([`crate::exec::executor_for`]: [`bridge_core::BridgeError::BackendUnavailable`] when its backend is not
/// compiled in or has no such device; [`bridge_core::BridgeError::Unsupported`] for torch devices).
pub fn backend_for(device: Device) -> Result<Box<dyn DetectBackend>> {
    if device == Device::Cpu {
        return Ok(Box::new(CpuBackend));
    }
    #[cfg(any(feature = "opencl", feature = "cuda"))]
    {
        use crate::exec::{AnyExecutor, executor_for};
        match executor_for(device, "particle detection")? {
            #[cfg(feature = "opencl")]
            AnyExecutor::OpenCl(e) => Ok(Box::new(GpuDetect::with_executor(e))),
            #[cfg(feature = "cuda")]
            AnyExecutor::Cuda(e) => Ok(Box::new(GpuDetect::with_executor(e))),
        }
    }
    #[cfg(not(any(feature = "opencl", feature = "cuda")))]
    {
        Err(crate::exec::executor_for(device, "particle detection")
            .err()
            .unwrap_or_else(|| {
                bridge_core::BridgeError::Unsupported(format!("particle detection on {device}"))
            }))
    }
}
