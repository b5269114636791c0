//! Probing for the CUDA driver without panicking.
//!
//! cudarc (with dynamic loading) panics on the first driver call when `libcuda` is missing, so
//! every entry point of this crate that touches the driver calls [`driver`] first: it checks that
//! the library loads, then runs `cuInit` under `catch_unwind`, and caches the outcome.

use std::sync::OnceLock;

use bridge_core::{BridgeError, Result};
use cudarc::driver::result;

use crate::error::BACKEND;
use crate::ffi;

/// `Ok` when `libcuda` is present and `cuInit` succeeded; otherwise
/// [`BridgeError::BackendUnavailable`] with the reason. Cached after the first call.
pub fn driver() -> Result<()> {
    static STATE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    STATE
        .get_or_init(|| {
            if !ffi::driver_present() {
                return Err("libcuda not found (no NVIDIA driver on this machine)".into());
            }
            ffi::init()
        })
        .clone()
        .map_err(|reason| BridgeError::unavailable(BACKEND, reason))
}

/// Number of CUDA devices (0 when the driver reports none). Errors as [`driver`] does.
pub fn device_count() -> Result<usize> {
    driver()?;
    ffi::guarded("cuDeviceGetCount", || match result::device::get_count() {
        Ok(n) => Ok(n.max(0) as usize),
        Err(e) => Err(BridgeError::unavailable(
            BACKEND,
            format!("cuDeviceGetCount failed: {:?}", e.0),
        )),
    })
}

/// True when at least one CUDA device can be used.
pub fn gpu_available() -> bool {
    matches!(device_count(), Ok(n) if n > 0)
}
