//! Helpers for tests that run once per device (the pattern of one test body, instantiated for
//! `cpu`, `opencl:0` and `cuda:0`).
//!
//! A device test skips (passes with a note on stderr) when its device is absent, unless the
//! environment demands it: `ARRAYBRIDGE_REQUIRE_GPU=1` makes missing CUDA (and Torch-CUDA)
//! devices a failure, `ARRAYBRIDGE_REQUIRE_OPENCL=1` does the same for OpenCL.
//!
//! ```
//! arraybridge::device_tests!(sums_match, |device| {
//!     // `device` is a `bridge_core::Device` that is present in `arraybridge::registry()`.
//!     assert!(arraybridge::registry().topology().has_device(device));
//! });
//! # fn main() {}
//! ```

use bridge_core::{Device, MemoryType};

/// True when the environment variable is set to `1`, `true` or `yes`.
pub fn env_flag(name: &str) -> bool {
    std::env::var(name)
        .map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
        .unwrap_or(false)
}

/// The environment variable that makes `device`'s absence a failure.
pub fn require_var(device: Device) -> Option<&'static str> {
    match device.memory_type() {
        MemoryType::Host => None,
        MemoryType::OpenCl => Some("ARRAYBRIDGE_REQUIRE_OPENCL"),
        MemoryType::Cuda => Some("ARRAYBRIDGE_REQUIRE_GPU"),
        MemoryType::Torch => (device != Device::TorchCpu).then_some("ARRAYBRIDGE_REQUIRE_GPU"),
    }
}

/// `Some(device)` when the default registry has it. Otherwise prints why the test is skipped
/// and returns `None` — or panics (failing the test) when the matching `ARRAYBRIDGE_REQUIRE_*`
/// variable is set.
pub fn device_or_skip(device: Device) -> Option<Device> {
    let reg = crate::registry();
    if reg.topology().has_device(device) {
        return Some(device);
    }
    let why = reg
        .topology()
        .unavailable_reason(device.memory_type())
        .unwrap_or("device not present")
        .to_owned();
    if let Some(var) = require_var(device)
        && env_flag(var)
    {
        panic!("{device} is required ({var}=1) but unavailable: {why}");
    }
    eprintln!("skipping test on {device}: {why}");
    None
}

/// Define one test per device from one body: `NAME_cpu`, `NAME_opencl`, `NAME_cuda`. The body
/// is a closure taking the `Device`; absent devices skip as [`device_or_skip`] says.
#[macro_export]
macro_rules! device_tests {
    ($name:ident, $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn run(device: $crate::Device) {
                if let Some(d) = $crate::testing::device_or_skip(device) {
                    let f: &dyn Fn($crate::Device) = &$body;
                    f(d);
                }
            }
            #[test]
            fn cpu() {
                run($crate::Device::Cpu);
            }
            #[test]
            fn opencl() {
                run($crate::Device::OpenCl(0));
            }
            #[test]
            fn cuda() {
                run($crate::Device::Cuda(0));
            }
        }
    };
}
