//! # arraybridge
//!
//! Move n-dimensional arrays between the host and GPU frameworks, and run scientific pipelines on
//! whichever device is enabled. This crate re-exports the workspace: [`core`] (bridge-core),
//! [`algorithms`], and each compiled-in backend, and provides the process-wide [`registry`].
//! The file formats (`io`: `.npy`, FITS, TIFF, PNG, CSV) are behind the `io` feature; the
//! command-line tool is the `arraybridge-cli` crate, so this library pulls in no clap,
//! indicatif or png.
//!
//! ```
//! use arraybridge::{registry, Array, Device, MemoryType};
//! use ndarray::ArrayD;
//!
//! let a = Array::from_ndarray(ArrayD::<f32>::ones(vec![2, 3]));
//! // Plan first (pure, touches no device), then convert.
//! let route = registry().plan(a.memory_type(), a.device(), MemoryType::Host, Device::Cpu)?;
//! assert!(route.is_zero_copy());
//! let b = registry().convert(a, MemoryType::Host, Device::Cpu)?;
//! assert_eq!(b.shape(), &[2, 3]);
//! # Ok::<(), arraybridge::BridgeError>(())
//! ```

pub use algorithms;
pub use bridge_core as core;
pub use bridge_core::{Array, BridgeError, CastMode, DType, Device, Element, MemoryType, Result};
#[cfg(feature = "cuda")]
pub use bridge_cuda;
#[cfg(feature = "opencl")]
pub use bridge_opencl;
#[cfg(feature = "torch")]
pub use bridge_torch;

mod backends;
mod handle;
#[cfg(feature = "io")]
pub mod io;
pub mod kernels;
pub mod runtime;

pub use backends::{build_registry, registry};
pub use handle::{ArrayTo, DeviceHandle, Devices, device, open_device};

/// The README's examples, compiled and run as doc-tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
