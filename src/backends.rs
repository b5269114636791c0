//! The default registry: every compiled-in backend, registered once.

use std::sync::{Arc, OnceLock};

use bridge_core::convert::Registry;

/// Build a registry with every backend compiled into this binary (its own backend instances:
/// contexts, pools, compiled programs). Backends whose library or device is missing are
/// recorded as unavailable (with the reason), never a panic. Devices opened on it
/// ([`crate::Devices`]) keep it, and arrays moved to them are converted by it.
pub fn build_registry() -> Arc<Registry> {
    Arc::new(new_registry())
}

/// The registry [`build_registry`] shares.
fn new_registry() -> Registry {
    let mut reg = Registry::new();
    #[cfg(feature = "cuda")]
    {
        reg.register_backend(bridge_cuda::backend());
        reg.register_dlpack(bridge_cuda::dlpack::exchange());
    }
    #[cfg(not(feature = "cuda"))]
    reg.mark_unavailable(
        "cuda",
        bridge_core::MemoryType::Cuda,
        "not compiled in (build with the `cuda` feature)",
    );
    #[cfg(feature = "opencl")]
    reg.register_backend(bridge_opencl::backend());
    #[cfg(not(feature = "opencl"))]
    reg.mark_unavailable(
        "opencl",
        bridge_core::MemoryType::OpenCl,
        "not compiled in (build with the `opencl` feature)",
    );
    #[cfg(feature = "torch")]
    reg.register_backend(bridge_torch::backend());
    #[cfg(not(feature = "torch"))]
    reg.mark_unavailable(
        "torch",
        bridge_core::MemoryType::Torch,
        "not compiled in (build with the `torch` feature and libtorch 2.11)",
    );
    reg
}

/// The process-wide registry, built on first use.
pub fn registry() -> &'static Registry {
    process_registry()
}

/// The process-wide registry as shared (what [`crate::device`] opens devices on).
pub(crate) fn process_registry() -> &'static Arc<Registry> {
    static REGISTRY: OnceLock<Arc<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(build_registry)
}
