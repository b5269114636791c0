//! # bridge-core
//!
//! The backend-independent heart of arraybridge: memory-type tags and devices, dtypes and the
//! casting policy, the one error type, the type-erased array handle, the conversion registry with
//! its pure route planner, OOM retry, memory statistics, the offload decision and slice stacking.
//!
//! No backend code lives here: backends (`bridge-cuda`, `bridge-opencl`, `bridge-torch`)
//! implement the traits defined here and register themselves with a [`convert::Registry`].

pub mod array;
pub mod backend;
pub mod control;
pub mod convert;
pub mod device;
pub mod dlpack;
pub mod dtype;
pub mod error;
pub mod exec;
pub mod host;
pub mod kernel;
pub mod memory;
pub mod offload;
pub mod oom;
pub mod pieces;
mod planner;
mod registry;
pub mod stack;
pub mod tuning;
pub mod units;

pub use array::{Array, HostData, HostElement, Storage};
pub use device::{Device, MemoryType};
pub use dtype::{CastMode, DType, Element};
pub use error::{BridgeError, Result};
pub use half::{bf16, f16};
