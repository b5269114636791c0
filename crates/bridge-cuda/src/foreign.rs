//! Device memory shared with other CUDA libraries (e.g. torch) by pointer exchange, without
//! copies.
//!
//! - In: [`CudaStorage::from_foreign`] wraps memory another library allocated. The storage
//!   keeps the library's owner handle alive for its whole life, never returns the memory to
//!   the pool and never frees it: dropping the storage synchronises the device's context
//!   (so no bridge-cuda work still uses the memory), drops its non-owning handle, then the
//!   owner.
//! - Out: [`CudaStorage::export`] synchronises the storage and hands it out as an
//!   [`ExportedCuda`] — `(pointer, bytes, ordinal)` plus the storage itself as the owner — for
//!   the other library to alias. The other library must keep the [`ExportedCuda`] alive as long
//!   as it uses the memory, and must finish its own work on the memory before dropping it.
//!
//! # Stream synchronisation
//! Both directions synchronise on the host at the hand-over, so the completion contract of
//! [`crate::device`] holds: data handed over is complete for any stream of either library.
//! - Before wrapping, the caller finishes the owner's pending writes ([`from_foreign`]'s
//!   contract); torch's `export_cuda` synchronises its device.
//! - [`CudaStorage::export`] waits for the buffer's last recorded use and synchronises the
//!   context ([`CudaStorage::synchronize`]).
//! - Releasing: a foreign storage synchronises the context before dropping the owner; the
//!   other library synchronises its own streams before dropping an [`ExportedCuda`] (torch
//!   does so in the tensor's deleter).
//!
//! Both libraries use the device's *primary* context (bridge-cuda retains it; the CUDA runtime
//! under torch uses it), so device pointers are valid in both.
//!
//! [`from_foreign`]: CudaStorage::from_foreign

use std::any::Any;
use std::sync::{Arc, Mutex};

use bridge_core::{BridgeError, Device, Result, Storage};
use cudarc::driver::sys::CUdeviceptr;

use crate::buffer::{Backing, CudaStorage};
use crate::device::Gpu;
use crate::ffi::DeviceMem;

impl CudaStorage {
    /// Wrap `nbytes` of device memory at `ptr` on `gpu` that another library allocated. The
    /// storage keeps `owner` alive until it is dropped, synchronises the context before
    /// releasing it, and never frees the memory itself or returns it to the pool.
    ///
    /// Errors for a null pointer with a non-zero size.
    ///
    /// # Safety
    /// - `ptr..ptr + nbytes` is device memory on `gpu`'s device, usable from its primary
    ///   context (memory from the CUDA runtime on that device is);
    /// - it stays allocated while `owner` lives (dropping `owner` is what releases it; other
    ///   handles of the owner's library may alias it, as with any shared memory);
    /// - no pending work of the owner's library writes it any more (synchronise before
    ///   wrapping), so bridge-cuda may use it from any stream at once.
    pub unsafe fn from_foreign(
        gpu: &Arc<Gpu>,
        ptr: CUdeviceptr,
        nbytes: usize,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<CudaStorage> {
        if ptr == 0 && nbytes > 0 {
            return Err(BridgeError::invalid_argument(
                "ptr",
                format!("null device pointer for {nbytes} bytes of foreign memory"),
            ));
        }
        // SAFETY: the caller guarantees the range is device memory usable from the primary
        // context while `owner` lives; `owner` is stored next to the handle and dropped after
        // it (field order of `CudaStorage`), after the drop-time synchronisation.
        let mem = unsafe { DeviceMem::borrowed(gpu.context(), gpu.device(), ptr, nbytes) };
        Ok(CudaStorage {
            block: Backing::Foreign(mem),
            nbytes,
            gpu: Arc::clone(gpu),
            pending: Mutex::new(crate::pending::Pending::default()),
            owner: Some(owner),
        })
    }

    /// The owner of foreign memory (`None` for pool memory), for downcasting.
    pub fn foreign_owner(&self) -> Option<&(dyn Any + Send + Sync)> {
        self.owner.as_deref()
    }

    /// Take the owner of foreign memory back, releasing this wrapper (after the drop-time
    /// synchronisation, so no bridge-cuda work still uses the memory). Pool memory has no
    /// owner: the storage comes back unchanged.
    pub fn into_foreign_owner(
        mut self: Box<Self>,
    ) -> std::result::Result<Box<dyn Any + Send + Sync>, Box<CudaStorage>> {
        match self.owner.take() {
            Some(owner) => {
                drop(self);
                Ok(owner)
            }
            None => Err(self),
        }
    }

    /// Hand the storage to another library: synchronises it ([`CudaStorage::synchronize`]),
    /// then returns its pointer, size and ordinal together with the storage as the owner.
    pub fn export(self) -> Result<ExportedCuda> {
        self.synchronize()?;
        Ok(ExportedCuda { storage: self })
    }
}

/// A [`CudaStorage`] handed to another library: the device pointer, size and CUDA ordinal to
/// alias, and the storage itself, which keeps the memory allocated (out of the pool) until this
/// is dropped. Drop it only once the other library's work on the memory has finished; dropping
/// it waits for bridge-cuda's own recorded work as any [`CudaStorage`] does.
#[derive(Debug)]
pub struct ExportedCuda {
    storage: CudaStorage,
}

impl ExportedCuda {
    /// Device address of the first byte.
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.storage.device_ptr()
    }
    /// Size in bytes.
    pub fn nbytes(&self) -> usize {
        self.storage.nbytes()
    }
    /// CUDA driver ordinal of the device (torch's device index in the same process).
    pub fn ordinal(&self) -> usize {
        self.storage.gpu().ordinal()
    }
    /// The device (`cuda:N`).
    pub fn device(&self) -> Device {
        self.storage.gpu().device()
    }
    /// Block until bridge-cuda's work on the memory has finished (see
    /// [`CudaStorage::synchronize`]).
    pub fn synchronize(&self) -> Result<()> {
        self.storage.synchronize()
    }
    /// The storage (still owning the memory).
    pub fn storage(&self) -> &CudaStorage {
        &self.storage
    }
    /// Take the storage back (the other library must no longer use the memory).
    pub fn into_storage(self) -> CudaStorage {
        self.storage
    }
}
