//! Scientific pipelines for arraybridge.

pub mod detect;
pub mod exec;
pub mod track;

pub mod paco;
pub mod synth;
mod units;
