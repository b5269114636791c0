//! Scientific pipelines for arraybridge.

pub mod detect;
#[cfg(any(feature = "opencl", feature = "cuda"))]
mod gpu;
pub mod track;

pub mod paco;
