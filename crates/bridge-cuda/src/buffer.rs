//! Device buffers: [`CudaStorage`], the [`bridge_core::Storage`] of CUDA arrays, backed by a block
//! of the device's caching pool. CUDA arrays are always C-contiguous.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex};

use bridge_core::memory::PoolBlock;
use bridge_core::{Array, DType, Device, MemoryType, Result, Storage};
use cudarc::driver::CudaStream;
use cudarc::driver::sys::CUdeviceptr;

use crate::device::{CudaAllocator, Gpu, Ready, stream_key};
use crate::error;
use crate::ffi::{self, DeviceMem};
use crate::pending::Pending;

/// Where a [`CudaStorage`]'s memory comes from.
pub(crate) enum Backing {
    /// A block of the device's caching pool (returned to it on drop).
    Pool(PoolBlock<CudaAllocator>),
    /// Memory another library allocated: a non-owning handle; the owner is kept in
    /// [`CudaStorage`] and released after the handle (see [`crate::foreign`]).
    Foreign(DeviceMem),
}

/// A CUDA array's memory: a pool block on one device (or foreign device memory kept alive by
/// its owner, see [`CudaStorage::from_foreign`]), plus the last pending use (an event) and any
/// host memory an asynchronous copy into it still reads; both are waited for before the block
/// returns to the pool or the owner is released.
pub struct CudaStorage {
    pub(crate) block: Backing,
    pub(crate) nbytes: usize,
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) pending: Mutex<Pending<Ready>>,
    /// The owner of foreign memory; declared after `block` so it is dropped after it.
    pub(crate) owner: Option<Box<dyn Any + Send + Sync>>,
}

impl fmt::Debug for CudaStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CudaStorage({} bytes on {}{})",
            self.nbytes,
            self.gpu.device(),
            if self.is_foreign() { ", foreign" } else { "" }
        )
    }
}

impl CudaStorage {
    /// Allocate `nbytes` (uninitialised) from `gpu`'s pool.
    pub fn alloc(gpu: &Arc<Gpu>, nbytes: usize) -> Result<CudaStorage> {
        Ok(CudaStorage {
            block: Backing::Pool(gpu.alloc_bytes(nbytes)?),
            nbytes,
            gpu: Arc::clone(gpu),
            pending: Mutex::new(Pending::default()),
            owner: None,
        })
    }

    /// The device address (for kernel arguments).
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.mem().ptr()
    }

    /// The underlying allocation (a non-owning handle for foreign memory).
    pub fn mem(&self) -> &DeviceMem {
        match &self.block {
            Backing::Pool(b) => b,
            Backing::Foreign(m) => m,
        }
    }

    /// Whether the memory belongs to another library (wrapped with
    /// [`CudaStorage::from_foreign`]) rather than to the device's pool.
    pub fn is_foreign(&self) -> bool {
        matches!(self.block, Backing::Foreign(_))
    }

    /// Block until all work that may use the buffer has finished: its last recorded use, then
    /// everything queued in the device's (primary) context, i.e. bridge-cuda's streams and any
    /// other library sharing the context. Used before handing the memory to another library.
    pub fn synchronize(&self) -> Result<()> {
        self.wait()?;
        self.gpu
            .context()
            .synchronize()
            .map_err(error::op(self.gpu.device(), "cuCtxSynchronize"))
    }

    /// The device this lives on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending<Ready>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record that work on `stream` uses this buffer: dropping the buffer will wait for it, and
    /// [`CudaStorage::wait`] blocks on it. The stream must already be ordered after the
    /// buffer's earlier uses ([`CudaStorage::wait_on`]).
    pub fn mark_used(&self, stream: &CudaStream) -> Result<()> {
        let ready = Arc::new(self.gpu.record(stream)?);
        self.set_pending(ready);
        Ok(())
    }

    /// Record `ready` (an event after the work using this buffer) as its last use.
    pub(crate) fn set_pending(&self, ready: Arc<Ready>) {
        self.pending().set(ready);
    }

    /// Keep `host` (the source of an asynchronous copy into this buffer) alive until the last
    /// recorded use has completed.
    pub(crate) fn keep_host(&self, host: Vec<u8>) {
        self.pending().keep(host);
    }

    /// Block until the last recorded use of the buffer has completed.
    pub fn wait(&self) -> Result<()> {
        self.pending().wait()
    }

    /// Make `stream` wait for the last recorded use (no host blocking; nothing when that use
    /// was on `stream` itself or has completed).
    pub fn wait_on(&self, stream: &CudaStream) -> Result<()> {
        let ev = {
            let mut p = self.pending();
            p.collect();
            p.to_wait_on(stream_key(stream))
        };
        match ev {
            Some(r) => r.wait_on(stream),
            None => Ok(()),
        }
    }

    /// Fill every byte with `value` (blocking).
    pub fn fill_bytes(&self, value: u8) -> Result<()> {
        self.wait()?;
        let s = self.gpu.stream()?;
        ffi::memset_async(self.mem(), value, &s)?;
        s.synchronize()
            .map_err(error::op(self.gpu.device(), "cuStreamSynchronize"))
    }

    /// Fill every byte with `value`, queued on `stream` after the buffer's earlier uses (no
    /// host blocking); the fill becomes the buffer's last use.
    pub fn fill_bytes_on(&self, value: u8, stream: &CudaStream) -> Result<()> {
        self.wait_on(stream)?;
        ffi::memset_async(self.mem(), value, stream)?;
        self.mark_used(stream)
    }
}

impl Drop for CudaStorage {
    fn drop(&mut self) {
        if self.is_foreign() {
            // The owner gives the memory back to its library right after this: finish every
            // bridge-cuda use first, including work not recorded with `mark_used`.
            if let Err(e) = self.synchronize() {
                log::warn!("synchronising before releasing foreign CUDA memory failed: {e}");
            }
        } else if let Err(e) = self.wait() {
            log::warn!("waiting for a CUDA buffer's pending work before freeing it failed: {e}");
        }
        // Fields drop next in declaration order: the (non-owning) handle, then the owner.
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
