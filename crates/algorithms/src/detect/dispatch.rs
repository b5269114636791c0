//! [`backend_for`]: the one place that maps a [`Device`] to a detection back end (the CPU, or
//! [`GpuDetect`] over the device's executor from [`crate::exec::executor_for`]).

use bridge_core::{Device, Result};

use super::backend::{CpuBackend, DetectBackend};
#[cfg(any(feature = "opencl", feature = "cuda"))]
use super::gpu::GpuDetect;
use crate::exec::executor_for;

/// The detection back end for a device: the CPU, or the device's executor
/// ([`crate::exec::executor_for`]: [`bridge_core::BridgeError::BackendUnavailable`] when its backend is not
/// compiled in or has no such device; [`bridge_core::BridgeError::Unsupported`] for torch devices).
pub fn backend_for(device: Device) -> Result<Box<dyn DetectBackend>> {
    if device == Device::Cpu {
        return Ok(Box::new(CpuBackend));
    }
    // Exhaustive over the compiled-in executors (no arm at all without a device backend:
    // `executor_for` then only returns its error).
    match executor_for(device, "particle detection")? {
        #[cfg(feature = "opencl")]
        crate::exec::AnyExecutor::OpenCl(e) => Ok(Box::new(GpuDetect::with_executor(e))),
        #[cfg(feature = "cuda")]
        crate::exec::AnyExecutor::Cuda(e) => Ok(Box::new(GpuDetect::with_executor(e))),
    }
}
