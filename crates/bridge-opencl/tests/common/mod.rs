//! Shared test helpers: find an OpenCL device or skip.

#![allow(dead_code)]

use std::sync::Arc;

use bridge_core::Device;
use bridge_core::backend::Backend;
use bridge_core::convert::Registry;
use bridge_opencl::OpenClBackend;

/// A fresh backend and its first device, or `None` (test skipped) when OpenCL has no device.
/// With `ARRAYBRIDGE_REQUIRE_OPENCL=1` a missing device fails the test instead.
pub fn device() -> Option<(Arc<OpenClBackend>, Device)> {
    let backend = bridge_opencl::backend();
    match backend.devices() {
        Ok(d) if !d.is_empty() => Some((backend, d[0].device)),
        other => {
            let why = match other {
                Ok(_) => "no device".to_owned(),
                Err(e) => e.to_string(),
            };
            if std::env::var("ARRAYBRIDGE_REQUIRE_OPENCL").is_ok_and(|v| v == "1") {
                panic!("ARRAYBRIDGE_REQUIRE_OPENCL=1 but OpenCL is unavailable: {why}");
            }
            eprintln!("note: skipping OpenCL test, no OpenCL device: {why}");
            None
        }
    }
}

/// A registry with this backend registered.
pub fn registry(backend: &Arc<OpenClBackend>) -> Registry {
    let mut reg = Registry::new();
    reg.register_backend(backend.clone());
    reg
}
