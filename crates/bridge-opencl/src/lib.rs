//! # bridge-opencl
//!
//! The OpenCL backend of arraybridge, on [`opencl3`] (runtime-loaded `libOpenCL`, so a machine
//! without OpenCL still runs: the backend reports itself unavailable).
//!
//! - **Discovery** ([`OpenClBackend::devices`](bridge_core::backend::Backend::devices)) is lazy
//!   and side-effect free: it only queries the driver. `opencl:N` ordinals number the devices of
//!   all platforms, platforms sorted by (name, vendor, version), devices in driver order. A
//!   missing library, no platform or no device is [`BridgeError::BackendUnavailable`].
//! - **Buffers** ([`ClBuffer`]) come from a per-device [`CachingPool`](bridge_core::memory::CachingPool)
//!   with an optional memory limit
//!   ([`MemoryInfo::set_memory_limit`](bridge_core::memory::MemoryInfo::set_memory_limit)).
//!   The native codes `CL_MEM_OBJECT_ALLOCATION_FAILURE`, `CL_OUT_OF_RESOURCES`,
//!   `CL_OUT_OF_HOST_MEMORY` and requests above `CL_DEVICE_MAX_MEM_ALLOC_SIZE` are
//!   [`BridgeError::OutOfMemory`], so `bridge_core::oom::with_oom_retry` can release the pools
//!   and retry.
//! - **Dtypes**: u8, u16, i32, i64, bf16 and f32 everywhere (i64 needs `cles_khr_int64` on an
//!   embedded-profile device); f64 needs `cl_khr_fp64`; f16 needs `cl_khr_fp16`
//!   ([`BridgeError::UnsupportedDType`] otherwise). bf16 has no OpenCL C type: it is stored as
//!   plain 16-bit words (kernels see `ushort`) and so needs no extension.
//! - **Transfers**: blocking ([`ClBuffer::write`], [`ClBuffer::read`]) and non-blocking
//!   ([`ClBuffer::write_async`], [`ClBuffer::read_async`], [`OpenClBackend::upload_async`],
//!   [`OpenClBackend::download_async`]) returning a [`Pending`] token; sub-regions
//!   ([`ClBuffer::sub_region`]); the converters Host ↔ OpenCL and OpenCL ↔ OpenCL (see
//!   [`convert`] for the completion contract).
//! - **Kernels**: [`PREAMBLE`] implements the portable vocabulary of [`bridge_core::kernel`];
//!   [`OpenClBackend::program`] builds and caches programs by (device, source hash, options);
//!   [`ClKernel`] sets arguments and launches. Portable kernels live in [`kernels`].
//!
//! [`BridgeError::BackendUnavailable`]: bridge_core::BridgeError::BackendUnavailable
//! [`BridgeError::OutOfMemory`]: bridge_core::BridgeError::OutOfMemory
//! [`BridgeError::UnsupportedDType`]: bridge_core::BridgeError::UnsupportedDType
//!
//! ```no_run
//! use bridge_core::convert::Registry;
//! let mut registry = Registry::new();
//! registry.register_backend(bridge_opencl::backend());
//! ```

pub mod backend;
pub mod buffer;
pub mod convert;
mod discovery;
mod error;
pub mod executor;
pub mod kernel;
pub mod kernels;
mod launches;
mod raw;
mod registration;
mod state;

use std::sync::Arc;

pub use backend::OpenClBackend;
pub use buffer::{ClAllocator, ClBuffer, ClStorage, Pending, STAGING_CHUNK};
pub use executor::OpenClExecutor;
pub use kernel::{ClKernel, ClProgram, KernelScalar, PREAMBLE, round_up};

/// A new OpenCL backend, ready for `Registry::register_backend`. Touches no driver until used.
///
/// Each instance has its own contexts, queues, pools and program caches (device discovery alone
/// is per process: some drivers crash on concurrent discovery). Whoever registers it owns it:
/// a program's devices are those of `arraybridge::registry()`, found again with
/// `registry().backend_of::<OpenClBackend>()`; a test can build its own.
pub fn backend() -> Arc<OpenClBackend> {
    Arc::new(OpenClBackend::new())
}
