//! Whether torch has CUDA: loading its CUDA backend once per process (see "CUDA loading" in
//! the `backend` module), the device count, or why there is none. Public through
//! [`crate::backend`] and the crate root; the `backend` and `cuda` modules both ask it, and it
//! imports neither.

use std::sync::OnceLock;

use crate::ffi;

/// What loading torch's CUDA backend gave: the device count, or why there is none.
pub(crate) fn cuda_state() -> &'static std::result::Result<usize, String> {
    static STATE: OnceLock<std::result::Result<usize, String>> = OnceLock::new();
    STATE.get_or_init(load_cuda)
}

fn load_cuda() -> std::result::Result<usize, String> {
    if let Err(e) = ffi::cuda_load_state() {
        log::info!("torch: CUDA backend not loaded: {e}");
        return Err(format!("libtorch's CUDA backend could not be loaded: {e}"));
    }
    match ffi::cuda_device_count() {
        Ok(0) => Err("libtorch sees no CUDA device".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("libtorch CUDA device count failed: {e}")),
    }
}

/// Whether torch has CUDA devices (loads the CUDA backend on first call; never panics).
pub fn cuda_device_count() -> usize {
    cuda_state().as_ref().copied().unwrap_or(0)
}

/// Why torch has no CUDA device, if it has none.
pub fn cuda_unavailable_reason() -> Option<String> {
    cuda_state().as_ref().err().cloned()
}
