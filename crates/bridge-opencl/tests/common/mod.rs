//! Shared test helpers: find an OpenCL device or skip (the rule of `test_support::require`).

#![allow(dead_code)]

use std::sync::Arc;

use bridge_core::Device;
use bridge_core::backend::Backend;
use bridge_core::convert::Registry;
use bridge_opencl::OpenClBackend;
use test_support::require::{OPENCL, or_skip};

/// A fresh backend and its first device, or `None` (test skipped) when OpenCL has no device.
/// With `ARRAYBRIDGE_REQUIRE_OPENCL=1` a missing device fails the test instead.
pub fn device() -> Option<(Arc<OpenClBackend>, Device)> {
    let backend = bridge_opencl::backend();
    let probe = match backend.devices() {
        Ok(d) if !d.is_empty() => Ok(d[0].device),
        Ok(_) => Err("no device".to_owned()),
        Err(e) => Err(e.to_string()),
    };
    or_skip(OPENCL, "an OpenCL device", probe).map(|d| (backend, d))
}

/// A registry with this backend registered.
pub fn registry(backend: &Arc<OpenClBackend>) -> Registry {
    let mut reg = Registry::new();
    reg.register_backend(backend.clone());
    reg
}
