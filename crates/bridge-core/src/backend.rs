//! The backend trait and device descriptions.
//!
//! Each backend crate (`bridge-cuda`, `bridge-opencl`, `bridge-torch`) implements [`Backend`] and
//! is registered with a [`crate::convert::Registry`]. Discovery must never panic: a missing
//! library or an absent device is reported as [`crate::BridgeError::BackendUnavailable`].

use std::sync::Arc;

use crate::device::{Device, MemoryType};
use crate::error::Result;
use crate::memory::MemoryInfo;
use crate::planner::Converter;

/// What a device can do.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Capabilities {
    /// IEEE half precision arithmetic/storage is supported.
    pub fp16: bool,
    /// bfloat16 storage is supported.
    pub bf16: bool,
    /// Double precision is supported.
    pub fp64: bool,
    /// Compute units / streaming multiprocessors.
    pub compute_units: Option<u32>,
    /// Largest single allocation in bytes.
    pub max_alloc: Option<u64>,
    /// CUDA compute capability (major, minor).
    pub compute_capability: Option<(u32, u32)>,
}

/// One device as a backend sees it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DeviceInfo {
    /// The device id (`cuda:0`, `opencl:1`, ...).
    pub device: Device,
    /// Human-readable name.
    pub name: String,
    /// A stable identifier of the physical device (CUDA UUID, PCI bus id...), used to tell
    /// whether two backends' devices are the same hardware.
    pub uuid: Option<String>,
    /// Total memory in bytes.
    pub total_memory: Option<u64>,
    /// Free memory in bytes, where the backend can tell.
    pub free_memory: Option<u64>,
    /// Capabilities.
    pub capabilities: Capabilities,
    /// Other facts worth showing (platform, driver version...).
    pub details: Vec<(String, String)>,
}

impl DeviceInfo {
    /// Whether the backend reports the device as a CPU (`type: cpu` in [`Self::details`], e.g.
    /// PoCL): its memory is the host's, and it is no GPU.
    pub fn is_cpu_device(&self) -> bool {
        self.details.iter().any(|(k, v)| k == "type" && v == "cpu")
    }

    /// A device with only a name; fill in the rest with struct update syntax.
    pub fn new(device: Device, name: impl Into<String>) -> Self {
        DeviceInfo {
            device,
            name: name.into(),
            uuid: None,
            total_memory: None,
            free_memory: None,
            capabilities: Capabilities::default(),
            details: Vec::new(),
        }
    }
}

/// A compute backend: discovery, memory, and the converters it contributes.
///
/// A backend is `'static` ([`Any`](std::any::Any)) so that whoever registered one can find the
/// very instance again, typed ([`crate::convert::Registry::backend_of`]): the registry owns its
/// backends, and with them the devices' live state (contexts, queues, pools, programs).
pub trait Backend: MemoryInfo + Send + Sync + std::any::Any {
    /// Short name (`cuda`, `opencl`, `torch`).
    fn name(&self) -> &'static str;
    /// The memory type this backend owns.
    fn memory_type(&self) -> MemoryType;
    /// Enumerate devices. Must not panic; returns `BackendUnavailable` when the library is
    /// missing or there is no device. Called once, at registration.
    fn devices(&self) -> Result<Vec<DeviceInfo>>;
    /// Whether `a` can copy to `b` directly (peer-to-peer). Queried at registration only.
    fn can_access_peer(&self, _a: Device, _b: Device) -> bool {
        false
    }
    /// Release cached (unused) pool memory on `device`; returns bytes released.
    fn release_pool(&self, device: Device) -> u64;
    /// The converters this backend provides.
    fn converters(&self) -> Vec<Arc<dyn Converter>>;
}

/// Whether a backend could be used, as `arraybridge devices` reports it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BackendReport {
    /// Backend name.
    pub name: String,
    /// Its memory type.
    pub memory_type: MemoryType,
    /// Devices found (empty when unavailable).
    pub devices: Vec<DeviceInfo>,
    /// Why the backend is unavailable, if it is.
    pub unavailable: Option<String>,
}
