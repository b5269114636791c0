//! [`backend_for`]: the one place that turns an open device into a PACO back end (the CPU, or
//! [`super::gpu::GpuPaco`] over the executor of an open [`DeviceHandle`]).

use bridge_core::{Device, Result};

use super::backend::{CpuBackend, PacoBackend};
#[cfg(any(feature = "opencl", feature = "cuda"))]
use super::gpu::GpuPaco;
use crate::exec::DeviceHandle;

/// The PACO back end of an open device: the CPU, or [`GpuPaco`] over the device's executor
/// ([`bridge_core::BridgeError::Unsupported`] for torch devices, which have none).
pub fn backend_for(device: &DeviceHandle) -> Result<Box<dyn PacoBackend>> {
    if device.device() == Device::Cpu {
        return Ok(Box::new(CpuBackend));
    }
    // Exhaustive over the compiled-in executors (no arm at all without a device backend:
    // `executor_for` then only returns its error).
    match device.executor_for("PACO")? {
        #[cfg(feature = "opencl")]
        crate::exec::AnyExecutor::OpenCl(e) => Ok(Box::new(GpuPaco::with_executor(e))),
        #[cfg(feature = "cuda")]
        crate::exec::AnyExecutor::Cuda(e) => Ok(Box::new(GpuPaco::with_executor(e))),
    }
}
