//! What one device needs once it is used — its discovery entry, the OpenCL context (shared by
//! the devices of its platform), its in-order queue and its buffer pool — and the pool's
//! allocator, [`ClAllocator`].
//!
//! The bottom of the crate's module graph above the leaves (`discovery`, `error`, `raw`):
//! buffers, programs, kernels and the backend all hold an `Arc<DeviceState>`, and this module
//! imports none of them.

use std::fmt;
use std::sync::Arc;

use bridge_core::memory::{CachingPool, RawAllocator};
use bridge_core::{BridgeError, Device, Result};
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::memory::Buffer;

use crate::discovery::DeviceEntry;
use crate::error::cl_error;
use crate::raw;

/// The [`RawAllocator`] of one device: plain `clCreateBuffer` in the device's context.
///
/// Requests above the device's `CL_DEVICE_MAX_MEM_ALLOC_SIZE`, and the native codes
/// `CL_MEM_OBJECT_ALLOCATION_FAILURE`, `CL_OUT_OF_RESOURCES` and `CL_OUT_OF_HOST_MEMORY`, are
/// [`BridgeError::OutOfMemory`]; every other failure is [`BridgeError::Backend`].
pub struct ClAllocator {
    device: Device,
    context: Arc<Context>,
    total: u64,
    max_alloc: u64,
}

impl fmt::Debug for ClAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClAllocator")
            .field("device", &self.device)
            .field("total", &self.total)
            .field("max_alloc", &self.max_alloc)
            .finish()
    }
}

impl ClAllocator {
    pub(crate) fn new(device: Device, context: Arc<Context>, total: u64, max_alloc: u64) -> Self {
        ClAllocator {
            device,
            context,
            total,
            max_alloc,
        }
    }
}

impl RawAllocator for ClAllocator {
    type Block = Buffer<u8>;

    fn device(&self) -> Device {
        self.device
    }

    fn total_memory(&self) -> u64 {
        self.total
    }

    fn allocate(&self, bytes: usize) -> Result<Buffer<u8>> {
        if self.max_alloc > 0 && bytes as u64 > self.max_alloc {
            return Err(BridgeError::OutOfMemory {
                device: self.device,
                requested: bytes as u64,
                attempts: 1,
            });
        }
        raw::create_buffer(&self.context, bytes)
            .map_err(|c| cl_error(self.device, "clCreateBuffer", c, bytes as u64))
    }

    fn free(&self, block: Buffer<u8>) {
        drop(block);
    }
}

/// Everything one device needs once it is used: created on first use, never at discovery.
pub(crate) struct DeviceState {
    pub(crate) entry: DeviceEntry,
    pub(crate) context: Arc<Context>,
    pub(crate) queue: CommandQueue,
    /// A second in-order queue for [`Executor::upload`](bridge_core::exec::Executor::upload)s
    /// into fresh buffers: an upload from one thread then runs while the kernels another thread
    /// enqueued on `queue` run, instead of waiting behind them (a fresh buffer is used by no
    /// queued command: the pool holds back the memory of buffers queued kernels still use).
    pub(crate) transfer: CommandQueue,
    pub(crate) pool: CachingPool<ClAllocator>,
    /// The backend instance that opened the device (weak: the backend owns its states), so that
    /// an array on the device reaches the device's executor without a process-wide lookup.
    /// (Type-erased, so that this module names nothing of the backend's.)
    pub(crate) backend: std::sync::Weak<dyn std::any::Any + Send + Sync>,
}

impl DeviceState {
    pub(crate) fn device(&self) -> Device {
        self.entry.device
    }
}

impl fmt::Debug for DeviceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceState")
            .field("device", &self.entry.device)
            .field("pool", &self.pool)
            .finish()
    }
}
