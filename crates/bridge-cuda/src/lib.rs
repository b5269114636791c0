//! # bridge-cuda
//!
//! The CUDA backend of arraybridge, on cudarc's driver API with dynamic loading (no CUDA needed
//! to build; without `libcuda` every entry point returns
//! [`BridgeError::BackendUnavailable`](bridge_core::BridgeError::BackendUnavailable) instead of
//! panicking).
//!
//! - [`gpu()`] gives the shared [`Gpu`] of device `n`: its primary context, a stream pool, a
//!   [`CachingPool`](bridge_core::memory::CachingPool) of device memory with a limit
//!   ([`Gpu::set_memory_limit`]), pinned staging buffers and the NVRTC program cache.
//! - Arrays: [`Gpu::alloc`], [`Gpu::zeros`], [`Gpu::upload`], [`Gpu::download`], [`Gpu::copy`],
//!   [`Gpu::copy_from`] (peer or staged); the storage is [`CudaStorage`].
//! - Kernels: portable sources ([`bridge_core::kernel`]) compiled by NVRTC with
//!   [`kernel::PREAMBLE`] ([`Gpu::program`]) and launched with a global size ([`Gpu::launch`]);
//!   [`kernel::compile_check`] compiles any [`KernelSource`](bridge_core::kernel::KernelSource)
//!   for sm_90 without a GPU.
//! - Sharing device memory with other CUDA libraries without copies ([`foreign`]):
//!   [`CudaStorage::from_foreign`] wraps memory another library owns (keeping its owner
//!   alive), [`CudaStorage::export`] hands a buffer out with the storage as the owner.
//! - [`backend()`] is the [`Backend`](bridge_core::backend::Backend) to register.
//!
//! # Environment
//! - `libcuda` is loaded at run time; without it (CI, laptops) the backend reports itself
//!   unavailable. GPU tests skip then, but fail under `ARRAYBRIDGE_REQUIRE_GPU=1`.
//! - NVRTC (`libnvrtc.so.13`) is loaded at run time too: `eval "$(bash scripts/nvrtc.sh)"` installs
//!   the `nvidia-cuda-nvrtc` wheel into `.cache/` and exports `LD_LIBRARY_PATH`. Compile checks
//!   skip without it, but fail under `ARRAYBRIDGE_REQUIRE_NVRTC=1`.
//! - `scripts/gpu-check.sh build` / `run` carries the tests and the transfer benchmark to a GPU
//!   machine and runs them there.
//!
//! See [`device`] for the completion contract (blocking calls return synchronised data;
//! non-blocking calls return a [`Ready`] event the consumer stream waits on).

pub mod backend;
pub mod bench;
pub mod buffer;
pub mod convert;
pub mod device;
pub mod dlpack;
pub mod error;
pub mod executor;
mod ffi;
pub mod foreign;
pub mod kernel;
pub mod launch;
pub mod nvrtc;
mod pending;
pub mod probe;
pub mod transfer;

use std::sync::Arc;

pub use backend::CudaBackend;
pub use buffer::{CudaStorage, storage_of};
pub use device::{Gpu, Program, Ready, StreamLease, format_uuid, gpu, gpu_for};
pub use executor::{CudaExecutor, LaunchMode};
pub use ffi::{DeviceMem, PinnedMem};
pub use foreign::ExportedCuda;
pub use launch::KernelArg;
pub use transfer::{HostPath, to_cuda, to_host};

/// The CUDA backend, ready for [`Registry::register_backend`](bridge_core::convert::Registry::register_backend).
pub fn backend() -> Arc<dyn bridge_core::backend::Backend> {
    Arc::new(CudaBackend)
}
