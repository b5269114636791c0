//! Live devices for the algorithms: a [`DeviceHandle`] is an open device (for `opencl:N` and
//! `cuda:N`, the device's one executor, [`bridge_core::exec::Executor`]). The device algorithms
//! (`GpuDetect<E>`, `GpuPaco<E>`) are written once over the trait, and each algorithm's
//! `backend_for` takes a handle.
//!
//! Nothing here looks a device up by its name: a handle comes from whoever owns the devices
//! (`arraybridge::device("opencl:0")`, which opens it on the process registry's backends), from
//! an executor ([`DeviceHandle::from_executor`]), or from an array, which carries the device its
//! memory lives on ([`DeviceHandle::of_array`]).

use std::fmt;
use std::sync::Arc;

use bridge_core::convert::Registry;
use bridge_core::{Array, BridgeError, Device, MemoryType, Result};

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

impl AnyExecutor {
    /// The device the executor runs on.
    pub fn device(&self) -> Device {
        #[cfg(any(feature = "opencl", feature = "cuda"))]
        use bridge_core::exec::Executor;
        match *self {
            #[cfg(feature = "opencl")]
            AnyExecutor::OpenCl(ref e) => e.device(),
            #[cfg(feature = "cuda")]
            AnyExecutor::Cuda(ref e) => e.device(),
        }
    }

    /// Whether the device computes in float64.
    pub fn has_fp64(&self) -> bool {
        #[cfg(any(feature = "opencl", feature = "cuda"))]
        use bridge_core::exec::Executor;
        match *self {
            #[cfg(feature = "opencl")]
            AnyExecutor::OpenCl(ref e) => e.has_fp64(),
            #[cfg(feature = "cuda")]
            AnyExecutor::Cuda(ref e) => e.has_fp64(),
        }
    }
}

/// An open device: `cpu`, a torch device (no executor: algorithms run on the CPU back end or
/// take the tensor as an array), or `opencl:N`/`cuda:N` with the device's one executor (its
/// queue or stream, pools and compiled programs, shared by every handle, back end and call of
/// the process). Cheap to clone; two handles of one device share everything.
#[derive(Clone)]
pub struct DeviceHandle {
    device: Device,
    executor: Option<AnyExecutor>,
    /// The registry the device was opened on (its backends own the executor): where arrays
    /// moved to this device are converted. `None`: the process registry.
    registry: Option<Arc<Registry>>,
}

impl fmt::Debug for DeviceHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceHandle")
            .field("device", &self.device)
            .field("executor", &self.executor.is_some())
            .field("own_registry", &self.registry.is_some())
            .finish()
    }
}

impl PartialEq for DeviceHandle {
    fn eq(&self, other: &Self) -> bool {
        self.device == other.device
    }
}

impl fmt::Display for DeviceHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.device.fmt(f)
    }
}

impl DeviceHandle {
    /// The host CPU.
    pub fn cpu() -> Self {
        DeviceHandle {
            device: Device::Cpu,
            executor: None,
            registry: None,
        }
    }

    /// A device that has no executor: `cpu`, `torch:cpu`, `torch:cuda:N`;
    /// [`BridgeError::InvalidInput`] for `opencl:N`/`cuda:N`, which are opened with their
    /// executor ([`Self::from_executor`]).
    pub fn without_executor(device: Device) -> Result<Self> {
        match device {
            Device::Cpu | Device::TorchCpu | Device::TorchCuda(_) => Ok(DeviceHandle {
                device,
                executor: None,
                registry: None,
            }),
            Device::OpenCl(_) | Device::Cuda(_) => Err(BridgeError::invalid_argument(
                "device",
                format!("{device} runs kernels: open it with its executor"),
            )),
        }
    }

    /// The device `executor` runs on.
    pub fn from_executor(executor: AnyExecutor) -> Self {
        DeviceHandle {
            device: executor.device(),
            executor: Some(executor),
            registry: None,
        }
    }

    /// This handle, opened on `registry` (whose backends own its executor): arrays moved to it
    /// (`arraybridge::ArrayTo::to`) are converted by that registry, in its backends' contexts.
    pub fn with_registry(mut self, registry: Arc<Registry>) -> Self {
        self.registry = Some(registry);
        self
    }

    /// The registry the device was opened on, when it was not the process registry.
    pub fn registry(&self) -> Option<&Arc<Registry>> {
        self.registry.as_ref()
    }

    /// The device `array` lives on, from the array's own memory (an OpenCL buffer knows the
    /// backend instance that allocated it, CUDA memory its device): host memory is the CPU,
    /// torch tensors their torch device. [`BridgeError::BackendUnavailable`] for device memory
    /// of a backend this build does not have.
    pub fn of_array(array: &Array) -> Result<Self> {
        match array.memory_type() {
            #[cfg(feature = "opencl")]
            MemoryType::OpenCl => Ok(Self::from_executor(AnyExecutor::OpenCl(
                OpenClExecutor::of_array(array)?,
            ))),
            #[cfg(feature = "cuda")]
            MemoryType::Cuda => Ok(Self::from_executor(AnyExecutor::Cuda(
                CudaExecutor::of_array(array)?,
            ))),
            #[allow(unreachable_patterns)]
            MemoryType::OpenCl | MemoryType::Cuda => Err(BridgeError::unavailable(
                array.memory_type().to_string(),
                format!(
                    "this build has no {} back end for an array on {}",
                    array.memory_type(),
                    array.device()
                ),
            )),
            _ => Self::without_executor(array.device()),
        }
    }

    /// Which device (`cpu`, `opencl:0`, `cuda:1`, `torch:cpu`, …).
    pub fn device(&self) -> Device {
        self.device
    }

    /// The device's executor (`opencl:N`, `cuda:N`); `None` for the host and torch devices.
    pub fn executor(&self) -> Option<&AnyExecutor> {
        self.executor.as_ref()
    }

    /// The executor that runs `algorithm` (a name for messages, e.g. `"PACO"`) here (a cheap
    /// clone): [`BridgeError::Unsupported`] for devices that have none (the CPU runs the
    /// algorithms' CPU back ends; torch devices are reached through the registry).
    pub fn executor_for(&self, algorithm: &str) -> Result<AnyExecutor> {
        let device = self.device;
        match (&self.executor, device) {
            // (uninhabited, so unreachable, in a build without a device backend)
            #[allow(unreachable_code)]
            (Some(e), _) => Ok(e.clone()),
            (None, Device::TorchCpu | Device::TorchCuda(_)) => {
                Err(BridgeError::Unsupported(format!(
                    "{algorithm} does not run on {device}: pass the tensor as an array (it is \
                     converted once, zero-copy where possible) and choose cpu or cuda:N to run on"
                )))
            }
            (None, _) => Err(BridgeError::Unsupported(format!(
                "the CPU has no device executor; {algorithm} runs on it through its CPU back end"
            ))),
        }
    }
}
