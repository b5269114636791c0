//! Scientific pipelines for arraybridge.

pub mod detect;
pub mod exec;
pub mod track;

mod grid;
pub mod paco;
pub mod precision;
pub mod synth;
mod units;

pub use precision::Precision;
