//! How [`OpenClBackend`] presents itself to a [`Registry`](bridge_core::convert::Registry): the
//! [`Backend`] implementation (name, devices, peer access, pool release, and the converters of
//! [`crate::convert`]).
//!
//! It sits above both `backend.rs` and `convert.rs` (the converters drive an
//! [`OpenClBackend`]), so that neither of those imports the other.

use std::sync::Arc;

use bridge_core::backend::{Backend, DeviceInfo};
use bridge_core::convert::Converter;
use bridge_core::{Device, MemoryType, Result};

use crate::backend::OpenClBackend;
use crate::convert;

impl Backend for OpenClBackend {
    fn name(&self) -> &'static str {
        "opencl"
    }

    fn memory_type(&self) -> MemoryType {
        MemoryType::OpenCl
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Ok(self
            .inner
            .discovery()?
            .devices
            .iter()
            .map(|e| e.info.clone())
            .collect())
    }

    fn can_access_peer(&self, a: Device, b: Device) -> bool {
        match (self.inner.entry(a), self.inner.entry(b)) {
            (Ok(x), Ok(y)) => x.platform == y.platform,
            _ => false,
        }
    }

    fn release_pool(&self, device: Device) -> u64 {
        self.inner
            .existing_state(device)
            .map(|s| s.pool.release())
            .unwrap_or(0)
    }

    fn converters(&self) -> Vec<Arc<dyn Converter>> {
        convert::converters(self)
    }
}
