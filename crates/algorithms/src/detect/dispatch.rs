//! [`backend_for`]: the one place that turns an open device into a detection back end (the CPU, or
//! [`GpuDetect`] over the executor of an open [`DeviceHandle`]).

use bridge_core::{Device, Result};

use super::backend::{CpuBackend, DetectBackend};
#[cfg(any(feature = "opencl", feature = "cuda"))]
use super::gpu::GpuDetect;
use crate::exec::DeviceHandle;

/// The detection back end of an open device: the CPU, or [`GpuDetect`] over the device's executor
/// ([`bridge_core::BridgeError::Unsupported`] for torch devices, which have none).
pub fn backend_for(device: &DeviceHandle) -> Result<Box<dyn DetectBackend>> {
    if device.device() == Device::Cpu {
        return Ok(Box::new(CpuBackend::default()));
    }
    // Exhaustive over the compiled-in executors (no arm at all without a device backend:
    // `executor_for` then only returns its error).
    match device.executor_for("particle detection")? {
        #[cfg(feature = "opencl")]
        crate::exec::AnyExecutor::OpenCl(e) => Ok(Box::new(GpuDetect::with_executor(e))),
        #[cfg(feature = "cuda")]
        crate::exec::AnyExecutor::Cuda(e) => Ok(Box::new(GpuDetect::with_executor(e))),
    }
}
