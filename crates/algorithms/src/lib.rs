//! Scientific pipelines for arraybridge.

pub mod detect;
pub mod track;

pub mod paco;
