//! Device buffers: [`CudaStorage`], the [`bridge_core::Storage`] of CUDA arrays, backed by a block
//! of the device's caching pool. CUDA arrays are always C-contiguous.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex};

use bridge_core::memory::PoolBlock;
use bridge_core::{Array, DType, Device, MemoryType, Result, Storage};
use cudarc::driver::CudaStream;
use cudarc::driver::sys::CUdeviceptr;

use crate::device::{CudaAllocator, Gpu, Ready};
use crate::error;
use crate::ffi::{self, DeviceMem};

/// A CUDA array's memory: a pool block on one device, plus the last pending use (an event),
/// which is waited for before the block returns to the pool.
pub struct CudaStorage {
    block: PoolBlock<CudaAllocator>,
    nbytes: usize,
    gpu: Arc<Gpu>,
    pending: Mutex<Option<Ready>>,
}

impl fmt::Debug for CudaStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CudaStorage({} bytes on {})",
            self.nbytes,
            self.gpu.device()
        )
    }
}

impl CudaStorage {
    /// Allocate `nbytes` (uninitialised) from `gpu`'s pool.
    pub fn alloc(gpu: &Arc<Gpu>, nbytes: usize) -> Result<CudaStorage> {
        Ok(CudaStorage {
            block: gpu.alloc_bytes(nbytes)?,
            nbytes,
            gpu: Arc::clone(gpu),
            pending: Mutex::new(None),
        })
    }

    /// The device address (for kernel arguments).
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.block.ptr()
    }

    /// The underlying allocation.
    pub fn mem(&self) -> &DeviceMem {
        &self.block
    }

    /// The device this lives on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Record that work on `stream` uses this buffer: dropping the buffer will wait for it, and
    /// [`CudaStorage::wait`] blocks on it.
    pub fn mark_used(&self, stream: &CudaStream) -> Result<()> {
        let ready = self.gpu.record(stream)?;
        *self.pending.lock().unwrap_or_else(|p| p.into_inner()) = Some(ready);
        Ok(())
    }

    /// Block until the last recorded use of the buffer has completed.
    pub fn wait(&self) -> Result<()> {
        let p = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        match p {
            Some(r) => r.synchronize(),
            None => Ok(()),
        }
    }

    /// Make `stream` wait for the last recorded use (no host blocking).
    pub fn wait_on(&self, stream: &CudaStream) -> Result<()> {
        let p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        match p.as_ref() {
            Some(r) => r.wait_on(stream),
            None => Ok(()),
        }
    }

    /// Fill every byte with `value` (blocking).
    pub fn fill_bytes(&self, value: u8) -> Result<()> {
        self.wait()?;
        let s = self.gpu.stream()?;
        ffi::memset_async(&self.block, value, &s)?;
        s.synchronize()
            .map_err(error::op(self.gpu.device(), "cuStreamSynchronize"))
    }
}

impl Drop for CudaStorage {
    fn drop(&mut self) {
        if let Err(e) = self.wait() {
            log::warn!("waiting for a CUDA buffer's pending work before freeing it failed: {e}");
        }
    }
}

impl Storage for CudaStorage {
    fn memory_type(&self) -> MemoryType {
        MemoryType::Cuda
    }
    fn device(&self) -> Device {
        self.gpu.device()
    }
    fn nbytes(&self) -> usize {
        self.nbytes
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// The [`CudaStorage`] of a CUDA array, or an error naming where the array lives.
pub fn storage_of(array: &Array) -> Result<&CudaStorage> {
    array.storage::<CudaStorage>().ok_or_else(|| {
        bridge_core::BridgeError::Unsupported(format!(
            "expected a CUDA array, got {} memory on {}",
            array.memory_type(),
            array.device()
        ))
    })
}

/// Bytes needed for `dtype` × `shape`.
pub(crate) fn byte_len(dtype: DType, shape: &[usize]) -> Result<usize> {
    bridge_core::array::checked_len(shape)?
        .checked_mul(dtype.size_of())
        .ok_or_else(|| {
            bridge_core::BridgeError::invalid_argument("shape", "byte size overflows usize")
        })
}

impl Gpu {
    /// An uninitialised CUDA array of `dtype` and `shape` from the pool.
    pub fn alloc(self: &Arc<Self>, dtype: DType, shape: &[usize]) -> Result<Array> {
        let n = byte_len(dtype, shape)?;
        Array::from_storage(
            Box::new(CudaStorage::alloc(self, n)?),
            shape.to_vec(),
            dtype,
        )
    }

    /// A zero-filled CUDA array.
    pub fn zeros(self: &Arc<Self>, dtype: DType, shape: &[usize]) -> Result<Array> {
        let a = self.alloc(dtype, shape)?;
        storage_of(&a)?.fill_bytes(0)?;
        Ok(a)
    }
}
