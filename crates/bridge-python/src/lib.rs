//! The native half of the `arraybridge` Python package (`arraybridge._native`), built by
//! maturin with PyO3's stable ABI (abi3, Python ≥ 3.9). The Python half
//! (`python/arraybridge/__init__.py`) gives the functions their scikit-image / trackpy
//! signatures and result types; everything that touches memory or computes is here:
//!
//! - [`Array`]: an array held by arraybridge (a zero-copy import of another library's tensor,
//!   or arraybridge's own host / CUDA / OpenCL memory) that speaks the DLPack protocol both
//!   ways (`__dlpack__`, `__dlpack_device__`), on `bridge_core::dlpack`.
//! - `convert`, `copyto`, `devices`, `backends` and the pipelines (`blob_log`, `locate`,
//!   `link`, `paco`, `unbiased_flux`), which call the library functions of the `algorithms`
//!   crate with the GIL released, checking for Ctrl-C between batches of frames (PACO runs on
//!   a worker thread that Ctrl-C cancels within a band of rows: `interrupt.rs`).
//! - `set_memory_limit` and `memory_limit` (`memory.rs`): the host memory budget, which every
//!   host allocation sized by an input's shape is checked against before it is made.
//! - Errors are the typed exceptions `ArrayBridgeError` (base), `OutOfMemory`,
//!   `BackendUnavailable` and `InvalidInput` (and its `SubnetOversizeException`, of
//!   `link_strategy='drop'`), carrying the Rust message.

mod array;
mod auto;
mod convert;
mod errors;
mod held;
mod import;
mod interrupt;
mod memory;
mod numpy_fast;
mod paco;
mod pipelines;
mod volume;

use pyo3::prelude::*;

pub use array::Array;

/// The `arraybridge._native` module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    // the edge: the tuning knobs of the environment, read once at import and handed to the
    // library as a value (one already fixed by an earlier use stays as it is)
    let _ = bridge_core::tuning::install(bridge_core::tuning::Tuning::from_env());
    m.add(
        "ArrayBridgeError",
        py.get_type::<errors::ArrayBridgeError>(),
    )?;
    m.add("OutOfMemory", py.get_type::<errors::OutOfMemory>())?;
    m.add(
        "BackendUnavailable",
        py.get_type::<errors::BackendUnavailable>(),
    )?;
    m.add("InvalidInput", py.get_type::<errors::InvalidInput>())?;
    m.add(
        "SubnetOversizeException",
        py.get_type::<errors::SubnetOversizeException>(),
    )?;
    // how the extension was compiled: timings of a dev build (`maturin develop`) are 3–6×
    // those of a release build (`pip install`, `maturin develop --release`)
    m.add(
        "BUILD_PROFILE",
        if cfg!(debug_assertions) {
            "dev"
        } else {
            "release"
        },
    )?;
    m.add_class::<array::Array>()?;
    m.add_function(wrap_pyfunction!(convert::convert, m)?)?;
    // `arraybridge.convert` (named `convert`, held here as `convert_api` beside the core)
    m.add("convert_api", wrap_pyfunction!(convert::convert_api, m)?)?;
    m.add_function(wrap_pyfunction!(convert::copyto, m)?)?;
    m.add_function(wrap_pyfunction!(convert::route, m)?)?;
    m.add_function(wrap_pyfunction!(convert::devices, m)?)?;
    m.add_function(wrap_pyfunction!(convert::backends, m)?)?;
    m.add_function(wrap_pyfunction!(memory::set_memory_limit, m)?)?;
    m.add_function(wrap_pyfunction!(memory::memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(memory::check_host_allocation, m)?)?;
    m.add_function(wrap_pyfunction!(auto::last_decision, m)?)?;
    m.add_function(wrap_pyfunction!(auto::gpus, m)?)?;
    m.add_function(wrap_pyfunction!(auto::offload_decision, m)?)?;
    m.add_function(wrap_pyfunction!(auto::record_decision, m)?)?;
    m.add_function(wrap_pyfunction!(memory::free_pools, m)?)?;
    m.add_function(wrap_pyfunction!(memory::set_device_memory_limit, m)?)?;
    m.add_function(wrap_pyfunction!(memory::memory_limit, m)?)?;
    m.add_function(wrap_pyfunction!(pipelines::blob_log, m)?)?;
    m.add_function(wrap_pyfunction!(volume::blob_log_nd, m)?)?;
    m.add_function(wrap_pyfunction!(pipelines::locate, m)?)?;
    m.add_function(wrap_pyfunction!(volume::locate_volume, m)?)?;
    m.add_function(wrap_pyfunction!(pipelines::link, m)?)?;
    m.add_function(wrap_pyfunction!(paco::paco, m)?)?;
    m.add_function(wrap_pyfunction!(paco::unbiased_flux, m)?)?;
    Ok(())
}
