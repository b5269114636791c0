//! [`backend_for`]: the one place that maps a [`Device`] to a PACO back end (the CPU, or
//! [`super::gpu::GpuPaco`] over the device's executor from [`crate::exec::executor_for`]).

use bridge_core::{Device, Result};

use super::backend::{CpuBackend, PacoBackend};
#[cfg(any(feature = "opencl", feature = "cuda"))]
use super::gpu::GpuPaco;
use crate::exec::executor_for;

/// The PACO back end for `device`: the CPU, or the device's executor
/// ([`crate::exec::executor_for`]: [`bridge_core::BridgeError::BackendUnavailable`] when its
/// backend is not compiled in or has no such device; `Unsupported` for torch devices).
pub fn backend_for(device: Device) -> Result<Box<dyn PacoBackend>> {
    if device == Device::Cpu {
        return Ok(Box::new(CpuBackend));
    }
    // Exhaustive over the compiled-in executors (no arm at all without a device backend:
    // `executor_for` then only returns its error).
    match executor_for(device, "PACO")? {
        #[cfg(feature = "opencl")]
        crate::exec::AnyExecutor::OpenCl(e) => Ok(Box::new(GpuPaco::with_executor(e))),
        #[cfg(feature = "cuda")]
        crate::exec::AnyExecutor::Cuda(e) => Ok(Box::new(GpuPaco::with_executor(e))),
    }
}
