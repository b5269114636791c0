//! The tests' device opener. The algorithms take open devices ([`DeviceHandle`]) and look
//! nothing up; a program opens its devices with `arraybridge::open_device` (the process
//! registry's backends). These tests sit below that crate, so they hold their own OpenCL
//! backend instance ([`opencl`], one per test binary, as the process registry holds one) and
//! open devices on it as `open_device` does.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

#[cfg(any(feature = "opencl", feature = "cuda"))]
use algorithms::exec::AnyExecutor;
use algorithms::exec::DeviceHandle;
use bridge_core::{BridgeError, Device, Result};

/// `device`, open, or why not (the errors of `arraybridge::open_device`).
pub fn try_open(device: Device) -> Result<DeviceHandle> {
    match device {
        #[cfg(feature = "opencl")]
        Device::OpenCl(_) => algorithms::exec::OpenClExecutor::new(opencl(), device)
            .map(|e| DeviceHandle::from_executor(AnyExecutor::OpenCl(e))),
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => algorithms::exec::CudaExecutor::new(n)
            .map(|e| DeviceHandle::from_executor(AnyExecutor::Cuda(e))),
        #[allow(unreachable_patterns)]
        Device::OpenCl(_) | Device::Cuda(_) => Err(BridgeError::unavailable(
            device.memory_type().to_string(),
            format!("{device} has no back end in this build"),
        )),
        d => DeviceHandle::without_executor(d),
    }
}

/// The OpenCL backend of this test binary (its contexts, pools and compiled programs), made on
/// first use: what `arraybridge::registry()` owns in a program.
#[cfg(feature = "opencl")]
pub fn opencl() -> std::sync::Arc<bridge_opencl::OpenClBackend> {
    static CL: std::sync::OnceLock<std::sync::Arc<bridge_opencl::OpenClBackend>> =
        std::sync::OnceLock::new();
    std::sync::Arc::clone(CL.get_or_init(bridge_opencl::backend))
}

/// `device`, open (panics when it cannot be opened: callers skip absent devices first).
pub fn open(device: Device) -> DeviceHandle {
    try_open(device).unwrap_or_else(|e| panic!("opening {device}: {e}"))
}

/// The host CPU.
pub fn cpu() -> DeviceHandle {
    DeviceHandle::cpu()
}

/// The detection back end of `device` (opened here), or why not.
pub fn detect_backend(device: Device) -> Result<Box<dyn algorithms::detect::DetectBackend>> {
    algorithms::detect::backend_for(&try_open(device)?)
}

/// The PACO back end of `device` (opened here), or why not.
pub fn paco_backend(device: Device) -> Result<Box<dyn algorithms::paco::PacoBackend>> {
    algorithms::paco::backend_for(&try_open(device)?)
}

/// Every device of a list, open, or the first one's error.
pub fn open_all(devices: &[Device]) -> Result<Vec<DeviceHandle>> {
    devices.iter().map(|&d| try_open(d)).collect()
}
