//! # arraybridge
//!
//! Move n-dimensional arrays between the host and GPU frameworks, and run scientific pipelines on
//! whichever device is enabled. This crate re-exports the workspace: [`core`] (bridge-core),
//! [`algorithms`], and each compiled-in backend.

pub use algorithms;
pub use bridge_core as core;
pub use bridge_core::{BridgeError, DType, Device, Element, MemoryType, Result};

pub mod io;
