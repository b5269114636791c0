//! Mapping CUDA driver and NVRTC result codes to [`BridgeError`].
//!
//! These are pure functions of the result code (no driver call), so CI tests them without a GPU.
//! `CUDA_ERROR_OUT_OF_MEMORY` — and nothing else — becomes [`BridgeError::OutOfMemory`]; every
//! other failure becomes [`BridgeError::Backend`] with `backend: "cuda"` (or `"nvrtc"`), the
//! numeric code, and the code's name.

use bridge_core::{BridgeError, Device, Result};
use cudarc::driver::DriverError;
use cudarc::driver::sys::CUresult;
use cudarc::nvrtc::sys::nvrtcResult;

/// The backend name used in errors.
pub const BACKEND: &str = "cuda";

/// Map a driver result code: `Ok(())` for `CUDA_SUCCESS`, [`BridgeError::OutOfMemory`] for
/// `CUDA_ERROR_OUT_OF_MEMORY` (charged to `device`, for an allocation of `requested` bytes), and
/// [`BridgeError::Backend`] with the code for anything else. `what` names the operation.
pub fn check(code: CUresult, device: Device, requested: u64, what: &str) -> Result<()> {
    match code {
        CUresult::CUDA_SUCCESS => Ok(()),
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => Err(BridgeError::OutOfMemory {
            device,
            requested,
            attempts: 1,
        }),
        other => Err(BridgeError::backend(
            BACKEND,
            Some(other as i64),
            format!("{what} on {device} failed: {other:?}"),
        )),
    }
}

/// Map a cudarc [`DriverError`] (a failed result code) as [`check`] does.
pub fn driver(err: DriverError, device: Device, requested: u64, what: &str) -> BridgeError {
    match check(err.0, device, requested, what) {
        Err(e) => e,
        // A DriverError never wraps CUDA_SUCCESS; report it rather than pretend success.
        Ok(()) => BridgeError::backend(
            BACKEND,
            Some(0),
            format!("{what} on {device}: spurious CUDA_SUCCESS error"),
        ),
    }
}

/// Shorthand for [`driver`] where no allocation is involved.
pub fn op(device: Device, what: &'static str) -> impl Fn(DriverError) -> BridgeError {
    move |e| driver(e, device, 0, what)
}

/// Map an NVRTC result code that is not a compile error (creation, option, internal errors).
pub fn nvrtc(code: nvrtcResult, what: &str) -> BridgeError {
    BridgeError::backend(
        "nvrtc",
        Some(code as i64),
        format!("{what} failed: {code:?}"),
    )
}
