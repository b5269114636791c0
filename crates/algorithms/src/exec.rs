//! The one place that maps a [`Device`] to an executor ([`bridge_core::exec::Executor`]) and
//! says why there is none: the device algorithms (`GpuDetect<E>`, `GpuPaco<E>`) are written
//! once over the trait, and each algorithm's `backend_for` asks [`executor_for`] for the
//! device's executor.

use bridge_core::{BridgeError, Device, Result};

#[cfg(feature = "cuda")]
pub use bridge_cuda::CudaExecutor;
#[cfg(feature = "opencl")]
pub use bridge_opencl::OpenClExecutor;

/// The executor of a device of a compiled-in backend.
#[derive(Debug, Clone)]
pub enum AnyExecutor {
    /// An OpenCL device (feature `opencl`).
    #[cfg(feature = "opencl")]
    OpenCl(OpenClExecutor),
    /// A CUDA device (feature `cuda`).
    #[cfg(feature = "cuda")]
    Cuda(CudaExecutor),
}

/// The executor of `device` for `algorithm` (a name for messages, e.g. `"PACO"`):
/// [`BridgeError::BackendUnavailable`] when the backend is not compiled in or has no such device,
/// [`BridgeError::Unsupported`] for devices that have no executor (the CPU runs the algorithms'
/// CPU back ends; torch devices are reached through the registry).
pub fn executor_for(device: Device, algorithm: &str) -> Result<AnyExecutor> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => Ok(AnyExecutor::Cuda(CudaExecutor::new(n)?)),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => Err(BridgeError::unavailable(
            "cuda",
            format!(
                "{algorithm} has no CUDA back end in this build (asked for {device}; build with \
                 the `cuda` feature); use --device cpu"
            ),
        )),
        #[cfg(feature = "opencl")]
        Device::OpenCl(n) => Ok(AnyExecutor::OpenCl(OpenClExecutor::on_shared(n)?)),
        #[cfg(not(feature = "opencl"))]
        Device::OpenCl(_) => Err(BridgeError::unavailable(
            "opencl",
            format!(
                "{algorithm} has no OpenCL back end in this build (asked for {device}; build \
                 with the `opencl` feature); use --device cpu"
            ),
        )),
        Device::Cpu => Err(BridgeError::Unsupported(format!(
            "the CPU has no device executor; {algorithm} runs on it through its CPU back end"
        ))),
        Device::TorchCpu | Device::TorchCuda(_) => Err(BridgeError::Unsupported(format!(
            "{algorithm} does not run on {device}: pass the tensor as an array (it is converted \
             once, zero-copy where possible) and choose cpu or cuda:N to run on"
        ))),
    }
}
