//! Skip or fail: the one rule for tests that need a device or a library.
//!
//! A test whose device (or library) is absent skips: it returns early and passes, with a note
//! on stderr. When the environment demands the device, its absence fails the test instead:
//!
//! | variable | demands |
//! |---|---|
//! | [`GPU`] `ARRAYBRIDGE_REQUIRE_GPU=1` | a CUDA device (bridge-cuda `cuda:N`, torch `torch:cuda:N`) |
//! | [`OPENCL`] `ARRAYBRIDGE_REQUIRE_OPENCL=1` | an OpenCL device |
//! | [`NVRTC`] `ARRAYBRIDGE_REQUIRE_NVRTC=1` | libnvrtc (CUDA kernels compiled without a GPU) |
//!
//! A variable is set when it is `1`, `true` or `yes` ([`env_flag`]).

use std::fmt::Display;

use bridge_core::convert::Registry;
use bridge_core::{Device, MemoryType};

/// Makes a missing CUDA device (bridge-cuda or torch) a failure.
pub const GPU: &str = "ARRAYBRIDGE_REQUIRE_GPU";
/// Makes a missing OpenCL device a failure.
pub const OPENCL: &str = "ARRAYBRIDGE_REQUIRE_OPENCL";
/// Makes a missing libnvrtc a failure.
pub const NVRTC: &str = "ARRAYBRIDGE_REQUIRE_NVRTC";

/// True when the environment variable is set to `1`, `true` or `yes` (trimmed, any case).
pub fn env_flag(name: &str) -> bool {
    std::env::var(name)
        .map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
        .unwrap_or(false)
}

/// The variable that makes `device`'s absence a failure (`None` for the host, which is always
/// there, and for `torch:cpu`).
pub fn var_for(device: Device) -> Option<&'static str> {
    match device.memory_type() {
        MemoryType::Host => None,
        MemoryType::OpenCl => Some(OPENCL),
        MemoryType::Cuda => Some(GPU),
        MemoryType::Torch => (device != Device::TorchCpu).then_some(GPU),
    }
}

/// `what` is unavailable because of `why`: panics (failing the test) when `var` is set (see
/// [`env_flag`]), otherwise prints that the test is skipped. `var` may be `None` for things
/// no variable demands.
#[track_caller]
pub fn skip(var: Option<&str>, what: &str, why: impl Display) {
    if let Some(var) = var
        && env_flag(var)
    {
        panic!("{what} is required ({var}=1) but unavailable: {why}");
    }
    eprintln!("skipping test: {what} is unavailable: {why}");
}

/// The value of `probe` when it is `Ok`; otherwise [`skip`] (which panics when `var` is set)
/// and `None`.
///
/// ```
/// use test_support::require::{or_skip, NVRTC};
/// assert_eq!(or_skip(NVRTC, "libnvrtc", Ok::<_, String>(3)), Some(3));
/// if !test_support::env_flag(NVRTC) {
///     assert_eq!(or_skip(NVRTC, "libnvrtc", Err::<u8, _>("not found")), None);
/// }
/// ```
#[track_caller]
pub fn or_skip<T, E: Display>(var: &str, what: &str, probe: Result<T, E>) -> Option<T> {
    match probe {
        Ok(v) => Some(v),
        Err(why) => {
            skip(Some(var), what, why);
            None
        }
    }
}

/// `Some(device)` when `registry` has it. Otherwise [`skip`] with the registry's reason (the
/// backend's unavailability, or "device not present") under the variable of [`var_for`], and
/// `None`.
#[track_caller]
pub fn device_or_skip(registry: &Registry, device: Device) -> Option<Device> {
    if registry.topology().has_device(device) {
        return Some(device);
    }
    let why = registry
        .topology()
        .unavailable_reason(device.memory_type())
        .unwrap_or("device not present")
        .to_owned();
    skip(var_for(device), &device.to_string(), why);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_per_device() {
        assert_eq!(var_for(Device::Cpu), None);
        assert_eq!(var_for(Device::TorchCpu), None);
        assert_eq!(var_for(Device::OpenCl(1)), Some(OPENCL));
        assert_eq!(var_for(Device::Cuda(0)), Some(GPU));
        assert_eq!(var_for(Device::TorchCuda(0)), Some(GPU));
    }

    #[test]
    fn present_devices_run() {
        let reg = Registry::new();
        assert_eq!(device_or_skip(&reg, Device::Cpu), Some(Device::Cpu));
        assert_eq!(or_skip(NVRTC, "x", Ok::<_, String>(1)), Some(1));
    }

    #[test]
    fn unset_variables_are_false() {
        assert!(!env_flag("ARRAYBRIDGE_TEST_SUPPORT_SURELY_UNSET"));
    }
}
