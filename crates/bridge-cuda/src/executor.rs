//! [`CudaExecutor`]: the [`Executor`] of a CUDA device (raw buffer: [`CudaStorage`]).
//!
//! **One stream per executor.** Every upload, fill, launch and read of an executor is queued on
//! its own stream, in order, and the host waits only where it must: [`Executor::read`] (the
//! bytes are needed), [`Executor::synchronize`], a large upload (its borrowed source must be
//! consumed before the call returns) and a buffer dropped while a kernel still uses it. A large
//! upload fills a fresh buffer, so it goes on a stream of its own (`ARRAYBRIDGE_CUDA_UPLOAD=own`,
//! the default; `shared` queues it behind the kernels as before) and runs beside the kernels in
//! flight: one worker's upload overlaps another's kernels (detection's batches in flight). Small
//! uploads (up to `ARRAYBRIDGE_DIRECT_COPY_KB`, 1 MiB by default) are copied into a ring of
//! pinned host buffers and sent asynchronously; a ring buffer is reused only once its copy has
//! completed (the `pending` module's ring). A buffer filled in place
//! ([`Executor::upload_filled`]: detection's and `locate`'s packed frames) is written straight
//! into a page-locked buffer of a second ring and sent by one DMA: on a stream of its own under
//! `ARRAYBRIDGE_CUDA_UPLOAD=own`, the call returning once the copy has completed (as the
//! staged upload does: the leased stream is synchronised when it goes back to the device's
//! pool), else queued behind the kernels and asynchronous (`ARRAYBRIDGE_CUDA_PACK=pageable`: a
//! host vector and the staged copy, as before). Each launch records one event, shared by its buffer
//! arguments as their last use (the `pending` module), so the device pool never hands out
//! memory a queued kernel still reads.
//!
//! `ARRAYBRIDGE_CUDA_LAUNCH=sync` makes every operation wait for its own completion (the
//! behaviour before the stream was kept), for A/B comparisons on a GPU.
//!
//! **One executor per device.** [`CudaExecutor::new`] and [`CudaExecutor::from_gpu`] hand out
//! clones of the device's one executor (its stream, program lookup and upload ring), created on
//! first use; [`Gpu::executors_created`] counts how many were ever made (only
//! [`CudaExecutor::with_mode`] makes another, for A/B comparisons).
//!
//! Programs are looked up by the text of their `&'static` [`KernelSource`] (its address and
//! length: equal keys are the same bytes) and the options, compared in place, so a launch
//! neither hashes the source text, nor allocates, nor takes the device-wide program lock;
//! kernel handles and their parameter sizes are cached by the [`crate::Program`].

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::sync::{Arc, Mutex, MutexGuard};

use bridge_core::exec::{Executor, KernelArg as ExecArg, sealed, upload_through_scratch};
use bridge_core::kernel::KernelSource;
use bridge_core::{Array, BridgeError, Device, Result};
use cudarc::driver::CudaStream;

use crate::buffer::{CudaStorage, storage_of};
use crate::device::{Gpu, Program, Ready, gpu};
use crate::error;
use crate::ffi::{self, PinnedMem};
use crate::pending::Ring;
use crate::transfer::direct_copy_max;

/// How an executor's operations complete (`ARRAYBRIDGE_CUDA_LAUNCH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LaunchMode {
    /// Queued on the executor's stream; the host waits only to read (the default).
    #[default]
    Stream,
    /// Every operation waits for its own completion.
    Sync,
}

impl LaunchMode {
    /// The process's setting (`ARRAYBRIDGE_CUDA_LAUNCH=stream|sync`, read once).
    pub fn get() -> LaunchMode {
        LaunchMode::parse(&bridge_core::tuning::choice("ARRAYBRIDGE_CUDA_LAUNCH"))
    }

    /// The mode a knob value names (`sync`, anything else the default).
    pub fn parse(v: &str) -> LaunchMode {
        if v.trim().eq_ignore_ascii_case("sync") {
            LaunchMode::Sync
        } else {
            LaunchMode::Stream
        }
    }
}

/// Pinned buffers of the small-upload ring in flight at most.
const RING_BUFFERS: usize = 16;

/// Page-locked buffers of uploads filled in place kept at most (more exist only while several
/// threads fill at once: detection's workers; the ring frees the extra ones as they retire).
const FILL_BUFFERS: usize = 3;

/// The largest upload filled in place into page-locked memory (three such buffers stay
/// locked); a larger one is packed into host memory and sent by the staged copy.
const FILL_MAX: usize = 256 << 20;

/// Program-cache key of an executor ([`bridge_core::kernel::launch_key`]); the entry keeps the
/// options themselves, compared on every hit.
type ExecKey = (usize, usize, u64);

/// A cached program with the options it was built with.
type Kept = (Vec<String>, Arc<Program>);

/// What every clone of an executor shares; one per [`Gpu`] for its default executor.
struct Shared {
    stream: Arc<CudaStream>,
    mode: LaunchMode,
    programs: Mutex<HashMap<ExecKey, Kept>>,
    ring: Mutex<Ring<Ready, PinnedMem>>,
    /// Page-locked buffers that uploads filled in place are written into.
    fills: Mutex<Ring<Ready, PinnedMem>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The executor of one CUDA device: its own stream, a program lookup without hashing, and a
/// ring of pinned buffers for small uploads (see the [module docs](self)). Clones share all
/// three.
#[derive(Clone)]
pub struct CudaExecutor {
    gpu: Arc<Gpu>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for CudaExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaExecutor")
            .field("device", &self.gpu.device())
            .field("mode", &self.shared.mode)
            .finish()
    }
}

impl CudaExecutor {
    /// The executor of CUDA device `ordinal` (a clone of the device's one executor);
    /// [`bridge_core::BridgeError::BackendUnavailable`] without a driver or that device.
    pub fn new(ordinal: usize) -> Result<Self> {
        Self::from_gpu(gpu(ordinal)?)
    }

    /// The executor of the device `array` lives on, from the array's own memory (the array
    /// carries its device: no lookup); `Unsupported` for an array that is not CUDA memory.
    pub fn of_array(array: &bridge_core::Array) -> Result<Self> {
        let storage = array
            .storage::<crate::buffer::CudaStorage>()
            .ok_or_else(|| {
                bridge_core::BridgeError::Unsupported(format!(
                    "the array is {} memory on {}, not CUDA memory",
                    array.memory_type(),
                    array.device()
                ))
            })?;
        Self::from_gpu(Arc::clone(storage.gpu()))
    }

    /// The executor of an opened device: a clone of its one executor, created on first use in
    /// the process's [`LaunchMode`].
    pub fn from_gpu(gpu: Arc<Gpu>) -> Result<Self> {
        let mut slot = lock(&gpu.executor);
        let kept = slot
            .as_ref()
            .and_then(|s| Arc::clone(s).downcast::<Shared>().ok());
        let shared = match kept {
            Some(s) => s,
            None => {
                let s = Self::shared_state(&gpu, LaunchMode::get())?;
                *slot = Some(Arc::clone(&s) as Arc<dyn std::any::Any + Send + Sync>);
                s
            }
        };
        drop(slot);
        Ok(CudaExecutor { gpu, shared })
    }

    /// A new executor of an opened device in `mode`, with its own stream (for A/B
    /// comparisons of launch modes; everything else uses the device's one executor).
    pub fn with_mode(gpu: Arc<Gpu>, mode: LaunchMode) -> Result<Self> {
        let shared = Self::shared_state(&gpu, mode)?;
        Ok(CudaExecutor { gpu, shared })
    }

    fn shared_state(gpu: &Gpu, mode: LaunchMode) -> Result<Arc<Shared>> {
        let stream = gpu.new_stream()?;
        gpu.executors_created
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Arc::new(Shared {
            stream,
            mode,
            programs: Mutex::new(HashMap::new()),
            ring: Mutex::new(Ring::new(RING_BUFFERS)),
            fills: Mutex::new(Ring::new(FILL_BUFFERS)),
        }))
    }

    /// The device handle.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The executor's stream (every operation of the executor is queued on it).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.shared.stream
    }

    /// How operations complete.
    pub fn mode(&self) -> LaunchMode {
        self.shared.mode
    }

    fn sync_stream(&self) -> Result<()> {
        self.shared
            .stream
            .synchronize()
            .map_err(error::op(self.gpu.device(), "cuStreamSynchronize"))
    }

    /// In [`LaunchMode::Sync`], wait for what was just queued.
    fn settle(&self) -> Result<()> {
        match self.shared.mode {
            LaunchMode::Sync => self.sync_stream(),
            LaunchMode::Stream => Ok(()),
        }
    }

    fn program(&self, src: &'static KernelSource, opts: &[&str]) -> Result<Arc<Program>> {
        let key: ExecKey = bridge_core::kernel::launch_key(src, opts);
        if let Some((kept, p)) = lock(&self.shared.programs).get(&key)
            && bridge_core::kernel::same_options(kept, opts)
        {
            return Ok(Arc::clone(p));
        }
        let p = self.gpu.program(src, opts)?;
        let kept = opts.iter().map(|s| (*s).to_owned()).collect();
        lock(&self.shared.programs).insert(key, (kept, Arc::clone(&p)));
        Ok(p)
    }

    /// A small upload: copied into a pinned ring buffer, sent asynchronously.
    fn upload_small(&self, st: &CudaStorage, bytes: &[u8]) -> Result<()> {
        // ring buffers of 64 KiB, or the next power of two for larger uploads
        let want = bytes.len().next_power_of_two().max(64 << 10);
        let alloc = || PinnedMem::alloc(self.gpu.context(), self.gpu.device(), want);
        let mut ring = lock(&self.shared.ring);
        let mut buf = ring.take(alloc)?;
        if buf.len() < bytes.len() {
            buf = alloc()?;
        }
        buf.as_mut_slice()[..bytes.len()].copy_from_slice(bytes);
        let s = &self.shared.stream;
        // SAFETY: the pinned buffer goes back to the ring with the event recorded right after
        // this copy and is not written again before that event has completed.
        unsafe { ffi::htod_async(st.mem(), 0, &buf.as_slice()[..bytes.len()], s)? };
        let ready = Arc::new(self.gpu.record(s)?);
        st.set_pending(Arc::clone(&ready));
        ring.retire(ready, buf);
        Ok(())
    }
}

/// Whether uploads filled in place are packed into page-locked memory
/// (`ARRAYBRIDGE_CUDA_PACK=pinned`, the default) or into a host vector that the staged copy
/// sends (`pageable`, the behaviour before).
fn pack_pinned() -> bool {
    bridge_core::tuning::choice("ARRAYBRIDGE_CUDA_PACK") != "pageable"
}

/// Whether large uploads go on a stream of their own (`ARRAYBRIDGE_CUDA_UPLOAD=own`, the
/// default) or behind the executor's kernels (`shared`, the behaviour before).
fn upload_on_own_stream() -> bool {
    bridge_core::tuning::choice("ARRAYBRIDGE_CUDA_UPLOAD") != "shared"
}

impl sealed::Sealed for CudaExecutor {}

impl Executor for CudaExecutor {
    type Buffer = CudaStorage;

    fn device(&self) -> Device {
        self.gpu.device()
    }

    fn has_fp64(&self) -> bool {
        true
    }

    fn is_cpu(&self) -> bool {
        false
    }

    fn upload(&self, bytes: &[u8]) -> Result<CudaStorage> {
        let st = CudaStorage::alloc(&self.gpu, bytes.len().max(4))?;
        if bytes.is_empty() {
            return Ok(st);
        }
        if bytes.len() <= direct_copy_max() {
            self.upload_small(&st, bytes)?;
            self.settle()?;
        } else if upload_on_own_stream() {
            // a fresh buffer (its memory idle: a dropped buffer waits for its last use) staged
            // on a stream of its own, so the copy runs beside the kernels queued on the
            // executor's stream; it returns once the copy has completed, so later launches see
            // the bytes
            let s = self.gpu.stream()?;
            self.gpu.h2d_staged(st.mem(), bytes, &s)?;
        } else {
            // staged through the pinned chunks behind the queued kernels; returns once `bytes`
            // has been consumed
            self.gpu.h2d_staged(st.mem(), bytes, &self.shared.stream)?;
        }
        Ok(st)
    }

    fn upload_filled(
        &self,
        bytes: usize,
        scratch: &mut Vec<u64>,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<()>,
    ) -> Result<CudaStorage> {
        if bytes <= direct_copy_max() || bytes > FILL_MAX || !pack_pinned() {
            return upload_through_scratch(self, bytes, scratch, fill);
        }
        let refused = std::cell::Cell::new(false);
        let alloc = || {
            PinnedMem::alloc(self.gpu.context(), self.gpu.device(), bytes)
                .inspect_err(|_| refused.set(true))
        };
        // the ring's lock is held only to take and to hand back a buffer, not while packing
        let taken = lock(&self.shared.fills).take(alloc);
        let buf = match taken {
            Ok(b) if b.len() >= bytes => Ok(b),
            Ok(_) => alloc(),
            Err(e) => Err(e),
        };
        let mut buf = match buf {
            Ok(b) => b,
            // page-locked memory is the host's to refuse: without it, the staged copy as before
            Err(_) if refused.get() => return upload_through_scratch(self, bytes, scratch, fill),
            Err(e) => return Err(e),
        };
        fill(&mut buf.as_mut_slice()[..bytes])?;
        let st = CudaStorage::alloc(&self.gpu, bytes)?;
        let lease;
        let s: &CudaStream = if upload_on_own_stream() {
            lease = self.gpu.stream()?;
            &lease
        } else {
            &self.shared.stream
        };
        // SAFETY: `buf` goes back to the ring with the event recorded right after this copy and
        // is handed out again only once that event has completed (`Ring::take`); `st` is a
        // fresh buffer, and its pending event makes every later use wait for the copy.
        unsafe { ffi::htod_async(st.mem(), 0, &buf.as_slice()[..bytes], s)? };
        let ready = match self.gpu.record(s) {
            Ok(r) => Arc::new(r),
            Err(e) => {
                // no event to hand the buffer to: it is freed only once the copy has ended, and
                // leaked where even that cannot be known
                if s.synchronize().is_err() {
                    std::mem::forget(buf);
                }
                return Err(e);
            }
        };
        st.set_pending(Arc::clone(&ready));
        lock(&self.shared.fills).retire(Arc::clone(&ready), buf);
        if self.shared.mode == LaunchMode::Sync {
            // the copy's own completion (it may be on another stream than the executor's)
            ready.synchronize()?;
        }
        Ok(st)
    }

    fn alloc(&self, bytes: usize) -> Result<CudaStorage> {
        CudaStorage::alloc(&self.gpu, bytes.max(4))
    }

    fn zeroed(&self, bytes: usize) -> Result<CudaStorage> {
        let st = CudaStorage::alloc(&self.gpu, bytes.max(4))?;
        st.fill_bytes_on(0, &self.shared.stream)?;
        self.settle()?;
        Ok(st)
    }

    fn launch(
        &self,
        program: &'static KernelSource,
        opts: &[&str],
        entry: &str,
        global: &[usize],
        local: &[usize],
        args: &[ExecArg<'_, CudaStorage>],
    ) -> Result<()> {
        let prog = self.program(program, opts)?;
        self.gpu.launch(
            &prog,
            entry,
            global,
            Some(local),
            args,
            Some(&self.shared.stream),
        )?;
        self.settle()
    }

    fn read(&self, buf: &CudaStorage, bytes: usize) -> Result<Vec<u8>> {
        if bytes > buf.nbytes {
            return Err(BridgeError::invalid_argument(
                "read",
                format!("{bytes} bytes of a {}-byte buffer", buf.nbytes),
            ));
        }
        let mut out: Vec<u8> = Vec::with_capacity(bytes);
        if bytes > 0 {
            let s = &self.shared.stream;
            buf.wait_on(s)?;
            let dst: &mut [MaybeUninit<u8>] = &mut out.spare_capacity_mut()[..bytes];
            if bytes <= direct_copy_max() {
                ffi::dtoh_sync(dst, buf.mem(), 0, s)?;
            } else {
                self.gpu.d2h_staged(dst, buf.mem(), s)?;
            }
            // SAFETY: the copy returned Ok after synchronising the stream, so all `bytes`
            // bytes were written.
            unsafe { out.set_len(bytes) };
        }
        lock(&self.shared.ring).reclaim();
        Ok(out)
    }

    fn read_at(&self, buf: &CudaStorage, offset: usize, bytes: usize) -> Result<Vec<u8>> {
        if offset.checked_add(bytes).is_none_or(|end| end > buf.nbytes) {
            return Err(BridgeError::invalid_argument(
                "read_at",
                format!("{bytes} bytes at {offset} of a {}-byte buffer", buf.nbytes),
            ));
        }
        let mut out: Vec<u8> = Vec::with_capacity(bytes);
        if bytes > 0 {
            let s = &self.shared.stream;
            buf.wait_on(s)?;
            let dst: &mut [MaybeUninit<u8>] = &mut out.spare_capacity_mut()[..bytes];
            ffi::dtoh_sync(dst, buf.mem(), offset, s)?;
            // SAFETY: the copy returned Ok after synchronising the stream, so all `bytes`
            // bytes were written.
            unsafe { out.set_len(bytes) };
        }
        lock(&self.shared.ring).reclaim();
        Ok(out)
    }

    fn synchronize(&self) -> Result<()> {
        self.sync_stream()?;
        lock(&self.shared.ring).reclaim();
        Ok(())
    }

    fn launches_are_async(&self) -> bool {
        self.shared.mode == LaunchMode::Stream
    }

    /// The driver's free and total memory (`cuMemGetInfo`) and the pool's figures.
    fn memory_stats(&self) -> Option<bridge_core::memory::MemoryStats> {
        self.gpu.memory_stats().ok()
    }

    fn buffer_of<'a>(&self, array: &'a Array) -> Option<&'a CudaStorage> {
        storage_of(array)
            .ok()
            .filter(|st| st.gpu().device() == self.gpu.device())
    }
}

#[cfg(test)]
mod tests {
    use super::LaunchMode;

    #[test]
    fn launch_mode_knob() {
        assert_eq!(LaunchMode::parse("sync"), LaunchMode::Sync);
        assert_eq!(LaunchMode::parse(" SYNC "), LaunchMode::Sync);
        assert_eq!(LaunchMode::parse("stream"), LaunchMode::Stream);
        assert_eq!(LaunchMode::parse(""), LaunchMode::Stream);
        assert_eq!(LaunchMode::default(), LaunchMode::Stream);
    }
}
