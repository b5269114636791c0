//! [`backend_for`]: the one place that maps a [`Device`] to a PACO back end (the CPU, or
//! [`super::gpu::GpuPaco`] over the device's executor from [`crate::exec::executor_for`]).

use bridge_core::{Device, Result};

use super::backend::{CpuBackend, PacoBackend};

/// The PACO back end for `device`: the CPU, or the device's executor
/// ([`crate::exec::executor_for`]: [`bridge_core::BridgeError::BackendUnavailable`] when its
/// backend is not compiled in or has no such device; `Unsupported` for torch devices).
pub fn backend_for(device: Device) -> Result<Box<dyn PacoBackend>> {
    if device == Device::Cpu {
        return Ok(Box::new(CpuBackend));
    }
    #[cfg(any(feature = "opencl", feature = "cuda"))]
    {
        use super::gpu::GpuPaco;
        use crate::exec::{AnyExecutor, executor_for};
        match executor_for(device, "PACO")? {
            #[cfg(feature = "opencl")]
            AnyExecutor::OpenCl(e) => Ok(Box::new(GpuPaco::with_executor(e))),
            #[cfg(feature = "cuda")]
            AnyExecutor::Cuda(e) => Ok(Box::new(GpuPaco::with_executor(e))),
        }
    }
    #[cfg(not(any(feature = "opencl", feature = "cuda")))]
    {
        Err(crate::exec::executor_for(device, "PACO")
            .err()
            .unwrap_or_else(|| bridge_core::BridgeError::Unsupported(format!("PACO on {device}"))))
    }
}
