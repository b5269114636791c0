//! # bridge-torch
//!
//! The PyTorch backend of arraybridge, on [tch](https://crates.io/crates/tch) 0.24 and
//! libtorch 2.11 (installed from the PyTorch wheel by `scripts/libtorch.sh`).
//!
//! - Memory type [`MemoryType::Torch`](bridge_core::MemoryType::Torch) on `torch:cpu` and
//!   `torch:cuda:N`; an [`Array`](bridge_core::Array) of that type holds a [`TorchStorage`].
//! - [`backend()`](fn@backend) is the [`Backend`](bridge_core::backend::Backend) to register; its
//!   converters ([`convert`]) move arrays host ↔ `torch:cpu` (zero-copy where the layout
//!   allows, see [`storage`] for the exact aliasing contract), host ↔ `torch:cuda:N` (pinned
//!   staging) and between torch devices.
//! - dtypes: every [`DType`](bridge_core::DType) maps to a torch dtype ([`dtype`]); `u16` is
//!   `torch.uint16`, which tch's `Kind` cannot name — read dtypes with [`dtype_of`].
//! - Errors: libtorch's CUDA out-of-memory error becomes
//!   [`BridgeError::OutOfMemory`](bridge_core::BridgeError::OutOfMemory), and only it
//!   ([`error`]); `release_pool` empties torch's CUDA caching allocator.
//! - [`tensor_view`] borrows a CPU tensor as an ndarray view without copying.
//!
//! tch uses ndarray 0.16 internally; this crate never uses tch's ndarray conversions: data
//! crosses through raw pointers in a small C++ shim (`shim/torch_shim.cpp`, compiled by
//! `build.rs` against the same libtorch), which also provides what tch's C API lacks
//! (tensors over foreign memory with a deleter, every scalar type, allocator statistics).
//!
//! ```no_run
//! use bridge_core::convert::Registry;
//! use bridge_core::{Array, Device, MemoryType};
//! let mut reg = Registry::new();
//! reg.register_backend(bridge_torch::backend());
//! let a = Array::from_ndarray(ndarray::ArrayD::<f32>::zeros(vec![2, 3]));
//! let t = reg.convert(a, MemoryType::Torch, Device::TorchCpu)?; // zero-copy
//! let tensor = bridge_torch::tensor_of(&t)?;
//! assert_eq!(tensor.size(), vec![2, 3]);
//! # Ok::<(), bridge_core::BridgeError>(())
//! ```
//!
//! **Torch-CUDA ↔ bridge-cuda** (`torch:cuda:N` ↔ `cuda:N`, feature `cuda-interop`, on with the
//! root package's `torch` and `cuda` features together): zero-copy converters that exchange
//! device pointers, each side keeping the other's owner alive (module `cuda_interop`). The torch
//! halves are public in [`cuda`] ([`cuda::tensor_from_foreign_cuda`], [`cuda::export_cuda`]).
//! Without the feature the planner routes `torch:cuda:N` ↔ `cuda:N` through the host.

pub mod backend;
pub mod convert;
pub mod cuda;
#[cfg(feature = "cuda-interop")]
pub mod cuda_interop;
mod cuda_state;
pub mod dtype;
pub mod error;
mod ffi;
pub mod storage;

pub use backend::{TorchBackend, backend, cuda_device_count, cuda_unavailable_reason};
pub use dtype::{dtype_of, dtype_of_kind, kind_of};
pub use error::{is_cuda_oom, map_tch_error, map_torch_error};
pub use storage::{
    TorchStorage, array_from_tensor, device_of, into_tensor, tensor_of, tensor_view,
};

/// Re-export of the tch crate this backend is built on (so users get the same version).
pub use tch;
